"""Shared fixtures: a real Kafka broker for the whole test session, and per-test settings with
unique topic names and state directories so tests never collide.

Broker choice: ``KAFKA_BOOTSTRAP_SERVERS`` if set; else testcontainers when a Docker engine
answers and ``USL_TEST_TESTCONTAINERS=1``; else the project's own local broker
(``deploy/kafka``), started here and stopped at the end of the session.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from streams.settings import Settings

# A hypothesis deadline or "too slow" health check is a wall-clock threshold: on a shared
# machine, or with the suite spread over parallel workers, it fails a correct test. Every
# property still runs all its examples; only the timing verdicts are off.
hypothesis_settings.register_profile("usl", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("usl")


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    if os.environ.get("USL_TEST_TESTCONTAINERS") == "1" and _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.1.1").with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from deploy.kafka.broker import ensure_broker, stop_broker

    home = Path(tempfile.mkdtemp(prefix="usl-test-broker-"))
    settings = Settings.from_env(home=home)
    bootstrap = ensure_broker(settings)
    try:
        yield bootstrap
    finally:
        stop_broker(settings)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def make_settings(tmp_path: Path, kafka_bootstrap: str) -> Callable[..., Settings]:
    """Factory: Settings with a unique topic prefix and home, pointed at the session broker."""

    def factory(**overrides: object) -> Settings:
        prefix = f"t{uuid.uuid4().hex[:10]}."
        home = tmp_path / f"home-{prefix.rstrip('.')}"
        values: dict[str, object] = {
            "home": home, "topic_prefix": prefix, "bootstrap_servers": kafka_bootstrap,
            "l1_partitions": 4, "stream_partitions": 2, "sink_batch_seconds": 0.3,
        }
        values.update(overrides)
        return Settings.from_env({}, **values)

    return factory


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()
