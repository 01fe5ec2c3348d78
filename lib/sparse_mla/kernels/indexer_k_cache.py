"""The DSA indexer's key into its paged fp8 cache, in Triton that compiles on SM80/86: vLLM 0.33's
``_fp8_quant_and_cache_write``.

vLLM 0.33 normalizes, ropes, quantizes and caches the indexer key in one kernel (``_fused_norm_rope_kernel``, program
0, ``vllm/models/deepseek_v32/common/kernels.py``). Its last step, ``_fp8_quant_and_cache_write``, takes the fp32 key
row ``k`` (``index_head_dim`` 128) of a token whose MLA ``slot_mapping`` entry is not negative and writes, at the
token's indexer slot ``s`` (block ``s // block_size``, row ``s % block_size``):

* one ue8m0 scale ``scale = 2 ** ceil(log2(max(amax, 1e-4) / 448))`` (``div_rn``), as an fp32 at byte
  ``block_size * 128 + row * 4`` of the block;
* ``e4m3(k / scale)`` (``div_rn``) at bytes ``row * 128 + [0, 128)`` of the block (vLLM's CUDA layout; the shuffled
  layout is ROCm's, the packed MX scales SM100's: neither is written here).

The fp32 key comes from vLLM's own kernel, run with no indexer cache and an fp32 ``index_k_out`` (which then receives
the row it would have quantized; that program stores no fp8 and builds for SM80). The conversion goes through
:func:`sparse_mla.kernels.fp8.f32_to_e4m3` (software round-to-nearest-even below SM89).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fp8 import E4M3_MAX, f32_to_e4m3


@triton.jit
def _indexer_k_cache_kernel(
    k, k_s0, slot_mapping, indexer_slot_mapping, cache, cache_scale, block_size, block_stride,
    HEAD_DIM: tl.constexpr, FP8_MAX: tl.constexpr, HW: tl.constexpr,
):
    """One token: vLLM 0.33's ``_fp8_quant_and_cache_write`` (unshuffled, fp32 scales), codes through
    ``f32_to_e4m3``."""
    tok = tl.program_id(0).to(tl.int64)
    if tl.load(slot_mapping + tok) >= 0:
        offs = tl.arange(0, HEAD_DIM)
        vals = tl.load(k + tok * k_s0 + offs).to(tl.float32)
        amax = tl.max(tl.abs(vals))
        scale = tl.div_rn(tl.maximum(amax, 1e-4), FP8_MAX)
        scale = tl.math.exp2(tl.math.ceil(tl.math.log2(scale)))
        slot = tl.load(indexer_slot_mapping + tok).to(tl.int64)
        block_start = (slot // block_size) * block_stride
        row = slot % block_size
        tl.store(cache + block_start + row * HEAD_DIM + offs, f32_to_e4m3(tl.div_rn(vals, scale), HW))
        tl.store(cache_scale + (block_start + block_size * HEAD_DIM + row * 4) // 4, scale)


def launch_indexer_k_cache(k: torch.Tensor, slot_mapping: torch.Tensor, indexer_slot_mapping: torch.Tensor,
                           cache: torch.Tensor, *, hw: bool) -> None:
    """Quantize and write the indexer keys into vLLM's paged fp8 indexer cache, in place, without checks.

    Args:
        k: ``[T, 128]`` float32 key rows (normalized and roped).
        slot_mapping: ``[T]`` int64 MLA slots; a token whose entry is negative (padding; under DCP, another rank's)
            is skipped, as vLLM's kernel skips it.
        indexer_slot_mapping: ``[T]`` int64 indexer-cache slots of the written tokens.
        cache: vLLM's indexer cache, ``[num_blocks, block_size, 132]`` uint8 (or its ``float8_e4m3fn`` view),
            contiguous per block: ``block_size * 128`` code bytes, then ``block_size`` fp32 scales.
        hw: hardware fp8 conversion (SM89+); False: the software rounding (SM80/86, the interpreter).
    """
    T = k.shape[0]
    if T == 0:
        return
    u8 = cache.view(torch.uint8)
    _indexer_k_cache_kernel[(T,)](
        k, k.stride(0), slot_mapping, indexer_slot_mapping, u8, u8.view(torch.float32), cache.shape[1],
        u8.stride(0), HEAD_DIM=k.shape[1], FP8_MAX=E4M3_MAX, HW=hw, num_warps=1)
