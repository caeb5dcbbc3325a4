"""BM25 over the shards of one tantivy index, exactly as one index over all of them would score.

A shard's own search scores with its own statistics (document count, each term's document
frequency, the field's average length), so merging the shards' lists by their scores is not
what one index would answer. This module is Elasticsearch's ``dfs_query_then_fetch``, made
exact at every depth:

1. **Global statistics.** Tantivy's BM25 (``tantivy/src/query/bm25.rs``) reads three numbers:
   ``N``, the sum of the segments' ``max_doc`` (deleted documents count until a merge purges
   them); ``n``, a term's document frequency (deleted documents too); and the average field
   length, ``total_num_tokens / N`` (every segment's token count of the field, deleted
   documents too). Summed over the shards' segments they are what one index holding the same
   segments uses; with no deletes pending, what one index over the same live chunks uses.
   ``N`` and the token counts come from the segment files (:func:`field_stats`), ``n`` from
   ``Searcher.doc_freq``.
2. **Rescoring.** Each candidate's explanation of each query clause gives the clause's
   frequency in it and the decoded field norm ``dl``; :class:`Bm25Model` recomputes the clause scores with the global
   numbers in tantivy's ``f32`` arithmetic, operation for operation (``idf`` with the C
   library's ``logf``, as Rust's ``f32::ln`` calls it; the field-norm cache formula), so each
   clause's score is bit for bit one index's; they are summed in query order, as tantivy's
   union adds them (checked against one real index: ``tests/sinks/test_global_bm25.py``).
3. **Candidates at any depth.** A chunk outside a shard's local top ``limit`` may belong in
   the global one. For a shard, the ratio of a document's global to local score is at most
   ``c = max over clauses of (global idf / local idf) * max(1, global avgdl / local avgdl)``
   (the clause's weight scales with its idf; its length factor ``tf / (tf + K(dl))`` changes
   by at most ``K_local(dl) / K_global(dl)``, which lies between 1 and ``avgdl_global /
   avgdl_local`` for every ``dl``; clauses absent from the shard score nothing there). A shard
   is read deeper (twice as many) until ``c`` times its last local score is below the global
   score of the ``limit``-th best rescored candidate, or it has no more hits. The same
   argument gives a lower ratio (min of the idf ratios times ``min(1, avgdl ratio)``), so a
   candidate whose upper bound is below the ``limit``-th largest lower bound is never
   explained: it cannot rank.

Costs one explanation per explained candidate and clause (about 15 microseconds each), and
only for sharded indexes: an unsharded search never comes here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from tantivy import Query

from sinks.exceptions import EngineError
from sinks.text.base import QueryClauses

__all__ = ["Bm25Model", "FieldStats", "GlobalHit", "Shard", "clause_matches", "field_stats",
           "freq_and_length", "global_top", "ratio_bounds"]

_F32 = np.float32
K1 = _F32(1.2)
B = _F32(0.75)
_K1_PLUS_ONE = _F32(1.0) + K1
_ONE_MINUS_B = _F32(1.0) - B
_BOUND_SLACK = 1e-4
"""Relative slack on the depth bound: it is derived in exact arithmetic, scores are f32."""
_FOOTER_MAGIC = 1337


def _libm_logf() -> Callable[[float], float] | None:
    name = ctypes.util.find_library("m")
    try:
        logf = ctypes.CDLL(name).logf if name else None
    except (OSError, AttributeError):
        return None
    if logf is None:
        return None
    logf.restype = ctypes.c_float
    logf.argtypes = [ctypes.c_float]
    return logf  # type: ignore[no-any-return]


_LOGF = _libm_logf()


def _ln(value: np.float32) -> np.float32:
    """``f32::ln`` as tantivy computes it: the C library's ``logf`` (else the correctly
    rounded logarithm, which ``logf`` nearly always is)."""
    if _LOGF is not None:
        return _F32(_LOGF(float(value)))
    return _F32(math.log(float(value)))


def idf(doc_freq: int, max_docs: int) -> np.float32:
    """Tantivy's ``idf``: ``ln(1 + (N - n + 0.5) / (n + 0.5))`` in f32."""
    x = (_F32(max_docs - doc_freq) + _F32(0.5)) / (_F32(doc_freq) + _F32(0.5))
    return _ln(_F32(1.0) + x)


