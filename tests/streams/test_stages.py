"""The worker's stages without Kafka or faust (streams.stages): redaction, dead letters,
ownership and dedup, chunk emission, progress markers, gaps and flush ticks, and idempotent
replay. A small in-memory "broker" routes the records the stages produce; tables are dicts that
take a batch's writes only when the test commits it, as the faust wiring does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from streams.asp import canonical_bytes
from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
from streams.redaction import policy_hash
from streams.settings import Settings
from streams.stages import (
    ChunkingStage,
    Effects,
    Gaps,
    Metric,
    Produce,
    RedactionStage,
    Tails,
    keys,
)
from streams.stages.gaps import MAX_ROUNDS
from tests.streams.stages_kit import (
    EVIL,
    L1,
    REDACTED,
    SECRET,
    Worker,
    event,
    interleaved,
    l1_batch,
    records,
    run,
    session,
)


@pytest.fixture(scope="module")
def log() -> list[dict[str, Any]]:
    return [e for pair in zip(session("s1"), session("s2", start=100), strict=True) for e in pair]


def produced(effects: Effects, topic: str) -> list[Produce]:
    return [record for record in effects.records if record.topic == topic]


def counted(effects: Effects, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    totals: dict[tuple[tuple[str, str], ...], float] = {}
    for metric in effects.metrics:
        if metric.name == name:
            totals[metric.labels] = totals.get(metric.labels, 0) + metric.value
    return totals


def test_redaction_removes_secrets_and_sends_tool_results_apart(log: list[dict[str, Any]]) -> None:
    worker = Worker()
    effects = worker.redact(l1_batch(log))
    redacted, tools = produced(effects, "redacted"), produced(effects, "toolresults")
    assert len([r for r in redacted if orjson.loads(r.value)["kind"] == "event"]) == len(log)
    assert len([r for r in tools if orjson.loads(r.value)["kind"] == "toolresult"]) == 4
    for record in effects.records:
        assert SECRET.encode() not in record.value and SECRET.encode() not in record.key
    for write in effects.writes:
        assert SECRET not in orjson.dumps(write.value).decode() and SECRET not in write.key
    assert sum(counted(effects, "usl_redactions_total").values()) >= 4
    assert counted(effects, "usl_records_total") == {(("stage", "redaction"),): len(log)}
    first = orjson.loads(redacted[0].value)
    assert first["seq"] == 1 and first["policy"] == policy_hash() and redacted[0].key == b"s1"


def test_ticks_go_to_every_partition_and_must_be_confirmed(log: list[dict[str, Any]]) -> None:
    worker = Worker(partitions=3, every=4)
    effects = worker.redact(l1_batch(log[:9]))
    ticks = [r for r in effects.records if orjson.loads(r.value)["kind"] == "tick"]
    assert [orjson.loads(t.value)["seq"] for t in ticks] == [4] * 6 + [8] * 6
    assert {(t.topic, t.partition) for t in ticks} == {(topic, p) for topic in ("redacted", "toolresults") for p in range(3)}
    assert all(t.confirm for t in ticks)
    assert not any(r.confirm for r in effects.records if r not in ticks)


def test_unreadable_and_invalid_records_are_dead_lettered() -> None:
    worker = Worker()
    invalid = orjson.dumps({"eventId": "x", "logId": "default"})
    duplicate_keys = b'{"eventId": "a", "eventId": "b"}'
    effects = worker.redact(records([b"not json", None, invalid, duplicate_keys]))
    letters = [orjson.loads(r.value) for r in produced(effects, "deadletters")]
    assert [letter["source"]["offset"] for letter in letters] == [0, 1, 2, 3]
    assert {letter["stage"] for letter in letters} == {"redaction"}
    assert counted(effects, "usl_dead_letters_total") == {
        (("stage", "redaction"), ("reason", "schema")): 3, (("stage", "redaction"), ("reason", "duplicate_keys")): 1}
    assert not produced(effects, "redacted")
    # Each record was applied: the offset moves on, nothing else is stored.
    assert worker.tables[keys.LOG_CLOCKS] == {keys.offset_key(0): 3}


def test_another_tenants_event_is_dead_lettered_and_a_repeated_event_id_counted() -> None:
    worker = Worker()
    mine = session("s1", turns=1)
    foreign = event("s1", 50, "message", turn="s1-t0", acl=EVIL, text="mine now")
    again = event("s1", 51, "message", turn="s1-t0", event_id=mine[2]["eventId"], text="same id")
    effects = worker.redact(l1_batch([*mine, foreign, again]))
    letters = [orjson.loads(r.value) for r in produced(effects, "deadletters")]
    assert [letter["source"]["offset"] for letter in letters] == [len(mine)]
    assert counted(effects, "usl_dead_letters_total") == {(("stage", "redaction"), ("reason", "foreign_tenant")): 1}
    assert counted(effects, "usl_duplicate_events_total") == {(("stage", "redaction"),): 1}
    events = [r for r in produced(effects, "redacted") if orjson.loads(r.value)["kind"] == "event"]
    assert len(events) == len(mine)


def test_table_keys_hold_no_raw_id() -> None:
    worker = Worker()
    effects = worker.redact(l1_batch(session(f"s-{SECRET}", turns=1)))
    assert effects.writes and all(SECRET not in write.key for write in effects.writes)
    assert all(SECRET.encode() not in record.key for record in effects.records)


def test_chunks_and_markers_cover_the_log_and_a_replayed_batch_adds_nothing(log: list[dict[str, Any]]) -> None:
    worker = Worker()
    worker.redact(l1_batch(log))
    worker.perform(worker.redaction, worker.redaction.flush({}, {}))
    batches = [worker.redacted(p) for p in range(2)]
    for batch in batches:
        worker.chunk(batch)
    chunks = worker.chunks()
    assert {c["sessionId"] for c in chunks} == {"s1", "s2"}
    assert len({c["chunkId"] for c in chunks}) == len(chunks)
    assert all(SECRET not in c["text"] for c in chunks)
    seqs = {seq for c in chunks for seq in range(c["minSeq"], c["maxSeq"] + 1)}
    assert max(seqs) <= len(log)
    assert set(worker.markers().values()) == {len(log)}
    before = {key: list(values) for key, values in worker.topics.items()}
    tables = orjson.dumps(worker.tables, option=orjson.OPT_SORT_KEYS)
    for batch in batches:  # at-least-once: the same records again
        again = worker.chunk(batch)
        assert not again.records and not again.markers
    assert worker.topics == before
    assert orjson.dumps(worker.tables, option=orjson.OPT_SORT_KEYS) == tables


def test_a_replayed_l1_batch_sends_the_same_records_and_no_tick(log: list[dict[str, Any]]) -> None:
    worker = Worker()
    batch = l1_batch(log)
    first = worker.redact(batch)
    tables = orjson.dumps(worker.tables, option=orjson.OPT_SORT_KEYS)
    second = worker.redact(batch)
    events = [r for r in first.records if orjson.loads(r.value)["kind"] in ("event", "toolresult")]
    assert second.records == events, "a replay re-sends byte-identical records (the chunker skips them)"
    assert orjson.dumps(worker.tables, option=orjson.OPT_SORT_KEYS) == tables


def test_an_unreadable_redacted_record_is_dead_lettered() -> None:
    worker = Worker()
    effects = worker.chunk(records([b"{]", orjson.dumps({"kind": "event"})], topic=REDACTED))
    assert counted(effects, "usl_dead_letters_total") == {(("stage", "chunking"), ("reason", "chunking_failed")): 2}
    assert worker.tables[keys.CHUNKER_PROGRESS] == {keys.offset_key(0): 1}


def test_a_hole_is_not_applied_until_read_again_or_judged_empty(log: list[dict[str, Any]]) -> None:
    worker = Worker()
    batch = l1_batch(log[:6])
    worker.redact(batch[:2])
    late = worker.redaction.apply(batch[4:])
    assert late.holes == [(L1, 0)] * 2 and not late.records and late.writes == []
    # The broker is asked at once; it holds records there (a rebalance's hole): read again.
    assert worker.gaps.to_judge({(L1, 0): 1}, {(L1, 0)}) == [((L1, 0), 2, 4)]  # up to the first record past it
    assert not worker.gaps.read_enough((L1, 0), 2)
    worker.gaps.judged_holding((L1, 0), 2)
    for _ in range(MAX_ROUNDS):
        assert worker.gaps.to_judge({(L1, 0): 1}, {(L1, 0)}) == []
        worker.gaps.reread((L1, 0))
        assert worker.redaction.apply(batch[4:]).holes == [(L1, 0)] * 2
    # Read again three times and still there: the broker judges offsets 2 and 3 again. Until it
    # says they hold no record (transaction markers), the hole stays a hole.
    assert worker.gaps.to_judge({(L1, 0): 1}, {(L1, 0)}) == [((L1, 0), 2, 4)]
    assert worker.gaps.read_enough((L1, 0), 2)
    assert worker.redaction.apply(batch[4:]).holes == [(L1, 0)] * 2
    worker.gaps.judged_empty((L1, 0), 2, 4)
    accepted = worker.redaction.apply(batch[4:])
    events = [r for r in produced(accepted, "redacted") if orjson.loads(r.value)["kind"] == "event"]
    assert not accepted.holes and [orjson.loads(r.value)["seq"] for r in events] == [5, 6]
    assert worker.gaps.to_judge({(L1, 0): 5}, {(L1, 0)}) == []
    # Applied past, the hole's reads are forgotten; that it is empty is kept while a read again
    # may meet it: those start at the group's committed offset.
    assert worker.gaps.empty and not worker.gaps.rounds
    assert worker.gaps.to_judge({(L1, 0): 5}, {(L1, 0)}, {(L1, 0): 4}) == [] and worker.gaps.empty
    assert worker.gaps.to_judge({(L1, 0): 5}, {(L1, 0)}, {(L1, 0): 5}) == [] and not worker.gaps.empty


def test_a_hole_the_broker_finds_empty_at_once_is_accepted_without_reading_again(log: list[dict[str, Any]]) -> None:
    """A transactional producer's marker (or an aborted transaction) between two of its
    transactions: every hole was read again three times before the broker was asked, over a
    second per transaction."""
    worker = Worker()
    batch = l1_batch(log[:6])
    worker.redact(batch[:2])
    assert worker.redaction.apply(batch[4:]).holes == [(L1, 0)] * 2
    assert worker.gaps.to_judge({(L1, 0): 1}, {(L1, 0)}) == [((L1, 0), 2, 4)]
    worker.gaps.judged_empty((L1, 0), 2, 4)
    accepted = worker.redaction.apply(batch[4:])
    assert not accepted.holes and not worker.gaps.rounds


def test_the_holes_a_batch_will_meet_are_known_before_it_is_applied() -> None:
    """What the wiring asks the broker about before a batch is applied: per source partition,
    each range between the last applied offset and the batch's records, less those found empty."""
    gaps = Gaps()
    a, b = (L1, 0), (L1, 1)
    batch = [(a, 5), (b, 2), (a, 6), (a, 8), (b, 3), (a, 11), (b, 9)]
    assert gaps.found_in(batch, {a: 4, b: None}) == {a: [(7, 8), (9, 11)], b: [(4, 9)]}
    gaps.judged_empty(a, 7, 8)
    assert gaps.found_in(batch, {a: 4, b: 1}) == {a: [(9, 11)], b: [(4, 9)]}
    assert gaps.found_in([(a, 5), (a, 6)], {a: 4}) == {}
    gaps.judged_holding(b, 4)  # records there: reading again brings them, not another question
    assert gaps.found_in(batch, {a: 4, b: 1}) == {a: [(9, 11)]}


