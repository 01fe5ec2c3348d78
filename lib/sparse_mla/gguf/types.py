"""The GGUF type table: the GGML tensor types a GGUF holds, with their block sizes, and the ones vllm-gguf-plugin keeps
unquantized. The types ``make-checkpoint --gguf`` writes, with their file types, are the writer's
(:data:`sparse_mla.gguf.writer.GGUF_TYPES`)."""
from __future__ import annotations

#: GGUF tensor types the memory stage sizes: ``(values per block, bytes per block)``, from llama.cpp's gguf-py
#: ``GGML_QUANT_SIZES`` (``gguf/constants.py``; Q4_K: 2 + 2 + 256/2 + 12 = 144 bytes per 256 values).
#: ``tests/gguf/test_types.py`` compares them with the installed ``gguf`` package where it is importable.
GGUF_TYPES: dict[str, tuple[int, int]] = {
    "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q6_K": (256, 210), "Q5_K": (256, 176), "Q5_0": (32, 22),
    "Q4_K": (256, 144), "Q4_0": (32, 18), "Q3_K": (256, 110), "Q2_K": (256, 84),
    "Q5_1": (32, 24), "Q4_1": (32, 20), "IQ4_XS": (256, 136), "IQ4_NL": (32, 18), "IQ3_S": (256, 110),
    "IQ3_XXS": (256, 98), "IQ2_S": (256, 82), "IQ2_XS": (256, 74), "IQ2_XXS": (256, 66), "IQ1_M": (256, 56),
    "IQ1_S": (256, 50), "MXFP4": (32, 17),
}

#: GGUF tensor types vllm-gguf-plugin builds unquantized, in the model dtype (``get_unquantized_modules``).
UNQUANTIZED_TYPES = ("F32", "F16", "BF16")
