"""Secrets recognised by their context: key blocks, environment dumps, URLs, auth headers."""

from __future__ import annotations

import base64
import binascii
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from streams.redaction.assignments import bare_secret
from streams.redaction.base import (
    Check,
    RegexRule,
    Rule,
    Scan,
    is_marker_at,
    marker,
    plain_words,
    plain_words_fingerprint,
    replace_spans,
)
from streams.redaction.entropy import looks_random
from streams.redaction.keys import is_placeholder, name_class

__all__ = ["CONTEXT_RULES", "DSN_PASSWORD_RULE", "OPENVPN_KEY_RULE", "PRIVATE_KEY_RULE", "URL_PASSWORD_RULE", "EnvDumpRule", "WrappedTailRule",
           "named_value_rule", "printed_secret", "prints_secret", "secret_value", "shell_command", "table_secret"]

# 2.12: also the SSH2 (RFC 4716) armour of ssh.com's and PuTTY's exports, four dashes and a space:
# `---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----`.
_KEY_LABEL = r"-----BEGIN[A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----|---- BEGIN[A-Z0-9 ]{0,32}PRIVATE KEY ----"
PRIVATE_KEY_RULE = RegexRule(
    name="private-key",
    repass=False,
    needs=frozenset("-"),
    triggers=("PRIVATE KEY",),
    description="PEM / OpenSSH / PGP private key blocks, BEGIN through END (also inside JSON strings)",
    # A block normally ends at its END line; a block cut short (a truncated tool output) is
    # redacted through the end of its key material instead of being left half-visible.
    pattern=re.compile(
        r"(?:" + _KEY_LABEL + r")"
        + r"(?:.{0,65536}?(?:-----END[A-Z0-9 ]{0,32}PRIVATE KEY(?: BLOCK)?-----|---- END[A-Z0-9 ]{0,32}PRIVATE KEY ----)"
        + r"|[A-Za-z0-9+/=\s\\:,.-]*)",
        re.ASCII | re.DOTALL,
    ),
)

# OpenVPN's shared keys (2.10): a static key (`secret` / `tls-auth` / `tls-crypt`: 2048 bits of
# hex, whoever holds it joins the tunnel) and a tls-crypt-v2 key, armoured as PEM is but without
# "PRIVATE KEY" in their labels; an inline `<tls-crypt>` block of a .ovpn file holds the same.
OPENVPN_KEY_RULE = RegexRule(
    name="private-key",
    repass=False,
    needs=frozenset("-"),
    triggers=("-----BEGIN OpenVPN",),
    description="OpenVPN static and tls-crypt-v2 key blocks, BEGIN through END",
    pattern=re.compile(
        r"-----BEGIN OpenVPN [A-Za-z0-9 -]{1,40}key[A-Za-z0-9 -]{0,8}-----"
        r"(?:.{0,16384}?-----END OpenVPN [A-Za-z0-9 -]{1,40}-----|[A-Za-z0-9+/=\s\\]*)",
        re.ASCII | re.DOTALL,
    ),
)

# What may stand before a NAME=value line of a dump (2.8): Claude Code's Read tool numbers each
# line of the file it shows (`     2→NAME=value`; `cat -n` a tab), `export -p` / `declare -p`
# write `declare -x NAME="value"`, and a list in JSON or YAML (`docker inspect`'s Env array:
# `"NAME=value",`; `- NAME=value` in compose) indents and quotes it. Under 2.7 a .env file read by
# the Read tool was no dump, and a value under a name no rule knows (`SESSION_SIGNER=…`) stayed.
# Indentation alone stays no dump's (`    NAME=doctest.NAME,` is a call's keywords).
# One alternation, each branch anchored on its own first character, so a line of code that starts
# with spaces costs one failed `[ \t]*` (the dump rule tries every line break of every text).
_ENV_KEYWORD = r"(?:export[ \t]+|declare[ \t]+-[a-zA-Z]*x[a-zA-Z]*[ \t]+)"
_ENV_LEAD = (r"(?:[ \t]*(?:[0-9]{1,7}(?:→|\t)(?:" + _ENV_KEYWORD + r"|\"|-[ \t]+\"?)?|-[ \t]+\"?|\")|" + _ENV_KEYWORD + r")?")
_ENV_LINE = r"[A-Za-z_][A-Za-z0-9_]*=(?!=)[^\r\n]*"
_UPPER_NAME = re.compile(r"^" + _ENV_LEAD + r"[A-Z_]*[A-Z][A-Z0-9_]*=", re.MULTILINE | re.ASCII)


_ENV_VALUE_END = re.compile(r"\"?,?[ \t]*$")  # a JSON list item's closing quote and comma


class EnvDumpRule(Rule):
    """Environment dumps: ``min_lines`` or more consecutive ``NAME=value`` lines (``env``,
    ``printenv``, ``.env`` files), replaced whole, values and names alike.

    Three lowercase ``a=1`` lines are code, not an environment: at least one name must be in
    capitals. The pattern starts at a newline (a literal the engine skips to); the text is
    scanned with a newline in front so a dump on the first line is found too.
    """

    pattern: re.Pattern[str]

    def __init__(self, min_lines: int = 3) -> None:
        super().__init__(name="env-dump", triggers=("=",), repass=False, needs=frozenset("="), description=(
            f"{min_lines} or more consecutive NAME=value lines (env, printenv, .env files), replaced whole"
        ))
        pattern = re.compile(rf"\n(?P<lead>{_ENV_LEAD})({_ENV_LINE}(?:\r?\n{_ENV_LEAD}{_ENV_LINE}){{{min_lines - 1},}})", re.ASCII)
        object.__setattr__(self, "pattern", pattern)

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self.pattern.pattern, _UPPER_NAME.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if "\n" not in text:
            return text
        framed = "\n" + text
        pieces: list[str] = []
        done = 1
        for match in self.pattern.finditer(framed):
            block = match.group(1) + match.group(2)
            if _UPPER_NAME.search(block) is None:
                continue
            if not any(_may_be_secret(_ENV_VALUE_END.sub("", line.split("=", 1)[1])) for line in block.splitlines()):
                continue  # 2.5: a script's NAME="$(...)" lines: no value to hide
            pieces += (framed[done: match.start(2)], marker(self.name))
            done = match.end(2)
        if not pieces:
            return text
        hits[self.name] = hits.get(self.name, 0) + len(pieces) // 2
        pieces.append(framed[done:])
        return "".join(pieces)


def _template(value: str) -> bool:
    """A template's placeholder for a password (``${DB_PASS}``, ``{secret_key}``, ``<pw>``,
    ``%(password)s``, ``****``), not a password, however weak (``user:pass@host`` is one)."""
    return value[:1] in ("$", "{", "<", "%") or set(value) <= set("*xX.#")


_SHELL_VALUE = re.compile(r"[\"']?(?:\$|`)", re.ASCII)


def _may_be_secret(value: str) -> bool:
    """Whether an environment line's value could be a secret (2.5): not a shell expression or
    reference (``"$(jq -r .session_id)"``, ``$HOME``, a backquote), which only a script writes."""
    value = value.strip()
    return bool(value) and not _SHELL_VALUE.match(value)


_AZURE_SAS = RegexRule(
    name="azure-sas-signature",
    needs=frozenset("="),
    lower_triggers=("sig=",),
    # 2.19: `SIG=` in any case, and base64url's `-` / `_` (a signature written for a URL), which ended the value.
    description="sig= signature of an Azure shared access signature URL",
    pattern=re.compile(r"(?i:sig)=(?<=[?&;][Ss][Ii][Gg]=)(?P<value>[A-Za-z0-9%+/=_-]{20,})", re.ASCII),
    group="value",
)

# A signed URL's signature (S3 / GCS V4 presigned URLs, CloudFront, any ?signature=) and an STS
# session token in one grant access until they expire, like a token (2.3, later).
_URL_SIGNATURE = RegexRule(
    name="url-signature",
    needs=frozenset("="),
    lower_triggers=("signature=", "security-token=", "hmac="),
    description="signature= / X-Amz-Signature= / X-Goog-Signature= / X-Amz-Security-Token= / hmac= of a signed URL",
    # 2.18: hmac= (Shopify's and others' signed install and webhook URLs), the same signature by another name.
    pattern=re.compile(r"(?<=[?&;])(?:x-amz-signature|x-goog-signature|signature|x-amz-security-token|hmac)="
                       r"(?P<value>[A-Za-z0-9%+/=_.~-]{16,})", re.ASCII | re.IGNORECASE),
    group="value",
)

# 2.18: a CAS service or proxy ticket in a URL (`?ticket=ST-1234-…`): whoever presents it first is
# logged in as its user. Only the tickets' own shape (ST- / PT- / TGT- / PGT-, a serial, a random
# part): a `?ticket=JIRA-1234` is an issue.
_CAS_TICKET = RegexRule(
    name="url-token",
    needs=frozenset("="),
    lower_triggers=("ticket=",),
    description="a CAS ticket (ST- / PT- / TGT- / PGT-) in a URL's ticket= (2.18)",
    pattern=re.compile(r"(?<=[?&;])ticket=(?P<value>(?:ST|PT|TGT|PGT)-[0-9]+-[A-Za-z0-9._-]{10,})", re.ASCII),
    group="value",
)

# An OAuth authorization code in a redirect (2.8): `…/callback?code=…&state=…` (or in the fragment)
# is exchanged for tokens by whoever holds it, within minutes. Only a URL that also carries the
# flow's `state=` is read, so a `?code=` of anything else (a country, an error code) stays.
def _oauth_redirect(match: re.Match[str]) -> bool:
    text = match.string
    # The URL around it: back and on to a space, a quote or a bracket (within 2 KB: a URL's length).
    low, high = max(0, match.start() - 2048), min(len(text), match.end() + 2048)
    start = max(text.rfind(character, low, match.start()) for character in " \t\r\n\"'<>`(") + 1
    end = min((position for position in (text.find(character, match.end(), high) for character in " \t\r\n\"'<>`)")
               if position != -1), default=high)
    start = max(start, low)
    url = text[start:end].lower()
    value = match.group("value")
    # ERR_CONNECTION_REFUSED_01 is an error's code, not a grant.
    return "state=" in url and any(c.isdigit() for c in value) and any(c.isalpha() for c in value) and not plain_words(value)


_OAUTH_CODE = RegexRule(
    name="oauth-code",
    needs=frozenset("="),
    lower_triggers=("code=",),
    description="code= of an OAuth redirect URL (one that carries state=)",
    pattern=re.compile(r"(?<=[?&#])code=(?P<value>[A-Za-z0-9%+/=_.~-]{16,})", re.ASCII | re.IGNORECASE),
    group="value",
    check=_oauth_redirect,
)


# Clients whose password flag is one letter, so no secret-like name says what follows (the
# assignment rule reads --password): mysql's -p takes its password glued (a bare "-p" prompts),
# sshpass and registry logins take "-p VALUE", redis-cli "-a VALUE".
def _cli_value(match: re.Match[str]) -> bool:
    """A flag's value that is a password, not a shell reference standing for one (2.8: `redis-cli -a
    $REDIS_PASSWORD`, `sshpass -p "$PW"`, `-P %SA_PASSWORD%` lost the variable's name)."""
    value = match.group("value").strip("'\"\\")
    return bool(value) and not is_placeholder(value, quoted=True) and not (value[0] == "%" and value[-1] == "%")


# 2.16: a value in a JSON string's escaped quotes (`-N \"X\"` in a tool call's arguments) is the
# quotes' content, and a bare value runs on over an "&" glued between its characters
# (`-storepass afve&XCB32`: a hand-typed password, not a job sent to the background).
_QUOTED_OR_BARE = r"(?P<value>\\\"[^\"\\\r\n]+\\\"|'[^'\r\n]+'|\"[^\"\r\n]+\"|[^\s'\"|;&`]+(?:&[^\s'\"|;&`]+)*)"
_MYSQL_PASSWORD = RegexRule(
    name="mysql-password",
    triggers=("mysql", "mariadb"),
    description="mysql / mariadb client -pPASSWORD (glued)",
    pattern=re.compile(r"\b(?:mysql(?:dump|admin|import|check|sh)?|mariadb(?:-dump|-admin)?)\b[^\r\n|;&]*?[ \t]-p"
                       r"(?=[^\s-])" + _QUOTED_OR_BARE, re.ASCII),
    group="value",
    check=_cli_value,
)
_CLI_PASSWORD = RegexRule(
    name="cli-password",
    triggers=("sshpass", "login", "redis-cli"),
    description="sshpass -p, docker / podman / nerdctl / helm registry login -p, redis-cli -a / --pass",
    pattern=re.compile(r"\b(?:(?:sshpass|(?:docker|podman|nerdctl|helm[ \t]+registry)[ \t]+login)\b[^\r\n|;&]*?[ \t]-p"
                       r"|redis-cli\b[^\r\n|;&]*?[ \t](?:-a|--pass))[ \t]+" + _QUOTED_OR_BARE, re.ASCII),
    group="value",
    check=_cli_value,
)

# curl -u/--user USER:PASSWORD: the ported rule (curl-auth-user) takes only word characters and
# $@.- in a bare password, so "curl -u admin:Adm1nPass!" kept its password. A value that is a
# redaction marker already ("[REDACTED:...]") has no user part here and is left alone; a user
# that is one (2.7: Twilio's "-u AC…:TOKEN", the account SID gone first) is a user.
_CURL_USER = RegexRule(
    name="cli-password",
    triggers=("curl",),
    description="curl -u / --user / -U / --proxy-user USER:PASSWORD, any characters in the password; (2.19) -u among short flags (-su)",
    pattern=re.compile(r"\bcurl\b[^\r\n|;&]*?[ \t](?:-[A-Za-z]{0,4}u|--user|-U|--proxy-user)(?:=|[ \t]+)['\"]?(?:\[REDACTED:[a-z0-9-]+\]|[^\s'\":\[]*):"
                       r"(?P<value>[^\s'\"|;&`]+)", re.ASCII),
    group="value",
)
# More clients whose password flag names no password (2.3, later): mongo / mongosh -p, az login
# -p, the OpenLDAP tools' -w, httpie's -a USER:PASSWORD, smbclient / rpcclient -U USER%PASSWORD,
# openssl's -passin / -passout pass:PASSWORD, and htpasswd -b (batch mode: the password is the
# last argument, after FILE and USER, or after USER with -n).
def _cli_rule(triggers: tuple[str, ...], description: str, pattern: str, check: Check | None = None) -> RegexRule:
    return RegexRule(name="cli-password", triggers=triggers, description=description,
                     pattern=re.compile(pattern, re.ASCII), group="value", check=check or _cli_value)


def _htpasswd_file(match: re.Match[str]) -> bool:
    flags = match.group("flags")
    return "b" in flags and "n" not in flags


def _htpasswd_stdout(match: re.Match[str]) -> bool:
    flags = match.group("flags")
    return "b" in flags and "n" in flags


# SQL's IDENTIFIED BY (2.10) is English too ("the type identified by full_name"): only in a
# statement naming a user or a role before it on its line (CREATE / ALTER USER, GRANT … TO), with
# the password quoted or the keyword written in capitals as statements are.
# 2.18: mysql's history file (`~/.mysql_history`, libedit's) writes each space as `\040`.
_SQL_ACCOUNT = re.compile(r"(?:\b|(?<=\\040))(?:user|role|login|grant)\b", re.ASCII | re.IGNORECASE)


