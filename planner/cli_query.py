"""``usl search`` and ``usl serve``: the planner from the command line.

``usl search`` asks the planner API when one answers (``USL_API_URL``, or the local stack that
``usl up`` runs), else runs the planner in this process, and prints one block per
hit plus a freshness line that says at which log position the answer was taken and what it
does not cover; ``--json`` prints exactly the HTTP API's response (or its error body).
``usl serve`` runs the HTTP API (:mod:`planner.api`) under uvicorn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.markup import escape

from planner.cli import LOG_OPTION, _bootstrap, _print_json, _settings, app, err, out
from planner.exceptions import PlannerError, error_body
from streams.exceptions import USLError
from streams.settings import Settings

if TYPE_CHECKING:
    from rich.text import Text

    from planner.client import Client

__all__ = ["api_client", "api_target", "render_response", "search", "serve", "through_api"]

_SNIPPET_CHARS = 480
_CELL_CHARS = 80
_EVIDENCE_STYLES = ("bold yellow", "bold cyan")


@app.command()
def search(
    query: str = typer.Argument(..., help="What to search for: words (OR-ed) and \"quoted phrases\"."),
    freshness: str = typer.Option("indexed", "--freshness",
                                  help="indexed | latest | wait:SECONDS (at most 300)."),
    k: int = typer.Option(10, "--k", help="Results per page (1-100)."),
    explain: bool = typer.Option(False, "--explain", help="Show how the answer was decided."),
    principal_text: str = typer.Option(None, "--as", envvar="USL_DEFAULT_PRINCIPAL",
                                       help="Principal, e.g. tenant:acme/user:alice/groups:eng."),
    cursor: str = typer.Option(None, "--cursor", help="Continue after a previous page."),
    json_out: bool = typer.Option(False, "--json", help="Print the API's JSON response."),
    log: str = LOG_OPTION,
    mode: str = typer.Option("hybrid", "--mode", help="hybrid | text | vector."),
    sessions: list[str] = typer.Option(None, "--session", help="Only this session (repeatable)."),
    tools: list[str] = typer.Option(None, "--tool", help="Only chunks using this tool (repeatable)."),
    tool_results: bool = typer.Option(False, "--tool-results",
                                      help="Search full tool results too (needs scopes:toolresults)."),
) -> None:
    """Search one log at one asOfSeq, with evidence for every hit."""
    request: dict[str, Any] = {"query": query, "freshness": freshness, "k": k, "explain": explain,
                               "cursor": cursor, "log": log, "mode": mode,
                               "toolResults": tool_results}
    filters = {name: list(values) for name, values in (("sessionId", sessions), ("toolName", tools))
               if values}
    if filters:
        request["filters"] = filters
    response = call_planner(principal_text, json_out, lambda planner, principal: planner.search(request, principal),
                            ("POST", "/v1/search", request))
    if json_out:
        _print_json(response)
        return
    render_response(response, request)


def render_response(response: dict[str, Any], request: dict[str, Any]) -> None:
    """Human output: one block per hit, then the freshness line (and explain, if asked)."""
    for number, hit in enumerate(response["results"], start=1):
        seqs = [piece["seq"] for piece in hit["evidence"]]
        where = [f"session {hit['sessionId']}"]
        if hit.get("turnId"):
            where.append(f"turn {hit['turnId']}")
        if seqs:
            where.append(f"seqs {min(seqs)}-{max(seqs)}")
        where.append(hit["eventTime"])
        if hit.get("origin") not in (None, "index"):
            where.append(str(hit["origin"]))
        sources = " · ".join(f"{source} #{c['rank']}" for source, c in hit["score"]["components"].items())
        out.print(f"[bold]{number}.[/] rrf {hit['score']['rrf']:.5f}  ({escape(sources)})  "
                  f"[dim]{escape('  '.join(where))}[/]")
        out.print(_snippet(hit["text"], hit["evidence"]))
        proof = ", ".join(f"{piece['eventId']}@{piece['seq']}" for piece in hit["evidence"])
        out.print(f"   [dim]evidence: {escape(proof)}[/]")
    if not response["results"]:
        out.print("no results")
    out.print(freshness_line(response))
    if response.get("cursor"):
        out.print(f"[dim]next page: the same command with --cursor {escape(response['cursor'])}[/]")
    explain = response.get("explain")
    if explain:
        out.print("[bold]explain[/]")
        for reason in explain["freshness"]["reasons"]:
            out.print(f"  - {escape(reason)}")
        for source, info in explain["sources"].items():
            cut = "truncated" if info["truncated"] else "complete"
            out.print(f"  {source}: window {info['window']}, returned {info['returned']} ({cut})")
        for fallback in explain["fallbacks"]:
            out.print(f"  fallback: {escape(fallback)}")
        out.print("  [dim](--json shows the full explain object)[/]")


def freshness_line(response: dict[str, Any]) -> str:
    """``asOfSeq N (label) · L1 … · generations · tail scan · uncovered`` in one line."""
    fresh = response["freshness"]
    parts = [f"asOfSeq {response['asOfSeq']} ({fresh['label']})", f"L1 {fresh['l1CommittedSeq']}"]
    for kind, mark in fresh["watermarks"].items():
        parts.append(f"{kind} gen {mark['generationId']}@{mark['builtThroughSeq']}" if mark
                     else f"{kind} missing")
    if fresh.get("tailScan"):
        parts.append(f"tail scan {fresh['tailScan']['fromSeq']}..{fresh['tailScan']['toSeq']}")
    uncovered = fresh.get("uncovered") or []
    parts.append("uncovered: " + (", ".join(f"{r['fromSeq']}..{r['toSeq']}" for r in uncovered)
                                  if uncovered else "nothing"))
    for fallback in fresh.get("fallbacks") or []:
        parts.append(f"fallback: {fallback}")
    return escape("freshness: " + " · ".join(parts))


def _snippet(text: str, evidence: list[dict[str, Any]]) -> Text:
    """The hit's text with each evidence span styled (UTF-8 byte offsets → characters)."""
    from rich.text import Text

    data = text.encode("utf-8")
    shown = Text("   ")
    position = 0
    for number, piece in enumerate(sorted(evidence, key=lambda p: p["start"])):
        start = len(data[: piece["start"]].decode("utf-8", "replace"))
        end = len(data[: piece["end"]].decode("utf-8", "replace"))
        start = max(start, position)
        if start >= end:
            continue
        shown.append(_indent(text[position:start]))
        shown.append(_indent(text[start:end]), style=_EVIDENCE_STYLES[number % 2])
        position = end
    shown.append(_indent(text[position:]))
    if len(shown.plain) > _SNIPPET_CHARS + 3:
        shown.truncate(_SNIPPET_CHARS + 3)
        shown.append("…")
    return shown


