"""sparse_mla.diagnose.config: a config.json vLLM's loader refuses is one line that says why."""
from __future__ import annotations

import json
import re

import pytest

from sparse_mla import cli
from sparse_mla.errors import UserInputError
from sparse_mla.models import PRESET_CONFIGS

pytestmark = pytest.mark.every_line


@pytest.mark.parametrize("change, reason", [
    # (a field of the workbook's own rule, e.g. num_hidden_layers, is refused before vLLM sees it: tests/test_models.py)
    ({"norm_topk_prob": "yes"}, "Field 'norm_topk_prob' expected bool, got str (value: 'yes')"),
    ({"q_lora_rank": None}, "Field 'q_lora_rank' expected int, got NoneType"),
    ({"qk_rope_head_dim": 7}, "RoPE requires an even rotary dimension"),
])
def test_vllm_loader_refusal_keeps_its_reason(tmp_path, capsys, change, reason):
    """transformers puts the reason on the line after "Validation error for field 'x':", which alone was shown; what
    is accepted is the field's value (or the values the class validates), not another model_type (issue 47)."""
    from transformers import AutoConfig

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**PRESET_CONFIGS["glm-5"], **change}))
    try:
        AutoConfig.from_pretrained(tmp_path)
    except Exception:  # noqa: BLE001  (this transformers refuses the value: the diagnosis must keep its reason)
        pass
    else:
        pytest.skip(f"transformers {__import__('transformers').__version__} accepts {change}")
    assert cli.main(["diagnose", "--model", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vLLM cannot load the config" in err[0] and reason in err[0], err
    field = next(iter(change))
    assert f"accepted: a {field} that transformers' config class takes" in err[0] or (
        "accepted: values that transformers' config class validates" in err[0]), err


def test_refusal_names_the_users_file_not_the_temporary_copy(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({k: v for k, v in PRESET_CONFIGS["glm-5"].items() if k != "model_type"}))
    assert cli.main(["diagnose", "--model", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"Unrecognized model in {cfg}" in err[0] and "sparse_mla_model_" not in err[0], err


def test_refusal_in_a_fresh_process_is_one_line(tmp_path):
    """The command in its own process, where vLLM is first imported: stderr is the one error line. vLLM 0.33 logs each
    failed attempt to parse the config at ERROR, and its first import makes torch 2.14 log three deprecations; the
    diagnosis keeps both off (``QUIET_LOGGERS`` of the line's adapter, :mod:`sparse_mla.diagnose.lines`)."""
    import subprocess
    import sys

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({k: v for k, v in PRESET_CONFIGS["glm-5"].items() if k != "model_type"}))
    r = subprocess.run([sys.executable, "-m", "sparse_mla", "diagnose", "--model", str(cfg)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("sparse-mla diagnose: error: "), r.stderr[-2000:]


# ------------------------------------------------------------------ indexer_layers: GLM-5.2's shared top-k in vLLM
def _tiny_config(tmp_path, name, layers, **keys):
    """glm-5-tiny's config.json (sizes of make-checkpoint's preset) with ``layers`` layers and ``keys``."""
    from sparse_mla.launch.checkpoint import preset_config

    d = tmp_path / name
    d.mkdir()
    cfg = {**preset_config(index_topk=256, num_layers=layers), **keys}
    (d / "config.json").write_text(json.dumps(cfg))
    return d, cfg


@pytest.mark.parametrize("layers, keys", [
    (3, {}),
    (4, {"index_topk_pattern": "FSSF"}),
    (4, {"index_topk_pattern": "FS"}),                       # vLLM: layers past the pattern are full
    (6, {"index_topk_freq": 2}),                             # vLLM's default offset 2
    (6, {"index_topk_freq": 3, "index_skip_topk_offset": 1}),
    (7, {"index_topk_freq": 4, "index_skip_topk_offset": 3}),  # GLM-5.2's numbers
    (5, {"index_topk_freq": 2, "index_skip_topk_offset": -1}),  # round 10 (t7): any integer, as vLLM reads it
])
def test_indexer_layers_are_vllms_and_the_reference_mirrors_them(tmp_path, layers, keys):
    """``indexer_layers`` comes from vLLM's model built on the meta device (the layers with indexer parameters); the
    reference forward and make-checkpoint read the same declaration through index_sharing.own_indexer, a mirror of
    vLLM's inline rule, which must agree."""
    from sparse_mla import diagnose as dg
    from sparse_mla.launch.index_sharing import own_indexer

    from vllm_oracles import vllm_reads_indexer_types

    d, cfg = _tiny_config(tmp_path, "m", layers, **keys)
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto")
    if vllm_reads_indexer_types() and len(keys.get("index_topk_pattern") or "x" * layers) != layers:
        # vLLM 0.34 reads indexer_types, which transformers derives from a pattern: one of another length is refused
        assert rec["indexer_layers"] is None and any("indexer_types must contain one entry per hidden layer" in
                                                     b["reason"] for b in rec["blockers"]), rec["blockers"]
        return
    assert rec["indexer_layers"] == [i for i, own in enumerate(own_indexer(cfg)) if own], keys
    assert not [b for b in rec["blockers"] if "not initialized" in b["reason"]]


@pytest.mark.parametrize("keys, says", [       # breaker round 11: th was "ok" with nothing said, as td was not
    ({"index_topk_pattern": "FS", "indexer_types": ["full", "full"]},
     "the config's indexer_types (FF) and its index_topk_pattern / index_topk_freq (FS) disagree: transformers follows "
     "the first, vLLM the second (index_topk_pattern 'FS'): vLLM builds DSA indexers in layer 0 from this config"),
    ({"index_topk_freq": 2, "indexer_types": ["full", "full"]}, None),                  # tg: two that agree
])
def test_two_sharing_declarations_that_disagree_are_named_by_the_references_rule(tmp_path, keys, says):
    """Both keys in one config.json (make-checkpoint writes one): named by models.sharing_disagreement, the line the
    reference forward refuses them with (index_sharing.own_indexer), against the layers vLLM builds indexers in."""
    from sparse_mla import diagnose as dg
    from sparse_mla.launch.index_sharing import own_indexer

    from vllm_oracles import vllm_reads_indexer_types

    if vllm_reads_indexer_types():
        pytest.skip("this vLLM reads indexer_types itself (0.34): it builds what transformers does")
    d, cfg = _tiny_config(tmp_path, "m", 2, **keys)
    notes = dg.diagnose(str(d / "config.json"), "9.0", "auto")["config"].get("notes") or []
    assert [n for n in notes if "disagree" in n or "declares" in n] == ([] if says is None else
                                                                        [next(n for n in notes if says in n)]), notes
    if says is not None:
        with pytest.raises(UserInputError, match=re.escape(says.split(" (index_topk_pattern")[0])):
            own_indexer(cfg)


@pytest.mark.parametrize("keys, plugin", [({"index_topk_pattern": "SF"}, False),
                                          ({"indexer_types": ["shared", "full"]}, True)])
def test_a_shared_layer_0_is_a_blocker_as_make_checkpoint_refuses_it(tmp_path, keys, plugin):
    """One rule with make-checkpoint and the reference (index_sharing.own_indexer): vLLM builds layer 0 shared without
    complaint (the pattern; indexer_types through the plugin's hook) and it then reads a top-k buffer no layer wrote,
    so the diagnosis says the engine does not run as declared."""
    from sparse_mla import diagnose as dg
    from sparse_mla.errors import UserInputError
    from sparse_mla.launch.index_sharing import own_indexer

    d, cfg = _tiny_config(tmp_path, "m", 2, **keys)
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto", with_plugin=plugin)
    assert rec["indexer_layers"] == [1] and rec["engine_starts"] is False
    [b] = [b for b in rec["blockers"] if "layer 0 shared" in b["reason"]]
    assert b["stage"] == "indexer" and "no layer has written" in b["reason"], b
    with pytest.raises(UserInputError, match="layer 0 shared"):
        own_indexer(cfg)


def test_indexer_types_checkpoint_blocks_without_the_plugin(tmp_path):
    """A GLM-5.2-style checkpoint (only indexer_types; no layer-1 indexer tensors): vLLM builds an indexer in every
    layer, so its loader would stop -- said from the weight index alone (a folder with no weight file at all); with
    the plugin vLLM builds none in the shared layer and the blocker is gone. The same index with every layer's indexer
    tensors loads, and the diagnosis notes that vLLM runs indexers the model declares shared."""
    from sparse_mla import diagnose as dg
    from sparse_mla.launch.checkpoint import expected_weight_shapes

    from vllm_oracles import vllm_reads_indexer_types

    d, cfg = _tiny_config(tmp_path, "glm52", 2, indexer_types=["full", "shared"])
    names = expected_weight_shapes(cfg)           # make-checkpoint's names: no layer-1 indexer
    assert not [n for n in names if n.startswith("model.layers.1.self_attn.indexer.")]
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {n: "absent.safetensors"
                                                                               for n in names}}))
    stock = dg.diagnose(str(d), "9.0", "auto")
    if vllm_reads_indexer_types():                # vLLM 0.34 reads indexer_types itself: nothing to fix
        for rec in (stock, dg.diagnose(str(d), "9.0", "auto", with_plugin=True)):
            assert rec["indexer_layers"] == [0] and not [b for b in rec["blockers"] if "layer 1 " in b["reason"]]
        return
    assert stock["indexer_layers"] == [0, 1] and stock["engine_starts"] is False
    [b] = [b for b in stock["blockers"] if "not initialized" in b["reason"]]
    assert b["stage"] == "indexer" and "layer 1 " in b["reason"] and "indexer_types" in b["reason"]
    assert "index_topk_pattern 'FS'" in b["reason"] and "--with-plugin" in b["reason"]
    from sparse_mla.vllm_plugin.indexer_types import hooked

    before = hooked()
    plugin = dg.diagnose(str(d), "9.0", "auto", with_plugin=True)
    assert plugin["indexer_layers"] == [0] and not [b for b in plugin["blockers"] if "not initialized" in b["reason"]]
    assert hooked() == before                             # register()'s config hook does not outlive the probe
    again = dg.diagnose(str(d), "9.0", "auto")
    assert again["indexer_layers"] == [0, 1]

    full = {**names, **{n.replace("layers.0.", "layers.1."): s for n, s in names.items()
                        if n.startswith("model.layers.0.self_attn.indexer.")}}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {n: "absent.safetensors"
                                                                               for n in full}}))
    rec = dg.diagnose(str(d), "9.0", "auto")
    assert not [b for b in rec["blockers"] if "not initialized" in b["reason"]]
    assert any("runs an indexer in layer 1;" in n and "declares it shared" in n for n in rec["config"]["notes"])


