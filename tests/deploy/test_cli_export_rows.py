"""``usl export`` says how many rows it wrote, in either format (docs/planner.md, Export).

A Parquet export printed ``exported hits ... to hits.parquet (parquet)`` with no count: the count
was the file's newlines, which only JSONL has.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deploy.cli import export as export_cli


def _parquet(rows: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"seq": list(range(rows))}), sink)
    return sink.getvalue()


@pytest.mark.parametrize(("fmt", "data"), [("parquet", _parquet(3)), ("jsonl", b'{"a":1}\n{"a":2}\n{"a":3}\n')])
def test_the_summary_counts_the_rows_of_either_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fmt: str, data: bytes,
) -> None:
    monkeypatch.setattr(export_cli, "load_settings", lambda: None)
    monkeypatch.setattr(export_cli, "_through_api", lambda *args: (42, data))
    output = tmp_path / f"hits.{fmt}"
    export_cli.export_command("hits", query="q", fmt=fmt, output=output, as_of=None, freshness="indexed",
                              mode="hybrid", limit=None, principal_text=None, log="default")
    assert output.read_bytes() == data
    assert f"at asOfSeq 42: 3 rows to {output} ({fmt})" in " ".join(capsys.readouterr().err.split())
