"""The layout of the code and its tests (issue 19, item 4):

- no test module imports another test module: shared helpers live in the shipped kits
  (``streams.testing``, ``sinks.testing``, ``deploy.testing``) or in a ``conftest.py``;
- installed code never imports ``tests`` (or any other module the package does not ship), so
  ``python -m reliability`` runs from an install;
- every module that makes a kafka-python client imports ``streams.kafka_compat``, whose patch
  keeps the classes a client decodes responses with alive.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest

from tests.source import parse

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_PATTERNS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
#: Top-level names of this repository that are not installed packages.
PROJECT_TOPS = {"tests", "benchmarks", "scripts", "examples"}


def _shipped(package: str) -> bool:
    return any(fnmatch(package, pattern) for pattern in SHIPPED_PATTERNS)


def _modules(root: Path) -> Iterator[Path]:
    yield from (p for p in sorted(root.rglob("*.py")) if ".venv" not in p.parts)


def _imports(path: Path, text: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of every import in ``path`` (or in ``text`` as if it were
    ``path``), relative ones resolved; ``from a import b`` yields ``a`` and ``a.b``."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    tree = parse(path, text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            yield node.lineno, module
            yield from ((node.lineno, f"{module}.{alias.name}") for alias in node.names)


def _is_test_module(name: str) -> bool:
    return name.split(".")[0] == "tests" and name.split(".")[-1].startswith("test_")


def test_the_checker_sees_relative_and_package_imports_of_test_modules() -> None:
    probe = ROOT / "tests" / "streams" / "test_probe.py"
    text = "from .test_follow import x\nfrom tests.sinks import test_structured\nimport tests.test_docs\n"
    assert {name for _, name in _imports(probe, text) if _is_test_module(name)} == {
        "tests.streams.test_follow", "tests.sinks.test_structured", "tests.test_docs"}


def test_no_test_module_imports_another_test_module() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line} imports {name}"
                 for path in _modules(ROOT / "tests") if path.name.startswith("test_")
                 for line, name in _imports(path)
                 if _is_test_module(name)]
    assert not offenders, "move shared helpers into a *.testing kit or a conftest fixture:\n" + "\n".join(offenders)


@pytest.mark.parametrize("package", sorted({p.split("*")[0] for p in SHIPPED_PATTERNS}))
def test_installed_code_imports_only_installed_packages(package: str) -> None:
    offenders = [f"{path.relative_to(ROOT)}:{line} imports {name}"
                 for path in _modules(ROOT / package)
                 for line, name in _imports(path)
                 if name.split(".")[0] in PROJECT_TOPS]
    assert not offenders, "installed code must not import what the wheel does not ship:\n" + "\n".join(offenders)


@pytest.mark.parametrize("module", ["streams.testing", "sinks.testing", "deploy.testing"])
def test_the_testing_kits_ship_without_test_tools(module: str) -> None:
    """Each kit is in a shipped package, lists what it offers, and needs no test-only tool
    (the fault suite runs where pytest and hypothesis are not installed)."""
    path = (ROOT / Path(*module.split("."))).with_suffix(".py")
    assert _shipped(module.rsplit(".", 1)[0]) and path.is_file()
    kit = importlib.import_module(module)
    assert kit.__all__ and all(getattr(kit, name, None) is not None for name in kit.__all__)
    test_tools = {"pytest", "hypothesis", "_pytest"}
    assert not [name for _, name in _imports(path) if name.split(".")[0] in test_tools]


def test_the_fault_suite_starts_outside_the_repository(tmp_path: Path) -> None:
    """``python -m reliability --help`` from a directory where ``tests`` is not importable."""
    done = subprocess.run([sys.executable, "-m", "reliability", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower()
    check = subprocess.run([sys.executable, "-c", "import tests"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert check.returncode != 0, "tests is importable here, so this test would prove nothing"


def test_the_longest_first_modules_exist() -> None:
    """The suite's schedule (``tests/conftest.py``) names modules by path: a renamed one would
    fall back to the end of the run silently."""
    from tests.conftest import _LONGEST_FIRST

    assert [path for path in _LONGEST_FIRST if not (ROOT / path).is_file()] == []


_KAFKA_CLIENTS = {"kafka.KafkaConsumer", "kafka.KafkaProducer", "kafka.KafkaAdminClient", "kafka.admin.KafkaAdminClient"}


def _runtime_imports(path: Path) -> set[str]:
    """The dotted names ``path`` imports outside ``if TYPE_CHECKING:`` blocks."""
    tree = parse(path)  # one tree: the ids below name its nodes (a second parse's nodes reuse freed ids)
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                   for statement in block.body for node in ast.walk(statement)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def test_imports_for_type_checking_only_are_not_runtime_imports() -> None:
    """deploy/cli/stack.py imports Settings under ``if TYPE_CHECKING:`` only."""
    assert "streams.settings.Settings" not in _runtime_imports(ROOT / "deploy" / "cli" / "stack.py")


def test_every_module_that_makes_a_kafka_client_keeps_its_response_classes() -> None:
    """A client thread that decodes a response with a freed class never reads again
    (streams.kafka_compat); the patch is made when that module is imported, so each module that
    makes a client imports it."""
    tops = sorted({p.split("*")[0] for p in SHIPPED_PATTERNS} | {"benchmarks"})
    makers = {path: names for top in tops for path in _modules(ROOT / top)
              if (names := _runtime_imports(path)) & _KAFKA_CLIENTS}
    assert ROOT / "sinks" / "runner.py" in makers, "the check no longer sees the sinks' consumers"
    # The patch itself; and the yardstick of `usl ingest`'s append rate, kafka-python alone on
    # purpose (one producer, one client thread: nothing to race).
    exempt = {ROOT / "streams" / "kafka_compat.py", ROOT / "benchmarks" / "plain_producer.py"}
    offenders = [str(path.relative_to(ROOT)) for path, names in makers.items()
                 if "streams.kafka_compat" not in names and path not in exempt]
    assert not offenders, "import streams.kafka_compat where a kafka client is made:\n" + "\n".join(offenders)
