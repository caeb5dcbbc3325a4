"""Background merges (sinks.merger): a merge runs beside the commits, never inside one, and
publishes a generation that holds exactly what its parent held."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sinks import generations
from sinks.generations import FileDigests, GenerationStore, Manifest
from sinks.merger import BackgroundMerger, MergeJob, commit_merge
from sinks.vector import VectorReader, get_embedder
from sinks.vector_writer import HARD_MAX_SEGMENTS, MERGE_FACTOR, VectorWriter, segment_names
from streams.settings import Settings

WORDS = ("refund deploy kafka broker timeout parquet schema cursor vector faiss chunk manifest "
         "permission denied migration table rounding invoice retry backoff latency").split()


def _records(batch: int, size: int = 12) -> list[dict[str, Any]]:
    rng = np.random.default_rng(batch)
    return [{"chunkId": f"c-{batch:03d}-{i:02d}", "text": " ".join(rng.choice(WORDS, 9))} for i in range(size)]


def _commit(store: GenerationStore, writer: VectorWriter, seq: int, records: list[dict[str, Any]]) -> Manifest:
    current = store.current()
    previous = store.generation_dir(current.generation_id) if current else None
    staging = store.begin()
    try:
        writer.write(staging, previous, records)
        manifest = Manifest(kind="vector", log_id="default", line=store.line, generation_id=0,
                            built_through_seq=seq, schema_version="1", asp_version="1", chunker={},
                            embedding=writer.describe()["embedding"], redaction_policy_hash="p",
                            chunk_count=(current.chunk_count if current else 0) + len(records))
        return store.commit(staging, manifest)
    except BaseException:
        store.abort()
        raise


def _answers(store: GenerationStore, manifest: Manifest, writer: VectorWriter,
             among: set[str] | None = None) -> dict[str, list[tuple[str, float]]]:
    gen_dir = store.generation_dir(manifest.generation_id)
    reader = VectorReader(gen_dir, segment_names(gen_dir))
    out = {}
    for query in ("refund deploy", "kafka broker timeout", "vector faiss chunk", "invoice retry"):
        vector = writer.embedder.embed([query])[0]
        hits = reader.search(vector, limit=30, allowed=None if among is None else among.__contains__)
        out[query] = [(h.chunk_id, round(h.score, 6)) for h in hits]
    return out


@pytest.fixture
def setup(tmp_path: Path) -> tuple[GenerationStore, VectorWriter, Path]:
    settings = Settings.from_env({}, home=tmp_path / "home", embedder="hash:64")
    writer = VectorWriter(settings)
    writer.background_merges = True
    return GenerationStore(tmp_path / "home" / "indexes", "default", "vector"), writer, tmp_path / "merges"


def _wait_for(merger: BackgroundMerger, timeout: float = 60.0) -> list[MergeJob]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done := merger.finished():
            return done
        time.sleep(0.02)
    raise AssertionError("the background merge never finished")


def test_a_merge_in_flight_holds_no_commit_and_publishes_the_same_answers(
        setup: tuple[GenerationStore, VectorWriter, Path]) -> None:
    store, writer, work = setup
    gate = threading.Event()
    started = threading.Event()
    build = writer.build_merge

    def slow_build(work_dir: Path, names: list[str], new_name: str) -> list[str]:
        started.set()
        assert gate.wait(60), "test gate never opened"
        return build(work_dir, names, new_name)

    writer.build_merge = slow_build  # type: ignore[method-assign]
    merger = BackgroundMerger(writer, work)
    try:
        manifest = None
        for batch in range(1, MERGE_FACTOR + 1):
            manifest = _commit(store, writer, batch * 10, _records(batch))
            merger.offer("default", store.line, manifest.generation_id, store.generation_dir(manifest.generation_id))
        assert manifest is not None
        # write() left the merging to the merger: one segment per batch.
        assert len(segment_names(store.generation_dir(manifest.generation_id))) == MERGE_FACTOR
        assert started.wait(30), "no merge was planned for four segments of one tier"

        # While the merge is being built, batches keep committing and the watermark moves on.
        for batch in range(MERGE_FACTOR + 1, MERGE_FACTOR + 3):
            manifest = _commit(store, writer, batch * 10, _records(batch))
            merger.offer("default", store.line, manifest.generation_id, store.generation_dir(manifest.generation_id))
        assert merger.finished() == [] and manifest.built_through_seq == (MERGE_FACTOR + 2) * 10
        # GC of the generation the merge reads from must not matter: its inputs are linked.
        store.gc(keep_last=1)

        before = _answers(store, manifest, writer)
        gate.set()
        (job,) = _wait_for(merger)
        assert len(job.names) == MERGE_FACTOR
        merged = commit_merge(store, manifest, writer, job)
        merger.settled(job)
        assert merged is not None
        assert (merged.built_through_seq, merged.chunk_count, merged.source_offsets, merged.progress) == (
            manifest.built_through_seq, manifest.chunk_count, manifest.source_offsets, manifest.progress)
        assert merged.generation_id == manifest.generation_id + 1
        names = segment_names(store.generation_dir(merged.generation_id))
        assert job.new_name in names and not set(job.names) & set(names)
        assert len(names) == len(segment_names(store.generation_dir(manifest.generation_id))) - MERGE_FACTOR + 1
        assert _answers(store, merged, writer) == before
        store.verify(merged)
    finally:
        gate.set()
        merger.close()
    assert not work.exists()


def test_sink_size_commits_publish_while_a_merge_is_built_and_no_hit_changes(
        setup: tuple[GenerationStore, VectorWriter, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge really being built (in its child process, not held at a gate): batches of a
    sink's size commit meanwhile, each raising the watermark, and the merged chunks answer the
    same before the merge, in every generation committed during it, and once it is published."""
    store, writer, work = setup
    merged_ids: set[str] = set()
    for batch in range(1, MERGE_FACTOR + 1):
        records = _records(batch, size=1500)
        merged_ids.update(r["chunkId"] for r in records)
        manifest = _commit(store, writer, batch, records)
    before = _answers(store, manifest, writer, merged_ids)
    building, built = threading.Event(), threading.Event()
    build = writer.build_merge

    def watched(work_dir: Path, names: list[str], new_name: str) -> list[str]:
        building.set()
        try:
            return build(work_dir, names, new_name)
        finally:
            built.set()

    writer.build_merge = watched  # type: ignore[method-assign]
    digests = FileDigests()
    merger = BackgroundMerger(writer, work, digests=digests)
    during: list[Manifest] = []
    try:
        merger.offer("default", store.line, manifest.generation_id, store.generation_dir(manifest.generation_id))
        assert building.wait(30), "no merge was planned for four segments of one tier"
        seq = 100
        while not built.is_set() and len(during) < 40:
            seq += 1
            manifest = _commit(store, writer, seq, _records(seq, size=20))
            merger.offer("default", store.line, manifest.generation_id, store.generation_dir(manifest.generation_id))
            if not built.is_set():
                during.append(manifest)
            time.sleep(0.01)
        # The watermark moved on while the merge was built, and the merge's chunks answered as before.
        assert len(during) >= 2, "batches waited for the merge being built"
        assert [m.built_through_seq for m in during] == list(range(101, 101 + len(during)))
        assert all(_answers(store, m, writer, merged_ids) == before for m in during)

        (job,) = _wait_for(merger)
        current = store.current()
        assert current is not None and current.generation_id == manifest.generation_id
        hashed: list[str] = []

        def sha256_file(path: str | Path) -> tuple[str, int]:
            hashed.append(Path(path).name)
            return original(path)

        original = generations.sha256_file
        with monkeypatch.context() as patch:
            patch.setattr(generations, "sha256_file", sha256_file)
            published = commit_merge(store, current, writer, job, digests=digests)
        merger.settled(job)
        # The merger hashed the merged files in its thread: publishing read none of them.
        assert hashed == ["segments.json"]
        assert published is not None and published.built_through_seq == current.built_through_seq
        assert _answers(store, published, writer, merged_ids) == before
        assert _answers(store, published, writer) == _answers(store, current, writer)
        store.verify(published)  # digests the merger took in the background are the files' own
    finally:
        merger.close()


