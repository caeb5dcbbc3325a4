"""What every command group of the ``usl`` command line shares: settings, the local broker,
the two consoles, JSON output, the options several commands spell alike, and the one way a
command reports a planner error.

The consoles are made on first use: a command that prints only JSON (``usl search --json``
through the API) never imports rich, which is a good part of a shell command's start-up
(docs/benchmarks.md).
"""

from __future__ import annotations

import errno
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from streams.exceptions import USLError
from streams.names import LOG_ID, LOG_ID_HINT
from streams.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

    from planner.exceptions import PlannerError

__all__ = ["LOG_OPTION", "PRINCIPAL_OPTION", "ClusterDown", "bare_host", "bootstrap_servers", "command_broker",
           "configured_cluster", "err", "escape", "fail", "http_url", "load_settings", "out", "print_json", "printable",
           "render_rows", "tsv_lines", "write_out"]

_CELL_CHARS = 80


def _log_name(value: str) -> str:
    # Refused up front: `usl ingest --log "team a"` appended nothing and dead-lettered every
    # record of the file for its logId, exiting 0.
    if not LOG_ID.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a log name: {LOG_ID_HINT}")
    return value


LOG_OPTION = typer.Option("default", "--log", envvar="USL_LOG", metavar="NAME", help="Log (L1 partition) to use.",
                          callback=_log_name)


def _principal(value: str | None) -> str | None:
    # Refused up front: `--as ''` ran as the default principal, so a script whose variable came
    # out empty read with the default's rights instead of failing.
    if value is None:
        return value
    from planner.acl import parse_principal
    from planner.exceptions import QueryError

    try:
        parse_principal(value)
    except QueryError as exc:
        raise typer.BadParameter(f"{exc.message}. {exc.hint}, or leave --as out to use "
                                 "USL_DEFAULT_PRINCIPAL.") from None
    return value


PRINCIPAL_OPTION = typer.Option(None, "--as", envvar="USL_DEFAULT_PRINCIPAL", metavar="PRINCIPAL",
                                help="Principal, e.g. tenant:acme/user:alice/groups:eng.", callback=_principal)


def load_settings() -> Settings:
    """The settings of this process, from the environment."""
    return Settings.from_env()


def bare_host(host: str) -> str:
    """``host`` as a socket (and uvicorn) takes it: an IPv6 address without the brackets a URL
    writes it in (``[::1]`` is ``::1``)."""
    host = host.strip()
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def http_url(host: str, port: int, *, connect: bool = True) -> str:
    """``http://HOST:PORT`` of a server that listens on ``host``: an IPv6 address in brackets
    (RFC 3986: ``http://::1:8765`` names no port), and, to connect to it (``connect``), an
    every-interface address as loopback (``0.0.0.0`` as 127.0.0.1, ``::`` as ::1)."""
    bare = bare_host(host)
    if connect:
        bare = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(bare, bare)
    return f"http://[{bare}]:{port}" if ":" in bare else f"http://{bare}:{port}"


def bootstrap_servers(current: Settings) -> str:
    """The Kafka bootstrap servers: the configured cluster, else the local broker (started if
    it is not running)."""
    if current.bootstrap_servers:
        return current.bootstrap_servers  # as ensure_broker answers, without loading the broker's module
    from deploy.kafka.broker import ensure_broker

    return ensure_broker(current)


CONNECT_SECONDS = 3.0
"""How long a command waits for a TCP connection to each configured bootstrap server."""


class ClusterDown(USLError):
    """No bootstrap server of the configured cluster accepts a connection."""


def _addresses(servers: str) -> list[tuple[str, int]] | None:
    """``(host, port)`` of each server of a bootstrap list (``host:port``, ``[v6]:port``,
    ``SCHEME://host:port``); None when one of them is not of that form (kafka-python says why)."""
    addresses = []
    for server in servers.split(","):
        server = server.strip().rpartition("://")[2]
        host, colon, port = server.rpartition(":")
        if not (host and colon and port.isdigit()):
            return None
        addresses.append((bare_host(host), int(port)))
    return addresses


