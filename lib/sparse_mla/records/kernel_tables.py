"""Tables of the kernel benchmarks' records: the attention kernel against its peer (``bench_kernel_*.json``,
:mod:`sparse_mla.bench.kernel`) and the DSA indexer against DeepGEMM (``bench_indexer_*.json``,
:mod:`sparse_mla.bench.indexer`). Times are CUDA-graph medians (``*_graph_us``) as the record holds them."""
from __future__ import annotations

import math
from pathlib import Path

from ..errors import UserInputError, is_ascii_int
from .common import Table, check_args, fixed0, fixed1, fixed2, load, markdown, ratio, registry, sci, source, span

KERNEL = "kernel benchmark"
INDEXER = "indexer benchmark"


def _div(a, b):
    ok = all(isinstance(x, (int, float)) for x in (a, b)) and b
    return a / b if ok else None


#: metric -> (what it is, value of a bench row, format)
KERNEL_METRICS = {
    "peer": ("ours against the peer: the peer's time / ours (above 1: ours faster), `speedup_vs_flashmla_graph`",
             lambda r: r.get("speedup_vs_flashmla_graph"), ratio),
    "launch": ("the planned launch against the previous constants (`bench kernel --compare-launch`): previous time / "
               "planned time, `speedup_new_vs_old`", lambda r: r.get("speedup_new_vs_old"), ratio),
    "old-peer": ("the previous constants' launch against the peer, timed in the same run: `flashmla_graph_us` / "
                 "`old_graph_us` (computed here from the two times)",
                 lambda r: _div(r.get("flashmla_graph_us"), r.get("old_graph_us")), ratio),
    "alt": ("the default fp8 scale variant against the other one (`alt_*`): other time / default time, "
            "`speedup_default_vs_alt`", lambda r: r.get("speedup_default_vs_alt"), ratio),
    "copy": ("fraction of the measured copy bandwidth, `frac_of_copy_bw`", lambda r: r.get("frac_of_copy_bw"), fixed2),
    "us": ("our time, µs, `triton_graph_us`", lambda r: r.get("triton_graph_us"), fixed1),
    "peer-us": ("the peer's time, µs, `flashmla_graph_us`", lambda r: r.get("flashmla_graph_us"), fixed1),
    "tflops": ("our TFLOP/s, `triton_TFLOPs`", lambda r: r.get("triton_TFLOPs"), fixed0),
    "peer-tflops": ("the peer's TFLOP/s, `flashmla_TFLOPs`", lambda r: r.get("flashmla_TFLOPs"), fixed0),
}


def _bench(rec: dict, arg: str, kind: str) -> list[dict]:
    rows = [r for r in rec["bench"] if isinstance(r, dict)] if isinstance(rec["bench"], list) else []
    if not rows:
        raise UserInputError(f"record {arg!r} has no benchmark rows ('bench' is empty or not a list); accepted: a "
                             f"{kind} record")
    return rows


def _peer_line(rec: dict) -> list[str]:
    env = rec.get("environment") if isinstance(rec.get("environment"), dict) else {}
    return [f"Peer: {env['peer']}."] if env.get("peer") else []


def kernel_matrix(args: list[str], base: Path) -> str:
    """One metric of an attention-kernel benchmark (:data:`KERNEL_METRICS`, default ``peer``), heads ``H`` down,
    query tokens ``T`` across."""
    check_args(args, KERNEL_USAGE, 1, 2)
    metric = args[1] if len(args) > 1 else "peer"
    if metric not in KERNEL_METRICS:
        raise UserInputError(f"records table kernel: metric {metric!r} is unknown; accepted: "
                             f"{', '.join(KERNEL_METRICS)}")
    rec = load(args[0], base, KERNEL, ("bench",))
    what, value, form = KERNEL_METRICS[metric]
    rows = _bench(rec, args[0], KERNEL)
    cells = {(r.get("H"), r.get("T")): value(r) for r in rows}
    if all(v is None for v in cells.values()):
        raise UserInputError(f"record {args[0]!r} holds no {metric!r} figure ({what}); accepted: a metric its rows "
                             f"hold, of {', '.join(KERNEL_METRICS)}")
    heads = sorted({h for h, _ in cells if isinstance(h, int)})
    tokens = sorted({t for _, t in cells if isinstance(t, int)})
    body = [[h] + [form(cells.get((h, t))) for t in tokens] for h in heads]
    return markdown(["H"] + [f"T = {t}" for t in tokens], body,
                    [f"{what[0].upper()}{what[1:]}; CUDA-graph medians, topk {rows[0].get('topk')}, "
                     f"{rows[0].get('cache_tokens')} cache slots." +
                     "".join(" " + x for x in _peer_line(rec) if "peer" in metric),
                     "", f"Record: {source(args[0], rec)}"])


