"""One conformance suite for every full-text engine: both must behave the same."""

from __future__ import annotations

import hashlib
import itertools
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sinks.text as text_pkg
from sinks.exceptions import EmptyQueryError, EngineError, UnknownEngineError
from sinks.generations import GenerationStore, Manifest, clone_into
from sinks.text import TextEngine, get_engine
from sinks.text.base import HitCheck, collect_top, parse_query, to_text_doc
from sinks.text.tantivy_engine import TantivyEngine
from sinks.text.whoosh_engine import WhooshEngine

ENGINES = {"tantivy": TantivyEngine, "whoosh": WhooshEngine}

NASTY_QUERIES = [
    "foo(", '"unterminated', "AND", "OR NOT", "a:b", "text:hello", "*", "?", "hello*", "~2", "^3",
    "[1 TO 5]", "{}", "\\", "'", "''", '""', "+-&&||!(){}[]^\"~*?:\\/", "chunkId:c1", "NOT hello",
    "hello AND", "(hello", "hello)", "/regex/", "x" * 500, "é" * 50, "🙂", "\x00", "a\tb\nc",
    "SELECT * FROM chunks; DROP TABLE x", "%s %d", "{{template}}",
]


def chunk(chunk_id: str, text: str, *, session: str = "s1", max_seq: int = 1, min_seq: int | None = None,
          event_time: float | str = 1767225600.0) -> dict:
    """A SearchChunkV1-shaped record (only what the text index reads, plus a few extras)."""
    return {
        "kind": "chunk", "schema": "SearchChunkV1", "chunkId": chunk_id, "logId": "default",
        "sessionId": session, "runId": None, "turnId": "t1", "episodeId": None, "unit": "turn",
        "text": text, "fields": {"roles": ["user", "assistant"], "types": ["message"], "toolNames": ["bash"]},
        "minSeq": max_seq if min_seq is None else min_seq, "maxSeq": max_seq, "eventTime": event_time,
    }


@pytest.fixture(params=sorted(ENGINES))
def engine(request) -> TextEngine:
    return ENGINES[request.param]()


@pytest.fixture
def index_dir(engine: TextEngine, tmp_path: Path) -> Path:
    directory = tmp_path / "index"
    engine.create(directory)
    return directory


def ids(hits) -> list[str]:
    return [hit.chunk_id for hit in hits]


def test_exported_members():
    assert set(text_pkg.__all__) == {
        "DEFAULT_ENGINE", "ENGINES", "TextDoc", "TextEngine", "TextHit", "get_engine", "parse_query", "to_text_doc",
    }


def test_get_engine():
    assert get_engine().name == "tantivy"
    assert get_engine("whoosh").name == "whoosh"
    assert get_engine("Tantivy") is get_engine("tantivy")
    with pytest.raises(UnknownEngineError, match="tantivy, whoosh"):
        get_engine("lucene")


def test_engine_satisfies_protocol(engine: TextEngine):
    assert isinstance(engine, TextEngine)
    assert engine.copy_names


def test_index_count_and_ids(engine: TextEngine, index_dir: Path):
    assert engine.count(index_dir) == 0 and engine.all_ids(index_dir) == []
    engine.add(index_dir, [chunk(f"c{i:02d}", f"document number {i}") for i in range(12)])
    engine.add(index_dir, [chunk("c99", "another batch")])
    # (a tantivy *reader* may leave its meta lock file; add() itself leaves none)
    assert not [p for p in index_dir.iterdir() if "lock" in p.name.lower()]
    assert engine.count(index_dir) == 13
    assert engine.all_ids(index_dir) == sorted([f"c{i:02d}" for i in range(12)] + ["c99"])


def test_create_twice_and_missing_index(engine: TextEngine, index_dir: Path, tmp_path: Path):
    with pytest.raises(EngineError):
        engine.create(index_dir)
    with pytest.raises(EngineError):
        engine.search(tmp_path / "nothing", "hello", limit=5)
    with pytest.raises(EngineError):
        engine.add(tmp_path / "nothing", [chunk("c1", "x")])


def test_relevance_sanity(engine: TextEngine, index_dir: Path):
    engine.add(index_dir, [
        chunk("once", "the kafka broker restarted after an error in the logs of yesterday"),
        chunk("often", "kafka kafka kafka broker"),
        chunk("both", "kafka consumer group rebalance"),
        chunk("none", "completely unrelated text about gardening"),
        chunk("phrase", "we saw a rebalance of the consumer group and then group consumer"),
    ])
    hits = engine.search(index_dir, "kafka", limit=10)
    assert ids(hits)[0] == "often" and "none" not in ids(hits)
    assert set(ids(hits)) == {"once", "often", "both"}
    assert [h.rank for h in hits] == [1, 2, 3]
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    two_terms = engine.search(index_dir, "kafka rebalance", limit=10)
    assert ids(two_terms)[0] == "both"
    phrase = engine.search(index_dir, '"consumer group"', limit=10)
    assert set(ids(phrase)) == {"both", "phrase"}
    assert ids(engine.search(index_dir, '"group rebalance"', limit=10)) == ["both"]
    assert engine.search(index_dir, "gardening", limit=10)[0].chunk_id == "none"
    assert engine.search(index_dir, "zebra", limit=10) == []


def test_upsert_by_chunk_id(engine: TextEngine, index_dir: Path):
    engine.add(index_dir, [chunk("c1", "original wording"), chunk("c2", "original too")])
    engine.add(index_dir, [chunk("c1", "replacement wording", max_seq=5)])
    assert engine.count(index_dir) == 2
    assert ids(engine.search(index_dir, "original", limit=10)) == ["c2"]
    assert ids(engine.search(index_dir, "replacement", limit=10)) == ["c1"]
    # duplicates inside one batch: the last one wins, no duplicate doc
    engine.add(index_dir, [chunk("c3", "first version"), chunk("c3", "second version")])
    engine.add(index_dir, [chunk("c3", "second version")])  # replayed batch
    assert engine.count(index_dir) == 3
    assert ids(engine.search(index_dir, "version", limit=10)) == ["c3"]
    assert engine.search(index_dir, "first", limit=10) == []


def test_filters_apply_before_the_limit(engine: TextEngine, index_dir: Path):
    docs = [chunk(f"a{i:02d}", "needle " * 5 + "haystack", session="A", max_seq=i) for i in range(1, 31)]
    docs += [chunk(f"b{i:02d}", "needle in a much longer haystack of many other words here", session="B",
                   max_seq=100 + i) for i in range(1, 6)]
    engine.add(index_dir, docs)
    only_b = engine.search(index_dir, "needle", limit=5, session_ids={"B"})
    assert ids(only_b) == [f"b{i:02d}" for i in range(1, 6)]
    assert [h.rank for h in only_b] == [1, 2, 3, 4, 5]
    early = engine.search(index_dir, "needle", limit=50, max_seq=10)
    assert ids(early) == [f"a{i:02d}" for i in range(1, 11)]  # inclusive bound, ties by chunkId
    assert ids(engine.search(index_dir, "needle", limit=50, max_seq=103, session_ids=["B"])) == ["b01", "b02", "b03"]
    assert engine.search(index_dir, "needle", limit=50, session_ids=[]) == []
    assert len(engine.search(index_dir, "needle", limit=50, session_ids=None)) == 35
    assert engine.search(index_dir, "needle", limit=50, session_ids={"nobody"}) == []
    excluded = engine.search(index_dir, "needle", limit=3, exclude_ids={"a01", "a02"})
    assert ids(excluded) == ["a03", "a04", "a05"]
    assert engine.search(index_dir, "needle", limit=0) == []