@dataclass(frozen=True)
class FieldStats:
    """What tantivy's BM25 reads of an index besides document frequencies."""

    max_docs: int
    """Sum of the segments' ``max_doc`` (deleted documents included)."""
    total_tokens: int
    """The field's token count over every segment (deleted documents included)."""

    def __add__(self, other: FieldStats) -> FieldStats:
        return FieldStats(self.max_docs + other.max_docs, self.total_tokens + other.total_tokens)

    @property
    def average_length(self) -> np.float32:
        """``total_num_tokens as f32 / total_num_docs as f32``."""
        return _F32(self.total_tokens) / _F32(self.max_docs)


_STATS: dict[tuple[str, str, int, int], FieldStats] = {}
_STATS_LOCK = threading.Lock()


def field_stats(directory: Path, field_name: str) -> FieldStats:
    """:class:`FieldStats` of ``field_name`` in the tantivy index in ``directory``, read from
    ``meta.json`` (segments, ``max_doc``, the schema's field order) and the header of each
    segment's postings file (``<segment>.idx``: a composite file whose section of a field
    starts with the field's ``total_num_tokens``, a little-endian u64). Cached per directory
    and ``meta.json`` (a committed generation never changes)."""
    meta_path = Path(directory) / "meta.json"
    try:
        meta_stat = meta_path.stat()
    except FileNotFoundError as exc:
        raise EngineError(f"{directory} holds no tantivy index") from exc
    key = (str(meta_path), field_name, meta_stat.st_mtime_ns, meta_stat.st_size)
    with _STATS_LOCK:
        if key in _STATS:
            return _STATS[key]
    meta = orjson.loads(meta_path.read_bytes())
    names = [entry["name"] for entry in meta["schema"]]
    if field_name not in names:
        raise EngineError(f"the index in {directory} has no field {field_name}")
    field_id = names.index(field_name)
    stats = FieldStats(0, 0)
    for segment in meta["segments"]:
        postings = Path(directory) / f"{segment['segment_id'].replace('-', '')}.idx"
        stats += FieldStats(int(segment["max_doc"]), _field_tokens(postings, field_id))
    with _STATS_LOCK:
        _STATS[key] = stats
        while len(_STATS) > 256:
            _STATS.pop(next(iter(_STATS)))
    return stats


def _field_tokens(path: Path, field_id: int) -> int:
    """``total_num_tokens`` of field ``field_id`` in one segment's postings file."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(size - 8)
            footer_len, magic = struct.unpack("<II", file.read(8))
            if magic != _FOOTER_MAGIC:
                raise EngineError(f"{path} is not a tantivy file this version reads")
            body_end = size - 8 - footer_len
            file.seek(body_end - 4)
            (offsets_len,) = struct.unpack("<I", file.read(4))
            offsets_start = body_end - 4 - offsets_len
            file.seek(offsets_start)
            offsets = file.read(offsets_len)
            start = _section_start(offsets, field_id)
            if start is None:
                return 0
            file.seek(start)
            (tokens,) = struct.unpack("<Q", file.read(8))
            return int(tokens)
    except (OSError, struct.error) as exc:
        raise EngineError(f"cannot read the token count of {path}: {exc}") from exc


def _section_start(footer: bytes, field_id: int) -> int | None:
    """The offset of section (``field_id``, 0) in a composite file's footer: a VInt count,
    then per section a VInt offset delta, the field (u32) and a VInt index."""
    position = 0

    def vint() -> int:
        nonlocal position
        value, shift = 0, 0
        while True:
            byte = footer[position]
            position += 1
            value |= (byte & 0x7F) << shift
            if byte & 0x80:  # tantivy's VInt marks its last byte
                return value
            shift += 7

    count = vint()
    offset = 0
    for _ in range(count):
        offset += vint()
        (field_number,) = struct.unpack_from("<I", footer, position)
        position += 4
        if field_number == field_id and vint() == 0:
            return offset
        if field_number != field_id:
            vint()
    return None


class Bm25Model:
    """The BM25 weights of a query's clauses (a term, or a phrase of terms) under one set of
    statistics, computed as tantivy's ``Bm25Weight`` computes them."""

    def __init__(self, clauses: Sequence[tuple[str, ...]], doc_freqs: dict[str, int],
                 stats: FieldStats) -> None:
        self.stats = stats
        self.average_length = stats.average_length
        self.idfs: list[np.float32] = []
        for terms in clauses:
            if len(terms) == 1:
                self.idfs.append(idf(doc_freqs[terms[0]], stats.max_docs))
            else:  # a phrase: the sum of its terms' idf (``Bm25Weight::for_terms``)
                total = _F32(0.0)
                for term in terms:
                    total = total + idf(doc_freqs[term], stats.max_docs)
                self.idfs.append(total)
        self.weights = [value * _K1_PLUS_ONE for value in self.idfs]
        self.present = [all(doc_freqs[term] > 0 for term in terms) for terms in clauses]

    def clause_score(self, clause: int, freq: float, length: float) -> np.float32:
        """``weight * tf / (tf + K1 * (1 - B + B * dl / avgdl))`` for clause ``clause``."""
        norm = K1 * (_ONE_MINUS_B + B * _F32(length) / self.average_length)
        tf = _F32(freq)
        return self.weights[clause] * (tf / (tf + norm))

    def score(self, matches: dict[int, tuple[float, float]]) -> np.float32:
        """The document's score: its matching clauses' scores summed in query order (the
        order tantivy's union adds them in)."""
        total = _F32(0.0)
        for clause in sorted(matches):
            total = total + self.clause_score(clause, *matches[clause])
        return total


