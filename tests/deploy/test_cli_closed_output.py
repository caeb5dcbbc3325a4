"""``usl … | head -1``: a reader that stops early ends the command quietly, exit code 141 (as a
program SIGPIPE ends), not 1 as for an error, and no output is dropped unsaid.

Found with ``usl search … | head -1`` (exit 1 where the shell expects 0 or 141): rich's console
exits 1 when its pipe breaks. And one large write (``--json``, ``usl export``) that the reader
stopped in the middle of was taken in part with no error, so the command exited 0: ``usl export
sessions | head -1`` said "exported 5217 rows to stdout"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.cli._help import OUTPUT_CLOSED_EXIT

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A USL_HOME with 1500 API keys: `usl apikey list` then prints some 150 KB, more than a pipe
    holds, with no broker or API to start."""
    from planner.auth import ApiKey, _write_keys, hash_key

    home = tmp_path_factory.mktemp("home")
    keys = [ApiKey(name=f"key-{number:04d}", principal=f"tenant:acme/user:u{number}", created="2026-12-08T00:00:00Z",
                   sha256=hash_key(f"usl_{number:040d}")) for number in range(1500)]
    _write_keys(home / "api-keys.json", keys)
    return home


@pytest.mark.parametrize("json_out", [[], ["--json"]], ids=["table", "json"])
def test_a_reader_that_stops_after_one_line_ends_the_command_quietly(home: Path, json_out: list[str]) -> None:
    env = {**{name: value for name, value in os.environ.items() if not name.startswith(("USL_", "KAFKA_"))},
           "USL_HOME": str(home), "PYTHONPATH": str(ROOT)}
    listing = subprocess.Popen([sys.executable, "-m", "deploy.cli", "apikey", "list", *json_out], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert listing.stdout is not None and listing.stderr is not None
    assert listing.stdout.readline()  # what `head -1` reads, then it exits
    listing.stdout.close()
    stderr = listing.stderr.read().decode()
    assert listing.wait(timeout=120) == OUTPUT_CLOSED_EXIT, stderr
    assert stderr == ""  # no traceback, no "Exception ignored ... BrokenPipeError"


def test_the_whole_output_is_written_when_the_reader_reads_it(home: Path) -> None:
    env = {**{name: value for name, value in os.environ.items() if not name.startswith(("USL_", "KAFKA_"))},
           "USL_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "apikey", "list", "--json"], cwd=ROOT, env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b'"name": "key-') == 1500