def test_excluded_sessions_are_left_out_before_the_limit(engine: TextEngine, index_dir: Path):
    # The planner names the unreadable sessions instead of the readable ones when they are
    # fewer: the same hits either way, and a frozenset's filter reused for it gives them again.
    docs = [chunk(f"{session.lower()}{i:02d}", "needle " * (3 if session == "A" else 1) + "hay",
                  session=session, max_seq=i) for session in "ABC" for i in range(1, 11)]
    engine.add(index_dir, docs)
    kept = engine.search(index_dir, "needle", limit=15, max_seq=8, session_ids={"B", "C"})
    unread = frozenset({"A"})
    for _ in range(2):
        left_out = engine.search(index_dir, "needle", limit=15, max_seq=8, exclude_sessions=unread)
        assert [(h.chunk_id, h.score, h.rank) for h in left_out] == \
            [(h.chunk_id, h.score, h.rank) for h in kept]
    assert len(kept) == 15 and not any(h.chunk_id.startswith("a") for h in kept)
    both = engine.search(index_dir, "needle", limit=50, session_ids={"A", "B"}, exclude_sessions={"A"})
    assert {h.chunk_id[0] for h in both} == {"b"}
    searched = getattr(engine, "search_shards", None)
    if searched is not None:
        assert ids(searched([index_dir], "needle", limit=15, max_seq=8, exclude_sessions=unread)) == ids(kept)


def test_filters_do_not_change_scores(engine: TextEngine, index_dir: Path):
    engine.add(index_dir, [chunk(f"c{i}", f"alpha beta {'gamma ' * i}", max_seq=i) for i in range(1, 8)])
    plain = {h.chunk_id: h.score for h in engine.search(index_dir, "gamma", limit=10)}
    filtered = engine.search(index_dir, "gamma", limit=10, max_seq=4, session_ids={"s1"})
    assert filtered and all(plain[h.chunk_id] == h.score for h in filtered)


def test_deterministic_tie_order(engine: TextEngine, tmp_path: Path):
    docs = [chunk(f"tie-{i:03d}", "identical words in every chunk") for i in range(60)]
    orders = []
    for seed in (1, 2):
        shuffled = docs[:]
        random.Random(seed).shuffle(shuffled)
        directory = tmp_path / f"index-{seed}"
        engine.create(directory)
        for start in range(0, len(shuffled), 7):  # many segments, in different orders
            engine.add(directory, shuffled[start:start + 7])
        hits = engine.search(directory, "identical chunk", limit=5)
        assert len({h.score for h in hits}) == 1
        orders.append(ids(hits))
        assert ids(engine.search(directory, "identical", limit=60)) == sorted(d["chunkId"] for d in docs)
    assert orders[0] == orders[1] == [f"tie-{i:03d}" for i in range(5)]


@pytest.mark.parametrize("query", NASTY_QUERIES)
def test_nasty_queries_never_raise(engine: TextEngine, index_dir: Path, query: str):
    engine.add(index_dir, [chunk("c1", "hello world text chunk a b"), chunk("c2", "foo bar regex template")])
    hits = engine.search(index_dir, query, limit=5, max_seq=10, session_ids={"s1"}, exclude_ids={"zz"})
    assert isinstance(hits, list)


def test_operators_are_plain_words(engine: TextEngine, index_dir: Path):
    engine.add(index_dir, [chunk("c1", "hello world"), chunk("c2", "foo bar")])
    assert ids(engine.search(index_dir, "foo(", limit=5)) == ["c2"]
    assert ids(engine.search(index_dir, "NOT hello", limit=5)) == ["c1"]
    assert ids(engine.search(index_dir, "text:hello", limit=5)) == ["c1"]
    assert ids(engine.search(index_dir, '"unterminated hello', limit=5)) == []
    assert ids(engine.search(index_dir, '"hello', limit=5)) == ["c1"]


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_query_is_a_clear_error(engine: TextEngine, index_dir: Path, query: str):
    with pytest.raises(EmptyQueryError, match="empty"):
        engine.search(index_dir, query, limit=5)


def test_unicode_text(engine: TextEngine, index_dir: Path):
    engine.add(index_dir, [
        chunk("ru", "Привет мир, это тест"),
        chunk("fr", "Un café crème à Paris"),
        chunk("jp", "東京タワー の 夜景"),
        chunk("gr", "Καλημέρα κόσμε"),
        chunk("emoji", "deploy finished 🚀 successfully"),
    ])
    assert ids(engine.search(index_dir, "ПРИВЕТ", limit=5)) == ["ru"]
    assert ids(engine.search(index_dir, "Café", limit=5)) == ["fr"]
    assert ids(engine.search(index_dir, "東京タワー", limit=5)) == ["jp"]
    assert ids(engine.search(index_dir, "ΚΑΛΗΜΈΡΑ", limit=5)) == ["gr"]
    assert ids(engine.search(index_dir, "🚀 successfully", limit=5)) == ["emoji"]
    assert ids(engine.search(index_dir, '"café crème"', limit=5)) == ["fr"]


def test_hits_carry_the_digest_of_the_stored_text(engine: TextEngine, index_dir: Path):
    """Chunks of identical text give identical digests (what the planner collapses by), in
    every engine, CJK text included (the digest is of the text, not its indexed form)."""
    from sinks.text.base import text_digest

    texts = {"a": "deploy failed on the refunds table", "b": "deploy failed on the refunds table",
             "c": "deploy failed on the orders table", "zh": "部署失败：数据库连接超时"}
    engine.add(index_dir, [chunk(chunk_id, text) for chunk_id, text in texts.items()])
    hits = engine.search(index_dir, "deploy 部署", limit=10)
    assert {hit.chunk_id: hit.digest for hit in hits} == {
        chunk_id: text_digest(text) for chunk_id, text in texts.items()}