def freq_and_length(explanation: dict[str, Any]) -> tuple[float, float]:
    """(freq, dl) of one clause's match, from its explanation: the term's (or the phrase's)
    frequency in the document and the decoded field norm."""
    nodes = [explanation]
    while nodes:
        node = nodes.pop()
        if str(node.get("description", "")).startswith("freq / (freq"):
            values = {str(detail["description"]).split(",")[0]: float(detail["value"])
                      for detail in node.get("details", ())}
            return values["freq"], values["dl"]
        nodes.extend(node.get("details", ()))
    raise EngineError("a BM25 explanation without freq and dl: a tantivy version this code "
                      "was not written for")


def clause_matches(searcher: Any, clause_queries: Sequence[Query], clauses: Sequence[int],
                   address: Any) -> dict[int, tuple[float, float]]:
    """Clause index → (freq, dl) of one document, for each of ``clauses`` it matches. One
    explanation per clause: explaining the clauses' union instead would score the union's
    whole look-ahead window (4096 documents) for every document."""
    found: dict[int, tuple[float, float]] = {}
    for clause in clauses:
        try:
            explanation = clause_queries[clause].explain(searcher, address)
        except ValueError as exc:
            if "does not match" in str(exc):
                continue
            raise
        found[clause] = freq_and_length(orjson.loads(explanation.to_json()))
    return found


def _clause_queries(schema: Any, field_name: str, clauses: Sequence[tuple[str, ...]]) -> list[Query]:
    return [Query.term_query(schema, field_name, terms[0]) if len(terms) == 1
            else Query.phrase_query(schema, field_name, list(terms)) for terms in clauses]


@dataclass
class Shard:
    """One shard's part in a global search: its searcher, the full query its own search runs
    (filters included), and how to name hits (``name(addresses)`` → (id, payload) each)."""

    searcher: Any
    schema: Any
    query: Query
    name: Callable[[list[Any]], list[tuple[str, Any]]]
    stats: FieldStats


@dataclass(frozen=True)
class GlobalHit:
    """A hit scored with the global statistics; ``payload`` is what the shard's ``name`` gave."""

    score: float
    key: str
    payload: Any
    shard: int
    address: Any


@dataclass
class _Run:
    shard: Shard
    index: int
    low: float
    """No document of the shard scores less than ``low`` times its local score globally."""
    high: float
    """... nor more than ``high`` times (``c`` of the module docstring)."""
    clauses: list[int]
    """The clauses with every term in this shard (the others match nothing here)."""
    fetched: int = 0
    exhausted: bool = False
    last_local: float = math.inf
    seen: set[tuple[int, int]] = field(default_factory=set)


@dataclass(frozen=True)
class _Candidate:
    run: _Run
    address: Any
    local: float


