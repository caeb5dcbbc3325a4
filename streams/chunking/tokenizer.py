"""The embedder's tokenizer, used to count chunk sizes in the tokens the embedder really sees.

The default embedder is wordllama (``l2_supercat``); its tokenizer configuration ships inside
the wordllama wheel, so loading it never touches the network. The tokenizer's ``identity``
names the configuration and a hash of its bytes; it goes into every chunk's ``versions`` so a
changed tokenizer is visible (and forces a rebuild) instead of silently moving boundaries.

Counts never include special tokens (``<s>``): the embedder is called without them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import numpy as np
from tokenizers import Tokenizer as _HFTokenizer

__all__ = ["HFTokenizer", "Tokenizer", "count_many", "default_tokenizer", "import_wordllama", "substring_counter"]

_WORDLLAMA_CONFIG = "l2_supercat_tokenizer_config.json"
_DEFAULT_NAME = "wordllama/l2_supercat"


@runtime_checkable
class Tokenizer(Protocol):
    """What the chunker needs from a tokenizer."""

    identity: str

    def count(self, text: str) -> int:
        """Number of tokens of ``text``, without special tokens."""
        ...

    def encode_offsets(self, text: str) -> Sequence[tuple[int, int]] | np.ndarray:
        """Character (code point) range of ``text`` covered by each token, in token order
        (pairs, or an array of shape (tokens, 2))."""
        ...


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer loaded from a local JSON configuration file."""

    def __init__(self, path: Path | str, *, name: str) -> None:
        data = Path(path).read_bytes()
        self.identity = _identity(name, data)
        self._tokenizer = _HFTokenizer.from_str(data.decode("utf-8"))
        # The file may carry padding/truncation settings; a count must see the whole text.
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        # The last text encoded and its encoding: the chunker counts an event's text and then,
        # for a text longer than a chunk, asks for its offsets; one encoding serves both.
        self._last: tuple[str, Any] | None = None
        # The last encoding's offsets, and whether they came from its ids (see _TokenSpans).
        self._last_offsets: tuple[Any, np.ndarray, bool] | None = None
        # Encodings of the long texts of the last count_many(keep_over=...), by id of the text.
        self._kept: dict[int, tuple[str, Any]] = {}
        config = json.loads(data)
        self._unprefixed = _unprefixed_twin(config)
        self._spans = _TokenSpans.of(config) if self._unprefixed is not None else None

    def _encode(self, text: str) -> Any:
        last = self._last
        if last is not None and last[0] is text:  # the same object (held here, so its id is not reused)
            return last[1]
        kept = self._kept.get(id(text))
        if kept is not None and kept[0] is text:
            self._last = kept
            return kept[1]
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        self._last = (text, encoding)
        return encoding

    def count(self, text: str) -> int:
        # len() of the encoding, not of its ids: ``ids`` builds a Python list of every token.
        return len(self._encode(text))

    def count_many(self, texts: Sequence[str], *, keep_over: int | None = None) -> list[int]:
        """``count`` for many texts at once (encoded in parallel by the Rust library).

        With ``keep_over``, the encodings of texts of more tokens than that are kept until the next
        call, so splitting such a text (its offsets, its substring counts) does not encode it again.
        """
        if not texts:
            return []
        # The fast variant skips the character offsets (a quarter of the encoding's CPU on real
        # events); the ids, so the counts, are the same. A kept encoding has no offsets either:
        # a split takes them from its ids (_TokenSpans), or encodes the text again (_offsets).
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        counts = [len(encoding) for encoding in encodings]
        if keep_over is not None:
            self._kept = {id(text): (text, encoding)
                          for text, encoding, count in zip(texts, encodings, counts, strict=True) if count > keep_over}
        return counts

    def encode_offsets(self, text: str) -> np.ndarray:
        return self._offsets(text)[0]

    def _offsets(self, text: str) -> tuple[np.ndarray, bool]:
        """``encode_offsets``, and whether they came from the ids: a piece-local tokenizer and a
        text without a special token, whose pieces are then tokenized independently."""
        encoding = self._encode(text)
        held = self._last_offsets
        if held is None or held[0] is not encoding:
            offsets = self._spans.offsets(encoding.ids) if self._spans is not None else None
            from_ids = offsets is not None
            if offsets is None:
                # A kept encoding came from encode_batch_fast, whose offsets are all zero.
                full = self._tokenizer.encode(text, add_special_tokens=False)
                offsets = np.array(full.offsets, dtype=np.int64).reshape(-1, 2)
            held = self._last_offsets = (encoding, offsets, from_ids)
        return held[1], held[2]

    def counter(self, text: str) -> Callable[[int, int], int]:
        """``count(text[a:b])`` for many ranges of one text, each exact, from one encoding.

        Where the tokenizer is *piece-local* (see :func:`_unprefixed_twin`), BPE never merges
        across the place where a run of spaces follows a non-space, so the text splits there into
        pieces tokenized independently. A substring's tokens are then its first piece encoded
        alone (with the word-start marker a text gets), the whole pieces in between as the text's
        own encoding has them, and its last piece encoded as it appears mid-text. The splitter
        counts every part and overlap of a long text: this encodes a few words per count instead
        of ~800 tokens (tests/streams/test_tokenizer_counter.py checks it against ``count``).
        """
        twin = self._unprefixed
        if twin is None:
            return lambda start, end: self.count(text[start:end])
        offsets, piece_local = self._offsets(text)
        if not piece_local:
            # A special token typed in the text (``<s>``) is split out before normalization and
            # each side gets its own word-start marker: pieces are no longer independent there.
            return lambda start, end: self.count(text[start:end])
        starts = _piece_starts(text)
        pieces = np.searchsorted(np.asarray(starts), offsets[:, 0], side="right") - 1
        # totals[k]: tokens of the pieces before piece k
        totals = [0, *np.cumsum(np.bincount(pieces, minlength=len(starts))).tolist()]

        def count(start: int, end: int) -> int:
            first = bisect_right(starts, start)  # the first piece that starts inside the range
            last = bisect_left(starts, end) - 1  # the last one
            if first > last:
                return self.count(text[start:end])
            return (self.count(text[start:starts[first]]) + totals[last] - totals[first]
                    + len(twin.encode(text[starts[last]:end], add_special_tokens=False)))

        return count

    def __repr__(self) -> str:
        return f"HFTokenizer({self.identity!r})"


