"""sparse_mla.errors: paths the system cannot look up are bad input (one line, exit status 2), not tracebacks."""
from __future__ import annotations

import errno
import os

import pytest

from sparse_mla import cli
from sparse_mla.errors import UserInputError, expand_path, writable_dir, writable_file


def _too_long(tmp_path):
    name = "x" * (os.pathconf(str(tmp_path), "PC_NAME_MAX") + 1)
    return str(tmp_path / name)


def test_a_name_longer_than_the_file_system_allows_is_refused(tmp_path):
    bad = _too_long(tmp_path)
    for call in (lambda: expand_path(bad, "thing"), lambda: writable_dir(bad), lambda: writable_file(bad + ".json"),
                 lambda: writable_dir(bad + "/sub")):
        with pytest.raises(UserInputError, match="cannot be looked up"):
            call()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["diagnose", "--model", "{bad}"],
    ["diagnose", "--matrix", "--out-dir", "{bad}"],
    ["run", "--only", "01", "--out-dir", "{bad}"],
    ["make-checkpoint", "{bad}"],
    ["launch", "--model", "{bad}"],
])
def test_cli_long_names_give_one_line_and_status_2(tmp_path, capsys, argv):
    bad = _too_long(tmp_path)
    assert cli.main([a.format(bad=bad) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be looked up (File name too long)" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_may_not_be_searched_is_refused(tmp_path, monkeypatch):
    """As a non-root user ``Path.exists()`` raises PermissionError under a folder without search permission (the
    tests run as root, where it never does: the stat is made to fail the same way)."""
    real = os.stat

    def stat(p, *a, **k):
        if str(p).startswith(str(tmp_path / "private")):
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return real(p, *a, **k)

    monkeypatch.setattr(os, "stat", stat)
    with pytest.raises(UserInputError, match=r"private/x' cannot be looked up \(Permission denied\)"):
        expand_path(tmp_path / "private" / "x", "--out-dir")


def test_paths_that_do_not_exist_yet_are_still_accepted(tmp_path):
    assert expand_path(tmp_path / "new" / "x", "thing") == tmp_path / "new" / "x"
    assert expand_path(str(tmp_path / "a\x00b"), "thing").name == "a\x00b"
