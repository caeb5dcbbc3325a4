"""The tool-results sink: full tool outputs (secrets redacted) in their own ACL-isolated
full-text index, separate from the chunk text index and never embedded.

Only callers holding the ``toolresults`` scope may search it (the planner checks
``planner.acl.can_read_toolresults`` and passes the sessions the caller may read). The index
is tantivy: a new generation hard-links the previous one's segment files and copies the two
files tantivy rewrites on commit (``meta.json``, ``.managed.json``), so the previous
generation never changes. Documents are upserted by ``id`` = ``"<logId>:<seq>"``.

Query syntax is the text index's (``sinks.text.base.parse_query``): words OR-ed and ranked
by BM25, ``"quoted phrases"``; every other character is plain text, so no user input is a
syntax error. Filters (``max_seq``, ``session_ids``, ``tool_names``) are part of the tantivy
query, so the ``limit`` window only ever counts documents the caller may see.

The analyzer is the text index's (``sinks.text.base.ANALYZER``): each Chinese, Japanese or
Korean character is a term of its own and a CJK query word is also the phrase of its
characters, so any substring of an output (a Japanese compiler error, a Chinese log line,
``调用foo函数``) is found. The indexed ``text`` field holds ``cjk_spaced(text)``; where that
differs from the output, the output itself is stored, unindexed, in ``source``, and a hit
always returns the output unchanged. Every index carries the analyzer marker file; an index
built before it (schema 1) is refused with the remedy, ``usl rebuild toolresults``.

An index written by sink shards is searched with :func:`search_shards`: ranked and scored as one
index over every shard (:mod:`sinks.text.global_bm25`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import tantivy
from tantivy import FieldType, Occur, Query

from sinks.exceptions import EngineError
from sinks.generations import clone_into
from sinks.text.base import (
    ANALYZER,
    QueryClauses,
    check_analyzer,
    cjk_spaced,
    collect_top,
    parse_query,
    write_analyzer_marker,
)
from sinks.text.global_bm25 import Shard, field_stats, global_top
from sinks.text.tantivy_engine import WORDS_TOKENIZER, words_analyzer
from sinks.writer import SOURCE_KINDS, record_id

__all__ = ["COPY_NAMES", "SCHEMA_VERSION", "ToolResultsReader", "ToolResultsWriter", "search_shards"]

SCHEMA_VERSION = "3"
"""Schema 3: ``runId`` and ``turnId`` stored, so a hit names its run and turn once indexed as it
did from the tail scan, and ``kind``: ``toolresult`` (a tool's output) or ``toolcall`` (the whole
input of a call whose chunk shows it cut, :func:`streams.redaction.events.redact_event`).
Schema 2: the CJK-aware analyzer and the unindexed ``source`` field (schema 1 had neither). An
index of another schema cannot be extended (tantivy refuses a writer of another schema): the
sink stalls its log until ``usl rebuild toolresults`` (``schema_stalls``)."""
COPY_NAMES = ("meta.json", ".managed.json")
"""Files tantivy replaces on commit: copied into a new generation, never hard-linked."""

# Tantivy leaves these behind after a writer or reader; a generation must not carry them.
_LOCK_FILES = (".tantivy-writer.lock", ".tantivy-meta.lock")
_STORED = ("id", "logId", "sessionId", "seq", "eventId", "toolCallId", "toolName", "status", "text", "time",
           "runId", "turnId", "kind")
_RAW_FIELDS = ("logId", "sessionId", "eventId", "toolCallId", "toolName", "status", "time", "runId", "turnId",
               "kind")
_KIND = "toolresults"


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    for name in ("id", *_RAW_FIELDS):
        builder.add_text_field(name, stored=True, tokenizer_name="raw")
    builder.add_integer_field("seq", stored=True, indexed=True, fast=True)
    # "text" holds cjk_spaced(output), indexed by words_analyzer() (the text index's, registered as
    # WORDS_TOKENIZER on every open); "source" the output itself, stored only, for the outputs
    # where the two differ (CJK).
    builder.add_text_field("text", stored=True, tokenizer_name=WORDS_TOKENIZER)
    builder.add_bytes_field("source", stored=True, indexed=False)
    return builder.build()


class ToolResultsWriter:
    """IndexWriter for kind ``toolresults``: tool-result records → a tantivy generation."""

    kind = "toolresults"
    sources: tuple[str, ...] = ("toolresults",)
    schema_stalls = True  # see SCHEMA_VERSION

    def __init__(self, *, heap_bytes: int = 64_000_000, threads: int = 1) -> None:
        self.heap_bytes = heap_bytes
        self.threads = threads
        self._schema = _schema()

    def describe(self) -> dict[str, Any]:
        return {"schemaVersion": SCHEMA_VERSION, "engine": "tantivy", "fields": list(_STORED),
                "embedded": False, "analyzer": ANALYZER}

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        staging = Path(staging)
        staging.mkdir(parents=True, exist_ok=True)
        if previous is not None:
            # Terms of another analyzer must not be extended with this one's: refuse.
            check_analyzer(previous, kind=_KIND)
            clone_into(previous, staging, copy_names=COPY_NAMES)
        before = _files(staging)
        index = self._index(staging, reuse=previous is not None)
        if previous is None:
            write_analyzer_marker(staging)
        docs: dict[str, dict[str, Any]] = {}
        for record in records:
            if record.get("kind") in SOURCE_KINDS["toolresults"]:
                docs.pop(record_id(record), None)  # last wins, in record order
                docs[record_id(record)] = record
        try:
            if docs:
                self._add(index, staging, list(docs.values()))
        finally:
            del index
            _remove_locks(staging)
        after = _files(staging)
        # The copied meta files are rewritten by a commit: they are new content, too.
        rewritten = {name for name in after & before if name in COPY_NAMES} if docs else set()
        return sorted((after - before) | rewritten)

    def _index(self, directory: Path, *, reuse: bool) -> tantivy.Index:
        try:
            index = tantivy.Index(self._schema, path=str(directory), reuse=reuse)
            index.register_tokenizer(WORDS_TOKENIZER, words_analyzer())
            return index
        except ValueError as exc:
            raise EngineError(f"cannot open the tool-results index {directory.name}: {exc}") from exc

    def _add(self, index: tantivy.Index, directory: Path, docs: list[dict[str, Any]]) -> None:
        try:
            writer = index.writer(heap_size=self.heap_bytes, num_threads=self.threads)
            try:
                for doc in docs:
                    writer.delete_documents_by_term("id", record_id(doc))
                    writer.add_document(_document(doc))
                writer.commit()
            except BaseException:
                writer.rollback()
                raise
            finally:
                writer.wait_merging_threads()
        except ValueError as exc:
            raise EngineError(f"tantivy could not write the tool-results index {directory.name}: {exc}") from exc


class ToolResultsReader:
    """Searches one tool-results generation. Thread-safe; opens the index once."""

    def __init__(self, gen_dir: Path) -> None:
        self.gen_dir = Path(gen_dir)
        if not tantivy.Index.exists(str(self.gen_dir)):
            raise EngineError(f"{self.gen_dir.name} holds no tool-results index")
        check_analyzer(self.gen_dir, kind=_KIND)
        try:
            self._index = tantivy.Index.open(str(self.gen_dir))
            self._index.register_tokenizer(WORDS_TOKENIZER, words_analyzer())
        except ValueError as exc:
            raise EngineError(f"cannot open the tool-results index {self.gen_dir.name}: {exc}") from exc
        # A committed generation never changes: no reload watcher.
        self._index.config_reader("manual", 0)
        self._analyzer = words_analyzer()

    def count(self) -> int:
        """Number of documents in the generation."""
        return int(self._index.searcher().num_docs)

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        max_seq: int | None = None,
        session_ids: Collection[str] | None = None,
        tool_names: Collection[str] | None = None,
    ) -> list[dict[str, Any]]:
        """The top ``limit`` tool results for ``query``, ordered by score desc then id.

        ``session_ids`` must be the sessions the caller may read (None = no session filter:
        only for callers that already checked every session); ``max_seq`` keeps results with
        seq <= max_seq. Each hit: the stored fields plus ``score`` and ``rank`` (1-based).
        An empty query raises ``sinks.exceptions.EmptyQueryError``; nothing else the user types can.
        """
        clauses = self._clauses(query)
        if not clauses or limit <= 0 or (session_ids is not None and not session_ids) \
                or (tool_names is not None and not tool_names):
            return []
        full_query = self._query(clauses, max_seq, session_ids, tool_names)
        searcher = self._index.searcher()
        docs: dict[str, dict[str, Any]] = {}

        def fetch(n: int) -> list[tuple[float, str]]:
            hits = []
            for score, address in searcher.search(full_query, limit=n, count=False).hits:
                doc = _stored(searcher.doc(address))
                docs[doc["id"]] = doc
                hits.append((score, doc["id"]))
            return hits

        return [{**docs[hit.chunk_id], "score": hit.score, "rank": hit.rank}
                for hit in collect_top(fetch, limit)]

    def _clauses(self, query: str) -> QueryClauses:
        return parse_query(query, lambda text: list(self._analyzer.analyze(cjk_spaced(text))))

    def _query(self, clauses: QueryClauses, max_seq: int | None, session_ids: Collection[str] | None,
               tool_names: Collection[str] | None) -> Query:
        schema = self._index.schema
        should = [(Occur.Should, Query.term_query(schema, "text", term)) for term in clauses.terms]
        should += [(Occur.Should, Query.phrase_query(schema, "text", list(p))) for p in clauses.phrases]
        must: list[tuple[Occur, Query]] = [(Occur.Must, Query.boolean_query(should))]
        # Filters score 0, so a hit's score is its text score whatever the filters are.
        if max_seq is not None:
            seqs = Query.range_query(schema, "seq", FieldType.Integer, upper_bound=int(max_seq))
            must.append((Occur.Must, Query.const_score_query(seqs, 0.0)))
        if session_ids is not None:
            sessions = Query.term_set_query(schema, "sessionId", sorted(set(session_ids)))
            must.append((Occur.Must, Query.const_score_query(sessions, 0.0)))
        if tool_names is not None:
            tools = Query.term_set_query(schema, "toolName", sorted(set(tool_names)))
            must.append((Occur.Must, Query.const_score_query(tools, 0.0)))
        return Query.boolean_query(must)

    def _shard(self, clauses: QueryClauses, max_seq: int | None, session_ids: Collection[str] | None,
               tool_names: Collection[str] | None) -> Shard:
        searcher = self._index.searcher()

        def name(addresses: list[Any]) -> list[tuple[str, Any]]:
            docs = [_stored(searcher.doc(address)) for address in addresses]
            return [(str(doc["id"]), doc) for doc in docs]

        return Shard(searcher, self._index.schema, self._query(clauses, max_seq, session_ids, tool_names),
                     name, field_stats(self.gen_dir, "text"))


def search_shards(
    readers: Sequence[ToolResultsReader],
    query: str,
    *,
    limit: int = 10,
    max_seq: int | None = None,
    session_ids: Collection[str] | None = None,
    tool_names: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """:meth:`ToolResultsReader.search` over the generations of every shard of one index,
    ranked and scored as one index over all of them (:mod:`sinks.text.global_bm25`)."""
    if not readers:
        return []
    clauses = readers[0]._clauses(query)
    if not clauses or limit <= 0 or (session_ids is not None and not session_ids) \
            or (tool_names is not None and not tool_names):
        return []
    shards = [reader._shard(clauses, max_seq, session_ids, tool_names) for reader in readers]
    return [{**hit.payload, "score": hit.score, "rank": rank}
            for rank, hit in enumerate(global_top(shards, "text", clauses, limit), 1)]


def _document(record: dict[str, Any]) -> tantivy.Document:
    output = str(record.get("text") or "")
    fields: dict[str, Any] = {"id": record_id(record), "seq": int(record["seq"]),
                              "text": cjk_spaced(output)}
    if fields["text"] is not output:
        fields["source"] = output.encode("utf-8")
    for name in _RAW_FIELDS:
        value = record.get(name)
        if value is not None:
            fields[name] = str(value)
    return tantivy.Document(**fields)


def _stored(doc: tantivy.Document) -> dict[str, Any]:
    stored = {name: doc.get_first(name) for name in _STORED}
    source = doc.get_first("source")
    if source is not None:  # the output as it was, not its spaced, indexed form
        stored["text"] = bytes(source).decode("utf-8")
    return stored


def _files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.is_file() and p.name not in _LOCK_FILES}


def _remove_locks(directory: Path) -> None:
    for name in _LOCK_FILES:
        (directory / name).unlink(missing_ok=True)
