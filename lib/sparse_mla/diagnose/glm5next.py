"""GLM-5.3-Flash (``glm5_next``) on vLLM 0.33's own path: what its indexer and its KDA layers would run on a GPU,
asked of vLLM's code (``vllm/models/glm5next/``; only vLLM 0.33 has the model:
:func:`sparse_mla.models.require_vllm_model` refuses it elsewhere before anything here runs).

The attention backend is the common stage's (:mod:`.selection`, vLLM's selector with the MLA layer's arguments: head
``kv_lora_rank + qk_rope_head_dim`` = 512, sparse). What differs from GLM-5's path, and is asked here:

* **indexer** (:func:`indexer_stage`) -- ``SparseAttnIndexerKpool`` (``vllm/models/glm5next/nvidia/sparse_indexer.py``),
  not the DSA token-level indexer: its K cache (``Glm5NextIndexerCache``, ``tokens_per_state`` = ``index_kpool``) holds
  one Hadamard-rotated fp8 key per pool of ``index_kpool`` tokens, written by Triton kernels that store fp8
  (:data:`KPOOL_FP8_KERNELS`); logits over pools by DeepGEMM (``fp8_fp4_mqa_logits`` prefill,
  ``fp8_fp4_paged_mqa_logits`` decode, ``get_paged_mqa_logits_metadata`` in the decode metadata builder); the
  ``index_topk / index_kpool`` best pools are expanded back to tokens and the incomplete tail pool appended, into rows
  of ``get_sparse_topk_buffer_width`` (``common/model.py``) that the attention backend's top-k conversion receives.
  vLLM's answer to "does DeepGEMM run on this GPU" is ``has_deep_gemm()`` and ``support_deep_gemm()``; the fp8 stores
  compile only from SM89 (Triton's rule, :func:`sparse_mla.kernels.fp8.has_fp8_conversion`;
  ``tests/diagnose/test_glm5next.py`` compiles vLLM's ``_fwht_quant_kernel`` per target). With the plugin
  (:func:`plugin_verdict`), its indexer hook rebinds the module's DeepGEMM names where vLLM's DeepGEMM has no kernels
  (:mod:`sparse_mla.vllm_plugin.indexer_kpool`): the logits are then ``TRITON_DSA_INDEXER``'s; below SM89 it also puts
  byte-storing stand-ins where vLLM's callers look up the fp8-storing kernels (:data:`KPOOL_FP8_CALLERS`,
  :mod:`sparse_mla.vllm_plugin.kpool_stores`), so that these stop it only where a site is not rebound.
* **KDA** (:func:`kda_stage`) -- the linear-attention layers (``Glm5NextLinearAttention``, ``common/kda.py``): vLLM's
  mamba backend for them, its choice of prefill kernel (``_resolve_kda_prefill_backend``: FlashKDA or Triton) and the
  per-request state its model class declares (``get_mamba_state_shape_from_config`` / ``..._dtype_...``).

:mod:`.glm5next_needs` says what the workbook's kernels would need for it; nothing here claims support.
"""
from __future__ import annotations

from typing import Any

from ..models import is_glm5_next
from .runtime import DEEPGEMM_INDEXER

#: vLLM 0.33's KPool indexer module (the DeepGEMM calls are looked up in its globals).
KPOOL_MODULE = "vllm.models.glm5next.nvidia.sparse_indexer"
#: Its Triton kernels module.
KPOOL_OPS = "vllm.models.glm5next.nvidia.ops.kpool_compress"

#: ``(function, module, caller and role)`` of the KPool path's Triton kernels that store ``fp8e4nv``.
KPOOL_FP8_KERNELS: tuple[tuple[str, str, str], ...] = (
    ("fwht128_quant_fp8", KPOOL_OPS, "glm5next/common/attention.py's Indexer: the indexer query's Hadamard-128 "
                                     "rotation and fp8 quantization"),
    ("kpool_compress_and_write_cache", KPOOL_OPS, "the KPool indexer's prefill: each pool of index_kpool keys "
                                                  "compressed to one fp8 key and written to the index cache"),
    ("kpool_decode_update_and_maybe_write_cache_batched", KPOOL_OPS, "the KPool indexer's decode: the tail pool "
                                                                     "updated and, once full, written as an fp8 key"),
    ("pack_seq_triton", "vllm.v1.attention.ops.common", "the KPool indexer's decode of a batch that needs padding "
                                                        "(MTP of uneven lengths, short prefills taken as decodes): "
                                                        "the fp8 query packed with an fp32 pad"),
)

