"""The public surface: curated __all__, and the _core.pyi stub matches the native module."""

from __future__ import annotations

import ast
from pathlib import Path

import trdata
from trdata import _core


def test_all_is_curated_and_importable():
    for name in trdata.__all__:
        assert hasattr(trdata, name), name
    assert trdata.__version__ == _core.__version__


def _stub_members() -> dict[str, set[str]]:
    tree = ast.parse((Path(trdata.__file__).parent / "_core.pyi").read_text())
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} - {"__init__"}
        elif isinstance(node, ast.FunctionDef):
            members[node.name] = set()
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            members[node.target.id] = set()
    return members


def test_stub_matches_native_module():
    stub = _stub_members()
    native = {n for n in dir(_core) if not n.startswith("_") or n == "__version__"}
    native -= {"trdata"}
    assert set(stub) == native, f"stub-only: {set(stub) - native}, native-only: {native - set(stub)}"
    for cls, methods in stub.items():
        obj = getattr(_core, cls)
        for m in methods:
            assert hasattr(obj, m), f"{cls}.{m} in the stub but not in the module"
