"""Triton sparse MLA forward: attention of each query token over its own top-k entries of a paged latent cache.

The math is the one of :func:`sparse_mla.kernels.reference.sparse_mla_attention_ref` (DSA sparse attention in vLLM's
absorbed MQA form, head 576 = 512 latent + 64 rope, V = the latent). Per query token ``t`` and a tile of
``BLOCK_H`` heads, one program walks the token's index row in tiles of ``BLOCK_N`` slots:

1. load the ``BLOCK_N`` slots (``-1`` = no token, allowed anywhere), gather their cache rows with 64-bit
   offsets (``slot * 576`` overflows int32 past 3.7M slots): ``c_kv [BLOCK_N, 512]``, ``k_pe [BLOCK_N, 64]``;
2. scores ``s = (q_nope @ c_kv^T + q_pe @ k_pe^T) * sm_scale * log2(e)`` (``[BLOCK_H, BLOCK_N]``, fp32 accumulate);
3. online softmax in base 2 (running max ``m``, sum ``l``), guarded so that an all-masked tile never makes NaN;
4. ``acc = acc * exp2(m_old - m_new) + p @ c_kv[:, dv]`` (``[BLOCK_H, BLOCK_DV]`` fp32). With ``BLOCK_DV < 512``
   the output columns are split over ``512 / BLOCK_DV`` programs (each recomputes the scores): this bounds the
   accumulator's registers when ``BLOCK_H`` is large (64 heads x 256 columns instead of x 512).

Two launch shapes (FlashDecoding, Dao et al. 2023; vLLM's ``triton_decode_attention.py``):

* **direct** (prefill, many tokens): grid ``(T, cdiv(H, BLOCK_H))``; each program covers the whole index row and
  writes ``out`` and ``lse``.
* **split-KV** (decode, few tokens): grid ``(T, cdiv(H, BLOCK_H), S)``; split ``s`` covers a contiguous chunk of the
  index row and writes a partial ``(out_s, lse_s)`` in fp32; :func:`_merge_splits_kernel` combines them with
  ``lse = log2 sum_s 2^lse_s`` weights. The split count depends only on shapes, never on data, so the launch is
  CUDA-graph safe (no host sync).

The dot dtype is a parameter: bf16/fp16 tensor-core dots on a GPU, fp32 under ``TRITON_INTERPRET=1`` (the
interpreter computes bf16 wrongly, triton-lang/triton issue 11584) and for fp32 inputs (then IEEE fp32, not tf32).
"""
from __future__ import annotations

