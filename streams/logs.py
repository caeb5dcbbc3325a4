"""One log format for every long-running USL process (worker, sinks).

Each line carries a timestamp, level and logger name, so the worker's log and the sinks' read
alike and an operator can line up events across them. A process's own lifecycle lines
(where it serves ``/metrics``, a line switch) are INFO: shown at the default level, since its
own logger is opened to INFO while libraries (faust, kafka) stay at the level asked for.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["LOG_FORMAT", "configure_logging", "faust_logging_config", "level_of"]

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"

# The names `usl worker --loglevel` accepts that the logging module does not know.
_ALIASES = {"crit": "CRITICAL", "warn": "WARNING"}


def level_of(name: str | int) -> int:
    """The logging level of a ``--loglevel`` value (crit | error | warn | info | debug) or number."""
    if isinstance(name, int):
        return name
    text = _ALIASES.get(name.lower(), name.upper())
    level = logging.getLevelName(text)
    if not isinstance(level, int):
        raise ValueError(f"unknown log level {name!r}: use crit, error, warn, info or debug")
    return level


def configure_logging(own_logger: str, level: str | int = logging.WARNING) -> None:
    """Log to stderr in :data:`LOG_FORMAT` at ``level``; ``own_logger`` (``usl.sink``,
    ``usl.worker``) also logs INFO unless a level above WARNING was asked for."""
    number = level_of(level)
    logging.basicConfig(level=number, format=LOG_FORMAT)
    logging.getLogger("kafka").setLevel(max(number, logging.WARNING))
    logging.getLogger(own_logger).setLevel(logging.INFO if number <= logging.WARNING else number)


def faust_logging_config() -> dict[str, Any]:
    """A ``logging_config`` for ``faust.Worker`` that keeps :data:`LOG_FORMAT` once faust sets
    up logging: by default it replaces the root handler with one of its own format, and of its
    level, which would drop the INFO lines :func:`configure_logging` lets through. The root
    logger keeps the level faust is given."""
    return {"merge": True, "formatters": {"usl": {"format": LOG_FORMAT}},
            "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "usl"}}}
