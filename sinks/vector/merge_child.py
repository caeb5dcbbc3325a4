"""One vector tier merge in a process of its own: ``python -m sinks.vector.merge_child NICENESS JOB``.

:meth:`sinks.vector_writer.VectorWriter.build_merge` runs it so that a background merge neither
holds the sink's GIL (its Python loops and copies of hundreds of MB) nor takes the sink's core
(it runs at a lower priority). ``JOB`` is JSON: ``dir``, ``names``, ``new``, ``exactMax`` as
:func:`sinks.vector.faiss_index.merge_segments` takes them; the files it wrote go to stdout as
a JSON list.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import orjson

__all__ = ["main"]


def _exit_when_orphaned(parent: int) -> None:
    """Exit once the sink that started the merge is gone: nobody would publish what it builds."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def main(argv: list[str]) -> int:
    niceness, job = int(argv[0]), orjson.loads(argv[1])
    os.nice(niceness)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    # Imported after nice(): on Linux niceness is per thread, and the threads faiss starts inherit it.
    from sinks.vector.faiss_index import merge_segments

    files = merge_segments(job["dir"], job["names"], job["new"], job["exactMax"])
    sys.stdout.buffer.write(orjson.dumps(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
