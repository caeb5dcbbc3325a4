"""The freshness decision: which one ``asOfSeq`` a query answers at, and what covers it.

Pure: it takes the committed L1 seq read at query start and the watermarks read from the
watermark topic, and returns a :class:`SnapshotDecision` the planner executes and the
response discloses. Modes (``docs/planner.md`` has worked examples):

``indexed``
    ``asOfSeq = min(L1 seq, every required watermark)``. No tail scan.
``latest``
    ``asOfSeq = L1 seq at query start``; the gap ``(index_through, asOfSeq]`` above the
    lowest required watermark is filled by a disclosed L1 tail scan.
``wait:SECONDS``
    The caller polls :func:`wait_satisfied` until every required index reaches the L1 seq
    seen at query start, or the deadline passes; then ``asOfSeq`` is that L1 seq and
    whatever the indexes still lack is filled by a tail scan (``timed_out`` is set).

Labels are exact. ``label == mode`` (``indexed``, ``latest``, ``wait``) when nothing at or
below ``asOfSeq`` is left uncovered; otherwise ``label == mode + "-partial"`` and
``uncovered`` lists the seq ranges the answer lacks. So ``latest`` appears only when
``asOfSeq`` equals the L1 seq at query start and ``uncovered`` is empty (SPEC §10.3).
The decision is provisional until the tail scan ran: :func:`record_tail_scan` and
:func:`with_uncovered` recompute the label from what was really covered.

Missing indexes (a required kind with no watermark at all): a kind in ``optional``
(``vector``) is dropped and the fallback disclosed (hybrid becomes text-only), unless it is
the only kind required. Any other missing kind counts as built through seq 0: ``indexed``
raises :class:`IndexUnavailable` (an answer at seq 0 would be useless), ``latest`` and
``wait`` tail-scan the log from seq 1, which the scan's size cap may leave partial.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from planner.exceptions import IndexUnavailable, QueryError

__all__ = [
    "MAX_WAIT_SECONDS",
    "MODES",
    "OPTIONAL_KINDS",
    "Freshness",
    "SeqRange",
    "SnapshotDecision",
    "Watermark",
    "choose_as_of",
    "label_for",
    "parse_freshness",
    "published_stall",
    "record_tail_scan",
    "stall_remedy",
    "wait_satisfied",
    "with_rebuilt_lines",
    "with_refusals",
    "with_stalls",
    "with_uncovered",
    "with_vector_fallback",
]

MODES = ("indexed", "latest", "wait")
MAX_WAIT_SECONDS = 300.0
OPTIONAL_KINDS = frozenset({"vector"})

_WAIT = re.compile(r"wait:([0-9]+(?:\.[0-9]+)?)")  # ASCII digits only, as the OpenAPI pattern says
_NEGATIVE_WAIT = re.compile(r"wait:-[0-9]+(?:\.[0-9]+)?")
# wait:0 is refused: "between 0 and 300" read as if it were allowed.
_WAIT_RANGE_HINT = f"Wait more than 0 and at most {MAX_WAIT_SECONDS:g} seconds, e.g. wait:5."


@dataclass(frozen=True)
class Freshness:
    """A freshness request: ``mode`` is one of :data:`MODES`; ``wait_seconds`` only for wait."""

    mode: str
    wait_seconds: float | None = None

    def __str__(self) -> str:
        return f"wait:{self.wait_seconds:g}" if self.mode == "wait" else self.mode


class Watermark(NamedTuple):
    """What one index kind has built: its live generation and the seq it covers through."""

    generation_id: int
    built_through_seq: int


@dataclass(frozen=True, order=True)
class SeqRange:
    """Seqs ``from_seq..to_seq``, both inclusive (seqs may have gaps; size is an upper bound)."""

    from_seq: int
    to_seq: int

    @property
    def size(self) -> int:
        return self.to_seq - self.from_seq + 1

    def to_json(self) -> dict[str, int]:
        return {"fromSeq": self.from_seq, "toSeq": self.to_seq}


@dataclass(frozen=True)
class SnapshotDecision:
    """The chosen snapshot and everything the response must disclose about it.

    ``required`` are the kinds the answer reads (after fallbacks); ``watermarks`` every kind
    inspected, as seen; ``index_through`` the seq every required index covers (capped at the
    L1 seq); ``tail_scan`` the L1 range to scan in-process, if any.
    """

    freshness: Freshness
    l1_seq: int
    as_of_seq: int
    label: str
    index_through: int
    required: tuple[str, ...]
    watermarks: Mapping[str, Watermark | None]
    tail_scan: SeqRange | None = None
    uncovered: tuple[SeqRange, ...] = ()
    missing: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    timed_out: bool = False

    @property
    def generations(self) -> dict[str, int]:
        """The generation pinned per required kind: what a cursor binds."""
        return {kind: wm.generation_id for kind in self.required
                if (wm := self.watermarks.get(kind)) is not None}

    def to_json(self) -> dict[str, Any]:
        """The response's ``freshness`` object (camelCase, SPEC §12) plus explain detail."""
        body: dict[str, Any] = {
            "mode": self.freshness.mode,
            "label": self.label,
            "asOfSeq": self.as_of_seq,
            "l1CommittedSeq": self.l1_seq,
            "indexThroughSeq": self.index_through,
            "watermarks": {
                kind: None if wm is None else
                {"generationId": wm.generation_id, "builtThroughSeq": wm.built_through_seq}
                for kind, wm in sorted(self.watermarks.items())
            },
            "tailScan": None if self.tail_scan is None else self.tail_scan.to_json(),
            "uncovered": [span.to_json() for span in self.uncovered],
            "missing": list(self.missing),
            "fallbacks": list(self.fallbacks),
            "reasons": list(self.reasons),
            "timedOut": self.timed_out,
        }
        if self.freshness.mode == "wait":
            body["waitSeconds"] = self.freshness.wait_seconds
        return body


