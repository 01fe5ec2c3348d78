"""sparse_mla.gguf.types: the type table's block sizes are llama.cpp's (and gguf-py's, where installed)."""
from __future__ import annotations

import pytest

from sparse_mla.gguf.types import GGUF_TYPES

pytestmark = pytest.mark.every_line


def test_gguf_block_sizes():
    """llama.cpp's block layouts (ggml-common.h): Q4_K = fp16 d, fp16 dmin, 12 bytes of 6-bit scales, 256 4-bit
    values; Q8_0 = fp16 d + 32 int8; Q6_K = 128 low nibbles + 64 high bit pairs + 16 int8 scales + fp16 d."""
    assert GGUF_TYPES["Q4_K"] == (256, 2 + 2 + 12 + 256 * 4 // 8)
    assert GGUF_TYPES["Q8_0"] == (32, 2 + 32)
    assert GGUF_TYPES["Q6_K"] == (256, 256 * 4 // 8 + 256 * 2 // 8 + 16 + 2)
    assert GGUF_TYPES["F16"] == (1, 2)
    gguf = pytest.importorskip("gguf")
    for name, size in GGUF_TYPES.items():
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]] == size, name
