"""sparse_mla.extras: a missing extra is one clear error naming the extra and the install command."""
from __future__ import annotations

import sys

import pytest

from sparse_mla.extras import require
from sparse_mla.errors import UserInputError


def test_present_modules_pass():
    require("sparse-mla run", "json", "pandas")


def test_missing_modules_name_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "papermill", None)     # as if not installed
    monkeypatch.setitem(sys.modules, "nbformat", None)
    with pytest.raises(UserInputError) as e:
        require("sparse-mla run", "papermill", "nbformat", "json")
    assert str(e.value) == ("sparse-mla run needs the workbook extra (papermill, nbformat not installed); accepted: "
                            "pip install 'sparse-mla-workbook[workbook]' (from a checkout of it: pip install "
                            "'.[workbook]')")