CJK_DOCS = {
    "zh": "部署失败：数据库连接超时，请检查网络配置后重试。",
    "ja": "データベースへの接続がタイムアウトしました。設定を確認してください。",
    "ko": "데이터베이스에서 연결 시간이 초과되었습니다",
    "mixed": "调用foo_bar函数时抛出ValueError，见src/app.py第42行",
    "en": "the database connection timed out, check the network settings",
    # Also written without spaces between words (the tone marks of Thai and Lao are not letters).
    "th": "การเชื่อมต่อฐานข้อมูลล้มเหลวเพราะเซิร์ฟเวอร์ไม่ตอบสนอง",
    "lo": "ການເຊື່ອມຕໍ່ຖານຂໍ້ມູນລົ້ມເຫຼວ",
    "my": "ဒေတာဘေ့စ်ချိတ်ဆက်မှုမအောင်မြင်ပါ",
    "km": "ការតភ្ជាប់មូលដ្ឋានទិន្នន័យបានបរាជ័យ",
}


def _substrings(text: str, rng: random.Random, count: int) -> list[str]:
    """Random substrings; one that cuts a word of a spaced script is widened to the whole
    word (those scripts are searched by words, CJK by characters)."""
    def inside_word(at: int) -> bool:
        return 0 < at < len(text) and text[at - 1].isascii() and text[at - 1].isalnum() \
            and text[at].isascii() and text[at].isalnum()

    out = []
    for _ in range(count):
        start = rng.randrange(len(text) - 1)
        end = rng.randrange(start + 1, min(len(text), start + 12) + 1)
        while inside_word(start):
            start -= 1
        while inside_word(end):
            end += 1
        out.append(text[start:end])
    return out


def test_cjk_substrings_are_found(engine: TextEngine, index_dir: Path):
    engine.add(index_dir, [chunk(doc_id, text) for doc_id, text in CJK_DOCS.items()])
    rng = random.Random(14)
    for doc_id in ("zh", "ja", "ko", "mixed", "th", "lo", "my", "km"):
        for piece in _substrings(CJK_DOCS[doc_id], rng, 25):
            if not engine.analyze(piece):  # type: ignore[attr-defined]  # punctuation only
                continue
            hits = ids(engine.search(index_dir, piece, limit=5))
            assert hits and hits[0] == doc_id, (doc_id, piece, hits)
    # Whole words, one character, and mixed code/CJK, plain and quoted.
    for query, expected in (("数据库", "zh"), ("连接超时", "zh"), ("库", "zh"), ("タイムアウト", "ja"),
                            ("接続", "ja"), ("데이터베이스", "ko"), ("foo_bar函数", "mixed"),
                            ('"函数时抛出ValueError"', "mixed"), ("ValueError", "mixed"),
                            ("app py", "mixed"), ("42行", "mixed"), ("ฐานข้อมูล", "th"), ("ล้มเหลว", "th"),
                            ("ຖານຂໍ້ມູນ", "lo"), ("ချိတ်ဆက်", "my"), ("មូលដ្ឋានទិន្នន័យ", "km")):
        assert ids(engine.search(index_dir, query, limit=5))[:1] == [expected], query
    # A CJK word is a phrase of its characters: the same characters apart rank below it.
    engine.add(index_dir, [chunk("apart", "数 与 据 与 库")])
    assert ids(engine.search(index_dir, "数据库", limit=5))[:2] == ["zh", "apart"]
    assert ids(engine.search(index_dir, '"数据库"', limit=5)) == ["zh"]
    # The stored text is the chunk's own, whatever the index holds for its terms.
    assert engine.fetch_texts(index_dir, ["zh", "mixed"]) == {  # type: ignore[attr-defined]
        "zh": CJK_DOCS["zh"], "mixed": CJK_DOCS["mixed"]}


def test_a_word_is_found_in_any_of_its_unicode_forms(engine: TextEngine, index_dir: Path):
    """Found by a new user: 'café' written with a combining accent (macOS paths are NFD) was the
    words 'cafe' and nothing, so the precomposed 'café' found nothing; full-width letters and
    ligatures matched no plain word. Text and query are folded to NFKC before tokenizing."""
    engine.add(index_dir, [chunk("nfd", "the cafe\u0301 nai\u0308ve recipe"),
                           chunk("wide", "ＦＵＬＬＷＩＤＴＨ ｶﾀｶﾅ and the ﬁle"),
                           chunk("plain", "a plain cafe, naive and plain")])
    for query, expected in (("café", "nfd"), ("cafe\u0301", "nfd"), ('"café naïve"', "nfd"), ("naïve", "nfd"),
                            ("fullwidth", "wide"), ("カタカナ", "wide"), ("file", "wide"), ("ＣＡＦＥ", "plain")):
        hits = ids(engine.search(index_dir, query, limit=5))
        assert hits and hits[0] == expected, (query, hits)
    # The stored text is the chunk's own, not its folded form.
    assert "cafe\u0301" in engine.fetch_texts(index_dir, ["nfd"])["nfd"]  # type: ignore[attr-defined]


# A Claude Code tool result as a real session wrote it (an agent's `jq .` of a transcript: the
# messages are JSON strings, their line breaks and dashes escaped), an OpenTelemetry tool
# result from a Python instrumentation (json.dumps escapes every non-ASCII character), JSON in a
# JSON string, and a quoted Windows path in a command, which is not JSON.
JSON_DOCS = {
    "jq": '[tool.result Bash ok] {\n  "type": "user",\n  "message": {\n    "role": "user",\n'
          '    "content": "<command-name>/create-beads</command-name>\\n\\n### Phase 3: Draft Bead'
          ' Content\\n\\nUse the Task tool with `subagent_type=Plan` \\u2014 not summaries"\n  }\n}',
    "otel": '[tool.result search_flights ok] {"flights": ["NH106 \\u043f\\u044f\\u0442\\u043d\\u0438'
            '\\u0446\\u0430 10:05", "\\u4e88\\u7d04\\u6e08\\u307f"]}',
    "nested": '[tool.result mcp ok] {"text": "{\\"status\\": \\"failed\\\\nretrying\\"}"}',
    "windows": '[tool.call Bash] command=cd "C:\\tools\\bin" && dir',
    # pytest --color=yes as a Bash tool printed it, and a progress line from a real session's
    # JSON (its ESC written \u001b).
    "ansi": '[tool.result Bash error] \x1b[31mFAILED\x1b[0m tests/test_pay.py::test_refund_rounds - '
            'AssertionError\n\x1b[1m\x1b[31m1 failed\x1b[0m\x1b[1m in 0.12s\x1b[0m',
    "progress": '{"type": "bash_progress", "output": "\\u001b[0mWaiting for lock on the build directory"}',
}