def configured_cluster(servers: str) -> str:
    """``servers`` once one of them accepts a TCP connection, else :class:`ClusterDown` at once.

    A command (not a service: the worker and sinks wait for their cluster) given a
    ``KAFKA_BOOTSTRAP_SERVERS`` where nothing listens waited 30 s for kafka-python's request
    timeout to say so. A refused connection, an unknown host or no answer within
    :data:`CONNECT_SECONDS` is known after one try; a listener that is not Kafka still meets
    kafka-python's own checks."""
    import socket

    addresses = _addresses(servers)
    if not addresses:
        return servers
    reasons = []
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
            return servers
        except OSError as exc:
            reasons.append(exc.strerror or ("timed out" if isinstance(exc, TimeoutError) else type(exc).__name__))
    said = "; ".join(dict.fromkeys(reasons))
    raise ClusterDown(f"the Kafka cluster at KAFKA_BOOTSTRAP_SERVERS={servers} does not answer ({said}); "
                      "check that it runs and that the variable names it")


@contextmanager
def command_broker(current: Settings) -> Iterator[str]:
    """The bootstrap servers of a command that ends (``ingest``, ``rebuild``, ``deadletters``,
    ``topics create``): the configured cluster, else the local broker, started if it is not
    running and stopped again when the command ends, unless a ``usl up`` started meanwhile uses
    it. Before, every such command but ``ingest`` left the broker it started running (a JVM of
    up to 768 MB) until someone ran ``usl down``."""
    if current.bootstrap_servers:
        yield configured_cluster(current.bootstrap_servers)
        return
    from deploy.kafka.broker import local_broker_status, stop_broker
    from deploy.stack import running

    started = local_broker_status(current) is None
    try:  # a Ctrl-C while the broker starts stops it too
        yield bootstrap_servers(current)
    finally:
        if started and not running(current):
            stop_broker(current)


@cache
def out() -> Console:
    """The console of human output (stdout). Piped, it wraps no line: a console there has no
    width, and a cursor or an evidence list cut at 80 columns is of no use to a script."""
    from rich.console import Console

    class Output(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1, as for an error; the command says the reader went (deploy.cli._help).
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "standard output's reader has gone")

    return Output(soft_wrap=not sys.stdout.isatty())


