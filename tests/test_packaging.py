"""The install beside a user's own vLLM: the built wheel's metadata (a core without the workbook's Jupyter stack and
with no torch pin of ours, the workbook as an extra, the plugin's entry point), and the plugin and ``sparse-mla
diagnose`` working in a process where the workbook extra's modules cannot be imported."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
WORKBOOK_ONLY = ("jupyterlab", "papermill", "nbval", "pandas", "matplotlib", "nbformat", "nbclient")


@pytest.fixture(scope="module")
def wheel_metadata(module_tmp):
    """(METADATA message, entry_points.txt) of a wheel built from a copy of the sources (nothing written here)."""
    src = module_tmp("src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "lib", src / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = module_tmp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(out), str(src)], check=True, capture_output=True, text=True, timeout=300)
    (whl,) = out.glob("sparse_mla_workbook-*.whl")
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        eps = next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
        return Parser().parsestr(z.read(meta).decode()), z.read(eps).decode()


def _requirements(meta):
    """{extra or None: {name: specifier}} from Requires-Dist."""
    out: dict = {}
    for line in meta.get_all("Requires-Dist") or []:
        r = Requirement(line)
        extra = None
        if r.marker is not None:
            extra = next(e for e in ("workbook", "pinned", "test", "gguf") if r.marker.evaluate({"extra": e}))
        out.setdefault(extra, {})[r.name.lower()] = str(r.specifier)
    return out


def test_core_requirements_hold_no_jupyter_stack_and_no_torch_pin(wheel_metadata):
    from packaging.specifiers import SpecifierSet

    from sparse_mla.vllm_lines import TESTED_LINES

    reqs = _requirements(wheel_metadata[0])
    core = reqs[None]
    assert not set(WORKBOOK_ONLY) & set(core), sorted(set(WORKBOOK_ONLY) & set(core))
    assert core["torch"] == "" and core["triton"] == ""          # vLLM's pins rule
    spec = SpecifierSet(core["vllm"])                             # spans the tested lines, and no line past them
    lines = sorted(TESTED_LINES, key=lambda v: tuple(map(int, v.split("."))))
    assert all(f"{line}.0" in spec for line in lines) and f"{lines[0]}.0" == min(s.version for s in spec)
    last = tuple(map(int, lines[-1].split(".")))
    assert f"{last[0]}.{last[1] + 1}.0" not in spec and f"{last[0]}.{last[1]}.9" in spec
    assert {"jupyterlab", "papermill", "nbval", "pandas", "matplotlib"} <= set(reqs["workbook"])
    assert not {"vllm", "torch", "triton"} & set(reqs["workbook"])   # the hint to install it never re-pins vLLM
    assert reqs["pinned"] == {"vllm": "==0.26.0", "torch": "==2.11.0", "triton": "==3.6.0"}
    assert set(wheel_metadata[0].get_all("Provides-Extra")) == {"workbook", "pinned", "test", "gguf"}
    assert reqs["gguf"] == {"gguf": "==0.19.0", "vllm-gguf-plugin": "==0.0.5"}   # never re-pins vLLM or torch


def test_wheel_declares_the_vllm_plugin_entry_point(wheel_metadata):
    eps = wheel_metadata[1]
    assert "[vllm.general_plugins]\ntriton_mla_sparse = sparse_mla.vllm_plugin:register" in eps
    assert "sparse-mla = sparse_mla.cli:main" in eps


_WITHOUT_EXTRAS = r"""
import json, sys
BLOCKED = sys.argv[1].split(",")
for name in BLOCKED:   # as if not installed: `import` raises ModuleNotFoundError, importlib.util.find_spec gives None
    sys.modules[name] = None
import sparse_mla.vllm_plugin
from sparse_mla import cli
results = {"diagnose": cli.main(["diagnose", "--capability", "12.0", "--kv-cache-dtype", "bfloat16",
                                 "--with-plugin", "--json"])}
sys.stdout.flush()
for name, argv in (("matrix", ["diagnose", "--matrix"]), ("run", ["run", "--only", "01"]),
                   ("bench", ["bench", "kernel"])):
    results[name] = cli.main(argv)
loaded = sorted(m for m in BLOCKED if sys.modules.get(m) is not None)
print("RESULTS " + json.dumps({"rc": results, "loaded": loaded}))
"""


@pytest.mark.slow   # a fresh venv without the workbook extra (about 12 s)
def test_plugin_and_diagnose_work_without_the_workbook_extra(tmp_path):
    """What a serving environment has: vLLM and the core, none of the workbook's modules. The plugin imports, a
    diagnosis runs with it, and each workbook command says in one line which extra to install."""
    script = tmp_path / "without_extras.py"
    script.write_text(_WITHOUT_EXTRAS)
    p = subprocess.run([sys.executable, str(script), ",".join(WORKBOOK_ONLY + ("IPython", "ipykernel"))],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert p.returncode == 0 and last, p.stderr[-3000:]
    out = json.loads(last[-1].removeprefix("RESULTS "))
    record = json.loads(p.stdout.split("RESULTS ")[0])
    assert out["rc"]["diagnose"] == 0 and record["selected"] == "TRITON_MLA_SPARSE"
    assert out["loaded"] == []
    assert out["rc"]["matrix"] == out["rc"]["run"] == out["rc"]["bench"] == 2
    errors = [ln for ln in p.stderr.splitlines() if ": error: " in ln]
    for cmd, missing in (("diagnose", "pandas, matplotlib"), ("run", "papermill, nbformat, nbclient"),
                         ("bench", "pandas, matplotlib")):
        assert any(ln.startswith(f"sparse-mla {cmd}: error: ") and f"needs the workbook extra ({missing}" in ln
                   and "pip install 'sparse-mla-workbook[workbook]'" in ln for ln in errors), (cmd, errors)