def test_quantized_indexer_types_checkpoint_runs_uninitialized_indexers(tmp_path):
    """The same weight index with an fp8 quantization_config: vLLM's loader checks that every weight was loaded only
    for unquantized checkpoints (tests/vllm_plugin/test_indexer_types.py shows it on vLLM's own loader), so the
    blocker says the shared layer's indexer runs on uninitialized weights instead."""
    from sparse_mla import diagnose as dg
    from sparse_mla.launch.checkpoint import expected_weight_shapes

    from vllm_oracles import vllm_reads_indexer_types

    d, cfg = _tiny_config(tmp_path, "glm52fp8", 2, indexer_types=["full", "shared"], quantization_config={
        "quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]})
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        n: "absent.safetensors" for n in expected_weight_shapes(cfg)}}))
    rec = dg.diagnose(str(d), "9.0", "auto")
    if vllm_reads_indexer_types():                # vLLM 0.34 builds no indexer in the shared layer
        assert rec["indexer_layers"] == [0] and not [b for b in rec["blockers"] if "layer 1 " in b["reason"]]
        return
    [b] = [b for b in rec["blockers"] if "layer 1 " in b["reason"]]
    assert "uninitialized weights" in b["reason"] and "'fp8'" in b["reason"] and "not initialized" not in b["reason"]


