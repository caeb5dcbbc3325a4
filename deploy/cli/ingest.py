"""``usl ingest``: one-shot imports and follow mode, both through :class:`streams.follow.Follower`,
so a file already imported (once or by a follower) appends nothing again."""

from __future__ import annotations

import gc
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from deploy.cli._common import (
    LOG_OPTION,
    command_broker,
    err,
    escape,
    load_settings,
    out,
    print_json,
)
from deploy.process import stop_signals
from streams.exceptions import USLError
from streams.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["COMMANDS", "IngestInterrupted", "follow_paths", "ingest", "ingest_once", "register"]

COMMANDS = ("ingest",)  # the names register() adds
_REJECTS_SHOWN = 3  # per poll of --follow: enough to see what is wrong, `usl deadletters` has the rest


class IngestInterrupted(KeyboardInterrupt):
    """A one-shot import stopped by Ctrl-C, with what reached L1 before it."""

    def __init__(self, appended: int, l1_seq: int) -> None:
        super().__init__(appended, l1_seq)
        self.appended, self.l1_seq = appended, l1_seq


def register(app: typer.Typer) -> None:
    """Add ``ingest`` to ``app``."""
    app.command()(ingest)


def ingest(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., metavar="PATH", help="Files or directories to import."),
    fmt: str = typer.Option(None, "--format", metavar="FORMAT", help="asp | claude-code | openai-chat | codex | gemini-cli (default: detect)."),
    log: str = LOG_OPTION,
    follow: bool = typer.Option(False, "--follow", help="Keep tailing PATHS (growing files, new files in "
                                "directories) until stopped; positions under USL_HOME/follow."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Append the events of PATHS to the L1 log, each event once (an imported file appends nothing
    again); rejected records go to the dead-letter topic. In a directory, a file whose format its
    first records do not show (a manifest, notes) is skipped and listed, and so is a file of
    text (no JSON record in its first lines: a log) with --format too; a file named as PATH
    must be a transcript. A Claude Code file of summaries only (a session left before its first
    prompt) holds nothing to import and is skipped and listed, named as PATH too. Without a
    stack (`usl up`) the events wait in L1, unindexed: the local broker is started for the
    command and stopped after it.

    Progress on stderr: lines read of the input's total, records, rate and ETA; with --follow, a
    line per poll that appended something."""
    from streams.importers import FORMATS

    if fmt is not None and fmt not in FORMATS:
        raise USLError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    missing = [p for p in paths if not p.exists()]
    if missing and not follow:
        raise USLError(f"{missing[0]} does not exist")
    current = load_settings()
    try:
        with _broker_to_append_to(current) as servers:
            if follow:
                followed = follow_paths(current, servers, paths, fmt, log, err())
                if json_out:  # the summary of what this follower appended, once it is stopped
                    print_json(followed)
                return
            # --json: no console at all (rich is a tenth of the command's start, issue #16).
            summary = ingest_once(current, servers, paths, fmt, log, None if json_out else err(),
                                  show_progress=not json_out)
    except IngestInterrupted as stopped:
        # At least: a batch in flight at Ctrl-C may still arrive; the re-run counts it as already in L1.
        reached = (f"at least {stopped.appended} event(s) reached L1 before Ctrl-C (L1 seq {stopped.l1_seq} or later)"
                   if stopped.appended else "Ctrl-C came before L1 acknowledged any event")
        err().print(escape(f"interrupted: {reached}; run the same command again to import the rest: "
                           "what L1 already holds is not appended twice"), soft_wrap=True)
        raise typer.Exit(130) from None
    except KeyboardInterrupt:  # before the import began (starting the broker, connecting)
        err().print("interrupted before the import began: nothing was appended")
        raise typer.Exit(130) from None
    if json_out:
        print_json(summary)
        return
    read, appended, cut = summary["recordsRead"], summary["eventsAppended"], summary["eventsCut"]
    others = {name: count for name, count in summary["eventsByLog"].items() if name != log}
    where = f"log {log!r} (L1 seq now {summary['l1CommittedSeq']})" if not others else \
        "logs " + ", ".join(repr(name) for name in summary["eventsByLog"])
    out().print(escape(f"read {read} records from {', '.join(str(p) for p in paths)} ({summary['format']}); appended "
                       f"{appended} events to {where}; {summary['duplicatesSkipped']} already in L1; "
                       f"rejected {summary['rejected']}"))
    source = ctx.get_parameter_source("log")
    if others and source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
        # An ASP event names its log; --log only names the log of records that do not. Said only
        # to whoever chose a log: without --log the line above says where the events went.
        err().print(escape(f"note: {sum(others.values())} event(s) name their own log ("
                           + ", ".join(f"{name!r}: {count}" for name, count in others.items())
                           + f") and stay in it; --log {log!r} applies to records that name none"))
    if cut:
        out().print(f"  cut {cut} event(s) over {current.max_event_bytes} bytes (USL_MAX_EVENT_BYTES) to fit; "
                    "their fields._truncated says so")
    for reason, count in Counter(summary["rejectedByReason"]).most_common():
        out().print(escape(f"  rejected {count:>5}  {reason}"))
    for example in summary["rejectedRecords"][:5]:
        out().print(escape(f"    e.g. {example['record']}: {example['reason']}"))
    if summary["rejectedEarlier"]:
        out().print(f"  still bad {summary['rejectedEarlier']:>4}  record(s) an earlier import already "
                    "dead-lettered (not sent again; `usl deadletters` lists them)")
        for example in summary["rejectedEarlierRecords"][:5]:
            out().print(escape(f"    e.g. {example['record']}: {example['reason']}"))
    if summary["deadLettersResolved"]:
        out().print(f"  resolved {summary['deadLettersResolved']:>5}  record(s) an earlier import dead-lettered are "
                    "imported now (no longer pending in `usl deadletters` and `usl status`)")
        for record in summary["deadLettersResolvedRecords"][:5]:
            out().print(escape(f"    e.g. {record}"))
    for reason, files in _by_reason(summary["skippedReasons"]).items():
        out().print(escape(f"  skipped {len(files)} file(s): {reason}:"), soft_wrap=True)
        for path in files[:10]:
            out().print(escape(f"    {path}"), soft_wrap=True)


def _by_reason(reasons: dict[str, str]) -> dict[str, list[str]]:
    """The files of ``reasons`` (file → why it was skipped) under each reason, in file order."""
    grouped: dict[str, list[str]] = {}
    for path, reason in reasons.items():
        grouped.setdefault(reason, []).append(path)
    return grouped


def _count(report: Any) -> None:
    from streams.metrics import dead_letter_reason, usl_dead_letters_total, usl_records_total

    usl_records_total.labels(stage="ingest").inc(report.appended)
    for item in report.rejected_items:
        usl_dead_letters_total.labels(stage="ingest", reason=dead_letter_reason(item.reason)).inc()


def _follower(settings: Settings, bootstrap: str, paths: list[Path], fmt: str | None, log: str,
              *, once: bool, on_record: Any = None) -> tuple[Any, Any]:
    from streams.follow import ConnectingAppender, Follower, KafkaAppender, PositionStore

    def connect() -> KafkaAppender:
        from streams.topics import ensure_topics

        ensure_topics(bootstrap, settings)
        return KafkaAppender(bootstrap, settings, prefetch=True, log_id=log)

    # Topics and clients are made while the follower imports the files (issue #16): making them
    # is mostly waiting for the broker (0.3-1 s for a fresh topic prefix), importing is CPU.
    store = PositionStore(settings.home)
    appender = ConnectingAppender(connect)
    follower = Follower(paths, appender=appender, store=store, log_id=log, fmt=fmt,
                        max_event_bytes=settings.max_event_bytes, idle_seconds=settings.follow_idle_seconds,
                        once=once, on_record=on_record)
    return follower, appender


@contextmanager
def _few_collections() -> Iterator[None]:
    """Garbage collection fit for a one-shot import.

    An import makes a few hundred thousand objects per 10 000 events and frees nearly all of
    them by reference counting; with the default thresholds the collector ran hundreds of times
    over the process's modules and the growing batch, about a sixth of the command's CPU (issue
    #16, docs/benchmarks.md). What is loaded by now stays (out of the collector's way), and the
    young generation is collected every 100 000 new objects instead of every 700."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


@contextmanager
def _broker_to_append_to(current: Settings) -> Iterator[str]:
    """The bootstrap servers to append to (:func:`deploy.cli._common.command_broker`). Without a
    stack under ``USL_HOME`` (no ``usl up``) the events reach L1 but nothing indexes them, which
    the user is told."""
    from deploy.stack import running

    with command_broker(current) as servers:
        if not current.bootstrap_servers and not running(current):
            err().print(f"[yellow]note:[/] no USL stack runs under USL_HOME={Path(current.home).resolve()}: "
                        "the events go to L1, and nothing indexes them until `usl up --detach`", soft_wrap=True)
        yield servers


def ingest_once(settings: Settings, bootstrap: str, paths: list[Path], fmt: str | None, log: str,
                err: Console | None, *, show_progress: bool = True) -> dict[str, Any]:
    """Import ``paths`` once; the summary ``usl ingest --json`` prints. Progress on ``err``
    (lines read of the input's total, records, rate and ETA) for a single PATH.

    No metrics are counted: this process serves no ``/metrics`` and its counters would end with
    it (the summary says what they would; docs/operations.md)."""
    with ExitStack() as stack:
        on_record = None
        if show_progress and len(paths) == 1 and err is not None:
            from deploy.cli.progress import ImportProgress

            on_record = stack.enter_context(ImportProgress(paths[0], err, enabled=True)).record
        stack.enter_context(_few_collections())
        follower, appender = _follower(settings, bootstrap, paths, fmt, log, once=True, on_record=on_record)
        tally = _Tally(appender)
        follower.appender = tally
        finished = False
        try:
            report = follower.poll()
            committed = appender.committed_seq(log)
            finished = True
        except KeyboardInterrupt:
            # What the broker acknowledged is in L1 (the follower's write-ahead record says which
            # file it came from); a re-run checks the file against L1 and appends only the rest.
            raise IngestInterrupted(tally.acknowledged, tally.highest_seq) from None
        finally:
            # Stopped (Ctrl-C, a broker gone), close at once: waiting for the acknowledgements
            # here held a Ctrl-C'd import for as long as the broker was away.
            appender.close(wait=finished)
    reasons: Counter[str] = Counter(_reason_group(item.reason) for item in report.rejected_items)
    formats = sorted(report.formats)
    return {
        "path": str(paths[0]) if len(paths) == 1 else [str(p) for p in paths],
        "format": fmt or (formats[0] if len(formats) == 1 else "auto"), "logId": log,
        "partition": appender.registry.partition_of(log), "recordsRead": report.records_read,
        "eventsAppended": report.appended, "duplicatesSkipped": report.duplicates, "eventsCut": report.cut,
        "rejected": report.rejected, "rejectedByReason": dict(reasons),
        "rejectedRecords": [{"record": i.record, "reason": i.reason} for i in report.rejected_items[:20]],
        "rejectedEarlier": len(report.rejected_before),
        "rejectedEarlierRecords": [{"record": i.record, "reason": i.reason} for i in report.rejected_before[:20]],
        "deadLettersResolved": len(report.resolved),
        "deadLettersResolvedRecords": report.resolved[:20],
        "skippedFiles": sorted([*report.undetected, *(path for path, _why in report.skipped)]),
        # Every skipped file has its reason; one whose format cannot be told had none (SPEC §12).
        "skippedReasons": dict(sorted({**report.undetected_reasons, **dict(report.skipped)}.items())),
        "l1CommittedSeq": committed,
        "eventsByLog": dict(sorted(report.logs.items())),
    }


class _Tally:
    """The appender of a one-shot import, counting the events L1 acknowledged: what an import
    stopped by Ctrl-C says it appended."""

    def __init__(self, appender: Any) -> None:
        self._appender = appender
        self.sent = self.acknowledged = self.highest_seq = 0

    def append(self, event: dict[str, Any], canonical: bytes | None = None) -> None:
        self._appender.append(event, canonical)
        self.sent += 1

    def flush(self) -> int:
        self.highest_seq = self._appender.flush()
        self.acknowledged = self.sent
        return self.highest_seq

    def __getattr__(self, name: str) -> Any:
        return getattr(self._appender, name)


def follow_paths(settings: Settings, bootstrap: str, paths: list[Path], fmt: str | None, log: str,
                 err: Console) -> dict[str, Any]:
    """Tail ``paths`` until SIGTERM/SIGINT; a line on stderr per poll that appended something.
    Returns what ``--json`` prints once stopped: the totals of this run."""
    from streams.metrics import served_by, start_metrics_server

    stop = stop_signals()
    # A follower runs for as long as the agents it follows: an operator needs to see it append
    # (or dead-letter) as the worker and sinks are seen, and notice it stopped (the scrape fails).
    port = start_metrics_server(settings.metrics_port, families=served_by("follower"))
    follower, appender = _follower(settings, bootstrap, paths, fmt, log, once=False)
    err.print(escape(f"following {', '.join(str(p) for p in paths)} into log {log!r} "
                     f"(positions in {follower.store.path}; metrics on http://127.0.0.1:{port}/metrics)"))
    totals = Counter[str]()
    # A skipped file is looked at again whenever it changes, and a log written all day (a CLI's
    # debug log in a followed directory) changes on every poll: it is named once per reason.
    told: dict[str, str] = {}

    def tell_skipped(path: Any, why: str) -> None:
        if told.get(str(path)) != why:
            told[str(path)] = why
            err.print(escape(f"skipping {path}: {why} (looked at again when it changes)"), soft_wrap=True)

    def on_poll(report: Any) -> None:
        _count(report)
        for path in report.undetected:
            tell_skipped(path, "its format cannot be told from its first records (yet)")
        for path, why in report.skipped:
            tell_skipped(path, why)
        dead_lettered = {item.record for item in report.rejected_items}
        for record, size in report.cut_lines:
            if record not in dead_lettered:  # dead-lettered before (a restarted follower)
                continue
            err.print(escape(f"cut off at {record}: the file has been idle for {settings.follow_idle_seconds:g}s and "
                             f"its last line ({size} bytes) has no newline and is no whole JSON line; "
                             "dead-lettered, as `usl ingest` of the file does (if the rest is written, the "
                             "line is imported and its dead letter resolved)"), soft_wrap=True)
        if report.appended or report.rejected:
            totals.update(appended=report.appended, rejected=report.rejected)
            err.print(f"{time.strftime('%H:%M:%S')} appended {report.appended} event(s) from "
                      f"{report.files} file(s), rejected {report.rejected}; L1 seq "
                      f"{appender.highest}; total appended {totals['appended']}")
            # Where and why, as a one-shot import says it: a bare count sends the user hunting.
            for item in report.rejected_items[:_REJECTS_SHOWN]:
                err.print(escape(f"  rejected {item.record}: {item.reason}"), soft_wrap=True)
            if report.rejected > _REJECTS_SHOWN:
                err.print(f"  … and {report.rejected - _REJECTS_SHOWN} more (`usl deadletters` lists them)")
            sys.stderr.flush()

    committed = 0
    try:
        follower.run(poll_seconds=settings.follow_poll_seconds, should_stop=stop.is_set, on_poll=on_poll)
        committed = appender.committed_seq(log)
    finally:
        appender.close()
    err.print(f"stopped following; appended {totals['appended']} event(s), rejected {totals['rejected']}")
    return {"path": str(paths[0]) if len(paths) == 1 else [str(p) for p in paths], "logId": log,
            "follow": True, "eventsAppended": totals["appended"], "rejected": totals["rejected"],
            "l1CommittedSeq": committed}


def _reason_group(reason: str) -> str:
    """What rejects are counted under: the reason up to its first colon, at most 80 characters,
    cut after a whole word ("... not one of system, developer, user, …", not "... user, assista")."""
    head = reason.split(":")[0]
    if len(head) <= 80:
        return head
    return head[:80].rsplit(" ", 1)[0].rstrip(",;") + " …"
