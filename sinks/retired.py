"""Deleting retired generation lines once nothing can read them.

``usl rebuild`` switches a kind's ACTIVE line to the rebuilt one and retires the old line
(:meth:`sinks.generations.GenerationStore.retire` writes its ``RETIRED`` file); the old line's
generations stay on disk for the readers that still hold them. A retired line is deleted, whole
(its generations, pins and locks), when all of these hold:

- it has a ``RETIRED`` file older than the grace period (``USL_RETIRED_LINE_GRACE_SECONDS``,
  at least the planner's query pin TTL: a planner that read the old line's watermark just
  before the switch still pins and reads it);
- ACTIVE does not name it (a line made active again is no longer retired);
- no unexpired pin holds any of its generations (a query's pin, or a cursor's, kept for
  ``USL_CURSOR_TTL_SECONDS``); expired pins go with the line;
- no writer holds its writer lock.

A line without ``RETIRED`` is never touched: the ACTIVE line, a line a rebuild is still
building (``rebuild-N`` before its switch), an abandoned one. Each kind directory and each
shard's directory (``shard-I-of-N``) is collected on its own.

Who runs it: :func:`sinks.rebuild.switch_to` after each switch, and every sink after its
commits and on a quiet log (:meth:`sinks.runner.SinkRunner.collect_quiet_logs`), at most once a
minute per log (:func:`collect_retired_lines_due`). Removal renames the
line to a hidden ``.trash-line-*`` directory under the line's exclusive pin lock, then deletes
it: a reader that pins afterwards gets GenerationError (a cursor: CursorExpired), never a
half-deleted line. A ``.trash-line-*`` left by a crash is deleted by the next pass.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sinks.exceptions import GenerationError
from sinks.generations import LINE_TRASH_PREFIX, GenerationStore

__all__ = ["COLLECT_INTERVAL_SECONDS", "RemovedLine", "collect_retired_lines", "collect_retired_lines_due"]

log = logging.getLogger("usl.sink")

COLLECT_INTERVAL_SECONDS = 60.0
"""How often a sink looks for retired lines of a log it commits to."""


@dataclass(frozen=True)
class RemovedLine:
    """A retired line that was deleted, and the bytes that freed (files whose last hard link
    it held)."""

    log_id: str
    kind: str
    shard: str | None
    line: str
    bytes_freed: int


def collect_retired_lines(root: Path, log_id: str, kind: str, *, grace_seconds: float,
                          shard: str | None = None) -> list[RemovedLine]:
    """Delete the retired lines of ``log_id``/``kind`` (of ``shard``'s directory when given)
    that nothing can read any more (see the module docstring). A line that cannot be deleted
    now (a file system error) is logged and left for the next pass."""
    store = GenerationStore(root, log_id, kind, shard=shard)
    kind_dir = store.kind_dir
    if not kind_dir.is_dir():
        return []
    removed: list[RemovedLine] = []
    for line in store.lines():
        candidate = GenerationStore(root, log_id, kind, line, shard=shard)
        try:
            if not _removable(candidate, grace_seconds):
                continue
            trash = candidate.take_line_away(partial(_removable, candidate, grace_seconds))
            if trash is None:
                continue
            freed = _delete(trash)
        except OSError as exc:
            log.warning("retired line %s of %s/%s%s not removed yet: %s", line, log_id, kind,
                        f" {shard}" if shard else "", exc)
            continue
        removed.append(RemovedLine(log_id, kind, shard, line, freed))
        log.info("removed retired %s line %s of log %s%s: %d bytes freed", kind, line, log_id,
                 f" ({shard})" if shard else "", freed)
    for leftover in kind_dir.glob(f"{LINE_TRASH_PREFIX}*"):  # of a collector that crashed
        if leftover.is_dir():
            _delete(leftover)
    return removed


def _removable(store: GenerationStore, grace_seconds: float) -> bool:
    retired_at = store.retired_at()
    return (retired_at is not None and time.time() - retired_at >= grace_seconds
            and store.line != store.active_line())


def _delete(tree: Path) -> int:
    """Delete ``tree`` and return the bytes of the files whose every hard link was in it."""
    links: dict[tuple[int, int], list[int]] = {}  # inode -> [links seen, st_nlink, size]
    for directory, _subdirs, files in os.walk(tree):
        for name in files:
            try:
                st = os.lstat(os.path.join(directory, name))
            except FileNotFoundError:
                continue
            seen = links.setdefault((st.st_dev, st.st_ino), [0, st.st_nlink, st.st_size])
            seen[0] += 1
    shutil.rmtree(tree, ignore_errors=True)
    return sum(size for count, nlink, size in links.values() if count >= nlink)


_last_pass: dict[tuple[str, str, str, str | None], float] = {}
_last_pass_lock = threading.Lock()


def collect_retired_lines_due(root: Path, log_id: str, kind: str, *, grace_seconds: float,
                              shard: str | None = None,
                              interval_seconds: float = COLLECT_INTERVAL_SECONDS) -> list[RemovedLine]:
    """:func:`collect_retired_lines`, unless this process ran it for the same directory less
    than ``interval_seconds`` ago (a sink calls it after every commit). Never raises for a
    file system error or a malformed ACTIVE file: the sink's commit is done and must not fail
    on this."""
    key = (str(root), log_id, kind, shard)
    now = time.monotonic()
    with _last_pass_lock:
        if now - _last_pass.get(key, float("-inf")) < interval_seconds:
            return []
        _last_pass[key] = now
    try:
        return collect_retired_lines(root, log_id, kind, grace_seconds=grace_seconds, shard=shard)
    except (OSError, GenerationError) as exc:
        log.warning("retired lines of %s/%s not collected: %s", log_id, kind, exc)
        return []
