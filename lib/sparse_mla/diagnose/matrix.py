"""The diagnosis for many GPUs at once: :func:`diagnose_matrix` runs :func:`sparse_mla.diagnose.diagnose` for every
GPU x KV-cache dtype (stock vLLM, or stock beside the step 3 plugin), and the helpers here read the resulting
``pandas.DataFrame``: a pivoted table, the gaps (pairs without a backend), the cells the plugin changes, a heatmap
(matplotlib ``Figure``, no pyplot state) and the CSV + PNG records written to ``results/``.

Every cell is vLLM's own selection (``CudaPlatformBase.get_attn_backend_cls``, ``vllm/platforms/cuda.py``) on the
probe platform of :mod:`sparse_mla.diagnose.probe`; nothing here decides a backend itself.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._files import atomic_write as _atomic_write
from ..errors import UserInputError
from .request import GPU_PRESETS, KV_CACHE_DTYPES, PLUGIN_BACKEND_NAME, check_kv_cache_dtype, parse_capability, resolve
from .selection import diagnose


def _gpu_items(gpus) -> list[tuple[str, str]]:
    if isinstance(gpus, Mapping):
        items = [(str(k), str(v)) for k, v in gpus.items()]
    else:
        items = []
        for g in gpus:
            cap, name = parse_capability(g)
            if name == "local":
                raise UserInputError("the matrix takes GPU presets or major.minor capabilities; 'local' accepted only "
                                     "by diagnose --capability")
            items.append((name or str(g), f"{cap[0]}.{cap[1]}"))
    for name, cap in items:
        parse_capability(cap)
    return items


#: Columns of :func:`diagnose_matrix` frames: stock only, and stock beside the step 3 plugin (``with_plugin``).
MATRIX_COLUMNS: tuple[str, ...] = ("gpu", "capability", "kv_cache_dtype", "selected", "n_valid")
MATRIX_PLUGIN_COLUMNS: tuple[str, ...] = ("gpu", "capability", "kv_cache_dtype", "stock_selected",
                                          "with_plugin_selected", "stock_n_valid", "with_plugin_n_valid")

#: Environment switches of :mod:`sparse_mla.vllm_plugin` recorded in a side-by-side frame's ``attrs`` when set.
_PLUGIN_SWITCHES: tuple[str, ...] = ("SPARSE_MLA_PREFER_TRITON", "SPARSE_MLA_DISABLE_FALLBACK")


def diagnose_matrix(model: str | os.PathLike = "glm-5", tp: int = 1,
                    kv_cache_dtypes: Iterable[str] = KV_CACHE_DTYPES,
                    gpus: Mapping[str, str] | Iterable[str] = GPU_PRESETS, with_plugin: bool = False):
    """:func:`diagnose` for every GPU x KV-cache dtype.

    Args:
        model, tp: as for :func:`diagnose`.
        kv_cache_dtypes: KV-cache dtypes (columns of the heatmap).
        gpus: ``{name: "major.minor"}`` (default :data:`GPU_PRESETS`) or an iterable of preset names / capabilities.
        with_plugin: also probe with the step 3 plugin registered and put both verdicts side by side (every pair
            is probed twice: stock vLLM, then with ``sparse_mla.vllm_plugin.register()``).

    Returns:
        ``pandas.DataFrame`` with one row per (gpu, kv_cache_dtype), in the given orders. Stock
        (:data:`MATRIX_COLUMNS`): ``gpu, capability, kv_cache_dtype, selected`` (backend name or ``"none"``),
        ``n_valid``. With ``with_plugin`` (:data:`MATRIX_PLUGIN_COLUMNS`): ``gpu, capability, kv_cache_dtype,
        stock_selected, with_plugin_selected, stock_n_valid, with_plugin_n_valid``; ``attrs["with_plugin"]`` is
        True and ``attrs["plugin_switches"]`` names the plugin's environment switches that were set.

    Raises:
        UserInputError: as :func:`diagnose`; all inputs are checked before the first probe.
    """
    import pandas as pd

    items = _gpu_items(gpus)
    kvs = [check_kv_cache_dtype(str(k)) for k in kv_cache_dtypes]
    if not items or not kvs:
        raise UserInputError("the matrix needs at least one GPU and one KV-cache dtype")
    resolve(model, items[0][1], kvs[0], tp, with_plugin)      # fail fast on model / tp / plugin
    rows = []
    for gpu, cap in items:
        for kv in kvs:
            rec = diagnose(model=model, capability=cap, kv_cache_dtype=kv, tp=tp, with_plugin=False)
            row = {"gpu": gpu, "capability": rec["capability"], "kv_cache_dtype": kv}
            if with_plugin:
                plug = diagnose(model=model, capability=cap, kv_cache_dtype=kv, tp=tp, with_plugin=True)
                row.update(stock_selected=rec["selected"] or "none", with_plugin_selected=plug["selected"] or "none",
                           stock_n_valid=len(rec["valid"]), with_plugin_n_valid=len(plug["valid"]))
            else:
                row.update(selected=rec["selected"] or "none", n_valid=len(rec["valid"]))
            rows.append(row)
    df = pd.DataFrame(rows, columns=list(MATRIX_PLUGIN_COLUMNS if with_plugin else MATRIX_COLUMNS))
    df.attrs.update(model=rec["model"], vllm_version=rec["vllm_version"], tp=tp, mla=rec["mla"])
    if with_plugin:
        df.attrs.update(with_plugin=True,
                        plugin_switches={k: os.environ[k] for k in _PLUGIN_SWITCHES if k in os.environ})
    return df


def is_side_by_side(df) -> bool:
    """True for a :func:`diagnose_matrix` frame made with ``with_plugin=True`` (stock and with-plugin columns)."""
    return "with_plugin_selected" in getattr(df, "columns", ())


def _selected_column(df, column: str | None) -> str:
    """The frame's "selected" column: ``column`` if given, else ``selected`` (stock frame) or
    ``with_plugin_selected`` (side-by-side frame)."""
    if column is not None:
        if column not in df.columns:
            raise KeyError(f"{column!r} is not a column of this matrix ({', '.join(df.columns)})")
        return column
    return "with_plugin_selected" if is_side_by_side(df) else "selected"


def matrix_changes(df):
    """Rows of a side-by-side :func:`diagnose_matrix` frame where the plugin changes vLLM's choice:
    ``gpu, capability, kv_cache_dtype, stock_selected, with_plugin_selected`` (a ``pandas.DataFrame``)."""
    if not is_side_by_side(df):
        raise ValueError("matrix_changes needs a diagnose_matrix(..., with_plugin=True) frame")
    cols = ["gpu", "capability", "kv_cache_dtype", "stock_selected", "with_plugin_selected"]
    return df.loc[df["stock_selected"] != df["with_plugin_selected"], cols].reset_index(drop=True)


def plot_matrix(df, title: str | None = None):
    """Heatmap of a :func:`diagnose_matrix` frame as a ``matplotlib.figure.Figure`` (no pyplot state): GPUs down,
    KV-cache dtypes across, cell text = selected backend; ``"none"`` cells red. A side-by-side frame
    (``with_plugin=True``) gets two panels, see :func:`plot_matrix_side_by_side`."""
    if is_side_by_side(df):
        return plot_matrix_side_by_side(df, title=title)
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure

    gpus = list(dict.fromkeys(f"{g} ({c})" for g, c in zip(df["gpu"], df["capability"])))
    kvs = list(dict.fromkeys(df["kv_cache_dtype"]))
    cell = {(f"{g} ({c})", k): s for g, c, k, s in zip(df["gpu"], df["capability"], df["kv_cache_dtype"],
                                                       df["selected"])}
    backends = sorted({s for s in cell.values() if s != "none"})
    palette = ["#9ecae1", "#a1d99b", "#fdd0a2", "#bcbddc", "#c7e9c0", "#fdae6b", "#dadaeb", "#6baed6"]
    colors = ["#d62728"] + [palette[i % len(palette)] for i in range(len(backends))]
    index = {"none": 0, **{b: i + 1 for i, b in enumerate(backends)}}
    grid = [[index[cell.get((g, k), "none")] for k in kvs] for g in gpus]
    fig = Figure(figsize=(2.9 * len(kvs) + 2.5, 0.62 * len(gpus) + 1.6), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.imshow(grid, cmap=ListedColormap(colors), vmin=-0.5, vmax=len(colors) - 0.5, aspect="auto")
    for i, g in enumerate(gpus):
        for j, k in enumerate(kvs):
            s = cell.get((g, k), "none")
            ax.text(j, i, s, ha="center", va="center", fontsize=8,
                    color="white" if s == "none" else "black", fontweight="bold" if s == "none" else "normal")
    ax.set_xticks(range(len(kvs)), labels=[f"kv={k}" for k in kvs])
    ax.set_yticks(range(len(gpus)), labels=gpus)
    ax.set_xticks([x - 0.5 for x in range(1, len(kvs))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(gpus))], minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    ax.tick_params(which="minor", length=0)
    if title is None:
        a = getattr(df, "attrs", {}) or {}
        who = f"{a['model']} (tp={a.get('tp', 1)}), vLLM {a.get('vllm_version', '?')}: " if "model" in a else "vLLM: "
        title = who + "attention backend selected (red: no valid backend)"
    ax.set_title(title)
    fig.tight_layout()
    return fig


#: Colours of :func:`plot_matrix_side_by_side`: no valid backend, the workbook's backend, all others (in turn).
_NONE_COLOR = "#d62728"
_PLUGIN_COLOR = "#54278f"
_OTHER_COLORS = ("#9ecae1", "#a1d99b", "#fdd0a2", "#fee391", "#c7e9c0", "#6baed6", "#fdae6b", "#d9d9d9")


def _wrap_name(name: str, width: int = 17) -> str:
    """Backend names such as FLASHINFER_MLA_SPARSE_SM120 on two lines (split at the underscore nearest the
    middle) so that eight panels' columns stay narrow."""
    if len(name) <= width or "_" not in name:
        return name
    cuts = [i for i, ch in enumerate(name) if ch == "_"]
    i = min(cuts, key=lambda c: abs(c - len(name) / 2))
    return name[: i + 1] + "\n" + name[i + 1:]


