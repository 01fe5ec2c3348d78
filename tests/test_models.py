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
    # checked, not created: the writer makes it (a command refused later leaves no folder behind)
    assert writable_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b" and not (tmp_path / "a").exists()


# ---- the one config validation of diagnose, make-checkpoint and launch (bad-input issue, classes 3 and 4) ----------

@pytest.mark.parametrize("change, names", [
    ({"architectures": "GlmMoeDsaForCausalLM"}, "architectures = 'GlmMoeDsaForCausalLM'"),
    ({"architectures": ["not a class"]}, "architectures = ['not a class']"),
    ({"architectures": []}, "architectures = []"),
    ({"hidden_size": -1}, "hidden_size = -1, which must be a positive integer"),
    ({"vocab_size": 2.5}, "vocab_size = 2.5"),
    ({"num_hidden_layers": True}, "num_hidden_layers = True"),
    ({"model_type": 5}, "model_type = 5"),
    ({"hidden_size": 10 ** 80}, "(81 characters)"),
    # bounds before anything is built: 100,000 layers built on the meta device ran past two minutes
    ({"num_hidden_layers": 100000}, "num_hidden_layers = 100000, which must be a positive integer up to 1024"),
    ({"n_routed_experts": 10 ** 7}, "n_routed_experts = 10000000, which must be a positive integer up to 65536"),
    # issue 47 round 15 (z64): 2**31 - 1 heads took 20 GB and ran past 150 s in the diagnosis
    ({"num_attention_heads": 2**31 - 1, "num_key_value_heads": 2**31 - 1},
     "num_attention_heads = 2147483647, which must be a positive integer up to 4096"),
    ({"index_n_heads": 4097}, "index_n_heads = 4097, which must be a positive integer up to 4096"),
    # the breaker's round of 2026-12-05: each was a memory-stage ZeroDivisionError or a negative dimension, or passed
    ({"moe_layer_freq": 0}, "moe_layer_freq = 0, which must be a positive integer"),
    ({"n_shared_experts": -1}, "n_shared_experts = -1; accepted: an integer from 0"),
    ({"num_experts_per_tok": 512}, "num_experts_per_tok = 512 above n_routed_experts = 256"),
    ({"n_group": 0}, "n_group = 0, which must be a positive integer"),
    ({"n_group": 2, "topk_group": 4}, "topk_group = 4 above n_group = 2"),
    # a negative YaRN factor reached vLLM, which reported it as a negative max_model_len
    ({"rope_parameters": {"rope_type": "yarn", "factor": -4.0}}, "rope_parameters.factor = -4.0; accepted: a positive"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": float("nan")}}, "rope_parameters.factor = nan"),
    ({"rope_scaling": {"type": "yarn", "factor": "40"}}, "rope_scaling.factor = '40'"),
    # ... and a rotary base vLLM took, the engine reported as starting (the breaker's round of 2026-12-06)
    ({"rope_parameters": {"rope_type": "default", "rope_theta": float("nan")}}, "rope_parameters.rope_theta = nan"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": -1.0}}, "rope_parameters.rope_theta = -1.0"),
    ({"rope_theta": "big"}, "rope_theta = 'big'; accepted: a positive number"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 0}},
     "rope_parameters.original_max_position_embeddings = 0"),
    # the breaker's round of 2026-12-06: transformers' derived mlp_layer_types, or nothing, named instead
    ({"first_k_dense_replace": -5}, "first_k_dense_replace = -5; accepted: an integer from 0"),
    ({"first_k_dense_replace": 79}, "first_k_dense_replace = 79 above num_hidden_layers = 78; accepted: "
                                    "first_k_dense_replace from 0"),
    ({"num_nextn_predict_layers": -1}, "num_nextn_predict_layers = -1"),
    ({"index_head_dim": 7}, "index_head_dim = 7; accepted: a multiple of 128"),
    ({"index_head_dim": 192}, "index_head_dim = 192; accepted: a multiple of 128"),
    ({"dtype": 123}, "dtype = 123; accepted: a dtype name"),
    ({"index_topk_pattern": 5}, "index_topk_pattern = 5; accepted: a string (or list) of F"),
    ({"indexer_types": "full"}, "indexer_types = 'full'; accepted: a list"),
    ({"index_topk_freq": 2, "index_skip_topk_offset": "x"}, "index_skip_topk_offset = 'x'; accepted: a finite number"),
    ({"index_topk_freq": 2, "index_skip_topk_offset": float("nan")}, "index_skip_topk_offset = nan"),
    # breaker round 18 (Y3): what vLLM 0.26 reads its own way passes (below); what it cannot divide by does not
    ({"index_topk_freq": 0}, "index_topk_freq = 0; accepted: a number other than 0 (vLLM divides by it"),
    ({"index_topk_freq": False}, "index_topk_freq = False; accepted: a number other than 0"),
    ({"index_topk_freq": "2"}, "index_topk_freq = '2'; accepted: a number other than 0"),
    ({"index_topk_freq": float("inf")}, "index_topk_freq = inf"),
    # round 20 (U1): an explicit null, which transformers' GlmMoeDsaConfig and vLLM compute with
    ({"index_topk_freq": None}, "index_topk_freq = null, which vLLM and transformers compute with"),
    ({"index_skip_topk_offset": None}, "index_skip_topk_offset = null"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 1e-300, "original_max_position_embeddings": 4096}},
     "rope_parameters.factor = 1e-300, which times the 4096 positions"),
    ({"torch_dtype": ["bfloat16"]}, "torch_dtype = ['bfloat16']"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": "abc"}}, "rope_parameters.beta_fast = 'abc'"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "mscale": float("inf")}}, "rope_scaling.mscale = inf"),
    # the breaker's sixth round (2026-12-06): a math domain error, a ZeroDivisionError or a negative tensor dimension
    # in vLLM's model code, and rope types vLLM ran as YaRN unnamed
    ({"rope_parameters": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                          "beta_fast": -4}}, "rope_parameters.beta_fast = -4; accepted: a positive number"),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "beta_slow": 0}}, "rope_scaling.beta_slow = 0"),
    ({"rope_parameters": {"rope_type": 42, "factor": 4.0}}, "rope_parameters.rope_type = 42; accepted: a rope type"),
    ({"rope_scaling": {"type": "", "factor": 4.0}}, "rope_scaling.type = ''"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 0]}},
     "quantization_config.weight_block_size = [0, 0]; accepted: a list of positive integers"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [-128, 128]}}, "weight_block_size = [-128"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128.5, 128]}}, "weight_block_size = [128.5"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": "128x128"}}, "weight_block_size = '128x128'"),
    # issue 47, the verification round of 2026-12-06: refused, but the message pointed elsewhere (vLLM's "cannot
    # convert float infinity to integer", a limit not said, a model_type to change for a letter or a string)
    ({"rope_parameters": {"rope_type": "yarn", "factor": 1e308, "original_max_position_embeddings": 4096}},
     "rope_parameters.factor = 1e+308, which times the 4096 positions it scales gives more tokens than a float holds, "
     "past the longest model vLLM holds (2147483647 tokens); accepted: a factor up to 524288"),
    ({"rope_scaling": {"type": "yarn", "factor": 1e12}, "max_position_embeddings": 8192},
     "rope_scaling.factor = 1000000000000.0, which times the 8192 positions it scales gives 8.19e+15 tokens"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [2 ** 40, 128]}},
     "weight_block_size = [1099511627776, 128]; accepted: a list of positive integers up to 2147483647 each"),
    ({"indexer_types": ["full", "banana"]}, "indexer_types = ['full', 'banana'], whose item 1 is 'banana'"),
    ({"rope_parameters": "yarn"}, "rope_parameters = 'yarn'; accepted: an object of the rope's settings"),
    ({"rope_scaling": ["yarn", 40]}, "rope_scaling = ['yarn', 40]; accepted: an object of the rope's settings"),
    # issue 47, breaker round 7 (nan_eps): a NaN epsilon passed, and the diagnosis answered "engine starts"
    ({"rms_norm_eps": float("nan")}, "rms_norm_eps = nan; accepted: a finite number of at least 0 (GLM-5: "
                                     "rms_norm_eps 1e-05)"),
    ({"rms_norm_eps": -1e-5}, "rms_norm_eps = -1e-05"),
    ({"rms_norm_eps": float("inf")}, "rms_norm_eps = inf"),
    ({"rms_norm_eps": "1e-5"}, "rms_norm_eps = '1e-5'"),
    ({"routed_scaling_factor": float("nan")}, "routed_scaling_factor = nan; accepted: a finite number of at least 0"),
])
def test_check_config_names_the_field(change, names):
    from sparse_mla.models import check_config

    with pytest.raises(UserInputError) as e:
        check_config({**PRESET_CONFIGS["glm-5"], **change}, "cfg")
    assert names in str(e.value) and "accepted:" in str(e.value) and "model_type" not in str(e.value).split(
        "accepted:")[1], str(e.value)


