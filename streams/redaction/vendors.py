"""The gitleaks default rules (``streams.redaction.ported``), run at stream speed.

gitleaks tries every rule whose keyword occurs in a text; testing some 250 keywords one by one
costs Python more than the whole rest of the policy, so the ported rules are run differently:

- **prefix tokens** (``glsa_``, ``dop_v1_``, ``sk-ant-api03-``, ``dp.pt.``): the first ``_``,
  ``-`` or ``.`` of every prefix is a literal the regex engine jumps to in C, and a lookahead
  keeps only separators followed by a run of token characters; at each such place the word in
  front is looked up in a table of prefix heads, and only a known prefix runs its pattern.
  Prefixes without a separator (``AKCp``, ``EZAK``) start their own pattern with the literal.
- **keyword rules** (a handful of odd shapes): the keyword is searched with ``in``.
- **named rules** (a vendor keyword in a name and a value of a given shape): no scan of their
  own; the assignment and prose rules ask :func:`vendor_rule` about each name they read.

A match whose entropy is below the rule's minimum (``glsa_XXXX…``) is left alone.
"""

from __future__ import annotations

import bisect
import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from streams.redaction.base import LONG_TOKEN, Rule, Scan, is_marker_at, plain_words, replace_spans
from streams.redaction.entropy import shannon_entropy
from streams.redaction.ported import KEYWORD_RULES, NAMED_RULES, PREFIX_RULES

__all__ = ["KeywordRule", "PrefixTokenRule", "ported_rule_names", "token_heads", "vendor_rule"]

_SEPARATORS = "_-.~"
# Prefixes without a separator are looked up by (at most) their first four characters.
_HEAD = 4
_FLAGS = re.ASCII
# A separator followed by at least this many token characters can start a token's body.
# A separator opens the gate only when at least 12 token characters follow, with a digit or a
# capital letter among them: random bodies have one, snake_case, kebab-case and dotted names,
# dates, versions and decimals do not.
_GATES = {sep: re.compile(re.escape(sep) + r"(?=[a-z_.+/=-]{0,24}[0-9A-Z])(?=[A-Za-z0-9_.+/=-]{12})", re.ASCII)
          for sep in _SEPARATORS}
_VALUE_GROUP = frozenset({"curl-auth-header", "curl-auth-user", "kubernetes-secret-yaml", "nuget-config-password",
                          "freemius-secret-key", "sidekiq-sensitive-url", "azure-ad-client-secret",
                          "airtable-personnal-access-token", "clickhouse-cloud-api-secret-key", "heroku-api-key-v2",
                          "openshift-user-token", "perplexity-api-key"})
# Heads shorter than this (sk_, hf_, s-) must start a word; longer ones may be glued to one.
_SHORT_HEAD = 4
# A token is extended over directly following characters of the same kind, so a token a little
# longer than its format says is removed whole rather than cut.
_TAIL = re.compile(r"[A-Za-z0-9]*", re.ASCII)
_TOKEN_END = re.compile(r"[A-Za-z0-9+/=_.~-]", re.ASCII)  # what a token's last character may be


@dataclass(frozen=True)
class _Ported:
    name: str
    pattern: re.Pattern[str]
    entropy: float
    group: int

    def find(self, text: str, start: int) -> tuple[int, int] | None:
        match = self.pattern.match(text, start)
        if match is None:
            return None
        begin, end = match.span(self.group)
        if begin < 0 or begin == end or shannon_entropy(match.group(self.group)) < self.entropy:
            return None
        if not _TOKEN_END.match(text, end - 1):
            # 2.7: the pattern took the character that ends the token (gitleaks' `(?:[^…]|\Z)`):
            # the token ends before it, and is not extended over the next line's first word.
            return begin, end - 1
        end = _TAIL.match(text, end).end()  # type: ignore[union-attr]
        cut = text.rfind("\n", begin, end)
        if cut != -1 and plain_words(text[cut + 1: end]):
            # 2.7: a format that may wrap (base64 across lines) does not take a log line's first
            # word (`…==` then `FAILED`) for the rest of its token.
            end = cut - 1 if text[cut - 1: cut] == "\r" else cut
        return begin, end


def _compile(name: str, source: str, ci: bool, entropy: float) -> _Ported:
    pattern = re.compile(source, _FLAGS | (re.IGNORECASE if ci else 0))
    # A group is the secret only in rules that match context around it; elsewhere groups are
    # mere repetition (([a-z0-9]{4}-){3}) and the whole match is the token.
    group = 1 if name in _VALUE_GROUP else 0
    return _Ported(name, pattern, entropy, group)


