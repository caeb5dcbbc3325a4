"""The rule machinery: a rule finds one kind of secret and replaces it with its marker.

A :class:`Rule` runs only when one of its literal *triggers* occurs in the text (a C-speed
``in`` test), so a text pays for the few rules whose prefixes it contains, not for all of them.
Replacements are markers that no rule matches again, which makes redaction idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "MARKER_PREFIX",
    "USER_MARKER",
    "RegexRule",
    "Rule",
    "is_marker_at",
    "marker",
]

MARKER_PREFIX = "[REDACTED:"
USER_MARKER = "[USER]"

Check = Callable[["re.Match[str]"], bool]


def marker(rule_name: str) -> str:
    """The replacement text of ``rule_name``: ``[REDACTED:<rule>]``."""
    return f"{MARKER_PREFIX}{rule_name}]"


def is_marker_at(text: str, position: int) -> bool:
    """True when a replacement marker starts at ``position`` of ``text``."""
    return text.startswith(MARKER_PREFIX, position) or text.startswith(USER_MARKER, position)


@dataclass(frozen=True, eq=False)
class Rule:
    """One named detector. Subclasses implement :meth:`apply`.

    ``triggers`` are literal substrings searched in the text as is; ``lower_triggers`` are
    searched in the lower-cased text. A rule with no triggers at all always runs.
    """

    name: str
    triggers: tuple[str, ...] = ()
    lower_triggers: tuple[str, ...] = ()
    description: str = ""

    def fingerprint(self) -> list[str]:
        """What identifies this rule's behaviour in the policy hash."""
        return [self.name, *self.triggers, *self.lower_triggers]

    def apply(self, text: str, hits: dict[str, int]) -> str:
        """Return ``text`` with this rule's findings replaced; count them in ``hits`` by rule."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class RegexRule(Rule):
    """A rule defined by one compiled pattern.

    ``group`` names the part of the match that is replaced (0: the whole match; a group name:
    only that value, so ``postgres://app:s3cret@db`` keeps its user and host). ``check`` may
    reject a match (an entropy test, a base64 decode) after the regex found it.
    ``replacement`` overrides the marker (home directories use ``[USER]``).
    """

    pattern: re.Pattern[str] = field(default=re.compile(r"(?!)"))
    group: int | str = 0
    check: Check | None = None
    replacement: str | None = None

    def fingerprint(self) -> list[str]:
        check = getattr(self.check, "__qualname__", "")
        return [*super().fingerprint(), self.pattern.pattern, str(self.pattern.flags), str(self.group), check]

    def apply(self, text: str, hits: dict[str, int]) -> str:
        found = 0
        group = self.group
        check = self.check
        new = self.replacement if self.replacement is not None else marker(self.name)

        def replace(match: re.Match[str]) -> str:
            nonlocal found
            start, end = match.span(group)
            if start < 0 or start == end or is_marker_at(text, start):
                return match.group(0)
            if check is not None and not check(match):
                return match.group(0)
            found += 1
            if group == 0:
                return new
            whole = match.group(0)
            offset = match.start()
            return whole[: start - offset] + new + whole[end - offset:]

        result = self.pattern.sub(replace, text)
        if not found:
            return text
        hits[self.name] = hits.get(self.name, 0) + found
        return result
