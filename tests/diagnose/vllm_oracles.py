"""Oracles of the diagnosis that are not the diagnosis: vLLM's own CUDA platform class with the capability set where
that class reads it, vLLM's own engine-config path and selector on that class (:func:`vllms_selection`, whichever vLLM
line is installed), and a reading of vLLM 0.26.0's source (no probe, no vLLM call) for the sparse MLA selection."""
from __future__ import annotations

import contextlib
import types


@contextlib.contextmanager
def vllms_own_cuda_platform(cap, device_count):
    """vLLM's own ``NonNvmlCudaPlatform`` (``vllm/platforms/cuda.py``: the platform vLLM picks where NVML is missing),
    not the diagnosis's probe subclass: the capability patched at its source, ``torch.cuda.get_device_capability``,
    which that class reads, and the device count at ``_cuda_device_count_stateless``, which ``device_count`` reads.
    An error in the probe's capability simulation cannot cancel out against this oracle."""
    from unittest import mock

    import vllm.platforms.cuda as cuda_mod

    own = cuda_mod.NonNvmlCudaPlatform
    with mock.patch("torch.cuda.get_device_capability", lambda device=None: tuple(cap)), \
            mock.patch("torch.cuda.get_device_name", lambda device=None: "oracle"), \
            mock.patch.object(cuda_mod, "_cuda_device_count_stateless", lambda *a, **k: device_count):
        own.get_device_capability.cache_clear()
        try:
            yield own()
        finally:
            own.get_device_capability.cache_clear()


def vllms_selection(model, cap, kv, tp):
    """vLLM's own answer for the attention stage, on vLLM's own CUDA platform class (:func:`vllms_own_cuda_platform`),
    never the probe platform: the engine configuration from ``EngineArgs(...).create_engine_config()``, then
    ``get_attn_backend`` with the MLA layer's arguments read off it, and, for the ``AttentionSelectorConfig`` and head
    count vLLM's selector built there, vLLM's ``get_valid_backends`` on that class: every backend on the GPU's priority
    list with its priority and reasons. The diagnosis' stock-selection guard (no plugin override), its refresh of
    extension flags a module imported before vLLM's extensions were loaded holds stale (a fact of this machine, not
    of the GPU) and model folder are reused.

    Returns ``SimpleNamespace(selected, cache_dtype, order, reasons)``: the backend's name (None: vLLM raises), the
    cache dtype vLLM configures (after the architecture hooks), the priority list's names in order and
    ``{name: reasons}`` (``[]`` for a valid backend)."""
    from unittest import mock

    import vllm.v1.attention.selector as selector_mod
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs

    from sparse_mla.diagnose import config as stage_config
    from sparse_mla.diagnose import probe as pr
    from sparse_mla.diagnose.request import resolve

    pr.load_vllm_extensions()
    req = resolve(model, f"{cap[0]}.{cap[1]}", kv, tp, False)
    with vllms_own_cuda_platform(cap, tp) as platform, pr.quiet_logs(), pr.use_platform(platform), \
            pr.stock_selection(), pr.extension_flags([]), stage_config.model_dir(req) as path, \
            stage_config._in_process_inspection():
        assert type(platform).__module__ == "vllm.platforms.cuda"
        assert platform.get_device_capability().to_int() == cap[0] * 10 + cap[1]
        vc = EngineArgs(model=str(path), skip_tokenizer_init=True, load_format="dummy", kv_cache_dtype=kv,
                        tensor_parallel_size=tp).create_engine_config()
        mc = vc.model_config
        out = types.SimpleNamespace(selected=None, cache_dtype=vc.cache_config.cache_dtype)
        asked = {}
        selector_mod._cached_get_attn_backend.cache_clear()
        cached = selector_mod._cached_get_attn_backend

        def capture(backend, attn_selector_config, num_heads=None, **line_keywords):
            asked.update(config=attn_selector_config, num_heads=num_heads)
            return cached(backend, attn_selector_config, num_heads, **line_keywords)

        with set_current_vllm_config(vc), mock.patch.object(selector_mod, "_cached_get_attn_backend", capture):
            try:
                out.selected = selector_mod.get_attn_backend(
                    mc.get_head_size(), mc.dtype, vc.cache_config.cache_dtype, use_mla=mc.use_mla,
                    use_sparse=hasattr(mc.hf_config, "index_topk"),
                    num_heads=mc.get_num_attention_heads(vc.parallel_config)).get_name()
            except ValueError:
                pass
            finally:
                cached.cache_clear()
            valid, invalid = type(platform).get_valid_backends(
                device_capability=platform.get_device_capability(), attn_selector_config=asked["config"],
                num_heads=asked["num_heads"])
        listed = {m.name: (prio, list(reasons)) for m, (prio, reasons) in invalid.items()}
        listed.update({c.backend.name: (c.priority, []) for c in valid})
        out.order = sorted(listed, key=lambda n: listed[n][0])
        out.reasons = {n: listed[n][1] for n in out.order}
        return out


