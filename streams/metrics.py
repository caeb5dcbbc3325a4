"""Every Prometheus metric of every USL process, defined once.

Workers, sinks and the planner import the collectors they update from here, so a metric's
name, type, labels and meaning live in one place and the dashboards
(``deploy/grafana/dashboards/usl.json``), alert rules (``deploy/prometheus/alerts.yml``) and
``docs/operations.md`` can rely on them. ``ALL_METRIC_NAMES`` is the list those files are
checked against.

Naming: one prefix ``usl_``, base units in the name (``_seconds``), counters end in
``_total``. The Python name of a collector is its metric name, so code, PromQL and docs
read alike (``usl_records_total.labels(stage="chunking").inc()``).

Labels are of low cardinality only: ``stage``, ``kind`` (index kind or tick kind), ``log``
(bounded by the L1 partition count), ``partition``, ``rule`` (redaction rule id), ``reason``
(a short fixed code), ``mode`` (freshness mode), ``outcome`` and ``version``. A session id,
user, principal, query text or anything taken from an event never becomes a label value: a
label value is exported verbatim, and invariant 7 forbids secrets in metric labels.

Every process serves its own ``/metrics``, with the families it sets only
(:data:`PROCESS_METRICS`): workers and sinks call :func:`start_metrics_server`; the planner's
ASGI app returns :func:`metrics_text`.
"""

from __future__ import annotations

import socket
from collections.abc import Collection, Iterator, Sequence
from importlib import metadata
from typing import Any, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.metrics_core import Metric

__all__ = [
    "ALL_METRIC_NAMES",
    "DEAD_LETTER_REASONS",
    "INDEX_KINDS",
    "METRICS_CONTENT_TYPE",
    "PROCESS_METRICS",
    "QUERY_MODES",
    "SINK_FAILURE_REASONS",
    "STAGES",
    "dead_letter_reason",
    "metrics_text",
    "served_by",
    "start_metrics_server",
    "usl_build_info",
    "usl_chunks_emitted_total",
    "usl_cursor_refusals_total",
    "usl_dead_letters_total",
    "usl_duplicate_events_total",
    "usl_embed_seconds",
    "usl_generation_id",
    "usl_generation_merges_total",
    "usl_generation_switches_total",
    "usl_index_lag_seconds",
    "usl_index_lag_seqs",
    "usl_index_stalled",
    "usl_l1_committed_seq",
    "usl_objectstore_backlog_generations",
    "usl_objectstore_publish_failures_total",
    "usl_progress_marker_seq",
    "usl_queries_total",
    "usl_query_fallbacks_total",
    "usl_query_seconds",
    "usl_records_total",
    "usl_redactions_total",
    "usl_sink_batch_chunks",
    "usl_sink_batch_seconds",
    "usl_sink_commit_seconds",
    "usl_sink_failures_total",
    "usl_tail_scan_events",
    "usl_ticks_total",
    "usl_watermark_seq",
]

#: Values of the ``stage`` label of ``usl_records_total`` and ``usl_duplicate_events_total``.
STAGES: tuple[str, ...] = (
    "ingest", "redaction", "chunking",
    "sink_text", "sink_vector", "sink_structured", "sink_analytics", "sink_toolresults",
)
#: Values of the ``kind`` label of the sink, generation and watermark metrics.
INDEX_KINDS: tuple[str, ...] = ("text", "vector", "structured", "analytics", "toolresults")
#: Values of the ``mode`` label of the query metrics.
QUERY_MODES: tuple[str, ...] = ("indexed", "latest", "wait")
#: Known values of the ``reason`` label of ``usl_dead_letters_total``.
DEAD_LETTER_REASONS: tuple[str, ...] = (
    "invalid_json", "schema", "foreign_record", "redaction_failed", "chunking_failed", "sink_failed",
    "foreign_tenant", "eventid_collision", "duplicate_keys", "conflict",
)


def dead_letter_reason(reason: str) -> str:
    """An importer's or receiver's message as the low-cardinality ``reason`` label of
    :data:`usl_dead_letters_total`."""
    lowered = reason.lower()
    if "with other content" in lowered:
        return "conflict"  # an eventId L1 holds with other content: the first copy stands
    if "json" in lowered or "truncated" in lowered:
        return "invalid_json"
    if "foreign" in lowered or "unknown record" in lowered:
        return "foreign_record"
    return "schema"

