"""What every command group of the ``usl`` command line shares: settings, the local broker,
the two consoles, JSON output, the options several commands spell alike, and the one way a
command reports a planner error.

The consoles are made on first use: a command that prints only JSON (``usl search --json``
through the API) never imports rich, which is a good part of a shell command's start-up
(docs/benchmarks.md).
"""

from __future__ import annotations

import json
import sys
from functools import cache
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from streams.names import LOG_ID, LOG_ID_HINT
from streams.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

    from planner.exceptions import PlannerError

__all__ = ["LOG_OPTION", "PRINCIPAL_OPTION", "bootstrap_servers", "err", "escape", "fail", "load_settings", "out",
           "print_json", "render_rows"]

_CELL_CHARS = 80


def _log_name(value: str) -> str:
    # Refused up front: `usl ingest --log "team a"` appended nothing and dead-lettered every
    # record of the file for its logId, exiting 0.
    if not LOG_ID.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a log name: {LOG_ID_HINT}")
    return value


LOG_OPTION = typer.Option("default", "--log", envvar="USL_LOG", help="Log (L1 partition) to use.",
                          callback=_log_name)
PRINCIPAL_OPTION = typer.Option(None, "--as", envvar="USL_DEFAULT_PRINCIPAL",
                                help="Principal, e.g. tenant:acme/user:alice/groups:eng.")


def load_settings() -> Settings:
    """The settings of this process, from the environment."""
    return Settings.from_env()


def bootstrap_servers(current: Settings) -> str:
    """The Kafka bootstrap servers: the configured cluster, else the local broker (started if
    it is not running)."""
    if current.bootstrap_servers:
        return current.bootstrap_servers  # as ensure_broker answers, without loading the broker's module
    from deploy.kafka.broker import ensure_broker

    return ensure_broker(current)


@cache
def out() -> Console:
    """The console of human output (stdout)."""
    from rich.console import Console

    return Console()


@cache
def err() -> Console:
    """The console of progress, warnings and errors (stderr)."""
    from rich.console import Console

    return Console(stderr=True)


def escape(text: str) -> str:
    """``text`` with rich markup escaped, to print as it is."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (the ``--json`` output of every command)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def fail(exc: PlannerError, json_out: bool) -> NoReturn:
    """End the command with a planner error: the API's JSON error body (``--json``) or one red
    line with its hint, and exit code 2."""
    from planner.exceptions import error_body

    if json_out:
        print_json(error_body(exc))
    else:
        err().print(f"[red]error {exc.status} {exc.code}:[/] {escape(exc.message)}")
        if exc.hint:
            err().print(f"  {escape(exc.hint)}")
    raise typer.Exit(2)


def render_rows(response: dict[str, Any]) -> None:
    """Human output of SQL and SessionQL: the rows as a table, then one line on the snapshot
    the answer reflects (and the normalized query, for SessionQL)."""
    from rich.table import Table

    table = Table(*map(str, response["columns"]), show_lines=False, header_style="bold")
    for row in response["rows"]:
        table.add_row(*(_cell(value) for value in row))
    out().print(table)
    parts = [f"{response['rowCount']} row{'s' if response['rowCount'] != 1 else ''}"
             + (" (truncated)" if response["truncated"] else ""),
             f"asOfSeq {response['asOfSeq']}"]
    for kind, generation in response.get("generations", {}).items():
        parts.append(f"{kind} gen {generation.get('generationId') if isinstance(generation, dict) else generation}")
    if response.get("uncovered"):
        span = response["uncovered"]
        parts.append(f"uncovered {span['fromSeq']}..{span['toSeq']}")
    out().print(escape(" · ".join(parts)), style="dim")
    if response.get("query"):
        out().print(escape(f"query: {response['query']}"), style="dim")
    if response.get("notice"):
        out().print(escape(response["notice"]), style="dim")


def _cell(value: Any) -> str:
    if value is None:
        return "[dim]NULL[/]"
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    if len(text) > _CELL_CHARS:
        text = text[: _CELL_CHARS - 1] + "…"
    return escape(text)
