"""Importers against hostile input: random, truncated and mutated JSONL lines.

The contract (``streams/importers/base.py``, ``docs/importers.md``): bad content never raises,
each bad record becomes a :class:`Rejected` with a reason, and nothing is dropped silently.
Here that is checked line by line: every non-blank input line is accounted for by at least
one result labelled with its line number (an event, or a reject saying why), every accepted
event passes the schema and serializes to the bytes L1 stores, and the output is
deterministic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from streams.asp import canonical_bytes, validate_event
from streams.exceptions import ImportFormatError
from streams.importers import Accepted, Rejected, iter_records
from streams.importers.asp import iter_asp
from streams.importers.base import RAW_MAX_CHARS
from streams.importers.claude_code import iter_claude_code
from streams.importers.openai_chat import iter_openai_chat
from tests.fuzz.profile import fuzz, json_values

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
IMPORTERS = {"asp": iter_asp, "claude-code": iter_claude_code, "openai-chat": iter_openai_chat}


def _fixture_lines() -> list[bytes]:
    lines: list[bytes] = []
    for path in sorted(FIXTURES.rglob("*.jsonl")):
        lines += [line.strip() for line in path.read_bytes().splitlines() if line.strip()]
    for path in sorted(FIXTURES.rglob("*.json")):
        # Whole documents (a message list) and their items, each as one line.
        document = orjson.loads(path.read_bytes())
        lines.append(orjson.dumps(document))
        items = document if isinstance(document, list) else document.get("messages", [])
        lines += [orjson.dumps(item) for item in items]
    return lines


FIXTURE_LINES = _fixture_lines()
NASTY_BYTES = [b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\", b'"', b"{", b"]", b"\r",
               b"\\ud800", b"\xef\xbb\xbf", b"1e999", b"-", b"\t"]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replace(copy[head], rest, new)
    return copy


def _deep(depth: int, leaf: bytes, as_dict: bool) -> bytes:
    """JSON nested ``depth`` levels: deeper than orjson serializes (254), as deep as it parses
    (1024). Built as bytes because Python's own recursion limit is near 1000."""
    opening, closing = (b'{"content":', b"}") if as_dict else (b"[", b"]")
    return opening * depth + leaf + closing * depth


_MARKER = "__usl_fuzz_deep__"


@st.composite
def mutated_fixture_line(draw: st.DrawFn) -> bytes:
    line = FIXTURE_LINES[draw(st.integers(0, len(FIXTURE_LINES) - 1))]
    how = draw(st.sampled_from(["truncate", "byte", "insert", "retype", "drop", "deep", "huge"]))
    if how == "truncate":
        return line[: draw(st.integers(0, max(0, len(line) - 1)))]
    if how in ("byte", "insert"):
        at = draw(st.integers(0, len(line)))
        nasty = draw(st.sampled_from(NASTY_BYTES) | st.binary(min_size=1, max_size=3))
        return line[:at] + nasty + line[at + (1 if how == "byte" else 0):]
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:  # the fixtures hold broken lines on purpose
        return line + draw(st.sampled_from(NASTY_BYTES))
    path = draw(st.sampled_from(_paths(value)))
    if how == "drop":
        if not path:
            return b"{}"
        container_path, key = path[:-1], path[-1]
        node = value
        for step in container_path:
            node = node[step]
        pruned = ({k: v for k, v in node.items() if k != key} if isinstance(node, dict)
                  else [v for i, v in enumerate(node) if i != key])
        return orjson.dumps(_replace(value, container_path, pruned))
    if how == "deep":
        # Past orjson's 254-level serialization limit but within its 1024-level parse limit.
        deep = _deep(draw(st.integers(250, 1000)), draw(st.sampled_from([b'"x"', b"1", b"null"])),
                     draw(st.booleans()))
        return orjson.dumps(_replace(value, path, _MARKER)).replace(f'"{_MARKER}"'.encode(), deep)
    if how == "huge":
        new = draw(st.sampled_from(["a", "é", "\x00", "🙂"])) * draw(st.integers(20_000, 80_000))
    else:
        new = draw(json_values())
    return orjson.dumps(_replace(value, path, new))


LINES = st.one_of(
    mutated_fixture_line(),
    mutated_fixture_line(),
    st.integers(0, len(FIXTURE_LINES) - 1).map(FIXTURE_LINES.__getitem__),
    json_values().map(orjson.dumps),
    st.binary(max_size=80),
)


