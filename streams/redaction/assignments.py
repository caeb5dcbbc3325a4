"""Values assigned to secret-like names, in code, config, env files, JSON, YAML, XML and CLIs."""

from __future__ import annotations

import re
from functools import lru_cache

from streams.english import FUNCTION_WORDS
from streams.redaction.base import (
    MARKER_PREFIX,
    RegexRule,
    Rule,
    Scan,
    is_marker_at,
    marker,
    plain_words,
    replace_spans,
)
from streams.redaction.entropy import HEX_MIN_ENTROPY, looks_random, shannon_entropy
from streams.redaction.keys import DESCRIPTIVE_SUFFIXES, is_placeholder, name_class
from streams.redaction.vendors import ported_rule_names, vendor_rule

__all__ = ["ACCOUNT_ROW_RULE", "CREDENTIAL_COLON_RULE", "CREDENTIAL_PAIR_RULE", "CREDENTIAL_SPACE_RULE", "DEVICE_SECRET_RULES",
           "LOGIN_PAIR_RULE",
           "NAMED_ABOVE_RULE", "AssignmentRule", "PasswordBeforeRule", "bare_secret", "passphrase_words"]

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# Where a candidate starts: each keyword is searched literally in the lower-cased text.
# "pw" starts prose only ("the root pw is ..."): as a name, pscale_pw_... is a token's prefix.
_KEYWORDS = ("pass", "pwd", "pw", "secret", "token", "credential", "cookie", "auth", "key")
_KEYWORD_SET = frozenset(_KEYWORDS)
# Names whose values have a rule of their own, by their letters only (SecretAccessKey,
# aws_secret_access_key, AccountKey).
_NAMED = {
    "awssecretaccesskey": "aws-secret-access-key",
    "secretaccesskey": "aws-secret-access-key",
    "awssecretkey": "aws-secret-access-key",
    "accountkey": "azure-storage-key",
    "sharedaccesskey": "azure-storage-key",
}
_SHORTEST_PROSE = 12  # "password " and a 6-character value (2.5; was 20, "key " and 16 characters)
# Words that may stand between a secret's name and its value in prose.
_CONNECTORS = (
    "is", "was", "are", "were", "be", "been", "for", "of", "to", "in", "set", "the", "a", "an", "my", "your",
    "our", "their", "this", "that", "new", "old", "value", "here", "now", "it", "as", "with", "using", "use",
    "used", "called", "named", "reads", "says", "equals", "i", "we", "you", "and", "staging", "production",
    "prod", "dev", "test", "api", "access", "secret", "private",
    # 2.3, later: the same sentence in Spanish, French, German and Portuguese ("El token de acceso
    # es ...", "das Token ist ...", "o token de acesso é ..."; accented letters are separators).
    "de", "del", "es", "el", "la", "le", "est", "ist", "der", "die", "das", "o", "os", "su", "mon", "ton",
    "votre", "mein", "dein", "meu", "seu", "acceso", "acesso", "acces", "zugang", "zugriff", "para", "pour",
    # 2.22: German's and Dutch's "is" of a name's wording ("Mein Token lautet …", "Mijn token luidt …").
    "lautet", "luidt",
)
# After a password word only (2.3, later): the account or thing it opens ("the passphrase for the
# key is ...", "the password for the admin account is ...").
_PASSWORD_CONNECTORS = (*_CONNECTORS, "key", "account", "user", "root", "admin", "server", "database", "db",
                        "box", "wifi", "login", "vault", "machine", "host",
                        "ko", "ay")  # 2.12: Tagalog ("ang password ko ay …")
# A password in a sentence may hold any printable ASCII but quotes, brackets and , ; : ` (as
# password-in-prose reads it); a sentence's own full stop, "!" or "?" after it is no part of it.
_PROSE_PASSWORD_CHARS = r"[A-Za-z0-9!#$%&*+\-./<=>?@^_~]"
# The short password words: "the root pw is ...", "pass: ...", only before is / was / = / :.
_SHORT_PASSWORD_WORDS = frozenset({"pass", "pw", "pwd"})
_PASSWORD, _SECRET, _PROSE = "password-assignment", "secret-assignment", "secret-in-prose"
# 2.23: the prefixes a string literal may have before its quote (b"X", rb'X', @"X", L"X").
_LITERAL_PREFIX = r"(?:[bBrRuUfF]{1,2}|@\$?|\$@?|L|u8)"


