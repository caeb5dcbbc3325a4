"""Indexes a query joins, built under different redaction policies (an upgrade that rebuilt one
index kind and not the others).

Chunk ids carry the redaction policy's hash (docs/chunking.md), so a text generation rebuilt
under a new policy and a structured one still under the old share no chunk id. The corpus is
indexed under another policy than the checkout's (an earlier release's), then ``usl rebuild
text`` runs under the checkout's policy, as docs/operations.md's upgrade has operators do one
kind at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import streams.redaction.events
import streams.redaction.policy
import streams.redaction.text
from planner.acl import parse_principal
from planner.api import create_app
from planner.coherence import ChunkOrigin, find_mismatch
from planner.engine import Planner
from planner.exceptions import IndexMismatch
from planner.status import build_status, collect_status
from sinks.rebuild import rebuild
from streams.redaction import RedactionPolicy, policy_hash
from streams.settings import Settings
from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

ALICE = parse_principal("tenant:acme/user:alice/groups:eng")
#: An earlier release's policy: any option is part of the hash.
EARLIER = RedactionPolicy(env_dump_min_lines=4)


@contextmanager
def earlier_release() -> Iterator[None]:
    """The code of an earlier release: every module that redacts (or hashes) by default uses
    :data:`EARLIER`."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (streams.redaction.policy, streams.redaction.events, streams.redaction.text):
            patch.setattr(module, "DEFAULT_POLICY", EARLIER)
        yield


class Mixed:
    """Every kind indexed under :data:`EARLIER`, then text rebuilt under the checkout's policy."""

    def __init__(self, settings: Settings, bootstrap: str) -> None:
        self.settings, self.bootstrap = settings, bootstrap
        with earlier_release():
            self.old_hash = policy_hash()
            builder = IndexBuilder(settings, bootstrap, "default")
            builder.append(interleaved("default")[0])
            builder.commit()
            builder.close()
        self.new_hash = policy_hash()
        assert self.old_hash != self.new_hash
        rebuild(settings, bootstrap, "text")
        self.planner = Planner(settings, bootstrap)


def mixed_state(tmp: Path, bootstrap: str) -> Mixed:
    return Mixed(make_test_settings(tmp, bootstrap), bootstrap)


