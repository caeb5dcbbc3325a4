"""A follower names a skipped file once per reason, however often the file changes.

A skipped file is looked at again whenever it changes, and a CLI's debug log in a followed
directory is written all day: ``usl ingest --follow`` printed ``skipping PATH: holds no JSON
record ...`` on every poll where it grew, burying the lines that say what was appended."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from deploy.testing import Stack

pytestmark = pytest.mark.kafka

# A real CLI debug log named .jsonl (tests/fixtures/text_log/SOURCE.md).
TEXT_LOG = Path(__file__).resolve().parents[1] / "fixtures" / "text_log" / "happy-duplicate-assistant-response-2.jsonl"
FOLLOW_ENV = {"USL_FOLLOW_IDLE_SECONDS": "1", "USL_FOLLOW_POLL_SECONDS": "0.2"}


def _line(kind: str, number: int, message: dict[str, Any]) -> bytes:
    return orjson.dumps({"parentUuid": None, "isSidechain": False, "sessionId": "5c1d0000-0000-4000-8000-000000000001",
                         "type": kind, "uuid": f"5c1d0000-0000-4000-8000-{number:012d}",
                         "timestamp": f"2026-12-01T09:00:{number:02d}Z", "message": message}) + b"\n"


def test_a_growing_text_log_is_named_once(make_settings: Any, tmp_path: Path) -> None:
    project = tmp_path / "projects" / "demo"
    project.mkdir(parents=True)
    debug = project / "debug.jsonl"
    lines = TEXT_LOG.read_bytes().splitlines(keepends=True)
    debug.write_bytes(b"".join(lines[:20]))
    (project / "session.jsonl").write_bytes(
        _line("user", 1, {"role": "user", "content": "why does the nightly export stall"}))
    stack = Stack(make_settings())
    try:
        stack.start("follow", "ingest", "--follow", str(project.parent), env=FOLLOW_ENV)
        deadline = time.monotonic() + 90
        while "appended" not in stack.log_text("follow"):
            assert time.monotonic() < deadline, stack.log_text("follow")
            time.sleep(0.2)
        for grown in range(5):  # the log grows, as the CLI writing it goes on
            with debug.open("ab") as out:
                out.write(b"".join(lines[20 + grown * 5: 25 + grown * 5]) or b"[DEBUG] more\n")
            time.sleep(1.0)
        with (project / "session.jsonl").open("ab") as out:
            out.write(_line("user", 2, {"role": "user", "content": "and the retry after it"}))
        while stack.log_text("follow").count("appended") < 2:
            assert time.monotonic() < deadline + 60, stack.log_text("follow")
            time.sleep(0.2)
    finally:
        stack.close()
    said = [line for line in stack.log_text("follow").splitlines() if line.startswith(f"skipping {debug}")]
    assert len(said) == 1 and "holds no JSON record" in said[0], stack.log_text("follow")