def test_a_merge_whose_inputs_are_gone_is_dropped(setup: tuple[GenerationStore, VectorWriter, Path]) -> None:
    store, writer, work = setup
    merger = BackgroundMerger(writer, work)
    try:
        for batch in range(1, MERGE_FACTOR + 1):
            manifest = _commit(store, writer, batch, _records(batch))
        merger.offer("default", store.line, manifest.generation_id, store.generation_dir(manifest.generation_id))
        (job,) = _wait_for(merger)
        # Meanwhile an inline merge (the writer past its hard bound, or a non-background
        # writer) took the same segments.
        writer.background_merges = False
        manifest = _commit(store, writer, 99, _records(99))
        assert not set(job.names) & set(segment_names(store.generation_dir(manifest.generation_id)))
        assert commit_merge(store, manifest, writer, job) is None
        assert store.current_id() == manifest.generation_id
        merger.settled(job)
    finally:
        merger.close()


def test_write_merges_inline_again_past_the_hard_bound(setup: tuple[GenerationStore, VectorWriter, Path]) -> None:
    store, writer, _ = setup
    for batch in range(1, HARD_MAX_SEGMENTS + 3):
        manifest = _commit(store, writer, batch, _records(batch, size=2))
        assert len(segment_names(store.generation_dir(manifest.generation_id))) <= HARD_MAX_SEGMENTS
    embedder = get_embedder("hash:64")
    gen_dir = store.generation_dir(manifest.generation_id)
    ids = {h.chunk_id for h in VectorReader(gen_dir, segment_names(gen_dir)).search(
        embedder.embed(["refund"])[0], limit=10_000)}
    assert len(ids) == 2 * (HARD_MAX_SEGMENTS + 2)


