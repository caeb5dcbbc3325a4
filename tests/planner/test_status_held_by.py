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
from planner.status import build_status, for_principal, held_by, render_status
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


@pytest.mark.parametrize(("principal", "sees_ids"), [
    ("tenant:acme/user:bob", True),  # the tenant's own session: its ids, whoever may read it
    ("tenant:globex/user:eve", False),
    ("tenant:default/user:anonymous", False),
])
def test_held_by_names_only_the_callers_tenants_sessions(principal: str, sees_ids: bool) -> None:
    report = _held_report(ACME_EVENT)
    held = for_principal(report, parse_principal(principal))["logs"]["default"]["indexes"]["text"]["heldBy"]
    expected = ("s-acme-secret-plan", "t-1") if sees_ids else (None, None)
    assert (held["sessionId"], held["turnId"]) == expected
    assert held["seq"] == 5 and held["time"] == "2099-01-01T00:00:00Z" and "tenant" not in held
    # the shared (cached) report is not changed by one caller's view
    assert report["logs"]["default"]["indexes"]["text"]["heldBy"]["sessionId"] == "s-acme-secret-plan"


def test_held_by_of_an_event_without_acl_names_no_session() -> None:
    report = _held_report({key: value for key, value in ACME_EVENT.items() if key != "acl"})
    held = for_principal(report, parse_principal("tenant:acme/user:bob"))["logs"]["default"]["indexes"]["text"]["heldBy"]
    assert held["sessionId"] is None and held["seq"] == 5


@pytest.mark.parametrize(("owner", "principal", "sees_ids"), [
    ("acme", "tenant:acme/user:bob", True),
    ("acme", "tenant:globex/user:eve", False),
    # the local operator's own import: no acl, the session created under the default tenant
    ("default", "tenant:default/user:local", True),
    (None, "tenant:default/user:local", False),  # the planner cannot tell: withheld
])
def test_an_event_without_acl_is_judged_by_its_sessions_tenant(owner: str | None, principal: str,
                                                                sees_ids: bool) -> None:
    report = build_status({"default": 9}, {("default", "text"): _watermark(4), ("default", "vector"): _watermark(4)},
                          {("default", 5): 100.0}, now=200.0,
                          held={("default", 5): held_by(5, orjson.dumps(
                              {key: value for key, value in ACME_EVENT.items() if key != "acl"}))})
    asked: list[tuple[str, str, int]] = []

    def tenant_of(log: str, session: str, seq: int) -> str | None:
        asked.append((log, session, seq))
        return owner

    view = for_principal(report, parse_principal(principal), tenant_of)["logs"]["default"]["indexes"]
    for kind in ("text", "vector"):
        held = view[kind]["heldBy"]
        assert (held["sessionId"], held["turnId"]) == (("s-acme-secret-plan", "t-1") if sees_ids else (None, None))
    assert asked == [("default", "s-acme-secret-plan", 5)]  # once for both indexes held by it


def test_status_route_filters_held_by_by_the_keys_tenant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_status(settings: Any, bootstrap: str, *, log_id: str | None = None) -> dict[str, Any]:
        return _held_report(ACME_EVENT)

    monkeypatch.setattr(planner.status, "collect_status", fake_status)
    settings = Settings.from_env({}, home=tmp_path)
    acme_key, _ = create_key(keys_path(settings), "tenant:acme/user:bob")
    globex_key, _ = create_key(keys_path(settings), "tenant:globex/user:eve")
    client = TestClient(create_app(settings, "127.0.0.1:9", planner=object()), base_url="http://localhost:8765")
    for key, session in ((acme_key, "s-acme-secret-plan"), (globex_key, None)):
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
