"""GPU checks of the fp8_ds_mla kernel (skipped without CUDA; run them with ``-s`` to see the writer comparison):

* the cache is written by vLLM's own ``concat_and_cache_mla(kv_c, k_pe, cache, slot_mapping, "fp8_ds_mla", scale)``
  (:func:`sparse_mla.bench.kernel.vllm_fp8_ds_mla_cache`) and read by our kernel, against the fp32 reference on the
  same bytes, at GLM-5 shapes (8-128 heads, topk 2048 and 1152, caches up to 128K tokens), poisoned outputs, -1
  entries and an all-invalid row;
* our independent encoder (:func:`sparse_mla.kernels.reference.fp8_ds_mla_encode_ref`) against vLLM's bytes: same
  scale convention? (printed; the assertions check only what the layout promises);
* the software e4m3 decode (SM80/86, forced here with ``capability=(8, 0)``) gives bit-identical outputs to the
  hardware one; both scale variants agree with the reference; q in fp16/fp32; slot byte offsets past 2**31; a
  CUDA-graph capture of the launch vLLM makes (``check_indices=False``) replays to the eager result.
"""
from __future__ import annotations

import pytest
import torch

from sparse_mla import sparse_mla_attention
from sparse_mla.bench.kernel import GLM5_SCALE, make_inputs, vllm_fp8_ds_mla_cache
from sparse_mla.kernels import choose_config, launch
from sparse_mla.kernels.error_bounds import check_attention
from sparse_mla.kernels.reference import fp8_ds_mla_decode_ref, fp8_ds_mla_encode_ref

pytestmark = pytest.mark.gpu
FP8 = "fp8_ds_mla"


def _run_poisoned(q_nope, q_pe, kv, idx, **kw):
    T, H = q_pe.shape[:2]
    out = torch.full((T, H, 512), float("nan"), device=q_nope.device, dtype=q_nope.dtype)
    lse = torch.full((T, H), float("nan"), device=q_nope.device)
    sparse_mla_attention(q_nope, q_pe, kv, idx, GLM5_SCALE, out=out, lse=lse, kv_cache_dtype=FP8, **kw)
    assert not out.isnan().any() and not lse.isnan().any(), "unwritten (poisoned) output left"
    return out, lse


def _check_against_reference(q_nope, q_pe, kv, idx, out, lse, fp8_scales=None):
    """Within the limits derived for the GPU's arithmetic (:mod:`sparse_mla.kernels.error_bounds`); the scale
    variant is the one the launch used (the planner's, unless the test forced one)."""
    T, H = q_pe.shape[:2]
    if fp8_scales is None:
        fp8_scales = choose_config(T, H, idx.shape[1], q_nope.dtype, q_nope.device, kv_cache_dtype=FP8).fp8_scales
    assert (idx >= 0).any()
    c = check_attention(out, lse, q_nope, q_pe, kv, idx, GLM5_SCALE, kv_cache_dtype=FP8, fp8_scales=fp8_scales)
    print(f"\n{tuple(q_nope.shape)} {q_nope.dtype} {fp8_scales}: {c.explain()}")
    assert c.ok, c.explain()


@pytest.mark.parametrize("H,T,topk,cache_tokens", [
    (8, 1, 2048, 131072), (16, 4, 2048, 32768), (64, 32, 2048, 131072), (128, 128, 2048, 16384),
    (64, 1024, 2048, 65536), (128, 4, 1152, 131072), (32, 300, 1152, 8192), (3, 17, 1152, 4096)])
def test_vllm_written_cache_glm5_shapes(H, T, topk, cache_tokens):
    q_nope, q_pe, kv, idx = make_inputs(T, H, cache_tokens, topk=topk, seed=H * 1000 + T, kv_cache_dtype=FP8)
    assert kv.dtype == torch.uint8 and kv.shape[-1] == 656
    idx[:, ::5] = -1
    if T > 1:
        idx[-1] = -1                               # an all-invalid row: out 0, lse -inf
    out, lse = _run_poisoned(q_nope, q_pe, kv, idx)
    _check_against_reference(q_nope, q_pe, kv, idx, out, lse)


