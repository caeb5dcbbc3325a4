"""Session ownership, acl inheritance and eventId collisions (SPEC §10, invariant 10), driven
through the pure code every path shares, and through the paths that call it in-process: the
rebuild replay, the planner's tail scan and its access-list overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.asp import DEFAULT_ACL, loads_event, validate_event
from streams.exceptions import SchemaError
from streams.ownership import (
    ACL_HISTORY,
    EVENT_ID_COLLISION,
    FOREIGN_TENANT,
    Owners,
    admit,
    current_acl,
    session_of_acl,
)

ALICE = {"tenant": "acme", "read": ["user:alice"]}
BOB = {"tenant": "acme", "read": ["user:bob"]}
EVIL = {"tenant": "evil", "read": ["*"]}


def event(n: int, *, session: str = "s1", acl: dict[str, Any] | None = None, kind: str = "message",
          event_id: str | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"eventId": event_id or f"e{n}", "logId": "default", "sessionId": session,
                           "type": kind, "role": "user", "time": f"2026-11-01T09:00:{n % 60:02d}Z",
                           "fields": {"text": f"word{n}"}}
    if acl is not None:
        raw["acl"] = acl
    return validate_event(raw)


def test_validation_no_longer_invents_an_acl() -> None:
    assert "acl" not in event(1)


def test_an_event_without_acl_keeps_the_sessions_access() -> None:
    owners = Owners()
    first = owners.admit(event(1, acl=ALICE), 1)
    heartbeat = owners.admit({**event(2), "type": "x.heartbeat"}, 2)
    assert first.event is not None and heartbeat.event is not None
    assert heartbeat.verdict == "accepted" and heartbeat.event["acl"] == ALICE
    assert heartbeat.session is None  # nothing to store: the session's access did not change
    assert current_acl(owners.sessions["s1"]) == ALICE


def test_only_a_sessions_first_event_may_default() -> None:
    owners = Owners()
    first = owners.admit(event(1), 1)
    assert first.event is not None and first.event["acl"] == DEFAULT_ACL
    assert owners.sessions["s1"]["tenant"] == "default"


def test_the_owning_tenant_may_change_the_acl_and_later_events_inherit_it() -> None:
    owners = Owners()
    owners.admit(event(1, acl=ALICE), 1)
    revoke = owners.admit(event(2, acl=BOB, kind="session.acl"), 2)
    later = owners.admit(event(3), 3)
    assert revoke.verdict == "accepted" and revoke.session is not None
    assert later.event is not None and later.event["acl"] == BOB


def test_another_tenants_event_is_rejected_with_its_reason_and_changes_nothing() -> None:
    owners = Owners()
    owners.admit(event(1, acl=ALICE), 1)
    takeover = owners.admit(event(2, acl=EVIL, kind="session.acl"), 2)
    assert takeover.verdict == "rejected" and takeover.event is None
    assert takeover.reason_code == FOREIGN_TENANT and "belongs to another tenant" in str(takeover.reason)
    assert current_acl(owners.sessions["s1"]) == ALICE
    after = owners.admit(event(3), 3)
    assert after.event is not None and after.event["acl"] == ALICE


def test_a_reused_event_id_of_another_tenant_is_a_collision_not_a_duplicate() -> None:
    owners = Owners()
    owners.admit(event(1, acl=ALICE, event_id="shared"), 1)
    collision = owners.admit(event(2, session="s2", acl=EVIL, event_id="shared"), 2)
    assert collision.verdict == "rejected" and collision.reason_code == EVENT_ID_COLLISION
    assert "another tenant" in str(collision.reason)
    assert "s2" not in owners.sessions  # a rejected event creates nothing
    same_tenant = owners.admit(event(3, session="s3", acl=BOB, event_id="shared"), 3)
    assert same_tenant.verdict == "duplicate"


def test_an_id_stored_before_ownership_existed_counts_as_a_duplicate() -> None:
    assert admit(event(2, acl=EVIL), 9, session=None, first=3).verdict == "duplicate"


def test_a_record_delivered_again_resolves_as_the_first_time() -> None:
    owners = Owners()
    owners.admit(event(1, acl=ALICE), 1)
    first_time = owners.admit(event(2), 2)
    owners.admit(event(3, acl=BOB), 3)
    # At-least-once: seq 2 comes again after the state already holds seq 3's change.
    again = admit(event(2), 2, session=owners.sessions["s1"], first=owners.event_ids["e2"])
    assert again.verdict == "accepted" and again.event == first_time.event
    assert again.session is None and again.event_id is None


def test_the_acl_history_is_bounded() -> None:
    owners = Owners()
    owners.admit(event(0, acl=ALICE), 1)
    for n in range(1, 3 * ACL_HISTORY):
        owners.admit(event(n, acl={"tenant": "acme", "read": [f"user:u{n}"]}), n + 1)
    assert len(owners.sessions["s1"]["acls"]) == ACL_HISTORY


def test_known_sessions_are_owned_by_their_indexed_tenant() -> None:
    owners = Owners(known=lambda session: session_of_acl(ALICE) if session == "s1" else None)
    assert owners.admit(event(7, acl=EVIL), 7).reason_code == FOREIGN_TENANT
    inherited = owners.admit(event(8), 8)
    assert inherited.event is not None and inherited.event["acl"] == ALICE


_tenants = st.sampled_from(["acme", "evil", "default"])
_steps = st.lists(st.tuples(st.sampled_from(["s1", "s2"]), st.none() | _tenants,
                            st.sampled_from(["a", "b", "c", "d", "e"])), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_property_a_session_keeps_its_first_tenant_and_no_event_without_acl_changes_access(
    steps: list[tuple[str, str | None, str]],
) -> None:
    owners = Owners()
    created: dict[str, str] = {}
    for seq, (session, tenant, event_id) in enumerate(steps, 1):
        before = dict(owners.sessions)
        acl = None if tenant is None else {"tenant": tenant, "read": [f"user:{seq}"]}
        admission = owners.admit(event(seq, session=session, acl=acl, event_id=event_id), seq)
        if admission.verdict == "accepted":
            assert admission.event is not None
            created.setdefault(session, admission.event["acl"]["tenant"])
            if acl is None and session in before:
                assert owners.sessions[session] == before[session]
        else:
            assert owners.sessions == before
        for name, state in owners.sessions.items():
            assert state["tenant"] == created[name] == current_acl(state)["tenant"]


# -- duplicate keys ----------------------------------------------------------------------------


def test_duplicate_keys_are_refused_wherever_json_enters() -> None:
    with pytest.raises(SchemaError, match="duplicate key 'sessionId'"):
        loads_event(b'{"eventId":"e1","sessionId":"mine","sessionId":"theirs"}')
    with pytest.raises(SchemaError, match="duplicate key 'tenant'"):
        loads_event('{"acl":{"tenant":"a","tenant":"b"}}')
    assert loads_event(b'{"a":{"b":1},"c":[{"b":2}]}') == {"a": {"b": 1}, "c": [{"b": 2}]}


def test_the_asp_jsonl_reader_rejects_a_line_with_a_duplicate_key(tmp_path: Path) -> None:
    from streams.importers import Rejected
    from streams.importers.asp import iter_asp

    path = tmp_path / "events.jsonl"
    path.write_text(
        '{"eventId":"e1","sessionId":"s1","type":"message","time":"2026-11-01T09:00:00Z"}\n'
        '{"eventId":"e2","sessionId":"s1","sessionId":"victim","type":"message","time":"2026-11-01T09:00:01Z"}\n',
        encoding="utf-8")
    out = list(iter_asp(path, label="events.jsonl"))
    assert [type(item).__name__ for item in out] == ["Accepted", "Rejected"]
    rejected = out[1]
    assert isinstance(rejected, Rejected) and "duplicate key 'sessionId'" in rejected.reason


# -- the in-process paths ----------------------------------------------------------------------


def _takeover_log() -> list[tuple[int, dict[str, Any]]]:
    return [
        (1, event(1, acl=ALICE, kind="session.started")),
        (2, {**event(2), "turnId": "t1"}),
        (3, {**event(3, acl=EVIL), "turnId": "t1", "fields": {"text": "injected by evil"}}),
        (4, {**event(4, acl=EVIL, kind="session.acl")}),
        (5, {**event(5, session="s9", acl=EVIL, event_id="e2"), "turnId": "t9"}),
        (6, {**event(6), "type": "x.heartbeat"}),
        (7, {**event(7), "turnId": "t1", "type": "turn.ended"}),
    ]


def test_the_tail_scan_applies_ownership_as_the_stream_does(tmp_path: Path) -> None:
    from planner.tailscan import TailScan, chunker_for
    from tests.planner.corpus import make_test_settings

    scan = TailScan(chunker_for(make_test_settings(tmp_path, "unused:9092")), tick_every_seqs=1000)
    result = scan.run(_takeover_log(), from_seq=1, to_seq=7)
    texts = " ".join(chunk["text"] for chunk in result.chunks)
    assert "injected by evil" not in texts and "word2" in texts
    assert all(chunk["acl"] == ALICE for chunk in result.chunks)
    assert result.skipped_invalid == 3  # two foreign events, one reused id of another tenant


def test_the_tail_scan_knows_owners_of_sessions_created_below_it(tmp_path: Path) -> None:
    from planner.tailscan import TailScan, chunker_for
    from tests.planner.corpus import make_test_settings

    scan = TailScan(chunker_for(make_test_settings(tmp_path, "unused:9092")), tick_every_seqs=1000)
    tail = [(seq, e) for seq, e in _takeover_log() if seq >= 2]
    result = scan.run(tail, from_seq=2, to_seq=7, session_acls={"s1": ALICE})
    own = [chunk for chunk in result.chunks if chunk["sessionId"] == "s1"]
    assert own and all(chunk["acl"] == ALICE for chunk in own)
    assert "injected by evil" not in " ".join(chunk["text"] for chunk in own)


def test_the_rebuild_replay_applies_ownership_as_the_stream_does(tmp_path: Path) -> None:
    from sinks.rebuild import ReplayStream
    from tests.planner.corpus import make_test_settings

    replay = ReplayStream(make_test_settings(tmp_path, "unused:9092"), "default")
    out = [record for seq, e in _takeover_log() for record in replay.feed(seq, e)]
    events = [record["event"] for record in out if record["kind"] == "event"]
    assert [e["eventId"] for e in events] == ["e1", "e2", "e6", "e7"]
    assert all(e["acl"] == ALICE for e in events)
    assert replay.rejected == 3


class _Reader:
    def __init__(self, events: list[tuple[int, dict[str, Any]]]) -> None:
        self.events = events

    def read(self, log_id: str, from_seq: int, to_seq: int, *, clocks: bool = False) -> Any:
        return iter([(seq, e) for seq, e in self.events if from_seq <= seq <= to_seq])


def test_the_planners_access_lists_ignore_foreign_and_acl_less_events(tmp_path: Path) -> None:
    from planner.engine import Planner
    from tests.planner.corpus import make_test_settings

    planner = Planner(make_test_settings(tmp_path, "unused:9092"), "unused:9092")
    # The structured index knows s1 (ALICE) through seq 2; the overlay reads seqs 3..7.
    overlay = planner.access.overlay(_Reader(_takeover_log()), "default", 3, 7,  # type: ignore[arg-type]
                                     {"s1": ALICE})
    assert overlay["s1"] == ALICE
    # A session created in the range without acl defaults; one created with an acl keeps it.
    log = [(8, event(8, session="s5")), (9, event(9, session="s6", acl=BOB)), (10, event(10, session="s5", acl=EVIL))]
    later = planner.access.overlay(_Reader(log), "default", 8, 10, {})  # type: ignore[arg-type]
    assert later == {"s5": DEFAULT_ACL, "s6": BOB}