#: Values of the ``reason`` label of ``usl_sink_failures_total``.
SINK_FAILURE_REASONS: tuple[str, ...] = ("write_error", "verification")

#: Content type to serve :func:`metrics_text` with.
METRICS_CONTENT_TYPE: str = CONTENT_TYPE_LATEST

# Latency buckets from 1 ms (a cached text query) to 2 min (a large sink commit under load).
_LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)
# A sink batch holds up to USL_SINK_BATCH_SIZE (default 512) chunks; a rebuild may batch more.
_BATCH_CHUNK_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 512, 1000, 2500, 5000, 10000)
# Tail scans range from nothing (indexes caught up) to a large gap after a sink outage.
_TAIL_SCAN_BUCKETS = (0, 1, 10, 50, 100, 500, 1000, 5000, 10000, 50000, 100000, 500000)

_C = TypeVar("_C", Counter, Gauge, Histogram)


def _metric(factory: type[_C], name: str, doc: str, labels: Sequence[str] = (),
            **kwargs: Any) -> _C:
    """Register ``name`` in the default registry, or return the collector already there.

    A second import of this module (``importlib.reload``, or the same file loaded under
    another module name by a test runner) would otherwise fail with "Duplicated timeseries";
    returning the existing collector keeps every importer updating the one exported series.
    """
    # The client registers a counter as "usl_x" plus "usl_x_total"; either key finds it.
    existing = REGISTRY._names_to_collectors.get(name)
    if existing is not None:
        if not isinstance(existing, factory):
            raise TypeError(f"metric {name} is already registered as {type(existing).__name__}")
        return existing
    return factory(name, doc, labelnames=tuple(labels), **kwargs)


# --- streams: ingest, redaction, chunking -------------------------------------------------

usl_records_total = _metric(
    Counter, "usl_records_total",
    "Records processed, per pipeline stage.",
    ["stage"],
)
usl_dead_letters_total = _metric(
    Counter, "usl_dead_letters_total",
    "Records sent to the dead-letter topic, per stage and reason code.",
    ["stage", "reason"],
)
usl_duplicate_events_total = _metric(
    Counter, "usl_duplicate_events_total",
    "Records skipped as already applied (replay or duplicate eventId).",
    ["stage"],
)
usl_redactions_total = _metric(
    Counter, "usl_redactions_total",
    "Values replaced by the redaction policy, per rule id.",
    ["rule"],
)
usl_chunks_emitted_total = _metric(
    Counter, "usl_chunks_emitted_total",
    "SearchChunkV1 records emitted by the chunking agent.",
)
usl_ticks_total = _metric(
    Counter, "usl_ticks_total",
    "Log-clock ticks broadcast by the redaction agent, by kind (regular|flush|quiet).",
    ["kind"],
)
usl_progress_marker_seq = _metric(
    Gauge, "usl_progress_marker_seq",
    "Seq of the last progress marker published, per log and partition.",
    ["log", "partition"],
)

# --- sinks ---------------------------------------------------------------------------------

