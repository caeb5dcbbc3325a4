"""Receivers: the API routes that append to L1 (SPEC §12 "Live ingest").

``POST /v1/events``   a batch of ASP v1 events, ``{"events": [...], "log"?: "default"}``
``POST /v1/traces``   OTLP/HTTP traces (protobuf or JSON): GenAI spans become ASP events
``POST /v1/logs``     OTLP/HTTP logs: GenAI log records, read as the spans they were emitted in
                      (:mod:`streams.importers.otel`)

Both answer only after L1 acknowledged the appended events (idempotent producer, ``acks=all``):
``{"appended", "duplicates", "rejected": [{"index", "reason"}], "l1CommittedSeq"}`` (and, for
``/v1/events``, ``turnsAdded``: see :mod:`streams.importers.frames`; ``truncated`` and
``conflicts``, below). Bodies may be gzip or deflate compressed (:mod:`planner.bodies`). The caller's
principal (its API key's) decides the tenant: an event's ``acl.tenant`` must be that tenant. An
event without ``acl`` keeps the session's access list when the session is the caller's tenant's,
is refused when it is another tenant's, and starts a new session with the caller's tenant and the
tenant-wide default ``read: ["*"]`` (ownership as :mod:`streams.ownership` decides it: the first
event's tenant owns the session). An event that would change an existing session's access list is
refused unless that list admits the caller's principal: a key may not add itself to a list. Bad events are listed by index, among them those whose fields have
another type than their event type needs (:mod:`planner.event_fields`); the rest are appended.
An event over ``USL_MAX_EVENT_BYTES`` is cut as ``usl ingest`` cuts it (``streams.asp.fit_event``:
its longest strings, recorded in ``fields._truncated``) and listed in ``truncated``
(``{"index", "eventId", "originalBytes", "limitBytes"}``). An eventId L1 already holds in that log
counts as a duplicate and is not appended again; when its content differs from the copy L1 holds
(but for an ``acl`` or ``turnId`` the request leaves to the receiver) it is also listed in
``conflicts`` (``{"index", "eventId", "reason"}``): the first copy stands; only when the caller
may read the held copy's session, and another tenant's eventId is refused, not a duplicate. An event with a key written twice in any of its objects
(``{"sessionId": "mine", "sessionId": "theirs"}``) is refused by index, as the worker
dead-letters it (``duplicate_keys``): parsers disagree on which copy counts.

A refused event that states an ``acl`` would have set who may read its session from there on,
so the later events of that session in the request that state no ``acl`` of their own are
refused with it (each saying so): appended, they would carry another list, the tenant-wide
default ``read: ["*"]`` of a session the refused event was to create. An event of the session
that states its own ``acl`` sets the list again, and the session's later events pass as usual.

Every event a request has refused, and every conflict, is also a dead letter (stage ``receiver``,
``usl deadletters``): an OpenTelemetry exporter only logs a partial success. A refused event that
names its session and eventId is named in its letter by ``eventKey`` (:func:`event_key`); when a
later request appends it (or finds the log holds it), this receiver resolves its letters, as a
later import resolves a line's (:meth:`streams.l1.DeadLetters.resolve`).

When appends queue up behind L1 (more than ``_MAX_WAITING`` batches waiting, or the broker does
not acknowledge in time) the answer is 429 with ``Retry-After``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from planner.acl import Principal, can_read
from planner.bodies import json_error, read_body, without_bom
from planner.event_fields import fields_problem
from planner.exceptions import PlannerError, QueryError
from streams.asp import (
    DEFAULT_ACL,
    DEFAULT_MAX_EVENT_BYTES,
    canonical_bytes,
    fit_event,
    json_kind,
    validate_event,
)
from streams.exceptions import SchemaError
from streams.importers.asp import RefusedLists
from streams.importers.base import stable_id, with_lone_surrogates_mended
from streams.importers.frames import frame_loose_events
from streams.importers.otel import TraceSessions
from streams.names import LOG_ID, LOG_ID_HINT
from streams.settings import Settings

__all__ = ["MAX_EVENTS", "EventReceiver", "TooManyRequests", "check_event", "event_key", "openapi_paths", "request_log",
           "routes"]

log = logging.getLogger("usl.api")

MAX_EVENTS = 10000
_MAX_WAITING = 4
#: Events to append, as ``(index in the request, event)``; None for an event the receiver added.
Checked = list[tuple[int | None, dict[str, Any]]]
_RETRY_AFTER_SECONDS = 2
# Refused events remembered so that a retried request does not dead-letter them again.
_LETTERS_KEPT = 100_000


class TooManyRequests(PlannerError):
    status, code = 429, "too_many_requests"
    headers = {"Retry-After": str(_RETRY_AFTER_SECONDS)}


def event_key(log_id: str, event: Any) -> str | None:
    """What names a refused event across requests, so that its dead letter is resolved once the
    event is appended: a hash of its log, session and eventId (an id may hold a secret, and a
    letter carries nothing unredacted). None for an event that names no session or eventId: its
    letter names only its place in the request, which another request does not share."""
    if not isinstance(event, dict):
        return None
    session_id, event_id = event.get("sessionId"), event.get("eventId")
    if not (isinstance(session_id, str) and session_id and isinstance(event_id, str) and event_id):
        return None
    return hashlib.blake2b(f"{log_id}\x1f{session_id}\x1f{event_id}".encode("utf-8", "surrogatepass"),
                           digest_size=16).hexdigest()


def _digest(log_id: str, event_id: str) -> bytes:
    return hashlib.blake2b(f"{log_id}\x1f{event_id}".encode(), digest_size=16).digest()


_UNSTATED = bytes(8)
_CONFLICT_PARTS = ((0, "content"), (8, "acl"), (16, "turnId"))


def _fingerprint(event: dict[str, Any]) -> bytes:
    """What tells two copies of an eventId apart: 8 bytes of hash each for the event but its
    ``acl`` and ``turnId``, its ``acl``, and its ``turnId`` (zeros when it states none). The
    receiver may add those two (a new session's default list, a frame's turn), so L1's copy has
    them where the request's does not; they count only when the request states them."""
    body = {key: value for key, value in event.items() if key not in ("acl", "turnId")}
    return b"".join(_UNSTATED if value is None else
                    hashlib.blake2b(canonical_bytes(value) if isinstance(value, dict) else orjson.dumps(value),
                                    digest_size=8).digest()
                    for value in (body, event.get("acl"), event.get("turnId") or None))


