"""Follow mode against the real stack: turns appended to a live Claude Code transcript become
searchable with ``freshness: indexed`` (the lag is printed), and a follower killed with SIGKILL
in the middle of a file and started again leaves every event in L1 exactly once."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from deploy.testing import Stack
from planner.acl import Principal
from planner.engine import Planner
from planner.exceptions import IndexUnavailable, NotFound
from sinks.watermarks import WatermarkFollower
from streams.importers import Accepted, iter_records
from streams.l1 import L1Reader
from streams.settings import Settings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

FOLLOW_ENV = {"USL_FOLLOW_IDLE_SECONDS": "1", "USL_FOLLOW_POLL_SECONDS": "0.2"}
READER = Principal(tenant="default", user="tester")


def turn_lines(session: str, number: int, word: str) -> bytes:
    """One human turn of a Claude Code transcript: the prompt and the reply, as two lines."""
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC) + timedelta(minutes=number)

    def line(kind: str, seconds: int, message: dict[str, Any]) -> bytes:
        moment = (start + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
        body = {"parentUuid": None, "isSidechain": False, "userType": "external", "sessionId": session,
                "type": kind, "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session}/{number}/{kind}")),
                "timestamp": moment, "message": message}
        return orjson.dumps(body) + b"\n"

    return line("user", 0, {"role": "user", "content": f"Please look at the {word} failure in step {number}."}) + \
        line("assistant", 2, {"id": f"msg_{number}", "type": "message", "role": "assistant",
                              "model": "claude-sonnet-4-5", "content": [
                                  {"type": "text", "text": f"The {word} failure comes from a stale cache."}]})


def l1_counts(settings: Settings) -> Counter[str]:
    reader = L1Reader(settings.bootstrap_servers or "", settings)
    try:
        return Counter(event["eventId"] for _seq, event in reader.read("default", 1))
    finally:
        reader.close()


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_live_transcript_is_searchable_and_a_killed_follower_leaves_each_event_once(make_settings, tmp_path):
    settings = make_settings(embedder="hash:64", tick_every_seqs=8)
    projects = tmp_path / "claude" / "projects" / "-home-dana-src-demo"
    projects.mkdir(parents=True)
    session = "7c1d2e3f-0000-4000-8000-00000000f011"
    live = projects / f"{session}.jsonl"
    live.write_bytes(b"")
    stack = Stack(settings)
    follower = planner = None
    try:
        stack.worker()
        stack.sinks("structured,text,vector")
        stack.start("follow", "ingest", "--follow", str(projects.parent), env=FOLLOW_ENV)
        follower = WatermarkFollower(settings.bootstrap_servers or "", settings).start()
        planner = Planner(settings, settings.bootstrap_servers or "", follower=follower)
        lags = []
        for number in range(4):
            word = f"quokka{number}zz"
            written = time.monotonic()
            with live.open("ab") as handle:
                handle.write(turn_lines(session, number, word))

            def found(word: str = word) -> dict[str, Any] | None:
                try:
                    answer = planner.search({"query": word, "freshness": "indexed", "mode": "text", "k": 5},
                                            READER)
                except (NotFound, IndexUnavailable):  # the log or its first generation is not there yet
                    return None
                hit = any(word in result["text"] for result in answer["results"])
                return answer if hit else None

            answer = wait_for(found, 120, f"turn {number} to be searchable with freshness indexed")
            assert answer["freshness"]["mode"] == "indexed"
            lags.append(time.monotonic() - written)
        print(f"\nappend -> searchable (freshness indexed, USL_FOLLOW_IDLE_SECONDS=1): "
              f"{', '.join(f'{lag:.2f}s' for lag in lags)}")

        # Kill -9 in the middle of a file: many turns written at once, the follower killed
        # while it works through them, then started again.
        with live.open("ab") as handle:
            for number in range(4, 300):
                handle.write(turn_lines(session, number, f"wombat{number}"))
        before = sum(l1_counts(settings).values())
        wait_for(lambda: sum(l1_counts(settings).values()) > before, 60, "the follower to start appending")
        stack.kill("follow")
        stack.start("follow-2", "ingest", "--follow", str(projects.parent), env=FOLLOW_ENV)
        expected = {i.event["eventId"] for i in iter_records(live) if isinstance(i, Accepted)}
        wait_for(lambda: set(l1_counts(settings)) >= expected, 180, "every event of the transcript in L1")
        time.sleep(2)  # anything appended twice would be there by now
        counts = l1_counts(settings)
        assert set(counts) == expected
        assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1][:5]
        print(f"after kill -9 and restart: {len(counts)} events in L1, each once")
    finally:
        if planner is not None:
            planner.close()
        if follower is not None:
            follower.stop()
        stack.close()
