"""sparse_mla.gguf.metadata: the config a glm-dsa GGUF's metadata describes is the checkpoint's."""
from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.gguf.metadata import config_from_gguf  # noqa: E402

pytestmark = [pytest.mark.gguf, pytest.mark.every_line]


def test_config_from_gguf_is_the_checkpoint_config(q4k_gguf):
    _, cfg, _, r = q4k_gguf
    got = config_from_gguf(r)
    for k, v in got.items():
        if k in ("rms_norm_eps",):
            assert v == pytest.approx(cfg[k], rel=2**-23)   # GGUF stores float32
        elif k != "dtype":
            assert cfg[k] == v, k
