"""``sparse_mla.diagnose.path``: vLLM's whole path for a record -- config hooks, attention selection, the cache dtype
vLLM allocates, the DSA indexer's kernels, the top-k conversion -- each case compared with what vLLM's own code decides
on the same input, called here (never a copied answer)."""
from __future__ import annotations

import json
import types

import pytest

from sparse_mla.diagnose import GPU_PRESETS, diagnose
from sparse_mla.errors import UserInputError
from sparse_mla.models import PRESET_CONFIGS


def _config(tmp_path, name, **changes):
    cfg = json.loads(json.dumps(PRESET_CONFIGS[name]))
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    p = tmp_path / f"{name}-{abs(hash(json.dumps(changes, sort_keys=True)))}.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def _vllm_engine_config(model, cap, kv, tp, backend=None):
    """vLLM's own engine-config path, called directly on the probe platform (the oracle of the table test)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms.interface import DeviceCapability

    from sparse_mla.diagnose import config as stage_config
    from sparse_mla.diagnose import probe as pr
    from sparse_mla.diagnose.request import resolve

    pr.load_vllm_extensions()
    cls = pr.probe_platform_cls()
    cls.probe_capability, cls.probe_device_count = DeviceCapability(*cap), tp
    req = resolve(model, f"{cap[0]}.{cap[1]}", kv, tp, False)
    return req, cls, EngineArgs, stage_config


def _vllm_selects(model, cap, kv, tp):
    """``get_attn_backend`` with the MLA layer's arguments read off ``create_engine_config()``; None = vLLM raises."""
    import vllm.v1.attention.selector as selector_mod
    from vllm.config import set_current_vllm_config

    from sparse_mla.diagnose import probe as pr

    req, cls, EngineArgs, stage_config = _vllm_engine_config(model, cap, kv, tp)
    with pr.quiet_logs(), pr.use_platform(pr.PROBE), pr.stock_selection(), stage_config.model_dir(req) as path, \
            stage_config._in_process_inspection():
        vc = EngineArgs(model=str(path), skip_tokenizer_init=True, load_format="dummy", kv_cache_dtype=kv,
                        tensor_parallel_size=tp).create_engine_config()
        mc = vc.model_config
        selector_mod._cached_get_attn_backend.cache_clear()
        with set_current_vllm_config(vc):
            try:
                b = selector_mod.get_attn_backend(mc.get_head_size(), mc.dtype, vc.cache_config.cache_dtype,
                                                  use_mla=mc.use_mla, use_sparse=hasattr(mc.hf_config, "index_topk"),
                                                  num_heads=mc.get_num_attention_heads(vc.parallel_config))
            except ValueError:
                return None, vc.cache_config.cache_dtype
        selector_mod._cached_get_attn_backend.cache_clear()
        return b.get_name(), vc.cache_config.cache_dtype


TABLE = [(m, g, kv, tp) for m in ("glm-5", "deepseek-v3.2") for g in ("rtx-pro-6000", "b200", "h200", "a100", "gb10")
         for kv in ("auto", "bfloat16", "fp8", "fp8_ds_mla") for tp in (1, 8)]


@pytest.mark.parametrize("model, gpu, kv, tp", TABLE)
def test_selection_equals_vllm_engine_config_path(model, gpu, kv, tp):
    rec = diagnose(model, gpu, kv, tp=tp)
    major, minor = (int(x) for x in GPU_PRESETS[gpu].split("."))
    selected, cache_dtype = _vllm_selects(model, (major, minor), kv, tp)
    assert rec["selected"] == selected
    assert rec["config"]["cache_dtype"] == cache_dtype
    assert (rec["selected"] is None) == any(b["stage"] == "attention" for b in rec["blockers"])


