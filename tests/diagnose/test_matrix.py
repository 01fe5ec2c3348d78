"""``sparse_mla.diagnose.matrix``: the diagnosis for every GPU preset x KV-cache dtype (stock vLLM, and side by
side with the step 4 plugin), its gaps, both walls (attention, indexer) and its CSV / PNG records."""
from __future__ import annotations

import functools
import json

import pytest

from sparse_mla import diagnose as dg
from sparse_mla.diagnose import GPU_PRESETS, KV_CACHE_DTYPES
from sparse_mla.diagnose import matrix as mx
from sparse_mla.diagnose.matrix import (MATRIX_COLUMNS, diagnose_matrix, matrix_gaps, matrix_table, no_backend_pairs,
                                        write_matrix)
from sparse_mla.errors import UserInputError
from vllm_oracles import from_vllm_source, stock_indexer

OURS = "TRITON_MLA_SPARSE"


@pytest.mark.slow
def test_matrix_writes_csv_and_png(tmp_path):
    import pandas as pd

    df = diagnose_matrix("glm-5")
    assert list(df.columns) == list(MATRIX_COLUMNS)
    assert len(df) == len(GPU_PRESETS) * len(KV_CACHE_DTYPES)
    for gpu in ("rtx-3090", "a40", "gb10"):
        assert gpu in set(df["gpu"])
    cell = {(g, k): r for g, k, r in zip(df["gpu"], df["kv_cache_dtype"], df.to_dict(orient="records"))}
    # every cell's backend and indexer against oracles that are not the diagnosis: a reading of vLLM's source for the
    # selection, vLLM's own CUDA platform class for the indexer; the wall is the first of the two that is missing
    for (g, k), r in cell.items():
        cap = tuple(int(x) for x in GPU_PRESETS[g].split("."))
        selected, _ = from_vllm_source("glm-5", cap[0], k, 1)
        indexer = stock_indexer(cap)
        assert r["selected"] == (selected or "none"), (g, k)
        assert r["indexer"] == (indexer or "none"), (g, k)
        wall = "attention" if selected is None else "indexer" if indexer is None else None
        if wall:
            assert r["blocked_at"] == wall, (g, k)
    assert cell[("a100", "auto")]["blocked_at"] == "attention" and cell[("a100", "auto")]["indexer"] == "none"
    assert cell[("h200", "auto")]["engine_starts"] == "yes"
    pairs = no_backend_pairs(df)
    assert ("rtx-pro-6000", "bfloat16") in pairs and ("l40s", "auto") in pairs and ("h200", "auto") not in pairs
    paths = write_matrix(df, tmp_path / "results")
    assert pd.read_csv(paths["csv"], dtype={"capability": str}).equals(df)
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["diagnose_matrix.csv", "diagnose_matrix.png"]
    gaps = matrix_gaps(df)
    assert gaps["pairs"] == pairs
    assert "l40s" in gaps["all_kv"] and "h200" in gaps["complete"] and "rtx-pro-6000" in gaps["by_kv"]["bfloat16"]
    table = matrix_table(df)
    assert list(table.columns) == list(KV_CACHE_DTYPES) and table.loc["rtx-pro-6000 (12.0)", "bfloat16"] == "none"


def test_matrix_bad_input_before_any_probe():
    with pytest.raises(UserInputError, match="'local' accepted only"):
        diagnose_matrix("glm-5", gpus=["local"])
    with pytest.raises(UserInputError, match="at least one GPU"):
        diagnose_matrix("glm-5", gpus=[])
    with pytest.raises(UserInputError, match="nope"):
        diagnose_matrix("glm-5", kv_cache_dtypes=["nope"])
    # one string where a list goes: its letters were checked ("unknown KV-cache dtype 'f'", "unknown capability 'h'")
    with pytest.raises(UserInputError, match=r"kv_cache_dtypes 'fp8' is one string; accepted: .*\['fp8'\]"):
        diagnose_matrix("glm-5", kv_cache_dtypes="fp8")
    with pytest.raises(UserInputError, match=r"gpus 'h200' is one string; accepted: .*\['h200'\]"):
        diagnose_matrix("glm-5", gpus="h200")


