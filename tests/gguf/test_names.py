"""sparse_mla.gguf.names: every tensor of a glm-dsa GGUF maps to a name vLLM's load_weights takes, and every
checkpoint tensor is covered."""
from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.gguf.metadata import config_from_gguf  # noqa: E402
from sparse_mla.gguf.names import gguf_to_vllm_names  # noqa: E402
from sparse_mla.launch.checkpoint import expected_weight_shapes  # noqa: E402

pytestmark = [pytest.mark.gguf, pytest.mark.every_line]


def _per_expert(names, cfg):
    """The plugin's map_weights split of ``experts.0`` stacked names into one name per expert."""
    out = set()
    for n in names:
        if ".mlp.experts.0." in n:
            out |= {n.replace(".experts.0.", f".experts.{e}.") for e in range(cfg["n_routed_experts"])}
        else:
            out.add(n)
    return out


def test_every_gguf_tensor_maps_and_every_checkpoint_tensor_is_covered(q4k_gguf):
    _, cfg, state, r = q4k_gguf
    mapping = gguf_to_vllm_names(config_from_gguf(r))
    assert set(mapping) == {t.name for t in r.tensors}
    vllm_names = _per_expert(mapping.values(), cfg)
    kv_b = {n.replace("k_b_proj", "kv_b_proj") for n in vllm_names if n.endswith("k_b_proj.weight")}
    vllm_names = {n for n in vllm_names if not n.endswith(("k_b_proj.weight", "v_b_proj.weight"))} | kv_b
    assert vllm_names == set(expected_weight_shapes(cfg)) == set(state)
