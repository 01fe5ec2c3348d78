"""A GLM-5 GGUF's tensors back as float arrays in the checkpoint's layout: gguf-py's dequantization
(``gguf.quants.dequantize``) and the inverse of llama.cpp's converter (:mod:`sparse_mla.gguf.writer`): ``attn_k_b``
[heads, kv_lora_rank, nope] (transposed back per head) and ``attn_v_b`` [heads, v, kv_lora_rank] joined into
``kv_b_proj`` [heads * (nope + v), kv_lora_rank] (:func:`join_kv_b`), stacked experts split per expert,
``e_score_correction.bias`` renamed back (:func:`from_converter_tensors`). The reference forward reads a GGUF through
it (:mod:`sparse_mla.launch.gguf_reader`), and vllm-gguf-plugin's weights adapter hands vLLM the tensors it
dequantizes through it (:func:`dequantized_weights`).
"""
from __future__ import annotations

from .names import KV_B


def join_kv_b(k_b, v_b, num_heads: int):
    """``kv_b_proj`` [heads * (nope + v), kv_lora_rank] from llama.cpp's split halves (numpy arrays):
    ``attn_k_b`` [heads, kv_lora_rank, nope] (transposed back per head) and ``attn_v_b`` [heads, v, kv_lora_rank] --
    the inverse of ``DeepseekV2Model.modify_tensors`` (llama.cpp ``convert_hf_to_gguf.py``)."""
    import numpy as np

    k = k_b.reshape(num_heads, -1, k_b.shape[-1]).transpose(0, 2, 1)     # [nh, nope, kv_lora_rank]
    v = v_b.reshape(num_heads, -1, v_b.shape[-1])                        # [nh, v, kv_lora_rank]
    return np.ascontiguousarray(np.concatenate([k, v], axis=1).reshape(-1, k.shape[-1]))


def dequantize(tensor):
    """A gguf-py ``ReaderTensor`` dequantized by gguf-py to a float32 numpy array in PyTorch's row-major shape."""
    import gguf

    shape = tuple(int(s) for s in reversed(tensor.shape))
    return gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)



def from_converter_tensors(cfg: dict, items) -> dict:
    """``{Hugging Face name: float32 tensor}`` in the checkpoint's layout from ``(converter-form name, numpy array)``
    pairs (llama.cpp's layout, :func:`sparse_mla.gguf.writer.converter_tensors`): stacked experts split per
    expert, ``k_b_proj`` / ``v_b_proj`` joined into ``kv_b_proj``, ``e_score_correction.bias`` renamed back."""
    import numpy as np
    import torch

    state: dict[str, torch.Tensor] = {}
    halves: dict[str, dict[str, np.ndarray]] = {}
    for hf, w in items:
        w = np.asarray(w, dtype=np.float32)
        if hf.endswith(("k_b_proj.weight", "v_b_proj.weight")):
            halves.setdefault(hf.rsplit(".", 2)[0], {})[hf.rsplit(".", 2)[1][0]] = w
        elif ".mlp.experts." in hf:      # stacked [experts, out, in]
            prefix, proj = hf.split(".mlp.experts.")
            for e in range(w.shape[0]):
                state[f"{prefix}.mlp.experts.{e}.{proj}"] = torch.from_numpy(np.ascontiguousarray(w[e]))
        else:
            state[hf.replace("e_score_correction.bias", "e_score_correction_bias")] = torch.from_numpy(w.copy())
    for prefix, kv in halves.items():
        state[prefix + ".kv_b_proj.weight"] = torch.from_numpy(join_kv_b(kv["k"], kv["v"],
                                                                         cfg["num_attention_heads"]))
    return state


def dequantized_weights(files, names: dict[str, str], cfg: dict, dtype):
    """``(vLLM name, tensor in dtype)`` for the GGUF tensors of ``names`` (GGUF -> converter-form vLLM name),
    dequantized by gguf-py: ``indexer.attn_k``/``indexer.proj`` as they are, ``attn_k_b``/``attn_v_b`` of each layer
    joined into ``kv_b_proj`` (per head: the k part transposed back, then v)."""
    import gguf
    import numpy as np
    import torch

    halves: dict[str, dict[str, np.ndarray]] = {}
    for f in files:
        for t in gguf.GGUFReader(f).tensors:
            if t.name not in names:
                continue
            w, hf = dequantize(t), names[t.name]
            if t.name.endswith(("attn_k_b.weight", "attn_v_b.weight")):
                halves.setdefault(hf.rsplit(".", 2)[0], {})["k" if "k_b" in t.name else "v"] = w
                continue
            yield hf, torch.from_numpy(np.ascontiguousarray(w)).to(dtype)
    for prefix, kv in halves.items():
        kv_b = join_kv_b(kv["k"], kv["v"], cfg["num_attention_heads"])
        yield prefix + KV_B, torch.from_numpy(kv_b).to(dtype)
