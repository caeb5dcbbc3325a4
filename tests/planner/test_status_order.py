"""``usl status`` never shows an index ahead of L1: it reads the watermarks before the committed
L1 seqs. A sink publishes a watermark only for seqs L1 already committed, so an L1 seq read
afterwards is at or above it; read the other way round, a commit between the two reads showed
builtThroughSeq 64 above l1CommittedSeq 50 with lag 0 (1 poll in 57 under load)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import planner.status as status
import sinks.watermarks
import streams.l1
from planner.status import INDEX_KINDS, Unindexed, collect_status
from streams.settings import Settings


class _World:
    """L1 and a sink that keeps up with it: each read of either sees 14 more seqs committed
    and indexed than the read before."""

    def __init__(self) -> None:
        self.seq = 50

    def advance(self) -> int:
        seen = self.seq
        self.seq += 14
        return seen


def test_a_poll_never_shows_a_watermark_above_the_committed_l1_seq(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    world = _World()

    class Reader:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.registry = type("Registry", (), {"logs": {"default": 0}, "close": lambda self: None})()

        def committed_seqs(self) -> dict[str, int]:
            return {"default": world.advance()}

        def close(self) -> None:
            pass

    class Watermarks:
        def __init__(self, *args: Any) -> None:
            pass

        def read(self) -> dict[tuple[str, str], dict[str, Any]]:
            through = world.advance()
            return {("default", kind): {"generationId": 3, "builtThroughSeq": through, "committedAt": 1.0,
                                        "line": "live"} for kind in INDEX_KINDS}

        def close(self) -> None:
            pass

    # collect_status imports these when called (a status the API answers needs no kafka).
    monkeypatch.setattr(streams.l1, "L1Reader", Reader)
    monkeypatch.setattr(streams.l1, "LogRegistry", lambda *args, **kwargs: None)
    monkeypatch.setattr(sinks.watermarks, "WatermarkReader", Watermarks)
    monkeypatch.setattr(status, "_unindexed", lambda *args: Unindexed())
    monkeypatch.setattr(status, "origins_of_watermark", lambda *args: ())
    monkeypatch.setattr(status.DeadLetterTally, "read", lambda *args: {})
    settings = Settings.from_env({}, home=tmp_path, topic_prefix="t.", bootstrap_servers="127.0.0.1:1")
    for _poll in range(3):
        entry = collect_status(settings, "127.0.0.1:1")["logs"]["default"]
        for kind, index in entry["indexes"].items():
            assert index["builtThroughSeq"] <= entry["l1CommittedSeq"], (kind, index, entry["l1CommittedSeq"])
    kept = status.StatusSources()  # the API's: the same readers for every poll
    for _poll in range(3):
        entry = collect_status(settings, "127.0.0.1:1", sources=kept)["logs"]["default"]
        for kind, index in entry["indexes"].items():
            assert index["builtThroughSeq"] <= entry["l1CommittedSeq"], (kind, index, entry["l1CommittedSeq"])
