"""Test corpus for the planner: real L1 events, real generations, real watermarks.

Events go to the real broker's L1 topic; the derived records come from the same pure replay
the rebuild path runs (:class:`sinks.rebuild.ReplayStream`), and each index kind is written by
its real writer into a committed generation whose watermark is published on the real topic.
Committing one kind before feeding more events makes that index lag, as a slow sink would.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sinks.generations import GenerationStore, Manifest, chunk_seq_bound
from sinks.rebuild import ReplayStream
from sinks.runner import index_root, watermark_of
from sinks.service import make_writer, pipeline_versions
from sinks.watermarks import WatermarkFollower, WatermarkPublisher
from sinks.writer import SOURCE_KINDS
from streams.asp import ASP_VERSION, validate_event
from streams.l1 import L1Producer
from streams.settings import Settings
from streams.topics import ensure_topics

__all__ = ["ALL_KINDS", "IndexBuilder", "acl", "interleaved", "make_test_settings", "serving", "session_events"]

ALL_KINDS = ("structured", "text", "vector", "toolresults")


def acl(tenant: str, *read: str) -> dict[str, Any]:
    return {"tenant": tenant, "read": list(read)}


_counter = itertools.count(1)
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def session_events(
    log_id: str, session_id: str, access: dict[str, Any], *, turns: int, words: str,
    open_last: bool = False,
) -> list[list[dict[str, Any]]]:
    """Events of one session, grouped by turn (first group: session.started).

    Every message carries a token ``w<N>`` unique in the corpus, so a test can look for one
    event and know exactly which it is.
    """
    def event(kind: str, **extra: Any) -> dict[str, Any]:
        number = next(_counter)
        # Times follow creation order (one second apart), whatever the interleaving.
        moment = _EPOCH + timedelta(seconds=number)
        return {"eventId": f"{session_id}-e{number}", "logId": log_id, "sessionId": session_id,
                "type": kind, "time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"), "acl": access,
                **extra}

    groups = [[event("session.started", fields={"title": f"{words} session {session_id}"})]]
    for turn in range(turns):
        turn_id = f"{session_id}-t{turn}"
        group = [
            event("turn.started", turnId=turn_id, role="user"),
            event("message", turnId=turn_id, role="user",
                  fields={"text": f"please {words} step {turn} w{next(_counter)}"}),
            event("tool.call", turnId=turn_id, role="assistant",
                  fields={"toolName": "kubectl", "toolCallId": f"{turn_id}-c",
                          "input": {"args": ["rollout", "status", words.split()[0]]}}),
            event("tool.result", turnId=turn_id, role="tool",
                  fields={"toolName": "kubectl", "toolCallId": f"{turn_id}-c", "status": "ok",
                          "output": f"rollout of {words} finished fulloutput{turn} w{next(_counter)}"}),
            event("message", turnId=turn_id, role="assistant",
                  fields={"text": f"done with {words} step {turn} w{next(_counter)}"}),
        ]
        if not (open_last and turn == turns - 1):
            group.append(event("turn.ended", turnId=turn_id, role="assistant"))
        groups.append(group)
    return groups


@dataclass
class IndexBuilder:
    """Appends events to L1 and writes generations of each kind from the pipeline's records."""

    settings: Settings
    bootstrap: str
    log_id: str
    seqs: dict[str, int] = field(default_factory=dict)
    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        ensure_topics(self.bootstrap, self.settings)
        self.replay = ReplayStream(self.settings, self.log_id)
        self.records: list[dict[str, Any]] = []
        self.written: dict[str, int] = {}
        self.writers: dict[str, Any] = {}
        self.versions = pipeline_versions(self.settings)
        self.producer = L1Producer(self.bootstrap, self.settings)
        self.publisher = WatermarkPublisher(self.bootstrap, self.settings)

    def append(self, events: list[dict[str, Any]], *, feed: bool = True) -> list[int]:
        """Append ``events`` to L1 (one at a time, so seqs follow list order); with ``feed``
        the replay sees them too (the derived records become available to indexes)."""
        seqs = []
        for raw in events:
            event = validate_event(raw)
            self.producer.append(event)
            seq = self.producer.flush()
            seqs.append(seq)
            self.seqs[event["eventId"]] = seq
            self.events.append((seq, event))
            if feed:
                self.feed(seq, event)
        return seqs

    def feed(self, seq: int, event: dict[str, Any]) -> None:
        self.records += [r for r in self.replay.feed(seq, event) if not r.get("provisional")]

    def commit(self, *kinds: str) -> dict[str, Manifest]:
        """Write every record fed so far into a new generation of each kind; publish it."""
        return {kind: self._commit(kind) for kind in (kinds or ALL_KINDS)}

    def _commit(self, kind: str) -> Manifest:
        writer = self.writers.get(kind) or self.writers.setdefault(kind, make_writer(kind, self.settings))
        wanted = {kind for source in writer.sources for kind in SOURCE_KINDS[source]}
        start = self.written.get(kind, 0)
        batch = [r for r in self.records[start:] if r["kind"] in wanted]
        self.written[kind] = len(self.records)
        chunk_based = "chunks" in writer.sources
        through = self.replay.chunks_through() if chunk_based else self.replay.last_seq
        store = GenerationStore(index_root(self.settings), self.log_id, kind)
        previous = store.current()
        staging = store.begin()
        try:
            writer.write(staging, store.generation_dir(previous.generation_id) if previous else None,
                         batch)
            describe = writer.describe()
            manifest = store.commit(staging, Manifest(
                kind=kind, log_id=self.log_id, line=store.line, generation_id=0,
                built_through_seq=max(through, previous.built_through_seq if previous else 0),
                schema_version=str(describe.get("schemaVersion", "1")), asp_version=ASP_VERSION,
                chunker=dict(self.versions["chunker"]), embedding=describe.get("embedding"),
                redaction_policy_hash=str(self.versions["redactionPolicy"]),
                chunk_count=len(batch), extra={**describe, **chunk_seq_bound(previous, batch)},
            ))
        except BaseException:
            store.abort()
            raise
        self.publisher.publish(watermark_of(manifest, store, self.versions))
        return manifest

    def close(self) -> None:
        self.producer.close()
        self.publisher.close()


