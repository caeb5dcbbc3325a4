"""Personal data redacted by policy: home-directory user names, e-mail addresses, domains,
payment card numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from streams.redaction.base import USER_MARKER, RegexRule, Rule, Scan, marker, replace_spans

__all__ = ["PAYMENT_CARD_RULE", "DomainRule", "EmailRule", "home_rules"]

_USER_CHARS = r"[^/\\\s\"'`<>|:;,*?\[\](){}=]{1,64}"
# Stock directories under /Users and C:\Users that belong to no person.
_NOT_USERS = ("Shared", "Public", "Default", "Default User", "All Users", "Guest", "runner", "root")


def _person(match: re.Match[str]) -> bool:
    return match.group("value") not in _NOT_USERS


def home_rules() -> tuple[RegexRule, ...]:
    """Rules turning ``/home/alice``, ``/Users/bob`` and ``C:\\Users\\bob`` into ``[USER]``."""
    unix = RegexRule(
        name="home-username",
        triggers=("/home/", "/Users/"),
        needs=frozenset("/"),
        description="user name in /home/NAME, /Users/NAME, /export/home/NAME",
        # The lookbehind keeps URL paths (https://site/home/index.html) out, and also
        # /home/[USER]/home/x, so a replacement never makes a later /home/ match anew.
        pattern=re.compile(rf"/(?<![A-Za-z0-9._~%\]-]/)(?:home|Users|export/home)/(?P<value>{_USER_CHARS})", re.ASCII),
        group="value",
        check=_person,
        replacement=USER_MARKER,
        repass=False,
    )
    windows = RegexRule(
        name="home-username",
        lower_triggers=("\\users\\",),  # also found in the JSON-escaped \\\\users\\\\
        needs=frozenset("\\"),
        description="user name in C:\\Users\\NAME (also JSON-escaped)",
        pattern=re.compile(rf":(?<=[A-Za-z]:)(?:\\\\|\\)(?:Users|users|USERS)(?:\\\\|\\)(?P<value>{_USER_CHARS})", re.ASCII),
        group="value",
        check=_person,
        replacement=USER_MARKER,
        repass=False,
    )
    return unix, windows


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_LOCAL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
# File names with an @ (icon@2x.png, file@v2.tar.gz) end in an extension, not a TLD.
_FILE_EXTENSIONS = frozenset({
    "png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "css", "js", "mjs", "cjs", "ts",
    "tsx", "jsx", "json", "py", "rb", "go", "rs", "md", "txt", "html", "htm", "lock", "yaml",
    "yml", "toml", "ini", "cfg", "gz", "tgz", "zip", "tar", "whl", "map", "woff", "woff2", "ttf",
    "pdf", "csv", "xml", "sh", "java", "kt", "swift", "vue", "scss", "less", "wasm",
})


_MARKER_END = re.compile(r"\[REDACTED:[a-z0-9-]+\]\Z", re.ASCII)


class EmailRule(Rule):
    """E-mail addresses, found from their ``@`` so only candidates cost any Python time.

    ``git@host`` (the SSH user of every Git host) and addresses at ``keep_domains`` stay.
    """

    keep_domains: tuple[str, ...]

    _at = re.compile(rf"@(?P<domain>(?:{_LABEL}\.)+(?P<tld>[A-Za-z]{{2,24}}))(?![A-Za-z0-9-])", re.ASCII)
    _local = re.compile(r"[A-Za-z0-9_%+-][A-Za-z0-9._%+-]{0,63}\Z", re.ASCII)

    def __init__(self, keep_domains: tuple[str, ...] = ()) -> None:
        super().__init__(name="email", triggers=("@",), repass=False, needs=frozenset("@"), description="e-mail addresses")
        object.__setattr__(self, "keep_domains", tuple(domain.lower() for domain in keep_domains))

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._at.pattern, self._local.pattern, _MARKER_END.pattern, *sorted(_FILE_EXTENSIONS)]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        pieces: list[str] = []
        done = 0
        found = 0
        for match in self._at.finditer(text):
            at = match.start()
            local = self._local.search(text, max(done, at - 64), at)
            if local is None or (local.start() and text[local.start() - 1] in _LOCAL_CHARS):
                continue  # no local part, or one longer than an address allows
            if _MARKER_END.search(text, max(0, local.start() - 48), local.start()):
                continue  # glued to a marker: it was glued to the address the marker replaced
            if local.group(0) == "git" or text.endswith("://", 0, local.start()):
                continue  # git@host is an SSH login; scheme://user@host is a URL login
            domain = match.group("domain").lower()
            if match.group("tld").lower() in _FILE_EXTENSIONS or _within(domain, self.keep_domains):
                continue
            pieces += (text[done: local.start()], marker(self.name))
            done = match.end()
            found += 1
        if not found:
            return text
        pieces.append(text[done:])
        hits[self.name] = hits.get(self.name, 0) + found
        return "".join(pieces)


class DomainRule(Rule):
    """Host names equal to or under the policy's ``redacted_domains``.

    Each domain is found with ``str.find`` in the lower-cased text; the subdomain labels in
    front of it are read backwards from there.
    """

    keep_domains: tuple[str, ...]

    def __init__(self, domains: tuple[str, ...], keep_domains: tuple[str, ...] = ()) -> None:
        lowered = tuple(sorted({domain.lower().strip(".") for domain in domains if domain.strip(".")}))
        super().__init__(name="domain", lower_triggers=lowered, repass=False,
                         description="host names under policy.redacted_domains")
        object.__setattr__(self, "keep_domains", tuple(domain.lower() for domain in keep_domains))

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text, lowered = scan.text, scan.lower()
        spans: list[tuple[int, int]] = []
        for domain in self.lower_triggers:
            position = lowered.find(domain)
            while position != -1:
                end = position + len(domain)
                position, found = lowered.find(domain, position + 1), position
                after = text[end: end + 2]
                if after[:1].isalnum() or after[:1] == "-" or (after[:1] == "." and after[1:].isalnum()):
                    continue  # example.community and example.com.evil are other domains
                start = found
                while start > 0 and (text[start - 1].isalnum() or text[start - 1] in ".-"):
                    start -= 1
                host = lowered[start:end].lstrip(".-")
                start = end - len(host)
                if start != found and not host.endswith("." + domain):
                    continue  # notexample.com is another domain
                if not _within(host, self.keep_domains):
                    spans.append((start, end))
        if not spans:
            return text
        pieces: list[str] = []
        done = 0
        for start, end in sorted(spans):
            if start < done:
                continue
            pieces += (text[done:start], marker(self.name))
            done = end
        hits[self.name] = hits.get(self.name, 0) + len(pieces) // 2
        pieces.append(text[done:])
        return "".join(pieces)


def _within(host: str, domains: tuple[str, ...]) -> bool:
    return any(host == domain or host.endswith("." + domain) for domain in domains)


# A run of digit groups, each separated from the next by one space or dash: where card numbers
# are looked for. A card is a range of whole groups of a run (see _CardRule).
_RUN = re.compile(r"\d+(?:[ -]\d+)*", re.ASCII)
# A number glued to one of these (before it: a word, a version, a dash-joined name; after it: a
# word or a decimal fraction) is part of something else (a hex id, a build tag, 0.84442185…).
_GLUED = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# (first digits, lengths) of the card networks: Visa, Mastercard, Amex, Discover, Diners,
# JCB, UnionPay. A number outside them (an order id, a timestamp) is left alone.
_NETWORKS: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...] = (
    (("4",), (13, 16, 19)),
    (("51", "52", "53", "54", "55", *(str(n) for n in range(2221, 2721))), (16,)),
    (("34", "37"), (15,)),
    (("6011", "65", *(str(n) for n in range(644, 650))), (16, 17, 18, 19)),
    (("36", "38", "39", *(str(n) for n in range(300, 306))), (14, 15, 16, 17, 18, 19)),
    (tuple(str(n) for n in range(3528, 3590)), (16, 17, 18, 19)),
    (("62",), (16, 17, 18, 19)),
)


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _payment_card(digits: str) -> bool:
    return _luhn(digits) and any(
        digits.startswith(prefixes) and len(digits) in lengths for prefixes, lengths in _NETWORKS
    )


def _card_shaped(sizes: list[int]) -> bool:
    """Whether groups of these sizes are how a card number is written: one group of 13-19
    digits, groups of four (the last one to four: 4-4-4-4, 4-4-4-1, 4-4-4-4-3), or the 4-6-5 and
    4-6-4 of American Express and Diners."""
    if len(sizes) == 1:
        return 13 <= sizes[0] <= 19
    if sizes[0] != 4:
        return False
    if all(size == 4 for size in sizes[:-1]) and 1 <= sizes[-1] <= 4:
        return 13 <= sum(sizes) <= 19
    return len(sizes) == 3 and sizes[1] == 6 and sizes[2] in (4, 5)


def _cards_in_run(text: str, run: re.Match[str]) -> list[tuple[int, int]]:
    """The card numbers in one run of digit groups, as spans of ``text``: ranges of whole groups
    joined by one kind of separator, card-shaped, Luhn-valid and of a card network, leftmost
    first and the longest at each start. A run can hold a card and more ('4111 1111 1111 1111 5',
    'ref 12 4111111111111111', a near miss '6248 4000 0000 0000 6' ending in a whole 13-digit
    Visa): which number was meant cannot be told, and a card left readable is the worse mistake."""
    start, end = run.span()
    groups = [(match.start() + start, match.end() + start) for match in re.finditer(r"\d+", run.group(0), re.ASCII)]
    free_start = start == 0 or text[start - 1] not in _GLUED
    after = text[end:end + 2]
    free_end = not after or (after[0] not in _GLUED or (after[0] == "." and not after[1:].isdigit()))
    spans: list[tuple[int, int]] = []
    first = 0 if free_start else 1
    while first < len(groups):
        found = None
        for last in range(min(len(groups), first + 19) - 1, first - 1, -1):
            if last == len(groups) - 1 and not free_end:
                continue
            sizes = [b - a for a, b in groups[first:last + 1]]
            if not 13 <= sum(sizes) <= 19 or not _card_shaped(sizes):
                continue
            separators = {text[groups[k][1]] for k in range(first, last)}
            if len(separators) > 1:
                continue  # 1234-5678 9012 3456 is not how a card number is written
            if _payment_card("".join(text[a:b] for a, b in groups[first:last + 1])):
                found = last
                break
        if found is None:
            first += 1
            continue
        spans.append((groups[first][0], groups[found][1]))
        first = found + 1
    return spans


# Digits become "0", letters, "_" and "." "a", spaces and dashes stay, everything else
# (punctuation, UTF-8 bytes) becomes a space. Every card-shaped range of digit groups (see
# _card_shaped) then shows one of these shapes (13 digits in a row, or the 4-4-4 and 4-6-4
# groups of longer cards), found with ``in`` at C speed.
_CARD_CLASSES = bytes(
    ord("0") if chr(byte).isdigit() else ord("a") if chr(byte).isalpha() or chr(byte) in "_."
    else byte if byte in (ord(" "), ord("-")) else ord(" ")
    for byte in range(128)
) + b" " * 128
_CARD_SHAPES = (b"0" * 13, b"0000 0000 0000", b"0000-0000-0000", b"0000 000000 0000", b"0000-000000-0000")
# 13 or more digits, spaces and dashes from a digit to a digit: the stretches of text that can
# hold a run long enough to be a card, so that only those are split into runs.
_STRETCH = re.compile(r"\d[\d -]{11,}\d", re.ASCII)


@dataclass(frozen=True, eq=False)
class _CardRule(Rule):
    """Looking for cards costs more than all other rules together on logs (every digit could
    start one): a byte-level shape test (C speed) skips the texts that hold no card-shaped
    number, and only stretches of 13+ digits and separators are split into runs."""

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        shapes = text.encode("utf-8", "surrogatepass").translate(_CARD_CLASSES)
        if not any(shape in shapes for shape in _CARD_SHAPES):
            return text
        spans: list[tuple[int, int]] = []
        for stretch in _STRETCH.finditer(text):
            for run in _RUN.finditer(text, stretch.start(), stretch.end()):
                if run.end() - run.start() >= 13:
                    spans += _cards_in_run(text, run)
        return replace_spans(text, [(start, end, self.name) for start, end in spans], hits)

    def fingerprint(self) -> list[str]:
        # Version 2: ranges of whole groups of a run, card-shaped (policy 2.3).
        return [*super().fingerprint(), "runs-of-groups", _RUN.pattern, _STRETCH.pattern, "".join(sorted(_GLUED)),
                *(shape.decode() for shape in _CARD_SHAPES)]


PAYMENT_CARD_RULE = _CardRule(
    name="payment-card",
    needs=frozenset("0123456789"),
    description="payment card numbers: 13-19 digits of a card network, Luhn-valid, written whole or in groups "
                "of four (4-6-5 and 4-6-4 for American Express and Diners) split by spaces or dashes",
    repass=False,
)
