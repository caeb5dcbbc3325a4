"""``usl deadletters`` lists what was rejected, newest first, from the broker; a re-import of a
file that still holds a bad line says so instead of reporting the file clean."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploy.cli import app

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPT = ROOT / "examples" / "sessions" / "claude-code-session.jsonl"


def _with_bad_line(path: Path, bad: str) -> Path:
    lines = TRANSCRIPT.read_text().splitlines()
    path.write_text("\n".join([*lines[:3], bad, *lines[3:]]) + "\n")
    return path


def _usl(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_deadletters_newest_first_by_log_and_a_reimport_names_the_bad_line(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}.", "USL_API_URL": ""}
    first = _with_bad_line(tmp_path / "first.jsonl", '{"type": "user", "cut')
    second = _with_bad_line(tmp_path / "second.jsonl", '{"type": "user", "message": 7, "sk": "AKIAIOSFODNN7EXAMPLE"}')
    assert _usl(env, "deadletters").strip() == "no dead letters"
    one = json.loads(_usl(env, "ingest", str(first), "--json"))
    assert one["rejected"] == 1 and one["rejectedEarlier"] == 0
    _usl(env, "ingest", str(second), "--log", "other", "--json")

    again = json.loads(_usl(env, "ingest", str(first), "--json"))
    assert again["eventsAppended"] == 0 and again["rejected"] == 0  # not dead-lettered twice ...
    assert again["rejectedEarlier"] == 1  # ... but the summary says the line is still bad
    assert again["rejectedEarlierRecords"][0]["record"] == "first.jsonl:4"
    assert "still bad" in _usl(env, "ingest", str(first))

    letters = json.loads(_usl(env, "deadletters", "--json"))["deadLetters"]
    assert [(d["sourceText"], d["logId"], d["stage"]) for d in letters] == [
        ("second.jsonl:4", "other", "ingest"), ("first.jsonl:4", "default", "ingest")]
    assert all(d["time"] and d["reason"] for d in letters)
    assert "AKIAIOSFODNN7EXAMPLE" not in json.dumps(letters)  # the raw record is redacted
    only = json.loads(_usl(env, "deadletters", "--log", "default", "--limit", "5", "--json"))["deadLetters"]
    assert [d["sourceText"] for d in only] == ["first.jsonl:4"]
    assert len(json.loads(_usl(env, "deadletters", "--limit", "1", "--json"))["deadLetters"]) == 1
    human = _usl(env, "deadletters").strip().splitlines()
    assert len(human) == 2 and "second.jsonl:4" in human[0] and "log=other" in human[0]
    assert "first.jsonl:4" in human[1] and '{"type": "user", "cut' in human[1]


def test_dead_letters_written_under_an_older_policy_are_shown_redacted_under_this_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user's byte scan after upgrading to redaction policy 2.7: the indexes are
    rebuilt under the new policy, but the dead-letter topic never is, so `usl deadletters` kept
    showing a Twilio auth token that 2.6 left beside the SID it removed. No broker needed: the
    topic's records are what read_dead_letters returns."""
    import streams.l1

    token = "05ce4249dcaa315bba76d66907c321cc"
    written = {"time": "2026-12-06T05:09:26Z", "stage": "ingest", "record": "dl-session.jsonl:6", "logId": "default",
               "reason": "missing field 'timestamp'",
               "raw": '{"type":"assistant","message":{"content":"token [REDACTED:twilio-account-sid] ' + token + '"}}'}
    monkeypatch.setattr(streams.l1, "read_dead_letters", lambda *args, **kwargs: [dict(written)])
    monkeypatch.setattr("deploy.cli._common.configured_cluster", lambda servers: servers)  # no broker to ask
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "USL_API_URL": ""}
    for args in (["deadletters"], ["deadletters", "--json"]):
        shown = _usl(env, *args)
        assert token not in shown and "dl-session.jsonl:6" in shown
    letter = json.loads(_usl(env, "deadletters", "--json"))["deadLetters"][0]
    assert letter["raw"].endswith('token [REDACTED:twilio-account-sid] [REDACTED:twilio-auth-token]"}}')