import triton
import triton.language as tl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def _sparse_mla_fwd_kernel(
    Q_nope, Q_pe, KV, Idx,
    Out, Lse,                      # direct path: out [T, H, DL] (q dtype), lse [T, H] fp32 natural log
    O_part, Lse_part,              # split path: [T, H, S, DL] fp32, [T, H, S] fp32 log2
    sm_scale_log2,                 # sm_scale * log2(e)
    H, TOPK, CHUNK,                # CHUNK: index entries per split (multiple of BLOCK_N)
    stride_qn_t, stride_qn_h,
    stride_qp_t, stride_qp_h,
    stride_kv_slot,
    stride_idx_t,
    stride_o_t, stride_o_h,
    stride_l_t, stride_l_h,
    stride_op_t, stride_op_h, stride_op_s,
    stride_lp_t, stride_lp_h,
    DL: tl.constexpr, DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr,
    SPLIT: tl.constexpr, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    NUM_DV: tl.constexpr = DL // BLOCK_DV
    hb = tl.program_id(1) // NUM_DV
    dvb = tl.program_id(1) % NUM_DV
    s = tl.program_id(2)

    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_dl = tl.arange(0, DL)
    offs_dr = tl.arange(0, DR)
    offs_dv = dvb * BLOCK_DV + tl.arange(0, BLOCK_DV)

    q_nope = tl.load(Q_nope + t * stride_qn_t + offs_h[:, None] * stride_qn_h + offs_dl[None, :],
                     mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)
    q_pe = tl.load(Q_pe + t * stride_qp_t + offs_h[:, None] * stride_qp_h + offs_dr[None, :],
                   mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)

    start = s * CHUNK
    end = tl.minimum(start + CHUNK, TOPK)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)

    idx_row = Idx + t * stride_idx_t
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        slot = tl.load(idx_row + offs_n, mask=offs_n < end, other=-1)
        valid = slot >= 0
        row = KV + slot.to(tl.int64)[:, None] * stride_kv_slot
        c_kv = tl.load(row + offs_dl[None, :], mask=valid[:, None], other=0.0).to(DOT_DTYPE)
        k_pe = tl.load(row + DL + offs_dr[None, :], mask=valid[:, None], other=0.0).to(DOT_DTYPE)
        if IEEE:
            qk = tl.dot(q_nope, tl.trans(c_kv), input_precision="ieee")
            qk = tl.dot(q_pe, tl.trans(k_pe), qk, input_precision="ieee")
        else:
            qk = tl.dot(q_nope, tl.trans(c_kv))
            qk = tl.dot(q_pe, tl.trans(k_pe), qk)
        qk = tl.where(valid[None, :], qk * sm_scale_log2, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)     # all masked so far: no NaN from -inf - -inf
        alpha = tl.exp2(m_i - m_ref)
        p = tl.exp2(qk - m_ref[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if BLOCK_DV == DL:
            v = c_kv
        else:  # this program's slice of the latent as V (an L1/L2 re-read of rows just gathered)
            v = tl.load(row + offs_dv[None, :], mask=valid[:, None], other=0.0).to(DOT_DTYPE)
        if IEEE:
            acc = tl.dot(p.to(DOT_DTYPE), v, acc * alpha[:, None], input_precision="ieee")
        else:
            acc = tl.dot(p.to(DOT_DTYPE), v, acc * alpha[:, None])
        m_i = m_new

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    if SPLIT:
        tl.store(O_part + t * stride_op_t + offs_h[:, None] * stride_op_h + s * stride_op_s + offs_dv[None, :],
                 out, mask=mask_h[:, None])
        tl.store(Lse_part + t * stride_lp_t + offs_h * stride_lp_h + s, lse2, mask=mask_h & (dvb == 0))
    else:
        tl.store(Out + t * stride_o_t + offs_h[:, None] * stride_o_h + offs_dv[None, :],
                 out.to(Out.dtype.element_ty), mask=mask_h[:, None])
        tl.store(Lse + t * stride_l_t + offs_h * stride_l_h, lse2 * 0.6931471805599453, mask=mask_h & (dvb == 0))


@triton.jit
def _merge_splits_kernel(
    O_part, Lse_part, Out, Lse,
    H, S,
    stride_op_t, stride_op_h, stride_op_s,
    stride_lp_t, stride_lp_h,
    stride_o_t, stride_o_h,
    stride_l_t, stride_l_h,
    DL: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Combine S partial results of one (token, head): out = sum_s w_s out_s / sum_s w_s, w_s = 2^(lse_s - max)."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    d0 = tl.program_id(2) * BLOCK_D
    offs_s = tl.arange(0, BLOCK_S)
    mask_s = offs_s < S
    lse_s = tl.load(Lse_part + t * stride_lp_t + h * stride_lp_h + offs_s, mask=mask_s, other=float("-inf"))
    m = tl.max(lse_s, 0)
    m_ref = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse_s - m_ref)
    w_sum = tl.sum(w, 0)
    offs_d = d0 + tl.arange(0, BLOCK_D)
    o = tl.load(O_part + t * stride_op_t + h * stride_op_h + offs_s[:, None] * stride_op_s + offs_d[None, :],
                mask=mask_s[:, None], other=0.0)
    out = tl.sum(o * w[:, None], 0) / tl.where(w_sum == 0.0, 1.0, w_sum)
    tl.store(Out + t * stride_o_t + h * stride_o_h + offs_d, out.to(Out.dtype.element_ty))
    if d0 == 0:
        lse = tl.where(w_sum == 0.0, float("-inf"), (m_ref + tl.log2(tl.where(w_sum == 0.0, 1.0, w_sum))) * 0.6931471805599453)
        tl.store(Lse + t * stride_l_t + h * stride_l_h, lse)
