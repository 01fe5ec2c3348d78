"""PyTorch reference for DSA sparse MLA attention over a paged latent cache (what the Triton kernel computes).

Math (DeepSeek-V3.2 / GLM-5 in vLLM's absorbed "MQA" form, ``vllm/model_executor/layers/attention/mla_attention.py``):
for query token ``t`` and head ``h``, with ``S_t = {indices[t, j] : indices[t, j] >= 0}`` the cache slots the DSA
indexer selected (global slots, ``slot = block * block_size + offset``),

    s[t, h, j] = sm_scale * (q_nope[t, h] . c_kv[slot_j] + q_pe[t, h] . k_pe[slot_j])       (576-wide dot)
    out[t, h]  = sum_j softmax_j(s[t, h, :]) * c_kv[slot_j]                               (V = the latent, 512)
    lse[t, h]  = log sum_j exp(s[t, h, j])                                                (natural log)

where each cache row is ``c_kv (kv_lora_rank = 512) || k_pe (qk_rope_head_dim = 64)``. A repeated slot counts as
many times as it appears (FlashMLA and vLLM's kernels do the same). A row with no valid index gives ``out = 0`` and
``lse = -inf``.

On the log base of peers' LSE: FlashMLA's README and the reference notes describe ``flash_mla_sparse_fwd``'s ``lse`` as
base 2 (``lse_e = lse_2 * ln 2``), but the copy vendored in vLLM 0.26.0 returned a natural-log ``lse`` on the H200
(``results/h200/bench_kernel_h200.json``: ``flashmla_lse_err_if_natural`` ~3e-6 against this reference,
``flashmla_lse_err_if_base2`` ~2.8). :func:`flashmla_lse_to_natural` is the conversion for a base-2 build; check
which one you have before merging states.
"""
from __future__ import annotations

import torch


def sparse_mla_attention_ref(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    *,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference sparse MLA attention, computed in ``compute_dtype`` (float64 by default).

    Args:
        q_nope: ``[T, H, kv_lora_rank]`` query already absorbed into the latent space (any float dtype, any strides).
        q_pe: ``[T, H, rope]`` rotary part of the query.
        kv_cache: ``[num_blocks, block_size, kv_lora_rank + rope]`` paged latent cache (or ``[num_slots, D]``).
        indices: ``[T, topk]`` integer global cache slots; ``-1`` marks "no token" (anywhere in the row).
        sm_scale: softmax scale (GLM-5: ``(192 + 64) ** -0.5 = 1/16``).
        compute_dtype: float32 or float64.

    Returns:
        ``(out [T, H, kv_lora_rank] in q_nope.dtype, lse [T, H] float32, natural log)``.
    """
    T, H, dl = q_nope.shape
    kv = kv_cache.reshape(-1, kv_cache.shape[-1]).to(compute_dtype)
    idx = indices.long()
    valid = idx >= 0
    safe = torch.where(valid, idx, torch.zeros_like(idx))
    gathered = kv[safe]                                          # [T, topk, dl + dr]
    k = gathered
    v = gathered[..., :dl]
    q = torch.cat([q_nope.to(compute_dtype), q_pe.to(compute_dtype)], dim=-1)  # [T, H, dl + dr]
    scores = torch.einsum("thd,tkd->thk", q, k) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                         # -inf for empty rows
    probs = torch.exp(scores - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    out = torch.einsum("thk,tkd->thd", probs, v)
    return out.to(q_nope.dtype), lse.to(torch.float32)


def flashmla_lse_to_natural(lse_base2: torch.Tensor) -> torch.Tensor:
    """Convert FlashMLA's base-2 log-sum-exp (``flash_mla_sparse_fwd``) to natural log: ``lse * ln 2``."""
    return lse_base2 * 0.6931471805599453


def req_local_to_global_slots_ref(req_id_per_token: torch.Tensor, block_table: torch.Tensor,
                                  token_indices: torch.Tensor, block_size: int) -> torch.Tensor:
    """Plain PyTorch version of vLLM's ``triton_convert_req_index_to_global_index``
    (``vllm/v1/attention/backends/mla/sparse_utils.py``).

    Args:
        req_id_per_token: ``[T]`` request of each query token.
        block_table: ``[num_reqs, max_blocks]`` physical block ids per request.
        token_indices: ``[T, topk]`` request-local token positions chosen by the DSA indexer, ``-1`` = none.
        block_size: tokens per cache block.

    Returns:
        ``[T, topk]`` int32 global slots ``block_table[req, pos // bs] * bs + pos % bs``; ``-1`` where the position is
        ``-1`` or its block lies past the block table.
    """
    pos = token_indices.long()
    blk = torch.div(pos, block_size, rounding_mode="floor")
    valid = (pos >= 0) & (blk < block_table.shape[1])
    rows = block_table.long()[req_id_per_token.long()]                       # [T, max_blocks]
    phys = torch.gather(rows, 1, torch.where(valid, blk, torch.zeros_like(blk)))
    slots = phys * block_size + pos % block_size
    return torch.where(valid, slots, torch.full_like(slots, -1)).to(torch.int32)
