"""API keys over HTTP: every /v1 route needs one, a key runs as its principal and nobody else,
revocation applies on the next request, the principal header can only narrow, a cursor does
not cross keys, the keys file holds no key, and the API refuses a public bind without keys.

The app runs over real generations on the session's broker (like ``test_api.py``); keys are
managed with the real ``usl apikey`` command; the bind rule is checked on ``usl serve`` and
``usl up`` as subprocesses, and a keyed ``usl serve --host 0.0.0.0`` is called over real HTTP.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from deploy.testing import Stack, free_port, settings_env
from planner.api import PRINCIPAL_HEADER, create_app
from planner.auth import (
    KEY_PREFIX,
    allowed_hosts,
    check_bind,
    create_key,
    host_allowed,
    is_loopback,
    keys_path,
    revoke_key,
)
from streams.exceptions import ConfigError
from streams.settings import Settings
from streams.testing import append_events, session_events
from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

pytestmark = pytest.mark.kafka

ALICE = "tenant:acme/user:alice/groups:eng"
MALLORY = "tenant:globex/user:mallory"
ALICE_SESSIONS = {"s-alice", "s-eng", "s-all"}
MALLORY_SESSIONS = {"s-other"}
V1_ROUTES = [("POST", "/v1/search", {"query": "deploy"}),
             ("POST", "/v1/sql", {"query": "SELECT sessionId FROM sessions"}),
             ("POST", "/v1/sessionql", {"query": "FROM sessions"}),
             ("GET", "/v1/status", None)]


class Deployment:
    """The API over the planner corpus, with its settings and the keys made so far."""

    def __init__(self, settings: Settings, client: TestClient) -> None:
        self.settings = settings
        self.client = client
        self.keys: dict[str, str] = {}

    def usl(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**settings_env(self.settings), "USL_API_KEYS_FILE": str(keys_path(self.settings))}
        return subprocess.run([sys.executable, "-m", "deploy.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    def create(self, principal: str, name: str) -> str:
        done = self.usl("apikey", "create", "--principal", principal, "--name", name, "--json")
        assert done.returncode == 0, done.stderr
        key = json.loads(done.stdout)["key"]
        self.keys[name] = key
        return str(key)

    def call(self, method: str, path: str, body: Any = None, *, key: str | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        sent = dict(headers or {})
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        return self.client.request(method, path, json=body, headers=sent)

    def search(self, body: dict[str, Any], key: str, **kwargs: Any) -> httpx.Response:
        return self.call("POST", "/v1/search", body, key=key, **kwargs)


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    settings = make_test_settings(Path(tmp_path_factory.mktemp("auth")), kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "default")
    order, _ = interleaved("default")
    builder.append(order)
    builder.commit("structured", "text", "vector", "toolresults", "analytics")
    builder.close()
    with TestClient(create_app(settings, kafka_bootstrap)) as client:
        served = Deployment(settings, client)
        served.create(ALICE, "alice")
        served.create(MALLORY, "mallory")
        yield served


def sessions_of(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {hit["sessionId"] for hit in response.json()["results"]}


def assert_unauthorized(response: httpx.Response, secret: str | None = None) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == "unauthorized"
    assert body["error"]["status"] == 401 and body["error"]["message"] and body["error"]["hint"]
    if secret:
        assert secret not in response.text


def test_every_v1_route_needs_a_valid_key(deployment: Deployment) -> None:
    forged = KEY_PREFIX + "A" * 43
    for method, path, body in V1_ROUTES:
        assert_unauthorized(deployment.call(method, path, body))
        assert_unauthorized(deployment.call(method, path, body, key=forged), forged)
        assert_unauthorized(deployment.call(method, path, body, headers={"X-API-Key": forged}), forged)
        # The principal header alone is no credential any more.
        assert_unauthorized(deployment.call(method, path, body, headers={PRINCIPAL_HEADER: ALICE}))
        assert_unauthorized(deployment.call(method, path, body,
                                            headers={"Authorization": f"Basic {deployment.keys['alice']}"}))
        good = deployment.call(method, path, body, key=deployment.keys["alice"])
        assert good.status_code == 200, (path, good.text)
    # A malformed body is not even looked at before the key is.
    assert_unauthorized(deployment.client.post("/v1/search", content=b"{not json"))
    for path in ("/healthz", "/metrics", "/openapi.json", "/", "/static/app.js"):
        assert deployment.client.get(path).status_code == 200, path


def test_a_key_runs_as_its_principal_and_only_sees_its_sessions(deployment: Deployment) -> None:
    request = {"query": "deploy", "k": 100, "freshness": "latest"}
    alice = sessions_of(deployment.search(request, deployment.keys["alice"]))
    mallory = sessions_of(deployment.search(request, deployment.keys["mallory"]))
    assert alice == ALICE_SESSIONS and mallory == MALLORY_SESSIONS
    by_header = deployment.call("POST", "/v1/search", request, headers={"X-API-Key": deployment.keys["alice"]})
    assert sessions_of(by_header) == ALICE_SESSIONS
    for name, expected in (("alice", ALICE_SESSIONS), ("mallory", MALLORY_SESSIONS)):
        rows = deployment.call("POST", "/v1/sql", {"query": "SELECT sessionId FROM sessions ORDER BY 1"},
                               key=deployment.keys[name])
        assert rows.status_code == 200, rows.text
        assert {row[0] for row in rows.json()["rows"]} == expected


def _without_query_echo(body: dict[str, Any]) -> str:
    """The response as text with the query's own words (which the caller sent) removed."""
    return json.dumps(body, sort_keys=True).replace("secretproject", "WORD").replace("zzznowhere", "WORD")


