// Where the query's words occur in a hit's text, for the search page to mark them. The words
// are the text index's terms (sinks/text/base.py, analyzer json-strings+no-ansi+nfkc+letter-folds+words+spaceless-chars/7):
// of the NFKC form of the text (full-width letters, ligatures, half-width kana folded) with the
// letters of LETTER_FOLDS written as their plain ones (ё as е, ß as ss, Greek accents and Arabic
// and Hebrew vowel points dropped), lowercased
// runs of letters and digits (Unicode's Alphabetic, so with the vowel signs of Devanagari and the
// other Indic scripts, as tantivy reads them), except that each Chinese, Japanese or Korean
// character, and each Thai, Lao, Myanmar or Khmer letter, is a term of its own, since those
// scripts have no spaces between words. The page marks the text as shown, so a word the index
// read out of a JSON escape ("\u043f...") is found but not marked. Plain browser JavaScript,
// loaded before app.js; under Node it exports the same functions for the tests.
"use strict";

// The ranges of sinks.text.base.SPACELESS_RANGES (SOUTHEAST_ASIAN_RANGES, then CJK_RANGES).
const CJK = "\u0E01-\u0E3A\u0E40-\u0E46\u0E4D\u0E50-\u0E59"
  + "\u0E81-\u0E82\u0E84\u0E86-\u0E8A\u0E8C-\u0EA3\u0EA5\u0EA7-\u0EB9\u0EBB-\u0EBD\u0EC0-\u0EC4"
  + "\u0EC6\u0ECD\u0ED0-\u0ED9\u0EDC-\u0EDF"
  + "\u1000-\u1036\u1038\u103B-\u1049\u1050-\u109D"
  + "\u1780-\u17B3\u17B6-\u17C8\u17D7\u17DC\u17E0-\u17E9\u17F0-\u17F9"
  + "\u3005-\u3007\u3041-\u3096\u309D-\u309F\u30A1-\u30FA\u30FC-\u30FF\u31F0-\u31FF"
  + "\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7A3\uF900-\uFA6D\uFA70-\uFAD9\uFF66-\uFF9F"
  + "\u{20000}-\u{2A6DF}\u{2A700}-\u{2B81D}\u{2B820}-\u{2CEAD}\u{2CEB0}-\u{2EBE0}"
  + "\u{2EBF0}-\u{2EE5D}\u{2F800}-\u{2FA1D}\u{30000}-\u{3134A}";
const WORD = new RegExp(`[${CJK}]|(?:(?![${CJK}])[\\p{Alphabetic}\\p{N}])+`, "gu");
const HAS_CJK = new RegExp(`[${CJK}]`, "u");
// sinks.text.base.LETTER_FOLDS: a character matching FOLDABLE is written as FOLDS gives it, or
// dropped (the Arabic and Hebrew vowel points).
const FOLDS = {
  "ё": "е", "Ё": "Е", "ς": "σ",
  "ά": "α", "έ": "ε", "ή": "η", "ί": "ι", "ό": "ο", "ύ": "υ", "ώ": "ω", "ΐ": "ι", "ΰ": "υ", "ϊ": "ι", "ϋ": "υ",
  "Ά": "Α", "Έ": "Ε", "Ή": "Η", "Ί": "Ι", "Ό": "Ο", "Ύ": "Υ", "Ώ": "Ω", "Ϊ": "Ι", "Ϋ": "Υ",
  "İ": "I", "ı": "i", "ß": "ss", "ẞ": "ss",
  "\u0622": "\u0627", "\u0623": "\u0627", "\u0625": "\u0627", "\u0671": "\u0627",
  "\u0649": "\u064a", "\u0629": "\u0647", "\u06cc": "\u064a", "\u06a9": "\u0643",
};
const FOLDABLE = /[ёЁςάέήίόύώΐΰϊϋΆΈΉΊΌΎΏΪΫİıßẞ\u064B-\u0652\u0640\u0622\u0623\u0625\u0671\u0649\u0629\u06CC\u06A9\u0591-\u05BD\u05BF\u05C1\u05C2\u05C4\u05C5\u05C7]/gu;

