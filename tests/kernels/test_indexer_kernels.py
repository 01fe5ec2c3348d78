"""The Triton DSA indexer kernels (``sparse_mla.kernels.indexer``, ``.indexer_quant``) under TRITON_INTERPRET=1 on the
CPU, against the float64 references of ``sparse_mla.kernels.reference`` (and vLLM's own torch oracle for the paged
logits), on fresh random fp8 inputs. Outputs are poisoned (NaN) before each run: every in-window logit must be
written, and with ``clean_logits`` every other one must be ``-inf``."""
from __future__ import annotations

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse_mla.errors import UserInputError
from sparse_mla.kernels import error_bounds as eb
from sparse_mla.kernels import indexer as ix
from sparse_mla.kernels import reference as ref
from sparse_mla.kernels.indexer import indexer_logits_paged, indexer_logits_prefill
from sparse_mla.kernels.indexer_quant import fused_indexer_q_rope_quant, indexer_q_rope_quant

D = 128


def fp8(*shape, g, scale=2.0):
    """Random e4m3 codes: normal values times ``scale`` (subnormals and large codes included), never NaN."""
    return (torch.randn(*shape, generator=g) * scale).clamp(-448, 448).to(torch.float8_e4m3fn)


def check_window(out, want, limit):
    """In-window entries (finite in the reference) within ``limit`` of it (kernels.error_bounds.indexer_limit, a sum
    of the implementations' limits when neither side is exact); nothing poisoned left there. Returns the window and
    the worst error/limit."""
    win = torch.isfinite(want)
    assert not torch.isnan(out[win]).any(), "an in-window logit was not written"
    ratio = eb.indexer_error_ratio(out, want, limit)
    assert ratio <= 1.0, f"error/limit {ratio:.3f} (max |err| {float((out[win] - want[win]).abs().max()):.3e})"
    return win, ratio


def prefill_limit(q, k, k_scale, w, ks, ke, arithmetic="fp32"):
    return eb.indexer_limit(eb.indexer_magnitude_prefill(q, k, k_scale, w, ks, ke), heads=q.shape[1],
                            arithmetic=arithmetic)


def paged_limit(q, kv, w, ctx, bt, max_len, arithmetic="fp32"):
    return eb.indexer_limit(eb.indexer_magnitude_paged(q, kv, w, ctx, bt, max_len), heads=q.shape[2],
                            arithmetic=arithmetic)


# ---- prefill (ragged keys, one window per row) -----------------------------------------------------------------

def prefill_case(M, H, N, g, windows="random"):
    q, k = fp8(M, H, D, g=g), fp8(N, D, g=g)
    k_scale = torch.rand(N, generator=g) + 0.25
    w = torch.randn(M, H, generator=g)
    if windows == "causal":            # the last M tokens of an N-token prompt (vLLM's prefill chunk)
        ks = torch.zeros(M, dtype=torch.int32)
        ke = torch.arange(N - M + 1, N + 1, dtype=torch.int32)
    else:
        ks = torch.randint(0, N, (M,), generator=g, dtype=torch.int32)
        ke = torch.minimum(ks + torch.randint(0, N, (M,), generator=g, dtype=torch.int32), torch.tensor(N))
        ks[0], ke[0] = 0, N            # the whole key range
        ks[1], ke[1] = 5, 5            # empty
        ks[2], ke[2] = N - 1, N        # the last key only
        ks[3], ke[3] = 63, 65          # across a 64-key tile edge
    return q, k, k_scale, w, ks, ke


@pytest.mark.interpreter
@pytest.mark.parametrize("H", [32, 64])
@pytest.mark.parametrize("windows", ["random", "causal"])
def test_prefill_against_reference(H, windows):
    g = torch.Generator().manual_seed(H + len(windows))
    M, N = (7, 150) if windows == "random" else (9, 77)          # N not a multiple of the key tile
    q, k, k_scale, w, ks, ke = prefill_case(M, H, N, g, windows)
    out = torch.full((M, N), float("nan"))
    got = indexer_logits_prefill(q, k, k_scale, w, ks, ke, out=out, splits=2)
    assert got.data_ptr() == out.data_ptr()
    want = ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke)
    win, _ = check_window(out, want, prefill_limit(q, k, k_scale, w, ks, ke))
    assert int(win.sum()) == int((ke - ks).clamp_min(0).sum())


