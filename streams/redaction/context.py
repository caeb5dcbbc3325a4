"""Secrets recognised by their context: key blocks, assignments, URLs, headers, env dumps."""

from __future__ import annotations

import base64
import binascii
import re

from streams.redaction.base import RegexRule, Rule, is_marker_at, marker
from streams.redaction.entropy import looks_random
from streams.redaction.keys import is_placeholder, name_class

__all__ = ["CONTEXT_RULES", "ENV_DUMP_RULE", "PRIVATE_KEY_RULE", "AssignmentRule"]

_KEY_LABEL = r"-----BEGIN[A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----"
PRIVATE_KEY_RULE = RegexRule(
    name="private-key",
    triggers=("PRIVATE KEY",),
    description="PEM / OpenSSH / PGP private key blocks, BEGIN through END (also inside JSON strings)",
    # A block normally ends at its END line; a block cut short (a truncated tool output) is
    # redacted through the end of its key material instead of being left half-visible.
    pattern=re.compile(
        _KEY_LABEL
        + r"(?:.{0,65536}?-----END[A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----"
        + r"|[A-Za-z0-9+/=\s\\:,.-]*)",
        re.ASCII | re.DOTALL,
    ),
)

_ENV_LINE = r"(?:export[ \t]+)?[A-Za-z_][A-Za-z0-9_]*=(?!=)[^\r\n]*"
_UPPER_NAME = re.compile(r"^(?:export[ \t]+)?[A-Z_]*[A-Z][A-Z0-9_]*=", re.MULTILINE | re.ASCII)


def _env_dump(match: re.Match[str]) -> bool:
    # env/printenv/.env output names variables in capitals; three lowercase `a=1` lines are code.
    return _UPPER_NAME.search(match.group(0)) is not None


ENV_DUMP_RULE = RegexRule(
    name="env-dump",
    triggers=("=",),
    description="three or more consecutive NAME=value lines (env, printenv, .env files), replaced whole",
    pattern=re.compile(rf"(?:(?<=\n)|^){_ENV_LINE}(?:\r?\n{_ENV_LINE}){{2,}}", re.ASCII),
    check=_env_dump,
)

_AWS_SECRET = RegexRule(
    name="aws-secret-access-key",
    lower_triggers=("secret_access_key", "secretaccesskey", "secret-access-key", "aws_secret"),
    description="AWS secret access key assigned to aws_secret_access_key / SecretAccessKey",
    pattern=re.compile(
        r"(?:aws_?secret_?(?:access_?)?key|secret_?access_?key|secret-access-key)"
        r"[\"']?\s*(?:=|:|=>)\s*[\"']?(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        re.ASCII | re.IGNORECASE,
    ),
    group="value",
)

_AZURE_KEY = RegexRule(
    name="azure-storage-key",
    lower_triggers=("accountkey=", "sharedaccesskey="),
    description="AccountKey= / SharedAccessKey= in Azure connection strings",
    pattern=re.compile(r"(?:AccountKey|SharedAccessKey)=(?P<value>[A-Za-z0-9+/]{20,}={0,2})", re.ASCII | re.IGNORECASE),
    group="value",
)

_AZURE_SAS = RegexRule(
    name="azure-sas-signature",
    triggers=("sig=",),
    description="sig= signature of an Azure shared access signature URL",
    pattern=re.compile(r"sig=(?<=[?&;]sig=)(?P<value>[A-Za-z0-9%+/=]{20,})", re.ASCII),
    group="value",
)

_URL_PASSWORD = RegexRule(
    name="url-password",
    triggers=("://",),
    description="password in scheme://user:password@host (database, broker and HTTP URLs)",
    pattern=re.compile(
        r"://(?<=[A-Za-z0-9]://)[^\s/?#@:\"'<>]*:(?P<value>[^\s/?#@\"'<>]+)@(?=[A-Za-z0-9\[])",
        re.ASCII,
    ),
    group="value",
)

_TOKEN_CHARS = r"[A-Za-z0-9._~+/=-]"


def _bearer(match: re.Match[str]) -> bool:
    token = match.group("value")
    # "the bearer of this letter" is prose; a token has digits, or is long and mixed-case.
    return any(c.isdigit() for c in token) or (len(token) >= 20 and not token.islower())


_BEARER = RegexRule(
    name="bearer-token",
    lower_triggers=("bearer",),
    description="Bearer tokens (Authorization: Bearer ..., \"Bearer ...\")",
    pattern=re.compile(rf"bearer[ \t]+(?P<value>{_TOKEN_CHARS}{{8,}})", re.ASCII | re.IGNORECASE),
    group="value",
    check=_bearer,
)


def _basic_credentials(match: re.Match[str]) -> bool:
    value = match.group("value")
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and all(32 <= byte < 127 for byte in decoded)


_BASIC = RegexRule(
    name="basic-auth",
    lower_triggers=("basic",),
    description="HTTP Basic credentials (base64 of user:password after 'Basic')",
    pattern=re.compile(r"basic[ \t]+(?P<value>[A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])", re.ASCII | re.IGNORECASE),
    group="value",
    check=_basic_credentials,
)

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_KEYWORDS = r"passw(?:or)?ds?|passphrase|pwd|secret|token|credential|cookie|auth|api[_-]?key|key|dsn"


