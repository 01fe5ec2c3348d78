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
from vllm_oracles import from_vllm_source, stock_indexer, vllms_selection

pytestmark = pytest.mark.every_line


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


def _checked_as_written(rec: dict) -> None:
    """``records check`` accepts this diagnosis as ``tools/gpu/diagnose_vs_engine.py`` writes it (its headline,
    blockers and resolved KV-cache dtype recomputed from its prediction: :func:`sparse_mla.workbook.diagnosis.
    entry_problems`), where it is no "starts only if the host ..." (``engine_starts`` None: the tool's diagnosis is
    ``local``, whose answer never hangs on the host's software)."""
    from sparse_mla.workbook import diagnosis

    if rec["engine_starts"] is not None:
        assert diagnosis.entry_problems(diagnosis.entry(json.loads(json.dumps(rec)))) == []


def _vllm_selects(model, cap, kv, tp):
    """``(selected backend, cache dtype vLLM configures)`` from :func:`vllm_oracles.vllms_selection` (vLLM's
    engine-config path and selector on vLLM's own CUDA platform class); None = vLLM raises."""
    vllm = vllms_selection(model, cap, kv, tp)
    return vllm.selected, vllm.cache_dtype


#: Every model x GPU x KV dtype x TP: the slow tier; the default tier runs :data:`FAST_CELLS`, one cell of each
#: answer family (each GPU major, each model, a refusal, vLLM's bf16 -> auto hook, TP 8's heads per rank on SM100)
FAST_CELLS = {("glm-5", "rtx-pro-6000", "bfloat16", 8), ("deepseek-v3.2", "rtx-pro-6000", "bfloat16", 1),
              ("glm-5", "b200", "auto", 8), ("deepseek-v3.2", "b200", "fp8", 1), ("glm-5", "h200", "fp8", 1),
              ("glm-5", "a100", "auto", 1), ("deepseek-v3.2", "gb10", "fp8_ds_mla", 8), ("glm-5", "h200", "auto", 8)}
TABLE = [pytest.param(m, g, kv, tp, marks=() if (m, g, kv, tp) in FAST_CELLS else pytest.mark.slow)
         for m in ("glm-5", "deepseek-v3.2") for g in ("rtx-pro-6000", "b200", "h200", "a100", "gb10")
         for kv in ("auto", "bfloat16", "fp8", "fp8_ds_mla") for tp in (1, 8)]


@pytest.mark.parametrize("model, gpu, kv, tp", TABLE)
def test_selection_equals_vllm_engine_config_path(model, gpu, kv, tp):
    """The diagnosis (probe platform) against vLLM's engine-config path and selector on vLLM's own CUDA platform
    class with the capability set where that class reads it."""
    rec = diagnose(model, gpu, kv, tp=tp)
    major, minor = (int(x) for x in GPU_PRESETS[gpu].split("."))
    selected, cache_dtype = _vllm_selects(model, (major, minor), kv, tp)
    assert rec["selected"] == selected
    assert rec["config"]["cache_dtype"] == cache_dtype
    assert (rec["selected"] is None) == any(b["stage"] == "attention" for b in rec["blockers"])
    _checked_as_written(rec)


def test_the_oracle_catches_a_planted_fault_in_the_capability_simulation(monkeypatch):
    """The table's oracle does not share the probe: with the probe's capability planted wrong (an RTX PRO 6000
    reported as 9.0), the diagnosis selects an SM90 backend and vLLM's own platform class, asked at 12.0, does not --
    the table test above would fail."""
    from vllm.platforms.interface import DeviceCapability

    from sparse_mla.diagnose import probe as pr

    cls = pr.probe_platform_cls()
    monkeypatch.setattr(cls, "get_device_capability", classmethod(lambda c, device_id=0: DeviceCapability(9, 0)))
    wrong = diagnose("glm-5", "rtx-pro-6000", "bfloat16", tp=8)
    assert wrong["selected"] == "FLASH_ATTN_MLA_SPARSE"
    assert _vllm_selects("glm-5", (12, 0), "bfloat16", 8)[0] != wrong["selected"]


@pytest.mark.parametrize("model, gpu, kv, tp", TABLE)
def test_selection_equals_a_reading_of_vllm_source(model, gpu, kv, tp):
    """The same table against :func:`vllm_oracles.from_vllm_source`, a reading of vLLM 0.26.0's source that calls no
    vLLM code: an oracle of that line only (a reading of another line's source would be a second copy of its
    answers; there the table above, vLLM's own path, is the oracle)."""
    from sparse_mla.vllm_lines import current_line

    if current_line() != "0.26":
        pytest.skip(f"a reading of vLLM 0.26.0's source; vLLM {current_line()}.x is installed")
    rec = diagnose(model, gpu, kv, tp=tp)
    major = int(GPU_PRESETS[gpu].split(".")[0])
    assert (rec["selected"], rec["config"]["cache_dtype"]) == from_vllm_source(model, major, kv, tp)


def test_deepseek_v32_bf16_hook_and_fp8_ds_mla_cache():
    """The issue's done-when: SM120, DeepSeek-V3.2, --kv-cache-dtype bfloat16 -> FLASHINFER_MLA_SPARSE_SM120 on
    fp8_ds_mla (this host has FlashInfer's SM120 API, as the CPU venv does)."""
    from vllm.model_executor.layers.attention.mla_attention import _canonicalize_sparse_mla_kv_cache_dtype
    from vllm.model_executor.models.config import DeepseekV32ForCausalLM
    from vllm.utils.flashinfer import has_flashinfer_sparse_mla_sm120
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse import FlashInferMLASparseSM120Backend

    rec = diagnose("deepseek-v3.2", "12.0", "bfloat16")
    # vLLM's hook, called on the same input
    from vllm.config import AttentionConfig

    vc = types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(index_topk=2048)),
                               cache_config=types.SimpleNamespace(cache_dtype="bfloat16"),
                               attention_config=AttentionConfig())      # 0.34's hook also sets the indexer logits dtype
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


