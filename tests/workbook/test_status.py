"""``records table status``: what has run where, per machine we plan for, from proven records only."""
import copy
import json
import shutil
from pathlib import Path

from sparse_mla.workbook import status
from test_proof import RAN, record


def _write(tmp_path, name, rec):
    (tmp_path / name).write_text(json.dumps(rec))


def test_status_places_each_proven_run_of_ours_and_says_never_elsewhere(tmp_path):
    real = record(kv_cache_dtype="fp8_ds_mla", enforce_eager=False)
    real["tp"] = 2
    real["environment"]["command"] = real["environment"]["command"].replace(" --eager-only", "") + \
        " --kv-cache-dtype fp8_ds_mla --tp 2"     # what the record says it asked: CUDA graphs and the eager baseline
    real["runs"]["TRITON_MLA_SPARSE+eager"] = {**real["runs"]["TRITON_MLA_SPARSE"], "enforce_eager": True}
    _write(tmp_path, "real.json", real)
    h100 = copy.deepcopy(real)                    # the same capability on another GPU: the row names both GPUs
    h100["environment"]["gpu"] = "NVIDIA H100 80GB HBM3"
    _write(tmp_path, "real_h100.json", h100)
    sim = record(simulated_capability="8.0", simulated={"capability": "8.0"},     # the block its engine writes
                 ran={**RAN, "capability": "8.0", "device_capability": "9.0",
                      "triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm80"],
                                         "indexer._prefill_logits_kernel": ["sm80"]},
                      "indexer": {"triton": 5, "deepgemm": 0}})
    sim["runs"] = {"TRITON_MLA_SPARSE@8.0": {**sim["runs"]["TRITON_MLA_SPARSE"], "run": "TRITON_MLA_SPARSE@8.0"}}
    sim["environment"]["command"] = sim["environment"]["command"].replace("--backends TRITON_MLA_SPARSE",
                                                                          "--backends TRITON_MLA_SPARSE@8.0")
    _write(tmp_path, "sim.json", sim)                                     # the run named as launch names it
    failed = copy.deepcopy(real)
    failed["failures"] = ["first-token criterion: OutOfMemoryError"]      # unproven: left out
    failed["runs"]["TRITON_MLA_SPARSE"]["ran"] = {**RAN, "capability": "8.9", "device_capability": "8.9"}
    _write(tmp_path, "failed.json", failed)
    md = status.status_table(["."], tmp_path)
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ")[1:] for r in md.splitlines()[2:6]}
    assert rows["8x H200"][1].startswith("576-head DSA MLA: on H100 80GB HBM3, H200; vLLM 0.26.0; TP up to 2; KV fp8_ds_mla; "
                                         "safetensors; CUDA graphs; `real.json`, `real_h100.json`"), rows
    assert rows["8x H200"][2].rstrip(" |") == "never"
    assert rows["8x A100 80 GB"][1] == "never" and "`sim.json`" in rows["8x A100 80 GB"][2]
    for i in range(3):                            # past three records a cell counts the rest
        _write(tmp_path, f"real_{i}.json", real)
    cell = {r.split(" | ")[0].lstrip("| "): r.split(" | ")[1:] for r in
            status.status_table(["."], tmp_path).splitlines()[2:6]}["8x H200"][1]
    assert cell.endswith("`real.json`, `real_0.json`, `real_1.json` and 2 more (`sparse-mla records check results`)")
    assert rows["8x RTX 4090"][1:] == ["never", "never |"], rows          # the failed record proves nothing
    assert rows["8x RTX PRO 6000"][1:] == ["never", "never |"]


def test_a_glm5next_comparison_is_placed_by_its_model(tmp_path):
    """The committed GLM-5.3-Flash records (proven by their first-token criterion): ours at 9.0 on an H100 and at a
    simulated 8.0, each cell naming GLM-5.3-Flash, beside a launch record of the 576-head architecture."""
    results = Path(__file__).resolve().parents[2] / "results" / "h100-80gb-hbm3"
    for name in ("glm5next_parity_h100-80gb-hbm3_vllm033.json", "glm5next_parity_h100-80gb-hbm3_vllm033_sim80.json"):
        shutil.copy(results / name, tmp_path / name)
    _write(tmp_path, "launch.json", record())
    md = status.status_table(["."], tmp_path)
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ")[1:] for r in md.splitlines()[2:6]}
    dsa, glm = rows["8x H200"][1].split("<br>")      # a line per model, in the order of their names
    assert glm == "GLM-5.3-Flash: on H100 80GB HBM3; vLLM 0.33.0; TP 1; KV auto; safetensors; eager only; " \
                  "`glm5next_parity_h100-80gb-hbm3_vllm033.json`", rows
    assert dsa.startswith("576-head DSA MLA: on H200; vLLM 0.26.0; TP 1;") and "`launch.json`" in dsa, rows
    assert rows["8x A100 80 GB"][2].rstrip(" |") == "GLM-5.3-Flash: on H100 80GB HBM3; vLLM 0.33.0; TP 1; KV auto; " \
        "safetensors; eager only; `glm5next_parity_h100-80gb-hbm3_vllm033_sim80.json`", rows
    assert "GLM-5.3-Flash (head 512" in md
