"""sparse_mla.gguf.dequantize: the tensors the weights adapter dequantizes, ``kv_b_proj`` as ``attn_k_b`` and
``attn_v_b`` joined."""
from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.gguf.dequantize import dequantized_weights  # noqa: E402
from sparse_mla.gguf.names import gguf_to_vllm_names  # noqa: E402
from sparse_mla.vllm_plugin.gguf_adapter import DEQUANTIZED  # noqa: E402

pytestmark = [pytest.mark.gguf, pytest.mark.every_line]


def test_dequantized_kv_b_is_k_b_and_v_b_joined(q4k_gguf):
    import torch

    out, cfg, state, r = q4k_gguf
    mapping = gguf_to_vllm_names(cfg)
    names = {g: h for g, h in mapping.items() if g.endswith(DEQUANTIZED)}
    got = dict(dequantized_weights([str(out / "model-Q4_K.gguf")], names, cfg, torch.float32))
    by = {t.name: t for t in r.tensors}
    nh, nope, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    for i in range(cfg["num_hidden_layers"] + 1):
        k_b = gguf.quants.dequantize(by[f"blk.{i}.attn_k_b.weight"].data, by[f"blk.{i}.attn_k_b.weight"].tensor_type)
        v_b = gguf.quants.dequantize(by[f"blk.{i}.attn_v_b.weight"].data, by[f"blk.{i}.attn_v_b.weight"].tensor_type)
        want = torch.cat([torch.from_numpy(k_b.reshape(nh, -1, nope)).transpose(1, 2),
                          torch.from_numpy(v_b.reshape(nh, v, -1))], dim=1).reshape(nh * (nope + v), -1)
        kv = got[f"model.layers.{i}.self_attn.kv_b_proj.weight"]
        assert torch.equal(kv, want)
        ref = state[f"model.layers.{i}.self_attn.kv_b_proj.weight"].float()
        assert kv.shape == ref.shape and (kv - ref).abs().max() < ref.abs().max() / 8   # 4/5-bit, same layout
        for leaf in ("wk", "weights_proj"):
            assert f"model.layers.{i}.self_attn.indexer.{leaf}.weight" in got
        # wq_b too: vllm-gguf-plugin 0.0.5 cannot load a GGUF tensor into vLLM 0.26's ReplicatedLinear (H200 run)
        wq_b = by[f"blk.{i}.indexer.attn_q_b.weight"]
        assert torch.equal(got[f"model.layers.{i}.self_attn.indexer.wq_b.weight"],
                           torch.from_numpy(gguf.quants.dequantize(wq_b.data, wq_b.tensor_type)))
