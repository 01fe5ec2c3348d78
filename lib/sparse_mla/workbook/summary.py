"""Headline results of each notebook, collected by ``sparse-mla run`` into ``summary.{json,md}`` files.

A notebook ends with ``summary.report(title, values)``: it displays a small table and, in the same output, the values
as JSON under the MIME type :data:`MIME` (the way scrapbook's ``glue`` does, without the dependency). papermill keeps
that output in the executed notebook, so the chain reads the numbers back from ``results/NN_*.ipynb`` instead of
re-typing or re-computing them: :func:`collect` gathers every executed notebook's report, :func:`write_summary`
writes ``summary.json`` (machine-readable) and ``summary.md`` (one table per notebook) atomically.

Each entry names the notebook, the parameter profile it ran under (``cpu`` / ``gpu``, stored by the chain in the
notebook's metadata), papermill's injected parameters and its end time, so that records from different machines are
not mistaken for one run.

Two levels: each profile folder (``results/cpu/``, ``results/gpu/``) gets its own ``summary.{json,md}``
(:func:`write_summary`), and ``results/summary.{json,md}`` puts all profile folders side by side
(:func:`write_overview`), so a CPU run and a GPU run can be read in one place without one replacing the other.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Collection

from ..files import atomic_write_text
from ..errors import UserInputError

MIME = "application/vnd.sparse-mla.summary+json"
NOTEBOOK_RE = re.compile(r"^\d\d_.+\.ipynb$")


def _clean(value: Any, key: str, _path: tuple[int, ...] = ()) -> Any:
    """JSON-safe copy: numpy/torch scalars to Python, floats rounded to 4 significant digits, NaN/inf to strings.
    Raises :class:`UserInputError` for another type or a list / dict that contains itself."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**100:
        raise UserInputError(f"summary value {key!r} is an integer of {value.bit_length()} bits; accepted: integers "
                             f"below 1e100 (use a float or a string for larger ones)")
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return float(f"{value:.4g}") if math.isfinite(value) else str(value)
    if isinstance(value, (dict, list, tuple)):
        if id(value) in _path:
            raise UserInputError(f"summary value {key!r} contains itself; accepted: lists / dicts without cycles")
        if len(_path) >= 32:
            raise UserInputError(f"summary value {key!r} is nested deeper than 32 levels; accepted: shallow lists / "
                                 f"dicts (a summary is read by people)")
        inner = (*_path, id(value))
        if isinstance(value, dict):
            return {str(k): _clean(v, f"{key}.{k}", inner) for k, v in value.items()}
        return [_clean(v, key, inner) for v in value]
    raise UserInputError(f"summary value {key!r} has type {type(value).__name__}; accepted: bool, int, float, str, "
                         f"None, or lists / dicts of them")


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(_text, value)) or "-"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items()) or "-"
    if value is None:
        return "-"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(values: dict) -> str:
    rows = [f"| {_cell(k)} | {_cell(_text(v))} |" for k, v in values.items()]
    return "\n".join(["| result | value |", "| --- | --- |", *rows])


class Report(dict):
    """The cleaned values :func:`report` returns: a plain dict that IPython does not display again (the table and the
    JSON are already the cell's output; a notebook's last expression would otherwise print the dict too)."""

    def _ipython_display_(self) -> None:
        return None


def report(title: str, values: dict[str, Any]) -> dict:
    """Display a notebook's headline results and mark them for :func:`collect`.

    Args:
        title: one line naming the step (``"Diagnose"``, ``"Kernel"``...).
        values: ordered ``{label: value}``; values are bool / int / float / str / None or lists and dicts of them
            (numpy and torch scalars are converted; floats are kept to 4 significant digits).

    Returns:
        The cleaned values. Raises :class:`UserInputError` for an empty title or a value of another type.
    """
    if not isinstance(title, str) or not title.strip() or "\n" in title:
        raise UserInputError(f"summary title {title!r:.80} is not accepted; accepted: a non-empty one-line string")
    if not isinstance(values, dict) or not values:
        raise UserInputError(f"summary values {values!r:.80} are not a non-empty dict; accepted: {{label: value}}")
    clean = {str(k): _clean(v, str(k)) for k, v in values.items()}
    from IPython.display import display

    md = f"**Summary · {title}** (collected by `sparse-mla run` into `results/<profile>/summary.md`)\n\n{_table(clean)}"
    # [label, value] pairs: nbformat writes JSON objects with sorted keys, pairs keep the notebook's order
    display({MIME: {"title": title, "values": [[k, v] for k, v in clean.items()]}, "text/markdown": md,
             "text/plain": "\n".join(f"{k}: {_text(v)}" for k, v in clean.items())}, raw=True)
    return Report(clean)


