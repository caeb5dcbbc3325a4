"""Shared fixtures: a real Kafka broker for the whole test session, and per-test settings with
unique topic names and state directories so tests never collide.

Broker choice: ``KAFKA_BOOTSTRAP_SERVERS`` if set; else testcontainers when a Docker engine
answers and ``USL_TEST_TESTCONTAINERS=1``; else the project's own local broker
(``deploy/kafka``), started here and stopped at the end of the session.

The S3-compatible store is chosen the same way: ``USL_TEST_S3_ENDPOINT`` (with
``USL_TEST_S3_ACCESS_KEY`` / ``USL_TEST_S3_SECRET_KEY``) if set, else the project's own S3Proxy
(``deploy/s3proxy``), started on first use and stopped at the end of the session. Without Java
or Maven the tests that need it skip with that reason, except in CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from streams.settings import Settings

if TYPE_CHECKING:
    from deploy.s3proxy.server import S3ProxyInfo
    from sinks.objectstore import ObjectStore

# A hypothesis deadline or "too slow" health check is a wall-clock threshold: on a shared
# machine, or with the suite spread over parallel workers, it fails a correct test. Every
# property still runs all its examples; only the timing verdicts are off.
# Under CI (CI set, as .ci/run runs) every property draws the same examples on every run
# (derandomize: seeded from the test itself), so a run on a clean clone predicts the next one
# exactly; `make test` elsewhere draws new examples each run and keeps exploring (a failure it
# finds prints the seed to replay, and the case belongs in the test as an @example).
hypothesis_settings.register_profile("usl", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                                     derandomize=bool(os.environ.get("CI")))
hypothesis_settings.load_profile("usl")


# The modules that take longest, longest first (seconds of one CI run on 2 cores, summed over
# their tests): `make test` spreads whole files over workers in collection order
# (--no-loadscope-reorder), so each starts early and the short files fill in around them. With
# xdist's own order (most tests first), the one-test modules that run a whole stack for
# minutes all came last and ran together, and the suite waited on them alone.
_LONGEST_FIRST = (
    "tests/reliability/test_faults.py",  # 406
    "tests/streams/test_redaction.py",  # 202
    "tests/streams/test_dropped_hole.py",  # ~200 alone (two tests that restart real workers)
    "tests/reliability/test_abuse.py",  # 177
    "tests/planner/test_search_page.py",  # 163
    "tests/test_bench_harness.py",  # 149
    "tests/deploy/test_scale_out.py",  # 145
    "tests/planner/test_engine.py",  # 137
    "tests/streams/test_redaction_fast.py",  # 98
    "tests/planner/test_sessionql_equivalence.py",  # 88
    "tests/planner/test_sql.py",  # 85
    "tests/sinks/test_sink_crash.py",  # 80
    "tests/sinks/test_rebuild.py",  # 77
    "tests/streams/test_rebalance.py",  # 68
    "tests/deploy/test_cli_messages.py",  # 68
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules of :data:`_LONGEST_FIRST` first, in that order, then the others by their
    number of tests (xdist's own order); every module keeps its tests' order."""
    rank = {path: index for index, path in enumerate(_LONGEST_FIRST)}
    tests: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        tests[module] = tests.get(module, 0) + 1

    def module_order(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0]
        return rank.get(module, len(rank)), -tests[module]

    items.sort(key=module_order)  # stable: a module's tests stay in their order


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from deploy.testing import Stack

    # A module-scoped Stack made for an earlier test still runs the processes this one uses.
    Stack.made[:] = [stack for stack in Stack.made if not stack.closed]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """A failed test that ran worker or sink processes (deploy.testing.Stack) reports the end of
    their logs: a wait that timed out (no watermark, no answer) says nothing of why."""
    report: pytest.TestReport = yield
    if report.failed:
        from deploy.testing import Stack

        for number, stack in enumerate(Stack.made):
            for name, tail in stack.log_tails().items():
                report.sections.append((f"Stack {number} log {name} (end)", tail))
    return report


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


def _require_java_and_maven() -> None:
    """Skip without Java or Maven (the local S3Proxy needs both); in CI that is a failure."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not installed: the local S3Proxy needs Java 17+ and Maven once"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def java_and_maven() -> None:
    """For a test that starts its own local S3Proxy (skipped without Java and Maven, failed in CI)."""
    _require_java_and_maven()


@pytest.fixture(scope="session")
def s3proxy() -> Iterator[S3ProxyInfo]:
    from deploy.s3proxy.server import S3ProxyInfo, running_s3proxy

    configured = os.environ.get("USL_TEST_S3_ENDPOINT")
    if configured:
        yield S3ProxyInfo(0, configured, os.environ.get("USL_TEST_S3_ACCESS_KEY", ""),
                          os.environ.get("USL_TEST_S3_SECRET_KEY", ""), "")
        return
    _require_java_and_maven()
    home = Path(tempfile.mkdtemp(prefix="usl-test-s3proxy-"))
    try:
        with running_s3proxy(Settings.from_env(home=home)) as info:
            yield info
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def make_object_store(s3proxy: S3ProxyInfo) -> Callable[..., ObjectStore]:
    """Factory: an ObjectStore on the session's S3 server, under a unique prefix."""
    from sinks.objectstore import ObjectStore, StoreLocation

    def factory(**kwargs: Any) -> ObjectStore:
        location = StoreLocation("usl-test", f"t{uuid.uuid4().hex[:10]}")
        store = ObjectStore(location, endpoint=s3proxy.endpoint, access_key=s3proxy.access_key,
                            secret_key=s3proxy.secret_key, **kwargs)
        store.ensure_bucket()
        return store

    return factory


@pytest.fixture
def make_settings(tmp_path: Path, kafka_bootstrap: str) -> Callable[..., Settings]:
    """Factory: Settings with a unique topic prefix and home, pointed at the session broker."""
    from deploy.testing import stack_settings

    def factory(**overrides: object) -> Settings:
        return stack_settings(tmp_path, kafka_bootstrap, **overrides)

    return factory


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()
