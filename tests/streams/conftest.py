"""Fixtures of the stream-side pipeline tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def fast_group_failover(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the consumer group notice a SIGKILLed worker in ~10 s instead of faust's 60 s.

    faust reads these from the environment; ``Stack`` passes the environment to the worker.
    """
    monkeypatch.setenv("BROKER_SESSION_TIMEOUT", "10")
    monkeypatch.setenv("BROKER_HEARTBEAT_INTERVAL", "1")
