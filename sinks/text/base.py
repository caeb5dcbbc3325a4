"""The full-text engine interface and the pure logic every engine shares.

An engine writes and reads one index directory at a time; it knows nothing of generations
(the text sink stages a directory, lets the engine write it, and commits it as a generation).
Both engines must pass ``tests/sinks/test_text_conformance.py``: same documents, same query
semantics, same filters, same deterministic order.

Query syntax (deliberately small, so no user input can be a syntax error): words are OR-ed and
ranked by BM25; ``"double-quoted words"`` form a phrase clause; everything else — operators,
brackets, ``field:value`` — is just text, tokenized like the indexed text (lowercased runs of
letters and digits). An unterminated quote makes a phrase of the rest of the query.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from sinks.exceptions import EngineError, QueryError
from streams.asp import posix_time

__all__ = [
    "MAX_TOKEN_BYTES",
    "QueryClauses",
    "TextDoc",
    "TextEngine",
    "TextHit",
    "collect_top",
    "dedupe_last_wins",
    "parse_query",
    "to_text_doc",
]

# Tantivy's default tokenizer drops tokens of 40 bytes or more (hashes, base64 blobs); both
# engines do the same so they index the same words.
MAX_TOKEN_BYTES = 40


@dataclass(frozen=True)
class TextHit:
    """One search hit: ``rank`` is 1-based, after ordering by score desc then chunkId asc."""

    chunk_id: str
    score: float
    rank: int


@dataclass(frozen=True)
class TextDoc:
    """What the text index stores of a chunk."""

    chunk_id: str
    session_id: str
    log_id: str
    text: str
    min_seq: int
    max_seq: int
    event_time: float
    roles: tuple[str, ...] = ()
    tool_names: tuple[str, ...] = ()
    types: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueryClauses:
    """A parsed user query: single terms and multi-word phrases, already analyzed."""

    terms: tuple[str, ...]
    phrases: tuple[tuple[str, ...], ...]

    def __bool__(self) -> bool:
        return bool(self.terms or self.phrases)


@runtime_checkable
class TextEngine(Protocol):
    """A full-text engine writing and searching one index directory."""

    name: str
    # Files the engine may replace while writing: a new generation copies them instead of
    # hard-linking them from the previous one (exact names or glob patterns).
    copy_names: ClassVar[tuple[str, ...]]

    def create(self, directory: Path) -> None:
        """Create an empty index in ``directory``."""
        ...

    def add(self, directory: Path, docs: Sequence[Mapping[str, Any]]) -> None:
        """Upsert ``docs`` (SearchChunkV1 dicts) by chunkId, commit, and leave no lock file."""
        ...

    def search(
        self,
        directory: Path,
        query: str,
        *,
        limit: int,
        max_seq: int | None = None,
        session_ids: Collection[str] | None = None,
        exclude_ids: Collection[str] = (),
    ) -> list[TextHit]:
        """Top ``limit`` hits with maxSeq <= ``max_seq``, in ``session_ids`` (None: any),
        not in ``exclude_ids``; filters apply inside the engine, before the limit."""
        ...

    def count(self, directory: Path) -> int:
        """Number of live documents."""
        ...

    def all_ids(self, directory: Path) -> list[str]:
        """chunkIds of all live documents, sorted."""
        ...


def to_text_doc(chunk: Mapping[str, Any]) -> TextDoc:
    """The text-index view of a SearchChunkV1 dict (``roles`` etc. from ``fields``, or flat)."""
    fields = chunk.get("fields") or {}
    try:
        return TextDoc(
            chunk_id=str(chunk["chunkId"]),
            session_id=str(chunk["sessionId"]),
            log_id=str(chunk.get("logId") or ""),
            text=str(chunk.get("text") or ""),
            min_seq=int(chunk["minSeq"]),
            max_seq=int(chunk["maxSeq"]),
            event_time=posix_time(chunk.get("eventTime")) or 0.0,
            roles=_strings(fields.get("roles", chunk.get("roles"))),
            tool_names=_strings(fields.get("toolNames", chunk.get("toolNames"))),
            types=_strings(fields.get("types", chunk.get("types"))),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise EngineError(f"chunk {chunk.get('chunkId')!r} cannot be indexed: {exc!r}") from exc


def dedupe_last_wins(chunks: Iterable[Mapping[str, Any]]) -> list[TextDoc]:
    """Text docs of ``chunks``, one per chunkId (the last one wins, as a later upsert would)."""
    by_id: dict[str, TextDoc] = {}
    for chunk in chunks:
        doc = to_text_doc(chunk)
        by_id.pop(doc.chunk_id, None)
        by_id[doc.chunk_id] = doc
    return list(by_id.values())


def parse_query(query: str, analyze: Callable[[str], list[str]]) -> QueryClauses:
    """Split ``query`` into bare words and quoted phrases and analyze each with the engine's
    analyzer. Never fails on odd input; an empty or blank query is a QueryError."""
    if not isinstance(query, str) or not query.strip():
        raise QueryError("the search query is empty: give at least one word to search for")
    terms: dict[str, None] = {}
    phrases: dict[tuple[str, ...], None] = {}
    for is_phrase, piece in _split_quotes(query):
        tokens = analyze(piece)
        if is_phrase and len(tokens) > 1:
            phrases.setdefault(tuple(tokens), None)
        else:
            for token in tokens:
                terms.setdefault(token, None)
    return QueryClauses(terms=tuple(terms), phrases=tuple(phrases))


def collect_top(fetch: Callable[[int], list[tuple[float, str]]], limit: int) -> list[TextHit]:
    """The top ``limit`` hits ordered by score desc, then chunkId asc.

    ``fetch(n)`` returns the engine's top ``n`` (score, chunkId) pairs. Engines break score ties
    by internal doc order, which depends on segment layout; so we fetch past the window until
    the tie group at its boundary is complete, and only then order by chunkId.
    """
    if limit <= 0:
        return []
    n = limit + 16
    while True:
        hits = fetch(n)
        if len(hits) < n:
            break
        scores = sorted((score for score, _ in hits), reverse=True)
        if scores[-1] < scores[limit - 1]:
            break
        n *= 2
    ordered = sorted(hits, key=lambda hit: (-hit[0], hit[1]))[:limit]
    return [TextHit(chunk_id=cid, score=float(score), rank=i) for i, (score, cid) in enumerate(ordered, 1)]


def _split_quotes(query: str) -> list[tuple[bool, str]]:
    parts = query.split('"')
    # Odd-indexed parts are inside quotes; an unterminated quote just leaves its text last.
    return [(i % 2 == 1, part) for i, part in enumerate(parts) if part.strip()]


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value if v is not None)
