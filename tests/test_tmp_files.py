"""The tests' own disk use: a tier writes checkpoints of 0.2-0.7 GB each, and one tier that kept them all (about
15 GB) filled a CI machine's disk mid-run. Module-scoped fixtures write through ``module_tmp`` (removed when the
module ends), and pytest removes a passed test's ``tmp_path`` (``pyproject.toml``'s retention settings)."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module_fixtures_on_the_run_folder(path: Path) -> list[str]:
    """Names of ``scope="module"`` fixtures in ``path`` that take ``tmp_path_factory`` (their folders live to the
    run's end)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            scope = [k.value.value for k in getattr(dec, "keywords", []) if k.arg == "scope"
                     and isinstance(k.value, ast.Constant)]
            if scope == ["module"] and "tmp_path_factory" in [a.arg for a in node.args.args]:
                found.append(f"{path.relative_to(ROOT)}::{node.name}")
    return found


def test_no_module_fixture_keeps_its_files_to_the_end_of_the_run():
    bad = [n for p in sorted((ROOT / "tests").rglob("*.py")) for n in _module_fixtures_on_the_run_folder(p)
           if n != "tests/conftest.py::module_tmp"]
    assert bad == [], f"module-scoped fixtures writing through tmp_path_factory (use module_tmp): {bad}"


def test_the_finder_sees_such_a_fixture(tmp_path):
    (tmp_path / "tests").mkdir()
    f = tmp_path / "tests" / "test_x.py"
    f.write_text('import pytest\n@pytest.fixture(scope="module")\ndef ck(tmp_path_factory):\n    return 1\n')
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert _module_fixtures_on_the_run_folder(f) == ["tests/test_x.py::ck"]
    finally:
        ROOT = old


def test_passed_tests_leave_no_files():
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["tmp_path_retention_policy"] == "failed" and int(ini["tmp_path_retention_count"]) <= 1


def test_module_tmp_removes_its_folders_when_the_module_ends(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path)
    (tmp_path / "test_a.py").write_text('''
import pytest
SEEN = []
@pytest.fixture(scope="module")
def folder(module_tmp):
    d = module_tmp("ck")
    (d / "w.bin").write_bytes(b"0" * 1024)
    SEEN.append(d)
    return d
def test_uses(folder):
    assert folder.is_dir()
''')
    (tmp_path / "test_b.py").write_text('''
import test_a
def test_gone():
    assert test_a.SEEN and not test_a.SEEN[0].exists()
''')
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-o",
                        "addopts=", "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "base"), str(tmp_path)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
