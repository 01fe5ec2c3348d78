"""A GGUF's config and tokenizer from where vLLM users put them (issue 39 item 3): beside the file, or named by
``--hf-config-path`` / ``--tokenizer`` as ``vllm serve`` takes them. A config elsewhere is diagnosed as the same
config beside the file is (the same verdicts, the same wall), checked against the GGUF's metadata the same way, and
the ``vllm serve`` line carries the flags as given; a flag's bad value is one line naming it (exit 2)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla import cli  # noqa: E402
from sparse_mla.diagnose import diagnose, gguf_config  # noqa: E402
from sparse_mla.diagnose.gguf import NO_CONFIG_BESIDE, gguf_wall, read_gguf  # noqa: E402
from sparse_mla.errors import UserInputError  # noqa: E402
from sparse_mla.gguf import files as gguf_files  # noqa: E402
from sparse_mla.launch.checkpoint import make_checkpoint  # noqa: E402

pytestmark = pytest.mark.gguf

try:
    import vllm_gguf_plugin  # noqa: F401
    PLUGIN = True
except ImportError:
    PLUGIN = False

SHARDS = [f"model-Q8_0-{i:05d}-of-00004.gguf" for i in range(1, 5)]
#: What a record of the same GGUF and the same config says wherever the config is (the paths aside).
SAME = ("mla", "dtype", "heads_per_rank", "selected", "valid", "backends", "verdict", "configured_kv_cache_dtype",
        "effective_kv_cache_dtype", "indexer", "blockers", "engine_starts", "stages", "memory", "indexer_layers",
        "config", "headline")


def _alone(src: Path, names, folder: Path) -> Path:
    """``folder`` holding only the GGUF files ``names`` of the checkpoint ``src`` (hard links where possible)."""
    folder.mkdir()
    for n in names:
        try:
            os.link(src / n, folder / n)
        except OSError:
            shutil.copyfile(src / n, folder / n)
    return folder


def _config_dir(src: Path, folder: Path) -> Path:
    """``folder`` holding the checkpoint's config.json and tokenizer files, without weights."""
    folder.mkdir()
    for f in src.iterdir():
        if f.suffix not in (".gguf", ".safetensors"):
            shutil.copyfile(f, folder / f.name)
    return folder


@pytest.fixture(scope="module")
def setup(module_tmp):
    """(checkpoint with its GGUF beside the config, the GGUF alone in a folder, the config and tokenizer elsewhere)."""
    root = module_tmp("cfg")
    ck = make_checkpoint(root / "ck", index_topk=256, seed=7, gguf=("Q8_0",))
    return ck, _alone(ck, ["model-Q8_0.gguf"], root / "alone"), _config_dir(ck, root / "config")


@pytest.fixture(scope="module")
def beside(setup):
    """The record of the unchanged path: the config beside the GGUF."""
    return diagnose(str(setup[0] / "model-Q8_0.gguf"), "9.0", "auto", with_plugin=True)


