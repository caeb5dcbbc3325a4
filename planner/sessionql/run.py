"""Running a SessionQL query on pinned generations, as one principal, at one asOfSeq.

Table queries run as their compiled SQL through :class:`planner.sql.SqlAttachment`: the very
views, the very snapshot and ACL filtering (rows of unreadable sessions and rows above
``asOfSeq`` never reach DuckDB), the same lock-down, timeout and memory limit. Lineage queries
read the structured generation through :func:`planner.sessionql.lineage.lineage_walk`
and run the compiled SQL over those edges in a private, locked in-memory DuckDB.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow as pa

from planner.acl import Principal, can_read
from planner.exceptions import IndexUnavailable, QueryError
from planner.sessionql.compile import CompiledQuery, compile_query
from planner.sessionql.lineage import LINEAGE_SCHEMA, MAX_DEPTH, lineage_walk
from planner.sessionql.nodes import LineageSource, Query, to_text
from planner.sessionql.parser import parse
from sinks.exceptions import GenerationError
from sinks.generations import MANIFEST_FILE, Manifest
from sinks.shard_tables import GenerationDirs, generation_dirs

__all__ = ["run_sessionql"]


def run_sessionql(
    text: str,
    *,
    as_of_seq: int,
    principal: Principal,
    session_acls: Mapping[str, Mapping[str, Any]],
    analytics_gen_dir: GenerationDirs | None,
    structured_gen_dir: GenerationDirs | None,
    max_rows: int = 10000,
    timeout_seconds: float = 10.0,
    max_result_bytes: int | None = None,
) -> dict[str, Any]:
    """Answer one SessionQL query.

    ``session_acls`` maps sessionId → its *latest* access list (a missing session is
    invisible). Table queries need ``analytics_gen_dir``; lineage queries need
    ``structured_gen_dir`` (either: one generation, or every shard's of a sharded index,
    read as one; ``generations`` then names the slowest shard's). Returns ``asOfSeq``, ``generations`` ({kind: generationId}),
    ``watermarks`` ({kind: {generationId, builtThroughSeq}}, the SQL attachment's ``generations``),
    ``columns``, ``types``, ``rows`` (at most ``max_rows``, and for table queries no more than
    fit in ``max_result_bytes`` of JSON: the SQL attachment's cap, its default when ``None``),
    ``rowCount``, ``truncated`` (with ``truncation`` saying why, for table queries),
    ``query`` (the normalized text), ``sql`` for table queries (the SQL attachment query that
    gives the same rows) and, when the generation read is built through less than
    ``asOfSeq``, ``uncovered``. A malformed query raises
    :class:`~planner.sessionql.exceptions.SessionQLError` (400) naming the line and column.
    """
    query = parse(text)
    if isinstance(as_of_seq, bool) or not isinstance(as_of_seq, int) or as_of_seq < 0:
        raise QueryError(f"asOfSeq must be a non-negative integer, not {as_of_seq!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise QueryError("max_rows must be a positive integer")
    compiled = compile_query(query)
    if isinstance(query.source, LineageSource):
        body = _lineage(query, compiled, as_of_seq, principal, session_acls,
                        structured_gen_dir, max_rows)
    else:
        body = _table(compiled, as_of_seq, principal, session_acls, analytics_gen_dir,
                      structured_gen_dir, max_rows, timeout_seconds, max_result_bytes)
    return {"query": to_text(query), **body}


def _table(compiled: CompiledQuery, as_of_seq: int, principal: Principal,
           session_acls: Mapping[str, Mapping[str, Any]], analytics_gen_dir: GenerationDirs | None,
           structured_gen_dir: GenerationDirs | None, max_rows: int,
           timeout_seconds: float, max_result_bytes: int | None) -> dict[str, Any]:
    from planner.sql import DEFAULT_MAX_RESULT_BYTES, SqlAttachment

    if analytics_gen_dir is None:
        raise IndexUnavailable("the analytics index has no generation to query yet",
                               hint="Wait until `usl status` shows the analytics index.")
    answer = SqlAttachment(analytics_gen_dir, structured_gen_dir).query(
        compiled.sql, as_of_seq=as_of_seq, principal=principal, session_acls=session_acls,
        max_rows=max_rows, timeout_seconds=timeout_seconds,
        max_result_bytes=DEFAULT_MAX_RESULT_BYTES if max_result_bytes is None else max_result_bytes)
    body: dict[str, Any] = {
        "asOfSeq": as_of_seq,
        "generations": {kind: info["generationId"] for kind, info in answer["generations"].items()},
        # The SQL attachment's and search's shape, for tools that read all three; `generations`
        # keeps its flat shape for the clients that already read it.
        "watermarks": {kind: dict(info) for kind, info in answer["generations"].items()},
        "columns": answer["columns"], "types": answer["types"], "rows": answer["rows"],
        "rowCount": answer["rowCount"], "truncated": answer["truncated"], "sql": compiled.sql,
    }
    if "truncation" in answer:
        body["truncation"] = answer["truncation"]
    if "uncovered" in answer:
        body["uncovered"] = answer["uncovered"]
    return body


def _lineage(query: Query, compiled: CompiledQuery, as_of_seq: int, principal: Principal,
             session_acls: Mapping[str, Mapping[str, Any]], structured_gen_dir: GenerationDirs | None,
             max_rows: int) -> dict[str, Any]:
    source = query.source
    assert isinstance(source, LineageSource)
    manifest = _manifest(structured_gen_dir)
    if structured_gen_dir is None or manifest is None:
        raise IndexUnavailable("the structured index has no generation to read lineage from yet",
                               hint="Wait until `usl status` shows the structured index.")
    readable = {sid for sid, acl in session_acls.items() if can_read(principal, acl)}
    edges, cut = lineage_walk(structured_gen_dir, source.entity_id, source.direction,
                              as_of_seq=as_of_seq, readable=readable)
    con = duckdb.connect(":memory:", config={
        "threads": 1, "memory_limit": "256MB", "autoinstall_known_extensions": False,
        "autoload_known_extensions": False, "python_enable_replacements": False,
    })
    try:
        con.execute("SET enable_external_access = false")
        con.register("lineage", pa.Table.from_pylist(edges, schema=LINEAGE_SCHEMA))
        con.execute("SET lock_configuration = true")
        result = con.execute(compiled.sql)
        types = [str(d[1]) for d in result.description or ()]
        rows = result.fetchmany(max_rows + 1)
    except duckdb.Error as exc:
        raise QueryError(f"the lineage query failed: {exc}") from None
    finally:
        con.close()
    body: dict[str, Any] = {
        "asOfSeq": as_of_seq, "generations": {"structured": manifest.generation_id},
        "watermarks": {"structured": {"generationId": manifest.generation_id,
                                      "builtThroughSeq": manifest.built_through_seq}},
        "columns": list(compiled.columns), "types": types,
        "rows": [[_plain(value) for value in row] for row in rows[:max_rows]],
        "rowCount": min(len(rows), max_rows), "truncated": len(rows) > max_rows or cut,
    }
    if cut and len(rows) <= max_rows:
        # The walk stopped at the depth cap with edges beyond it: the rows are not all there is.
        body["truncation"] = {"reason": "depth", "maxDepth": MAX_DEPTH}
    if manifest.built_through_seq < as_of_seq:
        body["uncovered"] = {"fromSeq": manifest.built_through_seq + 1, "toSeq": as_of_seq}
    return body


def _manifest(gen_dirs: GenerationDirs | None) -> Manifest | None:
    """The generation's manifest (of a sharded index: the slowest shard's, the one built
    through the least); None if one cannot be read."""
    if gen_dirs is None:
        return None
    try:
        manifests = [Manifest.from_json((gen_dir / MANIFEST_FILE).read_bytes())
                     for gen_dir in generation_dirs(gen_dirs)]
    except (OSError, GenerationError):
        return None
    return min(manifests, key=lambda manifest: manifest.built_through_seq, default=None)


def _plain(value: Any) -> Any:
    """A lineage answer's value as JSON data (strings, integers, floats, NULL)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value