// NFKC, then the letter folds, as sinks.text.base.folded reads text.
function fold(text) {
  return text.normalize("NFKC").replace(FOLDABLE, (character) => FOLDS[character] || "");
}

function words(text) {
  return [...fold(text || "").matchAll(WORD)].map((m) => lower(m[0]));
}

// Split, then lowercase character by character, as tantivy does: İ lowercases to i and a
// combining dot (lowercasing first would split it off), and a word-final Σ to σ, not ς.
function lower(word) {
  return [...word].map((character) => character.toLowerCase()).join("");
}

// The query as the page marks it: single words and "quoted phrases". A word holding CJK
// characters (数据库, 调用foo函数) is the phrase of its terms, so the page marks where that
// substring occurs, not every occurrence of each of its characters.
function queryTerms(query) {
  const phrases = [];
  const terms = new Set();
  const add = (tokens) => {
    if (tokens.length > 1) phrases.push(tokens);
    else if (tokens.length === 1) terms.add(tokens[0]);
  };
  // Every double quotation mark is the phrase quote, as the planner reads it (planner/quotes.py).
  const rest = (query || "").replace(/[\u201c\u201d\u201e\u201f\u00ab\u00bb\uff02\u301d\u301e\u301f]/g, '"').replace(/"([^"]*)"/g, (_, phrase) => {
    add(words(phrase));
    return " ";
  });
  for (const piece of rest.split(/\s+/)) {
    if (HAS_CJK.test(piece)) add(words(piece));
    else words(piece).forEach((word) => terms.add(word));
  }
  return { terms, phrases };
}

// text as the index reads it (NFKC, letters folded) and, for each UTF-16 unit of that, where the character it
// came from (with the marks after it) starts and ends in text. Words are found in the folded
// text, as the index finds them, and marked over the characters they came from: split before
// folding, "cafe" + a combining accent (as macOS writes file names) was the word "cafe" and an
// accent, and a search for café, which the index found, marked nothing.
function folded(text) {
  let out = "";
  const starts = [];
  const ends = [];
  // A character, the marks after it and, after a Hangul initial, the vowel and final jamo
  // that NFKC composes with it into one syllable.
  for (const m of (text || "").matchAll(/[^\p{M}\u1160-\u11FF][\p{M}\u1160-\u11FF]*|[\p{M}\u1160-\u11FF]+/gsu)) {
    const piece = fold(m[0]);
    out += piece;
    for (let i = 0; i < piece.length; i++) {
      starts.push(m.index);
      ends.push(m.index + m[0].length);
    }
  }
  return { out, starts, ends };
}

// [from, to) string ranges of text where a query word or a whole phrase occurs.
function termRanges(text, query) {
  const { terms, phrases } = queryTerms(query);
  if (!terms.size && !phrases.length) return [];
  const { out, starts, ends } = folded(text);
  const tokens = [...out.matchAll(WORD)].map((m) => ({ from: starts[m.index], to: ends[m.index + m[0].length - 1], word: lower(m[0]) }));
  const ranges = [];
  tokens.forEach((token, i) => {
    if (terms.has(token.word)) ranges.push([token.from, token.to]);
    for (const phrase of phrases) {
      if (phrase.every((word, j) => tokens[i + j] && tokens[i + j].word === word)) {
        ranges.push([token.from, tokens[i + phrase.length - 1].to]);
      }
    }
  });
  return ranges.sort((a, b) => a[0] - b[0]);
}

// The first `count` characters of text as a reader sees them (grapheme clusters), then "…" when
// more follow. String.slice counts UTF-16 units: a cut through 😀 (two of them) left half a
// surrogate pair, shown as �, and one through 👨‍👩‍👧 or क्ष a dangling joiner or virama.
function excerpt(text, count) {
  let seen = 0;
  for (const { index } of new Intl.Segmenter(undefined, { granularity: "grapheme" }).segment(text)) {
    if (seen === count) return `${text.slice(0, index)}…`;
    seen += 1;
  }
  return text;
}

if (typeof module !== "undefined") module.exports = { excerpt, queryTerms, termRanges, words };
