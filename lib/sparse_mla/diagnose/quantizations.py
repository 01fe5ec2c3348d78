"""The ``--quantization`` names the diagnosis sizes, read by the request (:mod:`.request`) and the GGUF reader
(:mod:`.gguf`) alike: bf16, fp8, nvfp4 and ``gguf-<type>`` for each GGUF tensor type of
:data:`sparse_mla.gguf.types.GGUF_TYPES`."""
from __future__ import annotations

from typing import Any

from ..gguf.types import GGUF_TYPES

#: ``--quantization`` of a checkpoint whose config.json has no ``quantization_config`` (the presets): name ->
#: ``(vLLM quantization method, the quantization_config vLLM's config class for it reads)``; GGUF types have neither
#: (vLLM 0.26 has no in-tree GGUF; :mod:`.memory` sizes them from :data:`~sparse_mla.gguf.types.GGUF_TYPES`).
#: ``fp8``: e4m3 with one fp32 scale per 128 x 128 block, as DeepSeek-V3.2's and GLM-5-FP8's config.json declare it
#: (embeddings, norms, router and ``lm_head`` stay bf16: vLLM gives those layers no quantization config).
#: ``nvfp4``: ModelOpt NVFP4 (4-bit values, one fp8 scale per 16, a per-tensor fp32 scale) on the MLP and MoE
#: experts; attention (MLA and the indexer) and ``lm_head`` bf16, as the published GLM-5 NVFP4 checkpoints keep them.
QUANTIZATIONS: dict[str, tuple[str | None, dict[str, Any] | None]] = {
    "bf16": (None, None),
    "fp8": ("fp8", {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                    "weight_block_size": [128, 128]}),
    "nvfp4": ("modelopt_fp4", {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                               "ignore": ["lm_head", "*self_attn*"]}),
    **{f"gguf-{t.lower()}": (None, None) for t in GGUF_TYPES},
}
