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


@pytest.mark.parametrize("bad", [(9,), (12, 10), (-1, 0), (100, 0), (True, False), (8.0, 0), None, 8, "12"])
def test_refused_with_what_is_accepted(bad):
    with pytest.raises(UserInputError, match=r"capability .* is not accepted; accepted: \(major, minor\) integers"):
        as_capability(bad, text=True)


def test_text_only_where_asked():
    with pytest.raises(UserInputError, match="capability '9.0' is not accepted") as e:
        as_capability("9.0")
    assert "'major.minor'" not in str(e.value)


def test_where_it_is_read_from_on_this_machine():
    assert device_capability(torch.device("cpu")) is None
    if not torch.cuda.is_available():
        assert vllm_capability() is None          # vLLM's UnspecifiedPlatform here
