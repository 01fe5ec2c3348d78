"""GLM-5.3-Flash (``glm5_next``): make-checkpoint's config-only preset and the diagnosis of it, on both tested lines.

On vLLM 0.33 (the line whose registry has it) the diagnosis' answers are held to vLLM's own code called here: the
engine-config path and selector on vLLM's own CUDA platform class (:func:`test_path._vllm_selects`), the KV-cache specs
vLLM's own layers returned in the diagnosis' meta build (layer kinds, the MLA head, the KDA state), vLLM's
``support_deep_gemm``, ``get_sparse_topk_buffer_width``, the indexer backend's block sizes by its spec path,
``_resolve_kda_prefill_backend`` on vLLM's own platform class, and Triton compiling vLLM's own fp8-storing KPool kernel
(``_fwht_quant_kernel``) per GPU target; the config against transformers' ``Glm5NextTextConfig``. On vLLM 0.26 (no
GLM-5.3-Flash in its registry): one-line refusals naming the model type and the line that has it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from sparse_mla.diagnose.request import GPUS
from sparse_mla.errors import UserInputError
from sparse_mla.kernels.fp8 import has_fp8_conversion
from sparse_mla.models import (GLM5_NEXT_ARCHITECTURES, GLM5_NEXT_VLLM_LINE, GLM5_NEXT_VLLM_LINES, PRESET_CONFIGS,
                               check_config, geometry_from_config)
from sparse_mla.vllm_lines import TESTED_LINES, current_line

pytestmark = pytest.mark.every_line

ON_FLASH_LINE = current_line() in GLM5_NEXT_VLLM_LINES
flash_line = pytest.mark.skipif(not ON_FLASH_LINE, reason=f"vLLM {GLM5_NEXT_VLLM_LINE} has GLM-5.3-Flash")
other_line = pytest.mark.skipif(ON_FLASH_LINE, reason="the refusal of a vLLM without GLM-5.3-Flash")

#: the GPUs asked: the capability of every GPU preset of the diagnosis (issue 49: a rule that read the major version
#: alone passed with one capability per family) -- SM80/86 (no backend, no DeepGEMM, fp8 stores, Triton KDA), SM89
#: (fp8 stores compile, still no backend), SM90 (FlashInfer's SM90 sparse MLA, FlashKDA), SM100 (vLLM's
#: Glm5NextModelConfig hook: auto -> fp8), SM120/121 (FlashInfer's SM120 backend on fp8_ds_mla, host-dependent)
CAPS = tuple(sorted({p.capability for p in GPUS.values()}, key=lambda c: tuple(int(x) for x in c.split("."))))
TP = 8


def _flash_config() -> dict:
    """GLM-5.3-Flash's config.json as make-checkpoint writes it (on 0.26 too, where transformers has glm5_next; else
    the keys the refusal reads)."""
    from sparse_mla.launch.glm5next_config import glm5next_config

    try:
        return glm5next_config()
    except UserInputError:      # a transformers without glm5_next: what the models rule and the refusal read
        return {"architectures": [GLM5_NEXT_ARCHITECTURES[0]], "model_type": "glm5_next", "kv_lora_rank": 512,
                "qk_rope_head_dim": 0, "qk_nope_head_dim": 256, "v_head_dim": 256, "num_attention_heads": 64,
                "index_topk": 2048}


@pytest.fixture(scope="module")
def flash_dir(module_tmp):
    """A folder with GLM-5.3-Flash's config.json: make-checkpoint's (``--config-only``: the real geometry, no weights)
    on the line that has it, written here elsewhere."""
    d = module_tmp("flash") / "glm53"
    if ON_FLASH_LINE:
        from sparse_mla.launch.checkpoint import make_checkpoint

        make_checkpoint(d, preset="glm-5.3-flash", config_only=True)
    else:
        d.mkdir()
        (d / "config.json").write_text(json.dumps(_flash_config()))
    return d


def _cli(capsys, *argv) -> tuple[int, list[str]]:
    from sparse_mla import cli

    rc = cli.main(list(argv))
    return rc, capsys.readouterr().err.strip().splitlines()


# ---- both lines --------------------------------------------------------------------------------------------------

def test_the_line_that_has_it_is_the_installed_registrys():
    """:data:`GLM5_NEXT_VLLM_LINES` are tested lines, and the installed vLLM's registry has GLM-5.3-Flash exactly when
    the installed vLLM is of one of them."""
    from vllm.model_executor.models.registry import ModelRegistry

    assert set(GLM5_NEXT_VLLM_LINES) <= set(TESTED_LINES) and GLM5_NEXT_VLLM_LINE == GLM5_NEXT_VLLM_LINES[0]
    archs = ModelRegistry.get_supported_archs()
    assert all(a in archs for a in GLM5_NEXT_ARCHITECTURES) == ON_FLASH_LINE
    assert any(a in archs for a in GLM5_NEXT_ARCHITECTURES) == ON_FLASH_LINE


def test_rope_0_is_allowed_for_glm5_next_only():
    cfg = _flash_config()
    assert check_config(cfg, "flash")["qk_rope_head_dim"] == 0
    g = geometry_from_config(cfg, "flash")
    assert (g.head_size, g.qk_head_dim) == (512, 256)
    with pytest.raises(UserInputError, match="qk_rope_head_dim = 0, which must be a positive integer"):
        check_config({**PRESET_CONFIGS["glm-5"], "qk_rope_head_dim": 0}, "glm5")


def test_launch_refuses_it_in_one_line(flash_dir, capsys, monkeypatch):
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)   # refused before any engine, GPU or not
    monkeypatch.setattr("sparse_mla.launch.engine.run_offline", lambda *a, **k: pytest.fail("an engine was started"))
    rc, err = _cli(capsys, "launch", "--model", str(flash_dir), "--no-serve")
    assert rc == 2 and len(err) == 1, err
    assert "GLM-5.3-Flash" in err[0] and "diagnoses but does not run" in err[0] and "Traceback" not in err[0]


# ---- a vLLM without GLM-5.3-Flash (0.26) ------------------------------------------------------------------------

@other_line
def test_diagnose_refuses_in_one_line_naming_the_line(flash_dir, capsys):
    import vllm

    from sparse_mla.diagnose import diagnose

    rc, err = _cli(capsys, "diagnose", "--model", str(flash_dir), "--capability", "8.0")
    assert rc == 2 and len(err) == 1, err
    assert "'glm5_next'" in err[0] and f"vLLM {vllm.__version__} has no model for" in err[0]
    lines = " or ".join(f"{line}.x" for line in GLM5_NEXT_VLLM_LINES)
    assert f"vLLM {lines} has it (vllm/models/glm5next/)" in err[0] and f"under vLLM {lines}," in err[0]
    with pytest.raises(UserInputError, match="GLM-5.3-Flash"):
        diagnose(str(flash_dir), "9.0")


@other_line
@pytest.mark.parametrize("form", [[], ["--config-only"]])
def test_make_checkpoint_refuses_in_one_line(tmp_path, capsys, form):
    """Either form, the tiny checkpoint or the config alone, is refused before anything is written."""
    rc, err = _cli(capsys, "make-checkpoint", str(tmp_path / "o"), "--preset", "glm-5.3-flash", *form)
    assert rc == 2 and len(err) == 1 and "glm5_next" in err[0] and GLM5_NEXT_VLLM_LINE in err[0], err
    assert not (tmp_path / "o").exists()


# ---- vLLM 0.33: the config ---------------------------------------------------------------------------------------

@flash_line
def test_the_preset_is_transformers_config_as_vllm_loads_it(flash_dir):
    """The written config is transformers' Glm5NextTextConfig (every field it defines, read back by transformers'
    AutoConfig), and vLLM's own config loader finds in it every key vLLM's glm5next code reads beyond those."""
    from transformers import AutoConfig, Glm5NextTextConfig
    from vllm.transformers_utils.config import get_config

    from sparse_mla.launch.glm5next_config import VLLM_KEYS

    want = Glm5NextTextConfig().to_dict()
    got = AutoConfig.from_pretrained(str(flash_dir)).text_config.to_dict()
    for k in ("qk_rope_head_dim", "qk_nope_head_dim", "kv_lora_rank", "v_head_dim", "num_attention_heads",
              "index_topk", "index_kpool", "index_n_heads", "index_head_dim", "layer_types", "indexer_types",
              "linear_num_heads", "linear_head_dim", "hc_mult", "num_hidden_layers", "hidden_size"):
        assert got[k] == want[k], k
    text = get_config(str(flash_dir), trust_remote_code=False).text_config
    assert {k: getattr(text, k) for k in VLLM_KEYS} == VLLM_KEYS


@flash_line
@pytest.mark.parametrize("argv, needle", [(["--mtp"], "--mtp with --preset glm-5.3-flash"),
                                          (["--index-topk-pattern", "FSSF"], "--index-topk-pattern with"),
                                          (["--layers", "3"], "num_layers 3"),
                                          (["--index-topk", "2056"], "index_topk 2056")])
def test_the_preset_refuses_what_it_cannot_write(tmp_path, capsys, argv, needle):
    rc, err = _cli(capsys, "make-checkpoint", str(tmp_path / "o"), "--preset", "glm-5.3-flash", *argv)
    assert rc == 2 and len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "o").exists()


# ---- vLLM 0.33: the diagnosis against vLLM's own code --------------------------------------------------------------

_RECORDS: dict = {}


def _record(flash_dir, cap: str, with_plugin: bool = False) -> dict:
    from sparse_mla.diagnose import diagnose

    key = (cap, with_plugin)
    if key not in _RECORDS:
        _RECORDS[key] = diagnose(str(flash_dir), cap, "auto", tp=TP, with_plugin=with_plugin)
    return _RECORDS[key]


def _own_platform(cap: str):
    """vLLM's own CUDA platform class at ``cap`` (:func:`vllm_oracles.vllms_own_cuda_platform`) made current."""
    import contextlib

    from vllm_oracles import vllms_own_cuda_platform

    from sparse_mla.diagnose import probe as pr

    stack = contextlib.ExitStack()
    platform = stack.enter_context(vllms_own_cuda_platform(tuple(int(x) for x in cap.split(".")), TP))
    stack.enter_context(pr.use_platform(platform))
    return stack


