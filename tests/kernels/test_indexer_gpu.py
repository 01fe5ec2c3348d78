"""The Triton DSA indexer on a CUDA GPU (marker ``gpu``; written for the lent H200, where DeepGEMM runs), against
DeepGEMM through vLLM's own wrappers (``vllm.utils.deep_gemm``) on the same inputs, and vLLM's top-k ops on both
logits. Each test prints what it measured (run with ``-s``); on the H200 the SM80 operand path (``capability=(8, 0)``:
software e4m3 decode, fp16 dots) runs too.

* logits: against DeepGEMM over every in-window entry (prefill and paged, next_n 1 and 2, H 32 and 64) within the
  sum of both kernels' limits, and against the float64 reference within ours (``kernels.error_bounds.indexer_limit``:
  fp8 tensor-core dots, taken to keep 14 accumulator bits, for ours on the device and for DeepGEMM; fp16 dots with
  truncating fp32 accumulation for the SM80 path);
* top-k: the sets vLLM's ``top_k_per_row_prefill`` / ``top_k_per_row_decode`` select from ours and from DeepGEMM's
  logits agree, and where they differ the entries are ties (their DeepGEMM logits within the two kernels' difference
  of the k-th largest);
* q quantization: bit-exact against vLLM's ``fused_indexer_q_rope_quant`` with hardware and software fp8 stores;
* the torch index-cache writer bit-exact against vLLM's ``indexer_k_quant_and_cache``;
* CUDA graphs: the paged kernel captured once, replayed after the context lengths and block table changed.
"""
from __future__ import annotations

import pytest
import torch

from sparse_mla.kernels import error_bounds as eb
from sparse_mla.kernels import reference as ref
from sparse_mla.kernels.indexer import dot_mode
from sparse_mla.kernels.indexer import indexer_logits_paged, indexer_logits_prefill
from sparse_mla.kernels.indexer_quant import indexer_q_rope_quant

pytestmark = pytest.mark.gpu
D, TOPK, BS = 128, 2048, 64
MODES = {"fp8 (device)": None, "sm80 path": (8, 0)}
DEV = "cuda"
PREFILL_M, PREFILL_N = 512, 8192            # GLM-5-sized prefill chunk: 512 queries at the end of an 8K prompt
PAGED_B, PAGED_MAX_LEN = 16, 16384


@pytest.fixture(scope="module")
def dg():
    import vllm.utils.deep_gemm as dg

    dg._lazy_init()
    if dg._fp8_fp4_mqa_logits_impl is None or dg._fp8_fp4_paged_mqa_logits_impl is None:
        pytest.skip("DeepGEMM's indexer kernels are not available in this vLLM")
    return dg


@pytest.fixture(scope="module")
def ops():
    from vllm import _custom_ops as ops

    return ops


def fp8(*shape, g):
    return (torch.randn(*shape, device=DEV, generator=g) * 2).clamp(-448, 448).to(torch.float8_e4m3fn)


def rel(ours, theirs, win):
    return ((ours[win] - theirs[win]).abs().max() / theirs[win].abs().max().clamp_min(1e-30)).item()


def arithmetic(cap):
    """The indexer_limit arithmetic of our kernel at capability ``cap`` (None: this GPU's)."""
    return dot_mode(cap or torch.cuda.get_device_capability())[0]


def topk_agreement(ours, theirs, sel_ours, sel_theirs, starts, ends):
    """Fraction of DeepGEMM's selected set that ours also selects, and how many differences are *not* ties: an entry
    only one side selected must have a DeepGEMM logit within (twice the row's largest difference between the two
    kernels) of the k-th largest. That tolerance is small because the callers assert the logits agree (within both
    kernels' limits) first. Indices are local to each row's window start (vLLM's top-k contract). Returns
    ``(agreement, untied, floor)``: ``floor`` is the agreement the ties allow, ``1 - (DeepGEMM's selected entries
    within the tie band) / total``, the least agreement possible when every difference is a tie (``untied == 0``),
    which replaces a fixed agreement threshold."""
    agree, total, untied, band = 0, 0, 0, 0
    for r in range(sel_ours.shape[0]):
        a = set(sel_ours[r][sel_ours[r] >= 0].tolist())
        b = set(sel_theirs[r][sel_theirs[r] >= 0].tolist())
        agree += len(a & b)
        total += max(len(b), 1)
        if a == b:
            continue
        s, e = int(starts[r]), int(ends[r])
        row, mine = theirs[r, s:e], ours[r, s:e]
        kth = row.topk(min(TOPK, e - s)).values[-1]
        tol = 2 * (mine - row).abs().max() + 1e-6 * kth.abs()
        idx = torch.tensor(sorted(a ^ b), device=row.device, dtype=torch.long)
        untied += int(((row[idx] - kth).abs() > tol).sum())
        chosen = torch.tensor(sorted(b), device=row.device, dtype=torch.long)
        band += int(((row[chosen] - kth).abs() <= tol).sum())
    return agree / total, untied, 1 - band / total


