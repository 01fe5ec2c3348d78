"""Stages 3 and 4 of vLLM's path: what decides whether an engine starts *after* the attention backend is chosen.

* **indexer** -- vLLM's DSA lightning indexer (``vllm/model_executor/layers/sparse_attn_indexer.py``, the decode
  metadata in ``vllm/v1/attention/backends/mla/indexer.py``) calls DeepGEMM (``fp8_fp4_mqa_logits``,
  ``fp8_fp4_paged_mqa_logits``, ``get_paged_mqa_logits_metadata``). vLLM's own answer to "does DeepGEMM run on this
  GPU" is ``current_platform.support_deep_gemm()`` (``vllm/platforms/cuda.py``: 9.0, 10.x, 12.x) together with
  ``has_deep_gemm()`` (``vllm/utils/import_utils.py``); the indexer itself only checks the latter and dies inside
  DeepGEMM on the first forward elsewhere. The line's Triton kernels that store the indexer's ``fp8e4nv`` (0.26:
  ``fused_indexer_q_rope_quant``; 0.33: ``fused_q`` and ``fused_norm_rope``; named by the line's adapter,
  :mod:`.lines`) compile only where Triton converts fp8 in hardware (SM89 and up): that rule is Triton's, applied
  here through :func:`sparse_mla.kernels.fp8.has_fp8_conversion` (``tests/kernels/test_fp8.py`` compiles a kernel
  that stores fp8e4nv for sm_80/86/89/120 and checks the rule; ``tests/kernels/test_indexer_fit.py`` and
  ``tests/diagnose/test_lines.py`` compile vLLM's own kernels of the installed line for those targets). With the
  step 4 plugin, its indexer hook (:mod:`sparse_mla.vllm_plugin.indexer`) replaces those calls where DeepGEMM has
  no kernel; what the hook patched in this probe is read back, not assumed.
* **kernel** -- every vLLM sparse MLA backend (and ours) converts the indexer's top-k positions to cache slots with
  ``triton_convert_req_index_to_global_index`` (``vllm/v1/attention/backends/mla/sparse_utils.py``), which asserts
  ``NUM_TOPK_TOKENS % 128 == 0`` when the first forward runs. That assertion is vLLM's; :func:`kernel_stage` runs
  vLLM's function on empty inputs to hear it (the call itself is ours).
"""
from __future__ import annotations

from typing import Any

DEEPGEMM_INDEXER = "DEEPGEMM"


def _plugin_indexer():
    try:
        from ..vllm_plugin import indexer
    except ImportError:
        return None
    return indexer


def indexer_stage(vc, cap, with_plugin: bool) -> dict[str, Any]:
    """Stage 3. Returns ``{"needed": bool, "stock": "DEEPGEMM" | None, "with_plugin": name | None (None also when
    the plugin was not asked for), "reasons": [...], "hooked": {...}}``; ``reasons`` say why stock vLLM's indexer
    cannot run here (and, with the plugin, why ours cannot)."""
    from vllm.platforms import current_platform
    from vllm.utils.import_utils import has_deep_gemm

    from ..kernels.fp8 import has_fp8_conversion
    from .lines import adapter

    hf = vc.model_config.hf_config
    out: dict[str, Any] = {"needed": hasattr(hf, "index_topk"), "stock": None, "with_plugin": None, "reasons": [],
                           "hooked": {}}
    if not out["needed"]:
        return out
    c = f"{cap.major}.{cap.minor}"
    stock_ok = True
    if not has_deep_gemm():
        stock_ok = False
        out["reasons"].append("vLLM's DSA indexer needs DeepGEMM (has_deep_gemm() is False: neither deep_gemm nor "
                              "vllm.third_party.deep_gemm is installed)")
    elif not current_platform.support_deep_gemm():
        stock_ok = False
        out["reasons"].append(f"vLLM's DSA indexer calls DeepGEMM (fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits, "
                              f"get_paged_mqa_logits_metadata), which has no kernels for compute capability {c} "
                              f"(vLLM's CudaPlatform.support_deep_gemm() is False)")
    if not has_fp8_conversion((cap.major, cap.minor)):
        stock_ok = False
        out["reasons"] += [f"vLLM's {name} ({module}, called by {role}) stores fp8e4nv, which Triton compiles "
                           f"only from SM89 (this GPU: compute capability {c}; Triton's rule, checked against vLLM's kernels by "
                           f"tests/kernels/test_indexer_fit.py and tests/diagnose/test_lines.py)"
                           for name, module, role in adapter().INDEXER_FP8_KERNELS]
    out["stock"] = DEEPGEMM_INDEXER if stock_ok else None
    if with_plugin:
        ix = _plugin_indexer()
        hooked = dict(ix.hooked()) if ix is not None else {}
        out["hooked"] = hooked
        if hooked:
            ours = list(ix.indexer_reasons(getattr(hf, "index_n_heads", None), getattr(hf, "index_head_dim", None),
                                           (cap.major, cap.minor)))
            if not has_fp8_conversion((cap.major, cap.minor)):      # vLLM's fp8 stores the plugin leaves in place
                ours += [f"vLLM's {name} ({module}, called by {role}) stores fp8e4nv, which Triton compiles only "
                         f"from SM89 (this GPU: compute capability {c}), and the plugin does not replace it on this vLLM line"
                         for name, module, role in adapter().INDEXER_FP8_KERNELS
                         if not any(k.endswith(f".{name}") for k in hooked)]
            out["with_plugin"] = ix.INDEXER_NAME if not ours else None
            out["plugin_reasons"] = ours
        else:
            out["with_plugin"] = out["stock"]
    return out


def kernel_stage(vc, attention: dict[str, Any], num_topk_tokens: int | None = None) -> dict[str, Any]:
    """Stage 4: vLLM's top-k index conversion for rows of ``num_topk_tokens`` indices (default the model's
    ``index_topk``; GLM-5.3-Flash's rows are wider, :func:`.glm5next.kpool_geometry`), only for a sparse model whose
    layer got a backend. Returns ``{"checked": bool, "reasons": [vLLM's assertion text], "num_topk_tokens"}``."""
    hf = vc.model_config.hf_config
    if not hasattr(hf, "index_topk") or attention.get("backend_cls") is None:
        return {"checked": False, "reasons": [], "num_topk_tokens": None}
    import torch
    from vllm.v1.attention.backends.mla.sparse_utils import triton_convert_req_index_to_global_index

    topk = int(hf.index_topk if num_topk_tokens is None else num_topk_tokens)
    i32 = torch.int32
    try:
        triton_convert_req_index_to_global_index(torch.empty(0, dtype=i32), torch.empty((0, 1), dtype=i32),
                                                 torch.empty((0, topk), dtype=i32), BLOCK_SIZE=64,
                                                 NUM_TOPK_TOKENS=topk)
    except AssertionError as e:
        return {"checked": True, "reasons": [f"vLLM's triton_convert_req_index_to_global_index (sparse_utils.py), "
                                             f"called by every sparse MLA backend at the first forward, asserts: "
                                             f"{str(e).strip() or 'assertion failed'}"], "num_topk_tokens": topk}
    except Exception:  # noqa: BLE001 - the assertions passed; launching on empty inputs is not the question
        pass
    return {"checked": True, "reasons": [], "num_topk_tokens": topk}
