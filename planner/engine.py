"""The query engine: one snapshot per query, hybrid RRF over readable data, explain, cursors.

:meth:`Planner.search` runs these steps (``docs/planner.md`` tells the story for users):

1. validate the request (:mod:`planner.request`); full tool results need the ``toolresults``
   scope (403 otherwise); a cursor is verified and bound to query, principal and log;
2. read the log's committed L1 seq, then the watermarks (for ``wait:S``: poll until every
   required index reaches that seq or the deadline passes);
3. pin the generation of every required kind for the query's lifetime; a cursor re-pins the
   very generations it binds (410 when they were collected). The freshness decision
   (:func:`planner.snapshot.choose_as_of`) is made on the pinned generations, so what the
   response reports is exactly what was read;
4. the *cut* is the seq every pinned index covers (``indexThroughSeq``). Indexes answer for
   seqs <= cut: engines filter ``maxSeq <= cut`` and chunks straddling the cut are trimmed to
   their events <= cut (:mod:`planner.trim`). The L1 tail scan answers for ``(cut, asOfSeq]``
   (:mod:`planner.tailscan`), capped at ``tail_cap`` events; what it cannot reach is disclosed
   as ``uncovered`` and the label turns ``-partial``;
5. access: each session's latest access list from the structured index, overridden by any
   newer event read from L1 up to the committed seq *now* (so a revocation applies at once,
   also to open cursors). Unreadable sessions are filtered inside every engine, before the
   window is taken, so ranks never have gaps;
6. ranked lists, each a window of ``max(50, 5k)`` candidates: ``text`` (the text index),
   ``vector`` (faiss, merged by cosine with embeddings of trimmed and tail chunks: same model,
   comparable scores), trimmed and tail chunks merged into the text lists by BM25 under the
   text index's statistics (``tail``: tail tool results, BM25 over themselves: another corpus,
   so their own list) and ``toolresults``; fused by :func:`planner.rrf.fuse` and paged with
   :func:`planner.rrf.after`. In hybrid mode the text lists run in the planner's leg pool while
   the query's thread searches the vector index (``parallel_legs``).

Steps 1-3 are :meth:`Planner._search`, through :meth:`Planner.snapshot` (the
:class:`~planner.pins.Snapshot` that SQL, SessionQL and export read through too). Steps 4-6 are
one method each, reading and extending a :class:`QueryContext`: ``_decide`` (the freshness
decision and its disclosures), ``_scan_tail``, ``_read_access``, ``_trim`` (trimmed and tail
candidates), ``_rank`` (the ranked lists), ``_fuse`` and ``_page`` (page, cursor, explain).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from planner.access import ACL_SCAN_CAP, AccessLists
from planner.acl import (
    TOOLRESULTS_SCOPE,
    Principal,
    policy_fingerprint,
)
from planner.chunktable import ChunkRow, ChunkTable
from planner.coherence import CHUNK_KINDS, find_mismatch, origins_of_pin, remedy
from planner.cursors import (
    check_binding,
    cursor_payload,
    decode_cursor,
    encode_cursor,
    last_sort_key,
    load_cursor_key,
)
from planner.exceptions import (
    AccessDenied,
    CursorError,
    CursorExpired,
    CursorMismatch,
    IndexMismatch,
    IndexUnavailable,
    NotFound,
    PlannerError,
    QueryError,
)
from planner.explain import (
    TOOL_KINDS,
    Candidate,
    build_explain,
    generation_json,
    result_row,
    tool_candidate,
)
from planner.l1window import L1Window
from planner.local import analyze, clauses_of, rank_texts, rank_texts_as_index
from planner.pins import QUERY_PIN_SECONDS, Pinner, Snapshot
from planner.readers import IndexPin, ReaderCache
from planner.request import Filters, SearchRequest, log_field, parse_request
from planner.rrf import (
    FusedHit,
    RankedList,
    after,
    collapse_duplicates,
    depth_end,
    first_copies,
    fuse,
    newest_first,
    newest_first_among_ties,
    sort_key,
)
from planner.snapshot import (
    Freshness,
    SeqRange,
    SnapshotDecision,
    choose_as_of,
    record_tail_scan,
    wait_satisfied,
    with_rebuilt_lines,
    with_refusals,
    with_stalls,
    with_uncovered,
    with_vector_fallback,
)
from planner.tailscan import SnapshotCache, TailResult, TailScan, TailSnapshot, chunker_for
from planner.tailwarm import TailWarmer
from planner.trim import trim_chunk
from sinks.generations import MAX_CHUNK_SEQ
from sinks.runner import index_root
from sinks.text.base import HitCheck, spaceless_term, text_digest
from sinks.watermarks import WatermarkFollower, read_watermarks
from streams.asp import posix_seconds
from streams.english import FUNCTION_WORDS
from streams.exceptions import USLError
from streams.l1 import L1Reader, LogRegistry
from streams.metrics import (
    usl_cursor_refusals_total,
    usl_queries_total,
    usl_query_fallbacks_total,
    usl_query_seconds,
    usl_tail_scan_events,
)
from streams.settings import Settings

__all__ = ["ACL_SCAN_CAP", "QUERY_PIN_SECONDS", "RANK_DEPTH", "TAIL_SCAN_CAP", "VECTOR_FLOOR",
           "WINDOW_MIN", "Planner", "QueryContext", "window_for"]

log = logging.getLogger("usl.planner")

TAIL_SCAN_CAP = 20_000
"""Most L1 events one query's tail scan reads; the rest of the gap is disclosed as uncovered."""
RANK_DEPTH = 200
"""How deep each ranked list is read, for every query whatever its page size: the fused order
is RRF over each source's top ``RANK_DEPTH``, so it never depends on ``k``; the cursor binds
it, and a result list that stops there because a source had more says so (``end``)."""
WINDOW_MIN = 50
"""The smallest window older cursors carry (``max(50, 5k)``); they keep their own window."""
VECTOR_FLOOR = 0.0
"""A vector candidate enters the ranking only with a cosine above this (and above
``VECTOR_RELATIVE_FLOOR`` times the best cosine of the query); explain shows both."""
VECTOR_RELATIVE_FLOOR = 0.0
_MAX_OVERFETCH = 20_000
_DISTINCT_OVERFETCH = 16
"""An index list asks its engine for up to this many times its window while copies of texts
above fill it (:func:`distinct_texts`): boilerplate shared by every session of an agent (a
tool-calling benchmark's policy prompt) stops there, not at the window."""
_VECTOR_CACHE = 50_000
_T = TypeVar("_T")
_LEG_WORKERS = 2
"""Threads of a planner's leg pool: this machine's cores; a query uses its own thread besides."""
_RANKING = {"hybrid": ("text", "vector"), "text": ("text",), "vector": ("vector",)}
# Tool results are outputs, not chunks: identical outputs of different calls stay apart.
_UNCOLLAPSED = frozenset({"toolresults", "toolresultsPhrase", "toolresultsIdentifier"})
_NO_TEXT = text_digest("")
# Chunks a text list's session filter is expected to leave out from which its hits are judged
# on the engine's own top instead (HitCheck).
_CHECK_LEFT_OUT = 20_000


def window_for(k: int) -> int:
    """Candidates asked of each source: :data:`RANK_DEPTH` whatever the page size ``k`` (a
    first page of 5 and one of 100 fuse the very same lists)."""
    del k
    return RANK_DEPTH


@dataclass(frozen=True)
class _VectorCandidates:
    """The query's embedding and the vector index's hits (``reader`` None: the index was not
    searched: no readable chunk at or below the cut, or the query embeds to zero)."""

    query_vector: np.ndarray
    reader: Any
    hits: list[Any]