def parse_freshness(text: str) -> Freshness:
    """Parse ``indexed``, ``latest`` or ``wait:SECONDS`` (0 < SECONDS <= 300)."""
    value = text.strip().lower() if isinstance(text, str) else ""
    if value in ("indexed", "latest"):
        return Freshness(value)
    match = _WAIT.fullmatch(value)
    if match:
        seconds = float(match.group(1))
        if 0 < seconds <= MAX_WAIT_SECONDS:
            return Freshness("wait", seconds)
        raise QueryError(
            f"freshness wait:{match.group(1)} is out of range",
            hint=_WAIT_RANGE_HINT,
        )
    if _NEGATIVE_WAIT.fullmatch(value):  # wait:-5 is a number out of range, not an unknown word
        raise QueryError(f"freshness {value} is out of range", hint=_WAIT_RANGE_HINT)
    raise QueryError(
        f"unknown freshness {text!r}",
        hint="Use indexed, latest or wait:SECONDS (for example wait:5).",
    )


def choose_as_of(
    freshness: Freshness,
    l1_seq: int,
    watermarks: Mapping[str, tuple[int, int] | None],
    required: Iterable[str],
    *,
    optional: frozenset[str] = OPTIONAL_KINDS,
) -> SnapshotDecision:
    """Fix the query's ``asOfSeq`` and its coverage plan (see the module docstring).

    For ``wait``, call this once :func:`wait_satisfied` holds or the deadline passed, with
    the L1 seq seen at query start and the watermarks read last.
    """
    if freshness.mode not in MODES:
        raise ValueError(f"unknown freshness mode {freshness.mode!r}")
    _check_seq("l1_seq", l1_seq)
    seen = _normalize(watermarks)
    plan = _plan(l1_seq, seen, required, optional)
    reasons = [f"L1 committed seq at query start: {l1_seq}", *plan.notes]

    if freshness.mode == "indexed":
        if plan.essential_missing:
            kinds = ", ".join(plan.essential_missing)
            raise IndexUnavailable(
                f"no generation of the {kinds} index exists yet for this log",
                hint="Use freshness latest to read the log directly, or wait until `usl "
                     "status` shows the index.",
            )
        as_of = plan.index_through
        terms = ", ".join([f"L1 {l1_seq}",
                           *(f"{kind} {plan.through[kind]}" for kind in plan.required)])
        reasons.append(f"freshness indexed: asOfSeq = min({terms}) = {as_of}")
        tail = None
    else:
        as_of = l1_seq
        tail = SeqRange(plan.index_through + 1, l1_seq) if plan.index_through < l1_seq else None
        if freshness.mode == "latest":
            head = f"freshness latest: asOfSeq = L1 committed seq {l1_seq}"
        elif tail is None:
            head = (f"freshness {freshness}: every required index reached L1 seq {l1_seq} "
                    "seen at query start")
        else:
            head = (f"freshness {freshness}: deadline reached with indexes through "
                    f"{plan.index_through} < L1 seq {l1_seq} seen at query start")
        if tail is None:
            reasons.append(f"{head}; indexes cover every seq <= {l1_seq}, no tail scan")
        else:
            reasons.append(f"{head}; indexes cover seqs <= {plan.index_through}; seqs "
                           f"{tail.from_seq}..{tail.to_seq} are read from L1 by a tail scan")

    return SnapshotDecision(
        freshness=freshness,
        l1_seq=l1_seq,
        as_of_seq=as_of,
        label=label_for(freshness.mode, as_of_seq=as_of, l1_seq=l1_seq, uncovered=()),
        index_through=plan.index_through,
        required=plan.required,
        watermarks=seen,
        tail_scan=tail,
        missing=plan.missing,
        fallbacks=plan.fallbacks,
        reasons=tuple(reasons),
        timed_out=freshness.mode == "wait" and tail is not None,
    )