def _case_key(case: tuple) -> tuple:
    return tuple(x if isinstance(x, int) else -1 for x in case)


def kernel_cases(args: list[str], base: Path) -> str:
    """Chosen cases ``H:T`` of an attention-kernel benchmark: our time, the peer's, the ratio, the previous launch's
    time and the planned launch against it (where the record has them), copy bandwidth, TFLOP/s."""
    check_args(args, CASES_USAGE, 2)
    rec = load(args[0], base, KERNEL, ("bench",))
    by_case = {(r.get("H"), r.get("T")): r for r in _bench(rec, args[0], KERNEL)}
    cols = [("ours (µs)", "triton_graph_us", fixed1), ("peer (µs)", "flashmla_graph_us", fixed1),
            ("ours vs peer", "speedup_vs_flashmla_graph", ratio)]
    if any("old_graph_us" in r for r in by_case.values()):
        cols += [("previous launch (µs)", "old_graph_us", fixed1),
                 ("planned vs previous", "speedup_new_vs_old", ratio)]
    cols += [("copy bandwidth", "frac_of_copy_bw", fixed2), ("TFLOP/s ours", "triton_TFLOPs", fixed0),
             ("TFLOP/s peer", "flashmla_TFLOPs", fixed0)]
    body = []
    for case in args[1:]:
        h, _, t = case.partition(":")
        if not (is_ascii_int(h) and is_ascii_int(t)):
            raise UserInputError(f"records table kernel-cases: case {case!r} is not H:T; accepted: e.g. 64:32")
        r = by_case.get((int(h), int(t)))
        if r is None:
            raise UserInputError(f"record {args[0]!r} has no case H = {h}, T = {t}; accepted: "
                                 f"{', '.join(f'{a}:{b}' for a, b in sorted(by_case, key=_case_key))}")
        body.append([int(h), int(t)] + [form(r.get(key)) for _, key, form in cols])
    return markdown(["H", "T"] + [c for c, _, _ in cols], body,
                    ["CUDA-graph medians. " + " ".join(_peer_line(rec)), "", f"Record: {source(args[0], rec)}"])


def kernel_errors(args: list[str], base: Path) -> str:
    """The correctness checks of an attention-kernel benchmark: our kernel's and the peer's output error against the
    fp32 reference the benchmark computes (``reference_chunked``), over every checked case."""
    check_args(args, ERRORS_USAGE, 1, 1)
    rec = load(args[0], base, KERNEL, ("checks",))
    checks = [c for c in rec["checks"] if isinstance(c, dict)] if isinstance(rec["checks"], list) else []
    if not checks:
        raise UserInputError(f"record {args[0]!r} has no checks; accepted: a {KERNEL} record with 'checks' rows")
    body = [["ours", len(checks), span([c.get("out_rel_err") for c in checks], sci),
             span([c.get("lse_max_abs_err") for c in checks], sci), sum(int(c.get("nan") or 0) for c in checks)],
            ["peer", sum("flashmla_out_rel_err" in c for c in checks),
             span([c.get("flashmla_out_rel_err") for c in checks], sci),
             span([c.get("flashmla_lse_err_if_natural") for c in checks], sci), None]]
    return markdown(["kernel", "cases", "out: relative error", "lse: max abs error", "NaN outputs"], body,
                    ["Against the fp32 reference of the same inputs (relative Frobenius error of `out`; the peer's "
                     "lse read as a natural log). " + " ".join(_peer_line(rec)), "", f"Record: {source(args[0], rec)}"])