class PrefixTokenRule(Rule):
    """Every ported token format that starts with a literal prefix (see the module)."""

    def __init__(self) -> None:
        super().__init__(name="ported-token", description="gitleaks token formats by literal prefix "
                         "(streams/redaction/ported.py PREFIX_RULES)")
        heads: dict[str, dict[str, list[tuple[str, bool, _Ported]]]] = {sep: {} for sep in _SEPARATORS}
        plain: dict[tuple[str, bool], list[Any]] = {}
        # By lower-cased literal (see Scan.literal_hits): prefixes with a separator whole, the
        # others by the head they are looked up by.
        separated: dict[str, list[tuple[str, bool, _Ported, int]]] = {}
        for name, prefixes, source, ci, entropy in PREFIX_RULES:
            rule = _compile(name, source, ci, entropy)
            for prefix in prefixes:
                cut = min((prefix.find(sep) for sep in _SEPARATORS if sep in prefix[1:]), default=-1)
                if cut <= 0:
                    # Scanned for its first four characters; the rule's pattern checks the rest.
                    entries = plain.setdefault((prefix[:_HEAD].lower() if ci else prefix[:_HEAD], ci), [])
                    if rule not in entries:
                        entries.append(rule)
                else:
                    heads[prefix[cut]].setdefault(prefix[:cut].lower(), []).append((prefix.lower() if ci else prefix, ci, rule))
                    separated.setdefault(prefix.lower(), []).append((prefix.lower() if ci else prefix, ci, rule, cut))
        # Per separator: the last two characters of each head -> (head length, entries), so a
        # gate hit costs one slice and one lookup (heads of one character are keyed by it alone).
        index: dict[str, dict[str, list[tuple[int, list[tuple[str, bool, _Ported]]]]]] = {}
        for sep, table in heads.items():
            for head, entries in table.items():
                index.setdefault(sep, {}).setdefault(head[-2:], []).append((len(head), entries))
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_plain", [(re.compile(re.escape(literal)), ci, rules)
                                            for (literal, ci), rules in sorted(plain.items())])
        # The same prefixes by their first 3-4 characters ("/i": compare lower-cased).
        by_head: dict[str, tuple[_Ported, ...]] = {}
        for (literal, ci), rules in plain.items():
            key = literal.lower() + "/i" if ci else literal
            by_head[key] = tuple(dict.fromkeys(by_head.get(key, ()) + tuple(rules)))
        object.__setattr__(self, "_by_head", by_head)
        firsts = {literal[0] for literal, _ in plain} | {literal[0].upper() for literal, ci in plain if ci}
        object.__setattr__(self, "needs", frozenset(_SEPARATORS) | frozenset(firsts))
        object.__setattr__(self, "_separated", separated)
        object.__setattr__(self, "_plain_heads", frozenset(literal.lower() for literal, _ in plain))
        plain_by_literal: dict[str, list[tuple[int, str, bool, list[_Ported]]]] = {}
        for number, ((literal, ci), rules) in enumerate(sorted(plain.items())):
            plain_by_literal.setdefault(literal.lower(), []).append((number, literal, ci, rules))
        object.__setattr__(self, "_plain_by_literal", plain_by_literal)
        object.__setattr__(self, "literals", tuple(sorted(set(separated) | {literal.lower() for literal, _ in plain})))

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), *(f"{n}|{'|'.join(p)}|{s}|{c}|{e}" for n, p, s, c, e in PREFIX_RULES),
                *(g.pattern for g in _GATES.values()), _TAIL.pattern, str(_SHORT_HEAD)]

    def hit_names(self) -> tuple[str, ...]:
        return tuple(sorted({row[0] for row in PREFIX_RULES}))

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if len(text) < LONG_TOKEN or not scan.has_long_token():
            return text  # every ported token holds a long run of token characters
        if scan.literal_hits is None:
            spans = self._at_separators(scan)
            spans += self._at_run_heads(scan) if text.isascii() else self._at_plain_literals(scan)
        else:
            spans = self._at_literals(scan)
        return replace_spans(text, spans, hits)

    def _at_separators(self, scan: Scan) -> list[tuple[int, int, str]]:
        """Prefixes with a separator, found from every separator a gate lets through."""
        text = scan.text
        lowered = scan.lower()
        spans: list[tuple[int, int, str]] = []
        index: dict[str, dict[str, list[tuple[int, list[tuple[str, bool, _Ported]]]]]] = self._index  # type: ignore[attr-defined]
        for sep, gate in _GATES.items():
            if sep not in text:
                continue
            table = index[sep]
            for hit in gate.finditer(text):
                position = hit.start()
                candidates = table.get(lowered[position - 2: position]) if position >= 2 else None
                single = table.get(lowered[position - 1: position]) if position >= 1 else None
                if candidates is None and single is None:
                    continue
                for size, entries in (candidates or []) + (single or []):
                    start = position - size
                    if start < 0 or (size < _SHORT_HEAD and start and text[start - 1].isalnum()):
                        continue  # a short head glued to a word is part of that word (task_, mask-)
                    for prefix, ci, rule in entries:
                        if (lowered if ci else text).startswith(prefix, start):
                            found = rule.find(text, start)
                            if found is not None:
                                spans.append((*found, rule.name))
        return spans

    def _at_run_heads(self, scan: Scan) -> list[tuple[int, int, str]]:
        """Prefixes without a separator in an ASCII text: the prefix of a long token starts its
        letter-and-digit run, so the run's first characters are looked up instead of scanning
        the text once per prefix."""
        text = scan.text
        spans: list[tuple[int, int, str]] = []
        by_head: dict[str, tuple[_Ported, ...]] = self._by_head  # type: ignore[attr-defined]
        starts = []
        for start, end in scan.long_runs():
            starts.append(start)
            for joint in "-=":  # a token may start after a dash or an equals sign (key=AKCp...)
                joint_at = text.find(joint, start, end)
                while joint_at != -1:
                    starts.append(joint_at + 1)
                    joint_at = text.find(joint, joint_at + 1, end)
        for start in starts:
            for size in (3, 4):
                head = text[start: start + size]
                _find_at(by_head.get(head, ()) + by_head.get(head.lower() + "/i", ()), text, start, spans)  # type: ignore[operator]
        return spans

    def _at_plain_literals(self, scan: Scan) -> list[tuple[int, int, str]]:
        """Prefixes without a separator in a non-ASCII text, at each occurrence not glued to a word."""
        text = scan.text
        lowered = scan.lower()
        spans: list[tuple[int, int, str]] = []
        for literal, ci, rules in self._plain:  # type: ignore[attr-defined]
            for hit in literal.finditer(lowered if ci else text):
                start = hit.start()
                if start and text[start - 1].isalnum():
                    continue
                _find_at(rules, text, start, spans)
        return spans

    def _at_literals(self, scan: Scan) -> list[tuple[int, int, str]]:
        """What :meth:`_at_separators` and :meth:`_at_run_heads` (ASCII texts) or
        :meth:`_at_plain_literals` (others) find, read from where the automaton found a prefix
        (``Scan.literal_hits``) instead of from every separator, long run or literal search."""
        text = scan.text
        ascii_text = text.isascii()
        plain_by_literal: dict[str, list[tuple[int, str, bool, list[_Ported]]]] = self._plain_by_literal  # type: ignore[attr-defined]
        searched_to: dict[int, int] = {}  # as a literal search: occurrences never overlap
        separated: dict[str, list[tuple[str, bool, _Ported, int]]] = self._separated  # type: ignore[attr-defined]
        plain_heads: frozenset[str] = self._plain_heads  # type: ignore[attr-defined]
        by_head: dict[str, tuple[_Ported, ...]] = self._by_head  # type: ignore[attr-defined]
        spans: list[tuple[int, int, str]] = []
        runs: list[tuple[int, int]] | None = None
        run_starts: list[int] = []
        # In order of start, each token's end as replace_spans will keep it (2.21): a token that
        # starts inside one kept is dropped there, so it is not read. A base64 token may run over
        # line breaks, and each line of one starting with a prefix read all the lines after it.
        placed: list[tuple[int, int, str]] = []
        pushed = done = 0
        for end, literal in sorted(scan.literal_hits or (), key=lambda hit: hit[0] - len(hit[1])):
            start = end - len(literal) + 1
            for span in spans[pushed:]:
                heapq.heappush(placed, span)
            pushed = len(spans)
            while placed and placed[0][0] < start:
                begin, finish, _ = heapq.heappop(placed)
                if begin >= done and not is_marker_at(text, begin):
                    done = finish
            inside = start < done  # a token from here starts inside one kept, unless its value group starts later
            for prefix, ci, rule, cut in separated.get(literal, ()):
                if not ci and not text.startswith(prefix, start):
                    continue
                if cut < _SHORT_HEAD and start and text[start - 1].isalnum():
                    continue  # a short head glued to a word is part of that word (task_, mask-)
                if _GATES[prefix[cut]].match(text, start + cut) is None:
                    continue
                found = None if inside and not rule.group else rule.find(text, start)
                if found is not None:
                    spans.append((*found, rule.name))
            if not ascii_text:
                for number, head, ci, rules in plain_by_literal.get(literal, ()):
                    if start < searched_to.get(number, 0) or not (ci or text.startswith(head, start)):
                        continue
                    searched_to[number] = start + len(head)
                    if start and text[start - 1].isalnum():
                        continue
                    _find_at([rule for rule in rules if rule.group] if inside else rules, text, start, spans)
            elif literal in plain_heads:
                # As _at_run_heads: only where a long run starts, or after a dash or an equals
                # sign inside one.
                if runs is None:
                    runs = scan.long_runs()
                    run_starts = [run_start for run_start, _ in runs]
                # The run starting at or last before this start (runs are apart and in order): one
                # lookup, not a pass over every run per prefix (2.21: a base64 file of one JWT per line).
                run = bisect.bisect_right(run_starts, start) - 1
                if run < 0 or not (runs[run][0] == start or (start <= runs[run][1] and text[start - 1] in "-=")):
                    continue
                head = text[start: start + len(literal)]
                heads = by_head.get(head, ()) + by_head.get(literal + "/i", ())  # type: ignore[operator]
                _find_at([rule for rule in heads if rule.group] if inside else heads, text, start, spans)
        return spans


