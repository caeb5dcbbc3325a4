"""The HTTP API over real generations: the SPEC §12 response, principals, cursors, status,
SQL, metrics, OpenAPI and the search page."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.testclient import TestClient

import planner.status
from planner.api import PRINCIPAL_HEADER, create_app
from planner.auth import create_key, keys_path
from planner.exceptions import QueryError
from planner.request import parse_request
from streams.settings import Settings
from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

pytestmark = pytest.mark.kafka

LOCAL = "http://localhost:8765"

ALICE = {PRINCIPAL_HEADER: "tenant:acme/user:alice/groups:eng"}
MALLORY = {PRINCIPAL_HEADER: "tenant:globex/user:mallory"}
SPEC_RESULT_KEYS = {"chunkId", "sessionId", "runId", "turnId", "episodeId", "text", "evidence",
                    "score", "eventTime"}


@pytest.fixture(scope="module")
def client(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_test_settings(Path(tmp_path_factory.mktemp("api")), kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "default")
    order, _ = interleaved("default")
    builder.append(order)
    builder.commit("structured", "text", "vector", "toolresults", "analytics")
    builder.close()
    # The app builds its own planner and watermark follower at startup (as `usl serve` does).
    with TestClient(create_app(settings, kafka_bootstrap), base_url=LOCAL) as test_client:
        yield test_client


def post(client: TestClient, body: dict[str, Any], headers: dict[str, str] = ALICE) -> Any:
    return client.post("/v1/search", json=body, headers=headers)


def test_search_returns_the_spec_shape(client: TestClient) -> None:
    response = post(client, {"query": "deploy", "freshness": "latest", "k": 3})
    assert response.status_code == 200
    body = response.json()
    assert {"asOfSeq", "freshness", "results", "cursor"} <= set(body) and "explain" not in body
    fresh = body["freshness"]
    assert {"mode", "label", "l1CommittedSeq", "watermarks", "tailScan", "uncovered"} <= set(fresh)
    for watermark in fresh["watermarks"].values():
        assert set(watermark) == {"generationId", "builtThroughSeq"}
    assert len(body["results"]) == 3 and isinstance(body["cursor"], str)
    for hit in body["results"]:
        assert SPEC_RESULT_KEYS <= set(hit)
        assert {"rrf", "components"} <= set(hit["score"])
        for piece in hit["evidence"]:
            assert set(piece) == {"eventId", "seq", "start", "end"}
            assert piece["seq"] <= body["asOfSeq"]
            assert hit["text"].encode()[piece["start"]:piece["end"]]
    explained = post(client, {"query": "deploy", "explain": True}).json()
    assert {"freshness", "sources", "generations", "hits", "ranking"} <= set(explained["explain"])


def test_the_principal_header_decides_what_is_visible(client: TestClient) -> None:
    mallory = post(client, {"query": "deploy", "k": 100}, MALLORY).json()
    assert {hit["sessionId"] for hit in mallory["results"]} == {"s-other"}
    default = post(client, {"query": "deploy", "k": 100}, {}).json()  # tenant:default/user:local
    assert default["results"] == []
    bad = post(client, {"query": "deploy"}, {PRINCIPAL_HEADER: "user:alice"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_query"


def test_cursor_pages_over_http(client: TestClient) -> None:
    request = {"query": "deploy step", "freshness": "latest"}
    one_shot = post(client, {**request, "k": 100}).json()
    seen, cursor = [], None
    while True:
        page = post(client, {**request, "k": 5, "cursor": cursor}).json()
        seen += [hit["chunkId"] for hit in page["results"]]
        cursor = page["cursor"]
        if not cursor:
            break
    assert seen == [hit["chunkId"] for hit in one_shot["results"]]
    other = post(client, {**request, "k": 5, "cursor": post(client, {**request, "k": 5}).json()["cursor"]},
                 MALLORY)
    assert other.status_code == 409 and other.json()["error"]["code"] == "cursor_mismatch"


def test_tool_results_need_the_scope_over_http(client: TestClient) -> None:
    refused = post(client, {"query": "fulloutput0", "toolResults": True})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    scoped = {PRINCIPAL_HEADER: ALICE[PRINCIPAL_HEADER] + "/scopes:toolresults"}
    allowed = post(client, {"query": "fulloutput0", "toolResults": True, "k": 50}, scoped)
    assert allowed.status_code == 200
    assert any(hit["kind"] == "toolresult" for hit in allowed.json()["results"])


def test_status(client: TestClient) -> None:
    response = client.get("/v1/status")
    assert response.status_code == 200
    entry = response.json()["logs"]["default"]
    assert entry["l1CommittedSeq"] > 0
    for kind in ("structured", "text", "vector"):
        index = entry["indexes"][kind]
        assert {"generationId", "builtThroughSeq", "lagSeqs", "lagSeconds"} <= set(index)
        assert index["generationId"] >= 1
    assert "bootstrap" not in response.json()


def test_sql(client: TestClient) -> None:
    response = client.post("/v1/sql", json={"query": "SELECT sessionId FROM sessions ORDER BY 1"},
                           headers=ALICE)
    assert response.status_code == 200, response.text
    assert [row[0] for row in response.json()["rows"]] == ["s-alice", "s-all", "s-eng"]
    refused = client.post("/v1/sql", json={"query": "DROP TABLE sessions"}, headers=ALICE)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "bad_query"


@pytest.mark.parametrize("route", ["/v1/search", "/v1/sql", "/v1/sessionql"])
@pytest.mark.parametrize("log", ["a" * 4000 + "!", "a b", "日本", 5])
def test_a_bad_log_in_a_body_is_a_short_400_on_every_route(client: TestClient, route: str, log: Any) -> None:
    """Found by a new user: /v1/sql and /v1/sessionql answered a log no event can carry with a
    404 "no log named ..." that echoed it whole (100 KB back for 100 KB sent); search said 400."""
    query = {"/v1/search": "x", "/v1/sql": "SELECT 1", "/v1/sessionql": "FROM events"}[route]
    response = client.post(route, json={"query": query, "log": log}, headers=ALICE)
    assert response.status_code == 400, response.text
    assert "is not a log name" in response.json()["error"]["message"] and len(response.text) < 400


def test_metrics_health_openapi_and_page(client: TestClient) -> None:
    post(client, {"query": "deploy"})
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    for name in ("usl_queries_total", "usl_query_seconds_bucket", "usl_tail_scan_events"):
        assert name in metrics.text
    assert client.get("/healthz").json() == {"status": "ok", "ready": True}
    spec = client.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    assert {"/v1/search", "/v1/sql", "/v1/status", "/metrics", "/healthz", "/openapi.json",
            "/"} <= set(spec["paths"])
    page = client.get("/")
    assert page.status_code == 200 and "USL Search" in page.text
    assert "/static/app.js" in page.text
    script = client.get("/static/app.js")
    assert script.status_code == 200 and "TextEncoder" in script.text and "/v1/status" in script.text
    assert client.get("/static/style.css").status_code == 200


# -- the request guard (issue 15): Host names, media types, body sizes --------------------------


class EchoPlanner:
    """Stands in for the planner: answers a search with what it was asked."""

    def search(self, body: Any, principal: Any) -> dict[str, Any]:
        return {"asked": body}


_STARTED: list[TestClient] = []


@pytest.fixture(autouse=True)
def _shut_down_guarded_clients() -> Iterator[None]:
    """Each app a test started shuts down after it, as a server's does: its status history
    thread sampled on for the rest of the worker's tests, against a broker that is not there."""
    yield
    while _STARTED:
        _STARTED.pop().__exit__(None, None, None)


