"""Turns framed around loose events, so that no session-level chunk unit is left open.

An event that names no turn or episode (no ``turnId`` / ``episodeId``) belongs to its session's
run of session-level events, one chunk unit that closes only when another unit of the session
starts, at ``session.ended``, or once the log's clock is G (``USL_IDLE_GAP_SECONDS``) past it
(SPEC §5). A run that nothing follows stays open: on a quiet log it is never searchable under
``indexed``, and meanwhile it holds back every later event of its L1 partition. The writers of
events that may come without turns close such runs. The receivers (``POST /v1/events``,
``POST /v1/traces``) frame a request's trailing run in a turn of its own: the events get a
``turnId`` (and the frame their ``runId``), with a ``turn.started`` before the first and a
``turn.ended`` after the last. An ASP file's events are taken as they are, so a file that ends
in a loose run gets an empty turn after it (:class:`LooseTails`), which closes the run's unit
as any next unit of the session would. Either adds only the close: the chunks are the same.

Ids are deterministic. A frame's turn derives from its first event and its end also from its
last one (as an importer's end names the turn's last event), so a retried request frames the same
turn; a closing turn derives from the run's last event, so a re-imported file closes the same run
and a file that grew with more loose events is closed again after them.
"""

from __future__ import annotations

from typing import Any

from streams.asp import validate_event
from streams.importers.base import stable_id

__all__ = ["LooseTails", "frame_loose_events"]


def _in_unit(event: dict[str, Any]) -> bool:
    """Whether ``event`` belongs to a turn or an episode (or opens or closes one)."""
    return bool(event.get("turnId") or event.get("episodeId")) or str(event.get("type")).startswith(
        ("turn.", "episode."))


def _renders(event: dict[str, Any]) -> bool:
    """Whether ``event`` has text for a chunk (what opens a session-level unit)."""
    from streams.chunking.render import render_event

    return render_event(event) is not None


def _frame_id(first: dict[str, Any]) -> str:
    return stable_id("turn", first["logId"], first["sessionId"], "events", first["eventId"])


def _marker(kind: str, event_id: str, turn_id: str, like: dict[str, Any], time: str) -> dict[str, Any]:
    marker: dict[str, Any] = {"eventId": event_id, "logId": like["logId"], "sessionId": like["sessionId"],
                              "type": kind, "turnId": turn_id, "time": time, "fields": {}}
    marker.update((key, like[key]) for key in ("acl", "runId") if key in like)
    if kind == "turn.started":
        marker["role"] = "user"
    return validate_event(marker)


def _frame_start(first: dict[str, Any], turn_id: str) -> dict[str, Any]:
    """The ``turn.started`` of a frame whose first event is ``first``."""
    return _marker("turn.started", stable_id("usl", turn_id, "started"), turn_id, first, first["time"])


def _frame_end(last: dict[str, Any], turn_id: str) -> dict[str, Any]:
    """The ``turn.ended`` of a frame whose last event is ``last`` (timed at it)."""
    return _marker("turn.ended", stable_id("usl", turn_id, "ended", last["eventId"]), turn_id, last, last["time"])


