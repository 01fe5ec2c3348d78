"""sparse_mla.launch.checkpoint: files, tensor names/shapes (checked against vLLM's real ``load_weights``), determinism,
atomic writes and user-input errors."""
from __future__ import annotations

import json
import re
import os
from pathlib import Path

import pytest
import torch

from sparse_mla.launch import checkpoint as ck
from sparse_mla import cli
from sparse_mla.errors import UserInputError


@pytest.fixture(scope="module")
def ckpt(module_tmp) -> Path:
    return ck.make_checkpoint(module_tmp("ck") / "glm5tiny", seed=0)


@pytest.fixture(scope="module")
def ckpt_mtp(module_tmp) -> Path:
    """The same checkpoint (seed 0) with GLM-5's MTP layer (``make-checkpoint --mtp``)."""
    out = module_tmp("ckmtp") / "glm5tiny"
    assert cli.main(["make-checkpoint", str(out), "--mtp"]) == 0
    return out


@pytest.fixture
def only_checkpoint_cli(monkeypatch):
    """Build the CLI with just this module's subcommand (other steps' modules are not this test's concern)."""
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("launch.checkpoint",))


def test_files_and_config(ckpt):
    names = {p.name for p in ckpt.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= names
    assert not [p for p in ckpt.parent.iterdir() if p.name.startswith(".")], "temp dir left behind"
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["architectures"] == ["GlmMoeDsaForCausalLM"] and cfg["model_type"] == "glm_moe_dsa"
    # GLM-5's attention geometry, unchanged
    geo = dict(num_attention_heads=64, num_key_value_heads=64, kv_lora_rank=512, qk_nope_head_dim=192,
               qk_rope_head_dim=64, v_head_dim=256, index_n_heads=32, index_head_dim=128, index_topk=2048,
               indexer_rope_interleave=True, rope_interleave=True)
    assert {k: cfg[k] for k in geo} == geo
    assert cfg["rope_parameters"] == {"rope_type": "default", "rope_theta": 1e6}
    assert cfg["q_lora_rank"] == 512 and cfg["num_hidden_layers"] == 2 and cfg["first_k_dense_replace"] == 1
    assert cfg["num_nextn_predict_layers"] == 0 and cfg["tie_word_embeddings"] is False
    # the geometry the rest of the workbook reads
    from sparse_mla.models import load_model

    g = load_model(ckpt)
    assert g.head_size == 576 and g.sm_scale == 1 / 16 and g.use_sparse


def test_tokenizer_roundtrip(ckpt):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(ckpt))
    assert len(tok) == 2048
    text = "the sparse attention kernel decodes 12345 tokens"
    ids = tok(text).input_ids
    assert tok.decode(ids) == text and max(ids) < 2048


def test_tensor_names_shapes_dtypes(ckpt):
    from safetensors import safe_open

    cfg = json.loads((ckpt / "config.json").read_text())
    expected = ck.expected_weight_shapes(cfg)
    with safe_open(str(ckpt / "model.safetensors"), framework="pt") as f:
        got = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert got == expected
    assert {dtypes[k] for k in dtypes if not k.endswith("e_score_correction_bias")} == {"BF16"}
    assert dtypes["model.layers.1.mlp.gate.e_score_correction_bias"] == "F32"
    # spot checks of the layout (layer 0 dense, layer 1 MoE)
    assert got["model.layers.0.self_attn.kv_b_proj.weight"] == (64 * (192 + 256), 512)
    assert got["model.layers.0.self_attn.q_b_proj.weight"] == (64 * 256, 512)
    assert got["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"] == (576, 1024)
    assert got["model.layers.0.self_attn.indexer.wq_b.weight"] == (32 * 128, 512)
    assert "model.layers.0.mlp.gate_proj.weight" in got and "model.layers.0.mlp.gate.weight" not in got
    assert got["model.layers.1.mlp.experts.7.down_proj.weight"] == (1024, 256)
    assert "model.layers.1.mlp.shared_experts.up_proj.weight" in got
    n = sum(torch.Size(s).numel() for s in got.values())
    assert ck.checkpoint_summary(ckpt)["num_parameters"] == n


def test_weight_scales_sane(ckpt):
    _, sd = ck.load_checkpoint(ckpt)
    for name, t in sd.items():
        t = t.flatten()[:200_000].float() if t.dim() == 1 else t[:256].float()  # a sample is enough
        assert torch.isfinite(t).all(), name
        if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
            assert (t - 1).abs().max() < 0.5, name
        elif t.dim() == 2 and name != "model.embed_tokens.weight":
            std = t.std().item()
            assert 0.5 < std * t.shape[1] ** 0.5 < 2.0, (name, std)


