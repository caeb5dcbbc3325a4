"""How ``usl status`` prints a status report (:func:`planner.status.build_status`) as tables.

Its own module so that the CLI, which gets the report from the API, renders it without importing
what builds one (the coherence checks, generations and snapshot choice: about a third of the
command's start)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["render_status"]


def _at_natural_width(console: Console, table: Any) -> Any:
    """``table`` laid out as wide as its cells want, whatever the console's width."""
    from rich.measure import Measurement
    from rich.segment import Segments

    options = console.options.update_width(1 << 16)
    return Segments(console.render(table, options.update_width(Measurement.get(console, options, table).maximum)))


def render_status(report: dict[str, Any], console: Console) -> None:
    """``report`` as one table per log, then what holds each index back, stalls and mismatches."""
    from rich.markup import escape
    from rich.table import Table

    letters = report.get("deadLetters") or {}
    if not report["logs"] and not letters.get("count") and not letters.get("logsWithoutEvents"):
        console.print("no logs yet: ingest something with `usl ingest PATH`")
    for log_id, entry in report["logs"].items():
        # One policy for every index goes in the title: at 80 columns the column left the
        # verdict 9 characters, and every `ok: caught up` took two lines.
        # The vector and analytics indexes state no policy (they hold no text a policy redacted),
        # so they do not make the column needed.
        policies = {idx["redactionPolicy"][:8] for idx in entry["indexes"].values() if idx.get("redactionPolicy")}
        title = f"log {log_id!r} — L1 committed seq {entry['l1CommittedSeq']}"
        if len(policies) <= 1:
            if policies:
                title += f" — redaction policy {policies.pop()}"
            policies.clear()
        table = Table(title=title, title_justify="left")
        columns = ("index", "gen", "through", "lag", "lag s", "committed") + (("policy",) if policies else ())
        for column in columns:
            table.add_column(column, no_wrap=True)
        table.add_column("verdict")
        for kind, idx in entry["indexes"].items():
            last = idx["lastCommit"]
            last_text = time.strftime("%H:%M:%S", time.localtime(last)) if last else "-"
            cells = [kind, str(idx["generationId"] if idx["generationId"] is not None else "-"),
                     str(idx["builtThroughSeq"] if idx["builtThroughSeq"] is not None else "-"),
                     str(idx["lagSeqs"]), "-" if idx["lagSeconds"] is None else f"{idx['lagSeconds']:.1f}",
                     last_text]
            if policies:
                cells.append((idx.get("redactionPolicy") or "-")[:8])
            table.add_row(*cells, idx["verdict"])
        # Piped (a pager, a log file, `grep`), a console has no width but rich's default of 80,
        # which wrapped each verdict over eight lines: there the table takes its natural width.
        if console.is_terminal:
            console.print(table)
        else:
            console.print(_at_natural_width(console, table), crop=False)
        stalled_kinds: dict[tuple[str, str, str], dict[str, list[str]]] = {}
        for kind, idx in entry["indexes"].items():
            if idx.get("stalled"):
                from planner.snapshot import stall_remedy

                stall = idx["stalled"]
                stalled_kinds.setdefault((stall["what"], str(stall["built"]), str(stall["writes"])),
                                         {}).setdefault(stall_remedy(stall, log_id), []).append(kind)
        for (what, built, writes), remedies in stalled_kinds.items():
            kinds = [kind for named in remedies.values() for kind in named]
            run = " and ".join(f"`{remedy}`" for remedy in remedies)
            console.print(escape(f"  not indexing {', '.join(kinds)}: built under {what} {built}, the sinks write "
                                 f"{writes}; run {run}"), style="red")
        mismatch = entry.get("mismatch")
        if mismatch:
            console.print(f"  [red]searches refused:[/] {escape(mismatch['message'])}")
            console.print(f"  {escape(mismatch['remedy'])}")
        # One line per event that holds indexes back, naming the indexes it holds (several
        # indexes usually wait on the same one).
        holders: dict[tuple[int, str | None, str | None], list[str]] = {}
        for kind, idx in entry["indexes"].items():
            held_by = idx.get("heldBy")
            if held_by and not idx.get("stalled"):  # a stalled index waits for a rebuild, not an event
                holders.setdefault((held_by["seq"], held_by["sessionId"], held_by["turnId"]), []).append(kind)
        for (seq, session_id, turn_id), kinds in sorted(holders.items(), key=lambda item: item[0][0]):
            which = ", ".join(kinds)
            if session_id is None:
                # Not a session the caller may read (or an unreadable record): its ids
                # are withheld by for_principal, so there is nothing to name but the seq.
                console.print(f"  {which} held back by seq {seq} (its session is not shown to you)")
                continue
            turn = f", turn {turn_id!r}" if turn_id else ""
            console.print(escape(f"  {which} held back by seq {seq}: session {session_id!r}{turn}"))
        _print_dead_letters(entry.get("deadLetters"), console, log_id)
    _print_dead_letters(report.get("deadLetters"), console, None)
    for log_id, letters in (report.get("deadLetters") or {}).get("logsWithoutEvents", {}).items():
        _print_dead_letters(letters, console, log_id, events=False)


def _print_dead_letters(letters: dict[str, Any] | None, console: Console, log_id: str | None, *,
                        events: bool = True) -> None:
    """One line when records were rejected: how many, by which stage, when the newest was."""
    from rich.markup import escape

    if not letters or not letters.get("count"):
        return
    count = letters["count"]
    stages = ", ".join(f"{stage} {n}" for stage, n in sorted(letters["byStage"].items()))
    newest = f", newest {letters['newest']}" if letters.get("newest") else ""
    whose = f"of log {log_id!r}" if log_id is not None else "naming no log (unreadable records)"
    if not events:
        whose += ", which has no events in L1"
    command = f"usl deadletters --log {log_id}" if log_id is not None else "usl deadletters"
    noun = "dead letter" if count == 1 else "dead letters"
    console.print(escape(f"  {count} {noun} {whose} ({stages}{newest}): `{command}`"), style="yellow")