def wait_satisfied(
    l1_seq_at_start: int,
    watermarks: Mapping[str, tuple[int, int] | None],
    required: Iterable[str],
    *,
    optional: frozenset[str] = OPTIONAL_KINDS,
) -> bool:
    """Whether every required index (after fallbacks) covers the L1 seq seen at query start."""
    _check_seq("l1_seq_at_start", l1_seq_at_start)
    plan = _plan(l1_seq_at_start, _normalize(watermarks), required, optional)
    # A missing essential index counts as built through 0: satisfied only on an empty log.
    return plan.index_through >= l1_seq_at_start


def label_for(mode: str, *, as_of_seq: int, l1_seq: int, uncovered: Iterable[SeqRange]) -> str:
    """The honest label: ``mode`` when fully covered, else ``mode + "-partial"``.

    ``latest`` and ``wait`` also require ``as_of_seq == l1_seq`` (the L1 seq at query start).
    """
    if mode not in MODES:
        raise ValueError(f"unknown freshness mode {mode!r}")
    complete = not any(True for _ in uncovered) and (mode == "indexed" or as_of_seq == l1_seq)
    return mode if complete else f"{mode}-partial"


def with_uncovered(
    decision: SnapshotDecision, ranges: Iterable[SeqRange], reason: str
) -> SnapshotDecision:
    """Disclose more ranges the answer lacks (clipped to ``1..asOfSeq``) and relabel."""
    clipped = [SeqRange(max(span.from_seq, 1), min(span.to_seq, decision.as_of_seq))
               for span in ranges]
    merged = _merge([*decision.uncovered, *(span for span in clipped if span.size > 0)])
    if tuple(merged) == decision.uncovered:
        return decision
    return replace(
        decision,
        uncovered=tuple(merged),
        label=label_for(decision.freshness.mode, as_of_seq=decision.as_of_seq,
                        l1_seq=decision.l1_seq, uncovered=merged),
        reasons=(*decision.reasons, reason),
    )


