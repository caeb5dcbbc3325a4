"""Each session's latest access list, as of the log's committed seq *now*.

The structured index holds every session's access list as of its watermark; the L1 events above
it are read and admitted as the stream admits them (:mod:`streams.ownership`), so a revocation
applies at once (also to open cursors), an event without ``acl`` changes nothing and another
tenant's event for a session is ignored. The overlay of one start seq is cached and extended by
the next query instead of read again.

Which sessions a principal may read is judged once per structured generation (the generation
never changes) and then corrected by the few sessions of the overlay, so a query's cost does not
grow with the number of sessions the index holds.
"""

from __future__ import annotations

import threading
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.acl import Principal, can_read
from planner.exceptions import IndexUnavailable
from planner.l1window import L1Window
from planner.readers import IndexPin, ReaderCache
from streams.asp import validate_event
from streams.exceptions import USLError
from streams.l1 import L1Reader
from streams.ownership import Owners, current_acl, session_of_acl

__all__ = ["ACL_SCAN_CAP", "AccessLists", "Readable"]

ACL_SCAN_CAP = 200_000
"""Most L1 events read to bring access lists up to date; beyond it the query is refused (503)
rather than answered with access lists that may miss a revocation."""
_OVERLAYS = 16
_PER_OVERLAY = 4
"""Snapshots kept per overlay (log, generation, start): the log head's, and older ones a
cursor's page asks for (its first page's seq) while queries at the head extend the newest."""
_READABLE = 64
"""Principals x structured generations whose readable sessions are remembered."""


@dataclass(frozen=True)
class Readable:
    """What one principal may read as of one seq."""

    acls: Mapping[str, Mapping[str, Any]]
    """sessionId → its latest access list (every session known, readable or not)."""
    sessions: frozenset[str]
    """The sessions the principal may read."""
    unreadable: frozenset[str]
    """The sessions known that the principal may not read: a filter may name these instead of
    ``sessions`` when they are fewer (a filter costs per chunk of the sessions it names)."""

    @property
    def everything(self) -> bool:
        """Whether ``sessions`` is every session known (then no session filter is needed)."""
        return not self.unreadable

    def within(self, other: Readable) -> Readable:
        """What both this and ``other`` let the principal read (``acls`` stay this one's); this
        very object when ``other`` takes nothing away (engines keep the filters they built for
        the very sets, see :meth:`AccessLists.readable`)."""
        if self.sessions <= other.sessions:
            return self
        return Readable(acls=self.acls, sessions=self.sessions & other.sessions,
                        unreadable=self.unreadable | (self.sessions - other.sessions))


