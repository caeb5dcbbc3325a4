"""The search page's query-word marking (``planner/static/terms.js``), run under Node.

The page marks where the query's words occur in a hit; its words must be the text index's
terms (``sinks.text.base.analyze_text``), each Chinese, Japanese or Korean character a term, and
a CJK query word is marked where the whole substring occurs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sinks.text.base import LETTER_FOLDS, MAX_TOKEN_BYTES, analyze_text

TERMS_JS = Path(__file__).resolve().parents[2] / "planner" / "static" / "terms.js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js to run the page's script")

_RUN = """
const t = require(process.argv[1]);
const calls = JSON.parse(require("fs").readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(calls.map(([name, ...args]) => {
  const out = t[name](...args);
  return name === "termRanges" ? out.map(([a, b]) => args[0].slice(a, b)) : out;
})));
"""


def run(*calls: list[Any]) -> list[Any]:
    """Each ``[function, *args]`` called in terms.js; termRanges gives the marked substrings."""
    assert NODE is not None
    done = subprocess.run([NODE, "-e", _RUN, str(TERMS_JS)], input=json.dumps(calls),
                          capture_output=True, text=True, check=True, timeout=60)
    return list(json.loads(done.stdout))


def test_cjk_query_words_mark_their_substring() -> None:
    marked = run(
        ["termRanges", "连接数据库失败，数据 库 again; 库存", "数据库"],
        ["termRanges", "Traceback: 调用foo_bar函数时抛出ValueError", "调用foo 函数 valueerror"],
        ["termRanges", "エラー: ファイルが見つかりません main.c", '"ファイルが" main'],
        ["termRanges", "Deploy step 1 of deploy", 'deploy "step 1"'],
        ["termRanges", "no such words here", "数据库"],
        ["termRanges", "การเชื่อมต่อฐานข้อมูลล้มเหลว ฐาน", "ฐานข้อมูล"],
    )
    assert marked == [
        ["数据库", "数据 库"],  # the phrase of its characters, not each 库 on its own
        ["调用foo", "函数", "ValueError"],
        ["ファイルが", "main"],
        ["Deploy", "step 1", "deploy"],
        [],
        ["ฐานข้อมูล"],
    ]


_ALPHABET = st.sampled_from([*"abcXYZ019 _-.:，。\n数据库連接ファイルがエラーー々〇가나éßΩฐานข้อมูล๑ຂໍ້ချိတ်ភ្ជាប់"
                             "डेटाबेस्ंডাটাবেসதரவுத்مَرْحَبًاⒶİΣΊΟΔ・゠゛゜･ﾞﾟ", "𠀀", "ｶ", "\u3099", *LETTER_FOLDS])


@settings(max_examples=20, deadline=None)
@given(texts=st.lists(st.text(_ALPHABET, max_size=40), min_size=50, max_size=50))
def test_the_page_splits_words_as_the_text_index_does(texts: list[str]) -> None:
    # One Node process per example: 50 texts in one call.
    page = run(*[["words", text] for text in texts])
    for text, words in zip(texts, page, strict=True):
        indexed = analyze_text(text)
        assert [w for w in words if len(w.encode("utf-8")) < MAX_TOKEN_BYTES] == indexed, text


def test_text_the_index_folds_is_marked_over_what_it_came_from() -> None:
    """Found with `usl search café` on a live stack: the index folds text to NFKC before it splits
    words, so it found `cafe` written with a combining accent (as macOS writes file names), and
    the page, which split the text as written, marked nothing. Folded, the word is marked over
    the letters and accents it came from."""
    decomposed = "Le cafe\u0301 du re\u0301sume\u0301 est pre\u0302t"
    marked = run(
        ["termRanges", decomposed, "café RÉSUMÉ"],
        ["termRanges", "ＡＢＣ error and ﬁle", "abc file"],
        ["termRanges", "カ\u3099ス", "ガス"],
        ["termRanges", decomposed, '"du résumé"'],
    )
    assert marked == [["cafe\u0301", "re\u0301sume\u0301"], ["ＡＢＣ", "ﬁle"], ["カ\u3099ス"], ["du re\u0301sume\u0301"]]


@settings(max_examples=10, deadline=None)
@given(texts=st.lists(st.text(_ALPHABET, min_size=1, max_size=40), min_size=30, max_size=30))
def test_any_normal_form_of_a_text_marks_the_same_words(texts: list[str]) -> None:
    import unicodedata

    calls = []
    for text in texts:
        query = " ".join(analyze_text(text)[:2]) or "x"
        for form in ("NFC", "NFD"):
            calls.append(["termRanges", unicodedata.normalize(form, text), query])
    marked = run(*calls)
    for composed, decomposed in zip(marked[::2], marked[1::2], strict=True):
        assert [unicodedata.normalize("NFKC", word) for word in decomposed] == [
            unicodedata.normalize("NFKC", word) for word in composed]


def test_spellings_the_index_folds_are_marked_over_what_they_came_from() -> None:
    """The index reads ё as е, a final ς as σ, İ as I, ß as ss and drops Greek accents and
    Arabic and Hebrew vowel points (analyzer 7): what it finds is marked, over the letters as written."""
    every = " ".join(f"a{letter}b {letter}Б" for letter in LETTER_FOLDS)  # each fold, inside a word and at its end
    assert run(["words", every]) == [analyze_text(every)]
    text = "Ещё ёлку; ο ΔΙΑΚΟΜΙΣΤΗΣ στην ΟΔΟΣ; İstanbul, DİYARBAKIR, Größe; مُحَمَّد الـعـربـيـة; שָׁלוֹם"
    marked = run(*[["termRanges", text, query] for query in
                   ("елку еще", "οδος", '"ο διακομιστής"', "istanbul diyarbakır", "GRÖSSE", "محمد العربية", "שלום")])
    assert marked == [["Ещё", "ёлку"], ["ΟΔΟΣ"], ["ο ΔΙΑΚΟΜΙΣΤΗΣ"], ["İstanbul", "DİYARBAKIR"], ["Größe"],
                      ["مُحَمَّد", "الـعـربـيـة"], ["שָׁלוֹם"]]


def test_every_double_quotation_mark_quotes_a_phrase_as_the_planner_reads_it() -> None:
    """The page marks the phrase the planner searched (planner.quotes): “step 1” is one phrase."""
    from planner.quotes import _QUOTES

    marks = [chr(code) for code in _QUOTES]
    marked = run(*[["termRanges", "Deploy step 1 of deploy", f"{mark}step 1{mark}"] for mark in marks])
    assert marked == [["step 1"]] * len(marks)


def test_an_excerpt_ends_between_the_characters_a_reader_sees() -> None:
    """The session view's one-line excerpt of a tool call or result was text.slice(0, 100),
    UTF-16 units: an emoji across the cut showed as half a surrogate pair, a family emoji as a
    man and a joiner, a conjunct as a consonant and a virama."""
    family = "\U0001F468\u200d\U0001F469\u200d\U0001F467"
    assert run(["excerpt", "x" * 99 + family + " tail", 100],
               ["excerpt", "\U0001F600" * 120, 100],
               ["excerpt", "क्ष" * 101, 100],
               ["excerpt", "short 数据库 🙂", 100]) == [
        "x" * 99 + family + "…", "\U0001F600" * 100 + "…", "क्ष" * 100 + "…", "short 数据库 🙂"]