def record_tail_scan(
    decision: SnapshotDecision, *, scanned_through: int, stop_reason: str = "size cap reached"
) -> SnapshotDecision:
    """Account for a tail scan that read its range in seq order up to ``scanned_through``.

    If it stopped before the end of :attr:`SnapshotDecision.tail_scan`, the rest becomes
    ``uncovered`` and the label turns ``-partial``.
    """
    tail = decision.tail_scan
    if tail is None or scanned_through >= tail.to_seq:
        return decision
    rest = SeqRange(max(scanned_through + 1, tail.from_seq), tail.to_seq)
    return with_uncovered(
        decision, [rest],
        f"tail scan stopped after seq {max(scanned_through, tail.from_seq - 1)} "
        f"({stop_reason}); seqs {rest.from_seq}..{rest.to_seq} are not covered",
    )


def with_vector_fallback(decision: SnapshotDecision, generation: Watermark | tuple[int, int],
                         problem: str | None) -> SnapshotDecision:
    """Say why vector ranking was dropped (``problem``; None: it was not) and still list the
    generation (``generationId``, ``builtThroughSeq``) that was inspected."""
    if problem is None:
        return decision
    generation_id, built_through = generation
    fallbacks = [f for f in decision.fallbacks if not f.startswith("vector")]
    fallbacks.append(f"{problem}; ranking uses text only")
    reasons = [f"vector: generation {generation_id} not used: {problem}"
               if r.startswith("vector: no generation yet") else r for r in decision.reasons]
    watermarks = dict(decision.watermarks)
    watermarks["vector"] = Watermark(generation_id, built_through)
    return replace(decision, fallbacks=tuple(fallbacks), reasons=tuple(reasons),
                   watermarks=watermarks)


def with_rebuilt_lines(decision: SnapshotDecision, from_seqs: Mapping[str, int]) -> SnapshotDecision:
    """Disclose that a required index rebuilt with ``--from-seq N`` (kind → N) holds nothing
    below N: never imply it does."""
    for kind, starts in sorted(from_seqs.items()):
        if starts > 1 and kind in decision.required:
            decision = with_uncovered(decision, [SeqRange(1, min(starts - 1, decision.as_of_seq))],
                                      f"the {kind} index was rebuilt from seq {starts} and holds "
                                      f"nothing below it")
    return decision


def published_stall(watermark: Mapping[str, Any], log_id: str) -> dict[str, Any] | None:
    """The ``stalled`` entry a sink published with ``watermark`` of ``log_id``
    (:func:`sinks.runner.stall_of`: its line was built under another policy, chunker or text
    analyzer than the sink writes; of a sharded kind, the first stalled shard's, naming it), with
    the ``remedy`` that ends it, or None."""
    shards = watermark.get("shards")
    records = sorted(shards.items()) if isinstance(shards, Mapping) else [(None, watermark)]
    for shard, record in records:
        stalled = record.get("stalled") if isinstance(record, Mapping) else None
        if isinstance(stalled, Mapping) and {"what", "built", "writes"} <= set(stalled):
            entry = {name: stalled.get(name) for name in ("what", "built", "writes", "generationId", "since")}
            entry["remedy"] = stall_remedy(stalled, log_id)
            return {**entry, "shard": shard} if shard else entry
    return None


def stall_remedy(stalled: Mapping[str, Any], log_id: str) -> str:
    """The command that ends the stall ``stalled`` of ``log_id``: the one its sink named; a sink
    (or an API) of an older release named none, and its stalls were all pipeline changes."""
    return str(stalled.get("remedy") or f"usl rebuild all --log {log_id}")


