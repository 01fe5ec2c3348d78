"""vLLM 0.33's side of the plugin's line adapter (:mod:`sparse_mla.vllm_plugin.lines`).

0.33's sparse MLA base classes do more themselves (``vllm/model_executor/layers/attention/sparse_mla_attention.py``):
``SparseMLACommonMetadata`` is the metadata its builder fills (``decode_max_query_len`` and the rest), and
``SparseMLACommonImpl.forward_mqa`` converts the indexer's request-local top-k to *physical rows* -- through the block
stride (other layers' pages may lie between this cache's blocks), the index group of layers that share a top-k, and
DCP -- before calling the backend's ``_forward_mqa_kernel``, as ``flashattn_mla_sparse.py`` implements it. The cache
shape is vLLM's (no ``get_kv_cache_shape``), and a backend that reads the cache as flat rows asks for blocks whole rows
apart (``customize_spec`` -> ``align_blocks_to_rows``, as ``FLASHMLA_SPARSE`` off SM100).

DeepGEMM's wrappers (``vllm/utils/deep_gemm.py``) lost ``clean_logits``: the prefill one takes ``max_seqlen_k`` and
returns *compressed* logits (row ``i`` holds keys ``[ks[i], ke[i])`` from column 0), the paged one takes ``indices``
(the varlen form, SM100 only). On CUDA, GLM-5 and DeepSeek-V3.2 run through ``vllm/models/deepseek_v32/``, whose
indexer q quant (``fused_q``) and K insert (``fused_norm_rope``, which also writes the MLA cache) are Triton kernels
that store fp8: not replaced here (:data:`UNREPLACED_FP8_STORES`), so on SM80/86 they stand in the way.
"""
# No ``from __future__ import annotations``: the DeepGEMM adapters' signatures must equal vLLM's, annotations included.
import torch

__all__ = ["SparseMetadata", "ImplForward", "customize_spec", "deepgemm_adapters", "FP8_STORE_HOOKS",
           "UNREPLACED_FP8_STORES"]


class ImplForward:
    """0.33: ``_forward_mqa_kernel``, called by vLLM's ``SparseMLACommonImpl.forward_mqa`` with ``topk_indices``
    ``[T, topk]`` int32 physical rows of ``kv_cache`` viewed flat (``-1`` = none; ``valid_counts`` is not needed: the
    kernel masks ``-1``): ``self.attend`` on vLLM's flat row view of the cache (``flat_kv_row_view``)."""

    def _forward_mqa_kernel(self, q, kv_cache: torch.Tensor, topk_indices: torch.Tensor, valid_counts, *, layer,
                            block_size: int, is_decode: bool):
        from vllm.v1.attention.backends.mla.sparse_utils import flat_kv_row_view

        q_nope, q_pe = self.split_q(q)
        rows, _ = flat_kv_row_view(kv_cache, block_size)
        return self.attend(q_nope, q_pe, rows, topk_indices)


def customize_spec(spec):
    """Blocks whole cache rows apart (vLLM's ``align_blocks_to_rows``): the kernel reads row ``slot`` of the flat
    view."""
    from vllm.v1.attention.backends.mla.sparse_utils import align_blocks_to_rows

    return align_blocks_to_rows(spec)


def __getattr__(name: str):
    """``SparseMetadata``: vLLM's own ``SparseMLACommonMetadata``, imported on first use (vLLM's attention modules log
    on import)."""
    if name == "SparseMetadata":
        from vllm.model_executor.layers.attention.sparse_mla_attention import SparseMLACommonMetadata

        globals()[name] = SparseMLACommonMetadata
        return SparseMLACommonMetadata
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compress_logits(full: torch.Tensor, cu_seqlen_ks: torch.Tensor, max_seqlen_k: int) -> torch.Tensor:
    """0.33's prefill logits layout from absolute columns: ``out[i, j] = full[i, ks[i] + j]`` for ``j <
    max_seqlen_k`` (``[M, max_seqlen_k]`` float32; columns past a row's window hold whatever ``full`` has there, as
    DeepGEMM's "tail is not cleaned"). No host sync."""
    if full.shape[1] == 0 or max_seqlen_k <= 0:
        return full.new_full((full.shape[0], max(int(max_seqlen_k), 0)), float("-inf"))
    cols = cu_seqlen_ks.to(torch.long)[:, None] + torch.arange(int(max_seqlen_k), device=full.device)[None, :]
    return full.gather(1, cols.clamp_(max=full.shape[1] - 1))


def deepgemm_adapters(prefill, paged):
    """``(fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits)`` with 0.33's DeepGEMM wrapper signatures around the indexer
    hook's kernels (``prefill`` / ``paged`` as in the 0.26 adapter: absolute columns): the prefill logits compressed
    to 0.33's layout (:func:`compress_logits`), the paged ones as they are; ``indices`` (SM100's varlen form) is
    refused."""

    def fp8_fp4_mqa_logits(
        q: tuple[torch.Tensor, torch.Tensor | None],
        kv: tuple[torch.Tensor, torch.Tensor],
        weights: torch.Tensor,
        cu_seqlen_ks: torch.Tensor,
        cu_seqlen_ke: torch.Tensor,
        max_seqlen_k: int,
    ) -> torch.Tensor:
        return compress_logits(prefill(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, True), cu_seqlen_ks, max_seqlen_k)

    def fp8_fp4_paged_mqa_logits(
        q: tuple[torch.Tensor, torch.Tensor | None],
        kv_cache: torch.Tensor,
        weights: torch.Tensor,
        context_lens: torch.Tensor,
        block_tables: torch.Tensor,
        schedule_metadata: torch.Tensor,
        max_model_len: int,
        indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if indices is not None:
            raise NotImplementedError("the Triton indexer takes the padded paged form only (indices=None); the varlen "
                                      "form is DeepGEMM's SM100 path")
        return paged(q, kv_cache, weights, context_lens, block_tables, max_model_len, True)

    return fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits


#: Where 0.33 calls a Triton kernel that stores fp8 on the DSA indexer's path and the hook has a stand-in: the decode
#: q packing (``sparse_attn_indexer.pack_seq_triton``; 0.26's q quant in ``deepseek_v2`` is off the CUDA path now).
FP8_STORE_HOOKS = {("vllm.model_executor.layers.sparse_attn_indexer", "pack_seq_triton"): "pack_seq"}

#: fp8-storing Triton kernels of 0.33's CUDA DSA path that the hook does not replace: on a GPU without fp8
#: conversions (SM80/86) they do not compile (``vllm/models/deepseek_v32/common/kernels.py``).
UNREPLACED_FP8_STORES = ("vllm.models.deepseek_v32.attention.fused_q",
                         "vllm.models.deepseek_v32.attention.fused_norm_rope")
