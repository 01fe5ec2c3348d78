"""The lightning indexer's query: rotary embedding + fp8 e4m3 quantization, in Triton that compiles on SM80/86.

vLLM's ``fused_indexer_q_rope_quant`` (``vllm/model_executor/layers/sparse_attn_indexer.py``, called from
``Indexer.forward`` in ``vllm/model_executor/models/deepseek_v2.py`` when ``index_head_dim == 128`` and the rope part
is 64) does, per query token ``t`` and index head ``h`` (``q[t, h]`` bf16, 64 rope dims then 64 others):

1. rope on the first 64 dims with ``cos, sin = cos_sin_cache[positions[t], :32], [32:64]`` (NeoX halves or
   interleaved pairs), in fp32, each rotated value rounded to bf16;
2. one scale per (token, head): ``s = 2 ** ceil(log2(max(amax, 1e-10) / 448))`` (ue8m0: a power of two), ``amax``
   over the rotated and the plain dims;
3. ``q_fp8 = e4m3(clamp(x / s, -448, 448))`` and ``weights_out = weights * s * softmax_scale * head_scale`` (the
   query's scale goes into the head weights, so the logits kernels need no q scale).

Its stores convert fp32 to ``fp8e4nv``, which Triton compiles only from SM89. :func:`fused_indexer_q_rope_quant` here
is the same kernel, line for line, with the stores going through :func:`sparse_mla.kernels.fp8.f32_to_e4m3` (the
exact software rounding on SM80/86, the hardware conversion from SM89) into the uint8 view of the
``torch.float8_e4m3fn`` output: the same signature, outputs and numbers as vLLM's. (Under Triton's CPU interpreter,
which truncates fp32 -> bf16 instead of rounding, the bf16 rounding of the rotated values is done on the bit
pattern; on a GPU the kernel uses ``.to(tl.bfloat16)`` as vLLM's does.)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import UserInputError
from .fp8 import E4M3_MAX, f32_to_e4m3, has_fp8_conversion
from ..machine import interpreting


@triton.jit
def _round_to_bf16(x, SOFT: tl.constexpr):
    """fp32 -> nearest-even bf16 -> fp32. ``SOFT`` (the interpreter only, which truncates instead of rounding,
    triton-lang/triton issue 11584): the same rounding on the fp32 bit pattern."""
    if SOFT:
        bits = x.to(tl.int32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return bits.to(tl.float32, bitcast=True)
    else:
        return x.to(tl.bfloat16).to(tl.float32)


@triton.jit
def _indexer_q_rope_quant_kernel(
    positions, q, q_s0, q_s1, cos_sin_cache, cos_sin_s0,
    q_fp8, q_fp8_s0, q_fp8_s1,
    weights, weights_s0, weights_s1, weights_out, weights_out_s0, weights_out_s1,
    softmax_scale, head_scale,
    fp8_min: tl.constexpr, fp8_max: tl.constexpr, is_neox: tl.constexpr, HW: tl.constexpr,
    SOFT_BF16: tl.constexpr,
):
    """vLLM's ``_fused_indexer_q_rope_quant_kernel`` with ``f32_to_e4m3`` stores into uint8 (``q_fp8``) and, under
    the interpreter only, a software bf16 rounding."""
    token = tl.program_id(0)
    head = tl.program_id(1)
    offs32 = tl.arange(0, 32)
    offs64 = tl.arange(0, 64)

    pos = tl.load(positions + token)
    cos = tl.load(cos_sin_cache + pos * cos_sin_s0 + offs32).to(tl.float32)
    sin = tl.load(cos_sin_cache + pos * cos_sin_s0 + 32 + offs32).to(tl.float32)
    q_base = q + token * q_s0 + head * q_s1
    out_base = q_fp8 + token * q_fp8_s0 + head * q_fp8_s1

    if is_neox:
        x0 = tl.load(q_base + offs32).to(tl.float32)
        x1 = tl.load(q_base + 32 + offs32).to(tl.float32)
    else:
        x0 = tl.load(q_base + offs32 * 2).to(tl.float32)
        x1 = tl.load(q_base + offs32 * 2 + 1).to(tl.float32)
    r0 = _round_to_bf16(x0 * cos - x1 * sin, SOFT_BF16)
    r1 = _round_to_bf16(x1 * cos + x0 * sin, SOFT_BF16)
    amax = tl.maximum(tl.max(tl.abs(r0)), tl.max(tl.abs(r1)))

    q_nope = tl.load(q_base + 64 + offs64).to(tl.float32)
    amax = tl.maximum(amax, tl.max(tl.abs(q_nope)))
    scale_raw = tl.maximum(amax, 1e-10) * (1.0 / fp8_max)
    q_scale = tl.math.exp2(tl.ceil(tl.log2(scale_raw)))      # ue8m0

    if is_neox:
        tl.store(out_base + offs32, f32_to_e4m3(tl.clamp(r0 / q_scale, fp8_min, fp8_max), HW))
        tl.store(out_base + 32 + offs32, f32_to_e4m3(tl.clamp(r1 / q_scale, fp8_min, fp8_max), HW))
    else:
        tl.store(out_base + offs32 * 2, f32_to_e4m3(tl.clamp(r0 / q_scale, fp8_min, fp8_max), HW))
        tl.store(out_base + offs32 * 2 + 1, f32_to_e4m3(tl.clamp(r1 / q_scale, fp8_min, fp8_max), HW))
    tl.store(out_base + 64 + offs64, f32_to_e4m3(tl.clamp(q_nope / q_scale, fp8_min, fp8_max), HW))

    weight = tl.load(weights + token * weights_s0 + head * weights_s1).to(tl.float32)
    tl.store(weights_out + token * weights_out_s0 + head * weights_out_s1,
             weight * q_scale * softmax_scale * head_scale)


def indexer_q_rope_quant(positions: torch.Tensor, q: torch.Tensor, cos_sin_cache: torch.Tensor,
                         weights: torch.Tensor, softmax_scale: float, head_scale: float, is_neox: bool, *,
                         capability: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rope + ue8m0-scaled fp8 e4m3 quantization of the indexer's query (vLLM's ``fused_indexer_q_rope_quant``).

    Args:
        positions: ``[T]`` integer token positions (rows of ``cos_sin_cache``).
        q: ``[T, H, 128]`` bfloat16 query (64 rope dims first), any strides with a unit last stride.
        cos_sin_cache: ``[max_position, 64]`` (cos 32 || sin 32), any float dtype.
        weights: ``[T, H]`` head weights (any float dtype).
        softmax_scale, head_scale: folded into the output weights (vLLM: ``128 ** -0.5``, ``H ** -0.5``).
        is_neox: NeoX halves (True) or interleaved pairs (False; GLM-5) for the rope.
        capability: compute capability that picks the fp8 store (hardware from SM89; default: ``q``'s device's;
            CPU and the interpreter: software).

    Returns:
        ``(q_fp8 [T, H, 128] torch.float8_e4m3fn, weights_out [T, H] float32)``.

    Raises:
        sparse_mla.errors.UserInputError: the conditions vLLM asserts (bf16 q, last dims 128 and 64, weights of
            q's ``[T, H]``) or tensors on different devices.
    """
    for name, x in (("positions", positions), ("q", q), ("cos_sin_cache", cos_sin_cache), ("weights", weights)):
        if not isinstance(x, torch.Tensor):
            raise UserInputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if q.dtype != torch.bfloat16 or q.dim() != 3 or q.shape[-1] != 128:
        raise UserInputError(f"q {tuple(q.shape)} {q.dtype} is not accepted; accepted: [T, H, 128] bfloat16")
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[-1] != 64:
        raise UserInputError(f"cos_sin_cache has shape {tuple(cos_sin_cache.shape)}; accepted: [max_position, 64]")
    if tuple(weights.shape) != tuple(q.shape[:2]):
        raise UserInputError(f"weights has shape {tuple(weights.shape)}; accepted: {list(q.shape[:2])} (q's [T, H])")
    if positions.dim() != 1 or positions.shape[0] != q.shape[0] or positions.dtype.is_floating_point:
        raise UserInputError(f"positions {tuple(positions.shape)} {positions.dtype} is not accepted; accepted: "
                             f"[{q.shape[0]}] integers")
    devs = {x.device for x in (positions, q, cos_sin_cache, weights)}
    if len(devs) != 1:
        raise UserInputError(f"tensors are on different devices {sorted(map(str, devs))}; accepted: one device")
    if q.stride(-1) != 1 or cos_sin_cache.stride(-1) != 1:
        raise UserInputError("q and cos_sin_cache need a unit last stride")
    if capability is None and q.device.type == "cuda":
        capability = torch.cuda.get_device_capability(q.device)
    hw = capability is not None and not interpreting() and has_fp8_conversion(capability)
    return launch_q_rope_quant(positions, q, cos_sin_cache, weights, softmax_scale, head_scale, is_neox, hw=hw,
                               soft_bf16=interpreting())