@flash_line
@pytest.mark.parametrize("cap", CAPS)
def test_attention_is_what_vllm_selects(flash_dir, cap):
    from test_path import _vllm_selects

    rec = _record(flash_dir, cap)
    selected, cache_dtype = _vllm_selects(str(flash_dir), tuple(int(x) for x in cap.split(".")), "auto", TP)
    assert rec["selected"] == selected and rec["config"]["cache_dtype"] == cache_dtype
    assert (selected is None) == any(b["stage"] == "attention" for b in rec["blockers"])
    assert rec["config"]["architecture"] == "Glm5NextForCausalLM" and rec["mla"] == "sparse (DSA)"
    # layer 0 is a KDA layer: the first MLA layer (3) has its indexer, no top-k sharing is read into it (a helper
    # found every GLM-5.3-Flash config blocked as "layer 0 shared", 2026-12-06)
    assert rec["indexer_layers"][0] == 3 and not any("shared" in b["reason"] for b in rec["blockers"]), rec["blockers"]


@flash_line
@pytest.mark.parametrize("cap", CAPS)
def test_indexer_verdict_is_vllms_deepgemm_rule_and_tritons(flash_dir, cap):
    """Stock vLLM's KPool indexer runs (``DEEPGEMM``) exactly where vLLM's own platform class says DeepGEMM runs and
    Triton compiles fp8 stores; below SM89 every fp8-storing KPool kernel is named."""
    import vllm.platforms as plat
    from vllm.utils.import_utils import has_deep_gemm

    from sparse_mla.diagnose.glm5next import KPOOL_FP8_KERNELS

    rec = _record(flash_dir, cap)
    with _own_platform(cap):
        assert type(plat.current_platform).__module__ == "vllm.platforms.cuda"
        runs = has_deep_gemm() and plat.current_platform.support_deep_gemm()
    major, minor = (int(x) for x in cap.split("."))
    fp8 = has_fp8_conversion((major, minor))
    assert (rec["indexer"]["stock"] == "DEEPGEMM") == (runs and fp8)
    reasons = " ".join(rec["indexer"]["reasons"])
    assert all((f"vLLM's {fn} ({mod}" in reasons) == (not fp8) for fn, mod, _ in KPOOL_FP8_KERNELS)
    assert ("support_deep_gemm() is False" in reasons) == (not runs)


