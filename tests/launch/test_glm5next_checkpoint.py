"""GLM-5.3-Flash's tiny checkpoint (``make-checkpoint --preset glm-5.3-flash``) and its float64 reference.

The tensors are held to vLLM's own loader: vLLM's ``Glm5NextForCausalLM`` built on the meta device as the diagnosis
builds it (:mod:`sparse_mla.diagnose.meta_model`'s stand-ins: one rank, no attention kernels, nothing allocated) and
its own ``load_weights`` (``vllm/models/glm5next/common/model.py``: the stacked mappings -- ``q_a_proj`` and
``kv_a_proj_with_mqa`` into ``fused_qkv_a_proj``, the indexer's ``wk`` and ``weights_proj`` into ``wk_weights_proj``,
KDA's six projections into ``in_proj_qkvbfg_a`` and its three short convolutions into ``conv1d``, ``gate_proj`` and
``up_proj`` into ``gate_up_proj`` -- and the FusedMoE expert mapping) reading every tensor of the file, each parameter's
``weight_loader`` wrapped to see which tensor it was handed. Every tensor must reach a parameter loader exactly once
(vLLM's loader skips some names without a word: ``rotary_emb.inv_freq``, expert names it has no expert for), in the
parameter's dtype; every parameter must be filled exactly (the tensors it was handed cover its elements, each shard
once). The mutations below -- a wrong, missing, extra or silently skipped name and a wrong shape -- must each be
caught, so the check is seen to fail.

transformers' ``Glm5NextTextModel.from_pretrained`` reads the same file with no parameter left unset
(:class:`~sparse_mla.launch.glm5next_reference.Glm5NextReference`), which then runs in float64 on the CPU.

On a vLLM line without GLM-5.3-Flash (0.26) make-checkpoint refuses the preset in one line
(``tests/diagnose/test_glm5next.py``); the tests here that need the checkpoint are skipped there.
"""
from __future__ import annotations

import contextlib
import copy
import json
import shutil

import pytest
import torch

from sparse_mla import cli
from sparse_mla.errors import UserInputError
from sparse_mla.launch import checkpoint as ck
from sparse_mla.models import GLM5_NEXT_VLLM_LINE, GLM5_NEXT_VLLM_LINES
from sparse_mla.vllm_lines import current_line

pytestmark = pytest.mark.every_line

ON_FLASH_LINE = current_line() in GLM5_NEXT_VLLM_LINES
flash_line = pytest.mark.skipif(not ON_FLASH_LINE, reason=f"vLLM {GLM5_NEXT_VLLM_LINE} has GLM-5.3-Flash")
PRESET = "glm-5.3-flash"
INDEX_TOPK = 128        # the smallest vLLM takes (8 pools of 16): a 160-token prompt binds the selection


@pytest.fixture(scope="module")
def flash(module_tmp):
    """The tiny checkpoint as make-checkpoint writes it (8 layers: KDA 0-2, 4-6; MLA 3, 7; MoE from layer 3)."""
    if not ON_FLASH_LINE:
        pytest.skip(f"vLLM {GLM5_NEXT_VLLM_LINE} has GLM-5.3-Flash")
    return ck.make_checkpoint(module_tmp("flash") / "glm53tiny", preset=PRESET, index_topk=INDEX_TOPK)


# ---- vLLM's loader -----------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _vllm_contexts(path):
    """vLLM's engine configuration of ``path`` (the diagnosis': EngineArgs on a probe platform for SM90) and the
    stand-ins under which its model is built and loaded (:mod:`sparse_mla.diagnose.meta_model`)."""
    from vllm.config import CompilationMode, set_current_vllm_config

    from sparse_mla.diagnose import config as stage_config
    from sparse_mla.diagnose import meta_model as mm
    from sparse_mla.diagnose import path as dpath
    from sparse_mla.diagnose import probe as pr
    from sparse_mla.diagnose import request

    req = request.resolve(str(path), "9.0", "auto", 1, False)
    pr.load_vllm_extensions()
    platform = dpath._platform(req)[0]
    with pr.quiet_logs(), pr.use_platform(platform), pr.stock_selection():
        vc, info = stage_config.engine_config(req, path, None)
        assert vc is not None and info["architecture"] == "Glm5NextForCausalLM", info
        vc = copy.deepcopy(vc)
        vc.compilation_config.mode = CompilationMode.NONE
        vc.compilation_config.static_forward_context.clear()
        with mm._process_groups(1), mm._building(None), pr.cuda_alloc_on_meta(), \
                mm.default_dtype(vc.model_config.dtype), set_current_vllm_config(vc):
            yield vc
        vc.compilation_config.static_forward_context.clear()


