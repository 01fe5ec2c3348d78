"""``sparse-mla bench kernel``: correctness at GLM-5 shapes and a timing benchmark against vLLM's FlashMLA sparse
kernels, on a CUDA GPU. A benchmark, not a test: it writes what it measured to ``results/``.

For each case (heads ``H``, query tokens ``T``, ``topk`` 2048, a latent cache of ``cache_tokens`` slots in 64-token
blocks, random slots):

* **check**: our kernel against :func:`sparse_mla.kernels.reference.sparse_mla_attention_ref` in fp32 (relative
  Frobenius error of ``out``, max abs error of ``lse``), and the peer the same way.
* **time**: ``triton.testing.do_bench`` medians (eager launches: host launch overhead included) and
  ``triton.testing.do_bench_cudagraph`` medians (graph replay, as vLLM's CUDA-graph decode runs) of our kernel and
  of the peer. Achieved bandwidth counts the gathered KV bytes (``T * topk * row bytes``) plus q and out, against a
  measured device-to-device copy bandwidth (bytes read + written); TFLOP/s counts ``2 * T * H * topk * (576 + 512)``.

``compare_launch``: each case also times the launch the kernel had before the device-derived plan
(:func:`sparse_mla.bench.launch_v3.v3_config`: the constants tuned on the H200) on the same inputs, ``old_*`` columns and
``speedup_new_vs_old`` (graph replay).

Two cache formats (``kv_cache_dtype``):

* ``auto``: a bf16 cache (1152 bytes per token); peer ``flash_mla_sparse_fwd`` (``vllm/v1/attention/ops/flashmla.py``;
  heads padded to 64 on SM90 / 128 on SM100 as vLLM's ``FlashMLASparseImpl._bf16_flash_mla_kernel`` does, the padded q
  prepared outside the timed region, which favours the peer).
* ``fp8_ds_mla``: the 656-byte rows written by vLLM's own ``concat_and_cache_mla(kv_c, k_pe, cache, slot_mapping,
  "fp8_ds_mla", scale)`` from random bf16 latents; peer FlashMLA's fp8 sparse decode ``flash_mla_with_kvcache(q [T, 1,
  h_q, 576], cache [blocks, 64, 1, 656], block_table=None, cache_seqlens=None, head_dim_v=512,
  tile_scheduler_metadata=get_mla_metadata()[0], is_fp8_kvcache=True, indices [T, 1, topk])`` -- vLLM's decode call
  (``FlashMLASparseImpl._fp8_flash_mla_kernel``: one query token per request, heads padded to 64 or 128, the scheduler
  metadata made by the first call, outside the timed region). Our other fp8 scale variant (``fp8_scales``) is timed in
  the same run (``alt_*`` columns).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..files import atomic_write, atomic_write_text, make_dir
from ..layouts import FP8_DS_MLA_ROW_BYTES, KV_LORA_RANK, LN2, ROPE_DIM
from ..records import environment
from .common import copy_bandwidth, require_cuda

DL, DR, TOPK = KV_LORA_RANK, ROPE_DIM, 2048
GLM5_SCALE = (192 + 64) ** -0.5
HEADS = (8, 16, 64, 128)
TOKENS = (1, 4, 32, 128, 1024, 4096)
FP8_TOKENS = (1, 4, 32, 128, 1024)
ROW_BYTES = {"auto": (DL + DR) * 2, "fp8_ds_mla": FP8_DS_MLA_ROW_BYTES}
# (block_h, block_n, block_dv, num_warps, num_stages); decode configs are also tried at several split counts
DECODE_SWEEP = [(16, 32, 512, 4, 2), (16, 64, 512, 4, 2), (32, 32, 512, 4, 2), (64, 32, 256, 8, 2),
                (64, 16, 512, 8, 2)]
DECODE_SPLITS = (8, 16, 32)
#: Where inputs are made and kernels run (a CPU smoke run of this module under the interpreter sets "cpu").
DEVICE = "cuda"
#: Each speedup a row holds as the times it divides: ``{speedup: (the other's µs, ours µs)}`` -- the peer's eager and
#: graph-replay medians, the other fp8 scale variant's and the v3 launch's graph replay, each over ours.
SPEEDUPS = {"speedup_vs_flashmla": ("flashmla_us", "triton_us"),
            "speedup_vs_flashmla_graph": ("flashmla_graph_us", "triton_graph_us"),
            "speedup_default_vs_alt": ("alt_graph_us", "triton_graph_us"),
            "speedup_new_vs_old": ("old_graph_us", "triton_graph_us")}


def speedups(row: dict) -> dict:
    """The :data:`SPEEDUPS` whose two times ``row`` holds, ``{speedup: their µs / ours}`` (NaN where a time is NaN:
    not measured); the writer's and ``records check``'s one formula."""
    from .common import time_ratios

    return time_ratios(row, SPEEDUPS)
PREFILL_SWEEP = [(16, 64, 512, 4, 2), (16, 64, 512, 4, 3), (32, 64, 512, 8, 2), (64, 32, 256, 8, 2),
                 (64, 64, 256, 8, 2), (64, 32, 128, 4, 2), (64, 64, 128, 8, 2), (128, 32, 128, 8, 2),
                 (128, 64, 128, 8, 2), (64, 32, 512, 8, 2)]


def vllm_fp8_ds_mla_cache(kv_c, k_pe, block_size: int = 64):
    """An ``fp8_ds_mla`` cache ``uint8 [cdiv(N, block_size), block_size, 656]`` written by vLLM's own
    ``concat_and_cache_mla(kv_c [N, 512], k_pe [N, 64], cache, slot_mapping=arange(N), "fp8_ds_mla", scale)`` (the
    C op ``torch.ops._C_cache_ops``, which computes the per-128 scales itself; ``scale`` is unused for this layout)."""
    import torch
    from vllm import _custom_ops as ops

    n = kv_c.shape[0]
    cache = torch.zeros((n + block_size - 1) // block_size, block_size, FP8_DS_MLA_ROW_BYTES, dtype=torch.uint8,
                        device=kv_c.device)
    slots = torch.arange(n, dtype=torch.int64, device=kv_c.device)
    ops.concat_and_cache_mla(kv_c.contiguous(), k_pe.contiguous(), cache, slots, "fp8_ds_mla",
                             torch.ones(1, dtype=torch.float32, device=kv_c.device))
    return cache


def make_inputs(T: int, H: int, cache_tokens: int, topk: int | None = None, seed: int = 0, block_size: int = 64,
                kv_cache_dtype: str = "auto"):
    """Fresh inputs on the GPU: bf16 q_nope [T,H,512], q_pe [T,H,64], a cache of ``cache_tokens`` slots in
    ``block_size`` blocks (bf16 ``[.., 576]``, or fp8_ds_mla ``uint8 [.., 656]`` written by vLLM from random bf16
    latents) and int32 indices [T, topk] of random slots (distinct within a row when the cache is large enough)."""
    torch = require_cuda()
    dev = DEVICE
    topk = TOPK if topk is None else topk
    g = torch.Generator(device=dev).manual_seed(seed)
    q_nope = torch.randn(T, H, DL, device=dev, dtype=torch.bfloat16, generator=g)
    q_pe = torch.randn(T, H, DR, device=dev, dtype=torch.bfloat16, generator=g)
    kv = torch.randn(cache_tokens // block_size, block_size, DL + DR, device=dev, dtype=torch.bfloat16, generator=g)
    if kv_cache_dtype == "fp8_ds_mla":
        flat = kv.view(-1, DL + DR)
        kv = vllm_fp8_ds_mla_cache(flat[:, :DL], flat[:, DL:], block_size)
    if topk <= cache_tokens:
        # distinct slots per row: top-k of random keys, in chunks to bound memory
        rows = []
        for t0 in range(0, T, 256):
            n = min(256, T - t0)
            rows.append(torch.rand(n, cache_tokens, device=dev, generator=g).topk(topk, dim=1).indices)
        idx = torch.cat(rows).to(torch.int32)
    else:
        idx = torch.randint(0, cache_tokens, (T, topk), device=dev, generator=g, dtype=torch.int32)
    return q_nope, q_pe, kv, idx


def reference_chunked(q_nope, q_pe, kv, idx, scale, chunk: int = 256, kv_cache_dtype: str = "auto"):
    """fp32 reference on the GPU, ``chunk`` tokens at a time (the gather is ``chunk * topk`` rows)."""
    import torch

    from ..kernels.reference import sparse_mla_attention_ref

    outs, lses = [], []
    for t0 in range(0, q_nope.shape[0], chunk):
        o, l = sparse_mla_attention_ref(q_nope[t0:t0 + chunk], q_pe[t0:t0 + chunk], kv, idx[t0:t0 + chunk], scale,
                                        compute_dtype=torch.float32, kv_cache_dtype=kv_cache_dtype)
        outs.append(o.float())
        lses.append(l)
    return torch.cat(outs), torch.cat(lses)


def _rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def flashmla_peer(q_nope, q_pe, kv, idx, scale):
    """vLLM's FlashMLA sparse prefill kernel as vLLM calls it (heads padded): ``(fn, H)`` with ``fn() -> (out [T, Hp,
    512], max_logits, lse [T, Hp])``, or ``(None, why)``."""
    import torch

    try:
        from vllm.v1.attention.ops.flashmla import flash_mla_sparse_fwd, is_flashmla_sparse_supported

        ok, why = is_flashmla_sparse_supported()
        if not ok:
            return None, why
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"
    T, H = q_pe.shape[:2]
    major = torch.cuda.get_device_capability()[0]
    pad = 64 if major == 9 else 128
    Hp = max(pad, H) if H % pad == 0 or H < pad else H
    q = torch.zeros(T, Hp, DL + DR, device="cuda", dtype=torch.bfloat16)
    q[:, :H, :DL] = q_nope
    q[:, :H, DL:] = q_pe
    kv_flat = kv.view(-1, 1, DL + DR)
    idx3 = idx.view(T, 1, -1)

    def fn():
        return flash_mla_sparse_fwd(q, kv_flat, idx3, scale, d_v=DL)

    return fn, H


def flashmla_fp8_peer(q_nope, q_pe, kv8, idx, scale):
    """FlashMLA's fp8 sparse decode on the fp8_ds_mla cache, as vLLM's ``FlashMLASparseImpl._fp8_flash_mla_kernel``
    calls it for decode (``q [T, 1, h_q, 576]``, one query token per request, heads zero-padded to 64 or 128):
    ``(fn, H)`` with ``fn() -> (out [T, H, 512], lse [T, H])`` (the slices are views, taken inside ``fn``), or
    ``(None, why)``. The scheduler metadata is made by a first call here, outside any timed region."""
    import torch

    try:
        from vllm.v1.attention.ops.flashmla import (flash_mla_with_kvcache, get_mla_metadata,
                                                    is_flashmla_sparse_supported)

        ok, why = is_flashmla_sparse_supported()
        if not ok:
            return None, why
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"
    T, H = q_pe.shape[:2]
    Hp = 64 if H <= 64 else 128
    if H > 128:
        return None, f"FlashMLA's fp8 sparse decode takes at most 128 heads, got {H}"
    q = torch.zeros(T, 1, Hp, DL + DR, device=q_nope.device, dtype=torch.bfloat16)
    q[:, 0, :H, :DL] = q_nope
    q[:, 0, :H, DL:] = q_pe
    k_cache = kv8.view(torch.uint8).unsqueeze(-2)                      # [blocks, block_size, 1, 656]
    indices = idx.view(T, 1, -1)
    sched = get_mla_metadata()[0]

    def fn():
        out, lse = flash_mla_with_kvcache(q, k_cache, block_table=None, cache_seqlens=None, head_dim_v=DL,
                                          tile_scheduler_metadata=sched, is_fp8_kvcache=True, indices=indices,
                                          softmax_scale=scale)
        return out[:, 0, :H], lse[:, :H, 0]

    fn()     # initializes the scheduler metadata (vLLM builds it once per batch shape, before graph capture)
    return fn, H


def _peer(kv_cache_dtype, q_nope, q_pe, kv, idx, scale):
    """``(fn, info)`` of the peer for this cache format; ``fn() -> (out [T, H, 512], lse [T, H])``."""
    if kv_cache_dtype == "fp8_ds_mla":
        return flashmla_fp8_peer(q_nope, q_pe, kv, idx, scale)
    fn, info = flashmla_peer(q_nope, q_pe, kv, idx, scale)
    if fn is None:
        return None, info
    H = q_pe.shape[1]

    def sliced():
        o, _, l = fn()
        return o[:, :H], l[:, :H]

    return sliced, info


PEER_NAME = {"auto": "flash_mla_sparse_fwd (bf16 prefill)", "fp8_ds_mla": "flash_mla_with_kvcache (fp8 sparse decode)"}


#: The caches the correctness pass checks, case ``i`` on ``CHECK_CACHE_TOKENS[i % 3]`` (``--quick``: the first two).
CHECK_CACHE_TOKENS = (8192, 32768, 131072)


def run_bench(heads=HEADS, tokens=None, cache_tokens: int = 128 * 1024, check_cache_tokens=CHECK_CACHE_TOKENS,
              sweep: bool = False, out_dir: Path | str | None = None, tag: str | None = None, quick: bool = False,
              sweep_configs: list[tuple[int, int, int, int, int]] | None = None, check: bool = True,
              kv_cache_dtype: str = "auto", compare_launch: bool = False) -> dict:
    """Check and time every (H, T); write ``bench_kernel_<tag>.{csv,json,png}`` (``bench_kernel_fp8_ds_mla_<tag>.*``
    for the fp8 cache; and the sweep CSV) to ``out_dir`` (default :func:`sparse_mla.records.gpu_record_dir`).
    ``tokens`` defaults to :data:`TOKENS` (bf16) or :data:`FP8_TOKENS` (fp8_ds_mla).

    Raises :class:`UserInputError` without a CUDA GPU.
    """
    torch = require_cuda()
    import pandas as pd
    from tqdm import tqdm

    from ..kernels.launch_plan import check_cache_layout
    from ..records import gpu_record_dir, gpu_slug

    kv_cache_dtype = check_cache_layout(kv_cache_dtype)
    fp8 = kv_cache_dtype == "fp8_ds_mla"
    tokens = (FP8_TOKENS if fp8 else TOKENS) if tokens is None else tokens
    tag = gpu_slug() if tag is None else tag
    stem = f"bench_kernel_fp8_ds_mla_{tag}" if fp8 else f"bench_kernel_{tag}"
    out_dir = gpu_record_dir() if out_dir is None else Path(out_dir)
    make_dir(out_dir)
    env = environment()
    env["copy_bandwidth_GBps"] = round(copy_bandwidth() / 1e9, 1)
    env.update(kv_cache_dtype=kv_cache_dtype, peer=PEER_NAME[kv_cache_dtype])
    cases = [(H, T) for H in heads for T in tokens]
    if quick:   # the correctness pass on the two smaller caches only (the timing still uses cache_tokens)
        check_cache_tokens = tuple(check_cache_tokens[:2])
    checks = [_check_case(H, T, check_cache_tokens[i % len(check_cache_tokens)], 100 + i, kv_cache_dtype)
              for i, (H, T) in enumerate(tqdm(cases if check else [], desc="check"))]
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    rows, sweep_rows = [], []
    for i, (H, T) in enumerate(tqdm(cases, desc="time")):
        inputs = make_inputs(T, H, cache_tokens, seed=200 + i, kv_cache_dtype=kv_cache_dtype)
        timer = _Timer(inputs, rep=50 if quick else 200)
        row = _time_case(timer, H, T, cache_tokens, kv_cache_dtype, env["copy_bandwidth_GBps"], compare_launch)
        rows.append(row)
        if sweep:
            sweep_rows += _sweep_case(timer, H, T, kv_cache_dtype, sweep_configs, row["flashmla_graph_us"])
        del inputs, timer
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    record = {"environment": env, "checks": checks, "bench": rows}
    atomic_write_text(out_dir / f"{stem}.json", json.dumps(record, indent=1))
    atomic_write_text(out_dir / f"{stem}.csv", df.to_csv(index=False))
    if sweep:
        atomic_write_text(out_dir / f"bench_kernel_sweep_{stem.removeprefix('bench_kernel_')}.csv",
                          pd.DataFrame(sweep_rows).to_csv(index=False))
    plot_bench(df, env, out_dir / f"{stem}.png")
    return record


def _check_case(H: int, T: int, cache_tokens: int, seed: int, kv_cache_dtype: str) -> dict:
    """Our kernel and the peer against the fp32 reference on fresh inputs (outputs poisoned with NaN first)."""
    import torch

    from ..kernels import sparse_mla_attention

    kw = dict(kv_cache_dtype=kv_cache_dtype)
    q_nope, q_pe, kv, idx = make_inputs(T, H, cache_tokens, seed=seed, **kw)
    idx[:, -7:] = -1  # some padding
    ref_o, ref_l = reference_chunked(q_nope, q_pe, kv, idx, GLM5_SCALE, **kw)
    out = torch.full((T, H, DL), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    lse = torch.full((T, H), float("nan"), device=DEVICE)
    sparse_mla_attention(q_nope, q_pe, kv, idx, GLM5_SCALE, out=out, lse=lse, **kw)
    rec = dict(H=H, T=T, cache_tokens=cache_tokens, topk=TOPK, kv_cache_dtype=kv_cache_dtype,
               nan=int(torch.isnan(out).sum() + torch.isnan(lse).sum()),
               out_rel_err=_rel(out, ref_o), lse_max_abs_err=(lse - ref_l).abs().max().item())
    fn, info = _peer(kv_cache_dtype, q_nope, q_pe, kv, idx, GLM5_SCALE)
    if fn is not None:
        po, pl = fn()
        rec["flashmla_out_rel_err"] = _rel(po, ref_o)
        # the lse's base: FlashMLA's README says base 2; compare both readings and record which one fits
        rec["flashmla_lse_err_if_natural"] = (pl - ref_l).abs().max().item()
        rec["flashmla_lse_err_if_base2"] = (pl * LN2 - ref_l).abs().max().item()
    else:
        rec["flashmla"] = str(info)
    return rec


class _Timer:
    """Medians of one case's launches: eager (``do_bench``: host launch overhead included) and graph replay
    (``do_bench_cudagraph``, as vLLM's CUDA-graph decode runs), our kernel with a given config and the peer."""

    def __init__(self, inputs, rep: int):
        import torch

        self.q_nope, self.q_pe, self.kv, self.idx = inputs
        T, H = self.q_pe.shape[:2]
        self.out = torch.empty(T, H, DL, device=DEVICE, dtype=torch.bfloat16)
        self.lse = torch.empty(T, H, device=DEVICE)
        self.rep = rep

    def eager(self, fn) -> float:
        import triton

        return triton.testing.do_bench(fn, warmup=25, rep=self.rep, return_mode="median")

    def graphed(self, fn) -> float:
        import triton

        return triton.testing.do_bench_cudagraph(fn, rep=self.rep // 2, return_mode="median")

    def ours(self, cfg, fallback: bool = True):
        from ..kernels import launch

        return lambda: launch(self.q_nope, self.q_pe, self.kv, self.idx, GLM5_SCALE, self.out, self.lse, cfg,
                              fallback=fallback)

    def fitted(self, cfg):
        """The tiles that ran for ``cfg`` (smaller where shared memory is short)."""
        from ..kernels import fitted_config

        return fitted_config(self.q_nope, self.q_pe, self.kv, cfg)

    def peer(self, kv_cache_dtype: str):
        return _peer(kv_cache_dtype, self.q_nope, self.q_pe, self.kv, self.idx, GLM5_SCALE)[0]


def _time_case(timer: _Timer, H: int, T: int, cache_tokens: int, kv_cache_dtype: str, copy_gbps: float,
               compare_launch: bool) -> dict:
    """One row of the benchmark: our planned launch and the peer (eager and graph medians), bandwidth and TFLOP/s;
    for fp8_ds_mla the other scale variant, with ``compare_launch`` the v3 launch, both on the same inputs."""
    import torch

    from ..kernels import choose_config

    fp8 = kv_cache_dtype == "fp8_ds_mla"
    flops = 2 * T * H * TOPK * (DL + DR + DL)
    nbytes = T * TOPK * ROW_BYTES[kv_cache_dtype] + T * H * (DL + DR) * 2 + T * H * DL * 2
    dev = timer.q_nope.device
    default = choose_config(T, H, TOPK, torch.bfloat16, dev, kv_cache_dtype=kv_cache_dtype)
    ms, gms = timer.eager(timer.ours(default)), timer.graphed(timer.ours(default))
    default = timer.fitted(default)
    fn = timer.peer(kv_cache_dtype)
    peer_ms, peer_gms = (timer.eager(fn), timer.graphed(fn)) if fn else (float("nan"), float("nan"))
    best = min(ms, gms)  # graph replay removes host launch overhead, as in vLLM's CUDA-graph decode
    row = dict(H=H, T=T, topk=TOPK, cache_tokens=cache_tokens, kv_cache_dtype=kv_cache_dtype,
               block_h=default.block_h, block_n=default.block_n, block_dv=default.block_dv,
               num_splits=default.num_splits, num_warps=default.num_warps, num_stages=default.num_stages,
               fp8_scales=default.fp8_scales if fp8 else "", fp8_hw=default.fp8_hw,
               triton_us=ms * 1e3, flashmla_us=peer_ms * 1e3,
               triton_graph_us=gms * 1e3, flashmla_graph_us=peer_gms * 1e3)
    row.update(speedups(row))
    row.update(triton_TBps=nbytes / best / 1e9, frac_of_copy_bw=nbytes / (best * 1e-3) / (copy_gbps * 1e9),
               triton_TFLOPs=flops / best / 1e9, flashmla_TFLOPs=flops / min(peer_ms, peer_gms) / 1e9)
    if fp8:   # the other way of applying the scales, same run
        alt_name = "registers" if default.fp8_scales == "fold" else "fold"
        alt = choose_config(T, H, TOPK, torch.bfloat16, dev, fp8_scales=alt_name, kv_cache_dtype=kv_cache_dtype)
        try:
            agms, err = timer.graphed(timer.ours(alt)), ""
            alt = timer.fitted(alt)
        except Exception as e:  # noqa: BLE001  (e.g. out of shared memory everywhere down the chain)
            agms, err = float("nan"), type(e).__name__
        row.update(alt_fp8_scales=alt_name, alt_block_h=alt.block_h, alt_block_n=alt.block_n,
                   alt_graph_us=agms * 1e3, alt_error=err)
        row.update(speedups(row))
    if compare_launch:   # the launch before the device-derived plan, same inputs, same run
        from .launch_v3 import v3_config

        old = v3_config(T, H, TOPK, torch.bfloat16, dev, kv_cache_dtype=kv_cache_dtype)
        ogms = timer.graphed(timer.ours(old))
        old = timer.fitted(old)
        row.update(old_block_h=old.block_h, old_block_n=old.block_n, old_num_warps=old.num_warps,
                   old_num_splits=old.num_splits, old_graph_us=ogms * 1e3)
        row.update(speedups(row))
    return row


def _sweep_case(timer: _Timer, H: int, T: int, kv_cache_dtype: str, sweep_configs, peer_graph_us: float) -> list:
    """Graph-replay time of each swept configuration (decode configs at several split counts), exactly as asked."""
    import torch

    from ..kernels import choose_config

    grid = ([(c, S) for c in (sweep_configs or DECODE_SWEEP) for S in DECODE_SPLITS] if T <= 32
            else [(c, 1) for c in (sweep_configs or PREFILL_SWEEP)])
    rows = []
    for (bh, bn, dv, nw, ns), S in grid:
        try:
            cfg = choose_config(T, H, TOPK, torch.bfloat16, timer.q_nope.device, block_h=bh, block_n=bn,
                                block_dv=dv, num_warps=nw, num_stages=ns, num_splits=S,
                                kv_cache_dtype=kv_cache_dtype)
            t, err = timer.graphed(timer.ours(cfg, fallback=False)), ""
        except Exception as e:  # noqa: BLE001  (e.g. out of shared memory, a block_dv fp8 refuses)
            t, err = float("nan"), f"{type(e).__name__}"
        rows.append(dict(H=H, T=T, block_h=bh, block_n=bn, block_dv=dv, num_warps=nw, num_stages=ns,
                         num_splits=S, graph_us=t * 1e3, flashmla_graph_us=peer_graph_us, error=err))
    return rows


def plot_bench(df, env: dict, path: Path) -> None:
    """Speed-up over the peer and fraction of copy bandwidth, per head count, against T."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kv = env.get("kv_cache_dtype", "auto")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for H, g in df.groupby("H"):
        axes[0].plot(g["T"], g["speedup_vs_flashmla_graph"], marker="o", label=f"H={H}")
        axes[1].plot(g["T"], g["frac_of_copy_bw"], marker="o", label=f"H={H}")
    if not df["speedup_vs_flashmla_graph"].notna().any():     # no peer on this GPU (e.g. FlashMLA below SM90)
        axes[0].set_xlim(df["T"].min() / 2, df["T"].max() * 2)
        axes[0].text(0.5, 0.5, "peer not available on this GPU", ha="center", transform=axes[0].transAxes)
    axes[0].axhline(1.0, color="gray", lw=0.8)
    axes[0].set(xscale="log", xlabel="query tokens T", ylabel="FlashMLA time / Triton time (graph replay)",
                title=f"TRITON_MLA_SPARSE kernel vs {env.get('peer', PEER_NAME[kv]).split(' ')[0]}")
    axes[1].set(xscale="log", xlabel="query tokens T", ylabel="gathered bytes/s / copy bandwidth",
                title=f"achieved bandwidth (copy {env.get('copy_bandwidth_GBps')} GB/s)")
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    cache = "fp8_ds_mla (656 B/token)" if kv == "fp8_ds_mla" else "bf16"
    fig.suptitle(f"{env.get('gpu', '?')}, topk 2048, 128K-token {cache} cache; vllm {env.get('vllm')}, "
                 f"triton {env.get('triton')}, {env.get('date', '')[:10]}", fontsize=9)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110))
    plt.close(fig)
