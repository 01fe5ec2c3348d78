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
    with pytest.raises(UserInputError, match="holds a NUL byte"):   # no file system takes it (Path.resolve raised)
        expand_path(str(tmp_path / "a\x00b"), "thing")


# ---- the one output-path rule: checked first, created only when written (bad-input issue, classes 2, 5, 6, 9) -----

def test_writable_dir_creates_nothing_and_names_what_blocks_it(tmp_path):
    new = tmp_path / "a" / "b"
    assert writable_dir(new) == new and not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserInputError, match="is a file"):
        writable_dir(tmp_path / "file" / "sub")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(UserInputError, match="is a loop of symbolic links"):
        writable_dir(loop)
    with pytest.raises(UserInputError, match="'.' is the current directory"):
        writable_file(".")
    with pytest.raises(UserInputError, match="is empty"):
        writable_file("")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_writable_dir_refuses_a_read_only_parent(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(UserInputError, match="where it would be made, is not"):
            writable_dir(ro / "new")
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("argv, names", [
    (["bench", "kernel", "--tag", "../x"], "--tag '../x'"),
    (["bench", "indexer", "--tag", "a b"], "--tag 'a b'"),
    (["bench", "kernel", "--out-dir", "{file}"], "is not a directory"),
    (["bench", "indexer", "--out-dir", "{file}/sub"], "is not a directory"),
    (["launch", "--model", "{model}", "--json-out", "{new}/a/b/rec.json", "--no-serve"], "needs a CUDA GPU"),
])
def test_arguments_are_named_before_the_gpu_and_nothing_is_left_behind(tmp_path, capsys, monkeypatch, argv, names):
    import json

    import sparse_mla.machine
    from sparse_mla.models import PRESET_CONFIGS

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: False)
    (tmp_path / "file").write_text("x")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(PRESET_CONFIGS["glm-5"]))
    before = sorted(tmp_path.rglob("*"))
    args = [a.format(file=tmp_path / "file", model=model, new=tmp_path / "new") for a in argv]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err
    assert sorted(tmp_path.rglob("*")) == before        # no folder made for a record that is never written


def test_make_checkpoint_writes_through_a_link_to_a_folder(tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    assert cli.main(["make-checkpoint", str(link)]) == 0
    assert link.is_symlink() and (target / "config.json").is_file() and (target / "model.safetensors").is_file()


def test_writable_dir_refuses_a_folder_where_none_can_be_made(tmp_path, monkeypatch):
    """os.access says yes where mkdir says no (/proc, no free inodes): one folder is made and removed to ask."""
    import tempfile

    def no_inodes(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", no_inodes)
    with pytest.raises(UserInputError, match=r"--out-dir '.*/new/sub' cannot be written \('.*', where it would be "
                                             r"made, refuses a new folder\): No space left on device"):
        writable_dir(tmp_path / "new" / "sub", "--out-dir")
    monkeypatch.undo()
    assert writable_dir(tmp_path / "new" / "sub") == tmp_path / "new" / "sub"
    assert sorted(p.name for p in tmp_path.iterdir()) == []          # the question leaves nothing behind


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize("path", ["/proc/x", "/sys/x", "/dev/x", "/dev/"])
def test_the_systems_own_folders_are_refused_by_name(path):
    """/proc exists and answered a new folder with ENOENT (issue 47, then named so); /dev takes a new folder from
    root, into a devtmpfs in memory (make-checkpoint /dev/x wrote there: the breaker, 2026-12-06). No output goes into
    the system's device, process or kernel-object folders; /dev/shm, shared memory scratch, is not one of them."""
    with pytest.raises(UserInputError, match=r"leads into /(proc|sys|dev), the folder of the system's devices, "
                                             r"processes or kernel objects; accepted: a folder on a disk"):
        writable_dir(path, "--out-dir")


def test_dev_shm_is_no_system_folder(tmp_path):
    import os

    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    assert str(writable_dir("/dev/shm/sparse-mla-test-out", "--out-dir")) == "/dev/shm/sparse-mla-test-out"
    assert not os.path.exists("/dev/shm/sparse-mla-test-out")
