"""The GenAI span mapping never raises, whatever the OTLP-shaped input, and every event it
accepts is a valid ASP event of the span's conversation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.asp import validate_event
from streams.importers.base import Accepted
from streams.importers.otel import TraceSessions, span_events
from tests.fuzz.profile import fuzz, json_values

OPERATIONS = st.sampled_from(["invoke_agent", "chat", "execute_tool", "embeddings", ""])
ATTRIBUTE_KEYS = st.sampled_from(["gen_ai.operation.name", "gen_ai.conversation.id", "gen_ai.agent.name",
                                  "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.call.arguments",
                                  "gen_ai.tool.call.result", "gen_ai.input.messages",
                                  "gen_ai.output.messages", "gen_ai.system_instructions"])


def value() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        OPERATIONS.map(lambda op: {"stringValue": op}),
        st.text(max_size=30).map(lambda text: {"stringValue": text}),
        st.just({"stringValue": '[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]'}),
        st.integers().map(lambda n: {"intValue": str(n)}),
        json_values(max_leaves=3).map(lambda v: {"arrayValue": {"values": [{"stringValue": str(v)}]}}),
        json_values(max_leaves=3),
    )


span = st.fixed_dictionaries({
    "traceId": st.sampled_from(["5b8efff798038103d269b633813fc60c", "", "zz", "W4737/mAOBA9Jptjgx/GDA=="]),
    "spanId": st.sampled_from(["eee19b7ec3c1b174", "aaa19b7ec3c1b174", "", "x"]),
    "parentSpanId": st.sampled_from(["", "eee19b7ec3c1b174", "0123456789abcdef"]),
    "startTimeUnixNano": st.sampled_from(["1764579600000000000", "0", "soon", 17]),
    "attributes": st.lists(st.fixed_dictionaries({"key": ATTRIBUTE_KEYS, "value": value()}), max_size=6),
    "status": st.sampled_from([{}, {"code": 2, "message": "boom"}, {"code": "STATUS_CODE_ERROR"}]),
})


@fuzz(200)
@given(spans=st.lists(span | json_values(max_leaves=4), max_size=5), junk=json_values(max_leaves=4))
def test_any_spans_map_without_raising(spans: list[Any], junk: Any) -> None:
    for request in ({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}, {"resourceSpans": junk}):
        for item in span_events(request if isinstance(request, dict) else {}):
            if isinstance(item, Accepted):
                assert validate_event(item.event) == item.event


def _span(span_id: str, parent: str, operation: str, conversation: str | None = None,
          trace: str = "5b8efff798038103d269b633813fc60c", start: int = 1764579600) -> dict[str, Any]:
    """A span of ``operation``; ``span_id`` and ``parent`` short names, repeated to the 16 hex
    digits OTLP's span ids have ("a0": a0a0a0a0a0a0a0a0)."""
    span_id, parent = ((name * 16)[:16] for name in (span_id, parent))
    attributes = [{"key": "gen_ai.operation.name", "value": {"stringValue": operation}}]
    if conversation is not None:
        attributes.append({"key": "gen_ai.conversation.id", "value": {"stringValue": conversation}})
    return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "attributes": attributes,
            "startTimeUnixNano": str(start * 10**9), "endTimeUnixNano": str((start + 1) * 10**9)}


def _sessions(*spans: dict[str, Any]) -> dict[str, set[str]]:
    """span id → the sessions of its events."""
    by_span: dict[str, set[str]] = {}
    for item in span_events({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}):
        assert isinstance(item, Accepted), item
        span_id = item.record.split("/")[-1]
        if item.event["type"] != "session.started":
            by_span.setdefault(span_id, set()).add(item.event["sessionId"])
    return by_span


def test_a_span_without_a_conversation_takes_its_ancestors_or_its_traces() -> None:
    """GenAI instrumentations often set gen_ai.conversation.id on the agent (and chat) span only:
    a tool span without it belongs to that conversation, not to a session of its own, whatever
    the order of the spans in the request (children usually come first)."""
    agent, chat = "a000000000000001", "c000000000000002"
    tool, nested, stray = "e000000000000003", "e000000000000004", "e000000000000005"
    sessions = _sessions(
        _span(nested, tool, "execute_tool"),  # a tool inside a tool: its grandparent names it
        _span(tool, agent, "execute_tool"),
        _span(stray, "ffffffffffffffff", "execute_tool"),  # its parent is in no request yet
        _span(chat, agent, "chat", "qa-otel-conv-1"),
        _span(agent, "", "invoke_agent", "qa-otel-conv-1"),
    )
    assert sessions == {span: {"qa-otel-conv-1"} for span in (agent, chat, tool, nested, stray)}
    # Its own attribute wins; a trace naming no conversation keeps otel-<traceId>; with two
    # conversations in a trace, an orphan takes the earliest span's (start time, then spanId).
    other = "0af7651916cd43dd8448eb211c80319c"
    sessions = _sessions(_span(tool, agent, "execute_tool", "mine"), _span(agent, "", "invoke_agent", "theirs"),
                         _span(stray, "ffffffffffffffff", "execute_tool", trace=other),
                         _span(nested, "ffffffffffffffff", "execute_tool"))
    assert sessions == {tool: {"mine"}, agent: {"theirs"}, stray: {f"otel-{other}"}, nested: {"theirs"}}


