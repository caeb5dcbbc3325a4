"""The HTTP API against generated requests: schemathesis over the served OpenAPI document, and
random JSON bodies and query strings on the query routes.

A real planner over a real broker and a small ingested corpus answers in-process (the ASGI
app, no socket). Whatever the request, the answer is never a 5xx, conforms to the OpenAPI
document, and an error always has the one JSON error shape (``planner.exceptions.error_body``).
The app runs in the default mode: no API keys, trusted principal header.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from schemathesis import GenerationMode, checks
from starlette.applications import Starlette
from starlette.testclient import TestClient

from planner.api import PRINCIPAL_HEADER, create_app, openapi
from planner.engine import Planner
from sinks.watermarks import WatermarkFollower
from tests.fuzz.profile import fuzz, json_values
from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

pytestmark = pytest.mark.kafka

ALICE = "tenant:acme/user:alice/groups:eng/scopes:toolresults"
QUERY_ROUTES = ("/v1/search", "/v1/sql", "/v1/sessionql")


@pytest.fixture(scope="module")
def app(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Starlette]:
    # schemathesis calls the ASGI app as http://testserver: a configured name, as a proxy's is.
    settings = make_test_settings(Path(tmp_path_factory.mktemp("api-fuzz")), kafka_bootstrap,
                                  api_max_body_bytes=65536, api_allowed_hosts="testserver")
    builder = IndexBuilder(settings, kafka_bootstrap, "default")
    builder.append(interleaved("default")[0])
    builder.commit("structured", "text", "vector", "toolresults", "analytics")
    builder.close()
    follower = WatermarkFollower(kafka_bootstrap, settings).start(timeout_seconds=30)
    planner = Planner(settings, kafka_bootstrap, follower=follower)
    try:
        yield create_app(settings, kafka_bootstrap, planner=planner)
    finally:
        planner.close()
        follower.stop()


@pytest.fixture(scope="module")
def client(app: Starlette) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False, base_url="http://localhost") as test_client:
        yield test_client


@pytest.fixture(scope="module")
def api_schema(app: Starlette) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def assert_error_shape(response: Any) -> None:
    """The one JSON error shape; ``response`` is httpx's or schemathesis' (list-valued headers)."""
    content_type = response.headers.get("content-type")
    if isinstance(content_type, list):
        content_type = content_type[0]
    text = response.content.decode("utf-8", "replace")
    assert content_type.startswith("application/json"), text
    body = orjson.loads(response.content)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"code", "message", "status"} <= set(error) <= {"code", "message", "status", "hint"}
    assert error["status"] == response.status_code
    assert isinstance(error["code"], str) and isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in text


def check_answer(response: Any) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert_error_shape(response)
    else:
        assert isinstance(response.json(), dict)


# schemathesis' own pytest integration does not run under pytest 9 (it reads a removed
# private attribute), so each operation's strategy is driven by a plain hypothesis test.
OPERATIONS = [(path, method.upper(), "parameters" in spec or "requestBody" in spec)
              for path, methods in openapi()["paths"].items() for method, spec in methods.items()]
CASES = [
    pytest.param(path, method, mode, id=f"{method} {path} {mode.value}")
    for path, method, has_input in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if has_input or mode is GenerationMode.POSITIVE  # nothing to make invalid otherwise
]
# positive_data_acceptance is left out on purpose: a body can match the schema and still be
# refused with a 400 (SQL that does not parse, an unknown principal), as it should be.
CHECKS = [checks.not_a_server_error, checks.status_code_conformance,
          checks.content_type_conformance, checks.response_headers_conformance,
          checks.response_schema_conformance, checks.negative_data_rejection]


@pytest.mark.parametrize(("path", "method", "mode"), CASES)
def test_every_operation_conforms_to_the_openapi_document(
    api_schema: Any, path: str, method: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]

    # /v1/status reads the broker on every uncached call: a few examples cover its one parameter.
    @fuzz(4 if path == "/v1/status" else 12)
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        if isinstance(case.body, dict) and str(case.body.get("freshness", "")).startswith("wait:"):
            # A valid wait blocks for its whole length here (the corpus leaves a turn open,
            # which holds the watermarks back); a short one exercises the same path.
            case.body["freshness"] = "wait:0.2"
        response = case.call_and_validate(checks=CHECKS)
        if response.status_code >= 400:
            assert_error_shape(response)

    run()


ROUTE_KEYS = {
    "/v1/search": ["query", "log", "freshness", "k", "explain", "cursor", "mode", "filters",
                   "toolResults", "sessionId", "timeFrom", "timeTo", "role"],
    "/v1/sql": ["query", "asOfSeq", "log"],
    "/v1/sessionql": ["query", "asOfSeq", "log", "maxRows"],
}
GOOD_QUERIES = {
    "/v1/search": ["deploy", "deploy step", "w1"],
    "/v1/sql": ["SELECT count(*) FROM events", "FROM sessions", "SELECT 1"],
    "/v1/sessionql": ["FROM events LIMIT 3", "FROM tool_calls GROUP BY toolName",
                      'LINEAGE ANCESTORS OF "s-all"'],
}


@st.composite
def bodies(draw: st.DrawFn, route: str) -> Any:
    """Mostly objects built from the route's own fields (so validation runs deep), else any JSON."""
    if draw(st.integers(0, 4)) == 0:
        return draw(json_values())
    keys = ROUTE_KEYS[route]
    body = draw(st.dictionaries(st.sampled_from([*keys, "extra"]), json_values(max_leaves=6),
                                max_size=4))
    if draw(st.booleans()):
        body["query"] = draw(st.sampled_from(GOOD_QUERIES[route]) | st.text(max_size=40))
    return body