# ---- prefill ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("H", [32, 64])
def test_prefill_logits_and_topk_match_deepgemm(H, dg, ops):
    g = torch.Generator(device=DEV).manual_seed(H)
    M, N = PREFILL_M, PREFILL_N
    q, k = fp8(M, H, D, g=g), fp8(N, D, g=g)
    k_scale = torch.exp2(torch.randint(-8, 0, (N,), device=DEV, generator=g).float())
    w = torch.randn(M, H, device=DEV, generator=g) * H ** -0.5
    ks = torch.zeros(M, dtype=torch.int32, device=DEV)
    ks[M // 2:] = N // 8                                          # two windows per half: causal ends of two prompts
    ke = torch.arange(N - M + 1, N + 1, dtype=torch.int32, device=DEV)
    theirs = dg.fp8_fp4_mqa_logits((q, None), (k, k_scale), w, ks, ke, clean_logits=False)
    n = torch.arange(N, device=DEV)
    win = (n[None, :] >= ks[:, None]) & (n[None, :] < ke[:, None])
    want = ref.indexer_logits_prefill_ref(q[:64], k, k_scale, w[:64], ks[:64], ke[:64])
    mag = eb.indexer_magnitude_prefill(q, k, k_scale, w, ks, ke)
    lim_dg = eb.indexer_limit(mag, heads=H, arithmetic="fp8")
    sel_theirs = torch.full((M, TOPK), -1, dtype=torch.int32, device=DEV)
    ops.top_k_per_row_prefill(theirs, ks, ke, sel_theirs, M, theirs.stride(0), theirs.stride(1), TOPK)
    for mode, cap in MODES.items():
        ours = indexer_logits_prefill(q, k, k_scale, w, ks, ke, capability=cap)
        e_dg, e_ref = rel(ours, theirs, win), rel(ours[:64], want, win[:64])
        lim = eb.indexer_limit(mag, heads=H, arithmetic=arithmetic(cap))
        r_dg = eb.indexer_error_ratio(ours, theirs, lim + lim_dg, win)
        r_ref = eb.indexer_error_ratio(ours[:64], want, lim[:64], win[:64])
        sel = torch.full_like(sel_theirs, -1)
        ops.top_k_per_row_prefill(ours, ks, ke, sel, M, ours.stride(0), ours.stride(1), TOPK)
        agree, untied, floor = topk_agreement(ours, theirs, sel, sel_theirs, ks, ke)
        print(f"\nprefill H={H} {mode}: rel err vs DeepGEMM {e_dg:.1e}, vs float64 {e_ref:.1e} (DeepGEMM "
              f"{rel(theirs[:64], want, win[:64]):.1e}); error/limit vs DeepGEMM {r_dg:.1e}, vs float64 {r_ref:.1e}; "
              f"top-{TOPK} agreement {agree:.5f} (ties allow {floor:.5f}), non-tie differences {untied}")
        assert r_dg <= 1 and r_ref <= 1
        assert untied == 0      # every difference a tie: the agreement is then at least `floor` (printed)


# ---- paged decode ----------------------------------------------------------------------------------------------

def paged_inputs(B, next_n, H, g, max_len=None):
    max_len = max_len or PAGED_MAX_LEN
    lens = torch.randint(next_n, max_len, (B,), device=DEV, generator=g, dtype=torch.int32)
    lens[0] = min(2 * TOPK + 1, max_len)                                      # not multiples of the block size (mostly)
    nblk = (max_len + BS - 1) // BS
    num_blocks = B * nblk + 7
    kv = torch.zeros(num_blocks, BS, D + 4, dtype=torch.uint8, device=DEV)
    from vllm import _custom_ops as ops

    slots = torch.arange(num_blocks * BS, device=DEV)
    k = torch.randn(num_blocks * BS, D, device=DEV, generator=g).to(torch.bfloat16)
    ops.indexer_k_quant_and_cache(k, kv, slots, D, "ue8m0")    # vLLM's own writer
    block_table = torch.randperm(num_blocks, device=DEV, generator=g)[:B * nblk].reshape(B, nblk).to(torch.int32)
    ctx = (lens[:, None] - next_n + 1 + torch.arange(next_n, device=DEV)[None, :]).to(torch.int32).contiguous()
    q = fp8(B, next_n, H, D, g=g)
    w = torch.randn(B * next_n, H, device=DEV, generator=g) * H ** -0.5
    return q, kv, w, ctx, block_table, max_len


@pytest.mark.parametrize("H", [32, 64])
@pytest.mark.parametrize("next_n", [1, 2])
def test_paged_logits_and_topk_match_deepgemm(H, next_n, dg, ops):
    g = torch.Generator(device=DEV).manual_seed(10 * H + next_n)
    B = PAGED_B
    q, kv, w, ctx, bt, max_len = paged_inputs(B, next_n, H, g)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 8
    schedule = dg.get_paged_mqa_logits_metadata(ctx, BS, sms)
    theirs = dg.fp8_fp4_paged_mqa_logits((q, None), kv.unsqueeze(-2), w, ctx, bt, schedule, max_len,
                                         clean_logits=False)
    lens = ctx.reshape(-1)
    win = torch.arange(max_len, device=DEV)[None, :] < lens[:, None]
    want = ref.indexer_logits_paged_ref(q[:2], kv, w[:2 * next_n], ctx[:2], bt[:2], max_len)
    mag = eb.indexer_magnitude_paged(q, kv, w, ctx, bt, max_len)
    lim_dg = eb.indexer_limit(mag, heads=H, arithmetic="fp8")
    rows = B * next_n
    sel_theirs = torch.full((rows, TOPK), -1, dtype=torch.int32, device=DEV)
    ops.top_k_per_row_decode(theirs, next_n, ctx, sel_theirs, rows, theirs.stride(0), theirs.stride(1), TOPK)
    for mode, cap in MODES.items():
        ours = indexer_logits_paged(q, kv.unsqueeze(-2), w, ctx, bt, max_len, capability=cap)
        e_dg, e_ref = rel(ours, theirs, win), rel(ours[:2 * next_n], want, win[:2 * next_n])
        lim = eb.indexer_limit(mag, heads=H, arithmetic=arithmetic(cap))
        r_dg = eb.indexer_error_ratio(ours, theirs, lim + lim_dg, win)
        r_ref = eb.indexer_error_ratio(ours[:2 * next_n], want, lim[:2 * next_n], win[:2 * next_n])
        sel = torch.full_like(sel_theirs, -1)
        ops.top_k_per_row_decode(ours, next_n, ctx, sel, rows, ours.stride(0), ours.stride(1), TOPK)
        agree, untied, floor = topk_agreement(ours, theirs, sel, sel_theirs, torch.zeros_like(lens), lens)
        print(f"\npaged H={H} next_n={next_n} {mode}: rel err vs DeepGEMM {e_dg:.1e}, vs float64 {e_ref:.1e}; "
              f"error/limit vs DeepGEMM {r_dg:.1e}, vs float64 {r_ref:.1e}; "
              f"top-{TOPK} agreement {agree:.5f} (ties allow {floor:.5f}), non-tie differences {untied}")
        assert r_dg <= 1 and r_ref <= 1
        assert untied == 0      # every difference a tie: the agreement is then at least `floor` (printed)


def test_paged_kernel_replays_in_a_cuda_graph():
    """Captured once; new context lengths and block table in the same buffers; the replay gives the new logits."""
    g = torch.Generator(device=DEV).manual_seed(3)
    B, next_n, H = 8, 2, 32
    q, kv, w, ctx, bt, max_len = paged_inputs(B, next_n, H, g, max_len=PAGED_MAX_LEN // 2)
    out = torch.empty(B * next_n, max_len, device=DEV)
    indexer_logits_paged(q, kv, w, ctx, bt, max_len, out=out)          # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        indexer_logits_paged(q, kv, w, ctx, bt, max_len, out=out)
    new_lens = torch.randint(1, max_len, (B,), device=DEV, generator=g, dtype=torch.int32)
    ctx.copy_(new_lens[:, None] - next_n + 1 + torch.arange(next_n, device=DEV)[None, :])
    bt.copy_(bt.flip(0))
    out.fill_(float("nan"))
    graph.replay()
    want = indexer_logits_paged(q, kv, w, ctx, bt, max_len, clean_logits=True)
    win = torch.isfinite(want)
    assert not torch.isnan(out[win]).any()
    assert torch.equal(out[win], want[win])


# ---- q quantization and the cache writer -----------------------------------------------------------------------

def _e4m3_step(v: torch.Tensor) -> torch.Tensor:
    """The spacing of e4m3fn values at each |v| (float64): 2^(e-3) for |v| in [2^e, 2^(e+1)), 2^-9 below 2^-6."""
    _, e = torch.frexp(v.abs().clamp_min(2.0 ** -6))       # |v| = m * 2^e, m in [0.5, 1)
    return torch.exp2((e - 4).to(torch.float64))


def _transcription_within_fma(ref_q, ref_w, want_q, want_w):
    """The CPU transcription against vLLM's kernel on the GPU, where Triton may fuse ``x0 * cos - x1 * sin`` into one
    FMA (one rounding instead of two): a rotated float32 value then moves by at most one float32 ulp, its bf16 rounding
    by at most one bf16 step (2^-8 relative), and its e4m3 code by at most one e4m3 step. The per-(token, head) scale
    is a power of two above amax / 448, so it moves only for a row whose amax / 448 lies within 2^-7 (relative) of a
    power of two: its largest code is then amax / scale rounded to e4m3, within 2^-7 of 448 (the scale rounded up)
    or of 224 (down), where e4m3's step is 32 and 16, so the code is 448 or 224 exactly, on both sides. Returns
    (codes compared, codes differing) over the rows of equal scale."""
    same_scale = ref_w.view(torch.int32) == want_w.view(torch.int32)
    for t, h in (~same_scale).nonzero().tolist():           # a moved scale: only at a power-of-two edge
        edges = {float(ref.e4m3_values(c[t, h]).abs().max()) for c in (ref_q, want_q.cpu())}
        assert edges <= {224.0, 448.0}, (t, h, edges)
    a, b = ref.e4m3_values(ref_q)[same_scale], ref.e4m3_values(want_q.cpu())[same_scale]
    assert torch.equal(a[..., 64:], b[..., 64:])            # the unrotated dims: no FMA, bit for bit
    assert ((a - b).abs() <= _e4m3_step(torch.maximum(a.abs(), b.abs()))).all()
    return a[..., :64].numel(), int((a[..., :64] != b[..., :64]).sum())


@pytest.mark.parametrize("is_neox", [False, True])
def test_q_quant_bit_exact_against_vllm(is_neox):
    """Ours (hardware and software fp8 stores) bit for bit against vLLM's kernel on the GPU; the CPU tests' oracle, our
    float32 transcription of vLLM's kernel, within what FMA contraction can move (on 2026-12-04b it differed from
    vLLM's GPU kernel for is_neox=True, which the bit-exact assertion of that day did not allow)."""
    from vllm.model_executor.layers.sparse_attn_indexer import fused_indexer_q_rope_quant as vllm_q_quant

    g = torch.Generator(device=DEV).manual_seed(int(is_neox))
    T, H = 300, 32
    q = (torch.randn(T, H, D, device=DEV, generator=g) * torch.logspace(-3, 3, T, device=DEV)[:, None, None]
         ).to(torch.bfloat16)
    cos_sin = torch.randn(4096, 64, device=DEV, generator=g)
    pos = torch.randint(0, 4096, (T,), device=DEV, generator=g)
    w = torch.randn(T, H, device=DEV, generator=g).to(torch.bfloat16)
    want_q, want_w = vllm_q_quant(pos, q, cos_sin, w, D ** -0.5, H ** -0.5, is_neox)
    for cap in ((9, 0), (8, 0)):                                   # hardware, then software fp8 stores
        got_q, got_w = indexer_q_rope_quant(pos, q, cos_sin, w, D ** -0.5, H ** -0.5, is_neox, capability=cap)
        assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8)), cap
        assert torch.equal(got_w, want_w), cap
    # vLLM's Triton kernel cannot be the CPU oracle: under TRITON_INTERPRET=1 its bf16 and fp8 stores round wrongly
    ref_q, ref_w = ref.indexer_q_rope_quant_ref(pos.cpu(), q.cpu(), cos_sin.cpu(), w.cpu(), D ** -0.5, H ** -0.5,
                                                is_neox)
    compared, differing = _transcription_within_fma(ref_q, ref_w, want_q, want_w.cpu())
    print(f"\nq quant is_neox={is_neox}: ours == vLLM's bit for bit (sm90 and sm80 stores); CPU transcription: "
          f"{differing} of {compared} rotated codes one e4m3 step from vLLM's GPU kernel")


def test_torch_cache_writer_matches_vllms(ops):
    g = torch.Generator(device=DEV).manual_seed(0)
    nb, T = 6, 200
    k = (torch.randn(T, D, device=DEV, generator=g) * 4).to(torch.bfloat16)
    slots = torch.randperm(nb * BS, device=DEV, generator=g)[:T]
    slots[5] = -1
    theirs = torch.zeros(nb, BS, D + 4, dtype=torch.uint8, device=DEV)
    ops.indexer_k_quant_and_cache(k, theirs, slots, D, "ue8m0")
    ours = ref.index_cache_write_ref(torch.zeros_like(theirs), k, slots)
    assert torch.equal(ours, theirs)