_MARKER = "\u2581"


def _piece_starts(text: str) -> list[int]:
    """0 and where each next piece starts: a space (or the marker character itself) after
    anything else. Found over the text's code points at once (a regex's match objects, one per
    word, cost as much as the text's token counts)."""
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    space = (points == ord(" ")) | (points == ord(_MARKER))
    return [0, *(np.flatnonzero(space[1:] & ~space[:-1]) + 1).tolist()]


def _unprefixed_twin(config: dict[str, Any]) -> _HFTokenizer | None:
    """The tokenizer without its word-start marker, if the configuration is piece-local; else None.

    Piece-local: a SentencePiece-style BPE (normalizer: prepend the marker, spaces to markers;
    no pre-tokenizer) none of whose tokens or merges has a marker after another character. BPE
    then never joins the end of one word to the marker of the next, so the encoding of a text is
    the concatenation of the encodings of its pieces (the Llama 2 tokenizer wordllama uses is)."""
    normalizer = config.get("normalizer") or {}
    model = config.get("model") or {}
    steps = [(step.get("type"), step.get("prepend"), (step.get("pattern") or {}).get("String"), step.get("content"))
             for step in normalizer.get("normalizers", [])]
    if (normalizer.get("type") != "Sequence" or config.get("pre_tokenizer") is not None
            or model.get("type") != "BPE" or model.get("dropout") is not None
            or steps != [("Prepend", _MARKER, None, None), ("Replace", None, " ", _MARKER)]):
        return None
    inner = re.compile(f"[^{_MARKER}]{_MARKER}")
    if any(inner.search(token) for token in model.get("vocab", {})):
        return None
    for merge in model.get("merges", []):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        if right.startswith(_MARKER) and not left.endswith(_MARKER):
            return None
    twin = _HFTokenizer.from_str(json.dumps({**config, "normalizer": {
        "type": "Replace", "pattern": {"String": " "}, "content": _MARKER}}))
    twin.no_padding()
    twin.no_truncation()
    return twin


