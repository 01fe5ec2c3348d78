"""The weight formats the diagnosis sizes: GGUF tensor types and the ``--quantization`` names, read by the request
(:mod:`.request`) and the GGUF reader (:mod:`.gguf`) alike."""
from __future__ import annotations

from typing import Any

#: GGUF tensor types the memory stage sizes: ``(values per block, bytes per block)``, from llama.cpp's gguf-py
#: ``GGML_QUANT_SIZES`` (``gguf/constants.py``; Q4_K: 2 + 2 + 256/2 + 12 = 144 bytes per 256 values).
#: ``tests/diagnose/test_memory.py`` compares them with the installed ``gguf`` package where it is importable.
GGUF_TYPES: dict[str, tuple[int, int]] = {
    "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q6_K": (256, 210), "Q5_K": (256, 176), "Q5_0": (32, 22),
    "Q4_K": (256, 144), "Q4_0": (32, 18), "Q3_K": (256, 110), "Q2_K": (256, 84),
    "Q5_1": (32, 24), "Q4_1": (32, 20), "IQ4_XS": (256, 136), "IQ4_NL": (32, 18), "IQ3_S": (256, 110),
    "IQ3_XXS": (256, 98), "IQ2_S": (256, 82), "IQ2_XS": (256, 74), "IQ2_XXS": (256, 66), "IQ1_M": (256, 56),
    "IQ1_S": (256, 50), "MXFP4": (32, 17),
}

#: ``--quantization`` of a checkpoint whose config.json has no ``quantization_config`` (the presets): name ->
#: ``(vLLM quantization method, the quantization_config vLLM's config class for it reads)``; GGUF types have neither
#: (vLLM 0.26 has no in-tree GGUF; :mod:`.memory` sizes them from ``GGUF_TYPES``).
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
