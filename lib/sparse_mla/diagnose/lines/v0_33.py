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

PATCHABLE_MODULES: tuple[str, ...] = (
    "vllm.models.deepseek_v32.attention",
    "vllm.models.deepseek_v32.common.kernels",
    "vllm.models.glm5next.nvidia.sparse_indexer",
)

PLATFORM_DEPENDENT_CACHES: tuple[tuple[str, str], ...] = (
    ("vllm.utils.deep_gemm", "mqa_logits_use_mx_scales"),
    ("vllm.model_executor.layers.indexer_topk", "get_indexer_topk"),
)

INDEXER_FP8_KERNELS: tuple[tuple[str, str], ...] = (
    ("fused_q", "vllm/models/deepseek_v32/common/kernels.py, called by deepseek_v32/attention.py: the indexer "
                "query's RoPE and fp8 quantization"),
    ("fused_norm_rope", "vllm/models/deepseek_v32/common/kernels.py, called by deepseek_v32/attention.py: the "
                        "indexer key's norm, RoPE, fp8 quantization and cache insert"),
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
