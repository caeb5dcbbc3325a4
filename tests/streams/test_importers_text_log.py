"""A file that holds no JSON record at all (a text log named ``.jsonl``) is refused whole, with
its reason, --format or not: never a dead letter per line. Real files: tests/fixtures/text_log
(slopus/happy-cli's Claude Code CLI debug log beside a real session)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from streams.exceptions import NoJSONRecordsError
from streams.follow import Follower, PositionStore
from streams.importers import NO_JSON_RECORDS, Accepted, Rejected, iter_records
from streams.testing import Clock, MemoryL1

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "text_log"
LOG = FIXTURES / "happy-duplicate-assistant-response-2.jsonl"
SESSION = FIXTURES / "b91d4412-e6c4-4e51-bb1b-585bcd78aca4.jsonl"


def follower(path: Path, l1: MemoryL1, home: Path, clock: Clock, **options: object) -> Follower:
    return Follower([path], appender=l1, store=PositionStore(home), clock=clock, idle_seconds=5, **options)


def session_events() -> list[str]:
    return [r.event["eventId"] for r in iter_records(SESSION) if isinstance(r, Accepted)]


@pytest.mark.parametrize("fmt", ["claude-code", None])
def test_a_directory_import_refuses_the_text_log_whole_and_imports_the_session(tmp_path, fmt):
    l1 = MemoryL1()
    report = follower(FIXTURES, l1, tmp_path / "home", Clock(), once=True, fmt=fmt).poll()
    assert (report.rejected, report.rejected_items, report.undetected) == (0, [], [])
    assert report.skipped == [(str(LOG), NO_JSON_RECORDS)]
    assert [e["eventId"] for e in l1.log] == session_events() != []


@pytest.mark.parametrize("fmt", ["claude-code", "asp", "openai-chat", None])
def test_the_text_log_named_on_the_command_line_is_an_error_naming_why(tmp_path, fmt):
    l1 = MemoryL1()
    with pytest.raises(NoJSONRecordsError, match="holds no JSON record: its first lines are text"):
        follower(LOG, l1, tmp_path / "home", Clock(), once=True, fmt=fmt).poll()
    assert l1.log == []
    with pytest.raises(NoJSONRecordsError):
        list(iter_records(LOG, fmt))


@pytest.mark.parametrize("junk", [b"[16:29:14.606] Starting happy CLI\n", b'ssion":"x"}\n', b"\x00\x01garbage\n"])
def test_a_transcript_whose_first_line_is_junk_is_read_as_before(tmp_path, junk):
    """The boundary: one junk line, even the first, leaves the file a transcript; its good lines
    are imported and the junk line is one dead letter with its reason."""
    path = tmp_path / SESSION.name
    path.write_bytes(junk + SESSION.read_bytes())
    for fmt in ("claude-code", None):
        results = list(iter_records(path, fmt))
        rejected = [r for r in results if isinstance(r, Rejected)]
        assert [r.record for r in rejected] == [f"{SESSION.name}:1"] and rejected[0].reason
        assert len([r for r in results if isinstance(r, Accepted)]) == len(session_events())
    l1 = MemoryL1()
    report = follower(path, l1, tmp_path / "home", Clock(), once=True, fmt="claude-code").poll()
    assert (report.rejected, report.skipped) == (1, [])
    assert len(l1.log) == len(session_events())


def test_text_lines_among_the_first_twenty_do_not_refuse_a_transcript(tmp_path):
    """A file of text lines with a JSON record within its first 20 non-empty lines is read as a
    file of records (each text line a dead letter), as before."""
    path = tmp_path / SESSION.name
    path.write_bytes(b"note\n" * 19 + SESSION.read_bytes())
    results = list(iter_records(path, "claude-code"))
    assert len([r for r in results if isinstance(r, Rejected)]) == 19


def test_a_followed_directory_gaining_a_text_log_names_it_once_and_dead_letters_nothing(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(SESSION, root / SESSION.name)
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock, fmt="claude-code")
    clock.now += 10
    tail.poll()
    clock.now += 10
    assert tail.poll().rejected == 0 and len(l1.log) == len(session_events())
    log = root / LOG.name
    text = LOG.read_bytes()
    log.write_bytes(text[: len(text) // 2])
    clock.now += 10
    report = tail.poll()
    assert (report.rejected, report.skipped) == (0, [(str(log), NO_JSON_RECORDS)])
    assert tail.poll().skipped == []  # unchanged: not named again
    log.write_bytes(text)  # the log grows: looked at again, still refused
    clock.now += 10
    report = tail.poll()
    assert (report.rejected, report.skipped) == (0, [(str(log), NO_JSON_RECORDS)])
    assert len(l1.log) == len(session_events())


_CHAT = {"messages": [{"role": "user", "content": "rotate the staging keys"},
                      {"role": "assistant", "content": "Rotated both keys."}]}


@pytest.mark.parametrize(("name", "data"), [
    # Found by review: a byte-order mark alone on the first line hid the document's opening
    # brace, and the indented lines after it read as text.
    ("bom-alone.json", b"\xef\xbb\xbf\n" + json.dumps(_CHAT, indent=2).encode()),
    ("spaced.json", b'{ "messages": [\n  {"role": "user", "content": "rotate the staging keys"},\n'
                    b'  {"role": "assistant", "content": "Rotated both keys."}\n ]\n}\n'),
])
def test_a_pretty_printed_document_however_it_opens_is_read(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    for fmt in ("openai-chat", None):
        results = list(iter_records(path, fmt))
        assert [r for r in results if isinstance(r, Rejected)] == []
        assert sum(isinstance(r, Accepted) for r in results) >= 2, fmt


def test_a_utf16_file_is_refused_for_its_encoding_not_as_text(tmp_path: Path) -> None:
    """PowerShell's `>` writes UTF-16: the accurate reason is its encoding."""
    path = tmp_path / "chat.json"
    path.write_bytes(json.dumps(_CHAT).encode("utf-16"))
    results = list(iter_records(path, "openai-chat"))
    assert results and all(isinstance(r, Rejected) and "UTF-8" in r.reason for r in results), results
