"""GLM-5.3-Flash's fp8-storing KPool kernels rebuilt for SM80/86 (``sparse_mla.kernels.kpool_quant``,
``.kpool_cache``, in vLLM's signatures ``sparse_mla.vllm_plugin.kpool_stores``): under TRITON_INTERPRET=1 byte for byte
against vLLM 0.33/0.34's own kernels (``vllm/models/glm5next/nvidia/ops/kpool_compress.py``) on fresh random inputs,
the caches poisoned first, and within a derived bound against a float64 PyTorch reference; compiled ahead of time for
sm_80 .. sm_120 (subprocess, ``TRITON_INTERPRET=0``), where vLLM's own do not build for sm_80.

Triton's interpreter converts fp32 to bf16 and to fp8 wrongly (``triton.runtime.interpreter._convert_float``: the
mantissa truncated, or rounded half up without the carry into the exponent; triton-lang/triton issue 11584), so both
kernels' ``.to(tl.bfloat16)`` and vLLM's fp8 stores would not be what a GPU computes. :func:`gpu_rounding` replaces
that function, for the test, by the GPU's round-to-nearest-even (torch's conversions): vLLM's kernels then store what
``cvt.rn.satfinite`` stores, and the comparison tests our software e4m3 encoding against it.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

kc = pytest.importorskip("vllm.models.glm5next.nvidia.ops.kpool_compress",
                         reason="GLM-5.3-Flash's KPool kernels: vLLM 0.33/0.34 only")

from sparse_mla.kernels.kpool_cache import launch_kpool_compress  # noqa: E402
from sparse_mla.kernels.kpool_quant import launch_fwht128_quant  # noqa: E402
from sparse_mla.vllm_plugin import kpool_stores as ks  # noqa: E402

pytestmark = pytest.mark.every_line

_TORCH = {16: torch.bfloat16, 8: torch.float8_e4m3fn}


@pytest.fixture
def gpu_rounding(monkeypatch):
    """The interpreter's fp32 -> bf16 / fp8e4nv conversions made the GPU's (round to nearest even; fp8 inputs are
    clamped to +-448 by the kernels, so saturation never applies)."""
    import triton.language as tl
    from triton.runtime import interpreter

    stock = interpreter._convert_float

    def convert(data, src, dst, rounding_mode):
        want = {tl.bfloat16: torch.bfloat16, tl.float8e4nv: torch.float8_e4m3fn}.get(dst)
        if src != tl.float32 or want is None or rounding_mode == interpreter._ir.ROUNDING_MODE.RTZ:
            return stock(data, src, dst, rounding_mode)
        t = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32)).to(want)
        out = t.view(torch.int16 if want == torch.bfloat16 else torch.uint8).numpy()
        return out.view(np.uint16 if want == torch.bfloat16 else np.uint8).reshape(np.shape(data))

    monkeypatch.setattr(interpreter, "_convert_float", convert)


def _hadamard64() -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < 128:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(128)


def _e4m3_values(codes: torch.Tensor) -> torch.Tensor:
    return codes.view(torch.float8_e4m3fn).to(torch.float64)


def _check_quant(codes, scale, y, l1, round_scale=True):
    """Codes ``[n, 128]`` and scales ``[n]`` against float64 rotated rows ``y`` (before any bf16 rounding) whose
    inputs had row-wise ``l1 / sqrt(128)`` = ``l1``: bf16 rounds (relative 2**-8 each, before and after the
    rotation, the first spread by H over at most ``l1``), e4m3 rounds half an ulp (relative 2**-4, or 2**-10 of
    the scale among subnormals)."""
    s = scale.to(torch.float64).reshape(-1, 1)
    d = 2.0 ** -7 * (y.abs() + l1[:, None])
    bound = 2.0 ** -4 * (y.abs() + d) + d + 2.0 ** -10 * s
    err = (_e4m3_values(codes) * s - y).abs()
    assert bool((err <= bound).all()), float((err - bound).max())
    ref = y.abs().amax(1, keepdim=True).clamp_min(1e-4) / 448
    if round_scale:
        assert bool(torch.isin(torch.log2(s / ref).ceil(), torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64)).all())
    else:
        assert bool(((s - ref).abs() <= (2.0 ** -7 * (ref + l1[:, None] / 448)) + 1e-12).all())


@pytest.mark.interpreter
@pytest.mark.parametrize("rows", [1, 37])
def test_fwht128_quant_is_vllms_byte_for_byte(gpu_rounding, rows):
    g = torch.Generator().manual_seed(rows)
    q = (torch.randn(rows, 128, generator=g) * torch.rand(rows, 1, generator=g) * 20).to(torch.bfloat16)
    q[0, :3] = 0
    if rows > 2:
        q[1] = 0                                                    # absmax floor 1e-4
        q[2] *= 1e-4                                                # e4m3 subnormals
    want = kc.fwht128_quant_fp8(q)
    got = ks.fwht128_quant_fp8(q)
    assert got[0].dtype == torch.float8_e4m3fn and got[1].shape == (rows, 1)
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8))
    assert torch.equal(got[1], want[1])
    q64 = q.to(torch.float64)
    _check_quant(got[0], got[1], q64 @ _hadamard64().T, q64.abs().sum(1) / math.sqrt(128) * 2.0 ** -13)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fwht128_quant_in_fp32_and_fp16_against_float64(gpu_rounding, dtype):
    g = torch.Generator().manual_seed(5)
    q = (torch.randn(9, 128, generator=g) * 3).to(dtype)
    codes, scale = launch_fwht128_quant(q, hw=False)
    q64 = q.to(torch.float64)
    _check_quant(codes, scale, q64 @ _hadamard64().T, q64.abs().sum(1) / math.sqrt(128) * 2.0 ** -13)


def _pool_ref(slot_k, slot_score, ape):
    """float64 softmax(score + ape)-weighted pool sums, rotated: ``(y [n, 128], l1 [n])``."""
    w = torch.softmax(slot_score.to(torch.float64) + ape.to(torch.float64), dim=1)
    p = (w * slot_k.to(torch.float64)).sum(1)
    return p @ _hadamard64().T, p.abs().sum(1) / math.sqrt(128)


def _entries(cache, locs):
    """(codes [n, 128] uint8, scales [n] fp32) at flat slots ``locs`` of a ``[blocks, bs, 132]`` cache."""
    bs = cache.shape[1]
    flat = cache.view(cache.shape[0], -1)
    codes = torch.stack([flat[l // bs, (l % bs) * 128:(l % bs + 1) * 128] for l in locs])
    scales = torch.stack([flat[l // bs, bs * 128 + 4 * (l % bs):bs * 128 + 4 * (l % bs + 1)] for l in locs])
    return codes, scales.view(torch.float32).flatten()


def _written(cache, locs):
    """Byte mask of the entries at ``locs``."""
    bs = cache.shape[1]
    m = torch.zeros(cache.shape[0], bs * 132, dtype=torch.bool)
    for l in locs:
        m[l // bs, (l % bs) * 128:(l % bs + 1) * 128] = True
        m[l // bs, bs * 128 + 4 * (l % bs):bs * 128 + 4 * (l % bs + 1)] = True
    return m.view(cache.shape)


def _pools(n, pool, g, scale=4.0):
    return ((torch.randn(n, pool, 128, generator=g) * scale).to(torch.bfloat16),
            (torch.randn(n, pool, 128, generator=g) * 2).to(torch.bfloat16),
            torch.randn(pool, 128, generator=g))


@pytest.mark.interpreter
@pytest.mark.parametrize("pool, bs, masked", [(4, 16, True), (4, 32, False), (2, 16, True)])
def test_compress_and_write_is_vllms_byte_for_byte(gpu_rounding, pool, bs, masked):
    g = torch.Generator().manual_seed(pool * 100 + bs + masked)
    n, blocks = 7, 3
    slot_k, slot_score, ape = _pools(n, pool, g)
    loc = torch.randperm(blocks * bs, generator=g)[:n].to(torch.int64)
    mask = (torch.arange(n) % 3 != 1) if masked else None
    poison = torch.randint(0, 256, (blocks, bs, 132), generator=g, dtype=torch.uint8)
    want, got = poison.clone(), poison.clone()
    assert kc.kpool_compress_and_write_cache(want, slot_k, slot_score, ape, loc, pool, write_mask=mask) is None
    assert ks.kpool_compress_and_write_cache(got, slot_k, slot_score, ape, loc, pool, write_mask=mask) is None
    assert torch.equal(got, want)
    kept = [i for i in range(n) if mask is None or bool(mask[i])]
    written = _written(poison, loc[kept].tolist())
    assert torch.equal(got[~written], poison[~written])              # nothing else touched
    codes, scales = _entries(got, loc[kept].tolist())
    y, l1 = _pool_ref(slot_k, slot_score, ape)
    _check_quant(codes, scales, y[kept], l1[kept])


@pytest.mark.interpreter
@pytest.mark.parametrize("round_scale", [True, False])
def test_compress_returns_vllms_codes_without_the_cache(gpu_rounding, round_scale):
    g = torch.Generator().manual_seed(11 + round_scale)
    slot_k, slot_score, ape = _pools(5, 4, g, scale=30.0)
    loc = torch.arange(5, dtype=torch.int64)
    poison = torch.randint(0, 256, (1, 16, 132), generator=g, dtype=torch.uint8)
    want_cache, got_cache = poison.clone(), poison.clone()
    args = dict(round_scale=round_scale, return_compressed=True, write_cache=False)
    want = kc.kpool_compress_and_write_cache(want_cache, slot_k, slot_score, ape, loc, 4, **args)
    got = ks.kpool_compress_and_write_cache(got_cache, slot_k, slot_score, ape, loc, 4, **args)
    assert got[0].dtype == torch.float8_e4m3fn and got[1].shape == (5,)
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(got[1], want[1])
    assert torch.equal(got_cache, poison)
    _check_quant(got[0].view(torch.uint8), got[1], *_pool_ref(slot_k, slot_score, ape), round_scale=round_scale)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_compress_launch_in_fp32_and_fp16_against_float64(gpu_rounding, dtype):
    g = torch.Generator().manual_seed(3)
    slot_k, slot_score, ape = (t.to(dtype) for t in _pools(4, 4, g))
    codes, scales = launch_kpool_compress(torch.zeros(1, 16, 132, dtype=torch.uint8), slot_k, slot_score,
                                          ape.float(), torch.arange(4), None, round_scale=True, mx_scale=False,
                                          return_compressed=True, write_cache=False, hw=False)
    _check_quant(codes.view(torch.uint8), scales, *_pool_ref(slot_k, slot_score, ape))


def _decode_case(g, pool, ring, starts, next_n, blocks=3, bs=16):
    """Requests at positions ``start .. start + next_n - 1``, each with its own tail block, pool slots (the pool's
    last token only), one padded token (position -1) and one token with no cache slot."""
    B = len(starts)
    pos = torch.stack([torch.arange(next_n) + s for s in starts]).to(torch.int32)
    tail_block = torch.randperm(B + 1, generator=g)[:B]
    tail_slot = (tail_block[:, None] * ring + pos % ring).to(torch.int32)
    cache_slot = torch.randperm(blocks * bs, generator=g)[:B * next_n].view(B, next_n).to(torch.int32)
    cache_slot = torch.where(pos % pool == pool - 1, cache_slot, -1).to(torch.int32)
    pos[0, -1], tail_slot[0, -1], cache_slot[0, -1] = -1, -1, -1
    key = (torch.randn(B, next_n, 128, generator=g) * 4).to(torch.bfloat16)
    score = (torch.randn(B, next_n, 128, generator=g) * 2).to(torch.bfloat16)
    tail = (torch.randn(B + 1, 2, ring, 128, generator=g) * 3).to(torch.bfloat16)
    return tail, tail_slot, key, score, cache_slot, pos


def _decode_ref(tail, tail_slot, key, score, ape, cache_slot, pos, pool):
    """float64 replay of the decode kernel: per request in token order, a pool completed from the ring (the current
    token in its own slot) before the token is stashed. Returns ``{cache slot: (y [128], l1)}``."""
    ring = tail.shape[2]
    t64 = tail.to(torch.float64).clone()
    out = {}
    for b in range(key.shape[0]):
        for t in range(key.shape[1]):
            p, ts, cs = int(pos[b, t]), int(tail_slot[b, t]), int(cache_slot[b, t])
            blk, slot = max(ts, 0) // ring, max(p, 0) % pool
            if cs >= 0 and p >= 0 and slot == pool - 1:
                phys = [(p - slot + j) % ring for j in range(pool)]
                ks_ = torch.stack([t64[blk, 0, r] for r in phys])
                ss_ = torch.stack([t64[blk, 1, r] for r in phys])
                ks_[slot], ss_[slot] = key[b, t].to(torch.float64), score[b, t].to(torch.float64)
                y, l1 = _pool_ref(ks_[None], ss_[None], ape)
                out[cs] = (y[0], l1[0])
            if p >= 0 and ts >= 0:
                t64[blk, 0, p % ring], t64[blk, 1, p % ring] = key[b, t].double(), score[b, t].double()
    return out, t64


@pytest.mark.interpreter
@pytest.mark.parametrize("pool, ring, starts, next_n", [(4, 8, (2, 5, 9), 5), (4, 4, (3, 0), 1), (2, 4, (1, 6), 3)])
def test_decode_update_is_vllms_byte_for_byte(gpu_rounding, pool, ring, starts, next_n):
    g = torch.Generator().manual_seed(pool + ring + next_n + sum(starts))
    tail, tail_slot, key, score, cache_slot, pos = _decode_case(g, pool, ring, starts, next_n)
    ape = torch.randn(pool, 128, generator=g)
    poison = torch.randint(0, 256, (3, 16, 132), generator=g, dtype=torch.uint8)
    want, got = poison.clone(), poison.clone()
    want_tail, got_tail = tail.clone(), tail.clone()
    args = (ape, cache_slot, pos, pool)
    kc.kpool_decode_update_and_maybe_write_cache_batched(want, want_tail, tail_slot, key, score, *args)
    ks.kpool_decode_update_and_maybe_write_cache_batched(got, got_tail, tail_slot, key, score, *args)
    assert torch.equal(got, want) and torch.equal(got_tail.view(torch.int16), want_tail.view(torch.int16))
    ref, ref_tail = _decode_ref(tail, tail_slot, key, score, ape, cache_slot, pos, pool)
    assert torch.equal(got_tail.to(torch.float64), ref_tail)
    written = _written(poison, list(ref))
    assert torch.equal(got[~written], poison[~written])
    if ref:
        codes, scales = _entries(got, list(ref))
        _check_quant(codes, scales, torch.stack([y for y, _ in ref.values()]),
                     torch.stack([torch.as_tensor(l1) for _, l1 in ref.values()]))


def test_stand_ins_take_vllms_signatures():
    import inspect

    for name in ("fwht128_quant_fp8", "kpool_compress_and_write_cache",
                 "kpool_decode_update_and_maybe_write_cache_batched"):
        assert inspect.signature(getattr(ks, name)) == inspect.signature(getattr(kc, name)), name


BUILD = """
import json
from sparse_mla.kernels.kpool_build import compile_kpool
from vllm.models.glm5next.nvidia.ops import kpool_compress as kc
out = {}
for cap in (80, 86, 89, 90, 120):
    out[cap] = {k: "e4m3" in compile_kpool(k, divmod(cap, 10)).asm["ptx"] for k in ("fwht", "compress", "decode")}