class AssignmentRule(Rule):
    """``name = value`` where the name is secret-like.

    The pattern reads a keyword, the rest of the name, a separator (``=``, ``:``, ``:=``,
    ``=>``) and a value (quoted, JSON-escaped or bare); Python then reads the whole name and
    decides: ``password``-class names lose any real value, ``secret`` and ``key`` names lose
    values that look random (Shannon entropy), and an ``export NAME=value`` line or a
    ``--token VALUE`` flag with a secret-like name loses its value whatever it is.
    Placeholders (``${DB_PASSWORD}``, ``<token>``, ``********``, ``os.environ[...]``) stay.

    The pattern is case-insensitive, which the regex engine cannot skip ahead for, so it is
    only tried where a keyword occurs (found with ``str.find`` on the lower-cased text).
    """

    _pattern = re.compile(
        r"(?:passw(?:or)?ds?|passphrase|pass|pwd|secret|token|credential|cookie|auth|key)"
        # 2.18: the closing bracket after a variable's name in capitals (`env[DB_PASSWORD] = X`, php-fpm's
        # pool files; `[password]: URL` is a markdown link's label) and make's conditional `?=`
        # (`DB_PASSWORD ?= X`).
        r"[A-Za-z0-9_.-]{0,48}(?P<close>\\?[\"']?(?:(?-i:(?<=[A-Z0-9]))\])?)[ \t]*"
        r"(?P<sep>:=|=>|\?=|=(?![=~])|:(?![:/\\]))[ \t]*"
        # 2.23: a string literal's prefix before its quote (Python's b"X", r"X", rb"X", f"X", u"X"; C#'s @"X",
        # $"X"; C's L"X", u8"X") is no value: 2.22 redacted the `b` and kept the literal.
        r"(?:" + _LITERAL_PREFIX + r"(?=\\?[\"']))?"
        r"(?:\\?\"(?P<dq>[^\"\\\r\n]{1,4096})\\?\"|'(?P<sq>[^'\r\n]{1,4096})'"
        # 2.12: a NUL ends a bare value (/proc/PID/environ, env -0 separate their entries so).
        r"|(?!" + _LITERAL_PREFIX + r"\\?[\"'])(?P<bare>[^\s\"'`,;<>|{}()\x00]{1,4096})(?P<eol>(?=[ \t]*(?:$|\r?\n|[,;&})\x00])))?)",
        re.ASCII | re.IGNORECASE | re.MULTILINE,
    )
    _flag = re.compile(
        # 2.15: a name ending in `-pass` too (`--admin-pass X`, `--db-pass`); `--pass` alone is judged as a bare pass.
        # 2.18: or one dash before a password word's name (`isql-fb -password X`, Java tools' `-keystorePassword X`).
        r"(?:--(?<![A-Za-z0-9_-]--)|-(?<![A-Za-z0-9_-]-)(?=[A-Za-z]{0,24}(?:password|passwd|passphrase)[ \t]))"
        r"(?P<name>[A-Za-z0-9-]{0,24}(?:password|passwd|passphrase|token|secret|api-key|apikey|key|(?<=-)pass(?![A-Za-z]))"
        r"[A-Za-z0-9-]{0,24})[ \t]+(?:\"(?P<dq>[^\"\r\n]{1,4096})\"|'(?P<sq>[^'\r\n]{1,4096})'"
        r"|(?P<bare>[^\s\"'|;&-][^\s\"'|;&]*(?:&[^\s\"'|;&]+)*))",
        re.ASCII | re.IGNORECASE,
    )
    _xml = re.compile(
        r"</?(?<=<)(?P<name>[A-Za-z0-9_.:-]{0,32}(?:passw(?:or)?d|passphrase|(?:store|key)pass|secret|token|api[_-]?key)[A-Za-z0-9_.:-]{0,32})>"
        # 2.18: or a CDATA section's content (`<password><![CDATA[X]]></password>`).
        r"(?:<!\[CDATA\[(?P<sq>[^\]\r\n]{1,4096})\]\]>|(?P<bare>[^<\r\n]{1,4096}))</",
        re.ASCII | re.IGNORECASE,
    )

    # Prose: a secret-like word, up to three connecting words ("The token for staging is"),
    # then a value, which must look random (_judge_prose).
    _prose = re.compile(
        r"(?:passw(?:or)?ds?|passphrase|pwd|secret|token|credential|cookie|auth|key)[A-Za-z_-]{0,24}"
        # 2.15: five or six marks before the value when they are markdown's ("- **API Key**: `X`"), not
        # code's ("password}' | base64").
        # 2.16: a hyphen between spaces is a dash ("API key - X"); glued, it joins words (token-based).
        r"(?:[^\w\r\n./(-]{1,4}(?:" + "|".join(_CONNECTORS) + r")){0,3}(?:[^\w\r\n./(-]{1,4}|[*:` \t]{5,6}|[ \t]--?[ \t])"
        r"(?P<bare>[A-Za-z0-9_+/=.~%-]{6,4096})",
        re.ASCII | re.IGNORECASE,
    )
    # Prose after a password word (2.3, later): more connecting words, and a value with symbols
    # ("my password is SZd1!N7Ibm1a", "the root pw is qLpH-_tc4F"). Tried beside _prose; at one
    # place the longer reading wins, so what _prose redacted stays redacted.
    _prose_password = re.compile(
        r"(?P<word>passw(?:or)?ds?|passphrase|pass|pwd|pw|secret)(?![A-Za-z])"
        # 2.12: up to six marks before the value: markdown's "**Password:** `X`" has five.
        r"(?P<between>(?:[^\w\r\n./(-]{1,4}(?:" + "|".join(_PASSWORD_CONNECTORS) + r")){0,4}(?:[^\w\r\n./(-]{1,6}|[ \t]--?[ \t]))"
        r"(?P<bare>" + _PROSE_PASSWORD_CHARS + r"{6,128})(?!" + _PROSE_PASSWORD_CHARS + r")",
        re.ASCII | re.IGNORECASE,
    )

    def __init__(self) -> None:
        super().__init__(
            name=_SECRET,
            # No character shortcut: prose ("the token is ...") needs no separator. Every
            # candidate (assignment, flag, XML element, prose) holds a keyword.
            literals=_KEYWORDS,
            description="password-assignment: any real value of a password-like name; "
            "secret-assignment: high-entropy values of secret-like names, export lines and "
            "--token/--password flags; aws-secret-access-key and azure-storage-key by name",
        )

    def fingerprint(self) -> list[str]:
        named = [f"{name}={rule}" for name, rule in sorted(_NAMED.items())]
        return [*super().fingerprint(), *_KEYWORDS, *named, self._pattern.pattern, self._flag.pattern, self._xml.pattern,
                self._prose.pattern, self._prose_password.pattern, _FLAG_WORDS.pattern, _ONE_DASH_FLAG.pattern, *sorted(_SHORT_PASSWORD_WORDS), *sorted(_SECRET_SEPARATORS), _UUID.pattern, _IDENTIFIER.pattern, _FLAG.pattern, _password_like.__qualname__,
                _in_sentence.__qualname__, _password_in_sentence.__qualname__, _SHORT_NAME.pattern,
                _secret_in_sentence.__qualname__, _WORD_BEFORE.pattern, _inside_marker.__qualname__,
                _SAID_STEP.pattern, _ASIDE.pattern, _GOES_ON.pattern, _GOES_ON_MARKER.pattern, _goes_on.__qualname__, _SAID_VALUE.pattern, str(_SAID_WORDS), _PASSPHRASE.pattern, *sorted(_NOT_THE_SECRET),
                *_CLAUSE_END, *sorted(_FIRST_ONLY), *sorted(_SAID_NEXT),
                _said_in_sentence.__qualname__, _said_value.__qualname__, _BLOCK_SCALAR.pattern,
                _block_scalar.__qualname__, *sorted(_MANAGERS), *sorted(_FLAG_PROSE), _PLAIN_RUN.pattern,
                *sorted(_PREDICATES), *_PREDICATE_ENDINGS, _plain_password.__qualname__,
                _will_be.__qualname__, _LONG_WORD.pattern, _QUOTED_PHRASE.pattern, passphrase_words.__qualname__,
                _AT_HOST.pattern, _METHOD.pattern]

    def hit_names(self) -> tuple[str, ...]:
        return (_PASSWORD, _SECRET, _PROSE, *sorted(set(_NAMED.values())), *ported_rule_names())

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if len(text) < _SHORTEST_PROSE and not any(separator in text for separator in "=:-<"):
            return text  # neither an assignment, a flag, an XML element nor a sentence with a value
        found: list[tuple[int, int, str]] = []
        if "--" in text or ("-" in text and "pass" in scan.lower() and _ONE_DASH_FLAG.search(scan.lower()) is not None):
            found += self._spans(text, self._flag.finditer(text), kind="flag")
        if "</" in text:
            found += self._spans(text, self._xml.finditer(text), kind="xml")
        assignments, prose, stated = self._candidates(scan)
        found += self._spans(text, assignments, kind="assignment")
        found += self._spans(text, prose, kind="prose")
        found += stated
        if not found:
            return text
        pieces: list[str] = []
        done = 0
        # At one place the longest reading wins: <password>N3xusPa55!</password> is the XML
        # element's whole value, not the prose reading's shorter run.
        for start, end, rule in sorted(found, key=lambda span: (span[0], -span[1], span[2])):
            if start < done:
                continue
            pieces += (text[done:start], marker(rule))
            done = end
            hits[rule] = hits.get(rule, 0) + 1
        pieces.append(text[done:])
        return "".join(pieces)

    def _candidates(self, scan: Scan) -> tuple[list[re.Match[str]], list[re.Match[str]],
                                               list[tuple[int, int, str]]]:
        """``name = value`` matches, prose matches where no assignment starts, and the spans of
        values a sentence states further on (:func:`_said_in_sentence`)."""
        starts: set[int] = set()
        if scan.literal_hits is not None:
            # Every keyword is among the literals the automaton reported, with its places.
            starts = {end - len(literal) + 1 for end, literal in scan.literal_hits if literal in _KEYWORD_SET}
        else:
            lowered = scan.lower()
            for keyword in _KEYWORDS:
                position = lowered.find(keyword)
                while position != -1:
                    starts.add(position)
                    position = lowered.find(keyword, position + 1)
        matches, prose, stated = [], [], []
        end = 0
        word_end = 0
        for start in sorted(starts):
            if start < end:
                continue  # inside the previous assignment (its name or value)
            match = self._pattern.match(scan.text, start)
            if match is None or _in_sentence(match):
                # A colon followed by words is a sentence ("the token: 9f8e… expired", "Key: the
                # value is Zx81…"): the prose reading judges it too, apply keeps one span.
                sentence = self._prose.match(scan.text, start)
                if sentence is not None:
                    prose.append(sentence)  # overlaps are settled in apply: assignments may follow
                if scan.text[start] in "pPsS":  # a password word: pass..., pw, pwd; or "secret"
                    sentence = self._prose_password.match(scan.text, start)
                    if sentence is not None:
                        prose.append(sentence)
                if start >= word_end:
                    # Keywords glued in one run of word characters share its end: each read to
                    # it, 4 000 `PasswordAuthentication` in a run took 20 s (2.21).
                    word_end = _word_end(scan.text, start)
                said = _said_in_sentence(scan.text, start, word_end)
                if said is not None:
                    stated.append(said)
            if match is None:
                block = _block_scalar(scan.text, start)
                if block is not None:
                    stated.append(block)
                continue
            matches.append(match)
            # Keywords inside the value are still tried: NPM_TOKEN="//host/:_authToken=..." is
            # judged by its inner assignment when the outer one keeps its value.
            end = match.end("sep")
        return matches, prose, stated

    def _spans(self, text: str, matches: object, *, kind: str) -> list[tuple[int, int, str]]:
        spans = []
        for match in matches:  # type: ignore[attr-defined]
            verdict = self._judge(text, match, kind)
            if verdict is not None:
                spans.append(verdict)
        return spans

    def _judge(self, text: str, match: re.Match[str], kind: str) -> tuple[int, int, str] | None:
        """The value's span and the rule to redact it under, or ``None`` to keep it."""
        groups = match.groupdict()
        group = next((name for name in ("dq", "sq", "bare") if groups.get(name) is not None), None)
        if group is None:
            return None
        quoted = group != "bare"
        value = groups[group]
        start, end = match.span(group)
        if kind == "prose":
            return self._judge_prose(text, match)
        if kind == "assignment":
            name_start = _name_start(text, match.start())
            name = text[name_start: match.start("close")].strip(".-")
            if not quoted and "&" in value and text[name_start - 1: name_start] in ("?", "&"):
                # A URL query parameter ends at the next "&"; elsewhere "&" is part of the value.
                value = value[: value.index("&")]
                end = start + len(value)
            exported = text.endswith(("export ", "export\t"), 0, name_start)
            if _in_sentence(match):
                # "Password: must be 8 characters" is prose (a YAML/header value fills its line),
                # but "password: hunter2 is wrong" gives one away: a password word's value with
                # a digit in it is no word of the sentence. Longer random values of any secret
                # word are the prose reading's (_candidates).
                value = value.rstrip(".")
                end = start + len(value)
                if (name_class(name) != "password" or not _password_in_sentence(value) or is_marker_at(value, 0)
                        or is_placeholder(value, quoted=False)):
                    return None
                return start, end, _PASSWORD
        else:
            name, exported = match.group("name"), kind == "flag"
            if kind == "flag" and not quoted and value.lower() in _FLAG_PROSE:
                return None  # "WARNING! Using --password via the CLI is insecure." (docker login)
            if kind == "flag" and _FLAG_WORDS.search(name) is None:
                # 2.11: a --…key flag (--account-key, --authkey, --master-key) holds a key when
                # its value looks random; --private-key ./id.pem names a file.
                exported = False
        if not value or is_marker_at(value, 0) or is_placeholder(value, quoted=quoted):
            return None
        if not quoted and text[end: end + 1] in ("(", "["):
            return None  # password = getpass(...), token = tokens[0]: code, not a value
        named = _NAMED.get(name.lower().replace("_", "").replace("-", "").replace(".", ""))
        if named is not None:
            return start, end, named
        vendor = vendor_rule(name, value)
        if vendor is not None:
            return start, end, vendor
        name_kind = name_class(name)
        if name_kind is None and name.lower() in _SHORT_PASSWORD_WORDS and _short_word_password(value):
            # A bare "pass" is a test count ({"pass": 12}, "pass: ok"); with a letter and a digit
            # or a symbol ("pass: Xy7!kk2", pass: "RgwPM3C8OJV") it is a password (2.3, later).
            return start, end, _PASSWORD
        if name_kind is None:
            return None
        if name_kind == "password":
            return start, end, _PASSWORD
        if exported or looks_random(value) or _secret_in_sentence(value) or (
                "secret" in name.lower() and _short_word_password(value) and any(c in _BARE_SYMBOLS for c in value)):
            # 2.8: also a password-shaped value with a symbol under a name saying secret
            # (secret: Qw3rty!23); not under token or key names, which name grammar rules and
            # patterns as often ("token = 1*tchar").
            # 2.5: also 8+ letters and digits with two of each (client_secret: Tr0ub4dor3x,
            # token: "ab12cd34ef"), as after a secret word in a sentence.
            return start, end, _SECRET
        return None


    def _judge_prose(self, text: str, match: re.Match[str]) -> tuple[int, int, str] | None:
        if match.re is self._prose_password:
            return self._judge_prose_password(text, match)
        start, end = match.span("bare")
        value = match.group("bare").rstrip(".-")
        end = start + len(value)
        word_start = _name_start(text, match.start())
        word_end = match.start()
        while word_end < len(text) and (text[word_end].isalnum() or text[word_end] in "_-"):
            word_end += 1
        word = text[word_start:word_end]
        kind = name_class(word)
        if kind is None or is_marker_at(value, 0) or _inside_marker(text, word_start):
            return None
        if _goes_on(text, end) or value.lower() in _MANAGERS:
            return None  # "the password for prod-db-01 is X", "the password is in 1Password"
        if len(value) < 16:
            # Short: a password word's value with a digit ("my password is hunter2"), as after
            # "password:" (_password_in_sentence), and after another secret word ("the secret
            # key is 7f3a9c2e1b") a value of letters and digits mixed (_secret_in_sentence);
            # random tokens are 16+ characters.
            if kind == "key":  # "secret key", "API key" are secret words; "primary key" is none
                before = _WORD_BEFORE.search(text, max(0, word_start - 32), word_start)
                kind = name_class(f"{before.group(1)} {word}") if before else None
            short = (_password_in_sentence(value) if kind == "password"
                     else _secret_in_sentence(value) if kind == "secret" else False)
            if not short or _IDENTIFIER.fullmatch(value) or _SHORT_NAME.fullmatch(value) or _NAME_EQUALS.match(value):
                return None
            return start, end, _PROSE
        # A vendor named just before ("the Heroku API key ...") decides by its value's shape.
        vendor = vendor_rule(text[max(0, word_start - 32): word_end], value)
        if vendor is not None:
            return start, end, vendor
        if _UUID.fullmatch(value) or _IDENTIFIER.fullmatch(value) or _NAME_EQUALS.match(value):
            return None  # an id, a name, or name=value text (the assignment rule's to judge)
        if looks_random(value) or (kind == "password" and _password_like(value)):
            return start, end, _PROSE
        return None


    def _judge_prose_password(self, text: str, match: re.Match[str]) -> tuple[int, int, str] | None:
        start = match.start("bare")
        value = match.group("bare").rstrip(".!?-")
        word = match.group("word").lower()
        word_start = _name_start(text, match.start())
        if word_start != match.start() or _inside_marker(text, word_start) or is_marker_at(value, 0):
            return None  # inside a longer name (DB_PASS is the assignment rule's) or a marker
        between = match.group("between")
        if between.rstrip()[-1:] in ("<", "{", "[", "$", "%"):
            return None  # a placeholder: <password>, {{ password }}, $DB_PASSWORD
        between = between.replace("`", " ").replace("'", " ").replace('"', " ")  # "secret: `X`" (2.9)
        if word == "secret":
            # 2.8: "the new secret is zQ8#pL2!vX9m", "set the secret to s3cr3t-v@lue-99": _prose
            # reads no symbol, so such a value went whole. Only right after is / was / to / : / =,
            # and shaped as a password (a digit, and a capital or a symbol besides . - _): "the
            # secret to fast builds is caching", "secret: true" stay.
            if between.strip().lower() not in _SECRET_SEPARATORS or not _short_word_password(value) \
                    or is_placeholder(value, quoted=False) or _goes_on(text, start + len(value)):
                return None
            return start, start + len(value), _PROSE
        if word in ("pw", "pwd") and between.strip().lower() in _SHORT_SEPARATORS:
            # 2.9: "pw: correcthorsebatterystaple", "the pw is correct horse battery staple": a
            # passphrase of small letters, a long word or three to six words ending the clause
            # (pwd: unknown, pw is required stay: words that say something of the password).
            long_word = _LONG_WORD.match(text, start)
            if long_word is not None and not long_word.group().endswith(_PREDICATE_ENDINGS):
                return start, long_word.end(), _PROSE
            plain = _plain_password(text, start)
            if plain is not None and " " in text[plain[0]:plain[1]]:
                return plain
        bare_pw = word in ("pw", "pwd") and not between.strip() and any(c.isdigit() for c in value)
        if word in _SHORT_PASSWORD_WORDS and not bare_pw and (between.strip().lower() not in _SHORT_SEPARATORS
                                                              or not _short_word_password(value)):
            return None  # "first pass of the data", "pw" alone: only "pass is" / "pw:" / "pwd =" give one
        if bare_pw and not _short_word_password(value):
            return None  # "# pw Summer4sl1!" (2.5): a capital or symbol and a digit, right after pw
        if not _password_in_prose(value) or is_placeholder(value, quoted=False) or value.lower() in _MANAGERS:
            return None
        if _METHOD.fullmatch(value):
            return None  # 2.15: get("password").strip_all, find_element(…"password").send_keys: a method
        if _goes_on(text, start + len(value)):
            return None  # "the password for prod-db-01 is X": the sentence says what it is further on
        if len(value) >= 16 and value.isalnum():
            # Letters and digits only: as _prose decides after the long password words (random,
            # or mixed case), which does not read pw / pwd / pass.
            if word not in _SHORT_PASSWORD_WORDS or not (looks_random(value) or _password_like(value)):
                return None
        return start, start + len(value), _PROSE


