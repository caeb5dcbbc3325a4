"""The rule machinery: a rule finds one kind of secret and replaces it with its marker.

Speed comes from never running a regex over a text it cannot match. Python's regex engine
is fast only when a pattern starts with a literal (it skips ahead to it in C) and slow when
it must try a pattern at every position, so a rule runs only when its *gate* says so:

- ``triggers``: literal substrings, tested with ``in`` (C speed);
- ``lower_triggers``: the same, in the ASCII-lower-cased text (computed once per pass);
- ``gate``: one shared, literal-anchored regex standing for a family of prefixes, tested at
  most once per pass and text (:class:`Scan` caches it);
- none of these: the rule's own pattern starts with a literal and runs directly.

Before any of these, one Aho-Corasick automaton of every rule's ``literals`` (lower-cased
strings of which each text a rule changes holds one: token prefixes, vendor and assignment
keywords) scans the lower-cased text once in C (``streams.redaction.text``); a rule with
literals none of which occurs is skipped without a look at its gate. Literals only ever skip a
rule its gate would also have let through in vain, so they are not part of the policy hash.

Replacements are markers that no rule matches again, which makes redaction idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "LONG_TOKEN",
    "MARKER_PREFIX",
    "PLAIN_WORDS",
    "USER_MARKER",
    "RegexRule",
    "Rule",
    "Scan",
    "ascii_lower",
    "is_marker_at",
    "marker",
    "plain_words",
    "plain_words_fingerprint",
    "replace_spans",
]

MARKER_PREFIX = "[REDACTED:"
USER_MARKER = "[USER]"

Check = Callable[["re.Match[str]"], bool]

_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}

LONG_TOKEN = 16
"""Length of the run of token characters (ASCII letters, digits and ``_-=+/.``) that
:meth:`Scan.has_long_token` looks for."""
_ALNUM = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-=+/."
_ALNUM_AS_A = bytes(ord("a") if byte in _ALNUM else ord(" ") for byte in range(256))
_LONG_RUN = b"a" * LONG_TOKEN
# A literal head lets the engine skip ahead in C (a repeat's count would not).
_LONG_RUNS = re.compile(b"a" * (LONG_TOKEN - 1) + b"a+")


_WORD = r"(?:[A-Z]{0,8}[a-z]{2,}(?:[A-Z][a-z]{2,})*|[A-Z][a-z]|[A-Z]{2,}|[0-9]+)"
PLAIN_WORDS = re.compile(rf"{_WORD}(?:[._/:=-]+{_WORD})*[.:]?", re.ASCII)
"""Words, names and numbers joined by ``. _ / : = -`` (``FAILED``, ``TimeoutError``,
``README.md``, ``HTTP/1.1``, ``2026-01-05``, ``test_api.py``, ``EXIT_CODE=3``): what starts a
log's next line, never the rest of a random token (case mixed within a word, letters glued to
digits, a lone letter)."""
_WORDS_HAVE = re.compile(r"[A-Za-z]{2}|[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{2}:[0-9]{2}:[0-9]{2}", re.ASCII)


def plain_words(text: str) -> bool:
    """Whether ``text`` is :data:`PLAIN_WORDS` with a word of two letters or more in it, or a
    date or a time: digit groups alone (``8134-054-8``) may continue a wrapped token or card."""
    return PLAIN_WORDS.fullmatch(text) is not None and _WORDS_HAVE.search(text) is not None


def plain_words_fingerprint() -> list[str]:
    """What decides :func:`plain_words`, for the policy hash."""
    return [PLAIN_WORDS.pattern, _WORDS_HAVE.pattern]


def marker(rule_name: str) -> str:
    """The replacement text of ``rule_name``: ``[REDACTED:<rule>]``."""
    return f"{MARKER_PREFIX}{rule_name}]"


def is_marker_at(text: str, position: int) -> bool:
    """True when a replacement marker starts at ``position`` of ``text``."""
    return text.startswith(MARKER_PREFIX, position) or text.startswith(USER_MARKER, position)


def replace_spans(text: str, spans: Iterable[tuple[int, int, str]], hits: dict[str, int]) -> str:
    """``text`` with each ``(start, end, rule)`` span replaced by that rule's marker and counted
    in ``hits``, in order of start; a span that starts inside an earlier one, or where a marker
    already stands, is left out. ``text`` itself when nothing is replaced."""
    pieces: list[str] = []
    done = 0
    for start, end, rule in sorted(spans):
        if start < done or is_marker_at(text, start):
            continue
        pieces += (text[done:start], marker(rule))
        done = end
        hits[rule] = hits.get(rule, 0) + 1
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def ascii_lower(text: str) -> str:
    """``text`` with A-Z lower-cased and every position unchanged.

    ``str.lower`` is much faster but may change the length of non-ASCII text ("İ" becomes two
    code points), which would shift the positions keyword searches report.
    """
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


class Scan:
    """One text during one pass: its lower-cased form and gate results, computed on demand."""

    __slots__ = ("_bytes", "_gates", "_long", "_lower", "_runs", "literal_hits", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        # (end index, literal) of every rule literal in the lower-cased text, when the fast path
        # scanned for them (None: not scanned; rules then search on their own).
        self.literal_hits: list[tuple[int, str]] | None = None
        self._lower: str | None = None
        self._gates: dict[int, bool] = {}
        self._long: bool | None = None
        self._runs: list[tuple[int, int]] | None = None
        self._bytes: bytes | None = None

    def has_long_token(self) -> bool:
        """Whether the text holds a run of :data:`LONG_TOKEN` ASCII word characters, as
        nearly every key body does (tested at C speed on a translated copy of the bytes)."""
        if self._long is None:
            self._long = _LONG_RUN in self._classes()
        return self._long

    def long_runs(self) -> list[tuple[int, int]]:
        """``(start, end)`` of every run of :data:`LONG_TOKEN` or more ASCII word characters.

        Found with ``bytes.find`` on the translated copy, one byte per character (2.13: a
        non-ASCII character is one ``?``, so positions agree in every text); a long token's prefix
        is at the start of its run."""
        if self._runs is None:
            # The first place a run of 16 can match is its run's start: one C scan finds them all.
            self._runs = [match.span() for match in _LONG_RUNS.finditer(self._classes())]
        return self._runs

    def near_long_tokens(self) -> str:
        """The lower-cased text around each long run (the 24 characters before it, the run and
        the 24 after), joined by newlines: where the keyword of a rule whose secret is a long
        token must occur. The whole lower-cased text for non-ASCII texts."""
        if not self.text.isascii():
            return self.lower()
        lowered = self.lower()
        return "\n".join(lowered[max(0, start - 24): end + 24] for start, end in self.long_runs())

    def ascii_bytes(self) -> bytes:
        """The text as bytes, one per character: a non-ASCII character is ``?``."""
        if self._bytes is None:
            self._bytes = self.text.encode("ascii", "replace")
        return self._bytes

    def _classes(self) -> bytes:
        return self.ascii_bytes().translate(_ALNUM_AS_A)

    def lower(self) -> str:
        if self._lower is None:
            self._lower = ascii_lower(self.text)
        return self._lower

    def gate(self, pattern: re.Pattern[str]) -> bool:
        found = self._gates.get(id(pattern))
        if found is None:
            found = self._gates[id(pattern)] = pattern.search(self.text) is not None
        return found

    def wants(self, rule: Rule) -> bool:
        """Whether ``rule`` can match this text at all."""
        if rule.gate is None and not rule.triggers and not rule.lower_triggers:
            return True
        if rule.gate is not None and self.gate(rule.gate):
            return True
        text = self.text
        for literal in rule.triggers:
            if literal in text:
                return True
        if rule.lower_triggers:
            lowered = self.lower()
            for literal in rule.lower_triggers:
                if literal in lowered:
                    return True
        return False


@dataclass(frozen=True, eq=False)
class Rule:
    """One named detector. Subclasses implement :meth:`apply`; see the module for gates.

    ``repass`` says whether text this rule changed needs a confirming second pass (see
    ``streams.redaction.text``)."""

    name: str
    triggers: tuple[str, ...] = ()
    lower_triggers: tuple[str, ...] = ()
    gate: re.Pattern[str] | None = None
    description: str = ""
    # False when no replacement this rule makes can let a rule *earlier* in the order match
    # anew; text changed only by such rules needs no confirming second pass.
    repass: bool = True
    # Characters of which every match contains at least one; short texts containing none of
    # them skip the rule without any scan (empty: no such shortcut).
    needs: frozenset[str] = frozenset()
    # Lower-cased strings one of which every text this rule changes holds (empty: none known;
    # the triggers of a rule without a gate serve). A prefilter only: not in the fingerprint.
    literals: tuple[str, ...] = ()

    def fingerprint(self) -> list[str]:
        """What identifies this rule's behaviour in the policy hash."""
        gate = [] if self.gate is None else [self.gate.pattern]
        return [self.name, *self.triggers, *self.lower_triggers, *gate, "".join(sorted(self.needs))]

    def hit_names(self) -> tuple[str, ...]:
        """Every rule name this rule counts in ``hits``."""
        return (self.name,)

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        """Return ``scan.text`` with this rule's findings replaced; count them in ``hits``."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class RegexRule(Rule):
    """A rule defined by one compiled pattern.

    ``group`` names the part of the match that is replaced (0: the whole match; a group name:
    only that value, so ``postgres://app:s3cret@db`` keeps its user and host). ``check`` may
    reject a match (an entropy test, a base64 decode) after the regex found it.
    ``replacement`` overrides the marker (home directories use ``[USER]``). With ``anchored``
    the pattern is only tried where a ``lower_triggers`` keyword occurs (case-insensitive
    patterns cannot use the engine's literal skip-ahead). With ``to_line_end`` the replaced part
    runs to the end of its line (after a keyword, whatever the line holds): a keyword inside a
    part replaced starts no other match, and an anchored rule does not try it (2.21: each
    `Key Content :` of a line read the rest of the line, and 8 000 of them took 17 s).
    """

    pattern: re.Pattern[str] = field(default=re.compile(r"(?!)"))
    group: int | str = 0
    check: Check | None = None
    replacement: str | None = None
    anchored: bool = False
    to_line_end: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "_heads", command_heads(self.pattern))
        object.__setattr__(self, "_ahead", line_lookahead(self.pattern))

    def fingerprint(self) -> list[str]:
        check = getattr(self.check, "__qualname__", "")
        return [*super().fingerprint(), self.pattern.pattern, str(self.pattern.flags), str(self.group), check, str(self.anchored)]

    def matches(self, scan: Scan, done: Callable[[], int]) -> Iterable[re.Match[str]]:
        """The matches ``pattern.finditer`` finds in ``scan.text``, found without reading a part of
        the text again for each; ``done`` gives the end of the part last replaced (a ``to_line_end``
        rule starts none before it)."""
        heads: tuple[re.Pattern[str], ...] = self._heads  # type: ignore[attr-defined]
        ahead: tuple[re.Pattern[str], str, bool] | None = self._ahead  # type: ignore[attr-defined]
        if self.anchored:
            return _anchored_matches(self.pattern, scan, self.lower_triggers, done if self.to_line_end else (lambda: 0))
        if heads:
            return command_matches(self.pattern, heads, scan.text)
        if ahead is not None:
            return line_lookahead_matches(*ahead, scan)
        return self.pattern.finditer(scan.text)

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        group = self.group
        new = self.replacement if self.replacement is not None else marker(self.name)
        pieces: list[str] = []
        done = 0
        matches = self.matches(scan, lambda: done)
        for match in matches:
            start, end = match.span(group)
            if start < done or start < 0 or start == end or is_marker_at(text, start):
                continue
            if self.check is not None and not self.check(match):
                continue
            pieces += (text[done:start], new)
            done = end
        if not pieces:
            return text
        hits[self.name] = hits.get(self.name, 0) + len(pieces) // 2
        pieces.append(text[done:])
        return "".join(pieces)


# A command's name, then the rest of the command up to a line break or a shell operator, read for
# a flag (`\b7zz\b[^\r\n|;&]*?[ \t]-p…`), or looked ahead in (`\bput-parameter\b(?=[^\r\n|;&]*--type…)`).
COMMAND_REST = r"[^\r\n|;&]*"
_BLANK = r"[ \t]"
_BLANK_THEN = "(?:" + _BLANK
_COMMAND_END = re.compile(r"[\r\n|;&]")


def command_heads(pattern: re.Pattern[str]) -> tuple[re.Pattern[str], ...]:
    """The command names ``pattern`` reads the rest of a command after (:data:`COMMAND_REST`):
    the part before it when the pattern is that part, the rest of the command and more; or, when
    the pattern starts with a group of branches each of that form, each branch's name. Empty when
    the pattern is of neither form or what follows refers back to a group."""
    source = pattern.pattern
    top = _top_level(source)
    if top is None or len(top) != 1 or re.search(r"\(\?P=|\(\?\(|\\[1-9]", source):
        return ()  # a branch of its own would match where no name stands
    head = _head_of(source)
    if head is not None:
        return (re.compile(head, pattern.flags),)
    before = source.find("(?:")
    if before == -1 or source[:before] not in ("", r"\b"):
        return ()
    branches = _top_level(source[before + 3:], stop=")")
    if branches is None:
        return ()
    heads = [_head_of(branch) for branch in branches]
    return tuple(re.compile(source[:before] + branch_head, pattern.flags) for branch_head in heads if branch_head is not None) \
        if all(branch_head is not None for branch_head in heads) else ()


def _head_of(source: str) -> str | None:
    """What comes before :data:`COMMAND_REST` (or a lookahead starting with it) in ``source``,
    when that is a whole sequence of its top level (no branch of several, no group left open)."""
    cut = source.find(COMMAND_REST)
    if cut <= 0 or source.endswith(("(?!", "(?<=", "(?<!"), 0, cut):
        return None  # what a negative lookahead or a lookbehind finds is no part of what the first name read
    if source.endswith("(?=", 0, cut):
        cut -= 3
        # After the lookahead the rest of the command must be read again: what reads from right
        # after the name (`\bfoo\b(?=…)[ \t]+-p…`) a later name could match where the first could not.
        looked = _top_level(source[cut + 3:], stop=")")
        if looked is None or not source.startswith(COMMAND_REST, cut + 4 + len("|".join(looked))):
            return None
    elif source.endswith(_BLANK_THEN, 0, cut) and source.startswith(COMMAND_REST + "?)?" + _BLANK, cut):
        # `\bhttps?(?:[ \t][^\r\n|;&]*?)?[ \t]-a…`: a blank follows the name either way, and after
        # one the rest of the command is read: the name is the name and a blank.
        cut -= len(_BLANK_THEN)
        branches = _top_level(source[:cut])
        return source[:cut] + f"(?={_BLANK})" if branches is not None and len(branches) == 1 else None
    branches = _top_level(source[:cut])
    return source[:cut] if branches is not None and len(branches) == 1 else None


def _top_level(source: str, stop: str = "") -> list[str] | None:
    """The branches of ``source``'s top level, up to the parenthesis ``stop`` closes (all of it
    with no ``stop``); ``None`` when a group or a character set is left open."""
    branches: list[str] = []
    start, depth, escaped, in_class = 0, 0, False, False
    for index, char in enumerate(source):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")" and depth == 0 and stop:
            return [*branches, source[start:index]]
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            branches.append(source[start:index])
            start = index + 1
    return None if stop or depth or in_class else [*branches, source[start:]]


def command_matches(pattern: re.Pattern[str], heads: tuple[re.Pattern[str], ...], text: str) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text)`` for a pattern of command ``heads`` (:func:`command_heads`),
    reading each command once.

    A later name of the same command (up to its line break or shell operator) reads a part of
    what the first one read: where the first finds nothing, none of the others does. Tried at
    each name, a line of 8 000 `7zz ` read the rest of the line 8 000 times (2.21)."""
    anywhere = heads[0] if len(heads) == 1 else re.compile("|".join(f"(?:{head.pattern})" for head in heads), heads[0].flags)
    skips = [(-1, -1)] * len(heads)  # per name: where later names of a command that found nothing are
    position = 0
    while (found := anywhere.search(text, position)) is not None:
        start = found.start()
        position = start + 1
        names = [head.match(text, start) for head in heads]
        if all(name is None or (skip_from <= start and name.end() <= skip_to)
               for name, (skip_from, skip_to) in zip(names, skips, strict=True)):
            continue  # a later name of a command that found nothing
        match = pattern.match(text, start)
        if match is None:
            for number, name in enumerate(names):
                if name is not None:
                    stop = _COMMAND_END.search(text, name.end())
                    skips[number] = (name.end(), len(text) if stop is None else stop.start())
            continue
        yield match
        position = max(match.end(), position)


# A pattern that ends looking ahead on its line for a word: `…(?=[^\r\n]*-AsPlainText)`.
_LINE_AHEAD = re.compile(r"\(\?=\[\^\\r\\n\]\*((?:[A-Za-z0-9_]|\\?-)+)\)\Z")
_CHARACTER_SET = re.compile(r"\[\^?\]?(?:\\.|[^\]\\])*\]")


def line_lookahead(pattern: re.Pattern[str]) -> tuple[re.Pattern[str], str, bool] | None:
    """For a pattern that is a part which reads only what it matches (no anchor, boundary or
    lookaround) and a lookahead for a word further on its line: that part, the word, and whether
    case is ignored; else ``None``."""
    found = _LINE_AHEAD.search(pattern.pattern)
    if found is None:
        return None
    before = pattern.pattern[:found.start()]
    branches = _top_level(before)
    outside_sets = _CHARACTER_SET.sub("", before)
    if branches is None or len(branches) != 1 or any(mark in outside_sets for mark in ("(?=", "(?!", "(?<", "\\b", "\\B", "$", "^", "\\Z", "\\A")):
        return None
    return re.compile(before, pattern.flags), found.group(1).replace("\\-", "-"), bool(pattern.flags & re.IGNORECASE)


def line_lookahead_matches(before: re.Pattern[str], word: str, ignore_case: bool, scan: Scan) -> Iterator[re.Match[str]]:
    """``finditer`` of ``before`` followed by a lookahead for ``word`` on its line
    (:func:`line_lookahead`), without the lookahead: a match's end must not be past the line's
    last ``word``, so ``before`` is matched with the text cut there.

    Looked ahead from each start, the rest of a line of 4 000 `ConvertTo-SecureString x` without
    `-AsPlainText` was read 4 000 times (2.21)."""
    text = scan.text
    where, word = (scan.lower(), word.lower()) if ignore_case else (text, word)
    line_end = last = -1  # the line of the last start, and its last word (-1: none)
    position = 0
    while (found := before.search(text, position)) is not None:
        start = found.start()
        position = start + 1
        if start >= line_end:
            stop = _LINE_END.search(text, start)
            line_end = len(text) if stop is None else stop.start()
            last = where.rfind(word, start, line_end)
        if last < start:
            continue
        match = found if found.end() <= last else before.match(text, start, last)
        if match is not None:
            yield match
            position = max(match.end(), position)


_LINE_END = re.compile(r"[\r\n]")


def _anchored_matches(pattern: re.Pattern[str], scan: Scan, keywords: tuple[str, ...],
                      skip_to: Callable[[], int]) -> Iterator[re.Match[str]]:
    """The matches of ``pattern`` at each keyword, in order, none tried before ``skip_to()``."""
    lowered = scan.lower()
    starts: set[int] = set()
    for keyword in keywords:
        position = lowered.find(keyword)
        while position != -1:
            starts.add(position)
            position = lowered.find(keyword, position + 1)
    for start in sorted(starts):
        if start < skip_to():
            continue
        match = pattern.match(scan.text, start)
        if match is not None:
            yield match
