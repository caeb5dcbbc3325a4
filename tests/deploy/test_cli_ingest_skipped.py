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


TEXT_LOG_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "text_log"
TEXT_LOG = TEXT_LOG_DIR / "happy-duplicate-assistant-response-2.jsonl"


def test_a_text_log_is_refused_whole_with_its_reason_not_dead_lettered_line_by_line(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    """A real Claude Code CLI debug log named .jsonl beside a session (tests/fixtures/text_log):
    with --format it was 1,913 dead letters; without, a skipped file with no reason."""
    from streams.exceptions import NoJSONRecordsError
    from streams.importers import NO_JSON_RECORDS

    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}.", "USL_API_URL": ""}
    for fmt in (["--format", "claude-code"], []):
        result = CliRunner().invoke(app, ["ingest", str(TEXT_LOG_DIR), "--json", *fmt], env=env)
        assert result.exit_code == 0, result.output
        summary = json.loads(result.output)
        assert (summary["rejected"], summary["rejectedRecords"], summary["rejectedEarlier"]) == (0, [], 0)
        assert summary["recordsRead"] > 0 and summary["format"] == "claude-code"
        assert summary["skippedFiles"] == [str(TEXT_LOG)]
        assert summary["skippedReasons"] == {str(TEXT_LOG): NO_JSON_RECORDS}

    text = CliRunner().invoke(app, ["ingest", str(TEXT_LOG_DIR), "--format", "claude-code"], env=env)
    assert text.exit_code == 0, text.output
    assert "rejected 0" in text.output and f"skipped 1 file(s): {NO_JSON_RECORDS}:" in text.output

    # Named as PATH: an error, as a file of no known format is (`usl` says it in one line, exit 2).
    named = CliRunner().invoke(app, ["ingest", str(TEXT_LOG), "--format", "claude-code"], env=env)
    assert isinstance(named.exception, NoJSONRecordsError)
    assert str(named.exception) == f"{TEXT_LOG}: {NO_JSON_RECORDS}"


TURN_ENDS = Path(__file__).resolve().parents[1] / "fixtures" / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"


def test_a_file_of_json_records_of_no_known_format_is_skipped_with_a_reason_naming_format(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    """A real transcript beside the manifest.json its data set ships with (a JSON document of no
    known format): `skippedReasons` named every skipped file's reason but this one's, so a
    script reading it could not tell why the file was left out, nor that --format imports it."""
    from streams.importers import FORMATS

    data = tmp_path / "sessions"
    data.mkdir()
    (data / TURN_ENDS.name).write_bytes(TURN_ENDS.read_bytes())
    manifest = data / "manifest.json"
    manifest.write_text(json.dumps({"set": "main", "sources": [{"repo": "marot/spotter", "format": "claude-code"}]},
                                   indent=1))
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}.", "USL_API_URL": ""}
    result = CliRunner().invoke(app, ["ingest", str(data), "--json"], env=env)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["eventsAppended"] > 0 and summary["skippedFiles"] == [str(manifest)]
    reason = summary["skippedReasons"][str(manifest)]
    assert reason.startswith("cannot tell the format") and f"--format {'|'.join(FORMATS)}" in reason
    assert str(manifest) not in reason  # the key names the file

    text = CliRunner().invoke(app, ["ingest", str(data)], env=env)
    assert text.exit_code == 0, text.output
    assert f"skipped 1 file(s): {reason}:" in text.output and str(manifest) in text.output
