"""Embedders (wordllama offline, hash, OpenAI-compatible HTTP) and faiss vector segments."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import socket
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest

import sinks.vector
from sinks.vector import (
    Embedder,
    EmbedderError,
    HashEmbedder,
    VectorHit,
    VectorIndexError,
    VectorReader,
    cosine,
    faiss_index,
    get_embedder,
    merge_segments,
    segment_files,
    vectors_for,
    write_segment,
)
from sinks.vector.embedders import OpenAIEmbedder


def test_public_surface() -> None:
    assert set(sinks.vector.__all__) == {
        "Embedder", "EmbedderError", "HashEmbedder", "VectorHit", "VectorIndexError",
        "VectorReader", "cosine", "get_embedder", "merge_segments", "segment_files", "vectors_for",
        "write_segment",
    }


# --------------------------------------------------------------------------- wordllama


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every way wordllama could reach the network fail loudly."""
    import httpx
    import requests
    import wordllama.wordllama as wordllama_module

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args[:2]!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(requests.Session, "request", refuse)
    monkeypatch.setattr(requests, "get", refuse)
    monkeypatch.setattr(httpx.Client, "send", refuse)
    real_tokenizer = wordllama_module.Tokenizer

    class OfflineTokenizer:
        # tokenizers' from_pretrained downloads from Rust, out of reach of the socket patch.
        from_file = staticmethod(real_tokenizer.from_file)
        from_pretrained = staticmethod(refuse)

    monkeypatch.setattr(wordllama_module, "Tokenizer", OfflineTokenizer)


def test_wordllama_loads_offline_and_embeds(tmp_path: Path, no_network: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # wordllama warns before falling back to a download
        embedder = get_embedder("wordllama", cache_root=tmp_path)
        vectors = embedder.embed([
            "pytest fixture fails with a database connection error",
            "the database connection in the test fixture raised an error",
            "a recipe for banana bread with walnuts",
            "",
        ])
    assert embedder.dimension == 256
    assert vectors.shape == (4, 256) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-5)
    assert not vectors[3].any()  # empty text: a zero row, never NaN
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2

    import wordllama

    bundled = Path(wordllama.__file__).parent
    weights = bundled / "weights" / "l2_supercat_256.safetensors"
    identity = embedder.identity
    assert identity == {
        "name": "wordllama",
        "model": "l2_supercat_256",
        "revision": hashlib.sha256(weights.read_bytes()).hexdigest()[:12],
        "dimension": 256,
        "tokenizer": "l2_supercat_tokenizer_config.json",
    }
    cache = tmp_path / "wordllama-cache"
    assert (cache / "tokenizers" / "l2_supercat_tokenizer_config.json").resolve() == (
        bundled / "tokenizers" / "l2_supercat_tokenizer_config.json"
    ).resolve()
    assert (cache / "weights" / weights.name).exists()


def test_wordllama_vectors_equal_wordllamas_own(tmp_path: Path) -> None:
    first = get_embedder("wordllama", cache_root=tmp_path)
    second = get_embedder("wordllama", cache_root=tmp_path)
    model = first._model  # type: ignore[attr-defined]
    assert model is second._model  # type: ignore[attr-defined]  # loaded once per process
    texts = [f"turn {i}: ran `make test` and " + "tests failed " * (i % 40) for i in range(300)]
    np.testing.assert_allclose(first.embed(texts), model.embed(texts, norm=True), atol=1e-6)
    encoding = first.tokenizer.encode("make test", add_special_tokens=False)  # type: ignore[attr-defined]
    assert len(encoding.ids) == len(encoding.attention_mask) == sum(encoding.attention_mask)


# --------------------------------------------------------------------------- hash and factory


def test_hash_embedder_is_deterministic() -> None:
    texts = ["grep the logs for ERROR", "ERROR in the logs", "unrelated words entirely", ""]
    a, b = HashEmbedder(64).embed(texts), get_embedder("hash:64").embed(texts)
    assert np.array_equal(a, b)
    assert a.shape == (4, 64) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a[:3], axis=1), 1.0, atol=1e-6)
    assert not a[3].any()
    assert a[0] @ a[1] > a[0] @ a[2]
    assert get_embedder("hash:64").identity["name"] == "hash"
    assert isinstance(HashEmbedder(8), Embedder)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nonsense", "unknown embedder"),
        ("hash:wide", "hash:DIMENSION"),
        ("openai:text-embedding-3-small", "USL_EMBEDDINGS_URL"),
        ("sentence-transformers:all-MiniLM-L6-v2", "sentence-transformers"),
    ],
)
def test_bad_specs_give_clear_errors(spec: str, message: str) -> None:
    try:
        import sentence_transformers  # noqa: F401

        if spec.startswith("sentence-transformers"):
            message = "not available locally"
    except ImportError:
        pass
    with pytest.raises(EmbedderError, match=message):
        get_embedder(spec)


# --------------------------------------------------------------------------- OpenAI-compatible HTTP


SECRET = "sk-test-0123456789abcdef"


