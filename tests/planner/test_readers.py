"""ReaderCache lookups the tail scan makes (the event ids a structured generation holds), the
manifests every query's pins read, and the per-generation tables kept out of Python's full
garbage collections."""

from __future__ import annotations

import gc
import multiprocessing
import weakref
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from planner.engine import Planner
from planner.readers import CollectorShelter, IndexPin, ReaderCache, pin_for_query
from sinks.generations import GenerationStore, Manifest
from streams.settings import Settings
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


@pytest.fixture
def thawed() -> Iterator[None]:
    """Whatever a test freezes is handed back to the collector afterwards."""
    try:
        yield
    finally:
        gc.unfreeze()


def _sessions(settings: Settings, kafka_bootstrap: str, count: int) -> IndexBuilder:
    """A builder whose log holds ``count`` tenant-wide sessions of two turns each."""
    builder = IndexBuilder(settings, kafka_bootstrap, "default")
    for number in range(count):
        builder.append([event for group in session_events(
            "default", f"s-{number}", acl("acme", "*"), turns=2, words="deploy") for event in group])
    return builder


def _tracked_ids() -> set[int]:
    return {id(item) for item in gc.get_objects()}  # every generation but the permanent one


def test_a_loaded_generations_tables_are_left_out_of_full_collections(
        kafka_bootstrap: str, tmp_path: Path, thawed: None) -> None:
    # A full collection walks every tracked object; the chunk table and the access lists hold
    # one or more per chunk, so they are frozen once loaded (issue 21: the p99 was a collection).
    settings = make_test_settings(tmp_path, kafka_bootstrap)
    builder = _sessions(settings, kafka_bootstrap, 3)
    builder.commit("structured")
    planner = Planner(settings, kafka_bootstrap)
    try:
        with planner.snapshot("default") as snapshot:
            pin = snapshot.pin("structured")
            assert pin is not None
            readers = ReaderCache(shelter=CollectorShelter())
            table = readers.chunk_table(pin)
            acls = readers.session_acls(pin)
            assert table.rows and acls
            tracked = _tracked_ids()
            assert not {id(table.rows), id(next(iter(table.rows.values()))), id(acls),
                        id(next(iter(acls.values())))} & tracked
            left_alone = ReaderCache(shelter=None).chunk_table(pin)
            assert id(left_alone.rows) in _tracked_ids()
    finally:
        planner.close()
        builder.close()


def _switch_generations(kafka_bootstrap: str, directory: str) -> tuple[list[bool], list[int]]:
    """Commits 40 generations of the same chunks and loads each through one cache: which
    loaded tables are alive at the end, and the permanent generation's size after each load."""
    settings = make_test_settings(Path(directory), kafka_bootstrap)
    builder = _sessions(settings, kafka_bootstrap, 5)
    planner = Planner(settings, kafka_bootstrap)
    readers = ReaderCache(shelter=CollectorShelter(refresh_every=8))
    tables: list[weakref.ref[object]] = []
    frozen: list[int] = []
    try:
        for _ in range(40):
            builder.commit("structured")  # a new generation directory of the same chunks
            with planner.snapshot("default") as snapshot:
                pin = snapshot.pin("structured")
                assert pin is not None
                tables.append(weakref.ref(readers.chunk_table(pin)))
                readers.session_acls(pin)
            frozen.append(gc.get_freeze_count())
        return [table() is not None for table in tables], frozen
    finally:
        planner.close()
        builder.close()


def test_replaced_generations_free_their_tables_and_frozen_objects_stay_bounded(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    # Frozen objects are still freed by reference counting: a generation's tables, frozen when
    # loaded, go when the cache drops the generation, and switching generations of the same
    # data over and over leaves the permanent generation as large as it was.
    # gc.freeze takes every tracked object of the process, so the switches run in a process of
    # their own: in a test worker, what other tests' threads allocated meanwhile was frozen too
    # (a CI run saw the permanent generation grow by 44 562 objects that were none of these).
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        alive, frozen = pool.submit(_switch_generations, kafka_bootstrap, str(tmp_path)).result()
    # The cache keeps the last three tables; every older one is freed though it was frozen.
    assert alive == [False] * 37 + [True] * 3
    assert max(frozen[20:]) - max(frozen[:20]) < 500, frozen


def test_segments_compaction_replaced_go_with_the_generations_that_read_them(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The structured sink writes a Parquet segment a commit and merges eight small ones into
    # one; the planner loads each segment once and shares it with the next generation. Kept by
    # count (4096), every merge stayed loaded: dozens of copies of each chunk's row an hour at
    # one commit every 2 s, and the API's memory grew as long as commits came.
    import planner.chunktable as chunktable

    settings = make_test_settings(tmp_path, kafka_bootstrap)
    builder = _sessions(settings, kafka_bootstrap, 2)
    planner = Planner(settings, kafka_bootstrap)
    readers = ReaderCache(shelter=None)
    loaded: list[str] = []
    for name in ("_load_chunks", "_load_acls"):
        load = getattr(chunktable, name)
        monkeypatch.setattr(chunktable, name, lambda path, *args, load=load: (
            loaded.append(path.name), load(path, *args))[1])
    listed: list[set[tuple[str, int]]] = []  # each generation's segments read (name, inode)
    try:
        for number in range(30):
            builder.append([event for group in session_events(
                "default", f"s-new-{number}", acl("acme", "*"), turns=1, words="deploy")
                for event in group])
            builder.commit("structured")
            with planner.snapshot("default") as snapshot:
                pin = snapshot.pin("structured")
                assert pin is not None
                files = {(path.name, path.stat().st_ino) for table in ("chunks", "sessions")
                         for path in pin.directory.glob(f"{table}-*.parquet")}
                loaded.clear()
                readers.chunk_table(pin)
                readers.session_acls(pin)
                if listed:
                    # A new generation reads its new segments only, the others are shared.
                    assert set(loaded) == {name for name, _ in files - listed[-1]}, number
                listed.append(files)
        still_read = set().union(*listed[-6:])  # the generations the cache keeps tables of
        assert set().union(*listed) - still_read, "no segment was merged away"
        kept = {(name, inode) for _, name, inode, _ in list(readers._segments._items.keys())}
        assert kept and kept <= still_read
    finally:
        planner.close()
        builder.close()


def test_a_cycle_frozen_while_alive_is_collected_at_the_next_refresh(thawed: None) -> None:
    # Freezing keeps cyclic garbage: a cycle frozen while in use is never collected once it is
    # unreachable, unless the permanent generation is handed back now and then.
    class Node:
        pass

    shelter = CollectorShelter(refresh_every=4)
    shelter.loaded()  # the first freeze of the cycle: count 1 of 4
    node = Node()
    node.self = node  # type: ignore[attr-defined]
    gone = weakref.ref(node)
    shelter.loaded()
    del node
    shelter.loaded()
    gc.collect()
    assert gone() is not None  # frozen: no collection sees it
    shelter.loaded()  # the fourth: unfreeze, collect, freeze
    assert gone() is None
