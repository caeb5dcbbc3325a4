"""Secrets a URL's format or a neighbouring sentence names (policy 2.20).

A fifteenth adversarial round found these kept under 2.19: keys that services put in a URL's path
(a Slack-shaped webhook on another host, Teams' legacy webhook and the /V2 signature newer ones end
in, Rocket.Chat, Feishu / Lark, Flock, PagerDuty, Netlify and Vercel hooks, a path segment after
`/secret/` or `/token/`), capability keys in a query (Dropbox's `rlkey=`, a `;jsessionid=`),
a query parameter whose name is written percent-encoded (`?api%5Fkey=`, `api%255Fkey` encoded
twice), a password given in the sentence after the one naming it ("I rotated the db password.
The new one is X"), one before its word across a dash ("X — that's the new admin password"), and
bare `user:password` lines under a line naming credentials or after a host. Each reading starts at
a literal of its own or behind one.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from streams.redaction.assignments import PasswordBeforeRule, bare_secret
from streams.redaction.base import RegexRule, Rule, Scan, replace_spans
from streams.redaction.entropy import looks_random
from streams.redaction.keys import is_placeholder, name_class

__all__ = ["NEARBY_RULES"]

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUID_ONLY = re.compile(_UUID, re.ASCII)
_END = r"(?![A-Za-z0-9_-])"


def _random_value(match: re.Match[str]) -> bool:
    return looks_random(match.group("value"))


def _random_segment(match: re.Match[str]) -> bool:
    # A path segment after /secret/ or /token/: a random value, not an id (a UUID, hex digits
    # alone: a commit or an object id a REST path holds as often).
    value = match.group("value")
    return looks_random(value) and not _UUID_ONLY.fullmatch(value) and not re.fullmatch(r"[0-9a-fA-F]+", value)


_PATHS = (
    # Slack's incoming webhook path (/services/T…/B…/KEY) under another host: a proxy, an
    # enterprise gateway, a `hooks.*` mirror or Mattermost's Slack-compatible endpoint. The
    # workspace and channel ids stay.
    RegexRule(name="url-token", triggers=("/services/T",), group="value",
              description="a Slack-shaped webhook's key (/services/T…/B…/KEY) on any host (2.20)",
              pattern=re.compile(r"/services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/(?P<value>[A-Za-z0-9]{16,64})" + _END, re.ASCII)),
    # Microsoft Teams' connector URL: the 32 hex digits and the UUID after /IncomingWebhook/ are
    # its key (outlook.office.com's legacy host too, which the ported rule does not know), and
    # the /V2… signature newer URLs end in.
    RegexRule(name="url-token", triggers=("/IncomingWebhook/",), group="value",
              description="a Teams webhook's key after /IncomingWebhook/ and its /V2 signature (2.20)",
              pattern=re.compile(r"/IncomingWebhook/(?P<value>(?:[0-9a-fA-F]{32}/" + _UUID + r")?(?:/?V2[A-Za-z0-9_-]{20,})?)"
                                 + _END, re.ASCII)),
    RegexRule(name="url-token", triggers=("-teams-webhook]/V2",), group="value",
              description="the /V2 signature after a Teams webhook the ported rule replaced (2.20)",
              pattern=re.compile(r"\[REDACTED:microsoft-teams-webhook\]/(?P<value>V2[A-Za-z0-9_-]{20,})", re.ASCII)),
    # Hooks whose path is the credential: Rocket.Chat (/hooks/ID/TOKEN), Feishu / Lark bots,
    # Flock, PagerDuty's integration key, Netlify build hooks, Vercel deploy hooks.
    RegexRule(name="url-token", triggers=("/hooks/",), group="value", check=_random_value,
              description="a Rocket.Chat webhook's token (/hooks/ID/TOKEN) (2.20)",
              pattern=re.compile(r"/hooks/[A-Za-z0-9]{16,24}/(?P<value>[A-Za-z0-9]{24,64})" + _END, re.ASCII)),
    *(RegexRule(name="url-token", lower_triggers=(trigger,), group="value", description=f"{what} (2.20)",
                pattern=re.compile(pattern + _END, re.ASCII | re.IGNORECASE))
      for trigger, what, pattern in (
          ("/bot/v2/hook/", "a Feishu / Lark bot webhook's key", r"open-apis/bot/v2/hook/(?P<value>[A-Za-z0-9-]{20,64})"),
          ("flock.com/hooks/", "a Flock webhook's key", r"flock\.com/hooks/sendMessage/(?P<value>" + _UUID + ")"),
          ("/integration/", "a PagerDuty integration key in its URL", r"pagerduty\.com/integration/(?P<value>[0-9a-zA-Z]{32})"),
          ("/build_hooks/", "a Netlify build hook's id", r"api\.netlify\.com/build_hooks/(?P<value>[0-9a-f]{24})"),
          ("/integrations/deploy/", "a Vercel deploy hook's key",
           r"/integrations/deploy/prj_[A-Za-z0-9]{8,40}/(?P<value>[A-Za-z0-9]{8,40})"),
      )),
    # A segment a path names as the secret: /webhooks/incoming/secret/X, /api/token/X/status.
    RegexRule(name="url-token", lower_triggers=("/secret/", "/token/", "/apikey/", "/api_key/", "/api-key/", "/access_token/"),
              group="value", check=_random_segment,
              description="a random path segment after /secret/, /token/, /apikey/ (2.20)",
              pattern=re.compile(r"/(?:secret|token|api[_-]?key|access_token)/(?P<value>[A-Za-z0-9_~.-]{16,128})(?![A-Za-z0-9_~.%-])",
                                 re.ASCII | re.IGNORECASE)),
    # Capability keys of a query or a path parameter: Dropbox's shared-link rlkey, a servlet's
    # ;jsessionid= (the session itself).
    RegexRule(name="url-token", lower_triggers=("rlkey=", ";jsessionid="), group="value",
              description="Dropbox's ?rlkey= and a ;jsessionid= path parameter (2.20)",
              pattern=re.compile(r"(?:[?&]rlkey|;jsessionid)=(?P<value>[A-Za-z0-9._-]{16,128})" + _END, re.ASCII | re.IGNORECASE)),
)


def _decoded(text: str) -> str:
    # Percent-encoding applied once per URL a value was nested in: decode until it stands still.
    for _ in range(3):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def _encoded_name(match: re.Match[str]) -> bool:
    kind = name_class(_decoded(match.group("name")))
    value = _decoded(match.group("value"))
    if kind is None or len(value) < 6 or is_placeholder(value, quoted=False):
        return False
    if kind == "password":
        return bare_secret(value) or looks_random(value)
    return looks_random(value)


_PCT = r"%(?:25){0,2}"
_ESCAPE = r"(?>(?:25){0,2}[0-9A-Fa-f]{2})"  # after a %: an escape, itself escaped up to twice
# Whether a text holds an escape inside a parameter's name at all: it starts with its literal `%`, so the
# engine skips ahead in C (the rule's own pattern starts with a class and is tried only behind this).
_ENCODED_NAME_GATE = re.compile(r"%(?:25){0,2}[0-9A-Fa-f]{2}[A-Za-z0-9_.%-]{0,64}(?:=|%(?:25){0,2}3[Dd])", re.ASCII)
_PERCENT_NAMES = (
    # A query parameter whose name is written percent-encoded (`?api%5Fkey=`, `access%255Ftoken`
    # in a URL nested twice, `%70assword`): decoded, the name is judged as an assignment's.
    RegexRule(name="secret-assignment", gate=_ENCODED_NAME_GATE, literals=("%",), group="value", check=_encoded_name,
              description="a query parameter whose name is percent-encoded (?api%5Fkey=X) (2.20)",
              pattern=re.compile(r"(?:[?&;]|" + _PCT + r"(?:3[Ff]|26))"
                                 r"(?P<name>(?>[A-Za-z0-9_.-]{0,32}(?:%(?!(?:25){0,2}3[Dd])" + _ESCAPE + r"[A-Za-z0-9_.-]{0,32}){1,6}))"
                                 r"(?:=|" + _PCT + r"3[Dd])"
                                 r"(?P<value>(?:[A-Za-z0-9._~+/!*^-]|%(?!(?:25){0,2}(?:26|3[Dd]|23))" + _ESCAPE
                                 + r"|%(?![0-9A-Fa-f]{2})){6,256}+)(?![A-Za-z0-9._~+/!*^%-])", re.ASCII)),
)


_PASSWORD_CHARS = r"[A-Za-z0-9!#$%&*+\-./<=>?@^_~]"
_VALUE = r"(?P<value>" + _PASSWORD_CHARS + r"{5,127}[A-Za-z0-9!#$%&*+\-/<=>@^_~])(?=[`\"'*]{0,2}(?:[.?!;,)]|[ \t]*(?:\r?\n|\Z)))"


def _password_value(match: re.Match[str]) -> bool:
    value = match.group("value")
    return bare_secret(value) and not is_placeholder(value, quoted=False)


# A password given in the sentence after the one that names it, by the words that refer back to
# it: "I rotated the db password. The new one is X", "… root password yesterday. It's now X".
# The value is judged as a tool's bare secret output: a letter, a digit, mixed case or a symbol.
_NEXT_SENTENCE = RegexRule(
    name="secret-in-prose", lower_triggers=("password", "passphrase", "passwd"), anchored=True, group="value",
    check=_password_value,
    description="a password in the sentence after its word (\"… the db password. The new one is X\") (2.20)",
    pattern=re.compile(r"(?:password|passphrase|passwd)(?![A-Za-z0-9_-])[^.!?\r\n]{0,80}[.!;][ \t]+"
                       r"(?:(?:and|so|ok|okay)[ \t,]+)?"
                       r"(?:(?:the[ \t]+)?(?:new|current|updated|temporary|temp|replacement)[ \t]+one(?:'s|\u2019s|[ \t]+is|[ \t]+was"
                       r"|[ \t]+will[ \t]+be)(?:[ \t]+now)?|it(?:'s|\u2019s|[ \t]+is)[ \t]+now|now[ \t]+it(?:'s|\u2019s|[ \t]+is))"
                       r"[ \t]*:?[ \t]*[`\"'*]{0,2}" + _VALUE, re.ASCII | re.IGNORECASE))


class DashBeforeRule(PasswordBeforeRule):
    """A password written before its word across a dash (2.20): "X — that's the new admin
    password", "`X` -- this is the root password for the router". The clause after the dash
    points back at the value (that's / this is / it's); the value is judged as "X is the root
    password"'s."""

    _before = re.compile(r"(?:^|(?<=[\s\"'`(*]))[`\"'*]{0,2}(?P<value>" + _PASSWORD_CHARS + r"{6,128}?)[`\"'*]{0,2}[ \t]+"
                         r"(?:\u2014|\u2013|--?)[ \t]+(?:that|this|it|which)(?:'s|\u2019s|[ \t]+is|[ \t]+was|[ \t]+will[ \t]+be)[ \t]+"
                         r"(?:[A-Za-z'-]{1,16}[ \t]+){0,4}\Z")
    _gate = ("\u2014", "\u2013", " -")

    def __init__(self) -> None:
        Rule.__init__(self, name="secret-in-prose", lower_triggers=self._words, literals=self._words,
                      description="a password before its word across a dash (\"X — that's the new admin password\") (2.20)")


