"""The Triton sparse MLA kernel on an ``fp8_ds_mla`` cache (``kv_cache_dtype="fp8_ds_mla"``), under TRITON_INTERPRET=1
on the CPU, against the float64 reference (:func:`sparse_mla_attention_ref` with the same ``kv_cache_dtype``, which
decodes the 656-byte rows with PyTorch's own ``float8_e4m3fn``). Caches are built byte by byte from random e4m3 codes
(no NaN codes), random positive fp32 scales (not powers of two) and random bf16 rope values; outputs are poisoned
(NaN) before every run. Both scale variants ("fold", "registers"), both e4m3 decode paths (software: SM80/86;
hardware: SM89+, which the interpreter executes too), the direct and split-KV paths, -1 anywhere, all-invalid rows.
Errors are held to the limits :mod:`sparse_mla.kernels.error_bounds` derives from the arithmetic on each case."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse_mla.kernels.cases import random_indices, random_q
from sparse_mla import sparse_mla_attention
from sparse_mla.errors import UserInputError
from sparse_mla.kernels import choose_config, fp8_hardware_path
from sparse_mla.kernels.error_bounds import check_attention
from sparse_mla.kernels.reference import (fp8_ds_mla_decode_ref, fp8_ds_mla_encode_ref, fp8_ds_mla_pack_ref,
                                          sparse_mla_attention_ref)

FP8 = "fp8_ds_mla"
NAN_CODES = (0x7F, 0xFF)


def random_fp8_cache(num_blocks, block_size, g):
    """``uint8 [num_blocks, block_size, 656]``: random codes without the two NaN patterns, scales in
    ``[2e-3, 2e-2)`` (arbitrary fp32), rope ~ N(0, 1) in bf16."""
    n = num_blocks * block_size
    codes = torch.randint(0, 254, (n, 512), generator=g, dtype=torch.int32)
    codes = (codes + (codes >= 0x7F).int()).to(torch.uint8)          # skip 0x7F, and 0xFF is never reached
    assert not any((codes == c).any() for c in NAN_CODES)
    scales = 2e-3 + 1.8e-2 * torch.rand(n, 4, generator=g)
    rope = torch.randn(n, 64, generator=g)
    return fp8_ds_mla_pack_ref(codes, scales, rope).view(num_blocks, block_size, 656)


def fp8_case(T, H, topk, *, num_blocks=6, block_size=16, dtype=torch.float32, pad="none", seed=0, strided_q=False):
    g = torch.Generator().manual_seed(seed)
    cache = random_fp8_cache(num_blocks, block_size, g)
    q_nope, q_pe = random_q(T, H, g, dtype=dtype, strided=strided_q)
    idx = random_indices(T, topk, num_blocks * block_size, g, pad=pad)
    return q_nope, q_pe, cache, idx, (192 + 64) ** -0.5


def check(q_nope, q_pe, cache, idx, scale, **kw):
    T, H = q_pe.shape[:2]
    out = torch.full((T, H, 512), float("nan"), dtype=q_nope.dtype)
    lse = torch.full((T, H), float("nan"), dtype=torch.float32)
    o, l = sparse_mla_attention(q_nope, q_pe, cache, idx, scale, out=out, lse=lse, kv_cache_dtype=FP8, **kw)
    assert o is out and l is lse
    assert not torch.isnan(out).any(), "unwritten (poisoned) output left"
    assert not torch.isnan(lse).any(), "unwritten (poisoned) lse left"
    c = check_attention(out, lse, q_nope, q_pe, cache, idx, scale, kv_cache_dtype=FP8,
                        dot_dtype=kw.get("dot_dtype"), fp8_scales=kw.get("fp8_scales"))
    assert c.ok, c.explain()
    return out, lse


# ---- the reference's own decoder and encoder ------------------------------------------------------------------

def _e4m3_value(code: int) -> float:
    """e4m3fn from its bits, by the format's definition (sign, 4 exponent bits with bias 7, 3 mantissa bits)."""
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 0x7
    return sign * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def test_decoder_reads_the_documented_layout():
    g = torch.Generator().manual_seed(1)
    cache = random_fp8_cache(2, 4, g)
    dec = fp8_ds_mla_decode_ref(cache)
    assert dec.shape == (2, 4, 576) and dec.dtype == torch.float64
    rows = cache.reshape(-1, 656)
    for r in (0, 5):
        scales = [float(v) for v in rows[r, 512:528].contiguous().view(torch.float32)]
        for d in (0, 1, 127, 128, 300, 511):
            want = _e4m3_value(int(rows[r, d])) * scales[d // 128]
            assert dec.reshape(-1, 576)[r, d].item() == pytest.approx(want, rel=1e-15, abs=0)
        rope = rows[r, 528:].contiguous().view(torch.bfloat16).double()
        assert torch.equal(dec.reshape(-1, 576)[r, 512:], rope)


def test_encoder_roundtrip_within_e4m3_rounding():
    g = torch.Generator().manual_seed(2)
    kv_c = torch.randn(3, 8, 512, generator=g) * torch.rand(3, 8, 1, generator=g) * 5
    kv_c[0, 0, :128] = 0.0                                 # an all-zero tile: scale FLT_MIN, codes 0
    k_pe = torch.randn(3, 8, 64, generator=g)
    cache = fp8_ds_mla_encode_ref(kv_c, k_pe)
    assert cache.dtype == torch.uint8 and cache.shape == (3, 8, 656)
    dec = fp8_ds_mla_decode_ref(cache)
    scale = cache.reshape(-1, 656)[:, 512:528].contiguous().view(torch.float32)
    x = kv_c.reshape(-1, 4, 128).double()
    amax = x.abs().amax(-1)
    # one fp32 division: within half an ulp, 2**-24 relative
    torch.testing.assert_close(scale.double(), torch.clamp(amax / 448, min=torch.finfo(torch.float32).tiny),
                               rtol=2 ** -24, atol=0)
    err = (dec[..., :512].reshape(-1, 4, 128) - x).abs()
    # round to nearest with 3 mantissa bits: at most half an ulp, 2**-4 of the magnitude (subnormals: 2**-10 * scale)
    bound = torch.maximum(x.abs() * 2 ** -4, scale.double()[..., None] * 2 ** -10) * (1 + 1e-6)
    assert bool((err <= bound).all())
    assert torch.equal(dec[..., 512:], k_pe.to(torch.bfloat16).double())
    assert bool((cache.reshape(-1, 656)[0, :128] == 0).all())


# ---- the kernel against the reference --------------------------------------------------------------------------

@pytest.mark.interpreter
@pytest.mark.parametrize("fp8_scales", ["fold", "registers"])
@pytest.mark.parametrize("capability", [(8, 0), (9, 0)])          # software / hardware e4m3 decode
@pytest.mark.parametrize("path", ["direct", "split"])
def test_paths_variants_decoders(fp8_scales, capability, path):
    seed = {"fold": 0, "registers": 1}[fp8_scales] * 4 + capability[0] % 2 * 2 + (path == "split")
    case = fp8_case(2, 8, 56, pad="middle", seed=seed)
    kw = dict(block_n=16, num_splits=3) if path == "split" else dict(num_splits=1)
    check(*case, fp8_scales=fp8_scales, capability=capability, **kw)


@pytest.mark.interpreter
@pytest.mark.parametrize("H", [1, 3, 20, 64])
def test_head_counts(H):
    check(*fp8_case(2, H, 40, pad="end", seed=10 + H))


@pytest.mark.interpreter
@pytest.mark.parametrize("pad", ["end", "middle", "all", "rows", "head"])
def test_padding(pad):
    check(*fp8_case(3, 4, 48, pad=pad, seed=20 + len(pad)), block_n=16)
    check(*fp8_case(3, 4, 48, pad=pad, seed=30 + len(pad)), block_n=16, num_splits=3)


@pytest.mark.interpreter
@pytest.mark.parametrize("block_dv, fp8_scales", [(256, "fold"), (128, "fold"), (64, "registers")])
def test_output_column_split(block_dv, fp8_scales):
    check(*fp8_case(2, 5, 40, pad="middle", seed=block_dv), block_dv=block_dv, fp8_scales=fp8_scales, block_n=16,
          num_splits=2)


@pytest.mark.interpreter
def test_fp16_strided_queries_int64_indices_and_flat_cache():
    q_nope, q_pe, cache, idx, scale = fp8_case(2, 6, 30, dtype=torch.float16, strided_q=True, pad="middle", seed=40)
    assert not q_nope.is_contiguous() and not q_pe.is_contiguous()
    check(q_nope, q_pe, cache, idx.long(), scale)
    check(q_nope, q_pe, cache.view(-1, 656), idx, scale, num_splits=2, block_n=16)


@pytest.mark.interpreter
@pytest.mark.parametrize("fp8_scales", ["fold", "registers"])
def test_fp16_dots_keep_small_latents(fp8_scales):
    """fp16 dots (an fp16 model on a GPU) on a cache of small latents (max |x| ~ 4e-3, scales ~ 1e-5): the fold
    kernel's PV operands ``p * scale`` would sit in fp16's subnormals; scaled by 2**9 they are as precise as a plain
    fp16 cache's V (relative error 6.7e-3 without the factor, 3.4e-4 with it, on this case)."""
    g = torch.Generator().manual_seed(80)
    cache = fp8_ds_mla_encode_ref(torch.randn(6, 16, 512, generator=g) * 1e-3, torch.randn(6, 16, 64, generator=g))
    q_nope, q_pe = torch.randn(2, 8, 512, generator=g).half(), torch.randn(2, 8, 64, generator=g).half()
    idx = torch.randint(0, 96, (2, 64), generator=g, dtype=torch.int32)
    check(q_nope, q_pe, cache, idx, 1 / 16, dot_dtype=torch.float16, fp8_scales=fp8_scales)


@pytest.mark.interpreter
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(1, 3), H=st.integers(1, 24), topk=st.integers(1, 80), seed=st.integers(0, 2**31 - 1),
       fp8_scales=st.sampled_from(["fold", "registers"]), capability=st.sampled_from([(8, 0), (9, 0)]),
       splits=st.sampled_from([1, 2, 3]), pad=st.sampled_from(["none", "end", "middle", "rows", "head"]))
