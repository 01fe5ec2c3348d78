"""Model presets and config loading: the geometry vLLM's selector sees, and clear errors for bad configs."""
from __future__ import annotations

import json

import pytest

from sparse_mla.errors import UserInputError, writable_dir
from sparse_mla.models import PRESET_CONFIGS, load_model


def test_glm5_preset_geometry():
    g = load_model("glm-5")
    assert (g.num_attention_heads, g.kv_lora_rank, g.qk_nope_head_dim, g.qk_rope_head_dim, g.v_head_dim) == \
        (64, 512, 192, 64, 256)
    assert (g.index_topk, g.index_head_dim, g.index_n_heads, g.q_lora_rank) == (2048, 128, 32, 2048)
    assert g.head_size == 576 and g.sm_scale == 1 / 16 and g.use_sparse
    assert load_model("deepseek-v3.2").index_n_heads == 64


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return str(p)


def test_glm_moe_dsa_without_index_topk_is_sparse_like_vllm(tmp_path):
    """vLLM tests hasattr(hf_config, "index_topk") on transformers' GlmMoeDsaConfig, which defaults it."""
    cfg = {k: v for k, v in PRESET_CONFIGS["glm-5"].items() if k != "index_topk"}
    g = load_model(_write(tmp_path, cfg))
    assert g.use_sparse and g.index_topk == 2048


def test_deepseek_v3_style_config_is_dense(tmp_path):
    cfg = {k: v for k, v in PRESET_CONFIGS["glm-5"].items() if not k.startswith("index_")}
    cfg.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"])
    assert not load_model(_write(tmp_path, cfg)).use_sparse


@pytest.mark.parametrize("change, match", [
    ({"index_topk": None}, "index_topk = null"),
    ({"kv_lora_rank": "512"}, "kv_lora_rank = '512'"),
    ({"kv_lora_rank": -512}, "kv_lora_rank = -512"),
    ({"num_attention_heads": True}, "num_attention_heads = True"),
    ({"qk_nope_head_dim": 192.5}, "qk_nope_head_dim = 192.5"),
    # architectures not a list of names: it was reported as "a non-integer MLA dimension ('int' object is not
    # subscriptable)", which names neither the key nor the value
    ({"architectures": 5}, r"architectures = 5; accepted: a list of class names"),
    ({"architectures": [5]}, r"architectures = \[5\]; accepted: a list of class names"),
    ({"architectures": {"GlmMoeDsaForCausalLM": 1}}, r"architectures = \{'GlmMoeDsaForCausalLM': 1\}"),
])
def test_bad_dimensions(tmp_path, change, match):
    with pytest.raises(UserInputError, match=match):
        load_model(_write(tmp_path, {**PRESET_CONFIGS["glm-5"], **change}))


def test_infinity_and_empty(tmp_path):
    with pytest.raises(UserInputError, match="index_topk"):
        load_model(_write(tmp_path, json.dumps(PRESET_CONFIGS["glm-5"]).replace('"index_topk": 2048',
                                                                                 '"index_topk": Infinity')))
    with pytest.raises(UserInputError, match="empty"):
        load_model("")


def test_writable_dir(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(UserInputError, match="is a file"):
        writable_dir(f)
    with pytest.raises(UserInputError, match="is a file"):
        writable_dir(f / "sub")
    assert writable_dir(tmp_path / "a" / "b").is_dir()