def _indent(text: str) -> str:
    return text.replace("\n", "\n   ")


@app.command()
def serve(
    host: str = typer.Option(None, "--host", envvar="USL_API_HOST", help="Interface to listen on."),
    port: int = typer.Option(None, "--port", envvar="USL_API_PORT", help="Port to listen on."),
) -> None:
    """Run the planner's HTTP API (POST /v1/search, /v1/sql; GET /v1/status, /metrics, /).

    Beyond loopback (--host 0.0.0.0) it starts only with API keys (`usl apikey create`).
    """
    import uvicorn

    from planner.api import create_app
    from planner.auth import check_bind

    settings = _settings()
    bind_host = host or settings.api_host
    bind_port = port or settings.api_port
    check_bind(settings, bind_host)
    bootstrap = _bootstrap(settings)
    err.print(f"planner API on http://{bind_host}:{bind_port}/")
    uvicorn.run(create_app(settings, bootstrap), host=bind_host, port=bind_port,
                log_level="warning", access_log=False)


@app.command()
def sql(
    query: str = typer.Argument(..., help="One read-only SELECT over sessions, runs, turns, events, tool_calls, chunks."),
    as_of: int = typer.Option(None, "--as-of", min=0, help="asOfSeq to read at (default: what the analytics index covers)."),
    principal_text: str = typer.Option(None, "--as", envvar="USL_DEFAULT_PRINCIPAL",
                                       help="Principal, e.g. tenant:acme/user:alice/groups:eng."),
    log: str = LOG_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the API's JSON response."),
) -> None:
    """Run read-only SQL on the analytics snapshot at one asOfSeq, under your ACL."""
    body: dict[str, Any] = {"query": query, "log": log}
    if as_of is not None:
        body["asOfSeq"] = as_of
    response = call_planner(principal_text, json_out, lambda planner, principal: planner.sql(body, principal),
                            ("POST", "/v1/sql", body))
    if json_out:
        _print_json(response)
        return
    render_rows(response)


def call_planner(principal_text: str | None, json_out: bool,
                 call: Callable[[Any, Any], dict[str, Any]],
                 route: tuple[str, str, dict[str, Any] | None] | None = None) -> dict[str, Any]:
    """Run one planner call for a CLI command: through the planner API when one answers
    (``route`` is its method, path and body), else in this process. A planner error becomes the
    API's JSON error body (``--json``) or one red line with its hint, and exit code 2."""
    settings = _settings()
    if route is not None:
        answer = through_api(settings, principal_text, json_out, *route)
        if answer is not None:
            return answer
    from planner.acl import parse_principal
    from planner.engine import Planner

    try:
        principal = parse_principal(principal_text or settings.acl_default)
        planner = Planner(settings, _bootstrap(settings))
        try:
            return call(planner, principal)
        finally:
            planner.close()
    except PlannerError as exc:
        fail(exc, json_out)
    except USLError as exc:
        fail(PlannerError(str(exc)), json_out)
    raise AssertionError("unreachable")