@pytest.mark.parametrize("change", [
    {"index_topk_pattern": "fs"}, {"index_topk_pattern": "FSX"}, {"index_topk_pattern": "F S "},
    {"index_topk_pattern": ["F", "S"]}, {"index_topk_freq": 2.0}, {"index_topk_freq": -2}, {"index_topk_freq": True},
    {"index_topk_freq": 2, "index_skip_topk_offset": 1.5},
])
def test_check_config_passes_a_sharing_vllm_reads_its_own_way(change):
    """Breaker round 18 (Y3): vLLM 0.26 reads these (``pattern[layer] == "S"``, ``% freq`` as Python computes it), so
    the config's one validation lets them through; the diagnosis names what vLLM builds from them
    (``tests/diagnose/test_config.py``), transformers' KeyError of a letter it cannot map is vLLM's config-load
    refusal, and make-checkpoint's flags write F/S letters and integers only."""
    from sparse_mla.models import check_config

    check_config({**PRESET_CONFIGS["glm-5"], **change}, "cfg")


@pytest.mark.parametrize("cmd", ["diagnose", "launch"])
@pytest.mark.parametrize("change, names", [
    ({"architectures": "GlmMoeDsaForCausalLM"}, "architectures"),
    ({"hidden_size": -4096}, "hidden_size = -4096"),
    ({"architectures": ["GLM 5"]}, "architectures"),
])
def test_diagnose_and_launch_refuse_what_the_rule_refuses(tmp_path, capsys, monkeypatch, cmd, change, names):
    import sparse_mla.machine
    from sparse_mla import cli

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: False)
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**PRESET_CONFIGS["glm-5"], **change}))
    assert cli.main([cmd, "--model", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err


@pytest.mark.parametrize("change, names", [
    ({"index_topk": 100}, "index_topk = 100, which vLLM's sparse top-k conversion cannot take"),
    ({"model_type": "glm_moe_dsa_nonsense"}, "model_type = 'glm_moe_dsa_nonsense', which vLLM's config loader"),
])
def test_launch_refuses_configs_an_engine_would_die_on(tmp_path, capsys, monkeypatch, change, names):
    import sparse_mla.machine
    from sparse_mla import cli

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)   # refused before any engine, GPU or not
    monkeypatch.setattr("sparse_mla.launch.engine.run_offline", lambda *a, **k: pytest.fail("an engine was started"))
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**PRESET_CONFIGS["glm-5"], **change}))
    assert cli.main(["launch", "--model", str(d), "--no-serve"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0], err


def test_presets_match_whatever_their_case_and_dimension_hints_are_the_fields_own():
    assert load_model("GLM-5").name == "glm-5" and load_model("DeepSeek-V3.2").index_n_heads == 64
    from sparse_mla.models import check_config

    with pytest.raises(UserInputError, match=r"hidden_size = -1, .* \(GLM-5: hidden_size 6144\)"):
        check_config({**PRESET_CONFIGS["glm-5"], "hidden_size": -1}, "cfg")


def test_a_config_json_that_is_no_regular_file_is_named_so(tmp_path):
    """A FIFO named config.json in the model folder: neither "has no config.json" nor a read that blocks."""
    import os

    from sparse_mla.models import load_model

    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(UserInputError, match="has a config.json that is not a regular file"):
        load_model(str(tmp_path))


def test_a_config_json_with_a_key_twice_or_past_the_size_limit_is_refused(tmp_path, monkeypatch):
    """Issue 47 (2026-12-06): transformers and vLLM read config.json with json.load, where the second of two equal
    keys silently wins; and a config.json of any size was read whole."""
    from sparse_mla import models

    d = tmp_path / "m"
    d.mkdir()
    text = json.dumps(PRESET_CONFIGS["glm-5"], indent=1)
    (d / "config.json").write_text(text[:-1].rstrip() + ',\n "num_hidden_layers": 7\n}')
    with pytest.raises(UserInputError, match="the key 'num_hidden_layers' appears twice.*each key once"):
        models.load_model(d)
    (d / "config.json").write_text(text)
    assert models.load_model(d).hf_config["num_hidden_layers"] == 78
    monkeypatch.setattr(models, "MAX_CONFIG_BYTES", len(text) - 1)
    with pytest.raises(UserInputError, match=f"is {len(text):,} bytes; accepted: .* at most {len(text) - 1:,} bytes"):
        models.load_model(d)
