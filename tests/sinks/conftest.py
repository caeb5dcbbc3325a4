"""Fixtures of the sink tests: a real S3-compatible server (S3Proxy) for the test session.

Mirrors ``kafka_bootstrap`` (tests/conftest.py): ``USL_TEST_S3_ENDPOINT`` (with
``USL_TEST_S3_ACCESS_KEY`` / ``USL_TEST_S3_SECRET_KEY``) names an existing server; otherwise the
project's own S3Proxy (``deploy/s3proxy``) is started here once and stopped at the end. Without
Java or Maven the tests that need it skip with that reason, except in CI, where they fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deploy.s3proxy.server import S3ProxyInfo, running_s3proxy
from sinks.objectstore import ObjectStore, StoreLocation
from streams.settings import Settings


def _need_java_and_maven() -> None:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not installed: the local S3Proxy needs Java 17+ and Maven once"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def s3proxy() -> Iterator[S3ProxyInfo]:
    configured = os.environ.get("USL_TEST_S3_ENDPOINT")
    if configured:
        yield S3ProxyInfo(0, configured, os.environ.get("USL_TEST_S3_ACCESS_KEY", ""),
                          os.environ.get("USL_TEST_S3_SECRET_KEY", ""), "")
        return
    _need_java_and_maven()
    home = Path(tempfile.mkdtemp(prefix="usl-test-s3proxy-"))
    try:
        with running_s3proxy(Settings.from_env(home=home)) as info:
            yield info
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def make_object_store(s3proxy: S3ProxyInfo) -> Callable[..., ObjectStore]:
    """Factory: an ObjectStore on the session's server, in a fresh bucket prefix."""

    def factory(**kwargs: object) -> ObjectStore:
        location = StoreLocation("usl-test", f"t{uuid.uuid4().hex[:10]}")
        store = ObjectStore(location, endpoint=s3proxy.endpoint, access_key=s3proxy.access_key,
                            secret_key=s3proxy.secret_key, **kwargs)  # type: ignore[arg-type]
        store.ensure_bucket()
        return store

    return factory