@pytest.mark.parametrize("change, says", [
    # (issue 47's round of 2026-12-06 refused it before vLLM's loader, whose KeyError 'X' said no more; since round
    # 18, Y3, vLLM's refusal itself, with the field that holds the letter and what transformers maps)
    ({"index_topk_pattern": "FX"}, "vLLM cannot load the config of model '{m}': KeyError 'X' (in index_topk_pattern = "
                                   "'FX'); accepted: an index_topk_pattern of the letters F (full) and S (shared)"),
    ({"index_topk_freq": 0}, "config '{m}' has index_topk_freq = 0; accepted: a number other than 0 (vLLM divides"),
    # round 19 (U19-2): a list pattern with an entry transformers' indexer_types does not take named by the pattern
    ({"index_topk_pattern": [1, "S", "F", "S"]}, "(transformers derives indexer_types from index_topk_pattern = [1, "
                                                 "'S', 'F', 'S']); accepted: an index_topk_pattern of the letters F"),
])
def test_a_config_value_vllm_cannot_use_is_named_with_its_field(run_cli, tmp_path, change, says):
    """Issue 47's unclear messages: transformers' KeyError of a pattern's letter names the field holding it; an
    index_topk_freq of 0 (vLLM's model code divides by it) is refused as the bad value it is, not a blocker."""
    m = tmp_path / "m"
    m.mkdir()
    (m / "config.json").write_text(json.dumps({**PRESET_CONFIGS["glm-5"], **change}))
    rc, out, err = run_cli("--model", str(m), "--capability", "9.0")
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and says.format(m=m) in lines[0], lines


