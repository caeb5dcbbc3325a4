"""Chunker v1: the per-session state machine that turns redacted events and ticks into chunks.

One ``Chunker`` serves every session; each session has its own plain-JSON state (a faust
table value, or a dict in the batch helper). Output depends only on the session's events, the
log's regular ticks, the config and the tokenizer -- never on wall-clock time, on how sessions
are spread over partitions, or on records delivered twice. ``docs/chunking.md`` states the
rules; in short:

- a unit is a task episode (``episodeId``), else a turn (``turnId``), else the run of
  session-level events between turns;
- a unit closes at its end event, when another unit of the session starts, after an event-time
  gap > G inside it, or at a regular tick whose ``logTime`` is > G past its latest event when
  the session had no event since the previous tick it saw (at a quiet tick, a log's clock record,
  whether or not it had); these
  use each event's *clock time* when the caller gives it (event time bounded by append time,
  :func:`streams.ticks.clock_time`), so a far-future event cannot keep its unit open;
- inside a unit, rendered events are packed into chunks of at most ``target_tokens``, each
  next chunk repeating the trailing whole events of the previous one that fit in
  ``overlap_tokens``; a single event longer than a chunk is split into overlapping parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from streams.asp import ASP_VERSION, DEFAULT_ACL, parse_time
from streams.chunking.records import build_chunk, rfc3339
from streams.chunking.render import param_keys, render_event, tool_name, tool_status
from streams.chunking.split import split_text
from streams.chunking.tokenizer import Tokenizer, count_many
from streams.exceptions import ChunkingError, ConfigError

__all__ = ["STATE_VERSION", "Chunker", "ChunkerConfig"]

STATE_VERSION = 1
"""Layout version of the per-session state; a state of another version is refused."""

MIN_TARGET_TOKENS = 16

_UNIT_END = {"turn.ended": "turn", "episode.ended": "episode"}


@dataclass(frozen=True)
class ChunkerConfig:
    """Boundary rules of chunker v1. ``version`` goes into every chunk and chunk id."""

    target_tokens: int = 768
    overlap_tokens: int = 96
    idle_gap_seconds: float = 300.0
    max_clock_skew_seconds: float = 300.0
    version: str = "1.2"

    def __post_init__(self) -> None:
        if self.target_tokens < MIN_TARGET_TOKENS:
            raise ConfigError(f"target_tokens must be >= {MIN_TARGET_TOKENS}, not {self.target_tokens}")
        if not 0 <= self.overlap_tokens <= self.target_tokens // 2:
            raise ConfigError(
                f"overlap_tokens must be between 0 and target_tokens/2, not {self.overlap_tokens}"
            )
        if not self.idle_gap_seconds > 0:
            raise ConfigError(f"idle_gap_seconds must be > 0, not {self.idle_gap_seconds}")


class Chunker:
    """Incremental chunker; every method takes the session's state and mutates it in place."""

    def __init__(self, config: ChunkerConfig, tokenizer: Tokenizer, *, policy_hash: str) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.policy_hash = policy_hash
        self.versions = {
            "asp": ASP_VERSION,
            "chunker": config.version,
            "tokenizer": tokenizer.identity,
            "redactionPolicy": policy_hash,
        }

    def new_state(self, session_id: str) -> dict[str, Any]:
        """A fresh, JSON-serializable state for ``session_id``."""
        return {
            "v": STATE_VERSION, "sessionId": session_id, "logId": None,
            "lastSeq": 0, "lastTickSeq": 0, "acl": None, "seen": {}, "unit": None,
            "policy": self.policy_hash,
        }

    def _under_this_policy(self, state: dict[str, Any]) -> None:
        """Redact the open unit's texts again when ``state`` was made under another redaction
        policy (or before states named theirs).

        A worker's chunker states outlive an upgrade of the redaction policy (they are restored
        from the changelog), and ``usl rebuild`` rebuilds the indexes from L1 but not them: a turn
        open across the upgrade closed into a chunk that named the new policy and carried texts
        redacted under the old one, so a secret the new policy removes (2.7: a Twilio auth token
        beside its SID) reached the rebuilt text index. Redaction is idempotent and only ever
        removes, so the texts are redacted again, their counts taken anew; such a chunk may differ
        from what a rebuild makes of the turn from L1 (the next rebuild makes it so)."""
        if state.get("policy") == self.policy_hash:
            return
        state["policy"] = self.policy_hash
        unit = state.get("unit")
        if not unit:
            return
        from streams.redaction import redact_text  # only on the first event after an upgrade

        for segment in unit["segments"]:
            text = redact_text(segment["text"])[0]
            if text != segment["text"]:
                size = len(text.encode("utf-8"))
                segment.update(text=text, tokens=self.tokenizer.count(text), bytes=size,
                               part=[segment["part"][0], segment["part"][0] + size])
        unit["tokens"] = sum(segment["tokens"] for segment in unit["segments"])

    def on_event(self, state: dict[str, Any], log_id: str, seq: int, event: dict[str, Any], *,
                 clock_time: float | None = None) -> list[dict[str, Any]]:
        """Apply one redacted event; return the chunks it closes (possibly none).

        ``clock_time`` is the event's time as the log clock counts it (bounded by its append
        time); idle cuts use it instead of the event's own time. Chunk times stay the event's."""
        text = render_event(event)
        tokens = self.tokenizer.count(text) if text is not None else 0
        return self.apply_event(state, log_id, seq, event, text, tokens, clock_time=clock_time)

    @overload
    def render_many(self, events: Sequence[dict[str, Any]], *, capture_errors: Literal[False] = False,
                    ) -> list[tuple[str | None, int]]: ...

    @overload
    def render_many(self, events: Sequence[dict[str, Any]], *, capture_errors: Literal[True],
                    ) -> list[tuple[str | None, int] | Exception]: ...

    def render_many(self, events: Sequence[dict[str, Any]], *, capture_errors: bool = False,
                    ) -> list[tuple[str | None, int]] | list[tuple[str | None, int] | Exception]:
        """Each event's rendered text and token count, as ``on_event`` computes them, for
        ``apply_event``: the batch's texts are counted in one tokenizer call, which spreads them
        over the cores and keeps the encodings of texts longer than a chunk for their split.
        With ``capture_errors``, an event whose rendering fails gives its exception in place
        (reported at its turn); otherwise the exception is raised."""
        rendered: list[tuple[str | None, int] | Exception] = []
        for event in events:
            try:
                rendered.append((render_event(event), 0))
            except Exception as exc:
                if not capture_errors:
                    raise
                rendered.append(exc)
        texts = [(index, item[0]) for index, item in enumerate(rendered)
                 if not isinstance(item, Exception) and item[0] is not None]
        counts = count_many(self.tokenizer, [text for _, text in texts], keep_over=self.config.target_tokens)
        for (index, text), tokens in zip(texts, counts, strict=True):
            rendered[index] = (text, tokens)
        return rendered

    def apply_event(
        self, state: dict[str, Any], log_id: str, seq: int, event: dict[str, Any],
        text: str | None, tokens: int, *, clock_time: float | None = None,
    ) -> list[dict[str, Any]]:
        """``on_event`` with the rendering and its token count already computed (batch path)."""
        self._check(state, event)
        self._under_this_policy(state)
        # A record at or below what this state already applied is a redelivery: skip it.
        if seq <= max(state["lastSeq"], state["lastTickSeq"]):
            return []
        state["lastSeq"] = seq
        state["logId"] = state["logId"] or log_id
        if isinstance(event.get("acl"), dict):
            state["acl"] = _copy_acl(event["acl"])

        kind, key = _unit_of(event)
        out: list[dict[str, Any]] = []
        if key is None:
            if event.get("type") == "session.ended":
                return self._close_unit(state, provisional=False)
            if text is None:
                return []  # session-level, renders nothing: belongs to no unit (session.acl, run.*)
            kind, key = "session", "session"
        try:
            moment = parse_time(event["time"])
        except (KeyError, ValueError) as exc:
            raise ChunkingError(f"event {event['eventId']!r} has no valid time: {exc}") from None
        when = moment.timestamp() if clock_time is None else min(moment.timestamp(), clock_time)
        unit = state["unit"]
        if unit is not None and (unit["key"] != key or when - unit["lastTime"] > self.config.idle_gap_seconds):
            out += self._close_unit(state, provisional=False)
            unit = None
        if unit is None:
            unit = state["unit"] = {
                "key": key, "kind": kind, "lastTime": when, "pendingMinSeq": None,
                "segments": [], "fresh": 0, "tokens": 0,
            }
        unit["lastTime"] = max(unit["lastTime"], when)
        if unit["pendingMinSeq"] is None:
            unit["pendingMinSeq"] = seq
        if text is not None:
            for segment in self._segments(event, seq, text, tokens, moment.timestamp(), rfc3339(moment)):
                out += self._append(state, segment)
        event_type = event.get("type")
        if _UNIT_END.get(event_type or "") == kind or event_type == "session.ended":
            out += self._close_unit(state, provisional=False)
        return out

    def on_tick(self, state: dict[str, Any], tick: dict[str, Any]) -> list[dict[str, Any]]:
        """Apply a log-clock tick: a regular tick cuts a unit idle for more than G of log time."""
        if tick.get("flush"):
            return []  # flush ticks depend on timing, so they never move a boundary
        self._under_this_policy(state)
        if state["logId"] is not None and tick["logId"] != state["logId"]:
            return []
        seq = tick["seq"]
        if seq <= state["lastTickSeq"] or seq < state["lastSeq"]:
            return []  # a redelivered or stale tick
        previous, state["lastTickSeq"] = state["lastTickSeq"], seq
        unit = state["unit"]
        # Idle by the log's clock and by the log's positions: no event of the session since the
        # previous tick it saw. The log clock is the newest event time of any session, so a
        # session imported after newer ones (a backfill, a directory not in date order) looks
        # idle at every tick while its own events are still arriving; it was cut at each one.
        # A quiet tick (a clock record, streams.ticks) comes only after the log had no record for
        # a while: nothing is arriving, so the clock alone decides.
        if (unit is not None and (state["lastSeq"] <= previous or tick.get("quiet"))
                and tick["logTime"] - unit["lastTime"] > self.config.idle_gap_seconds):
            return self._close_unit(state, provisional=False)
        return []

    def close(self, state: dict[str, Any], *, provisional: bool = False) -> list[dict[str, Any]]:
        """Close the open unit now and return its chunks; ``provisional`` marks them as such."""
        self._under_this_policy(state)
        return self._close_unit(state, provisional=provisional)

    def open_min_seq(self, state: dict[str, Any]) -> int | None:
        """Smallest seq absorbed into the open unit and not yet inside an emitted chunk.

        Counts events that render nothing too. ``None`` when no unit is open. A progress marker
        may claim every seq below the minimum of this over the partition's sessions.
        """
        unit = state["unit"]
        if unit is None:
            return None
        pending: int | None = unit["pendingMinSeq"]
        return pending

    # -- internals ---------------------------------------------------------------------------

    def _check(self, state: dict[str, Any], event: dict[str, Any]) -> None:
        if state.get("v") != STATE_VERSION:
            raise ChunkingError(f"chunker state version {state.get('v')!r} is not {STATE_VERSION}")
        if state.get("seen"):
            # States before 2026-12 kept a hash of every eventId of the session, rewritten to the
            # changelog whole with every batch: a 40 000-event session passed the broker's 1 MiB
            # message limit and stopped the worker. The ids are deduplicated before the chunker
            # (first seq wins, streams.ownership), so the map is emptied; the key stays, for a
            # worker of an earlier version that reads this state.
            state["seen"] = {}
        if not isinstance(event.get("eventId"), str):
            raise ChunkingError(f"event without an eventId in session {state['sessionId']!r}")
        if event.get("sessionId") != state["sessionId"]:
            raise ChunkingError(
                f"event {event.get('eventId')!r} of session {event.get('sessionId')!r} "
                f"was given to the state of session {state['sessionId']!r}"
            )

    def _segments(
        self, event: dict[str, Any], seq: int, text: str, tokens: int, when: float, iso: str,
    ) -> list[dict[str, Any]]:
        base = {
            "eventId": event["eventId"], "seq": seq, "time": when, "iso": iso,
            "role": event.get("role"), "type": event.get("type"), "tool": tool_name(event),
            "status": tool_status(event) if event.get("type") == "tool.result" else None,
            "keys": param_keys(event) if event.get("type") == "tool.call" else [],
            "runId": event.get("runId"), "turnId": event.get("turnId"),
            "episodeId": event.get("episodeId"),
        }
        data = text.encode("utf-8")
        if tokens <= self.config.target_tokens:
            return [{**base, "text": text, "tokens": tokens, "bytes": len(data), "part": [0, len(data)]}]
        segments = []
        parts = split_text(
            text, self.tokenizer, target=self.config.target_tokens, overlap=self.config.overlap_tokens
        )
        for part in parts:
            piece = text[part.char_start:part.char_end]
            start = len(text[:part.char_start].encode("utf-8"))
            size = len(piece.encode("utf-8"))
            segments.append({
                **base, "text": piece, "tokens": part.tokens, "bytes": size,
                "part": [start, start + size],
            })
        return segments

    def _append(self, state: dict[str, Any], segment: dict[str, Any]) -> list[dict[str, Any]]:
        """Add a segment to the open unit's chunk buffer; emit the buffer first if it is full."""
        unit = state["unit"]
        out: list[dict[str, Any]] = []
        segments = unit["segments"]
        if unit["tokens"] + segment["tokens"] > self.config.target_tokens:
            if unit["fresh"] < len(segments):
                out.append(self._emit(state, unit, segments, provisional=False))
                carried = _overlap_tail(segments, self.config.overlap_tokens)
                segments = unit["segments"] = carried
                unit["tokens"] = sum(item["tokens"] for item in carried)
                unit["pendingMinSeq"] = None
            # Overlap never pushes a chunk over its budget: drop the oldest carried segments.
            while segments and unit["tokens"] + segment["tokens"] > self.config.target_tokens:
                unit["tokens"] -= segments.pop(0)["tokens"]
            unit["fresh"] = len(segments)
        segments.append(segment)
        unit["tokens"] += segment["tokens"]
        if unit["pendingMinSeq"] is None:
            unit["pendingMinSeq"] = segment["seq"]
        return out

    def _close_unit(self, state: dict[str, Any], *, provisional: bool) -> list[dict[str, Any]]:
        unit = state["unit"]
        if unit is None:
            return []
        state["unit"] = None
        if unit["fresh"] < len(unit["segments"]):
            return [self._emit(state, unit, unit["segments"], provisional=provisional)]
        return []

    def _emit(
        self, state: dict[str, Any], unit: dict[str, Any], segments: list[dict[str, Any]], *,
        provisional: bool,
    ) -> dict[str, Any]:
        return build_chunk(
            segments, log_id=state["logId"], session_id=state["sessionId"],
            unit_kind=unit["kind"], unit_key=unit["key"], acl=_copy_acl(state["acl"] or DEFAULT_ACL),
            versions=self.versions, provisional=provisional,
        )


def _unit_of(event: dict[str, Any]) -> tuple[str, str | None]:
    """(unit kind, unit key) of an event; key None for session-level events."""
    if event.get("episodeId"):
        return "episode", f"episode:{event['episodeId']}"
    if event.get("turnId"):
        return "turn", f"turn:{event['turnId']}"
    return "session", None


def _overlap_tail(segments: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The trailing whole segments whose tokens total at most ``budget``."""
    total, start = 0, len(segments)
    while start > 0 and total + segments[start - 1]["tokens"] <= budget:
        start -= 1
        total += segments[start]["tokens"]
    return [dict(segment) for segment in segments[start:]]


def _copy_acl(acl: dict[str, Any]) -> dict[str, Any]:
    # A chunk (or the state) must never share a list with the caller's event.
    return {key: list(value) if isinstance(value, list) else value for key, value in acl.items()}
