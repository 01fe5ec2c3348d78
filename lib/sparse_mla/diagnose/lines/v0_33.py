"""vLLM 0.33.x: where the diagnosis finds what differs between lines (see :mod:`sparse_mla.diagnose.lines`).

KV-cache planning moved to ``vllm/v1/core/kv_cache_planning.py``; ``get_kv_cache_configs`` takes the global KV-cache
groups, and the engine core resolves one KV-cache layout (``resolve_kv_cache_layout``, ``vllm/v1/engine/core.py``)
before any planning. On CUDA, GLM-5 and DeepSeek-V3.2 run through ``vllm/models/deepseek_v32/``: the indexer's
query quantization is ``fused_q`` and its K quantization and cache insert ``fused_norm_rope``
(``models/deepseek_v32/common/kernels.py``), both Triton kernels that store fp8; the decode top-k is picked by
``get_indexer_topk`` and the MQA-logits input format by ``mqa_logits_use_mx_scales``, both cached per process.
"""
from __future__ import annotations

import types
from typing import Any

from .v0_26 import kv_cache_specs  # noqa: E402,F401  (0.33's GPU model runner collects the specs as 0.26's does)

PATCHABLE_MODULES: tuple[str, ...] = (
    "vllm.models.deepseek_v32.attention",
    "vllm.models.deepseek_v32.common.kernels",
    "vllm.models.glm5next.nvidia.sparse_indexer",
)

PLATFORM_DEPENDENT_CACHES: tuple[tuple[str, str], ...] = (
    ("vllm.utils.deep_gemm", "mqa_logits_use_mx_scales"),
    ("vllm.model_executor.layers.indexer_topk", "get_indexer_topk"),
)

#: vLLM's ``with_retry`` (``transformers_utils/repo_utils.py``) logs each failed attempt to parse a config at ERROR
#: (and sleeps before the retry): the diagnosis reports the final refusal as one line. vLLM's ``utils/torch_utils.py``
#: imports ``torch._opaque_base`` and calls ``register_opaque_type(..., typ="value")``, which torch 2.14 (0.33's pin)
#: logs as deprecated on first import.
QUIET_LOGGERS: tuple[str, ...] = (
    "vllm.transformers_utils.repo_utils",
    "torch._opaque_base",
    "torch._library.opaque_object",
)

def settle_logging() -> None:
    """Apply vLLM 0.33's default logging configuration now, as ``EngineArgs.create_engine_config`` would apply it on
    its first call (``configure_logging_if_needed``: a ``dictConfig`` that sets the ``vllm`` logger back to INFO), so
    that the later call is a no-op and :func:`sparse_mla.diagnose.probe.quiet_logs` keeps the levels it set."""
    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging_if_needed

    configure_logging_if_needed(LoggingConfig())


INDEXER_FP8_KERNELS: tuple[tuple[str, str, str], ...] = (
    ("fused_q", "vllm.models.deepseek_v32.common.kernels",
     "deepseek_v32/attention.py: the indexer query's RoPE and fp8 quantization"),
    ("fused_norm_rope", "vllm.models.deepseek_v32.common.kernels",
     "deepseek_v32/attention.py: the indexer key's norm, RoPE, fp8 quantization and cache insert"),
)


def resolve_kv_cache_layout(vc, specs: dict[str, Any]) -> None:
    """The engine core's step before planning: the layouts the worker's attention backends support
    (``WorkerBase.get_supported_kv_cache_layouts``, read from the layers registered in ``vc``'s forward context, so
    call it while they are), resolved with the specs by vLLM's ``resolve_kv_cache_layout`` and recorded on
    ``vc.cache_config.kv_cache_layout``. Raises vLLM's ValueError/AssertionError where they disagree."""
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout as resolve
    from vllm.v1.worker.worker_base import WorkerBase

    names = WorkerBase.get_supported_kv_cache_layouts(types.SimpleNamespace(vllm_config=vc))
    resolve(vc, [names], list(specs.values()))


def kv_cache_groups(vc, specs: dict[str, Any]) -> list:
    """vLLM's ``get_kv_cache_groups`` (``kv_cache_planning.py``)."""
    from vllm.v1.core.kv_cache_planning import get_kv_cache_groups

    return get_kv_cache_groups(vc, specs)


def kv_cache_config_from_groups(vc, groups: list, available: int):
    """vLLM's ``get_kv_cache_config_from_groups`` (``kv_cache_planning.py``) for ``available`` bytes."""
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups

    return get_kv_cache_config_from_groups(vc, groups, available)


def check_kv_cache_configs(vc, specs: dict[str, Any], available: int) -> None:
    """vLLM's ``get_kv_cache_configs`` for one worker, with the global groups 0.33's engine core passes
    (``get_global_kv_cache_groups``); raises its ValueError."""
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs

    get_kv_cache_configs(vc, [specs], [available], get_global_kv_cache_groups(vc, [specs]))


def indexer_fp8_build() -> tuple[Any, dict[str, str], dict[str, Any], dict[str, Any]]:
    """``(kernel, signature, constexprs, options)``: vLLM's ``_fused_q_kernel`` (the Triton kernel of ``fused_q``) as
    ``fused_q`` launches it for GLM-5 (64 heads, a 64-wide rotary half of 32, the indexer's 32 heads of 128, a
    512-wide latent, the bf16 MQA query, no PDL, one warp), for ``triton.compile`` with a ``GPUTarget``: whether it
    builds for a GPU is Triton's answer (``tests/diagnose/test_lines.py``). Needs a real Triton in vLLM (not its
    placeholder: call the probe's ``load_vllm_extensions`` first)."""
    from vllm.models.deepseek_v32.common import kernels

    kernel = kernels._fused_q_kernel
    consts = dict(NUM_Q_HEADS=64, Q_PE_HALF_ROT_DIM=32, NUM_INDEX_Q_HEADS=32, INDEX_Q_HALF_ROT_DIM=32,
                  INDEX_Q_HEAD_DIM=128, QL_NOPE_DIM=512, QL_NOPE_BLOCK=512, HAS_INDEXER=True,
                  INDEX_ROPE_INTERLEAVE=False, QUANTIZE_MQA=False, USE_PDL=False, FP8_MAX=448.0, USE_FNUZ=False)
    pointers = {"pos_ptr": "*i64", "index_q_fp8_ptr": "*fp8e4nv", "mqa_q_fp8_ptr": "*fp8e4nv", "q_scale_ptr": "*fp32",
                "index_weights_out_ptr": "*fp32"}
    sig = {n: "constexpr" if n in consts else pointers.get(n, "*bf16") if n.endswith("_ptr")
           else "fp32" if n.endswith("_scale") else "i32" for n in kernel.arg_names}
    return kernel, sig, consts, {"num_warps": 1}

