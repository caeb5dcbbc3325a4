"""The fault rounds and the checks after each (see :mod:`reliability`)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from reliability import abuse
from reliability import objectstore as store_checks
from reliability.load import Ingest, Querier, WatermarkWatch, l1_event_counts
from reliability.stack import SuiteStack
from sinks.exceptions import GenerationError
from sinks.generations import MANIFEST_FILE, FileDigests, GenerationStore
from sinks.objectstore.publish import DEFAULT_SHARD
from sinks.objectstore.store import ObjectStore
from sinks.runner import index_root
from sinks.service import ALL_KINDS
from streams.settings import Settings
from streams.testing import append_events, chunk_set, l1_seq, session_events

__all__ = ["DEFAULT_FAULT_KINDS", "FAULT_KINDS", "LOCAL_FAULT_KINDS", "OBJECT_STORE_FAULT_KINDS",
           "SCALED_OUT_FAULT_KINDS", "SHARD_FAULT_KINDS", "SINK_SHARDS", "FaultResult", "Phase", "SuiteResult",
           "phases", "run_suite"]

LOCAL_FAULT_KINDS = ("kill-worker", "kill-sink", "kill-api", "broker-restart", "disk-full",
                     "corrupt-segment", "corrupt-manifest", "slow-sink", "foreign-tenant", "far-future-time")
"""Process, broker and disk faults, and the abuse cases of :mod:`reliability.abuse` (what a
hostile or broken producer writes): injected into the embedded layout, one sink process per
index kind writing local generations."""

OBJECT_STORE_FAULT_KINDS = ("store-unavailable", "partial-upload")
"""Faults of the object store the sinks publish to (:mod:`reliability.objectstore`)."""

SHARD_FAULT_KINDS = ("kill-shard",)
"""Faults of a sink shard process (:mod:`sinks.shards`)."""

SCALED_OUT_FAULT_KINDS = SHARD_FAULT_KINDS + OBJECT_STORE_FAULT_KINDS
"""Faults of the scaled-out index tier: injected into a stack of its own that runs the
shardable kinds as :data:`SINK_SHARDS` shard processes (``usl up`` with ``USL_SINK_SHARDS``)
and publishes every generation to the suite's own S3Proxy."""

SINK_SHARDS = 2
"""Shards per shardable kind on the scaled-out stack (the suite's derived topics have 2 partitions)."""

DEFAULT_FAULT_KINDS = LOCAL_FAULT_KINDS + SCALED_OUT_FAULT_KINDS
"""What a run injects unless told otherwise: every kind, each on the stack it needs (:func:`phases`)."""

FAULT_KINDS = DEFAULT_FAULT_KINDS
"""Every kind the suite can inject (``--faults``)."""

# What a sink logs when a publish failed because the store did not answer.
_STORE_UNAVAILABLE_LINE = "to the object store failed (object store unavailable"
# Which sink's log line shows the fault was noticed, per fault kind.
_SINK_LOG_LINES = {"disk-full": "commit failed on a write error",
                   "corrupt-segment": "fails verification",
                   "corrupt-manifest": "fails verification"}


@dataclass
class FaultResult:
    """One round: a fault kind injected ``injected`` times, and what the checks found."""

    kind: str
    target: str
    injected: int
    survived: bool = False
    lost: int = 0
    duplicated: int = 0
    regressions: int = 0
    bad_answers: int = 0
    recovery_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    ended: float | None = None  # time.monotonic() the fault ended, if not when fault() returns


@dataclass(frozen=True)
class Phase:
    """The faults one stack of a run takes: its name, the stack's layout and its schedule's kinds."""

    name: str
    kinds: tuple[str, ...]
    object_store: bool
    sink_shards: int


def phases(kinds: tuple[str, ...], *, object_store: bool = False) -> list[Phase]:
    """The stacks a run of ``kinds`` starts, one after the other: the embedded layout for the
    local faults (publishing too when ``object_store``), then the scaled-out tier (sink shards
    and the object store) for its faults; a stack no selected kind needs is not started."""
    local = tuple(k for k in kinds if k in LOCAL_FAULT_KINDS)
    scaled_out = tuple(k for k in kinds if k in SCALED_OUT_FAULT_KINDS)
    plan = []
    if local:
        plan.append(Phase("local", local, object_store, 1))
    if scaled_out:
        plan.append(Phase("scaled-out", scaled_out, True, SINK_SHARDS))
    return plan


@dataclass
class SuiteResult:
    faults: list[FaultResult]
    meta: dict[str, Any]
    final: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(f.survived for f in self.faults) and not self.final.get("problems")

    def totals(self) -> dict[str, int]:
        return {
            "injected": sum(f.injected for f in self.faults),
            "survived": sum(f.injected for f in self.faults if f.survived),
            "lost": sum(f.lost for f in self.faults) + int(self.final.get("lost", 0)),
            "duplicated": sum(f.duplicated for f in self.faults) + int(self.final.get("duplicated", 0)),
            "regressions": sum(f.regressions for f in self.faults),
            "bad_answers": sum(f.bad_answers for f in self.faults),
        }


