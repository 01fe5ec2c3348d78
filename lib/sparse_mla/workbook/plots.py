"""The notebooks' own figures, drawn from what a notebook computed or a record holds (never from typed-in numbers):

* :func:`stage_errors`: each build stage's runs as their worst error over its derived limit (notebooks 02 and 03,
  ``stage_rows``), the planted faults beside them, the limit at 1;
* :func:`roofline`: a benchmark record's cases on the roofline of the GPU that ran them, the memory roof the record's
  own copy bandwidth, the compute roof a datasheet figure the caller names.

Both return a matplotlib ``Figure`` (closed to pyplot, so a notebook shows it once, where it is the cell's value).
"""
from __future__ import annotations

import math

#: Ratios below this are drawn at it (an exact run has error 0, which a log axis cannot show)
FLOOR = 1e-6


def stage_errors(stages, titles: list[str], *, title: str = "Each stage against its derived limit"):
    """``stages``: a DataFrame of ``stage_rows`` (columns ``stage`` 1..N, ``run``, ``planted_fault`` (None for a
    correct run), ``worst_error_over_limit`` (NaN or None where the check was exact: at the top
    where it failed, an output left unwritten or unequal, at the floor where it held), ``within_limits``);
    ``titles``: stage ``n``'s one-line title at ``titles[n - 1]``. Correct runs are dots, planted faults crosses,
    both on a log axis (error / limit; at most 1 passes). Raises ``ValueError`` for a stage without a title."""
    import matplotlib.pyplot as plt

    numbers = sorted(int(s) for s in stages["stage"].unique())
    if numbers and (numbers[0] < 1 or numbers[-1] > len(titles)):
        raise ValueError(f"stages {numbers} need {numbers[-1]} titles; got {len(titles)}")
    finite = stages["worst_error_over_limit"].replace(math.inf, math.nan).dropna()
    top = max(10.0, float(finite.max()) * 3 if len(finite) else 10.0)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for fault, (marker, color, label) in {False: ("o", "tab:blue", "correct run"),
                                          True: ("x", "tab:red", "planted fault")}.items():
        rows = stages[stages["planted_fault"].notna() == fault]
        if not len(rows):
            continue
        jitter = [(i % 5 - 2) * 0.06 for i in range(len(rows))]
        y = [max(r, FLOOR) if r is not None and math.isfinite(r) else (FLOOR if ok else top)
             for r, ok in zip(rows["worst_error_over_limit"], rows["within_limits"])]
        ax.scatter(rows["stage"].astype(int) + jitter, y, marker=marker, color=color, label=label, zorder=3)
    ax.axhline(1.0, color="k", ls=":", lw=1, label="derived limit (error / limit = 1)")
    ax.set_yscale("log")
    ax.set_ylim(FLOOR / 2, top * 2)
    ax.set_xticks(range(1, len(titles) + 1))
    ax.set_xticklabels([f"{n}\n{t}" for n, t in enumerate(titles, 1)], fontsize=8)
    ax.set_ylabel("worst error / its limit")
    return _finished(fig, ax, title, "upper left")


def roofline(points: dict, copy_bw_GBps: float, *, peak_TFLOPs: float | None = None, peak_label: str = "",
             title: str = "Roofline"):
    """``points``: label -> ``(intensity, tflops)``, two equal-length sequences (flop per byte, TFLOP/s) of one
    kernel's cases; ``copy_bw_GBps``: the memory roof (GB/s, the record's measured copy bandwidth); ``peak_TFLOPs``:
    the compute roof where given, named by ``peak_label``. Log-log axes. Raises ``ValueError`` for a non-positive
    bandwidth or unequal sequences."""
    import matplotlib.pyplot as plt

    if not copy_bw_GBps or copy_bw_GBps <= 0:
        raise ValueError(f"copy bandwidth {copy_bw_GBps!r} GB/s is not positive")
    xs = []
    for label, (x, y) in points.items():
        if len(x) != len(y):
            raise ValueError(f"{label}: {len(x)} intensities but {len(y)} TFLOP/s values")
        xs += [float(v) for v in x if v > 0]
    lo, hi = (min(xs) / 3, max(xs) * 3) if xs else (0.1, 1000.0)
    ridge = peak_TFLOPs * 1e3 / copy_bw_GBps if peak_TFLOPs else None     # flop/byte where the two roofs meet
    if ridge:
        hi = max(hi, ridge * 3)                                          # the ridge point on the plot
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    roof = [lo, hi] if not ridge else [lo, ridge, hi]
    perf = [min(x * copy_bw_GBps / 1e3, peak_TFLOPs or math.inf) for x in roof]
    ax.plot(roof, perf, "k-", lw=1.2, label=f"memory roof: copy bandwidth {copy_bw_GBps:.0f} GB/s"
            + (f"; compute roof {peak_TFLOPs:.0f} TFLOP/s ({peak_label})" if peak_TFLOPs else ""))
    for (label, (x, y)), marker in zip(points.items(), "os^vD"):
        ax.scatter(list(x), list(y), marker=marker, label=label, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flop / byte)")
    ax.set_ylabel("TFLOP/s")
    return _finished(fig, ax, title, "lower right")


def _finished(fig, ax, title: str, legend_loc: str):
    """Title, legend and layout of a figure of this module, closed to pyplot (shown once, as a cell's value)."""
    import matplotlib.pyplot as plt

    ax.set_title(title)
    ax.legend(loc=legend_loc, fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig
