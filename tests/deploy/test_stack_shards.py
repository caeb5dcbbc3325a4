"""``usl up`` with ``USL_SINK_SHARDS``: which sink processes the local stack supervises."""

from __future__ import annotations

from pathlib import Path

from deploy.stack import sink_children
from sinks.shards import Shard, parse_shard
from streams.settings import Settings


def test_one_sink_by_default(tmp_path: Path) -> None:
    assert sink_children(Settings.from_env({}, home=tmp_path)) == {"sinks": ["sink"]}


def test_n_shards_of_every_kind(tmp_path: Path) -> None:
    children = sink_children(Settings.from_env({"USL_SINK_SHARDS": "3"}, home=tmp_path))
    assert "sinks" not in children  # no unsharded sink beside the shards
    shards = []
    for args in children.values():
        assert args[:2] == ["sink", "--kind"] and args[3] == "--shard"
        assert set(args[2].split(",")) == {"text", "vector", "structured", "analytics", "toolresults"}
        shards.append(parse_shard(args[4]))
    assert sorted(s for s in shards if s is not None) == [Shard(0, 3), Shard(1, 3), Shard(2, 3)]