def test_a_partition_that_ends_in_an_empty_hole_is_released_to_its_end(log: list[dict[str, Any]]) -> None:
    """A log whose last offsets hold no committed record (a transactional producer's last commit
    marker): once the broker said so, a flush tick releases the log through them, as L1's
    committed seq does; before, the log's progress stood one short of it for good."""
    worker = Worker(every=1000)
    worker.redact(l1_batch(log[:4]))
    assert {orjson.loads(r.value)["seq"] for r in worker.redaction.flush({}, {}).records} == {4}
    worker.redaction.commit(worker.redaction.flush({}, {}))
    tails = Tails(worker.gaps, patience=1.0)
    assert tails.check(0.0, {(L1, 0): 5}, {(L1, 0): 3}) == []
    assert tails.check(2.0, {(L1, 0): 5}, {(L1, 0): 3}) == [(L1, 0)]
    assert worker.gaps.to_judge({(L1, 0): 3}, {(L1, 0)}) == [((L1, 0), 4, 5)]
    assert not worker.redaction.flush({}, {}).records  # not yet judged: nothing more to release
    worker.gaps.judged_empty((L1, 0), 4, 5)
    assert {orjson.loads(r.value)["seq"] for r in worker.redaction.flush({}, {}).records} == {5}


def test_a_hole_the_broker_holds_records_in_is_never_accepted(log: list[dict[str, Any]]) -> None:
    """Faust dropped the hole's records on every read again (a loaded worker in the fault suite:
    "accepting a gap in ('rel.l1', 0) before offset 3704", then 38 chunks in no index). However
    often it is read again, the hole stays until its records arrive or the broker finds it empty;
    a hole judged empty up to one offset is not accepted past it."""
    worker = Worker()
    batch = l1_batch(log[:8])
    worker.redact(batch[:2])
    for _ in range(MAX_ROUNDS * 3):
        worker.gaps.reread((L1, 0))
        assert worker.redaction.apply(batch[4:]).holes == [(L1, 0)] * 4
    assert worker.gaps.to_judge({(L1, 0): 1}, {(L1, 0)}) == [((L1, 0), 2, 4)]
    worker.gaps.judged_empty((L1, 0), 2, 3)  # only offset 2 is empty: 3 is a record not yet here
    assert worker.redaction.apply(batch[4:]).holes == [(L1, 0)] * 4
    filled = worker.redaction.apply(batch[2:])  # the records arrive after all
    assert not filled.holes
    assert worker.gaps.to_judge({(L1, 0): 7}, {(L1, 0)}) == []  # a filled hole is not judged


