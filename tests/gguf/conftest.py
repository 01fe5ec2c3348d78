"""The GGUF tests' shared file: glm-5-tiny with its MTP layer as a Q4_K GGUF (Q4_K, Q5_0 and F32 tensors)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def q4k_gguf(tmp_path_factory):
    """``(checkpoint folder, config, state dict, gguf-py reader of model-Q4_K.gguf)``."""
    gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")
    from sparse_mla.launch.checkpoint import load_checkpoint, make_checkpoint

    out = make_checkpoint(tmp_path_factory.mktemp("ga") / "ck", index_topk=256, mtp=True, seed=5, gguf=("Q4_K",))
    cfg, state = load_checkpoint(out)
    return out, cfg, state, gguf.GGUFReader(str(out / "model-Q4_K.gguf"))