def _sql_identified(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    line = text[text.rfind("\n", max(0, start - 200), start) + 1 or max(0, start - 200):start]
    quoted = match.group("value")[:1] in "'\""
    return (_SQL_ACCOUNT.search(line) is not None and (quoted or text.startswith("IDENTIFIED", start))
            and _cli_value(match))


_SSH_KEYGEN = re.compile(r"\bssh-keygen\b[^\r\n|;&]*\Z", re.ASCII)


def _ssh_keygen(match: re.Match[str]) -> bool:
    """A -N / -P flag of an ssh-keygen command on its line (within 300 characters before it)."""
    return _SSH_KEYGEN.search(match.string, max(0, match.start() - 300), match.start()) is not None and _cli_value(match)


_PROMPT_LINE = re.compile(r"(?:assword|assphrase|PIN)[^\r\n]{0,160}\r?\n[ \t]*\Z", re.ASCII)


def _expect_send(match: re.Match[str]) -> bool:
    """An expect script's ``send "…"`` that starts its line and answers a password prompt on the line before."""
    text, start = match.string, match.start()
    return _PROMPT_LINE.search(text, max(0, start - 200), start) is not None and _cli_value(match)


def _echoed_to_file(match: re.Match[str]) -> bool:
    value = match.group("value").strip("'\"")
    if match.group("envfile") is not None and "=" in value:
        return False  # 2.18: `echo NODE_ENV=production > .env` is an assignment, judged by its name
    return (_cli_value(match) and any(c.isalpha() for c in value)
            and any(c.isdigit() or c.isupper() or c in "!#$%&*+=?@^~" for c in value))


_BARE_ARG = r"[^\s|;&`-][^\s|;&`]*(?:&[^\s|;&`]+)*"


def _named_argument(match: re.Match[str]) -> bool:
    """A value set under a name that says it is a secret (2.13: `glab variable set DEPLOY_TOKEN --value X`)."""
    return _cli_value(match) and name_class(match.group("name")) is not None
_SNMP = re.compile(r"(?<![A-Za-z0-9_])snmp[a-z]{2,16}\b[^\r\n|;&]*\Z", re.ASCII)


def _snmp_secret(match: re.Match[str]) -> bool:
    """A net-snmp command's community or pass phrase (`public` and `private` are the defaults, no secret)."""
    return (_SNMP.search(match.string, max(0, match.start() - 300), match.start()) is not None and _cli_value(match)
            and match.group("value").strip("'\"").lower() not in ("public", "private"))


_REDIS_PROMPT = re.compile(r"(?:[0-9]:[0-9]{2,5}|redis|\])(?:\[[0-9]{1,2}\])?>[ \t]*\Z", re.ASCII)


def _redis_prompt(match: re.Match[str]) -> bool:
    """AUTH typed at a redis-cli prompt (`127.0.0.1:6379> AUTH X`, `redis> AUTH default X`), not the word in prose.

    2.18: or the command in capitals starting its line, as `~/.rediscli_history` and a script of
    commands hold it (`AUTH X`, a value with a letter and a digit or a symbol: "AUTH failed" stays)."""
    text, start = match.string, match.start()
    if not _cli_value(match):
        return False
    if _REDIS_PROMPT.search(text, max(0, start - 80), start) is not None:
        return True
    value = match.group("value").strip("'\"")
    line_start = text.rfind("\n", max(0, start - 80), start)
    if line_start == -1 and start > 80:
        return False
    return (text.startswith("AUTH", start) and not text[line_start + 1: start].strip()
            and any(c.isalpha() for c in value) and not value.isalpha())


# A secret piped into a command that reads one from stdin: --password-stdin, gh's --with-token,
# gcloud / vercel / wrangler secrets, chpasswd and passwd, sudo -S.
_PIPED_SECRET = (
    r"(?P<value>'[^'\r\n]{6,}'|\"[^\"$\r\n]{6,}\"|[^\s'\"$|;&`<>]{6,})[ \t]*\|"
    r"(?=[^\r\n;&]*?(?:--password-stdin|--with-token|\bsecrets?[ \t]+(?:create|versions[ \t]+add|set)\b"
    r"|\benv[ \t]+add\b|--data-file[= ]-|\bauth[ \t]+login\b|\bchpasswd\b|\b(?:smb)?passwd\b"
    r"|\bsecret[ \t]+put\b|\bsecrets:set\b|\benv:set\b"
    # 2.18: Kerberos' kinit, cryptsetup's passphrase, gpg --passphrase-fd 0, vault login - (a token).
    # 2.19: htpasswd -i reads the password from stdin.
    r"|\bhtpasswd[ \t]+(?:-[A-Za-z]+[ \t]+)*-[A-Za-z]*i[A-Za-z]*\b"
    r"|\bkinit\b|\bcryptsetup\b|--passphrase-fd[ =]0\b|\bvault[ \t]+login[ \t]+-(?![A-Za-z0-9-])"
    # 2.21: KeePassXC's CLI reads the database's password from stdin.
    r"|\bkeepassxc-cli\b"
    # 2.9: sudo -S / --stdin reads the user's password from the pipe
    r"|\bsudo[ \t]+(?:-[A-Za-z]*S[A-Za-z]*\b|--stdin\b)))"
)
_ARG = r"(?:'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"
_CLI_FLAG_PASSWORDS = (
    _cli_rule(("mongo", "az"), "mongo / mongosh -p PASSWORD, az login -p PASSWORD",
              r"\b(?:mongo|mongosh|az[ \t]+login)\b[^\r\n|;&]*?[ \t]-p[ \t]+" + _QUOTED_OR_BARE),
    _cli_rule(("ldap",), "OpenLDAP tools' -w PASSWORD",
              r"\bldap(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop)\b[^\r\n|;&]*?[ \t]-w[ \t]+" + _QUOTED_OR_BARE),
    _cli_rule(("http",), "httpie -a / --auth USER:PASSWORD",
              r"\bhttps?(?:[ \t][^\r\n|;&]*?)?[ \t](?:-a|--auth)(?:=|[ \t]+)['\"]?[^\s'\":\[]+:(?P<value>[^\s'\"|;&`]+)"),
    _cli_rule(("client", "smbmap", "smbcacls"), "smbclient / rpcclient -U USER%PASSWORD",
              r"\b(?:smbclient|rpcclient|smbmap|smbcacls)\b[^\r\n|;&]*?[ \t](?:-U|--user)(?:=|[ \t]+)['\"]?[^\s'\"%\[]+%"
              r"(?P<value>[^\s'\"|;&`]+)"),
    _cli_rule(("pass:",), "openssl -passin / -passout / -pass pass:PASSWORD",
              r"[ \t]-pass(?:in|out|word)?[ \t]+['\"]?pass:(?P<value>[^\s'\"|;&`]+)"),
    # A secret echoed into a command that reads it from stdin: echo X | docker login
    # --password-stdin, | gh auth login --with-token, | gcloud secrets create, | vercel env add.
    # 2.9: single quotes keep a "$" literal ('Pa$$w0rd' is the password, not a variable's).
    _cli_rule(("echo", "printf"), "echo SECRET | a command reading a secret from stdin",
              r"\b(?:echo|printf)(?:[ \t]+-[neE]+)*[ \t]+" + _PIPED_SECRET),
    # 2.11: printf's format comes first (printf '%s\n' 'PASSWORD' | sudo -S …).
    _cli_rule(("printf",), "printf FORMAT SECRET | a command reading a secret from stdin",
              r"printf(?<![A-Za-z0-9_]printf)(?:[ \t]+--)?[ \t]+(?:'[^'\r\n]{0,40}%[^'\r\n]{0,40}'|\"[^\"\r\n]{0,40}%[^\"\r\n]{0,40}\")[ \t]+"
              + _PIPED_SECRET),
    # 2.16: a secret echoed into a file named for one (`echo 'X' > ~/.vault_pass.txt`, `> token`,
    # `>> .git-credentials`): one word with a letter and a digit, a capital or a symbol (not `echo on >
    # pass.log`, `echo 0 > pass_count`).
    _cli_rule(("echo", "printf"), "echo SECRET > a file whose name says it holds a secret (2.16)",
              r"\b(?:echo|printf)(?:[ \t]+-[neE]+)*[ \t]+(?P<value>'[^'\s]{6,}'|\"[^\"$\s]{6,}\"|[^\s'\"$|;&`<>]{6,})"
              r"[ \t]*>>?[ \t]*['\"]?(?:[^\s'\";&|<>]*/)?(?:[^\s/'\";&|<>]*"
              r"(?i:pass|secret|token|cred|api[_-]?key)[^\s/'\";&|<>]*"
              # 2.18: or an environment file (`.env`, `.env.local`, `prod.env`, `.envrc`), which
              # holds secrets whatever its lines are named.
              r"|(?P<envfile>\.env(?:rc|\.[A-Za-z0-9_-]+)?|[A-Za-z0-9_-]+\.env))['\"]?(?=[\s;&|)]|$)",
              _echoed_to_file),
    # 2.8: SQL Server's tools take -P PASSWORD (sqlcmd, bcp, osql, isql), and gh secret set NAME
    # --body / -b VALUE sets a repository secret from its argument.
    _cli_rule(("sqlcmd", "bcp", "osql", "isql"), "sqlcmd / bcp / osql / isql -P PASSWORD",
              r"\b(?:sqlcmd|bcp|osql|isql)\b[^\r\n|;&]*?[ \t]-P[ \t]*" + _QUOTED_OR_BARE),
    _cli_rule(("secret",), "gh secret set NAME --body / -b VALUE",
              r"\bgh[ \t]+secret[ \t]+set\b[^\r\n|;&]*?[ \t](?:--body(?:=|[ \t]+)|-b[ \t]*)" + _QUOTED_OR_BARE),
    # 2.5: useradd / usermod -p, keytool's store and key passwords, openssl enc -k, and
    # PowerShell's ConvertTo-SecureString "..." -AsPlainText.
    _cli_rule(("useradd", "usermod"), "useradd / usermod -p PASSWORD",
              r"\buser(?:add|mod)\b[^\r\n|;&]*?[ \t](?:-p|--password)[ \t]+" + _QUOTED_OR_BARE),
    _cli_rule(("keytool", "pass"), "keytool -storepass / -keypass / -srcstorepass / -deststorepass PASSWORD",
              r"[ \t]-(?:src|dest|new)?(?:store|key)pass[ \t]+(?!:env|:file)" + _QUOTED_OR_BARE),
    # 2.7: archivers' passwords: zip -P / --password, 7z -pPASSWORD and rar -pPASSWORD (glued).
    _cli_rule(("zip",), "zip / zipcloak / unzip (2.14) -P PASSWORD",
              r"\b(?:un)?(?:zip|zipcloak)\b[^\r\n|;&]*?[ \t](?:-P|--password)[ \t]+" + _QUOTED_OR_BARE),
    _cli_rule(("7z", "rar"), "7z / 7za / rar / unrar -pPASSWORD",
              r"\b(?:7z[az]?|7zz|rar|unrar)\b[^\r\n|;&]*?[ \t]-p(?=[^\s-])" + _QUOTED_OR_BARE),
    _cli_rule(("openssl",), "openssl enc -k PASSWORD",
              r"\bopenssl\b[^\r\n|;&]*?[ \t]-k[ \t]+" + _QUOTED_OR_BARE),
    RegexRule(name="cli-password", lower_triggers=("securestring",),
              description="ConvertTo-SecureString \"PASSWORD\" -AsPlainText", group="value",
              # 2.21: a JSON string's escaped quotes are the value's (2.20 replaced the backslash alone).
              pattern=re.compile(r"ConvertTo-SecureString[ \t]+(?:-String[ \t]+)?"
                                 r"(?P<value>\\\"[^\"\\\r\n]+\\\"|'[^'\r\n]+'|\"[^\"\r\n]+\"|[^\s'\"|;&`\\-][^\s'\"|;&`]*)"
                                 r"(?=[^\r\n]*-AsPlainText)", re.ASCII | re.IGNORECASE)),
    # 2.10: mosquitto's clients take -P / --pw PASSWORD; rabbitmqctl add_user / change_password
    # USER PASSWORD and Windows' net user USER PASSWORD take it as an argument (net user's `*`
    # prompts and its `/add` options start with a slash); SQL's IDENTIFIED BY 'PASSWORD'
    # (MySQL, Oracle: CREATE / ALTER USER), where no password word stands before the value.
    _cli_rule(("mosquitto_",), "mosquitto_pub / _sub / _rr -P / --pw PASSWORD",
              r"\bmosquitto_(?:pub|sub|rr)\b[^\r\n|;&]*?[ \t](?:-P|--pw)[ \t]+" + _QUOTED_OR_BARE),
    _cli_rule(("rabbitmqctl",), "rabbitmqctl add_user / change_password USER PASSWORD",
              r"\brabbitmqctl(?:\.bat)?\b[^\r\n|;&]*?[ \t](?:add_user|change_password)[ \t]+(?:'[^'\r\n]+'|\"[^\"\r\n]+\"|"
              + _BARE_ARG + r")[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    RegexRule(name="cli-password", lower_triggers=("net user", "net.exe user"), group="value", check=_cli_value, anchored=True,
              description="Windows net user USER PASSWORD",
              pattern=re.compile(r"(?<![\w-])net(?:\.exe)?[ \t]+user[ \t]+(?:\"[^\"\r\n]{1,64}\"|[^\s\"/*|&]{1,64})[ \t]+"
                                 r"(?P<value>\"[^\"\r\n]+\"|[^\s\"/*|&<>][^\s|&<>]*)", re.ASCII | re.IGNORECASE)),
    RegexRule(name="cli-password", lower_triggers=("identified",), group="value", check=_sql_identified, anchored=True,
              description="SQL IDENTIFIED [WITH PLUGIN] BY 'PASSWORD'",
              pattern=re.compile(r"(?:\b|(?<=\\040))IDENTIFIED(?:(?:[ \t]|\\040)+WITH(?:[ \t]|\\040)+[A-Za-z_]{1,40})?(?:[ \t]|\\040)+BY(?:[ \t]|\\040)+(?!PASSWORD\b|VALUES\b)"
                                 r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|[A-Za-z0-9!#$%*+./=?@^_~-]+)",
                                 re.ASCII | re.IGNORECASE)),
    # 2.10: ssh-keygen's new and old passphrases (-N / -P; -N '' is none), Oracle's clients' USER/PASSWORD
    # logon (sqlplus scott/tiger@db, rman target sys/…, expdp / impdp / sqlldr), and expect's send of
    # the answer to a password prompt on the line before. The password runs to the token's last `@`
    # (`Secret@10@db` holds one) and may end its line.
    _cli_rule(("ssh-keygen",), "ssh-keygen -N / -P PASSPHRASE (both, -p changes one to the other)",
              r"(?<=[ \t])-[NP][ \t]+" + _QUOTED_OR_BARE, check=_ssh_keygen),
    _cli_rule(("sqlplus", "rman target", "expdp", "impdp", "sqlldr"), "sqlplus / rman / expdp / impdp / sqlldr USER/PASSWORD[@DB]",
              r"\b(?:sqlplus(?:64)?|rman[ \t]+target|expdp|impdp|sqlldr(?:[ \t]+userid=)?)(?:[ \t]+-[A-Za-z]+)*[ \t]+['\"]?"
              r"[A-Za-z][A-Za-z0-9_$#]{0,63}/(?P<value>[^\s/'\"]+?)(?=@[^\s@'\"]*(?:['\"]|\s|$)|['\"]|\s|$)"),
    RegexRule(name="cli-password", lower_triggers=("send",), group="value", check=_expect_send, anchored=True,
              description="expect: send PASSWORD after a password prompt",
              pattern=re.compile(r"send[ \t]+(?:--[ \t]+)?\"(?P<value>[^\"\r\n\\$]{4,128})(?:\\r|\\n)?\"", re.ASCII)),
    # 2.11: clients that take a token or a password as a plain argument: cargo login TOKEN, poetry
    # config http-basic.REPO USER PASSWORD / pypi-token.REPO TOKEN, MinIO's mc alias set / config
    # host add ALIAS URL ACCESS-KEY SECRET-KEY, openssl passwd [-1|-5|-6|-apr1] PASSWORD (hashed in
    # the command, plain on its line), and codecov -t TOKEN.
    _cli_rule(("cargo",), "cargo login [--registry R] TOKEN",
              r"cargo(?<![A-Za-z0-9_]cargo)[ \t]+login(?:[ \t]+--registry(?:=|[ \t]+)[^\s|;&]+)?[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("poetry",), "poetry config http-basic.REPO USER PASSWORD / pypi-token.REPO TOKEN",
              r"poetry(?<![A-Za-z0-9_]poetry)[ \t]+config[ \t]+(?:--local[ \t]+)?(?:http-basic\.[A-Za-z0-9_.-]+[ \t]+" + _ARG
              + r"|pypi-token\.[A-Za-z0-9_.-]+)[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    # 2.15: composer config [--global|--auth] http-basic.HOST USER PASSWORD, which composer writes to auth.json.
    _cli_rule(("composer",), "composer config http-basic.HOST USER PASSWORD",
              r"composer(?<![A-Za-z0-9_]composer)[ \t]+config[ \t]+(?:--(?:global|auth)[ \t]+|-g[ \t]+)*http-basic\.[A-Za-z0-9_.-]+[ \t]+"
              + _ARG + r"[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("alias set", "host add"), "mc alias set / mc config host add ALIAS URL ACCESS-KEY SECRET-KEY",
              r"\bmc[ \t]+(?:alias[ \t]+set|config[ \t]+host[ \t]+add)[ \t]+" + _ARG + r"[ \t]+" + _ARG + r"[ \t]+" + _ARG
              + r"[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("passwd",), "openssl passwd [-1 | -5 | -6 | -apr1 | -salt S] PASSWORD",
              r"openssl(?<![A-Za-z0-9_]openssl)[ \t]+passwd(?:[ \t]+-(?:1|5|6|apr1|aixmd5|crypt|quiet|table|reverse)\b|[ \t]+-salt[ \t]+[^\s|;&)]+)*"
              r"[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|[^\s|;&`)'\"-][^\s|;&`)'\"]*)"),
    # 2.11: the same commands fed by a here-string (gh secret set NAME <<< 'VALUE', docker login
    # --password-stdin <<< …, wrangler secret put, vercel env add) or by a process substitution
    # (--data-file=<(echo -n 'VALUE')); influx setup / v1 auth's -p PASSWORD; az keyvault secret
    # set --value VALUE.
    _cli_rule(("<<<",), "a command reading a secret from stdin <<< SECRET (a here-string)",
              r"(?:--password-stdin|--with-token|\bsecrets?[ \t]+(?:create|versions[ \t]+add|set|put)\b|\benv[ \t]+add\b"
              r"|\bauth[ \t]+login\b|\bchpasswd\b|\b(?:smb)?passwd\b|\bsecret[ \t]+put\b|\bsecrets:set\b|\benv:set\b"
              r"|\bsudo[ \t]+(?:-[A-Za-z]*S[A-Za-z]*\b|--stdin\b))[^\r\n|;&<]{0,200}<<<[ \t]*"
              r"(?P<value>'[^'\r\n]{6,}'|\"[^\"$\r\n]{6,}\"|[^\s'\"$|;&`<>]{6,})"),
    _cli_rule(("<(echo", "<(printf"), "--data-file=<(echo -n SECRET) (a process substitution a secret's file flag reads)",
              r"(?:--(?:data|password|passphrase|secret|token|key|pass)-?file|--from-file=[^\s=]{1,64})(?:=|[ \t]+)<\((?:echo|printf)(?:[ \t]+-[neE]+)*[ \t]+(?P<value>'[^'\r\n]{6,}'|\"[^\"$\r\n]{6,}\"|[^\s'\"$|;&`<>)]{6,})[ \t]*\)"),
    _cli_rule(("influx",), "influx setup / user create / v1 auth -p / --password PASSWORD",
              r"influx(?<![A-Za-z0-9_]influx)\b[^\r\n|;&]*?[ \t](?:-p|--password)(?:=|[ \t]+)" + _QUOTED_OR_BARE),
    _cli_rule(("keyvault",), "az keyvault secret set --value VALUE",
              r"keyvault(?<=\baz[ \t]keyvault)[ \t]+secret[ \t]+set\b[^\r\n|;&]*?[ \t]--value(?:=|[ \t]+)" + _QUOTED_OR_BARE),
    _cli_rule(("codecov",), "codecov -t TOKEN",
              r"codecov(?<![A-Za-z0-9_]codecov)\b[^\r\n|;&]*?[ \t]-t(?:=|[ \t]+)" + _QUOTED_OR_BARE),
    _cli_rule(("htpasswd",), "htpasswd -b FILE USER PASSWORD",
              r"\bhtpasswd(?P<flags>(?:[ \t]+-[A-Za-z]+)+)[ \t]+" + _BARE_ARG + r"[ \t]+" + _BARE_ARG
              + r"[ \t]+(?P<value>" + _BARE_ARG + ")", check=_htpasswd_file),
    _cli_rule(("htpasswd",), "htpasswd -nb USER PASSWORD",
              r"\bhtpasswd(?P<flags>(?:[ \t]+-[A-Za-z]+)+)[ \t]+" + _BARE_ARG + r"[ \t]+(?P<value>" + _BARE_ARG + ")",
              check=_htpasswd_stdout),
    # 2.12: more clients that take a secret as an argument no password word names: vault login
    # TOKEN, a redis-cli session's AUTH [USER] PASSWORD, the net-snmp tools' community (-c) and
    # v3 pass phrases (-A, -X), Windows' net use \\HOST\SHARE PASSWORD /user:U, PsExec -p,
    # FreeRDP /p:, rdesktop -p, lftp -u USER,PASSWORD, macOS security add-…-password -w, vsce /
    # ovsx publish -p PAT, nuget push -k KEY / setapikey KEY, httpie's -A bearer -a TOKEN,
    # HAProxy's insecure-password and MySQL's SET PASSWORD … = PASSWORD('X').
    _cli_rule(("vault",), "vault login TOKEN",
              r"vault(?<![A-Za-z0-9_-]vault)[ \t]+login(?:[ \t]+-(?:no-print|no-store|method=token|(?:address|namespace|format)=[^\s|;&]+))*"
              r"[ \t]+(?P<value>'[^'\r\n=]+'|\"[^\"\r\n=]+\"|[^\s|;&`'\"=-][^\s|;&`'\"=]*)(?=[ \t]*(?:$|[|;&\r\n]))"),
    RegexRule(name="cli-password", lower_triggers=("auth ",), group="value", check=_redis_prompt, anchored=True,
              description="redis-cli: AUTH [USER] PASSWORD at a redis prompt (2.12)",
              pattern=re.compile(r"auth[ \t]+(?:[A-Za-z0-9_.@-]{1,64}[ \t]+)?(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|[^\s'\"]{4,512})[ \t]*\r?$",
                                 re.ASCII | re.IGNORECASE | re.MULTILINE)),
    _cli_rule(("snmp",), "net-snmp tools' -c COMMUNITY, -A AUTH-PASSPHRASE, -X PRIV-PASSPHRASE",
              r"(?<=[ \t])-[cAX][ \t]*(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")", check=_snmp_secret),
    RegexRule(name="cli-password", lower_triggers=("net use", "net.exe use"), group="value", check=_cli_value, anchored=True,
              description="Windows net use [DRIVE:] \\\\HOST\\SHARE PASSWORD [/user:USER] (2.12)",
              pattern=re.compile(r"net(?:\.exe)?[ \t]+use[ \t]+(?:[A-Za-z*]:[ \t]+)?\\\\[^\s]+(?:[ \t]+/user:[^\s]+)?[ \t]+"
                                 r"(?P<value>\"[^\"\r\n]+\"|[^\s\"/*|&<>][^\s|&<>]*)", re.ASCII | re.IGNORECASE)),
    _cli_rule(("psexec", "paexec"), "PsExec / PAExec -p PASSWORD",
              r"(?<![A-Za-z0-9_])(?:psexec(?:64)?|paexec)(?:\.exe)?\b[^\r\n|;&]*?[ \t]-p[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("freerdp", "rdesktop"), "FreeRDP /p:PASSWORD, rdesktop -p PASSWORD",
              r"(?:(?<![A-Za-z0-9_])(?:x|wl|sdl-)?freerdp3?\b[^\r\n|;&]*?[ \t][/-]p:|(?<![A-Za-z0-9_])rdesktop\b[^\r\n|;&]*?[ \t]-p[ \t]+)"
              r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("lftp",), "lftp -u USER,PASSWORD",
              r"(?<![A-Za-z0-9_])lftp\b[^\r\n|;&]*?[ \t]-u[ \t]+['\"]?[^\s,'\"]+,(?P<value>[^\s'\"|;&`]+)"),
    _cli_rule(("-password",), "macOS security add-generic-password / add-internet-password -w PASSWORD",
              r"(?<![A-Za-z0-9_])security[ \t]+add-(?:generic|internet)-password\b[^\r\n|;&]*?[ \t]-w[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("vsce", "ovsx"), "vsce / ovsx publish -p / --pat TOKEN",
              r"(?<![A-Za-z0-9_])(?:vsce|ovsx)\b[^\r\n|;&]*?[ \t](?:-p|--pat)(?:=|[ \t]+)(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("nuget",), "nuget push -k / -ApiKey KEY, nuget setapikey KEY",
              r"(?<![A-Za-z0-9_])nuget(?:\.exe)?[ \t]+(?:[^\r\n|;&]*?[ \t](?:-k|-ApiKey)|setapikey)[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("http",), "httpie -A bearer -a TOKEN",
              r"\bhttps?[ \t][^\r\n|;&]*?(?:-A|--auth-type)(?:=|[ \t]+)bearer\b[^\r\n|;&]*?[ \t](?:-a|--auth)(?:=|[ \t]+)"
              r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    # 2.13: database shells whose password flag is -p (Cassandra's cqlsh, Neo4j's cypher-shell,
    # Couchbase's cbq and couchbase-cli), wpa_passphrase SSID PASSPHRASE, and the CLIs that set a
    # variable or a secret by name (glab variable set NAME --value X, a secret-like NAME).
    _cli_rule(("cqlsh", "cypher-shell", "cbq", "couchbase-cli"), "cqlsh / cypher-shell / cbq -p PASSWORD",
              r"(?<![A-Za-z0-9_-])(?:cqlsh|cypher-shell|cbq|couchbase-cli)\b[^\r\n|;&]*?[ \t](?:-p|--password)(?:=|[ \t]+)"
              r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("wpa_passphrase",), "wpa_passphrase SSID PASSPHRASE",
              r"\bwpa_passphrase[ \t]+(?:'[^'\r\n]*'|\"[^\"\r\n]*\"|[^\s'\"]+)[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("glab",), "glab variable set / update NAME --value X (NAME secret-like)",
              r"\bglab[ \t]+variable[ \t]+(?:set|update|create)[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]*)[^\r\n|;&]*?[ \t](?:--value|-v)(?:=|[ \t]+)"
              r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")", check=_named_argument),
    _cli_rule(("pulumi",), "pulumi config set --secret NAME X",
              r"\bpulumi[ \t]+config[ \t]+set[ \t]+--secret[ \t]+(?:--?[A-Za-z-]+(?:=[^\s]+)?[ \t]+)*[^\s-][^\s]*[ \t]+"
              r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    # 2.14: PuTTY's plink / pscp / psftp -pw, ipmitool -P, schtasks /RP (and /P of a remote
    # host's user), DB2's CONNECT TO DB USER U USING X, Oracle's thin JDBC URL USER/X@.
    _cli_rule(("plink", "pscp", "psftp"), "plink / pscp / psftp -pw PASSWORD",
              r"(?<![A-Za-z0-9_])(?:plink|pscp|psftp)(?:\.exe)?\b[^\r\n|;&]*?[ \t]-pw[ \t]+" + _QUOTED_OR_BARE),
    _cli_rule(("ipmitool",), "ipmitool -P PASSWORD",
              r"(?<![A-Za-z0-9_])ipmitool\b[^\r\n|;&]*?[ \t]-P[ \t]+" + _QUOTED_OR_BARE),
    _cli_rule(("schtasks", "SCHTASKS"), "schtasks /RP / /P PASSWORD",
              r"(?<![A-Za-z0-9_])(?:schtasks|SCHTASKS)(?:\.exe)?\b[^\r\n|;&]*?[ \t]/(?:[Rr]?[Pp])[ \t]+" + _QUOTED_OR_BARE),
    RegexRule(name="cli-password", lower_triggers=(" using ",), group="value", check=_cli_value,
              description="DB2 / SQL CONNECT TO DB USER USER USING PASSWORD (2.14)",
              pattern=re.compile(r"\bconnect[ \t]+to[ \t]+[^\s]+[ \t]+user[ \t]+[^\s]+[ \t]+using[ \t]+" + _QUOTED_OR_BARE,
                                 re.ASCII | re.IGNORECASE)),
    _cli_rule(("oracle:thin", "oracle:oci"), "Oracle JDBC jdbc:oracle:thin:USER/PASSWORD@",
              r"jdbc:oracle:(?:thin|oci8?):[A-Za-z][A-Za-z0-9_$#]{0,63}/(?P<value>[^\s/'\"]+?)@(?=[^\s@'\"]*(?:['\"]|\s|$))"),
    _cli_rule(("insecure-password",), "HAProxy userlist: user NAME insecure-password PASSWORD",
              r"\binsecure-password[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    # 2.18: Vertica's vsql -w, the clients whose login or auth takes the key as its argument (wandb
    # login KEY, snyk auth TOKEN), rclone obscure PASSWORD, and the password hashers that take the
    # password on their command line (mkpasswd [-m METHOD] X, slappasswd -s X, doveadm pw -p X, caddy
    # hash-password --plaintext X): the hash they print is no secret of its own, the argument is.
    _cli_rule(("vsql",), "vsql -w PASSWORD (2.18)",
              r"(?<![A-Za-z0-9_])vsql\b[^\r\n|;&]*?[ \t]-w[ \t]*" + _QUOTED_OR_BARE),
    _cli_rule(("wandb", "snyk"), "wandb login KEY, snyk auth TOKEN (2.18)",
              r"(?<![A-Za-z0-9_-])(?:wandb[ \t]+login|snyk[ \t]+auth)(?:[ \t]+--(?:relogin|anonymously|verify|cloud)"
              r"|[ \t]+--(?:host|auth-type)(?:=|[ \t]+)[^\s|;&]+)*[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("rclone",), "rclone obscure PASSWORD (2.18)",
              r"rclone(?<![A-Za-z0-9_]rclone)[ \t]+obscure[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    _cli_rule(("mkpasswd",), "mkpasswd [-m METHOD] X (2.18)",
              r"mkpasswd(?<![A-Za-z0-9_]mkpasswd)(?:[ \t]+(?:-[mSR][ \t]*[^\s|;&-][^\s|;&]*|--(?:method|salt|rounds)=[^\s|;&]+))*[ \t]+"
              r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    # 2.21: apart from mkpasswd's, whose options are read one by one, each branch is a command's
    # name and then the rest of the command, read once per command (base.command_heads); in one
    # rule with mkpasswd's the line was read again from each name (`slappasswd=` repeated).
    _cli_rule(("slappasswd", "doveadm", "hash-password"),
              "slappasswd -s X, doveadm pw -p X, caddy hash-password --plaintext X (2.18)",
              r"(?:slappasswd(?<![A-Za-z0-9_]slappasswd)\b[^\r\n|;&]*?[ \t]-s[ \t]+|doveadm[ \t]+pw\b[^\r\n|;&]*?[ \t]-p[ \t]+"
              r"|caddy[ \t]+hash-password\b[^\r\n|;&]*?[ \t](?:--plaintext|-p)(?:=|[ \t]+))"
              r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    RegexRule(name="cli-password", lower_triggers=("set password",), group="value", check=_cli_value, anchored=True,
              description="MySQL SET PASSWORD [FOR USER] = [PASSWORD(]'X'[)] (2.12)",
              pattern=re.compile(r"set[ \t]+password\b[^\r\n;=]{0,120}=[ \t]*(?:(?:old_)?password[ \t]*\([ \t]*)?"
                                 r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\")", re.ASCII | re.IGNORECASE)),
)


# Session cookies are bearer credentials: whoever replays one is logged in (2.3, later). A
# cookie list is read where one is given: curl's -b / --cookie argument (a value without "=" is
# a cookie-jar file) and a Cookie: / Set-Cookie: header line. Each name=value pair keeps its
# name; the value goes when it is 16+ characters or 8+ mixing letters and digits (theme=dark,
# lang=en, Path=/ and Max-Age=3600 stay).
class CookieRule(Rule):
    """Values of session cookies in curl -b / --cookie arguments and Cookie / Set-Cookie headers."""

    _curl = re.compile(
        r"\bcurl\b[^\r\n|;&]*?[ \t](?:-b|--cookie)(?:=|[ \t]+)(?:'(?P<sq>[^'\r\n]+)'|\"(?P<dq>[^\"\r\n]+)\"|(?P<bare>[^\s'\"|;&`]+))",
        re.ASCII,
    )
    # 2.14: also a HAR header entry, {"name": "Cookie", "value": "…"}.
    _header = re.compile(r"(?<![A-Za-z0-9_-])(?:set-)?cookie(?:[\"']?:|\"[ \t]*,[ \t]*\"value\"[ \t]*:[ \t]*\")[ \t]*(?P<header>[^\r\n\"'`]+)",
                         re.ASCII | re.IGNORECASE)
    _pair = re.compile(r"(?:^|(?<=[;\s]))(?P<name>[A-Za-z0-9_.!#$%&*+^|~-]{1,64})=(?P<value>[^;\s,\"'`]+)", re.ASCII)

    def __init__(self) -> None:
        super().__init__(name="session-cookie", lower_triggers=("cookie", "curl"), needs=frozenset("="),
                         description="values of cookies in curl -b / --cookie and Cookie: / Set-Cookie: headers "
                         "(16+ characters, or 8+ mixing letters and digits)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._curl.pattern, self._header.pattern, self._pair.pattern, _cookie_secret.__qualname__]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        lists: list[re.Match[str]] = []
        if "curl" in text and ("-b" in text or "--cookie" in text):
            lists += self._curl.finditer(text)
        if "cookie" in scan.lower():
            lists += self._header.finditer(text)
        found: list[tuple[int, int, str]] = []
        for cookies in lists:
            group = next(name for name in ("sq", "dq", "bare", "header") if cookies.groupdict().get(name) is not None)
            offset = cookies.start(group)
            found += [(offset + pair.start("value"), offset + pair.end("value"), self.name)
                      for pair in self._pair.finditer(cookies.group(group)) if _cookie_secret(pair.group("value"))]
        return replace_spans(text, found, hits)


def _cookie_secret(value: str) -> bool:
    if len(value) >= 16:
        return not value.isdigit()  # an expiry or a count, however long, is no credential
    return len(value) >= 8 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


# Credentials written in code where no "name = value" says so (2.3, later): a requests / httpx
# auth tuple and the Basic/Digest auth classes take (user, password); a subscript assignment
# (os.environ['DB_PASSWORD'] = '...', $_ENV["API_TOKEN"] = "...") and the (name, value) calls that
# set one (PHP define, os.environ.setdefault, putenv, Go os.Setenv) name it in quotes. Only
# quoted literals count: auth=(user, os.environ["PW"]) and ['password', 'email'] stay.
class CodeCredentialRule(Rule):
    """Passwords of auth tuples and values set under a quoted secret-like name in code."""

    _auth = re.compile(
        r"(?:auth(?<!\wauth)[ \t]*=[ \t]*\(|Auth(?<=BasicAuth|igestAuth|ProxyAuth)\()[ \t]*"
        r"(?:[A-Za-z_]+[ \t]*=[ \t]*)?(['\"])[^'\"\r\n]{0,128}\1[ \t]*,[ \t]*(?:[A-Za-z_]+[ \t]*=[ \t]*)?"
        r"(['\"])(?P<value>[^'\"\r\n]{1,512})\2", re.ASCII)
    _subscript = re.compile(
        r"\[[ \t]*(['\"])(?P<name>[A-Za-z0-9_.-]{1,64})\1[ \t]*\][ \t]*=(?![=~>])"
        r"[ \t]*(['\"])(?P<value>[^'\"\r\n]{1,512})\3", re.ASCII)
    _call = re.compile(
        # 2.18: Java's System.setProperty / Properties.setProperty("db.password", "…") too.
        r"\b(?:define|setdefault|putenv|setenv|Setenv|set_env|SetEnvironmentVariable|setProperty)\([ \t]*(['\"])(?P<name>[A-Za-z0-9_.-]{1,64})\1[ \t]*,"
        r"[ \t]*(['\"])(?P<value>[^'\"\r\n]{1,512})\3", re.ASCII)
    # 2.8: PowerShell's [Environment]::SetEnvironmentVariable('DB_PASS', '...', 'Machine').
    _calls = ("define(", "setdefault(", "putenv(", "setenv(", "set_env(", "setenvironmentvariable(", "setproperty(")
    # 2.15: a default a program falls back to when the variable is unset is the secret written in
    # code: os.getenv("DB_PASSWORD", "X"), os.environ.get, Ruby's ENV.fetch, Laravel's env(), Node's
    # process.env.DB_PASSWORD || "X" (`??` too).
    _default = re.compile(
        r"(?:\b(?:getenv|environ\.get|ENV\.fetch|env)\([ \t]*(['\"])(?P<name>[A-Za-z0-9_.-]{1,64})\1[ \t]*,"
        r"|\bprocess\.env\.(?P<node>[A-Za-z0-9_]{1,64})[ \t]*(?:\|\||\?\?)"
        r"|\bENV\[[ \t]*(['\"])(?P<ruby>[A-Za-z0-9_]{1,64})\4[ \t]*\][ \t]*\|\|)"
        r"[ \t]*(['\"])(?P<value>[^'\"\r\n]{1,512})\6", re.ASCII)
    _defaults = ("getenv(", "environ.get(", "env.fetch(", "env(", "process.env.", "env[")

    def __init__(self) -> None:
        # literals: "]=" is too short to be a trigger of its own, so the prefilter's automaton
        # says where one of these occurs instead of eight ``in`` tests over every text.
        super().__init__(name="password-assignment", triggers=("]=", "] ="), lower_triggers=("auth", *self._calls, *self._defaults),
                         needs=frozenset("'\""), literals=("]=", "] =", "auth", *self._calls, *self._defaults),
                         description="passwords of auth=(user, password) / HTTPBasicAuth(user, password) and values "
                         "set under a quoted secret-like name: env['DB_PASSWORD'] = '...', define('DB_PASSWORD', '...'), "
                         "os.environ.setdefault / putenv / os.Setenv / [Environment]::SetEnvironmentVariable")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._auth.pattern, self._subscript.pattern, self._call.pattern, self._default.pattern]

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        lowered = scan.lower()
        found: list[tuple[int, int, str]] = []
        if "auth" in lowered and "(" in text:
            for match in self._auth.finditer(text):
                if not is_placeholder(match.group("value"), quoted=True):
                    found.append((*match.span("value"), "password-assignment"))
        named: list[re.Match[str]] = []
        if "]=" in text or "] =" in text:
            named += self._subscript.finditer(text)
        if any(call in lowered for call in self._calls):
            named += self._call.finditer(text)
        if any(call in lowered for call in self._defaults):
            named += self._default.finditer(text)
        for match in named:
            name = match.group("name") or match.groupdict().get("node") or match.groupdict().get("ruby") or ""
            rule = named_value_rule(name, match.group("value"))
            if rule is not None:
                found.append((*match.span("value"), rule))
        return replace_spans(text, found, hits)


# Windows sets a variable without `=` (2.8): PowerShell's `Set-Item -Path Env:DB_PASSWORD -Value X`
# (New-Item, Set-Content; `Env:\\NAME`) and cmd's `setx NAME X`, so no assignment rule read the
# name beside its value (`$env:NAME = "X"` and `set NAME=X` they read).
_WINDOWS_ENV = re.compile(
    r"(?:\b(?:Set-Item|New-Item|Set-Content|si|ni)[ \t]+(?:-Path[ \t]+)?['\"]?Env:\\?(?P<name>[A-Za-z_][A-Za-z0-9_]{0,127})['\"]?"
    r"(?:[ \t]+-Value)?|\bsetx[ \t]+(?P<setx>[A-Za-z_][A-Za-z0-9_]{0,127}))[ \t]+"
    r"(?:'(?P<sq>[^'\r\n]+)'|\"(?P<dq>[^\"\r\n]+)\"|(?P<bare>[^\s'\"|;&`-][^\s'\"|;&`]*))", re.ASCII | re.IGNORECASE)


# 2.15: fish's `set -gx NAME VALUE` (`-x`, `-Ux`, `--export`, `-g`: a flag says it is fish) and Tcl /
# expect's `set NAME "VALUE"`, `set NAME VALUE` with a NAME in capitals: no `=` either. Without a flag
# or quotes a value needs a digit or a symbol ("set PASSWORD to expire" is a sentence), and it ends
# its command (a JSON string's closing quote too).
_SHELL_SET = re.compile(
    r"(?<![A-Za-z0-9_$.-])set[ \t]+(?P<flags>(?:--?[A-Za-z]+[ \t]+)*)(?P<name>[A-Za-z_][A-Za-z0-9_]{0,127})[ \t]+"
    r"(?:'(?P<sq>[^'\r\n]+)'|\"(?P<dq>[^\"\r\n$]+)\"|(?P<bare>[^\s'\"|;&`$-][^\s'\"|;&`]*))(?=[ \t]*(?:$|[;|&#\"]))",
    re.ASCII | re.MULTILINE)


def _shell_set_value(match: re.Match[str], group: str) -> bool:
    if match.group("flags") or group != "bare":
        return True
    value = match.group("bare")
    return match.group("name").isupper() and table_secret(value)


class WindowsEnvRule(Rule):
    """The value of a secret-like variable set by Set-Item / New-Item Env:NAME, setx NAME, or
    (2.15) fish's and Tcl's set NAME."""

    def __init__(self) -> None:
        super().__init__(name="password-assignment", lower_triggers=("env:", "setx", "set "), literals=("env:", "setx", "set "),
                         description="a secret-like variable's value set by PowerShell Set-Item / New-Item Env:NAME "
                         "-Value, cmd setx NAME, fish set -x NAME, Tcl set NAME")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _WINDOWS_ENV.pattern, _SHELL_SET.pattern, _shell_set_value.__qualname__]

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        found: list[tuple[int, int, str]] = []
        # Each reading only where its own word is: the Windows one has no literal the engine skips to.
        for match in _WINDOWS_ENV.finditer(scan.text) if "env:" in scan.lower() or "setx" in scan.lower() else ():
            group = next(name for name in ("sq", "dq", "bare") if match.group(name) is not None)
            rule = named_value_rule(match.group("name") or match.group("setx"), match.group(group), quoted=group != "bare")
            if rule is not None:
                found.append((*match.span(group), rule))
        if "set " in scan.text:
            for match in _SHELL_SET.finditer(scan.text):
                group = next(name for name in ("sq", "dq", "bare") if match.group(name) is not None)
                rule = named_value_rule(match.group("name"), match.group(group), quoted=group != "bare")
                if rule is not None and _shell_set_value(match, group):
                    found.append((*match.span(group), rule))
        return replace_spans(scan.text, found, hits)


# A container's environment as a list of name / value pairs (2.3, later): Kubernetes and compose
# YAML ("- name: DB_PASSWORD" and "value: ..." on the next line) and ECS task definitions
# ({"name": "DB_PASSWORD", "value": "..."}). The field walker judges such pairs in an event's own
# fields; in text (a manifest cat'ed or written by a tool) the name is on the line before.
class EnvListRule(Rule):
    """The value of a name / value pair whose name is secret-like."""

    _pair = re.compile(
        r"name(?<![A-Za-z0-9_]name)[\"']?[ \t]*:[ \t]*([\"']?)(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,127})\1[ \t]*,?[ \t]*\r?\n?"
        r"[ \t]*(?:-[ \t]+)?[\"']?value[\"']?[ \t]*:[ \t]*"
        r"(?:\"(?P<dq>[^\"\r\n]{1,4096})\"|'(?P<sq>[^'\r\n]{1,4096})'|(?P<bare>[^\s\"'#,}{\[\]][^\r\n#,}]{0,4095}?))[ \t]*(?=$|[\r\n,}#])",
        re.ASCII | re.MULTILINE)

    def __init__(self) -> None:
        super().__init__(name="password-assignment", triggers=("value",), needs=frozenset(":"),
                         description="the value of a secret-like name in a name / value list (Kubernetes and "
                         "compose env:, ECS task definitions)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._pair.pattern]

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if "name" not in text:
            return text
        found: list[tuple[int, int, str]] = []
        for match in self._pair.finditer(text):
            group = next(name for name in ("dq", "sq", "bare") if match.group(name) is not None)
            rule = named_value_rule(match.group("name"), match.group(group), quoted=group != "bare")
            if rule is not None:
                found.append((*match.span(group), rule))
        return replace_spans(text, found, hits)


class LabelledCellRule(Rule):
    """The value in the markup cell right after a label naming a secret (2.18): an HTML table's row
    (`<td>password</td><td>X</td>`, `<th>`), an HTML definition list (`<dt>Password</dt><dd>X</dd>`) and
    markdown's (`Admin password` over `: X`). The label is judged as an assignment's name and the value
    as a table's cell: under a password name one token with a letter and a digit or a symbol, under
    another secret name a value that looks random (`<td>token</td><td>required</td>` stays)."""

    _html = re.compile(
        r"<(?P<open>t[dh]|dt)(?:[ \t][^<>\r\n]{0,200})?>[ \t\r\n]*(?P<label>[^<>\r\n]{1,48}?)[ \t\r\n]*</(?P=open)>[ \t\r\n]*"
        r"<(?P<cell>td|dd)(?:[ \t][^<>\r\n]{0,200})?>[ \t\r\n]*(?:<(?:code|b|strong|kbd|samp)>)?(?P<value>[^<>\s]{1,256})"
        r"(?:</(?:code|b|strong|kbd|samp)>)?[ \t\r\n]*</(?P=cell)>", re.ASCII | re.IGNORECASE)
    _definition = re.compile(r"^(?P<label>[A-Za-z][^\r\n:|<>`]{0,47})\r?\n:[ \t]+(?P<value>[^\s`]{1,256})[ \t]*\r?$",
                             re.ASCII | re.MULTILINE)

    def __init__(self) -> None:
        super().__init__(name="password-assignment", lower_triggers=("</td>", "</th>", "</dt>", "\n: "),
                         description="an HTML table's or definition list's cell, or a markdown definition, after a label "
                         "naming a secret (2.18)")

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._html.pattern, self._definition.pattern, table_secret.__qualname__]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text, lowered = scan.text, scan.lower()
        matches: list[re.Match[str]] = []
        if "</td>" in lowered or "</th>" in lowered or "</dt>" in lowered:
            matches += self._html.finditer(text)
        if "\n: " in text:
            matches += self._definition.finditer(text)
        found = []
        for match in matches:
            label, value = match.group("label").strip().rstrip(":").strip(), match.group("value")
            if value.startswith("[REDACTED:") or is_placeholder(value, quoted=False):
                continue
            kind = name_class(label)
            if kind == "password" and table_secret(value):
                found.append((match.start("value"), match.end("value"), "password-assignment"))
            elif kind is not None and kind != "password" and looks_random(value):
                found.append((match.start("value"), match.end("value"), "secret-assignment"))
        return replace_spans(text, found, hits) if found else text


# A markdown table with a password / token / secret / API key column (2.3, later): the header
# names the secret once and each row's cell holds one ("| grafana | admin | 5PLmd_Ba*oU |").
class MarkdownTableRule(Rule):
    """Cells of a markdown table's column whose header is a secret-like name."""

    # 2.11: also a query result as psql (----+----) and the mysql client (+----+----+) print it:
    # SELECT * FROM users shows a password column as a markdown table does.
    _rule_line = re.compile(r"^[ \t]*(?:\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)+\|?|\+?-+(?:\+-+)+\+?)[ \t]*\r?$",
                            re.MULTILINE | re.ASCII)
    _cell_edge = re.compile(r"(?<!\\)\|")

    def __init__(self) -> None:
        super().__init__(name="password-assignment", triggers=("---",), needs=frozenset("|"),
                         description="cells of a markdown table's password / token / secret / API key column")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._rule_line.pattern, self._cell_edge.pattern]

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if "|" not in text:
            return text
        found: list[tuple[int, int, str]] = []
        for rule_line in self._rule_line.finditer(text):
            header_end = rule_line.start() - 1
            if header_end < 0:
                continue
            header_start = text.rfind("\n", 0, header_end) + 1
            headers = [header for _, header in self._cells(text, header_start, header_end)]
            columns = {index: header for index, header in enumerate(headers) if name_class(header.strip("`*_ ")) is not None}
            # 2.12: a name / value table (`| Key | Value |`, `| Variable | Value |`) names each row's
            # secret in its first cell: `| DB pass | X |`.
            named_rows = len(headers) >= 2 and "value" in headers[1].lower() and 1 not in columns
            if not columns and not named_rows:
                continue
            row_start = rule_line.end() + 1
            while row_start < len(text):
                row_end = text.find("\n", row_start)
                row_end = len(text) if row_end == -1 else row_end
                # A row that is another rule line starts the next table (2.12: its rows are that
                # table's alone, so a text of many tables reads each row once).
                if "|" not in text[row_start:row_end] or self._rule_line.match(text, row_start, row_end + 1):
                    break
                cells = self._cells(text, row_start, row_end)
                if named_rows and len(cells) >= 2:
                    start, cell = cells[1]
                    value = cell.strip("`")
                    rule = named_value_rule(cells[0][1].strip("`*_ "), value) if table_secret(value) else None
                    if rule is not None:
                        offset = start + cell.index(value)
                        found.append((offset, offset + len(value), rule))
                for index, (start, cell) in enumerate(cells):
                    if index in columns:
                        value = cell.strip("`")
                        rule = named_value_rule(columns[index].strip("`*_ "), value) if table_secret(value) else None
                        if rule is not None:
                            offset = start + cell.index(value)
                            found.append((offset, offset + len(value), rule))
                row_start = row_end + 1
        return replace_spans(text, found, hits)

    def _cells(self, text: str, start: int, end: int) -> list[tuple[int, str]]:
        """``(start, stripped text)`` of each cell of the row ``text[start:end]``."""
        line = text[start:end].rstrip("\r")
        edges = [edge.start() for edge in self._cell_edge.finditer(line)]
        if line.strip()[:1] != "|":
            edges.insert(0, -1)
        if line.strip()[-1:] != "|":
            edges.append(len(line))
        cells = []
        for left, right in itertools.pairwise(edges):
            raw = line[left + 1: right]
            stripped = raw.strip()
            cells.append((start + left + 1 + (raw.index(stripped) if stripped else 0), stripped))
        return cells


def table_secret(value: str) -> bool:
    # A column may describe passwords rather than list them ("| password | required |", "12"):
    # a cell holds one when it is one token with a letter and a digit or a symbol.
    return (bool(value) and not any(c.isspace() for c in value) and any(c.isalpha() for c in value)
            and (any(c.isdigit() for c in value) or not value.replace("_", "").replace("-", "").isalnum()))


def named_value_rule(name: str, value: str, *, quoted: bool = True) -> str | None:
    if is_placeholder(value, quoted=quoted):
        return None
    kind = name_class(name)
    if kind == "password":
        return "password-assignment"
    if kind is not None and looks_random(value):
        return "secret-assignment"
    return None


# "password" in other languages, then (within a few words, no digit) a value of 8+ characters
# holding a letter and a digit: "пароль: Qwerty12345 для входа", "密码是 Abc123456789xyz". The
# English words are the assignment and prose rules' (streams.redaction.assignments).
_PASSWORD_WORDS_ELSEWHERE = (
    "пароль", "пароля", "паролем", "密码", "密碼", "口令", "パスワード", "비밀번호", "암호", "contraseña",
    "contrasena", "mot de passe", "kennwort", "passwort", "senha", "şifre", "sifre", "hasło", "haslo",
    "wachtwoord", "lösenord", "adgangskode", "salasana", "κωδικός", "סיסמה", "كلمة المرور", "كلمة السر",
    "पासवर्ड",
    "clave",  # 2.5: Spanish "key" / "password" ("La clave del wifi es ...")
    # 2.5: words for a token or a secret key ("令牌是 …", "API密钥: …", "トークンは …", "le jeton est …")
    "令牌", "密钥", "秘钥", "トークン", "토큰", "jeton", "clé secrète", "schlüssel",
    # 2.7: "key" and "token" in Russian, Japanese, Portuguese, Italian, Spanish, Polish ("Вот мой
    # ключ API: …", "APIキーは …", "a chave da API é …"): a key written in prose, not a password.
    "ключ", "токен", "секрет", "キー", "シークレット", "chave", "chiave", "llave", "klucz",
    # 2.11: Catalan, Czech / Slovak, Hungarian, Croatian / Serbian / Bosnian, Slovene, Vietnamese,
    # Indonesian / Malay, Thai, Persian, Bengali; a French API key ("ma clé API : …").
    "contrasenya", "heslo", "jelszó", "jelszo", "lozinka", "lozinku", "geslo", "mật khẩu", "mat khau",
    "kata sandi", "kata laluan", "รหัสผ่าน", "رمز عبور", "পাসওয়ার্ড", "clé api", "clé d'api", "clé d’api", "clef api",
    # 2.12: Romanian / Turkish / Italian, Latvian, Estonian, Lithuanian, Swahili, Icelandic.
    "parola", "parole", "parool", "slaptažodis", "slaptazodis", "nenosiri", "lykilorð",
    # 2.15: Norwegian ("Passordet til wifi er …").
    "passord",
    # 2.16: Bulgarian / Macedonian, Serbian / Macedonian in Cyrillic, Azerbaijani, Albanian, Afrikaans,
    # Welsh, Basque, Galician, Georgian, Armenian, Kazakh, Mongolian, Urdu, Tamil, Telugu, Kannada,
    # Malayalam, Gujarati, Punjabi, Sinhala, Amharic, Burmese, Khmer, Lao ("Паролата за базата е …").
    "парола", "лозинка", "лозинку", "лозинке", "şifrə", "fjalëkalim", "wagwoord", "cyfrinair", "pasahitz",
    "contrasinal", "პაროლი", "գաղտնաբառ", "құпия сөз", "нууц үг", "پاس ورڈ", "کلمہ عبور", "கடவுச்சொல்",
    "పాస్‌వర్డ్", "పాస్వర్డ్", "ಪಾಸ್‌ವರ್ಡ್", "ಪಾಸ್ವರ್ಡ್", "പാസ്‌വേഡ്", "പാസ്വേഡ്", "પાસવર્ડ", "ਪਾਸਵਰਡ", "මුරපදය",
    "የይለፍ ቃል", "စကားဝှက်", "ពាក្យសម្ងាត់", "ລະຫັດຜ່ານ",
    # 2.18: "key" (an API key) in Dutch, Swedish, Danish / Norwegian, Finnish, Turkish, Czech, Slovak,
    # Hungarian, Romanian, Greek, Hebrew, Arabic, Persian, Hindi, Indonesian / Malay, Thai, Korean and
    # Vietnamese ("De API-sleutel is …", "API 키: …", "Khóa API là …"); Korean's and Thai's words only
    # after "API", alone they are common words.
    "sleutel", "nyckel", "nøgle", "nøkkel", "avain", "anahtar", "klíč", "kľúč", "kulcs", "cheie", "κλειδί",
    "מפתח", "مفتاح", "کلید", "कुंजी", "kunci api", "api 키", "api키", "api-키", "คีย์ api", "api คีย์",
    "khóa api", "khoá api", "khoa api",
    # 2.19: French's abbreviation of "mot de passe", only with its colon ("mdp : …"; "MDP" is a decision process).
    "mdp :", "mdp:",
)
_PASSWORD_CHARS = r"[A-Za-z0-9!#$%&*+\-./<=>?@^_~]"  # printable ASCII but quotes, brackets, , ; : and `
# 2.9: letters of the alphabets written with spaces between words (Latin, Greek, Cyrillic) too:
# "пароль: Медведь7!Zx" kept its first six letters. Not CJK letters, which run into the
# words around a value ("密码是Abc123…").
_SCRIPT_LETTERS = "\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0370-\u03ff\u0400-\u04ff"
_PASSWORD_CHARS_ELSEWHERE = r"[A-Za-z0-9!#$%&*+\-./<=>?@^_~" + _SCRIPT_LETTERS + r"]"
_SIGNS = frozenset("!#$%&*+<=>?@^~")


def _said_elsewhere(match: re.Match[str]) -> bool:
    # 2.20: "mdp" is also a Markov decision process, named in reinforcement-learning configs
    # (`mdp: FrozenLake-v1`, `MDP: GridWorld-5x5`); after it only a value with a sign no
    # environment's name holds, or a random-looking one, is a password.
    if match.group("word").lower() not in ("mdp :", "mdp:"):
        return True
    value = match.group("value")
    return not _SIGNS.isdisjoint(value) or looks_random(value)


_PASSWORD_ELSEWHERE = RegexRule(
    name="password-in-prose",
    lower_triggers=_PASSWORD_WORDS_ELSEWHERE,
    description="a password written after the word password in another language",
    check=_said_elsewhere,
    pattern=re.compile(
        r"(?P<word>" + "|".join(re.escape(word) for word in _PASSWORD_WORDS_ELSEWHERE) + r")"
        # 2.14: 32 characters between, not 24 ("Das Passwort für die Datenbank lautet …").
        r"[^\r\n\d]{0,32}?(?<!" + _PASSWORD_CHARS_ELSEWHERE + r")"
        r"(?=" + _PASSWORD_CHARS_ELSEWHERE + r"*\d)(?=" + _PASSWORD_CHARS_ELSEWHERE + r"*[A-Za-z" + _SCRIPT_LETTERS + r"])"
        r"(?P<value>" + _PASSWORD_CHARS_ELSEWHERE + r"{8,128})(?!" + _PASSWORD_CHARS_ELSEWHERE + r")",
        re.IGNORECASE,
    ),
    group="value",
)

# The scheme's slashes may be JSON-escaped (PHP's json_encode writes ``https:\/\/``, others
# ``\u002f``) in a tool's output. A password may hold a "#": no host:port is followed by "#" and
# then "@" before any "/", so only a password makes that shape.
_URL_CHAR = r"(?:[^\s/?@\"'<>]|\?(?![A-Za-z0-9_.%-]*=))"
_URL_HEAD = r":(?<=[A-Za-z0-9]:)(?:/|\\/|\\u002[fF])(?:/|\\/|\\u002[fF])(?P<user>[^\s/?#:\"'<>\[]*):"
# 2.15: a user or a password holding "@" written raw (https://bob@corp.com:pw@host/,
# https://u:p@ss@host/): the authority ends at its last "@", as URL parsers read it, so
# the password runs to the "@" after which no other stands before the path. Tried first;
# without a second "@" the 2.9 reading (_URL_PLAIN_VALUE).
# A "?" in the password too where no query (`?name=`) starts, and not after a port (_url_password_slash).
_URL_AT_VALUE = _URL_CHAR + r"*(?:@" + _URL_CHAR + r"*)+(?=@[A-Za-z0-9\[][^\s/?@\"'<>]*(?![^\s/?\"'<>]))"
_URL_PLAIN_VALUE = _URL_CHAR + r"+(?:/[^\s/?@\"'<>]+)*"
_URL_HOST_AFTER = r"@(?=[A-Za-z0-9\[])"


@dataclass(frozen=True, eq=False)
class UrlPasswordRule(RegexRule):
    """``scheme://user:password@host``, its matches found without reading a run of URLs again
    from each (2.21).

    ``finditer`` tried the pattern at each ``scheme://``, and the password's reading ran to the
    end of the run of characters a password may hold before failing: a line of JSON-escaped
    URLs without an "@" (``:\\u002F\\u002F`` 4 000 times) took 13 s. Whether each branch can
    match is decided first from where the next "@", the next character no value holds and
    the next "@" a host follows lie, each found again only once the reading passes it; the
    pattern (or its second branch alone, when the first cannot match) is then tried only
    where it matches, and finds what ``finditer`` does."""

    def matches(self, scan: Scan, done: Callable[[], int]) -> Iterator[re.Match[str]]:
        text = scan.text
        run_end = _Next(text, _URL_RUN_END)
        value_end = _Next(text, _URL_VALUE_END)
        at = _Next(text, _AT)
        host_at = _Next(text, _URL_HOST_AT)
        slash = _Next(text, _SLASH)
        query = _Next(text, _URL_QUERY)
        tail: tuple[int, int] = (-1, -1)  # an "@" and the last "?" or "//" before it in a value
        pos = 0
        while (head := _URL_HEAD_PATTERN.search(text, pos)) is not None:
            start, value = head.span()
            first_at = at(value)
            if first_at >= run_end(value):
                pos = start + 1  # no "@" before a space or a quote: neither branch matches
                continue
            reading = None
            if first_at < value_end(value) and host_at(first_at + 1) < value_end(value):
                reading = self.pattern  # the first branch matches: an "@" in the value, a host after a later one
            elif first_at > value and _URL_HOST_START.match(text, first_at + 1):
                # The second branch: the value runs to the first "@", characters of a password up to
                # its first "/" (no query's "?"), then "/"s each followed by a run without "?" or "/".
                first_slash = min(slash(value), first_at)
                if tail[0] != first_at:
                    tail = (first_at, max(text.rfind("?", value, first_at), text.rfind("//", value, first_at)))
                if (first_slash > value and query(value) >= first_slash
                        and (first_slash == first_at or (tail[1] < first_slash and text[first_at - 1] != "/"))):
                    reading = _URL_PLAIN_PATTERN
            match = None if reading is None else reading.match(text, start)
            if match is None:
                pos = start + 1
                continue
            yield match
            pos = match.end()


class _Next:
    """Where ``pattern`` is next found at or after a place, searched again only once the place
    passes it: asked at places that move forward, each part of the text is read once."""

    __slots__ = ("_found", "_pattern", "_since", "_text")

    def __init__(self, text: str, pattern: re.Pattern[str]) -> None:
        self._text, self._pattern = text, pattern
        self._since = self._found = -1

    def __call__(self, place: int) -> int:
        if not self._since <= place <= self._found:
            found = self._pattern.search(self._text, place)
            self._since, self._found = place, len(self._text) if found is None else found.start()
        return self._found


_URL_HEAD_PATTERN = re.compile(_URL_HEAD, re.ASCII)
_URL_PLAIN_PATTERN = re.compile(_URL_HEAD + "(?P<value>" + _URL_PLAIN_VALUE + ")" + _URL_HOST_AFTER, re.ASCII)
_URL_RUN_END = re.compile(r"[\s\"'<>]", re.ASCII)  # no part of a match after the scheme holds these
_URL_QUERY = re.compile(r"\?(?=[A-Za-z0-9_.%-]*=)", re.ASCII)
_URL_VALUE_END = re.compile(r"[\s\"'<>/]|\?(?=[A-Za-z0-9_.%-]*=)", re.ASCII)  # ends the first branch's value
_URL_HOST_AT = re.compile(r"@(?=[A-Za-z0-9\[][^\s/?@\"'<>]*(?![^\s/?\"'<>]))", re.ASCII)
_URL_HOST_START = re.compile(r"[A-Za-z0-9\[]", re.ASCII)
_AT = re.compile("@")
_SLASH = re.compile("/")

URL_PASSWORD_RULE = UrlPasswordRule(
    name="url-password",
    repass=False,
    needs=frozenset(":"),
    triggers=("://", ":\\/\\/", ":\\u002f\\u002f", ":\\u002F\\u002F"),
    description="password in scheme://user:password@host (database, broker and HTTP URLs), also JSON-escaped",
    pattern=re.compile(_URL_HEAD + "(?P<value>" + _URL_AT_VALUE + "|" + _URL_PLAIN_VALUE + ")" + _URL_HOST_AFTER, re.ASCII),
    group="value",
    # 2.5: https://[REDACTED:github-token]@host held a "user:password" in its marker, and
    # postgres://user:${DB_PASS}@host a template's placeholder.
    check=lambda match: not _template(match.group("value")) and _url_password_slash(match),
)


def _url_password_slash(match: re.Match[str]) -> bool:
    """A "/" (2.9) or a "?" (2.15) in a URL's password: a base64 or hand-typed password written unescaped
    (mysql://root:Tr0ub/4d@db), not a host's port and path before an "@" in the path
    (http://localhost:3000/@vite/client, https://host:8080/users/@me)."""
    value = match.group("value")
    if "?" in value:
        # 2.15: "Pa?ss10" is a password; localhost:3000?next=a@b is a port and a query.
        if value.partition("?")[0].isdigit():
            return False
    if "/" not in value:
        return True
    return "." not in match.group("user") and _PORT_OR_ROUTE.match(value) is None and "#/" not in value


_PORT_OR_ROUTE = re.compile(r"[0-9]+[#/]")  # localhost:3000/…, localhost:3000#/login: a port and a path



class DsnPasswordRule(Rule):
    """``user:password@host`` without a scheme (2.3, later): a Go driver's DSN
    (``app:pw@tcp(db:3306)/app``, ``@unix(/tmp/mysql.sock)``), and ``user:pw@host:port`` or
    ``user:pw@host/db`` written bare. The URL rule needs ``scheme://`` before the user.

    Each ``@`` is found with ``str.find`` and the user and password are read backwards from it in
    a short window, so text without such a shape costs one ``in`` test. Outside a Go DSN the
    password must hold a digit or a symbol, and the host an IP address or a port or path after
    it: ``email:bob42@example.com``, ``mailto:``, ``git@github.com:org/repo``, ``scp user@host:path``
    and ``nginx:1.25@sha256:…`` stay."""

    # 2.15: an "@" inside the password (`app:p@ss99@db:5432`): read back from the last "@", whose
    # host the checks below judge; an earlier "@" has no port or path after its "host".
    _before = re.compile(r"(?:^|(?<=[\s\"'=(,;`]))(?P<user>[A-Za-z_][A-Za-z0-9_.-]{0,63}):(?P<value>[^\s/\"'<>`]{1,128})\Z", re.ASCII)
    _go = re.compile(r"(?:tcp|udp|unix)\(", re.ASCII)
    _host = re.compile(r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252})(?P<after>:[0-9]{2,5}\b|/)?", re.ASCII)
    _ip = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}", re.ASCII)
    _schemes = frozenset({"mailto", "sip", "sips", "xmpp", "tel", "acct", "im", "pres", "git", "ssh", "pkg", "urn", "npm"})

    def __init__(self) -> None:
        super().__init__(name="url-password", triggers=("@",), needs=frozenset("@"), repass=False,
                         description="password in user:password@host without a scheme (Go DSNs @tcp(...) / "
                         "@unix(...), user:pw@host:port, user:pw@host/db)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._before.pattern, self._go.pattern, self._host.pattern, self._ip.pattern,
                *sorted(self._schemes)]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if ":" not in text:
            return text
        pieces: list[str] = []
        done = 0
        at = text.find("@")
        while at != -1:
            found = self._password_before(text, at)
            if found is not None and found[0] >= done:
                pieces += (text[done: found[0]], marker(self.name))
                done = found[1]
            at = text.find("@", at + 1)
        if not pieces:
            return text
        hits[self.name] = hits.get(self.name, 0) + len(pieces) // 2
        pieces.append(text[done:])
        return "".join(pieces)

    def _password_before(self, text: str, at: int) -> tuple[int, int] | None:
        # Most "@"s are e-mail addresses and decorators: no ":" right before, without a space
        # or "/" between, means no password; only then is the regex tried, from 65 before it.
        colon = text.rfind(":", max(0, at - 129), at)
        if colon == -1 or colon == at - 1 or any(c in " \t\r\n/" for c in text[colon + 1: at]):
            return None
        before = self._before.search(text, max(0, colon - 65), at)
        if before is None or before.group("user").lower() in self._schemes:
            return None
        value = before.group("value")
        start = before.start("value")
        if is_marker_at(text, start) or "[REDACTED:" in value or _template(value):
            return None
        if self._go.match(text, at + 1):
            return start, at
        host = self._host.match(text, at + 1)
        if host is None or host.group("host").lower().startswith("sha"):
            return None
        if host.group("after") is None and not self._ip.fullmatch(host.group("host")):
            return None
        if value.replace(".", "").isdigit() or (value.isalpha() and value.isascii()):
            return None  # a version (nginx:1.25@…) or a word: no password
        return start, at


DSN_PASSWORD_RULE = DsnPasswordRule()

_TOKEN_CHARS = r"[A-Za-z0-9._~+/=-]"
# 2.22: an Authorization header's credentials read on through the symbols a password or a
# percent-encoded token holds (`Bearer omtl3Vm%axV7%65K`, `Bearer !3ZSo*j3IHqRp27C`): the token
# characters alone stopped at the first, and a value under 8 characters before it was kept whole.
_CREDENTIAL_CHARS = r"[A-Za-z0-9._~+/=%!*#@-]"


def _bearer(match: re.Match[str]) -> bool:
    token = match.group("value")
    # "the bearer of this letter" is prose; a token has digits, or is long and mixed-case.
    return any(c.isdigit() for c in token) or (len(token) >= 20 and not token.islower())


_BEARER = RegexRule(
    name="bearer-token",
    needs=frozenset("bB"),
    lower_triggers=("bearer",),
    anchored=True,
    description="Bearer tokens (Authorization: Bearer ..., \"Bearer ...\")",
    pattern=re.compile(rf"bearer[ \t]+(?P<value>{_CREDENTIAL_CHARS}{{8,}})", re.ASCII | re.IGNORECASE),
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
    needs=frozenset("bB"),
    lower_triggers=("basic",),
    anchored=True,
    description="HTTP Basic credentials (base64 of user:password after 'Basic')",
    pattern=re.compile(r"basic[ \t]+(?P<value>[A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])", re.ASCII | re.IGNORECASE),
    group="value",
    check=_basic_credentials,
)

def _aws_secret(match: re.Match[str]) -> bool:
    value = match.group("value")
    # A secret access key is 40 random base64 characters: capitals, small letters and digits.
    # A git SHA (no capitals) or a word run next to a key id is not one.
    return (any(c.isupper() for c in value) and any(c.islower() for c in value)
            and any(c.isdigit() for c in value))


_AWS_KEY_ID = r"\[REDACTED:aws-access-key-id\]"
_AWS_SECRET = r"(?<![A-Za-z0-9/+=])(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
# An AWS key pair printed together without a keyword ("AKIA... / wJalr...", a CSV row, prose):
# the 40-character secret near the key id (already a marker, the token rules run first).
_AWS_PAIR = tuple(
    RegexRule(
        name="aws-secret-access-key",
        needs=frozenset("["),
        triggers=("[REDACTED:aws-access-key-id]",),
        repass=False,
        description="AWS secret access keys within 200 characters of an AWS access key id, "
                    "without a keyword (prose, CSV rows, 'key / secret')",
        pattern=re.compile(pattern, re.ASCII),
        group="value",
        check=_aws_secret,
    )
    for pattern in (_AWS_KEY_ID + r"[\s\S]{0,200}?" + _AWS_SECRET,
                    _AWS_SECRET + r"(?=[\s\S]{0,200}?" + _AWS_KEY_ID + ")")
)

# 2.16: `aws configure` prompts with the value it holds in brackets and the answer after the colon
# ("AWS Secret Access Key [None]: wJalr…"); the key id's prompt above shows only its last four
# characters, so no key id is near the secret.
_AWS_PROMPT = RegexRule(
    name="aws-secret-access-key", lower_triggers=("secret access key [",),
    description="the answer to aws configure's \"AWS Secret Access Key [CURRENT]:\" prompt (2.16)",
    pattern=re.compile(r"Secret Access Key[ \t]+\[[^\]\r\n]{0,48}\]:[ \t]*" + _AWS_SECRET, re.ASCII | re.IGNORECASE),
    group="value", check=_aws_secret,
)

# 2.18: any tool's prompt that shows the current value in brackets and takes the answer after the colon
# (`Token [None]: X`, `Enter API key [****]: X`, `Password []: X`), as aws configure's does: the line's
# words before the bracket name a secret (judged as an assignment's name), the answer is one token
# ending the line. A bracket holding a number is an index (`key [0]: abc1`), no prompt.
_PROMPT_NAME = re.compile(r"(?:^|(?<=[\s>$\"'`]))(?P<name>[A-Za-z][A-Za-z0-9 _.-]{0,48}?)[ \t]*\[(?P<current>[^\]\r\n]{0,64})\Z", re.ASCII)


def _prompt_answer(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    line_start = text.rfind("\n", max(0, start - 120), start) + 1
    prompt = _PROMPT_NAME.search(text, max(line_start, start - 120), start)
    if prompt is None or prompt.group("current").isdigit() or prompt.group("current").startswith("REDACTED:"):
        return False  # an index (`key [0]: …`), or a marker's bracket, not a prompt's
    words = prompt.group("name").split()
    name = "_".join(word for word in words if word.lower() not in ("enter", "new", "your", "the", "current"))
    value = match.group("value")
    if not name or value.startswith("[REDACTED:") or is_placeholder(value, quoted=False):
        return False
    kind = name_class(name)
    if kind == "password":
        return any(c.isalpha() for c in value) and not value.isalpha()
    if kind == "key":
        return looks_random(value)  # a bare "key" names a secret only by its value's look
    return kind is not None and ((any(c.isalpha() for c in value) and any(c.isdigit() for c in value)) or looks_random(value))


_PROMPT_ANSWER = RegexRule(
    name="secret-assignment", lower_triggers=("]:",), anchored=True,
    description="the answer to a prompt naming a secret that shows its current value in brackets (NAME [CURRENT]: X) (2.18)",
    # The answer ends its line, also in a JSON string (an escaped line break or the closing quote).
    pattern=re.compile(r"\]:[ \t]*(?P<value>[^\s'\"`\[\\]{6,512})[ \t]*(?:\r?$|(?=\\[rn]|\"))", re.ASCII | re.MULTILINE),
    group="value", check=_prompt_answer,
)

# Twilio's auth token is 32 hex digits that only the account SID beside it names (2.7): `Client(
# "AC…", "…")`, `-u AC…:…`, `TWILIO_ACCOUNT_SID=AC… TWILIO_AUTH_TOKEN=…` in prose or a CSV row.
_TWILIO_SID = r"\[REDACTED:twilio-account-sid\]"
_TWILIO_TOKEN = r"(?<![0-9A-Za-z])(?P<value>[0-9a-f]{32})(?![0-9A-Za-z])"
_TWILIO_PAIR = RegexRule(
    name="twilio-auth-token",
    needs=frozenset("["),
    triggers=("[REDACTED:twilio-account-sid]",),
    repass=False,
    description="Twilio auth tokens (32 hex) within 120 characters after a Twilio account SID",
    pattern=re.compile(_TWILIO_SID + r"[^\r\n]{0,120}?" + _TWILIO_TOKEN, re.ASCII),
    group="value",
    check=lambda match: any(c.isdigit() for c in match.group("value")) and any(c.isalpha() for c in match.group("value")),
)

# An Authorization header's credentials under any scheme (2.7): Bearer and Basic have their rules;
# Okta's `SSWS`, `Token` (Django REST framework, GitHub), `Bot` (Discord), `GenieKey`, `Splunk`,
# `DSN`… were kept unless their token had a format of its own.
_AUTH_SCHEME = RegexRule(
    name="authorization-credentials",
    lower_triggers=("authorization",),
    anchored=True,
    description="the credentials of an Authorization header under any scheme (SSWS, Token, Bot, ...)",
    pattern=re.compile(r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?!bearer\b|basic\b|aws4-)[A-Za-z][A-Za-z0-9_.-]{1,24}[ \t]+"
                       rf"(?P<value>{_CREDENTIAL_CHARS}{{8,}})", re.ASCII | re.IGNORECASE),
    group="value",
    check=lambda match: (any(c.isdigit() for c in match.group("value")) and any(c.isalpha() for c in match.group("value")))
    or looks_random(match.group("value")),
)

# A URL whose user is a token and has no password (2.7): a Sentry DSN's key
# (`https://<32 hex>@o1.ingest.sentry.io/2`), `https://<token>@github.com/…`, a webhook relay.
# The user goes when it looks random or is 32+ hex digits; `git@`, `deploy@`, `user_42@` stay.
# 2.11: OpenWeatherMap's API key is its URLs' appid parameter (32 hex digits), which no
# secret word names.
_APPID = RegexRule(
    name="secret-assignment", triggers=("appid=",), description="OpenWeatherMap's ?appid=KEY (32 hex digits) in a URL",
    pattern=re.compile(r"[?&;]appid=(?P<value>[0-9a-f]{32})(?![0-9A-Za-z])", re.ASCII), group="value",
)
# redis.conf's requirepass / masterauth (2.5) read as a config line; also inside a sentence or
# a command ("add requirepass X to redis.conf", CONFIG SET requirepass X), the words being
# redis's own.
# Inside a sentence the value must not read as a word: a digit, a symbol or a capital after
# its first letter ("the requirepass directive", "# requirepass foobared" stay).
def _redis_password(match: re.Match[str]) -> bool:
    value = match.group("value").strip("'\"")
    return _cli_value(match) and (any(not c.isalpha() for c in value) or any(c.isupper() for c in value[1:]))


_REDIS_AUTH = RegexRule(name="password-assignment", triggers=("requirepass", "masterauth"), group="value", check=_redis_password,
                        description="requirepass / masterauth PASSWORD (redis) anywhere on a line",
                        pattern=re.compile(r"\b(?:requirepass|masterauth)[ \t]+" + _QUOTED_OR_BARE, re.ASCII))


# Jenkins prints its first administrator password in its log, alone two lines under this
# sentence (docker logs jenkins); nothing on its line names it (2.11).
_JENKINS_PASSWORD = RegexRule(
    name="password-assignment", triggers=("following password to proceed",),
    description="Jenkins' initial admin password under \"Please use the following password to proceed to installation:\"",
    # docker compose prefixes each line with its service ("jenkins  | ").
    pattern=re.compile(r"following password to proceed to installation:[ \t]*(?:\r?\n(?:[A-Za-z0-9_.-]{1,64}[ \t]*\|)?[ \t]*){1,3}"
                       r"(?P<value>[0-9a-f]{32})(?![0-9A-Za-z])", re.ASCII),
    group="value",
)


_URL_TOKEN = RegexRule(
    name="url-token",
    needs=frozenset("@"),
    triggers=("://",),
    repass=False,
    description="a token as a URL's user, without a password (Sentry DSN keys)",
    pattern=re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?P<value>[A-Za-z0-9_~.-]{16,256})@(?=[A-Za-z0-9\[])", re.ASCII),
    group="value",
    check=lambda match: looks_random(match.group("value")) or re.fullmatch(r"[0-9a-f]{32,}", match.group("value")) is not None,
)


_NUMBER = r"(?:[ \t]*[0-9]{1,7}(?:→|\t))?"  # a line's number as the Read tool or cat -n prints it

# A PuTTY private key file (2.7): its key is the base64 after "Private-Lines: N", up to its MAC.
_PUTTY_KEY = RegexRule(
    name="private-key",
    triggers=("Private-Lines:",),
    repass=False,
    description="the private lines of a PuTTY key file (.ppk), through its Private-MAC",
    # 2.17: also the lines of Claude Code's Read tool and `cat -n`, each after its number (`     7→…`).
    pattern=re.compile(r"Private-Lines:[ \t]*[0-9]+[ \t]*\r?\n(?P<value>" + _NUMBER + r"[A-Za-z0-9+/=]+(?:\r?\n" + _NUMBER
                       + r"[A-Za-z0-9+/=]+)*(?:\r?\n" + _NUMBER + r"Private-(?:MAC|Hash):[ \t]*[0-9a-fA-F]+)?)(?=\r?\n|\Z)", re.ASCII),
    group="value",
)

# An AWS SSM SecureString is a secret by its type, whatever its name (2.7): `aws ssm get-parameter
# --with-decryption` prints {"Name": "/prod/db/password", "Type": "SecureString", "Value": "…"}, and
# `aws ssm put-parameter --type SecureString --value …` sets one.
_SECURE_STRING = (
    RegexRule(name="secret-assignment", lower_triggers=("securestring",),
              description="the Value of an AWS SSM SecureString parameter (get-parameter output)", group="value",
              pattern=re.compile(r"\"Type\"[ \t]*:[ \t]*\"SecureString\"[^{}]{0,400}?\"Value\"[ \t]*:[ \t]*\"(?P<value>(?:[^\"\\\\\r\n]|\\\\.){1,4096})\"",
                                 re.ASCII | re.IGNORECASE)),
    RegexRule(name="secret-assignment", lower_triggers=("securestring",),
              description="aws ssm put-parameter --type SecureString --value VALUE", group="value",
              pattern=re.compile(r"\bput-parameter\b(?=[^\r\n|;&]*--type[ =]+['\"]?SecureString)[^\r\n|;&]*?[ \t]--value(?:=|[ \t]+)"
                                 r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|[^\s'\"|;&`]+)", re.ASCII)),
)

# 2.13: a parameter that is a secret by its name, whatever its type (`--type String`, or none:
# String is the default): `put-parameter --name /prod/db/password --value X`, judged as the value
# of its name's last part (`password`, `api_token`, `stripe-secret-key`).
_SSM_NAME = re.compile(r"[^\s/'\"|;&]+(?=['\"]?(?:[ \t]|$))", re.ASCII)


def _named_parameter(match: re.Match[str]) -> bool:
    name = _SSM_NAME.search(match.group("name"))
    value = match.group("value").strip("'\"")
    return (name is not None and value[:1] != "-"
            and named_value_rule(name.group(0).replace("-", "_"), value, quoted=True) is not None)


_NAMED_PARAMETER = RegexRule(
    name="secret-assignment", lower_triggers=("put-parameter",), check=_named_parameter, group="value",
    description="aws ssm put-parameter --name NAME --value VALUE, NAME secret-like (2.13)",
    pattern=re.compile(r"\bput-parameter\b(?=[^\r\n|;&]*?[ \t]--name(?:=|[ \t]+)(?P<name>['\"]?[^\s'\"|;&]+))[^\r\n|;&]*?[ \t]--value(?:=|[ \t]+)"
                       r"(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|[^\s'\"|;&`]+)", re.ASCII),
)

def _routing_key(match: re.Match[str]) -> bool:
    value = match.group("value")
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


# A PagerDuty Events API integration key (2.13): `routing_key` (v2) or `service_key` (v1) and 32
# letters and digits. A routing key names an AMQP route far more often (`orders.created`,
# `#`), which is words and dots, never 32 letters and digits mixed.
_ROUTING_KEY = RegexRule(
    name="secret-assignment", lower_triggers=("routing_key", "routingkey", "routing-key", "routing key", "service_key"),
    anchored=True, group="value", check=_routing_key,
    description="PagerDuty routing_key / service_key: 32 letters and digits (2.13)",
    pattern=re.compile(r"(?:routing[_ -]?|service_)key['\"]?[ \t]*(?:[:=]|=>|[ \t]is)[ \t]*['\"]?(?P<value>[A-Za-z0-9]{32})(?![A-Za-z0-9])",
                       re.ASCII | re.IGNORECASE),
)


# pgbouncer's auth_file (`userlist.txt`, 2.13): a line of two quoted words, a user and a password,
# plain or as PostgreSQL stores it (`md5…`, `SCRAM-SHA-256$…`: the password-hash rule takes those).
# Nothing names them, so only a text that names the file (`userlist`, `auth_file`, `pgbouncer`)
# loses any value; elsewhere a value must read as a password (a letter and a digit or symbol).
_USERLIST = re.compile(r"^[ \t]*\"[^\"\s]{1,64}\"[ \t]+\"(?P<value>[^\"\r\n]{1,256})\"[ \t]*\r?$", re.ASCII | re.MULTILINE)
_USERLIST_SIGNS = ("userlist", "auth_file", "pgbouncer")


class UserlistRule(Rule):
    """The password of each `"USER" "PASSWORD"` line of a pgbouncer auth file."""

    def __init__(self) -> None:
        super().__init__(name="password-assignment", triggers=('" "', '"\t"'),
                         description="a pgbouncer userlist.txt line: \"USER\" \"PASSWORD\" (2.13)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _USERLIST.pattern, *_USERLIST_SIGNS]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        named = any(sign in scan.lower() for sign in _USERLIST_SIGNS)
        found = []
        for match in _USERLIST.finditer(text):
            value = match.group("value")
            if is_placeholder(value, quoted=True) or is_marker_at(value, 0):
                continue
            if named or (table_secret(value) and not plain_words(value)):
                found.append((*match.span("value"), self.name))
        return replace_spans(text, found, hits) if found else text


# Django's generated SECRET_KEY (2.7): `django-insecure-` and 50 characters, some of them the
# punctuation (`!@#$%^&*(-_=+)`) where the prose rule's value ended.
_DJANGO_KEY = RegexRule(
    name="django-secret-key",
    triggers=("django-insecure-",),
    description="a Django generated SECRET_KEY (django-insecure-...)",
    pattern=re.compile(r"django-insecure-[a-z0-9!@#$%^&*(\-_=+)]{40,60}", re.ASCII),
)

# redis.conf / sentinel: "requirepass X" and "masterauth X" lines (2.5).
_CONFIG_PASSWORD = RegexRule(
    name="password-assignment",
    lower_triggers=("requirepass", "masterauth"),
    description="redis.conf requirepass / masterauth PASSWORD lines",
    pattern=re.compile(r"^[ \t]*(?:requirepass|masterauth)[ \t]+(?P<value>\"[^\"\r\n]+\"|[^\s\"#]+)",
                       re.ASCII | re.IGNORECASE | re.MULTILINE),
    group="value",
    check=lambda match: not is_placeholder(match.group("value"), quoted=False),
)
# A ~/.pgpass line, host:port:database:user:password, as `cat ~/.pgpass` prints it (2.5); in
# 2.7 also after a space (a line pasted after a sentence); in 2.17 also after the line number Claude
# Code's Read tool prints (`     1→host:5432:…`) and a JSON string's opening quote.
_PGPASS = RegexRule(
    name="password-assignment",
    triggers=(":5432:", ":5433:", ":6432:", ":*:"),
    description="~/.pgpass lines host:port:database:user:PASSWORD",
    pattern=re.compile(r"(?:^|(?<=[ \t\"→]))[ \t]*[A-Za-z0-9_.*-]+:(?:[0-9]{2,5}|\*):[^:\s]+:[^:\s]+:(?P<value>\S+?)(?:\"[,}\]]?)?[ \t]*$",
                       re.ASCII | re.MULTILINE),
    group="value",
    check=lambda match: not is_placeholder(match.group("value"), quoted=False),
)


# A ~/.netrc entry's password (2.9): "machine api.heroku.com login me password <key>", on one line
# or over several. The file says what the value is, so it goes whatever its shape: Heroku writes
# its API key there, a UUID, which the prose reading keeps as an id.
_NETRC = RegexRule(
    name="password-assignment",
    lower_triggers=("machine",),
    anchored=True,
    description="a ~/.netrc entry's password (machine HOST login USER password PASSWORD)",
    pattern=re.compile(r"machine[ \t]+[^\s\"'`]+(?:\s+(?:login|account|port)[ \t]+\S+){0,3}\s+password[ \t]+"
                       r"(?P<value>\S+)", re.ASCII | re.IGNORECASE),
    group="value",
    check=lambda match: not is_placeholder(match.group("value"), quoted=False),
)


_ATTRIBUTE = re.compile(r"<(?:add|property|setting|param|entry|parameter)\b[^<>]{0,200}?\b(?:key|name)[ \t]*=[ \t]*"
                        r"[\"'](?P<name>[^\"'<>\r\n]{1,64})[\"'][^<>]{0,200}?\bvalue[ \t]*=[ \t]*"
                        r"(?P<q>[\"'])(?P<value>(?:(?!(?P=q))[^<>\r\n]){1,4096})(?P=q)", re.ASCII | re.IGNORECASE)


def _attribute_rule(rule: str) -> RegexRule:
    """A config element naming its setting in one attribute and giving its value in another (2.9):
    .NET's <add key="SmtpPassword" value="…"/>, Ant / Maven <property name="db.password"
    value="…"/>, <setting name="ApiKey" value="…"/>. The XML rule reads <password>…</password>
    only. Judged as a name / value list's item: any value under a password name, a random one
    under another secret name (one rule per marker, on one pattern)."""
    return RegexRule(
        name=rule,
        lower_triggers=("value=",),
        description="<add key=\"NAME\" value=\"…\"/> and <property name=\"NAME\" value=\"…\"/> under a secret-like NAME",
        pattern=_ATTRIBUTE,
        group="value",
        check=lambda match: named_value_rule(match.group("name"), match.group("value")) == rule,
    )


_ATTRIBUTE_PAIRS = (_attribute_rule("password-assignment"), _attribute_rule("secret-assignment"))


def _used_as_secret(match: re.Match[str]) -> bool:
    value = match.group("value")
    words = match.group("what").lower().split()
    kind = name_class("_".join(words[-2:]))
    if kind == "key":
        kind = None  # "use X as the key": a dict key, a sort key
    if kind == "password":
        return any(c.isdigit() for c in value) or not value.isalpha() or looks_random(value)
    return kind == "secret" and (looks_random(value) or (len(value) >= 8 and any(c.isdigit() for c in value)
                                                          and any(c.isalpha() for c in value)))


# "use X as the password", "I'll use `X` as the API key" (2.5): the value comes before its name.
_USED_AS = RegexRule(
    name="secret-in-prose",
    lower_triggers=("use ",),
    description="a value used as the password, token or API key in a sentence (\"use X as the password\")",
    pattern=re.compile(r"\buse[ \t]+[`'\"]?(?P<value>[^\s`'\"]{6,128}?)[`'\"]?[ \t]+as[ \t]+(?:(?:the|a|an|my|your|our|its|new)[ \t]+)?"
                       r"(?P<what>(?:[A-Za-z]+[ \t]+){0,2}?(?:password|passphrase|passwd|token|secret|key))(?![A-Za-z])"
                       # 2.10: "as the password hash", "as the token format": the word names a kind
                       # of thing, not the value's role ("use SHA256 as the password hash").
                       r"(?![ \t]+(?:hash|hashes|hasher|hashing|algorithm|scheme|format|type|field|column|"
                       r"policy|policies|rules?|requirements?|length|strength|validator|validation|reset|"
                       r"manager|prompt|generator|encoder|encoding|storage|salt|store)(?![A-Za-z]))",
                       re.ASCII | re.IGNORECASE),
    group="value",
    check=_used_as_secret,
)


# A command whose output is a secret, and that output (2.7). A tool's whole output that is one
# secret token is judged in streams.redaction.events (secret-output); the same output also
# arrives inside text: a terminal session pasted into a prompt or printed by a script
# (`$ op read op://prod/db/password` and the password on the next line), and Claude Code's `!`
# shell mode, whose output is a user message of its own: `<bash-stdout>…</bash-stdout>`.
_PROMPT = r"(?:[ \t]*(?:[$#%>❯➜]|PS[ \t][^>\r\n]{0,80}>|[\w.@~:/-]{1,80}[$#%])[ \t]+)?"
_SECRET_COMMANDS = (
    r"printenv[ \t]+(?P<env>[A-Za-z_][A-Za-z0-9_]*)[ \t]*",
    r"echo[ \t]+[\"']?\$\{?(?P<var>[A-Za-z_][A-Za-z0-9_]*)\}?[\"']?[ \t]*",
    r"op[ \t]+(?:read|item[ \t]+get[ \t][^\r\n]*--(?:fields?|reveal))\b[^\r\n]*",
    r"aws[ \t]+(?:configure[ \t]+get[ \t]+[^\s]*(?:secret|token)|secretsmanager[ \t]+get-secret-value[ \t][^\r\n]*text"
    r"|ssm[ \t]+get-parameters?[ \t][^\r\n]*--with-decryption[^\r\n]*text|ecr[ \t]+get-login-password)[^\r\n]*",
    r"(?:gh[ \t]+auth[ \t]+token|heroku[ \t]+auth:token|az[ \t]+account[ \t]+get-access-token"
    r"|gcloud[ \t]+(?:auth[ \t]+(?:application-default[ \t]+)?print-(?:access|identity)-token|secrets[ \t]+versions[ \t]+access))\b[^\r\n]*",
    r"(?:vault[ \t]+(?:kv[ \t]+get|read)[ \t][^\r\n]*-field[= ]|security[ \t]+find-(?:generic|internet)-password[ \t][^\r\n]*-w\b"
    r"|lpass[ \t]+show[ \t][^\r\n]*--password|bw[ \t]+get[ \t]+password|doppler[ \t]+secrets[ \t]+get[ \t][^\r\n]*--plain"
    r"|pass[ \t]+show[ \t]|sops[ \t][^\r\n]*--extract)[^\r\n]*",
    r"(?:kubectl|oc)[ \t][^\r\n]*\bsecrets?\b[^\r\n]*\|[ \t]*base64[ \t]+(?:-d|--decode|-D)\b[^\r\n]*",
    # 2.18: a Secret's value by jsonpath, not decoded (`-o jsonpath='{.data.password}'`: the base64 of it).
    r"(?:kubectl|oc)[ \t][^\r\n]*\bsecrets?\b[^\r\n]*jsonpath=[^\r\n]*\.data\b[^\r\n]*",
    r"cat[ \t]+[^\s|;&]*(?:master\.key|\.key|secret|token|passw|credential|apikey|api_key|vault[_-]pass)[^\s|;&]*[ \t]*",
    # 2.13: an Erlang distribution cookie (RabbitMQ, CouchDB): 20 capitals, no digit.
    r"cat[ \t]+[^\s|;&]*(?P<ck>\.erlang\.cookie)[ \t]*",
    # 2.8: terraform output -raw NAME and heroku config:get NAME of a secret-like name.
    r"(?:terraform|tofu)[ \t]+output[ \t]+-raw[ \t]+(?P<tf>[A-Za-z_][A-Za-z0-9_-]*)[ \t]*",
    r"heroku[ \t]+config:get[ \t]+(?P<hk>[A-Za-z_][A-Za-z0-9_]*)\b[^\r\n]*",
    # 2.14: libsecret's secret-tool lookup, gopass show, Argo CD's initial admin password,
    # a new Consul / Nomad gossip key.
    r"(?:secret-tool[ \t]+lookup|gopass[ \t]+(?:show|cat)|argocd[ \t]+admin[ \t]+initial-password"
    r"|(?:consul|nomad)[ \t]+(?:keygen|operator[ \t]+gossip[ \t]+keyring[ \t]+generate))\b[^\r\n]*",
    # 2.18: wg genkey (a WireGuard private key) and launchctl getenv NAME.
    r"(?:openssl[ \t]+rand[ \t]+-(?:base64|hex)|pwgen|python3?[ \t]+-c[ \t]+[^\r\n]*secrets\.token_[a-z]+"
    r"|head[ \t]+-c[ \t]*[0-9]+[ \t]+/dev/urandom|wg[ \t]+genkey)\b[^\r\n]*",
    r"launchctl[ \t]+getenv[ \t]+(?P<lc>[A-Za-z_][A-Za-z0-9_]*)[ \t]*",
)
# Tried only where a command's first word is (the rule is anchored on them); what stands before it
# on its line is checked apart: nothing but a prompt, or a `$ ` prompt after a sentence.
_COMMAND_OUTPUT = re.compile(
    r"(?:" + "|".join(_SECRET_COMMANDS) + r")\r?\n[ \t]*(?P<value>[^\s<>\"'`]{8,512})[ \t]*\r?$", re.MULTILINE)
_BEFORE_COMMAND = re.compile(r"(?:\A" + _PROMPT + r"|[ \t][$❯➜][ \t]+)\Z")
_COMMAND_WORDS = ("printenv", "echo", "op ", "aws ", "gh ", "heroku", "az ", "gcloud", "vault", "security", "lpass",
                  "bw ", "doppler", "pass ", "sops", "kubectl", "oc ", "cat ", "openssl", "pwgen", "python", "head ",
                  "terraform", "tofu", "secret-tool", "gopass", "argocd", "consul", "nomad", "wg ", "launchctl")


def _command_secret(match: re.Match[str]) -> bool:
    text = match.string
    line_start = text.rfind("\n", 0, match.start()) + 1
    if not _BEFORE_COMMAND.search(text[line_start: match.start()]):
        return False  # a word inside a line (`develop `, `the cat `), not a command it starts
    if match.group("ck") is not None:
        return len(match.group("value")) >= 16 and not match.group("value").startswith("[REDACTED:")
    name = match.group("env") or match.group("var") or match.group("tf") or match.group("hk") or match.group("lc")
    if name is not None and name_class(name) is None:
        return False  # printenv PATH, echo $HOME
    value = match.group("value")
    if value.startswith(("[REDACTED:", "http://", "https://")):
        return False  # a URL's password is url-password's
    # The command says what it prints: a value with a letter and a digit (a hex key too), or
    # one that looks random, is that secret; a word ("null", "unauthorized") is not.
    return (any(c.isalpha() for c in value) and any(c.isdigit() for c in value)) or looks_random(value)


# A token the probe of prints_secret stands in for a command's output with: a letter and a digit,
# mixed case, as random as the secrets the rule above takes.
_PROBE = "Zq8Xv3Lm9Tr2Wp5K"
_COMMAND_SEPARATORS = re.compile(r"&&|\|\|")


def prints_secret(command: str) -> bool:
    """Whether ``command`` (a tool call's shell command) prints a secret as its output, as the
    rule above reads a terminal: its last line, or the last command of that line (after `&&` or
    `||`), followed by a line of output would have that line removed (2.18: a call and its result
    are two events, :mod:`streams.redaction.memory`)."""
    if not _command_signs(command.lower()):
        return False
    line = command.strip().rsplit("\n", 1)[-1].strip()
    last = _COMMAND_SEPARATORS.split(line)[-1].strip()
    return bool(line) and (_command_probe(line) or (last != line and bool(last) and _command_probe(last)))


@lru_cache(maxsize=1024)
def _command_probe(command: str) -> bool:
    probe = f"$ {command}\n{_PROBE}"
    return _COMMAND_SECRET.apply(Scan(probe), {}).endswith(marker("secret-output"))


def printed_secret(output: str) -> bool:
    """Whether a tool's whole output, from a command that prints a secret (:func:`prints_secret`),
    is that secret: one token as the rule above takes it (a letter and a digit, a hex key too,
    or random-looking; a word such as ``null`` or ``unauthorized`` is not)."""
    token = output.strip()
    if not 8 <= len(token) <= 512 or any(c.isspace() for c in token) or token.startswith("[REDACTED:"):
        return False
    return (any(c.isalpha() for c in token) and any(c.isdigit() for c in token)) or looks_random(token)


# What only a secret-printing command line holds (lower-cased, one space between words); tested
# with `in` at C speed, they spare the anchored matching at every `echo`, `cat ` and `python` of
# a script or a log.
_COMMAND_SIGNS = ("printenv", "echo $", 'echo "$', "echo '$", "op read", "op item", "configure get", "secretsmanager",
                  "ssm get", "get-login-password", "auth token", "auth:token", "get-access-token", "print-access-token",
                  "print-identity-token", "versions access", "-field", "-password", "lpass show", "bw get", "secrets get",
                  "pass show", "--extract", "base64 -d", "base64 --decode", "rand -", "pwgen", "secrets.token_",
                  "/dev/urandom", "output -raw", "config:get", "secret-tool lookup", "gopass show", "gopass cat",
                  "initial-password", "keygen", "keyring generate", "genkey", "launchctl getenv", "jsonpath=")
_CAT_SECRET_FILE = re.compile(r"cat[ \t]+[^\s|;&]*(?:key|secret|token|passw|credential|vault[_-]pass|cookie)")


def _command_signs(lowered: str) -> bool:
    return any(sign in lowered for sign in _COMMAND_SIGNS) or ("cat " in lowered and _CAT_SECRET_FILE.search(lowered) is not None)


@dataclass(frozen=True, eq=False)
class _CommandOutputRule(RegexRule):
    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _BEFORE_COMMAND.pattern, *_COMMAND_SIGNS, _CAT_SECRET_FILE.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        if not _command_signs(scan.lower()):
            return scan.text
        return super().apply(scan, hits)


_COMMAND_SECRET = _CommandOutputRule(
    name="secret-output",
    lower_triggers=_COMMAND_WORDS,
    anchored=True,
    needs=frozenset("\n"),
    description="the output of a command that prints a secret (printenv TOKEN, op read, gh auth token, "
                "vault kv get -field, kubectl get secret ... | base64 -d, cat master.key), on the line after it",
    pattern=_COMMAND_OUTPUT,
    group="value",
    check=_command_secret,
)
# 2.19: the command before the output, when the same text holds it (`<bash-input>openssl rand -hex
# 32</bash-input>`), says what it printed, as a tool call says it of its result: a hex key goes too.
_SHELL_INPUT = re.compile(r"<bash-input>(?P<command>[^<]{1,2000})</bash-input>[ \t\r\n]*\Z")


def shell_command(text: str) -> str | None:
    """The command of a Claude Code `!` shell-mode input message (``<bash-input>CMD</bash-input>``)."""
    start = 0
    while start < len(text) and text[start] in " \t\r\n":
        start += 1
    match = _SHELL_INPUT.match(text, start) if text.startswith("<bash-input>", start) else None
    return match.group("command") if match is not None else None


def _shell_output(match: re.Match[str]) -> bool:
    value = match.group("value")
    if bare_secret(value):
        return True
    command = _SHELL_INPUT.search(match.string[max(0, match.start() - 2100): match.start()])
    return command is not None and prints_secret(command.group("command")) and printed_secret(value)


_SHELL_MODE_SECRET = RegexRule(
    name="secret-output",
    lower_triggers=("-stdout>",),
    description="Claude Code's ! shell mode: an output (<bash-stdout>) that is one secret token, or (2.19) one token "
                "after a <bash-input> command that prints a secret",
    pattern=re.compile(r"<(?P<tag>bash-stdout|local-command-stdout)>[ \t\r\n]*(?P<value>[^\s<]{8,512})[ \t\r\n]*</(?P=tag)>"),
    group="value",
    check=_shell_output,
)

# A password hash (2.8): an htpasswd line (`alice:$2y$05$…`, `bob:$apr1$…`, `{SHA}…`), a shadow
# line (`root:$6$…`), a Django or Argon2 hash in a dump. Each is cracked offline as fast as its
# scheme allows (apr1 and md5-crypt very fast), so it is a secret wherever it stands; the scheme's
# own marks ($2y$, $apr1$, rounds=, v=19) make it unmistakable. Replaced whole, salt and all.
_CRYPT = r"[./A-Za-z0-9]"
_PASSWORD_HASH = RegexRule(
    name="password-hash",
    triggers=("$2a$", "$2b$", "$2x$", "$2y$", "$apr1$", "$1$", "$5$", "$6$", "$y$", "$argon2", "{SHA}", "{SSHA}", "pbkdf2_sha"),
    description="password hashes: bcrypt, apr1 / md5-crypt, sha256 / sha512-crypt, yescrypt, Argon2, {SHA} / {SSHA}, "
                "Django pbkdf2 (htpasswd and shadow lines, dumps)",
    pattern=re.compile(
        r"(?<![A-Za-z0-9./$])(?:\$2[abxy]\$[0-9]{2}\$" + _CRYPT + r"{53}"
        r"|\$(?:apr1|1)\$" + _CRYPT + r"{1,8}\$" + _CRYPT + r"{22}"
        r"|\$[56]\$(?:rounds=[0-9]{1,9}\$)?" + _CRYPT + r"{1,16}\$" + _CRYPT + r"{43,86}"
        r"|\$y\$" + _CRYPT + r"{1,32}\$" + _CRYPT + r"{1,86}\$" + _CRYPT + r"{43}"
        r"|\$argon2(?:id|i|d)\$v=[0-9]{1,3}\$[a-z]=[0-9]+(?:,[a-z]=[0-9]+)*\$[A-Za-z0-9+/]{8,}\$[A-Za-z0-9+/]{16,}"
        r"|\{S?SHA\}[A-Za-z0-9+/]{27,}={0,2}"
        r"|pbkdf2_sha(?:1|256)\$[0-9]{1,9}\$[A-Za-z0-9]{1,64}\$[A-Za-z0-9+/]{20,}={0,2})(?![A-Za-z0-9./+=$])", re.ASCII),
)

# 2.18: MySQL's mysql_native_password hash (`*` and 40 capital hex digits: SHA1(SHA1(password)), in
# `mysql.user`'s authentication_string, `SHOW GRANTS`, `IDENTIFIED BY PASSWORD '*…'` and dumps), cracked as
# fast as SHA-1 runs. No star or word character before it (markdown's `**` bold stays its own).
_MYSQL_PASSWORD_HASH = RegexRule(
    name="password-hash", needs=frozenset("*"),
    description="MySQL mysql_native_password hashes: * + 40 capital hex digits (2.18)",
    triggers=("*",),
    pattern=re.compile(r"\*(?<![A-Za-z0-9_*]\*)[0-9A-F]{40}(?![A-Za-z0-9_])", re.ASCII),
    check=lambda match: any(c.isalpha() for c in match.group(0)) and any(c.isdigit() for c in match.group(0)[1:]),
)

# PostgreSQL's stored passwords (2.13): `md5` and the 32 hex digits of md5(password || user), and
# a SCRAM-SHA-256 verifier (`SCRAM-SHA-256$4096:SALT$STOREDKEY:SERVERKEY`), in a pgbouncer
# userlist, `pg_authid` / `pg_shadow` output or `ALTER ROLE … PASSWORD '…'`. The md5 form is
# cracked as fast as md5 runs.
_PG_PASSWORD_HASH = RegexRule(
    name="password-hash", triggers=("md5", "SCRAM-SHA-256$"),
    description="PostgreSQL password hashes: md5 + 32 hex digits, SCRAM-SHA-256 verifiers (2.13)",
    pattern=re.compile(r"md5(?<![A-Za-z0-9_]md5)[0-9a-f]{32}(?![A-Za-z0-9])"
                       r"|SCRAM-SHA-256(?<![A-Za-z0-9_]SCRAM-SHA-256)\$[0-9]{1,9}:[A-Za-z0-9+/]{4,}={0,2}\$[A-Za-z0-9+/]{4,}={0,2}:[A-Za-z0-9+/]{4,}={0,2}",
                       re.ASCII),
)

# Documents that say their values are secret by what they are, not by the values' names (2.8):
# a Kubernetes Secret (`kubectl get secret -o yaml/json`, a manifest an agent writes: every value
# under `data:` is base64 of a secret, `DATABASE_URL`, `.dockerconfigjson` and `stripe` as much as
# `password`), `vault kv get` (its Data table, or `"data"` in its JSON), `terraform output -json`
# (`"sensitive": true`), `heroku config` (a random-looking value of any name), `az storage account
# keys list` (`"keyName"` and its `"value"`), and a Key / Value or Name / Value table (PowerShell's
# `Get-ChildItem env:`, `vault read`) whose row's name is secret-like.
_K8S_SECRET = re.compile(r"^[ \t-]*kind:[ \t]*Secret[ \t]*\r?$", re.MULTILINE)
_YAML_DATA = re.compile(r"^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*\r?\n", re.MULTILINE)
_YAML_ROW = re.compile(r"(?P<indent>[ \t]*)(?P<key>[^\s:#'\"][^:\r\n]*?|'[^'\r\n]*'|\"[^\"\r\n]*\")[ \t]*:(?:[ \t]+(?P<value>[^\s#|>][^\r\n]*?))?[ \t]*\r?$")
_JSON_OBJECT = re.compile(r"\"(?:data|stringData)\"[ \t\r\n]*:[ \t\r\n]*\{(?P<body>[^{}]*)\}")
_JSON_VALUE = re.compile(r"\"(?:[^\"\\\r\n]|\\.)*\"[ \t\r\n]*:[ \t\r\n]*\"(?P<value>(?:[^\"\\\r\n]|\\.)+)\"")
_SENSITIVE = re.compile(r"\"sensitive\"[ \t\r\n]*:[ \t\r\n]*true[ \t\r\n]*,[ \t\r\n]*\"type\"[ \t\r\n]*:[ \t\r\n]*(?:\"[^\"\r\n]*\"|\[[^\]{}]*\])"
                        r"[ \t\r\n]*,[ \t\r\n]*\"value\"[ \t\r\n]*:[ \t\r\n]*\"(?P<value>(?:[^\"\\\r\n]|\\.)+)\"")
_AZURE_KEY = re.compile(r"\"keyName\"[ \t]*:[ \t]*\"[^\"\r\n]*\"[^{}]{0,400}?\"value\"[ \t]*:[ \t]*\"(?P<value>[^\"\\\r\n]{8,})\"")
_VAULT_DATA = re.compile(r"^=+[ \t]+(?:Secret[ \t]+)?Data[ \t]+=+[ \t]*\r?\n(?=Key[ \t]+Value)", re.MULTILINE)
_TABLE = re.compile(r"^(?P<head>Key|Name)[ \t]+Value[ \t]*\r?\n-{2,}[ \t]+-{2,}[ \t]*\r?\n(?P<rows>(?:[ \t]*\S[^\r\n]*\r?(?:\n|\Z))+)", re.MULTILINE)
_TABLE_ROW = re.compile(r"^(?P<key>\S+)[ \t]+(?P<value>\S[^\r\n]*?)[ \t]*\r?$", re.MULTILINE)
_CONFIG_VARS = re.compile(r"^=== [^\r\n]*Config Vars[ \t]*\r?\n(?P<rows>(?:[A-Za-z_][A-Za-z0-9_]*:[^\r\n]*\r?(?:\n|\Z))+)", re.MULTILINE)
_CONFIG_ROW = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*):[ \t]+(?P<value>\S[^\r\n]*?)[ \t]*\r?$", re.MULTILINE)


class SecretDocumentRule(Rule):
    """Values a secret store's or a secret manifest's output holds, whatever their names."""

    def __init__(self) -> None:
        # Each document's own mark (lower-cased): a table's header runs into its dashes.
        super().__init__(name="secret-assignment",
                         lower_triggers=("kind: secret", '"kind": "secret"', '"kind":"secret"', "lease_duration", '"sensitive"',
                                         '"keyname"', "config vars", "value\n--", "value\r\n--"),
                         description="values of Kubernetes Secret data / stringData, vault kv get Data, terraform output "
                         "\"sensitive\": true, heroku config vars that look random, az storage keys, and Key / Name / "
                         "Value tables' rows with secret-like names")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), *(pattern.pattern for pattern in (
            _K8S_SECRET, _YAML_DATA, _YAML_ROW, _JSON_OBJECT, _JSON_VALUE, _SENSITIVE, _AZURE_KEY, _VAULT_DATA, _TABLE,
            _TABLE_ROW, _CONFIG_VARS, _CONFIG_ROW))]

    def hit_names(self) -> tuple[str, ...]:
        return ("password-assignment", "secret-assignment")

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text, lowered = scan.text, scan.lower()
        found: list[tuple[int, int, str]] = []
        json_secret = False
        if "kind" in lowered and "secret" in lowered:
            if "kind: secret" in lowered and "data" in lowered and _K8S_SECRET.search(text):
                found += self._yaml_data(text)
            json_secret = '"kind"' in text and re.search(r"\"kind\"[ \t]*:[ \t]*\"Secret\"", text) is not None
        if json_secret or "lease_duration" in text:  # a Secret's JSON, vault's: one reading of their data
            found += self._json_data(text)
        if "sensitive" in text:
            found += [(*match.span("value"), self.name) for match in _SENSITIVE.finditer(text) if secret_value(match.group("value"))]
        if '"keyName"' in text:
            found += [(*match.span("value"), self.name) for match in _AZURE_KEY.finditer(text) if secret_value(match.group("value"))]
        if "value\n--" in lowered or "value\r\n--" in lowered:
            vault = {match.end() for match in _VAULT_DATA.finditer(text)} if "Data" in text else set()
            for table in _TABLE.finditer(text):
                offset = table.start("rows")
                for row in _TABLE_ROW.finditer(table.group("rows")):
                    value = row.group("value")
                    rule = (self.name if table.start() in vault and secret_value(value)
                            else named_value_rule(row.group("key"), value, quoted=False))
                    if rule is not None:
                        found.append((offset + row.start("value"), offset + row.end("value"), rule))
        if "config vars" in lowered:
            for block in _CONFIG_VARS.finditer(text):
                offset = block.start("rows")
                for row in _CONFIG_ROW.finditer(block.group("rows")):
                    value = row.group("value")
                    rule = named_value_rule(row.group("key"), value, quoted=False) or (self.name if looks_random(value) else None)
                    if rule is not None:
                        found.append((offset + row.start("value"), offset + row.end("value"), rule))
        return replace_spans(text, found, hits)

    def _yaml_data(self, text: str) -> list[tuple[int, int, str]]:
        found = []
        for block in _YAML_DATA.finditer(text):
            indent = len(block.group("indent").expandtabs())
            position = block.end()
            while position < len(text):
                end = text.find("\n", position)
                end = len(text) if end == -1 else end + 1
                line = text[position:end].rstrip("\r\n")
                if line.strip():
                    if len(line) - len(line.lstrip()) <= indent:
                        break
                    row = _YAML_ROW.fullmatch(line)
                    if row is not None and row.group("value") is not None and secret_value(row.group("value").strip("'\"")):
                        found.append((position + row.start("value"), position + row.end("value"), self.name))
                position = end
        return found

    def _json_data(self, text: str) -> list[tuple[int, int, str]]:
        found = []
        for block in _JSON_OBJECT.finditer(text):
            offset = block.start("body")
            found += [(offset + pair.start("value"), offset + pair.end("value"), self.name)
                      for pair in _JSON_VALUE.finditer(block.group("body")) if secret_value(pair.group("value"))]
        return found


def secret_value(value: str) -> bool:
    """A value a secret document holds: anything but a placeholder or a marker."""
    return bool(value.strip()) and not is_marker_at(value, 0) and not is_placeholder(value, quoted=True)


def _paired_password(match: re.Match[str]) -> bool:
    """After `-u USER`, a `-p` that is a password, not a port (`docker run -u 1000 -p 8080:80`, `-p
    5432`) or a path: a letter and a digit or a symbol, no `:` or `/`, not a flag."""
    value = match.group("value").strip("'\"")
    return (_cli_value(match) and value[:1] != "-" and table_secret(value) and ":" not in value and "/" not in value
            and any(c.isalpha() for c in value))


def _device_secret(match: re.Match[str]) -> bool:
    return _cli_value(match) and match.group("value").lower() not in ("public", "private")


_LOGIN_AND_DEVICE_PASSWORDS = (
    # 2.15: `-u USER -p PASSWORD`, the convention of client logins no earlier rule names (OpenShift's
    # oc login, Cloud Foundry's cf login, twine upload, az sql server create, ...).
    _cli_rule((" -u ", "\t-u "), "-u USER -p PASSWORD (oc / cf login, twine, az sql server create, ...)",
              r"(?<=[ \t])-u[ \t]+['\"]?[^\s'\"|;&`-][^\s'\"|;&`]*['\"]?[ \t]+-p[ \t]+" + _QUOTED_OR_BARE, _paired_password),
    # Cisco IOS / NX-OS configuration: `username U [privilege N] password|secret [0|7] X`, `enable
    # password|secret [0|7] X`, `snmp-server community X` (a type 5 / 8 / 9 hash is password-hash's).
    RegexRule(name="cli-password", lower_triggers=("snmp-server", "enable password", "enable secret", "privilege",
                                                   *(f"{word} {digit} " for word in ("password", "secret") for digit in range(10))),
              group="value", check=_device_secret,
              description="Cisco username / enable password or secret, snmp-server community (2.15)",
              # The encryption type (0 plain, 7 reversible) or a privilege level says it is a device's
              # configuration, not a sentence ("username and password fields", "enable password auth").
              pattern=re.compile(r"(?:^|(?<=[\s\"'|`]))(?:(?:username[ \t]+[^\s\"'|`]{1,64}(?:[ \t]+privilege[ \t]+[0-9]{1,2}[ \t]+"
                                 r"(?:password|secret)(?:[ \t]+[0-9])?|[ \t]+(?:password|secret)[ \t]+[0-9])|enable[ \t]+(?:password|secret)[ \t]+[0-9])"
                                 r"|snmp-server[ \t]+community)[ \t]+(?P<value>[^\s\"'|`]{1,128})",
                                 re.ASCII | re.MULTILINE)),
)


# 2.18: the passwords of plain-text protocols' sessions as a client log, a tcpdump or a tutorial shows
# them: FTP's and POP3's `PASS X` on a line after the session's `USER` line (within 300 characters: a
# test runner's `PASS src/app.test.js` has none), IMAP's `TAG LOGIN USER X`, SMTP's answer to `334
# UGFzc3dvcmQ6` (the base64 of "Password:"), each behind an optional `C: ` / `>>> ` mark; a Consul or
# Nomad ACL token's `SecretID` / `Secret ID` (a UUID, the token itself); redis-cli's numbered reply
# to `CONFIG GET requirepass` (the name's line, then its value's); a redis ACL rule's `>PASSWORD` on
# an `ACL SETUSER` line or an ACL file's `user NAME on …` line; a web server passing a variable to
# the application (`fastcgi_param NAME VALUE;`, `uwsgi_param`, `scgi_param`, `SetEnv`), judged by its name.
_SESSION_MARK = r"(?:[CS]:[ \t]*|(?:>>>|->|>)[ \t]*)?"
_USER_LINE = re.compile(r"(?:^|\n)[ \t]*" + _SESSION_MARK + r"USER[ \t]+[^\s]+", re.ASCII)


def _after_user_line(match: re.Match[str]) -> bool:
    value = match.group("value")
    return (_USER_LINE.search(match.string, max(0, match.start() - 300), match.start()) is not None
            and any(c.isalpha() for c in value) and not value.isalpha())


# 2.19: `PASS X` with no USER line before it (a client sending it from code, `quote PASS`, a trace of
# the command alone): a password by its shape, a symbol or the protocol's CR LF after it; a test
# runner's `PASS src/app.test.js`, `PASS tests` and `PASS TestLogin2` (a path, a file, a name) stay.
_PASS_SYMBOL = frozenset("!#$%&*+=?@^~")


# 2.20: what test output and logs print after PASS with a sign in it: a word and its
# exclamation (`print("PASS done!")`), a numbered name (`PASS build#42`), a count (`PASS ok=12`).
_NOT_A_PASS = re.compile(r"[A-Za-z]+[!?.]+|[A-Za-z_-]+#\d+|[A-Za-z_]+=\w*", re.ASCII)


def _lone_pass(match: re.Match[str]) -> bool:
    value = match.group("value")
    if "/" in value or "\\" in value or re.search(r"\.[A-Za-z]{1,5}$", value) or not any(c.isalpha() for c in value):
        return False
    if _NOT_A_PASS.fullmatch(value):
        return False
    crlf = match.string.startswith(("\\r", "\r"), match.end())
    return (crlf and not value.isalpha()) or (not _PASS_SYMBOL.isdisjoint(value) and not is_placeholder(value, quoted=False))


def _sasl_plain(match: re.Match[str]) -> bool:
    """SASL PLAIN's base64 (`AUTH PLAIN …`, IMAP's `AUTHENTICATE PLAIN …`, 2.19): it decodes to
    `authzid NUL user NUL password`, a shape no other base64 has."""
    try:
        decoded = base64.b64decode(match.group("value"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    parts = decoded.split("\0")
    return len(parts) == 3 and bool(parts[1]) and bool(parts[2]) and parts[2].isprintable()


def _protocol_value(match: re.Match[str]) -> bool:
    value = match.group("value")
    return any(c.isalpha() for c in value) and not value.isalpha() and not is_placeholder(value, quoted=False)


_ACL_USER_LINE = re.compile(r"[ \t]*[\"']?user[ \t]+[^\s]+[ \t]+(?:on|off|reset)\b", re.ASCII | re.IGNORECASE)


def _redis_acl(match: re.Match[str]) -> bool:
    """A `>PASSWORD` on its line's ACL SETUSER command or ACL file `user` rule (the line read back 300
    characters at most; in a JSON string it starts after the last escaped line break)."""
    text, start = match.string, match.start()
    line = text[text.rfind("\n", max(0, start - 300), start) + 1 or max(0, start - 300): start].rpartition("\\n")[2]
    return ("acl setuser " in line.lower() or _ACL_USER_LINE.match(line) is not None) and _protocol_value(match)


def _redis_reply(match: re.Match[str]) -> bool:
    return named_value_rule(match.group("name"), match.group("value")) is not None


def _passed_variable(match: re.Match[str]) -> bool:
    return named_value_rule(match.group("name"), match.group("value").strip("\"'"), quoted=True) is not None


PROTOCOL_PASSWORDS = (
    RegexRule(name="cli-password", triggers=("PASS ",), group="value", check=_after_user_line,
              description="FTP / POP3 PASS X after the session's USER line (2.18)",
              pattern=re.compile(r"(?:^|(?<=\n))[ \t]*" + _SESSION_MARK + r"PASS[ \t]+(?P<value>[^\s]{4,256})[ \t]*\r?$",
                                 re.ASCII | re.MULTILINE)),
    RegexRule(name="cli-password", triggers=("PASS ",), group="value", check=_lone_pass,
              description="FTP / POP3 PASS X with no USER line: a symbol in X or CR LF after it (2.19)",
              pattern=re.compile(r"(?:(?:^|(?<=\n))[ \t]*" + _SESSION_MARK + r"(?:(?:ftp>[ \t]*)?quote[ \t]+)?|(?<=['\"]))"
                                 r"PASS[ \t]+(?P<value>[^\s'\"\\]{4,256})(?=\\r|\r|[ \t]*$|'|\")", re.ASCII | re.MULTILINE)),
    RegexRule(name="cli-password", triggers=(" PLAIN ",), group="value", check=_sasl_plain,
              description="SMTP AUTH PLAIN / IMAP AUTHENTICATE PLAIN: base64 of authzid NUL user NUL password (2.19)",
              pattern=re.compile(r"\b(?:AUTH|AUTHENTICATE)[ \t]+PLAIN[ \t]+(?P<value>[A-Za-z0-9+/]{8,1024}={0,2})(?![A-Za-z0-9+/=])", re.ASCII)),
    RegexRule(name="cli-password", triggers=(" LOGIN ",), group="value", check=_protocol_value,
              description="IMAP TAG LOGIN USER X (2.18)",
              pattern=re.compile(r"(?:^|(?<=\n))[ \t]*" + _SESSION_MARK + r"[A-Za-z0-9.]{1,12}[ \t]+LOGIN[ \t]+(?:\"[^\"\r\n]{1,128}\"|[^\s]{1,128})"
                                 r"[ \t]+(?P<value>\"[^\"\r\n]{4,256}\"|[^\s\"]{4,256})[ \t]*\r?$", re.ASCII | re.MULTILINE)),
    RegexRule(name="cli-password", triggers=("UGFzc3dvcmQ6",), group="value",
              description="SMTP AUTH LOGIN: the answer to 334 UGFzc3dvcmQ6 (base64 \"Password:\") (2.18)",
              pattern=re.compile(r"334[ \t]+UGFzc3dvcmQ6[ \t]*\r?\n[ \t]*" + _SESSION_MARK + r"(?P<value>[A-Za-z0-9+/]{4,512}={0,2})[ \t]*\r?$",
                                 re.ASCII | re.MULTILINE)),
    RegexRule(name="secret-assignment", triggers=("SecretID", "Secret ID"), group="value",
              description="a Consul / Nomad ACL token's SecretID / Secret ID (2.18)",
              pattern=re.compile(r"(?<![A-Za-z])Secret[ ]?ID\"?[ \t]*[:=][ \t]*\"?(?P<value>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
                                 r"(?![0-9a-f-])", re.ASCII)),
    RegexRule(name="password-assignment", triggers=tuple(f'{digit}) "' for digit in "13579"), group="value", check=_redis_reply,
              description="redis-cli's numbered reply: the value after its secret-like name's line (CONFIG GET requirepass) (2.18)",
              pattern=re.compile(r"(?:^|(?<=\n))[ \t]*[0-9]{1,4}\)[ \t]+\"(?P<name>[A-Za-z0-9_.-]{1,64})\"[ \t]*\r?\n"
                                 r"[ \t]*[0-9]{1,4}\)[ \t]+\"(?P<value>[^\"\r\n]{1,512})\"", re.ASCII)),
    RegexRule(name="password-assignment", lower_triggers=("setuser", "user "), group="value", check=_redis_acl,
              description="a redis ACL rule's >PASSWORD (ACL SETUSER, an ACL file's user line) (2.18)",
              pattern=re.compile(r">(?<=[ \t]>)(?P<value>[^\s>]{4,256})(?=[ \t]|\r?$)", re.ASCII | re.MULTILINE)),
    RegexRule(name="password-assignment", lower_triggers=("fastcgi_param", "uwsgi_param", "scgi_param", "setenv "), group="value",
              check=_passed_variable, anchored=True,
              description="fastcgi_param / uwsgi_param / scgi_param / SetEnv NAME VALUE under a secret-like NAME (2.18)",
              pattern=re.compile(r"(?:fastcgi_param|uwsgi_param|scgi_param|SetEnv)[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})[ \t]+"
                                 r"(?P<value>\"[^\"\r\n]{1,512}\"|'[^'\r\n]{1,512}'|[^\s;\"']{1,512})", re.ASCII | re.IGNORECASE)),
)

# 2.19: a CLI's `config set NAME VALUE` / `configure set NAME VALUE` under a secret-like NAME, whatever the
# value's shape (MongoDB Atlas' `atlas config set private_api_key <UUID>`: a UUID is the key there); a
# `…key` name's value when it looks random (`config set sort_key name` stays); Confluent's `api-key store
# KEY SECRET`; composer's auth.json `"github-oauth": {"github.com": "TOKEN"}` (a host names the token).
def _config_set(match: re.Match[str]) -> bool:
    kind = name_class(match.group("name").rsplit(".", 1)[-1])
    value = match.group("value").strip("'\"")
    if value.startswith(("~/", "/", "./", "../", "$HOME/")):
        return False  # 2.20: a key's file, not the key (`git config set user.signingKey ~/.ssh/id_ed25519.pub`)
    if kind == "key":
        return looks_random(value)
    return kind in ("password", "secret") and _cli_value(match)


_CONFIG_SET = (
    RegexRule(name="cli-password", lower_triggers=("config set", "configure set"), group="value", check=_config_set, anchored=True,
              description="config set / configure set NAME VALUE under a secret-like NAME (2.19)",
              pattern=re.compile(r"config(?:ure)?[ \t]+set[ \t]+(?:--?[A-Za-z][A-Za-z0-9-]*(?:=[^\s|;&]+)?[ \t]+)*"
                                 r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")",
                                 re.ASCII | re.IGNORECASE)),
    _cli_rule(("api-key store",), "confluent api-key store KEY SECRET (2.19)",
              r"\bconfluent[ \t]+api-key[ \t]+store[ \t]+" + _ARG + r"[ \t]+(?P<value>'[^'\r\n]+'|\"[^\"\r\n]+\"|" + _BARE_ARG + ")"),
    RegexRule(name="secret-assignment", triggers=("-oauth\"", "-token\""), group="value", check=_cli_value,
              description="composer auth.json: github-oauth / gitlab-oauth / gitlab-token / bitbucket-oauth's token under a host (2.19)",
              pattern=re.compile(r"\"(?:github-oauth|gitlab-oauth|gitlab-token|bitbucket-oauth)\"[ \t]*:[ \t]*\{[ \t\r\n]*"
                                 r"\"[A-Za-z0-9.-]{1,253}\"[ \t]*:[ \t]*\"(?P<value>[^\"\\\r\n]{8,512})\"", re.ASCII)),
)

# 2.19: GitHub Actions' `::add-mask::VALUE` workflow command names its value a secret, whatever its
# shape (a workflow masks what it read from a vault); an expression or a variable (`${{ … }}`, `$TOKEN`) stays.
_ADD_MASK = RegexRule(
    name="secret-assignment",
    triggers=("::add-mask::",),
    description="GitHub Actions' ::add-mask::VALUE (2.19)",
    pattern=re.compile(r"::add-mask::(?P<value>[^\s'\"$`\\]{4,512})(?![^\s'\"`\\])", re.ASCII),
    group="value",
    check=lambda match: not is_placeholder(match.group("value"), quoted=False),
)

# 2.19: a GraphQL request's variables: `mutation($p: String!) { login(password: $p) }` binds the
# argument to a variable the `"variables"` object then gives a value under its own name (`"p"`), which
# says nothing. The value goes when the query binds that variable to a secret-like argument (a key's
# when it looks random) and the pair stands after the word `variables`.
_GRAPHQL_BINDING = re.compile(r"(?<![\w$])(?P<arg>[A-Za-z_]\w{0,63})[ \t]*:[ \t]*\$(?P<var>\w+)", re.ASCII)


@lru_cache(maxsize=4)
def _graphql_bindings(text: str) -> dict[str, list[str]]:
    """The arguments each variable of ``text`` is bound to, read once per text: each pair of a
    long JSON document of ``"name": "value"`` pairs after a ``variables`` read the whole text
    again, 200 KB in 80 s."""
    bindings: dict[str, list[str]] = {}
    for binding in _GRAPHQL_BINDING.finditer(text):
        bindings.setdefault(binding.group("var"), []).append(binding.group("arg"))
    return bindings


def _graphql_variable(match: re.Match[str]) -> bool:
    text, value = match.string, match.group("value")
    if "variables" not in text[max(0, match.start() - 4000): match.start()].lower() or is_placeholder(value, quoted=True):
        return False
    for arg in _graphql_bindings(text).get(match.group("var"), ()):
        kind = name_class(arg)
        if kind in ("password", "secret") or (kind == "key" and looks_random(value)):
            return True
    return False


_GRAPHQL_VARIABLE = RegexRule(
    name="password-assignment",
    lower_triggers=("variables",),
    needs=frozenset("$"),
    description="a GraphQL request's variable bound to a secret-like argument ($p for password: $p) (2.19)",
    pattern=re.compile(r"(?P<q>\\?\")(?P<var>[A-Za-z_]\w{0,63})(?P=q)[ \t]*:[ \t]*(?P=q)(?P<value>[^\"\\\r\n]{1,512})(?P=q)", re.ASCII),
    group="value",
    check=_graphql_variable,
)

CONTEXT_RULES: tuple[Rule, ...] = (_PASSWORD_HASH, _AZURE_SAS, _URL_SIGNATURE, _OAUTH_CODE, _BEARER, _BASIC, _AUTH_SCHEME, *_AWS_PAIR, _AWS_PROMPT, _PROMPT_ANSWER, _TWILIO_PAIR, _URL_TOKEN, _CAS_TICKET, _MYSQL_PASSWORD, _CLI_PASSWORD, *_CLI_FLAG_PASSWORDS, *_LOGIN_AND_DEVICE_PASSWORDS, _CURL_USER,
                                   _APPID, _REDIS_AUTH, _JENKINS_PASSWORD, _ADD_MASK, _GRAPHQL_VARIABLE, *_CONFIG_SET,
                                   CookieRule(), CodeCredentialRule(), WindowsEnvRule(), EnvListRule(), MarkdownTableRule(), LabelledCellRule(),
                                   _PASSWORD_ELSEWHERE, _CONFIG_PASSWORD, _PGPASS, _NETRC, *_ATTRIBUTE_PAIRS, _USED_AS,
                                   _COMMAND_SECRET, _SHELL_MODE_SECRET, _PUTTY_KEY, *_SECURE_STRING, _DJANGO_KEY,
                                   SecretDocumentRule(), _PG_PASSWORD_HASH, _MYSQL_PASSWORD_HASH, *PROTOCOL_PASSWORDS, _NAMED_PARAMETER, _ROUTING_KEY, UserlistRule())


class WrappedTailRule(Rule):
    """The rest of a secret wrapped onto the next line (a terminal or an editor broke a long
    line): a line that ends with a replacement marker, followed by a line starting with a run of
    token characters with a digit or a capital in it, loses that run too. Runs shorter than
    eight characters, words and identifiers stay, and (2.7) so do words, names and numbers joined
    by punctuation (``README.md``, ``HTTP/1.1``, ``2026-01-05``: :func:`plain_words`)."""

    # 2.12: a shell line continuation (`export KEY=sk-…\` and the rest) between them too.
    _tail = re.compile(r"\[REDACTED:(?P<rule>[a-z0-9-]+)\](?:[ \t]*\\)?[ \t]*\r?\n(?P<tail>[A-Za-z0-9_+/=.~-]{8,})(?![^\s\"'`,;)\]}|])", re.ASCII)
    _token_like = re.compile(r"[^0-9A-Z]*[0-9A-Z]", re.ASCII)
    _identifier = re.compile(r"[a-z]+(?:[_.-][a-z0-9]+)*|[A-Z][a-z]+(?:[A-Z][a-z]+)*|[A-Z]+(?:_[A-Z]+)*|[0-9]+", re.ASCII)

    def __init__(self) -> None:
        super().__init__(name="wrapped-tail", triggers=("[REDACTED:",), needs=frozenset("\n"), repass=False,
                         description="the continuation of a redacted secret wrapped onto the next line")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._tail.pattern, self._token_like.pattern, self._identifier.pattern,
                *plain_words_fingerprint()]

    def hit_names(self) -> tuple[str, ...]:
        return ()  # counted under the rule whose secret it continues

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        pieces: list[str] = []
        done = 0
        for match in self._tail.finditer(text):
            tail = match.group("tail")
            if not self._token_like.match(tail) or self._identifier.fullmatch(tail) or plain_words(tail):
                continue
            rule = match.group("rule")
            pieces += (text[done: match.start("tail")], marker(rule))
            done = match.end("tail")
            hits[rule] = hits.get(rule, 0) + 1
        if not pieces:
            return text
        pieces.append(text[done:])
        return "".join(pieces)