# ---- the same table, expected from a reading of vLLM 0.26.0's source (no probe, no vLLM call) --------------------
# vllm/model_executor/models/config.py DeepseekV32ForCausalLM.verify_and_update_config: a "bfloat16" cache becomes
#   "auto" for deepseek_v32 (GLM-5's glm_moe_dsa has no such hook).
# vllm/platforms/cuda.py _get_backend_priorities(use_mla): the sparse candidates, in order --
#   major 12: FLASHINFER_MLA_SPARSE_SM120 (TRITON_MLA before it has no sparse support);
#   major 10: quantized cache -> FLASHINFER_MLA_SPARSE, FLASHMLA_SPARSE; else FLASHINFER_MLA_SPARSE first when
#             num_heads (per rank) <= 16, FLASHMLA_SPARSE first otherwise;
#   other majors: FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE.
# The cache dtypes each accepts and the GPUs (v1/attention/backends/mla/*.py, supported_kv_cache_dtypes,
# supports_compute_capability, supports_combination):
_SOURCE_BACKENDS = {
    "FLASHINFER_MLA_SPARSE_SM120": ({12}, {"auto", "fp8", "fp8_e4m3", "fp8_ds_mla"}),  # with FlashInfer's SM120 API
    "FLASHINFER_MLA_SPARSE": ({10}, {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3"}),  # refuses fp8_ds_mla
    "FLASHMLA_SPARSE": ({9, 10}, {"auto", "bfloat16", "fp8_ds_mla", "fp8"}),
    "FLASH_ATTN_MLA_SPARSE": ({9}, {"auto", "float16", "bfloat16"}),
}
_HEADS = {"glm-5": 64, "deepseek-v3.2": 128}


def _from_vllm_source(model, major, kv, tp):
    from vllm.utils.flashinfer import has_flashinfer_sparse_mla_sm120   # this host's software, not a rule

    cache = "auto" if model == "deepseek-v3.2" and kv == "bfloat16" else kv
    if major == 12:   # the backend's __init__ refuses where FlashInfer lacks the SM120 sparse decode API
        order = ["FLASHINFER_MLA_SPARSE_SM120"] if has_flashinfer_sparse_mla_sm120() else []
    elif major == 10:
        quantized = cache.startswith("fp8")
        pair = ["FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"]
        order = pair if quantized or _HEADS[model] // tp <= 16 else pair[::-1]
    else:
        order = ["FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"]
    ok = [b for b in order if major in _SOURCE_BACKENDS[b][0] and cache in _SOURCE_BACKENDS[b][1]]
    return (ok[0] if ok else None), cache


@pytest.mark.parametrize("model, gpu, kv, tp", TABLE)
def test_selection_equals_a_reading_of_vllm_source(model, gpu, kv, tp):
    rec = diagnose(model, gpu, kv, tp=tp)
    major = int(GPU_PRESETS[gpu].split(".")[0])
    assert (rec["selected"], rec["config"]["cache_dtype"]) == _from_vllm_source(model, major, kv, tp)


def test_deepseek_v32_bf16_hook_and_fp8_ds_mla_cache():
    """The issue's done-when: SM120, DeepSeek-V3.2, --kv-cache-dtype bfloat16 -> FLASHINFER_MLA_SPARSE_SM120 on
    fp8_ds_mla (this host has FlashInfer's SM120 API, as the CPU venv does)."""
    from vllm.model_executor.layers.attention.mla_attention import _canonicalize_sparse_mla_kv_cache_dtype
    from vllm.model_executor.models.config import DeepseekV32ForCausalLM
    from vllm.utils.flashinfer import has_flashinfer_sparse_mla_sm120
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse import FlashInferMLASparseSM120Backend

    rec = diagnose("deepseek-v3.2", "12.0", "bfloat16")
    # vLLM's hook, called on the same input
    vc = types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(index_topk=2048)),
                               cache_config=types.SimpleNamespace(cache_dtype="bfloat16"))
    DeepseekV32ForCausalLM.verify_and_update_config(vc)
    assert rec["config"]["cache_dtype"] == vc.cache_config.cache_dtype == "auto"
    assert any("DeepseekV32ForCausalLM.verify_and_update_config" in n for n in rec["config"]["notes"])
    if not has_flashinfer_sparse_mla_sm120():
        pytest.skip("this host lacks FlashInfer's SM120 sparse MLA API")
    assert rec["selected"] == "FLASHINFER_MLA_SPARSE_SM120"
    assert rec["effective_kv_cache_dtype"] == _canonicalize_sparse_mla_kv_cache_dtype(
        FlashInferMLASparseSM120Backend, "auto") == "fp8_ds_mla"
    assert rec["blockers"] == [] and rec["host_dependent"]["depends"] is True and rec["engine_starts"] is None
    with_plugin = diagnose("deepseek-v3.2", "12.0", "bfloat16", with_plugin=True)
    assert with_plugin["selected"] == "FLASHINFER_MLA_SPARSE_SM120"          # vLLM has one: not ours


