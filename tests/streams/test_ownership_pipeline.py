"""Invariants 10 and 11 through the real broker and worker: an event without ``acl`` keeps its
session's access, another tenant's events (and a reused eventId, a duplicated JSON key) are
dead-lettered with their reason, and an open turn dated 2099 holds the log only until the
clock, bounded by append time, passes it -- and status names it while it does."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from kafka import KafkaProducer

from deploy.testing import Stack
from planner.status import collect_status
from sinks.testing import wait_for_watermarks
from streams.asp import validate_event
from streams.l1 import LogRegistry
from streams.settings import Settings
from streams.testing import append_events, topic_records, wait_until
from streams.topics import Topics

pytestmark = [pytest.mark.kafka]

ALICE = {"tenant": "acme", "read": ["user:alice"]}
EVIL = {"tenant": "evil", "read": ["*"]}
FUTURE = "2099-01-01T00:00:00Z"


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def ev(event_id: str, session: str, kind: str, *, turn: str | None = None, acl: dict[str, Any] | None = None,
       when: str | None = None, role: str | None = None, **fields: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"eventId": event_id, "sessionId": session, "type": kind, "turnId": turn,
                           "role": role, "time": when or now(), "fields": fields}
    if acl is not None:
        raw["acl"] = acl
    return validate_event(raw)


def structured_status(settings: Settings) -> dict[str, Any]:
    report = collect_status(settings, settings.bootstrap_servers or "", log_id="default")
    return dict(report["logs"]["default"]["indexes"]["structured"])


def test_ownership_and_a_far_future_turn_through_the_worker(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(tick_every_seqs=4, idle_gap_seconds=2.0, max_clock_skew_seconds=1.0)
    stack = Stack(settings)
    try:
        stack.worker(env={"USL_MAX_CLOCK_SKEW_SECONDS": str(settings.max_clock_skew_seconds)})
        stack.sinks("structured")
        assert append_events(settings, [
            ev("p1", "s-private", "session.started", acl=ALICE, title="private"),
            ev("p2", "s-private", "message", turn="t1", role="user", text="deploy the refund fix"),
            ev("p3", "s-private", "x.heartbeat"),
            ev("x1", "s-private", "session.acl", acl=EVIL),
            ev("x2", "s-private", "message", turn="t1", role="user", acl=EVIL, text="injected by evil"),
            ev("p2", "s-evil", "message", turn="e1", role="user", acl=EVIL, text="a reused event id"),
            ev("p4", "s-private", "turn.ended", turn="t1"),
        ]) == 7
        producer = KafkaProducer(bootstrap_servers=settings.bootstrap_servers)
        partition = LogRegistry(settings.bootstrap_servers or "", settings).assign("default")
        duplicated = (b'{"eventId":"d1","logId":"default","sessionId":"s-evil","sessionId":"s-private",'
                      b'"type":"message","time":"2026-12-01T00:00:00Z","fields":{"text":"which session?"}}')
        producer.send(Topics.from_settings(settings).l1, value=duplicated, partition=partition).get(timeout=30)
        producer.close()
        future_turn = [ev("f1", "s-future", "turn.started", turn="tf", when=FUTURE),
                       ev("f2", "s-future", "message", turn="tf", role="user", when=FUTURE,
                          text="a message from the far future")]
        assert append_events(settings, future_turn) == 10

        # The 2099 turn is open: the structured index is held at seq 8, and status says by what.
        wait_until(lambda: (structured_status(settings).get("heldBy") or {}).get("sessionId") == "s-future",
                   "status naming the open far-future turn", timeout=180)
        held = structured_status(settings)
        assert held["builtThroughSeq"] == 8 and held["heldBy"]["seq"] == 9 and held["heldBy"]["turnId"] == "tf"

        # Log time moves on (events dated now, appended later): the bounded 2099 turn is cut at
        # the first tick past G that follows a tick interval without its session (ticks at 12
        # and 16: its last event, seq 10, came after the tick before 12).
        time.sleep(settings.idle_gap_seconds + settings.max_clock_skew_seconds + 1.0)
        busy = [ev(f"b{n}", "s-busy", kind, turn=f"tb{n // 4}", role="user", text=f"busy {n}")
                for n, kind in enumerate(("turn.started", "message", "message", "turn.ended") * 2)]
        assert append_events(settings, busy) == 18
        wait_for_watermarks(settings, 18, ["structured"], timeout=180)
        assert structured_status(settings)["heldBy"] is None

        redacted = [r["event"] for r in topic_records(settings, "redacted") if r.get("kind") == "event"]
        private = [e for e in redacted if e["sessionId"] == "s-private"]
        assert [e["eventId"] for e in private] == ["p1", "p2", "p3", "p4"]
        assert all(e["acl"] == ALICE for e in private)  # the heartbeat did not make it public
        assert not [e for e in redacted if e["sessionId"] == "s-evil"]
        chunks = [r for r in topic_records(settings, "chunks") if r.get("kind") == "chunk"]
        assert all(c["acl"] == ALICE for c in chunks if c["sessionId"] == "s-private")
        assert "injected by evil" not in " ".join(c["text"] for c in chunks)
        future = [c for c in chunks if c["sessionId"] == "s-future"]
        assert future and not future[0].get("provisional") and future[0]["eventTime"].startswith("2099")

        letters = [r["reason"] for r in topic_records(settings, "deadletters")]
        assert sum("belongs to another tenant" in reason for reason in letters) == 2
        assert sum("already used" in reason and "another tenant" in reason for reason in letters) == 1
        assert sum("duplicate key 'sessionId'" in reason for reason in letters) == 1
    finally:
        stack.close()
