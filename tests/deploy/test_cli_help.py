"""What a new user reads of ``usl`` before running anything: every command's help in flowing
paragraphs at any terminal width, values named (PATH..., N, QUERY) rather than typed (``<bool>``,
``<list[Path]>``, ``{QUERY}``), usage errors in one line, ``usl --version``, and the routes
``usl serve`` says it serves (deploy/cli/_help.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from deploy.cli import app
from deploy.cli._help import flowing

WIDTHS = (60, 120)
_BORDERS = "│╭╰"


def _command_paths(command: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    command = command or typer.main.get_command(app)
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _command_paths(sub, (*path, name))


COMMANDS = list(_command_paths())


def _help(path: tuple[str, ...], width: int) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(width), "TERMINAL_WIDTH": None})
    assert result.exit_code == 0, result.output
    return result.output


def _text_of(line: str) -> str:
    return line[1:-1] if line.startswith("│") else line


def stray_breaks(output: str) -> list[str]:
    """Lines a terminal of this width did not have to break: the next line of the same column
    starts with a word that would have fitted (rich wraps greedily, so only a line break in the
    help text itself leaves one)."""
    found = []
    for above, below in pairwise(output.splitlines()):
        if (above[:1] in _BORDERS) != (below[:1] in _BORDERS) or above[:1] in "╭╰" or below[:1] in "╭╰":
            continue
        upper, lower = _text_of(above), _text_of(below)
        if not upper.strip() or not lower.strip():
            continue
        column = len(lower) - len(lower.lstrip())
        if column >= len(upper) or upper[column] == " " or (column and upper[column - 1] != " "):
            continue  # not the same column of text
        if above[:1] == "│" and column <= len(upper) - len(upper.lstrip()):
            continue  # the next row of a panel's table
        word = lower.split()[0]
        if word.startswith("["):
            continue  # [default: ...], [env var: ...]: rich lays these out as blocks of their own
        free = len(upper) - len(upper.rstrip())
        if free >= len(word) + 3:  # a space, and the padding of a panel's cell
            found.append(f"{above.rstrip()}⏎ {word}")
    return found


def test_the_check_sees_a_stray_line_break() -> None:
    broken = ("│ ingest   Append the events, each once (an imported file appends nothing            │\n"
              "│          again); rejected records go to the dead-letter topic.                    │\n")
    assert stray_breaks(broken) == [broken.splitlines()[0].rstrip() + "⏎ again);"]
    wrapped = ("│ ingest   Append the events, each once (an imported file appends nothing again);  │\n"
               "│          rejected records go to the dead-letter topic.                            │\n")
    assert stray_breaks(wrapped) == []


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(("usl", *p)) for p, _ in COMMANDS])
def test_help_reads_as_flowing_paragraphs(path: tuple[str, ...], command: Any, width: int) -> None:
    """Found by a new user: 'imported file appends nothing⏎ again' in `usl --help`, and 'with
    --follow, a⏎ line per poll' in `usl ingest --help` (typer kept the docstring's line breaks)."""
    shown = _help(path, width)
    assert not stray_breaks(shown), "\n".join(stray_breaks(shown))
    # Every word of the help is there, in order: nothing read as markup ('topic[partition]@offset').
    words = " ".join(_text_of(line).strip() for line in shown.splitlines() if line[:1] not in "╭╰")
    words = " ".join(words.split())
    for paragraph in flowing(command.help).split("\n\n"):
        assert " ".join(paragraph.split()) in words


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(("usl", *p)) for p, _ in COMMANDS])
def test_help_names_values_not_python_types(path: tuple[str, ...], command: Any) -> None:
    shown = _help(path, 120)
    assert not re.search(r"<(bool|str|int|float|Path|list\[[^\]]*\])[^>]*>", shown), shown
    assert not re.search(r"\[x?[<>]=|<=x", shown), shown  # '[x>=1]' is said in words
    usage = next(line for line in shown.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage


def test_value_names_a_user_reads() -> None:
    assert "Usage: usl ingest [OPTIONS] PATH..." in _help(("ingest",), 120)
    search = _help(("search",), 120)
    assert "Usage: usl search [OPTIONS] QUERY" in search
    assert re.search(r"--k,--limit\s+-k,-n\s+N\s", search) and re.search(r"--log\s+NAME\s", search)
    assert re.search(r"--explain\s+Show", search)  # a flag takes no value
    assert "Usage: usl export [OPTIONS] [WHAT]" in _help(("export",), 120)
    assert re.search(r"--workers\s+N\s+Pipeline worker processes to start \(at least 1\)", _help(("up",), 120))


@pytest.mark.parametrize("args", [["search"], ["search", "x", "--bogus"], ["serch", "x"], ["up", "--workers", "0"],
                                  ["apikey", "create"], ["search", "x", "-k", "many"]])
def test_a_usage_error_is_one_line(args: list[str]) -> None:
    """Found by a new user: docs/cli.md says an error is one line, yet a usage error printed the
    usage, a hint and a boxed panel."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--help`)" in lines[0], result.output
    assert not set(result.output) & set("╭╮╰╯│")


@pytest.mark.parametrize(("args", "said"), [
    (["search", "--exclude-dir=.git"], "a QUERY that starts with - goes after --: `usl search [OPTIONS] -- QUERY`"),
    (["search", "--log-level=debug"], "a QUERY that starts with - goes after --"),  # click suggests --log too
    (["sql", "-1"], "a SQL that starts with - goes after --: `usl sql [OPTIONS] -- SQL`"),
    (["ingest", "-notes.jsonl"], "a PATH that starts with - goes after --: `usl ingest [OPTIONS] -- PATH`"),
])
def test_a_value_read_as_an_unknown_option_says_how_to_pass_it(args: list[str], said: str) -> None:
    """Found by a new user: a command or flag pasted from a session as the query
    (`usl search "-e 'require Logger'"`) was refused as an unknown option, with no word of `--`."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert said in result.output and result.output.count("\n") == 1, result.output


def test_an_option_of_a_command_without_arguments_gets_no_such_hint() -> None:
    result = CliRunner().invoke(app, ["status", "--bogus"])
    assert result.exit_code == 2 and "goes after --" not in result.output, result.output


def test_version_says_what_the_code_writes() -> None:
    from importlib.metadata import version

    from streams.chunking import ChunkerConfig
    from streams.redaction import POLICY_VERSION, policy_hash

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"usl-search {version('usl-search')}\n")
    assert f"redaction policy {POLICY_VERSION} (hash {policy_hash()})" in result.output
    assert f"chunker {ChunkerConfig().version} " in result.output


def test_serve_names_every_route_the_api_serves(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user: `usl serve --help` named /v1/search, /v1/sql and status only."""
    from planner.api import create_app
    from streams.settings import Settings

    monkeypatch.setenv("USL_HOME", str(tmp_path))
    served = {getattr(route, "path", "") for route in create_app(Settings.from_env(), "127.0.0.1:9").routes} - {""}
    assert {"/v1/search", "/v1/events", "/metrics"} <= served
    shown = " ".join(_help(("serve",), 120).split())
    missing = [path for path in sorted(served) if not re.search(rf"(?<![\w/]){re.escape(path)}(?![\w/])", shown)]
    assert not missing, f"usl serve --help does not name {missing}"
