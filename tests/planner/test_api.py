"""The HTTP API over real generations: the SPEC §12 response, principals, cursors, status,
SQL, metrics, OpenAPI and the search page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from planner.api import PRINCIPAL_HEADER, create_app
from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

pytestmark = pytest.mark.kafka

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
    with TestClient(create_app(settings, kafka_bootstrap)) as test_client:
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