@dataclass
class QueryContext:
    """One search in flight: what it was asked, the snapshot it reads, and what each step of
    :meth:`Planner._answer` adds for the next (the decision, access, candidates, lists)."""

    req: SearchRequest
    principal: Principal
    policy: str
    snapshot: Snapshot
    l1_seq: int
    """The L1 seq the freshness decision starts from (a cursor's page: the first page's)."""
    window: int
    """Candidates asked of each source (a cursor's page: the first page's window)."""
    cursor: Mapping[str, Any] | None
    """The verified payload of the request's cursor (None: a first page)."""
    warming: bool = False
    """A tail warmer's pass (:meth:`Planner._warm_tail`), not a query: counted in no query metric."""
    decision: SnapshotDecision = field(init=False)
    """Set by ``_decide``; the later steps only add disclosures to it."""
    embedder: Any = None
    ranking: tuple[str, ...] = ()
    """The kinds whose lists rank this query: its mode's, less an index it cannot read (a
    vector query without a usable vector index ranks by text, as the fallback says)."""
    tail: TailResult | None = None
    acls: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    readable: AbstractSet[str] = field(default_factory=frozenset)
    readable_tools: AbstractSet[str] = field(default_factory=frozenset)
    session_filter: AbstractSet[str] | None = None
    """Sessions the engines keep (None: every session the structured index knows is readable)."""
    unreadable: AbstractSet[str] = field(default_factory=frozenset)
    """The sessions known that the principal may not read (the text index is filtered by
    these when they are fewer than ``session_filter``)."""
    table: ChunkTable | None = None
    provisional: list[Candidate] = field(default_factory=list)
    """Trimmed and tail candidates: not in any index, ranked in-process."""
    candidates: dict[str, Candidate] = field(default_factory=dict)
    indexed_scores: dict[str, dict[str, float]] = field(default_factory=dict)
    list_scores: dict[str, dict[str, float]] = field(default_factory=dict)
    """The score each chunk list ranked its ids by (BM25 of ``text``, ``phrase``, ``identifier``
    and the tail lists; cosine of ``vector``): trimmed and tail chunks are merged into the
    text-index lists by it, and runs of equal scores are ordered newest first by it; never
    shown (see ``_rank``)."""
    cut_phrase: CutPhrase | None = None
    """The query as a phrase pasted with a word cut at an edge, when no chunk holds it whole
    (:meth:`Planner._rank_cut_phrase`); its holders lead the text lists as whole-phrase ones do."""
    cut_index: tuple[list[str], bool, dict[str, float], dict[str, bytes]] | None = None
    """The index's holders of :attr:`cut_phrase` (ids, truncated, scores, digests), found in the
    text legs when the index's phrase list came back empty."""
    tool_phrase: bool = False
    """Hybrid with ``toolResults`` and a whole-query phrase: the tool results holding it lead
    the ``toolresults`` list (:func:`tool_phrase_holders_first`)."""
    digests: dict[str, bytes] = field(default_factory=dict)
    """Text digests of indexed candidates, as the text engine gave them with its hits or the
    vector segments with theirs."""
    chunk_digests: dict[str, bytes] = field(default_factory=dict)
    """Text digest of every chunk candidate that has a text (set by ``_collapse_duplicates``)."""
    copies: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per index list, how many copies of each kept chunk's text its search passed over to fill
    the window with distinct texts (:func:`distinct_texts`); explain adds them to ``standsFor``."""
    lists: list[RankedList] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    """What explain says about each step, in the order the steps add it."""

    @property
    def cut(self) -> int:
        return self.decision.index_through

    def pin(self, kind: str) -> IndexPin | None:
        return self.snapshot.pins.get(kind)


class Planner:
    """Answers searches over the pinned generations of one deployment (thread-safe).

    ``follower`` (a started :class:`WatermarkFollower`) gives live watermarks; without it each
    query reads the compacted watermark topic. ``warm_tail_every`` (seconds) starts a
    :class:`~planner.tailwarm.TailWarmer` that keeps the tail scans of recent ``latest`` and
    ``wait`` queries current as the log head moves (:meth:`close` stops it).
    ``parallel_legs`` (default True): a hybrid query runs its text lists in a small thread pool
    of the planner's own while the query's thread searches the vector index, whose segments
    are searched in that pool too (tantivy and faiss release the GIL while they search); False
    runs everything in the query's thread, one after the other. The answers are the same.
    """

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        *,
        follower: WatermarkFollower | None = None,
        tail_cap: int = TAIL_SCAN_CAP,
        acl_scan_cap: int = ACL_SCAN_CAP,
        warm_tail_every: float | None = None,
        parallel_legs: bool = True,
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.follower = follower
        self.tail_cap = tail_cap
        self.root: Path = index_root(settings)
        self._cursor_key = load_cursor_key(settings)
        self._readers = ReaderCache()
        self._lock = threading.Lock()
        self._registry: LogRegistry | None = None
        self._idle_l1: list[L1Reader] = []
        self._embedder: Any = None
        self._embedder_error: str | None = None
        self._tail: TailScan | None = None
        self._window = L1Window()
        self._vectors: dict[bytes, np.ndarray] = {}
        self._tails = SnapshotCache()
        self.parallel_legs = parallel_legs
        self._pool: _LegPool | None = None
        self.pinner = Pinner(self.root, holder=f"planner-{os.getpid()}")
        """Pins (and verifies) the generations every snapshot reads."""
        self.access = AccessLists(self._readers, self._window, scan_cap=acl_scan_cap)
        """Each session's latest access list, shared by every snapshot."""
        self._warmed: dict[Any, Any] = {}  # warmer key -> the log head and watermarks it warmed at
        self.warmer: TailWarmer | None = None
        """Keeps recent tail scans current in the background (None: not started)."""
        if warm_tail_every is not None:
            self.warmer = TailWarmer(self._warm_tail, every_seconds=warm_tail_every,
                                     prepare=self._tail_scan).start()

    # -- public ------------------------------------------------------------------------------

    def search(self, request: Mapping[str, Any], principal: Principal) -> dict[str, Any]:
        """Answer one search request (see :mod:`planner.request`) for ``principal``.

        Returns the SPEC §12 response; raises a :class:`PlannerError` with its HTTP status.
        """
        started = time.monotonic()
        mode = "indexed"
        outcome = "error"
        try:
            parsed = parse_request(request)
            mode = parsed.freshness.mode
            response = self._search(parsed, principal)
            outcome = "ok"
            return response
        except (CursorError, CursorExpired, CursorMismatch, AccessDenied):
            outcome = "refused"
            raise
        except PlannerError:
            raise
        except USLError as exc:
            # A broker, index or embedder failure: the log gets the details (they may name
            # files and hosts), the caller gets what failed and what to do.
            log.error("search failed: %s", exc, exc_info=exc)
            raise PlannerError(f"the search failed ({type(exc).__name__}); the planner log has "
                               "the details",
                               hint="Check `usl status`; retry once the failing part is back.") from exc
        finally:
            usl_queries_total.labels(mode=mode, outcome=outcome).inc()
            usl_query_seconds.labels(mode=mode).observe(time.monotonic() - started)

    def sql(self, body: Any, principal: Principal) -> dict[str, Any]:
        """``POST /v1/sql``: one read-only SELECT over the analytics snapshot (see
        :mod:`planner.sql`), at ``asOfSeq`` (default: what the analytics index covers), with
        the sessions ``principal`` may read by their latest access lists."""
        from planner.sql import SqlAttachment

        if not isinstance(body, Mapping):
            raise QueryError("the request body must be a JSON object",
                             hint='Send e.g. {"query": "SELECT count(*) FROM sessions"}.')
        unknown = sorted(set(body) - {"query", "asOfSeq", "log"})
        if unknown:
            raise QueryError(f"unknown field(s): {', '.join(map(str, unknown))}",
                             hint="Known fields: query, asOfSeq, log.")
        sql_text, log_id, as_of = body.get("query"), body.get("log", "default"), body.get("asOfSeq")
        if not isinstance(sql_text, str) or not sql_text.strip():
            raise QueryError("field 'query' must be a non-empty SQL string")
        log_id = log_field(log_id)
        if as_of is not None and (not isinstance(as_of, int) or isinstance(as_of, bool) or as_of < 0):
            raise QueryError("field 'asOfSeq' must be a non-negative integer")
        with self.snapshot(log_id) as snapshot:
            analytics = snapshot.pin("analytics")
            if analytics is None:
                raise IndexUnavailable(snapshot.problems.get("analytics")
                                       or f"no generation of the analytics index exists "
                                       f"yet for log {log_id!r}",
                                       hint="Wait until `usl status` shows the analytics index.")
            structured = snapshot.pin("structured")
            if as_of is None:
                as_of = min(snapshot.l1_seq, analytics.built_through_seq)
            elif as_of > snapshot.l1_seq:
                raise QueryError(f"asOfSeq {as_of} is past the log's committed seq {snapshot.l1_seq}",
                                 hint=f"Use an asOfSeq of at most {snapshot.l1_seq}.")
            acls = snapshot.access_lists(structured)
            attachment = SqlAttachment(analytics.directories,
                                       structured.directories if structured else None)
            return attachment.query(sql_text, as_of_seq=as_of, principal=principal,
                                    session_acls=acls,
                                    max_result_bytes=self.settings.sql_max_result_bytes)

    @contextmanager
    def snapshot(self, log_id: str, *, read_watermarks: bool = True,
                 unknown_log_hint: str = "Ingest events into it first, or pick another log.",
                 ) -> Iterator[Snapshot]:
        """Hold one view of ``log_id`` for a query: an L1 reader of this planner's pool, the
        committed L1 seq read now, then the log's watermarks (``read_watermarks`` False: none,
        for a cursor that re-pins its own generations). Generations pinned through it are
        released when the block ends, unless :meth:`Snapshot.keep_for` was called.

        An unknown log (no committed seq, no watermark, no partition) is a :class:`NotFound`
        (404), never an index to wait for (503).
        """
        with self.l1_reader() as l1:
            l1_seq = l1.committed_seq(log_id)
            watermarks: dict[str, dict[str, Any]] = {}
            if read_watermarks:
                watermarks = self.watermarks(log_id)
                if l1_seq == 0 and not watermarks and l1.registry.partition_of(log_id) is None:
                    raise NotFound(f"no log named {log_id!r}", hint=unknown_log_hint)
            snapshot = Snapshot(log_id, l1, l1_seq, watermarks, self.pinner, self.access)
            try:
                yield snapshot
            finally:
                snapshot.close()

    def warm_up(self, log_id: str = "default") -> None:
        """Load what the first query of a fresh process would load: the query embedder, the
        tail scan's tokenizer, and the readers of ``log_id``'s current generations (chunk table,
        access lists, vector and text indexes). The first search after ``usl up`` took 1.5 s, of
        which 1.0 s was the embedder's import and load; the API runs this beside its first
        requests. Never raises: a log not yet ingested or an index not yet built is not warmed."""
        try:
            self._tail_scan()
            with self.snapshot(log_id) as snapshot:
                vector = snapshot.pin("vector")
                if vector is not None:
                    embedder, _ = self._embedder_for(vector)
                    if embedder is not None:
                        embedder.embed(["warm up"])
                    self._readers.vector(vector)
                structured = snapshot.pin("structured")
                if structured is not None:
                    self._readers.session_acls(structured)
                    self._readers.chunk_table(structured)
                text = snapshot.pin("text")
                if text is not None:
                    self._readers.search_text(text, "warm up", limit=1)
        except Exception as exc:  # a warm-up must never fail the server's start
            log.debug("warm-up of %s skipped: %s", log_id, exc)

    def session_readable(self, log_id: str, session_id: str, principal: Principal) -> bool:
        """Whether ``principal`` may read ``session_id`` by its latest access list (the rule
        every answer applies; an unknown session is readable by nobody)."""
        from planner.acl import can_read

        with self.snapshot(log_id) as snapshot:
            acl = self.access.acl_of(snapshot.l1, log_id, snapshot.pin("structured"), snapshot.l1_seq,
                                     session_id)
        return acl is not None and can_read(principal, acl)

    def watermarks(self, log_id: str) -> dict[str, dict[str, Any]]:
        """kind → the latest watermark of ``log_id`` (``generationId``, ``builtThroughSeq``,
        ...), from the follower when there is one, else read from the watermark topic."""
        table = (self.follower.snapshot() if self.follower is not None
                 else read_watermarks(self.bootstrap, self.settings))
        return {kind: value for (log, kind), value in table.items() if log == log_id}

    @contextmanager
    def l1_reader(self) -> Iterator[L1Reader]:
        """An L1 reader of this planner's pool (a KafkaConsumer serves one thread at a time)."""
        with self._lock:
            reader = self._idle_l1.pop() if self._idle_l1 else None
            if reader is None and self._registry is None:
                self._registry = LogRegistry(self.bootstrap, self.settings)
        if reader is None:
            reader = L1Reader(self.bootstrap, self.settings, registry=self._registry)
        try:
            yield reader
        except BaseException:
            # A failed read may leave the consumer mid-fetch: start the next query afresh.
            with suppress(Exception):
                reader.close()
            raise
        with self._lock:
            self._idle_l1.append(reader)

    def close(self) -> None:
        if self.warmer is not None:
            self.warmer.stop()
        with self._lock:
            readers, self._idle_l1 = self._idle_l1, []
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.executor.shutdown(wait=True)
        for reader in readers:
            with suppress(Exception):
                reader.close()

    def _legs(self) -> _LegPool | None:
        """The pool that runs a query's legs beside its own thread (None: ``parallel_legs``
        is off)."""
        if not self.parallel_legs:
            return None
        with self._lock:
            if self._pool is None:
                self._pool = _LegPool(_LEG_WORKERS)
            return self._pool

    # -- the query ---------------------------------------------------------------------------

    def _search(self, req: SearchRequest, principal: Principal) -> dict[str, Any]:
        """Steps 1-3 of the module docstring: validate, snapshot, pin; then :meth:`_answer`."""
        if req.tool_results and TOOLRESULTS_SCOPE not in principal.scopes:
            raise AccessDenied("full tool results need the toolresults scope",
                               hint="Ask for a principal with scopes:toolresults, or search "
                                    "without toolResults.")
        policy = policy_fingerprint(principal)
        cursor = self._open_cursor(req, policy) if req.cursor else None
        try:
            with self.snapshot(req.log, read_watermarks=cursor is None,
                               unknown_log_hint="Ingest events into it first, or pick another "
                                                "--log.") as snapshot:
                if cursor is None:
                    if req.freshness.mode == "wait":
                        snapshot.watermarks = self._wait(req, snapshot.l1_seq, snapshot.watermarks)
                    for kind in req.required_kinds:
                        snapshot.pin(kind)
                    l1_seq, window = snapshot.l1_seq, window_for(req.k)
                else:
                    lines, shards = cursor.get("lines") or {}, cursor.get("shards") or {}
                    for kind, generation_id in sorted(cursor["generations"].items()):
                        snapshot.pin_generation(kind, generation_id, lines.get(kind), shards.get(kind))
                    l1_seq, window = int(cursor["l1Seq"]), int(cursor["window"])
                response = self._answer(QueryContext(req, principal, policy, snapshot, l1_seq,
                                                     window, cursor))
                if response.get("cursor") is not None:
                    snapshot.keep_for(self.settings.cursor_ttl_seconds)
                return response
        except CursorExpired:
            usl_cursor_refusals_total.labels(reason="generation_gone").inc()
            raise

    def _answer(self, query: QueryContext) -> dict[str, Any]:
        """Steps 4-6 of the module docstring, one method each, over the pinned snapshot."""
        self._decide(query)
        self._scan_tail(query)
        if self.warmer is not None and query.tail is not None and query.cursor is None:
            self.warmer.note((query.req.log, query.req.mode, query.req.tool_results))
        self._read_access(query)
        self._trim(query)
        self._rank(query)
        hits = self._fuse(query)
        return self._page(query, hits)

    # -- steps -------------------------------------------------------------------------------

    def _decide(self, query: QueryContext) -> None:
        """The freshness decision on the pinned generations (so what the response reports is
        exactly what is read), with every fallback and refusal disclosed."""
        req, pins, problems = query.req, query.snapshot.pins, query.snapshot.problems
        # The chunk-keyed indexes must name the same chunks, or every join below drops hits
        # while the coverage looks complete (planner.coherence): refuse before reading any.
        mismatch = find_mismatch(origin for kind in CHUNK_KINDS
                                 if (pin := pins.get(kind)) is not None for origin in origins_of_pin(pin))
        if mismatch is not None:
            raise IndexMismatch(mismatch.message(req.log), hint=remedy(req.log))
        seen: dict[str, tuple[int, int] | None] = {
            kind: (pin.watermark if (pin := pins.get(kind)) is not None else None)
            for kind in req.required_kinds
        }
        vector_problem = None
        vector_pin = pins.get("vector")
        if vector_pin is not None:
            query.embedder, vector_problem = self._embedder_for(vector_pin)
            if vector_problem is not None:
                seen["vector"] = None
        try:
            decision = choose_as_of(req.freshness, query.l1_seq, seen, req.required_kinds)
        except IndexUnavailable as exc:
            refused = [f"{kind}: {problem}" for kind, problem in sorted(problems.items())
                       if seen.get(kind) is None]
            if not refused:
                raise
            # The generation exists but was refused: say why, not that there is none, and that
            # waiting will not bring it (the refusal names the rebuild that does).
            raise IndexUnavailable(
                "an index of this log cannot be read: " + "; ".join(refused),
                hint="Run the rebuild it names (`usl status` lists the index as stalled); meanwhile "
                     "freshness latest reads the log directly.") from exc
        if vector_pin is not None:
            decision = with_vector_fallback(decision, vector_pin.watermark, vector_problem)
        rebuilt_from = {kind: int((pin.manifest.extra.get("rebuild") or {}).get("fromSeq", 1))
                        for kind, pin in pins.items() if pin is not None}
        decision = with_rebuilt_lines(decision, rebuilt_from)
        decision = with_stalls(decision, query.snapshot.watermarks, req.log)
        if decision.fallbacks and not query.warming:
            usl_query_fallbacks_total.labels(
                reason="vector_unusable" if vector_problem else "vector_missing").inc()
        if problems:
            if not query.warming:
                usl_query_fallbacks_total.labels(reason="generation_unverified").inc()
            decision = with_refusals(decision, problems)
        if query.cursor is not None and decision.as_of_seq != int(query.cursor["asOfSeq"]):
            raise CursorError("the cursor's snapshot cannot be reproduced",
                              hint="Run the query again without a cursor.")
        query.decision = decision
        query.notes["window"] = query.window

    def _scan_tail(self, query: QueryContext) -> None:
        """The L1 tail scan of ``(cut, asOfSeq]``, when the decision asks for one."""
        span = query.decision.tail_scan
        if span is None:
            return
        query.tail = self._run_tail(query.snapshot, query.req, span, query.pin("structured"),
                                    query.cut)
        query.decision = record_tail_scan(query.decision, scanned_through=query.tail.scanned_through)

    def _read_access(self, query: QueryContext) -> None:
        """Access lists up to the committed seq now: the sessions (and the full tool results)
        ``principal`` may read."""
        access = query.snapshot.readable(query.principal, query.pin("structured"))
        if query.cursor is not None:
            # A cursor's page reads no session its first page could not (the access lists as of
            # the first page's L1 seq, which the cursor binds): a session shared since puts its
            # hits into the lists, every hit below moves down a rank, and the next pages served
            # again hits already served. A revocation still applies at once (rrf.after).
            first = query.snapshot.readable(query.principal, query.pin("structured"), query.l1_seq)
            access = access.within(first)
        acls, readable = access.acls, access.sessions
        query.acls, query.readable = acls, readable
        # Every chunk an index holds at or below the cut belongs to a session the structured
        # index knows, so when all known sessions are readable no session filter is needed.
        query.session_filter = None if access.everything else readable
        query.unreadable = access.unreadable
        # planner.acl.can_read_toolresults is can_read plus the scope, and every session in
        # ``readable`` passed can_read: the same set, without judging each session per query.
        query.readable_tools = (readable if query.req.tool_results
                                and TOOLRESULTS_SCOPE in query.principal.scopes else frozenset())

    def _trim(self, query: QueryContext) -> None:
        """The provisional candidates: chunks straddling the cut trimmed to their events <= it,
        and the tail scan's chunks and tool results."""
        structured = query.pin("structured")
        if structured is not None and query.cut > 0:
            query.table = self._readers.chunk_table(structured)
            query.decision, trimmed = self._trimmed(query.table, query.pin("text"), query.cut,
                                                    query.session_filter, query.req.filters,
                                                    query.decision)
            query.provisional += trimmed
            query.notes["trimmed"] = [{"chunkId": c.id, "keptThroughSeq": query.cut} for c in trimmed]
        tail = query.tail
        if tail is not None:
            query.provisional += self._tail_candidates(tail, query.req, query.readable,
                                                       query.readable_tools)
            span = query.decision.tail_scan
            query.notes["tailScan"] = {
                "fromSeq": tail.from_seq, "toSeq": span.to_seq if span else None,
                "scannedThroughSeq": tail.scanned_through, "capEvents": self.tail_cap,
                "readableCandidates": sum(1 for c in query.provisional if c.origin == "tail"),
                "code": "same validation, redaction and chunker as the stream; open turns "
                        "closed as provisional chunks",
            }

    def _rank(self, query: QueryContext) -> None:
        """The ranked lists, each a window of candidates: text (and the whole query as a
        phrase), vector, the in-process tail lists and the full tool results."""
        req, cut, window = query.req, query.cut, query.window
        ranking = tuple(kind for kind in _RANKING[req.mode] if kind in query.decision.required)
        if not ranking:
            ranking = ("text",)
        query.ranking = ranking
        # Indexed candidates: chunks with maxSeq <= cut of readable sessions (and, with
        # filters, matching them), judged inside each engine before its window is taken.
        only: set[str] | None = None
        structured = query.pin("structured")
        if query.table is not None and structured is not None and req.filters:
            kwargs = req.filters.reader_kwargs()
            sessions = query.readable & set(kwargs.pop("session_ids", query.readable))
            only = self._readers.structured(structured).filter_chunk_ids(
                session_ids=sessions, max_seq=cut, **kwargs)
        # The whole query as one exact phrase: its own ranked list, so a chunk that holds the
        # very words asked for counts twice in the fusion and no weak vector list outvotes it.
        phrase = whole_query_phrase(req.query) if "text" in ranking else None
        if phrase is not None:
            # The phrase is the request's own query (explain.request has it); not echoed twice.
            query.notes["phrase"] = {"sources": ["phrase", "tailPhrase",
                                                 *(["toolresultsPhrase"] if req.tool_results else [])],
                                     "rule": "chunks holding the whole query as one phrase "
                                             "(quotes ignored), ranked by BM25"}
        # Hybrid: the query's identifiers (codes, paths, snake_case) as a list of their own, so
        # a chunk naming what the query names exactly counts twice and a vector list that
        # cannot see such words does not outvote it (docs/planner.md, "Identifiers").
        identifiers = identifier_query(req.query) if req.mode == "hybrid" and "text" in ranking else None
        if identifiers is not None:
            query.notes["identifiers"] = {"sources": ["identifier", "tailIdentifier",
                                                      *(["toolresultsIdentifier"] if req.tool_results else [])],
                                          "query": identifiers,
                                          "rule": "chunks holding any of the query's identifiers (words "
                                                  "mixing letters and digits, runs of five or more "
                                                  "capitals, words joined by _ / . or :), ranked by BM25 "
                                                  "over them; only those holding the whole query when "
                                                  "some chunk does"}
        words = content_words(req.query) if req.mode == "hybrid" and "text" in ranking else None
        if words is not None:
            query.notes["text"] = {"sources": ["text", "tail"], "query": words,
                                   "rule": "the query's words without English function words (a, the, "
                                           "to, ...), which match nearly every chunk; the chunks holding "
                                           "the whole query as one phrase first"}
        text_pin = query.pin("text")
        texts = [(source, text) for source, text in (("text", words or req.query), ("phrase", phrase),
                                                     ("identifier", identifiers))
                 if text is not None] if "text" in ranking and text_pin is not None and cut > 0 else []
        vector_pin = query.pin("vector")
        vectors = "vector" in ranking and vector_pin is not None and query.embedder is not None
        # The text lists (text, phrase, identifier) are independent searches too: in the pool
        # they run side by side, as the vector index's segments do.
        pool = self._legs() if vectors or len(texts) > 1 else None

        def text_list(source_text: tuple[str, str]) -> tuple[str, list[str], bool, dict[str, bytes]]:
            source, text = source_text
            assert text_pin is not None
            digests: dict[str, bytes] = {}
            scores: dict[str, float] = {}
            copies: dict[str, int] = {}
            ids, truncated = self._text_list(text_pin, text, window, cut, query.session_filter,
                                             query.unreadable, only, digests, query.table, scores, copies)
            query.list_scores[source] = scores  # one key per list: safe from the pool's threads
            query.copies[source] = copies
            return source, ids, truncated, digests

        def text_lists() -> list[tuple[str, list[str], bool, dict[str, bytes]]]:
            found = pool.map(text_list, texts) if pool is not None else [text_list(t) for t in texts]
            # A phrase no indexed chunk holds may be one pasted with a word cut at an edge: its
            # inner words' holders are read here, in the leg, only when that list is empty.
            if phrase is not None and any(source == "phrase" and not ids for source, ids, _, _ in found):
                query.cut_index = self._cut_phrase_index(query, phrase, only)
            return found

        # Hybrid: the text lists run in the pool while this thread embeds the query and searches
        # the vector index; the vector list then ranks what both found (docs/planner.md,
        # "Performance"). The lists, notes and explain come out in the sequential order.
        pending: Future[list[tuple[str, list[str], bool, dict[str, bytes]]]] | None = None
        found = None
        if vectors and pool is not None and texts:
            pending = pool.offload(text_lists)  # None: both threads busy, so run it here first
        if pending is not None:
            try:
                assert vector_pin is not None
                found = self._vector_candidates(query, vector_pin, only, pool)
            except BaseException:
                wait_for_futures([pending])  # no leg outlives its query
                if pending.exception() is not None:
                    pending.result()  # the text leg ran first when sequential: its error wins
                raise
        for source, ids, truncated, digests in (pending.result() if pending is not None else text_lists()):
            query.digests.update(digests)
            query.lists.append(RankedList(source, ids, window, truncated))
            # BM25 scores are not shown: their corpus statistics include chunks the caller
            # may not read. The rank says all there is to say.
            for chunk_id in ids:
                query.indexed_scores.setdefault(chunk_id, {})
        vector_at = len(query.lists)  # the vector list follows the text-index lists
        if vectors:
            assert vector_pin is not None
            if found is None:  # sequential: after the text lists, as the vector list always was
                found = self._vector_candidates(query, vector_pin, only, pool)
        # Trimmed and tail chunks join the text lists first: in hybrid mode the chunks those
        # lists hold are vector candidates, provisional ones as the index's own.
        self._rank_provisional(query, phrase, identifiers, words)
        if phrase is not None and texts_ranked(query.lists, _PHRASE_LISTS) == 0:
            self._rank_cut_phrase(query, phrase)
        if vectors:
            assert vector_pin is not None and found is not None
            self._rank_vectors(query, vector_pin, only, found, vector_at)
        tools_pin = query.pin("toolresults")
        query.tool_phrase = req.mode == "hybrid" and req.tool_results and phrase is not None
        if req.tool_results and tools_pin is not None and cut > 0:
            # The full tool results by the query, and by its phrase and identifier lists as
            # chunks (and tail tool results, in tailPhrase, tailIdentifier) have theirs: with
            # only the one toolresults list, a tool result holding the very phrase asked for,
            # ranked 1st by it, sat behind every chunk that text and vector both found (55th in
            # hybrid mode while text mode ranked it 1st).
            for source, text in (("toolresults", req.query), ("toolresultsPhrase", phrase),
                                 ("toolresultsIdentifier", identifiers)):
                if text is None:
                    continue
                found_tools, truncated = self._tool_list(tools_pin, text, window, cut,
                                                         query.readable_tools, req.filters)
                if found_tools or source == "toolresults":  # explain shows the main list, empty or not
                    query.lists.append(RankedList(source, [c.id for c in found_tools], window, truncated))
                for candidate in found_tools:
                    query.candidates.setdefault(candidate.id, candidate)
            if phrase is not None and not texts_ranked(query.lists, _TOOL_PHRASE_LISTS) \
                    and (query.cut_phrase is not None or not texts_ranked(query.lists, _PHRASE_LISTS)):
                self._rank_cut_tool_phrase(query, tools_pin, phrase)

    def _cut_phrase_index(self, query: QueryContext, phrase: str, only: set[str] | None,
                          ) -> tuple[list[str], bool, dict[str, float], dict[str, bytes]] | None:
        """The indexed chunks holding ``phrase`` pasted with a word cut at an edge
        (:class:`CutPhrase`), in the index's order of its inner words as a phrase."""
        cut, text_pin = CutPhrase.of(phrase), query.pin("text")
        if cut is None or text_pin is None:
            return None
        scores: dict[str, float] = {}
        digests: dict[str, bytes] = {}
        ids, truncated = self._text_list(text_pin, cut.query, query.window, query.cut, query.session_filter,
                                         query.unreadable, only, digests, query.table, scores)
        texts = self._readers.texts(text_pin, ids) if ids else {}
        kept = [chunk_id for chunk_id in ids if cut.holds(texts.get(chunk_id, ""))]
        return (kept, truncated, {chunk_id: scores[chunk_id] for chunk_id in kept},
                {chunk_id: digests[chunk_id] for chunk_id in kept if chunk_id in digests})

    def _rank_cut_phrase(self, query: QueryContext, phrase: str) -> None:
        """The phrase lists of a query pasted with a word cut at either edge, when no chunk
        holds the whole query: the chunks holding its inner words as a phrase, the words at its
        edges being the end (first) and start (last) of the words around them
        (:class:`CutPhrase`); they lead the text lists, as the holders of a whole phrase do.

        A phrase copied from a session often starts or ends inside a word (`can ask me quest`).
        No chunk holds it whole, so the phrase list was empty and the text list ranked the
        words: the session text mode ranked 7th came past hybrid's 50th result, chunks that
        the text and vector lists both ranked middling outvoting it. The inner words are
        searched as a phrase, so the index ranks them with its statistics and tail chunks are
        merged by the same scores, and only the chunks whose edge words continue them stay."""
        cut = CutPhrase.of(phrase)
        if cut is None:
            return
        window = query.window
        position = next((i for i, ranked in enumerate(query.lists) if ranked.source == "phrase"), None)
        textual = "text" in query.ranking
        holders = [c for c in query.provisional if (textual or c.kind in TOOL_KINDS) and cut.holds(c.text or "")]
        chunks = [c for c in holders if c.kind == "chunk"]
        merged: set[str] = set()
        if position is not None and query.cut_index is not None:
            kept, truncated, scores, digests = query.cut_index
            query.digests.update(digests)
            for chunk_id in kept:
                query.indexed_scores.setdefault(chunk_id, {})
            query.lists[position] = RankedList("phrase", kept, window, truncated)
            query.list_scores["phrase"] = scores
            merged = self._merge_into_index_lists(query, chunks, [("phrase", cut.query)])
        # Tail tool results, and tail chunks the index's list did not take, in a list of their
        # own, as for a whole phrase (_rank_provisional).
        own = [c for c in holders if not ("phrase" in merged and c.kind == "chunk")]
        if own:
            ranked = rank_texts(clauses_of(cut.query), [(c.id, c.text or "") for c in own])
            if ranked:
                query.lists = [listed for listed in query.lists if listed.source != "tailPhrase"]
                query.lists.append(RankedList("tailPhrase", [i for i, _ in ranked[:window]], window,
                                              len(ranked) > window))
                query.list_scores["tailPhrase"] = dict(ranked[:window])
                by_id = {c.id: c for c in own}
                for chunk_id, score in ranked[:window]:
                    by_id[chunk_id].scores["tailPhrase"] = score
        if texts_ranked(query.lists, _PHRASE_LISTS):
            query.cut_phrase = cut
            query.notes.setdefault("phrase", {})["cutEdges"] = {"query": cut.query, "rule": _CUT_RULE}

    def _rank_cut_tool_phrase(self, query: QueryContext, pin: IndexPin, phrase: str) -> None:
        """The full tool results holding ``phrase`` pasted with a word cut at an edge, when none
        holds it whole and no chunk does either (:meth:`_rank_cut_phrase`): a fragment copied
        from a tool's output (`"price": 89}, {"origin": "PH`) ends inside a word more often
        than not, and without it hybrid ranked the output holding it first for 8 of 30 such
        fragments where text did for 16."""
        cut = CutPhrase.of(phrase)
        if cut is None:
            return
        found, truncated = self._tool_list(pin, cut.query, query.window, query.cut, query.readable_tools,
                                           query.req.filters)
        kept = [candidate for candidate in found if cut.holds(candidate.text or "")]
        if not kept:
            return
        query.lists.append(RankedList("toolresultsPhrase", [c.id for c in kept], query.window, truncated))
        for candidate in kept:
            query.candidates.setdefault(candidate.id, candidate)
        query.cut_phrase = cut
        query.notes.setdefault("phrase", {})["cutEdges"] = {"query": cut.query, "rule": _CUT_RULE}

    def _vector_candidates(self, query: QueryContext, pin: IndexPin, only: set[str] | None,
                           pool: _LegPool | None) -> _VectorCandidates:
        """The query's embedding and the vector index's own candidates (the part of the vector
        list that does not depend on the text lists)."""
        allowed: Callable[[str], bool] | None = None
        row_mask = None
        if query.table is not None:
            rows, cut, session_filter = query.table.rows, query.cut, query.session_filter
            # The filter evaluated inside the engine, as a row mask per segment; ``permit``
            # still judges the hits it returns (docs/planner.md, "The vector leg's filter inside
            # the engine").
            row_mask = query.table.row_filter(cut, session_filter, only)

            def permit(chunk_id: str) -> bool:
                row = rows.get(chunk_id)
                return (row is not None and row.max_seq <= cut
                        and (session_filter is None or row.session_id in session_filter)
                        and (only is None or chunk_id in only))

            allowed = permit
        query_vector = np.asarray(query.embedder.embed([query.req.query]), dtype=np.float32)[0]
        if not np.any(query_vector) or not (query.cut > 0 and allowed is not None):
            return _VectorCandidates(query_vector, None, [])
        reader = self._readers.vector(pin)
        # The window's nearest distinct texts: copies of one text have one vector and would
        # fill it (distinct_texts).
        limit, cap = query.window + 1, _DISTINCT_OVERFETCH * (query.window + 1)
        text_pin = query.pin("text")
        stored: dict[str, bytes] = {}
        while True:
            hits = reader.search(query_vector, limit=limit, allowed=allowed,
                                 fan_out=pool.map if pool is not None else None, row_mask=row_mask)
            # Segments written without digests (older sinks): the text index's, as
            # _collapse_duplicates asks it, so both kinds of segment give one answer.
            # A wider search asks only for the hits the narrower one did not bring.
            missing = [hit.chunk_id for hit in hits if hit.digest is None and hit.chunk_id not in stored]
            if missing and text_pin is not None:
                stored.update(self._readers.digests(text_pin, missing) or {})
            found, more, passed = distinct_texts(hits, query.window + 1, stored,
                                                 rows=query.table.rows if query.table is not None else None)
            if more or len(hits) < limit or limit >= cap:
                break
            limit *= 4
        query.copies["vector"] = passed
        return _VectorCandidates(query_vector, reader, found)

    def _rank_vectors(self, query: QueryContext, pin: IndexPin, only: set[str] | None,
                      found: _VectorCandidates, position: int) -> None:
        # In hybrid mode the chunks the text lists found are candidates of the vector list too:
        # ranked by their best event like the vector index's own (docs/planner.md).
        found_by_text = [chunk_id for ranked_list in query.lists
                         if ranked_list.source in ("text", "phrase", "identifier")
                         for chunk_id in ranked_list.ids]
        ranked, truncated, note = self._vector_list(
            pin, found, query.window, query.provisional, query.embedder, found_by_text)
        query.notes["vector"] = note
        # The vector index's own candidates bring their texts' digests from their segments, so
        # _collapse_duplicates asks the text index only for those whose segment has none (a
        # text list's digest of the same chunk came first and is kept).
        for hit in found.hits:
            if hit.digest is not None:
                query.digests.setdefault(hit.chunk_id, hit.digest)
        if ranked is not None:
            query.lists.insert(position, RankedList("vector", [chunk_id for chunk_id, _ in ranked],
                                                    query.window, truncated))
            query.list_scores["vector"] = dict(ranked)
            for chunk_id, score in ranked:
                query.indexed_scores.setdefault(chunk_id, {})["vector"] = score

    def _rank_provisional(self, query: QueryContext, phrase: str | None, identifiers: str | None,
                          words: str | None) -> None:
        """Trimmed and tail texts (and tail tool results) ranked in-process; a trimmed chunk
        whose kept text no longer matches the query drops out here.

        Chunks are scored with the text index's statistics and merged into the index's list
        of the same query by score (docs/planner.md, "Tail chunks in the index's lists"): a
        list of their own would give the tail's best match the index's best match's vote,
        however poor a match it is. Tool results (the tool-results index is another corpus),
        and every text when the index has no list or its engine no statistics, keep their
        own lists, ranked by BM25 over themselves."""
        textual = [c for c in query.provisional
                   if "text" in query.ranking or c.kind in TOOL_KINDS]
        if not textual:
            return
        by_id = {c.id: c for c in textual}
        window = query.window
        sources = (("tail", "text", words or query.req.query), ("tailPhrase", "phrase", phrase),
                   ("tailIdentifier", "identifier", identifiers))
        merged = self._merge_into_index_lists(query, [c for c in textual if c.kind == "chunk"],
                                              [(indexed, text) for _, indexed, text in sources])
        for source, indexed, text in sources:
            own = [(c.id, c.text or "") for c in textual if not (indexed in merged and c.kind == "chunk")]
            ranked = rank_texts(clauses_of(text), own) if text is not None and own else []
            if ranked:
                query.lists.append(RankedList(source, [i for i, _ in ranked[:window]], window,
                                              len(ranked) > window))
                query.list_scores[source] = dict(ranked[:window])
                for chunk_id, score in ranked[:window]:
                    by_id[chunk_id].scores[source] = score

    def _merge_into_index_lists(self, query: QueryContext, chunks: Sequence[Candidate],
                                lists: Sequence[tuple[str, str | None]]) -> set[str]:
        """Merge ``chunks`` (trimmed and tail chunks) into each text-index list named in
        ``lists`` (source, its query) that this query has, by BM25 under the index's own
        statistics (:func:`planner.local.rank_texts_as_index`); the sources merged into."""
        text_pin = query.pin("text")
        present = {ranked.source: position for position, ranked in enumerate(query.lists)
                   if ranked.source in query.list_scores}
        wanted = [(source, text) for source, text in lists if text is not None and source in present]
        if not chunks or text_pin is None or not wanted:
            return set()
        parsed = [(source, clauses_of(text)) for source, text in wanted]
        terms = sorted({term for _, clauses in parsed
                        for term in (*clauses.terms, *(t for phrase in clauses.phrases for t in phrase))})
        statistics = self._readers.text_statistics(text_pin, terms)
        if statistics is None or statistics[0].max_docs <= 0:
            return set()
        docs = [(c.id, c.text or "") for c in chunks]
        merged: set[str] = set()
        for source, clauses in parsed:
            position = present[source]
            listed = query.lists[position]
            scores = query.list_scores[source]
            ranked = rank_texts_as_index(clauses, docs, *statistics)
            # The index's ids first: a provisional chunk never shares an id with an indexed hit
            # (the index answers at or below the cut, these above it), but a copy never counts twice.
            pairs = {chunk_id: scores[chunk_id] for chunk_id in listed.ids}
            for chunk_id, score in ranked:
                pairs.setdefault(chunk_id, score)
            order = sorted(pairs.items(), key=lambda item: (-item[1], item[0]))
            query.lists[position] = RankedList(source, [chunk_id for chunk_id, _ in order[:query.window]],
                                               query.window, listed.truncated or len(order) > query.window)
            query.list_scores[source] = dict(order[:query.window])
            merged.add(source)
        earlier = query.notes.get("provisionalMerged", {}).get("sources", [])
        query.notes["provisionalMerged"] = {
            "sources": sorted(merged.union(earlier)),
            "rule": "trimmed and tail chunks scored by BM25 with the text index's statistics and "
                    "merged into the index's list of the same query by score"}
        return merged

    def _fuse(self, query: QueryContext) -> list[FusedHit]:
        """Every listed candidate resolved (indexed ones from the chunk table), the lists fused
        by RRF, and, for a cursor's page, what follows its last hit."""
        candidates, cut = query.candidates, query.cut
        for candidate in query.provisional:
            candidates[candidate.id] = candidate
        index_ids = [chunk_id for chunk_id in query.indexed_scores if chunk_id not in candidates]
        if index_ids and query.table is not None:
            for chunk_id, row in query.table.records(index_ids).items():
                if int(row["maxSeq"]) > cut:  # never: the engines filter maxSeq <= cut
                    continue
                candidates[chunk_id] = Candidate(
                    chunk_id, "chunk", "index", row["sessionId"], float(row["eventTime"] or 0.0),
                    row, scores=query.indexed_scores[chunk_id])
        query.lists = identifiers_within_phrase(
            [RankedList(ranked.source, [i for i in ranked.ids if i in candidates], ranked.window, ranked.truncated)
             for ranked in query.lists])
        # Runs of equal scores newest first before the first copy of each text is kept: the
        # engines' chunkId order carries the redaction policy's hash (docs/planner.md, "Ties").
        recency = {chunk_id: (candidate.event_time, _last_seq(candidate))
                   for chunk_id, candidate in candidates.items() if candidate.kind == "chunk"}
        query.lists = [newest_first_among_ties(ranked, query.list_scores[ranked.source], recency)
                       if ranked.source in query.list_scores else ranked for ranked in query.lists]
        if query.req.mode == "hybrid" or query.cut_phrase is not None:
            query.lists = phrase_holders_first(query.lists)
        if query.tool_phrase:
            query.lists = tool_phrase_holders_first(query.lists)
        self._collapse_duplicates(query)
        used = {chunk_id for ranked in query.lists for chunk_id in ranked.ids}
        hits = self._one_per_text(query, fuse(query.lists, event_time={i: candidates[i].event_time
                                                                        for i in used}))
        if query.cursor is not None:
            hits = after(hits, last_sort_key(query.cursor))
            query.notes["cursor"] = {"continuesAfter": query.cursor["lastKey"]}
        return hits

    def _collapse_duplicates(self, query: QueryContext) -> None:
        """Each chunk list without the chunks whose text a higher one in it already has
        (:func:`planner.rrf.collapse_duplicates`); the texts read here serve the page too."""
        candidates = query.candidates
        chunk_ids = {chunk_id for ranked in query.lists if ranked.source not in _UNCOLLAPSED
                     for chunk_id in ranked.ids if candidates[chunk_id].kind == "chunk"}
        digests = {chunk_id: text_digest(text) for chunk_id in chunk_ids
                   if (text := candidates[chunk_id].text) is not None}
        # Indexed candidates: the digest the text engine gave with its hit or the vector
        # segment with its own, else (candidates of segments without digests) the digest the
        # text engine keeps, or else the stored text (the page reads the texts of its own hits
        # later).
        for chunk_id in chunk_ids - digests.keys():
            if chunk_id in query.digests:
                digests[chunk_id] = query.digests[chunk_id]
        missing = [chunk_id for chunk_id in chunk_ids if chunk_id not in digests]
        text_pin = query.pin("text")
        stored = self._readers.digests(text_pin, missing) if missing and text_pin is not None else None
        if stored is not None:
            # A chunk the index lacks has no text: never collapsed (as _NO_TEXT below).
            digests.update(stored)
        elif missing and text_pin is not None:
            texts = self._readers.texts(text_pin, missing)
            for chunk_id in missing:
                candidates[chunk_id].text = texts.get(chunk_id, "")
                digests[chunk_id] = text_digest(candidates[chunk_id].text or "")
        # Chunks without text (none stored) have nothing in common: never collapsed.
        digests = {chunk_id: digest for chunk_id, digest in digests.items() if digest != _NO_TEXT}
        query.chunk_digests = digests
        collapsed: dict[str, dict[str, int]] = {}
        lists = []
        for ranked in query.lists:
            if ranked.source not in _UNCOLLAPSED:
                ranked, stands_for = collapse_duplicates(ranked, digests)
                # The copies an engine passed over count for the chunk kept for their text, which
                # is another one when a newer twin (a tail chunk) joined the list above it.
                kept: dict[Any, str] = {digests.get(chunk_id, chunk_id): chunk_id for chunk_id in ranked.ids}
                for chunk_id, count in query.copies.get(ranked.source, {}).items():
                    holder = kept.get(digests.get(chunk_id, chunk_id))
                    if holder is not None:
                        stands_for[holder] = stands_for.get(holder, 0) + count
                if stands_for:
                    collapsed[ranked.source] = stands_for
            lists.append(ranked)
        query.lists = lists
        if collapsed:
            query.notes["duplicates"] = {
                "rule": "a chunk whose text equals that of a chunk ranked higher in the same "
                        "list is left out of that list; standsFor counts them per kept chunk",
                "standsFor": collapsed}

    @staticmethod
    def _one_per_text(query: QueryContext, hits: list[FusedHit]) -> list[FusedHit]:
        """The fused hits without those whose text a hit above them already has: copies that
        different lists kept (an indexed chunk and its twin in the L1 tail) show once. Depends
        only on the fused order, so every page size sees the same list."""
        kept, across = first_copies([hit.chunk_id for hit in hits], query.chunk_digests)
        if across:
            notes = query.notes.setdefault("duplicates", {"standsFor": {}})
            notes["rule"] = ("a chunk whose text equals that of a chunk ranked higher in the same "
                             "list is left out of that list, and a fused hit whose text equals "
                             "that of a hit above it is left out of the results; standsFor counts "
                             "them per kept chunk (per list, and 'fused' for the results)")
            notes["standsFor"]["fused"] = across
        return [hits[i] for i in kept] if across else hits

    def _page(self, query: QueryContext, hits: list[FusedHit]) -> dict[str, Any]:
        """The page of ``k`` hits, the cursor to the next one and, when asked, the explain."""
        req, decision, window = query.req, query.decision, query.window
        as_of = decision.as_of_seq
        page = hits[: req.k]
        end = depth_end(query.lists, window) if len(hits) <= req.k else None
        query.notes["depth"] = {"window": window, "rule": "RRF over each source's top window; "
                                "the window does not depend on the page size and the cursor "
                                "binds it"}
        if end is not None:
            query.notes["depth"]["end"] = end
        self._fill_texts(page, query.candidates, query.pin("text"))
        results = [result_row(hit, query.candidates[hit.chunk_id], as_of) for hit in page]
        cursor = None
        if len(hits) > len(page) and page:
            generations = {kind: pin for kind, pin in query.snapshot.pins.items()
                           if pin is not None and kind in decision.required}
            body = cursor_payload(
                log_id=req.log, as_of_seq=as_of,
                generations={kind: pin.generation_id for kind, pin in generations.items()},
                query_hash=req.query_hash(), policy=query.policy, last_key=sort_key(page[-1]),
                page_size=req.k,
            )
            body.update({"l1Seq": query.l1_seq, "window": window,
                         "lines": {kind: pin.line for kind, pin in generations.items()}})
            shards = {kind: {part.shard: [part.generation_id, part.line] for part in pin.parts}
                      for kind, pin in generations.items() if pin.parts}
            if shards:  # a sharded kind: the next page re-pins every shard's generation
                body["shards"] = shards
            cursor = encode_cursor(body, key=self._cursor_key, now=time.time())
        response: dict[str, Any] = {
            "asOfSeq": as_of,
            "freshness": decision.to_json(),
            "results": results,
            "cursor": cursor,
        }
        if end is not None:
            response["end"] = end
        if req.explain:
            response["explain"] = self._explain(query, page)
        return response

    def _explain(self, query: QueryContext, page: list[FusedHit]) -> dict[str, Any]:
        principal = query.principal
        query.notes["access"] = {"principal": str(principal), "policy": query.policy,
                                 "toolResultsScope": TOOLRESULTS_SCOPE in principal.scopes,
                                 "rule": "latest access list per session, from the structured "
                                         "index and newer L1 events; unreadable sessions are "
                                         "removed inside each engine before ranking"}
        return build_explain(
            request={**query.req.defining(), "k": query.req.k},
            decision=query.decision, cut=query.cut,
            generations={kind: generation_json(pin)
                         for kind, pin in query.snapshot.pins.items() if pin is not None},
            lists=query.lists, page=page, candidates=query.candidates, notes=query.notes,
        )

    # -- helpers of the steps ----------------------------------------------------------------

    def _open_cursor(self, req: SearchRequest, policy: str) -> dict[str, Any]:
        assert req.cursor is not None
        try:
            payload = decode_cursor(req.cursor, key=self._cursor_key, now=time.time(),
                                    ttl_seconds=self.settings.cursor_ttl_seconds)
            check_binding(payload, query_hash=req.query_hash(), policy=policy, log_id=req.log)
            last_sort_key(payload)
            for name in ("l1Seq", "window"):
                value = payload.get(name)
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise CursorError("the cursor is signed but lacks fields this version needs",
                                      hint="Run the query again without a cursor.")
            if not isinstance(payload.get("generations"), dict):
                raise CursorError("the cursor is signed but malformed",
                                  hint="Run the query again without a cursor.")
        except CursorExpired:
            usl_cursor_refusals_total.labels(reason="expired").inc()
            raise
        except CursorMismatch:
            usl_cursor_refusals_total.labels(reason="mismatch").inc()
            raise
        except CursorError:
            usl_cursor_refusals_total.labels(reason="invalid").inc()
            raise
        return payload

    def _wait(self, req: SearchRequest, l1_seq: int,
              watermarks: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Poll until every required index reaches ``l1_seq`` or the wait deadline passes."""
        assert req.freshness.wait_seconds is not None
        deadline = time.monotonic() + req.freshness.wait_seconds
        while True:
            seen = {kind: _as_watermark(watermarks.get(kind)) for kind in req.required_kinds}
            if wait_satisfied(l1_seq, seen, req.required_kinds):
                return watermarks
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return watermarks
            if self.follower is not None:
                self.follower.wait_for_change(min(remaining, 0.5))
            else:
                time.sleep(min(remaining, 0.25))
            watermarks = self.watermarks(req.log)

    def _run_tail(self, snapshot: Snapshot, req: SearchRequest, span: SeqRange,
                  structured: IndexPin | None, cut: int) -> TailResult:
        """Scan ``span`` of L1 (at most ``tail_cap`` events), continuing the newest cached
        snapshot of the same scan when there is one."""
        dedup = structured is not None and cut > 0
        key = (req.log, span.from_seq, structured.key if dedup and structured else None,
               req.tool_results)
        scan = self._tail_scan()
        base = self._tails.best(key, span.to_seq) or TailSnapshot.start(span.from_seq)
        scanned = base
        room = self.tail_cap - base.events_read
        if base.through < span.to_seq and room > 0:
            events = self._window.read(snapshot.l1, req.log, base.through + 1, span.to_seq,
                                       limit=room + 1)
            to_seq = span.to_seq
            if len(events) > room:  # the cap: stop after the last event that fits
                events = events[:room]
                to_seq = events[-1][0] if events else base.through

            def known(ids: Any) -> set[str]:
                assert structured is not None
                return self._readers.known_event_ids(structured, ids, cut)

            def secrets(sessions: Any) -> dict[str, list[list[Any]]]:
                assert structured is not None
                return self._readers.session_secrets(structured, sessions, cut)

            scanned = scan.extend(base, events, to_seq=to_seq,
                                  known_event_ids=known if dedup else None,
                                  session_acls=snapshot.access_lists(structured, to_seq),
                                  session_secrets=secrets if dedup else None,
                                  want_tool_results=req.tool_results)
            self._tails.put(key, scanned)
        usl_tail_scan_events.observe(scanned.events_read)
        return scan.result(scanned)

    def _trimmed(
        self, table: ChunkTable, text_pin: IndexPin | None, cut: int, sessions: AbstractSet[str] | None,
        filters: Filters, decision: SnapshotDecision,
    ) -> tuple[SnapshotDecision, list[Candidate]]:
        """Readable chunks straddling ``cut`` (``sessions``: None = all), trimmed to it."""
        rows = table.straddling(cut, sessions)
        if not rows:
            return decision, []
        texts = self._readers.texts(text_pin, [row["chunkId"] for row in rows]) if text_pin else {}
        out: list[Candidate] = []
        lost: list[SeqRange] = []
        for row in rows:
            text = texts.get(row["chunkId"])
            trimmed = trim_chunk({**row, "text": text}, cut) if text is not None else None
            if trimmed is None:
                lost.append(SeqRange(int(row["minSeq"]), cut))
                continue
            if not filters.admits_chunk(trimmed):
                continue
            out.append(Candidate(row["chunkId"], "chunk", "trimmed", row["sessionId"],
                                 posix_seconds(trimmed.get("eventTime")), trimmed, text=trimmed["text"]))
        if lost:
            decision = with_uncovered(
                decision, lost, f"{len(lost)} readable chunk(s) straddling seq {cut} could not be "
                                "trimmed to their events <= it and were left out")
        return decision, out

    def _tail_candidates(self, tail: TailResult, req: SearchRequest, readable: AbstractSet[str],
                         readable_tools: AbstractSet[str]) -> list[Candidate]:
        out: list[Candidate] = []
        for chunk in tail.chunks:
            if chunk["sessionId"] in readable and req.filters.admits_chunk(chunk):
                out.append(Candidate(chunk["chunkId"], "chunk", "tail", chunk["sessionId"],
                                     posix_seconds(chunk.get("eventTime")), chunk, text=chunk["text"]))
        for record in tail.tool_results:
            if record["sessionId"] in readable_tools and req.filters.admits_tool_result(record):
                out.append(tool_candidate(record, origin="tail"))
        return out

    def _text_list(self, pin: IndexPin, query: str, window: int, cut: int,
                   sessions: AbstractSet[str] | None, unreadable: AbstractSet[str],
                   only: set[str] | None, digests: dict[str, bytes],
                   table: ChunkTable | None,
                   scores: dict[str, float] | None = None,
                   copies: dict[str, int] | None = None) -> tuple[list[str], bool]:
        # The hits' ids from the index's key column, mapped through the structured generation's
        # ids (a hit the table lacks is dropped from the fusion anyway; the engine reads its
        # stored document to name it all the same).
        keys = table.chunk_keys if table is not None else None
        # The session filter names whichever side is smaller: tantivy gathers every chunk of
        # the sessions a term set names, so keeping 90% of 20 000 sessions cost more than the
        # search. Leaving out the unreadable ones keeps the same chunks, because every chunk an
        # index holds at or below the cut belongs to a session the structured index knows.
        exclude: AbstractSet[str] = frozenset()
        readable = len(sessions) if sessions is not None else 0
        if sessions is not None and len(unreadable) < len(sessions):
            sessions, exclude = None, unreadable
        limit = window + 1
        max_seq = cut if above_cut(pin, cut) else None
        # Leaving out many chunks costs the engine more than judging its own top hits from the
        # chunk table's rows (sinks.text.base.HitCheck; the same hits either way): about 30 ns
        # per chunk left out against ~1 ms for the wider top, so below 20 000 chunks left out
        # the filter stays inside (docs/planner.md, "Filters that keep most chunks").
        checked = None
        if table is not None and sessions is None and only is None and exclude:
            share = readable / (readable + len(exclude))
            if len(table.rows) * (1.0 - share) >= _CHECK_LEFT_OUT:
                checked = HitCheck(_keeps(table.rows, exclude, max_seq), share)
        distinct_cap = _DISTINCT_OVERFETCH * (window + 1)
        while True:
            raw = self._readers.search_text(pin, query, limit=limit, max_seq=max_seq,
                                            session_ids=sessions, exclude_sessions=exclude,
                                            chunk_ids_by_key=keys, checked=checked)
            kept = [hit for hit in raw if only is None or hit.chunk_id in only]
            found, more, passed = distinct_texts(kept, window, rows=table.rows if table is not None else None)
            if len(raw) < limit or limit >= _MAX_OVERFETCH:
                break
            if len(kept) > window and (more or limit >= distinct_cap):
                break
            limit *= 4
        for hit in found:
            if hit.digest is not None:
                digests[hit.chunk_id] = hit.digest
            if scores is not None:
                scores[hit.chunk_id] = hit.score
        if copies is not None:
            copies.update(passed)
        return [hit.chunk_id for hit in found], more or len(raw) >= limit

    def _vector_list(
        self, pin: IndexPin, found: _VectorCandidates, window: int,
        provisional: list[Candidate], embedder: Any, found_by_text: Sequence[str] = (),
    ) -> tuple[list[tuple[str, float]] | None, bool, dict[str, Any]]:
        query_vector = found.query_vector
        note: dict[str, Any] = {"embedding": dict(pin.manifest.embedding or {}),
                                "similarity": "cosine"}
        if not np.any(query_vector):
            note["skipped"] = "the query has no word the embedding model knows"
            return None, False, note
        scored: list[tuple[str, float]] = []
        hits = found.hits if found.reader is not None else []
        chunks = [c for c in provisional if c.kind == "chunk" and c.text]
        rows: list[np.ndarray] = []
        nearest = {hit.chunk_id for hit in hits}
        if chunks:
            # Trimmed and tail chunks are embedded now, with the model that built the index.
            from sinks.vector import cosine  # faiss loads with the first vector search

            rows, wholes, flat = self._provisional_vectors(
                embedder, [(c.text or "", c.record.get("evidence") or ()) for c in chunks])
            # Candidates as the index will have them once it holds these chunks: the window's
            # nearest by whole vector over the index's and these together (the index's search
            # gave its window + 1 nearest, in the same order and score), and what the text
            # lists found. With every one of them a candidate, a tail chunk that `latest` ranked
            # 1st by its best event was no candidate at the same head once indexed, and an
            # indexed chunk the tail pushes out of the window was one under `latest` only
            # (docs/planner.md, "Vectors per event").
            joint = [(hit.score, hit.chunk_id) for hit in hits]
            joint += [(cosine(whole, query_vector), c.id) for c, whole in zip(chunks, wholes, strict=True)]
            joint.sort(key=lambda item: (-item[0], item[1]))
            nearest = {chunk_id for _, chunk_id in joint[:window + 1]}
            note["embeddedNow"] = len(chunks)
            note["eventsEmbeddedNow"] = flat
        by_text = set(found_by_text)
        if found.reader is not None:
            # Found by the whole chunk (or by the text lists), ranked by its best event
            # (docs/planner.md, "Vectors per event").
            indexed = [hit.chunk_id for hit in hits if hit.chunk_id in nearest]
            provisional_ids = {c.id for c in chunks}
            pool = dict.fromkeys(indexed + [i for i in found_by_text if i not in provisional_ids])
            best_event = found.reader.event_scores(query_vector, pool)
            if found_by_text:
                note["candidates"] = {"vectorIndex": len(indexed), "fromText": len(pool) - len(indexed)}
            # An orthogonal or opposite vector is no evidence of relevance at all.
            scored += [(chunk_id, score) for chunk_id, score in best_event.items() if score > VECTOR_FLOOR]
        if chunks:
            admitted = 0
            for candidate, block in zip(chunks, rows, strict=True):
                if candidate.id not in nearest and candidate.id not in by_text:
                    continue
                admitted += 1
                score = max(cosine(row, query_vector) for row in block)
                if score > VECTOR_FLOOR:
                    candidate.scores["vector"] = float(score)
                    scored.append((candidate.id, float(score)))
            note["provisionalCandidates"] = admitted
        scored.sort(key=lambda item: (-item[1], item[0]))
        # The relevance floor: a weak neighbour adds noise to the fusion, never an answer.
        floor = max(VECTOR_FLOOR, VECTOR_RELATIVE_FLOOR * scored[0][1]) if scored else VECTOR_FLOOR
        kept = [item for item in scored if item[1] >= floor and item[1] > VECTOR_FLOOR]
        note["floor"] = {"cosineAbove": VECTOR_FLOOR, "shareOfBest": VECTOR_RELATIVE_FLOOR,
                         "applied": floor}
        dropped = {chunk_id for chunk_id, _ in scored[len(kept):]}
        for candidate in chunks:
            if candidate.id in dropped:
                candidate.scores.pop("vector", None)
        return kept[:window], len(kept) > window, note

    def _tool_list(self, pin: IndexPin, query: str, window: int, cut: int, readable: AbstractSet[str],
                   filters: Filters) -> tuple[list[Candidate], bool]:
        reader = self._readers.toolresults(pin)
        tool_names = filters.values.get("toolName")
        limit = window + 1
        while True:
            raw = reader.search(query, limit=limit, max_seq=cut, session_ids=readable,
                                tool_names=list(tool_names) if tool_names else None)
            kept = [row for row in raw if filters.admits_tool_result(row)]
            if len(kept) > window or len(raw) < limit or limit >= _MAX_OVERFETCH:
                break
            limit *= 4
        out = []
        for row in kept[:window]:
            out.append(tool_candidate(row, origin="index"))
        return out, len(kept) > window

    def _provisional_vectors(
        self, embedder: Any, chunks: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    ) -> tuple[list[np.ndarray], np.ndarray, int]:
        """(the vectors each chunk ranks by, the vector of each whole text, events embedded) for
        ``(text, evidence)`` pairs: a chunk ranks by its best event, as in the index
        (docs/planner.md, "Vectors per event"), by its whole text when it has one event or its
        events no word the model knows, and is a candidate by its whole text. Each text is
        served from the cache when an earlier query or the warmer embedded it."""
        from sinks.vector.spans import evidence_texts

        events = [evidence_texts(text, evidence) for text, evidence in chunks]
        flat = [piece for pieces in events for piece in pieces]
        embedded = self._embed_chunks(embedder, flat) if flat else np.zeros((0, 0), dtype=np.float32)
        # The whole texts too, as the sink embeds them: the index finds its candidates by them.
        wholes = self._embed_chunks(embedder, [text for text, _ in chunks]) if chunks \
            else np.zeros((0, 0), dtype=np.float32)
        rows: list[np.ndarray] = []
        start = 0
        for number, pieces in enumerate(events):
            block = embedded[start:start + len(pieces)]
            start += len(pieces)
            block = block[np.any(block != 0, axis=1)] if len(block) else block
            rows.append(block if len(block) else wholes[number][None, :])
        return rows, wholes, len(flat)

    def _warm_tail(self, key: Any) -> None:
        """What a ``latest`` query of ``key`` (log, mode, tool results) would compute before
        ranking, computed now: the snapshot, the decision, the tail scan continued to the log
        head (cached as the query's own would be) and the vectors of its chunks."""
        log_id, mode, tool_results = key
        req = SearchRequest(query="", log=log_id, freshness=Freshness("latest"), mode=mode,
                            tool_results=tool_results)
        with self.snapshot(log_id) as snapshot:
            moved = (snapshot.l1_seq, sorted((kind, value.get("generationId"), value.get("builtThroughSeq"))
                                             for kind, value in snapshot.watermarks.items()))
            if self._warmed.get(key) == moved:
                return
            for kind in req.required_kinds:
                snapshot.pin(kind)
            query = QueryContext(req, _WARMER, "", snapshot, snapshot.l1_seq, RANK_DEPTH, None, warming=True)
            self._decide(query)
            self._scan_tail(query)
            if query.tail is not None and query.embedder is not None and "vector" in query.decision.required:
                chunks = [(chunk["text"], chunk.get("evidence") or ()) for chunk in query.tail.chunks
                          if chunk.get("text")]
                if chunks:
                    self._provisional_vectors(query.embedder, chunks)
            self._warmed[key] = moved

    def _embed_chunks(self, embedder: Any, texts: list[str]) -> np.ndarray:
        """Embeddings of provisional chunk texts; a text embedded by an earlier query (the
        same tail, a little longer) is not embedded again."""
        keys = [hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest() for text in texts]
        with self._lock:
            known = {key: self._vectors[key] for key in keys if key in self._vectors}
        missing = sorted({key: text for key, text in zip(keys, texts, strict=True)
                          if key not in known}.items())
        if missing:
            fresh = np.asarray(embedder.embed([text for _, text in missing]), dtype=np.float32)
            with self._lock:
                for (key, _), vector in zip(missing, fresh, strict=True):
                    known[key] = self._vectors[key] = vector
                while len(self._vectors) > _VECTOR_CACHE:
                    self._vectors.pop(next(iter(self._vectors)))
        return np.stack([known[key] for key in keys])

    def _fill_texts(self, page: list[FusedHit], candidates: dict[str, Candidate],
                    text_pin: IndexPin | None) -> None:
        missing = [hit.chunk_id for hit in page if candidates[hit.chunk_id].text is None]
        if missing and text_pin is not None:
            texts = self._readers.texts(text_pin, missing)
            for chunk_id in missing:
                candidates[chunk_id].text = texts.get(chunk_id, "")

    # -- shared resources --------------------------------------------------------------------

    def _tail_scan(self) -> TailScan:
        with self._lock:
            if self._tail is None:
                self._tail = TailScan(chunker_for(self.settings),
                                      tick_every_seqs=self.settings.tick_every_seqs)
            return self._tail

    def _embedder_for(self, pin: IndexPin) -> tuple[Any, str | None]:
        """The query embedder if it is the model that built ``pin``, else why not."""
        with self._lock:
            if self._embedder is None and self._embedder_error is None:
                try:
                    from sinks.vector import get_embedder

                    self._embedder = get_embedder(
                        self.settings.embedder, url=self.settings.embeddings_url,
                        api_key=self.settings.embeddings_api_key,
                        cache_root=Path(self.settings.home).resolve() / "models")
                except USLError as exc:
                    self._embedder_error = str(exc)
        if self._embedder is None:
            return None, f"the query embedder could not be loaded ({self._embedder_error})"
        built = _identity(pin.manifest.embedding)
        mine = _identity(self._embedder.identity)
        if built != mine:
            return None, (f"the vector index was built with {_model(built)} but this planner "
                          f"embeds queries with {_model(mine)}")
        return self._embedder, None


# -- helpers -----------------------------------------------------------------------------------


class _LegPool:
    """A planner's threads for the legs of its queries. A task goes to a thread only when one
    is free (else the query's own thread runs it, in its sequential place), so queries never
    queue behind each other's legs, and no task waits on another: no deadlock."""

    def __init__(self, workers: int) -> None:
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="usl-query-leg")
        self._free = threading.BoundedSemaphore(workers)

    def offload(self, fn: Callable[..., _T], *args: Any) -> Future[_T] | None:
        """``fn(*args)`` started on a free thread, or None when none is free."""
        if not self._free.acquire(blocking=False):
            return None

        def run() -> _T:
            try:
                return fn(*args)
            finally:
                self._free.release()

        try:
            return self.executor.submit(run)
        except BaseException:
            self._free.release()
            raise

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(item) for item in items]``, shared between the calling thread and the free
        threads: each takes the next item not yet started until none is left, so a thread
        that finishes early takes more (segments of very different sizes, a pool busy with
        another leg). The results in the items' order, returned or raised (the first error in
        item order, as the loop would raise it) only once every item has finished, so no task
        outlives the call."""
        items = list(items)
        outcomes: list[Any] = [None] * len(items)
        taken = itertools.count()
        lock = threading.Lock()

        def drain() -> None:
            while True:
                with lock:
                    index = next(taken)
                if index >= len(items):
                    return
                try:
                    outcomes[index] = _Done(fn(items[index]))
                except BaseException as exc:  # kept for its place in item order
                    outcomes[index] = _Raised(exc)

        helpers = [future for future in (self.offload(drain) for _ in items[1:]) if future is not None]
        try:
            drain()
        finally:
            wait_for_futures(helpers)
        for future in helpers:
            future.result()  # drain itself never raises; a broken pool would
        return [outcome.result() for outcome in outcomes]


@dataclass(frozen=True)
class _Raised:
    """An item's error, raised when its result is read (in item order)."""

    error: BaseException

    def result(self) -> Any:
        raise self.error