def test_another_tenants_data_leaves_no_trace_in_results_counts_or_explain(deployment: Deployment) -> None:
    """Alice searching for a word only Mallory's session holds gets exactly the answer of a word
    that is nowhere: same (empty) results, same counts, same explain. Mallory's full answer
    names nothing of Alice's sessions, and the reverse."""
    key = deployment.keys["alice"]
    request = {"k": 100, "freshness": "latest", "explain": True, "mode": "text"}
    only_mallory = deployment.search({**request, "query": "secretproject"}, key)
    nowhere = deployment.search({**request, "query": "zzznowhere"}, key)
    assert only_mallory.status_code == nowhere.status_code == 200
    assert only_mallory.json()["results"] == []
    assert _without_query_echo(only_mallory.json()) == _without_query_echo(nowhere.json())
    assert deployment.search({**request, "query": "secretproject"},
                             deployment.keys["mallory"]).json()["results"], "positive control"

    for name, foreign in (("mallory", ALICE_SESSIONS | {"s-bob"}), ("alice", MALLORY_SESSIONS | {"s-bob"})):
        text = deployment.search({**request, "query": "deploy step"}, deployment.keys[name]).text
        assert not [session for session in foreign if session in text], name
    counts = {name: deployment.call("POST", "/v1/sql", {"query": "SELECT count(*) FROM events"},
                                    key=deployment.keys[name]).json()["rows"][0][0]
              for name in ("alice", "mallory")}
    assert 0 < counts["mallory"] < counts["alice"]


def test_revocation_takes_effect_on_the_next_request(deployment: Deployment) -> None:
    key = deployment.create("tenant:acme/user:carol", "carol")
    assert deployment.search({"query": "deploy"}, key).status_code == 200
    listed = deployment.usl("apikey", "list", "--json")
    assert listed.returncode == 0 and "carol" in listed.stdout and key not in listed.stdout
    revoked = deployment.usl("apikey", "revoke", "carol")
    assert revoked.returncode == 0, revoked.stderr
    assert_unauthorized(deployment.search({"query": "deploy"}, key), key)
    assert deployment.search({"query": "deploy"}, deployment.keys["alice"]).status_code == 200
    unknown = deployment.usl("apikey", "revoke", "carol")
    assert unknown.returncode == 2 and "no API key named 'carol'" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_revoking_the_last_key_locks_the_api_rather_than_opening_it(tmp_path: Path) -> None:
    settings = Settings.from_env({}, home=tmp_path)
    key, entry = create_key(keys_path(settings), "tenant:acme/user:dave")
    client = TestClient(create_app(settings, "127.0.0.1:9", planner=object()))
    assert client.get("/v1/status").status_code == 401
    revoke_key(keys_path(settings), entry.name)
    assert json.loads(keys_path(settings).read_text())["keys"] == []
    assert_unauthorized(client.get("/v1/status"))
    assert_unauthorized(client.get("/v1/status", headers={"Authorization": f"Bearer {key}"}), key)
    keys_path(settings).unlink()  # once enforced, keys stay required for the life of the server
    assert_unauthorized(client.get("/v1/status", headers={PRINCIPAL_HEADER: "tenant:acme/user:dave"}))


