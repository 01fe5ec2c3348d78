"""fp8 e4m3 (``float8_e4m3fn``) in Triton, on every GPU from SM80 up.

The DSA indexer's caches and queries (``vllm/model_executor/layers/sparse_attn_indexer.py``) and the ``fp8_ds_mla``
latent cache (``csrc/cache_kernels.cu``, FlashMLA's "FP8 KV layout") hold e4m3 codes: 1 sign bit, 4 exponent bits
(bias 7), 3 mantissa bits, no infinities, ``S.1111.111`` = NaN, largest finite 448, smallest subnormal ``2**-9``.

Triton converts ``fp8e4nv`` in hardware only from SM89 (``cvt.f32.e4m3x2`` and ``cvt.rn.satfinite.e4m3x2.f32``); on
SM80/86 ``x.to(tl.float8e4nv)`` does not compile. So every kernel of the workbook that reads or writes e4m3 takes a
constexpr ``HW`` and calls :func:`e4m3_to_f32` / :func:`f32_to_e4m3` here, which either use the hardware conversion
or do the same arithmetic with integer and fp16/fp32 operations:

* **decode** (exact): the 7 magnitude bits shifted left by 7 are an fp16 bit pattern whose value is the e4m3 value
  times ``2**-8`` (the exponent biases differ by 15 - 7 = 8), subnormals included; the sign goes to bit 15 and
  ``|code| == 0x7F`` to NaN. fp16 -> fp32 is exact (fp16 subnormals become fp32 normals), so the product with 256
  never meets fp32's flush-to-zero.
* **encode** (round to nearest even, like the hardware's ``satfinite``; callers clamp to +-448 first, as vLLM's
  kernels do): normals by rounding the fp32 bit pattern to 3 mantissa bits (carry into the exponent is the right
  answer), subnormals (``|x| < 2**-6``) by adding and subtracting ``2**14``, whose fp32 ulp is exactly ``2**-9``.

:func:`has_fp8_conversion` says which path a GPU gets.
"""
from __future__ import annotations

import triton
import triton.language as tl

#: Lowest compute capability whose Triton backend converts fp8e4nv in hardware.
FP8_HW_CAPABILITY = (8, 9)
#: Largest finite e4m3fn value.
E4M3_MAX = 448.0


def has_fp8_conversion(capability: tuple[int, int]) -> bool:
    """True when Triton converts ``fp8e4nv`` in hardware on a GPU of this compute capability (SM89 and up)."""
    return tuple(capability) >= FP8_HW_CAPABILITY


@triton.jit
def e4m3_to_f32(code, HW: tl.constexpr):
    """``uint8`` e4m3fn codes -> their float32 values (exact; NaN codes give NaN). ``HW``: hardware conversion."""
    if HW:
        return code.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        c = code.to(tl.int32)
        mag = c & 0x7F
        bits = ((c & 0x80) << 8) | (mag << 7)
        half = bits.to(tl.uint16).to(tl.float16, bitcast=True)
        val = half.to(tl.float32) * 256.0
        return tl.where(mag == 0x7F, float("nan"), val)


@triton.jit
def f32_to_e4m3(x, HW: tl.constexpr):
    """float32 values in ``[-448, 448]`` -> ``uint8`` e4m3fn codes, rounded to nearest even. ``HW``: hardware
    conversion (``cvt.rn.satfinite``)."""
    if HW:
        return x.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    else:
        bits = x.to(tl.int32, bitcast=True)
        sign = (bits >> 24) & 0x80
        a = tl.abs(x)
        abits = a.to(tl.int32, bitcast=True)
        # normals: keep 3 of fp32's 23 mantissa bits, round half to even, rebias the exponent 127 -> 7
        rounded = (abits + 0x7FFFF + ((abits >> 20) & 1)) >> 20
        normal = rounded - ((127 - 7) << 3)
        # subnormals: multiples of 2**-9, rounded half to even by the fp32 adder
        sub = ((a + 16384.0) - 16384.0) * 512.0
        code = tl.where(a < 0.015625, sub.to(tl.int32), normal)
        code = tl.minimum(code, 0x7E)
        return (code | sign).to(tl.uint8)


@triton.jit
def _roundtrip_kernel(Codes, Values, Recoded, X, Encoded, N, HW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    c = tl.load(Codes + offs, mask=mask, other=0)
    v = e4m3_to_f32(c, HW)
    tl.store(Values + offs, v, mask=mask)
    tl.store(Recoded + offs, f32_to_e4m3(tl.where(v != v, 0.0, v), HW), mask=mask)
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(Encoded + offs, f32_to_e4m3(x, HW), mask=mask)


def roundtrip(codes, x, hw: bool):
    """Decode ``codes`` (uint8, or a ``torch.float8_e4m3fn`` tensor whose bytes are used), re-encode the finite
    values, and encode ``x`` (a float tensor of as many elements, within +-448, taken as float32), with the hardware
    (``hw``) or software path: ``(values fp32, recoded uint8, encoded uint8)`` in ``codes``' shape. For tests and
    notebooks. Raises :class:`sparse_mla.errors.UserInputError` for other types, dtypes, sizes or devices."""
    import torch

    from ..errors import UserInputError

    for name, t in (("codes", codes), ("x", x)):
        if not isinstance(t, torch.Tensor):
            raise UserInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if codes.dtype not in (torch.uint8, torch.float8_e4m3fn):
        raise UserInputError(f"codes dtype {codes.dtype} is not accepted; accepted: torch.uint8 e4m3fn codes (or a "
                             f"torch.float8_e4m3fn tensor, read as its bytes)")
    if not x.is_floating_point():
        raise UserInputError(f"x dtype {x.dtype} is not accepted; accepted: a floating-point tensor")
    if not isinstance(hw, bool):
        raise UserInputError(f"hw {hw!r} is not accepted; accepted: True (hardware conversion) or False (software)")
    if codes.device != x.device:
        raise UserInputError(f"codes is on {codes.device} and x on {x.device}; accepted: one device")
    codes = codes.contiguous().view(torch.uint8)
    x = x.to(torch.float32).contiguous()
    n = codes.numel()
    if x.numel() != n:
        raise UserInputError(f"codes and x must have the same number of elements, got {n} and {x.numel()}")
    values = torch.empty(n, dtype=torch.float32, device=codes.device)
    recoded = torch.empty(n, dtype=torch.uint8, device=codes.device)
    encoded = torch.empty(n, dtype=torch.uint8, device=codes.device)
    if n:
        _roundtrip_kernel[(triton.cdiv(n, 256),)](codes, values, recoded, x, encoded, n, HW=hw, BLOCK=256)
    return values.view(codes.shape), recoded.view(codes.shape), encoded.view(codes.shape)
