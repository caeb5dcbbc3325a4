"""Chunker v1: unit tests and property tests (hypothesis) with the real wordllama tokenizer."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import zlib
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import streams.chunking as chunking
from streams.chunking import (
    Chunker,
    ChunkerConfig,
    chunk_stream,
    default_tokenizer,
    make_ticks,
    render_event,
)
from streams.chunking.split import split_text
from streams.exceptions import ConfigError

TARGET, OVERLAP, GAP = 40, 12, 300.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROPERTY = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    return make_chunker()


def make_chunker(target: int = TARGET, overlap: int = OVERLAP, gap: float = GAP) -> Chunker:
    config = ChunkerConfig(target_tokens=target, overlap_tokens=overlap, idle_gap_seconds=gap)
    return Chunker(config, default_tokenizer(), policy_hash="policy-test")


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def event(
    event_id: str, type_: str, *, session: str = "s1", turn: str | None = None,
    episode: str | None = None, role: str | None = None, t: float = 0.0, log: str = "default",
    visibility: str = "visible", acl: dict[str, Any] | None = None, **fields: Any,
) -> dict[str, Any]:
    return {
        "aspVersion": "1.0", "eventId": event_id, "logId": log, "sessionId": session,
        "runId": f"run-{session}", "turnId": turn, "episodeId": episode, "type": type_,
        "role": role, "time": at(t), "visibility": visibility,
        "acl": acl or {"tenant": "acme", "read": ["*"]}, "fields": fields,
    }


# -- generated logs -------------------------------------------------------------------------

WORDS = [
    "alpha", "beta", "files", "/home/[user]/src/app.py", "naïve", "日本語", "🙂", "résumé", "x=1",
    "\n", "  ", "déjà", "compile", "error:", '{"a": 1}', "the", "of", "kubectl", "Straße",
]
ACTIONS = (
    ["turn"] * 2 + ["user"] * 4 + ["assistant"] * 4 + ["call"] * 3 + ["result"] * 3
    + ["end_turn", "episode", "end_episode", "hidden", "custom", "acl", "error", "session_msg", "dup", "end_session"]
)
steps_strategy = st.lists(
    st.tuples(
        st.integers(0, 3),                                   # session
        st.sampled_from(ACTIONS),
        # Seconds since the previous event; producers' clocks may also step back.
        st.sampled_from([0] * 4 + [1] * 4 + [2, 5, 30, 120, 301, 900, -400]),
        st.one_of(st.lists(st.sampled_from(WORDS), max_size=3), st.lists(st.sampled_from(WORDS), max_size=80)),
        st.integers(1, 3),                                   # seq increment (seqs have gaps)
    ),
    min_size=1, max_size=70,
)


def build_log(steps: list[tuple[int, str, int, list[str], int]]) -> list[tuple[int, dict[str, Any]]]:
    """Turn drawn steps into a log-ordered list of (seq, event) over up to 4 sessions, 2 logs."""
    sessions: dict[int, dict[str, Any]] = {}
    out: list[tuple[int, dict[str, Any]]] = []
    clock, seq = 0.0, 0
    for index, (number, action, delta, words, step) in enumerate(steps):
        clock += delta
        seq += step
        ses = sessions.setdefault(number, {"turn": None, "episode": None, "n": 0, "history": []})
        session_id = f"s{number}"
        log = "default" if number % 2 == 0 else "other"
        text = " ".join(words)
        base = {"session": session_id, "turn": ses["turn"], "episode": ses["episode"], "t": clock, "log": log}
        eid = f"e{index}"
        if action == "turn":
            ses["turn"] = f"t{index}"
            new = event(eid, "turn.started", **{**base, "turn": ses["turn"]})
        elif action == "end_turn":
            new = event(eid, "turn.ended", **base)
            ses["turn"] = None
        elif action == "episode":
            ses["episode"] = f"ep{index}"
            new = event(eid, "episode.started", **{**base, "episode": ses["episode"]}, title=text)
        elif action == "end_episode":
            new = event(eid, "episode.ended", **base)
            ses["episode"] = None
        elif action in ("user", "assistant"):
            new = event(eid, "message", role=action, text=text, **base)
        elif action == "call":
            new = event(eid, "tool.call", role="assistant", toolName="Bash", input={"command": text, "n": len(words)}, **base)
        elif action == "result":
            new = event(eid, "tool.result", role="tool", toolName="Bash", status="ok" if len(words) % 2 else "error", output=text, **base)
        elif action == "hidden":
            new = event(eid, "message", role="assistant", visibility="hidden", text=text, **base)
        elif action == "custom":
            new = event(eid, "x.note", **base, text=text)
        elif action == "acl":
            new = event(eid, "session.acl", acl={"tenant": "acme", "read": [f"user:u{index}"]}, **{**base, "turn": None, "episode": None})
        elif action == "error":
            new = event(eid, "error", message=text or "boom", **base)
        elif action == "session_msg":
            new = event(eid, "message", role="system", text=text, **{**base, "turn": None, "episode": None})
        elif action == "dup" and ses["history"]:
            new = ses["history"][len(words) % len(ses["history"])]
        else:
            new = event(eid, "session.ended", **{**base, "turn": None, "episode": None})
            ses["turn"] = ses["episode"] = None
        ses["history"].append(new)
        out.append((seq, new))
    return out


def unit_key(ev: dict[str, Any]) -> str:
    if ev.get("episodeId"):
        return "episode:" + ev["episodeId"]
    if ev.get("turnId"):
        return "turn:" + ev["turnId"]
    return "session"


def canonical(chunks: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(chunk, sort_keys=True, ensure_ascii=False).encode() for chunk in chunks]


def first_occurrences(log: list[tuple[int, dict[str, Any]]]) -> dict[str, tuple[int, dict[str, Any]]]:
    seen: dict[str, tuple[int, dict[str, Any]]] = {}
    for seq, ev in log:
        seen.setdefault(ev["eventId"], (seq, ev))
    return seen


def run_incremental(chunker: Chunker, records: list[dict[str, Any]], *, roundtrip_at: int | None = None,
                    observe: Any = None) -> list[dict[str, Any]]:
    """Feed records one at a time, as the faust agent does (ticks go to every session). The
    agent reads the redaction agent's output, which holds the first copy of each eventId only."""
    states: dict[tuple[str, str], dict[str, Any]] = {}
    chunks: list[dict[str, Any]] = []
    admitted: dict[tuple[str, str], int] = {}
    for index, record in enumerate(records):
        if index == roundtrip_at:
            states = json.loads(json.dumps(states_to_json(states)), object_hook=None)
            states = {tuple(key.split("\x00")): value for key, value in states.items()}
        if record["kind"] == "event":
            first = admitted.setdefault((record["logId"], record["event"]["eventId"]), record["seq"])
            if first != record["seq"]:
                continue  # a later copy: the redaction agent drops it (a redelivery is kept)
            key = (record["logId"], record["event"]["sessionId"])
            state = states.setdefault(key, chunker.new_state(key[1]))
            chunks += chunker.on_event(state, record["logId"], record["seq"], record["event"])
        else:
            for key in sorted(states):
                if key[0] == record["logId"]:
                    chunks += chunker.on_tick(states[key], record)
        if observe is not None:
            observe(record, states, chunks)
    for key in sorted(states):
        chunks += chunker.close(states[key], provisional=True)
    return chunks