def make_test_settings(tmp: Path, bootstrap: str, **overrides: Any) -> Settings:
    """Settings with unique topics and home, the hash embedder (fast, deterministic) and a
    fixed cursor key."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    values: dict[str, Any] = {
        "home": tmp / f"home-{prefix.rstrip('.')}", "topic_prefix": prefix,
        "bootstrap_servers": bootstrap, "l1_partitions": 4, "stream_partitions": 2,
        "embedder": "hash:64", "cursor_key": "test-cursor-key-0123456789",
    }
    values.update(overrides)
    return Settings.from_env({}, **values)


def interleaved(log_id: str) -> tuple[list[dict[str, Any]], dict[str, list[list[dict[str, Any]]]]]:
    """The planner tests' corpus in log order, and each session's turn groups.

    Five sessions of tenant ``acme`` and one of ``globex`` with different access lists. The
    last round is interleaved so that ``s-all`` leaves a turn open (holding every index's
    watermark back) while ``s-alice`` finishes a turn that began before it: the indexes hold
    that chunk, and it straddles the cut.
    """
    sessions = {
        "s-alice": session_events(log_id, "s-alice", acl("acme", "user:alice"), turns=3,
                                  words="deploy pipeline"),
        "s-eng": session_events(log_id, "s-eng", acl("acme", "group:eng"), turns=2,
                                words="deploy cache"),
        "s-all": session_events(log_id, "s-all", acl("acme", "*"), turns=3,
                                words="deploy database", open_last=True),
        "s-bob": session_events(log_id, "s-bob", acl("acme", "user:bob"), turns=2,
                                words="deploy billing"),
        "s-other": session_events(log_id, "s-other", acl("globex", "*"), turns=2,
                                  words="deploy secretproject"),
    }
    order: list[dict[str, Any]] = []
    for round_ in range(3):
        for session_id, groups in sessions.items():
            if round_ < len(groups) and not (session_id in ("s-alice", "s-all") and round_ == 2):
                order += groups[round_]
    # Last round: s-alice's turn 2 starts, s-all opens a turn that never ends, s-alice finishes.
    alice_turn, all_turn = sessions["s-alice"][3], sessions["s-all"][2] + sessions["s-all"][3]
    order += alice_turn[:2] + all_turn + alice_turn[2:]
    return order, sessions


@contextmanager
def serving(settings: Settings, bootstrap: str, builder: IndexBuilder) -> Iterator[Any]:
    """A planner following ``builder``'s watermarks as ``usl serve`` does; closes all three."""
    from planner.engine import Planner

    follower = WatermarkFollower(bootstrap, settings).start()
    planner = Planner(settings, bootstrap, follower=follower)
    try:
        yield planner
    finally:
        planner.close()
        follower.stop()
        builder.close()
