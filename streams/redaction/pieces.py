"""Secrets written in pieces, encoded, or named by the file they stand in (policy 2.13, 2.14).

An eighth adversarial round found these kept under 2.12:

- a value split over string literals that a language joins (Python's implicit concatenation
  ``("part1"`` and ``"part2")`` on the next line, ``"a" +`` in JavaScript, Java or Go): the first
  piece may be a known format and go while the rest stays, or no piece alone be random enough
  under its name;
- the base64 of ``user:password`` with no ``Basic`` before it (an agent decoding or building an
  ``Authorization`` header, a ``.dockerconfigjson``'s ``auth`` pasted into prose);
- keys known by their own shape or by the file that holds them: a Bitcoin WIF private key
  (base58check, version 0x80), a Solana keypair file (64 numbers of 0-255), a minisign / signify
  secret key after its ``untrusted comment``, WordPress's ``AUTH_KEY`` / ``*_SALT`` constants, a
  Bitwarden CLI session key, rclone's ``config create`` key / value arguments, a Zapier catch
  hook's URL, the password line of an OpenVPN auth file printed by ``cat``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

from streams.redaction.base import (
    MARKER_PREFIX,
    RegexRule,
    Rule,
    Scan,
    plain_words,
    plain_words_fingerprint,
    replace_spans,
)
from streams.redaction.context import named_value_rule, table_secret
from streams.redaction.entropy import looks_random
from streams.redaction.keys import is_placeholder, name_class
from streams.redaction.tokens import TOKEN_RULES

__all__ = ["CONCATENATED_RULE", "PIECE_RULES", "redact_repeats", "removed_values", "repeatable", "repeated_fingerprint"]

_LITERAL = r"(?P<q>['\"])(?P<body>[^'\"\r\n\\]{1,512})(?P=q)"
# Where one literal ends a line and the next line starts with another: the junction every joined
# value has. Literal-led, so the engine finds it in C.
_JUNCTION = re.compile(r"['\"][ \t]*[+\\]?[ \t]*\r?\n[ \t]*\+?[ \t]*['\"]", re.ASCII)
# The first literal of a chain and what stands before it on its line: a name and `=` / `:` / `:=`
# (an optional `(`), or nothing but an opening bracket and indentation.
_HEAD = re.compile(r"[ \t]*(?:(?:const|let|var|final|static|private|public|String|string|str)[ \t]+)*"
                   r"(?:(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,64})['\"]?[ \t]*(?::=|=|:)[ \t]*)?\(?[ \t]*" + _LITERAL
                   + r"[ \t]*[+\\]?[ \t]*\r?$", re.ASCII | re.MULTILINE)
# A name alone on the line before the chain: `SECRET_KEY = (` then the literals on their own lines.
_OPEN = re.compile(r"[ \t]*(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,64})['\"]?[ \t]*(?::=|=|:)[ \t]*\([ \t]*\r?$", re.ASCII)
_NEXT = re.compile(r"\r?\n[ \t]*\+?[ \t]*" + _LITERAL + r"(?P<after>[ \t]*[+\\]?[ \t]*)(?=\r?\n|\)|,|;|\Z)", re.ASCII)
_MARKER_BODY = re.compile(r"\[REDACTED:(?P<rule>[a-z0-9-]+)\]", re.ASCII)
_TOKEN_REST = re.compile(r"[A-Za-z0-9_+/=.~-]{2,}", re.ASCII)
_TOKEN_LIKE = re.compile(r"[^0-9A-Z]*[0-9A-Z]", re.ASCII)
_MAX_PIECES = 16


class ConcatenatedLiteralRule(Rule):
    """A secret split over string literals a language joins: when one piece already lost a
    secret (a known format's first half), the other pieces that are a token's rest go under its
    marker; when none did, the pieces joined are judged as the value of the name they are
    assigned to (`SECRET_KEY = ("…"` / `"…")`)."""

    def __init__(self) -> None:
        # Where a line ends in a literal (a quote, or a `+` / `\\` after one) and so may go on.
        super().__init__(name="concatenated-secret", needs=frozenset("\n"),
                         triggers=("\"\n", "'\n", "\"\r", "'\r", "+\n", "\\\n", "\" \n", "' \n"),
                         description="a secret split over joined string literals (2.13)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _JUNCTION.pattern, _HEAD.pattern, _OPEN.pattern, _NEXT.pattern,
                _TOKEN_REST.pattern, _TOKEN_LIKE.pattern, str(_MAX_PIECES), *plain_words_fingerprint()]

    def hit_names(self) -> tuple[str, ...]:
        return ()  # counted under the rule the joined value falls under

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found: list[tuple[int, int, str]] = []
        done = 0
        for junction in _JUNCTION.finditer(text):
            if junction.start() < done:
                continue
            line_start = text.rfind("\n", 0, junction.start()) + 1
            head = _HEAD.match(text, line_start)
            if head is None or head.end("body") != junction.start():
                continue
            name = head.group("name")
            if name is None and line_start >= 2:
                previous = text.rfind("\n", 0, line_start - 1) + 1
                opened = _OPEN.match(text, previous, line_start - 1)
                name = opened.group("name") if opened is not None and opened.end() == line_start - 1 else None
            pieces = [(head.start("body"), head.end("body"))]
            position = head.end()
            while len(pieces) < _MAX_PIECES:
                piece = _NEXT.match(text, position)
                if piece is None:
                    break
                pieces.append((piece.start("body"), piece.end("body")))
                position = piece.end()
            done = position
            if len(pieces) < 2:
                continue
            found += _judged(text, name, pieces)
        return replace_spans(text, found, hits) if found else text


def _judged(text: str, name: str | None, pieces: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    bodies = [text[start:end] for start, end in pieces]
    marked = next((_MARKER_BODY.search(body) for body in bodies if MARKER_PREFIX in body), None)
    if marked is not None:
        # A piece lost a known secret: the pieces after it that are a token's rest are its rest.
        rule = marked.group("rule")
        first = next(index for index, body in enumerate(bodies) if MARKER_PREFIX in body)
        spans = []
        for (start, end), body in zip(pieces[first + 1:], bodies[first + 1:], strict=True):
            if (MARKER_PREFIX in body or not _TOKEN_REST.fullmatch(body) or not _TOKEN_LIKE.match(body)
                    or plain_words(body)):
                break
            spans.append((start, end, rule))
        return spans
    if name is None:
        return []
    rule = named_value_rule(name.rsplit(".", 1)[-1], "".join(bodies))
    return [(start, end, rule) for start, end in pieces] if rule is not None else []


# Two secrets known by what they decode to, wherever they stand (2.13):
# - the base64 of user:password: what follows `Basic` in a header, pasted into a sentence or a
#   config without it. Standard base64, padded as a header writes it, decoding to printable
#   `user:password`: a user of name characters with a letter, a password that is no number, hex
#   digest, UUID or word alone (GraphQL ids are base64 of `Type:123`);
# - a Bitcoin private key in wallet import format: base58check of 0x80, 32 key bytes and an
#   optional 0x01, its last four bytes the double SHA-256 of the rest. Nothing else passes.
# Candidates are found in C: the text's bytes with base64 characters made `b` and every other one
# a space (a non-ASCII character is one `?`, so positions agree), then runs of 16-400 `b`s (base58
# is a subset of base64).
_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_B64_CLASSES = bytes(ord("b") if byte in _B64_ALPHABET else ord(" ") for byte in range(256))
_B64_CANDIDATE = re.compile(b"b" * 15 + b"b+")  # a literal head: the engine skips ahead in C
_LONGEST_CANDIDATE = 400
# 2.15: the base64 of a whole `.env` or JSON config runs past 400 (`echo … | base64 -d > .env`, a CI
# variable, a Secret's data): longer candidates, up to 64 KiB, are read as an encoded assignment only.
_LONGEST_ENCODED_FILE = 65536
# Every fourth character of the base64 of printable text encodes a byte's top six bits: 8-31.
_PRINTABLE_LEADS = "IJKLMNOPQRSTUVWXYZabcdef"
_USER_PASSWORD = re.compile(rb"(?P<user>[A-Za-z0-9._@+\\-]{1,64}):(?P<password>[\x21-\x7e]{6,128})", re.ASCII)
_NOT_A_PASSWORD = re.compile(rb"[0-9]+|[0-9a-f]{16,}|[0-9A-F]{16,}|[0-9a-fA-F]{8}-[0-9a-fA-F-]{27}|[A-Za-z_]+", re.ASCII)
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(_B58)}


def _base64_of(value: str, leads: str) -> bytes | None:
    """``value`` decoded, when it is base64 whose every fourth character is one of ``leads`` (the
    top bits of the bytes a reading wants: a cheap test before decoding)."""
    if len(value) % 4 or value[::4].strip(leads):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _credentials(value: str) -> bool:
    decoded = _base64_of(value, _PRINTABLE_LEADS)
    if decoded is None:
        return False
    pair = _USER_PASSWORD.fullmatch(decoded)
    if pair is None:
        return False
    user, password = pair.group("user"), pair.group("password")
    return (any(chr(c).isalpha() for c in user) and b":" not in password
            and _NOT_A_PASSWORD.fullmatch(password) is None)


# 2.14: the base64 of an assignment a secret-like name makes secret (`echo REJfUEFTU1dP… | base64
# -d > .env`, a CI variable holding an encoded .env or JSON): decoded to printable lines (a line
# break's byte leads with C or D), a `NAME=value`, `NAME: value` or `"NAME": "value"` among them
# judged as the assignment it is.
_TEXT_LEADS = _PRINTABLE_LEADS + "CD"
_ENCODED_ASSIGNMENT = re.compile(r"^[ \t]*(?:export[ \t]+)?[\"']?(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})[\"']?[ \t]*[=:][ \t]*[\"']?"
                                 r"(?P<value>[^\s\"',}]{1,256})", re.ASCII | re.MULTILINE)


def _encoded_assignment(value: str) -> bool:
    raw = _base64_of(value, _TEXT_LEADS)
    if raw is None or not raw.isascii():
        return False
    decoded = raw.decode("ascii")
    if not decoded.isprintable() and not decoded.replace("\n", "").replace("\r", "").replace("\t", "").isprintable():
        return False
    return any(named_value_rule(pair.group("name"), pair.group("value")) is not None
               for line in decoded.replace("{", "\n").replace(",", "\n").splitlines()
               for pair in [_ENCODED_ASSIGNMENT.match(line)] if pair is not None)


# 2.23: the base64 of a token a known prefix names (`echo c2stcHJvai0… | base64 -d`, `OPENAI_API_KEY=$(echo … |
# base64 -d)`, a CI variable holding one encoded): decoded to printable text in which a token rule led by a
# prefix of three or more characters (`sk-proj-`, `ghp_`, `AKIA`, `xoxb-`, not Twilio's `SK` / `AC`) matches.
_ENCODED_TOKEN_RULES = tuple(rule for rule in TOKEN_RULES if rule.literals)


def _encoded_token(value: str) -> str | None:
    raw = _base64_of(value, _TEXT_LEADS)
    if raw is None or not raw.isascii():
        return None
    decoded = raw.decode("ascii")
    if not decoded.strip().isprintable():
        return None
    lowered = decoded.lower()
    for rule in _ENCODED_TOKEN_RULES:
        if any(literal in lowered for literal in rule.literals):
            for match in rule.pattern.finditer(decoded):
                if rule.check is None or rule.check(match):
                    return rule.name
    return None


def _wif(value: str) -> bool:
    if not 51 <= len(value) <= 52 or value[0] not in "5KL" or value.strip(_B58):
        return False
    number = 0
    for char in value:
        number = number * 58 + _B58_INDEX[char]
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    if len(raw) not in (37, 38) or raw[0] != 0x80:
        return False
    return hashlib.sha256(hashlib.sha256(raw[:-4]).digest()).digest()[:4] == raw[-4:]


class EncodedSecretRule(Rule):
    """The base64 of `user:password` with no `Basic` before it, and Bitcoin WIF private keys."""

    def __init__(self) -> None:
        super().__init__(name="basic-auth", description="base64 of user:password standing alone; Bitcoin WIF keys (2.13)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _B64_CLASSES.decode("latin-1"), _B64_CANDIDATE.pattern.decode(), str(_LONGEST_CANDIDATE), str(_LONGEST_ENCODED_FILE), *map(str, _WRAP_WIDTHS), _wrapped_encoded_file.__qualname__,
                _PRINTABLE_LEADS, _USER_PASSWORD.pattern.decode(), _NOT_A_PASSWORD.pattern.decode(), _B58,
                _credentials.__qualname__, _wif.__qualname__, _TEXT_LEADS, _ENCODED_ASSIGNMENT.pattern, _encoded_assignment.__qualname__,
                _encoded_token.__qualname__, *sorted({rule.name for rule in _ENCODED_TOKEN_RULES})]

    def hit_names(self) -> tuple[str, ...]:
        return ("basic-auth", "bitcoin-private-key", "secret-assignment", *sorted({rule.name for rule in _ENCODED_TOKEN_RULES}))

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if not scan.has_long_token():
            return text
        found = []
        runs = []
        for candidate in _B64_CANDIDATE.finditer(scan.ascii_bytes().translate(_B64_CLASSES)):
            start, end = candidate.span()
            runs.append((start, end))
            length = end - start
            if length > _LONGEST_ENCODED_FILE or (length % 4 and not 51 <= length <= 52 and text[end - 1] != "="
                                                  and text.find("=", start, end) == -1):
                continue  # base64 credentials come in fours; a WIF key is 51 or 52 long
            inner = text.find("=", start, end)
            if inner != -1:
                # `name=` glued before it (`auth=ZGVw…`): the value is what follows the last inner `=`.
                inner = text.rfind("=", start, end - 2)
                while inner != -1 and text[inner + 1] == "=":
                    inner = text.rfind("=", start, inner)
                start = start if inner == -1 else inner + 1
            value = text[start:end]
            if end - start > _LONGEST_CANDIDATE:
                # 2.15: only a whole encoded file (an .env, a JSON config) is this long.
                if _encoded_assignment(value):
                    found.append((start, end, "secret-assignment"))
            elif _credentials(value):
                found.append((start, end, "basic-auth"))
            elif _wif(value):
                found.append((start, end, "bitcoin-private-key"))
            elif _encoded_assignment(value):
                found.append((start, end, "secret-assignment"))
            elif (token := _encoded_token(value)) is not None:
                found.append((start, end, token))
        found += _wrapped_encoded_file(text, runs)
        return replace_spans(text, found, hits) if found else text


# 2.15: `base64 FILE` wraps its output at 76 columns (`openssl base64` at 64), so an encoded .env
# printed by a tool is lines of one width and a shorter last one, none of which decodes to a whole
# assignment. Runs of those widths on consecutive lines are joined and read as one.
_WRAP_WIDTHS = (64, 76)


def _wrapped_encoded_file(text: str, runs: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    found: list[tuple[int, int, str]] = []
    index = 0
    while index < len(runs):
        width = runs[index][1] - runs[index][0]
        last = index
        if width in _WRAP_WIDTHS:
            while last + 1 < len(runs) and runs[last][1] - runs[last][0] == width and \
                    text[runs[last][1]: runs[last + 1][0]] in ("\n", "\r\n") and runs[last + 1][1] - runs[last + 1][0] <= width:
                last += 1
        if last > index and sum(end - start for start, end in runs[index: last + 1]) <= _LONGEST_ENCODED_FILE \
                and _encoded_assignment("".join(text[start:end] for start, end in runs[index: last + 1])):
            found += [(start, end, "secret-assignment") for start, end in runs[index: last + 1]]
        index = last + 1
    return found


def _vpn_password(match: re.Match[str]) -> bool:
    return not is_placeholder(match.group("value"), quoted=True) and MARKER_PREFIX not in match.group("value")


def _salt(match: re.Match[str]) -> bool:
    # wp-config-sample.php's "put your unique phrase here" is words, as no generated salt is.
    return _WORDS_AND_SPACES.fullmatch(match.group("value")) is None


_WORDS_AND_SPACES = re.compile(r"[A-Za-z ]+", re.ASCII)
_BYTE = r"[ \t\r\n]*(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])[ \t\r\n]*"
_KEY_FILES = (
    # A Solana keypair file (`~/.config/solana/id.json`, `solana-keygen new -o`): its 64 bytes as
    # a JSON array, the first 32 the private key. Only where the text names a keypair: test
    # vectors are arrays of bytes too.
    RegexRule(name="private-key", lower_triggers=("solana", "keypair", "id.json"),
              description="a Solana keypair file: a JSON array of 64 bytes (2.13)",
              pattern=re.compile(r"\[(?:" + _BYTE + r",){63}" + _BYTE + r"\]", re.ASCII)),
    # minisign and signify secret keys: the base64 line after an untrusted comment naming one.
    RegexRule(name="private-key", triggers=("untrusted comment:",), group="value",
              description="a minisign / signify secret key file's key line (2.13)",
              pattern=re.compile(r"untrusted comment:[^\r\n]*secret key[^\r\n]*\r?\n(?P<value>[A-Za-z0-9+/]{40,}={0,2})", re.ASCII)),
    # WordPress's keys and salts (wp-config.php): 64 printable characters, punctuation and all,
    # which no token reading takes whole.
    RegexRule(name="secret-assignment", lower_triggers=("_key'", '_key"', "_salt'", '_salt"'), group="value", check=_salt,
              description="WordPress AUTH_KEY / SECURE_AUTH_KEY / LOGGED_IN_KEY / NONCE_KEY and *_SALT constants (2.13)",
              pattern=re.compile(r"(?:SECURE_AUTH|AUTH|LOGGED_IN|NONCE)_(?:KEY|SALT)['\"][ \t]*,[ \t]*"
                                 r"(?P<q>['\"])(?P<value>(?:(?!(?P=q))[^\r\n]){16,128})(?P=q)", re.ASCII)),
    # A Zapier catch hook's URL is its key: /hooks/catch/ACCOUNT/KEY/.
    RegexRule(name="url-token", triggers=("hooks.zapier.com",), group="value",
              description="a Zapier catch hook's account and key (2.13)",
              pattern=re.compile(r"hooks\.zapier\.com/hooks/catch/(?P<value>[0-9]{4,12}/[A-Za-z0-9]{5,12})(?![A-Za-z0-9])", re.ASCII)),
    # OpenVPN's auth-user-pass file printed: a user line, then the password (a VPN's auth / pass /
    # credentials file by its path; the command rule reads only the line right after a command).
    RegexRule(name="secret-output", lower_triggers=("vpn",), group="value", check=_vpn_password,
              description="the password line of an OpenVPN auth-user-pass file printed by cat (2.13)",
              pattern=re.compile(r"\bcat[ \t]+[^\s|;&]*vpn[^\s|;&]*(?:auth|pass|cred|login)[^\s|;&]*[ \t]*\r?\n"
                                 r"[ \t]*[^\s]{1,64}[ \t]*\r?\n[ \t]*(?P<value>[^\s]{4,128})[ \t]*\r?$",
                                 re.ASCII | re.MULTILINE)),
    # Bitwarden's CLI session key (`bw unlock` prints `export BW_SESSION="…"`).
    RegexRule(name="secret-assignment", triggers=("BW_SESSION",), group="value",
              description="a Bitwarden CLI session key, BW_SESSION=… (2.13)",
              pattern=re.compile(r"BW_SESSION['\"]?[ \t]*[=:][ \t]*['\"]?(?P<value>[A-Za-z0-9+/]{20,}={0,2})", re.ASCII)),
    # 1Password's CLI session key (2.17): `op signin` prints `export OP_SESSION_<account>="…"`
    # (43 base64url characters).
    RegexRule(name="secret-assignment", triggers=("OP_SESSION_",), group="value",
              description="a 1Password CLI session key, OP_SESSION_<account>=… (2.17)",
              pattern=re.compile(r"OP_SESSION_[A-Za-z0-9_]{1,64}['\"]?[ \t]*[=:][ \t]*['\"]?(?P<value>[A-Za-z0-9_-]{20,})", re.ASCII)),
)


# rclone config create NAME TYPE key value …: the values of secret-like keys (`pass`,
# `secret_access_key`, `client_secret`, `token`), which rclone takes as plain arguments.
_RCLONE = re.compile(r"\brclone[ \t]+config[ \t]+(?:create|update)[ \t]+[^\s|;&]+[ \t]+(?P<args>[^\r\n|;&]*)", re.ASCII)
_ARGUMENT = re.compile(r"'[^'\r\n]*'|\"[^\"\r\n]*\"|[^\s'\"]+", re.ASCII)


class RcloneConfigRule(Rule):
    """The secret values among `rclone config create` / `update` key / value arguments."""

    def __init__(self) -> None:
        super().__init__(name="secret-assignment", lower_triggers=("rclone config",),
                         description="rclone config create / update: values of secret-like keys (2.13)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _RCLONE.pattern, _ARGUMENT.pattern]

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found: list[tuple[int, int, str]] = []
        for line in _RCLONE.finditer(text):
            # After the remote's name its type, then pairs; flags (--obscure) stand anywhere.
            words = [word for word in _ARGUMENT.finditer(text, line.start("args"), line.end("args"))
                     if not word.group().startswith("-")][1:]
            for key, value in zip(words[::2], words[1::2], strict=False):
                quoted = value.group()[:1] in "'\""
                body = value.group().strip("'\"")
                if not body or MARKER_PREFIX in body:
                    continue
                # rclone's own password key is a bare `pass` (sftp, ftp, smb, webdav).
                kind = "password" if key.group() == "pass" else name_class(key.group())
                if kind is None or is_placeholder(body, quoted=quoted):
                    continue
                # A key's value here is what the flag of that name would take: a password whatever
                # its shape, another secret when it is random or a token with a letter and a digit.
                rule = ("password-assignment" if kind == "password"
                        else "secret-assignment" if looks_random(body) or table_secret(body) else None)
                if rule is not None:
                    start = value.start() + (1 if quoted else 0)
                    found.append((start, start + len(body), rule))
        return replace_spans(text, found, hits) if found else text


PIECE_RULES: tuple[Rule, ...] = (EncodedSecretRule(), *_KEY_FILES, RcloneConfigRule())
"""Run with the context rules; :class:`ConcatenatedLiteralRule` runs after every rule that
leaves a marker (``streams.redaction.rules``)."""
CONCATENATED_RULE = ConcatenatedLiteralRule()


# A secret a text names once and repeats bare (2.13): `DB_PASSWORD=hunter2-prod` in an env dump,
# then "connected with hunter2-prod" further down. Every reading that removed the first needed the
# name beside it; the repeat has none. After the rules, the values the contextual rules removed
# are read back from the text as it was (the redaction is the text with spans replaced by
# markers: the pieces between markers, found in order, bound each removed value) and their other
# whole-token occurrences in the same text go under the same marker. Only values a person chose
# or a name judged (not self-naming formats, which go wherever they stand), of 6-128 printable
# characters with a letter and a digit or symbol; a dump's values only under secret-like names.
_ANY_MARKER = re.compile(r"\[REDACTED:(?P<rule>[a-z0-9-]+)\]|\[USER\]", re.ASCII)
_REPEATED_RULES = frozenset({"password-assignment", "secret-assignment", "secret-in-prose", "password-in-prose",
                             "cli-password", "mysql-password", "url-password", "secret-output", "env-dump"})
_REPEATABLE = re.compile(r"[!-~]{6,128}", re.ASCII)
_DUMP_LINE = re.compile(r"^[^A-Za-z_\r\n]*(?P<name>[A-Za-z_][A-Za-z0-9_]*)[\"']?[=:][ \t]*[\"']?(?P<value>[^\s\"']+)", re.ASCII | re.MULTILINE)
_MAX_REPEATED = 16
_NAME_LIKE = re.compile(r"[a-z]+[0-9]{1,2}|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+", re.ASCII)


def repeated_fingerprint() -> list[str]:
    """What decides :func:`redact_repeats`, for the policy hash."""
    return [_ANY_MARKER.pattern, *sorted(_REPEATED_RULES), _REPEATABLE.pattern, _DUMP_LINE.pattern, str(_MAX_REPEATED), _NAME_LIKE.pattern]


def redact_repeats(original: str, redacted: str, hits: dict[str, int]) -> str:
    """``redacted`` (the redaction of ``original``) with the other bare occurrences of each value
    a contextual rule removed from ``original`` replaced by that rule's marker."""
    if _REPEATED_RULES.isdisjoint(hits):
        return redacted
    values = removed_values(original, redacted)
    if not values:
        return redacted
    found: list[tuple[int, int, str]] = []
    for value, rule in values.items():
        # A whole token: `hunter2-prod`, not the start of `hunter2-prod-replica` or `x.hunter2-prod`.
        pattern = re.compile(r"(?<![A-Za-z0-9_.-])" + re.escape(value) + r"(?![A-Za-z0-9_-]|\.[A-Za-z0-9])")
        found += [(*match.span(), rule) for match in pattern.finditer(redacted) if not _in_marker(redacted, match.start())]
    return replace_spans(redacted, found, hits) if found else redacted


def removed_values(original: str, redacted: str) -> dict[str, str]:
    """Value -> rule of each value a contextual rule removed from ``original`` (``redacted`` is
    its redaction) that may stand bare elsewhere: what :func:`redact_repeats` looks for in the
    same text and :mod:`streams.redaction.memory` in the session's later events."""
    values: dict[str, str] = {}
    for rule, start, end in _removed(original, redacted):
        if rule == "env-dump":
            for line in _DUMP_LINE.finditer(original, start, end):
                if name_class(line.group("name")) is not None:
                    _remember(values, line.group("value"), rule)
        elif rule in _REPEATED_RULES:
            _remember(values, original[start:end].strip("'\"`"), rule)
    return values


def repeatable(value: str) -> bool:
    """Whether ``value`` may be looked for bare (:func:`removed_values`' test of one value)."""
    values: dict[str, str] = {}
    _remember(values, value, "")
    return bool(values)


def _remember(values: dict[str, str], value: str, rule: str) -> None:
    # Not a name a reading may have taken for a value (`urllib2`, `Inform6Lexer.tokens`): bare,
    # those stand in code for what they name, and a first mistake must not spread.
    if (len(values) < _MAX_REPEATED and _REPEATABLE.fullmatch(value) and MARKER_PREFIX not in value
            and any(c.isalpha() for c in value) and any(c.isdigit() or c in "!#$%&*+=?@^~-" for c in value)
            and not _NAME_LIKE.fullmatch(value) and not is_placeholder(value, quoted=True)):
        values.setdefault(value, rule)


def _in_marker(text: str, position: int) -> bool:
    opened = text.rfind(MARKER_PREFIX, max(0, position - 64), position)
    return opened != -1 and "]" not in text[opened:position]


def _removed(original: str, redacted: str) -> list[tuple[str, int, int]]:
    """``(rule, start, end)`` in ``original`` of what each marker of ``redacted`` replaced; none
    when the pieces between markers cannot be found in order (the text was rewritten, not only
    redacted: a JSON literal re-escaped), or where two markers meet (no edge between them)."""
    spans: list[tuple[str, int, int]] = []
    cursor, last = 0, 0
    pending: tuple[str | None, int] | None = None
    for match in _ANY_MARKER.finditer(redacted):
        segment = redacted[last:match.start()]
        if pending is None:
            if not original.startswith(segment, cursor):
                return []
            cursor += len(segment)
        elif not segment:
            pending = (None, pending[1])  # two markers met: where one value ends is unknown
            last = match.end()
            continue
        else:
            at = original.find(segment, pending[1] + 1)
            if at == -1:
                return []
            if pending[0] is not None:
                spans.append((pending[0], pending[1], at))
            cursor = at + len(segment)
        pending = (match.group("rule") or "home-username", cursor)
        last = match.end()
    if pending is not None and pending[0] is not None:
        tail = redacted[last:]
        end = len(original) - len(tail)
        if end > pending[1] and original.endswith(tail):
            spans.append((pending[0], pending[1], end))
    return spans
