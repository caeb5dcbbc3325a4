"""One registry of index kinds: the sinks build, status lists and metrics label the same kinds."""

from __future__ import annotations

import pytest

from sinks.exceptions import SinkError
from sinks.kinds import ALL_KINDS, WRITERS, make_writer
from streams import metrics
from streams.settings import Settings


def test_the_metric_labels_name_every_registered_kind() -> None:
    assert tuple(metrics.INDEX_KINDS) == ALL_KINDS


def test_status_lists_the_registered_kinds() -> None:
    from planner.status import INDEX_KINDS

    assert INDEX_KINDS == ALL_KINDS


@pytest.mark.parametrize("kind", [k for k in WRITERS if k != "vector"])
def test_each_kind_builds_a_writer_of_that_kind(kind: str, tmp_path) -> None:
    writer = make_writer(kind, Settings.from_env({}, home=tmp_path))
    assert writer.kind == kind


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SinkError, match="text, vector"):
        make_writer("lucene", Settings.from_env({}))
