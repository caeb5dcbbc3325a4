"""The lag and watermark history the API keeps for the search page (planner.status_history)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.status_history import StatusHistory, sample_of


def report(l1: int, through: int) -> dict[str, Any]:
    return {"logs": {"default": {"l1CommittedSeq": l1, "indexes": {
        "text": {"generationId": 3, "builtThroughSeq": through, "lagSeqs": l1 - through, "lagSeconds": 1.5,
                 "verdict": "catching up", "lastCommit": 1.0, "line": "live"}}}},
        "generatedAt": 1.0, "bootstrap": "broker:9092"}


def test_a_sample_keeps_positions_and_lag_only() -> None:
    sample = sample_of(report(10, 7), at=100.0)
    assert sample == {"t": 100.0, "logs": {"default": {"l1CommittedSeq": 10, "indexes": {
        "text": {"generationId": 3, "builtThroughSeq": 7, "lagSeqs": 3}}}}}


@given(seqs=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=40),
       keep=st.integers(1, 10))
def test_history_keeps_the_last_samples_in_order(seqs: list[tuple[int, int]], keep: int) -> None:
    clock = iter(range(1, 10**6))
    feed = iter(seqs)
    history = StatusHistory(lambda: report(*max(next(feed), (0, 0))), keep=keep, clock=lambda: float(next(clock)))
    for _ in seqs:
        history.sample()
    view = history.view()
    assert len(view["samples"]) == min(keep, len(seqs))
    assert [s["t"] for s in view["samples"]] == sorted(s["t"] for s in view["samples"])
    assert view["samples"][-1]["t"] == float(len(seqs))
    assert history.view(since=float(len(seqs)))["samples"] == []
    assert history.view("elsewhere")["samples"][-1]["logs"] == {}


def test_a_failed_collect_is_skipped() -> None:
    calls = iter([RuntimeError("broker away"), report(5, 5)])

    def collect() -> dict[str, Any]:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    history = StatusHistory(collect)
    history.sample()
    history.sample()
    assert [s["logs"]["default"]["l1CommittedSeq"] for s in history.view()["samples"]] == [5]


@given(name=st.text(max_size=210))
def test_every_log_parameter_takes_the_search_bodys_rule(name: str) -> None:
    """``?log=`` of status and status history and the search body's ``log`` share one rule."""
    from planner.exceptions import QueryError
    from planner.request import log_param, parse_request
    from streams.names import LOG_ID

    assert log_param(None) is None
    valid = LOG_ID.fullmatch(name) is not None
    try:
        parse_request({"query": "x", "log": name})
        body_ok = True
    except QueryError:
        body_ok = False
    assert body_ok == valid
    if valid:
        assert log_param(name) == name
    else:
        with pytest.raises(QueryError, match="is not a log name"):
            log_param(name)
