"""POST /v1/events against the real broker: answers after L1 committed, dedupes by eventId,
lists bad events by index, and a key writes only its own tenant's events."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from planner.acl import Principal
from planner.api import create_app
from planner.auth import create_key, keys_path
from planner.receivers import EventReceiver, TooManyRequests
from streams.l1 import L1Reader
from streams.settings import Settings
from streams.testing import session_events

pytestmark = pytest.mark.kafka


class _NoPlanner:
    """The receivers never touch the planner."""

    def close(self) -> None:
        pass


@pytest.fixture
def api(make_settings: Any) -> Iterator[tuple[Settings, TestClient, str, str]]:
    settings = make_settings()
    key_a, _ = create_key(keys_path(settings), "tenant:acme/user:alice", "alice")
    key_b, _ = create_key(keys_path(settings), "tenant:globex/user:bob", "bob")
    app = create_app(settings, settings.bootstrap_servers or "", planner=_NoPlanner())
    with TestClient(app, base_url="http://localhost") as client:
        yield settings, client, key_a, key_b


def post(client: TestClient, key: str | None, body: Any) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.post("/v1/events", json=body, headers=headers)


def l1_events(settings: Settings, log_id: str = "default") -> list[dict[str, Any]]:
    reader = L1Reader(settings.bootstrap_servers or "", settings)
    try:
        return [event for _seq, event in reader.read(log_id, 1)]
    finally:
        reader.close()


def acme(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**e, "acl": {"tenant": "acme", "read": ["*"]}} for e in events]


def test_appends_after_commit_dedupes_and_lists_bad_events(api):
    settings, client, key_a, _key_b = api
    events = acme(session_events("s-recv", turns=2))
    bad = [{"eventId": "x"}, "not an event", {**events[0], "eventId": "e-bad", "time": "yesterday"}]
    response = post(client, key_a, {"events": [*events[:3], *bad, *events[3:]]})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["appended"] == len(events) and answer["duplicates"] == 0
    assert [r["index"] for r in answer["rejected"]] == [3, 4, 5]
    assert all(r["reason"] for r in answer["rejected"])
    in_l1 = l1_events(settings)
    assert answer["l1CommittedSeq"] >= len(in_l1) == len(events)  # acknowledged = committed
    again = post(client, key_a, {"events": events}).json()
    assert again["appended"] == 0 and again["duplicates"] == len(events)
    assert Counter(e["eventId"] for e in l1_events(settings)) == Counter(e["eventId"] for e in events)


def test_a_key_writes_only_its_own_tenants_events(api):
    settings, client, key_a, key_b = api
    events = session_events("s-acme", turns=1)
    # Without acl: the session is new, so it becomes acme's with the tenant-wide default.
    assert post(client, key_a, {"events": events[:2]}).json()["appended"] == 2
    # globex may not claim acme's events, nor write into acme's session.
    foreign = {**events[2], "acl": {"tenant": "acme", "read": ["*"]}}
    into = {**events[3], "acl": {"tenant": "globex", "read": ["*"]}}
    bare = dict(events[4])
    answer = post(client, key_b, {"events": [foreign, into, bare]}).json()
    assert answer["appended"] == 0 and [r["index"] for r in answer["rejected"]] == [0, 1, 2]
    assert "tenant" in answer["rejected"][0]["reason"]
    stored = l1_events(settings)
    assert stored[0]["acl"] == {"tenant": "acme", "read": ["*"]}  # the session's creator owns it
    assert "acl" not in stored[1]  # a later event keeps the session's access list
    assert all(e.get("acl", {"tenant": "acme"})["tenant"] == "acme" for e in stored)
    # No key, or a key that is not one: 401 before anything is read.
    assert post(client, None, {"events": events}).status_code == 401
    assert post(client, "usl_not_a_key", {"events": events}).status_code == 401
    assert len(l1_events(settings)) == 2


def test_an_event_with_a_repeated_key_is_refused_by_itself(api):
    """As the worker dead-letters it (duplicate_keys): which copy of a repeated key counts
    depends on the parser, so neither is appended; the other events of the batch are."""
    import json

    settings, client, key_a, _key_b = api
    events = acme(session_events("s-dupkeys", turns=1))
    texts = [json.dumps(event) for event in events]
    texts[1] = texts[1][:-1] + ', "sessionId": "s-globex-victim"}'  # a second sessionId
    texts[3] = texts[3].replace('"acl": {', '"acl": {"tenant": "globex", ', 1)  # nested: acl.tenant twice
    body = '{"events": [' + ", ".join(texts) + "]}"
    response = client.post("/v1/events", content=body.encode(),
                           headers={"Authorization": f"Bearer {key_a}", "Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [r["index"] for r in answer["rejected"]] == [1, 3]
    assert "'sessionId'" in answer["rejected"][0]["reason"] and "'tenant'" in answer["rejected"][1]["reason"]
    assert all("duplicate key" in r["reason"] for r in answer["rejected"])
    assert answer["appended"] == len(events) - 2
    stored = l1_events(settings)
    assert {e["eventId"] for e in stored} == {e["eventId"] for i, e in enumerate(events) if i not in (1, 3)}
    assert all(e["sessionId"] == "s-dupkeys" and e["acl"]["tenant"] == "acme" for e in stored)
    # A key repeated in the envelope is the whole request's fault.
    twice = '{"events": [], "events": [' + texts[0] + "]}"
    refused = client.post("/v1/events", content=twice.encode(),
                          headers={"Authorization": f"Bearer {key_a}", "Content-Type": "application/json"})
    assert refused.status_code == 400 and "'events'" in refused.json()["error"]["message"]


def test_bad_bodies_are_400_with_the_error_shape(api):
    _settings, client, key_a, _key_b = api
    for body in ({}, {"events": {}}, [], {"events": [], "log": ""}, {"events": [{}] * 10001},
                 # a log no event can carry: refused whole, not every event rejected for its logId
                 {"events": session_events("s-bad-log"), "log": "team a"}, {"events": [], "log": "x" * 129}):
        response = post(client, key_a, body)
        assert response.status_code == 400, (body, response.text)
        assert set(response.json()) == {"error"}


def test_429_with_retry_after_when_l1_cannot_keep_up(make_settings, monkeypatch):
    settings = make_settings()
    receiver = EventReceiver(settings, settings.bootstrap_servers or "")
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow(*args: Any) -> dict[str, Any]:
        entered.release()
        release.wait(30)
        return {"appended": 0, "duplicates": 0, "rejected": [], "l1CommittedSeq": 0}

    monkeypatch.setattr(receiver, "_append_locked", slow)
    alice = Principal(tenant="acme", user="alice")
    threads = [threading.Thread(target=receiver.receive, args=([], alice, "default")) for _ in range(4)]
    for thread in threads:
        thread.start()
    entered.acquire(timeout=30)
    with pytest.raises(TooManyRequests):
        receiver.receive([], alice, "default")
    release.set()
    for thread in threads:
        thread.join(30)
    # ... and over HTTP the refusal carries Retry-After.
    from planner import receivers

    monkeypatch.setattr(receivers.EventReceiver, "receive",
                        lambda *a: (_ for _ in ()).throw(TooManyRequests("queued up")))
    app = create_app(settings, settings.bootstrap_servers or "", planner=_NoPlanner())
    with TestClient(app, base_url="http://localhost") as client:
        response = client.post("/v1/events", json={"events": []})
    assert response.status_code == 429 and int(response.headers["Retry-After"]) > 0
    assert response.json()["error"]["code"] == "too_many_requests"


def test_events_route_is_in_the_openapi_document():
    from planner.api import openapi

    document = openapi()
    post_events = document["paths"]["/v1/events"]["post"]
    assert {"200", "401", "429"} <= set(post_events["responses"])




def test_loose_events_are_framed_in_a_turn_once(api):
    """Events posted without turn markers get a turn of their own (streams.importers.frames): L1 holds them inside turn.started/turn.ended, the answer counts only
    the caller's events, and a retry appends nothing, markers included."""
    settings, client, key_a, _key_b = api
    events = acme([{**e, "turnId": None} for e in session_events("s-loose", turns=1)
                   if not e["type"].startswith("turn.")])
    events = [{k: v for k, v in e.items() if v is not None} for e in events]
    answer = post(client, key_a, {"events": events}).json()
    assert (answer["appended"], answer["duplicates"], answer["turnsAdded"]) == (len(events), 0, 1)
    in_l1 = l1_events(settings)
    assert [e["type"] for e in in_l1] == ["session.started", "turn.started",
                                          *[e["type"] for e in events[1:]], "turn.ended"]
    assert len({e.get("turnId") for e in in_l1[1:]}) == 1 and in_l1[1]["acl"]["tenant"] == "acme"
    again = post(client, key_a, {"events": events}).json()
    assert (again["appended"], again["duplicates"]) == (0, len(events))
    assert len(l1_events(settings)) == len(in_l1)