@dataclass(frozen=True)
class _Done:
    """A result computed in the query's own thread, read like a finished future's."""

    value: Any

    def result(self) -> Any:
        return self.value


_WARMER = Principal(tenant="", user="tail-warmer")
"""The warmer's stand-in principal: it reads no access list and ranks nothing."""


# In hybrid mode the text list ranks the query without English function words: they match
# nearly every chunk of English prose, so on them alone a chunk entered the text list (and the
# vector list's candidates) and took fusion votes from chunks that share the query's content.
# Text mode ranks the words as typed (docs/planner.md, "Function words in hybrid mode").
STOP_WORDS = FUNCTION_WORDS


_PHRASE_SOURCES = frozenset({"phrase", "tailPhrase", "toolresultsPhrase"})
_IDENTIFIER_SOURCES = frozenset({"identifier", "tailIdentifier", "toolresultsIdentifier"})
_TEXT_PHRASE = {"text": "phrase", "tail": "tailPhrase"}  # each text list, the phrase list of its chunks
_TOOL_PHRASE = {"toolresults": "toolresultsPhrase"}


def identifiers_within_phrase(lists: Sequence[RankedList]) -> list[RankedList]:
    """``lists`` with each identifier list cut to the chunks holding the whole query, when
    some chunk holds it (a phrase list is not empty).

    The identifier list lets a chunk naming the query's identifier outvote a vector list that
    cannot read it. When the query is a phrase chunks hold, it is a phrase pasted from a
    session (`on bead spotter-a0y.`), and every chunk merely naming the identifier got that
    vote too: with the vector list's, chunks without the phrase outranked four of the seven
    that held it (hybrid kept 3 of text mode's 7 in its first 10). Kept to the holders, the
    list counts for them alone, so hybrid finds what text finds."""
    holders = {chunk_id for ranked in lists if ranked.source in _PHRASE_SOURCES for chunk_id in ranked.ids}
    if not holders:
        return list(lists)
    return [RankedList(ranked.source, [i for i in ranked.ids if i in holders], ranked.window, ranked.truncated)
            if ranked.source in _IDENTIFIER_SOURCES else ranked for ranked in lists]


