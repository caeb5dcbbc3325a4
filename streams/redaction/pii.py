"""Personal data redacted by policy: home-directory user names, e-mail addresses, domains,
payment card numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from streams.redaction.base import USER_MARKER, RegexRule, Rule, Scan, marker

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
        return [*super().fingerprint(), self._at.pattern, self._local.pattern, *sorted(_FILE_EXTENSIONS)]

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


# 13 to 19 digits, optionally grouped by spaces or dashes, not inside a longer number or a
# decimal fraction, nor glued to a word (a hex id, a build tag). The
# lookbehind comes after the first digit so the pattern starts with a character class, which
# the regex engine skips ahead to in C: half the cost of leading with the lookbehind.
_CARD = re.compile(r"\d(?<![\w.-]\d)(?:[ -]?\d){12,18}(?![\w-]|\.\d)", re.ASCII)
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


def _payment_card(match: re.Match[str]) -> bool:
    text = match.group(0)
    separators = {char for char in text if not char.isdigit()}
    if len(separators) > 1:
        return False  # 1234-5678 9012 3456 is not how a card number is written
    digits = text.replace(" ", "").replace("-", "")
    return _luhn(digits) and any(
        digits.startswith(prefixes) and len(digits) in lengths for prefixes, lengths in _NETWORKS
    )


# Digits become "0", letters, "_" and "." (decimals: 0.8444218515250481) "a", spaces and dashes stay, everything else (punctuation,
# UTF-8 bytes) becomes a space. Every card number in its usual spellings, not glued to a word or
# a longer number, then shows one of these shapes (13 digits in a row, or the 4-4-4 and 4-6-4
# groups of 16- and 15-digit cards), found with ``in`` at C speed.
_CARD_CLASSES = bytes(
    ord("0") if chr(byte).isdigit() else ord("a") if chr(byte).isalpha() or chr(byte) in "_."
    else byte if byte in (ord(" "), ord("-")) else ord(" ")
    for byte in range(128)
) + b" " * 128
_CARD_SHAPES = (b" " + b"0" * 13, b" 0000 0000 0000", b" 0000-0000-0000", b" 0000 000000 0000", b" 0000-000000-0000")


@dataclass(frozen=True, eq=False)
class _CardRule(RegexRule):
    """The card pattern is tried at every digit, which costs more than all other rules together
    on logs; a byte-level shape test (C speed) skips the texts that hold no card-shaped number."""

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        shapes = b" " + text.encode("utf-8", "surrogatepass").translate(_CARD_CLASSES)
        if not any(shape in shapes for shape in _CARD_SHAPES):
            return text
        if not text.isascii():
            return super().apply(scan, hits)
        # ASCII: byte and character positions agree, so the pattern runs only where a shape starts.
        starts = set()
        for shape in _CARD_SHAPES:
            position = shapes.find(shape)
            while position != -1:
                starts.add(position)  # the shape's leading space is the character before the number
                position = shapes.find(shape, position + 1)
        spans: list[tuple[int, int]] = []
        for start in sorted(starts):
            match = self.pattern.match(text, start)
            if match is not None and (not spans or start >= spans[-1][1]) and _payment_card(match):
                spans.append(match.span())
        if not spans:
            return text
        pieces: list[str] = []
        done = 0
        for start, end in spans:
            pieces += (text[done:start], marker(self.name))
            done = end
        pieces.append(text[done:])
        hits[self.name] = hits.get(self.name, 0) + len(spans)
        return "".join(pieces)

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), *(shape.decode() for shape in _CARD_SHAPES)]


PAYMENT_CARD_RULE = _CardRule(
    name="payment-card",
    needs=frozenset("0123456789"),
    description="payment card numbers: 13-19 digits (spaces or dashes allowed) of a card network, Luhn-valid",
    pattern=_CARD,
    check=_payment_card,
    repass=False,
)
