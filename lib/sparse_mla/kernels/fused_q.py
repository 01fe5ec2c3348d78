"""vLLM 0.33's ``fused_q`` in Triton that compiles on SM80/86: the MLA query's RoPE and the DSA indexer query's RoPE,
ue8m0 fp8 quantization and head weights, in one launch.

vLLM 0.33 (``vllm/models/deepseek_v32/common/kernels.py``, called by ``DeepseekV32Attention.forward`` in
``vllm/models/deepseek_v32/attention.py``) does, per token ``t`` (grid ``(T, 3, heads)``, program ``pid``):

* ``pid 0``: RoPE on the MLA query's rope part ``q_pe[t, h]`` (``qk_rope_head_dim`` = 64: interleaved pairs
  ``(x1, x2) = (q_pe[2i], q_pe[2i + 1])``, ``cos, sin = cache[pos, :32], cache[pos, 32:]``, ``r1 = x1 cos - x2 sin``,
  ``r2 = x2 cos + x1 sin`` in fp32) into a new ``q_pe`` of the input's dtype, two heads per program;
* ``pid 1``: the indexer query ``index_q[t, h]`` (``index_head_dim`` 128): RoPE on its first ``2 * half`` dims
  (interleaved for GLM-5.2, NeoX halves for DeepSeek-V3.2; the partner gathered as ``x * cos + sign * partner * sin``),
  never rounded to bf16, then one ue8m0 scale per (token, head) ``s = 2 ** ceil(log2(max(amax, 1e-4) / 448))``
  (``div_rn``), ``codes = e4m3(x / s)`` and ``weights_out = weights * s * softmax_scale * head_scale``;
* ``pid 2``: the fp8 MQA query pack, only where the attention backend takes an fp8 query (``quantize_mqa``;
  FlashInfer's sparse backends). ``TRITON_MLA_SPARSE`` takes bf16 queries: not done here.

vLLM's kernel converts to ``fp8e4nv`` (``pid 1`` and ``pid 2``), which Triton compiles only from SM89: the whole
kernel then fails to build for SM80/86 (the ``pid 2`` code is generated even when ``QUANTIZE_MQA`` is off). This is
``pid 0`` and ``pid 1`` as written there, expression for expression, with the codes stored through
:func:`sparse_mla.kernels.fp8.f32_to_e4m3` (the exact round-to-nearest-even in software below SM89, the hardware
conversion from SM89) into a ``uint8`` tensor returned as its ``torch.float8_e4m3fn`` view.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fp8 import E4M3_MAX, f32_to_e4m3


@triton.jit
def _fused_q_kernel(
    positions, q_pe, q_pe_s0, q_pe_s1, q_pe_cos_sin, q_pe_cos_sin_s0, q_pe_out, q_pe_out_s0, q_pe_out_s1,
    index_q, index_q_s0, index_q_s1, index_q_cos_sin, index_q_cos_sin_s0, codes, codes_s0, codes_s1,
    weights, weights_s0, weights_out, weights_out_s0, softmax_scale, head_scale,
    NUM_Q_HEADS: tl.constexpr, Q_PE_HALF_ROT_DIM: tl.constexpr, NUM_INDEX_Q_HEADS: tl.constexpr,
    INDEX_Q_HALF_ROT_DIM: tl.constexpr, INDEX_Q_HEAD_DIM: tl.constexpr, HAS_INDEXER: tl.constexpr,
    INDEX_ROPE_INTERLEAVE: tl.constexpr, FP8_MAX: tl.constexpr, HW: tl.constexpr,
):
    """vLLM 0.33's ``_fused_q_kernel`` programs 0 and 1, the fp8 codes stored as ``uint8`` (module docstring)."""
    tok = tl.program_id(0).to(tl.int64)
    pid = tl.program_id(1)
    head = tl.program_id(2)
    if pid == 0:
        if 2 * head < NUM_Q_HEADS:
            pos = tl.load(positions + tok)
            rot_off = tl.arange(0, Q_PE_HALF_ROT_DIM)
            cos = tl.load(q_pe_cos_sin + pos * q_pe_cos_sin_s0 + rot_off).to(tl.float32)
            sin = tl.load(q_pe_cos_sin + pos * q_pe_cos_sin_s0 + Q_PE_HALF_ROT_DIM + rot_off).to(tl.float32)
            for local_head in range(2):
                q_head = head * 2 + local_head
                if q_head < NUM_Q_HEADS:
                    src = q_pe + tok * q_pe_s0 + q_head * q_pe_s1
                    x1 = tl.load(src + rot_off * 2).to(tl.float32)
                    x2 = tl.load(src + rot_off * 2 + 1).to(tl.float32)
                    r1 = x1 * cos - x2 * sin
                    r2 = x2 * cos + x1 * sin
                    dst = q_pe_out + tok * q_pe_out_s0 + q_head * q_pe_out_s1
                    tl.store(dst + rot_off * 2, r1.to(q_pe_out.dtype.element_ty))
                    tl.store(dst + rot_off * 2 + 1, r2.to(q_pe_out.dtype.element_ty))
    elif HAS_INDEXER:
        if head < NUM_INDEX_Q_HEADS:
            pos = tl.load(positions + tok)
            block = tl.arange(0, INDEX_Q_HEAD_DIM)
            base = index_q + tok * index_q_s0 + head * index_q_s1
            x = tl.load(base + block).to(tl.float32)
            in_rope = block < 2 * INDEX_Q_HALF_ROT_DIM
            if INDEX_ROPE_INTERLEAVE:
                cos_idx = block // 2
                partner_offs = tl.where(in_rope, block ^ 1, block)
                sign = tl.where(block % 2 == 0, -1.0, 1.0)
            else:
                cos_idx = block % INDEX_Q_HALF_ROT_DIM
                partner_offs = tl.where(in_rope, block ^ INDEX_Q_HALF_ROT_DIM, block)
                sign = tl.where(block < INDEX_Q_HALF_ROT_DIM, -1.0, 1.0)
            row = index_q_cos_sin + pos * index_q_cos_sin_s0
            cos_full = tl.load(row + cos_idx, mask=in_rope, other=1.0).to(tl.float32)
            sin_full = tl.load(row + INDEX_Q_HALF_ROT_DIM + cos_idx, mask=in_rope, other=0.0).to(tl.float32)
            partner = tl.load(base + partner_offs).to(tl.float32)
            roped = x * cos_full + sign * partner * sin_full
            x = tl.where(in_rope, roped, x)
            amax = tl.max(tl.abs(x))
            scale = tl.div_rn(tl.maximum(amax, 1e-4), FP8_MAX)
            scale = tl.math.exp2(tl.math.ceil(tl.math.log2(scale)))
            tl.store(codes + tok * codes_s0 + head * codes_s1 + block, f32_to_e4m3(tl.div_rn(x, scale), HW))
            w = tl.load(weights + tok * weights_s0 + head).to(tl.float32)
            w *= scale
            w *= softmax_scale
            w *= head_scale
            tl.store(weights_out + tok * weights_out_s0 + head, w)


