"""Errors raised by USL Search.

Every error the project raises derives from :class:`USLError`, so callers can catch one type.
The hierarchy (packages add their own one-line subclasses in their ``exceptions.py``)::

    USLError
    ├── ConfigError            a setting is missing or malformed
    ├── BrokerError            the Kafka broker cannot be reached, started or administered
    ├── SchemaError            an ASP event does not satisfy the schema (names field + record)
    ├── ImportFormatError      an input file is not in the format it was declared as
    ├── RedactionError         the redaction stage could not process an event
    ├── ChunkingError          the chunker could not process an event
    ├── sinks.exceptions.SinkError ...
    └── planner.exceptions.PlannerError ...
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "ChunkingError",
    "ConfigError",
    "ImportFormatError",
    "RedactionError",
    "SchemaError",
    "USLError",
]


class USLError(Exception):
    """Root of every error USL Search raises on purpose."""


class ConfigError(USLError):
    """A setting is missing or malformed."""


class BrokerError(USLError):
    """The Kafka broker cannot be reached, started or administered."""


class SchemaError(USLError):
    """An event does not satisfy the ASP v1 schema.

    ``field`` is a JSON path into the event (``$.time``) and ``record`` says which input
    record it came from (``file.jsonl:17``), so the message tells the user what to fix.
    """

    def __init__(self, message: str, *, field: str | None = None, record: str | None = None) -> None:
        self.field = field
        self.record = record
        where = f"{record}: " if record else ""
        at = f" (field {field})" if field else ""
        super().__init__(f"{where}{message}{at}")
        self.reason = message


class ImportFormatError(USLError):
    """An input file is not in the format it was declared as."""


class NoJSONRecordsError(ImportFormatError):
    """An input file whose first lines hold no JSON record at all (a text log, notes): no format
    reads it, so it is refused whole, never dead-lettered line by line."""


class RedactionError(USLError):
    """The redaction stage could not process an event."""


class ChunkingError(USLError):
    """The chunker could not process an event."""