def guarded_client(tmp_path: Path, *, keys: bool = False, **settings: Any) -> TestClient:
    config = Settings.from_env({}, home=tmp_path, **settings)
    if keys:
        create_key(keys_path(config), "tenant:acme/user:dave")
    client = TestClient(create_app(config, "127.0.0.1:9", planner=EchoPlanner()), base_url=LOCAL)
    _STARTED.append(client.__enter__())  # its lifespan runs, so its shutdown does too
    return client


def assert_refused(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (status, code) and error["message"] and error["hint"]


LOOPBACK_HOSTS = ["localhost", "LOCALHOST:8765", "localhost.", "127.0.0.1", "127.0.0.1:8765",
                  "127.9.9.9:1", "[::1]", "[::1]:8765"]
FOREIGN_HOSTS = ["evil.example", "evil.example:8765", "localhost.evil.example",
                 "127.0.0.1.nip.io", "attacker.localtest.me:8765", "", "[::1]x", "[::2]:8765",
                 "0.0.0.0:8765", "10.0.0.1", "lоcalhost"]


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
def test_without_keys_loopback_host_names_are_answered(tmp_path: Path, host: str) -> None:
    client = guarded_client(tmp_path)
    assert client.get("/healthz", headers={"Host": host}).status_code == 200
    response = client.post("/v1/search", json={"query": "x"}, headers={"Host": host})
    assert response.status_code == 200 and response.json() == {"asked": {"query": "x"}}


@pytest.mark.parametrize("host", FOREIGN_HOSTS)
def test_without_keys_other_host_names_are_refused(tmp_path: Path, host: str) -> None:
    """DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1 reads nothing."""
    client = guarded_client(tmp_path)
    for method, path in (("POST", "/v1/search"), ("GET", "/v1/status"), ("GET", "/metrics"),
                         ("GET", "/")):
        response = client.request(method, path, json={"query": "x"} if method == "POST" else None,
                                  headers={"Host": host.encode("utf-8")})
        assert_refused(response, 400, "host_not_allowed")


def test_configured_host_names_are_answered_and_keys_lift_the_host_check(tmp_path: Path) -> None:
    configured = guarded_client(tmp_path / "a", api_allowed_hosts="usl.internal, Planner.Lan")
    for host in ("usl.internal", "planner.lan:8765", "localhost"):
        assert configured.post("/v1/search", json={"query": "x"}, headers={"Host": host}).status_code == 200
    assert_refused(configured.get("/healthz", headers={"Host": "evil.example"}), 400, "host_not_allowed")
    anything = guarded_client(tmp_path / "b", api_allowed_hosts="*")
    assert anything.get("/healthz", headers={"Host": "evil.example"}).status_code == 200
    # With API keys a rebinding page has no key to send: the key check is the guard.
    keyed = guarded_client(tmp_path / "c", keys=True)
    assert keyed.get("/healthz", headers={"Host": "evil.example"}).status_code == 200
    assert_refused(keyed.post("/v1/search", json={"query": "x"}, headers={"Host": "evil.example"}),
                   401, "unauthorized")


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/jsonx",
                                          "text/json"])