def test_a_failed_merge_reaches_the_sink_loop(setup: tuple[GenerationStore, VectorWriter, Path]) -> None:
    store, writer, work = setup

    def broken(work_dir: Path, names: list[str], new_name: str) -> list[str]:
        raise RuntimeError("merge exploded")

    writer.build_merge = broken  # type: ignore[method-assign]
    merger = BackgroundMerger(writer, work)
    try:
        for batch in range(1, MERGE_FACTOR + 1):
            manifest = _commit(store, writer, batch, _records(batch))
        merger.offer("default", store.line, manifest.generation_id, store.generation_dir(manifest.generation_id))
        deadline = time.monotonic() + 30
        with pytest.raises(RuntimeError, match="merge exploded"):
            while time.monotonic() < deadline:
                merger.finished()
                time.sleep(0.02)
    finally:
        merger.close()


@pytest.mark.kafka
def test_the_live_sink_merges_in_the_background_and_matches_a_rebuild(make_settings: Any) -> None:
    """A vector sink fed in waves publishes merge generations beside its batch commits: no
    watermark ever goes back, the merged live line answers exactly as an inline-merged rebuild
    of the same log does."""
    from deploy.testing import Stack
    from sinks.rebuild import rebuild
    from sinks.runner import SinkRunner, index_root
    from sinks.service import make_writer, pipeline_versions
    from streams.testing import append_events, interleave, session_events

    settings = make_settings(embedder="hash:64", sink_batch_seconds=0.2)
    bootstrap = settings.bootstrap_servers or ""
    stack = Stack(settings)
    commits: list[Manifest] = []
    runner = SinkRunner(settings, bootstrap, make_writer("vector", settings),
                        versions=pipeline_versions(settings), on_commit=commits.append)
    thread = threading.Thread(target=runner.run, daemon=True)
    try:
        stack.worker()
        thread.start()
        head = 0
        for wave in range(8):
            events = interleave(*[session_events(f"bg-{wave}-{i}", turns=2, seed=wave * 10 + i) for i in range(3)],
                                seed=wave)
            head = append_events(settings, events)
            deadline = time.monotonic() + 60
            while not commits or commits[-1].built_through_seq < head:
                assert time.monotonic() < deadline, "the vector sink fell behind"
                time.sleep(0.1)
        deadline = time.monotonic() + 60
        while not (any("mergedFrom" in m.extra for m in commits) and runner._merger and runner._merger.idle()):
            assert time.monotonic() < deadline, "no background merge was published"
            time.sleep(0.1)
    finally:
        runner.stop()
        thread.join(timeout=60)
        stack.close()
    merges = [m for m in commits if "mergedFrom" in m.extra]
    assert merges and all(m.built_through_seq == commits[i - 1].built_through_seq
                          for i, m in enumerate(commits) if "mergedFrom" in m.extra)
    seqs = [m.built_through_seq for m in commits]
    assert seqs == sorted(seqs) and seqs[-1] == head
    writer = VectorWriter(settings)
    live_store = GenerationStore(index_root(settings), "default", "vector")
    live = _answers(live_store, commits[-1], writer)
    rebuilt = rebuild(settings, bootstrap, "vector")
    assert rebuilt.chunk_count == commits[-1].chunk_count
    assert _answers(GenerationStore(index_root(settings), "default", "vector", rebuilt.line), rebuilt, writer) == live


