"""POST /v1/traces: the real OpenTelemetry SDK exports GenAI spans over OTLP/HTTP (protobuf) to
the API; they land in L1 once each, with lineage, and are searchable. OTLP JSON maps the same."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import uvicorn

from deploy.testing import free_port
from planner.acl import Principal
from planner.api import create_app
from planner.engine import Planner
from sinks.watermarks import WatermarkFollower
from streams.importers.otel import span_events
from streams.l1 import L1Reader
from streams.settings import Settings

pytestmark = pytest.mark.kafka

CONVERSATION = "conv-otel-7"


@pytest.fixture
def served(make_settings: Any) -> Iterator[tuple[Settings, Planner, str]]:
    settings = make_settings(embedder="hash:64")
    follower = WatermarkFollower(settings.bootstrap_servers or "", settings).start(timeout_seconds=30)
    planner = Planner(settings, settings.bootstrap_servers or "", follower=follower)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, settings.bootstrap_servers or "", planner=planner),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield settings, planner, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        planner.close()
        follower.stop()


def send_agent_run(endpoint: str) -> None:
    """An agent run as GenAI instrumentation emits it: invoke_agent > chat, execute_tool."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    # One export per span as it ends: children reach the receiver before their parent.
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    tracer = provider.get_tracer("usl-test")
    common = {"gen_ai.conversation.id": CONVERSATION, "gen_ai.provider.name": "openai"}
    question = [{"role": "user", "parts": [{"type": "text", "content": "Will it hail in Reykjavik tomorrow?"}]}]
    with tracer.start_as_current_span("invoke_agent forecaster", attributes={
            **common, "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "forecaster",
            "gen_ai.agent.id": "agent-42", "gen_ai.input.messages": orjson.dumps(question).decode()}):
        with tracer.start_as_current_span("chat gpt-4o", attributes={
                **common, "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": orjson.dumps(question).decode(),
                "gen_ai.output.messages": orjson.dumps([{"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "call_1", "name": "get_forecast",
                     "arguments": {"city": "Reykjavik"}}]}]).decode(),
                "gen_ai.usage.input_tokens": 31, "gen_ai.usage.output_tokens": 12}):
            pass
        with tracer.start_as_current_span("execute_tool get_forecast", attributes={
                **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_forecast",
                "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.arguments": '{"city": "Reykjavik"}',
                "gen_ai.tool.call.result": "graupel showers expected after midnight"}):
            pass
        with tracer.start_as_current_span("execute_tool get_radar", attributes={
                **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_radar",
                "gen_ai.tool.call.id": "call_2"}) as failing:
            failing.set_status(Status(StatusCode.ERROR, "radar offline"))
    provider.shutdown()


def l1_events(settings: Settings) -> list[dict[str, Any]]:
    reader = L1Reader(settings.bootstrap_servers or "", settings)
    try:
        return [event for _seq, event in reader.read("default", 1)]
    finally:
        reader.close()


def test_sdk_spans_are_searchable_with_lineage(served):
    settings, planner, endpoint = served
    send_agent_run(endpoint)
    events = l1_events(settings)
    assert max(Counter(e["eventId"] for e in events).values()) == 1
    by_type = Counter(e["type"] for e in events)
    assert by_type["session.started"] == 1 and by_type["run.started"] == by_type["run.ended"] == 1
    # The chat span's turn, and one the receiver frames around each tool span's events (one
    # export per span). The agent span's own message repeats the chat span's question (the same
    # event, in L1 already): no empty turn is framed around it.
    assert by_type["turn.started"] == by_type["turn.ended"] == 3 and by_type["tool.call"] == by_type["tool.result"] == 2
    turns: dict[str, list[str]] = {}
    for e in events:
        if e.get("turnId"):
            turns.setdefault(e["turnId"], []).append(e["type"])
    assert all(len(types) > 2 for types in turns.values()), turns  # no turn holds only its markers
    assert {e["sessionId"] for e in events} == {CONVERSATION}
    run = next(e for e in events if e["type"] == "run.started")
    assert run["fields"]["agentName"] == "forecaster" and run["fields"]["agentId"] == "agent-42"
    # Lineage: every span's first event points at its parent span's; all in the agent's run.
    assert all(e.get("runId") == run["runId"] for e in events if e["type"] != "session.started")
    turn = next(e for e in events if e["type"] == "turn.started")
    calls = {e["fields"]["toolCallId"]: e for e in events if e["type"] == "tool.call"}
    results = {e["fields"]["toolCallId"]: e for e in events if e["type"] == "tool.result"}
    assert turn["parentEventId"] == run["eventId"] == calls["call_1"]["parentEventId"]
    assert results["call_1"]["parentEventId"] == calls["call_1"]["eventId"]
    assert results["call_2"]["fields"]["status"] == "error"
    assert results["call_2"]["fields"]["output"] == "radar offline"
    answer = planner.search({"query": "hail Reykjavik", "freshness": "latest", "mode": "text"}, READER_PRINCIPAL)
    hits = answer["results"]
    assert hits and hits[0]["sessionId"] == CONVERSATION and hits[0]["runId"] == run["runId"]
    assert answer["freshness"]["label"] == "latest"


