"""Shannon entropy of candidate tokens: how "random" a value assigned to a secret-like name is.

Only short candidate values (the right-hand side of ``token = ...``) are ever measured, never
whole texts, so the per-character Python loop here stays off the hot path.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = ["HEX_MIN_ENTROPY", "MIN_TOKEN_CHARS", "TOKEN_MIN_ENTROPY", "looks_random", "shannon_entropy"]

MIN_TOKEN_CHARS = 16
"""Shortest value the entropy test accepts; shorter values are too short to judge."""

HEX_MIN_ENTROPY = 3.0
"""Bits per character a hex-only value needs (random hex of 16+ characters scores about 3.4-4)."""

TOKEN_MIN_ENTROPY = 3.5
"""Bits per character any other value needs (random base62/base64 of 16+ characters scores 3.8+)."""

# One token of printable ASCII: key material, including passwords with punctuation. Paths and
# URLs (which score high too) are told apart by their shape in looks_random.
_TOKEN = re.compile(r"[!-~]+", re.ASCII)
_PATH_OR_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|[/~.]*/|[A-Za-z]:\\", re.ASCII)
_HEX = re.compile(r"[0-9a-fA-F-]+", re.ASCII)
_HAS_DIGIT = re.compile(r"[0-9]")
_HAS_LETTER = re.compile(r"[A-Za-z]")


def shannon_entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character (0.0 for the empty string)."""
    if not value:
        return 0.0
    size = len(value)
    return -sum(count / size * math.log2(count / size) for count in Counter(value).values())


def looks_random(value: str) -> bool:
    """True when ``value`` is a single token that reads like generated key material.

    A value qualifies when it is one token (no spaces; not a path or URL), at least
    :data:`MIN_TOKEN_CHARS` long, mixes letters and digits (identifiers, words and version
    strings rarely do both at length) and has enough entropy for its alphabet.
    """
    if len(value) < MIN_TOKEN_CHARS or len(value) > 4096 or not _TOKEN.fullmatch(value):
        return False
    if _PATH_OR_URL.match(value) or "://" in value:
        return False
    if not _HAS_DIGIT.search(value) or not _HAS_LETTER.search(value):
        return False
    threshold = HEX_MIN_ENTROPY if _HEX.fullmatch(value) else TOKEN_MIN_ENTROPY
    return shannon_entropy(value) >= threshold
