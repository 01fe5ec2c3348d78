"""GLM-5.3-Flash's KPool index-cache writers in Triton that compile on SM80/86: vLLM 0.33/0.34's
``kpool_compress_and_write_cache`` and ``kpool_decode_update_and_maybe_write_cache_batched``
(``vllm/models/glm5next/nvidia/ops/kpool_compress.py``).

Both compress ``pool_size`` consecutive keys of a request into one: per dimension ``softmax(score + ape)`` over the
pool's slots weights the keys (fp32), the sum is rounded to bf16, rotated by the Hadamard-128 transform, rounded to
bf16 again, quantized per vector to fp8 (:func:`sparse_mla.kernels.kpool_quant.quantize_vector`) and written into the
paged index cache (:func:`~sparse_mla.kernels.kpool_quant.write_pool_entry`: ``[num_blocks, block_size, 132]`` uint8,
``block_size * 128`` code bytes then ``block_size`` fp32 scales per block). The prefill kernel
(``_kpool_softmax_rotate_write_cache_kernel``, one program per pool) reads the pool's keys from ``[n, pool, 128]``;
the decode kernel (``_kpool_decode_update_batched_kernel``, one program per request) walks the request's ``next_n``
tokens in position order, completes a pool at its last slot from the request's tail ring (``[num_blocks, 2, ring,
128]``: keys, then gate scores) and the current token, and stashes every real token into the ring after that read.

vLLM's kernels store the codes as ``fp8e4nv`` (SM89+ only). These are vLLM's expression for expression, the codes
stored as ``uint8`` through :func:`sparse_mla.kernels.fp8.f32_to_e4m3`: the same bytes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .kpool_quant import hadamard128, quantize_vector, write_pool_entry


@triton.jit
def _kpool_compress_kernel(
    buf_u8_ptr, buf_fp32_ptr, slot_k_ptr, slot_score_ptr, ape_ptr, loc_ptr, write_mask_ptr, compressed_k_ptr,
    compressed_scale_ptr, slot_k_stride_0, slot_k_stride_1, slot_score_stride_0, slot_score_stride_1, ape_stride_0,
    PAGE_SIZE: tl.constexpr, BUF_NUMEL_PER_PAGE: tl.constexpr, POOL_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
    S_OFFSET_NBYTES_IN_PAGE: tl.constexpr, ROUND_SCALE: tl.constexpr, MX_SCALE: tl.constexpr,
    HAS_WRITE_MASK: tl.constexpr, RETURN_COMPRESSED: tl.constexpr, WRITE_CACHE: tl.constexpr,
    BLOCK_D: tl.constexpr, HW: tl.constexpr,
):
    """vLLM's ``_kpool_softmax_rotate_write_cache_kernel``, the codes stored as ``uint8``."""
    row = tl.program_id(0)
    do_write = True
    if HAS_WRITE_MASK:
        do_write = tl.load(write_mask_ptr + row)
    offs = tl.arange(0, BLOCK_D)
    mask = (offs < HEAD_DIM) & do_write
    score_row = slot_score_ptr + row * slot_score_stride_0 + offs
    max_score = tl.full((BLOCK_D,), -float("inf"), tl.float32)
    for slot in tl.static_range(0, POOL_SIZE):
        score = tl.load(score_row + slot * slot_score_stride_1, mask=mask, other=0.0).to(tl.float32)
        score += tl.load(ape_ptr + slot * ape_stride_0 + offs, mask=mask, other=0.0).to(tl.float32)
        max_score = tl.maximum(max_score, score)
    acc = tl.full((BLOCK_D,), 0.0, tl.float32)
    denom = tl.full((BLOCK_D,), 0.0, tl.float32)
    for slot in tl.static_range(0, POOL_SIZE):
        score = tl.load(score_row + slot * slot_score_stride_1, mask=mask, other=0.0).to(tl.float32)
        score += tl.load(ape_ptr + slot * ape_stride_0 + offs, mask=mask, other=0.0).to(tl.float32)
        prob = tl.exp(score - max_score)
        denom += prob
        k = tl.load(slot_k_ptr + row * slot_k_stride_0 + slot * slot_k_stride_1 + offs, mask=mask,
                    other=0.0).to(tl.float32)
        acc += k * prob
    x = acc / denom
    x = tl.where(do_write, x, 0.0).to(tl.bfloat16).to(tl.float32)
    x = hadamard128(x).to(tl.bfloat16).to(tl.float32)
    codes, scale = quantize_vector(x, ROUND_SCALE, HW)
    if WRITE_CACHE:
        loc = tl.load(loc_ptr + row, mask=do_write, other=0)
        write_pool_entry(buf_u8_ptr, buf_fp32_ptr, loc, offs, codes, scale, mask, do_write, PAGE_SIZE,
                         BUF_NUMEL_PER_PAGE, HEAD_DIM, S_OFFSET_NBYTES_IN_PAGE, MX_SCALE)
    if RETURN_COMPRESSED:
        tl.store(compressed_k_ptr + row * HEAD_DIM + offs, codes, mask=offs < HEAD_DIM)
        tl.store(compressed_scale_ptr + row, scale)