def test_otlp_json_maps_like_protobuf(served):
    import httpx

    settings, _planner, endpoint = served
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "execute_tool lookup", "startTimeUnixNano": "1764579600000000000",
            "endTimeUnixNano": "1764579601000000000", "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                {"key": "gen_ai.tool.name", "value": {"stringValue": "lookup"}},
                {"key": "gen_ai.tool.call.result", "value": {"stringValue": "the ledger balances"}}]}
    body = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [
        span, {**span, "spanId": "not-hex!", "attributes": []}, {"spanId": "x"}]}]}]}
    for _ in range(2):  # an exporter's retry sends the same spans again: nothing new
        response = httpx.post(f"{endpoint}/v1/traces", content=orjson.dumps(body),
                              headers={"Content-Type": "application/json"}, timeout=30)
        assert response.status_code == 200, response.text
    assert response.json() == {}  # the span without gen_ai.operation.name is not GenAI: skipped
    types = [e["type"] for e in l1_events(settings)]
    # The tool span's events are in no turn: the receiver frames them (a retry adds nothing).
    assert types == ["session.started", "turn.started", "tool.call", "tool.result", "turn.ended"]
    bad = httpx.post(f"{endpoint}/v1/traces", content=b"\x0a\xff", headers={"Content-Type": "application/x-protobuf"})
    assert bad.status_code == 400 and rpc_status(bad).startswith("bad_query: ")
    # a log no event can carry is refused whole, not answered 200 with every span rejected
    bad_log = httpx.post(f"{endpoint}/v1/traces", params={"log": "team a"}, content=orjson.dumps(body),
                         headers={"Content-Type": "application/json"}, timeout=30)
    assert bad_log.status_code == 400 and "is not a log name" in bad_log.json()["error"]["message"], bad_log.text
    assert [i.reason for i in span_events({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "ab" * 16, "spanId": "cd" * 8, "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}]}]}]})] == [
        "a span needs startTimeUnixNano"]


#: A reader of tenant default (the tenant keyless writes get).
READER_PRINCIPAL = Principal(tenant="default", user="tester")


def test_a_tool_span_without_the_conversation_joins_its_agents_session(served):
    """The SDK's batch processor exports the run in one request; only the agent and chat spans
    carry gen_ai.conversation.id. Every event lands in that one session (before, the tool span's
    went to otel-<traceId>, splitting the run over two sessions)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    settings, _planner, endpoint = served
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    tracer = provider.get_tracer("usl-test")
    conversation = {"gen_ai.conversation.id": "qa-otel-conv-1"}
    with tracer.start_as_current_span("invoke_agent", attributes={**conversation, "gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("chat", attributes={**conversation, "gen_ai.operation.name": "chat",
                                                              "gen_ai.output.messages": orjson.dumps([
                                                                  {"role": "assistant", "parts": [
                                                                      {"type": "text", "content": "checking"}]}]).decode()}):
            pass
        with tracer.start_as_current_span("execute_tool lookup", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.result": "found it"}):
            pass
    provider.shutdown()
    events = l1_events(settings)
    assert {e["type"] for e in events} >= {"run.started", "turn.started", "tool.call", "tool.result"}
    assert {e["sessionId"] for e in events} == {"qa-otel-conv-1"}
    assert len({e["runId"] for e in events if e.get("runId")}) == 1


def test_spans_exported_one_by_one_join_the_conversation_their_trace_named(served):
    """SimpleSpanProcessor, conversation on the agent and chat spans only (as the conventions
    have it): a tool span that ends after the first chat span joins the conversation, though its
    agent span comes last (it went to otel-<traceId> before). The tool span before any chat
    cannot know it: it keeps otel-<traceId>, which then names the conversation as its parent."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    settings, planner, endpoint = served
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    tracer = provider.get_tracer("usl-test")
    conversation = {"gen_ai.conversation.id": "qa-otel-conv-2"}
    with tracer.start_as_current_span("invoke_agent", attributes={**conversation, "gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("execute_tool profile", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "profile",
                "gen_ai.tool.call.result": "the user lives in Reykjavik"}):
            pass
        with tracer.start_as_current_span("chat", attributes={**conversation, "gen_ai.operation.name": "chat"}):
            pass
        with tracer.start_as_current_span("execute_tool get_forecast", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_forecast",
                "gen_ai.tool.call.result": "graupel showers expected after midnight"}) as span:
            trace = f"{span.get_span_context().trace_id:032x}"
    provider.shutdown()
    events = l1_events(settings)
    assert max(Counter(e["eventId"] for e in events).values()) == 1
    tools = {e["fields"]["toolName"]: e["sessionId"] for e in events if e["type"] == "tool.call"}
    assert tools == {"profile": f"otel-{trace}", "get_forecast": "qa-otel-conv-2"}
    assert {e["sessionId"] for e in events} == {f"otel-{trace}", "qa-otel-conv-2"}
    assert Counter(e["type"] for e in events if e["sessionId"] == f"otel-{trace}") == Counter([
        "session.started", "turn.started", "tool.call", "tool.result", "turn.ended", "x.otel.conversation"])
    links = [e for e in events if e.get("parentSessionId")]
    assert [(e["type"], e["sessionId"], e["parentSessionId"]) for e in links] == [
        ("x.otel.conversation", f"otel-{trace}", "qa-otel-conv-2")]
    hits = planner.search({"query": "graupel", "freshness": "latest", "mode": "text"}, READER_PRINCIPAL)["results"]
    assert hits and hits[0]["sessionId"] == "qa-otel-conv-2"


def test_json_spans_children_first_over_requests_and_replicas(served):
    """One span per OTLP/JSON request, children first, the last two to another receiver (an API
    replica that reads L1 when it starts): one session but for the tool span that came before
    anything named the conversation; a retry to either receiver appends nothing and moves
    nothing."""
    import httpx

    settings, _planner, endpoint = served
    trace, agent = "0af7651916cd43dd8448eb211c80319c", "a000000000000001"

    def span(span_id: str, parent: str, operation: str, *, conversation: bool = False,
             **extra: str) -> dict[str, Any]:
        attributes = {"gen_ai.operation.name": operation, **extra,
                      **({"gen_ai.conversation.id": "qa-otel-conv-3"} if conversation else {})}
        return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": operation,
                "startTimeUnixNano": "1764579600000000000", "endTimeUnixNano": "1764579601000000000",
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]}

    requests = [span("e000000000000002", agent, "execute_tool", **{"gen_ai.tool.name": "first"}),
                span("c000000000000003", agent, "chat", conversation=True),
                span("e000000000000004", agent, "execute_tool", **{"gen_ai.tool.name": "second"}),
                span(agent, "", "invoke_agent", conversation=True)]
    app = create_app(settings, settings.bootstrap_servers or "")
    port = free_port()
    replica = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=replica.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not replica.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        def post(url: str, one: dict[str, Any]) -> None:
            body = {"resourceSpans": [{"scopeSpans": [{"spans": [one]}]}]}
            response = httpx.post(f"{url}/v1/traces", content=orjson.dumps(body),
                                  headers={"Content-Type": "application/json"}, timeout=30)
            assert response.status_code == 200 and response.json() == {}, response.text

        other = f"http://127.0.0.1:{port}"
        for index, one in enumerate(requests):
            post(endpoint if index < 2 else other, one)
        events = l1_events(settings)
        for url in (endpoint, other):
            for one in requests:
                post(url, one)
        assert l1_events(settings) == events
    finally:
        replica.should_exit = True
        thread.join(10)
    assert max(Counter(e["eventId"] for e in events).values()) == 1
    tools = {e["fields"]["toolName"]: e["sessionId"] for e in events if e["type"] == "tool.call"}
    assert tools == {"first": f"otel-{trace}", "second": "qa-otel-conv-3"}
    assert {e["sessionId"] for e in events if e["type"] != "x.otel.conversation"} - {f"otel-{trace}"} \
        == {"qa-otel-conv-3"}
    assert [(e["sessionId"], e["parentSessionId"]) for e in events if e["type"] == "x.otel.conversation"] == [
        (f"otel-{trace}", "qa-otel-conv-3")]