@pytest.mark.parametrize("model_type, keys, layers026, layers034, says", [
    ("deepseek_v32", {"index_topk_pattern": "fsfs"}, [0, 1, 2, 3], [0, 1, 2, 3], "index_topk_pattern 'fsfs' (vLLM "
     "reads a layer as shared only where its entry is 'S'): vLLM builds DSA indexers in layers 0-3 of 4"),
    ("deepseek_v32", {"index_topk_pattern": "F S "}, [0, 1, 3], [0, 1, 3],
     "vLLM builds DSA indexers in layers 0-1, 3 of 4"),
    # vLLM 0.34 reads the indexer_types transformers derives from a list (['F', 'S', ...]) and refuses it
    ("glm_moe_dsa", {"index_topk_pattern": ["F", "S", "F", "S"]}, [0, 2], None,
     "vLLM builds DSA indexers in layers 0, 2 of 4"),
    ("glm_moe_dsa", {"index_topk_freq": 2.0}, [0, 1, 3], [0, 1, 3], "index_topk_freq 2.0 (vLLM: layer l full iff "
     "max(l - offset + 1, 0) % 2.0 == 0): vLLM builds DSA indexers in layers 0-1, 3 of 4"),
    ("glm_moe_dsa", {"index_topk_freq": -2}, [0, 1, 3], [0, 1, 2, 3], "vLLM builds DSA indexers in layers 0-1, 3 of 4 "
     "from this config; make-checkpoint writes F/S letters and integers; transformers' GlmMoeDsaConfig derives "
     "indexer_types FFFF from it, vLLM builds FFSF: the two run different models"),
    ("deepseek_v32", {"index_topk_freq": 2.0}, [0, 1, 3], None, "vLLM builds DSA indexers in layers 0-1, 3 of 4"),
])
def test_a_sharing_vllm_reads_its_own_way_is_diagnosed_as_vllm_builds_it(tmp_path, model_type, keys, layers026,
                                                                         layers034, says):
    """Breaker round 18 (Y3): a lower-case, spaced or list pattern and a float or negative freq were refused as bad
    input while vLLM 0.26 starts on them (``pattern[layer] == "S"``, ``% freq`` as Python computes it); the diagnosis
    says what vLLM builds (its own model on the meta device), and the reference forward reads it so where transformers
    reads it alike. vLLM 0.34 reads ``indexer_types`` (transformers derives one for glm_moe_dsa) and refuses a freq
    other than a positive integer (``compute_skip_topk_layers``): its refusal in its words (``layers034`` None)."""
    from sparse_mla import diagnose as dg
    from sparse_mla.launch.index_sharing import own_indexer

    from vllm_oracles import vllm_reads_indexer_types

    d, cfg = _tiny_config(tmp_path, "m", 4, model_type=model_type, **keys)
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto")
    notes = " | ".join(rec["config"].get("notes") or [])
    want = layers034 if vllm_reads_indexer_types() else layers026
    if want is None:
        assert rec["indexer_layers"] is None and rec["engine_starts"] is False, rec["blockers"]
        assert any("indexer_types only supports" in b["reason"] or "index_topk_freq must be a positive integer" in
                   b["reason"] for b in rec["blockers"]), rec["blockers"]
        return
    assert rec["engine_starts"] is True and not rec["blockers"], rec["blockers"]
    assert rec["indexer_layers"] == want
    if not vllm_reads_indexer_types():
        assert says in notes, notes
        if "different models" not in says:          # the reference forward reads it as vLLM builds it
            assert [i for i, own in enumerate(own_indexer(cfg)) if own] == want