class _TokenSpans:
    """Token offsets computed from the ids (``Encoding.offsets`` builds a Python tuple per token:
    ~8 ms for a 40 KB tool result, against ~0.5 ms this way).

    For a piece-local tokenizer whose normalizer maps characters one to one after the prepended
    marker, a token covers as many characters as its string has, except byte-fallback tokens: the
    bytes of one character share its range. Texts holding a special token (``<s>`` typed in
    a message) take the library's offsets (tests/streams/test_tokenizer_counter.py compares both)."""

    __slots__ = ("byte", "continuation", "length", "special")

    def __init__(self, length: np.ndarray, byte: np.ndarray, continuation: np.ndarray, special: np.ndarray) -> None:
        self.length, self.byte, self.continuation, self.special = length, byte, continuation, special

    @classmethod
    def of(cls, config: dict[str, Any]) -> _TokenSpans | None:
        model = config["model"]
        if not model.get("byte_fallback"):
            return None
        vocab: dict[str, int] = model["vocab"]
        size = max(vocab.values()) + 1
        length = np.zeros(size, dtype=np.int64)
        byte = np.zeros(size, dtype=bool)
        continuation = np.zeros(size, dtype=bool)
        for token, token_id in vocab.items():
            value = _BYTE_TOKEN.fullmatch(token)
            if value is None:
                length[token_id] = len(token)
                continue
            byte[token_id] = True
            continuation[token_id] = 0x80 <= int(value.group(1), 16) < 0xC0
            length[token_id] = 0 if continuation[token_id] else 1
        special = np.array(sorted({int(added["id"]) for added in config.get("added_tokens", [])}
                                  | {token_id for token, token_id in vocab.items() if token.startswith("<") and token.endswith(">")
                                     and _BYTE_TOKEN.fullmatch(token) is None}), dtype=np.int64)
        return cls(length, byte, continuation, special)

    def offsets(self, token_ids: Sequence[int]) -> np.ndarray | None:
        """The offsets, or None for a text holding a special token."""
        ids = np.asarray(token_ids, dtype=np.int64)
        if len(ids) == 0:
            return np.zeros((0, 2), dtype=np.int64)
        if np.isin(ids, self.special).any():
            return None
        length = self.length[ids]
        before = np.cumsum(length) - length  # in the normalized text (marker prepended)
        # A continuation byte starts where its character's first byte does.
        lead = np.maximum.accumulate(np.where(self.continuation[ids], 0, np.arange(len(ids))))
        start = before[lead]
        end = start + np.where(self.byte[ids], 1, length)
        # Normalized position 0, the prepended marker, is aligned with the text's first character.
        return np.stack([np.maximum(start - 1, 0), np.where(start == 0, np.maximum(end - 1, 1), end - 1)], axis=1)


_BYTE_TOKEN = re.compile("<0x([0-9A-F]{2})>")


def substring_counter(tokenizer: Tokenizer, text: str) -> Callable[[int, int], int]:
    """Exact token counts of ``text[a:b]`` for many ranges (fast where the tokenizer offers it)."""
    counter = getattr(tokenizer, "counter", None)
    if counter is not None:
        made: Callable[[int, int], int] = counter(text)
        return made
    return lambda start, end: tokenizer.count(text[start:end])


def count_many(tokenizer: Tokenizer, texts: Sequence[str], *, keep_over: int | None = None) -> list[int]:
    """Token counts of ``texts``, batched when the tokenizer supports it (``keep_over``: see
    :meth:`HFTokenizer.count_many`)."""
    batch = getattr(tokenizer, "count_many", None)
    if batch is not None:
        counts: list[int] = batch(texts, keep_over=keep_over) if keep_over is not None else batch(texts)
        return counts
    return [tokenizer.count(text) for text in texts]


def import_wordllama() -> ModuleType:
    """The wordllama package, imported without its side effect on logging.

    wordllama's ``__init__`` and ``inference`` modules call ``logging.basicConfig(level=INFO)``
    at import time; left alone, every library's INFO lines (kafka-python's connection chatter)
    would print on the terminal of whoever ran ``usl rebuild`` or ``usl search``."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        import wordllama
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    return wordllama


def _identity(name: str, config: bytes) -> str:
    return f"{name}@{hashlib.sha256(config).hexdigest()[:12]}"


@cache
def default_tokenizer_identity() -> str:
    """``default_tokenizer().identity`` without loading it: the same hash of the same file,
    found without importing wordllama and parsing the tokenizer (together about a second), so
    ``usl --version``, ``usl status`` and a sink's start do not pay for a tokenizer they never
    use."""
    spec = importlib.util.find_spec("wordllama")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "tokenizers" / _WORDLLAMA_CONFIG
        if path.is_file():
            return _identity(_DEFAULT_NAME, path.read_bytes())
    return default_tokenizer().identity  # an unusual install: ask the loaded tokenizer


@cache
def default_tokenizer() -> HFTokenizer:
    """The default embedder's tokenizer (wordllama ``l2_supercat``), loaded once per process."""
    import_wordllama()  # resources.files would import it with its logging side effect
    config = resources.files("wordllama.tokenizers").joinpath(_WORDLLAMA_CONFIG)
    with resources.as_file(config) as path:
        return HFTokenizer(path, name=_DEFAULT_NAME)