def _conflict(held: bytes, sent: bytes, event_id: str) -> str | None:
    """Why the copy of ``event_id`` whose fingerprint is ``sent`` is not the one L1 holds."""
    for start, part in _CONFLICT_PARTS:
        mine = sent[start:start + 8]
        if mine != held[start:start + 8] and (start == 0 or mine != _UNSTATED):
            return (f"eventId {event_id!r} is already in the log with different {part}; the first copy "
                    "stands and this one was not appended (an eventId names one event: give new "
                    "content a new eventId)")
    return None


class EventReceiver:
    """Appends checked events to L1 and knows every eventId each log holds.

    The eventId index of a log is read from L1 once, then kept current by this receiver's own
    appends and by reading what other producers appended since (before each batch), so a
    duplicate is recognized whoever appended the first copy.
    """

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self._lock = threading.Lock()
        self._waiting = 0
        self._waiting_lock = threading.Lock()
        self._clients: tuple[Any, Any] | None = None
        self._dead: Any = None  # the dead-letter producer, made at the first refusal
        # Digests of the letters sent (log, route, reason, record as posted), the latest
        # _LETTERS_KEPT: a retried request is refused again in its answer, not dead-lettered again.
        self._lettered: OrderedDict[bytes, None] = OrderedDict()
        self._lettered_lock = threading.Lock()
        # The event_key of each refused event dead-lettered and not resolved since, with its
        # letters' digests (the latest _LETTERS_KEPT): appended later, the event's letters are
        # resolved, and the same refusal after that is a letter again.
        self._pending: OrderedDict[str, list[bytes]] = OrderedDict()
        # One request's letters marked and sent at a time: of two copies of a request at once,
        # the second skipped the letters the first had marked, and if the first's send then
        # failed (and unmarked them for a retry), no copy sent them.
        self._sending_letters = threading.Lock()
        self._seen: dict[str, dict[bytes, bytes]] = {}  # log -> eventId digest -> fingerprint
        self._acls: dict[str, dict[str, dict[str, Any]]] = {}  # log -> sessionId -> its access list
        self._holders: dict[str, dict[bytes, str]] = {}  # log -> eventId digest -> its session
        self._traces: dict[str, TraceSessions] = {}  # log -> its OpenTelemetry traces' sessions
        self._read_through: dict[str, int] = {}

    def _l1(self) -> tuple[Any, Any]:
        if self._clients is None:
            from streams.l1 import L1Producer, L1Reader, LogRegistry
            from streams.topics import ensure_topics

            ensure_topics(self.bootstrap, self.settings)
            registry = LogRegistry(self.bootstrap, self.settings)
            self._clients = (L1Producer(self.bootstrap, self.settings, registry),
                             L1Reader(self.bootstrap, self.settings, registry))
        return self._clients

    def close(self) -> None:
        if self._clients is not None:
            producer, reader = self._clients
            producer.close()
            reader.close()
            self._clients = None
        if self._dead is not None:
            self._dead.close()
            self._dead = None

    def settle(self, route: str, log_id: str, answer: dict[str, Any], raws: Mapping[int, Any]) -> None:
        """Count what ``answer`` appended and refused, and publish the events it refused or
        found in conflict to ``usl.deadletters`` (stage ``receiver``), as ``usl ingest`` does a
        file's: the caller reads the answer, but an OTLP exporter only logs a partial success,
        and an operator looks in ``usl deadletters``. ``raws``: each event as the request had
        it, by index.

        The counts are ``usl ingest``'s (``usl_records_total`` and ``usl_dead_letters_total`` of
        stage ``ingest``), on the API's ``/metrics``: the pipeline's ingest panel and
        ``USLDeadLettersRising`` saw nothing a receiver took in."""
        from streams.metrics import usl_records_total

        usl_records_total.labels(stage="ingest").inc(answer.get("appended", 0))
        refused = [*answer["rejected"], *answer.get("conflicts", ())]
        if not refused and not self._pending:
            return
        with self._sending_letters:
            self._resolve_letters(route, log_id, {item["index"] for item in refused}, raws)
            if refused:
                self._send_letters(route, log_id, answer["rejected"], answer.get("conflicts", []), raws)

    def _resolve_letters(self, route: str, log_id: str, refused: set[int], raws: Mapping[int, Any]) -> None:
        """Resolve the letters of the events this request appended (or found in the log) that
        this receiver dead-lettered before: a producer that fixed a refused event and sent it
        again saw its letter pending in `usl deadletters` and `usl status` for good. Not a
        conflict's: that copy was not appended."""
        with self._lettered_lock:
            if not self._pending:
                return
            keys = {key for index, raw in raws.items() if index not in refused
                    and (key := event_key(log_id, raw)) is not None and key in self._pending}
        if not keys:
            return
        try:
            dead = self._dead_letters()
            for key in sorted(keys):
                dead.resolve(stage="receiver", record=f"POST {route}", log_id=log_id, event_key=key,
                             reason="appended by a later request: the dead letters of this event before this one "
                                    "are resolved")
            dead.flush()
        except Exception:  # pending still: a later append of the event may resolve them
            log.warning("could not resolve the dead letters of %d event(s) of %s", len(keys), route, exc_info=True)
            return
        with self._lettered_lock:
            for key in keys:  # the same refusal after this one is a letter of its own again
                for digest in self._pending.pop(key, []):
                    self._lettered.pop(digest, None)

    def _dead_letters(self) -> Any:
        from streams.l1 import DeadLetters

        if self._dead is None:
            self._dead = DeadLetters(self.bootstrap, self.settings)
        return self._dead

    def _send_letters(self, route: str, log_id: str, rejected: list[dict[str, Any]], conflicts: list[dict[str, Any]],
                      raws: Mapping[int, Any]) -> None:
        from streams.metrics import dead_letter_reason, usl_dead_letters_total

        letters = self._new_letters(route, log_id, [*rejected, *conflicts], raws)
        if not letters:
            return
        conflicting = {id(item) for item in conflicts}
        keys: list[str | None] = []
        try:
            dead = self._dead_letters()
            for item, raw, _digest in letters:
                where = item.get("record") or f"events[{item['index']}]"
                key = None if id(item) in conflicting else event_key(log_id, raws.get(item["index"]))
                keys.append(key)
                dead.publish(stage="receiver", reason=item["reason"], log_id=log_id, record=f"POST {route} {where}",
                             raw=raw, event_key=key)
            dead.flush()
        except Exception:  # the answer already names them; a letter lost is logged
            log.warning("could not dead-letter %d refused event(s) of %s", len(letters), route, exc_info=True)
            with self._lettered_lock:  # not sent: a retry may send them
                for _item, _raw, digest in letters:
                    self._lettered.pop(digest, None)
            return
        with self._lettered_lock:
            for (_item, _raw, digest), key in zip(letters, keys, strict=True):
                if key is not None:
                    self._pending.setdefault(key, []).append(digest)
                    self._pending.move_to_end(key)
            while len(self._pending) > _LETTERS_KEPT:
                self._pending.popitem(last=False)
        for item, _raw, _digest in letters:  # counted once sent, so a retry that sends them counts them once
            usl_dead_letters_total.labels(stage="ingest", reason=dead_letter_reason(str(item["reason"]))).inc()

    def _new_letters(self, route: str, log_id: str, refused: list[dict[str, Any]],
                     raws: Mapping[int, Any]) -> list[tuple[dict[str, Any], str, bytes]]:
        """(item, raw text, digest) of each of ``refused`` this receiver has not dead-lettered
        yet. An exporter retries a request whose answer it did not get (a timeout, a 429), and a
        producer re-sends a batch it is unsure of: each retry dead-lettered its refused events
        once more, so one bad span was N letters in `usl deadletters` and `usl status`. A
        letter is named by what was refused, not by its place in the request (a retry may batch
        otherwise); remembered by this process, so another replica, or a restarted API, may
        send a letter once more."""
        new: list[tuple[dict[str, Any], str, bytes]] = []
        with self._lettered_lock:
            for item in refused:
                text = _as_posted(raws.get(item["index"]))
                digest = hashlib.sha256("\0".join((log_id, route, str(item["reason"]), text)).encode(
                    "utf-8", "surrogatepass")).digest()
                if digest in self._lettered:
                    self._lettered.move_to_end(digest)
                    continue
                self._lettered[digest] = None
                if len(self._lettered) > _LETTERS_KEPT:
                    self._lettered.popitem(last=False)
                new.append((item, text, digest))
        return new

    def _catch_up(self, reader: Any, log_id: str) -> dict[bytes, bytes]:
        seen = self._seen.setdefault(log_id, {})
        acls = self._acls.setdefault(log_id, {})
        holders = self._holders.setdefault(log_id, {})
        traces = self._traces.setdefault(log_id, TraceSessions())
        start = self._read_through.get(log_id, 0) + 1
        end = reader.committed_seq(log_id)
        if end >= start:
            for _seq, event in reader.read(log_id, start, end):
                key = _digest(log_id, str(event.get("eventId")))
                seen[key] = _fingerprint(event)
                holders.setdefault(key, str(event.get("sessionId")))
                _own(acls, event)
                traces.feed(event)
        self._read_through[log_id] = max(end, start - 1)
        return seen

    def receive(self, events: list[Any], principal: Principal, log_id: str) -> dict[str, Any]:
        """Check, dedupe and append ``events``; the answer of ``POST /v1/events``."""
        checked: list[tuple[int, dict[str, Any]]] = []
        rejected: list[dict[str, Any]] = []
        refused: list[tuple[int, Any]] = []  # (index, event) of those refused here, in order
        cuts: set[int] = set()
        fingerprints: dict[int, bytes] = {}  # before the receiver adds an acl or a frame's turnId
        for index, raw in enumerate(events):
            event, reason, cut = check_event(raw, principal, log_id, self.settings.max_event_bytes)
            if event is None:
                rejected.append({"index": index, "reason": reason})
                refused.append((index, raw))
            else:
                checked.append((index, event))
                fingerprints[index] = _fingerprint(event)
                if cut:
                    cuts.add(index)
        framed, _turns = frame_loose_events(checked)
        answer = self.append(framed, rejected, log_id, principal, refused, cuts=cuts,
                             fingerprints=fingerprints)
        self.settle("/v1/events", log_id, answer, dict(enumerate(events)))
        return answer

    def append(self, checked: Checked | Callable[[TraceSessions], Checked],
               rejected: list[dict[str, Any]], log_id: str, principal: Principal,
               refused: Sequence[tuple[int, Any]] = (), *, cuts: Collection[int] = (),
               fingerprints: dict[int, bytes] | None = None) -> dict[str, Any]:
        """Append already checked events (``(index, event)``), skipping eventIds L1 holds. An
        index of None is an event the receiver added (a turn's frame): it is appended like the
        others but counted in none of the answer's figures.

        ``refused`` holds the events of the request refused before the append, ``(index,
        event)`` in index order: one that stated an ``acl`` takes its session's later events
        without ``acl`` with it (added to ``rejected``) until one stating an ``acl`` is appended,
        as does an event stating one that this append refuses (``RefusedLists``, the rule
        ``usl ingest`` applies to an ASP file).

        ``checked`` may instead be a function that makes the events (and adds to ``rejected``)
        from what the log holds of its OpenTelemetry traces: it runs under the append lock, after
        this receiver read what every producer appended, so the sessions it chooses follow every
        span L1 had then.

        ``cuts`` are the indexes of events :func:`check_event` cut to fit (listed in the answer's
        ``truncated`` once appended); ``fingerprints`` the :func:`_fingerprint` of each event as
        the request had it, by index: a duplicate whose content differs is listed in
        ``conflicts``."""
        with self._waiting_lock:
            if self._waiting >= _MAX_WAITING:
                raise TooManyRequests("L1 appends are queued up; this batch was not appended",
                                      hint=f"Retry after {_RETRY_AFTER_SECONDS} s (Retry-After).")
            self._waiting += 1
        try:
            with self._lock:
                return self._append_locked(checked, rejected, log_id, principal, refused, cuts,
                                           fingerprints or {})
        finally:
            with self._waiting_lock:
                self._waiting -= 1

    def _append_locked(self, checked: Checked | Callable[[TraceSessions], Checked],
                       rejected: list[dict[str, Any]], log_id: str, principal: Principal,
                       refused: Sequence[tuple[int, Any]], cuts: Collection[int],
                       fingerprints: dict[int, bytes]) -> dict[str, Any]:
        from kafka.errors import KafkaError

        producer, reader = self._l1()
        appended = duplicates = 0
        written: list[dict[str, Any]] = []
        truncated: list[dict[str, Any]] = []
        conflicts: list[dict[str, Any]] = []
        # A frame's markers (index None, turn.*: streams.importers.frames) go out only with an
        # event of the frame that L1 does not hold yet: a request re-sending events L1 holds in
        # other frames (a replay, a retry batched otherwise) would otherwise append an empty turn,
        # or a second turn.ended that moves an earlier turn's end (the SQL turns view).
        waiting: dict[str, dict[str, Any]] = {}  # frame turnId -> its turn.started, not yet sent
        opened: set[str] = set()  # frames with an event of the caller's that L1 did not hold
        frames_written: set[str] = set()
        try:
            seen = self._catch_up(reader, log_id)
            acls, holders, traces = self._acls[log_id], self._holders[log_id], self._traces[log_id]
            if callable(checked):
                checked = checked(traces)
            # The frames' turns (a turn.started marker each); an end with none closes a client's
            # turn that went on after its end (streams.importers.frames) and adds no turn.
            frames = {event["turnId"] for index, event in checked if index is None and event["type"] == "turn.started"}
            fresh: dict[bytes, bytes] = {}
            lists = RefusedLists(remedy="send it with the session's acl, or after that event")
            earlier = iter(refused)
            pending = next(earlier, None)

            def put(index: int | None, event: dict[str, Any]) -> None:
                nonlocal appended, duplicates
                key = _digest(log_id, event["eventId"])
                owned, reason = _with_owner(event, acls, principal)
                if owned is not None:
                    reason = lists.reason(event) or ""
                if owned is None or reason:
                    if index is not None:
                        rejected.append({"index": index, "reason": reason})
                        _refuse(lists, event, index)
                    return
                try:
                    producer.append(owned)
                except SchemaError as exc:  # over USL_MAX_EVENT_BYTES
                    if index is not None:
                        rejected.append({"index": index, "reason": exc.reason})
                        _refuse(lists, event, index)
                    return
                _own(acls, owned)
                fresh[key] = _fingerprint(owned)
                holders[key] = owned["sessionId"]
                written.append(owned)
                appended += index is not None
                if index is None and str(event.get("type")).startswith("turn.") and event.get("turnId") in frames:
                    frames_written.add(str(event.get("turnId")))
                elif index is not None and event.get("turnId"):
                    opened.add(str(event["turnId"]))  # the end that closes a turn gone on after its end goes out
                if index in cuts:
                    truncated.append({"index": index, "eventId": owned["eventId"], **owned["fields"]["_truncated"]})

            for (index, event), at in zip(checked, _positions(checked), strict=True):
                while pending is not None and pending[0] <= at:  # refused before it in the request
                    _refuse(lists, pending[1], pending[0])
                    pending = next(earlier, None)
                marker = index is None and event["type"] in ("turn.started", "turn.ended")
                if marker and event["type"] == "turn.started":
                    waiting[event["turnId"]] = event
                    continue
                if marker and event["turnId"] not in opened:
                    waiting.pop(event["turnId"], None)
                    continue  # no event of this frame was new: its end would end nothing new
                key = _digest(log_id, event["eventId"])
                held = seen.get(key) or fresh.get(key)
                if held is not None:
                    # Whose copy it is decides what the answer may say of it: another tenant's id is
                    # refused as the stream refuses it (eventid_collision), and only a principal that
                    # may read the held copy's session is told how its copy differs; to anyone else a
                    # conflict would confirm or refute a guess at an event it may not read.
                    holder = acls.get(holders.get(key, ""))
                    if holder is None or holder.get("tenant") != principal.tenant:
                        if index is not None:
                            rejected.append({"index": index, "reason": (
                                f"eventId {event['eventId']!r} is already used in this log by another tenant; "
                                "event ids must be unique per log")})
                            _refuse(lists, event, index)
                        continue
                    duplicates += index is not None
                    sent = fingerprints.get(index) if index is not None and can_read(principal, holder) else None
                    conflict = None if sent is None else _conflict(held, sent, event["eventId"])
                    if conflict:
                        conflicts.append({"index": index, "eventId": event["eventId"], "reason": conflict})
                    continue
                start = waiting.pop(str(event.get("turnId")), None) if index is not None else None
                if start is not None:
                    opened.add(start["turnId"])
                    if _digest(log_id, start["eventId"]) not in seen and _digest(log_id, start["eventId"]) not in fresh:
                        put(None, start)
                put(index, event)
            producer.flush()
        except KafkaError as exc:
            raise TooManyRequests(f"L1 did not acknowledge the batch in time ({type(exc).__name__})",
                                  hint=f"Retry after {_RETRY_AFTER_SECONDS} s; events already "
                                       "appended count as duplicates then.") from None
        seen.update(fresh)
        for event in written:  # as the next catch-up will read them (feeding twice changes nothing)
            traces.feed(event)
        rejected.sort(key=lambda item: item["index"])
        return {"appended": appended, "duplicates": duplicates, "rejected": rejected,
                "l1CommittedSeq": reader.committed_seq(log_id), "truncated": truncated, "conflicts": conflicts,
                "turnsAdded": len(frames_written)}


