"""A session's memory of the secrets it removed (streams.redaction.memory, policy 2.18): a value
named once and repeated bare in a later event of the same session is removed there too, alike
in the redaction stage, the rebuild replay, the planner's tail scan (from any cut, with the
prints the structured index holds below it) and ``usl export``'s reading; only prints are kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from streams.redaction import redact_event
from streams.redaction.memory import MAX_REMEMBERED, Recall, merge_remembered, secret_print
from streams.stages import keys
from tests.streams.stages_kit import ALICE, Worker, event, l1_batch, run

PASSWORD = "hunter2-prod-7Qx"
TOKEN = "tok_9fK2mZ81pQ"
KEY = "5be1d5e9a0c64f0f86a3b2e7c4d98f1a"  # what `openssl rand -hex 16` prints


def leaky_session(name: str, start: int) -> list[dict[str, Any]]:
    """A session that names two secrets once (an env dump, a password flag) and repeats them bare
    in later events: the assistant's prose, another tool's output, a later tool call's input."""
    turn = f"{name}-t0"
    return [
        event(name, start, "session.started", acl=ALICE, title=f"session {name}"),
        event(name, start + 1, "turn.started", turn=turn),
        event(name, start + 2, "message", turn=turn, text="why does the app not reach the database?"),
        event(name, start + 3, "tool.call", turn=turn, toolName="bash", toolCallId=f"{turn}-a", input={"command": "env"}),
        event(name, start + 4, "tool.result", turn=turn, toolName="bash", toolCallId=f"{turn}-a", status="ok",
              output=f"HOME=/root\nDB_PASSWORD={PASSWORD}\nPATH=/usr/bin\n"),
        event(name, start + 5, "message", turn=turn, role="assistant",
              text=f"The password is set. I will connect with {PASSWORD} now."),
        event(name, start + 6, "tool.call", turn=turn, toolName="bash", toolCallId=f"{turn}-b",
              input={"command": f"mysql -u app --password {TOKEN} -h db"}),
        event(name, start + 7, "tool.result", turn=turn, toolName="bash", toolCallId=f"{turn}-b", status="error",
              output=f"ERROR 1045: Access denied for user 'app' using {PASSWORD}"),
        event(name, start + 8, "message", turn=turn, role="assistant",
              text=f"Both {PASSWORD} and {TOKEN} were refused; see `{TOKEN}`."),
        event(name, start + 9, "tool.call", turn=turn, toolName="bash", toolCallId=f"{turn}-c",
              input={"command": f"PGPASSWORD=x psql -c 'select 1' # tried {TOKEN}"}),
        # A command that prints a secret and its output: two events, paired by the call's id.
        event(name, start + 10, "tool.call", turn=turn, toolName="bash", toolCallId=f"{turn}-d",
              input={"command": "cd app && openssl rand -hex 16"}),
        event(name, start + 11, "tool.result", turn=turn, toolName="bash", toolCallId=f"{turn}-d", status="ok",
              output=f"{KEY}\n"),
        event(name, start + 12, "message", turn=turn, role="assistant", text=f"Generated {KEY}; it goes in .env next."),
        event(name, start + 13, "turn.ended", turn=turn),
    ]


def mentions_before(name: str, start: int) -> list[dict[str, Any]]:
    """The same values in another session, never named there: that session keeps them (a print
    is salted by its session), and so does the first session before it named them."""
    turn = f"{name}-t0"
    return [
        event(name, start, "session.started", acl=ALICE, title=f"session {name}"),
        event(name, start + 1, "turn.started", turn=turn),
        event(name, start + 2, "message", turn=turn, text=f"is {PASSWORD} a good name for a branch?"),
        event(name, start + 3, "turn.ended", turn=turn),
    ]


def log_of(seed: int) -> list[dict[str, Any]]:
    import random

    rng = random.Random(seed)
    queues = [leaky_session("s1", 0), mentions_before("s2", 100), leaky_session("s3", 200)]
    merged: list[dict[str, Any]] = []
    while any(queues):
        merged.append(rng.choice([q for q in queues if q]).pop(0))
    return merged


def _words(text: str) -> list[str]:
    import re

    return re.findall(r"[A-Za-z0-9_-]+", text)


def _bodies(worker: Worker, topics: tuple[str, ...]) -> list[dict[str, Any]]:
    return [orjson.loads(value) for (topic, _), values in sorted(worker.topics.items()) if topic in topics
            for value in values]


