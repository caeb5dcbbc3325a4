"""``usl ingest`` of a Claude Code projects directory: a file of summaries only (a session left
before its first prompt) is skipped and named with its reason, not dead-lettered line by line,
named as PATH too. Real transcript: tests/fixtures/claude_summaries."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploy.cli import app
from streams.importers.claude_code import SUMMARIES_ONLY

pytestmark = pytest.mark.kafka

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude_summaries"
SUMMARIES = FIXTURES / "a3e1f0c4-7b2d-4c9e-9f15-6d8b2a47c3e1.jsonl"


def test_a_file_of_summaries_only_is_skipped_with_its_reason(tmp_path: Path, kafka_bootstrap: str) -> None:
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}.", "USL_API_URL": ""}
    result = CliRunner().invoke(app, ["ingest", str(FIXTURES), "--json"], env=env)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["rejected"], summary["rejectedRecords"]) == (0, [])
    assert summary["eventsAppended"] > 0 and summary["format"] == "claude-code"
    assert summary["skippedFiles"] == [str(SUMMARIES)]
    assert summary["skippedReasons"] == {str(SUMMARIES): SUMMARIES_ONLY}

    named = CliRunner().invoke(app, ["ingest", str(SUMMARIES)], env=env)
    assert named.exit_code == 0, named.output
    assert "read 0 records" in named.output and "rejected 0" in named.output
    assert f"skipped 1 file(s): {SUMMARIES_ONLY}:" in named.output and str(SUMMARIES) in named.output
