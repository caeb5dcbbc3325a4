"""OpenAI chat: content parts whose text is not a plain string, and a part given alone.

The Assistants API (and thread exports turned into message lists) writes a text part as
``{"type": "text", "text": {"value": "...", "annotations": [...]}}``: its words were imported as
``[text]`` and lost. A content that is one part object instead of a list of them was imported as
its JSON, so an image part's base64 data became indexed text.
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, iter_records

DATA = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk" * 20


def test_assistants_text_values_and_lone_parts(tmp_path: Path) -> None:
    path = tmp_path / "thread.json"
    path.write_text(json.dumps({"id": "thread_abc", "messages": [
        {"role": "user", "content": [{"type": "text", "text": {"value": "Summarise the quarterly report",
                                                               "annotations": []}}]},
        {"role": "assistant", "content": [{"type": "text", "text": {
            "value": "Revenue grew eleven percent.", "annotations": [{"type": "file_citation", "text": "[1]"}]}}]},
        {"role": "user", "content": {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{DATA}"}}},
        {"role": "user", "content": {"type": "text", "text": "and this caption"}},
    ]}))
    texts = [r.event["fields"]["text"] for r in iter_records(path)
             if isinstance(r, Accepted) and r.event["type"] == "message"]
    assert texts == ["Summarise the quarterly report", "Revenue grew eleven percent.", "[image_url]",
                     "and this caption"]
    assert not any(DATA[:24] in text for text in texts)