def phrase_holders_first(lists: Sequence[RankedList]) -> list[RankedList]:
    """``lists`` with the chunks holding the whole query first in the text lists (the index's
    phrase list's in its order in ``text``, the tail's in ``tail``), in hybrid mode.

    A phrase pasted from a session is often mostly function words (`flight, it can`): text mode
    ranks its holder first on them, but hybrid's text list ranked `flight, can`, which a hundred
    chunks hold, and the holder came 30th there, or past the window; chunks ranked middling by
    both the text and the vector list then outvoted it (9th), so hybrid found less than text.
    Its words in order are what the dropped words stood for. The same holds for a phrase of
    content words alone (`_id, upsert identity`): BM25 ranks short chunks naming its words
    apart above a long one holding them in order (13th), and one that text and vector both
    rank high outvotes the holder's two votes (3rd, where text mode ranked it 1st). A holder
    holds every word of the query, so it is a text match that only its length ranked low."""
    return _holders_first(lists, _TEXT_PHRASE)


def tool_phrase_holders_first(lists: Sequence[RankedList]) -> list[RankedList]:
    """``lists`` with the full tool results holding the whole query first in the
    ``toolresults`` list (in ``toolresultsPhrase``'s order), in hybrid mode.

    A tool result has no vector list to vote for it, so in hybrid mode its two votes (the
    ``toolresults`` rank and the phrase rank) met chunks that text and vector both ranked. For
    a JSON fragment of a tool's output (`"timeout": 120`, `"bytes":274387,"code":200`) BM25 over
    the words ranks the holder behind outputs repeating `timeout` or `code` (28th, 50th), and
    chunks naming those words outvoted it: text mode ranked it 1st, hybrid 7th or past the
    first 10. A holder holds every word of the query, so it is a match the words' order decides."""
    return _holders_first(lists, _TOOL_PHRASE)


