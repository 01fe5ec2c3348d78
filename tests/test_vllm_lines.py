"""``sparse_mla.vllm_lines``: which tested vLLM line a version belongs to."""
from __future__ import annotations

import pytest

from sparse_mla import vllm_lines
from sparse_mla.vllm_lines import TESTED_LINES, current_line, line_of


@pytest.mark.parametrize("version, line", [("0.26.0", "0.26"), ("0.26.3", "0.26"), ("0.33.0", "0.33"),
                                           ("0.33.1rc1", "0.33"), ("0.33.0rc1", None), ("0.27.0", None), ("0.32.9", None),
                                           ("0.34.0", None), ("0.25.2", None), ("not-a-version", None)])
def test_line_of(version, line):
    assert line_of(version) == line


def test_the_installed_vllm_is_on_a_tested_line():
    import vllm

    assert current_line() == line_of(vllm.__version__) and current_line() in TESTED_LINES


def test_tested_text_names_every_line():
    assert vllm_lines.tested_text() == "vLLM 0.26.x, 0.33.x"


def test_the_environment_keeps_the_torch_its_vllm_pins():
    """Installing this package beside a vLLM leaves vLLM's torch: the installed torch is the one vLLM's own metadata
    pins (``Requires-Dist: torch==...``), on either line."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    pins = [Requirement(r) for r in requires("vllm") or [] if Requirement(r).name == "torch" and Requirement(r).marker
            is None]
    assert pins, "vLLM declares no torch requirement"
    assert all(version("torch").split("+")[0] in p.specifier for p in pins), (version("torch"), pins)
