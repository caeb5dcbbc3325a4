"""``usl sink`` and ``usl rebuild``: the index sinks, live and replayed from L1.

``usl sink`` runs the sinks of :mod:`sinks.service`; ``usl rebuild`` replays L1 into a new
generation line beside the live one (:mod:`sinks.rebuild`), with progress on stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from deploy.cli._common import (
    LOG_OPTION,
    bootstrap_servers,
    command_broker,
    err,
    load_settings,
    out,
    print_json,
)
from streams.exceptions import USLError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["COMMANDS", "rebuild", "register", "sink", "stall_refusal"]

COMMANDS = ("sink", "rebuild")  # the names register() adds


def register(app: typer.Typer) -> None:
    """Add ``sink`` and ``rebuild`` to ``app``."""
    app.command()(sink)
    app.command()(rebuild)


def sink(
    kind: str = typer.Option("text,vector,structured,analytics,toolresults", "--kind", metavar="KINDS",
                             help="Comma-separated index kinds to run in this process."),
    shard: str = typer.Option("", "--shard", envvar="USL_SINK_SHARD", metavar="I/N",
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
    from_seq: int = typer.Option(1, "--from-seq", min=1, metavar="SEQ", help="First L1 seq to replay; the new line holds nothing below it and queries disclose that range as uncovered."),
    log: str = LOG_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the new manifests as JSON."),
    shard: str = typer.Option("", "--shard", metavar="I/N", help="Rebuild shard I of N (I/N) of the index: only "
                              "the records of its partitions, into its own lines. Empty: the unsharded index."),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch",
                                        help="Rebuild one chunk-keyed kind (text, vector, structured) even "
                                             "though the log's other such kinds were built under another "
                                             "redaction policy or chunker: the log's searches are then refused "
                                             "(503 index_mismatch) until those are rebuilt too."),
    all_logs: bool = typer.Option(False, "--all-logs",
                                  help="Rebuild INDEX of every log `usl status` lists (in place of --log), "
                                       "one log after another; stops at the first log that fails."),
) -> None:
    """Replay L1 into a new generation line beside the live one, catch up, verify, switch.

    A log L1 does not know, or a --from-seq past the log's committed seq, is an error (exit
    code 2) that creates and switches nothing; so is a rebuild under other settings than the
    running sinks write, where a stalled index says what they write (its line would stay
    stalled). With INDEX all, every kind is built and verified before any is switched, so the
    old indexes answer until the new ones replace them together. Progress on stderr (not with
    --json): seqs replayed of the log's, rate and ETA."""
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
    with command_broker(settings) as bootstrap:
        logs = _listed_logs(settings, bootstrap) if all_logs else [log]
        # Every log is checked before any is built: a refusal after three of seven logs were
        # rebuilt would leave the operator to work out which.
        _refuse_a_stall(settings, bootstrap, kinds, logs)
        if index != "all" and not allow_mismatch:
            for log_id in logs:
                _refuse_a_mismatch(settings, bootstrap, index, log_id)
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
                out().print(f"rebuilt {manifest.kind} of log {manifest.log_id!r}: line {manifest.line}, generation "
                            f"{manifest.generation_id}, built through seq {manifest.built_through_seq}, "
                            f"{manifest.chunk_count} records; now active")

        for number, log_id in enumerate(logs):
            try:
                # With all, no kind is switched before every kind is built (sinks.rebuild.rebuild_together).
                rebuild_together(settings, bootstrap, kinds, log_id=log_id, from_seq=from_seq, shard=owned,
                                 progress=progress_of, switched=switched)
            except USLError as exc:
                if not all_logs:
                    raise
                done = ", ".join(repr(name) for name in logs[:number]) or "none"
                left = ", ".join(repr(name) for name in logs[number + 1:]) or "none"
                raise USLError(f"rebuilding log {log_id!r} failed: {exc}; rebuilt before it: {done}; not "
                               f"started: {left}") from exc
    if json_out:
        print_json({"rebuilt": results})


def _refuse_a_mismatch(settings: Any, bootstrap: str, kind: str, log_id: str) -> None:
    """Refuse (exit 2) to rebuild ``kind`` alone when the log's other chunk-keyed kinds were
    built under another redaction policy or chunker than this rebuild writes: switched, it would
    join them under different chunk ids and every search of the log would answer 503
    index_mismatch (:mod:`planner.coherence`) until they are rebuilt too."""
    from planner.coherence import CHUNK_KINDS, origins_of_watermark
    from sinks.generations import pipeline_difference
    from sinks.runner import index_root
    from sinks.versions import pipeline_versions
    from sinks.watermarks import read_watermarks

    if kind not in CHUNK_KINDS:
        return  # keyed by event (tool results) or read alone (analytics): no join to break
    versions = pipeline_versions(settings)
    disagree: dict[str, str] = {}
    writes = ""
    for (of, other), watermark in read_watermarks(bootstrap, settings).items():
        if of != log_id or other == kind or other not in CHUNK_KINDS:
            continue
        for origin in origins_of_watermark(index_root(settings), log_id, other, watermark):
            difference = pipeline_difference(origin.policy, origin.chunker, str(versions["redactionPolicy"]),
                                             versions["chunker"])
            if difference is not None:
                what, built, new = difference
                disagree[other] = f"{what} {built}"
                writes = f"{what} {new}"
    if disagree:
        kinds = ", ".join(f"{other} ({value})" for other, value in sorted(disagree.items()))
        raise USLError(f"rebuilding {kind} alone would build it under {writes} while {kinds} of log "
                       f"{log_id!r} stay as they are: every search of the log would answer 503 "
                       f"index_mismatch until they are rebuilt too; run `usl rebuild all --log {log_id}`, "
                       f"or add --allow-mismatch to rebuild {kind} alone")