# A bare `user:password` line (htpasswd's shape when the file holds a plain password) where its context
# says it is a login: the lines under a line naming credentials ("Credentials:", "test logins below:"),
# and a host's line in a list (`web1.example.com  deploy:X`, `10.0.0.5 root:X`). Elsewhere the shape is
# `key:value`, `module:function`, `file:line` and a time's as often. The password is judged as a tool's
# bare secret output (a letter, a digit, mixed case or a symbol; no path, version or name).
_USER = r"(?P<user>(?:\[REDACTED:email\]|[A-Za-z_][A-Za-z0-9._-]{0,63}))"
_PAIR = _USER + r":(?P<value>[^\s:`\"']{6,128})"
_CREDENTIAL_HEAD = re.compile(
    r"(?:credentials?|creds|logins?|passwords?)(?![A-Za-z0-9_-])"
    r"(?:[ \t]+(?:for|the|are|is|to|of|on|in|at|my|our|your|test|staging|prod|production|dev|demo|default|admin|db|server|servers"
    r"|hosts?|ssh|these|as|follows|listed|below|here)(?![A-Za-z0-9_-])|[ \t]*\([^()\r\n]{1,48}\))*"
    r"[ \t]*:?[ \t]*(?:\*\*)?[ \t]*\r?\n", re.ASCII | re.IGNORECASE)