def launch_kpool_compress(kv_cache: torch.Tensor, slot_k: torch.Tensor, slot_score: torch.Tensor, ape: torch.Tensor,
                          loc: torch.Tensor, write_mask: torch.Tensor | None, *, round_scale: bool, mx_scale: bool,
                          return_compressed: bool, write_cache: bool, hw: bool):
    """vLLM's ``kpool_compress_and_write_cache`` after its checks: pools compressed into fp8 keys, written at ``loc``.

    Args:
        kv_cache: the index cache, ``[num_blocks, block_size, head_dim + 4]`` uint8, written in place.
        slot_k, slot_score: ``[n_pools, pool_size, head_dim]`` contiguous (vLLM: bf16) keys and gate scores.
        ape: ``[pool_size, head_dim]`` contiguous float32 per-slot bias.
        loc: ``[n_pools]`` int64 flat cache slots.
        write_mask: ``[n_pools]`` bool (pools to write), or None for all.
        round_scale: power-of-two scales (forced by ``mx_scale``); mx_scale: SM100's packed UE8M0 scales.
        return_compressed: also return ``(codes [n_pools, head_dim] float8_e4m3fn, scale [n_pools] float32)``.
        write_cache: write ``kv_cache``; hw: hardware fp8 conversion (SM89+), else software rounding.

    Returns:
        The compressed keys and scales where ``return_compressed``, else None.
    """
    n, pool_size, head_dim = slot_k.shape
    page_size = kv_cache.shape[1]
    dev = slot_k.device
    has_write_mask = write_mask is not None
    if not has_write_mask:
        write_mask = torch.empty((1,), dtype=torch.bool, device=dev)
    codes = torch.empty((n, head_dim) if return_compressed else (0,), dtype=torch.uint8, device=dev)
    scales = torch.empty((n,) if return_compressed else (0,), dtype=torch.float32, device=dev)
    if n == 0:
        return (codes.view(torch.float8_e4m3fn), scales) if return_compressed else None
    buf = kv_cache.view(torch.uint8)
    compressed_k, compressed_scale = (codes, scales) if return_compressed else (buf, buf.view(torch.float32))
    _kpool_compress_kernel[(n,)](
        buf, buf.view(torch.float32), slot_k, slot_score, ape, loc, write_mask, compressed_k, compressed_scale,
        slot_k.stride(0), slot_k.stride(1), slot_score.stride(0), slot_score.stride(1), ape.stride(0),
        PAGE_SIZE=page_size, BUF_NUMEL_PER_PAGE=buf.stride(0), POOL_SIZE=pool_size, HEAD_DIM=head_dim,
        S_OFFSET_NBYTES_IN_PAGE=page_size * head_dim, ROUND_SCALE=round_scale or mx_scale, MX_SCALE=mx_scale,
        HAS_WRITE_MASK=has_write_mask, RETURN_COMPRESSED=return_compressed, WRITE_CACHE=write_cache,
        BLOCK_D=triton.next_power_of_2(head_dim), HW=hw)
    return (codes.view(torch.float8_e4m3fn), scales) if return_compressed else None