def _wrap_loaders(model, calls: list, current: list) -> None:
    """Each parameter's ``weight_loader`` (vLLM's ``default_weight_loader`` where it has none) records
    ``(tensor name, parameter name, tensor shape, tensor dtype, shard key)`` before loading."""
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    def wrap(pname, real):
        def load(param, w, *args, **kw):
            shard = (kw.get("shard_id"), kw.get("expert_id")) if "expert_id" in kw else (args[0] if args else None)
            calls.append((current[0], pname, tuple(w.shape), w.dtype, shard))
            return real(param, w, *args, **kw)
        return load

    for name, p in model.named_parameters():
        p.weight_loader = wrap(name, getattr(p, "weight_loader", default_weight_loader))


def _problems(model, loaded: set, calls: list, names: list[str]) -> list[str]:
    """What the loading shows wrong (module docstring), one line each; [] when nothing is."""
    params = dict(model.named_parameters())
    out = [f"parameter {n} not loaded" for n in sorted(set(params) - loaded)]
    per_tensor: dict[str, int] = {}
    filled: dict[str, int] = {}
    shards: dict[str, list] = {}
    for tensor, pname, shape, dtype, shard in calls:
        per_tensor[tensor] = per_tensor.get(tensor, 0) + 1
        filled[pname] = filled.get(pname, 0) + torch.Size(shape).numel()
        shards.setdefault(pname, []).append(shard)
        if dtype != params[pname].dtype:
            out.append(f"{tensor} stored {dtype}, vLLM's {pname} is {params[pname].dtype}")
    out += [f"tensor {n} reached no parameter loader" for n in names if n not in per_tensor]
    out += [f"tensor {n} reached {k} parameter loaders" for n, k in per_tensor.items() if k != 1]
    out += [f"parameter {p} got {filled.get(p, 0)} of its {t.numel()} elements" for p, t in params.items()
            if filled.get(p, 0) != t.numel()]
    out += [f"parameter {p} got shards {s}" for p, s in shards.items() if len(set(map(repr, s))) != len(s)]
    return out


@pytest.fixture(scope="module")
def vllm_load(flash):
    """``load(weights) -> problems``: vLLM's model, built once on the meta device, loads ``weights`` (``[(name,
    tensor)]``) through its own ``load_weights``; the problems :func:`_problems` finds, or ``["raised ..."]``."""
    pytest.importorskip("vllm.models.glm5next.common.model")
    from vllm.model_executor.model_loader.utils import initialize_model

    with _vllm_contexts(flash) as vc:
        with torch.device("meta"):
            model = initialize_model(vc)

    def load(weights):
        calls, current = [], [None]
        _wrap_loaders(model, calls, current)

        def stream():
            for name, t in weights:
                current[0] = name
                yield name, t

        with _vllm_contexts(flash):
            try:
                loaded = model.load_weights(stream())
            except Exception as e:  # noqa: BLE001 - vLLM's refusal (KeyError, AssertionError, ValueError, ...)
                return [f"raised {type(e).__name__}: {e}"]
        return _problems(model, loaded, calls, [n for n, _ in weights])

    return load


@pytest.fixture(scope="module")
def tensors(flash):
    from safetensors.torch import load_file

    return list(load_file(str(flash / "model.safetensors")).items())


@flash_line
def test_vllm_loads_every_tensor_into_every_parameter(vllm_load, tensors, flash):
    """vLLM's own loader consumes every tensor once, in its parameter's dtype, and fills every parameter; the names
    are transformers' (its reverted conversion) and the layer kinds transformers' schedule."""
    assert vllm_load(tensors) == []
    cfg = json.loads((flash / "config.json").read_text())
    names = {n for n, _ in tensors}
    assert cfg["layer_types"] == ["linear_attention"] * 3 + ["indexed_attention"] + ["linear_attention"] * 3 + \
        ["indexed_attention"]
    assert "model.layers.3.self_attn.indexer.index_kpool_compress_gate" in names
    assert "model.layers.0.self_attn.q_conv1d.weight" in names and "model.layers.0.hc_attn_fn" in names
    assert "model.layers.4.mlp.experts.7.down_proj.weight" in names and "model.layers.2.mlp.gate_proj.weight" in names
    shapes = dict((n, tuple(t.shape)) for n, t in tensors)
    assert shapes["model.layers.3.self_attn.kv_a_proj_with_mqa.weight"] == (512, cfg["hidden_size"])   # no rope rows
    assert shapes["model.layers.3.self_attn.kv_b_proj.weight"] == (cfg["num_attention_heads"] * 512, 512)


