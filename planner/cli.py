"""The ``usl`` command line.

Every subcommand reads its defaults from the environment (see ``usl --help`` and
``docs/configuration.md``); machine-readable output with ``--json``; progress on stderr.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.markup import escape

from planner.typer_compat import install as _coerce_without_pydantic
from streams.exceptions import USLError
from streams.settings import Settings

__all__ = ["app", "main"]

_coerce_without_pydantic()  # about 0.2 s less per command (planner/typer_compat.py)

app = typer.Typer(
    name="usl",
    help="USL Search: explainable, rebuildable search over a Kafka log of AI-agent sessions.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()

LOG_OPTION = typer.Option("default", "--log", envvar="USL_LOG", help="Log (L1 partition) to use.")


def _settings() -> Settings:
    return Settings.from_env()


def _bootstrap(settings: Settings) -> str:
    from deploy.kafka.broker import ensure_broker

    return ensure_broker(settings)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


topics_app = typer.Typer(help="Topics of this deployment.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")


@topics_app.command("create")
def topics_create(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Create every topic with its configuration (idempotent)."""
    from streams.topics import ensure_topics, topic_specs

    settings = _settings()
    bootstrap = _bootstrap(settings)
    created = ensure_topics(bootstrap, settings)
    specs = [{"topic": s.name, "partitions": s.partitions, "config": s.config,
              "created": s.name in created} for s in topic_specs(settings)]
    if json_out:
        _print_json({"bootstrap": bootstrap, "topics": specs})
    else:
        for s in specs:
            out.print(f"{'created' if s['created'] else 'exists '} {s['topic']} partitions={s['partitions']}")