@pytest.mark.interpreter
def test_prefill_clean_logits_uint8_views_and_small_heads():
    """``clean_logits`` puts -inf everywhere outside the windows; q/k as uint8 views; 3 heads (padded to 16)."""
    g = torch.Generator().manual_seed(7)
    M, H, N = 6, 3, 70
    q, k, k_scale, w, ks, ke = prefill_case(M, H, N, g)
    want = ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke)
    out = torch.full((M, N), float("nan"))
    indexer_logits_prefill(q.view(torch.uint8), k.view(torch.uint8), k_scale[:, None], w, ks, ke, out=out,
                           clean_logits=True, block_n=32)
    limit = prefill_limit(q, k, k_scale, w, ks, ke)
    win, _ = check_window(out, want, limit)
    assert torch.isneginf(out[~win]).all()
    fresh = indexer_logits_prefill(q, k, k_scale, w, ks.long(), ke.long(), clean_logits=True)
    assert fresh.stride(0) % ix.LOGITS_ROW_ALIGN == 0 and fresh.stride(1) == 1
    assert torch.equal(torch.isneginf(fresh), ~win)
    check_window(fresh, want, limit)


@pytest.mark.interpreter
def test_prefill_against_vllm_torch_oracle():
    """vLLM's ``fp8_mqa_logits_torch`` (rocm_aiter_mla_sparse.py) stores its per-head scores in bf16: within our limit
    plus its own."""
    oracle = _vllm_oracle("fp8_mqa_logits_torch")
    g = torch.Generator().manual_seed(11)
    q, k, k_scale, w, ks, ke = prefill_case(5, 32, 90, g)
    theirs = oracle(q, (k, k_scale), w, ks, ke)
    ours = indexer_logits_prefill(q, k, k_scale, w, ks, ke, clean_logits=True)
    assert torch.equal(torch.isneginf(theirs), torch.isneginf(ours))
    check_window(ours, theirs, prefill_limit(q, k, k_scale, w, ks, ke)
                 + prefill_limit(q, k, k_scale, w, ks, ke, "bf16-scores"))


@pytest.mark.interpreter
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.integers(1, 9), H=st.sampled_from([1, 3, 16, 32, 64]), N=st.integers(1, 200), scale=st.sampled_from([
    0.05, 2.0, 60.0]), splits=st.sampled_from([1, 2, 3]), seed=st.integers(0, 2**31 - 1))
def test_prefill_hypothesis_shapes(M, H, N, scale, splits, seed):
    """Shapes, windows and code magnitudes (subnormal to saturating) drawn at random, within the derived limits."""
    g = torch.Generator().manual_seed(seed)
    q, k = fp8(M, H, D, g=g, scale=scale), fp8(N, D, g=g, scale=scale)
    k_scale = torch.rand(N, generator=g) + 0.25
    w = torch.randn(M, H, generator=g)
    ks = torch.randint(0, N + 1, (M,), generator=g, dtype=torch.int32)
    ke = torch.minimum(ks + torch.randint(0, N + 1, (M,), generator=g, dtype=torch.int32), torch.tensor(N))
    out = torch.full((M, N), float("nan"))
    indexer_logits_prefill(q, k, k_scale, w, ks, ke, out=out, splits=splits)
    want = ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke)
    win, _ = check_window(out, want, prefill_limit(q, k, k_scale, w, ks, ke))
    assert int(win.sum()) == int((ke - ks).clamp_min(0).sum())


def _planted(q, k, k_scale, w, ks, ke, fault):
    """The reference with one planted fault: what a broken kernel would return."""
    if fault == "a head dropped":
        w = w.clone()
        w[:, -1] = 0
    elif fault == "scales one key off":
        k_scale = k_scale.roll(1)
    elif fault == "weights 1e-3 off":
        w = w * (1 + 1e-3)
    elif fault == "no relu":
        qv, kv = ref.e4m3_values(q), ref.e4m3_values(k)
        want = ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke)
        raw = torch.einsum("mhd,nd,mh->mn", qv, kv, w.double()) * k_scale.double()
        return torch.where(torch.isfinite(want), raw.float(), want)
    return ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke)


