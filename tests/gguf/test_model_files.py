"""sparse_mla.gguf.files: GGUF as people download it (issue 39 items 1-2): a split model, written by gguf-py's own
split writer (``GGUFWriter(split_max_tensors=...)`` through ``make-checkpoint --gguf-split-max-tensors``), is read
whole from any shard and from vllm-gguf-plugin's ``DIR:QUANT`` -- the metadata from the first shard, the tensors (and
the indexer check, and what the config derives from the tensors) from all -- the same as the unsplit file of the same
weights; a missing shard, a shard of another split, and a ``DIR:QUANT`` that matches nothing are one line naming them,
in diagnose and in launch's checks."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla import cli  # noqa: E402
from sparse_mla.diagnose import diagnose  # noqa: E402
from sparse_mla.diagnose.gguf import read_gguf  # noqa: E402
from sparse_mla.errors import UserInputError  # noqa: E402
from sparse_mla.gguf import files as gguf_files  # noqa: E402
from sparse_mla.gguf.files import is_gguf  # noqa: E402
from sparse_mla.launch.checkpoint import make_checkpoint  # noqa: E402
from sparse_mla.launch.gguf_reader import gguf_config, load_gguf_checkpoint  # noqa: E402

pytestmark = pytest.mark.gguf

SHARDS = [f"model-Q8_0-{i:05d}-of-00004.gguf" for i in range(1, 5)]


@pytest.fixture(scope="module")
def models(module_tmp):
    """(split checkpoint folder, unsplit checkpoint folder): the same seed, so the same weights."""
    root = module_tmp("split")
    split = make_checkpoint(root / "split", index_topk=256, seed=3, gguf=("Q8_0",), gguf_split_max_tensors=12)
    whole = make_checkpoint(root / "whole", index_topk=256, seed=3, gguf=("Q8_0",))
    return split, whole


def test_gguf_pys_split_writer_puts_the_metadata_in_the_first_shard_and_indexer_tensors_in_later_ones(models):
    split, _ = models
    assert sorted(p.name for p in split.glob("*.gguf")) == SHARDS
    readers = [gguf.GGUFReader(str(split / n)) for n in SHARDS]
    assert "glm-dsa.block_count" in readers[0].fields and all("glm-dsa.block_count" not in r.fields
                                                                 for r in readers[1:])
    assert not any("indexer" in t.name for t in readers[0].tensors if t.name.startswith("blk.1."))
    assert any("indexer" in t.name for r in readers[1:] for t in r.tensors)      # the fixture tests what it says


@pytest.mark.parametrize("ref", [SHARDS[0], SHARDS[2], SHARDS[3], ":Q8_0"])
def test_any_shard_or_dir_quant_reads_the_whole_model(models, ref):
    split, whole = models
    model = f"{split}{ref}" if ref.startswith(":") else str(split / ref)
    assert is_gguf(model)
    got, want = read_gguf(model), read_gguf(whole / "model-Q8_0.gguf")
    assert got["files"] == SHARDS and Path(got["path"]).name == SHARDS[0]
    assert got["config"] == want["config"] and sorted(got["tensors"]) == sorted(want["tensors"])
    assert got["tensor_types"] == want["tensor_types"] and got["file_type"] == want["file_type"] == "Q8_0"
    assert got["discovery"] in (gguf_files.PLUGIN, gguf_files.OURS) and want["discovery"] == gguf_files.SINGLE
    rec = diagnose(model, "8.0", "auto", with_plugin=True)
    ck = rec["checkpoint"]
    assert ck["files"] == SHARDS and ck["file"] == SHARDS[0] and ck["tensor_types"] == want["tensor_types"]
    first, cfg = gguf_config(model)                                 # launch's check: the first shard, the config
    assert first == split / SHARDS[0] and cfg == want["config_json"]


def test_the_weights_of_a_split_model_are_those_of_the_unsplit_file(models):
    import torch

    split, whole = models
    cfg_a, a = load_gguf_checkpoint(str(split / SHARDS[1]))
    cfg_b, b = load_gguf_checkpoint(str(whole / "model-Q8_0.gguf"))
    assert cfg_a == cfg_b and a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def _copy(models, tmp_path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(models[0], out)
    return out


def test_a_missing_shard_is_refused_by_name_in_diagnose_launch_and_the_cli(models, tmp_path, capsys):
    folder = _copy(models, tmp_path)
    (folder / SHARDS[2]).unlink()
    for model in (str(folder / SHARDS[0]), str(folder / SHARDS[3]), f"{folder}:Q8_0"):
        for check in (read_gguf, gguf_config):
            with pytest.raises(UserInputError, match=f"split into 4 shards; missing in '{folder}': {SHARDS[2]};"):
                check(model)
    assert cli.main(["diagnose", "--model", str(folder / SHARDS[1]), "--capability", "8.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and SHARDS[2] in err[0] and "Traceback" not in err[0], err


def test_a_shard_name_that_is_no_file_is_named_so_not_missing(models, tmp_path):
    """Breaker round 12 (f02, and the issue's unclear list): a folder, or a link to nothing, under a shard's name was
    "missing"; it is there and not a file (the plugin's discovery takes files only)."""
    folder = tmp_path / "links"
    folder.mkdir()
    for n in SHARDS:
        (folder / n).symlink_to(models[0] / n)
    (folder / SHARDS[1]).unlink()
    (folder / SHARDS[1]).symlink_to(folder / "nowhere")
    (folder / SHARDS[2]).unlink()
    (folder / SHARDS[2]).mkdir()
    with pytest.raises(UserInputError, match=f"split into 4 shards; not a file in '{folder}': {SHARDS[1]} \\(a link "
                                             f"to no file\\), {SHARDS[2]} \\(a folder\\); accepted") as e:
        gguf_files.model_files(str(folder / SHARDS[0]))
    assert "missing" not in str(e.value)


def test_a_shard_of_another_split_is_refused(models, tmp_path):
    folder = _copy(models, tmp_path)
    shutil.copyfile(folder / SHARDS[2], folder / SHARDS[1])         # shard 3's bytes under shard 2's name
    with pytest.raises(UserInputError, match=f"{SHARDS[1]}' says it is shard 3 of 4 \\(split.no 2, counted from "
                                             f"0\\); its name says shard 2 of 4"):
        read_gguf(str(folder / SHARDS[0]))


@pytest.mark.parametrize("stray", ["model-Q8_0-00005-of-00004.gguf", "model-Q8_0-00001-of-00003.gguf"])
def test_a_stray_shard_beside_a_complete_split_is_refused_by_name(models, tmp_path, stray):
    """``model-Q8_0-00004-of-00003.gguf`` beside a complete 3-shard split was accepted without a word (issue 47,
    round 9, f6): a shard number beyond its count (or another count) under the split's name is refused, by name,
    from any shard."""
    folder = _copy(models, tmp_path)
    shutil.copyfile(folder / SHARDS[3], folder / stray)
    for model in (str(folder / SHARDS[0]), str(folder / SHARDS[2])):
        with pytest.raises(UserInputError, match=f"split into 4 shards; beside them in '{folder}': {stray}, named like "
                                                 f"a shard of it but none of its 4 .*; accepted: the shards "
                                                 f"{SHARDS[0]} ... {SHARDS[3]} alone under their name"):
            gguf_files.model_files(model)


def test_dir_quant_that_matches_nothing_names_what_is_there(models):
    split, _ = models
    with pytest.raises(UserInputError, match=f"no GGUF file of type 'Q4_K' in '{split}'.*there: {SHARDS[0]}"):
        read_gguf(f"{split}:Q4_K")
    assert not is_gguf(f"{split}/nowhere:Q8_0") and gguf_files.reference(f"{split}:Q8_0") == (split, "Q8_0")


def test_dir_quant_whose_folder_is_a_symlink_loop_is_named_in_diagnose_and_launch(tmp_path, monkeypatch, capsys):
    """Breaker round 16's x29: ``LOOP:Q8_0`` with LOOP a link to itself read as one unknown model name; the folder of
    DIR:QUANT and its loop are named. A colon form whose tail is no quant type stays the other commands' to judge."""
    (tmp_path / "LOOP").symlink_to("LOOP")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserInputError, match=r"model 'LOOP:Q8_0': its DIR:QUANT folder 'LOOP' is a loop of symbolic"):
        is_gguf("LOOP:Q8_0")
    assert gguf_files.dir_quant("LOOP:not a quant") is None
    for command in (["diagnose", "--capability", "12.0"], ["launch", "--no-serve"]):
        assert cli.main([*command, "--model", "LOOP:Q8_0"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "DIR:QUANT folder 'LOOP' is a loop of symbolic links" in err[0], err


def test_the_plugins_own_discovery_is_used_where_it_is_importable(models, tmp_path, monkeypatch):
    """With vllm-gguf-plugin importable its functions answer (here stand-ins recording their calls); a shard it
    skips silently (as the plugin does) is still refused here by name."""
    folder = _copy(models, tmp_path)
    calls = []

    def discover(path):
        calls.append(path)
        return [str(folder / n) for n in SHARDS if n != SHARDS[1]]       # the plugin lists what exists

    def resolve(local_dir, quant):
        calls.append((local_dir, quant))
        return str(folder / SHARDS[0])

    fakes = {("weights_adapter.default", "GGUFWeightsAdapter._get_all_gguf_files"): discover,
             ("weight_utils", "resolve_local_gguf"): resolve}
    monkeypatch.setattr(gguf_files, "plugin_object", lambda module, name: fakes.get((module, name)))
    with pytest.raises(UserInputError, match=f"missing in '{folder}': {SHARDS[1]};"):
        gguf_files.model_files(f"{folder}:Q8_0")
    assert calls == [(str(folder), "Q8_0"), str(folder / SHARDS[0])]


def test_make_checkpoint_refuses_a_split_without_a_gguf(tmp_path, capsys):
    assert cli.main(["make-checkpoint", str(tmp_path / "x"), "--gguf-split-max-tensors", "4"]) == 2
    assert "--gguf-split-max-tensors 4 is not accepted" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("limit", [44, 1000])
def test_make_checkpoint_refuses_a_split_that_would_not_split(tmp_path, capsys, limit):
    """glm-5-tiny without MTP has 44 GGUF tensors (read from the split fixture): a limit at or above that would
    write one unsplit file, which is not what was asked; nothing is left behind."""
    assert cli.main(["make-checkpoint", str(tmp_path / "x"), "--gguf", "Q8_0", "--gguf-split-max-tensors",
                     str(limit)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--gguf-split-max-tensors {limit} is not below the model's 44 GGUF tensors" in err[0]
    assert "accepted: 1 to 43" in err[0]
    assert not (tmp_path / "x").exists() and list(tmp_path.iterdir()) == []


def test_the_split_fixture_has_the_tensor_count_the_refusal_names(models):
    assert sum(len(gguf.GGUFReader(str(models[0] / n)).tensors) for n in SHARDS) == 44


@pytest.mark.parametrize("name, says", [
    ("model-Q8_0-00000-of-00004.gguf", "'00000-of-00004.gguf' is not a shard's number"),
    ("model-Q8_0-00005-of-00004.gguf", "'00005-of-00004.gguf' is not a shard's number"),
    ("model-Q8_0-1-of-00004.gguf", "'1-of-00004.gguf' is not a shard's number"),
    ("model-Q8_0-00001-of-999999999999.gguf", "is not a shard's number; accepted: PREFIX-i-of-N.gguf with 1 <= i <= N"),
])
def test_shard_names_that_are_no_shard_numbers_are_refused_before_anything_is_listed(models, tmp_path, name, says):
    """A total past llama.cpp's five digits once listed a shard name per number (MemoryError); 0-of-N and 5-of-4
    read other files than the one named."""
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / name).symlink_to(models[0] / SHARDS[0])
    with pytest.raises(UserInputError, match=says):
        read_gguf(str(folder / name))


def test_a_lone_file_that_is_a_shard_and_a_quant_with_pattern_characters_are_refused(models, tmp_path):
    folder = tmp_path / "solo"
    folder.mkdir()
    shutil.copyfile(models[0] / SHARDS[0], folder / "model-Q8_0.gguf")      # shard 1 of 4 under an unsplit name
    shutil.copyfile(models[0] / "config.json", folder / "config.json")
    with pytest.raises(UserInputError, match="says it is shard 1 of 4 \\(split.no 0, counted from 0\\); its name "
                                             "says shard 1 of 1"):
        read_gguf(f"{folder}:Q8_0")
    for quant in ("*", "0000[2]-of-00004", "Q8_0?"):
        with pytest.raises(UserInputError, match=re.escape(f"{quant!r} is not a GGUF quant type")):
            read_gguf(f"{models[0]}:{quant}")
    assert gguf_files.reference(f"{folder}/nowhere:*") is None         # not a folder: no DIR:QUANT, no refusal


def test_make_checkpoint_overwrites_its_own_split_output(models, tmp_path):
    folder = _copy(models, tmp_path)
    make_checkpoint(folder, index_topk=256, seed=3, gguf=("Q8_0",), gguf_split_max_tensors=17, overwrite=True)
    assert sorted(p.name for p in folder.glob("*.gguf")) == [f"model-Q8_0-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]


try:
    import vllm_gguf_plugin  # noqa: F401
    NO_PLUGIN = None
except ImportError as e:
    NO_PLUGIN = f"vllm-gguf-plugin is not installed (pip install '.[gguf]'): {e}"


def _plan(model):
    """Our adapter's load plan for ``model`` as vllm-gguf-plugin's loader makes it: the file the loader is given, a
    config built from the checkpoint's config.json (as vLLM builds it), then ``(adapter, model config)``."""
    import json
    from types import SimpleNamespace

    import torch
    from transformers import AutoConfig

    from sparse_mla.vllm_plugin import gguf_adapter as ga

    first = gguf_files.loader_file(model)
    cfg = json.loads((first.parent / "config.json").read_text())
    hf = AutoConfig.for_model("glm_moe_dsa", **{k: v for k, v in cfg.items() if k != "model_type"})
    mc = SimpleNamespace(hf_config=hf, dtype=torch.float32, trust_remote_code=False)
    adapter = ga.adapter_class()(hf)
    adapter.plan(str(first), mc)
    return adapter, mc


def test_the_split_fixtures_lm_head_is_in_the_last_shard_only(models):
    """The fixture tests what the LM-head tests below say: ``output.weight`` is in one shard, not the first."""
    split, _ = models
    holders = [n for n in SHARDS if any(t.name == "output.weight" for t in gguf.GGUFReader(str(split / n)).tensors)]
    assert holders == [SHARDS[3]]


@pytest.mark.skipif(NO_PLUGIN is not None, reason=NO_PLUGIN or "")
@pytest.mark.parametrize("ref", [SHARDS[0], SHARDS[1], ":Q8_0"])
def test_a_split_models_lm_head_is_loaded_from_whichever_shard_holds_it(models, ref):
    """vllm-gguf-plugin 0.0.5 patches tie_word_embeddings from the one file its loader is given; our adapter asks
    every shard, so output.weight (shard 4) is loaded as lm_head whichever shard or DIR:QUANT was given (the H200 run
    of 2026-12-05 died on the empty LM head)."""
    from sparse_mla.launch.checkpoint import expected_weight_shapes, load_checkpoint

    split, _ = models
    model = f"{split}{ref}" if ref.startswith(":") else str(split / ref)
    adapter, mc = _plan(model)
    assert mc.hf_config.tie_word_embeddings is False
    assert adapter.load_spec.gguf_to_hf_name_map["output.weight"] == "lm_head.weight"
    if ref == SHARDS[1]:                                  # every parameter once (slow part: dequantizes kv_b)
        cfg, _ = load_checkpoint(split)
        names = {n.replace(".qweight", ".weight") for n, _ in adapter.prepare_weights(mc) if "qweight_type" not in n}
        assert names == set(expected_weight_shapes(cfg))
    rec = diagnose(model, "8.0", "auto", with_plugin=True)
    assert rec["checkpoint"]["wall"]["with_plugin"] == "ok"


@pytest.mark.skipif(NO_PLUGIN is not None, reason=NO_PLUGIN or "")
def test_the_plugins_one_file_rule_planted_is_refused_by_name_in_load_and_diagnosis(models, monkeypatch):
    """A planted fault: our adapter patched by the plugin's own one-file rule. The load plan is refused naming
    output.weight (the metadata describes it, the tied config loads nothing from it), and the diagnosis with the
    plugin reports that wall."""
    from vllm_gguf_plugin.weights_adapter.default import GGUFWeightsAdapter

    from sparse_mla.vllm_plugin import gguf_adapter as ga

    split, _ = models
    monkeypatch.setattr(ga.adapter_class(), "patch_hf_config", GGUFWeightsAdapter.patch_hf_config)
    with pytest.raises(UserInputError, match=r"no vLLM parameter \(their values would be ignored\): in "
                                             rf"{SHARDS[3]}: output\.weight; refused"):
        _plan(str(split / SHARDS[0]))
    rec = diagnose(str(split / SHARDS[0]), "8.0", "auto", with_plugin=True)
    wall = rec["checkpoint"]["wall"]["with_plugin"]
    assert "output.weight" in wall and rec["engine_starts"] is False
    assert {"stage": "config", "reason": rec["checkpoint"]["wall"]["blocker"]} in rec["blockers"]




def _folder_with(models, tmp_path, name, state_change=None, config_change=None, split=0) -> Path:
    """A folder with the split fixture's config.json (changed by ``config_change``) and tokenizer, and a Q8_0 GGUF of
    its weights written by our writer (``state_change`` applied to the state dict first; ``split`` > 0: split)."""
    import json

    from sparse_mla.launch.checkpoint import load_checkpoint
    from sparse_mla.gguf.writer import write_gguf

    src = models[0]
    out = tmp_path / name
    out.mkdir()
    for f in src.iterdir():
        if not f.name.endswith((".gguf", ".safetensors")):
            shutil.copy(f, out / f.name)
    cfg, state = load_checkpoint(src)
    if config_change:
        (out / "config.json").write_text(json.dumps({**json.loads((src / "config.json").read_text()),
                                                     **config_change}))
    write_gguf(out / "model-Q8_0.gguf", cfg, state_change(state) if state_change else state, src, "Q8_0", split)
    return out


@pytest.mark.skipif(NO_PLUGIN is not None, reason=NO_PLUGIN or "")
def test_a_gguf_with_no_lm_head_is_refused_not_tied(models, tmp_path):
    """No output.weight in any file: the plugin's rule says "tied", and vLLM's GLM-5 model never ties its head
    (read in vLLM's code by tests/vllm_plugin/test_gguf_adapter.py): refused in the load plan and the diagnosis."""
    folder = _folder_with(models, tmp_path, "nohead", lambda st: {k: v for k, v in st.items() if k != "lm_head.weight"})
    model = str(folder / "model-Q8_0.gguf")
    with pytest.raises(UserInputError, match=r"no output\.weight in any of its 1 file\(s\).*empty LM head; refused"):
        _plan(model)
    rec = diagnose(model, "8.0", "auto", with_plugin=True)
    assert "never ties its LM head" in rec["checkpoint"]["wall"]["with_plugin"] and rec["engine_starts"] is False
    from sparse_mla.launch.engine import check_model

    with pytest.raises(UserInputError, match=r"would not load: this plugin's GlmDsaGGUFAdapter: .*never ties"):
        check_model(model)                                         # launch's check, before any engine starts


@pytest.mark.skipif(NO_PLUGIN is not None, reason=NO_PLUGIN or "")
def test_a_shard_missing_at_load_time_is_refused_by_the_plan(models, tmp_path):
    """The plugin's discovery lists the shards that exist; the plan counts them against split.count (diagnose
    refuses the same folder earlier, by name: test_a_missing_shard_is_refused_by_name...)."""
    folder = _copy(models, tmp_path)
    (folder / SHARDS[2]).unlink()
    with pytest.raises(UserInputError, match=r"a split of 4 shards, found 3 .*the first is shard 1"):
        _plan(str(folder / SHARDS[1]))
    (folder / SHARDS[0]).unlink()
    with pytest.raises(UserInputError, match=r"a split of 4 shards, found 2 .*the first is not shard 1"):
        _plan(str(folder / SHARDS[1]))


@pytest.mark.skipif(NO_PLUGIN is not None, reason=NO_PLUGIN or "")
def test_a_config_json_of_another_layout_is_refused_naming_the_tensors(models, tmp_path):
    """diagnose plans with the config.json vLLM reads, not the GGUF's metadata: a router without its bias
    (topk_method greedy) would ignore blk.N.exp_probs_b.bias; a config.json with an MTP layer the GGUF lacks is
    accepted (the model skips MTP weights; only MTP speculative decoding loads them)."""
    folder = _folder_with(models, tmp_path, "greedy", config_change={"topk_method": "greedy"}, split=12)
    first = str(folder / SHARDS[0])
    with pytest.raises(UserInputError, match=r"no vLLM parameter \(their values would be ignored\): "
                                             rf"in {SHARDS[0]}: blk\.1\.exp_probs_b\.bias; refused"):
        _plan(first)
    wall = diagnose(first, "8.0", "auto", with_plugin=True)["checkpoint"]["wall"]
    assert "blk.1.exp_probs_b.bias" in wall["with_plugin"] and wall["blocker"]
    mtp = _folder_with(models, tmp_path, "mtp", config_change={"num_nextn_predict_layers": 1}, split=12)
    adapter, mc = _plan(str(mtp / SHARDS[0]))                        # the MTP block mapped, in no file: accepted
    held = {t.name for n in SHARDS for t in gguf.GGUFReader(str(mtp / n)).tensors}
    assert mc.hf_config.num_nextn_predict_layers == 1 and not any(n.startswith("blk.2.") for n in held)
    assert any(k.startswith("blk.2.") for k in adapter.load_spec.gguf_to_hf_name_map)


@pytest.mark.skipif(NO_PLUGIN is not None, reason=NO_PLUGIN or "")
@pytest.mark.parametrize("quant", ["q8_0", "UD-Q8_0"])
def test_dir_quant_the_plugin_does_not_take_is_refused(models, quant):
    """vllm-gguf-plugin's is_local_gguf_quant decides whether vLLM reads DIR:QUANT as a GGUF at all."""
    with pytest.raises(UserInputError, match=f"vllm-gguf-plugin does not take '{quant}' for a GGUF quant type"):
        read_gguf(f"{models[0]}:{quant}")


def test_the_serve_line_carries_the_expanded_path(models, tmp_path, monkeypatch):
    """Neither vLLM nor the plugin expands "~": the diagnosed vllm serve line names the folder or first shard
    expanded, whatever form was given."""
    monkeypatch.setenv("HOME", str(models[0].parent))
    name = models[0].name
    for given, serves in ((f"~/{name}:Q8_0", f"{models[0]}:Q8_0"), (f"~/{name}/{SHARDS[2]}", str(models[0] / SHARDS[0]))):
        serve = diagnose(given, "8.0", "auto")["checkpoint"]["serve"]
        assert serve.split()[2] in (serves, f"'{serves}'") and "~" not in serve, serve


@pytest.mark.skipif(NO_PLUGIN is not None, reason=NO_PLUGIN or "")
def test_dir_quant_in_a_folder_named_like_a_glob_says_why_the_plugin_finds_nothing(models, tmp_path):
    """Issue 47: vllm-gguf-plugin's resolve_local_gguf globs the folder's name unescaped, so in ``gb[1]`` it finds
    none of the files it lists; the refusal says so (it listed the matching files as if they did not match)."""
    folder = tmp_path / "gb[1]"
    shutil.copytree(models[0], folder)
    with pytest.raises(UserInputError, match=r"resolve_local_gguf finds no file in .*gb\[1\].* reads the folder's "
                                             r"name as a glob pattern"):
        read_gguf(f"{folder}:Q8_0")
    assert read_gguf(str(folder / SHARDS[0]))["files"] == SHARDS              # the accepted way round it


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs os.mkfifo")
def test_a_fifo_is_no_gguf_and_is_not_read(tmp_path):
    """``is_gguf`` reads the magic of regular files only: opening a FIFO would block until a writer came."""
    import os

    os.mkfifo(tmp_path / "pipe")
    assert not is_gguf(tmp_path / "pipe")
