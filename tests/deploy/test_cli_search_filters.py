"""``usl search`` says every filter ``POST /v1/search`` takes (docs/planner.md, HTTP API): a time
range, a status or a role could once be searched only with curl. And it says where the results
end at the rank depth, as the API's ``end`` does."""

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


def test_the_last_page_says_the_results_end_at_the_rank_depth(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Found by a new user: the last page of `usl search test` simply stopped; the API's `end`
    (text had more matches) was shown only by --json."""
    message = "results end at rank depth 200: text had more matches; refine the query or add filters to reach them"
    response = {"asOfSeq": 1, "results": [], "cursor": None,
                "freshness": {"label": "indexed", "l1CommittedSeq": 1, "watermarks": {}},
                "end": {"reason": "rankDepth", "depth": 200, "sources": ["text"], "message": message}}
    monkeypatch.setattr(deploy.cli.query, "call_planner", lambda *args: response)
    result = CliRunner().invoke(app, ["search", "test"], env={"USL_HOME": str(tmp_path), "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert message in result.output
