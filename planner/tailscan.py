"""The L1 tail scan: events no index covers yet, turned into provisional chunks in-process.

For ``latest`` and ``wait`` the planner reads the log range ``(cut, asOfSeq]`` above the
indexes and runs it through the code the stream runs: ASP validation, the redaction policy
(:func:`streams.redaction.redact_event`), log-clock ticks every K seqs (as
:func:`streams.chunking.make_ticks` places them) and the chunker's per-session state machine
(:class:`streams.chunking.Chunker`, the same calls :func:`streams.chunking.chunk_stream` makes),
then closes every open unit as a provisional chunk. As in the redaction agent, every event
passes :mod:`streams.ownership` first: an event without ``acl`` inherits its session's, and
another tenant's event for a session (or a reused eventId of another tenant) is left out as
the stream dead-letters it. The owners of sessions created below the range come from
``session_acls`` (the planner's latest access lists). The first seq of an ``eventId`` wins:
later copies inside the range are dropped, and so are events whose id the indexes already
hold below the cut (``known_event_ids``). Clock time is the event time bounded by the
record's append time (:func:`streams.ticks.clock_time`), as in the stream.

The scan is incremental. A :class:`TailSnapshot` is the chunker's state after the events
``from_seq..through``; :meth:`TailScan.extend` feeds it more events and returns a new snapshot
(the old one is never changed, so concurrent queries can share it), and
:meth:`TailScan.result` closes the open units of a copy. A query at a log head a little further
than the previous query's therefore only processes the new events. Feeding the range in one
piece or in several gives the same chunks (``tests/planner/test_engine.py`` checks it against
``chunk_stream``).

Also collected: each session's latest access list seen in the range, so a ``session.acl``
event in the tail applies to the query at once.

Each event is redacted with its session's memory of the secrets it removed before
(:mod:`streams.redaction.memory`), as the stage redacts it: the prints the structured index holds
at or below the cut (``session_secrets``), then those the scan itself finds.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.asp import validate_event
from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
from streams.exceptions import USLError
from streams.ownership import Owners, session_of_acl
from streams.redaction import policy_hash, redact_event
from streams.settings import Settings
from streams.stages.records import keep_remembered, memory_key, recall_of, toolresult_record
from streams.ticks import clock_record_time, clock_time, event_clock_time

__all__ = ["SnapshotCache", "TailResult", "TailScan", "TailSnapshot", "chunker_for"]

KnownIds = Callable[[Collection[str]], set[str]]
SessionSecrets = Callable[[Collection[str]], Mapping[str, list[list[Any]]]]


@dataclass(frozen=True)
class TailSnapshot:
    """The tail scan after the events ``from_seq..through`` (never mutated once built)."""

    from_seq: int
    through: int
    states: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    closed: tuple[dict[str, Any], ...] = ()
    tool_results: tuple[dict[str, Any], ...] = ()
    acls: Mapping[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    owners: Owners = field(default_factory=Owners)
    # memory key -> the session's memory of removed secrets (an empty list: looked up, none)
    secrets: Mapping[str, list[list[Any]]] = field(default_factory=dict)
    previous_seq: int = 0
    log_time: float | None = None
    events_read: int = 0
    skipped_invalid: int = 0
    skipped_duplicates: int = 0

    @classmethod
    def start(cls, from_seq: int) -> TailSnapshot:
        return cls(from_seq=from_seq, through=from_seq - 1)


@dataclass
class TailResult:
    """What a tail scan produced over ``from_seq..scanned_through``."""

    from_seq: int
    scanned_through: int
    events_read: int = 0
    chunks: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    # sessionId -> (seq, acl) of the session's last accepted event in the range
    acls: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    skipped_invalid: int = 0
    skipped_duplicates: int = 0


def chunker_for(settings: Settings) -> Chunker:
    """The chunker the stream runs under ``settings`` (same config, tokenizer and policy)."""
    config = ChunkerConfig(target_tokens=settings.chunk_tokens,
                           overlap_tokens=settings.chunk_overlap_tokens,
                           idle_gap_seconds=settings.idle_gap_seconds,
                           max_clock_skew_seconds=settings.max_clock_skew_seconds)
    return Chunker(config, default_tokenizer(), policy_hash=policy_hash())


class _Feed:
    """The mutable working copy of a snapshot while new events are fed (copy-on-write)."""

    def __init__(self, base: TailSnapshot) -> None:
        self.states = dict(base.states)
        self.copied: set[str] = set()
        self.closed = list(base.closed)
        self.tool_results = list(base.tool_results)
        self.acls = dict(base.acls)
        self.owners = base.owners.copy()
        self.secrets = dict(base.secrets)  # entries are replaced, never changed in place
        self.clock_times: dict[int, float] = {}  # seq -> bounded event time of accepted events
        self.previous_seq = base.previous_seq
        self.log_time = base.log_time
        self.events_read = base.events_read
        self.skipped_invalid = base.skipped_invalid
        self.skipped_duplicates = base.skipped_duplicates

    def state(self, chunker: Chunker, session_id: str) -> dict[str, Any]:
        if session_id not in self.copied:
            existing = self.states.get(session_id)
            self.states[session_id] = (copy.deepcopy(existing) if existing is not None
                                       else chunker.new_state(session_id))
            self.copied.add(session_id)
        return self.states[session_id]


class TailScan:
    """Turns L1 events into provisional chunks and tool-result records, as the stream would."""

    def __init__(self, chunker: Chunker, *, tick_every_seqs: int) -> None:
        self.chunker = chunker
        self.tick_every_seqs = tick_every_seqs
        self.policy = chunker.policy_hash

    def run(
        self,
        events: Iterable[tuple[int, dict[str, Any]]],
        *,
        from_seq: int,
        to_seq: int,
        known_event_ids: KnownIds | None = None,
        want_tool_results: bool = False,
        session_acls: Mapping[str, Mapping[str, Any]] | None = None,
        session_secrets: SessionSecrets | None = None,
    ) -> TailResult:
        """Scan ``from_seq..to_seq`` in one go (the events of that range, log order)."""
        snapshot = self.extend(TailSnapshot.start(from_seq), events, to_seq=to_seq,
                               known_event_ids=known_event_ids,
                               want_tool_results=want_tool_results, session_acls=session_acls,
                               session_secrets=session_secrets)
        return self.result(snapshot)

    def extend(
        self,
        base: TailSnapshot,
        events: Iterable[tuple[int, dict[str, Any]]],
        *,
        to_seq: int,
        known_event_ids: KnownIds | None = None,
        want_tool_results: bool = False,
        session_acls: Mapping[str, Mapping[str, Any]] | None = None,
        session_secrets: SessionSecrets | None = None,
    ) -> TailSnapshot:
        """``base`` fed with the events of ``(base.through, to_seq]`` (log order).

        ``session_acls`` (sessionId → current access list) names the owner of each session
        created below the range; without it, only sessions created inside the range are known.
        ``session_secrets`` (memory keys → each session's memory below the range,
        :meth:`planner.readers.ReaderCache.session_secrets`); without it, a session remembers only
        what it removed inside the range.
        """
        feed = _Feed(base)
        if session_acls is not None:
            feed.owners.known = _known_sessions(session_acls)
        accepted: list[tuple[int, dict[str, Any]]] = []
        ticks: dict[int, dict[str, Any]] = {}  # seq of the event a tick follows -> tick
        for seq, raw in events:
            if seq <= base.through or seq > to_seq:
                continue
            stamp = clock_record_time(raw)
            if stamp is not None:  # a clock record: a quiet tick, no event (streams.ticks)
                ticks[seq] = self._clock_record(feed, raw["logId"], seq, stamp, getattr(raw, "append_time", None))
                continue
            feed.events_read += 1
            try:
                event = validate_event(raw)
            except USLError:
                feed.skipped_invalid += 1  # the stream dead-letters it: it is in no index
                continue
            tick = self._advance_clock(feed, event, seq, getattr(raw, "append_time", None))
            if tick is not None:
                ticks[seq] = tick
            admission = feed.owners.admit(event, seq)
            if admission.verdict == "duplicate":
                feed.skipped_duplicates += 1
                continue
            if admission.event is None:
                feed.skipped_invalid += 1  # another tenant's: the stream dead-letters it
                continue
            accepted.append((seq, admission.event))
        if known_event_ids is not None and accepted:
            known = known_event_ids([event["eventId"] for _, event in accepted])
            if known:
                feed.skipped_duplicates += sum(1 for _, e in accepted if e["eventId"] in known)
                accepted = [(seq, e) for seq, e in accepted if e["eventId"] not in known]
        if session_secrets is not None and accepted:
            unknown = {memory_key(event["logId"], event) for _, event in accepted} - feed.secrets.keys()
            if unknown:
                found = session_secrets(unknown)
                feed.secrets.update({key: list(found.get(key, ())) for key in unknown})
        redacted: list[tuple[int, dict[str, Any]]] = []
        for seq, event in accepted:
            outcome = self._redact(feed, seq, event, want_tool_results)
            if outcome is not None:
                redacted.append((seq, outcome))
        # Rendering and counting an event depend on the event alone, so the whole range is
        # counted in one tokenizer call (a call per tick interval cost ~17 calls per 1 000
        # events); the chunker then applies events and ticks in log order, as chunk_stream does.
        rendered = self.chunker.render_many([event for _, event in redacted])
        pending_ticks = sorted(ticks)
        for (seq, event), (text, tokens) in zip(redacted, rendered, strict=True):
            while pending_ticks and pending_ticks[0] < seq:
                self._tick(feed, ticks[pending_ticks.pop(0)])
            self._apply(feed, seq, event, text, tokens)
            if pending_ticks and pending_ticks[0] == seq:
                self._tick(feed, ticks[pending_ticks.pop(0)])
        for seq in pending_ticks:  # ticks after events that were dropped
            self._tick(feed, ticks[seq])
        return TailSnapshot(
            from_seq=base.from_seq, through=max(to_seq, base.through), states=feed.states,
            closed=tuple(feed.closed), tool_results=tuple(feed.tool_results), acls=feed.acls,
            owners=feed.owners, secrets=feed.secrets, previous_seq=feed.previous_seq, log_time=feed.log_time,
            events_read=feed.events_read, skipped_invalid=feed.skipped_invalid,
            skipped_duplicates=feed.skipped_duplicates,
        )

    def result(self, snapshot: TailSnapshot) -> TailResult:
        """The chunks of ``snapshot`` with every open unit closed as a provisional chunk."""
        provisional: list[dict[str, Any]] = []
        for session_id in sorted(snapshot.states):
            state = snapshot.states[session_id]
            if state["unit"] is not None:
                provisional += self.chunker.close(copy.deepcopy(state), provisional=True)
        return TailResult(
            from_seq=snapshot.from_seq, scanned_through=snapshot.through,
            events_read=snapshot.events_read, chunks=[*snapshot.closed, *provisional],
            tool_results=list(snapshot.tool_results), acls=dict(snapshot.acls),
            skipped_invalid=snapshot.skipped_invalid,
            skipped_duplicates=snapshot.skipped_duplicates,
        )

    # -- the stream's steps -------------------------------------------------------------------

    def _advance_clock(self, feed: _Feed, event: dict[str, Any], seq: int,
                       append_time: float | None) -> dict[str, Any] | None:
        """The regular tick after ``seq``, placed exactly as the redaction agent places it."""
        when = event_clock_time(event, append_time, self.chunker.config.max_clock_skew_seconds, feed.log_time)
        if when is not None:
            feed.clock_times[seq] = when
        if when is not None and (feed.log_time is None or when > feed.log_time):
            feed.log_time = when
        tick = None
        if seq // self.tick_every_seqs > feed.previous_seq // self.tick_every_seqs:
            tick = {"kind": "tick", "logId": event["logId"], "seq": seq, "logTime": feed.log_time,
                    "flush": False}
        feed.previous_seq = seq
        return tick

    def _clock_record(self, feed: _Feed, log_id: str, seq: int, stamp: float,
                      append_time: float | None) -> dict[str, Any]:
        """The quiet tick of the clock record at ``seq``, as the redaction agent makes it."""
        when = clock_time(stamp, append_time, self.chunker.config.max_clock_skew_seconds, feed.log_time)
        if feed.log_time is None or when > feed.log_time:
            feed.log_time = when
        feed.previous_seq = seq
        return {"kind": "tick", "logId": log_id, "seq": seq, "logTime": feed.log_time, "flush": False, "quiet": True}

    def _redact(self, feed: _Feed, seq: int, event: dict[str, Any],
                want_tool_results: bool) -> dict[str, Any] | None:
        recall = recall_of(event["logId"], event, seq, feed.secrets)
        try:
            outcome = redact_event(event, recall=recall)
        except USLError:
            feed.skipped_invalid += 1
            return None
        keep_remembered(feed.secrets, recall, seq)
        if isinstance(outcome.event.get("acl"), dict):
            feed.acls[event["sessionId"]] = (seq, outcome.event["acl"])
        if want_tool_results and outcome.tool_result is not None:
            feed.tool_results.append(toolresult_record(event["logId"], seq, event, outcome.tool_result,
                                                       policy=self.policy))
        return outcome.event

    def _apply(self, feed: _Feed, seq: int, event: dict[str, Any], text: str | None,
               tokens: int) -> None:
        """Apply one rendered and counted event to its session's state."""
        state = feed.state(self.chunker, event["sessionId"])
        feed.closed += self.chunker.apply_event(state, event["logId"], seq, event, text, tokens,
                                                clock_time=feed.clock_times.get(seq))

    def _tick(self, feed: _Feed, tick: dict[str, Any]) -> None:
        # Only a session with an open unit can be cut, in session order (as chunk_stream).
        for session_id in sorted(s for s, state in feed.states.items() if state["unit"] is not None):
            feed.closed += self.chunker.on_tick(feed.state(self.chunker, session_id), tick)


