"""The Triton sparse MLA kernel against the float64 PyTorch reference, under TRITON_INTERPRET=1 on the CPU
(fp32 and fp16: the interpreter computes bf16 wrongly). Outputs are poisoned (NaN) before every run."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_cases import DL, DR, make_case, rel_err
from sparse_mla import sparse_mla_attention
from sparse_mla.errors import UserInputError
from sparse_mla.kernels import sparse_mla_attention_simple
from sparse_mla.kernels.reference import sparse_mla_attention_ref

TOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def run_poisoned(fn, q_nope, q_pe, kv, idx, scale, **kw):
    T, H = q_pe.shape[:2]
    out = torch.full((T, H, DL), float("nan"), dtype=q_nope.dtype)
    lse = torch.full((T, H), float("nan"), dtype=torch.float32)
    o, l = fn(q_nope, q_pe, kv, idx, scale, out=out, lse=lse, **kw)
    assert o.data_ptr() == out.data_ptr() and l.data_ptr() == lse.data_ptr()
    return o, l


def check(q_nope, q_pe, kv, idx, scale, **kw):
    out, lse = run_poisoned(sparse_mla_attention, q_nope, q_pe, kv, idx, scale, **kw)
    ref_out, ref_lse = sparse_mla_attention_ref(q_nope, q_pe, kv, idx, scale)
    assert not torch.isnan(out).any(), "unwritten (poisoned) output left"
    assert not torch.isnan(lse).any(), "unwritten (poisoned) lse left"
    empty = (idx < 0).all(dim=1)
    assert torch.all(out[empty] == 0)
    assert torch.all(torch.isneginf(lse[empty]))
    if (~empty).any():
        tol = TOL[q_nope.dtype]
        assert rel_err(out[~empty], ref_out[~empty]) < tol
        torch.testing.assert_close(lse[~empty], ref_lse[~empty], rtol=tol, atol=tol)
    return out, lse


@pytest.mark.parametrize("H", [1, 3, 8, 16, 64])
@pytest.mark.parametrize("split", [1, 4])
def test_heads_and_paths(H, split):
    g = torch.Generator().manual_seed(1000 + H * 10 + split)
    check(*make_case(2, H, 77, generator=g, pad="end"), num_splits=split)


@pytest.mark.parametrize("pad", ["none", "end", "middle", "all", "rows"])
@pytest.mark.parametrize("T", [1, 4])
def test_padding(pad, T):
    g = torch.Generator().manual_seed(["none", "end", "middle", "all", "rows"].index(pad) * 10 + T)
    check(*make_case(T, 8, 45, generator=g, pad=pad))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dtypes_strided_repeats(dtype):
    g = torch.Generator().manual_seed(7)
    case = make_case(3, 16, 50, generator=g, dtype=dtype, strided_q=True, repeats=True, pad="middle")
    assert not case[0].is_contiguous() and not case[1].is_contiguous()
    check(*case)
    check(*case, num_splits=3)


def test_repeated_index_counts_twice():
    g = torch.Generator().manual_seed(11)
    q_nope, q_pe, kv, idx, scale = make_case(1, 4, 2, generator=g)
    idx[0, 1] = idx[0, 0]
    out, lse = check(q_nope, q_pe, kv, idx, scale)
    # two copies of one slot: softmax weight 1 on that row, lse = s + log 2
    s = (torch.cat([q_nope[0], q_pe[0]], -1).double() @ kv.reshape(-1, DL + DR)[idx[0, 0]].double()) * scale
    torch.testing.assert_close(lse[0].double(), s + math.log(2), rtol=1e-6, atol=1e-6)


def test_simple_kernel_matches_reference():
    g = torch.Generator().manual_seed(5)
    q_nope, q_pe, kv, idx, scale = make_case(2, 3, 40, generator=g, pad="middle")
    out, lse = sparse_mla_attention_simple(q_nope, q_pe, kv, idx, scale)
    ref_out, ref_lse = sparse_mla_attention_ref(q_nope, q_pe, kv, idx, scale)
    assert rel_err(out, ref_out) < 1e-5
    torch.testing.assert_close(lse, ref_lse, rtol=1e-5, atol=1e-5)


def test_int64_indices_and_block_sizes():
    g = torch.Generator().manual_seed(3)
    q_nope, q_pe, kv, idx, scale = make_case(2, 2, 30, num_blocks=2, block_size=64, generator=g)
    check(q_nope, q_pe, kv, idx.long(), scale)
    check(q_nope, q_pe, kv.view(-1, DL + DR), idx, scale)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(1, 4), H=st.integers(1, 40), topk=st.integers(1, 90), splits=st.sampled_from([None, 1, 2, 5]),
       pad=st.sampled_from(["none", "end", "middle", "rows"]), seed=st.integers(0, 2**31 - 1))
def test_hypothesis_shapes(T, H, topk, splits, pad, seed):
    g = torch.Generator().manual_seed(seed)
    check(*make_case(T, H, topk, num_blocks=4, block_size=32, generator=g, pad=pad), num_splits=splits)


# ---- bad input: one clear error naming the value -------------------------------------------------------------

def _good():
    return make_case(2, 4, 8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("mutate, match", [
    (lambda a: (a[0][..., :500], *a[1:]), "last dimension 500"),
    (lambda a: (a[0], a[1], a[2][..., :570], *a[3:]), "kv_cache last dimension 570"),
    (lambda a: (a[0], a[1], a[2], a[3][:1], a[4]), r"indices must be \[T=2"),
    (lambda a: (a[0], a[1], a[2], a[3].float(), a[4]), "indices dtype torch.float32"),
    (lambda a: (a[0], a[1], a[2], torch.full_like(a[3], 10_000), a[4]), "slot 10000, outside the cache"),
    (lambda a: (a[0], a[1], a[2], a[3][:, :0], a[4]), "topk = 0"),
    (lambda a: (a[0], a[1], a[2].transpose(0, 1), *a[3:]), "not contiguous"),
    (lambda a: (a[0], a[1][:1], *a[2:]), "disagree on"),
    (lambda a: (a[0], a[1].half(), *a[2:]), "dtypes"),
    (lambda a: (a[0], a[1], a[2].to(torch.int8), *a[3:]), "kv_cache=torch.int8"),
    (lambda a: (*a[:4], -1.0), "sm_scale -1.0"),
    (lambda a: (a[0], a[1], a[2], torch.full_like(a[3], -2), a[4]), "slot -2"),
    (lambda a: (a[0], a[1], a[2], torch.full_like(a[3].long(), -2**32), a[4]), "slot -4294967296"),
    (lambda a: (a[0], a[1], a[2], torch.full_like(a[3].long(), 2**32 + 3), a[4]), "slot 4294967299"),
    (lambda a: (*a[:4], True), "sm_scale True"),
    (lambda a: (*a[:4], 1e38), "sm_scale 1e\\+38"),
    (lambda a: (*a[:4], 10**400), "sm_scale 1000"),
    (lambda a: (a[0].to_sparse(), *a[1:]), "q_nope has layout torch.sparse_coo"),
    (lambda a: (a[0], a[1], a[2].half(), *a[3:]), "kv_cache=torch.float16"),   # cache dtype differs from q's
    (lambda a: tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in a), "meta device"),
])
def test_bad_inputs(mutate, match):
    args = mutate(_good())
    with pytest.raises(UserInputError, match=match):
        sparse_mla_attention(*args)


@pytest.mark.parametrize("block_dv,block_h,split", [(256, 16, 1), (128, 32, 3), (256, 64, 2)])
def test_output_column_split(block_dv, block_h, split):
    g = torch.Generator().manual_seed(block_dv + block_h + split)
    check(*make_case(2, 20, 60, generator=g, pad="middle"), block_dv=block_dv, block_h=block_h, num_splits=split)


def test_int64_indices_are_range_checked_even_without_check_indices():
    q_nope, q_pe, kv, idx, scale = _good()
    with pytest.raises(UserInputError, match="outside the cache"):
        sparse_mla_attention(q_nope, q_pe, kv, torch.full_like(idx.long(), 2**32 + 3), scale, check_indices=False)


@pytest.mark.parametrize("kw, match", [({"block_n": 48}, "block_n 48"), ({"block_h": 0}, "block_h 0"),
                                       ({"num_splits": 0}, "num_splits 0"), ({"block_n": 2**20}, "block_n 1048576"),
                                       ({"dot_dtype": "fp16"}, "dot_dtype 'fp16'"),
                                       ({"dot_dtype": torch.int8}, "dot_dtype torch.int8"),
                                       ({"blockn": 32}, "unknown launch override.*blockn.*accepted: block_h")])
def test_bad_launch_overrides(kw, match):
    with pytest.raises(UserInputError, match=match):
        sparse_mla_attention(*_good(), **kw)


def test_bad_outputs_and_scalar_kinds():
    """``out``/``lse`` of the wrong kind or device are refused; numpy scalars are accepted as ``sm_scale``, and the
    result is the reference's."""
    import numpy as np

    from sparse_mla.kernels.reference import sparse_mla_attention_ref

    q_nope, q_pe, kv, idx, scale = _good()
    for kw, match in (({"out": [1]}, "out must be a torch.Tensor"), ({"lse": 3.0}, "lse must be a torch.Tensor"),
                      ({"out": torch.empty(2, 4, 512, device="meta")}, "out is on meta"),
                      ({"lse": torch.empty(1, 4).expand(2, 4)}, "rows that share memory"),
                      ({"out": torch.empty(1, 4, 512).expand(2, 4, 512)}, "rows that share memory"),
                      ({"out": torch.zeros(2, 4, 512).to_sparse()}, "layout torch.sparse_coo")):
        with pytest.raises(UserInputError, match=match):
            sparse_mla_attention(q_nope, q_pe, kv, idx, scale, **kw)
    poisoned = torch.full((2, 4, 512), float("nan"))
    out, lse = sparse_mla_attention(q_nope, q_pe, kv, idx, np.float32(scale), out=poisoned)
    assert out is poisoned
    ref_out, ref_lse = sparse_mla_attention_ref(q_nope.double(), q_pe.double(), kv.double(), idx, scale)
    assert rel_err(out, ref_out) < 1e-5 and rel_err(lse, ref_lse) < 1e-5
