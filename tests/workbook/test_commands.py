"""``sparse_mla.workbook.commands``: an engine record against its own ``sparse-mla launch`` command line (issue 47,
round 7: each edit below of a committed, proven H200 record was proven), and a GLM-5.3-Flash comparison's names."""
import copy
import json
from pathlib import Path

import pytest

from sparse_mla.workbook import proof
from sparse_mla.workbook.commands import command_problems

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "results" / "h200" / "launch_h200_simulated.json"


def _with_command(rec: dict, old: str, new: str) -> dict:
    out = copy.deepcopy(rec)
    out["environment"]["command"] = out["environment"]["command"].replace(old, new)
    assert out["environment"]["command"] != rec["environment"]["command"]
    return out


@pytest.fixture(scope="module")
def sim():
    rec = json.loads(SIM.read_text())
    assert proof.judge(str(SIM), rec).status == "proven"          # the unedited record
    return rec


@pytest.mark.parametrize("old,new,says", [
    ("FLASH_ATTN_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE,FLASHINFER_MLA_SPARSE", "the command's parity plan"),
    ("--max-tokens 16", "--max-tokens 8", "16 tokens generated, the command asked --max-tokens 8"),
    ("--prompt-lengths 48,560,900", "--prompt-lengths 48,560,901", "a prompt of 900 tokens"),
    ("--parity", "--parity --kv-cache-dtype fp8", "the command asked --kv-cache-dtype fp8"),
    ("sparse-mla launch", "sparse-mla bench kernel", "an engine record's is `sparse-mla launch ...`"),
    ("--parity", "--parity --no-such-flag", "arguments launch does not take"),
    # round 12 (c02): the same backends in another order: another baseline than the record's (the runs' order
    # is JSON's to keep or not: tests/workbook/test_proof.py, keys reordered)
    ("INDEXER@8.0,TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.9", "INDEXER@8.9,TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.0",
     "parity_baseline 'TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.0', the command's 'TRITON_MLA_SPARSE+TRITON_DSA_INDEXER"
     "@8.9'"),
    # round 12 (c08): a --reference-max-len on a record older than the option (no reference_max_len key), whose
    # reference judged longer prompts
    ("--max-tokens 16", "--max-tokens 16 --reference-max-len 100", "judges the prompts [48, 560, 900], the command's "
     "--prompt-lengths 48,560,900 and --reference-max-len 100 give [48]"),
    ("--max-tokens 16", "--max-tokens 16 --reference-max-len 5000", "no reference_max_len, the command asked "
     "--reference-max-len 5000"),
])
def test_a_record_contradicting_its_command_is_invalid(sim, old, new, says):
    edited = _with_command(sim, old, new)
    assert any(says in p for p in command_problems(edited)), command_problems(edited)
    v = proof.judge("x.json", edited)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_every_committed_engine_record_agrees_with_its_command():
    """Those with ``ran`` blocks, which ``records check`` compares (the 2026-12-01 records, made before ``ran`` and
    before today's plan names, are unproven without it)."""
    checked = 0
    for f in sorted((ROOT / "results").rglob("launch_*.json")):
        rec = json.loads(f.read_text())
        if any(isinstance(r, dict) and "ran" in r for r in (rec.get("runs") or {}).values()):
            assert command_problems(rec) == [], (f, command_problems(rec))
            checked += 1
    assert checked >= 10


def test_a_glm5next_comparison_naming_no_backend_is_invalid():
    rec = json.loads((ROOT / "results" / "h100-80gb-hbm3" / "sessions" / "2026-12-06d" / "lease2" /
                      "glm5next_parity_h100-80gb-hbm3_vllm033.json").read_text())
    edited = copy.deepcopy(rec)
    edited["runs"]["TRITON_MLA_SPARSE"]["backend_requested"] = "BANANA_ATTN"
    v = proof.judge("x.json", edited)
    assert v.status == "invalid" and "'BANANA_ATTN' is no vLLM backend" in v.reason, v.line()
    edited = copy.deepcopy(rec)
    edited["environment"]["gpu"] = "NVIDIA H200"          # the header's GPU against its capability (9.0 either way)
    assert proof.judge("x.json", edited).status == "unproven"
    edited["environment"]["gpu"] = "NVIDIA A100-SXM4-80GB"
    assert proof.judge("x.json", edited).status == "invalid"