def test_a_post_body_must_be_json(tmp_path: Path, content_type: str | None) -> None:
    """A web page may post text/plain or a form cross-site without asking; never JSON."""
    client = guarded_client(tmp_path)
    headers = {} if content_type is None else {"Content-Type": content_type}
    for route in ("/v1/search", "/v1/sql", "/v1/sessionql", "/nope"):
        response = client.post(route, content=b'{"query": "x"}', headers=headers)
        assert_refused(response, 415, "unsupported_media_type")


def test_the_415_says_what_to_add(tmp_path: Path) -> None:
    """``curl -d`` without -H sends a form type: the refusal names the header to add, with keys
    (checked by the route) as without (checked before routing)."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    config = Settings.from_env({}, home=tmp_path / "keyed")
    key, _entry = create_key(keys_path(config), "tenant:acme/user:dave")
    keyed = TestClient(create_app(config, "127.0.0.1:9", planner=EchoPlanner()), base_url=LOCAL)
    for client, sent in ((guarded_client(tmp_path / "keyless"), form),
                         (keyed, {**form, "Authorization": f"Bearer {key}"})):
        for route in ("/v1/search", "/v1/events"):
            error = client.post(route, content=b'{"query": "x"}', headers=sent).json()["error"]
            assert error["code"] == "unsupported_media_type"
            assert "not application/x-www-form-urlencoded" in error["message"]
            assert "add -H 'Content-Type: application/json'" in error["hint"], error


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/vnd.usl+json"])
def test_json_media_types_are_accepted(tmp_path: Path, content_type: str) -> None:
    client = guarded_client(tmp_path)
    response = client.post("/v1/search", content=b'{"query": "x"}', headers={"Content-Type": content_type})
    assert response.status_code == 200, response.text
    # An empty POST carries no body to type: it reaches the route, which says what is missing.
    assert_refused(client.post("/v1/search"), 400, "bad_query")


def test_request_bodies_over_the_limit_are_refused(tmp_path: Path) -> None:
    client = guarded_client(tmp_path, api_max_body_bytes=4096)
    fits = b'{"query": "' + b"x" * (4096 - 13) + b'"}'
    assert len(fits) == 4096
    assert client.post("/v1/search", content=fits, headers={"Content-Type": "application/json"}).status_code == 200
    over = fits[:-2] + b'x"}'
    assert_refused(client.post("/v1/search", content=over, headers={"Content-Type": "application/json"}),
                   413, "payload_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"query": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}'

    assert_refused(client.post("/v1/search", content=chunks(), headers={"Content-Type": "application/json"}),
                   413, "payload_too_large")


def test_a_body_sent_whole_before_the_answer_is_read_gets_the_413(tmp_path: Path) -> None:
    """Clients that write the whole body before reading (urllib, requests, OTLP exporters) saw a
    broken pipe, not the 413, when the server closed with megabytes of it still unread: under
    real uvicorn the refused body is read and dropped first, up to four times the limit."""
    config = Settings.from_env({}, home=tmp_path, api_max_body_bytes=4 << 20)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(config, "127.0.0.1:9", planner=EchoPlanner()),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        body = b'{"query": "' + b"x" * (16 << 20) + b'"}'
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/search", data=body,
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 413
        assert json.loads(refused.value.read())["error"]["code"] == "payload_too_large"
    finally:
        server.should_exit = True
        thread.join(10)


def test_status_refuses_malformed_log_names_and_keeps_a_bounded_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str | None] = []

    def fake_status(settings: Any, bootstrap: str, *, log_id: str | None = None, **_: Any) -> dict[str, Any]:
        asked.append(log_id)
        return {"logs": {}}

    monkeypatch.setattr(planner.status, "collect_status", fake_status)
    client = guarded_client(tmp_path)
    for log in ("../etc", "a b", "x" * 201, "\u0000", "٥", "-lead"):
        assert_refused(client.get("/v1/status", params={"log": log}), 400, "bad_query")
    assert asked == []
    for number in range(500):
        assert client.get("/v1/status", params={"log": f"log-{number}"}).status_code == 200
    # the status history sampler asks for every log in the background; count the requests
    assert len([log for log in asked if log is not None and log.startswith("log-")]) == 500
    assert 0 < len(client.app.state.status_cache) <= 64  # type: ignore[attr-defined]


def test_status_history_answers_an_unknown_log_and_an_endless_time_as_status_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``?log=`` of a log that does not exist was an empty 200 (``/v1/status``: 404), and
    ``since=nan`` or ``inf`` parsed and matched no sample."""
    from planner.exceptions import NotFound

    def fake_status(settings: Any, bootstrap: str, *, log_id: str | None = None, **_: Any) -> dict[str, Any]:
        if log_id not in (None, "default"):
            raise NotFound(f"no log named {log_id!r}", hint="`usl status` lists the logs.")
        return {"logs": {"default": {"l1CommittedSeq": 3, "indexes": {}}}}

    monkeypatch.setattr(planner.status, "collect_status", fake_status)
    client = guarded_client(tmp_path)
    assert client.get("/v1/status/history", params={"log": "default"}).status_code == 200
    assert_refused(client.get("/v1/status", params={"log": "nope"}), 404, "not_found")
    assert_refused(client.get("/v1/status/history", params={"log": "nope"}), 404, "not_found")
    for since in ("nan", "inf", "-inf", "soon"):
        assert_refused(client.get("/v1/status/history", params={"since": since}), 400, "bad_query")
    assert client.get("/v1/status/history", params={"since": "0"}).status_code == 200
    client.__exit__(None, None, None)
    _STARTED.remove(client)
    assert not [t for t in threading.enumerate() if t.name == "usl-status-history"], \
        "the status history sampled on after its app shut down"


