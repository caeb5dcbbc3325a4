"""A line of one chat message whose role the chat API does not know (an agent framework's own,
``"critic"``) inside a run of message lines is rejected for its role, and the run goes on: one
conversation, as a cut or unreadable line inside a run leaves it."""

from __future__ import annotations

import json
from pathlib import Path

from streams.follow import Follower, PositionStore
from streams.importers import Accepted, Rejected, iter_records
from streams.testing import Clock, MemoryL1
from tests.streams.follow_kit import write_as_written

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "openai_chat" / "conversations.jsonl"
CRITIC = {"role": "critic", "content": "The agent should compare both versions before answering."}


def _logged_one_message_a_line(tmp_path: Path) -> tuple[Path, list[dict[str, object]]]:
    """The fixture's first tool-calling run as an agent logs it, a message a line, with the
    framework's critic message after its third message."""
    messages = json.loads(FIXTURE.read_text(encoding="utf-8").splitlines()[0])["messages"]
    lines = [*messages[:3], CRITIC, *messages[3:]]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path, messages


def test_an_unknown_role_inside_a_run_of_message_lines_keeps_one_conversation(tmp_path):
    """Found importing a tool-calling run logged a message a line with a critic's line in it: the
    line was read as a conversation record, rejected for "missing field 'messages'", and the
    messages after it were a second session."""
    path, messages = _logged_one_message_a_line(tmp_path)
    items = list(iter_records(path))
    accepted = [item.event for item in items if isinstance(item, Accepted)]
    assert len({event["sessionId"] for event in accepted}) == 1
    rejected = [(item.record, item.reason) for item in items if isinstance(item, Rejected)]
    assert rejected == [("run.jsonl:4", "field 'messages[3].role' is 'critic', not one of "
                                        "system, developer, user, assistant, tool, function")]
    texts = json.dumps([event.get("fields") for event in accepted])
    assert json.dumps(messages[-1]["content"])[1:-1] in texts


def test_a_followed_run_with_an_unknown_role_appends_what_a_one_shot_import_appends(tmp_path):
    path, _messages = _logged_one_message_a_line(tmp_path)
    content = path.read_bytes()
    root = tmp_path / "live"
    root.mkdir()
    live = root / path.name
    live.write_bytes(b"")
    l1, clock = MemoryL1(), Clock()
    tail = Follower([root], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0, clock=clock)
    tail.poll()
    write_as_written(live, content.splitlines(keepends=True), tail, clock)
    one_shot = {item.event["eventId"] for item in iter_records(live) if isinstance(item, Accepted)}
    assert set(l1.counts()) == one_shot and max(l1.counts().values()) == 1
    assert len({event["sessionId"] for event in l1.log}) == 1
    assert [letter.record for letter in l1.dead] == ["run.jsonl:4"]


def test_a_line_of_one_message_with_an_unknown_role_alone_says_so(tmp_path):
    """Outside a run (no message line before it) the line is no conversation: its reason names
    the role, not only the missing ``messages``."""
    path = tmp_path / "alone.jsonl"
    path.write_text(json.dumps({"id": "c1", "messages": [{"role": "user", "content": "hi"}]}) + "\n"
                    + json.dumps(CRITIC) + "\n", encoding="utf-8")
    reasons = [item.reason for item in iter_records(path) if isinstance(item, Rejected)]
    assert len(reasons) == 1 and "'critic'" in reasons[0]
