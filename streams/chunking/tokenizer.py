"""The embedder's tokenizer, used to count chunk sizes in the tokens the embedder really sees.

The default embedder is wordllama (``l2_supercat``); its tokenizer configuration ships inside
the wordllama wheel, so loading it never touches the network. The tokenizer's ``identity``
names the configuration and a hash of its bytes; it goes into every chunk's ``versions`` so a
changed tokenizer is visible (and forces a rebuild) instead of silently moving boundaries.

Counts never include special tokens (``<s>``): the embedder is called without them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from tokenizers import Tokenizer as _HFTokenizer

__all__ = ["HFTokenizer", "Tokenizer", "count_many", "default_tokenizer", "import_wordllama"]

_WORDLLAMA_CONFIG = "l2_supercat_tokenizer_config.json"


@runtime_checkable
class Tokenizer(Protocol):
    """What the chunker needs from a tokenizer."""

    identity: str

    def count(self, text: str) -> int:
        """Number of tokens of ``text``, without special tokens."""
        ...

    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        """Character (code point) range of ``text`` covered by each token, in token order."""
        ...


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer loaded from a local JSON configuration file."""

    def __init__(self, path: Path | str, *, name: str) -> None:
        data = Path(path).read_bytes()
        self.identity = f"{name}@{hashlib.sha256(data).hexdigest()[:12]}"
        self._tokenizer = _HFTokenizer.from_str(data.decode("utf-8"))
        # The file may carry padding/truncation settings; a count must see the whole text.
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        # The last text encoded and its encoding: the chunker counts an event's text and then,
        # for a text longer than a chunk, asks for its offsets; one encoding serves both.
        self._last: tuple[str, Any] | None = None

    def _encode(self, text: str) -> Any:
        last = self._last
        if last is not None and last[0] is text:  # the same object (held here, so its id is not reused)
            return last[1]
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        self._last = (text, encoding)
        return encoding

    def count(self, text: str) -> int:
        return len(self._encode(text).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """``count`` for many texts at once (encoded in parallel by the Rust library)."""
        if not texts:
            return []
        # The fast variant skips the character offsets a count never reads (a quarter of the
        # encoding's CPU on real events); the ids, so the counts, are the same.
        encodings = self._tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [len(encoding.ids) for encoding in encodings]

    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        return list(self._encode(text).offsets)

    def __repr__(self) -> str:
        return f"HFTokenizer({self.identity!r})"


def count_many(tokenizer: Tokenizer, texts: Sequence[str]) -> list[int]:
    """Token counts of ``texts``, batched when the tokenizer supports it."""
    batch = getattr(tokenizer, "count_many", None)
    if batch is not None:
        counts: list[int] = batch(texts)
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


@cache
def default_tokenizer() -> HFTokenizer:
    """The default embedder's tokenizer (wordllama ``l2_supercat``), loaded once per process."""
    import_wordllama()  # resources.files would import it with its logging side effect
    config = resources.files("wordllama.tokenizers").joinpath(_WORDLLAMA_CONFIG)
    with resources.as_file(config) as path:
        return HFTokenizer(path, name="wordllama/l2_supercat")