def test_encoder_against_vllms_bytes():
    """Our encoder and vLLM's writer on the same bf16 latents (tiles of very different magnitudes, an all-zero
    tile, rounding ties). Asserted: the rope bytes are copied verbatim and vLLM's codes decode to within e4m3 rounding
    of ``x / scale`` for vLLM's own scales. Printed: how often the scales and codes agree bit for bit."""
    g = torch.Generator(device="cuda").manual_seed(7)
    n = 8192
    mag = torch.logspace(-3, 2, n, device="cuda")[torch.randperm(n, device="cuda", generator=g)]
    kv_c = (torch.randn(n, 512, device="cuda", generator=g) * mag[:, None]).to(torch.bfloat16)
    kv_c[0, :128] = 0                              # an all-zero tile: scale FLT_MIN
    kv_c[1, :128] = 1.0625                         # scale 1 (amax 448), x / scale = 1.0625: a tie between 1 and
    kv_c[1, 0] = 448.0                             # 1.125 (round-to-nearest-even gives 1.0)
    k_pe = torch.randn(n, 64, device="cuda", generator=g).to(torch.bfloat16)
    theirs = vllm_fp8_ds_mla_cache(kv_c, k_pe).view(-1, 656)[:n]
    ours = fp8_ds_mla_encode_ref(kv_c, k_pe).view(-1, 656)
    assert torch.equal(theirs[:, 528:], ours[:, 528:]), "rope bytes differ"
    s_theirs = theirs[:, 512:528].contiguous().view(torch.float32)
    s_ours = ours[:, 512:528].contiguous().view(torch.float32)
    x = kv_c.float().view(n, 4, 128)
    assert bool((s_theirs > 0).all())
    dec = fp8_ds_mla_decode_ref(theirs.view(n, 1, 656), torch.float64).view(n, 576)[:, :512].view(n, 4, 128)
    err = (dec - x.double()).abs()
    bound = torch.maximum(x.double().abs() * 2 ** -4, s_theirs.double()[..., None] * 2 ** -10) * (1 + 1e-6)
    assert bool((err <= bound).all()), "vLLM's codes are not within e4m3 rounding of x / scale"
    c_t, c_o = theirs[:, :512].view(torch.int8).int(), ours[:, :512].view(torch.int8).int()
    scale_equal = (s_theirs.view(torch.int32) == s_ours.view(torch.int32)).float().mean().item()
    scale_rel = ((s_theirs - s_ours).abs() / s_ours).max().item()
    code_equal = (c_t == c_o).float().mean().item()
    pow2 = bool((torch.frexp(s_theirs)[0] == 0.5).all())
    print(f"\nvLLM fp8_ds_mla writer vs fp8_ds_mla_encode_ref on {n} rows: scales bit-equal {scale_equal:.4%} "
          f"(max rel diff {scale_rel:.2e}; vLLM's scales all powers of two: {pow2}), codes equal {code_equal:.4%} "
          f"(max |code difference| {(c_t - c_o).abs().max().item()}), rope equal")


def test_software_decode_matches_hardware_bit_for_bit():
    """The software e4m3 decode (SM80/86; ``capability=(8, 0)`` as vLLM reports a simulated SM80) and the hardware
    one under **one** launch plan (this GPU's tile, split count, warps and scale variant): the decoded values are exact
    either way, so the outputs are identical. (The plan itself differs by capability -- an A100's 108 SMs get fewer
    splits than this GPU -- which changes the summation order; the simulated SM80's own plan is checked against the
    derived limits in the next test.)"""
    q_nope, q_pe, kv, idx = make_inputs(8, 16, 32768, seed=3, kv_cache_dtype=FP8)
    hw_cfg = choose_config(8, 16, idx.shape[1], q_nope.dtype, q_nope.device, kv_cache_dtype=FP8)
    plan = dict(block_h=hw_cfg.block_h, block_n=hw_cfg.block_n, num_splits=hw_cfg.num_splits,
                num_warps=hw_cfg.num_warps, num_stages=hw_cfg.num_stages, fp8_scales=hw_cfg.fp8_scales)
    sw_cfg = choose_config(8, 16, idx.shape[1], q_nope.dtype, q_nope.device, kv_cache_dtype=FP8, capability=(8, 0),
                           **plan)
    assert hw_cfg.fp8_hw and not sw_cfg.fp8_hw
    assert {k: getattr(sw_cfg, k) for k in plan} == plan, "the two runs must share one launch plan"
    o_hw, l_hw = _run_poisoned(q_nope, q_pe, kv, idx, **plan)
    o_sw, l_sw = _run_poisoned(q_nope, q_pe, kv, idx, capability=(8, 0), **plan)
    assert torch.equal(o_hw, o_sw) and torch.equal(l_hw, l_sw)