class _Log:
    """L1 as a receiver sees it: events by eventId (a repeat is a duplicate), fed to ``known``."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.known = TraceSessions()

    def post(self, *spans: dict[str, Any]) -> list[dict[str, Any]]:
        """One export request: the events it appends (the receiver's mapping and links)."""
        mapped = []
        for item in span_events({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}, known=self.known):
            assert isinstance(item, Accepted), item
            mapped.append(item.event)
        held = {e["eventId"] for e in self.events}
        new = [e for e in [*mapped, *self.known.links("default", mapped)] if e["eventId"] not in held]
        for event in new:
            self.events.append(event)
            self.known.feed(event)
        return new


def test_spans_exported_one_by_one_join_their_traces_conversation() -> None:
    """A SimpleSpanProcessor exports each span as it ends, children before their parent; the
    conventions put gen_ai.conversation.id on the agent and chat spans, never on execute_tool.
    A tool span after the first chat joins the conversation (it went to otel-<traceId> before);
    one before it cannot know it: it stays in otel-<traceId>, which then names the conversation
    as its parent session. A retry, or a receiver rebuilt from L1, changes nothing."""
    agent, chat1, chat2 = "a000000000000001", "c000000000000002", "c000000000000003"
    tool0, tool1 = "e000000000000004", "e000000000000005"
    trace, conversation = "5b8efff798038103d269b633813fc60c", "qa-otel-conv-1"
    requests = [[_span(tool0, agent, "execute_tool")], [_span(chat1, agent, "chat", conversation)],
                [_span(tool1, agent, "execute_tool")], [_span(chat2, agent, "chat", conversation)],
                [_span(agent, "", "invoke_agent", conversation)]]
    log = _Log()
    appended = [log.post(*request) for request in requests]
    assert {e["sessionId"] for e in appended[0]} == {f"otel-{trace}"}
    for later in appended[1:]:
        assert {e["sessionId"] for e in later if e["type"] != "x.otel.conversation"} == {conversation}
    links = [e for e in log.events if e["type"] == "x.otel.conversation"]
    assert [(e["sessionId"], e["parentSessionId"]) for e in links] == [(f"otel-{trace}", conversation)]
    assert links[0] in appended[1]  # with the span that revealed the conversation
    for request in requests:  # an exporter retries: nothing new, nothing moved
        assert log.post(*request) == []
    rebuilt = TraceSessions()  # another receiver, or this one restarted, reads L1 first
    for event in log.events:
        rebuilt.feed(event)
    for request in requests:
        again = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": request}]}]}, known=rebuilt))
        assert all(isinstance(i, Accepted) and i.event in log.events for i in again)
    assert rebuilt.links("default") == []


def test_a_span_takes_its_ancestors_conversation_from_an_earlier_request() -> None:
    """Two agents of one trace in two conversations: a tool span sent alone after both joins its
    own agent's (its parent's events in L1), not the trace's first."""
    first, second, tool = "a000000000000001", "a000000000000002", "e000000000000003"
    log = _Log()
    log.post(_span(first, "", "invoke_agent", "first"))
    log.post(_span(second, "", "invoke_agent", "second"))
    assert {e["sessionId"] for e in log.post(_span(tool, second, "execute_tool"))} == {"second"}
    assert {e["sessionId"] for e in log.post(_span("e000000000000004", "ffffffffffffffff", "execute_tool"))} \
        == {"first"}  # no ancestor known: the trace's conversation


def test_a_span_sent_again_naming_another_conversation_stays_where_it_went() -> None:
    """Its turn's start and end are duplicates (their ids name no session): its messages in the
    other session opened that turn there, never to be closed, and the open turn held every index
    of the log back (`usl status`: waiting on an open turn)."""
    def chat(conversation: str) -> dict[str, Any]:
        return _with(_span("c000000000000002", "", "chat", conversation),
                     gen_ai__input__messages='[{"role": "user", "parts": [{"type": "text", "content": "hello"}]}]')

    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer

    log = _Log()
    assert {e["sessionId"] for e in log.post(chat("first"))} == {"first"}
    assert log.post(chat("second")) == []
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="p")
    states: dict[str, Any] = {}
    for seq, event in enumerate(log.events, 1):
        state = states.setdefault(event["sessionId"], chunker.new_state(event["sessionId"]))
        chunker.on_event(state, "default", seq, validate_event(event))
    assert {sid: chunker.open_min_seq(state) for sid, state in states.items()} == {"first": None}


def test_a_span_whose_attributes_are_no_list_is_refused_naming_them() -> None:
    """Read as no attributes, it was no GenAI span: ignored, and the exporter answered 200."""
    span = {**_span("c000000000000002", "", "chat", "conv"), "attributes": '{"gen_ai.operation.name": "chat"}'}
    items = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    assert [(type(item).__name__, item.reason) for item in items] == [
        ("Rejected", "the span's attributes must be a list of {key, value} objects, not a string")]


def _with(span: dict[str, Any], **attributes: Any) -> dict[str, Any]:
    for key, value in attributes.items():
        typed = {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}
        span["attributes"].append({"key": key.replace("__", "."), "value": typed})
    return span


def test_tokens_count_once_per_inference_call_captured_or_not() -> None:
    """An agent span's usage is the sum of its inference calls' (pydantic-ai, MAF, ...): only
    the inference spans count. A chat span whose first output message has no text still counts,
    and so does one without captured messages (its turn's end carries the usage)."""
    usage = {"gen_ai__usage__input_tokens": 56, "gen_ai__usage__output_tokens": 5}
    agent = _with(_span("a0", "", "invoke_agent", "conv-1"), gen_ai__usage__input_tokens=113,
                  gen_ai__usage__output_tokens=11,
                  gen_ai__output__messages='[{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}]')
    captured = _with(_span("c1", "a0", "chat", "conv-1"), **usage, gen_ai__output__messages=(
        '[{"role": "assistant", "parts": []}, {"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}]'))
    bare = _with(_span("c2", "a0", "chat", "conv-1"), gen_ai__usage__input_tokens=57,
                 gen_ai__usage__output_tokens=6, gen_ai__request__model="m-1")
    events = [item.event for item in span_events({"resourceSpans": [{"scopeSpans": [{"spans": [agent, captured, bare]}]}]})
              if isinstance(item, Accepted)]
    counted = [(event["type"], event["fields"]["usage"]) for event in events if "usage" in event["fields"]]
    assert counted == [("message", {"inputTokens": 56, "outputTokens": 5}),
                       ("turn.ended", {"inputTokens": 57, "outputTokens": 6})]
    assert next(event for event in events if event["type"] == "turn.ended" and "usage" in event["fields"])[
        "fields"]["model"] == "m-1"


