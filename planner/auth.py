"""API keys of the planner's HTTP API: each key maps to one principal.

The keys file (``USL_API_KEYS_FILE``, default ``$USL_HOME/api-keys.json``, mode 0600) holds,
per key, its name, the principal it stands for, its creation time and the SHA-256 of the key;
never the key itself. A key is ``usl_`` followed by 32 random bytes (urlsafe base64), so a
plain hash is enough: there is nothing to brute-force the way a password would be.

:class:`KeyRing` is what the API asks on every request. It re-reads the file when its
identity, size or mtime changed, so ``usl apikey revoke`` takes effect on the next request of
a running server. Authentication is on when the file exists (even with no key left in it: a
revoked last key must lock the API, not open it) and stays on for the life of the process.

:func:`check_bind` is the rule behind ``usl serve`` and ``usl up``: the API listens beyond
loopback only with API keys, unless ``USL_API_ALLOW_UNAUTHENTICATED`` says otherwise.
:func:`host_allowed` is the matching rule for requests: without API keys the API answers only
to a loopback ``Host`` (or one of ``USL_API_ALLOWED_HOSTS``), so DNS rebinding reads nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner.acl import Principal, parse_principal
from planner.exceptions import AccessDenied, Unauthorized
from streams.exceptions import ConfigError
from streams.fsio import atomic_write
from streams.settings import Settings

__all__ = [
    "KEY_PREFIX",
    "ApiKey",
    "KeyRing",
    "allowed_hosts",
    "authenticate",
    "check_bind",
    "create_key",
    "effective_principal",
    "hash_key",
    "host_allowed",
    "is_loopback",
    "keys_path",
    "presented_key",
    "read_keys",
    "revoke_key",
]

KEY_PREFIX = "usl_"
_FORMAT_VERSION = 1
_HASH_PREFIX_CHARS = 12


@dataclass(frozen=True)
class ApiKey:
    """One entry of the keys file (never the key itself)."""

    name: str
    principal: str
    sha256: str
    created: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "principal": self.principal, "sha256": self.sha256,
                "created": self.created}

    @property
    def hash_prefix(self) -> str:
        return self.sha256[:_HASH_PREFIX_CHARS]


def keys_path(settings: Settings) -> Path:
    """Where this deployment keeps its API keys."""
    if settings.api_keys_file:
        return Path(settings.api_keys_file).expanduser()
    return Path(settings.home) / "api-keys.json"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def read_keys(path: Path) -> list[ApiKey] | None:
    """The entries of the keys file; ``None`` when it does not exist. A file that exists but
    cannot be read or parsed is a :class:`ConfigError`: the API must fail closed, not open."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read the API keys file {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw)
        return [ApiKey(str(e["name"]), str(e["principal"]), str(e["sha256"]), str(e["created"]))
                for e in data["keys"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"the API keys file {path} is malformed ({type(exc).__name__}); "
                          "fix it or recreate it with `usl apikey create`") from None


def _write_keys(path: Path, keys: list[ApiKey]) -> None:
    """Replace the file atomically (readers see the old or the new list, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"version": _FORMAT_VERSION, "keys": [k.to_json() for k in keys]}, indent=2)
    atomic_write(path, body + "\n")


def create_key(path: Path, principal_text: str, name: str | None = None) -> tuple[str, ApiKey]:
    """Add a key for ``principal_text``; return the key (shown once, never stored) and its entry."""
    principal = parse_principal(principal_text)
    keys = read_keys(path) or []
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    digest = hash_key(key)
    name = name or f"{principal.user}-{digest[:8]}"
    if not name.strip() or any(c.isspace() for c in name):
        raise ConfigError(f"key name {name!r} must be non-empty and without spaces")
    if any(existing.name == name for existing in keys):
        raise ConfigError(f"an API key named {name!r} already exists; choose another --name")
    entry = ApiKey(name, str(principal), digest,
                   datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"))
    _write_keys(path, [*keys, entry])
    return key, entry


def revoke_key(path: Path, name: str) -> ApiKey:
    """Remove the key called ``name``; the file stays (even empty) so the API stays locked."""
    keys = read_keys(path) or []
    kept = [k for k in keys if k.name != name]
    if len(kept) == len(keys):
        raise ConfigError(f"no API key named {name!r}; `usl apikey list` shows the names")
    _write_keys(path, kept)
    return next(k for k in keys if k.name == name)


class KeyRing:
    """The keys a running API accepts, re-read whenever the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._keys: list[tuple[bytes, Principal]] = []
        self._enforcing = False
        self.refresh()

    def refresh(self) -> None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            with self._lock:
                self._stamp, self._keys = None, []
            return
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
        with self._lock:
            if stamp == self._stamp:
                return
        entries = read_keys(self.path) or []
        parsed = [(bytes.fromhex(e.sha256), parse_principal(e.principal)) for e in entries]
        with self._lock:
            self._stamp, self._keys, self._enforcing = stamp, parsed, True

    @property
    def enforcing(self) -> bool:
        """Whether requests need a key: once the file has existed, for the life of the process."""
        return self._enforcing

    def principal_for(self, key: str) -> Principal | None:
        """The principal of ``key``, or None. Every stored hash is compared in constant time,
        so the time taken says nothing about which key (or how much of one) matched."""
        presented = hashlib.sha256(key.encode("utf-8")).digest()
        found: Principal | None = None
        with self._lock:
            keys = list(self._keys)
        for digest, principal in keys:
            if hmac.compare_digest(presented, digest) and found is None:
                found = principal
        return found


def presented_key(headers: Any) -> str | None:
    """The key of a request: ``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` (both only
    when they agree: which of two keys a request meant is not for the server to pick, and the
    principal it runs as depends on it)."""
    authorization = headers.get("authorization") or ""
    scheme, _, token = authorization.strip().partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" and token.strip() else None
    api_key = (headers.get("x-api-key") or "").strip() or None
    if bearer is not None and api_key is not None and bearer != api_key:
        raise Unauthorized("the request presents two different API keys",
                           hint="Send one key: Authorization: Bearer KEY or X-API-Key: KEY.")
    return bearer or api_key


def authenticate(ring: KeyRing, headers: Any, principal_header: str | None,
                 default_principal: str) -> Principal:
    """The principal a request runs as. Without enforced keys: the header or the default.
    With them: the key's principal, narrowed by the header if it asks (:func:`effective_principal`).
    A missing, unknown or revoked key is :class:`Unauthorized`; the message never echoes it."""
    ring.refresh()
    if not ring.enforcing:
        return parse_principal(principal_header or default_principal)
    key = presented_key(headers)
    if key is None:
        raise Unauthorized("this API needs an API key",
                           hint="Send Authorization: Bearer KEY (or X-API-Key: KEY); the operator "
                                "creates keys with `usl apikey create`.")
    principal = ring.principal_for(key)
    if principal is None:
        raise Unauthorized("the API key is not valid (unknown or revoked)",
                           hint="Ask the operator for a current key (`usl apikey list`).")
    return effective_principal(principal, principal_header)


def effective_principal(key_principal: Principal, header: str | None) -> Principal:
    """The principal a request runs as when its key stands for ``key_principal``.

    ``X-USL-Principal`` may only narrow: the same tenant and user, with a subset of the key's
    groups and scopes. Anything wider is refused (403), so a key never reaches past its owner.
    """
    if not header:
        return key_principal
    asked = parse_principal(header)
    if (asked.tenant, asked.user) != (key_principal.tenant, key_principal.user) \
            or not asked.groups <= key_principal.groups or not asked.scopes <= key_principal.scopes:
        raise AccessDenied(
            "X-USL-Principal asks for more than this API key's principal",
            hint="With an API key the header may only narrow its principal: the same tenant and "
                 "user, a subset of its groups and scopes. Omit the header to use the key's.")
    return asked


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine: localhost, 127.0.0.0/8 or ::1."""
    bare = host.strip().strip("[]")
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False  # a host name or "" (every interface): assume reachable from outside


def allowed_hosts(setting: str) -> frozenset[str]:
    """The host names of ``USL_API_ALLOWED_HOSTS`` (comma-separated), lower-cased."""
    return frozenset(name.strip().lower().rstrip(".") for name in setting.split(",") if name.strip())


def host_allowed(host_header: str, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a request's ``Host`` header names this machine by a loopback name (localhost,
    127.0.0.0/8, [::1]) or one of ``extra`` (``*`` allows any). A name that rebinds to
    127.0.0.1 is none of these, which is what keeps a keyless API from DNS rebinding."""
    if "*" in extra:
        return True
    host = host_header.strip().lower()
    if host.startswith("["):  # [v6]:port
        name, _, rest = host[1:].partition("]")
        if rest and not rest.startswith(":"):
            return False
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.rstrip(".")
    if not name or not name.isascii():
        return False
    if name == "localhost" or name in extra:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings, host: str) -> None:
    """Refuse to listen beyond loopback without API keys (:class:`ConfigError`, one line). An IPv6
    address is taken with or without brackets (``[::1]``, ``::1``): the server binds it bare and
    the command line's URLs write it in brackets."""
    if is_loopback(host) or settings.api_allow_unauthenticated:
        return
    path = keys_path(settings)
    if read_keys(path):
        return
    raise ConfigError(
        f"refusing to serve the API on {host} without API keys (anyone reaching it could read "
        f"every tenant's sessions): create one with `usl apikey create --principal "
        f"tenant:T/user:U` (keys file {path}), or listen on 127.0.0.1")
