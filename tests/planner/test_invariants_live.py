"""Randomized checks of the query invariants (SPEC §10: 1, 2, 3, 8) against the real pipeline.

A real ``usl worker`` and real sinks (``deploy.testing.Stack``) index a log while a seeded
random walk interleaves appends of several sessions with different access lists and queries
through :meth:`planner.engine.Planner.search` in random freshness modes, ranking modes and
principals. Every event carries a token unique in the log, so a test can tell exactly which
events an answer holds and which it should hold. Every answer (every page) is checked for:

1. no future leak: evidence seq <= asOfSeq; no id or token of a later event anywhere in the
   response; a cursor decodes to the same asOfSeq;
2. coverage or disclosure: each readable visible event <= asOfSeq holding the queried token is
   evidence of some hit, or its seq lies in a disclosed ``uncovered`` range;
3. honest freshness: ``latest``/``wait`` only at the committed L1 seq read at query start with
   nothing uncovered; ``indexed`` never past a watermark or the L1 seq;
4. no cross-ACL leak: no hit, id, token or chunk id of an unreadable session anywhere in the
   response (results, explain, cursor); a revocation applies to the very next query; and
   appending events only a hidden session holds changes no number in a restricted principal's
   answer.

Each seed reads its own log, so its seqs and sessions are its own; the stack is shared.
"""

from __future__ import annotations

import copy
import json
import random
import string
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.testing import Stack
from planner.acl import Principal, parse_principal
from planner.cursors import decode_cursor, load_cursor_key
from planner.engine import Planner
from planner.exceptions import IndexUnavailable
from sinks.testing import wait_for_watermarks
from sinks.watermarks import WatermarkFollower
from streams.asp import validate_event
from streams.l1 import L1Producer, L1Reader
from streams.settings import Settings
from streams.testing import topic_records

pytestmark = pytest.mark.kafka

SEEDS = (11, 23, 37)
STEPS = 25
KINDS = ("structured", "text", "vector")
WATERMARK_TIMEOUT = 90.0
MAX_PAGES = 40
COMMON = ("deploy", "kafka", "watermark", "cursor", "snapshot")

PRINCIPALS: dict[str, Principal] = {
    "alice": parse_principal("tenant:acme/user:alice/groups:eng"),
    "bob": parse_principal("tenant:acme/user:bob"),
    "carol": parse_principal("tenant:acme/user:carol"),
    "dave": parse_principal("tenant:acme/user:dave/groups:eng"),
    "mallory": parse_principal("tenant:globex/user:mallory"),
}

# name → initial access list; "shr" loses bob in the revocation step.
SESSIONS: dict[str, dict[str, Any]] = {
    "pub": {"tenant": "acme", "read": ["*"]},
    "eng": {"tenant": "acme", "read": ["group:eng"]},
    "alc": {"tenant": "acme", "read": ["user:alice"]},
    "shr": {"tenant": "acme", "read": ["user:alice", "user:bob"]},
    "glx": {"tenant": "globex", "read": ["*"]},
}


def can_see(principal: Principal, acl: dict[str, Any]) -> bool:
    """The access rule of docs/planner.md, written independently of planner.acl."""
    if acl.get("tenant") != principal.tenant:
        return False
    for entry in acl.get("read") or ():
        if entry == "*" or entry == f"user:{principal.user}":
            return True
        if entry.startswith("group:") and entry[len("group:"):] in principal.groups:
            return True
    return False


# -- the model of one log --------------------------------------------------------------------


@dataclass
class Event:
    event_id: str
    session: str
    kind: str
    token: str | None
    visible: bool
    seq: int = 0


@dataclass
class Session:
    sid: str
    acl: dict[str, Any]
    started: bool = False
    turn: int = 0
    step: int = 0  # position inside the open turn; 0 = no open turn
    events: list[Event] = field(default_factory=list)


