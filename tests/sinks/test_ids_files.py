"""The dedup ids files of a line's generations: every id kept, few files however many commits."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sinks.generations import GenerationStore, Manifest, clone_into
from sinks.runner import _load_ids, write_ids


def _manifest(seq: int) -> Manifest:
    return Manifest(kind="structured", log_id="default", line="", generation_id=0, built_through_seq=seq,
                    schema_version="1", asp_version="1.0", chunker={"version": "1.0"}, embedding=None,
                    redaction_policy_hash="p" * 16)


def _commit(store: GenerationStore, seq: int, ids: list[str]) -> Manifest:
    """One commit as a sink makes it: the parent's files hard-linked, the batch's ids added."""
    staging = store.begin()
    current = store.current_id()
    if current is not None:
        clone_into(store.generation_dir(current), staging, copy_names=())
    write_ids(staging, ids)
    return store.commit(staging, _manifest(seq))


def _ids_files(gen_dir: Path) -> list[Path]:
    return sorted(gen_dir.glob("ids-*.txt"))


def test_a_long_running_line_keeps_a_few_ids_files_not_one_per_commit(tmp_path: Path) -> None:
    # Before: generation N held N ids files (2 700 after an hour of a live stack), each commit
    # cloned and listed them all.
    store = GenerationStore(tmp_path / "indexes", "default", "structured")
    for n in range(1, 301):
        manifest = _commit(store, n, [f"chunk-{n}-{i}" for i in range(3)])
    gen_dir = store.generation_dir(manifest.generation_id)
    assert len(_ids_files(gen_dir)) <= 10
    assert _load_ids(gen_dir) == {f"chunk-{n}-{i}" for n in range(1, 301) for i in range(3)}
    assert {ref.path for ref in manifest.segments} == {path.name for path in _ids_files(gen_dir)}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.integers(min_value=0, max_value=30), min_size=20, max_size=80))
def test_folding_keeps_every_id_and_never_touches_an_older_generation(tmp_path_factory, batches: list[int]) -> None:
    store = GenerationStore(tmp_path_factory.mktemp("ids") / "indexes", "default", "structured")
    seen: set[str] = set()
    committed: list[Manifest] = []
    for n, size in enumerate(batches, start=1):
        batch = [f"c{n}-{i}" for i in range(size)]
        seen.update(batch)
        manifest = _commit(store, n, batch)
        committed.append(manifest)
        gen_dir = store.generation_dir(manifest.generation_id)
        assert _load_ids(gen_dir) == seen
        files = _ids_files(gen_dir)
        total = sum(path.stat().st_size for path in files)
        assert len(files) <= (math.log2(total) + 2 if total else 0)
        assert not list(gen_dir.glob("*.fold"))
    # A fold replaces the staging's hard links with a new file: the files the earlier
    # generations still hold are byte for byte what they committed.
    for manifest in committed:
        if store.generation_dir(manifest.generation_id).exists():
            store.verify(manifest)