usl_sink_batch_seconds = _metric(
    Histogram, "usl_sink_batch_seconds",
    "Time to write one batch into a new generation's segments.",
    ["kind"], buckets=_LATENCY_BUCKETS,
)
usl_sink_commit_seconds = _metric(
    Histogram, "usl_sink_commit_seconds",
    "Time to verify a generation and switch its manifest pointer.",
    ["kind"], buckets=_LATENCY_BUCKETS,
)
usl_sink_batch_chunks = _metric(
    Histogram, "usl_sink_batch_chunks",
    "Chunks per committed sink batch.",
    ["kind"], buckets=_BATCH_CHUNK_BUCKETS,
)
usl_sink_failures_total = _metric(
    Counter, "usl_sink_failures_total",
    "Sink commits that failed on a write error (retried with back-off) and generations that "
    "failed verification (the log is rebuilt from L1), per index kind and reason.",
    ["kind", "reason"],
)
usl_objectstore_backlog_generations = _metric(
    Gauge, "usl_objectstore_backlog_generations",
    "Logs whose newest locally committed generation is not yet published to the object store "
    "(USL_OBJECT_STORE), per index kind; 0 when the store keeps up or is not configured.",
    ["kind"],
)
usl_objectstore_publish_failures_total = _metric(
    Counter, "usl_objectstore_publish_failures_total",
    "Attempts to publish a generation to the object store that failed (retried with back-off), per index kind.",
    ["kind"],
)
usl_generation_switches_total = _metric(
    Counter, "usl_generation_switches_total",
    "Atomic manifest-pointer switches to a new generation.",
    ["kind"],
)
usl_generation_merges_total = _metric(
    Counter, "usl_generation_merges_total",
    "Segment merges that produced a new generation.",
    ["kind"],
)
usl_generation_id = _metric(
    Gauge, "usl_generation_id",
    "Current (live) generation id, per log and index kind.",
    ["log", "kind"],
)
usl_watermark_seq = _metric(
    Gauge, "usl_watermark_seq",
    "builtThroughSeq of the last published watermark, per log and index kind.",
    ["log", "kind"],
)
usl_embed_seconds = _metric(
    Histogram, "usl_embed_seconds",
    "Time to embed one batch of texts.",
    buckets=_LATENCY_BUCKETS,
)

# --- freshness (set by the planner, which reads L1 and the watermarks) ----------------------

usl_l1_committed_seq = _metric(
    Gauge, "usl_l1_committed_seq",
    "Committed L1 seq (the log partition's last stable offset).",
    ["log"],
)
usl_index_lag_seqs = _metric(
    Gauge, "usl_index_lag_seqs",
    "Committed L1 seq minus the index's builtThroughSeq.",
    ["log", "kind"],
)
usl_index_stalled = _metric(
    Gauge, "usl_index_stalled",
    "1 while the sink does not index this log because its line was built under another redaction "
    "policy or chunker than the sink writes (run usl rebuild all --log LOG), else 0; per log and index kind.",
    ["log", "kind"],
)
usl_index_lag_seconds = _metric(
    Gauge, "usl_index_lag_seconds",
    "Age of the oldest committed L1 event the index does not cover yet.",
    ["log", "kind"],
)

# --- planner ------------------------------------------------------------------------------

usl_query_seconds = _metric(
    Histogram, "usl_query_seconds",
    "Search latency, per freshness mode (indexed|latest|wait).",
    ["mode"], buckets=_LATENCY_BUCKETS,
)
usl_queries_total = _metric(
    Counter, "usl_queries_total",
    "Searches answered, per freshness mode and outcome (ok|error|refused).",
    ["mode", "outcome"],
)
usl_tail_scan_events = _metric(
    Histogram, "usl_tail_scan_events",
    "L1 events read by one query's tail scan.",
    buckets=_TAIL_SCAN_BUCKETS,
)
usl_query_fallbacks_total = _metric(
    Counter, "usl_query_fallbacks_total",
    "Fallbacks a query disclosed, per reason code.",
    ["reason"],
)
usl_cursor_refusals_total = _metric(
    Counter, "usl_cursor_refusals_total",
    "Cursors refused, per reason code (tampered, expired, mismatch...).",
    ["reason"],
)

# --- every process --------------------------------------------------------------------------

usl_build_info = _metric(
    Gauge, "usl_build_info",
    "Always 1; the version label says which release the process runs.",
    ["version"],
)


def _version() -> str:
    try:
        return metadata.version("usl-search")
    except metadata.PackageNotFoundError:
        return "0+unknown"


usl_build_info.labels(version=_version()).set(1)

