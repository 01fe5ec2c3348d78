"""Step 1, *diagnose*: what vLLM 0.26.0 would do with a DSA model on a given GPU, asked of vLLM's own code.

Modules, in the order a probe runs:

* :mod:`.request` -- the inputs (GPU presets, capability, KV-cache dtype, tensor-parallel size), checked before vLLM
  is imported;
* :mod:`.probe` -- the GPU-less stand-in for vLLM's CUDA platform and the driver stubs;
* :mod:`.selection` -- vLLM's own path for the record (:func:`diagnose`);
* :mod:`.matrix` -- every GPU x KV-cache dtype at once (table, heatmap, CSV);
* :mod:`.report` -- reading a record (verdicts, tables, text);
* :mod:`.cli` -- ``sparse-mla diagnose``.

Nothing here imports vLLM at module import time (``sparse-mla --help`` stays fast).
"""
from .report import backend_verdict, backends_frame, describe_simulated, format_record, vllm_source
from .request import GPU_PRESETS, KV_CACHE_DTYPES, PLUGIN_BACKEND_NAME, VLLM_CACHE_DTYPES, parse_capability
from .selection import CORE_MLA_BACKENDS, diagnose

__all__ = ["CORE_MLA_BACKENDS", "GPU_PRESETS", "KV_CACHE_DTYPES", "PLUGIN_BACKEND_NAME", "VLLM_CACHE_DTYPES",
           "backend_verdict", "backends_frame", "describe_simulated", "diagnose", "format_record", "parse_capability",
           "vllm_source"]
