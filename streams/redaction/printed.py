"""Secrets as installers, consoles and other tools print or take them (policy 2.14).

A ninth adversarial round seeded these into real sessions and found them kept: each has a mark of
its own (a label the tool prints, an installer's keyword, a table's box-drawing edges, an encoding
of a URL or a JSON document), so each is read by that mark alone and nothing else pays for it.
"""

from __future__ import annotations

import base64
import binascii
import re

from streams.redaction.base import RegexRule, Rule, Scan, is_marker_at, replace_spans
from streams.redaction.context import named_value_rule, secret_value, table_secret

__all__ = ["PRINTED_RULES"]


def _value(match: re.Match[str]) -> bool:
    return secret_value(match.group("value").strip("'\""))


def _gossip_key(match: re.Match[str]) -> bool:
    # Consul's and Nomad's gossip encryption key is the base64 of 16, 24 or 32 random bytes.
    try:
        return len(base64.b64decode(match.group("value"), validate=True)) in (16, 24, 32)
    except (binascii.Error, ValueError):
        return False


def _named(match: re.Match[str]) -> bool:
    value = match.group("value").strip("'\"")
    return table_secret(value) and named_value_rule(match.group("name"), value) is not None


def _reset(match: re.Match[str]) -> bool:
    # `New value:` is what Elasticsearch's reset tools print under the user they reset.
    before = match.string[max(0, match.start() - 300): match.start()].lower()
    return _value(match) and ("reset" in before or match.group(0).lower().startswith("password for"))


