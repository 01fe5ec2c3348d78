"""``sparse_mla.vllm_lines``: which tested vLLM line a version belongs to."""
from __future__ import annotations

import pytest

from sparse_mla import vllm_lines
from sparse_mla.vllm_lines import TESTED_LINES, current_line, line_of

pytestmark = pytest.mark.every_line


@pytest.mark.parametrize("version, line", [("0.26.0", "0.26"), ("0.26.3", "0.26"), ("0.33.0", "0.33"),
                                           ("0.33.1rc1", "0.33"), ("0.33.0rc1", None), ("0.27.0", None), ("0.32.9", None),
                                           ("0.34.0", "0.34"), ("0.34.2", "0.34"), ("0.35.0", None), ("0.25.2", None),
                                           ("not-a-version", None)])
def test_line_of(version, line):
    assert line_of(version) == line


def test_the_installed_vllm_is_on_a_tested_line():
    import vllm

    assert current_line() == line_of(vllm.__version__) and current_line() in TESTED_LINES


def test_tested_text_names_every_line():
    assert vllm_lines.tested_text() == "vLLM 0.26.x, 0.33.x, 0.34.x"


def test_the_environment_keeps_the_torch_its_vllm_pins():
    """Installing this package beside a vLLM leaves vLLM's torch: the installed torch is the one vLLM's own metadata
    pins (``Requires-Dist: torch==...``), on either line."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    pins = [Requirement(r) for r in requires("vllm") or [] if Requirement(r).name == "torch" and Requirement(r).marker
            is None]
    assert pins, "vLLM declares no torch requirement"
    assert all(version("torch").split("+")[0] in p.specifier for p in pins), (version("torch"), pins)


def test_the_line_policy_holds_against_the_readmes_commands():
    """CI_LINES and NOT_IN_CI split TESTED_LINES between them, with a reason each; the README's test commands (which
    .ci/run runs) install exactly one vLLM per CI line beyond the pinned one, at a version of that line, and none of
    the lines left out; the pinned line is the `pinned` extra's."""
    import re
    import runpy
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert set(vllm_lines.CI_LINES) | set(vllm_lines.NOT_IN_CI) == set(TESTED_LINES)
    assert not set(vllm_lines.CI_LINES) & set(vllm_lines.NOT_IN_CI)
    assert all(why.strip() for why in [*vllm_lines.CI_LINES.values(), *vllm_lines.NOT_IN_CI.values()])
    cmds = runpy.run_path(str(root / ".ci" / "readme_commands.py"))["commands"]((root / "README.md").read_text())
    installed = [line_of(v) for c in cmds for v in re.findall(r"'vllm==([0-9][^']*)'", c)]
    pinned = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["pinned"]
    pinned_line = line_of(next(r.split("==")[1] for r in pinned if r.startswith("vllm==")))
    assert sorted([pinned_line, *installed]) == sorted(vllm_lines.CI_LINES), (pinned_line, installed)


def test_the_vllm_034_requirements_are_vllms_but_flashinfer_and_ours():
    """.ci/vllm034-requirements.txt (the README's 0.34 environment): every requirement of this package's core (less
    vLLM), workbook and test extras; and, where vLLM 0.34 is the installed line, vLLM's own requirements as its
    metadata lists them, but for flashinfer-python, the one pin the package index cannot serve."""
    import tomllib
    from importlib.metadata import requires
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    lines = [ln.split("#")[0].strip() for ln in (root / ".ci" / "vllm034-requirements.txt").read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    ours = [r for r in project["dependencies"] if not r.startswith("vllm")]
    ours += project["optional-dependencies"]["workbook"] + project["optional-dependencies"]["test"]
    assert [r for r in ours if r not in lines] == []
    if current_line() == "0.34":
        vllms = [r for r in requires("vllm") if "extra ==" not in r]
        differ = sorted(set(vllms) ^ set(lines[:len(vllms)]))
        assert differ == ["flashinfer-python==0.7.3", "flashinfer-python==0.7.4"], differ


def test_the_pins_are_the_installed_packages():
    """TORCH_PINS and TRITON_PINS against the installed metadata: the installed vLLM requires its line's torch, that
    torch the Triton TRITON_PINS names for it (on Linux); every pinned torch has a Triton pin."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    torch = [Requirement(r) for r in requires("vllm") or [] if Requirement(r).name == "torch"]
    assert [str(r.specifier) for r in torch if r.marker is None] == [vllm_lines.TORCH_PINS[current_line()]]
    triton = [Requirement(r) for r in requires("torch") or [] if Requirement(r).name == "triton"]
    assert [str(r.specifier) for r in triton] == [vllm_lines.TRITON_PINS[version("torch").split("+")[0]]]
    assert {p.lstrip("=") for p in vllm_lines.TORCH_PINS.values()} <= set(vllm_lines.TRITON_PINS)
    assert set(vllm_lines.TORCH_PINS) == set(TESTED_LINES)


@pytest.mark.parametrize("vllm, torch, triton, says", [
    ("0.26.0", "2.11.0+cu130", "3.6.0", None), ("0.33.0", "2.14.0+cu130", "3.8.0", None),
    ("0.34.0", "2.14.0", "3.8.1", None),                  # torch 2.14's triton~=3.8.0
    ("0.26.0", "0.1.0", "3.6.0", "torch '0.1.0' beside vLLM 0.26.0; accepted: torch==2.11.0"),
    ("0.33.0", "2.11.0+cu130", "3.6.0", "accepted: torch==2.14.0"),
    ("0.26.0", "2.11.0+cu130", "9.9.9", "triton '9.9.9' beside torch 2.11.0+cu130; accepted: triton==3.6.0"),
    ("0.27.0", "0.1.0", "9.9.9", None),                   # no tested line: named by records check elsewhere
])
def test_pin_problems(vllm, torch, triton, says):
    got = vllm_lines.pin_problems(vllm, torch, triton)
    assert got == [] if says is None else (len(got) == 1 and says in got[0]), got