def with_stalls(decision: SnapshotDecision, watermarks: Mapping[str, Mapping[str, Any] | None],
                log_id: str) -> SnapshotDecision:
    """Say which required index is stalled (its watermark, kind → record, carries the entry
    :func:`published_stall` reads): its lag then grows until a rebuild, it does not catch up."""
    stalled = []
    for kind in decision.required:
        stall = published_stall(watermarks.get(kind) or {}, log_id)
        if stall is not None:
            where = f"{kind} ({stall['shard']})" if stall.get("shard") else kind
            stalled.append(f"{where}: stalled: built under {stall['what']} {stall['built']}, the sinks "
                           f"write {stall['writes']}; not indexing this log until `{stall['remedy']}`")
    return replace(decision, reasons=(*decision.reasons, *stalled)) if stalled else decision


def with_refusals(decision: SnapshotDecision, problems: Mapping[str, str]) -> SnapshotDecision:
    """Disclose each generation refused on the way (kind → why) as a fallback and a reason."""
    refused = [f"{kind}: {problem}" for kind, problem in sorted(problems.items())]
    return replace(decision, fallbacks=(*decision.fallbacks, *refused),
                   reasons=(*decision.reasons, *refused))


class _Plan(NamedTuple):
    required: tuple[str, ...]
    through: dict[str, int]
    index_through: int
    missing: tuple[str, ...]
    essential_missing: tuple[str, ...]
    fallbacks: tuple[str, ...]
    notes: tuple[str, ...]


def _plan(
    l1_seq: int, seen: Mapping[str, Watermark | None], required: Iterable[str],
    optional: frozenset[str],
) -> _Plan:
    kinds = tuple(sorted(set(required)))
    missing = tuple(kind for kind in kinds if seen.get(kind) is None)
    # Dropping an optional kind only helps when something else still answers the query.
    droppable = tuple(kind for kind in missing if kind in optional)
    if len(droppable) == len(kinds):
        droppable = ()
    essential_missing = tuple(kind for kind in missing if kind not in droppable)
    reading = tuple(kind for kind in kinds if kind not in droppable)
    through: dict[str, int] = {}
    notes: list[str] = []
    fallbacks: list[str] = []
    for kind in kinds:
        wm = seen.get(kind)
        if kind in droppable:
            others = ", ".join(reading)
            fallbacks.append(f"{kind} index has no generation yet; results use {others} only")
            notes.append(f"{kind}: no generation yet; left out of this query")
        elif wm is None:
            through[kind] = 0
            notes.append(f"{kind}: no generation yet; counts as built through seq 0")
        else:
            through[kind] = min(wm.built_through_seq, l1_seq)
            lag = l1_seq - through[kind]
            state = f"{lag} seqs behind L1" if lag else "caught up with L1"
            past = (f", past the L1 seq read at query start, so counts as {l1_seq}"
                    if wm.built_through_seq > l1_seq else "")
            notes.append(f"{kind}: generation {wm.generation_id} built through "
                         f"{wm.built_through_seq} ({state}{past})")
    index_through = min(through.values(), default=l1_seq)
    return _Plan(reading, through, index_through, missing, essential_missing,
                 tuple(fallbacks), tuple(notes))


def _normalize(watermarks: Mapping[str, tuple[int, int] | None]) -> dict[str, Watermark | None]:
    seen: dict[str, Watermark | None] = {}
    for kind, value in watermarks.items():
        if value is None:
            seen[kind] = None
            continue
        wm = Watermark(*value)
        _check_seq(f"{kind} builtThroughSeq", wm.built_through_seq)
        seen[kind] = wm
    return seen


def _check_seq(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, not {value!r}")


def _merge(ranges: Iterable[SeqRange]) -> list[SeqRange]:
    merged: list[SeqRange] = []
    for span in sorted(ranges):
        if merged and span.from_seq <= merged[-1].to_seq + 1:
            last = merged[-1]
            merged[-1] = SeqRange(last.from_seq, max(last.to_seq, span.to_seq))
        else:
            merged.append(span)
    return merged