#: Where vLLM's callers look each of :data:`KPOOL_FP8_KERNELS` up (the site the plugin's hook rebinds):
#: ``fwht128_quant_fp8`` imported by name into the ``Indexer``'s module, the pool writers called as
#: ``kpool_ops.<name>`` (the ops module itself), ``pack_seq_triton`` imported by name into the KPool module.
KPOOL_FP8_CALLERS = {"fwht128_quant_fp8": "vllm.models.glm5next.common.attention",
                     "kpool_compress_and_write_cache": KPOOL_OPS,
                     "kpool_decode_update_and_maybe_write_cache_batched": KPOOL_OPS,
                     "pack_seq_triton": KPOOL_MODULE}

#: The DeepGEMM functions the KPool path calls.
KPOOL_DEEPGEMM = ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "get_paged_mqa_logits_metadata")


def applies(vc) -> bool:
    """Whether ``vc`` (vLLM's engine configuration) is GLM-5.3-Flash's."""
    text = vc.model_config.hf_text_config
    return is_glm5_next({"model_type": getattr(text, "model_type", None)})


def kpool_geometry(vc) -> dict[str, Any]:
    """The KPool numbers vLLM's code uses: ``index_topk``, ``index_kpool``, the pools selected
    (``index_topk // index_kpool``), the top-k row width (vLLM's ``get_sparse_topk_buffer_width``), the indexer
    backend's name and its kernel block sizes (``Glm5NextIndexerBackend.get_supported_kernel_block_sizes()``, read
    under ``vc``), and the MLA (``indexed_attention``) layers (vLLM's ``_is_kda_layer`` false)."""
    from vllm.config import set_current_vllm_config
    from vllm.models.glm5next.common.model import _is_kda_layer, get_sparse_topk_buffer_width
    from vllm.v1.attention.backends.mla.indexer import Glm5NextIndexerBackend

    text = vc.model_config.hf_text_config
    with set_current_vllm_config(vc):
        sizes = [int(s) for s in Glm5NextIndexerBackend.get_supported_kernel_block_sizes()]
    return {"index_topk": int(text.index_topk), "index_kpool": int(text.index_kpool),
            "pools_selected": int(text.index_topk) // int(text.index_kpool),
            "topk_width": int(get_sparse_topk_buffer_width(text)),
            "backend": str(Glm5NextIndexerBackend.get_name()), "kernel_block_sizes": sizes,
            "mla_layers": [i for i in range(int(text.num_hidden_layers)) if not _is_kda_layer(text, i)]}


def _stock_reasons(c: str, cap) -> list[str]:
    """Why vLLM's KPool indexer cannot run at capability ``c`` (``[]``: it can), by vLLM's and Triton's rules."""
    from vllm.platforms import current_platform
    from vllm.utils.import_utils import has_deep_gemm

    from ..kernels.fp8 import has_fp8_conversion

    reasons = []
    if not has_deep_gemm():
        reasons.append(f"vLLM's KPool indexer ({KPOOL_MODULE}.SparseAttnIndexerKpool) refuses to build without "
                       f"DeepGEMM (has_deep_gemm() is False)")
    elif not current_platform.support_deep_gemm():
        reasons.append(f"vLLM's KPool indexer calls DeepGEMM ({', '.join(KPOOL_DEEPGEMM)}), which has no kernels for "
                       f"compute capability {c} (vLLM's CudaPlatform.support_deep_gemm() is False)")
    if not has_fp8_conversion((cap.major, cap.minor)):
        reasons += [f"vLLM's {name} ({module}, called by {role}) stores fp8e4nv, which Triton compiles only from "
                    f"SM89 (this GPU: compute capability {c})" for name, module, role in KPOOL_FP8_KERNELS]
    return reasons


