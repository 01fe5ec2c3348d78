"""The ``vllm serve`` line of a diagnosed configuration: the command whose start a diagnosis answers for."""
from __future__ import annotations

import shlex


def serve_command(model, tp: int, kv_cache_dtype: str, *, gguf_flags=(), max_model_len: int | None = None,
                  gpu_memory_utilization: float | None = None, cpu_offload_gb: float | None = None,
                  attention_backend: str | None = None) -> str:
    """``vllm serve MODEL [GGUF config flags] --tensor-parallel-size TP --kv-cache-dtype KV [--max-model-len N]
    [--gpu-memory-utilization F] [--cpu-offload-gb GIB] [--attention-backend NAME]`` as one shell line
    (``shlex.join``: a path with spaces is quoted). ``gguf_flags``: a GGUF model's config and tokenizer arguments
    (:func:`sparse_mla.diagnose.gguf_config.serve_flags`); ``attention_backend``: vLLM's backend name (``CUSTOM`` for
    the plugin's); the others as vLLM's flags of the same names, left out where None (``cpu_offload_gb`` also where
    0, vLLM's default)."""
    args = ["vllm", "serve", str(model), *gguf_flags, "--tensor-parallel-size", str(tp), "--kv-cache-dtype",
            str(kv_cache_dtype)]
    for flag, value in (("--max-model-len", max_model_len), ("--gpu-memory-utilization", gpu_memory_utilization),
                        ("--cpu-offload-gb", cpu_offload_gb or None), ("--attention-backend", attention_backend)):
        if value is not None:
            args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join(args)