# Inside a turn: turn.started, user message, tool.call, tool.result, hidden note, assistant
# message, turn.ended.
_TURN = ("turn.started", "user", "call", "result", "hidden", "assistant", "turn.ended")


class LogModel:
    """What has been appended to one log, with the seq of every event."""

    def __init__(self, log_id: str, rng: random.Random, producer: L1Producer, reader: L1Reader) -> None:
        self.log_id = log_id
        self.rng = rng
        self.producer = producer
        self.reader = reader
        self.sessions = {name: Session(f"{log_id}-{name}-s", dict(acl)) for name, acl in SESSIONS.items()}
        self.events: dict[str, Event] = {}
        self.tokens: dict[str, Event] = {}
        self.clock = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
        self.counter = 0
        self.high = 0

    # -- generating events --

    def _token(self) -> str:
        while True:
            token = "zq" + "".join(self.rng.choice(string.ascii_lowercase) for _ in range(9))
            if token not in self.tokens:
                return token

    def _phrase(self, token: str) -> str:
        return f"{self.rng.choice(COMMON)} {token} {self.rng.choice(COMMON)}"

    def _event(self, session: Session, kind: str, *, token: str | None = None, visible: bool = True,
               **extra: Any) -> dict[str, Any]:
        self.counter += 1
        # One second of log time per event: no turn is ever idle long enough for a tick to cut it.
        self.clock += timedelta(seconds=1)
        event_id = f"{session.sid}-e{self.counter:04d}x"
        raw = {"eventId": event_id, "logId": self.log_id, "sessionId": session.sid, "type": kind,
               "time": self.clock.strftime("%Y-%m-%dT%H:%M:%SZ"), "acl": dict(session.acl), **extra}
        if not visible:
            raw["visibility"] = "hidden"
        record = Event(event_id, session.sid, kind, token, visible)
        session.events.append(record)
        self.events[event_id] = record
        if token is not None:
            self.tokens[token] = record
        return validate_event(raw)

    def next_event(self, session: Session) -> dict[str, Any]:
        if not session.started:
            session.started = True
            token = self._token()
            return self._event(session, "session.started", token=token,
                               fields={"title": f"work on {self._phrase(token)}", "model": "m1"})
        turn = f"{session.sid}-t{session.turn}"
        step = _TURN[session.step]
        session.step = (session.step + 1) % len(_TURN)
        if step == "turn.ended":
            session.turn += 1
        if step in ("turn.started", "turn.ended"):
            return self._event(session, step, turnId=turn, role="user")
        token = self._token()
        if step == "user":
            return self._event(session, "message", token=token, turnId=turn, role="user",
                               fields={"text": f"please {self._phrase(token)}"})
        if step == "call":
            return self._event(session, "tool.call", token=token, turnId=turn, role="assistant",
                               fields={"toolName": "Bash", "toolCallId": f"{turn}-c",
                                       "input": {"command": f"run {self._phrase(token)}"}})
        if step == "result":
            return self._event(session, "tool.result", token=token, turnId=turn, role="tool",
                               fields={"toolName": "Bash", "toolCallId": f"{turn}-c", "status": "ok",
                                       "output": f"finished {self._phrase(token)}"})
        if step == "hidden":
            return self._event(session, "message", token=token, visible=False, turnId=turn,
                               role="assistant", fields={"text": f"internal {self._phrase(token)}"})
        return self._event(session, "message", token=token, turnId=turn, role="assistant",
                           fields={"text": f"done {self._phrase(token)}"})

    def close_turn(self, session: Session) -> dict[str, Any] | None:
        if session.step == 0:
            return None
        turn = f"{session.sid}-t{session.turn}"
        session.step, session.turn = 0, session.turn + 1
        return self._event(session, "turn.ended", turnId=turn, role="user")

    def short_turn(self, session: Session, text: str | None = None) -> list[dict[str, Any]]:
        """A whole turn with one user message (``text``, else a planted phrase)."""
        assert session.step == 0
        turn = f"{session.sid}-t{session.turn}"
        session.turn += 1
        token = self._token()
        return [
            self._event(session, "turn.started", turnId=turn, role="user"),
            self._event(session, "message", token=token, turnId=turn, role="user",
                        fields={"text": f"{text or self._phrase(token)} {token}"}),
            self._event(session, "turn.ended", turnId=turn, role="user"),
        ]

    def settle(self, session: Session) -> list[dict[str, Any]]:
        """Events that close every open unit of ``session``: its open turn, or the run of
        session-level events (session.started, session.acl) after its last turn, which only
        the next unit's start closes (docs/chunking.md)."""
        if session.step:
            event = self.close_turn(session)
            return [event] if event is not None else []
        if session.events and session.events[-1].kind != "turn.ended":
            return self.short_turn(session)
        return []

    def acl_event(self, session: Session, acl: dict[str, Any]) -> dict[str, Any]:
        session.acl = dict(acl)
        return self._event(session, "session.acl")

    # -- appending --

    def append(self, events: list[dict[str, Any]]) -> int:
        """Append ``events`` to L1 and learn each one's seq by reading it back."""
        for event in events:
            self.producer.append(event)
        self.producer.flush()
        highest = self.reader.committed_seq(self.log_id)
        for seq, event in self.reader.read(self.log_id, self.high + 1, highest):
            self.events[event["eventId"]].seq = seq
        missing = [e["eventId"] for e in events if not self.events[e["eventId"]].seq]
        assert not missing, f"appended events not read back from L1: {missing}"
        self.high = highest
        return highest

    # -- who may read what --

    def readable(self, principal: Principal) -> set[str]:
        return {s.sid for s in self.sessions.values() if can_see(principal, s.acl)}

    def session_of(self, sid: str) -> Session:
        return next(s for s in self.sessions.values() if s.sid == sid)


