"""Secrets a file format, an encoding or a library call marks as such (policy 2.21).

A sixteenth adversarial round seeded 298 secrets into real sessions and found these kept under
2.20: key material with a shape or an opening of its own (a .NET RSA key's XML private members,
the base64 of a PEM or OpenSSH private key or of a Tor onion service key, an LND macaroon, a
BitLocker recovery password), capability keys in a log-intake or webhook URL's path (Datadog,
Loggly, Sumo Logic, Home Assistant), credential files of a layout no name reads (a ~/.netrc
entry's `account`, a Kafka JAAS file's `user_NAME="…"`, Netscape's cookies.txt, a cookie string
with its attributes, Google Authenticator's state file), a name / value pair with members between
(`az webapp config appsettings list`), values a key-value store prints for a secret-like key
(`etcdctl get`, `consul kv get`, redis-cli's `GET`), and literals code hands to a call that takes
a credential (`btoa('user:pw')`, `CURLOPT_USERPWD`, `simple_bind_s`, `keyring.set_password`,
`pyotp.TOTP`, `oathtool`, an Ethereum wallet's private key). Each reading starts at a literal of
its own and reads a bounded value.
"""

from __future__ import annotations

import base64
import binascii
import re

from streams.redaction.assignments import bare_secret
from streams.redaction.base import RegexRule, Rule, Scan, replace_spans
from streams.redaction.context import named_value_rule, secret_value
from streams.redaction.entropy import looks_random
from streams.redaction.keys import is_placeholder, name_class

__all__ = ["FORMAT_RULES", "SHAPED_RULES"]

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_END = r"(?![A-Za-z0-9_-])"


def _value(match: re.Match[str]) -> bool:
    return secret_value(match.group("value"))


# ------------------------------------------------------------------ key material

# .NET's RSA.ToXmlString(true): the private exponent and the CRT members, only ever inside an
# <RSAKeyValue> (the <Modulus> and <Exponent> are the public key's and stay).
_RSA_XML = re.compile(r"<(?P<tag>D|P|Q|DP|DQ|InverseQ)>(?P<value>[A-Za-z0-9+/=\s]{16,8192})</(?P=tag)>", re.ASCII)


def _in_rsa_key(match: re.Match[str]) -> bool:
    return match.string.rfind("<RSAKeyValue>", max(0, match.start() - 16384), match.start()) != -1


# Openings of the base64 of a key file: a PEM block (`-----BEGIN `, then its label, which must
# name a private key: a certificate's base64 opens alike), OpenSSH's binary private key
# (`openssh-key-v1`, which no public key holds) and a Tor onion service's secret key file.
_KEY_FILE_OPENINGS = ("LS0tLS1CRUdJTi", "b3BlbnNzaC1rZXktdjE", "PT0gZWQyNTUxOXYxLXNlY3JldD")
_KEY_FILE_B64 = re.compile(r"(?<![A-Za-z0-9+/])(?:LS0tLS1CRUdJTi|b3BlbnNzaC1rZXktdjE|PT0gZWQyNTUxOXYxLXNlY3JldD)[A-Za-z0-9+/]{24,}={0,2}",
                           re.ASCII)
_B64_LINE = re.compile(r"\r?\n[ \t]*(?P<line>[A-Za-z0-9+/]+={0,2})(?=[ \t]*(?:\r?\n|\Z))", re.ASCII)


