"""sparse_mla.capability: the one capability parser and where a capability is read from."""
from __future__ import annotations

import collections

import pytest
import torch

from sparse_mla.capability import as_capability, device_capability, vllm_capability
from sparse_mla.errors import UserInputError


def test_sequences_and_text():
    DeviceCapability = collections.namedtuple("DeviceCapability", "major minor")   # vLLM's shape
    assert as_capability((12, 0)) == as_capability([12, 0]) == as_capability(DeviceCapability(12, 0)) == (12, 0)
    assert as_capability("8.9", text=True) == (8, 9) and as_capability(" 0.0 ", text=True) == (0, 0)


@pytest.mark.parametrize("bad", [(9,), (12, 10), (-1, 0), (100, 0), (True, False), (8.0, 0), None, 8, "12",
                                 "\uff11\uff12.\uff10", bytearray(b"\x0c\x00"), {12: "a", 0: "b"}, {9, 0}, range(2),
                                 iter((12, 0)), "12.0.1", "012.0"])
def test_refused_with_what_is_accepted(bad):
    with pytest.raises(UserInputError, match=r"capability .* is not accepted; accepted: \(major, minor\) integers"):
        as_capability(bad, text=True)


def test_numpy_integers_count_and_long_values_are_cut():
    import numpy as np

    assert as_capability((np.int64(12), np.int64(0))) == (12, 0)
    with pytest.raises(UserInputError) as e:
        as_capability(np.zeros((2, 2), dtype=int))
    assert "\n" not in str(e.value)
    with pytest.raises(UserInputError) as e:
        as_capability([0] * 5000)
    assert len(str(e.value)) < 200


def test_text_only_where_asked():
    with pytest.raises(UserInputError, match="capability '9.0' is not accepted") as e:
        as_capability("9.0")
    assert "'major.minor'" not in str(e.value)


def test_where_it_is_read_from_on_this_machine():
    assert device_capability(torch.device("cpu")) is None
    if not torch.cuda.is_available():
        assert vllm_capability() is None          # vLLM's UnspecifiedPlatform here
