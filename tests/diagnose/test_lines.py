"""``sparse_mla.diagnose.lines``: the per-line adapters, and the diagnosis on whichever tested vLLM line is installed
(0.26.x or 0.33.x) against that vLLM's own code.

The references are vLLM's: its ``__version__``, its engine-config path and selector on its own CUDA platform class
(:func:`test_path._vllm_selects`), its ``MLAAttentionSpec`` page sizes, the modules and cached helpers it ships, and
Triton compiling vLLM's own fp8-storing indexer kernel for each GPU target (in a subprocess with
``TRITON_INTERPRET=0``: this process runs Triton's interpreter).
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from sparse_mla.diagnose import diagnose, lines
from sparse_mla.errors import UserInputError
from sparse_mla.kernels.fp8 import has_fp8_conversion
from sparse_mla.models import PRESET_CONFIGS
from sparse_mla.vllm_lines import TESTED_LINES, current_line

pytestmark = pytest.mark.every_line

#: what every adapter defines (lines/__init__.py lists them)
ADAPTER_NAMES = ("PATCHABLE_MODULES", "PLATFORM_DEPENDENT_CACHES", "QUIET_LOGGERS", "INDEXER_FP8_KERNELS",
                 "resolve_kv_cache_layout", "kv_cache_groups", "kv_cache_config_from_groups", "check_kv_cache_configs",
                 "indexer_fp8_build", "settle_logging")


@pytest.fixture(scope="module")
def sm80():
    return diagnose("glm-5", "8.0", "auto")


@pytest.fixture(scope="module")
def h200():
    return diagnose("glm-5", "h200", "fp8_ds_mla", tp=8)


# ---- the adapters -----------------------------------------------------------------------------------------------

def test_every_tested_line_has_an_adapter_with_the_same_names():
    assert set(lines.MODULES) == set(TESTED_LINES)
    for line in TESTED_LINES:
        mod = lines.adapter(line)
        assert mod.__name__.endswith(lines.MODULES[line])
        missing = [n for n in ADAPTER_NAMES if not hasattr(mod, n)]
        assert not missing, f"{line}: {missing}"


def test_installed_line_picks_its_adapter():
    line = current_line()
    assert line is not None, "the tests run on a tested vLLM line"
    assert lines.adapter() is lines.adapter(line)


def test_unknown_line_is_one_line_error():
    with pytest.raises(UserInputError,
                       match=r"^vLLM line '0\.1' has no diagnosis adapter; the lines are 0\.26, 0\.33, 0\.34$"):
        lines.adapter("0.1")


def test_adapter_names_exist_in_installed_vllm():
    """Every module, cached helper and kernel function the installed line's adapter names is in the installed vLLM
    (or its torch: a logger is named after its module, ``logging.getLogger(__name__)``). vLLM's extensions are
    loaded first, as the diagnosis loads them (importing vllm.platforms.cuda needs them on a machine without
    libcuda.so.1; run alone, this test otherwise depended on another test having loaded them)."""
    from sparse_mla.diagnose.probe import load_vllm_extensions

    load_vllm_extensions()
    line = lines.adapter()
    for name in line.PATCHABLE_MODULES + line.QUIET_LOGGERS:
        assert importlib.util.find_spec(name) is not None, name
    for mod, attr in line.PLATFORM_DEPENDENT_CACHES:
        assert hasattr(getattr(importlib.import_module(mod), attr), "cache_clear"), (mod, attr)
    for fn, mod, _ in line.INDEXER_FP8_KERNELS:
        assert importlib.util.find_spec(mod) is not None, mod
        path = importlib.util.find_spec(mod).origin
        with open(path) as f:
            assert f"def {fn}(" in f.read(), (fn, mod)


# ---- the diagnosis, in the installed vLLM's words ----------------------------------------------------------------

def test_record_names_installed_vllm(sm80):
    import vllm

    assert sm80["vllm_version"] == vllm.__version__


def test_sm80_stock_has_no_backend_in_vllms_words(sm80):
    """At 8.0 stock vLLM raises; the verdict is its ValueError text, and its own engine-config path agrees."""
    from test_path import _vllm_selects

    assert _vllm_selects("glm-5", (8, 0), "auto", 1)[0] is None
    assert sm80["selected"] is None and sm80["valid"] == []
    assert sm80["verdict"].startswith("No valid attention backend found for cuda with AttentionSelectorConfig(")
    assert sm80["engine_starts"] is False and sm80["blockers"][0]["stage"] == "attention"


def test_sm90_selects_what_vllm_selects():
    from test_path import _vllm_selects

    rec = diagnose("glm-5", "9.0", "auto")
    selected, _ = _vllm_selects("glm-5", (9, 0), "auto", 1)
    assert selected is not None and rec["selected"] == selected and rec["valid"][0] == selected
    assert rec["verdict"].startswith(f"Using {selected} attention backend")


def test_indexer_reasons_name_the_lines_kernels(sm80):
    """Below SM89 the indexer stage names every fp8-storing kernel of the installed line's DSA path."""
    reasons = " ".join(sm80["indexer"]["reasons"])
    for fn, mod, _ in lines.adapter().INDEXER_FP8_KERNELS:
        assert f"vLLM's {fn} ({mod}" in reasons


