"""``usl ingest`` says which logs the events went to: an ASP event names its own log, and --log
only names the log of records that do not."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploy.cli import app
from streams.testing import session_events

pytestmark = pytest.mark.kafka


def test_an_asp_file_of_another_log_is_named_where_it_went(tmp_path: Path, kafka_bootstrap: str) -> None:
    """Found by a new user: re-importing an export with --log reimp printed 'appended 0 events to
    log 'reimp' ... 5215 already in L1' while every event named log 'default'."""
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}.", "USL_API_URL": ""}
    events = session_events("s-exported", turns=2)
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in events))

    result = CliRunner().invoke(app, ["ingest", str(path), "--format", "asp", "--log", "reimp", "--json"], env=env)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["eventsByLog"] == {"default": len(events)} and summary["eventsAppended"] == len(events)

    result = CliRunner().invoke(app, ["ingest", str(path), "--format", "asp", "--log", "reimp"], env=env)
    assert result.exit_code == 0, result.output
    assert "to logs 'default'" in result.output and "to log 'reimp'" not in result.output
    assert f"{len(events)} event(s) name their own log ('default': {len(events)})" in result.output

    # Without --log there is no --log to explain: the summary line says where the events went.
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({**event, "logId": "elsewhere"}) + "\n" for event in events))
    result = CliRunner().invoke(app, ["ingest", str(other), "--format", "asp"], env=env)
    assert result.exit_code == 0, result.output
    assert "to logs 'elsewhere'" in result.output and "name their own log" not in result.output
