"""Redacting one text: rejoin wrapped lines, run the triggered rules until nothing changes, then
read the escaped JSON literals left in it."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from functools import lru_cache

import ahocorasick

from streams.ansi import ANSI_SEQUENCE, without_ansi
from streams.exceptions import RedactionError
from streams.redaction.base import (
    MARKER_PREFIX,
    USER_MARKER,
    Rule,
    Scan,
    marker,
    plain_words,
    plain_words_fingerprint,
)
from streams.redaction.literals import redact_literals
from streams.redaction.pieces import redact_repeats
from streams.redaction.policy import DEFAULT_POLICY, RedactionPolicy
from streams.redaction.rules import build_rules

__all__ = ["EXCERPT_MARGIN", "WRAPPED_BREAK", "WRAPPED_HEAD", "clip", "cut_tail", "redact_excerpt", "redact_head", "redact_text", "redact_text_into", "redact_text_plain",
           "rejoin_fingerprint", "summarize"]

_MAX_PASSES = 8  # converges in 1-2 passes on real text; a bound keeps odd input cheap
_SHORTEST_FINDING = 6  # a@b.io; nothing any rule replaces is shorter
_SHORT_TEXT = 512
_SHORTEST_LITERAL = 3  # shorter triggers stay ``in`` tests (see _literals)
# Texts up to this long are remembered (an LRU of 8192: at most some 2 MB).
_REMEMBERED_CHARS = 256
# Longer texts are remembered too, up to this many characters of them in all: agents read the
# same file again and again, and sessions of one project repeat its files and prompts.
_LONG_MEMORY_CHARS = 4_000_000

_VALUE_CHAR = r"[^\s\"'`<>=:/]"
# A line that starts with a date or a time of day is a log's next record, never the rest of a
# token (2.7): in a log whose lines end in `request_id=…` every break was a candidate, and
# redacting each pair of lines joined tripled the cost of redacting the log.
_NOT_CONTINUATION = (r"(?:[A-Z_][A-Z0-9_]*|[a-z_][a-z0-9_.-]*)=|[A-Za-z_][A-Za-z0-9_.-]*:[ \t]|-----"
                     r"|[0-9]{4}[-/.][0-9]{2}[-/.][0-9]{2}(?![0-9])|[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?![0-9])")
WRAPPED_BREAK = re.compile(
    rf"\n(?:(?<={_VALUE_CHAR}{{6}}\n)|(?<={_VALUE_CHAR}{{6}}\r\n))"
    rf"(?!{_NOT_CONTINUATION})(?=[a-z_.+/=~%@:|-]{{0,5}}[A-Z0-9])(?=[A-Za-z0-9+/=_.~%@:|-]{{6}})",
    re.ASCII,
)
"""A line break that may cut a secret in two: the line before it ends in six characters of a
value (no space, quote, ``=``, ``:`` or ``/``); the line after starts with six or more token
characters, a digit or a capital among the first six, and not with a name and ``=`` or ``: ``
(the next line of an env file or YAML), with PEM armour (``-----BEGIN``) nor with a date or a
time of day (a log's next record). The break is a
literal the regex engine skips to; every test runs in the engine. :data:`WRAPPED_HEAD` looks
further back."""
WRAPPED_HEAD = re.compile(rf"(?:[=:/]|[=:][ \t]+)(?={_VALUE_CHAR}{{6,200}}\Z)", re.ASCII)
"""What the line before such a break must end in (searched up to the break): a value of six or
more characters after its ``=``, ``:`` or ``/`` (2.3, later: or after ``=`` / ``:`` and spaces, as
in ``key: sk_live_Y1aAob`` then the rest of the key); a digit or a capital must be among them."""
_DIGIT_OR_CAPITAL = re.compile(r"[A-Z0-9]", re.ASCII)
_FIRST_TOKEN = re.compile(r"[^\s\"'`,;)\]}|]*")  # the next line's first token, whole
_JOIN_WINDOW = 512  # characters of each line around a break that are redacted joined


def redact_text(text: str, policy: RedactionPolicy | None = None) -> tuple[str, dict[str, int]]:
    """Return ``text`` with every secret (and the policy's personal data) replaced by markers,
    and how many replacements each rule made.

    Idempotent: ``redact_text(redact_text(x)[0])[0] == redact_text(x)[0]``. A text in which
    no rule fired costs one pass. Rules run in order and each sees the replacements of the
    rules before it; a replacement can only matter to an *earlier* rule when it changes what a
    guard sees (``...@example.comsk-...``), so text changed by a rule that can do that gets a
    second pass confirming nothing new appeared. Personal data, URL passwords, key blocks and
    environment dumps, by far the most common findings, are placed first and never need it.
    """
    if not isinstance(text, str):
        raise RedactionError(f"redact_text takes a str, not {type(text).__name__}")
    if len(text) < _SHORTEST_FINDING:
        return text, {}
    if len(text) <= _REMEMBERED_CHARS:
        # Short strings recur in every event of a session (hook names, tool names, statuses,
        # model names): most are answered from memory, with a fresh hits dict each time.
        redacted, found = _redact_short(text, policy or DEFAULT_POLICY)
    else:
        redacted, found = _redact_long(text, policy or DEFAULT_POLICY)
    return redacted, dict(found)


# The last token of a text that ends inside one (2.8), matched at the start of the reversed
# text: searched for with ``...{6,}\Z``, every start inside a long token (a base64 image, a 3 MB
# string) ran to the token's end and back, so a rejected 40 KB line took 35 s to dead-letter and
# a 3 MB event held the API's GIL for hours. A "|" inside the token is the token's own (2.9: a
# Facebook access token is `APP_ID|SECRET`; cut after the bar it kept the app id), not a pipe's:
# the run may hold bars, and those at its start are cut off it.
_CUT_TAIL = re.compile(r"[^\s\"'`<>(){}\[\],;]+")
_CUT_TAIL_LENGTH = 6
CUT_TOKEN = "cut-token"


def cut_tail(text: str) -> str:
    """The token ``text`` ends in (6 characters or more; "" when it ends in none): read
    backwards from the end, so in time linear in the text, not quadratic in the token."""
    tail = _CUT_TAIL.match(text[::-1])
    token = tail.group().rstrip("|")[::-1] if tail is not None else ""
    return token if len(token) >= _CUT_TAIL_LENGTH else ""


def redact_excerpt(text: str, policy: RedactionPolicy | None = None) -> str:
    """A record's text that may have been cut short, redacted: :func:`redact_text`, then the last
    token when the text ends inside one and it has a letter and a digit (``[REDACTED:cut-token]``).

    A JSONL line cut in the middle of a secret (a crash mid-write, a copied prefix) is rejected,
    and its dead letter shows the line: the rules know a token by its whole length
    (``ghp_`` and 36, ``sk-ant-api03-`` and 93) or by what follows it (the ``@`` after a URL's
    password), so a cut one is no format any more and its first characters stayed (2.8). A
    whole record ends in ``}`` or ``]``, never inside a token, so this only ever reads cut ones."""
    redacted = redact_text(text, policy)[0]
    token = cut_tail(redacted)
    if not token:
        return redacted
    if not (any(c.isalpha() for c in token) and any(c.isdigit() for c in token)):
        return redacted
    return redacted[: len(redacted) - len(token)] + marker(CUT_TOKEN)


#: Characters after an excerpt's end that :func:`redact_head` redacts with it, as the context of
#: what the excerpt shows: a secret that starts inside the excerpt and a rule's look ahead (an AWS
#: secret 200 characters after its key id, a wrapped line's 512, the end of a 4096-bit RSA key's
#: block, some 3.3 KB) end in it.
EXCERPT_MARGIN = 12288
# A JSON string literal, or a lone quote: one whose literal runs on to the end of the text.
_JSON_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|"')
_CUT_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{0,3})?\Z")  # searched in the last 5 characters only


def redact_head(text: str, limit: int, policy: RedactionPolicy | None = None) -> str:
    """The first ``limit`` characters of :func:`redact_excerpt` of ``text``, in time bounded by
    ``limit``: only its first ``limit`` + :data:`EXCERPT_MARGIN` characters are redacted, as a
    text cut there (a dead letter shows 4 KiB of a refused event; redacting all of a 700 KB one
    for them took half a second, and a request of such events outlasted its client's timeout).

    Cut there, the head loses its last token when that has a letter and a digit (as
    :func:`redact_excerpt` reads any cut text), so a secret longer than the margin that starts
    inside the excerpt (a PEM block, a JWT, a base64 blob) is gone from its start on. A head that
    ends inside a JSON string literal (a refused event's long output) has the literal closed
    first: the rules read an escaped literal decoded (a ``.env`` printed into a tool's output)
    only when it is whole."""
    if len(text) <= limit + EXCERPT_MARGIN:
        return redact_excerpt(text, policy)[:limit]
    head = text[: limit + EXCERPT_MARGIN]
    closer = ""
    if head.lstrip()[:1] in ("{", "[") and _ends_in_literal(head):
        head = _without_cut_escape(head)
        closer = '"'
    redacted = redact_text(head + closer, policy)[0]
    if closer and redacted.endswith(closer):
        redacted = redacted[: -len(closer)]
    token = cut_tail(redacted)
    if token and any(c.isalpha() for c in token) and any(c.isdigit() for c in token):
        redacted = redacted[: len(redacted) - len(token)] + marker(CUT_TOKEN)
    return redacted[:limit]


def _without_cut_escape(literal_text: str) -> str:
    """``literal_text`` (which ends inside a JSON string literal) without the escape it ends
    inside (``\\``, ``\\u00``), so a quote after it closes the literal; a backslash that is
    itself escaped (``\\\\``) ends none. Read from the end, in time linear in the backslashes."""
    end = _CUT_ESCAPE.search(literal_text, max(0, len(literal_text) - 5))
    if end is None:
        return literal_text
    backslashes = end.start() + 1 - len(literal_text[: end.start() + 1].rstrip("\\"))
    return literal_text[: end.start()] if backslashes % 2 else literal_text


def _ends_in_literal(json_text: str) -> bool:
    """Whether ``json_text``, the start of a JSON document, ends inside a string literal."""
    return any(literal.group() == '"' for literal in _JSON_LITERAL.finditer(json_text))


def redact_text_into(text: str, hits: dict[str, int], policy: RedactionPolicy | None = None) -> str:
    """:func:`redact_text` adding its replacements to ``hits`` (the event walker's per-event
    count) instead of returning a new dict: the same redaction, one call for each string."""
    if len(text) < _SHORTEST_FINDING:
        return text
    if len(text) <= _REMEMBERED_CHARS:
        redacted, found = _redact_short(text, policy or DEFAULT_POLICY)
    else:
        redacted, found = _redact_long(text, policy or DEFAULT_POLICY)
    for rule, count in found:
        hits[rule] = hits.get(rule, 0) + count
    return redacted


def redact_text_plain(text: str, policy: RedactionPolicy | None = None) -> tuple[str, dict[str, int]]:
    """:func:`redact_text` without any shortcut: no memory, and every rule applied to every
    text, whatever its gates say. Slow; the reference the fast path is tested against."""
    if len(text) < _SHORTEST_FINDING:
        return text, {}
    return _redact_plain(without_ansi(text, ""), policy)


def _redact_plain(text: str, policy: RedactionPolicy | None) -> tuple[str, dict[str, int]]:
    hits: dict[str, int] = {}
    original = text
    if "\n" in text:
        text = _rejoin(text, hits, lambda joined: _redact_plain(joined, policy))
    rules = build_rules(policy or DEFAULT_POLICY)
    for _ in range(_MAX_PASSES):
        text, again = _one_pass(text, rules, hits, plain=True)
        if not again:
            break
    text = redact_repeats(original, text, hits)
    if "\\" in text and '"' in text:
        text = redact_literals(text, hits, lambda literal: _items(redact_text_plain(literal, policy)))
    return text, hits


def _items(redaction: tuple[str, dict[str, int]]) -> tuple[str, Iterable[tuple[str, int]]]:
    return redaction[0], redaction[1].items()


def _redact(text: str, policy: RedactionPolicy) -> tuple[str, dict[str, int]]:
    # Terminal escape sequences out first (2.6): in `ESC[32mAPI_KEY:ESC[39m value` they stand
    # between a secret's name and its value, where no rule expects them, and a terminal shows
    # none of them. JSON literals come through here too, with what their \u001b decode to.
    return _redact_as_written(without_ansi(text, ""), policy)


def _redact_as_written(text: str, policy: RedactionPolicy) -> tuple[str, dict[str, int]]:
    rules = build_rules(policy)
    hits: dict[str, int] = {}
    original = text
    if "\n" in text:
        text = _rejoin(text, hits, lambda joined: _redact_as_written(joined, policy))
    for _ in range(_MAX_PASSES):
        text, again = _one_pass(text, rules, hits)
        if not again:
            break
    # A value the rules removed where it was named goes where the text repeats it bare (2.13).
    text = redact_repeats(original, text, hits)
    if "\\" in text and '"' in text:
        # JSON text in the text: its literals' escaped line breaks and quotes, read as such
        # (streams.redaction.literals). After the rules, so what they find across literals (a
        # key block in a string per line) goes as before; the literals' redaction goes through
        # the memories, as any text's does.
        text = redact_literals(text, hits, lambda literal: _remembered(literal, policy))
    return text, hits


def ansi_fingerprint() -> list[str]:
    """What the policy removes before its rules read a text (part of the policy hash): the
    sequences, removed until none is left."""
    return [ANSI_SEQUENCE.pattern, "until none is left"]


def rejoin_fingerprint() -> list[str]:
    """What decides which line breaks :func:`_rejoin` tries, for the policy hash."""
    return [WRAPPED_BREAK.pattern, WRAPPED_HEAD.pattern, _DIGIT_OR_CAPITAL.pattern, str(_JOIN_WINDOW), *plain_words_fingerprint(), _FIRST_TOKEN.pattern,
            "the next line's rest as it reads alone"]


def _rejoin(text: str, hits: dict[str, int], redact: Callable[[str], tuple[str, dict[str, int]]]) -> str:
    """``text`` with each secret a line break cut in two (a terminal or an editor wrapped a long
    line) replaced whole.

    A replacement that takes of the next line's first token when that token is plain words
    (:func:`plain_words`: ``FAILED``, ``HTTP/1.1``) is no wrapped secret: each line is then
    redacted on its own (2.7).

    At each :data:`WRAPPED_BREAK` after a :data:`WRAPPED_HEAD`, the two lines (up to :data:`_JOIN_WINDOW` characters of each
    on either side) are redacted joined into one. When a replacement crosses the place of the
    break, the joined redaction stands for both lines: what the joined lines kept after the
    replacement follows on a new line, so the text keeps its line break (``postgres://app:``
    ``[REDACTED:url-password]`` then ``@db:5432`` on the next line). Other breaks change nothing;
    on text without such a break this costs one regex search.
    """
    pieces: list[str] = []
    done = 0
    for match in WRAPPED_BREAK.finditer(text):
        resume = match.end()
        cut = resume - 2 if text[resume - 2: resume - 1] == "\r" else resume - 1
        if cut < done:
            continue  # inside the lines a break before it already joined
        head = WRAPPED_HEAD.search(text, max(0, cut - 201, done), cut)
        if head is None or _DIGIT_OR_CAPITAL.search(text, head.end(), cut) is None:
            continue
        line_start = max(text.rfind("\n", 0, cut) + 1, cut - _JOIN_WINDOW, done)
        line_end = text.find("\n", resume)
        if line_end == -1:
            line_end = len(text)
        elif text[line_end - 1] == "\r":
            line_end -= 1
        line_end = min(line_end, resume + _JOIN_WINDOW)
        before, after = text[line_start:cut], text[resume:line_end]
        joined = before + after
        redacted, found = redact(joined)
        if redacted == joined:
            # The common case on logs (every line ends in `id=…` and the next starts with a
            # date): nothing to place, and the loops below would compare a kilobyte by hand.
            continue
        same_start = 0
        limit = min(len(joined), len(redacted))
        while same_start < limit and joined[same_start] == redacted[same_start]:
            same_start += 1
        same_end = 0
        while same_end < limit - same_start and joined[-1 - same_end] == redacted[-1 - same_end]:
            same_end += 1
        if not (same_start < len(before) < len(joined) - same_end):
            continue  # nothing crosses the break: each line is redacted on its own
        if plain_words(_FIRST_TOKEN.match(after).group()):  # type: ignore[union-attr]
            # 2.7: the replacement took (part of) the next line's first token, and that token is
            # a word that starts a log line (`FAILED`, `TimeoutError`, `README.md`, `2026-01-05`
            # of which a token took `2026`), not the rest of a secret:
            # a value ending one line is no reason to swallow the next line's first word.
            continue
        if redacted == redact(before)[0] + redact(after)[0]:
            continue  # two findings meet at the break (a URL, then a key block): no secret spans it
        kept = redacted[: len(redacted) - same_end]
        rest = joined[len(joined) - same_end:]
        # 2.20: what the next line keeps after the replacement is redacted as that line reads on
        # its own, where it finds more: in `login: deploy:X` over `10.0.0.5   root:Y` the join
        # took the address as the rest of X, and `root:Y`, a pair after a host, stayed.
        own, own_found = redact(after)
        offset = len(after) - len(rest)
        if own != after and own[:offset] == after[:offset]:
            rest = own[offset:]
            for rule, count in own_found.items():
                hits[rule] = hits.get(rule, 0) + count
        pieces += (text[done:line_start], kept + (text[cut:resume] + rest if rest else ""))
        done = line_end
        for rule, count in found.items():
            hits[rule] = hits.get(rule, 0) + count
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


@lru_cache(maxsize=8192)
def _redact_short(text: str, policy: RedactionPolicy) -> tuple[str, tuple[tuple[str, int], ...]]:
    redacted, hits = _redact(text, policy)
    return redacted, tuple(hits.items())


def _remembered(text: str, policy: RedactionPolicy) -> tuple[str, tuple[tuple[str, int], ...]]:
    """:func:`redact_text` of ``text`` with its hits as pairs, from memory when it is there."""
    if len(text) < _SHORTEST_FINDING:
        return text, ()
    return _redact_short(text, policy) if len(text) <= _REMEMBERED_CHARS else _redact_long(text, policy)


class _Prefilter:
    """One Aho-Corasick automaton of every rule's literals (see ``streams.redaction.base``): a
    single C scan of the lower-cased text says which rules can change it at all."""

    __slots__ = ("automaton", "in_markers", "plan")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.automaton = ahocorasick.Automaton()
        plan: list[tuple[Rule, frozenset[str], frozenset[str] | None]] = []
        every: set[str] = set()
        for rule in rules:
            literals = _literals(rule)
            for literal in literals or ():
                self.automaton.add_word(literal, literal)
            every |= literals or set()
            plan.append((rule, rule.needs, literals))
        self.automaton.make_automaton()
        self.plan = tuple(plan)
        # What a replacement can add: the literals inside any marker, and any literal that
        # could span a marker's edge. After a change these join what the text held (a
        # superset is safe: it can only let a rule try in vain), so a text is scanned once.
        names = {name for rule in rules for name in rule.hit_names()} | {"secret-field", "x"}
        found = {literal for name in names for _, literal in self.automaton.iter(marker(name).lower() + USER_MARKER.lower())}
        self.in_markers = frozenset(found | {literal for literal in every if set(literal) & set("[]:")})

    def scan(self, scan: Scan) -> set[str]:
        """The literals ``scan``'s text holds; their places are left in ``scan.literal_hits``."""
        found = scan.literal_hits = list(self.automaton.iter(scan.lower()))
        return {literal for _, literal in found}


def _literals(rule: Rule) -> frozenset[str] | None:
    if rule.literals:
        return frozenset(rule.literals)
    triggers = rule.triggers + rule.lower_triggers
    if rule.gate is None and triggers and all(len(trigger) >= _SHORTEST_LITERAL for trigger in triggers):
        # A rule without a gate runs only where a trigger occurs; single characters ("=", "@")
        # would make the automaton report nearly every position, so they stay plain ``in`` tests.
        return frozenset(trigger.lower() for trigger in triggers)
    return None


@lru_cache(maxsize=64)
def _prefilter(rules: tuple[Rule, ...]) -> _Prefilter:
    return _Prefilter(rules)


class _LongMemory:
    """Long texts redacted lately and their redactions, least recently used first, holding at
    most :data:`_LONG_MEMORY_CHARS` characters of texts (and about as many of redactions)."""

    __slots__ = ("chars", "entries")

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[str, RedactionPolicy], tuple[str, tuple[tuple[str, int], ...]]] = OrderedDict()
        self.chars = 0

    def redact(self, text: str, policy: RedactionPolicy) -> tuple[str, tuple[tuple[str, int], ...]]:
        key = (text, policy)
        found = self.entries.get(key)
        if found is not None:
            self.entries.move_to_end(key)
            return found
        redacted, hits = _redact(text, policy)
        found = self.entries[key] = (redacted, tuple(hits.items()))
        self.chars += len(text)
        while self.chars > _LONG_MEMORY_CHARS:
            (forgotten, _), _ = self.entries.popitem(last=False)
            self.chars -= len(forgotten)
        return found

    def clear(self) -> None:
        self.entries.clear()
        self.chars = 0


_LONG_MEMORY = _LongMemory()
_redact_long = _LONG_MEMORY.redact


def _one_pass(text: str, rules: tuple[Rule, ...], hits: dict[str, int], *, plain: bool = False) -> tuple[str, bool]:
    """Apply every wanted rule once (with ``plain``, every rule); also say whether a
    confirming pass is needed."""
    scan = Scan(text)
    again = False
    if plain:
        for rule in rules:
            redacted = rule.apply(scan, hits)
            if redacted is not scan.text:
                scan = Scan(redacted)
                again = again or rule.repass
        return scan.text, again
    prefilter = _prefilter(rules)
    found = prefilter.scan(scan)
    stale = False  # found may hold more than the changed text (see _Prefilter.in_markers)
    # Short texts (ids, names, one-line fields: most strings of an event) are dominated by
    # per-rule overhead; their character set lets most rules be skipped outright.
    chars = frozenset(text) if len(text) <= _SHORT_TEXT else None
    for rule, needs, literals in prefilter.plan:
        if chars is not None and needs and chars.isdisjoint(needs):
            continue
        if literals is not None:
            if found.isdisjoint(literals):
                continue
            if stale:
                # Scanned again only when a rule depends on it, and then exactly.
                found, stale = prefilter.scan(scan), False
                if found.isdisjoint(literals):
                    continue
        if scan.wants(rule):
            redacted = rule.apply(scan, hits)
            if redacted is not scan.text:
                scan = Scan(redacted)  # literal_hits None until scanned again
                found, stale = found | prefilter.in_markers, True
                chars = frozenset(redacted) if len(redacted) <= _SHORT_TEXT else None
                again = again or rule.repass
    return scan.text, again


def summarize(text: str, head: int, tail: int) -> str:
    """``text`` when it has at most ``head + tail`` characters; else its first ``head``
    characters, a `` … [N bytes] … `` note (N: UTF-8 size of the whole text) and its last whole
    lines that fit in ``tail`` characters (none when its last line alone is longer).

    The last lines of a tool's output are where its outcome is (a traceback's exception, a test
    run's counts, an exit status), so a summary keeps them beside the beginning; the end of a
    long one-line output (a JSON document) is no outcome, and only adds noise to the chunk."""
    if len(text) <= head + tail:
        return text
    clipped = clip(text, head, note_inside=False)
    newline = text.find("\n", len(text) - tail - 1) if tail > 0 else -1
    if newline == -1 or not text[newline + 1:].strip():
        return clipped
    return f"{clipped} … {text[newline + 1:]}"


def clip(text: str, limit: int, *, note_inside: bool = True) -> str:
    """``text`` cut to ``limit`` characters plus a `` … [N bytes]`` note (N: UTF-8 size of
    the whole text); ``text`` itself when it is not longer than ``limit``.

    With ``note_inside`` the note counts towards ``limit``, so a clipped text is never clipped
    again (clipping is idempotent); summaries keep ``limit`` characters and add the note.
    A cut never splits a marker.
    """
    if len(text) <= limit:
        return text
    note = f" … [{len(text.encode('utf-8'))} bytes]"
    cut = max(0, limit - len(note)) if note_inside else limit
    opening = text.rfind("[", max(0, cut - 64), cut)
    if opening != -1 and text.find("]", opening) >= cut and (
        text.startswith(MARKER_PREFIX, opening) or text.startswith(USER_MARKER, opening)
    ):
        cut = opening
    return text[:cut] + note
