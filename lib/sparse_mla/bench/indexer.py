"""``sparse-mla bench indexer``: the Triton DSA indexer against DeepGEMM in the same run, on a CUDA GPU (written for
the lent H200, where DeepGEMM has kernels). A benchmark, not a test: it writes what it measured to ``results/``.

Cases (``index_n_heads`` 32 = GLM-5 unless ``heads`` says otherwise, ``index_head_dim`` 128, fresh random inputs):

* **decode**: paged logits (``fp8_fp4_paged_mqa_logits``) for ``B`` requests of ``context`` tokens each (all
  requests full, ``max_model_len = context``), ``next_n = 1``, plus one ``next_n = 2`` (MTP) case; the index cache
  written by vLLM's own ``indexer_k_quant_and_cache`` in 64-token blocks, physical blocks shuffled;
* **prefill**: ragged logits (``fp8_fp4_mqa_logits``) of ``M`` query tokens at the end of an ``N``-token prompt
  (windows ``[0, N - M + i + 1)``, as vLLM's prefill chunks are).

Per case: **check** -- our logits against DeepGEMM's (relative max error over the in-window entries) and against the
float64 reference on a few rows; **time** -- CUDA-graph medians (``triton.testing.do_bench_cudagraph``; DeepGEMM's
schedule metadata is built outside the timed region, as vLLM's metadata builder does once per step) of ours (the
device's fp8 path), of DeepGEMM and, for reference, of our SM80 operand path run on this GPU (``capability=(8, 0)``:
software e4m3 decode, fp16 dots; not an SM80 measurement; ``quick``: on the largest decode and prefill case only). Decode reports GB/s over the index-cache bytes read
(every block of every request: ``B * ceil(context / 64) * 64 * 132``) and its fraction of the measured copy
bandwidth (:func:`sparse_mla.bench.common.copy_bandwidth`); prefill reports TFLOP/s (``2 * H * 128`` per in-window
logit). Targets reported against: decode >= 0.7x DeepGEMM's speed (and >= 70 % of copy bandwidth), prefill >= 0.3x
DeepGEMM's speed. The record also holds the ahead-of-time sm_80 build of every kernel
(:func:`sparse_mla.kernels.indexer_build.build_report`): what an A100 would run.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..files import atomic_write, atomic_write_text, make_dir
from ..records import environment
from .common import copy_bandwidth, require_cuda

D, BS = 128, 64
DEV = "cuda"                                # a module constant so that the code paths can be dry-run elsewhere
HEADS = (32,)
BATCHES = (1, 32, 128)
CONTEXTS = (8192, 32768, 131072)
QUICK_CONTEXTS = (8192, 131072)
MTP_CASE = (32, 32768)                      # (B, context) timed with next_n = 2 as well
PREFILL = ((1024, 8192), (2048, 16384), (4096, 32768))
QUICK_PREFILL = ((1024, 8192), (4096, 32768))
DECODE_TARGET, PREFILL_TARGET, BW_TARGET = 0.7, 0.3, 0.7
# --sweep: prefill (block_m, block_n, warps, stages) and decode (splits factor, warps, stages)
PREFILL_SWEEP = ((None, 128, 8, 3), (None, 128, 8, 4), (None, 64, 4, 3), (None, 64, 8, 3), (None, 128, 4, 3),
                 ("half", 128, 8, 3))
DECODE_SWEEP = ((1, 4, 3), (2, 4, 3), (4, 4, 3), (1, 4, 4), (1, 8, 3), (2, 4, 2))
#: Each speed a row holds as the times it divides: ``{speed: (DeepGEMM's µs, ours µs)}`` (graph-replay medians).
SPEEDUPS = {"speed_vs_deepgemm": ("deepgemm_us", "triton_us")}


def speedups(row: dict) -> dict:
    """The :data:`SPEEDUPS` whose two times ``row`` holds, ``{speed: DeepGEMM's µs / ours}`` (NaN where a time is
    NaN); the writer's and ``records check``'s one formula (:func:`sparse_mla.bench.common.time_ratios`)."""
    from .common import time_ratios

    return time_ratios(row, SPEEDUPS)


def _deep_gemm():
    import vllm.utils.deep_gemm as dg

    dg._lazy_init()
    if dg._fp8_fp4_mqa_logits_impl is None or dg._fp8_fp4_paged_mqa_logits_impl is None:
        return None
    return dg


def decode_inputs(B: int, context: int, next_n: int, H: int, seed: int = 0):
    """Fresh decode inputs on the GPU: q codes ``[B, next_n, H, 128]``, the paged index cache (vLLM's writer),
    weights, 2-D context lengths (token j sees ``context - next_n + 1 + j`` keys), a shuffled block table."""
    torch = require_cuda()
    from vllm import _custom_ops as ops

    g = torch.Generator(device=DEV).manual_seed(seed)
    nblk = -(-context // BS)
    num_blocks = B * nblk
    kv = torch.empty(num_blocks, BS, D + 4, dtype=torch.uint8, device=DEV)
    chunk = 1 << 20                                          # tokens per write (bounds the bf16 keys in memory)
    for t0 in range(0, num_blocks * BS, chunk):
        n = min(chunk, num_blocks * BS - t0)
        k = torch.randn(n, D, device=DEV, generator=g, dtype=torch.bfloat16)
        ops.indexer_k_quant_and_cache(k, kv, torch.arange(t0, t0 + n, device=DEV), D, "ue8m0")
    block_table = torch.randperm(num_blocks, device=DEV, generator=g).reshape(B, nblk).to(torch.int32)
    q = (torch.randn(B, next_n, H, D, device=DEV, generator=g) * 2).to(torch.float8_e4m3fn)
    w = torch.randn(B * next_n, H, device=DEV, generator=g) * H ** -0.5
    ctx = torch.full((B, next_n), context, dtype=torch.int32, device=DEV)
    ctx -= (next_n - 1 - torch.arange(next_n, device=DEV, dtype=torch.int32))[None, :]
    return q, kv.unsqueeze(-2), w, ctx.contiguous(), block_table


def prefill_inputs(M: int, N: int, H: int, seed: int = 0):
    """Fresh prefill inputs: q ``[M, H, 128]``, keys ``[N, 128]`` (e4m3), power-of-two key scales, weights, causal
    windows of the last ``M`` tokens of an ``N``-token prompt."""
    torch = require_cuda()
    g = torch.Generator(device=DEV).manual_seed(seed)
    q = (torch.randn(M, H, D, device=DEV, generator=g) * 2).to(torch.float8_e4m3fn)
    k = (torch.randn(N, D, device=DEV, generator=g) * 2).to(torch.float8_e4m3fn)
    k_scale = torch.exp2(torch.randint(-9, -3, (N,), device=DEV, generator=g).float())
    w = torch.randn(M, H, device=DEV, generator=g) * H ** -0.5
    ks = torch.zeros(M, dtype=torch.int32, device=DEV)
    ke = torch.arange(N - M + 1, N + 1, dtype=torch.int32, device=DEV)
    return q, k, k_scale, w, ks, ke


def _rel(ours, theirs, win) -> float:
    return ((ours[win] - theirs[win]).abs().max() / theirs[win].abs().max().clamp_min(1e-30)).item()


def cases(heads=HEADS, batches=BATCHES, contexts=None, prefill=None, quick: bool = False):
    """The cases :func:`run_bench` times, in its order: decode ``(H, B, context, next_n)`` for every head count,
    batch and context (``contexts`` default :data:`CONTEXTS`, :data:`QUICK_CONTEXTS` with ``quick``) and the MTP case
    (:data:`MTP_CASE`, ``next_n`` 2) per head count; prefill ``(H, M, N)`` for every head count and shape (default
    :data:`PREFILL`, :data:`QUICK_PREFILL` with ``quick``). Returns ``(decode, prefill)`` lists."""
    contexts = tuple(contexts or (QUICK_CONTEXTS if quick else CONTEXTS))
    prefill = tuple(prefill or (QUICK_PREFILL if quick else PREFILL))
    decode = [(H, B, L, 1) for H in heads for B in batches for L in contexts] + [(H, *MTP_CASE, 2) for H in heads]
    return decode, [(H, M, N) for H in heads for M, N in prefill]


def run_bench(heads=HEADS, batches=BATCHES, contexts=None, prefill=None, *, quick: bool = False,
              sweep: bool = False, check: bool = True, out_dir: Path | str | None = None,
              tag: str | None = None) -> dict:
    """Check and time every case; write ``bench_indexer_<tag>.{csv,json,png}`` (and ``bench_indexer_sweep_<tag>.csv``
    with ``sweep``) to ``out_dir``. Raises :class:`UserInputError` without a CUDA GPU or without DeepGEMM."""
    torch = require_cuda()
    import pandas as pd
    import triton

    from ..errors import UserInputError
    from ..kernels.indexer_build import build_report_subprocess
    from ..records import gpu_record_dir, gpu_slug

    dg = _deep_gemm()
    if dg is None:
        raise UserInputError("DeepGEMM's indexer kernels are not available in this vLLM (the benchmark's peer); "
                             "accepted: a GPU where vLLM's DeepGEMM runs (SM90/100/120)")
    decode_cases, prefill_cases = cases(heads, batches, contexts, prefill, quick)
    tag = gpu_slug() if tag is None else tag
    out_dir = gpu_record_dir() if out_dir is None else Path(out_dir)
    make_dir(out_dir)
    env = environment()
    bw = copy_bandwidth()
    env["copy_bandwidth_GBps"] = round(bw / 1e9, 1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 8
    rep = 20 if quick else 100

    def graphed(fn) -> float:
        return triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median")

    rows, sweep_rows = [], []
    plain = [c for c in decode_cases if c[3] == 1]             # the largest batch and context: a case of the product
    big_decode, big_prefill = (max(c[1] for c in plain), max(c[2] for c in plain)), max(c[1:] for c in prefill_cases)
    for i, (H, B, L, nn) in enumerate(decode_cases):
        sm80 = not quick or ((B, L) == big_decode and nn == 1)     # --quick: the SM80 path on the largest case only
        row, swept = _decode_case(dg, H, B, L, nn, seed=i, sm80=sm80, check=check, sweep=sweep, graphed=graphed,
                                  bw=bw, sms=sms)
        rows.append(row)
        sweep_rows += swept
        torch.cuda.empty_cache()
    for i, (H, M, N) in enumerate(prefill_cases):
        sm80 = not quick or (M, N) == big_prefill
        row, swept = _prefill_case(dg, H, M, N, seed=100 + i, sm80=sm80, check=check, sweep=sweep, graphed=graphed)
        rows.append(row)
        sweep_rows += swept
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    record = {"environment": env, "bench": rows, "targets": targets(df),
              "sm80_build": build_report_subprocess(capabilities=[(8, 0)])}
    atomic_write_text(out_dir / f"bench_indexer_{tag}.json", json.dumps(record, indent=1))
    atomic_write_text(out_dir / f"bench_indexer_{tag}.csv", df.to_csv(index=False))
    if sweep:
        atomic_write_text(out_dir / f"bench_indexer_sweep_{tag}.csv", pd.DataFrame(sweep_rows).to_csv(index=False))
    plot_bench(df, env, out_dir / f"bench_indexer_{tag}.png")
    return record


def _decode_case(dg, H, B, L, nn, *, seed, sm80, check, sweep, graphed, bw, sms):
    """One decode case: ``(row, sweep rows)``."""
    import torch

    from ..kernels import reference as ref
    from ..kernels.indexer import indexer_logits_paged, paged_config

    q, kv, w, ctx, bt = decode_inputs(B, L, nn, H, seed=seed)
    sched = dg.get_paged_mqa_logits_metadata(ctx, BS, sms)

    def ours(cap=None, **cfg):
        return indexer_logits_paged(q, kv, w, ctx, bt, L, capability=cap, **cfg)

    def peer():
        return dg.fp8_fp4_paged_mqa_logits((q, None), kv, w, ctx, bt, sched, L, clean_logits=False)

    row = dict(kind="decode", H=H, B=B, context=L, next_n=nn, M=None, N=None)
    if check:
        a, b = ours(), peer()
        win = torch.arange(L, device=DEV)[None, :] < ctx.reshape(-1)[:, None]
        r = ref.indexer_logits_paged_ref(q[:1], kv, w[:nn], ctx[:1], bt[:1], L)
        row.update(rel_err_vs_deepgemm=_rel(a, b, win), rel_err_vs_ref=_rel(a[:nn], r, win[:nn]))
        if sm80:
            row["sm80_path_rel_err_vs_deepgemm"] = _rel(ours((8, 0)), b, win)
    t, tp = graphed(ours), graphed(peer)
    t80 = graphed(lambda: ours((8, 0))) if sm80 else float("nan")
    nbytes = B * -(-L // BS) * BS * (D + 4)
    flops = 2 * H * D * int(ctx.sum())
    row.update(triton_us=t * 1e3, deepgemm_us=tp * 1e3, sm80_path_us=t80 * 1e3)
    row.update(speedups(row))
    row.update(triton_GBps=nbytes / t / 1e6, deepgemm_GBps=nbytes / tp / 1e6,
               frac_of_copy_bw=nbytes / (t * 1e-3) / bw, triton_TFLOPs=flops / t / 1e9,
               deepgemm_TFLOPs=flops / tp / 1e9, splits=paged_config(B, nn, H, BS, L, q.device, None).splits)
    swept = []
    for f, nw, ns in (DECODE_SWEEP if sweep else ()):
        try:
            ts, err = graphed(lambda: ours(splits=row["splits"] * f, num_warps=nw, num_stages=ns)), ""
        except Exception as e:  # noqa: BLE001 (e.g. out of resources)
            ts, err = float("nan"), type(e).__name__
        swept.append(dict(kind="decode", H=H, B=B, context=L, next_n=nn, splits=row["splits"] * f, num_warps=nw,
                          num_stages=ns, graph_us=ts * 1e3, deepgemm_us=tp * 1e3, error=err))
    return row, swept


def _prefill_case(dg, H, M, N, *, seed, sm80, check, sweep, graphed):
    """One prefill case: ``(row, sweep rows)``."""
    import torch

    from ..kernels import reference as ref
    from ..kernels.indexer import indexer_logits_prefill, prefill_config

    q, k, k_scale, w, ks, ke = prefill_inputs(M, N, H, seed=seed)

    def ours(cap=None, **cfg):
        return indexer_logits_prefill(q, k, k_scale, w, ks, ke, capability=cap, **cfg)

    def peer():
        return dg.fp8_fp4_mqa_logits((q, None), (k, k_scale), w, ks, ke, clean_logits=False)

    row = dict(kind="prefill", H=H, B=None, context=None, next_n=None, M=M, N=N)
    if check:
        a, b = ours(), peer()
        n = torch.arange(N, device=DEV)
        win = (n[None, :] >= ks[:, None]) & (n[None, :] < ke[:, None])
        r = ref.indexer_logits_prefill_ref(q[-4:], k, k_scale, w[-4:], ks[-4:], ke[-4:])
        row.update(rel_err_vs_deepgemm=_rel(a, b, win), rel_err_vs_ref=_rel(a[-4:], r, win[-4:]))
        if sm80:
            row["sm80_path_rel_err_vs_deepgemm"] = _rel(ours((8, 0)), b, win)
    t, tp = graphed(ours), graphed(peer)
    t80 = graphed(lambda: ours((8, 0))) if sm80 else float("nan")
    flops = 2 * H * D * int((ke - ks).sum())
    cfg = prefill_config(M, N, H, q.device, None)
    row.update(triton_us=t * 1e3, deepgemm_us=tp * 1e3, sm80_path_us=t80 * 1e3)
    row.update(speedups(row))
    row.update(triton_TFLOPs=flops / t / 1e9, deepgemm_TFLOPs=flops / tp / 1e9,
               sm80_path_TFLOPs=flops / t80 / 1e9, splits=cfg.splits)
    swept = []
    for bm, bn, nw, ns in (PREFILL_SWEEP if sweep else ()):
        bm = max(1, cfg.block_m // 2) if bm == "half" else bm
        try:
            ts, err = graphed(lambda: ours(block_m=bm, block_n=bn, num_warps=nw, num_stages=ns)), ""
        except Exception as e:  # noqa: BLE001 (e.g. out of shared memory or registers)
            ts, err = float("nan"), type(e).__name__
        swept.append(dict(kind="prefill", H=H, M=M, N=N, block_m=bm or cfg.block_m, block_n=bn, num_warps=nw,
                          num_stages=ns, graph_us=ts * 1e3, deepgemm_us=tp * 1e3, TFLOPs=flops / ts / 1e9,
                          error=err))
    return row, swept


def targets(df) -> list[dict]:
    """The targets against the measured rows: decode speed >= 0.7x DeepGEMM and >= 70 % of copy bandwidth, prefill
    speed >= 0.3x DeepGEMM; per target the range measured and how many cases meet it."""
    out = []
    for label, sel, col, goal in (("decode: speed vs DeepGEMM", df.kind == "decode", "speed_vs_deepgemm",
                                   DECODE_TARGET),
                                  ("decode: fraction of copy bandwidth", df.kind == "decode", "frac_of_copy_bw",
                                   BW_TARGET),
                                  ("prefill: speed vs DeepGEMM", df.kind == "prefill", "speed_vs_deepgemm",
                                   PREFILL_TARGET)):
        s = df[sel][col]
        if len(s):
            out.append(dict(target=label, goal=goal, min=float(s.min()), max=float(s.max()),
                            met=int((s >= goal).sum()), cases=int(len(s))))
    return out


def plot_bench(df, env: dict, path: Path) -> None:
    """Decode: fraction of copy bandwidth (ours, DeepGEMM) against context per batch; prefill: TFLOP/s per shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bw = env.get("copy_bandwidth_GBps") or float("nan")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    dec = df[(df.kind == "decode") & (df.next_n == 1)]
    for (H, B), g in dec.groupby(["H", "B"]):
        line, = axes[0].plot(g["context"], g["frac_of_copy_bw"], marker="o", label=f"Triton H={H} B={int(B)}")
        axes[0].plot(g["context"], g["deepgemm_GBps"] / bw, marker="x", ls="--",
                     color=line.get_color(), label=f"DeepGEMM H={H} B={int(B)}")
    axes[0].axhline(BW_TARGET, color="gray", lw=0.8)
    axes[0].set(xscale="log", xlabel="context tokens", ylabel="index-cache bytes/s / copy bandwidth",
                title=f"paged decode logits (next_n 1; copy {bw} GB/s)")
    pre = df[df.kind == "prefill"]
    labels = [f"H={r.H}\n{int(r.M)}x{int(r.N)}" for r in pre.itertuples()]
    x = range(len(pre))
    axes[1].bar([i - 0.2 for i in x], pre["triton_TFLOPs"], width=0.4, label="Triton (fp8)")
    axes[1].bar([i + 0.2 for i in x], pre["deepgemm_TFLOPs"], width=0.4, label="DeepGEMM")
    axes[1].set_xticks(list(x), labels)
    axes[1].set(ylabel="TFLOP/s", title="prefill logits (M queries x N keys, causal windows)")
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"TRITON_DSA_INDEXER vs DeepGEMM on {env.get('gpu', '?')}; vllm {env.get('vllm')}, triton "
                 f"{env.get('triton')}, {env.get('date', '')[:10]}", fontsize=9)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110))
    plt.close(fig)