def test_hypothesis_fp8_cases(T, H, topk, seed, fp8_scales, capability, splits, pad):
    check(*fp8_case(T, H, topk, pad=pad, seed=seed), fp8_scales=fp8_scales, capability=capability,
          num_splits=splits, block_n=16)


@pytest.mark.interpreter
def test_repeated_slot_counts_twice():
    q_nope, q_pe, cache, idx, scale = fp8_case(1, 2, 2, seed=50)
    idx[0, 1] = idx[0, 0]
    check(q_nope, q_pe, cache, idx, scale)            # the kernel within its limits of the reference ...
    k = fp8_ds_mla_decode_ref(cache).reshape(-1, 576)[idx[0, 0].long()]
    s = (torch.cat([q_nope[0], q_pe[0]], -1).double() @ k) * scale
    ref_out, ref_lse = sparse_mla_attention_ref(q_nope.double(), q_pe.double(), cache, idx, scale, kv_cache_dtype=FP8)
    # ... and the reference is the closed form (float64: lse = s + log 2, out = the row), up to float64 rounding:
    # the reference forms p = exp(s - lse), so lse's rounding (u (|s| + log 2), u = 2^-53), the subtraction's and
    # exp's (u each) and the two-term sum's (u) reach out as a relative error of at most u (|s| + 4); twice that
    torch.testing.assert_close(ref_lse[0].double(), s + math.log(2), rtol=2 ** -24, atol=0)   # lse is stored fp32
    rtol = 2 * 2 ** -53 * (float(s.abs().max()) + 4)
    torch.testing.assert_close(ref_out[0], k[:512].expand(2, 512), rtol=rtol, atol=0)