_CREDENTIAL_LINE = re.compile(r"[ \t]*(?:[-*+][ \t]+|[0-9]{1,2}[.)][ \t]+)?[`\"']?" + _PAIR + r"[`\"']?[ \t]*(?:\r?\n|\Z)", re.ASCII)
_CODE_EXTENSIONS = frozenset({"py", "js", "ts", "tsx", "jsx", "md", "json", "yaml", "yml", "txt", "log", "sh", "go", "rs", "rb", "java",
                              "c", "h", "cc", "cpp", "hpp", "cs", "kt", "php", "html", "css", "toml", "cfg", "ini", "lock", "xml",
                              "csv", "sql", "conf", "swift", "scala", "lua", "pl", "r", "ipynb", "vue", "svelte"})
# Both readings end a line in a pair: a name, a colon and a password with a digit (no path: a bare secret
# has none), found from the colon, a literal, before anything that starts with a class is tried.
_PAIR_END = re.compile(r":(?<=[A-Za-z0-9_.\]-]:)(?=[^\s:/\\`\"']{0,127}[0-9])[^\s:/\\`\"']{6,128}[`\"']?[ \t]*\r?$",
                       re.ASCII | re.MULTILINE)
# A host's line, or a JSON string holding one (its quotes around it; the lines of an escaped document are
# read decoded, as every rule's are).
_HOST_LINE = re.compile(r"^[ \t]*[\"']?[ \t]*(?:[-*+][ \t]+)?(?P<host>(?:[0-9]{1,3}\.){3}[0-9]{1,3}|[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.(?P<tld>[A-Za-z]{2,24}))"
                        r"(?::[0-9]{1,5})?[ \t]+(?:[|,][ \t]*)?" + _PAIR + r"(?=[\"']?[ \t]*\r?$)", re.ASCII | re.MULTILINE)