def test_a_hole_in_a_partition_a_rebalance_took_away_is_not_judged_here(log: list[dict[str, Any]]) -> None:
    """A worker that lost a partition whose hole was still to be judged: the broker holds the
    hole's records, and the partition's new owner reads them from the committed offset, so they
    are no reason for this worker to restart (several workers: tests/deploy/test_scale_out.py)."""
    worker = Worker()
    batch = l1_batch(log[:6])
    worker.redact(batch[:2])
    for _ in range(MAX_ROUNDS):
        assert worker.redaction.apply(batch[4:]).holes
        worker.gaps.reread((L1, 0))
    assert worker.redaction.apply(batch[4:]).holes  # read again three times: for the broker now
    assert worker.gaps.to_judge({(L1, 0): 1}, {(L1, 1)}) == []  # (L1, 0) went to another worker
    # Given back later, its hole is asked about as a new one: records there are read again.
    assert worker.redaction.apply(batch[4:]).holes
    assert worker.gaps.to_judge({(L1, 0): 1}, {(L1, 0)}) == [((L1, 0), 2, 4)]
    assert not worker.gaps.read_enough((L1, 0), 2)


def test_an_unapplied_partition_end_is_read_again_once_it_stands_still() -> None:
    """A partition's last records that the consumer read past but never handed on: nothing past
    them shows a hole, so their end offset against what the stage applied does."""
    gaps = Gaps()
    tails = Tails(gaps, patience=5.0)
    source = (REDACTED, 1)
    assert tails.check(0.0, {source: 817, (REDACTED, 0): 834}, {source: 687, (REDACTED, 0): 833}) == []
    assert tails.check(4.0, {source: 817}, {source: 687}) == []  # maybe a batch still on its way
    assert tails.check(6.0, {source: 817}, {source: 687}) == [source]
    assert tails.check(7.0, {source: 817}, {source: 687}) == []  # read again: waits as long again
    gaps.reread(source)
    assert tails.check(6.0 + 5.0, {source: 817}, {source: 687}) == [source]
    assert tails.check(12.0, {source: 817}, {source: 700}) == []  # records arrived: it moves again
    assert tails.check(17.5, {source: 817}, {source: 816}) == []  # caught up
    assert tails.check(30.0, {source: 817}, {source: 816}) == [] and source not in tails.seen
    assert tails.check(40.0, {source: 817}, {source: None}) == []  # nothing applied to judge by


