"""OpenAI chat: two different conversations of one file under the same ``id``.

Ids are reused more often than one would think (a mock or local server's constant
``chatcmpl-123``, a regenerated branch exported with its conversation's id). The session of a
conversation is its ``id`` and its eventIds come from (session, message position), so the second
conversation's events had the first's eventIds: ``usl ingest`` counted them "already in L1" and
they were lost without a dead letter. Repeats and later steps of one run keep sharing the session.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from streams.importers import Accepted, iter_records

FIRST = [{"role": "user", "content": "first chat about volcanoes erupting"},
         {"role": "assistant", "content": "Volcanoes erupt when magma rises."}]
SECOND = [{"role": "user", "content": "second chat about glaciers melting"},
          {"role": "assistant", "content": "Glaciers melt as temperatures rise."}]


def _events(path: Path) -> list[dict]:
    return [r.event for r in iter_records(path) if isinstance(r, Accepted)]


def test_another_conversation_under_a_used_id_is_a_session_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    lines = [{"id": "chatcmpl-123", "messages": FIRST}, {"id": "chatcmpl-123", "messages": SECOND},
             {"id": "chatcmpl-123", "messages": FIRST}]  # a repeat of the first: its copies
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    events = _events(path)
    texts = {(e["sessionId"], e["fields"]["text"]) for e in events if e["type"] == "message"}
    assert texts == {("chatcmpl-123", FIRST[0]["content"]), ("chatcmpl-123", FIRST[1]["content"]),
                     ("chatcmpl-123@2", SECOND[0]["content"]), ("chatcmpl-123@2", SECOND[1]["content"])}
    ids = Counter(e["eventId"] for e in events)
    # The repeat re-emits the first conversation's eventIds (duplicates L1 drops), nothing else.
    first_ids = {e["eventId"] for e in events if e["sessionId"] == "chatcmpl-123"}
    assert {i for i, n in ids.items() if n > 1} <= first_ids
    assert not {e["eventId"] for e in events if e["sessionId"] == "chatcmpl-123@2"} & first_ids


def test_steps_of_one_run_under_one_id_stay_one_session(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    more = [*FIRST, {"role": "user", "content": "and in Iceland?"}, {"role": "assistant", "content": "Often."}]
    other = {"id": "other", "messages": SECOND}
    lines = [{"id": "run-1", "messages": FIRST}, other, {"id": "run-1", "messages": more}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    sessions = {e["sessionId"] for e in _events(path)}
    assert sessions == {"run-1", "other"}
