"""Progress of ``usl ingest`` and ``usl rebuild``: totals, rate and ETA on stderr, none with
``--json``; and shell completion is offered."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from deploy.cli import app
from deploy.cli.progress import ImportProgress, count_lines, input_files, rebuild_progress
from deploy.testing import settings_env
from streams.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sessions"


@given(lines=st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=20), max_size=30),
       trailing=st.booleans())
def test_count_lines(tmp_path_factory: pytest.TempPathFactory, lines: list[str], trailing: bool) -> None:
    file = tmp_path_factory.mktemp("lines") / "f.jsonl"
    text = "\n".join(lines) + ("\n" if trailing and lines else "")
    file.write_bytes(text.encode("utf-8"))
    assert count_lines(file) == text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def directory(tmp_path: Path) -> Path:
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    (root / "a.jsonl").write_text("1\n2\n3\n")
    (root / "sub" / "b.jsonl").write_text("4\n5\n")
    (root / "notes.txt").write_text("not an input\n")
    return root


def test_positions_follow_the_record_labels(tmp_path: Path) -> None:
    root = directory(tmp_path)
    assert list(input_files(root)) == ["a.jsonl", "sub/b.jsonl"]
    shown = io.StringIO()
    console = Console(file=shown, force_terminal=True, width=200)
    with ImportProgress(root, console, enabled=True) as progress:
        assert progress.total_lines == 5 and progress.files == 2
        assert progress.position("a.jsonl:2") == 2
        assert progress.position("sub/b.jsonl:1") == 4
        assert progress.position("elsewhere:1") == -1
        for label in ("a.jsonl:1", "a.jsonl:2", "a.jsonl:3", "sub/b.jsonl:1"):
            progress.record(label)
        progress._progress.refresh()
    output = shown.getvalue()
    assert progress.records == 4
    for part in ("4/5 lines", "file 2/2", "4 records", "rec/s", "ETA"):
        assert part in output, (part, output)


def test_disabled_progress_prints_nothing(tmp_path: Path) -> None:
    shown = io.StringIO()
    with ImportProgress(directory(tmp_path), Console(file=shown, force_terminal=True), enabled=False) as progress:
        progress.record("a.jsonl:1")
    assert shown.getvalue() == "" and progress.records == 1


def test_rebuild_progress_shows_seqs_rate_and_eta() -> None:
    shown = io.StringIO()
    with rebuild_progress("text", Console(file=shown, force_terminal=True, width=200), enabled=True) as progress:
        task = progress.add_task("text", total=None, count="seq -", rate="-")
        progress.update(task, completed=40, total=100, count="seq 40/100", rate="20 seqs/s")
        progress.refresh()
    output = shown.getvalue()
    for part in ("rebuild text", "seq 40/100", "20 seqs/s", "ETA"):
        assert part in output, (part, output)


def test_shell_completion_is_offered() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "--install-completion" in result.output and "--show-completion" in result.output


@pytest.mark.kafka
def test_ingest_json_is_quiet_on_stderr(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    settings = make_settings()
    root = tmp_path / "sessions"
    root.mkdir()
    for sample in EXAMPLES.iterdir():
        (root / sample.name).write_bytes(sample.read_bytes())
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "ingest", str(root), "--json"],
                          env=settings_env(settings), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["eventsAppended"] > 0
    assert done.stderr == ""


@pytest.mark.parametrize(("reason", "group"), [
    ("invalid JSON (truncated or not JSON): unexpected end of data", "invalid JSON (truncated or not JSON)"),
    ("field 'messages[8].role' is 'weird', not one of system, developer, user, assistant, tool, function",
     "field 'messages[8].role' is 'weird', not one of system, developer, user …"),
])
def test_rejects_are_counted_under_a_reason_cut_after_a_whole_word(reason: str, group: str) -> None:
    from deploy.cli.ingest import _reason_group

    assert _reason_group(reason) == group


def test_no_bar_and_no_empty_line_off_a_terminal(tmp_path: Path) -> None:
    """Found by a platform engineer: `usl rebuild all 2>log` wrote five empty lines to the log,
    `usl ingest 2>log` one."""
    shown = io.StringIO()
    with rebuild_progress("text", Console(file=shown, force_terminal=False), enabled=True) as progress:
        task = progress.add_task("text", total=10, count="seq -", rate="-")
        progress.update(task, completed=10)
    with ImportProgress(directory(tmp_path), Console(file=shown, force_terminal=False), enabled=True) as bar:
        bar.record("a.jsonl:1")
    assert shown.getvalue() == ""
