"""Query latency benchmark: p50/p99 of text, vector and hybrid searches, indexed and latest.

Builds, in one run on this machine:

- an L1 log of ``2 × chunks`` ASP message events (one user ask and one assistant reply per
  turn, 50 turns per session, access lists mixed: 80% of sessions readable by the whole
  tenant, 10% by a group, 10% by one other user), appended with the project's producer;
- text (tantivy by default), vector (the configured embedder, wordllama by default) and
  structured generations of the chunks of every turn, written directly with the sinks'
  writers in batches of 10 000 (:class:`CorpusBuilder`: vector segment merges run in a
  background merger and publish as generations, as in a live sink), built through all but
  the last ``--tail-events`` events, with published watermarks (``benchmarks.harness``
  builds the same corpus in steps with :func:`build_steps`); after the build, the live sink's
  vector watermark while a merge as large as the build's largest runs beside it, in an index of
  its own (:func:`merge_window`: a ``SinkRunner`` fed new chunks, committing at its own batch
  size, against the same feed with no merge);

then runs ``--queries`` random 1-3 word queries per combination through :class:`Planner`
(the in-process engine the API and CLI use) as a principal who may read 90% of the sessions,
and prints p50/p99 latency per mode and freshness, plus the ratios latest/indexed (the cost
of the disclosed L1 tail scan) and hybrid/text. The log head does not move during the run,
so after the first ``latest`` query the tail scan is served from the planner's cache (as
between two commits of a live log); the cost of an uncached tail scan is printed apart, and
so is a ``latest`` query after the head moved by ``--tail-events`` events, with and without
the planner's tail warmer (the head moves at the end of the run: L1 grows by 5 such appends).

Usage::

    .venv/bin/python benchmarks/bench_query.py [--chunks 100000] [--large] [--queries 100]
        [--tail-events 1000] [--embedder wordllama|hash:256] [--engine tantivy|whoosh] [--out FILE]
    .venv/bin/python benchmarks/bench_query.py --merge-window 200000 [--embedder ...] [--out FILE]

``--large`` builds 1 000 000 chunks (slow: mostly embedding and index building). ``--out FILE``
also writes the figures as JSON, which ``benchmarks/harness.py --include-large FILE`` puts in
BENCHMARKS.md (its growth table and plots).
``KAFKA_BOOTSTRAP_SERVERS`` selects a broker; otherwise a local one is started and stopped.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import itertools
import json
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

__all__ = ["main"]

_TOPICS = [
    ("kafka", "consumer", "rebalance", "partition", "offset", "broker", "timeout"),
    ("pytest", "fixture", "teardown", "flaky", "assertion", "conftest", "plugin"),
    ("docker", "image", "cache", "container", "volume", "compose", "network"),
    ("postgres", "query", "plan", "index", "deadlock", "migration", "rollback"),
    ("react", "state", "hook", "dependency", "hydration", "bundle", "render"),
    ("terraform", "lock", "provider", "drift", "module", "output", "apply"),
    ("rust", "borrow", "lifetime", "trait", "cargo", "feature", "macro"),
    ("auth", "token", "refresh", "cookie", "oauth", "redirect", "permission"),
]
_FILLER = ("I looked at the code and the logs and the problem seems to come from the way the "
           "configuration is loaded before the service starts so let me check the module").split()
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_TURNS_PER_SESSION = 50
_BATCH = 10_000
# Chunks a second fed to the sink in the merge window (merge_window): about what one worker
# delivers end to end (BENCHMARKS.md §1: ~380 L1 events/s, two events a turn).
_SINK_RATE = 200.0


def _acl(session_number: int) -> dict[str, Any]:
    bucket = session_number % 10
    if bucket == 8:
        return {"tenant": "acme", "read": ["group:ops"]}
    if bucket == 9:
        return {"tenant": "acme", "read": ["user:someone-else"]}
    return {"tenant": "acme", "read": ["*"]}


def _sentence(rng: random.Random, words: int) -> str:
    topic = rng.choice(_TOPICS)
    body = [rng.choice(topic) if rng.random() < 0.3 else rng.choice(_FILLER) for _ in range(words)]
    return f"{topic[0]} " + " ".join(body)


def generate(chunks: int, seed: int = 7, *, start: int = 0,
             ) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(events of one turn, the SearchChunkV1 of that turn), in log order; seq = position.
    ``start``: the turns numbered from there (new sessions and event ids, appended after a
    log of ``start`` turns)."""
    from streams.chunking import render_event

    rng = random.Random(seed + start)
    seq = 2 * start
    for number in range(start, start + chunks):
        session_number = number // _TURNS_PER_SESSION
        session_id = f"bench-s{session_number:06d}"
        turn_id = f"{session_id}-t{number % _TURNS_PER_SESSION}"
        access = _acl(session_number)
        events = []
        for role, words in (("user", 14), ("assistant", 40)):
            seq += 1
            events.append({
                "eventId": f"{turn_id}-{role}", "logId": "default", "sessionId": session_id,
                "turnId": turn_id, "type": "message", "role": role, "acl": access,
                "time": (_EPOCH + timedelta(seconds=seq)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "fields": {"text": _sentence(rng, words)},
            })
        texts = [render_event(event) or "" for event in events]
        evidence, cursor = [], 0
        for event, text, offset in zip(events, texts, (seq - 1, seq), strict=True):
            size = len(text.encode("utf-8"))
            evidence.append({"eventId": event["eventId"], "seq": offset, "start": cursor,
                             "end": cursor + size, "part": [0, size]})
            cursor += size + 1
        yield events, {
            "kind": "chunk", "schema": "SearchChunkV1",
            "chunkId": "c_" + hashlib.sha256(turn_id.encode()).hexdigest()[:32],
            "logId": "default", "sessionId": session_id, "runId": None, "turnId": turn_id,
            "episodeId": None, "unit": "turn", "text": "\n".join(texts),
            "fields": {"roles": ["assistant", "user"], "types": ["message"], "toolNames": [],
                       "statuses": [], "paramKeys": []},
            "evidence": evidence, "evidenceEventIds": [e["eventId"] for e in events],
            "minSeq": seq - 1, "maxSeq": seq, "startTime": events[0]["time"],
            "endTime": events[1]["time"], "eventTime": events[1]["time"], "tokenCount": 60,
            "acl": access, "versions": {"asp": "1.0", "chunker": "1.0"},
        }


class CorpusBuilder:
    """Writes chunks into text, vector and structured generations as the sinks do: one
    generation per batch per kind (the sinks' writers, ``GenerationStore``), vector segment
    merges in a :class:`sinks.merger.BackgroundMerger` thread published as generations of
    their own (:func:`sinks.merger.commit_merge`), as the sink loop does. Keeps each kind's
    write seconds, each vector commit's (time, builtThroughSeq) and each merge's window."""

    def __init__(self, settings: Any, keep_last: int = 2) -> None:
        #: Seconds spent outside the build (the caller's queries between steps): the clock of
        #: commits, appends and merges leaves them out, so no gap spans them.
        self.paused = 0.0
        self.settling = False  # in settle(): no batch is left to commit, the watermark waits by design
        from sinks.merger import BackgroundMerger, merge_work_root
        from sinks.runner import index_root
        from sinks.service import make_writer

        self.writers = {kind: make_writer(kind, settings) for kind in ("text", "vector", "structured")}
        self.root = index_root(settings)
        self.keep_last = keep_last
        self.seconds = dict.fromkeys(self.writers, 0.0)
        self.vector_commits: list[tuple[float, int]] = []
        self.merges: list[dict[str, Any]] = []
        vector = self.writers["vector"]
        vector.background_merges = True  # type: ignore[attr-defined]
        self.merger = BackgroundMerger(vector, merge_work_root(settings.home, "vector-bench"))  # type: ignore[arg-type]

    def clock(self) -> float:
        return time.monotonic() - self.paused

    def store(self, kind: str) -> Any:
        from sinks.generations import GenerationStore

        return GenerationStore(self.root, "default", kind)

    def commit(self, batch: list[dict[str, Any]]) -> None:
        from sinks.generations import Manifest, chunk_seq_bound
        from streams.asp import ASP_VERSION

        if not batch:
            return
        through = max(c["maxSeq"] for c in batch)
        for kind, writer in self.writers.items():
            began = time.monotonic()
            store = self.store(kind)
            previous = store.current()
            staging = store.begin()
            try:
                writer.write(staging, store.generation_dir(previous.generation_id) if previous else None, batch)
                describe = writer.describe()
                committed = store.commit(staging, Manifest(
                    kind=kind, log_id="default", line=store.line, generation_id=0,
                    built_through_seq=through, schema_version="1", asp_version=ASP_VERSION, chunker={},
                    embedding=describe.get("embedding"), redaction_policy_hash="bench",
                    chunk_count=len(batch), extra={**describe, **chunk_seq_bound(previous, batch)}))
            except BaseException:
                store.abort()
                raise
            store.gc(keep_last=self.keep_last)
            if kind == "vector":
                self.vector_commits.append((self.clock(), through))
                self.merger.offer("default", store.line, committed.generation_id,
                                  store.generation_dir(committed.generation_id))
            self.seconds[kind] += time.monotonic() - began
        self.publish_merges()

    def publish_merges(self) -> None:
        """Each finished background merge becomes the next vector generation (same records
        and watermark), as ``SinkRunner._publish_merges`` does."""
        from sinks.merger import commit_merge

        store = self.store("vector")
        for job in self.merger.finished():
            try:
                meta = orjson.loads((job.work_dir / f"{job.new_name}.ids.json").read_bytes())
                current = store.current()
                committed = commit_merge(store, current, self.merger.writer, job) if current else None
                self.merges.append({"vectors": int(meta["count"]), "inputs": len(job.names),
                                    # rows already in the graph it extended (0: a new graph)
                                    "graphRows": int((meta.get("graphFrom") or {}).get("rows", 0)),
                                    "seconds": job.seconds, "started": job.finished_at - job.seconds - self.paused,
                                    "ended": job.finished_at - self.paused, "published": self.clock(),
                                    "dropped": committed is None, "settling": self.settling})
                if committed is not None:
                    store.gc(keep_last=self.keep_last)
                    self.merger.offer("default", store.line, committed.generation_id,
                                      store.generation_dir(committed.generation_id))
            finally:
                self.merger.settled(job)

    def settle(self) -> float:
        """Wait until no merge is planned or running (a step's layout is then what a sink
        leaves once idle); the seconds waited."""
        began = time.monotonic()
        self.settling = True
        try:
            while True:
                self.publish_merges()
                if self.merger.idle():
                    return time.monotonic() - began
                time.sleep(0.05)
        finally:
            self.settling = False

    def close(self) -> None:
        self.merger.close()


def merge_lag(commits: list[tuple[float, int]], appends: list[tuple[float, int]],
              merge: dict[str, Any]) -> dict[str, float]:
    """The vector watermark while ``merge`` ran (from its start until it was published).

    ``commits``: (time, builtThroughSeq) of each vector commit; ``appends``: (time, highest seq
    appended), both in time order. ``lagSeconds``: the longest any appended event waited for
    the watermark to cover it in that window; ``lagSeqs``: the most events above the
    watermark; ``stallSeconds``: the longest the watermark stood still across the window;
    ``medianCommitGapSeconds``: the gap between vector commits over the whole build, the
    batching cadence a merge-free build has too."""
    start, end = merge["started"], merge["published"]
    times = [at for at, _ in commits]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    first = max(0, bisect.bisect_right(times, start) - 1)  # the watermark when the merge began
    last = min(len(commits) - 1, bisect.bisect_left(times, end))  # the first commit after it ended
    window = commits[first:last + 1]
    stall = max((b[0] - a[0] for a, b in itertools.pairwise(window)), default=end - start)
    append_times = [at for at, _ in appends]
    append_seqs = [seq for _, seq in appends]
    lag_seconds = lag_seqs = 0.0
    for (_, mark), (until, _) in zip(window, [*window[1:], (end, 0)], strict=True):
        # Just before the next commit (or the window's end) the oldest uncovered event is mark + 1.
        oldest = bisect.bisect_left(append_seqs, mark + 1)
        if oldest < len(appends) and append_times[oldest] < until:
            lag_seconds = max(lag_seconds, until - append_times[oldest])
        head = append_seqs[max(0, bisect.bisect_right(append_times, until) - 1)] if appends else mark
        lag_seqs = max(lag_seqs, float(head - mark))
    return {"vectors": merge["vectors"], "mergeSeconds": merge["seconds"],
            "windowSeconds": end - start, "commitsDuring": float(max(0, len(window) - 2)),
            "stallSeconds": stall, "lagSeconds": lag_seconds, "lagSeqs": lag_seqs,
            "medianCommitGapSeconds": statistics.median(gaps) if gaps else 0.0}


def build_steps(settings: Any, bootstrap: str, sizes: tuple[int, ...] | list[int], tail_events: int,
                builder: CorpusBuilder | None = None, batch: int = _BATCH, *,
                window: bool = True) -> Iterator[dict[str, Any]]:
    """Append the log of ``max(sizes)`` turns and index it; at each size, once every turn up to
    it is appended, its indexes cover all but the last ``tail_events`` events (merges settled)
    and their watermarks are published: yields that step's build figures (cumulative).
    ``builder``: the caller's (its writers' embedder serves recall), closed here all the same;
    ``batch``: chunks per generation. With ``window``, the last step also measures the live
    sink's watermark during a merge as large as the largest of the build (:func:`merge_window`,
    in an index of its own: ``sinkMerge``)."""
    from sinks.runner import watermark_of
    from sinks.watermarks import WatermarkPublisher
    from streams.asp import validate_event
    from streams.l1 import L1Producer
    from streams.topics import ensure_topics

    ensure_topics(bootstrap, settings)
    producer = L1Producer(bootstrap, settings)
    publisher = WatermarkPublisher(bootstrap, settings)
    builder = builder or CorpusBuilder(settings)
    turns = generate(max(sizes))
    phases = {"generate": 0.0, "append": 0.0, "settle": 0.0}
    appends: list[tuple[float, int]] = []
    pending: list[dict[str, Any]] = []
    done = 0
    started = builder.clock()
    try:
        for target in sorted(sizes):
            through = 2 * target - tail_events
            while done < target:
                began = time.monotonic()
                events, chunk = next(turns)
                appended = time.monotonic()
                for event in events:
                    producer.append(validate_event(event))
                now = time.monotonic()
                phases["generate"] += appended - began
                phases["append"] += now - appended
                done += 1
                if done % 500 == 0:
                    appends.append((builder.clock(), chunk["maxSeq"]))
                pending.append(chunk)
                # Chunks come in seq order: a full batch wholly below the step's index head is ready.
                if len(pending) >= batch and chunk["maxSeq"] <= through:
                    builder.commit(pending)
                    pending = []
            began = time.monotonic()
            producer.flush()
            phases["append"] += time.monotonic() - began
            builder.commit([c for c in pending if c["maxSeq"] <= through])
            pending = [c for c in pending if c["maxSeq"] > through]
            phases["settle"] += builder.settle()
            for kind in builder.writers:
                store = builder.store(kind)
                manifest = store.current()
                assert manifest is not None
                # The last batch may end below `through` on a turn boundary; the index covers it all.
                publisher.publish({**watermark_of(manifest, store, {}), "builtThroughSeq": through})
            merges = [m for m in builder.merges if not m["dropped"]]
            # The lag a merge causes shows only while batches are still coming: one published
            # while the step settles would charge the wait for the step's end to the merge.
            largest = max((m for m in merges if not m["settling"]), key=lambda m: (m["vectors"], m["started"]),
                          default=None)
            figures = {"chunks": target, "events": 2 * target, "builtThroughSeq": through, "batch": batch,
                       "appendSeconds": phases["append"], "generateSeconds": phases["generate"],
                       "settleSeconds": phases["settle"], "writeSeconds": dict(builder.seconds),
                       "mergeSeconds": sum(m["seconds"] for m in merges), "merges": len(merges),
                       "largestMergeVectors": max((m["vectors"] for m in merges), default=0),
                       "largestMerge": merge_lag(builder.vector_commits, appends, largest) if largest else None,
                       "totalSeconds": builder.clock() - started}
            # The longest merge is the one a sink waits beside longest: a graph built from
            # scratch over a tier, or rows inserted into the large segment's graph.
            longest = max(merges, key=lambda m: m["seconds"], default=None)
            if longest is not None:
                figures["longestMerge"] = {key: longest[key] for key in ("vectors", "graphRows", "seconds")}
            if window and target == max(sizes) and longest is not None:
                # Bench batches of 10 000 chunks hide what a merge does to a sink's 1 s commits.
                began = time.monotonic()
                vector = builder.store("vector")
                current = vector.current()
                assert current is not None
                figures["sinkMerge"] = merge_window(
                    settings, builder.writers["vector"], vector.generation_dir(current.generation_id),
                    longest["vectors"], graph_rows=longest["graphRows"], start=2 * max(sizes),
                    baseline_seconds=min(10.0, max(3.0, longest["seconds"])))
                figures["sinkMerge"]["measureSeconds"] = time.monotonic() - began
            paused = time.monotonic()
            yield figures
            builder.paused += time.monotonic() - paused
    finally:
        builder.close()
        publisher.close()
        producer.close()


# --------------------------------------------------------------------------- the merge window


class _Watermarks:
    """Stands in for the sink's :class:`WatermarkPublisher`: when each watermark went out."""

    def __init__(self) -> None:
        self.published: list[tuple[float, int, int]] = []  # (time, builtThroughSeq, generationId)

    def publish(self, record: dict[str, Any]) -> None:
        self.published.append((time.monotonic(), int(record["builtThroughSeq"]), int(record["generationId"])))

    def close(self) -> None:
        pass


class _NoConsumer:
    """What ``SinkRunner.flush`` asks its consumer: no partition is assigned (offsets are not
    the point here)."""

    def assignment(self) -> set[Any]:
        return set()


def merge_inputs(source_dir: Path, vectors: int, parts: int, *, skip: str | None = None,
                 ) -> list[tuple[list[str], Any, list[Any]]]:
    """``parts`` equal slices (chunkIds, chunk vectors, span vectors per chunk) of the first
    ``vectors`` chunks stored in the vector generation ``source_dir`` (leaving out segment
    ``skip``): the inputs of a merge of that size, with the corpus's own vectors. When the
    segments hold fewer, the rest are their chunks again under new ids (``again-N-``)."""
    import numpy as np

    from sinks.vector_writer import segment_names

    ids: list[str] = []
    rows: list[Any] = []
    spans: list[Any] = []
    names = [name for name in segment_names(source_dir) if name != skip] or segment_names(source_dir)
    for round_number in itertools.count():
        prefix = f"again-{round_number}-" if round_number else ""
        for name in names:
            meta = orjson.loads((source_dir / f"{name}.ids.json").read_bytes())
            stored = np.load(source_dir / f"{name}.vec.npy", mmap_mode="r")
            count = int(meta["count"])
            offsets = meta.get("spanOffsets") or [0] * (count + 1)
            take = min(count, vectors - len(ids))
            ids += [prefix + chunk_id for chunk_id in meta["chunkIds"][:take]]
            rows.append(np.array(stored[:take], dtype=np.float32))
            spans += [np.array(stored[count + offsets[i]:count + offsets[i + 1]], dtype=np.float32)
                      for i in range(take)]
            if len(ids) >= vectors:
                break
        if len(ids) >= vectors:
            break
    matrix = np.concatenate(rows)
    size = -(-len(ids) // parts)
    return [(ids[i:i + size], matrix[i:i + size], spans[i:i + size]) for i in range(0, len(ids), size)]


def sink_commits(settings: Any, writer: Any, *, inputs: list[tuple[list[str], Any, list[Any]]] | None,
                 start: int, rate: float, seconds: float, base: Path | None = None) -> dict[str, Any]:
    """Feed a vector :class:`sinks.runner.SinkRunner` ``rate`` chunks a second (new turns from
    ``start``) and let it commit as the live sink does (its own ``flush_due`` rule:
    ``sink_batch_size`` chunks or ``sink_batch_seconds``, group commit) into a fresh index under
    ``settings.home``. With ``inputs``, the first generation holds them as one segment each,
    a :class:`BackgroundMerger` runs beside the loop (it merges them first) and the run lasts
    until that merge is published, then ``seconds`` more; without, ``seconds`` of commits and no
    merger. ``base`` (a segment's path without its suffixes): linked in as the first input,
    whose graph the merge extends with the inputs' rows. Returns each watermark commit (time, builtThroughSeq), the feed (time, maxSeq every
    chunk), the flushes' seconds, and the first merge's window."""
    from sinks.generations import GenerationStore, Manifest, link_or_copy
    from sinks.merger import BackgroundMerger, MergeJob, merge_work_root
    from sinks.runner import SinkRunner, index_root
    from sinks.vector.faiss_index import segment_files, write_segment
    from sinks.writer import record_id

    through = 2 * start
    store = GenerationStore(index_root(settings), "default", "vector")
    staging = store.begin()
    names = []
    base_rows = 0
    try:
        if base is not None:
            names.append("input-base")
            for file in segment_files(base.name):
                link_or_copy(base.parent / file, staging / file.replace(base.name, "input-base", 1))
            meta = orjson.loads((staging / "input-base.ids.json").read_bytes())
            (staging / "input-base.ids.json").unlink()  # a link: not written through
            (staging / "input-base.ids.json").write_bytes(orjson.dumps({**meta, "name": "input-base"}))
            base_rows = int(meta["count"])
        for number, (ids, vectors, spans) in enumerate(inputs or ()):
            # A flat index each (no graph to build): the merge reads only the vectors.
            names.append(f"input-{number:08d}")
            write_segment(staging, names[-1], ids, vectors, exact_max=len(ids), spans=spans)
        store.commit(staging, Manifest(
            kind="vector", log_id="default", line=store.line, generation_id=0, built_through_seq=through,
            schema_version="2", asp_version="1.0", chunker={}, embedding=writer.describe()["embedding"],
            redaction_policy_hash="", chunk_count=sum(len(part[0]) for part in inputs or ()),
            extra={**writer.describe(), "sourceProgress": {"chunks:0": through}}))
    except BaseException:
        store.abort()
        raise
    first = store.current()
    assert first is not None
    # The merge re-enacted is the one the writer's own plan makes of these inputs.
    assert inputs is None or writer.plan_merge(store.generation_dir(first.generation_id)) == names
    commits: list[tuple[float, int]] = []  # (time, builtThroughSeq) of each batch commit
    merged: list[float] = []  # when each merge was published

    def committed(manifest: Manifest) -> None:
        if "mergedFrom" in manifest.extra:
            merged.append(time.monotonic())
        else:
            commits.append((time.monotonic(), manifest.built_through_seq))

    runner = SinkRunner(settings, "", writer, on_commit=committed)
    runner._partitions = {"chunks": [0]}
    runner._publisher = _Watermarks()  # type: ignore[assignment]
    runner._consumer = _NoConsumer()  # type: ignore[assignment]
    state = runner.logs["default"] = runner._load_log("default")
    # The sink's first flush hashes the generation it builds on (once per process: a linked
    # segment of a million chunks is gigabytes); that is its start, not the merge's doing.
    store.verify(first, digests=runner._digests)
    jobs: list[MergeJob] = []
    background = writer.background_merges
    if inputs is not None:
        writer.background_merges = True
        merger = runner._merger = BackgroundMerger(writer, merge_work_root(settings.home, "vector"),
                                                  digests=runner._digests)
        finished = merger.finished

        def seen() -> list[MergeJob]:  # the jobs the loop publishes, for their build times
            done = finished()
            jobs.extend(done)
            return done

        merger.finished = seen  # type: ignore[method-assign]
        merger.offer("default", store.line, state.manifest.generation_id,  # type: ignore[union-attr]
                     store.generation_dir(state.manifest.generation_id))  # type: ignore[union-attr]
    turns = generate(10 ** 9, start=start)
    appends: list[tuple[float, int]] = []
    flushes: list[float] = []
    publishes: list[float] = []
    began = time.monotonic()
    fed = 0
    ends = None if inputs is not None else began + seconds
    try:
        while ends is None or time.monotonic() < ends:
            now = time.monotonic()
            while fed <= (now - began) * rate:  # what arrived since the last poll
                _, chunk = next(turns)
                state.pending.append(chunk)
                state.pending_ids.add(record_id(chunk))
                state.pending_order.append(record_id(chunk))
                state.progress["chunks:0"] = chunk["maxSeq"]
                appends.append((began + fed / rate, chunk["maxSeq"]))
                fed += 1
            runner._progressed.add("default")
            if runner._merger is not None:
                published = time.monotonic()
                if runner._publish_merges():
                    publishes.append(time.monotonic() - published)
            if ends is None and merged:
                ends = merged[0] + seconds
            if runner._should_flush():
                flushed = time.monotonic()
                runner.flush()
                flushes.append(time.monotonic() - flushed)
            time.sleep(0.01)  # the loop's poll
    finally:
        if runner._merger is not None:
            runner._merger.close()
        writer.background_merges = background
    merge = None
    if jobs:
        merge = {"vectors": base_rows + sum(len(part[0]) for part in inputs or ()), "seconds": jobs[0].seconds,
                 "started": jobs[0].finished_at - jobs[0].seconds, "published": merged[0]}
    return {"commits": commits, "appends": appends,
            "flushSeconds": flushes, "publishSeconds": publishes, "merge": merge}


def merge_window(settings: Any, writer: Any, source_dir: Path, vectors: int, *, start: int,
                 graph_rows: int = 0, rate: float = _SINK_RATE, baseline_seconds: float = 10.0) -> dict[str, Any]:
    """The live sink's vector watermark while a merge of ``vectors`` runs (issue 21), in a
    fresh index under ``settings.home``, merged by a :class:`BackgroundMerger` while
    :func:`sink_commits` feeds the sink ``rate`` chunks a second; first ``baseline_seconds``
    of the same feed into another fresh index with no merge, for reference. Each as
    :func:`merge_lag` reports it, plus the flushes' seconds.

    The merge's inputs: with ``graph_rows`` (a merge that extended a graph of that many rows),
    the largest segment of the generation in ``source_dir`` (at least as large, linked in) and
    the ``vectors - graph_rows`` rows inserted into its graph as one segment; else the first
    ``vectors`` chunks as ``MERGE_FACTOR`` segments, whose graph is built from scratch."""
    import dataclasses

    from sinks.vector_writer import MERGE_FACTOR, segment_names

    def flushes(run: dict[str, Any]) -> dict[str, float]:
        seconds = run["flushSeconds"] or [0.0]
        return {"flushMedianSeconds": statistics.median(seconds), "flushMaxSeconds": max(seconds)}

    home = Path(settings.home) / "merge-window"
    try:
        base = sink_commits(dataclasses.replace(settings, home=home / "baseline"), writer, inputs=None,
                            start=start, rate=rate, seconds=baseline_seconds)
        times = [at for at, _ in base["commits"]]
        baseline = merge_lag(base["commits"], base["appends"],
                             {"vectors": 0, "seconds": 0.0, "started": times[0], "published": times[-1]})
        graph = None
        if graph_rows:
            sizes = {name: (source_dir / f"{name}.vec.npy").stat().st_size for name in segment_names(source_dir)}
            graph = source_dir / max(sizes, key=lambda name: sizes[name])
            inputs = merge_inputs(source_dir, vectors - graph_rows, 1, skip=graph.name)
            graph_rows = int(orjson.loads((source_dir / f"{graph.name}.ids.json").read_bytes())["count"])
        else:
            inputs = merge_inputs(source_dir, vectors, MERGE_FACTOR)
        run = sink_commits(dataclasses.replace(settings, home=home / "merge"), writer, inputs=inputs,
                           start=start + 10 ** 6, rate=rate, seconds=2.0, base=graph)
        assert run["merge"] is not None
        lag = merge_lag(run["commits"], run["appends"], run["merge"])
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {**lag, **flushes(run), "publishMaxSeconds": max(run["publishSeconds"], default=0.0),
            "graphRows": graph_rows, "inserted": sum(len(part[0]) for part in inputs),
            "rate": rate, "batchSize": settings.sink_batch_size, "batchSeconds": settings.sink_batch_seconds,
            "baseline": {**{key: baseline[key] for key in ("windowSeconds", "stallSeconds", "lagSeconds",
                                                           "lagSeqs", "medianCommitGapSeconds")}, **flushes(base)}}


def build(settings: Any, bootstrap: str, chunks: int, tail_events: int) -> dict[str, Any]:
    """Append the log, write the generations, publish watermarks; return build figures."""
    *_, figures = build_steps(settings, bootstrap, (chunks,), tail_events)
    return figures


def index_bytes(settings: Any) -> dict[str, int]:
    """Bytes of the current generation of each index (from its manifest)."""
    from sinks.generations import GenerationStore
    from sinks.runner import index_root

    sizes = {}
    for kind in ("text", "vector", "structured"):
        manifest = GenerationStore(index_root(settings), "default", kind).current()
        if manifest is not None:
            sizes[kind] = sum(segment.bytes for segment in manifest.segments)
    return sizes


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def run_queries(planner: Any, principal: Any, *, mode: str, freshness: str, queries: int,
                seed: int = 11) -> dict[str, Any]:
    rng = random.Random(seed)
    vocabulary = sorted({word for topic in _TOPICS for word in topic})
    texts = [" ".join(rng.sample(vocabulary, rng.randint(1, 3))) for _ in range(queries + 5)]
    for text in texts[:5]:  # warm caches: readers, embedder, tokenizer
        planner.search({"query": text, "mode": mode, "freshness": freshness}, principal)
    latencies, hits, tail = [], 0, None
    for text in texts[5:]:
        began = time.perf_counter()
        response = planner.search({"query": text, "mode": mode, "freshness": freshness}, principal)
        latencies.append(time.perf_counter() - began)
        hits += len(response["results"])
        tail = response["freshness"]["tailScan"]
    return {"p50": percentile(latencies, 0.50) * 1000, "p99": percentile(latencies, 0.99) * 1000,
            "mean": statistics.fmean(latencies) * 1000, "hitsPerQuery": hits / len(latencies),
            "tailScan": tail}


def cold_tail(settings: Any, bootstrap: str, follower: Any, principal: Any, *,
              repeats: int) -> dict[str, float]:
    """Latency of a ``latest`` hybrid query whose tail scan is not cached: each planner answers
    one ``indexed`` query first (readers, embedder and tokenizer loaded), then one ``latest``."""
    from planner.engine import Planner

    latencies = []
    for number in range(repeats):
        planner = Planner(settings, bootstrap, follower=follower)
        try:
            planner.search({"query": "kafka offset", "freshness": "indexed"}, principal)
            began = time.perf_counter()
            planner.search({"query": f"docker cache {number}", "freshness": "latest"}, principal)
            latencies.append(time.perf_counter() - began)
        finally:
            planner.close()
    return {"p50": percentile(latencies, 0.5) * 1000, "max": max(latencies) * 1000}


def moved_head(settings: Any, bootstrap: str, follower: Any, principal: Any, *, chunks: int,
               tail_events: int, repeats: int, warm_every: float = 0.25) -> dict[str, Any]:
    """``latest`` after the log head moved by ``tail_events`` events, two planners side by side:
    one without the tail warmer (its next query scans the new events itself: the uncached cost
    of a live log) and one with it (``Planner(warm_tail_every=...)``; the query is timed once the
    warmer has made a pass that began after the append, and how long that took is reported).
    Both answered the same ``latest`` queries before, and give the same hits. Appends to L1."""
    from planner.engine import Planner
    from streams.asp import validate_event
    from streams.l1 import L1Producer

    plain = Planner(settings, bootstrap, follower=follower)
    warmed = Planner(settings, bootstrap, follower=follower, warm_tail_every=warm_every)
    assert warmed.warmer is not None
    producer = L1Producer(bootstrap, settings)
    figures: dict[str, list[float]] = {"plain": [], "warmed": [], "cached": [], "catchUp": []}
    start = chunks
    try:
        for planner in (plain, warmed):
            planner.search({"query": "kafka offset", "freshness": "latest"}, principal)
        for number in range(repeats):
            turns = tail_events // 2
            for events, _ in generate(turns, start=start):
                for event in events:
                    producer.append(validate_event(event))
            producer.flush()
            start += turns
            appended = time.monotonic()
            passes = warmed.warmer.passes
            while warmed.warmer.passes < passes + 2 and time.monotonic() - appended < 120:
                time.sleep(0.01)
            figures["catchUp"].append(time.monotonic() - appended)
            request = {"query": f"docker cache moved {number}", "freshness": "latest"}
            answers = []
            for name, planner in (("plain", plain), ("warmed", warmed), ("cached", plain)):
                began = time.perf_counter()
                answers.append(planner.search(request, principal))
                figures[name].append(time.perf_counter() - began)
            first, second = answers[0], answers[1]
            assert first["asOfSeq"] == second["asOfSeq"] and first["results"] == second["results"]
    finally:
        producer.close()
        warmed.close()
        plain.close()
    return {name: {"p50": percentile(values, 0.5) * 1000, "max": max(values) * 1000}
            for name, values in figures.items()}


def _merge_window_only(vectors: int, embedder: str, out: Path | None) -> None:
    """``--merge-window``: the inputs embedded from new turns (flat, as merge_window writes
    them), then :func:`merge_window`; no broker."""
    from sinks.vector_writer import VectorWriter
    from streams.settings import Settings

    work = Path(tempfile.mkdtemp(prefix="usl-bench-merge-window-"))
    try:
        settings = Settings.from_env({}, home=work / "home", embedder=embedder)
        writer = VectorWriter(settings)
        source = work / "gen-00000001"
        source.mkdir()
        writer.exact_max = vectors  # one flat segment: the merge reads only its vectors
        writer.write(source, None, [chunk for _, chunk in generate(vectors, start=5 * 10 ** 6)])
        writer.exact_max = settings.vector_exact_max
        figures = merge_window(settings, writer, source, vectors, start=6 * 10 ** 6)
        print(json.dumps(figures, indent=1))
        if out:
            out.write_text(json.dumps(figures, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--large", action="store_true", help="1 000 000 chunks")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--tail-events", type=int, default=1000)
    parser.add_argument("--embedder", default=os.environ.get("USL_EMBEDDER", "wordllama"))
    parser.add_argument("--engine", default="tantivy")
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    parser.add_argument("--merge-window", type=int, metavar="VECTORS",
                        help="only the merge window (merge_window) of a merge of VECTORS freshly embedded chunks")
    args = parser.parse_args()
    chunks = 1_000_000 if args.large else args.chunks
    if args.merge_window:
        _merge_window_only(args.merge_window, args.embedder, args.out)
        return

    from planner.acl import parse_principal
    from planner.engine import Planner
    from sinks.watermarks import WatermarkFollower
    from streams.settings import Settings

    work = Path(tempfile.mkdtemp(prefix="usl-bench-query-"))
    broker_settings = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        from deploy.kafka.broker import ensure_broker

        broker_settings = Settings.from_env({}, home=work / "broker")
        bootstrap = ensure_broker(broker_settings)
    settings = Settings.from_env(
        {}, home=work / "home", topic_prefix=f"bench{uuid.uuid4().hex[:8]}.",
        bootstrap_servers=bootstrap, l1_partitions=1, stream_partitions=1,
        embedder=args.embedder, text_engine=args.engine, cursor_key="bench-cursor-key-0123456789")
    follower = None
    try:
        print(f"building {chunks} chunks ({2 * chunks} L1 events, {args.tail_events} above the "
              f"indexes), embedder {args.embedder}, text engine {args.engine} ...", flush=True)
        figures = build(settings, bootstrap, chunks, args.tail_events)
        print(f"  L1 append {figures['appendSeconds']:.1f} s; "
              + ", ".join(f"{kind} write {sec:.1f} s" for kind, sec in figures["writeSeconds"].items())
              + f"; total {figures['totalSeconds']:.1f} s", flush=True)
        if sink := figures.get("sinkMerge"):
            base = sink["baseline"]
            print(f"  a merge of {sink['vectors']} vectors ({sink['mergeSeconds']:.1f} s) beside a sink fed "
                  f"{sink['rate']:.0f} chunks/s: watermark lag {sink['lagSeconds']:.2f} s (no merge "
                  f"{base['lagSeconds']:.2f}), stood still {sink['stallSeconds']:.2f} s (no merge "
                  f"{base['stallSeconds']:.2f}), commit gap median {sink['medianCommitGapSeconds']:.2f} s", flush=True)
        follower = WatermarkFollower(bootstrap, settings).start()
        planner = Planner(settings, bootstrap, follower=follower)
        principal = parse_principal("tenant:acme/user:bench/groups:ops")
        for freshness in ("indexed", "latest"):  # warm every path (page cache, HNSW, tail)
            for mode in ("text", "vector", "hybrid"):
                run_queries(planner, principal, mode=mode, freshness=freshness, queries=10,
                            seed=3)
        results: dict[tuple[str, str], dict[str, Any]] = {}
        print(f"\n{args.queries} queries per row, principal may read 90% of sessions; ms")
        print(f"{'mode':8} {'freshness':9} {'p50':>8} {'p99':>8} {'mean':>8} {'hits/q':>7}  tail scan")
        for freshness in ("indexed", "latest"):
            for mode in ("text", "vector", "hybrid"):
                row = run_queries(planner, principal, mode=mode, freshness=freshness,
                                  queries=args.queries)
                results[(mode, freshness)] = row
                tail = row["tailScan"]
                tail_text = f"{tail['fromSeq']}..{tail['toSeq']}" if tail else "-"
                print(f"{mode:8} {freshness:9} {row['p50']:8.1f} {row['p99']:8.1f} "
                      f"{row['mean']:8.1f} {row['hitsPerQuery']:7.1f}  {tail_text}", flush=True)
        planner.close()
        cold = cold_tail(settings, bootstrap, follower, principal, repeats=5)
        print(f"\nlatest, tail scan not cached (a fresh planner, readers warm): p50 "
              f"{cold['p50']:.1f} ms, max {cold['max']:.1f} ms for {args.tail_events} L1 events")
        moved = moved_head(settings, bootstrap, follower, principal, chunks=chunks,
                           tail_events=args.tail_events, repeats=5)
        print(f"latest after the head moved by {args.tail_events} events (p50 / max ms): no "
              f"warmer {moved['plain']['p50']:.1f} / {moved['plain']['max']:.1f}; tail warmer "
              f"{moved['warmed']['p50']:.1f} / {moved['warmed']['max']:.1f} (caught up "
              f"{moved['catchUp']['p50']:.0f} / {moved['catchUp']['max']:.0f} ms after the "
              f"append); cached {moved['cached']['p50']:.1f} / {moved['cached']['max']:.1f}")
        print("\nratios (p50)")
        for mode in ("text", "vector", "hybrid"):
            ratio = results[(mode, "latest")]["p50"] / results[(mode, "indexed")]["p50"]
            print(f"  {mode:7} latest / indexed = {ratio:.2f}x")
        for freshness in ("indexed", "latest"):
            ratio = results[("hybrid", freshness)]["p50"] / results[("text", freshness)]["p50"]
            print(f"  {freshness:7} hybrid / text   = {ratio:.2f}x")
        if args.out:
            args.out.write_text(json.dumps({
                "chunks": chunks, "queries": args.queries, "tailEvents": args.tail_events,
                "embedder": args.embedder, "textEngine": args.engine, "date": datetime.now(UTC).isoformat(),
                "loadAverage": os.getloadavg(), "build": figures, "coldTailMs": cold,
                "movedHeadMs": moved,
                "indexBytes": index_bytes(settings),
                "latency": {f"{mode}/{freshness}": {"p50": row["p50"], "p99": row["p99"],
                                                    "hits": row["hitsPerQuery"]}
                            for (mode, freshness), row in results.items()},
            }, indent=1) + "\n")
            print(f"\nwrote {args.out}")
    finally:
        if follower is not None:
            follower.stop()
        if broker_settings is not None:
            from deploy.kafka.broker import stop_broker

            stop_broker(broker_settings)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
