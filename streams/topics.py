"""Topic names and their explicit configuration, created idempotently.

``docs/architecture.md`` and ``docs/operations.md`` describe each topic; this module is the one
place their settings are written down for the code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streams.exceptions import BrokerError
from streams.settings import Settings

if TYPE_CHECKING:
    from kafka import KafkaAdminClient

__all__ = ["COMPACTED_SEGMENT_MS", "TopicSpec", "Topics", "app_id", "changelog_topic", "ensure_topics", "faust_tables",
           "records_between", "topic_specs"]

_WEEK_MS = str(7 * 24 * 3600 * 1000)
COMPACTED_SEGMENT_MS = str(10 * 60 * 1000)
"""``segment.ms`` of the compacted topics. Kafka compacts only closed segments, and a segment
closes at ``segment.bytes`` (128 MB by default) or ``segment.ms`` (7 days by default): before,
nothing was compacted, so the watermarks topic held every commit's record (6 851 for 5 keys
after half an hour of a live stack) and the chunker-sessions changelog every session state
(59 MB for 138 keys), all read again by each planner and sink start and each worker's table
recovery, up to 128 MB per partition. A segment closed every 10 minutes bounds what is read
to about that much of the newest records beside one per key."""
_MONTH_MS = str(30 * 24 * 3600 * 1000)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Topics:
    """Every topic name of one deployment (they all carry ``USL_TOPIC_PREFIX``)."""

    l1: str
    logs: str
    redacted: str
    toolresults: str
    chunks: str
    deadletters: str
    watermarks: str

    @classmethod
    def from_settings(cls, settings: Settings) -> Topics:
        t = settings.topic
        return cls(
            l1=t("l1"), logs=t("l1.logs"), redacted=t("redacted"), toolresults=t("toolresults"),
            chunks=t("chunks"), deadletters=t("deadletters"), watermarks=t("watermarks"),
        )


def topic_specs(settings: Settings) -> list[TopicSpec]:
    topics = Topics.from_settings(settings)
    isr = {"min.insync.replicas": str(settings.min_insync_replicas)}
    derived = {"cleanup.policy": "delete", "retention.ms": _WEEK_MS, **isr}
    # Topics whose records are whole events take the largest one USL_MAX_EVENT_BYTES lets in.
    events = {"max.message.bytes": str(settings.max_message_bytes)}
    compacted = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0",
                 "segment.ms": COMPACTED_SEGMENT_MS, **isr}
    return [
        # The source of truth: never deleted by time or size, never compacted.
        TopicSpec(topics.l1, settings.l1_partitions, {
            "cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
            "message.timestamp.type": "CreateTime", **events, **isr,
        }),
        TopicSpec(topics.logs, 1, compacted),
        TopicSpec(topics.redacted, settings.stream_partitions, {**derived, **events}),
        TopicSpec(topics.toolresults, settings.stream_partitions, {**derived, **events}),
        TopicSpec(topics.chunks, settings.stream_partitions, derived),
        TopicSpec(topics.deadletters, 1, {"cleanup.policy": "delete", "retention.ms": _MONTH_MS, **isr}),
        TopicSpec(topics.watermarks, 1, compacted),
        # The faust tables' changelogs, created here (not by faust on first start) so their
        # metadata is there before the worker's first assignment; same partitions as the
        # stream each table is co-partitioned with.
        *[TopicSpec(changelog_topic(settings, table), partitions, compacted)
          for table, partitions in faust_tables(settings).items()],
    ]


def app_id(settings: Settings) -> str:
    """The faust application id (also its consumer group)."""
    return f"{settings.topic_prefix}pipeline"


def faust_tables(settings: Settings) -> dict[str, int]:
    """Table name → partitions (the partitions of the topic it is co-partitioned with)."""
    return {
        "log-clocks": settings.l1_partitions,
        "event-first-seq": settings.l1_partitions,
        "session-owners": settings.l1_partitions,
        "session-secrets": settings.l1_partitions,
        "chunker-sessions": settings.stream_partitions,
        "chunker-progress": settings.stream_partitions,
    }


def changelog_topic(settings: Settings, table: str) -> str:
    return f"{app_id(settings)}-{table}-changelog"


def ensure_topics(bootstrap: str, settings: Settings) -> list[str]:
    """Create missing topics with their configuration; return the names created.

    Existing topics are left as they are, except that a topic with fewer partitions than
    configured is an error (partition counts decide the log → partition mapping).
    """
    # kafka is imported here, not with the topic names every process reads: importing it is a
    # third of a `usl status` or `usl sql` that only asks the API (0.15 s of 0.4 s).
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import NoError, TopicAlreadyExistsError, for_code

    import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="usl-admin", request_timeout_ms=30000)
    try:
        specs = topic_specs(settings)
        # describe_topics, not list_topics: one metadata request for our topics (an unknown one
        # comes back with an error and is not auto-created), where list_topics waits for the
        # client's metadata refresh, ~100 ms after a new kafka-python client bootstraps.
        partitions = _partition_counts(admin, [s.name for s in specs])
        wanted = [
            NewTopic(s.name, s.partitions, settings.replication_factor, topic_configs=s.config)
            for s in specs if s.name not in partitions
        ]
        created: list[str] = []
        raced: list[str] = []  # created by another process since we looked
        if wanted:
            # One request for every missing topic: the controller creates them together, where one
            # request per topic cost a round trip and a controller write each (~50 ms apiece, the
            # bulk of a fresh `usl ingest`'s start; docs/benchmarks.md, issue #16).
            response = admin.create_topics(wanted, raise_errors=False)
            for result in response["topics"]:
                error = for_code(result["error_code"])
                if error is TopicAlreadyExistsError:
                    raced.append(result["name"])
                elif error is not NoError:
                    raise BrokerError(f"cannot create topic {result['name']}: {error.__name__} "
                                      f"({result.get('error_message') or 'no message'})")
            created = [topic.name for topic in wanted if topic.name not in raced]
        if raced:
            partitions.update(_partition_counts(admin, raced))
        for spec in specs:
            have = partitions.get(spec.name, 0)
            if have and have < spec.partitions:
                raise BrokerError(
                    f"topic {spec.name} has {have} partitions but {spec.partitions} are configured; "
                    "lower the setting or add partitions deliberately (see docs/operations.md)"
                )
        return created
    finally:
        admin.close()


def _partition_counts(admin: KafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Topic → partition count, for those of ``names`` that exist."""
    return {d["name"]: len(d["partitions"]) for d in admin.describe_topics(names) if d["error_code"] == 0}


async def records_between(bootstrap: str, topic: str, partition: int, start: int, end: int, *,
                          timeout: float = 10.0) -> list[int] | None:
    """The offsets from ``start`` to ``end - 1`` of ``topic``'s ``partition`` that hold a record,
    read as the worker reads (committed: an aborted transaction's records and the transaction
    markers hold none), by a consumer of its own in no group; None when the broker did not
    answer within ``timeout``. Offsets below the partition's first (deleted by retention) hold
    none."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    tp = TopicPartition(topic, partition)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed",
                                auto_offset_reset="earliest", request_timeout_ms=round(timeout * 1000))

    async def read() -> list[int]:
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, start)
        found: list[int] = []
        while await consumer.position(tp) < end:
            fetched = await consumer.getmany(tp, timeout_ms=500)
            found += [record.offset for record in fetched.get(tp, []) if start <= record.offset < end]
        return found

    try:
        # One deadline over it all: a position lookup or a start that waits on a broker gone
        # away would otherwise hold the worker's read-again timer with it.
        async with asyncio.timeout(timeout):
            return await read()
    except (TimeoutError, OSError, KafkaError):
        return None
    finally:
        await consumer.stop()