_SHORT_SEPARATORS = frozenset({"is", "was", "=", ":", "is:", "is ="})
_METHOD = re.compile(r"\.[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# One word of small letters after "pw:" this long is a passphrase, not a remark (2.9).
_LONG_WORD = re.compile(r"[a-z]{12,64}(?=[ \t]*(?:[.,;!?\r\n]|$))", re.ASCII)
_SECRET_SEPARATORS = _SHORT_SEPARATORS | {"to", "is now", "was set to", "set to"}
# After a value read from a sentence: the sentence names its secret later ("for X is Y", 2.5).
_GOES_ON = re.compile(r"(?:[ \t]+(?:is|was)[ \t]+|:[ \t]+)(?P<value>" + _PROSE_PASSWORD_CHARS + r"{6,128})",
                      re.ASCII | re.IGNORECASE)


_GOES_ON_MARKER = re.compile(r"(?:[ \t]+(?:is|was)[ \t]+|:[ \t]+)" + re.escape(MARKER_PREFIX), re.ASCII | re.IGNORECASE)


def _goes_on(text: str, end: int) -> bool:
    """After a value read from a sentence, the sentence goes on to say what the secret is ("the
    password for prod-db-01 is Tr0ub4dor3x"): the first value was what it is for."""
    if _GOES_ON_MARKER.match(text, end):
        return True  # already said and redacted (a second reading of the text)
    later = _GOES_ON.match(text, end)
    return later is not None and _password_in_prose(later.group("value").rstrip(".!?-"))


# Policy 2.5: a sentence that names a secret and, a few words on, says what it is ("the password
# for the staging db is Tr0ub4dor3x", "root's password on the box: X", "the token for CI is X",
# "password was changed to X", "the DB password (X) expired"). The words between may be any
# (hosts, users, environments), which the connector lists cannot know; what decides is a
# separator (is, was, :, =, ->, to, 's) followed by a value the secret's kind allows. Read from
# each secret word up to eight words on, on its line and in its sentence.
_SAID_STEP = re.compile(
    # 2.15: "is" in Italian, Portuguese, Spanish, French, German, Danish / Norwegian, Swedish and
    # Polish after an English password word ("La password dell'utente admin è …").
    # 2.22: German "lautet" and Dutch "luidt" ("Mein Token lautet …").
    r"[ \t]*(?:(?P<sep>is|was|are|were|be|now|->|=>|:=|:|=|to|'s|\u00e8|\u00e9|es|est|ist|lautet|luidt|er|\u00e4r|jest)(?![A-Za-z\u00c0-\u024f])"
    # 2.9: a marker or a quoted URL is one word: "Password for [REDACTED:email]: X", git's
    # "Password for 'https://bob@github.com': X" (a prompt naming its account, then the answer).
    r"|(?P<word>\[REDACTED:[a-z0-9-]{1,40}\]|'[^'\s]{1,200}'|[^\s:=]{1,1024}|\S))",
    re.ASCII | re.IGNORECASE)
# A stated password may hold letters of any script (Contraseña2024, Zürich2024!), not spaces or
# the punctuation of other scripts.
_SAID_CHARS = r"(?:" + _PROSE_PASSWORD_CHARS + r"|[^\x00-\x7f\s\u2000-\u206f\u3000-\u303f\uff00-\uffef])"
_SAID_VALUE = re.compile(
    r"[ \t]*(?:\"(?P<dq>[^\"\r\n]{4,128})\"|'(?P<sq>[^'\r\n]{4,128})'|`(?P<bq>[^`\r\n]{4,128})`"
    r"|\((?P<paren>" + _SAID_CHARS + r"{6,128})\)"
    r"|(?P<bare>" + _SAID_CHARS + r"{6,128})(?!" + _SAID_CHARS + r"))",
    re.ASCII)
_SAID_WORDS = 8
# 2.19: an aside between the secret word and what the sentence says it is ("the password for the db,
# which I just rotated, is X", "the admin password (the one we set last week) is now X", "Password for
# grafana — don't share it — is X"): skipped whole, its words not counted; one per sentence.
_ASIDE = re.compile(r"[ \t]*(?:\([^()\r\n]{1,120}\)|,[ \t]+(?:which|that|who|as)[ \t][^,;.!?()\r\n]{1,100},"
                    r"|[\u2013\u2014][^\u2013\u2014\r\n]{1,100}[\u2013\u2014]|[ \t]--?[ \t][^\r\n]{1,100}?[ \t]--?(?=[ \t]))",
                    re.IGNORECASE)
# What may follow the secret word in such a sentence: a space, or a separator touching it.
_SAID_NEXT = frozenset(" \t:'=-(")
# A word right after the secret word that makes it a thing about the secret: the suffixes that
# make a name descriptive (token_count, password_file), but the verbs and prepositions a
# sentence goes on with ("the password set to ...", "the key on the box: ...").
_NOT_THE_SECRET = (DESCRIPTIVE_SUFFIXES - {"on", "at", "set", "changed", "reset", "s"}) | {
    "helper", "helpers", "hash", "hashes", "hashing", "generator", "counts"}
_CLAUSE_END = (".", "!", "?", ";", ",")
# Separators of an assignment, not of a sentence: only right after the secret word.
_FIRST_ONLY = frozenset({"=", ":=", "=>"})
# Three or more words of letters, quoted after "password ... is": a passphrase.
_PASSPHRASE = re.compile(r"[A-Za-z]{2,}(?:[ -][A-Za-z]{2,}){2,}", re.ASCII)


# A quoted phrase right after a password word (2.9).
_QUOTED_PHRASE = re.compile(r"[ \t]+(?P<q>[\"'`\u2018\u201c])(?P<phrase>[A-Za-z][A-Za-z -]{10,126}[A-Za-z])[\"'`\u2019\u201d]")


def passphrase_words(phrase: str, *, ends_clause: bool = False) -> bool:
    """Three words and more of letters, none a function word and at most one saying something of
    a password: "correct horse battery staple", not "must be at least eight characters". Words
    that end their clause unquoted (2.11) may hold as many such words as others ("purple elephant
    dances quietly"), not more ("stored encrypted locally")."""
    if _PASSPHRASE.fullmatch(phrase) is None:
        return False
    if all(word[:1].isupper() for word in re.split(r"[ -]+", phrase)):
        return False  # "Reset Password Link": a label in title case
    words = [word.lower() for word in re.split(r"[ -]+", phrase)]
    if any(word.startswith(("pass", "pw")) for word in words):
        return False  # "the password 'forgot password flow'": about the password
    telling = sum(word in _PREDICATES or word.endswith(_PREDICATE_ENDINGS) for word in words)
    most = len(words) // 2 if ends_clause else 1
    return not any(word in FUNCTION_WORDS for word in words) and telling <= most


# Names recur (key, token, Auth, api_key): classify each once.
_word_class = lru_cache(maxsize=4096)(name_class)


def _word_end(text: str, start: int) -> int:
    """Where the run of word characters and dashes from ``start`` ends."""
    end = start
    while end < len(text) and (text[end].isalnum() or text[end] in "_-"):
        end += 1
    return end


def _said_in_sentence(text: str, start: int, word_end: int) -> tuple[int, int, str] | None:
    """The span of the value a sentence states for the secret word at ``start`` (whose run of word
    characters ends at ``word_end``), and its rule."""
    if text[word_end: word_end + 1] not in _SAID_NEXT:
        return None  # keyboard., tokenizer(, auth/...: no sentence goes on from here
    word_start = _name_start(text, start)
    word = text[word_start:word_end]
    kind = _word_class(word)
    if kind == "key":  # "secret key", "API key" are secret words; "primary key" is none
        before = _WORD_BEFORE.search(text, max(0, word_start - 32), word_start)
        kind = _word_class(f"{before.group(1)} {word}") if before else None
    if kind not in ("password", "secret") or _inside_marker(text, word_start):
        return None
    short = word.lower() in _SHORT_PASSWORD_WORDS
    position = word_end
    if kind == "password" and not short:
        quoted = _QUOTED_PHRASE.match(text, position)
        if quoted is not None and passphrase_words(quoted.group("phrase")):
            # 2.9: "my password 'correct horse battery staple'": a passphrase quoted right after
            # its word, with no is / : between (2.5 read it only after one).
            return quoted.start("phrase"), quoted.end("phrase"), _PROSE
    paren = _SAID_VALUE.match(text, position)  # "the DB password (X) expired", not Auth(Base)
    if paren is not None and paren.group("paren") is not None:
        spaced = paren.start("paren") > position + 1
        return _said_value(paren, kind, short) if kind == "password" and spaced else None
    aside = None
    for number in range(_SAID_WORDS + 1):
        if aside is None:
            aside = _ASIDE.match(text, position)
            position = aside.end() if aside is not None else position
        step = _SAID_STEP.match(text, position)
        if step is None:
            return None
        group = "sep" if step.group("sep") is not None else "word"
        # Words of a sentence stand apart (a separator may touch one: "password:", "on the
        # box:"); a glued run is a name or a value, the assignment rule's.
        if group == "word" and step.start(group) == position:
            return None
        position = step.end()
        if group == "sep" and number and step.group("sep") in _FIRST_ONLY:
            return None  # "encoding = ...", "x == ...": another name's value, code
        if group == "sep" and aside is not None and not step.group("sep").isalpha():
            return None  # a docstring's "password (bool, optional): Hide typed text": a type, then what it does
        if group == "word":
            following = step.group("word")
            if aside is None and following.endswith(",") and (comma := _ASIDE.match(text, step.end() - 1)) is not None:
                aside, position = comma, comma.end()
                continue
            if following.endswith(_CLAUSE_END) or (any(c in following for c in "()[]{}")
                                                  and not is_marker_at(following, 0)):
                return None  # the sentence or clause ended, or this is code
            if not number and following.rstrip(":,").lower() in _NOT_THE_SECRET:
                return None  # "the credential helper is ...", "the token count was ...": not the secret
            continue
        value = _SAID_VALUE.match(text, position)
        if value is not None and value.group("paren") is None:
            said = _said_value(value, kind, short)
            if said is not None and step.group("sep").lower() == "be" and not _will_be(text[said[0]:said[1]]):
                said = None  # "Password should be latin-1 encodable", "must be SHA256": what it is made of
            if said is not None and not _goes_on(text, said[1]):
                return said
        if kind == "password" and not short and aside is None and step.group("sep").lower() in ("is", "was", ":"):
            plain = _plain_password(text, position)
            if plain is not None:
                return plain
    return None


def _will_be(value: str) -> bool:
    """What a sentence says a password will be (2.9: "the new password will be Pq7!vX2m"): as after
    "pw is", a capital or a symbol besides . - _, and not all capitals (SHA256, UTF-8 say how it is
    made or written)."""
    return _short_word_password(value) and not value.isupper()


# Password managers: "the password is in 1Password" names where it is kept (2.5).
_MANAGERS = frozenset({"1password", "lastpass", "bitwarden", "keepass", "keepassxc", "dashlane", "keychain", "vault"})
_FLAG_WORDS = re.compile(r"password|passwd|passphrase|token|secret|api-?key", re.ASCII | re.IGNORECASE)
# A flag's value that is a word of the sentence the flag is named in, not its value (2.5).
_FLAG_PROSE = frozenset({"via", "on", "in", "at", "from", "with", "for", "is", "was", "to", "and", "or", "flag",
                         "option", "argument", "parameter", "when", "if", "instead", "only", "directly"})
# A password of plain words (2.5): "the admin password is sunflower", "the wifi password is correct
# horse battery staple." One word of 4+ letters, or three to six, ending the clause; not a word
# that says something of the password (required, wrong, stored, ...: the list and the endings of
# adjectives and participles) and, among several, no function word.
_PLAIN_RUN = re.compile(r"[ \t]*(?P<words>[A-Za-z]{3,24}(?:[ \t]+[A-Za-z]{3,24}){0,5})(?=[ \t]*(?:[.,;!?\r\n]|$))",
                        re.ASCII)
_PREDICATES = frozenset("""
required incorrect wrong invalid expired empty missing correct fine okay same different strong weak long short
secure insecure hidden masked encrypted hashed changed reset updated needed optional blank null none unknown
visible valid mandatory default unchanged unset set stored saved case sensitive too not also still now here
there below above attached shown known generated random temporary new old good bad simple complex easy hard
lost forgotten locked disabled enabled active inactive right left ready done secret private public personal
shared unique identical similar great nice cool broken working stale compromised leaked rotated revoked sent
emailed printed logged cached displayed redacted mine yours theirs his hers ours gone available unavailable
accepted rejected ignored this that what which where why when who the your our their its and but with for
from into over under about after before between through during without within along among than then
very quite really just only even much more most less least such each every any all both either neither
true false yes
""".split())
_PREDICATE_ENDINGS = ("ed", "ing", "able", "ible", "ive", "ous", "ful", "less", "al", "ent", "ant", "ic", "ory", "ary",
                      "ly", "ish")


def _plain_password(text: str, position: int) -> tuple[int, int, str] | None:
    """The span of a plain-word password a sentence states at ``position``, if it is one."""
    run = _PLAIN_RUN.match(text, position)
    if run is None:
        return None
    words = [word.lower() for word in run.group("words").split()]
    telling = sum(word in _PREDICATES or word.endswith(_PREDICATE_ENDINGS) for word in words)
    if len(words) == 2 or any(word in FUNCTION_WORDS for word in words) or telling > 1:
        return None  # "is the same", "is not set", "is case sensitive too"
    if len(words) == 1 and (len(words[0]) < 4 or telling or words[0] in _MANAGERS
                            or is_placeholder(words[0], quoted=True)):
        return None
    return run.start("words"), run.end("words"), _PROSE


# A YAML block scalar under a secret name (2.5): "password: |" and the lines indented under it.
_BLOCK_SCALAR = re.compile(r"[A-Za-z0-9_.-]{0,48}[\"']?[ \t]*:[ \t]*[|>][-+1-9]{0,2}[ \t]*\r?\n", re.ASCII)


def _block_scalar(text: str, start: int) -> tuple[int, int, str] | None:
    """The span of a block scalar's lines under a password or secret name at ``start``."""
    header = _BLOCK_SCALAR.match(text, start)
    if header is None:
        return None
    name_start = _name_start(text, start)
    kind = _word_class(text[name_start: header.start() + len(header.group().split(":")[0])].strip("\"' \t"))
    if kind not in ("password", "secret"):
        return None
    line_start = text.rfind("\n", 0, name_start) + 1
    indent = len(text[line_start:name_start]) - len(text[line_start:name_start].lstrip(" \t"))
    first = last = -1
    position = header.end()
    while position < len(text):
        newline = text.find("\n", position)
        line_end = len(text) if newline == -1 else newline
        line = text[position:line_end].rstrip("\r")
        content = line.lstrip(" \t")
        if content:
            if len(line) - len(content) <= indent:
                break
            first = position + len(line) - len(content) if first < 0 else first
            last = position + len(line.rstrip())
        position = line_end + 1
    if first < 0:
        return None
    lines = [line.strip() for line in text[first:last].splitlines()]
    if is_marker_at(lines[0], 0) or is_placeholder(" ".join(lines), quoted=False):
        return None
    if kind == "secret" and not any(looks_random(line) or _secret_in_sentence(line) for line in lines):
        return None
    return first, last, _PASSWORD if kind == "password" else _SECRET


def _said_value(match: re.Match[str], kind: str, short: bool) -> tuple[int, int, str] | None:
    group = next(name for name in ("dq", "sq", "bq", "paren", "bare") if match.group(name) is not None)
    value = match.group(group)
    if group == "bare":
        value = value.rstrip(".!?-")
    start = match.start(group)
    if not value or is_marker_at(value, 0) or is_placeholder(value, quoted=group != "bare"):
        return None
    if any(c.isspace() for c in value):
        # Words in quotes: a passphrase after a password word, or no secret ("a secret").
        allowed = kind == "password" and not short and _PASSPHRASE.fullmatch(value) is not None and len(value) >= 12
        return (start, start + len(value), _PROSE) if allowed else None
    if value.lower() in _MANAGERS:
        return None  # "my password is in 1Password": where it is kept, not what it is
    if kind == "password":
        allowed = _short_word_password(value) if short else _password_in_prose(value)
        if allowed and len(value) >= 16 and value.isalnum():
            allowed = looks_random(value) or _password_like(value)
    else:
        allowed = ((_secret_in_sentence(value) or looks_random(value)) and "/" not in value and not _UUID.fullmatch(value)
                   and not _IDENTIFIER.fullmatch(value) and not _NAME_EQUALS.match(value))
    return (start, start + len(value), _PROSE) if allowed else None


def _password_in_prose(value: str) -> bool:
    """A password in a sentence (2.3, later): 6+ characters with a letter and a digit or a symbol
    and not a name, a path or a number with units ("SZd1!N7Ibm1a", "Tigerfalcon7961@")."""
    if len(value) < 6 or not any(c.isalpha() for c in value):
        return False
    if value.isalnum() and not any(c.isdigit() for c in value):
        return False
    if _IDENTIFIER.fullmatch(value) or _UUID.fullmatch(value) or _NAME_EQUALS.match(value):
        return False
    if _SHORT_NAME.fullmatch(value) and not any(c.isupper() for c in value):
        return False  # user_42, node.v18 are names; with a capital (Girasole_77) a password (2.9)
    if _VERSION.fullmatch(value) or _FLAG.fullmatch(value):
        return False  # 2.13: a command's flag after a path naming a password (`--name /prod/db/password --type`)
    # 2.9: an "@" inside is a password's symbol (P@ssw0rd!, p@55word) unless a host follows it:
    # an address (deploy@example.com) or user@host is the e-mail and URL rules' to judge.
    return "/" not in value and "://" not in value and not _AT_HOST.search(value)


_AT_HOST = re.compile(r"@[A-Za-z0-9-]+\.[A-Za-z]", re.ASCII)


def _short_word_password(value: str) -> bool:
    """After "pass" / "pw" / "pwd" (a test count, a step, a directory too): a capital or a symbol
    besides . - _ as well ("pass: py3.11-linux" is a build name)."""
    return _password_in_prose(value) and (any(c.isupper() for c in value) or any(c in "!#$%&*+=?@^~" for c in value))


_VERSION = re.compile(r"[vV]?[0-9]+(?:\.[0-9]+)+(?:[-+.][A-Za-z0-9.]+)?", re.ASCII)
_FLAG = re.compile(r"--?[a-z][a-z-]*", re.ASCII)


_WORD_BEFORE = re.compile(r"([A-Za-z]+)[ \t]+\Z", re.ASCII)
# A UUID is an identifier wherever it is written; snake, kebab, dotted and camel-case names are
# identifiers too, however long.
_NAME_EQUALS = re.compile(r"[A-Za-z_][A-Za-z_.-]{0,40}=", re.ASCII)
# A short snake or dotted name with digits ("user_42", "node.v18"): a name, not a password.
_SHORT_NAME = re.compile(r"[A-Za-z]+(?:[_.][A-Za-z0-9]+)+", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)
_IDENTIFIER = re.compile(r"[a-z]+(?:[_.-][a-z]+[0-9]{0,3})+|[A-Za-z][a-z]+(?:[A-Z][a-z]+[0-9]{0,3})+|[A-Z]+(?:_[A-Z]+[0-9]{0,3})+", re.ASCII)


# A tool's whole output that is one secret (redact_event's secret-output, 2.5).
_BARE_SYMBOLS = frozenset("!#$%&*+=?@^~")
_HEX_OR_NUMBER = re.compile(r"[0-9a-fA-F]+|[0-9.,:+-]+", re.ASCII)
_BARE_VERSION = re.compile(r"[vV]?[0-9]+(?:\.[0-9]+)+[-+.A-Za-z0-9]*", re.ASCII)
_NAME_SHAPES = re.compile(r"[a-z]+(?:[_.-][a-z0-9]+)*|[A-Z][a-z]+(?:[A-Z][a-z]+)+|[A-Z][A-Z0-9_]*", re.ASCII)


def bare_secret(output: str) -> bool:
    """Whether a tool's whole output is one token that reads like a password or key (2.5): 8-128
    characters without a space, a letter and a digit, and mixed case or a symbol; not hex or a
    number (a commit, a hash, an id), a name, a path, a URL, an e-mail, a UUID or a version."""
    token = output.strip()
    if not 8 <= len(token) <= 128 or not token.isascii() or any(c.isspace() for c in token):
        return False
    if token.startswith(MARKER_PREFIX) or "/" in token or "\\" in token or "://" in token or ":" in token:
        return False
    if _HEX_OR_NUMBER.fullmatch(token) or _NAME_SHAPES.fullmatch(token) or _UUID.fullmatch(token):
        return False
    if "@" in token[1:-1] and "." in token.split("@")[-1]:
        return False  # an e-mail address
    letters, digits = any(c.isalpha() for c in token), any(c.isdigit() for c in token)
    mixed = any(c.isupper() for c in token) and any(c.islower() for c in token)
    if not (letters and digits and (mixed or any(c in _BARE_SYMBOLS for c in token))):
        return False
    return not _BARE_VERSION.fullmatch(token)


def _in_sentence(match: re.Match[str]) -> bool:
    """An unquoted ``name: value`` that more words follow on its line."""
    return match.group("bare") is not None and match.group("sep") == ":" and match.group("eol") is None


def _password_in_sentence(value: str) -> bool:
    """Policy 2.2: a password written in a sentence after ``password:`` ("password: hunter2 is
    wrong"): 6+ characters with a digit, which no word of prose ("must", "required") has."""
    return len(value) >= 6 and any(c.isdigit() for c in value) and not _UUID.fullmatch(value)


def _inside_marker(text: str, position: int) -> bool:
    """``position`` lies in a replacement marker ("[REDACTED:url-password]"): the rule name in
    it is no secret word of the text ("...:[REDACTED:url-password]@10.0.0.5:3306" kept its host)."""
    opened = text.rfind(MARKER_PREFIX, max(0, position - 64), position + 1)
    return opened != -1 and "]" not in text[opened:position]


def _secret_in_sentence(value: str) -> bool:
    """Policy 2.2: a short secret written in a sentence after a secret word that is not a
    password word ("the secret key is 7f3a9c2e1b", "my token was ab12cd34ef"): 8+ characters of
    letters and digits with at least two of each, which no word or number of prose has."""
    return (len(value) >= 8 and value.isascii() and value.isalnum() and sum(c.isdigit() for c in value) >= 2
            and sum(c.isalpha() for c in value) >= 2)


def _password_like(value: str) -> bool:
    """Policy 2.2: after a password word ("the artifactory password APuWrk5q…", a
    ``| DB_PASSWORD | … |`` table row), a value of 16+ characters mixing capitals, small letters
    and digits is a password even below the entropy a value needs after other secret words (a
    16-character password often repeats a letter or two: 3.45 bits, not 3.5)."""
    return (any(c.isdigit() for c in value) and any(c.isupper() for c in value) and any(c.islower() for c in value)
            and shannon_entropy(value) >= HEX_MIN_ENTROPY)


def _name_start(text: str, position: int) -> int:
    # Walk back over the identifier the keyword sits in (API_KEY, x-api-key, db.password).
    # Names are short, so this loop runs a few steps per candidate, never over whole texts.
    start = position
    limit = max(0, position - 64)
    while start > limit and text[start - 1] in _NAME_CHARS:
        start -= 1
    return start


# 2.10: a label naming a user and a password at once ("u/p: admin / Hunter2!x", "user/pass:
# deploy Xy7#pw9q"), read as "creds" is.
_PAIR_LABELS = r"u/p|user(?:name)?/pass(?:word)?|login/pass(?:word)?|user/pw"
_PAIR_LABEL_TRIGGERS = ("u/p", "user/p", "username/p", "login/p")


# A user and a password after a word for credentials, split by a slash (2.4): "the creds are
# deploy / Xy7#pw9q", "login: admin/S3cret!", "credentials for staging: ci / Tq8$wLm2". The word
# is followed by ":" / "=" or by connecting words ("login page/Home2" and "credentials for
# dev/staging2024" name pages and environments), and the password is judged as one after "pw is":
# a capital or a symbol besides . - _ as well. Only the password goes; the user stays searchable.
_PAIR_CONNECTORS = ("are", "is", "were", "was", "for", "the", "to", "of", "on", "my", "our", "your", "its", "with",
                    "as", "using", "use",
                    "here", "now", "staging", "prod", "production", "dev", "test", "admin", "root", "db",
                    "server", "user", "account", "details", "info")


def _credential_pair(match: re.Match[str]) -> bool:
    value = match.group("value")
    return _short_word_password(value) and not is_placeholder(value, quoted=False)


CREDENTIAL_PAIR_RULE = RegexRule(
    name=_PROSE,
    lower_triggers=("cred", "login", "zugangsdaten", "anmeldedaten", "identifiants", "wi-fi", "wifi", "wlan", *_PAIR_LABEL_TRIGGERS),
    anchored=True,
    description="a password written after a user and a slash in a sentence about credentials or a login",
    pattern=re.compile(
        # 2.16: a wireless network's name and password ("Wi-Fi: AcmeGuest / X").
        r"(?<![A-Za-z])(?:" + _PAIR_LABELS + r"|creds|credentials?|logins?|zugangsdaten|anmeldedaten|identifiants|credenciales|wi-?fi|wlan)(?![A-Za-z])"
        r"(?:(?:[ \t]+(?:" + "|".join(_PAIR_CONNECTORS) + r")(?![A-Za-z])){1,4}[ \t]*[:=]?|[ \t]*[:=])[ \t]*"
        r"[A-Za-z0-9_.@+-]{1,64}[ \t]*/[ \t]*"
        r"(?P<value>" + _PROSE_PASSWORD_CHARS + r"{6,128}?)(?=[.!?-]*(?!" + _PROSE_PASSWORD_CHARS + r"))",
        re.ASCII | re.IGNORECASE,
    ),
    group="value",
    check=_credential_pair,
)


# A user and a password joined by a colon after a word for credentials (2.9): "the creds are
# root:toor", "credentials: deploy:Hunter2x", "login with admin:Pq7!vX2m" (after login a password
# as after "pw is"). The pair is one token after ":" / "=" or is / are /
# were / was (not "credentials for db:migrate", a task); the password may be short and plain (toor
# is Kali's), but not a port or a time (digits only), a path or a name standing for it.
def _credential_colon(match: re.Match[str]) -> bool:
    value = match.group("value")
    if match.group("word").lower().startswith("login") and not _short_word_password(value):
        return False  # "login as root:wheel" names a group; after login the password is judged as after pw is
    return (not value.isdigit() and not is_placeholder(value, quoted=False) and not _IDENTIFIER.fullmatch(value)
            and not is_placeholder(match.group("user"), quoted=False))


# The words the user:password and user password readings follow ("creds", "login", "u/p").
_CREDENTIAL_WORDS = _PAIR_LABELS + r"|creds|credentials?|logins?"
_CREDENTIAL_TRIGGERS = ("cred", "login", *_PAIR_LABEL_TRIGGERS)

CREDENTIAL_COLON_RULE = RegexRule(
    name=_PROSE,
    lower_triggers=_CREDENTIAL_TRIGGERS,
    anchored=True,
    description="a password written after a user and a colon in a sentence about credentials or a login",
    pattern=re.compile(
        r"(?<![A-Za-z])(?P<word>" + _CREDENTIAL_WORDS + r")(?![A-Za-z])(?:[ \t]+(?:are|is|were|was|with|as|using)|[ \t]*[:=])[ \t]+"
        r"(?P<user>[A-Za-z_][A-Za-z0-9_.-]{0,63}):(?P<value>[A-Za-z0-9!#$%&*+\-.<=>?@^_~]{4,128}?)"
        r"(?=[.!?]*(?![A-Za-z0-9!#$%&*+\-.<=>?@^_~:/]))",
        re.ASCII | re.IGNORECASE,
    ),
    group="value",
    check=_credential_colon,
)


# A user and a password side by side after a word for credentials (2.10): "creds: admin
# Xy7#pw9q", "u/p: deploy Hunter2!x". The pair ends its clause, and the password is judged as
# after "pw is" and is no plain words: "credentials: see README.md", "creds are in Vault"
# and "login: admin Dashboard" stay.
def _credential_space(match: re.Match[str]) -> bool:
    value = match.group("value")
    return (_short_word_password(value) and not plain_words(value) and not is_placeholder(value, quoted=False)
            and not is_placeholder(match.group("user"), quoted=False))


CREDENTIAL_SPACE_RULE = RegexRule(
    name=_PROSE,
    lower_triggers=_CREDENTIAL_TRIGGERS,
    anchored=True,
    description="a password written after a user and a space in a sentence about credentials or a login",
    pattern=re.compile(
        r"(?<![A-Za-z])(?:" + _CREDENTIAL_WORDS + r")(?![A-Za-z])"
        r"(?:[ \t]+(?:are|is|were|was)|[ \t]*[:=])[ \t]+"
        r"(?P<user>[A-Za-z_][A-Za-z0-9_.@-]{0,63})[ \t]+(?P<value>" + _PROSE_PASSWORD_CHARS + r"{6,128}?)"
        r"(?=[.!?]*(?:[ \t]*(?:[,;)]|\r?\n|\Z)))",
        re.ASCII | re.IGNORECASE,
    ),
    group="value",
    check=_credential_space,
)

# 2.14: a login given as USER / PASSWORD after "log in with" / "sign in as" ("Log in with `admin` /
# `Xk9#mPq2z` on staging"), code spans and bold marks around either; the password judged as above.
# 2.16: USER with PASSWORD ("Log in as root with fw9*RWS63 and change it"), which holds a symbol
# or looks random: after "with" come ways to log in too ("with OAuth2.0", "with Hunter2FA").
# 2.18: a one-dash password flag (`-password X`) is read only in a text that holds one: the flag reading
# is case-insensitive and tried at every dash, which a text without "--" is spared.
_ONE_DASH_FLAG = re.compile(r"(?<![a-z0-9_-])-[a-z]{0,24}pass(?:word|wd|phrase)[ \t]", re.ASCII)


# 2.18: also a word and three digits or more, a year or a count as people build passwords ("with
# Hunter2024"); a way to log in carries a version's one or two (OAuth2, FIDO2, Hunter2FA).
_WORD_AND_NUMBER = re.compile(r"[A-Za-z]{3,}[A-Za-z0-9]*[0-9]{3,}[A-Za-z0-9]*", re.ASCII)


def _login_pair(match: re.Match[str]) -> bool:
    value = match.group("value")
    if match.group("with") and not (any(c in "!#$%&*+=?@^~" for c in value) or looks_random(value)
                                    or (_WORD_AND_NUMBER.fullmatch(value) and not _VERSION.fullmatch(value))):
        return False
    return _credential_space(match)

# Sentence marks end it only before a space or the line's end: `Hunter!22` holds one.
LOGIN_PAIR_RULE = RegexRule(
    name=_PROSE,
    lower_triggers=("log in ", "login ", "sign in ", "signin ", "log-in "),
    anchored=True,
    description="a password after USER / in a sentence that logs in with them (2.14)",
    pattern=re.compile(
        r"(?:log[ -]?in|sign[ -]?in)[ \t]+(?:with|as|using)[ \t]+[`*'\"]{0,2}(?P<user>[A-Za-z_][A-Za-z0-9_.@-]{0,63})[`*'\"]{0,2}"
        # 2.16: or after "with" ("Log in as root with X and then change it").
        r"(?:[ \t]*/[ \t]*|[ \t]+(?P<with>with|using)[ \t]+)[`*'\"]{0,2}(?P<value>" + _PROSE_PASSWORD_CHARS + r"{6,128}?)"
        r"(?=[`*'\"]{0,2}[.!?,;)]*(?:[ \t]|\r?\n|\Z))",
        re.ASCII | re.IGNORECASE,
    ),
    group="value",
    check=_login_pair,
)


# Secrets of devices and second factors (2.10), which no password word names: a PIN ("PIN:
# 4821", "pin code 482193", "the PIN for the card is 5809"), a passcode, a Wi-Fi key ("the wifi
# key is Tr4vel-Mug-88", wpa_supplicant's psk="…") and a TOTP seed ("the 2FA secret is JBSW…").
# A PIN is short digits, so the word before it decides: a bare "pin" (a verb too: "pin 2024
# versions") needs ":" / "=" / is / was or capitals; "pin code", "PIN number", "passcode" and
# "PUK" need nothing. LED_PIN = 13 and pinned are no PIN (a letter, digit or _ before or after).
_DEVICE_CONNECTORS = ("for", "of", "to", "on", "the", "my", "your", "our", "his", "her", "their", "card", "phone",
                      "sim", "bank", "debit", "atm", "laptop", "device", "account", "door", "new", "old", "default",
                      "now", "set", "changed", "has", "been")


def _pin(match: re.Match[str]) -> bool:
    if match.group("said") or match.group("word").lower() != "pin":
        return True
    # A bare pin before digits is a verb ("pin 2024 versions") unless written PIN right before them.
    return match.group("word") == "PIN" and not match.group("between")


def _passcode(match: re.Match[str]) -> bool:
    value = match.group("value")
    return (any(c.isdigit() for c in value) and not plain_words(value) and not is_placeholder(value, quoted=False)
            and not _VERSION.fullmatch(value))


def _wifi_key(match: re.Match[str]) -> bool:
    value = match.group("value")
    return _short_word_password(value) and not plain_words(value) and not is_placeholder(value, quoted=False)


def _psk(match: re.Match[str]) -> bool:
    value = match.group("value").strip("\"'")
    return len(value) >= 8 and not is_placeholder(value, quoted=True) and not plain_words(value)


def _totp_seed(match: re.Match[str]) -> bool:
    value = match.group("value").replace(" ", "")
    return len(value) >= 16 and (any(c in "234567" for c in value) or value.isupper())


_DEVICE_BETWEEN = r"(?P<between>(?:[ \t]+(?:" + "|".join(_DEVICE_CONNECTORS) + r")(?![A-Za-z])){0,5})"
_DEVICE_SAID = r"(?P<said>[ \t]*[:=]|[ \t]+(?:is|was|will[ \t]+be|is[ \t]+now)(?![A-Za-z])[ \t]*:?)?[ \t]*[\"'`]?"
DEVICE_SECRET_RULES = (
    RegexRule(
        name=_PROSE, lower_triggers=("pin", "puk"), anchored=True, check=_pin, group="value",
        description="a PIN or PUK: 4-8 digits after the word",
        pattern=re.compile(
            r"(?<![A-Za-z0-9_-])(?P<word>pin(?:[ \t-]?(?:code|number|no\.?))?|puk(?:[ \t-]?code)?)(?![A-Za-z0-9_-])"
            + _DEVICE_BETWEEN + _DEVICE_SAID + r"(?P<value>[0-9]{4,8})(?![0-9A-Za-z_/-]|[.,:][0-9])",
            re.ASCII | re.IGNORECASE),
    ),
    RegexRule(
        name=_PROSE, lower_triggers=("passcode", "pass code", "pass-code"), anchored=True, check=_passcode, group="value",
        description="a passcode: 4-32 characters with a digit after the word",
        pattern=re.compile(
            r"(?<![A-Za-z0-9_-])pass[ \t-]?codes?(?![A-Za-z0-9_-])"
            # 2.18: or any few words on, up to the sentence's is / was ("the passcode they texted me was X").
            r"(?:(?:[ \t]+[A-Za-z'-]{1,20}){1,6}?(?=[ \t]+(?:is|was)[ \t]))?" + _DEVICE_BETWEEN + _DEVICE_SAID
            + r"(?P<value>[A-Za-z0-9!#$%&*+?@^_~-]{4,32})(?![A-Za-z0-9!#$%&*+?@^_~-])",
            re.ASCII | re.IGNORECASE),
    ),
    RegexRule(
        name=_PROSE, lower_triggers=("wifi", "wi-fi", "wlan", "wpa", "wep"), anchored=True,
        check=_wifi_key, group="value",
        description="a Wi-Fi key written after its name, judged as a password after \"pw is\"",
        pattern=re.compile(
            r"(?<![A-Za-z0-9_])(?:wi-?fi|wlan|wpa[23]?(?:[ \t-](?:personal|psk))?|wep)[ \t-]?"
            r"(?:network[ \t-])?(?:key|code|psk|pass(?:word|phrase)?|pw)(?![A-Za-z0-9_-])"
            + _DEVICE_BETWEEN + r"(?:[ \t]*[:=]|[ \t]+(?:is|was|will[ \t]+be)(?![A-Za-z])[ \t]*:?)[ \t]*[\"'`]?"
            + r"(?P<value>" + _PROSE_PASSWORD_CHARS + r"{6,63}?)(?=[\"'`]?[.!?]*(?!" + _PROSE_PASSWORD_CHARS + r"))",
            re.ASCII | re.IGNORECASE),
    ),
    RegexRule(
        name=_PROSE, lower_triggers=("psk",), anchored=True, check=_psk, group="value",
        description="wpa_supplicant / hostapd / NetworkManager psk=\"…\" (8-63 characters, or 64 hex digits)",
        pattern=re.compile(
            r"(?<![A-Za-z0-9_.-])(?:wpa_)?psk[ \t]*[=:][ \t]*(?P<value>\"[^\"\r\n]{8,63}\"|'[^'\r\n]{8,63}'|[^\s\"'#;]{8,64})",
            re.ASCII | re.IGNORECASE),
    ),
    RegexRule(
        name=_PROSE, lower_triggers=("totp", "otp", "2fa", "mfa", "authenticator", "two-factor"), anchored=True,
        check=_totp_seed, group="value",
        description="a TOTP seed: base32 after a second factor's secret, key or seed",
        pattern=re.compile(
            r"(?<![A-Za-z0-9_])(?:totp|otp|2fa|mfa|authenticator|two-factor)(?:[ \t-](?:app|setup|auth))?[ \t-]"
            r"(?:secret|seed|key|setup[ \t-]key)(?![A-Za-z0-9_])" + _DEVICE_BETWEEN + _DEVICE_SAID
            + r"(?P<value>(?:[A-Za-z2-7]{4}[ ]){3,15}[A-Za-z2-7]{4}|[A-Za-z2-7]{16,64})(?![A-Za-z0-9])",
            re.ASCII | re.IGNORECASE),
    ),
)


class AccountRowRule(Rule):
    """A headerless markdown table row giving an account and its password (2.10): ``| prod-db |
    admin | S3cr3t!pw |``. A table with a header is read by its column names; without one, a cell
    holding a well-known account name (or an address the e-mail rule replaced) followed by a
    cell that reads as a password after "pw is", no plain words, loses that cell."""

    _accounts = ("admin", "administrator", "root", "postgres", "sa", "ubuntu", "ec2-user", "deploy", "deployer",
                 "guest", "oracle", "mysql", "pi", "elastic", "jenkins", "sysadmin", "superuser", "dbadmin",
                 "[REDACTED:email]")
    _pair = re.compile(r"\|[ \t]*`?(?P<user>" + "|".join(re.escape(a) for a in _accounts) + r")`?[ \t]*\|[ \t]*`?"
                       r"(?P<value>[^\s|`]{6,128})`?[ \t]*(?=\|)", re.ASCII | re.IGNORECASE)

    def __init__(self) -> None:
        super().__init__(name=_PASSWORD, triggers=("|",), needs=frozenset("|"), literals=("|",),
                         description="a headerless table row's password after a well-known account name")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._pair.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        spans = []
        line_end = -1
        for match in self._pair.finditer(text):
            if match.start() > line_end:  # each line is found once, however many rows it holds
                line_start = text.rfind("\n", line_end + 1, match.start()) + 1 or line_end + 1
                line_end = text.find("\n", match.end())
                line_end = len(text) if line_end == -1 else line_end
                line = text[line_start:line_end].strip()
            if not (line.startswith("|") or (line.endswith("|") and line.count("|") >= 4)):
                continue  # a shell pipe ("grep x | admin | ..."), not a table row (one pasted after words may be)
            value = match.group("value")
            if (is_marker_at(value, 0) or not _short_word_password(value) or plain_words(value)
                    or is_placeholder(value, quoted=False)):
                continue
            spans.append((match.start("value"), match.end("value"), _PASSWORD))
        return replace_spans(text, spans, hits) if spans else text


ACCOUNT_ROW_RULE = AccountRowRule()


class PasswordBeforeRule(Rule):
    """A password written before its word (2.9): "Xy7#pw9q is the root password", "hunter2x was
    my old password". Each password word is found with ``str.find`` and the value read backwards
    on its line; the word must end the clause or lead to what it opens ("... password for the
    box"), so "SHA256 is the password hash" stays, and the value is judged as after "pw is": a
    letter, a digit, and a capital or a symbol."""

    _words = ("password", "passphrase", "passwd", "pw")
    _before = re.compile(r"(?:^|(?<=[\s\"'`(]))[\"'`]?(?P<value>" + _PROSE_PASSWORD_CHARS + r"{6,128}?)[\"'`]?[ \t]+"
                         r"(?:is|was|as)[ \t]+(?:[A-Za-z'-]{1,16}[ \t]+){0,3}\Z", re.ASCII)
    # 2.15: a closing quote or a table's bar ends the clause too (the sentence in a JSON string or a cell).
    _after = re.compile(r"(?:passwords?|passphrase|passwd|pw)(?![A-Za-z0-9_-])(?=[ \t]*(?:[.,;!?)\r\n\"'`|]|\Z"
                        r"|(?:for|on|of|to|in|at|here|now|there|too|again|and|but)(?![A-Za-z])))", re.ASCII | re.IGNORECASE)

    def __init__(self) -> None:
        super().__init__(name=_PROSE, lower_triggers=self._words, literals=self._words,
                         description="a password written before its word (\"X is the root password\")")

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), self._before.pattern, self._after.pattern]

    _gate = (" is ", " was ", " as ")  # 2.10: "use X as the password" too; a text without any is left alone

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if not any(sign in text for sign in self._gate):
            return text
        lowered = scan.lower()
        spans = []
        for word in self._words:
            position = lowered.find(word)
            while position != -1:
                span = self._value_before(text, position)
                if span is not None:
                    spans.append(span)
                position = lowered.find(word, position + 1)
        if not spans:
            return text
        return replace_spans(text, sorted(set(spans)), hits)

    def _value_before(self, text: str, position: int) -> tuple[int, int, str] | None:
        if position and (text[position - 1].isalnum() or text[position - 1] in "_-"):
            return None  # inside a longer name (DB_PASSWORD, getpass)
        if self._after.match(text, position) is None:
            return None
        line_start = max(text.rfind("\n", 0, position) + 1, position - 200)
        before = self._before.search(text, line_start, position)
        if before is None:
            return None
        value = before.group("value")
        if is_marker_at(value, 0) or is_placeholder(value, quoted=False) or not _short_word_password(value):
            return None
        if value.isupper() or (value.islower() and value.isalnum()):
            return None  # SHA256, md5sum2: names of things a password is made with, not one
        return before.start("value"), before.end("value"), _PROSE


