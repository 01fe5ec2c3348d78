"""refresh_source: a notebook source keeps outputs (and counts) only in its checked cells, and no run metadata."""
from __future__ import annotations

import json

import pytest

from sparse_mla.workbook.sources import refresh_source


def _nb(cells, **meta):
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3"}, **meta}, "nbformat": 4,
            "nbformat_minor": 5}


def _code(src, outputs=(), count=None, **meta):
    return {"cell_type": "code", "source": src, "outputs": list(outputs), "execution_count": count,
            "metadata": meta}


def test_only_checked_outputs_kept(tmp_path):
    out = [{"output_type": "stream", "name": "stdout", "text": "42\n"}]
    src = tmp_path / "a.ipynb"
    src.write_text(json.dumps(_nb([_code("# NBVAL_CHECK_OUTPUT\nprint(42)"), _code("x = 1", out, 3)])))
    done = tmp_path / "done.ipynb"
    done.write_text(json.dumps(_nb([_code("# parameters injected"), _code("# NBVAL_CHECK_OUTPUT\nprint(42)", out, 2,
                                                                              papermill={"duration": 1.0}),
                                    _code("x = 1", out, 3)], papermill={"duration": 9})))
    assert refresh_source(src, done) == 1
    nb = json.loads(src.read_text())
    assert nb["cells"][0]["outputs"] == out and nb["cells"][0]["execution_count"] == 2
    assert nb["cells"][1]["outputs"] == [] and nb["cells"][1]["execution_count"] is None
    assert "papermill" not in nb["metadata"] and all(c["metadata"] == {} for c in nb["cells"])


def test_checked_cell_missing_from_the_executed_copy(tmp_path):
    src = tmp_path / "a.ipynb"
    src.write_text(json.dumps(_nb([_code("# NBVAL_CHECK_OUTPUT\nprint(1)")])))
    done = tmp_path / "done.ipynb"
    done.write_text(json.dumps(_nb([_code("# NBVAL_CHECK_OUTPUT\nprint(2)")])))
    before = src.read_text()
    with pytest.raises(ValueError, match="checked cell 0 has no executed counterpart"):
        refresh_source(src, done)
    assert src.read_text() == before


def test_the_chains_notebooks_are_valid_nbformat_with_cell_ids():
    """Every notebook of the chain validates as nbformat 4.5 as saved, cell ids included (nbformat otherwise warns on
    every read, and `sparse-mla run` printed that warning for notebook 01)."""
    import json
    import warnings
    from pathlib import Path

    import nbformat

    notebooks = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert notebooks
    for path in notebooks:
        raw = json.loads(path.read_text())
        assert all(isinstance(c.get("id"), str) and c["id"] for c in raw["cells"]), path.name
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            nbformat.validate(nbformat.reads(path.read_text(), as_version=4))