class AccessLists:
    """Latest access lists per log (thread-safe); ``scan_cap`` bounds the L1 events one
    query reads for them."""

    def __init__(self, readers: ReaderCache, window: L1Window, *, scan_cap: int = ACL_SCAN_CAP) -> None:
        self.scan_cap = scan_cap
        self._readers = readers
        self._window = window
        self._lock = threading.Lock()
        self._overlays: dict[tuple[str, str, int], dict[int, Owners]] = {}
        """Per overlay (log, generation, start): through seq → its owners, least recently used
        first."""
        # (structured generation, principal) -> (readable, unreadable) sessions of the generation.
        self._readable: dict[tuple[str, str, str, frozenset[str]],
                             tuple[frozenset[str], frozenset[str]]] = {}
        # The same corrected by the overlay, per (generation, principal, log, through seq).
        self._corrected: dict[tuple[Any, ...], tuple[frozenset[str], frozenset[str]]] = {}

    def latest(self, l1: L1Reader, log_id: str, structured: IndexPin | None,
               through_seq: int) -> dict[str, dict[str, Any]]:
        """sessionId → its access list: the structured index's (``structured``, or none),
        brought up to ``through_seq`` by the L1 events above its watermark."""
        base, overlay = self._layers(l1, log_id, structured, through_seq)
        return {**base, **overlay}  # type: ignore[dict-item]

    def acl_of(self, l1: L1Reader, log_id: str, structured: IndexPin | None, through_seq: int,
               session_id: str) -> Mapping[str, Any] | None:
        """The access list of one session as of ``through_seq`` (None: no such session), as
        :meth:`latest` would give it without building the whole map."""
        base, overlay = self._layers(l1, log_id, structured, through_seq)
        return overlay.get(session_id) or base.get(session_id)

    def _layers(self, l1: L1Reader, log_id: str, structured: IndexPin | None, through_seq: int,
                ) -> tuple[Mapping[str, Mapping[str, Any]], dict[str, dict[str, Any]]]:
        """The structured generation's access lists (shared, never changed) and the sessions
        the L1 events above its watermark through ``through_seq`` changed."""
        base: Mapping[str, Mapping[str, Any]] = (
            self._readers.session_acls(structured) if structured is not None else {})
        start = structured.built_through_seq + 1 if structured is not None else 1
        return base, self.overlay(l1, log_id, start, through_seq, base,
                                  generation=structured.key if structured is not None else "")

    def readable(self, principal: Principal, l1: L1Reader, log_id: str,
                 structured: IndexPin | None, through_seq: int) -> Readable:
        """The sessions ``principal`` may read as of ``through_seq`` (same answer as
        :func:`planner.acl.can_read` over :meth:`latest`, without judging every session anew)."""
        base, overlay = self._layers(l1, log_id, structured, through_seq)
        # can_read looks at the tenant, the user and the groups only.
        key = (structured.key if structured is not None else "", principal.tenant,
               principal.user, principal.groups)
        with self._lock:
            cached = self._readable.get(key)
        if cached is None:
            judged = frozenset(session for session, acl in base.items() if can_read(principal, acl))
            cached = (judged, frozenset(base.keys() - judged))
            with self._lock:
                self._readable[key] = cached
                while len(self._readable) > _READABLE:
                    self._readable.pop(next(iter(self._readable)))
        # Unchanged by the overlay, the very frozensets of the cache are returned: engines keep
        # the filter they built for one (sinks.text.tantivy_engine) and reuse it.
        judged, judged_unreadable = cached
        sessions, unreadable = judged, judged_unreadable
        if overlay:
            # A correction copies the generation's sets (new sessions in the tail do that on
            # every query): it is kept for the same L1 seq, which fixes the overlay.
            corrected_key = (*key, log_id, through_seq)
            with self._lock:
                corrected = self._corrected.get(corrected_key)
            if corrected is None:
                granted = {session for session, acl in overlay.items() if can_read(principal, acl)}
                refused = overlay.keys() - granted
                if not granted <= judged or not refused.isdisjoint(judged):
                    sessions = (judged - refused) | granted
                if not refused <= judged_unreadable or not granted.isdisjoint(judged_unreadable):
                    unreadable = (judged_unreadable - granted) | refused
                corrected = (sessions, unreadable)
                with self._lock:
                    self._corrected[corrected_key] = corrected
                    while len(self._corrected) > _READABLE:
                        self._corrected.pop(next(iter(self._corrected)))
            sessions, unreadable = corrected
        acls = ChainMap(overlay, base) if overlay else base  # type: ignore[arg-type]
        return Readable(acls=acls, sessions=sessions, unreadable=unreadable)

    def overlay(self, l1: L1Reader, log_id: str, from_seq: int, to_seq: int,
                indexed: Mapping[str, Mapping[str, Any]], *, generation: str = "") -> dict[str, dict[str, Any]]:
        """sessionId → its access list after the L1 events of ``from_seq..to_seq`` (``indexed``:
        the access lists below ``from_seq``, of the structured generation named ``generation``),
        extended from the previous query's overlay of the same generation and start."""
        # The generation is part of the key: who owns a session the tail names depends on the
        # lists below the start, and two generations may share a watermark (a property test
        # found the overlay of one served for the other, with another tenant's ownership).
        key = (log_id, generation, from_seq)
        with self._lock:
            snapshots = self._overlays.get(key, {})
            through = max((seq for seq in snapshots if seq <= to_seq), default=from_seq - 1)
            cached = snapshots.pop(through, None)
            if cached is not None:
                snapshots[through] = cached  # used now: the last to go
        owners = cached if cached is not None else Owners()
        if through >= to_seq:
            return {session: current_acl(state) for session, state in owners.sessions.items()}
        if to_seq - through > self.scan_cap:
            raise IndexUnavailable(
                f"the structured index is {to_seq - from_seq + 1} seqs behind the log, too far "
                "to apply access lists as of now",
                hint="Wait until `usl status` shows the structured index caught up.",
            )
        owners = owners.copy()
        owners.known = lambda session: (session_of_acl(indexed[session])
                                        if isinstance(indexed.get(session), Mapping) else None)
        for seq, raw in self._window.read(l1, log_id, through + 1, to_seq):
            try:
                event = validate_event(raw)
            except USLError:
                continue
            owners.admit(event, seq)
        with self._lock:
            # A few per overlay, the least recently used going first: a cursor's page (as of its
            # first page's seq) and the queries at the head each find theirs instead of reading
            # the log again from ``from_seq``.
            snapshots = self._overlays.pop(key, {})
            snapshots.pop(to_seq, None)
            snapshots[to_seq] = owners
            while len(snapshots) > _PER_OVERLAY:
                snapshots.pop(next(iter(snapshots)))
            self._overlays[key] = snapshots
            while len(self._overlays) > _OVERLAYS:
                self._overlays.pop(next(iter(self._overlays)))
        return {session: current_acl(state) for session, state in owners.sessions.items()}
