"""The Triton sparse MLA kernel against the float64 PyTorch reference, under TRITON_INTERPRET=1 on the CPU
(fp32 and fp16: the interpreter computes bf16 wrongly). Outputs are poisoned (NaN) before every run; every error is
held to the limit :mod:`sparse_mla.kernels.error_bounds` derives from the kernel's arithmetic on those inputs, and
the planted faults at the end show that the check trips on a wrong scale, a skipped tile or a swapped slot."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse_mla.kernels.cases import DL, DR, make_case
from sparse_mla import sparse_mla_attention
from sparse_mla.errors import UserInputError
from sparse_mla.kernels import sparse_mla_attention_simple
from sparse_mla.kernels.error_bounds import check_attention
from sparse_mla.kernels.reference import sparse_mla_attention_ref


def run_poisoned(fn, q_nope, q_pe, kv, idx, scale, **kw):
    T, H = q_pe.shape[:2]
    out = torch.full((T, H, DL), float("nan"), dtype=q_nope.dtype)
    lse = torch.full((T, H), float("nan"), dtype=torch.float32)
    o, l = fn(q_nope, q_pe, kv, idx, scale, out=out, lse=lse, **kw)
    assert o.data_ptr() == out.data_ptr() and l.data_ptr() == lse.data_ptr()
    return o, l


def check(q_nope, q_pe, kv, idx, scale, **kw):
    out, lse = run_poisoned(sparse_mla_attention, q_nope, q_pe, kv, idx, scale, **kw)
    c = check_attention(out, lse, q_nope, q_pe, kv, idx, scale, dot_dtype=kw.get("dot_dtype"))
    assert c.ok, c.explain()
    return out, lse


@pytest.mark.interpreter
@pytest.mark.parametrize("H", [1, 3, 8, 16, 64])
@pytest.mark.parametrize("split", [1, 4])
def test_heads_and_paths(H, split):
    g = torch.Generator().manual_seed(1000 + H * 10 + split)
    check(*make_case(2, H, 77, generator=g, pad="end"), num_splits=split)


@pytest.mark.interpreter
@pytest.mark.parametrize("H, split, dtype", [(8, 1, torch.float32), (16, 4, torch.float32), (8, 2, torch.float16)])
def test_a_nope_head_of_512_scores_the_latent_alone(H, split, dtype):
    """GLM-5.3-Flash's NoPE MLA (issue 51 item 1): ``qk_rope_head_dim`` 0, so ``q_pe`` is ``[T, H, 0]`` and each
    cache row is the 512-wide latent alone; against the float64 reference on the same tensors. A kernel that read
    64 rope columns past the row would read the next row's latent (the reference does not)."""
    from sparse_mla.kernels.cases import random_indices, random_q

    g = torch.Generator().manual_seed(5100 + H + split)
    q_nope, _ = random_q(3, H, g, dtype=dtype)
    q_pe = q_nope[..., :0]
    kv = torch.randn(8, 16, DL, generator=g).to(dtype)
    idx = random_indices(3, 96, 8 * 16, g, pad="end")
    out, _ = check(q_nope, q_pe, kv, idx, 192 ** -0.5, num_splits=split)
    with_rope = torch.cat([kv, torch.randn(8, 16, DR, generator=g).to(dtype)], dim=-1)   # a rope part changes it
    other, _ = sparse_mla_attention_ref(q_nope, torch.randn(3, H, DR, generator=g).to(dtype), with_rope, idx,
                                        192 ** -0.5)
    assert not torch.allclose(out.double(), other.double(), atol=1e-3)
    # an fp8 cache of the NoPE head holds 528-byte rows (tests/kernels/test_attention_fp8_nope.py), not 656
    with pytest.raises(UserInputError, match=r"q_pe width 0; accepted: 528 bytes per token"):
        sparse_mla_attention(q_nope, q_pe, torch.zeros(8, 16, 656, dtype=torch.uint8), idx, 0.1,
                             kv_cache_dtype="fp8_ds_mla")


@pytest.mark.interpreter
@pytest.mark.parametrize("pad", ["none", "end", "middle", "all", "rows"])
@pytest.mark.parametrize("T", [1, 4])
def test_padding(pad, T):
    g = torch.Generator().manual_seed(["none", "end", "middle", "all", "rows"].index(pad) * 10 + T)
    check(*make_case(T, 8, 45, generator=g, pad=pad))


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dtypes_strided_repeats(dtype):
    g = torch.Generator().manual_seed(7)
    case = make_case(3, 16, 50, generator=g, dtype=dtype, strided_q=True, repeats=True, pad="middle")
    assert not case[0].is_contiguous() and not case[1].is_contiguous()
    check(*case)
    check(*case, num_splits=3)


