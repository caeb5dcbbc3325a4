"""One JSON error shape on every route, for every kind of error, and never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError
from starlette.testclient import TestClient

import planner.status
from planner.api import PRINCIPAL_HEADER, create_app
from planner.engine import Planner
from planner.exceptions import CursorExpired
from streams.exceptions import BrokerError
from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

pytestmark = pytest.mark.kafka

ROUTES = {"/v1/search": "POST", "/v1/sql": "POST", "/v1/status": "GET", "/metrics": "GET",
          "/healthz": "GET", "/openapi.json": "GET", "/": "GET"}


class Exploding(Planner):
    """A planner whose search hits a bug (for the 500 path)."""

    def search(self, request: Any, principal: Any) -> dict[str, Any]:
        query = request.get("query") if isinstance(request, dict) else None
        if query == "boom":
            raise RuntimeError("secret internals at /srv/usl: Traceback")
        if query == "broker-gone":  # what kafka-python raises when no broker answers
            raise KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:9 at /srv/usl")
        if query == "broker-timeout":
            raise BrokerError("timed out reading usl.l1 to its end at /srv/usl")
        if query == "gone":
            raise CursorExpired("the cursor expired (cursors live 3600 seconds)",
                                hint="Run the query again without a cursor.")
        return super().search(request, principal)


@pytest.fixture(scope="module")
def client(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_test_settings(Path(tmp_path_factory.mktemp("errors")), kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "default")
    builder.append(interleaved("default")[0])
    builder.commit("structured", "text", "vector")  # no analytics: SQL is unavailable
    builder.close()
    planner = Exploding(settings, kafka_bootstrap)
    with TestClient(create_app(settings, kafka_bootstrap, planner=planner),
                    raise_server_exceptions=False, base_url="http://localhost") as test_client:
        yield test_client
    planner.close()


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert {"code", "message", "status"} <= set(error) <= {"code", "message", "status", "hint"}
    assert error["status"] == status
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    assert "Traceback" not in response.text and "/srv/usl" not in response.text
    return error


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_wrong_method_on_every_route(client: TestClient, route: str) -> None:
    method = "DELETE" if ROUTES[route] == "GET" else "GET"
    error = assert_error(client.request(method, route), 405, "method_not_allowed")
    assert ROUTES[route] in error["hint"]


@pytest.mark.parametrize("path", ["/nope", "/v1", "/v1/search/x", "/static/missing.js"])
def test_unknown_routes(client: TestClient, path: str) -> None:
    assert_error(client.get(path), 404, "not_found")


@pytest.mark.parametrize("route", ["/v1/search", "/v1/sql"])
@pytest.mark.parametrize("body", [b"{not json", b"", b"[1, 2]", b'"text"'])
def test_malformed_bodies(client: TestClient, route: str, body: bytes) -> None:
    response = client.post(route, content=body, headers={"Content-Type": "application/json"})
    assert_error(response, 400, "bad_query")


@pytest.mark.parametrize("route", ["/v1/search", "/v1/sql"])
def test_bad_principal(client: TestClient, route: str) -> None:
    response = client.post(route, json={"query": "deploy"}, headers={PRINCIPAL_HEADER: "tenant:a"})
    assert_error(response, 400, "bad_query")


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"query": ""}, 400, "bad_query"),
    # Nothing to search for: vector and hybrid answered ten arbitrary hits for these.
    ({"query": "***"}, 400, "bad_query"),
    ({"query": '""'}, 400, "bad_query"),
    ({"query": "!!! -- ?"}, 400, "bad_query"),
    ({"query": "🚀 💥", "mode": "text"}, 400, "bad_query"),  # nothing the text index holds
    ({"query": "deploy", "k": 1000}, 400, "bad_query"),
    ({"query": "deploy", "freshness": "wait:9999"}, 400, "bad_query"),
    ({"query": "deploy", "cursor": "c1.AAAA.BBBB"}, 400, "bad_cursor"),
    ({"query": "deploy", "toolResults": True}, 403, "forbidden"),
    ({"query": "deploy", "log": "unknown-log"}, 404, "not_found"),
    ({"query": "gone"}, 410, "cursor_expired"),
    ({"query": "boom"}, 500, "internal"),
    ({"query": "broker-gone"}, 503, "broker_unavailable"),
    ({"query": "broker-timeout"}, 503, "broker_unavailable"),
])
def test_search_errors(client: TestClient, body: dict[str, Any], status: int, code: str) -> None:
    assert_error(client.post("/v1/search", json=body), status, code)


def test_search_error_hint(client: TestClient) -> None:
    error = assert_error(client.post("/v1/search", json={"query": "gone"}), 410)
    assert error["hint"] == "Run the query again without a cursor."


def test_sql_errors(client: TestClient) -> None:
    assert_error(client.post("/v1/sql", json={"query": "SELECT 1"}), 503, "index_unavailable")
    assert_error(client.post("/v1/sql", json={"sql": "SELECT 1"}), 400, "bad_query")
    assert_error(client.post("/v1/sql", json={"query": "SELECT 1", "asOfSeq": -1}), 400, "bad_query")


def test_status_failure(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Traceback: broker at /srv/usl unreachable")

    monkeypatch.setattr(planner.status, "collect_status", broken)
    assert_error(client.get("/v1/status?log=elsewhere"), 500, "internal")


def test_successes_are_not_errors(client: TestClient) -> None:
    for route, method in ROUTES.items():
        if method == "GET":
            assert client.get(route).status_code == 200, route
    assert client.post("/v1/search", json={"query": "deploy"}).status_code == 200
    for query in ("🦄", "数据库", "C++", '"exit 1"', "$HOME"):  # a symbol, a letter or a digit is something to find
        assert client.post("/v1/search", json={"query": query}).status_code == 200, query


@pytest.mark.parametrize("filters", [{"role": "robot"}, {"role": ["user", "User"]}, {"sessionId": None}, {"toolName": None}])
def test_filters_that_could_match_nothing_are_refused(client: TestClient, filters: dict[str, Any]) -> None:
    """A role no event has and a null value answered 200 with nothing (or everything) found."""
    error = assert_error(client.post("/v1/search", json={"query": "deploy", "filters": filters}), 400, "bad_query")
    assert next(iter(filters)) in error["message"]


def test_every_event_role_is_a_filter(client: TestClient) -> None:
    for role in ("user", "assistant", "system", "developer", "tool"):
        assert client.post("/v1/search", json={"query": "deploy", "filters": {"role": role}}).status_code == 200