def test_an_unapplied_end_that_reading_again_never_fills_is_accepted_once_judged_empty() -> None:
    gaps = Gaps()
    tails = Tails(gaps, patience=1.0)
    source = (L1, 0)
    read = []
    for second in range(20):
        for found in tails.check(float(second), {source: 51}, {source: 49}):  # e.g. a transaction marker
            read.append(second)
            gaps.reread(found)
    assert len(read) > MAX_ROUNDS, read  # read again until the broker has judged it
    assert gaps.to_judge({source: 49}, {source}) == [(source, 50, 51)]
    gaps.judged_empty(source, 50, 51)
    assert tails.check(21.0, {source: 51}, {source: 49}) == []
    assert tails.check(23.0, {source: 51}, {source: 49}) == []  # accepted
    assert tails.check(24.0, {source: 54}, {source: 51}) == []  # records applied, more written: judged afresh
    assert tails.check(26.0, {source: 54}, {source: 51}) == [source]


def test_flush_ticks_claim_what_was_handled_once(log: list[dict[str, Any]]) -> None:
    worker = Worker(every=1000)
    worker.redact(l1_batch(log[:5]))
    flush = worker.redaction.flush({}, {})
    bodies = [orjson.loads(r.value) for r in flush.records]
    assert len(bodies) == 4 and all(b["flush"] and b["seq"] == 5 for b in bodies)
    assert all(r.confirm for r in flush.records)
    worker.perform(worker.redaction, flush)
    assert not worker.redaction.flush({}, {}).records
    # A log whose clock was restored here claims what the group committed on its partition.
    other = Worker(every=1000)
    other.tables[keys.LOG_CLOCKS].update(worker.tables[keys.LOG_CLOCKS])
    restored = {"default": 0, keys.offset_key(0): 0}
    assert not other.redaction.flush(restored, {}).records
    claimed = other.redaction.flush(restored, {0: 3})
    assert {orjson.loads(r.value)["seq"] for r in claimed.records} == {3}


