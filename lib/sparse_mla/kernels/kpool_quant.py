"""GLM-5.3-Flash's KPool fp8 quantization in Triton that compiles on SM80/86: the Hadamard-128 rotation, the
per-vector ue8m0 fp8 quantization and the index-cache write of vLLM 0.33/0.34's
``vllm/models/glm5next/nvidia/ops/kpool_compress.py``, and its query stand-in ``fwht128_quant_fp8``.

vLLM's kernels there store ``fp8e4nv`` (``tl.store`` of fp32 values into a ``float8_e4m3fn`` pointer), which Triton
compiles only from SM89. The functions here are vLLM's expression for expression (``_hadamard128_stage``,
``_hadamard128``, ``_fwht_stage``, the absmax quantization, ``pack_ue8m0_x4``), with the codes converted by
:func:`sparse_mla.kernels.fp8.f32_to_e4m3` (round to nearest even, as the hardware's ``cvt.rn.satfinite``; the inputs
are clamped to +-448 first, as vLLM clamps them) and stored as ``uint8``. So where vLLM's kernel is deterministic
(it is: no atomics, one program per row) the bytes are the same.

* :func:`quantize_vector`: ``absmax = max(max|x|, 1e-4)``; ``scale = 2 ** ceil(log2(absmax / 448))`` (``ROUND_SCALE``)
  or ``absmax / 448``; ``codes = e4m3(clamp(x / scale, -448, 448))``.
* :func:`write_pool_entry`: code bytes at ``page * page_bytes + row * HEAD_DIM``, the scale as fp32 (or, for SM100's
  MX scales, four equal UE8M0 bytes) at byte ``page * page_bytes + PAGE_SIZE * HEAD_DIM + 4 * row``.
* :func:`launch_fwht128_quant`: ``fwht128_quant_fp8`` (``_fwht_quant_kernel``): rows of 128 rotated in fp32, rounded
  to bf16, quantized with a power-of-two scale.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fp8 import f32_to_e4m3

#: GLM-5.3-Flash's indexer head dimension (vLLM's ``INDEX_HEAD_DIM``).
KPOOL_HEAD_DIM = 128


@triton.jit
def _hadamard128_stage(x, GROUPS: tl.constexpr, STRIDE: tl.constexpr):
    x3 = tl.reshape(x, (GROUPS, 2, STRIDE))
    x3 = tl.trans(x3, 0, 2, 1)
    a, b = tl.split(x3)
    x3 = tl.join(a + b, a - b)
    x3 = tl.trans(x3, 0, 2, 1)
    return tl.reshape(x3, (128,))


@triton.jit
def hadamard128(x):
    """vLLM's ``_hadamard128``: the orthonormal Walsh-Hadamard transform of a ``[128]`` fp32 vector (7 butterfly
    stages, then ``* 1/sqrt(128)``)."""
    x = _hadamard128_stage(x, 64, 1)
    x = _hadamard128_stage(x, 32, 2)
    x = _hadamard128_stage(x, 16, 4)
    x = _hadamard128_stage(x, 8, 8)
    x = _hadamard128_stage(x, 4, 16)
    x = _hadamard128_stage(x, 2, 32)
    x = _hadamard128_stage(x, 1, 64)
    return x * 0.08838834764831845  # 1/sqrt(128)


@triton.jit
def _fwht_stage(x, N: tl.constexpr, GROUPS: tl.constexpr, STRIDE: tl.constexpr):
    x3 = tl.reshape(x, (GROUPS, 2, STRIDE))
    x3 = tl.trans(x3, 0, 2, 1)
    a, b = tl.split(x3)
    x3 = tl.join(a + b, a - b)
    x3 = tl.trans(x3, 0, 2, 1)
    return tl.reshape(x3, (N,))


@triton.jit
def quantize_vector(x, ROUND_SCALE: tl.constexpr, HW: tl.constexpr):
    """vLLM's per-vector absmax quantization of the pool kernels: ``(codes uint8 [BLOCK_D], scale fp32)``."""
    fp8_max = 448.0
    fp8_max_inv = 1.0 / fp8_max
    absmax = tl.max(tl.abs(x), axis=0)
    absmax = tl.maximum(absmax, 1e-4)
    if ROUND_SCALE:
        scale = tl.exp2(tl.ceil(tl.log2(absmax * fp8_max_inv)))
    else:
        scale = absmax * fp8_max_inv
    quantized = x / scale
    quantized = tl.minimum(tl.maximum(quantized, -fp8_max), fp8_max)
    return f32_to_e4m3(quantized, HW), scale


