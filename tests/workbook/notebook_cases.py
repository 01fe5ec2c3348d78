"""Small notebooks for the chain's tests, written as JupyterLab would save them."""
from __future__ import annotations

import nbformat


def write_notebook(path, *sources, parameters="x = 1"):
    """A python3 notebook at ``path``: a papermill ``parameters`` cell holding ``parameters``, then one code cell
    per source."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = [nbformat.v4.new_code_cell(parameters)]
    cells[0].metadata["tags"] = ["parameters"]
    cells += [nbformat.v4.new_code_cell(s) for s in sources]
    nb.cells = cells
    nbformat.write(nb, str(path))
