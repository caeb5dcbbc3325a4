"""OpenAI chat: a logged embeddings request is no conversation.

``{"model", "input": [strings]}`` is what an embeddings request sends; it was read as a Responses
API request, so each such record created an empty session (session.started, session.ended) and
dead-lettered every string as ``messages[i] must be an object, not str``.
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, Rejected, detect_format, iter_records

EMBEDDINGS = {
    "request": {"method": "POST", "url": "http://localhost:11434/api/embeddings", "headers": {},
                "body": {"model": "all-minilm:l6-v2", "input": ["What inspires neural networks?", "Second text"]}},
    "response": {"body": {"__type__": "ollama._types.EmbedResponse",
                          "__data__": {"model": "all-minilm:l6-v2", "embeddings": [[0.1, -0.2], [0.3, 0.4]]}}},
}


def test_an_embeddings_request_is_one_reject_and_no_session(tmp_path: Path) -> None:
    path = tmp_path / "embed.jsonl"
    chat = {"request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            "response": {"id": "chatcmpl-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}}
    path.write_text(json.dumps(chat) + "\n" + json.dumps(EMBEDDINGS) + "\n")
    results = list(iter_records(path))
    events = [r.event for r in results if isinstance(r, Accepted)]
    rejected = [r for r in results if isinstance(r, Rejected)]
    assert {e["sessionId"] for e in events} == {"chatcmpl-1"}
    assert [(r.record, r.reason) for r in rejected] == [
        ("embed.jsonl:2", "missing field 'messages' (a list of chat messages)")]
    alone = tmp_path / "embed_only.json"
    alone.write_text(json.dumps(EMBEDDINGS["request"]["body"]))
    try:
        detect_format(alone)
    except Exception as exc:  # ImportFormatError: a directory import skips and lists such a file
        assert "cannot tell the format" in str(exc)
    else:
        raise AssertionError("an embeddings request was taken for a conversation")
