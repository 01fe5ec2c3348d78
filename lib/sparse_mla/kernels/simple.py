"""A first, simple Triton sparse MLA kernel: one program per (token, head), no tensor cores.

It computes the same function as :func:`sparse_mla.kernels.reference.sparse_mla_attention_ref` with an online softmax
over tiles of ``BLOCK_N`` selected slots, but each program handles a single head, so every head re-reads the
token's selected cache rows (H times the bytes of the real kernel) and the dots run as elementwise
multiply-and-sum instead of ``tl.dot`` (notebook 02 writes its own stages 1-2 of the same idea in cells); the tests
keep it as a second, independent kernel to cross-check :mod:`sparse_mla.kernels.attention`.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..layouts import LN2, LOG2E

_LN2 = tl.constexpr(LN2)


@triton.jit
def _simple_kernel(Q_nope, Q_pe, KV, Idx, Out, Lse, sm_scale_log2, TOPK,
                   stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, stride_kv_slot, stride_idx_t,
                   stride_o_t, stride_o_h, stride_l_t,
                   DL: tl.constexpr, DR: tl.constexpr, BLOCK_N: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs_dl = tl.arange(0, DL)
    offs_dr = tl.arange(0, DR)
    q_nope = tl.load(Q_nope + t * stride_qn_t + h * stride_qn_h + offs_dl).to(tl.float32)
    q_pe = tl.load(Q_pe + t * stride_qp_t + h * stride_qp_h + offs_dr).to(tl.float32)
    m = float("-inf")
    l = 0.0
    acc = tl.zeros([DL], dtype=tl.float32)
    for n0 in range(0, TOPK, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        slot = tl.load(Idx + t * stride_idx_t + offs_n, mask=offs_n < TOPK, other=-1)
        valid = slot >= 0
        row = KV + slot.to(tl.int64)[:, None] * stride_kv_slot
        c_kv = tl.load(row + offs_dl[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        k_pe = tl.load(row + DL + offs_dr[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(c_kv * q_nope[None, :], 1) + tl.sum(k_pe * q_pe[None, :], 1)
        s = tl.where(valid, s * sm_scale_log2, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_ref)
        p = tl.exp2(s - m_ref)
        l = l * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * c_kv, 0)
        m = m_new
    empty = l == 0.0
    tl.store(Out + t * stride_o_t + h * stride_o_h + offs_dl,
             (acc / tl.where(empty, 1.0, l)).to(Out.dtype.element_ty))
    tl.store(Lse + t * stride_l_t + h,
             tl.where(empty, float("-inf"), (m + tl.log2(tl.where(empty, 1.0, l))) * _LN2))


def sparse_mla_attention_simple(q_nope, q_pe, kv_cache, indices, sm_scale, block_n: int = 32):
    """Same contract as :func:`sparse_mla.kernels.sparse_mla_attention` (inputs checked the same way), one program
    per (token, head), fp32 arithmetic. For teaching and cross-checking; not fast."""
    from .api import _check_inputs

    _check_inputs(q_nope, q_pe, kv_cache, indices, sm_scale)
    T, H, DL = q_nope.shape
    DR = q_pe.shape[2]
    indices = indices.to(torch.int32).contiguous()
    q_nope = q_nope if q_nope.stride(2) == 1 else q_nope.contiguous()
    q_pe = q_pe if q_pe.stride(2) == 1 else q_pe.contiguous()
    out = torch.empty((T, H, DL), dtype=q_nope.dtype, device=q_nope.device)
    lse = torch.empty((T, H), dtype=torch.float32, device=q_nope.device)
    if T and H:
        _simple_kernel[(T, H)](q_nope, q_pe, kv_cache, indices, out, lse, sm_scale * LOG2E, indices.shape[1],
                               q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1), DL + DR,
                               indices.stride(0), out.stride(0), out.stride(1), lse.stride(0),
                               DL=DL, DR=DR, BLOCK_N=block_n)
    return out, lse