def frame_loose_events(checked: list[tuple[int, dict[str, Any]]]) -> tuple[list[tuple[int | None, dict[str, Any]]], int]:
    """A receiver's request (``(index, event)`` in order) with each session's trailing loose
    events framed: those after the session's last event in a turn or episode in the request
    (all of them when it has none) that have text; a ``session.started`` only when nothing else
    of its session is there (the turn that follows it closes its unit). Markers come with index
    None. Loose events before a turn are closed by that turn and left as they are. Returns the
    list and the number of turns framed. A turn the request ends before more of its events
    (out of order) gets a ``turn.ended`` after them (:func:`_reopened_turns`)."""
    loose: dict[str, list[int]] = {}
    openings: dict[str, list[int]] = {}  # a session.started that renders (its title)
    for position, (_, event) in enumerate(checked):
        session = event["sessionId"]
        if _in_unit(event):
            loose[session] = []  # what came before is closed by this unit
            openings[session] = []
        elif _renders(event):
            (openings if event["type"] == "session.started" else loose).setdefault(session, []).append(position)
    frames = {session: positions for session in sorted({*loose, *openings})
              if (positions := loose.get(session) or openings.get(session))}
    reopened = _reopened_turns(checked)
    if not frames and not reopened:
        return list(checked), 0
    starts: dict[int, dict[str, Any]] = {}
    ends: dict[int, dict[str, Any]] = {position: _frame_end(checked[position][1], turn_id)
                                       for turn_id, position in reopened.items()}
    members: dict[int, str] = {}
    for positions in frames.values():
        first, last = checked[positions[0]][1], checked[positions[-1]][1]
        turn_id = _frame_id(first)
        starts[positions[0]] = _frame_start(first, turn_id)
        ends[positions[-1]] = _frame_end(last, turn_id)
        members.update(dict.fromkeys(positions, turn_id))
    framed: list[tuple[int | None, dict[str, Any]]] = []
    for position, (index, event) in enumerate(checked):
        if position in starts:
            framed.append((None, starts[position]))
        framed.append((index, {**event, "turnId": members[position]} if position in members else event))
        if position in ends:
            framed.append((None, ends[position]))
    return framed, len(frames)


def _reopened_turns(checked: list[tuple[int, dict[str, Any]]]) -> dict[str, int]:
    """turnId -> position of the last event of each turn that the request ends and then goes on
    with (``turn.ended`` before the turn's other events, a client that sends them out of order),
    with no ``turn.ended`` after them. Those events would open the turn's chunk unit again with
    nothing to close it: on a quiet log never searchable under ``indexed``, holding back every
    later event of the log. A ``turn.ended`` after the last of them closes it, as an importer
    closes a turn that goes on after its end (its id names that event: a retry adds nothing)."""
    ended: set[str] = set()
    reopened: dict[str, int] = {}
    for position, (_, event) in enumerate(checked):
        turn = event.get("turnId")
        if not turn or event.get("episodeId"):
            continue  # an episode's events are its unit, whatever their turn
        if event["type"] == "turn.ended":
            ended.add(turn)
            reopened.pop(turn, None)
        elif turn in ended:
            reopened[turn] = position
    return reopened


class LooseTails:
    """The sessions of a stream (a file read in order) that end in a run of loose events with
    text, and the empty turn that closes each such run at the end of the input: a
    ``turn.started`` / ``turn.ended`` pair of a turn of its own, which starts another unit of
    the session and so closes the loose run's, without changing any event of the input. Its ids
    derive from the run's last event, so a file that grew with more loose events is closed
    again after them."""

    def __init__(self) -> None:
        self._tails: dict[str, dict[str, Any]] = {}  # session -> last loose event with text

    def feed(self, event: dict[str, Any]) -> None:
        session = event["sessionId"]
        if _in_unit(event) or event.get("type") == "session.ended":
            self._tails.pop(session, None)  # a unit of its own closes the loose run
        elif _renders(event):
            self._tails.pop(session, None)  # kept in the order the runs' last events came
            self._tails[session] = event

    def finish(self) -> list[dict[str, Any]]:
        """The closing turns' markers, in the order their runs' last events came (the runs are
        then forgotten)."""
        closers = self.closers()
        self._tails.clear()
        return closers

    def closers(self) -> list[dict[str, Any]]:
        """:meth:`finish`'s markers, the runs kept (a follower's cursor reads on after them)."""
        closers = []
        for last in self._tails.values():
            turn_id = stable_id("turn", last["logId"], last["sessionId"], "close", last["eventId"])
            # The end's id needs no eventId of its own: the turn's id already names the run's last event.
            closers += [_frame_start(last, turn_id),
                        _marker("turn.ended", stable_id("usl", turn_id, "ended"), turn_id, last, last["time"])]
        return closers
