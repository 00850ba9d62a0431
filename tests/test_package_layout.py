"""The Python package's layout: no import circle, and every module imports on its own.

The graph is built from the source with ``ast`` (nothing is imported): a node per module of python/trdata
(``trdata`` itself is its ``__init__.py``), an edge per intra-package import. Imports under ``if TYPE_CHECKING:``
run only for type checkers and are left out; so is a module's PEP 562 ``__getattr__`` (a name alias, looked up
after both modules are imported: ``trdata.transforms.from_torchvision``). Two graphs must be acyclic:

* module-level imports only (what runs when a module is imported);
* every import, function-level (lazy) ones included, with the package itself a node: a lazy ``import trdata``
  depends on ``trdata/__init__.py`` and all it imports. This is the circle the progress bar made: ``__init__``
  imported ``packed``, whose ``pack()`` imported ``ProgressBar`` from the bench harness ``_bench``, which imports
  ``trdata`` (``__init__``) to run its contenders.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "trdata"


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name → its file, for every ``.py`` of the package (``trdata.sources`` is its __init__)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = ["trdata", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, lazy: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a module: those run at import time (``lazy=False``: the module body and the
    blocks of its top-level if/try/with and class bodies, never a function's), or all of them (``lazy=True``), leaving
    out ``if TYPE_CHECKING:`` blocks and a module-level ``__getattr__``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(nodes: list[ast.stmt], top: bool) -> None:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If):
                if not _is_type_checking(node):
                    walk(node.body, top)
                walk(node.orelse, top)
            elif isinstance(node, ast.ClassDef):
                walk(node.body, False)  # a class body runs when the module does (its methods do not)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if lazy and not (top and node.name == "__getattr__"):
                    walk(node.body, False)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, field, []) or []:
                        walk([child] if isinstance(child, ast.stmt) else child.body, top)

    walk(tree.body, True)
    return found


def _is_submodule(root: Path, dotted: str) -> bool:
    """Whether ``dotted`` (``trdata.…``) names a module of the package: Python (``.py``, a folder) or compiled
    (``_core``: an extension, no node of the graph; known by its committed ``.pyi`` stub, so that the graph is the
    same in a tree where the extension was never built)."""
    if not dotted.startswith("trdata."):
        return False
    path = root.joinpath(*dotted.split(".")[1:])
    return (
        path.with_suffix(".py").is_file()
        or path.with_suffix(".pyi").is_file()
        or path.is_dir()
        or any(path.parent.glob(path.name + ".*.so"))
    )


def import_graph(root: Path = PACKAGE, lazy: bool = False) -> dict[str, set[str]]:
    """Module → the package's modules it imports (see ``_imports``). ``from .x import name`` depends on ``x``
    (and on ``x.name`` when that is a module); ``from . import name`` on the submodule ``name``, or on the
    package's ``__init__`` when ``name`` is defined there."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path)), lazy):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if _is_submodule(root, f"{target}.{a.name}")]
                targets = subs + ([target] if len(subs) < len(node.names) else [])
            for t in targets:
                if t not in modules and _is_submodule(root, t):
                    continue  # _core, the compiled extension: no node
                # `import trdata.x.y` imports trdata.x.y; a name outside the package is no node
                while t and t not in modules:
                    t = t.rpartition(".")[0] if t.startswith("trdata.") else ""
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, …, a], or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_graph_sees_the_modules_and_their_imports() -> None:
    """The graph is not vacuously acyclic: it holds the package's modules and the imports known to exist."""
    eager = import_graph()
    assert {"trdata", "trdata.loader", "trdata.sources", "trdata.sources.packed", "trdata._progress"} <= set(
        eager
    )
    assert "trdata.loader" in eager["trdata"]
    assert "trdata._progress" in eager["trdata.sources.packed"]
    assert "trdata.sources.base" in eager["trdata.sources.shards"]
    assert "trdata" in import_graph(lazy=True)["trdata._bench"]  # its lazy `import trdata`


def test_no_import_circle_at_module_level() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_no_import_circle_counting_lazy_imports() -> None:
    cycle = find_cycle(import_graph(lazy=True))
    assert cycle is None, " -> ".join(cycle or [])


def test_the_check_finds_the_old_progress_bar_circle(tmp_path: Path) -> None:
    """The layout before this test existed, in miniature: __init__ imports packed, pack() imports the bench
    harness's ProgressBar, and the harness imports trdata."""
    pkg = tmp_path / "trdata"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .packed import pack\n")
    (pkg / "packed.py").write_text("def pack():\n    from ._bench import ProgressBar\n")
    (pkg / "_bench.py").write_text("class ProgressBar: ...\n\ndef run():\n    import trdata\n")
    assert find_cycle(import_graph(pkg)) is None  # module level: no circle
    assert find_cycle(import_graph(pkg, lazy=True)) == ["trdata", "trdata.packed", "trdata._bench", "trdata"]


@pytest.mark.parametrize("module", sorted(module_names()))
def test_each_module_imports_on_its_own(module: str) -> None:
    """``python -c "import trdata.X"`` in a fresh interpreter (an import circle fails here with ImportError)."""
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
