"""sparse_mla.gguf.writer: the GGUF that gguf-py reads back as llama.cpp's glm-dsa, with the indexer tensors, and
weights equal to the safetensors within each GGML type's error (gguf-py's numpy dequantization as the oracle);
the ``Q4_K_M`` recipe's per-tensor types as written and read back (issue 39 item 4)."""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.gguf.quant import error_bound  # noqa: E402
from sparse_mla.gguf.writer import GGUF_TYPES, gguf_file_name, tensor_type, use_more_bits, write_gguf  # noqa: E402
from sparse_mla.launch.checkpoint import load_checkpoint, make_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(module_tmp):
    out = make_checkpoint(module_tmp("gguf") / "ck", index_topk=256, mtp=True, seed=3,
                          gguf=("Q8_0", "Q4_K"))
    cfg, state = load_checkpoint(out)
    return out, cfg, state


def _expected(cfg, state):
    """GGUF name -> float32 array, built here from the safetensors as llama.cpp's converter lays them out: gguf-py's
    glm-dsa names, experts stacked, kv_b_proj split per head into k_b (transposed) and v_b."""
    import torch

    nmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GLM_DSA, cfg["num_hidden_layers"] + 1)
    nh, nope, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    out = {}

    def put(hf, t):
        out[nmap.get_name(hf, try_suffixes=(".weight", ".bias"))] = t.float().numpy()

    for name, t in state.items():
        if ".experts." in name and "shared" not in name:
            continue
        if name.endswith("kv_b_proj.weight"):
            kv = t.view(nh, nope + v, -1)
            put(name.replace("kv_b", "k_b"), kv[:, :nope].transpose(1, 2))
            put(name.replace("kv_b", "v_b"), kv[:, nope:])
        else:
            put(name.replace("_bias", ".bias"), t)
    for i in range(cfg["first_k_dense_replace"], cfg["num_hidden_layers"] + 1):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            stack = [state[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"] for e in range(cfg["n_routed_experts"])]
            put(f"model.layers.{i}.mlp.experts.{proj}.weight", torch.stack(stack))
    return out


@pytest.mark.parametrize("gtype", ["Q8_0", "Q4_K"])
def test_gguf_reads_back_as_glm_dsa_with_indexer_and_nextn(ckpt, gtype):
    out, cfg, _ = ckpt
    r = gguf.GGUFReader(str(out / gguf_file_name(gtype)))
    assert r.get_field("general.architecture").contents() == gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GLM_DSA]
    names = {t.name for t in r.tensors}
    L = cfg["num_hidden_layers"]
    for i in range(L + 1):   # the MTP block has its own indexer too
        for t in ("indexer.attn_q_b.weight", "indexer.attn_k.weight", "indexer.proj.weight",
                  "indexer.k_norm.weight", "indexer.k_norm.bias", "attn_k_b.weight", "attn_v_b.weight"):
            assert f"blk.{i}.{t}" in names
        assert f"blk.{i}.attn_kv_b.weight" not in names
    for t in ("eh_proj", "enorm", "hnorm", "embed_tokens", "shared_head_head", "shared_head_norm"):
        assert f"blk.{L}.nextn.{t}.weight" in names
    assert {f"blk.{L}.ffn_{p}_exps.weight" for p in ("gate", "up", "down")} <= names
    f = lambda k: r.get_field(f"glm-dsa.{k}").contents()  # noqa: E731
    assert f("block_count") == L + 1 and f("nextn_predict_layers") == 1
    assert f("attention.indexer.head_count") == cfg["index_n_heads"]
    assert f("attention.indexer.key_length") == cfg["index_head_dim"]
    assert f("attention.indexer.top_k") == cfg["index_topk"] == 256
    assert f("attention.kv_lora_rank") == cfg["kv_lora_rank"] and f("attention.head_count_kv") == 1
    assert f("attention.key_length_mla") == cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    assert f("expert_count") == cfg["n_routed_experts"] and f("expert_gating_func") == 2   # sigmoid
    assert len(r.get_field("tokenizer.ggml.tokens").contents()) == cfg["vocab_size"]
    want = gguf.LlamaFileType[GGUF_TYPES[gtype][1]]
    assert r.get_field("general.file_type").contents() == int(want)


@pytest.mark.parametrize("gtype", ["Q8_0", "Q4_K"])
def test_dequantized_weights_equal_safetensors_within_type_error(ckpt, gtype):
    out, cfg, state = ckpt
    expected = _expected(cfg, state)
    r = gguf.GGUFReader(str(out / gguf_file_name(gtype)))
    assert {t.name for t in r.tensors} == set(expected)
    seen = set()
    for t in r.tensors:
        want = expected[t.name]
        got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(want.shape)
        typ = t.tensor_type.name
        seen.add(typ)
        bound = error_bound(want, typ)
        assert np.all(np.abs(got - want) <= bound), (t.name, typ, float(np.abs(got - want).max()))
        if typ == "F32":
            continue
        # the bound is tight, not vacuous: at most a third of the tensor's largest magnitude (Q4_K: R/30 per block)
        assert float(bound.max()) < np.abs(want).max() / 3, t.name
        assert typ in ({gtype, "Q5_0"} if gtype == "Q4_K" else {gtype}), (t.name, typ)
    assert gtype in seen and "F32" in seen
    if gtype == "Q4_K":
        assert "Q5_0" in seen   # attn_k_b rows of qk_nope 192 values: llama.cpp's Q4_K -> Q5_0 fallback


# ---- the Q4_K_M recipe ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def q4km(module_tmp):
    """glm-5-tiny, 2 layers + 1 MTP layer (3 GGUF blocks: llama.cpp's use_more_bits picks block 2 only)."""
    out = make_checkpoint(module_tmp("q4km") / "ck", index_topk=256, mtp=True, seed=11,
                          gguf=("q4_k_m",))
    return (out, *load_checkpoint(out))


@pytest.mark.parametrize("n, more", [(16, {0, 1, 4, 7, 10, 13, 14, 15}), (3, {2}), (2, {1}), (8, {0, 3, 6, 7})])
def test_use_more_bits_is_llama_cpps_rule(n, more):
    """Worked by hand from ``i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2`` (C++ integer division)."""
    assert {i for i in range(n) if use_more_bits(i, n)} == more


def _recipe(name: str, shape) -> str:
    """What the module docstring says each tensor of the tiny 3-block file gets, written out per name."""
    if len(shape) == 1 or name.endswith(("_norm.weight", ".bias")) or ".ffn_gate_inp." in name:
        return "F32"
    if name == "output.weight" or name.startswith("blk.2.ffn_down"):
        return "Q6_K"
    if name.endswith("attn_k_b.weight"):
        return "Q5_0"     # rows of qk_nope 192: Q4_K -> Q5_0
    return "Q4_K"


def test_q4_k_m_file_has_the_recipes_types(q4km):
    out, cfg, _ = q4km
    r = gguf.GGUFReader(str(out / "model-Q4_K_M.gguf"))
    assert r.get_field("general.file_type").contents() == int(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    got = {t.name: t.tensor_type.name for t in r.tensors}
    want = {t.name: _recipe(t.name, tuple(int(d) for d in t.shape)) for t in r.tensors}
    assert got == want
    assert {"F32", "Q4_K", "Q6_K", "Q5_0"} == set(got.values())
    assert {n for n, t in got.items() if t == "Q6_K"} == {"output.weight", "blk.2.ffn_down_exps.weight",
                                                          "blk.2.ffn_down_shexp.weight"}
    assert got["blk.0.ffn_down.weight"] == got["blk.1.ffn_down_exps.weight"] == "Q4_K"
    assert got["blk.1.attn_v_b.weight"] == "Q4_K"     # attn_v_b is not llama.cpp's attn_v / attn_kv_b
    # Q6_K -> Q8_0 and F16 where the rows do not allow more
    assert tensor_type("output.weight", (2048, 1056), "Q4_K_M", 3) == "Q8_0"
    assert tensor_type("blk.2.ffn_down_exps.weight", (8, 1024, 320), "Q4_K_M", 3) == "Q8_0"
    assert tensor_type("blk.1.ffn_down_exps.weight", (8, 1024, 320), "Q4_K_M", 3) == "Q5_0"
    assert tensor_type("output.weight", (2048, 1001), "Q4_K_M", 3) == "F16"
    with pytest.raises(ValueError, match="n_blocks=0"):
        tensor_type("output.weight", (2048, 1024), "Q4_K_M")


def test_q4_k_m_reads_back_within_each_tensors_type_bound(q4km):
    import torch

    from sparse_mla.gguf.files import gguf_tensor_types
    from sparse_mla.launch.gguf_reader import load_gguf_checkpoint
    from sparse_mla.launch.quantization_spread import weight_error_bounds

    out, cfg, state = q4km
    path = out / "model-Q4_K_M.gguf"
    got_cfg, got = load_gguf_checkpoint(path)
    assert got_cfg == cfg and set(got) == set(state)
    bounds = weight_error_bounds(cfg, state, gguf_tensor_types(path))
    for k, w in state.items():
        err = (got[k] - w.float()).abs()
        assert got[k].shape == w.shape and got[k].dtype == torch.float32, k
        assert (err <= bounds[k]).all(), (k, float(err.max()))
    # the Q6_K tensors are 6-bit: several times closer than the Q4_K ones of the same kind, each within its bound
    q6, q4 = "model.layers.2.mlp.shared_experts.down_proj.weight", "model.layers.1.mlp.shared_experts.down_proj.weight"
    rel = {k: float((got[k] - state[k].float()).abs().max() / state[k].float().abs().max()) for k in (q6, q4)}
    assert 0 < rel[q6] < rel[q4] / 3, rel


def test_read_gguf_and_load_gguf_report_the_mixed_file(q4km):
    from sparse_mla.diagnose.gguf import load_gguf, read_gguf

    out, _, _ = q4km
    info = read_gguf(out / "model-Q4_K_M.gguf")
    assert info["file_type"] == "Q4_K_M"
    assert set(info["tensor_types"]) == {"F32", "Q4_K", "Q5_0", "Q6_K"} and info["tensor_types"]["Q6_K"] == 3
    # the memory stage sizes one type per file: a Q4_K_M file as gguf-q4_k (its default type), as before
    _, quantization = load_gguf(str(out / "model-Q4_K_M.gguf"))
    assert quantization == "gguf-q4_k"


def test_q4_k_m_split_has_the_same_tensors_and_types(q4km, tmp_path):
    from sparse_mla.gguf.files import gguf_tensor_types

    out, cfg, state = q4km
    assert GGUF_TYPES["Q4_K_M"] == ("Q4_K", "MOSTLY_Q4_K_M")
    whole = {t.name: (t.tensor_type.name, bytes(t.data.tobytes()))
             for t in gguf.GGUFReader(str(out / "model-Q4_K_M.gguf")).tensors}
    files = write_gguf(tmp_path / "model-Q4_K_M.gguf", cfg, state, out, "Q4_K_M", split_max_tensors=40)
    assert len(files) > 1
    split = {t.name: (t.tensor_type.name, bytes(t.data.tobytes()))
             for f in files for t in gguf.GGUFReader(str(f)).tensors}
    assert split == whole
    assert gguf_tensor_types(files[1]) == {k: v[0] for k, v in whole.items()}
