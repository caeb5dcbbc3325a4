"""Every project module imports alone, and no import cycle joins the project's modules.

A module that works only when something else was imported first, or two modules that import
each other, break as soon as someone imports them in another order (a test, a script, a new
command). Two checks keep that from coming back:

- each module of the shipped packages imports on its own in a fresh interpreter: one
  subprocess loads the third-party libraries the project imports (so the check takes seconds,
  not minutes), then forks one child per module, which starts with none of the project's
  modules loaded and imports just that one;
- the import graph, built with :mod:`ast` from the imports that run when a module is loaded
  (module level; not those inside functions, not ``if TYPE_CHECKING:``), has no cycle: every
  strongly connected component is a single module.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.source import parse

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("streams", "sinks", "planner", "deploy", "reliability", "benchmarks")

# Cycles that remain, each with the reason it is left; the test fails when one is gone (drop it
# here) or a new one appears.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def module_files() -> dict[str, Path]:
    """Dotted name → file of every module of :data:`PACKAGES`."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _runtime_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of ``body`` that run at import: into if/try/with blocks, not into
    functions or classes' methods, and not into ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, ast.If):
            test = node.test
            guarded = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
            if not guarded:
                yield from _runtime_statements(node.body)
            yield from _runtime_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _runtime_statements(block)
        elif isinstance(node, ast.With):
            yield from _runtime_statements(node.body)
        elif isinstance(node, ast.ClassDef):
            yield from _runtime_statements(node.body)
        else:
            yield node


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports when it is loaded."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _runtime_statements(parse(path).body):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import submodule` imports the submodule (its package's __init__
            # runs first, as for `import package.submodule`, and is not counted for either);
            # `from module import name` imports the module.
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {base})
            if len(submodules) < len(node.names):
                found.add(base)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return components


def test_the_graph_sees_a_cycle_and_a_package_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(map(sorted, strongly_connected(graph))) == [["a", "b", "c"], ["d"]]
    graph = import_graph()
    assert "deploy.cli._common" in graph["deploy.cli.query"]
    assert "deploy.cli.query" in graph["deploy.cli"]  # `from deploy.cli import query`
    assert "planner.engine" not in graph["planner"]  # imported inside a function only


def test_no_import_cycle_among_project_modules() -> None:
    cycles = {frozenset(component) for component in strongly_connected(import_graph()) if len(component) > 1}
    unexpected = sorted(sorted(cycle) for cycle in cycles - set(KNOWN_CYCLES))
    assert not unexpected, f"modules that import each other: {unexpected}"
    gone = sorted(sorted(cycle) for cycle in set(KNOWN_CYCLES) - cycles)
    assert not gone, f"no longer a cycle, drop it from KNOWN_CYCLES: {gone}"


_IMPORT_EACH = r"""
import importlib, json, os, sys, traceback

modules, third_party = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in third_party:
    try:
        importlib.import_module(name)
    except Exception:
        pass  # optional extras; a module that needs one fails below with the reason
failures, running = {}, {}


def reap():
    pid, status = os.wait()
    name, read = running.pop(pid)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    if status != 0:
        failures[name] = message or f"exit status {status}"


for name in modules:
    if len(running) >= 2:
        reap()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc()[-2000:].encode())
            code = 1
        os._exit(code)
    os.close(write)
    running[pid] = (name, read)
while running:
    reap()
print(json.dumps(failures))
"""


def _third_party(graph_files: dict[str, Path]) -> list[str]:
    """Every non-project module the project imports at module level, to load before forking."""
    names: set[str] = set()
    for path in graph_files.values():
        for node in _runtime_statements(parse(path).body):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module)
    project = (*PACKAGES, "tests")
    return sorted(n for n in names if n.split(".")[0] not in project and n != "__future__")


def test_each_module_imports_alone_in_a_fresh_interpreter() -> None:
    files = module_files()
    modules = sorted(name for name in files if not name.endswith("__main__"))  # those run a program
    done = subprocess.run([sys.executable, "-c", _IMPORT_EACH, json.dumps(modules), json.dumps(_third_party(files))],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, "\n\n".join(f"{name}:\n{message}" for name, message in sorted(failures.items()))
