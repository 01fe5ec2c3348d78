"""make-checkpoint --gguf: the GGUF that gguf-py reads back as llama.cpp's glm-dsa, with the indexer tensors, and
weights equal to the safetensors within each GGML type's error (gguf-py's numpy dequantization as the oracle)."""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.errors import UserInputError  # noqa: E402
from sparse_mla.launch.checkpoint import load_checkpoint, make_checkpoint  # noqa: E402
from sparse_mla.launch.gguf_quant import error_bound, q4_k_error_bound, quantize_q4_k  # noqa: E402
from sparse_mla.launch.gguf_writer import GGUF_TYPES, gguf_file_name  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = make_checkpoint(tmp_path_factory.mktemp("gguf") / "ck", index_topk=256, mtp=True, seed=3,
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


@pytest.mark.parametrize("scale", [1e-4, 0.02, 3.0])
def test_q4_k_quantizer_against_gguf_py_dequant(scale):
    rng = np.random.default_rng(int(scale * 1e4))
    x = (rng.standard_normal((5, 768)) * scale).astype(np.float32)
    x[0, :256] = 0.0                        # an all-zero super-block
    x[1, :256] = np.abs(x[1, :256])         # all positive: the minimum clamps to 0
    x[2, 256:512] = -np.abs(x[2, 256:512])  # all negative
    x[3, 5] = 40 * scale                    # one outlier
    blocks = quantize_q4_k(x)
    assert blocks.shape == (5, 3 * 144) and blocks.dtype == np.uint8
    y = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K)
    err, bound = np.abs(y - x), q4_k_error_bound(x)
    assert np.all(err <= bound)
    assert np.all(y[0, :256] == 0)
    # 4-bit: the error is of the order of a 16th of each super-block's span, not more and not (much) less
    span = x.reshape(-1, 256).max(-1) - np.minimum(x.reshape(-1, 256).min(-1), 0)
    assert err.reshape(-1, 256).max(-1)[span > 0].min() > 0


def test_q4_k_rejects_rows_not_a_multiple_of_256():
    with pytest.raises(ValueError, match="multiple of 256"):
        quantize_q4_k(np.zeros((2, 192), np.float32))


def test_bad_gguf_type_is_one_error_naming_it(tmp_path):
    with pytest.raises(UserInputError, match=r"--gguf 'Q3_K'.*accepted: F16, Q8_0, Q4_K"):
        make_checkpoint(tmp_path / "x", gguf=("Q3_K",))
    assert not (tmp_path / "x").exists()


def test_cli_gguf_exit_code_2_and_overwrite_keeps_gguf_outputs(tmp_path, capsys):
    from sparse_mla.cli import main

    assert main(["make-checkpoint", str(tmp_path / "c"), "--gguf", "Q9"]) == 2
    assert "--gguf 'Q9'" in capsys.readouterr().err
    out = make_checkpoint(tmp_path / "c", index_topk=256, gguf=("f16",))
    assert (out / "model-F16.gguf").is_file()
    make_checkpoint(out, index_topk=256, overwrite=True)   # an earlier output with a GGUF is ours to replace
    assert not (out / "model-F16.gguf").exists()


@pytest.mark.parametrize("argv, says", [
    (["--indexer-types", "FSSF"], "--gguf with top-k sharing (indexer_types)"),
    (["--index-topk-pattern", "FSSF"], "--gguf with top-k sharing (index_topk_pattern)"),
    (["--index-topk-freq", "2"], "--gguf with top-k sharing (index_topk_freq)"),
    (["--preset", "deepseek-v3.2-tiny"], "--gguf with --preset 'deepseek-v3.2-tiny'")])
def test_gguf_refuses_what_the_glm_dsa_layout_cannot_describe(tmp_path, capsys, argv, says):
    """A GGUF of a shared-top-k checkpoint (some layers without indexer tensors, no glm-dsa key saying why) or of
    DeepSeek-V3.2 (YaRN, NeoX indexer rope) would be read back as something else: refused before anything is written."""
    from sparse_mla.cli import main

    assert main(["make-checkpoint", str(tmp_path / "c"), "--index-topk", "256", "--gguf", "Q8_0", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "c").exists() and list(tmp_path.iterdir()) == []
