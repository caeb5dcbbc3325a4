"""Each package's public surface is exactly what its ``__all__`` lists, and all of it resolves."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "streams": {"ASP_VERSION", "Settings", "USLError", "validate_event"},
    "sinks": {"GenerationStore", "Manifest", "SinkError"},
    "planner": {"Planner", "PlannerError", "create_app"},
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_all_lists_the_public_surface(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == PUBLIC[package]
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_errors_share_one_root() -> None:
    from planner.exceptions import PlannerError
    from sinks.exceptions import SinkError
    from streams.exceptions import USLError

    assert issubclass(SinkError, USLError)
    assert issubclass(PlannerError, USLError)
