"""GLM-5.3-Flash's three KPool kernels that store fp8 (vLLM 0.33/0.34,
``vllm/models/glm5next/nvidia/ops/kpool_compress.py``), in vLLM's call signatures, on kernels that compile on SM80/86
(:mod:`sparse_mla.kernels.kpool_quant`, :mod:`sparse_mla.kernels.kpool_cache`: the fp8 codes written as bytes).

The indexer hook (:mod:`sparse_mla.vllm_plugin.indexer`) puts them where vLLM's callers look them up, only where the
GPU has no fp8 conversion (the line adapter's ``FP8_STORE_HOOKS``): ``fwht128_quant_fp8`` in
``vllm.models.glm5next.common.attention`` (imported there by name; the indexer query's rotation and quantization), the
two cache writers in the ``kpool_compress`` module itself (``sparse_indexer.py`` calls them as
``kpool_ops.<name>``). Same checks, outputs and bytes as vLLM's; ``mqa_logits_use_mx_scales()`` is vLLM's (False
below SM100, so never true where these are installed).
"""
# ``from __future__ import annotations`` as in vLLM's module: the signatures must equal vLLM's, annotations included.
from __future__ import annotations

import torch

from ..kernels.kpool_cache import launch_kpool_compress, launch_kpool_decode
from ..kernels.kpool_quant import KPOOL_HEAD_DIM, launch_fwht128_quant

INDEX_HEAD_DIM = KPOOL_HEAD_DIM


def _mx_scales() -> bool:
    from vllm.utils.deep_gemm import mqa_logits_use_mx_scales

    return mqa_logits_use_mx_scales()


def fwht128_quant_fp8(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``fwht128_quant_fp8``: ``q [rows, 128]`` bf16 contiguous -> ``(q_fp8 [rows, 128] float8_e4m3fn,
    scale [rows, 1] float32)``, rows Hadamard-rotated and quantized with ue8m0 scales
    (:func:`sparse_mla.kernels.kpool_quant.launch_fwht128_quant`). AssertionError on other shapes or dtypes, as
    vLLM's."""
    assert q.ndim == 2 and q.shape[1] == 128, q.shape
    assert q.dtype == torch.bfloat16
    assert q.is_contiguous()
    return launch_fwht128_quant(q, hw=False)


def kpool_compress_and_write_cache(
    kv_cache: torch.Tensor,
    slot_k: torch.Tensor,
    slot_score: torch.Tensor,
    ape: torch.Tensor,
    loc: torch.Tensor,
    pool_size: int,
    head_dim: int = INDEX_HEAD_DIM,
    write_mask: torch.Tensor | None = None,
    round_scale: bool = True,
    return_compressed: bool = False,
    write_cache: bool = True,
):
    """vLLM's ``kpool_compress_and_write_cache``: each pool of ``slot_k [n, pool_size, head_dim]`` bf16 (gate
    ``slot_score`` alike, ``ape [pool_size, head_dim]`` fp32) compressed to one fp8 key and written into ``kv_cache``
    (``[num_blocks, block_size, head_dim + 4]`` uint8) at ``loc [n]`` int64 where ``write_mask`` allows
    (:func:`sparse_mla.kernels.kpool_cache.launch_kpool_compress`). Returns ``(codes [n, head_dim] float8_e4m3fn,
    scale [n] float32)`` for ``return_compressed``, else None. AssertionError where vLLM's asserts."""
    assert slot_k.ndim == 3
    assert slot_score.shape == slot_k.shape
    assert ape.shape == slot_k.shape[1:]
    assert slot_k.shape[2] == head_dim
    assert slot_k.dtype == torch.bfloat16
    assert ape.dtype == torch.float32
    assert kv_cache.dtype == torch.uint8
    assert loc.dtype == torch.int64
    assert write_cache or return_compressed
    if write_mask is not None:
        assert write_mask.shape == (slot_k.shape[0],)
        write_mask = write_mask.contiguous()
        assert not return_compressed
    return launch_kpool_compress(kv_cache, slot_k.contiguous(), slot_score.contiguous(), ape.contiguous(),
                                 loc.contiguous(), write_mask, round_scale=round_scale,
                                 mx_scale=write_cache and slot_k.shape[0] > 0 and _mx_scales(),
                                 return_compressed=return_compressed, write_cache=write_cache, hw=False)


def kpool_decode_update_and_maybe_write_cache_batched(
    kv_cache: torch.Tensor,
    tail_kv_cache: torch.Tensor,
    tail_slot_mapping: torch.Tensor,
    key: torch.Tensor,
    slot_score: torch.Tensor,
    ape: torch.Tensor,
    slot_mapping: torch.Tensor,
    positions: torch.Tensor,
    pool_size: int,
    head_dim: int = INDEX_HEAD_DIM,
    round_scale: bool = True,
) -> None:
    """vLLM's ``kpool_decode_update_and_maybe_write_cache_batched``: for each of ``num_requests`` requests, its
    ``next_n`` tokens (``key``/``slot_score [B, next_n, head_dim]`` bf16; ``tail_slot_mapping``, ``slot_mapping``,
    ``positions [B, next_n]`` int32) stashed into the tail ring ``tail_kv_cache [blocks, 2, ring, head_dim]`` bf16,
    each completed pool written into ``kv_cache`` as one fp8 key
    (:func:`sparse_mla.kernels.kpool_cache.launch_kpool_decode`). In place; AssertionError where vLLM's asserts."""
    num_requests, next_n = key.shape[0], key.shape[1]
    if num_requests == 0 or next_n == 0:
        return
    assert tail_kv_cache.ndim == 4
    assert tail_kv_cache.shape[1] == 2
    ring = tail_kv_cache.shape[2]
    assert ring >= pool_size and ring % pool_size == 0, (ring, pool_size)
    assert tail_kv_cache.shape[3] == head_dim
    assert tail_kv_cache.dtype == torch.bfloat16
    assert key.ndim == 3 and key.shape[2] == head_dim
    assert slot_score.shape == key.shape
    assert ape.shape == (pool_size, head_dim)
    for t in (tail_slot_mapping, slot_mapping, positions):
        assert t.shape == (num_requests, next_n)
    assert key.dtype == torch.bfloat16
    assert slot_score.dtype == torch.bfloat16
    assert ape.dtype == torch.float32
    assert kv_cache.dtype == torch.uint8
    launch_kpool_decode(kv_cache, tail_kv_cache, tail_slot_mapping.contiguous(), key, slot_score, ape,
                        slot_mapping.contiguous(), positions.contiguous(), pool_size, round_scale=round_scale,
                        mx_scale=_mx_scales(), hw=False)