@pytest.mark.interpreter
def test_fp8_cache_matches_the_float_kernel_on_the_decoded_cache():
    """The same attention through both cache formats: the fp8 kernel on the 656-byte rows and the float kernel on
    the rows decoded to float32 (e4m3 x fp32 scale rounded once to fp32): both within their limits of the float64
    reference of their own inputs, and the two results within the sum of those limits of each other."""
    q_nope, q_pe, cache, idx, scale = fp8_case(2, 4, 32, seed=60)
    dense = fp8_ds_mla_decode_ref(cache, torch.float32)
    o8, l8 = sparse_mla_attention(q_nope, q_pe, cache, idx, scale, kv_cache_dtype=FP8)
    o, l = sparse_mla_attention(q_nope, q_pe, dense, idx, scale)
    c8 = check_attention(o8, l8, q_nope, q_pe, cache, idx, scale, kv_cache_dtype=FP8)
    c = check_attention(o, l, q_nope, q_pe, dense, idx, scale)
    assert c8.ok and c.ok, (c8.explain(), c.explain())
    # the decoded cache differs from the exact rows by one fp32 rounding per value: its effect on lse is at most
    # u * sum |q k| * scale, far inside the limit
    assert (l8 - l).abs().max().item() <= c8.lse_limit + c.lse_limit