def test_a_gzip_exporter_is_received_and_an_oversized_result_is_cut_not_lost(served):
    """The OpenTelemetry SDK exporter with compression=gzip (the Collector's otlphttp exporter
    gzips by default) got 400 "not valid OTLP JSON" and, not retrying a 400, lost its spans. And
    a 2.4 MB gen_ai.tool.call.result lost its tool.result while its tool.call was kept: it is
    cut as `usl ingest` cuts one, and partialSuccess says so without rejecting a span."""
    import gzip

    import httpx
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

    settings, _planner, endpoint = served
    results: list[SpanExportResult] = []

    class Recording(OTLPSpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            results.append(super().export(spans))
            return results[-1]

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Recording(endpoint=f"{endpoint}/v1/traces",
                                                              compression=Compression.Gzip)))
    tracer = provider.get_tracer("usl-test")
    conversation = {"gen_ai.conversation.id": "qa-otel-gzip"}
    with tracer.start_as_current_span("chat", attributes={**conversation, "gen_ai.operation.name": "chat",
                                                          "gen_ai.input.messages": orjson.dumps([{
                                                              "role": "user", "parts": [{"type": "text",
                                                                                         "content": "dump the ledger"}]}]).decode()}):
        pass
    with tracer.start_as_current_span("execute_tool dump", attributes={
            **conversation, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "dump",
            "gen_ai.tool.call.id": "call_big", "gen_ai.tool.call.result": "ledger row\n" * 240_000}):
        pass
    provider.shutdown()
    assert results == [SpanExportResult.SUCCESS] * 2
    events = l1_events(settings)
    assert {e["sessionId"] for e in events} == {"qa-otel-gzip"}
    texts = [e["fields"]["text"] for e in events if e["type"] == "message"]
    assert texts == ["dump the ledger"]
    result = next(e for e in events if e["type"] == "tool.result")
    assert next(e for e in events if e["type"] == "tool.call")["fields"]["toolCallId"] == "call_big"
    assert result["fields"]["_truncated"]["originalBytes"] > settings.max_event_bytes
    assert result["fields"]["output"].startswith("ledger row\nledger row\n")

    # The answer of such a request: no span rejected, the cut named (a warning, as OTLP has it).
    span = {"traceId": "5b8efff798038103d269b633813fc60d", "spanId": "eee19b7ec3c1b175",
            "startTimeUnixNano": "1764579600000000000", "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                {"key": "gen_ai.tool.call.result", "value": {"stringValue": "row\n" * 600_000}}]}
    body = gzip.compress(orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    response = httpx.post(f"{endpoint}/v1/traces", content=body, timeout=30,
                          headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert response.status_code == 200, response.text
    warning = response.json()["partialSuccess"]
    assert warning["rejectedSpans"] == 0 and "fields._truncated" in warning["errorMessage"]


def test_otlp_errors_say_what_is_wrong(served):
    """`"spans": 5` was a 200 {} (the spans silently dropped); a bad id or time was named
    vaguely; text/plain's 415 named JSON only; a plain body labelled gzip was accepted."""
    import httpx

    _settings, _planner, endpoint = served

    def send(content: bytes, **headers: str) -> Any:
        return httpx.post(f"{endpoint}/v1/traces", content=content, timeout=30,
                          headers={"Content-Type": "application/json", **headers})

    shape = send(b'{"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]}')
    assert shape.status_code == 400
    assert "resourceSpans[0].scopeSpans[0].spans must be a list, not a number" in shape.json()["error"]["message"]
    good = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "startTimeUnixNano": "1764579600000000000",
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}
    for change, says in (({"traceId": "zz"}, "traceId 'zz' is not hex of the right length (OTLP: 32 hex digits"),
                         ({"spanId": "span-1"}, "spanId 'span-1' is not hex of the right length (OTLP: 16 hex digits"),
                         ({"startTimeUnixNano": "abc"}, "startTimeUnixNano 'abc' is not a number"),
                         # OTLP's ids are 16 and 8 bytes, and one of zeroes is invalid: hex of any
                         # length was taken.
                         ({"traceId": "d269b633813fc60c"}, "traceId 'd269b633813fc60c' is an id of 8 bytes; "
                                                           "OTLP's is 16 bytes (32 hex digits)"),
                         ({"spanId": "00000000"}, "spanId '00000000' is all zeroes")):
        body = orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{**good, **change}]}]}]})
        answer = send(body).json()["partialSuccess"]
        assert answer["rejectedSpans"] == 1 and says in answer["errorMessage"], answer
    # An exporter only logs a partial success: each refused span is a dead letter too.
    from streams.l1 import read_dead_letters

    letters = read_dead_letters(_settings.bootstrap_servers or "", _settings, log_id="default")
    assert len(letters) == 5 and {letter["stage"] for letter in letters} == {"receiver"}
    assert all(letter["record"].startswith("POST /v1/traces ") for letter in letters)
    assert any("traceId 'zz'" in letter["reason"] for letter in letters)
    # Protobuf's ids are bytes: held to the same lengths.
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    message = ExportTraceServiceRequest()
    span = message.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = bytes.fromhex("d269b633813fc60c"), bytes.fromhex("eee19b7ec3c1b174")
    span.start_time_unix_nano = 1764579600000000000
    attribute = span.attributes.add()
    attribute.key, attribute.value.string_value = "gen_ai.operation.name", "chat"
    reply = ExportTraceServiceResponse.FromString(send(
        message.SerializeToString(), **{"Content-Type": "application/x-protobuf"}).content).partial_success
    assert reply.rejected_spans == 1 and "traceId 'd269b633813fc60c' is an id of 8 bytes" in reply.error_message
    plain = send(b"{}", **{"Content-Type": "text/plain"})
    assert plain.status_code == 415 and "application/x-protobuf" in plain.json()["error"]["message"]
    labelled = send(b'{"resourceSpans": []}', **{"Content-Encoding": "gzip"})
    assert labelled.status_code == 400 and "not valid gzip data" in labelled.json()["error"]["message"]
    assert send(b'{"resourceSpans": []}', **{"Content-Encoding": "br"}).status_code == 415
    # A lone surrogate escape is read as U+FFFD (test_receiver_bodies), unless the body is no JSON anyway.
    surrogate = send(b'{"resourceSpans": [{"x": "\\ud800"}]')
    assert surrogate.status_code == 400 and "is not valid JSON" in surrogate.json()["error"]["message"]