class KeyFileBase64Rule(Rule):
    """The base64 of a private key's file: one line, or `base64`'s 76-column (`openssl base64`'s
    64) lines, each as wide as the first but the last."""

    def __init__(self) -> None:
        super().__init__(name="private-key", triggers=_KEY_FILE_OPENINGS,
                         description="the base64 of a PEM / OpenSSH private key or a Tor onion service key file (2.21)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _KEY_FILE_B64.pattern, _B64_LINE.pattern, _private_pem.__qualname__]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found = []
        for match in _KEY_FILE_B64.finditer(text):
            if not _private_pem(match.group(0)):
                continue
            end, width = match.end(), len(match.group(0))
            while width in (64, 76) and not text[match.start():end].endswith("="):
                line = _B64_LINE.match(text, end)
                if line is None or len(line.group("line")) > width:
                    break
                end, width = line.end("line"), len(line.group("line"))
            found.append((match.start(), end, self.name))
        return replace_spans(text, found, hits) if found else text


def _private_pem(token: str) -> bool:
    if not token.startswith("LS0t"):
        return True  # openssh-key-v1 and Tor's "== ed25519v1-secret" say what they are
    try:
        head = base64.b64decode(token[:96], validate=True)
    except (binascii.Error, ValueError):
        return False
    return b"PRIVATE KEY" in head or b"OpenVPN Static key" in head


# LND's macaroons (admin.macaroon as `lncli` and REST clients take it): a version 2 macaroon whose
# location is "lnd", in hex or base64. It is the node's bearer credential.
_MACAROON = re.compile(r"(?<![A-Za-z0-9+/])(?:0201036c6e64[0-9a-fA-F]{90,}|AgEDbG5k[A-Za-z0-9+/_-]{60,}={0,2})(?![A-Za-z0-9+/=_-])",
                       re.ASCII)


# A BitLocker recovery password: eight groups of six digits, each a multiple of 11 below 720896
# (manage-bde and the recovery screen print it so; a random run of that layout passes 1 in 2e8).
# The pattern starts at the first dash, a literal the engine skips ahead to in C (a digit class
# first cost 14 times as much over the real transcripts); the group before it is checked apart.
_BITLOCKER = re.compile(r"-[0-9]{6}-[0-9]{6}-[0-9]{6}-[0-9]{6}-[0-9]{6}-[0-9]{6}-[0-9]{6}(?![0-9-])", re.ASCII)


class BitLockerRule(Rule):
    def __init__(self) -> None:
        super().__init__(name="bitlocker-recovery-key", needs=frozenset("-"),
                         description="a BitLocker recovery password: 8 groups of 6 digits, each a multiple of 11 (2.21)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _BITLOCKER.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found = []
        for match in _BITLOCKER.finditer(text):
            start = match.start() - 6
            first = text[max(0, start): match.start()]
            if start < 0 or not (first.isascii() and first.isdigit()) or (start and (text[start - 1].isdigit() or text[start - 1] == "-")):
                continue
            if all(int(group) % 11 == 0 and int(group) < 720896 for group in text[start: match.end()].split("-")):
                found.append((start, match.end(), self.name))
        return replace_spans(text, found, hits) if found else text


# An Ethereum account's private key handed to what signs with it: Hardhat / Foundry's
# `accounts: ["0x…"]`, ethers' `new Wallet("0x…")`, web3's `from_key` / `privateKeyToAccount`.
_ETH_CALL = re.compile(r"(?:\bWallet|\.from_key|privateKeyToAccount|fromPrivateKey)\([ \t]*(?P<q>['\"`])(?P<value>(?:0x)?[0-9a-fA-F]{64})(?P=q)",
                       re.ASCII)
_ETH_ACCOUNTS = re.compile(r"\baccounts[\"']?[ \t]*[:=][ \t]*\[(?P<body>[^\[\]]{66,4096})\]", re.ASCII)
_ETH_KEY = re.compile(r"(?P<q>['\"`])(?P<value>(?:0x)?[0-9a-fA-F]{64})(?P=q)", re.ASCII)


class EthereumAccountsRule(Rule):
    def __init__(self) -> None:
        super().__init__(name="private-key", triggers=("accounts",),
                         description="Ethereum private keys in a Hardhat / Foundry network's accounts: [\"0x…\"] (2.21)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _ETH_ACCOUNTS.pattern, _ETH_KEY.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found = [(block.start("body") + key.start("value"), block.start("body") + key.end("value"), self.name)
                 for block in _ETH_ACCOUNTS.finditer(text) for key in _ETH_KEY.finditer(block.group("body"))]
        return replace_spans(text, found, hits) if found else text


# ------------------------------------------------------------------ URLs

def _random_or_long(match: re.Match[str]) -> bool:
    value = match.group("value")
    return looks_random(value) or (len(value) >= 24 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value))


_PATHS = tuple(
    RegexRule(name="url-token", lower_triggers=(trigger,), group="value", description=f"{what} (2.21)", check=check,
              pattern=re.compile(pattern + _END, re.ASCII | re.IGNORECASE))
    for trigger, what, pattern, check in (
        ("datadoghq", "a Datadog API key in a log intake URL's path",
         r"datadoghq\.(?:com|eu)/(?:v1/input|api/v2/logs)/(?P<value>[0-9a-f]{32})", None),
        ("loggly.com", "a Loggly customer token in its intake URL", r"loggly\.com/(?:inputs|bulk)/(?P<value>" + _UUID + ")", None),
        ("/receiver/v1/", "a Sumo Logic HTTP source's token", r"/receiver/v1/(?:http|otlp)/(?P<value>[A-Za-z0-9_=-]{40,512})", None),
        ("/api/webhook/", "a Home Assistant webhook id", r"/api/webhook/(?P<value>[A-Za-z0-9_-]{16,128})", _random_or_long),
    )
)


# ------------------------------------------------------------------ credential files

# ~/.netrc's `account` token: a second password some servers ask for (2.9 read its `password`).
_NETRC_ACCOUNT = re.compile(r"machine[ \t]+[^\s\"'`]+(?:\s+(?:login|password|port)[ \t]+\S+){0,3}\s+account[ \t]+(?P<value>\S+)",
                            re.ASCII | re.IGNORECASE)

# Kafka's / ZooKeeper's PlainLoginModule: `user_NAME="PASSWORD"` defines each user a broker accepts.
_JAAS_USER = re.compile(r"user_(?<![A-Za-z0-9_]user_)[A-Za-z0-9_.-]{1,64}[ \t]*=[ \t]*\"(?P<value>[^\"\r\n]{1,256})\"", re.ASCII)


def _jaas_user(match: re.Match[str]) -> bool:
    return "LoginModule" in match.string[max(0, match.start() - 2048): match.start()] and _value(match)


# Netscape's cookies.txt (curl -c, wget --save-cookies, yt-dlp, browser exports): seven tab-separated
# fields, the value last. The value ends in a character that is no blank (a lazy value looked
# over the blanks after each of its characters: quadratic in a line of blanks).
_COOKIES_TXT = re.compile(r"^(?:#HttpOnly_)?[^\s#][^\t\r\n]*\t(?:TRUE|FALSE)\t[^\t\r\n]*\t(?:TRUE|FALSE)\t-?[0-9]+\t[^\t\r\n]+\t"
                          r"(?P<value>[^\t\r\n]*[^\s])[ \t]*\r?$", re.ASCII | re.MULTILINE)
# A cookie written as its header holds it, name=value and attributes (document.cookie, a
# Set-Cookie value set in code, a browser's or a proxy's listing).
_COOKIE_STRING = re.compile(r"(?<![A-Za-z0-9_.%-])(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})=(?P<value>[^;\s\"'`=,]{8,4096}={0,2});[ \t]*"
                            r"(?:path=|domain=|expires=|max-age=|httponly\b|secure\b|samesite=)", re.ASCII | re.IGNORECASE)


def _cookie(match: re.Match[str]) -> bool:
    value = match.group("value")
    if len(value) >= 16:
        return not value.isdigit()
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


# Google Authenticator's PAM state file (~/.google_authenticator): the base32 seed, option lines
# starting `" `, and the emergency scratch codes, eight digits each.
_GOOGLE_AUTH_FILE = re.compile(r"(?<![A-Za-z0-9])(?P<seed>[A-Z2-7]{16,128})[ \t]*\r?\n(?P<options>(?:[^\r\n]{0,16}\"[ \t]+[A-Z_]{4,}[^\r\n]*\r?\n){1,8})"
                               r"(?P<codes>(?:[^\r\n0-9]{0,16}[0-9]{8}[ \t]*(?:\r?\n|\Z)){0,10})", re.ASCII)


class GoogleAuthenticatorFileRule(Rule):
    def __init__(self) -> None:
        super().__init__(name="secret-output", triggers=('" RATE_LIMIT', '" TOTP_AUTH', '" WINDOW_SIZE', '" DISALLOW_REUSE', '" HOTP_COUNTER'),
                         description="a ~/.google_authenticator file's seed and scratch codes (2.21)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _GOOGLE_AUTH_FILE.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        found = []
        for match in _GOOGLE_AUTH_FILE.finditer(text):
            found.append((match.start("seed"), match.end("seed"), self.name))
            offset = match.start("codes")
            found += [(offset + code.start(), offset + code.end(), self.name) for code in re.finditer(r"[0-9]{8}", match.group("codes"))]
        return replace_spans(text, found, hits) if found else text


# A name / value object with other members between (`az webapp config appsettings list`:
# name, slotSetting, value; 2.8 read the two side by side).
_NAME_MEMBERS_VALUE = re.compile(r"\"name\"[ \t]*:[ \t]*\"(?P<name>[^\"\r\n]{1,64})\"[ \t]*,(?:\s*\"[A-Za-z_]{1,32}\"[ \t]*:[ \t]*"
                                 r"(?:true|false|null|-?[0-9.]{1,20}|\"[^\"\r\n]{0,64}\")[ \t]*,){1,3}\s*\"value\"[ \t]*:[ \t]*"
                                 r"\"(?P<value>[^\"\r\n]{1,1024})\"", re.ASCII | re.IGNORECASE)


def _named_member(match: re.Match[str]) -> bool:
    return named_value_rule(match.group("name"), match.group("value")) is not None and _value(match)


# Names 2.21 reads as secret-like that hold none of the assignment rule's keywords (`pass`, `secret`,
# `token`, `key`, …): a card's security code, a security question's answer, recovery codes, a PIN
# code, an OTP seed, LDAP's bindpw. The value is judged as under any secret-like name.
_NEW_NAMES = ("bindpw", "rootpw", "cvv", "cvc", "answer", "recovery", "backup", "seed", "pin_code", "pincode", "pin-code")
_NAMED_AFTER = re.compile(r"(?:bindpw|rootpw|cvv2?|cvc2?|answers?|recovery[_-]?codes?|backup[_-]?codes?|pin[_-]?code|seed)(?P<close>\\?[\"']?)[ \t]*"
                          r"(?::=|=>|=(?![=~])|:(?![:/\\]))[ \t]*(?:\\?\"(?P<dq>[^\"\\\r\n]{1,512})\\?\"|'(?P<sq>[^'\r\n]{1,512})'"
                          r"|(?P<bare>[^\s\"'`,;<>|{}()]{1,512}))", re.ASCII | re.IGNORECASE)
_NAME_BEFORE = re.compile(r"[A-Za-z0-9_.-]{0,32}\Z", re.ASCII)
_BIND_LINE = re.compile(r"(?:bindpw|rootpw)[ \t]+(?P<value>[^\s]{1,256})[ \t]*\r?$", re.ASCII | re.IGNORECASE | re.MULTILINE)


def _starts_line(text: str, position: int) -> bool:
    """Whether only blanks stand before ``position`` on its line (looked back at most 64 characters)."""
    before = text[max(0, position - 64): position]
    head = before.rsplit("\n", 1)[-1]
    return not head.strip() and (len(head) < len(before) or position <= 64)


class NewNamesRule(Rule):
    def __init__(self) -> None:
        super().__init__(name="password-assignment", lower_triggers=_NEW_NAMES,
                         description="values under cvv / security_answer / recovery_code / otp_seed / bindpw names, "
                                     "and nslcd's / slapd's `bindpw X` lines (2.21)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _NAMED_AFTER.pattern, _NAME_BEFORE.pattern, _BIND_LINE.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text, lowered = scan.text, scan.lower()
        found: list[tuple[int, int, str]] = []
        for keyword in self.lower_triggers:
            position = lowered.find(keyword)
            while position != -1:
                self._at(text, position, found)
                position = lowered.find(keyword, position + 1)
        return replace_spans(text, found, hits) if found else text

    def _at(self, text: str, position: int, found: list[tuple[int, int, str]]) -> None:
        line = _BIND_LINE.match(text, position)
        if line is not None and _starts_line(text, position) and _value(line):
            found.append((line.start("value"), line.end("value"), "password-assignment"))
            return
        match = _NAMED_AFTER.match(text, position)
        if match is None:
            return
        head = _NAME_BEFORE.search(text, max(0, position - 32), position)
        name_start = head.start() if head is not None else position
        if name_start and text[name_start - 1].isalnum():
            return
        name = text[name_start: match.end("close") - len(match.group("close"))]
        group = "dq" if match.group("dq") is not None else "sq" if match.group("sq") is not None else "bare"
        rule = named_value_rule(name, match.group(group))
        if rule is not None:
            found.append((match.start(group), match.end(group), rule))


# An ODBC / ADO connection string's braced value (`Pwd={p@ss;w0rd}`: braces let a password hold `;`),
# which the placeholder test reads as a template; a name in braces (`{password}`) still is one.
_BRACED_PASSWORD = re.compile(r"(?<![A-Za-z0-9_])(?:pwd|password)[ \t]*=[ \t]*\{(?P<value>(?:[^}\r\n]|\}\}){1,256})\}(?=[ \t]*(?:;|\"|'|$))",
                              re.ASCII | re.IGNORECASE | re.MULTILINE)


# What braces hold in a template or an f-string: a name, an attribute, an item or a call, a conversion
# and a format (`{password}`, `{cfg.db_password!r}`, `{pw:>10}`, `{ quote_plus(pw) }`), or a format
# string's field number (`"Server={0};Password={1};".format(...)`, .NET's String.Format).
_TEMPLATE = re.compile(r"[ \t]*(?:[0-9]{1,2}|[A-Za-z_][A-Za-z0-9_.]*(?:\[[^\]]*\]|\((?:[A-Za-z_'\"][^()]*)?\))*)[ \t]*(?:![rsa])?(?::[^{}]*)?"
                       r"|[{$%].*", re.ASCII | re.DOTALL)


def _braced(match: re.Match[str]) -> bool:
    return _TEMPLATE.fullmatch(match.group("value")) is None and _value(match)


# An auth object that says its scheme and then holds the credential (Postman's and many API clients'
# `"auth": {"type": "bearer", "value": "…"}`), members between allowed.
_TYPED_AUTH = re.compile(r"\"type\"[ \t]*:[ \t]*\"(?:bearer|token|apikey|api[_-]key|oauth2?|jwt)\"[ \t]*,(?:\s*\"[A-Za-z_]{1,32}\"[ \t]*:[ \t]*"
                         r"(?:true|false|null|-?[0-9.]{1,20}|\"[^\"\r\n]{0,64}\")[ \t]*,){0,3}\s*\"(?:value|token|key|credentials?)\"[ \t]*:[ \t]*"
                         r"\"(?P<value>[^\"\s]{8,4096})\"", re.ASCII | re.IGNORECASE)


def _typed_auth(match: re.Match[str]) -> bool:
    return _value(match) and (_letters_and_digits(match) or looks_random(match.group("value")))


# A two-factor recovery code named in a sentence (Bitwarden's 32 characters: "recovery code: X").
_RECOVERY_CODE = re.compile(r"recovery[ \t]+code[ \t]*(?:is[ \t]+|was[ \t]+|[:=][ \t]*)[`'\"*]{0,2}(?P<value>[A-Za-z0-9]{16,64})(?![A-Za-z0-9])",
                            re.ASCII | re.IGNORECASE)


def _letters_and_digits(match: re.Match[str]) -> bool:
    value = match.group("value")
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


# Short password words with another language's "is": `PW lautet X` (German; "pw is" and "pw:" were
# read), Dutch `ww:` / `ww is` (wachtwoord), French `code d'accès est X`. The value is judged as a
# tool's bare output is: a letter, a digit and mixed case or a symbol.
_SHORT_ELSEWHERE = re.compile(
    r"(?<![A-Za-z0-9_])(?:pwd?[ \t]+(?:lautet|ist|est|es|è|é|är|er|jest|je|on)|ww(?:[ \t]*[:=]|[ \t]+is)"
    r"|code[ \t]+d['’]acc[eè]s(?:[ \t]*:|[ \t]+(?:est|=)))[ \t]+[`'\"*]{0,2}(?P<value>[^\s`'\"*]{6,128}?)[`'\"*]{0,2}[.,;!?]?(?=\s|$)",
    re.IGNORECASE)


def _short_elsewhere(match: re.Match[str]) -> bool:
    return bare_secret(match.group("value"))


# ------------------------------------------------------------------ key-value stores

def _stored_secret(match: re.Match[str]) -> bool:
    """A key-value store's answer for a key whose last part is secret-like: any value (a
    password name) or one that looks random or has a letter and a digit (another secret name)."""
    kind = name_class(re.split(r"[/:.]", match.group("key").strip("/"))[-1])
    value = match.group("value").strip()
    if kind is None or not value or value.startswith("[REDACTED:") or is_placeholder(value, quoted=True):
        return False
    return kind == "password" or looks_random(value) or bare_secret(value)


def _redis_get(match: re.Match[str]) -> bool:
    # What stands before GET on its line, up to 256 characters (a prompt or a redis-cli command line):
    # a bounded look back keeps a line of many GETs linear.
    text = match.string
    before = text[max(0, match.start() - 256): match.start()].rsplit("\n", 1)[-1]
    return (before.endswith("> ") or "redis-cli" in before) and _stored_secret(match)


_STORES = (
    # etcdctl get KEY prints the key, then its value (--print-value-only: the value alone).
    RegexRule(name="secret-output", lower_triggers=("etcdctl",), anchored=True, group="value", check=_stored_secret,
              description="etcdctl get KEY's value for a secret-like KEY (2.21)",
              pattern=re.compile(r"etcdctl[ \t][^\r\n]{0,200}?\bget[ \t]+['\"]?(?P<key>[^\s'\"]{1,256})['\"]?[^\r\n]{0,200}\r?\n"
                                 r"(?:[ \t]*(?P=key)[ \t]*\r?\n)?[ \t]*(?P<value>[^\s]{1,512})[ \t]*\r?$", re.ASCII | re.MULTILINE)),
    RegexRule(name="secret-output", lower_triggers=("consul kv get",), anchored=True, group="value", check=_stored_secret,
              description="consul kv get KEY's value for a secret-like KEY (2.21)",
              pattern=re.compile(r"consul[ \t]+kv[ \t]+get(?:[ \t]+-[^\s]+)*[ \t]+['\"]?(?P<key>[^\s'\"-][^\s'\"]{0,255})['\"]?[ \t]*\r?\n"
                                 r"[ \t]*(?P<value>[^\s]{1,512})[ \t]*\r?$", re.ASCII | re.MULTILINE | re.IGNORECASE)),
    # redis-cli's GET at its prompt (127.0.0.1:6379>, redis>) or on its command line, the reply quoted or bare.
    RegexRule(name="secret-output", lower_triggers=("get ",), anchored=True, group="value", check=_redis_get,
              description="redis-cli GET KEY's reply for a secret-like KEY (2.21)",
              pattern=re.compile(r"get[ \t]+(?P<key>[A-Za-z0-9_:.{}-]{1,256})[ \t]*\r?\n[ \t]*(?:\(string\)[ \t]*)?\"?(?P<value>[^\s\"]{1,512})\"?"
                                 r"[ \t]*\r?$", re.ASCII | re.MULTILINE | re.IGNORECASE)),
)


# ------------------------------------------------------------------ code

_Q = r"b?(?P<q>['\"])"
_ARG = r"(?:'[^'\r\n]{1,256}'|\"[^\"\r\n]{1,256}\"|[^,()'\"\r\n]{1,128})"


def _quoted(match: re.Match[str]) -> bool:
    value = match.group("value")
    return not is_placeholder(value, quoted=True) and "${" not in value and not value.startswith(("$", "%", "{{", "#{"))


def _random_value(match: re.Match[str]) -> bool:
    return looks_random(match.group("value"))


def _user_password(match: re.Match[str]) -> bool:
    # Any string may be encoded: a password is one, not words (`'hello:world-of-words'`).
    return _quoted(match) and (bare_secret(match.group("value")) or looks_random(match.group("value")))


_CALLS = (
    # `user:password` given to what makes a Basic header of it: btoa, Buffer.from, b64encode,
    # Go's EncodeToString, Ruby's encode64, PHP's CURLOPT_USERPWD.
    RegexRule(name="password-assignment", lower_triggers=("btoa(", "buffer.from(", "b64encode(", "encodetostring(", "encode64(",
                                                          "curlopt_userpwd"),
              anchored=True, group="value", check=_user_password,
              description="the password of a user:password literal base64-encoded or given to CURLOPT_USERPWD (2.21)",
              pattern=re.compile(r"(?:btoa\(|Buffer\.from\(|b64encode\(|EncodeToString\(\[\]byte\(|encode64\(|CURLOPT_USERPWD[ \t]*,)[ \t]*"
                                 + _Q + r"(?P<user>[^'\":\s]{1,64}):(?P<value>[^'\"\s]{1,128})(?P=q)", re.ASCII | re.IGNORECASE)),
    # LDAP binds (python-ldap's simple_bind_s(DN, PW), Perl / PHP bind) and keyring.set_password(SERVICE, USER, PW).
    RegexRule(name="password-assignment", lower_triggers=("bind_s(", "simple_bind(", "ldap_bind("), anchored=True, group="value", check=_quoted,
              description="simple_bind_s / ldap_bind(CONN, DN, \"PASSWORD\") (2.21)",
              pattern=re.compile(r"(?:simple_bind_s|simple_bind|bind_s|ldap_bind)\((?:[ \t]*\$?[A-Za-z_][A-Za-z0-9_]*[ \t]*,)?[ \t]*"
                                 + _ARG + r"[ \t]*,[ \t]*" + _Q + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)", re.ASCII | re.IGNORECASE)),
    RegexRule(name="password-assignment", lower_triggers=("set_password(",), anchored=True, group="value", check=_quoted,
              description="keyring.set_password(SERVICE, USER, \"PASSWORD\") (2.21)",
              pattern=re.compile(r"set_password\([ \t]*" + _ARG + r"[ \t]*,[ \t]*" + _ARG + r"[ \t]*,[ \t]*" + _Q
                                 + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)", re.ASCII | re.IGNORECASE)),
    # A TOTP / HOTP seed given to the library or the tool that makes codes of it.
    RegexRule(name="secret-in-prose", lower_triggers=("pyotp.", "otplib."), anchored=True, group="value",
              description="a TOTP / HOTP seed given to pyotp.TOTP / HOTP or otplib (2.21)",
              pattern=re.compile(r"(?:pyotp\.(?:TOTP|HOTP)\(|otplib\.[A-Za-z.]{1,40}\()[ \t]*(?P<q>['\"`])(?P<value>[A-Za-z2-7]{16,128}=*)(?P=q)",
                                 re.ASCII)),
    # Its options are bounded: a line of `-oathtool` options was read to its end from each mention.
    RegexRule(name="secret-in-prose", lower_triggers=("oathtool",), anchored=True, group="value",
              description="a TOTP / HOTP seed on oathtool's command line (base32 after -b, or hex) (2.21)",
              pattern=re.compile(r"oathtool\b(?:[ \t]+-[-A-Za-z0-9=]{1,64}){0,8}[ \t]+['\"]?(?P<value>[A-Z2-7]{16,128}=*|[0-9a-fA-F]{20,128})['\"]?"
                                 r"(?![A-Za-z0-9])", re.ASCII)),
    # An API client constructed with its key as the first literal (cohere.Client("…"),
    # DeepgramClient("…")): a random one; a URL, a path or a name is none.
    RegexRule(name="secret-assignment", triggers=("Client(",), group="value", check=_random_value,
              description="a random literal as an API client's first argument (SomeClient(\"KEY\")) (2.21)",
              pattern=re.compile(r"(?<![A-Za-z0-9_])(?:[A-Z][A-Za-z0-9]{0,40})?Client\([ \t]*(?P<q>['\"])(?P<value>[A-Za-z0-9_-]{32,256})(?P=q)[ \t]*[,)]",
                                 re.ASCII)),
    RegexRule(name="private-key", triggers=("Wallet(", "from_key(", "privateKeyToAccount(", "fromPrivateKey("), group="value",
              description="an Ethereum private key given to new Wallet / from_key / privateKeyToAccount (2.21)", pattern=_ETH_CALL),
)


SHAPED_RULES: tuple[Rule, ...] = (
    RegexRule(name="private-key", triggers=("<RSAKeyValue>",), group="value", check=_in_rsa_key, pattern=_RSA_XML,
              description="a .NET RSA key's XML private members (<D>, <P>, <Q>, <DP>, <DQ>, <InverseQ>) (2.21)"),
    KeyFileBase64Rule(),
    RegexRule(name="lnd-macaroon", triggers=("0201036c6e64", "AgEDbG5k"), pattern=_MACAROON,
              description="an LND macaroon (version 2, location lnd) in hex or base64 (2.21)"),
    BitLockerRule(),
)
"""2.21's key material known by its own shape: applied with the token formats, before any reading by a
name (a `Password:` label over a BitLocker key names no password of its own)."""

FORMAT_RULES: tuple[Rule, ...] = (
    EthereumAccountsRule(),
    *_PATHS,
    RegexRule(name="password-assignment", lower_triggers=("machine",), anchored=True, group="value", check=_value, pattern=_NETRC_ACCOUNT,
              description="a ~/.netrc entry's account (machine HOST … account X) (2.21)"),
    RegexRule(name="password-assignment", triggers=("user_",), group="value", check=_jaas_user, pattern=_JAAS_USER,
              description="a JAAS PlainLoginModule's user_NAME=\"PASSWORD\" (2.21)"),
    RegexRule(name="session-cookie", triggers=("\tTRUE\t", "\tFALSE\t"), group="value", check=_cookie, pattern=_COOKIES_TXT,
              description="a Netscape cookies.txt line's value (2.21)"),
    RegexRule(name="session-cookie", lower_triggers=("; path=", ";path=", "; domain=", "; expires=", "; max-age=", "; httponly", "; secure",
                                                     "; samesite="),
              group="value", check=_cookie, pattern=_COOKIE_STRING,
              description="a cookie string's value before its attributes (name=value; Path=/; HttpOnly) (2.21)"),
    GoogleAuthenticatorFileRule(),
    NewNamesRule(),
    RegexRule(name="password-in-prose", lower_triggers=("pw", "ww", "code d"), anchored=True, group="value", check=_short_elsewhere,
              pattern=_SHORT_ELSEWHERE, description="pw lautet / ist / est X, Dutch ww: X, French code d'accès est X (2.21)"),
    RegexRule(name="secret-in-prose", lower_triggers=("recovery code",), anchored=True, group="value", check=_letters_and_digits,
              pattern=_RECOVERY_CODE, description="a recovery code after \"recovery code:\" / is (2.21)"),
    RegexRule(name="password-assignment", lower_triggers=("pwd", "password"), anchored=True, group="value", check=_braced,
              pattern=_BRACED_PASSWORD,
              description="an ODBC / ADO connection string's braced Pwd={…} / Password={…} (2.21)"),
    RegexRule(name="secret-assignment", lower_triggers=('"type"',), anchored=True, group="value", check=_typed_auth, pattern=_TYPED_AUTH,
              description="an auth object's credential after its \"type\": \"bearer\" / \"apikey\" (2.21)"),
    RegexRule(name="password-assignment", lower_triggers=('"name"',), anchored=True, group="value", check=_named_member,
              pattern=_NAME_MEMBERS_VALUE,
              description="a {\"name\": SECRET, …, \"value\": X} object with members between (2.21)"),
    *_STORES,
    *_CALLS,
)
"""2.21's readings by a format's or a call's own marks, in application order."""