# -- checks ----------------------------------------------------------------------------------


def l1_counts(settings: Settings, appended: list[str], reused: Collection[str] = ()) -> tuple[int, int]:
    """(events appended but not in L1, events in L1 more than once); ``reused``: eventIds an
    abuse case appended twice on purpose (once each)."""
    counts = l1_event_counts(settings)
    lost = len(set(appended) - set(counts))
    duplicated = sum(n - 1 - (1 if event_id in reused else 0) for event_id, n in counts.items() if n > 1)
    return lost, duplicated


def index_counts(settings: Settings, shards: Collection[str] = ()) -> tuple[int, int, list[str]]:
    """(records missing from an index, duplicate rows/documents, details): every index
    against what the derived topics say it must hold (exactly once). A kind written by sink
    shards (``shards``: the shard names, ``shard-I-of-N``) is the union of its shards'
    current generations, so a record two shards hold counts as a duplicate."""
    from sinks.testing import expected_keys, index_keys

    keys = index_keys(settings)
    for shard in sorted(shards):
        for kind, tables in index_keys(settings, shard=shard).items():
            for table, values in tables.items():
                keys.setdefault(kind, {}).setdefault(table, []).extend(values)
    try:
        want = expected_keys(settings)
    except AssertionError as exc:  # a chunk id emitted with two different contents
        return 0, 1, [f"derived topics: {exc}"]
    targets = {("text", "chunks"): "chunks", ("vector", "chunks"): "chunks",
               ("structured", "chunks"): "chunks", ("structured", "sessions"): "events",
               ("analytics", "chunks"): "chunks", ("analytics", "events"): "events",
               ("analytics", "tool_calls"): "tool_calls", ("analytics", "tool_results"): "tool_results",
               ("toolresults", "results"): "toolresults"}
    lost = duplicated = 0
    details: list[str] = []
    for (kind, table), wanted in targets.items():
        have = keys.get(kind, {}).get(table, [])
        missing = want[wanted] - set(have)
        extra = set(have) - want[wanted]
        dups = len(have) - len(set(have))
        if missing or extra or dups:
            details.append(f"{kind}.{table}: {len(missing)} missing, {len(extra)} unexpected, {dups} duplicated")
        lost += len(missing)
        duplicated += dups + len(extra)
    coverage = keys.get("structured", {}).get("coverage", [])
    duplicated += len(coverage) - len(set(coverage))
    return lost, duplicated, details


def chunk_determinism(settings: Settings) -> list[str]:
    """Differences between the chunks the pipeline emitted and an uninterrupted replay's."""
    from sinks.testing import replay_chunks

    try:
        downstream = chunk_set(settings)
    except AssertionError as exc:
        return [str(exc)]
    reference = replay_chunks(settings, ("default",))
    problems = []
    if set(reference) - set(downstream):
        problems.append(f"{len(set(reference) - set(downstream))} chunks of the replay never emitted")
    if set(downstream) - set(reference):
        problems.append(f"{len(set(downstream) - set(reference))} chunks no uninterrupted run emits")
    changed = [c for c in set(reference) & set(downstream) if reference[c] != downstream[c]]
    if changed:
        problems.append(f"{len(changed)} chunks differ from the replay's bytes")
    return problems


# -- the suite -------------------------------------------------------------------------------


