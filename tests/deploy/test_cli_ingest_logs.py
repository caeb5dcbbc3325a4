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


def test_a_conversation_under_another_files_ids_is_reported_not_dropped(tmp_path: Path, kafka_bootstrap: str) -> None:
    """Found by a new user: two OpenAI chat datasets numbered alike ("id": "1"); the second
    file's conversation printed 'appended 0 ... 2 already in L1' and was nowhere, with no dead
    letter. Its events are conflicts now: rejected with the reason, in `usl deadletters`."""
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}.", "USL_API_URL": ""}
    for name, words in (("a.jsonl", "volcanoes"), ("b.jsonl", "glaciers")):
        (tmp_path / name).write_text(json.dumps({"id": "1", "messages": [
            {"role": "user", "content": f"tell me about {words}"},
            {"role": "assistant", "content": f"{words} are well documented."}]}) + "\n")
    first = CliRunner().invoke(app, ["ingest", str(tmp_path / "a.jsonl"), "--json"], env=env)
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["eventsAppended"] > 0
    second = CliRunner().invoke(app, ["ingest", str(tmp_path / "b.jsonl"), "--json"], env=env)
    assert second.exit_code == 0, second.output
    summary = json.loads(second.output)
    # Events that say nothing of the content (the session's start) are the same bytes: duplicates.
    assert summary["eventsAppended"] == 0
    assert summary["rejected"] == sum(summary["rejectedByReason"].values()) > 0
    assert all(reason.startswith("event already in log 'default' with other content")
               for reason in summary["rejectedByReason"])
    letters = CliRunner().invoke(app, ["deadletters", "--json"], env=env)
    assert letters.exit_code == 0, letters.output
    assert "with other content" in letters.output and "b.jsonl" in letters.output
    again = CliRunner().invoke(app, ["ingest", str(tmp_path / "a.jsonl"), "--json"], env=env)
    assert json.loads(again.output)["eventsAppended"] == 0 and json.loads(again.output)["rejected"] == 0


def test_an_export_imported_over_its_own_log_is_duplicates_not_conflicts(tmp_path: Path, kafka_bootstrap: str) -> None:
    """Found by a new user: `usl export sessions` then `usl ingest` of the export rejected all
    5 215 events as conflicts and dead-lettered them (the export's events are the log's own,
    redacted and with their access lists, so other bytes). An ASP file's ids are its
    producer's: such copies are duplicates, as docs/importers.md says; conflicts are for ids an
    importer derives from its source (test_a_conversation_under_another_files_ids_is_reported_not_dropped)."""
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}.", "USL_API_URL": ""}
    events = session_events("s-exported", turns=1)
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(event) + "\n" for event in events))
    result = CliRunner().invoke(app, ["ingest", str(first), "--format", "asp"], env=env)
    assert result.exit_code == 0, result.output
    # The same ids with other content, as an export's redacted copy has, with and without --log.
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps({**event, "fields": {**event.get("fields", {}), "x": 1}}) + "\n"
                              for event in events))
    for extra in ([], ["--log", "reimp"]):
        result = CliRunner().invoke(app, ["ingest", str(export), "--format", "asp", "--json", *extra], env=env)
        assert result.exit_code == 0, result.output
        summary = json.loads(result.output)
        assert (summary["eventsAppended"], summary["duplicatesSkipped"], summary["rejected"]) == (0, len(events), 0)
    letters = json.loads(CliRunner().invoke(app, ["deadletters", "--json"], env=env).output)
    assert letters["deadLetters"] == []