@pytest.fixture(scope="module")
def mixed(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    built = mixed_state(Path(tmp_path_factory.mktemp("policymix")), kafka_bootstrap)
    yield built
    built.planner.close()


def search(mixed: Mixed, **request: Any) -> dict[str, Any]:
    return mixed.planner.search({"query": "pipeline", **request}, ALICE)


@pytest.mark.kafka
@pytest.mark.parametrize("freshness", ["indexed", "latest"])
@pytest.mark.parametrize("mode", ["text", "vector", "hybrid"])
def test_a_search_over_indexes_of_two_policies_is_refused(mixed: Mixed, mode: str, freshness: str) -> None:
    # Before: text mode answered no results labelled complete (every text hit missed in the
    # structured chunk table and was dropped), vector mode hits with empty texts.
    with pytest.raises(IndexMismatch) as refused:
        search(mixed, mode=mode, freshness=freshness)
    error = refused.value
    assert (error.status, error.code) == (503, "index_mismatch")
    assert "disagree on the redaction policy" in error.message
    assert f"text (generation 1, line rebuild-1) under redaction policy {mixed.new_hash}" in error.message
    old = "structured (generation 1), vector (generation 1)" if mode != "text" else "structured (generation 1)"
    assert f"{old} under redaction policy {mixed.old_hash}" in error.message
    assert error.hint is not None and "usl rebuild all --log default" in error.hint


@pytest.mark.kafka
def test_the_api_answers_503_index_mismatch_and_status_shows_the_policies(mixed: Mixed) -> None:
    with TestClient(create_app(mixed.settings, mixed.bootstrap, planner=mixed.planner),
                    base_url="http://localhost") as client:
        answer = client.post("/v1/search", json={"query": "pipeline", "mode": "text"},
                             headers={"X-USL-Principal": str(ALICE)})
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "index_mismatch" and "usl rebuild all --log default" in error["hint"]
        status = client.get("/v1/status", headers={"X-USL-Principal": str(ALICE)}).json()
    entry = status["logs"]["default"]
    assert entry["indexes"]["text"]["redactionPolicy"] == mixed.new_hash
    assert entry["indexes"]["structured"]["redactionPolicy"] == mixed.old_hash
    assert entry["mismatch"]["indexes"] == {"structured": mixed.old_hash, "text": mixed.new_hash,
                                            "vector": mixed.old_hash}
    assert entry["mismatch"]["remedy"].startswith("Rebuild every index of the log under one policy: "
                                                  "usl rebuild all --log default")
    assert entry["indexes"]["text"]["verdict"].startswith(f"mismatch: redaction policy {mixed.new_hash}")
    assert entry["indexes"]["toolresults"]["verdict"].startswith(("ok", "catching up"))


@pytest.mark.kafka
def test_rebuilding_every_kind_ends_the_refusal(kafka_bootstrap: str, tmp_path: Path) -> None:
    state = mixed_state(tmp_path, kafka_bootstrap)
    try:
        with pytest.raises(IndexMismatch):
            search(state, mode="hybrid")
        for kind in ("vector", "structured", "analytics", "toolresults"):
            rebuild(state.settings, kafka_bootstrap, kind)
        assert collect_status(state.settings, kafka_bootstrap)["logs"]["default"]["mismatch"] is None
        for mode in ("text", "vector", "hybrid"):
            answer = search(state, mode=mode)
            assert answer["results"], mode
            assert all(hit["text"] for hit in answer["results"]), mode
        assert any("pipeline" in hit["text"] for hit in search(state, mode="text")["results"])
    finally:
        state.planner.close()


def origin(kind: str, policy: str, **chunker: Any) -> ChunkOrigin:
    return ChunkOrigin(kind, "generation 1", policy, chunker)


def test_only_a_recorded_difference_is_a_mismatch() -> None:
    assert find_mismatch([origin("text", "a", version="3"), origin("structured", "a", version="3")]) is None
    # A generation that records nothing (an older release's) is no evidence either way.
    assert find_mismatch([origin("text", "a", version="3", tickEverySeqs=64),
                          origin("structured", "", version="3")]) is None
    chunker = find_mismatch([origin("text", "a", version="3", targetTokens=768),
                             origin("structured", "a", version="3", targetTokens=512)])
    assert chunker is not None and chunker.what == "chunker"
    assert chunker.by_kind() == {"structured": "targetTokens=512", "text": "targetTokens=768"}
    policy = find_mismatch([origin("text", "b"), origin("structured", "a"), origin("vector", "a")])
    assert policy is not None and policy.by_kind() == {"structured": "a", "text": "b", "vector": "a"}
    assert policy.describe() == ("text (generation 1) under redaction policy b; structured (generation 1), "
                                 "vector (generation 1) under redaction policy a")


def test_status_names_the_mismatch_of_the_manifests() -> None:
    watermark = {"generationId": 41, "builtThroughSeq": 10, "line": "live", "versions": {}}
    kinds = ("structured", "text", "vector", "analytics")
    policies = {"structured": "old", "vector": "old", "analytics": "old", "text": "new"}
    report = build_status({"default": 10}, {("default", kind): watermark for kind in kinds}, {}, now=0.0,
                          origins={("default", kind): [origin(kind, policies[kind], version="3")]
                                   for kind in kinds})
    entry = report["logs"]["default"]
    assert entry["mismatch"]["indexes"] == {"structured": "old", "text": "new", "vector": "old"}
    assert entry["indexes"]["analytics"]["verdict"] == "ok: caught up"
    assert entry["indexes"]["analytics"]["redactionPolicy"] == "old"
    assert entry["indexes"]["text"]["verdict"] == ("mismatch: redaction policy new, unlike structured old, "
                                                   "vector old; searches are refused until "
                                                   "`usl rebuild all --log default`")
    agreed = build_status({"default": 10}, {("default", kind): watermark for kind in kinds}, {}, now=0.0,
                          origins={("default", kind): [origin(kind, "new")] for kind in kinds})
    assert agreed["logs"]["default"]["mismatch"] is None