def _vllm_layer_params(cfg: dict, i: int, prefix: str) -> dict[str, tuple[int, ...]]:
    """Parameter names/shapes of vLLM 0.26.0's ``DeepseekV2DecoderLayer`` ``i`` under ``prefix``, derived by hand
    from the module tree in deepseek_v2.py (``DeepseekV2MLAAttention``: ``fused_qkv_a_proj``; ``Indexer``:
    ``wk_weights_proj``; ``DeepseekV2MLP``: ``gate_up_proj``; FusedMoE: ``experts.routed_experts.w13_weight``/
    ``w2_weight``). Building the real model needs a GPU platform (MLA is rejected on CPU)."""
    D, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    qr, kvr, nope, rope, v = (cfg[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                               "qk_rope_head_dim", "v_head_dim"))
    ih, idim = cfg["index_n_heads"], cfg["index_head_dim"]
    L, a = prefix, prefix + "self_attn."
    p = {L + "input_layernorm.weight": (D,), L + "post_attention_layernorm.weight": (D,),
         a + "fused_qkv_a_proj.weight": (qr + kvr + rope, D), a + "q_a_layernorm.weight": (qr,),
         a + "q_b_proj.weight": (nh * (nope + rope), qr), a + "kv_a_layernorm.weight": (kvr,),
         a + "kv_b_proj.weight": (nh * (nope + v), kvr), a + "o_proj.weight": (D, nh * v),
         a + "indexer.wq_b.weight": (ih * idim, qr), a + "indexer.wk_weights_proj.weight": (idim + ih, D),
         a + "indexer.k_norm.weight": (idim,), a + "indexer.k_norm.bias": (idim,)}
    m = L + "mlp."
    if ck.is_moe_layer(cfg, i):
        E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        p.update({m + "gate.weight": (E, D), m + "gate.e_score_correction_bias": (E,),
                  m + "shared_experts.gate_up_proj.weight": (2 * I, D),
                  m + "shared_experts.down_proj.weight": (D, I),
                  m + "experts.routed_experts.w13_weight": (E, 2 * I, D),
                  m + "experts.routed_experts.w2_weight": (E, D, I)})
    else:
        I = cfg["intermediate_size"]
        p.update({m + "gate_up_proj.weight": (2 * I, D), m + "down_proj.weight": (D, I)})
    return p


def _vllm_param_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """``DeepseekV2Model``'s parameters (without the ``model.`` prefix): embedding, decoder layers, final norm."""
    p = {"embed_tokens.weight": (cfg["vocab_size"], cfg["hidden_size"]), "norm.weight": (cfg["hidden_size"],)}
    for i in range(cfg["num_hidden_layers"]):
        p.update(_vllm_layer_params(cfg, i, f"layers.{i}."))
    return p


def _vllm_mtp_param_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """``DeepSeekMTP``'s parameters, derived by hand from deepseek_mtp.py: ``DeepSeekMTP.model`` (prefix ``model``,
    line 255) is a ``DeepSeekMultiTokenPredictor`` with ``embed_tokens`` (175) and ``layers[str(L)]`` (prefix
    ``model.layers.{L}``, 167), each a ``DeepSeekMultiTokenPredictorLayer``: ``enorm``/``hnorm`` (91-92),
    ``eh_proj = nn.Linear(2 * hidden, hidden, bias=False)`` (93), ``shared_head.norm``/``shared_head.head``
    (71-72, 109) and ``mtp_block``, a ``DeepseekV2DecoderLayer`` of layer index ``L`` (112)."""
    D, V = cfg["hidden_size"], cfg["vocab_size"]
    p = {"model.embed_tokens.weight": (V, D)}
    for L in range(cfg["num_hidden_layers"], cfg["num_hidden_layers"] + cfg["num_nextn_predict_layers"]):
        q = f"model.layers.{L}."
        p.update({q + "enorm.weight": (D,), q + "hnorm.weight": (D,), q + "eh_proj.weight": (D, 2 * D),
                  q + "shared_head.norm.weight": (D,), q + "shared_head.head.weight": (V, D)})
        p.update(_vllm_layer_params(cfg, L, q + "mtp_block."))
    return p


