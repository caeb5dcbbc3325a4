"""One patch of typer's internals: plain CLI parameters are coerced without pydantic.

Why: typer 0.29 coerces every parameter through a pydantic ``TypeAdapter``; importing
pydantic and building the adapters costs about 0.2 s of CPU per ``usl`` process, more than a
whole ``usl search`` through the API takes otherwise (docs/benchmarks.md). Parameters whose
annotation is ``str``, ``int``, ``float``, ``bool`` or ``Path`` (or a ``list`` of one of them),
without a custom ``parser``, are coerced here with the same rules (number ``min``/``max``/``clamp``,
booleans from flags or environment words, a path from its text); every other annotation still goes
to typer. ``usl ingest PATHS`` is the command that takes paths: with them coerced here it loads no
pydantic either (issue #16).

Patched names (typer 0.29.x; :data:`TESTED_TYPER`):

- ``typer.core.build_runtime_param``: the function ``TyperArgument``/``TyperOption`` call
  (through ``get_runtime_param``) to build a parameter's coercion. typer.core imports it by
  name from ``typer._coercion``, so that binding is the one replaced.
- It builds :class:`typer._coercion.RuntimeParam` subclasses (the ``coerce`` /
  ``_coerce_value`` contract) and reads ``TypeDescriptor.annotation``, ``.parameter_info``
  (``min``, ``max``, ``clamp``, ``parser``) and ``.file_annotation``.

Upstream: the adapter layer is typer's design since it moved coercion to pydantic (no issue
asks to make it optional). ``tests/deploy/test_typer_compat.py`` fails at once when an upgrade
removes or renames one of these names, and checks that both coercions agree. :func:`install`
leaves typer alone (slower, still correct) when the names are not there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

__all__ = ["PATCHED", "TESTED_TYPER", "install", "plain_coercion"]

TESTED_TYPER = ("0.29",)
PATCHED = ("typer.core.build_runtime_param",)
_PLAIN = (str, int, float, bool, Path)
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off", ""})
_installed = False


def plain_coercion(annotation: Any, parameter_info: Any, value: Any) -> Any:
    """``value`` (from argv, an environment variable or a default) as ``annotation``; raises
    ValueError with the message the user reads."""
    if get_origin(annotation) is list:
        leaf = get_args(annotation)[0]
        items = value if isinstance(value, list | tuple) else [value]
        return [plain_coercion(leaf, parameter_info, item) for item in items]
    if annotation is Path:
        if isinstance(value, Path):
            return value
        if not isinstance(value, str) or "\x00" in value:  # what pydantic refuses too
            raise ValueError("Input is not a valid path: embedded null byte" if isinstance(value, str)
                             else "Input is not a valid path")
        return Path(value)
    if annotation is str:
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return value if isinstance(value, str) else str(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError("Input should be a valid boolean, unable to interpret input")
    number: Any
    try:
        if isinstance(value, bool):
            raise ValueError
        number = annotation(value.strip() if isinstance(value, str) else value)
        if annotation is int and isinstance(value, float) and value != number:
            raise ValueError
    except (TypeError, ValueError):
        kind = "integer" if annotation is int else "number"
        raise ValueError(f"Input should be a valid {kind}, unable to parse string as an {kind}"
                         if kind == "integer" else
                         f"Input should be a valid {kind}, unable to parse string as a {kind}") from None
    low, high = parameter_info.min, parameter_info.max
    if parameter_info.clamp:
        if low is not None and number < low:
            return annotation(low)
        if high is not None and number > high:
            return annotation(high)
        return number
    if low is not None and number < low:
        raise ValueError(f"Input should be greater than or equal to {low}")
    if high is not None and number > high:
        raise ValueError(f"Input should be less than or equal to {high}")
    return number


def _is_plain(descriptor: Any) -> bool:
    annotation = descriptor.annotation
    if get_origin(annotation) is list:
        (annotation,) = get_args(annotation) or (None,)
    return (descriptor.file_annotation is None and descriptor.parameter_info.parser is None
            and annotation in _PLAIN)


def install() -> bool:
    """Patch typer (once); whether the patch is in place."""
    global _installed
    if _installed:
        return True
    try:
        import typer
        import typer.core as core
        from typer import _coercion as coercion

        original = core.build_runtime_param
        base = coercion.RuntimeParam
        bad_parameter = typer.BadParameter
    except (ImportError, AttributeError):
        return False
    if not typer.__version__.startswith(TESTED_TYPER):
        return False

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):  # type: ignore[misc,valid-type]
        """Coercion of a plain parameter without pydantic."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return plain_coercion(self.annotation, self.parameter_info, value)
            except ValueError as exc:
                raise bad_parameter(str(exc), ctx=ctx, param=param) from None

    def build_runtime_param(descriptor: Any) -> Any:
        if _is_plain(descriptor):
            return PlainRuntimeParam(parameter_info=descriptor.parameter_info,
                                     annotation=descriptor.annotation)
        return original(descriptor)

    core.build_runtime_param = build_runtime_param
    _installed = True
    return True