def indexer_stage(vc, cap, with_plugin: bool) -> dict[str, Any]:
    """Stage 3 for GLM-5.3-Flash, in the shape of :func:`sparse_mla.diagnose.runtime.indexer_stage` (``needed``,
    ``stock`` ``"DEEPGEMM"`` or None, ``with_plugin``, ``reasons``, ``plugin_reasons``, ``hooked``) plus ``kpool``
    (:func:`kpool_geometry`) and ``plugin`` (:func:`plugin_verdict`: the indexer the plugin runs here). With the
    plugin registered, what its indexer hook rebinds is read back (``hooked``) and ``with_plugin`` /
    ``plugin_reasons`` are that verdict; without it, ``plugin`` is the hook's rule for this GPU (its ``wanted``)."""
    from .runtime import _plugin_indexer

    c = f"{cap.major}.{cap.minor}"
    reasons = _stock_reasons(c, cap)
    out: dict[str, Any] = {"needed": True, "stock": None if reasons else DEEPGEMM_INDEXER, "with_plugin": None,
                           "reasons": reasons, "hooked": {}, "kpool": kpool_geometry(vc)}
    if with_plugin:
        ix = _plugin_indexer()
        out["hooked"] = dict(ix.hooked()) if ix is not None else {}
    out["plugin"] = plugin_verdict(vc, cap, out["stock"], out["hooked"] if with_plugin else None)
    if with_plugin:
        out["with_plugin"], out["plugin_reasons"] = out["plugin"]["indexer"], out["plugin"]["reasons"]
    return out


def plugin_verdict(vc, cap, stock: str | None, hooked: dict[str, str] | None) -> dict[str, Any]:
    """``{"indexer", "logits", "reasons"}``: the indexer GLM-5.3-Flash's KPool layers run on with the plugin at ``cap``
    (``TRITON_DSA_INDEXER``, ``stock``, or None), whether the plugin's hook computes their logits (it rebinds every
    DeepGEMM name of the KPool module, :func:`sparse_mla.vllm_plugin.indexer_kpool.kpool_served`), and why none runs.
    ``hooked``: the hook's replacements as installed (:func:`sparse_mla.vllm_plugin.indexer.hooked`), or None for its
    rule at ``cap`` (``wanted(cap)``: installed where vLLM's ``support_deep_gemm()`` is False, or by the switch)."""
    from ..kernels.fp8 import has_fp8_conversion
    from ..vllm_plugin.indexer_kpool import KPOOL_DEEPGEMM_NAMES, kpool_served
    from .runtime import _plugin_indexer

    ix = _plugin_indexer()
    if ix is not None and hooked is None:
        rule = [f"{ix.KPOOL_MOD}.{n}" for n in KPOOL_DEEPGEMM_NAMES] + ix.fp8_store_sites((cap.major, cap.minor))
        hooked = ({site: "(by the hook's rule)" for site in rule}
                  if ix.KPOOL_MOD is not None and ix.wanted((cap.major, cap.minor)) else {})
    if ix is None or not kpool_served(hooked, ix.KPOOL_MOD):
        on = sorted(k for k in hooked or {} if k.startswith(KPOOL_MODULE + "."))
        return {"indexer": stock, "logits": False, "reasons": [] if stock else [
            f"the plugin's indexer hook rebinds {'only ' + ', '.join(on) if on else 'nothing'} in {KPOOL_MODULE} here: "
            f"GLM-5.3-Flash's KPool indexer keeps vLLM's DeepGEMM calls"]}
    text = vc.model_config.hf_text_config
    c = f"{cap.major}.{cap.minor}"
    reasons = list(ix.indexer_reasons(int(text.index_n_heads), int(text.index_head_dim), (cap.major, cap.minor)))
    if not has_fp8_conversion((cap.major, cap.minor)):
        reasons += [f"vLLM's {name} ({module}, called by {role}) stores fp8e4nv, which Triton compiles only from SM89 "
                    f"(compute capability {c}), and the plugin has no byte-storing replacement for it"
                    for name, module, role in KPOOL_FP8_KERNELS if f"{KPOOL_FP8_CALLERS[name]}.{name}" not in hooked]
    return {"indexer": None if reasons else ix.INDEXER_NAME, "logits": True, "reasons": reasons}


def _kda_kernels(prefill: str | None) -> dict[str, str]:
    """The kernels a KDA layer runs, by role, as ``common/kda.py`` imports them (qualified names)."""
    from vllm.model_executor.layers.mamba.ops import causal_conv1d
    from vllm.models.glm5next.common import kda

    def name(fn) -> str:
        return f"{fn.__module__}.{fn.__name__}"

    chunk = name(kda.chunk_kda_with_fused_gate)
    return {"prefill": {"flashkda": "vllm._flashkda_C (FlashKDA, fused CUDA)", "triton": chunk}.get(prefill or "", "-"),
            "decode": name(kda.fused_recurrent_kda),
            "conv": f"{name(causal_conv1d.causal_conv1d_fn)}, {name(causal_conv1d.causal_conv1d_update)}"}