@pytest.mark.parametrize("H,T", [(16, 8), (128, 4)])
def test_simulated_sm80_plan_within_limits(H, T):
    """The launch a simulated SM80 gets on this GPU (its own plan: an A100's SM count, the software decode, "fold"
    scales) against the fp32 reference within the derived limits of the variant it runs."""
    q_nope, q_pe, kv, idx = make_inputs(T, H, 32768, seed=H + 5, kv_cache_dtype=FP8)
    cfg = choose_config(T, H, idx.shape[1], q_nope.dtype, q_nope.device, kv_cache_dtype=FP8, capability=(8, 0))
    assert not cfg.fp8_hw
    idx[:, ::7] = -1
    out, lse = _run_poisoned(q_nope, q_pe, kv, idx, capability=(8, 0))
    _check_against_reference(q_nope, q_pe, kv, idx, out, lse, fp8_scales=cfg.fp8_scales)


@pytest.mark.parametrize("H,T", [(16, 64), (64, 64), (128, 256)])
@pytest.mark.parametrize("fp8_scales", ["fold", "registers"])
def test_both_scale_variants(H, T, fp8_scales):
    q_nope, q_pe, kv, idx = make_inputs(T, H, 16384, seed=H + T, kv_cache_dtype=FP8)
    idx[:, ::3] = -1
    out, lse = _run_poisoned(q_nope, q_pe, kv, idx, fp8_scales=fp8_scales)
    _check_against_reference(q_nope, q_pe, kv, idx, out, lse, fp8_scales=fp8_scales)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("H,T", [(8, 1), (64, 300)])
def test_fp16_fp32_queries(dtype, H, T):
    q_nope, q_pe, kv, idx = make_inputs(T, H, 8192, topk=512, seed=H + T, kv_cache_dtype=FP8)
    q_nope, q_pe = q_nope.to(dtype), q_pe.to(dtype)
    out, lse = _run_poisoned(q_nope, q_pe, kv, idx)
    _check_against_reference(q_nope, q_pe, kv, idx, out, lse)


def test_slots_past_int32_byte_offsets():
    slots = 4 * 1024 * 1024                        # 4M slots * 656 bytes > 2**31
    kv = torch.zeros(slots // 64, 64, 656, dtype=torch.uint8, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    hi = 65536                                     # write the last 64K slots with vLLM's writer
    tail = vllm_fp8_ds_mla_cache(torch.randn(hi, 512, device="cuda", generator=g).to(torch.bfloat16),
                                 torch.randn(hi, 64, device="cuda", generator=g).to(torch.bfloat16))
    kv.view(-1, 656)[slots - hi:] = tail.view(-1, 656)
    T, H = 2, 16
    q_nope = torch.randn(T, H, 512, device="cuda", dtype=torch.bfloat16, generator=g)
    q_pe = torch.randn(T, H, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    idx = torch.randint(slots - hi, slots, (T, 256), device="cuda", dtype=torch.int32, generator=g)
    assert int(idx.min()) * 656 > 2**31
    out, lse = _run_poisoned(q_nope, q_pe, kv, idx)
    _check_against_reference(q_nope, q_pe, kv, idx, out, lse)


@pytest.mark.parametrize("H,T", [(64, 4), (16, 256)])
def test_cuda_graph_replay(H, T):
    """The launch vLLM's backend makes (choose_config + launch, no host sync) captured in a CUDA graph, replayed on
    new indices written into the captured buffer: the eager result for those indices."""
    q_nope, q_pe, kv, idx = make_inputs(T, H, 32768, seed=11, kv_cache_dtype=FP8)
    out = torch.empty(T, H, 512, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(T, H, device="cuda")
    cfg = choose_config(T, H, idx.shape[1], q_nope.dtype, q_nope.device, kv_cache_dtype=FP8)
    launch(q_nope, q_pe, kv, idx, GLM5_SCALE, out, lse, cfg)          # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(q_nope, q_pe, kv, idx, GLM5_SCALE, out, lse, cfg)
    idx.copy_(torch.flip(idx, dims=[1]) // 2)                          # other slots, same buffer
    idx[:, :7] = -1
    graph.replay()
    torch.cuda.synchronize()
    want_o, want_l = sparse_mla_attention(q_nope, q_pe, kv, idx, GLM5_SCALE, kv_cache_dtype=FP8)
    assert torch.equal(out, want_o) and torch.equal(lse, want_l)
