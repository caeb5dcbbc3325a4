"""The plumbing of the fault suite's scaled-out stack, without a stack: which stacks a run
starts for which faults, which child writes which kind (and shard), the watermark readers see
of a sharded kind (the minimum over its shards) and its regressions, and the querier's check of
every shard generation an answer read."""

from __future__ import annotations

from pathlib import Path

import orjson
from hypothesis import given
from hypothesis import strategies as st

from deploy.stack import sink_children
from reliability import (
    DEFAULT_FAULT_KINDS,
    LOCAL_FAULT_KINDS,
    SCALED_OUT_FAULT_KINDS,
    SHARD_FAULT_KINDS,
    phases,
)
from reliability.load import Querier, WatermarkWatch
from reliability.stack import SinkProcess, SuiteStack, sink_layout
from sinks.generations import GenerationStore, Manifest
from sinks.service import ALL_KINDS
from streams.settings import Settings


def test_every_kind_is_in_the_default_set_and_each_runs_on_the_stack_it_needs() -> None:
    assert set(SHARD_FAULT_KINDS) | {"store-unavailable", "partial-upload"} == set(SCALED_OUT_FAULT_KINDS)
    assert set(DEFAULT_FAULT_KINDS) == set(LOCAL_FAULT_KINDS) | set(SCALED_OUT_FAULT_KINDS)
    local, scaled_out = phases(DEFAULT_FAULT_KINDS)
    assert (local.name, local.kinds, local.object_store, local.sink_shards) == ("local", LOCAL_FAULT_KINDS, False, 1)
    assert scaled_out.name == "scaled-out" and scaled_out.kinds == SCALED_OUT_FAULT_KINDS
    assert scaled_out.object_store and scaled_out.sink_shards == 2
    # A stack no selected fault needs is not started; --object-store makes the local one publish.
    assert [p.name for p in phases(("kill-shard",))] == ["scaled-out"]
    assert [(p.name, p.object_store) for p in phases(("kill-sink",), object_store=True)] == [("local", True)]


def test_the_local_stack_runs_one_sink_per_kind(tmp_path: Path) -> None:
    stack = SuiteStack(tmp_path)
    layout = stack.sink_layout()
    assert layout == {kind: [SinkProcess(f"sink-{kind}")] for kind in ALL_KINDS}
    assert stack.sharded_kinds() == {}
    assert stack.sink_process("text") == "sink-text"


def test_the_scaled_out_stack_runs_what_usl_up_runs_with_two_shards(tmp_path: Path) -> None:
    stack = SuiteStack(tmp_path, sink_shards=2)
    stack.settings = Settings.from_env({}, home=tmp_path / "usl", sink_shards=2)
    children = stack.children()
    assert {name: args for name, args in children.items() if args[0] == "sink"} == sink_children(stack.settings)
    layout = stack.sink_layout()
    assert set(layout) == set(ALL_KINDS)  # every kind is written by some child
    sharded = stack.sharded_kinds()
    assert sharded, "two shards of the shardable kinds"
    for kind, procs in sharded.items():
        assert sorted(str(p.shard) for p in procs) == ["shard-0-of-2", "shard-1-of-2"], kind
        assert len({p.name for p in procs}) == 2, kind  # killing one leaves the other running
    for kind in set(ALL_KINDS) - set(sharded):
        assert [p.shard for p in layout[kind]] == [None], kind


def test_sink_layout_reads_kinds_and_shards_from_the_arguments() -> None:
    layout = sink_layout({"worker": ["worker"], "all": ["sink"],
                          "s1": ["sink", "--kind", "text, vector", "--shard", "1/2"],
                          "one": ["sink", "--kind", "text", "--shard", "0/1"]})
    assert layout["text"] == [SinkProcess("all"), SinkProcess("one"), SinkProcess("s1", "shard-1-of-2")]
    assert layout["structured"] == [SinkProcess("all")]