def test_the_principal_header_can_only_narrow_the_keys_principal(deployment: Deployment) -> None:
    key = deployment.keys["alice"]
    request = {"query": "deploy", "k": 100, "freshness": "latest"}
    same = deployment.search(request, key, headers={PRINCIPAL_HEADER: "groups:eng/user:alice/tenant:acme"})
    assert sessions_of(same) == ALICE_SESSIONS
    narrower = deployment.search(request, key, headers={PRINCIPAL_HEADER: "tenant:acme/user:alice"})
    assert sessions_of(narrower) == ALICE_SESSIONS - {"s-eng"}
    for wider in ("tenant:acme/user:bob", MALLORY, "tenant:acme/user:alice/groups:eng,ops",
                  "tenant:acme/user:alice/groups:eng/scopes:toolresults"):
        for path, body in (("/v1/search", request), ("/v1/sql", {"query": "SELECT 1"}),
                           ("/v1/sessionql", {"query": "FROM sessions"})):
            refused = deployment.call("POST", path, body, key=key, headers={PRINCIPAL_HEADER: wider})
            assert refused.status_code == 403, (wider, path, refused.text)
            assert refused.json()["error"]["code"] == "forbidden"
    malformed = deployment.search(request, key, headers={PRINCIPAL_HEADER: "user:alice"})
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "bad_query"


def test_a_cursor_of_one_key_is_refused_with_another(deployment: Deployment) -> None:
    request = {"query": "deploy step", "freshness": "latest", "k": 2}
    first = deployment.search(request, deployment.keys["alice"]).json()
    assert first["cursor"]
    replay = {**request, "cursor": first["cursor"]}
    for key, headers in ((deployment.keys["mallory"], None),
                         (deployment.keys["alice"], {PRINCIPAL_HEADER: "tenant:acme/user:alice"})):
        refused = deployment.search(replay, key, headers=headers)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "cursor_mismatch" and "principal" in error["message"] + error.get("hint", "")
        assert "s-alice" not in refused.text and "s-eng" not in refused.text
    assert deployment.search(replay, deployment.keys["alice"]).status_code == 200


def test_the_keys_file_never_holds_a_key(deployment: Deployment) -> None:
    raw = keys_path(deployment.settings).read_bytes()
    assert keys_path(deployment.settings).stat().st_mode & 0o077 == 0, "the keys file is readable by others"
    assert deployment.keys
    for key in deployment.keys.values():
        body = key[len(KEY_PREFIX):]
        decoded = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        for needle in (key.encode(), body.encode(), body[:16].encode(), body[-16:].encode(), decoded,
                       decoded.hex().encode(), base64.b64encode(decoded)):
            assert needle not in raw
    listed = deployment.usl("apikey", "list")
    assert listed.returncode == 0 and "alice" in listed.stdout
    assert not [key for key in deployment.keys.values() if key in listed.stdout or key[4:20] in listed.stdout]


def test_the_openapi_document_declares_the_keys(deployment: Deployment) -> None:
    spec = deployment.client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearerKey"] == {**schemes["bearerKey"], "type": "http", "scheme": "bearer"}
    assert schemes["headerKey"]["name"] == "X-API-Key"
    for path in ("/v1/search", "/v1/sql", "/v1/sessionql", "/v1/status"):
        operation = next(iter(spec["paths"][path].values()))
        assert operation["security"] == [{"bearerKey": []}, {"headerKey": []}], path
        assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]
    for path in ("/healthz", "/metrics"):
        assert "security" not in spec["paths"][path]["get"]


