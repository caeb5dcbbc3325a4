"""ReaderCache lookups the tail scan makes: the event ids a structured generation holds."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from planner.engine import Planner
from tests.planner.corpus import IndexBuilder, acl, make_test_settings, session_events


def test_known_event_ids_are_the_indexed_ids_at_or_below_the_seq(kafka_bootstrap: str,
                                                                  tmp_path: Path) -> None:
    settings = make_test_settings(tmp_path, kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "default")
    groups = session_events("default", "s-known", acl("acme", "*"), turns=3, words="deploy")
    builder.append([event for group in groups[:3] for event in group])
    builder.commit("structured")
    builder.append([event for event in groups[3]], feed=False)  # above the index: never known
    planner = Planner(settings, kafka_bootstrap)
    try:
        with planner.snapshot("default") as snapshot:
            pin = snapshot.pin("structured")
            assert pin is not None
            asked = [*builder.seqs, "not-an-event"]
            indexed = {event_id: seq for event_id, seq in builder.seqs.items()
                       if seq <= pin.built_through_seq}
            middle = sorted(indexed.values())[len(indexed) // 2]
            for max_seq in (pin.built_through_seq, middle, 0):
                expected = {event_id for event_id, seq in indexed.items() if seq <= max_seq}
                assert planner._readers.known_event_ids(pin, asked, max_seq) == expected
            # Lookups share one database, each on its own cursor: concurrent queries agree.
            with ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(lambda _: planner._readers.known_event_ids(
                    pin, asked, pin.built_through_seq), range(16)))
            assert all(answer == set(indexed) for answer in answers)
    finally:
        planner.close()
        builder.close()
