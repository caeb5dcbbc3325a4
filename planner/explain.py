"""The response: result rows in the SPEC §12 shape, and the explain section.

Everything here is built from what the caller may read. Candidates of sessions the principal
cannot read are removed before ranking (so ranks carry no gaps), and explain reports windows,
returned counts, truncation, trimming and tail-scan candidates of readable data only, never a
hidden id or a count that includes hidden chunks, and no timings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from planner.readers import IndexPin
from planner.rrf import DEFAULT_K, FusedHit, RankedList, encode_sort_key, sort_key, truncation
from planner.snapshot import SnapshotDecision
from sinks.writer import SOURCE_KINDS
from streams.asp import posix_seconds

__all__ = ["TOOL_KINDS", "Candidate", "build_explain", "generation_json", "result_row", "rfc3339", "tool_candidate"]


@dataclass
class Candidate:
    """One rankable item: an indexed chunk, a trimmed straddling chunk, a tail-scan chunk or a
    full tool result. ``origin`` is ``index``, ``trimmed`` or ``tail``."""

    id: str
    kind: str
    origin: str
    session_id: str
    event_time: float
    record: dict[str, Any]
    text: str | None = None
    scores: dict[str, float] = field(default_factory=dict)


def rfc3339(posix: float) -> str:
    """RFC 3339 UTC with ``Z`` (microseconds only when there are some)."""
    moment = datetime.fromtimestamp(posix, UTC)
    fraction = f".{moment.microsecond:06d}" if moment.microsecond else ""
    # isoformat, not strftime: glibc's %Y writes years before 1000 without their zeros.
    return moment.replace(tzinfo=None, microsecond=0).isoformat() + fraction + "Z"


def result_row(hit: FusedHit, candidate: Candidate, as_of_seq: int) -> dict[str, Any]:
    """A result in the SPEC §12 shape (plus ``kind``, ``origin`` and raw source scores)."""
    record = candidate.record
    evidence = [
        {"eventId": piece["eventId"], "seq": int(piece["seq"]), "start": int(piece["start"]),
         "end": int(piece["end"])}
        for piece in record.get("evidence") or ()
    ]
    if any(piece["seq"] > as_of_seq for piece in evidence):  # pragma: no cover - guarded upstream
        raise AssertionError("a result carried evidence past asOfSeq")
    components = _components(hit, candidate)
    row: dict[str, Any] = {
        "chunkId": candidate.id,
        "sessionId": candidate.session_id,
        "runId": record.get("runId"),
        "turnId": record.get("turnId"),
        "episodeId": record.get("episodeId"),
        "text": candidate.text or "",
        "evidence": evidence,
        "score": {"rrf": hit.rrf, "components": components},
        "eventTime": rfc3339(candidate.event_time),
        "kind": candidate.kind,
        "origin": candidate.origin,
    }
    if candidate.kind in TOOL_KINDS:
        row["toolName"] = record.get("toolName")
        row["status"] = record.get("status")
    return row


def build_explain(
    *,
    request: Mapping[str, Any],
    decision: SnapshotDecision,
    cut: int,
    generations: Mapping[str, Mapping[str, Any]],
    lists: Sequence[RankedList],
    page: Sequence[FusedHit],
    candidates: Mapping[str, Candidate],
    notes: Mapping[str, Any],
) -> dict[str, Any]:
    """The ``explain`` section: how this page was decided, in terms of readable data only."""
    hits = []
    for hit in page:
        candidate = candidates[hit.chunk_id]
        hits.append({
            "chunkId": hit.chunk_id,
            "origin": candidate.origin,
            "rrf": hit.rrf,
            "rrfExact": f"{hit.rrf_exact.numerator}/{hit.rrf_exact.denominator}",
            "bestRank": hit.best_rank,
            "components": _components(hit, candidate),
            "sortKey": encode_sort_key(sort_key(hit)),
        })
    return {
        "request": dict(request),
        "freshness": {
            "mode": decision.freshness.mode,
            "label": decision.label,
            "asOfSeq": decision.as_of_seq,
            "l1CommittedSeq": decision.l1_seq,
            "indexThroughSeq": decision.index_through,
            "indexCutSeq": cut,
            "timedOut": decision.timed_out,
            "reasons": list(decision.reasons),
            "uncovered": [span.to_json() for span in decision.uncovered],
        },
        "generations": {kind: dict(value) for kind, value in sorted(generations.items())},
        "required": list(decision.required),
        "missing": list(decision.missing),
        "fallbacks": list(decision.fallbacks),
        "sources": truncation(lists),
        "ranking": {
            "method": "reciprocal rank fusion",
            "k": DEFAULT_K,
            "formula": "rrfScore(d) = sum over sources of 1 / (60 + rank_source(d))",
            "order": ["rrfScore desc", "best source rank asc", "event time desc", "chunkId asc"],
        },
        "hits": hits,
        **notes,
    }


def generation_json(pin: IndexPin) -> dict[str, Any]:
    """What explain says of one pinned generation: its id, coverage, line and creation time,
    and the engine and embedding model that built it when the manifest names them."""
    body: dict[str, Any] = {"generationId": pin.generation_id,
                            "builtThroughSeq": pin.built_through_seq, "line": pin.line,
                            "createdAt": pin.manifest.created_at}
    if pin.manifest.extra.get("engine"):
        body["engine"] = pin.manifest.extra["engine"]
    if pin.manifest.embedding:
        body["embedding"] = pin.manifest.embedding
    if pin.parts:  # a sharded kind: the fields above are its slowest shard's
        body["shards"] = {part.shard: {"generationId": part.generation_id,
                                       "builtThroughSeq": part.built_through_seq, "line": part.line}
                          for part in pin.parts}
    return body


TOOL_KINDS = frozenset(SOURCE_KINDS["toolresults"])
"""Candidates of the tool-results index: a tool's output (``toolresult``), or the whole input of
a call (``toolcall``)."""


def tool_candidate(record: Mapping[str, Any], *, origin: str) -> Candidate:
    """A full tool result or call input (from the index or the tail scan) as a rankable
    candidate; an index of schema 2 holds outputs only, and names no kind."""
    kind = "toolcall" if record.get("kind") == "toolcall" else "toolresult"
    seq = int(record["seq"])
    text = str(record.get("text") or "")
    row = {
        "runId": record.get("runId"), "turnId": record.get("turnId"), "episodeId": None,
        "toolName": record.get("toolName"), "status": record.get("status"),
        "evidence": [{"eventId": record.get("eventId"), "seq": seq, "start": 0,
                      "end": len(text.encode("utf-8"))}],
    }
    return Candidate(f"{kind}:{record.get('logId')}:{seq}", kind, origin,
                     str(record.get("sessionId")), posix_seconds(record.get("time")), row, text=text)


def _components(hit: FusedHit, candidate: Candidate) -> dict[str, dict[str, Any]]:
    """Each source's rank and contribution, plus its own score where that score depends on
    nothing but the query and this item (cosine similarity; BM25 over readable tail texts)."""
    return {
        source: {**component, "score": candidate.scores[source]}
        if source in candidate.scores else dict(component)
        for source, component in hit.components.items()
    }
