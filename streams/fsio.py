"""Durable local file writes, shared by every package that keeps state on disk.

A replaced file is written beside its target, fsynced, renamed over it (atomic on POSIX) and
its directory fsynced, so a reader sees the old or the new content and a crash never leaves a
torn or lost file. ``durable=False`` keeps the atomic rename but skips both fsyncs, for state
that is rebuilt after a crash anyway.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write", "fsync_directory", "replace_with"]


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8); new files get ``mode``."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    replace_with(path, lambda handle: handle.write(body), durable=durable, mode=mode)


def replace_with(path: Path, write: Callable[[BinaryIO], object], *, durable: bool = True,
                 mode: int = 0o600) -> None:
    """Replace ``path`` with what ``write(handle)`` writes to a new file, as :func:`atomic_write`
    does with bytes: for content too large to hold in memory at once, written piece by piece."""
    staging = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new entry in ``directory`` survive a crash (where the OS allows it)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # not every platform opens directories; the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
