"""The pure-Python alternative full-text engine: whoosh (BM25F).

Whoosh writes every segment once under a fresh name and records deletions in the TOC, which
is itself a new file per commit (``_MAIN_<n>.toc``). So, as with tantivy, a generation
hard-links the previous one's segment files; the small TOC is copied for good measure.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from math import log
from pathlib import Path
from typing import Any, ClassVar

from whoosh import analysis, fields, index, scoring
from whoosh import query as wq
from whoosh.index import Index
from whoosh.searching import Searcher

from sinks.exceptions import EngineError
from sinks.text.base import (
    MAX_TOKEN_BYTES,
    WORD_PATTERN,
    HitCheck,
    QueryClauses,
    TextDoc,
    TextHit,
    check_analyzer,
    collect_top,
    dedupe_last_wins,
    folded,
    lower_term,
    parse_query,
    text_digest,
    write_analyzer_marker,
)

__all__ = ["WhooshEngine"]

_LOCK_FILES = ("MAIN_WRITELOCK", "MAIN_READLOCK")
_CACHE_SIZE = 32


class _FoldingTokenizer(analysis.Tokenizer):  # type: ignore[misc]
    """The regex tokenizer over :func:`sinks.text.base.folded` text (NFKC), as the tantivy
    engine gets it from ``cjk_spaced``."""

    def __init__(self) -> None:
        self._inner = analysis.RegexTokenizer(WORD_PATTERN)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _FoldingTokenizer)

    def __hash__(self) -> int:
        return hash(_FoldingTokenizer)

    def __call__(self, value: str, **kwargs: Any) -> Any:
        return self._inner(folded(value), **kwargs)


class _LowercaseFilter(analysis.Filter):  # type: ignore[misc]
    """Lowercase as tantivy does (:func:`sinks.text.base.lower_term`), not as ``str.lower``."""

    def __call__(self, tokens: Any) -> Any:
        for token in tokens:
            token.text = lower_term(token.text)
            yield token


def _analyzer() -> analysis.Analyzer:
    # The same terms as the tantivy engine: one CJK character or a run of other letters and
    # digits of NFKC-folded text, lowercased, no stop words, long tokens dropped with their
    # positions kept (renumber=False), so phrases behave alike. (Whoosh counts the limit in
    # characters, tantivy in bytes.)
    return (
        _FoldingTokenizer()
        | _LowercaseFilter()
        | analysis.StopFilter(stoplist=frozenset(), minsize=1, maxsize=MAX_TOKEN_BYTES - 1, renumber=False)
    )


def _schema() -> fields.Schema:
    return fields.Schema(
        chunkId=fields.ID(stored=True, unique=True),
        sessionId=fields.ID(),
        logId=fields.ID(),
        text=fields.TEXT(analyzer=_analyzer(), stored=True, phrase=True),
        minSeq=fields.NUMERIC(int, bits=64, signed=True),
        maxSeq=fields.NUMERIC(int, bits=64, signed=True),
        eventTime=fields.NUMERIC(float, bits=64, stored=True),
        roles=fields.KEYWORD(commas=True),
        toolNames=fields.KEYWORD(commas=True),
        types=fields.KEYWORD(commas=True),
    )


class WhooshEngine:
    """Full-text engine on whoosh. ``limit_mb`` caps the writer's memory pool."""

    name = "whoosh"
    schema_version: ClassVar[str] = "2"
    copy_names: ClassVar[tuple[str, ...]] = ("_MAIN_*.toc",)

    def __init__(self, *, limit_mb: int = 256) -> None:
        self.limit_mb = limit_mb
        self._analyzer = _analyzer()
        self._cache: OrderedDict[tuple[Any, ...], tuple[Index, Searcher, threading.Lock]] = OrderedDict()
        self._lock = threading.Lock()

    def analyze(self, text: str) -> list[str]:
        """The indexed terms of ``text``."""
        return [token.text for token in self._analyzer(text)]

    def create(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if index.exists_in(str(directory)):
            raise EngineError(f"{directory} already holds a whoosh index")
        index.create_in(str(directory), _schema())
        write_analyzer_marker(directory)
        _remove_locks(directory)

    def add(self, directory: Path, docs: Sequence[Mapping[str, Any]]) -> None:
        directory = Path(directory)
        text_docs = dedupe_last_wins(docs)
        if not text_docs:
            return
        ix = self._open_uncached(directory)
        try:
            writer = ix.writer(limitmb=self.limit_mb, procs=1)
            try:
                # Upsert: delete every committed doc with these chunkIds (one query, where
                # update_document would open a searcher per doc), then add.
                writer.delete_by_query(wq.Or([wq.Term("chunkId", doc.chunk_id) for doc in text_docs]))
                for doc in text_docs:
                    writer.add_document(**_fields(doc))
            except BaseException:
                writer.cancel()
                raise
            writer.commit(merge=True)
        finally:
            ix.close()
            _remove_locks(directory)

    def search(
        self,
        directory: Path,
        query: str,
        *,
        limit: int,
        max_seq: int | None = None,
        session_ids: Collection[str] | None = None,
        exclude_ids: Collection[str] = (),
        chunk_ids_by_key: Mapping[int, str] | None = None,
        exclude_sessions: Collection[str] = (),
        checked: HitCheck | None = None,
    ) -> list[TextHit]:
        # Whoosh reads each hit's stored fields anyway: the key map has nothing to save. Its
        # filters stay inside the search: a HitCheck is a shortcut an engine may take.
        clauses = parse_query(query, self.analyze)
        if not clauses or limit <= 0 or (session_ids is not None and len(session_ids) == 0):
            return []
        return self._search(Path(directory), clauses, limit, max_seq, session_ids, exclude_ids,
                            exclude_sessions, None)

    def search_shards(
        self,
        directories: Sequence[Path],
        query: str,
        *,
        limit: int,
        max_seq: int | None = None,
        session_ids: Collection[str] | None = None,
        exclude_ids: Collection[str] = (),
        chunk_ids_by_key: Mapping[int, str] | None = None,
        exclude_sessions: Collection[str] = (),
        checked: HitCheck | None = None,
    ) -> list[TextHit]:
        """:meth:`search` over the indexes of every shard of one index, as one index over all
        of them: BM25F takes its statistics (document count, each term's document frequency,
        the field's total length) from outside, summed over the shards, so every shard scores
        its chunks as one index would, and its ``limit`` best hold its part of the top."""
        del checked  # the shards keep their filters inside each index
        clauses = parse_query(query, self.analyze)
        if not clauses or limit <= 0 or (session_ids is not None and len(session_ids) == 0):
            return []
        terms = sorted({*clauses.terms, *(term for phrase in clauses.phrases for term in phrase)})
        doc_count = field_length = 0
        doc_freqs = dict.fromkeys(terms, 0)
        for directory in directories:
            _ix, searcher, lock = self._open(Path(directory))
            with lock:
                doc_count += searcher.doc_count_all()
                field_length += searcher.field_length("text")
                for term in terms:
                    doc_freqs[term] += searcher.doc_frequency("text", term)
        weighting = _GlobalBM25F(doc_count, field_length, doc_freqs)
        hits = [hit for directory in directories
                for hit in self._search(Path(directory), clauses, limit, max_seq, session_ids,
                                        exclude_ids, exclude_sessions, weighting)]
        hits.sort(key=lambda hit: (-hit.score, hit.chunk_id))
        return [replace(hit, rank=rank) for rank, hit in enumerate(hits[:limit], 1)]

    def _search(self, directory: Path, clauses: QueryClauses, limit: int, max_seq: int | None,
                session_ids: Collection[str] | None, exclude_ids: Collection[str],
                exclude_sessions: Collection[str],
                weighting: scoring.WeightingModel | None) -> list[TextHit]:
        parts: list[wq.Query] = [wq.Term("text", term) for term in clauses.terms]
        parts += [wq.Phrase("text", list(phrase)) for phrase in clauses.phrases]
        user_query = wq.Or(parts)
        filters: list[wq.Query] = []
        if max_seq is not None:
            filters.append(wq.NumericRange("maxSeq", None, int(max_seq)))
        if session_ids is not None:
            filters.append(wq.Or([wq.Term("sessionId", s) for s in sorted(session_ids)]))
        # filter/mask restrict the matching docs before the top-n is taken; they do not score.
        allow = wq.And(filters) if filters else None
        masks: list[wq.Query] = [wq.Term("chunkId", c) for c in sorted(exclude_ids)]
        masks += [wq.Term("sessionId", s) for s in sorted(exclude_sessions)]
        mask = wq.Or(masks) if masks else None
        _ix, cached, lock = self._open(directory)
        with lock:  # a whoosh searcher shares file handles: one query at a time
            searcher = cached if weighting is None else \
                Searcher(cached.reader(), weighting=weighting, closereader=False)
            # Evaluate the filters once, not on every widening of the window.
            allow_docs = set(allow.docs(searcher)) if allow is not None else None
            mask_docs = set(mask.docs(searcher)) if mask is not None else None
            if allow_docs is not None and not allow_docs:
                return []

            digests: dict[str, bytes] = {}

            def fetch(n: int) -> list[tuple[float, str]]:
                results = searcher.search(user_query, limit=n, filter=allow_docs, mask=mask_docs)
                out = []
                for hit in results:
                    if hit["chunkId"] not in digests:
                        digests[hit["chunkId"]] = text_digest(hit.get("text", ""))
                    out.append((float(hit.score), hit["chunkId"]))
                return out

            return collect_top(fetch, limit, digests)

    def fetch_texts(self, directory: Path, chunk_ids: Collection[str]) -> dict[str, str]:
        """The stored text of each chunk in ``chunk_ids`` the index holds."""
        ids = sorted(set(chunk_ids))
        if not ids:
            return {}
        _ix, searcher, lock = self._open(Path(directory))
        with lock:
            hits = searcher.search(wq.Or([wq.Term("chunkId", c) for c in ids]), limit=len(ids))
            return {hit["chunkId"]: hit.get("text", "") for hit in hits}

    def count(self, directory: Path) -> int:
        _ix, searcher, lock = self._open(Path(directory))
        with lock:
            return int(searcher.doc_count())

    def all_ids(self, directory: Path) -> list[str]:
        _ix, searcher, lock = self._open(Path(directory))
        with lock:
            return sorted(stored["chunkId"] for stored in searcher.all_stored_fields())

    def _open_uncached(self, directory: Path) -> Index:
        if not index.exists_in(str(directory)):
            raise EngineError(f"{directory} holds no whoosh index")
        check_analyzer(directory)
        try:
            return index.open_dir(str(directory))
        except Exception as exc:  # whoosh raises assorted errors on a damaged index
            raise EngineError(f"cannot open the whoosh index in {directory}: {exc!r}") from exc

    def _open(self, directory: Path) -> tuple[Index, Searcher, threading.Lock]:
        """A searcher on the directory's latest TOC, cached while the TOC set is unchanged."""
        tocs = sorted(_toc_generation(p.name) for p in directory.glob("_MAIN_*.toc")) if directory.is_dir() else []
        if not tocs:
            raise EngineError(f"{directory} holds no whoosh index")
        toc = directory / f"_MAIN_{tocs[-1]}.toc"
        try:
            st = toc.stat()
        except FileNotFoundError as exc:
            raise EngineError(f"{directory} changed while being opened") from exc
        key = (str(directory.resolve()), tuple(tocs), st.st_ino, st.st_mtime_ns)
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None:
                self._cache.move_to_end(key)
                return entry
        ix = self._open_uncached(directory)
        entry = (ix, ix.searcher(), threading.Lock())
        with self._lock:
            self._cache[key] = entry
            while len(self._cache) > _CACHE_SIZE:
                _old_ix, old_searcher, _ = self._cache.popitem(last=False)[1]
                old_searcher.close()
        return entry


class _GlobalBM25F(scoring.BM25F):
    """Whoosh's BM25F with the statistics of several indexes summed: ``idf`` from the summed
    document frequencies and document count, the average field length from the summed lengths
    (whoosh's own formulas, so a term scores as in one index over all of them)."""

    def __init__(self, doc_count: int, field_length: int, doc_freqs: Mapping[str, int]) -> None:
        super().__init__()
        self.doc_count = doc_count
        self.average_length = field_length / (doc_count or 1)
        self.doc_freqs = dict(doc_freqs)

    def idf(self, searcher: Searcher, fieldname: str, text: Any) -> float:
        word = text.decode("utf-8") if isinstance(text, bytes) else text
        if fieldname != "text" or word not in self.doc_freqs:
            return float(super().idf(searcher, fieldname, text))
        return log(self.doc_count / (self.doc_freqs[word] + 1)) + 1

    def scorer(self, searcher: Searcher, fieldname: str, text: Any, qf: int = 1) -> Any:
        if fieldname != "text":
            return super().scorer(searcher, fieldname, text, qf=qf)
        return _GlobalScorer(searcher, fieldname, text, self.B, self.K1, qf,
                             idf=self.idf(searcher, fieldname, text), average_length=self.average_length)


class _GlobalScorer(scoring.BM25FScorer):  # type: ignore[misc]
    """BM25FScorer with its idf and average length given (set before ``setup``, which derives
    the block-quality bound from them)."""

    def __init__(self, searcher: Searcher, fieldname: str, text: Any, B: float, K1: float,
                 qf: int, *, idf: float, average_length: float) -> None:
        self.idf = idf
        self.avgfl = average_length or 1
        self.B = B
        self.K1 = K1
        self.qf = qf
        self.setup(searcher, fieldname, text)


def _fields(doc: TextDoc) -> dict[str, Any]:
    return {
        "chunkId": doc.chunk_id,
        "sessionId": doc.session_id,
        "logId": doc.log_id,
        "text": doc.text,
        "minSeq": doc.min_seq,
        "maxSeq": doc.max_seq,
        "eventTime": doc.event_time,
        # KEYWORD(commas=True) splits on commas only, so values may contain spaces.
        "roles": ",".join(v.replace(",", " ") for v in doc.roles),
        "toolNames": ",".join(v.replace(",", " ") for v in doc.tool_names),
        "types": ",".join(v.replace(",", " ") for v in doc.types),
    }


def _toc_generation(name: str) -> int:
    number = name[len("_MAIN_"):-len(".toc")]
    return int(number) if number.isdigit() else -1


def _remove_locks(directory: Path) -> None:
    for name in _LOCK_FILES:
        (directory / name).unlink(missing_ok=True)
