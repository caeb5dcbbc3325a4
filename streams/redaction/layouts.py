"""Secrets whose name is given by the layout around them, not beside them (policy 2.11).

A sixth adversarial round found values that no ``name = value`` reading reaches because the
name is elsewhere: a CSV file's header names the column, a JSON Web Key's ``"kty"`` says its
one-letter members are a private key, a Python / TypeScript annotation stands between the name
and the ``=``, strongSwan's ``ipsec.secrets`` names the kind after the colon, and a wallet's
recovery phrase or a passphrase of plain words is a run of words that no token test reads.
"""

from __future__ import annotations

import re

from streams.redaction.assignments import passphrase_words
from streams.redaction.base import RegexRule, Rule, Scan, replace_spans
from streams.redaction.context import named_value_rule, table_secret
from streams.redaction.keys import is_placeholder, name_class

__all__ = ["LAYOUT_RULES"]


# NAME: str = "value" (pydantic settings, dataclass defaults), NAME: string = "value"
# (TypeScript), const NAME: &str = "value" (Rust): the annotation hides the "=" from the
# assignment rule, which reads NAME: as the separator and "str" as the value.
_TYPED = re.compile(
    r"(?<![A-Za-z0-9_$])(?P<name>[A-Za-z_$][A-Za-z0-9_$]{0,63})[ \t]*:[ \t]*"
    r"(?:Optional\[(?:str|SecretStr)\]|SecretStr|str|string|String|&'static[ \t]+str|&str)"
    r"(?:[ \t]*\|[ \t]*None)?[ \t]*=[ \t]*(?:SecretStr\()?(?P<q>[\"'])(?P<value>(?:(?!(?P=q))[^\r\n\\]){1,4096})(?P=q)",
    re.ASCII,
)


def _typed_rule(rule: str) -> RegexRule:
    return RegexRule(
        name=rule,
        lower_triggers=(": str", ":str", ": string", "&str", "secretstr", "optional[str]"),
        description="NAME: str = \"…\" and NAME: string = \"…\" (an annotated assignment) under a secret-like NAME",
        pattern=_TYPED,
        group="value",
        check=lambda match: named_value_rule(match.group("name"), match.group("value")) == rule,
    )


# A JSON Web Key's private members (RFC 7518 §6.3.2, §6.4: d, p, q, dp, dq, qi; an "oct" key's
# k): one letter names them, so they count only inside an object that has a "kty".
_JWK_MEMBER = re.compile(r"\"(?:d|p|q|dp|dq|qi|k)\"[ \t]*:[ \t]*\"(?P<value>[A-Za-z0-9_-]{16,})\"", re.ASCII)


def _in_jwk(match: re.Match[str]) -> bool:
    text, start, end = match.string, match.start(), match.end()
    opened = text.rfind("{", max(0, start - 4096), start)
    if opened == -1 or text.rfind("}", opened, start) != -1:
        return False
    closed = text.find("}", end, end + 4096)
    return '"kty"' in text[opened:closed if closed != -1 else end + 4096]


_JWK = RegexRule(name="private-key", triggers=('"kty"',), description="a JSON Web Key's private members (d, p, q, dp, dq, qi, k)",
                 pattern=_JWK_MEMBER, group="value", check=_in_jwk)

# strongSwan / Libreswan ipsec.secrets: [ids] : PSK "secret" (also EAP, XAUTH, NTLM passwords).
_IPSEC = RegexRule(
    name="password-assignment", triggers=("PSK", "EAP", "XAUTH", "NTLM"),
    description="ipsec.secrets: ': PSK \"…\"', ': EAP \"…\"', ': XAUTH \"…\"'",
    pattern=re.compile(r"(?:^|(?<=[ \t])):[ \t]*(?:PSK|EAP|XAUTH|NTLM)[ \t]+\"(?P<value>[^\"\r\n]{1,256})\"", re.ASCII | re.MULTILINE),
    group="value",
    check=lambda match: not is_placeholder(match.group("value"), quoted=True) and match.group("value")[0] != "%",
)