def _find_at(rules: Iterable[_Ported], text: str, start: int, spans: list[tuple[int, int, str]]) -> None:
    """Each of ``rules`` tried at ``start``: the span of every token found joins ``spans``."""
    for rule in rules:
        found = rule.find(text, start)
        if found is not None:
            spans.append((*found, rule.name))

class KeywordRule(Rule):
    """Ported rules of odd shapes, tried where one of their keywords occurs."""

    def __init__(self) -> None:
        super().__init__(name="ported-keyword", description="gitleaks rules tried by keyword "
                         "(streams/redaction/ported.py KEYWORD_RULES)")
        rules = [(tuple(keywords), _compile(name, source, ci, entropy))
                 for name, keywords, source, ci, entropy in _keyword_rules()]
        firsts = {keyword[0] for keywords, _ in rules for keyword in keywords}
        object.__setattr__(self, "needs", frozenset(firsts | {first.upper() for first in firsts}))
        object.__setattr__(self, "_rules", rules)
        # A rule is tried only where one of its keywords occurs in the lower-cased text.
        object.__setattr__(self, "literals", tuple(sorted({k.lower() for keywords, _ in rules for k in keywords})))

    def fingerprint(self) -> list[str]:
        return [*super().fingerprint(), *(f"{n}|{'|'.join(k)}|{s}|{c}|{e}" for n, k, s, c, e in _keyword_rules())]

    def hit_names(self) -> tuple[str, ...]:
        return tuple(sorted({row[0] for row in _keyword_rules()}))

    def apply(self, scan: Scan, hits: dict[str, int]) -> str:
        text = scan.text
        if len(text) < LONG_TOKEN:
            return text
        lowered = scan.lower()
        spans: list[tuple[int, int, str]] = []
        rules: list[tuple[tuple[str, ...], _Ported]] = self._rules  # type: ignore[attr-defined]
        if scan.literal_hits is not None:
            # Only the rules one of whose keywords the automaton found (in the lower-cased text).
            present = {literal for _, literal in scan.literal_hits}
            rules = [(keywords, rule) for keywords, rule in rules if any(k.lower() in present for k in keywords)]
            if not rules:
                return text
        long_bodied = any(rule.name not in _SHORT_BODIES for _, rule in rules)
        near = scan.near_long_tokens() if long_bodied and scan.has_long_token() else ""
        for keywords, rule in rules:
            # A long secret's keyword is in it or just before it: only those parts are searched.
            if rule.name in _SHORT_BODIES:
                where = lowered
            elif near:
                where = near
            else:
                continue  # no long token: no long-bodied secret
            if not any(keyword in where for keyword in keywords):
                continue
            for match in _matches(rule, text):
                begin, end = match.span(rule.group)
                if begin < 0 or begin == end or shannon_entropy(match.group(rule.group)) < rule.entropy:
                    continue
                spans.append((begin, end, rule.name))
        return replace_spans(text, spans, hits)


