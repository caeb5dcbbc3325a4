"""``usl search`` and ``usl sql``: questions to the planner from the command line.

Both ask the planner API when one answers (``USL_API_URL``, or the local stack that ``usl up``
runs), else run the planner in this process (:mod:`deploy.cli._api`). ``usl search`` prints one
block per hit plus a freshness line that says at which log position the answer was taken and
what it does not cover; ``usl sql`` prints the rows as a table (piped: tab-separated, whole).
``--json`` prints exactly the HTTP API's response (or its error body).
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from typing import TYPE_CHECKING, Any

import typer

from deploy.cli._api import call_planner
from deploy.cli._common import (
    LOG_OPTION,
    PRINCIPAL_OPTION,
    escape,
    out,
    print_json,
    printable,
    render_rows,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.text import Text

__all__ = ["COMMANDS", "freshness_line", "register", "render_response", "search", "sql"]

COMMANDS = ("search", "sql")  # the names register() adds

_SNIPPET_CHARS = 480
_EVIDENCE_STYLES = ("bold yellow", "bold cyan")


def register(app: typer.Typer) -> None:
    """Add ``search`` and ``sql`` to ``app``."""
    app.command()(search)
    app.command()(sql)


def search(
    query: str = typer.Argument(..., metavar="QUERY", help="What to search for: words (OR-ed) and \"quoted phrases\"."),
    freshness: str = typer.Option("indexed", "--freshness", metavar="FRESHNESS",
                                  help="indexed | latest | wait:SECONDS (at most 300)."),
    k: int = typer.Option(10, "--k", "-k", "--limit", "-n", help="Results per page (1-100)."),
    explain: bool = typer.Option(False, "--explain", help="Show how the answer was decided."),
    principal_text: str = PRINCIPAL_OPTION,
    cursor: str = typer.Option(None, "--cursor", metavar="CURSOR", help="Continue after a previous page."),
    json_out: bool = typer.Option(False, "--json", help="Print the API's JSON response."),
    log: str = LOG_OPTION,
    mode: str = typer.Option("hybrid", "--mode", metavar="MODE", help="hybrid | text | vector."),
    sessions: list[str] = typer.Option(None, "--session", metavar="ID", help="Only this session (repeatable)."),
    tools: list[str] = typer.Option(None, "--tool", metavar="NAME", help="Only chunks using this tool (repeatable)."),
    runs: list[str] = typer.Option(None, "--run", metavar="ID", help="Only this run (repeatable)."),
    turns: list[str] = typer.Option(None, "--turn", metavar="ID", help="Only this turn (repeatable)."),
    statuses: list[str] = typer.Option(None, "--status", metavar="STATUS",
                                       help="Only chunks holding a tool result of this status, e.g. error (repeatable)."),
    roles: list[str] = typer.Option(None, "--role", metavar="ROLE",
                                    help="Only chunks holding an event of this role: user, assistant, system, "
                                         "developer, tool (repeatable)."),
    time_from: str = typer.Option(None, "--time-from", metavar="TIME",
                                  help="Only chunks with events at or after this RFC 3339 time, e.g. 2026-01-31T12:00:00Z."),
    time_to: str = typer.Option(None, "--time-to", metavar="TIME",
                                help="Only chunks with events at or before this RFC 3339 time."),
    tool_results: bool = typer.Option(False, "--tool-results",
                                      help="Search full tool results too, and the whole inputs of tool calls "
                                           "a chunk shows cut (needs scopes:toolresults)."),
) -> None:
    """Search one log at one asOfSeq, with evidence for every hit."""
    request: dict[str, Any] = {"query": query, "freshness": freshness, "k": k, "explain": explain,
                               "cursor": cursor, "log": log, "mode": mode,
                               "toolResults": tool_results}
    # The API's filters, each under its own option: a filter the command line could not say
    # (a time range, errors only) sent people to curl.
    filters: dict[str, Any] = {name: list(values) for name, values in (
        ("sessionId", sessions), ("toolName", tools), ("runId", runs), ("turnId", turns),
        ("status", statuses), ("role", roles)) if values}
    filters.update((name, value) for name, value in (("timeFrom", time_from), ("timeTo", time_to))
                   if value is not None)
    if filters:
        request["filters"] = filters
    response = call_planner(principal_text, json_out, lambda planner, principal: planner.search(request, principal),
                            ("POST", "/v1/search", request))
    if json_out:
        print_json(response)
        return
    render_response(response, request)


def render_response(response: dict[str, Any], request: dict[str, Any]) -> None:
    """Human output: one block per hit, then the freshness line (and explain, if asked)."""
    for number, hit in enumerate(response["results"], start=1):
        seqs = [piece["seq"] for piece in hit["evidence"]]
        where = [f"session {hit['sessionId']}"]
        if hit.get("turnId"):
            where.append(f"turn {hit['turnId']}")
        if seqs:
            where.append(f"seqs {min(seqs)}-{max(seqs)}")
        where.append(hit["eventTime"])
        if hit.get("origin") not in (None, "index"):
            where.append(str(hit["origin"]))
        sources = " · ".join(f"{source} #{c['rank']}" for source, c in hit["score"]["components"].items())
        out().print(f"[bold]{number}.[/] rrf {hit['score']['rrf']:.5f}  ({escape(sources)})  "
                    f"[dim]{escape('  '.join(where))}[/]")
        out().print(_snippet(hit["text"], hit["evidence"], str(request.get("query", ""))))
        proof = ", ".join(f"{piece['eventId']}@{piece['seq']}" for piece in hit["evidence"])
        out().print(f"   [dim]evidence: {escape(proof)}[/]")
    if not response["results"]:
        out().print("no results")
    out().print(freshness_line(response))
    if response.get("cursor"):
        out().print(f"[dim]next page: the same command with --cursor {escape(response['cursor'])}[/]")
    if response.get("end"):
        # The last page of results cut at the rank depth: without this line it read as every match.
        out().print(escape(str(response["end"].get("message") or response["end"])))
    explain = response.get("explain")
    if explain:
        out().print("[bold]explain[/]")
        for reason in explain["freshness"]["reasons"]:
            out().print(f"  - {escape(reason)}")
        for source, info in explain["sources"].items():
            cut = "truncated" if info["truncated"] else "complete"
            out().print(f"  {source}: window {info['window']}, returned {info['returned']} ({cut})")
        # Lists that rank other words than the query's own say which (hybrid's text list without
        # function words, the identifier list), or a hybrid answer cannot be retraced by hand.
        for name, label in (("text", "text list ranked"), ("identifiers", "identifier list ranked")):
            ranked = explain.get(name)
            if isinstance(ranked, dict) and ranked.get("query"):
                out().print(f"  {label}: {escape(str(ranked['query']))} [dim]({escape(str(ranked.get('rule', '')))})[/]")
        for fallback in explain["fallbacks"]:
            out().print(f"  fallback: {escape(fallback)}")
        out().print("  [dim](--json shows the full explain object)[/]")


def freshness_line(response: dict[str, Any]) -> str:
    """``asOfSeq N (label) · L1 … · generations · tail scan · uncovered`` in one line."""
    fresh = response["freshness"]
    parts = [f"asOfSeq {response['asOfSeq']} ({fresh['label']})", f"L1 {fresh['l1CommittedSeq']}"]
    for kind, mark in fresh["watermarks"].items():
        parts.append(f"{kind} gen {mark['generationId']}@{mark['builtThroughSeq']}" if mark
                     else f"{kind} missing")
    if fresh.get("tailScan"):
        parts.append(f"tail scan {fresh['tailScan']['fromSeq']}..{fresh['tailScan']['toSeq']}")
    uncovered = fresh.get("uncovered") or []
    parts.append("uncovered: " + (", ".join(f"{r['fromSeq']}..{r['toSeq']}" for r in uncovered)
                                  if uncovered else "nothing"))
    for fallback in fresh.get("fallbacks") or []:
        parts.append(f"fallback: {fallback}")
    return escape("freshness: " + " · ".join(parts))


def _snippet(text: str, evidence: list[dict[str, Any]], query: str = "") -> Text:
    """The hit's text with each evidence span styled (UTF-8 byte offsets → characters) and the
    query's words underlined, cut to about ``_SNIPPET_CHARS`` around where they match (a
    chunk holds many events; its first lines need not be the ones the query found)."""
    from rich.text import Text

    data = text.encode("utf-8")
    styled = Text(printable(text))
    for number, piece in enumerate(sorted(evidence, key=lambda p: p["start"])):
        start = len(data[: piece["start"]].decode("utf-8", "replace"))
        end = len(data[: piece["end"]].decode("utf-8", "replace"))
        if start < end:
            styled.stylize(_EVIDENCE_STYLES[number % 2], start, end)
    matches = _matches(text, query)
    for start, end in matches:
        styled.stylize("underline", start, end)
    # Cut between characters a reader sees, not inside one: a cut through 👨‍👩‍👧‍👦 showed a
    # man and a dangling joiner, one through रें or é (written as e and its accent) a bare
    # consonant or e.
    first = _boundary_at_or_before(text, _window(text, matches))
    last = _boundary_at_or_before(text, min(len(text), first + _SNIPPET_CHARS))
    shown = Text("   " + ("…" if first else ""))
    shown.append_text(Text("\n   ").join(styled[first:last].split("\n", allow_blank=True)))
    if last < len(text):
        shown.append("…")
    return shown


def _matches(text: str, query: str) -> list[tuple[int, int]]:
    """Character spans of ``text`` where the query's quoted phrases and words occur, in order,
    compared as the text index compares them: NFKC-folded, letters folded (``sinks.text.base.LETTER_FOLDS``)
    and lowercased (words of one
    character only inside a phrase), over whole terms: `log` is marked in `log in` and
    `snake_log`, not inside `login` or `catalog`, which the index does not find by it (but
    inside 数据库 for 数据, each of whose characters is a term). A span always covers whole
    characters as a reader sees them (a letter with its marks)."""
    import re

    from planner.quotes import phrase_quotes

    query = phrase_quotes(query)  # as the planner read it: “a b” is the phrase it searched
    folded, starts, ends = _folded(text)
    phrases = [_fold(phrase.strip()) for phrase in re.findall(r'"([^"]+)"', query)]
    unquoted = re.sub(r'"[^"]*"?', " ", query)
    # A word keeps its vowel signs and viramas: \w has none, so परीक्षण was read as पर and षण
    # and those were marked inside other words (and chose the window).
    words = [_fold("".join(run)) for joined, run in itertools.groupby(unquoted, key=_word_character) if joined]
    spans = []
    for needle in {*phrases, *(word for word in words if len(word) > 1)}:
        if needle:
            spans += _occurrences(needle, folded, starts, ends)
    return sorted(set(spans))


def _occurrences(needle: str, folded: str, starts: list[int], ends: list[int]) -> list[tuple[int, int]]:
    """Where ``needle`` occurs in ``folded`` over whole letters, as spans of the original text.
    Occurrences may overlap: one refused for starting or ending inside a letter (ff inside ﬀ,
    कर inside करें) must not hide the next."""
    found = []
    at = folded.find(needle)
    while at != -1:
        end = at + len(needle)
        if (at == 0 or starts[at - 1] != starts[at]) and (end == len(folded) or starts[end] != starts[end - 1]) \
                and _term_edge(folded, at) and _term_edge(folded, end):
            found.append((starts[at], ends[end - 1]))
        at = folded.find(needle, at + 1)
    return found


def _term_edge(folded: str, at: int) -> bool:
    """Whether a term of the index may begin or end at ``at`` of ``folded``: not between two
    characters of one run of letters and digits (the index's terms are such runs; `_` and
    punctuation split them), except where either is of a script written without spaces (Chinese,
    Japanese, Korean, Thai, Lao, Myanmar, Khmer), each of whose characters is a term."""
    if at == 0 or at == len(folded):
        return True
    return not (_in_term(folded[at - 1]) and _in_term(folded[at]))


def _in_term(character: str) -> bool:
    """A letter, digit or mark of a run of them the index keeps as one term."""
    if not (character.isalnum() or _joins_previous(character)) or character == "\u200d":
        return False
    code = ord(character)
    spaceless = 0x0E00 <= code <= 0x0EFF or 0x1000 <= code <= 0x109F or 0x1780 <= code <= 0x17FF \
        or unicodedata.east_asian_width(character) in ("W", "F")
    return not spaceless


def _fold(text: str) -> str:
    """``text`` NFKC-folded, its letters folded and lowercased as the text index reads them: a
    query's ``ΟΔΟΣ`` lowercased whole was ``οδος``, the text's ``ΟΔΟΣ`` letter by letter
    ``οδοσ``, and the word the index found was not marked."""
    letters_folded, lower_term = _index_folds()
    return lower_term(letters_folded(unicodedata.normalize("NFKC", text)))


@functools.cache
def _index_folds() -> tuple[Callable[[str], str], Callable[[str], str]]:
    """The text index's letter folds and lowercasing, imported on first use, and from
    ``sinks.letter_folds``, not ``sinks.text``: that loads the engines and compiles the word
    patterns (a good part of the command's time), which no CLI command needs to print a hit."""
    from sinks.letter_folds import letters_folded, lower_term

    return letters_folded, lower_term


def _folded(text: str) -> tuple[str, list[int], list[int]]:
    """``text`` as the index reads it (NFKC, letters folded, lowercased) and, for each of its characters, where
    the letter it came from starts and ends in ``text``. The index matched `café` in a text that
    spells it `cafe` and a combining accent (macOS file names), or ＡＢＣ in full width, and the
    snippet marked nothing and, with no match to centre on, could show none of it; lowercasing
    that changes a length (İ) no longer drops every mark either."""
    if text.isascii():
        lowered = text.lower()
        return lowered, list(range(len(text))), list(range(1, len(text) + 1))
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    start = 0
    while start < len(text):
        # A run of ASCII folds as it lowercases, one character to one (NFKC and the letter
        # folds leave ASCII alone), so it is folded whole: folding a real hit character by
        # character, because one `…` or `→` in it made it not ASCII, was most of `usl search`'s
        # time on its output. Its last character stays for the loop below when a mark joins it.
        run = _ASCII_RUN.match(text, start)
        if run:
            stop = run.end()
            if stop < len(text) and (_joins_previous(text[stop]) or text[stop] in _HANGUL_VOWELS_AND_FINALS):
                stop -= 1
            if stop > start:
                pieces.append(text[start:stop].lower())
                starts += range(start, stop)
                ends += range(start + 1, stop + 1)
                start = stop
                continue
        end = start + 1
        while end < len(text) and (_joins_previous(text[end]) or text[end] in _HANGUL_VOWELS_AND_FINALS):
            end += 1
        piece = _fold(text[start:end])
        pieces.append(piece)
        starts += [start] * len(piece)
        ends += [end] * len(piece)
        start = end
    return "".join(pieces), starts, ends


def _word_character(character: str) -> bool:
    return character.isalnum() or character == "_" or _joins_previous(character)


def _joins_previous(character: str) -> bool:
    """Whether ``character`` belongs to the letter before it: a combining mark (vowel signs,
    viramas, accents) or a zero-width joiner."""
    return unicodedata.category(character)[0] == "M" or character == "\u200d"


#: Emoji skin tones (Sk) and tag characters (Cf, subdivision flags) belong to the emoji before them.
_EMOJI_MODIFIERS = range(0x1F3FB, 0x1F400)
_TAGS = range(0xE0020, 0xE0080)
_REGIONAL_INDICATORS = range(0x1F1E6, 0x1F200)
#: Thai and Lao sara am: letters to Unicode (Lo), but drawn on the consonant before them
#: (UAX #29's SpacingMark), so ทำ cut before its vowel showed ท and a stray ำ.
_SPACING_VOWELS = frozenset("\u0e33\u0eb3")
#: Conjoining jamo that NFKC composes with the jamo before them into one Hangul syllable.
_HANGUL_VOWELS_AND_FINALS = frozenset(map(chr, range(0x1160, 0x1200)))
_ASCII_RUN = re.compile(r"[\x00-\x7f]+")
#: How far back a cut looks for a boundary: a longer run of marks is no character anyone reads.
_LONGEST_CLUSTER = 32


def _boundary_at_or_before(text: str, position: int) -> int:
    """The last place at or before ``position`` where ``text`` may be cut without splitting what
    a reader sees as one character: a letter and its marks, a conjunct joined by a virama, an
    emoji sequence joined by ZWJ or modified by a skin tone or tags, a flag's two regional
    indicators (a simplified UAX #29; the standard library has no grapheme clusters). Past
    ``_LONGEST_CLUSTER`` characters back it gives up and cuts at ``position``."""
    for candidate in range(position, max(0, position - _LONGEST_CLUSTER), -1):
        if candidate >= len(text) or _is_boundary(text, candidate):
            return candidate
    return position if position > _LONGEST_CLUSTER else 0


def _is_boundary(text: str, position: int) -> bool:
    after, before = text[position], text[position - 1]
    if (_joins_previous(after) or ord(after) in _EMOJI_MODIFIERS or ord(after) in _TAGS or before == "\u200d"
            or after in _HANGUL_VOWELS_AND_FINALS or after in _SPACING_VOWELS):
        return False
    if unicodedata.combining(before) == 9 and after.isalpha():  # a virama joins the next consonant
        return False
    if ord(after) in _REGIONAL_INDICATORS and ord(before) in _REGIONAL_INDICATORS:
        run = 0
        while position - run - 1 >= 0 and ord(text[position - run - 1]) in _REGIONAL_INDICATORS:
            run += 1
        return run % 2 == 0  # flags pair from the run's start
    return True


def _window(text: str, matches: list[tuple[int, int]]) -> int:
    """Where a ``_SNIPPET_CHARS`` window starts: before the run of matches holding the most
    different words (then the most matches), at a line's start when one is near; at the text's
    start when the first window holds as much."""
    if len(text) <= _SNIPPET_CHARS or not matches:
        return 0
    from collections import Counter

    span = _SNIPPET_CHARS - _SNIPPET_CHARS // 5
    words = [_fold(text[a:b]) for a, b in matches]  # one word however it is spelled (ёлку, елку)
    inside: Counter[str] = Counter()
    best, start, end = (0, 0), 0, 0
    for first, (position, _) in enumerate(matches):  # two pointers: each match enters and leaves once
        while end < len(matches) and (end <= first or matches[end][1] <= position + span):
            inside[words[end]] += 1
            end += 1
        weight = (len(inside), sum(inside.values()))
        if weight > best:
            best, start = weight, position
        inside[words[first]] -= 1
        if not inside[words[first]]:
            del inside[words[first]]
    opening = [word for (a, b), word in zip(matches, words, strict=True) if b <= _SNIPPET_CHARS]
    if (len(set(opening)), len(opening)) >= best:
        return 0
    first = max(0, min(start - _SNIPPET_CHARS // 5, len(text) - _SNIPPET_CHARS))
    line = text.find("\n", first, start)
    if line == -1:
        return first
    # Past blank lines: a window opening on one showed a line holding only its `…`.
    while line + 1 < start and text[line + 1] == "\n":
        line += 1
    return line + 1


def _indent(text: str) -> str:
    return text.replace("\n", "\n   ")


def sql(
    query: str = typer.Argument(..., metavar="SQL", help="One read-only SELECT over sessions, runs, turns, events, tool_calls, chunks."),
    as_of: int = typer.Option(None, "--as-of", min=0, metavar="SEQ", help="asOfSeq to read at (default: what the analytics index covers)."),
    principal_text: str = PRINCIPAL_OPTION,
    log: str = LOG_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the API's JSON response."),
) -> None:
    """Run read-only SQL on the analytics snapshot at one asOfSeq, under your ACL.

    On a terminal the rows are a table; piped, tab-separated under a header line, whole (NULL
    as `\\N`; backslash, tab and newline escaped as `\\\\`, `\\t`, `\\n`), the snapshot line on stderr."""
    body: dict[str, Any] = {"query": query, "log": log}
    if as_of is not None:
        body["asOfSeq"] = as_of
    response = call_planner(principal_text, json_out, lambda planner, principal: planner.sql(body, principal),
                            ("POST", "/v1/sql", body))
    if json_out:
        print_json(response)
        return
    render_rows(response)