# ---- diagnose --matrix --with-plugin: stock and with-plugin side by side ----------------------------------------

SMALL = dict(gpus=["rtx-pro-6000", "h200", "l40s"], kv_cache_dtypes=["auto", "bfloat16", "fp8"])


@pytest.fixture(scope="module")
def side_by_side(probes):
    probes("12.0", "bfloat16")
    return mx.diagnose_matrix("glm-5", with_plugin=True, **SMALL)


@pytest.mark.slow   # the side-by-side fixture probes a full matrix (about 13 s)
def test_matrix_side_by_side_columns(side_by_side):
    df = side_by_side
    assert list(df.columns) == list(mx.MATRIX_PLUGIN_COLUMNS)
    assert mx.is_side_by_side(df) and df.attrs["with_plugin"] is True
    assert len(df) == 9
    cell = {(g, k): (s, p) for g, k, s, p in zip(df["gpu"], df["kv_cache_dtype"], df["stock_selected"],
                                                 df["with_plugin_selected"])}
    assert cell[("rtx-pro-6000", "bfloat16")] == ("none", OURS)
    assert cell[("l40s", "auto")] == ("none", OURS) and cell[("l40s", "bfloat16")] == ("none", OURS)
    assert cell[("h200", "auto")] == ("FLASH_ATTN_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE")
    # fp8 on an L40S: no stock backend; with the plugin, ours if vLLM's base-class validation of our backend's
    # declarations accepts fp8 there (not the diagnosis asked again)
    from vllm.platforms.interface import DeviceCapability

    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    reasons = TritonMLASparseBackend.validate_configuration(
        head_size=576, dtype=__import__("torch").bfloat16, kv_cache_dtype="fp8", block_size=64, use_mla=True,
        has_sink=False, use_sparse=True, use_mm_prefix=False, use_per_head_quant_scales=False, attn_type="decoder",
        device_capability=DeviceCapability(8, 9))
    assert cell[("l40s", "fp8")] == ("none", "none" if reasons else OURS)
    changes = mx.matrix_changes(df)
    assert {("rtx-pro-6000", "bfloat16"), ("l40s", "auto"), ("l40s", "bfloat16")} <= \
        set(zip(changes["gpu"], changes["kv_cache_dtype"]))
    assert set(changes["with_plugin_selected"]) == {OURS}
    assert (("l40s", "fp8") in mx.no_backend_pairs(df)) == bool(reasons)
    assert ("rtx-pro-6000", "bfloat16") in mx.no_backend_pairs(df, "stock_selected")
    table = mx.matrix_table(df)
    assert list(table.columns.get_level_values(0).unique()) == ["stock", "with plugin"]
    assert table.loc["l40s (8.9)", ("with plugin", "auto")] == OURS


@pytest.mark.slow   # the side-by-side fixture probes a full matrix (about 13 s)
def test_matrix_side_by_side_files(side_by_side, tmp_path):
    import pandas as pd

    paths = mx.write_matrix(side_by_side, tmp_path)
    assert paths == {"csv": tmp_path / "diagnose_matrix_plugin.csv", "png": tmp_path / "diagnose_matrix_plugin.png"}
    assert pd.read_csv(paths["csv"], dtype={"capability": str}).equals(side_by_side)
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diagnose_matrix_plugin.csv", "diagnose_matrix_plugin.png"]
    fig = mx.plot_matrix(side_by_side)
    assert len(fig.axes) == 2
    assert [ax.get_title() for ax in fig.axes] == ["stock vLLM", "with sparse_mla.vllm_plugin"]


