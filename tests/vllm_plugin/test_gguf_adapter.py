"""The glm-dsa weights adapter for vllm-gguf-plugin: picked for glm_moe_dsa and yielding every parameter; the plugin's
Triton dequantization (under the interpreter) against gguf-py's numpy dequantization; vLLM's GLM-5 model never ties
its LM head (why the adapter refuses a GGUF without one). The name map, the config mapping and the checks it uses are
tests/gguf's."""
from __future__ import annotations

import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.launch.checkpoint import expected_weight_shapes, load_checkpoint, make_checkpoint  # noqa: E402
from sparse_mla.vllm_plugin import gguf_adapter as ga  # noqa: E402

pytestmark = [pytest.mark.gguf, pytest.mark.every_line]

try:
    import vllm_gguf_plugin  # noqa: F401
    PLUGIN = None
except ImportError as e:
    PLUGIN = f"vllm-gguf-plugin is not installed (pip install '.[gguf]'): {e}"


@pytest.fixture(scope="module")
def ckpt(module_tmp):
    out = make_checkpoint(module_tmp("ga") / "ck", index_topk=256, mtp=True, seed=5, gguf=("Q4_K",))
    cfg, state = load_checkpoint(out)
    return out, cfg, state, gguf.GGUFReader(str(out / "model-Q4_K.gguf"))


@pytest.mark.skipif(PLUGIN is not None, reason=PLUGIN or "")
def test_adapter_is_picked_for_glm_moe_dsa_and_yields_every_parameter(ckpt):
    import torch
    from types import SimpleNamespace

    from transformers import AutoConfig
    from vllm_gguf_plugin.weights_adapter import get_weights_adapter

    out, cfg, state, _ = ckpt
    assert ga.register_adapter()
    hf = AutoConfig.for_model("glm_moe_dsa", **{k: v for k, v in cfg.items() if k != "model_type"})
    adapter = get_weights_adapter(hf)
    assert type(adapter).__name__ == "_GlmDsaGGUFAdapter"
    mc = SimpleNamespace(hf_config=hf, dtype=torch.bfloat16, trust_remote_code=False)
    spec = adapter.prepare_loading(str(out / "model-Q4_K.gguf"), mc)
    assert "model.layers.0.self_attn.kv_b_proj" in spec.unquantized_modules
    names = {n.replace(".qweight", ".weight") for n, _ in adapter.prepare_weights(mc) if "qweight_type" not in n}
    assert names == set(expected_weight_shapes(cfg))   # kv_b_proj joined; no k_b_proj / v_b_proj left over


@pytest.mark.skipif(PLUGIN is not None, reason=PLUGIN or "")
@pytest.mark.interpreter
def test_plugin_triton_dequant_equals_gguf_py(ckpt):
    import torch
    import triton
    from vllm_gguf_plugin.triton.dequantize.k_quant.q4_k import q4_k_dequantize_kernel
    from vllm_gguf_plugin.triton.dequantize.standard_quant.q5_0 import q5_0_dequantize_kernel
    from vllm_gguf_plugin.triton.dequantize.utils import TRITON_DEQUANT_BLOCK_SIZE

    kernels = {"Q4_K": q4_k_dequantize_kernel, "Q5_0": q5_0_dequantize_kernel}

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("runs the plugin's Triton kernels on CPU tensors (TRITON_INTERPRET=1)")
    smallest = {}
    for t in ckpt[3].tensors:   # the smallest tensor of each quantized type (the interpreter is slow)
        if t.tensor_type.name != "F32" and t.n_elements < getattr(smallest.get(t.tensor_type.name), "n_elements", 1e18):
            smallest[t.tensor_type.name] = t
    assert set(smallest) == {"Q4_K", "Q5_0"}
    for typ, t in smallest.items():
        data = np.ascontiguousarray(t.data.reshape(-1, t.data.shape[-1])[:16])   # 16 rows: the interpreter is slow
        rows, cols = data.shape[0], int(t.shape[0])
        ref = gguf.quants.dequantize(data, t.tensor_type).reshape(rows, cols)
        # the plugin's kernel as its run_dequantize_kernel launches it, minus that wrapper's CUDA-tensor check
        got = torch.empty((rows, cols), dtype=torch.float32)
        kernels[typ][(triton.cdiv(rows * cols, TRITON_DEQUANT_BLOCK_SIZE),)](
            torch.from_numpy(data), got, rows * cols, BLOCK_SIZE=TRITON_DEQUANT_BLOCK_SIZE)
        got = got.numpy()
        # the same fp16 scales times the same integers, in fp32: a few roundings of the largest value apart
        assert np.allclose(got, ref, rtol=0, atol=4 * 2.0**-23 * np.abs(ref).max()), (t.name, typ)


def test_vllms_glm5_model_never_ties_its_lm_head():
    """The fact behind gguf_adapter.UNTIED_LM_HEAD, read in vLLM's code: GLM-5's model class, as the registry resolves
    it here (no CUDA), is DeepseekV2ForCausalLM's subclass, whose constructor builds its own ParallelLMHead and never
    reads tie_word_embeddings. (vLLM 0.33 on a CUDA host resolves it to deepseek_v32's DeepseekV32ForCausalLM, not
    importable here: not checked by this test.)"""
    import inspect

    dsv2 = pytest.importorskip("vllm.model_executor.models.deepseek_v2")
    from vllm.model_executor.models.registry import ModelRegistry

    cls = ModelRegistry._try_load_model_cls("GlmMoeDsaForCausalLM")
    assert cls is not None and issubclass(cls, dsv2.DeepseekV2ForCausalLM)
    for klass in cls.__mro__[:cls.__mro__.index(dsv2.DeepseekV2ForCausalLM) + 1]:
        src = inspect.getsource(klass)
        assert "tie_word_embeddings" not in src and "tie_weights" not in src, klass
    assert "ParallelLMHead(" in inspect.getsource(dsv2.DeepseekV2ForCausalLM.__init__)