def plot_matrix_side_by_side(df, title: str | None = None):
    """Two-panel heatmap of a side-by-side :func:`diagnose_matrix` frame (``with_plugin=True``): stock vLLM on the
    left, with the step 3 plugin on the right; GPUs down, KV-cache dtypes across, cell text = selected backend.
    ``"none"`` cells are red, :data:`PLUGIN_BACKEND_NAME` cells dark purple with white bold text, every other
    backend a light colour (the same in both panels); cells the plugin changed get a thick black frame."""
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    if not is_side_by_side(df):
        raise ValueError("plot_matrix_side_by_side needs a diagnose_matrix(..., with_plugin=True) frame")
    gpus = list(dict.fromkeys(f"{g} ({c})" for g, c in zip(df["gpu"], df["capability"])))
    kvs = list(dict.fromkeys(df["kv_cache_dtype"]))
    keys = [(f"{g} ({c})", k) for g, c, k in zip(df["gpu"], df["capability"], df["kv_cache_dtype"])]
    panels = [("stock vLLM", dict(zip(keys, df["stock_selected"]))),
              ("with sparse_mla.vllm_plugin", dict(zip(keys, df["with_plugin_selected"])))]
    others = sorted({s for _, cell in panels for s in cell.values()} - {"none", PLUGIN_BACKEND_NAME})
    colors = [_NONE_COLOR, _PLUGIN_COLOR] + [_OTHER_COLORS[i % len(_OTHER_COLORS)] for i in range(len(others))]
    index = {"none": 0, PLUGIN_BACKEND_NAME: 1, **{b: i + 2 for i, b in enumerate(others)}}
    cmap = ListedColormap(colors)
    fig = Figure(figsize=(2 * (1.75 * len(kvs)) + 3.2, 0.62 * len(gpus) + 2.0), dpi=100)
    axes = fig.subplots(1, 2, sharey=True)
    stock = panels[0][1]
    for p, (ax, (label, cell)) in enumerate(zip(axes, panels)):
        grid = [[index[cell.get((g, k), "none")] for k in kvs] for g in gpus]
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(colors) - 0.5, aspect="auto")
        for i, g in enumerate(gpus):
            for j, k in enumerate(kvs):
                s = cell.get((g, k), "none")
                dark = s in ("none", PLUGIN_BACKEND_NAME)
                ax.text(j, i, _wrap_name(s), ha="center", va="center", fontsize=7, linespacing=0.95,
                        color="white" if dark else "black", fontweight="bold" if dark else "normal")
                if p == 1 and s != stock.get((g, k), "none"):
                    ax.add_patch(Rectangle((j - 0.47, i - 0.45), 0.94, 0.9, fill=False, edgecolor="black",
                                           linewidth=2.2))
        ax.set_xticks(range(len(kvs)), labels=[f"kv={k}" for k in kvs], fontsize=8)
        ax.set_yticks(range(len(gpus)), labels=gpus)
        ax.set_xticks([x - 0.5 for x in range(1, len(kvs))], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, len(gpus))], minor=True)
        ax.grid(which="minor", color="white", linewidth=2)
        ax.tick_params(which="minor", length=0)
        ax.set_title(label, fontsize=10)
    if title is None:
        a = getattr(df, "attrs", {}) or {}
        who = f"{a['model']} (tp={a.get('tp', 1)}), vLLM {a.get('vllm_version', '?')}: " if "model" in a else "vLLM: "
        sw = ", ".join(f"{k}={v}" for k, v in (a.get("plugin_switches") or {}).items())
        title = (who + "attention backend selected, stock | with plugin" + (f" ({sw})" if sw else "")
                 + f"\nred: no valid backend; purple: {PLUGIN_BACKEND_NAME}; framed: changed by the plugin")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def write_matrix(df, out_dir: str | os.PathLike = "results", title: str | None = None) -> dict[str, Path]:
    """Write a :func:`diagnose_matrix` frame as ``<out_dir>/diagnose_matrix.csv`` and the heatmap
    ``<out_dir>/diagnose_matrix.png`` (matplotlib, Agg), each atomically; a side-by-side frame
    (``with_plugin=True``) as ``diagnose_matrix_plugin.csv`` / ``diagnose_matrix_plugin.png`` (two panels), leaving
    the stock files alone. Returns ``{"csv": path, "png": path}``."""
    out = Path(out_dir)
    stem = "diagnose_matrix_plugin" if is_side_by_side(df) else "diagnose_matrix"
    csv_path, png_path = out / f"{stem}.csv", out / f"{stem}.png"
    _atomic_write(csv_path, lambda tmp: df.to_csv(tmp, index=False))
    fig = plot_matrix(df, title=title)
    _atomic_write(png_path, lambda tmp: fig.savefig(tmp, format="png", metadata={"Software": None}))
    return {"csv": csv_path, "png": png_path}


