"""sparse_mla.diagnose.probe: the stand-in libcuda.so.1 a GPU-less diagnosis builds. What stops the build is named in
one error (breaker round 17's B6/B7: a ``CC`` that does not compile, no compiler on PATH and a file-size limit ended
in tracebacks that advised installing gcc)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from sparse_mla.diagnose import probe
from sparse_mla.errors import UserInputError


def test_the_stand_in_builds_and_answers_no_device(tmp_path, monkeypatch):
    import ctypes
    import shutil

    monkeypatch.delenv("CC", raising=False)
    so = probe._build_stub_driver(["cuInit", "cuDeviceGetCount"])
    try:
        lib = ctypes.CDLL(str(so))
        assert lib.cuInit(0) == probe.CUDA_ERROR_NO_DEVICE
    finally:
        shutil.rmtree(so.parent)


@pytest.mark.parametrize("env, says", [({"CC": "false"}, "CC='false' failed; accepted: CC unset, or a C compiler"),
                                       ({"CC": "true"}, "CC='true' exited 0 without writing libcuda.so.1"),
                                       ({"PATH": "/nonexistent"}, "no C compiler (cc, gcc or clang) is on PATH")])
def test_a_compiler_that_cannot_build_it_is_named(monkeypatch, env, says):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if "CC" not in env:
        monkeypatch.delenv("CC", raising=False)
    with pytest.raises(UserInputError, match="could not build one in the temporary folder: " + says.replace("(", r"\(")
                       .replace(")", r"\)")):
        probe._build_stub_driver(["cuInit"])


def test_a_file_size_limit_is_named_as_such():
    """``ulimit -f 6`` (6 KiB): the linker dies of SIGXFSZ; the error names the limit, not a missing gcc."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (6144, 6144)); "
            "from sparse_mla.diagnose import probe; from sparse_mla.errors import UserInputError\n"
            "try:\n    probe._build_stub_driver(['cuInit'])\nexcept UserInputError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in __import__("os").environ.items() if k != "CC"})
    assert "stopped by a file-size limit (ulimit -f)" in out.stdout, (out.stdout, out.stderr)
    assert "accepted: no file-size limit" in out.stdout and "\n" not in out.stdout.strip()


def test_a_tmpdir_the_compiler_cannot_write_is_named(monkeypatch):
    """Breaker round 20 (U2): ``TMPDIR=/proc``: Python's tempfile falls back to /tmp, the compiler does not ("Cannot
    create temporary file in /proc/"); the error named CC instead of TMPDIR."""
    import tempfile

    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("TMPDIR", "/proc")
    monkeypatch.setattr(tempfile, "tempdir", None)      # recomputed from TMPDIR: /proc is not writable, /tmp is
    with pytest.raises(UserInputError, match=r"could not write its temporary files in TMPDIR='/proc'.*accepted: a "
                                             r"TMPDIR that is a writable folder, or TMPDIR unset"):
        probe._build_stub_driver(["cuInit"])