def test_effective_cache_dtype_resolves_auto_also_without_a_backend():
    """No backend on an A100: the layers would hold "auto" (configured), which vLLM resolves to the model dtype -- the
    dtype the memory stage sizes the cache with (a fresh-user run found "auto" left unresolved there)."""
    rec = diagnose("glm-5", "a100", "auto", tp=8)
    assert rec["selected"] is None and rec["configured_kv_cache_dtype"] == "auto"
    assert rec["effective_kv_cache_dtype"] == rec["memory"]["kv_cache_dtype"] == "bfloat16"


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
    _checked_as_written(rec)
    _checked_as_written(dense)


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
    """The stock indexer's verdict against vLLM's own answer on vLLM's own CUDA platform class (not the probe):
    :func:`vllm_oracles.stock_indexer`."""
    rec = diagnose("glm-5", cap)
    want = stock_indexer(tuple(int(x) for x in cap.split(".")))
    assert rec["indexer"]["stock"] == want
    assert (want is None) == any(b["stage"] == "indexer" for b in rec["blockers"])


def test_sm80_with_plugin_names_the_indexer_wall_or_ours(monkeypatch):
    """With the plugin, SM80 gets TRITON_MLA_SPARSE for attention and the plugin's Triton indexer (vLLM's
    ``support_deep_gemm()`` is False there): the engine starts. One expected answer per setting of the plugin's
    switch: ``SPARSE_MLA_TRITON_INDEXER=0`` keeps vLLM's DeepGEMM indexer, which is then the wall."""
    from sparse_mla.vllm_plugin.indexer import FORCE_ENV

    monkeypatch.delenv(FORCE_ENV, raising=False)
    rec = diagnose("glm-5", "8.0", with_plugin=True)
    assert rec["selected"] == "TRITON_MLA_SPARSE" and rec["indexer"]["stock"] is None
    assert rec["indexer"]["with_plugin"] == "TRITON_DSA_INDEXER" and rec["engine_starts"] is True
    assert rec["blockers"] == []
    monkeypatch.setenv(FORCE_ENV, "0")
    off = diagnose("glm-5", "8.0", with_plugin=True)
    assert off["selected"] == "TRITON_MLA_SPARSE" and off["indexer"]["with_plugin"] is None
    assert off["blockers"][0]["stage"] == "indexer" and off["engine_starts"] is False
    _checked_as_written(rec)
    _checked_as_written(off)


def test_forced_backend_gets_vllms_rejection():
    rec = diagnose("glm-5", "12.0", "bfloat16", backend="FLASHMLA_SPARSE")
    assert rec["forced_backend"] == "FLASHMLA_SPARSE" and rec["selected"] is None
    assert rec["blockers"][0]["stage"] == "attention"
    assert rec["verdict"].startswith("Selected backend AttentionBackendEnum.FLASHMLA_SPARSE is not valid")
    ok = diagnose("glm-5", "9.0", "auto", backend="FLASHMLA_SPARSE")    # 9.0, not h200: GLM-5 does not fit one H200
    assert ok["selected"] == "FLASHMLA_SPARSE" and ok["blockers"] == []
    ours = diagnose("glm-5", "h200", "auto", backend="TRITON_MLA_SPARSE", with_plugin=True)
    assert ours["selected"] == "TRITON_MLA_SPARSE" and ours["forced_backend"] == "CUSTOM"


def test_with_plugin_where_vllm_would_not_load_it_is_stock_vllms_answer_said_so(monkeypatch):
    """Issue 47, breaker round 7 (e23): ``VLLM_PLUGINS=some_other_plugin`` with ``--with-plugin`` answered "engine
    starts" on our backend; vLLM would not load the plugin, so its answer is stock vLLM's (no valid backend on SM120
    with a bf16 cache), with a first stage line naming the variable and its value."""
    from sparse_mla.diagnose import format_record

    monkeypatch.setenv("VLLM_PLUGINS", "some_other_plugin")
    rec = diagnose("glm-5", "12.0", "bfloat16", with_plugin=True)
    assert rec["selected"] is None and rec["engine_starts"] is False and "TRITON_MLA_SPARSE" not in rec["backends"]
    assert rec["blockers"][0]["stage"] == "attention" and rec["indexer"]["with_plugin"] is None
    assert rec["plugin"]["loaded"] is False and rec["plugin"]["registered"] is False
    first = next(iter(rec["stages"].items()))
    assert first[0] == "plugin" and first[1].startswith("NOT LOADED: VLLM_PLUGINS='some_other_plugin' does not name "
                                                        "triton_mla_sparse") and "stock vLLM's answer" in first[1]
    assert "VLLM_PLUGINS='some_other_plugin'" in rec["headline"] and "\n" not in rec["headline"]
    assert "Plugin: not loaded by vLLM: VLLM_PLUGINS='some_other_plugin'" in format_record(rec)
    _checked_as_written(rec)
    monkeypatch.setenv("VLLM_PLUGINS", "some_other_plugin,triton_mla_sparse")
    named = diagnose("glm-5", "12.0", "bfloat16", with_plugin=True)
    assert named["selected"] == "TRITON_MLA_SPARSE" and named["engine_starts"] is True and "plugin" not in named["stages"]


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
