"""Lineage under the ACL: the edges reachable from one entity through readable sessions only.

:meth:`sinks.structured.StructuredReader.lineage` walks every edge at or below ``asOfSeq``,
whoever's they are. This module keeps an edge only when nothing about it belongs to a session
the caller cannot read:

- the session whose event declared it is readable;
- ``session-parent``: both sessions are readable (a hidden parent's id is never shown);
- ``run-session`` / ``episode-session`` (session → its run or episode): the session is readable
  (the run or episode id was declared by that session's own events);
- ``event-cause``: both events belong to readable sessions (an event unknown at ``asOfSeq``
  counts as unreadable);
- any other kind: dropped (fail closed).

Then it walks again from the entity over the kept edges only, so an entity reachable only
through a hidden session is not reached, and depths count kept edges. The reader's walk is a
superset of this one (every kept path is one of its paths, never shorter), so walking its
answer again loses nothing; both stop at depth :data:`MAX_DEPTH`. The reader is asked one level
deeper, so :func:`lineage_walk` knows whether the cap left edges out (``cut``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import Any, Literal

import duckdb
import pyarrow as pa

from sinks.shard_tables import GenerationDirs, shard_scan_sql
from sinks.structured import SCHEMAS, StructuredReader

__all__ = ["LINEAGE_SCHEMA", "MAX_DEPTH", "lineage_walk"]

MAX_DEPTH = 64
"""Deepest edge returned; the structured reader's walk stops at the same depth."""

LINEAGE_SCHEMA = pa.schema([
    ("kind", pa.string()), ("fromId", pa.string()), ("toId", pa.string()), ("seq", pa.int64()),
    ("sessionId", pa.string()), ("depth", pa.int64()),
])


def lineage_walk(
    structured_gen_dir: GenerationDirs,
    entity_id: str,
    direction: Literal["ancestors", "descendants"],
    *,
    as_of_seq: int,
    readable: Collection[str],
    reader: StructuredReader | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Edges reachable from ``entity_id`` through sessions in ``readable``, at ``as_of_seq``,
    and whether the depth cap left readable edges out (an edge at depth :data:`MAX_DEPTH` + 1
    exists): the answer is then incomplete.

    Rows: ``kind, fromId, toId, seq, sessionId, depth``, ordered by depth, seq, kind, fromId,
    toId. An entity of a hidden session (or one that does not exist) has no edges. A sharded
    structured index (every shard's generation in ``structured_gen_dir``) is read as one.
    """
    allowed = set(readable)
    own = reader is None
    reader = StructuredReader(structured_gen_dir) if reader is None else reader
    try:
        edges = reader.lineage(entity_id, direction, as_of_seq, max_depth=MAX_DEPTH + 1)
    finally:
        if own:
            reader.close()
    event_ids = {edge[end] for edge in edges if edge["kind"] == "event-cause"
                 for end in ("fromId", "toId")}
    owners = _event_owners(structured_gen_dir, event_ids, as_of_seq)
    kept = [edge for edge in edges if _admissible(edge, allowed, owners)]
    walked = _walk(entity_id, direction, kept, MAX_DEPTH + 1)
    within = [edge for edge in walked if edge["depth"] <= MAX_DEPTH]
    return within, len(within) < len(walked)


def _admissible(edge: dict[str, Any], readable: set[str], owners: dict[str, str]) -> bool:
    if edge["sessionId"] not in readable:
        return False
    kind = edge["kind"]
    if kind == "session-parent":
        return edge["fromId"] in readable and edge["toId"] in readable
    if kind in ("run-session", "episode-session"):
        return edge["fromId"] in readable
    if kind == "event-cause":
        return owners.get(edge["fromId"]) in readable and owners.get(edge["toId"]) in readable
    return False


def _walk(entity_id: str, direction: str, edges: list[dict[str, Any]],
          max_depth: int = MAX_DEPTH) -> list[dict[str, Any]]:
    """Breadth first from ``entity_id``: each edge once, at the depth it is first reached."""
    near, far = ("fromId", "toId") if direction == "descendants" else ("toId", "fromId")
    leaving: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for edge in edges:
        leaving[edge[near]].append(edge)
    reached: dict[tuple[str, str, str], dict[str, Any]] = {}
    frontier, seen, depth = [entity_id], {entity_id}, 1
    while frontier and depth <= max_depth:
        following = []
        for node in frontier:
            for edge in leaving.get(node, ()):
                key = (edge["kind"], edge["fromId"], edge["toId"])
                if key in reached:
                    continue
                reached[key] = {"kind": edge["kind"], "fromId": edge["fromId"],
                                "toId": edge["toId"], "seq": int(edge["seq"]),
                                "sessionId": edge["sessionId"], "depth": depth}
                if edge[far] not in seen:
                    seen.add(edge[far])
                    following.append(edge[far])
        frontier, depth = following, depth + 1
    return sorted(reached.values(), key=lambda e: (e["depth"], e["seq"], e["kind"], e["fromId"],
                                                   e["toId"]))


def _event_owners(gen_dir: GenerationDirs, event_ids: set[str], as_of_seq: int) -> dict[str, str]:
    """eventId → the session of the event, for the ids the generation holds at seq <= as_of."""
    if not event_ids:
        return {}
    sql = (f"SELECT eventId, arg_min(sessionId, seq) FROM "
           f"{shard_scan_sql(gen_dir, 'sessions', SCHEMAS['sessions'])} "
           "WHERE seq <= $as_of AND eventId IN (SELECT unnest($ids)) GROUP BY eventId")
    with duckdb.connect(":memory:") as con:
        rows = con.execute(sql, {"as_of": int(as_of_seq), "ids": sorted(event_ids)}).fetchall()
    return {event_id: session_id for event_id, session_id in rows}
