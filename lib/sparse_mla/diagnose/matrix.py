"""The diagnosis for many GPUs at once: :func:`diagnose_matrix` runs :func:`sparse_mla.diagnose.diagnose` for every
GPU x KV-cache dtype (stock vLLM, or stock beside the step 4 plugin), and the helpers here read the resulting
``pandas.DataFrame``: a pivoted table, the gaps (pairs without a backend), the cells the plugin changes, a heatmap
(matplotlib ``Figure``, no pyplot state) and the CSV + PNG records written to ``results/``. :func:`memory_matrix`
tabulates the memory stage (what fits) for models x checkpoint quantizations x GPUs, written as CSV + Markdown.

Every cell is vLLM's own selection (``CudaPlatformBase.get_attn_backend_cls``, ``vllm/platforms/cuda.py``) on the
probe platform of :mod:`sparse_mla.diagnose.probe`; nothing here decides a backend itself.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..files import atomic_write_all
from ..errors import UserInputError
from .request import (GPU_PRESETS, GPUS, KV_CACHE_DTYPES, PLUGIN_BACKEND_NAME, check_cache_dtype, parse_capability,
                      resolve)
from .path import diagnose


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


#: Columns of :func:`diagnose_matrix` frames: stock only, and stock beside the step 4 plugin (``with_plugin``).
#: Per probe: the attention backend, how many were valid, the cache vLLM allocates, the indexer, whether the engine
#: starts (True / False / None, see :func:`sparse_mla.diagnose.diagnose`) and the stage of the first blocker.
_CELL: tuple[str, ...] = ("selected", "n_valid", "effective_kv_cache_dtype", "indexer", "engine_starts", "blocked_at")
MATRIX_COLUMNS: tuple[str, ...] = ("gpu", "capability", "kv_cache_dtype", *_CELL, "host_dependent")
MATRIX_PLUGIN_COLUMNS: tuple[str, ...] = ("gpu", "capability", "kv_cache_dtype", *(f"stock_{c}" for c in _CELL),
                                          *(f"with_plugin_{c}" for c in _CELL), "host_dependent")

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
        with_plugin: also probe with the step 4 plugin registered and put both verdicts side by side (every pair
            is probed twice: stock vLLM, then with ``sparse_mla.vllm_plugin.register()``).

    Returns:
        ``pandas.DataFrame`` with one row per (gpu, kv_cache_dtype), in the given orders. Stock
        (:data:`MATRIX_COLUMNS`): ``gpu, capability, kv_cache_dtype``, then per probe ``selected`` (attention
        backend or ``"none"``), ``n_valid``, ``effective_kv_cache_dtype`` (what vLLM allocates), ``indexer``
        (``DEEPGEMM``, ``TRITON_DSA_INDEXER`` or ``"none"``; ``"-"`` for dense MLA), ``engine_starts`` (``"yes"``,
        ``"no"``, ``"depends on host"``), ``blocked_at`` (stage of the first blocker or ``"-"``), and
        ``host_dependent`` (the answer changes with this host's FlashInfer SM120 API). With ``with_plugin``
        (:data:`MATRIX_PLUGIN_COLUMNS`) the per-probe columns come twice, ``stock_*`` and ``with_plugin_*``;
        ``attrs["with_plugin"]`` is True and ``attrs["plugin_switches"]`` names the plugin's switches that were set.

    Raises:
        UserInputError: as :func:`diagnose`; all inputs are checked before the first probe.
    """
    import pandas as pd

    for name, v in (("gpus", gpus), ("kv_cache_dtypes", kv_cache_dtypes)):
        if isinstance(v, str):   # iterating it would check its letters ("unknown KV-cache dtype 'f'")
            raise UserInputError(f"{name} {v!r} is one string; accepted: a list of them, e.g. {name}=[{v!r}]")
    items = _gpu_items(gpus)
    kvs = [check_cache_dtype(str(k)) for k in kv_cache_dtypes]
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
                row.update({f"stock_{k}": v for k, v in _cell(rec, False).items()})
                row.update({f"with_plugin_{k}": v for k, v in _cell(plug, True).items()})
                row["host_dependent"] = bool(rec["host_dependent"]["depends"] or plug["host_dependent"]["depends"])
            else:
                row.update(_cell(rec, False))
                row["host_dependent"] = bool(rec["host_dependent"]["depends"])
            rows.append(row)
    df = pd.DataFrame(rows, columns=list(MATRIX_PLUGIN_COLUMNS if with_plugin else MATRIX_COLUMNS))
    df.attrs.update(model=rec["model"], vllm_version=rec["vllm_version"], tp=tp, mla=rec["mla"])
    if with_plugin:
        df.attrs.update(with_plugin=True,
                        plugin_switches={k: os.environ[k] for k in _PLUGIN_SWITCHES if k in os.environ})
    return df