vllms = {}
for k in ("fwht", "compress", "decode"):
    fn = {"fwht": kc._fwht_quant_kernel, "compress": kc._kpool_softmax_rotate_write_cache_kernel,
          "decode": kc._kpool_decode_update_batched_kernel}[k]
    for cap in ((8, 0), (8, 9)):
        try:
            compile_kpool(k, cap, fn=fn)
            vllms[f"{k} {cap[0]}{cap[1]}"] = "built"
        except Exception as e:
            vllms[f"{k} {cap[0]}{cap[1]}"] = str(e)[-300:]
print(json.dumps({"ours": out, "vllms": vllms}))
"""


def test_stand_ins_build_for_every_gpu_and_vllms_do_not_for_sm80():
    env = dict(os.environ, TRITON_INTERPRET="0")
    r = subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(got["ours"]) == {"80", "86", "89", "90", "120"}
    for cap, cvt in got["ours"].items():
        assert cvt == {k: int(cap) >= 89 for k in ("fwht", "compress", "decode")}, (cap, cvt)
    for k in ("fwht", "compress", "decode"):                 # vLLM's: the same arguments build from SM89 only
        assert got["vllms"][f"{k} 89"] == "built", got["vllms"]
        assert "fp8e4nv not supported in this architecture" in got["vllms"][f"{k} 80"], got["vllms"]