def launch_fused_q(positions: torch.Tensor, q_pe: torch.Tensor, q_pe_cos_sin_cache: torch.Tensor,
                   index_q: torch.Tensor | None, index_q_cos_sin_cache: torch.Tensor | None,
                   index_weights: torch.Tensor | None, index_weights_softmax_scale: float,
                   index_weights_head_scale: float, *, has_indexer: bool, index_rope_interleave: bool,
                   hw: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM 0.33's ``fused_q`` with ``quantize_mqa=False`` (the bf16 MLA query), without checks.

    Args:
        positions: ``[T]`` int64 token positions (rows of both cos/sin caches).
        q_pe: ``[T, H, 64]`` MLA query rope part (any float dtype, unit last stride).
        q_pe_cos_sin_cache: ``[max_position, 64]`` (cos 32 || sin 32).
        index_q: ``[T, H_idx, 128]`` indexer query (unit last stride), or None when ``has_indexer`` is False.
        index_q_cos_sin_cache: ``[max_position, 2 * half]`` for the indexer's rope dims (None without indexer).
        index_weights: ``[T, H_idx]`` head weights (None without indexer).
        index_weights_softmax_scale, index_weights_head_scale: folded into the output weights.
        has_indexer: False for a layer that reuses another layer's top-k (then the indexer outputs are vLLM's
            one-element placeholders).
        index_rope_interleave: interleaved pairs (GLM-5.2) or NeoX halves (DeepSeek-V3.2) in the indexer's rope.
        hw: hardware fp8 conversion (SM89+); False: the software rounding (SM80/86, the interpreter).

    Returns:
        ``(index_q_fp8 [T, H_idx, 128] float8_e4m3fn, index_weights_out [T, H_idx] float32, q_pe_roped [T, H, 64]
        q_pe.dtype)``, the order vLLM's ``fused_q`` returns.
    """
    if not has_indexer:
        index_q = torch.empty((1, 1, 1), dtype=q_pe.dtype, device=q_pe.device)
        index_q_cos_sin_cache = q_pe_cos_sin_cache
        index_weights = torch.empty((1, 1), dtype=torch.float32, device=q_pe.device)
    T, H = q_pe.shape[0], q_pe.shape[1]
    q_pe_out = torch.empty_like(q_pe)
    codes = torch.empty_like(index_q, dtype=torch.uint8)
    weights_out = torch.empty_like(index_weights, dtype=torch.float32)
    grid_heads = max((H + 1) // 2, index_q.shape[1])
    if T > 0:
        _fused_q_kernel[(T, 2, grid_heads)](
            positions, q_pe, q_pe.stride(0), q_pe.stride(1), q_pe_cos_sin_cache, q_pe_cos_sin_cache.stride(0),
            q_pe_out, q_pe_out.stride(0), q_pe_out.stride(1),
            index_q, index_q.stride(0), index_q.stride(1), index_q_cos_sin_cache, index_q_cos_sin_cache.stride(0),
            codes, codes.stride(0), codes.stride(1),
            index_weights, index_weights.stride(0), weights_out, weights_out.stride(0),
            index_weights_softmax_scale, index_weights_head_scale,
            NUM_Q_HEADS=H, Q_PE_HALF_ROT_DIM=q_pe_cos_sin_cache.shape[-1] // 2, NUM_INDEX_Q_HEADS=index_q.shape[1],
            INDEX_Q_HALF_ROT_DIM=index_q_cos_sin_cache.shape[-1] // 2, INDEX_Q_HEAD_DIM=index_q.shape[2],
            HAS_INDEXER=bool(has_indexer), INDEX_ROPE_INTERLEAVE=bool(index_rope_interleave), FP8_MAX=E4M3_MAX,
            HW=hw, num_warps=1)
    return codes.view(torch.float8_e4m3fn), weights_out, q_pe_out