def test_words_inside_json_strings_are_found(engine: TextEngine, index_dir: Path):
    """Found on real sessions: in a tool's JSON output the escaped line break glued itself to
    the next word (`\\n\\nUse` indexed `nuse`), and a Python instrumentation's escaped Cyrillic or
    Japanese (`\\u043f...`) indexed `u043f` and no word of it. JSON string literals are read as
    JSON reads them (analyzer 6); a quoted path in a command is not JSON and keeps its letters."""
    engine.add(index_dir, [chunk(doc_id, text) for doc_id, text in JSON_DOCS.items()])
    for query, expected in (('"Use the Task tool"', "jq"), ('"Draft Bead Content"', "jq"), ("summaries", "jq"),
                            ("пятница", "otel"), ("予約", "otel"), ('"failed retrying"', "nested"),
                            ("retrying", "nested"), ('"C tools bin"', "windows"), ("FAILED", "ansi"),
                            ('"1 failed in 0 12s"', "ansi"), ('"Waiting for lock"', "progress")):
        assert ids(engine.search(index_dir, query, limit=5))[:1] == [expected], query
    for absent in ("nuse", "u043f", "nretrying", "ools", "31mfailed", "0mwaiting", "0mtests"):
        assert engine.search(index_dir, absent, limit=5) == [], absent
    # The stored text is the chunk's own, escapes and all (evidence offsets point into it).
    assert engine.fetch_texts(index_dir, ["otel", "jq"]) == {  # type: ignore[attr-defined]
        "otel": JSON_DOCS["otel"], "jq": JSON_DOCS["jq"]}


_PLAIN = st.text(st.characters(blacklist_characters='"\\', blacklist_categories=("Cs", "Cn")), max_size=40)


@settings(max_examples=200, deadline=None)
@given(text=_PLAIN, depth=st.integers(1, 3), ascii_only=st.booleans(), as_list=st.booleans())
def test_a_text_written_as_json_analyzes_as_the_text(text: str, depth: int, ascii_only: bool, as_list: bool):
    """A text JSON-encoded (once, or as JSON inside a JSON string, ASCII-escaped or not) holds
    the very words of the text: what a tool writes as JSON is found by what it says."""
    import json

    from sinks.text.base import analyze_text

    encoded = json.dumps([text] if as_list else text, ensure_ascii=ascii_only)
    for _ in range(depth - 1):
        encoded = json.dumps({"text": encoded}, ensure_ascii=ascii_only)
    assert [t for t in analyze_text(encoded) if t != "text"] == [t for t in analyze_text(text) if t != "text"]


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(st.characters(whitelist_categories=("L", "Nd")), min_size=1, max_size=8),
                      min_size=1, max_size=40), data=st.data())
def test_a_json_output_cut_inside_a_string_holds_its_words_up_to_the_cut(words: list[str], data: st.DataObject):
    """Found with a tool's JSON error in Russian (Python's json.dumps escapes every non-ASCII
    character, six bytes a letter): the redaction stage cuts a long output inside its message
    string (`{"detail": "\u0451\u043c... … [544 bytes]`), the literal had no closing quote, and
    none of its words, `ёмкость` among them, was indexed. A cut literal is read up to its last
    whole character."""
    import json

    from sinks.text.base import analyze_text
    from streams.redaction.text import clip

    text = " ".join(words)
    encoded = json.dumps({"message": text})
    cut = clip(encoded, data.draw(st.integers(40, max(40, len(encoded) + 1))))
    head, _, note = cut.partition(" … [")
    kept = max((k for k in range(len(text) + 1) if head.startswith(json.dumps({"message": text[:k]})[:-2])),
               default=0)
    expected = ["message", *analyze_text(text[:kept])] if note else analyze_text(encoded)
    assert analyze_text(cut)[:len(expected)] == expected


_SGR = st.builds(lambda codes: "\x1b[" + ";".join(map(str, codes)) + "m", st.lists(st.integers(0, 107), max_size=3))


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(st.characters(whitelist_categories=("L", "Nd")), min_size=1, max_size=8), max_size=8),
       colours=st.lists(_SGR, min_size=9, max_size=9))
def test_colour_codes_leave_the_words_as_they_are(words: list[str], colours: list[str]):
    """Coloured output (an SGR sequence before, after or between any words) analyzes as the
    plain text: ``ESC[31mFAILED`` is the word ``failed``, not ``31mfailed``."""
    from sinks.text.base import analyze_text

    plain = " ".join(words)
    # Each word wrapped as a terminal writes it: a colour before, a reset (or another colour) after.
    coloured = " ".join(f"{before}{word}{after}" for before, word, after in zip(colours, words, colours[1:], strict=False))
    assert analyze_text(coloured) == analyze_text(plain)
    assert _TANTIVY.analyze(coloured) == analyze_text(plain)


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.sampled_from('"\\nu0041tbd8cf{[,: x\u00e9'), max_size=60)
       | st.text(st.characters(blacklist_categories=("Cs", "Cn")), max_size=60))
def test_reading_json_strings_never_fails_and_keeps_utf8(text: str):
    from sinks.text.base import analyze_text, json_unescaped

    read = json_unescaped(text)
    read.encode("utf-8")  # an escaped lone surrogate ("\\ud800") never reaches a tokenizer
    assert _TANTIVY.analyze(text) == analyze_text(text)
    if "\\" not in text:
        assert read is text


_TANTIVY = TantivyEngine()


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs", "Cn")), max_size=60)
       | st.text(st.sampled_from("aा्ंँ़ািু ाׁ٘ Ⓐ𑀸数ค้ _-ёЁςΣάΐİıßẞـּً֑"), max_size=30))
def test_tantivy_and_the_python_analyzer_read_any_text_alike(text: str):
    """Found on a Hindi session: the planner's analyzer (tail scans, whoosh) split डेटाबेस at
    every vowel sign (Python's \\w has no combining marks), while the tantivy index held it
    whole; the same query matched other words in the tail than in the index. Any assigned
    character: an unassigned one inside the CJK blocks is a term to Python, nothing to tantivy."""
    from sinks.text.base import analyze_text

    assert _TANTIVY.analyze(text) == analyze_text(text)


def test_every_code_point_is_a_word_character_exactly_when_tantivy_says_so():
    import re

    import tantivy

    from sinks.text.base import SPACELESS_RANGES, WORD_PATTERN

    simple = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).build()
    points = [code for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF]
    rust: set[int] = set()
    for start in range(0, len(points), 20000):  # one character per token, spaced
        for token in simple.analyze(" ".join(map(chr, points[start:start + 20000]))):
            rust.update(map(ord, token))
    spaceless = {code for low, high in SPACELESS_RANGES for code in range(low, high + 1)}
    word = re.compile(WORD_PATTERN)
    differ = [hex(code) for code in points
              if code not in spaceless and (code in rust) != bool(word.fullmatch(chr(code)))]
    assert differ == [], differ[:20]


