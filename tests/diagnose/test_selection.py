"""``sparse_mla.diagnose.selection``: the attention stage -- vLLM 0.26.0's own selector, probed for GPUs this CPU
machine does not have, every MLA backend's reasons as vLLM gives them.

The probe runs in-process; the first call imports vLLM and its MLA backends (~15 s), later calls take well under a
second. Module-scoped fixtures probe each capability once.
"""
from __future__ import annotations

import json
import typing

import pytest

from sparse_mla.diagnose import GPU_PRESETS, KV_CACHE_DTYPES, VLLM_CACHE_DTYPES, diagnose, parse_capability
from sparse_mla.errors import UserInputError
from sparse_mla.models import PRESET_CONFIGS

pytestmark = pytest.mark.every_line

# Reasons that describe this machine rather than the configuration: a stub or shim is missing if one shows up.
MACHINE_REASONS = ("is not available", "ImportError", "NVIDIA driver", "libcuda", "FA3 is unavailable")


@pytest.fixture(scope="module")
def sm120_bf16():
    return diagnose("glm-5", "12.0", "bfloat16")


@pytest.fixture(scope="module")
def sm90_auto():
    return diagnose("glm-5", "9.0", "auto")


@pytest.fixture(scope="module")
def sm89_auto():
    return diagnose("glm-5", "8.9", "auto")


def _no_machine_reasons(rec):
    for name, b in rec["backends"].items():
        for r in b["reasons"]:
            assert not any(m in r for m in MACHINE_REASONS), f"{name}: reason about this machine: {r!r}"


# ---- the three done-when verdicts ----------------------------------------------------------------------------

def test_sm120_bf16_has_no_backend(sm120_bf16):
    rec = sm120_bf16
    assert rec["selected"] is None and rec["valid"] == []
    assert rec["verdict"].startswith("No valid attention backend found for cuda with AttentionSelectorConfig(")
    assert "TRITON_MLA: [sparse not supported]" in rec["verdict"]
    assert "FLASHINFER_MLA_SPARSE_SM120: [" in rec["verdict"]
    assert rec["backends"]["TRITON_MLA"] == {"priority": 0, "reasons": ["sparse not supported"]}
    sm120 = rec["backends"]["FLASHINFER_MLA_SPARSE_SM120"]
    assert sm120["priority"] == 1 and "kv_cache_dtype not supported" in sm120["reasons"]
    _no_machine_reasons(rec)


def test_sm90_auto_selects_flash_attn_mla_sparse(sm90_auto):
    rec = sm90_auto
    assert rec["selected"] == "FLASH_ATTN_MLA_SPARSE"
    assert rec["valid"][0] == "FLASH_ATTN_MLA_SPARSE"
    assert rec["verdict"].startswith("Using FLASH_ATTN_MLA_SPARSE attention backend out of potential backends:")
    assert rec["backends"]["FLASH_ATTN_MLA_SPARSE"]["reasons"] == []
    _no_machine_reasons(rec)


def test_sm89_has_no_backend(sm89_auto):
    rec = sm89_auto
    assert rec["selected"] is None and rec["valid"] == []
    assert rec["backends"]["FLASHMLA_SPARSE"]["reasons"] == ["compute capability not supported"]
    assert rec["backends"]["TRITON_MLA"]["reasons"] == ["sparse not supported"]
    _no_machine_reasons(rec)


# ---- orders and verdicts against vLLM's own selector ----------------------------------------------------------
# vllm_oracles.vllms_selection: vLLM's engine-config path, get_attn_backend and get_valid_backends on vLLM's own CUDA
# platform class (not the probe), on whichever line is installed: the priority list (vllm/platforms/cuda.py
# _get_backend_priorities, which 0.33 extends by FLASHINFER_MLA_SPARSE_SM90 and, on SM100, FLASH_ATTN_MLA_SPARSE_FA4)
# and every listed backend's reasons. GLM-5 has 64 heads (8 per rank at tp 8).


def _priorities(rec):
    return [n for n, b in sorted(rec["backends"].items(), key=lambda kv: kv[1]["priority"] if kv[1]["priority"]
                                 is not None else 99) if b["priority"] is not None]


def _assert_vllms_order_and_reasons(rec, vllm):
    assert _priorities(rec) == vllm.order
    assert {n: rec["backends"][n]["reasons"] for n in vllm.order} == vllm.reasons
    assert rec["selected"] == vllm.selected
    assert rec["valid"] == [n for n in vllm.order if not vllm.reasons[n]]


