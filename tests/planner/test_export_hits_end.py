"""A hits export that stops at the rank depth says so, as the search's last page does.

The search's results end at the rank depth with an explicit ``end`` (docs/planner.md, "Order
that does not depend on the page size"); ``usl export hits`` and ``GET /v1/export?what=hits``
once stopped there without a word, so 238 rows read as every hit of the search.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

import deploy.cli.export
from deploy.cli import app
from planner.acl import parse_principal
from planner.api import create_app
from planner.client import END_HEADER, Client
from planner.export import export, parquet_bytes
from streams.settings import Settings

END = {"reason": "rankDepth", "depth": 5, "sources": ["text"],
       "message": "results end at rank depth 5: text had more matches; refine the query or add filters to reach them"}
PRINCIPAL = parse_principal("tenant:default/user:local")


class PagedPlanner:
    """A search of ``total`` hits in pages of ``k``; the last page carries ``end`` if given."""

    def __init__(self, total: int, end: dict[str, Any] | None) -> None:
        self.total, self.end = total, end

    def search(self, body: dict[str, Any], principal: Any) -> dict[str, Any]:
        start = int(body.get("cursor") or 0)
        stop = min(start + int(body["k"]), self.total)
        page: dict[str, Any] = {"asOfSeq": 7, "results": [{"chunkId": f"c{n}"} for n in range(start, stop)]}
        if stop < self.total:
            page["cursor"] = str(stop)
        elif self.end is not None:
            page["end"] = self.end
        return page


@pytest.mark.parametrize("total", [5, 150, 200])  # one page, two pages, a page boundary at the end
def test_the_export_carries_the_searchs_end(total: int) -> None:
    result = export(PagedPlanner(total, END), PRINCIPAL, {"what": "hits", "query": "q"})  # type: ignore[arg-type]
    assert result.end == END
    assert [row["rank"] for row in result.rows] == list(range(1, total + 1))


def test_results_that_ran_out_or_a_limit_carry_no_end() -> None:
    assert export(PagedPlanner(150, None), PRINCIPAL, {"what": "hits", "query": "q"}).end is None  # type: ignore[arg-type]
    limited = export(PagedPlanner(150, END), PRINCIPAL, {"what": "hits", "query": "q", "limit": 120})  # type: ignore[arg-type]
    assert limited.end is None and len(list(limited.rows)) == 120


def test_parquet_metadata_and_the_http_header_say_the_end(tmp_path: Path) -> None:
    data = parquet_bytes(export(PagedPlanner(150, END), PRINCIPAL, {"what": "hits", "query": "q"}))  # type: ignore[arg-type]
    assert json.loads(pq.ParquetFile(io.BytesIO(data)).schema_arrow.metadata[b"usl.end"]) == END
    api = TestClient(create_app(Settings.from_env({}, home=tmp_path), "127.0.0.1:9",
                                planner=PagedPlanner(150, END)), base_url="http://localhost:8765")
    for fmt in ("jsonl", "parquet"):
        answer = api.get(f"/v1/export?what=hits&query=q&format={fmt}")
        assert answer.status_code == 200, answer.text
        assert json.loads(answer.headers[END_HEADER]) == END
    ran_out = TestClient(create_app(Settings.from_env({}, home=tmp_path), "127.0.0.1:9",
                                    planner=PagedPlanner(150, None)), base_url="http://localhost:8765")
    assert END_HEADER not in ran_out.get("/v1/export?what=hits&query=q").headers


def test_the_client_reads_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    client = Client("http://127.0.0.1:9")
    headers = {"x-usl-as-of-seq": "7", END_HEADER.lower(): json.dumps(END)}
    monkeypatch.setattr(client, "_exchange", lambda *args, **kwargs: (200, headers, b"{}\n"))
    assert client.export("hits", query="q").end == END


def test_usl_export_prints_the_end_on_stderr(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(deploy.cli.export, "_through_api", lambda *args: (7, b'{"rank":1}\n', END))
    result = CliRunner().invoke(app, ["export", "hits", "-q", "q"], env={"USL_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert "1 rows" in result.output and "results end at rank depth 5" in result.output
