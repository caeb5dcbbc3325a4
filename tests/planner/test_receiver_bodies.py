"""The receivers' pure checks: Content-Encoding decoding with its size cap, what a 400 says about
a body that is not JSON, the fields each event type needs, and cutting an oversized event."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import orjson
import pytest

from planner.acl import Principal
from planner.api import PayloadTooLarge, UnsupportedMediaType
from planner.bodies import decode_body, json_error
from planner.event_fields import fields_problem
from planner.exceptions import QueryError
from planner.otlp import decode_request
from planner.receivers import check_event
from streams.asp import canonical_bytes

BODY = b'{"events": [{"eventId": "e1"}]}'


def _gzip(data: bytes) -> bytes:
    # mtime=0: the header otherwise holds the current second, and the parameters' ids with it, so
    # two xdist workers collecting a second apart disagreed on the test names (CI refused).
    return gzip.compress(data, mtime=0)


@pytest.mark.parametrize(("header", "encoded"), [
    ("gzip", _gzip(BODY)), ("x-gzip", _gzip(BODY)), ("GZIP", _gzip(BODY)),
    ("deflate", zlib.compress(BODY)), ("deflate", zlib.compress(BODY)[2:-4]),  # zlib, and raw deflate
    ("identity", BODY), ("gzip, identity", _gzip(BODY)),
    ("deflate, gzip", _gzip(zlib.compress(BODY))),  # applied in order, undone last first
    ("gzip", _gzip(BODY[:10]) + _gzip(BODY[10:])),  # two gzip members are one stream
], ids=["gzip", "x-gzip", "GZIP", "deflate", "raw-deflate", "identity", "gzip-identity", "deflate-gzip",
        "two-gzip-members"])
def test_bodies_are_decoded_as_content_encoding_says(header: str, encoded: bytes) -> None:
    assert decode_body(encoded, header, 1 << 20) == BODY


def test_undecodable_unknown_and_inflating_bodies_are_refused_by_name() -> None:
    for header, encoded in (("gzip", BODY), ("gzip", gzip.compress(BODY)[:-6]), ("deflate", b"\x00junk")):
        with pytest.raises(QueryError, match=f"not valid {header} data"):
            decode_body(encoded, header, 1 << 20)
    for header in ("br", "zstd", "gzip, compress"):
        with pytest.raises(UnsupportedMediaType, match="not supported"):
            decode_body(BODY, header, 1 << 20)
    # The cap holds on the decoded size, whatever the compressed size: 10 MiB of zeros is ~10 KiB.
    bomb = gzip.compress(bytes(10 << 20))
    assert len(bomb) < 64 << 10
    with pytest.raises(PayloadTooLarge, match="decompresses to more than 1048576 bytes"):
        decode_body(bomb, "gzip", 1 << 20)
    assert decode_body(gzip.compress(bytes(1 << 20)), "gzip", 1 << 20) == bytes(1 << 20)  # the limit itself passes


@pytest.mark.parametrize(("raw", "says"), [
    (b'{"events": [{"eventId": "\\ud800"}]}', "lone UTF-16 surrogate escape"),
    (b"[" * 5000 + b"]" * 5000, "nested more than 1024 levels deep"),
    (b'{"events": [1,]}', "trailing comma is not allowed at line 1, column 14"),
    ('{"t": "é"}'.encode("latin-1"), "is not UTF-8 text"),
])
def test_a_body_that_is_not_json_says_what_is_wrong(raw: bytes, says: str) -> None:
    with pytest.raises(orjson.JSONDecodeError) as caught:
        orjson.loads(raw)
    error = json_error(caught.value)
    assert says in error.message and error.status == 400


@pytest.mark.parametrize(("body", "says"), [
    ({"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]}, "resourceSpans[0].scopeSpans[0].spans must be a list, not a number"),
    ({"resourceSpans": {}}, "resourceSpans must be a list, not an object"),
    ({"resourceSpans": [{"scopeSpans": "x"}]}, "resourceSpans[0].scopeSpans must be a list, not a string"),
    ({"resourceSpans": [{"scopeSpans": [{"spans": [None]}]}]}, "spans[0] must be an object, not null"),
    ([], "it must be a JSON object, not an array"),
])
def test_otlp_json_of_another_shape_is_a_400_naming_where(body: Any, says: str) -> None:
    with pytest.raises(QueryError, match="not an OTLP ExportTraceServiceRequest") as caught:
        decode_request(orjson.dumps(body), "application/json")
    assert says in caught.value.message
    assert decode_request(b'{"resourceSpans": [{"scopeSpans": [{"spans": null}]}]}', "application/json")


def test_otlp_json_with_a_lone_surrogate_is_read_with_the_replacement_character() -> None:
    """A JavaScript SDK cuts an attribute by UTF-16 units and JSON.stringify writes the half emoji
    as a lone surrogate escape: the whole export was a 400, which an exporter does not retry. A
    body that is cut off as well is still a 400, naming where."""
    span = (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": "gen_ai.tool.call.result",'
            b' "value": {"stringValue": "rows \\ud83d"}}, {"key": "k\\udc00", "value": {}}]}]}]}]}')
    attributes = decode_request(span, "application/json")["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    assert [attribute["key"] for attribute in attributes] == ["gen_ai.tool.call.result", "k\ufffd"]
    assert attributes[0]["value"]["stringValue"] == "rows \ufffd"
    with pytest.raises(QueryError, match="the OTLP JSON body is not valid JSON: unexpected end of data at line 1"):
        decode_request(span[:span.index(b"rows") + 20], "application/json")



def test_protobuf_with_strings_that_are_not_utf8_is_read_and_a_cut_one_says_why() -> None:
    """protobufjs (the JavaScript SDK's exporter) encodes the half emoji an attribute cut to its
    length limit leaves as the three bytes of a lone surrogate; protobuf's parser refused the
    whole export, a bare 400 'not an OTLP ExportTraceServiceRequest (protobuf)'. The string is now
    read as the JSON path reads it (U+FFFD); a body that does not parse says why."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    message = ExportTraceServiceRequest()
    span = message.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.name = bytes.fromhex("5b8efff798038103d269b633813fc60c"), "execute_tool"
    for key, value in (("gen_ai.tool.call.result", "rows XYZ"), ("latin-1", "caf\u00e9")):
        attribute = span.attributes.add()
        attribute.key, attribute.value.string_value = key, value
    span.attributes.add().key = "empty"
    span.attributes[2].value.kvlist_value.SetInParent()
    body = message.SerializeToString().replace(b"XYZ", b"\xed\xa0\xbd").replace(b"caf\xc3\xa9", b"caf\xe9\xe9")
    read = decode_request(body, "application/x-protobuf")["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert read["traceId"] == "5b8efff798038103d269b633813fc60c" and read["name"] == "execute_tool"
    assert read["attributes"] == [
        {"key": "gen_ai.tool.call.result", "value": {"stringValue": "rows \ufffd"}},
        {"key": "latin-1", "value": {"stringValue": "caf\ufffd\ufffd"}},
        {"key": "empty", "value": {"kvlistValue": {}}}]
    for sent in (message.SerializeToString()[:-3], body[:-3]):
        with pytest.raises(QueryError) as caught:
            decode_request(sent, "application/x-protobuf")
        assert caught.value.message == (
            "the body is not an OTLP ExportTraceServiceRequest (protobuf): Wire format was corrupt")


def _event(event_type: str, **fields: Any) -> dict[str, Any]:
    return {"eventId": "e", "sessionId": "s", "type": event_type, "time": "2026-01-01T00:00:00Z", "fields": fields}


@pytest.mark.parametrize(("event", "says"), [
    (_event("message", text=12345), "fields.text of a message must be a string, not a number"),
    (_event("message", text=["a", "b"]), "fields.text of a message must be a string, not an array"),
    (_event("message"), "a message needs fields.text"),
    (_event("tool.call", toolName=7), "fields.toolName of a tool.call must be a non-empty string, not a number"),
    (_event("tool.call", toolName="", toolCallId="c", input={}), "non-empty string, not an empty string"),
    (_event("tool.call", toolName="grep", input={}), "a tool.call needs fields.toolCallId"),
    (_event("tool.call", toolName="grep", toolCallId="c"), "a tool.call needs fields.input"),
    (_event("tool.call", toolName="grep", toolCallId="c", input="ls"), "must be an object of its arguments, not a string"),
    (_event("tool.result", toolName="grep"), "a tool.result needs fields.toolCallId"),
    (_event("tool.result", toolCallId="c", output={"rows": 1}), "fields.output of a tool.result must be a string, not an object"),
    (_event("tool.result", toolCallId="c", status=False), "fields.status of a tool.result must be a string, not a boolean"),
    (_event("error", code=3), "an error needs fields.message"),
])
def test_an_event_whose_fields_are_not_what_its_type_needs_is_refused(event: dict[str, Any], says: str) -> None:
    assert says in (fields_problem(event) or "")
    checked, reason, _cut = check_event(event, Principal(tenant="acme", user="a"), "default")
    assert checked is None and says in reason


@pytest.mark.parametrize("event", [
    _event("message", text=""), _event("message", content="the renderer reads content too"),
    _event("tool.call", name="grep", toolCallId="c", arguments={"q": 1}),
    _event("tool.result", toolCallId=""),  # Codex: an output that names no call
    _event("tool.result", toolCallId="c", status="ok", output="done"),  # Claude Code: no toolName yet
    _event("error", text="boom"), _event("turn.ended", usage="anything"), _event("x.custom", text=5),
])
def test_the_variants_importers_write_pass(event: dict[str, Any]) -> None:
    assert fields_problem(event) is None
    assert check_event(event, Principal(tenant="acme", user="a"), "default")[0] is not None


def test_an_oversized_event_is_cut_with_room_for_what_the_receiver_adds() -> None:
    """As ``usl ingest`` cuts one (fit_event), below the limit by the bytes of a new session's
    acl and a frame's turnId, so the appended event fits whatever the receiver adds."""
    limit = 100_000
    event = _event("tool.result", toolCallId="c", toolName="dump", status="ok", output="row\n" * 60_000)
    checked, reason, cut = check_event(event, Principal(tenant="acme", user="a"), "default", limit)
    assert checked is not None and reason == "" and cut > 0
    assert checked["fields"]["_truncated"]["originalBytes"] > limit
    grown = {**checked, "acl": {"tenant": "acme", "read": ["*"]}, "turnId": "turn_" + "0" * 32}
    assert len(canonical_bytes(grown)) <= limit
    assert checked["fields"]["output"].startswith("row\nrow\n")
    many = _event("message", text="x", **{f"k{i}": "v" for i in range(20_000)})
    refused, reason, _ = check_event(many, Principal(tenant="acme", user="a"), "default", limit)
    assert refused is None and "cannot make it fit" in reason