@pytest.mark.parametrize("fault", ["a head dropped", "scales one key off", "weights 1e-3 off", "no relu"])
def test_indexer_check_catches_planted_faults(fault):
    g = torch.Generator().manual_seed(21)
    q, k, k_scale, w, ks, ke = prefill_case(7, 32, 150, g)
    want = ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke)
    with pytest.raises(AssertionError, match="error/limit"):
        check_window(_planted(q, k, k_scale, w, ks, ke, fault), want, prefill_limit(q, k, k_scale, w, ks, ke))


# ---- paged decode ------------------------------------------------------------------------------------------------

def paged_case(B, next_n, H, bs, lens, g, num_blocks=None):
    """A paged index cache written like ``indexer_k_quant_and_cache``, random physical blocks per request."""
    lens = torch.tensor(lens, dtype=torch.int32).reshape(B, -1)
    max_blocks = int((lens.max() + bs - 1) // bs) + 1
    num_blocks = num_blocks or B * max_blocks + 3
    kv = torch.zeros(num_blocks, bs, D + 4, dtype=torch.uint8)
    ref.index_cache_write_ref(kv, torch.randn(num_blocks * bs, D, generator=g) * 3, torch.arange(num_blocks * bs))
    perm = torch.randperm(num_blocks, generator=g)
    block_table = perm[:B * max_blocks].reshape(B, max_blocks).to(torch.int32)
    q = fp8(B, next_n, H, D, g=g)
    w = torch.randn(B * next_n, H, generator=g)
    return q, kv, w, lens, block_table


@pytest.mark.interpreter
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 4), next_n=st.integers(1, 3), H=st.sampled_from([1, 16, 32, 64]), bs=st.sampled_from([16, 64]),
       splits=st.sampled_from([1, 2, 5]), seed=st.integers(0, 2**31 - 1))
def test_paged_hypothesis_shapes(B, next_n, H, bs, splits, seed):
    g = torch.Generator().manual_seed(seed)
    max_len = 130
    lens = torch.randint(0, max_len + 1, (B, next_n), generator=g).tolist()
    q, kv, w, ctx, bt = paged_case(B, next_n, H, bs, lens, g)
    out = torch.full((B * next_n, max_len), float("nan"))
    indexer_logits_paged(q, kv, w, ctx, bt, max_len, out=out, splits=splits)
    want = ref.indexer_logits_paged_ref(q, kv, w, ctx, bt, max_len)
    win, _ = check_window(out, want, paged_limit(q, kv, w, ctx, bt, max_len))
    assert int(win.sum()) == int(ctx.clamp_max(max_len).sum())


@pytest.mark.interpreter
@pytest.mark.parametrize("H", [32, 64])
@pytest.mark.parametrize("next_n", [1, 2])
def test_paged_against_reference(H, next_n):
    g = torch.Generator().manual_seed(10 * H + next_n)
    bs, max_len, B = 16, 100, 5
    # lengths: not multiples of the block, one block exactly, 1, 0; next_n = 2: token j sees L - 1 + j keys (MTP)
    lens = {1: [[37], [16], [1], [0], [64]], 2: [[37, 38], [16, 17], [0, 1], [1, 2], [63, 64]]}[next_n]
    q, kv, w, ctx, bt = paged_case(B, next_n, H, bs, lens, g)
    out = torch.full((B * next_n, max_len), float("nan"))
    indexer_logits_paged(q, kv, w, ctx, bt, max_len, out=out, splits=2)
    want = ref.indexer_logits_paged_ref(q, kv, w, ctx, bt, max_len)
    win, _ = check_window(out, want, paged_limit(q, kv, w, ctx, bt, max_len))
    assert int(win.sum()) == int(ctx.clamp_max(max_len).sum())


