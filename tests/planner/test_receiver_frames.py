"""POST /v1/events frames the loose events of a session in a turn of their own, so that what a
client posts without turn markers is chunked (and searchable under `indexed`) at once instead
of holding its log's watermark until another unit or G of later log time closes it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.asp import validate_event
from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
from streams.importers.frames import frame_loose_events
from streams.testing import session_events

CHUNKER = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")


def loose(session: str, count: int, *, start: int = 0) -> list[dict[str, Any]]:
    """Messages and tool events of ``session`` without any turn: what a simple client posts."""
    kinds = [("message", "user", {"text": "deploy the billing service"}),
             ("tool.call", "assistant", {"toolName": "bash", "toolCallId": "c1", "input": {"command": "make deploy"}}),
             ("tool.result", "tool", {"toolName": "bash", "toolCallId": "c1", "output": "deployed"}),
             ("message", "assistant", {"text": "Deployed."})]
    events = []
    for n in range(start, start + count):
        kind, role, fields = kinds[n % len(kinds)]
        events.append(validate_event({
            "eventId": f"{session}-loose-{n}", "logId": "default", "sessionId": session, "type": kind,
            "role": role, "time": f"2026-11-01T09:{n // 60 % 60:02d}:{n % 60:02d}Z", "fields": fields}))
    return events


def open_units(events: list[dict[str, Any]]) -> dict[str, int | None]:
    states: dict[str, dict] = {}
    for seq, event in enumerate(events, start=1):
        state = states.setdefault(event["sessionId"], CHUNKER.new_state(event["sessionId"]))
        CHUNKER.on_event(state, event["logId"], seq, event)
    return {sid: CHUNKER.open_min_seq(state) for sid, state in states.items()}


def test_loose_events_get_a_turn_and_leave_no_unit_open() -> None:
    events = loose("s-loose", 6)
    assert open_units(events) == {"s-loose": 1}  # as posted, they hold the log back
    framed, turns = frame_loose_events(list(enumerate(events)))
    assert turns == 1 and open_units([event for _, event in framed]) == {"s-loose": None}
    kinds = [event["type"] for _, event in framed]
    assert kinds[0] == "turn.started" and kinds[-1] == "turn.ended" and len(framed) == len(events) + 2
    assert [index for index, _ in framed] == [None, *range(len(events)), None]
    assert len({event["turnId"] for _, event in framed}) == 1
    again, _ = frame_loose_events(list(enumerate(events)))
    assert again == framed  # a retried request frames the same turn: its markers are duplicates


def test_sessions_with_their_own_turns_or_nothing_to_chunk_are_left_as_they_are() -> None:
    structured = session_events("s-turns", turns=2)
    quiet = [validate_event({"eventId": "q1", "logId": "default", "sessionId": "s-quiet", "type": "session.started",
                             "time": "2026-11-01T09:00:00Z", "fields": {}})]
    mixed = [*loose("s-mixed", 1), {**loose("s-mixed", 1, start=1)[0], "turnId": "client-turn"}]
    checked = list(enumerate([*structured, *quiet, *mixed]))
    assert frame_loose_events(checked) == (checked, 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 5), st.booleans()), min_size=1, max_size=6))
def test_every_posted_event_keeps_its_place_and_no_unit_stays_open(plan: list[tuple[str, int, bool]]) -> None:
    """Interleaved requests' worth of sessions, some with their own complete turns: the
    caller's events come out in their order with their indexes, and after the frame no
    session leaves a unit open."""
    events: list[dict[str, Any]] = []
    for number, (session, count, with_turns) in enumerate(plan):
        name = f"s-{session}-{'t' if with_turns else 'l'}"
        events += session_events(f"{name}-{number}", turns=1) if with_turns else loose(name, count, start=10 * number)
    framed, turns = frame_loose_events(list(enumerate(events)))
    assert [(index, event["eventId"]) for index, event in framed if index is not None] == [
        (index, event["eventId"]) for index, event in enumerate(events)]
    assert turns == len({e["sessionId"] for e in events if "-l" in e["sessionId"]})
    assert all(value is None for value in open_units([event for _, event in framed]).values())


def test_a_sessions_start_stays_outside_its_turn_unless_it_is_all_there_is() -> None:
    started = validate_event({"eventId": "s-1-start", "logId": "default", "sessionId": "s-1", "type": "session.started",
                              "time": "2026-11-01T08:59:00Z", "fields": {"title": "billing deploy"}})
    framed, _ = frame_loose_events(list(enumerate([started, *loose("s-1", 2)])))
    assert [e["type"] for _, e in framed] == ["session.started", "turn.started", "message", "tool.call", "turn.ended"]
    assert "turnId" not in framed[0][1]
    alone, turns = frame_loose_events([(0, started)])
    assert turns == 1 and [e["type"] for _, e in alone] == ["turn.started", "session.started", "turn.ended"]
    assert open_units([e for _, e in alone]) == {"s-1": None}


def test_loose_events_after_a_turn_are_framed_and_those_before_one_are_left() -> None:
    """Loose events before a turn are closed by that turn; those after the last one were not."""
    before, after = loose("s-2", 2), loose("s-2", 3, start=2)
    events = [*before, *session_events("s-2", turns=1)[1:], *after]
    framed, turns = frame_loose_events(list(enumerate(events)))
    assert turns == 1 and all("turnId" not in e for _, e in framed[:2])
    assert [e["type"] for _, e in framed][-5:] == ["turn.started", "tool.result", "message", "message", "turn.ended"]
    assert open_units([e for _, e in framed]) == {"s-2": None}


def _agent_run_spans() -> list[Any]:
    """An agent run as GenAI instrumentation records it: invoke_agent > chat, execute_tool, with
    the agent's own input and output messages on its span."""
    import orjson
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("usl-test")
    common = {"gen_ai.conversation.id": "conv-frames"}
    question = orjson.dumps([{"role": "user", "parts": [{"type": "text", "content": "Will it hail in Reykjavik?"}]}]).decode()
    answer = orjson.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Graupel after midnight."}]}]).decode()
    call = orjson.dumps([{"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": "get_forecast",
                                                          "arguments": {"city": "Reykjavik"}}]}]).decode()
    with tracer.start_as_current_span("invoke_agent", attributes={
            **common, "gen_ai.operation.name": "invoke_agent", "gen_ai.input.messages": question,
            "gen_ai.output.messages": answer}):
        with tracer.start_as_current_span("chat", attributes={
                **common, "gen_ai.operation.name": "chat", "gen_ai.input.messages": question,
                "gen_ai.output.messages": call}):
            pass
        with tracer.start_as_current_span("execute_tool", attributes={
                **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_forecast",
                "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.result": "graupel showers"}):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def test_an_agent_runs_spans_leave_no_unit_open_one_export_per_span_or_one_batch() -> None:
    """A tool span's call and result, and the agent span's own messages, are in no turn: as
    mapped they stayed an open unit after the run (never searchable under `indexed` on a quiet
    log); the receiver frames them, exported span by span as SimpleSpanProcessor does or in
    one batch."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from planner.otlp import decode_request
    from streams.importers import Accepted
    from streams.importers.otel import span_events

    def mapped(spans: list[Any]) -> list[tuple[int, dict[str, Any]]]:
        request = decode_request(encode_spans(spans).SerializeToString(), "application/x-protobuf")
        return [(index, item.event) for index, item in enumerate(span_events(request)) if isinstance(item, Accepted)]

    def in_l1(batches: list[list[tuple[int | None, dict[str, Any]]]]) -> list[dict[str, Any]]:
        seen: set[str] = set()  # L1 keeps the first copy of an eventId
        return [e for batch in batches for _, e in batch if not (e["eventId"] in seen or seen.add(e["eventId"]))]

    spans = _agent_run_spans()
    assert open_units(in_l1([mapped([span]) for span in spans])) != {"conv-frames": None}
    per_span = in_l1([frame_loose_events(mapped([span]))[0] for span in spans])
    batch = in_l1([frame_loose_events(mapped(spans))[0]])
    assert open_units(per_span) == open_units(batch) == {"conv-frames": None}
    texts = {e["fields"].get("output") or e["fields"].get("text") for e in batch if e["type"] in ("message", "tool.result")}
    assert {"graupel showers", "Graupel after midnight."} <= texts


@settings(max_examples=80, deadline=None)
@given(st.data(), st.integers(1, 2))
def test_a_turn_posted_out_of_order_is_closed_after_its_last_event(data: st.DataObject, turns: int) -> None:
    """Found on a live stack: a client that posts a turn's turn.ended before the turn's other
    events (out of order) opened the turn's unit again after its end with nothing to close it:
    the log's indexes held at that event (`usl status`: waiting: an open turn holds seq N) until
    the log clock moved a tick interval past it, which on a quiet log never happens. The
    receiver now adds a turn.ended after such a turn's last event; every posted event keeps its
    place, and a retry of the request frames the same close."""
    events = session_events("s-ooo", turns=turns)
    first_turn = [event for event in events if event.get("turnId") == "s-ooo-t0"]
    shuffled = data.draw(st.permutations(first_turn))
    posted = [events[0], *shuffled, *[event for event in events if event.get("turnId") not in (None, "s-ooo-t0")]]
    framed, _ = frame_loose_events(list(enumerate(posted)))
    assert [(index, event["eventId"]) for index, event in framed if index is not None] == [
        (index, event["eventId"]) for index, event in enumerate(posted)]
    assert all(value is None for value in open_units([event for _, event in framed]).values())
    assert frame_loose_events(list(enumerate(posted))) == (framed, _)
    ended_last = posted.index(first_turn[-1]) > max(posted.index(e) for e in first_turn if e is not first_turn[-1])
    added = [event for index, event in framed if index is None]
    assert (added == []) == ended_last  # in order: nothing added
