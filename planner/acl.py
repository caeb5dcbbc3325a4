"""Who is asking and what they may read: principals, session ACL checks, policy fingerprints.

A principal is written as ``/``-separated ``name:value`` segments, in any order::

    tenant:acme/user:alice/groups:eng,ops/scopes:toolresults

``tenant`` and ``user`` are required; ``groups`` and ``scopes`` are optional comma lists
(``groups:`` with nothing after it is an empty list). Values may contain any character except
``/``, ``,`` and whitespace. The only scope today is ``toolresults``: it is needed to see full
tool results (the ACL-isolated tool-results index). Unknown segments or scopes are refused so
a typo never silently narrows or widens access.

A session's access list (the latest one seen for the session wins; the caller passes it) is
``{"tenant": "acme", "read": ["*", "user:alice", "group:eng"]}``. Access is evaluated at
query time, so a revocation applies at once, also to open cursors. Every check fails closed:
a missing or malformed ACL grants nothing, and no entry crosses tenants, not even ``*``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.exceptions import QueryError

__all__ = [
    "KNOWN_SCOPES",
    "TOOLRESULTS_SCOPE",
    "Principal",
    "can_read",
    "can_read_toolresults",
    "parse_principal",
    "policy_fingerprint",
]

TOOLRESULTS_SCOPE = "toolresults"
KNOWN_SCOPES = frozenset({TOOLRESULTS_SCOPE})

_VALUE = re.compile(r"[^/,\s]+")
_EXAMPLE = "tenant:acme/user:alice/groups:eng,ops/scopes:toolresults"


@dataclass(frozen=True)
class Principal:
    """The caller of a query: one user of one tenant, with groups and scopes."""

    tenant: str
    user: str
    groups: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()

    def __str__(self) -> str:
        parts = [f"tenant:{self.tenant}", f"user:{self.user}"]
        if self.groups:
            parts.append("groups:" + ",".join(sorted(self.groups)))
        if self.scopes:
            parts.append("scopes:" + ",".join(sorted(self.scopes)))
        return "/".join(parts)


def parse_principal(text: str) -> Principal:
    """Parse ``tenant:T/user:U[/groups:G1,G2][/scopes:S1]``; QueryError says what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise _bad("the principal is empty")
    segments: dict[str, str] = {}
    for segment in text.strip().split("/"):
        name, colon, value = segment.partition(":")
        if not colon:
            raise _bad(f"segment {segment!r} is not name:value")
        if name not in {"tenant", "user", "groups", "scopes"}:
            raise _bad(f"unknown segment {name!r}; expected tenant, user, groups or scopes")
        if name in segments:
            raise _bad(f"segment {name!r} appears twice")
        segments[name] = value
    for name in ("tenant", "user"):
        if name not in segments:
            raise _bad(f"the {name} segment is missing")
        if not _VALUE.fullmatch(segments[name]):
            raise _bad(f"{name} {segments[name]!r} must be non-empty, without '/', ',' or spaces")
    groups = _names(segments.get("groups", ""), "groups")
    scopes = _names(segments.get("scopes", ""), "scopes")
    unknown = scopes - KNOWN_SCOPES
    if unknown:
        raise _bad(f"unknown scope(s) {', '.join(sorted(unknown))}; known: "
                   f"{', '.join(sorted(KNOWN_SCOPES))}")
    return Principal(segments["tenant"], segments["user"], groups, scopes)


def can_read(principal: Principal, acl: Mapping[str, Any] | None) -> bool:
    """Whether ``principal`` may read a session whose latest access list is ``acl``.

    ``*`` admits every principal of the ACL's tenant, ``user:NAME`` one user, ``group:NAME``
    members of a group. A missing ``read`` list admits nobody.
    """
    if not isinstance(acl, Mapping) or acl.get("tenant") != principal.tenant:
        return False
    entries = acl.get("read")
    if not isinstance(entries, list | tuple):
        return False
    for entry in entries:
        if not isinstance(entry, str):
            continue
        if entry == "*" or entry == f"user:{principal.user}":
            return True
        kind, _, name = entry.partition(":")
        if kind == "group" and name in principal.groups:
            return True
    return False


def can_read_toolresults(principal: Principal, acl: Mapping[str, Any] | None) -> bool:
    """Whether ``principal`` may see the full tool results of a session: ACL plus the scope."""
    return TOOLRESULTS_SCOPE in principal.scopes and can_read(principal, acl)


def policy_fingerprint(principal: Principal) -> str:
    """A stable hash of everything that decides what ``principal`` may see; cursors bind it.

    Equal principals give equal fingerprints whatever the order of groups or scopes in the
    text they were parsed from.
    """
    canonical = json.dumps(
        {"v": 1, "tenant": principal.tenant, "user": principal.user,
         "groups": sorted(principal.groups), "scopes": sorted(principal.scopes)},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def _names(value: str, segment: str) -> frozenset[str]:
    if value == "":
        return frozenset()
    names = value.split(",")
    for name in names:
        if not _VALUE.fullmatch(name):
            raise _bad(f"{segment} {value!r} must be a comma list of non-empty names "
                       "without spaces")
    return frozenset(names)


def _bad(reason: str) -> QueryError:
    return QueryError(f"invalid principal: {reason}", hint=f"Write it like {_EXAMPLE}")