@triton.jit
def _pool_from_ring(tail_kv_ptr, block_base, ape_ptr, ape_stride_0, key, score_current, slot, pool_logical_start,
                    offs, dim_mask, POOL_SIZE: tl.constexpr, RING: tl.constexpr, KPOOL_HEAD: tl.constexpr,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """The decode kernel's softmax-weighted pool sum (fp32) from the tail ring, slot ``slot`` the current token."""
    max_score = tl.full((BLOCK_D,), -float("inf"), tl.float32)
    for pool_slot in tl.static_range(0, POOL_SIZE):
        phys = (pool_logical_start + pool_slot) % RING
        score_buf = tl.load(tail_kv_ptr + block_base + KPOOL_HEAD + phys * HEAD_DIM + offs, mask=dim_mask,
                            other=0.0).to(tl.float32)
        score = tl.where(pool_slot == slot, score_current, score_buf)
        score += tl.load(ape_ptr + pool_slot * ape_stride_0 + offs, mask=dim_mask, other=0.0).to(tl.float32)
        max_score = tl.maximum(max_score, score)
    acc = tl.full((BLOCK_D,), 0.0, tl.float32)
    denom = tl.full((BLOCK_D,), 0.0, tl.float32)
    for pool_slot in tl.static_range(0, POOL_SIZE):
        is_current = pool_slot == slot
        phys = (pool_logical_start + pool_slot) % RING
        score_buf = tl.load(tail_kv_ptr + block_base + KPOOL_HEAD + phys * HEAD_DIM + offs, mask=dim_mask,
                            other=0.0).to(tl.float32)
        score = tl.where(is_current, score_current, score_buf)
        score += tl.load(ape_ptr + pool_slot * ape_stride_0 + offs, mask=dim_mask, other=0.0).to(tl.float32)
        prob = tl.exp(score - max_score)
        denom += prob
        k_buf = tl.load(tail_kv_ptr + block_base + phys * HEAD_DIM + offs, mask=dim_mask, other=0.0).to(tl.float32)
        acc += tl.where(is_current, key, k_buf) * prob
    return acc / denom


@triton.jit
def _kpool_decode_kernel(
    buf_u8_ptr, buf_fp32_ptr, tail_kv_ptr, tail_slot_mapping_ptr, key_ptr, key_stride_b, key_stride_t,
    slot_score_ptr, ss_stride_b, ss_stride_t, ape_ptr, ape_stride_0, slot_mapping_ptr, positions_ptr, NEXT_N,
    PAGE_SIZE: tl.constexpr, BUF_NUMEL_PER_PAGE: tl.constexpr, POOL_SIZE: tl.constexpr, RING: tl.constexpr,
    TAIL_BLOCK_ELEMS: tl.constexpr, KPOOL_HEAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    S_OFFSET_NBYTES_IN_PAGE: tl.constexpr, ROUND_SCALE: tl.constexpr, MX_SCALE: tl.constexpr,
    BLOCK_D: tl.constexpr, HW: tl.constexpr,
):
    """vLLM's ``_kpool_decode_update_batched_kernel``, the codes stored as ``uint8``: one program per request, its
    tokens in order (a completion reads what earlier tokens of the same launch stashed)."""
    req = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    dim_mask = offs < HEAD_DIM
    for t in tl.range(0, NEXT_N):
        idx = req * NEXT_N + t
        cache_loc = tl.load(slot_mapping_ptr + idx)
        pos = tl.load(positions_ptr + idx)
        safe_pos = tl.maximum(pos, 0)
        pos_valid = (cache_loc >= 0) & (pos >= 0)
        slot = safe_pos % POOL_SIZE
        phys_slot = safe_pos % RING
        tail_slot = tl.load(tail_slot_mapping_ptr + idx)
        block_base = (tl.maximum(tail_slot, 0).to(tl.int64) // RING) * TAIL_BLOCK_ELEMS
        stash_valid = (pos >= 0) & (tail_slot >= 0)
        key = tl.load(key_ptr + req * key_stride_b + t * key_stride_t + offs, mask=dim_mask,
                      other=0.0).to(tl.float32)
        score_current = tl.load(slot_score_ptr + req * ss_stride_b + t * ss_stride_t + offs, mask=dim_mask,
                                other=0.0).to(tl.float32)
        if pos_valid & (slot == POOL_SIZE - 1):
            x = _pool_from_ring(tail_kv_ptr, block_base, ape_ptr, ape_stride_0, key, score_current, slot,
                                safe_pos - slot, offs, dim_mask, POOL_SIZE, RING, KPOOL_HEAD, HEAD_DIM, BLOCK_D)
            x = x.to(tl.bfloat16).to(tl.float32)
            x = hadamard128(x).to(tl.bfloat16).to(tl.float32)
            codes, scale = quantize_vector(x, ROUND_SCALE, HW)
            write_pool_entry(buf_u8_ptr, buf_fp32_ptr, cache_loc.to(tl.int64), offs, codes, scale, dim_mask, True,
                             PAGE_SIZE, BUF_NUMEL_PER_PAGE, HEAD_DIM, S_OFFSET_NBYTES_IN_PAGE, MX_SCALE)
        update_mask = dim_mask & stash_valid
        tl.store(tail_kv_ptr + block_base + phys_slot * HEAD_DIM + offs, key, mask=update_mask)
        tl.store(tail_kv_ptr + block_base + KPOOL_HEAD + phys_slot * HEAD_DIM + offs, score_current,
                 mask=update_mask)


def launch_kpool_decode(kv_cache: torch.Tensor, tail_kv_cache: torch.Tensor, tail_slot_mapping: torch.Tensor,
                        key: torch.Tensor, slot_score: torch.Tensor, ape: torch.Tensor, slot_mapping: torch.Tensor,
                        positions: torch.Tensor, pool_size: int, *, round_scale: bool, mx_scale: bool,
                        hw: bool) -> None:
    """vLLM's ``kpool_decode_update_and_maybe_write_cache_batched`` after its checks, in place.

    Args:
        kv_cache: the index cache, ``[num_blocks, block_size, head_dim + 4]`` uint8.
        tail_kv_cache: ``[num_tail_blocks, 2, ring, head_dim]`` (vLLM: bf16; ``ring`` a multiple of ``pool_size``).
        tail_slot_mapping, slot_mapping, positions: ``[B, next_n]`` int32, contiguous (negative: padding).
        key, slot_score: ``[B, next_n, head_dim]`` (vLLM: bf16), unit last stride.
        ape: ``[pool_size, head_dim]`` float32.
        round_scale, mx_scale, hw: as :func:`launch_kpool_compress`.
    """
    num_requests, next_n, head_dim = key.shape
    if num_requests == 0 or next_n == 0:
        return
    buf = kv_cache.view(torch.uint8)
    page_size = buf.shape[1]
    _kpool_decode_kernel[(num_requests,)](
        buf, buf.view(torch.float32), tail_kv_cache, tail_slot_mapping, key, key.stride(0), key.stride(1),
        slot_score, slot_score.stride(0), slot_score.stride(1), ape, ape.stride(0), slot_mapping, positions, next_n,
        PAGE_SIZE=page_size, BUF_NUMEL_PER_PAGE=buf.stride(0), POOL_SIZE=pool_size, RING=tail_kv_cache.shape[2],
        TAIL_BLOCK_ELEMS=tail_kv_cache.stride(0), KPOOL_HEAD=tail_kv_cache.stride(1), HEAD_DIM=head_dim,
        S_OFFSET_NBYTES_IN_PAGE=page_size * head_dim, ROUND_SCALE=round_scale or mx_scale, MX_SCALE=mx_scale,
        BLOCK_D=triton.next_power_of_2(head_dim), HW=hw)