@flash_line
@pytest.mark.parametrize("cap", CAPS)
def test_kpool_numbers_are_vllms(flash_dir, cap):
    """The top-k row width is vLLM's ``get_sparse_topk_buffer_width`` and is what the kernel stage checked; the
    indexer backend's kernel block sizes are vLLM's answer by its spec path (the worker's), on vLLM's own platform."""
    from vllm.models.glm5next.common.model import get_sparse_topk_buffer_width
    from vllm.transformers_utils.config import get_config
    from vllm.v1.attention.backends.mla.indexer import Glm5NextIndexerBackend

    rec = _record(flash_dir, cap)
    kp = rec["glm5next"]["kpool"]
    text = get_config(str(flash_dir), trust_remote_code=False).text_config
    width = get_sparse_topk_buffer_width(text)
    assert kp["topk_width"] == width and (kp["index_topk"], kp["index_kpool"]) == (text.index_topk, text.index_kpool)
    if rec["selected"] is not None:
        assert f"top-k rows of {width} " in rec["stages"]["kernel"]
    with _own_platform(cap):
        sizes = Glm5NextIndexerBackend.get_supported_kernel_block_sizes(
            types.SimpleNamespace(tokens_per_state=text.index_kpool))
    assert kp["kernel_block_sizes"] == [int(s) for s in sizes]