@pytest.mark.parametrize("model_type", ["glm_moe_dsa", "deepseek_v32"])
def test_a_sharing_that_shares_every_layer_is_blocked_by_its_layer_0(tmp_path, model_type):
    """Breaker round 19 (U19-1): freq 2 / offset 0.5 shares every layer (vLLM: max(l - 0.5 + 1, 0) % 2 != 0); the
    blocker named the architecture and offered the one the config has; it is the sharing's layer 0 (or vLLM's own
    refusal of it, where it reads the indexer_types transformers derives)."""
    from sparse_mla import diagnose as dg

    d, _ = _tiny_config(tmp_path, "m", 4, model_type=model_type, index_topk_freq=2, index_skip_topk_offset=0.5)
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto")
    assert rec["engine_starts"] is False and rec["blockers"], rec
    reasons = " | ".join(b["reason"] for b in rec["blockers"])
    assert "architectures" not in reasons, reasons
    assert "makes layer 0 shared" in reasons or "preceding 'full'" in reasons, reasons


@pytest.mark.parametrize("pattern, says", [
    ("F", "index_topk_pattern 'F' has 1 letter for 3 layers: vLLM builds a full indexer in layers 1-2, past its end"),
    ("FSFSS", "index_topk_pattern 'FSFSS' has 5 letters for 3 layers: vLLM reads its first 3 and ignores the other 2"),
])
def test_a_pattern_of_another_length_than_the_layers_is_a_note_in_vllms_reading(tmp_path, pattern, says):
    """Issue 47 (2026-12-06): a pattern shorter or longer than the layers was "ok" with no word; vLLM starts (layers
    past the end are full, letters past the layers unread), so the diagnosis says how vLLM reads it, not a blocker."""
    from sparse_mla import diagnose as dg

    from vllm.model_executor.models import utils

    d, _ = _tiny_config(tmp_path, "m", 3, index_topk_pattern=pattern)
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto")
    if hasattr(utils, "compute_skip_topk_layers"):      # vLLM 0.34 checks the length itself: its refusal, in its words
        [b] = rec["blockers"]
        assert rec["engine_starts"] is False and "expected 3, got" in b["reason"], b
        assert "letters for 3 layers" not in rec["stages"]["config"]
        return
    assert rec["engine_starts"] is True and not rec["blockers"], rec["blockers"]
    assert says in rec["stages"]["config"], rec["stages"]["config"]


@pytest.mark.parametrize("plugin", [False, True])
def test_indexer_types_of_another_length_than_the_layers_is_named_by_make_checkpoints_rule(tmp_path, plugin):
    """Breaker round 10 (t3): indexer_types [full, full, shared] on 2 layers was "ok" with no word, while
    make-checkpoint refuses it (models.check_sharing_length, its rule and the reference forward's); vLLM 0.26 starts
    (it reads no indexer_types; the plugin's hook gives it the letters as a pattern, read up to the layers), so a
    note names it and the layers vLLM builds indexers in; vLLM 0.34 refuses it in its own words."""
    from sparse_mla import diagnose as dg

    from vllm_oracles import vllm_reads_indexer_types

    d, _ = _tiny_config(tmp_path, "m", 2, indexer_types=["full", "full", "shared"])
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto", with_plugin=plugin)
    if vllm_reads_indexer_types():
        assert rec["engine_starts"] is False and any("one entry per hidden layer" in b["reason"]
                                                     for b in rec["blockers"]), rec["blockers"]
        return
    assert rec["engine_starts"] is True and rec["indexer_layers"] == [0, 1], rec["blockers"]
    assert ("indexer_types 'FFS' has 3 letters for 2 layers; accepted: one letter per decoder layer (2); "
            "make-checkpoint and the reference forward (launch --parity) refuse it; vLLM builds DSA indexers in "
            "layers 0-1 from this config") in rec["stages"]["config"], rec["stages"]["config"]
    assert "index_topk_pattern" not in rec["stages"]["config"]       # the hook's pattern: said once