def test_a_dead_letter_cut_inside_a_secret_is_shown_without_its_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user's adversarial round (2.8): a JSONL line cut inside a GitHub token was
    dead-lettered with the token's first 18 characters, which no rule knew as a token any more.
    A letter written before the fix is shown without them too."""
    import streams.l1

    cut = "ghp_Tr8x2Lq9ZkV3mT7wY1"
    written = {"time": "2026-12-06T05:09:26Z", "stage": "ingest", "record": "cut.jsonl:9", "logId": "default",
               "reason": "invalid JSON (truncated or not JSON): unexpected end of data: line 1 column 80",
               "raw": '{"type":"user","message":{"role":"user","content":"please use ' + cut}
    monkeypatch.setattr(streams.l1, "read_dead_letters", lambda *args, **kwargs: [dict(written)])
    monkeypatch.setattr("deploy.cli._common.configured_cluster", lambda servers: servers)  # no broker to ask
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "USL_API_URL": ""}
    letter = json.loads(_usl(env, "deadletters", "--json"))["deadLetters"][0]
    assert cut[4:12] not in letter["raw"] and letter["raw"].endswith("[REDACTED:cut-token]"), letter["raw"]


def test_status_counts_each_logs_dead_letters_and_a_tally_reads_on_from_where_it_ended(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    from planner.status import DeadLetterTally
    from streams.l1 import DeadLetters
    from streams.settings import Settings

    prefix = f"t{uuid.uuid4().hex[:10]}."
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": prefix, "USL_API_URL": ""}
    _usl(env, "ingest", str(_with_bad_line(tmp_path / "a.jsonl", '{"type": "user", "cut')), "--json")
    _usl(env, "ingest", str(TRANSCRIPT), "--log", "clean", "--json")
    report = json.loads(_usl(env, "status", "--json"))
    assert report["logs"]["default"]["deadLetters"]["count"] == 1
    assert report["logs"]["default"]["deadLetters"]["byStage"] == {"ingest": 1}
    assert report["logs"]["default"]["deadLetters"]["newest"]
    assert report["logs"]["clean"]["deadLetters"] == {"count": 0, "byStage": {}, "newest": None}
    assert report["deadLetters"]["count"] == 0 and report["deadLetters"]["logsWithoutEvents"] == {}
    human = _usl(env, "status")
    assert "1 dead letter of log 'default' (ingest 1" in human and "usl deadletters --log default" in human
    assert "of log 'clean'" not in human

    settings = Settings.from_env({"USL_TOPIC_PREFIX": prefix}, home=tmp_path / "home")
    tally = DeadLetterTally()
    assert tally.read(kafka_bootstrap, settings)["default"]["count"] == 1
    letters = DeadLetters(kafka_bootstrap, settings)
    letters.publish(stage="sink", reason="r", raw="x", log_id="clean")
    letters.publish(stage="worker", reason="r", raw="y")  # unreadable before its log was known
    letters.close()
    bad = tmp_path / "bad.jsonl"  # every line rejected: the log has no event in L1 ...
    bad.write_text('{"type": "user", "cut\n')
    _usl(env, "ingest", str(bad), "--format", "claude-code", "--log", "lost", "--json")
    report = json.loads(_usl(env, "status", "--json"))  # ... and status still says why
    assert "lost" not in report["logs"] and report["deadLetters"]["logsWithoutEvents"]["lost"]["count"] == 1
    assert "1 dead letter of log 'lost', which has no events in L1" in _usl(env, "status")
    only = json.loads(_usl(env, "status", "--log", "clean", "--json"))  # --log: that log's letters alone
    assert list(only["logs"]) == ["clean"] and only["deadLetters"]["logsWithoutEvents"] == {}
    lost = json.loads(_usl(env, "status", "--log", "lost", "--json"))  # found by its letters, not "no log"
    assert lost["logs"]["lost"]["deadLetters"]["count"] == 1 and lost["logs"]["lost"]["l1CommittedSeq"] == 0
    again = tally.read(kafka_bootstrap, settings)  # read on: the same counts as a new tally's
    assert again == DeadLetterTally().read(kafka_bootstrap, settings)
    assert again["default"]["count"] == 1 and again["clean"]["byStage"] == {"sink": 1}
    assert again[None]["count"] == 1


def test_status_sources_read_beside_a_busy_collect_and_keep_nothing_once_closed(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    """The API's kept consumers serve one collect at a time: another reads through its own
    rather than queue (behind a broker that may not answer for 30 s); once the API has closed
    them a collect still answers, through consumers it closes, until the app opens them again."""
    from planner.status import StatusSources
    from streams.settings import Settings

    settings = Settings.from_env({"USL_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}."}, home=tmp_path / "home")
    sources = StatusSources()
    alone = sources.read(kafka_bootstrap, settings)
    with sources._lock:  # a collect in progress on another thread
        assert sources.read(kafka_bootstrap, settings) == alone
    sources.close()
    assert sources.read(kafka_bootstrap, settings) == alone
    assert sources._watermarks is None and sources._reader is None  # nothing reopened, nothing to leak
    sources.open()
    assert sources.read(kafka_bootstrap, settings) == alone and sources._watermarks is not None
    sources.close()


def test_a_dead_letter_a_later_import_resolves_is_no_longer_pending(tmp_path: Path, kafka_bootstrap: str) -> None:
    """The cut last line of a live transcript is dead-lettered; once the file is complete, the
    next import takes it: `usl status` counts no dead letter, `usl deadletters` lists none
    (--resolved lists it, with when), and a status tally reading on agrees. Real transcript:
    tests/fixtures/turn_ends (marot/spotter)."""
    from planner.status import DeadLetterTally
    from streams.settings import Settings

    real = ROOT / "tests" / "fixtures" / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"
    lines = real.read_bytes().splitlines()
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"\n".join([*lines[:-1], lines[-1][:150]]))
    prefix = f"t{uuid.uuid4().hex[:10]}."
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": prefix, "USL_API_URL": ""}
    _usl(env, "ingest", str(live), "--json")
    settings = Settings.from_env({"USL_TOPIC_PREFIX": prefix}, home=tmp_path / "home")
    tally = DeadLetterTally()
    assert tally.read(kafka_bootstrap, settings)["default"]["count"] == 1
    assert json.loads(_usl(env, "status", "--json"))["logs"]["default"]["deadLetters"]["count"] == 1

    live.write_bytes(b"\n".join(lines) + b"\n")
    summary = json.loads(_usl(env, "ingest", str(live), "--json"))
    assert (summary["deadLettersResolved"], summary["deadLettersResolvedRecords"]) == (1, [f"live.jsonl:{len(lines)}"])
    assert summary["rejected"] == summary["rejectedEarlier"] == 0
    assert json.loads(_usl(env, "status", "--json"))["logs"]["default"]["deadLetters"]["count"] == 0
    assert "dead letter" not in _usl(env, "status")
    assert json.loads(_usl(env, "deadletters", "--json"))["deadLetters"] == []
    listed = json.loads(_usl(env, "deadletters", "--resolved", "--json"))["deadLetters"]
    assert [(letter["record"], bool(letter["resolvedAt"])) for letter in listed] == [(f"live.jsonl:{len(lines)}", True)]
    assert "resolved" in _usl(env, "deadletters", "--resolved")
    assert tally.read(kafka_bootstrap, settings).get("default", {"count": 0})["count"] == 0