def _specs_of(rec) -> tuple[dict, dict]:
    """The KV-cache specs (and layer classes) vLLM's own layers returned in the diagnosis' meta build for ``rec``'s
    backend, cache dtype and TP (kept by :mod:`sparse_mla.diagnose.meta_model` under ``(..., backend class path,
    cache dtype, tp)`` for a hybrid model)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from sparse_mla.diagnose import meta_model

    backend = None if rec["selected"] is None else AttentionBackendEnum[rec["selected"]].get_path()
    builds = [(specs, layers) for key, (specs, layers, vc) in meta_model._KV.items()
              if key[-3:] == (backend, rec["config"]["cache_dtype"], TP)
              and "Glm5NextLinearAttention" in layers.values()]
    assert builds, "the diagnosis' build is kept"
    return builds[-1]


@flash_line
@pytest.mark.parametrize("cap", CAPS)
def test_layers_mla_head_and_kda_state_are_vllms_layers(flash_dir, cap):
    """From vLLM's own layers (their KV-cache specs): the MLA layers and their head (512: no rope), the KDA layers and
    their per-request state (conv, recurrent), as the record gives them."""
    import torch

    rec = _record(flash_dir, cap)
    specs, layers = _specs_of(rec)

    def index(name):
        return int(name.split("layers.")[1].split(".")[0])

    mla = sorted(index(n) for n, c in layers.items() if c == "MLAAttention")
    kda = sorted(index(n) for n, c in layers.items() if c == "Glm5NextLinearAttention")
    g = rec["glm5next"]
    assert g["kpool"]["mla_layers"] == mla == rec["indexer_layers"] and g["kda"]["layers"] == kda
    assert {specs[n].head_size for n, c in layers.items() if c == "MLAAttention"} == {512}
    one = next(n for n, c in layers.items() if c == "Glm5NextLinearAttention")
    state = [{"shape": list(s), "dtype": str(d).replace("torch.", "")}
             for s, d in zip(specs[one].shapes, specs[one].dtypes)]
    assert [g["kda"]["state"]["conv"], g["kda"]["state"]["recurrent"]] == state
    assert isinstance(specs[one].dtypes[1], torch.dtype)


@flash_line
@pytest.mark.parametrize("cap", CAPS)
def test_kda_prefill_is_vllms_choice_on_its_own_platform(flash_dir, cap):
    import torch
    from vllm.models.glm5next.common import kda

    rec = _record(flash_dir, cap)
    with _own_platform(cap):
        want = kda._resolve_kda_prefill_backend("auto", 128, torch.bfloat16, -5.0)
    assert rec["glm5next"]["kda"]["prefill"] == want
    layers = len(rec["glm5next"]["kda"]["layers"])
    assert rec["stages"]["kda"].startswith(f"{layers} linear-attention layers on GDN_ATTN")


#: where vLLM's KPool indexer has kernels (DeepGEMM: Hopper and Blackwell; its fp8 stores compile there too)
DEEPGEMM_CAPS = ("9.0", "10.0", "12.0", "12.1")
#: where the plugin's indexer hook computes the KPool logits (no DeepGEMM kernels), with vLLM's fp8-storing pool kernels
#: (Ada) or, below SM89, the hook's byte-storing stand-ins (Ampere)
TRITON_INDEXER_CAPS = ("8.0", "8.6", "8.9")


@flash_line
@pytest.mark.parametrize("cap", CAPS)
def test_says_whether_the_plugin_runs_it_and_what_our_kernels_would_need(flash_dir, cap):
    """The plugin runs GLM-5.3-Flash where the KPool indexer runs -- vLLM's DeepGEMM one where it has kernels, our
    TRITON_DSA_INDEXER on its logits on 8.0/8.6/8.9 (the hook's GPUs: vLLM's fp8 stores compiled on 8.9, the hook's
    byte-storing stand-ins below) -- and our backend takes the MLA layer with the cache vLLM gives it: the NoPE head
    512 (its spec's) with the model dtype's cache or its 528-byte fp8 rows (10.0's and 12.0's pick). Elsewhere the
    record says it is a diagnosis, and the needs; below SM89 the needs name the fp8 stores and their stand-ins."""
    from sparse_mla.diagnose import format_record
    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    rec = _record(flash_dir, cap)
    ours = rec["glm5next"]["ours"]
    assert 512 in TritonMLASparseBackend.get_supported_head_sizes()
    reasons = ours["attention_reasons"]      # none for the model dtype's cache; an fp8 one is refused
    assert "head_size not supported" not in reasons and all("fp8" in r for r in reasons), reasons
    if cap in DEEPGEMM_CAPS:      # vLLM's cache there: bf16 (9.0) or the 528-byte fp8 rows (10.0, 12.x), both ours
        assert reasons == [], (cap, reasons, rec["effective_kv_cache_dtype"])
    runs = (cap in DEEPGEMM_CAPS or cap in TRITON_INDEXER_CAPS) and not reasons
    assert ours["supported"] is runs
    assert ours["indexer"] == ("DEEPGEMM" if cap in DEEPGEMM_CAPS else
                               "TRITON_DSA_INDEXER" if cap in TRITON_INDEXER_CAPS else None)
    assert ours["indexer_logits"] is (cap not in DEEPGEMM_CAPS)        # the hook's rule: wherever DeepGEMM has none
    assert ("runs here by vLLM's own decisions" if runs else "does not run GLM-5.3-Flash here") in ours["statement"]
    assert "528-byte fp8_ds_mla rows" in ours["needs"][0]["need"]
    parts = [n["part"] for n in ours["needs"]]
    assert parts[:4] == ["attention", "kv cache", "top-k", "indexer"] and parts[-1] == "KDA"
    assert ("fp8 stores" in parts) == (not has_fp8_conversion(tuple(int(x) for x in cap.split("."))))
    text = format_record(rec)
    assert "What our kernels would need" in text
    assert rec["stages"]["ours"].startswith("runs with the plugin (--with-plugin shows" if runs else
                                            "not run by the plugin here"), rec["stages"]["ours"]


@flash_line
def test_with_the_plugin_and_a_bf16_cache_it_runs_on_sm120(flash_dir):
    """SM120 with a bf16 cache: stock vLLM has no backend (FlashInfer's SM120 kernel reads fp8_ds_mla only); with the
    plugin vLLM selects ours, keeps its own KPool indexer (DeepGEMM), and no stage blocks before memory."""
    from sparse_mla.diagnose import diagnose

    stock = diagnose(str(flash_dir), "12.0", "bfloat16", tp=TP)
    assert stock["selected"] is None and stock["blockers"][0]["stage"] == "attention"
    assert stock["stages"]["ours"].startswith("runs with the plugin (--with-plugin shows")
    rec = diagnose(str(flash_dir), "12.0", "bfloat16", tp=TP, with_plugin=True)
    assert rec["selected"] == "TRITON_MLA_SPARSE" and rec["effective_kv_cache_dtype"] == "bfloat16"
    assert rec["indexer"]["stock"] == "DEEPGEMM" and rec["glm5next"]["ours"]["supported"] is True
    assert [b["stage"] for b in rec["blockers"]] in ([], ["memory"])
    assert rec["stages"]["ours"] == ("runs with the plugin, by vLLM's decisions: TRITON_MLA_SPARSE on the NoPE MLA "
                                     "layers (bfloat16 cache), vLLM's KPool indexer (DEEPGEMM), KDA and MHC kernels")


BUILD_SCRIPT = """
import json, triton
import sparse_mla
from sparse_mla.diagnose.probe import load_vllm_extensions
load_vllm_extensions()
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from vllm.models.glm5next.nvidia.ops import kpool_compress as ops
K = ops._fwht_quant_kernel
sig = {"q_ptr": "*bf16", "qout_ptr": "*fp8e4nv", "sout_ptr": "*fp32", "n_rows": "i32", "BLOCK_R": "constexpr"}
assert list(sig) == list(K.arg_names), K.arg_names
out = {}
for cap in (80, 86, 89, 90):
    src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index("BLOCK_R"),): 32})
    try:
        triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"num_warps": 2, "arch": f"sm{cap}"})
        out[cap] = "ok"
    except Exception as e:
        out[cap] = str(e).strip().splitlines()[-1]
