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

**fp8_ds_mla cache** (vLLM's ``FLASHMLA_SPARSE`` layout, ``vllm/v1/attention/backends/mla/flashmla_sparse.py`` and
FlashMLA's ``flash_mla_with_kvcache`` docstring): each 656-byte row is ``[512 e4m3 codes][4 fp32 scales][64 bf16
rope]`` and the latent ``c_kv[d] = e4m3(code[d]) * scale_j``, ``j = d // 128`` (arbitrary positive fp32 scales). The
same storage is read through three views (uint8 codes, row stride 656; fp32 scales at ``[128:132)``, row stride 164;
bf16 rope at ``[264:328)``, row stride 328), 64-bit offsets, codes decoded by :func:`sparse_mla.kernels.fp8.e4m3_to_f32`
(hardware ``cvt`` on SM89+, exact integer/fp16 arithmetic on SM80/86). Two ways to apply the scales:

* **fold** (:func:`_sparse_mla_fp8_fwd_kernel`, the default): the scales go into the dots, not into the tiles,
  ``s = q_pe . k_pe + sum_j scale_j * (q_nope[:, j] . e4m3_j)`` and ``acc_j += (p * scale_j) @ e4m3_j`` for the four
  128-column tiles ``j``. The dots then read the raw codes converted elementwise, which Triton keeps as uint8 in shared
  memory and converts in the dot-operand registers (on the mma.sync GPUs: SM80/86/89/120), and the e4m3 values are
  exact in bf16/fp16 (3 mantissa bits). The price: four 128-wide dots per step, ``[BLOCK_H, BLOCK_N]`` multiplies by
  the scales (4 on the scores, 4 on ``p``), and V re-read for the PV dots (meant as an L1 hit; ncu on the H200 saw an
  11.6 % L1 hit rate, so mostly L2; keeping the tiles in registers
  across the softmax spills at 16 heads).
* **registers** (:func:`_sparse_mla_fp8_registers_fwd_kernel`): dequantize the ``[BLOCK_N, 512]`` tile in registers
  (``[BLOCK_N, 4, 128] * scale[:, :, None]``), cast to the dot dtype, then steps 2-4 unchanged. On mma.sync GPUs
  Triton stores the converted tile twice in shared memory (once per dot-operand layout: 159 KB for 16 x 64, over the
  99 KB of SM86/89/120); on SM90, where wgmma reads both operands from shared memory anyway, its 64-head tile is the
  one without register spills (:func:`sparse_mla.kernels.launch_plan.choose_config` picks it there).

**The NoPE head's fp8 rows** (GLM-5.3-Flash: ``qk_rope_head_dim`` 0, head 512; vLLM 0.33/0.34 store 528-byte rows
for it, ``[512 e4m3 codes][4 fp32 scales]``, :mod:`sparse_mla.layouts`): both fp8 kernels take ``DR = 0`` and then read
the 528-byte row (row strides 528 bytes / 132 fp32, the scales at the same fp32 element 128) and score the latent
alone -- no rope load, no rope dot, ``Q_pe`` and the bf16 view never read. A compile-time branch on ``DR``: the
``DR = 64`` kernels compile to the same machine code as before the branch existed (their SASS compared, sm_80/90/120).

Either way the bytes gathered per row drop from 1152 (bf16) to 656 (528 for the NoPE head, from 1024). AOT numbers (shared memory, registers, spills
per target) are in ``results/h200/KERNEL_NOTES.md``.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .. import layouts
from .fp8 import e4m3_to_f32

# the fp8_ds_mla row's three views and ln 2, as compile-time constants of the kernels (sparse_mla.layouts)
_ROW8 = tl.constexpr(layouts.FP8_DS_MLA_ROW_BYTES)
_ROW_F32 = tl.constexpr(layouts.FP8_DS_MLA_ROW_F32)
_SCALES_F32 = tl.constexpr(layouts.FP8_DS_MLA_SCALES_F32)
_ROW_BF16 = tl.constexpr(layouts.FP8_DS_MLA_ROW_BF16)
_ROPE_BF16 = tl.constexpr(layouts.FP8_DS_MLA_ROPE_BF16)
# the NoPE head's 528-byte row (DR = 0): the same codes and scales, no rope part
_NOPE_ROW8 = tl.constexpr(layouts.FP8_DS_MLA_NOPE_ROW_BYTES)
_NOPE_ROW_F32 = tl.constexpr(layouts.FP8_DS_MLA_NOPE_ROW_F32)
_LN2 = tl.constexpr(layouts.LN2)