RAW_BODIES = [b"", b"{", b"\xff\xfe", b"[" * 5000, b"null", b"0", b'{"query": "x", "k": 1e999}',
              b'{"query": "FROM events", "asOfSeq": 18446744073709551616}',
              b'{"query": "FROM events", "maxRows": 99999999999999999999}',
              b'{"query": "\\ud800"}', b'{"query": "\\u0000"}', b'{"query": "x", "log": "\\u0000"}']


@pytest.mark.parametrize("route", QUERY_ROUTES)
@pytest.mark.parametrize("raw", RAW_BODIES, ids=range(len(RAW_BODIES)))
def test_malformed_raw_bodies(client: TestClient, route: str, raw: bytes) -> None:
    check_answer(client.post(route, content=raw, headers={"Content-Type": "application/json"}))


# Found by the outside review (issue 15): each must be refused with its status, not answered.
JSON = {"Content-Type": "application/json"}
MALFORMED_REQUESTS = [
    # DNS rebinding: a keyless API answers only to loopback host names.
    ("GET", "/v1/status", {"Host": "evil.example"}, None, 400),
    ("POST", "/v1/search", {**JSON, "Host": "rebind.attacker.test:8765"}, b'{"query": "x"}', 400),
    ("POST", "/v1/sql", {**JSON, "Host": "127.0.0.1.nip.io"}, b'{"query": "SELECT 1"}', 400),
    # Cross-site "simple" posts: text/plain, forms and untyped bodies.
    ("POST", "/v1/search", {"Content-Type": "text/plain"}, b'{"query": "x"}', 415),
    ("POST", "/v1/sql", {"Content-Type": "application/x-www-form-urlencoded"}, b"query=SELECT+1", 415),
    ("POST", "/v1/sessionql", {}, b'{"query": "FROM events"}', 415),
    # Bodies over USL_API_MAX_BODY_BYTES, declared or streamed.
    ("POST", "/v1/search", JSON, b'{"query": "' + b"x" * 70_000 + b'"}', 413),
    # Non-ASCII digits where the OpenAPI pattern says [0-9].
    ("POST", "/v1/search", JSON, '{"query": "x", "freshness": "wait:٥"}'.encode(), 400),
    ("POST", "/v1/search", JSON, '{"query": "x", "freshness": "wait:１"}'.encode(), 400),
    # Log names that are not log names (each used to take a slot of the status cache).
    ("GET", "/v1/status?log=../../etc", {}, None, 400),
    ("GET", "/v1/status?log=%00", {}, None, 400),
    ("GET", "/v1/status?log=" + "x" * 300, {}, None, 400),
]


@pytest.mark.parametrize(("method", "path", "headers", "content", "status"), MALFORMED_REQUESTS,
                         ids=range(len(MALFORMED_REQUESTS)))