def test_kv_bytes_per_token_are_vllms_spec_page_sizes(h200):
    """The memory stage's KV bytes per token (one rank), by layer class = the sum of ``page_size_bytes / block_size``
    over the specs vLLM's own layers returned (``get_kv_cache_spec``, kept by :mod:`.meta_model` for the build). A
    hand-built ``MLAAttentionSpec`` is no oracle across lines: 0.33's layer adds ``state_content_bytes`` (656 for
    fp8_ds_mla), 0.26's spec derives it from the cache dtype."""
    from sparse_mla.diagnose import meta_model

    mem = h200["memory"]
    builds = [(specs, layers) for specs, layers, vc in meta_model._KV.values()
              if vc.cache_config.cache_dtype == "fp8_ds_mla"]
    assert builds, "the fp8_ds_mla build is kept"
    specs, layers = builds[-1]
    want: dict[str, int] = {}
    for name, spec in specs.items():
        want[layers[name]] = want.get(layers[name], 0) + spec.page_size_bytes // spec.block_size
    assert mem["kv_cache_dtype"] == "fp8_ds_mla"
    assert mem["kv_cache_bytes_per_token_by_layer"] == want
    assert mem["kv_cache_bytes_per_token"] == sum(want.values())
    n = PRESET_CONFIGS["glm-5"]["num_hidden_layers"]
    assert sorted(want.values()) == [n * (128 + 4), n * 656]      # the indexer's fp8 + scale; FlashMLA's 656 B row


def test_kv_planning_runs_vllms_check(h200):
    """The fixes are checked by vLLM's own planning (the line's get_kv_cache_configs): a larger TP fits."""
    fits = [f for f in h200["memory"]["fixes"] if f["change"].startswith("--tensor-parallel-size")]
    assert fits and fits[0]["fits"] is True and fits[0]["max_tokens"] > 0


# ---- vLLM's own indexer kernel, compiled by Triton for each target ------------------------------------------------

BUILD_SCRIPT = """
import json, triton
import sparse_mla
from sparse_mla.diagnose.probe import load_vllm_extensions
load_vllm_extensions()
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from sparse_mla.diagnose.lines import adapter
K, sig, consts, options = adapter().indexer_fp8_build()
out = {}
for cap in (80, 86, 89, 90):
    src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index(n),): v for n, v in consts.items()})
    try:
        triton.compile(src, target=GPUTarget("cuda", cap, 32), options={**options, "arch": f"sm{cap}"})
        out[cap] = "ok"
    except Exception as e:
        out[cap] = str(e).strip().splitlines()[-1]
print(json.dumps(out))
"""


def test_vllms_indexer_fp8_kernel_builds_where_the_rule_says():
    """Triton's answer for vLLM's own kernel of the installed line (0.26: _fused_indexer_q_rope_quant_kernel, 0.33:
    _fused_q_kernel) is the rule the indexer stage applies (:func:`has_fp8_conversion`)."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    r = subprocess.run([sys.executable, "-c", BUILD_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for cap, answer in got.items():
        builds = answer == "ok"
        assert builds == has_fp8_conversion(divmod(int(cap), 10)), (cap, answer)
        if not builds:
            assert "fp8e4nv not supported" in answer


@pytest.mark.parametrize("cap", ["8.0", "8.9"])
def test_with_the_plugin_the_indexer_wall_follows_what_the_plugin_replaces(cap):
    """With the plugin on a GPU DeepGEMM lacks: TRITON_MLA_SPARSE is selected and the Triton indexer serves, on every
    line. Below SM89 that takes a stand-in for each fp8-storing kernel of the line's DSA path (vLLM 0.33: fused_q and
    fused_norm_rope): the indexer stage blocks on any kernel the plugin's hook leaves in place (its ``hooked`` names,
    checked by name), so a served indexer here means every one is replaced."""
    rec = diagnose("glm-5", cap, "auto", with_plugin=True)
    assert rec["selected"] == "TRITON_MLA_SPARSE"
    assert rec["indexer"]["with_plugin"] == "TRITON_DSA_INDEXER" and rec["engine_starts"] is True
    assert not any("the plugin does not replace" in r for r in rec["indexer"]["reasons"])
    if not has_fp8_conversion(tuple(int(x) for x in cap.split("."))):       # the stock path's kernels, still named
        for name, module, _ in lines.adapter().INDEXER_FP8_KERNELS:
            assert any(f"vLLM's {name} ({module}" in r for r in rec["indexer"]["reasons"]), name


def test_the_diagnosis_prints_none_of_vllms_logging(capfd, monkeypatch):
    """The Python API prints nothing of its own on either line: vLLM 0.33's create_engine_config re-applies its
    logging configuration (the "vllm" logger back to INFO) on its first call in a process, which this test brings
    back by forgetting the configuration applied so far; the line's settle_logging applies it first."""
    import vllm.logger as vlog

    if hasattr(vlog, "_last_configured_logging_config"):
        monkeypatch.setattr(vlog, "_last_configured_logging_config", None)   # as in a fresh process
    capfd.readouterr()
    rec = diagnose("glm-5", "8.0", "auto", with_plugin=True)
    out, err = capfd.readouterr()
    assert rec["engine_starts"] is True
    assert out == "" and err == "", (out + err)[:2000]