# The sparse MLA selection, from a reading of vLLM 0.26.0's source:
# vllm/model_executor/models/config.py DeepseekV32ForCausalLM.verify_and_update_config: a "bfloat16" cache becomes
#   "auto" for deepseek_v32 (GLM-5's glm_moe_dsa has no such hook).
# vllm/platforms/cuda.py _get_backend_priorities(use_mla): the sparse candidates, in order --
#   major 12: FLASHINFER_MLA_SPARSE_SM120 (TRITON_MLA before it has no sparse support);
#   major 10: quantized cache -> FLASHINFER_MLA_SPARSE, FLASHMLA_SPARSE; else FLASHINFER_MLA_SPARSE first when
#             num_heads (per rank) <= 16, FLASHMLA_SPARSE first otherwise;
#   other majors: FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE.
# The cache dtypes each accepts and the GPUs (v1/attention/backends/mla/*.py, supported_kv_cache_dtypes,
# supports_compute_capability, supports_combination):
_SOURCE_BACKENDS = {
    "FLASHINFER_MLA_SPARSE_SM120": ({12}, {"auto", "fp8", "fp8_e4m3", "fp8_ds_mla"}),  # with FlashInfer's SM120 API
    "FLASHINFER_MLA_SPARSE": ({10}, {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3"}),  # refuses fp8_ds_mla
    "FLASHMLA_SPARSE": ({9, 10}, {"auto", "bfloat16", "fp8_ds_mla", "fp8"}),
    "FLASH_ATTN_MLA_SPARSE": ({9}, {"auto", "float16", "bfloat16"}),
}
_HEADS = {"glm-5": 64, "deepseek-v3.2": 128}


def from_vllm_source(model, major, kv, tp):
    """``(selected backend or None, the cache dtype vLLM configures)`` for ``model`` (glm-5, deepseek-v3.2) on a GPU of
    compute-capability ``major`` with ``kv`` and ``tp``, from the reading above."""
    from vllm.utils.flashinfer import has_flashinfer_sparse_mla_sm120   # this host's software, not a rule

    cache = "auto" if model == "deepseek-v3.2" and kv == "bfloat16" else kv
    if major == 12:   # the backend's __init__ refuses where FlashInfer lacks the SM120 sparse decode API
        order = ["FLASHINFER_MLA_SPARSE_SM120"] if has_flashinfer_sparse_mla_sm120() else []
    elif major == 10:
        quantized = cache.startswith("fp8")
        pair = ["FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"]
        order = pair if quantized or _HEADS[model] // tp <= 16 else pair[::-1]
    else:
        order = ["FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"]
    ok = [b for b in order if major in _SOURCE_BACKENDS[b][0] and cache in _SOURCE_BACKENDS[b][1]]
    return (ok[0] if ok else None), cache


def stock_indexer(cap) -> str | None:
    """vLLM's own answer to whether its DSA indexer runs on a GPU of ``cap``: ``has_deep_gemm()`` and
    ``support_deep_gemm()`` on vLLM's own CUDA platform class (:func:`vllms_own_cuda_platform`), plus Triton's fp8e4nv
    rule for vLLM's q-quant kernel (``has_fp8_conversion``, checked against Triton's compiler in tests/kernels).
    ``"DEEPGEMM"`` or None."""
    from vllm.utils.import_utils import has_deep_gemm

    from sparse_mla.diagnose import probe as pr
    from sparse_mla.kernels.fp8 import has_fp8_conversion

    with vllms_own_cuda_platform(cap, 1) as platform, pr.use_platform(platform):
        deepgemm = has_deep_gemm() and platform.support_deep_gemm()
    return "DEEPGEMM" if deepgemm and has_fp8_conversion(tuple(cap)) else None


def vllm_reads_indexer_types() -> bool:
    """Whether the installed vLLM reads a GLM-5.x config's ``indexer_types`` itself: its own
    ``compute_skip_topk_layers`` (``vllm/model_executor/models/utils.py``, 0.34) called on a config with
    ``indexer_types`` alone; vLLM 0.26 and 0.33 have no such function (their layers read the pattern / freq inline)."""
    from vllm.model_executor.models import utils

    fn = getattr(utils, "compute_skip_topk_layers", None)
    if fn is None:
        return False
    cfg = types.SimpleNamespace(index_topk=256, num_hidden_layers=2, indexer_types=["full", "shared"])
    return fn(cfg) == {1}