# A wallet's recovery phrase: 12, 15, 18, 21 or 24 lower-case words after its name.
_SEED_PHRASE = re.compile(
    r"(?:(?:seed|recovery|mnemonic|backup|wallet|secret[ \t]+recovery)[ \t]+(?:phrase|words)|mnemonic)s?"
    r"(?:[ \t]+(?:is|was|are|were))?[ \t]*[:=-]?[ \t]*(?:\r?\n[ \t]*)?[\"'`]?"
    r"(?P<value>[a-z]{3,8}(?:[ \t]+[a-z]{3,8}){11,23})(?![A-Za-z])",
    re.ASCII | re.IGNORECASE,
)
_SEED = RegexRule(
    name="secret-in-prose", lower_triggers=("seed ", "recovery ", "mnemonic", "backup ", "wallet ", "secret recovery"), anchored=True,
    description="a wallet's recovery phrase (12-24 words) after its name",
    pattern=_SEED_PHRASE, group="value",
    check=lambda match: len(match.group("value").split()) in (12, 15, 18, 21, 24),
)

# "the passphrase is correct horse battery staple": unquoted words that end the clause. The
# quoted phrase is the prose rule's (streams.redaction.assignments); function words and words
# that say something of a passphrase ("is stored in the vault") keep the sentence.
_PASSPHRASE = RegexRule(
    name="secret-in-prose", lower_triggers=("passphrase", "pass phrase"), anchored=True,
    description="a passphrase of plain words ending its clause after \"passphrase is\" / \"passphrase:\"",
    pattern=re.compile(r"pass[ ]?phrase(?:[ \t]+(?:is|was)|[ \t]*[:=])[ \t]+"
                       r"(?P<value>[a-z]{2,12}(?:[ -][a-z]{2,12}){2,7})(?=[ \t]*(?:[.,;!)]|\r?\n|$))",
                       re.ASCII | re.IGNORECASE),
    group="value",
    check=lambda match: passphrase_words(match.group("value"), ends_clause=True),
)


# A YAML key whose scalar value is written on the next, deeper line ("password:\n  S3cr3t!x"):
# one token, not a nested mapping ("password:\n  min_length: 8"), a list or a block scalar.
_NEXT_LINE = re.compile(r"(?P<indent>[ \t]*)(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63}):[ \t]*\r?\n(?P<deeper>[ \t]+)"
                        r"(?P<q>[\"']?)(?P<value>[^\s#|>:\"'-][^\s\"']{0,4095})(?<!:)(?P=q)[ \t]*\r?$", re.ASCII | re.MULTILINE)
# A CSV header: 2-64 comma-separated names, optionally quoted, filling its line (2.18: or tab-separated).
_CSV_HEADER = re.compile(r"[A-Za-z_\"'][A-Za-z0-9_ .,\t\"'-]{0,2047}?\r?$", re.ASCII | re.MULTILINE)
_HEADER_CELL = re.compile(r"[A-Za-z_][A-Za-z0-9_ .-]{0,63}", re.ASCII)
_LINE_WORDS = ("pass", "pwd", "secret", "token", "key")


class KeyedLinesRule(Rule):
    """Values a line's secret-like name gives to the lines under it: a YAML key's value on the
    next, deeper line, and the cells of a CSV column whose header names a password or a secret
    (``username,password`` over ``admin,S3cr3t!x``: a seed file, an export, ``cat users.csv``).

    Only lines holding a secret word are read, each once. A CSV header's rows follow while they
    have as many cells; quoted commas are not read: a row whose count differs ends the table."""

    def __init__(self) -> None:
        super().__init__(name="password-assignment", lower_triggers=_LINE_WORDS, needs=frozenset("\n"),
                         description="a YAML key's value on the next, deeper line (password:\\n  VALUE) and the cells of "
                         "a CSV column, under a secret-like name")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _NEXT_LINE.pattern, _CSV_HEADER.pattern, _HEADER_CELL.pattern, *_LINE_WORDS]

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found: list[tuple[int, int, str]] = []
        done = 0
        for line in self._lines(scan):
            if line < done:
                continue  # a row of a table read before
            value = _NEXT_LINE.match(text, line)
            if value is not None and len(value.group("deeper").expandtabs()) > len(value.group("indent").expandtabs()):
                rule = named_value_rule(value.group("name"), value.group("value"), quoted=bool(value.group("q")))
                if rule is not None:
                    found.append((*value.span("value"), rule))
            if "," in text[line: line + 2048] or "\t" in text[line: line + 2048]:
                done = max(done, self._csv(text, line, found))
        return replace_spans(text, found, hits)

    @staticmethod
    def _lines(scan: Scan) -> list[int]:
        """Starts of the lines holding a secret word; a word's later occurrences on a line it was
        found on are skipped, so each line is looked at once per word."""
        text, lowered = scan.text, scan.lower()
        starts: set[int] = set()
        for word in _LINE_WORDS:
            at = lowered.find(word)
            while at != -1:
                starts.add(text.rfind("\n", 0, at) + 1)
                after = text.find("\n", at)
                at = -1 if after == -1 else lowered.find(word, after)
        return sorted(starts)

    @staticmethod
    def _csv(text: str, line: int, found: list[tuple[int, int, str]]) -> int:
        """Reads a CSV table whose header is the line at ``line``; returns where it ends."""
        header = _CSV_HEADER.match(text, line)
        if header is None:
            return line
        separator = "\t" if "\t" in header.group(0) else ","
        names = [cell.strip().strip("\"'") for cell in header.group(0).rstrip("\r").split(separator)]
        if not 2 <= len(names) <= 64 or not all(_HEADER_CELL.fullmatch(name) for name in names):
            return line
        columns = {index: name for index, name in enumerate(names) if name_class(name) is not None}
        if not columns:
            return line
        row = header.end() + 1
        while row < len(text):
            row_end = text.find("\n", row)
            row_end = len(text) if row_end == -1 else row_end
            cells = text[row:row_end].rstrip("\r").split(separator)
            if len(cells) != len(names):
                break
            offset = row
            for index, cell in enumerate(cells):
                value = cell.strip().strip("\"'")
                if index in columns and value and table_secret(value):
                    rule = named_value_rule(columns[index], value)
                    if rule is not None:
                        at = offset + cell.index(value)
                        found.append((at, at + len(value), rule))
                offset += len(cell) + 1
            row = row_end + 1
        return row