def global_top(shards: Sequence[Shard], field_name: str, clauses: QueryClauses,
               limit: int) -> list[GlobalHit]:
    """The top ``limit`` hits over ``shards`` as one index over all of them would rank them
    (score desc, then id asc), each scored with the global statistics (module docstring).

    A candidate is explained only if it may rank: the ``limit``-th largest lower bound of the
    candidates' global scores (``low`` times the local score, or the exact score once known)
    is a floor under the global top, and a candidate whose upper bound (``high`` times its
    local score) is below the floor cannot reach it (the floor only rises as more come)."""
    query_clauses = [(term,) for term in clauses.terms] + [tuple(p) for p in clauses.phrases]
    if limit <= 0 or not query_clauses or not shards:
        return []
    terms = sorted({term for terms in query_clauses for term in terms})
    local_freqs = [{term: int(shard.searcher.doc_freq(field_name, term)) for term in terms}
                   for shard in shards]
    global_freqs = {term: sum(freqs[term] for freqs in local_freqs) for term in terms}
    total = FieldStats(0, 0)
    for shard in shards:
        total += shard.stats
    if total.max_docs == 0:
        return []
    model = Bm25Model(query_clauses, global_freqs, total)
    runs = [_Run(shard, index, *ratio_bounds(model, query_clauses, freqs, shard.stats),
                 clauses=[k for k, terms in enumerate(query_clauses) if all(freqs[t] > 0 for t in terms)],
                 exhausted=shard.stats.max_docs == 0)
            for index, (shard, freqs) in enumerate(zip(shards, local_freqs, strict=True))]
    queries = [_clause_queries(shard.schema, field_name, query_clauses) for shard in shards]
    scored: list[GlobalHit] = []
    pending = [run for run in runs if not run.exhausted]
    while pending:
        waiting = [candidate for run in pending for candidate in _deepen(run, limit)]
        lows = sorted([candidate.run.low * candidate.local for candidate in waiting]
                      + [hit.score for hit in scored], reverse=True)
        floor = lows[limit - 1] if len(lows) >= limit else -math.inf
        for run in pending:
            mine = [c for c in waiting if c.run is run and run.high * c.local >= floor]
            scored += _rescore(run, queries[run.index], model, mine)
        scored.sort(key=lambda hit: (-hit.score, hit.key))
        threshold = scored[limit - 1].score if len(scored) >= limit else -math.inf
        pending = [run for run in runs
                   if not run.exhausted and run.high * run.last_local >= threshold]
    return scored[:limit]


def _deepen(run: _Run, limit: int) -> list[_Candidate]:
    """Read the shard twice as deep as before (``limit`` at first): the hits not seen yet."""
    wanted = max(limit, run.fetched * 2)
    hits = run.shard.searcher.search(run.shard.query, limit=wanted, count=False).hits
    run.fetched = wanted
    run.exhausted = len(hits) < wanted
    run.last_local = float(hits[-1][0]) if hits else 0.0
    new = [_Candidate(run, address, float(score)) for score, address in hits
           if (address.segment_ord, address.doc) not in run.seen]
    run.seen.update((candidate.address.segment_ord, candidate.address.doc) for candidate in new)
    return new


def _rescore(run: _Run, queries: list[Query], model: Bm25Model,
             candidates: list[_Candidate]) -> list[GlobalHit]:
    """The candidates named and scored with the global statistics."""
    if not candidates:
        return []
    addresses = [candidate.address for candidate in candidates]
    out = []
    for address, (key, payload) in zip(addresses, run.shard.name(addresses), strict=True):
        matches = clause_matches(run.shard.searcher, queries, run.clauses, address)
        out.append(GlobalHit(float(model.score(matches)), key, payload, run.index, address))
    return out


def ratio_bounds(model: Bm25Model, clauses: Sequence[tuple[str, ...]], local_freqs: dict[str, int],
                 stats: FieldStats) -> tuple[float, float]:
    """(low, high): every document of a shard with these statistics scores, under ``model``'s
    global statistics, between ``low`` and ``high`` times its local score. Per clause the
    weight scales by global idf / local idf and the length factor ``tf / (tf + K(dl))`` by a
    value between 1 and global avgdl / local avgdl (module docstring); a sum of clause scores
    keeps the extreme ratios of its terms. A little slack covers the f32 rounding."""
    if stats.max_docs == 0:
        return 0.0, 0.0
    local = Bm25Model(clauses, local_freqs, stats)
    ratios = [float(model.idfs[k]) / float(local.idfs[k])
              for k in range(len(clauses)) if local.present[k]]
    if not ratios or float(local.average_length) <= 0:
        return 0.0, 0.0  # nothing of the query in this shard: it matches nothing
    lengths = float(model.average_length) / float(local.average_length)
    return (min(ratios) * min(1.0, lengths) * (1.0 - _BOUND_SLACK),
            max(ratios) * max(1.0, lengths) * (1.0 + _BOUND_SLACK))