def launch_q_rope_quant(positions, q, cos_sin_cache, weights, softmax_scale, head_scale, is_neox, *, hw: bool,
                        soft_bf16: bool = False):
    """:func:`indexer_q_rope_quant` without checks and with the store path decided by the caller (``hw``: hardware
    fp8 conversion, SM89+; ``soft_bf16``: under the interpreter). As lean as vLLM's own launcher, so that
    ``torch.compile`` traces it inside ``Indexer.forward`` the same way (the plugin's replacement calls it)."""
    # the kernel writes uint8 codes into a tensor of its own, returned as its float8_e4m3fn view: no write through
    # a dtype-view alias, which keeps torch.compile's functionalization of the kernel call simple
    codes = torch.empty_like(q, dtype=torch.uint8)
    weights_out = torch.empty_like(weights, dtype=torch.float32)
    if q.shape[0] > 0 and q.shape[1] > 0:
        _indexer_q_rope_quant_kernel[(q.shape[0], q.shape[1])](
            positions, q, q.stride(0), q.stride(1), cos_sin_cache, cos_sin_cache.stride(0),
            codes, codes.stride(0), codes.stride(1),
            weights, weights.stride(0), weights.stride(1), weights_out, weights_out.stride(0), weights_out.stride(1),
            softmax_scale, head_scale,
            fp8_min=-E4M3_MAX, fp8_max=E4M3_MAX, is_neox=bool(is_neox), HW=hw, SOFT_BF16=soft_bf16, num_warps=1)
    return codes.view(torch.float8_e4m3fn), weights_out


def fused_indexer_q_rope_quant(positions: torch.Tensor, q: torch.Tensor, cos_sin_cache: torch.Tensor,
                               weights: torch.Tensor, softmax_scale: float, head_scale: float,
                               is_neox: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's signature: :func:`indexer_q_rope_quant` with the capability of ``q``'s device."""
    return indexer_q_rope_quant(positions, q, cos_sin_cache, weights, softmax_scale, head_scale, is_neox)
