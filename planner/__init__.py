"""The query planner: one snapshot per query, hybrid ranking, explain, cursors, ACL, the HTTP
API, the CLI and the SQL attachment. Heavy modules load on first use."""

from __future__ import annotations

from typing import Any

__all__ = ["Planner", "PlannerError", "create_app"]


def __getattr__(name: str) -> Any:
    # Lazy: `usl ingest` must not pay for loading tantivy, faiss and the embedder.
    if name == "Planner":
        from planner.engine import Planner

        return Planner
    if name == "create_app":
        from planner.api import create_app

        return create_app
    if name == "PlannerError":
        from planner.exceptions import PlannerError

        return PlannerError
    raise AttributeError(f"module 'planner' has no attribute {name!r}")
