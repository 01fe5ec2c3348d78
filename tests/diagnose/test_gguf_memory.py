"""``sparse_mla.diagnose.gguf_memory`` (issue 39 item 4): the memory stage sizes a mixed-type GGUF (llama.cpp's
``Q4_K_M``: Q4_K, Q6_K, Q5_0, F32, split by gguf-py's writer) tensor by tensor, at each tensor's own type.

The reference is written from the file, read by gguf-py here, and from what vLLM's DeepSeek-V2 model does with each
tensor: the memory over all of the model held at bf16 changes, per tensor that vllm-gguf-plugin keeps quantized, by
``file bytes - 2 x values``, taken whole on every rank for the ``ReplicatedLinear`` ``q_a``/``kv_a`` and ``1/tp`` of it
for everything else; F32 tensors, the halves our adapter joins into ``kv_b_proj`` and the indexer's dequantized tensors
stay at bf16; the MTP block (block ``num_hidden_layers``) is not counted.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.diagnose import diagnose  # noqa: E402
from sparse_mla.diagnose import gguf_memory  # noqa: E402
from sparse_mla.diagnose import memory as mm  # noqa: E402
from sparse_mla.diagnose.gguf import read_gguf  # noqa: E402
from sparse_mla.diagnose.request import checkpoint_quantization  # noqa: E402
from sparse_mla.launch.checkpoint import make_checkpoint  # noqa: E402

pytestmark = pytest.mark.gguf

REPLICATED = ("attn_q_a.weight", "attn_kv_a_mqa.weight")
ADAPTER_DEQUANTIZED = ("attn_k_b.weight", "attn_v_b.weight", "indexer.attn_q_b.weight", "indexer.attn_k.weight",
                       "indexer.proj.weight")


@pytest.fixture(scope="module")
def q4km(module_tmp):
    """glm-5-tiny with its MTP block as a Q4_K_M GGUF in four shards (gguf-py's split writer)."""
    out = make_checkpoint(module_tmp("q4km") / "ck", index_topk=256, mtp=True, seed=5,
                          gguf=("Q4_K_M",), gguf_split_max_tensors=16)
    return f"{out}:Q4_K_M"


def _rank(model: str, tp: int):
    """vLLM's model for one of ``tp`` ranks with the GGUF layout, as the memory stage builds it."""
    from sparse_mla.diagnose import config as stage_config
    from sparse_mla.diagnose import meta_model
    from sparse_mla.diagnose import path as dpath
    from sparse_mla.diagnose import probe as pr
    from sparse_mla.diagnose.request import resolve

    req = resolve(model, "8.0", "auto", tp, False)
    pr.load_vllm_extensions()
    platform, *_ = dpath._platform(req)
    with pr.quiet_logs(), pr.use_platform(platform), pr.stock_selection(), pr.extension_flags([]):
        with stage_config.model_dir(req) as path:
            vc, _ = stage_config.engine_config(req, path, None)
        return req, meta_model.rank_model(vc, tp=tp, quant_config=mm._gguf_layout(), backend_cls=None,
                                          key=("test_gguf_memory", model))


def _gguf_py_sizes(model: str) -> list[tuple[str, str, int, int]]:
    """``(name, type, values, bytes)`` of every tensor of the split model ``DIR:QUANT``, from gguf-py's own reader
    and its quant sizes (``GGML_QUANT_SIZES``: values per block, bytes per block) -- not from our GGUF reader, whose
    sizes the memory stage uses."""
    from pathlib import Path

    folder, quant = model.rsplit(":", 1)
    out = []
    for f in sorted(Path(folder).glob(f"model-{quant}-*-of-*.gguf")):
        for t in gguf.GGUFReader(str(f)).tensors:
            block, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
            values = int(t.n_elements)
            assert values % block == 0
            out.append((t.name, t.tensor_type.name, values, values // block * type_size))
    assert out
    return out


def test_our_reader_sizes_each_tensor_as_gguf_py_does(q4km):
    """The memory stage's tensor sizes (our reader's) against gguf-py's reader and quant-size table."""
    assert sorted(read_gguf(q4km)["tensor_sizes"]) == sorted(_gguf_py_sizes(q4km))


def _by_hand(model: str, tp: int, layers: int) -> int:
    """Bytes the GGUF's own types add to a bf16 rank (module docstring), from the files as gguf-py reads them."""
    total = 0
    for name, kind, values, nbytes in _gguf_py_sizes(model):
        block = int(name.split(".")[1]) if name.startswith("blk.") else None
        if kind in ("F32", "F16", "BF16") or name.endswith(ADAPTER_DEQUANTIZED) or (block or 0) >= layers:
            continue
        share = 1 if name.endswith(REPLICATED) else tp
        assert (nbytes - 2 * values) % share == 0
        total += (nbytes - 2 * values) // share
    return total


@pytest.mark.parametrize("tp", [1, 2])
def test_each_tensor_is_sized_at_its_own_type(q4km, tp):
    req, rank = _rank(q4km, tp)
    assert not any(p.name.startswith("model.layers.2.") for p in rank.params)    # the MTP block is not built
    quant = mm._with_gguf_tensors(req, checkpoint_quantization(req.geometry, "gguf-q4_k"))
    types = {t.type for t in quant.gguf_tensors}
    assert {"Q4_K", "Q6_K", "Q5_0", "F32"} <= types                              # the fixture is the mix it says
    bf16 = sum(n for _, n in mm.param_bytes(rank, checkpoint_quantization(req.geometry)))
    sized, missing = gguf_memory.param_bytes(rank, quant.gguf_tensors, (256, 144))
    assert missing == []
    assert sum(n for _, n in sized) - bf16 == _by_hand(q4km, tp, req.geometry.raw_config["num_hidden_layers"])
    assert mm.param_bytes(rank, quant) == sized


def test_one_type_throughout_would_be_another_answer(q4km):
    """The mix matters: the same file sized at Q4_K for every tensor (the stage's answer before) is smaller."""
    req, rank = _rank(q4km, 1)
    one = mm.param_bytes(rank, checkpoint_quantization(req.geometry, "gguf-q4_k"))
    quant = mm._with_gguf_tensors(req, checkpoint_quantization(req.geometry, "gguf-q4_k"))
    assert sum(n for _, n in mm.param_bytes(rank, quant)) > sum(n for _, n in one)


def test_a_parameter_no_tensor_loads_is_sized_at_the_file_type_and_named(q4km):
    req, rank = _rank(q4km, 1)
    quant = mm._with_gguf_tensors(req, checkpoint_quantization(req.geometry, "gguf-q4_k"))
    kept = tuple(t for t in quant.gguf_tensors if t.name != "output.weight")
    sized, missing = gguf_memory.param_bytes(rank, kept, (256, 144))
    assert missing == ["lm_head.weight"]
    head = next(i for i, p in enumerate(rank.params) if p.name == "lm_head.weight")
    assert sized[head] == (None, rank.params[head].numel * 144 // 256)
    text = mm._gguf_file_assumption(replace(quant, gguf_tensors=kept), rank)
    assert "1 parameters load no GGUF tensor and are sized at Q4_K: lm_head.weight" in text


def test_vllms_own_renames_name_the_parameters(q4km):
    """Experts, the fused q_a/kv_a and the shared experts' gate/up go where vLLM's load_weights puts them."""
    _, rank = _rank(q4km, 1)
    name = gguf_memory.parameter_name
    assert name("model.layers.1.mlp.experts.0.up_proj.weight", rank.renames) == \
        "model.layers.1.mlp.experts.routed_experts.w13_weight"
    assert name("model.layers.1.mlp.experts.0.down_proj.weight", rank.renames) == \
        "model.layers.1.mlp.experts.routed_experts.w2_weight"
    assert name("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", rank.renames) == \
        "model.layers.0.self_attn.fused_qkv_a_proj.weight"
    assert name("model.layers.1.mlp.shared_experts.gate_proj.weight", rank.renames) == \
        "model.layers.1.mlp.shared_experts.gate_up_proj.weight"
    assert name("model.layers.0.self_attn.o_proj.weight", rank.renames) == "model.layers.0.self_attn.o_proj.weight"


def test_the_record_says_each_tensor_was_sized_at_its_type(q4km):
    mem = diagnose(q4km, "8.0", "auto", tp=2, with_plugin=True)["memory"]
    line = next(a for a in mem["assumptions"] if a.startswith("GGUF file:"))
    assert "F32 " in line and "Q6_K " in line and "Q5_0 " in line and "load no GGUF tensor" not in line
    assert mem["quantization"] == "gguf-q4_k" and mem["weights_gib_per_rank"] > 0


def test_a_file_type_that_names_no_tensor_type_is_labelled_by_the_type_holding_most_bytes():
    from sparse_mla.diagnose.gguf import _main_type

    info = {"tensor_sizes": [("a", "IQ3_S", 256, 110), ("b", "IQ3_XXS", 512, 196), ("c", "F32", 4096, 16384),
                             ("d", "F16", 8192, 16384)]}
    assert _main_type(info) == "gguf-iq3_xxs"                # 196 bytes against 110; F32/F16 are not counted
    assert _main_type({"tensor_sizes": [("d", "BF16", 8, 16)]}) == "gguf-f16"
