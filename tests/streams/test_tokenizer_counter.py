"""The chunker's fast exact counts: substring counts from one encoding, and vectorised cut points,
against the plain tokenizer on generated and real text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.chunking import default_tokenizer
from streams.chunking.split import _cut_points_in_order, _cut_points_scan
from streams.chunking.tokenizer import HFTokenizer, substring_counter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers"

# Spaces and the marker character itself decide where pieces start; CJK, emoji and accents take
# the byte-fallback path; newlines and tabs are not spaces to the tokenizer; special tokens typed
# in a message (<s>) are split out before normalization.
_ALPHABET = st.sampled_from([*"ab z  \u2581\n\t.=_/-1:", "日本", "語", "🙂", "é", "refund", " the", "  ",
                             "<s>", " </s> ", "<unk>", "<0x41>"])
_TEXT = st.lists(_ALPHABET, min_size=1, max_size=120).map("".join)


def test_the_default_tokenizers_identity_is_known_without_loading_it() -> None:
    # What manifests and watermarks record (sinks.service.pipeline_versions): it must name the
    # tokenizer the chunker loads, or every index would look built by another chunker.
    from streams.chunking.tokenizer import default_tokenizer_identity

    assert default_tokenizer_identity() == default_tokenizer().identity


def test_the_default_tokenizer_is_piece_local() -> None:
    # If a new wordllama tokenizer stopped being piece-local the counter would silently fall back
    # to encoding every substring; this says so instead.
    assert default_tokenizer()._unprefixed is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT, data=st.data())
def test_substring_counts_equal_encoding_the_substring(text: str, data: st.DataObject) -> None:
    tokenizer = default_tokenizer()
    count = substring_counter(tokenizer, text)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    assert count(start, end) == tokenizer.count(text[start:end])


def test_substring_counts_on_real_transcripts() -> None:
    tokenizer = default_tokenizer()
    rng = np.random.default_rng(7)
    files = sorted(path for path in FIXTURES.rglob("*") if path.is_file())
    assert files
    checked = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")[:40_000]
        if len(text) < 2:
            continue
        count = substring_counter(tokenizer, text)
        for _ in range(40):
            start = int(rng.integers(0, len(text)))
            end = int(rng.integers(start, min(len(text), start + 4000) + 1))
            assert count(start, end) == tokenizer.count(text[start:end]), (path.name, start, end)
            checked += 1
    assert checked >= 100


@settings(max_examples=200, deadline=None)
@given(text=_TEXT)
def test_vectorised_cut_points_equal_the_scan(text: str) -> None:
    offsets = np.asarray(default_tokenizer().encode_offsets(text), dtype=np.int64).reshape(-1, 2)
    assert _cut_points_in_order(offsets, len(text)) == _cut_points_scan(offsets, len(text))


def test_a_tokenizer_that_is_not_piece_local_counts_each_substring(tmp_path: Path) -> None:
    # A byte-level BPE with a pre-tokenizer: the counter must not assume piece locality.
    config = tmp_path / "tokenizer.json"
    from tokenizers import Tokenizer, models, pre_tokenizers

    raw = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2, " ": 3}, merges=[("a", "b")]))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    config.write_text(raw.to_str())
    tokenizer = HFTokenizer(config, name="toy")
    assert tokenizer._unprefixed is None
    count = substring_counter(tokenizer, "ab ab a b")
    assert count(0, 5) == tokenizer.count("ab ab")


@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.sampled_from([*"ab z  \u2581\n\t.=_/-1:\x00\ufffd", "日本", "語", "🙂", "\U0001F600", "é", "refund",
                                      " the", "  ", "<s>", "</s>", "<unk>", "<0x41>"]), max_size=80).map("".join))
def test_offsets_from_ids_equal_the_librarys(text: str) -> None:
    tokenizer = default_tokenizer()
    encoding = tokenizer._tokenizer.encode(text, add_special_tokens=False)
    want = np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2)
    assert tokenizer.encode_offsets(text).tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(text=_TEXT)
def test_a_text_kept_by_a_batch_count_splits_as_its_own_encoding_would(text: str) -> None:
    # count_many keeps the encodings of long texts for their split, and they come from the fast
    # batch encoding, which leaves every offset at zero: a text whose offsets cannot come from
    # its ids (a special token typed in it) must be encoded again, or its parts would be cut at 0.
    tokenizer = default_tokenizer()
    encoding = tokenizer._tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.count_many([text, "a"], keep_over=0)[0] == len(encoding.ids)
    assert tokenizer._kept[id(text)][0] is text
    assert tokenizer.encode_offsets(text).tolist() == np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2).tolist()


def test_offsets_from_ids_on_real_transcripts() -> None:
    tokenizer = default_tokenizer()
    assert tokenizer._spans is not None
    files = sorted(path for path in FIXTURES.rglob("*") if path.is_file())
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")[:60_000]
        encoding = tokenizer._tokenizer.encode(text, add_special_tokens=False)
        want = np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        assert tokenizer.encode_offsets(text).tolist() == want.tolist(), path.name