print(json.dumps(out))
"""


@flash_line
def test_vllms_kpool_fp8_kernel_builds_where_the_rule_says():
    """Triton's answer for vLLM 0.33's own ``_fwht_quant_kernel`` (``fwht128_quant_fp8``, the KPool indexer's query
    quantization, as vLLM launches it: BLOCK_R 32, two warps) is the rule the indexer stage applies."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    r = subprocess.run([sys.executable, "-c", BUILD_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for cap, answer in got.items():
        assert (answer == "ok") == has_fp8_conversion(divmod(int(cap), 10)), (cap, answer)
        if answer != "ok":
            assert "fp8e4nv not supported" in answer


@flash_line
@pytest.mark.parametrize("cap", ["8.0", "8.9"])
def test_with_the_plugin_its_hook_computes_the_kpool_logits(flash_dir, cap):
    """The plugin's indexer hook, registered by the diagnosis on a GPU without DeepGEMM kernels, rebinds the KPool
    module's DeepGEMM names (read back from the hook), and on 8.0 every fp8-store site of the KPool path
    (``KPOOL_FP8_CALLERS``) as well: GLM-5.3-Flash's indexer runs as TRITON_DSA_INDEXER on both and nothing else stops
    it before memory. Stock vLLM's reasons name the fp8-storing kernels on 8.0 only. Our backend takes the NoPE 512
    head on both."""
    from sparse_mla.diagnose.glm5next import KPOOL_FP8_KERNELS

    rec = _record(flash_dir, cap, with_plugin=True)
    assert rec["selected"] == "TRITON_MLA_SPARSE" and rec["backends"]["TRITON_MLA_SPARSE"]["reasons"] == []
    assert rec["stages"]["attention"] == "ok: TRITON_MLA_SPARSE" and rec["indexer"]["stock"] is None
    assert rec["glm5next"]["ours"]["indexer_logits"] is True
    assert "rebinds nothing" not in rec["stages"]["indexer"]
    assert all((f"vLLM's {fn} ({mod}" in rec["stages"]["indexer"]) is (cap == "8.0") for fn, mod, _ in KPOOL_FP8_KERNELS)
    assert "no byte-storing replacement" not in rec["stages"]["indexer"]
    assert rec["indexer"]["with_plugin"] == "TRITON_DSA_INDEXER"
    assert rec["stages"]["indexer"].startswith("ok: TRITON_DSA_INDEXER (stock vLLM: vLLM's KPool indexer calls "
                                               "DeepGEMM")
    assert [b["stage"] for b in rec["blockers"]] in ([], ["memory"]) and rec["glm5next"]["ours"]["supported"]
    assert rec["stages"]["ours"] == (
        "runs with the plugin, by vLLM's decisions: TRITON_MLA_SPARSE on the NoPE MLA layers (bfloat16 cache), our "
        "TRITON_DSA_INDEXER on the KPool indexer's logits, KDA and MHC kernels")


