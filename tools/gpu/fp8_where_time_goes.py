"""Where the fp8_ds_mla kernel's time goes at 8-16 heads (maintainers' harness for issue 35, item 1; not product
code): controlled variants of the "fold" kernel's loop, a launch-configuration sweep, the gather ceiling and
FlashMLA's fp8 decode, all on the same inputs in one process, CUDA-graph medians, repeats in alternating order.

    python3 tools/gpu/fp8_where_time_goes.py OUT.json [--quick]      # a GPU; writes one record
    python3 tools/gpu/fp8_where_time_goes.py --ncu-case H T          # one planned launch, for ncu to profile

The variants (same grid, same split count, same tile as the planned launch; each program stores one float so that
nothing is dead code):

* ``gather``: a copy of the gathered 656-byte rows (``torch.index_select`` on ``[slots, 656]`` uint8, bytes read +
  written counted): what a plain gather of these rows achieves on this GPU;
* ``loads``: the loop's loads only -- slots, the four 128-byte code tiles, the four scales, the 128-byte rope --
  summed as integers/floats elementwise into registers;
* ``decode``: ``loads`` + the e4m3 decode of the codes into the dot dtype (:func:`sparse_mla.kernels.attention.
  _e4m3_tile`, as the kernel does it);
* ``scores``: the kernel's score dots and online softmax (:func:`_fold_scores`, :func:`_softmax_step`), no PV;
* ``full``: the production kernel (``launch`` with the planned config), the split merge included.

Then a sweep of the full kernel (:data:`SWEEP_TILES` x :data:`SWEEP_OPTIONS`: the fold kernel's options under
measurement, codes kept for the PV dots and one 16-byte scale load; `results/h200/KERNEL_NOTES.md`, 2026-12-04).

Differences between successive variants place the time: memory (``loads``), conversion (``decode - loads``), score
dots (``scores - decode``), the PV re-read + dots + merge (``full - scores``).
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

import torch
import triton
import triton.language as tl

from sparse_mla.kernels.attention import _e4m3_tile, _fold_scores, _softmax_step
from sparse_mla.layouts import (FP8_DS_MLA_ROPE_BF16, FP8_DS_MLA_ROW_BF16, FP8_DS_MLA_ROW_BYTES, FP8_DS_MLA_ROW_F32,
                                FP8_DS_MLA_SCALES_F32)

STAGES = {"loads": 0, "decode": 1, "scores": 2}


@triton.jit
def _variant_kernel(Q_nope, Q_pe, KV, KV_f32, KV_bf16, Idx, Sink, sm_scale_log2, TOPK, CHUNK,
                    stride_qn_t, stride_qn_h, stride_qp_t, stride_qp_h, stride_idx_t, H,
                    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr, FP8_HW: tl.constexpr,
                    ROW8: tl.constexpr, ROWF: tl.constexpr, SCF: tl.constexpr, ROWB: tl.constexpr,
                    ROPEB: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    s = tl.program_id(2)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    offs_dr = tl.arange(0, 64)
    q_row = Q_nope + t * stride_qn_t + offs_h[:, None] * stride_qn_h + tl.arange(0, 128)[None, :]
    q0 = tl.load(q_row, mask=mask_h[:, None], other=0.0).to(tl.bfloat16)
    q1 = tl.load(q_row + 128, mask=mask_h[:, None], other=0.0).to(tl.bfloat16)
    q2 = tl.load(q_row + 256, mask=mask_h[:, None], other=0.0).to(tl.bfloat16)
    q3 = tl.load(q_row + 384, mask=mask_h[:, None], other=0.0).to(tl.bfloat16)
    q_pe = tl.load(Q_pe + t * stride_qp_t + offs_h[:, None] * stride_qp_h + offs_dr[None, :], mask=mask_h[:, None],
                   other=0.0).to(tl.bfloat16)
    start = s * CHUNK
    end = tl.minimum(start + CHUNK, TOPK)
    acc_i = tl.zeros([BLOCK_N, 128], dtype=tl.int32)
    acc_f = tl.zeros([BLOCK_N, 128], dtype=tl.float32)
    acc_r = tl.zeros([BLOCK_N, 64], dtype=tl.float32)
    acc_s = tl.zeros([BLOCK_N], dtype=tl.float32)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        slot = tl.load(Idx + t * stride_idx_t + offs_n, mask=offs_n < end, other=-1)
        valid = slot >= 0
        slot64 = slot.to(tl.int64)
        row8 = KV + slot64[:, None] * ROW8
        rowf = KV_f32 + slot64 * ROWF + SCF
        rope = KV_bf16 + slot64[:, None] * ROWB + ROPEB + offs_dr[None, :]
        if STAGE == 0:
            cols = tl.arange(0, 128)[None, :]
            k = (tl.load(row8 + cols, mask=valid[:, None], other=0).to(tl.int32)
                 + tl.load(row8 + 128 + cols, mask=valid[:, None], other=0).to(tl.int32)
                 + tl.load(row8 + 256 + cols, mask=valid[:, None], other=0).to(tl.int32)
                 + tl.load(row8 + 384 + cols, mask=valid[:, None], other=0).to(tl.int32))
            acc_i += k
        elif STAGE == 1:
            k = (_e4m3_tile(row8, 0, valid, tl.bfloat16, FP8_HW).to(tl.float32)
                 + _e4m3_tile(row8, 128, valid, tl.bfloat16, FP8_HW).to(tl.float32)
                 + _e4m3_tile(row8, 256, valid, tl.bfloat16, FP8_HW).to(tl.float32)
                 + _e4m3_tile(row8, 384, valid, tl.bfloat16, FP8_HW).to(tl.float32))
            acc_f += k
        if STAGE < 2:
            acc_s += (tl.load(rowf, mask=valid, other=0.0) + tl.load(rowf + 1, mask=valid, other=0.0)
                      + tl.load(rowf + 2, mask=valid, other=0.0) + tl.load(rowf + 3, mask=valid, other=0.0))
            acc_r += tl.load(rope, mask=valid[:, None], other=0.0).to(tl.float32)
        else:
            qk, sc0, sc1, sc2, sc3 = _fold_scores(q_pe, q0, q1, q2, q3, row8, rowf, rope, valid, tl.bfloat16, False,
                                                  FP8_HW)
            p, alpha, m_i, l_i = _softmax_step(qk, valid, m_i, l_i, sm_scale_log2)
            acc_s += tl.sum(p, 0) * (sc0 + sc1 + sc2 + sc3)
    total = (tl.sum(tl.sum(acc_i.to(tl.float32), 1) + tl.sum(acc_f, 1) + tl.sum(acc_r, 1) + acc_s, 0)
             + tl.sum(l_i, 0))
    pid = (tl.program_id(0) * tl.num_programs(1) + hb) * tl.num_programs(2) + s
    tl.store(Sink + pid, total)


def variant_fn(stage: str, q_nope, q_pe, kv, idx, cfg, sink):
    T, H = q_pe.shape[:2]
    topk = idx.shape[1]
    S = cfg.num_splits
    chunk = triton.cdiv(triton.cdiv(topk, S), cfg.block_n) * cfg.block_n
    S = triton.cdiv(topk, chunk)
    grid = (T, triton.cdiv(H, cfg.block_h), S)
    scale = (192 + 64) ** -0.5 * 1.4426950408889634

    def fn():
        _variant_kernel[grid](q_nope, q_pe, kv, kv.view(torch.float32), kv.view(torch.bfloat16), idx, sink, scale,
                              topk, chunk, q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
                              idx.stride(0), H, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, STAGE=STAGES[stage],
                              FP8_HW=cfg.fp8_hw, ROW8=FP8_DS_MLA_ROW_BYTES, ROWF=FP8_DS_MLA_ROW_F32,
                              SCF=FP8_DS_MLA_SCALES_F32, ROWB=FP8_DS_MLA_ROW_BF16, ROPEB=FP8_DS_MLA_ROPE_BF16,
                              num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return fn


def graphed_ms(fn, rep_ms: int) -> float:
    return triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")


def case_fns(H: int, T: int, cache_tokens: int, seed: int):
    """``(config, {name: fn})`` for one case: the planned launch, its variants, the gather copy and FlashMLA."""
    from sparse_mla.bench.kernel import GLM5_SCALE, flashmla_fp8_peer, make_inputs
    from sparse_mla.kernels import choose_config, launch

    q_nope, q_pe, kv, idx = make_inputs(T, H, cache_tokens, seed=seed, kv_cache_dtype="fp8_ds_mla")
    cfg = choose_config(T, H, idx.shape[1], torch.bfloat16, q_nope.device, kv_cache_dtype="fp8_ds_mla")
    out = torch.empty(T, H, 512, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(T, H, device="cuda")
    S = cfg.num_splits
    sink = torch.empty(T * triton.cdiv(H, cfg.block_h) * max(S, 1) + 1024, device="cuda")
    rows = kv.view(-1, FP8_DS_MLA_ROW_BYTES)
    flat = idx.reshape(-1).long()
    gathered = torch.empty(flat.numel(), FP8_DS_MLA_ROW_BYTES, dtype=torch.uint8, device="cuda")
    fns = {"gather": lambda: torch.index_select(rows, 0, flat, out=gathered)}
    fns.update({k: variant_fn(k, q_nope, q_pe, kv, idx, cfg, sink) for k in STAGES})
    fns["full"] = lambda: launch(q_nope, q_pe, kv, idx, GLM5_SCALE, out, lse, cfg)
    peer, _ = flashmla_fp8_peer(q_nope, q_pe, kv, idx, GLM5_SCALE)
    if peer is not None:
        fns["flashmla"] = peer
    return cfg, fns, (q_nope, q_pe, kv, idx, out, lse)


def time_case(H: int, T: int, cache_tokens: int, repeats: int, rep_ms: int) -> dict:
    cfg, fns, _ = case_fns(H, T, cache_tokens, seed=H * 100 + T)
    for fn in fns.values():     # compile everything before any timing
        fn()
    torch.cuda.synchronize()
    names = list(fns)
    times = {k: [] for k in names}
    for r in range(repeats):    # alternating order: forward, then backward, ...
        for k in (names if r % 2 == 0 else names[::-1]):
            times[k].append(graphed_ms(fns[k], rep_ms) * 1e3)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    gathered = T * 2048 * FP8_DS_MLA_ROW_BYTES
    row = dict(H=H, T=T, topk=2048, cache_tokens=cache_tokens, block_h=cfg.block_h, block_n=cfg.block_n,
               num_splits=cfg.num_splits, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
               fp8_scales=cfg.fp8_scales, fp8_hw=cfg.fp8_hw, us=med, us_repeats=times,
               gathered_TBps={k: gathered / (v * 1e-6) / 1e12 for k, v in med.items() if k != "gather"},
               gather_copy_TBps=2 * gathered / (med["gather"] * 1e-6) / 1e12)
    if "flashmla" in med:
        row["flashmla_over_full"] = med["flashmla"] / med["full"]
    return row


#: (block_n, num_warps) x the fold kernel's options under measurement (launcher.FP8_OPTIONS), at the planned tile
#: height; AOT sm_90 (2026-12-04): 16x32 w4 168 registers / 55 KB shared, w8 128 / 55 KB; KEEP_CODES 255 (24 bytes
#: stack) / 30 KB at w4, 177 / 30 KB at w8; KEEP_CODES + VEC_SCALES 255 / 30 KB at w4 (no stack), 178 at w8
SWEEP_TILES = ((32, 4), (32, 8), (16, 4), (16, 8), (64, 8))
SWEEP_OPTIONS = ({}, {"VEC_SCALES": True}, {"KEEP_CODES": True}, {"KEEP_CODES": True, "VEC_SCALES": True})


def sweep_case(H: int, T: int, cache_tokens: int, rep_ms: int) -> list[dict]:
    """Every (block_n, warps) of :data:`SWEEP_TILES` with every option set of :data:`SWEEP_OPTIONS`, fold scales, at
    the planned tile height and at the planned split count and twice it: graph-replay medians of the full kernel (one
    pass each; the planned launch is the row with ``planned``)."""
    from sparse_mla.bench.kernel import GLM5_SCALE
    from sparse_mla.kernels import choose_config, launch

    _, _, (q_nope, q_pe, kv, idx, out, lse) = case_fns(H, T, cache_tokens, seed=H * 100 + T + 1)
    plan = choose_config(T, H, 2048, torch.bfloat16, q_nope.device, kv_cache_dtype="fp8_ds_mla")
    rows = []
    for (bn, nw) in SWEEP_TILES:
        for opts in SWEEP_OPTIONS:
            for S in sorted({plan.num_splits, plan.num_splits * 2}):
                try:
                    cfg = choose_config(T, H, 2048, torch.bfloat16, q_nope.device, kv_cache_dtype="fp8_ds_mla",
                                        block_h=plan.block_h, block_n=bn, num_warps=nw, num_splits=S,
                                        fp8_scales="fold")
                    fn = lambda cfg=cfg, o=opts: launch(q_nope, q_pe, kv, idx, GLM5_SCALE, out,  # noqa: E731
                                                        lse, cfg, fallback=False, fp8_options=o)
                    fn()
                    us, err = graphed_ms(fn, rep_ms) * 1e3, ""
                except Exception as e:  # noqa: BLE001
                    us, err = float("nan"), f"{type(e).__name__}: {str(e)[:80]}"
                rows.append(dict(H=H, T=T, block_h=plan.block_h, block_n=bn, num_warps=nw, num_splits=S,
                                 options="+".join(k for k, v in opts.items() if v) or "none", us=us, error=err,
                                 planned=(bn, nw, S, plan.fp8_scales, bool(opts)) ==
                                 (plan.block_n, plan.num_warps, plan.num_splits, "fold", False)))
    return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["--ncu-case"]:    # the planned launch, then codes kept + one scale load at 8 warps
        from sparse_mla.bench.kernel import GLM5_SCALE
        from sparse_mla.kernels import launch

        H, T = int(argv[1]), int(argv[2])
        cfg, fns, (q_nope, q_pe, kv, idx, out, lse) = case_fns(H, T, 131072, seed=1)
        fns["full"]()
        launch(q_nope, q_pe, kv, idx, GLM5_SCALE, out, lse, replace(cfg, num_warps=8), fallback=False,
               fp8_options={"KEEP_CODES": True, "VEC_SCALES": True})
        torch.cuda.synchronize()
        return 0
    from sparse_mla.bench.common import copy_bandwidth
    from sparse_mla.records import environment

    out, quick = argv[0], "--quick" in argv
    rec = {"what": "fp8_ds_mla kernel at 8-16 heads: controlled variants, sweep, gather ceiling, FlashMLA fp8 decode "
                   "(tools/gpu/fp8_where_time_goes.py)",
           "environment": environment(" ".join(["python3", "tools/gpu/fp8_where_time_goes.py", *argv])),
           "copy_bandwidth_TBps": copy_bandwidth() / 1e12, "cases": [], "sweep": []}
    t0 = time.time()
    for H in (8, 16):
        for T in ((1, 128) if quick else (1, 4, 128, 512)):
            row = time_case(H, T, 131072, repeats=3, rep_ms=60 if quick else 120)
            rec["cases"].append(row)
            print(f"H={H:3d} T={T:4d} S={row['num_splits']:3d} {row['block_h']}x{row['block_n']} w{row['num_warps']} "
                  + " ".join(f"{k}={v:8.1f}us" for k, v in row["us"].items())
                  + f" full={row['gathered_TBps']['full']:.2f}TB/s gather_copy={row['gather_copy_TBps']:.2f}TB/s",
                  flush=True)
            _write(out, rec)
    for H, T in ((8, 128), (8, 512), (16, 4)) if not quick else ((8, 128),):
        rec["sweep"] += sweep_case(H, T, 131072, rep_ms=40)
        best = min((r for r in rec["sweep"] if r["H"] == H and r["T"] == T and r["us"] == r["us"]),
                   key=lambda r: r["us"])
        plan = [r for r in rec["sweep"] if r["H"] == H and r["T"] == T and r["planned"]]
        print(f"sweep H={H} T={T}: best {best}; planned {plan[:1]}", flush=True)
        _write(out, rec)
    rec["wall_s"] = round(time.time() - t0, 1)
    _write(out, rec)
    return 0


def _write(path: str, rec: dict) -> None:
    from sparse_mla.files import atomic_write_text

    atomic_write_text(path, json.dumps(rec, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
