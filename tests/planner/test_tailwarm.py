"""The tail warmer (planner/tailwarm.py): which scans it warms, how it stops, and that a query
after warming answers exactly as a planner without a warmer while reading no event again."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest

from planner.acl import parse_principal
from planner.engine import Planner
from planner.tailwarm import TailWarmer
from sinks.watermarks import WatermarkFollower
from tests.planner.corpus import IndexBuilder, acl, make_test_settings, session_events

ALICE = parse_principal("tenant:acme/user:alice")


# -- the schedule ------------------------------------------------------------------------------


def test_a_pass_warms_each_recently_used_scan_and_forgets_idle_ones() -> None:
    warmed: list[Hashable] = []
    warmer = TailWarmer(warmed.append, every_seconds=3600, idle_seconds=0.05)
    assert warmer.run_once() == 0
    warmer.note("a")
    warmer.note("b")
    assert warmer.run_once() == 2 and warmed == ["a", "b"]
    time.sleep(0.1)
    warmer.note("b")
    assert warmer.run_once() == 1 and warmed[2:] == ["b"]


def test_a_failing_scan_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    warmed: list[Hashable] = []

    def warm(key: Hashable) -> None:
        if key == "broken":
            raise OSError("the broker went away")
        warmed.append(key)

    warmer = TailWarmer(warm, every_seconds=3600)
    warmer.note("broken")
    warmer.note("fine")
    assert warmer.run_once() == 2
    assert warmed == ["fine"]
    assert "the broker went away" in caplog.text


def test_the_thread_prepares_warms_and_stops() -> None:
    prepared = threading.Event()
    warmed = threading.Event()
    warmer = TailWarmer(lambda key: warmed.set(), every_seconds=0.01, prepare=prepared.set)
    warmer.note("a")
    warmer.start()
    try:
        assert prepared.wait(10) and warmed.wait(10)
    finally:
        warmer.stop()
    assert warmer._thread is not None and not warmer._thread.is_alive()


# -- a warmed planner answers as an unwarmed one -----------------------------------------------


@pytest.fixture
def log(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[IndexBuilder, WatermarkFollower]]:
    settings = make_test_settings(tmp_path, kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "default")
    groups = session_events("default", "s-warm", acl("acme", "*"), turns=6, words="deploy rollback")
    builder.append([event for group in groups[:3] for event in group])
    builder.commit()
    builder.append([event for group in groups[3:5] for event in group], feed=False)
    follower = WatermarkFollower(kafka_bootstrap, settings).start()
    builder.more = [event for group in groups[5:] for event in group]  # type: ignore[attr-defined]
    yield builder, follower
    follower.stop()
    builder.close()


def _answer(planner: Planner, mode: str) -> dict[str, Any]:
    response = planner.search({"query": "deploy rollback", "mode": mode, "freshness": "latest",
                               "k": 100}, ALICE)
    return {"asOfSeq": response["asOfSeq"], "tailScan": response["freshness"]["tailScan"],
            "results": response["results"]}


@pytest.mark.parametrize("mode", ["hybrid", "text"])
def test_a_warmed_query_reads_nothing_again_and_answers_as_an_unwarmed_one(
        log: tuple[IndexBuilder, WatermarkFollower], kafka_bootstrap: str, mode: str) -> None:
    builder, follower = log
    plain = Planner(builder.settings, kafka_bootstrap, follower=follower)
    warmed = Planner(builder.settings, kafka_bootstrap, follower=follower, warm_tail_every=3600)
    try:
        assert warmed.warmer is not None
        assert _answer(warmed, mode) == _answer(plain, mode)  # notes the scan for the warmer
        builder.append(builder.more, feed=False)  # type: ignore[attr-defined]  # the head moves
        assert warmed.warmer.run_once() == 1

        reads: list[int] = []
        read = warmed._window.read

        def counted(*args: Any, **kwargs: Any) -> Any:
            events = read(*args, **kwargs)
            reads.append(len(events))
            return events

        warmed._window.read = counted  # type: ignore[method-assign]
        embed = warmed._embedder.embed if warmed._embedder is not None else None
        embedded: list[int] = []
        if embed is not None:
            def counted_embed(texts: Any) -> Any:
                embedded.append(len(texts))
                return embed(texts)

            warmed._embedder.embed = counted_embed
        after = _answer(warmed, mode)
        assert after == _answer(plain, mode)
        assert after["tailScan"]["toSeq"] == max(builder.seqs.values())
        assert sum(reads) == 0, "the warmer had read every new event already"
        # Only the query itself is embedded now: every tail chunk and event had its vector.
        assert embedded == ([1] if mode == "hybrid" else [])
    finally:
        warmed.close()
        plain.close()
    assert warmed.warmer._thread is not None and not warmed.warmer._thread.is_alive()
