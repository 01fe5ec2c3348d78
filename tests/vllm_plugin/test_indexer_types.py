"""sparse_mla.vllm_plugin.indexer_types: a GLM-5.2-style checkpoint (top-k sharing declared only as
``indexer_types``, no indexer tensors in its shared layer) through vLLM's own engine configuration, vLLM's model built
on the meta device and vLLM's own default loader -- which stops with "Following weights were not initialized from
checkpoint" without the plugin and loads with it -- plus the hook's rules on transformers' config objects and its
entries in vLLM's ``MODELS_CONFIG_MAP`` (installed, idempotent, vLLM's own hooks kept and put back)."""
from __future__ import annotations

import copy
import logging
from types import SimpleNamespace

import pytest
import torch

from sparse_mla.launch import checkpoint as ck
from sparse_mla.vllm_plugin import indexer_types as it

pytestmark = pytest.mark.every_line

pytest.importorskip("vllm")


@pytest.fixture
def config_map():
    """vLLM's ``MODELS_CONFIG_MAP`` as it was, put back after the test."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    saved = dict(MODELS_CONFIG_MAP)
    yield MODELS_CONFIG_MAP
    MODELS_CONFIG_MAP.clear()
    MODELS_CONFIG_MAP.update(saved)


def _glm(**kw):
    from transformers import GlmMoeDsaConfig

    return GlmMoeDsaConfig(num_hidden_layers=4, **kw)


def test_fix_sets_the_pattern_only_where_vllm_would_not_see_the_sharing(caplog):
    cfg = _glm(indexer_types=["full", "shared", "shared", "full"])
    assert not hasattr(cfg, "index_topk_pattern")
    assert it.fix_hf_config(cfg) == "FSSF" and cfg.index_topk_pattern == "FSSF"
    for kw in (dict(index_topk_freq=2), dict(index_topk_pattern="FSFS"), dict(index_skip_topk_offset=1)):
        c = _glm(**kw)                          # transformers derives indexer_types; vLLM reads the key itself
        before = {k: getattr(c, k, None) for k in it.VLLM_KEYS}
        assert it.fix_hf_config(c) is None and {k: getattr(c, k, None) for k in it.VLLM_KEYS} == before
    assert it.fix_hf_config(SimpleNamespace(indexer_types=["full", "shared"])) is None      # not DSA: no index_topk
    bad = SimpleNamespace(index_topk=2048, indexer_types=["full", "sparse"])
    with caplog.at_level(logging.WARNING, logger=it.__name__):
        assert it.fix_hf_config(bad) is None and not hasattr(bad, "index_topk_pattern")
    assert "'sparse'" in caplog.text
    assert it.pattern_from_indexer_types(("full",)) == "F" and it.pattern_from_indexer_types("FS") is None


def test_hook_entries_in_vllms_config_map(config_map):
    """Installed for both DSA architectures (idempotent); DeepseekV32ForCausalLM keeps vLLM's own hook (its bf16 ->
    auto KV-cache rule still runs, under its name), and so does GlmMoeDsaForCausalLM where vLLM has one (0.33);
    uninstalling puts vLLM's entries back exactly."""
    from vllm.model_executor.models.config import DeepseekV32ForCausalLM as vllm_hook

    it.uninstall_indexer_types_hook()           # as vLLM ships it (an earlier test may have called register())
    shipped = dict(config_map)
    assert it.hooked() == []
    assert it.install_indexer_types_hook() == list(it.ARCHITECTURES)
    if "GlmMoeDsaForCausalLM" in shipped:       # vLLM 0.33's own GLM-5 hook stays the base of ours
        assert issubclass(config_map["GlmMoeDsaForCausalLM"], shipped["GlmMoeDsaForCausalLM"])
    glm, v32 = config_map["GlmMoeDsaForCausalLM"], config_map["DeepseekV32ForCausalLM"]
    assert it.install_indexer_types_hook() and config_map["GlmMoeDsaForCausalLM"] is glm
    assert issubclass(v32, vllm_hook) and v32.__name__ == "DeepseekV32ForCausalLM"
    from vllm.config import AttentionConfig

    vc = SimpleNamespace(model_config=SimpleNamespace(hf_config=SimpleNamespace(index_topk=2048)),
                         cache_config=SimpleNamespace(cache_dtype="bfloat16"),
                         attention_config=AttentionConfig())       # 0.34's hook also sets the indexer logits dtype
    v32.verify_and_update_config(vc)
    assert vc.cache_config.cache_dtype == "auto"
    hf = _glm(indexer_types=["full", "shared", "full", "full"])
    glm.verify_and_update_model_config(SimpleNamespace(hf_config=hf, hf_text_config=hf))
    assert hf.index_topk_pattern == "FSFF"
    with it.suspended():
        assert it.hooked() == [] and config_map["DeepseekV32ForCausalLM"] is vllm_hook
    assert it.hooked() == list(it.ARCHITECTURES)
    it.uninstall_indexer_types_hook()
    assert config_map["DeepseekV32ForCausalLM"] is vllm_hook and dict(config_map) == shipped


# ------------------------------------------------------------------ through vLLM's construction and loader
@pytest.fixture(scope="module")
def glm52(module_tmp):
    return ck.make_checkpoint(module_tmp("glm52") / "glm52", index_topk=128, indexer_types="FS")


