"""Who owns a session, and which access list an admitted event carries (SPEC §10, invariant 10).

Every path that turns L1 events into something readable runs :func:`admit` on each event, in
log order, before anything else sees it: the redaction agent (its tables co-partitioned with
L1), the rebuild replay, the planner's tail scan and the planner's access-list overlay. They
therefore agree on every decision, and a replay from offset 0 makes the same ones.

The rules:

- A session belongs to the tenant of the event that created it (its first admitted event).
  A later event of the session from another tenant -- explicit ``acl.tenant`` -- is rejected
  with :data:`FOREIGN_TENANT`: never applied, dead-lettered by the stream.
- An event that omits ``acl`` inherits the session's access list as of its seq; only the
  first event of a session falls back to :data:`streams.asp.DEFAULT_ACL`. An event that states
  an ``acl`` of the owning tenant replaces it (a revocation applies from that seq on).
- ``eventId`` is idempotent per log: the first seq wins. A later event with the same id from
  the same tenant is a counted duplicate; from another tenant it is rejected with
  :data:`EVENT_ID_COLLISION` (dead-lettered, never silently dropped).

State is plain JSON, so it can live in a faust table:

- per ``{logId}/{sessionId}``: ``{"tenant", "firstSeq", "acls": [[sinceSeq, acl], ...]}``,
  the last :data:`ACL_HISTORY` access-list changes, so a record delivered again (at-least-once)
  resolves to the access list it resolved to the first time;
- per ``{logId}/{eventId}``: ``{"seq", "tenant"}`` (a bare seq, as stored before ownership
  existed, counts as a same-tenant first copy).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from streams.asp import DEFAULT_ACL

__all__ = [
    "ACL_HISTORY",
    "EVENT_ID_COLLISION",
    "FOREIGN_TENANT",
    "Admission",
    "Owners",
    "admit",
    "current_acl",
    "session_of_acl",
]

ACL_HISTORY = 8
"""Access-list changes kept per session (older ones only matter to a replay that far back)."""

FOREIGN_TENANT = "foreign_tenant"
EVENT_ID_COLLISION = "eventid_collision"

Verdict = Literal["accepted", "duplicate", "rejected"]


@dataclass(frozen=True)
class Admission:
    """What :func:`admit` decided about one event, and the state to store if it was accepted.

    ``event`` is the event with its resolved ``acl`` (accepted only). ``session`` and
    ``event_id`` are the new values of the two tables' keys, or None when unchanged.
    ``reason_code`` (a metric label) and ``reason`` (for the dead letter) explain a rejection.
    """

    verdict: Verdict
    event: dict[str, Any] | None = None
    session: dict[str, Any] | None = None
    event_id: dict[str, Any] | None = None
    reason_code: str | None = None
    reason: str | None = None


def admit(event: Mapping[str, Any], seq: int, *, session: Mapping[str, Any] | None,
          first: Any) -> Admission:
    """Decide about the validated ``event`` at ``seq`` given its session's state and the state
    of its eventId (None when unseen). Pure: the caller stores what the admission returns."""
    declared = event.get("acl") if isinstance(event.get("acl"), dict) else None
    owner = str(session["tenant"]) if session is not None else None
    tenant = str(declared["tenant"]) if declared is not None else owner or str(DEFAULT_ACL["tenant"])
    first_seq, first_tenant = _first_copy(first)
    if first_seq is not None and first_seq < seq:
        if first_tenant is None or first_tenant == tenant:
            return Admission("duplicate")
        return Admission(
            "rejected", reason_code=EVENT_ID_COLLISION,
            reason=(f"eventId {event['eventId']!r} was already used in log {event['logId']!r} "
                    f"by another tenant at seq {first_seq}; event ids must be unique per log"),
        )
    if owner is not None and tenant != owner:
        return Admission(
            "rejected", reason_code=FOREIGN_TENANT,
            reason=(f"session {event['sessionId']!r} belongs to another tenant (created at seq "
                    f"{session['firstSeq'] if session else '?'}); an event of tenant {tenant!r} "
                    "may not write to it"),
        )
    if session is None:
        acl = _copy(declared or DEFAULT_ACL)
        new_session: dict[str, Any] | None = {"tenant": tenant, "firstSeq": seq, "acls": [[seq, acl]]}
    else:
        acl = _copy(declared) if declared is not None else _acl_as_of(session, seq)
        new_session = _with_change(session, seq, acl) if declared is not None else None
    resolved = {**event, "acl": acl}
    return Admission("accepted", event=resolved, session=new_session,
                     event_id={"seq": seq, "tenant": tenant} if first_seq is None else None)


def current_acl(session: Mapping[str, Any]) -> dict[str, Any]:
    """The access list a session has now (its latest change)."""
    return _copy(session["acls"][-1][1])


def session_of_acl(acl: Mapping[str, Any]) -> dict[str, Any]:
    """A session state for a session known only by its current access list (an index's view):
    owned by that list's tenant, with that list since before any seq."""
    return {"tenant": str(acl.get("tenant")), "firstSeq": 0, "acls": [[0, _copy(acl)]]}


class Owners:
    """:func:`admit` over in-memory tables, for the paths that read L1 in one process (the
    rebuild replay, the tail scan, the planner's access-list overlay).

    ``known`` answers the state of a session this instance has not seen (e.g. from the
    structured index, via :func:`session_of_acl`); ``known_event`` likewise for an eventId.
    """

    def __init__(self, *, known: Callable[[str], Mapping[str, Any] | None] | None = None,
                 sessions: Mapping[str, Mapping[str, Any]] | None = None,
                 event_ids: Mapping[str, Any] | None = None) -> None:
        self.known = known
        self.sessions: dict[str, Mapping[str, Any]] = dict(sessions or {})
        self.event_ids: dict[str, Any] = dict(event_ids or {})

    def copy(self) -> Owners:
        """An independent copy (states are replaced, never mutated, so a shallow copy is)."""
        return Owners(known=self.known, sessions=self.sessions, event_ids=self.event_ids)

    def session(self, session_id: str) -> Mapping[str, Any] | None:
        state = self.sessions.get(session_id)
        if state is None and self.known is not None:
            state = self.known(session_id)
            if state is not None:
                self.sessions[session_id] = state
        return state

    def admit(self, event: Mapping[str, Any], seq: int) -> Admission:
        """Decide about ``event`` and store the state it changes."""
        session_id = str(event["sessionId"])
        event_id = str(event["eventId"])
        admission = admit(event, seq, session=self.session(session_id), first=self.event_ids.get(event_id))
        if admission.session is not None:
            self.sessions[session_id] = admission.session
        if admission.event_id is not None:
            self.event_ids[event_id] = admission.event_id
        return admission


def _first_copy(first: Any) -> tuple[int | None, str | None]:
    if first is None:
        return None, None
    if isinstance(first, Mapping):
        tenant = first.get("tenant")
        return int(first["seq"]), None if tenant is None else str(tenant)
    return int(first), None  # a bare seq, stored before ownership existed


def _acl_as_of(session: Mapping[str, Any], seq: int) -> dict[str, Any]:
    """The session's access list in force at ``seq`` (its earliest kept one if older)."""
    changes = session["acls"]
    chosen = changes[0][1]
    for since, acl in changes:
        if int(since) <= seq:
            chosen = acl
    return _copy(chosen)


def _with_change(session: Mapping[str, Any], seq: int, acl: dict[str, Any]) -> dict[str, Any] | None:
    """``session`` with ``acl`` in force from ``seq``; None when nothing changes (the same list,
    or a record at or below the last change delivered again)."""
    changes = session["acls"]
    last_since, last_acl = changes[-1]
    if seq <= int(last_since) or acl == last_acl:
        return None
    kept = [*changes, [seq, acl]][-ACL_HISTORY:]
    return {**session, "acls": kept}


def _copy(acl: Mapping[str, Any]) -> dict[str, Any]:
    # Never share a list with the caller's event or with a stored state.
    return {key: list(value) if isinstance(value, list) else value for key, value in acl.items()}
