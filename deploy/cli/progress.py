"""Progress of long CLI work on stderr: done and total, rate and ETA; nothing with ``--json``.

:class:`ImportProgress` drives ``usl ingest``. Records are not known before they are read,
so the total is the input's lines (counted first: a fast byte scan), and each record's label
(``file:line``) says how far the import is; the rate is in records per second and the ETA
follows from the lines left. :func:`rebuild_progress` drives ``usl rebuild``, whose total is
the log's committed seq.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from streams.importers import directory_files

__all__ = ["ImportProgress", "count_lines", "input_files", "rebuild_progress"]


def input_files(path: Path) -> dict[str, Path]:
    """Label → file of what ``usl ingest PATH`` reads, labelled as the importers label records
    (a file by its name; files of a directory by their path relative to it)."""
    if path.is_file():
        return {path.name: path}
    return {file.relative_to(path).as_posix(): file for file in directory_files(path)}


def count_lines(file: Path) -> int:
    """Lines of ``file`` (a last line without its newline counts)."""
    lines, last = 0, b"\n"
    with file.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


class ImportProgress:
    """``with ImportProgress(path, console, enabled=...) as progress: progress.record(label)``."""

    def __init__(self, path: Path, console: Console, *, enabled: bool) -> None:
        self.enabled = enabled
        self.offsets: dict[str, int] = {}
        total = 0
        for label, file in (input_files(path).items() if enabled else ()):
            self.offsets[label] = total
            total += count_lines(file)
        self.total_lines = total
        self.files = len(self.offsets)
        self.file_number = {label: number for number, label in enumerate(self.offsets, start=1)}
        self.records = 0
        self._started = time.monotonic()
        self._progress = Progress(
            TextColumn("[bold]ingest[/]"), BarColumn(),
            TextColumn("{task.fields[lines]} lines · {task.fields[files]} · "
                       "{task.fields[records]:,} records · {task.fields[rate]}"),
            TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn(),
            console=console, transient=True, disable=not _shown(console, enabled))
        self._task: TaskID | None = None

    def __enter__(self) -> ImportProgress:
        self._progress.__enter__()
        self._task = self._progress.add_task("ingest", total=self.total_lines or None,
                                             lines=f"0/{self.total_lines:,}", files=self._files_text(0),
                                             records=0, rate="-")
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._progress.__exit__(kind, value, traceback)

    def position(self, label: str) -> int:
        """Lines of the input before the record labelled ``label`` (``file:line``)."""
        file, _, line = label.rpartition(":")
        offset = self.offsets.get(file)
        if offset is None or not line.isdigit():
            return -1
        return offset + int(line)

    def _files_text(self, index: int) -> str:
        return f"file {index}/{self.files}" if self.files != 1 else "1 file"

    def record(self, label: str) -> None:
        """One more record read, the one labelled ``label``."""
        self.records += 1
        if not self.enabled or self._task is None:
            return
        position = self.position(label)
        elapsed = max(time.monotonic() - self._started, 1e-6)
        fields: dict[str, object] = {"records": self.records, "rate": f"{self.records / elapsed:,.0f} rec/s"}
        if position >= 0:
            fields["completed"] = min(position, self.total_lines)
            fields["lines"] = f"{fields['completed']:,}/{self.total_lines:,}"
            file = label.rpartition(":")[0]
            fields["files"] = self._files_text(self.file_number[file])
        self._progress.update(self._task, **fields)  # type: ignore[arg-type]


def rebuild_progress(kind: str, console: Console, *, enabled: bool) -> Progress:
    """A bar over the log's seqs, with the rate in seqs per second and the ETA; the task's
    fields are ``count`` (e.g. ``seq 120/4,000``) and ``rate``."""
    return Progress(
        TextColumn(f"[bold]rebuild {kind}[/]"), BarColumn(),
        TextColumn("{task.fields[count]} · {task.fields[rate]}"),
        TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=not _shown(console, enabled))


def _shown(console: Console, enabled: bool) -> bool:
    """Whether a bar is drawn: only on a terminal. Elsewhere (a log file, a pipe) rich draws
    nothing while it runs but leaves an empty line when it stops: one per rebuilt kind."""
    return enabled and console.is_terminal
