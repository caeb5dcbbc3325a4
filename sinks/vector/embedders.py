"""Embedders: text → L2-normalised float32 vectors, each with an identity for the manifest.

An embedder's ``identity`` (name, model, revision, dimension, tokenizer) goes into every vector
generation's manifest, so a query is only ever answered with the same model that built the
index, and changing the model is a visible rebuild.

Specs accepted by :func:`get_embedder` (``USL_EMBEDDER``):

- ``wordllama`` (default): WordLlama ``l2_supercat`` at 256 dimensions, whose weights and
  tokenizer ship inside the wheel. Loaded strictly offline.
- ``sentence-transformers:MODEL``: a model already present in the local Hugging Face cache
  (or a local directory). Never downloads.
- ``openai:MODEL``: an OpenAI-compatible ``POST {USL_EMBEDDINGS_URL}/embeddings`` endpoint.
- ``hash:DIM``: feature hashing of word tokens. For tests and benchmarks only: it has no notion
  of meaning beyond shared words.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from sinks.vector.errors import EmbedderError
from streams.chunking.tokenizer import import_wordllama

__all__ = [
    "Embedder",
    "HashEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "WordLlamaEmbedder",
    "get_embedder",
]

WORDLLAMA_CONFIG = "l2_supercat"
WORDLLAMA_DIM = 256


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. ``embed`` returns float32 ``(n, dimension)``, rows L2-normalised
    (an empty text gives a zero row), and batches internally so callers pass any number."""

    @property
    def identity(self) -> dict[str, Any]:
        """``{"name", "model", "revision", "dimension", "tokenizer"}``, recorded in manifests."""
        ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    # A text with no known token pools to zero; dividing would make NaNs that poison faiss.
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


# --------------------------------------------------------------------------- hash (tests only)


_TOKEN = re.compile(r"\w+")


class HashEmbedder:
    """Feature hashing of lower-cased word tokens into ``dimension`` signed buckets.

    Deterministic across processes and machines, needs no model: for tests and benchmarks
    only. Texts sharing words are close; it knows nothing about synonyms.
    """

    def __init__(self, dimension: int) -> None:
        if dimension < 1:
            raise EmbedderError(f"hash embedder needs a positive dimension, got {dimension}")
        self.dimension = dimension
        self.identity: dict[str, Any] = {
            "name": "hash",
            "model": f"hash-{dimension}",
            "revision": "1",
            "dimension": dimension,
            "tokenizer": "regex-word-lower",
        }
        self._buckets: dict[str, tuple[int, float]] = {}

    def _bucket(self, token: str) -> tuple[int, float]:
        hit = self._buckets.get(token)
        if hit is None:
            digest = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
            hit = (digest % self.dimension, 1.0 if (digest >> 63) & 1 else -1.0)
            if len(self._buckets) < 1_000_000:  # bounded memo; vocabularies are Zipfian
                self._buckets[token] = hit
        return hit

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in _TOKEN.findall(text.lower()):
                column, sign = self._bucket(token)
                out[row, column] += sign
        return _normalise(out)


# --------------------------------------------------------------------------- wordllama


_wordllama_models: dict[Path, tuple[Any, Any]] = {}
_wordllama_lock = threading.Lock()


def _bundled_wordllama_files() -> tuple[Path, Path]:
    """Paths of the weights and tokenizer config shipped inside the wordllama wheel."""
    import importlib.util

    spec = importlib.util.find_spec("wordllama")
    if spec is None or spec.origin is None:
        raise EmbedderError("the wordllama package is not installed (pip install wordllama)")
    package = Path(spec.origin).parent
    weights = package / "weights" / f"{WORDLLAMA_CONFIG}_{WORDLLAMA_DIM}.safetensors"
    tokenizer = package / "tokenizers" / f"{WORDLLAMA_CONFIG}_tokenizer_config.json"
    for path in (weights, tokenizer):
        if not path.is_file():
            raise EmbedderError(f"the installed wordllama wheel lacks {path.name}; reinstall wordllama")
    return weights, tokenizer


