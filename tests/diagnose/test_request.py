"""sparse_mla.diagnose.request: user input checked before vLLM is imported."""
from __future__ import annotations

import re

import pytest

from sparse_mla.diagnose.request import parse_capability, resolve
from sparse_mla.errors import UserInputError

pytestmark = pytest.mark.every_line


@pytest.mark.parametrize("cap", [(-1, 0), (12, -1), (12, 10), (100, 0), (10**6, 10**6), (True, False)])
def test_capability_tuples_out_of_range_are_refused_like_the_text(cap):
    """``"-1.0"`` / ``"12.10"`` are refused as text; the same values as a tuple were probed (a record for
    capability -1.0, or vLLM's ``assert 0 <= self.minor < 10`` reported as a config blocker)."""
    with pytest.raises(UserInputError, match=r"unknown capability .*accepted: \(major, minor\) with major 0-99"):
        parse_capability(cap)
    with pytest.raises(UserInputError, match="unknown capability"):
        resolve("glm-5", cap, "auto", 1, False)


def test_capability_tuples_in_range_are_accepted():
    assert parse_capability((12, 0)) == ((12, 0), None)
    assert parse_capability((8, 9)) == ((8, 9), None)
    assert parse_capability((7, 5)) == parse_capability("7.5") == ((7, 5), None)


@pytest.mark.parametrize("cap", ["0.0", "99.9", "8.5", "13.0", (4, 0), (9, 9)])
def test_a_capability_no_gpu_has_is_refused_naming_it(cap):
    """vLLM would answer for 0.0 or 99.9 as for any number: no GPU has them (LLVM's NVPTX list), so a typo is caught
    before vLLM runs."""
    shown = cap if isinstance(cap, str) else f"{cap[0]}.{cap[1]}"
    with pytest.raises(UserInputError, match=rf"capability {re.escape(shown)} is no NVIDIA GPU's; accepted: one of "
                                              r"2\.0, .*12\.1$"):
        parse_capability(cap)