@pytest.mark.parametrize("flag", ["--hf-config-path", "--tokenizer"])
def test_a_config_elsewhere_is_diagnosed_as_the_config_beside_the_gguf(setup, beside, capsys, flag):
    ck, alone, config = setup
    model = str(alone / "model-Q8_0.gguf")
    assert cli.main(["diagnose", "--model", model, flag, str(config), "--capability", "9.0", "--with-plugin",
                     "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert {k: rec[k] for k in SAME} == {k: beside[k] for k in SAME}
    got, want = rec["checkpoint"], beside["checkpoint"]
    paths = ("config_source", "tokenizer", "serve")
    assert {k: v for k, v in got.items() if k not in paths} == {k: v for k, v in want.items() if k not in paths}
    assert want["config_source"] == {"folder": str(ck), "flag": gguf_config.BESIDE, "decided_by": gguf_config.NO_FLAG,
                                     "config_json": True, "quantization_config": None, "differs": None}
    assert got["config_source"]["folder"] == str(config) and got["config_source"]["flag"] == flag
    assert got["config_source"]["decided_by"] == (gguf_files.PLUGIN if PLUGIN else gguf_config.RULE_HERE)
    assert got["tokenizer"] == str(config) and want["tokenizer"] == str(ck)
    # the serve line: the one of the config beside the file, with the flag as given in place of its folder
    assert got["serve"] == want["serve"].replace(f"{ck / 'model-Q8_0.gguf'} --tokenizer {ck}",
                                                 f"{model} {flag} {config}")


def test_the_text_report_prints_the_config_source_and_the_serve_line(setup, capsys):
    _, alone, config = setup
    model = str(alone / "model-Q8_0.gguf")
    assert cli.main(["diagnose", "--model", model, "--hf-config-path", str(config), "--tokenizer", str(config),
                     "--capability", "9.0", "--tp", "2", "--kv-cache-dtype", "fp8", "--max-model-len", "4096"]) == 0
    out = capsys.readouterr().out
    assert f"config.json from {config} (--hf-config-path), tokenizer from {config}" in out
    assert (f"vllm serve line: vllm serve {model} --hf-config-path {config} --tokenizer {config} "
            f"--tensor-parallel-size 2 --kv-cache-dtype fp8 --max-model-len 4096\n") in out


def test_a_config_elsewhere_that_contradicts_the_gguf_is_refused_naming_the_key(setup, tmp_path, capsys):
    """As the same config beside the GGUF is refused: the key, the GGUF's value and the config's."""
    ck, alone, _ = setup
    cfg = json.loads((ck / "config.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**cfg, "index_topk": 512}))
    assert cli.main(["diagnose", "--model", str(alone / "model-Q8_0.gguf"), "--hf-config-path", str(other),
                     "--capability", "9.0"]) == 2
    elsewhere = capsys.readouterr().err.strip().splitlines()
    shutil.copyfile(alone / "model-Q8_0.gguf", other / "model-Q8_0.gguf")
    assert cli.main(["diagnose", "--model", str(other / "model-Q8_0.gguf"), "--capability", "9.0"]) == 2
    here = capsys.readouterr().err.strip().splitlines()
    assert len(elsewhere) == len(here) == 1, (elsewhere, here)
    assert (f"has index_topk = 256 and the config.json of --hf-config-path '{other}' 512: another model's"
            in elsewhere[0])
    assert "has index_topk = 256 and the config.json beside it 512: another model's" in here[0]


@pytest.mark.parametrize("edit, says", [                  # breaker round 10: k2, k8 were "config ok", unnamed
    ({"max_position_embeddings": 4096}, "sets max_position_embeddings 4096 (the GGUF's 8192)"),
    ({"rope_parameters": {"rope_theta": 50000.0, "rope_type": "default"}}, "sets rope_theta 50000.0 (the GGUF's "
                                                                           "1000000.0)"),
    ({"rope_parameters": None, "rope_theta": 50000}, "sets rope_theta 50000 (the GGUF's 1000000.0)"),   # older form
    ({"rope_parameters": None, "rope_theta": 1000000}, None),                  # the same base, written otherwise
    ({"rope_theta": 50000.0}, None),          # transformers reads rope_parameters' (the GGUF's), not the top level
    # breaker round 12, q03: a YaRN factor beside a GGUF without rope.scaling.* keys (llama.cpp writes them for any
    # scaled rope: their absence is no scaling) was "config ok", only rope_theta compared
    ({"rope_parameters": {"rope_theta": 1e6, "rope_type": "yarn", "factor": 4.0,
                          "original_max_position_embeddings": 2048}},
     "sets rope_parameters.rope_type 'yarn' (the GGUF's 'default'), rope_parameters.factor 4.0 (the GGUF's 1.0)"),
    ({"rope_parameters": None, "rope_theta": 1e6, "rope_scaling": {"type": "linear", "factor": 2}},   # older form
     "sets rope_parameters.rope_type 'linear' (the GGUF's 'default'), rope_parameters.factor 2 (the GGUF's 1.0)"),
    ({"rope_parameters": {"rope_theta": 1e6, "rope_type": "default", "factor": 1.0}}, None),
])
def test_a_setting_the_config_json_states_otherwise_than_the_gguf_is_named_and_vllms_reading_kept(setup, tmp_path,
                                                                                                  edit, says):
    """The model's length and rotary base are the config.json's to set (vLLM reads it; issue 47 item 2): a
    difference from the metadata is named, not refused as another model's file, and the config is config.json's."""
    ck = setup[0]
    folder = _alone(ck, ["model-Q8_0.gguf", "tokenizer.json", "tokenizer_config.json"], tmp_path / "edited")
    cfg = json.loads((ck / "config.json").read_text())
    edited = {k: v for k, v in {**cfg, **edit}.items() if v is not None}
    (folder / "config.json").write_text(json.dumps(edited))
    info = read_gguf(folder / "model-Q8_0.gguf")
    differs = info["config_source"]["differs"]
    assert differs == (None if says is None else f"the config.json beside it {says}: vLLM takes config.json's")
    assert info["config_json"] == edited
    from sparse_mla.diagnose.report import gguf_lines

    lines = gguf_lines({"format": "gguf", "file": "model-Q8_0.gguf", "files": ["model-Q8_0.gguf"], "serve": "vllm serve",
                        "tokenizer": str(folder), "config_source": info["config_source"]})
    assert (f"  {differs}" in lines) == (says is not None), lines          # the text report names it too


@pytest.mark.parametrize("args, says", [
    (["--hf-config-path", "{root}/nowhere"], "--hf-config-path '{root}/nowhere' is not a folder here; accepted: the "
                                             "folder holding the model's config.json"),
    (["--hf-config-path", "{config}/config.json"], "--hf-config-path '{config}/config.json' is a file; accepted: the "
                                                   "folder holding the model's config.json"),
    (["--hf-config-path", "{root}/alone"], "--hf-config-path '{root}/alone' has no config.json; accepted: the "
                                           "folder holding the model's config.json"),
    (["--tokenizer", "{root}/alone"], "--tokenizer '{root}/alone' has no config.json: vllm-gguf-plugin reads the "
                                      "model's config from the --tokenizer folder"),
    (["--tokenizer", "{root}/nowhere"], "--tokenizer '{root}/nowhere' is not a folder here; accepted: the folder "
                                        "holding the model's tokenizer files"),
    (["--hf-config-path", ""], "--hf-config-path '' is empty; accepted:"),
])
def test_bad_flag_values_are_one_line_naming_them(setup, capsys, args, says):
    _, alone, config = setup
    root = alone.parent
    args = [a.format(root=root, config=config) for a in args]
    assert cli.main(["diagnose", "--model", str(alone / "model-Q8_0.gguf"), *args, "--capability", "9.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says.format(root=root, config=config) in err[0], err


@pytest.mark.parametrize("model", ["glm-5", "{ck}", "{ck}/config.json"])
def test_the_flags_with_a_model_that_is_no_gguf_are_refused(setup, capsys, model):
    """A preset, a config.json or a checkpoint folder is its own config and the diagnosis loads no tokenizer."""
    ck, _, config = setup
    model = model.format(ck=ck)
    assert cli.main(["diagnose", "--model", model, "--hf-config-path", str(config), "--capability", "9.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--hf-config-path '{config}' would be ignored: --model '{model}' is no GGUF" in err[0]
    for table in ("--matrix", "--memory-matrix", "--what-to-run"):
        assert cli.main(["diagnose", table, "--tokenizer", str(config)]) == 2
        assert "--tokenizer" in capsys.readouterr().err


def test_a_gguf_alone_without_flags_has_no_config_and_the_wall_names_the_flag(setup, capsys):
    """A GGUF downloaded alone: the wall names the missing config.json and tokenizer after the loader (whether or not
    vllm-gguf-plugin is installed), and the report says the folder lacks them rather than reading from it."""
    _, alone, _ = setup
    info = read_gguf(alone / "model-Q8_0.gguf")
    assert info["config_json"] is None and info["config_source"]["flag"] == gguf_config.BESIDE
    assert info["serve_flags"] == ["--tokenizer", str(alone)]
    assert info["tokenizer_error"] and "ValueError" in info["tokenizer_error"]        # vLLM's own refusal
    wall = gguf_wall(info, with_plugin=True)
    assert "--hf-config-path DIR" in NO_CONFIG_BESIDE
    assert NO_CONFIG_BESIDE in wall["blocker"] and f"vLLM loads no tokenizer from {alone}" in wall["blocker"]
    assert PLUGIN or wall["blocker"].startswith("vllm-gguf-plugin is not installed")
    assert cli.main(["diagnose", "--model", str(alone / "model-Q8_0.gguf"), "--capability", "9.0",
                     "--with-plugin"]) == 0
    out = capsys.readouterr().out
    assert f"no config.json in {alone} (beside the GGUF), no tokenizer vLLM can load in {alone}" in out
    assert "vllm serve line (fails until the folder has them): vllm serve" in out
    # blocked at the config stage as vLLM's own refusal is: the engine line follows it, the stages after it are not
    # reached (no backend table, no selection text)
    assert "\nengine  does not start: first blocker at the config stage\n" in out
    assert "SELECTED" not in out and "prio  verdict" not in out and "\nvLLM: " not in out


def test_a_flag_folder_without_a_tokenizer_is_refused(setup, tmp_path, capsys):
    """vLLM loads the tokenizer from --tokenizer, else from --hf-config-path: a folder named so that holds none is
    one line (exit 2), in vLLM's words."""
    _, alone, config = setup
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(config / "config.json", bare / "config.json")
    model = str(alone / "model-Q8_0.gguf")
    for argv, says in ((["--tokenizer", str(bare)], f"--tokenizer '{bare}' holds no tokenizer vLLM can load: "),
                       (["--hf-config-path", str(bare)], f"--hf-config-path '{bare}' holds no tokenizer vLLM can load "
                                                         f"(vLLM loads the tokenizer from the --hf-config-path")):
        assert cli.main(["diagnose", "--model", model, *argv, "--capability", "9.0"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0] and "accepted:" in err[0]
    assert cli.main(["diagnose", "--model", model, "--hf-config-path", str(bare), "--tokenizer", str(config),
                     "--capability", "9.0"]) == 0                                  # the tokenizer from elsewhere
    capsys.readouterr()


@pytest.mark.parametrize("key, value", [("model_type", "deepseek_v32"),
                                        ("architectures", ["DeepseekV32ForCausalLM"]),
                                        ("moe_intermediate_size", "x2"), ("intermediate_size", "x2"),
                                        ("n_shared_experts", "x2"), ("num_experts_per_tok", "x2"),
                                        ("first_k_dense_replace", "x2")])
def test_a_config_of_another_architecture_with_the_same_sizes_is_refused(setup, tmp_path, key, value):
    """Another architecture, or sizes the tensors' shapes or the routing depend on (a fresh user's findings)."""
    _, alone, config = setup
    other = _config_dir(config, tmp_path / "other")
    cfg = json.loads((other / "config.json").read_text())
    cfg[key] = 2 * cfg[key] + 1 if value == "x2" else value
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserInputError, match=f"has {key} = .* and the config.json of --hf-config-path .*another "
                                             f"model's file"):
        read_gguf(alone / "model-Q8_0.gguf", hf_config_path=str(other))


@pytest.mark.parametrize("edit, says", [     # breaker round 11: cf, cj, ck, co, cl were "config ok", nothing named
    ({"rms_norm_eps": 1e-6}, r"has rms_norm_eps = 9.99\d*e-06 and the config.json beside it 1e-06: another model's"),
    ({"routed_scaling_factor": 1.0}, "has routed_scaling_factor = 2.5 and the config.json beside it 1.0: another"),
    ({"norm_topk_prob": False}, "has norm_topk_prob = True and the config.json beside it False: another model's"),
    ({"scoring_func": "softmax"}, "has scoring_func = 'sigmoid' and the config.json beside it 'softmax': another"),
    ({"tie_word_embeddings": True}, r"has tie_word_embeddings = False \(it holds its own LM head, output.weight\) "
                                    "and the config.json beside it True: another model's file"),
    ({"scoring_func": None}, r"has no scoring_func \(the GGUF model .* has scoring_func = 'sigmoid'\)"),  # softmax
    ({k: None for k in ("rms_norm_eps", "routed_scaling_factor", "norm_topk_prob", "tie_word_embeddings")}, None),
    # breaker round 12, q06: vLLM routes by config.json's expert groups; the GGUF states expert_group_count 1
    ({"n_group": 2, "topk_group": 2}, "has n_group = 1 and the config.json beside it 2: another model's file"),
    ({"topk_group": 2}, "has topk_group = 1 and the config.json beside it 2: another model's file"),
    ({"n_group": None, "topk_group": None}, None),          # transformers' GlmMoeDsaConfig: 1 and 1, the GGUF's
])
def test_what_the_weights_were_trained_with_is_refused_where_config_json_says_otherwise(setup, tmp_path, edit, says):
    """The norm epsilon, the routing's scale, renormalisation and gating, and the tied head: vLLM takes them from
    config.json, so one that states another value than the GGUF is another model's; one the config.json leaves out is
    read as transformers' config class sets it (GLM-5's values: accepted), except scoring_func (vLLM: softmax)."""
    ck = setup[0]
    folder = _alone(ck, ["model-Q8_0.gguf", "tokenizer.json", "tokenizer_config.json"], tmp_path / "edited")
    cfg = json.loads((ck / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({k: v for k, v in {**cfg, **edit}.items() if v is not None}))
    if says is None:
        assert read_gguf(folder / "model-Q8_0.gguf")["config_source"]["differs"] is None
        return
    with pytest.raises(UserInputError, match=says):
        read_gguf(folder / "model-Q8_0.gguf")


def test_the_plugins_own_rule_decides_where_it_is_importable(setup, monkeypatch):
    """With vllm-gguf-plugin importable its ``_get_gguf_config_source`` answers (a stand-in recording its calls)."""
    ck, alone, config = setup
    calls = []

    def decide(model, tokenizer, hf_config_path):
        calls.append((model, tokenizer, hf_config_path))
        return hf_config_path or tokenizer

    monkeypatch.setattr(gguf_files, "plugin_object", lambda module, name: decide if (module, name) == (
        "plugin", "_get_gguf_config_source") else None)
    first = alone / "model-Q8_0.gguf"
    assert gguf_config.config_source(first, None, config) == (config, "--tokenizer", gguf_files.PLUGIN)
    assert gguf_config.config_source(first, config, ck) == (config, "--hf-config-path", gguf_files.PLUGIN)
    assert gguf_config.config_source(first) == (alone, gguf_config.BESIDE, gguf_config.NO_FLAG)   # not asked
    assert calls == [(str(first), str(config), None), (str(first), str(ck), str(config))]


def test_a_split_gguf_from_any_shard_with_its_config_elsewhere(tmp_path):
    ck = make_checkpoint(tmp_path / "split", index_topk=256, seed=3, gguf=("Q8_0",), gguf_split_max_tensors=12)
    alone, config = _alone(ck, SHARDS, tmp_path / "alone"), _config_dir(ck, tmp_path / "config")
    want = read_gguf(ck / SHARDS[2])          # the unchanged path: the config beside the shards
    for model in (str(alone / SHARDS[0]), str(alone / SHARDS[2]), f"{alone}:Q8_0"):
        got = read_gguf(model, hf_config_path=str(config))
        assert got["files"] == SHARDS and got["config_json"] == want["config_json"] is not None
        assert got["config_source"]["folder"] == str(config) and got["serve_flags"] == ["--hf-config-path",
                                                                                        str(config)]
        with pytest.raises(UserInputError, match="no config.json beside|has no config.json"):
            read_gguf(model, tokenizer=str(alone))
    rec = diagnose(str(alone / SHARDS[3]), "8.0", "auto", with_plugin=True, hf_config_path=str(config))
    base = diagnose(str(ck / SHARDS[3]), "8.0", "auto", with_plugin=True)
    assert {k: rec[k] for k in SAME} == {k: base[k] for k in SAME}
    assert rec["checkpoint"]["files"] == SHARDS and rec["checkpoint"]["wall"] == base["checkpoint"]["wall"]
    # the serve line names the first shard whichever shard was given (vllm serve is given the first)
    assert f"vllm serve {ck / SHARDS[0]} --tokenizer {ck} " in base["checkpoint"]["serve"]
    assert rec["checkpoint"]["serve"] == base["checkpoint"]["serve"].replace(
        f"{ck / SHARDS[0]} --tokenizer {ck}", f"{alone / SHARDS[0]} --hf-config-path {config}")
    dq = diagnose(f"{alone}:Q8_0", "8.0", "auto", with_plugin=True, hf_config_path=str(config))
    assert f"vllm serve {alone}:Q8_0 --hf-config-path {config} " in dq["checkpoint"]["serve"]   # DIR:QUANT as given


@pytest.mark.parametrize("content, says", [
    ("[1, 2]", r"holds a JSON list, not an object; accepted: a Hugging Face config.json"),
    ("{}", r"has no num_hidden_layers \(the GGUF model .* has num_hidden_layers = 2\)"),
])
def test_a_config_that_is_no_object_or_lacks_a_key_is_named_so(setup, tmp_path, content, says):
    ck, alone, _ = setup
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(content)
    with pytest.raises(UserInputError, match=says):
        read_gguf(alone / "model-Q8_0.gguf", hf_config_path=str(bad))


def test_a_tilde_in_a_flag_is_expanded_in_the_serve_line(setup, monkeypatch):
    """vLLM expands no ``~`` in --hf-config-path / --tokenizer, and a quoted ``~`` stays literal in a shell: the
    serve line carries the folder the diagnosis read."""
    ck, alone, config = setup
    monkeypatch.setenv("HOME", str(config.parent))
    info = read_gguf(alone / "model-Q8_0.gguf", hf_config_path=f"~/{config.name}", tokenizer=f"~/{config.name}")
    assert info["config_source"]["folder"] == str(config)
    assert info["serve_flags"] == ["--hf-config-path", str(config), "--tokenizer", str(config)]


def test_the_config_json_vllm_reads_is_the_one_diagnosed_not_the_metadata(setup, tmp_path):
    """Issue 47 item 2: keys the metadata does not carry (or carries otherwise) come from the config.json vLLM reads:
    a max_position_embeddings of 1M and index_topk_pattern "FS" beside the GGUF are diagnosed as the same config.json
    in its checkpoint folder is (vLLM's indexer layers [0], the memory stage at 1M tokens); an FP8 checkpoint's
    quantization_config copied beside the GGUF is vllm-gguf-plugin's to override (the record says so) and changes
    nothing else."""
    ck = setup[0]
    folder = tmp_path / "edited"
    shutil.copytree(ck, folder)
    cfg = json.loads((ck / "config.json").read_text())
    edited = {**cfg, "max_position_embeddings": 2**20, "index_topk_pattern": "FS"}
    (folder / "config.json").write_text(json.dumps(edited))
    gguf_rec = diagnose(str(folder / "model-Q8_0.gguf"), "9.0", "auto", with_plugin=True)
    dir_rec = diagnose(str(folder), "9.0", "auto", with_plugin=True)
    assert gguf_rec["indexer_layers"] == dir_rec["indexer_layers"] == [0]
    assert gguf_rec["memory"]["max_model_len"] == dir_rec["memory"]["max_model_len"] == 2**20
    fp8 = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    (folder / "config.json").write_text(json.dumps({**edited, "quantization_config": fp8}))
    with_qc = diagnose(str(folder / "model-Q8_0.gguf"), "9.0", "auto", with_plugin=True)
    note = with_qc["checkpoint"]["config_source"].pop("quantization_config")
    assert note.startswith("config.json's quantization_config (quant_method 'fp8') does not apply: vllm-gguf-plugin")
    assert gguf_rec["checkpoint"]["config_source"].pop("quantization_config") is None
    assert {k: with_qc[k] for k in SAME} == {k: gguf_rec[k] for k in SAME}
    assert with_qc["checkpoint"] == gguf_rec["checkpoint"]


def test_a_rope_scaling_the_gguf_states_is_compared_with_config_jsons(setup):
    """Where the GGUF's metadata states a scaling (rope.scaling.type / factor, as llama.cpp's converter writes them
    for a YaRN model), config.json's is compared with it: the same one names nothing, none names the difference."""
    from sparse_mla.gguf.metadata import config_from_gguf

    ck = setup[0]
    cfg = json.loads((ck / "config.json").read_text())
    meta = config_from_gguf(_Scaled(gguf.GGUFReader(str(ck / "model-Q8_0.gguf")), {
        "glm-dsa.rope.scaling.type": "yarn", "glm-dsa.rope.scaling.factor": 4.0,
        "glm-dsa.rope.scaling.original_context_length": 2048}))
    theta = meta["rope_parameters"]["rope_theta"]
    assert meta["rope_parameters"] == {"rope_theta": theta, "rope_type": "yarn", "factor": 4.0,
                                       "original_max_position_embeddings": 2048}
    yarn = {**cfg, "rope_parameters": dict(meta["rope_parameters"])}
    assert gguf_config.compared(yarn, meta) == (None, [])
    assert gguf_config.compared(cfg, meta)[1] == [gguf_config.ROPE_TYPE, gguf_config.ROPE_FACTOR]


class _Scaled:
    """A gguf-py reader with the metadata keys ``extra`` added (gguf-py's ``ReaderField.contents()``)."""

    def __init__(self, reader, extra: dict):
        self.reader, self.extra, self.tensors = reader, extra, reader.tensors

    def get_field(self, key: str):
        from types import SimpleNamespace

        if key in self.extra:
            return SimpleNamespace(contents=lambda: self.extra[key])
        return self.reader.get_field(key)


def test_indexer_weights_of_layers_vllm_builds_no_indexer_in_are_named(setup):
    """Breaker round 12, q11/q12: a config.json sharing layer 1's top-k (vLLM then builds no indexer there) beside a
    GGUF holding layer 1's indexer tensors was "config ok", nothing said; the layers are vLLM's own answer
    (:func:`sparse_mla.diagnose.config.indexer_layers`), given here as it gives them."""
    from sparse_mla.diagnose import config as stage_config
    from sparse_mla.diagnose.gguf import load_gguf

    ck = setup[0]
    src = load_gguf(str(ck / "model-Q8_0.gguf"))[0].source
    n = json.loads((ck / "config.json").read_text())["num_hidden_layers"]
    assert n >= 2
    note = stage_config._gguf_indexers_unbuilt(src, [0], {"index_topk_pattern": "F" + "S" * (n - 1)})
    shared = "layer 1" if n == 2 else f"layers 1-{n - 1}"
    assert note.startswith(f"the GGUF holds DSA indexer weights for {shared}, where vLLM builds no indexer by the "
                           f"config.json's top-k sharing (index_topk_pattern 'F{'S' * (n - 1)}'): vLLM drops those "
                           f"weights"), note
    assert stage_config._gguf_indexers_unbuilt(src, list(range(n)), {}) is None       # every layer builds its own
    assert stage_config._gguf_indexers_unbuilt(str(ck / "model.safetensors"), [0], {}) is None     # not a GGUF