@pytest.mark.interpreter
def test_paged_1d_context_lens_4d_cache_clean_and_splits():
    """``context_lens [B]`` (token j sees L - next_n + 1 + j keys), the ``[nb, bs, 1, D + 4]`` view vLLM passes,
    next_n 3 (padded to 4 rows), block size 32, a length past max_model_len (cut), more splits than blocks."""
    g = torch.Generator().manual_seed(3)
    B, next_n, H, bs, max_len = 3, 3, 16, 32, 80
    q, kv, w, ctx, bt = paged_case(B, next_n, H, bs, [[50], [3], [95]], g)
    ctx = ctx.reshape(B)
    want = ref.indexer_logits_paged_ref(q, kv, w, ctx, bt, max_len)
    out = torch.full((B * next_n, max_len), float("nan"))
    indexer_logits_paged(q.view(torch.uint8), kv.unsqueeze(2), w, ctx, bt, max_len, out=out, clean_logits=True,
                         splits=7)
    win, _ = check_window(out, want, paged_limit(q, kv, w, ctx, bt, max_len))
    assert torch.isneginf(out[~win]).all()
    assert win[2].sum() == 50 and win[3].sum() == 1 and win[5].sum() == 3 and win[8].sum() == max_len


@pytest.mark.interpreter
def test_paged_against_vllm_torch_oracle():
    """vLLM's ``fp8_paged_mqa_logits_torch`` (next_n == 1: DeepGEMM's per-block cache layout) on CPU tensors."""
    oracle = _vllm_oracle("fp8_paged_mqa_logits_torch")
    g = torch.Generator().manual_seed(5)
    B, H, bs, max_len = 3, 32, 16, 72
    q, kv, w, ctx, bt = paged_case(B, 1, H, bs, [[33], [16], [70]], g)
    theirs = oracle(q, kv.unsqueeze(2), w, ctx, bt, max_len)
    ours = indexer_logits_paged(q, kv.unsqueeze(2), w, ctx, bt, max_len, clean_logits=True)
    assert torch.equal(torch.isneginf(theirs), torch.isneginf(ours))
    check_window(ours, theirs, 2 * paged_limit(q, kv, w, ctx, bt, max_len))   # both fp32


def _vllm_oracle(name):
    try:
        from sparse_mla.diagnose.probe import load_vllm_extensions

        load_vllm_extensions()
        from vllm.v1.attention.ops import rocm_aiter_mla_sparse as m
    except Exception as e:  # noqa: BLE001 -- the oracle imports on every machine of ours: its absence is a failure
        pytest.fail(f"vLLM's torch oracle did not import: {type(e).__name__}: {e}")
    return getattr(m, name)


def test_index_cache_writer_layout():
    """The torch writer puts token t of a block at bytes t*D of the block and its scale at float bs*D/4 + t (what
    vLLM's own torch reader, ``cp_gather_indexer_k_quant_cache``'s layout, expects); scales are powers of two."""
    g = torch.Generator().manual_seed(0)
    nb, bs = 3, 16
    kv = torch.zeros(nb, bs, D + 4, dtype=torch.uint8)
    k = torch.randn(5, D, generator=g)
    slots = torch.tensor([0, 17, 47, -1, 20])
    ref.index_cache_write_ref(kv, k, slots)
    flat = kv.view(nb, -1)
    keys, scales = ref.index_cache_keys_ref(kv)
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        b, o = divmod(s, bs)
        sc = flat[b, bs * D + 4 * o: bs * D + 4 * o + 4].view(torch.float32)
        assert sc.item() == scales[b, o].item() and torch.log2(sc).item().is_integer()
        assert torch.allclose(keys[b, o].float() * sc, k[t], rtol=0.07, atol=sc.item())
    assert scales[1, 3] == 0 and (flat[1, 3 * D:4 * D] == 0).all()          # slot 19: never written (-1 skipped)


# ---- input checks ------------------------------------------------------------------------------------------------