def _renamed(old, new):
    return lambda ts: [(new if n == old else n, t) for n, t in ts]


#: wrong checkpoint -> (the change, what the problems must name)
MUTATIONS = {
    # transformers' in-memory name, not the checkpoint's (revert_weight_conversion not applied): vLLM raises
    "a name vLLM does not know": (_renamed("model.layers.0.hc_attn_fn", "model.layers.0.attn_hc.fn"), "attn_hc.fn"),
    "a missing expert tensor": (lambda ts: [(n, t) for n, t in ts if n != "model.layers.3.mlp.experts.1.up_proj.weight"],
                                "model.layers.3.mlp.experts.routed_experts.w13_weight got"),
    "a missing shard of a stacked parameter": (lambda ts: [(n, t) for n, t in ts
                                                           if n != "model.layers.0.self_attn.k_conv1d.weight"],
                                               "model.layers.0.self_attn.conv1d.weight got"),
    "an extra tensor": (lambda ts: ts + [("model.layers.0.self_attn.extra_proj.weight", torch.zeros(4, 4))],
                        "extra_proj"),
    # vLLM's load_weights drops it without a word: only the consumed-tensor check sees it
    "a tensor vLLM skips without a word": (lambda ts: ts + [("model.layers.3.self_attn.rotary_emb.inv_freq",
                                                             torch.zeros(4))], "rotary_emb.inv_freq reached no"),
    "a tensor twice": (lambda ts: ts + [(n, t) for n, t in ts if n == "model.norm.weight"], "model.norm.weight reached 2 parameter loaders"),
    # one row too many: vLLM's ColumnParallelLinear.weight_loader narrows it to the parameter (its TP slicing) and
    # loads it without a word; the element count sees it
    "a wrong shape": (lambda ts: [(n, torch.zeros(t.shape[0] + 1, *t.shape[1:], dtype=t.dtype)
                                   if n == "model.layers.3.self_attn.q_b_proj.weight" else t) for n, t in ts],
                      "model.layers.3.self_attn.q_b_proj.weight got 1049088"),
    "a wrong dtype": (lambda ts: [(n, t.to(torch.bfloat16) if n == "model.layers.0.hc_attn_base" else t)
                                  for n, t in ts], "model.layers.0.hc_attn_base stored torch.bfloat16"),
}


@flash_line
@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_the_load_check_fails_on_a_wrong_checkpoint(vllm_load, tensors, what):
    """The check above is not one that cannot fail: each wrong checkpoint is caught."""
    change, says = MUTATIONS[what]
    problems = vllm_load(change(tensors))
    assert any(says in p for p in problems), problems


# ---- the files, the options ----------------------------------------------------------------------------------------

@flash_line
def test_files_tokenizer_and_determinism(flash, tmp_path, capsys, monkeypatch):
    """config.json (transformers' tiny geometry, the NoPE MLA head kept, the mark), generation_config.json, the
    tokenizer (read by vLLM's own tokenizer loader) and model.safetensors; the CLI writes the same bytes, another seed
    other weights."""
    from vllm.tokenizers import get_tokenizer

    from sparse_mla.launch import glm5next_weights as gw

    cfg = json.loads((flash / "config.json").read_text())
    assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]) == (512, 0, 256,
                                                                                                           256)
    assert (cfg["index_topk"], cfg["index_kpool"], cfg["index_n_heads"], cfg["index_head_dim"]) == (128, 16, 32, 128)
    assert cfg["model_type"] == "glm5_next" and cfg["architectures"] == ["Glm5NextForCausalLM"]
    assert cfg["sparse_mla_make_checkpoint"] is True and cfg["num_hidden_layers"] == 8
    assert json.loads((flash / "generation_config.json").read_text())["eos_token_id"] == cfg["eos_token_id"] == 0
    tok = get_tokenizer(str(flash))
    text = "the sparse attention kernel reads the latent cache"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("launch.checkpoint",))
    assert cli.main(["make-checkpoint", str(tmp_path / "c"), "--preset", PRESET, "--index-topk", str(INDEX_TOPK)]) == 0
    assert "parameters:" in capsys.readouterr().out
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (tmp_path / "c" / name).read_bytes() == (flash / name).read_bytes(), name
    small = {**cfg, "num_hidden_layers": 4, "layer_types": None, "mlp_layer_types": None, "indexer_types": None}
    one, again, other = gw.make_state_dict(small, 0), gw.make_state_dict(small, 0), gw.make_state_dict(small, 1)
    assert all(torch.equal(one[k], again[k]) for k in one)
    assert not any(torch.equal(one[k], other[k]) for k in one if one[k].numel() > 8)


