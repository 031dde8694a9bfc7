"""The package's import graph: one way, no cycle (lazy or not), light modules stay light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import bertlite

PACKAGE = Path(bertlite.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:`, which never run."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    return skipped


def import_graph() -> dict[str, set[str]]:
    """module -> the bertlite modules it imports anywhere (module level or inside a function).

    `from bertlite import Name` resolves Name through the package's lazy table; a plain
    `import bertlite` inside a submodule depends on every module that table names."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    lazy = bertlite._LAZY
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped, targets = type_checking_only(tree), set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "bertlite" and name != "bertlite":
                        targets.update(lazy.values())
                    elif alias.name.startswith("bertlite."):
                        targets.add(alias.name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bertlite"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in modules:
                        targets.add(full)
                    elif node.module == "bertlite" and alias.name in lazy:
                        targets.add(lazy[alias.name])
                    else:
                        targets.add(node.module)
        graph[name] = {t for t in targets if t != name and t in modules}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path a -> ... -> a, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


@pytest.mark.slow
def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    assert (
        "bertlite.checkpoint.load" in graph["bertlite.models.modeling_utils"]
    )  # from_pretrained's function-level import
    assert "bertlite.models.heads" in graph["bertlite.models.auto"]


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.slow
def test_no_import_cycle_inside_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


def test_imports_run_one_way_between_layers():
    # A lower layer never imports a higher one: errors -> utils, hub (files from a folder or the hub) ->
    # config -> tokenization, layers, checkpoint (which reads and writes weights without the model classes),
    # quant -> models -> util (sentence-transformers' util), integrations -> jobs -> parity, files, serve -> cli,
    # embed. files sits above jobs because files.ray runs an Embedder per Ray actor; files and serve share a
    # layer but never import each other (the server writes no files). embed is the old paths' compatibility
    # package: nothing in the package imports it. Imports for type hints alone are not counted.
    order = {"errors": 0, "utils": 1, "hub": 1, "config": 2, "tokenization": 3, "layers": 3, "checkpoint": 3}
    order |= {"quant": 4, "models": 5, "util": 6, "integrations": 6, "jobs": 7, "parity": 8, "files": 8, "serve": 8}
    order |= {"cli": 9, "embed": 9}

    def layer(module: str) -> int | None:
        return order.get(module.split(".")[1]) if "." in module else None

    def part(module: str) -> str:
        return module.split(".")[1] if "." in module else ""

    graph = import_graph()
    assert {part(m) for m in graph} - {""} <= set(order), "a new top-level module needs its place in the order"
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if layer(source) is not None
        and layer(target) is not None
        and (layer(target) > layer(source) or {part(source), part(target)} == {"files", "serve"})
    )
    assert upward == []


def run_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_tokenizer_imports_no_torch():
    assert run_python("import sys, bertlite.tokenization; print('torch' in sys.modules)") == "False"


@pytest.mark.slow
def test_writing_a_checkpoint_imports_no_int8():
    code = (
        "import sys, bertlite.checkpoint.save; print(sorted(m for m in sys.modules if m.startswith('bertlite.quant')))"
    )
    assert run_python(code) == "[]"


def test_every_public_name_resolves():
    for name in bertlite.__all__:
        assert getattr(bertlite, name) is not None, name
