"""Opaque, signed pagination cursors that bind a page to the exact snapshot it came from.

A token is ``c1.<payload>.<mac>``: the payload is canonical JSON in unpadded URL-safe base64,
the MAC is HMAC-SHA256 over ``c1.<payload>`` with the deployment's cursor key. ``c1`` is the
format version, so a later format can be told apart and refused clearly.

The payload (built by :func:`cursor_payload`) binds the pinned generations, ``asOfSeq``, the
log, the query hash, the principal's policy fingerprint, the last row's complete sort key,
the page size and the time it was issued. It is signed, not encrypted: everything in it was
already in the response that carried it, and nothing about other principals' data is in it.
Errors never echo the payload's contents.

The next page reads the cursor's generations at the cursor's ``asOfSeq`` (not the current
ones), so page n+1 continues exactly where page n ended.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.exceptions import CursorError, CursorExpired, CursorMismatch
from planner.rrf import SortKey, decode_sort_key, encode_sort_key
from streams.exceptions import ConfigError
from streams.settings import Settings

__all__ = [
    "CURSOR_VERSION",
    "NON_QUERY_FIELDS",
    "check_binding",
    "cursor_payload",
    "decode_cursor",
    "encode_cursor",
    "last_sort_key",
    "load_cursor_key",
    "query_hash",
]

CURSOR_VERSION = "c1"
KEY_FILE = "cursor.key"
MIN_KEY_BYTES = 16
# Request fields that change neither which hits match nor their order: paging and output
# options, and the principal (bound separately, by its policy fingerprint).
NON_QUERY_FIELDS = frozenset({"cursor", "k", "explain", "json", "as", "principal"})

_RESTART = "Run the query again without a cursor."


def encode_cursor(payload: Mapping[str, Any], *, key: bytes, now: float) -> str:
    """Sign ``payload`` (JSON-serializable) plus ``issuedAt = now`` into an opaque token."""
    body = dict(payload, issuedAt=now)
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")
    signed = f"{CURSOR_VERSION}.{_b64encode(data)}"
    return f"{signed}.{_b64encode(_mac(key, signed))}"


def decode_cursor(token: str, *, key: bytes, now: float, ttl_seconds: float) -> dict[str, Any]:
    """Verify ``token`` and return its payload.

    Raises :class:`CursorError` for anything this deployment did not sign unchanged (wrong
    version, altered byte, other key) and :class:`CursorExpired` once ``ttl_seconds`` passed.
    """
    if not isinstance(token, str):
        raise CursorError("the cursor must be a string", hint=_RESTART)
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != CURSOR_VERSION:
        raise CursorError("the cursor is not one this server issued (unknown format)",
                          hint=_RESTART)
    data, mac = _b64decode(parts[1]), _b64decode(parts[2])
    # Strict decoding succeeded, so both parts are pure ASCII and safe to feed the MAC.
    if data is None or mac is None or not hmac.compare_digest(
        mac, _mac(key, f"{parts[0]}.{parts[1]}")
    ):
        raise CursorError("the cursor's signature does not match; it was altered or issued "
                          "by another deployment", hint=_RESTART)
    try:
        payload = json.loads(data)
    except ValueError:
        payload = None
    issued_at = payload.get("issuedAt") if isinstance(payload, dict) else None
    if not isinstance(issued_at, int | float) or isinstance(issued_at, bool):
        raise CursorError("the cursor is signed but malformed", hint=_RESTART)
    if now - issued_at > ttl_seconds:
        raise CursorExpired(f"the cursor expired (cursors live {ttl_seconds:g} seconds)",
                            hint=_RESTART)
    return payload


def cursor_payload(
    *,
    log_id: str,
    as_of_seq: int,
    generations: Mapping[str, int],
    query_hash: str,
    policy: str,
    last_key: SortKey,
    page_size: int,
) -> dict[str, Any]:
    """The payload a cursor binds, in its JSON form (``issuedAt`` is added on encoding)."""
    return {
        "logId": log_id,
        "asOfSeq": as_of_seq,
        "generations": dict(generations),
        "queryHash": query_hash,
        "policy": policy,
        "lastKey": encode_sort_key(last_key),
        "pageSize": page_size,
    }


def last_sort_key(payload: Mapping[str, Any]) -> SortKey:
    """The sort key of the last row of the page that issued the cursor."""
    return decode_sort_key(payload.get("lastKey"))


def query_hash(request: Mapping[str, Any]) -> str:
    """Hash of the fields that define the query: everything but :data:`NON_QUERY_FIELDS`.

    Fields whose value is ``None`` count as absent, so an explicit null equals omission.
    """
    fields = {name: value for name, value in request.items()
              if name not in NON_QUERY_FIELDS and value is not None}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def check_binding(payload: Mapping[str, Any], *, query_hash: str, policy: str, log_id: str) -> None:
    """Refuse a cursor used with another query, principal or log (:class:`CursorMismatch`)."""
    required = ("logId", "asOfSeq", "generations", "queryHash", "policy", "lastKey")
    if any(name not in payload for name in required):
        raise CursorError("the cursor is signed but lacks fields this version needs",
                          hint=_RESTART)
    for field, actual, what in (
        ("logId", log_id, "another log"),
        ("queryHash", query_hash, "a different query"),
        ("policy", policy, "a different principal or access policy"),
    ):
        if payload[field] != actual:
            raise CursorMismatch(
                f"the cursor was issued for {what}",
                hint="Send the same query, log and principal as the page that returned the "
                     "cursor, or drop the cursor to start over.",
            )


def load_cursor_key(settings: Settings) -> bytes:
    """The HMAC key: ``USL_CURSOR_KEY`` if set, else ``$USL_HOME/cursor.key`` (created once).

    The file holds 32 random bytes as hex and is created with mode 0600; concurrent first
    starts agree on one key because the file is published with an exclusive link.
    """
    if settings.cursor_key:
        key = settings.cursor_key.encode("utf-8")
        if len(key) < MIN_KEY_BYTES:
            raise ConfigError(f"USL_CURSOR_KEY must be at least {MIN_KEY_BYTES} bytes long")
        return key
    path = Path(settings.home) / KEY_FILE
    if not path.exists():
        _create_key_file(path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path} is readable by other users; run: chmod 600 {path}")
    try:
        key = bytes.fromhex(path.read_text("ascii").strip())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not a hex cursor key; delete it to create a new one "
                          "(open cursors become invalid)") from exc
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"{path} holds a key shorter than {MIN_KEY_BYTES} bytes")
    return key


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        # link() fails if the name exists, so a racing process never replaces a key that
        # another process may already be signing with; the loser simply reads the winner's.
        try:
            os.link(temp, path)
        except FileExistsError:
            pass
    finally:
        temp.unlink(missing_ok=True)


def _mac(key: bytes, signed: str) -> bytes:
    return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes | None:
    """Strict decoding: only the canonical encoding of some bytes is accepted.

    The stdlib decoder ignores stray characters and unused trailing bits, so two different
    tokens could carry the same bytes; re-encoding and comparing rules that out.
    """
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return data if _b64encode(data) == text else None