# ---- decode path and launch picks ------------------------------------------------------------------------------

def test_hardware_path_choice(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert fp8_hardware_path(cpu) is False                         # the interpreter: software by default
    assert fp8_hardware_path(cpu, (8, 9)) is True and fp8_hardware_path(cpu, (8, 6)) is False
    for own, override, want in [((9, 0), None, True), ((9, 0), (8, 0), False), ((8, 6), (9, 0), False),
                                ((8, 0), None, False), ((12, 0), (12, 0), True)]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, own=own: own)
        assert fp8_hardware_path(gpu, override) is want, (own, override)


def test_choose_config_fp8_tiles():
    """The fp8 tiles (the v3 launch, :mod:`sparse_mla.bench.launch_v3`: the fixed table; the planner picks among the same tiles, tests/kernels/
    test_attention_launch.py) and the scale variant by architecture."""
    from sparse_mla.bench.launch_v3 import v3_config
    from sparse_mla.kernels import DEVICE_LIMITS

    cpu, h200 = torch.device("cpu"), DEVICE_LIMITS[(9, 0)]
    dec = v3_config(1, 64, 2048, torch.bfloat16, cpu, kv_cache_dtype=FP8, limits=h200)
    assert (dec.block_h, dec.block_n, dec.split, dec.kv_cache_dtype, dec.fp8_scales) == (16, 32, True, FP8, "fold")
    mid = v3_config(4096, 32, 2048, torch.bfloat16, cpu, kv_cache_dtype=FP8, limits=h200)
    assert (mid.block_h, mid.block_n, mid.num_warps, mid.fp8_scales) == (32, 32, 4, "fold")
    for choose in (v3_config, choose_config):
        wide = choose(4096, 64, 2048, torch.bfloat16, cpu, kv_cache_dtype=FP8, capability=(9, 0), limits=h200)
        assert (wide.block_h, wide.block_n, wide.fp8_scales, wide.fp8_hw) == (64, 64, "registers", True)
        wide120 = choose(4096, 64, 2048, torch.bfloat16, cpu, kv_cache_dtype=FP8, capability=(12, 0))
        assert wide120.fp8_scales == "fold"
    bf16 = choose_config(4096, 64, 2048, torch.bfloat16, cpu)
    assert (bf16.kv_cache_dtype, bf16.fp8_hw, bf16.block_n) == ("auto", False, 64)


# ---- bad input: one line naming the value ----------------------------------------------------------------------

def _good():
    return fp8_case(2, 4, 8, seed=70)


def _bad_offset(a):
    storage = torch.zeros(656 * 16 + 2, dtype=torch.uint8)
    return (a[0], a[1], storage[2:].view(1, 16, 656), *a[3:])