def test_a_body_saved_with_a_byte_order_mark_is_read_and_a_bad_one_says_where(tmp_path: Path) -> None:
    """Windows tools write a UTF-8 byte order mark before the JSON they save (RFC 8259 lets a
    parser ignore it): such a search was refused as "not valid JSON" with nothing to say why. A
    body that is not JSON says where, one in another encoding that it is not UTF-8."""
    client = guarded_client(tmp_path)
    json_type = {"Content-Type": "application/json"}
    answer = client.post("/v1/search", content=b'\xef\xbb\xbf{"query": "retry budget"}', headers=json_type)
    assert answer.status_code == 200 and answer.json()["asked"] == {"query": "retry budget"}
    error = client.post("/v1/search", content=b'{"query": "retry budget",}', headers=json_type).json()["error"]
    assert error["code"] == "bad_query" and "line 1, column" in error["message"]
    latin = client.post("/v1/search", content='{"query": "café"}'.encode("latin-1"), headers=json_type)
    assert_refused(latin, 400, "bad_query")
    assert "not UTF-8" in latin.json()["error"]["message"]


def test_a_client_that_disconnects_is_not_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(Settings.from_env({}, home=tmp_path), "127.0.0.1:9", planner=EchoPlanner())
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/search", "raw_path": b"/v1/search", "query_string": b"",
             "root_path": "", "server": ("127.0.0.1", 8765), "client": ("127.0.0.1", 5000),
             "headers": [(b"host", b"127.0.0.1:8765"), (b"content-type", b"application/json"),
                         (b"content-length", b"100")]}
    with caplog.at_level(logging.INFO, logger="usl.api"):
        asyncio.run(app(scope, receive, send))  # type: ignore[arg-type]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not any(r.exc_info for r in caplog.records)
    assert "disconnected" in caplog.text


