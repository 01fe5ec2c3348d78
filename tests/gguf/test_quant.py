"""sparse_mla.gguf.quant: our numpy Q4_K and Q6_K quantizers against gguf-py's dequantizer, within the bounds
their docstrings derive (Q6_K on fresh random inputs each run), and their refusal of rows gguf-py's blocks do not
divide."""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.gguf.quant import (Q6_K_BLOCK_BYTES, q4_k_error_bound, q6_k_error_bound, quantize_q4_k,  # noqa: E402
                                   quantize_q6_k)


@pytest.mark.parametrize("scale", [1e-4, 0.02, 3.0])
def test_q4_k_quantizer_against_gguf_py_dequant(scale):
    rng = np.random.default_rng(int(scale * 1e4))
    x = (rng.standard_normal((5, 768)) * scale).astype(np.float32)
    x[0, :256] = 0.0                        # an all-zero super-block
    x[1, :256] = np.abs(x[1, :256])         # all positive: the minimum clamps to 0
    x[2, 256:512] = -np.abs(x[2, 256:512])  # all negative
    x[3, 5] = 40 * scale                    # one outlier
    blocks = quantize_q4_k(x)
    assert blocks.shape == (5, 3 * 144) and blocks.dtype == np.uint8
    y = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K)
    err, bound = np.abs(y - x), q4_k_error_bound(x)
    assert np.all(err <= bound)
    assert np.all(y[0, :256] == 0)
    # 4-bit: the error is of the order of a 16th of each super-block's span, not more and not (much) less
    span = x.reshape(-1, 256).max(-1) - np.minimum(x.reshape(-1, 256).min(-1), 0)
    assert err.reshape(-1, 256).max(-1)[span > 0].min() > 0


def test_q4_k_rejects_rows_not_a_multiple_of_256():
    with pytest.raises(ValueError, match="multiple of 256"):
        quantize_q4_k(np.zeros((2, 192), np.float32))


def _fresh(scale: float, seed: int) -> np.ndarray:
    """[6, 768] float32: normal values times ``scale`` with an all-zero super-block, an all-positive and an
    all-negative one, one outlier, and one sub-block of zeros inside an otherwise normal super-block."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((6, 768)) * scale).astype(np.float32)
    x[0, :256] = 0.0
    x[1, :256] = np.abs(x[1, :256])
    x[2, 256:512] = -np.abs(x[2, 256:512])
    x[3, 5] = 40 * scale
    x[4, 16:32] = 0.0
    return x


@pytest.mark.parametrize("scale", [1e-6, 1e-4, 0.02, 3.0, 1e3])
def test_q6_k_quantizer_against_gguf_py_dequant(scale):
    seed = int(np.random.SeedSequence().entropy % 2**32)                 # fresh inputs each run, named on failure
    x = _fresh(scale, seed)
    blocks = quantize_q6_k(x)
    assert blocks.shape == (6, 3 * Q6_K_BLOCK_BYTES) and blocks.dtype == np.uint8
    assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q6_K] == (256, Q6_K_BLOCK_BYTES)
    y = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q6_K)
    assert y.shape == x.shape
    err, bound = np.abs(y - x), q6_k_error_bound(x)
    assert np.all(err <= bound), (seed, float((err / np.where(bound > 0, bound, 1)).max()))
    assert np.all(y[0, :256] == 0) and np.all(y[4, 16:32] == 0)
    # 6-bit: the bound is about a 62nd of each sub-block's largest magnitude, and the error reaches a good part of
    # it somewhere (a bound 10 times too loose, or a quantizer that rounds to fewer levels, would show)
    amax = np.abs(x).reshape(-1, 16).max(-1)
    assert np.all(bound.reshape(-1, 16).max(-1) <= amax / 62 * 1.02 + amax.max() / 7000 + 2.0**-23)
    assert (err / np.where(bound > 0, bound, 1)).max() > 0.5


def test_q6_k_byte_layout_is_the_one_gguf_py_decodes():
    """Each 6-bit q where block_q6_K puts it: one value of each (half, nibble) / (half, 2-bit group) at a time."""
    x = np.zeros((1, 256), np.float32)
    x[0, 0] = -1.0                       # sub-block 0's scale; q of the rest of sub-block 0 is 32 (value 0)
    for v in (1, 70, 130, 200, 255):     # ql nibble 0/1 of halves 0/1, qh bit groups 0..3
        x[0, v] = 0.5 if v < 16 else 1.0
    y = gguf.quants.dequantize(quantize_q6_k(x), gguf.GGMLQuantizationType.Q6_K)
    assert np.all(np.abs(y - x) <= q6_k_error_bound(x))
    assert set(np.flatnonzero(y[0])) == {0, 1, 70, 130, 200, 255}


def test_q6_k_rejects_rows_not_a_multiple_of_256():
    with pytest.raises(ValueError, match="Q6_K needs rows of a multiple of 256"):
        quantize_q6_k(np.zeros((2, 192), np.float32))
