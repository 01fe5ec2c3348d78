"""vLLM 0.34.x: where the diagnosis finds what differs between lines (see :mod:`sparse_mla.diagnose.lines`).

0.33's, read again in vLLM 0.34.0's code: KV-cache planning (``vllm/v1/core/kv_cache_planning.py``:
``get_kv_cache_groups``, ``get_kv_cache_config_from_groups``, ``get_kv_cache_configs`` with the global groups), the
engine core's ``resolve_kv_cache_layout``, the logging configuration, the ``deepseek_v32`` path's fp8-storing
``fused_q`` / ``fused_norm_rope`` (``models/deepseek_v32/common/kernels.py``, the same file) and the per-process
caches ``mqa_logits_use_mx_scales`` / ``get_indexer_topk`` are where 0.33 has them. New in 0.34 and cached per process
on the platform: NVIDIA Confidential Computing detection (``platforms/cuda.py``), which reads the real GPU through
NVML -- a probe platform has none, so it is cleared with the others. Gone in 0.34: the first GPU model runner
(``vllm/v1/worker/gpu_model_runner.py``); the KV-cache specs come from the runner's module function
``get_kv_cache_spec(vllm_config)`` (``vllm/v1/worker/gpu/attn_utils.py``).
"""
from __future__ import annotations

from typing import Any

from .v0_33 import (INDEXER_FP8_KERNELS, PATCHABLE_MODULES, QUIET_LOGGERS, check_kv_cache_configs,  # noqa: F401
                    indexer_fp8_build, kv_cache_config_from_groups, kv_cache_groups, resolve_kv_cache_layout,
                    settle_logging)
from .v0_33 import PLATFORM_DEPENDENT_CACHES as _V033_CACHES

PLATFORM_DEPENDENT_CACHES: tuple[tuple[str, str], ...] = (
    *_V033_CACHES,
    ("vllm.platforms.cuda", "_detect_confidential_compute"),
)


def kv_cache_specs(vc) -> dict[str, Any]:
    """The KV-cache spec of every attention layer registered in ``vc``'s forward context, as 0.34's GPU model runner
    collects them (``get_kv_cache_spec`` in ``vllm/v1/worker/gpu/attn_utils.py``)."""
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    return dict(get_kv_cache_spec(vc))