def _write(directory: Path, lines: list[bytes], suffix: str = ".jsonl") -> Path:
    path = directory / f"input{suffix}"
    # Lines are joined by newlines, so no generated line may hold one of its own.
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
    return path


def _non_blank_lines(path: Path) -> set[int]:
    # A byte-order mark is not content, at a file's start or at a line's (files joined by `cat`):
    # every importer reads a line of a BOM alone as blank (streams.importers.base.non_blank).
    return {number for number, line in enumerate(path.read_bytes().split(b"\n"), start=1)
            if line.strip().removeprefix(b"\xef\xbb\xbf").strip()}


def _lines_of(record: str, label: str) -> range:
    """The lines a record name covers: ``label:N`` (or ``label:N/...``), or a run of lines
    ``label:N-M`` (OpenAI chat messages one per line, one conversation together); a record that
    begins at byte B of its line after another on the same line is ``N@B``."""
    assert record.startswith(f"{label}:"), record
    first, _, last = record[len(label) + 1:].split("/", 1)[0].partition("-")
    first, last = first.split("@", 1)[0], last.split("@", 1)[0]
    return range(int(first), int(last or first) + 1)


def check_results(results: list[Any], path: Path, label: str) -> None:
    """Every result is a valid event or a readable reject, and every line is accounted for."""
    seen: set[int] = set()
    for result in results:
        if isinstance(result, Accepted):
            assert validate_event(result.event) == result.event
            stored = canonical_bytes(result.event)
            assert validate_event(orjson.loads(stored)) == orjson.loads(stored)
        else:
            assert isinstance(result, Rejected), result
            assert isinstance(result.reason, str) and result.reason.strip()
            assert "Traceback" not in result.reason
            assert isinstance(result.raw, str) and len(result.raw) <= RAW_MAX_CHARS
        if result.record != f"{label}:0":  # the end of a file with no lines at all
            seen.update(_lines_of(result.record, label))
    missing = _non_blank_lines(path) - seen
    assert not missing, f"lines {sorted(missing)} vanished without an event or a reject"


@pytest.mark.parametrize("fmt", sorted(IMPORTERS))
@fuzz(60)
@given(lines=st.lists(LINES, min_size=1, max_size=8))
@example(lines=[b'{"messages": [], "created": 1e20}'])  # found: a far-future `created` overflowed
@example(lines=[b'{"messages": [{"role": "user", "content": ' + _deep(300, b"1", True) + b"}]}"])
@example(lines=[b'{"eventId": "e", "sessionId": "s", "type": "message", "time": "9999-12-31T23:59:59-01:00"}'])
@example(lines=[b"\xef\xbb\xbf"])  # found: a file of a byte-order mark alone is an empty file
@example(lines=[b"{}", b"\xef\xbb\xbf"])  # found: so is a line of one after the first
def test_every_line_is_an_event_or_a_reject(
    tmp_path_factory: pytest.TempPathFactory, fmt: str, lines: list[bytes]
) -> None:
    path = _write(tmp_path_factory.mktemp("fuzz"), lines)
    importer = IMPORTERS[fmt]
    first = list(importer(path, label=path.name))
    check_results(first, path, path.name)
    assert list(importer(path, label=path.name)) == first  # deterministic


@fuzz(40)
@given(lines=st.lists(LINES, min_size=1, max_size=6))
def test_detection_fails_only_with_a_clear_format_error(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]
) -> None:
    path = _write(tmp_path_factory.mktemp("fuzz"), lines)
    try:
        results = list(iter_records(path))
    except ImportFormatError as exc:
        assert str(exc).startswith(str(path)) and "Traceback" not in str(exc)
        return
    check_results(results, path, path.name)


@fuzz(40)
@given(document=st.one_of(
    json_values(keys=st.sampled_from(["messages", "role", "content", "id", "created", "model",
                                      "tool_calls", "function", "name", "arguments",
                                      "tool_call_id", "function_call", "refusal", "type"])),
    st.integers(0, len(FIXTURE_LINES) - 1).map(FIXTURE_LINES.__getitem__),
    mutated_fixture_line(),
))
def test_openai_json_documents_never_raise(
    tmp_path_factory: pytest.TempPathFactory, document: Any
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "chat.json"
    path.write_bytes(document if isinstance(document, bytes) else orjson.dumps(document))
    for result in iter_openai_chat(path, label=path.name):
        if isinstance(result, Accepted):
            canonical_bytes(validate_event(result.event))
        else:
            assert isinstance(result, Rejected) and result.reason.strip()
            assert result.record.startswith(path.name)