def read_reports(notebook: str | os.PathLike) -> list[dict]:
    """The :func:`report` outputs of one executed notebook, in cell order."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    meta = nb.metadata.get("papermill", {})
    profile = nb.metadata.get("sparse_mla", {}).get("profile")
    parameters, executed = meta.get("parameters", {}), meta.get("end_time")
    # what the chain wrote has these types; anything else is not a record of ours (collect() lists it as unreadable)
    if not (isinstance(parameters, dict) and isinstance(executed, (str, type(None)))
            and isinstance(profile, (str, type(None)))):
        raise ValueError("papermill/sparse_mla metadata of unexpected types")
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = out.get("data", {})
            if MIME in data and isinstance(data[MIME], dict) and "title" in data[MIME]:
                title, values = data[MIME]["title"], dict(data[MIME]["values"])
                if not isinstance(title, str) or not all(isinstance(k, str) for k in values):
                    raise ValueError(f"{MIME} output with a non-string title or label")
                found.append({"notebook": Path(notebook).name, "title": title, "profile": profile,
                              "parameters": {str(k): v for k, v in parameters.items()}, "executed": executed,
                              "values": values})
    return found


def executed_notebooks(folder: Path) -> list[Path]:
    """``NN_*.ipynb`` entries of ``folder`` in name order, without the chain's ``*.failed.ipynb`` partial outputs and
    without special files (a FIFO would block the reader forever)."""
    return [p for p in sorted(folder.iterdir()) if NOTEBOOK_RE.match(p.name) and not p.name.endswith(".failed.ipynb")
            and (p.is_file() or p.is_dir() or not p.exists())]


def collect(results_dir: str | os.PathLike, names: Collection[str] | None = None) -> list[dict]:
    """Reports of every executed ``NN_*.ipynb`` in ``results_dir`` (name order); notebooks without one are skipped,
    a notebook that cannot be read gives an entry saying so (a stray file must not fail the chain). ``names``: the
    file names of the chain's notebooks; an executed notebook of another name (left by an earlier chain whose
    notebooks were since renamed) is then not reported.

    Raises :class:`UserInputError` when ``results_dir`` is not a directory."""
    d = Path(results_dir)
    if not d.is_dir():
        raise UserInputError(f"results directory {str(results_dir)!r} is not a directory; accepted: the folder "
                             f"holding executed NN_*.ipynb notebooks")
    out = []
    for p in executed_notebooks(d):
        if names is not None and p.name not in names:
            continue
        try:
            out += read_reports(p)
        except Exception as e:  # noqa: BLE001  (nbformat raises several types for a bad file)
            out.append({"notebook": p.name, "title": f"{p.name} (unreadable)", "profile": None, "parameters": {},
                        "executed": None, "values": {"error": f"{type(e).__name__}: {str(e)[:200]}"}})
    return out


def _sections(reports: list[dict], level: str = "##") -> list[str]:
    lines = []
    for r in reports:
        when = (r.get("executed") or "")[:10] or "unknown date"
        params = ", ".join(f"{k}={v!r}" for k, v in r["parameters"].items()) or "defaults"
        lines += [f"{level} {r['title']}", "",
                  f"`{r['notebook']}`, profile `{r.get('profile') or 'unknown'}`, parameters: {params}; "
                  f"executed {when}.", "", _table(r["values"]), ""]
    return lines


def to_markdown(reports: list[dict]) -> str:
    lines = ["# Workbook summary", "",
             "Collected by `sparse-mla run` from the executed notebooks in this folder (each notebook's last cell, "
             "`sparse_mla.workbook.summary.report`). Profile and date are per notebook: notebooks run on different machines "
             "are different runs.", ""]
    return "\n".join(lines + _sections(reports))


def write_summary(results_dir: str | os.PathLike, names: Collection[str] | None = None) -> dict[str, Path]:
    """Write ``summary.json`` and ``summary.md`` into ``results_dir`` (each atomically) from the notebooks
    :func:`collect` reports (``names`` as there); returns their paths."""
    d = _folder(results_dir)
    reports = collect(d, names)
    return _write_pair(d, {"notebooks": reports}, to_markdown(reports))


def _folder(path) -> Path:
    if path is None or str(path).strip() == "":
        raise UserInputError(f"results directory {path!r} is empty; accepted: a directory path")
    return Path(path)


def _write_pair(d: Path, doc: dict, md: str) -> dict[str, Path]:
    """Both texts are made before either file is written, so the pair never disagrees after a failure."""
    text = json.dumps(doc, indent=1) + "\n"
    paths = {"json": d / "summary.json", "md": d / "summary.md"}
    atomic_write_text(paths["json"], text)
    atomic_write_text(paths["md"], md)
    return paths


def profile_folders(results_root: str | os.PathLike) -> list[Path]:
    """Sub-folders of ``results_root`` that hold executed ``NN_*.ipynb`` notebooks (name order)."""
    root = _folder(results_root)
    if not root.is_dir():
        raise UserInputError(f"results directory {str(results_root)!r} is not a directory; accepted: the folder "
                             f"holding one sub-folder per profile (results/)")
    folders = []
    for d in sorted(root.iterdir()):
        try:
            if d.is_dir() and executed_notebooks(d):
                folders.append(d)
        except OSError:   # a folder this user cannot list is no profile folder of this run
            continue
    return folders


def write_overview(results_root: str | os.PathLike, names: Collection[str] | None = None) -> dict[str, Path]:
    """Write ``summary.json`` (``{"profiles": {folder: [reports]}}``) and ``summary.md`` (one part per profile
    folder) into ``results_root``, each atomically, from the executed notebooks of every profile folder under it
    (``names`` as in :func:`collect`); returns their paths. Raises :class:`UserInputError` when ``results_root`` is
    not a directory."""
    root = _folder(results_root)
    parts = {d.name: collect(d, names) for d in profile_folders(root)}
    if names is not None:   # a folder holding only notebooks of an earlier chain is no profile of this one
        parts = {k: v for k, v in parts.items() if v}
    lines = ["# Workbook summary, all profiles", "",
             "Collected by `sparse-mla run` from the executed notebooks under `results/<profile>/` (each notebook's "
             "last cell, `sparse_mla.workbook.summary.report`). Each profile folder is a separate run, often on a different "
             "machine: compare the profile and the date of each notebook before comparing numbers.", ""]
    for name, reports in parts.items():
        lines += [f"## Profile folder `{name}/`", "", *_sections(reports, "###")]
    if not parts:
        lines += ["No executed notebooks yet: `sparse-mla run` writes them to `results/<profile>/`.", ""]
    return _write_pair(root, {"profiles": parts}, "\n".join(lines))
