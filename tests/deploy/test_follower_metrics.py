"""A follower (``usl ingest --follow``) runs as long as the agents it follows: it serves
``/metrics`` on ``USL_METRICS_PORT`` as the worker and sinks do. It counted what it appended and
dead-lettered but served nothing, so no panel or alert saw followed transcripts, nor a follower
that had stopped."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from deploy.testing import Stack, free_port

pytestmark = pytest.mark.kafka


def _line(kind: str, number: int, message: dict[str, Any]) -> bytes:
    return orjson.dumps({"parentUuid": None, "isSidechain": False, "sessionId": "f0110000-0000-4000-8000-000000000001",
                         "type": kind, "uuid": f"f0110000-0000-4000-8000-{number:012d}",
                         "timestamp": f"2026-12-01T09:00:{number:02d}Z", "message": message}) + b"\n"


def _sample(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    found = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_follower_serves_what_it_appends_and_dead_letters(make_settings: Any, tmp_path: Path) -> None:
    settings = make_settings()
    projects = tmp_path / "projects" / "-src-demo"
    projects.mkdir(parents=True)
    (projects / "s.jsonl").write_bytes(
        _line("user", 1, {"role": "user", "content": "Why does the cache go stale?"})
        + _line("assistant", 2, {"id": "m1", "role": "assistant", "model": "claude-sonnet-4-5",
                                 "content": [{"type": "text", "text": "Its key omits the tenant."}]})
        + b'{"type": "user", "uuid": "cut\n')  # not JSON: dead-lettered
    port = free_port()
    stack = Stack(settings)
    try:
        stack.start("follow", "ingest", "--follow", str(projects.parent),
                    env={"USL_METRICS_PORT": str(port), "USL_FOLLOW_IDLE_SECONDS": "1", "USL_FOLLOW_POLL_SECONDS": "0.2"})
        deadline, text = time.monotonic() + 120, ""
        while time.monotonic() < deadline:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.HTTPError:
                text = ""
            if _sample(text, "usl_records_total", stage="ingest") >= 4 and \
                    _sample(text, "usl_dead_letters_total", reason="invalid_json", stage="ingest") >= 1:
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"the follower's /metrics never counted its appends:\n{text}\n{stack.log_text('follow')}")
        assert "usl_build_info{" in text and "usl_chunks_emitted_total" not in text  # its own families only
        assert f"metrics on http://127.0.0.1:{port}/metrics" in stack.log_text("follow")
    finally:
        stack.close()