def test_sm80_verdict_is_vllms():
    from vllm_oracles import vllms_selection

    rec = diagnose("glm-5", "8.0", "bfloat16")
    _assert_vllms_order_and_reasons(rec, vllms_selection("glm-5", (8, 0), "bfloat16", 1))
    assert rec["selected"] is None and rec["valid"] == []
    # on every tested line: both sparse backends vLLM lists for SM80 refuse it by capability, TRITON_MLA is dense only
    assert "compute capability not supported" in rec["backends"]["FLASH_ATTN_MLA_SPARSE"]["reasons"]
    assert rec["backends"]["FLASHMLA_SPARSE"]["reasons"] == ["compute capability not supported"]
    assert rec["backends"]["TRITON_MLA"]["reasons"] == ["sparse not supported"]


def test_sm100_bf16_order_and_choice_are_vllms():
    """SM100 with a bf16 cache orders the sparse backends by the heads per rank (vllm/platforms/cuda.py): at tp 1
    (64 heads) and tp 8 (8 heads) vLLM's lists differ, and the record holds vLLM's list and choice at each."""
    from vllm_oracles import vllms_selection

    recs = {tp: diagnose("glm-5", "10.0", "bfloat16", tp=tp) for tp in (1, 8)}
    vllm = {tp: vllms_selection("glm-5", (10, 0), "bfloat16", tp) for tp in (1, 8)}
    assert vllm[1].order != vllm[8].order               # the case tells whether the heads per rank reach vLLM
    for tp, rec in recs.items():
        _assert_vllms_order_and_reasons(rec, vllm[tp])
        assert rec["selected"] is not None


# ---- the reasons are vLLM's ------------------------------------------------------------------------------------

def test_reasons_equal_vllm_validate_configuration(sm120_bf16):
    import torch
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse import FlashInferMLASparseSM120Backend
    from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend
    from vllm.v1.attention.selector import AttentionSelectorConfig

    sel = AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype="bfloat16", block_size=None,
                                  use_mla=True, use_sparse=True)
    cap = DeviceCapability(12, 0)
    assert sm120_bf16["backends"]["TRITON_MLA"]["reasons"] == \
        TritonMLABackend.validate_configuration(device_capability=cap, **sel._asdict())
    # (the SM120 backend returns before it reads the model config for a bf16 KV cache)
    assert sm120_bf16["backends"]["FLASHINFER_MLA_SPARSE_SM120"]["reasons"] == \
        FlashInferMLASparseSM120Backend.validate_configuration(device_capability=cap, **sel._asdict())


def test_priorities_are_vllm_priority_list(sm90_auto):
    from vllm.platforms.cuda import _get_backend_priorities
    from vllm.platforms.interface import DeviceCapability

    prio = _get_backend_priorities(True, DeviceCapability(9, 0), 64, "auto", False)
    listed = {n: b["priority"] for n, b in sm90_auto["backends"].items() if b["priority"] is not None}
    assert listed == {b.name: i for i, b in enumerate(prio)}


def test_record_json_shape(sm120_bf16):
    import vllm

    rec = json.loads(json.dumps(sm120_bf16))
    for key in ("model", "capability", "kv_cache_dtype", "tp", "vllm_version", "simulated", "selected", "valid",
                "backends", "verdict", "mla"):
        assert key in rec
    assert rec["model"] == "glm-5" and rec["capability"] == "12.0" and rec["kv_cache_dtype"] == "bfloat16"
    assert rec["tp"] == 1 and rec["vllm_version"] == vllm.__version__ and rec["mla"] == "sparse (DSA)"
    assert isinstance(rec["valid"], list) and isinstance(rec["verdict"], str)
    from sparse_mla.diagnose.selection import cuda_mla_backends

    assert {m.name for m in cuda_mla_backends()} == set(rec["backends"])     # every CUDA MLA backend, no ROCm/XPU
    assert not any(n.startswith(("ROCM_", "XPU_")) for n in rec["backends"])
    for b in rec["backends"].values():
        assert set(b) == {"priority", "reasons"}
        assert b["priority"] is None or isinstance(b["priority"], int)
        assert all(isinstance(r, str) for r in b["reasons"])
    sim = rec["simulated"]
    assert sim["probe"] is True and sim["device_capability"] == "12.0"
    assert sim["driver"]["driver"] in ("stand-in", "nvidia") and "vllm._C_stable_libtorch" in sim["driver"]["loaded"]


# ---- inputs -----------------------------------------------------------------------------------------------------

