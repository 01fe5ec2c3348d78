"""``sparse_mla.machine``: the cache folders vLLM, FlashInfer and Triton derive from the environment, as each library
derives them (asked of vLLM's ``envs``, Triton's ``knobs`` and, in a fresh process, FlashInfer's ``jit.env``), and the
check before a command starts that each can be made and written -- ``HOME=/proc/self`` ended in FlashInfer's
``makedirs`` traceback (issue 47, breaker round 7, e13)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sparse_mla import machine
from sparse_mla.errors import UserInputError

VARIABLES = [v for _, chain in machine.CACHE_FOLDERS for v, _ in chain if v != "HOME"] + \
    [v for _, v in machine.NAMED_CACHE_FOLDERS]


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """No cache variable set, HOME a fresh folder."""
    for v in VARIABLES:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.mark.parametrize("env", [{}, {"XDG_CACHE_HOME": "x", "TRITON_HOME": "t"},
                                 {"XDG_CACHE_HOME": "x", "VLLM_CACHE_ROOT": "v", "TRITON_HOME": "t",
                                  "TRITON_CACHE_DIR": "c"}])
def test_vllm_and_triton_folders_are_the_libraries_own(bare, monkeypatch, env):
    import triton
    import vllm.envs

    for k, v in env.items():
        monkeypatch.setenv(k, str(bare / v))
    folders = machine.cache_folders()
    assert folders["vLLM"] == vllm.envs.VLLM_CACHE_ROOT
    if env:          # Triton's default home is read at its import (the fresh process below asks it)
        assert folders["Triton"] == triton.knobs.cache.dir


@pytest.mark.parametrize("env", [{}, {"FLASHINFER_WORKSPACE_BASE": "f"}])
def test_flashinfer_and_triton_folders_under_home_are_their_own(bare, env):
    """FlashInfer derives its folder once, at import (and makes it there), and Triton its default home: asked in a
    fresh process."""
    pytest.importorskip("flashinfer")
    env = {**os.environ, **{k: str(bare / v) for k, v in env.items()}}
    code = ("import json, triton, flashinfer.jit.env as e; from sparse_mla.machine import cache_folders; "
            "print(json.dumps([cache_folders(), {'FlashInfer': str(e.FLASHINFER_CACHE_DIR), "
            "'Triton': triton.knobs.cache.dir}]))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    ours, theirs = json.loads(p.stdout.strip().splitlines()[-1])
    assert {k: ours[k] for k in theirs} == theirs


@pytest.mark.parametrize("home, says", [
    ("/proc/self", "HOME='/proc/self' cannot hold the caches of vLLM, FlashInfer and Triton below it "
                   "(/proc/self/.cache/vllm, /proc/self/.cache/flashinfer, /proc/self/.triton/cache): it leads into "
                   "/proc"),
    ("/dev/null", "(/dev/null is not a folder)"),
])
def test_a_home_that_cannot_hold_the_caches_is_named_with_what_to_set(bare, monkeypatch, home, says):
    monkeypatch.setenv("HOME", home)
    with pytest.raises(UserInputError) as e:
        machine.check_environment()
    assert says in str(e.value) and str(e.value).endswith(
        "accepted: HOME a folder this user may write, on a disk, or VLLM_CACHE_ROOT, FLASHINFER_WORKSPACE_BASE and "
        "TRITON_CACHE_DIR set to one"), str(e.value)
    for v in ("VLLM_CACHE_ROOT", "FLASHINFER_WORKSPACE_BASE"):           # each named cache leaves the list
        monkeypatch.setenv(v, str(bare / v))
    with pytest.raises(UserInputError, match=r"the caches of Triton below it \(.*; accepted: .* or TRITON_CACHE_DIR "
                                             r"set to one$"):
        machine.check_environment()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(bare / "t"))
    machine.check_environment()


def test_a_relative_home_is_named_as_relative(bare, monkeypatch):
    """``HOME=relhome`` (no such folder here) said ``( is not a folder)``: the walk up its parts ended at ''
    (issue 47, round 8). The libraries read a relative home against each process's folder: refused as relative."""
    monkeypatch.setenv("HOME", "relhome")
    with pytest.raises(UserInputError) as e:
        machine.check_environment()
    assert str(e.value).startswith("HOME='relhome' is a relative path: the caches of vLLM, FlashInfer and Triton "
                                   "below it (relhome/.cache/vllm, "), str(e.value)
    assert "accepted: HOME an absolute path" in str(e.value) and "( is" not in str(e.value)
    for v in ("VLLM_CACHE_ROOT", "FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR"):   # no cache below HOME: no matter
        monkeypatch.setenv(v, str(bare / v))
    machine.check_environment()


@pytest.mark.parametrize("var, value, says", [
    ("FLASHINFER_WORKSPACE_BASE", "/proc/x", "FLASHINFER_WORKSPACE_BASE='/proc/x' cannot hold FlashInfer's cache: it "
                                            "leads into /proc"),
    ("TRITON_HOME", "/dev/null", "TRITON_HOME='/dev/null' cannot hold Triton's cache (/dev/null is not a folder)"),
    ("TRITON_CACHE_DIR", "/sys/x", "TRITON_CACHE_DIR='/sys/x' cannot hold Triton's cache: it leads into /sys"),
    ("TORCHINDUCTOR_CACHE_DIR", "/proc/x", "TORCHINDUCTOR_CACHE_DIR='/proc/x' cannot hold torch's inductor's cache: "
                                          "it leads into /proc"),
    ("TORCHINDUCTOR_CACHE_DIR", "/dev/null", "TORCHINDUCTOR_CACHE_DIR='/dev/null' cannot hold torch's inductor's "
                                            "cache (/dev/null is not a folder)"),
])
def test_each_cache_variable_is_checked_like_vllms(bare, monkeypatch, var, value, says):
    monkeypatch.setenv(var, value)
    with pytest.raises(UserInputError) as e:
        machine.check_environment()
    assert str(e.value).startswith(says) and str(e.value).endswith(f", or {var} unset"), str(e.value)


