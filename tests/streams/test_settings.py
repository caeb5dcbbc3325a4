"""Settings refuse nonsense with an error naming the variable, and never show a secret."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from streams.exceptions import ConfigError
from streams.settings import Settings


@pytest.mark.parametrize(("env", "value"), [
    ("USL_API_ALLOW_UNAUTHENTICATED", "ture"),
    ("USL_API_ALLOW_UNAUTHENTICATED", "enabled"),
    ("USL_TEXT_ENGINE", "lucene"),
    ("USL_EMBEDDER", "bert"),
    ("USL_L1_PARTITIONS", "0"),
    ("USL_L1_PARTITIONS", "eight"),
    ("USL_SINK_BATCH_SECONDS", "-1"),
    ("USL_CHUNK_TOKENS", "3"),
    ("USL_API_PORT", "-5"),
])
def test_a_malformed_setting_is_refused_by_name(env: str, value: str) -> None:
    with pytest.raises(ConfigError, match=env):
        Settings.from_env({env: value})


@pytest.mark.parametrize(("value", "expected"), [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("off", False),
])
def test_booleans_read_both_ways(value: str, expected: bool) -> None:
    assert Settings.from_env({"USL_API_ALLOW_UNAUTHENTICATED": value}).api_allow_unauthenticated is expected


@pytest.mark.parametrize("embedder", ["wordllama", "openai:text-embedding-3-small",
                                      "sentence-transformers:all-MiniLM-L6-v2"])
def test_every_documented_embedder_form_is_accepted(embedder: str) -> None:
    assert Settings.from_env({"USL_EMBEDDER": embedder}).embedder == embedder


def test_overrides_are_validated_too() -> None:
    with pytest.raises(ConfigError, match="USL_TEXT_ENGINE"):
        Settings.from_env({}, text_engine="lucene")


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=12, max_size=40))
@example("l1_partition")
def test_secrets_never_appear_in_repr(secret: str) -> None:
    # A drawn string may already be part of the repr without any secret in it
    # ('l1_partition' is a field name); such a draw cannot show a leak either way.
    assume(secret not in repr(Settings.from_env({})))
    settings = Settings.from_env({"USL_CURSOR_KEY": secret, "USL_EMBEDDINGS_API_KEY": secret})
    assert settings.cursor_key == secret
    assert secret not in repr(settings)
    assert secret not in str(settings)


def test_every_secret_like_setting_is_marked_secret() -> None:
    for f in fields(Settings):
        words = set(f.metadata["env"].split("_"))
        if words & {"KEY", "SECRET", "PASSWORD", "TOKEN"} and "FILE" not in words:
            assert not f.repr, f"{f.metadata['env']} would be printed by repr(Settings)"
