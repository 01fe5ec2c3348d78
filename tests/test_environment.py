"""environment.yml says the same as pyproject.toml: the core requirements with the pinned extra's versions in place of
their ranges, the workbook and test extras, the package itself, and a Python that requires-python admits."""
from __future__ import annotations

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]


def _norm(reqs):
    return {Requirement(r).name.lower().replace("_", "-"): str(Requirement(r).specifier) for r in reqs}


def test_environment_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    editable = [r for r in pip_section if r.startswith("-e")]
    pins = [r for r in pip_section if not r.startswith("-e")]
    assert editable == ["-e ."]
    extras = project["optional-dependencies"]
    want = {**_norm(project["dependencies"]), **_norm(extras["workbook"]), **_norm(extras["pinned"]),
            **_norm(extras["test"])}
    assert _norm(pins) == want
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert SpecifierSet(project["requires-python"]).contains(python.split("=", 1)[1] + ".0")


def test_pinned_extra_matches_the_gpu_image():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    deps = _norm(extras["pinned"])
    assert deps["vllm"] == "==0.26.0" and deps["torch"] == "==2.11.0" and deps["triton"] == "==3.6.0"