@triton.jit
def _load_fp8_latent(Row8, RowF32, col0, valid, WIDTH: tl.constexpr, NT: tl.constexpr, HW: tl.constexpr):
    """Columns ``[col0, col0 + WIDTH)`` of the dequantized latent of a tile of fp8_ds_mla rows, fp32
    ``[BLOCK_N, WIDTH]``: ``e4m3(code) * scale`` of the column's 128-value tile. ``Row8``/``RowF32``: ``[BLOCK_N, 1]``
    row pointers into the uint8 and fp32 views; ``NT`` = number of scale tiles the columns span (``WIDTH / NT`` wide,
    within one tile each); ``valid``: ``[BLOCK_N]`` (invalid rows give 0)."""
    codes = tl.load(Row8 + col0 + tl.arange(0, WIDTH)[None, :], mask=valid[:, None], other=0)
    x = e4m3_to_f32(codes, HW)
    tile = (col0 + tl.arange(0, NT) * (WIDTH // NT)) // 128
    scale = tl.load(RowF32 + _SCALES_F32 + tile[None, :], mask=valid[:, None], other=0.0)
    x = tl.reshape(x, [x.shape[0], NT, WIDTH // NT]) * scale[:, :, None]
    return tl.reshape(x, [x.shape[0], WIDTH])


@triton.jit
def _program_tiles(Q_nope, Q_pe, stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, H, TOPK, CHUNK,
                   DL: tl.constexpr, DR: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_DV: tl.constexpr,
                   DOT_DTYPE: tl.constexpr):
    """What one program of the float and "registers" kernels works on: its token ``t``, head tile (``offs_h``,
    ``mask_h``), output-column block ``dvb`` and split ``s`` (grid axes 0-2), its q tiles ``q_nope [BLOCK_H, DL]`` and
    ``q_pe [BLOCK_H, DR]`` in the dot dtype, and its range ``[start, end)`` of the index row."""
    t = tl.program_id(0).to(tl.int64)
    NUM_DV: tl.constexpr = DL // BLOCK_DV
    hb = tl.program_id(1) // NUM_DV
    dvb = tl.program_id(1) % NUM_DV
    s = tl.program_id(2)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    q_nope = tl.load(Q_nope + t * stride_qn_t + offs_h[:, None] * stride_qn_h + tl.arange(0, DL)[None, :],
                     mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)
    if DR > 0:
        q_pe = tl.load(Q_pe + t * stride_qp_t + offs_h[:, None] * stride_qp_h + tl.arange(0, DR)[None, :],
                       mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)
    else:   # NoPE MLA (GLM-5.3-Flash: qk_rope_head_dim 0): no rope part; a placeholder the kernel never reads
        q_pe = tl.zeros([BLOCK_H, 16], dtype=DOT_DTYPE)
    start = s * CHUNK
    end = tl.minimum(start + CHUNK, TOPK)
    return t, offs_h, mask_h, dvb, s, q_nope, q_pe, start, end


@triton.jit
def _store_out(acc, m_i, l_i, t, s, offs_h, mask_h, dvb, Out, Lse, O_part, Lse_part,
               stride_o_t, stride_o_h, stride_l_t, stride_l_h, stride_op_t, stride_op_h, stride_op_s,
               stride_lp_t, stride_lp_h, BLOCK_DV: tl.constexpr, SPLIT: tl.constexpr):
    """``acc / l`` at this program's output columns and the log-sum-exp: fp32 split partials (base 2), or ``out`` in
    its dtype and ``lse`` in natural log; an empty row gives 0 and ``-inf``."""
    offs_dv = dvb * BLOCK_DV + tl.arange(0, BLOCK_DV)
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
        tl.store(Lse + t * stride_l_t + offs_h * stride_l_h, lse2 * _LN2, mask=mask_h & (dvb == 0))


@triton.jit
def _sparse_mla_fwd_kernel(
    Q_nope, Q_pe, KV, Idx,             # KV: the float latent cache, rows c_kv (DL) || k_pe (DR)
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
    """The float-cache kernel (module docstring, steps 1-4)."""
    t, offs_h, mask_h, dvb, s, q_nope, q_pe, start, end = _program_tiles(
        Q_nope, Q_pe, stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, H, TOPK, CHUNK, DL, DR, BLOCK_H, BLOCK_DV,
        DOT_DTYPE)
    offs_dl = tl.arange(0, DL)
    offs_dv = dvb * BLOCK_DV + tl.arange(0, BLOCK_DV)
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
        qk = _dot(q_nope, tl.trans(c_kv), tl.zeros([BLOCK_H, BLOCK_N], dtype=tl.float32), IEEE)
        if DR > 0:   # a NoPE head (DR 0) scores the latent alone
            k_pe = tl.load(row + DL + tl.arange(0, DR)[None, :], mask=valid[:, None], other=0.0).to(DOT_DTYPE)
            qk = _dot(q_pe, tl.trans(k_pe), qk, IEEE)
        p, alpha, m_i, l_i = _softmax_step(qk, valid, m_i, l_i, sm_scale_log2)
        if BLOCK_DV == DL:
            v = c_kv
        else:  # this program's slice of the latent as V (an L1/L2 re-read of rows just gathered)
            v = tl.load(row + offs_dv[None, :], mask=valid[:, None], other=0.0).to(DOT_DTYPE)
        acc = _dot(p.to(DOT_DTYPE), v, acc * alpha[:, None], IEEE)
    _store_out(acc, m_i, l_i, t, s, offs_h, mask_h, dvb, Out, Lse, O_part, Lse_part, stride_o_t, stride_o_h,
               stride_l_t, stride_l_h, stride_op_t, stride_op_h, stride_op_s, stride_lp_t, stride_lp_h, BLOCK_DV,
               SPLIT)


@triton.jit
def _sparse_mla_fp8_registers_fwd_kernel(
    Q_nope, Q_pe, KV, KV_f32, KV_bf16, Idx,   # KV: uint8 fp8_ds_mla cache; KV_f32 / KV_bf16: its fp32 / bf16 views
    Out, Lse, O_part, Lse_part,
    sm_scale_log2,
    H, TOPK, CHUNK,
    stride_qn_t, stride_qn_h,
    stride_qp_t, stride_qp_h,
    stride_idx_t,                  # (no cache stride: the fp8_ds_mla row is a constant, sparse_mla.layouts)
    stride_o_t, stride_o_h,
    stride_l_t, stride_l_h,
    stride_op_t, stride_op_h, stride_op_s,
    stride_lp_t, stride_lp_h,
    DL: tl.constexpr, DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr,
    SPLIT: tl.constexpr, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr, FP8_HW: tl.constexpr,
):
    """The "registers" fp8_ds_mla kernel (module docstring): each ``[BLOCK_N, 512]`` tile of 656-byte rows (64-bit
    offsets) dequantized in registers, then the float kernel's dots; ``DL = 512``, ``DR = 64``, or ``DR = 0`` for the
    NoPE head's 528-byte rows (no rope part: the latent alone is scored)."""
    tl.static_assert(DL == 512 and (DR == 64 or DR == 0))
    ROW8: tl.constexpr = _ROW8 if DR > 0 else _NOPE_ROW8
    ROW_F32: tl.constexpr = _ROW_F32 if DR > 0 else _NOPE_ROW_F32
    t, offs_h, mask_h, dvb, s, q_nope, q_pe, start, end = _program_tiles(
        Q_nope, Q_pe, stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, H, TOPK, CHUNK, DL, DR, BLOCK_H, BLOCK_DV,
        DOT_DTYPE)
    offs_dr = tl.arange(0, DR if DR > 0 else 16)    # (16: a placeholder width for the NoPE head, never read)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
    idx_row = Idx + t * stride_idx_t
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        slot = tl.load(idx_row + offs_n, mask=offs_n < end, other=-1)
        valid = slot >= 0
        slot64 = slot.to(tl.int64)[:, None]
        row8 = KV + slot64 * ROW8
        rowf = KV_f32 + slot64 * ROW_F32
        c_kv = _load_fp8_latent(row8, rowf, 0, valid, DL, DL // 128, FP8_HW).to(DOT_DTYPE)
        if DR > 0:   # the 656-byte row's bf16 rope part (a NoPE row has none)
            k_pe = tl.load(KV_bf16 + slot64 * _ROW_BF16 + _ROPE_BF16 + offs_dr[None, :], mask=valid[:, None],
                           other=0.0).to(DOT_DTYPE)
        qk = _dot(q_nope, tl.trans(c_kv), tl.zeros([BLOCK_H, BLOCK_N], dtype=tl.float32), IEEE)
        if DR > 0:
            qk = _dot(q_pe, tl.trans(k_pe), qk, IEEE)
        p, alpha, m_i, l_i = _softmax_step(qk, valid, m_i, l_i, sm_scale_log2)
        if BLOCK_DV == DL:
            v = c_kv
        else:  # this program's slice of the latent as V, dequantized again (an L1/L2 re-read)
            v = _load_fp8_latent(row8, rowf, dvb * BLOCK_DV, valid, BLOCK_DV, (BLOCK_DV + 127) // 128,
                                 FP8_HW).to(DOT_DTYPE)
        acc = _dot(p.to(DOT_DTYPE), v, acc * alpha[:, None], IEEE)
    _store_out(acc, m_i, l_i, t, s, offs_h, mask_h, dvb, Out, Lse, O_part, Lse_part, stride_o_t, stride_o_h,
               stride_l_t, stride_l_h, stride_op_t, stride_op_h, stride_op_s, stride_lp_t, stride_lp_h, BLOCK_DV,
               SPLIT)


@triton.jit
def _softmax_step(qk, valid, m_i, l_i, sm_scale_log2):
    """One online-softmax step in base 2 over a ``[BLOCK_H, BLOCK_N]`` score tile: masks invalid columns, returns
    ``(p, alpha, m_new, l_new)`` with ``alpha = 2^(m_old - m_new)``; an all-masked tile gives no NaN."""
    qk = tl.where(valid[None, :], qk * sm_scale_log2, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)     # all masked so far: no NaN from -inf - -inf
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(qk - m_ref[:, None])
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def _dot(a, b, acc, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _e4m3_tile(Row8, col0, valid, DOT_DTYPE: tl.constexpr, HW: tl.constexpr, REREAD: tl.constexpr = False):
    """``[BLOCK_N, 128]`` codes of columns ``[col0, col0 + 128)`` of fp8_ds_mla rows (``Row8``: ``[BLOCK_N, 1]`` uint8
    row pointers), decoded to their e4m3 values in the dot dtype (exact); invalid rows give 0. ``REREAD``: a second
    read of tiles already loaded (meant as an L1 hit: on the H200 mostly an L2 hit), marked ``evict_first`` so that it
    is not merged with the first."""
    if REREAD:
        codes = tl.load(Row8 + col0 + tl.arange(0, 128)[None, :], mask=valid[:, None], other=0,
                        eviction_policy="evict_first")
    else:
        codes = tl.load(Row8 + col0 + tl.arange(0, 128)[None, :], mask=valid[:, None], other=0)
    return e4m3_to_f32(codes, HW).to(DOT_DTYPE)


@triton.jit
def _store_tile(acc, inv_l, cols, t, s, offs_h, mask_h, Out, O_part,
                stride_o_t, stride_o_h, stride_op_t, stride_op_h, stride_op_s, SPLIT: tl.constexpr):
    """Store ``acc / l`` (``[BLOCK_H, W]``) at output columns ``cols``: fp32 split partials or the final out."""
    out = acc * inv_l[:, None]
    if SPLIT:
        tl.store(O_part + t * stride_op_t + offs_h[:, None] * stride_op_h + s * stride_op_s + cols[None, :],
                 out, mask=mask_h[:, None])
    else:
        tl.store(Out + t * stride_o_t + offs_h[:, None] * stride_o_h + cols[None, :],
                 out.to(Out.dtype.element_ty), mask=mask_h[:, None])


@triton.jit
def _row_scales(rowf, valid, VEC_SCALES: tl.constexpr):
    """The four fp32 scales of each row (``rowf``: ``[BLOCK_N]`` pointers to a row's first scale), ``(sc0, sc1, sc2,
    sc3)`` each ``[BLOCK_N]``: four 4-byte gathers per row, or (``VEC_SCALES``) one 16-byte load per row split in
    registers (the scales sit at byte 512 of the 656-byte row: 16-byte aligned)."""
    if VEC_SCALES:
        sc = tl.load(rowf[:, None] + tl.arange(0, 4)[None, :], mask=valid[:, None], other=0.0)
        even, odd = tl.split(tl.reshape(sc, [sc.shape[0], 2, 2]))      # columns (0, 2) and (1, 3)
        sc0, sc2 = tl.split(even)
        sc1, sc3 = tl.split(odd)
    else:
        sc0 = tl.load(rowf, mask=valid, other=0.0)
        sc1 = tl.load(rowf + 1, mask=valid, other=0.0)
        sc2 = tl.load(rowf + 2, mask=valid, other=0.0)
        sc3 = tl.load(rowf + 3, mask=valid, other=0.0)
    return sc0, sc1, sc2, sc3


@triton.jit
def _fold_scores(q_pe, q0, q1, q2, q3, row8, rowf, rope, valid, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr,
                 FP8_HW: tl.constexpr, VEC_SCALES: tl.constexpr = False, ROPE: tl.constexpr = True):
    """Scores of the "fold" kernel, ``[BLOCK_H, BLOCK_N]`` fp32: ``q_pe . k_pe + sum_j scale_j (q_j . e4m3_j)`` over
    the four 128-column code tiles ``j`` of the rows (``row8``: uint8 row pointers ``[BLOCK_N, 1]``; ``rowf``: each
    row's first scale in the fp32 view, ``[BLOCK_N]``; ``rope``: ``[BLOCK_N, 64]`` pointers to its bf16 rope
    values; ``ROPE`` False: a NoPE row, ``q_pe`` and ``rope`` are not read and the rope term is absent). Returns
    ``(qk, sc0, sc1, sc2, sc3)``, the scales reused by the PV dots."""
    k0 = _e4m3_tile(row8, 0, valid, DOT_DTYPE, FP8_HW)
    k1 = _e4m3_tile(row8, 128, valid, DOT_DTYPE, FP8_HW)
    k2 = _e4m3_tile(row8, 256, valid, DOT_DTYPE, FP8_HW)
    k3 = _e4m3_tile(row8, 384, valid, DOT_DTYPE, FP8_HW)
    sc0, sc1, sc2, sc3 = _row_scales(rowf, valid, VEC_SCALES)
    zero = tl.zeros([q0.shape[0], k0.shape[0]], dtype=tl.float32)
    if ROPE:
        k_pe = tl.load(rope, mask=valid[:, None], other=0.0).to(DOT_DTYPE)
        qk = _dot(q_pe, tl.trans(k_pe), zero, IEEE)
    else:
        qk = zero
    qk += _dot(q0, tl.trans(k0), zero, IEEE) * sc0[None, :]
    qk += _dot(q1, tl.trans(k1), zero, IEEE) * sc1[None, :]
    qk += _dot(q2, tl.trans(k2), zero, IEEE) * sc2[None, :]
    qk += _dot(q3, tl.trans(k3), zero, IEEE) * sc3[None, :]
    return qk, sc0, sc1, sc2, sc3


@triton.jit
def _fold_scores_kept(q_pe, q0, q1, q2, q3, row8, rowf, rope, valid, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr,
                      FP8_HW: tl.constexpr, VEC_SCALES: tl.constexpr, ROPE: tl.constexpr = True):
    """:func:`_fold_scores` that also returns the four raw code tiles (uint8 ``[BLOCK_N, 128]``, 32 registers per
    thread at 16 x 32 and 4 warps) for the PV dots to decode again, instead of reading them a second time
    (``KEEP_CODES``): ``(qk, sc0..sc3, c0..c3)``; ``ROPE`` as there."""
    cols = tl.arange(0, 128)[None, :]
    c0 = tl.load(row8 + cols, mask=valid[:, None], other=0)
    c1 = tl.load(row8 + 128 + cols, mask=valid[:, None], other=0)
    c2 = tl.load(row8 + 256 + cols, mask=valid[:, None], other=0)
    c3 = tl.load(row8 + 384 + cols, mask=valid[:, None], other=0)
    sc0, sc1, sc2, sc3 = _row_scales(rowf, valid, VEC_SCALES)
    zero = tl.zeros([q0.shape[0], c0.shape[0]], dtype=tl.float32)
    if ROPE:
        k_pe = tl.load(rope, mask=valid[:, None], other=0.0).to(DOT_DTYPE)
        qk = _dot(q_pe, tl.trans(k_pe), zero, IEEE)
    else:
        qk = zero
    qk += _dot(q0, tl.trans(e4m3_to_f32(c0, FP8_HW).to(DOT_DTYPE)), zero, IEEE) * sc0[None, :]
    qk += _dot(q1, tl.trans(e4m3_to_f32(c1, FP8_HW).to(DOT_DTYPE)), zero, IEEE) * sc1[None, :]
    qk += _dot(q2, tl.trans(e4m3_to_f32(c2, FP8_HW).to(DOT_DTYPE)), zero, IEEE) * sc2[None, :]
    qk += _dot(q3, tl.trans(e4m3_to_f32(c3, FP8_HW).to(DOT_DTYPE)), zero, IEEE) * sc3[None, :]
    return qk, sc0, sc1, sc2, sc3, c0, c1, c2, c3


@triton.jit
def _fold_pv_tile(p, scale, acc, alpha, row8, col0, valid, P_SCALE: tl.constexpr, DOT_DTYPE: tl.constexpr,
                  IEEE: tl.constexpr, FP8_HW: tl.constexpr):
    """``acc * alpha + (p * scale * P_SCALE) @ e4m3`` for one 128-column value tile at ``col0``: V is the same codes,
    re-read (mostly an L2 hit on the H200, ``KEEP_CODES`` is the alternative) rather than kept in registers since the
    score dots (keeping them costs 4 x ``[BLOCK_N, 128]``
    dot-operand registers across the softmax and spills at 16 heads: AOT 624 bytes of stack for 16 x 64 on sm_90,
    none with the re-read)."""
    return _dot((p * (scale * P_SCALE)[None, :]).to(DOT_DTYPE), _e4m3_tile(row8, col0, valid, DOT_DTYPE, FP8_HW, True),
                acc * alpha[:, None], IEEE)


@triton.jit
def _fold_pv_kept(p, scale, acc, alpha, codes, P_SCALE: tl.constexpr, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr,
                  FP8_HW: tl.constexpr):
    """:func:`_fold_pv_tile` on codes kept in registers since the score dots (``KEEP_CODES``): decoded a second time,
    not read a second time."""
    return _dot((p * (scale * P_SCALE)[None, :]).to(DOT_DTYPE), e4m3_to_f32(codes, FP8_HW).to(DOT_DTYPE),
                acc * alpha[:, None], IEEE)


@triton.jit
def _fold_store(a0, a1, a2, a3, m_i, l_i, j0, t, s, offs_h, mask_h, dvb, Out, Lse, O_part, Lse_part,
                stride_o_t, stride_o_h, stride_l_t, stride_l_h, stride_op_t, stride_op_h, stride_op_s,
                stride_lp_t, stride_lp_h, P_SCALE: tl.constexpr, NTV: tl.constexpr, SPLIT: tl.constexpr):
    """The "fold" kernel's outputs: ``acc / (l * P_SCALE)`` of its ``NTV`` value tiles (from tile ``j0``) and the
    log-sum-exp (base 2 in the split partials, natural log in ``Lse``); an empty row gives 0 and ``-inf``."""
    empty = l_i == 0.0
    inv_l = (1.0 / P_SCALE) / tl.where(empty, 1.0, l_i)
    lse2 = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    col = j0 * 128 + tl.arange(0, 128)
    _store_tile(a0, inv_l, col, t, s, offs_h, mask_h, Out, O_part,
                stride_o_t, stride_o_h, stride_op_t, stride_op_h, stride_op_s, SPLIT)
    if NTV >= 2:
        _store_tile(a1, inv_l, col + 128, t, s, offs_h, mask_h, Out, O_part,
                    stride_o_t, stride_o_h, stride_op_t, stride_op_h, stride_op_s, SPLIT)
    if NTV == 4:
        _store_tile(a2, inv_l, col + 256, t, s, offs_h, mask_h, Out, O_part,
                    stride_o_t, stride_o_h, stride_op_t, stride_op_h, stride_op_s, SPLIT)
        _store_tile(a3, inv_l, col + 384, t, s, offs_h, mask_h, Out, O_part,
                    stride_o_t, stride_o_h, stride_op_t, stride_op_h, stride_op_s, SPLIT)
    if SPLIT:
        tl.store(Lse_part + t * stride_lp_t + offs_h * stride_lp_h + s, lse2, mask=mask_h & (dvb == 0))
    else:
        tl.store(Lse + t * stride_l_t + offs_h * stride_l_h, lse2 * _LN2, mask=mask_h & (dvb == 0))


@triton.jit
def _fold_q(q_nope_row, q_pe_row, mask_h, DOT_DTYPE: tl.constexpr, ROPE: tl.constexpr = True):
    """One program's query for the fold kernel, in ``DOT_DTYPE``: the latent's four ``[BLOCK_H, 128]`` tiles at
    ``q_nope_row`` (``[BLOCK_H, 1]`` head-row pointers) and the rope part at ``q_pe_row`` (``[BLOCK_H, DR]``; with
    ``ROPE`` False, a NoPE head, not read: a zero placeholder the kernel never uses)."""
    q_row = q_nope_row + tl.arange(0, 128)[None, :]
    q0 = tl.load(q_row, mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)
    q1 = tl.load(q_row + 128, mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)
    q2 = tl.load(q_row + 256, mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)
    q3 = tl.load(q_row + 384, mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)
    if ROPE:
        q_pe = tl.load(q_pe_row, mask=mask_h[:, None], other=0.0).to(DOT_DTYPE)
    else:
        q_pe = tl.zeros([q0.shape[0], 16], dtype=DOT_DTYPE)
    return q0, q1, q2, q3, q_pe


@triton.jit
def _fold_zeros(BLOCK_H: tl.constexpr):
    """The fold kernel's four fp32 accumulators ``[BLOCK_H, 128]``, zero."""
    return (tl.zeros([BLOCK_H, 128], dtype=tl.float32), tl.zeros([BLOCK_H, 128], dtype=tl.float32),
            tl.zeros([BLOCK_H, 128], dtype=tl.float32), tl.zeros([BLOCK_H, 128], dtype=tl.float32))


# Two options under measurement (``results/h200/KERNEL_NOTES.md``, 2026-12-04; the launcher passes neither, so the
# planned launch is the kernel as measured before): ``KEEP_CODES`` keeps the raw code tiles in registers from the
# score dots to the PV dots (``BLOCK_DV = 512`` only) instead of re-reading them -- ncu saw an 11.6 % L1 hit rate,
# so the re-read goes to L2; ``VEC_SCALES`` loads a row's four scales with one 16-byte load.
@triton.jit
def _sparse_mla_fp8_fwd_kernel(
    Q_nope, Q_pe, KV, KV_f32, KV_bf16, Idx,   # KV: uint8 fp8_ds_mla cache; KV_f32 / KV_bf16: its fp32 / bf16 views
    Out, Lse, O_part, Lse_part,
    sm_scale_log2,
    H, TOPK, CHUNK,
    stride_qn_t, stride_qn_h,
    stride_qp_t, stride_qp_h,
    stride_idx_t,                  # (no cache stride: the fp8_ds_mla row is a constant, sparse_mla.layouts)
    stride_o_t, stride_o_h,
    stride_l_t, stride_l_h,
    stride_op_t, stride_op_h, stride_op_s,
    stride_lp_t, stride_lp_h,
    DL: tl.constexpr, DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr,
    SPLIT: tl.constexpr, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr, FP8_HW: tl.constexpr,
    KEEP_CODES: tl.constexpr = False, VEC_SCALES: tl.constexpr = False,
):
    """The "fold" fp8_ds_mla kernel (module docstring; the grid, outputs and softmax of :func:`_sparse_mla_fwd_kernel`):
    ``DL = 512``, ``DR = 64`` (656-byte rows) or 0 (the NoPE head's 528-byte rows: ``Q_pe``, ``KV_bf16`` never read);
    ``BLOCK_DV`` 128, 256 or 512 (``NTV = BLOCK_DV / 128`` value tiles per program: ``dvb * NTV + i``)."""
    tl.static_assert(DL == 512 and (DR == 64 or DR == 0))
    ROW8: tl.constexpr = _ROW8 if DR > 0 else _NOPE_ROW8
    ROW_F32: tl.constexpr = _ROW_F32 if DR > 0 else _NOPE_ROW_F32
    # PV operands are p * scale_j * 2**9 (~ p * max|x| of the tile, as a plain cache's V): p * scale_j alone falls
    # into fp16's subnormals for small latents (scale = max|x| / 448); the power of two is undone exactly at the end
    P_SCALE: tl.constexpr = 512.0
    NTV: tl.constexpr = BLOCK_DV // 128
    NUM_DV: tl.constexpr = DL // BLOCK_DV
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1) // NUM_DV
    dvb = tl.program_id(1) % NUM_DV
    s = tl.program_id(2)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_dr = tl.arange(0, DR if DR > 0 else 16)    # (16: a placeholder width for the NoPE head, never read)
    q0, q1, q2, q3, q_pe = _fold_q(Q_nope + t * stride_qn_t + offs_h[:, None] * stride_qn_h,
                                   Q_pe + t * stride_qp_t + offs_h[:, None] * stride_qp_h + offs_dr[None, :], mask_h,
                                   DOT_DTYPE, DR > 0)

    end = tl.minimum(s * CHUNK + CHUNK, TOPK)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    a0, a1, a2, a3 = _fold_zeros(BLOCK_H)
    j0 = dvb * NTV                                   # first value tile of this program
    idx_row = Idx + t * stride_idx_t
    for n0 in range(s * CHUNK, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        slot = tl.load(idx_row + offs_n, mask=offs_n < end, other=-1)
        valid = slot >= 0
        slot64 = slot.to(tl.int64)
        row8 = KV + slot64[:, None] * ROW8
        rowf = KV_f32 + slot64 * ROW_F32 + _SCALES_F32   # the 4 scales of each row
        rope = KV_bf16 + slot64[:, None] * _ROW_BF16 + _ROPE_BF16 + offs_dr[None, :]   # (not read when DR = 0)
        if KEEP_CODES:        # (a compile-time branch: the code tiles c0..c3 exist only in this variant)
            tl.static_assert(NTV == 4)
            qk, sc0, sc1, sc2, sc3, c0, c1, c2, c3 = _fold_scores_kept(q_pe, q0, q1, q2, q3, row8, rowf, rope, valid,
                                                                       DOT_DTYPE, IEEE, FP8_HW, VEC_SCALES, DR > 0)
        else:
            qk, sc0, sc1, sc2, sc3 = _fold_scores(q_pe, q0, q1, q2, q3, row8, rowf, rope, valid, DOT_DTYPE, IEEE,
                                                  FP8_HW, VEC_SCALES, DR > 0)
        p, alpha, m_i, l_i = _softmax_step(qk, valid, m_i, l_i, sm_scale_log2)
        if KEEP_CODES:
            a0 = _fold_pv_kept(p, sc0, a0, alpha, c0, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
            a1 = _fold_pv_kept(p, sc1, a1, alpha, c1, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
            a2 = _fold_pv_kept(p, sc2, a2, alpha, c2, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
            a3 = _fold_pv_kept(p, sc3, a3, alpha, c3, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
        elif NTV == 4:
            a0 = _fold_pv_tile(p, sc0, a0, alpha, row8, 0, valid, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
            a1 = _fold_pv_tile(p, sc1, a1, alpha, row8, 128, valid, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
            a2 = _fold_pv_tile(p, sc2, a2, alpha, row8, 256, valid, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
            a3 = _fold_pv_tile(p, sc3, a3, alpha, row8, 384, valid, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
        else:                 # this program's 1 or 2 value tiles, with their scales
            a0 = _fold_pv_tile(p, tl.load(rowf + j0, mask=valid, other=0.0), a0, alpha, row8, j0 * 128, valid,
                               P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
            if NTV == 2:
                a1 = _fold_pv_tile(p, tl.load(rowf + j0 + 1, mask=valid, other=0.0), a1, alpha, row8, j0 * 128 + 128,
                                   valid, P_SCALE, DOT_DTYPE, IEEE, FP8_HW)
    _fold_store(a0, a1, a2, a3, m_i, l_i, j0, t, s, offs_h, mask_h, dvb, Out, Lse, O_part, Lse_part,
                stride_o_t, stride_o_h, stride_l_t, stride_l_h, stride_op_t, stride_op_h, stride_op_s,
                stride_lp_t, stride_lp_h, P_SCALE, NTV, SPLIT)


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
        lse = tl.where(w_sum == 0.0, float("-inf"), (m_ref + tl.log2(tl.where(w_sum == 0.0, 1.0, w_sum))) * _LN2)
        tl.store(Lse + t * stride_l_t + h * stride_l_h, lse)


def kernel_for(kv_cache_dtype: str, fp8_scales: str):
    """The attention kernel of a cache layout and scale variant: :func:`_sparse_mla_fwd_kernel` (a float cache),
    :func:`_sparse_mla_fp8_fwd_kernel` ("fold") or :func:`_sparse_mla_fp8_registers_fwd_kernel` ("registers")."""
    if kv_cache_dtype != "fp8_ds_mla":
        return _sparse_mla_fwd_kernel
    return _sparse_mla_fp8_fwd_kernel if fp8_scales == "fold" else _sparse_mla_fp8_registers_fwd_kernel
