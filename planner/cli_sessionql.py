"""``usl sessionql``: a SessionQL query from the command line.

Runs the planner in this process (no API server needed) and prints the rows as a table, then
a line saying at which log position the answer was taken and which generations it read;
``--json`` prints exactly the HTTP API's response (or its error body). Importing this module
registers the command on :data:`planner.cli.app`.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from planner.cli import LOG_OPTION, _bootstrap, _print_json, _settings, app, err, out
from planner.exceptions import PlannerError, error_body
from streams.exceptions import USLError

__all__ = ["render_rows", "sessionql"]

_CELL_CHARS = 80


@app.command("sessionql")
def sessionql(
    query: str = typer.Argument(..., help='A SessionQL query, e.g. \'FROM tool_calls WHERE '
                                          'status = "error" GROUP BY toolName\' (see docs/sql.md).'),
    as_of: int = typer.Option(None, "--as-of", min=0,
                              help="Answer at this log position (default: what the index covers)."),
    principal_text: str = typer.Option(None, "--as", envvar="USL_DEFAULT_PRINCIPAL",
                                       help="Principal, e.g. tenant:acme/user:alice/groups:eng."),
    log: str = LOG_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the API's JSON response."),
) -> None:
    """Run one SessionQL query at one asOfSeq, over the sessions you may read."""
    from planner.acl import parse_principal
    from planner.engine import Planner
    from planner.sessionql_service import sessionql_request

    settings = _settings()
    body: dict[str, Any] = {"query": query, "log": log}
    if as_of is not None:
        body["asOfSeq"] = as_of
    try:
        principal = parse_principal(principal_text or settings.acl_default)
        planner = Planner(settings, _bootstrap(settings))
        try:
            response = sessionql_request(planner, body, principal)
        finally:
            planner.close()
    except PlannerError as exc:
        _fail(exc, json_out)
    except USLError as exc:
        _fail(PlannerError(str(exc)), json_out)
    if json_out:
        _print_json(response)
        return
    render_rows(response)


def render_rows(response: dict[str, Any]) -> None:
    """Human output: the rows as a table, then one line on the snapshot the answer reflects."""
    table = Table(*response["columns"], show_lines=False, header_style="bold")
    for row in response["rows"]:
        table.add_row(*(_cell(value) for value in row))
    out.print(table)
    parts = [f"{response['rowCount']} row{'s' if response['rowCount'] != 1 else ''}"
             + (" (truncated)" if response["truncated"] else ""),
             f"asOfSeq {response['asOfSeq']}"]
    parts += [f"{kind} gen {generation}" for kind, generation in response["generations"].items()]
    if response.get("uncovered"):
        span = response["uncovered"]
        parts.append(f"uncovered {span['fromSeq']}..{span['toSeq']}")
    out.print(escape(" · ".join(parts)), style="dim")
    out.print(escape(f"query: {response['query']}"), style="dim")


def _cell(value: Any) -> str:
    if value is None:
        return "[dim]NULL[/]"
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    if len(text) > _CELL_CHARS:
        text = text[: _CELL_CHARS - 1] + "…"
    return escape(text)


def _fail(exc: PlannerError, json_out: bool) -> None:
    if json_out:
        _print_json(error_body(exc))
    else:
        err.print(f"[red]error {exc.status} {exc.code}:[/] {escape(exc.message)}")
        if exc.hint:
            err.print(f"  {escape(exc.hint)}")
    raise typer.Exit(2)
