"""Status names what holds a watermark back (SPEC §10, invariant 11): ``heldBy`` is additive."""

from __future__ import annotations

import io

import orjson
from rich.console import Console

from planner.status import build_status, held_by, render_status


def _watermark(through: int) -> dict[str, object]:
    return {"generationId": 3, "builtThroughSeq": through, "committedAt": 1.0, "line": "live"}


def test_a_lagging_index_names_the_first_event_above_its_watermark() -> None:
    raw = orjson.dumps({"eventId": "e5", "sessionId": "s-open", "turnId": "t-2099",
                        "time": "2099-01-01T00:00:00Z"})
    held = {("default", 5): held_by(5, raw)}
    report = build_status({"default": 9}, {("default", "text"): _watermark(4),
                                           ("default", "vector"): _watermark(9)},
                          {("default", 5): 100.0}, now=200.0, held=held)
    text = report["logs"]["default"]["indexes"]["text"]
    assert text["heldBy"] == {"seq": 5, "sessionId": "s-open", "turnId": "t-2099", "time": "2099-01-01T00:00:00Z"}
    assert text["lagSeqs"] == 5 and text["lagSeconds"] == 100.0  # the contract's fields are unchanged
    assert report["logs"]["default"]["indexes"]["vector"]["heldBy"] is None  # caught up
    assert report["logs"]["default"]["indexes"]["structured"]["heldBy"] is None  # missing
    out = io.StringIO()
    render_status(report, Console(file=out, width=200))
    assert "first unindexed event: seq 5, session 's-open', turn 't-2099'" in out.getvalue()


def test_held_by_tolerates_records_that_are_not_events() -> None:
    assert held_by(3, b"not json") == {"seq": 3, "sessionId": None, "turnId": None, "time": None}
    assert held_by(3, None)["sessionId"] is None
    assert held_by(3, b'{"sessionId": 7}')["sessionId"] is None
