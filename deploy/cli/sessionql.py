"""``usl sessionql``: a SessionQL query from the command line.

Asks the planner API when one answers (as ``usl search`` does), else runs the planner in this
process, and prints the rows as a table, then
a line saying at which log position the answer was taken and which generations it read;
``--json`` prints exactly the HTTP API's response (or its error body).
"""

from __future__ import annotations

from typing import Any

import typer

from deploy.cli._api import call_planner
from deploy.cli._common import LOG_OPTION, PRINCIPAL_OPTION, print_json, render_rows

__all__ = ["COMMANDS", "register", "sessionql"]

COMMANDS = ("sessionql",)  # the names register() adds


def register(app: typer.Typer) -> None:
    """Add ``sessionql`` to ``app``."""
    app.command("sessionql")(sessionql)


def sessionql(
    query: str = typer.Argument(..., metavar="QUERY", help='A SessionQL query, e.g. \'FROM tool_calls WHERE '
                                          'status = "error" GROUP BY toolName\' (see docs/sql.md).'),
    as_of: int = typer.Option(None, "--as-of", min=0, metavar="SEQ",
                              help="Answer at this log position (default: what the index covers)."),
    principal_text: str = PRINCIPAL_OPTION,
    log: str = LOG_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the API's JSON response."),
) -> None:
    """Run one SessionQL query at one asOfSeq, over the sessions you may read.

    Rows print as `usl sql` prints them: a table on a terminal, tab-separated when piped."""
    body: dict[str, Any] = {"query": query, "log": log}
    if as_of is not None:
        body["asOfSeq"] = as_of

    def in_process(planner: Any, principal: Any) -> dict[str, Any]:
        from planner.sessionql_service import sessionql_request

        return sessionql_request(planner, body, principal)

    response = call_planner(principal_text, json_out, in_process, ("POST", "/v1/sessionql", body))
    if json_out:
        print_json(response)
        return
    render_rows(response)