#: ``engine_starts`` of a record as a matrix cell (a CSV reads strings back unchanged, booleans and None not).
ENGINE_STARTS = {True: "yes", False: "no", None: "depends on host"}


def _cell(rec: Mapping[str, Any], with_plugin: bool) -> dict[str, Any]:
    ix = rec["indexer"]["with_plugin"] if with_plugin else rec["indexer"]["stock"]
    return {"selected": rec["selected"] or "none", "n_valid": len(rec["valid"]),
            "effective_kv_cache_dtype": rec["effective_kv_cache_dtype"] or "-",
            "indexer": (ix or "none") if rec["mla"] == "sparse (DSA)" else "-",
            "engine_starts": ENGINE_STARTS[rec["engine_starts"]],
            "blocked_at": rec["blockers"][0]["stage"] if rec["blockers"] else "-"}


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


#: Colours of the heatmaps: no attention backend (the first wall), an attention backend but the engine stops later
#: (the indexer or kernel wall), the workbook's backend, all other backends (in turn: blues, greens and greys, none
#: that reads as the two walls' red and orange). The figure's legend names each.
_NONE_COLOR = "#d62728"
_LATER_COLOR = "#fd8d3c"
_PLUGIN_COLOR = "#54278f"
_OTHER_COLORS = ("#9ecae1", "#a1d99b", "#c7e9c0", "#bcbddc", "#6baed6", "#d9d9d9", "#c6dbef", "#74c476")


def _wrap_name(name: str, width: int = 17) -> str:
    """Backend names such as FLASHINFER_MLA_SPARSE_SM120 on two lines (split at the underscore nearest the
    middle) so that eight panels' columns stay narrow."""
    if len(name) <= width or "_" not in name:
        return name
    cuts = [i for i, ch in enumerate(name) if ch == "_"]
    i = min(cuts, key=lambda c: abs(c - len(name) / 2))
    return name[: i + 1] + "\n" + name[i + 1:]


def _panels(df) -> list[tuple[str, str]]:
    """(title, column prefix) of each heatmap panel."""
    if is_side_by_side(df):
        return [("stock vLLM", "stock_"), ("with sparse_mla.vllm_plugin", "with_plugin_")]
    return [("", "")]