def _indexer_shape(r: dict) -> str:
    if r.get("kind") == "prefill":
        return f"M {r.get('M')} × N {r.get('N')}"
    return f"B {r.get('B')} × context {r.get('context')}, next_n {r.get('next_n')}"


def indexer_cases(args: list[str], base: Path) -> str:
    """Every case of an indexer benchmark: the Triton kernels against DeepGEMM's in the same run, and the SM80 code
    path (software e4m3, fp16 dots) where it was timed."""
    check_args(args, INDEXER_USAGE, 1, 1)
    rec = load(args[0], base, INDEXER, ("bench",))
    body = [[r.get("kind"), r.get("H"), _indexer_shape(r), fixed1(r.get("triton_us")), fixed1(r.get("deepgemm_us")),
             ratio(r.get("speed_vs_deepgemm")), fixed2(r.get("frac_of_copy_bw")), fixed0(r.get("triton_TFLOPs")),
             fixed0(r.get("deepgemm_TFLOPs")), fixed1(r.get("sm80_path_us"))] for r in _bench(rec, args[0], INDEXER)]
    return markdown(["kind", "H", "shape", "Triton (µs)", "DeepGEMM (µs)", "Triton vs DeepGEMM", "copy bandwidth",
                     "TFLOP/s Triton", "TFLOP/s DeepGEMM", "SM80 path (µs)"], body,
                    ["Triton vs DeepGEMM: DeepGEMM's time / ours (`speed_vs_deepgemm`); copy bandwidth for decode "
                     "only.",
                     "", f"Record: {source(args[0], rec)}"])


def indexer_targets(args: list[str], base: Path) -> str:
    """The targets an indexer benchmark judged itself by: goal, the range over its cases, cases that met it."""
    check_args(args, TARGETS_USAGE, 1, 1)
    rec = load(args[0], base, INDEXER, ("targets",))
    body = [[t.get("target"), fixed2(t.get("goal")), fixed2(t.get("min")), fixed2(t.get("max")),
             f"{t.get('met')} of {t.get('cases')}"] for t in rec["targets"] if isinstance(t, dict)]
    return markdown(["target", "goal", "min", "max", "cases that met it"], body, [f"Record: {source(args[0], rec)}"])


VARIANTS = "kernel-variants"
#: the variants of ``tools/gpu/fp8_where_time_goes.py``, in the order each adds a stage
VARIANT_ORDER = ("gather", "loads", "decode", "scores", "full", "flashmla")
def kernel_variants(args: list[str], base: Path) -> str:
    """Where an fp8_ds_mla launch's time goes (``tools/gpu/fp8_where_time_goes.py``): per case the planned tile and
    split count, each controlled variant's median time (µs), the full kernel's gathered bytes per second and
    FlashMLA's fp8 decode against it; the caption's topk, cache size and repeats are read from the record."""
    check_args(args, VARIANTS_USAGE, 1, 1)
    rec = load(args[0], base, VARIANTS, ("cases",))      # each case's fields checked (records.schema.VariantCase)
    cases = rec["cases"]
    body = []
    for c in cases:
        us, row8 = c["us"], 656
        gathered = c["T"] * c["topk"] * row8
        body.append([c["H"], c["T"], f"{c['block_h']}x{c['block_n']} w{c['num_warps']}", c["num_splits"],
                     *(fixed1(us.get(k)) for k in VARIANT_ORDER), fixed2(gathered / (us["loads"] * 1e-6) / 1e12),
                     fixed2(gathered / (us["full"] * 1e-6) / 1e12),
                     ratio(us["flashmla"] / us["full"]) if "flashmla" in us else None])
    reps = sorted({len(v) for c in cases for v in (c.get("us_repeats") or {}).values() if isinstance(v, list)})
    copy = rec.get("copy_bandwidth_TBps")
    what = (f"CUDA-graph medians of {'/'.join(map(str, reps)) or 'an unrecorded number of'} repeats in alternating "
            f"order, topk {'/'.join(map(str, sorted({c['topk'] for c in cases})))}, "
            f"{'/'.join(map(str, sorted({c['cache_tokens'] for c in cases})))}-slot fp8_ds_mla cache. ")
    return markdown(["H", "T", "tile", "splits", *(f"{k} (µs)" for k in VARIANT_ORDER), "loads TB/s", "full TB/s",
                     "FlashMLA / full"], body,
                    [what + "gather: `index_select` of the 656-byte rows (a copy); loads: the loop's loads only; "
                     "decode: + the e4m3 decode; scores: + the score dots and online softmax; full: the kernel as "
                     "launched (PV dots, re-read codes, split merge). TB/s: gathered bytes (T x topk x 656) per second"
                     + (f"; the device copy bandwidth was {fixed2(copy)} TB/s (read + written)."
                        if copy is not None else "."),
                     "", f"Record: {source(args[0], rec)}"])


