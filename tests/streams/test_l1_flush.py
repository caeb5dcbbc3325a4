"""L1Producer.flush waits for a broker that acknowledges slowly and gives up on one that is gone.

Found by a platform engineer: with the broker killed mid-import, ``usl ingest`` waited silently
for good (17 minutes, the broker back after 10 of them), and Ctrl-C moved the wait into close().
No broker here: a stand-in for kafka-python's producer whose flush never completes."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError

from streams import l1
from streams.exceptions import BrokerError


class _Future:
    def __init__(self) -> None:
        self.is_done = False


class _Producer:
    """kafka-python's flush(timeout): KafkaTimeoutError while a future is not done; each call
    acknowledges ``per_flush`` more."""

    def __init__(self, futures: list[_Future], per_flush: int) -> None:
        self.futures, self.per_flush, self.closed = futures, per_flush, False

    def flush(self, timeout: float | None = None) -> None:
        for future in [f for f in self.futures if not f.is_done][: self.per_flush]:
            future.is_done = True
        if not all(future.is_done for future in self.futures):
            raise KafkaTimeoutError("Timeout waiting for future")

    def close(self, timeout: float | None = None) -> None:
        if timeout == 0 and not all(future.is_done for future in self.futures):
            raise KafkaTimeoutError("Timeout waiting for future")  # as kafka-python does
        self.closed = True


def _producer(futures: list[_Future], per_flush: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(l1, "_ACK_POLL_SECONDS", 0.0)
    stub = _Producer(futures, per_flush)
    producer = l1.L1Producer.__new__(l1.L1Producer)
    producer._producer, producer._pending, producer._highest = stub, [], 0
    return producer, stub


def test_a_broker_that_acknowledges_nothing_is_not_waited_for_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    producer, _ = _producer([_Future() for _ in range(3)], 0, monkeypatch)
    producer._pending = producer._producer.futures
    with pytest.raises(BrokerError, match="acknowledged none of the 3 event"):
        producer.flush(stall_seconds=0.05)


def test_a_slow_broker_that_acknowledges_some_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    futures = [_Future() for _ in range(50)]  # one acknowledged per 2 s poll: 100 s, past the stall
    producer, _ = _producer(futures, 1, monkeypatch)
    producer._pending = futures
    monkeypatch.setattr(_Future, "value", property(lambda self: type("M", (), {"offset": 0})()), raising=False)
    monkeypatch.setattr(_Future, "succeeded", lambda self: True, raising=False)
    assert producer.flush(stall_seconds=5.0) == 1


def test_closing_without_waiting_drops_what_is_unsent(monkeypatch: pytest.MonkeyPatch) -> None:
    producer, stub = _producer([_Future()], 0, monkeypatch)
    producer._pending = stub.futures
    stub._sender, stub._closed = None, False
    producer.close(wait=False)  # returns at once; kafka-python's close(0) raised here
    assert stub._closed is True