def plot_matrix(df, title: str | None = None):
    """Heatmap of a :func:`diagnose_matrix` frame as a ``matplotlib.figure.Figure`` (no pyplot state): GPUs down,
    KV-cache dtypes across; a side-by-side frame (``with_plugin=True``) gets two panels, stock vLLM and with the
    step 4 plugin. Each cell names the attention backend and, below it, the DSA indexer vLLM would run; its colour
    shows the two walls: red = no valid attention backend, orange = a backend but the engine stops later (no indexer
    kernels, or the top-k conversion), the workbook's backend purple, others light. ``+`` marks cells whose answer
    depends on this host's software (FlashInfer's SM120 sparse MLA API); in the right panel, a thick frame marks
    cells the plugin changed. A legend below the panels names every colour shown."""
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    panels = _panels(df)
    gpus = list(dict.fromkeys(f"{g} ({c})" for g, c in zip(df["gpu"], df["capability"])))
    kvs = list(dict.fromkeys(df["kv_cache_dtype"]))
    rows = {(f"{r['gpu']} ({r['capability']})", r["kv_cache_dtype"]): r for r in df.to_dict(orient="records")}
    names = sorted({str(r[f"{p}selected"]) for r in rows.values() for _, p in panels}
                   - {"none", PLUGIN_BACKEND_NAME})
    colors = [_NONE_COLOR, _LATER_COLOR, _PLUGIN_COLOR] + [_OTHER_COLORS[i % len(_OTHER_COLORS)]
                                                           for i in range(len(names))]
    index = {PLUGIN_BACKEND_NAME: 2, **{b: i + 3 for i, b in enumerate(names)}}
    cmap = ListedColormap(colors)
    fig = Figure(figsize=(len(panels) * 1.9 * len(kvs) + 3.0, 0.7 * len(gpus) + 2.6), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for n, (ax, (label, p)) in enumerate(zip(axes, panels)):
        grid = []
        for g in gpus:
            line = []
            for k in kvs:
                r = rows.get((g, k))
                sel = "none" if r is None else str(r[f"{p}selected"])
                if sel == "none":
                    line.append(0)
                elif r[f"{p}engine_starts"] == "no":
                    line.append(1)
                else:
                    line.append(index[sel])
            grid.append(line)
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(colors) - 0.5, aspect="auto")
        for i, g in enumerate(gpus):
            for j, k in enumerate(kvs):
                r = rows.get((g, k))
                if r is None:
                    continue
                sel = str(r[f"{p}selected"])
                ix = "" if str(r[f"{p}indexer"]) == "-" else str(r[f"{p}indexer"])
                text = ("no backend" if sel == "none" else _wrap_name(sel)) + (f"\nidx: {ix}" if ix else "")
                if r.get("host_dependent"):
                    text += " +"
                dark = grid[i][j] in (0, 2)
                ax.text(j, i, text, ha="center", va="center", fontsize=6.5, linespacing=0.95,
                        color="white" if dark else "black", fontweight="bold" if grid[i][j] == 2 else "normal")
                if n == 1 and (sel != str(r["stock_selected"]) or str(r[f"{p}indexer"]) != str(r["stock_indexer"])):
                    ax.add_patch(Rectangle((j - 0.47, i - 0.45), 0.94, 0.9, fill=False, edgecolor="black",
                                           linewidth=2.2))
        ax.set_xticks(range(len(kvs)), labels=[f"kv={k}" for k in kvs], fontsize=8)
        ax.set_yticks(range(len(gpus)), labels=gpus)
        ax.set_xticks([x - 0.5 for x in range(1, len(kvs))], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, len(gpus))], minor=True)
        ax.grid(which="minor", color="white", linewidth=2)
        ax.tick_params(which="minor", length=0)
        if label:
            ax.set_title(label, fontsize=10)
    if title is None:
        a = getattr(df, "attrs", {}) or {}
        who = f"{a['model']} (tp={a.get('tp', 1)}), vLLM {a.get('vllm_version', '?')}: " if "model" in a else "vLLM: "
        sw = ", ".join(f"{k}={v}" for k, v in (a.get("plugin_switches") or {}).items())
        title = (who + "attention backend and DSA indexer" + (", stock | with plugin" if len(panels) > 1 else "")
                 + (f" ({sw})" if sw else "")
                 + "\n+ : depends on this host's FlashInfer" + ("; framed: changed by the plugin"
                                                                if len(panels) > 1 else ""))
    fig.suptitle(title, fontsize=9)
    legend = [("no attention backend", _NONE_COLOR),
              ("a backend, but the engine stops later (no indexer kernels / top-k conversion)", _LATER_COLOR),
              (PLUGIN_BACKEND_NAME + " (this workbook)", _PLUGIN_COLOR)] + \
        [(b, colors[index[b]]) for b in names]
    fig.legend(handles=[Patch(facecolor=c, edgecolor="grey", label=t) for t, c in legend], loc="outside lower center",
               ncol=min(3, len(legend)), fontsize=7, frameon=False)
    return fig