def test_engines_and_the_planner_analyze_alike():
    from planner.local import analyze as planner_analyze
    from sinks.text.base import analyze_text

    tantivy_engine, whoosh_engine = TantivyEngine(), WhooshEngine()
    samples = [*CJK_DOCS.values(), "Привет мир", "café crème", "x² ½ ①", "🙂 emoji 𠀀𠀁 々ー",
               "a" * 45 + "数" + "b" * 39, "ＡＢＣ ｶﾀｶﾅ", "tab\tand\nnewline_under", "cafe\u0301 nai\u0308ve ﬁle",
               "ภาษาไทยคำ", "İstanbul ΣΊΣΥΦΟΣ σίσυφος ẞ", "नमस्ते डेटाबेस", *(text for text, _ in SPELLINGS.values()), *JSON_DOCS.values()]
    for text in samples:
        expected = analyze_text(text)
        assert tantivy_engine.analyze(text) == expected, text
        assert whoosh_engine.analyze(text) == expected, text
        assert planner_analyze(text) == expected, text


def test_every_letter_of_the_southeast_asian_blocks_splits_as_tantivy_splits_it():
    # Their own-token ranges are written down from tantivy's tokenizer (Rust's notion of a
    # letter, not Python's): a code point of the blocks that one engine keeps and the other
    # drops would index different terms in the text index and the planner's tail scan.
    from sinks.text.base import SOUTHEAST_ASIAN_RANGES, analyze_text

    tantivy_engine = TantivyEngine()
    for low, high in ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF)):
        for code in range(low, high + 1):
            text = f"a{chr(code)}b {chr(code)}"
            assert tantivy_engine.analyze(text) == analyze_text(text), hex(code)
    assert all(low <= high for low, high in SOUTHEAST_ASIAN_RANGES)


def test_an_index_of_the_old_analyzer_is_refused(engine: TextEngine, index_dir: Path):
    from sinks.text.base import ANALYZER_MARKER

    engine.add(index_dir, [chunk("c1", "hello world")])
    (index_dir / ANALYZER_MARKER).unlink()  # as an index written before the marker existed
    fresh = ENGINES[engine.name]()
    with pytest.raises(EngineError, match="usl rebuild text"):
        fresh.search(index_dir, "hello", limit=5)
    with pytest.raises(EngineError, match="analyzer words/1"):
        fresh.add(index_dir, [chunk("c2", "more")])


def test_long_tokens_are_dropped_alike(engine: TextEngine, index_dir: Path):
    blob = "a" * 70
    engine.add(index_dir, [chunk("c1", f"token {blob} here")])
    assert engine.search(index_dir, blob, limit=5) == []
    assert ids(engine.search(index_dir, "token here", limit=5)) == ["c1"]


def test_a_commit_hash_and_a_sha256_digest_are_found(engine: TextEngine, index_dir: Path):
    """Found by a new user: a query of a 40-hex commit hash was refused in text mode (analyzer 4
    dropped tokens of 40 bytes or more, tantivy's default), so no commit could be looked up."""
    commit = "8d32506afcb476de8d6e7916ae6315168d022507"
    digest = "sha256:" + "4f" * 32
    engine.add(index_dir, [chunk("c1", f"HEAD is now at {commit} fix the build"),
                           chunk("c2", f"pulled image {digest}"), chunk("c3", "nothing here")])
    assert ids(engine.search(index_dir, commit, limit=5)) == ["c1"]
    assert ids(engine.search(index_dir, digest, limit=5)) == ["c2"]


def _file_hashes(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in directory.iterdir() if p.is_file() and "lock" not in p.name.lower()
    }


def test_generations_clone_keeps_old_generation_intact(engine: TextEngine, tmp_path: Path):
    store = GenerationStore(tmp_path / "indexes", "default", "text")

    def commit(docs: list[dict]) -> Manifest:
        staging = store.begin()
        current = store.current_id()
        if current is None:
            engine.create(staging)
        else:
            clone_into(store.generation_dir(current), staging, copy_names=engine.copy_names)
        engine.add(staging, docs)
        assert not [p for p in staging.iterdir() if "lock" in p.name.lower()]
        return store.commit(staging, Manifest(
            kind="text", log_id="default", line="", generation_id=0, built_through_seq=len(docs),
            schema_version="text-1", asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash="p",
            chunk_count=engine.count(staging), extra={"engine": engine.name},
        ))

    first = commit([chunk(f"c{i}", f"release notes version {i} shipped") for i in range(20)])
    first_dir = store.generation_dir(first.generation_id)
    pin = store.pin(first.generation_id, ttl_seconds=60, holder="long-query")
    before_hits = engine.search(first_dir, "release version", limit=10)
    before_files = _file_hashes(first_dir)

    # newer generations: upserts of old ids, new ids, and enough batches to trigger merges
    commit([chunk("c3", "rewritten chunk about something else"), chunk("n1", "release candidate")])
    for batch in range(10):
        commit([chunk(f"m{batch}-{i}", f"release batch {batch} item {i}") for i in range(10)])
    assert store.gc(keep_last=1) == list(range(2, 12))
    assert first_dir.exists()  # pinned
    assert _file_hashes(first_dir) == before_files
    store.verify(first)
    assert engine.search(first_dir, "release version", limit=10) == before_hits
    assert engine.count(first_dir) == 20

    latest = store.current()
    latest_dir = store.generation_dir(latest.generation_id)
    assert engine.count(latest_dir) == 20 + 1 + 100 == latest.chunk_count
    assert "c3" not in ids(engine.search(latest_dir, "release version", limit=100))
    pin.release()
    assert store.gc(keep_last=1) == [1]
    store.verify(latest)  # hard links kept every file the latest generation needs
    fresh = ENGINES[engine.name]()  # a new process would open it cold
    assert fresh.count(latest_dir) == 121
    assert ids(fresh.search(latest_dir, "rewritten", limit=5)) == ["c3"]


def test_to_text_doc_reads_search_chunk_v1():
    doc = to_text_doc(chunk("c1", "hi", session="s9", max_seq=7, min_seq=3, event_time="2026-01-01T00:00:00Z"))
    assert (doc.chunk_id, doc.session_id, doc.min_seq, doc.max_seq) == ("c1", "s9", 3, 7)
    assert doc.event_time == 1767225600.0
    assert doc.roles == ("user", "assistant") and doc.tool_names == ("bash",) and doc.types == ("message",)
    with pytest.raises(EngineError):
        to_text_doc({"chunkId": "x"})


def test_parse_query_pieces():
    def analyze(text: str) -> list[str]:
        return text.lower().split()

    clauses = parse_query('Foo "Bar Baz" foo "qux', analyze)
    assert clauses.terms == ("foo", "qux") and clauses.phrases == (("bar", "baz"),)
    with pytest.raises(EmptyQueryError):
        parse_query("  ", analyze)


def test_collect_top_completes_tie_groups_at_the_boundary():
    # engine order breaks ties by internal doc order, not chunkId
    pool = [(2.0, "z")] + [(1.0, f"d{i:03d}") for i in range(100, 0, -1)]
    calls = []

    def fetch(n: int) -> list[tuple[float, str]]:
        calls.append(n)
        return pool[:n]

    hits = collect_top(fetch, 3)
    assert [(h.chunk_id, h.rank) for h in hits] == [("z", 1), ("d001", 2), ("d002", 3)]
    assert calls[-1] > 100


