"""vLLM 0.34's side of the plugin's line adapter (:mod:`sparse_mla.vllm_plugin.lines`): 0.33's, except where 0.34
changed what the plugin meets.

Read from vLLM 0.34.0's code against 0.33.0's: the sparse MLA base classes (``SparseMLACommonImpl.forward_mqa`` and
its ``_forward_mqa_kernel(q, kv_cache, topk_indices, valid_counts, *, layer, block_size, is_decode)``), the flat row
view and ``align_blocks_to_rows`` (``sparse_utils.py``), the metadata builder's use of ``has_deep_gemm``
(``mla/indexer.py``), ``pack_seq_triton`` in ``sparse_attn_indexer.py`` and the ``deepseek_v32`` path's ``fused_q``
and ``fused_norm_rope`` (``models/deepseek_v32/common/kernels.py``, unchanged) are 0.33's. What changed: DeepGEMM's
wrappers (``vllm/utils/deep_gemm.py``) take ``logits_dtype`` (float32 everywhere but SM100, whose bf16 logits the
indexer upcasts itself with ``as_fp32_logits``), and the indexer passes it by keyword
(``sparse_attn_indexer.py``). SM100's fused MQA-logits + top-k prefill kernel (``fused_mqa_topk``) is gated on the
SM100 family and never reached where the plugin's indexer runs.
"""
# No ``from __future__ import annotations``: the DeepGEMM adapters' signatures must equal vLLM's, annotations included.
import torch

from .v0_33 import (FP8_STORE_HOOKS, FP8_STORE_STAND_INS, KPOOL_DEEPGEMM_MODULE,  # noqa: F401
                    TRITON_FP8_MLA_CACHE_WRITE, ImplForward, compress_logits, customize_spec, fused_norm_rope, fused_q,
                    kernel_block_sizes)
from .v0_33 import deepgemm_adapters as deepgemm_adapters_033
from .v0_33 import __getattr__  # noqa: F401  (SparseMetadata: vLLM's own SparseMLACommonMetadata, on first use)

__all__ = ["SparseMetadata", "ImplForward", "customize_spec", "kernel_block_sizes", "deepgemm_adapters",
           "FP8_STORE_HOOKS", "FP8_STORE_STAND_INS", "TRITON_FP8_MLA_CACHE_WRITE", "KPOOL_DEEPGEMM_MODULE"]


def deepgemm_adapters(prefill, paged):
    """``(fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits)`` with 0.34's DeepGEMM wrapper signatures (0.33's plus
    ``logits_dtype``): 0.33's adapters (:func:`~sparse_mla.vllm_plugin.lines.v0_33.deepgemm_adapters`: the prefill
    logits compressed to the windowed layout, ``indices`` refused), their float32 logits cast to ``logits_dtype``."""
    mqa_033, paged_033 = deepgemm_adapters_033(prefill, paged)

    def fp8_fp4_mqa_logits(
        q: tuple[torch.Tensor, torch.Tensor | None],
        kv: tuple[torch.Tensor, torch.Tensor],
        weights: torch.Tensor,
        cu_seqlen_ks: torch.Tensor,
        cu_seqlen_ke: torch.Tensor,
        max_seqlen_k: int,
        logits_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        return _as(mqa_033(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, max_seqlen_k), logits_dtype)

    def fp8_fp4_paged_mqa_logits(
        q: tuple[torch.Tensor, torch.Tensor | None],
        kv_cache: torch.Tensor,
        weights: torch.Tensor,
        context_lens: torch.Tensor,
        block_tables: torch.Tensor,
        schedule_metadata: torch.Tensor,
        max_model_len: int,
        logits_dtype: torch.dtype = torch.float32,
        indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return _as(paged_033(q, kv_cache, weights, context_lens, block_tables, schedule_metadata, max_model_len,
                             indices), logits_dtype)

    return fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits


def _as(logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return logits if dtype == torch.float32 else logits.to(dtype)
