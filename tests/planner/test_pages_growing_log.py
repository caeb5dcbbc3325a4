"""Pages of one query while the log grows between them: concatenated, they equal one page of
their total size taken when the first page was (SPEC §7, invariant 12), in every mode and
freshness, for callers of different access lists.

The planner tests elsewhere page over a fixed log or with one commit between pages
(``test_engine.py``, ``test_tail_ranking.py``). Here hypothesis draws the page sizes, the
principal, and what happens between pages: events appended past every watermark (the L1 tail
the next page must not see: its cursor binds the first page's head), generations committed
(the indexes the next page must not read: its cursor binds the first page's), a session
shared with the caller (whose hits would push the served ones down a rank, so a cursor's page
reads no session its first page could not), or nothing.
The corpus repeats words and texts on purpose: BM25 and cosine ties are ordered newest first
inside a list (``planner.rrf.newest_first_among_ties``), copies are collapsed, and tail chunks
are merged into the index's lists by the index's own statistics, each a place where an order
could depend on the page or the head.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.acl import parse_principal
from planner.engine import Planner
from tests.planner.corpus import IndexBuilder, acl, make_test_settings, serving

pytestmark = pytest.mark.kafka

LOG = "growing"
PRINCIPALS = {"alice": parse_principal("tenant:acme/user:alice/groups:eng"),
              "bob": parse_principal("tenant:acme/user:bob")}
CALLED = {"alice": {"*", "user:alice", "group:eng"}, "bob": {"*", "user:bob"}}
"""What each principal's access-list entries are called."""
ACCESS = [acl("acme", "*"), acl("acme", "user:alice"), acl("acme", "group:eng"), acl("acme", "user:bob")]
WORDS = ("deploy", "retry", "timeout", "cache", "broker", "重连", "тест")
_numbers = itertools.count(1)


def _session(access: dict[str, Any], texts: list[str]) -> list[dict[str, Any]]:
    """One session, a turn per text; times one second apart in creation order, some equal."""
    number = next(_numbers)
    session_id = f"g-{number}"
    events: list[dict[str, Any]] = []
    for turn, text in enumerate(texts):
        when = f"2026-02-01T00:{(number // 60) % 60:02d}:{number % 60:02d}Z"
        base = {"logId": LOG, "sessionId": session_id, "time": when, "acl": access,
                "turnId": f"{session_id}-t{turn}"}
        events += [{**base, "eventId": f"{session_id}-{turn}-s", "type": "turn.started", "role": "user"},
                   {**base, "eventId": f"{session_id}-{turn}-m", "type": "message", "role": "user",
                    "fields": {"text": text}},
                   {**base, "eventId": f"{session_id}-{turn}-e", "type": "turn.ended", "role": "assistant"}]
    return events


def _texts(seed: int) -> list[str]:
    # Deterministic per seed: a few repeated texts (copies tie), a few of different lengths.
    words = [WORDS[(seed * 7 + i) % len(WORDS)] for i in range(1 + seed % 5)]
    return [" ".join(words), " ".join(words), " ".join(reversed(words)) + f" n{seed % 3}"]


class Growing:
    def __init__(self, builder: IndexBuilder, planner: Planner) -> None:
        self.builder, self.planner, self.seed = builder, planner, 0
        self.readers: dict[str, set[str]] = {}
        """sessionId → who its access list names."""

    def append(self) -> None:
        for _ in range(2):
            self.seed += 1
            access = ACCESS[self.seed % len(ACCESS)]
            events = _session(access, _texts(self.seed))
            self.readers[events[0]["sessionId"]] = set(access["read"])
            self.builder.append(events)

    def share(self, who: str) -> None:
        """The newest session ``who`` cannot read is shared with ``who`` (L1 only)."""
        names = CALLED[who]
        session = next((session for session, readers in reversed(self.readers.items())
                        if not readers & names), None)
        if session is None:
            return
        self.seed += 1
        self.readers[session] = self.readers[session] | {f"user:{who}"}
        self.builder.append([{"eventId": f"{session}-share-{self.seed}", "logId": LOG, "sessionId": session,
                              "type": "session.acl", "time": "2026-02-01T01:00:00Z",
                              "acl": acl("acme", *sorted(self.readers[session]))}])

    def commit(self) -> None:
        manifests = self.builder.commit()
        deadline = time.monotonic() + 10
        while any((self.planner.watermarks(LOG).get(kind) or {}).get("generationId") != manifest.generation_id
                  for kind, manifest in manifests.items()):
            assert time.monotonic() < deadline, "the watermarks never reached the new generations"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def growing(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Growing]:
    settings = make_test_settings(tmp_path_factory.mktemp("growing"), kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, LOG)
    with serving(settings, kafka_bootstrap, builder) as planner:
        state = Growing(builder, planner)
        for _ in range(6):
            state.append()
        state.commit()
        state.append()  # a tail from the start
        yield state


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(mode=st.sampled_from(["text", "vector", "hybrid"]),
       freshness=st.sampled_from(["indexed", "latest", "wait:0.2"]),
       who=st.sampled_from(sorted(PRINCIPALS)),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
       pages=st.lists(st.tuples(st.integers(1, 7), st.sampled_from(["none", "append", "commit", "share"])),
                      min_size=1, max_size=6))
def test_pages_equal_one_page_while_the_log_grows(growing: Growing, mode: str, freshness: str,
                                                    who: str, query: str,
                                                    pages: list[tuple[int, str]]) -> None:
    principal = PRINCIPALS[who]
    request = {"query": query, "log": LOG, "mode": mode, "freshness": freshness}
    total = sum(size for size, _ in pages)
    whole = growing.planner.search({**request, "k": total}, principal)
    served: list[str] = []
    cursor = None
    first: dict[str, Any] | None = None
    for size, between in pages:
        response = growing.planner.search({**request, "k": size, **({"cursor": cursor} if cursor else {})},
                                          principal)
        first = first or response
        # The position stated stays the first page's.
        assert response["asOfSeq"] == whole["asOfSeq"] == first["asOfSeq"]
        assert response["freshness"]["l1CommittedSeq"] == first["freshness"]["l1CommittedSeq"]
        served += [hit["chunkId"] for hit in response["results"]]
        cursor = response["cursor"]
        if between == "append":
            growing.append()
        elif between == "commit":
            growing.append()
            growing.commit()
        elif between == "share":
            growing.share(who)
        if not cursor:
            break
    assert len(served) == len(set(served)), "a hit served twice"
    assert served == [hit["chunkId"] for hit in whole["results"]][:len(served)]
    if cursor is None:  # the pages ran out: nothing left unserved
        assert len(served) == len(whole["results"])
    # Only sessions the caller may read (the one-shot page came before any share).
    assert all(growing.readers[hit["sessionId"]] & CALLED[who] for hit in whole["results"])
