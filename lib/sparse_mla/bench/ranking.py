"""The serving benchmark's verdict: which of two runs is better on a metric, said only where their repeats do not
overlap.

Each run has one value per repeat of a metric (vLLM's ``output_throughput``, ``median_ttft_ms``, ``median_tpot_ms``,
``median_itl_ms`` of each repeat's ``vllm bench serve`` pass). Run A ranks above run B on that metric only where
every repeat of A is better than every repeat of B: their ranges [min, max] over repeats do not overlap (ranges that
touch, or one inside the other, overlap), with at least :data:`MIN_REPEATS` repeats each. Lower is better for
latencies, higher for throughput. Anything else is "not ranked", with both ranges -- a spread between repeats as large
as the difference between backends (the 2026-12-01 records: 2.2x between two runs of ours, 1.27x between backends)
ranks nothing.

**False-rank rate.** Two runs of the same engine give repeats from one distribution (exchangeable: the passes of
both runs alternate, :mod:`sparse_mla.bench.serve`). With ``n`` repeats each and no ties, each of the ``C(2n, n)``
ways of splitting the ``2n`` sorted values between the two runs is equally likely, and exactly two of them (all of
A below all of B, or above) do not overlap: the rule ranks two identical runs with probability
:func:`false_rank_rate` ``= 2 / C(2n, n)`` per metric and pair, whatever the distribution -- 10 % with 3 repeats
(the rule before 2026-12-04), 2.9 % with 4, **0.79 % with** :data:`MIN_REPEATS` **= 5** (:data:`FALSE_RANK_RATE`).
With more repeats than the minimum the rate only falls. It holds per metric and pair; over the 4 metrics and 3
pairs of a session the chance that some line ranks two identical runs is at most 12 times that (9.5 %).
"""
from __future__ import annotations

from itertools import combinations
from math import comb
from statistics import median

#: metric -> (label, better): the metrics the verdict ranks, keys of vLLM's result.
METRICS = {"output_throughput": ("output tokens/s", "higher"), "median_ttft_ms": ("median TTFT (ms)", "lower"),
           "median_tpot_ms": ("median TPOT (ms)", "lower"), "median_itl_ms": ("median ITL (ms)", "lower")}
MIN_REPEATS = 5


def false_rank_rate(n_a: int, n_b: int | None = None) -> float:
    """Probability that the rule ranks two runs of the same engine on one metric, with ``n_a`` and ``n_b`` repeats
    (continuous values, exchangeable): ``2 / C(n_a + n_b, n_a)`` (module docstring)."""
    n_b = n_a if n_b is None else n_b
    return 2 / comb(n_a + n_b, n_a)


#: The false-rank rate at the minimum repeats, per metric and pair (0.79 %).
FALSE_RANK_RATE = false_rank_rate(MIN_REPEATS)
RULE = (f"A > B on a metric only where every repeat of A is better than every repeat of B: the two runs' ranges "
        f"[min, max] over their repeats do not overlap (touching or nested ranges overlap), each with at least "
        f"{MIN_REPEATS} repeats (two runs of one engine are then ranked with probability {FALSE_RANK_RATE:.2%} per "
        f"metric and pair); lower is better for TTFT, TPOT and ITL, higher for output tokens/s; otherwise "
        f"'not ranked', with both ranges")


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def compare(metric: str, a: str, a_values: list[float], b: str, b_values: list[float]) -> dict:
    """The verdict on one metric for runs ``a`` and ``b`` (their per-repeat values, ``None`` for a repeat without
    a result): ``{"metric", "runs": [a, b], "ranges": {run: [min, max] | None}, "better": run | None, "line"}``;
    where overlapping ranges leave it unranked, also why in numbers: ``spread`` (each run's range over its median)
    and ``medians_apart`` (the medians' difference over the smaller), both in the line.
    Raises ``KeyError`` for a metric not in :data:`METRICS`."""
    label, better = METRICS[metric]
    va, vb = [float(v) for v in a_values if v is not None], [float(v) for v in b_values if v is not None]
    ranges = {a: [min(va), max(va)] if va else None, b: [min(vb), max(vb)] if vb else None}
    out = {"metric": metric, "runs": [a, b], "ranges": ranges, "better": None}
    if min(len(va), len(vb)) < MIN_REPEATS:
        out["line"] = (f"{label}: {a} vs {b} not ranked: {len(va)} and {len(vb)} repeats with a result, fewer than "
                       f"{MIN_REPEATS}")
        return out
    (lo_a, hi_a), (lo_b, hi_b) = ranges[a], ranges[b]
    if hi_a < lo_b or hi_b < lo_a:
        a_lower = hi_a < lo_b
        win, lose = (a, b) if a_lower == (better == "lower") else (b, a)
        out["better"] = win
        out["line"] = (f"{label}: {win} > {lose} ({_fmt(ranges[win][0])}..{_fmt(ranges[win][1])} against "
                       f"{_fmt(ranges[lose][0])}..{_fmt(ranges[lose][1])}; {better} is better)")
    else:
        med_a, med_b = median(va), median(vb)
        out["spread"] = {a: (hi_a - lo_a) / med_a if med_a else None, b: (hi_b - lo_b) / med_b if med_b else None}
        out["medians_apart"] = abs(med_a - med_b) / min(med_a, med_b) if min(med_a, med_b) > 0 else None
        why = (f"; spread over repeats {_pct(out['spread'][a])} and {_pct(out['spread'][b])} of the median, the "
               f"medians {_pct(out['medians_apart'])} apart")
        out["line"] = (f"{label}: {a} vs {b} not ranked: ranges overlap ({a} {_fmt(lo_a)}..{_fmt(hi_a)}, "
                       f"{b} {_fmt(lo_b)}..{_fmt(hi_b)}{why})")
    return out


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f} %"


def verdict(values: dict[str, dict[str, list]], groups: dict[str, list[str]]) -> dict:
    """``values``: ``{run: {metric: [value per repeat]}}``; ``groups``: ``{name: [runs comparable with each other]}``
    (e.g. the plain runs, the runs under one speculative config). Every pair within a group on every metric of
    :data:`METRICS`: ``{"rule", "pairs": [compare(...)], "lines": [...]}``."""
    pairs = [compare(m, a, values.get(a, {}).get(m, []), b, values.get(b, {}).get(m, []))
             for runs in groups.values() for a, b in combinations(runs, 2) for m in METRICS]
    return {"rule": RULE, "metrics": {m: {"label": lab, "better": bet} for m, (lab, bet) in METRICS.items()},
            "pairs": pairs, "lines": [p["line"] for p in pairs]}
