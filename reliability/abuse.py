"""Abuse cases of the fault suite: what a hostile or broken producer writes (SPEC §10,
invariants 10 and 11), injected into the running stack and checked through the API.

``foreign-tenant``   a victim session of tenant ``acme`` (readable by ``user:alice`` only), then,
                     from tenant ``intruder``: a ``session.acl`` taking it over, a message
                     injected into its turn, a new session reusing one of its eventIds, and an
                     ``x.heartbeat`` of the victim without any ``acl``. Checked: three dead
                     letters with their reasons; alice still finds the victim, nobody else does
                     (the heartbeat made nothing public); nobody finds the injected text.
``far-future-time``  a session whose open turn is dated 2099. Checked: every index still
                     reaches the log head (the round's own check), the turn is indexed, and
                     ``/v1/status`` no longer names it as holding a watermark back.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from streams.asp import validate_event
from streams.settings import Settings

__all__ = ["ALICE", "INTRUDER", "check_far_future", "check_takeover", "dead_letter_reasons",
           "far_future_session", "takeover_events", "victim_session"]

ALICE = "tenant:acme/user:alice"
INTRUDER = "tenant:intruder/user:mallory"
_DEFAULT = "tenant:default/user:local"
_ACME_ACL = {"tenant": "acme", "read": ["user:alice"]}
_INTRUDER_ACL = {"tenant": "intruder", "read": ["*"]}
_FAR_FUTURE = "2099-01-01T00:00:00Z"


def _event(event_id: str, session_id: str, kind: str, time: str, *, turn: str | None = None,
           acl: dict[str, Any] | None = None, role: str | None = None, **fields: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"eventId": event_id, "sessionId": session_id, "type": kind, "time": time,
                           "turnId": turn, "role": role, "fields": fields}
    if acl is not None:
        raw["acl"] = acl
    return validate_event(raw)


def victim_session(seed: int, n: int, time: str) -> tuple[list[dict[str, Any]], str]:
    """A closed one-turn session of tenant acme, readable by alice only, and its search word."""
    word = f"victim{seed}x{n}"
    sid = f"abuse{seed}-victim{n}"
    turn = f"{sid}-t0"
    return [
        _event(f"{sid}-e1", sid, "session.started", time, acl=_ACME_ACL, title="private"),
        _event(f"{sid}-e2", sid, "turn.started", time, turn=turn),
        _event(f"{sid}-e3", sid, "message", time, turn=turn, role="user", text=f"please check {word} now"),
        _event(f"{sid}-e4", sid, "turn.ended", time, turn=turn),
    ], word


def takeover_events(victim: list[dict[str, Any]], seed: int, n: int) -> tuple[list[dict[str, Any]], str, str]:
    """The intruder's events against ``victim``, the injected word, and the eventId it reuses."""
    sid = victim[0]["sessionId"]
    time = victim[-1]["time"]
    turn = victim[1]["turnId"]
    word = f"injected{seed}x{n}"
    reused = victim[2]["eventId"]
    return [
        _event(f"{sid}-x1", sid, "session.acl", time, acl=_INTRUDER_ACL),
        _event(f"{sid}-x2", sid, "message", time, turn=turn, role="user", acl=_INTRUDER_ACL,
               text=f"{word} was here"),
        _event(reused, f"abuse{seed}-intruder{n}", "message", time, turn=f"abuse{seed}-i{n}", role="user",
               acl=_INTRUDER_ACL, text=f"{word} under a reused event id"),
        _event(f"{sid}-x4", sid, "x.heartbeat", time),
    ], word, reused


def far_future_session(seed: int, n: int) -> tuple[list[dict[str, Any]], str]:
    """A session whose only turn is open and dated 2099, and its search word."""
    word = f"future{seed}x{n}"
    sid = f"abuse{seed}-future{n}"
    turn = f"{sid}-t0"
    return [
        _event(f"{sid}-e1", sid, "session.started", _FAR_FUTURE, title="from the future"),
        _event(f"{sid}-e2", sid, "turn.started", _FAR_FUTURE, turn=turn),
        _event(f"{sid}-e3", sid, "message", _FAR_FUTURE, turn=turn, role="user", text=f"{word} arrives early"),
    ], word


def dead_letter_reasons(settings: Settings) -> list[str]:
    """The reason of every dead letter so far."""
    from streams.testing import topic_records

    return [str(record.get("reason")) for record in topic_records(settings, "deadletters")]


def _found(api_url: str, word: str, principal: str, freshness: str) -> list[dict[str, Any]]:
    answer = httpx.post(f"{api_url}/v1/search", json={"query": word, "freshness": freshness, "k": 10},
                        headers={"X-USL-Principal": principal}, timeout=60)
    answer.raise_for_status()
    return [row for row in answer.json().get("results") or () if word in str(row.get("text", ""))]


def check_takeover(api_url: str, victim_word: str, injected_word: str,
                   letters_before: list[str], letters_after: list[str]) -> list[str]:
    """Problems seen after a takeover attempt (empty: the abuse was contained)."""
    problems: list[str] = []
    new = letters_after[len(letters_before):]
    foreign = sum("belongs to another tenant" in reason for reason in new)
    collisions = sum("already used" in reason and "another tenant" in reason for reason in new)
    if foreign < 2 or collisions < 1:
        problems.append(f"expected 2 foreign-tenant and 1 eventId-collision dead letters, got {foreign} and "
                        f"{collisions}")
    for freshness in ("indexed", "latest"):
        if not _found(api_url, victim_word, ALICE, freshness):
            problems.append(f"alice lost her own session ({freshness})")
        for principal in (INTRUDER, _DEFAULT):
            if _found(api_url, victim_word, principal, freshness):
                problems.append(f"{principal} reads alice's session ({freshness})")
        for principal in (ALICE, INTRUDER, _DEFAULT):
            if _found(api_url, injected_word, principal, freshness):
                problems.append(f"the intruder's text was indexed and found by {principal} ({freshness})")
    return problems


def check_far_future(api_url: str, word: str, session_id: str) -> list[str]:
    """Problems seen once the indexes caught up after a far-future open turn."""
    problems: list[str] = []
    # The suite's own watcher saw the watermarks reach the head; the API's follower sees them a
    # moment later, and until then its `indexed` answer is at the seq before.
    deadline = time.monotonic() + 30.0
    while not (found := _found(api_url, word, _DEFAULT, "indexed")) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not found:
        problems.append("the far-future turn is not indexed")
    status = httpx.get(f"{api_url}/v1/status", timeout=60).json()
    held = {kind: index["heldBy"] for kind, index in status["logs"]["default"]["indexes"].items()
            if (index.get("heldBy") or {}).get("sessionId") == session_id}
    if held:
        problems.append(f"status says the far-future session still holds watermarks back: {held}")
    return problems
