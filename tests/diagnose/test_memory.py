"""``sparse_mla.diagnose.memory`` and ``meta_model``: the memory stage -- weights per tensor-parallel rank from vLLM's
own model built on the meta device, the KV cache per token from vLLM's KV-cache specs, vLLM's start-up check that one
request of ``max_model_len`` fits, and the changes that make it fit.

The references are independent of the code under test: the parameter count of GLM-5 / DeepSeek-V3.2 written out here
from their configs (the shapes ``vllm/model_executor/models/deepseek_v2.py`` builds), vLLM's own spec classes and
model runner, the llama.cpp block layouts (and the ``gguf`` package where installed), and by-hand arithmetic for the
issue's case (GLM-5 on 8 x RTX PRO 6000: bf16 does not fit, NVFP4 does).
"""
from __future__ import annotations

import json
import math

import pytest

from sparse_mla.diagnose import diagnose
from sparse_mla.diagnose import memory as mm
from sparse_mla.diagnose.request import GPUS
from sparse_mla.models import PRESET_CONFIGS

pytestmark = pytest.mark.every_line

GIB = 1024 ** 3


def _hand_count(name: str, tp: int) -> dict[str, int]:
    """Parameters of one rank, written out from the config: ``total`` numel, ``fp32`` numel (the indexer's LayerNorm,
    the router's correction bias), ``mlp`` numel (dense MLP, shared and routed experts: what the NVFP4 recipe
    quantizes). vLLM splits q_b/kv_b/o_proj, the MLPs, experts and the vocabulary by TP and keeps q_a/kv_a, the
    norms, the router and the indexer's projections whole."""
    c = PRESET_CONFIGS[name]
    h, layers, dense = c["hidden_size"], c["num_hidden_layers"], c["first_k_dense_replace"]
    heads, nope, rope, v = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_lora, kv_lora = c["q_lora_rank"], c["kv_lora_rank"]
    experts, moe_i, shared = c["n_routed_experts"], c["moe_intermediate_size"], c["n_shared_experts"]
    ix_heads, ix_dim = c["index_n_heads"], c["index_head_dim"]
    attn = (h * (q_lora + kv_lora + rope) + q_lora + kv_lora + q_lora * heads * (nope + rope) // tp
            + kv_lora * heads * (nope + v) // tp + heads * v * h // tp)
    indexer = q_lora * ix_heads * ix_dim + h * (ix_dim + ix_heads) + 2 * ix_dim
    dense_mlp = 3 * h * c["intermediate_size"] // tp
    experts_mlp = 3 * h * moe_i * (experts + shared) // tp
    per_layer = attn + indexer + 2 * h
    mlp = dense * dense_mlp + (layers - dense) * experts_mlp
    total = (2 * c["vocab_size"] * h // tp + h + layers * per_layer + mlp + (layers - dense) * (experts * h + experts))
    fp32 = layers * 2 * ix_dim + (layers - dense) * experts
    return {"total": total, "fp32": fp32, "mlp": mlp,
            "absorbed": layers * kv_lora * heads // tp * (nope + v) * 2}


def _rank_model(name: str, tp: int, capability="9.0"):
    """vLLM's model for one rank (unquantized, no attention backend), as the memory stage builds it."""
    from sparse_mla.diagnose import config as stage_config
    from sparse_mla.diagnose import meta_model
    from sparse_mla.diagnose import path as dpath
    from sparse_mla.diagnose import probe as pr
    from sparse_mla.diagnose.request import resolve

    req = resolve(name, capability, "auto", tp, False)
    pr.load_vllm_extensions()
    platform, *_ = dpath._platform(req)
    with pr.quiet_logs(), pr.use_platform(platform), pr.stock_selection(), pr.extension_flags([]):
        with stage_config.model_dir(req) as path:
            vc, _ = stage_config.engine_config(req, path, None)
        return meta_model.rank_model(vc, tp=tp, quant_config=None, backend_cls=None, key=("test", name, capability))


@pytest.mark.parametrize("name", ["glm-5", "deepseek-v3.2"])
@pytest.mark.parametrize("tp", [1, 8])
def test_parameter_count_equals_a_count_from_the_config(name, tp):
    rank = _rank_model(name, tp)
    hand = _hand_count(name, tp)
    assert sum(p.numel for p in rank.params) == hand["total"]
    assert sum(p.numel for p in rank.params if p.dtype == "float32") == hand["fp32"]
    assert rank.absorbed_bytes == hand["absorbed"]
    if name == "glm-5" and tp == 1:
        assert 7.4e11 < hand["total"] < 7.5e11           # "744B parameters"


@pytest.mark.parametrize("name", ["glm-5", "deepseek-v3.2"])
def test_sharding_tp1_vs_tp8(name):
    one, eight = _rank_model(name, 1), _rank_model(name, 8)
    a, b = {p.name: p.numel for p in one.params}, {p.name: p.numel for p in eight.params}
    assert a.keys() == b.keys()
    replicated = {n for n in a if a[n] == b[n]}
    assert all(a[n] == 8 * b[n] for n in a.keys() - replicated)
    whole = ("fused_qkv_a_proj", "layernorm", "indexer.", "mlp.gate.", "model.norm")
    assert replicated == {n for n in a if any(w in n for w in whole)}
    for split in ("q_b_proj", "kv_b_proj", "o_proj", "embed_tokens", "lm_head", "w13_weight", "shared_experts"):
        assert any(split in n for n in a.keys() - replicated), split


def _subclass_names(cls) -> set[str]:
    """``cls``'s name and those of all its subclasses (vLLM's classes as this process has imported them)."""
    return {cls.__name__}.union(*(_subclass_names(c) for c in cls.__subclasses__()))


@pytest.mark.parametrize("kv, mla_bytes", [("bfloat16", 576 * 2), ("fp8_ds_mla", 656)])
def test_kv_bytes_per_token_by_layer_class(kv, mla_bytes):
    """Per rank and token, by the class of vLLM's layer: layers x the latent row (576 bf16 values, or FlashMLA's
    fp8_ds_mla row: 512 fp8 values, 4 fp32 scales, 64 bf16 RoPE values = 656 B) in vLLM's ``MLAAttention`` layers
    (on 0.33 its subclass ``DeepseekV32Attention``) and layers x (the indexer's 128 fp8 values and one fp32 scale) in
    its ``DeepseekV32IndexerCache`` layers. The page sizes of vLLM's own specs: tests/diagnose/test_lines.py."""
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.model_executor.models.deepseek_v2 import DeepseekV32IndexerCache

    rec = diagnose("glm-5", "8.0", kv, tp=8, with_plugin=True)      # TRITON_MLA_SPARSE keeps either cache
    mem = rec["memory"]
    layers = PRESET_CONFIGS["glm-5"]["num_hidden_layers"]
    by_layer = dict(mem["kv_cache_bytes_per_token_by_layer"])
    assert by_layer.pop(DeepseekV32IndexerCache.__name__) == layers * (128 + 4)
    [(latent, latent_bytes)] = by_layer.items()
    assert latent in _subclass_names(MLAAttention) and latent_bytes == layers * mla_bytes
    assert mem["kv_cache_bytes_per_token"] == layers * (mla_bytes + 128 + 4)
    assert mem["kv_cache_dtype"] == kv


def test_offload_moves_whole_layer_parameters_in_order():
    """vLLM's UVAOffloader: parameters of the decoder layers only, in order, the one crossing the limit included."""
    sizes = [(None, 10 * GIB), (0, GIB), (0, 3 * GIB), (1, 2 * GIB), (None, 10 * GIB)]
    assert mm.offloaded_bytes(sizes, 0) == 0
    assert mm.offloaded_bytes(sizes, 1) == GIB
    assert mm.offloaded_bytes(sizes, 1.5) == 4 * GIB
    assert mm.offloaded_bytes(sizes, 100) == 6 * GIB


# ---- the case, by hand: GLM-5 on 8 x RTX PRO 6000 (TRITON_MLA_SPARSE, bf16 cache) -----------------------

def _vllm_default_utilization() -> float:
    """vLLM's default gpu_memory_utilization for an engine on CUDA: 0.26/0.33's ``CacheConfig`` field; on 0.34 the
    field is None and ``resolved_gpu_memory_utilization`` gives it, with the extensible KV cache on as vLLM resolves it
    on CUDA (``VllmConfig``: enabled unless a connector or the driver says otherwise)."""
    from vllm.config import CacheConfig

    if not hasattr(CacheConfig, "resolved_gpu_memory_utilization"):
        return CacheConfig().gpu_memory_utilization
    cfg = CacheConfig()
    cfg.enable_extensible_kv_cache = True
    return cfg.resolved_gpu_memory_utilization


def _hand_fit(weights: int, per_token: int, gpu_mib: int, max_len: int, util: float = 0.92):
    """(fits, tokens) by hand: ceil(total x util) - weights - the allowance, in blocks of 64 tokens."""
    available = math.ceil(gpu_mib * 2**20 * util) - weights - int(mm.ALLOWANCE_GIB * GIB)
    blocks = available // (64 * per_token) if available > 0 else 0
    return blocks * 64 >= max_len, blocks * 64


# bound on what the hand count leaves out: the rotary cos/sin cache (max_position x rope dim, at most fp32) and the
# per-tensor fp32 scales of NVFP4 (at most 6 per expert per layer) plus a MiB for the remaining small buffers
_SLACK = 202752 * 64 * 4 + 78 * 257 * 6 * 4 + 2**20


@pytest.fixture(scope="module")
def rtx_pro_6000():
    return {q: diagnose("glm-5", "rtx-pro-6000", "bfloat16", tp=8, with_plugin=True, quantization=q)
            for q in ("bf16", "nvfp4")}


def test_glm5_bf16_on_8_rtx_pro_6000_does_not_fit(rtx_pro_6000):
    rec = rtx_pro_6000["bf16"]
    hand = _hand_count("glm-5", 8)
    weights = 2 * (hand["total"] - hand["fp32"]) + 4 * hand["fp32"] + hand["absorbed"]
    mem = rec["memory"]
    assert abs(mem["weights_gib_per_rank"] * GIB - weights) <= _SLACK + 0.0005 * GIB
    assert weights > GPUS["rtx-pro-6000"].memory_mib * 2**20                # more than the whole GPU
    assert mem["fits"] is False and "exceed" in mem["reason"]
    assert rec["blockers"][-1]["stage"] == "memory" and rec["engine_starts"] is False
    assert rec["stages"]["memory"].startswith("BLOCKED") and "\n" not in rec["stages"]["memory"]


def test_glm5_nvfp4_on_8_rtx_pro_6000_fits(rtx_pro_6000):
    rec = rtx_pro_6000["nvfp4"]
    hand = _hand_count("glm-5", 8)
    q = hand["mlp"]                       # NVFP4: 4 bits + one fp8 scale per 16 values
    weights = q // 2 + q // 16 + 2 * (hand["total"] - q - hand["fp32"]) + 4 * hand["fp32"] + hand["absorbed"]
    mem = rec["memory"]
    assert abs(mem["weights_gib_per_rank"] * GIB - weights) <= _SLACK + 0.0005 * GIB
    per_token = 78 * (576 * 2 + 132)
    fits, tokens = _hand_fit(weights, per_token, 97887, 202752, _vllm_default_utilization())
    assert fits and mem["fits"] is True and mem["fixes"] == [] and not any(b["stage"] == "memory"
                                                                           for b in rec["blockers"])
    assert abs(mem["max_tokens"] - tokens) <= 64 * (1 + _SLACK // (64 * per_token) + 1)
    assert mem["gpu_memory_gib"] == round(97887 / 1024, 3) and mem["max_model_len"] == 202752
    assert rec["stages"]["memory"].startswith("ok:")


def test_glm5_gguf_q4_k_weights_by_hand():
    """GGUF Q4_K: 144 bytes per 256 values for every linear layer vLLM builds with a quantization config, the experts,
    the embeddings and lm_head; the norms, the router and the indexer's fused wk/weights projection (vLLM builds those
    without one) as vLLM holds them."""
    c = PRESET_CONFIGS["glm-5"]
    hand = _hand_count("glm-5", 8)
    h, layers, dense = c["hidden_size"], c["num_hidden_layers"], c["first_k_dense_replace"]
    experts = c["n_routed_experts"]
    plain = (layers * (2 * h + c["q_lora_rank"] + c["kv_lora_rank"] + h * (c["index_head_dim"] + c["index_n_heads"])
                       + 2 * c["index_head_dim"]) + (layers - dense) * (experts * h + experts) + h)
    weights = (hand["total"] - plain) * 144 // 256 + 2 * (plain - hand["fp32"]) + 4 * hand["fp32"] + hand["absorbed"]
    mem = diagnose("glm-5", "12.0", tp=8, quantization="gguf-q4_k")["memory"]
    assert abs(mem["weights_gib_per_rank"] * GIB - weights) <= _SLACK + 0.0005 * GIB
    assert any("GGUF Q4_K: 144 bytes per 256 values" in a for a in mem["assumptions"])


def test_record_fields_and_vllm_defaults(rtx_pro_6000):
    from vllm.config import CacheConfig

    mem = json.loads(json.dumps(rtx_pro_6000["nvfp4"]))["memory"]
    for key in ("gpu_memory_gib", "gpu_memory_utilization", "weights_gib_per_rank", "kv_cache_bytes_per_token",
                "max_tokens", "max_model_len", "fits", "assumptions", "fixes"):
        assert key in mem, key
    assert mem["gpu_memory_utilization"] == _vllm_default_utilization()      # vLLM's default, not ours
    if hasattr(CacheConfig, "resolved_gpu_memory_utilization"):              # 0.34: the extensible KV cache, said
        assert any("extensible KV cache" in a for a in mem["assumptions"])
    assert any("estimate" in a for a in mem["assumptions"]) and any("MTP" in a for a in mem["assumptions"])


def test_each_fix_fits_when_applied():
    """GLM-5 GGUF Q4_K on 8 x RTX PRO 6000 at utilization 0.75 misses max_model_len; every fix named, applied as
    its option, gives a record that fits (vLLM's own estimate of the longest model length is the max_model_len fix)."""
    args = dict(model="glm-5", capability="rtx-pro-6000", kv_cache_dtype="bfloat16", tp=8, with_plugin=True,
                quantization="gguf-q4_k", gpu_memory_utilization=0.75)
    mem = diagnose(**args)["memory"]
    assert mem["fits"] is False and "estimated maximum model length is" in mem["reason"]
    changes = {f["change"].split()[0]: f["change"].split()[1] for f in mem["fixes"] if f["fits"]}
    assert set(changes) == {"--kv-cache-dtype", "--max-model-len", "--tensor-parallel-size", "--cpu-offload-gb"}
    assert f"estimated maximum model length is {changes['--max-model-len']}." in mem["reason"]
    applied = {"--kv-cache-dtype": dict(kv_cache_dtype="fp8_ds_mla"),
               "--max-model-len": dict(max_model_len=int(changes["--max-model-len"])),
               "--tensor-parallel-size": dict(tp=int(changes["--tensor-parallel-size"])),
               "--cpu-offload-gb": dict(cpu_offload_gb=int(changes["--cpu-offload-gb"]))}
    for option, change in applied.items():
        assert diagnose(**{**args, **change})["memory"]["fits"] is True, option
    one_less = diagnose(**{**args, "max_model_len": int(changes["--max-model-len"]) + 1})["memory"]
    assert one_less["fits"] is False                                          # the largest that fits
    less_offload = diagnose(**{**args, "cpu_offload_gb": int(changes["--cpu-offload-gb"]) - 1})["memory"]
    assert less_offload["fits"] is False                                      # the smallest that fits


def test_an_offload_says_the_host_memory_it_pins_over_all_ranks(monkeypatch):
    """Issue 47, breaker round 7 (f22): ``--cpu-offload-gb 100000`` at TP 8 said "fits" without a word on host memory.
    The memory line names the pinned host memory of all ranks, that vLLM moves no more than every decoder layer, and
    where that is more than this machine's memory (the GPUs' host is not this one: said, not a blocker)."""
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "host_memory_bytes", lambda: 64 * GIB)
    rec = diagnose("glm-5", "h100", "bfloat16", tp=8, gpu_memory_gib=80, cpu_offload_gb=100000)
    off = rec["memory"]["offload"]
    assert off["asked_gib"] == 100000 and off["ranks"] == 8 and off["this_machine_gib"] == 64
    assert off["moved_gib"] == rec["memory"]["offloaded_gib"] < rec["memory"]["weights_gib_per_rank"] < 100000
    assert abs(off["host_gib"] - 8 * off["moved_gib"]) < 0.01
    line = rec["stages"]["memory"]
    assert f"({off['host_gib']:.1f} GiB of pinned host memory over 8 rank(s); --cpu-offload-gb 100000 asks more: " \
           f"vLLM moves every decoder layer's weights, no more; more than this machine's 64.0 GiB of memory" in line
    assert "\n" not in line and rec["engine_starts"] is True
    assert diagnose("glm-5", "h100", "bfloat16", tp=8, gpu_memory_gib=80)["memory"]["offload"] is None


def test_quantization_from_the_checkpoint_config_equals_the_option(tmp_path):
    from sparse_mla.diagnose.request import QUANTIZATIONS

    cfg = {**PRESET_CONFIGS["glm-5"], "quantization_config": QUANTIZATIONS["fp8"][1]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    from_config = diagnose(str(tmp_path), "9.0", tp=8)["memory"]
    from_option = diagnose("glm-5", "9.0", tp=8, quantization="fp8")["memory"]
    assert from_config["quantization"] == from_option["quantization"] == "fp8"
    assert from_config["weights_gib_per_rank"] == from_option["weights_gib_per_rank"]
    assert from_config["fits"] is None and "unknown" in from_config["gpu_memory_source"]   # no preset, no memory


def test_max_model_len_above_the_config_is_vllms_config_refusal():
    rec = diagnose("glm-5", "h200", max_model_len=10**6)
    assert rec["blockers"] == [{"stage": "config", "reason": rec["blockers"][0]["reason"]}]
    reason = rec["blockers"][0]["reason"]
    assert "User-specified max_model_len (1000000) is greater than the derived max_model_len" in reason
    assert rec["memory"] is None


@pytest.mark.parametrize("argv, bad", [
    (["--gpu-memory-gib", "0"], "'0'"),
    (["--gpu-memory-gib", "-1"], "'-1'"),
    (["--gpu-memory-gib", "nan"], "'nan'"),
    (["--gpu-memory-gib", "lots"], "'lots'"),
    (["--gpu-memory-utilization", "1.5"], "'1.5'"),
    (["--max-model-len", "0"], "'0'"),
    (["--max-model-len", "4k"], "'4k'"),
    (["--cpu-offload-gb", "-2"], "'-2'"),
    (["--quantization", "int3"], "'int3'"),
    (["--memory-matrix", "--capability", "h200"], "--capability would be ignored"),
    (["--matrix", "--quantization", "fp8"], "--quantization would be ignored"),
])
def test_cli_bad_memory_input(run_cli, tmp_path, argv, bad):
    rc, out, err = run_cli(*argv, *(["--out-dir", str(tmp_path / "m")] if "matrix" in argv[0] else []))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("sparse-mla diagnose: error: ")
    assert bad in err and "accepted" in err
    assert not (tmp_path / "m").exists()


def test_quantization_contradicting_the_checkpoint(tmp_path):
    from sparse_mla.diagnose.request import QUANTIZATIONS
    from sparse_mla.errors import UserInputError

    (tmp_path / "config.json").write_text(json.dumps({**PRESET_CONFIGS["glm-5"],
                                                      "quantization_config": QUANTIZATIONS["nvfp4"][1]}))
    with pytest.raises(UserInputError, match=r"--quantization 'fp8' contradicts .*\(nvfp4\)"):
        diagnose(str(tmp_path), "9.0", quantization="fp8")


def test_text_output_has_one_memory_line(run_cli):
    rc, out, _ = run_cli("--capability", "rtx-pro-6000", "--tp", "8", "--quantization", "nvfp4")
    assert rc == 0
    lines = [line for line in out.splitlines() if line.startswith("memory ")]
    assert len(lines) == 1 and "weights" in lines[0] and "B per token" in lines[0]


def test_memory_matrix_writes_csv_and_md(run_cli, tmp_path):
    import pandas as pd

    rc, out, _ = run_cli("--memory-matrix", "--model", "glm-5", "--quantization", "nvfp4", "--out-dir", str(tmp_path))
    assert rc == 0
    df = pd.read_csv(tmp_path / "diagnose_memory_matrix.csv")
    assert list(df["gpu"]) == ["rtx-pro-6000", "rtx-5090", "a100"] and set(df["gpus"]) == {8}
    rows = dict(zip(df["gpu"], df.to_dict(orient="records")))
    assert rows["rtx-pro-6000"]["fits"] == "yes" and rows["rtx-5090"]["fits"] == "no"
    assert "--tensor-parallel-size" in rows["rtx-5090"]["fix"]
    assert rows["a100"]["attention"] == "none" and rows["a100"]["kv_cache_dtype"] == "bfloat16"   # stock SM80: none
    md = (tmp_path / "diagnose_memory_matrix.md").read_text().splitlines()
    assert len(md) == 2 + 3 and all(line.count("|") == md[0].count("|") for line in md)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diagnose_memory_matrix.csv", "diagnose_memory_matrix.md"]


def test_the_meta_build_allocates_nothing_in_a_fresh_process():
    """GLM-5 at capability 5.2 (vLLM holds its weights in float32 there) in a fresh process with 6 GiB of address
    space: the memory stage sizes its 2.7 TiB of weights on the meta device. (Before the probe built torch's device-context table from the real factory functions,
    a fresh process whose first device context ran under the probe's ``torch.empty`` wrapper allocated GLM-5's experts
    on the host -- 24 GiB -- and blamed vLLM.)"""
    import subprocess
    import sys

    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
            "from sparse_mla.diagnose import diagnose\n"
            "m = diagnose('glm-5', '5.2', 'auto')['memory']\n"
            "print(m['weights_gib_per_rank'], m.get('reason'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    weights, reason = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert float(weights) > 2000 and reason == "None", out.stdout[-500:]


def test_unquantized_weights_are_named_in_the_dtype_vllm_holds_them():
    """Below SM80 vLLM holds a bf16 checkpoint in float32 (its model dtype): the weights' size is float32's, twice
    bf16's, and the line names float32, not "bf16" (issue 47)."""
    from sparse_mla.diagnose.report import memory_line

    old, new = (diagnose("glm-5", cap, "auto")["memory"] for cap in ("5.2", "9.0"))
    assert (old["model_dtype"], new["model_dtype"]) == ("float32", "bfloat16")
    assert math.isclose(old["weights_gib_per_rank"], 2 * new["weights_gib_per_rank"], rel_tol=1e-3)
    assert "(unquantized, float32)" in memory_line(old) and "(bf16)" in memory_line(new)
