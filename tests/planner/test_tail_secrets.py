"""A secret named in an indexed event and repeated bare in the L1 tail (policy 2.18's session
memory): the tail scan reads the session's prints from the structured generation below its cut,
so a ``latest`` answer, and the chunk once indexed, hold the marker, never the value; ``usl
export`` reads the session from its start and redacts the repeat alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.acl import parse_principal
from planner.engine import Planner
from planner.export import export
from tests.planner.corpus import IndexBuilder, acl, make_test_settings

ALICE = parse_principal("tenant:acme/user:alice/groups:eng/scopes:toolresults")
PASSWORD = "Quill9Heron-77zt"


def _events(log_id: str, turn: int, bodies: list[tuple[str, str | None, dict[str, Any]]]) -> list[dict[str, Any]]:
    session = "s-mem"
    out = []
    for index, (kind, role, fields) in enumerate([("turn.started", None, {}), *bodies, ("turn.ended", None, {})]):
        out.append({"eventId": f"{session}-{turn}-{index}", "logId": log_id, "sessionId": session, "type": kind,
                    "role": role, "turnId": f"{session}-t{turn}", "acl": acl("acme", "*"),
                    "time": f"2026-01-01T00:{turn:02d}:{index:02d}Z", "fields": fields})
    return out


def test_a_repeat_in_the_tail_is_removed_with_the_indexed_sessions_memory(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = make_test_settings(tmp_path, kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "mem")
    planner = Planner(settings, kafka_bootstrap)
    try:
        builder.append(_events("mem", 0, [
            ("message", "user", {"text": "the api cannot reach its database"}),
            ("tool.result", "tool", {"toolName": "Bash", "toolCallId": "c0", "status": "ok",
                                     "output": f"HOME=/root\nDB_PASSWORD={PASSWORD}\nPATH=/usr/bin\n"}),
        ]))
        builder.commit()
        builder.append(_events("mem", 1, [
            ("message", "user", {"text": f"retry the migration login with {PASSWORD} please"}),
            ("tool.result", "tool", {"toolName": "Bash", "toolCallId": "c1", "status": "error",
                                     "output": f"FATAL: password {PASSWORD} rejected during migration login"}),
        ]))
        request = {"query": "migration login", "log": "mem", "mode": "text", "toolResults": True, "k": 20}
        latest = planner.search({**request, "freshness": "latest"}, ALICE)
        tail = [hit for hit in latest["results"] if hit["origin"] == "tail"]
        assert tail and latest["freshness"]["tailScan"]
        assert all(PASSWORD not in hit["text"] for hit in latest["results"]), latest["results"]
        assert any("[REDACTED:env-dump]" in hit["text"] for hit in tail)
        builder.commit()
        indexed = planner.search({**request, "freshness": "indexed"}, ALICE)
        assert indexed["asOfSeq"] == latest["asOfSeq"]
        # The tail's texts are the index's, once it caught up.
        assert sorted(hit["text"] for hit in indexed["results"]) == sorted(hit["text"] for hit in latest["results"])
        rows = list(export(planner, ALICE, {"what": "sessions", "log": "mem"}).rows)
        assert len(rows) == 8 and not any(PASSWORD in str(row) for row in rows)
        assert sum("[REDACTED:" in str(row) for row in rows) == 3, rows
    finally:
        planner.close()
        builder.close()
