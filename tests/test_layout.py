"""The package's floor plan (docs/architecture.md), checked: layers import only downwards, no
import cycles, a small root, no oversized module, and every function-level import says why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sim.paths import PACKAGE_DIR

# Bottom to top; a module may import its own package and the ones before it.
LAYERS = (
    ("sim.config", "sim.config_schema", "sim.errors", "sim.paths", "sim.user_files", "sim.catalog"),
    ("sim.specs",),
    ("sim.engines",),
    ("sim.workload",),
    ("sim.kv",),
    ("sim.schedulers",),
    ("sim.cost",),
    ("sim.run",),
    ("sim.report",),
    ("sim.calibrate",),
    ("sim.cli",),
    ("sim.scenarios",),
    ("sim.compare", "sim.importers", "sim.validation_suite", "sim.__main__", "sim"),
)
# Entry points inside a package that count as root entries: `python -m sim.calibrate --runs`
# simulates validation cases (sim.scenarios.fit_runs), above its own package's layer.
ENTRY_POINTS = ("sim.calibrate.__main__",)
# Imports between scenario packages, each named in the importing package's docstring.
SCENARIO_USES = {
    "sim.scenarios.disagg": {"sim.scenarios.capacity"},
    "sim.scenarios.fit_runs": {"sim.scenarios.validate"},
    "sim.scenarios.teach": {"sim.scenarios.long_context"},
}
MAX_ROOT_MODULES = 12
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, ast.AST, bool]]:
    """(imported sim module, node, inside a function) for each import of `name`."""
    tree = ast.parse(MODULES[name].read_text())
    inner = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t:
                found.append((t, node, id(node) in inner))
    return found


def _layer(name: str) -> int:
    if name in ENTRY_POINTS:
        return len(LAYERS) - 1
    for rank, prefixes in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes if p != "sim"):
            return rank
    return len(LAYERS) - 1


def _scenario_package(name: str) -> str | None:
    parts = name.split(".")
    if (
        len(parts) >= 4
        and parts[1] == "scenarios"
        and (PACKAGE_DIR / "scenarios" / parts[2]).is_dir()
    ):
        return ".".join(parts[:3])
    return None


def test_layers_import_only_downwards():
    wrong = []
    for name in MODULES:
        for target, node, _ in _imports(name):
            if name.startswith(target + ".") or target == "sim":  # its own package
                continue
            if _layer(target) > _layer(name):
                wrong.append(f"{name} imports {target} (line {node.lineno})")
            mine, theirs = _scenario_package(name), _scenario_package(target)
            if mine and theirs and mine != theirs and theirs not in SCENARIO_USES.get(mine, ()):
                wrong.append(f"{name} imports another scenario's {target} (line {node.lineno})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = {
        m: {t for t, _, _ in _imports(m) if t != m and not m.startswith(t + ".")} for m in MODULES
    }
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_a_small_root_and_no_oversized_module():
    root = [p.name for p in PACKAGE_DIR.glob("*.py") if p.name != "__init__.py"]
    assert len(root) <= MAX_ROOT_MODULES, sorted(root)
    big = {n: len(p.read_text().splitlines()) for n, p in MODULES.items()}
    assert not {n: k for n, k in big.items() if k > MAX_LINES}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_function_level_imports_say_why(name):
    """Only for an optional dependency or start-up time, each with a comment on the import or
    the line before it (or, for a function of such imports alone, in its docstring)."""
    text = MODULES[name].read_text()
    lines = text.splitlines()
    silent = []
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        said = "import" in (ast.get_docstring(fn) or "")
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or said:
                continue
            before = lines[node.lineno - 2].strip()
            if "#" not in lines[node.lineno - 1] and not before.startswith("#"):
                silent.append(f"line {node.lineno} in {fn.name}()")
    assert not silent, silent


def test_every_package_says_what_it_holds():
    for path in PACKAGE_DIR.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert len(doc) > 80 and "TODO" not in doc, path
