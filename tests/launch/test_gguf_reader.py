"""A GLM-5 GGUF read back as its checkpoint (names, shapes, values within each GGML type's error) and the reference
forward on its dequantized weights against the safetensors forward, within the Monte Carlo quantization limit."""
from __future__ import annotations

import json

import pytest
import torch

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.errors import UserInputError  # noqa: E402
from sparse_mla.launch.checkpoint import load_checkpoint, make_checkpoint  # noqa: E402
from sparse_mla.launch.glm5_reference import Glm5Reference  # noqa: E402
from sparse_mla.gguf.files import gguf_tensor_types  # noqa: E402
from sparse_mla.launch.gguf_reader import load_gguf_checkpoint  # noqa: E402
from sparse_mla.launch.quantization_spread import (LockedDecisions, locked_forward, quantization_limit,  # noqa: E402
                                                   weight_error_bounds)


@pytest.fixture(scope="module")
def ckpt(module_tmp):
    out = make_checkpoint(module_tmp("gr") / "ck", index_topk=128, seed=3, gguf=("F16", "Q8_0", "Q4_K"))
    return (out, *load_checkpoint(out))


@pytest.mark.parametrize("gtype", ["F16", "Q8_0", "Q4_K"])
def test_gguf_reads_back_as_the_checkpoint_within_each_types_error(ckpt, gtype):
    out, cfg, state = ckpt
    got_cfg, got = load_gguf_checkpoint(out / f"model-{gtype}.gguf")
    assert got_cfg == cfg and set(got) == set(state)
    bounds = weight_error_bounds(cfg, state, gguf_tensor_types(out / f"model-{gtype}.gguf"))
    assert set(bounds) == set(state)
    for k, w in state.items():
        assert got[k].shape == w.shape and got[k].dtype == torch.float32, k
        assert ((got[k] - w.float()).abs() <= bounds[k]).all(), (k, float((got[k] - w.float()).abs().max()))
    # not vacuous: the file's values differ from the weights (F16: only bf16 values below fp16's normal range)
    assert max(float((got[k] - state[k].float()).abs().max()) for k in state) > 0


@pytest.mark.slow   # ~30 s (two float64 forwards and the limit); each type's read-back stays in the default tier
def test_reference_on_gguf_matches_the_safetensors_forward_within_the_quantization_limit(ckpt):
    """Q8_0: both float64 forwards with the safetensors forward's indexer and router decisions (a weight error near a
    tie flips a decision; the flips are counted, not judged), against the limit of the quantization-noise model. A
    GGUF read with one layer's kv_b_proj joined wrongly (k_b not transposed back) goes past it."""
    out, cfg, state = ckpt
    path = out / "model-Q8_0.gguf"
    _, deq = load_gguf_checkpoint(path)
    ids = torch.randint(2, cfg["vocab_size"], (136,), generator=torch.Generator().manual_seed(5))   # > index_topk
    # seeded (the same limit everywhere); sigma is pooled over a position's 2048 logits, so 4 samples suffice
    lim = quantization_limit(cfg, state, weight_error_bounds(cfg, state, gguf_tensor_types(path)), ids, samples=4)
    base, decisions = locked_forward(cfg, state, ids)
    got, _ = locked_forward(cfg, deq, ids, decisions)
    assert lim.share(got, base) < 1
    assert float((got - base).abs().max()) > 0
    _, free = locked_forward(cfg, deq, ids)
    assert 0 <= LockedDecisions.flips(decisions, free) < sum(d.shape[0] for d in decisions)
    nh, nope = cfg["num_attention_heads"], cfg["qk_nope_head_dim"]
    k = "model.layers.1.self_attn.kv_b_proj.weight"
    kv = deq[k].view(nh, nope + cfg["v_head_dim"], -1)
    k_b = kv[:, :nope].transpose(1, 2).contiguous()                     # llama.cpp's attn_k_b [nh, rank, nope]
    wrong = torch.cat([k_b.reshape(nh, nope, -1), kv[:, nope:]], dim=1).reshape(deq[k].shape)
    bad, _ = locked_forward(cfg, {**deq, k: wrong}, ids, decisions)
    assert lim.share(bad, base) > 1


def test_from_pretrained_takes_a_gguf_file(ckpt):
    out, cfg, _ = ckpt
    ref = Glm5Reference.from_pretrained(out / "model-Q8_0.gguf")
    assert ref.config == cfg


def test_gguf_without_its_config_or_with_another_models_is_refused(ckpt, tmp_path):
    out, cfg, _ = ckpt
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "m.gguf").write_bytes((out / "model-F16.gguf").read_bytes())
    with pytest.raises(UserInputError, match=r"no config\.json beside it.*accepted: a \.gguf file in a folder"):
        load_gguf_checkpoint(lone / "m.gguf")
    (lone / "config.json").write_text(json.dumps({**cfg, "hidden_size": 2048}))
    with pytest.raises(UserInputError, match=r"has hidden_size = 1024 and the config\.json beside it 2048"):
        load_gguf_checkpoint(lone / "m.gguf")
    with pytest.raises(UserInputError, match=r"is not a file"):
        load_gguf_checkpoint(lone / "nothing.gguf")


def test_a_tensor_the_config_maps_to_no_name_is_skipped_as_the_plugin_skips_it(ckpt, monkeypatch):
    """A GGUF tensor the name map lacks is not loaded, as vllm-gguf-plugin does not load it; the rest reads back as
    before (was a KeyError). Here output.weight is taken out of the map, the same path an extra tensor (output.bias
    from another converter) takes; whether the model is whole is the adapter's load plan's question, not this
    reader's; the reference refuses the missing head when built."""
    from sparse_mla.gguf import names

    out, cfg, state = ckpt
    real = names.gguf_to_hf_names
    monkeypatch.setattr(names, "gguf_to_hf_names", lambda c: {g: h for g, h in real(c).items() if g != "output.weight"})
    _, got = load_gguf_checkpoint(out / "model-Q8_0.gguf")
    assert set(got) == set(state) - {"lm_head.weight"}
    with pytest.raises(UserInputError, match="lacks 1 required tensor"):
        Glm5Reference(cfg, got)