@flash_line
@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9)])
def test_the_verdict_names_each_fp8_store_site_the_hook_leaves(cap):
    """``plugin_verdict`` on the hook's replacements: every DeepGEMM name of the KPool module and, below SM89, every
    fp8-store site where vLLM's callers look the kernels up (``KPOOL_FP8_CALLERS``, the hook's rule
    ``fp8_store_sites``) rebound -> TRITON_DSA_INDEXER; one site left -> that kernel, and only it, named."""
    from types import SimpleNamespace

    from sparse_mla.diagnose.glm5next import KPOOL_FP8_CALLERS, KPOOL_FP8_KERNELS, KPOOL_MODULE, plugin_verdict
    from sparse_mla.vllm_plugin import indexer as ix
    from sparse_mla.vllm_plugin.indexer_kpool import KPOOL_DEEPGEMM_NAMES

    vc = SimpleNamespace(model_config=SimpleNamespace(hf_text_config=SimpleNamespace(index_n_heads=32,
                                                                                     index_head_dim=128)))
    c = SimpleNamespace(major=cap[0], minor=cap[1])
    sites = ix.fp8_store_sites(cap)
    callers = {f"{KPOOL_FP8_CALLERS[fn]}.{fn}" for fn, _, _ in KPOOL_FP8_KERNELS}
    assert (callers <= set(sites)) is (cap < (8, 9)) and (sites == []) is (cap >= (8, 9))
    full = {**{f"{KPOOL_MODULE}.{n}": "ours" for n in KPOOL_DEEPGEMM_NAMES}, **{s: "ours" for s in sites}}
    ok = {"indexer": "TRITON_DSA_INDEXER", "logits": True, "reasons": []}
    assert plugin_verdict(vc, c, None, full) == ok
    assert plugin_verdict(vc, c, None, None) == ok                      # the hook's rule at cap
    for site in sorted(callers & set(sites)):
        left = plugin_verdict(vc, c, None, {k: v for k, v in full.items() if k != site})
        name = site.rsplit(".", 1)[1]
        assert left["indexer"] is None and len(left["reasons"]) == 1 and f"vLLM's {name} (" in left["reasons"][0]


