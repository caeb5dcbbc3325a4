"""The default full-text engine: tantivy (Rust, BM25), through its Python binding.

Tantivy never rewrites a segment file: new data and deletes go to new files, and only
``meta.json`` / ``.managed.json`` are replaced (atomically) on commit. So a generation can
hard-link the previous one's files and copy just those two (:attr:`TantivyEngine.copy_names`).

Schema 3 (:attr:`TantivyEngine.schema_version`) adds three numeric fast fields: ``chunkKey``
(:func:`sinks.text.base.chunk_key` of the chunk id) and ``digestHigh``/``digestLow`` (the two
halves of :func:`sinks.text.base.text_digest` of its text). A search reads a hit's id and
digest from those columns instead of its stored document, which at a window of a few hundred
hits was most of a query's cost. An index of schema 2 lacks them and is refused with the remedy
(``usl rebuild text``).

Word pairs: the ``pairs`` field holds every two adjacent terms of ``text`` as one term
(``a_b``). A phrase is searched only over the chunks holding each of its adjacent pairs (a
filter scoring 0), so tantivy checks positions in the few chunks that can match instead of in
every chunk holding all its words: two common words at a million chunks took 11-15 ms as a
plain phrase. Same hits, same scores. An index written before the field existed lacks it (same
schema version: the field only adds); its phrases are searched as before and its new documents
get no pairs, until ``usl rebuild text``.

:meth:`TantivyEngine.search_shards` searches the indexes of several sink shards as one index:
same hits, same order, same scores (:mod:`sinks.text.global_bm25`).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import tantivy
from tantivy import FieldType, Occur, Query

from sinks.exceptions import EngineError
from sinks.generations import clone_into, link_or_copy
from sinks.text.base import (
    ANALYZER_MARKER,
    MAX_TOKEN_BYTES,
    HitCheck,
    QueryClauses,
    TextDoc,
    TextHit,
    check_analyzer,
    chunk_key,
    cjk_spaced,
    collect_top,
    dedupe_last_wins,
    parse_query,
    text_digest,
    unique_keys,
    write_analyzer_marker,
)
from sinks.text.global_bm25 import FieldStats, Shard, field_stats, global_top

__all__ = ["WORDS_TOKENIZER", "LiveIndex", "TantivyEngine", "index_opstamp", "words_analyzer"]

log = logging.getLogger("usl.sink")

# Tantivy creates these while a writer or reader is open and leaves them behind; a committed
# generation must not carry them.
_LOCK_FILES = (".tantivy-writer.lock", ".tantivy-meta.lock")
_CACHE_SIZE = 32
_TERM_SET_CACHE = 64
# A HitCheck keeping less than this share of the index: the filters run inside it.
_CHECK_SHARE = 0.5
#: Up to this many chunk ids are looked up with one term query each (``_documents_of``).
_ID_CLAUSES = 2048
_UNINDEXED = "usl_unindexed"
# The "text" field's analyzer, registered under its own name on every open: tantivy's built-in
# "default" drops tokens of 40 bytes or more, and analyzer 5 keeps them up to MAX_TOKEN_BYTES.
WORDS_TOKENIZER = "usl_words"
# The "pairs" field's analyzer: its value is the text's adjacent word pairs, space-separated.
PAIRS_TOKENIZER = "usl_pairs"
SCHEMA_VERSION = "3"
_KEY_FIELDS = ("chunkKey", "digestHigh", "digestLow")


def words_analyzer() -> tantivy.TextAnalyzer:
    """The indexed terms of the text and tool-results indexes: tantivy's simple tokenizer, tokens of :data:`MAX_TOKEN_BYTES` or more
    dropped, lowercased, over :func:`cjk_spaced` text, which is exactly
    ``sinks.text.base.analyze_text`` (the regex tokenizer gives the same terms directly but
    indexes about 5x slower)."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