@pytest.mark.parametrize("mutate, kw, match", [
    (lambda a: (a[0], a[1], a[2][..., :576], *a[3:]), {}, "kv_cache last dimension 576 is not accepted with"),
    (lambda a: (a[0], a[1], fp8_ds_mla_decode_ref(a[2], torch.float32), *a[3:]), {}, "kv_cache=torch.float32 are not"),
    (lambda a: a, {"kv_cache_dtype": "auto"}, "kv_cache=torch.uint8 are not accepted; .*kv_cache_dtype='fp8_ds_mla'"),
    (lambda a: a, {"kv_cache_dtype": "fp8"}, "kv_cache_dtype 'fp8' is not accepted; accepted: 'auto', 'fp8_ds_mla'"),
    (lambda a: a, {"kv_cache_dtype": None}, "kv_cache_dtype None is not accepted"),
    (lambda a: (a[0][..., :256], *a[1:]), {}, "last dimensions 256 / 64 are not accepted"),
    (lambda a: (a[0], a[1].half(), *a[2:]), {}, "q_pe=torch.float16"),
    (lambda a: (a[0], a[1], a[2].transpose(0, 1), *a[3:]), {}, "not contiguous"),
    (_bad_offset, {}, "starts at byte 2 of its storage"),
    (lambda a: (a[0], a[1], a[2], torch.full_like(a[3], 96), a[4]), {}, "slot 96, outside the cache"),
    (lambda a: a, {"capability": (9,)}, "capability \\(9,\\) is not accepted"),
    (lambda a: a, {"capability": "9.0"}, "capability '9.0' is not accepted"),
    (lambda a: a, {"fp8_scales": "fast"}, "fp8_scales 'fast' is not accepted"),
    (lambda a: a, {"block_dv": 64}, "block_dv 64 is not accepted with an fp8_ds_mla cache"),
])
def test_bad_inputs(mutate, kw, match):
    kw = {"kv_cache_dtype": FP8, **kw}
    with pytest.raises(UserInputError, match=match) as e:
        sparse_mla_attention(*mutate(_good()), **kw)
    assert "\n" not in str(e.value)


@pytest.mark.interpreter
@pytest.mark.parametrize("options", [{"VEC_SCALES": True}, {"KEEP_CODES": True},
                                     {"KEEP_CODES": True, "VEC_SCALES": True}])
@pytest.mark.parametrize("capability", [(8, 0), (9, 0)])
@pytest.mark.parametrize("splits", [1, 3])
def test_fold_options_under_measurement(options, capability, splits):
    """The fold kernel's options under measurement (``launcher.FP8_OPTIONS``: codes kept in registers for the PV
    dots instead of re-read, the four scales in one 16-byte load) compute the same function: within the derived
    limits of the fold variant, and bit for bit the default kernel's result (same operations in the same order)."""
    from sparse_mla.kernels import launch

    q_nope, q_pe, cache, idx, scale = fp8_case(5, 16, 96, pad="middle", seed=31 + splits)
    cfg = choose_config(5, 16, 96, q_nope.dtype, q_nope.device, kv_cache_dtype=FP8, capability=capability,
                        num_splits=splits, fp8_scales="fold", block_n=32)
    runs = []
    for opts in ({}, options):
        out = torch.full((5, 16, 512), float("nan"))
        lse = torch.full((5, 16), float("nan"))
        launch(q_nope, q_pe, cache, idx, scale, out, lse, cfg, fp8_options=opts)
        assert not out.isnan().any() and not lse.isnan().any(), "unwritten (poisoned) output left"
        runs.append((out, lse))
    c = check_attention(*runs[1], q_nope, q_pe, cache, idx, scale, kv_cache_dtype=FP8, fp8_scales="fold")
    assert c.ok, c.explain()
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("options, kw, says", [
    ({"KEEP_CODES": 1}, {}, "are not accepted"), ({"SPLIT": True}, {}, "are not accepted"),
    ({"KEEP_CODES": True}, {"fp8_scales": "registers"}, "'fold' fp8_ds_mla kernel only"),
    ({"KEEP_CODES": True}, {"block_dv": 256}, "block_dv 256 is not accepted")])
def test_fold_options_refused_by_name(options, kw, says):
    from sparse_mla.kernels.launcher import check_fp8_options

    cfg = choose_config(2, 16, 64, torch.float32, torch.device("cpu"), kv_cache_dtype=FP8, **kw)
    with pytest.raises(UserInputError, match=says):
        check_fp8_options(options, cfg)