_BOX = "│║┃"
_PRINTED = (
    # `vault operator init` prints the unseal (or, auto-unsealed, recovery) keys: any one of the
    # threshold is a share of the root key.
    RegexRule(name="vault-unseal-key", lower_triggers=("unseal key", "recovery key"), anchored=True, group="value", check=_value,
              description="vault operator init's Unseal Key N / Recovery Key N (2.14)",
              pattern=re.compile(r"(?:unseal|recovery)[ \t]+key[ \t]+[0-9]{1,2}:[ \t]*(?P<value>[A-Za-z0-9+/]{16,}={0,2})",
                                 re.ASCII | re.IGNORECASE)),
    # Consul's / Nomad's gossip key: `encrypt = "…"` (HCL), `"encrypt": "…"`, `-encrypt=…`, `encrypt: …`.
    RegexRule(name="secret-assignment", lower_triggers=("encrypt",), group="value", check=_gossip_key,
              description="Consul / Nomad gossip encryption key (encrypt = base64 of 16-32 bytes) (2.14)",
              pattern=re.compile(r"(?:(?<![A-Za-z0-9_])encrypt[ \t]*=[ \t]*[\"']?|\"encrypt\"[ \t]*:[ \t]*\"|(?<![A-Za-z0-9_-])-encrypt[= ][\"']?"
                                 r"|(?<![A-Za-z0-9_])encrypt:[ \t]+[\"']?)(?P<value>[A-Za-z0-9+/]{22,43}={0,2})(?![A-Za-z0-9+/=])",
                                 re.ASCII)),
    # pwdump / secretsdump lines: USER:RID:LMHASH:NTHASH::: (an NT hash logs in as the password does);
    # the empty fields go too, or the line would read as .pgpass's five fields.
    RegexRule(name="password-hash", triggers=(":::",), group="value",
              description="Windows LM:NT hash pairs as pwdump and secretsdump print them (2.14)",
              pattern=re.compile(r"(?<![^\s\"'])[^:\s\"']{1,104}:[0-9]{1,10}:(?P<value>[0-9a-fA-F]{32}:[0-9a-fA-F]{32}:::)", re.ASCII)),
    # `netsh wlan show profile NAME key=clear`: the Wi-Fi password after its label (spaces and all).
    RegexRule(name="password-assignment", lower_triggers=("key content",), anchored=True, to_line_end=True, group="value", check=_value,
              description="netsh wlan show profile key=clear's Key Content (2.14)",
              pattern=re.compile(r"key[ \t]+content[ \t]*:[ \t]*(?P<value>\S[^\r\n]*?)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)),
    # elasticsearch-reset-password's `New value: X`; a first start's `Password for the elastic user
    # (reset with …):` and the password on the next line.
    RegexRule(name="secret-output", lower_triggers=("new value:", "password for the"), anchored=True, group="value", check=_reset,
              description="Elasticsearch's generated and reset passwords as its tools print them (2.14)",
              pattern=re.compile(r"(?:new[ \t]+value:[ \t]*|password[ \t]+for[ \t]+the[ \t]+[A-Za-z_]{1,32}[ \t]+user[ \t]+\(reset[ \t]+with"
                                 r"[^\r\n]{0,200}\):[ \t]*\r?\n[ \t]*)(?P<value>[^\s]{6,128})[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)),
    # Windows' answer files (unattend.xml, autounattend.xml): <AdministratorPassword>,
    # <Password> of AutoLogon or a local account, with the value in a <Value> element.
    RegexRule(name="password-assignment", triggers=("<Value>",), group="value", check=_value,
              description="a Windows answer file's <…Password><Value>X</Value> (2.14)",
              pattern=re.compile(r"<(?:[A-Za-z]*Password)>[ \t\r\n]*<Value>(?P<value>[^<\r\n]+)</Value>", re.ASCII)),
    # Kickstart's `rootpw [--plaintext] X` (`--iscrypted` holds a hash, which password-hash reads)
    # and Debian preseed's `passwd/…password password X` lines.
    RegexRule(name="password-assignment", triggers=("rootpw", "password password"), group="value", check=_value,
              description="kickstart rootpw X, preseed d-i passwd/… password X (2.14)",
              pattern=re.compile(r"^[ \t]*(?:rootpw(?:[ \t]+--(?:plaintext|allow-ssh))*|d-i[ \t]+passwd/[a-z-]*password(?:-again)?[ \t]+password)"
                                 r"[ \t]+(?!--)(?P<value>\S+)[ \t]*\r?$", re.ASCII | re.MULTILINE)),
    # A Dockerfile's legacy `ENV NAME value` (no `=`) under a secret-like name, judged as an assignment.
    RegexRule(name="secret-assignment", triggers=("ENV ",), group="value", check=_named,
              description="a Dockerfile's ENV NAME value under a secret-like name (2.14)",
              pattern=re.compile(r"^[ \t]*ENV[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]*)[ \t]+(?P<value>[^\s=][^\s]*)[ \t]*\r?$",
                                 re.ASCII | re.MULTILINE)),
    # A row of a table drawn with box characters (`railway variables`, `netlify env:list`, a rich
    # or psql unicode table): a secret-like name in one cell and its value in the next.
    RegexRule(name="secret-assignment", triggers=tuple(_BOX), group="value", check=_named,
              description="a box-drawn table's NAME │ VALUE row under a secret-like name (2.14)",
              pattern=re.compile(r"[" + _BOX + r"|][ \t]*(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})[ \t]*[" + _BOX + r"][ \t]*"
                                 r"(?P<value>[^\s" + _BOX + r"|]+)[ \t]*(?=[" + _BOX + r"|])")),
    # A URL percent-encoded into another's query (`?next=postgres%3A%2F%2Fapp%3AX%40db`, a
    # redirect): the password between the encoded `:` and `@`.
    RegexRule(name="url-password", lower_triggers=("%3a%2f%2f",), anchored=True, group="value", check=_value,
              description="scheme%3A%2F%2Fuser%3Apassword%40host, a URL percent-encoded in another (2.14)",
              pattern=re.compile(r"%3A%2F%2F(?:[^\s%/?#@:\"'<>&]|%(?!3A|40|2F)[0-9A-F]{2}){0,128}%3A"
                                 r"(?P<value>(?:[^\s/?@\"'<>&%]|%(?!40)[0-9A-F]{2}){1,256})%40(?=[A-Za-z0-9\[])", re.ASCII | re.IGNORECASE)),
    # Anaconda's token in a channel URL (`https://conda.anaconda.org/t/TOKEN/channel`, `.condarc`).
    RegexRule(name="url-token", triggers=("anaconda.",), group="value", check=_value,
              description="an Anaconda token in a channel URL's /t/TOKEN/ (2.14)",
              pattern=re.compile(r"anaconda\.(?:org|cloud|com)/t/(?P<value>[A-Za-z0-9-]{8,64})(?=/)", re.ASCII)),
    # JSON HTML-escaped into a page or a log (`&quot;db_password&quot;: &quot;X&quot;`).
    RegexRule(name="secret-assignment", triggers=("&quot;",), group="value", check=_named,
              description="an HTML-escaped JSON member under a secret-like name (2.14)",
              pattern=re.compile(r"&quot;(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})&quot;[ \t]*:[ \t]*&quot;(?P<value>(?:(?!&quot;)[^\"<>\r\n]){1,256})&quot;",
                                 re.ASCII)),
)


class ChpasswdListRule(Rule):
    """cloud-init's `chpasswd:` `list:` (a block scalar or a YAML list) of `user:password` lines."""

    _list = re.compile(r"^(?P<indent>[ \t]*)(?:list|users):[ \t]*\|?[ \t]*\r?\n", re.MULTILINE | re.ASCII)
    _row = re.compile(r"[ \t]*(?:-[ \t]+)?[A-Za-z_][A-Za-z0-9_.-]{0,31}:(?P<value>[^\s:{][^\s]*)[ \t]*\r?", re.ASCII)

    def __init__(self) -> None:
        super().__init__(name="password-assignment", triggers=("chpasswd",), description="cloud-init chpasswd list's user:password lines (2.14)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._list.pattern, self._row.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found: list[tuple[int, int, str]] = []
        for block in self._list.finditer(text, text.find("chpasswd")):
            indent = len(block.group("indent").expandtabs())
            position = block.end()
            while position < len(text):
                end = text.find("\n", position)
                end = len(text) if end == -1 else end
                line = text[position:end]
                if len(line) - len(line.lstrip()) <= indent:
                    break
                row = self._row.fullmatch(line)
                if row is not None and row.group("value") != "RANDOM" and not is_marker_at(row.group("value"), 0):
                    found.append((position + row.start("value"), position + row.end("value"), self.name))
                position = end + 1
        return replace_spans(text, found, hits) if found else text


# Two-factor recovery codes (GitHub, GitLab, Google print ten): lines of one code each after a line
# naming them; every code logs in once instead of the second factor.
# 2.21: the name of the file that holds them too (`cat github-recovery-codes.txt`), and a numbered
# list (Google's "1. 3915 7304").
_RECOVERY_CODES = re.compile(r"(?:recovery|backup)[ \t_-]+codes?\b[^\r\n]{0,80}\r?\n(?P<codes>(?:[ \t]*(?:[-*][ \t]+|[0-9]{1,2}[.)][ \t]+)?"
                             r"[a-z0-9]{4,10}[ -][a-z0-9]{4,10}[ \t]*\r?(?:\n|\Z)){2,16})", re.ASCII | re.IGNORECASE)
_CODE = re.compile(r"[a-z0-9]{4,10}[ -][a-z0-9]{4,10}", re.ASCII)


class RecoveryCodesRule(Rule):
    def __init__(self) -> None:
        super().__init__(name="secret-output", lower_triggers=("recovery code", "backup code", "recovery-code", "recovery_code", "backup-code",
                                                                 "backup_code"),
                         description="two-factor recovery / backup codes listed after a line naming them (2.14)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _RECOVERY_CODES.pattern, _CODE.pattern, _codes.__qualname__, _HEX_LETTERS.pattern,
                _NO_VOWEL.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found = [(block.start("codes") + code.start(), block.start("codes") + code.end(), self.name)
                 for block in _RECOVERY_CODES.finditer(text) if _codes(codes := list(_CODE.finditer(block.group("codes"))))
                 for code in codes]
        return replace_spans(text, found, hits) if found else text


def _codes(codes: list[re.Match[str]]) -> bool:
    """Whether the lines under a recovery codes line are codes: one holds a digit (2.14), or (2.15)
    all are letters of one shape joined by a dash, hex letters (GitHub's codes are hex: `abcde-fbcad`)
    or random ones (a half with no vowel: `wxyzq-rtvbn`). Words a sentence lists after the name
    ("print them out", "well-known") are joined by spaces, differ in length or all have vowels."""
    if any(c.isdigit() for code in codes for c in code.group(0)):
        return True
    halves = [code.group(0).split("-") for code in codes]
    if len({tuple(map(len, pair)) for pair in halves}) != 1 or len(halves[0]) != 2:
        return False
    return (all(_HEX_LETTERS.fullmatch(half) for pair in halves for half in pair)
            or any(_NO_VOWEL.fullmatch(half) for pair in halves for half in pair))


_HEX_LETTERS = re.compile(r"[a-f]+", re.ASCII | re.IGNORECASE)
_NO_VOWEL = re.compile(r"[b-df-hj-np-tv-xz]+", re.ASCII | re.IGNORECASE)


PRINTED_RULES: tuple[Rule, ...] = (*_PRINTED, ChpasswdListRule(), RecoveryCodesRule())
