"""Signed cursors: round trip, tampering, expiry, binding, key management."""

from __future__ import annotations

import os
import stat
import threading
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cursors import (
    check_binding,
    cursor_payload,
    decode_cursor,
    encode_cursor,
    last_sort_key,
    load_cursor_key,
    query_hash,
)
from planner.exceptions import CursorError, CursorExpired, CursorMismatch
from planner.rrf import SortKey
from streams.exceptions import ConfigError
from streams.settings import Settings

KEY = b"k" * 32
NOW = 1_767_225_600.0
LAST = SortKey(-(Fraction(1, 61) + Fraction(1, 63)), 1, -1767225600.25, "c_00ff")


def payload(**overrides):
    fields = dict(log_id="default", as_of_seq=470, generations={"text": 12, "vector": 9},
                  query_hash=query_hash({"query": "retry budget", "freshness": "indexed"}),
                  policy="f" * 32, last_key=LAST, page_size=10)
    return cursor_payload(**(fields | overrides))


def test_round_trip_binds_everything():
    token = encode_cursor(payload(), key=KEY, now=NOW)
    assert token.startswith("c1.")
    decoded = decode_cursor(token, key=KEY, now=NOW + 5, ttl_seconds=3600)
    assert decoded == payload() | {"issuedAt": NOW}
    assert last_sort_key(decoded) == LAST
    check_binding(decoded, query_hash=payload()["queryHash"], policy="f" * 32, log_id="default")


@settings(max_examples=300)
@given(st.data())
def test_any_changed_character_is_refused(data):
    token = encode_cursor(payload(), key=KEY, now=NOW)
    position = data.draw(st.integers(min_value=0, max_value=len(token) - 1))
    replacement = data.draw(st.characters(codec="utf-8").filter(lambda c: c != token[position]))
    tampered = token[:position] + replacement + token[position + 1:]
    with pytest.raises(CursorError) as caught:
        decode_cursor(tampered, key=KEY, now=NOW, ttl_seconds=3600)
    assert "retry" not in caught.value.message and "c_00ff" not in caught.value.message


@pytest.mark.parametrize("mangle", [
    lambda t: t + "A",
    lambda t: t[:-1],
    lambda t: t.replace(".", "", 1),
    lambda t: "c2" + t[2:],
    lambda t: t + ".x",
    lambda t: "",
    lambda t: "garbage",
])
def test_structural_damage_is_refused(mangle):
    token = encode_cursor(payload(), key=KEY, now=NOW)
    with pytest.raises(CursorError):
        decode_cursor(mangle(token), key=KEY, now=NOW, ttl_seconds=3600)


def test_other_key_is_refused():
    token = encode_cursor(payload(), key=KEY, now=NOW)
    with pytest.raises(CursorError):
        decode_cursor(token, key=b"x" * 32, now=NOW, ttl_seconds=3600)


def test_expiry_is_its_own_error():
    token = encode_cursor(payload(), key=KEY, now=NOW)
    assert decode_cursor(token, key=KEY, now=NOW + 3600, ttl_seconds=3600)
    with pytest.raises(CursorExpired) as caught:
        decode_cursor(token, key=KEY, now=NOW + 3600.5, ttl_seconds=3600)
    assert caught.value.status == 410 and caught.value.code == "cursor_expired"


@pytest.mark.parametrize("change, binding", [
    ({"query_hash": "0" * 32}, "different query"),
    ({"policy": "0" * 32}, "different principal"),
    ({"log_id": "other"}, "another log"),
])
def test_mismatch_names_what_differs_not_the_values(change, binding):
    decoded = decode_cursor(encode_cursor(payload(), key=KEY, now=NOW), key=KEY, now=NOW,
                            ttl_seconds=60)
    expected = {"query_hash": decoded["queryHash"], "policy": decoded["policy"],
                "log_id": decoded["logId"]} | change
    with pytest.raises(CursorMismatch) as caught:
        check_binding(decoded, **expected)
    assert binding in caught.value.message
    assert caught.value.status == 409
    assert decoded["queryHash"] not in caught.value.message


def test_signed_payload_without_bindings_is_a_cursor_error():
    decoded = decode_cursor(encode_cursor({"x": 1}, key=KEY, now=NOW), key=KEY, now=NOW,
                            ttl_seconds=60)
    with pytest.raises(CursorError):
        check_binding(decoded, query_hash="q", policy="p", log_id="default")


def test_query_hash_ignores_paging_and_output_fields_only():
    base = {"query": "retry", "freshness": "latest", "log": "default"}
    same = base | {"cursor": "c1.x.y", "k": 50, "explain": True, "as": "tenant:a/user:b",
                   "filters": None}
    assert query_hash(base) == query_hash(same)
    assert query_hash(base) == query_hash(dict(reversed(base.items())))
    assert query_hash(base) != query_hash(base | {"query": "retries"})
    assert query_hash(base) != query_hash(base | {"freshness": "indexed"})
    assert query_hash(base) != query_hash(base | {"filters": {"role": "user"}})


def test_key_from_settings(tmp_path):
    assert load_cursor_key(Settings(home=tmp_path, cursor_key="s" * 20)) == b"s" * 20
    with pytest.raises(ConfigError):
        load_cursor_key(Settings(home=tmp_path, cursor_key="short"))
    assert not (tmp_path / "cursor.key").exists()


def test_key_file_is_created_once_with_0600(tmp_path):
    home = tmp_path / "home"
    settings_ = Settings(home=home)
    first = load_cursor_key(settings_)
    assert len(first) == 32
    assert stat.S_IMODE((home / "cursor.key").stat().st_mode) == 0o600
    assert load_cursor_key(settings_) == first
    assert [p.name for p in home.iterdir()] == ["cursor.key"]


def test_concurrent_first_starts_agree_on_one_key(tmp_path):
    settings_ = Settings(home=tmp_path)
    keys: list[bytes] = []
    threads = [threading.Thread(target=lambda: keys.append(load_cursor_key(settings_)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(keys)) == 1 and len(keys) == 8


def test_key_file_readable_by_others_or_malformed_is_refused(tmp_path):
    path = tmp_path / "cursor.key"
    path.write_text("ab" * 32)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_cursor_key(Settings(home=tmp_path))
    os.chmod(path, 0o600)
    assert load_cursor_key(Settings(home=tmp_path)) == bytes.fromhex("ab" * 32)
    path.write_text("not hex")
    with pytest.raises(ConfigError):
        load_cursor_key(Settings(home=tmp_path))