def _unindexed() -> tantivy.TextAnalyzer:
    # The whole text as one raw token, dropped at once: a stored field with no terms.
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.raw()).filter(tantivy.Filter.remove_long(1)).build()


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("chunkId", stored=True, tokenizer_name="raw")
    builder.add_text_field("sessionId", tokenizer_name="raw")
    builder.add_text_field("logId", tokenizer_name="raw")
    # "text" holds cjk_spaced(text), indexed with the WORDS_TOKENIZER analyzer; the query side
    # analyzes with the same, so query terms are the indexed terms. For the few chunks where
    # that differs from the chunk's own text (CJK), the own text is also stored, unindexed,
    # in "source": the chunk's byte offsets point into it.
    builder.add_text_field("text", stored=True, tokenizer_name=WORDS_TOKENIZER)
    builder.add_text_field("source", stored=True, tokenizer_name=_UNINDEXED, index_option="basic")
    builder.add_integer_field("minSeq", indexed=True, fast=True)
    builder.add_integer_field("maxSeq", indexed=True, fast=True)
    builder.add_float_field("eventTime", stored=True, indexed=True, fast=True)
    for name in ("roles", "toolNames", "types"):
        builder.add_text_field(name, tokenizer_name="raw")
    # Schema 3: a hit's chunk id and text digest as columns (module docstring).
    for name in _KEY_FIELDS:
        builder.add_unsigned_field(name, fast=True)
    # Every two adjacent terms of "text" as one term "a_b" (module docstring, "Word pairs").
    builder.add_text_field("pairs", tokenizer_name=PAIRS_TOKENIZER, index_option="freq")
    return builder.build()


def _pairs_analyzer() -> tantivy.TextAnalyzer:
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


# The words tokenizer keeps letters and digits only, so "_" cannot occur inside a term.
_PAIR_SEPARATOR = "_"


def _pair(first: str, second: str) -> str:
    return f"{first}{_PAIR_SEPARATOR}{second}"


def _has_pairs(schema: tantivy.Schema) -> bool:
    """Whether an index of this schema has the "pairs" field (indexes written before it was
    added have not; their phrases are searched without it, with the same answers)."""
    try:
        Query.term_query(schema, "pairs", "_")
    except ValueError:
        return False
    return True


