"""The typer patch of :mod:`deploy.cli.typer_compat`: every patched name still exists, and the
pydantic-free coercion agrees with typer's own on what a user can type."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer._adapters import build_adapter
from typer.models import OptionInfo

from deploy.cli import typer_compat


def test_every_patched_name_exists_in_this_typer() -> None:
    assert typer.__version__.startswith(typer_compat.TESTED_TYPER), (
        f"typer {typer.__version__} is not one deploy/cli/typer_compat.py was tested with")
    for dotted in typer_compat.PATCHED:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted
    coercion = importlib.import_module("typer._coercion")
    for name in ("RuntimeParam", "TypeDescriptor", "build_runtime_param"):
        assert hasattr(coercion, name), f"typer._coercion.{name}"
    assert typer_compat.install()


def test_the_cli_runs_with_the_patch() -> None:
    from typer.testing import CliRunner

    from deploy.cli import app

    runner = CliRunner()
    refused = runner.invoke(app, ["sql", "SELECT 1", "--as-of", "-1"])
    assert refused.exit_code == 2 and "greater than or equal to 0" in refused.output
    refused = runner.invoke(app, ["search", "x", "--k", "many"])
    assert refused.exit_code == 2 and "valid integer" in refused.output
    refused = runner.invoke(app, ["search", "x", "-k", "many"])  # the short form is the same option
    assert refused.exit_code == 2 and "valid integer" in refused.output


def typer_says(annotation: Any, info: OptionInfo, value: Any) -> tuple[str, Any]:
    from pydantic import ValidationError

    try:
        return "ok", build_adapter(annotation, info).validate_python(value)
    except ValidationError:
        return "error", None


def ours(annotation: Any, info: OptionInfo, value: Any) -> tuple[str, Any]:
    try:
        return "ok", typer_compat.plain_coercion(annotation, info, value)
    except ValueError:
        return "error", None


words = st.one_of(st.integers(-10**6, 10**6).map(str), st.sampled_from(
    ["", " 7 ", "1e3", "x", "true", "False", "yes", "off", "0", "1", "-0"]), st.text(max_size=6))


@given(value=words, low=st.one_of(st.none(), st.integers(-5, 5)), high=st.one_of(st.none(), st.integers(5, 50)),
       clamp=st.booleans())
def test_integers_agree(value: str, low: int | None, high: int | None, clamp: bool) -> None:
    info = OptionInfo(min=low, max=high, clamp=clamp)
    assert ours(int, info, value) == typer_says(int, info, value)


@given(value=words)
def test_strings_and_booleans_agree(value: str) -> None:
    info = OptionInfo()
    assert ours(str, info, value) == typer_says(str, info, value)
    assert ours(bool, info, value) == typer_says(bool, info, value)
    assert ours(list[str], info, [value, value]) == typer_says(list[str], info, [value, value])


@given(value=st.one_of(words, st.sampled_from(["~/x", "a/../b", "/tmp//x/", " a ", "a\x00b", "."])))
def test_paths_agree(value: str) -> None:
    info = OptionInfo()
    assert ours(Path, info, value) == typer_says(Path, info, value)
    assert ours(list[Path], info, [value, value]) == typer_says(list[Path], info, [value, value])


@pytest.mark.parametrize("flag", [True, False])
def test_flags_stay_booleans(flag: bool) -> None:
    assert ours(bool, OptionInfo(), flag) == ("ok", flag)
