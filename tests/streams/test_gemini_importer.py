"""Gemini CLI chat recordings (a public example, tests/fixtures/importers/gemini_cli/SOURCE.md),
as JSONL and as the JSON document Gemini CLI writes, → ASP."""

from __future__ import annotations

from pathlib import Path

import orjson

from streams.importers import Accepted, Rejected, detect_format, iter_records

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "gemini_cli" / \
    "session-rejection-gemini-001.jsonl"


def events(path: Path) -> list[dict]:
    items = list(iter_records(path))
    assert not [i for i in items if isinstance(i, Rejected)], items
    return [i.event for i in items if isinstance(i, Accepted)]


def as_document(tmp_path: Path) -> Path:
    header, *messages = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]
    path = tmp_path / "session-2025-12-06T15-00-rejection.json"
    path.write_bytes(orjson.dumps({**header, "messages": messages}, option=orjson.OPT_INDENT_2))
    return path


def test_turns_replies_thoughts_and_tool_calls():
    assert detect_format(FIXTURE) == "gemini-cli"
    found = events(FIXTURE)
    assert {e["sessionId"] for e in found} == {"rejection-gemini-001"}
    assert found[0]["type"] == "session.started" and found[0]["fields"]["source"] == "gemini-cli"
    users = [e["fields"]["text"] for e in found if e["type"] == "message" and e.get("role") == "user"]
    assert users[0] == "Edit the config file to change the port to 9000" and len(users) == 4
    assert sum(e["type"] == "turn.started" for e in found) == 4 == sum(e["type"] == "turn.ended" for e in found)
    replies = [e for e in found if e["type"] == "message" and e.get("role") == "assistant"
               and e.get("visibility") != "hidden"]
    assert replies[0]["fields"]["model"] == "gemini-2.5-pro"
    assert replies[0]["fields"]["usage"] == {"inputTokens": 100, "outputTokens": 50}
    calls = {e["fields"]["toolCallId"]: e for e in found if e["type"] == "tool.call"}
    results = {e["fields"]["toolCallId"]: e for e in found if e["type"] == "tool.result"}
    assert set(calls) == set(results) == {"edit_file-001", "edit_file-002", "read_file-001", "edit_file-003"}
    assert results["edit_file-002"]["fields"]["status"] == "error"
    assert "0 occurrences" in results["edit_file-002"]["fields"]["output"]
    assert results["read_file-001"]["parentEventId"] == calls["read_file-001"]["eventId"]
    assert calls["edit_file-001"]["fields"]["input"]["file_path"] == "config.json"
    thoughts = [e for e in found if e["fields"].get("kind") == "thinking"]
    assert len(thoughts) == 5 and all(e["visibility"] == "hidden" for e in thoughts)


def test_the_json_document_yields_the_same_events(tmp_path):
    document = as_document(tmp_path)
    assert detect_format(document) == "gemini-cli"
    strip = [{k: v for k, v in e.items() if k != "payload"} for e in events(document)]
    assert [e["eventId"] for e in strip] == [e["eventId"] for e in events(FIXTURE)]


def test_follow_reads_a_rewritten_recording_once(tmp_path):
    from streams.follow import Follower, PositionStore
    from streams.testing import Clock, MemoryL1

    header, *messages = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]
    chats = tmp_path / "tmp" / "abc" / "chats"
    chats.mkdir(parents=True)
    recording = chats / "session-1.json"
    l1, clock = MemoryL1(), Clock()
    tail = Follower([tmp_path / "tmp"], appender=l1, store=PositionStore(tmp_path / "home"),
                    idle_seconds=5.0, clock=clock)
    for count in range(1, len(messages) + 1):  # Gemini CLI rewrites the whole file per message
        recording.write_bytes(orjson.dumps({**header, "messages": messages[:count]}))
        tail.poll()
    recording.write_bytes(b'{"sessionId": "rejection-gemini-001", "messa')  # caught mid-write
    tail.poll()
    recording.write_bytes(orjson.dumps({**header, "messages": messages}))
    tail.poll()
    clock.now += 60  # idle: the open turn's end goes out
    tail.poll()
    assert max(l1.counts().values()) == 1 and not l1.dead
    assert set(l1.counts()) == {e["eventId"] for e in events(as_document(tmp_path))}