def _holders_first(lists: Sequence[RankedList], leads: Mapping[str, str]) -> list[RankedList]:
    """``lists`` with each list named in ``leads`` led by the ids of its phrase list."""
    holders = {ranked.source: ranked.ids for ranked in lists if ranked.source in leads.values()}
    out = []
    for ranked in lists:
        first = holders.get(leads.get(ranked.source, ""), [])
        if first:
            leading = set(first)
            ids = [*first, *(i for i in ranked.ids if i not in leading)]
            ranked = RankedList(ranked.source, ids[:ranked.window], ranked.window,
                                ranked.truncated or len(ids) > ranked.window)
        out.append(ranked)
    return out


def content_words(query: str) -> str | None:
    """``query`` without its unquoted :data:`STOP_WORDS`, quoted phrases kept whole; None when
    it has none, or nothing else (a query of function words alone is ranked as typed)."""
    kept: list[str] = []
    dropped = False
    # Odd-indexed parts are inside quotes, as the text engines' parser reads them.
    for index, piece in enumerate(query.split('"')):
        if index % 2:
            if piece.strip():
                kept.append(f'"{piece}"')
            continue
        for word in piece.split():
            terms = analyze(word)
            if terms and all(term in STOP_WORDS for term in terms):
                dropped = True
            else:
                kept.append(word)
    return " ".join(kept) if dropped and kept else None


