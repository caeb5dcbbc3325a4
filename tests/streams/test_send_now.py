"""faust_compat.send_now: a stage that waits for the acknowledgement of what it just sent does not
wait out the producer's linger too (docs/benchmarks.md, "Real-size events", section 11). Real
broker; the linger is set far beyond the test's timeout, so only send_now can make the record go."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable

from streams import faust_compat
from streams.app import create_app
from streams.settings import Settings
from streams.topics import Topics, ensure_topics


def test_records_waited_for_go_at_once_whatever_the_linger(make_settings: Callable[..., Settings]) -> None:
    settings = dataclasses.replace(make_settings(), producer_linger_seconds=3600.0)
    bootstrap = settings.bootstrap_servers or ""
    ensure_topics(bootstrap, settings)
    topic = Topics.from_settings(settings).chunks

    async def send_and_wait() -> tuple[list[float | None], list[float | None], int]:
        app = create_app(settings, bootstrap)
        producer = await app.maybe_start_producer()
        try:
            first = await producer.send(topic, b"k", b"first", 0, None, None)
            second = await producer.send(topic, b"k", b"second", 1, None, None)
            accumulator = app.producer._ensure_producer()._message_accumulator  # type: ignore[attr-defined]
            lingering = [batch.remaining_linger() for batches in accumulator._batches.values() for batch in batches]
            faust_compat.send_now(app)
            after = [batch.remaining_linger() for batches in accumulator._batches.values() for batch in batches]
            try:
                done = await asyncio.wait_for(asyncio.gather(first, second), timeout=120)
            except TimeoutError:
                done = []
            return lingering, after, len(done)
        finally:
            with contextlib.suppress(TimeoutError):  # stopping flushes: a lingering record would hold it
                await asyncio.wait_for(producer.stop(), timeout=10)

    lingering, after, acknowledged = asyncio.run(send_and_wait())
    assert len(lingering) == 2 and all(left is not None and left > 60 for left in lingering)
    assert after == [None, None]  # both batches are due now: the sender takes them at its next pass
    assert acknowledged == 2