class _Recorder:
    """Weight loaders that record ``(param, weight shape, shard, expert)`` instead of copying."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, object, object]] = []

    def params(self, shapes: dict) -> dict:
        out = {}
        for n, s in shapes.items():
            prm = torch.nn.Parameter(torch.empty(s, device="meta"), requires_grad=False)
            prm.weight_loader = self.loader(n)
            out[n] = prm
        return out

    def loader(self, pname):
        def load(param, w, *args, **kw):
            if "expert_id" in kw:
                shard, expert = kw["shard_id"], kw["expert_id"]
            else:
                shard, expert = (args[0] if args else None), None
            self.calls.append((pname, tuple(w.shape), shard, expert))
            return True
        return load

    def check(self, cfg: dict, shapes: dict) -> None:
        """Every call lands in a parameter shard of the right shape; every shard is filled exactly once."""
        D = cfg["hidden_size"]
        I_moe, E = cfg["moe_intermediate_size"], cfg["n_routed_experts"]
        got: dict[str, set] = {}
        for pname, wshape, shard, expert in self.calls:
            assert (shard, expert) not in got.get(pname, set()), (pname, shard, expert)
            got.setdefault(pname, set()).add((shard, expert))
            pshape = shapes[pname]
            if pname.endswith("fused_qkv_a_proj.weight"):
                assert wshape == ((cfg["q_lora_rank"], D) if shard == 0 else (cfg["kv_lora_rank"] + 64, D))
            elif pname.endswith("wk_weights_proj.weight"):
                assert wshape == ((cfg["index_head_dim"], D) if shard == 0 else (cfg["index_n_heads"], D))
            elif pname.endswith("gate_up_proj.weight"):
                assert shard in (0, 1) and wshape == (pshape[0] // 2, D)
            elif pname.endswith("w13_weight"):
                assert shard in ("w1", "w3") and wshape == (I_moe, D)
            elif pname.endswith("w2_weight"):
                assert shard == "w2" and wshape == (D, I_moe)
            else:
                assert shard is None and wshape == pshape, pname
        assert set(got) == set(shapes)
        for pname, keys in got.items():
            if pname.endswith(("fused_qkv_a_proj.weight", "wk_weights_proj.weight", "gate_up_proj.weight")):
                assert keys == {(0, None), (1, None)}, pname
            elif pname.endswith("w13_weight"):
                assert keys == {(s, e) for s in ("w1", "w3") for e in range(E)}, pname
            elif pname.endswith("w2_weight"):
                assert keys == {("w2", e) for e in range(E)}, pname


@pytest.mark.parametrize("which", ["plain", "mtp"])
def test_names_accepted_by_vllm_load_weights(ckpt, ckpt_mtp, which):
    """Feed the checkpoint through vLLM's real ``DeepseekV2Model.load_weights`` (the name mapping code) against a
    stand-in module whose parameters carry the hand-derived vLLM names; every tensor must land in a parameter shard
    of the right shape, and every parameter shard must be filled exactly once. With an MTP layer, the main model
    skips ``model.layers.{num_hidden_layers}.*`` (deepseek_v2.py ``get_spec_layer_idx_from_weight_name``)."""
    dsv2 = pytest.importorskip("vllm.model_executor.models.deepseek_v2")
    from safetensors.torch import load_file
    from transformers import AutoConfig

    d = ckpt if which == "plain" else ckpt_mtp
    cfg = json.loads((d / "config.json").read_text())
    hf_cfg = AutoConfig.from_pretrained(str(d))
    shapes = _vllm_param_shapes(cfg)
    rec = _Recorder()
    params = rec.params(shapes)

    class StandIn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config, self.num_redundant_experts, self.use_mha = hf_cfg, 0, False

        def named_parameters(self, *a, **k):
            return iter(params.items())

    sd = load_file(str(d / "model.safetensors"))
    assert set(sd) - {"lm_head.weight"} == {k for k in sd if k.startswith("model.")}
    assert tuple(sd["lm_head.weight"].shape) == (cfg["vocab_size"], cfg["hidden_size"])  # ParallelLMHead.weight
    weights = [(k[len("model."):], t) for k, t in sd.items() if k.startswith("model.")]  # AutoWeightsLoader strip
    mtp_prefix = f"layers.{cfg['num_hidden_layers']}."
    n_mtp = sum(k.startswith(mtp_prefix) for k, _ in weights)
    assert (n_mtp > 0) == (which == "mtp")
    loaded = dsv2.DeepseekV2Model.load_weights(StandIn(), iter(weights))
    assert loaded == set(shapes)
    assert len(rec.calls) == len(weights) - n_mtp
    rec.check(cfg, shapes)


def test_mtp_names_accepted_by_vllm_mtp_load_weights(ckpt_mtp):
    """The whole MTP checkpoint through vLLM's real ``DeepSeekMTP.load_weights`` (its name rewriting
    ``_rewrite_spec_layer_name``, the stacked and expert mappings, the missing-layer check), with the draft config
    made by vLLM's own ``SpeculativeConfig.hf_config_override`` (``glm_moe_dsa`` -> ``deepseek_mtp``): every MTP
    tensor lands once in a parameter shard of the hand-derived :func:`_vllm_mtp_param_shapes`, every shard is
    filled, and no main-model tensor is consumed."""
    mtp_mod = pytest.importorskip("vllm.model_executor.models.deepseek_mtp")
    from types import SimpleNamespace

    from safetensors.torch import load_file
    from transformers import AutoConfig
    from vllm.config.speculative import SpeculativeConfig

    cfg = json.loads((ckpt_mtp / "config.json").read_text())
    assert cfg["num_nextn_predict_layers"] == 1
    hf_cfg = SpeculativeConfig.hf_config_override(AutoConfig.from_pretrained(str(ckpt_mtp)))
    assert hf_cfg.model_type == "deepseek_mtp" and hf_cfg.architectures == ["DeepSeekMTPModel"]
    assert hf_cfg.n_predict == 1
    shapes = _vllm_mtp_param_shapes(cfg)
    rec = _Recorder()
    params = rec.params(shapes)
    L = cfg["num_hidden_layers"]

    class StandIn(torch.nn.Module):
        _rewrite_spec_layer_name = mtp_mod.DeepSeekMTP._rewrite_spec_layer_name

        def __init__(self):
            super().__init__()
            self.config = hf_cfg
            self.model = SimpleNamespace(mtp_start_layer_idx=L, num_mtp_layers=1)

        def named_parameters(self, *a, **k):
            return iter(params.items())

    sd = load_file(str(ckpt_mtp / "model.safetensors"))
    mtp_names = [k for k in sd if k.startswith(f"model.layers.{L}.")]
    assert set(mtp_names) == set(ck.mtp_weight_shapes(cfg))
    loaded = mtp_mod.DeepSeekMTP.load_weights(StandIn(), iter(sd.items()))
    assert loaded == set(shapes)
    assert len(rec.calls) == len(mtp_names)
    rec.check(cfg, shapes)
    # without the MTP tensors vLLM's loader refuses (the check `launch --speculative-config` makes early)
    rec2 = _Recorder()
    params.update(rec2.params(shapes))
    with pytest.raises(ValueError, match=f"MTP speculative decoding layer {L} weights missing"):
        mtp_mod.DeepSeekMTP.load_weights(StandIn(), iter((k, t) for k, t in sd.items() if k not in mtp_names))


def test_mtp_checkpoint_round_trip_and_main_model_unchanged(ckpt, ckpt_mtp):
    """load_checkpoint reads every MTP tensor back with the expected shape; the main model's tensors are
    byte-identical to the checkpoint without --mtp (same seed), and the MTP layer's embedding and head are copies of
    the main model's (vLLM shares them anyway)."""
    cfg, sd = ck.load_checkpoint(ckpt_mtp)
    cfg0, sd0 = ck.load_checkpoint(ckpt)
    assert {k: tuple(t.shape) for k, t in sd.items()} == ck.expected_weight_shapes(cfg)
    assert set(sd) == set(sd0) | set(ck.mtp_weight_shapes(cfg)) and not set(sd0) & set(ck.mtp_weight_shapes(cfg))
    assert all(torch.equal(sd[k], sd0[k]) and sd[k].dtype == sd0[k].dtype for k in sd0)
    L = cfg["num_hidden_layers"]
    assert torch.equal(sd[f"model.layers.{L}.embed_tokens.weight"], sd["model.embed_tokens.weight"])
    assert torch.equal(sd[f"model.layers.{L}.shared_head.head.weight"], sd["lm_head.weight"])
    assert not torch.equal(sd[f"model.layers.{L}.self_attn.q_a_proj.weight"][:, :64],
                           sd[f"model.layers.{L - 1}.self_attn.q_a_proj.weight"][:, :64])   # own seeds
    assert ck.is_moe_layer(cfg, L) and f"model.layers.{L}.mlp.experts.7.down_proj.weight" in sd
    assert {k: cfg[k] for k in cfg if k != "num_nextn_predict_layers"} == \
        {k: cfg0[k] for k in cfg0 if k != "num_nextn_predict_layers"}
    assert (cfg["num_nextn_predict_layers"], cfg0["num_nextn_predict_layers"]) == (1, 0)