def test_sm100_order_at_each_tp_is_vllms():
    """A B200 at tp 1 and tp 4 (64 and 16 heads per rank, the edge of vLLM's "<= 16 heads" rule for a bf16 cache)
    with the default cache: the record's heads per rank, cache dtype, order and choice are vLLM's at each TP (on 0.33
    GLM-5's architecture hook makes "auto" fp8 on SM10x, whose order does not depend on the heads)."""
    from vllm_oracles import vllms_selection

    for tp, heads in ((1, 64), (4, 16)):
        rec = diagnose("glm-5", "b200", "auto", tp=tp)
        vllm = vllms_selection("glm-5", (10, 0), "auto", tp)
        assert rec["heads_per_rank"] == heads
        assert rec["config"]["cache_dtype"] == vllm.cache_dtype
        _assert_vllms_order_and_reasons(rec, vllm)


def test_dense_config_is_dense_mla(tmp_path):
    cfg = {k: v for k, v in PRESET_CONFIGS["glm-5"].items() if not k.startswith("index_")}
    # DeepSeek-V3-style dense MLA (transformers' GlmMoeDsaConfig would fill in index_topk = 2048, as vLLM sees it)
    cfg.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rec = diagnose(str(path), "9.0")
    assert rec["mla"] == "dense"
    assert rec["selected"] == "FLASH_ATTN_MLA"
    assert "non-sparse not supported" in rec["backends"]["FLASH_ATTN_MLA_SPARSE"]["reasons"]
    # the checkpoint directory holding it gives the same answer
    by_dir = diagnose(str(tmp_path), "9.0")
    assert (by_dir["selected"], by_dir["backends"]) == (rec["selected"], rec["backends"])


def test_config_path_equals_preset(tmp_path, sm120_bf16):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PRESET_CONFIGS["glm-5"]))
    rec = diagnose(str(path), "12.0", "bfloat16")
    assert rec["model"] == str(path)
    assert (rec["selected"], rec["backends"], rec["verdict"]) == \
        (sm120_bf16["selected"], sm120_bf16["backends"], sm120_bf16["verdict"])


def test_gpu_presets():
    for name in ("rtx-pro-6000", "rtx-5090", "b200", "h100", "h200", "a100", "l40s", "rtx-4090", "rtx-3090", "a40",
                 "gb10"):
        assert name in GPU_PRESETS
    assert parse_capability("rtx-3090") == ((8, 6), "rtx-3090") and parse_capability("a40") == ((8, 6), "a40")
    assert parse_capability("gb10") == ((12, 1), "gb10")
    assert parse_capability("rtx-pro-6000") == ((12, 0), "rtx-pro-6000")
    assert parse_capability("L40S") == ((8, 9), "l40s")
    assert parse_capability("9.0") == ((9, 0), None)
    assert parse_capability("local") == (None, "local")
    rec = diagnose("glm-5", "h200")
    assert rec["capability"] == "9.0" and rec["gpu"] == "h200" and rec["selected"] == "FLASH_ATTN_MLA_SPARSE"


def test_kv_cache_dtypes_match_vllm_literal():
    from vllm.config.cache import CacheDType

    assert set(KV_CACHE_DTYPES) <= set(typing.get_args(CacheDType))      # what the diagnosis accepts, vLLM has
    assert {"auto", "bfloat16", "fp8", "fp8_ds_mla"} <= set(VLLM_CACHE_DTYPES)


def test_repeated_probes_restore_vllm_platform(sm120_bf16, sm90_auto):
    import vllm.platforms as plat
    import vllm.v1.attention.backends.fa_utils as fa_utils     # first imported during a probe

    before = plat._current_platform
    again = diagnose("glm-5", "12.0", "bfloat16")
    assert plat._current_platform is before
    assert fa_utils.current_platform is before
    assert (again["selected"], again["backends"]) == (sm120_bf16["selected"], sm120_bf16["backends"])
    assert diagnose("glm-5", "9.0")["selected"] == sm90_auto["selected"]


# ---- CLI ---------------------------------------------------------------------------------------------------------

def test_cli_json_is_one_document(run_cli):
    rc, out, _ = run_cli("--capability", "12.0", "--kv-cache-dtype", "bfloat16", "--json")
    assert rc == 0
    rec = json.loads(out)
    assert rec["selected"] is None and rec["backends"]["TRITON_MLA"]["reasons"] == ["sparse not supported"]


def test_cli_table(run_cli):
    rc, out, _ = run_cli("--capability", "9.0")
    assert rc == 0
    assert "FLASH_ATTN_MLA_SPARSE" in out and "SELECTED" in out
    assert "vLLM: Using FLASH_ATTN_MLA_SPARSE attention backend" in out
    assert "Simulated: GPU with compute capability 9.0" in out
    for stage in ("config ", "attention ", "kv cache ", "indexer ", "kernel ", "engine "):
        assert any(line.startswith(stage) for line in out.splitlines()), stage


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32}


