"""The full-text engine interface and the pure logic every engine shares.

An engine writes and reads one index directory at a time; it knows nothing of generations
(the text sink stages a directory, lets the engine write it, and commits it as a generation).
Both engines must pass ``tests/sinks/test_text_conformance.py``: same documents, same query
semantics, same filters, same deterministic order.

Query syntax (deliberately small, so no user input can be a syntax error): words are OR-ed and
ranked by BM25; ``"double-quoted words"`` form a phrase clause; everything else — operators,
brackets, ``field:value`` — is just text, tokenized like the indexed text. An unterminated
quote makes a phrase of the rest of the query.

The analyzer (:data:`ANALYZER`, recorded in every text generation's manifest and in a marker
file inside the index) reads text with its JSON string literals decoded (:func:`json_unescaped`),
its terminal escape sequences as spaces, folded to NFKC and with the letters of
:data:`LETTER_FOLDS` written as their plain ones (``ё`` as ``е``, a final ``ς`` as ``σ``, ``ß``
as ``ss``, Greek accents and Arabic and Hebrew vowel points dropped, Arabic alef variants as alef): lowercased runs of letters and digits (with the marks Unicode counts as
letters, as tantivy splits: ``sinks.text.letters``), except that every character of
a script written without spaces is a token of its own: Chinese, Japanese, Korean (Han, kana,
Hangul syllables) and the Southeast Asian scripts Thai, Lao, Myanmar and Khmer. Such scripts
have no word boundaries to split on, so a word of theirs is found as the phrase of its
characters: any substring of a message, of any length, is then a phrase match. A query word
that holds such characters (``数据库``, ``调用foo函数``, ``ฐานข้อมูล``) is searched both as its
characters OR-ed and as one phrase of them, so the exact substring ranks first. In the
Southeast Asian blocks, the signs tantivy's tokenizer does not count as letters (Thai tone
marks, for one) separate tokens in both engines, so both index the same terms.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from sinks.exceptions import EmptyQueryError, EngineError
from sinks.letter_folds import LETTER_FOLDS, letters_folded, lower_term
from sinks.text.letters import WORD_MARK_RANGES
from streams.ansi import without_ansi

__all__ = [
    "ANALYZER",
    "ANALYZER_MARKER",
    "CJK_RANGES",
    "LETTER_FOLDS",
    "MAX_TOKEN_BYTES",
    "SOUTHEAST_ASIAN_RANGES",
    "SPACELESS_RANGES",
    "WORD_PATTERN",
    "HitCheck",
    "QueryClauses",
    "TextDoc",
    "TextEngine",
    "TextHit",
    "analyze_text",
    "check_analyzer",
    "chunk_key",
    "cjk_spaced",
    "collect_top",
    "dedupe_last_wins",
    "folded",
    "json_unescaped",
    "letters_folded",
    "lower_term",
    "parse_query",
    "spaceless_term",
    "text_digest",
    "to_text_doc",
    "unique_keys",
    "write_analyzer_marker",
]

# Tokens of this many bytes or more (base64 blobs, minified runs) are dropped, by both engines
# alike so they index the same words. Analyzer 5 keeps up to 64: a commit's SHA-1 (40 hex
# digits) and a SHA-256 digest (64) are what people search for; analyzer 4 dropped them at 40,
# tantivy's default.
MAX_TOKEN_BYTES = 65

ANALYZER = "json-strings+no-ansi+nfkc+letter-folds+words+spaceless-chars/7"
"""The text analyzer's identity. Version 1 (no marker) kept a run of CJK characters as one
token, so no substring of it could be found; version 2 (``words+cjk-chars/2``) did the same to
Thai, Lao, Myanmar and Khmer; version 3 (``words+spaceless-chars/3``) did not fold Unicode
forms, so ``café`` written with a combining accent (macOS paths, NFD) was the two words ``cafe``
and nothing, and ``ｆｕｌｌｗｉｄｔｈ`` matched no ``fullwidth``; version 4 (``/4``) dropped
tokens of 40 bytes or more, so no commit hash could be searched; version 5
(``nfkc+words+spaceless-chars/5``) read the escapes of JSON strings as letters, so in a tool's JSON
output ``"Draft\\n\\nUse the tool"`` held the word ``nuse`` and no ``use``, and
``"\\u043f\\u044f\\u0442"`` the words ``u043f`` … instead of ``пят``, and coloured output
``ESC[31mFAILED`` the word ``31mfailed``; version 6 (``json-strings+no-ansi+nfkc+words+spaceless-chars/6``)
kept the spellings of :data:`LETTER_FOLDS` apart, so ``елка`` found no ``ёлка``, ``οδος`` no
``ΟΔΟΣ``, ``istanbul`` no ``İstanbul``, ``strasse`` no ``Straße``, ``محمد`` no ``مُحَمَّد`` and
``احمد`` no ``أحمد``, and
it read a JSON string the redaction stage's cut of a long output ends (no closing quote) as its
escapes, ``u0451u043c``, not ``ём``. An index of another
analyzer is refused with the remedy (``usl rebuild text``), never searched with the wrong terms."""
ANALYZER_MARKER = "usl-analyzer.json"
CJK_RANGES: tuple[tuple[int, int], ...] = (
    # The letters of each block as tantivy's simple tokenizer (Rust's char::is_alphanumeric)
    # sees them, like SOUTHEAST_ASIAN_RANGES: what it drops must separate tokens here too. The
    # kana blocks hold the middle dot of コード・レビュー, ゠, the voiced sound marks ゛゜ and
    # their combining forms (what half-width ﾞﾟ fold to), which the blocks taken whole made
    # terms to the Python analyzer and nothing to tantivy (tests/sinks/test_text_conformance.py
    # checks every code point of these blocks against tantivy).
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3041, 0x3096), (0x309D, 0x309F),  # hiragana, ゝ ゞ ゟ
    (0x30A1, 0x30FA), (0x30FC, 0x30FF),  # katakana, ー ヽ ヾ ヿ
    (0x31F0, 0x31FF),  # katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK unified ideographs extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7A3),  # Hangul syllables
    (0xF900, 0xFA6D), (0xFA70, 0xFAD9),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth katakana
    # CJK unified ideographs extensions B-I and the compatibility supplement
    (0x20000, 0x2A6DF), (0x2A700, 0x2B81D), (0x2B820, 0x2CEAD), (0x2CEB0, 0x2EBE0),
    (0x2EBF0, 0x2EE5D), (0x2F800, 0x2FA1D), (0x30000, 0x3134A),
)
SOUTHEAST_ASIAN_RANGES: tuple[tuple[int, int], ...] = (
    # The letters, vowel signs and digits of each block, as tantivy's simple tokenizer (Rust's
    # char::is_alphanumeric) sees them: what it drops (tone marks, punctuation) must separate
    # tokens in the Python analyzer too (tests/sinks/test_text_conformance.py checks every code
    # point of these blocks against tantivy).
    (0x0E01, 0x0E3A), (0x0E40, 0x0E46), (0x0E4D, 0x0E4D), (0x0E50, 0x0E59),  # Thai
    (0x0E81, 0x0E82), (0x0E84, 0x0E84), (0x0E86, 0x0E8A), (0x0E8C, 0x0EA3), (0x0EA5, 0x0EA5),  # Lao
    (0x0EA7, 0x0EB9), (0x0EBB, 0x0EBD), (0x0EC0, 0x0EC4), (0x0EC6, 0x0EC6), (0x0ECD, 0x0ECD),
    (0x0ED0, 0x0ED9), (0x0EDC, 0x0EDF),
    (0x1000, 0x1036), (0x1038, 0x1038), (0x103B, 0x1049), (0x1050, 0x109D),  # Myanmar
    (0x1780, 0x17B3), (0x17B6, 0x17C8), (0x17D7, 0x17D7), (0x17DC, 0x17DC), (0x17E0, 0x17E9),  # Khmer
    (0x17F0, 0x17F9),
)
SPACELESS_RANGES = SOUTHEAST_ASIAN_RANGES + CJK_RANGES
"""Every character of these is a token of its own (the module docstring)."""
_CJK_CLASS = "".join(f"{chr(low)}-{chr(high)}" for low, high in SPACELESS_RANGES)
_MARK_CLASS = "".join(f"{chr(low)}-{chr(high)}" for low, high in WORD_MARK_RANGES)
WORD_PATTERN = f"[{_CJK_CLASS}]|(?:[^\\W_{_CJK_CLASS}]+|[{_MARK_CLASS}]+)+"
"""Python ``re`` form of the analyzer's tokens: one character of a script without spaces, or a
run of other letters, digits and the marks Rust counts as letters (``sinks.text.letters``):
tantivy gets the same terms from :func:`cjk_spaced` text."""
_WORD = re.compile(WORD_PATTERN)
# The same tokens for text without such a mark, three times faster (no alternation per token);
# a set tells whether a text holds one ten times faster than a search of the marks' class.
_WORD_UNMARKED = re.compile(f"[{_CJK_CLASS}]|[^\\W_{_CJK_CLASS}]+")
_MARKS = frozenset(chr(code) for low, high in WORD_MARK_RANGES for code in range(low, high + 1))
_CJK = re.compile(f"[{_CJK_CLASS}]")
# UTF-8 lead bytes of U+0800..U+1FFF (0xE0, 0xE1), U+3000..U+DFFF (0xE3..0xED),
# U+F000..U+FFFF (0xEF) and the supplementary planes (0xF0): every range above starts with one.
_NOT_CJK_LEADS = bytes(b for b in range(256) if not (0xE0 <= b <= 0xE1 or 0xE3 <= b <= 0xED or b in (0xEF, 0xF0)))


@dataclass(frozen=True)
class TextHit:
    """One search hit: ``rank`` is 1-based, after ordering by score desc then chunkId asc.
    ``digest`` is :func:`text_digest` of the chunk's stored text (None if the engine gave none):
    the planner tells chunks of identical text apart from it without reading the texts again."""

    chunk_id: str
    score: float
    rank: int
    digest: bytes | None = None


@dataclass(frozen=True)
class HitCheck:
    """A search's filters as a judgement of each hit, which an engine may use instead of
    filtering inside the index when they keep most of it: rank without them, keep the hits
    ``keeps`` admits, and filter inside the index only when too few were kept to fill the
    limit. The caller promises that ``keeps(chunkId)`` judges a hit exactly as the search's
    ``max_seq``/``session_ids``/``exclude_sessions``/``exclude_ids`` do; ``share`` is its
    estimate of the share of the index's chunks they keep (how far past the limit to look)."""

    keeps: Callable[[str], bool]
    share: float


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
    # The index layout this engine writes and reads (the text generation's schemaVersion).
    schema_version: ClassVar[str]
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
        chunk_ids_by_key: Mapping[int, str] | None = None,
        exclude_sessions: Collection[str] = (),
        checked: HitCheck | None = None,
    ) -> list[TextHit]:
        """Top ``limit`` hits with maxSeq <= ``max_seq``, in ``session_ids`` (None: any) and
        not in ``exclude_sessions``, not in ``exclude_ids``; filters apply inside the engine,
        before the limit (or, given ``checked``, to the engine's own top hits when those hold
        enough that pass: :class:`HitCheck`; the same hits either way). The planner names whichever of its readable and unreadable sessions
        are fewer (a filter's cost grows with the chunks of the sessions it names); an engine
        may keep the filter it built for a frozenset and reuse it for that very object.
        ``chunk_ids_by_key`` (:func:`chunk_key` → chunkId, colliding keys left out) lets an
        engine that indexes the key name its hits without reading their stored documents;
        it never changes the hits."""
        ...

    def count(self, directory: Path) -> int:
        """Number of live documents."""
        ...

    def all_ids(self, directory: Path) -> list[str]:
        """chunkIds of all live documents, sorted."""
        ...