@triton.jit
def write_pool_entry(buf_u8_ptr, buf_fp32_ptr, loc, offs, codes, scale, code_mask, scale_mask,
                     PAGE_SIZE: tl.constexpr, BUF_NUMEL_PER_PAGE: tl.constexpr, HEAD_DIM: tl.constexpr,
                     S_OFFSET_NBYTES_IN_PAGE: tl.constexpr, MX_SCALE: tl.constexpr):
    """vLLM's cache write of one pool key at flat slot ``loc`` (int64): codes and scale (``pack_ue8m0_x4`` for MX)."""
    loc_page_index = loc // PAGE_SIZE
    loc_token_offset_in_page = loc % PAGE_SIZE
    out_k_offsets = loc_page_index * BUF_NUMEL_PER_PAGE + loc_token_offset_in_page * HEAD_DIM + offs
    out_s_offset = (loc_page_index * BUF_NUMEL_PER_PAGE // 4 + S_OFFSET_NBYTES_IN_PAGE // 4
                    + loc_token_offset_in_page)
    tl.store(buf_u8_ptr + out_k_offsets, codes, mask=code_mask)
    if MX_SCALE:
        packed = ((scale.to(tl.int32, bitcast=True) >> 23) & 0xFF) * 0x01010101
        tl.store(buf_fp32_ptr.to(tl.pointer_type(tl.int32)) + out_s_offset, packed, mask=scale_mask)
    else:
        tl.store(buf_fp32_ptr + out_s_offset, scale, mask=scale_mask)


@triton.jit
def _fwht_quant_kernel(q_ptr, qout_ptr, sout_ptr, n_rows, BLOCK_R: tl.constexpr, HW: tl.constexpr):
    """vLLM's ``_fwht_quant_kernel``, the codes stored as ``uint8``."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < n_rows
    offs = tl.arange(0, 128)
    x = tl.load(q_ptr + rows[:, None] * 128 + offs[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
    N: tl.constexpr = BLOCK_R * 128
    x = tl.reshape(x, (N,))
    x = _fwht_stage(x, N, BLOCK_R * 64, 1)
    x = _fwht_stage(x, N, BLOCK_R * 32, 2)
    x = _fwht_stage(x, N, BLOCK_R * 16, 4)
    x = _fwht_stage(x, N, BLOCK_R * 8, 8)
    x = _fwht_stage(x, N, BLOCK_R * 4, 16)
    x = _fwht_stage(x, N, BLOCK_R * 2, 32)
    x = _fwht_stage(x, N, BLOCK_R, 64)
    x = x * 0.08838834764831845  # 1/sqrt(128), exact in fp32
    x = x.to(tl.bfloat16).to(tl.float32)
    x = tl.reshape(x, (BLOCK_R, 128))
    absmax = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-4)
    scale = tl.exp2(tl.ceil(tl.log2(absmax * (1.0 / 448.0))))
    y = tl.minimum(tl.maximum(x / scale[:, None], -448.0), 448.0)
    tl.store(qout_ptr + rows[:, None] * 128 + offs[None, :], f32_to_e4m3(y, HW), mask=rmask[:, None])
    tl.store(sout_ptr + rows, scale, mask=rmask)


def launch_fwht128_quant(q: torch.Tensor, *, hw: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``fwht128_quant_fp8`` (``kpool_compress.py``) without its checks: each 128-wide row rotated by the
    Hadamard-128 transform in fp32, rounded to bf16, quantized with a power-of-two (ue8m0) scale.

    Args:
        q: ``[rows, 128]`` contiguous, any float dtype (vLLM passes bf16).
        hw: hardware fp8 conversion (SM89+); False: the software rounding (SM80/86, the interpreter).

    Returns:
        ``(codes [rows, 128] float8_e4m3fn (a uint8 tensor's view), scale [rows, 1] float32)``.
    """
    n_rows = q.shape[0]
    codes = torch.empty((n_rows, 128), dtype=torch.uint8, device=q.device)
    scale = torch.empty((n_rows, 1), dtype=torch.float32, device=q.device)
    if n_rows:
        BLOCK_R = 32
        _fwht_quant_kernel[(triton.cdiv(n_rows, BLOCK_R),)](q, codes, scale, n_rows, BLOCK_R=BLOCK_R, HW=hw,
                                                           num_warps=2)
    return codes.view(torch.float8_e4m3fn), scale
