"""GGUF tensor encodings: gguf-py's quantizers, and numpy Q4_K and Q6_K quantizers, which gguf-py does not have.

gguf-py 0.19 (llama.cpp's ``gguf-py/gguf/quants.py``) quantizes F16, BF16, Q4_0/Q4_1/Q5_0/Q5_1, Q8_0, TQ1_0/TQ2_0 and
MXFP4 and dequantizes every type; it has no Q4_K quantizer (llama.cpp's is C, ``ggml-quants.c``
``quantize_row_q4_K_ref``, run by ``llama-quantize``). :func:`quantize_q4_k` writes the Q4_K block llama.cpp defines
(``ggml-common.h`` ``block_q4_K``; decoded by gguf-py's ``Q4_K.dequantize_blocks``), 144 bytes per 256 values::

    d     fp16   super-block scale of the sub-block scales
    dmin  fp16   super-block scale of the sub-block minima
    scales 12 B  8 six-bit scales sc[j] and 8 six-bit minima m[j], packed as get_scale_min unpacks them
    qs   128 B   256 four-bit q, sub-blocks 2g (low nibbles) and 2g+1 (high nibbles) in bytes 32g .. 32g+31

    x ~= d * sc[j] * q - dmin * m[j]          for the 32 values of sub-block j, q in 0..15

The scales are chosen by min/max coverage, not by llama.cpp's iterative error search (``make_qkx2_quants``): per
sub-block j the offset ``dmin * m[j]`` (``m[j] = ceil(-min(x_j, 0) / dmin)``) is at or below the smallest value and
``d * sc[j]`` (``sc[j] = ceil((max x_j + dmin m[j]) / 15 / d)``) makes the 16 levels reach the largest, with ``d`` and
``dmin`` rounded up to fp16 first, so every value lies inside its sub-block's grid and the error of each value is at
most half a step, ``d * sc[j] / 2`` (plus float32 rounding). Over a super-block whose values span
``R = max(x, 0) - min(x, 0)`` that is at most ``R / 30 * (1 + 1.001/63)**2`` (:func:`q4_k_error_bound`).

:func:`quantize_q6_k` writes llama.cpp's Q6_K block (``block_q6_K``; decoded by gguf-py's ``Q6_K.dequantize_blocks``;
llama.cpp's own is ``quantize_row_q6_K_ref``), 210 bytes per 256 values in 16 sub-blocks of 16::

    ql   128 B   low 4 bits of q: value 128h + 64n + l (h 0..1, n 0..1, l 0..63) in byte 64h + l, nibble n
    qh    64 B   high 2 bits of q: value 128h + 32k + l (k 0..3, l 0..31) in byte 32h + l, bits 2k .. 2k+1
    scales 16 B  int8 sc[j] per sub-block j (values 16j .. 16j+15)
    d      fp16  super-block scale of the sub-block scales

    x ~= d * sc[j] * (q - 32)                 q in 0..63

The scales come from the largest magnitude, not llama.cpp's iterative search (``make_qx_quants``): per sub-block
``s_j = max |x_j| / 31``; ``d = S / 127`` with ``S = max_j s_j``, rounded up to fp16; ``sc[j] = ceil(s_j / d)``
(0..127). Then ``d * sc[j] >= s_j``, every ``|x| / (d sc[j]) <= 31``, ``q = 32 + round(x / (d sc[j]))`` lies in 1..63
without clipping, and the error of each value is at most half a step, ``d * sc[j] / 2``. With ``sc[j] <= s_j / d + 1``
and ``d <= S / 127 * (1 + 2**-10) + 2**-24`` (rounding up to fp16: one ulp, relative ``2**-10`` for a normal value, at
most ``2**-24`` where ``d`` is subnormal), a value of sub-block j with largest magnitude ``a_j``, in a super-block
with largest magnitude ``A``, is off by at most ``a_j / 62 + A / (62 * 127) * (1 + 2**-10) + 2**-25``, plus float32
rounding (:func:`q6_k_error_bound`).
"""
from __future__ import annotations

import numpy as np

QK_K = 256            #: values per Q4_K super-block (ggml-common.h QK_K)
Q4_K_BLOCK_BYTES = 144  #: 2 + 2 + 12 + 128
Q6_K_BLOCK_BYTES = 210  #: 128 + 64 + 16 + 2


