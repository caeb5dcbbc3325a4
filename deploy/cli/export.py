"""``usl export``: sessions, turns or search hits at one asOfSeq, as JSONL or Parquet.

Asks the planner API when one answers (as ``usl search`` does), else runs in this process;
either way the file holds what :mod:`planner.export` describes, under the caller's access
lists and redacted as the indexes are. The data goes to ``--output`` (or stdout); one line on
stderr says how many rows and at which asOfSeq.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from deploy.cli._api import in_process, with_api
from deploy.cli._common import (
    LOG_OPTION,
    PRINCIPAL_OPTION,
    err,
    escape,
    load_settings,
    write_out,
)
from streams.exceptions import USLError

if TYPE_CHECKING:
    from planner.client import Client

__all__ = ["COMMANDS", "export_command", "register"]

COMMANDS = ("export",)  # the names register() adds


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app``."""
    app.command("export")(export_command)


def export_command(
    what: str = typer.Argument("sessions", metavar="WHAT", help="sessions (their redacted events, re-importable with "
                                                "`usl ingest --format asp`) | turns | hits."),
    query: str = typer.Option(None, "--query", "-q", metavar="QUERY", help="The search whose hits to export (with hits)."),
    fmt: str = typer.Option("jsonl", "--format", metavar="FORMAT", help="jsonl | parquet."),
    output: Path = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
    as_of: int = typer.Option(None, "--as-of", min=0, metavar="SEQ", help="asOfSeq to export at (default: the freshest)."),
    freshness: str = typer.Option("indexed", "--freshness", metavar="FRESHNESS", help="Of the search, with hits."),
    mode: str = typer.Option("hybrid", "--mode", metavar="MODE", help="Of the search, with hits: hybrid | text | vector."),
    limit: int = typer.Option(None, "--limit", min=1, help="At most this many hits (default 10000)."),
    principal_text: str = PRINCIPAL_OPTION,
    log: str = LOG_OPTION,
    session: str | None = typer.Option(None, "--session", metavar="ID",
                                       help="Only this session's events (with sessions)."),
) -> None:
    """Export what you may read at one asOfSeq: sessions' events, turns, or a search's hits."""
    if fmt not in ("jsonl", "parquet"):
        raise USLError(f"unknown format {fmt!r}; use jsonl or parquet")
    # Said here in the CLI's words: the planner's own hints name the API's parameters (query=...).
    if what == "hits" and not query:
        raise USLError("exporting hits needs a query: add -q/--query, e.g. `usl export hits -q 'retry budget'`")
    if what != "hits" and query:
        raise USLError(f"-q/--query applies to `usl export hits`, not to {what}: leave it out, or export hits")
    if what != "sessions" and session is not None:
        raise USLError(f"--session applies to `usl export sessions`, not to {what}: leave it out, or export sessions")
    params: dict[str, Any] = {"what": what, "log": log, "query": query, "asOfSeq": as_of, "sessionId": session,
                              "freshness": freshness if what == "hits" else None,
                              "mode": mode if what == "hits" else None, "limit": limit}
    params = {name: value for name, value in params.items() if value is not None}
    if output is not None:
        # Said before the export runs (it may take a while), in one line, not as a traceback.
        if output.is_dir():
            raise USLError(f"cannot write the export to {str(output)!r}: it is a directory; name a file, "
                           f"e.g. -o {str(output / ('export.' + fmt))!r}")
        if not output.parent.is_dir():
            raise USLError(f"cannot write the export to {str(output)!r}: no directory {str(output.parent)!r}")
    current = load_settings()
    answer = _through_api(current, principal_text, fmt, params)
    if answer is None:
        answer = _in_process(current, principal_text, fmt, params)
    as_of_seq, data, end = answer
    if output is None:
        write_out(data)
    else:
        try:
            output.write_bytes(data)
        except OSError as exc:
            raise USLError(f"cannot write the export to {str(output)!r}: {exc.strerror or exc}") from None
    where = str(output) if output is not None else "stdout"
    err().print(escape(f"exported {what} of log {log!r} at asOfSeq {as_of_seq}: {row_count(data, fmt)} rows"
                       f" to {where} ({fmt})"))
    if end is not None:
        err().print(escape(str(end.get("message") or end)))


def row_count(data: bytes, fmt: str) -> int:
    """The rows of an export: its lines, or what the Parquet footer says."""
    if fmt == "jsonl":
        return data.count(b"\n")
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(io.BytesIO(data)).metadata.num_rows)


def _through_api(current: Any, principal_text: str | None, fmt: str,
                 params: dict[str, Any]) -> tuple[int, bytes, dict[str, Any] | None] | None:
    def ask(client: Client) -> tuple[int, bytes, dict[str, Any] | None]:
        # A copy: when the API refuses (a local stack with keys, none set here) the export runs
        # in process with ``params``, which lost what, asOfSeq and sessionId to pop() here
        # (`usl export turns` then exported every session's events).
        rest = dict(params)
        exported = client.export(rest.pop("what"), fmt=fmt,  # type: ignore[arg-type]
                                 as_of_seq=rest.pop("asOfSeq", None), session_id=rest.pop("sessionId", None),
                                 **rest)
        return exported.as_of_seq, exported.data, exported.end

    return with_api(current, principal_text, False, ask)


def _in_process(current: Any, principal_text: str | None, fmt: str,
                params: dict[str, Any]) -> tuple[int, bytes, dict[str, Any] | None]:
    def run(planner: Any, principal: Any) -> tuple[int, bytes, dict[str, Any] | None]:
        from planner.export import export, parquet_bytes, write_jsonl

        result = export(planner, principal, params)
        data = parquet_bytes(result) if fmt == "parquet" else b"".join(write_jsonl(result.rows))
        return result.as_of_seq, data, result.end

    return in_process(current, principal_text, False, run)