def request_log(value: Any) -> str:
    """The log a receiver's request names (``"log"``, ``?log=``); QueryError (400) unless an event
    can carry it, rather than answering 200 with every event rejected for its ``logId``."""
    if not isinstance(value, str) or not LOG_ID.fullmatch(value):
        raise QueryError(f"{str(value)[:64]!r} is not a log name",
                         hint=f'A log name is {LOG_ID_HINT}; leave it out for "default".')
    return value


def check_event(raw: Any, principal: Principal, log_id: str,
                max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> tuple[dict[str, Any] | None, str, int]:
    """The event as it will be appended, or None and why it is refused; and the bytes cut from it.

    An event over ``max_event_bytes`` is cut as ``usl ingest`` cuts one (``fit_event``: its
    longest strings, the cut recorded in ``fields._truncated``), to leave room for what the
    receiver may add to it (a new session's ``acl``, a frame's ``turnId``): the same event is
    cut the same way whatever its session already holds, so a retry is a plain duplicate."""
    if not isinstance(raw, dict):
        return None, f"an event must be a JSON object, not {json_kind(raw)}", 0
    repeated = _repeated_key(raw)
    if repeated is not None:
        return None, f"duplicate key {repeated!r} in a JSON object; each key may appear once", 0
    event = dict(raw)
    event.setdefault("logId", log_id)
    if event["logId"] != log_id:
        return None, f"logId {event['logId']!r} is not this request's log {log_id!r} (one log per request)", 0
    acl = event.get("acl")
    if isinstance(acl, dict) and acl.get("tenant") != principal.tenant:
        return None, (f"acl.tenant {acl.get('tenant')!r} is not the caller's tenant {principal.tenant!r}; "
                      "an API key writes only its own tenant's events"), 0
    try:
        event = validate_event(event)
    except SchemaError as exc:
        return None, f"{exc.reason} (field {exc.field})" if exc.field else exc.reason, 0
    problem = fields_problem(event)
    if problem is not None:
        return None, problem, 0
    try:
        fitted, cut = fit_event(event, max_event_bytes - _room(event, principal.tenant))
    except SchemaError as exc:
        return None, exc.reason, 0
    return fitted, "", cut


def _room(event: dict[str, Any], tenant: str) -> int:
    """Bytes the receiver may add to ``event``: a new session's default ``acl``, and the
    ``turnId`` of a frame (:mod:`streams.importers.frames`) around a loose event."""
    added: dict[str, Any] = {}
    if "acl" not in event:
        added["acl"] = {"tenant": tenant, "read": ["*"]}
    if not (event.get("turnId") or event.get("episodeId")):
        added["turnId"] = stable_id("turn", "")
    # Each key joins the event's object with a comma; the braces of ``added`` are not added.
    return len(canonical_bytes(added)) - 2 + len(added) if added else 0


def _refuse(lists: RefusedLists, event: Any, index: int) -> None:
    """Note the refused ``event`` at ``index``: stating an ``acl``, it takes its session's later
    events without one with it."""
    if isinstance(event, dict):
        lists.refuse(event, f"{index} of this request,")


def _positions(checked: Checked) -> list[int]:
    """Each event's place in the request: its index; for one the receiver added, the index of
    the event it frames (a ``turn.started`` the next one's, anything else the previous one's)."""
    positions: list[int] = []
    previous = -1
    for index, _event in checked:
        previous = previous if index is None else index
        positions.append(previous)
    upcoming = max(positions, default=-1) + 1
    for place in range(len(checked) - 1, -1, -1):
        index, event = checked[place]
        if index is not None:
            upcoming = index
        elif event.get("type") == "turn.started":
            positions[place] = upcoming
    return positions


def _own(acls: dict[str, dict[str, Any]], event: dict[str, Any]) -> None:
    """Follow the session's access list as :mod:`streams.ownership` decides it: its first event's
    (the default list when that one states none) names the owning tenant; a later event stating
    a list of that tenant replaces it, another tenant's changes nothing (the stream refuses it)."""
    session_id = str(event.get("sessionId"))
    acl = event.get("acl")
    held = acls.get(session_id)
    if held is None:
        acls[session_id] = dict(acl) if isinstance(acl, dict) else dict(DEFAULT_ACL)
    elif isinstance(acl, dict) and acl.get("tenant") == held.get("tenant"):
        acls[session_id] = dict(acl)


def _with_owner(event: dict[str, Any], acls: dict[str, dict[str, Any]],
                principal: Principal) -> tuple[dict[str, Any] | None, str]:
    """An event of ``principal``'s tenant: refused for another tenant's session, and when it would
    change the access list of a session that list does not let ``principal`` read (else any key
    of the tenant could add itself to a private session's list and read it); without ``acl``, it
    keeps its session's list, or a new session gets the tenant with the tenant-wide default."""
    held = acls.get(event["sessionId"])
    if held is not None and held.get("tenant") != principal.tenant:
        return None, (f"session {event['sessionId']!r} belongs to another tenant; an API key writes "
                      "only its own tenant's sessions")
    if held is None and "acl" not in event:
        return {**event, "acl": {"tenant": principal.tenant, "read": ["*"]}}, ""
    if held is not None and "acl" in event and event["acl"] != held and not can_read(principal, held):
        return None, (f"the access list of session {event['sessionId']!r} does not admit this API key's "
                      "principal, so the key may not change it; send the event without acl (it keeps "
                      "the session's list)")
    return event, ""


class _RepeatedKeys(dict[str, Any]):
    """A JSON object that held ``key`` more than once (parsed with the last copy kept)."""

    key = ""


def _mark_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = _RepeatedKeys(obj)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.key = key
            break
        seen.add(key)
    return marked


def _repeated_key(value: Any) -> str | None:
    """The first key written twice in an object of ``value`` (parsed by :func:`_parse`)."""
    if isinstance(value, _RepeatedKeys):
        return value.key
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        found = _repeated_key(child)
        if found is not None:
            return found
    return None


def _parse(raw: bytes) -> Any:
    """The body as JSON; objects that hold a key twice come back as :class:`_RepeatedKeys`, so
    each event that has one is refused by itself. As :func:`streams.asp.loads_event` does, a
    body that re-encodes to itself holds no repeated key and is parsed once.

    A lone UTF-16 surrogate escape (``\\ud83d`` with no low half: what a JavaScript producer's
    JSON.stringify writes of an emoji it cut in two, a tool output cut to a length limit) is read
    as U+FFFD, as ``usl ingest`` and the OTLP receivers read it. The whole batch was a 400."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in exc.msg:
            raise
        # Mended in the text, as usl ingest mends a line, then read as any body: strings mended
        # after a parse made two keys that differ only in their lone surrogate one key, a value
        # silently dropped (usl ingest refuses such an event for a key given twice).
        raw = with_lone_surrogates_mended(raw)
        value = orjson.loads(raw)  # raises for whatever else is wrong
    for option in (orjson.OPT_SORT_KEYS, None):
        try:
            if orjson.dumps(value, option=option) == raw:
                return value
        except orjson.JSONEncodeError:
            break
    try:
        return json.loads(raw, object_pairs_hook=_mark_repeats)
    except RecursionError:
        raise QueryError("the request body is nested too deeply for its repeated keys to be checked",
                         hint="Send events as ASP v1 defines them.") from None


def _as_posted(raw: Any) -> str:
    """A refused event as a dead letter shows it (and names it). An event refused because JSON
    cannot store it (a number past 64 bits) is written by the standard library: orjson raised
    for it here, and the whole request, its other events appended, was a 500."""
    if isinstance(raw, str):
        return raw
    if raw is None:
        return ""
    try:
        return orjson.dumps(raw, default=str).decode("utf-8", "replace")
    except (orjson.JSONEncodeError, TypeError):
        try:
            return json.dumps(raw, default=str, ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            return repr(raw)


async def _body(request: Request, max_bytes: int) -> Any:
    if not (await request.body()).strip():
        raise QueryError("the request body is empty; send a JSON object", hint='For example {"events": []}.')
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        from planner.api import not_json

        raise not_json(media_type)
    raw = await read_body(request, max_bytes)  # decoded (Content-Encoding)
    if not raw.strip():
        raise QueryError("the request body is empty once decoded; send a JSON object",
                         hint='For example {"events": []}.')
    try:
        return _parse(without_bom(raw))
    except orjson.JSONDecodeError as exc:
        raise json_error(exc) from None


def routes(settings: Settings, bootstrap: str, principal_of: Callable[[Request], Principal],
           guarded: Callable[[Any], Any]) -> list[Route]:
    """The receiver routes, each wrapped by the API's ``guarded`` (one error shape)."""
    receiver = EventReceiver(settings, bootstrap)

    async def events(request: Request) -> Response:
        principal = principal_of(request)
        body = await _body(request, settings.api_max_body_bytes)
        if not isinstance(body, dict) or not isinstance(body.get("events"), list):
            raise QueryError('the body must be an object with an "events" array',
                             hint='For example {"events": [{"eventId": "...", ...}]}.')
        if isinstance(body, _RepeatedKeys):
            raise QueryError(f"the body holds the key {body.key!r} twice; each key may appear once",
                             hint='Send one "events" array (and at most one "log").')
        # ?log= as /v1/traces takes it (an OTLP exporter cannot add a body field); it was
        # ignored here, so the events went to 'default' while the caller searched the named log.
        named = request.query_params.get("log")
        if named is not None and "log" in body and body["log"] != named:
            raise QueryError(f"the log is named twice, ?log={named} and \"log\": {body['log']!r}",
                             hint="Name it once, in the query string or in the body.")
        log_id = request_log(body.get("log", named if named is not None else "default"))
        if len(body["events"]) > MAX_EVENTS:
            raise QueryError(f"at most {MAX_EVENTS} events per request", hint="Send several batches.")
        answer = await run_in_threadpool(receiver.receive, body["events"], principal, log_id)
        return JSONResponse(answer)

    async def traces(request: Request) -> Response:
        from planner.otlp import traces_endpoint

        return await traces_endpoint(request, receiver, principal_of(request))

    async def logs(request: Request) -> Response:
        from planner.otlp import logs_endpoint

        return await logs_endpoint(request, receiver, principal_of(request))

    return [Route("/v1/events", guarded(events), methods=["POST"]),
            Route("/v1/traces", guarded(traces), methods=["POST"]),
            Route("/v1/logs", guarded(logs), methods=["POST"])]


def openapi_paths(*, security: list[dict[str, list[str]]], principal: dict[str, Any],
                  errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The receivers' entries of the OpenAPI document."""
    log_schema = {"type": "string", "pattern": f"^{LOG_ID.pattern}$"}
    answer = {"type": "object", "required": ["appended", "duplicates", "rejected", "l1CommittedSeq"],
              "properties": {
                  "appended": {"type": "integer", "minimum": 0},
                  "duplicates": {"type": "integer", "minimum": 0},
                  "rejected": {"type": "array", "items": {
                      "type": "object", "required": ["index", "reason"],
                      "properties": {"index": {"type": "integer"}, "reason": {"type": "string"}}}},
                  "l1CommittedSeq": {"type": "integer", "minimum": 0},
                  "turnsAdded": {"type": "integer", "minimum": 0, "description": (
                      "POST /v1/events: sessions whose trailing loose events (in no turn or episode) were framed "
                      "in a turn of their own")},
                  "truncated": {"type": "array", "description": (
                      "POST /v1/events: appended events that were over USL_MAX_EVENT_BYTES, their longest strings "
                      "cut to fit (fields._truncated records it)"), "items": {
                      "type": "object", "required": ["index", "eventId", "originalBytes", "limitBytes"],
                      "properties": {"index": {"type": "integer"}, "eventId": {"type": "string"},
                                     "originalBytes": {"type": "integer"}, "limitBytes": {"type": "integer"}}}},
                  "conflicts": {"type": "array", "description": (
                      "POST /v1/events: duplicates (counted in duplicates) whose content differs from the copy the "
                      "log holds; the first copy stands"), "items": {
                      "type": "object", "required": ["index", "eventId", "reason"],
                      "properties": {"index": {"type": "integer"}, "eventId": {"type": "string"},
                                     "reason": {"type": "string"}}}}}}
    too_many = {"429": {"description": "L1 cannot keep up; retry after Retry-After seconds",
                        "headers": {"Retry-After": {"schema": {"type": "string"}}},
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}

    def otlp(summary: str, resources: str, answered: str) -> dict[str, Any]:
        """An OTLP/HTTP receiver's entry: protobuf or JSON in, the same encoding out."""
        return {"post": {
            "summary": summary,
            "parameters": [principal, {"name": "log", "in": "query", "required": False,
                                       "schema": {**log_schema, "default": "default"}}],
            "security": security,
            "requestBody": {"required": True, "content": {
                "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                "application/json": {"schema": {"type": "object", "properties": {resources: {"type": "array"}}}}}},
            "responses": {"200": {"description": answered, "content": {
                "application/json": {"schema": {"type": "object"}},
                "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}}}},
                **{status: {**entry, "content": {**entry["content"], "application/x-protobuf": {"schema": {
                    "type": "string", "format": "binary",
                    "description": "to a protobuf request: a google.rpc.Status, its message the error's"}}}}
                   for status, entry in {**errors(400, 401, 403, 413, 415, 500), **too_many}.items()}}}}

    return {
        "/v1/events": {"post": {
            "summary": "Append a batch of ASP v1 events to L1; answers after L1 committed them",
            "parameters": [principal, {"name": "log", "in": "query", "required": False,
                                       "description": "The log, as the body's \"log\" names it (not both, "
                                                      "unless the same)",
                                       "schema": {**log_schema, "default": "default"}}],
            "security": security,
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["events"], "properties": {
                    # No maxItems: the limit (MAX_EVENTS, a 400) is stated in words, so a client
                    # generating a violation does not first hit the body size limit (413).
                    "events": {"type": "array", "description": f"At most {MAX_EVENTS} events.",
                               "items": {"description": "An ASP v1 event (streams/schemas/"
                                         "asp-v1.schema.json); anything else is listed in rejected"}},
                    "log": {**log_schema, "default": "default"}}}}}},
            "responses": {"200": {"description": "Appended, duplicates and rejected events",
                                  "content": {"application/json": {"schema": answer}}},
                          **errors(400, 401, 403, 413, 415, 500), **too_many}}},
        "/v1/traces": otlp("OTLP/HTTP traces receiver: OpenTelemetry GenAI spans become ASP events",
                           "resourceSpans", "ExportTraceServiceResponse (partialSuccess names refused spans)"),
        "/v1/logs": otlp("OTLP/HTTP logs receiver: OpenTelemetry GenAI log records (the messages an "
                         "instrumentation emits as events) join the events of the spans they were emitted in",
                         "resourceLogs", "ExportLogsServiceResponse (partialSuccess names refused records)"),
    }