def test_an_answer_ends_its_turn_and_a_model_first_recording_leaves_no_unit_open(tmp_path):
    """The model's answer that calls no tool ends the turn (a followed recording's last turn is
    chunked at once); a reply outside every turn (a recording that opens with the model, or a
    second reply after an answer) opens a turn of its own instead of a unit nothing closes."""
    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer

    found = events(FIXTURE)
    answer = next(i for i, e in enumerate(found) if e["fields"].get("text", "").startswith("You're welcome"))
    assert found[answer + 1]["type"] == "turn.ended" and answer + 2 == len(found)
    header, *messages = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]
    model_first = tmp_path / "model-first.jsonl"
    replies = [m for m in messages if m.get("type") == "gemini"]
    model_first.write_bytes(b"\n".join(orjson.dumps(m) for m in [header, replies[-1], replies[0], replies[-1] | {
        "id": "again", "content": "One more thing: restart the service."}]) + b"\n")
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")
    for path in (FIXTURE, model_first):
        stream = events(path)
        assert all(e.get("turnId") for e in stream if e["type"] in ("message", "tool.call", "tool.result", "error"))
        state = chunker.new_state(stream[0]["sessionId"])
        for seq, event in enumerate(stream, start=1):
            chunker.on_event(state, event["logId"], seq, event)
        assert chunker.open_min_seq(state) is None


def _upsert_log() -> list[dict]:
    """A recording as gemini-cli's ChatRecordingService writes its `.jsonl` (packages/core/src/
    services/chatRecordingService.ts): it appends a message again, whole, each time its tool
    calls or their results change, patches metadata with `$set` lines (`messages` after a
    compression), and marks a rewind with `$rewindTo`."""
    call = {"id": "t1", "name": "replace", "args": {"file_path": "README.md", "old_string": "teh", "new_string": "the"},
            "timestamp": "2026-09-29T14:00:03Z"}
    reply = {"id": "g1", "timestamp": "2026-09-29T14:00:02Z", "type": "gemini", "content": "Fixing the typo.",
             "model": "gemini-2.5-pro", "tokens": {"input": 100, "output": 20, "cached": 0, "total": 120}}
    done = {**call, "status": "success", "result": [
        {"functionResponse": {"id": "t1", "name": "replace", "response": {"output": "Successfully modified README.md"}}}]}
    return [
        {"sessionId": "g-123", "projectHash": "abc", "startTime": "2026-09-29T14:00:00Z",
         "lastUpdated": "2026-09-29T14:00:00Z", "kind": "main"},
        {"id": "u1", "timestamp": "2026-09-29T14:00:01Z", "type": "user", "content": [{"text": "fix the typo in README"}]},
        {"$set": {"lastUpdated": "2026-09-29T14:00:02Z"}},
        reply,
        {**reply, "toolCalls": [{**call, "status": "executing", "result": None}]},
        {**reply, "toolCalls": [done]},
        {"id": "g2", "timestamp": "2026-09-29T14:00:05Z", "type": "gemini", "content": "Fixed.", "model": "gemini-2.5-pro"},
        {"$set": {"summary": "Fix README typo"}},
        {"id": "u2", "timestamp": "2026-09-29T14:01:00Z", "type": "user", "content": [{"text": "now in French"}]},
        {"$rewindTo": "u2"},
        {"$set": {"messages": [
            {"id": "u1", "timestamp": "2026-09-29T14:00:01Z", "type": "user", "content": [{"text": "fix the typo in README"}]},
            {"id": "s1", "timestamp": "2026-09-29T14:02:00Z", "type": "user", "content": [{"text": "<state_snapshot>typo fixed</state_snapshot>"}]}]}},
        {"id": "u3", "timestamp": "2026-09-29T14:02:01Z", "type": "user", "content": [{"text": "now in German"}]},
    ]