def test_an_architecture_that_builds_no_indexer_for_a_dsa_config_names_the_class(tmp_path):
    """Issue 47 (2026-12-06): ``LlamaForCausalLM`` over a glm_moe_dsa config was blocked as "layer 0 shared"; vLLM
    builds its LlamaForCausalLM, with no indexer anywhere, and the blocker says so and names transformers' class."""
    from sparse_mla import diagnose as dg

    d, _ = _tiny_config(tmp_path, "m", 2, architectures=["LlamaForCausalLM"])
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto")
    [b] = [b for b in rec["blockers"] if b["stage"] == "indexer"]
    assert "makes vLLM build LlamaForCausalLM" in b["reason"] and "accepted: GlmMoeDsaForCausalLM" in b["reason"], b
    assert "layer 0 shared" not in b["reason"]


def test_vllms_long_lists_are_cut_and_a_bare_key_error_says_where(tmp_path):
    """An unknown architecture: vLLM's message lists its whole registry (18 KB, printed twice); the list is cut to
    its first items and count. A ``KeyError: 'factor'`` from vLLM's model code names the line that read it."""
    from sparse_mla import diagnose as dg
    from sparse_mla.diagnose.config import raised_where

    d, _ = _tiny_config(tmp_path, "m", 2, architectures=["FooForCausalLM"])
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto")
    [b] = rec["blockers"]
    assert "FooForCausalLM" in b["reason"] and " in all)]" in b["reason"] and len(b["reason"]) < 1000, b
    from vllm.model_executor.layers.rotary_embedding import get_rope

    try:
        get_rope(64, max_position=4096, is_neox_style=True, rope_parameters={"rope_type": "yarn"})
    except KeyError as e:
        where = raised_where(e)
    assert where.startswith(" (vllm/model_executor/layers/rotary_embedding/") and "factor" in where, where


def test_a_rope_key_vllm_reads_and_the_config_lacks_names_the_configs_rope(tmp_path):
    """The breaker's sixth round (2026-12-06): a rope_type vLLM's DeepSeek MLA runs as YaRN ('banana') without its
    factor was blocked as vLLM's bare ``KeyError: 'factor'``; the line now names the config's rope and its type."""
    from sparse_mla import diagnose as dg

    d, _ = _tiny_config(tmp_path, "m", 2, rope_parameters={"rope_type": "banana", "rope_theta": 10000.0})
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto")
    [b] = [b for b in rec["blockers"] if b["stage"] == "memory"]
    assert "KeyError: 'factor'" in b["reason"] and "rope_parameters (rope_type 'banana') has no 'factor'" in \
        b["reason"] and "accepted:" in b["reason"], b


def test_no_advice_leads_into_the_layer_0_blocker(tmp_path):
    """The breaker (2026-12-06): indexer_types ["shared", "full"] without the plugin advised --with-plugin (pattern
    "SF"), which the diagnosis then blocks as layer 0 shared. Advice is given only for a pattern whose layer 0 is
    full."""
    from sparse_mla import diagnose as dg

    d, _ = _tiny_config(tmp_path, "m", 2, indexer_types=["shared", "full"])
    rec = dg.diagnose(str(d / "config.json"), "9.0", "auto")
    said = rec["stages"]["config"] + " ".join(b["reason"] for b in rec["blockers"])
    assert "shared" in said and "--with-plugin" not in said and "--hf-overrides" not in said, said