# 2.15: a secret alone on the line after a sentence that names it ("Here is your new API key:",
# "The database password is" / `value` / "(keep it safe)"): the prose readings stop at the line's
# end. The naming line is a sentence (no code's `= { } ; < >`, no `for` / `if` / `def` leading it)
# whose secret word is followed only by connecting words or a parenthesis before `:` or a final
# is / are / was (a word before it or after it: `password:` alone is YAML's); the next line is one token and nothing else (a bullet, backticks or bold around
# it), judged as after the word on one line but shaped as a secret: a letter and a digit.
_ABOVE_WORDS = ("pass", "pwd", "secret", "token", "key", "credential", "creds")
_ABOVE_CONNECTORS = (*_PASSWORD_CONNECTORS, "below", "follows", "following", "generated", "created", "issued", "initial",
                     "temporary", "default", "one-time",
                     # 2.16: "Here's the token you asked for —": what was asked for, rotated, …
                     "asked", "requested", "wanted", "needed", "just", "rotated")
_NAMED_ABOVE = re.compile(
    r"(?P<word>passw(?:or)?ds?|passphrase|passcode|pwd|tokens?|secrets?|keys?|credentials?|creds)"
    r"(?![A-Za-z0-9_-])(?P<rest>(?:[ \t]+(?:(?:" + "|".join(_ABOVE_CONNECTORS) + r")(?![A-Za-z0-9_-])|\([^()\r\n]{1,48}\)))*)"
    # 2.16: a dash ends the naming line as a colon does ("… you asked for —", "API key -").
    r"(?P<colon>[ \t]*[:\uff1a\u2014\u2013]|[ \t]+-)?(?:\*\*|__)?[ \t]*\r?\n(?:[ \t]*\r?\n)?"
    # 2.22: the value alone in a code fence under the naming line ("Here is the key:" / ``` / VALUE / ```):
    # the fence's lines are markdown's, not lines between; the fence must close right after the value.
    # Review: a longer fence (```` holds a ``` inside) and a blank line before the close are the same fence.
    r"(?:[ \t]*(?P<fence>`{3,10}|~{3,10})[A-Za-z0-9_+-]{0,20}[ \t]*\r?\n)?"
    r"[ \t]*(?:[-*>][ \t]+)?(?:\*\*)?(?P<q>[`\"']?)(?P<value>[^\s`\"'][^\s`\"']{5,255})(?P=q)(?:\*\*)?[ \t]*\r?"
    r"(?(fence)\n(?:[ \t]*\r?\n)?[ \t]*(?P=fence)|(?=\n|\Z))",
    re.ASCII | re.IGNORECASE,
)
_CODE_LINE = re.compile(r"[ \t]*(?:for|if|elif|while|def|case|with|class|except|else|return|switch|function|fn|match)\b"
                        r"|[^\r\n]*[={};<>]", re.ASCII)
