"""The floors of the package (docs/architecture.md), kept true: import-linter's layers contract from pyproject.toml
(each floor imports only the floors below it; function-level imports count), shown able to fail on a planted upward
import, and no private name imported from another subpackage."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "lib" / "sparse_mla"


def _lint(cwd: Path, lib: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(lib)}
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_floors_contract_is_kept():
    p = _lint(ROOT, ROOT / "lib")
    assert p.returncode == 0 and "floors: each step imports only the floors below it KEPT" in p.stdout, p.stdout[-2000:]


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "lib", tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    engine = tmp_path / "lib" / "sparse_mla" / "launch" / "engine.py"
    engine.write_text(engine.read_text() + "\n\ndef _planted():\n    from ..bench import common  # noqa: F401\n")
    p = _lint(tmp_path, tmp_path / "lib")
    assert p.returncode != 0 and "BROKEN" in p.stdout and "sparse_mla.launch.engine -> sparse_mla.bench" in p.stdout


def _subpackage(parts: tuple[str, ...]) -> str | None:
    return parts[1] if len(parts) > 2 else None       # sparse_mla.<sub>.<module>; None for the ground floor


def test_no_private_name_is_imported_from_another_subpackage():
    bad = []
    for f in sorted(LIB.rglob("*.py")):
        parts = f.relative_to(LIB.parent).with_suffix("").parts
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = list(parts[:-1])[:len(parts) - node.level]
            target = tuple(base + (node.module.split(".") if node.module else []))
            here, there = _subpackage(parts), (target[1] if len(target) > 1 else None)
            bad += [f"{'.'.join(parts)}: from {'.'.join(target)} import {a.name}" for a in node.names
                    if a.name.startswith("_") and there != here and (target + (a.name,))[1] != a.name]
    assert bad == []


def _cycles(lib: Path) -> list[tuple[str, str]]:
    """Pairs of modules that import each other, directly or through others (grimp, import-linter's graph; function-
    level and TYPE_CHECKING imports count)."""
    code = ("import grimp, json; g = grimp.build_graph('sparse_mla'); print(json.dumps(sorted({tuple(sorted((m, n))) "
            "for m in g.modules for n in g.find_modules_directly_imported_by(m) "
            "if g.chain_exists(importer=n, imported=m)})))")
    import json

    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(lib)}, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return [tuple(c) for c in json.loads(p.stdout)]


def test_no_module_imports_another_that_imports_it(tmp_path):
    """No import circle in the package (issue 48 item 5: diagnose.gguf <-> diagnose.request, kernels.aot <->
    kernels.launch_plan and workbook.proof <-> workbook.status were); a planted one is found."""
    assert _cycles(ROOT / "lib") == []
    shutil.copytree(ROOT / "lib", tmp_path / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    aot = tmp_path / "lib" / "sparse_mla" / "kernels" / "aot.py"
    aot.write_text(aot.read_text() + "\n\ndef _planted():\n    from .launch_plan import LaunchConfig  # noqa: F401\n")
    assert _cycles(tmp_path / "lib") == [("sparse_mla.kernels.aot", "sparse_mla.kernels.launch_plan")]


#: The house rule of one idea per function: no function of the package past this many lines (its docstring included)
MAX_FUNCTION_LINES = 80


def _long_functions(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_is_longer_than_80_lines(tmp_path):
    assert _long_functions(LIB) == []
    planted = tmp_path / "sparse_mla" / "long.py"                 # the check sees a long function where there is one
    planted.parent.mkdir()
    planted.write_text("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert _long_functions(planted.parent) == ["sparse_mla/long.py:1 f (81 lines)"]