def test_without_a_keys_file_the_header_names_the_caller(tmp_path: Path) -> None:
    client = TestClient(create_app(Settings.from_env({}, home=tmp_path), "127.0.0.1:9", planner=None),
                        base_url="http://127.0.0.1:8765")
    spec = client.get("/openapi.json").json()
    assert {} in spec["paths"]["/v1/search"]["post"]["security"]  # optional on this server
    bad = client.post("/v1/search", json={"query": "x"}, headers={PRINCIPAL_HEADER: "user:x"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_query"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("10.1.2.3", False), ("planner.internal", False),
    ("localhost.evil.example", False),
])
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_check_bind(tmp_path: Path) -> None:
    settings = Settings.from_env({}, home=tmp_path)
    check_bind(settings, "127.0.0.1")
    with pytest.raises(ConfigError, match="usl apikey create"):
        check_bind(settings, "0.0.0.0")
    check_bind(Settings.from_env({"USL_API_ALLOW_UNAUTHENTICATED": "1"}, home=tmp_path), "0.0.0.0")
    create_key(keys_path(settings), "tenant:a/user:b", "only")
    check_bind(settings, "0.0.0.0")
    revoke_key(keys_path(settings), "only")
    with pytest.raises(ConfigError):
        check_bind(settings, "0.0.0.0")


@pytest.mark.parametrize(("host", "loopback"), [("[::1]", True), ("::1", True), ("[::]", False), ("::", False),
                                               ("fe80::1", False)])
def test_check_bind_takes_ipv6_addresses_by_the_loopback_rule(tmp_path: Path, host: str, loopback: bool) -> None:
    """IPv6 addresses bind (bare, ``usl serve`` strips the brackets) under the rule IPv4 ones do:
    loopback without keys, anything else only with keys."""
    if loopback:
        check_bind(Settings.from_env({}, home=tmp_path), host)
    else:
        with pytest.raises(ConfigError, match="without API keys"):
            check_bind(Settings.from_env({}, home=tmp_path), host)


@pytest.mark.parametrize(("header", "extra", "allowed"), [
    ("localhost", "", True), ("localhost:8765", "", True), ("LocalHost.", "", True),
    ("127.0.0.1", "", True), ("127.0.0.1:1", "", True), ("127.200.0.1", "", True),
    ("[::1]", "", True), ("[::1]:8765", "", True),
    ("", "", False), ("evil.example", "", False), ("localhost.evil.example", "", False),
    ("127.0.0.1.nip.io:8765", "", False), ("::1", "", True), ("[::1]x", "", False),
    ("[::ffff:127.0.0.1]", "", False), ("0.0.0.0", "", False), ("192.168.1.1:80", "", False),
    ("localhost:8765:1", "", False), ("usl.internal:8765", "usl.internal", True),
    ("USL.internal", " usl.internal ,other ", True), ("other.", "usl.internal,other", True),
    ("evil.example", "usl.internal", False), ("evil.example", "*", True),
    ("lоcalhost", "", False),
])
def test_which_host_headers_a_keyless_api_answers(header: str, extra: str, allowed: bool) -> None:
    assert host_allowed(header, allowed_hosts(extra)) is allowed


@pytest.mark.parametrize("how", ["serve --host", "serve USL_API_HOST", "up USL_API_HOST"])
def test_a_public_bind_without_keys_is_refused(make_settings: Callable[..., Settings], how: str) -> None:
    settings = make_settings()
    command, _, source = how.partition(" ")
    args = [command, "--port", str(free_port())]
    env = settings_env(settings)
    if source == "--host":
        args += ["--host", "0.0.0.0"]
    else:
        env["USL_API_HOST"] = "0.0.0.0"
    done = subprocess.run([sys.executable, "-m", "deploy.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to serve the API on 0.0.0.0"), lines
    assert "usl apikey create" in lines[0] and "Traceback" not in done.stderr
    assert not (Path(settings.home) / "run").exists() or not list((Path(settings.home) / "run").iterdir())


@pytest.fixture
def public_api(make_settings: Callable[..., Settings]) -> Iterator[tuple[Stack, str, str]]:
    """``usl serve --host 0.0.0.0`` under real uvicorn with one key, over a log of one
    session (answered by the tail scan): (stack, base URL, key)."""
    settings = make_settings()
    key, _ = create_key(keys_path(settings), ALICE, "alice")
    stack = Stack(settings)
    append_events(settings, session_events("public-1", turns=2, seed=1,
                                           acl={"tenant": "acme", "read": ["user:alice"]}))
    port = free_port()
    try:
        stack.start("api", "serve", "--host", "0.0.0.0", "--port", str(port))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).json().get("ready"):
                    break
            except httpx.HTTPError:
                pass
            assert stack.procs["api"].poll() is None, stack.log_text("api")[-3000:]
            assert time.monotonic() < deadline, "the API did not become ready"
            time.sleep(0.3)
        yield stack, base, key
    finally:
        stack.close()
    log = stack.log_text("api")
    assert "planner API on http://0.0.0.0:" in log
    assert key not in log and key[len(KEY_PREFIX):][:16] not in log, "the API key reached the log"


