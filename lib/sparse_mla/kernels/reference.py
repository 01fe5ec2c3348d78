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

The ``fp8_ds_mla`` cache (vLLM's ``FLASHMLA_SPARSE`` layout, ``vllm/v1/attention/backends/mla/flashmla_sparse.py``):
656 bytes per token, ``[512 e4m3 codes][4 fp32 scales][64 bf16 rope]``, ``c_kv[d] = e4m3(code[d]) * scale[d // 128]``.
:func:`fp8_ds_mla_decode_ref` reads it with PyTorch's own ``float8_e4m3fn`` (no code shared with the Triton kernel);
:func:`fp8_ds_mla_encode_ref` writes it the way vLLM's ``concat_and_cache_mla(..., "fp8_ds_mla", ...)`` is documented
to (``scale = max(amax / 448, FLT_MIN)`` per tile, ``code = e4m3(x / scale)`` saturated, round to nearest even).

The NoPE head's 528-byte ``fp8_ds_mla`` row (GLM-5.3-Flash, vLLM 0.33/0.34; :mod:`sparse_mla.layouts`): the same 512
codes and 4 fp32 scales, no rope part. :func:`fp8_ds_mla_decode_ref` reads it too (by its width);
:func:`fp8_ds_mla_encode_vllm034_ref` writes it as vLLM 0.34.0's ``concat_and_cache_ds_mla_kernel`` does (read from the
kernel's SASS: power-of-two scales), which no Python or torch code in vLLM does.
"""
from __future__ import annotations

import torch

from ..layouts import CACHE_LAYOUTS, FP8_DS_MLA_NOPE_ROW_BYTES, FP8_DS_MLA_ROW_BYTES, LN2


def sparse_mla_attention_ref(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    *,
    compute_dtype: torch.dtype = torch.float64,
    kv_cache_dtype: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference sparse MLA attention, computed in ``compute_dtype`` (float64 by default).

    Args:
        q_nope: ``[T, H, kv_lora_rank]`` query already absorbed into the latent space (any float dtype, any strides).
        q_pe: ``[T, H, rope]`` rotary part of the query.
        kv_cache: ``[num_blocks, block_size, kv_lora_rank + rope]`` paged latent cache (or ``[num_slots, D]``); with
            ``kv_cache_dtype="fp8_ds_mla"`` a ``uint8 [..., 656]`` cache, dequantized by :func:`fp8_ds_mla_decode_ref`
            (only the gathered rows, in ``compute_dtype``).
        indices: ``[T, topk]`` integer global cache slots; ``-1`` marks "no token" (anywhere in the row).
        sm_scale: softmax scale (GLM-5: ``(192 + 64) ** -0.5 = 1/16``).
        compute_dtype: float32 or float64.
        kv_cache_dtype: ``"auto"`` (a float cache) or ``"fp8_ds_mla"``.

    Returns:
        ``(out [T, H, kv_lora_rank] in q_nope.dtype, lse [T, H] float32, natural log)``.
    """
    T, H, dl = q_nope.shape
    gathered, valid = gather_rows_ref(kv_cache, indices, kv_cache_dtype, compute_dtype)
    k = gathered
    v = gathered[..., :dl]
    q = torch.cat([q_nope.to(compute_dtype), q_pe.to(compute_dtype)], dim=-1)  # [T, H, dl + dr]
    scores = torch.einsum("thd,tkd->thk", q, k) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                         # -inf for empty rows
    probs = torch.exp(scores - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    out = torch.einsum("thk,tkd->thd", probs, v)
    return out.to(q_nope.dtype), lse.to(torch.float32)


def gather_rows_ref(kv_cache: torch.Tensor, indices: torch.Tensor, kv_cache_dtype: str = "auto",
                    dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """The cache rows each token selected, ``[T, topk, 576]`` (``[T, topk, 512]`` for a NoPE head's rows) in
    ``dtype`` (fp8_ds_mla rows decoded by :func:`fp8_ds_mla_decode_ref`; row 0 where the index is -1), and ``valid
    [T, topk]`` (index >= 0)."""
    if kv_cache_dtype not in CACHE_LAYOUTS:
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r}: one of {', '.join(CACHE_LAYOUTS)}")
    idx = indices.long()
    valid = idx >= 0
    safe = torch.where(valid, idx, torch.zeros_like(idx))
    rows = kv_cache.reshape(-1, kv_cache.shape[-1])[safe]       # gather first: [T, topk, row]
    if kv_cache_dtype == "fp8_ds_mla":
        return fp8_ds_mla_decode_ref(rows, dtype), valid
    return rows.to(dtype), valid


def fp8_ds_mla_decode_ref(cache: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Dequantize ``fp8_ds_mla`` rows: ``uint8 [..., 656]`` -> ``[..., 576]`` in ``dtype`` (``c_kv (512) || k_pe
    (64)``), ``c_kv[d] = float8_e4m3fn(code[d]) * scale[d // 128]``, ``k_pe`` = the bf16 rope values; the NoPE head's
    ``uint8 [..., 528]`` rows -> ``[..., 512]`` (``c_kv`` alone). Plain PyTorch byte views (the test oracle of the
    Triton kernel's fp8 path). Raises ValueError for another dtype or row width."""
    width = cache.shape[-1] if cache.dim() else None
    if cache.dtype != torch.uint8 or width not in (FP8_DS_MLA_ROW_BYTES, FP8_DS_MLA_NOPE_ROW_BYTES):
        raise ValueError(f"expected uint8 [..., {FP8_DS_MLA_ROW_BYTES}] (or [..., {FP8_DS_MLA_NOPE_ROW_BYTES}] for the "
                         f"NoPE head), got {cache.dtype} {tuple(cache.shape)}")
    lead = cache.shape[:-1]
    rows = cache.reshape(-1, width)
    codes = rows[:, :512].contiguous().view(torch.float8_e4m3fn).to(dtype)
    scales = rows[:, 512:528].contiguous().view(torch.float32).to(dtype)            # [N, 4]
    latent = (codes.view(-1, 4, 128) * scales[:, :, None]).reshape(-1, 512)
    if width == FP8_DS_MLA_NOPE_ROW_BYTES:
        return latent.reshape(*lead, 512)
    rope = rows[:, 528:].contiguous().view(torch.bfloat16).to(dtype)                # [N, 64]
    return torch.cat([latent, rope], dim=-1).reshape(*lead, 576)


def fp8_ds_mla_encode_ref(kv_c: torch.Tensor, k_pe: torch.Tensor) -> torch.Tensor:
    """Quantize latent rows into the ``fp8_ds_mla`` layout, ``uint8 [..., 656]``, as vLLM's ``concat_and_cache_mla(kv_c,
    k_pe, cache, slot_mapping, "fp8_ds_mla", scale)`` is written upstream (``csrc/cache_kernels.cu``,
    ``concat_and_cache_ds_mla_kernel``): per 128-value tile ``scale = max(max|x| / 448, FLT_MIN)`` in float32, codes
    ``e4m3(x / scale)`` clamped to +-448 and rounded to nearest even, rope copied as bf16.

    Args:
        kv_c: ``[..., 512]`` latent (any float dtype; vLLM passes the model dtype, bf16).
        k_pe: ``[..., 64]`` rope part.
    """
    if kv_c.shape[-1] != 512 or k_pe.shape[-1] != 64 or kv_c.shape[:-1] != k_pe.shape[:-1]:
        raise ValueError(f"expected kv_c [..., 512] and k_pe [..., 64], got {tuple(kv_c.shape)}, {tuple(k_pe.shape)}")
    lead = kv_c.shape[:-1]
    x = kv_c.reshape(-1, 4, 128).to(torch.float32)
    scale = torch.clamp(x.abs().amax(dim=-1) / 448.0, min=torch.finfo(torch.float32).tiny)      # [N, 4]
    codes = (x / scale[:, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return fp8_ds_mla_pack_ref(codes.reshape(*lead, 512), scale.reshape(*lead, 4), k_pe)


def fp8_ds_mla_pack_ref(codes: torch.Tensor, scales: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
    """Assemble ``fp8_ds_mla`` rows byte by byte: ``codes`` uint8 ``[..., 512]`` (e4m3 bit patterns), ``scales``
    ``[..., 4]`` (stored as float32), ``rope`` ``[..., 64]`` (stored as bf16) -> ``uint8 [..., 656]`` (little-endian
    byte views, as on the GPU); ``rope=None`` -> the NoPE head's ``uint8 [..., 528]`` (codes and scales alone).
    Raises ValueError for other shapes or a non-uint8 ``codes``."""
    lead = codes.shape[:-1]
    if (codes.dtype != torch.uint8 or codes.shape[-1] != 512 or scales.shape != (*lead, 4)
            or (rope is not None and rope.shape != (*lead, 64))):
        raise ValueError(f"expected uint8 codes [..., 512], scales [..., 4], rope [..., 64] or None; got {codes.dtype} "
                         f"{tuple(codes.shape)}, {tuple(scales.shape)}, "
                         f"{None if rope is None else tuple(rope.shape)}")
    sc = scales.reshape(-1, 4).to(torch.float32).contiguous().view(torch.uint8)               # [N, 16]
    if rope is None:
        return torch.cat([codes.reshape(-1, 512), sc], dim=-1).reshape(*lead, FP8_DS_MLA_NOPE_ROW_BYTES)
    rp = rope.reshape(-1, 64).to(torch.bfloat16).contiguous().view(torch.uint8)               # [N, 128]
    out = torch.cat([codes.reshape(-1, 512), sc, rp], dim=-1)
    return out.reshape(*lead, FP8_DS_MLA_ROW_BYTES)


def fp8_ds_mla_encode_vllm034_ref(kv_c: torch.Tensor, k_pe: torch.Tensor | None = None) -> torch.Tensor:
    """Quantize latent rows as vLLM 0.34.0's ``concat_and_cache_mla(kv_c, k_pe, cache, slots, "fp8_ds_mla", scale)``
    does: ``uint8 [..., 528]`` for the NoPE head (``k_pe`` None or ``[..., 0]``: GLM-5.3-Flash with
    ``FlashInferMLASparseSM120Impl.get_fp8_ds_mla_row_bytes`` 528, and ``TRITON_MLA_SPARSE``), else ``[..., 656]``.

    vLLM 0.34.0 has no Python or torch writer for these rows; this follows its CUDA kernel
    ``vllm::concat_and_cache_ds_mla_kernel<__nv_bfloat16, uint8_t, kFp8E4M3>`` as its SASS in
    ``vllm/_C_stable_libtorch.abi3.so`` reads (sm_90; sm_80 and sm_120 the same arithmetic): per 128-value tile
    ``amax`` of the inputs (a 16-lane ``fmaxf`` shuffle tree), ``s = max(amax / 448, 1e-4)`` in fp32 (IEEE
    division, then ``FMNMX`` with ``9.9999997e-05``), ``scale = exp2(ceil(log2(s)))`` (``FRND.CEIL`` of ``log2f``,
    ``MUFU.EX2``), stored as fp32 at float index ``128 + tile``; codes ``e4m3(x / scale)`` by
    ``F2FP.SATFINITE.E4M3`` (saturate to +-448, round to nearest even) at bytes ``[0, 512)``; the rope part (bytes
    ``[528, 656)``, bf16) only for a 656-byte row. ``ceil(log2(s))`` is taken exactly here (``frexp``); ``log2f``
    may differ where ``s`` lies within an ulp above a power of two.

    Args:
        kv_c: ``[..., 512]`` latent (vLLM passes bf16; taken as float32 values, exact for bf16/fp16).
        k_pe: ``[..., 64]`` rope part, or None / ``[..., 0]`` for the NoPE row.

    Returns: ``uint8 [..., 528]`` or ``[..., 656]``. Raises ValueError for other shapes.
    """
    nope = k_pe is None or k_pe.shape[-1] == 0
    if kv_c.shape[-1] != 512 or (not nope and (k_pe.shape[-1] != 64 or k_pe.shape[:-1] != kv_c.shape[:-1])):
        raise ValueError(f"expected kv_c [..., 512] and k_pe [..., 64] or None/[..., 0], got {tuple(kv_c.shape)}, "
                         f"{None if k_pe is None else tuple(k_pe.shape)}")
    lead = kv_c.shape[:-1]
    x = kv_c.reshape(-1, 4, 128).to(torch.float32)
    s = torch.clamp(x.abs().amax(dim=-1) / 448.0, min=torch.tensor(1e-4, dtype=torch.float32).item())    # [N, 4]
    mant, exp = torch.frexp(s)                      # s = mant * 2**exp, mant in [0.5, 1)
    scale = torch.ldexp(torch.ones_like(s), torch.where(mant == 0.5, exp - 1, exp))   # 2**ceil(log2 s), exact
    codes = (x / scale[:, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return fp8_ds_mla_pack_ref(codes.reshape(*lead, 512), scale.reshape(*lead, 4), None if nope else k_pe)


def flashmla_lse_to_natural(lse_base2: torch.Tensor) -> torch.Tensor:
    """Convert FlashMLA's base-2 log-sum-exp (``flash_mla_sparse_fwd``) to natural log: ``lse * ln 2``."""
    return lse_base2 * LN2


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


# ---- DSA lightning indexer ---------------------------------------------------------------------------------------
# logits[m, n] = sum_h relu(q[m, h] . k[n] * kscale[n]) * w[m, h] on each row's window, -inf elsewhere
# (vLLM's ``fp8_mqa_logits_torch``, ``vllm/v1/attention/ops/rocm_aiter_mla_sparse.py``; DeepGEMM's ``fp8_mqa_logits``
# with ``clean_logits=True``). The paged index cache holds, per block of ``bs`` tokens, ``bs x D`` e4m3 codes then
# ``bs`` fp32 scales (``indexer_k_quant_and_cache``'s layout), in a uint8 ``[num_blocks, bs, D + 4]`` tensor.

def e4m3_values(codes: torch.Tensor, compute_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """float8_e4m3fn codes (or their uint8 view) as numbers in ``compute_dtype`` (exact)."""
    return codes.view(torch.uint8).view(torch.float8_e4m3fn).to(torch.float32).to(compute_dtype)


def indexer_logits_prefill_ref(q, k, k_scale, weights, ks, ke, *, compute_dtype: torch.dtype = torch.float64):
    """Reference lightning-indexer logits over a flat key array (what DeepGEMM's ``fp8_fp4_mqa_logits`` returns).

    Args:
        q: ``[M, H, D]`` float8_e4m3fn (or uint8) query codes.
        k: ``[N, D]`` float8_e4m3fn (or uint8) key codes.
        k_scale: ``[N]`` (or ``[N, 1]``) float32 key scales.
        weights: ``[M, H]`` float32.
        ks, ke: ``[M]`` integer windows, keys ``ks[m] <= n < ke[m]``.

    Returns:
        ``[M, N]`` float32, ``-inf`` outside each row's window.
    """
    qv, kv = e4m3_values(q, compute_dtype), e4m3_values(k, compute_dtype)
    score = torch.einsum("mhd,nd->mhn", qv, kv) * k_scale.reshape(-1).to(compute_dtype)
    logits = (score.clamp_min(0) * weights.to(compute_dtype)[:, :, None]).sum(dim=1)
    n = torch.arange(kv.shape[0], device=q.device)
    window = (n[None, :] >= ks.long()[:, None]) & (n[None, :] < ke.long()[:, None])
    return logits.masked_fill(~window, float("-inf")).to(torch.float32)


def abs_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """``|x|`` of float8_e4m3fn codes (or their uint8 view), as float8_e4m3fn: the sign bit cleared."""
    return (codes.view(torch.uint8) & 0x7F).view(torch.float8_e4m3fn)


def abs_index_cache(kv_cache: torch.Tensor, head_dim: int = 128) -> torch.Tensor:
    """A copy of a paged index cache (uint8 ``[num_blocks, bs, D + 4]`` or ``[num_blocks, bs, 1, D + 4]``) with every
    key code's sign bit cleared; the fp32 scales (positive) are kept."""
    out = kv_cache.clone()
    flat = out.view(out.shape[0], -1)
    flat[:, :out.shape[1] * head_dim] &= 0x7F
    return out


def index_cache_keys_ref(kv_cache: torch.Tensor, head_dim: int = 128, compute_dtype: torch.dtype = torch.float64,
                         blocks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Read a paged index cache: ``(keys [nb, bs, D] in compute_dtype, scales [nb, bs] float32)`` of all blocks, or of
    the physical ``blocks`` given (in that order)."""
    nb, bs = kv_cache.shape[0], kv_cache.shape[1]
    flat = kv_cache.reshape(nb, bs * (head_dim + 4))
    if blocks is not None:
        flat = flat[blocks.long()]
    keys = e4m3_values(flat[:, :bs * head_dim].contiguous(), compute_dtype).reshape(-1, bs, head_dim)
    scales = flat[:, bs * head_dim:].contiguous().view(torch.float32).reshape(-1, bs)
    return keys, scales


def indexer_logits_paged_ref(q, kv_cache, weights, context_lens, block_table, max_model_len: int, *,
                             compute_dtype: torch.dtype = torch.float64):
    """Reference lightning-indexer logits of decode queries over the paged index cache (what DeepGEMM's
    ``fp8_fp4_paged_mqa_logits`` returns with ``clean_logits=True``).

    Args:
        q: ``[B, next_n, H, D]`` float8_e4m3fn (or uint8) codes.
        kv_cache: uint8 ``[num_blocks, bs, D + 4]`` (or ``[num_blocks, bs, 1, D + 4]``) paged index cache.
        weights: ``[B * next_n, H]`` float32.
        context_lens: ``[B, next_n]`` per-token context lengths, or ``[B]`` (token ``j`` then sees
            ``L - next_n + 1 + j`` keys).
        block_table: ``[B, max_blocks]`` physical blocks.
        max_model_len: output width.

    Returns:
        ``[B * next_n, max_model_len]`` float32; row ``b * next_n + j`` holds the logits of keys ``0 .. len - 1`` and
        ``-inf`` after them.
    """
    B, next_n, H, D = q.shape
    bs = kv_cache.shape[1]
    lens = context_lens.long()
    if lens.dim() == 1:
        lens = lens[:, None] - next_n + 1 + torch.arange(next_n, device=lens.device)[None, :]
    lens = lens.clamp(0, max_model_len)
    out = torch.full((B * next_n, max_model_len), float("-inf"), dtype=torch.float32, device=q.device)
    qv = e4m3_values(q, compute_dtype)
    w = weights.to(compute_dtype).reshape(B, next_n, H)
    for b in range(B):
        n = int(lens[b].max())
        if n == 0:
            continue
        keys, scales = index_cache_keys_ref(kv_cache, D, compute_dtype, block_table[b, :(n + bs - 1) // bs])
        kb = keys.reshape(-1, D)[:n]                              # [n, D]
        sb = scales.reshape(-1)[:n].to(compute_dtype)
        score = torch.einsum("jhd,nd->jhn", qv[b], kb) * sb
        logit = (score.clamp_min(0) * w[b][:, :, None]).sum(dim=1)          # [next_n, n]
        pos = torch.arange(n, device=q.device)
        logit = logit.masked_fill(pos[None, :] >= lens[b][:, None], float("-inf"))
        out[b * next_n:(b + 1) * next_n, :n] = logit.to(torch.float32)
    return out


def index_cache_write_ref(kv_cache: torch.Tensor, k: torch.Tensor, slot_mapping: torch.Tensor, *,
                          ue8m0: bool = True) -> torch.Tensor:
    """Quantize keys and write them into a paged index cache the way vLLM's ``indexer_k_quant_and_cache`` does
    (quant block = the whole head: one scale per token, ``max(amax, 1e-4) / 448``, rounded up to a power of two for
    ``ue8m0``; codes round to nearest even, saturating), in place.

    Args:
        kv_cache: uint8 ``[num_blocks, bs, D + 4]`` (or ``[num_blocks, bs, 1, D + 4]``).
        k: ``[T, D]`` float keys.
        slot_mapping: ``[T]`` slots ``block * bs + offset``; negative slots are skipped.

    Returns:
        ``kv_cache``.
    """
    nb, bs = kv_cache.shape[0], kv_cache.shape[1]
    D = k.shape[-1]
    flat = kv_cache.view(nb, bs * (D + 4))
    kf = k.to(torch.float32)
    scale = kf.abs().amax(dim=-1).clamp_min(1e-4) / 448.0
    if ue8m0:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    codes = (kf / scale[:, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        blk, off = divmod(int(slot), bs)
        flat[blk, off * D:(off + 1) * D] = codes[t]
        flat[blk, bs * D + 4 * off:bs * D + 4 * (off + 1)] = scale[t:t + 1].view(torch.uint8)
    return kv_cache


def indexer_q_rope_quant_ref(positions, q, cos_sin_cache, weights, softmax_scale: float, head_scale: float,
                             is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The arithmetic of vLLM's ``_fused_indexer_q_rope_quant_kernel`` (``sparse_attn_indexer.py``) in PyTorch, op for
    op in float32, so the codes come out bit for bit as Triton's interpreter computes them (a GPU build fuses
    ``x0 * cos - x1 * sin`` into FMAs and may round a rotated value differently; there vLLM's kernel is the oracle): rope on the first 64 dims (``cos, sin =
    cos_sin_cache[pos, :32], [32:64]``; NeoX halves or interleaved pairs), each rotated value rounded to bf16;
    ``s = 2 ** ceil(log2(max(amax, 1e-10) * (1 / 448)))`` per (token, head); codes ``e4m3(clamp(x / s, +-448))``;
    ``weights * s * softmax_scale * head_scale``.

    Returns:
        ``(q_fp8 [T, H, 128] float8_e4m3fn, weights_out [T, H] float32)``.
    """
    f32 = torch.float32
    pos = positions.long()
    cos = cos_sin_cache[pos, :32].to(f32)[:, None, :]
    sin = cos_sin_cache[pos, 32:64].to(f32)[:, None, :]
    x = q.to(f32)
    x0, x1 = (x[..., :32], x[..., 32:64]) if is_neox else (x[..., 0:64:2], x[..., 1:64:2])
    r0 = (x0 * cos - x1 * sin).to(torch.bfloat16).to(f32)
    r1 = (x1 * cos + x0 * sin).to(torch.bfloat16).to(f32)
    nope = x[..., 64:]
    amax = torch.maximum(torch.maximum(r0.abs().amax(-1), r1.abs().amax(-1)), nope.abs().amax(-1))
    scale = torch.exp2(torch.ceil(torch.log2(amax.clamp_min(1e-10) * torch.tensor(1.0 / 448.0, dtype=f32))))
    rot = torch.empty_like(x)
    if is_neox:
        rot[..., :32], rot[..., 32:64] = r0, r1
    else:
        rot[..., 0:64:2], rot[..., 1:64:2] = r0, r1
    rot[..., 64:] = nope
    codes = (rot / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    w = weights.to(f32) * scale * torch.tensor(softmax_scale, dtype=f32) * torch.tensor(head_scale, dtype=f32)
    return codes, w


def fused_q_ref(positions, q_pe, q_pe_cos_sin_cache, index_q, index_q_cos_sin_cache, index_weights,
                softmax_scale: float, head_scale: float, interleave: bool) -> tuple[torch.Tensor, ...]:
    """The arithmetic of vLLM 0.33's ``_fused_q_kernel`` programs 0 and 1 (``vllm/models/deepseek_v32/common/
    kernels.py``; the bf16 MLA query) in PyTorch, op for op in float32, so that the outputs come out bit for bit as
    Triton's interpreter computes them (a GPU build may fuse a rotation into an FMA and round differently):

    * ``q_pe``: interleaved pairs, ``r1 = x1 cos - x2 sin``, ``r2 = x2 cos + x1 sin``, cast to ``q_pe``'s dtype;
    * the indexer query: RoPE on the first ``2 * half`` of 128 dims as ``x cos + sign * partner * sin`` (interleaved
      pairs or NeoX halves), never rounded to bf16; ``s = 2 ** ceil(log2(max(amax, 1e-4) / 448))``; codes
      ``e4m3(x / s)``; ``weights * s * softmax_scale * head_scale`` (multiplied in that order).

    Returns:
        ``(codes [T, H_idx, 128] float8_e4m3fn, weights_out [T, H_idx] float32, q_pe_roped [T, H, 64])``.
    """
    f32 = torch.float32
    pos = positions.long()
    half = q_pe_cos_sin_cache.shape[-1] // 2
    cos, sin = (q_pe_cos_sin_cache[pos, :half].to(f32)[:, None], q_pe_cos_sin_cache[pos, half:2 * half].to(f32)[:, None])
    x1, x2 = q_pe[..., 0::2].to(f32), q_pe[..., 1::2].to(f32)
    q_out = torch.empty_like(q_pe)
    q_out[..., 0::2], q_out[..., 1::2] = (x1 * cos - x2 * sin).to(q_pe.dtype), (x2 * cos + x1 * sin).to(q_pe.dtype)
    ih = index_q_cos_sin_cache.shape[-1] // 2
    block = torch.arange(index_q.shape[-1], device=index_q.device)
    in_rope = block < 2 * ih
    if interleave:
        cos_idx, partner, sign = block // 2, torch.where(in_rope, block ^ 1, block), (block % 2 == 0)
    else:
        cos_idx, partner, sign = block % ih, torch.where(in_rope, block ^ ih, block), block < ih
    sign = torch.where(sign, -1.0, 1.0).to(f32)
    rows = index_q_cos_sin_cache[pos].to(f32)
    cos_full = torch.where(in_rope, rows[:, cos_idx.clamp(max=ih - 1)], torch.ones((), dtype=f32))[:, None]
    sin_full = torch.where(in_rope, rows[:, ih + cos_idx.clamp(max=ih - 1)], torch.zeros((), dtype=f32))[:, None]
    x = index_q.to(f32)
    x = torch.where(in_rope, x * cos_full + sign * x[..., partner] * sin_full, x)
    scale = x.abs().amax(-1).clamp_min(1e-4) / 448.0
    scale = torch.exp2(torch.ceil(torch.log2(scale)))
    codes = (x / scale[..., None]).to(torch.float8_e4m3fn)
    w = index_weights.to(f32) * scale
    w = w * torch.tensor(softmax_scale, dtype=f32)
    w = w * torch.tensor(head_scale, dtype=f32)
    return codes, w, q_out