def rpc_status(response: Any) -> str:
    """The message of the protobuf ``google.rpc.Status`` an OTLP/HTTP error answer carries, read
    as the Collector's ``otlphttp`` exporter reads it (the only body it reads)."""
    from google.rpc.status_pb2 import Status

    assert response.headers["content-type"] == "application/x-protobuf", response.text
    return str(Status.FromString(response.content).message)


def test_an_exporter_reads_why_its_protobuf_export_failed(served, make_settings):
    """An export refused whole (a body no OTLP message, an endpoint that takes no such signal, a
    body over the limit) was answered with the API's JSON error, which the Collector and the Java
    SDK cannot read: they logged "responded with HTTP Status Code 400" and no reason. A protobuf
    request's error is a protobuf google.rpc.Status, as OTLP/HTTP requires; JSON stays JSON."""
    import httpx
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from starlette.testclient import TestClient

    _settings, _planner, endpoint = served
    protobuf = {"Content-Type": "application/x-protobuf"}
    corrupt = httpx.post(f"{endpoint}/v1/traces", content=b"\x0a\x05\x0a\x03\x0a", headers=protobuf, timeout=30)
    assert corrupt.status_code == 400
    assert rpc_status(corrupt).startswith("bad_query: the body is not an OTLP ExportTraceServiceRequest (protobuf): ")
    # An SDK given the API as OTEL_EXPORTER_OTLP_ENDPOINT posts its metrics too.
    metrics = httpx.post(f"{endpoint}/v1/metrics", content=ExportTraceServiceRequest().SerializeToString(),
                         headers=protobuf, timeout=30)
    assert metrics.status_code == 404 and rpc_status(metrics).startswith("not_found: no such route")
    unnamed = httpx.post(f"{endpoint}/v1/traces", params={"log": "team a"}, content=b"", headers=protobuf, timeout=30)
    assert unnamed.status_code == 400 and "'team a' is not a log name" in rpc_status(unnamed)
    as_json = httpx.post(f"{endpoint}/v1/traces", content=b"{", headers={"Content-Type": "application/json"}, timeout=30)
    assert as_json.status_code == 400 and as_json.json()["error"]["code"] == "bad_query"
    small = make_settings(api_max_body_bytes=1024)
    with TestClient(create_app(small, small.bootstrap_servers or "", planner=object()),
                    base_url="http://localhost") as client:
        large = client.post("/v1/traces", content=b"\x0a" * 1025, headers=protobuf)
    assert large.status_code == 413 and "larger than 1024 bytes" in rpc_status(large)


