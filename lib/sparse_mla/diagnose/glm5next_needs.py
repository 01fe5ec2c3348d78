"""Whether the workbook's plugin runs GLM-5.3-Flash (``glm5_next``) on a GPU, and what its kernels would need where it
does not: :func:`needs` says which first.

The plugin runs the model where vLLM's own parts run the rest: our ``TRITON_MLA_SPARSE`` takes the NoPE MLA layers
(:func:`our_attention_reasons` empty: ``TritonMLASparseBackend.validate_configuration`` accepts the layer's arguments)
and the KPool indexer runs (the plugin's verdict, :func:`sparse_mla.diagnose.glm5next.plugin_verdict`: vLLM's DeepGEMM
where it has kernels, else our ``TRITON_DSA_INDEXER`` computing its logits over pools through the indexer hook, with
vLLM's fp8-storing pool kernels compiled from SM89, and below it the hook's byte-storing stand-ins in their place,
:mod:`sparse_mla.vllm_plugin.kpool_stores`); the KDA layers are vLLM's kernels everywhere.

Each need sets vLLM 0.33's numbers for the model (read by :mod:`.glm5next` and the common stages from vLLM's code)
against the workbook's own: the attention backend's ``validate_configuration`` for the MLA layer's arguments, in its
words (``TritonMLASparseBackend``: head 576, or the NoPE head 512 with a bf16/fp16 cache; ``fp8_ds_mla`` needs a
64-wide rope part), the latent layout (:mod:`sparse_mla.layouts`: 512 latent + 64 rope values, or 512 alone), the token-level Triton indexer
(:mod:`sparse_mla.kernels.indexer`), and Triton's fp8 rule (:func:`sparse_mla.kernels.fp8.has_fp8_conversion`).
"""
from __future__ import annotations

from typing import Any

def statement(supported: bool, indexer: str | None) -> str:
    """The record's first word on it, by whether the plugin runs the model on that GPU (:func:`needs`) and on which
    indexer (``TRITON_DSA_INDEXER``: ours on the KPool logits; else vLLM's KPool indexer)."""
    if not supported:
        return ("the sparse_mla plugin does not run GLM-5.3-Flash here: this is a diagnosis of what vLLM would do and "
                "what our kernels would need, not support")
    from ..vllm_plugin.switches import INDEXER_NAME

    ix = (f"our {INDEXER_NAME} on its KPool indexer's logits (vLLM's pool kernels and top-k around it)"
          if indexer == INDEXER_NAME else "vLLM's KPool indexer")
    return (f"with the plugin, GLM-5.3-Flash runs here by vLLM's own decisions: our TRITON_MLA_SPARSE on its NoPE MLA "
            f"layers, {ix}, vLLM's KDA kernels for the rest")