def test_a_flush_claim_past_the_clock_is_claimed_again_once_the_clock_gets_there(log: list[dict[str, Any]]) -> None:
    """A flush tick releases min(claim, the clock's lastSeq). When the group's committed offset
    was ahead of the clock this process held, the tick released only the clock's seq; remembering
    the claim as flushed then kept every later tick of that log back, and its watermark stayed
    short of the head (seen as 96 of 98 in a rebalance test) until another event arrived."""
    worker = Worker(every=1000)
    l1 = l1_batch(log[:5])
    worker.redact(l1[:3])
    first = worker.redaction.flush({"default": 0}, {0: 5})
    assert {orjson.loads(r.value)["seq"] for r in first.records} == {3}
    worker.perform(worker.redaction, first)
    worker.redact(l1[3:5])
    second = worker.redaction.flush({"default": 0}, {0: 5})
    assert {orjson.loads(r.value)["seq"] for r in second.records} == {5}
    worker.perform(worker.redaction, second)
    assert not worker.redaction.flush({"default": 0}, {0: 5}).records  # nothing new: no tick


def test_a_flush_tick_releases_the_seqs_of_other_logs_on_its_partition(log: list[dict[str, Any]]) -> None:
    """Logs share an L1 partition once every partition is owned. Appending to one log left the
    other's flush ticks at its own last seq, so its watermark stayed "behind" the other log's
    seqs for good (seen as `usl status` lag 2326 and every wait:N timing out on real sessions)."""
    worker = Worker(every=1000)
    quiet = [{**e, "logId": "quiet"} for e in log[:5]]
    busy = [{**e, "logId": "busy", "eventId": f"busy-{e['eventId']}"} for e in log[:4]]
    worker.redact(l1_batch(quiet + busy))
    flush = worker.redaction.flush({}, {})
    released = {(b["logId"], b["seq"]) for b in (orjson.loads(r.value) for r in flush.records)}
    assert released == {("quiet", 9), ("busy", 9)}
    worker.perform(worker.redaction, flush)
    # After a restart the clocks are restored: what the group committed on the partition releases
    # the quiet log as far as the partition was applied, and the busy log's new seqs release it too.
    restarted = Worker(every=1000)
    restarted.tables[keys.LOG_CLOCKS].update(worker.tables[keys.LOG_CLOCKS])
    restored = {"quiet": 0, "busy": 0, keys.offset_key(0): 0}
    flush = restarted.redaction.flush(restored, {0: 9})
    assert {(b["logId"], b["seq"]) for b in (orjson.loads(r.value) for r in flush.records)} == {
        ("quiet", 9), ("busy", 9)}
    restarted.perform(restarted.redaction, flush)
    more = [{**e, "logId": "busy", "eventId": f"more-{e['eventId']}"} for e in log[4:6]]
    restarted.redact(records([canonical_bytes(e) for e in more], first=9))
    flush = restarted.redaction.flush(restored, {0: 9})
    assert {(b["logId"], b["seq"]) for b in (orjson.loads(r.value) for r in flush.records)} == {
        ("quiet", 11), ("busy", 11)}


@hsettings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(0, 30), max_size=6).map(lambda xs: sorted(set(xs))), every=st.integers(1, 8))
def test_any_split_of_the_batches_gives_the_same_records_and_state(log: list[dict[str, Any]], cuts: list[int],
                                                                   every: int) -> None:
    """However the records are cut into batches: the same redacted records, the same chunks in
    the same order per partition, the same final markers and the same stored state."""
    l1 = l1_batch(log)
    whole, split = Worker(every=every), Worker(every=every)
    run(whole, l1, [])
    run(split, l1, [c for c in cuts if c < len(l1)])
    for topic in ("redacted", "toolresults", "deadletters"):
        for partition in range(2):
            assert whole.topics.get((topic, partition)) == split.topics.get((topic, partition))
    assert whole.chunks() == split.chunks()
    assert whole.markers() == split.markers()
    assert orjson.dumps(whole.tables, option=orjson.OPT_SORT_KEYS) == orjson.dumps(split.tables, option=orjson.OPT_SORT_KEYS)


