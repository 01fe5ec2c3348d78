"""sparse_mla.records: the record header, read in this process, and where a GPU's records go."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from sparse_mla import records


def test_gpu_slug_names_the_gpu():
    assert records.gpu_slug("NVIDIA H200") == "h200"
    assert records.gpu_slug("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "rtx-pro-6000-blackwell-server-edition"
    assert records.gpu_slug("NVIDIA GeForce RTX 4090") == "rtx-4090" and records.gpu_slug("NVIDIA") == "gpu"
    if not torch.cuda.is_available():
        assert records.gpu_slug() == "gpu"


def test_gpu_record_dir():
    assert records.gpu_record_dir("h200") == Path("results") / "h200"
    assert records.gpu_record_dir() == Path("results") / records.gpu_slug()


def test_environment_is_read_here(monkeypatch):
    import triton
    import vllm

    monkeypatch.setattr(sys, "argv", ["sparse-mla", "bench", "kernel", "--quick"])
    env = records.environment()
    assert env["command"] == "sparse-mla bench kernel --quick"
    assert (env["torch"], env["triton"], env["vllm"]) == (torch.__version__, triton.__version__, vllm.__version__)
    assert ("gpu" in env) == torch.cuda.is_available()
    assert records.environment("my command")["command"] == "my command"


def test_revision_is_read_from_git_or_from_a_copys_revision_file(tmp_path):
    import re
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import sparse_mla.records as records

    assert re.match(r"[0-9a-f]{40}(\+dirty)?", records.revision()), records.revision()   # this checkout's git
    shutil.copytree(Path(records.__file__).parents[1], tmp_path / "lib" / "sparse_mla",   # the package
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = "import sparse_mla.records as r; print(r.__file__); print(r.revision())"
    env = {"PYTHONPATH": str(tmp_path / "lib"), "PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1"}

    def copy_says():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        where, rev = out.stdout.strip().splitlines()[-2:]
        assert where.startswith(str(tmp_path)), where
        return rev

    assert copy_says().startswith("unknown: not a git checkout")
    (tmp_path / "REVISION").write_text("not a sha\n")
    assert copy_says().startswith("unknown")
    (tmp_path / "REVISION").write_text("ab" * 20 + "\n")
    assert copy_says() == "ab" * 20 + " (REVISION file: the tree copied to this machine)"