def test_a_keyed_public_server_answers_only_with_a_key(public_api: tuple[Stack, str, str]) -> None:
    _stack, base, key = public_api
    assert_unauthorized(httpx.get(f"{base}/v1/status", timeout=30))
    assert_unauthorized(httpx.get(f"{base}/v1/status", headers={"Authorization": "Bearer usl_nope"},
                                  timeout=30))
    assert httpx.get(f"{base}/v1/status", headers={"Authorization": f"Bearer {key}"},
                     timeout=30).status_code == 200
    searched = httpx.post(f"{base}/v1/search", json={"query": "please", "freshness": "latest"},
                          headers={"X-API-Key": key}, timeout=60)
    assert searched.status_code == 200 and searched.json()["results"], searched.text
    assert key not in httpx.get(f"{base}/metrics", timeout=30).text


def test_the_search_page_sends_the_key_it_keeps_in_the_tab(public_api: tuple[Stack, str, str]) -> None:
    """Without a key the page shows the 401; with one typed into its field it searches and
    polls status; the key stays in sessionStorage only, never in the URL or localStorage."""
    from tests.browser import Browser, find_chromium

    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    _stack, base, key = public_api
    expected = httpx.post(f"{base}/v1/search", json={"query": "please", "freshness": "latest", "k": 5},
                          headers={"Authorization": f"Bearer {key}"}, timeout=60).json()
    with Browser(binary) as page:
        page.goto(f"{base}/?q=please&freshness=latest&k=5")
        page.wait_for("document.body.dataset.search === 'error'", what="the unauthenticated search")
        error = page.evaluate("document.getElementById('error').textContent")
        assert error.startswith("401 unauthorized"), error
        page.wait_for("document.getElementById('status-updated').textContent.includes('API key')",
                      what="the status view to ask for a key")
        page.evaluate(f"document.getElementById('apikey').value = {json.dumps(key)};"
                      "document.getElementById('search-form').requestSubmit(); true")
        page.wait_for("document.body.dataset.search === 'done'", what="the keyed search")
        chunk_ids = page.evaluate("[...document.querySelectorAll('#results li.hit')].map((li) => li.dataset.chunkId)")
        assert chunk_ids == [hit["chunkId"] for hit in expected["results"]] and chunk_ids
        page.wait_for("Number(document.getElementById('status').dataset.polls || 0) >= 1",
                      what="a status poll with the key")
        # The lag history refused at load (no key yet) is asked for again with the key.
        page.wait_for("Number(document.getElementById('status').dataset.serverSamples || 0) >= 1",
                      what="the server's lag history with the key")
        stored = page.evaluate("({session: sessionStorage.getItem('usl.apiKey'), local: localStorage.length,"
                               " url: window.location.href})")
        assert stored["session"] == key and stored["local"] == 0
        assert key not in stored["url"] and key[len(KEY_PREFIX):][:16] not in stored["url"]
        page.goto(f"{base}/")  # the same tab keeps the key
        assert page.evaluate("document.getElementById('apikey').value") == key


def test_two_different_keys_in_one_request_are_refused() -> None:
    """Found by a new user: with `Authorization: Bearer K1` and `X-API-Key: K2` the Bearer key
    won without a word; which principal a request runs as is not for the server to guess."""
    from planner.auth import presented_key
    from planner.exceptions import Unauthorized

    assert presented_key({"authorization": "Bearer k1"}) == "k1"
    assert presented_key({"x-api-key": "k2"}) == "k2"
    assert presented_key({"authorization": "Bearer k1", "x-api-key": "k1"}) == "k1"
    assert presented_key({}) is None
    with pytest.raises(Unauthorized, match="two different API keys") as refused:
        presented_key({"authorization": "Bearer k1", "x-api-key": "k2"})
    assert "k1" not in str(refused.value) and "k2" not in str(refused.value)