@pytest.mark.parametrize("argv, needle", [
    (["--mtp"], f"--mtp with --preset {PRESET}: its tiny checkpoint has no MTP layer"),
    (["--gguf", "Q8_0"], "--gguf with --preset"),
    (["--index-topk-pattern", "FSSF"], "--index-topk-pattern with --preset"),
    (["--config-only", "--seed", "3"], f"--seed with --preset {PRESET} --config-only"),
    (["--config-only", "--max-position-embeddings", "4096"], "--max-position-embeddings 4096 with --config-only"),
    (["--max-position-embeddings", "0"], "max_position_embeddings 0 is not accepted"),
    (["--layers", "3"], "num_layers 3 is not accepted"),
])
def test_what_the_preset_cannot_write_is_one_line(tmp_path, capsys, monkeypatch, argv, needle):
    if not hasattr(pytest.importorskip("transformers"), "Glm5NextTextConfig"):
        pytest.skip("this transformers has no glm5_next")
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("launch.checkpoint",))
    assert cli.main(["make-checkpoint", str(tmp_path / "o"), "--preset", PRESET, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "accepted:" in err[0], err
    assert not (tmp_path / "o").exists()


@flash_line
def test_a_transformers_without_the_weight_conversion_is_one_line(tmp_path, capsys, monkeypatch):
    """transformers 5.17.0 has glm5_next but no weight conversion for it: its names ('attn_hc.base') are not the ones
    vLLM loads (vLLM 0.33 on the H100 died on ``KeyError: 'layers.0.attn_hc.base'``, 2026-12-06). Stood in for by a
    revert that renames nothing: make-checkpoint refuses in one line and writes nothing."""
    if not hasattr(pytest.importorskip("transformers"), "Glm5NextTextConfig"):
        pytest.skip("this transformers has no glm5_next")
    import transformers.core_model_loading as cml

    monkeypatch.setattr(cml, "revert_weight_conversion", lambda model, sd: sd)
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("launch.checkpoint",))
    assert cli.main(["make-checkpoint", str(tmp_path / "o"), "--preset", PRESET]) == 2
    # torch 2.14 warns of its own deprecations (torch/_opaque_base.py ...) when transformers' model is imported
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if "site-packages/torch/" not in ln]
    assert len(err) == 1 and "no glm5_next weight conversion" in err[0] and "('layers.0." in err[0], err
    assert not (tmp_path / "o").exists()


