"""The names a log can have, in a module that imports nothing else: the CLI checks ``--log``
before it loads anything (``streams.asp`` compiles the schema validator, ~7 ms)."""

from __future__ import annotations

import re

__all__ = ["LOG_ID", "LOG_ID_HINT"]

LOG_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
"""The ASP schema's ``logId`` (fullmatch, streams/schemas/asp-v1.schema.json): the names an
event can carry, so the names a log can have."""
LOG_ID_HINT = "1-128 letters, digits, '.', '_' and '-', starting with a letter or digit"