@pytest.mark.parametrize("gpu, kv", [("h200", "fp8"), ("b200", "fp8"), ("rtx-pro-6000", "auto"),
                                     ("rtx-pro-6000", "fp8"), ("h200", "auto")])
def test_effective_cache_dtype_is_vllms_rewrite(gpu, kv):
    from vllm.model_executor.layers.attention.mla_attention import _canonicalize_sparse_mla_kv_cache_dtype
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    rec = diagnose("glm-5", gpu, kv)
    if rec["selected"] is None:
        pytest.skip("no backend on this host")
    cls = resolve_obj_by_qualname(AttentionBackendEnum[rec["selected"]].get_path())
    want = _canonicalize_sparse_mla_kv_cache_dtype(cls, kv)
    assert rec["configured_kv_cache_dtype"] == want        # the string the engine's layers hold ("auto" stays)
    if want == "auto":
        want = str(kv_cache_dtype_str_to_dtype("auto", types.SimpleNamespace(dtype=__import__("torch").bfloat16)))
        want = want.replace("torch.", "")
    assert rec["effective_kv_cache_dtype"] == want


def test_deepseek_v32_without_index_topk_is_what_vllm_loads(tmp_path):
    """vLLM's config class for deepseek_v32 has no index_topk default: its architecture hook then refuses the config
    (DeepseekV32ForCausalLM asserts it); the same config under a DeepSeek-V3 architecture is dense MLA."""
    from vllm.transformers_utils.config import get_config

    path = _config(tmp_path, "deepseek-v3.2", index_topk=None)
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text(open(path).read())
    assert not hasattr(get_config(str(folder), trust_remote_code=False), "index_topk")    # vLLM's own loader
    rec = diagnose(path, "9.0")
    assert rec["engine_starts"] is False and rec["blockers"][0]["stage"] == "config"
    assert "assert is_v32" in rec["blockers"][0]["reason"]
    dense = diagnose(_config(tmp_path, "deepseek-v3.2", index_topk=None, architectures=["DeepseekV3ForCausalLM"]),
                     "9.0")
    assert dense["mla"] == "dense" and dense["indexer"]["stock"] is None and dense["selected"] == "FLASH_ATTN_MLA"


def test_missing_architectures_is_filled_in_by_vllm(tmp_path):
    from vllm.transformers_utils.config import get_config

    path = _config(tmp_path, "glm-5", architectures=None)
    rec = diagnose(path, "9.0")
    assert any("no architectures" in n for n in rec["config"]["notes"])
    folder = tmp_path / "ck2"
    folder.mkdir()
    (folder / "config.json").write_text(open(path).read())
    hf = get_config(str(folder), trust_remote_code=False)
    assert rec["config"]["model_type"] == hf.model_type and rec["config"]["architecture"]


def test_config_vllm_cannot_load_is_one_error(tmp_path):
    from vllm.transformers_utils.config import get_config

    path = _config(tmp_path, "glm-5", model_type=None)
    folder = tmp_path / "ck3"
    folder.mkdir()
    (folder / "config.json").write_text(open(path).read())
    with pytest.raises(Exception) as vllm_err:                     # vLLM's own loader refuses it
        get_config(str(folder), trust_remote_code=False)
    with pytest.raises(UserInputError) as ours:
        diagnose(path, "9.0")
    msg = str(ours.value)
    assert "\n" not in msg and "model_type" in msg and "accepted" in msg
    assert str(vllm_err.value).splitlines()[0][:40].split(" in ")[0] in msg