def _with_run_command(rec: dict, key: str, old: str, new: str) -> dict:
    out = copy.deepcopy(rec)
    env = out["runs"][key]["environment"]
    assert old in env["command"]
    env["command"] = env["command"].replace(old, new)
    return out


_FM = "FLASHMLA_SPARSE"


@pytest.mark.parametrize("old,new,says", [
    ("--kv-cache-dtype auto", "--kv-cache-dtype auto --max-model-len 8192",
     f"{_FM}: its own command asks --max-model-len 8192, the parity run's command gives this engine 4096"),
    ("--kv-cache-dtype auto", "--kv-cache-dtype auto --cuda-graphs", f"{_FM}: enforce_eager True, the command asked "
                                                                     f"--cuda-graphs"),
    ("--max-tokens 16", "--max-tokens 8", f"{_FM}: its own command asks --max-tokens 8, the parity run's command "
                                          f"gives this engine 16"),
    ("--backend FLASHMLA_SPARSE", "--parity --backends FLASHMLA_SPARSE", "is no one-engine `sparse-mla launch`"),
])
def test_a_run_is_held_to_its_own_command(sim, old, new, says):
    """Issue 47 round 8 (e28): each engine of a parity run runs in a ``sparse-mla launch`` process of its own, whose
    command the run's header keeps; it is the one the parity command gives that engine (``engine_args``), and the run
    is what it asked."""
    edited = _with_run_command(sim, _FM, old, new)
    assert any(says in p for p in command_problems(edited)), command_problems(edited)


def test_a_run_of_a_notebooks_parity_run_is_held_to_its_own_command(sim):
    """A parity run started from a notebook has no command line of its own (``python: sparse_mla (called from
    ...)``); its engines' commands are still each engine's."""
    edited = _with_run_command(sim, _FM, "--backend FLASHMLA_SPARSE", "--backend FLASH_ATTN_MLA_SPARSE")
    edited["environment"]["command"] = "python: sparse_mla (called from ipykernel_launcher.py)"
    assert command_problems(edited) == [f"{_FM}: the engine ran '{_FM}', the command asked --backend "
                                        f"FLASH_ATTN_MLA_SPARSE"]


@pytest.mark.parametrize("name,old,new,says", [
    ("launch_tp2.json", "--tp 2", "--tp 1", "tp 2, the command asked --tp 1"),
    ("launch_tp2.json", "--prompt-lengths 48,556", "--prompt-lengths 48,557", "a prompt of 556 tokens"),
    ("bench_serve_h200_mtp.json", '"num_speculative_tokens": 1', '"num_speculative_tokens": 2',
     "speculative_config {'method': 'mtp', 'num_speculative_tokens': 1}, the command asks {'method': 'mtp', "
     "'num_speculative_tokens': 2}"),
    ("bench_serve_h200_mtp.json", "--quick", "--quick --tp 2", "server.tp 1, the command asks 2"),
])
def test_a_record_without_ran_is_held_to_its_command(name, old, new, says):
    """Issue 47, round 12 (c19, d35): a record older than ``ran`` blocks is unproven, but what its command asked
    against what it says it ran needs no ``ran``: a contradiction is invalid (it was 'unproven: no ran block')."""
    rec = json.loads((ROOT / "results" / "h200" / name).read_text())
    assert proof.judge(name, rec).status == "unproven"          # the unedited record
    v = proof.judge(name, _with_command(rec, old, new))
    assert v.status == "invalid" and says in v.reason, v.line()
