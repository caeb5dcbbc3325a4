"""``usl rebuild`` refuses to build what the running sinks of a stalled index would not extend
(the whole path through the CLI and a broker: tests/sinks/test_stalled_line.py)."""

from __future__ import annotations

from typing import Any

from deploy.cli.sinks import stall_refusal

CHUNKER = {"version": "1.1", "targetTokens": 768, "overlapTokens": 96, "idleGapSeconds": 300.0}
REBUILD = {"redactionPolicy": "new", "chunker": CHUNKER}
STALL = {"what": "chunker", "built": "x", "writes": "y"}


def _watermark(policy: str, stalled: bool = True, **chunker: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"versions": {"redactionPolicy": policy, "chunker": {**CHUNKER, **chunker}}}
    return {**record, "stalled": STALL} if stalled else record


def test_a_stall_under_other_settings_names_them_and_their_setting() -> None:
    watermarks = {("rx", "text"): _watermark("new", targetTokens=512, overlapTokens=64)}
    message = stall_refusal(watermarks, ["text"], ["rx"], REBUILD)
    assert message is not None and message.startswith(
        "text of log 'rx' is stalled: the sinks write chunker overlapTokens=64, targetTokens=512; this "
        "rebuild would write overlapTokens=96, targetTokens=768")
    assert "(USL_CHUNK_OVERLAP_TOKENS=64 USL_CHUNK_TOKENS=512)" in message
    policy = stall_refusal({("rx", "toolresults"): _watermark("old")}, ["toolresults"], ["rx"], REBUILD)
    assert policy is not None and "the sinks write redaction policy old; this rebuild would write new" in policy
    assert "release the sinks run" in policy


def test_what_a_rebuild_may_do_is_not_refused() -> None:
    same = {("rx", "text"): _watermark("new")}  # stalled, but the rebuild writes what the sinks write
    assert stall_refusal(same, ["text"], ["rx"], REBUILD) is None
    # The tool-results sink reads no chunks: a chunker difference does not stall it.
    assert stall_refusal({("rx", "toolresults"): _watermark("new", targetTokens=512)},
                         ["toolresults"], ["rx"], REBUILD) is None
    # Not stalled: the watermark's versions may be the last rebuild's, no evidence of the sinks.
    assert stall_refusal({("rx", "text"): _watermark("new", stalled=False, targetTokens=512)},
                         ["text"], ["rx"], REBUILD) is None
    # Another log, another kind than rebuilt: not this rebuild's business.
    assert stall_refusal({("ok", "text"): _watermark("new", targetTokens=512)}, ["text"], ["rx"], REBUILD) is None


def test_a_stalled_shard_is_named() -> None:
    sharded = {("rx", "vector"): {"shards": {"shard-0-of-2": _watermark("new", stalled=False),
                                             "shard-1-of-2": {**_watermark("new", targetTokens=512),
                                                              "shard": "shard-1-of-2"}}}}
    message = stall_refusal(sharded, ["text", "vector"], ["rx"], REBUILD)
    assert message is not None and message.startswith("vector shard-1-of-2 of log 'rx' is stalled")
