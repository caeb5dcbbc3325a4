"""The fast part of the fault suite (``reliability``): one round of every fault kind, one kill
per kill round, on a small workload, against a stack with its own broker (the broker-restart
fault must not restart the test session's shared broker). Every fault must be survived with
nothing lost, nothing duplicated, no watermark regression and no bad answer.

The long run is ``make faults`` (``python -m reliability --rounds 2 --seed 1 --out RELIABILITY.md``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability import LOCAL_FAULT_KINDS, SCALED_OUT_FAULT_KINDS, run_suite
from reliability.report import render

# ~3-5 min on two idle cores (a JVM start, a broker restart and eight recoveries); far more
# when other suites load the machine, hence a timeout above the default 600 s.
pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1500)]


def test_one_round_of_every_fault_kind_is_survived(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_suite(rounds=1, seed=7, kinds=LOCAL_FAULT_KINDS, kills_per_round=1, home=tmp_path / "faults",
                       recovery_timeout=180.0, tmpfs_mb=64, sessions_per_batch=2,
                       pause_seconds=1.5, pace=0.4, log=lines.append)
    report = render(result, "pytest tests/reliability/test_faults.py")
    context = "\n".join(lines) + "\n\n" + report
    assert [f.kind for f in result.faults] and {f.kind for f in result.faults} == set(LOCAL_FAULT_KINDS), context
    totals = result.totals()
    assert totals["injected"] == len(LOCAL_FAULT_KINDS), context
    assert totals["lost"] == 0, context
    assert totals["duplicated"] == 0, context
    assert totals["regressions"] == 0, context
    assert totals["bad_answers"] == 0, context
    assert totals["survived"] == totals["injected"], context
    assert not result.final["problems"], context
    assert result.final["events"] > 0 and result.final["chunks"] > 0, context
    assert result.final["answered"] > 0, context
    for fault in result.faults:
        assert fault.recovery_seconds is not None, (fault, context)


def test_one_round_of_each_scaled_out_fault_is_survived(tmp_path: Path, java_and_maven: None) -> None:
    """The shard and object-store faults, on a stack with two sink shards per shardable kind
    publishing to the suite's own S3Proxy (started as its broker is): Java 17+ and Maven once."""
    lines: list[str] = []
    result = run_suite(rounds=1, seed=11, kinds=SCALED_OUT_FAULT_KINDS, kills_per_round=1,
                       home=tmp_path / "faults", recovery_timeout=180.0, tmpfs_mb=64,
                       sessions_per_batch=2, pause_seconds=1.5, pace=0.4, log=lines.append)
    context = "\n".join(lines) + "\n\n" + render(result, "pytest tests/reliability/test_faults.py")
    assert result.meta["object_store"] is True, context
    assert [p["sink_shards"] for p in result.meta["phases"]] == [2], context
    assert {f.kind for f in result.faults} == set(SCALED_OUT_FAULT_KINDS), context
    totals = result.totals()
    assert totals["lost"] == 0 and totals["duplicated"] == 0, context
    assert totals["regressions"] == 0 and totals["bad_answers"] == 0, context
    assert totals["survived"] == totals["injected"] == 3, context
    assert not result.final["problems"], context
    for fault in result.faults:
        # The store check ran after the round and found the published generations caught up.
        assert any(note.startswith("object store: live == local current") for note in fault.notes), context
