"""Mixed GGUF quant types (issue 39 item 4): our numpy Q6_K quantizer against gguf-py's dequantizer on fresh random
inputs, within the bound its docstring derives; the ``Q4_K_M`` recipe's per-tensor types as written and read back."""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.launch.gguf_quant import Q6_K_BLOCK_BYTES, q6_k_error_bound, quantize_q6_k  # noqa: E402


def _fresh(scale: float, seed: int) -> np.ndarray:
    """[6, 768] float32: normal values times ``scale`` with an all-zero super-block, an all-positive and an
    all-negative one, one outlier, and one sub-block of zeros inside an otherwise normal super-block."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((6, 768)) * scale).astype(np.float32)
    x[0, :256] = 0.0
    x[1, :256] = np.abs(x[1, :256])
    x[2, 256:512] = -np.abs(x[2, 256:512])
    x[3, 5] = 40 * scale
    x[4, 16:32] = 0.0
    return x


@pytest.mark.parametrize("scale", [1e-6, 1e-4, 0.02, 3.0, 1e3])
def test_q6_k_quantizer_against_gguf_py_dequant(scale):
    seed = int(np.random.SeedSequence().entropy % 2**32)                 # fresh inputs each run, named on failure
    x = _fresh(scale, seed)
    blocks = quantize_q6_k(x)
    assert blocks.shape == (6, 3 * Q6_K_BLOCK_BYTES) and blocks.dtype == np.uint8
    assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q6_K] == (256, Q6_K_BLOCK_BYTES)
    y = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q6_K)
    assert y.shape == x.shape
    err, bound = np.abs(y - x), q6_k_error_bound(x)
    assert np.all(err <= bound), (seed, float((err / np.where(bound > 0, bound, 1)).max()))
    assert np.all(y[0, :256] == 0) and np.all(y[4, 16:32] == 0)
    # 6-bit: the bound is about a 62nd of each sub-block's largest magnitude, and the error reaches a good part of
    # it somewhere (a bound 10 times too loose, or a quantizer that rounds to fewer levels, would show)
    amax = np.abs(x).reshape(-1, 16).max(-1)
    assert np.all(bound.reshape(-1, 16).max(-1) <= amax / 62 * 1.02 + amax.max() / 7000 + 2.0**-23)
    assert (err / np.where(bound > 0, bound, 1)).max() > 0.5


def test_q6_k_byte_layout_is_the_one_gguf_py_decodes():
    """Each 6-bit q where block_q6_K puts it: one value of each (half, nibble) / (half, 2-bit group) at a time."""
    x = np.zeros((1, 256), np.float32)
    x[0, 0] = -1.0                       # sub-block 0's scale; q of the rest of sub-block 0 is 32 (value 0)
    for v in (1, 70, 130, 200, 255):     # ql nibble 0/1 of halves 0/1, qh bit groups 0..3
        x[0, v] = 0.5 if v < 16 else 1.0
    y = gguf.quants.dequantize(quantize_q6_k(x), gguf.GGMLQuantizationType.Q6_K)
    assert np.all(np.abs(y - x) <= q6_k_error_bound(x))
    assert set(np.flatnonzero(y[0])) == {0, 1, 70, 130, 200, 255}


def test_q6_k_rejects_rows_not_a_multiple_of_256():
    with pytest.raises(ValueError, match="Q6_K needs rows of a multiple of 256"):
        quantize_q6_k(np.zeros((2, 192), np.float32))


# ---- the Q4_K_M recipe ----------------------------------------------------------------------------------------------

from sparse_mla.launch.checkpoint import load_checkpoint, make_checkpoint  # noqa: E402
from sparse_mla.launch.gguf_writer import GGUF_TYPES, tensor_type, use_more_bits, write_gguf  # noqa: E402


@pytest.fixture(scope="module")
def q4km(tmp_path_factory):
    """glm-5-tiny, 2 layers + 1 MTP layer (3 GGUF blocks: llama.cpp's use_more_bits picks block 2 only)."""
    out = make_checkpoint(tmp_path_factory.mktemp("q4km") / "ck", index_topk=256, mtp=True, seed=11,
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

    from sparse_mla.launch.gguf_reader import gguf_tensor_types, load_gguf_checkpoint
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
    from sparse_mla.launch.gguf_reader import gguf_tensor_types

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
