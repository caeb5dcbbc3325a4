"""ReaderCache lookups the tail scan makes (the event ids a structured generation holds), and
the manifests every query's pins read."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from planner.engine import Planner
from planner.readers import IndexPin, pin_for_query
from sinks.generations import GenerationStore, Manifest
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


def test_a_pinned_manifest_is_read_once_until_its_file_changes(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Each query pins every kind: the manifest (which lists every file of the generation) is
    # parsed and checksummed once per file identity, and read again when the file is replaced.
    store = GenerationStore(tmp_path / "indexes", "default", "text")
    staging = store.begin()
    (staging / "a.bin").write_bytes(b"a")
    store.commit(staging, Manifest(kind="text", log_id="default", line="", generation_id=0,
                                   built_through_seq=3, schema_version="text-1", asp_version="1.0",
                                   chunker={}, embedding=None, redaction_policy_hash="p" * 16))
    loads: list[int] = []
    load = GenerationStore.load

    def counting(self: GenerationStore, generation_id: int) -> Manifest:
        loads.append(generation_id)
        return load(self, generation_id)

    monkeypatch.setattr(GenerationStore, "load", counting)
    watermark = {"generationId": 1, "line": store.line}

    def pinned() -> IndexPin:
        pin = pin_for_query(store.root, "default", "text", watermark, ttl_seconds=60, holder="test")
        assert pin is not None
        pin.release()
        return pin

    first, second = pinned(), pinned()
    assert loads == [1] and second.manifest is first.manifest
    path = store.manifest_path(1)
    body = path.read_bytes()
    path.unlink()
    path.write_bytes(body)  # another file now, same bytes
    assert pinned().manifest == first.manifest and loads == [1, 1]