def test_bad_inputs_raise_one_clear_error():
    g = torch.Generator().manual_seed(0)
    q, k, k_scale, w, ks, ke = prefill_case(4, 8, 20, g)
    with pytest.raises(UserInputError, match="index_head_dim 64"):
        indexer_logits_prefill(q[..., :64], k[:, :64], k_scale, w, ks, ke)
    with pytest.raises(UserInputError, match="index_n_heads 129"):
        indexer_logits_prefill(fp8(4, 129, D, g=g), k, k_scale, torch.zeros(4, 129), ks, ke)
    with pytest.raises(UserInputError, match="q dtype torch.bfloat16"):
        indexer_logits_prefill(q.to(torch.bfloat16), k, k_scale, w, ks, ke)
    with pytest.raises(UserInputError, match="weights has shape"):
        indexer_logits_prefill(q, k, k_scale, w[:, :4], ks, ke)
    with pytest.raises(UserInputError, match="compute capability 7.5"):
        indexer_logits_prefill(q, k, k_scale, w, ks, ke, capability=(7, 5))
    qd, kv, wd, ctx, bt = paged_case(2, 1, 8, 16, [[5], [9]], g)
    with pytest.raises(UserInputError, match="next_n 5"):
        indexer_logits_paged(fp8(2, 5, 8, D, g=g), kv, torch.zeros(10, 8), ctx, bt, 32)
    with pytest.raises(UserInputError, match="block size 48"):
        indexer_logits_paged(qd, torch.zeros(4, 48, D + 4, dtype=torch.uint8), wd, ctx, bt, 32)
    with pytest.raises(UserInputError, match="kv_cache last dimension 128"):
        indexer_logits_paged(qd, kv[..., :D], wd, ctx, bt, 32)
    with pytest.raises(UserInputError, match="context_lens has shape"):
        indexer_logits_paged(qd, kv, wd, ctx.reshape(1, 2), bt, 32)
    with pytest.raises(UserInputError, match="max_model_len 0"):
        indexer_logits_paged(qd, kv, wd, ctx, bt, 0)


@pytest.mark.interpreter
def test_prefill_int64_windows_past_int32_are_clipped_not_wrapped():
    """ks/ke are documented as clipped to [0, N]; int64 bounds past 2**31 were cast to int32 first and wrapped back
    into range (ks = 2**32 + 1 read as 1: a row that must be empty got logits)."""
    g = torch.Generator().manual_seed(3)
    q, k, k_scale, w, _, _ = prefill_case(4, 8, 40, g)
    big = 2**32
    ks = torch.tensor([big + 1, 0, -big, 7], dtype=torch.int64)
    ke = torch.tensor([big + 9, big + 4, 30, big], dtype=torch.int64)
    out = torch.full((4, 40), float("nan"))
    indexer_logits_prefill(q, k, k_scale, w, ks, ke, out=out, clean_logits=True)
    want = ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke)
    win, _ = check_window(out, want, prefill_limit(q, k, k_scale, w, ks, ke))
    assert win.sum(1).tolist() == [0, 40, 30, 33]
    assert torch.isneginf(out[~win]).all()


@pytest.mark.parametrize("override, says", [
    ({"block_m": 3}, "block_m 3 is not accepted; accepted: a power of two from 1 to 128"),
    ({"block_n": 8}, "block_n 8 is not accepted"),
    ({"splits": 0}, "splits 0 is not accepted; accepted: an integer from 1 to 65535"),
    ({"num_warps": 3}, "num_warps 3"),
    ({"num_stages": 2.0}, "num_stages 2.0"),
    ({"foo": 1}, "unknown launch override(s) foo"),
])
def test_launch_overrides_are_checked(override, says):
    """They reached the kernel (an InterpreterError "arange's range must be a power of 2") or prefill_config (a
    TypeError for an unknown name)."""
    g = torch.Generator().manual_seed(4)
    q, k, k_scale, w, ks, ke = prefill_case(4, 8, 20, g)
    with pytest.raises(UserInputError, match=re.escape(says)):
        indexer_logits_prefill(q, k, k_scale, w, ks, ke, **override)
    if "block" not in next(iter(override)):
        qd, kv, wd, ctx, bt = paged_case(2, 1, 8, 16, [[5], [9]], g)
        with pytest.raises(UserInputError, match=re.escape(says)):
            indexer_logits_paged(qd, kv, wd, ctx, bt, 32, **override)
    with pytest.raises(UserInputError, match="unknown launch override.s. block_m"):
        indexer_logits_paged(*paged_case(2, 1, 8, 16, [[5], [9]], g), 32, block_m=1)


