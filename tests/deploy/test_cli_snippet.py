"""What ``usl search`` shows of a hit: the part of the chunk the query found, not its first lines."""

from __future__ import annotations

import itertools
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from deploy.cli.query import _SNIPPET_CHARS, _snippet


def _shown(text: str, query: str) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(_snippet(text, [{"start": 0, "end": len(text.encode())}], query))
    return console.export_text()


def test_a_phrase_deep_in_a_chunk_is_shown() -> None:
    """Found by a new user: the phrase sat 1 481 bytes into its chunk and the output showed the
    chunk's first three events only."""
    text = "[user] run the tests again please\n" * 50 + "[assistant] I need to add it back since the import broke\n" \
        + "[tool.result Bash ok] 12 passed\n" * 30
    shown = _shown(text, '"I need to add it back since"')
    assert "I need to add it back since the import broke" in shown
    assert shown.lstrip().startswith("…[user]")  # cut at a line's start, and marked as cut
    assert shown.rstrip().endswith("…")


def test_the_densest_words_choose_the_window() -> None:
    text = "migration " + "filler words here\n" * 60 + "refunds table migration failed on refunds\n" + "more\n" * 60
    assert "refunds table migration failed" in _shown(text, "refunds migration failed")


def test_a_chunk_whose_start_matches_is_shown_from_its_start() -> None:
    text = "[user] deploy the api\n" + "line\n" * 200
    assert _shown(text, "deploy").lstrip().startswith("[user] deploy the api")
    assert _shown("[user] short", "nothing matches").strip() == "[user] short"


@given(st.text(max_size=1500), st.text(max_size=30))
def test_any_text_and_query_give_a_bounded_snippet(text: str, query: str) -> None:
    plain = _snippet(text, [{"start": 0, "end": len(text.encode())}], query).plain
    assert len(plain.replace("\n   ", "\n")) <= _SNIPPET_CHARS + 5


def test_terminal_escapes_in_a_hit_are_shown_not_obeyed() -> None:
    """Found by a new user: a transcript's ESC[2J cleared the searcher's screen and ESC]0; set
    its window title; tool output an attacker wrote reaches whoever searches it."""
    from deploy.cli._common import escape

    text = "[user] \x1b[31mRED\x1b[0m \x1b]0;pwned-title\x07 okapi \x1b[2J\x9b2J done"
    plain = _snippet(text, [{"start": 0, "end": len(text.encode())}], "okapi").plain
    assert not any((ord(char) < 0x20 and char not in "\n\t") or 0x7F <= ord(char) < 0xA0 for char in plain)
    assert "␛[31mRED" in plain and "okapi" in plain and len(plain) == len("   " + text)
    assert "\x1b" not in escape("cell \x1b[2J") and "␛[2J" in escape("cell \x1b[2J")


def test_bidirectional_overrides_in_a_hit_are_shown_not_obeyed() -> None:
    """Found by a new user: U+202E in tool output made the terminal print `access_level = "user"`
    of a line that says otherwise ("Trojan Source"); Arabic and Hebrew need none of them."""
    from deploy.cli._common import printable

    controls = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    text = f"[tool.result] if admin {controls} okapi"
    plain = _snippet(text, [{"start": 0, "end": len(text.encode())}], "okapi").plain
    assert not set(controls) & set(plain) and plain.count("\ufffd") == len(controls)
    assert printable("مرحبا بالعالم \u200fשלום") == "مرحبا بالعالم \u200fשלום"


