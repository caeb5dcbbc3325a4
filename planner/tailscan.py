"""The L1 tail scan: events no index covers yet, turned into provisional chunks in-process.

For ``latest`` and ``wait`` the planner reads the log range ``(cut, asOfSeq]`` above the
indexes and runs it through exactly the code the stream runs: ASP validation, the redaction
policy (:func:`streams.redaction.redact_event`), log-clock ticks every K seqs
(:func:`streams.chunking.make_ticks`) and the chunker (:func:`streams.chunking.chunk_stream`
with ``finalize=True``, so open turns close as provisional chunks). As in the redaction agent,
an ``eventId`` seen before wins over a later copy: copies inside the range are dropped, and so
are events whose id the indexes already hold below the cut (``known_event_ids``).

:class:`TailScan` is pure (no Kafka): the planner feeds it the ``(seq, event)`` pairs it read.
It also yields each session's latest access list seen in the range, so a ``session.acl`` event
in the tail applies to the query at once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from streams.asp import validate_event
from streams.chunking import Chunker, ChunkerConfig, chunk_stream, default_tokenizer, make_ticks
from streams.exceptions import USLError
from streams.redaction import policy_hash, redact_event
from streams.settings import Settings

__all__ = ["TailResult", "TailScan", "chunker_for"]

KnownIds = Callable[[Collection[str]], set[str]]


@dataclass
class TailResult:
    """What a tail scan produced over ``(from_seq, scanned_through]``."""

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
                           idle_gap_seconds=settings.idle_gap_seconds)
    return Chunker(config, default_tokenizer(), policy_hash=policy_hash())


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
    ) -> TailResult:
        """Process the events with ``from_seq <= seq <= to_seq`` (log order)."""
        result = TailResult(from_seq=from_seq, scanned_through=from_seq - 1)
        accepted: list[tuple[int, dict[str, Any]]] = []
        seen: set[str] = set()
        for seq, raw in events:
            if seq < from_seq or seq > to_seq:
                continue
            result.events_read += 1
            result.scanned_through = max(result.scanned_through, seq)
            try:
                event = validate_event(raw)
            except USLError:
                result.skipped_invalid += 1  # the stream dead-letters it: it is in no index
                continue
            if event["eventId"] in seen:
                result.skipped_duplicates += 1
                continue
            seen.add(event["eventId"])
            accepted.append((seq, event))
        if known_event_ids is not None and accepted:
            known = known_event_ids([event["eventId"] for _, event in accepted])
            if known:
                result.skipped_duplicates += sum(1 for _, e in accepted if e["eventId"] in known)
                accepted = [(seq, e) for seq, e in accepted if e["eventId"] not in known]
        redacted: list[tuple[int, dict[str, Any]]] = []
        for seq, event in accepted:
            try:
                outcome = redact_event(event)
            except USLError:
                result.skipped_invalid += 1
                continue
            redacted.append((seq, outcome.event))
            if isinstance(outcome.event.get("acl"), dict):
                result.acls[event["sessionId"]] = (seq, outcome.event["acl"])
            if want_tool_results and outcome.tool_result is not None:
                result.tool_results.append({
                    "kind": "toolresult", "logId": event["logId"], "seq": seq,
                    "eventId": event["eventId"], "sessionId": event["sessionId"],
                    "runId": event.get("runId"), "turnId": event.get("turnId"),
                    "time": event["time"], "acl": event.get("acl"), "policy": self.policy,
                    **outcome.tool_result,
                })
        records = make_ticks(redacted, self.tick_every_seqs, policy=self.policy)
        result.chunks = chunk_stream(records, self.chunker, finalize=True)
        return result
