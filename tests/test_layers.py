"""The package's imports form layers: no file imports a file of a higher layer, and no files import each other in a
circle. Every import counts (module level, inside functions, under TYPE_CHECKING), read from the source with `ast`;
`from package import name` counts as importing the file that defines `name` when the package only re-exports it."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("orthrus_rag", "pipelines", "indexes", "eval")  # the last three install as orthrus_rag.<folder> (setup.py)
# lowest first; a file belongs to the first entry that is its path or a folder above it
LAYERS: list[tuple[str, ...]] = [
    ("orthrus_rag/settings.py", "orthrus_rag/files.py", "orthrus_rag/cpu_info.py", "orthrus_rag/demo/",
     "orthrus_rag/__init__.py"),
    ("orthrus_rag/models/",),
    ("orthrus_rag/engine/",),
    ("orthrus_rag/rag/",),
    ("indexes/", "pipelines/", "orthrus_rag/training/"),
    ("orthrus_rag/retrieval.py",),
    ("orthrus_rag/engine_plan.py", "orthrus_rag/index_plan.py"),
    ("orthrus_rag/stack.py", "orthrus_rag/cluster.py", "orthrus_rag/launch.py"),
    ("eval/experiment/", "eval/__init__.py"),  # datasets, metrics, the prediction log, run facts, tables
    ("eval/load/",),  # when requests arrive; the HTTP load test
    ("eval/bench/",),  # benchmarks, their reports and plots
    ("eval/leaderboard.py", "eval/gpu/", "eval/data/"),  # the leaderboard, the GPU check, data builders
    ("orthrus_rag/cli/",),  # orthrus-rag, -index, -train-adapter
    ("orthrus_rag/serving/",),  # orthrus-rag-serve
]


def source_files() -> list[Path]:
    return sorted(f for folder in FOLDERS for f in (ROOT / folder).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts = parts if parts[0] == "orthrus_rag" else ["orthrus_rag", *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(f): f for f in source_files()}


def base_module(path: Path, node: ast.ImportFrom) -> str | None:
    if node.level == 0:
        return node.module
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    package = package[:len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def resolve(module: str, name: str | None = None, depth: int = 0) -> Path | None:
    """The file `module` (or `name` in it) comes from: a submodule, or the file a package's __init__ takes it from."""
    if name and f"{module}.{name}" in modules():
        return modules()[f"{module}.{name}"]
    path = modules().get(module)
    if path is None or not name or path.name != "__init__.py" or depth > 3:
        return path
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return resolve(base_module(path, node), name, depth + 1) or path
    return path


def imports(path: Path) -> set[Path]:
    found: set[Path | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {resolve(a.name) for a in node.names if a.name.split(".")[0] == "orthrus_rag"}
        elif isinstance(node, ast.ImportFrom):
            base = base_module(path, node)
            if base and base.split(".")[0] == "orthrus_rag":
                found |= {resolve(base, a.name) for a in node.names}
    return {f for f in found if f is not None and f != path}


def layer(path: Path) -> int:
    rel = path.relative_to(ROOT).as_posix()
    for i, entries in enumerate(LAYERS):
        if any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in entries):
            return i
    raise AssertionError(f"{rel} is in no layer of tests/test_layers.py: add it where it belongs")


def circles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components of more than one file (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    found: list[list[Path]] = []

    def visit(v: Path) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[Path, set[Path]]:
    return {f: imports(f) for f in source_files()}


def test_no_import_circles(graph):
    names = [sorted(f.relative_to(ROOT).as_posix() for f in c) for c in circles(graph)]
    assert names == [], f"files that import each other: {names}"


def test_no_upward_imports(graph):
    upward = [f"{a.relative_to(ROOT)} -> {b.relative_to(ROOT)}" for a, targets in graph.items() for b in targets
              if layer(b) > layer(a)]
    assert upward == []


def test_the_checks_can_fail(tmp_path):
    a, b, c = (tmp_path / name for name in "abc")
    assert sorted(map(sorted, circles({a: {b}, b: {c}, c: {a}}))) == [sorted([a, b, c])]
    assert circles({a: {b}, b: set(), c: {a}}) == []
    assert layer(ROOT / "orthrus_rag/engine/engine.py") < layer(ROOT / "orthrus_rag/stack.py")
    assert resolve("orthrus_rag.engine", "EngineConfig") == ROOT / "orthrus_rag/engine/config.py"