_KEYED_WORDS = ("deploy", "failed", "refunds", "orders", "table", "cache", "kafka", "offset")


@pytest.fixture(scope="module", params=sorted(ENGINES))
def keyed_index(request, tmp_path_factory) -> tuple[TextEngine, Path, list[str], dict[str, tuple[str, int]]]:
    """An index of 60 chunks over few words (many score ties, some identical texts)."""
    engine = ENGINES[request.param]()
    directory = tmp_path_factory.mktemp(f"keyed-{request.param}") / "index"
    engine.create(directory)
    rng = random.Random(21)
    texts = [" ".join(rng.choices(_KEYED_WORDS, k=rng.randint(1, 5))) for _ in range(40)]
    docs = [chunk(f"k{number:03d}", rng.choice(texts), session=f"s{number % 4}", max_seq=number + 1)
            for number in range(60)]
    # Upserts: a later version of a chunk replaces the earlier one, keys and all.
    docs += [chunk(f"k{number:03d}", "deploy kafka 数据库", max_seq=number + 1) for number in range(0, 60, 7)]
    for start in range(0, len(docs), 20):  # several segments
        engine.add(directory, docs[start:start + 20])
    rows = {doc["chunkId"]: (doc["sessionId"], doc["maxSeq"]) for doc in docs}  # the last version
    return engine, directory, sorted(rows), rows


@settings(max_examples=40, deadline=None)
@given(known=st.sets(st.integers(0, 59)), query=st.sampled_from(["deploy", "kafka offset", '"deploy failed"',
                                                               "table 数据库", "cache orders refunds"]),
       limit=st.integers(1, 30), max_seq=st.one_of(st.none(), st.integers(1, 60)))
def test_the_key_map_never_changes_the_hits(keyed_index, known: set[int], query: str, limit: int,
                                            max_seq: int | None):
    """Hits named through the chunk-key column (any part of the ids known, the rest read from
    stored documents) are the hits named from stored documents: ids, scores, ranks, digests."""
    from sinks.text.base import chunk_key

    engine, directory, chunk_ids, _ = keyed_index
    by_key = {chunk_key(chunk_ids[number]): chunk_ids[number] for number in known}
    plain = engine.search(directory, query, limit=limit, max_seq=max_seq)
    keyed = engine.search(directory, query, limit=limit, max_seq=max_seq, chunk_ids_by_key=by_key)
    assert keyed == plain
    assert all(hit.digest is not None for hit in keyed)


@settings(max_examples=60, deadline=None)
@given(excluded=st.sets(st.sampled_from(["s0", "s1", "s2", "s3"]), max_size=3),
       query=st.sampled_from(["deploy", "kafka offset", '"deploy failed"', "table 数据库", "cache orders refunds"]),
       limit=st.integers(1, 30), max_seq=st.one_of(st.none(), st.integers(1, 60)),
       share=st.floats(0.5, 1.0))
def test_a_hit_check_never_changes_the_hits(keyed_index, excluded: set[str], query: str, limit: int,
                                            max_seq: int | None, share: float):
    """Filters judged on the engine's own top hits (HitCheck) give the hits of the filters
    applied inside the index, whatever the share claimed: ids, scores, ranks, digests."""
    engine, directory, _, rows = keyed_index
    calls = []

    def keeps(chunk_id: str) -> bool:
        calls.append(chunk_id)
        session, seq = rows[chunk_id]
        return session not in excluded and (max_seq is None or seq <= max_seq)

    inside = engine.search(directory, query, limit=limit, max_seq=max_seq,
                           exclude_sessions=frozenset(excluded))
    checked = engine.search(directory, query, limit=limit, max_seq=max_seq,
                            exclude_sessions=frozenset(excluded), checked=HitCheck(keeps, share))
    assert checked == inside
    if engine.name == "tantivy" and (excluded or max_seq is not None):
        assert calls  # the check was what judged the hits (or found too few and fell back)


@settings(max_examples=60, deadline=None)
@given(known=st.sets(st.integers(0, 59)), excluded=st.sets(st.sampled_from(["s0", "s1", "s2", "s3"]), max_size=2),
       query=st.sampled_from(["deploy", "kafka offset", '"deploy failed"', "cache orders refunds"]),
       limit=st.integers(1, 40), share=st.one_of(st.none(), st.floats(0.5, 1.0)))
def test_a_short_window_is_the_head_of_a_long_one(keyed_index, known: set[int], excluded: set[str],
                                                  query: str, limit: int, share: float | None):
    """The top ``limit`` is the first ``limit`` of the top 200, ties at the boundary included,
    whether the hits are named from the key column or stored documents and whether a HitCheck
    or the index applies the filters: an engine that stops naming hits at the ``limit``-th
    score must still have every hit tied with it."""
    from sinks.text.base import chunk_key

    engine, directory, chunk_ids, rows = keyed_index
    by_key = {chunk_key(chunk_ids[i]): chunk_ids[i] for i in known}

    def keeps(chunk_id: str) -> bool:
        return rows[chunk_id][0] not in excluded

    checked = HitCheck(keeps, share) if share is not None else None

    def top(n: int) -> list[tuple[str, float, bytes | None]]:
        hits = engine.search(directory, query, limit=n, exclude_sessions=frozenset(excluded),
                             chunk_ids_by_key=by_key, checked=checked)
        assert [hit.rank for hit in hits] == list(range(1, len(hits) + 1))
        return [(hit.chunk_id, hit.score, hit.digest) for hit in hits]

    assert top(limit) == top(200)[:limit]


def test_tantivy_judges_only_the_hits_that_can_make_the_top(tmp_path: Path):
    """Hits scoring below the ``limit``-th kept one are never judged nor named: a window asked
    wide for ties (past twice the limit) cost as much again to name as the hits themselves."""
    engine = TantivyEngine()
    engine.create(tmp_path / "index")
    # Distinct scores: chunk i holds the word i times.
    engine.add(tmp_path / "index", [chunk(f"c{i:03d}", "needle " * i + "hay " * (200 - i), session=f"s{i % 10}")
                                    for i in range(1, 201)])
    judged: list[str] = []

    def keeps(chunk_id: str) -> bool:
        judged.append(chunk_id)
        return not chunk_id.endswith("0")  # session s0 left out

    hits = engine.search(tmp_path / "index", "needle", limit=10, exclude_sessions=frozenset({"s0"}),
                         checked=HitCheck(keeps, 0.9))
    expected = [f"c{i:03d}" for i in range(200, 0, -1) if i % 10][:10]
    assert ids(hits) == expected
    assert len(judged) == 12  # the 10 kept, 1 left out among them, and the first scoring below


