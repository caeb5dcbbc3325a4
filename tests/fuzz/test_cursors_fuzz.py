"""Cursor tokens from hostile callers: random text, bit flips and truncations of real
cursors, cursors signed with another key, expired ones.

Only :class:`~planner.exceptions.CursorError` (or its 410 subclass ``CursorExpired``) may come
out of :func:`~planner.cursors.decode_cursor`, and no token but the exact one issued is ever
accepted: a forged or altered cursor must never reach the engine.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from planner.cursors import (
    check_binding,
    cursor_payload,
    decode_cursor,
    encode_cursor,
    last_sort_key,
)
from planner.exceptions import CursorError, CursorExpired, CursorMismatch
from planner.rrf import SortKey
from tests.fuzz.profile import fuzz

KEY = b"fuzz-key-0123456789abcdef"
OTHER_KEY = b"another-deployment-key-00"
NOW = 1_767_225_600.0
TTL = 3600.0


def _issued(generations: dict[str, int], as_of_seq: int, chunk_id: str) -> str:
    payload = cursor_payload(
        log_id="default", as_of_seq=as_of_seq, generations=generations, query_hash="q" * 32,
        policy="p" * 32, last_key=SortKey(-Fraction(1, 61), 1, -NOW, chunk_id), page_size=10,
    )
    return encode_cursor(payload, key=KEY, now=NOW)


ISSUED = st.builds(
    _issued,
    st.dictionaries(st.sampled_from(["text", "vector", "structured"]), st.integers(0, 2**40)),
    st.integers(0, 2**53),
    st.text(min_size=1, max_size=20),
)


def _decode(token: object, *, now: float = NOW) -> dict:
    return decode_cursor(token, key=KEY, now=now, ttl_seconds=TTL)  # type: ignore[arg-type]


def _refused(token: object) -> CursorError:
    # Expiry is checked only after the signature, so an altered token is never "expired".
    with pytest.raises(CursorError) as caught:
        _decode(token)
    assert caught.value.status == 400 and caught.value.message and caught.value.hint
    return caught.value


@fuzz(200)
@given(token=st.one_of(
    st.text(max_size=200),
    st.text(alphabet="c1.-_=ABCDEFabcdef0123456789", max_size=200),
    st.binary(max_size=120).map(lambda raw: "c1." + base64.urlsafe_b64encode(raw).decode()
                                + "." + base64.urlsafe_b64encode(raw[:32]).decode()),
    st.none(), st.integers(), st.binary(max_size=20), st.lists(st.text(max_size=3), max_size=3),
))
@example(token="c1..")
@example(token="c1.\u00e9.\u00e9")
@example(token="c1." + "A" * 5 + "." + "A" * 43)
def test_random_tokens_are_refused(token: object) -> None:
    _refused(token)


@fuzz(200)
@given(token=ISSUED, data=st.data())
def test_any_bit_flip_or_cut_of_a_real_cursor_is_refused(token: str, data: st.DataObject) -> None:
    assert _decode(token)["asOfSeq"] >= 0  # the untouched token is accepted
    how = data.draw(st.sampled_from(["flip", "cut", "append", "reorder", "payload-bit"]))
    if how == "flip":
        raw = bytearray(token.encode())
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
        tampered: object = raw.decode("utf-8", "surrogateescape")
    elif how == "cut":
        tampered = token[: data.draw(st.integers(0, len(token) - 1))]
    elif how == "append":
        tampered = token + data.draw(st.text(min_size=1, max_size=4))
    elif how == "reorder":
        version, payload, mac = token.split(".")
        tampered = ".".join([version, mac, payload])
    else:
        # Change the payload's bytes but keep a well-formed encoding: only the MAC can tell.
        version, payload, mac = token.split(".")
        raw = bytearray(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
        encoded = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
        tampered = f"{version}.{encoded}.{mac}"
    if tampered == token:
        return
    _refused(tampered)


@fuzz(100)
@given(generations=st.dictionaries(st.text(max_size=8), st.integers()),
       as_of_seq=st.integers(0, 2**53), extra=st.dictionaries(st.text(max_size=8), st.text(max_size=8)))
def test_a_cursor_signed_with_another_key_is_refused(
    generations: dict[str, int], as_of_seq: int, extra: dict[str, str]
) -> None:
    payload = {**extra, **cursor_payload(
        log_id="default", as_of_seq=as_of_seq, generations=generations, query_hash="q" * 32,
        policy="p" * 32, last_key=SortKey(-Fraction(1, 2), 1, -NOW, "c"), page_size=10)}
    forged = encode_cursor(payload, key=OTHER_KEY, now=NOW)
    assert "signature" in _refused(forged).message


@fuzz(50)
@given(token=ISSUED, age=st.floats(min_value=TTL + 0.001, max_value=1e12))
def test_expired_cursors_are_refused_with_410(token: str, age: float) -> None:
    with pytest.raises(CursorExpired) as caught:
        _decode(token, now=NOW + age)
    assert caught.value.status == 410


@fuzz(150)
@given(payload=st.dictionaries(
    st.sampled_from(["logId", "asOfSeq", "generations", "queryHash", "policy", "lastKey",
                     "pageSize", "issuedAt", "x"]),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                 | st.text(max_size=10), lambda c: st.lists(c, max_size=4)
                 | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=10)))
def test_signed_but_malformed_payloads_fail_as_cursor_errors(payload: dict) -> None:
    """A payload this deployment signed but that an older or buggy build shaped differently
    still fails as a cursor error (400), never as a KeyError or TypeError (500)."""
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    signed = "c1." + base64.urlsafe_b64encode(body).rstrip(b"=").decode()
    mac = hmac.new(KEY, signed.encode("ascii"), hashlib.sha256).digest()
    token = signed + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    try:
        decoded = _decode(token)
        check_binding(decoded, query_hash="q" * 32, policy="p" * 32, log_id="default")
        last_sort_key(decoded)
    except (CursorError, CursorExpired, CursorMismatch) as exc:
        assert exc.message and exc.status in (400, 409, 410)
