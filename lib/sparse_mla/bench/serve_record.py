"""The serving benchmark's record files: ``bench_serve_<tag>.json`` (the record as :mod:`sparse_mla.bench.serve`
builds it), ``.csv`` (one row per run: each ranked metric's min / median / max over repeats, agreement, acceptance)
and ``.png`` (those metrics per run: bar = median over repeats, whiskers = min..max, dots = the repeats), each
written atomically."""
from __future__ import annotations

import json
from pathlib import Path

from ..files import atomic_write, atomic_write_text
from .ranking import METRICS

CSV_COLUMNS = ("run", "backend_requested", "indexer", "kv_cache_dtype", "speculative", "cuda_graphs",
               "repeats_with_result", "failed_requests",
               *(f"{m}_{f}" for m in METRICS for f in ("min", "median", "max")),
               "spec_decode_acceptance_rate_median", "spec_decode_acceptance_length_median", "server_up_s_median",
               "identical_vs_baseline", "identical_vs_plain", "identical_across_repeats", "ran_contradictions",
               "error")


def _frac(a: dict | None) -> str | None:
    return f"{a['identical']}/{a['compared']}" if a else None


def csv_rows(rec: dict) -> list[dict]:
    """One row per run of ``rec`` (:data:`CSV_COLUMNS`); agreement as ``identical/compared`` over its repeats."""
    rows = []
    for key, r in rec["runs"].items():
        s = r.get("summary") or {}
        g = lambda k, f: (s.get(k) or {}).get(f)  # noqa: E731
        across = r.get("agreement_across_repeats") or []
        rows.append({
            "run": key, "backend_requested": r.get("backend_requested"), "indexer": r.get("indexer"),
            "kv_cache_dtype": r.get("kv_cache_dtype"),
            "speculative": json.dumps(r["speculative_config"]) if r.get("speculative_config") else "",
            "cuda_graphs": r.get("cuda_graphs"),
            "repeats_with_result": sum(x is not None for x in rec.get("repeats", {}).get(key, [])),
            "failed_requests": sum(int((x or {}).get("failed") or 0) for x in rec.get("repeats", {}).get(key, [])),
            **{f"{m}_{f}": g(m, f) for m in METRICS for f in ("min", "median", "max")},
            "spec_decode_acceptance_rate_median": g("spec_decode_acceptance_rate", "median"),
            "spec_decode_acceptance_length_median": g("spec_decode_acceptance_length", "median"),
            "server_up_s_median": g("server_up_s", "median"),
            "identical_vs_baseline": _frac(rec.get("agreement_vs_baseline", {}).get(key)),
            "identical_vs_plain": _frac(rec.get("speculative_vs_plain", {}).get(key)),
            "identical_across_repeats": _frac({"identical": sum(a["identical"] for a in across),
                                               "compared": sum(a["compared"] for a in across)}) if across else None,
            "ran_contradictions": len(r.get("ran_contradictions") or []), "error": r.get("error")})
    return rows


def write_record(rec: dict, out_dir: Path, tag: str) -> dict[str, Path]:
    """``bench_serve_<tag>.json``, ``.csv`` and ``.png`` in ``out_dir``, each written atomically."""
    import csv
    import io

    paths = {ext: Path(out_dir) / f"bench_serve_{tag}.{ext}" for ext in ("json", "csv", "png")}
    atomic_write_text(paths["json"], json.dumps(rec, indent=1, default=str))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(csv_rows(rec))
    atomic_write_text(paths["csv"], buf.getvalue())
    plot(rec, paths["png"])
    return paths


def plot(rec: dict, path: Path) -> None:
    """The ranked metrics (:data:`sparse_mla.bench.ranking.METRICS`) per run: bar = median over repeats, whiskers =
    min..max, one dot per repeat (a ``matplotlib.figure.Figure``, no pyplot state); speculative runs hatched."""
    import numpy as np
    from matplotlib.figure import Figure

    keys = list(rec["runs"])
    fig = Figure(figsize=(4.2 * len(METRICS), 5.2), layout="constrained")
    for ax, (m, (label, better)) in zip(fig.subplots(1, len(METRICS)), METRICS.items()):
        vals = [[v[m] for v in rec.get("repeats", {}).get(k, []) if v and v.get(m) is not None] for k in keys]
        if not any(vals):
            ax.text(0.5, 0.5, "no repeat finished", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(label, fontsize=9)
            continue
        med = [float(np.median(v)) if v else 0.0 for v in vals]
        err = [[m_ - min(v) if v else 0.0 for m_, v in zip(med, vals)],
               [max(v) - m_ if v else 0.0 for m_, v in zip(med, vals)]]
        colors = ["tab:orange" if rec["runs"][k].get("backend_requested") == "TRITON_MLA_SPARSE" else "tab:blue"
                  for k in keys]
        bars = ax.bar(range(len(keys)), med, yerr=err, capsize=4, color=colors, edgecolor="black", linewidth=0.5,
                      alpha=0.8)
        for i, (b, k, v) in enumerate(zip(bars, keys, vals)):
            if rec["runs"][k].get("speculative_config"):
                b.set_hatch("//")
            ax.plot([i] * len(v), v, "k.", markersize=4)
        ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=2)
        ax.set_xticks(range(len(keys)), keys, fontsize=7, rotation=35, ha="right", rotation_mode="anchor")
        ax.set_title(f"{label}, {better} is better", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    env, ld = rec.get("environment", {}), rec.get("load", {})
    fig.suptitle(f"vllm serve + vllm bench serve, {env.get('gpu', 'no GPU')}; {ld.get('num_prompts')} prompts "
                 f"({ld.get('dataset')}) x {ld.get('repeats')} repeats on live warmed servers, concurrency "
                 f"{ld.get('max_concurrency')}, {ld.get('output_len')} tokens, index_topk "
                 f"{rec.get('model', {}).get('index_topk')}; whiskers min..max, dots: repeats; hatched: speculative; "
                 f"vllm {env.get('vllm')}, {str(env.get('date', ''))[:10]}", fontsize=8)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