def test_metric_updates_are_plain_data() -> None:
    assert Metric("usl_records_total") == Metric("usl_records_total", (), 1.0, "inc")


def test_the_stage_tables_are_the_worker_tables() -> None:
    """One spelling: the tables the stages read are the ones the worker creates (and whose
    changelogs streams.topics creates)."""
    from streams.topics import faust_tables

    assert set(faust_tables(Settings.from_env({}))) == set(Worker().tables)
    assert keys.offset_key(3) == "@offset/3" and keys.is_offset_key(keys.offset_key(3))
    assert not keys.is_offset_key(keys.progress_key(3, "default"))


@hsettings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), every=st.integers(1, 8))
def test_the_rebuild_replay_derives_the_stages_records_byte_for_byte(seed: int, every: int) -> None:
    """ReplayStream (the rebuild path) and the stages build their records from one definition
    (streams.stages.records): over a seeded multi-session log the replay's event and tool-result
    records are the bytes the redaction stage sends, in the same order, and its chunks the
    bytes the chunking stage sends."""
    from dataclasses import replace

    from sinks.rebuild import ReplayStream
    from streams.l1 import AppendedEvent

    log = interleaved(seed)
    worker = Worker(every=every)
    run(worker, l1_batch(log), [])
    sent = [value for (topic, _), values in sorted(worker.topics.items()) if topic in ("redacted", "toolresults")
            for value in values if orjson.loads(value)["kind"] != "tick"]
    live = sorted(sent, key=lambda value: (orjson.loads(value)["seq"], orjson.loads(value)["kind"]))
    replay = ReplayStream(replace(worker.settings, chunk_tokens=64, chunk_overlap_tokens=8, idle_gap_seconds=60.0),
                          "default")
    # As streams.l1.L1Reader reads them: the stored bytes parsed, with their append time.
    stored = [AppendedEvent(orjson.loads(record.value or b""), record.timestamp) for record in l1_batch(log)]
    replayed = [record for seq, e in enumerate(stored, start=1) for record in replay.feed(seq, e)]
    assert [orjson.dumps(r) for r in replayed if r["kind"] != "chunk"] == live
    assert replay.rejected == 1 and len(live) > len(log)
    live_chunks = sorted(orjson.dumps({"kind": "chunk", **chunk}) for chunk in worker.chunks())
    assert sorted(orjson.dumps(r) for r in replayed if r["kind"] == "chunk") == live_chunks
    assert live_chunks


# A Twilio auth token beside its SID: policy 2.6 removed the SID and kept the token, 2.7 removes both.
TWILIO_TOKEN = "05ce4249dcaa315bba76d66907c321cc"
AS_26_LEFT_IT = f"my twilio creds: [REDACTED:twilio-account-sid] {TWILIO_TOKEN}"


def _chunk_texts(worker: Worker) -> str:
    return "\n".join(chunk["text"] for chunk in worker.chunks())


def test_a_turn_open_across_a_policy_upgrade_is_chunked_under_the_new_policy() -> None:
    """Found by a new user's byte scan after upgrading redaction 2.6 -> 2.7 and `usl rebuild all`:
    the worker's chunker state (restored from its changelog) still held the open turn's text as
    2.6 redacted it, and when the turn ended its chunk, naming 2.7, put the Twilio token 2.7
    removes into the rebuilt text index. Both a state made under another policy and a
    redacted-topic record redacted under one are now redacted again before they are chunked."""
    from streams.stages.records import event_record

    worker = Worker()
    old = Chunker(ChunkerConfig(target_tokens=64, overlap_tokens=8, idle_gap_seconds=60.0), default_tokenizer(),
                  policy_hash="policy-2.6")
    message = event("s9", 1, "message", turn="s9-t0", text=AS_26_LEFT_IT)
    state = old.new_state("s9")
    assert old.on_event(state, "default", 1, message) == []  # the open turn, as 2.6 left it
    state.pop("policy", None)  # as states were written before they named their policy
    worker.tables[keys.CHUNKER_SESSIONS][keys.session_key("default", "s9")] = state
    ended = event_record("default", 2, event("s9", 2, "turn.ended", turn="s9-t0"), policy=policy_hash(), clock_time=None)
    worker.chunk(records([orjson.dumps(ended)], topic=REDACTED))
    texts = _chunk_texts(worker)
    assert "my twilio creds" in texts and TWILIO_TOKEN not in texts

    # A record 2.6 redacted, chunked after the upgrade: redacted again first.
    backlog = [event_record("default", 3, event("s8", 3, "message", turn="s8-t0", text=AS_26_LEFT_IT), policy="policy-2.6",
                            clock_time=None),
               event_record("default", 4, event("s8", 4, "turn.ended", turn="s8-t0"), policy="policy-2.6", clock_time=None)]
    worker.chunk(records([orjson.dumps(record) for record in backlog], topic=REDACTED, first=1))
    texts = _chunk_texts(worker)
    assert texts.count("my twilio creds") == 2 and TWILIO_TOKEN not in texts