class _Copyable(Protocol):
    """A text or vector hit: its chunk and its text's digest."""

    @property
    def chunk_id(self) -> str: ...

    @property
    def digest(self) -> bytes | None: ...


_Hit = TypeVar("_Hit", bound=_Copyable)


def distinct_texts(hits: Sequence[_Hit], window: int, digests: Mapping[str, bytes] | None = None,
                   rows: Mapping[str, ChunkRow] | None = None) -> tuple[list[_Hit], bool, dict[str, int]]:
    """The hits of the first ``window`` distinct texts in rank order, whether another distinct
    text follows them, and per kept hit how many other copies of its text the hits hold.

    Collapsing copies after the window was cut left a list of a few texts: a policy prompt every
    run of a tool-calling benchmark starts with filled 189 of text's 201 places for "baggage
    allowance", so the conversations about baggage ranked past the window and were never seen.

    A hit's text is its digest, else the one ``digests`` names for it; with neither it is a text
    of its own. Copies tie, and the one kept, at the first copy's place, is the newest by
    ``rows`` (:func:`planner.rrf.newest_first`, the order :func:`newest_first_among_ties` gives a
    run of ties): the chunk ids the engines break ties by carry the redaction policy's hash.
    """
    def age(hit: _Hit) -> tuple[float, int, str]:
        row = rows.get(hit.chunk_id) if rows is not None else None
        return newest_first(hit.chunk_id, row.event_time or 0.0, row.max_seq) if row is not None \
            else newest_first(hit.chunk_id, 0.0, 0)

    named = digests or {}
    place: dict[bytes, int] = {}
    count: dict[int, int] = {}
    found: list[_Hit] = []
    more = False
    for hit in hits:
        digest = hit.digest if hit.digest is not None else named.get(hit.chunk_id)
        if digest is not None and digest in place:
            at = place[digest]
            count[at] = count.get(at, 0) + 1
            if rows is not None and age(hit) < age(found[at]):
                found[at] = hit
            continue
        if len(found) == window:
            more = True  # read on only for newer copies of the texts kept
            continue
        if digest is not None:
            place[digest] = len(found)
        found.append(hit)
    return found, more, {found[at].chunk_id: copies for at, copies in count.items()}