def test_a_value_named_once_is_removed_where_a_later_event_repeats_it() -> None:
    worker = Worker(every=4)
    run(worker, l1_batch(log_of(1)), [])
    events = {body["event"]["eventId"]: body for body in _bodies(worker, ("redacted",)) if body["kind"] == "event"}
    assert events["s1-e5"]["event"]["fields"]["text"] == "The password is set. I will connect with [REDACTED:env-dump] now."
    assert events["s1-e8"]["event"]["fields"]["text"] == (
        "Both [REDACTED:env-dump] and [REDACTED:password-assignment] were refused; see `[REDACTED:password-assignment]`.")
    assert PASSWORD not in orjson.dumps(events["s1-e7"]).decode()
    assert TOKEN not in orjson.dumps(events["s1-e9"]).decode()
    # Another session never named it: its own text stays as written.
    assert events["s2-e102"]["event"]["fields"]["text"] == f"is {PASSWORD} a good name for a branch?"
    for body in _bodies(worker, ("redacted", "toolresults", "chunks")):
        if body.get("sessionId", body.get("event", {}).get("sessionId")) in ("s1", "s3"):
            assert not {PASSWORD, TOKEN, KEY} & set(_words(orjson.dumps(body).decode())), body
    assert PASSWORD in " ".join(c["text"] for c in worker.chunks() if c["sessionId"] == "s2")
    # Only prints are kept: in the records and in the table (whose changelog is a topic).
    table = orjson.dumps(worker.tables[keys.SESSION_SECRETS])
    assert PASSWORD.encode() not in table and TOKEN.encode() not in table
    memory = worker.tables[keys.SESSION_SECRETS]["default/s1"]
    assert [entry[1:3] for entry in memory] == [[len(PASSWORD), "env-dump"], [len(TOKEN), "password-assignment"],
                                                [0, "secret-output"], [len(KEY), "secret-output"]]
    assert [entry[3] for entry in memory] == [events[f"s1-e{n}"]["seq"] for n in (4, 6, 10, 11)]
    # The output of a command that prints a secret, another event than the command, and its repeat.
    assert events["s1-e11"]["event"]["fields"]["summary"] == "[REDACTED:secret-output]"
    assert events["s1-e12"]["event"]["fields"]["text"] == "Generated [REDACTED:secret-output]; it goes in .env next."
    assert events["s1-e4"]["secrets"] == [[secret_print("default/s1", PASSWORD), len(PASSWORD), "env-dump"]]
    assert "secrets" not in events["s1-e5"]


def test_without_the_memory_the_repeat_stays() -> None:
    """The reading the memory adds: the same later event, redacted alone, keeps the password
    (2.17's behaviour, and still what the chunker's re-redaction after an upgrade does)."""
    later = leaky_session("s1", 0)[5]
    assert PASSWORD in redact_event(later).event["fields"]["text"]
    recall = Recall("default/s1", [[secret_print("default/s1", PASSWORD), len(PASSWORD), "env-dump", 4]], 6)
    assert PASSWORD not in redact_event(later, recall=recall).event["fields"]["text"]
    # Not before the event that removed it: the memory is the session's past only.
    early = Recall("default/s1", [[secret_print("default/s1", PASSWORD), len(PASSWORD), "env-dump", 6]], 6)
    assert PASSWORD in redact_event(later, recall=early).event["fields"]["text"]


def test_a_token_holding_the_value_is_not_the_value() -> None:
    recall = Recall("k", [[secret_print("k", PASSWORD), len(PASSWORD), "env-dump", 1]], 2)
    hits: dict[str, int] = {}
    text = f"{PASSWORD}-replica x.{PASSWORD} {PASSWORD}. ({PASSWORD}) {PASSWORD}"
    assert recall.recall(text, hits) == (f"{PASSWORD}-replica x.{PASSWORD} [REDACTED:env-dump]. "
                                         "([REDACTED:env-dump]) [REDACTED:env-dump]")
    assert hits == {"env-dump": 3}


def test_a_session_remembers_its_first_values_only() -> None:
    entries: list[list[Any]] | None = None
    for seq in range(1, MAX_REMEMBERED + 10):
        recall = Recall("k", entries, seq)
        redact_event({"eventId": f"e{seq}", "sessionId": "k", "type": "message", "role": "user",
                      "fields": {"text": f"DB_PASSWORD=Zq{seq}x-secret-value"}}, recall=recall)
        entries = merge_remembered(entries, recall.added, seq) or entries
    assert entries is not None and len(entries) == MAX_REMEMBERED
    assert [entry[3] for entry in entries] == list(range(1, MAX_REMEMBERED + 1))


@hsettings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cuts=st.lists(st.integers(0, 40), max_size=5).map(lambda xs: sorted(set(xs))),
       every=st.integers(1, 8))
