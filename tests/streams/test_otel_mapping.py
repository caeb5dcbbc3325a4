"""The GenAI span mapping never raises, whatever the OTLP-shaped input, and every event it
accepts is a valid ASP event of the span's conversation."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from streams.asp import validate_event
from streams.importers.base import Accepted
from streams.importers.otel import span_events
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