@pytest.mark.parametrize("var", VARIABLES)
def test_a_relative_cache_variable_is_refused_as_relative(bare, monkeypatch, var):
    """``XDG_CACHE_HOME=relcache`` was accepted and vLLM made ./relcache/vllm in the folder the command started in
    (issue 47, round 9, v25): every cache variable, like HOME, must be an absolute path (``~`` expanded)."""
    monkeypatch.chdir(bare)
    monkeypatch.setenv(var, "relcache")
    with pytest.raises(UserInputError) as e:
        machine.check_environment()
    assert str(e.value).startswith(f"{var}='relcache' is a relative path: ") and str(e.value).endswith(
        f"accepted: an absolute path (a folder this user may write, on a disk; ~ expanded), or {var} unset"), \
        str(e.value)
    assert not (bare / "relcache").exists()
    monkeypatch.setenv(var, "~/relcache")                                # ~ is the (absolute) home: accepted
    machine.check_environment()


def test_a_folder_this_user_may_not_write_is_named(bare, monkeypatch):
    """(Root may write any folder, so the answer of ``os.access`` is planted.)"""
    ro = bare / "ro"
    ro.mkdir()
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(ro / "vllm"))
    monkeypatch.setattr(machine.os, "access", lambda p, mode: os.fspath(p) != str(ro))
    with pytest.raises(UserInputError, match=rf"VLLM_CACHE_ROOT='{ro}/vllm' cannot hold vLLM's cache \({ro} is not "
                                             r"writable by this user\); accepted: a folder this user may write"):
        machine.check_environment()


def _descend(tmp_path, monkeypatch, length: int) -> int:
    """Change into a folder ``length`` bytes deep below ``tmp_path`` (one 200-byte name at a time: ``chdir`` of the
    whole path would itself be refused); its path's length."""
    monkeypatch.chdir(tmp_path)
    need = length - len(os.fsencode(str(tmp_path)))
    while need > 1:
        name = "e" * min(200, need - 1)
        os.mkdir(name)
        os.chdir(name)
        need -= len(name) + 1
    return len(os.fsencode(os.getcwd()))


@pytest.mark.parametrize("length, refused", [(4095, False), (4096, True), (4300, True)])
def test_a_working_folder_past_path_max_is_refused_before_torch_loads(tmp_path, monkeypatch, capsys, length,
                                                                      refused):
    """Breaker round 16's e11: from a folder whose path is 4096 bytes or more, torch's import dies in Intel oneMKL
    ("Cannot load libtorch_cpu.so", seen here at 4096, not at 4095); every command now refuses it first, by length."""
    assert _descend(tmp_path, monkeypatch, length) == length
    if not refused:
        machine.check_working_folder()
        return
    with pytest.raises(UserInputError, match=f"working folder's path is {length} bytes, past the system's PATH_MAX "
                                             f"of 4096"):
        machine.check_working_folder()
    from sparse_mla import cli

    assert cli.main(["diagnose", "--capability", "12.0"]) == 2
    assert "PATH_MAX of 4096" in capsys.readouterr().err


def test_a_working_folder_deleted_under_the_shell_is_refused_before_torch_loads(tmp_path, monkeypatch, capsys):
    """Breaker round 17's B9/U1: from a deleted working folder, make-checkpoint and run ended in a FileNotFoundError
    traceback and diagnose in torch's "Intel oneMKL FATAL ERROR"; every command now refuses it first."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(UserInputError, match="the working folder no longer exists"):
        machine.check_working_folder()
    from sparse_mla import cli

    assert cli.main(["make-checkpoint", str(tmp_path / "ck")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "working folder no longer exists" in err[0], err
    assert not (tmp_path / "ck").exists()


def test_a_logging_config_dictconfig_refuses_is_named_in_dictconfigs_words(tmp_path):
    """Breaker round 18's e06/e13: a handler class that does not exist, a root level that is no level: vLLM's import
    applied them and ended in a 30-70-line traceback. Checked up front by applying them as vLLM does, in a process of
    their own here (dictConfig closes the handlers it finds, pytest's among them)."""
    configs = {"handler": {"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}},
               "level": {"version": 1, "root": {"level": "NOPE"}}}
    for name, cfg in configs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(cfg))
    code = ("import os, sys\nfrom sparse_mla import machine\nfrom sparse_mla.errors import UserInputError\n"
            f"for name in {sorted(configs)!r}:\n"
            f"    os.environ['VLLM_LOGGING_CONFIG_PATH'] = os.path.join({str(tmp_path)!r}, name + '.json')\n"
            "    try:\n        machine._check_vllm_logging_config()\n        print(name, 'accepted')\n"
            "    except UserInputError as e:\n        print(name, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "handler VLLM_LOGGING_CONFIG_PATH=" in out and "(ValueError: Unable to configure handler 'h')" in out, out
    assert "(ValueError: Unable to configure root logger)" in out and "accepted" not in out.replace("; accepted:", ""), out
