"""Typed settings: every knob in one place, with its environment variable, default and meaning.

``docs/configuration.md`` lists the same table; ``tests/test_docs.py`` checks they agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from streams.exceptions import ConfigError

__all__ = ["Settings", "setting_docs"]


def _setting(
    env: str, default: Any, doc: str, *, choices: tuple[str, ...] = (), prefixes: tuple[str, ...] = (),
    minimum: float | None = None, secret: bool = False,
) -> Any:
    """A setting's field. ``choices`` (or ``prefixes``, for values such as ``openai:MODEL``) and
    ``minimum`` are checked whenever a :class:`Settings` is made; a ``secret`` is left out of
    ``repr`` so it never reaches a log line or a traceback."""
    metadata = {"env": env, "doc": doc, "choices": choices, "prefixes": prefixes, "minimum": minimum}
    return field(default=default, repr=not secret, metadata=metadata)


@dataclass(frozen=True)
class Settings:
    """Runtime configuration, read from the environment by :meth:`from_env`."""

    home: Path = _setting("USL_HOME", Path(".usl"), "Directory holding all local state: indexes, broker data, pid files.")
    bootstrap_servers: str | None = _setting(
        "KAFKA_BOOTSTRAP_SERVERS", None,
        "Existing Kafka cluster to use. Unset: the project starts its own single-node broker.",
    )
    topic_prefix: str = _setting("USL_TOPIC_PREFIX", "usl.", "Prefix of every topic name, so several deployments share a cluster.")
    l1_partitions: int = _setting("USL_L1_PARTITIONS", 8, "Partitions of the L1 topic (fixed at topic creation); each log lives in one, and logs share them once there are more logs than partitions.", minimum=1)
    stream_partitions: int = _setting("USL_STREAM_PARTITIONS", 4, "Partitions of the redacted, tool-results and chunks topics.", minimum=1)
    replication_factor: int = _setting("USL_REPLICATION_FACTOR", 1, "Replication factor of every topic the project creates.", minimum=1)
    min_insync_replicas: int = _setting("USL_MIN_INSYNC_REPLICAS", 1, "min.insync.replicas of every topic the project creates.", minimum=1)
    max_event_bytes: int = _setting(
        "USL_MAX_EVENT_BYTES", 786432,
        "Largest event appended to L1, in canonical JSON bytes; ingest cuts the longest strings of a larger one.", minimum=4096,
    )
    tick_every_seqs: int = _setting("USL_TICK_EVERY_SEQS", 64, "K: the redaction stage broadcasts a log-clock tick every K seqs of a log.", minimum=1)
    flush_tick_seconds: float = _setting(
        "USL_FLUSH_TICK_SECONDS", 0.25,
        "How often a worker sends a flush tick for each log it has caught up with, releasing the seqs past the last regular "
        "tick; a redaction batch handled when none went out for this long sends one at once.", minimum=0.01,
    )
    worker_batch_records: int = _setting(
        "USL_WORKER_BATCH_RECORDS", 500,
        "Most records a worker stage takes at once: one wait for the acknowledgement of the batch's chunks "
        "and ticks and one changelog record per state key per batch.", minimum=1,
    )
    worker_batch_seconds: float = _setting(
        "USL_WORKER_BATCH_SECONDS", 0.05,
        "Longest a worker stage waits for its batch to fill; what it holds then is processed.", minimum=0.001,
    )
    worker_fetch_wait_seconds: float = _setting(
        "USL_WORKER_FETCH_WAIT_SECONDS", 0.1,
        "Longest the broker holds a fetch of the worker's consumer that found nothing new. One fetch per broker is "
        "in flight, so while it waits on caught-up topics the others' new records wait too (faust's 1.5 s held "
        "the worker idle two thirds of the time).", minimum=0.001,
    )
    producer_batch_bytes: int = _setting(
        "USL_PRODUCER_BATCH_BYTES", 524288,
        "Largest record batch the worker's producer builds per partition; keep it below the topics' max.message.bytes (1 MiB by default).",
        minimum=16384,
    )
    producer_linger_seconds: float = _setting(
        "USL_PRODUCER_LINGER_SECONDS", 0.005,
        "How long the worker's producer waits for more records before it sends a partly filled batch; records a worker stage waits for are sent at once.", minimum=0.0,
    )
    idle_gap_seconds: float = _setting("USL_IDLE_GAP_SECONDS", 300.0, "G: an open turn idle for more than G seconds of log time is cut at the next tick.", minimum=0.001)
    quiet_log_seconds: float = _setting(
        "USL_QUIET_LOG_SECONDS", 30.0,
        "A log with no new record for this long, whose clock is more than G behind the present, gets a clock record "
        "in L1 that moves its clock to the present, so the turns it left open are cut (once per quiet spell).",
        minimum=0.1,
    )
    max_clock_skew_seconds: float = _setting(
        "USL_MAX_CLOCK_SKEW_SECONDS", 300.0,
        "An event dated more than this past its L1 append time counts, for the log clock and idle cuts, "
        "as the log's clock so far (at most append time + this), so a far-future event cannot stall a log.",
        minimum=0.0,
    )
    chunk_tokens: int = _setting("USL_CHUNK_TOKENS", 768, "Target chunk size in embedder tokens.", minimum=16)
    chunk_overlap_tokens: int = _setting("USL_CHUNK_OVERLAP_TOKENS", 96, "Overlap between consecutive chunks of one unit, in tokens.", minimum=0)
    text_engine: str = _setting(
        "USL_TEXT_ENGINE", "tantivy", "Full-text engine of the text sink: tantivy or whoosh.",
        choices=("tantivy", "whoosh"),
    )
    embedder: str = _setting(
        "USL_EMBEDDER", "wordllama",
        "Embedder: wordllama, sentence-transformers:MODEL, or openai:MODEL (with USL_EMBEDDINGS_URL).",
        choices=("wordllama",), prefixes=("sentence-transformers:", "openai:", "hash:"),
    )
    embeddings_url: str | None = _setting("USL_EMBEDDINGS_URL", None, "Base URL of an OpenAI-compatible embeddings endpoint.")
    embeddings_api_key: str | None = _setting(
        "USL_EMBEDDINGS_API_KEY", None, "API key sent to the embeddings endpoint.", secret=True,
    )
    sink_batch_size: int = _setting("USL_SINK_BATCH_SIZE", 512, "Chunks a sink buffers before it commits a new generation.", minimum=1)
    sink_batch_seconds: float = _setting("USL_SINK_BATCH_SECONDS", 1.0, "Longest a sink waits before committing what it has buffered.", minimum=0.0)
    sink_commit_gap_seconds: float = _setting(
        "USL_SINK_COMMIT_GAP_SECONDS", 0.25,
        "Group commit: a sink whose watermark can move (new progress covers more of a log) commits once this long, "
        "and at least 4x its last flush's length, has passed since that flush ended: a quiet sink publishes almost "
        "at once, a busy one batches as with USL_SINK_BATCH_SECONDS.",
        minimum=0.0,
    )
    sink_shards: int = _setting(
        "USL_SINK_SHARDS", 1,
        "Sink shards `usl up` runs of every index kind (`usl sink --shard I/N`, I = 0..N-1: shard I of "
        "text, vector, structured, analytics and toolresults in one process). 1: one sink process for every kind.",
        minimum=1,
    )
    vector_exact_max: int = _setting("USL_VECTOR_EXACT_MAX", 20000, "Vector segments above this many chunks get an approximate (HNSW) index.", minimum=1)
    follow: str = _setting(
        "USL_FOLLOW", "",
        "Paths (colon-separated) `usl up` keeps importing with `usl ingest --follow`: transcripts or directories "
        "of them, e.g. ~/.claude/projects:~/.codex/sessions. Empty: no follower. Read when the stack starts (over "
        "a running stack: `usl down` first); a relative path is taken from the directory `usl up` runs in.",
    )
    follow_poll_seconds: float = _setting(
        "USL_FOLLOW_POLL_SECONDS", 0.5, "How often `usl ingest --follow` looks for grown and new files.", minimum=0.01,
    )
    follow_idle_seconds: float = _setting(
        "USL_FOLLOW_IDLE_SECONDS", 10.0,
        "A followed file idle this long has its open turn ended in L1 (a later line of that turn is still appended).",
        minimum=0.0,
    )
    api_host: str = _setting("USL_API_HOST", "127.0.0.1", "Interface the planner API listens on.")
    api_port: int = _setting("USL_API_PORT", 8765, "Port of the planner API.", minimum=0)
    api_keys_file: Path | None = _setting(
        "USL_API_KEYS_FILE", None,
        "API keys file (hashes and principals, managed by `usl apikey`). Unset: USL_HOME/api-keys.json. "
        "While it exists, every /v1/* request needs a key.",
    )
    api_allow_unauthenticated: bool = _setting(
        "USL_API_ALLOW_UNAUTHENTICATED", False,
        "Let the API listen beyond loopback without API keys (only behind a proxy that authenticates).",
    )
    api_allowed_hosts: str = _setting(
        "USL_API_ALLOWED_HOSTS", "",
        "Host names (comma-separated) the API answers without API keys besides localhost, 127.0.0.1 "
        "and [::1]; `*` allows any. Guards keyless APIs against DNS rebinding.",
    )
    api_max_body_bytes: int = _setting(
        "USL_API_MAX_BODY_BYTES", 32 * 1024 * 1024,
        "Largest HTTP request body the API reads; a larger one is refused with 413.", minimum=1024,
    )
    sql_max_result_bytes: int = _setting(
        "USL_SQL_MAX_RESULT_BYTES", 16 * 1024 * 1024,
        "Largest answer of POST /v1/sql (`usl sql`) and of a SessionQL table query (POST /v1/sessionql, `usl sessionql`), in JSON bytes of its rows; the rest is cut and the answer says truncated.",
        minimum=1024,
    )
    api_url: str | None = _setting(
        "USL_API_URL", None,
        "Planner API that `usl search`, `sql`, `sessionql`, `status` and `export` ask. Unset: the local "
        "stack's API when `usl up` runs one; with no API answering they run in process.",
    )
    api_key: str | None = _setting(
        "USL_API_KEY", None, "API key the CLI sends to the planner API when that API enforces keys.", secret=True,
    )
    cursor_key: str | None = _setting(
        "USL_CURSOR_KEY", None,
        "HMAC key signing cursors. Unset: a random key is created once under USL_HOME.",
        secret=True,
    )
    cursor_ttl_seconds: int = _setting("USL_CURSOR_TTL_SECONDS", 3600, "How long a cursor stays valid.", minimum=0)
    sink_gc_interval_seconds: float = _setting(
        "USL_SINK_GC_INTERVAL_SECONDS", 60.0,
        "How often a sink collects a log's line that no commit collected meanwhile: the generations "
        "no unexpired pin holds (beyond the newest three) and expired pin files, so a quiet log's "
        "expired cursor pins and the generations they held go without waiting for a new event.",
        minimum=1.0,
    )
    retired_line_grace_seconds: int = _setting(
        "USL_RETIRED_LINE_GRACE_SECONDS", 900,
        "How long a generation line replaced by `usl rebuild` stays on disk before it is deleted "
        "(and then only once no query or cursor pins it); at least 600, the planner's query pin TTL.",
        minimum=600,
    )
    acl_default: str = _setting(
        "USL_DEFAULT_PRINCIPAL", "tenant:default/user:local",
        "Principal used by the CLI when --as is not given.",
    )
    metrics_port: int = _setting(
        "USL_METRICS_PORT", 0,
        "Port of the /metrics of a worker or sink (0 = choose a free port). Under `usl up` the "
        "supervisor gives each worker and sink its own port, kept across restarts and the next "
        "`usl up` (recorded in USL_HOME/run/metrics-ports.json, listed by `usl up` and `usl "
        "status`); set, it is the first of those ports and the next processes take the ports after it.",
        minimum=0,
    )
    liveness_probe_seconds: float = _setting(
        "USL_LIVENESS_PROBE_SECONDS", 20.0,
        "How often the supervisor of `usl up` probes each process that serves HTTP (the API's /healthz, every "
        "worker's, sink's and follower's /metrics); a probe fails without an HTTP answer (any status) within 5 s, "
        "or this interval if shorter.",
        minimum=0.5,
    )
    liveness_failures: int = _setting(
        "USL_LIVENESS_FAILURES", 6,
        "Failed probes in a row after which the supervisor of `usl up` kills a process as hung (SIGTERM, then "
        "SIGKILL) and restarts it, once it has also not answered for USL_LIVENESS_GRACE_SECONDS. 0: no liveness "
        "check (only an exit restarts a process).",
        minimum=0,
    )
    liveness_grace_seconds: float = _setting(
        "USL_LIVENESS_GRACE_SECONDS", 120.0,
        "Least time a process goes without answering a probe (counted from its start until it first answers) "
        "before the supervisor of `usl up` kills it as hung: far longer than a healthy process ever pauses (a "
        "full garbage collection, a large merge or commit, a slow start).",
        minimum=0.0,
    )
    kafka_version: str = _setting("USL_KAFKA_VERSION", "4.1.1", "Apache Kafka version the local broker runs.")
    kafka_cache: Path = _setting(
        "USL_KAFKA_CACHE", Path.home() / ".cache" / "usl",
        "Where the local broker's jars are cached (outside the repository).",
    )
    object_store: str | None = _setting(
        "USL_OBJECT_STORE", None,
        "S3-compatible location (s3://bucket/prefix) every sink publishes its committed generations to. "
        "Unset: generations stay on the local filesystem only (the embedded default).",
        prefixes=("s3://",),
    )
    s3_endpoint: str | None = _setting(
        "USL_S3_ENDPOINT", None,
        "Endpoint URL of the S3-compatible store (e.g. the local S3Proxy's http://127.0.0.1:PORT). Unset: AWS S3.",
    )
    s3_access_key: str | None = _setting("USL_S3_ACCESS_KEY", None, "Access key id for the object store.", secret=True)
    s3_secret_key: str | None = _setting("USL_S3_SECRET_KEY", None, "Secret access key for the object store.", secret=True)
    planner_source: str = _setting(
        "USL_PLANNER_SOURCE", "local",
        "Where the planner API reads index generations: local (the index root under USL_HOME, written by the sinks) "
        "or object-store (a stateless replica: it mirrors every published generation from USL_OBJECT_STORE into "
        "its own USL_HOME and takes its watermarks from what it mirrored).",
        choices=("local", "object-store"),
    )
    planner_cache_bytes: int = _setting(
        "USL_PLANNER_CACHE_BYTES", 2 * 1024**3,
        "Bytes the object-store replica's download cache (USL_HOME/objectstore-cache) may hold; must exceed the "
        "largest generation.", minimum=1 << 20,
    )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Read every setting from ``env`` (default ``os.environ``); ``overrides`` win."""
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f.metadata["env"])
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.name, f.metadata["env"], raw, f.default)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def __post_init__(self) -> None:
        for f in fields(self):
            value, meta = getattr(self, f.name), f.metadata
            if value is None:
                continue
            env = meta["env"]
            allowed = meta.get("choices") or ()
            prefixes = meta.get("prefixes") or ()
            if (allowed or prefixes) and not (value in allowed or str(value).startswith(prefixes)):
                named = [*allowed, *(p + "..." for p in prefixes)]
                raise ConfigError(f"{env}={value!r} is not one of: {', '.join(named)}")
            minimum = meta.get("minimum")
            if minimum is not None and value < minimum:
                raise ConfigError(f"{env}={value!r} is below its minimum {minimum}")

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    @property
    def max_message_bytes(self) -> int:
        """Kafka message limit for topics that carry whole events (and their producers): room
        for the largest event after redaction, and never below Kafka's own 1 MiB default."""
        return max(1024 * 1024, 2 * self.max_event_bytes)


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _parse(name: str, env: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            word = raw.strip().lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise ValueError(raw)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, Path) or name.endswith("_file"):
            return Path(raw).expanduser()
        return raw
    except ValueError as exc:
        expected = "true/false (1/0, yes/no, on/off)" if isinstance(default, bool) else type(default).__name__
        raise ConfigError(f"{env}={raw!r} is not a valid value: expected {expected}") from exc


def setting_docs() -> list[tuple[str, str, str]]:
    """(environment variable, default, meaning) for every setting, for docs and --help."""
    rows = []
    for f in fields(Settings):
        rows.append((f.metadata["env"], repr(f.default), f.metadata["doc"]))
    return rows