# Keyword rules whose secrets may be short; the others are tried only in texts with a long token.
_SHORT_BODIES = frozenset({"curl-auth-header", "curl-auth-user", "sidekiq-sensitive-url", "kubernetes-secret-yaml",
                           "gitlab-session-cookie", "microsoft-teams-webhook", "facebook-access-token"})
# Keyword rules that read from their keyword on to the end of its line and beyond, and the keyword
# as they match it. A later keyword of the line reads a part of what the first one read, so where
# the first finds nothing none of the line's others does: trying each read the rest of the line
# once per keyword, and a line of 8 000 `curl -su a:` took 50 s (2.21).
_FROM_THE_LINE_START = {"curl-auth-header": r"\bcurl\b", "curl-auth-user": r"\bcurl\b"}


def _matches(rule: _Ported, text: str) -> Iterable[re.Match[str]]:
    """``rule.pattern.finditer(text)``, trying one keyword of a line that found nothing."""
    source = _FROM_THE_LINE_START.get(rule.name)
    if source is None:
        yield from rule.pattern.finditer(text)
        return
    # With the rule's flags: its \b is ASCII, and a Unicode one found no `curl` glued to a
    # non-ASCII letter (`执行curl … -u a:pw`), which the rule itself reads.
    keyword = re.compile(source, rule.pattern.flags)
    position = 0
    while (head := keyword.search(text, position)) is not None:
        match = rule.pattern.match(text, head.start())
        if match is not None:
            yield match
            position = max(match.end(), head.end())
            continue
        line_end = text.find("\n", head.end())
        if line_end == -1:
            return
        position = line_end + 1


