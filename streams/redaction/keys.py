"""Secret-like names: which field keys and variable names hold credentials.

Both the event walker (``{"api_key": ...}``) and the text rules (``API_KEY=...``) ask
:func:`name_class`, so a name means the same thing wherever it appears.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import pairwise
from typing import Literal

from streams.redaction.entropy import looks_random

__all__ = ["DESCRIPTIVE_SUFFIXES", "NameClass", "fingerprint", "is_placeholder", "name_class"]

NameClass = Literal["password", "secret", "key"]
"""``password``: any real value is a secret; ``secret``: a credential name (``token``,
``client_secret``); ``key``: a name ending in *key* whose value is secret only when it looks
random (``SIGNING_KEY`` yes, ``sort_key = "created_at"`` no)."""

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

_PASSWORD_WORDS = frozenset({"password", "passwd", "passphrase", "pwd", "passwort", "pw",
                             # 2.5: run-together names of tools and configs (SSHPASS=, redis.conf
                             # requirepass / masterauth, keytool storepass / keypass, PGPASS)
                             "sshpass", "requirepass", "masterauth", "storepass", "keypass", "pgpass",
                             # 2.21: LDAP clients' bind password (nslcd / pam_ldap bindpw, slapd rootpw,
                             # sssd's ldap_default_authtok) and a card's security code
                             "bindpw", "rootpw", "authtok", "cvv", "cvv2", "cvc", "cvc2"})
_SECRET_WORDS = frozenset({
    "secret", "secrets", "token", "credential", "credentials", "cookie", "cookies",
    "authorization", "auth", "apikey", "privatekey", "accesskey", "sessionkey", "clientsecret",
    "secretkey", "authtoken", "accesstoken", "refreshtoken", "jwt", "bearer", "dsn",
    "authkey",  # 2.11: tailscale up --authkey, TS_AUTHKEY
    "passkey",  # 2.21: a private tracker's announce?passkey=
})
# "<qualifier> key" pairs that name a credential outright.
_SECRET_KEY_QUALIFIERS = frozenset({
    "api", "access", "private", "session", "secret", "auth", "master", "encryption",
    "signing", "license", "client", "account", "storage", "subscription", "shared",
})
# "<qualifier> key" pairs that name something other than a credential.
_PLAIN_KEY_QUALIFIERS = frozenset({
    "public", "publishable", "cache", "primary", "foreign", "sort", "partition", "idempotency",
    "hot", "lookup", "dict", "map", "index", "row", "column", "composite", "unique", "group",
    "routing", "shard", "object", "s3", "ssh", "gpg", "pgp", "host", "registry", "dedup",
    "dedupe", "join", "hash", "message", "event", "record", "item", "entry", "translation",
    "i18n", "cursor", "page", "next", "prev", "react", "list", "label", "ref",
})
# A trailing word that makes the whole name describe a secret rather than hold one.
DESCRIPTIVE_SUFFIXES = frozenset({
    "id", "ids", "name", "names", "file", "files", "path", "paths", "dir", "type", "types",
    "kind", "size", "length", "len", "count", "url", "uri", "endpoint", "env", "var", "field",
    "header", "prefix", "suffix", "format", "limit", "limits", "expiry", "expires",
    "expiration", "ttl", "usage", "tokens", "hint", "label", "description", "policy", "mode",
    "method", "version", "provider", "source", "location", "ref", "arn", "enabled", "required",
    "regex", "pattern", "placeholder", "min", "max", "rotation", "strength", "prompt", "manager",
    "store", "vault", "reset", "changed", "match", "matches", "valid", "validator", "input",
    "param", "params", "parameter", "option", "options", "flag", "set", "scope", "scopes",
    "at", "on", "days", "seconds", "minutes", "hours", "ms", "s", "lifetime", "algorithm",
    "alg", "class", "schema", "config", "settings", "error", "errors", "message",
})
# Names ending in a descriptive word that still hold a credential's part (2.4): a GCP service
# account's private_key_id is the id of the private key its JSON file holds, printed nowhere else.
# Its value goes when it looks random, as a *key* name's does.
_SECRET_IDS = frozenset({("private", "key", "id"),
                         # 2.21: the seed `aws iam create-virtual-mfa-device` returns (Base32StringSeed)
                         ("32", "string", "seed")})
# Names whose words say nothing secret but whose value is a credential (2.13): Bitwarden's CLI
# session key, `export BW_SESSION=…` after `bw unlock`. Its value goes when it looks random.
_SECRET_PAIRS = frozenset({("bw", "session")})
# Names that start with words saying nothing secret and end in an account's name (2.17): the
# 1Password CLI's session key, `OP_SESSION_my=…` after `op signin`. Its value goes when it looks random.
_SECRET_LEADS = frozenset({("op", "session")})
# Names of two words neither of which is secret-like alone (2.21): the answer to an account's
# security question, a two-factor recovery code and a PIN code (`pin` alone names a GPIO pin as
# often) log in as a password does; an OTP seed makes every code.
_PASSWORD_PAIRS = frozenset({("security", "answer"), ("security", "answers"), ("recovery", "code"), ("recovery", "codes"),
                             ("backup", "code"), ("backup", "codes"), ("pin", "code")})
_SEED_LEADS = frozenset({"otp", "totp", "hotp", "mfa"})
# A password name run together after what it is for (2.21): dbpass, rootpass, adminpass, smtppass
# (bypass, compass, passenger are no such name; userpass is `user:pass` joined as often: httpx's
# `userpass = username + b":" + password`).
_PASS_LEADS = frozenset({"db", "root", "admin", "smtp", "mysql", "mail", "ldap", "ftp", "sql", "pg", "redis", "app",
                         "bind", "imap", "proxy", "sudo", "vnc", "wifi"})
# Words before "pass" that make it a step or a count, not a password.
_PASS_COUNTS = frozenset({"first", "second", "third", "last", "next", "single", "multi", "one", "two", "each", "per", "by", "fast", "slow", "full", "final", "dry", "test", "tests"})
# Words seen in the common "not a secret" spellings: publicKey, publishable_key, key_id, ...
_NEGATING_WORDS = frozenset({"public", "publishable", "max", "num", "total", "no", "is", "has", "use"})


@lru_cache(maxsize=8192)
def name_class(name: str) -> NameClass | None:
    """Classify a field key or variable name; ``None`` when it is not secret-like."""
    words = [word.lower() for word in _WORDS.findall(name)]
    if not words:
        return None
    if tuple(words[-3:]) in _SECRET_IDS or tuple(words[-2:]) in _SECRET_PAIRS or tuple(words[:2]) in _SECRET_LEADS:
        return "key"
    if words[-1] in DESCRIPTIVE_SUFFIXES or any(word in _NEGATING_WORDS for word in words):
        return None
    # Run-together spellings (PGPASSWORD, SLACKTOKEN, clientsecret) count as well.
    if any(word in _PASSWORD_WORDS or "password" in word or "passwd" in word or "passphrase" in word for word in words):
        return "password"
    if any(pair in _PASSWORD_PAIRS for pair in pairwise(words)) or any(
            word.endswith("pass") and word[:-4] in _PASS_LEADS for word in words):
        return "password"
    if ("pass", "phrase") in pairwise(words):
        return "password"  # 2.19: pass_phrase (OCI's config file), passPhrase
    if len(words) > 1 and words[-1] == "pass" and words[-2] not in _PASS_COUNTS:
        # DB_PASS, SMTP_PASS, ansible_become_pass, dbPass; a bare "pass" is a test count
        # ({"pass": 12}) and first_pass a step of an algorithm.
        return "password"
    if any(word in _SECRET_WORDS or "secret" in word or word.endswith(("token", "apikey")) for word in words):
        return "secret"
    for before, word in pairwise(words):
        if (word == "key" and before in _SECRET_KEY_QUALIFIERS) or (word == "seed" and before in _SEED_LEADS):
            return "secret"
    if words[-1] in ("key", "keys"):
        qualifier = words[-2] if len(words) > 1 else ""
        return None if qualifier in _PLAIN_KEY_QUALIFIERS else "key"
    return None


_PLACEHOLDER_WORDS = frozenset({
    "", "none", "null", "nil", "true", "false", "undefined", "str", "string", "int", "bool",
    "bytes", "optional", "secretstr", "required", "redacted", "hidden", "masked", "unset",
    "empty", "todo", "tbd", "n/a", "na", "xxx", "xxxx", "changeit_later", "env", "environ",
    "secret", "password", "token", "***", "any", "object", "dict", "list", "text", "uuid",
})
_MASK_CHARS = frozenset("*xX.#•?-_ ")
_REFERENCE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[a-z_][a-z0-9_]*", re.ASCII)
_REFERENCE_WORDS = ("pass", "pwd", "secret", "token", "key", "cred", "auth")


def is_placeholder(value: str, *, quoted: bool) -> bool:
    """True when ``value`` stands for a secret without being one.

    Placeholders are template references (``${DB_PASSWORD}``, ``%(password)s``, ``<token>``),
    masks (``********``), type names and literals (``str``, ``None``) and, for unquoted
    values, code references (``settings.DB_PASSWORD``, ``db_password``).
    """
    stripped = value.strip()
    if stripped.lower() in _PLACEHOLDER_WORDS or set(stripped) <= _MASK_CHARS:
        return True
    if stripped[0] == "%" and _PERCENT_ESCAPED.fullmatch(stripped) and not _WINDOWS_VARIABLE.match(stripped):
        # 2.23: a value percent-encoded from its first character (a form's or a query's
        # password=%40Secr3t…, a password that starts with a symbol) is no template (%(pw)s, %s, %PW%).
        return False
    if stripped[0] in "$%{<[" or stripped.startswith(("process.env", "os.environ", "getenv")):
        return True
    if quoted:
        return False
    if "(" in stripped or "[" in stripped:
        return True
    if _REFERENCE.fullmatch(stripped):
        # A dotted name is an attribute access; a lowercase snake name containing a secret word
        # is a variable holding the secret (password=db_password), not the secret itself.
        if "." in stripped:
            # settings.DB_PASSWORD is an attribute access; pk.eyJ1Ijoi... and hvs.llAj7n4Ju… (2.5)
            # are dotted tokens.
            return all(len(part) <= 32 and not _token_part(part) for part in stripped.split("."))
        # A variable is a word or words joined by "_", with at most one digit at its end
        # (db_password, token2); a digit inside or a run of them at the end is a password a
        # person made from a word (s3cr3tpass, passw0rd1, mypass123), which read as one (2.8).
        # 2.14: a word glued to a generated run (esecret_cjpx…5zcsfw4, an Anyscale key) is a key.
        return (any(word in stripped for word in _REFERENCE_WORDS) and not _MADE_FROM_A_WORD.fullmatch(stripped)
                and not any(len(part) >= 16 and looks_random(part) for part in stripped.split("_")))
    return False


_PERCENT_ESCAPED = re.compile(r"%[0-9A-Fa-f]{2}[A-Za-z0-9%._~+!*-]{4,}", re.ASCII)
_WINDOWS_VARIABLE = re.compile(r"%[A-Za-z_][A-Za-z0-9_]*%", re.ASCII)
_MADE_FROM_A_WORD = re.compile(r"[a-z]*(?:[0-9]+[a-z]+)+[0-9]*|[a-z]+[0-9]{2,}", re.ASCII)


def _token_part(part: str) -> bool:
    """A run of 12+ letters and digits mixing both cases and digits: generated, not a name."""
    return (len(part) >= 12 and part.isalnum() and sum(c.isdigit() for c in part) >= 2
            and any(c.isupper() for c in part) and any(c.islower() for c in part))


def fingerprint() -> list[list[str]]:
    """The word lists behind :func:`name_class` and :func:`is_placeholder`, for the policy hash."""
    lists = (
        _PASSWORD_WORDS, _SECRET_WORDS, _SECRET_KEY_QUALIFIERS, _PLAIN_KEY_QUALIFIERS,
        DESCRIPTIVE_SUFFIXES, _NEGATING_WORDS, _PLACEHOLDER_WORDS, _MASK_CHARS, _PASS_COUNTS, _SEED_LEADS, _PASS_LEADS,
    )
    return [sorted(words) for words in lists] + [sorted(" ".join(words) for words in _SECRET_IDS | _SECRET_PAIRS | _PASSWORD_PAIRS)] + [[_WORDS.pattern, _REFERENCE.pattern, _MADE_FROM_A_WORD.pattern, _PERCENT_ESCAPED.pattern, _WINDOWS_VARIABLE.pattern, *_REFERENCE_WORDS]]
