"""``usl sink`` and ``usl rebuild``: the index sinks, live and replayed from L1.

``usl sink`` runs the sinks of :mod:`sinks.service`; ``usl rebuild`` replays L1 into a new
generation line beside the live one (:mod:`sinks.rebuild`), with progress on stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from deploy.cli._common import LOG_OPTION, bootstrap_servers, err, load_settings, out, print_json
from streams.exceptions import USLError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["COMMANDS", "rebuild", "register", "sink"]

COMMANDS = ("sink", "rebuild")  # the names register() adds


def register(app: typer.Typer) -> None:
    """Add ``sink`` and ``rebuild`` to ``app``."""
    app.command()(sink)
    app.command()(rebuild)


def sink(
    kind: str = typer.Option("text,vector,structured,analytics,toolresults", "--kind",
                             help="Comma-separated index kinds to run in this process."),
    shard: str = typer.Option("", "--shard", envvar="USL_SINK_SHARD",
                              help="Run shard I of N of each kind (I/N, e.g. 0/2): only the derived "
                                   "topics' partitions p with p % N == I, into that shard's own "
                                   "generations. Empty: one shard reads every partition."),
) -> None:
    """Run index sinks: consume derived topics, commit generations, publish watermarks."""
    from sinks.service import ALL_KINDS, run_sinks
    from sinks.shards import parse_shard

    kinds = [k.strip() for k in kind.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown:
        raise USLError(f"unknown index kind(s) {', '.join(unknown)}; use {', '.join(ALL_KINDS)}")
    owned = parse_shard(shard)
    settings = load_settings()
    run_sinks(settings, bootstrap_servers(settings), kinds, shard=owned)


def rebuild(
    index: str = typer.Argument(..., metavar="INDEX", help="Index kind: text, vector, structured, analytics, toolresults, or all."),
    from_seq: int = typer.Option(1, "--from-seq", min=1, help="First L1 seq to replay; the new line holds nothing below it and queries disclose that range as uncovered."),
    log: str = LOG_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the new manifests as JSON."),
    shard: str = typer.Option("", "--shard", help="Rebuild shard I of N (I/N) of the index: only "
                              "the records of its partitions, into its own lines. Empty: the unsharded index."),
) -> None:
    """Replay L1 into a new generation line beside the live one, catch up, verify, switch.

    A log L1 does not know, or a --from-seq past the log's committed seq, is an error (exit
    code 2) that creates and switches nothing. With INDEX all, every kind is built and verified
    before any is switched, so the old indexes answer until the new ones replace them together.
    Progress on stderr (not with --json): seqs replayed of the log's, rate and ETA."""
    import time
    from contextlib import contextmanager

    from deploy.cli.progress import rebuild_progress
    from sinks.rebuild import rebuild_together
    from sinks.service import ALL_KINDS
    from sinks.shards import parse_shard

    owned = parse_shard(shard)
    kinds = list(ALL_KINDS) if index == "all" else [index]
    if any(k not in ALL_KINDS for k in kinds):
        raise USLError(f"unknown index {index!r}; use one of {', '.join(ALL_KINDS)} or all")
    settings = load_settings()
    bootstrap = bootstrap_servers(settings)
    results = []

    @contextmanager
    def progress_of(kind: str) -> Iterator[Callable[[int, int], None]]:
        with rebuild_progress(kind, err(), enabled=not json_out) as progress:
            task = progress.add_task(kind, total=None, count="seq -", rate="-")
            started = time.monotonic()

            def report(seq: int, total: int) -> None:
                rate = (seq - from_seq + 1) / max(time.monotonic() - started, 1e-6)
                progress.update(task, completed=seq, total=total, count=f"seq {seq:,}/{total:,}",
                                rate=f"{rate:,.0f} seqs/s")

            yield report

    def switched(manifest: Any) -> None:
        results.append(manifest.to_json())
        if not json_out:
            out().print(f"rebuilt {manifest.kind} of log {log!r}: line {manifest.line}, generation "
                        f"{manifest.generation_id}, built through seq {manifest.built_through_seq}, "
                        f"{manifest.chunk_count} records; now active")

    # With all, no kind is switched before every kind is built (sinks.rebuild.rebuild_together).
    rebuild_together(settings, bootstrap, kinds, log_id=log, from_seq=from_seq, shard=owned,
                     progress=progress_of, switched=switched)
    if json_out:
        print_json({"rebuilt": results})