def _listed_logs(settings: Any, bootstrap: str) -> list[str]:
    """The logs ``usl status`` lists that hold events to replay (``--all-logs``), in its order."""
    from streams.l1 import L1Reader

    reader = L1Reader(bootstrap, settings)
    try:
        seqs = reader.committed_seqs()
    finally:
        reader.close()
    logs = [log_id for log_id, seq in sorted(seqs.items()) if seq > 0]
    if not logs:
        raise USLError("no log holds events yet: nothing to rebuild (`usl status` lists the logs)")
    err().print(f"rebuilding {len(logs)} log{'s' if len(logs) != 1 else ''} one after another: {', '.join(logs)}")
    return logs


#: The kinds whose sinks read chunks, so stall on a chunker change too (sinks.runner.stall_of
#: with chunk_based); the tool-results sink reads no chunks.
_CHUNK_READING = ("text", "vector", "structured", "analytics")
#: The setting behind each chunker value a manifest records (the others come with the release).
_CHUNKER_SETTINGS = {"targetTokens": "USL_CHUNK_TOKENS", "overlapTokens": "USL_CHUNK_OVERLAP_TOKENS",
                     "idleGapSeconds": "USL_IDLE_GAP_SECONDS", "tickEverySeqs": "USL_TICK_EVERY_SEQS"}


def _refuse_a_stall(settings: Any, bootstrap: str, kinds: list[str], logs: list[str]) -> None:
    """Refuse (exit 2) a rebuild that would write another redaction policy or chunker than the
    running sinks of a stalled index write: its new line would be as foreign to them as the
    old one, so the index would stay stalled after a rebuild that reported success. Only a
    stall tells what the sinks write (a watermark's ``versions`` are its publisher's, which is
    the last rebuild's until the sink commits), so an index that is not stalled is not checked."""
    from sinks.versions import pipeline_versions
    from sinks.watermarks import read_watermarks

    refusal = stall_refusal(read_watermarks(bootstrap, settings), kinds, logs, pipeline_versions(settings))
    if refusal is not None:
        raise USLError(refusal)


def stall_refusal(watermarks: dict[tuple[str, str], dict[str, Any]], kinds: list[str], logs: list[str],
                  versions: dict[str, Any]) -> str | None:
    """Why a rebuild of ``kinds`` of ``logs`` writing ``versions`` would leave an index stalled
    (None if it would not): the first stalled watermark among them whose sink writes otherwise,
    compared as :func:`sinks.generations.pipeline_difference` compares a line with a sink."""
    from sinks.generations import pipeline_difference

    policy, chunker = str(versions.get("redactionPolicy") or ""), versions.get("chunker") or {}
    for log_id in logs:
        for kind in kinds:
            watermark = watermarks.get((log_id, kind)) or {}
            shards = watermark.get("shards")
            for record in shards.values() if isinstance(shards, dict) else [watermark]:
                if not isinstance(record.get("stalled"), dict):
                    continue
                sink = record.get("versions") or {}
                chunk_based = kind in _CHUNK_READING
                sink_chunker = sink.get("chunker") or {}
                difference = pipeline_difference(str(sink.get("redactionPolicy") or ""),
                                                 sink_chunker if chunk_based else {}, policy,
                                                 chunker if chunk_based else {})
                if difference is None:
                    continue
                what, writes, would = difference
                hints = [f"{_CHUNKER_SETTINGS[key]}={sink_chunker[key]}" for key in sorted(_CHUNKER_SETTINGS)
                         if what == "chunker" and key in sink_chunker and key in chunker
                         and repr(sink_chunker[key]) != repr(chunker[key])]
                remedy = (f"run it with the sinks' settings ({' '.join(hints)})" if hints else
                          "run it with the release the sinks run (or upgrade the sinks first)")
                where = f"{kind}{' ' + str(record['shard']) if record.get('shard') else ''} of log {log_id!r}"
                return (f"{where} is stalled: the sinks write {what} {writes}; this rebuild would write "
                        f"{would}: its new line would stay stalled; {remedy}; nothing was rebuilt")
    return None
