"""Status names what holds a watermark back (SPEC §10, invariant 11): ``heldBy`` is additive."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console
from starlette.testclient import TestClient

import planner.status
from planner.acl import parse_principal
from planner.api import create_app
from planner.auth import create_key, keys_path
from planner.status import build_status, for_principal, held_by
from planner.status_render import render_status
from streams.settings import Settings


def _watermark(through: int) -> dict[str, object]:
    return {"generationId": 3, "builtThroughSeq": through, "committedAt": 1.0, "line": "live"}


def test_a_lagging_index_names_the_first_event_above_its_watermark() -> None:
    raw = orjson.dumps({"eventId": "e5", "sessionId": "s-open", "turnId": "t-2099",
                        "time": "2099-01-01T00:00:00Z"})
    held = {("default", 5): held_by(5, raw)}
    report = build_status({"default": 9}, {("default", "text"): _watermark(4),
                                           ("default", "vector"): _watermark(9)},
                          {("default", 5): 100.0}, now=200.0, held=held)
    text = for_principal(report, None)["logs"]["default"]["indexes"]["text"]
    assert text["heldBy"] == {"seq": 5, "sessionId": "s-open", "turnId": "t-2099", "time": "2099-01-01T00:00:00Z"}
    assert text["lagSeqs"] == 5 and text["lagSeconds"] == 100.0  # the contract's fields are unchanged
    assert report["logs"]["default"]["indexes"]["vector"]["heldBy"] is None  # caught up
    assert report["logs"]["default"]["indexes"]["structured"]["heldBy"] is None  # missing
    out = io.StringIO()
    render_status(report, Console(file=out, width=200))
    assert "text held back by seq 5: session 's-open', turn 't-2099'" in out.getvalue()
    # Read as another tenant's principal, the ids are withheld and the line says so, never "None".
    out = io.StringIO()
    render_status(for_principal(report, parse_principal("tenant:other/user:bob")), Console(file=out, width=200))
    assert "text held back by seq 5 (its session is not shown to you)" in out.getvalue()
    assert "None" not in out.getvalue()


def test_held_by_tolerates_records_that_are_not_events() -> None:
    assert held_by(3, b"not json") == {"seq": 3, "sessionId": None, "turnId": None, "time": None, "tenant": None}
    assert held_by(3, None)["sessionId"] is None
    assert held_by(3, b'{"sessionId": 7}')["sessionId"] is None


def _held_report(event: dict[str, Any]) -> dict[str, Any]:
    return build_status({"default": 9}, {("default", "text"): _watermark(4)}, {("default", 5): 100.0},
                        now=200.0, held={("default", 5): held_by(5, orjson.dumps(event))})


ACME_EVENT = {"eventId": "e5", "sessionId": "s-acme-secret-plan", "turnId": "t-1", "time": "2099-01-01T00:00:00Z",
              "acl": {"tenant": "acme", "read": ["user:alice"]}}


def _readable_by(caller: Any, *users: str) -> Any:
    """The API's ``readable(log, session)`` for ``caller``, of a session only those users of
    acme may read; it keeps what it was asked."""
    asked: list[tuple[str, str]] = []

    def readable(log: str, session: str) -> bool:
        asked.append((log, session))
        return bool(caller.tenant == "acme" and caller.user in users)

    readable.asked = asked  # type: ignore[attr-defined]
    return readable


@pytest.mark.parametrize(("principal", "sees_ids"), [
    ("tenant:acme/user:alice", True),  # the one reader of the session
    # Found by a new user: another user of the tenant saw the id of a session only alice may
    # read (its name alone says what it is about: s-acme-secret-plan).
    ("tenant:acme/user:bob", False),
    ("tenant:globex/user:eve", False),
    ("tenant:default/user:anonymous", False),
])
def test_held_by_names_only_sessions_the_caller_may_read(principal: str, sees_ids: bool) -> None:
    report = _held_report(ACME_EVENT)
    caller = parse_principal(principal)
    readable = _readable_by(caller, "alice")
    held = for_principal(report, caller, readable)["logs"]["default"]["indexes"]["text"]["heldBy"]
    expected = ("s-acme-secret-plan", "t-1") if sees_ids else (None, None)
    assert (held["sessionId"], held["turnId"]) == expected
    assert held["seq"] == 5 and held["time"] == "2099-01-01T00:00:00Z" and "tenant" not in held
    # Another tenant's event is withheld without asking; the shared (cached) report is unchanged.
    assert readable.asked == ([] if caller.tenant != "acme" else [("default", "s-acme-secret-plan")])
    assert report["logs"]["default"]["indexes"]["text"]["heldBy"]["sessionId"] == "s-acme-secret-plan"
    # Without a planner to ask, nobody but the operator is told.
    assert for_principal(report, caller)["logs"]["default"]["indexes"]["text"]["heldBy"]["sessionId"] is None


def test_an_event_without_acl_is_judged_by_its_sessions_access_list() -> None:
    report = build_status({"default": 9}, {("default", "text"): _watermark(4), ("default", "vector"): _watermark(4)},
                          {("default", 5): 100.0}, now=200.0,
                          held={("default", 5): held_by(5, orjson.dumps(
                              {key: value for key, value in ACME_EVENT.items() if key != "acl"}))})
    for user, sees_ids in (("alice", True), ("bob", False)):
        caller = parse_principal(f"tenant:acme/user:{user}")
        readable = _readable_by(caller, "alice")
        view = for_principal(report, caller, readable)
        for kind in ("text", "vector"):
            held = view["logs"]["default"]["indexes"][kind]["heldBy"]
            assert (held["sessionId"], held["turnId"]) == (("s-acme-secret-plan", "t-1") if sees_ids else (None, None))
        assert readable.asked == [("default", "s-acme-secret-plan")]  # once for both indexes held by it


class _Planner:
    """What the status route asks of its planner."""

    def session_readable(self, log_id: str, session_id: str, principal: Any) -> bool:
        return principal.tenant == "acme" and principal.user == "alice"


def test_status_route_names_held_by_sessions_only_to_their_readers(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_status(settings: Any, bootstrap: str, *, log_id: str | None = None, **_: Any) -> dict[str, Any]:
        return _held_report(ACME_EVENT)

    monkeypatch.setattr(planner.status, "collect_status", fake_status)
    settings = Settings.from_env({}, home=tmp_path)
    alice_key, _ = create_key(keys_path(settings), "tenant:acme/user:alice")
    bob_key, _ = create_key(keys_path(settings), "tenant:acme/user:bob")
    globex_key, _ = create_key(keys_path(settings), "tenant:globex/user:eve")
    client = TestClient(create_app(settings, "127.0.0.1:9", planner=_Planner()), base_url="http://localhost:8765")
    for key, session in ((alice_key, "s-acme-secret-plan"), (bob_key, None), (globex_key, None)):
        response = client.get("/v1/status", headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200, response.text
        assert response.json()["logs"]["default"]["indexes"]["text"]["heldBy"]["sessionId"] == session
        assert "s-acme-secret-plan" not in response.text or session is not None


def test_status_names_the_indexes_each_holding_event_holds() -> None:
    """Found by a new user: four unlabelled 'first unindexed event' lines for five indexes."""
    raw = orjson.dumps({"eventId": "e5", "sessionId": "s-open", "turnId": "t-1", "time": "2099-01-01T00:00:00Z"})
    report = build_status({"default": 9}, {("default", "text"): _watermark(4), ("default", "vector"): _watermark(4),
                                           ("default", "structured"): _watermark(9)},
                          {("default", 5): 100.0}, now=200.0, held={("default", 5): held_by(5, raw)})
    out = io.StringIO()
    render_status(report, Console(file=out, width=200))
    lines = [line for line in out.getvalue().splitlines() if "held back by" in line]
    assert lines == ["  text, vector held back by seq 5: session 's-open', turn 't-1'"]