def test_a_restarted_sink_merges_what_it_left_unmerged_without_a_new_commit(make_settings: Any) -> None:
    """A sink stopped before it merged (as a kill in the middle of a merge leaves it) plans the
    merge again when it starts, though nothing new arrives: a quiet log's layout does not wait
    for a commit that may never come."""
    from deploy.testing import Stack
    from sinks.runner import SinkRunner, index_root
    from sinks.service import make_writer, pipeline_versions
    from streams.testing import append_events, interleave, session_events

    settings = make_settings(embedder="hash:64", sink_batch_size=2, sink_batch_seconds=0.2)
    bootstrap = settings.bootstrap_servers or ""
    stack = Stack(settings)
    store = GenerationStore(index_root(settings), "default", "vector")

    def run_until(runner: SinkRunner, done: Any, what: str) -> None:
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 120
            while not done():
                assert time.monotonic() < deadline, what
                assert thread.is_alive(), "the sink runner stopped"
                time.sleep(0.1)
        finally:
            runner.stop()
            thread.join(timeout=60)

    try:
        stack.worker()
        head = append_events(settings, interleave(*[session_events(f"quiet-{i}", turns=2, seed=40 + i)
                                                    for i in range(3)], seed=4))
        first: list[Manifest] = []
        unmerging = make_writer("vector", settings)
        unmerging.plan_merge = lambda gen_dir: []  # type: ignore[method-assign]  # stopped before it merged
        run_until(SinkRunner(settings, bootstrap, unmerging, versions=pipeline_versions(settings),
                             on_commit=first.append),
                  lambda: bool(first) and first[-1].built_through_seq >= head, "the vector sink fell behind")
        current = store.current()
        assert current is not None and "mergedFrom" not in current.extra
        assert make_writer("vector", settings).plan_merge(store.generation_dir(current.generation_id)), \
            "the test needs a layout that wants a merge"

        second: list[Manifest] = []
        run_until(SinkRunner(settings, bootstrap, make_writer("vector", settings),
                             versions=pipeline_versions(settings), on_commit=second.append),
                  lambda: any("mergedFrom" in m.extra for m in second), "no merge after the restart")
    finally:
        stack.close()
    merged = [m for m in second if "mergedFrom" in m.extra]
    assert merged[0].built_through_seq == current.built_through_seq == head
    assert merged[0].chunk_count == current.chunk_count