def test_a_hit_check_that_keeps_too_few_falls_back_to_the_index(tmp_path: Path):
    """A check that keeps far fewer hits than its share claims: the filters run inside the index
    and the hits are complete."""
    engine = TantivyEngine()
    engine.create(tmp_path / "index")
    engine.add(tmp_path / "index", [chunk(f"{session}{i:03d}", "needle " * (3 if session == "a" else 1),
                                          session=session.upper(), max_seq=i)
                                    for session, count in (("a", 300), ("b", 40)) for i in range(1, count + 1)])
    seen = []

    def keeps(chunk_id: str) -> bool:
        seen.append(chunk_id)
        return chunk_id.startswith("b")

    hits = engine.search(tmp_path / "index", "needle", limit=30, exclude_sessions=frozenset({"A"}),
                         checked=HitCheck(keeps, 0.99))
    assert ids(hits) == [f"b{i:03d}" for i in range(1, 31)]
    assert seen and all(chunk_id.startswith("a") for chunk_id in seen)  # the index's top: all left out


def test_tantivy_names_hits_from_the_key_column(tmp_path: Path):
    """The map is what names a hit (a wrong map would show): the stored id is read only for a
    key the map lacks."""
    from sinks.text.base import chunk_key, text_digest

    engine = TantivyEngine()
    engine.create(tmp_path / "index")
    engine.add(tmp_path / "index", [chunk("a", "deploy failed"), chunk("b", "deploy worked")])
    hits = engine.search(tmp_path / "index", "failed", limit=5, chunk_ids_by_key={chunk_key("a"): "renamed"})
    assert [(hit.chunk_id, hit.digest) for hit in hits] == [("renamed", text_digest("deploy failed"))]
    hits = engine.search(tmp_path / "index", "worked", limit=5, chunk_ids_by_key={chunk_key("a"): "renamed"})
    assert ids(hits) == ["b"]


def test_a_tantivy_index_of_schema_2_is_refused(tmp_path: Path):
    """An index written before the chunk-key fast fields is refused with its remedy, for
    reading and for writing alike (whoosh keeps its schema)."""
    import tantivy

    from sinks.text import tantivy_engine
    from sinks.text.base import write_analyzer_marker

    directory = tmp_path / "old"
    directory.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("chunkId", stored=True, tokenizer_name="raw")
    builder.add_text_field("text", stored=True, tokenizer_name="default")
    builder.add_integer_field("maxSeq", indexed=True, fast=True)
    index = tantivy.Index(builder.build(), path=str(directory))
    writer = index.writer(15_000_000, 1)
    writer.add_document(tantivy.Document(chunkId="c1", text="hello world", maxSeq=1))
    writer.commit()
    writer.wait_merging_threads()
    del writer, index
    write_analyzer_marker(directory)
    engine = TantivyEngine()
    with pytest.raises(EngineError, match=r"schema 2.*usl rebuild text"):
        engine.search(directory, "hello", limit=5)
    with pytest.raises(EngineError, match="usl rebuild text"):
        engine.add(directory, [chunk("c2", "more")])
    assert TantivyEngine.schema_version == tantivy_engine.SCHEMA_VERSION == "3"
    assert WhooshEngine.schema_version == "2"


def test_tantivy_reads_digests_from_its_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """fetch_digests gives text_digest of each stored text (CJK included), nothing for an id
    the index lacks, and the same when every asked key collides (stored documents read)."""
    from sinks.text import tantivy_engine
    from sinks.text.base import text_digest

    texts = {"a": "deploy failed", "b": "deploy failed", "zh": CJK_DOCS["zh"], "empty": ""}
    engine = TantivyEngine()
    engine.create(tmp_path / "index")
    engine.add(tmp_path / "index", [chunk(chunk_id, text) for chunk_id, text in texts.items()])
    expected = {chunk_id: text_digest(text) for chunk_id, text in texts.items()}
    assert engine.fetch_digests(tmp_path / "index", [*texts, "absent"]) == expected
    monkeypatch.setattr(tantivy_engine, "chunk_key", lambda chunk_id: 7)
    assert engine.fetch_digests(tmp_path / "index", [*texts, "absent"]) == expected


def _engine_without_pairs(monkeypatch: pytest.MonkeyPatch) -> TantivyEngine:
    """A tantivy engine that creates indexes as the schema before the "pairs" field did."""
    import tantivy

    from sinks.text import tantivy_engine

    def older() -> tantivy.Schema:
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("chunkId", stored=True, tokenizer_name="raw")
        builder.add_text_field("sessionId", tokenizer_name="raw")
        builder.add_text_field("logId", tokenizer_name="raw")
        builder.add_text_field("text", stored=True, tokenizer_name=tantivy_engine.WORDS_TOKENIZER)
        builder.add_text_field("source", stored=True, tokenizer_name="usl_unindexed", index_option="basic")
        builder.add_integer_field("minSeq", indexed=True, fast=True)
        builder.add_integer_field("maxSeq", indexed=True, fast=True)
        builder.add_float_field("eventTime", stored=True, indexed=True, fast=True)
        for name in ("roles", "toolNames", "types"):
            builder.add_text_field(name, tokenizer_name="raw")
        for name in ("chunkKey", "digestHigh", "digestLow"):
            builder.add_unsigned_field(name, fast=True)
        return builder.build()

    with monkeypatch.context() as patch:
        patch.setattr(tantivy_engine, "_schema", older)
        return TantivyEngine()


_PAIR_WORDS = ["red", "green", "blue", "red", "deploy", "x" * 70, "漢字", "Ünïcode", "42"]


@settings(max_examples=25, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(_PAIR_WORDS), min_size=1, max_size=12), min_size=1, max_size=30),
       phrases=st.lists(st.lists(st.sampled_from(_PAIR_WORDS), min_size=2, max_size=4), min_size=1, max_size=4))
def test_word_pairs_never_change_what_a_phrase_finds(tmp_path_factory, texts: list[list[str]],
                                                     phrases: list[list[str]]):
    """The same chunks indexed with and without the "pairs" field give the same hits and the
    same scores for any phrase (long tokens dropped between words, CJK characters, repeated
    words), with and without filters."""
    monkeypatch = pytest.MonkeyPatch()
    try:
        plain = _engine_without_pairs(monkeypatch)
    finally:
        monkeypatch.undo()
    paired = TantivyEngine()
    base = tmp_path_factory.mktemp("pairs")
    docs = [chunk(f"c{i:02d}", " ".join(words), session=f"s{i % 3}", max_seq=i + 1) for i, words in enumerate(texts)]
    for engine, name in ((plain, "plain"), (paired, "paired")):
        engine.create(base / name)
        engine.add(base / name, docs)
    from sinks.text.tantivy_engine import _has_pairs

    assert not _has_pairs(plain._open(base / "plain").schema) and _has_pairs(paired._open(base / "paired").schema)
    for phrase in phrases:
        for query, options in ((f'"{" ".join(phrase)}"', {}), (f'"{" ".join(phrase)}" green', {"max_seq": 10}),
                               (" ".join(phrase) + ' "red red"', {"exclude_sessions": {"s1"}})):
            want = [(hit.chunk_id, hit.score) for hit in paired.search(base / "plain", query, limit=40, **options)]
            got = [(hit.chunk_id, hit.score) for hit in paired.search(base / "paired", query, limit=40, **options)]
            assert got == want, query


