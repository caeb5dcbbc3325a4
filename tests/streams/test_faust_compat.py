"""Every faust, mode and aiokafka internal streams.faust_compat relies on still exists with the
shape it expects, so an upgrade fails here, loudly, instead of losing records at a rebalance.
No broker: only classes and signatures are inspected."""

from __future__ import annotations

import inspect
from importlib.metadata import version

import faust
import pytest
from faust.stores.memory import Store
from faust.tables.base import Collection
from faust.topics import Topic
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types.transports import ProducerT
from faust.types.tuples import Message

from streams import faust_compat


def params(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_the_tested_versions_are_installed() -> None:
    """The versions the module docstring names; upgrading means re-running test_rebalance.py and
    updating TESTED_WITH and the pins in pyproject.toml."""
    for package, tested in faust_compat.TESTED_WITH.items():
        assert version(package) == tested, f"{package} {version(package)} is not the tested {tested}"
        assert package in (faust_compat.__doc__ or "")


def test_patched_consumer_methods_keep_their_signatures() -> None:
    assert params(Consumer.ack) == ["self", "message"]
    assert params(Consumer._new_offset) == ["self", "tp"]
    assert params(AIOKafkaConsumerThread.seek_to_committed) == ["self"]
    assert inspect.iscoroutinefunction(AIOKafkaConsumerThread.seek_to_committed)
    # What the replacement calls on the thread and on the aiokafka consumer it wraps.
    assert params(AIOKafkaConsumerThread._ensure_consumer) == ["self"]
    assert inspect.iscoroutinefunction(AIOKafkaConsumerThread.call_thread)
    from aiokafka import AIOKafkaConsumer

    for name in ("seek_to_committed", "beginning_offsets"):
        assert inspect.iscoroutinefunction(getattr(AIOKafkaConsumer, name)), name
    assert params(AIOKafkaConsumer.seek) == ["self", "partition", "offset"]


def test_patching_is_idempotent_and_keeps_the_originals_reachable() -> None:
    original_ack, original_new_offset = Consumer.ack, Consumer._new_offset
    faust_compat.patch_faust_rebalance()
    patched = (Consumer.ack, Consumer._new_offset, AIOKafkaConsumerThread.seek_to_committed)
    faust_compat.patch_faust_rebalance()
    assert (Consumer.ack, Consumer._new_offset, AIOKafkaConsumerThread.seek_to_committed) == patched
    assert Consumer.usl_patched is True  # type: ignore[attr-defined]
    if not getattr(original_ack, "__module__", "").startswith("streams"):  # first patch in this process
        assert Consumer.ack is not original_ack and Consumer._new_offset is not original_new_offset


def test_consumer_bookkeeping_the_rereader_touches_exists() -> None:
    source = inspect.getsource(Consumer.__init__)
    for attribute in ("self._acked", "self._acked_index", "self._committed_offset"):
        assert f"{attribute} =" in source, attribute
    assert inspect.iscoroutinefunction(Consumer.perform_seek)
    from faust.transport.drivers.aiokafka import Consumer as AIOKafkaDriverConsumer

    assert inspect.iscoroutinefunction(AIOKafkaDriverConsumer._commit)  # faust_compat.rewind
    assert params(AIOKafkaDriverConsumer._commit) == ["self", "offsets"]
    assert params(Consumer.assignment) == ["self"]
    # faust_compat.in_flight: the messages a stream holds and has not acknowledged.
    assert isinstance(Consumer.unacked, property) and "self._unacked_messages" in source
    # faust_compat.ends: each partition's end offset from the last fetch (aiokafka's highwater).
    from aiokafka import AIOKafkaConsumer
    from faust.transport.consumer import ThreadDelegateConsumer

    assert params(ThreadDelegateConsumer.highwater) == ["self", "tp"]
    assert params(AIOKafkaConsumerThread.highwater) == ["self", "tp"]
    assert params(AIOKafkaConsumer.highwater) == ["self", "partition"]
    assert params(AIOKafkaConsumer.last_stable_offset) == ["self", "partition"]


def test_table_store_and_producer_internals_exist() -> None:
    from faust.stores.base import Store as BaseStore

    assert "data" in dir(Collection)
    assert "self._key_partition" in inspect.getsource(Store)
    # put_all serializes a changelog record as send_changelog does and skips only its callback,
    # which stores the record's offset: a no-op for the memory store.
    assert isinstance(Collection.changelog_topic, property)
    init = inspect.getsource(Collection.__init__)
    for name in ("self.key_serializer =", "self.value_serializer ="):
        assert name in init, name
    send_changelog = inspect.getsource(Collection.send_changelog)
    assert "callback=self._on_changelog_sent" in send_changelog and "send_soon(" in send_changelog
    assert "set_persisted_offset" in inspect.getsource(Collection._on_changelog_sent)
    assert "set_persisted_offset" not in vars(Store)
    assert inspect.getsource(BaseStore.set_persisted_offset).rstrip().endswith("...")
    assert params(Topic.prepare_key)[:3] == ["self", "key", "key_serializer"]
    assert params(Topic.prepare_value)[:3] == ["self", "value", "value_serializer"]
    assert params(ProducerT.send)[:7] == ["self", "topic", "key", "value", "partition", "timestamp", "headers"]
    assert hasattr(faust.App, "maybe_start_producer")  # a mode stampede: awaitable once bound


def test_rebalance_guards_exist() -> None:
    assert "generation_id" in params(Message.__init__)
    for name in ("flow_control", "consumer_generation_id", "producer", "consumer"):
        assert hasattr(faust.App, name), name
    assert "self.spinner =" in inspect.getsource(faust.Worker.__init__)
    # faust_compat.settled: recovery sets the flag on the app, which does not declare it.
    from faust.tables.recovery import Recovery

    assert "self.app.in_recovery = True" in inspect.getsource(Recovery)


@pytest.mark.parametrize("name", sorted(faust_compat.__all__))
def test_every_helper_is_documented(name: str) -> None:
    assert getattr(faust_compat, name).__doc__, name


@pytest.mark.parametrize(("setting", "expected_ms"), [(None, 100), ("0.02", 20)])
def test_the_worker_consumer_waits_on_fetches_as_long_as_the_setting_says(
    tmp_path: object, setting: str | None, expected_ms: int,
) -> None:
    """faust builds the worker's consumer with ``fetch_max_wait_ms=1500`` whatever it is told; a
    fetch held that long on caught-up topics kept the worker idle on a backlog. No broker: the
    consumer is built, not started."""
    import asyncio

    from streams.app import create_app
    from streams.settings import Settings

    env = {} if setting is None else {"USL_WORKER_FETCH_WAIT_SECONDS": setting}
    settings = Settings.from_env(env, home=str(tmp_path))

    async def built_wait() -> tuple[int, int]:
        app = create_app(settings, "127.0.0.1:9")
        thread = app.consumer._thread
        assert params(thread._create_worker_consumer) == ["transport"]
        consumer = thread._create_worker_consumer(app.transport)
        # faust's own value, without the setting: if it changes, the patch may no longer be needed.
        app.__dict__.pop("usl_fetch_wait_ms", None)
        plain = thread._create_worker_consumer(app.transport)
        # Committed only, as every other reader of L1 (the fetcher reads the attribute on start).
        assert consumer._isolation_level == plain._isolation_level == "read_committed"
        await consumer.stop()
        await plain.stop()
        return consumer._fetch_max_wait_ms, plain._fetch_max_wait_ms

    assert asyncio.run(built_wait()) == (expected_ms, 1500)
