"""Step 1, *diagnose*: what the installed vLLM (0.26.x or 0.33.x) would do with a DSA model on a given GPU, asked
of vLLM's own code.

Modules, in the order a probe runs:

* :mod:`.request` -- the inputs (GPU presets, capability, KV-cache dtype, tensor-parallel size, a forced backend),
  checked before vLLM is imported;
* :mod:`.probe` -- the GPU-less stand-in for vLLM's CUDA platform and the NVIDIA driver;
* :mod:`.path` -- vLLM's whole path for one record (:func:`diagnose`): :mod:`.config` (engine configuration, as
  ``vllm serve`` builds it), :mod:`.selection` (the attention backend and KV-cache dtype), :mod:`.runtime` (the DSA
  indexer's kernels, the top-k index conversion), :mod:`.memory` (weights per rank, the KV cache, whether
  ``max_model_len`` fits, on vLLM's model built by :mod:`.meta_model` on the meta device); for GLM-5.3-Flash (vLLM
  0.33 only) :mod:`.glm5next` (its KPool indexer and KDA layers on vLLM's path) and :mod:`.glm5next_needs` (what our
  kernels would need: a diagnosis, not support);
* :mod:`.matrix` -- every GPU x KV-cache dtype at once (table, heatmap, CSV); what fits in memory (CSV, Markdown);
* :mod:`.report` -- reading a record (verdicts, tables, text);
* :mod:`.lines` -- what differs between the tested vLLM lines (one adapter module per line);
* :mod:`.cli` -- ``sparse-mla diagnose``.

Nothing here imports vLLM at module import time (``sparse-mla --help`` stays fast).
"""
from .report import (backend_verdict, backends_frame, describe_simulated, format_record, format_stages, memory_line,
                     vllm_source)
from .request import GPU_PRESETS, GPUS, KV_CACHE_DTYPES, PLUGIN_BACKEND_NAME, QUANTIZATIONS, parse_capability
from .path import diagnose, headline


def __getattr__(name: str):
    """``VLLM_CACHE_DTYPES`` (:func:`.request.vllm_cache_dtypes`), read from the installed vLLM when first asked for."""
    if name == "VLLM_CACHE_DTYPES":
        from .request import vllm_cache_dtypes

        return vllm_cache_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GPU_PRESETS", "GPUS", "KV_CACHE_DTYPES", "PLUGIN_BACKEND_NAME", "QUANTIZATIONS", "VLLM_CACHE_DTYPES",
           "backend_verdict", "backends_frame", "describe_simulated", "diagnose", "format_record", "format_stages", "headline", "memory_line",
           "parse_capability", "vllm_source"]
