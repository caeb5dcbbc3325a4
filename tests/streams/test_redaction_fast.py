"""The fast path of redaction (gates, character shortcuts, memory of short texts) gives exactly
what applying every rule to every text gives (``redact_text_plain``): on the battery, the
hand-written corpus, the benchmark's workload text and generated text (hypothesis)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.bench_redaction import generate_documents
from streams.redaction import redact_text
from streams.redaction.ported import PREFIX_RULES
from streams.redaction.samples import SEEDED_SECRETS
from streams.redaction.text import redact_text_plain
from tests.fixtures.secrets import battery

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "secrets" / "corpus.jsonl"
SECRETS = sorted({secret for row in battery.formats() for secret in row["secrets"]} | set(SEEDED_SECRETS))
NAMES = sorted({row["name"] for row in battery.formats()})
WORDS = ["the", "token", "key", "password", "secret", "export", "Bearer", "https://", "user:pw@", "db.internal",
         "/home/alice/", "me@example.com", "=", ": ", '"', "'", "\n", "\n\n", " ", "-", "_", ".", "\t", "AKIA",
         "ghp_", "sk-", "eyJ", "xox", "glsa_", "--token", "<password>", "</password>", "4111 1111 1111 1111", "é", "İ"]


def _same(text: str) -> None:
    assert redact_text(text) == redact_text_plain(text), text[:200]


def test_battery_cases_negatives_and_near_misses_match_the_plain_path() -> None:
    for case in battery.cases():
        _same(case.text)
    for text in battery.hard_negatives():
        _same(text)
    for _, text in battery.near_misses():
        _same(text)


def test_corpus_matches_the_plain_path() -> None:
    for line in CORPUS.read_text("utf-8").splitlines():
        if line.strip():
            _same(json.loads(line)["text"])


def test_workload_text_matches_the_plain_path() -> None:
    documents = generate_documents(1.0, 11)
    for document in documents:
        _same(document)
        for line in document.splitlines()[:40]:  # short texts take the remembered path
            _same(line)


def test_remembered_answers_are_fresh_each_time() -> None:
    text = f"export API_TOKEN={SEEDED_SECRETS[0]}"
    first = redact_text(text)
    first[1]["secret-assignment"] = 99  # a caller adding to its hits changes nobody else's
    assert redact_text(text) == redact_text_plain(text) != first
    long_text = f"{text}\n" + "a line of a file read again and again\n" * 20  # the memory of long texts
    first = redact_text(long_text)
    first[1]["secret-assignment"] = 99
    assert redact_text(long_text) == redact_text_plain(long_text) != first


PIECES = st.one_of(st.sampled_from(WORDS), st.sampled_from(SECRETS), st.sampled_from(NAMES),
                   st.text(alphabet=st.characters(min_codepoint=9, max_codepoint=0x2FF, exclude_categories=("Cs",)),
                           max_size=24))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES, max_size=40))
def test_generated_text_matches_the_plain_path(pieces: list[str]) -> None:
    text = "".join(pieces)
    _same(text)
    _same(text * 3)  # past the remembered length, and the same text again


PREFIXES = sorted({prefix for row in PREFIX_RULES for prefix in row[1]})
# Overlapping and glued prefixes, non-ASCII neighbours (another search path), separators and
# the characters a long run is made of.
GLUE = st.text(alphabet="AaTtKCpZXlK3-=_.~ é…İ\n", max_size=6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(PREFIXES), st.sampled_from(SECRETS), GLUE), max_size=24))
def test_prefixes_glued_overlapping_and_beside_non_ascii_match_the_plain_path(pieces: list[str]) -> None:
    text = "".join(pieces)
    _same(text)
    _same("é " + text * 2)


def test_literal_scan_cases_match_the_plain_path() -> None:
    body = "Zq8" * 40
    for text in (
        "ATATATT3" + body, "é ATATATT3" + body, "EAAAA" + body, "é EAAAA" + body,  # a prefix that overlaps itself
        "key=AKCp" + body, "é key=AKCp" + body, "x-AKCp" + body, "x_AKCp" + body, "é x_AKCp" + body,
        "task_ghp_" + body, "mask-glpat-" + body, "GLSA_" + body, "é glsa_" + body,
        f"{SEEDED_SECRETS[0]} then ghp_{body[:36]}",  # a change, then a prefix the next rule must still find
    ):
        _same(text)


def test_json_encoded_battery_cases_match_the_plain_path() -> None:
    """Policy 2.4 reads escaped JSON literals decoded, many at once (streams.redaction.literals):
    the battery's cases and the corpus JSON-encoded once and twice, and side by side in one document."""
    texts = [case.text for case in battery.cases()][::5]
    texts += [json.loads(line)["text"] for line in CORPUS.read_text("utf-8").splitlines() if line.strip()]
    for text in texts:
        _same(json.dumps(text))
        _same(json.dumps({"output": json.dumps(text)}))
    for start in range(0, len(texts), 12):
        _same(json.dumps(texts[start: start + 12], indent=2))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(PIECES, max_size=12).map("".join), min_size=1, max_size=6), st.booleans())
def test_json_encoded_generated_text_matches_the_plain_path(values: list[str], twice: bool) -> None:
    document = json.dumps({f"k{index}": value for index, value in enumerate(values)}, ensure_ascii=twice)
    _same(json.dumps(document) if twice else document)