@flash_line
def test_what_to_run_has_its_own_table_and_the_committed_one_is_current(flash_dir):
    """``--what-to-run --model DIR`` for GLM-5.3-Flash: its own table (``what_to_run_glm5next``), the four machines,
    its placeholder checkpoints; with the plugin and a bf16 cache the user's 8x RTX PRO 6000 runs ours beside vLLM's
    KPool indexer, the A100s (the hook's byte-storing KPool stand-ins) and the RTX 4090s run our indexer on the KPool
    logits (whatever else stops them). ``results/what_to_run_glm5next.csv`` is
    vLLM 0.34's answer, recomputed whole here (about 40 s on 2 cores); regenerate it with ``sparse-mla diagnose
    --what-to-run --model DIR`` (DIR from ``make-checkpoint DIR --preset glm-5.3-flash --config-only``)."""
    from pathlib import Path

    import vllm

    from sparse_mla.diagnose import what_to_run as wtr

    df = wtr.what_to_run(str(flash_dir))
    assert df.attrs["stem"] == wtr.GLM5NEXT_STEM and set(df["machine"]) == set(wtr.MACHINES)
    user = df[(df["machine"] == "8x RTX PRO 6000") & (df["weights"] == "bf16") & (df["kv_cache_dtype"] == "bfloat16")]
    stock, plugin = (user[user["vllm"] == v].iloc[0] for v in ("stock", "with the plugin"))
    assert stock["backend"] == "none" and stock["blocked_at"] == "attention"
    assert (plugin["backend"], plugin["indexer"], plugin["engine_starts"]) == ("TRITON_MLA_SPARSE", "DEEPGEMM", "yes")
    assert plugin["serve"].startswith("vllm serve /models/GLM-5.3-Flash --tensor-parallel-size 8 --kv-cache-dtype "
                                      "bfloat16")
    a100 = df[(df["machine"] == "8x A100 80 GB") & (df["vllm"] == "with the plugin") & (df["kv_cache_dtype"] == "bfloat16")]
    assert set(a100["backend"]) == {"TRITON_MLA_SPARSE"} and set(a100["indexer"]) == {"TRITON_DSA_INDEXER"}
    assert "indexer" not in set(a100["blocked_at"]) and all("kpool_stores" in r for r in a100["rests_on"])
    ada = df[(df["machine"] == "8x RTX 4090") & (df["vllm"] == "with the plugin") & (df["backend"] == "TRITON_MLA_SPARSE")]
    assert len(ada) and set(ada["indexer"]) == {"TRITON_DSA_INDEXER"} and "indexer" not in set(ada["blocked_at"])
    if not vllm.__version__.startswith("0.34."):
        pytest.skip(f"the committed table is vLLM 0.34's; this is {vllm.__version__}")
    committed = wtr.read(Path(__file__).resolve().parents[2] / "results" / f"{wtr.GLM5NEXT_STEM}.csv")
    assert committed.equals(wtr.as_written(df))


