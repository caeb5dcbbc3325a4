"""In-process full-text matching and ranking, for texts no index holds.

The tail scan's provisional chunks, trimmed straddling chunks and tail tool results exist only
for one query, so they are ranked here with the same query semantics as the text index
(``sinks.text.base.parse_query``: words OR-ed, ``"quoted phrases"``, the analyzer of
``sinks.text.base.analyze_text``: lowercased runs of letters and digits, each CJK character a
token of its own, tokens of 40 bytes or more dropped) and BM25 (k1 = 1.2, b = 0.75) over the
provisional documents themselves (:func:`rank_texts`). Those scores are not comparable with the
index's (another corpus, other statistics). :func:`rank_texts_as_index` scores the same texts
with the text index's statistics, as tantivy would score them were they indexed: comparable
with the index's own hits, so the planner merges them into the index's lists by score.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache

from sinks.text.base import QueryClauses, analyze_text, parse_query
from sinks.text.global_bm25 import Bm25Model, FieldStats

__all__ = ["analyze", "clauses_of", "matches", "rank_texts", "rank_texts_as_index"]

_K1 = 1.2
_B = 0.75


def analyze(text: str) -> list[str]:
    """The terms of ``text`` as the text index sees them."""
    return list(_terms(text))


@lru_cache(maxsize=1 << 14)
def _terms(text: str) -> tuple[str, ...]:
    # Tail texts recur from query to query (the same tail, a little longer): analyze once.
    return tuple(analyze_text(text))


@lru_cache(maxsize=1 << 14)
def _counts(text: str) -> Counter[str]:
    return Counter(_terms(text))


def clauses_of(query: str) -> QueryClauses:
    """The parsed query (terms and phrases)."""
    return parse_query(query, analyze)


def matches(clauses: QueryClauses, text: str) -> bool:
    """Whether ``text`` matches at least one term or phrase of the query."""
    tokens = _terms(text)
    present = _counts(text)
    if any(term in present for term in clauses.terms):
        return True
    return any(_phrase_count(tokens, phrase) for phrase in clauses.phrases)


def rank_texts(clauses: QueryClauses, docs: Sequence[tuple[str, str]]) -> list[tuple[str, float]]:
    """``(id, score)`` of the matching ``(id, text)`` docs: BM25 desc, then id asc."""
    if not docs or not clauses:
        return []
    analyzed = [(doc_id, _terms(text)) for doc_id, text in docs]
    count = len(analyzed)
    average = sum(len(tokens) for _, tokens in analyzed) / count or 1.0
    frequencies = [_counts(text) for _, text in docs]  # shared: read only
    phrase_hits = [[_phrase_count(tokens, phrase) for phrase in clauses.phrases]
                   for _, tokens in analyzed] if clauses.phrases else [[] for _ in analyzed]
    document_frequency = {term: sum(1 for tf in frequencies if term in tf) for term in clauses.terms}
    phrase_frequency = [sum(1 for hits in phrase_hits if hits[i]) for i in range(len(clauses.phrases))]

    def idf(df: int) -> float:
        return math.log(1 + (count - df + 0.5) / (df + 0.5))

    def weight(tf: int, length: int) -> float:
        return tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / average))

    scored: list[tuple[str, float]] = []
    for (doc_id, tokens), tf, hits in zip(analyzed, frequencies, phrase_hits, strict=True):
        score = 0.0
        matched = False
        for term in clauses.terms:
            if term in tf:
                matched = True
                score += idf(document_frequency[term]) * weight(tf[term], len(tokens))
        for position, phrase_count in enumerate(hits):
            if phrase_count:
                matched = True
                # A phrase weighs like one rare term per word it spans.
                score += len(clauses.phrases[position]) * idf(phrase_frequency[position]) \
                    * weight(phrase_count, len(tokens))
        if matched:
            scored.append((doc_id, score))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored


def rank_texts_as_index(clauses: QueryClauses, docs: Sequence[tuple[str, str]], stats: FieldStats,
                        doc_freqs: Mapping[str, int]) -> list[tuple[str, float]]:
    """``(id, score)`` of the matching ``(id, text)`` docs scored with the text index's
    statistics (``stats``: its document and token counts; ``doc_freqs``: each query term's
    document frequency), BM25 desc, then id asc: the score tantivy gives a chunk of the same
    text, clause for clause (:class:`sinks.text.global_bm25.Bm25Model`: terms, then phrases,
    in query order), the document length read back from its one-byte field norm as
    tantivy does (:func:`field_norm`). The docs are not added to the statistics: they are few next to the index (the tail of a
    log its sinks lag behind), and so the index's own scores stay as they are."""
    if not docs or not clauses or stats.max_docs <= 0:
        return []
    query_clauses = [(term,) for term in clauses.terms] + [tuple(phrase) for phrase in clauses.phrases]
    freqs = {term: int(doc_freqs.get(term, 0)) for terms in query_clauses for term in terms}
    model = Bm25Model(query_clauses, freqs, stats)
    scored: list[tuple[str, float]] = []
    for doc_id, text in docs:
        tokens = _terms(text)
        present = _counts(text)
        matches: dict[int, tuple[float, float]] = {}
        for position, terms in enumerate(query_clauses):
            count = present.get(terms[0], 0) if len(terms) == 1 else _phrase_count(tokens, terms)
            if count:
                matches[position] = (float(count), float(field_norm(len(tokens))))
        if matches:
            scored.append((doc_id, float(model.score(matches))))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored


_EXACT_NORMS = 24
"""Lengths below this a field norm keeps exactly (Lucene's ``SmallFloat.intToByte4``)."""


def field_norm(length: int) -> int:
    """``length`` as a tantivy field norm decodes it: the one-byte code of Lucene's
    ``SmallFloat.intToByte4`` (24 exact values, then four significant bits), so lengths up to
    40 come back exact and longer ones rounded down to their bucket (41 -> 40, 100 -> 96)."""
    if length < _EXACT_NORMS:
        return max(length, 0)
    rest = length - _EXACT_NORMS
    bits = rest.bit_length()
    if bits < 4:
        return length
    shift = bits - 4
    return _EXACT_NORMS + ((rest >> shift) << shift)


def _phrase_count(tokens: Sequence[str], phrase: Sequence[str]) -> int:
    size = len(phrase)
    if size == 0 or size > len(tokens):
        return 0
    first = phrase[0]
    return sum(1 for i in range(len(tokens) - size + 1)
               if tokens[i] == first and list(tokens[i:i + size]) == list(phrase))