def plot_matrix_side_by_side(df, title: str | None = None):
    """:func:`plot_matrix` of a side-by-side frame (kept for callers that name the two-panel form)."""
    if not is_side_by_side(df):
        raise ValueError("plot_matrix_side_by_side needs a diagnose_matrix(..., with_plugin=True) frame")
    return plot_matrix(df, title=title)


def write_matrix(df, out_dir: str | os.PathLike = "results", title: str | None = None) -> dict[str, Path]:
    """Write a :func:`diagnose_matrix` frame as ``<out_dir>/diagnose_matrix.csv`` and the heatmap
    ``<out_dir>/diagnose_matrix.png`` (matplotlib, Agg), each atomically; a side-by-side frame
    (``with_plugin=True``) as ``diagnose_matrix_plugin.csv`` / ``diagnose_matrix_plugin.png`` (two panels), leaving
    the stock files alone. Returns ``{"csv": path, "png": path}``."""
    out = Path(out_dir)
    stem = "diagnose_matrix_plugin" if is_side_by_side(df) else "diagnose_matrix"
    csv_path, png_path = out / f"{stem}.csv", out / f"{stem}.png"
    fig = plot_matrix(df, title=title)
    atomic_write_all([(csv_path, lambda tmp: df.to_csv(tmp, index=False)),
                      (png_path, lambda tmp: fig.savefig(tmp, format="png", metadata={"Software": None}))])
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


# ---- the memory matrix: what fits ---------------------------------------------------------------------------------

#: ``sparse-mla diagnose --memory-matrix``: the models, checkpoint quantizations and GPUs of issue 19 (8 GPUs each).
MEMORY_MATRIX_MODELS: tuple[str, ...] = ("glm-5", "deepseek-v3.2")
MEMORY_MATRIX_QUANTIZATIONS: tuple[str, ...] = ("bf16", "fp8", "nvfp4", "gguf-q4_k")
MEMORY_MATRIX_GPUS: tuple[str, ...] = ("rtx-pro-6000", "rtx-5090", "a100")
MEMORY_MATRIX_STEM = "diagnose_memory_matrix"

#: Columns of :func:`memory_matrix` frames.
MEMORY_MATRIX_COLUMNS: tuple[str, ...] = (
    "model", "quantization", "gpu", "gpus", "gpu_memory_gib", "weights_gib_per_rank", "attention", "kv_cache_dtype",
    "kv_cache_bytes_per_token", "max_tokens", "max_model_len", "fits", "fix")


def _memory_row(rec: Mapping[str, Any], quantization: str, gpu: str) -> dict[str, Any]:
    mem = rec["memory"] or {}
    fixes = [f["change"] for f in mem.get("fixes", []) if f.get("fits")]
    fits = {True: "yes", False: "no", None: "unknown"}[mem.get("fits")] if rec["memory"] else "not reached"
    return {"model": rec["model"], "quantization": quantization, "gpu": gpu, "gpus": rec["tp"],
            "gpu_memory_gib": mem.get("gpu_memory_gib"), "weights_gib_per_rank": mem.get("weights_gib_per_rank"),
            "attention": rec["selected"] or "none", "kv_cache_dtype": mem.get("kv_cache_dtype"),
            "kv_cache_bytes_per_token": mem.get("kv_cache_bytes_per_token"),
            "max_tokens": mem.get("max_tokens"), "max_model_len": mem.get("max_model_len"), "fits": fits,
            "fix": "; ".join(fixes) if fixes else ("none found" if mem.get("fits") is False else "-")}