def test_reference_forward_ignores_the_mtp_layer(ckpt_mtp):
    """Glm5Reference, like vLLM's target model, runs layers 0..num_hidden_layers-1 only: poisoning every MTP tensor
    with NaN changes nothing, and the logits equal those of the same weights without the MTP layer."""
    from sparse_mla.launch.glm5_reference import Glm5Reference

    cfg, sd = ck.load_checkpoint(ckpt_mtp)
    mtp = ck.mtp_weight_shapes(cfg)
    ids = torch.randint(2, cfg["vocab_size"], (24,), generator=torch.Generator().manual_seed(3))
    poisoned = {k: (torch.full_like(t, float("nan")) if k in mtp else t) for k, t in sd.items()}
    a = Glm5Reference(cfg, poisoned).forward(ids)
    plain = {k: t for k, t in sd.items() if k not in mtp}
    b = Glm5Reference({**cfg, "num_nextn_predict_layers": 0}, plain).forward(ids)
    assert torch.isfinite(a).all() and torch.equal(a, b)


def test_deterministic_cli_and_overwrite(ckpt, tmp_path, only_checkpoint_cli, capsys):
    import shutil

    out = tmp_path / "again"
    shutil.copytree(ckpt, out)                      # an earlier checkpoint (its config.json carries the mark) ...
    (out / "model.safetensors").write_text("old")   # ... damaged since: --overwrite may replace it
    assert cli.main(["make-checkpoint", str(out)]) == 2  # non-empty, no --overwrite
    assert (out / "model.safetensors").read_text() == "old" and "not empty" in capsys.readouterr().err
    assert cli.main(["make-checkpoint", str(out), "--seed", "0", "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert "parameters:" in printed and "model.safetensors" in printed
    for name in ("model.safetensors", "config.json", "tokenizer.json", "generation_config.json"):
        assert (out / name).read_bytes() == (ckpt / name).read_bytes(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_seed_changes_weights():
    a = ck._init_tensor("model.layers.0.self_attn.q_a_proj.weight", (8, 16), seed=0)
    b = ck._init_tensor("model.layers.0.self_attn.q_a_proj.weight", (8, 16), seed=1)
    c = ck._init_tensor("model.layers.0.self_attn.q_a_proj.weight", (8, 16), seed=0)
    assert not torch.equal(a, b) and torch.equal(a, c)


def test_refuses_overwrite_without_flag(tmp_path):
    out = tmp_path / "x"
    out.mkdir()
    (out / "keep").write_text("1")
    with pytest.raises(UserInputError, match=re.escape(str(out))):
        ck.make_checkpoint(out)
    assert (out / "keep").read_text() == "1"
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(UserInputError, match="not a directory"):
        ck.make_checkpoint(f)


def test_overwrite_replaces_only_a_checkpoint_elsewhere_than_here(tmp_path, monkeypatch):
    """--overwrite never replaces a folder that is not a checkpoint, nor the current directory or one above it; an
    empty or blank path is refused (it would mean the current directory)."""
    monkeypatch.setattr(ck, "make_state_dict", lambda cfg, seed=0: pytest.fail("work started"))
    work = tmp_path / "thesis"
    work.mkdir()
    (work / "thesis.txt").write_text("years of work")
    with pytest.raises(UserInputError, match="holds thesis.txt: --overwrite replaces only an earlier"):
        ck.make_checkpoint(work, overwrite=True)
    (work / "config.json").write_text("{}")   # a config.json alone does not make a folder ours to replace
    with pytest.raises(UserInputError, match="holds thesis.txt"):
        ck.make_checkpoint(work, overwrite=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    with pytest.raises(UserInputError, match="is or holds the current working directory"):
        ck.make_checkpoint(".")   # empty, no --overwrite needed, but it is where the user stands
    sub = work / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    for bad, match in (("..", "holds the current working directory"), (str(work), "holds the current working"),
                       ("", "is empty"), ("   ", "is empty")):
        with pytest.raises(UserInputError, match=match):
            ck.make_checkpoint(bad, overwrite=True)
    assert (work / "thesis.txt").read_text() == "years of work" and sub.is_dir()


def test_overwrite_names_what_an_entry_named_like_a_checkpoint_file_is(tmp_path, monkeypatch):
    """A folder, or a link to /dev/full, named like make-checkpoint's outputs was refused naming only the name (issue
    47, round 9, t01/t02/t05): it says what the entry is."""
    monkeypatch.setattr(ck, "make_state_dict", lambda cfg, seed=0: pytest.fail("work started"))
    out = tmp_path / "mk"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "tokenizer.json").mkdir()
    (out / "model-Q8_0.gguf").symlink_to("/dev/full")
    with pytest.raises(UserInputError, match=re.escape(
            "holds model-Q8_0.gguf (a link to '/dev/full', not a regular file), tokenizer.json (a folder): "
            "--overwrite replaces only an earlier make-checkpoint output (the files ")):
        ck.make_checkpoint(out, overwrite=True)


def test_overwrite_refuses_a_checkpoint_of_the_same_layout_not_made_here(tmp_path, only_checkpoint_cli, capsys):
    """A folder with the same file names (e.g. someone's small Llama checkpoint) is not replaced: its weights do not
    carry make_checkpoint's mark; nothing in it changes."""
    import torch
    from safetensors.torch import save_file

    theirs = tmp_path / "llama"
    theirs.mkdir()
    save_file({"w": torch.randn(4, 4)}, str(theirs / "model.safetensors"), metadata={"format": "pt"})
    (theirs / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (theirs / "tokenizer.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in theirs.iterdir()}
    assert cli.main(["make-checkpoint", str(theirs), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "was not written by make-checkpoint" in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in theirs.iterdir()} == before
    (theirs / "model.safetensors").unlink()   # only a foreign config.json and tokenizer: not ours either
    assert cli.main(["make-checkpoint", str(theirs), "--overwrite"]) == 2
    assert (theirs / "config.json").exists()
    # a checkpoint of this workbook from before the mark (metadata {"format": "pt"}, our architecture) is ours
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    save_file({"w": torch.randn(4, 4)}, str(legacy / "model.safetensors"), metadata={"format": "pt"})
    (legacy / "config.json").write_text(json.dumps(ck.preset_config("glm-5-tiny", index_topk=256)))
    assert not json.loads((legacy / "config.json").read_text()).get("sparse_mla_make_checkpoint")
    assert cli.main(["make-checkpoint", str(legacy), "--overwrite", "--index-topk", "256"]) == 0
    assert json.loads((legacy / "config.json").read_text())["sparse_mla_make_checkpoint"] is True


@pytest.mark.parametrize("kwargs, match", [({"index_topk": 2**40}, "up to 1048576"),
                                           ({"num_layers": 100000}, "at most 128"),
                                           ({"num_heads": 129}, "from 1 to 128"), ({"num_heads": 0}, "from 1 to 128"),
                                           ({"num_heads": True}, "from 1 to 128")])
def test_upper_bounds(kwargs, match):
    with pytest.raises(UserInputError, match=match):
        ck.preset_config(**kwargs)


def test_failure_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(ck, "make_state_dict", lambda cfg, seed=0: {"x": torch.zeros(2)})

    def boom(vocab):
        raise RuntimeError("tokenizer failed")

    monkeypatch.setattr(ck, "_train_tokenizer", boom)
    with pytest.raises(RuntimeError, match="tokenizer failed"):
        ck.make_checkpoint(tmp_path / "never")
    assert list(tmp_path.iterdir()) == []


def test_dangling_symlink_output_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """``OUT`` a link to a folder that does not exist: the final rename could not put the checkpoint there (it used
    to fail with a NotADirectoryError traceback after the weights were made)."""
    link = tmp_path / "ckpt"
    link.symlink_to(tmp_path / "gone" / "ckpt")
    monkeypatch.setattr(ck, "make_state_dict", lambda *a, **k: pytest.fail("weights made for a refused output"))
    assert cli.main(["make-checkpoint", str(link)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a symbolic link to" in err[0] and "does not exist" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"] and link.is_symlink()


def test_heads_makes_the_per_rank_geometry_vllm_loads(tmp_path, only_checkpoint_cli, capsys):
    """``--heads 8``: GLM-5's heads per rank at TP 8 as its own checkpoint (the serving benchmark's 8-head model);
    every attention weight has 8 heads' rows and vLLM's own weight-name mapping fills every parameter shard."""
    out = tmp_path / "ck8"
    assert cli.main(["make-checkpoint", str(out), "--index-topk", "256", "--heads", "8"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_attention_heads"] == cfg["num_key_value_heads"] == 8
    shapes = ck.expected_weight_shapes(cfg)
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    assert shapes["model.layers.0.self_attn.q_b_proj.weight"][0] == 8 * qk
    assert shapes["model.layers.0.self_attn.o_proj.weight"][1] == 8 * cfg["v_head_dim"]
    from safetensors.torch import load_file

    sd = load_file(str(out / "model.safetensors"))
    assert {k: tuple(v.shape) for k, v in sd.items()} == shapes


@pytest.mark.parametrize("argv, needle", [
    (["--heads", "200"], "heads (num_attention_heads) 200"),
    (["--preset", "glm-6"], "glm-5-tiny"),
    (["--index-topk", "300"], "300"),
    (["--index-topk", "0"], "index_topk 0"),
    (["--layers", "1"], "num_layers 1"),
])
def test_cli_bad_input_returns_2(tmp_path, only_checkpoint_cli, capsys, argv, needle):
    assert cli.main(["make-checkpoint", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_preset_config_errors():
    with pytest.raises(UserInputError, match="accepted: glm-5-tiny"):
        ck.preset_config("nope")
    with pytest.raises(UserInputError, match="index_topk 100"):
        ck.preset_config(index_topk=100)
    assert ck.preset_config(index_topk=256, num_layers=3)["num_hidden_layers"] == 3
    with pytest.raises(UserInputError, match="mtp 'yes' is not accepted"):
        ck.preset_config(mtp="yes")
    cfg = ck.preset_config(index_topk=256, num_layers=3, mtp=True)
    assert cfg["num_nextn_predict_layers"] == 1
    assert {n for n in ck.mtp_weight_shapes(cfg) if n.endswith("mlp.gate.weight")} == {"model.layers.3.mlp.gate.weight"}
    assert ck.mtp_weight_shapes(ck.preset_config()) == {}


def test_load_checkpoint_sharded_and_errors(ckpt, tmp_path):
    from safetensors.torch import save_file

    cfg, sd = ck.load_checkpoint(ckpt)
    assert cfg["model_type"] == "glm_moe_dsa" and "lm_head.weight" in sd
    # a sharded directory without a tokenizer (like a real GLM-5 download)
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "glm_moe_dsa"}))
    save_file({"a": torch.ones(2)}, str(d / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.zeros(3)}, str(d / "model-00002-of-00002.safetensors"))
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    cfg2, sd2 = ck.load_checkpoint(d)
    assert set(sd2) == {"a", "b"}
    with pytest.raises(UserInputError, match="no config.json"):
        ck.load_checkpoint(tmp_path)
    with pytest.raises(UserInputError, match="not a directory"):
        ck.load_checkpoint(tmp_path / "missing")


# ------------------------------------------------------------------ GLM-5.2 top-k sharing, DeepSeek-V3.2 preset
@pytest.fixture(scope="module")
def shared(module_tmp) -> dict[str, Path]:
    """Layer 0 full, layer 1 shared, in each of the three ways a config can say it (seed 0, as ``ckpt``)."""
    base = module_tmp("shared")
    return {style: ck.make_checkpoint(base / style, seed=0, **kw) for style, kw in (
        ("pattern", dict(index_topk_pattern="FS")), ("freq", dict(index_topk_freq=2, index_skip_topk_offset=1)),
        ("indexer_types", dict(indexer_types="FS")))}


def test_sharing_styles_config_and_tensors(ckpt, shared):
    """Each style writes its keys only; the weights are the same bytes in all three, and those of the plain
    checkpoint less the shared layer's indexer tensors."""
    from safetensors.torch import load_file

    keys = {"pattern": {"index_topk_pattern": "FS"}, "freq": {"index_topk_freq": 2, "index_skip_topk_offset": 1},
            "indexer_types": {"indexer_types": ["full", "shared"]}}
    blobs = set()
    for style, d in shared.items():
        cfg = json.loads((d / "config.json").read_text())
        assert {k: cfg[k] for k in cfg if k in ("index_topk_pattern", "index_topk_freq", "index_skip_topk_offset",
                                                "indexer_types")} == keys[style]
        blobs.add((d / "model.safetensors").read_bytes())
    assert len(blobs) == 1
    plain, mine = load_file(str(ckpt / "model.safetensors")), load_file(str(shared["pattern"] / "model.safetensors"))
    dropped = {k for k in plain if k.startswith("model.layers.1.self_attn.indexer.")}
    assert len(dropped) == 5 and set(mine) == set(plain) - dropped
    assert all(torch.equal(mine[k], plain[k]) for k in mine)


def test_shared_layer_names_accepted_by_vllm_load_weights(shared):
    """vLLM's real ``DeepseekV2Model.load_weights`` on the pattern checkpoint, against parameters without a layer-1
    indexer (what vLLM builds for ``index_topk_pattern`` "FS"): every tensor lands, every parameter is filled."""
    dsv2 = pytest.importorskip("vllm.model_executor.models.deepseek_v2")
    from safetensors.torch import load_file
    from transformers import AutoConfig

    d = shared["pattern"]
    cfg = json.loads((d / "config.json").read_text())
    shapes = {k: v for k, v in _vllm_param_shapes(cfg).items() if not k.startswith("layers.1.self_attn.indexer.")}
    rec = _Recorder()
    params = rec.params(shapes)

    class StandIn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config, self.num_redundant_experts, self.use_mha = AutoConfig.from_pretrained(str(d)), 0, False

        def named_parameters(self, *a, **k):
            return iter(params.items())

    weights = [(k[len("model."):], t) for k, t in load_file(str(d / "model.safetensors")).items()
               if k.startswith("model.")]
    assert dsv2.DeepseekV2Model.load_weights(StandIn(), iter(weights)) == set(shapes)
    rec.check(cfg, shapes)


def test_sharing_cli(tmp_path, only_checkpoint_cli, capsys):
    """``--index-topk-freq`` with vLLM's default offset 2 over 4 layers is F F S F; a pattern sets the layer count."""
    out = tmp_path / "freq"
    assert cli.main(["make-checkpoint", str(out), "--index-topk-freq", "2", "--layers", "4", "--index-topk",
                     "256"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["index_topk_freq"] == 2 and "index_skip_topk_offset" not in cfg and cfg["num_hidden_layers"] == 4
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert sorted({int(k.split(".")[2]) for k in f.keys() if ".indexer." in k}) == [0, 1, 3]
    assert ck.preset_config(indexer_types="FSS")["num_hidden_layers"] == 3


@pytest.mark.parametrize("argv, needle", [
    (["--index-topk-pattern", "SF"], "--index-topk-pattern (index_topk_pattern) 'SF' makes layer 0 shared"),
    (["--index-topk-pattern", "FX"], "letters F"),
    (["--indexer-types", "SFX"], "--indexer-types (indexer_types) 'SFX' is not accepted"),   # the flag typed
    (["--indexer-types", "SF"], "--indexer-types (indexer_types) 'SF' makes layer 0 shared"),
    (["--indexer-types", "FS", "--layers", "3"], "2 letters for 3 layers"),
    (["--index-skip-topk-offset", "1"], "without index_topk_freq"),
    (["--index-topk-freq", "0"], "--index-topk-freq 0 is not accepted; accepted: an integer from 1"),
    (["--index-topk-freq", "-2"], "--index-topk-freq -2 is not accepted; accepted: an integer from 1"),
])
def test_sharing_cli_bad_input_returns_2(tmp_path, only_checkpoint_cli, capsys, argv, needle):
    assert cli.main(["make-checkpoint", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_sharing_options_are_exclusive(tmp_path, only_checkpoint_cli, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["make-checkpoint", str(tmp_path / "o"), "--index-topk-pattern", "FS", "--indexer-types", "FS"])
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err
    with pytest.raises(UserInputError, match="both declare"):
        ck.preset_config(index_topk_pattern="FS", index_topk_freq=2)


def test_v32_preset(tmp_path):
    """DeepSeek-V3.2's geometry and rope, tiny sizes; its names through vLLM's real load_weights."""
    dsv2 = pytest.importorskip("vllm.model_executor.models.deepseek_v2")
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from sparse_mla.models import PRESET_CONFIGS as REAL, load_model

    d = ck.make_checkpoint(tmp_path / "v32", preset="deepseek-v3.2-tiny", index_topk=256)
    cfg = json.loads((d / "config.json").read_text())
    real = REAL["deepseek-v3.2"]
    same = ("architectures", "model_type", "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim",
            "qk_rope_head_dim", "v_head_dim", "index_n_heads", "index_head_dim", "rope_parameters",
            "max_position_embeddings", "n_group", "topk_group", "rms_norm_eps", "topk_method", "scoring_func")
    assert {k: cfg[k] for k in same} == {k: real[k] for k in same}
    assert cfg["hidden_size"] == 1024 and cfg["n_routed_experts"] == 16 and cfg["num_experts_per_tok"] == 4
    g = load_model(d)
    assert g.head_size == 576 and g.index_n_heads == 64 and g.architecture == "DeepseekV32ForCausalLM"
    sd = load_file(str(d / "model.safetensors"))
    assert {k: tuple(v.shape) for k, v in sd.items()} == ck.expected_weight_shapes(cfg)
    shapes = _vllm_param_shapes(cfg)
    rec = _Recorder()
    params = rec.params(shapes)

    class StandIn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config, self.num_redundant_experts, self.use_mha = AutoConfig.from_pretrained(str(d)), 0, False

        def named_parameters(self, *a, **k):
            return iter(params.items())

    weights = [(k[len("model."):], t) for k, t in sd.items() if k.startswith("model.")]
    assert dsv2.DeepseekV2Model.load_weights(StandIn(), iter(weights)) == set(shapes)
    rec.check(cfg, shapes)


def test_the_next_run_clears_what_a_killed_run_left(tmp_path):
    """SIGKILL during make-checkpoint leaves its hidden temporary folder (no time to clean up); the next
    make-checkpoint into the same folder removes it -- and leaves alone the temporaries of a process that still
    runs."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "ck"
    p = subprocess.Popen([sys.executable, "-m", "sparse_mla", "make-checkpoint", str(out), "--index-topk", "128",
                          "--gguf", "Q4_K"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not any(q.name.startswith(".ck.tmp-") for q in tmp_path.iterdir()):
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(signal.SIGKILL)
    p.wait()
    left = [q.name for q in tmp_path.iterdir()]
    assert any(n.startswith(f".ck.tmp-{p.pid}-") for n in left), left     # what SIGKILL leaves
    live = tmp_path / f".ck.tmp-{os.getpid()}-inuse"                         # a running process's own
    live.mkdir()
    ck.make_checkpoint(out, index_topk=128)
    assert sorted(q.name for q in tmp_path.iterdir()) == sorted(["ck", live.name])


def test_presets_match_whatever_their_case(tmp_path, capsys):
    """As every other name of the command line (README: bad input): ``--preset GLM-5-TINY`` is glm-5-tiny's files."""
    from sparse_mla import cli

    assert cli.main(["make-checkpoint", str(tmp_path / "a"), "--preset", "GLM-5-Tiny", "--index-topk", "256",
                     "--layers", "2"]) == 0
    b = ck.make_checkpoint(tmp_path / "b", preset="glm-5-tiny", index_topk=256, num_layers=2)
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "a" / name).read_bytes() == (b / name).read_bytes(), name
    assert cli.main(["make-checkpoint", str(tmp_path / "c"), "--preset", "GLM-6"]) == 2
    assert "unknown checkpoint preset 'GLM-6'" in capsys.readouterr().err and not (tmp_path / "c").exists()


def test_max_position_embeddings_is_the_configs_and_bounded(tmp_path):
    """--max-position-embeddings sets the context vLLM accepts (the long-prompt runs need more than the tiny preset's
    8192); out of range, or with GLM-5.3-Flash's --config-only (its own config), it is refused by name."""
    MAX_POSITIONS, preset_config, make_checkpoint = ck.MAX_POSITIONS, ck.preset_config, ck.make_checkpoint
    assert preset_config("glm-5-tiny")["max_position_embeddings"] == 8192
    assert preset_config("glm-5-tiny", max_position_embeddings=202752)["max_position_embeddings"] == 202752
    for bad in (0, MAX_POSITIONS + 1, True, 1.5):
        with pytest.raises(UserInputError, match=f"max_position_embeddings {bad!r} is not accepted"):
            preset_config("glm-5-tiny", max_position_embeddings=bad)
    if hasattr(pytest.importorskip("transformers"), "Glm5NextTextConfig"):
        with pytest.raises(UserInputError, match="--max-position-embeddings 65536 with --config-only"):
            make_checkpoint(tmp_path / "f", preset="glm-5.3-flash", max_position_embeddings=65536, config_only=True)


@pytest.mark.parametrize("fails", ["moving OUT aside", "putting the new one in place"])
def test_an_out_that_cannot_be_replaced_is_left_as_it_was_with_nothing_beside_it(tmp_path, monkeypatch, fails):
    """--overwrite of a checkpoint OUT that cannot be renamed (a mount point, an immutable folder) or whose replacement
    fails: OUT keeps its files, no hidden .OUT.tmp-* / .OUT.old-* is left beside it, and the first is one line naming
    OUT."""
    out = ck.make_checkpoint(tmp_path / "ck", index_topk=128, num_layers=2, seed=1)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = os.rename

    def rename(src, dst):
        if (fails == "moving OUT aside" and str(src) == str(out)) or \
                (fails == "putting the new one in place" and str(dst) == str(out) and ".tmp-" in str(src)):
            raise OSError(16, "Device or resource busy")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises((UserInputError, OSError)) as e:
        ck.make_checkpoint(out, index_topk=128, num_layers=2, seed=2, overwrite=True)
    if fails == "moving OUT aside":
        assert isinstance(e.value, UserInputError) and "cannot be renamed (Device or resource busy" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("code, says", [("ENOSPC", "free space on that disk (it is full)"),
                                        ("ENAMETOOLONG", "a shorter name"),
                                        ("EIO", "a writable directory with free space")])
def test_a_folder_that_cannot_be_made_next_to_out_names_the_cause(tmp_path, monkeypatch, code, says):
    """Issue 47: a full disk was told to pick "a shorter name"; the fix named follows the OS's reason (the
    parent folder's probe, errors.writable_dir, meets it first)."""
    import errno
    import tempfile

    def refuse(*a, **k):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    with pytest.raises(UserInputError, match=re.escape(f"accepted: {says}")):
        ck.make_checkpoint(tmp_path / "out", index_topk=128)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["/dev", "/proc", "link"])
def test_make_checkpoint_refuses_the_system_folders_themselves(tmp_path, where):
    """The breaker (2026-12-06): ``make-checkpoint /dev`` (or a link to it) was "exists and is not empty ... or
    --overwrite"; the folder is named as a system folder before anything else."""
    from sparse_mla.errors import UserInputError
    from sparse_mla.launch.checkpoint import make_checkpoint

    if where == "link":
        (tmp_path / "link").symlink_to("/dev")
        where = str(tmp_path / "link")
    with pytest.raises(UserInputError, match=r"leads into /(dev|proc), the folder of the system's devices"):
        make_checkpoint(where)