def _link_into(folder: Path, source: Path) -> None:
    """Make ``folder/source.name`` point at ``source`` (symlink, or a copy where links fail)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    if target.exists() and target.resolve() == source.resolve():
        return
    staging = folder / f".{source.name}.{os.getpid()}.{threading.get_ident()}"
    try:
        os.symlink(source, staging)
    except OSError:
        import shutil

        shutil.copyfile(source, staging)
    # os.replace is atomic, so concurrent workers populating the same cache never see a
    # half-made file.
    os.replace(staging, target)


def _sha256_prefix(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat`` (256 dimensions) from the files bundled in the wheel.

    wordllama looks for its tokenizer in ``wordllama/tokenizer/`` while the wheel ships it in
    ``wordllama/tokenizers/``, and then falls back to a Hugging Face download. We therefore
    give it a cache folder laid out the way it expects (``weights/``, ``tokenizers/``, linking
    to the bundled files) and load with ``disable_download=True``, so it cannot reach the
    network. The loaded model is shared per process and cache folder.

    Vectors are wordllama's own: the mean of the token embeddings (no special tokens), here
    computed per text from an unpadded copy of its tokenizer, which gives identical vectors
    about twice as fast as wordllama's padded batches (benchmarks/bench_vector.py).
    """

    #: texts tokenized per call; the tokenizer spreads a call over all cores.
    batch_size = 256

    def __init__(self, cache_dir: Path) -> None:
        weights, tokenizer = _bundled_wordllama_files()
        self.cache_dir = cache_dir.resolve()
        self._model, self._tokenizer = _load_wordllama(self.cache_dir, weights, tokenizer)
        self._table: np.ndarray = self._model.embedding
        self.dimension = int(self._table.shape[1])
        self.identity: dict[str, Any] = {
            "name": "wordllama",
            "model": f"{WORDLLAMA_CONFIG}_{WORDLLAMA_DIM}",
            "revision": _weights_revision(weights),
            "dimension": self.dimension,
            "tokenizer": tokenizer.name,
        }

    @property
    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` the model embeds with, unpadded (for counting tokens)."""
        return self._tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        vocabulary = self._table.shape[0]
        for start in range(0, len(texts), self.batch_size):
            # The fast variant skips the character offsets an embedding never reads; the ids,
            # so the vectors, are the same (tests/sinks/test_vector.py).
            encodings = self._tokenizer.encode_batch_fast(
                texts[start : start + self.batch_size], add_special_tokens=False
            )
            for row, encoding in enumerate(encodings, start):
                ids = np.array(encoding.ids, dtype=np.intp)
                if ids.size:
                    np.clip(ids, 0, vocabulary - 1, out=ids)  # as wordllama does
                    out[row] = self._table[ids].mean(axis=0, dtype=np.float32)
        return _normalise(out)


_revisions: dict[Path, str] = {}


def _weights_revision(weights: Path) -> str:
    if weights not in _revisions:
        _revisions[weights] = _sha256_prefix(weights)
    return _revisions[weights]


def _load_wordllama(cache_dir: Path, weights: Path, tokenizer: Path) -> tuple[Any, Any]:
    """(wordllama model, unpadded copy of its tokenizer), loaded once per cache folder."""
    with _wordllama_lock:
        loaded = _wordllama_models.get(cache_dir)
        if loaded is not None:
            return loaded
        _link_into(cache_dir / "weights", weights)
        _link_into(cache_dir / "tokenizers", tokenizer)
        WordLlama = import_wordllama().WordLlama
        try:
            model = WordLlama.load(
                config=WORDLLAMA_CONFIG,
                cache_dir=cache_dir,
                dim=WORDLLAMA_DIM,
                disable_download=True,
            )
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise EmbedderError(f"cannot load the bundled wordllama model: {exc}") from exc
        from tokenizers import Tokenizer

        # wordllama switches padding on for its own tokenizer; ours must not pad.
        unpadded = Tokenizer.from_str(model.tokenizer.to_str())
        unpadded.no_padding()
        unpadded.no_truncation()
        _wordllama_models[cache_dir] = (model, unpadded)
        return model, unpadded


# --------------------------------------------------------------------------- sentence-transformers


class SentenceTransformerEmbedder:
    """A sentence-transformers model that is already on this machine; never downloads."""

    batch_size = 64

    def __init__(self, model_name: str) -> None:
        # Set before the import: huggingface_hub reads these once, at import time.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedderError(
                "USL_EMBEDDER=sentence-transformers:... needs the sentence-transformers package: "
                "pip install 'usl-search[sentence-transformers]'"
            ) from exc
        try:
            try:
                self._model = SentenceTransformer(model_name, device="cpu", local_files_only=True)
            except TypeError:  # releases before local_files_only rely on HF_HUB_OFFLINE alone
                self._model = SentenceTransformer(model_name, device="cpu")
        except Exception as exc:  # the library raises OSError, ValueError, HF errors...
            raise EmbedderError(
                f"sentence-transformers model {model_name!r} is not available locally "
                f"(downloads are disabled; put it in the Hugging Face cache or pass a local "
                f"directory): {type(exc).__name__}: {str(exc)[:200]}"
            ) from exc
        self.dimension = int(self._model.get_sentence_embedding_dimension())
        tokenizer = getattr(self._model, "tokenizer", None)
        self.identity: dict[str, Any] = {
            "name": "sentence-transformers",
            "model": model_name,
            "revision": _st_revision(self._model),
            "dimension": self.dimension,
            "tokenizer": getattr(tokenizer, "name_or_path", None),
        }

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return _normalise(vectors)


def _st_revision(model: Any) -> str:
    """The Hugging Face commit the model was loaded from, when transformers recorded it."""
    try:
        commit = model[0].auto_model.config._commit_hash
    except Exception:
        commit = None
    return str(commit)[:12] if commit else "unknown"


# --------------------------------------------------------------------------- OpenAI-compatible HTTP


def _public_url(url: str) -> str:
    """``url`` without user:password, for messages."""
    import httpx

    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None, query=None))


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint: ``POST {url}/embeddings``.

    The dimension is learned from the first response (one probe request if ``dimension`` or
    ``identity`` is read before any ``embed``). The remote model has no pinned revision, so
    the identity says ``"unpinned"``: rebuild the vector index if the provider changes it.
    """

    retry_statuses = frozenset({408, 429, 500, 502, 503, 504})

    def __init__(
        self,
        model: str,
        url: str,
        *,
        api_key: str | None = None,
        batch_size: int = 128,
        timeout: float = 60.0,
        retries: int = 2,
    ) -> None:
        import httpx

        self.model = model
        self.url = url.rstrip("/")
        self.batch_size = batch_size
        self.retries = retries
        self._api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self._dimension: int | None = None

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self.embed(["dimension probe"])
        assert self._dimension is not None
        return self._dimension

    @property
    def identity(self) -> dict[str, Any]:
        return {
            "name": "openai",
            "model": self.model,
            "revision": "unpinned",
            "dimension": self.dimension,
            "tokenizer": None,
        }

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        parts = [self._post(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        if not parts:
            return np.zeros((0, self._dimension or 0), dtype=np.float32)
        return _normalise(np.concatenate(parts))

    def close(self) -> None:
        self._client.close()

    def _post(self, batch: list[str]) -> np.ndarray:
        import httpx

        where = _public_url(f"{self.url}/embeddings")
        for attempt in range(self.retries + 1):
            try:
                response = self._client.post(
                    f"{self.url}/embeddings", json={"model": self.model, "input": batch}
                )
            except httpx.HTTPError as exc:
                if attempt < self.retries:
                    time.sleep(0.5 * 2**attempt)
                    continue
                raise EmbedderError(
                    f"cannot reach the embeddings endpoint {where}: {type(exc).__name__}"
                ) from None
            if response.status_code in self.retry_statuses and attempt < self.retries:
                time.sleep(0.5 * 2**attempt)
                continue
            if response.status_code != 200:
                raise EmbedderError(
                    f"embeddings endpoint {where} answered HTTP {response.status_code}: "
                    f"{self._scrub(_error_detail(response))}",
                    status=response.status_code,
                )
            return self._parse(response, len(batch), where)
        raise AssertionError("unreachable")

    def _parse(self, response: Any, expected: int, where: str) -> np.ndarray:
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(f"embeddings endpoint {where} sent a malformed response: {exc!r}") from None
        if vectors.ndim != 2 or vectors.shape[0] != expected:
            raise EmbedderError(
                f"embeddings endpoint {where} returned {vectors.shape[0] if vectors.ndim else 0} "
                f"vectors for {expected} inputs"
            )
        if self._dimension is None:
            self._dimension = int(vectors.shape[1])
        elif vectors.shape[1] != self._dimension:
            raise EmbedderError(
                f"embeddings endpoint {where} changed dimension from {self._dimension} to {vectors.shape[1]}"
            )
        return vectors

    def _scrub(self, text: str) -> str:
        # Some providers echo (part of) the key in their error body.
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text[:300]


def _error_detail(response: Any) -> str:
    try:
        body = response.json()
        error = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(error, dict):
            error = error.get("message", error)
        return str(error)
    except ValueError:
        return response.text.strip() or response.reason_phrase


# --------------------------------------------------------------------------- factory


def get_embedder(
    spec: str = "wordllama",
    *,
    url: str | None = None,
    api_key: str | None = None,
    cache_root: Path | None = None,
) -> Embedder:
    """The embedder named by ``spec`` (see the module docstring for the accepted forms).

    ``cache_root`` holds the wordllama cache folder (default ``$USL_HOME``); ``url`` and
    ``api_key`` are for ``openai:MODEL``.
    """
    kind, _, argument = spec.strip().partition(":")
    if kind == "wordllama" and not argument:
        if cache_root is None:
            from streams.settings import Settings

            cache_root = Settings.from_env().home
        return WordLlamaEmbedder(Path(cache_root) / "wordllama-cache")
    if kind == "hash":
        try:
            return HashEmbedder(int(argument))
        except ValueError:
            raise EmbedderError(f"embedder spec {spec!r}: expected hash:DIMENSION") from None
    if kind == "sentence-transformers" and argument:
        return SentenceTransformerEmbedder(argument)
    if kind == "openai" and argument:
        if not url:
            raise EmbedderError(f"embedder {spec!r} needs USL_EMBEDDINGS_URL (the endpoint's base URL)")
        return OpenAIEmbedder(argument, url, api_key=api_key)
    raise EmbedderError(
        f"unknown embedder {spec!r}: use wordllama, sentence-transformers:MODEL, openai:MODEL or hash:DIM"
    )