@app.command()
def ingest(
    paths: list[Path] = typer.Argument(..., help="Files or directories to import."),
    fmt: str = typer.Option(None, "--format", help="asp | claude-code | openai-chat | codex | gemini-cli (default: detect)."),
    log: str = LOG_OPTION,
    follow: bool = typer.Option(False, "--follow", help="Keep tailing PATHS (growing files, new files in "
                                "directories) until stopped; positions under USL_HOME/follow."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Append the events of PATHS to the L1 log, each event once (an imported file appends nothing
    again); rejected records go to the dead-letter topic.

    Progress on stderr: lines read of the input's total, records, rate and ETA; with --follow, a
    line per poll that appended something."""
    from planner.cli_ingest import follow as follow_paths
    from planner.cli_ingest import ingest_once
    from streams.importers import FORMATS

    if fmt is not None and fmt not in FORMATS:
        raise USLError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    missing = [p for p in paths if not p.exists()]
    if missing and not follow:
        raise USLError(f"{missing[0]} does not exist")
    settings = _settings()
    bootstrap = _bootstrap(settings)
    if follow:
        follow_paths(settings, bootstrap, paths, fmt, log, err)
        return
    summary = ingest_once(settings, bootstrap, paths, fmt, log, err, show_progress=not json_out)
    if json_out:
        _print_json(summary)
        return
    read, appended, cut = summary["recordsRead"], summary["eventsAppended"], summary["eventsCut"]
    out.print(f"read {read} records from {', '.join(str(p) for p in paths)} ({summary['format']}); appended "
              f"{appended} events to log {log!r} (L1 seq now {summary['l1CommittedSeq']}); "
              f"{summary['duplicatesSkipped']} already in L1; rejected {summary['rejected']}")
    if cut:
        out.print(f"  cut {cut} event(s) over {settings.max_event_bytes} bytes (USL_MAX_EVENT_BYTES) to fit; "
                  "their fields._truncated says so")
    for reason, count in Counter(summary["rejectedByReason"]).most_common():
        out.print(f"  rejected {count:>5}  {reason}")
    for example in summary["rejectedRecords"][:5]:
        out.print(f"    e.g. {example['record']}: {example['reason']}")


@app.command()
def status(
    json_out: bool = typer.Option(False, "--json", help="Print JSON (SPEC §12 status shape)."),
    log: str = typer.Option(None, "--log", help="Only this log."),
) -> None:
    """Committed L1 seq of each log and, per index, generation, watermark and lag."""
    from planner.cli_query import through_api

    settings = _settings()
    path = "/v1/status" + (f"?log={quote(log, safe='')}" if log else "")
    report = through_api(settings, None, json_out, "GET", path, None)
    if report is None:
        from planner.status import collect_status, for_principal

        report = for_principal(collect_status(settings, _bootstrap(settings), log_id=log), None)
    if json_out:
        _print_json(report)
        return
    from planner.status import render_status

    render_status(report, out)


@app.command()
def down(keep_broker: bool = typer.Option(False, "--keep-broker", help="Leave the local broker running.")) -> None:
    """Stop the local stack started by `usl up --detach` (workers, sinks, API, local broker)."""
    from deploy.kafka.broker import stop_broker
    from planner.stack import stop_stack

    settings = _settings()
    stopped = stop_stack(settings)
    for name in stopped:
        out.print(f"stopped {name}")
    if not keep_broker and not settings.bootstrap_servers and stop_broker(settings):
        out.print("stopped local Kafka broker")


@app.command()
def worker(loglevel: str = typer.Option("warn", "--loglevel", help="crit | error | warn | info | debug")) -> None:
    """Run a pipeline worker (redaction + chunking agents); scale out by starting more."""
    from streams.app import run_worker

    settings = _settings()
    sys.argv = [sys.argv[0], "worker"]  # faust parses argv; keep ours out of it
    run_worker(settings, _bootstrap(settings), loglevel=loglevel)


@app.command()
def sink(
    kind: str = typer.Option("text,vector,structured,analytics,toolresults", "--kind",
                             help="Comma-separated index kinds to run in this process."),
) -> None:
    """Run index sinks: consume derived topics, commit generations, publish watermarks."""
    from sinks.service import ALL_KINDS, run_sinks

    kinds = [k.strip() for k in kind.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown:
        raise USLError(f"unknown index kind(s) {', '.join(unknown)}; use {', '.join(ALL_KINDS)}")
    settings = _settings()
    run_sinks(settings, _bootstrap(settings), kinds)


@app.command()
def up(
    detach: bool = typer.Option(False, "--detach", help="Start in the background and return."),
    port: int = typer.Option(None, "--port", envvar="USL_API_PORT", help="Planner API port (default 8765)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Pipeline worker processes to start."),
) -> None:
    """Start the local stack: broker (if none is configured), topics, workers, sinks, planner API.

    A supervisor restarts any stack process that exits; `usl down` stops everything.
    """
    import os
    import time

    import httpx

    from planner.auth import check_bind
    from planner.stack import running, start_process, stop_stack, supervise
    from streams.topics import ensure_topics

    settings = _settings()
    check_bind(settings, settings.api_host)  # before anything starts, not in a restart loop
    api_port = port or settings.api_port
    bootstrap = _bootstrap(settings)
    ensure_topics(bootstrap, settings)
    already = {name: pid for name, pid in running(settings).items() if pid != os.getpid()}
    if already:
        out.print(f"already running: {', '.join(sorted(already))} (use `usl down` first to restart)")
        return
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "USL_HOME": str(Path(settings.home).resolve())}
    url = f"http://{settings.api_host}:{api_port}"
    if detach:
        start_process(settings, "supervisor", ["up", "--port", str(api_port), "--workers", str(workers)], env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if "supervisor" not in running(settings):
                raise USLError(f"the stack failed to start; see {Path(settings.home).resolve() / 'logs'}")
            time.sleep(0.5)
        else:
            stop_stack(settings)
            raise USLError(f"the planner API did not answer on {url} within 180s; see {settings.home}/logs")
        out.print(f"USL Search is up: broker {bootstrap}, API {url} (search page at {url}/)")
        out.print(f"logs in {Path(settings.home).resolve() / 'logs'}; stop with `usl down`")
        return
    children = {f"worker-{n + 1}": ["worker"] for n in range(workers)}
    children["sinks"] = ["sink"]
    children["api"] = ["serve", "--port", str(api_port), "--host", settings.api_host]
    follow = [str(Path(p).expanduser()) for p in settings.follow.split(":") if p.strip()]
    if follow:  # USL_FOLLOW: a follower tails those transcripts into L1
        children["follow"] = ["ingest", "--follow", *follow]
    out.print(f"starting USL Search: broker {bootstrap}, API {url}; Ctrl-C stops it")
    supervise(settings, children, env)


@app.command()
def rebuild(
    index: str = typer.Argument(..., help="Index kind: text, vector, structured, analytics, toolresults, or all."),
    from_seq: int = typer.Option(1, "--from-seq", min=1, help="First L1 seq to replay; the new line holds nothing below it and queries disclose that range as uncovered."),
    log: str = LOG_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the new manifests as JSON."),
) -> None:
    """Replay L1 into a new generation line beside the live one, catch up, verify, switch.

    Progress on stderr (not with --json): seqs replayed of the log's, rate and ETA."""
    import time

    from planner.cli_progress import rebuild_progress
    from sinks.rebuild import rebuild as run_rebuild
    from sinks.service import ALL_KINDS

    kinds = list(ALL_KINDS) if index == "all" else [index]
    if any(k not in ALL_KINDS for k in kinds):
        raise USLError(f"unknown index {index!r}; use one of {', '.join(ALL_KINDS)} or all")
    settings = _settings()
    bootstrap = _bootstrap(settings)
    results = []
    for kind in kinds:
        with rebuild_progress(kind, err, enabled=not json_out) as progress:
            task = progress.add_task(kind, total=None, count="seq -", rate="-")
            started = time.monotonic()

            def report(seq: int, total: int, task: Any = task, progress: Any = progress,
                       started: float = started) -> None:
                rate = (seq - from_seq + 1) / max(time.monotonic() - started, 1e-6)
                progress.update(task, completed=seq, total=total, count=f"seq {seq:,}/{total:,}",
                                rate=f"{rate:,.0f} seqs/s")

            manifest = run_rebuild(settings, bootstrap, kind, log_id=log, from_seq=from_seq, progress=report)
        results.append(manifest.to_json())
        if not json_out:
            out.print(f"rebuilt {kind} of log {log!r}: line {manifest.line}, generation {manifest.generation_id}, "
                      f"built through seq {manifest.built_through_seq}, {manifest.chunk_count} records; now active")
    if json_out:
        _print_json({"rebuilt": results})


def main() -> None:
    """Console entry point: USL errors become one clear line and exit code 2, never a traceback."""
    try:
        app()
    except USLError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)  # one line, even when long
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


# Query commands (search, serve, sql, rebuild) and key management live beside the planner code they drive.
import planner.cli_apikey  # noqa: E402
import planner.cli_export  # noqa: E402
import planner.cli_query  # noqa: E402
import planner.cli_sessionql  # noqa: E402,F401