def to_text_doc(chunk: Mapping[str, Any]) -> TextDoc:
    """The text-index view of a SearchChunkV1 dict (``roles`` etc. from ``fields``, or flat)."""
    # Here, not at the top: `usl search` imports this module for its folds alone, and
    # streams.asp loads the schema validator.
    from streams.asp import posix_seconds

    fields = chunk.get("fields") or {}
    try:
        return TextDoc(
            chunk_id=str(chunk["chunkId"]),
            session_id=str(chunk["sessionId"]),
            log_id=str(chunk.get("logId") or ""),
            text=str(chunk.get("text") or ""),
            min_seq=int(chunk["minSeq"]),
            max_seq=int(chunk["maxSeq"]),
            event_time=posix_seconds(chunk.get("eventTime")),
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
    analyzer. Never fails on odd input; an empty or blank query is an EmptyQueryError."""
    if not isinstance(query, str) or not query.strip():
        raise EmptyQueryError("the search query is empty: give at least one word to search for")
    terms: dict[str, None] = {}
    phrases: dict[tuple[str, ...], None] = {}
    for is_phrase, piece in _split_quotes(query):
        tokens = analyze(piece)
        if is_phrase and len(tokens) > 1:
            phrases.setdefault(tuple(tokens), None)
            continue
        for token in tokens:
            terms.setdefault(token, None)
        # A word of a script without spaces is also a phrase of its characters.
        for word in piece.split():
            if _CJK.search(word):
                word_tokens = analyze(word)
                if len(word_tokens) > 1:
                    phrases.setdefault(tuple(word_tokens), None)
    return QueryClauses(terms=tuple(terms), phrases=tuple(phrases))


def folded(text: str) -> str:
    """``text`` as the analyzer reads it, its first steps: :func:`json_unescaped`, terminal
    escape sequences out (:func:`without_ansi`), then Unicode normal form NFKC: a letter and its
    combining accent become one letter (``cafe\u0301`` → ``café``), compatibility forms their
    plain ones (full-width ``ＡＢＣ``, ligatures, half-width katakana); then the letters of
    :data:`LETTER_FOLDS` as their plain letters (:func:`letters_folded`). ``text`` itself (the
    same object) when it is already folded."""
    text = without_ansi(json_unescaped(text))
    if text.isascii():
        return text
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return letters_folded(text)


# One JSON string literal, exactly as JSON writes one: no raw control characters, no escapes
# but JSON's (so ``"C:\new\x"`` in prose is not one, nor a Python ``'...'`` string); or one
# that the redaction stage's cut of a long text ends (streams.redaction.text.clip writes
# `` … [N bytes]`` after it), maybe inside an escape: the literal is read up to its last whole
# character. A tool's long JSON output is cut so inside its longest string, its message.
_JSON_STRING = re.compile(r'"(?P<body>[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*)'
                          r'(?:"|(?:\\(?:u[0-9a-fA-F]{0,3})?)?(?= … \[\d+ bytes\]))')
# What a decoded literal may hold that no tokenizer should see: control characters (a decoded
# ``\n``), and surrogates JSON can escape alone (``\ud800``) but UTF-8 cannot encode.
_UNSPELLABLE = re.compile("[\x00-\x1f\ud800-\udfff]")
_JSON_DEPTH = 4
"""Levels of JSON inside JSON strings read (a tool result holding a JSON text holding JSON)."""


def json_unescaped(text: str) -> str:
    """``text`` with every JSON string literal in a JSON place read as JSON reads it, its
    quotes kept as spaces: what a JSON text *says*. Tool outputs are often JSON (``--json``
    CLIs, APIs, MCP tools, an agent's ``jq`` of a transcript), and their strings escape line
    breaks and, from most JSON writers, every non-ASCII character: ``"a\\nb"`` would otherwise
    hold the word ``nb``, and ``"\\u4e88\\u7d04"`` no ``予約``. A JSON place: the start of the
    text, or after ``{``, ``[``, ``,`` or ``:`` (whitespace between), so a quoted Windows path in
    a command (``cd "C:\\tools\\bin"``) keeps its ``\\t`` and ``\\b``. A literal decoded to
    more JSON (a string holding a JSON text) is read again, up to :data:`_JSON_DEPTH` levels.
    Text without a backslash is returned as is (the same object)."""
    for _ in range(_JSON_DEPTH):
        if "\\" not in text:
            break
        decoded = _JSON_STRING.sub(_decoded_literal, text)
        if decoded == text:
            break
        text = decoded
    return text


def _decoded_literal(match: re.Match[str]) -> str:
    literal = match.group()
    if "\\" not in literal:
        return literal
    text, start = match.string, match.start()
    while start and text[start - 1] in " \t\r\n":
        start -= 1
    if start and text[start - 1] not in "{[,:":
        return literal
    # The pattern admits only JSON's own syntax, so json reads every match (a cut one closed).
    said = json.loads('"' + match.group("body") + '"')
    return f" {_UNSPELLABLE.sub(' ', without_ansi(said))} "


def cjk_spaced(text: str) -> str:
    """``text`` :func:`folded`, with a space on each side of every CJK character, so a
    tokenizer that splits on non-alphanumerics makes each a token: what the tantivy engines
    index and search. ``text`` itself (the same object) when neither changes it."""
    text = folded(text)
    # Cheap checks first (C loops at memory speed; the regex scans about 20 MB/s): a text
    # whose UTF-8 has no lead byte of a CJK block's code points holds no CJK character.
    if text.isascii() or not text.encode("utf-8", "surrogatepass").translate(None, _NOT_CJK_LEADS) \
            or not _CJK.search(text):
        return text
    return _CJK.sub(lambda match: f" {match.group()} ", text)


def spaceless_term(term: str) -> bool:
    """Whether ``term`` is one character of a script written without spaces: a whole term that
    no selection can cut, since each such character is a term of its own."""
    return len(term) == 1 and _CJK.match(term) is not None


def analyze_text(text: str) -> list[str]:
    """The analyzer in pure Python: the terms both engines index for ``text``. Split, measured,
    then lowercased, in tantivy's order: ``İ`` lowercases to ``i`` and a combining dot, which
    lowercasing first would then split off."""
    text = folded(text)
    words = _WORD_UNMARKED if text.isascii() or _MARKS.isdisjoint(text) else _WORD
    return [lower_term(token) for token in words.findall(text) if len(token.encode("utf-8")) < MAX_TOKEN_BYTES]


def write_analyzer_marker(directory: Path) -> None:
    """Record :data:`ANALYZER` inside a new index directory (it travels with every generation)."""
    (Path(directory) / ANALYZER_MARKER).write_text(json.dumps({"analyzer": ANALYZER}) + "\n",
                                                   encoding="utf-8")


def check_analyzer(directory: Path, *, kind: str = "text") -> None:
    """Refuse an index built by another analyzer (:class:`EngineError` with the remedy, which
    rebuilds the index ``kind``: ``text``, or ``toolresults`` for the full tool outputs)."""
    path = Path(directory) / ANALYZER_MARKER
    try:
        found = json.loads(path.read_text(encoding="utf-8")).get("analyzer")
    except FileNotFoundError:
        found = "words/1"
    except (OSError, ValueError, AttributeError):
        found = "an unreadable marker"
    if found != ANALYZER:
        raise EngineError(f"the {kind} index in {directory} was built with analyzer {found}, this "
                          f"version searches and writes with {ANALYZER}; rebuild it from the log: "
                          f"usl rebuild {kind}")


def text_digest(text: str) -> bytes:
    """A 16-byte digest of a chunk's text (its own text, not the CJK-spaced indexed form)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def chunk_key(chunk_id: str) -> int:
    """A 64-bit key of a chunk id (the first 8 bytes of its BLAKE2b digest, big-endian).

    The tantivy index keeps it as a numeric fast field, so a hit's chunk id is read from a
    column instead of its stored document; the reader maps keys back to ids through a map built
    from the ids it knows (:meth:`planner.chunktable.ChunkTable.chunk_keys`) and reads the
    stored document for a key it cannot map."""
    return int.from_bytes(hashlib.blake2b(chunk_id.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "big")


def unique_keys(chunk_ids: Iterable[str]) -> dict[int, str]:
    """:func:`chunk_key` → chunkId for ``chunk_ids``, leaving out every key two of them share
    (such a key cannot name a chunk)."""
    counted: dict[int, str | None] = {}
    for chunk_id in chunk_ids:
        key = chunk_key(chunk_id)
        counted[key] = None if key in counted else chunk_id
    return {key: chunk_id for key, chunk_id in counted.items() if chunk_id is not None}


def collect_top(fetch: Callable[[int], list[tuple[float, str]]], limit: int,
                digests: Mapping[str, bytes] | None = None) -> list[TextHit]:
    """The top ``limit`` hits ordered by score desc, then chunkId asc.

    ``fetch(n)`` returns the engine's top ``n`` (score, chunkId) pairs. Engines break score ties
    by internal doc order, which depends on segment layout; so we fetch past the window until
    the tie group at its boundary is complete, and only then order by chunkId. ``digests``
    (filled by ``fetch`` as it reads the stored documents) gives each hit its ``digest``.
    """
    if limit <= 0:
        return []
    # Twice the window at once: a second search past a tie at the boundary cost as much as the
    # first (it came on a third of the planner's searches over a million chunks), a wider
    # first one only a few percent more (docs/planner.md, "Performance").
    n = 2 * limit + 16
    while True:
        hits = fetch(n)
        if len(hits) < n:
            break
        scores = sorted((score for score, _ in hits), reverse=True)
        if scores[-1] < scores[limit - 1]:
            break
        n *= 2
    ordered = sorted(hits, key=lambda hit: (-hit[0], hit[1]))[:limit]
    known = digests or {}
    return [TextHit(chunk_id=cid, score=float(score), rank=i, digest=known.get(cid))
            for i, (score, cid) in enumerate(ordered, 1)]


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
