"""The fault suite: inject real faults into a real local stack while it indexes, and count.

``python -m reliability [--rounds N] [--seed S] [--out RELIABILITY.md]`` starts its own Kafka
broker in a temporary directory, runs ``usl worker``, one ``usl sink --kind K`` per index kind
and ``usl serve`` under the stack supervisor (:func:`deploy.stack.supervise`), feeds them a
steady ingest of generated sessions while a querier searches, and injects, each ``N`` times at
seeded random points:

==================  ==========================================================================
``kill-worker``     SIGKILL of the pipeline worker (its process group)
``kill-sink``       SIGKILL of a sink process (the kinds take turns)
``kill-api``        SIGKILL of the planner API while the querier runs
``broker-restart``  the broker stopped and started again (same ports and data)
``disk-full``       the sink's index filesystem (a tmpfs) filled up: real ENOSPC; then freed
``corrupt-segment`` a byte flipped in a committed segment file of a current generation
``corrupt-manifest`` a byte flipped in a current generation's ``manifest.json``
``slow-sink``       a sink stopped (SIGSTOP) for seconds, then continued (SIGCONT)
``foreign-tenant``  abuse: another tenant's takeover, injection and eventId reuse, and an
                    ``acl``-less heartbeat, against a private session (:mod:`reliability.abuse`)
``far-future-time`` abuse: an open turn dated 2099 in a log whose time is 2026
``kill-shard``      SIGKILL of one sink shard process (the shardable kinds and shards take turns)
``store-unavailable`` the object store (S3Proxy) stopped for a while, then started again
``partial-upload``  SIGKILL of a sink between a publish's upload and its commit record
==================  ==========================================================================

Every kind is in the default set. The last three are faults of the scaled-out index tier and
run on a second stack of their own, started once the first is stopped (:func:`phases`): its own
broker and S3Proxy, two sink shard processes, shard I of every kind in process I (what ``usl up``
runs with ``USL_SINK_SHARDS=2``, :func:`deploy.stack.sink_children`), every sink publishing to
the store. The first stack keeps the embedded layout (one local sink
process per kind; ``--object-store`` makes it publish too), so the other faults test what they
always did. On the scaled-out stack every kind is read as the union of its shards (each record
exactly once across them), the watermark a kind shows readers (the minimum over its shards) must
never go down, every shard generation an answer read must verify, and after each round every
kind's (every shard's) live published generation must equal its local current one
(:mod:`reliability.objectstore`).

After each fault the suite waits until every index catches up with L1, pauses the ingest and
checks that every appended event is in L1 exactly once, that every index holds each
chunk/record exactly once, that no watermark went backwards and that no query saw a
half-written or damaged generation. At the end it checks the chunk set equals an
uninterrupted run's (the in-process replay of the same L1). :mod:`reliability.report` writes
the counts to ``RELIABILITY.md``.
"""

from __future__ import annotations

from reliability.suite import (
    DEFAULT_FAULT_KINDS,
    FAULT_KINDS,
    LOCAL_FAULT_KINDS,
    OBJECT_STORE_FAULT_KINDS,
    SCALED_OUT_FAULT_KINDS,
    SHARD_FAULT_KINDS,
    SuiteResult,
    phases,
    run_suite,
)

__all__ = ["DEFAULT_FAULT_KINDS", "FAULT_KINDS", "LOCAL_FAULT_KINDS", "OBJECT_STORE_FAULT_KINDS",
           "SCALED_OUT_FAULT_KINDS", "SHARD_FAULT_KINDS", "SuiteResult", "phases", "run_suite"]
