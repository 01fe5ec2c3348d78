"""The command line: help, and GPU-only commands failing clearly (exit 2, one line) on a CPU-only machine."""
from __future__ import annotations

import pytest

from sparse_mla import cli


def test_help_lists_every_step(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("run", "diagnose", "bench", "make-checkpoint", "launch"):
        assert cmd in out


def test_bench_without_gpu_is_one_clear_line(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["bench", "kernel", "--tokens", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a CUDA GPU" in err[0]


@pytest.mark.parametrize("args, match", [
    (["bench", "kernel", "--tokens", "0"], "--tokens 0"),
    (["bench", "kernel", "--cache-tokens", "100"], "--cache-tokens 100"),
    (["bench", "kernel", "--configs", "64,64"], "--configs '64,64'"),
    (["run", "--profile", "tpu"], "unknown profile 'tpu'"),
    (["run", "--only", "99"], "no notebook matches '99'"),
])
def test_bad_arguments(args, match, capsys):
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0], err