@pytest.mark.parametrize("argv, bad", [
    (["--model", "glm-6"], "glm-6"),
    (["--capability", "12"], "'12'"),
    (["--capability", "twelve"], "twelve"),
    (["--capability", "12.0.1"], "12.0.1"),
    (["--capability", "gb300"], "gb300"),
    (["--kv-cache-dtype", "fp9"], "fp9"),
    (["--tp", "3"], "3"),
    (["--model", "@malformed"], "malformed"),
    (["--model", "@llama"], "llama"),
    (["--model", "@rope0"], "qk_rope_head_dim = 0, which must be a positive integer"),
    (["--model", "@no_model_type"], "model_type"),
    (["--backend", "FLASH_NONSENSE"], "FLASH_NONSENSE"),
    (["--backend", "TRITON_MLA_SPARSE"], "--with-plugin"),
])
def test_cli_bad_input(run_cli, tmp_path, argv, bad):
    glm = PRESET_CONFIGS["glm-5"]
    files = {"@malformed": _write(tmp_path, "malformed.json", "{\"model_type\": \"glm_moe_dsa\", "),
             "@llama": _write(tmp_path, "llama.json", json.dumps(LLAMA)),
             "@rope0": _write(tmp_path, "rope0.json", json.dumps({**glm, "qk_rope_head_dim": 0})),
             "@no_model_type": _write(tmp_path, "nomt.json",
                                      json.dumps({k: v for k, v in glm.items() if k != "model_type"}))}
    argv = [files.get(a, a) for a in argv]
    rc, out, err = run_cli(*argv)
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("sparse-mla diagnose: error: ")
    assert bad in err and "accepted" in err


def test_local_without_gpu(run_cli):
    from sparse_mla.machine import has_nvidia_gpu

    if has_nvidia_gpu():
        pytest.skip("this machine has a GPU")
    rc, _, err = run_cli("--capability", "local")
    assert rc == 2 and "'local'" in err and "needs a CUDA GPU and this machine has none" in err


def test_bad_input_raises_before_probe():
    with pytest.raises(UserInputError, match="deepseek-v4"):
        diagnose("deepseek-v4")


# ---- matrix --------------------------------------------------------------------------------------------------------

def test_cli_matrix(run_cli, tmp_path, monkeypatch):
    """The command's output and files, on a 2 x 2 grid to keep CI short (the full grid: test_matrix.py)."""
    import functools

    from sparse_mla.diagnose import matrix as mx

    monkeypatch.setattr(mx, "diagnose_matrix", functools.partial(
        mx.diagnose_matrix, gpus=["rtx-pro-6000", "h200"], kv_cache_dtypes=["auto", "bfloat16"]))
    rc, out, _ = run_cli("--matrix", "--out-dir", str(tmp_path))
    assert rc == 0 and "rtx-pro-6000" in out and "none" in out
    assert (tmp_path / "diagnose_matrix.csv").is_file() and (tmp_path / "diagnose_matrix.png").is_file()


@pytest.mark.parametrize("extra", [["--capability", "9.0"], ["--kv-cache-dtype", "fp8"], ["--backend", "CUSTOM"]])
def test_cli_matrix_refuses_single_probe_options(run_cli, tmp_path, extra):
    rc, out, err = run_cli("--matrix", *extra, "--out-dir", str(tmp_path / "m"))
    assert rc == 2 and f"{extra[0]} would be ignored" in err and not (tmp_path / "m").exists()


def test_cli_out_dir_needs_matrix_and_matrix_files_are_checked_first(run_cli, tmp_path):
    rc, _, err = run_cli("--out-dir", str(tmp_path / "x"))
    assert rc == 2 and "only used with --matrix" in err and not (tmp_path / "x").exists()
    (tmp_path / "m" / "diagnose_matrix.png").mkdir(parents=True)
    rc, _, err = run_cli("--matrix", "--out-dir", str(tmp_path / "m"))
    assert rc == 2 and "diagnose_matrix.png" in err and "is a directory" in err
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["diagnose_matrix.png"]   # no CSV written alone


# ---- step 4 hook ---------------------------------------------------------------------------------------------------

