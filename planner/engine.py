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
   comparable scores), ``tail`` (BM25 in-process over trimmed and tail texts: another corpus,
   so its own list) and ``toolresults``; fused by :func:`planner.rrf.fuse` and paged with
   :func:`planner.rrf.after`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.acl import (
    TOOLRESULTS_SCOPE,
    Principal,
    can_read,
    can_read_toolresults,
    policy_fingerprint,
)
from planner.chunktable import ChunkTable
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
    IndexUnavailable,
    NotFound,
    PlannerError,
    QueryError,
)
from planner.explain import Candidate, build_explain, result_row
from planner.l1window import L1Window
from planner.local import clauses_of, rank_texts
from planner.readers import IndexPin, ReaderCache, pin_for_cursor, pin_for_query
from planner.request import Filters, SearchRequest, parse_request
from planner.rrf import FusedHit, RankedList, after, fuse, sort_key
from planner.snapshot import (
    SeqRange,
    SnapshotDecision,
    Watermark,
    choose_as_of,
    record_tail_scan,
    wait_satisfied,
    with_uncovered,
)
from planner.tailscan import SnapshotCache, TailResult, TailScan, TailSnapshot, chunker_for
from planner.trim import trim_chunk
from sinks.exceptions import GenerationError
from sinks.generations import FileDigests, GenerationStore
from sinks.runner import index_root
from sinks.text.base import ANALYZER as TEXT_ANALYZER
from sinks.watermarks import WatermarkFollower, read_watermarks
from streams.asp import posix_time, validate_event
from streams.exceptions import USLError
from streams.l1 import L1Reader, LogRegistry
from streams.metrics import (
    usl_cursor_refusals_total,
    usl_queries_total,
    usl_query_fallbacks_total,
    usl_query_seconds,
    usl_tail_scan_events,
)
from streams.ownership import Owners, current_acl, session_of_acl
from streams.settings import Settings

__all__ = ["ACL_SCAN_CAP", "RANK_DEPTH", "TAIL_SCAN_CAP", "VECTOR_FLOOR", "WINDOW_MIN", "Planner",
           "window_for"]

log = logging.getLogger("usl.planner")

TAIL_SCAN_CAP = 20_000
"""Most L1 events one query's tail scan reads; the rest of the gap is disclosed as uncovered."""
ACL_SCAN_CAP = 200_000
"""Most L1 events read to bring access lists up to date; beyond it the query is refused (503)
rather than answered with access lists that may miss a revocation."""
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
QUERY_PIN_SECONDS = 600.0
_MAX_OVERFETCH = 20_000
_VECTOR_CACHE = 50_000
_RANKING = {"hybrid": ("text", "vector"), "text": ("text",), "vector": ("vector",)}


def window_for(k: int) -> int:
    """Candidates asked of each source: :data:`RANK_DEPTH` whatever the page size ``k`` (a
    first page of 5 and one of 100 fuse the very same lists)."""
    del k
    return RANK_DEPTH


