"""Fixtures for the serve benchmark's CPU tests: a fake ``vllm`` command on PATH (``fake_vllm.py``, a stand-in for
``vllm serve`` only) and a model directory that holds a DSA ``config.json`` and a small local tokenizer (for vLLM's
``vllm bench serve`` client, which builds its prompts with the checkpoint's tokenizer)."""
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

FAKE = Path(__file__).with_name("fake_vllm.py")


@pytest.fixture
def vllm_on_path(tmp_path, monkeypatch):
    """A ``vllm`` executable first on PATH that runs ``fake_vllm.py`` with this interpreter."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vllm"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return exe


@pytest.fixture(scope="session")
def tokenizer_files(tmp_path_factory):
    """A byte-level BPE tokenizer of 2048 tokens, trained locally as ``make-checkpoint`` trains its own (no
    download); the folder holds only its files."""
    from sparse_mla.launch.checkpoint import _train_tokenizer

    d = tmp_path_factory.mktemp("tokenizer")
    _train_tokenizer(2048).save_pretrained(str(d))
    return d


@pytest.fixture
def model_dir(tmp_path, tokenizer_files):
    """A GLM-5-like config (index_topk 128, vocab 2048, one MTP layer) and the local tokenizer; no weights are
    needed by a fake server."""
    d = tmp_path / "model"
    shutil.copytree(tokenizer_files, d)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "num_attention_heads": 64,
        "kv_lora_rank": 512, "index_topk": 128, "vocab_size": 2048, "num_hidden_layers": 2,
        "num_nextn_predict_layers": 1, "max_position_embeddings": 8192}))
    return d


@pytest.fixture
def fake_server(tmp_path):
    """Start ``fake_vllm.py serve`` with extra environment on a free port; yields ``start(**env) -> base_url``.
    Every server started is killed at the end."""
    from sparse_mla.launch.server import free_port

    procs = []

    def start(*extra_args, **env):
        port = free_port()
        log = open(tmp_path / f"fake_{port}.log", "w")
        p = subprocess.Popen([sys.executable, str(FAKE), "serve", "m", "--port", str(port), *extra_args],
                             env={**os.environ, **{k: str(v) for k, v in env.items()}}, stdout=log,
                             stderr=subprocess.STDOUT)
        procs.append((p, log))
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return url
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("fake server did not start")

    yield start
    for p, log in procs:
        p.kill()
        p.wait()
        log.close()