def test_config_only_is_glm53_flash_s_alone(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("launch.checkpoint",))
    assert cli.main(["make-checkpoint", str(tmp_path / "o"), "--config-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config-only with --preset 'glm-5-tiny'" in err[0], err
    with pytest.raises(UserInputError, match="config_only 'yes' is not accepted"):
        ck.make_checkpoint(tmp_path / "p", preset=PRESET, config_only="yes")


# ---- the float64 reference -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference(flash):
    from sparse_mla.launch.glm5next_reference import Glm5NextReference

    return Glm5NextReference.from_pretrained(flash)


PROMPT = [579, 367, 377, 348, 268, 70, 66, 69, 84, 360, 361, 303]


@flash_line
def test_reference_runs_in_float64_throughout(reference):
    """Every module's floating output is float64 under the reference (transformers' own forward rounds the router,
    the MHC mixing and the KDA gates to float32: without the up-casts some are float32 and the logits move)."""
    from sparse_mla.launch.glm5next_reference import float64_upcasts

    seen: dict[str, set] = {}

    def hook(mod, inp, out):
        for o in out if isinstance(out, tuple) else (out,):
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                seen.setdefault(str(o.dtype), set()).add(type(mod).__name__)

    handles = [m.register_forward_hook(hook) for m in reference.model.modules()]
    try:
        logits = reference.logits(PROMPT)
        assert set(seen) == {"torch.float64"}, seen
        seen.clear()
        with torch.no_grad():
            plain = reference.model(input_ids=torch.tensor([PROMPT]), use_cache=False).last_hidden_state[0]
        assert "torch.float32" in seen                              # transformers' own up-casts, left alone
    finally:
        for h in handles:
            h.remove()
    assert logits.dtype == torch.float64 and logits.shape == (len(PROMPT), reference.vocab_size)
    diff = float((plain @ reference.lm_head_weight.T - logits).abs().max())
    assert 0 < diff < 1e-3 and float(logits.std()) > 0.1           # float32 rounding apart; logits not flat
    with float64_upcasts():
        assert torch.ones(2).float().dtype == torch.float64 and torch.zeros(2, dtype=torch.float32).dtype == \
            torch.float64


@flash_line
def test_reference_greedy_tokens(reference):
    """Greedy decoding: each token is the argmax of the logits of the prompt and the tokens before it."""
    g = reference.greedy(PROMPT, 3)
    assert len(g["token_ids"]) == 3 and all(gap >= 0 for gap in g["top2_gaps"])
    assert g["first_logprobs"].dtype == torch.float64 and int(g["first_logprobs"].argmax()) == g["token_ids"][0]
    last = reference.logits(PROMPT + g["token_ids"][:2])[-1]
    assert int(last.argmax()) == g["token_ids"][2]
    assert abs(float(torch.log_softmax(last, -1).max()) - g["logprobs"][2]) < 1e-12
    with pytest.raises(UserInputError, match="accepted: a non-empty sequence of token ids from 0 to 2047"):
        reference.logits([5, 2048])
    with pytest.raises(UserInputError, match="max_tokens 0 is not accepted"):
        reference.greedy(PROMPT, 0)


@flash_line
def test_reference_refuses_what_transformers_would_not_fill(flash, tmp_path):
    """A checkpoint missing a tensor of transformers' model, or a config-only folder, is one line."""
    from safetensors.torch import load_file, save_file

    from sparse_mla.launch.glm5next_reference import Glm5NextReference

    bad = tmp_path / "bad"
    shutil.copytree(flash, bad)
    sd = load_file(str(bad / "model.safetensors"))
    del sd["model.layers.3.self_attn.indexer.index_kpool_compress_ape"]
    save_file(sd, str(bad / "model.safetensors"))
    with pytest.raises(UserInputError, match="does not fit transformers' Glm5NextTextModel.*index_kpool_compress_ape"):
        Glm5NextReference.from_pretrained(bad)
    only = ck.make_checkpoint(tmp_path / "only", preset=PRESET, config_only=True)
    with pytest.raises(UserInputError, match="has no \\*.safetensors"):
        Glm5NextReference.from_pretrained(only)


@flash_line
def test_the_gpu_parity_tools_judging(reference):
    """tools/gpu/glm5next_parity.py's judging (its GPU run is the harness' glm5next stage), on the CPU with made-up
    engine outputs: the reference's own greedy run has regret 0 and no divergence; a run that takes the reference's
    runner-up first has the reference's top-2 gap as regret and diverges at token 0."""
    import importlib.util
    from pathlib import Path

    tool = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "glm5next_parity.py"
    spec = importlib.util.spec_from_file_location("glm5next_parity", tool)
    gp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gp)
    own = reference.greedy(PROMPT, 2)
    top = torch.topk(own["first_logprobs"], 5)
    same = {"token_ids": own["token_ids"], "logprobs": own["logprobs"],
            "first_top_logprobs": {str(int(i)): float(v) for v, i in zip(top.values, top.indices)}}
    r = gp.judge(reference, PROMPT, same, 2)
    assert r["max_regret"] == 0 and r["first_divergence"] is None and r["max_abs_logprob_diff"] < 1e-9
    assert r["first_token"]["vllm"] == r["first_token"]["reference_argmax"]
    assert r["first_token"]["max_abs_top_k_logprob_diff"] < 1e-9
    second = int(top.indices[1])
    other = {"token_ids": [second], "logprobs": [float(top.values[1])], "first_top_logprobs": same["first_top_logprobs"]}
    r = gp.judge(reference, PROMPT, other, 1)
    assert r["first_divergence"] == 0 and abs(r["max_regret"] - own["top2_gaps"][0]) < 1e-12
    assert r["reference_gap_at_divergence"] == own["top2_gaps"][0]
