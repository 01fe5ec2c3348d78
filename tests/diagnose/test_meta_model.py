"""``sparse_mla.diagnose.meta_model``: its default-dtype guard around vLLM's model builds."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")


def test_default_dtype_is_restored_when_the_build_raises():
    """vLLM's ``set_default_torch_dtype`` restores torch's default dtype only after a clean exit; the diagnosis'
    ``default_dtype`` restores it also when vLLM's build raises (a refused model left bf16 as the process default)."""
    from vllm.utils.torch_utils import set_default_torch_dtype

    from sparse_mla.diagnose.meta_model import default_dtype

    assert torch.get_default_dtype() == torch.float32
    with pytest.raises(RuntimeError):
        with default_dtype(torch.bfloat16):
            assert torch.get_default_dtype() == torch.bfloat16
            raise RuntimeError("vLLM refused the model")
    assert torch.get_default_dtype() == torch.float32
    try:                  # why the guard exists (if vLLM restores it one day, the guard is merely redundant)
        with pytest.raises(RuntimeError):
            with set_default_torch_dtype(torch.bfloat16):
                raise RuntimeError("vLLM refused the model")
        left = torch.get_default_dtype()
    finally:
        torch.set_default_dtype(torch.float32)
    assert left in (torch.bfloat16, torch.float32)