@pytest.mark.interpreter
def test_repeated_index_counts_twice():
    g = torch.Generator().manual_seed(11)
    q_nope, q_pe, kv, idx, scale = make_case(1, 4, 2, generator=g)
    idx[0, 1] = idx[0, 0]
    out, lse = check(q_nope, q_pe, kv, idx, scale)
    # two copies of one slot: softmax weight 1 on that row, lse = s + log 2
    s = (torch.cat([q_nope[0], q_pe[0]], -1).double() @ kv.reshape(-1, DL + DR)[idx[0, 0]].double()) * scale
    # closed form: both scores are the same number, so p = 2^0 = 1 for each copy, l = 2 and out = (v + v) / 2 = v
    # exactly; lse = s + log 2 (check() held it to its derived limit against the reference, which counts repeats)
    assert torch.equal(out[0], kv.reshape(-1, DL + DR)[idx[0, 0], :DL].expand(4, DL))
    ref_lse = sparse_mla_attention_ref(q_nope, q_pe, kv, idx, scale)[1]
    torch.testing.assert_close(ref_lse[0].double(), s + math.log(2), rtol=2 ** -24, atol=0)


@pytest.mark.interpreter
def test_simple_kernel_matches_reference():
    g = torch.Generator().manual_seed(5)
    q_nope, q_pe, kv, idx, scale = make_case(2, 3, 40, generator=g, pad="middle")
    out, lse = sparse_mla_attention_simple(q_nope, q_pe, kv, idx, scale)
    c = check_attention(out, lse, q_nope, q_pe, kv, idx, scale)
    assert c.ok, c.explain()


@pytest.mark.interpreter
def test_int64_indices_and_block_sizes():
    g = torch.Generator().manual_seed(3)
    q_nope, q_pe, kv, idx, scale = make_case(2, 2, 30, num_blocks=2, block_size=64, generator=g)
    check(q_nope, q_pe, kv, idx.long(), scale)
    check(q_nope, q_pe, kv.view(-1, DL + DR), idx, scale)


@pytest.mark.slow   # default tier's budget (2026-12-07: 40 interpreted examples, ~9 s; the fixed shapes above stay); .ci/run's slow tier runs it
@pytest.mark.interpreter
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
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


@pytest.mark.interpreter
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


@pytest.mark.interpreter
def test_bad_outputs_and_scalar_kinds():
    """``out``/``lse`` of the wrong kind or device are refused; numpy scalars are accepted as ``sm_scale``, and the
    result is the reference's."""
    import numpy as np

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
    c = check_attention(out, lse, q_nope, q_pe, kv, idx, scale)
    assert c.ok, c.explain()


# ---- the check can fail: planted faults ----------------------------------------------------------------------

def _faults():
    """Kernel runs with one planted fault each, on the case they are checked against (the true inputs)."""
    g = torch.Generator().manual_seed(90)
    q_nope, q_pe, kv, idx, scale = make_case(2, 8, 64, generator=g)
    flipped = idx.clone()
    ref_out, ref_lse = sparse_mla_attention_ref(q_nope, q_pe, kv, idx, scale)
    s = (torch.cat([q_nope, q_pe], -1).double() @ kv.reshape(-1, DL + DR)[idx[0].long()].double().T)[0] * scale
    j = int(s.max(0).values.argmax())                       # the slot with the largest weight for some head
    flipped[0, j] = int(next(x for x in range(kv.shape[0] * kv.shape[1]) if x not in set(idx[0].tolist())))
    skipped = idx.clone()
    skipped[:, -16:] = -1                                   # one BLOCK_N = 16 tile the kernel did not visit
    return (q_nope, q_pe, kv, idx, scale), {
        "scale 576**-0.5 (not the model's 1/16)": dict(scale=576 ** -0.5),
        "scale off by 1e-3": dict(scale=scale * (1 + 1e-3)),
        "exp instead of exp2 (log2 e not folded)": dict(scale=scale / math.log2(math.e)),
        "the last 16-slot tile skipped": dict(idx=skipped),
        "one selected slot swapped for another": dict(idx=flipped),
    }


@pytest.mark.interpreter
@pytest.mark.parametrize("fault", list(_faults()[1]))
def test_planted_faults_trip_the_check(fault):
    (q_nope, q_pe, kv, idx, scale), faults = _faults()
    f = faults[fault]
    out, lse = sparse_mla_attention(q_nope, q_pe, kv, f.get("idx", idx), f.get("scale", scale))
    c = check_attention(out, lse, q_nope, q_pe, kv, idx, scale)
    assert not c.ok, f"{fault} passed the check: {c.explain()}"
    good = check_attention(*sparse_mla_attention(q_nope, q_pe, kv, idx, scale), q_nope, q_pe, kv, idx, scale)
    assert good.ok, good.explain()


@pytest.mark.interpreter
def test_planted_unwritten_element_and_empty_row_trip_the_check():
    g = torch.Generator().manual_seed(91)
    q_nope, q_pe, kv, idx, scale = make_case(2, 4, 32, generator=g)
    idx[1] = -1
    out, lse = sparse_mla_attention(q_nope, q_pe, kv, idx, scale)
    assert check_attention(out, lse, q_nope, q_pe, kv, idx, scale).ok
    hole = out.clone()
    hole[0, 0, 7] = float("nan")
    assert check_attention(hole, lse, q_nope, q_pe, kv, idx, scale).nan_left == 1
    bad_empty = out.clone()
    bad_empty[1] = 1e-30
    assert not check_attention(bad_empty, lse, q_nope, q_pe, kv, idx, scale).ok
