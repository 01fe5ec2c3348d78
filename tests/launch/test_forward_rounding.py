"""sparse_mla.launch.forward_rounding: the Monte Carlo rounding limit of a whole float32 forward."""
from __future__ import annotations

import math

import pytest
import torch

from sparse_mla.launch import checkpoint as ck
from sparse_mla.launch.forward_rounding import forward_limit
from sparse_mla.launch.glm5_reference import Glm5Reference

# a 16-sample Monte Carlo of float32 forwards (about 45 s on 2 cores): the slow tier
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def case(module_tmp):
    cfg, sd = ck.load_checkpoint(ck.make_checkpoint(module_tmp("fr") / "tiny", index_topk=128, seed=3))
    ids = torch.randint(2, 2048, (24,), generator=torch.Generator().manual_seed(5))
    return cfg, sd, ids, forward_limit(cfg, sd, ids)


def test_float32_forward_is_within_one_implementations_share(case):
    """The real float32 rounding of the reference (against its float64 run) stays inside lam * sigma, the limit for
    one implementation: the rounding model is not too small."""
    cfg, sd, ids, lim = case
    f32 = Glm5Reference(cfg, sd, dtype=torch.float32).forward(ids)
    f64 = Glm5Reference(cfg, sd, dtype=torch.float64).forward(ids)
    assert lim.share(f32, f64) * math.sqrt(2) < 1


def test_limit_is_seeded_finite_and_positive(case):
    cfg, sd, ids, lim = case
    assert lim.samples == 16 and lim.limit.shape == (ids.numel(), cfg["vocab_size"])
    assert torch.isfinite(lim.limit).all() and (lim.limit > 0).all()
    assert lim.lam == pytest.approx(math.sqrt(2 * math.log(2 * lim.limit.numel() / 1e-9)))
    again = forward_limit(cfg, sd, ids, samples=2)
    assert torch.equal(again.sigma, forward_limit(cfg, sd, ids, samples=2).sigma)   # the same on every run


def test_weights_off_by_2_to_the_minus_12_are_not_rounding(case):
    """Every weight scaled by 1 + 2^-12 (a model change 4096 float32 ulps in size) goes far past the limit."""
    cfg, sd, ids, lim = case
    base = Glm5Reference(cfg, sd).forward(ids)
    shifted = Glm5Reference(cfg, {k: v.float() * (1 + 2.0 ** -12) for k, v in sd.items()})
    assert lim.share(shifted.forward(ids), base) > 10


@pytest.mark.parametrize("kw, says", [({"samples": 1}, "samples=1; accepted"), ({"samples": 2.5}, "samples=2.5"),
                                      ({"samples": True}, "samples=True"), ({"p_fail": 0}, "p_fail=0")])
def test_bad_arguments_are_refused_before_any_work(case, kw, says):
    cfg, sd, ids, _ = case
    with pytest.raises(ValueError, match=says):
        forward_limit(cfg, sd, ids, **kw)


def test_attention_in_row_chunks_is_the_whole_gather(case, monkeypatch):
    """The rounded forward gathers its sparse rows a chunk of query rows at a time (a 16K-token prompt at index_topk
    2048 asked the H200 for 144 GiB at once): with no rounding, chunks of 5 rows and one chunk give the float64
    gather's output and LSE."""
    from sparse_mla.launch.forward_rounding import Arithmetic, _RoundedForward
    from sparse_mla.launch.glm5_reference import gather_sparse_mla_attention

    cfg, sd, _, _ = case
    g = torch.Generator().manual_seed(11)
    T, H, dc, dr, topk = 23, 4, 16, 8, 12
    q_nope, q_pe = torch.randn(T, H, dc, generator=g, dtype=torch.float64), torch.randn(T, H, dr, generator=g,
                                                                                          dtype=torch.float64)
    kv = torch.randn(4, 16, dc + dr, generator=g, dtype=torch.float64)
    slots = torch.randint(-1, 64, (T, topk), generator=g, dtype=torch.int32)
    slots[:, 0] = torch.randint(0, 64, (T,), generator=g, dtype=torch.int32)    # every row attends to something
    exact = _RoundedForward(cfg, sd, Arithmetic(0.0, 0.0))
    want_out, want_lse = gather_sparse_mla_attention(q_nope, q_pe, kv, slots, 0.3)
    for rows in (5, T):
        monkeypatch.setattr(_RoundedForward, "CHUNK_ELEMENTS", rows * topk * (dc + dr))
        out, lse = exact._attention(q_nope, q_pe, kv, slots, 0.3)
        torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse, want_lse, rtol=1e-6, atol=1e-6)