def no_backend_pairs(df, column: str | None = None) -> list[tuple[str, str]]:
    """``(gpu, kv_cache_dtype)`` pairs of a :func:`diagnose_matrix` frame where vLLM has no valid backend (of a
    side-by-side frame: with the plugin, unless ``column="stock_selected"``)."""
    col = _selected_column(df, column)
    return [(g, k) for g, k, s in zip(df["gpu"], df["kv_cache_dtype"], df[col]) if s == "none"]


def matrix_table(df, column: str | None = None):
    """A :func:`diagnose_matrix` frame pivoted for reading: one row per GPU (``gpu (capability)``), one column per
    KV-cache dtype (in the frame's order), cell = selected backend or ``"none"``. A side-by-side frame gives two
    column groups, ``stock`` and ``with plugin``, unless ``column`` picks one of its selected columns."""
    import pandas as pd

    if column is None and is_side_by_side(df):
        return pd.concat({"stock": matrix_table(df, "stock_selected"),
                          "with plugin": matrix_table(df, "with_plugin_selected")}, axis=1,
                         names=["", "kv_cache_dtype"])
    col = _selected_column(df, column)
    gpus = list(dict.fromkeys(f"{g} ({c})" for g, c in zip(df["gpu"], df["capability"])))
    kvs = list(dict.fromkeys(df["kv_cache_dtype"]))
    t = df.assign(GPU=[f"{g} ({c})" for g, c in zip(df["gpu"], df["capability"])]).pivot(
        index="GPU", columns="kv_cache_dtype", values=col)
    t = t.loc[gpus, kvs]
    t.columns.name = "kv_cache_dtype"
    return t


def matrix_gaps(df, column: str | None = None) -> dict[str, Any]:
    """Where a :func:`diagnose_matrix` frame has no valid backend: ``{"pairs": [(gpu, kv)], "all_kv": [gpus with no
    backend for any KV dtype], "by_kv": {kv: [gpus without a backend]}, "complete": [gpus with a backend for every
    KV dtype]}`` (of a side-by-side frame: with the plugin, unless ``column="stock_selected"``)."""
    pairs = no_backend_pairs(df, column)
    gpus = list(dict.fromkeys(df["gpu"]))
    kvs = list(dict.fromkeys(df["kv_cache_dtype"]))
    missing = set(pairs)
    return {"pairs": pairs,
            "all_kv": [g for g in gpus if all((g, k) in missing for k in kvs)],
            "by_kv": {k: [g for g in gpus if (g, k) in missing] for k in kvs},
            "complete": [g for g in gpus if not any((g, k) in missing for k in kvs)]}