class _Endpoint(BaseHTTPRequestHandler):
    """A tiny /embeddings endpoint: vectors are hash embeddings scaled by 3 (so they need
    normalising), returned in reverse order (so the client must sort by index)."""

    requests: list[dict] = []
    failures: list[int] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if type(self).failures:
            status = type(self).failures.pop(0)
            self._reply(status, {"error": {"message": f"Incorrect API key provided: {SECRET}"}})
            return
        vectors = HashEmbedder(8).embed(body["input"]) * 3
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        self._reply(200, {"object": "list", "data": data[::-1], "model": body["model"]})

    def _reply(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint():
    _Endpoint.requests, _Endpoint.failures = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_embedder_batches_and_normalises(endpoint: str) -> None:
    embedder = OpenAIEmbedder("text-embedding-3-small", endpoint, api_key=SECRET, batch_size=3)
    texts = [f"message number {i} about tool calls" for i in range(7)]
    vectors = embedder.embed(texts)
    assert [len(r["input"]) for r in _Endpoint.requests] == [3, 3, 1]
    assert {r["path"] for r in _Endpoint.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in _Endpoint.requests} == {f"Bearer {SECRET}"}
    assert {r["model"] for r in _Endpoint.requests} == {"text-embedding-3-small"}
    np.testing.assert_allclose(vectors, HashEmbedder(8).embed(texts), atol=1e-6)
    assert embedder.dimension == 8
    assert embedder.identity["model"] == "text-embedding-3-small"


def test_openai_embedder_via_factory_without_key(endpoint: str) -> None:
    embedder = get_embedder("openai:local-model", url=endpoint + "/")
    assert embedder.dimension == 8  # learned from one probe request
    assert _Endpoint.requests[0]["auth"] is None


def test_openai_error_is_clear_and_keeps_the_key_secret(endpoint: str) -> None:
    _Endpoint.failures = [401]
    embedder = OpenAIEmbedder("m", endpoint, api_key=SECRET, retries=0)
    with pytest.raises(EmbedderError) as caught:
        embedder.embed(["hello"])
    assert caught.value.status == 401
    assert "HTTP 401" in str(caught.value) and "Incorrect API key" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_openai_retries_transient_failures(endpoint: str) -> None:
    _Endpoint.failures = [503]
    vectors = OpenAIEmbedder("m", endpoint, retries=1).embed(["hello"])
    assert vectors.shape == (1, 8) and len(_Endpoint.requests) == 2


def test_openai_unreachable_endpoint() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder("m", f"http://user:{SECRET}@127.0.0.1:{port}", retries=0)
    with pytest.raises(EmbedderError, match="cannot reach") as caught:
        embedder.embed(["x"])
    assert SECRET not in str(caught.value)


# --------------------------------------------------------------------------- segments


def _corpus(n: int, dim: int, *, seed: int = 7, clusters: int = 50) -> tuple[list[str], np.ndarray]:
    """Clustered unit vectors: closer to real embeddings than uniform noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    vectors = centres[rng.integers(0, clusters, n)] + rng.normal(scale=0.6, size=(n, dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [f"c_{i:08d}" for i in range(n)], vectors.astype(np.float32)


def _exact(ids: list[str], vectors: np.ndarray, query: np.ndarray, limit: int, allowed=None) -> list[str]:
    scores = vectors @ query
    ranked = sorted(
        ((-float(s), cid) for cid, s in zip(ids, scores, strict=True) if allowed is None or allowed(cid)),
    )
    return [cid for _, cid in ranked[:limit]]


@pytest.mark.parametrize("exact_max", [10_000, 0], ids=["flat", "hnsw"])
def test_segment_search_matches_exact(tmp_path: Path, exact_max: int) -> None:
    ids, vectors = _corpus(3000, 32)
    files = write_segment(tmp_path, "seg-1", ids, vectors, exact_max=exact_max)
    assert files == segment_files("seg-1") and all((tmp_path / f).exists() for f in files)
    meta = json.loads((tmp_path / "seg-1.ids.json").read_text())
    assert meta["index"] == ("flat" if exact_max else "hnsw") and meta["count"] == 3000
    index = faiss.read_index(str(tmp_path / "seg-1.faiss"))
    assert isinstance(index, faiss.IndexFlatIP if exact_max else faiss.IndexHNSWFlat)
    assert index.ntotal == 3000
    reader = VectorReader(tmp_path, ["seg-1"])
    query = vectors[17]
    hits = reader.search(query, limit=10)
    assert [h.rank for h in hits] == list(range(1, 11))
    assert hits[0] == VectorHit("c_00000017", pytest.approx(1.0, abs=1e-5), 1)
    assert [h.chunk_id for h in hits] == _exact(ids, vectors, query, 10)
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))


@pytest.mark.parametrize("exact_max", [10_000, 0], ids=["flat", "hnsw"])
@pytest.mark.parametrize("share", [2, 40], ids=["half-allowed", "1-in-40-allowed"])
def test_allowed_filter_applies_before_limit(tmp_path: Path, exact_max: int, share: int) -> None:
    ids, vectors = _corpus(4000, 32)
    write_segment(tmp_path, "s", ids, vectors, exact_max=exact_max)
    calls: list[str] = []

    def rule(chunk_id: str) -> bool:
        return int(chunk_id[2:]) % share == 0

    def allowed(chunk_id: str) -> bool:
        calls.append(chunk_id)
        return rule(chunk_id)

    hits = VectorReader(tmp_path, ["s"]).search(vectors[1], limit=10, allowed=allowed)
    assert len(hits) == 10 and all(rule(h.chunk_id) for h in hits)
    assert [h.chunk_id for h in hits] == _exact(ids, vectors, vectors[1], 10, rule)
    assert len(calls) == len(set(calls))  # each id judged once, however often re-fetched


def _mask_of(rule: Any) -> Any:
    def row_mask(segment: Any) -> np.ndarray:
        return np.array([rule(chunk_id) for chunk_id in segment.chunk_ids], dtype=bool)
    return row_mask


@pytest.mark.parametrize("share", [1, 3, 40], ids=["all", "2-in-3-allowed", "1-in-40-allowed"])
def test_a_row_mask_gives_exact_segments_the_per_chunk_answer(tmp_path: Path, share: int) -> None:
    ids, vectors = _corpus(6000, 32)
    for number, start in enumerate(range(0, 6000, 2000)):
        write_segment(tmp_path, f"s{number}", ids[start:start + 2000], vectors[start:start + 2000],
                      exact_max=10_000)
    reader = VectorReader(tmp_path, ["s0", "s1", "s2"])

    def rule(chunk_id: str) -> bool:
        return int(chunk_id[2:]) % share != 1 if share > 1 else True

    for query in vectors[[3, 2500, 5999]]:
        for limit in (1, 10, 201, 5000):
            masked = reader.search(query, limit=limit, allowed=rule, row_mask=_mask_of(rule))
            assert masked == reader.search(query, limit=limit, allowed=rule)


def test_a_row_mask_searches_hnsw_once_and_finds_the_allowed_neighbours(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids, vectors = _corpus(4000, 32)
    write_segment(tmp_path, "s", ids, vectors, exact_max=0)
    reader = VectorReader(tmp_path, ["s"])
    searches: list[int] = []
    index = reader._segments[0].index
    original = index.search

    def counted(x: Any, k: int, **options: Any) -> Any:
        searches.append(k)
        assert options["params"].sel is not None
        return original(x, k, **options)

    monkeypatch.setattr(index, "search", counted)

    def rule(chunk_id: str) -> bool:
        return int(chunk_id[2:]) % 10 != 3

    found = 0
    for query in vectors[:20]:
        hits = reader.search(query, limit=10, allowed=rule, row_mask=_mask_of(rule))
        assert len(hits) == 10 and all(rule(hit.chunk_id) for hit in hits)
        found += len({hit.chunk_id for hit in hits} & set(_exact(ids, vectors, query, 10, rule)))
    assert searches == [11] * 20  # one pass per query: the filter is inside the search
    assert found / 200 >= 0.95


def test_a_mask_that_lets_an_unreadable_chunk_through_is_overruled(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ids, vectors = _corpus(3000, 32)
    write_segment(tmp_path, "flat", ids[:1000], vectors[:1000], exact_max=10_000)
    write_segment(tmp_path, "graph", ids[1000:], vectors[1000:], exact_max=0)
    reader = VectorReader(tmp_path, ["flat", "graph"])

    def rule(chunk_id: str) -> bool:
        return int(chunk_id[2:]) % 2 == 0

    for query in vectors[[1, 1001, 2001]]:  # each query's best chunk is one the rule refuses
        wrong = reader.search(query, limit=10, allowed=rule, row_mask=_mask_of(lambda c: True))
        assert all(rule(hit.chunk_id) for hit in wrong) and len(wrong) == 10
        assert wrong == reader.search(query, limit=10, allowed=rule)
    assert "a row mask let through" in caplog.text
    with pytest.raises(VectorIndexError, match="row mask of shape"):
        reader.search(vectors[0], limit=10, allowed=rule, row_mask=lambda segment: np.ones(3, bool))


def test_filter_with_fewer_matches_than_limit(tmp_path: Path) -> None:
    ids, vectors = _corpus(500, 16)
    write_segment(tmp_path, "s", ids, vectors, exact_max=100)
    hits = VectorReader(tmp_path, ["s"]).search(vectors[0], limit=10, allowed=lambda c: c.endswith("77"))
    assert sorted(h.chunk_id for h in hits) == [f"c_00000{i}77" for i in range(5)]


def test_dedup_across_segments_keeps_best_score(tmp_path: Path) -> None:
    ids, vectors = _corpus(300, 16)
    write_segment(tmp_path, "old", ids[:200], vectors[:200], exact_max=1000)
    write_segment(tmp_path, "new", ids[100:], vectors[100:], exact_max=1000)
    # A stale copy of c_00000150 pointing somewhere else must not shadow the better one.
    write_segment(tmp_path, "odd", ["c_00000150", "x"], -vectors[[150, 151]], exact_max=1000)
    reader = VectorReader(tmp_path, ["old", "new", "odd"])
    hits = reader.search(vectors[150], limit=300)
    chunk_ids = [h.chunk_id for h in hits]
    assert len(chunk_ids) == len(set(chunk_ids)) == 300
    assert hits[0].chunk_id == "c_00000150" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert chunk_ids[:20] == _exact(ids, vectors, vectors[150], 20)


def test_segments_searched_concurrently_give_the_sequential_answer(tmp_path: Path) -> None:
    ids, vectors = _corpus(6000, 32)
    for number, (start, exact_max) in enumerate([(0, 0), (2000, 0), (4000, 10_000), (5000, 10_000)]):
        end = start + (2000 if start < 4000 else 1000)
        write_segment(tmp_path, f"s{number}", ids[start:end], vectors[start:end], exact_max=exact_max)
    reader = VectorReader(tmp_path, [f"s{number}" for number in range(4)])
    threads: set[str] = set()

    def allowed(chunk_id: str) -> bool:
        threads.add(threading.current_thread().name)
        return int(chunk_id[2:]) % 10 != 3

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="fan") as pool:
        for query in vectors[[5, 2500, 4100, 5900]]:
            sequential = reader.search(query, limit=201, allowed=allowed)
            concurrent = reader.search(query, limit=201, allowed=allowed, fan_out=pool.map)
            assert concurrent == sequential
            assert len(sequential) == 201
    assert any(name.startswith("fan") for name in threads)  # the segments did run in the pool

    def broken(fn: Any, items: Any) -> Any:
        raise VectorIndexError("segment s2 is unreadable")

    with pytest.raises(VectorIndexError, match="s2 is unreadable"):
        reader.search(vectors[0], limit=10, fan_out=broken)


def test_ties_are_broken_by_chunk_id(tmp_path: Path) -> None:
    vector = np.ones((1, 8), dtype=np.float32) / np.sqrt(8)
    ids = [f"c_{i:02d}" for i in range(40)][::-1]
    write_segment(tmp_path, "a", ids[:30], np.repeat(vector, 30, axis=0), exact_max=1000)
    write_segment(tmp_path, "b", ids[30:], np.repeat(vector, 10, axis=0), exact_max=1000)
    hits = VectorReader(tmp_path, ["a", "b"]).search(vector[0], limit=5)
    assert [h.chunk_id for h in hits] == ["c_00", "c_01", "c_02", "c_03", "c_04"]


def test_only_hits_that_can_reach_the_top_are_rescored_and_the_answer_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids, vectors = _corpus(5000, 64, seed=5)
    vectors[4000:4100] = vectors[4100:4200]  # exact ties across segments, broken by chunkId
    names = []
    for number, start in enumerate(range(0, 5000, 1000)):
        names.append(f"s{number}")
        write_segment(tmp_path, names[-1], ids[start:start + 1000], vectors[start:start + 1000],
                      exact_max=10_000)
    reader = VectorReader(tmp_path, names)
    rescored: list[int] = []
    rescore = faiss_index._Segment.rescore

    def counting(self: Any, query: Any, hits: Any) -> Any:
        rescored.append(len(hits))
        return rescore(self, query, hits)

    monkeypatch.setattr(faiss_index._Segment, "rescore", counting)

    def allowed(chunk_id: str) -> bool:
        return int(chunk_id[2:]) % 7 != 0

    for query in vectors[[4050, 4150, 10, 2222]]:
        for limit in (1, 10, 201):
            for rule in (None, allowed):
                rescored.clear()
                hits = reader.search(query, limit=limit, allowed=rule)
                every = sorted((-cosine(vector, query), chunk_id) for chunk_id, vector in zip(ids, vectors, strict=True)
                               if rule is None or rule(chunk_id))
                assert [(h.chunk_id, h.score) for h in hits] == [(c, -s) for s, c in every[:limit]]
                assert sum(rescored) < 5 * limit  # each segment found `limit`; most were left alone


def test_scores_do_not_depend_on_how_the_vectors_are_laid_out(tmp_path: Path) -> None:
    """A live index (many segments, rows in arrival order) and its rebuild (one segment) must
    rank identically: a BLAS pass rounds a row's score by its position, so hits are re-scored
    with one dot product per vector, and a tie then breaks by chunkId in both layouts."""
    ids, vectors = _corpus(3000, 256, seed=3)
    duplicate = vectors[7].copy()
    ids += ["c_dup_a", "c_dup_b"]  # same text, same vector: an exact tie the layout must not break
    vectors = np.vstack([vectors, duplicate, duplicate])
    order = np.random.default_rng(5).permutation(len(ids))
    write_segment(tmp_path / "one", "all", ids, vectors, exact_max=10_000)
    for number, rows in enumerate(np.array_split(order, 7)):
        write_segment(tmp_path / "many", f"s{number}", [ids[r] for r in rows], vectors[rows], exact_max=10_000)
    one = VectorReader(tmp_path / "one", ["all"])
    many = VectorReader(tmp_path / "many", [f"s{n}" for n in range(7)])
    queries = np.vstack([_corpus(40, 256, seed=11)[1], duplicate[None, :]])
    for query in queries:
        expected = [(h.chunk_id, h.score) for h in one.search(query, limit=50)]
        assert [(h.chunk_id, h.score) for h in many.search(query, limit=50)] == expected
    assert [h.chunk_id for h in many.search(duplicate, limit=3)] == ["c_00000007", "c_dup_a", "c_dup_b"]


def _planned_merges(batch_bytes: int, batches: int) -> Iterator[tuple[list[str], int, dict[str, int]]]:
    """The vector writer's merge plan followed over ``batches`` committed batches of
    ``batch_bytes``: (merged segment names, merged bytes, the segment sizes after it) for each
    merge, and ([], 0, sizes) once the merges after a batch are done."""
    from sinks.vector_writer import merge_plan

    sizes: dict[str, int] = {}
    for generation in range(1, batches + 1):
        sizes[f"seg-{generation:08d}"] = batch_bytes
        round_number = 0
        while group := merge_plan(sizes):
            merged = sum(sizes.pop(name) for name in group)
            sizes[f"merged-{generation:08d}-{round_number}"] = merged
            round_number += 1
            yield group, merged, sizes
        yield [], 0, sizes


def test_tiered_merges_keep_segments_few_and_rewrite_each_vector_a_log_number_of_times() -> None:
    """A million 256-d chunks in batches of 10 000: the merge plan the vector writer follows
    keeps at most MAX_SEGMENTS segments and rewrites each vector O(log n) times. Merging all
    segments every few batches (the old policy) rewrote each vector O(n) times."""
    from sinks.vector_writer import MAX_SEGMENTS, MERGE_FACTOR

    batch_bytes = 10_000 * 256 * 4
    rewritten = 0
    for group, merged, sizes in _planned_merges(batch_bytes, 100):
        if group:
            # Oldest first (newest wins); past the cap the largest, whose graph is extended, leads.
            assert group[1:] == sorted(group[1:], key=lambda name: [int(p) for p in name.split("-")[1:]])
            rewritten += merged
        else:
            assert len(sizes) <= MAX_SEGMENTS
    total = sum(sizes.values())
    assert total == 100 * batch_bytes
    tiers = len({size.bit_length() // 2 for size in sizes.values()})
    assert tiers >= 2 and max(sizes.values()) >= MERGE_FACTOR ** 2 * batch_bytes
    # Each batch is rewritten once per tier it climbs: log_4(100) < 4 times.
    assert rewritten <= 4 * total


def test_merge_equals_union(tmp_path: Path) -> None:
    ids, vectors = _corpus(900, 16)
    for part in range(3):
        rows = slice(part * 300, part * 300 + 400)  # overlapping: 100 ids in two segments
        write_segment(tmp_path, f"p{part}", ids[rows], vectors[rows], exact_max=10_000)
    files = merge_segments(tmp_path, ["p0", "p1", "p2"], "merged", exact_max=10_000)
    assert files == segment_files("merged")
    merged = VectorReader(tmp_path, ["merged"])
    parts = VectorReader(tmp_path, ["p0", "p1", "p2"])
    assert json.loads((tmp_path / "merged.ids.json").read_text())["count"] == 900
    for row in (0, 333, 899):
        assert merged.search(vectors[row], limit=25) == parts.search(vectors[row], limit=25)
    found = vectors_for(tmp_path, ["merged"], ["c_00000005", "c_00000350", "missing"])
    assert set(found) == {"c_00000005", "c_00000350"}
    np.testing.assert_array_equal(found["c_00000350"], vectors[350])


def _recall_at_10(reader: VectorReader, ids: list[str], vectors: np.ndarray, seed: int = 3) -> float:
    rng = np.random.default_rng(seed)
    queries = vectors[rng.choice(len(ids), 100, replace=False)] + rng.normal(scale=0.05, size=(100, vectors.shape[1]))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    return float(np.mean([
        len({h.chunk_id for h in reader.search(q, limit=10)} & {ids[i] for i in truth}) / 10
        for q, truth in zip(queries, exact, strict=True)
    ]))


def test_a_merge_into_an_hnsw_segment_extends_its_graph(tmp_path: Path) -> None:
    """The first segment's graph gets the others' rows inserted: the merged segment holds the
    same rows, vectors, spans and digests in the same order as one whose graph was built from
    scratch, its graph is as good (recall against exact search), and its own metadata says
    whose graph it extended."""
    ids, vectors = _corpus(12_000, 32, clusters=120)
    spans = [vectors[row:row + (row % 3)] for row in range(len(ids))]
    digests = _digests(ids)
    cuts = [(0, 8_000), (8_000, 10_000), (10_000, 12_000)]
    for number, (low, high) in enumerate(cuts):
        write_segment(tmp_path, f"p{number}", ids[low:high], vectors[low:high], exact_max=1_000,
                      spans=spans[low:high], digests=digests[low:high])
    merge_segments(tmp_path, ["p0", "p1", "p2"], "extended", exact_max=1_000)
    extended = json.loads((tmp_path / "extended.ids.json").read_text())
    assert extended["graphFrom"] == {"segment": "p0", "rows": 8_000}
    # The same rows with a graph of its own: the first input flat, so nothing to extend.
    (tmp_path / "flat").mkdir()
    write_segment(tmp_path / "flat", "p0", ids[:8_000], vectors[:8_000], exact_max=10_000,
                  spans=spans[:8_000], digests=digests[:8_000])
    for number in (1, 2):
        for file in segment_files(f"p{number}"):
            (tmp_path / "flat" / file).write_bytes((tmp_path / file).read_bytes())
    merge_segments(tmp_path / "flat", ["p0", "p1", "p2"], "rebuilt", exact_max=1_000)
    rebuilt = json.loads((tmp_path / "flat" / "rebuilt.ids.json").read_text())
    assert "graphFrom" not in rebuilt and rebuilt["index"] == extended["index"] == "hnsw"
    assert {k: v for k, v in extended.items() if k not in ("graphFrom", "name")} == \
        {k: v for k, v in rebuilt.items() if k != "name"}
    np.testing.assert_array_equal(np.load(tmp_path / "extended.vec.npy"),
                                  np.load(tmp_path / "flat" / "rebuilt.vec.npy"))
    assert faiss.read_index(str(tmp_path / "extended.faiss")).hnsw.efConstruction == faiss_index.HNSW_EF_CONSTRUCTION
    assert _recall_at_10(VectorReader(tmp_path, ["extended"]), ids, vectors) >= 0.95
    assert _recall_at_10(VectorReader(tmp_path / "flat", ["rebuilt"]), ids, vectors) >= 0.95


def test_a_merge_that_replaces_a_row_of_the_first_segment_builds_a_new_graph(tmp_path: Path) -> None:
    """Newest wins: a later copy of a chunk the first segment holds drops that row, so the
    first segment's graph no longer fits and the merged graph is built over every row."""
    ids, vectors = _corpus(3_000, 16)
    spans = [vectors[row:row + (row % 4)] for row in range(len(ids))]
    write_segment(tmp_path, "base", ids[:2_000], vectors[:2_000], exact_max=500, spans=spans[:2_000])
    # Holds ids[1000] and ids[1999] again (the first with other span vectors), and an empty segment.
    write_segment(tmp_path, "later", [ids[1_000], *ids[1_999:]], vectors[[1_000, *range(1_999, 3_000)]],
                  exact_max=500, spans=[spans[7], *spans[1_999:]])
    write_segment(tmp_path, "empty", [], np.zeros((0, 16), dtype=np.float32), exact_max=500)
    merge_segments(tmp_path, ["base", "empty", "later"], "merged", exact_max=500)
    meta = json.loads((tmp_path / "merged.ids.json").read_text())
    assert "graphFrom" not in meta and meta["count"] == 3_000
    assert meta["chunkIds"][999:1_001] == [ids[999], ids[1_001]]
    assert meta["chunkIds"][1_997:2_000] == [ids[1_998], ids[1_000], ids[1_999]]
    merged = faiss_index._SegmentData.open(tmp_path, "merged")
    expected = [*spans[:1_000], *spans[1_001:1_999], spans[7], *spans[1_999:]]
    for row in (0, 3, 998, 999, 1_997, 1_998, 1_999, 2_999):
        np.testing.assert_array_equal(merged.spans_of(row), expected[row])
    assert _recall_at_10(VectorReader(tmp_path, ["merged"]), ids, vectors) >= 0.95


def test_vectors_for_prefers_the_newest_segment(tmp_path: Path) -> None:
    ids, vectors = _corpus(4, 8)
    write_segment(tmp_path, "one", ids, vectors, exact_max=10)
    write_segment(tmp_path, "two", ids[:1], vectors[3:], exact_max=10)
    np.testing.assert_array_equal(vectors_for(tmp_path, ["one", "two"], ids[:1])[ids[0]], vectors[3])


def test_hnsw_recall_at_10(tmp_path: Path) -> None:
    ids, vectors = _corpus(20_000, 64, clusters=200)
    write_segment(tmp_path, "big", ids, vectors, exact_max=5_000)
    assert json.loads((tmp_path / "big.ids.json").read_text())["index"] == "hnsw"
    reader = VectorReader(tmp_path, ["big"])
    rng = np.random.default_rng(3)
    queries = vectors[rng.choice(len(ids), 100, replace=False)] + rng.normal(scale=0.05, size=(100, 64))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    recall = np.mean([
        len({h.chunk_id for h in reader.search(q, limit=10)} & {ids[i] for i in truth}) / 10
        for q, truth in zip(queries, exact, strict=True)
    ])
    assert recall >= 0.9, recall


def test_segments_are_immutable_and_validated(tmp_path: Path) -> None:
    ids, vectors = _corpus(10, 8)
    write_segment(tmp_path, "s", ids, vectors, exact_max=100)
    with pytest.raises(VectorIndexError, match="immutable"):
        write_segment(tmp_path, "s", ids, vectors, exact_max=100)
    write_segment(tmp_path, "d", ["a", "b", "a"], vectors[:3], exact_max=100)  # upsert: last wins
    assert json.loads((tmp_path / "d.ids.json").read_text())["chunkIds"] == ["b", "a"]
    np.testing.assert_array_equal(vectors_for(tmp_path, ["d"], ["a"])["a"], vectors[2])
    with pytest.raises(VectorIndexError, match="2 chunkIds but 3"):
        write_segment(tmp_path, "m", ["a", "b"], vectors[:3], exact_max=100)
    with pytest.raises(VectorIndexError, match="NaN"):
        write_segment(tmp_path, "n", ["a"], np.full((1, 8), np.nan), exact_max=100)
    with pytest.raises(VectorIndexError, match="invalid segment name"):
        write_segment(tmp_path, "../escape", ["a"], vectors[:1], exact_max=100)
    with pytest.raises(VectorIndexError, match="not found"):
        VectorReader(tmp_path, ["absent"])
    with pytest.raises(VectorIndexError, match="dimension 4"):
        VectorReader(tmp_path, ["s"]).search(np.ones(4), limit=3)
    assert not list(tmp_path.glob(".*tmp"))


def test_empty_inputs(tmp_path: Path) -> None:
    write_segment(tmp_path, "empty", [], np.zeros((0, 8), dtype=np.float32), exact_max=10)
    assert VectorReader(tmp_path, ["empty"]).search(np.ones(8), limit=5) == []
    assert VectorReader(tmp_path, []).search(np.ones(8), limit=5) == []
    ids, vectors = _corpus(5, 8)
    write_segment(tmp_path, "s", ids, vectors, exact_max=10)
    assert VectorReader(tmp_path, ["s", "empty"]).search(vectors[0], limit=0) == []
    assert len(VectorReader(tmp_path, ["s", "empty"]).search(vectors[0], limit=50)) == 5


# --------------------------------------------------------------------------- span vectors


def _spans(vectors: np.ndarray, counts: list[int], *, seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for count in counts:
        block = rng.normal(size=(count, vectors.shape[1])).astype(np.float32)
        out.append(block / np.linalg.norm(block, axis=1, keepdims=True) if count else block)
    return out


def test_span_vectors_round_trip_and_merge(tmp_path: Path) -> None:
    ids, vectors = _corpus(60, 16)
    counts = [row % 4 for row in range(60)]  # 0..3 events each; 0: ranks by its whole vector
    spans = _spans(vectors, counts)
    write_segment(tmp_path, "a", ids[:40], vectors[:40], exact_max=10_000, spans=spans[:40])
    write_segment(tmp_path, "b", ids[30:], vectors[30:], exact_max=10_000, spans=spans[30:])
    merge_segments(tmp_path, ["a", "b"], "ab", exact_max=10_000)
    query = _spans(vectors, [1], seed=11)[0][0]
    expected = {cid: float(np.max((spans[row].astype(np.float64) @ query).astype(np.float32))) if counts[row]
                else cosine(vectors[row], query) for row, cid in enumerate(ids)}
    for names in (["a", "b"], ["ab"]):
        assert VectorReader(tmp_path, names).event_scores(query, [*ids, "missing"]) == expected
    meta = json.loads((tmp_path / "ab.ids.json").read_text())
    assert meta["format"] == "usl-vector-segment/2" and meta["spanCount"] == sum(counts)
    # The faiss index and whole-vector search see the chunks only.
    assert VectorReader(tmp_path, ["ab"]).search(vectors[5], limit=1)[0].chunk_id == ids[5]


def test_a_format_1_segment_is_read_and_its_chunks_keep_their_whole_vector(tmp_path: Path) -> None:
    ids, vectors = _corpus(10, 8)
    write_segment(tmp_path, "old", ids, vectors, exact_max=10_000)
    meta = json.loads((tmp_path / "old.ids.json").read_text())
    for key in ("spanCount", "spanOffsets"):
        meta.pop(key)
    (tmp_path / "old.ids.json").write_text(json.dumps({**meta, "format": "usl-vector-segment/1"}))
    reader = VectorReader(tmp_path, ["old"])
    assert reader.search(vectors[2], limit=1)[0].chunk_id == ids[2]
    assert reader.event_scores(vectors[2], ids) == {cid: cosine(vectors[row], vectors[2]) for row, cid in enumerate(ids)}
    spans = _spans(vectors, [2, 0])
    write_segment(tmp_path, "new", ids[:2], vectors[:2], exact_max=10_000, spans=spans)
    merge_segments(tmp_path, ["old", "new"], "both", exact_max=10_000)
    scores = VectorReader(tmp_path, ["both"]).event_scores(vectors[0], ids)
    assert scores[ids[0]] == float(np.max((spans[0].astype(np.float64) @ vectors[0]).astype(np.float32)))
    assert scores[ids[5]] == cosine(vectors[5], vectors[0])


def test_spans_must_match_the_chunks(tmp_path: Path) -> None:
    ids, vectors = _corpus(3, 8)
    with pytest.raises(VectorIndexError, match="span vectors for 2"):
        write_segment(tmp_path, "s", ids, vectors, exact_max=10, spans=_spans(vectors, [1, 1]))
    with pytest.raises(VectorIndexError, match="NaN"):
        write_segment(tmp_path, "t", ids, vectors, exact_max=10,
                      spans=[np.full((1, 8), np.nan, dtype=np.float32)] * 3)


def test_evidence_texts_cut_a_chunk_into_its_events() -> None:
    from sinks.vector.spans import evidence_texts, span_vectors

    text = "fix the flaky test\n  \nЗапуск: 失败 ok"
    data = text.encode()
    first, blank = len(b"fix the flaky test"), len(b"  ")
    evidence = [{"start": 0, "end": first}, {"start": first + 1, "end": first + 1 + blank},
                {"start": first + 2 + blank, "end": len(data)}]
    assert evidence_texts(text, evidence) == ["fix the flaky test", "Запуск: 失败 ok"]
    assert evidence_texts(text, evidence[:1]) == []  # one event: the chunk's own vector
    embedder = HashEmbedder(16)
    got = span_vectors(embedder, [(text, evidence), (text, evidence[:1]), ("?? !!\nxx", [
        {"start": 0, "end": 5}, {"start": 6, "end": 8}])], 16)
    np.testing.assert_array_equal(got[0], embedder.embed(["fix the flaky test", "Запуск: 失败 ok"]))
    assert got[1].shape == (0, 16)
    assert got[2].shape == (1, 16)  # "?? !!" has no word: left out


def test_no_merge_rebuilds_a_graph_past_the_cap_and_large_segments_become_one() -> None:
    """A million 256-d chunks in batches of 10 000: no tier merge rebuilds a graph past
    MAX_MERGED_BYTES (the 640k-vector rebuild that cost a 1M build most of its time); past it,
    segments are merged into the largest, listed first, whose graph the merge extends, so one
    large segment remains (not one per 160k chunks, each a graph a query searches), and the
    graph work stays a few times the data."""
    from sinks.vector_writer import MAX_MERGED_BYTES, MAX_SEGMENTS, MERGE_FACTOR

    batch_bytes = 10_000 * 3 * 256 * 4  # a turn chunk's vector and its two span vectors
    cap = MAX_MERGED_BYTES // MERGE_FACTOR
    steps = list(_planned_merges(batch_bytes, 100))
    graph_work = 0
    for group, merged, before_sizes in _merges_with_inputs(batch_bytes, 100):
        first = before_sizes[group[0]]
        if first > cap:  # extends the first's graph: the others' rows are the work
            assert first == max(before_sizes[name] for name in group)
            graph_work += merged - first
        else:
            assert merged <= MAX_MERGED_BYTES
            graph_work += merged
    sizes = steps[-1][2]
    assert sum(1 for size in sizes.values() if size > cap) == 1
    assert len(sizes) <= MAX_SEGMENTS // 2
    assert graph_work <= 4 * sum(sizes.values())


def _merges_with_inputs(batch_bytes: int, batches: int) -> Iterator[tuple[list[str], int, dict[str, int]]]:
    """As :func:`_planned_merges`, each merge with the sizes of the segments before it."""
    from sinks.vector_writer import merge_plan

    sizes: dict[str, int] = {}
    for generation in range(1, batches + 1):
        sizes[f"seg-{generation:08d}"] = batch_bytes
        round_number = 0
        while group := merge_plan(sizes):
            before = dict(sizes)
            merged = sum(sizes.pop(name) for name in group)
            sizes[f"merged-{generation:08d}-{round_number}"] = merged
            round_number += 1
            yield group, merged, before


# --------------------------------------------------------------------------- text digests


def _digests(ids: list[str]) -> list[bytes]:
    return [hashlib.blake2b(chunk_id.encode(), digest_size=16).digest() for chunk_id in ids]


def _segment_digests(reader: VectorReader, query: np.ndarray, limit: int) -> dict[str, bytes | None]:
    return {hit.chunk_id: hit.digest for hit in reader.search(query, limit=limit)}


@pytest.mark.parametrize("exact_max", [10_000, 0], ids=["flat", "hnsw"])
def test_text_digests_round_trip_and_upserts_keep_their_row(tmp_path: Path, exact_max: int) -> None:
    ids, vectors = _corpus(40, 16)
    digests = _digests(ids)
    # c_00000003 given twice: the last row wins, its digest with it.
    write_segment(tmp_path, "s", [*ids, ids[3]], np.concatenate([vectors, vectors[3:4]]),
                  exact_max=exact_max, digests=[*digests, b"\x07" * 16])
    meta = json.loads((tmp_path / "s.ids.json").read_text())
    assert meta["format"] == faiss_index.SEGMENT_FORMAT and isinstance(meta["textDigests"], str)
    expected = {**dict(zip(ids, digests, strict=True)), ids[3]: b"\x07" * 16}
    assert _segment_digests(VectorReader(tmp_path, ["s"]), vectors[0], 40) == expected
    # A segment of many: every hit names its own digest, whichever segment held it.
    write_segment(tmp_path, "t", ids[40:] or ["extra"], _corpus(1, 16, seed=9)[1], exact_max=exact_max,
                  digests=[b"\x01" * 16])
    assert _segment_digests(VectorReader(tmp_path, ["s", "t"]), vectors[0], 41) == {**expected, "extra": b"\x01" * 16}


def test_text_digests_are_validated(tmp_path: Path) -> None:
    ids, vectors = _corpus(3, 8)
    with pytest.raises(VectorIndexError, match="text digests for 2"):
        write_segment(tmp_path, "a", ids, vectors, exact_max=10, digests=_digests(ids)[:2])
    with pytest.raises(VectorIndexError, match="not 16 bytes"):
        write_segment(tmp_path, "b", ids, vectors, exact_max=10, digests=[b"short"] * 3)
    write_segment(tmp_path, "c", ids, vectors, exact_max=10, digests=_digests(ids))
    meta = json.loads((tmp_path / "c.ids.json").read_text())
    (tmp_path / "c.ids.json").write_text(json.dumps({**meta, "textDigests": base64.b64encode(b"\0" * 32).decode()}))
    with pytest.raises(VectorIndexError, match="text digests for 2 of its 3 chunks"):
        VectorReader(tmp_path, ["c"])
    (tmp_path / "c.ids.json").write_text(json.dumps({**meta, "textDigests": "not base64!"}))
    with pytest.raises(VectorIndexError, match="unreadable text digests"):
        VectorReader(tmp_path, ["c"])


def test_merge_keeps_text_digests_only_when_every_input_has_them(tmp_path: Path) -> None:
    ids, vectors = _corpus(90, 16)
    digests = _digests(ids)
    write_segment(tmp_path, "a", ids[:60], vectors[:60], exact_max=10_000, digests=digests[:60])
    # Overlapping ids: the newest copy (segment b) wins, its digest with it.
    newer = [b"\x09" * 16 if row < 60 else digest for row, digest in enumerate(digests[50:], 50)]
    write_segment(tmp_path, "b", ids[50:], vectors[50:], exact_max=10_000, digests=newer)
    write_segment(tmp_path, "old", ids[:5], vectors[:5], exact_max=10_000)  # written without digests
    merge_segments(tmp_path, ["a", "b"], "ab", exact_max=10_000)
    expected = {**dict(zip(ids, digests, strict=True)), **dict(zip(ids[50:], newer, strict=True))}
    assert _segment_digests(VectorReader(tmp_path, ["ab"]), vectors[7], 90) == expected
    assert _segment_digests(VectorReader(tmp_path, ["a", "b"]), vectors[7], 90) == expected
    merge_segments(tmp_path, ["ab", "old"], "mixed", exact_max=10_000)
    assert "textDigests" not in json.loads((tmp_path / "mixed.ids.json").read_text())
    assert set(_segment_digests(VectorReader(tmp_path, ["mixed"]), vectors[7], 90).values()) == {None}
    # A newer copy in a segment without digests: its digest is unknown, not the older one's.
    assert _segment_digests(VectorReader(tmp_path, ["ab", "old"]), vectors[2], 90)[ids[2]] is None


def test_a_segment_without_text_digests_searches_as_before(tmp_path: Path) -> None:
    """A segment written before the digests (no ``textDigests`` key) answers the same search
    as one with them, its hits without a digest; a reader that ignores the key (older code)
    reads a new segment as it always did."""
    ids, vectors = _corpus(200, 16)
    write_segment(tmp_path, "old", ids, vectors, exact_max=10_000)
    write_segment(tmp_path, "new", ids, vectors, exact_max=10_000, digests=_digests(ids))
    assert "textDigests" not in json.loads((tmp_path / "old.ids.json").read_text())
    old, new = VectorReader(tmp_path, ["old"]), VectorReader(tmp_path, ["new"])
    for row in (0, 99):
        old_hits, new_hits = old.search(vectors[row], limit=20), new.search(vectors[row], limit=20)
        assert all(hit.digest is None for hit in old_hits)
        assert [(h.chunk_id, h.score, h.rank) for h in old_hits] == [(h.chunk_id, h.score, h.rank) for h in new_hits]
        assert old.event_scores(vectors[row], ids) == new.event_scores(vectors[row], ids)
    old_meta = json.loads((tmp_path / "old.ids.json").read_text())
    new_meta = json.loads((tmp_path / "new.ids.json").read_text())
    assert set(new_meta) - set(old_meta) == {"textDigests"} and new_meta["format"] == old_meta["format"]


def test_the_vector_sink_stores_the_digest_of_the_text_the_text_sink_stores(tmp_path: Path) -> None:
    """Through the real writers: for every chunk, the digest its vector segment gives (after
    the writer's inline merges and a background merge in its child process) is text_digest
    of the text the text index stores, the digest the text index itself gives."""
    from sinks.testing import commit_batches, make_chunk, tantivy_docs
    from sinks.text.base import text_digest
    from sinks.text.tantivy_engine import TantivyEngine
    from sinks.text_writer import TextWriter
    from sinks.vector_writer import MERGE_FACTOR, VectorWriter, segment_names
    from streams.settings import Settings

    special = ["café au lait", "cafe\u0301 au lait", "日本語のテキストを検索する", "", "  spaced  \n out  "]
    batches = []
    for number in range(MERGE_FACTOR + 1):  # enough same-tier segments for an inline merge
        batch = [make_chunk(f"s{number}", [10 * number + i, 10 * number + i + 1]) for i in range(4)]
        batch[0]["text"] = special[number % len(special)]
        batches.append(batch)
    replayed = dict(batches[-1][1], text="a replayed chunk's newer text")
    batches[-1].append(replayed)  # an upsert within a batch: the last copy wins in both sinks
    settings = Settings.from_env({}, home=tmp_path / "home", embedder="hash:64")
    vector_writer = VectorWriter(settings)
    text_gen = commit_batches(tmp_path / "text", TextWriter("tantivy"), batches)[-1]
    vector_gen = commit_batches(tmp_path / "vector", vector_writer, batches)[-1]
    names = segment_names(vector_gen)
    assert any(name.startswith("merged-") for name in names), names
    engine = TantivyEngine()
    # The chunk's own text, as the page reads it (the indexed form of CJK text is spaced).
    stored = engine.fetch_texts(text_gen, [doc["chunkId"] for doc in tantivy_docs(text_gen, "chunkId")])
    assert stored[replayed["chunkId"]] == replayed["text"] and special[2] in stored.values()
    ids = list(stored)
    from_text_index = engine.fetch_digests(text_gen, ids)

    def segment_digests(directory: Path, segments: list[str]) -> dict[str, bytes | None]:
        reader = VectorReader(directory, segments)
        return _segment_digests(reader, vector_writer.embedder.embed(["event"])[0], len(ids) + 5)

    assert segment_digests(vector_gen, names) == from_text_index == {
        chunk_id: text_digest(text) for chunk_id, text in stored.items()}
    work = tmp_path / "work"
    work.mkdir()
    for name in names:
        for file in segment_files(name):
            (work / file).write_bytes((vector_gen / file).read_bytes())
    vector_writer.build_merge(work, names, "merged-background")
    assert segment_digests(work, ["merged-background"]) == from_text_index