class AssignmentRule(Rule):
    """Values assigned to secret-like names, in code, config, env files, JSON, YAML and CLIs.

    The pattern finds a secret keyword, the rest of the name, a separator and a value; Python
    then reads the whole name and decides: ``password``-class names lose any real value,
    ``secret`` and ``key`` names lose values that look random (Shannon entropy), and an
    ``export NAME=value`` line with a secret-like name loses its value whatever it is.
    """

    _pattern = re.compile(
        rf"(?:{_KEYWORDS})[A-Za-z0-9_.-]{{0,48}}(?P<close>\\?[\"']?)[ \t]*"
        r"(?P<sep>:=|=>|=(?![=~])|:(?![:/\\]))[ \t]*"
        r"(?:\\?\"(?P<dq>[^\"\\\r\n]{1,4096})\\?\"|'(?P<sq>[^'\r\n]{1,4096})'"
        r"|(?P<bare>[^\s\"'`,;<>|{}()]{1,4096})(?P<eol>(?=[ \t]*(?:$|\r?\n|[,;&})])))?)",
        re.ASCII | re.IGNORECASE | re.MULTILINE,
    )
    _flag = re.compile(
        r"--(?<![A-Za-z0-9_-]--)(?P<name>[A-Za-z0-9-]{0,24}(?:password|passwd|passphrase|token|secret|api-key|apikey)"
        r"[A-Za-z0-9-]{0,24})[ \t]+(?:\"(?P<dq>[^\"\r\n]{1,4096})\"|'(?P<sq>[^'\r\n]{1,4096})'|(?P<bare>[^\s\"'|;&-][^\s\"'|;&]*))",
        re.ASCII | re.IGNORECASE,
    )
    _xml = re.compile(
        r"<(?P<name>[A-Za-z0-9_.:-]{0,32}(?:passw(?:or)?d|secret|token|api[_-]?key)[A-Za-z0-9_.:-]{0,32})>"
        r"(?P<bare>[^<\r\n]{1,4096})</",
        re.ASCII | re.IGNORECASE,
    )
    _names = {"password": "password-assignment", "secret": "secret-assignment", "key": "secret-assignment"}

    def __init__(self) -> None:
        super().__init__(
            name="secret-assignment",
            lower_triggers=("pass", "pwd", "secret", "token", "credential", "cookie", "auth", "key", "dsn"),
            description="password-assignment: any real value of a password-like name; "
            "secret-assignment: high-entropy values of secret-like names, and export lines",
        )

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._pattern.pattern, self._flag.pattern, self._xml.pattern]

    def apply(self, text: str, hits: dict[str, int]) -> str:
        if "--" in text:
            text = self._sub(self._flag, text, hits, kind="flag")
        if "</" in text:
            text = self._sub(self._xml, text, hits, kind="xml")
        return self._sub(self._pattern, text, hits, kind="assignment")

    def _sub(self, pattern: re.Pattern[str], text: str, hits: dict[str, int], *, kind: str) -> str:
        changed = False

        def replace(match: re.Match[str]) -> str:
            nonlocal changed
            verdict = self._judge(text, match, kind)
            if verdict is None:
                return match.group(0)
            rule, start, end = verdict
            changed = True
            hits[rule] = hits.get(rule, 0) + 1
            whole, offset = match.group(0), match.start()
            return whole[: start - offset] + marker(rule) + whole[end - offset:]

        result = pattern.sub(replace, text)
        return result if changed else text

    def _judge(self, text: str, match: re.Match[str], kind: str) -> tuple[str, int, int] | None:
        """The rule to redact the value under and the value's span, or ``None`` to keep it."""
        groups = match.groupdict()
        group = next((name for name in ("dq", "sq", "bare") if groups.get(name) is not None), None)
        if group is None:
            return None
        quoted = group != "bare"
        value = groups[group]
        start, end = match.span(group)
        if kind == "assignment":
            name_start = _name_start(text, match.start())
            name = text[name_start: match.start("close")].strip(".-")
            if not quoted and "&" in value and text[name_start - 1: name_start] in ("?", "&"):
                # A URL query parameter ends at the next "&"; elsewhere "&" is part of the value.
                value = value[: value.index("&")]
                end = start + len(value)
            exported = text.endswith("export ", 0, name_start) or text.endswith("export\t", 0, name_start)
            if not quoted and match.group("sep") == ":" and match.group("eol") is None:
                # "Password: must be 8 characters" is prose: a YAML/header value fills its line.
                return None
        else:
            name, exported = match.group("name"), kind == "flag"
        if not value or is_marker_at(value, 0) or is_placeholder(value, quoted=quoted):
            return None
        if not quoted and text[end: end + 1] in ("(", "["):
            return None  # password = getpass(...), token = tokens[0]: code, not a value
        name_kind = name_class(name)
        if name_kind is None:
            return None
        if name_kind == "password":
            return self._names["password"], start, end
        if exported or looks_random(value):
            return self._names[name_kind], start, end
        return None


def _name_start(text: str, position: int) -> int:
    # Walk back over the identifier the keyword sits in (API_KEY, x-api-key, db.password).
    # Names are short, so this loop runs a few steps per candidate, never over whole texts.
    start = position
    limit = max(0, position - 64)
    while start > limit and text[start - 1] in _NAME_CHARS:
        start -= 1
    return start


CONTEXT_RULES: tuple[Rule, ...] = (
    _AWS_SECRET, _AZURE_KEY, _AZURE_SAS, _URL_PASSWORD, _BEARER, _BASIC,
)
