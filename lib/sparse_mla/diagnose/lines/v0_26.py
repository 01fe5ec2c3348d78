"""vLLM 0.26.x: where the diagnosis finds what differs between lines (see :mod:`sparse_mla.diagnose.lines`).

KV-cache planning lives in ``vllm/v1/core/kv_cache_utils.py`` and needs no layout; the CUDA DSA path is
``vllm/model_executor/models/deepseek_v2.py``, whose indexer quantizes its query with ``fused_indexer_q_rope_quant``.
"""
from __future__ import annotations

from typing import Any

PATCHABLE_MODULES: tuple[str, ...] = ()

PLATFORM_DEPENDENT_CACHES: tuple[tuple[str, str], ...] = ()

QUIET_LOGGERS: tuple[str, ...] = ()


def settle_logging() -> None:
    """Nothing: vLLM 0.26 configures its logger once, when ``vllm.logger`` is imported."""

INDEXER_FP8_KERNELS: tuple[tuple[str, str, str], ...] = (
    ("fused_indexer_q_rope_quant", "vllm.model_executor.layers.sparse_attn_indexer",
     "deepseek_v2.py's Indexer: the indexer query's RoPE and fp8 quantization"),
)


def resolve_kv_cache_layout(vc, specs: dict[str, Any]) -> None:
    """Nothing to resolve: 0.26's backends give their cache shape themselves (``get_kv_cache_shape``)."""


def kv_cache_groups(vc, specs: dict[str, Any]) -> list:
    """vLLM's ``get_kv_cache_groups`` (``kv_cache_utils.py``)."""
    from vllm.v1.core.kv_cache_utils import get_kv_cache_groups

    return get_kv_cache_groups(vc, specs)


def kv_cache_config_from_groups(vc, groups: list, available: int):
    """vLLM's ``get_kv_cache_config_from_groups`` (``kv_cache_utils.py``) for ``available`` bytes."""
    from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups

    return get_kv_cache_config_from_groups(vc, groups, available)


def check_kv_cache_configs(vc, specs: dict[str, Any], available: int) -> None:
    """vLLM's ``get_kv_cache_configs`` for one worker, as 0.26's engine core calls it; raises its ValueError."""
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

    get_kv_cache_configs(vc, [specs], [available])


def indexer_fp8_build() -> tuple[Any, dict[str, str], dict[str, Any], dict[str, Any]]:
    """``(kernel, signature, constexprs, options)``: vLLM's ``_fused_indexer_q_rope_quant_kernel`` (the Triton kernel
    of ``fused_indexer_q_rope_quant``) as vLLM launches it (one warp), for ``triton.compile`` with a ``GPUTarget``
    (``tests/diagnose/test_lines.py``, ``tests/kernels/test_indexer_fit.py``). Needs a real Triton in vLLM (call the
    probe's ``load_vllm_extensions`` first)."""
    import vllm.model_executor.layers.sparse_attn_indexer as sai

    kernel = sai._fused_indexer_q_rope_quant_kernel
    consts = dict(fp8_min=-448.0, fp8_max=448.0, is_neox=False)
    sig = {n: "i32" for n in kernel.arg_names}
    sig.update(positions="*i64", q="*bf16", cos_sin_cache="*bf16", q_fp8="*fp8e4nv", weights="*bf16",
               weights_out="*fp32", softmax_scale="fp32", head_scale="fp32", **{n: "constexpr" for n in consts})
    return kernel, sig, consts, {"num_warps": 1}


def kv_cache_specs(vc) -> dict[str, Any]:
    """The KV-cache spec of every attention layer registered in ``vc``'s forward context, as this line's engine
    collects them: vLLM's ``GPUModelRunner.get_kv_cache_spec`` (``vllm/v1/worker/gpu_model_runner.py``), which reads
    only the runner's ``vllm_config`` and ``shared_kv_cache_layers`` (KV-sharing ``Attention`` layers, which MLA models
    do not have), so it is called on a namespace holding those two."""
    import types

    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    runner = types.SimpleNamespace(vllm_config=vc, shared_kv_cache_layers={})
    return dict(GPUModelRunner.get_kv_cache_spec(runner))
