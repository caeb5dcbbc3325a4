"""The query path's pieces without a broker: the snapshot's pin lifecycle, the freshness
disclosures, the rank-depth end, the in-process filters, and that no module reaches into the
planner's private state (they share :meth:`planner.engine.Planner.snapshot`)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.engine import above_cut
from planner.exceptions import CursorExpired
from planner.pins import Snapshot
from planner.request import Filters
from planner.rrf import RankedList, depth_end
from planner.snapshot import (
    Freshness,
    SeqRange,
    Watermark,
    choose_as_of,
    with_rebuilt_lines,
    with_refusals,
    with_vector_fallback,
)
from sinks.generations import MAX_CHUNK_SEQ
from tests.source import parse

PLANNER = Path(__file__).resolve().parents[2] / "planner"


class _Pin:
    def __init__(self, kind: str, generation_id: int = 3) -> None:
        self.kind, self.generation_id, self.events = kind, generation_id, []

    def release(self) -> None:
        self.events.append("release")

    def keep_for(self, seconds: float) -> None:
        self.events.append(("keep", seconds))


class _Pinner:
    """Pins every kind but ``refused``, whose generation is refused as corrupt."""

    def __init__(self, refused: str = "", cursor_problem: str | None = None) -> None:
        self.refused, self.cursor_problem, self.calls = refused, cursor_problem, []

    def pin_verified(self, log_id: str, kind: str, watermark: Any) -> tuple[Any, str | None]:
        self.calls.append(("verified", kind, watermark))
        return (None, "generation 3 refused (bad)") if kind == self.refused else (_Pin(kind), None)

    def pin(self, log_id: str, kind: str, watermark: Any) -> Any:
        self.calls.append(("unverified", kind, watermark))
        return _Pin(kind)

    def pin_for_cursor(self, log_id: str, kind: str, generation_id: int, line: str | None) -> Any:
        return _Pin(kind, generation_id)

    def verify(self, pin: Any) -> str | None:
        return self.cursor_problem


class _Access:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def latest(self, l1: Any, log_id: str, structured: Any, through_seq: int) -> dict[str, Any]:
        self.calls.append((log_id, structured, through_seq))
        return {"s1": {"tenant": "acme"}}


def _snapshot(pinner: Any) -> Snapshot:
    return Snapshot("default", l1=None, l1_seq=40,  # type: ignore[arg-type]
                    watermarks={"text": {"generationId": 3, "builtThroughSeq": 30}},
                    pinner=pinner, access=_Access())  # type: ignore[arg-type]


def test_a_snapshot_pins_by_its_watermarks_records_refusals_and_releases_on_close() -> None:
    pinner = _Pinner(refused="vector")
    snapshot = _snapshot(pinner)
    text = snapshot.pin("text")
    assert snapshot.pin("vector") is None
    structured = snapshot.pin("structured", verify=False)
    assert pinner.calls == [("verified", "text", {"generationId": 3, "builtThroughSeq": 30}),
                            ("verified", "vector", None), ("unverified", "structured", None)]
    assert snapshot.problems == {"vector": "generation 3 refused (bad)"}
    assert snapshot.access_lists(structured) == {"s1": {"tenant": "acme"}}
    assert snapshot.access_lists(None, 35) == {"s1": {"tenant": "acme"}}
    assert snapshot.access.calls == [("default", structured, 40), ("default", None, 35)]  # type: ignore[attr-defined]
    snapshot.close()
    assert text.events == ["release"] and structured.events == ["release"]  # type: ignore[union-attr]


def test_a_snapshot_kept_for_a_cursor_extends_its_pins_instead() -> None:
    snapshot = _snapshot(_Pinner())
    text = snapshot.pin("text")
    snapshot.keep_for(900.0)
    snapshot.close()
    assert text.events == [("keep", 900.0)]  # type: ignore[union-attr]


def test_a_cursor_generation_that_no_longer_verifies_is_gone_and_still_released() -> None:
    snapshot = _snapshot(_Pinner(cursor_problem="fails verification: x"))
    with pytest.raises(CursorExpired, match="text index generation this cursor reads"):
        snapshot.pin_generation("text", 7, "live")
    pinned = snapshot.pins["text"]
    snapshot.close()
    assert pinned is not None and pinned.events == ["release"]  # type: ignore[attr-defined]


def test_disclosures_of_refused_rebuilt_and_unusable_generations() -> None:
    decision = choose_as_of(Freshness("indexed"), 500, {"text": (12, 480), "vector": None,
                                                        "structured": (4, 490)},
                            ["text", "vector", "structured"])
    assert with_vector_fallback(decision, Watermark(9, 470), None) is decision
    fallen = with_vector_fallback(decision, Watermark(9, 470), "another model")
    assert fallen.fallbacks == ("another model; ranking uses text only",)
    assert "vector: generation 9 not used: another model" in fallen.reasons
    assert not any(reason.startswith("vector: no generation yet") for reason in fallen.reasons)
    assert fallen.watermarks["vector"] == Watermark(9, 470)
    rebuilt = with_rebuilt_lines(decision, {"text": 101, "structured": 1, "vector": 300})
    assert rebuilt.uncovered == (SeqRange(1, 100),) and rebuilt.label == "indexed-partial"
    assert with_rebuilt_lines(decision, {"text": 1}) is decision
    refused = with_refusals(decision, {"text": "generation 13 refused (bad)"})
    assert refused.fallbacks[-1] == refused.reasons[-1] == "text: generation 13 refused (bad)"


def test_results_end_at_the_rank_depth_only_when_a_source_had_more() -> None:
    lists = [RankedList("text", ["a", "b"], 2, True), RankedList("vector", ["a"], 2, False)]
    end = depth_end(lists, 2)
    assert end is not None and end["sources"] == ["text"] and end["depth"] == 2
    assert depth_end([RankedList("text", ["a"], 2, False)], 2) is None


def _pin_of(*bounds: Any) -> Any:
    parts = tuple(SimpleNamespace(manifest=SimpleNamespace(extra={} if bound is None else {MAX_CHUNK_SEQ: bound}))
                  for bound in bounds)
    return SimpleNamespace(shards=parts)


def test_the_seq_filter_is_skipped_only_where_every_shard_bounds_its_chunks_at_the_cut() -> None:
    assert above_cut(_pin_of(None), 50)  # written without the bound: anything may lie above
    assert above_cut(_pin_of(51), 50)
    assert not above_cut(_pin_of(50), 50) and not above_cut(_pin_of(3), 50)
    assert above_cut(_pin_of(10, 51), 50) and above_cut(_pin_of(10, None), 50)
    assert not above_cut(_pin_of(10, 50), 50)


@given(st.sampled_from(["s1", "s2"]), st.sampled_from(["bash", "grep"]),
       st.lists(st.sampled_from(["s1", "s2"]), min_size=1, max_size=2, unique=True),
       st.lists(st.sampled_from(["bash", "grep"]), min_size=1, max_size=2, unique=True))
def test_in_process_filters_keep_exactly_the_matching_items(session: str, tool: str,
                                                           sessions: list[str], tools: list[str]) -> None:
    filters = Filters({"sessionId": tuple(sessions), "toolName": tuple(tools)})
    chunk = {"sessionId": session, "fields": {"toolNames": [tool]},
             "eventTime": "2026-01-01T00:00:00Z"}
    record = {"sessionId": session, "toolName": tool, "time": "2026-01-01T00:00:00Z"}
    expected = session in sessions and tool in tools
    assert filters.admits_chunk(chunk) is expected
    assert filters.admits_tool_result(record) is expected
    assert Filters().admits_chunk(chunk) and Filters().admits_tool_result(record)
    late = Filters(time_from=1767225601.0)  # one second after the items' time
    assert not late.admits_chunk(chunk) and not late.admits_tool_result(record)


def test_no_module_reaches_into_the_planners_private_state() -> None:
    offenders = []
    for path in sorted(PLANNER.rglob("*.py")):
        if path.name == "engine.py":
            continue
        for node in ast.walk(parse(path)):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "planner" and node.attr.startswith("_")):
                offenders.append(f"{path.relative_to(PLANNER.parent)}:{node.lineno} planner.{node.attr}")
    assert offenders == []