def test_a_gzip_body_sent_without_its_header_is_named_so(served) -> None:
    """A gzip body whose Content-Encoding a proxy dropped (or an exporter forgot) was read as it
    was labelled: "Wire format was corrupt" or "not valid JSON", never naming the header to add."""
    import gzip

    import httpx
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    _settings, _planner, endpoint = served
    for route, media_type, body in (
            ("/v1/traces", "application/x-protobuf", ExportTraceServiceRequest().SerializeToString() + b"\x0a\x00"),
            ("/v1/logs", "application/json", b'{"resourceLogs": []}'),
            ("/v1/events", "application/json", b'{"events": []}')):
        sent = httpx.post(f"{endpoint}{route}", content=gzip.compress(body), headers={"Content-Type": media_type},
                          timeout=30)
        message = rpc_status(sent) if media_type == "application/x-protobuf" else sent.json()["error"]["message"]
        assert sent.status_code == 400 and "gzip-compressed but was sent without Content-Encoding: gzip" in message
        labelled = httpx.post(f"{endpoint}{route}", content=gzip.compress(body), timeout=30,
                              headers={"Content-Type": media_type, "Content-Encoding": "gzip"})
        assert labelled.status_code == 200, labelled.text


def send_logged_chat(endpoint: str, *, logs_first: bool, question: str) -> None:
    """A chat call as OpenAI's instrumentation (opentelemetry-instrumentation-openai-v2) sends
    it: the span holds model and tokens but no content; the messages are log records emitted in
    the span's context (gen_ai.system/user.message, gen_ai.choice), exported by the logs
    pipeline, before or after the span."""
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": "limerick-bot"})
    tracing, logging = TracerProvider(resource=resource), LoggerProvider(resource=resource)
    tracing.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    logging.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")))
    logger, system = logging.get_logger("opentelemetry.instrumentation.openai_v2"), {"gen_ai.system": "openai"}
    with tracing.get_tracer("usl-test").start_as_current_span("chat gpt-4o", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 24, "gen_ai.usage.output_tokens": 41}):
        for name, body in (
                ("gen_ai.system.message", {"content": "You are a helpful assistant."}),
                ("gen_ai.user.message", {"content": question}),
                ("gen_ai.choice", {"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "tool_calls": [{"id": "call_9", "type": "function", "function": {
                        "name": "rhyme_lookup", "arguments": '{"word": "handler"}'}}]}}),
                ("gen_ai.tool.message", {"content": "candler, dandler, handler", "id": "call_9"}),
                ("gen_ai.choice", {"index": 1, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": "A logger who wrote to stderr found levels blurrier"}})):
            logger.emit(LogRecord(event_name=name, attributes=system, body=body))
    first, second = (logging, tracing) if logs_first else (tracing, logging)
    first.force_flush()
    second.force_flush()
    tracing.shutdown()
    logging.shutdown()


@pytest.mark.parametrize("logs_first", [True, False], ids=["logs-first", "span-first"])
def test_log_records_bring_the_messages_their_span_lacks(served, logs_first: bool) -> None:
    """Found as a new user: OpenAI's OpenTelemetry instrumentation puts a call's messages in log
    records (POST /v1/logs), not on the span; there was no /v1/logs, so such an agent's
    sessions held turns with nothing to search. Exporters send spans and logs separately, in
    either order: the turn holds the messages once, its tokens once, in one session."""
    settings, planner, endpoint = served
    question = "Please write me a limerick about Python logging handlers"
    send_logged_chat(endpoint, logs_first=logs_first, question=question)
    events = l1_events(settings)
    assert max(Counter(e["eventId"] for e in events).values()) == 1
    assert len({e["sessionId"] for e in events}) == 1 and len({e["turnId"] for e in events if e.get("turnId")}) == 1
    messages = [(e["role"], e["fields"].get("text"), e["fields"].get("toolCalls")) for e in events if e["type"] == "message"]
    assert messages == [
        ("system", "You are a helpful assistant.", None), ("user", question, None),
        ("tool", "candler, dandler, handler", None),
        ("assistant", "", [{"id": "call_9", "name": "rhyme_lookup", "arguments": {"word": "handler"}}]),
        ("assistant", "A logger who wrote to stderr found levels blurrier", None)]
    usages = [e["fields"]["usage"] for e in events if "usage" in e.get("fields", {})]
    assert usages == [{"inputTokens": 24, "outputTokens": 41}]
    # Each source closes the turn it opened or reopened: the span's end and the records' own.
    assert Counter(e["type"] for e in events)["turn.ended"] == 2
    answer = planner.search({"query": "limerick Python logging", "freshness": "latest"}, READER_PRINCIPAL)
    assert answer["results"][0]["sessionId"] == events[0]["sessionId"]
    assert "limerick about Python logging" in answer["results"][0]["text"]
    # The answer that only called a tool renders the call (chunker 1.2): its tool and arguments are found.
    called = planner.search({"query": "rhyme_lookup", "freshness": "latest", "mode": "text"}, READER_PRINCIPAL)
    assert any("[tool.call rhyme_lookup] word=handler" in hit["text"] for hit in called["results"])


def test_a_message_sent_as_bytes_is_found_by_its_words(served) -> None:
    """An SDK sends a byte array as an OTLP bytes value (the Python SDK's log body or a value in
    it, a JavaScript Uint8Array, a Go []byte): its base64 was taken for the text, so the
    message read "w5xiZXI..." and no search found its words. UTF-8 bytes are read as their text."""
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider

    settings, planner, endpoint = served
    question = "Über die Brücke: wie hoch ist der Pegel der Isar heute? 🌊"
    logging = LoggerProvider()
    logging.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")))
    logger = logging.get_logger("opentelemetry.instrumentation.openai_v2")
    with TracerProvider().get_tracer("usl-test").start_as_current_span("chat"):
        logger.emit(LogRecord(event_name="gen_ai.user.message", body={"content": question.encode()}))
        logger.emit(LogRecord(event_name="gen_ai.choice", body={
            "index": 0, "message": {"role": "assistant", "content": b"Der Pegel liegt bei 1,2 m."}}))
    logging.shutdown()
    texts = [(e["role"], e["fields"]["text"]) for e in l1_events(settings) if e["type"] == "message"]
    assert texts == [("user", question), ("assistant", "Der Pegel liegt bei 1,2 m.")]
    answer = planner.search({"query": "Pegel der Isar", "freshness": "latest", "mode": "text"}, READER_PRINCIPAL)
    assert answer["results"] and question in answer["results"][0]["text"]


def test_otlp_logs_json_and_what_is_refused(served):
    """OTLP JSON log records: an application's own records are not GenAI (skipped, as spans
    without gen_ai.operation.name are); a GenAI record outside any span is refused by name, as
    rejectedLogRecords and a dead letter; a malformed body is a 400 naming the place."""
    import httpx

    settings, _planner, endpoint = served
    trace, span = "6b8efff798038103d269b633813fc60d", "fee19b7ec3c1b175"

    def record(name: str, body: Any, **extra: Any) -> dict[str, Any]:
        return {"timeUnixNano": "1764579600000000000", "eventName": name, "traceId": trace, "spanId": span,
                "body": body, **extra}

    details = {"timeUnixNano": "1764579601000000000", "traceId": trace, "spanId": span, "attributes": [
        {"key": "event.name", "value": {"stringValue": "gen_ai.client.inference.operation.details"}},
        {"key": "gen_ai.operation.name", "value": {"stringValue": "generate_content"}},
        {"key": "gen_ai.conversation.id", "value": {"stringValue": "conv-logs-1"}},
        {"key": "gen_ai.output.messages", "value": {"stringValue": orjson.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "the quarterly ledger balances to the cent"}]}]).decode()}}]}
    body = {"resourceLogs": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "ledger-agent"}}]}, "scopeLogs": [{"logRecords": [
            {"timeUnixNano": "1764579600000000000", "body": {"stringValue": "GET /health 200"}},
            record("gen_ai.user.message", {"kvlistValue": {"values": [
                {"key": "content", "value": {"stringValue": "does the ledger balance?"}}]}}),
            details,
            record("gen_ai.user.message", {"stringValue": "no span here"}, traceId="", spanId="")]}]}]}
    def counted() -> tuple[float, float]:
        """The API's ingest figures on /metrics: records appended, records refused."""
        text = httpx.get(f"{endpoint}/metrics", timeout=30).text
        values = [sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith(family) and 'stage="ingest"' in line)
                  for family in ("usl_records_total{", "usl_dead_letters_total{")]
        return values[0], values[1]

    before = counted()
    for _ in range(2):
        response = httpx.post(f"{endpoint}/v1/logs", content=orjson.dumps(body),
                              headers={"Content-Type": "application/json"}, timeout=30)
        assert response.status_code == 200, response.text
        refused = response.json()["partialSuccess"]
        assert refused["rejectedLogRecords"] == 1 and "needs the traceId and spanId" in refused["errorMessage"]
    # The receivers count what they append and refuse, as usl ingest does (the retry appends
    # nothing, and dead-letters its refused record no second time).
    after = counted()
    assert (after[0] - before[0], after[1] - before[1]) == (5, 1)
    events = l1_events(settings)
    assert {e["sessionId"] for e in events} == {"conv-logs-1"}
    assert [(e["type"], e.get("role"), e["fields"].get("text")) for e in events if e["type"] != "session.started"] == [
        ("turn.started", "user", None), ("message", "user", "does the ledger balance?"),
        ("message", "assistant", "the quarterly ledger balances to the cent"), ("turn.ended", None, None)]
    from streams.l1 import read_dead_letters

    letters = read_dead_letters(settings.bootstrap_servers or "", settings, log_id="default")
    assert len(letters) == 1 and all(letter["record"].startswith("POST /v1/logs logRecord[3]") for letter in letters)
    # A request of the other signal, or of metrics, is refused by name, not read as an empty one.
    for route, sent, says in (("/v1/traces", body, "it holds resourceLogs, not resourceSpans: post it to /v1/logs"),
                              ("/v1/logs", {"resourceSpans": []}, "post it to /v1/traces"),
                              ("/v1/logs", {"resourceMetrics": []}, "metrics are not received here")):
        crossed = httpx.post(f"{endpoint}{route}", content=orjson.dumps(sent),
                             headers={"Content-Type": "application/json"}, timeout=30)
        assert crossed.status_code == 400 and says in crossed.json()["error"]["message"], crossed.text
    shape = httpx.post(f"{endpoint}/v1/logs", content=b'{"resourceLogs": [{"scopeLogs": [{"logRecords": 5}]}]}',
                       headers={"Content-Type": "application/json"}, timeout=30)
    assert shape.status_code == 400
    assert "resourceLogs[0].scopeLogs[0].logRecords must be a list, not a number" in shape.json()["error"]["message"]
    garbage = httpx.post(f"{endpoint}/v1/logs", content=b"\x0a\xff", headers={"Content-Type": "application/x-protobuf"})
    assert garbage.status_code == 400 and "ExportLogsServiceRequest" in rpc_status(garbage)
    plain = httpx.post(f"{endpoint}/v1/logs", content=b"{}", headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415 and "application/x-protobuf" in plain.json()["error"]["message"]


CLAUDE_SESSION = "5e0f6c1a-2b3c-4d5e-8f70-112233445566"


def send_claude_code_events(endpoint: str) -> None:
    """One exchange of a Claude Code session as its telemetry exports it (CLAUDE_CODE_ENABLE_TELEMETRY,
    OTEL_LOGS_EXPORTER=otlp, http/protobuf): log records of scope com.anthropic.claude_code.events,
    body ``claude_code.<name>``, ``event.name`` the bare name, ``session.id`` and ``prompt.id`` on
    each, no trace or span; the batch exporter splits the exchange over two exports."""
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    logging = LoggerProvider(resource=Resource.create({"service.name": "claude-code", "service.version": "2.1.30"}))
    logging.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")))
    logger = logging.get_logger("com.anthropic.claude_code.events", "2.1.30")
    common = {"session.id": CLAUDE_SESSION, "prompt.id": "b1d4c6a0-prompt", "terminal.type": "tmux"}
    records = [
        ("user_prompt", {"prompt": "why does the quokka migration deadlock?", "prompt_length": "39"}),
        ("api_request", {"model": "claude-sonnet-4-5-20250929", "input_tokens": "9", "output_tokens": "215",
                         "cache_read_tokens": "14016", "cache_creation_tokens": "2087", "cost_usd": "0.0114",
                         "duration_ms": "5230"}),
        ("tool_decision", {"tool_name": "Bash", "decision": "accept", "source": "config",
                           "tool_use_id": "toolu_01QK"}),
        ("tool_result", {"tool_name": "Bash", "tool_use_id": "toolu_01QK", "success": "false", "duration_ms": "911",
                         "error": "Exit code 1: lock wait timeout exceeded on table quokka_jobs",
                         "tool_parameters": '{"bash_command": "alembic", "full_command": "alembic upgrade head"}'}),
        ("api_error", {"model": "claude-sonnet-4-5-20250929", "error": "Overloaded", "status_code": "529",
                       "attempt": "1"}),
    ]
    for sequence, (name, extra) in enumerate(records):
        logger.emit(LogRecord(timestamp=1_764_579_600_000_000_000 + sequence * 1_000_000_000,
                              body=f"claude_code.{name}", attributes={
                                  "event.name": name, "event.sequence": sequence, **common, **extra}))
        if sequence == 1:
            logging.force_flush()  # the rest of the exchange comes in the next export
    logging.force_flush()
    logging.shutdown()


def test_claude_code_telemetry_events_are_a_searchable_session(served):
    """Found as a new user: Claude Code's own OpenTelemetry events (claude_code.user_prompt,
    tool_result, api_request, ...) name no gen_ai.* event, no trace and no span, and /v1/logs
    ignored them as an application's logs: a 200 with nothing appended. They are the session
    their session.id names, one turn per prompt.id across export batches, with the prompt, the
    tool call and its failure searchable, the tokens counted, and a retry appending nothing."""
    import httpx

    settings, planner, endpoint = served
    send_claude_code_events(endpoint)
    events = l1_events(settings)
    assert {e["sessionId"] for e in events} == {CLAUDE_SESSION}
    assert len({e["turnId"] for e in events if e.get("turnId")}) == 1
    kinds = [e["type"] for e in events]
    assert kinds == ["session.started", "turn.started", "message", "x.claude-code.api_request", "turn.ended",
                     "x.claude-code.tool_decision", "tool.call", "tool.result", "error", "turn.ended"]
    by_type = {e["type"]: e for e in events}
    assert by_type["message"]["fields"]["text"] == "why does the quokka migration deadlock?"
    assert by_type["x.claude-code.api_request"]["fields"]["usage"] == {
        "inputTokens": 9, "outputTokens": 215, "cacheReadInputTokens": 14016, "cacheCreationInputTokens": 2087}
    assert by_type["x.claude-code.api_request"]["fields"]["costUsd"] == 0.0114
    call, result = by_type["tool.call"], by_type["tool.result"]
    assert (call["fields"]["toolName"], call["fields"]["toolCallId"], call["fields"]["input"]) == (
        "Bash", "toolu_01QK", {"bash_command": "alembic", "full_command": "alembic upgrade head"})
    assert (result["fields"]["status"], result["parentEventId"]) == ("error", call["eventId"])
    assert by_type["error"]["fields"]["message"] == "Overloaded"
    answer = planner.search({"query": "quokka deadlock", "freshness": "latest", "mode": "text"}, READER_PRINCIPAL)
    assert answer["results"] and answer["results"][0]["sessionId"] == CLAUDE_SESSION
    failed = planner.search({"query": "lock wait timeout", "freshness": "latest", "mode": "text"}, READER_PRINCIPAL)
    assert any("[tool.result Bash error]" in hit["text"] for hit in failed["results"])
    # An exporter's retry (here the whole exchange again, as JSON) appends nothing.
    send_claude_code_events(endpoint)
    assert len(l1_events(settings)) == len(events)
    # A record without session.id has no session to go to: refused by name, not guessed.
    anonymous = {"resourceLogs": [{"scopeLogs": [{"scope": {"name": "com.anthropic.claude_code.events"}, "logRecords": [
        {"timeUnixNano": "1764579700000000000", "body": {"stringValue": "claude_code.user_prompt"},
         "attributes": [{"key": "event.name", "value": {"stringValue": "user_prompt"}}]}]}]}]}
    response = httpx.post(f"{endpoint}/v1/logs", content=orjson.dumps(anonymous),
                          headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 200
    refused = response.json()["partialSuccess"]
    assert refused["rejectedLogRecords"] == 1 and "needs its session.id" in refused["errorMessage"]
    assert len(l1_events(settings)) == len(events)


@pytest.mark.parametrize("signal", ["traces", "logs"])
def test_an_export_is_decoded_and_read_off_the_event_loop(served, monkeypatch, signal: str) -> None:
    """Decoding and reading an export ran on the event loop: a large one held every other
    request of the API server until it was read. Here the decoding waits for a /healthz asked
    meanwhile, which is answered only if the loop is free."""
    import asyncio

    import httpx

    from planner import otlp

    _settings, _planner, endpoint = served
    answered = threading.Event()
    on_loop: list[str] = []

    def spied(name: str) -> Any:
        function = getattr(otlp, name)

        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
                on_loop.append(name)
            except RuntimeError:
                pass
            if name == "decode_request":
                answered.wait(10)
            return function(*args, **kwargs)
        return run

    for name in ("decode_request", "claude_code_events", "log_spans", "span_events"):
        monkeypatch.setattr(otlp, name, spied(name))

    def meanwhile() -> None:
        time.sleep(0.3)
        if httpx.get(f"{endpoint}/healthz", timeout=30).status_code == 200:
            answered.set()

    asker = threading.Thread(target=meanwhile)
    asker.start()
    started = time.monotonic()
    levels = ("resourceSpans", "scopeSpans", "spans") if signal == "traces" else (
        "resourceLogs", "scopeLogs", "logRecords")
    answer = httpx.post(f"{endpoint}/v1/{signal}", content=orjson.dumps({levels[0]: [{levels[1]: [{levels[2]: []}]}]}),
                        headers={"Content-Type": "application/json"}, timeout=30)
    asker.join(30)
    assert answer.status_code == 200 and answer.json() == {}
    assert answered.is_set() and time.monotonic() - started < 9, "/healthz waited for the export"
    assert on_loop == []
