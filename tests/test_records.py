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