def test_index_topk_not_multiple_of_128_is_a_kernel_blocker(tmp_path):
    import torch
    from vllm.v1.attention.backends.mla.sparse_utils import triton_convert_req_index_to_global_index

    rec = diagnose(_config(tmp_path, "glm-5", index_topk=1000), "9.0")
    assert rec["selected"] == "FLASH_ATTN_MLA_SPARSE"            # selection passes ...
    i32 = torch.int32
    with pytest.raises(AssertionError) as e:                       # ... vLLM's conversion asserts at the first forward
        triton_convert_req_index_to_global_index(torch.empty(0, dtype=i32), torch.empty((0, 1), dtype=i32),
                                                 torch.empty((0, 1000), dtype=i32), NUM_TOPK_TOKENS=1000)
    assert rec["blockers"] == [{"stage": "kernel", "reason": rec["blockers"][0]["reason"]}]
    assert str(e.value) in rec["blockers"][0]["reason"] and rec["engine_starts"] is False
    assert rec["stages"]["kernel"].startswith("BLOCKED")


@pytest.mark.parametrize("cap", ["8.0", "8.6", "8.9", "9.0", "10.0", "12.0", "12.1"])
def test_indexer_stage_is_vllms_deepgemm_support(cap):
    from sparse_mla.diagnose import probe as pr
    from sparse_mla.kernels.fp8 import has_fp8_conversion

    rec = diagnose("glm-5", cap)
    cls = pr.probe_platform_cls()
    major, minor = (int(x) for x in cap.split("."))
    from vllm.platforms.interface import DeviceCapability

    cls.probe_capability = DeviceCapability(major, minor)
    with pr.use_platform(pr.PROBE):
        deepgemm = cls.support_deep_gemm()
    ok = deepgemm and has_fp8_conversion((major, minor))
    assert rec["indexer"]["stock"] == ("DEEPGEMM" if ok else None)
    assert (not ok) == any(b["stage"] == "indexer" for b in rec["blockers"])


def test_sm80_with_plugin_names_the_indexer_wall_or_ours():
    """The issue's done-when: with the plugin, SM80 gets TRITON_MLA_SPARSE for attention; the indexer is the next wall
    unless the plugin's own indexer takes it."""
    rec = diagnose("glm-5", "8.0", with_plugin=True)
    assert rec["selected"] == "TRITON_MLA_SPARSE"
    assert rec["indexer"]["stock"] is None
    if rec["indexer"]["with_plugin"] is None:
        assert rec["blockers"][0]["stage"] == "indexer" and rec["engine_starts"] is False
    else:
        assert rec["indexer"]["with_plugin"] == "TRITON_DSA_INDEXER" and rec["engine_starts"] is True


def test_forced_backend_gets_vllms_rejection():
    rec = diagnose("glm-5", "12.0", "bfloat16", backend="FLASHMLA_SPARSE")
    assert rec["forced_backend"] == "FLASHMLA_SPARSE" and rec["selected"] is None
    assert rec["blockers"][0]["stage"] == "attention"
    assert rec["verdict"].startswith("Selected backend AttentionBackendEnum.FLASHMLA_SPARSE is not valid")
    ok = diagnose("glm-5", "9.0", "auto", backend="FLASHMLA_SPARSE")    # 9.0, not h200: GLM-5 does not fit one H200
    assert ok["selected"] == "FLASHMLA_SPARSE" and ok["blockers"] == []
    ours = diagnose("glm-5", "h200", "auto", backend="TRITON_MLA_SPARSE", with_plugin=True)
    assert ours["selected"] == "TRITON_MLA_SPARSE" and ours["forced_backend"] == "CUSTOM"


def test_stock_probe_never_sees_our_plugin():
    """vLLM's EngineArgs loads installed general plugins (ours is one); a stock probe must not."""
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES

    before = dict(_ATTN_OVERRIDES)
    rec = diagnose("glm-5", "12.0", "bfloat16")
    assert rec["selected"] is None and "TRITON_MLA_SPARSE" not in rec["backends"]
    assert dict(_ATTN_OVERRIDES) == before


def test_record_has_stage_lines_and_json_fields():
    rec = json.loads(json.dumps(diagnose("glm-5", "12.0", "bfloat16")))
    for key in ("effective_kv_cache_dtype", "engine_starts", "blockers", "indexer", "stages", "headline", "config"):
        assert key in rec
    assert set(rec["indexer"]) == {"stock", "with_plugin", "reasons"}
    assert rec["engine_starts"] is False and rec["blockers"][0]["stage"] == "attention"
    assert list(rec["stages"])[:2] == ["config", "attention"] and rec["stages"]["engine"].startswith("does not start")
    assert len(rec["headline"]) < 120 and "\n" not in rec["headline"]