class SqlInsertRule(Rule):
    """The values an SQL INSERT gives to a secret-like column (2.18): `INSERT INTO users (name, password)
    VALUES ('bob', 'X'), ('amy', 'Y')` names the column once, in its column list, and each row's value
    stands at that column's place (a seed file, a dump, a migration). Quoted values only, judged as
    assignments under the column's name (`'$2b$…'` is the hash rule's). Each statement is read once,
    its rows left to right, at most 64 KiB of them."""

    _insert = re.compile(r"insert[ \t]+(?:ignore[ \t]+)?into[ \t]+[^\s(]{1,128}[ \t]*\((?P<columns>[^()\r\n]{1,1024})\)"
                         r"[ \t\r\n]*values[ \t\r\n]*(?=\()", re.ASCII | re.IGNORECASE)
    _limit = 65536

    def __init__(self) -> None:
        super().__init__(name="password-assignment", lower_triggers=("insert into", "insert ignore into"), needs=frozenset("("),
                         description="an SQL INSERT's values under a secret-like column of its column list (2.18)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._insert.pattern, str(self._limit)]

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text, lowered = scan.text, scan.lower()
        found: list[tuple[int, int, str]] = []
        at, done = lowered.find("insert"), 0
        while at != -1:
            statement = self._insert.match(text, at) if at >= done else None
            if statement is not None:
                names = [name.strip().strip("`\"[]'") for name in statement.group("columns").split(",")]
                columns = {index: name for index, name in enumerate(names) if name_class(name) is not None}
                done = self._rows(text, statement.end(), columns, found) if columns else statement.end()
            at = lowered.find("insert", max(at + 1, done))
        return replace_spans(text, found, hits) if found else text

    def _rows(self, text: str, at: int, columns: dict[int, str], found: list[tuple[int, int, str]]) -> int:
        """Reads `(v, …), (v, …)` from ``at``; returns where the rows end."""
        end = min(len(text), at + self._limit)
        while at < end and text[at] == "(":
            at, index = at + 1, 0
            while at < end and text[at] != ")":
                if text[at] in "'\"":
                    quote, start = text[at], at + 1
                    at = start
                    while at < end and not (text[at] == quote and text[at + 1: at + 2] != quote):
                        at += 2 if text[at] in ("\\", quote) else 1
                    value = text[start:at]
                    rule = named_value_rule(columns[index], value) if index in columns and value else None
                    if rule is not None and not value.startswith("[REDACTED:") and "\n" not in value:
                        found.append((start, at, rule))
                    at += 1
                elif text[at] == ",":
                    index, at = index + 1, at + 1
                elif text[at] in "\r\n;":
                    return at  # not a row: a statement cut short or something else
                else:
                    at += 1
            at += 1
            while at < end and text[at] in " \t\r\n,":
                at += 1
        return at


LAYOUT_RULES: tuple[Rule, ...] = (_typed_rule("password-assignment"), _typed_rule("secret-assignment"), _JWK, _IPSEC,
                                  _SEED, _PASSPHRASE, KeyedLinesRule(), SqlInsertRule())