def _line_password(match: re.Match[str]) -> bool:
    value = match.group("value")
    return bare_secret(value) and not is_placeholder(value, quoted=False)


class CredentialLinesRule(Rule):
    """Bare `user:password` lines a naming line or a host stands before (2.20)."""

    _words = ("cred", "login", "password")

    def __init__(self) -> None:
        Rule.__init__(self, name="secret-in-prose", triggers=(":",), needs=frozenset(":"), literals=(":",),
                      description="a bare user:password line under a line naming credentials or after a host (2.20)")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), _CREDENTIAL_HEAD.pattern, _CREDENTIAL_LINE.pattern, _PAIR_END.pattern, _HOST_LINE.pattern,
                *sorted(_CODE_EXTENSIONS)]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if _PAIR_END.search(text) is None:
            return text
        spans = []
        lowered = scan.lower()
        for word in self._words:
            found = lowered.find(word)
            while found != -1:
                head = _CREDENTIAL_HEAD.match(text, found)
                inside = found > 0 and (text[found - 1].isalnum() or text[found - 1] in "_-")  # DB_PASSWORD, getLogin
                found = lowered.find(word, found + 1)
                if head is None or inside:
                    continue
                position = head.end()
                for _ in range(32):  # a list of logins, one a line
                    line = _CREDENTIAL_LINE.match(text, position)
                    if line is None:
                        break
                    if _line_password(line):
                        spans.append((line.start("value"), line.end("value"), "secret-in-prose"))
                    position = line.end()
        for line in _HOST_LINE.finditer(text):
            tld = line.group("tld")
            if (tld is None or tld.lower() not in _CODE_EXTENSIONS) and _line_password(line):
                spans.append((line.start("value"), line.end("value"), "secret-in-prose"))
        return replace_spans(text, sorted(set(spans)), hits) if spans else text


NEARBY_RULES: tuple[Rule, ...] = (*_PATHS, *_PERCENT_NAMES, _NEXT_SENTENCE, DashBeforeRule(), CredentialLinesRule())
