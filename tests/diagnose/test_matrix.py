"""``sparse_mla.diagnose.matrix``: the diagnosis for every GPU preset x KV-cache dtype, its gaps and its CSV / PNG records.
(The side-by-side matrix with the step 3 plugin is tested in test_plugin.py.)"""
from __future__ import annotations

import pytest

from sparse_mla.diagnose import GPU_PRESETS, KV_CACHE_DTYPES
from sparse_mla.errors import UserInputError
from sparse_mla.diagnose.matrix import diagnose_matrix, matrix_gaps, matrix_table, no_backend_pairs, write_matrix


def test_matrix_writes_csv_and_png(tmp_path):
    import pandas as pd

    df = diagnose_matrix("glm-5")
    assert list(df.columns) == ["gpu", "capability", "kv_cache_dtype", "selected", "n_valid"]
    assert len(df) == len(GPU_PRESETS) * len(KV_CACHE_DTYPES)
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
