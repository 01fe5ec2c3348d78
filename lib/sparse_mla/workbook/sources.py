"""Notebook sources kept clean: outputs only where nbval checks them, no run metadata.

``notebooks/NN_*.ipynb`` are what a reader opens and what ``pytest --nbval-lax`` executes. nbval compares only the
cells marked ``# NBVAL_CHECK_OUTPUT``, so those are the only cells whose outputs a source keeps; the executed copy,
with every output, is ``results/<profile>/NN_*.ipynb`` (``sparse-mla run``). :func:`refresh_source` takes the checked
outputs from such an executed copy (matched by cell source; papermill's injected-parameters cell is skipped) and
drops papermill metadata, every other output and the other cells' execution counts.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..files import atomic_write_text

CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
_KEEP_CELL_METADATA = ("tags",)
_KEEP_NB_METADATA = ("kernelspec", "language_info")


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def refresh_source(source: Path, executed: Path) -> int:
    """Rewrite the notebook ``source`` clean, with its checked cells' outputs from ``executed``.

    Returns the number of checked cells. Raises ValueError naming the cell when a checked cell of ``source`` has
    no cell of the same source in ``executed`` (the executed copy is of another version)."""
    nb = json.loads(Path(source).read_text())
    done = json.loads(Path(executed).read_text())
    outputs = {_src(c): c for c in done["cells"] if c.get("cell_type") == "code"}
    checked = 0
    for i, cell in enumerate(nb["cells"]):
        cell["metadata"] = {k: v for k, v in cell.get("metadata", {}).items() if k in _KEEP_CELL_METADATA}
        if cell.get("cell_type") != "code":
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            continue
        cell["execution_count"] = None
        text = _src(cell)
        if CHECK_MARK in text:
            if text not in outputs:
                raise ValueError(f"{source}: checked cell {i} has no executed counterpart in {executed}")
            # nbval treats a cell without an execution count as never run: a checked cell keeps its count
            cell["outputs"] = outputs[text].get("outputs", [])
            cell["execution_count"] = outputs[text].get("execution_count")
            checked += 1
        else:
            cell["outputs"] = []
    nb["metadata"] = {k: v for k, v in nb.get("metadata", {}).items() if k in _KEEP_NB_METADATA}
    atomic_write_text(Path(source), json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return checked
