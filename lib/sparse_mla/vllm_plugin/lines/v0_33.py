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
that store fp8, which SM80/86 cannot compile: the hook puts :func:`fused_q` and :func:`fused_norm_rope` in their place
there (:data:`FP8_STORE_STAND_INS`), and GLM-5.3-Flash's KPool pool writers and query quantization store fp8 too
(:mod:`sparse_mla.vllm_plugin.kpool_stores` stands in). An fp8 MLA cache stays out of reach below SM89 on this line
(:data:`TRITON_FP8_MLA_CACHE_WRITE`).
"""
# No ``from __future__ import annotations``: the DeepGEMM adapters' signatures must equal vLLM's, annotations included.
import torch

from ...kernels.fused_q import launch_fused_q
from ...kernels.indexer_k_cache import launch_indexer_k_cache
from .. import kpool_stores

__all__ = ["SparseMetadata", "ImplForward", "customize_spec", "kernel_block_sizes", "deepgemm_adapters",
           "FP8_STORE_HOOKS", "FP8_STORE_STAND_INS", "TRITON_FP8_MLA_CACHE_WRITE", "KPOOL_DEEPGEMM_MODULE"]


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


def kernel_block_sizes() -> list:
    """Any multiple of 64 tokens (vLLM's ``MultipleOf(64)``), as ``FLASHMLA_SPARSE`` answers off SM100: the kernel
    reads physical rows of vLLM's flat row view, so a kernel block may be a whole manager block. A hybrid model's
    manager blocks are larger (GLM-5.3-Flash: 512 tokens, aligned to its KDA state), and a packed 512-token block
    cannot be split into 64-token kernel blocks (``map_kv_cache_to_kernel_blocks``'s ValueError, H100 2026-12-06)."""
    from vllm.v1.attention.backend import MultipleOf

    return [MultipleOf(64)]


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


#: Where 0.33 calls Triton kernels that store fp8 (which SM80/86 cannot compile), and the hook's stand-in for each.
#: The DSA path: the decode q packing (``sparse_attn_indexer.pack_seq_triton``; 0.26's q quant in ``deepseek_v2`` is
#: off the CUDA path now), and ``fused_q`` / ``fused_norm_rope`` as ``DeepseekV32Attention.forward`` looks them up.
#: GLM-5.3-Flash's KPool path (:mod:`sparse_mla.vllm_plugin.kpool_stores`): ``fwht128_quant_fp8`` where its
#: ``Indexer`` (``glm5next/common/attention.py``) imported it, the pool writers where ``sparse_indexer.py`` calls them
#: (``kpool_ops.<name>``: the ``kpool_compress`` module itself), and the KPool module's own ``pack_seq_triton``
#: (fp8 q of a decode batch that needs padding: MTP with uneven lengths, short chunked prefills taken as decodes).
FP8_STORE_HOOKS = {("vllm.model_executor.layers.sparse_attn_indexer", "pack_seq_triton"): "pack_seq",
                   ("vllm.models.deepseek_v32.attention", "fused_q"): "fused_q",
                   ("vllm.models.deepseek_v32.attention", "fused_norm_rope"): "fused_norm_rope",
                   ("vllm.models.glm5next.common.attention", "fwht128_quant_fp8"): "kpool_q_quant",
                   ("vllm.models.glm5next.nvidia.ops.kpool_compress", "kpool_compress_and_write_cache"):
                       "kpool_compress",
                   ("vllm.models.glm5next.nvidia.ops.kpool_compress",
                    "kpool_decode_update_and_maybe_write_cache_batched"): "kpool_decode",
                   ("vllm.models.glm5next.nvidia.sparse_indexer", "pack_seq_triton"): "pack_seq"}

#: GLM-5.3-Flash's KPool indexer (``SparseAttnIndexerKpool``), whose module binds DeepGEMM's logits calls and
#: ``has_deep_gemm`` in its own globals: where the indexer hook also rebinds them
#: (:mod:`sparse_mla.vllm_plugin.indexer_kpool`).
KPOOL_DEEPGEMM_MODULE = "vllm.models.glm5next.nvidia.sparse_indexer"

#: 0.33 writes the MLA cache inside ``fused_norm_rope``'s Triton kernel: a quantized cache (fp8, fp8_ds_mla) needs
#: Triton's fp8 conversions, SM89 and up (the backend refuses it below; 0.26 writes it with a CUDA op).
TRITON_FP8_MLA_CACHE_WRITE = True


def fused_q(
    positions: torch.Tensor,
    q_pe: torch.Tensor,
    q_pe_cos_sin_cache: torch.Tensor,
    index_q: torch.Tensor | None,
    index_q_cos_sin_cache: torch.Tensor | None,
    ql_nope: torch.Tensor,
    q_scale: torch.Tensor,
    index_weights: torch.Tensor | None,
    index_weights_softmax_scale: float,
    index_weights_head_scale: float,
    has_indexer: bool = True,
    index_rope_interleave: bool = False,
    quantize_mqa: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM 0.33's ``fused_q`` (``vllm/models/deepseek_v32/common/kernels.py``; same signature, outputs and numbers)
    for GPUs without fp8 conversions: :func:`sparse_mla.kernels.fused_q.launch_fused_q`. Returns ``(index_q_fp8,
    index_weights_out, q_pe_roped)``. Raises NotImplementedError for ``quantize_mqa`` (the fp8 MLA query of
    FlashInfer's sparse backends, which ``TRITON_MLA_SPARSE`` never asks for)."""
    if quantize_mqa:
        raise NotImplementedError("sparse_mla's fused_q makes the bf16 MLA query only (quantize_mqa=False): the fp8 "
                                  "query pack is for backends with supports_quant_query_input")
    return launch_fused_q(positions, q_pe, q_pe_cos_sin_cache, index_q, index_q_cos_sin_cache, index_weights,
                          index_weights_softmax_scale, index_weights_head_scale, has_indexer=has_indexer,
                          index_rope_interleave=index_rope_interleave, hw=False)


def fused_norm_rope(
    positions: torch.Tensor,
    q_c: torch.Tensor,
    q_rms_norm_w: torch.Tensor,
    q_rms_eps: float,
    kv_c: torch.Tensor,
    kv_rms_norm_w: torch.Tensor,
    kv_rms_eps: float,
    k_pe: torch.Tensor,
    k_rope_cos_sin_cache: torch.Tensor,
    index_k: torch.Tensor | None,
    index_k_layer_norm_w: torch.Tensor | None,
    index_k_layer_norm_bias: torch.Tensor | None,
    index_k_layer_norm_eps: float,
    index_k_rope_cos_sin_cache: torch.Tensor | None,
    topk_indices_buffer: torch.Tensor,
    slot_mapping: torch.Tensor | None = None,
    indexer_slot_mapping: torch.Tensor | None = None,
    indexer_k_cache: torch.Tensor | None = None,
    indexer_cache_shuffled: bool = False,
    mla_kv_cache: torch.Tensor | None = None,
    mla_kv_cache_dtype: str = "auto",
    mla_k_scale: torch.Tensor | None = None,
    has_indexer: bool = True,
    index_rope_interleave: bool = False,
    q_c_out: torch.Tensor | None = None,
    kv_c_out: torch.Tensor | None = None,
    k_pe_out: torch.Tensor | None = None,
    index_k_out: torch.Tensor | None = None,
    skip_scale: bool = False,
) -> torch.Tensor:
    """vLLM 0.33's ``fused_norm_rope`` (same signature, outputs and numbers) for GPUs without fp8 conversions: vLLM's
    own function with no indexer cache and an fp32 ``index_k_out`` (its kernel then stores no fp8 and builds for
    SM80), followed by the indexer-key insert (:func:`sparse_mla.kernels.indexer_k_cache.launch_indexer_k_cache`).
    Returns the normalized ``q_c``. Raises NotImplementedError for a quantized MLA cache, the shuffled (ROCm) indexer
    layout, or an ``index_k_out`` beside an indexer cache (vLLM passes it only under PCP, without a cache)."""
    from vllm.models.deepseek_v32.common import kernels

    args = dict(slot_mapping=slot_mapping, indexer_slot_mapping=indexer_slot_mapping, mla_kv_cache=mla_kv_cache,
                mla_kv_cache_dtype=mla_kv_cache_dtype, mla_k_scale=mla_k_scale, has_indexer=has_indexer,
                index_rope_interleave=index_rope_interleave, q_c_out=q_c_out, kv_c_out=kv_c_out, k_pe_out=k_pe_out,
                skip_scale=skip_scale)
    head = (positions, q_c, q_rms_norm_w, q_rms_eps, kv_c, kv_rms_norm_w, kv_rms_eps, k_pe, k_rope_cos_sin_cache,
            index_k, index_k_layer_norm_w, index_k_layer_norm_bias, index_k_layer_norm_eps,
            index_k_rope_cos_sin_cache, topk_indices_buffer)
    if mla_kv_cache is not None and kernels.is_quantized_kv_cache(mla_kv_cache_dtype):
        raise NotImplementedError(f"kv_cache_dtype {mla_kv_cache_dtype!r}: vLLM 0.33 writes it in fused_norm_rope's "
                                  f"Triton kernel, which needs fp8 conversions (SM89+); accepted here: 'auto', "
                                  f"'bfloat16'")
    if indexer_k_cache is None or not has_indexer:
        return kernels.fused_norm_rope(*head, indexer_k_cache=indexer_k_cache, index_k_out=index_k_out,
                                       indexer_cache_shuffled=indexer_cache_shuffled, **args)
    if slot_mapping is None:
        raise ValueError("fused_norm_rope: an indexer cache needs slot_mapping (vLLM asserts the same)")
    if indexer_cache_shuffled or index_k_out is not None:
        raise NotImplementedError("sparse_mla's indexer-key insert writes vLLM's CUDA layout (unshuffled) and takes "
                                  "no index_k_out beside the cache")
    rows = torch.empty(index_k.shape, dtype=torch.float32, device=index_k.device)
    q_c = kernels.fused_norm_rope(*head, indexer_k_cache=None, index_k_out=rows, **args)
    launch_indexer_k_cache(rows, slot_mapping, slot_mapping if indexer_slot_mapping is None else indexer_slot_mapping,
                           indexer_k_cache, hw=False)
    return q_c


#: The hook's stand-ins named in :data:`FP8_STORE_HOOKS` that this adapter provides.
FP8_STORE_STAND_INS = {"fused_q": fused_q, "fused_norm_rope": fused_norm_rope,
                       "kpool_q_quant": kpool_stores.fwht128_quant_fp8,
                       "kpool_compress": kpool_stores.kpool_compress_and_write_cache,
                       "kpool_decode": kpool_stores.kpool_decode_update_and_maybe_write_cache_batched}