@pytest.mark.parametrize("freshness", ["wait:٥", "wait:５", "wait:1.٥", "wait:²", "wait:𝟓"])
def test_freshness_takes_ascii_digits_only(freshness: str) -> None:
    """The OpenAPI pattern is wait:[0-9]+(.[0-9]+)?; Python's \\d also matches other scripts."""
    with pytest.raises(QueryError):
        parse_request({"query": "x", "freshness": freshness})
    assert parse_request({"query": "x", "freshness": "wait:5.5"}).freshness.wait_seconds == 5.5


def test_a_bad_search_log_is_not_echoed_whole() -> None:
    """A 5000-character ``log`` came back whole in the 400 body; log_param cuts it at 64."""
    with pytest.raises(QueryError) as caught:
        parse_request({"query": "x", "log": "a" * 4000 + "!"})
    assert "is not a log name" in caught.value.message and len(caught.value.message) < 200


def test_a_query_too_long_says_its_length_and_what_to_search_instead() -> None:
    """Found by a new user pasting a whole stack trace: "the query is longer than 2000
    characters", with no length and no word of what to send instead."""
    with pytest.raises(QueryError) as caught:
        parse_request({"query": "Traceback line " * 200})
    assert "2999 characters" in caught.value.message and "2000" in caught.value.message
    assert caught.value.hint and "line" in caught.value.hint
    assert parse_request({"query": "x" * 2000}).query


@pytest.mark.parametrize("typed", ["\u201cexit code 1\u201d", "\u201eexit code 1\u201c", "\u00abexit code 1\u00bb",
                                   "\uff02exit code 1\uff02", "\u301dexit code 1\u301e", "\u301dexit code 1\u301f"])