# -- the shared stack ------------------------------------------------------------------------


@dataclass
class Live:
    settings: Settings
    stack: Stack
    producer: L1Producer
    planner: Planner
    follower: WatermarkFollower
    key: bytes


@pytest.fixture(scope="module")
def live(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    prefix = f"t{uuid.uuid4().hex[:10]}."
    settings = Settings.from_env(
        {}, home=Path(tmp_path_factory.mktemp("invariants")) / "home", topic_prefix=prefix,
        bootstrap_servers=kafka_bootstrap, l1_partitions=4, stream_partitions=2,
        sink_batch_seconds=0.3, tick_every_seqs=8, embedder="hash:64",
    )
    stack = Stack(settings)
    producer: L1Producer | None = None
    follower: WatermarkFollower | None = None
    planner: Planner | None = None
    try:
        stack.worker()
        stack.sinks(",".join(KINDS))
        producer = L1Producer(kafka_bootstrap, settings)
        follower = WatermarkFollower(kafka_bootstrap, settings).start()
        planner = Planner(settings, kafka_bootstrap, follower=follower)
        yield Live(settings, stack, producer, planner, follower, load_cursor_key(settings))
    finally:
        if planner is not None:
            planner.close()
        if follower is not None:
            follower.stop()
        if producer is not None:
            producer.close()
        stack.close()


# -- one answer, checked ---------------------------------------------------------------------


@dataclass
class Answer:
    request: dict[str, Any]
    who: str
    pages: list[dict[str, Any]]
    readable: set[str]
    dumps: list[str]


class Walk:
    """The random walk of one seed over its own log."""

    def __init__(self, live: Live, seed: int) -> None:
        self.live = live
        self.seed = seed
        self.rng = random.Random(seed)
        self.reader = L1Reader(live.settings.bootstrap_servers or "", live.settings)
        self.model = LogModel(f"inv{seed}-{uuid.uuid4().hex[:6]}", self.rng, live.producer, self.reader)
        self.answers: list[Answer] = []
        self.step = 0

    def close(self) -> None:
        self.reader.close()

    def where(self, request: dict[str, Any], who: str) -> str:
        return f"seed {self.seed} step {self.step} {who} {request}"

    # -- actions --

    def append_some(self) -> None:
        names = self.rng.sample(sorted(self.model.sessions), k=self.rng.randint(1, 3))
        left = {name: self.rng.randint(1, 4) for name in names}
        events = []
        while left:  # interleaved; each session keeps its own order
            name = self.rng.choice(sorted(left))
            events.append(self.model.next_event(self.model.sessions[name]))
            left[name] -= 1
            if not left[name]:
                del left[name]
        self.model.append(events)

    def random_query(self) -> Answer | None:
        who = self.rng.choice(sorted(PRINCIPALS))
        roll = self.rng.random()
        planted = [t for t, e in self.model.tokens.items() if e.seq]
        readable = self.model.readable(PRINCIPALS[who])
        mine = [t for t in planted if self.model.tokens[t].session in readable and self.model.tokens[t].visible]
        if roll < 0.4 and mine:
            query = self.rng.choice(mine)
        elif roll < 0.6 and planted:
            query = self.rng.choice(planted)
        elif roll < 0.8 and planted:
            query = f"{self.rng.choice(planted)} {self.rng.choice(COMMON)}"
        else:
            query = " ".join(self.rng.sample(COMMON, k=self.rng.randint(1, 2)))
        request = {
            "query": query,
            "freshness": self.rng.choice(("indexed", "latest", "wait:2")),
            "mode": self.rng.choice(("hybrid", "hybrid", "text", "vector")),
            "k": self.rng.choice((3, 100)),
            "explain": self.rng.random() < 0.5,
            "log": self.model.log_id,
        }
        return self.ask(who, request)

    def ask(self, who: str, request: dict[str, Any]) -> Answer | None:
        """Run ``request`` (every page) and check each page; None when refused as documented."""
        principal = PRINCIPALS[who]
        where = self.where(request, who)
        before_watermarks = {kind for (log, kind) in self.live.follower.snapshot() if log == self.model.log_id}
        before = self.reader.committed_seq(self.model.log_id)
        try:
            first = self.live.planner.search(request, principal)
        except IndexUnavailable:
            required = {"structured", "text"} | ({"vector"} if request["mode"] != "text" else set())
            # Only an indexed query of a log some required sink has not committed yet.
            assert request["freshness"] == "indexed", where
            assert required - before_watermarks, f"{where}: 503 although every index had a watermark"
            return None
        after = self.reader.committed_seq(self.model.log_id)
        pages = [first]
        while pages[-1]["cursor"] and len(pages) < MAX_PAGES:
            pages.append(self.live.planner.search({**request, "cursor": pages[-1]["cursor"]}, principal))
        readable = self.model.readable(principal)
        answer = Answer(request, who, pages, readable, [])
        self.check_freshness(answer, before, after, where)
        for number, page in enumerate(pages):
            self.check_page(answer, page, f"{where} page {number}")
        self.check_coverage(answer, where)
        self.answers.append(answer)
        return answer

    # -- the invariants --

    def check_freshness(self, answer: Answer, before: int, after: int, where: str) -> None:
        first = answer.pages[0]
        fresh = first["freshness"]
        mode = answer.request["freshness"].split(":")[0]
        as_of, l1 = first["asOfSeq"], fresh["l1CommittedSeq"]
        assert fresh["asOfSeq"] == as_of, where
        assert fresh["mode"] == mode, where
        assert fresh["label"] in (mode, f"{mode}-partial"), (where, fresh)
        assert (fresh["label"] == mode) == (not fresh["uncovered"]), (where, fresh)
        assert before <= l1 <= after, (where, before, fresh, after)
        assert as_of <= l1, (where, fresh)
        for span in fresh["uncovered"]:
            assert 1 <= span["fromSeq"] <= span["toSeq"] <= as_of, (where, fresh)
        if fresh["label"] in ("latest", "wait"):
            # Honest freshness: the committed seq at query start, with nothing left out.
            assert as_of == l1 and not fresh["uncovered"], (where, fresh)
            assert before <= as_of <= after, (where, before, as_of, after)
        if mode in ("latest", "wait"):
            assert as_of == l1, (where, fresh)
        if mode == "indexed":
            built = [w["builtThroughSeq"] for w in fresh["watermarks"].values() if w is not None]
            assert built and all(as_of <= b for b in built), (where, fresh)
            assert fresh["tailScan"] is None, (where, fresh)
        if as_of < before:  # an answer that lags is never labelled latest
            assert fresh["label"] != "latest", (where, fresh)
        for page in answer.pages[1:]:
            assert page["asOfSeq"] == as_of, (where, page["asOfSeq"], as_of)

    def check_page(self, answer: Answer, page: dict[str, Any], where: str) -> None:
        model = self.model
        as_of = page["asOfSeq"]
        for hit in page["results"]:
            assert hit["sessionId"] in answer.readable, (where, hit["sessionId"], answer.readable)
            raw = hit["text"].encode("utf-8")
            listed = set()
            for piece in hit["evidence"]:
                event = model.events.get(piece["eventId"])
                assert event is not None, (where, piece)
                listed.add(event.event_id)
                # No future leak, the true seq, the hit's own session, a visible event.
                assert piece["seq"] <= as_of, (where, piece, as_of)
                assert piece["seq"] == event.seq, (where, piece, event)
                assert event.session == hit["sessionId"], (where, piece, hit["sessionId"])
                assert event.visible, (where, piece)
                assert 0 <= piece["start"] <= piece["end"] <= len(raw), (where, piece, len(raw))
                if event.token is not None:
                    span = raw[piece["start"]:piece["end"]].decode("utf-8", errors="replace")
                    assert event.token in span, (where, piece, span)
            # Every planted token in the text is an event the hit cites as evidence.
            for word in hit["text"].split():
                token = word.strip(".,;:=[]()\"'")
                if token in model.tokens:
                    assert model.tokens[token].event_id in listed, (where, token, hit)
        # Nothing about later events, hidden events or unreadable sessions anywhere.
        body = copy.deepcopy(page)
        if "explain" in body:
            body["explain"].pop("request", None)
        text = json.dumps(body)
        if page["cursor"]:
            payload = decode_cursor(page["cursor"], key=self.live.key, now=time.time(), ttl_seconds=1e9)
            assert payload["asOfSeq"] == as_of, (where, payload)
            assert payload["logId"] == model.log_id, where
            text += json.dumps(payload)
        for session in model.sessions.values():
            if session.sid not in answer.readable:
                assert session.sid not in text, (where, session.sid)
        for event in model.events.values():
            secret = event.seq > as_of or not event.visible or event.session not in answer.readable
            if not secret:
                continue
            assert event.event_id not in text, (where, event)
            if event.token is not None:
                assert event.token not in text, (where, event)
        answer.dumps.append(text)

    def check_coverage(self, answer: Answer, where: str) -> None:
        request = answer.request
        if request["mode"] == "vector" or len(answer.pages) >= MAX_PAGES:
            return
        as_of = answer.pages[0]["asOfSeq"]
        uncovered = answer.pages[0]["freshness"]["uncovered"]
        found = {piece["eventId"] for page in answer.pages for hit in page["results"]
                 for piece in hit["evidence"]}
        for word in request["query"].split():
            event = self.model.tokens.get(word)
            if event is None:
                continue
            if event.seq <= as_of and event.visible and event.session in answer.readable:
                disclosed = any(s["fromSeq"] <= event.seq <= s["toSeq"] for s in uncovered)
                assert event.event_id in found or disclosed, (
                    f"{where}: event {event} matches, is readable and <= asOfSeq {as_of}, but is "
                    f"neither found nor disclosed (uncovered {uncovered})")
            elif request["mode"] == "text" and len(request["query"].split()) == 1:
                # Not readable, hidden or later than the snapshot: nothing may match it.
                assert answer.pages[0]["results"] == [], (where, answer.pages[0]["results"])

    def check_chunk_ids(self) -> None:
        """No answer names a chunk of a session its principal could not read at the time."""
        owner: dict[str, str] = {}
        for record in topic_records(self.live.settings, "chunks"):
            if record.get("kind") == "chunk" and record.get("logId", self.model.log_id) == self.model.log_id:
                owner[record["chunkId"]] = record["sessionId"]
        for answer in self.answers:
            for page in answer.pages:
                for hit in page["results"]:
                    owner.setdefault(hit["chunkId"], hit["sessionId"])
        assert owner, f"seed {self.seed}: no chunk of the log was found"
        for answer in self.answers:
            hidden = [chunk for chunk, sid in owner.items()
                      if sid.startswith(self.model.log_id) and sid not in answer.readable]
            for text in answer.dumps:
                leaked = [chunk for chunk in hidden if chunk in text]
                assert not leaked, (answer.who, answer.request, leaked)

    # -- scripted steps --

    def revoke(self) -> None:
        """bob loses the shared session; his very next query sees nothing of it."""
        shared = self.model.sessions["shr"]
        if sum(1 for e in shared.events if e.token and e.visible) < 2:
            self.model.append([self.model.next_event(shared) for _ in range(3)])
        tokens = [e.token for e in shared.events if e.token and e.visible and e.seq]
        self.model.append([self.model.acl_event(shared, {"tenant": "acme", "read": ["user:alice"]})])
        assert shared.sid not in self.model.readable(PRINCIPALS["bob"])
        for freshness in ("indexed", self.rng.choice(("latest", "wait:2"))):
            query = " ".join([*self.rng.sample(tokens, k=min(2, len(tokens))), "deploy", "kafka"])
            request = {"query": query, "freshness": freshness, "mode": self.rng.choice(("hybrid", "text")),
                       "k": 100, "explain": True, "log": self.model.log_id}
            answer = self.ask("bob", request)
            if answer is None:
                continue
            sessions = {hit["sessionId"] for page in answer.pages for hit in page["results"]}
            assert shared.sid not in sessions, self.where(request, "bob")

    def quiesce(self) -> int:
        """Close every open unit and wait until every index covers the whole log."""
        events = [e for s in self.model.sessions.values() for e in self.model.settle(s)]
        if events:
            self.model.append(events)
        seq = self.model.high
        wait_for_watermarks(self.live.settings, seq, KINDS, log_id=self.model.log_id,
                            timeout=WATERMARK_TIMEOUT)
        deadline = time.monotonic() + WATERMARK_TIMEOUT
        # The planner's follower must have seen them too.
        while time.monotonic() < deadline:
            table = self.live.follower.snapshot()
            if all(int((table.get((self.model.log_id, k)) or {}).get("builtThroughSeq", 0)) >= seq
                   for k in KINDS):
                break
            time.sleep(0.2)
        return seq


def normalized(response: dict[str, Any], key: bytes) -> dict[str, Any]:
    """A response without what may move when only hidden data is appended: seqs, watermarks,
    generations and tail-scan ranges (and the reasons, which quote those numbers)."""
    body = copy.deepcopy(response)
    body.pop("asOfSeq")
    for name in ("asOfSeq", "l1CommittedSeq", "indexThroughSeq", "watermarks", "tailScan", "reasons"):
        body["freshness"].pop(name, None)
    if body.get("cursor"):
        payload = decode_cursor(body["cursor"], key=key, now=time.time(), ttl_seconds=1e9)
        for name in ("asOfSeq", "generations", "l1Seq", "lines", "issuedAt"):
            payload.pop(name, None)
        body["cursor"] = payload
    explain = body.get("explain")
    if explain is not None:
        explain.pop("generations", None)
        explain.pop("tailScan", None)
        for name in ("asOfSeq", "l1CommittedSeq", "indexThroughSeq", "indexCutSeq", "reasons"):
            explain["freshness"].pop(name, None)
    return body


def tail_readable(response: dict[str, Any]) -> int:
    return int(((response.get("explain") or {}).get("tailScan") or {}).get("readableCandidates", 0))


def compare_after_hidden_append(walk: Walk) -> None:
    """The same queries by a restricted principal before and after events only a session it
    cannot read holds: identical answers up to seqs, watermarks, generations and tail ranges."""
    rng = walk.rng
    who = rng.choice(("bob", "carol", "dave", "mallory"))
    principal = PRINCIPALS[who]
    hidden = [s for s in walk.model.sessions.values() if not can_see(principal, s.acl)]
    target = rng.choice(hidden)
    query = " ".join(rng.sample(COMMON, k=2))
    requests = [{"query": query, "freshness": freshness, "mode": mode, "k": 100, "explain": True,
                 "log": walk.model.log_id}
                for freshness in ("indexed", "latest") for mode in ("hybrid", "text")]
    walk.quiesce()
    before = [walk.ask(who, request) for request in requests]
    assert all(answer is not None for answer in before)

    # A whole hidden turn that repeats the query's words (it would move BM25 statistics,
    # counts and ranks if any of it reached the restricted principal).
    walk.model.append(walk.model.short_turn(target, " ".join(query.split() * 12)))
    immediately = [walk.ask(who, request) for request in requests if request["freshness"] == "latest"]
    walk.quiesce()
    indexed_after = [walk.ask(who, request) for request in requests]

    def same(a: Answer | None, b: Answer | None, label: str) -> None:
        assert a is not None and b is not None
        where = f"seed {walk.seed} {who} hidden append to {target.sid}: {label} {a.request}"
        assert len(a.pages) == len(b.pages) == 1, where
        assert tail_readable(a.pages[0]) == tail_readable(b.pages[0]), where
        assert normalized(a.pages[0], walk.live.key) == normalized(b.pages[0], walk.live.key), where

    latest_before = [a for a in before if a is not None and a.request["freshness"] == "latest"]
    for a, b in zip(latest_before, immediately, strict=True):
        same(a, b, "latest before vs latest right after")
    for a, b in zip(before, indexed_after, strict=True):
        same(a, b, "before vs after indexing")


@pytest.mark.parametrize("seed", SEEDS)
def test_invariants_hold_on_a_random_walk_over_the_live_pipeline(live: Live, seed: int) -> None:
    walk = Walk(live, seed)
    try:
        revoke_at = walk.rng.randint(8, 16)
        walk.append_some()
        for walk.step in range(1, STEPS + 1):
            if walk.step == revoke_at:
                walk.revoke()
            elif (roll := walk.rng.random()) < 0.1:
                walk.quiesce()  # indexes catch up: indexed answers and index hits
            elif roll < 0.5:
                walk.append_some()
            else:
                walk.random_query()
        compare_after_hidden_append(walk)
        walk.check_chunk_ids()
        assert any(page["results"] for answer in walk.answers for page in answer.pages)
    finally:
        walk.close()


def test_vector_mode_hits_carry_the_text_their_evidence_points_into(live: Live) -> None:
    walk = Walk(live, 5)
    try:
        session = walk.model.sessions["pub"]
        walk.model.append([walk.model.next_event(session) for _ in range(1 + len(_TURN))])
        walk.quiesce()
        request = {"query": "deploy kafka watermark cursor snapshot", "freshness": "indexed",
                   "mode": "vector", "k": 100, "log": walk.model.log_id}
        response = live.planner.search(request, PRINCIPALS["carol"])
        if not response["results"] or {hit["origin"] for hit in response["results"]} != {"index"}:
            pytest.fail(f"precondition: indexed vector hits expected, got {response['results']}")
        for hit in response["results"]:
            size = len(hit["text"].encode("utf-8"))
            assert all(piece["end"] <= size for piece in hit["evidence"]), (hit["evidence"], hit["text"])
    finally:
        walk.close()