def test_with_plugin_reports_triton_mla_sparse_and_is_undone(sm120_bf16):
    rec = diagnose("glm-5", "12.0", "bfloat16", with_plugin=True)
    assert "TRITON_MLA_SPARSE" in rec["backends"]
    assert rec["plugin"]["called"].startswith("sparse_mla.vllm_plugin.")
    assert rec["selected"] == "TRITON_MLA_SPARSE"    # stock has no valid backend here: the plugin's is the one
    stock = diagnose("glm-5", "12.0", "bfloat16")
    assert stock["selected"] is None and "TRITON_MLA_SPARSE" not in stock["backends"]
    assert stock["backends"] == sm120_bf16["backends"]


def test_stale_extension_flag_is_refreshed(monkeypatch, sm90_auto):
    """A vLLM module imported before the probe (here: as if without the driver) says its extension is missing; the
    probe must not turn that into a reason about this machine, and must leave the module as it found it."""
    import vllm.v1.attention.ops.flashmla as flashmla_ops

    monkeypatch.setattr(flashmla_ops, "_flashmla_C_AVAILABLE", False)
    rec = diagnose("glm-5", "9.0", "auto")
    assert "vllm.v1.attention.ops.flashmla._flashmla_C_AVAILABLE" in rec["simulated"]["refreshed_flags"]
    assert rec["backends"] == sm90_auto["backends"]
    _no_machine_reasons(rec)
    assert flashmla_ops._flashmla_C_AVAILABLE is False


def test_module_imported_under_another_platform_is_imported_again(monkeypatch, sm90_auto):
    """vLLM's ``fa_utils`` binds ``flash_attn_varlen_func`` only where it is imported under a CUDA platform; imported
    first on this machine's platform (vLLM's attention layers import it, and importing the plugin imports those), it
    lacks the name, and vLLM 0.33's FLASH_ATTN_MLA, which imports the name from there, failed to import in the probe:
    an ImportError as its reason. The stale module here is vLLM's own, executed under vLLM's UnspecifiedPlatform;
    the probe must import it (and the backend) again under the probe platform and give the same record."""
    import importlib.util
    import sys
    from unittest import mock

    import vllm.platforms as plat
    from vllm.platforms.interface import UnspecifiedPlatform

    name = "vllm.v1.attention.backends.fa_utils"
    spec = importlib.util.find_spec(name)
    stale = importlib.util.module_from_spec(spec)
    with mock.patch.object(plat, "_current_platform", UnspecifiedPlatform()):
        spec.loader.exec_module(stale)
    assert not hasattr(stale, "flash_attn_varlen_func")
    monkeypatch.setitem(sys.modules, name, stale)
    monkeypatch.delitem(sys.modules, "vllm.v1.attention.backends.mla.flashattn_mla", raising=False)
    rec = diagnose("glm-5", "9.0", "auto")
    assert rec["backends"] == sm90_auto["backends"]
    _no_machine_reasons(rec)


def test_backend_verdicts_in_table_and_frame(sm90_auto):
    """The CLI table and the notebook's frame say the same per backend: SELECTED, valid (noting a backend that is not
    on the GPU's priority list, which the selector never tries), or vLLM's reasons."""
    from sparse_mla.diagnose import backend_verdict, backends_frame, format_record

    rec = sm90_auto
    frame = backends_frame(rec)
    table = format_record(rec)
    for name, b in rec["backends"].items():
        v = backend_verdict(rec, name)
        assert frame.loc[name, "verdict"] == v and f"{name} " in table and v in table
        if name == rec["selected"]:
            assert v == "SELECTED"
        elif b["reasons"]:
            assert v == "; ".join(b["reasons"])
        else:
            assert v.startswith("valid") and (b["priority"] is None) == v.endswith("(not in this GPU's priority list)")


def test_sm100_probe_in_a_fresh_process():
    """A B200 probe first in its process: vLLM's selector imports cutlass_mla, whose module-level SM100Workspace
    allocates CUDA memory; the probe imports it first with that allocation on the meta device (it crashed with
    "Found no NVIDIA driver" when the selector imported it; earlier probes in a process had hidden that)."""
    import json
    import subprocess
    import sys

    from vllm_oracles import vllms_selection

    # 10.0, not the b200 preset: a preset brings its memory, and GLM-5 in bf16 does not fit one B200 (memory stage)
    r = subprocess.run([sys.executable, "-m", "sparse_mla", "diagnose", "--capability", "10.0", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(r.stdout)
    diagnose("glm-5", "10.0")       # here too, so that vLLM's selector below finds cutlass_mla imported
    selected = vllms_selection("glm-5", (10, 0), "auto", 1).selected
    assert selected is not None and rec["selected"] == selected and rec["engine_starts"] is True, rec["headline"]