def api_target(settings: Settings) -> tuple[str, bool] | None:
    """The planner API the CLI should ask, and whether the user named it (``USL_API_URL``);
    else the API of the local stack under ``USL_HOME`` while ``usl up`` runs one; else None."""
    if settings.api_url:
        return settings.api_url, True
    pid_file = Path(settings.home).resolve() / "run" / "api.pid"
    try:
        entry = json.loads(pid_file.read_text())
        pid, command = int(entry["pid"]), [str(part) for part in entry["cmd"]]
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no local API (or its process is gone): nothing to ask
    host, port = settings.api_host, settings.api_port
    for flag, value in pairwise(command):
        if flag == "--host":
            host = value
        elif flag == "--port":
            port = int(value) if value.isdigit() else port
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"  # listening everywhere includes loopback
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}", False


def api_client(settings: Settings, principal_text: str | None) -> tuple[Client, bool] | None:
    """A client of :func:`api_target` asking as the principal the CLI would run as in process:
    ``--as`` (or ``USL_DEFAULT_PRINCIPAL``) in ``X-USL-Principal``; with ``USL_API_KEY`` the
    key's principal, narrowed by ``--as`` when given."""
    from planner.client import Client

    target = api_target(settings)
    if target is None:
        return None
    url, named = target
    principal = principal_text or (None if settings.api_key else settings.acl_default)
    return Client(url, principal=principal, api_key=settings.api_key,
                  connect_timeout=2.0 if named else 0.5), named


def through_api(settings: Settings, principal_text: str | None, json_out: bool, method: str, path: str,
                body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The API's answer to one request, or None when no API answers (the caller then runs
    in process). An error answer is the command's error, exactly as in process."""
    from planner.client import APIError, Unreachable

    found = api_client(settings, principal_text)
    if found is None:
        return None
    client, named = found
    try:
        if not client.health().get("ready"):
            return None  # still starting: answering in process is quicker than waiting
        timeout = None
        if body is not None and str(body.get("freshness", "")).startswith("wait:"):
            timeout = client.timeout_for(str(body["freshness"]))
        return client.request(method, path, body, timeout=timeout)
    except Unreachable as exc:
        if named:
            err.print(f"[yellow]warning:[/] {escape(str(exc))}; answering in this process")
        return None
    except APIError as exc:
        if exc.status == 401 and not settings.api_key and not named:
            return None  # a local stack with keys and no USL_API_KEY here: the files are ours
        fail(exc, json_out)
    finally:
        client.close()


def fail(exc: PlannerError, json_out: bool) -> NoReturn:
    if json_out:
        _print_json(error_body(exc))
    else:
        err.print(f"[red]error {exc.status} {exc.code}:[/] {escape(exc.message)}")
        if exc.hint:
            err.print(f"  {escape(exc.hint)}")
    raise typer.Exit(2)


def render_rows(response: dict[str, Any]) -> None:
    """Human output of SQL and SessionQL: the rows as a table, then one line on the snapshot
    the answer reflects (and the normalized query, for SessionQL)."""
    from rich.table import Table

    table = Table(*map(str, response["columns"]), show_lines=False, header_style="bold")
    for row in response["rows"]:
        table.add_row(*(_cell(value) for value in row))
    out.print(table)
    parts = [f"{response['rowCount']} row{'s' if response['rowCount'] != 1 else ''}"
             + (" (truncated)" if response["truncated"] else ""),
             f"asOfSeq {response['asOfSeq']}"]
    for kind, generation in response.get("generations", {}).items():
        parts.append(f"{kind} gen {generation.get('generationId') if isinstance(generation, dict) else generation}")
    if response.get("uncovered"):
        span = response["uncovered"]
        parts.append(f"uncovered {span['fromSeq']}..{span['toSeq']}")
    out.print(escape(" · ".join(parts)), style="dim")
    if response.get("query"):
        out.print(escape(f"query: {response['query']}"), style="dim")
    if response.get("notice"):
        out.print(escape(response["notice"]), style="dim")


def _cell(value: Any) -> str:
    if value is None:
        return "[dim]NULL[/]"
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    if len(text) > _CELL_CHARS:
        text = text[: _CELL_CHARS - 1] + "…"
    return escape(text)