SWEEP = "kernel-sweep"
#: the option sets of the sweep (``tools/gpu/fp8_where_time_goes.py`` ``SWEEP_OPTIONS``), as the record names them
SWEEP_OPTIONS = ("none", "VEC_SCALES", "KEEP_CODES", "KEEP_CODES+VEC_SCALES")


def kernel_sweep(args: list[str], base: Path) -> str:
    """The launch sweep of an fp8_ds_mla variants record: per case (H, T) the planned launch's time, the fastest launch
    of each option set (tile, warps, splits, µs, planned / it), and the fastest of all."""
    check_args(args, SWEEP_USAGE, 1, 1)
    rec = load(args[0], base, VARIANTS, ("sweep",))
    body = []
    for H, T in sorted({(r["H"], r["T"]) for r in rec["sweep"]}):
        rows = [r for r in rec["sweep"] if (r["H"], r["T"]) == (H, T) and not math.isnan(r["us"])]
        plan = next((r for r in rows if r["planned"]), None)
        cells = []
        for opt in SWEEP_OPTIONS:
            best = min((r for r in rows if r["options"] == opt), key=lambda r: r["us"], default=None)
            cells.append(None if best is None else
                         f"{best['block_h']}x{best['block_n']} w{best['num_warps']} s{best['num_splits']}: "
                         f"{fixed1(best['us'])}" + (f" ({ratio(plan['us'] / best['us'])})" if plan else ""))
        failed = sum(1 for r in rec["sweep"] if (r["H"], r["T"]) == (H, T) and math.isnan(r["us"]))
        body.append([H, T, None if plan is None else f"{plan['block_h']}x{plan['block_n']} w{plan['num_warps']} "
                     f"s{plan['num_splits']}: {fixed1(plan['us'])}", *cells, failed])
    return markdown(["H", "T", "planned (µs)", *(f"best {o} (µs, planned / it)" for o in SWEEP_OPTIONS),
                     "failed launches"], body,
                    ["CUDA-graph median of one pass per launch (the full kernel, split merge included), topk 2048; "
                     "tile = heads x keys, w = warps, s = splits; each option set's fastest launch over the swept "
                     "tiles and split counts (the planned one and twice it).", "", f"Record: {source(args[0], rec)}"])


KERNEL_USAGE = "kernel FILE [METRIC]"
SWEEP_USAGE = "kernel-sweep FILE"
VARIANTS_USAGE = "kernel-variants FILE"
CASES_USAGE = "kernel-cases FILE H:T [H:T ...]"
ERRORS_USAGE = "kernel-errors FILE"
INDEXER_USAGE = "indexer FILE"
TARGETS_USAGE = "indexer-targets FILE"

TABLES = registry(
    Table(KERNEL_USAGE, f"one metric of an attention-kernel benchmark, H x T ({', '.join(KERNEL_METRICS)})",
          kernel_matrix),
    Table(CASES_USAGE, "chosen cases of an attention-kernel benchmark, every figure of each", kernel_cases),
    Table(ERRORS_USAGE, "an attention-kernel benchmark's errors against the fp32 reference", kernel_errors),
    Table(INDEXER_USAGE, "every case of an indexer benchmark against DeepGEMM", indexer_cases),
    Table(TARGETS_USAGE, "the targets of an indexer benchmark", indexer_targets),
    Table(VARIANTS_USAGE, "where an fp8_ds_mla launch's time goes: controlled variants of the kernel",
          kernel_variants),
    Table(SWEEP_USAGE, "an fp8_ds_mla variants record's launch sweep: the planned launch against each option "
          "set's fastest", kernel_sweep),
)
