"""How the text analyzer folds letters and case: the part of ``sinks.text.base``'s analyzer
that needs none of its word patterns.

Kept apart so that ``usl search`` can mark in a hit the words the index found, folded exactly
as the index folds them, without importing the text sink (whose word patterns take tens of
milliseconds to compile, a good part of the command's time). ``sinks.text.base`` re-exports
every name here; the analyzer version there (``ANALYZER``) covers what this module does.
"""

from __future__ import annotations

import re

__all__ = ["LETTER_FOLDS", "letters_folded", "lower_term"]

LETTER_FOLDS: dict[str, str] = {
    # Russian writes ё as е in all but dictionaries and primers, and agents write either
    # (ещё, еще): a query for елка found no ёлка, Алена no Алёна.
    "ё": "е", "Ё": "Е",
    # Greek: a word-final sigma is σ in capitals (ΟΔΟΣ lowercases to οδοσ), and capitals drop
    # the tonos, so the lowercase οδός, ΔΙΑΚΟΜΙΣΤΗΣ's own word διακομιστής, matched neither;
    # the tonos and dialytika go (Lucene's GreekLowerCaseFilter does the same).
    "ς": "σ",
    "ά": "α", "έ": "ε", "ή": "η", "ί": "ι", "ό": "ο", "ύ": "υ", "ώ": "ω", "ΐ": "ι", "ΰ": "υ", "ϊ": "ι", "ϋ": "υ",
    "Ά": "Α", "Έ": "Ε", "Ή": "Η", "Ί": "Ι", "Ό": "Ο", "Ύ": "Υ", "Ώ": "Ω", "Ϊ": "Ι", "Ϋ": "Υ",
    # Turkish capital İ lowercases to i and a combining dot, so İstanbul was no istanbul and
    # İSTANBUL found no istanbul (Lucene lowercases it to i); and Turkish writes ı's capital I,
    # which lowercases to i, so Diyarbakır was no DİYARBAKIR and ısparta no ISPARTA.
    "İ": "I", "ı": "i",
    # German capitals write ß as SS (GRÖSSE, STRASSE), and Swiss German always does.
    "ß": "ss", "ẞ": "ss",
    # Arabic vowel marks (harakat: tanwin, fatha, damma, kasra, shadda, sukun) and the
    # stretching tatweel, and Hebrew points (niqqud, dagesh, the shin and sin dots, cantillation):
    # written in some texts and almost never typed, so مُحَمَّد was no محمد, שָׁלוֹם no שלום
    # (Lucene's ArabicNormalizationFilter drops the same Arabic marks).
    **dict.fromkeys(map(chr, range(0x064B, 0x0653)), ""), "\u0640": "",
    # Arabic letters typed as their plain forms (as Lucene's ArabicNormalizer does; alef wasla
    # too): alef with hamza or madda as alef (أحمد is typed احمد); alef maksura as yeh; teh marbuta as heh.
    # Persian and Urdu keyboards write yeh and kaf as their own letters (ی, ک): the Arabic ones
    # (Lucene's PersianNormalizer), so a query typed on either keyboard finds text of the other.
    "\u0622": "\u0627", "\u0623": "\u0627", "\u0625": "\u0627", "\u0671": "\u0627",
    "\u0649": "\u064a", "\u0629": "\u0647", "\u06cc": "\u064a", "\u06a9": "\u0643",
    **dict.fromkeys(map(chr, [*range(0x0591, 0x05BE), 0x05BF, 0x05C1, 0x05C2, 0x05C4, 0x05C5, 0x05C7]), ""),
}
"""Letters the analyzer writes as others (analyzer 7), after NFKC and before words are split:
spellings of one word that readers take for the same and keyboards rarely type alike. Latin
accents are kept (``año`` is not ``ano``, and Vietnamese is mostly accents)."""
_LETTER_TABLE = str.maketrans(LETTER_FOLDS)
_FOLDABLE = re.compile("[" + "".join(LETTER_FOLDS) + "]")


def letters_folded(text: str) -> str:
    """``text`` with :data:`LETTER_FOLDS` applied; ``text`` itself when it holds none of them."""
    return text.translate(_LETTER_TABLE) if _FOLDABLE.search(text) else text


def lower_term(token: str) -> str:
    """``token`` lowercased as tantivy lowercases it, character by character: Python's
    ``lower()`` alone writes a word-final capital sigma as final sigma (``ΟΔΟΣ`` → ``οδος``),
    which tantivy indexes as ``οδοσ``."""
    lowered = token.lower()
    if "ς" in lowered and "Σ" in token:
        return "".join(character.lower() for character in token)
    return lowered