def _load_in_a_fresh_process(path, with_plugin: bool) -> tuple[list[int], str | None, set[str]]:
    """:func:`_load_with_vllm` in a new Python process: ``(indexer layers, the loader's error as text or None, the
    parameters it did not load)``. vLLM 0.34 keeps the model class an earlier resolution found (its registry's
    ``_try_load_model_cls`` and the classes it imported), so in a process where another test resolved GLM-5's class
    with no CUDA platform (test_gguf_adapter, test_lines) it builds a ``DeepseekV2`` model that ignores
    ``indexer_types``; a fresh process has no such past (2026-12-06: this test failed only in those orders)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve()
    script = (f"import json, sys; sys.path[:0] = [{str(here.parent)!r}, {str(here.parents[1])!r}]\n"
              f"from test_indexer_types import _load_with_vllm\n"
              f"_, layers, error, unloaded = _load_with_vllm({str(path)!r}, {with_plugin!r})\n"
              f"print('RESULT', json.dumps([layers, None if error is None else str(error), sorted(unloaded)]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert done.returncode == 0 and line, done.stderr[-3000:]
    layers, error, unloaded = json.loads(line.removeprefix("RESULT "))
    return layers, error, set(unloaded)


def _load_with_vllm(path, with_plugin: bool, quantization: str | None = None):
    """vLLM's engine configuration of the checkpoint (``sparse-mla diagnose``'s: EngineArgs on a probe platform for
    SM90), vLLM's model built from it on the meta device (the diagnosis' stand-ins: one TP rank, no attention kernels)
    and vLLM's ``DefaultModelLoader.load_weights`` reading the safetensors file into it (copies into meta tensors:
    nothing is allocated) with its check that every parameter was loaded. ``quantization`` names the checkpoint's
    quantization to the loader only (the model stays unquantized). Returns ``(hf_config, indexer layers, None or the
    loader's exception, the names of the parameters the loader did not load)``."""
    from vllm.config import CompilationMode, LoadConfig, set_current_vllm_config
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
    from vllm.model_executor.model_loader.utils import initialize_model

    from sparse_mla.diagnose import config as stage_config
    from sparse_mla.diagnose import meta_model as mm
    from sparse_mla.diagnose import path as dpath
    from sparse_mla.diagnose import probe as pr
    from sparse_mla.diagnose import request, selection

    req = request.resolve(str(path), "9.0", "auto", 1, with_plugin)
    pr.load_vllm_extensions()
    platform = dpath._platform(req)[0]
    with pr.quiet_logs(), pr.use_platform(platform), pr.stock_selection():
        if with_plugin:
            selection.apply_plugin()
        vc, info = stage_config.engine_config(req, path, None)
        assert vc is not None, info
        vc = copy.deepcopy(vc)
        vc.compilation_config.mode = CompilationMode.NONE
        vc.compilation_config.static_forward_context.clear()
        with mm._process_groups(1), mm._building(None), pr.cuda_alloc_on_meta(), torch.device("meta"), \
                mm.default_dtype(vc.model_config.dtype), set_current_vllm_config(vc):
            model = initialize_model(vc)
            layers = sorted({int(n.split(".")[2]) for n, _ in model.named_parameters() if ".indexer." in n})
            vc.model_config.quantization = quantization
            loaded = set()
            real = model.load_weights
            model.load_weights = lambda weights: loaded.update(real(weights)) or set(loaded)   # vLLM's check adds to it
            try:
                DefaultModelLoader(LoadConfig(load_format="safetensors")).load_weights(model, vc.model_config)
                error = None
            except ValueError as e:
                error = e
            unloaded = {n for n, _ in model.named_parameters()} - loaded
        vc.compilation_config.static_forward_context.clear()
    return vc.model_config.hf_config, layers, error, unloaded


def test_glm52_checkpoint_loads_in_vllm_only_with_the_plugin(glm52, config_map):
    """Without the plugin vLLM builds layer 1's indexer and its loader refuses the checkpoint (unquantized) or,
    for a quantized checkpoint, where it does not check, leaves that indexer's parameters unloaded; with the plugin
    vLLM builds no indexer there and every parameter is loaded."""
    from vllm.model_executor.models import utils

    if hasattr(utils, "compute_skip_topk_layers"):      # vLLM 0.34 reads indexer_types itself (that function): it
        # loads without the plugin, and with it (each in a fresh process: _load_in_a_fresh_process says why)
        for with_plugin in (False, True):
            layers, error, unloaded = _load_in_a_fresh_process(glm52, with_plugin)
            assert layers == [0] and error is None and unloaded == set(), (with_plugin, layers, error)
        return
    hf, layers, error, unloaded = _load_with_vllm(glm52, with_plugin=False)
    assert hf.indexer_types == ["full", "shared"] and not hasattr(hf, "index_topk_pattern")
    assert layers == [0, 1]
    assert error is not None and "Following weights were not initialized from checkpoint" in str(error)
    assert "model.layers.1.self_attn.indexer." in str(error) and "model.layers.0." not in str(error)
    # vLLM's check names the k_norm parameters only: it exempts layers with a quantization method (linears too)
    assert "indexer.k_norm.weight" in str(error) and "wq_b" not in str(error)
    assert {n.rsplit(".indexer.")[1] for n in unloaded} == {"wq_b.weight", "wk_weights_proj.weight", "k_norm.weight",
                                                          "k_norm.bias"}
    assert all(n.startswith("model.layers.1.self_attn.indexer.") for n in unloaded)

    _, _, error, unloaded_q = _load_with_vllm(glm52, with_plugin=False, quantization="fp8")
    assert error is None and unloaded_q == unloaded

    hf, layers, error, unloaded = _load_with_vllm(glm52, with_plugin=True)
    assert hf.index_topk_pattern == "FS" and layers == [0] and error is None and unloaded == set()