def states_to_json(states: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return {"\x00".join(key): value for key, value in states.items()}


# -- properties ----------------------------------------------------------------------------

@PROPERTY
@given(steps=steps_strategy, every=st.sampled_from([1, 2, 5, 16]))
def test_chunks_are_well_formed_and_cover_every_visible_event(chunker: Chunker, steps, every) -> None:
    log = build_log(steps)
    events = first_occurrences(log)
    chunks = chunk_stream(make_ticks(log, every), chunker, finalize=True)
    tokenizer = chunker.tokenizer
    covered: dict[str, list[tuple[int, int]]] = {}
    for chunk in chunks:
        data = chunk["text"].encode()
        assert chunk["chunkId"].startswith("c_") and len(chunk["chunkId"]) == 34
        assert chunk["tokenCount"] <= TARGET
        pieces = []
        keys = set()
        for evidence in chunk["evidence"]:
            seq, ev = events[evidence["eventId"]]
            assert seq == evidence["seq"]
            assert ev["sessionId"] == chunk["sessionId"] and ev["logId"] == chunk["logId"]
            keys.add(unit_key(ev))
            rendered = render_event(ev)
            assert rendered is not None  # only visible, rendering events are evidence
            piece = data[evidence["start"]:evidence["end"]]
            assert piece == rendered.encode()[evidence["part"][0]:evidence["part"][1]]
            pieces.append(piece.decode())
            covered.setdefault(evidence["eventId"], []).append(tuple(evidence["part"]))
        assert len(keys) == 1  # never mixes turns / episodes / session-level runs
        assert chunk["text"] == "\n".join(pieces)
        assert chunk["tokenCount"] == sum(tokenizer.count(piece) for piece in pieces)
        assert chunk["minSeq"] == min(e["seq"] for e in chunk["evidence"])
        assert chunk["maxSeq"] == max(e["seq"] for e in chunk["evidence"])
        assert chunk["evidenceEventIds"] == list(dict.fromkeys(e["eventId"] for e in chunk["evidence"]))
        for name in ("roles", "types", "toolNames", "statuses", "paramKeys"):
            assert chunk["fields"][name] == sorted(set(chunk["fields"][name]))
        assert chunk["eventTime"].endswith("Z") and chunk["startTime"] <= chunk["endTime"]
    for event_id, (_seq, ev) in events.items():
        rendered = render_event(ev)
        if rendered is None:
            assert event_id not in covered
            continue
        # Coverage: every byte of every visible rendered event is in some chunk.
        reach = 0
        for start, end in sorted(covered[event_id]):
            assert start <= reach
            reach = max(reach, end)
        assert reach == len(rendered.encode())


@PROPERTY
@given(steps=steps_strategy, every=st.sampled_from([1, 3, 16]))
def test_consecutive_chunks_share_exactly_their_overlap(chunker: Chunker, steps, every) -> None:
    log = build_log(steps)
    events = first_occurrences(log)
    chunks = chunk_stream(make_ticks(log, every), chunker, finalize=True)
    tokenizer = chunker.tokenizer
    previous: dict[str, dict[str, Any]] = {}
    for chunk in chunks:
        before = previous.get(chunk["sessionId"])
        previous[chunk["sessionId"]] = chunk
        if before is None:
            continue
        left = [(e["eventId"], tuple(e["part"])) for e in before["evidence"]]
        right = [(e["eventId"], tuple(e["part"])) for e in chunk["evidence"]]
        shared = [item for item in right if item in left]
        # What is shared is a suffix of the earlier chunk and a prefix of the later one.
        assert shared == right[:len(shared)] == left[len(left) - len(shared):]
        tail = range(len(left) - len(shared), len(left))
        assert sum(tokenizer.count(piece_text(before, i)) for i in tail) <= OVERLAP
        # Parts of one split event overlap inside the event's text by at most the overlap.
        last_id, last_part = left[-1]
        first_id, first_part = right[0]
        if not shared and last_id == first_id and first_part[0] < last_part[1]:
            rendered = render_event(events[last_id][1]).encode()
            assert tokenizer.count(rendered[first_part[0]:last_part[1]].decode()) <= OVERLAP


def piece_text(chunk: dict[str, Any], index: int) -> str:
    evidence = chunk["evidence"][index]
    return chunk["text"].encode()[evidence["start"]:evidence["end"]].decode()


@PROPERTY
@given(steps=steps_strategy, every=st.sampled_from([1, 4, 16]), cut=st.floats(0, 1))
def test_deterministic_incremental_and_state_roundtrip(chunker: Chunker, steps, every, cut) -> None:
    records = make_ticks(build_log(steps), every)
    batch = canonical(chunk_stream(records, chunker, finalize=True))
    assert batch == canonical(chunk_stream(records, chunker, finalize=True))
    incremental = run_incremental(chunker, records)
    roundtrip = run_incremental(chunker, records, roundtrip_at=int(cut * len(records)))
    # The agent path (one record at a time) gives the same chunk set as the batch path, and a
    # state written to JSON mid-stream and read back behaves identically.
    assert sorted(canonical(incremental)) == sorted(batch)
    assert canonical(roundtrip) == canonical(incremental)


@PROPERTY
@given(steps=steps_strategy, every=st.sampled_from([1, 5, 16]))
def test_partition_independence(chunker: Chunker, steps, every) -> None:
    records = make_ticks(build_log(steps), every)
    whole = sorted(canonical(chunk_stream(records, chunker, finalize=True)))
    for partitions in (2, 5):
        union: list[bytes] = []
        for partition in range(partitions):
            mine = [
                record for record in records
                if record["kind"] == "tick"
                or zlib.crc32(record["event"]["sessionId"].encode()) % partitions == partition
            ]
            union += canonical(chunk_stream(mine, chunker, finalize=True))
        assert sorted(union) == whole


@PROPERTY
@given(steps=steps_strategy, every=st.sampled_from([1, 5]), data=st.data())
def test_redelivered_records_change_nothing(chunker: Chunker, steps, every, data) -> None:
    records = make_ticks(build_log(steps), every)
    expected = canonical(chunk_stream(records, chunker, finalize=True))
    # At-least-once delivery: after record j, a range i..j is delivered again.
    j = data.draw(st.integers(0, len(records)))
    i = data.draw(st.integers(0, j))
    replayed = records[:j] + records[i:j] + records[j:]
    assert canonical(chunk_stream(replayed, chunker, finalize=True)) == expected


@PROPERTY
@given(steps=steps_strategy, every=st.sampled_from([1, 3, 16]))
def test_open_min_seq_bounds_what_is_not_yet_emitted(chunker: Chunker, steps, every) -> None:
    log = build_log(steps)
    events = first_occurrences(log)
    records = make_ticks(log, every)

    def observe(record, states, chunks) -> None:
        emitted = {e["eventId"] for chunk in chunks for e in chunk["evidence"]}
        for (_log, session_id), state in states.items():
            floor = chunker.open_min_seq(state)
            if state["unit"] is None:
                assert floor is None
            for event_id, (seq, ev) in events.items():
                if ev["sessionId"] != session_id or seq > state["lastSeq"]:
                    continue
                rendered = render_event(ev)
                if (floor is None or seq < floor) and rendered is not None:
                    assert event_id in emitted, (event_id, seq, floor)
                if seq == floor and rendered is not None:
                    # The floor is tight: that event is not yet wholly inside emitted chunks.
                    assert emitted_bytes(chunks, event_id) < len(rendered.encode())

    run_incremental(chunker, records, observe=observe)


def emitted_bytes(chunks: list[dict[str, Any]], event_id: str) -> int:
    """How far from its start an event's rendered bytes are contiguously inside ``chunks``."""
    reach = 0
    parts = sorted(tuple(e["part"]) for c in chunks for e in c["evidence"] if e["eventId"] == event_id)
    for start, end in parts:
        if start > reach:
            break
        reach = max(reach, end)
    return reach


# -- directed tests ------------------------------------------------------------------------

def test_public_surface() -> None:
    assert set(chunking.__all__) == {
        "Chunker", "ChunkerConfig", "HFTokenizer", "Tokenizer", "chunk_stream",
        "default_tokenizer", "make_ticks", "render_event",
    }
    for name in chunking.__all__:
        assert hasattr(chunking, name)


def test_tokenizer_is_the_embedders_and_counts_without_special_tokens() -> None:
    tokenizer = default_tokenizer()
    assert tokenizer is default_tokenizer()
    assert tokenizer.identity.startswith("wordllama/l2_supercat@") and len(tokenizer.identity.split("@")[1]) == 12
    assert tokenizer.count("hello world") == 2
    assert tokenizer.count("") == 0
    assert tokenizer.encode_offsets("hello world").tolist() == [[0, 5], [5, 11]]
    assert tokenizer.count_many(["hello world", "", "a"]) == [2, 0, tokenizer.count("a")]
    assert isinstance(tokenizer, chunking.Tokenizer)


def test_loading_the_tokenizer_leaves_logging_alone() -> None:
    # wordllama configures the root logger at import time; a fresh process shows whether that
    # leaks (it once printed kafka-python's INFO chatter under every `usl rebuild`).
    probe = (
        "import logging\n"
        "from streams.chunking.tokenizer import default_tokenizer\n"
        "from sinks.vector.embedders import WordLlamaEmbedder\n"
        "default_tokenizer()\n"
        "root = logging.getLogger()\n"
        "print(root.level, len(root.handlers))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(logging.WARNING), "0"], out.stderr


def test_render_formats() -> None:
    assert render_event(event("1", "message", role="user", text="hi there")) == "[user] hi there"
    assert render_event(event("2", "message", role="assistant", text="ok")) == "[assistant] ok"
    call = event("3", "tool.call", role="assistant", name="Bash", input={"timeout": 5, "command": "ls -la", "env": {"B": 1, "A": [1]}})
    assert render_event(call) == '[tool.call Bash] command=ls -la, env={"A":[1],"B":1}, timeout=5'
    result = event("4", "tool.result", name="Bash", status="ok", summary="3 files", output="a\nb\nc")
    assert render_event(result) == "[tool.result Bash ok] 3 files"
    long_output = event("5", "tool.result", name="Read", status="error", output="x" * 1000)
    assert render_event(long_output) == "[tool.result Read error] " + "x" * 400 + "…"
    assert render_event(event("6", "error", message="boom")) == "[error] boom"
    thinking = event("6t", "message", role="assistant", text="hmm", kind="thinking")
    assert render_event(thinking) == "[assistant thinking] hmm"
    documented = event("6d", "tool.call", toolName="Read", toolCallId="x", input={"path": "a" * 500})
    assert render_event(documented) == "[tool.call Read] path=" + "a" * 400 + "…"
    started = event("7", "session.started", title="Fix CI", cwd="/repo", model="m1")
    assert render_event(started) == "[session] title=Fix CI, cwd=/repo, model=m1"
    assert render_event(event("8", "session.started")) is None
    assert render_event(event("9", "message", role="user", visibility="hidden", text="secret")) is None
    for type_ in ("turn.started", "turn.ended", "session.acl", "session.ended", "run.started", "x.custom"):
        assert render_event(event("10", type_, text="anything")) is None
    assert render_event(event("11", "message", role="user", text="")) is None
    assert render_event(event("12", "message", role="user", text="bad \ud800 surrogate")) == "[user] bad ? surrogate"


def test_a_message_holding_tool_calls_renders_them_as_their_tool_call_events_do() -> None:
    """OpenTelemetry GenAI output messages keep a model's tool calls on the message
    (``fields.toolCalls``), where every importer makes each a tool.call event: an answer that only
    called tools rendered nothing, so its tool and arguments were not searchable."""
    called = {"toolName": "get_weather", "input": {"units": "metric", "city": "Paris"}}
    as_event = render_event(event("13", "tool.call", role="assistant", **called))
    assert as_event == "[tool.call get_weather] city=Paris, units=metric"
    for arguments in ({"city": "Paris", "units": "metric"}, '{"units": "metric", "city": "Paris"}'):
        only_calls = event("14", "message", role="assistant", text="",
                           toolCalls=[{"id": "call_1", "name": "get_weather", "arguments": arguments}])
        assert render_event(only_calls) == as_event
    both = event("15", "message", role="assistant", text="Checking.", toolCalls=[
        {"id": "c1", "name": "search", "arguments": "not json"}, {"id": "c2", "name": "noop"}, "junk"])
    assert render_event(both) == "[assistant] Checking.\n[tool.call search] not json\n[tool.call noop]"
    assert render_event(event("16", "message", role="assistant", text="", toolCalls="junk")) is None
    assert ChunkerConfig().version == "1.2"  # rendering moved bytes: a chunker version change


def test_long_event_is_split_into_overlapping_parts() -> None:
    tokenizer = default_tokenizer()
    text = "[user] " + " ".join(f"word{i} 日本語 🙂 naïve" for i in range(200))
    parts = split_text(text, tokenizer, target=64, overlap=16)
    assert parts[0].char_start == 0 and parts[-1].char_end == len(text)
    for part in parts:
        assert part.tokens == tokenizer.count(text[part.char_start:part.char_end]) <= 64
    for left, right in pairwise(parts):
        assert left.char_start < right.char_start <= left.char_end
        assert 16 - 4 <= tokenizer.count(text[right.char_start:left.char_end]) <= 16


def test_turn_chunks_and_overlap(chunker: Chunker) -> None:
    log = [
        (1, event("a", "turn.started", turn="t1")),
        (2, event("b", "message", turn="t1", role="user", text="please list every file in the repository")),
        (3, event("c", "tool.call", turn="t1", role="assistant", name="Bash", input={"command": "ls"})),
        (4, event("d", "tool.result", turn="t1", role="tool", name="Bash", status="ok", summary="2 files")),
        (5, event("e", "message", turn="t1", role="assistant", text="There are two files: a.py and b.py, both small.")),
        (6, event("f", "turn.ended", turn="t1")),
    ]
    chunks = chunk_stream(make_ticks(log, 64), chunker)
    assert [chunk["evidenceEventIds"] for chunk in chunks] == [["b", "c", "d"], ["d", "e"]]
    assert all(chunk["turnId"] == "t1" and chunk["unit"] == "turn" and chunk["runId"] == "run-s1" for chunk in chunks)
    assert chunks[0]["fields"] == {
        "roles": ["assistant", "tool", "user"], "types": ["message", "tool.call", "tool.result"],
        "toolNames": ["Bash"], "statuses": ["ok"], "paramKeys": ["command"],
    }
    # "d" (7 tokens) is the overlap: the longest tail of whole events within 12 tokens.
    assert chunks[1]["text"].startswith("[tool.result Bash ok] 2 files\n[assistant] There")
    assert chunks[1]["evidence"][0] == {"eventId": "d", "seq": 4, "start": 0, "end": 29, "part": [0, 29]}
    assert "provisional" not in chunks[-1]


def test_new_turn_and_session_events_cut_units(chunker: Chunker) -> None:
    bob = {"tenant": "acme", "read": ["user:bob"]}
    log = [
        (1, event("a", "session.started", title="demo")),
        (2, event("b", "message", turn="t1", role="user", text="one")),
        (3, event("c", "message", turn="t2", role="user", text="two")),
        (4, event("d", "message", turn="t2", role="assistant", text="still two")),
        (5, event("acl", "session.acl", acl=bob)),
        (6, event("e", "message", episode="ep", turn="t2", role="assistant", text="episode work", acl=bob)),
    ]
    chunks = chunk_stream(make_ticks(log, 64), chunker, finalize=True)
    assert [c["evidenceEventIds"] for c in chunks] == [["a"], ["b"], ["c", "d"], ["e"]]
    assert [c["unit"] for c in chunks] == ["session", "turn", "turn", "episode"]
    # Each chunk carries the session's latest acl when it closes; the acl event cut nothing.
    assert chunks[1]["acl"]["read"] == ["*"] and chunks[2]["acl"] == bob
    assert chunks[3]["provisional"] is True and chunks[3]["episodeId"] == "ep" and chunks[3]["turnId"] == "t2"
    assert chunks[2].get("provisional") is None


def test_idle_turn_is_cut_at_first_tick_after_gap(chunker: Chunker) -> None:
    log = [(1, event("a", "message", turn="t1", role="user", text="hello", t=0))]
    log += [(1 + i, event(f"b{i}", "message", session="s2", turn="u", role="user", text="x", t=100.0 * i)) for i in range(1, 6)]
    records = make_ticks(log, 2)
    emitted_at = []
    run_incremental(chunker, records, observe=lambda record, states, chunks: emitted_at.append(
        (record.get("seq"), record["kind"], [c["sessionId"] for c in chunks])))
    # Ticks at seqs 2 (t=100), 4 (t=300: not > G) and 6 (t=500): s1 is cut at the tick of seq 6.
    first = next(entry for entry in emitted_at if "s1" in entry[2])
    assert first[:2] == (6, "tick")


@pytest.mark.parametrize("newer_first", [False, True])
def test_a_session_imported_after_newer_ones_is_cut_as_in_date_order(newer_first: bool) -> None:
    """A backfill: a session's events arrive one after another while the log clock (the newest
    event time of any session) is hours past them. Every tick finds the open turn 'idle' by the
    clock alone; it is cut only once no event of the session came for a whole tick interval,
    so the turn chunks as it does when the sessions come in date order."""
    chunker = make_chunker(target=2000, overlap=0)
    old = [event(f"o{i}", "message", session="old", turn="t1", role="user" if i % 2 else "assistant",
                 text=f"step {i} of the migration", t=float(i)) for i in range(60)]
    old.append(event("o-end", "turn.ended", session="old", turn="t1", t=60.0))
    new = [event(f"n{i}", "message", session="new", turn="u1", role="user", text="later work",
                 t=36_000.0 + i) for i in range(3)]
    ordered = [*new, *old] if newer_first else [*old, *new]
    chunks = chunk_stream(make_ticks(list(enumerate(ordered, 1)), 8), chunker, finalize=True)
    assert [c["evidenceEventIds"] for c in chunks if c["sessionId"] == "old"] == [[f"o{i}" for i in range(60)]]
    agent = run_incremental(chunker, make_ticks(list(enumerate(ordered, 1)), 8))
    assert sorted(canonical(agent)) == sorted(canonical(chunks))


def test_a_real_session_imported_after_a_newer_one_chunks_as_in_date_order() -> None:
    """The real Claude Code turn of tests/fixtures/turn_ends (Claude Code 2.1.38, 2026-02-10),
    imported before and after a session dated a month later, with a tick every 4 seqs: the same
    chunks either way (chunker 1.0 cut it at each tick once the newer session came first)."""
    from pathlib import Path

    from streams.importers import file_format, import_files
    from streams.importers.base import Accepted

    path = Path(__file__).parents[1] / "fixtures" / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"
    real = [item.event for item in import_files([(path, path.name, file_format(path))])
            if isinstance(item, Accepted)]
    assert len({e["sessionId"] for e in real}) == 1 and len(real) > 10
    newer = [event(f"n{i}", "message", session="s-newer", turn="u1", role="user", text=f"later {i}",
                   t=(datetime(2026, 3, 12, tzinfo=UTC) - T0).total_seconds() + i) for i in range(6)]
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")

    def real_chunks(ordered: list[dict[str, Any]]) -> list[list[str]]:
        records = make_ticks(list(enumerate(ordered, 1)), 4)
        return [c["evidenceEventIds"] for c in chunk_stream(records, chunker, finalize=True)
                if c["sessionId"] == real[0]["sessionId"]]

    in_order = real_chunks([*real, *newer])
    assert in_order and real_chunks([*newer, *real]) == in_order


def test_a_quiet_session_is_still_cut_once_a_tick_interval_passes_without_it(chunker: Chunker) -> None:
    log = [(1, event("a", "message", turn="t1", role="user", text="hello", t=0)),
           (2, event("b", "message", turn="t1", role="user", text="again", t=1))]
    log += [(2 + i, event(f"x{i}", "message", session="s2", turn="u", role="user", text="x", t=1000.0 + i))
            for i in range(1, 12)]
    emitted_at = []
    run_incremental(chunker, make_ticks(log, 4), observe=lambda record, states, chunks: emitted_at.append(
        (record.get("seq"), record["kind"], [c["sessionId"] for c in chunks])))
    # Tick 4 (logTime past G) finds s1's last event (seq 2) after the last tick it saw (none):
    # not idle yet by position; tick 8 finds no event of s1 since tick 4 and cuts it.
    first = next(entry for entry in emitted_at if "s1" in entry[2])
    assert first[:2] == (8, "tick")


def test_gap_inside_turn_cuts_and_flush_ticks_change_nothing(chunker: Chunker) -> None:
    log = [
        (1, event("a", "message", turn="t1", role="user", text="first", t=0)),
        (2, event("b", "message", turn="t1", role="user", text="second", t=301)),
    ]
    chunks = chunk_stream(make_ticks(log, 64), chunker, finalize=True)
    assert [c["evidenceEventIds"] for c in chunks] == [["a"], ["b"]]
    assert chunks[0]["chunkId"] != chunks[1]["chunkId"]
    state = chunker.new_state("s1")
    chunker.on_event(state, "default", 1, log[0][1])
    before = json.dumps(state)
    assert chunker.on_tick(state, {"kind": "tick", "logId": "default", "seq": 1, "logTime": 1e12, "flush": True}) == []
    assert json.dumps(state) == before


def test_open_min_seq_and_provisional_ids(chunker: Chunker) -> None:
    state = chunker.new_state("s1")
    assert chunker.open_min_seq(state) is None
    chunker.on_event(state, "default", 3, event("a", "turn.started", turn="t1"))
    assert chunker.open_min_seq(state) == 3  # renders nothing, but the open turn holds it
    chunker.on_event(state, "default", 4, event("b", "message", turn="t1", role="user", text="hi"))
    assert chunker.open_min_seq(state) == 3
    assert chunker.on_event(state, "default", 4, event("c", "message", turn="t1", role="user", text="replayed")) == []
    copy = json.loads(json.dumps(state))
    provisional = chunker.close(copy, provisional=True)
    final = chunker.on_event(state, "default", 7, event("d", "turn.ended", turn="t1"))
    assert provisional[0]["provisional"] is True
    assert provisional[0]["chunkId"] == final[0]["chunkId"]
    assert chunker.open_min_seq(state) is None


def test_duplicate_event_ids_are_ignored(chunker: Chunker) -> None:
    message = event("a", "message", turn="t1", role="user", text="once")
    chunks = chunk_stream(make_ticks([(1, message), (2, message)], 64), chunker, finalize=True)
    assert [c["evidenceEventIds"] for c in chunks] == [["a"]]


def test_a_long_sessions_state_does_not_grow_with_its_events(chunker: Chunker) -> None:
    """The state is rewritten to the changelog with every batch: it holds the open unit, not a
    record of every event (a map of seen ids did, and a 40 000-event session's state passed the
    broker's 1 MiB message limit, stopping the worker for every log)."""
    state = chunker.new_state("s1")
    sizes = []
    seq = 0
    for turn in range(400):
        for role in ("user", "assistant"):
            seq += 1
            chunker.on_event(state, "default", seq, event(f"e{seq}", "message", turn=f"t{turn}", role=role,
                                                          text=f"turn {turn} says {role} things", t=float(seq)))
        seq += 1
        chunker.on_event(state, "default", seq, event(f"e{seq}", "turn.ended", turn=f"t{turn}", t=float(seq)))
        sizes.append(len(json.dumps(state)))
    assert state["unit"] is None and max(sizes) < 400, sizes[-3:]


def test_a_state_of_an_earlier_worker_drops_its_map_of_seen_ids(chunker: Chunker) -> None:
    state = chunker.new_state("s1")
    state["seen"] = {f"{n:016x}": n for n in range(1, 1000)}
    state["lastSeq"] = 999
    chunks = chunker.on_event(state, "default", 1000, event("e1000", "message", turn="t", role="user", text="hi"))
    assert chunks == [] and state["seen"] == {} and state["lastSeq"] == 1000


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError):
        ChunkerConfig(target_tokens=4)
    with pytest.raises(ConfigError):
        ChunkerConfig(target_tokens=64, overlap_tokens=40)
    with pytest.raises(ConfigError):
        ChunkerConfig(idle_gap_seconds=0)


def test_make_ticks_places_ticks_like_the_redaction_agent() -> None:
    log = [(seq, event(f"e{seq}", "message", role="user", text="x", t=float(10 - seq))) for seq in (1, 3, 4, 9, 10)]
    ticks = [r for r in make_ticks(log, 4) if r["kind"] == "tick"]
    assert [(t["seq"], t["logTime"]) for t in ticks] == [(4, (T0 + timedelta(seconds=9)).timestamp()), (9, (T0 + timedelta(seconds=9)).timestamp())]


@PROPERTY
@given(texts=st.lists(st.lists(st.sampled_from(WORDS), max_size=8), min_size=1, max_size=40))
def test_budget_and_overlap_rule_inside_one_turn(chunker: Chunker, texts) -> None:
    """A chunk closes only when the next event does not fit; the next one repeats the longest
    run of trailing whole events that fits in the overlap (and leaves room for that event)."""
    log = [
        (seq, event(f"e{seq}", "message", turn="t1", role="user", text=" ".join(words) or "-", t=seq))
        for seq, words in enumerate(texts, 1)
    ]
    count = {f"e{seq}": chunker.tokenizer.count(render_event(ev)) for seq, ev in log}
    assume(max(count.values()) <= TARGET)  # whole events only; splitting has its own tests
    chunks = chunk_stream(make_ticks(log, 7), chunker, finalize=True)
    for before, after in pairwise(chunks):
        left = [e["eventId"] for e in before["evidence"]]
        right = [e["eventId"] for e in after["evidence"]]
        shared = [event_id for event_id in right if event_id in left]
        fresh = right[len(shared)]
        assert before["tokenCount"] + count[fresh] > TARGET  # closed only for lack of room
        expected: list[str] = []
        for event_id in reversed(left):
            if sum(count[e] for e in expected) + count[event_id] > OVERLAP:
                break
            expected.insert(0, event_id)
        while expected and sum(count[e] for e in expected) + count[fresh] > TARGET:
            expected.pop(0)
        assert shared == expected
    assert {e for c in chunks for e in c["evidenceEventIds"]} == set(count)


def test_redelivered_tick_never_cuts_a_later_unit(chunker: Chunker) -> None:
    # Producers' clocks disagree: later events carry earlier times than the log clock.
    log = [
        (1, event("a", "message", turn="t1", role="user", text="early", t=1000)),
        (4, event("b", "message", session="s2", turn="u1", role="user", text="other", t=1000)),
        (5, event("c", "message", turn="t2", role="user", text="skewed", t=500)),
        (6, event("d", "message", session="s3", turn="v1", role="user", text="new session", t=500)),
        (7, event("e", "message", turn="t2", role="assistant", text="still t2", t=510)),
    ]
    records = make_ticks(log, 4)  # one tick, at seq 4, logTime 1000
    tick = next(record for record in records if record["kind"] == "tick")
    expected = canonical(chunk_stream(records, chunker, finalize=True))
    assert [c["evidenceEventIds"] for c in chunk_stream(records, chunker, finalize=True)] == [["a"], ["c", "e"], ["b"], ["d"]]
    # The tick delivered again after seq 6: t2 and v1 (latest event time 500) look idle to it,
    # but it is stale for both sessions (s3 did not even exist at seq 4) and must be ignored.
    replayed = [*records[:-1], tick, *records[-1:]]
    assert canonical(chunk_stream(replayed, chunker, finalize=True)) == expected
    assert sorted(canonical(run_incremental(chunker, replayed))) == sorted(expected)


def test_idle_and_gap_use_the_latest_event_time_of_the_unit(chunker: Chunker) -> None:
    log = [
        (1, event("a", "message", turn="t1", role="user", text="late clock", t=1000)),
        (2, event("b", "message", turn="t1", role="user", text="skewed clock", t=600)),
        (3, event("c", "message", turn="t1", role="user", text="still close to the latest", t=950)),
    ]
    records = make_ticks(log, 1)  # ticks carry logTime 1000: never more than G past the turn's latest event
    assert [c["evidenceEventIds"] for c in chunk_stream(records, chunker, finalize=True)] == [["a", "b", "c"]]
