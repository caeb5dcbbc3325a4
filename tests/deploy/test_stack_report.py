"""A failed test's report carries the end of the logs of the Stacks it used (tests/conftest.py):
its own, and a module's Stack shared by every test of the module (tests/planner/test_invariants_live.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.testing import Stack


def _stack(logs: Path, text: str) -> Stack:
    stack = Stack.__new__(Stack)  # no broker: the report reads only its logs
    stack.procs, stack.logs, stack.closed = {}, logs, False
    logs.mkdir(parents=True)
    (logs / "worker.log").write_text(text)
    return stack


def test_a_module_stack_still_open_is_reported_for_each_of_its_tests(tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    from tests.conftest import pytest_runtest_setup

    shared, own = _stack(tmp_path / "shared", "shared worker"), _stack(tmp_path / "own", "own worker")
    saved = list(Stack.made)
    try:
        Stack.made[:] = [shared, own]
        own.close()  # the earlier test closed its own Stack; the module's runs on
        pytest_runtest_setup(request.node)  # the module's next test starts
        assert Stack.made == [shared]
        assert shared.log_tails() == {"worker": "shared worker"}
    finally:
        Stack.made[:] = saved
