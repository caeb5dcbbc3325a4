"""The registry of index kinds: each kind's name, in the order status and docs list them, and
the writer it builds.

The names are also the metric labels ``streams.metrics.INDEX_KINDS`` declares (streams cannot
import sinks); a test checks both agree. Writers are imported on use, so this module is light
and a process loads only the engines of the kinds it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sinks.exceptions import SinkError
from streams.settings import Settings

if TYPE_CHECKING:  # the writer contract imports pyarrow; status and the CLI need only the names
    from sinks.writer import IndexWriter

__all__ = ["ALL_KINDS", "WRITERS", "make_writer"]


def _text(settings: Settings) -> IndexWriter:
    from sinks.text_writer import TextWriter

    return TextWriter(settings.text_engine)


def _vector(settings: Settings) -> IndexWriter:
    from sinks.vector_writer import VectorWriter

    return VectorWriter(settings)


def _structured(settings: Settings) -> IndexWriter:
    from sinks.structured import StructuredWriter

    return StructuredWriter()


def _analytics(settings: Settings) -> IndexWriter:
    from sinks.analytics import AnalyticsWriter

    return AnalyticsWriter()


def _toolresults(settings: Settings) -> IndexWriter:
    from sinks.toolresults import ToolResultsWriter

    return ToolResultsWriter()


WRITERS: dict[str, Callable[[Settings], IndexWriter]] = {
    "text": _text, "vector": _vector, "structured": _structured,
    "analytics": _analytics, "toolresults": _toolresults,
}
ALL_KINDS: tuple[str, ...] = tuple(WRITERS)


def make_writer(kind: str, settings: Settings) -> IndexWriter:
    """The writer for one index kind, configured from settings."""
    try:
        factory = WRITERS[kind]
    except KeyError:
        raise SinkError(f"unknown index kind {kind!r}; use one of {', '.join(ALL_KINDS)}") from None
    return factory(settings)
