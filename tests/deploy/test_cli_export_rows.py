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
    monkeypatch.setattr(export_cli, "_through_api", lambda *args: (42, data, None))
    output = tmp_path / f"hits.{fmt}"
    export_cli.export_command("hits", query="q", fmt=fmt, output=output, as_of=None, freshness="indexed",
                              mode="hybrid", limit=None, principal_text=None, log="default", session=None)
    assert output.read_bytes() == data
    assert f"at asOfSeq 42: 3 rows to {output} ({fmt})" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("where", ["missing/dir/hits.jsonl", "."])
def test_an_output_that_cannot_be_written_is_one_line_before_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
) -> None:
    """Found by a new user: `usl export sessions -o /no/such/dir/x.jsonl` (or -o a directory) ran
    the whole export, then ended in a FileNotFoundError / IsADirectoryError traceback (exit 1)."""
    from streams.exceptions import USLError

    asked: list[object] = []
    monkeypatch.setattr(export_cli, "load_settings", lambda: None)
    monkeypatch.setattr(export_cli, "_through_api", lambda *args: asked.append(args) or (42, b"{}\n", None))
    with pytest.raises(USLError, match="cannot write the export to"):
        export_cli.export_command("sessions", query=None, fmt="jsonl", output=tmp_path / where, as_of=None,
                                  freshness="indexed", mode="hybrid", limit=None, principal_text=None,
                                  log="default", session=None)
    assert asked == []


def test_a_failed_write_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.exceptions import USLError

    monkeypatch.setattr(export_cli, "load_settings", lambda: None)
    monkeypatch.setattr(export_cli, "_through_api", lambda *args: (42, b"{}\n", None))
    output = tmp_path / "x.jsonl"
    monkeypatch.setattr(Path, "write_bytes", lambda self, data: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    with pytest.raises(USLError, match="Permission denied"):
        export_cli.export_command("sessions", query=None, fmt="jsonl", output=output, as_of=None,
                                  freshness="indexed", mode="hybrid", limit=None, principal_text=None,
                                  log="default", session=None)


def test_one_sessions_events_are_exported_by_its_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user: the API exports one session (`sessionId`, the search page's session
    view), but `usl export` had no way to ask for it, so a session's events came only with every
    other session's."""
    from streams.exceptions import USLError

    asked: list[dict] = []
    monkeypatch.setattr(export_cli, "load_settings", lambda: None)
    monkeypatch.setattr(export_cli, "_through_api", lambda current, principal, fmt, params: asked.append(params) or (7, b"", None))
    export_cli.export_command("sessions", query=None, fmt="jsonl", output=tmp_path / "s.jsonl", as_of=None,
                              freshness="indexed", mode="hybrid", limit=None, principal_text=None, log="default",
                              session="8aef9b8f-ae65-42f1-b662-1b8e68b8fd1e")
    assert asked[0]["sessionId"] == "8aef9b8f-ae65-42f1-b662-1b8e68b8fd1e"
    with pytest.raises(USLError, match="--session applies to `usl export sessions`"):
        export_cli.export_command("turns", query=None, fmt="jsonl", output=None, as_of=None, freshness="indexed",
                                  mode="hybrid", limit=None, principal_text=None, log="default", session="s-1")
