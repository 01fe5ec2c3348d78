"""A GGUF's weights per tensor-parallel rank, each tensor at its own type, as vllm-gguf-plugin holds them in vLLM.

A llama.cpp quant mixes tensor types (``Q4_K_M``: Q4_K, Q6_K for ``output`` and some ``ffn_down``, Q5_0/Q8_0 row
fallbacks, F32 norms), so one type's bytes per value does not size it. vllm-gguf-plugin (0.0.5) keeps a quantized
tensor's GGUF blocks as they are in the file (its ``GGUFLinearMethod`` / MoE method: bytes = the file's bytes, split
as vLLM splits the parameter), and builds a layer whose tensors are F32, F16 or BF16 unquantized, in the model dtype
(``GGUFWeightsAdapter.get_unquantized_modules``); our adapter hands the tensors it dequantizes
(:data:`~sparse_mla.vllm_plugin.gguf_adapter.DEQUANTIZED`: ``attn_k_b``/``attn_v_b`` joined into ``kv_b_proj``, the
indexer's) over in the model dtype too.

Each vLLM parameter that the checkpoint's quantization covers (the layers vLLM builds with a quantization config, the
embeddings and ``lm_head``: :class:`~sparse_mla.diagnose.meta_model.Param`) is sized from the GGUF tensors it loads:
GGUF name -> the name vLLM loads (our adapter's map, gguf-py's ``TensorNameMap``) -> the parameter (vLLM's own
renames, :func:`~sparse_mla.diagnose.meta_model.checkpoint_renames`). Its bytes on one rank are its values on that
rank times the bytes per value of its tensors together (``sum(bytes) / sum(values)``; a parameter vLLM splits takes
the same share of every tensor it joins). The multi-token-prediction block's tensors load into no parameter of the main
model and are not counted (as the memory stage does not count that layer).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..gguf.types import UNQUANTIZED_TYPES


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of the GGUF as vLLM will hold it."""

    name: str            # GGUF name, e.g. blk.3.ffn_down_exps.weight
    loaded_as: str       # the name vLLM's load_weights takes it as (model.layers.3.mlp.experts.0.down_proj.weight)
    type: str            # gguf-py's GGMLQuantizationType name
    values: int
    nbytes: int          # in the file
    model_dtype: bool    # held unquantized in the model dtype (UNQUANTIZED_TYPES, or dequantized by our adapter)


def gguf_tensors(info: dict) -> tuple[GGUFTensor, ...]:
    """The tensors of a :func:`~sparse_mla.diagnose.gguf.read_gguf` record (its ``tensor_sizes`` and ``config``)."""
    from ..gguf.names import gguf_to_vllm_names, joined_name
    from ..vllm_plugin.gguf_adapter import DEQUANTIZED

    names = gguf_to_vllm_names(info["config"])
    return tuple(GGUFTensor(n, joined_name(names[n]) if n in names else n, t, v, b,
                            t in UNQUANTIZED_TYPES or n.endswith(DEQUANTIZED))
                 for n, t, v, b in info["tensor_sizes"])


def parameter_name(loaded_as: str, renames) -> str:
    """The vLLM parameter a tensor loaded as ``loaded_as`` goes into: the first of vLLM's ``renames``
    (``(checkpoint fragment, parameter fragment)``) whose fragment it holds, else the name itself."""
    for ckpt, param in renames:
        if ckpt in loaded_as:
            return loaded_as.replace(ckpt, param, 1)
    return loaded_as


def sources(rank, tensors) -> dict[str, list[GGUFTensor]]:
    """vLLM parameter name -> the GGUF tensors it loads, for the parameters of ``rank``
    (:class:`~sparse_mla.diagnose.meta_model.RankModel`)."""
    have = {p.name for p in rank.params}
    out: dict[str, list[GGUFTensor]] = {}
    for t in tensors:
        name = parameter_name(t.loaded_as, rank.renames)
        if name in have:
            out.setdefault(name, []).append(t)
    return out


def param_bytes(rank, tensors, fallback: tuple[int, int]) -> tuple[list[tuple[int | None, int]], list[str]]:
    """``((decoder layer or None, bytes) of every parameter of rank, in vLLM's order; the quantized parameters that no
    GGUF tensor loads)``. A parameter the quantization covers is sized from its tensors (module docstring); one
    without tensors at ``fallback`` ``(values, bytes)`` per block (the file type's) and named in the second list; the
    rest as vLLM holds them."""
    by_param = sources(rank, tensors)
    out, missing = [], []
    for p in rank.params:
        if not (p.quantized or p.embedding):
            out.append((p.layer, p.nbytes))
            continue
        ts = by_param.get(p.name)
        if not ts:
            missing.append(p.name)
            out.append((p.layer, p.numel * fallback[1] // fallback[0]))
            continue
        per_value = p.nbytes / p.numel              # the model dtype's bytes, as vLLM allocates this parameter
        held = sum(t.values * per_value if t.model_dtype else t.nbytes for t in ts)
        out.append((p.layer, round(p.numel * held / sum(t.values for t in ts))))
    return out, missing