# -- a quiet log's clock record ---------------------------------------------------------------

QUIET_AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC).timestamp()  # hours after the log's events
ALL = {0, 1}  # the worker chunks every redacted partition


def quiet_worker() -> Worker:
    """A worker that cuts at G = 60 s and writes a clock record after 5 s of quiet."""
    from dataclasses import replace

    worker = Worker(every=1000)  # no regular tick in these logs: only a clock record can cut
    worker.redaction.settings = replace(worker.settings, idle_gap_seconds=60.0, quiet_log_seconds=5.0)
    return worker


def open_ended(name: str) -> list[dict[str, Any]]:
    """A session whose last turn never ends (its writer stopped before turn.ended)."""
    return session(name)[:-1]


def chunk_all(worker: Worker) -> None:
    worker.topics = {key: values for key, values in worker.topics.items() if key[0] != "chunks"}
    worker.chunking = ChunkingStage(worker.chunking.chunker, tables=worker.tables, gaps=worker.gaps,
                                    partitions=worker.settings.stream_partitions)
    for name in (keys.CHUNKER_SESSIONS, keys.CHUNKER_PROGRESS):
        worker.tables[name].clear()
    for partition in range(worker.settings.stream_partitions):
        worker.chunk(worker.redacted(partition))


def test_a_quiet_log_gets_one_clock_record_and_it_cuts_the_turn_left_open() -> None:
    """A turn whose end never comes, on a log nothing else is appended to: the log clock only
    moved with events, so no tick ever cut the turn and it held every index of the log back for
    good. After USL_QUIET_LOG_SECONDS of quiet the worker writes one clock record to L1; read
    back, its quiet tick cuts the turn (its session had events since the last tick, which a
    regular tick would wait for), and the markers reach the record's seq."""
    worker = quiet_worker()
    log = open_ended("s1")
    l1 = l1_batch(log)
    worker.redact(l1)
    worker.perform(worker.redaction, worker.redaction.flush({}, {}))
    chunk_all(worker)
    assert min(worker.markers().values()) < len(log)  # the open turn holds its partition's
    stage = worker.redaction
    assert stage.quiet_clocks({}, {0}, ALL, now=QUIET_AT, monotonic=100.0) == []  # first sight of the clock
    assert stage.quiet_clocks({}, {0}, ALL, now=QUIET_AT, monotonic=104.0) == []  # quiet for 4 s only
    assert stage.quiet_clocks({}, {1}, ALL, now=QUIET_AT, monotonic=106.0) == []  # not this process's partition
    [clock] = stage.quiet_clocks({}, {0}, ALL, now=QUIET_AT, monotonic=106.0)
    assert (clock.topic, clock.partition, clock.confirm) == ("l1", 0, True)
    assert stage.quiet_clocks({}, {0}, ALL, now=QUIET_AT + 600, monotonic=200.0) == []  # one per quiet spell

    effects = worker.redact(records([clock.value], first=len(l1)))
    assert not produced(effects, "deadletters")
    ticks = [orjson.loads(r.value) for r in effects.records]
    assert len(ticks) == 2 * worker.settings.stream_partitions
    assert all(t["quiet"] and t["seq"] == len(log) + 1 and t["logTime"] == QUIET_AT for t in ticks)
    assert counted(effects, "usl_ticks_total") == {(("kind", "quiet"),): 1}
    worker.perform(worker.redaction, worker.redaction.flush({}, {}))
    chunk_all(worker)
    last_turn = [c for c in worker.chunks() if c["turnId"] == "s1-t1"]
    assert last_turn and not any(c.get("provisional") for c in last_turn)
    assert min(worker.markers().values()) == len(log) + 1
    # Read back, the record is the log's last: no other follows, in this process or after a restart.
    assert stage.quiet_clocks({}, {0}, ALL, now=QUIET_AT + 600, monotonic=300.0) == []
    restarted = RedactionStage(stage.settings, tables=worker.tables, gaps=Gaps(), policy=stage.policy)
    assert restarted.quiet_clocks({"default": 0}, {0}, set(), now=QUIET_AT + 600, monotonic=0.0) == []
    assert restarted.quiet_clocks({"default": 0}, {0}, set(), now=QUIET_AT + 600, monotonic=60.0) == []