def _attrs(**values: Any) -> list[dict[str, Any]]:
    return [{"key": key, "value": {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}}
            for key, value in values.items()]


def _chat_messages(span: dict[str, Any]) -> list[tuple[str, str]]:
    events = [item.event for item in span_events({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
              if isinstance(item, Accepted)]
    return [(event["role"], event["fields"]["text"]) for event in events if event["type"] == "message"]


def _legacy_span(attributes: list[dict[str, Any]], events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"traceId": "7c8efff798038103d269b633813fc61d", "spanId": "aaa19b7ec3c1b174", "name": "openai.chat",
            "attributes": attributes, "events": events or [],
            "startTimeUnixNano": "1764579600000000000", "endTimeUnixNano": "1764579601000000000"}


def test_the_older_shapes_of_a_chat_call_keep_their_messages() -> None:
    """What OpenLLMetry, OpenLIT and the conventions before 1.37 record of a chat call: numbered
    ``gen_ai.prompt.N`` / ``gen_ai.completion.N`` attributes (and ``llm.request.type`` instead of
    ``gen_ai.operation.name``: the whole span was ignored), ``gen_ai.user.message`` /
    ``gen_ai.choice`` events, ``gen_ai.content.prompt`` / ``.completion`` events. Each was
    answered 200 while its messages (or the span) were dropped."""
    openllmetry = _legacy_span(_attrs(**{
        "llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "You are helpful.",
        "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "Capital of Mongolia?",
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Ulaanbaatar.",
        "gen_ai.usage.prompt_tokens": 25, "gen_ai.usage.completion_tokens": 9}))
    assert _chat_messages(openllmetry) == [("system", "You are helpful."), ("user", "Capital of Mongolia?"),
                                           ("assistant", "Ulaanbaatar.")]
    usage = [item.event["fields"].get("usage") for item in span_events(
        {"resourceSpans": [{"scopeSpans": [{"spans": [openllmetry]}]}]}) if isinstance(item, Accepted)]
    assert {"inputTokens": 25, "outputTokens": 9} in usage

    # A completion of tool calls alone (OpenLLMetry's gen_ai.completion.N.tool_calls.K.*) is a message
    # with those calls, not nothing; a prompt of the provider's content blocks (Anthropic, Gemini)
    # as JSON is read as those blocks' text.
    calls = _legacy_span(_attrs(**{
        "llm.request.type": "chat", "gen_ai.request.model": "gpt-4o",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": '[{"type": "text", "text": "What is the weather in Tokyo?"}]',
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "tool_calls",
        "gen_ai.completion.0.tool_calls.0.id": "call_vqQR", "gen_ai.completion.0.tool_calls.0.name": "get_weather",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"location": "Tokyo"}'}))
    assert _chat_messages(calls) == [("user", "What is the weather in Tokyo?"), ("assistant", "")]
    called = [item.event["fields"].get("toolCalls") for item in span_events(
        {"resourceSpans": [{"scopeSpans": [{"spans": [calls]}]}]}) if isinstance(item, Accepted)]
    assert [{"id": "call_vqQR", "name": "get_weather", "arguments": {"location": "Tokyo"}}] in called

    def event(name: str, **values: Any) -> dict[str, Any]:
        return {"name": name, "timeUnixNano": "1764579600000000000", "attributes": _attrs(**values)}

    semconv = _legacy_span(_attrs(**{"gen_ai.operation.name": "chat"}), [
        event("gen_ai.system.message", content="Be terse."), event("gen_ai.user.message", content="A prime > 100?"),
        event("gen_ai.choice", index=0, message='{"role": "assistant", "content": "101"}')])
    assert _chat_messages(semconv) == [("system", "Be terse."), ("user", "A prime > 100?"), ("assistant", "101")]
    openlit = _legacy_span(_attrs(**{"gen_ai.operation.name": "chat"}), [
        event("gen_ai.content.prompt", **{"gen_ai.prompt": "user: Largest ocean?"}),
        event("gen_ai.content.completion", **{"gen_ai.completion": "The Pacific."})])
    assert _chat_messages(openlit) == [("user", "user: Largest ocean?"), ("assistant", "The Pacific.")]
    # The current shape, where a span states it, is what counts.
    both = _legacy_span(_attrs(**{"gen_ai.operation.name": "chat", "gen_ai.prompt.0.content": "old",
                                  "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", '
                                                           '"content": "new"}]}]'}))
    assert _chat_messages(both) == [("user", "new")]


def _structured(value: Any) -> dict[str, Any]:
    """``value`` as an OTLP AnyValue in structured form (kvlist and array values)."""
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": key, "value": _structured(item)} for key, item in value.items()]}}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_structured(item) for item in value]}}
    return {"stringValue": value}


def test_a_chat_call_recorded_on_its_operation_details_event_keeps_its_messages() -> None:
    """The conventions from 1.37 on may record a chat call's content on its
    ``gen_ai.client.inference.operation.details`` event (structured), not on the span: such a
    span was a turn without messages, answered 200."""
    asked = [{"role": "user", "parts": [{"type": "text", "content": "Book me to Oslo"}]}]
    answered = [{"role": "assistant", "parts": [{"type": "text", "content": "SK4021 at 9:05."}],
                 "finish_reason": "stop"}]
    details = {"name": "gen_ai.client.inference.operation.details", "timeUnixNano": "1764579600500000000",
               "attributes": [{"key": "gen_ai.input.messages", "value": _structured(asked)},
                              {"key": "gen_ai.output.messages", "value": _structured(answered)},
                              {"key": "gen_ai.system_instructions",
                               "value": _structured([{"type": "text", "content": "You book flights."}])}]}
    chat = _legacy_span(_attrs(**{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}), [details])
    assert _chat_messages(chat) == [("system", "You book flights."), ("user", "Book me to Oslo"),
                                    ("assistant", "SK4021 at 9:05.")]
    # What the span itself states counts first.
    own = _legacy_span(_attrs(**{"gen_ai.operation.name": "chat", "gen_ai.input.messages": '[{"role": "user", '
                                 '"parts": [{"type": "text", "content": "on the span"}]}]'}), [details])
    assert ("user", "on the span") in _chat_messages(own) and ("user", "Book me to Oslo") not in _chat_messages(own)


@given(st.permutations(["span", "system", "user", "choice"]))
def test_a_spans_log_records_exported_one_by_one_leave_no_turn_open(order: list[str]) -> None:
    """OpenAI's instrumentation emits a chat call's messages as log records; with the SDK's
    SimpleLogRecordProcessor each record is an export of its own. Every export reopened the
    span's turn and closed it with one turn.ended id for all, so from the second export on the
    end was a duplicate and the turn stayed open: the log's indexes waited at it (`usl status`:
    waiting: an open turn holds seq N). Each export now ends the turn again, in whatever order
    the span and its records come; a retried export adds nothing."""
    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
    from streams.importers.otel import log_spans

    trace, span_id = "5b8efff798038103d269b633813fc60d", "c000000000000009"
    chat = _span(span_id, "", "chat", "qa-otel-logs")

    def record(name: str, body: dict[str, Any], at: int) -> dict[str, Any]:
        values = [{"key": key, "value": {"stringValue": text}} for key, text in body.items()]
        return {"timeUnixNano": str(1_765_000_000_000_000_000 + at), "traceId": trace, "spanId": span_id,
                "eventName": name, "body": {"kvlistValue": {"values": values}}}

    exports = {"system": record("gen_ai.system.message", {"content": "You answer briefly."}, 1),
               "user": record("gen_ai.user.message", {"content": "Is the cache stale?"}, 2),
               "choice": record("gen_ai.choice", {"index": "0", "finish_reason": "stop"}, 3)}
    log = _Log()
    posted = []
    for name in order:
        if name == "span":
            posted.append([chat])
            log.post(chat)
            continue
        spans, refused = log_spans({"resourceLogs": [{"scopeLogs": [{"logRecords": [exports[name]]}]}]})
        assert refused == []
        request = [span for resource in spans["resourceSpans"] for scope in resource["scopeSpans"] for span in scope["spans"]]
        posted.append(request)
        log.post(*request)
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="p")
    states: dict[str, Any] = {}
    for seq, event in enumerate(log.events, 1):
        state = states.setdefault(event["sessionId"], chunker.new_state(event["sessionId"]))
        chunker.on_event(state, "default", seq, validate_event(event))
    assert {sid: chunker.open_min_seq(state) for sid, state in states.items()} == dict.fromkeys(states)
    for request in posted:  # an exporter retries each export: nothing new
        assert log.post(*request) == []


def _messages_of(value: dict[str, Any], key: str = "gen_ai.input.messages") -> list[tuple[str, str, str]]:
    span = _legacy_span([*_attrs(**{"gen_ai.operation.name": "chat"}), {"key": key, "value": value}])
    events = [item.event for item in span_events({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
              if isinstance(item, Accepted)]
    return [(event["role"], event["visibility"], event["fields"]["text"]) for event in events
            if event["type"] == "message"]


@pytest.mark.parametrize(("value", "text"), [
    ({"stringValue": "plain words, no JSON"}, "plain words, no JSON"),
    ({"stringValue": '{"role": "user", "parts": [{"type": "text", "content": "one message alone"}]}'},
     "one message alone"),
    ({"stringValue": '["a string in the array"]'}, "a string in the array"),
    ({"stringValue": "4096"}, "4096"),
    ({"arrayValue": {"values": [{"stringValue": '{"role": "user", "parts": [{"type": "text", "content": "an array '
                                                'attribute of JSON strings"}]}'}]}},
     "an array attribute of JSON strings"),
    # The providers' own messages passed through (OpenAI's and Anthropic's content blocks).
    ({"stringValue": '[{"role": "user", "content": [{"type": "text", "text": "an OpenAI content list"}]}]'},
     "an OpenAI content list"),
    ({"stringValue": '[{"role": "user", "content": [{"type": "input_text", "text": "a Responses API input"}]}]'},
     "a Responses API input"),
    ({"stringValue": '[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": '
                     '[{"type": "text", "text": "an Anthropic tool result"}]}]}]'},
     "an Anthropic tool result"),
    ({"stringValue": '[{"role": "user", "parts": [{"type": "text", "text": "a text part with text"}]}]'},
     "a text part with text"),
    ({"stringValue": '[{"role": "user", "parts": "parts as one string"}]'}, "parts as one string"),
])
def test_messages_in_any_shape_an_instrumentation_writes_keep_their_text(value: dict[str, Any], text: str) -> None:
    """Content a span carried is searchable whatever shape the instrumentation gave it: these
    shapes appended nothing and the receiver answered 200."""
    assert _messages_of(value) == [("user", "visible", text)]


def test_a_providers_tool_use_block_is_a_tool_call() -> None:
    """An assistant message holding Anthropic's ``tool_use`` block keeps its text and the call."""
    value = {"stringValue": '[{"role": "assistant", "content": [{"type": "text", "text": "looking it up"}, '
                            '{"type": "tool_use", "id": "toolu_1", "name": "get_reservation", "input": {"id": "ABC"}}]}]'}
    span = _legacy_span([*_attrs(**{"gen_ai.operation.name": "chat"}), {"key": "gen_ai.output.messages", "value": value}])
    events = [item.event for item in span_events({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
              if isinstance(item, Accepted) and item.event["type"] == "message"]
    assert [(e["fields"]["text"], e["fields"]["toolCalls"]) for e in events] == [
        ("looking it up", [{"id": "toolu_1", "name": "get_reservation", "arguments": {"id": "ABC"}}])]


def test_reasoning_parts_are_a_hidden_thinking_message() -> None:
    value = {"stringValue": '[{"role": "assistant", "parts": [{"type": "reasoning", "content": "Check the fare '
                            'rules first."}, {"type": "text", "content": "The fare is refundable."}]}]'}
    for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
        assert _messages_of(value, key) == [("assistant", "hidden", "Check the fare rules first."),
                                            ("assistant", "visible", "The fare is refundable.")]


@pytest.mark.parametrize(("ids", "reason"), [
    ({}, "needs the traceId and spanId"),
    ({"traceId": "zz", "spanId": "c000000000000009"}, "traceId 'zz' is not hex of the right length"),
    ({"traceId": "5b8efff798038103d269b633813fc60d", "spanId": "not-an-id"}, "spanId 'not-an-id' is not hex"),
])
def test_a_log_record_with_a_malformed_id_is_refused_naming_it(ids: dict[str, str], reason: str) -> None:
    # A malformed traceId was refused as if left out ("needs the traceId and spanId"), where
    # /v1/traces names the id and the length OTLP gives it.
    from streams.importers.otel import log_spans

    record = {"timeUnixNano": "1765000000000000001", "eventName": "gen_ai.user.message",
              "body": {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": "hi"}}]}}, **ids}
    _spans, refused = log_spans({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]})
    assert len(refused) == 1 and reason in refused[0].reason


@pytest.mark.parametrize(("value", "text"), [
    ({"stringValue": '[{"role": "user", "parts": [{"content": "a text part without its type"}]}]'},
     "a text part without its type"),
    ({"stringValue": '[{"role": "user", "parts": [{"text": "untyped, with text"}, "and a string"]}]'},
     "untyped, with text\nand a string"),
    ({"stringValue": '[{"role": "user", "parts": [{"type": "text", "content": "look:"}, {"type": "uri", '
                     '"modality": "image", "uri": "https://example.org/cat.png"}, {"type": "blob", "modality": '
                     '"image", "mime_type": "image/png", "content": "iVBORw0KGgo="}]}]'},
     "look:\n[uri] image https://example.org/cat.png\n[blob] image image/png"),
])
def test_parts_of_no_type_and_media_parts_are_not_dropped(value: dict[str, Any], text: str) -> None:
    """A part written without its `type` (`{"content": ...}`) and the conventions' media parts
    (`uri`, `blob`, `file`) were dropped without a word, the receiver answering 200: the words
    of the first were never searchable, and nothing said the message held an image."""
    assert _messages_of(value) == [("user", "visible", text)]


def test_an_attribute_given_twice_with_different_values_refuses_the_span() -> None:
    """OTLP gives each attribute key once; read as a dict, the last of two `gen_ai.input.messages`
    stood and the first conversation was dropped without a word. The span is refused naming the
    key; the same value given twice is read once."""
    def messages(text: str) -> dict[str, Any]:
        return {"key": "gen_ai.input.messages",
                "value": {"stringValue": f'[{{"role": "user", "parts": [{{"type": "text", "content": "{text}"}}]}}]'}}

    twice = _legacy_span([*_attrs(**{"gen_ai.operation.name": "chat"}), messages("first"), messages("second")])
    items = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": [twice]}]}]}))
    assert [(type(item).__name__, item.reason) for item in items] == [
        ("Rejected", "attribute 'gen_ai.input.messages' is given twice in the span's attributes with different "
                     "values (OTLP: each key once per list); send the one that holds")]
    in_event = _legacy_span(_attrs(**{"gen_ai.operation.name": "chat"}), events=[
        {"name": "gen_ai.user.message", "attributes": _attrs(content="first") + _attrs(content="second")}])
    (item,) = span_events({"resourceSpans": [{"scopeSpans": [{"spans": [in_event]}]}]})
    assert "given twice in the span's events[0].attributes" in item.reason
    same = _legacy_span([*_attrs(**{"gen_ai.operation.name": "chat"}), messages("once"), messages("once")])
    assert _chat_messages(same) == [("user", "once")]


@pytest.mark.parametrize("parent", ["not-a-span-id!", "zz", "eee19b7ec3c1b17-"])
def test_a_malformed_parent_span_id_refuses_the_span(parent: str) -> None:
    """A parentSpanId that is neither hex nor base64 was read as none: the span went in as a
    root, its run and its place in the trace lost without a word. It is refused naming the id,
    as a malformed spanId is (hex of another length is taken, as for every id: it only has to
    match its parent's)."""
    span = {**_span("c000000000000003", parent, "chat", "conv"), "parentSpanId": parent}
    items = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    assert [type(item).__name__ for item in items] == ["Rejected"]
    assert items[0].reason.startswith(f"parentSpanId {parent!r} is not hex of the right length")


def test_a_log_record_with_an_attribute_given_twice_is_refused_naming_it() -> None:
    from streams.importers.otel import log_spans

    record = {"timeUnixNano": "1765000000000000001", "eventName": "gen_ai.client.inference.operation.details",
              "traceId": "5b8efff798038103d269b633813fc60d", "spanId": "c000000000000009",
              "attributes": _attrs(**{"gen_ai.output.messages": "first"}) + _attrs(**{"gen_ai.output.messages": "second"})}
    _spans, refused = log_spans({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]})
    assert [r.reason for r in refused] == [
        "attribute 'gen_ai.output.messages' is given twice in the record's attributes with different values "
        "(OTLP: each key once per list); send the one that holds"]


def test_a_protobuf_span_with_an_attribute_given_twice_is_refused() -> None:
    """Protobuf's repeated KeyValue keeps both copies through the receiver's decoding."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from planner.otlp import decode_request

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = bytes.fromhex("5b8efff798038103d269b633813fc60c"), bytes.fromhex("eee19b7ec3c1b174")
    span.start_time_unix_nano, span.end_time_unix_nano = 1764579600 * 10**9, 1764579601 * 10**9
    for key, value in (("gen_ai.operation.name", "chat"), ("gen_ai.conversation.id", "a"),
                       ("gen_ai.conversation.id", "b")):
        attribute = span.attributes.add()
        attribute.key, attribute.value.string_value = key, value
    items = list(span_events(decode_request(request.SerializeToString(), "application/x-protobuf")))
    assert [type(item).__name__ for item in items] == ["Rejected"]
    assert "'gen_ai.conversation.id' is given twice" in items[0].reason


CLAUDE_KEYS = st.sampled_from(["event.name", "session.id", "prompt.id", "prompt", "tool_name", "tool_use_id",
                               "success", "error", "tool_parameters", "tool_input", "input_tokens", "cost_usd",
                               "event.timestamp"])
claude_record = st.fixed_dictionaries({
    "timeUnixNano": st.sampled_from(["1764579600000000000", "0", "soon", 17, None]),
    "body": st.sampled_from([{"stringValue": "claude_code.user_prompt"}, {"stringValue": "claude_code.tool_result"},
                             {"stringValue": "claude_code.api_request"}, {"stringValue": "claude_code."},
                             {"stringValue": "hello"}, {}, None]),
    "attributes": st.lists(st.fixed_dictionaries({"key": CLAUDE_KEYS, "value": value()}), max_size=8),
})


@fuzz(200)
@given(records=st.lists(claude_record | json_values(max_leaves=4), max_size=5), junk=json_values(max_leaves=4))
def test_any_claude_code_records_map_without_raising(records: list[Any], junk: Any) -> None:
    """Claude Code's telemetry events (POST /v1/logs) never raise: each record is events or a
    reason, and every event is valid ASP."""
    from streams.importers.base import Rejected
    from streams.importers.claude_code_otel import SCOPE, claude_code_events

    for request in ({"resourceLogs": [{"scopeLogs": [{"scope": {"name": SCOPE}, "logRecords": records}]}]},
                    {"resourceLogs": junk}):
        for item in claude_code_events(request):
            if isinstance(item, Accepted):
                assert validate_event(item.event) == item.event
            else:
                assert isinstance(item, Rejected) and item.reason


def test_claude_code_records_without_prompt_id_share_their_prompts_turn() -> None:
    """Claude Code 1.x names no prompt.id: a request's records after a user_prompt are in its
    turn, and the ones before any prompt are left loose (the receiver frames them); a prompt
    closes the turn before it."""
    from streams.importers.claude_code_otel import claude_code_events

    def record(name: str, at: int, **extra: str) -> dict[str, Any]:
        return {"timeUnixNano": str(at * 10**9), "body": {"stringValue": f"claude_code.{name}"}, "attributes": [
            {"key": key, "value": {"stringValue": value}}
            for key, value in {"event.name": name, "session.id": "s-1", **extra}.items()]}

    items = claude_code_events({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        record("api_request", 1, model="m"), record("user_prompt", 2, prompt="first"),
        record("tool_result", 3, tool_name="Read"), record("user_prompt", 4, prompt="second"),
        record("api_request", 5, model="m")]}]}]})
    events = [item.event for item in items if isinstance(item, Accepted)]
    assert len(events) == len(items)
    shape = [(e["type"], e.get("turnId")) for e in events]
    first, second = shape[2][1], shape[7][1]
    assert first and second and first != second
    assert shape == [("session.started", None), ("x.claude-code.api_request", None), ("turn.started", first),
                     ("message", first), ("tool.call", first), ("tool.result", first), ("turn.ended", first),
                     ("turn.started", second), ("message", second), ("x.claude-code.api_request", second),
                     ("turn.ended", second)]


def test_openinference_spans_are_read_as_the_genai_spans_they_amount_to() -> None:
    """Found as a new user: OpenInference instrumentations (Arize Phoenix's, for OpenAI, LangChain,
    the OpenAI Agents SDK, ...) mark spans with openinference.span.kind and flattened llm.*
    messages, not gen_ai.operation.name: every span was ignored, answered 200, nothing appended.
    An AGENT > LLM, TOOL, LLM trace as the spec's tool-calling example writes it, in the
    session its session.id names, with its messages, tool call, result and tokens."""
    trace, agent, first, tool, second = "6e0c63257de34c926f9efcd03919fb93", "a1" * 8, "b2" * 8, "c3" * 8, "d4" * 8

    def span(span_id: str, parent: str, kind: str, start: int, attributes: dict[str, Any]) -> dict[str, Any]:
        values = {"openinference.span.kind": kind, "session.id": "phx-session-9", **attributes}
        return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": kind.lower(),
                "startTimeUnixNano": str(start * 10**9), "endTimeUnixNano": str((start + 1) * 10**9),
                "attributes": [{"key": key, "value": {"intValue": str(value)} if isinstance(value, int)
                                else {"stringValue": value}} for key, value in values.items()]}

    question = "What's the weather in Boston?"
    spans = [
        span(agent, "", "AGENT", 1764579600, {"agent.name": "weather-agent", "input.value": question,
                                             "output.value": "It is 65°F and cloudy in Boston."}),
        span(first, agent, "LLM", 1764579601, {
            "llm.model_name": "gpt-4o-2024-08-06", "llm.token_count.prompt": 82, "llm.token_count.completion": 17,
            "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": question,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_123",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"location": "Boston, MA"}'}),
        span(tool, agent, "TOOL", 1764579602, {"tool.name": "get_weather", "input.value": '{"location": "Boston, MA"}',
                                             "output.value": '{"temperature": 65, "condition": "cloudy"}'}),
        span(second, agent, "LLM", 1764579603, {
            "llm.model_name": "gpt-4o-2024-08-06",
            "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": question,
            "llm.input_messages.1.message.role": "tool", "llm.input_messages.1.message.tool_call_id": "call_123",
            "llm.input_messages.1.message.content": '{"temperature": 65, "condition": "cloudy"}',
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.contents.0.message_content.type": "text",
            "llm.output_messages.0.message.contents.0.message_content.text": "The weather in Boston is 65°F and cloudy."}),
        span("e5" * 8, agent, "CHAIN", 1764579604, {"input.value": "ignored"}),
    ]
    items = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    events = [item.event for item in items if isinstance(item, Accepted)]
    assert len(events) == len(items) and {e["sessionId"] for e in events} == {"phx-session-9"}
    shape = [(e["type"], e.get("role"), e["fields"].get("text") or e["fields"].get("toolName")) for e in events]
    assert shape == [
        ("session.started", None, None), ("run.started", None, None),
        ("message", "user", question), ("message", "assistant", "It is 65°F and cloudy in Boston."),
        ("run.ended", None, None),
        ("turn.started", "user", None), ("message", "user", question), ("message", "assistant", None),
        ("turn.ended", None, None),
        ("tool.call", "assistant", "get_weather"), ("tool.result", "tool", "get_weather"),
        ("turn.started", "user", None), ("message", "user", question),
        ("message", "tool", '{"temperature": 65, "condition": "cloudy"}'),
        ("message", "assistant", "The weather in Boston is 65°F and cloudy."), ("turn.ended", None, None)]
    # The question each call repeats (and the agent's input) is one event, as the conventions' history is.
    assert len({e["eventId"] for e in events if e["fields"].get("text") == question}) == 1
    by_run = {e["runId"] for e in events if e["type"] not in ("session.started",)}
    assert len(by_run) == 1  # every span is in the agent's run
    answer = next(e for e in events if e["type"] == "message" and e["fields"].get("toolCalls"))
    assert answer["fields"]["toolCalls"] == [{"id": "call_123", "name": "get_weather",
                                              "arguments": {"location": "Boston, MA"}}]
    assert answer["fields"]["usage"] == {"inputTokens": 82, "outputTokens": 17}
    call, result = (e for e in events if e["type"] in ("tool.call", "tool.result"))
    assert call["fields"]["input"] == {"location": "Boston, MA"}
    assert result["fields"]["output"] == '{"temperature": 65, "condition": "cloudy"}'


@pytest.mark.parametrize(("given", "answered", "question", "answer"), [
    # LangChain's AgentExecutor (openinference-instrumentation-langchain writes a run's inputs and
    # outputs as this JSON object when they are more than one string)
    ('{"input": "Which port does the broker listen on?", "chat_history": []}',
     '{"output": "It listens on 9092.", "intermediate_steps": []}',
     "Which port does the broker listen on?", "It listens on 9092."),
    # LangGraph's state: the messages, LangChain's own types; the output's last one is the answer
    ('{"messages": [{"type": "human", "content": "Which port does the broker listen on?"}]}',
     '{"messages": [{"type": "human", "content": "Which port does the broker listen on?"}, {"lc": 1, '
     '"type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"], '
     '"kwargs": {"type": "ai", "content": "It listens on 9092."}}]}',
     "Which port does the broker listen on?", "It listens on 9092."),
    # the OpenAI Agents SDK's run input as its input items, its output as text
    ('[{"role": "user", "content": "Which port does the broker listen on?"}]', "It listens on 9092.",
     "Which port does the broker listen on?", "It listens on 9092."),
    # an object of no known shape: kept as the JSON it is, never dropped
    ('{"ticket": 4711}', '{"verdict": {"ok": true}}', '{"ticket": 4711}', '{"verdict": {"ok": true}}'),
])
def test_an_openinference_agents_json_input_is_read_as_the_text_it_holds(
        given: str, answered: str, question: str, answer: str) -> None:
    """An AGENT span's input.value that is a JSON object (LangChain's {"input": ...}) was read
    as a message of no role and dropped without a word; its output kept as the raw JSON."""
    values = {"openinference.span.kind": "AGENT", "session.id": "phx-1", "input.value": given,
              "output.value": answered}
    spans = [{"traceId": "6e0c63257de34c926f9efcd03919fb93", "spanId": "a1" * 8, "name": "agent",
              "startTimeUnixNano": "1764579600000000000", "endTimeUnixNano": "1764579601000000000",
              "attributes": [{"key": key, "value": {"stringValue": value}} for key, value in values.items()]}]
    items = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    assert all(isinstance(item, Accepted) for item in items)
    messages = [(item.event["role"], item.event["fields"]["text"]) for item in items
                if isinstance(item, Accepted) and item.event["type"] == "message"]
    assert messages == [("user", question), ("assistant", answer)]


def test_openllmetry_tool_and_agent_spans_and_its_session_property() -> None:
    """Found as a new user: OpenLLMetry's @agent / @tool decorators make spans with
    traceloop.span.kind and traceloop.entity.*, no gen_ai.operation.name (ignored: a tool's calls
    searchable nowhere), and its session is the association property
    traceloop.association.properties.session_id, not gen_ai.conversation.id: each trace of one
    chat went to a session of its own, otel-<traceId>."""
    def span(trace: str, span_id: str, parent: str, attributes: dict[str, Any]) -> dict[str, Any]:
        values = {"traceloop.association.properties.session_id": "chat-42", **attributes}
        return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": "span",
                "startTimeUnixNano": "1764579600000000000", "endTimeUnixNano": "1764579601000000000",
                "attributes": [{"key": key, "value": {"stringValue": value}} for key, value in values.items()]}

    first, second = "1" * 32, "2" * 32
    spans = [
        span(first, "a" * 16, "", {"traceloop.span.kind": "agent", "traceloop.entity.name": "travel_agent"}),
        span(first, "b" * 16, "a" * 16, {"traceloop.span.kind": "tool", "traceloop.entity.name": "book_flight",
                                         "traceloop.entity.input": '{"args": [], "kwargs": {"to": "Lisbon"}}',
                                         "traceloop.entity.output": '"booked TP1234"'}),
        span(second, "c" * 16, "", {"llm.request.type": "chat", "gen_ai.prompt.0.role": "user",
                                    "gen_ai.prompt.0.content": "and a hotel near the river?"}),
        span(second, "d" * 16, "c" * 16, {"traceloop.span.kind": "task", "traceloop.entity.name": "rank"}),
    ]
    events = [item.event for item in span_events({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
              if isinstance(item, Accepted)]
    assert {e["sessionId"] for e in events} == {"chat-42"}
    run = next(e for e in events if e["type"] == "run.started")
    assert run["fields"]["agentName"] == "travel_agent"
    call = next(e for e in events if e["type"] == "tool.call")
    assert (call["fields"]["toolName"], call["fields"]["input"], call["runId"]) == (
        "book_flight", {"to": "Lisbon"}, run["runId"])
    assert next(e for e in events if e["type"] == "tool.result")["fields"]["output"] == '"booked TP1234"'
    assert "and a hotel near the river?" in [e["fields"].get("text") for e in events]


@pytest.mark.parametrize("count", ["nan", "inf", "-Infinity", "1e400"])
def test_a_claude_code_count_that_is_no_finite_number_is_kept_as_text(count: str) -> None:
    """A token count or measure reading as a float JSON has no value for (NaN, infinities)
    raised out of the mapping (a 500 for the whole export) or was stored as null."""
    from streams.importers.claude_code_otel import claude_code_events

    items = claude_code_events({"resourceLogs": [{"scopeLogs": [{"logRecords": [{
        "timeUnixNano": "1764579600000000000", "body": {"stringValue": "claude_code.api_request"},
        "attributes": [{"key": key, "value": {"stringValue": value}} for key, value in (
            ("session.id", "s-1"), ("input_tokens", count), ("output_tokens", "7"), ("duration_ms", count))]}]}]}]})
    request = [item.event for item in items if isinstance(item, Accepted)][-1]
    assert request["fields"]["usage"] == {"outputTokens": 7}
    assert request["fields"]["durationMs"] == count


@pytest.mark.parametrize("value", [{"intValue": str(2**70)}, {"stringValue": "x"}], ids=["past 64 bits", "deep"])
def test_a_claude_code_record_orjson_cannot_write_is_mapped_not_raised(value: dict[str, Any]) -> None:
    """A record's identity is a digest of its attributes: an OTLP/JSON intValue past 64 bits, or
    a kvlist nested past orjson's depth, raised TypeError out of the mapping (a 500 for the
    whole export) instead of mapping the record, or refusing the event that cannot be stored."""
    from streams.importers.base import Rejected
    from streams.importers.claude_code_otel import claude_code_events

    if "stringValue" in value:
        for _ in range(300):
            value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    record = {"timeUnixNano": "1764579600000000000", "body": {"stringValue": "claude_code.tool_decision"},
              "attributes": [{"key": "session.id", "value": {"stringValue": "s-1"}}, {"key": "n", "value": value}]}
    request = {"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]}
    items = claude_code_events(request)
    assert [item.event["type"] for item in items if isinstance(item, Accepted)][:1] == ["session.started"]
    assert all(isinstance(item, Accepted | Rejected) for item in items)
    assert [getattr(item, "event", None) for item in items] == \
        [getattr(item, "event", None) for item in claude_code_events(request)]  # a retry: the same ids


def test_ids_of_the_wrong_length_or_of_zeroes_are_refused_by_name() -> None:
    """OTLP: a traceId is 16 bytes, a spanId 8, and an id of another length or of zeroes is
    invalid (the Collector refuses it). Hex of any length was taken: a 64-bit trace id's spans
    were appended, their lineage matching nothing a conforming exporter sends. A parentSpanId
    of zeroes is a root's, as the Collector reads it, not a refusal."""
    from streams.importers.base import Rejected
    from streams.importers.otel import log_spans

    good = _span("eee19b7ec3c1b174", "", "chat", "conv-1")
    cases = [({"traceId": "d269b633813fc60c"}, "traceId 'd269b633813fc60c' is an id of 8 bytes; OTLP's is 16"),
             ({"spanId": "5b8efff798038103d269b633813fc60c"}, "is an id of 16 bytes; OTLP's is 8 bytes"),
             ({"spanId": "0000000000000000"}, "spanId '0000000000000000' is all zeroes"),
             ({"traceId": "W4737/mAOBA="}, "traceId 'W4737/mAOBA=' is an id of 8 bytes"),
             ({"parentSpanId": "a1b2c3d4"}, "parentSpanId 'a1b2c3d4' is an id of 4 bytes"),
             ({"traceId": "abc"}, "traceId 'abc' is not hex of the right length")]
    for change, says in cases:
        items = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": [{**good, **change}]}]}]}))
        assert len(items) == 1 and isinstance(items[0], Rejected) and says in items[0].reason, (change, items)
    root = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": [
        {**good, "parentSpanId": "0000000000000000"}]}]}]}))
    plain = list(span_events({"resourceSpans": [{"scopeSpans": [{"spans": [good]}]}]}))
    assert [item.event for item in root if isinstance(item, Accepted)] == [
        item.event for item in plain if isinstance(item, Accepted)] != []
    record = {"eventName": "gen_ai.user.message", "traceId": "d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
              "timeUnixNano": "1764579600000000000", "body": {"stringValue": "hi"}}
    spans, refused = log_spans({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]})
    assert list(span_events(spans)) == []
    assert [item.reason for item in refused] == [
        "traceId 'd269b633813fc60c' is an id of 8 bytes; OTLP's is 16 bytes (32 hex digits)"]
