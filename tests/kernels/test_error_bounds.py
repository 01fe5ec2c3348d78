"""The derived limits themselves: their constants, that fp32 arithmetic of the same attention (plain PyTorch, in
another order than the kernel's) stays within them on many random cases, and that they are tight enough to catch
an error of one part in a thousand in the scale."""
from __future__ import annotations

import math

import pytest
import torch

from sparse_mla.kernels.cases import make_case
from sparse_mla.kernels.error_bounds import (P_FAIL, attention_limits, compare_attention, confidence_lambda,
                                             share_of_limit, unit_roundoff)
from sparse_mla.kernels.reference import gather_rows_ref, sparse_mla_attention_ref


def test_unit_roundoff_and_lambda():
    assert unit_roundoff(torch.float32) == torch.finfo(torch.float32).eps / 2
    assert unit_roundoff(torch.float16) == torch.finfo(torch.float16).eps / 2
    assert unit_roundoff(torch.bfloat16) == torch.finfo(torch.bfloat16).eps / 2
    with pytest.raises(ValueError, match="int8"):
        unit_roundoff(torch.int8)
    lam = confidence_lambda(576, 1000)
    assert 2 * 576 * 1000 * math.exp(-lam ** 2 / 2) == pytest.approx(P_FAIL)


def test_share_of_limit_decades():
    assert [share_of_limit(r) for r in (0.0, 0.009, 0.05, 0.99)] == ["below 0.01", "below 0.01", "below 0.1",
                                                                     "below 1"]
    assert share_of_limit(1.5) == "above the limit (1.50)"


def _fp32_attention(q_nope, q_pe, kv, idx, scale):
    """The same attention in plain PyTorch float32 (one matmul per token, natural-log softmax): an arithmetic the
    limits must cover although it is not the kernel's order."""
    k, valid = gather_rows_ref(kv, idx, dtype=torch.float32)
    q = torch.cat([q_nope, q_pe], -1).float()
    s = torch.einsum("thd,tkd->thk", q, k) * scale
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.einsum("thk,tkd->thd", torch.softmax(s, -1), k[..., :512]), lse


@pytest.mark.parametrize("seed", range(8))
def test_fp32_torch_arithmetic_stays_within_the_limits(seed):
    g = torch.Generator().manual_seed(500 + seed)
    q_nope, q_pe, kv, idx, scale = make_case(3, 16, 100, generator=g, pad="middle")
    kv = kv * (1 + 4 * seed)                                       # scores from O(1) to O(30)
    k, valid = gather_rows_ref(kv, idx)
    lim = attention_limits(torch.cat([q_nope, q_pe], -1).double(), k, valid, scale, out_dtype=torch.float32)
    ref_out, ref_lse = sparse_mla_attention_ref(q_nope.double(), q_pe.double(), kv, idx, scale)
    # the float64 attention the limits carry (check_attention's reference) is the reference's, to rounding
    assert torch.allclose(lim.ref_out, ref_out, rtol=1e-12, atol=1e-12) and torch.allclose(
        lim.ref_lse, ref_lse.double(), rtol=2 ** -24, atol=0)   # the reference returns lse in float32
    c = compare_attention(*_fp32_attention(q_nope, q_pe, kv, idx, scale), ref_out, ref_lse, lim, valid)
    assert c.ok, c.explain()
    bad = compare_attention(*_fp32_attention(q_nope, q_pe, kv, idx, scale * (1 + 1e-3)), ref_out, ref_lse, lim, valid)
    assert not bad.ok, bad.explain()


def test_limits_grow_with_the_arithmetic():
    """bf16 dots and a bf16 output give wider limits than fp32; truncating accumulation wider than rounding."""
    g = torch.Generator().manual_seed(7)
    q_nope, q_pe, kv, idx, scale = make_case(2, 4, 64, generator=g)
    q, (k, valid) = torch.cat([q_nope, q_pe], -1).double(), gather_rows_ref(kv, idx)
    f32 = attention_limits(q, k, valid, scale, out_dtype=torch.float32)
    bf16 = attention_limits(q, k, valid, scale, out_dtype=torch.bfloat16, dot_dtype=torch.bfloat16)
    trunc = attention_limits(q, k, valid, scale, out_dtype=torch.float32, accumulate="truncate")
    assert (bf16.out > 10 * f32.out).all() and (trunc.lse > f32.lse).all()
    with pytest.raises(ValueError, match="accumulate 'fast'"):
        attention_limits(q, k, valid, scale, out_dtype=torch.float32, accumulate="fast")


# ---- the indexer's limits ------------------------------------------------------------------------------------------

def test_abs_e4m3_and_abs_index_cache():
    from sparse_mla.kernels.reference import abs_e4m3, abs_index_cache, e4m3_values, index_cache_keys_ref

    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    v, a = e4m3_values(codes), e4m3_values(abs_e4m3(codes))
    finite = ~torch.isnan(v)
    assert torch.equal(a[finite], v[finite].abs()) and torch.isnan(a[~finite]).all()
    g = torch.Generator().manual_seed(1)
    kv = torch.randint(0, 256, (3, 16, 132), generator=g, dtype=torch.int32).to(torch.uint8)
    kv.view(3, -1)[:, 16 * 128:] = torch.rand(3, 16, generator=g).view(torch.uint8).reshape(3, -1)   # real scales
    keys, scales = index_cache_keys_ref(kv)
    akeys, ascales = index_cache_keys_ref(abs_index_cache(kv))
    ok = ~torch.isnan(keys)
    assert torch.equal(akeys[ok], keys[ok].abs()) and torch.equal(ascales, scales)


def test_indexer_limit_orders_the_arithmetics_and_refuses_others():
    from sparse_mla.kernels.error_bounds import indexer_limit

    mag = torch.rand(4, 50, dtype=torch.float64) + 0.5
    lim = {a: indexer_limit(mag, heads=32, arithmetic=a) for a in ("fp32", "fp16", "fp8", "bf16-scores")}
    assert (lim["fp32"] < lim["fp16"]).all() and (lim["fp16"] < lim["fp8"]).all()
    assert (lim["bf16-scores"] > 2.0 ** -8 * mag).all()
    assert torch.allclose(indexer_limit(2 * mag, heads=32), 2 * lim["fp32"])          # linear in the magnitude
    with pytest.raises(ValueError, match="arithmetic 'fp64'; accepted: fp32, fp16, fp8, bf16-scores"):
        indexer_limit(mag, heads=32, arithmetic="fp64")


@pytest.mark.parametrize("kw, says", [({"heads": 0}, "heads=0"), ({"heads": 2.5}, "heads=2.5"),
                                      ({"heads": True}, "heads=True"), ({"head_dim": -128}, "head_dim=-128"),
                                      ({"p_fail": 0}, "p_fail=0"), ({"p_fail": float("nan")}, "p_fail=nan"),
                                      ({"arithmetic": ["fp32"]}, "arithmetic \\['fp32'\\]")])
def test_indexer_limit_names_a_bad_argument(kw, says):
    from sparse_mla.kernels.error_bounds import indexer_limit

    with pytest.raises(ValueError, match=says):
        indexer_limit(torch.ones(2, 3, dtype=torch.float64), **{"heads": 32, **kw})