_PHRASE_LISTS = frozenset({"phrase", "tailPhrase"})
_TOOL_PHRASE_LISTS = frozenset({"toolresultsPhrase"})
_CUT_RULE = ("no chunk or tool result holds the whole query: those holding its inner terms as a "
             "phrase, its first term ending and its last term starting the terms around them (a "
             "phrase pasted with a term cut at either edge), first in the text and toolresults lists")


def texts_ranked(lists: Sequence[RankedList], sources: AbstractSet[str]) -> int:
    """How many ids the lists named in ``sources`` hold."""
    return sum(len(ranked.ids) for ranked in lists if ranked.source in sources)


@dataclass(frozen=True)
class CutPhrase:
    """A pasted phrase whose edge terms may be cut: ``query`` searches its inner terms as a
    phrase; :meth:`holds` keeps the texts in which those terms follow a term ending as the
    first one does and precede one starting as the last one does.

    Edges are terms, not words: a selection starts or ends inside a term, and the whitespace
    word around it may hold more terms (`7, reservation_id=GV1N64 [tool.res` is cut in
    `1642017` and `result`, its inner terms `reservation id gv1n64 tool`). An edge is cut only
    where the paste starts (ends) with the term's own characters, and never at a character of a
    script without spaces, each a term of its own (`ル问题 mix` has one cut edge, `mix`). Two
    inner terms are the least a phrase is (one is the text list itself), so of three terms cut
    at both edges the first is kept whole."""

    query: str
    head: tuple[str, ...]
    inner: tuple[str, ...]
    tail: tuple[str, ...]

    @classmethod
    def of(cls, phrase: str) -> CutPhrase | None:
        bare = phrase.replace('"', " ").strip()
        terms = tuple(analyze(bare))
        if len(terms) < 3:
            return None
        head = terms[:1] if analyze(bare[0]) and not spaceless_term(terms[0]) else ()
        tail = terms[-1:] if analyze(bare[-1]) and not spaceless_term(terms[-1]) else ()
        if head and tail and len(terms) == 3:
            head = ()
        inner = terms[len(head):len(terms) - len(tail)]
        if not (head or tail):
            return None
        return cls(f'"{" ".join(inner)}"', head, inner, tail)

    def holds(self, text: str) -> bool:
        terms = analyze(text)
        size, before, after = len(self.inner), len(self.head), len(self.tail)
        return any(tuple(terms[start:start + size]) == self.inner
                   and (not before or terms[start - 1].endswith(self.head[0]))
                   and (not after or terms[start + size].startswith(self.tail[0]))
                   for start in range(before, len(terms) - size - after + 1))


