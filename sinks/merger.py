"""Background merges: a segment merge never holds a commit or a watermark.

A writer that merges segments by size tier (the vector writer) would otherwise merge inside
``write``, and so inside the sink's commit: the merge that builds a 640k-vector HNSW graph held
every vector commit, and every hybrid ``indexed`` answer, for minutes. Here the sink loop
commits batches without merging, and a :class:`BackgroundMerger` thread builds each merge from
immutable inputs; the loop then publishes the result as one more generation
(:func:`commit_merge`), with the same ``builtThroughSeq``, offsets and records as its parent, so
a merge changes how a generation is laid out and never what it holds.

A merge must not slow the commits beside it either: the vector writer builds it in a child
process at a lower priority (``VectorWriter.build_merge``), and the merger hashes the merged
files here, in its thread, into the sink's :class:`FileDigests`, so publishing the merge (and
verifying it before the next commit) reads none of its hundreds of MB in the sink loop.

The inputs are hard links to the committed segment files, taken when the merge starts: GC may
remove the generation they came from while the merge runs, the bytes stay. The merge is built
outside the index root (``<home>/merges/<kind>/<log>/``), so no reader or GC ever sees it half
done; a crash leaves a work dir that the next start removes. When the loop applies a merge, its
input segments must all still be in the current generation (an inline merge forced by
``hard_max_segments`` may have taken them meanwhile); otherwise the merge is dropped, and the
next plan starts from the current generation.

A writer takes part by providing ``plan_merge(gen_dir) -> names``,
``build_merge(work_dir, names, new_name) -> files`` and
``apply_merge(staging, names, work_dir, new_name)``, and a ``background_merges`` flag that
tells ``write`` to leave merging to the merger.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sinks.generations import FileDigests, GenerationStore, Manifest, clone_into, link_or_copy

__all__ = ["BackgroundMerger", "MergeJob", "MergingWriter", "commit_merge", "merge_work_root"]

log = logging.getLogger("usl.sink")


@runtime_checkable
class MergingWriter(Protocol):
    """An :class:`sinks.writer.IndexWriter` whose merges can run in the background."""

    kind: str
    background_merges: bool

    def plan_merge(self, gen_dir: Path) -> list[str]:
        """The segments of the generation in ``gen_dir`` to merge next (``[]``: none)."""
        ...

    def segment_files(self, name: str) -> list[str]:
        """The file names that make up segment ``name``."""
        ...

    def build_merge(self, work_dir: Path, names: list[str], new_name: str) -> list[str]:
        """Merge the segments ``names`` found in ``work_dir`` into ``new_name`` there."""
        ...

    def apply_merge(self, staging: Path, names: list[str], work_dir: Path, new_name: str) -> None:
        """In ``staging`` (a clone of the current generation): replace ``names`` by ``new_name``."""
        ...


@dataclass(frozen=True)
class MergeJob:
    """A merge built from one committed generation of one log, ready to publish."""

    log_id: str
    line: str
    source_generation: int
    names: tuple[str, ...]
    new_name: str
    work_dir: Path
    seconds: float
    finished_at: float = 0.0  # time.monotonic() when the build ended (the bench's merge-lag window)


def merge_work_root(home: Path | str, kind: str) -> Path:
    return Path(home).resolve() / "merges" / kind


class BackgroundMerger:
    """One thread that merges, one log at a time, what each log's newest generation needs.

    :meth:`offer` is called after every commit with the log's new generation; :meth:`finished`
    hands back merges ready to publish. At most one merge per log is in flight or waiting to
    be published, so a cascade (four merged segments making one of the next tier) proceeds
    one generation at a time.
    """

    def __init__(self, writer: MergingWriter, work_root: Path, *, digests: FileDigests | None = None) -> None:
        self.writer = writer
        # The sink loop's digests: the merged files are hashed here, in the background, so
        # publishing the merge (and verifying it before the next commit) hashes nothing.
        self.digests = digests
        self.work_root = Path(work_root)
        shutil.rmtree(self.work_root, ignore_errors=True)  # what a crash left mid-merge
        self._offers: dict[str, tuple[str, int, Path]] = {}
        self._busy: set[str] = set()
        self._done: list[MergeJob] = []
        self._cond = threading.Condition()
        self._closed = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"usl-merge-{writer.kind}", daemon=True)
        self._thread.start()

    def offer(self, log_id: str, line: str, generation_id: int, gen_dir: Path) -> None:
        """A log committed ``generation_id``: plan its next merge from there (replacing an
        older offer of the same log)."""
        with self._cond:
            self._raise_failure()
            self._offers[log_id] = (line, generation_id, Path(gen_dir))
            self._cond.notify_all()

    def finished(self) -> list[MergeJob]:
        """Merges ready to publish; the caller publishes each (or drops it) and then calls
        :meth:`settled` for its log."""
        with self._cond:
            self._raise_failure()
            done, self._done = self._done, []
            return done

    def settled(self, job: MergeJob) -> None:
        """``job`` was published or dropped: its log may merge again."""
        shutil.rmtree(job.work_dir, ignore_errors=True)
        with self._cond:
            self._busy.discard(job.log_id)
            self._cond.notify_all()

    def idle(self) -> bool:
        """No merge is being built, waiting to be published, or about to be planned."""
        with self._cond:
            return not self._busy and not self._offers and not self._done

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)
        shutil.rmtree(self.work_root, ignore_errors=True)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def _next_offer(self) -> tuple[str, str, int, Path] | None:
        with self._cond:
            while not self._closed:
                ready = sorted(log_id for log_id in self._offers if log_id not in self._busy)
                if ready:
                    log_id = ready[0]
                    line, generation_id, gen_dir = self._offers.pop(log_id)
                    self._busy.add(log_id)
                    return log_id, line, generation_id, gen_dir
                self._cond.wait(timeout=1.0)
            return None

    def _run(self) -> None:
        while (offer := self._next_offer()) is not None:
            log_id, line, generation_id, gen_dir = offer
            job = None
            try:
                job = self._build(log_id, line, generation_id, gen_dir)
            except FileNotFoundError:
                pass  # the generation was collected before its files were linked: a newer one is offered
            except BaseException as exc:  # handed to the sink loop, which fails like a commit would
                log.exception("%s sink: background merge of log %s failed", self.writer.kind, log_id)
                with self._cond:
                    self._failure = exc
            with self._cond:
                if job is None:
                    self._busy.discard(log_id)
                else:
                    self._done.append(job)
                self._cond.notify_all()

    def _build(self, log_id: str, line: str, generation_id: int, gen_dir: Path) -> MergeJob | None:
        names = self.writer.plan_merge(gen_dir)
        if not names:
            return None
        started = time.monotonic()
        new_name = f"merged-{generation_id:08d}-b"
        work_dir = self.work_root / log_id / f"{line}-{generation_id:08d}"
        shutil.rmtree(work_dir, ignore_errors=True)
        work_dir.mkdir(parents=True)
        for name in names:
            for file in self.writer.segment_files(name):
                link_or_copy(gen_dir / file, work_dir / file)
        files = self.writer.build_merge(work_dir, list(names), new_name)
        if self.digests is not None:
            for file in files:
                path = work_dir / file
                self.digests.digest(path, path.stat())
        ended = time.monotonic()
        return MergeJob(log_id, line, generation_id, tuple(names), new_name, work_dir, ended - started, ended)


def commit_merge(store: GenerationStore, current: Manifest, writer: MergingWriter, job: MergeJob, *,
                 digests: FileDigests | None = None) -> Manifest | None:
    """Publish ``job`` as the generation after ``current``: the same records, watermark and
    offsets, its input segments replaced by the merged one. None (nothing committed) when an
    input is no longer in ``current``. ``digests``: those the merger hashed the merge with."""
    current_dir = store.generation_dir(current.generation_id)
    present = {ref.path for ref in current.segments}
    if not all(file in present for name in job.names for file in writer.segment_files(name)):
        return None
    staging = store.begin()
    try:
        clone_into(current_dir, staging, copy_names=())
        writer.apply_merge(staging, list(job.names), job.work_dir, job.new_name)
        extra: dict[str, Any] = {**current.extra, "mergedFrom": list(job.names)}
        manifest = replace(current, generation_id=0, parent_generation_id=None, segments=(),
                           created_at=0.0, extra=extra)
        return store.commit(staging, manifest, digests=digests)
    except BaseException:
        store.abort()
        raise