def _fp16_up(v: np.ndarray) -> np.ndarray:
    """The smallest fp16 value >= ``v`` (``v`` >= 0, float32), as float32."""
    h = v.astype(np.float16)
    low = h.astype(np.float32) < v
    h[low] = np.nextafter(h[low], np.float16(np.inf))
    return h.astype(np.float32)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Q4_K blocks of ``x`` (float32, last dimension a multiple of 256): uint8 ``[..., last // 256 * 144]``.

    Raises ValueError if the last dimension is not a multiple of 256 (llama.cpp falls back to another type then).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % QK_K:
        raise ValueError(f"Q4_K needs rows of a multiple of {QK_K} values, got shape {x.shape}")
    blocks = x.reshape(-1, 8, 32)                                          # [n, sub-block, value]
    lo = np.minimum(blocks.min(axis=-1), 0.0)                              # [n, 8], <= 0
    hi = blocks.max(axis=-1)
    dmin = _fp16_up(-lo.min(axis=-1) / 63.0)                               # [n]
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(dmin[:, None] > 0, np.ceil(-lo / dmin[:, None]), 0.0)
    m = np.clip(m, 0, 63)
    base = dmin[:, None] * m                                               # the grid starts at -base <= lo
    need = np.maximum(hi + base, 0.0) / 15.0                               # step that reaches hi
    d = _fp16_up(need.max(axis=-1) / 63.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d[:, None] > 0, np.ceil(need / d[:, None]), 0.0)
    sc = np.clip(sc, 0, 63)
    step = (d[:, None] * sc)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step > 0, np.rint((blocks + base[..., None]) / step), 0.0)
    q = np.clip(q, 0, 15).astype(np.uint8)                                 # [n, 8, 32]

    sc8, m8 = sc.astype(np.uint8), m.astype(np.uint8)
    packed = np.empty((blocks.shape[0], 12), dtype=np.uint8)
    packed[:, 0:4] = sc8[:, :4] | ((sc8[:, 4:] >> 4) << 6)
    packed[:, 4:8] = m8[:, :4] | ((m8[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc8[:, 4:] & 0x0F) | ((m8[:, 4:] & 0x0F) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)
    out = np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2),
                          dmin.astype(np.float16).view(np.uint8).reshape(-1, 2), packed, qs], axis=1)
    return out.reshape(*x.shape[:-1], x.shape[-1] // QK_K * Q4_K_BLOCK_BYTES)


def q4_k_error_bound(x: np.ndarray) -> np.ndarray:
    """Per-value bound of ``|x - dequantize(quantize_q4_k(x))|`` (float32, shape of ``x``), from each super-block's
    span ``R`` alone (see the module docstring): ``R / 30 * (1 + 1.001/63)**2``, plus ``2**-23`` where ``d`` or
    ``dmin`` is an fp16 subnormal (rounded up by at most 2**-24), plus float32 rounding of the dequantization,
    ``4 * 2**-24 * (R + max |x|)``."""
    x = np.asarray(x, dtype=np.float32)
    b = x.reshape(-1, QK_K)
    span = np.maximum(b.max(axis=-1), 0) - np.minimum(b.min(axis=-1), 0)
    bound = span / 30.0 * (1 + 1.001 / 63) ** 2 + 2.0**-23 + 4 * 2.0**-24 * (span + np.abs(b).max(axis=-1))
    return np.broadcast_to(bound[:, None], b.shape).reshape(x.shape)


def _q6_k_scales(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(d [n] float32, held in fp16; sc [n, 16] float32, integers 0..127)`` of Q6_K super-blocks ``[n, 16, 16]``."""
    s = np.abs(blocks).max(axis=-1) / 31.0                                 # [n, 16] step that reaches max |x_j|
    d = _fp16_up(s.max(axis=-1) / 127.0)                                   # [n]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d[:, None] > 0, np.ceil(s / d[:, None]), 0.0)
    return d, np.clip(sc, 0, 127)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """Q6_K blocks of ``x`` (float32, last dimension a multiple of 256): uint8 ``[..., last // 256 * 210]`` (layout
    and scale choice in the module docstring; llama.cpp ``ggml-common.h`` ``block_q6_K``).

    Raises ValueError if the last dimension is not a multiple of 256 (llama.cpp falls back to Q8_0 then).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % QK_K:
        raise ValueError(f"Q6_K needs rows of a multiple of {QK_K} values, got shape {x.shape}")
    blocks = x.reshape(-1, 16, 16)                                         # [n, sub-block, value]
    d, sc = _q6_k_scales(blocks)
    step = (d[:, None] * sc)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step > 0, np.rint(blocks / step), 0.0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 128)   # [n, half h, value in half]
    lo, hi = q & 0x0F, q >> 4
    lo = lo.reshape(-1, 2, 2, 64)                                          # [n, h, nibble n, l]
    ql = (lo[:, :, 0] | (lo[:, :, 1] << 4)).reshape(-1, 128)
    hi = hi.reshape(-1, 2, 4, 32)                                          # [n, h, k, l]
    qh = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(-1, 64)
    out = np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8),
                          d.astype(np.float16).view(np.uint8).reshape(-1, 2)], axis=1)
    return out.reshape(*x.shape[:-1], x.shape[-1] // QK_K * Q6_K_BLOCK_BYTES)


def q6_k_error_bound(x: np.ndarray) -> np.ndarray:
    """Per-value bound of ``|x - dequantize(quantize_q6_k(x))|`` (float32, shape of ``x``), derived in the module
    docstring: ``a_j / 62 + A / (62 * 127) * (1 + 2**-10) + 2**-25`` for a value of sub-block j (16 values, largest
    magnitude ``a_j``) of a super-block with largest magnitude ``A``, plus float32 rounding of the quantization's
    division and of the dequantization's two products, ``4 * 2**-24 * (a_j + 32 d)``."""
    x = np.asarray(x, dtype=np.float32)
    b = np.abs(x.reshape(-1, 16, 16).astype(np.float64))
    a_j = b.max(axis=-1)                                                   # [n, 16]
    a = a_j.max(axis=-1, keepdims=True)                                    # [n, 1]
    d_max = a / (31 * 127) * (1 + 2.0**-10) + 2.0**-24
    bound = a_j / 62 + d_max / 2 + 4 * 2.0**-24 * (a_j + 32 * d_max)
    return np.broadcast_to(bound[..., None], b.shape).reshape(x.shape).astype(np.float32)


def quantize(x: np.ndarray, type_name: str) -> np.ndarray:
    """``x`` (float32) encoded as GGML type ``type_name`` (``F32``, ``F16``, ``Q8_0``, ``Q5_0``, ``Q4_K``, ...):
    gguf-py's ``gguf.quants.quantize`` for every type it has, :func:`quantize_q4_k` for Q4_K, :func:`quantize_q6_k`
    for Q6_K."""
    import gguf

    if type_name == "Q4_K":
        return quantize_q4_k(x)
    if type_name == "Q6_K":
        return quantize_q6_k(x)
    return gguf.quants.quantize(np.ascontiguousarray(x, dtype=np.float32),
                                gguf.GGMLQuantizationType[type_name])


def error_bound(x: np.ndarray, type_name: str) -> np.ndarray:
    """Per-value bound of the encoding error of ``x`` (float32) as ``type_name``, derived from its arithmetic:

    * F32: 0 (``x`` is float32 already);
    * F16: half an fp16 ulp, ``max(2**-11 |x|, 2**-25)`` (subnormals below 2**-14);
    * Q8_0 (32-value blocks, ``d = amax / 127`` stored in fp16, ``q = round(x / d)``): half a step of the unrounded
      ``d`` plus the fp16 rounding of ``d`` (``max(2**-11 d, 2**-25)``, subnormal below 2**-14) times the largest
      ``|q|``: ``d / 2 + 127 max(2**-11 d, 2**-25)``;
    * Q5_0 (``d = -x[argmax |x|] / 16``, ``q = trunc(x / d + 16.5)`` clipped to 0..31): a whole step where a value of
      the opposite sign reaches ``amax`` and is clipped from 32 to 31, so ``d + 16 max(2**-11 d, 2**-25)``;
    * Q4_K: :func:`q4_k_error_bound`; Q6_K: :func:`q6_k_error_bound`.
    """
    x = np.asarray(x, dtype=np.float32)
    if type_name == "F32":
        return np.zeros_like(x)
    if type_name in ("F16", "BF16"):
        ulp = 2.0**-8 if type_name == "BF16" else 2.0**-11
        return np.maximum(ulp * np.abs(x), 2.0**-25 if type_name == "F16" else 0.0)
    if type_name in ("Q8_0", "Q5_0"):
        qmax, half = (127, 0.5) if type_name == "Q8_0" else (16, 1.0)
        b = x.reshape(-1, 32)
        d = np.abs(b).max(axis=-1) / qmax
        bound = d * half + qmax * np.maximum(d * 2.0**-11, 2.0**-25) + 4 * 2.0**-24 * np.abs(b).max(axis=-1)
        return np.broadcast_to(bound[:, None], b.shape).reshape(x.shape)
    if type_name == "Q4_K":
        return q4_k_error_bound(x)
    if type_name == "Q6_K":
        return q6_k_error_bound(x)
    raise ValueError(f"no error bound for GGML type {type_name!r}")