def kda_stage(vc) -> dict[str, Any]:
    """The KDA layers as vLLM 0.33 builds them: ``layers`` (vLLM's ``_is_kda_layer``), ``mamba_backend`` (the layer's
    ``mamba_type``, vLLM's ``MambaAttentionBackendEnum`` member, and that backend's class), ``prefill`` (vLLM's
    ``_resolve_kda_prefill_backend`` for this GPU: ``flashkda`` or ``triton``; None with ``prefill_error``, vLLM's
    refusal), ``kernels`` (by role), ``state`` (per request and rank: the conv and recurrent state shapes and dtypes
    of ``Glm5NextForCausalLM``'s ``get_mamba_state_*_from_config``)."""
    from vllm.models.glm5next.common import kda
    from vllm.models.glm5next.common.model import Glm5NextForCausalLM, _is_kda_layer

    text = vc.model_config.hf_text_config
    member = kda.Glm5NextLinearAttention.mamba_type.fget(None)   # vLLM's property: a constant of the class
    backend = member.get_class()
    extra = vc.additional_config if isinstance(vc.additional_config, dict) else {}
    asked = extra.get("kda_prefill_backend", "auto")
    out: dict[str, Any] = {"layers": [i for i in range(int(text.num_hidden_layers)) if _is_kda_layer(text, i)],
                           "mamba_backend": f"{member.name} ({backend.__module__}.{backend.__qualname__})",
                           "prefill_asked": asked, "prefill": None, "prefill_error": None}
    try:
        out["prefill"] = kda._resolve_kda_prefill_backend(asked, int(text.linear_head_dim), vc.model_config.dtype,
                                                          text.linear_lower_bound)
    except (ValueError, RuntimeError) as e:
        out["prefill_error"] = str(e)
    out["kernels"] = _kda_kernels(out["prefill"])
    shapes = Glm5NextForCausalLM.get_mamba_state_shape_from_config(vc)
    dtypes = Glm5NextForCausalLM.get_mamba_state_dtype_from_config(vc)
    out["state"] = {role: {"shape": list(shape), "dtype": str(dtype).replace("torch.", "")}
                    for role, shape, dtype in zip(("conv", "recurrent"), shapes, dtypes)}
    return out


def mhc_stage(vc) -> dict[str, Any]:
    """The MHC (hyper-connection) layers as vLLM builds them: ``used`` (the config's ``mhc``), ``hc_mult``,
    ``layers`` (every decoder layer where used), ``kernels`` (``vllm/model_executor/layers/mhc.py``'s ``forward_cuda``:
    TileLang ops, JIT-compiled by TileLang for the GPU at first use), ``tilelang`` (vLLM's own ``has_tilelang()`` on
    this host) with ``tilelang_pin`` (vLLM's requirement, from its metadata), and ``blocker``: where the layers are used
    and TileLang is missing, vLLM's own ``ImportError`` -- ``vllm.tilelang_utils`` raises it on a CUDA platform, as
    both engines did in their first forward on the H100 (2026-12-06: a bundle without TileLang) -- else None."""
    import importlib
    import importlib.metadata
    import sys

    from vllm.utils import import_utils

    text = vc.model_config.hf_text_config
    used = bool(getattr(text, "mhc", False))
    pin = next((r.split(";")[0].strip() for r in importlib.metadata.requires("vllm") or []
                if r.lower().startswith("tilelang")), None)
    out: dict[str, Any] = {"used": used, "hc_mult": getattr(text, "hc_mult", None),
                           "layers": list(range(int(text.num_hidden_layers))) if used else [],
                           "kernels": "vllm.model_executor.layers.mhc (MHCPreOp, MHCPostOp, ...: "
                                      "torch.ops.vllm.mhc_pre_tilelang, mhc_post_tilelang)",
                           "tilelang": import_utils.has_tilelang(), "tilelang_pin": pin, "blocker": None}
    if used and not out["tilelang"]:
        kept = sys.modules.pop("vllm.tilelang_utils", None)      # vLLM's words: its module raises on import
        try:
            importlib.import_module("vllm.tilelang_utils")
            out["blocker"] = "vLLM's MHC layers need TileLang, and vLLM's has_tilelang() is False here"
        except ImportError as e:
            out["blocker"] = f"vLLM's MHC layers (mhc_pre_tilelang in their first forward): {e}"
        finally:
            sys.modules.pop("vllm.tilelang_utils", None)
            if kept is not None:
                sys.modules["vllm.tilelang_utils"] = kept
        out["blocker"] += f" (vLLM requires {pin})" if pin else ""
    return out