class _Suite:
    def __init__(self, stack: SuiteStack, settings: Settings, *, seed: int, kills_per_round: int,
                 recovery_timeout: float, log: Callable[[str], None], sessions_per_batch: int,
                 pause_seconds: float, pace: float) -> None:
        self.stack = stack
        self.settings = settings
        self.rng = random.Random(seed)
        self.api_last = "nothing: no request was sent"
        self.seed = seed
        self.kills_per_round = kills_per_round
        self.pace = pace
        self.recovery_timeout = recovery_timeout
        self.log = log
        self.root = index_root(settings)
        self.ingest = Ingest(settings, seed=seed, sessions_per_batch=sessions_per_batch,
                             pause_seconds=pause_seconds)
        self.watch = WatermarkWatch(settings)
        self.querier = Querier(settings, stack.api_url, seed=seed + 1, index_root=self.root)
        self._turn: dict[str, int] = {}
        self.reused_ids: set[str] = set()  # eventIds the foreign-tenant case reuses on purpose
        self._regressions_seen = 0
        self._queries_seen = 0
        self._probe = 0
        self.store: ObjectStore | None = ObjectStore.from_settings(settings) if stack.object_store else None
        self.layout = stack.sink_layout()
        # kind → its shard names, for the kinds shard processes write
        self.shards = {kind: [p.shard for p in procs if p.shard]
                       for kind, procs in stack.sharded_kinds().items()}
        self.shard_names = sorted({name for names in self.shards.values() for name in names})
        # Remote manifests of publishes a partial-upload kill cut short: never to be live.
        self.cut_short: set[str] = set()

    def wait(self, low: float, high: float) -> float:
        """Sleep a random time in [low, high] seconds scaled by ``pace``; the time slept."""
        seconds = self.rng.uniform(low, high) * self.pace
        time.sleep(seconds)
        return seconds

    def next_kind(self, fault: str, kinds: tuple[str, ...] = ALL_KINDS) -> str:
        n = self._turn.get(fault)
        if n is None:  # each fault kind starts at a different kind, so one round covers several
            n = self.rng.randrange(len(kinds))
        self._turn[fault] = n + 1
        return kinds[n % len(kinds)]

    def sink_of(self, kind: str) -> tuple[str, str | None]:
        """(child, shard) of a process that writes ``kind``: its one sink, or a random shard."""
        procs = self.layout[kind]
        process = procs[0] if len(procs) == 1 else self.rng.choice(procs)
        return process.name, process.shard

    # -- waiting ---------------------------------------------------------------------------

    def head(self) -> int:
        deadline = time.monotonic() + 120
        while True:
            try:
                return l1_seq(self.settings)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def caught_up(self, seq: int, timeout: float) -> bool:
        return self.watch.wait_for(seq, ALL_KINDS, timeout)

    def api_answers(self, timeout: float) -> bool:
        """Whether a search answers 200 within ``timeout``; what it last said otherwise is kept
        in ``api_last`` for the failure message."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                reply = httpx.post(f"{self.stack.api_url}/v1/search", json={"query": "deploy"}, timeout=30)
                if reply.status_code == 200:
                    return True
                self.api_last = f"HTTP {reply.status_code}: {reply.text[:400]}"
            except httpx.HTTPError as exc:
                self.api_last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.5)
        return False

    # -- faults ------------------------------------------------------------------------------

    def _kill(self, name: str, result: FaultResult) -> float:
        """Kill ``name`` kills_per_round times at random points (during start-up included);
        return when the last kill landed."""
        last = time.time()
        for _ in range(self.kills_per_round):
            pid = self.stack.wait_running([name], timeout=self.recovery_timeout)[name]
            self.wait(0.2, 4.0)
            self.stack.signal(name, signal.SIGKILL)
            last = time.time()
            result.injected += 1
            self.stack.wait_running([name], timeout=self.recovery_timeout, not_pids={name: pid})
        return last

    def fault(self, kind: str) -> FaultResult:
        if kind == "kill-shard":
            result = FaultResult(kind, "?", 0)
            self._kill_shard(result)
            return result
        if kind in ("kill-worker", "kill-api", "kill-sink"):
            target = {"kill-worker": "worker", "kill-api": "api"}.get(kind) or self.sink_of(self.next_kind(kind))[0]
            result = FaultResult(kind, target, 0)
            self._kill(target, result)
            if kind == "kill-api" and not self.api_answers(self.recovery_timeout):
                result.notes.append("the API did not answer again")
            return result
        if kind == "foreign-tenant":
            result = FaultResult(kind, "tenant acme's session", 1)
            self._foreign_tenant(result)
            return result
        if kind == "far-future-time":
            result = FaultResult(kind, "log default", 1)
            self._far_future(result)
            return result
        if kind == "store-unavailable":
            result = FaultResult(kind, "object store", 1)
            self._store_unavailable(result)
            return result
        if kind == "broker-restart":
            result = FaultResult(kind, "broker", 1)
            self.stack.stop_broker()
            self.wait(2.0, 6.0)
            self.stack.restart_broker()
            return result
        target_kind = self.next_kind(kind)
        result = FaultResult(kind, self.sink_of(target_kind)[0] if kind != "partial-upload" else "?", 1)
        if kind == "disk-full":
            self._disk_full(target_kind, result)
        elif kind in ("corrupt-segment", "corrupt-manifest"):
            self._corrupt(target_kind, result, manifest=kind == "corrupt-manifest")
        elif kind == "slow-sink":
            self._slow(target_kind, result)
        elif kind == "partial-upload":
            result.injected = 0
            self._partial_upload(target_kind, result)
        return result

    def _kill_shard(self, result: FaultResult) -> None:
        """SIGKILL of one sink shard process (the shardable kinds and shards take turns) at
        random points of the ingest; the supervisor restarts it and it resumes from its shards'
        manifests while the other shards go on. The round's checks then read every kind as the
        union of its shards (each record exactly once across them), the folded watermark (the
        minimum over the shards) and every shard generation an answer read."""
        if not self.shards:
            result.target = "no sink shards"
            result.notes.append("FAIL: kill-shard needs a stack with sink shards")
            return
        kind = self.next_kind("kill-shard", tuple(sorted(self.shards)))
        name, shard = self.sink_of(kind)
        writes = sorted(k for k, procs in self.layout.items() if any(p.name == name for p in procs))
        result.target = f"{name} ({shard}: {', '.join(writes)})"
        generations_before = self._shard_generations(shard)
        self._kill(name, result)
        result.notes.append(f"{shard} current generations when first killed: {generations_before}")

    def _shard_generations(self, shard: str | None) -> dict[str, int | None]:
        """kind → current generation id of ``shard`` (None before its first commit)."""
        ids: dict[str, int | None] = {}
        for kind, names in sorted(self.shards.items()):
            if shard in names:
                with contextlib.suppress(GenerationError, OSError):
                    ids[kind] = GenerationStore(self.root, "default", kind, shard=shard).current_id()
        return ids

    def _publish_failures(self) -> tuple[float, int]:
        """(usl_objectstore_publish_failures_total over every sink, sink log lines of a publish
        that failed because the store did not answer). The counter also counts other failures
        (a generation collected locally while its publish read it), hence the log lines."""
        processes = {(p.name, kind) for kind, procs in self.layout.items() for p in procs}
        counted = sum(self.stack.sink_counter(name, "usl_objectstore_publish_failures_total", kind=kind) or 0.0
                      for name, kind in sorted(processes))
        lines = sum(self.stack.log_text(name).count(_STORE_UNAVAILABLE_LINE)
                    for name in sorted({name for name, _kind in processes}))
        return counted, lines

    def _store_unavailable(self, result: FaultResult) -> None:
        """S3Proxy stopped for a while under the steady ingest: the sinks keep committing and
        the planner keeps answering from local generations; publishes fail and are retried."""
        failures_before = self._publish_failures()
        stopped = time.monotonic()
        self.stack.stop_store()
        try:
            self.wait(5.0, 15.0)
            head = self.head()
            # Local indexing does not wait for the store: the indexes reach the head meanwhile.
            kept_up = self.caught_up(head, self.recovery_timeout)
        finally:
            self.stack.restart_store()
        result.ended = time.monotonic()
        held = result.ended - stopped
        counted, lines = (after - before for after, before in zip(self._publish_failures(), failures_before,
                                                                  strict=True))
        result.notes.append(f"store stopped {held:.1f}s; indexes reached seq {head} while it was away: "
                            f"{'yes' if kept_up else 'no'}; publishes failed on the unavailable store: {lines:.0f} "
                            f"(sink logs), usl_objectstore_publish_failures_total grew by {counted:.0f}")
        if not kept_up:
            result.notes.append("FAIL: local indexing stalled while the object store was away")
        if lines <= 0 or counted <= 0:
            result.notes.append("FAIL: no sink logged and counted a publish failed on the unavailable store")

    def _partial_upload(self, kind: str, result: FaultResult) -> None:
        """SIGKILL of a sink in the middle of a publish: as soon as the remote manifest of a
        new generation lands in the store (every blob uploaded) and before its commit record is
        on the topic -- the widest step of a publish, since the commit reads the commit topic
        first. A kill that came too late (the record was written) is noted, not a failure."""
        name, shard = self.sink_of(kind)
        result.target = name if shard is None else f"{name} ({kind} {shard})"
        manifests = self.stack.store_dir() / "manifests" / "default" / kind / (shard or DEFAULT_SHARD)
        prefix = f"rel/manifests/default/{kind}/{shard or DEFAULT_SHARD}/"

        def listing() -> set[str]:
            with contextlib.suppress(OSError):
                return {n for n in os.listdir(manifests) if n.startswith("gen-") and n.endswith(".json")}
            return set()

        cut, late, missed = [], 0, 0
        for _ in range(self.kills_per_round):
            pid = self.stack.wait_running([name], timeout=self.recovery_timeout)[name]
            seen = listing()
            deadline = time.monotonic() + 60 * self.pace
            new: set[str] = set()
            while not new and time.monotonic() < deadline:
                time.sleep(0.002)
                new = listing() - seen
            self.stack.signal(name, signal.SIGKILL)
            result.injected += 1
            self.stack.wait_running([name], timeout=self.recovery_timeout, not_pids={name: pid})
            if not new:
                missed += 1
                continue
            named = {str(r.get("manifestKey")) for r in store_checks.commit_history(self.settings)}
            for manifest in sorted(new):
                if prefix + manifest in named:
                    late += 1
                else:
                    cut.append(prefix + manifest)
        self.cut_short.update(cut)
        result.notes.append(f"{len(cut)} publish(es) cut between upload and commit, {late} kill(s) after "
                            f"the commit, {missed} without a publish in sight")
        if missed == self.kills_per_round:
            result.notes.append("FAIL: the sink never published while the fault waited")

    def _disk_full(self, kind: str, result: FaultResult) -> None:
        line = _SINK_LOG_LINES["disk-full"]
        before = self.stack.log_text(f"sink-{kind}").count(line)
        held = self.rng.uniform(3.0, 8.0) * self.pace
        try:
            ballast = self.stack.fill_disk(kind)
            deadline = time.monotonic() + held
            # Held at least ``held`` seconds, and until the sink met the full disk (a commit
            # needs new records; up to 30 s more).
            while time.monotonic() < deadline or (
                    time.monotonic() < deadline + 30 and self.stack.disk_mode == "tmpfs-enospc"
                    and self.stack.log_text(f"sink-{kind}").count(line) == before):
                time.sleep(0.1)
                ballast += self.stack.fill_disk(kind)
                store = GenerationStore(self.root, "default", kind)
                try:  # the generation readers see stays whole while writes fail
                    manifest = store.current()
                    if manifest is not None:
                        store.verify(manifest)
                except (GenerationError, OSError) as exc:
                    result.notes.append(f"FAIL: current generation unreadable while the disk was full: {exc}")
                    break
        finally:
            self.stack.free_disk(kind)
        noticed = self.stack.log_text(f"sink-{kind}").count(line) > before
        counted = self.stack.sink_counter(self.stack.sink_process(kind), "usl_sink_failures_total", kind=kind,
                                          reason="write_error")
        result.notes.append(f"{self.stack.disk_mode}, {ballast >> 20} MiB ballast, held {held:.1f}s, "
                            f"sink logged the failed commit: {'yes' if noticed else 'no'}, "
                            f"usl_sink_failures_total{{reason=write_error}} = {counted}")
        if not noticed and self.stack.disk_mode == "tmpfs-enospc":
            result.notes.append("FAIL: the sink never logged a failed commit")
        if noticed and not counted:
            result.notes.append("FAIL: the sink's metrics do not count the failed commit")

    def _corrupt(self, kind: str, result: FaultResult, *, manifest: bool) -> None:
        store = GenerationStore(self.root, "default", kind)
        current = store.current()
        assert current is not None, f"{kind} has no generation to damage"
        gen_dir = store.generation_dir(current.generation_id)
        if manifest:
            path = gen_dir / MANIFEST_FILE
            damaged = [current.generation_id]
        else:
            segments = [s for s in current.segments if s.bytes > 0]
            path = gen_dir / self.rng.choice(segments).path
            inode = path.stat().st_ino
            damaged = []
            for generation_id in store.generation_ids():
                with contextlib.suppress(OSError):
                    if (store.generation_dir(generation_id) / path.relative_to(gen_dir)).stat().st_ino == inode:
                        damaged.append(generation_id)
        size = path.stat().st_size
        offset = self.rng.randrange(size)
        when = time.time()
        result.ended = time.monotonic()
        self.querier.mark_corrupted(kind, store.line, damaged, when)
        path.chmod(0o644)
        with open(path, "r+b") as handle:
            handle.seek(offset)
            byte = handle.read(1)
            handle.seek(offset)
            handle.write(bytes([byte[0] ^ 0xFF]))
        result.target += f" {path.relative_to(self.root)}@{offset}"
        line = _SINK_LOG_LINES["corrupt-segment"]
        before = self.stack.log_text(f"sink-{kind}").count(line)
        # The sink refuses it at its next commit (before building on it) and restarts into a
        # rebuild: wait until a new line replaced the damaged one -- or until the line's
        # current generation is an undamaged one (the sink committed past the damaged
        # generation before the byte flipped, and the damaged file is not part of the new one).
        digests = FileDigests()
        outcome = ""
        deadline = time.monotonic() + self.recovery_timeout
        while time.monotonic() < deadline and not outcome:
            time.sleep(0.5)
            live = GenerationStore(self.root, "default", kind)
            if live.line != store.line:
                outcome = f"rebuilt into line {live.line}"
                continue
            with contextlib.suppress(GenerationError, OSError):
                current_id = live.current_id()
                if current_id is not None and current_id not in damaged:
                    live.verify(live.load(current_id), digests=digests)
                    outcome = f"superseded: current generation {current_id} does not hold the damage"
        if not outcome:
            result.notes.append("FAIL: the damaged generation stayed current")
        noticed = self.stack.log_text(f"sink-{kind}").count(line) > before
        result.notes.append(f"damaged generations {damaged} of line {store.line}; sink logged the "
                            f"refusal: {'yes' if noticed else 'no'}; {outcome}")
        if outcome.startswith("rebuilt") and not noticed:
            result.notes.append("FAIL: the sink never logged the failed verification")
        if outcome.startswith("rebuilt"):
            # The restarted sink found the damage at start-up; its metrics say so.
            counted = self.stack.sink_counter(self.stack.sink_process(kind), "usl_sink_failures_total",
                                              kind=kind, reason="verification")
            result.notes.append(f"usl_sink_failures_total{{reason=verification}} = {counted}")
            if not counted:
                result.notes.append("FAIL: the sink's metrics do not count the failed verification")

    def _slow(self, kind: str, result: FaultResult) -> None:
        self._probe += 1
        token = f"probe{self.seed}x{self._probe}"
        probe = session_events(f"rel{self.seed}-probe{self._probe}", turns=1, seed=self._probe,
                               start=None)
        for event in probe:
            if event["type"] == "message" and event["role"] == "user":
                event["fields"]["text"] += f" {token}"
        self.stack.signal(f"sink-{kind}", signal.SIGSTOP)
        try:
            lag_before = self._lag(kind)
            self.ingest.add(probe)
            held = self.wait(4.0, 10.0)
            probe_ids = {e["eventId"] for e in probe}
            deadline = time.monotonic() + 60
            while not probe_ids <= set(self.ingest.appended) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1.0)
            lag_after = self._lag(kind)
            answer = httpx.post(f"{self.stack.api_url}/v1/search",
                                json={"query": token, "freshness": "latest", "k": 5}, timeout=60).json()
        finally:
            self.stack.signal(f"sink-{kind}", signal.SIGCONT)
        found = any(row.get("sessionId") == probe[0]["sessionId"] for row in answer.get("results") or ())
        freshness = answer.get("freshness") or {}
        result.notes.append(f"stopped {held:.1f}s; lag {lag_before} -> {lag_after} seqs; latest query "
                            f"label {freshness.get('label')!r}, tail scan {freshness.get('tailScan')}, "
                            f"probe found: {'yes' if found else 'no'}")
        if not (lag_after > lag_before):
            result.notes.append("FAIL: status did not show the lag growing")
        if not found or int(answer.get("asOfSeq", -1)) != int(freshness.get("l1CommittedSeq", -2)):
            result.notes.append("FAIL: the latest query missed the probe or was not at the L1 head")

    def _appended(self, events: list[dict[str, Any]]) -> None:
        """Wait until the steady ingest appended ``events`` (given to it with ``add``)."""
        ids = {event["eventId"] for event in events}
        deadline = time.monotonic() + 120
        while not ids <= set(self.ingest.appended) and time.monotonic() < deadline:
            time.sleep(0.2)

    def _foreign_tenant(self, result: FaultResult) -> None:
        self._probe += 1
        victim, victim_word = abuse.victim_session(self.seed, self._probe, "2026-11-03T09:00:00Z")
        self.ingest.add(victim)
        self._appended(victim)
        hostile, injected_word, reused = abuse.takeover_events(victim, self.seed, self._probe)
        before = abuse.dead_letter_reasons(self.settings)
        self.reused_ids.add(reused)
        append_events(self.settings, hostile)
        if not self.caught_up(self.head(), self.recovery_timeout):
            result.notes.append("FAIL: the indexes did not catch up after the takeover attempt")
            return
        problems = abuse.check_takeover(self.stack.api_url, victim_word, injected_word, before,
                                        abuse.dead_letter_reasons(self.settings))
        result.notes += [f"FAIL: {problem}" for problem in problems]
        result.notes.append("takeover, injection, eventId reuse and an acl-less heartbeat: "
                            + ("contained" if not problems else "NOT contained"))

    def _far_future(self, result: FaultResult) -> None:
        self._probe += 1
        events, word = abuse.far_future_session(self.seed, self._probe)
        self.ingest.add(events)
        self._appended(events)
        if not self.caught_up(self.head(), self.recovery_timeout):
            result.notes.append("FAIL: an open turn dated 2099 held the indexes back")
            return
        problems = abuse.check_far_future(self.stack.api_url, word, events[0]["sessionId"])
        result.notes += [f"FAIL: {problem}" for problem in problems]
        result.notes.append("an open turn dated 2099: " + ("cut and indexed, nothing held" if not problems
                                                           else "NOT handled"))

    def _check_store(self, result: FaultResult) -> None:
        """The store caught up: every kind's live published generation is its local current
        one, whole; no publish a kill cut short was ever made live."""
        assert self.store is not None
        took, problems = store_checks.wait_published(self.settings, self.root, self.store, ALL_KINDS,
                                                      timeout=max(120.0, self.recovery_timeout / 2),
                                                      shards=self.shards)
        problems += store_checks.never_live(self.cut_short, store_checks.commit_history(self.settings))
        result.notes += [f"FAIL: object store: {p}" for p in problems]
        if took is not None:
            result.notes.append(f"object store: live == local current for every kind after {took:.1f}s")

    def _lag(self, kind: str) -> int:
        status = httpx.get(f"{self.stack.api_url}/v1/status", timeout=60).json()
        return int(status["logs"]["default"]["indexes"][kind]["lagSeqs"])

    # -- a round ----------------------------------------------------------------------------

    def round(self, kind: str) -> FaultResult:
        self.ingest.resume()
        self.wait(1.0, 4.0)  # a random point of the steady ingest
        started = time.time()
        try:
            result = self.fault(kind)
        except Exception as exc:
            result = FaultResult(kind, "?", 1, notes=[f"FAIL: injecting the fault failed: {exc!r}"])
        fault_end = result.ended or time.monotonic()
        head = self.head()
        self.stack.wait_running(timeout=self.recovery_timeout)
        recovered = self.caught_up(head, self.recovery_timeout)
        if recovered:
            result.recovery_seconds = time.monotonic() - fault_end
        else:
            result.notes.append(f"FAIL: indexes did not reach seq {head} within {self.recovery_timeout:.0f}s")
        self.ingest.pause()
        checks_started = time.monotonic()
        final_head = self.head()
        if not self.caught_up(final_head, self.recovery_timeout):
            result.notes.append(f"FAIL: indexes did not reach the paused head {final_head}")
        lost, duplicated = l1_counts(self.settings, self.ingest.appended, self.reused_ids)
        index_lost, index_dups, details = index_counts(self.settings, self.shard_names)
        result.lost, result.duplicated = lost + index_lost, duplicated + index_dups
        result.notes += [f"FAIL: {d}" for d in details]
        regressions = self.watch.regressions[self._regressions_seen:]
        self._regressions_seen += len(regressions)
        result.regressions = len(regressions)
        result.notes += [f"FAIL: watermark went backwards: {r}" for r in regressions]
        records = [r for r in self.querier.records[self._queries_seen:]]
        self._queries_seen += len(records)
        bad = [p for r in records for p in r.problems]
        result.bad_answers = len(bad)
        result.notes += [f"FAIL: {p}" for p in bad[:5]]
        answered = sum(1 for r in records if r.status == 200)
        if self.store is not None:
            self._check_store(result)
        result.notes.append(f"queries during the round: {answered}/{len(records)} answered; "
                            f"checks took {time.monotonic() - checks_started:.0f}s")
        result.survived = (recovered and not result.lost and not result.duplicated and not result.regressions
                           and not result.bad_answers and not any(n.startswith("FAIL") for n in result.notes))
        self.log(f"{kind:<16} {result.target:<40} injected={result.injected} "
                 f"survived={result.survived} lost={result.lost} dup={result.duplicated} "
                 f"regressions={result.regressions} bad={result.bad_answers} "
                 f"recovery={result.recovery_seconds and round(result.recovery_seconds, 1)}s "
                 f"(+{time.time() - started:.0f}s)")
        for note in result.notes:
            if note.startswith("FAIL"):
                self.log(f"    {note}")
        return result


def run_suite(*, rounds: int = 5, seed: int = 1, kinds: tuple[str, ...] = DEFAULT_FAULT_KINDS,
              kills_per_round: int = 3, home: Path | None = None, keep_home: bool = False,
              object_store: bool | None = None,
              recovery_timeout: float = 240.0, tmpfs_mb: int = 256, sessions_per_batch: int = 3,
              pause_seconds: float = 1.0, pace: float = 1.0,
              log: Callable[[str], None] = print,
              progress: Callable[[SuiteResult], None] | None = None) -> SuiteResult:
    """Run ``rounds`` rounds of every fault kind in ``kinds``, each on the stack it needs
    (:func:`phases`: each stack with its own broker, started and stopped in turn), in a seeded
    random order per stack, check after each round and at the end of each stack, and return the
    counts. ``object_store``: the local faults' sinks publish to the suite's own S3Proxy too
    (the scaled-out faults' always do)."""
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown:
        raise ValueError(f"unknown fault kind(s) {sorted(unknown)}; use {', '.join(FAULT_KINDS)}")
    started = time.time()
    home = Path(home or tempfile.mkdtemp(prefix="usl-faults-"))
    plan = phases(tuple(kinds), object_store=bool(object_store))
    faults: list[FaultResult] = []
    finals: list[tuple[str, dict[str, Any]]] = []
    meta: dict[str, Any] = {"seed": seed, "rounds": rounds, "kills_per_round": kills_per_round,
                            "sessions_per_batch": sessions_per_batch, "pause_seconds": pause_seconds,
                            "object_store": any(phase.object_store for phase in plan), "phases": []}

    def round_done(phase_faults: list[FaultResult], of: int) -> None:
        if progress is not None:  # a run stopped early still leaves its figures so far
            progress(SuiteResult(faults + phase_faults, {**meta, "seconds": time.time() - started,
                                                         "partial": f"{len(faults) + len(phase_faults)} of {of} "
                                                                    f"rounds"},
                                 {"problems": []}))

    total_rounds = rounds * len(kinds)
    try:
        for phase in plan:
            phase_home = home / phase.name if len(plan) > 1 else home
            phase_faults: list[FaultResult] = []
            phase_meta: dict[str, Any] = {"name": phase.name, "faults": list(phase.kinds),
                                          "object_store": phase.object_store, "sink_shards": phase.sink_shards}
            meta["phases"].append(phase_meta)
            final = _run_stack(
                phase, phase_home, phase_faults, phase_meta, rounds=rounds, seed=seed,
                kills_per_round=kills_per_round, keep_home=keep_home, recovery_timeout=recovery_timeout,
                tmpfs_mb=tmpfs_mb, sessions_per_batch=sessions_per_batch, pause_seconds=pause_seconds,
                pace=pace, log=log, round_done=lambda done: round_done(done, total_rounds))
            faults += phase_faults
            finals.append((phase.name, final))
            meta.setdefault("disk_mode", phase_meta.get("disk_mode"))
    finally:
        if not keep_home and len(plan) > 1:
            shutil.rmtree(home, ignore_errors=True)
    meta["seconds"] = time.time() - started
    return SuiteResult(faults, meta, _merge_finals(finals))


def _merge_finals(finals: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One end-of-run record from each stack's: counts added, problems named by their stack."""
    if len(finals) == 1:
        return finals[0][1]
    merged: dict[str, Any] = {"problems": [], "ingest_errors": []}
    for name, final in finals:
        merged["problems"] += [f"[{name}] {problem}" for problem in final.get("problems") or ()]
        merged["ingest_errors"] += list(final.get("ingest_errors") or ())
        for key in ("lost", "duplicated", "events", "chunks", "queries", "answered", "watermarks"):
            merged[key] = int(merged.get(key, 0)) + int(final.get(key, 0))
    merged["l1_head"] = " + ".join(f"{final.get('l1_head', 0)} ({name})" for name, final in finals)
    return merged


def _run_stack(phase: Phase, home: Path, faults: list[FaultResult], meta: dict[str, Any], *, rounds: int,
               seed: int, kills_per_round: int, keep_home: bool, recovery_timeout: float, tmpfs_mb: int,
               sessions_per_batch: int, pause_seconds: float, pace: float, log: Callable[[str], None],
               round_done: Callable[[list[FaultResult]], None]) -> dict[str, Any]:
    """Start one stack with its own broker, run the phase's rounds (appended to ``faults`` as
    they end), check, stop the stack; the end-of-run record."""
    started = time.time()
    stack = SuiteStack(home, tmpfs_mb=tmpfs_mb, object_store=phase.object_store, sink_shards=phase.sink_shards)
    final: dict[str, Any] = {"problems": []}
    suite: _Suite | None = None
    try:
        log(f"[{phase.name}] starting a broker and the stack under {home}"
            + (f" ({phase.sink_shards} sink shards per shardable kind)" if phase.sink_shards > 1 else ""))
        stack.start_broker()
        if phase.object_store:
            log(f"starting S3Proxy: sinks publish to {stack.start_store().endpoint}")
        settings = stack.configure()
        meta["disk_mode"] = stack.mount_disks()
        stack.start()
        stack.wait_running(timeout=recovery_timeout)
        suite = _Suite(stack, settings, seed=seed, kills_per_round=kills_per_round,
                       recovery_timeout=recovery_timeout, log=log,
                       sessions_per_batch=sessions_per_batch, pause_seconds=pause_seconds,
                       pace=pace)
        meta["sink_processes"] = {kind: [p.name for p in procs] for kind, procs in sorted(suite.layout.items())}
        suite.watch.start()
        suite.ingest.start()
        asked = time.monotonic()
        if not suite.api_answers(recovery_timeout):
            raise RuntimeError(f"the planner API never answered; it last said {suite.api_last}; "
                               f"its log ends:\n{stack.log_text('api')[-3000:]}")
        log(f"the API answered a search {time.monotonic() - asked:.1f}s after the first was sent")
        suite.querier.start()
        schedule = [kind for kind in phase.kinds for _ in range(rounds)]
        suite.rng.shuffle(schedule)
        log(f"stack up after {time.time() - started:.0f}s; {len(schedule)} rounds, disk faults via "
            f"{meta['disk_mode']}")
        for kind in schedule:
            faults.append(suite.round(kind))
            round_done(faults)
        suite.ingest.resume()
        time.sleep(2.0)
        suite.ingest.pause()
        suite.querier.stop()
        suite.querier.join(timeout=120)
        head = suite.head()
        if not suite.caught_up(head, recovery_timeout):
            final["problems"].append(f"indexes did not reach the final head {head}")
        final["lost"], final["duplicated"] = l1_counts(settings, suite.ingest.appended, suite.reused_ids)
        index_lost, index_dups, details = index_counts(settings, suite.shard_names)
        final["lost"] += index_lost
        final["duplicated"] += index_dups
        final["problems"] += details
        final["problems"] += chunk_determinism(settings)
        problems = [p for r in suite.querier.records for p in r.problems]
        final["problems"] += problems[:10]
        final["problems"] += suite.watch.regressions[suite._regressions_seen:]
        if suite.store is not None:
            _took, store_problems = store_checks.wait_published(settings, suite.root, suite.store, ALL_KINDS,
                                                                timeout=recovery_timeout, shards=suite.shards)
            final["problems"] += [f"object store: {p}" for p in store_problems]
            final["problems"] += store_checks.never_live(suite.cut_short, store_checks.commit_history(settings))
        indexed_ids = {c for r in suite.querier.records if r.freshness == "indexed" for c in r.chunk_ids}
        unknown_ids = indexed_ids - set(chunk_set(settings))
        if unknown_ids:
            final["problems"].append(f"{len(unknown_ids)} chunk ids answered that the pipeline never emitted")
        final["events"] = len(suite.ingest.appended)
        final["l1_head"] = head
        final["chunks"] = len(chunk_set(settings))
        final["queries"] = len(suite.querier.records)
        final["answered"] = sum(1 for r in suite.querier.records if r.status == 200)
        final["watermarks"] = suite.watch.records
        final["ingest_errors"] = list(suite.ingest.errors)
    finally:
        if suite is not None:
            suite.querier.stop()
            suite.ingest.stop()
            suite.watch.stop()
        stack.close(keep_home=keep_home)
    meta["seconds"] = time.time() - started
    return final