def our_attention_reasons(vc, cap, args: dict[str, Any]) -> list[str]:
    """``TritonMLASparseBackend.validate_configuration`` (the plugin's backend, not registered by this call) for the
    MLA layer's selector arguments ``args`` (:func:`sparse_mla.diagnose.selection.layer_arguments`) under ``vc``;
    ``[]``: it would accept them."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.selector import AttentionSelectorConfig

    from ..vllm_plugin.backend import TritonMLASparseBackend

    sel = AttentionSelectorConfig(head_size=args["head_size"], dtype=vc.model_config.dtype,
                                  kv_cache_dtype=args["kv_cache_dtype"], block_size=None, use_mla=args["use_mla"],
                                  use_sparse=args["use_sparse"])
    with set_current_vllm_config(vc):
        return [str(r) for r in TritonMLASparseBackend.validate_configuration(device_capability=cap, **sel._asdict())]


def _mla_row_bytes(mem: dict[str, Any] | None, mla_layers: int) -> int | None:
    """Bytes per token of one MLA layer's cache as vLLM's spec sizes it (the memory stage's ``MLAAttention`` sum over
    the layers, divided by their number), or None where the memory stage did not run."""
    by = (mem or {}).get("kv_cache_bytes_per_token_by_layer") or {}
    return by["MLAAttention"] // mla_layers if by.get("MLAAttention") and mla_layers else None


def needs(vc, cap, args: dict[str, Any], kv: str | None, kpool: dict[str, Any], kda: dict[str, Any],
          mem: dict[str, Any] | None, plugin: dict[str, Any]) -> dict[str, Any]:
    """``{"supported", "statement", "attention_reasons", "indexer", "indexer_logits", "needs": [{"part", "need"}]}``:
    ``supported`` (the plugin runs the model on this GPU: our backend accepts the MLA layer and ``plugin``, the
    plugin's KPool indexer verdict :func:`.glm5next.plugin_verdict`, names an indexer), its :func:`statement`, our
    backend's reasons (:func:`our_attention_reasons`), that indexer and whether our hook computes its logits, and one
    need per part -- attention, KV cache (``kv``: the cache dtype the selected backend runs, None where none was
    selected), top-k rows, indexer, fp8 stores (on a GPU without fp8 conversions), KDA -- each with vLLM's number for
    the model (``kpool``: :func:`.glm5next.kpool_geometry`; ``kda``: :func:`.glm5next.kda_stage`; ``mem``: the memory
    stage) and ours."""
    from .. import layouts
    from ..kernels.fp8 import has_fp8_conversion
    from ..vllm_plugin.backend import TritonMLASparseBackend
    from .glm5next import KPOOL_FP8_KERNELS

    text = vc.model_config.hf_text_config
    # the cache ours would get: vLLM's own (auto resolved, fp8 canonicalized) where it selected a backend
    reasons = our_attention_reasons(vc, cap, {**args, "kv_cache_dtype": kv or args["kv_cache_dtype"]})
    head, nope = args["head_size"], int(text.qk_nope_head_dim)
    row = _mla_row_bytes(mem, len(kpool["mla_layers"]))
    out = [("attention", f"a sparse MLA kernel over a {head}-wide latent with no RoPE part (kv_lora_rank "
                         f"{text.kv_lora_rank} + qk_rope_head_dim {text.qk_rope_head_dim}; V the latent, softmax scale "
                         f"qk_head_dim^-0.5 = {nope}^-0.5 as vLLM's Glm5NextMLAAttention); ours (head sizes "
                         f"{TritonMLASparseBackend.get_supported_head_sizes()}) takes the NoPE head {layouts.KV_LORA_RANK} "
                         f"over a bf16/fp16 cache and over vLLM 0.33/0.34's {layouts.FP8_DS_MLA_NOPE_ROW_BYTES}-byte "
                         f"fp8_ds_mla rows (the kernels with q_pe [T, H, 0], checked through vLLM's entry point "
                         f"against the float64 reference; no GPU has run them): "
                         + ("; ".join(reasons) or "accepted by our validate_configuration")),
           ("kv cache", (f"the selected backend's {kv} cache" if kv else
                         "no backend selected (the memory stage sizes the model dtype's cache)")
                        + (f", {row} B per token and MLA layer as vLLM's spec sizes it" if row else "")
                        + f"; ours reads {layouts.LATENT_DIM}- or {layouts.KV_LORA_RANK}-wide bf16/fp16 rows, or "
                          f"{layouts.FP8_DS_MLA_ROW_BYTES}-byte fp8_ds_mla rows of head {layouts.LATENT_DIM} "
                          f"(512 fp8 + 4 scales + 64 bf16 rope) and {layouts.FP8_DS_MLA_NOPE_ROW_BYTES}-byte ones of "
                          f"the NoPE head (512 fp8 + 4 scales)"),
           ("top-k", f"rows of {kpool['topk_width']} indices (vLLM's get_sparse_topk_buffer_width: index_topk "
                     f"{kpool['index_topk']} + index_kpool {kpool['index_kpool']} - 1, rounded up to 128): the "
                     f"{kpool['pools_selected']} selected pools expanded to tokens plus the incomplete tail pool"),
           ("indexer", _indexer_need(kpool, plugin))]
    if not has_fp8_conversion((cap.major, cap.minor)):
        out.append(("fp8 stores", f"on compute capability {cap.major}.{cap.minor} Triton cannot compile the KPool "
                                  f"path's fp8 stores ({', '.join(n for n, _, _ in KPOOL_FP8_KERNELS)}): each needs a "
                                  f"byte-storing replacement; the plugin's indexer hook puts one in each caller's "
                                  f"place (sparse_mla.vllm_plugin.kpool_stores: the e4m3 bytes vLLM's kernels store, "
                                  f"rounded in software; checked byte for byte against vLLM's kernels in Triton's "
                                  f"interpreter, no GPU has run them)"))
    out.append(("KDA", f"{len(kda['layers'])} linear-attention layers on vLLM's own kernels (prefill "
                       f"{kda['prefill'] or kda['prefill_error']}: {kda['kernels']['prefill']}; decode "
                       f"{kda['kernels']['decode']}); no attention backend of ours is involved, and whether Triton "
                       f"compiles vLLM's KDA kernels for this GPU is not checked here"))
    supported = not reasons and plugin["indexer"] is not None
    return {"supported": supported, "statement": statement(supported, plugin["indexer"]), "attention_reasons": reasons,
            "indexer": plugin["indexer"], "indexer_logits": plugin["logits"],
            "needs": [{"part": p, "need": n} for p, n in out]}


def _indexer_need(kpool: dict[str, Any], plugin: dict[str, Any]) -> str:
    """The indexer part of :func:`needs`: vLLM's KPool indexer, and what ours does of it (``plugin["logits"]``: the
    indexer hook computes its logits on this GPU)."""
    from ..kernels.indexer import HEAD_DIM
    from .glm5next import KPOOL_MODULE

    vllms = (f"a KPool indexer: an index cache of one Hadamard-rotated fp8 key per {kpool['index_kpool']} tokens (block "
             f"sizes {kpool['kernel_block_sizes']}), logits over pools, top-{kpool['pools_selected']} pools, the tail "
             f"cache")
    if not plugin["logits"]:
        return (f"{vllms}; ours (TRITON_DSA_INDEXER) computes the logits over such a cache (its layout is the "
                f"token-level cache's, index_head_dim {HEAD_DIM}) where its hook is installed (a GPU without DeepGEMM "
                f"kernels, or SPARSE_MLA_TRITON_INDEXER=1), not here")
    return (f"{vllms}; ours (TRITON_DSA_INDEXER) computes its logits over pools: the indexer hook rebinds DeepGEMM's "
            f"fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits and has_deep_gemm in {KPOOL_MODULE} (the pool cache has "
            f"the token-level cache's layout, index_head_dim {HEAD_DIM}); the pool compression, tail cache, query "
            f"quantization, top-k and expansion stay vLLM's kernels")
