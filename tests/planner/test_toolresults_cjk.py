"""Full tool outputs in Chinese and Japanese, searched through the planner with toolResults.

Real L1 events on the session's broker, real generations of every kind (the tool-results one
written by :class:`sinks.toolresults.ToolResultsWriter`), real watermarks. A CJK substring of an
output must come back from the index and from the tail scan (``latest``), as the output itself
with evidence over all of its bytes, to the callers holding the ``toolresults`` scope only; a
tool-results generation of the old analyzer is refused with its remedy.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planner.acl import parse_principal
from planner.engine import Planner
from planner.exceptions import AccessDenied, IndexUnavailable, QueryError
from tests.planner.corpus import IndexBuilder, acl, make_test_settings

pytestmark = pytest.mark.kafka

ALICE = parse_principal("tenant:acme/user:alice")
ALICE_TOOLS = parse_principal("tenant:acme/user:alice/scopes:toolresults")
MALLORY_TOOLS = parse_principal("tenant:globex/user:mallory/scopes:toolresults")

INDEXED = {
    "ja": "src/main.c:3:5: エラー: 'config' が宣言されていません。コンパイルに失敗しました",
    "zh": "2026-01-31 12:00:06 ERROR 数据库连接超时，正在重试第3次",
    "mixed": "Traceback: 调用foo_bar函数时抛出ValueError at src/app.py:42行",
    # An API's JSON as most JSON writers print it: every non-ASCII character escaped.
    "json": '{"error": "\\u0431\\u0430\\u0437\\u0430 \\u0434\\u0430\\u043d\\u043d\\u044b\\u0445\\n'
            '\\u043d\\u0435\\u0434\\u043e\\u0441\\u0442\\u0443\\u043f\\u043d\\u0430", "code": 503}',
}
TAIL = {"tail": "テストが3件失敗しました: test_payment_refund で残高が一致しません"}
OTHER_TENANT = "数据库连接超时 globex の出力"

_numbers = itertools.count(1)


def tool_turn(log_id: str, session_id: str, access: dict[str, Any], output: str) -> list[dict[str, Any]]:
    """One session of one turn whose single tool call printed ``output``."""
    def event(kind: str, **extra: Any) -> dict[str, Any]:
        number = next(_numbers)
        return {"eventId": f"{session_id}-e{number}", "logId": log_id, "sessionId": session_id,
                "type": kind, "time": f"2026-01-01T00:{number // 60:02d}:{number % 60:02d}Z",
                "acl": access, **extra}

    turn = f"{session_id}-t0"
    return [
        event("session.started"),
        event("turn.started", turnId=turn, role="user"),
        event("message", turnId=turn, role="user", fields={"text": "please build it"}),
        event("tool.call", turnId=turn, role="assistant",
              fields={"toolName": "Bash", "toolCallId": f"{turn}-c", "input": {"command": "make"}}),
        event("tool.result", turnId=turn, role="tool",
              fields={"toolName": "Bash", "toolCallId": f"{turn}-c", "status": "error", "output": output}),
        event("turn.ended", turnId=turn, role="assistant"),
    ]


class Corpus:
    def __init__(self, tmp: Path, bootstrap: str) -> None:
        self.settings = make_test_settings(tmp, bootstrap)
        self.builder = IndexBuilder(self.settings, bootstrap, "cjk")
        mine = acl("acme", "user:alice")
        for name, output in INDEXED.items():
            self.builder.append(tool_turn("cjk", f"s-{name}", mine, output))
        self.builder.append(tool_turn("cjk", "s-globex", acl("globex", "*"), OTHER_TENANT))
        self.builder.commit()
        # Appended after the commit: only the tail scan of a `latest` query sees it.
        self.builder.append(tool_turn("cjk", "s-tail", mine, TAIL["tail"]))
        self.planner = Planner(self.settings, bootstrap)

    def tools(self, query: str, principal: Any = ALICE_TOOLS, **request: Any) -> list[dict[str, Any]]:
        response = self.planner.search({"query": query, "log": "cjk", "toolResults": True, "k": 50,
                                        **request}, principal)
        return [hit for hit in response["results"] if hit["kind"] == "toolresult"]

    def close(self) -> None:
        self.planner.close()
        self.builder.close()


@pytest.fixture(scope="module")
def corpus(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    built = Corpus(tmp_path_factory.mktemp("cjk"), kafka_bootstrap)
    yield built
    built.close()


@pytest.mark.parametrize(("query", "expected"), [
    ("宣言されていません", "ja"), ("コンパイル", "ja"), ("连接超时", "zh"), ("重试", "zh"),
    ("foo_bar函数", "mixed"), ('"函数时抛出ValueError"', "mixed"), ("42行", "mixed"),
    ("недоступна", "json"), ('"база данных недоступна"', "json"),
])
def test_a_cjk_substring_of_an_indexed_output_is_found(corpus: Corpus, query: str, expected: str) -> None:
    hits = corpus.tools(query)
    assert hits and hits[0]["text"] == INDEXED[expected], (query, hits[:1])
    top = hits[0]
    assert top["origin"] == "index" and top["sessionId"] == f"s-{expected}"
    # The output as it was printed: the evidence covers exactly its bytes.
    assert top["evidence"][0]["end"] == len(INDEXED[expected].encode("utf-8"))


def test_a_cjk_substring_of_a_tail_output_is_found_in_latest(corpus: Corpus) -> None:
    assert TAIL["tail"] not in {hit["text"] for hit in corpus.tools("残高が一致しません")}  # not indexed
    hits = corpus.tools("残高が一致しません", freshness="latest")
    assert [hit["text"] for hit in hits[:1]] == [TAIL["tail"]]
    assert hits[0]["origin"] != "index"


def test_cjk_tool_outputs_stay_behind_the_scope_and_the_tenant(corpus: Corpus) -> None:
    with pytest.raises(AccessDenied):
        corpus.tools("连接超时", ALICE)
    assert OTHER_TENANT not in {hit["text"] for hit in corpus.tools("连接超时", freshness="latest")}
    assert [hit["text"] for hit in corpus.tools("连接超时", MALLORY_TOOLS)][:1] == [OTHER_TENANT]


def test_a_toolresults_generation_of_the_old_analyzer_is_refused(kafka_bootstrap: str, tmp_path: Path) -> None:
    from sinks.toolresults import ToolResultsWriter

    settings = make_test_settings(tmp_path, kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "oldtools")
    builder.append(tool_turn("oldtools", "s-old", acl("acme", "user:alice"), INDEXED["zh"]))
    builder.commit("structured", "text", "vector")
    with pytest.MonkeyPatch.context() as patch:  # as the sink wrote tool-results generations before
        patch.setattr(ToolResultsWriter, "describe", lambda self: {
            "schemaVersion": "1", "engine": "tantivy", "embedded": False})
        builder.commit("toolresults")
    planner = Planner(settings, kafka_bootstrap)
    try:
        with pytest.raises((IndexUnavailable, QueryError)) as refused:
            planner.search({"query": "连接超时", "log": "oldtools", "toolResults": True}, ALICE_TOOLS)
        assert "text analyzer words/1" in str(refused.value)
        assert "usl rebuild toolresults" in str(refused.value)
        # latest still answers, the tool output from L1, and says which generation it would not read.
        latest = planner.search({"query": "连接超时", "log": "oldtools", "toolResults": True,
                                 "freshness": "latest"}, ALICE_TOOLS)
        assert any("usl rebuild toolresults" in fallback for fallback in latest["freshness"]["fallbacks"])
        assert INDEXED["zh"] in {hit["text"] for hit in latest["results"] if hit["kind"] == "toolresult"}
        # Without tool results the query needs no tool-results index and answers.
        assert planner.search({"query": "连接超时", "log": "oldtools"}, ALICE_TOOLS)["asOfSeq"] > 0
    finally:
        planner.close()
        builder.close()