@pytest.mark.slow   # the side-by-side fixture probes a full matrix (about 13 s)
def test_matrix_heatmap_colours(side_by_side):
    """"none" is red in both panels and TRITON_MLA_SPARSE has a colour of its own."""
    import numpy as np

    fig = mx.plot_matrix_side_by_side(side_by_side)
    fig.canvas.draw()
    stock_ax, plugin_ax = fig.axes

    def colour(ax, gpu_row, kv_col):
        im = ax.get_images()[0]
        return tuple(np.round(im.cmap(im.norm(im.get_array()[gpu_row, kv_col]))[:3], 3))

    from matplotlib.colors import to_rgb

    red = tuple(np.round(to_rgb(mx._NONE_COLOR), 3))
    ours = tuple(np.round(to_rgb(mx._PLUGIN_COLOR), 3))
    rows = {g: i for i, g in enumerate(dict.fromkeys(side_by_side["gpu"]))}
    cols = {k: j for j, k in enumerate(dict.fromkeys(side_by_side["kv_cache_dtype"]))}
    assert colour(stock_ax, rows["l40s"], cols["auto"]) == red
    later = tuple(np.round(to_rgb(mx._LATER_COLOR), 3))
    by = {(g, k): r for g, k, r in zip(side_by_side["gpu"], side_by_side["kv_cache_dtype"],
                                       side_by_side.to_dict(orient="records"))}
    l40s = by[("l40s", "auto")]
    # the second wall: our attention backend, but the engine stops at the indexer unless ours takes it
    assert colour(plugin_ax, rows["l40s"], cols["auto"]) == (later if l40s["with_plugin_engine_starts"] == "no"
                                                             else ours)
    assert colour(plugin_ax, rows["rtx-pro-6000"], cols["bfloat16"]) == ours
    others = {colour(plugin_ax, rows["h200"], cols[k]) for k in cols}
    assert red not in others and ours not in others


@pytest.mark.slow   # a full matrix with the plugin in a CLI run (about 18 s)
def test_cli_matrix_with_plugin(run_cli, tmp_path, monkeypatch):
    """``sparse-mla diagnose --matrix --with-plugin`` (on a smaller GPU x KV grid, to keep the test short): the
    side-by-side table on stdout, the plugin CSV/PNG written, the stock-only files not touched."""
    monkeypatch.setattr(mx, "diagnose_matrix", functools.partial(mx.diagnose_matrix, **SMALL))
    rc, out, _ = run_cli("--matrix", "--with-plugin", "--out-dir", str(tmp_path))
    assert rc == 0
    assert "stock_selected" in out and "with_plugin_selected" in out and OURS in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diagnose_matrix_plugin.csv", "diagnose_matrix_plugin.png"]
    rc, out, _ = run_cli("--matrix", "--with-plugin", "--json", "--out-dir", str(tmp_path))
    doc = json.loads(out)
    assert rc == 0 and len(doc["rows"]) == 9 and doc["files"]["csv"].endswith("diagnose_matrix_plugin.csv")


@pytest.mark.slow   # the side-by-side fixture probes a full matrix (about 13 s)
def test_heatmap_legend_names_every_colour(side_by_side):
    """Each colour of the heatmap is in the legend with what it means; no other backend's colour is one of the two
    walls' (FLASHMLA_SPARSE was yellow next to the legend's orange)."""
    from matplotlib.colors import to_rgb

    fig = mx.plot_matrix_side_by_side(side_by_side)
    fig.canvas.draw()
    (legend,) = fig.legends
    labels = {t.get_text(): to_rgb(h.get_facecolor()) for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert labels["no attention backend"] == to_rgb(mx._NONE_COLOR)
    assert any(k.startswith("a backend, but the engine stops later") for k in labels)
    assert labels["TRITON_MLA_SPARSE (this workbook)"] == to_rgb(mx._PLUGIN_COLOR)
    shown = {b for p in ("stock_", "with_plugin_") for b in side_by_side[f"{p}selected"]} - {"none", "TRITON_MLA_SPARSE"}
    assert shown and shown <= set(labels)
    walls = {to_rgb(mx._NONE_COLOR), to_rgb(mx._LATER_COLOR)}
    for b in shown:
        r, g, bl = labels[b]
        assert labels[b] not in walls and not (r > 0.9 and bl < 0.75), (b, labels[b])   # no reds, oranges, yellows