_FILE_NAME = re.compile(r"[^\s]+\.(?:json|ya?ml|txt|pem|key|env|py|js|ts|md|sh|toml|ini|cfg|conf|log|csv|crt|p12)", re.ASCII | re.IGNORECASE)
_TOKEN_SHAPED = re.compile(r"[A-Za-z0-9_+/=.~-]{8,256}", re.ASCII)


def _named_above(match: re.Match[str]) -> bool:
    text, value = match.string, match.group("value")
    rest = match.group("rest").split()
    if match.group("colon") is None and (not rest or rest[-1].lower() not in ("is", "are", "was", "were")):
        return False
    line_start = text.rfind("\n", 0, match.start()) + 1
    if _CODE_LINE.match(text, line_start, match.start()) or _inside_marker(text, match.start()):
        return False
    if not text[line_start: match.start()].strip(" \t#*-") and not rest:
        return False  # a YAML key (`password:` over a list or a value): no sentence names it
    if match.start() > line_start and (text[match.start() - 1].isalnum() or text[match.start() - 1] in "_$.-"):
        return False  # inside a longer name (DB_PASSWORD:, monkey:)
    if is_marker_at(value, 0) or is_placeholder(value, quoted=False) or _NAME_EQUALS.match(value) or _FILE_NAME.fullmatch(value):
        return False
    word = match.group("word")
    if word.lower().startswith("key"):
        before = _WORD_BEFORE.search(text, max(line_start, match.start() - 32), match.start())
        word = f"{before.group(1)} {word}" if before else word  # "API key", "secret key"; "primary key" is none
    kind = name_class(word)
    if kind == "password":
        return _password_in_prose(value) and any(c.isdigit() for c in value)
    if kind is None or not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False  # "primary key:", a word, a number
    if looks_random(value):
        return True
    if kind != "secret" or _TOKEN_SHAPED.fullmatch(value) is None:
        return False  # a bare "key:" gives away only random values
    return not (_IDENTIFIER.fullmatch(value) or _SHORT_NAME.fullmatch(value) or _VERSION.fullmatch(value)
                or (_HEX_OR_NUMBER.fullmatch(value) and len(value) <= 12))


# How a naming line ends: `in` tests (C speed) before the secret words are each tried, as most texts
# holding "key" or "token" have no such line. Spaces before the break are rare enough to test too.
_NAMING_ENDS = (":\n", ":\r", ": \n", "\uff1a", " is\n", " is\r", " is \n", " are\n", " was\n", " were\n", "**\n", "__\n",
                "\u2014\n", "\u2013\n", " -\n")


class _NamedAboveRule(RegexRule):
    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), *_NAMING_ENDS, _CODE_LINE.pattern, _FILE_NAME.pattern, _TOKEN_SHAPED.pattern]

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if not any(end in text for end in _NAMING_ENDS):
            return text
        return super().apply(scan, hits)


NAMED_ABOVE_RULE = _NamedAboveRule(
    name=_PROSE, lower_triggers=_ABOVE_WORDS, needs=frozenset("\n"), anchored=True, group="value", check=_named_above,
    description="a secret alone on the line after a sentence naming it (\"Here is your API key:\" / VALUE) (2.15)",
    pattern=_NAMED_ABOVE,
)