@cache
def err() -> Console:
    """The console of progress, warnings and errors (stderr). Redirected, it wraps no line
    either: a path cut at 80 columns ('hits.pa rquet') in a log is a path no one can copy."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=not sys.stderr.isatty())


# Control characters as their Unicode pictures (ESC as ␛), C1 controls as �: one character for
# one, so offsets into a text stay right. Tabs and line breaks stay. The bidirectional
# embeddings, overrides and isolates (U+202A-202E, U+2066-2069) go as � too: in tool output they
# make a terminal show a line in another order than its characters ("Trojan Source"), and
# right-to-left text shows rightly without them (the marks U+200E/200F stay).
_CONTROLS = {code: 0x2400 + code for code in range(0x20) if code not in (0x09, 0x0A)} | {0x7F: 0x2421} \
    | dict.fromkeys(range(0x80, 0xA0), 0xFFFD) | dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)], 0xFFFD)


def printable(text: str) -> str:
    """``text`` with its control characters shown, not obeyed: a transcript's tool output holds
    terminal escapes (colours, a clear screen, a window title an attacker chose), which must not
    reach the terminal of whoever searches it."""
    return text.translate(_CONTROLS)


def escape(text: str) -> str:
    """``text`` with rich markup escaped and control characters shown (:func:`printable`), to
    print as it is."""
    from rich.markup import escape as rich_escape

    return rich_escape(printable(text))


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (the ``--json`` output of every command), in UTF-8 as
    the API answers: text in any script reads as itself, not as ``\\uXXXX``. A lone surrogate
    (which UTF-8 cannot hold, and which the API's orjson refuses outright) is written as its JSON
    escape, so the output stays valid JSON and valid UTF-8 and the command does not crash."""
    encoded = (json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode("utf-8",
                                                                                            "backslashreplace")
    if getattr(sys.stdout, "buffer", None) is None:  # a text-only stream (a test's StringIO): what the bytes say
        sys.stdout.write(encoded.decode("utf-8"))
        return
    write_out(encoded)


def write_out(data: bytes) -> None:
    """``data`` on standard output, all of it, or BrokenPipeError. A pipe whose reader stops in
    the middle of one large write (``usl export | head -1``) takes part of it, and
    ``BufferedWriter.write`` returns that count with no error: the rest was dropped, and the
    command went on to exit 0 ("exported 5217 rows to stdout")."""
    stdout = sys.stdout.buffer
    sys.stdout.flush()
    rest = memoryview(data)
    while rest:
        written = stdout.write(rest)
        if not written:
            raise BrokenPipeError(errno.EPIPE, "standard output took none of the bytes written to it")
        rest = rest[written:]
    stdout.flush()


def fail(exc: PlannerError, json_out: bool) -> NoReturn:
    """End the command with a planner error: the API's JSON error body (``--json``) or one red
    line with its hint, and exit code 2."""
    from planner.exceptions import error_body

    if json_out:
        print_json(error_body(exc))
    else:
        # Unwrapped, as main() prints other errors: a message is one line, even when long.
        err().print(f"[red]error {exc.status} {exc.code}:[/] {escape(exc.message)}", soft_wrap=True)
        if exc.hint:
            err().print(f"  {escape(exc.hint)}", soft_wrap=True)
    raise typer.Exit(2)


def render_rows(response: dict[str, Any]) -> None:
    """Output of SQL and SessionQL without ``--json``: on a terminal the rows as a table, piped
    the rows as tab-separated values (:func:`tsv_lines`); then one line on the snapshot the
    answer reflects (and the normalized query, for SessionQL), on stderr when piped so that
    stdout holds the rows only."""
    if sys.stdout.isatty():
        from rich.table import Table

        table = Table(*map(str, response["columns"]), show_lines=False, header_style="bold")
        for row in response["rows"]:
            table.add_row(*(_cell(value) for value in row))
        out().print(table)
        notes = out()
    else:
        sys.stdout.writelines(tsv_lines(response["columns"], response["rows"]))
        sys.stdout.flush()  # the rows before the notes on stderr, when both go to one file
        notes = err()
    parts = [f"{response['rowCount']} row{'s' if response['rowCount'] != 1 else ''}"
             + (" (truncated)" if response["truncated"] else ""),
             f"asOfSeq {response['asOfSeq']}"]
    for kind, generation in response.get("generations", {}).items():
        parts.append(f"{kind} gen {generation.get('generationId') if isinstance(generation, dict) else generation}")
    if response.get("uncovered"):
        span = response["uncovered"]
        parts.append(f"uncovered {span['fromSeq']}..{span['toSeq']}")
    notes.print(escape(" · ".join(parts)), style="dim")
    if response.get("query"):
        notes.print(escape(f"query: {response['query']}"), style="dim")
    if response.get("notice"):
        notes.print(escape(response["notice"]), style="dim")


def tsv_lines(columns: list[Any], rows: list[list[Any]]) -> Iterator[str]:
    """A header of the column names, then one line per row, tab-separated and whole (nothing
    cut), as PostgreSQL's COPY text format writes them: NULL as ``\\N``, a list or object as
    JSON, and a backslash, tab, newline or carriage return in a value as ``\\\\``, ``\\t``,
    ``\\n``, ``\\r`` so each row stays one line."""
    yield "\t".join(_tsv_value(str(name)) for name in columns) + "\n"
    for row in rows:
        yield "\t".join(_tsv_value(value) for value in row) + "\n"


def _tsv_value(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, (list, dict)):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    return text.translate(_TSV_ESCAPES)


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _cell(value: Any) -> str:
    if value is None:
        return "[dim]NULL[/]"
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    if len(text) > _CELL_CHARS:
        text = text[: _CELL_CHARS - 1] + "…"
    return escape(text)