def memory_matrix(models: Iterable[str] = MEMORY_MATRIX_MODELS,
                  quantizations: Iterable[str] = MEMORY_MATRIX_QUANTIZATIONS,
                  gpus: Iterable[str] = MEMORY_MATRIX_GPUS, tp: int = 8, kv_cache_dtype: str = "auto",
                  with_plugin: bool = False, gpu_memory_utilization: float | None = None,
                  max_model_len: int | None = None):
    """The memory stage of :func:`diagnose` for every model x checkpoint quantization x GPU preset, ``tp`` GPUs each.

    Returns a ``pandas.DataFrame`` (:data:`MEMORY_MATRIX_COLUMNS`): per row the GPU's memory, the weights per rank,
    the attention backend vLLM selects (``none`` where it has none: the cache is then the model dtype's; where the
    answer depends on this host's FlashInfer, see :func:`diagnose`, the cache dtype does too), the KV cache vLLM
    allocates for it (dtype, bytes per token), ``max_tokens`` (vLLM's KV-cache size), ``max_model_len``,
    ``fits`` (``yes``/``no``; ``not reached`` when vLLM refuses the configuration) and ``fix`` (the changes the memory
    stage found to make it fit, ``"; "``-separated; ``none found`` when it found none; ``-`` when it fits or was not
    reached). All inputs are checked before the first
    probe (:class:`UserInputError`)."""
    import pandas as pd

    lists = {}
    for name, v in (("models", models), ("quantizations", quantizations), ("gpus", gpus)):
        if isinstance(v, str):
            raise UserInputError(f"{name} {v!r} is one string; accepted: a list of them, e.g. {name}=[{v!r}]")
        lists[name] = list(v)
        if not lists[name]:
            raise UserInputError(f"the memory matrix needs at least one of {name}")
    for gpu in lists["gpus"]:
        if str(gpu).lower() not in GPUS:
            raise UserInputError(f"the memory matrix takes GPU presets (their memory is known); {gpu!r} is not one; "
                                 f"accepted: {', '.join(GPUS)}")
    settings = dict(gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len)
    for model in lists["models"]:
        for q in lists["quantizations"]:
            resolve(model, lists["gpus"][0], kv_cache_dtype, tp, with_plugin, quantization=q, **settings)
    rows = [_memory_row(diagnose(model, str(gpu).lower(), kv_cache_dtype, tp=tp, with_plugin=with_plugin,
                                 quantization=q, **settings), str(q).lower(), str(gpu).lower())
            for model in lists["models"] for q in lists["quantizations"] for gpu in lists["gpus"]]
    df = pd.DataFrame(rows, columns=list(MEMORY_MATRIX_COLUMNS))
    df.attrs.update(tp=tp, kv_cache_dtype=kv_cache_dtype, with_plugin=with_plugin)
    return df


def memory_matrix_markdown(df) -> str:
    """A :func:`memory_matrix` frame as a Markdown table (one row per model x quantization x GPU)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.astype(object).where(df.notna(), None).itertuples(index=False):
        lines.append("| " + " | ".join("" if v is None else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def write_memory_matrix(df, out_dir: str | os.PathLike = "results") -> dict[str, Path]:
    """Write a :func:`memory_matrix` frame as ``<out_dir>/diagnose_memory_matrix.csv`` and ``.md``, each atomically.
    Returns ``{"csv": path, "md": path}``."""
    out = Path(out_dir)
    csv_path, md_path = out / f"{MEMORY_MATRIX_STEM}.csv", out / f"{MEMORY_MATRIX_STEM}.md"
    md = memory_matrix_markdown(df)
    atomic_write_all([(csv_path, lambda tmp: df.to_csv(tmp, index=False)),
                      (md_path, lambda tmp: Path(tmp).write_text(md))])
    return {"csv": csv_path, "md": md_path}