#: Every metric name as written in PromQL (histograms add ``_bucket``, ``_sum``, ``_count``).
ALL_METRIC_NAMES: tuple[str, ...] = (
    "usl_records_total",
    "usl_dead_letters_total",
    "usl_duplicate_events_total",
    "usl_redactions_total",
    "usl_chunks_emitted_total",
    "usl_ticks_total",
    "usl_progress_marker_seq",
    "usl_sink_batch_seconds",
    "usl_sink_commit_seconds",
    "usl_sink_batch_chunks",
    "usl_sink_failures_total",
    "usl_objectstore_backlog_generations",
    "usl_objectstore_publish_failures_total",
    "usl_generation_switches_total",
    "usl_generation_merges_total",
    "usl_generation_id",
    "usl_watermark_seq",
    "usl_l1_committed_seq",
    "usl_index_lag_seqs",
    "usl_index_lag_seconds",
    "usl_index_stalled",
    "usl_query_seconds",
    "usl_queries_total",
    "usl_tail_scan_events",
    "usl_query_fallbacks_total",
    "usl_cursor_refusals_total",
    "usl_embed_seconds",
    "usl_build_info",
)


#: The metric families each process sets, so the only ones it serves (docs/operations.md,
#: "exported by"): a family a process never sets would be scraped at zero from it, and a
#: histogram at zero is a NaN series in every quantile panel grouped by job.
PROCESS_METRICS: dict[str, tuple[str, ...]] = {
    "worker": ("usl_records_total", "usl_dead_letters_total", "usl_duplicate_events_total",
               "usl_redactions_total", "usl_chunks_emitted_total", "usl_ticks_total",
               "usl_progress_marker_seq"),
    "sinks": ("usl_records_total", "usl_dead_letters_total", "usl_duplicate_events_total",
              "usl_sink_batch_seconds", "usl_sink_commit_seconds", "usl_sink_batch_chunks",
              "usl_sink_failures_total", "usl_objectstore_backlog_generations",
              "usl_objectstore_publish_failures_total", "usl_generation_switches_total",
              "usl_generation_merges_total", "usl_generation_id", "usl_watermark_seq", "usl_index_stalled"),
    # Only a sinks process that runs the vector sink embeds.
    "vector sink": ("usl_embed_seconds",),
    # `usl ingest --follow`, a long-lived process: what it appends and dead-letters.
    "follower": ("usl_records_total", "usl_dead_letters_total"),
    # The receivers (POST /v1/events, /v1/traces, /v1/logs) count what they append and refuse.
    "planner": ("usl_records_total", "usl_dead_letters_total",
                "usl_l1_committed_seq", "usl_index_lag_seqs", "usl_index_lag_seconds", "usl_query_seconds",
                "usl_queries_total", "usl_tail_scan_events", "usl_query_fallbacks_total",
                "usl_cursor_refusals_total"),
}


def served_by(*processes: str) -> frozenset[str]:
    """The families a process made of ``processes`` (keys of :data:`PROCESS_METRICS`) serves:
    theirs and ``usl_build_info``."""
    return frozenset({"usl_build_info"}.union(*(PROCESS_METRICS[name] for name in processes)))


class _Only:
    """The default registry's families named in ``families``, and no others."""

    def __init__(self, families: Collection[str]) -> None:
        # The client names a counter's family without its "_total".
        self._names = {name.removesuffix("_total") for name in families}

    def collect(self) -> Iterator[Metric]:
        return (family for family in REGISTRY.collect() if family.name in self._names)


def _registry(families: Collection[str] | None) -> CollectorRegistry:
    if families is None:
        return REGISTRY
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Only(families))
    return registry


def start_metrics_server(port: int = 0, host: str = "127.0.0.1", *,
                         families: Collection[str] | None = None) -> int:
    """Serve ``/metrics`` of the default registry (only ``families``, e.g. :func:`served_by`,
    if given) from a daemon thread; return the bound port.

    ``port=0`` picks a free port (what ``USL_METRICS_PORT=0`` means), so several workers on
    one host never collide; the caller logs or publishes the port it got.
    """
    if port == 0:
        port = _free_port(host)
    result = start_http_server(port, addr=host, registry=_registry(families))
    # prometheus-client >= 0.17 returns (server, thread): report what the server really bound.
    if isinstance(result, tuple):
        return int(result[0].server_port)
    return port


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def metrics_text(families: Collection[str] | None = None) -> bytes:
    """The default registry (only ``families``, if given) in Prometheus text format, for an
    ASGI ``GET /metrics`` route."""
    return generate_latest(_registry(families))
