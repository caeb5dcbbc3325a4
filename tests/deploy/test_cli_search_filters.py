"""``usl search`` says every filter ``POST /v1/search`` takes (docs/planner.md, HTTP API): a time
range, a status or a role could once be searched only with curl."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import deploy.cli.query
from deploy.cli import app


def sent_request(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> dict[str, Any]:
    sent: list[dict[str, Any]] = []

    def answer(principal_text: Any, json_out: bool, in_process: Any, route: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
        sent.append(route[2])
        return {"asOfSeq": 1, "results": []}

    monkeypatch.setattr(deploy.cli.query, "call_planner", answer)
    result = CliRunner().invoke(app, ["search", "deploy", *args, "--json"], env={"USL_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    return sent[0]


def test_every_filter_of_the_api_has_an_option(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    request = sent_request(monkeypatch, tmp_path, "--session", "s1", "--tool", "Bash", "--tool", "Edit",
                           "--run", "r1", "--turn", "t1", "--status", "error", "--role", "user",
                           "--time-from", "2026-02-11T00:00:00Z", "--time-to", "2026-02-12T00:00:00+01:00")
    assert request["filters"] == {
        "sessionId": ["s1"], "toolName": ["Bash", "Edit"], "runId": ["r1"], "turnId": ["t1"],
        "status": ["error"], "role": ["user"],
        "timeFrom": "2026-02-11T00:00:00Z", "timeTo": "2026-02-12T00:00:00+01:00"}


def test_no_filter_option_sends_no_filters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert "filters" not in sent_request(monkeypatch, tmp_path)


def test_a_time_alone_is_a_filter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    request = sent_request(monkeypatch, tmp_path, "--time-to", "2026-02-12T00:00:00Z")
    assert request["filters"] == {"timeTo": "2026-02-12T00:00:00Z"}
