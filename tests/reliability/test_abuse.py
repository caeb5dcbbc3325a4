"""The fault suite's abuse cases alone (SPEC §10, invariants 10 and 11), one round each against a
stack with its own broker: another tenant's writes to a private session and an open turn dated
2099 are contained, with nothing lost, duplicated or stalled. ``test_faults.py`` runs them with
every other kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability import run_suite
from reliability.report import render

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1200)]

ABUSE = ("foreign-tenant", "far-future-time")


def test_the_abuse_cases_are_contained(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_suite(rounds=1, seed=11, kinds=ABUSE, kills_per_round=1, home=tmp_path / "abuse",
                       recovery_timeout=180.0, tmpfs_mb=64, sessions_per_batch=2,
                       pause_seconds=1.5, pace=0.4, log=lines.append)
    context = "\n".join(lines) + "\n\n" + render(result, "pytest tests/reliability/test_abuse.py")
    assert sorted(f.kind for f in result.faults) == sorted(ABUSE), context
    for fault in result.faults:
        assert fault.survived, (fault, context)
        assert not [note for note in fault.notes if note.startswith("FAIL")], (fault, context)
    totals = result.totals()
    assert totals["lost"] == 0 and totals["duplicated"] == 0 and totals["regressions"] == 0, context
    assert not result.final["problems"], context
