"""vLLM 0.26's side of the plugin's line adapter (:mod:`sparse_mla.vllm_plugin.lines`).

0.26's ``SparseMLACommonMetadataBuilder.build`` fills the metadata class the backend names; its
``SparseMLACommonImpl`` leaves ``forward_mqa`` to each backend, which converts the indexer's request-local top-k with
``triton_convert_req_index_to_global_index`` (``vllm/v1/attention/backends/mla/sparse_utils.py``) as
``flashmla_sparse.py`` does; the cache is ``[num_blocks, block_size, row]`` with blocks ``block_size`` rows apart
(the backend's ``get_kv_cache_shape``). DeepGEMM's wrappers (``vllm/utils/deep_gemm.py``) take ``clean_logits`` and
return logits at absolute key columns.
"""
# No ``from __future__ import annotations``: the DeepGEMM adapters' signatures must equal vLLM's, annotations included.
import torch


def _sparse_metadata():
    """The metadata dataclass, built on first use (vLLM's attention modules log on import: the indexer hook, which
    imports this module, stays quiet until vLLM is used)."""
    from dataclasses import dataclass

    from vllm.model_executor.layers.attention.mla_attention import MLACommonPrefillMetadata
    from vllm.v1.attention.backend import AttentionMetadata

    @dataclass
    class SparseMetadata(AttentionMetadata):
        """The fields 0.26's ``SparseMLACommonMetadataBuilder.build`` fills and ``MLAAttention.forward_impl``
        reads."""

        num_reqs: int
        max_query_len: int
        max_seq_len: int
        num_actual_tokens: int
        query_start_loc: torch.Tensor
        slot_mapping: torch.Tensor
        block_table: torch.Tensor
        req_id_per_token: torch.Tensor
        seq_lens: torch.Tensor
        block_size: int = 64
        topk_tokens: int = 2048
        num_decodes: int = 0
        num_prefills: int = 0
        num_decode_tokens: int = 0
        prefill_max_seq_len: int = 0
        prefill: MLACommonPrefillMetadata | None = None
        cp_kv_cache_interleave_size: int = 1

    SparseMetadata.__module__, SparseMetadata.__qualname__ = __name__, "SparseMetadata"
    return SparseMetadata


def __getattr__(name: str):
    if name == "SparseMetadata":
        globals()[name] = cls = _sparse_metadata()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def convert_to_global_slots(req_id_per_token: torch.Tensor, block_table: torch.Tensor, topk_indices: torch.Tensor,
                            block_size: int) -> torch.Tensor:
    """Request-local top-k positions ``[T, topk]`` (``-1`` = none) to global cache slots, int32, by vLLM's own kernel:
    ``block_table[req, pos // bs] * bs + pos % bs``; ``-1`` stays ``-1``, a position past the request's block table
    becomes ``-1``. ``topk`` must be a multiple of 128."""
    from vllm.v1.attention.backends.mla.sparse_utils import triton_convert_req_index_to_global_index

    return triton_convert_req_index_to_global_index(
        req_id_per_token, block_table, topk_indices, BLOCK_SIZE=block_size, NUM_TOPK_TOKENS=topk_indices.shape[1])


class ImplForward:
    """0.26: the impl's ``forward_mqa`` (vLLM's MLA layer calls it with ``q`` = ``(ql_nope [T, H, 512], q_pe [T, H,
    64])`` and the layer's cache): top-k -> slots (:func:`convert_to_global_slots`), then ``self.attend``."""

    def forward_mqa(self, q, kv_c_and_k_pe_cache: torch.Tensor, attn_metadata, layer):
        q_nope, q_pe = self.split_q(q)
        T = q_pe.shape[0]
        slots = convert_to_global_slots(attn_metadata.req_id_per_token[:T], attn_metadata.block_table,
                                        self.topk_indices_buffer[:T], attn_metadata.block_size)
        return self.attend(q_nope, q_pe, kv_c_and_k_pe_cache, slots)


def customize_spec(spec):
    """0.26 has no ``customize_spec`` hook: the spec as vLLM built it."""
    return spec


def kernel_block_sizes() -> list[int]:
    """64 tokens, ``FLASHMLA_SPARSE``'s answer on 0.26 (the DSA indexer's DeepGEMM paged logits read 64-token
    blocks; 0.26 has no hybrid DSA model whose manager blocks are larger)."""
    return [64]


def deepgemm_adapters(prefill, paged):
    """``(fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits)`` with 0.26's DeepGEMM wrapper signatures around the indexer
    hook's kernels: ``prefill(q, kv, weights, ks, ke, clean_logits)`` -> ``[M, N]`` logits at absolute key columns
    (what 0.26's callers take), ``paged(q, kv_cache, weights, context_lens, block_tables, max_model_len,
    clean_logits)`` -> ``[B * next_n, max_model_len]``."""

    def fp8_fp4_mqa_logits(
        q: tuple[torch.Tensor, torch.Tensor | None],
        kv: tuple[torch.Tensor, torch.Tensor],
        weights: torch.Tensor,
        cu_seqlen_ks: torch.Tensor,
        cu_seqlen_ke: torch.Tensor,
        clean_logits: bool,
    ) -> torch.Tensor:
        return prefill(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits)

    def fp8_fp4_paged_mqa_logits(
        q: tuple[torch.Tensor, torch.Tensor | None],
        kv_cache: torch.Tensor,
        weights: torch.Tensor,
        context_lens: torch.Tensor,
        block_tables: torch.Tensor,
        schedule_metadata: torch.Tensor,
        max_model_len: int,
        clean_logits: bool,
    ) -> torch.Tensor:
        return paged(q, kv_cache, weights, context_lens, block_tables, max_model_len, clean_logits)

    return fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits


#: Where 0.26 calls the Triton kernels that store fp8 (which SM80/86 cannot compile) on the DSA indexer's path, and
#: which of the hook's replacements stands in: the indexer q RoPE + quant in the model code, the decode q packing.
FP8_STORE_HOOKS = {("vllm.model_executor.models.deepseek_v2", "fused_indexer_q_rope_quant"): "q_rope_quant",
                   ("vllm.model_executor.layers.sparse_attn_indexer", "pack_seq_triton"): "pack_seq"}

#: Stand-ins of this adapter's own among :data:`FP8_STORE_HOOKS` (none: both are the hook's).
FP8_STORE_STAND_INS: dict = {}

#: 0.26 has no GLM-5.3-Flash, hence no KPool indexer module for the indexer hook to reach
#: (:mod:`sparse_mla.vllm_plugin.indexer_kpool`).
KPOOL_DEEPGEMM_MODULE = None

#: 0.26 writes a quantized MLA cache with vLLM's CUDA op ``concat_and_cache_mla`` (built for SM80 too), not in Triton.
TRITON_FP8_MLA_CACHE_WRITE = False