def whole_query_phrase(query: str) -> str | None:
    """The query as one quoted phrase (its own quotes dropped), or None when it has fewer
    than two words: a single word is the text list itself."""
    bare = query.replace('"', " ")
    if not bare.strip() or len(clauses_of(f'"{bare}"').phrases) != 1:
        return None
    return f'"{bare.strip()}"'


# A word that names something exactly: a code mixing letters and digits (H9ZU1C, HAT290,
# E0425, gift_card_5094406), a run of five or more capitals (HXDUBJ, ENOENT), or a word joined by
# _ / . or : (snake_case, paths, file and module names, main..HEAD). CamelCase is left out: in a
# recollection it is mostly a proper name (LaGuardia, OpenTelemetry) the embedder knows.
_IDENTIFIER_EDGES = ",;:!?()[]{}<>\"'`."
_CODE = re.compile(r"[A-Za-z0-9_-]{5,}")
_CAPITALS = re.compile(r"[A-Z]{5,}")
_JOINED = re.compile(r"[\w./:-]*\w[_/.:]+\w[\w./:-]*")
_LETTER = re.compile(r"[A-Za-z]")
_DIGIT = re.compile(r"[0-9]")


def query_identifiers(query: str) -> list[str]:
    """The identifier-like words of ``query`` (first occurrence order, each once)."""
    found: dict[str, None] = {}
    for word in query.replace('"', " ").split():
        word = word.strip(_IDENTIFIER_EDGES)
        if (_CODE.fullmatch(word) and _LETTER.search(word) and _DIGIT.search(word)) \
                or _CAPITALS.fullmatch(word) or (_JOINED.fullmatch(word) and _LETTER.search(word)):
            found.setdefault(word, None)
    return list(found)


def identifier_query(query: str) -> str | None:
    """The query's identifiers as a text query, each quoted (a path is a phrase of its parts),
    or None when it has none."""
    quoted = " ".join(f'"{word}"' for word in query_identifiers(query))
    return quoted if quoted and clauses_of(quoted) else None


def _keeps(rows: Mapping[str, ChunkRow], unreadable: AbstractSet[str],
           max_seq: int | None) -> Callable[[str], bool]:
    """What the text list's filters (maxSeq <= ``max_seq``, no session of ``unreadable``)
    judge of a hit, from the chunk table's rows. A chunk the table lacks is judged out: the
    fusion drops it anyway."""

    def keeps(chunk_id: str) -> bool:
        row = rows.get(chunk_id)
        return (row is not None and row.session_id not in unreadable
                and (max_seq is None or row.max_seq <= max_seq))

    return keeps


def _last_seq(candidate: Candidate) -> int:
    """The log position of a chunk's last event (its ``maxSeq``; 0 for a record without one)."""
    return int(candidate.record.get("maxSeq") or 0)


def above_cut(pin: IndexPin, cut: int) -> bool:
    """Whether the pinned generation may hold a chunk ending above ``cut``: unless every
    shard's manifest bounds its chunks' ``maxSeq`` at or below the cut
    (:func:`sinks.generations.chunk_seq_bound`), the engine must filter on ``maxSeq``. Skipping
    that range filter when it keeps everything saves a third of a text search over a million
    chunks (docs/planner.md, "Performance")."""
    for part in pin.shards:
        bound = part.manifest.extra.get(MAX_CHUNK_SEQ)
        if not isinstance(bound, int) or bound > cut:
            return True
    return False


def _as_watermark(value: Mapping[str, Any] | None) -> tuple[int, int] | None:
    if value is None:
        return None
    return (int(value["generationId"]), int(value["builtThroughSeq"]))


def _identity(value: Mapping[str, Any] | None) -> dict[str, Any]:
    if not value:
        return {}
    return {key: value.get(key) for key in ("name", "model", "revision", "dimension")}


def _model(identity: Mapping[str, Any]) -> str:
    if not identity:
        return "an unknown model"
    return f"{identity.get('model')} (revision {identity.get('revision')})"
