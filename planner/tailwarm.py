"""The tail warmer: keeps recent ``latest`` tail scans current while the log head moves.

A ``latest`` query whose tail scan is cached costs little more than an ``indexed`` one; an
uncached one pays for validating, redacting, chunking and embedding every event above the
indexes (``docs/planner.md``, "Performance"). Between two queries the log head moves, so the
next query would pay for the new events. The warmer pays for them in the background instead:
every ``every_seconds`` it asks the planner to extend the tail snapshot of each scan a query
used in the last ``idle_seconds`` (and to embed its new chunks), exactly as the next query
would. The query then continues from that snapshot, so its answer is the one it would have
computed itself (the snapshots and vectors are the same; ``tests/planner/test_tailwarm.py``).

Costs stay bounded: only scans a query used recently are warmed, each pass reads only the
events the previous one did not (at most the planner's ``tail_cap``), and a pass is skipped
when neither the log head nor a watermark moved. A failing pass is logged and retried on the
next tick; it never reaches a query. :meth:`TailWarmer.stop` ends the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

__all__ = ["WARM_EVERY_SECONDS", "TailWarmer"]

log = logging.getLogger("usl.planner.tailwarm")

WARM_EVERY_SECONDS = 0.5
"""How often the API server's planner warms its recent tail scans: a pass with nothing new
costs a committed-seq read; a query arriving after that finds the new events scanned."""


class TailWarmer:
    """Calls ``warm(key)`` every ``every_seconds`` for each key noted in the last ``idle_seconds``."""

    def __init__(self, warm: Callable[[Hashable], None], *, every_seconds: float,
                 idle_seconds: float = 300.0, prepare: Callable[[], object] | None = None) -> None:
        self._warm = warm
        self._prepare = prepare
        self.every_seconds = every_seconds
        self.idle_seconds = idle_seconds
        self._used: dict[Hashable, float] = {}  # key -> monotonic time a query last used it
        self._failing: dict[Hashable, str] = {}  # key -> the error its last pass raised
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        """Warm calls made so far (for tests and the benchmark)."""

    def note(self, key: Hashable) -> None:
        """A query used the tail scan ``key``: keep it warm for ``idle_seconds``."""
        with self._lock:
            self._used[key] = time.monotonic()

    def run_once(self) -> int:
        """One pass over the recently used keys (the thread's body; tests call it directly)."""
        now = time.monotonic()
        with self._lock:
            for key in [key for key, used in self._used.items() if now - used > self.idle_seconds]:
                del self._used[key]
            keys = list(self._used)
        for key in keys:
            if self._stopping.is_set():
                break
            try:
                self._warm(key)
                self._failing.pop(key, None)
            except Exception as exc:  # a broker or index hiccup: the next pass retries
                # Said once per scan and cause, not twice a second while it lasts.
                repeated = self._failing.get(key) == str(exc)
                self._failing[key] = str(exc)
                log.log(logging.DEBUG if repeated else logging.WARNING,
                        "tail warmer: warming %r failed: %s", key, exc)
            self.passes += 1
        return len(keys)

    def start(self) -> TailWarmer:
        self._thread = threading.Thread(target=self._run, name="usl-tail-warmer", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_seconds: float = 10.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)

    def _run(self) -> None:
        if self._prepare is not None:
            # What the first latest query would load (the chunker's tokenizer), loaded now.
            try:
                self._prepare()
            except Exception as exc:
                log.warning("tail warmer: preparing failed: %s", exc)
        while not self._stopping.wait(self.every_seconds):
            self.run_once()