def test_an_upsert_log_recording_gives_each_event_once_with_the_final_result(tmp_path: Path) -> None:
    """The `$set` and `$rewindTo` lines were dead-lettered as foreign records, and a message's
    later copies emitted its events again under the same ids: the call's result as the copy
    recording it `executing` said it (an error, no output) stood, the real output was dropped."""
    path = tmp_path / "session-2026-09-29T14-00-g-123abc.jsonl"
    lines = [orjson.dumps(record) + b"\n" for record in _upsert_log()]
    path.write_bytes(b"".join(lines))
    found = events(path)
    assert len({e["eventId"] for e in found}) == len(found)
    results = [e for e in found if e["type"] == "tool.result"]
    assert [(r["fields"]["status"], r["fields"]["output"]) for r in results] == [("ok", "Successfully modified README.md")]
    assert [e["fields"]["text"] for e in found if e["type"] == "message" and e["role"] == "user"] == [
        "fix the typo in README", "now in French", "<state_snapshot>typo fixed</state_snapshot>", "now in German"]
    assert [e["fields"]["text"] for e in found if e["type"] == "message" and e["role"] == "assistant"] == [
        "Fixing the typo.", "Fixed."]
    assert [(e["type"], e["fields"]) for e in found if e["type"] in ("x.gemini-cli.set", "x.gemini-cli.rewind")] == [
        ("x.gemini-cli.set", {"keys": ["lastUpdated"]}), ("x.gemini-cli.set", {"keys": ["summary"]}),
        ("x.gemini-cli.rewind", {"messageId": "u2"}), ("x.gemini-cli.set", {"keys": ["messages"]})]
    reply = next(e for e in found if e["fields"].get("text") == "Fixing the typo.")
    call = next(e for e in found if e["type"] == "tool.call")
    # The reply's text came first and ended the turn (as it did for a follower that read only
    # that copy): its calls, written into a later copy, are a turn of their own.
    assert call["turnId"] == results[0]["turnId"] != reply["turnId"]
    assert all(e.get("turnId") for e in found if e["type"] in ("message", "tool.call", "tool.result"))
    # A follower that read the file while the call ran said nothing the finished file contradicts.
    for cut in range(2, len(lines)):
        path.write_bytes(b"".join(lines[:cut]))
        prefix = {e["eventId"]: e for e in events(path) if not e["type"].startswith(("turn.", "session."))}
        assert all(prefix[key] == event for event in found if (key := event["eventId"]) in prefix)
        assert set(prefix) <= {e["eventId"] for e in found}


def test_a_followed_upsert_log_recording_appends_what_a_one_shot_import_does(tmp_path: Path) -> None:
    """Followed line by line as Gemini CLI writes it: nothing dead-lettered, each event once,
    and, once idle, what the one-shot import of the finished file gives (the final result)."""
    from streams.follow import Follower, PositionStore
    from streams.testing import Clock, MemoryL1

    live = tmp_path / "chats" / "session-2026-09-29T14-00-g-123abc.jsonl"
    live.parent.mkdir()
    live.write_bytes(b"")
    l1, clock = MemoryL1(), Clock()
    tail = Follower([live.parent], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0, clock=clock)
    tail.poll()
    for record in _upsert_log():
        with live.open("ab") as handle:
            handle.write(orjson.dumps(record) + b"\n")
        tail.poll()
    clock.now += 10
    tail.poll()
    assert not l1.dead and max(l1.counts().values()) == 1
    # The summary (the session's title) came after the session started: the follower sent its
    # session.started once more, titled, under an eventId of its own.
    one_shot = {e["eventId"] for e in events(live)}
    amended = [e for e in l1.log if e["eventId"] not in one_shot]
    assert [(e["type"], e["fields"].get("title")) for e in amended] == [("session.started", "Fix README typo")]
    assert set(l1.counts()) - {amended[0]["eventId"]} == one_shot
    assert [(e["fields"]["status"], e["fields"]["output"]) for e in l1.log if e["type"] == "tool.result"] == [
        ("ok", "Successfully modified README.md")]


def test_the_summary_gemini_cli_generates_is_the_session_title(tmp_path: Path) -> None:
    """Gemini CLI titles a session with a one-line summary (sessionSummaryService, listed by
    `/resume`): a `$set` line of the JSONL recording, the header a resumed session's file
    opens with, or the document's `summary`. It stayed a hidden `x.gemini-cli.set`: the
    session had no title. The last one written titles it."""
    log = _upsert_log()
    path = tmp_path / "session-2026-09-29T14-00-g-123abc.jsonl"
    path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in
                              [*log, {"$set": {"summary": "Fix README typo, translate it"}}]))
    (started,) = [e for e in events(path) if e["type"] == "session.started"]
    assert started["fields"]["title"] == "Fix README typo, translate it"
    resumed = tmp_path / "session-2026-09-30T09-00-g-123abc.jsonl"
    resumed.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in
                                 [{**log[0], "summary": "Fix README typo"}, log[1]]))
    (started,) = [e for e in events(resumed) if e["type"] == "session.started"]
    assert started["fields"]["title"] == "Fix README typo"
    document = tmp_path / "session-2026-09-29T14-00-g-123abc.json"
    document.write_bytes(orjson.dumps({**log[0], "summary": "Fix README typo", "messages": [log[1]]}))
    (started,) = [e for e in events(document) if e["type"] == "session.started"]
    assert started["fields"]["title"] == "Fix README typo"