def _watermark(kind_key: str, generation_id: int, through: int, line: str = "live") -> tuple[bytes, bytes]:
    return (f"default/{kind_key}".encode(),
            orjson.dumps({"generationId": generation_id, "builtThroughSeq": through, "line": line}))


@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 50)), min_size=1, max_size=30))
def test_the_watch_shows_readers_the_minimum_over_a_complete_shard_set(steps: list[tuple[int, int]]) -> None:
    watch = WatermarkWatch(Settings.from_env({}))
    through = [0, 0]
    for n, (shard, step) in enumerate(steps):
        through[shard] += step
        watch._apply(*_watermark(f"text/shard-{shard}-of-2", n + 1, through[shard]))
    published = {shard for shard, _step in steps}
    if published == {0, 1}:
        assert int(watch.latest["text"]["builtThroughSeq"]) == min(through)
        assert watch.wait_for(min(through), ("text",), timeout=0.0)
        assert not watch.wait_for(min(through) + 1, ("text",), timeout=0.0)
    else:  # an incomplete set is not read
        assert "text" not in watch.latest
        assert not watch.wait_for(0, ("text",), timeout=0.0)
    assert watch.regressions == []


def test_the_watch_counts_a_shard_minimum_that_went_down() -> None:
    watch = WatermarkWatch(Settings.from_env({}))
    watch._apply(*_watermark("text/shard-0-of-2", 3, 10))
    watch._apply(*_watermark("text/shard-1-of-2", 4, 12))
    assert watch.regressions == []
    # A shard's new line starting lower is no regression of that line, but readers would see
    # the kind's watermark go from 10 back to 5.
    watch._apply(*_watermark("text/shard-0-of-2", 1, 5, line="rebuild-1"))
    assert watch.regressions == ["default/text (minimum over its shards): builtThroughSeq 10 -> 5"]
    watch._apply(*_watermark("text/shard-1-of-2", 3, 11))  # within its line: the old check
    assert watch.regressions[-1] == "default/text/shard-1-of-2 on line live: (4, 12) -> (3, 11)"


def _commit_shard(root: Path, shard: str) -> int:
    store = GenerationStore(root, "default", "text", shard=shard)
    staging = store.begin()
    (staging / "seg-1.bin").write_bytes(b"segment of " + shard.encode())
    manifest = store.commit(staging, Manifest(
        kind="text", log_id="default", line="", generation_id=0, built_through_seq=7,
        schema_version="1", asp_version="1", chunker={}, embedding=None, redaction_policy_hash="h"))
    return manifest.generation_id


def test_the_querier_checks_every_shard_generation_an_answer_read(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    first, second = _commit_shard(root, "shard-0-of-2"), _commit_shard(root, "shard-1-of-2")
    querier = Querier(Settings.from_env({}), "http://127.0.0.1:1", seed=1, index_root=root)

    def answer(shard_1_generation: int) -> list[str]:
        from reliability.load import QueryRecord

        record = QueryRecord(0.0, 0.0, "indexed", 200)
        shards = {"shard-0-of-2": {"generationId": first, "builtThroughSeq": 7, "line": "live"},
                  "shard-1-of-2": {"generationId": shard_1_generation, "builtThroughSeq": 7, "line": "live"}}
        querier._check({"asOfSeq": 7, "results": [], "explain": {"generations": {"text": {
            "generationId": first, "builtThroughSeq": 7, "line": "live", "shards": shards}}}}, record)
        return record.problems

    assert answer(second) == []
    assert answer(second + 1) == [f"text shard-1-of-2 generation {second + 1} was served before it was "
                                  f"committed (CURRENT is {second})"]
    # A committed shard generation damaged on disk fails verification.
    segment = GenerationStore(root, "default", "text", shard="shard-1-of-2").generation_dir(second) / "seg-1.bin"
    segment.chmod(0o644)
    segment.write_bytes(b"segment of shard-1-of-9")
    problems = answer(second)
    assert len(problems) == 1 and problems[0].startswith(f"text shard-1-of-2 generation {second} fails verification")