@flash_line
def test_the_mhc_layers_need_tilelang_in_vllms_words(flash_dir, monkeypatch):
    """GLM-5.3-Flash's hyper-connections run on vLLM's TileLang kernels: with TileLang (vLLM requires it) the stage
    names them; without it (vLLM's own has_tilelang() False, as in the H100 bundle of 2026-12-06, whose engines died in
    their first forward) the engine stops at the mhc stage, before memory, with vLLM's ImportError text."""
    import importlib.metadata

    from vllm.utils import import_utils

    from sparse_mla.diagnose import diagnose

    rec = diagnose(str(flash_dir), "12.0", "bfloat16", tp=TP, with_plugin=True)
    mhc = rec["glm5next"]["mhc"]
    assert mhc["used"] is True and mhc["tilelang"] is import_utils.has_tilelang() is True and mhc["blocker"] is None
    assert len(mhc["layers"]) == rec["config"].get("num_hidden_layers", len(mhc["layers"]))
    assert any(r.startswith(mhc["tilelang_pin"]) for r in importlib.metadata.requires("vllm"))
    assert rec["stages"]["mhc"].startswith(f"{len(mhc['layers'])} layers' hyper-connections")
    monkeypatch.setattr(import_utils, "has_tilelang", lambda: False)
    rec = diagnose(str(flash_dir), "12.0", "bfloat16", tp=TP, with_plugin=True)
    assert "tilelang is required for mhc but is not installed" in rec["glm5next"]["mhc"]["blocker"]
    stages = [b["stage"] for b in rec["blockers"]]
    assert stages[0] == "mhc" and stages[1:] in ([], ["memory"]) and rec["engine_starts"] is False
    assert rec["stages"]["mhc"].startswith("BLOCKED: vLLM's MHC layers")
