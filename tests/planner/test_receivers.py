"""POST /v1/events against the real broker: answers after L1 committed, dedupes by eventId,
lists bad events by index, and a key writes only its own tenant's events."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
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


def test_the_log_may_be_named_in_the_query_string_as_for_traces(api):
    """Found by a new user: `POST /v1/events?log=ev` (as /v1/traces takes it) appended to
    'default', answered 200, and `usl search --log ev` said there is no log 'ev'."""
    settings, client, key_a, _key_b = api
    events = [{key: value for key, value in event.items() if key != "logId"}  # as a plain producer sends them
              for event in acme(session_events("s-qlog", turns=1))]
    answer = client.post("/v1/events?log=ev", json={"events": events}, headers={"Authorization": f"Bearer {key_a}"})
    assert answer.status_code == 200 and answer.json()["appended"] == len(events), answer.text
    assert {e["eventId"] for e in l1_events(settings, "ev")} == {e["eventId"] for e in events}
    assert l1_events(settings) == []
    same = client.post("/v1/events?log=ev", json={"events": events, "log": "ev"},
                       headers={"Authorization": f"Bearer {key_a}"})
    assert same.status_code == 200 and same.json()["duplicates"] == len(events)
    twice = client.post("/v1/events?log=ev", json={"events": events, "log": "other"},
                        headers={"Authorization": f"Bearer {key_a}"})
    assert twice.status_code == 400 and "named twice" in twice.json()["error"]["message"]
    bad = client.post("/v1/events?log=no%20spaces", json={"events": events}, headers={"Authorization": f"Bearer {key_a}"})
    assert bad.status_code == 400, bad.text


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


def test_only_a_principal_the_list_admits_changes_a_sessions_access_list(api):
    """Found by a new user: any key of a tenant could post a `session.acl` naming its own user
    on a private session of another user of that tenant, and search, SQL and export then showed
    it the whole session. A key the session's current list does not admit may still write to
    the session (a collector writes its users' sessions), and restate the list it has, but not
    change it; one the list admits may (a revocation by the session's user)."""
    settings, client, key_alice, _key_b = api
    key_bob, _ = create_key(keys_path(settings), "tenant:acme/user:bob", "acme-bob")
    private = {"tenant": "acme", "read": ["user:alice"]}
    events = [{**e, "acl": private} for e in session_events("s-private", turns=1)]
    assert post(client, key_alice, {"events": events[:2]}).json()["appended"] == 2
    grab = {**events[0], "eventId": "grab", "type": "session.acl", "fields": {}, "visibility": "hidden",
            "acl": {"tenant": "acme", "read": ["user:alice", "user:bob"]}}
    bare = {key: value for key, value in events[2].items() if key != "acl"}
    answer = post(client, key_bob, {"events": [grab, bare, events[3]]}).json()
    assert [r["index"] for r in answer["rejected"]] == [0, 1], answer  # the bare one goes with the list
    assert "may not change it" in answer["rejected"][0]["reason"]
    assert answer["appended"] == 1  # the same list, restated: written, no change
    widen = {**grab, "eventId": "widen", "acl": {"tenant": "acme", "read": ["*"]}}
    assert post(client, key_bob, {"events": [widen]}).json()["rejected"][0]["index"] == 0
    assert {e["eventId"] for e in l1_events(settings)} == {e["eventId"] for e in events[:2]} | {events[3]["eventId"]}
    # The session's user may change it, and after that the key it admits may too.
    share = {**grab, "eventId": "share"}
    assert post(client, key_alice, {"events": [share]}).json()["appended"] == 1
    back = {**grab, "eventId": "back", "acl": private}
    assert post(client, key_bob, {"events": [back]}).json()["appended"] == 1


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


def test_compressed_bodies_are_read_and_bounded_after_decompression(make_settings):
    """gzip and deflate bodies are what they decode to; an unknown coding is a 415, a body that
    is not what its coding says a 400 naming it, and the size limit holds after inflating."""
    import gzip
    import json
    import zlib

    settings = make_settings(api_max_body_bytes=1 << 20)
    app = create_app(settings, settings.bootstrap_servers or "", planner=_NoPlanner())
    events = session_events("s-gzip", turns=1)
    body = json.dumps({"events": events}).encode()
    with TestClient(app, base_url="http://localhost") as client:
        def send(content: bytes, coding: str) -> Any:
            return client.post("/v1/events", content=content,
                               headers={"Content-Type": "application/json", "Content-Encoding": coding})

        answer = send(gzip.compress(body), "gzip")
        assert answer.status_code == 200, answer.text
        assert answer.json()["appended"] == len(events)
        assert send(zlib.compress(body), "deflate").json()["duplicates"] == len(events)
        plain = send(body, "gzip")
        assert plain.status_code == 400 and "not valid gzip data" in plain.json()["error"]["message"]
        unknown = send(body, "br")
        assert unknown.status_code == 415 and "'br' is not supported" in unknown.json()["error"]["message"]
        bomb = send(gzip.compress(b'{"events": [' + b" " * (4 << 20) + b"]}"), "gzip")
        assert bomb.status_code == 413 and "decompresses to more than" in bomb.json()["error"]["message"]
    assert len(l1_events(settings)) == len(events)


def test_an_oversized_event_is_cut_and_reported_not_refused(api):
    """As `usl ingest` does: the longest strings are cut, fields._truncated records it, and the
    answer lists it in truncated. A retry is a plain duplicate (the same cut), not a conflict."""
    settings, client, key_a, _key_b = api
    events = session_events("s-big", turns=1)
    result = next(i for i, e in enumerate(events) if e["type"] == "tool.result")
    events[result] = {**events[result], "fields": {**events[result]["fields"], "output": "line\n" * 400_000}}
    answer = post(client, key_a, {"events": events}).json()
    assert answer["appended"] == len(events) and answer["rejected"] == []
    assert [(t["index"], t["eventId"]) for t in answer["truncated"]] == [(result, events[result]["eventId"])]
    assert answer["truncated"][0]["originalBytes"] > settings.max_event_bytes >= answer["truncated"][0]["limitBytes"]
    stored = {e["eventId"]: e for e in l1_events(settings)}[events[result]["eventId"]]
    assert stored["fields"]["_truncated"]["originalBytes"] == answer["truncated"][0]["originalBytes"]
    assert stored["fields"]["output"].startswith("line\nline\n")
    again = post(client, key_a, {"events": events}).json()
    assert (again["appended"], again["duplicates"], again["conflicts"], again["truncated"]) == (0, len(events), [], [])


def test_events_whose_fields_are_not_what_their_type_needs_are_refused(api):
    """The QA's batch: a message whose text is a number or a list and a tool.call with a numeric
    toolName and no toolCallId were appended (search showed "[tool.call]", tool_calls a NULL
    toolName). Each is refused by index, naming the field; the valid events of the batch pass."""
    settings, client, key_a, _key_b = api
    events = acme(session_events("s-fields", turns=1))
    message = next(e for e in events if e["type"] == "message")
    bad = [{**message, "eventId": "f-1", "fields": {"text": 12345}},
           {**message, "eventId": "f-2", "fields": {"text": ["a", "b"]}},
           {**message, "eventId": "f-3", "type": "tool.call", "fields": {"toolName": 7}}]
    answer = post(client, key_a, {"events": [*events, *bad]}).json()
    assert answer["appended"] == len(events)
    reasons = {r["index"]: r["reason"] for r in answer["rejected"]}
    assert sorted(reasons) == [len(events), len(events) + 1, len(events) + 2]
    assert "fields.text of a message must be a string, not a number" in reasons[len(events)]
    assert "not an array" in reasons[len(events) + 1]
    assert "fields.toolName of a tool.call" in reasons[len(events) + 2]
    assert {e["eventId"] for e in l1_events(settings)} == {e["eventId"] for e in events}


def test_errors_say_what_is_wrong_in_json_terms(api):
    _settings, client, key_a, _key_b = api
    answer = post(client, key_a, {"events": [None, "event", 5, [1], True]}).json()
    assert [r["reason"] for r in answer["rejected"]] == [
        f"an event must be a JSON object, not {kind}" for kind in ("null", "a string", "a number", "an array", "a boolean")]
    headers = {"Authorization": f"Bearer {key_a}", "Content-Type": "application/json"}
    for body, says in ((b'{"events": [{"eventId": "\xed\xa0\x80\xff"}]}', "not UTF-8 text"),
                       (b'{"events": ' + b"[" * 3000 + b"]" * 3000 + b"}", "nested more than 1024 levels deep")):
        response = client.post("/v1/events", content=body, headers=headers)
        assert response.status_code == 400 and says in response.json()["error"]["message"], response.text


def test_a_lone_surrogate_escape_is_read_as_the_replacement_character_not_a_400(api):
    """QA (session 33): a JavaScript producer that cut a tool output between the two halves of
    an emoji (a length limit in UTF-16 units; JSON.stringify writes the half as ``\\ud83d``)
    had its whole batch refused with a 400, while ``usl ingest`` of the same events and the OTLP
    receivers read the half as U+FFFD. Read so here too: the batch is appended, a retry adds
    nothing, and a key given twice in one of its events still refuses that event alone."""
    settings, client, key_a, _key_b = api
    events = acme(session_events("s-surrogate", turns=1))
    result = next(i for i, e in enumerate(events) if e["type"] in ("tool.result", "message"))
    field = "output" if events[result]["type"] == "tool.result" else "text"
    events[result]["fields"][field] = "PLACEHOLDER"
    body = orjson.dumps({"events": events}).replace(b"PLACEHOLDER", b"build summary \\ud83d")
    headers = {"Authorization": f"Bearer {key_a}", "Content-Type": "application/json"}
    answer = client.post("/v1/events", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["appended"] == len(events) and not answer.json()["rejected"]
    held = {e["eventId"]: e for e in l1_events(settings)}
    assert held[events[result]["eventId"]]["fields"][field] == "build summary \ufffd"
    again = client.post("/v1/events", content=body, headers=headers).json()
    assert (again["appended"], again["duplicates"], again["conflicts"]) == (0, len(events), [])
    twice = (b'{"events": [{"eventId": "s-sur-2", "sessionId": "s-surrogate", "type": "message", '
             b'"time": "2026-01-01T00:00:00Z", "fields": {"text": "half \\ud83d"}, "fields": {}}]}')
    answer = client.post("/v1/events", content=twice, headers=headers).json()
    assert answer["appended"] == 0 and "duplicate key 'fields'" in answer["rejected"][0]["reason"]


def test_the_same_event_id_with_other_content_is_a_conflict(api):
    """Counted among the duplicates (the first copy stands), and listed in conflicts: content
    changed under an eventId is a producer bug it should hear of. What the receiver added (a
    new session's acl, a frame's turnId) is no difference."""
    _settings, client, key_a, _key_b = api
    events = session_events("s-conflict", turns=1)
    loose = [{k: v for k, v in e.items() if k != "turnId"} for e in events if not e["type"].startswith("turn.")]
    assert post(client, key_a, {"events": loose}).json()["appended"] == len(loose)
    message = next(i for i, e in enumerate(loose) if e["type"] == "message")
    changed = {**loose[message], "fields": {"text": "something else"}}
    answer = post(client, key_a, {"events": [*loose[:message], changed, *loose[message + 1:]]}).json()
    assert (answer["appended"], answer["duplicates"]) == (0, len(loose))
    assert [(c["index"], c["eventId"]) for c in answer["conflicts"]] == [(message, changed["eventId"])]
    assert "different content" in answer["conflicts"][0]["reason"]
    retagged = {**loose[message], "acl": {"tenant": "acme", "read": ["user:alice"]}}
    answer = post(client, key_a, {"events": [retagged]}).json()
    assert [c["index"] for c in answer["conflicts"]] == [0] and "different acl" in answer["conflicts"][0]["reason"]


def test_a_copy_of_an_event_id_says_nothing_of_an_event_its_key_may_not_read(api):
    """Found by a new user: a duplicate's conflict said whether the posted copy's content equals
    the one L1 holds, for any caller, so another tenant (or a user of the tenant the session's
    list leaves out) could confirm a guess at a private event by posting it under its eventId;
    another tenant's copy was also counted a duplicate, where the stream refuses it
    (eventid_collision). Now another tenant's copy is refused, and only a reader hears of a
    conflict."""
    settings, client, key_alice, key_globex = api
    key_bob, _ = create_key(keys_path(settings), "tenant:acme/user:bob", "acme-bob")
    events = [{**e, "acl": {"tenant": "acme", "read": ["user:alice"]}} for e in session_events("s-guess", turns=1)]
    assert post(client, key_alice, {"events": events}).json()["appended"] == len(events)
    message = next(i for i, e in enumerate(events) if e["type"] == "message")
    right, wrong = events[message], {**events[message], "fields": {"text": "a wrong guess"}}
    for guess in (right, wrong):
        foreign = post(client, key_globex, {"events": [{**guess, "acl": {"tenant": "globex", "read": ["*"]}}]}).json()
        assert foreign["conflicts"] == [] and foreign["duplicates"] == 0
        assert "another tenant" in foreign["rejected"][0]["reason"]
        same_tenant = post(client, key_bob, {"events": [guess]}).json()
        assert (same_tenant["duplicates"], same_tenant["conflicts"], same_tenant["rejected"]) == (1, [], [])
    assert [c["index"] for c in post(client, key_alice, {"events": [wrong]}).json()["conflicts"]] == [0]
    assert len(l1_events(settings)) == len(events)


def test_a_replay_of_framed_events_appends_no_marker(api):
    """QA: a client that posted loose events one per request and then replays them in one
    request (or replays a suffix of an earlier batch) sends only events L1 holds. Their frame
    has new ids, and its markers used to go out alone: a second turn.ended for each earlier
    turn, which moved that turn's end in the SQL turns view, or an empty turn. Now a frame's
    markers go out only with an event of it that L1 did not hold, and turnsAdded counts them."""
    settings, client, key_a, _key_b = api
    events = acme([{k: v for k, v in e.items() if k != "turnId"} for e in session_events("s-replay", turns=1)
                   if not e["type"].startswith("turn.") and e["type"] != "session.started"])[:3]
    for event in events:
        answer = post(client, key_a, {"events": [event]}).json()
        assert (answer["appended"], answer["turnsAdded"]) == (1, 1)
    in_l1 = l1_events(settings)
    assert len(in_l1) == 3 * 3
    for replay in (events, events[1:], events[:2]):
        answer = post(client, key_a, {"events": replay}).json()
        assert (answer["appended"], answer["duplicates"], answer["turnsAdded"]) == (0, len(replay), 0)
    assert l1_events(settings) == in_l1

    # A replay that brings a new event still frames it: in the frame's turn (whose start L1
    # holds from the first post of events[1]), ended after it.
    new = {**events[-1], "eventId": "s-replay-new"}
    answer = post(client, key_a, {"events": [*events[1:], new]}).json()
    assert (answer["appended"], answer["duplicates"], answer["turnsAdded"]) == (1, 2, 1)
    added = l1_events(settings)[len(in_l1):]
    assert [e["type"] for e in added] == [new["type"], "turn.ended"]
    assert added[0]["turnId"] == added[1]["turnId"] == in_l1[3]["turnId"]
    fresh = {**events[-1], "eventId": "s-replay-fresh"}
    answer = post(client, key_a, {"events": [events[0], fresh]}).json()
    assert (answer["appended"], answer["duplicates"], answer["turnsAdded"]) == (1, 1, 1)


def test_refused_and_conflicting_events_are_dead_lettered(api):
    """QA: a refused event was named only in the answer; `usl deadletters` showed nothing, so
    an operator never saw what a producer sent wrong. Each refusal and each conflict is now a
    dead letter of stage receiver, naming the request's index, with its reason and the event."""
    from streams.l1 import read_dead_letters

    settings, client, key_a, _key_b = api
    events = acme(session_events("s-dead", turns=1))
    first = post(client, key_a, {"events": events}).json()
    assert first["appended"] == len(events) and not first["rejected"]
    assert read_dead_letters(settings.bootstrap_servers or "", settings) == []  # none for a clean batch
    message = next(i for i, e in enumerate(events) if e["type"] == "message")
    changed = {**events[message], "fields": {"text": "something else"}}
    bad = {**events[0], "eventId": "e-when", "time": "yesterday"}
    answer = post(client, key_a, {"events": [changed, bad, {"eventId": "x"}]}).json()
    assert [r["index"] for r in answer["rejected"]] == [1, 2] and len(answer["conflicts"]) == 1
    letters = read_dead_letters(settings.bootstrap_servers or "", settings, log_id="default")
    by_record = {letter["record"]: letter for letter in letters}
    assert set(by_record) == {"POST /v1/events events[0]", "POST /v1/events events[1]", "POST /v1/events events[2]"}
    assert {letter["stage"] for letter in letters} == {"receiver"}
    assert by_record["POST /v1/events events[1]"]["reason"] == answer["rejected"][0]["reason"]
    assert "e-when" in by_record["POST /v1/events events[1]"]["raw"]
    assert "different content" in by_record["POST /v1/events events[0]"]["reason"]


def test_a_retried_request_dead_letters_its_refused_events_once(api):
    """QA (session 33): a producer that re-sent a batch (a timeout, a 429 it retried) had each
    refused event dead-lettered once per copy, so one bad event was three letters in `usl
    deadletters` and `usl status`. The answer still names the refusal every time; the letter
    goes out once, whatever the event's place in the batch."""
    from streams.l1 import read_dead_letters

    settings, client, key_a, _key_b = api
    events = acme(session_events("s-retry-dead", turns=1))
    bad = {**events[1], "eventId": "e-retry-when", "time": "yesterday"}
    for body in ([*events, bad], [*events, bad], [bad, *events]):
        answer = post(client, key_a, {"events": body}).json()
        assert len(answer["rejected"]) == 1 and "time must be date-time" in answer["rejected"][0]["reason"]
    letters = read_dead_letters(settings.bootstrap_servers or "", settings, log_id="default")
    assert [letter["record"] for letter in letters] == [f"POST /v1/events events[{len(events)}]"]
    other = {**bad, "time": "tomorrow"}  # another refusal is a letter of its own
    post(client, key_a, {"events": [other]})
    assert len(read_dead_letters(settings.bootstrap_servers or "", settings, log_id="default")) == 2


def test_a_turn_posted_out_of_order_is_closed_and_a_retry_adds_nothing(api):
    """Found on a live stack: turn.ended posted before the turn's message and turn.started left
    the turn open after its end, and the log's indexes waited at it (`usl status`: waiting: an
    open turn holds seq N) with nothing to end it. The receiver closes it after its last event."""
    settings, client, key_a, _key_b = api
    turn = acme([e for e in session_events("s-ooo", turns=1) if e.get("turnId")])
    ended, others = turn[-1], turn[:-1]
    answer = post(client, key_a, {"events": [ended, *others[::-1]]}).json()
    assert (answer["appended"], answer["turnsAdded"], answer["rejected"]) == (len(turn), 0, [])
    in_l1 = l1_events(settings)
    assert [e["type"] for e in in_l1] == [ended["type"], *(e["type"] for e in others[::-1]), "turn.ended"]
    assert in_l1[-1]["turnId"] == ended["turnId"] and in_l1[-1]["eventId"] != ended["eventId"]
    again = post(client, key_a, {"events": [ended, *others[::-1]]}).json()
    assert (again["appended"], again["duplicates"], again["turnsAdded"]) == (0, len(turn), 0)
    assert l1_events(settings) == in_l1



def test_keys_that_differ_only_in_a_lone_surrogate_are_a_key_given_twice(api):
    """Review (session 33): 354110e read a body with a lone surrogate escape with the standard
    library and mended its strings after, not as ``usl ingest`` reads such a line (the escapes
    mended in the text, the text read as any line). Two keys of one object that differ only in
    their lone surrogate (``"a\\ud800"``, ``"a\\udbff"``) became one key, a value silently
    dropped, where ``usl ingest`` refuses the event for a key given twice."""
    from streams.exceptions import SchemaError
    from streams.importers.base import loads_with_lone_surrogates

    settings, client, key_a, _key_b = api
    headers = {"Authorization": f"Bearer {key_a}", "Content-Type": "application/json"}
    base = ('{"eventId": "s-sur-%s", "sessionId": "s-surrogate-2", "type": "message", '
            '"time": "2026-01-01T00:00:00Z", "acl": {"tenant": "acme", "read": ["*"]}, ')
    twice = base % "keys" + '"fields": {"text": "x", "a\\ud800": 1, "a\\udbff": 2}}'
    with pytest.raises(SchemaError, match="duplicate key"):
        loads_with_lone_surrogates(twice.encode())
    fine = base % "fine" + '"fields": {"text": "half \\ud83d"}}'
    response = client.post("/v1/events", content=f'{{"events": [{twice}, {fine}]}}'.encode(), headers=headers)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["appended"] == 1
    assert [r["index"] for r in answer["rejected"]] == [0] and "duplicate key 'a\ufffd'" in answer["rejected"][0]["reason"]
    assert [e["fields"] for e in l1_events(settings) if e["eventId"] == "s-sur-fine"] == [{"text": "half \ufffd"}]


def test_an_event_refused_for_a_number_json_cannot_store_is_no_500(api):
    """Review (session 33): c5ff9c5 wrote each refused event as JSON to name its dead letter
    before the letters' try: an event refused because it holds a number past 64 bits (``the
    event cannot be stored as JSON``) failed that too, and the request, its other events
    appended already, was a 500 that the producer retried. It is refused in a 200 and its
    dead letter holds the event as posted."""
    from streams.l1 import read_dead_letters

    settings, client, key_a, _key_b = api
    headers = {"Authorization": f"Bearer {key_a}", "Content-Type": "application/json"}
    base = ('{"eventId": "s-big-%s", "sessionId": "s-big", "type": "message", '
            '"time": "2026-01-01T00:00:00Z", "acl": {"tenant": "acme", "read": ["*"]}, ')
    big = base % "n" + '"fields": {"text": "x", "n": 123456789012345678901234567890}}'
    fine = base % "fine" + '"fields": {"text": "y"}}'
    for _ in range(2):
        response = client.post("/v1/events", content=f'{{"events": [{fine}, {big}]}}'.encode(), headers=headers)
        assert response.status_code == 200, response.text
        assert [r["index"] for r in response.json()["rejected"]] == [1]
        assert "cannot be stored as JSON" in response.json()["rejected"][0]["reason"]
    letters = read_dead_letters(settings.bootstrap_servers or "", settings, log_id="default")
    assert [letter["record"] for letter in letters] == ["POST /v1/events events[1]"]
    assert "123456789012345678901234567890" in letters[0]["raw"]


def test_two_copies_of_a_request_at_once_send_their_letter_when_the_first_send_fails(tmp_path):
    """Review (session 33): of two copies of a request settled at once, the second skipped the
    letter the first had marked as sent; when the first's send then failed (and unmarked it for
    a retry), neither copy sent it. One request's letters are now marked and sent at a time,
    and a letter is counted once sent."""
    receiver = EventReceiver(Settings(home=str(tmp_path)), "127.0.0.1:1")
    sending, release = threading.Event(), threading.Event()
    sent: list[str] = []

    class Letters:
        calls = 0

        def publish(self, *, record: str, **_: Any) -> None:
            Letters.calls += 1
            if Letters.calls == 1:  # the first copy's send stalls, then fails
                sending.set()
                release.wait(10)
                raise OSError("the broker went away")
            sent.append(record)

        def flush(self) -> None:
            pass

    receiver._dead = Letters()
    answer = {"appended": 0, "rejected": [{"index": 0, "reason": "time must be date-time"}]}
    raws = {0: {"eventId": "e-bad", "time": "yesterday"}}
    first = threading.Thread(target=receiver.settle, args=("/v1/events", "default", answer, raws))
    first.start()
    assert sending.wait(10)
    second = threading.Thread(target=receiver.settle, args=("/v1/events", "default", answer, raws))
    second.start()
    second.join(0.5)
    release.set()
    first.join(10)
    second.join(10)
    assert sent == ["POST /v1/events events[0]"]


def test_the_letter_of_a_refused_event_is_resolved_when_a_later_request_appends_it(api):
    """QA (session 36): a producer that fixed a refused event and sent it again saw its dead
    letter pending for good (`usl deadletters`, `usl status`): the letter named only its place in
    the first request (`POST /v1/events events[i]`), which no later request shares. A refused
    event that names its session and eventId is named in its letter by eventKey too, and
    appending it resolves the letter; a conflict's letter stays (that copy was not appended)."""
    from streams.l1 import read_dead_letters

    settings, client, key_a, _key_b = api
    bootstrap = settings.bootstrap_servers or ""
    events = acme(session_events("s-fixed", turns=1))
    message = next(i for i, e in enumerate(events) if e["type"] == "message")
    broken = {**events[message], "time": "yesterday"}
    nameless = {"eventId": "e-no-session", "type": "message", "time": "yesterday", "fields": {"text": "x"}}
    first = post(client, key_a, {"events": [*events[:message], broken, nameless]}).json()
    assert [r["index"] for r in first["rejected"]] == [message, message + 1]
    letters = read_dead_letters(bootstrap, settings, log_id="default")
    assert len(letters) == 2 and sum("eventKey" in letter for letter in letters) == 1
    assert events[message]["eventId"] not in str([letter.get("eventKey") for letter in letters])  # a hash, not the id

    fixed = post(client, key_a, {"events": events}).json()  # the fixed event, with the rest of its turn
    assert fixed["appended"] == len(events) - message and not fixed["rejected"]
    pending = read_dead_letters(bootstrap, settings, log_id="default")
    assert [letter["record"] for letter in pending] == [f"POST /v1/events events[{message + 1}]"]  # no session named
    every = read_dead_letters(bootstrap, settings, log_id="default", resolved=True)
    assert [letter["record"] for letter in every if letter.get("resolvedAt")] == [f"POST /v1/events events[{message}]"]

    # Refused again after that, the same event is a letter again; a conflict's letter is never resolved.
    post(client, key_a, {"events": [{**broken, "eventId": "e-again", "time": "yesterday"}]})
    changed = {**events[message], "fields": {"text": "something else"}}
    assert len(post(client, key_a, {"events": [changed]}).json()["conflicts"]) == 1
    post(client, key_a, {"events": [events[message]]})  # a plain duplicate of the held copy
    records = sorted(letter["record"] for letter in read_dead_letters(bootstrap, settings, log_id="default"))
    assert records == ["POST /v1/events events[0]", "POST /v1/events events[0]", f"POST /v1/events events[{message + 1}]"]
    post(client, key_a, {"events": [broken]})
    assert len(read_dead_letters(bootstrap, settings, log_id="default")) == 4  # pending again, once