def test_any_double_quotation_mark_makes_a_phrase(typed: str) -> None:
    """Found by a new user: “exit code 1” (smart quotes, as an editor or chat writes them) and
    the full-width ＂ NFKC folds to " were read as words, so text mode answered every chunk
    holding one of them where "exit code 1" answers the chunks holding the phrase."""
    assert parse_request({"query": typed}).query == '"exit code 1"'
    assert parse_request({"query": f"deploy {typed}"}).query_hash() == parse_request(
        {"query": 'deploy "exit code 1"'}).query_hash()


def test_too_many_filter_values_say_the_limit() -> None:
    """1001 well-formed values were refused as "must be a non-empty string or a list of them"."""
    ids = [f"s-{i}" for i in range(1001)]
    with pytest.raises(QueryError) as caught:
        parse_request({"query": "x", "filters": {"sessionId": ids}})
    assert "at most 1000" in caught.value.message and "1001" in caught.value.message
    assert parse_request({"query": "x", "filters": {"sessionId": ids[:1000]}}).filters.values["sessionId"]


def test_with_keys_the_key_is_checked_first_then_the_media_type(tmp_path: Path) -> None:
    config = Settings.from_env({}, home=tmp_path)
    key, _entry = create_key(keys_path(config), "tenant:acme/user:dave")
    client = TestClient(create_app(config, "127.0.0.1:9", planner=EchoPlanner()), base_url=LOCAL)
    plain = {"Content-Type": "text/plain"}
    assert_refused(client.post("/v1/search", content=b'{"query": "x"}', headers=plain), 401, "unauthorized")
    assert_refused(client.post("/v1/search", content=b'{"query": "x"}',
                               headers={**plain, "Authorization": f"Bearer {key}"}),
                   415, "unsupported_media_type")
    assert client.post("/v1/search", json={"query": "x"},
                       headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_a_key_written_twice_in_a_body_is_refused(tmp_path: Path) -> None:
    """Found by a new user: {"query": "x", "query": "y"} searched for y (the last wins here, the
    first in other parsers); /v1/events already refused such a body."""
    client = guarded_client(tmp_path)
    json_type = {"Content-Type": "application/json"}
    for route in ("/v1/search", "/v1/sql", "/v1/sessionql"):
        response = client.post(route, content=b'{"query": "x", "query": "y"}', headers=json_type)
        assert_refused(response, 400, "bad_query")
        assert "duplicate key 'query'" in response.json()["error"]["message"]
    nested = b'{"query": "x", "filters": {"role": "user", "role": "tool"}}'
    assert_refused(client.post("/v1/search", content=nested, headers=json_type), 400, "bad_query")
    spaced = b'{ "query" : "x",\n  "k": 3 }'  # any spacing of a body without repeats is fine
    assert client.post("/v1/search", content=spaced, headers=json_type).json() == {"asked": {"query": "x", "k": 3}}


@pytest.mark.parametrize(("path", "params", "named"), [
    # One letter off: this exported every session the caller may read instead of one.
    ("/v1/export", [("what", "sessions"), ("sessionid", "s-1")], "'sessionid'"),
    ("/v1/export", [("what", "hits"), ("q", "retry budget")], "'q'"),
    ("/v1/export", [("what", "hits"), ("query", "a"), ("query", "b")], "'query'"),
    ("/v1/status", [("logs", "default")], "'logs'"),
    ("/v1/status", [("log", "a"), ("log", "b")], "'log'"),
    ("/v1/status/history", [("sinse", "0")], "'sinse'"),
    ("/v1/status/history", [("since", "0"), ("since", "1")], "'since'"),
])
def test_get_routes_refuse_unknown_and_repeated_query_parameters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, params: list[tuple[str, str]],
        named: str) -> None:
    monkeypatch.setattr(planner.status, "collect_status", lambda *_, **__: {"logs": {}})
    response = guarded_client(tmp_path).get(path, params=params)
    assert_refused(response, 400, "bad_query")
    assert named in response.json()["error"]["message"]


