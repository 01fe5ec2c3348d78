"""The comparison of tools/gpu/diagnose_vs_engine.py (its GPU run is a harness stage): hand-made diagnosis and
engine records, one per way a prediction can be wrong."""
import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "diagnose_vs_engine.py"
spec = importlib.util.spec_from_file_location("diagnose_vs_engine", TOOL)
dve = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dve)

# as the diagnosis writes an auto cache of a bf16 model: the layers' string "auto", resolved to bfloat16 (the engine's
# layers read "auto": on 2026-12-04 the harness compared the resolved dtype with it and called a right diagnosis wrong)
DIAG = {"selected": "FLASH_ATTN_MLA_SPARSE", "configured_kv_cache_dtype": "auto", "effective_kv_cache_dtype": "bfloat16",
        "engine_starts": True,
        "indexer": {"stock": "DeepGEMM", "with_plugin": "DeepGEMM"}}
ENGINE = {"layers": {"model.layers.0.self_attn.attn": {"backend": "FLASH_ATTN_MLA_SPARSE", "kv_cache_dtype": "auto"},
                     "model.layers.0.self_attn.indexer.k_cache": {"backend": "DEEPSEEK_V32_INDEXER",
                                                                  "kv_cache_dtype": "fp8"}},
          "ran": {"attention": {"FLASH_ATTN_MLA_SPARSE": 1}, "indexer": {"triton": 0, "deepgemm": 6}}}


def test_a_right_prediction_has_no_differences():
    assert dve.differences(dve.predicted(DIAG), dve.observed(ENGINE)) == []


def test_each_wrong_fact_is_named():
    engine = {"layers": {"a": {"backend": "FLASHMLA_SPARSE", "kv_cache_dtype": "fp8_ds_mla"}},
              "ran": {"attention": {"FLASHMLA_SPARSE": 1}, "indexer": {"triton": 3, "deepgemm": 0}}}
    got = dve.differences(dve.predicted(DIAG), dve.observed(engine))
    assert [line.split(":")[0] for line in got] == ["attention", "kv_cache_dtype", "indexer"]
    dead = dve.differences(dve.predicted(DIAG), dve.observed({"error": "exit 1"}))
    assert any(line.startswith("engine_starts: diagnosed True") for line in dead)