def test_dot_mode_follows_the_capability(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert [ix.dot_mode(c) for c in [(8, 0), (8, 6), (8, 9), (9, 0), (12, 0), None]] == [
        ("fp16", False), ("fp16", False), ("fp8", True), ("fp8", True), ("fp8", True), ("fp32", False)]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert ix.dot_mode((9, 0)) == ("fp32", False)


def test_launch_grid_comes_from_shapes_only(monkeypatch):
    """The decode launch depends on (B, next_n, H, block size, max_model_len) and the SM count, not on lengths."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")          # the GPU operand paths (no kernel runs here)
    cpu = torch.device("cpu")
    a = ix.paged_config(4, 1, 32, 64, 8192, cpu, (8, 0))
    assert a == ix.paged_config(4, 1, 32, 64, 8192, cpu, (8, 0))
    assert a.splits == 8 and a.block_m == 1 and a.block_h == 32 and a.dot == "fp16"         # cdiv(4 * 8 SMs, 4)
    assert ix.paged_config(2, 4, 64, 64, 128, cpu, (9, 0)).splits == 2                       # <= blocks of 128 tokens
    assert ix.paged_config(1, 4, 128, 64, 8192, cpu, (9, 0)).block_m == 2                     # 256 rows at most
    p = ix.prefill_config(4096, 32768, 32, cpu, (9, 0))
    assert (p.block_m, p.block_h, p.block_n, p.splits, p.dot) == (4, 32, 128, 1, "fp8")


# ---- q rope + quant ----------------------------------------------------------------------------------------------

@pytest.mark.interpreter
@pytest.mark.parametrize("is_neox", [False, True])
def test_q_rope_quant_bit_exact(is_neox):
    """Codes and weights bit for bit against the float32 torch transcription of vLLM's kernel (software stores); the
    transcription is held to vLLM's own kernel bit for bit where that runs, on a GPU
    (``test_indexer_gpu.py::test_q_quant_bit_exact_against_vllm``): under the interpreter vLLM's kernel rounds its
    bf16 and fp8 stores wrongly, so it cannot be the oracle here."""
    g = torch.Generator().manual_seed(int(is_neox))
    T, H = 6, 4
    mags = torch.tensor([1e-3, 0.1, 1.0, 30.0, 3e3, 0.0])            # incl. an all-zero token (scale 2**-42)
    q = (torch.randn(T, H, D, generator=g) * mags[:, None, None]).to(torch.bfloat16)
    cos_sin = torch.randn(40, 64, generator=g)
    pos = torch.randint(0, 40, (T,), generator=g)
    w = torch.randn(T, H, generator=g).to(torch.bfloat16)
    got_q, got_w = fused_indexer_q_rope_quant(pos, q, cos_sin, w, D ** -0.5, H ** -0.5, is_neox)
    want_q, want_w = ref.indexer_q_rope_quant_ref(pos, q, cos_sin, w, D ** -0.5, H ** -0.5, is_neox)
    assert got_q.dtype == torch.float8_e4m3fn and got_q.shape == q.shape and got_w.dtype == torch.float32
    assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(got_w, want_w)
    assert ((got_q.view(torch.uint8)[5] & 0x7F) == 0).all()           # +-0 (the rope makes some -0)


def test_q_rope_quant_checks_what_vllm_asserts():
    q = torch.zeros(2, 4, D, dtype=torch.bfloat16)
    args = (torch.zeros(2, dtype=torch.long), q, torch.zeros(8, 64), torch.zeros(2, 4), 0.1, 0.5, True)
    with pytest.raises(UserInputError, match="bfloat16"):
        indexer_q_rope_quant(args[0], q.float(), *args[2:])
    with pytest.raises(UserInputError, match="cos_sin_cache"):
        indexer_q_rope_quant(args[0], q, torch.zeros(8, 32), *args[3:])
    with pytest.raises(UserInputError, match="weights"):
        indexer_q_rope_quant(*args[:3], torch.zeros(2, 3), *args[4:])