def test_an_index_without_word_pairs_is_read_and_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An index written before the "pairs" field keeps working: its phrases are found, and new
    documents go in (without pairs) through both the one-shot and the live writer."""
    from sinks.text.tantivy_engine import LiveIndex, _has_pairs

    older = _engine_without_pairs(monkeypatch)
    directory = tmp_path / "old"
    older.create(directory)
    older.add(directory, [chunk("a", "the deploy failed again")])
    engine = TantivyEngine()
    assert not _has_pairs(engine._open(directory).schema)
    engine.add(directory, [chunk("b", "deploy failed twice")])
    live = LiveIndex(engine, tmp_path / "live", directory)
    live.add([chunk("c", "a deploy failed at noon")])
    staged = tmp_path / "staged"
    staged.mkdir()
    live.stage(staged)
    live.close()
    assert sorted(ids(engine.search(staged, '"deploy failed"', limit=5))) == ["a", "b", "c"]
    assert ids(engine.search(staged, '"failed deploy"', limit=5)) == []


def test_every_code_point_of_the_cjk_blocks_splits_as_tantivy_splits_it():
    """Found on Japanese sessions: the katakana middle dot of ``コード・レビュー`` (and ``゠``, the
    voiced sound marks ``゛゜`` and their combining forms, which half-width ``ﾞﾟ`` fold to) lie
    inside the kana block that was taken whole as one token per character, so the Python
    analyzer (the planner's tail scan, whoosh) made each a term while tantivy drops them as
    punctuation. A tail chunk then had another length than its indexed copy (another BM25
    score) and ``"コードレビュー"`` was a phrase of it in the index but not in the tail."""
    from sinks.text.base import CJK_RANGES, analyze_text

    tantivy_engine = TantivyEngine()
    differ = []
    # The blocks whole (the ranges leave out what tantivy drops), and the ranges themselves.
    for low, high in ((0x3000, 0x30FF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0xFF00, 0xFFEF), *CJK_RANGES):
        for code in range(low, high + 1):
            text = f"a{chr(code)}b {chr(code)} ア{chr(code)}イ"
            if tantivy_engine.analyze(text) != analyze_text(text):
                differ.append(hex(code))
    assert differ == [], differ[:20]


def test_a_kana_phrase_across_a_middle_dot_matches_in_the_tail_as_in_the_index(tmp_path: Path):
    from planner.local import clauses_of, matches

    engine = TantivyEngine()
    index_dir = tmp_path / "index"
    engine.create(index_dir)
    engine.add(index_dir, [chunk("c1", "コード・レビューを依頼しました"), chunk("c2", "データベース・マイグレーション")])
    for query in ('"コードレビュー"', "コード・レビュー", '"データベース マイグレーション"'):
        indexed = {hit.chunk_id for hit in engine.search(index_dir, query, limit=5)}
        tail = {chunk_id for chunk_id, text in (("c1", "コード・レビューを依頼しました"),
                                                ("c2", "データベース・マイグレーション"))
                if matches(clauses_of(query), text)}
        assert indexed == tail, query


# A word as one text writes it and as a reader types it (analyzer 7, sinks.text.base.LETTER_FOLDS).
SPELLINGS = {
    "ru": ("Ещё раз проверь ёлку зависимостей, Алёна", ("елку", "ЕЛКУ", "еще", "Алена", '"еще раз"')),
    "el": ("Σφάλμα: ο ΔΙΑΚΟΜΙΣΤΗΣ δεν απαντά στην ΟΔΟΣ", ("οδος", "οδός", "διακομιστής", "απαντα", '"ο διακομιστης"')),
    "tr": ("İstanbul'daki sunucuya bağlanılamadı, DİYARBAKIR", ("istanbul", "ISTANBUL", "Diyarbakır", "BAĞLANILAMADI")),
    "de": ("Die Größe der Datei; die Straße wurde nicht gefunden", ("GRÖSSE", "grösse", "strasse", "STRASSE")),
    "ar": ("مُحَمَّد كتب: الـعـربـيـة", ("محمد", "العربية")),
    # Alef with hamza or madda typed as alef, alef maksura as yeh, teh marbuta as heh; a Persian
    # keyboard's yeh and kaf (ی, ک) for the Arabic ones.
    "ar2": ("أحمد، إبراهيم في المدرسة على الطاولة", ("احمد", "ابراهيم", "المدرسه", "علي")),
    "fa": ("خطای اتصال به پایگاه داده: کلید یافت نشد", ("خطاي", "كليد", '"پايگاه داده"')),
    "he": ("שָׁלוֹם עוֹלָם", ("שלום", '"שלום עולם"')),
}


def test_spellings_readers_take_for_one_word_find_each_other(engine: TextEngine, index_dir: Path):
    """Found searching real sessions with Russian, Greek, Turkish, German, Arabic and Hebrew
    written into them: `елку` found no `ёлку` (Russian writes ё as е almost always), `οδος` no
    `ΟΔΟΣ` (a capital final sigma was indexed as σ, the typed word holds ς), `istanbul` no
    `İstanbul` (lowercased to i and a combining dot), `Diyarbakır` no `DİYARBAKIR`, `strasse` and `GRÖSSE` no `Straße` and
    `Größe`, `محمد` no `مُحَمَّد`, `שלום` no `שָׁלוֹם` (vowel points nobody types)."""
    engine.add(index_dir, [chunk(name, text) for name, (text, _) in SPELLINGS.items()]
               + [chunk("latin", "el año pasado, château")])
    for name, (text, queries) in SPELLINGS.items():
        for query in (*queries, text):
            hits = ids(engine.search(index_dir, query, limit=5))
            assert hits[:1] == [name], (query, hits)
    # Latin accents stay apart: año is not ano, and Vietnamese is mostly accents.
    assert ids(engine.search(index_dir, "ano", limit=5)) == []
    assert "Ещё" in engine.fetch_texts(index_dir, ["ru"])["ru"]  # type: ignore[attr-defined]


def test_folded_letters_match_in_the_tail_as_in_the_index(tmp_path: Path):
    from planner.local import clauses_of, matches

    engine = TantivyEngine()
    index_dir = tmp_path / "index"
    engine.create(index_dir)
    engine.add(index_dir, [chunk(name, text) for name, (text, _) in SPELLINGS.items()])
    for query in itertools.chain.from_iterable(queries for _, queries in SPELLINGS.values()):
        indexed = {hit.chunk_id for hit in engine.search(index_dir, query, limit=10)}
        tail = {name for name, (text, _) in SPELLINGS.items() if matches(clauses_of(query), text)}
        assert indexed == tail, query