def _known_sessions(session_acls: Mapping[str, Mapping[str, Any]]) -> Callable[[str], dict[str, Any] | None]:
    def known(session_id: str) -> dict[str, Any] | None:
        acl = session_acls.get(session_id)
        return session_of_acl(acl) if isinstance(acl, Mapping) and acl.get("tenant") else None

    return known


class SnapshotCache:
    """The newest few snapshots of each recent scan (thread-safe), to continue from."""

    def __init__(self, *, scans: int = 16, per_scan: int = 4) -> None:
        self._scans = scans
        self._per_scan = per_scan
        self._items: dict[Hashable, list[TailSnapshot]] = {}
        self._lock = threading.Lock()

    def best(self, key: Hashable, to_seq: int) -> TailSnapshot | None:
        """The snapshot of ``key`` that went furthest without passing ``to_seq``."""
        with self._lock:
            fitting = [s for s in self._items.get(key, ()) if s.through <= to_seq]
            return max(fitting, key=lambda s: s.through, default=None)

    def put(self, key: Hashable, snapshot: TailSnapshot) -> None:
        with self._lock:
            kept = [s for s in self._items.pop(key, []) if s.through != snapshot.through]
            self._items[key] = sorted([*kept, snapshot], key=lambda s: s.through)[-self._per_scan:]
            while len(self._items) > self._scans:
                self._items.pop(next(iter(self._items)))