def test_explain_names_the_words_each_list_ranked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user: hybrid's text list ranks the query without its function words, and
    only ``--json`` said so; the plain ``--explain`` now names what each such list ranked."""
    from deploy.cli import query

    console = Console(width=200, record=True, color_system=None)
    monkeypatch.setattr(query, "out", lambda: console)
    monkeypatch.setattr(query, "freshness_line", lambda response: "asOfSeq 7")
    response = {"results": [], "explain": {
        "freshness": {"reasons": ["as of seq 7"]}, "sources": {}, "fallbacks": [],
        "text": {"sources": ["text", "tail"], "query": "plans changed reservation cancelled", "rule": "without function words"},
        "identifiers": {"sources": ["identifier"], "query": '"HXDUBJ"', "rule": "codes"}}}
    query.render_response(response, {"query": "plans had changed and the reservation was cancelled HXDUBJ"})
    shown = console.export_text()
    assert "text list ranked: plans changed reservation cancelled (without function words)" in shown
    assert 'identifier list ranked: "HXDUBJ" (codes)' in shown


def test_words_with_vowel_signs_are_marked_whole_and_never_split() -> None:
    """Found on a Hindi session: Python's ``\\w`` has no vowel signs, so the query word
    परीक्षण was read as पर and षण, underlined inside परिणाम and the word पर wherever they
    occur (and chose the snippet's window by them), and ठीक marked nothing. A word is marked
    where it occurs whole, never up to the middle of a letter and its vowel sign."""
    from deploy.cli.query import _matches

    text = "मैंने पुनः प्रयास टाइमर ठीक कर दिया है; पुनः कनेक्शन परीक्षण अब सफल है। परिणाम पर करें"
    assert [text[a:b] for a, b in _matches(text, "परीक्षण")] == ["परीक्षण"]
    assert [text[a:b] for a, b in _matches(text, "ठीक")] == ["ठीक"]
    # कर is a word of its own here, and the start of करें, whose vowel sign it must not cut.
    assert [(text[a:b], a) for a, b in _matches(text, "कर")] == [("कर", text.index(" कर ") + 1)]
    assert [text[a:b] for a, b in _matches(text, '"सफल है"')] == ["सफल है"]


def test_text_the_index_folds_is_marked_and_shown() -> None:
    """Found on a live stack: a session whose text spells `café` as `cafe` and a combining accent
    (as macOS writes file names) was found by `usl search café`, and the snippet underlined
    nothing; deep in a long chunk, with no match to centre on, it did not show the word at all.
    Full-width letters, which the index folds (NFKC) too, were the same."""
    from deploy.cli.query import _matches

    decomposed = unicodedata.normalize("NFD", "Le café du résumé est prêt")
    assert [decomposed[a:b] for a, b in _matches(decomposed, "café RÉSUMÉ")] == [
        unicodedata.normalize("NFD", "café"), unicodedata.normalize("NFD", "résumé")]
    assert _matches("ＡＢＣ error", "abc") == [(0, 3)]
    assert _matches("İstanbul error", "error") == [(9, 14)]  # lowercasing İ lengthens the text
    shown = _shown("line\n" * 200 + decomposed + "\n" + "more\n" * 200, "café")
    assert unicodedata.normalize("NFD", "café") in shown


def test_spellings_the_index_folds_are_marked() -> None:
    """The index found `ΟΔΟΣ` for the query `ΟΔΟΣ` and the snippet marked nothing (the query
    lowercased whole ends in ς, the text letter by letter in σ); the index's letter folds
    (analyzer 7: ё as е, ς as σ, İ as I, ß as ss, Greek accents and Arabic and Hebrew vowel
    points dropped) are marked over the letters as written."""
    from deploy.cli.query import _matches

    text = "Ещё ёлку; ο ΔΙΑΚΟΜΙΣΤΗΣ στην ΟΔΟΣ; İstanbul, DİYARBAKIR, Größe; مُحَمَّد الـعـربـيـة; שָׁלוֹם"
    for query, marked in (("ΟΔΟΣ", ["ΟΔΟΣ"]), ("οδος", ["ΟΔΟΣ"]), ('"ο διακομιστής"', ["ο ΔΙΑΚΟΜΙΣΤΗΣ"]),
                          ("елку ЕЩЕ", ["Ещё", "ёлку"]), ("ISTANBUL Diyarbakır", ["İstanbul", "DİYARBAKIR"]), ("grösse", ["Größe"]),
                          ("محمد العربية", ["مُحَمَّد", "الـعـربـيـة"]), ("שלום", ["שָׁלוֹם"])):
        assert [text[start:end] for start, end in _matches(text, query)] == marked, query


def test_a_snippet_never_cuts_a_character_in_two() -> None:
    """The snippet was cut at 480 code points: through 👨‍👩‍👧‍👦 it showed a man and a dangling
    joiner; through a letter and its accent or vowel sign, the bare letter; before Thai and
    Lao sara am (ทำ, น้ำ, ຄຳ), a vowel Unicode counts a letter but draws on the consonant, the
    consonant and a vowel alone."""
    family = "👨\u200d👩\u200d👧\u200d👦"
    for cluster in (family, "e\u0301", "रें", "क्ष", "🇯🇵", "👍🏽", "ทำ", "น้ำ", "ຄຳ"):
        for pad in range(_SNIPPET_CHARS - len(cluster) - 1, _SNIPPET_CHARS + 1):
            text = "x" * pad + cluster + " tail"
            plain = _snippet(text, [], "").plain
            assert cluster in plain or plain.endswith("x…"), (cluster, pad, plain[-12:])


_CLUSTERS = ("a", "f", "Z", "é", "e\u0301", "ｆ", "ﬁ", "ﬀ", "数", "ก", "กี่", "ทำ", "น้ำ", "ຄຳ", "रें", "क्ष", "ट", "ا", "ب", "\u05e9\u05c1",
             "👨\u200d👩\u200d👧\u200d👦", "🇯🇵", "🇫🇷", "👍🏽", "\u1100\u1161", "\u1100\u1161\u11a8", "가", "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
             " ", "\n", ".")


@given(st.lists(st.sampled_from(_CLUSTERS), max_size=60), st.integers(min_value=0, max_value=400))
def test_cuts_fall_between_the_characters_a_reader_sees(clusters: list[str], position: int) -> None:
    from deploy.cli.query import _boundary_at_or_before

    text = "".join(clusters)
    boundaries = {0, *itertools.accumulate(len(cluster) for cluster in clusters)}
    position = min(position, len(text))
    cut = _boundary_at_or_before(text, position)
    assert cut in boundaries and cut <= position
    assert not any(cut < boundary <= position for boundary in boundaries)  # the nearest one


_LETTERS = tuple(cluster for cluster in _CLUSTERS if all(char.isalnum() or unicodedata.category(char)[0] == "M"
                                                          for char in cluster))


_WORDS = st.lists(st.lists(st.sampled_from(_LETTERS), min_size=1, max_size=6), min_size=1, max_size=8)


@given(_WORDS, st.data())
def test_a_query_word_is_marked_where_the_index_would_find_it(words: list[list[str]], data: st.DataObject) -> None:
    """Any word of the text, asked in any case and normal form, is marked exactly over its
    letters."""
    from deploy.cli.query import _matches

    text = " ".join("".join(word) for word in words)
    chosen = data.draw(st.integers(0, len(words) - 1))
    word = "".join(words[chosen])
    query = data.draw(st.sampled_from((word, word.upper(), unicodedata.normalize("NFD", word),
                                       unicodedata.normalize("NFKC", word))))
    from sinks.text.base import letters_folded

    if len(letters_folded(unicodedata.normalize("NFKC", word))) < 2:
        return  # a word of one character (as the index reads it: שׁ is ש) is marked only inside a phrase
    spans = _matches(text, query)
    offset = sum(len("".join(before)) + 1 for before in words[:chosen])
    assert (offset, offset + len(word)) in spans
    boundaries = {0, *itertools.accumulate(len(cluster) for word in words for cluster in (*word, " "))}
    assert all(a in boundaries and b in boundaries for a, b in spans)


_RUN_LETTERS = tuple(cluster for cluster in _LETTERS if unicodedata.east_asian_width(cluster[0]) not in ("W", "F")
                     and not 0x0E00 <= ord(cluster[0]) <= 0x0EFF)


@given(st.lists(st.sampled_from(_RUN_LETTERS), min_size=2, max_size=8), st.data())
def test_a_piece_of_a_longer_word_is_not_marked(word: list[str], data: st.DataObject) -> None:
    """Found as a new user: `usl search log` underlined `log` inside `login` and `catalog`, and
    Arabic قاعدة inside بقاعدة; the index finds whole terms (runs of letters and digits), so
    neither is why the hit came, and the page marked none of them. A piece of a run of letters
    is marked only where a script without spaces makes each character a term."""
    from deploy.cli.query import _matches

    start = data.draw(st.integers(0, len(word) - 1))
    end = data.draw(st.integers(start + 1, len(word)))
    if (start, end) == (0, len(word)):
        return
    text = "".join(word)
    assert _matches(text, "".join(word[start:end])) == []


def test_terms_are_marked_whole_in_every_script() -> None:
    from deploy.cli.query import _matches

    def marked(text: str, query: str) -> list[str]:
        return [text[a:b] for a, b in _matches(text, query)]

    assert marked("login to the catalog, then log in", "log") == ["log"]
    assert marked("snake_log and log-rotate", "log") == ["log", "log"]  # `_` and `-` split terms
    assert marked("عن بقاعدة البيانات، قاعدة", "قاعدة") == ["قاعدة"]
    assert marked("数据库 的 数据", "数据") == ["数据", "数据"]  # each character is a term
    assert marked("ภาษาไทย ไทย", "ไทย") == ["ไทย", "ไทย"]


def test_a_window_opening_on_blank_lines_starts_at_the_text_after_them() -> None:
    """Found on a real Claude Code session (a web search's result: its query, a blank line, then
    `Links: [{"title": ...`): the hit began with a line holding only `…`, the blank line the
    window opened on, and the text it was cut for came a line later."""
    text = "[user] why does the tray menu not update " + "and so on " * 60 + "\n" \
        + "[tool.result WebSearch ok] Web search results for query: " + "ksni menu refresh " * 8 + "\n\n" \
        + 'Links: [{"title":"ksni tray"},{"title":"ksni"},{"title":"tray"}]\n' + "filler\n" * 80
    first = _shown(text, "title tray").splitlines()[0].strip()
    assert first.startswith("…Links:")


def test_a_phrase_in_smart_quotes_is_marked_as_the_phrase() -> None:
    """The planner reads “step 1” as the phrase "step 1" (planner.quotes); so does the snippet."""
    from deploy.cli.query import _matches

    text = "step 2 failed; step 1 passed"
    assert [text[a:b] for a, b in _matches(text, "\u201cstep 1\u201d")] == ["step 1"]


def _folded_by_letter(text: str) -> tuple[str, list[int], list[int]]:
    """The reference: every letter (with the marks that join it) folded on its own."""
    from deploy.cli.query import _HANGUL_VOWELS_AND_FINALS, _fold, _joins_previous

    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    start = 0
    while start < len(text):
        end = start + 1
        while end < len(text) and (_joins_previous(text[end]) or text[end] in _HANGUL_VOWELS_AND_FINALS):
            end += 1
        piece = _fold(text[start:end])
        pieces.append(piece)
        starts += [start] * len(piece)
        ends += [end] * len(piece)
        start = end
    return "".join(pieces), starts, ends


def _read_result_text() -> str:
    """A real Claude Code `Read` result: its line numbers are written `     1→code`."""
    import json
    from pathlib import Path

    path = Path(__file__).parents[1] / "fixtures/importers/claude_code/3f6c2a8e-1b7d-4c55-9e0a-5d2f8b1c7e94.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        content = json.loads(line).get("message", {}).get("content")
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result" and "→" in json.dumps(block, ensure_ascii=False):
                    return "".join(part["text"] for part in block["content"])
    raise AssertionError("the fixture's Read result is gone")


def test_a_hit_with_one_arrow_is_not_folded_letter_by_letter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found timing `usl search` on real sessions: a Read result's `→` made the whole chunk not
    ASCII, and the snippet folded its 20 000 characters one at a time, most of the command's CPU.
    ASCII runs are folded whole now; only the letters outside them are folded one by one."""
    import deploy.cli.query as query

    text = ("[tool.result Read ok] " + _read_result_text() + "\n") * 20
    calls = []
    real_fold = query._fold
    monkeypatch.setattr(query, "_fold", lambda piece: calls.append(piece) or real_fold(piece))
    assert "timedelta" in _shown(text, "timedelta import")
    calls.clear()
    folded = query._folded(text)
    assert len(calls) == sum(1 for character in text if not character.isascii())  # the arrows only
    assert folded == _folded_by_letter(text)


_MIXED = st.text(st.sampled_from([*"aZ_ 1\n→é\u0301İﬀΣς数Àᄀ\u1161\u11a8\u200dक\u093f", "\x7f", "\x00"]), max_size=40)


@given(_MIXED)
def test_ascii_runs_fold_as_their_letters_do(text: str) -> None:
    """The run-at-a-time fold equals folding letter by letter, marks and Hangul jamo joining an
    ASCII letter included."""
    from deploy.cli.query import _folded

    assert _folded(text) == _folded_by_letter(text)


def test_marking_a_hit_does_not_load_the_text_sink() -> None:
    """The folds the snippet needs come from ``sinks.letter_folds``: importing ``sinks.text``
    for them compiled the analyzer's word patterns in every `usl search`."""
    import subprocess
    import sys

    code = ("import sys; from deploy.cli.query import _matches; "
            "assert _matches('1→ёлка ΟΔΟΣ', 'елка οδοσ'); print(sorted(m for m in sys.modules if m.startswith('sinks')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "sinks.letter_folds" in loaded
    assert "sinks.text" not in loaded