def test_malformed_requests_are_refused_with_their_status(
        client: TestClient, method: str, path: str, headers: dict[str, str], content: bytes | None,
        status: int) -> None:
    response = client.request(method, path, headers=headers, content=content)
    assert response.status_code == status, response.text
    assert_error_shape(response)


@fuzz(30)
@given(size=st.integers(0, 200_000), chunk=st.integers(1, 70_000))
def test_streamed_bodies_over_the_limit_are_413(client: TestClient, size: int, chunk: int) -> None:
    """Without Content-Length the body is counted as it arrives; the limit here is 64 KiB."""
    body = b'{"query": "' + b"x" * size + b'"}'

    def pieces() -> Any:
        for start in range(0, len(body), chunk):
            yield body[start:start + chunk]

    response = client.post("/v1/search", content=pieces(), headers=JSON)
    if len(body) > 65536:
        assert response.status_code == 413, response.text
    else:
        assert response.status_code != 413, response.text
    check_answer(response)


@pytest.mark.parametrize("route", QUERY_ROUTES)
def test_an_unknown_log_is_404_on_every_query_route(client: TestClient, route: str) -> None:
    """Found by schemathesis: /v1/sql and /v1/sessionql answered 503 ("wait for the index")."""
    query = GOOD_QUERIES[route][0]
    response = client.post(route, json={"query": query, "log": "no-such-log"})
    assert response.status_code == 404, response.text
    assert_error_shape(response)
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("route", QUERY_ROUTES)
@fuzz(30)
@given(data=st.data())
def test_random_bodies_get_an_answer_or_the_error_shape(
    client: TestClient, route: str, data: st.DataObject
) -> None:
    body = data.draw(bodies(route))
    headers = {"Content-Type": "application/json"}
    if data.draw(st.booleans()):
        printable = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30)
        headers[PRINCIPAL_HEADER] = data.draw(
            st.sampled_from([ALICE, "tenant:globex/user:m", ""]) | printable)
    check_answer(client.post(route, content=orjson.dumps(body), headers=headers))


@fuzz(40)
@given(params=st.dictionaries(st.sampled_from(["log", "query", "k", "x"]),
                              st.text(max_size=20), max_size=3),
       route=st.sampled_from([*QUERY_ROUTES, "/v1/status", "/healthz", "/nope"]),
       method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
def test_random_query_params_and_methods(client: TestClient, params: dict[str, str], route: str,
                                         method: str) -> None:
    response = client.request(method, route, params=params)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert_error_shape(response)


EVENT_KEYS = ["eventId", "logId", "sessionId", "type", "time", "role", "acl", "fields", "turnId",
              "payload", "visibility"]


@st.composite
def event_batches(draw: st.DrawFn) -> Any:
    """Batches for POST /v1/events: mostly event-shaped objects (some valid), else any JSON."""
    valid = st.builds(lambda n, t: {"eventId": f"fz-{n}", "sessionId": f"fz-s{n % 3}", "type": t,
                                    "time": "2026-12-01T09:00:00Z", "fields": {"text": f"fuzz {n}"}},
                      st.integers(0, 50), st.sampled_from(["session.started", "message", "turn.ended"]))
    shaped = st.dictionaries(st.sampled_from(EVENT_KEYS), json_values(max_leaves=4), max_size=6)
    events = draw(st.lists(valid | shaped | json_values(max_leaves=3), max_size=6))
    body: Any = {"events": events}
    if draw(st.integers(0, 5)) == 0:
        body = draw(json_values())
    elif draw(st.booleans()):
        body["log"] = draw(st.sampled_from(["default", "", "other"]) | json_values(max_leaves=1))
    return body


@fuzz(30)
@given(body=event_batches(), who=st.sampled_from([None, ALICE, "tenant:globex/user:m", "nonsense"]))
def test_random_event_batches_get_an_answer_or_the_error_shape(client: TestClient, body: Any,
                                                               who: str | None) -> None:
    headers = {**JSON, **({PRINCIPAL_HEADER: who} if who else {})}
    response = client.post("/v1/events", content=orjson.dumps(body), headers=headers)
    check_answer(response)
    if response.status_code == 200:
        answer = response.json()
        assert answer["appended"] + answer["duplicates"] + len(answer["rejected"]) == len(body["events"])