def test_batches_redeliveries_and_the_replay_redact_alike(seed: int, cuts: list[int], every: int) -> None:
    """However the stage's batches fall, a batch delivered twice (a crash before its commit), and
    the rebuild replay: the same records, byte for byte, and the same memory."""
    from sinks.rebuild import ReplayStream
    from streams.l1 import AppendedEvent

    log = log_of(seed)
    l1 = l1_batch(log)
    whole, split = Worker(every=every), Worker(every=every)
    run(whole, l1, [])
    cuts = [c for c in cuts if c < len(l1)]
    run(split, l1, cuts)
    for topic in ("redacted", "toolresults"):
        for partition in range(2):
            assert whole.topics.get((topic, partition)) == split.topics.get((topic, partition))
    assert whole.tables[keys.SESSION_SECRETS] == split.tables[keys.SESSION_SECRETS]
    # A batch applied again after its effects were kept: the records it sends are the first ones.
    again = Worker(every=every)
    end = cuts[0] if cuts else len(l1) // 2
    again.redact(l1[:end])
    first = again.redaction.apply(l1[:end])
    second = again.redaction.apply(l1[:end])
    assert [r.value for r in first.records if r.topic != "redacted" or b'"tick"' not in r.value] == \
        [r.value for r in second.records if r.topic != "redacted" or b'"tick"' not in r.value]
    sent = sorted((value for (topic, _), values in whole.topics.items() if topic in ("redacted", "toolresults")
                   for value in values if orjson.loads(value)["kind"] != "tick"),
                  key=lambda value: (orjson.loads(value)["seq"], orjson.loads(value)["kind"]))
    replay = ReplayStream(replace(whole.settings, chunk_tokens=64, chunk_overlap_tokens=8, idle_gap_seconds=60.0),
                          "default")
    stored = [AppendedEvent(orjson.loads(record.value or b""), record.timestamp) for record in l1]
    replayed = [record for seq, e in enumerate(stored, start=1) for record in replay.feed(seq, e)]
    assert [orjson.dumps(r) for r in replayed if r["kind"] != "chunk"] == sent
    assert replay.secrets == whole.tables[keys.SESSION_SECRETS]


@hsettings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cut=st.integers(0, 37))
def test_the_tail_scan_from_any_cut_redacts_as_the_stage(seed: int, cut: int, tmp_path_factory: Any) -> None:
    """The tail scan starts inside sessions: with the prints the index holds at or below its cut
    (the structured sink's ``secrets`` rows: here, the records' ``secrets`` fields), its tool
    results and chunks above the cut hold what the stage's hold."""
    from planner.tailscan import TailScan, chunker_for
    from tests.planner.corpus import make_test_settings

    log = log_of(seed)
    worker = Worker(every=8)
    run(worker, l1_batch(log), [])
    bodies = _bodies(worker, ("redacted", "toolresults"))
    rows = [(body["seq"], f"default/{body['event']['sessionId']}", entry)
            for body in bodies if body["kind"] == "event" for entry in body.get("secrets", ())]

    def session_secrets(sessions: Any) -> dict[str, list[list[Any]]]:
        found: dict[str, list[list[Any]]] = {}
        for seq, key, (print_, length, rule) in sorted(rows):
            if seq <= cut and key in sessions:
                found.setdefault(key, []).append([print_, length, rule, seq])
        return found

    settings = make_test_settings(tmp_path_factory.mktemp("tail"), "unused:9092", tick_every_seqs=8)
    scan = TailScan(chunker_for(settings), tick_every_seqs=8)
    # As the L1 reader gives them: the stored bytes, parsed.
    events = [(seq, orjson.loads(r.value or b"")) for seq, r in enumerate(l1_batch(log), start=1) if seq > cut]
    tail = scan.run(events, from_seq=cut + 1, to_seq=len(log), want_tool_results=True,
                    session_acls=dict.fromkeys(("s1", "s2", "s3"), ALICE), session_secrets=session_secrets)
    # (An inherited access list is built with its keys in another order: compared as data.)
    expected = sorted(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
                      for body in bodies if body["kind"] == "toolresult" and body["seq"] > cut)
    assert sorted(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) for record in tail.tool_results) == expected
    texts = " ".join(chunk["text"] for chunk in tail.chunks if chunk["sessionId"] != "s2")
    assert PASSWORD not in texts and TOKEN not in texts and KEY not in texts


def _shell_mode(name: str, command: str, output: str) -> list[dict[str, Any]]:
    """Claude Code's `!` shell mode as its importer reads it: the command and its output, two user
    messages, the output's parent the command's."""
    typed = event(name, 1, "message", text=f"<bash-input>{command}</bash-input>")
    printed = event(name, 2, "message", text=f"<bash-stdout>{output}</bash-stdout><bash-stderr></bash-stderr>")
    return [typed, {**printed, "parentEventId": typed["eventId"]}]


def _redacted_in_order(events: list[dict[str, Any]]) -> list[str]:
    remembered: list[list[Any]] | None = None
    texts = []
    for seq, item in enumerate(events, 1):
        recall = Recall(f"default/{item['sessionId']}", remembered, seq)
        texts.append(redact_event(item, recall=recall).event["fields"]["text"])
        remembered = merge_remembered(remembered, recall.added, seq) or remembered
    return texts


def test_a_shell_mode_command_that_prints_a_secret_loses_its_output_message() -> None:
    """Policy 2.19: `!openssl rand -hex 32` and its output are two events; the command's message is
    remembered as a tool call is, and the hex key (no other mark) in the next one goes."""
    hex_key = KEY * 2
    typed, printed = _redacted_in_order(_shell_mode("sh1", "openssl rand -hex 32", hex_key))
    assert typed == "<bash-input>openssl rand -hex 32</bash-input>"
    assert hex_key not in printed and "[REDACTED:secret-output]" in printed
    assert hex_key in redact_event(_shell_mode("sh1", "openssl rand -hex 32", hex_key)[1]).event["fields"]["text"]
    # A command that prints no secret keeps its output: a commit id has the same shape.
    assert hex_key in _redacted_in_order(_shell_mode("sh2", "git rev-parse HEAD", hex_key))[1]