class TantivyEngine:
    """Full-text engine on tantivy. ``heap_bytes``/``threads`` size the index writer."""

    name = "tantivy"
    schema_version: ClassVar[str] = SCHEMA_VERSION
    copy_names: ClassVar[tuple[str, ...]] = ("meta.json", ".managed.json")

    def __init__(self, *, heap_bytes: int = 64_000_000, threads: int = 1) -> None:
        self.heap_bytes = heap_bytes
        self.threads = threads
        self._schema = _schema()
        self._analyzer = words_analyzer()
        self._cache: OrderedDict[tuple[Any, ...], tantivy.Index] = OrderedDict()
        self._lock = threading.Lock()
        self._term_sets: OrderedDict[tuple[str, int], tuple[frozenset[str], Query]] = OrderedDict()

    def analyze(self, text: str) -> list[str]:
        """The indexed terms of ``text``."""
        return list(self._analyzer.analyze(cjk_spaced(text)))

    def fetch_texts(self, directory: Path, chunk_ids: Collection[str]) -> dict[str, str]:
        """The stored text of each chunk in ``chunk_ids`` the index holds."""
        searcher, addresses = self._documents_of(directory, chunk_ids)
        found: dict[str, str] = {}
        for address in addresses:
            doc = searcher.doc(address)
            found[str(doc.get_first("chunkId"))] = _stored_text(doc)
        return found

    def fetch_digests(self, directory: Path, chunk_ids: Collection[str]) -> dict[str, bytes]:
        """:func:`text_digest` of the stored text of each chunk in ``chunk_ids`` the index
        holds, read from the digest columns (the stored document only for a key two of the
        asked ids share)."""
        searcher, addresses = self._documents_of(directory, chunk_ids)
        return dict(_named(searcher, addresses, unique_keys(set(chunk_ids)))) if addresses else {}

    def _documents_of(self, directory: Path, chunk_ids: Collection[str]) -> tuple[Any, list[Any]]:
        """A searcher and the addresses of the documents of ``chunk_ids`` the index holds."""
        ids = sorted(set(chunk_ids))
        if not ids:
            return None, []
        index = self._open(Path(directory))
        searcher = index.searcher()
        if len(ids) <= _ID_CLAUSES:
            # A term query per id: each reads one short posting list, where a term set query
            # fills a bitset as large as the index (3x slower for a page's 200 ids over a
            # million chunks; docs/planner.md, "Performance"). Past a few thousand ids the
            # bitset wins.
            query = Query.boolean_query([(Occur.Should, Query.term_query(index.schema, "chunkId", chunk_id))
                                         for chunk_id in ids])
        else:
            query = Query.term_set_query(index.schema, "chunkId", ids)
        return searcher, [address for _, address in searcher.search(query, limit=len(ids), count=False).hits]

    def create(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if tantivy.Index.exists(str(directory)):
            raise EngineError(f"{directory} already holds a tantivy index")
        try:
            index = tantivy.Index(self._schema, path=str(directory), reuse=False)
        except ValueError as exc:
            raise EngineError(f"cannot create a tantivy index in {directory}: {exc}") from exc
        del index
        write_analyzer_marker(directory)
        _remove_locks(directory)

    def add(self, directory: Path, docs: Sequence[Mapping[str, Any]]) -> None:
        directory = Path(directory)
        text_docs = dedupe_last_wins(docs)
        if not text_docs:
            return
        index = self._open_uncached(directory)
        try:
            writer = index.writer(heap_size=self.heap_bytes, num_threads=self.threads)
            try:
                _upsert(writer, text_docs, index.schema)
            except BaseException:
                writer.rollback()
                raise
            finally:
                # Merges finish before the directory is committed as a generation.
                writer.wait_merging_threads()
        except ValueError as exc:
            raise EngineError(f"tantivy could not write {directory}: {exc}") from exc
        finally:
            del index
            _remove_locks(directory)

    def live(self, work_dir: Path, previous: Path | None) -> LiveIndex:
        """An index kept open in ``work_dir`` from the generation in ``previous`` (None: empty),
        whose merges run in the background (:class:`LiveIndex`)."""
        return LiveIndex(self, Path(work_dir), previous)

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
        clauses = parse_query(query, self.analyze)
        if not clauses or limit <= 0 or (session_ids is not None and len(session_ids) == 0):
            return []
        index = self._open(Path(directory))
        filtered = max_seq is not None or session_ids is not None or bool(exclude_ids) or bool(exclude_sessions)
        # Filters that keep most of the index cost more inside it than checking the top hits:
        # over a million chunks, leaving out a tenth of the sessions took 6.5 ms of a search's
        # 9, against 3.4 ms for the same search unfiltered (docs/planner.md, "Performance").
        bare = (self._full_query(index.schema, clauses, None, None, (), ())
                if filtered and checked is not None and checked.share >= _CHECK_SHARE else None)
        searcher = index.searcher()
        digests: dict[str, bytes] = {}
        by_key = chunk_ids_by_key or {}

        # Built only when searched: wrapping a filter's session term set costs ~0.3 ms.
        full_query = functools.cache(lambda: self._full_query(
            index.schema, clauses, max_seq, session_ids, exclude_ids, exclude_sessions))

        def fetch(n: int) -> list[tuple[float, str]]:
            found: list[tuple[float, str, bytes]] | None = None
            if bare is not None and checked is not None:
                # The engine's order (score, then address) is the filtered search's order with
                # the rejected hits taken out, and the scores are the same (the filters score
                # 0): the first n kept are its first n, once n are kept or all were seen.
                found = _leading(searcher, bare, math.ceil(n / checked.share * 1.25) + 16,
                                 limit, n, by_key, checked.keeps)
            if found is None:
                found = _leading(searcher, full_query(), n, limit, n, by_key, None)
                assert found is not None
            for _, chunk_id, digest in found:
                digests.setdefault(chunk_id, digest)
            return [(score, chunk_id) for score, chunk_id, _ in found]

        return collect_top(fetch, limit, digests)

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
        """:meth:`search` over the indexes of every shard of one index, ranked and scored as
        one index over all of them (:mod:`sinks.text.global_bm25`)."""
        del checked  # the shards keep their filters inside each index
        clauses = parse_query(query, self.analyze)
        if not clauses or limit <= 0 or (session_ids is not None and len(session_ids) == 0):
            return []
        by_key = chunk_ids_by_key or {}
        shards = []
        for directory in directories:
            index = self._open(Path(directory))
            searcher = index.searcher()

            def name(addresses: list[Any], searcher: Any = searcher) -> list[tuple[str, Any]]:
                return list(_named(searcher, addresses, by_key))

            shards.append(Shard(searcher, index.schema,
                                self._full_query(index.schema, clauses, max_seq, session_ids,
                                                 exclude_ids, exclude_sessions),
                                name, field_stats(Path(directory), "text")))
        hits = global_top(shards, "text", clauses, limit)
        return [TextHit(chunk_id=hit.key, score=hit.score, rank=rank, digest=hit.payload)
                for rank, hit in enumerate(hits, 1)]

    def term_statistics(self, directories: Sequence[Path],
                        terms: Collection[str]) -> tuple[FieldStats, dict[str, int]]:
        """What this engine's BM25 reads of the indexes in ``directories`` taken as one (the
        shards of one generation): the ``text`` field's document and token counts and each of
        ``terms``' document frequency, so texts outside the index can be scored as it would
        score them (:func:`planner.local.rank_texts_as_index`)."""
        stats = FieldStats(0, 0)
        freqs = dict.fromkeys(terms, 0)
        for directory in directories:
            searcher = self._open(Path(directory)).searcher()
            stats += field_stats(Path(directory), "text")
            for term in freqs:
                freqs[term] += int(searcher.doc_freq("text", term))
        return stats, freqs

    def _full_query(self, schema: tantivy.Schema, clauses: QueryClauses, max_seq: int | None,
                    session_ids: Collection[str] | None, exclude_ids: Collection[str],
                    exclude_sessions: Collection[str]) -> Query:
        """The search query: the clauses OR-ed (BM25), and the filters, which score 0."""
        should = [(Occur.Should, Query.term_query(schema, "text", term)) for term in clauses.terms]
        pairs = _has_pairs(schema)
        should += [(Occur.Should, self._phrase(schema, list(phrase), pairs)) for phrase in clauses.phrases]
        must: list[tuple[Occur, Query]] = [(Occur.Must, Query.boolean_query(should))]
        # Filters score 0, so a hit's score is its text score whatever the filters are.
        if max_seq is not None:
            seq_range = Query.range_query(schema, "maxSeq", FieldType.Integer, upper_bound=int(max_seq))
            must.append((Occur.Must, Query.const_score_query(seq_range, 0.0)))
        if session_ids is not None:
            sessions = self._term_set(schema, "sessionId", session_ids)
            must.append((Occur.Must, Query.const_score_query(sessions, 0.0)))
        if exclude_sessions:
            must.append((Occur.MustNot, self._term_set(schema, "sessionId", exclude_sessions)))
        if exclude_ids:
            must.append((Occur.MustNot, Query.term_set_query(schema, "chunkId", sorted(exclude_ids))))
        if len(must) == 1:
            # No filter: the clauses alone. The same hits and scores, and tantivy skips more of
            # a union's postings without the wrapper (3.1 against 3.7 ms over a million chunks).
            return must[0][1]
        return Query.boolean_query(must)

    @staticmethod
    def _phrase(schema: tantivy.Schema, terms: list[str], pairs: bool) -> Query:
        """The phrase query of ``terms``; where the index has word pairs, only over the chunks
        holding each adjacent pair of them, a filter that scores 0 (so the same hits, the same
        scores). A phrase of common words otherwise checks positions in every chunk holding all
        of them: 11-15 ms at a million chunks for two words, against 3 ms for the words alone."""
        phrase = Query.phrase_query(schema, "text", list[str | tuple[int, str]](terms))
        if not pairs or len(terms) < 2:
            return phrase
        every_pair = Query.boolean_query([(Occur.Must, Query.term_query(schema, "pairs", _pair(a, b)))
                                          for a, b in itertools.pairwise(terms)])
        return Query.boolean_query([(Occur.Must, phrase), (Occur.Must, Query.const_score_query(every_pair, 0.0))])

    def _term_set(self, schema: tantivy.Schema, field: str, values: Collection[str]) -> Query:
        """A term set query of ``values``; one of a frozenset is kept and reused for that very
        object. The planner passes the same frozenset of sessions to every query of one
        principal and structured generation: sorting and handing over thousands of session
        ids cost more than the search itself at 100k chunks (docs/planner.md, Performance)."""
        if not isinstance(values, frozenset):
            return Query.term_set_query(schema, field, sorted(values))
        # Every index this engine opens has schema 3 (others are refused), so a query built
        # with one index's schema names the same fields in any other.
        key = (field, id(values))
        with self._lock:
            cached = self._term_sets.get(key)
            if cached is not None and cached[0] is values:
                self._term_sets.move_to_end(key)
                return cached[1]
        query = Query.term_set_query(schema, field, sorted(values))
        with self._lock:
            # The set is held with its query, so its id cannot be reused while the entry lives.
            self._term_sets[key] = (values, query)
            while len(self._term_sets) > _TERM_SET_CACHE:
                self._term_sets.popitem(last=False)
        return query

    def count(self, directory: Path) -> int:
        return int(self._open(Path(directory)).searcher().num_docs)

    def all_ids(self, directory: Path) -> list[str]:
        searcher = self._open(Path(directory)).searcher()
        total = searcher.num_docs
        if total == 0:
            return []
        hits = searcher.search(Query.all_query(), limit=total, count=False).hits
        return sorted(searcher.doc(address)["chunkId"][0] for _, address in hits)

    def _open_uncached(self, directory: Path) -> tantivy.Index:
        if not directory.is_dir() or not tantivy.Index.exists(str(directory)):
            raise EngineError(f"{directory} holds no tantivy index")
        check_analyzer(directory)
        try:
            index = tantivy.Index.open(str(directory))
        except ValueError as exc:
            raise EngineError(f"cannot open the tantivy index in {directory}: {exc}") from exc
        try:
            Query.term_query(index.schema, _KEY_FIELDS[0], 0)
        except ValueError as exc:
            # Schema 2 (no key columns): reading it would work, extending it would not.
            raise EngineError(f"the text index in {directory} has tantivy schema 2, this version "
                              f"writes and searches schema {SCHEMA_VERSION} (chunk keys as fast "
                              f"fields); rebuild it from the log: usl rebuild text") from exc
        index.register_tokenizer(_UNINDEXED, _unindexed())
        index.register_tokenizer(WORDS_TOKENIZER, words_analyzer())
        index.register_tokenizer(PAIRS_TOKENIZER, _pairs_analyzer())
        return index

    def _open(self, directory: Path) -> tantivy.Index:
        """An opened index for reading; cached while the directory's meta.json is unchanged
        (committed generations never change, so in practice until evicted)."""
        try:
            meta = (directory / "meta.json").stat()
        except FileNotFoundError as exc:
            raise EngineError(f"{directory} holds no tantivy index") from exc
        key = (str(directory.resolve()), meta.st_ino, meta.st_mtime_ns, meta.st_size)
        with self._lock:
            index = self._cache.get(key)
            if index is not None:
                self._cache.move_to_end(key)
                return index
        index = self._open_uncached(directory)
        # No file watcher: a generation's meta.json never changes after commit.
        index.config_reader("manual", 0)
        with self._lock:
            self._cache[key] = index
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return index


def _stored_text(doc: tantivy.Document) -> str:
    """The chunk's own text as stored (``source`` when the indexed form was CJK-spaced)."""
    return str(doc.get_first("source") or doc.get_first("text") or "")


def _named(searcher: tantivy.Searcher, addresses: list[Any],
           by_key: Mapping[int, str]) -> list[tuple[str, bytes]]:
    """(chunkId, :func:`text_digest` of its text) of each address: from the key and digest
    columns where ``by_key`` names the key, else (a chunk the map does not know, a colliding
    key) from the stored document, which costs a read and a hash."""
    if by_key:
        keys, highs, lows = (searcher.fast_field_values(name, addresses) for name in _KEY_FIELDS)
    else:
        keys = highs = lows = [None] * len(addresses)
    named = []
    for address, key, high, low in zip(addresses, keys, highs, lows, strict=True):
        chunk_id = by_key.get(int(key)) if key is not None else None
        if chunk_id is None or high is None or low is None:
            doc = searcher.doc(address)
            named.append((str(doc.get_first("chunkId")), text_digest(_stored_text(doc))))
        else:
            named.append((chunk_id, int(high).to_bytes(8, "big") + int(low).to_bytes(8, "big")))
    return named


def _leading(searcher: tantivy.Searcher, query: Query, asked: int, limit: int, n: int,
             by_key: Mapping[int, str], keeps: Callable[[str], bool] | None,
             ) -> list[tuple[float, str, bytes]] | None:
    """The first hits of the engine's top ``asked`` for ``query`` that ``keeps`` admits (all,
    without it) as (score, chunkId, digest), for :func:`collect_top`'s ``fetch(n)``: the first
    ``n``, or fewer when those are every hit that can be among the top ``limit``, which ends
    at the first hit scoring below the ``limit``-th (the engine's order is by score). Only
    those are named: the rest of a window asked wide for ties cost as much again to name. None
    when ``keeps`` left too few of the ``asked`` and more hits exist (search with the filters)."""
    hits = searcher.search(query, limit=asked, count=False).hits
    addresses = [address for _, address in hits]
    keys = searcher.fast_field_values("chunkKey", addresses) if by_key else [None] * len(hits)
    kept: list[tuple[float, str, Any, bytes | None]] = []
    bound = None
    for (score, address), key in zip(hits, keys, strict=True):
        if bound is not None and score < bound:
            break
        chunk_id = by_key.get(int(key)) if key is not None else None
        digest = None
        if chunk_id is None:  # a chunk the map does not know, or a colliding key
            doc = searcher.doc(address)
            chunk_id, digest = str(doc.get_first("chunkId")), text_digest(_stored_text(doc))
        if keeps is not None and not keeps(chunk_id):
            continue
        kept.append((score, chunk_id, address, digest))
        if len(kept) == limit:
            bound = score
        if len(kept) == n:
            break
    else:
        if keeps is not None and len(hits) == asked:
            return None
    # The kept hits named by key still need their digests: from the columns, as _named reads them.
    unnamed = [i for i, hit in enumerate(kept) if hit[3] is None]
    named = dict(zip(unnamed, _named(searcher, [kept[i][2] for i in unnamed], by_key), strict=True))
    return [(score, chunk_id, digest if digest is not None else named[i][1])
            for i, (score, chunk_id, _, digest) in enumerate(kept)]


def _document(doc: TextDoc, analyzer: tantivy.TextAnalyzer | None = None) -> tantivy.Document:
    """The document of ``doc``; with ``analyzer`` (the words analyzer, for an index with the
    "pairs" field) its adjacent word pairs too."""
    fields: dict[str, Any] = {
        "chunkId": doc.chunk_id,
        "sessionId": doc.session_id,
        "logId": doc.log_id,
        "text": cjk_spaced(doc.text),
        "minSeq": doc.min_seq,
        "maxSeq": doc.max_seq,
        "eventTime": doc.event_time,
    }
    if fields["text"] is not doc.text:
        fields["source"] = doc.text
    if analyzer is not None:
        # Adjacent terms of the analyzed text: a phrase's terms sit at adjacent positions, and
        # so are adjacent here (a dropped long token leaves a gap the phrase does not cross).
        terms = analyzer.analyze(fields["text"])
        if len(terms) > 1:
            fields["pairs"] = " ".join(map(_PAIR_SEPARATOR.join, itertools.pairwise(terms)))
    for name, values in (("roles", doc.roles), ("toolNames", doc.tool_names), ("types", doc.types)):
        if values:
            fields[name] = list(values)
    document = tantivy.Document(**fields)
    # Keyword values above 2**63 would become floats: unsigned values go in explicitly.
    digest = text_digest(doc.text)
    document.add_unsigned("chunkKey", chunk_key(doc.chunk_id))
    document.add_unsigned("digestHigh", int.from_bytes(digest[:8], "big"))
    document.add_unsigned("digestLow", int.from_bytes(digest[8:], "big"))
    return document


def _upsert(writer: tantivy.IndexWriter, docs: Sequence[TextDoc], schema: tantivy.Schema) -> None:
    """Upsert ``docs`` by chunk id and commit: each delete applies to every earlier document
    with that id, its add after it. An index of a ``schema`` without the "pairs" field (one
    written before it) gets documents without it."""
    analyzer = words_analyzer() if _has_pairs(schema) else None
    for doc in docs:
        writer.delete_documents_by_term("chunkId", doc.chunk_id)
        writer.add_document(_document(doc, analyzer))
    writer.commit()


def _remove_locks(directory: Path) -> None:
    for name in _LOCK_FILES:
        (directory / name).unlink(missing_ok=True)


class LiveIndex:
    """One log's text index, kept open by a running sink so that tantivy merges its segments in
    its own background threads rather than inside a commit.

    :meth:`TantivyEngine.add` waits for the merges its commit starts, so the generation it
    stages never has a merge running in it; at a million chunks one such wait held the text
    watermark for many seconds (docs/sinks.md, "Text merges in the background"). Here each
    batch is committed in a work directory beside the generations (the line's ``.live``, on
    their filesystem), and :meth:`stage` hard-links
    the committed state, ``meta.json`` and exactly the segment files it names, into the staging
    directory of the next generation. A merge still running writes segments no ``meta.json``
    names yet; one that has finished is in the next generation, holding the same documents.
    Tantivy's garbage collection of merged-away files in the work directory leaves the links in
    committed generations intact.

    ``based_on`` is the opstamp of the state the last staged generation holds (for a new index,
    of the generation it was cloned from): the sink's next batch must build on that generation,
    else (a commit that failed after staging) the caller starts a new one from the generation it
    has.
    """

    def __init__(self, engine: TantivyEngine, work_dir: Path, previous: Path | None) -> None:
        shutil.rmtree(work_dir, ignore_errors=True)  # a crashed process's work is not trusted
        work_dir.parent.mkdir(parents=True, exist_ok=True)
        if previous is None:
            engine.create(work_dir)
        else:
            work_dir.mkdir()
            clone_into(previous, work_dir, copy_names=engine.copy_names)
        self.work_dir = work_dir
        self._index = engine._open_uncached(work_dir)
        self._writer = self._index.writer(heap_size=engine.heap_bytes, num_threads=engine.threads)
        self.based_on: int | None = None if previous is None else index_opstamp(previous)

    def add(self, docs: Sequence[Mapping[str, Any]]) -> None:
        """Upsert ``docs`` by chunk id and commit, without waiting for the merges it starts."""
        text_docs = dedupe_last_wins(docs)
        if not text_docs:
            return
        try:
            _upsert(self._writer, text_docs, self._index.schema)
        except ValueError as exc:
            self._writer.rollback()
            raise EngineError(f"tantivy could not write {self.work_dir}: {exc}") from exc

    def stage(self, staging: Path) -> None:
        """Hard-link the last committed state into the empty directory ``staging``."""
        staging.mkdir(parents=True, exist_ok=True)  # as create() and clone_into() would
        for _ in range(20):
            meta_bytes = (self.work_dir / "meta.json").read_bytes()  # replaced atomically by tantivy
            meta = json.loads(meta_bytes)
            names = _segment_files(self.work_dir, meta)
            try:
                for name in names:
                    link_or_copy(self.work_dir / name, staging / name)
            except FileNotFoundError:
                # A merge ended and its inputs were collected meanwhile: a newer meta.json names its output.
                for name in names:
                    (staging / name).unlink(missing_ok=True)
                continue
            (staging / "meta.json").write_bytes(meta_bytes)
            # The files a writer opened on this generation may collect (as tantivy's own list does).
            (staging / ".managed.json").write_text(json.dumps(sorted([*names, "meta.json"])))
            shutil.copyfile(self.work_dir / ANALYZER_MARKER, staging / ANALYZER_MARKER)
            self.based_on = int(meta["opstamp"])
            return
        raise EngineError(f"{self.work_dir}: no consistent committed state to stage after 20 tries")

    def close(self) -> None:
        """Let running merges finish and release the writer. A line deleted meanwhile (an old
        line after a rebuild switched lines) takes its work directory with it: nothing to keep."""
        try:
            self._writer.wait_merging_threads()
        except ValueError as exc:
            log.warning("text index in %s closed with an unfinished merge: %s", self.work_dir, exc)
        del self._index
        _remove_locks(self.work_dir)


def index_opstamp(directory: Path) -> int:
    """The opstamp of the commit the tantivy index in ``directory`` holds."""
    try:
        return int(json.loads((Path(directory) / "meta.json").read_bytes())["opstamp"])
    except (OSError, ValueError, KeyError) as exc:
        raise EngineError(f"{directory}: unreadable tantivy meta.json: {exc}") from exc


def _segment_files(directory: Path, meta: Mapping[str, Any]) -> list[str]:
    """The files of the segments ``meta`` names: ``<segment id>.<component>``, and of its deletes
    only ``<segment id>.<opstamp>.del`` of the opstamp ``meta`` gives."""
    deletes: dict[str, str | None] = {}
    for segment in meta["segments"]:
        stamp = (segment.get("deletes") or {}).get("opstamp")
        deletes[str(segment["segment_id"]).replace("-", "")] = None if stamp is None else f"{stamp}.del"
    names = []
    for name in os.listdir(directory):
        stem, _, component = name.partition(".")
        if stem in deletes and (not component.endswith(".del") or component == deletes[stem]):
            names.append(name)
    return sorted(names)