def test_the_openapi_document_lists_the_query_parameters_each_get_route_takes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What /openapi.json documents is what the route accepts: every documented parameter is
    answered (not refused as unknown) and no other one is."""
    monkeypatch.setattr(planner.status, "collect_status", lambda *_, **__: {"logs": {}})
    client = guarded_client(tmp_path)
    paths = client.get("/openapi.json").json()["paths"]
    samples = {"what": "sessions", "format": "jsonl", "log": "default", "asOfSeq": "0", "sessionId": "s-1",
               "freshness": "indexed", "mode": "hybrid", "limit": "5", "since": "0"}
    for path in ("/v1/export", "/v1/status", "/v1/status/history"):
        names = [p["name"] for p in paths[path]["get"]["parameters"] if p["in"] == "query"]
        assert names, path
        for name in names:
            if name == "query":  # only with what=hits, where sessionId is refused
                response = client.get(path, params={"what": "hits", "query": "x"})
            else:
                response = client.get(path, params={name: samples[name]})
            if response.status_code == 400:
                assert "unknown query parameter" not in response.json()["error"]["message"], (path, name)
        assert_refused(client.get(path, params={"undocumented": "1"}), 400, "bad_query")
    assert set(names) == {"log", "since"}


def schema_problems(value: Any, schema: dict[str, Any], components: dict[str, Any], path: str = "$",
                    *, strict: bool) -> list[str]:
    """Where ``value`` breaks ``schema`` (the subset of JSON Schema the API's document uses);
    ``strict``: an object's field that the schema does not describe is a problem too."""
    if "$ref" in schema:
        return schema_problems(value, components[schema["$ref"].rsplit("/", 1)[1]], components, path,
                               strict=strict)
    if "oneOf" in schema:
        fits = [schema_problems(value, option, components, path, strict=strict) for option in schema["oneOf"]]
        return [] if any(not problems for problems in fits) else [f"{path}: fits no option"]
    if "enum" in schema:
        return [] if value in schema["enum"] else [f"{path}: {value!r} not in {schema['enum']}"]
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
             "integer": int, "number": (int, float)}
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else types
        if not any(isinstance(value, kinds[t]) and not (t in ("integer", "number") and isinstance(value, bool))
                   for t in allowed):
            return [f"{path}: {type(value).__name__} is not {types}"]
    problems: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        problems += [f"{path}: {name} missing" for name in schema.get("required", []) if name not in value]
        for name, item in value.items():
            if name in properties:
                problems += schema_problems(item, properties[name], components, f"{path}.{name}", strict=strict)
            elif isinstance(schema.get("additionalProperties"), dict):
                problems += schema_problems(item, schema["additionalProperties"], components, f"{path}.{name}",
                                            strict=strict)
            elif strict and properties:
                problems.append(f"{path}.{name}: not in the document")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            problems += schema_problems(item, schema["items"], components, f"{path}[{index}]", strict=strict)
    return problems


def test_the_openapi_document_describes_every_field_of_a_search_and_status_answer(client: TestClient) -> None:
    """Real answers (every freshness, explain, full tool results, a second page) against
    /openapi.json: a search answer has no field the document leaves out, the page included
    (it reads origin, fallbacks and each source's rank); a status answer has SPEC §12's."""
    document = client.get("/openapi.json").json()
    components = document["components"]["schemas"]
    search = document["paths"]["/v1/search"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    scoped = {PRINCIPAL_HEADER: ALICE[PRINCIPAL_HEADER] + "/scopes:toolresults"}
    requests = [({"query": "deploy", "freshness": freshness, "explain": explain, "k": 3}, ALICE)
                for freshness in ("indexed", "latest", "wait:1") for explain in (False, True)]
    requests.append(({"query": "fulloutput0", "toolResults": True, "k": 50}, scoped))
    seen: set[str] = set()
    for body, headers in requests:
        answer = post(client, body, headers).json()
        assert answer["results"], body
        assert schema_problems(answer, search, components, strict=True) == [], body
        seen.update(hit["kind"] for hit in answer["results"])
        if answer["cursor"]:
            second = post(client, {**body, "cursor": answer["cursor"]}, headers).json()
            assert schema_problems(second, search, components, strict=True) == [], body
    assert {"chunk", "toolresult"} <= seen
    status = document["paths"]["/v1/status"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema_problems(client.get("/v1/status").json(), status, components, strict=False) == []
