"""Trimming a chunk that straddles the query's cut to the events at or below it.

A chunk whose evidence spans ``minSeq <= cut < maxSeq`` holds events the answer may not show
(SPEC §7: no evidence with seq > asOfSeq). :func:`trim_chunk` keeps the evidence pieces with
``seq <= cut``, cuts their bytes out of ``text`` by their UTF-8 offsets, joins them with the
chunker's ``"\\n"`` separator and recomputes the offsets, so the result reads like a chunk the
chunker could have emitted at ``cut``. Everything derived from the dropped events goes: the end
time, the token count, and ``fields`` (rebuilt from the kept pieces' rendered headers, see
:func:`fields_of_text`), so neither a snippet nor a filter can reveal a later event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["fields_of_text", "trim_chunk"]

# Headers written by streams/chunking/render.py: "[tool.call NAME]", "[tool.result NAME STATUS]",
# "[ROLE] text", "[error]", "[session]", "[episode]".
_TOOL = re.compile(r"\[(tool\.call|tool\.result)(?: ([^\s\]]+))?(?: ([^\s\]]+))?\]")
_ROLE = re.compile(r"\[([A-Za-z_][\w-]*)\] ")
_NOT_ROLES = frozenset({"error", "session", "episode"})


def trim_chunk(chunk: Mapping[str, Any], cut: int) -> dict[str, Any] | None:
    """``chunk`` reduced to its evidence with ``seq <= cut``; None when nothing is left or its
    offsets do not cut valid UTF-8 out of its text (then it is left out and disclosed)."""
    evidence = chunk.get("evidence") or []
    kept = [piece for piece in evidence if int(piece["seq"]) <= cut]
    if not kept:
        return None
    if len(kept) == len(evidence):
        return dict(chunk)
    data = str(chunk.get("text") or "").encode("utf-8")
    pieces: list[bytes] = []
    new_evidence: list[dict[str, Any]] = []
    position = 0
    for piece in kept:
        start, end = int(piece["start"]), int(piece["end"])
        if not 0 <= start <= end <= len(data):
            return None
        part = data[start:end]
        new_evidence.append({**piece, "start": position, "end": position + len(part)})
        pieces.append(part)
        position += len(part) + 1
    try:
        text = b"\n".join(pieces).decode("utf-8")
    except UnicodeDecodeError:
        return None
    seqs = [int(piece["seq"]) for piece in new_evidence]
    trimmed = {key: value for key, value in chunk.items()
               if key not in ("endTime", "tokenCount", "fields", "evidenceEventIds")}
    trimmed.update({
        "text": text,
        "evidence": new_evidence,
        "evidenceEventIds": list(dict.fromkeys(piece["eventId"] for piece in new_evidence)),
        "minSeq": min(seqs),
        "maxSeq": max(seqs),
        # The chunk's eventTime is its last event's, which lies past the cut; the start time is
        # the earliest kept event's, never a later one.
        "eventTime": chunk.get("startTime") or chunk.get("eventTime"),
        "fields": fields_of_text([text.encode("utf-8")[e["start"]:e["end"]].decode("utf-8")
                                  for e in new_evidence if _is_event_start(e)]),
        "trimmed": True,
    })
    return trimmed


def fields_of_text(pieces: Sequence[str]) -> dict[str, list[str]]:
    """``roles``, ``toolNames``, ``statuses`` of rendered event texts, read from their headers.

    Only the first part of a split event carries its header; the caller passes those.
    """
    roles: set[str] = set()
    tools: set[str] = set()
    statuses: set[str] = set()
    for piece in pieces:
        tool = _TOOL.match(piece)
        if tool:
            if tool.group(2):
                tools.add(tool.group(2))
            if tool.group(1) == "tool.result" and tool.group(3):
                statuses.add(tool.group(3))
            continue
        role = _ROLE.match(piece)
        if role and role.group(1) not in _NOT_ROLES:
            roles.add(role.group(1))
    return {"roles": sorted(roles), "toolNames": sorted(tools), "statuses": sorted(statuses)}


def _is_event_start(piece: Mapping[str, Any]) -> bool:
    part = piece.get("part")
    return not part or int(part[0]) == 0