def test_no_clock_record_while_the_present_is_within_g_of_the_log_clock() -> None:
    """A live log pausing for less than G: its clock record could cut nothing, so none is written
    (one comes once the pause passes G). Here the chunking partitions are another worker's, so
    this one cannot see whether a turn is open and takes it that one may be."""
    worker = quiet_worker()
    log = open_ended("s1")
    worker.redact(l1_batch(log))
    last = datetime.fromisoformat(log[-1]["time"].replace("Z", "+00:00")).timestamp()
    stage = worker.redaction
    assert stage.quiet_clocks({}, {0}, set(), now=last + 30, monotonic=0.0) == []
    assert stage.quiet_clocks({}, {0}, set(), now=last + 30, monotonic=50.0) == []
    assert len(stage.quiet_clocks({}, {0}, set(), now=last + 61, monotonic=51.0)) == 1


def test_no_clock_record_when_no_turn_is_open() -> None:
    """An import whose turns all ended: a worker that chunks every partition sees nothing open
    and writes no clock record, so a later re-import still appends nothing to the log. Until
    the chunking stage has applied the log's last events it cannot tell, and asks again."""
    worker = quiet_worker()
    worker.redact(l1_batch(session("s1")))
    stage = worker.redaction
    assert stage.quiet_clocks({}, {0}, ALL, now=QUIET_AT, monotonic=0.0) == []
    assert stage.quiet_clocks({}, {0}, ALL, now=QUIET_AT, monotonic=10.0) == []  # nothing chunked yet: open unknown
    worker.perform(worker.redaction, worker.redaction.flush({}, {}))
    chunk_all(worker)
    assert stage.quiet_clocks({}, {0}, ALL, now=QUIET_AT, monotonic=20.0) == []
    open_worker = quiet_worker()
    open_worker.redact(l1_batch(open_ended("s1")))
    open_worker.perform(open_worker.redaction, open_worker.redaction.flush({}, {}))
    chunk_all(open_worker)
    assert open_worker.redaction.quiet_clocks({}, {0}, ALL, now=QUIET_AT, monotonic=0.0) == []
    assert len(open_worker.redaction.quiet_clocks({}, {0}, ALL, now=QUIET_AT, monotonic=10.0)) == 1


@hsettings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), every=st.integers(1, 8), places=st.lists(st.floats(0, 1), min_size=1, max_size=3),
       gaps=st.lists(st.sampled_from([-3600.0, 0.0, 30.0, 61.0, 3600.0]), min_size=3, max_size=3))
def test_clock_records_cut_alike_in_the_stages_and_the_replay(seed: int, every: int, places: list[float],
                                                              gaps: list[float]) -> None:
    """Clock records anywhere in a log (a pause mid-import, at its end, one dated before the log's
    clock): the rebuild replay (ReplayStream, from L1 with its clock records) derives the chunks
    the stages send, byte for byte, so a rebuild cuts where the live worker did."""
    from dataclasses import replace

    from sinks.rebuild import ReplayStream
    from streams.l1 import AppendedEvent
    from streams.ticks import clock_record

    log: list[dict[str, Any]] = [*interleaved(seed)[:-1]]
    values = [canonical_bytes(e) for e in log]
    for place, gap in sorted(zip(places, gaps, strict=False)):
        at = int(place * len(values))
        before = max(datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp() for e in log[:max(at, 1)])
        values.insert(at, orjson.dumps(clock_record("default", before + gap)))
    worker = Worker(every=every)
    run(worker, records(values), [])
    assert all(b"another tenant" in letter for letter in worker.topics.get(("deadletters", 0), []))  # no clock record
    replay = ReplayStream(replace(worker.settings, chunk_tokens=64, chunk_overlap_tokens=8, idle_gap_seconds=60.0),
                          "default")
    stored = [AppendedEvent(orjson.loads(value), 1.8e9) for value in values]
    replayed = [record for seq, e in enumerate(stored, start=1) for record in replay.feed(seq, e)]
    live_chunks = sorted(orjson.dumps({"kind": "chunk", **chunk}) for chunk in worker.chunks())
    assert sorted(orjson.dumps(r) for r in replayed if r["kind"] == "chunk") == live_chunks