# Keyword rules our own rules cover more widely (tokens.py: jwt, twilio-api-key, aws-access-key-id,
# slack-webhook): their keywords ("ey", "sk") occur in almost every text.
_COVERED = frozenset({"jwt", "twilio-api-key", "aws-access-token", "slack-webhook-url"})
# Vault's legacy "s." + 24 characters matches inside dotted names (this.something...): only the
# current hvs. form is kept.
_OVERRIDES = {"vault-service-token": (("hvs.", "hvr."), r"hv[sr]\.[\w-]{24,300}")}  # 2.5: hvs. and hvr. of any length


def _keyword_rules() -> list[tuple[str, tuple[str, ...], str, bool, float]]:
    rules = []
    for name, keywords, source, ci, entropy in KEYWORD_RULES:
        if name in _COVERED:
            continue
        keywords, source = _OVERRIDES.get(name, (keywords, source))
        rules.append((name, keywords, source, ci, entropy))
    return rules


_NAMED = [(tuple(keywords), _compile(name, f"(?:{source})", ci, entropy)) for name, keywords, source, ci, entropy in NAMED_RULES]


@lru_cache(maxsize=8192)
def _vendors_in(name: str) -> tuple[int, ...]:
    lowered = name.lower()
    return tuple(index for index, (keywords, _) in enumerate(_NAMED) if any(k in lowered for k in keywords))


def vendor_rule(name: str, value: str) -> str | None:
    """The ported rule a ``name = value`` pair is a secret under (``ADAFRUIT_TOKEN`` with a value
    of Adafruit's key shape), or ``None``."""
    for index in _vendors_in(name):
        rule = _NAMED[index][1]
        match = rule.pattern.fullmatch(value)
        if match is not None and shannon_entropy(value) >= rule.entropy:
            return rule.name
    return None


def ported_rule_names() -> list[str]:
    """Every rule name the ported rules can produce."""
    return sorted({row[0] for table in (PREFIX_RULES, _keyword_rules(), NAMED_RULES) for row in table})


@lru_cache(maxsize=1)
def token_heads() -> frozenset[str]:
    """The lower-cased part before the first separator of every ported token prefix
    (``ghp``, ``shpat``, ``dop``, ``sk``): words a token can start with."""
    heads = set()
    for _, prefixes, _, _, _ in PREFIX_RULES:
        for prefix in prefixes:
            cut = min((prefix.find(sep) for sep in _SEPARATORS if sep in prefix[1:]), default=len(prefix))
            heads.add(prefix[:cut].lower())
    return frozenset(heads)