def test_an_event_refused_with_its_access_list_takes_its_sessions_later_events_with_it(api):
    """The QA's batch: a session's first event states an acl the key may not write (another
    tenant), the rest state none. Appended alone, they would have created the session with the
    caller's tenant-wide default read ["*"]: they are refused with it, each saying why, and so
    are their turn frames. An event stating an acl of its own sets the list again."""
    settings, client, _key_a, key_b = api
    loose = [{k: v for k, v in e.items() if k != "turnId"} for e in session_events("hp-s", turns=1)
             if not e["type"].startswith("turn.")][:4]
    private = {**loose[0], "eventId": "hp-1", "acl": {"tenant": "acme", "read": ["user:alice"]}}
    answer = post(client, key_b, {"events": [private, *loose[1:]]}).json()
    assert answer["appended"] == 0 and [r["index"] for r in answer["rejected"]] == [0, 1, 2, 3]
    assert "acl.tenant 'acme'" in answer["rejected"][0]["reason"]
    assert all("event 0 of this request" in r["reason"] for r in answer["rejected"][1:])
    assert l1_events(settings) == []  # no event, and no frame of a turn around them

    # A list the key may write, stated again, lets what follows through; an event accepted
    # before the refusal does not.
    own = {"tenant": "globex", "read": ["user:bob"]}
    events = session_events("hp-t", turns=1)
    batch = [{**events[0], "acl": own}, {**events[1], "acl": {"tenant": "acme", "read": ["*"]}},
             events[2], {**events[3], "acl": own}, events[4]]
    answer = post(client, key_b, {"events": batch}).json()
    assert [r["index"] for r in answer["rejected"]] == [1, 2] and answer["appended"] == 3
    stored = l1_events(settings)
    assert [e["eventId"] for e in stored] == [batch[i]["eventId"] for i in (0, 3, 4)]
    assert stored[0]["acl"] == stored[1]["acl"] == own and "acl" not in stored[2]
