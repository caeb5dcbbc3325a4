"""Full-text engines of the text sink: tantivy (default) and whoosh (pure-Python alternative).

``get_engine(name)`` returns the process-wide engine of that name; engines cache opened
indexes, so sharing one instance shares the cache.
"""

from __future__ import annotations

import threading

from sinks.exceptions import UnknownEngineError
from sinks.text.base import TextDoc, TextEngine, TextHit, parse_query, to_text_doc

__all__ = ["DEFAULT_ENGINE", "ENGINES", "TextDoc", "TextEngine", "TextHit", "get_engine", "parse_query", "to_text_doc"]

DEFAULT_ENGINE = "tantivy"
ENGINES = ("tantivy", "whoosh")

_engines: dict[str, TextEngine] = {}
_lock = threading.Lock()


def get_engine(name: str = DEFAULT_ENGINE) -> TextEngine:
    """The engine called ``name`` ("tantivy" or "whoosh")."""
    key = (name or DEFAULT_ENGINE).strip().lower()
    with _lock:
        engine = _engines.get(key)
        if engine is not None:
            return engine
        # Imported on demand: a process using one engine never loads the other.
        if key == "tantivy":
            from sinks.text.tantivy_engine import TantivyEngine

            engine = TantivyEngine()
        elif key == "whoosh":
            from sinks.text.whoosh_engine import WhooshEngine

            engine = WhooshEngine()
        else:
            raise UnknownEngineError(
                f"unknown text engine {name!r}: choose one of {', '.join(ENGINES)} (USL_TEXT_ENGINE)"
            )
        _engines[key] = engine
        return engine
