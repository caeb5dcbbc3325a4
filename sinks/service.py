"""``usl sink``: run one SinkRunner per index kind in this process, until stopped."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from typing import Any

from sinks.kinds import ALL_KINDS, WRITERS, make_writer
from sinks.objectstore.hook import object_store_hook
from sinks.runner import SinkRunner
from sinks.shards import Shard
from sinks.versions import pipeline_versions
from streams.settings import Settings

__all__ = ["ALL_KINDS", "WRITERS", "make_writer", "pipeline_versions", "run_sinks"]

log = logging.getLogger("usl.sink")

def run_sinks(settings: Settings, bootstrap: str, kinds: Sequence[str], *, shard: Shard | None = None) -> None:
    """Run the given sinks (each as ``shard`` of its kind, if given) until SIGTERM/SIGINT; a
    failing sink stops the process (exit 1)."""
    from streams.logs import configure_logging
    from streams.metrics import served_by, start_metrics_server
    from streams.topics import ensure_topics

    configure_logging("usl.sink")
    ensure_topics(bootstrap, settings)
    port = start_metrics_server(settings.metrics_port,
                                families=served_by("sinks", *(["vector sink"] if "vector" in kinds else [])))
    log.info("sink metrics on http://127.0.0.1:%d/metrics", port)
    versions = pipeline_versions(settings)
    hooks = {kind: object_store_hook(settings, bootstrap, kind, shard=None if shard is None else shard.name)
             for kind in kinds}
    runners = [SinkRunner(settings, bootstrap, make_writer(kind, settings), versions=versions, shard=shard,
                          on_commit=hooks[kind][0])
               for kind in kinds]
    failures: list[BaseException] = []

    def drive(runner: SinkRunner) -> None:
        try:
            runner.run()
        except BaseException as exc:
            failures.append(exc)
            log.exception("sink %s failed", runner.label)
            for other in runners:
                other.stop()

    def on_signal(signum: int, _frame: Any) -> None:
        for runner in runners:
            runner.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threads = [threading.Thread(target=drive, args=(r,), name=f"sink-{r.kind}") for r in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for _on_commit, close_hook in hooks.values():
        close_hook()
    if failures:
        raise SystemExit(1)