class Planner:
    """Answers searches over the pinned generations of one deployment (thread-safe).

    ``follower`` (a started :class:`WatermarkFollower`) gives live watermarks; without it each
    query reads the compacted watermark topic.
    """

    def __init__(
        self,
        settings: Settings,
        bootstrap: str,
        *,
        follower: WatermarkFollower | None = None,
        tail_cap: int = TAIL_SCAN_CAP,
        acl_scan_cap: int = ACL_SCAN_CAP,
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.follower = follower
        self.tail_cap = tail_cap
        self.acl_scan_cap = acl_scan_cap
        self.root: Path = index_root(settings)
        self._cursor_key = load_cursor_key(settings)
        self._readers = ReaderCache()
        self._holder = f"planner-{os.getpid()}"
        self._lock = threading.Lock()
        self._registry: LogRegistry | None = None
        self._idle_l1: list[L1Reader] = []
        self._embedder: Any = None
        self._embedder_error: str | None = None
        self._tail: TailScan | None = None
        self._window = L1Window()
        self._vectors: dict[bytes, np.ndarray] = {}
        self._tails = SnapshotCache()
        self._overlays: dict[tuple[str, int], tuple[int, Owners]] = {}
        self._digests = FileDigests()
        # generation dir -> (stat signature of its files, problem or None): a generation is
        # hashed once; later queries only compare the signature (a write changes mtime).
        self._verdicts: dict[str, tuple[tuple[Any, ...], str | None]] = {}
        self._unavailable: set[tuple[str, str]] = set()

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
        if not isinstance(log_id, str) or not log_id:
            raise QueryError("field 'log' must be a log name")
        if as_of is not None and (not isinstance(as_of, int) or isinstance(as_of, bool) or as_of < 0):
            raise QueryError("field 'asOfSeq' must be a non-negative integer")
        pins: list[IndexPin] = []
        with self._l1() as l1:
            l1_now = l1.committed_seq(log_id)
            watermarks = self._watermarks(log_id)
            # As search does: an unknown log is a 404, not an index to wait for (503).
            if l1_now == 0 and not watermarks and l1.registry.partition_of(log_id) is None:
                raise NotFound(f"no log named {log_id!r}",
                               hint="Ingest events into it first, or pick another log.")
            try:
                analytics, problem = self._pin_verified(log_id, "analytics", watermarks.get("analytics"))
                if analytics is None:
                    raise IndexUnavailable(problem or f"no generation of the analytics index exists "
                                           f"yet for log {log_id!r}",
                                           hint="Wait until `usl status` shows the analytics index.")
                pins.append(analytics)
                structured, _problem = self._pin_verified(log_id, "structured", watermarks.get("structured"))
                if structured is not None:
                    pins.append(structured)
                if as_of is None:
                    as_of = min(l1_now, analytics.built_through_seq)
                elif as_of > l1_now:
                    raise QueryError(f"asOfSeq {as_of} is past the log's committed seq {l1_now}",
                                     hint=f"Use an asOfSeq of at most {l1_now}.")
                acls = self._latest_acls(l1, log_id, structured, l1_now)
                attachment = SqlAttachment(analytics.directory,
                                           structured.directory if structured else None)
                return attachment.query(sql_text, as_of_seq=as_of, principal=principal,
                                        session_acls=acls,
                                        max_result_bytes=self.settings.sql_max_result_bytes)
            finally:
                for pin in pins:
                    pin.release()

    def close(self) -> None:
        with self._lock:
            readers, self._idle_l1 = self._idle_l1, []
        for reader in readers:
            with suppress(Exception):
                reader.close()

    # -- the query ---------------------------------------------------------------------------

    def _search(self, req: SearchRequest, principal: Principal) -> dict[str, Any]:
        if req.tool_results and TOOLRESULTS_SCOPE not in principal.scopes:
            raise AccessDenied("full tool results need the toolresults scope",
                               hint="Ask for a principal with scopes:toolresults, or search "
                                    "without toolResults.")
        policy = policy_fingerprint(principal)
        payload = self._open_cursor(req, policy) if req.cursor else None
        pins: dict[str, IndexPin | None] = {}
        problems: dict[str, str] = {}
        response: dict[str, Any] | None = None
        try:
            with self._l1() as l1:
                l1_now = l1.committed_seq(req.log)
                if payload is None:
                    watermarks = self._watermarks(req.log)
                    if l1_now == 0 and not watermarks and l1.registry.partition_of(req.log) is None:
                        raise NotFound(f"no log named {req.log!r}",
                                       hint="Ingest events into it first, or pick another --log.")
                    if req.freshness.mode == "wait":
                        watermarks = self._wait(req, l1_now, watermarks)
                    for kind in req.required_kinds:
                        pins[kind], problem = self._pin_verified(req.log, kind, watermarks.get(kind))
                        if problem is not None:
                            problems[kind] = problem
                    l1_seq, window = l1_now, window_for(req.k)
                else:
                    lines = payload.get("lines") or {}
                    for kind, generation_id in sorted(payload["generations"].items()):
                        cursor_pin = pin_for_cursor(self.root, req.log, kind, generation_id,
                                                    lines.get(kind), ttl_seconds=QUERY_PIN_SECONDS,
                                                    holder=self._holder)
                        pins[kind] = cursor_pin
                        problem = self._verify(cursor_pin)
                        if problem is not None:
                            raise CursorExpired(f"the {kind} index generation this cursor reads "
                                                f"failed verification: {problem}",
                                                hint="Run the query again without a cursor.")
                    l1_seq, window = int(payload["l1Seq"]), int(payload["window"])
                response = self._answer(req, principal, policy, l1, l1_seq, l1_now, pins,
                                        window, payload, problems)
                return response
        except CursorExpired:
            usl_cursor_refusals_total.labels(reason="generation_gone").inc()
            raise
        finally:
            keep = response is not None and response.get("cursor") is not None
            for pin in pins.values():
                if pin is None:
                    continue
                if keep:
                    pin.keep_for(self.settings.cursor_ttl_seconds)
                else:
                    pin.release()

    def _answer(
        self, req: SearchRequest, principal: Principal, policy: str, l1: L1Reader, l1_seq: int,
        l1_now: int, pins: dict[str, IndexPin | None], window: int,
        payload: Mapping[str, Any] | None, problems: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        seen: dict[str, tuple[int, int] | None] = {
            kind: (pin.watermark if (pin := pins.get(kind)) is not None else None)
            for kind in req.required_kinds
        }
        vector_problem = None
        vector_pin = pins.get("vector")
        embedder = None
        if vector_pin is not None:
            embedder, vector_problem = self._embedder_for(vector_pin)
            if vector_problem is not None:
                seen["vector"] = None
        try:
            decision = choose_as_of(req.freshness, l1_seq, seen, req.required_kinds)
        except IndexUnavailable as exc:
            refused = [f"{kind}: {problem}" for kind, problem in sorted((problems or {}).items())
                       if seen.get(kind) is None]
            if not refused:
                raise
            # The generation exists but was refused: say why, not that there is none.
            raise IndexUnavailable(f"{exc}; " + "; ".join(refused), hint=exc.hint) from exc
        decision = _explain_vector_fallback(decision, vector_pin, vector_problem)
        for kind, pin in sorted(pins.items()):
            # A line rebuilt with --from-seq N holds nothing below N: say so, never imply it.
            starts = int((pin.manifest.extra.get("rebuild") or {}).get("fromSeq", 1)) if pin else 1
            if starts > 1 and kind in decision.required:
                decision = with_uncovered(decision, [SeqRange(1, min(starts - 1, decision.as_of_seq))],
                                          f"the {kind} index was rebuilt from seq {starts} and holds "
                                          f"nothing below it")
        if decision.fallbacks:
            usl_query_fallbacks_total.labels(
                reason="vector_unusable" if vector_problem else "vector_missing").inc()
        if problems:
            usl_query_fallbacks_total.labels(reason="generation_unverified").inc()
            decision = replace(decision,
                               fallbacks=(*decision.fallbacks, *(f"{kind}: {problem}" for kind, problem
                                                                 in sorted(problems.items()))),
                               reasons=(*decision.reasons, *(f"{kind}: {problem}" for kind, problem
                                                             in sorted(problems.items()))))
        if payload is not None and decision.as_of_seq != int(payload["asOfSeq"]):
            raise CursorError("the cursor's snapshot cannot be reproduced",
                              hint="Run the query again without a cursor.")
        cut = decision.index_through
        as_of = decision.as_of_seq
        structured = pins.get("structured")
        ranking = tuple(kind for kind in _RANKING[req.mode] if kind in decision.required)
        if not ranking:
            ranking = ("text",)
        notes: dict[str, Any] = {"window": window}

        # Tail scan of (cut, asOf] and access lists up to the committed seq now.
        tail: TailResult | None = None
        if decision.tail_scan is not None:
            tail = self._run_tail(l1, req, decision.tail_scan, structured, cut)
            decision = record_tail_scan(decision, scanned_through=tail.scanned_through)
        acls = self._latest_acls(l1, req.log, structured, l1_now)
        readable = {session for session, acl in acls.items() if can_read(principal, acl)}
        # Every chunk an index holds at or below the cut belongs to a session the structured
        # index knows, so when all known sessions are readable no session filter is needed.
        session_filter: set[str] | None = None if len(readable) == len(acls) else readable
        readable_tools = ({session for session in readable if can_read_toolresults(principal, acls[session])}
                          if req.tool_results else set())

        candidates: dict[str, Candidate] = {}
        lists: list[RankedList] = []
        provisional: list[Candidate] = []
        filters = req.filters

        # Chunks straddling the cut, trimmed to their events <= cut.
        use_index = structured is not None and cut > 0
        table = self._readers.chunk_table(structured) if structured is not None and use_index else None
        text_pin = pins.get("text")
        if table is not None:
            decision, trimmed = self._trimmed(table, text_pin, cut, session_filter, filters,
                                              decision)
            provisional += trimmed
            notes["trimmed"] = [{"chunkId": c.id, "keptThroughSeq": cut} for c in trimmed]
        if tail is not None:
            provisional += self._tail_candidates(tail, req, readable, readable_tools)
            notes["tailScan"] = {
                "fromSeq": tail.from_seq, "toSeq": decision.tail_scan.to_seq if decision.tail_scan else None,
                "scannedThroughSeq": tail.scanned_through, "capEvents": self.tail_cap,
                "readableCandidates": sum(1 for c in provisional if c.origin == "tail"),
                "code": "same validation, redaction and chunker as the stream; open turns "
                        "closed as provisional chunks",
            }

        # Indexed candidates: chunks with maxSeq <= cut of readable sessions (and, with
        # filters, matching them), judged inside each engine before its window is taken.
        only: set[str] | None = None
        if structured is not None and use_index and filters:
            kwargs = filters.reader_kwargs()
            sessions = readable & set(kwargs.pop("session_ids", readable))
            only = self._readers.structured(structured).filter_chunk_ids(
                session_ids=sessions, max_seq=cut, **kwargs)
        indexed_scores: dict[str, dict[str, float]] = {}
        # The whole query as one exact phrase: its own ranked list, so a chunk that holds the
        # very words asked for counts twice in the fusion and no weak vector list outvotes it.
        phrase = whole_query_phrase(req.query) if "text" in ranking else None
        if phrase is not None:
            # The phrase is the request's own query (explain.request has it); not echoed twice.
            notes["phrase"] = {"sources": ["phrase", "tailPhrase"],
                               "rule": "chunks holding the whole query as one phrase "
                                       "(quotes ignored), ranked by BM25"}
        if "text" in ranking and text_pin is not None and cut > 0:
            ids, truncated = self._text_list(text_pin, req.query, window, cut, session_filter,
                                             only)
            lists.append(RankedList("text", ids, window, truncated))
            # BM25 scores are not shown: their corpus statistics include chunks the caller
            # may not read. The rank says all there is to say.
            for chunk_id in ids:
                indexed_scores.setdefault(chunk_id, {})
            if phrase is not None:
                ids, truncated = self._text_list(text_pin, phrase, window, cut, session_filter,
                                                 only)
                lists.append(RankedList("phrase", ids, window, truncated))
                for chunk_id in ids:
                    indexed_scores.setdefault(chunk_id, {})
        if "vector" in ranking and vector_pin is not None and embedder is not None:
            allowed: Callable[[str], bool] | None = None
            if table is not None:
                rows = table.rows

                def permit(chunk_id: str) -> bool:
                    row = rows.get(chunk_id)
                    return (row is not None and row.max_seq <= cut
                            and (session_filter is None or row.session_id in session_filter)
                            and (only is None or chunk_id in only))

                allowed = permit

            ranked, truncated, note = self._vector_list(
                embedder, vector_pin, req.query, window, cut, allowed, provisional)
            notes["vector"] = note
            if ranked is not None:
                ids = [chunk_id for chunk_id, _ in ranked]
                lists.append(RankedList("vector", ids, window, truncated))
                for chunk_id, score in ranked:
                    indexed_scores.setdefault(chunk_id, {})["vector"] = score
        # Trimmed and tail texts (and tail tool results) ranked in-process; a trimmed chunk
        # whose kept text no longer matches the query drops out here.
        textual = [c for c in provisional
                   if "text" in _RANKING[req.mode] or c.kind == "toolresult"]
        if textual:
            by_id = {c.id: c for c in textual}
            ranked_tail = rank_texts(clauses_of(req.query), [(c.id, c.text or "") for c in textual])
            if ranked_tail:
                lists.append(RankedList("tail", [i for i, _ in ranked_tail[:window]], window,
                                        len(ranked_tail) > window))
                for chunk_id, score in ranked_tail[:window]:
                    by_id[chunk_id].scores["tail"] = score
            ranked_phrase = (rank_texts(clauses_of(phrase), [(c.id, c.text or "") for c in textual])
                             if phrase is not None else [])
            if ranked_phrase:
                lists.append(RankedList("tailPhrase", [i for i, _ in ranked_phrase[:window]],
                                        window, len(ranked_phrase) > window))
                for chunk_id, score in ranked_phrase[:window]:
                    by_id[chunk_id].scores["tailPhrase"] = score
        tools_pin = pins.get("toolresults")
        if req.tool_results and tools_pin is not None and cut > 0:
            tool_candidates, truncated = self._tool_list(tools_pin, req.query, window, cut,
                                                         readable_tools, filters)
            lists.append(RankedList("toolresults", [c.id for c in tool_candidates], window, truncated))
            for candidate in tool_candidates:
                candidates[candidate.id] = candidate

        for candidate in provisional:
            candidates[candidate.id] = candidate
        index_ids = [chunk_id for chunk_id in indexed_scores if chunk_id not in candidates]
        if index_ids and table is not None:
            for chunk_id, row in table.records(index_ids).items():
                if int(row["maxSeq"]) > cut:  # never: the engines filter maxSeq <= cut
                    continue
                candidates[chunk_id] = Candidate(
                    chunk_id, "chunk", "index", row["sessionId"], float(row["eventTime"] or 0.0),
                    row, scores=indexed_scores[chunk_id])
        lists = [RankedList(ranked.source, [i for i in ranked.ids if i in candidates],
                            ranked.window, ranked.truncated) for ranked in lists]
        used = {chunk_id for ranked in lists for chunk_id in ranked.ids}
        hits = fuse(lists, event_time={i: candidates[i].event_time for i in used})
        if payload is not None:
            hits = after(hits, last_sort_key(payload))
            notes["cursor"] = {"continuesAfter": payload["lastKey"]}
        page = hits[: req.k]
        end = _depth_end(lists, window) if len(hits) <= req.k else None
        notes["depth"] = {"window": window, "rule": "RRF over each source's top window; the "
                          "window does not depend on the page size and the cursor binds it"}
        if end is not None:
            notes["depth"]["end"] = end
        self._fill_texts(page, candidates, text_pin)
        results = [result_row(hit, candidates[hit.chunk_id], as_of) for hit in page]

        generations = {kind: pin for kind, pin in pins.items()
                       if pin is not None and kind in decision.required}
        cursor = None
        if len(hits) > len(page) and page:
            body = cursor_payload(
                log_id=req.log, as_of_seq=as_of,
                generations={kind: pin.generation_id for kind, pin in generations.items()},
                query_hash=req.query_hash(), policy=policy, last_key=sort_key(page[-1]),
                page_size=req.k,
            )
            body.update({"l1Seq": l1_seq, "window": window,
                         "lines": {kind: pin.line for kind, pin in generations.items()}})
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
            notes["access"] = {"principal": str(principal), "policy": policy,
                               "toolResultsScope": TOOLRESULTS_SCOPE in principal.scopes,
                               "rule": "latest access list per session, from the structured "
                                       "index and newer L1 events; unreadable sessions are "
                                       "removed inside each engine before ranking"}
            response["explain"] = build_explain(
                request={**req.defining(), "k": req.k},
                decision=decision, cut=cut,
                generations={kind: _generation_json(pin)
                             for kind, pin in pins.items() if pin is not None},
                lists=lists, page=page, candidates=candidates, notes=notes,
            )
        return response

    # -- steps -------------------------------------------------------------------------------

    def _pin_verified(self, log_id: str, kind: str, watermark: Mapping[str, Any] | None,
                      ) -> tuple[IndexPin | None, str | None]:
        """Pin the generation ``watermark`` names if its files match its manifest; else the
        newest older generation of its line that does, with what was refused (disclosed as a
        fallback); (None, why) if none does. Bad data is never read."""
        try:
            pin = pin_for_query(self.root, log_id, kind, watermark,
                                ttl_seconds=QUERY_PIN_SECONDS, holder=self._holder)
        except (GenerationError, OSError) as exc:  # a damaged manifest, a full disk for the pin
            unavailable = f"index unavailable: {exc}"
            with self._lock:
                new = (kind, unavailable) not in self._unavailable
                if len(self._unavailable) > 100:
                    self._unavailable.clear()
                self._unavailable.add((kind, unavailable))
            if new:
                log.error("%s index of %s unavailable: %s", kind, log_id, exc)
            return None, unavailable
        if pin is None:
            return None, None
        problem = self._verify(pin)
        if problem is None:
            return pin, None
        refused = f"generation {pin.generation_id} refused ({problem})"
        store = GenerationStore(self.root, log_id, kind, pin.line)
        pin.release()
        try:
            older = [g for g in store.generation_ids() if g < pin.generation_id]
        except (GenerationError, OSError):
            older = []
        for generation_id in reversed(older):
            try:
                file_pin = store.pin(generation_id, ttl_seconds=QUERY_PIN_SECONDS, holder=self._holder)
            except (GenerationError, OSError):
                continue
            try:
                manifest = store.load(generation_id)
            except GenerationError:
                file_pin.release()
                continue
            candidate = IndexPin(kind, store.line, generation_id, manifest.built_through_seq,
                                 store.generation_dir(generation_id), manifest, file_pin)
            if self._verify(candidate) is None:
                return candidate, f"{refused}; answering from generation {generation_id}"
            file_pin.release()
        return None, f"{refused}; no older generation verifies, so the {kind} index is unavailable"

    def _verify(self, pin: IndexPin) -> str | None:
        """Why ``pin``'s generation must not be read (None if its files match its manifest).
        Hashes once per generation and file; later calls compare a stat signature."""
        key = str(pin.directory)
        problem: str | None
        try:
            signature = tuple((path, *_stat_key(pin.directory / path))
                              for path in ("manifest.json", *(ref.path for ref in pin.manifest.segments)))
        except OSError as exc:
            signature, problem = (), f"unreadable: {exc}"
        else:
            with self._lock:
                cached = self._verdicts.get(key)
            if cached is not None and cached[0] == signature:
                return cached[1]
            try:
                GenerationStore(self.root, pin.manifest.log_id, pin.kind, pin.line).verify(
                    pin.manifest, digests=self._digests)
                problem = None
            except GenerationError as exc:
                problem = f"fails verification: {exc}"
            analyzer = pin.manifest.extra.get("analyzer") or "words/1"
            if problem is None and pin.kind == "text" and analyzer != TEXT_ANALYZER:
                # Query terms of another analyzer would silently miss (CJK); never read it.
                problem = (f"was built with text analyzer {analyzer}, this planner searches with "
                           f"{TEXT_ANALYZER}; rebuild it from the log: usl rebuild text")
        if problem is not None:
            log.error("%s generation %d of %s refused: %s", pin.kind, pin.generation_id,
                      pin.manifest.log_id, problem)
        with self._lock:
            if len(self._verdicts) > 1000:
                self._verdicts.clear()
            self._verdicts[key] = (signature, problem)
        return problem

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

    def _watermarks(self, log_id: str) -> dict[str, dict[str, Any]]:
        table = (self.follower.snapshot() if self.follower is not None
                 else read_watermarks(self.bootstrap, self.settings))
        return {kind: value for (log, kind), value in table.items() if log == log_id}

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
            watermarks = self._watermarks(req.log)

    def _run_tail(self, l1: L1Reader, req: SearchRequest, span: SeqRange,
                  structured: IndexPin | None, cut: int) -> TailResult:
        """Scan ``span`` of L1 (at most ``tail_cap`` events), continuing the newest cached
        snapshot of the same scan when there is one."""
        dedup = structured is not None and cut > 0
        key = (req.log, span.from_seq, str(structured.directory) if dedup and structured else None,
               req.tool_results)
        scan = self._tail_scan()
        base = self._tails.best(key, span.to_seq) or TailSnapshot.start(span.from_seq)
        snapshot = base
        room = self.tail_cap - base.events_read
        if base.through < span.to_seq and room > 0:
            events = self._window.read(l1, req.log, base.through + 1, span.to_seq, limit=room + 1)
            to_seq = span.to_seq
            if len(events) > room:  # the cap: stop after the last event that fits
                events = events[:room]
                to_seq = events[-1][0] if events else base.through

            def known(ids: Any) -> set[str]:
                assert structured is not None
                return self._readers.known_event_ids(structured, ids, cut)

            snapshot = scan.extend(base, events, to_seq=to_seq,
                                   known_event_ids=known if dedup else None,
                                   session_acls=self._latest_acls(l1, req.log, structured, to_seq),
                                   want_tool_results=req.tool_results)
            self._tails.put(key, snapshot)
        usl_tail_scan_events.observe(snapshot.events_read)
        return scan.result(snapshot)

    def _latest_acls(
        self, l1: L1Reader, log_id: str, structured: IndexPin | None, l1_now: int,
    ) -> dict[str, dict[str, Any]]:
        """Each session's latest access list: the structured index's, brought up to ``l1_now``
        by the L1 events above it as the stream admits them (:mod:`streams.ownership`), so a
        revocation applies at once, an event without ``acl`` changes nothing and another
        tenant's event for a session is ignored."""
        acls = dict(self._readers.session_acls(structured)) if structured is not None else {}
        start = structured.built_through_seq + 1 if structured is not None else 1
        acls.update(self._acl_overlay(l1, log_id, start, l1_now, acls))
        return acls

    def _acl_overlay(self, l1: L1Reader, log_id: str, from_seq: int, to_seq: int,
                     indexed: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """sessionId → its access list after the L1 events of ``from_seq..to_seq`` (``indexed``:
        the access lists below ``from_seq``), extended from the previous query's overlay of the
        same start."""
        key = (log_id, from_seq)
        with self._lock:
            cached = self._overlays.get(key)
        through, owners = cached if cached is not None and cached[0] <= to_seq else (from_seq - 1, Owners())
        if through >= to_seq:
            return {session: current_acl(state) for session, state in owners.sessions.items()}
        if to_seq - through > self.acl_scan_cap:
            raise IndexUnavailable(
                f"the structured index is {to_seq - from_seq + 1} seqs behind the log, too far "
                "to apply access lists as of now",
                hint="Wait until `usl status` shows the structured index caught up.",
            )
        owners = owners.copy()
        owners.known = lambda session: (session_of_acl(indexed[session])
                                        if isinstance(indexed.get(session), Mapping) else None)
        for seq, raw in self._window.read(l1, log_id, through + 1, to_seq):
            try:
                event = validate_event(raw)
            except USLError:
                continue
            owners.admit(event, seq)
        with self._lock:
            self._overlays[key] = (to_seq, owners)
            while len(self._overlays) > 16:
                self._overlays.pop(next(iter(self._overlays)))
        return {session: current_acl(state) for session, state in owners.sessions.items()}

    def _trimmed(
        self, table: ChunkTable, text_pin: IndexPin | None, cut: int, sessions: set[str] | None,
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
            if not _passes(trimmed, filters):
                continue
            out.append(Candidate(row["chunkId"], "chunk", "trimmed", row["sessionId"],
                                 _posix(trimmed.get("eventTime")), trimmed, text=trimmed["text"]))
        if lost:
            decision = with_uncovered(
                decision, lost, f"{len(lost)} readable chunk(s) straddling seq {cut} could not be "
                                "trimmed to their events <= it and were left out")
        return decision, out

    def _tail_candidates(self, tail: TailResult, req: SearchRequest, readable: set[str],
                         readable_tools: set[str]) -> list[Candidate]:
        out: list[Candidate] = []
        for chunk in tail.chunks:
            if chunk["sessionId"] in readable and _passes(chunk, req.filters):
                out.append(Candidate(chunk["chunkId"], "chunk", "tail", chunk["sessionId"],
                                     _posix(chunk.get("eventTime")), chunk, text=chunk["text"]))
        for record in tail.tool_results:
            if record["sessionId"] in readable_tools and _passes_tool(record, req.filters):
                out.append(_tool_candidate(record, origin="tail"))
        return out

    def _text_list(self, pin: IndexPin, query: str, window: int, cut: int,
                   sessions: set[str] | None, only: set[str] | None) -> tuple[list[str], bool]:
        engine = self._readers.text_engine(pin)
        limit = window + 1
        while True:
            raw = engine.search(pin.directory, query, limit=limit, max_seq=cut, session_ids=sessions)
            kept = [hit for hit in raw if only is None or hit.chunk_id in only]
            if len(kept) > window or len(raw) < limit or limit >= _MAX_OVERFETCH:
                break
            limit *= 4
        return [hit.chunk_id for hit in kept[:window]], len(kept) > window

    def _vector_list(
        self, embedder: Any, pin: IndexPin, query: str, window: int, cut: int,
        allowed: Callable[[str], bool] | None, provisional: list[Candidate],
    ) -> tuple[list[tuple[str, float]] | None, bool, dict[str, Any]]:
        query_vector = np.asarray(embedder.embed([query]), dtype=np.float32)[0]
        note: dict[str, Any] = {"embedding": dict(pin.manifest.embedding or {}),
                                "similarity": "cosine"}
        if not np.any(query_vector):
            note["skipped"] = "the query has no word the embedding model knows"
            return None, False, note
        scored: list[tuple[str, float]] = []
        if cut > 0 and allowed is not None:
            reader = self._readers.vector(pin)
            hits = reader.search(query_vector, limit=window + 1, allowed=allowed)
            # An orthogonal or opposite vector is no evidence of relevance at all.
            scored += [(hit.chunk_id, float(hit.score)) for hit in hits if hit.score > VECTOR_FLOOR]
        chunks = [c for c in provisional if c.kind == "chunk" and c.text]
        if chunks:
            # Trimmed and tail chunks are embedded now, with the model that built the index.
            from sinks.vector import cosine  # faiss loads with the first vector search

            vectors = self._embed_chunks(embedder, [c.text or "" for c in chunks])
            for candidate, score in zip(chunks, (cosine(v, query_vector) for v in vectors), strict=True):
                if score > VECTOR_FLOOR:
                    candidate.scores["vector"] = float(score)
                    scored.append((candidate.id, float(score)))
            note["embeddedNow"] = len(chunks)
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

    def _tool_list(self, pin: IndexPin, query: str, window: int, cut: int, readable: set[str],
                   filters: Filters) -> tuple[list[Candidate], bool]:
        reader = self._readers.toolresults(pin)
        tool_names = filters.values.get("toolName")
        limit = window + 1
        while True:
            raw = reader.search(query, limit=limit, max_seq=cut, session_ids=readable,
                                tool_names=list(tool_names) if tool_names else None)
            kept = [row for row in raw if _passes_tool(row, filters)]
            if len(kept) > window or len(raw) < limit or limit >= _MAX_OVERFETCH:
                break
            limit *= 4
        out = []
        for row in kept[:window]:
            out.append(_tool_candidate(row, origin="index"))
        return out, len(kept) > window

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

    @contextmanager
    def _l1(self) -> Iterator[L1Reader]:
        """An L1 reader for this query (a KafkaConsumer serves one thread at a time)."""
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


def _explain_vector_fallback(decision: SnapshotDecision, pin: IndexPin | None,
                             problem: str | None) -> SnapshotDecision:
    """Say why vector ranking was dropped, and still list the generation that was inspected."""
    if problem is None or pin is None:
        return decision
    fallbacks = [f for f in decision.fallbacks if not f.startswith("vector")]
    fallbacks.append(f"{problem}; ranking uses text only")
    reasons = [f"vector: generation {pin.generation_id} not used: {problem}"
               if r.startswith("vector: no generation yet") else r for r in decision.reasons]
    watermarks = dict(decision.watermarks)
    watermarks["vector"] = Watermark(pin.generation_id, pin.built_through_seq)
    return replace(decision, fallbacks=tuple(fallbacks), reasons=tuple(reasons),
                   watermarks=watermarks)


def whole_query_phrase(query: str) -> str | None:
    """The query as one quoted phrase (its own quotes dropped), or None when it has fewer
    than two words: a single word is the text list itself."""
    bare = query.replace('"', " ")
    if not bare.strip() or len(clauses_of(f'"{bare}"').phrases) != 1:
        return None
    return f'"{bare.strip()}"'


def _depth_end(lists: list[RankedList], window: int) -> dict[str, Any] | None:
    """The explicit end of a result list that stops at the rank depth while a source had
    more matches (None when the results simply ran out)."""
    cut_short = sorted(ranked.source for ranked in lists if ranked.truncated)
    if not cut_short:
        return None
    return {"reason": "rankDepth", "depth": window, "sources": cut_short,
            "message": f"results end at rank depth {window}: {', '.join(cut_short)} had more "
                       "matches; refine the query or add filters to reach them"}


def _stat_key(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _generation_json(pin: IndexPin) -> dict[str, Any]:
    body: dict[str, Any] = {"generationId": pin.generation_id,
                            "builtThroughSeq": pin.built_through_seq, "line": pin.line,
                            "createdAt": pin.manifest.created_at}
    if pin.manifest.extra.get("engine"):
        body["engine"] = pin.manifest.extra["engine"]
    if pin.manifest.embedding:
        body["embedding"] = pin.manifest.embedding
    return body


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


def _posix(value: Any) -> float:
    return posix_time(value) or 0.0


def _passes(chunk: Mapping[str, Any], filters: Filters) -> bool:
    """In-process filter check of a trimmed or tail chunk (the index applies the same rules)."""
    if not filters:
        return True
    fields = chunk.get("fields") or {}
    plain = {"sessionId": chunk.get("sessionId"), "runId": chunk.get("runId"),
             "turnId": chunk.get("turnId")}
    listed = {"toolName": fields.get("toolNames"), "status": fields.get("statuses"),
              "role": fields.get("roles")}
    for name, values in filters.values.items():
        if name in plain:
            if plain[name] not in values:
                return False
        elif not set(listed.get(name) or ()) & set(values):
            return False
    start = _posix(chunk.get("startTime") or chunk.get("eventTime"))
    end = _posix(chunk.get("eventTime")) if chunk.get("trimmed") else \
        _posix(chunk.get("endTime") or chunk.get("eventTime"))
    if filters.time_from is not None and end < filters.time_from:
        return False
    return not (filters.time_to is not None and start > filters.time_to)


def _passes_tool(record: Mapping[str, Any], filters: Filters) -> bool:
    """Filter check of a full tool result (it has no run or turn id in the index)."""
    if not filters:
        return True
    own = {"sessionId": record.get("sessionId"), "toolName": record.get("toolName"),
           "status": record.get("status"), "role": "tool"}
    for name, values in filters.values.items():
        if own.get(name) not in values:
            return False
    when = _posix(record.get("time"))
    if filters.time_from is not None and when < filters.time_from:
        return False
    return not (filters.time_to is not None and when > filters.time_to)


def _tool_candidate(record: Mapping[str, Any], *, origin: str) -> Candidate:
    seq = int(record["seq"])
    text = str(record.get("text") or "")
    row = {
        "runId": record.get("runId"), "turnId": record.get("turnId"), "episodeId": None,
        "toolName": record.get("toolName"), "status": record.get("status"),
        "evidence": [{"eventId": record.get("eventId"), "seq": seq, "start": 0,
                      "end": len(text.encode("utf-8"))}],
    }
    return Candidate(f"toolresult:{record.get('logId')}:{seq}", "toolresult", origin,
                     str(record.get("sessionId")), _posix(record.get("time")), row, text=text)

