"""Step 4, ``sparse_mla.vllm_plugin``: TRITON_MLA_SPARSE registered into vLLM 0.26.0 as an out-of-tree plugin.

What vLLM's own selector picks with the plugin, for GPUs this CPU machine does not have (through
``sparse_mla.diagnose``'s in-process probe: the first probe imports vLLM and its MLA backends, ~15 s, later ones take
about a second, so each case is probed once per module); the entry point and vLLM's plugin loader; the backend's
rejection reasons compared with the strings vLLM's generic ``validate_configuration`` produces. (The
``--matrix --with-plugin`` side-by-side table, CSV and heatmap are tested in tests/diagnose/test_matrix.py.)
"""
from __future__ import annotations

import importlib
import json

import pytest

from backend_cases import GOOD, generic_backend
from sparse_mla import diagnose as dg
from sparse_mla.models import PRESET_CONFIGS

pytestmark = [pytest.mark.gguf, pytest.mark.every_line]

OURS = "TRITON_MLA_SPARSE"


@pytest.fixture(scope="module")
def dense_config(module_tmp):
    """GLM-5's config without the DSA indexer fields: dense MLA (``use_sparse=False``)."""
    cfg = {k: v for k, v in PRESET_CONFIGS["glm-5"].items() if not k.startswith("index_")}
    # DeepSeek-V3-style dense MLA (transformers' GlmMoeDsaConfig would fill in index_topk = 2048, as vLLM sees it)
    cfg.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"])
    path = module_tmp("dense") / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.fixture
def vllm_state(probes):
    """Snapshot and restore what ``register()`` changes in this process: vLLM's backend overrides, the selector
    method it wraps and the plugin loader's once-per-process flag. Depends on a probe having run, so that
    ``vllm.platforms.cuda`` is importable on a machine without the NVIDIA driver (the probe's stubs)."""
    probes("12.0", "bfloat16")
    import vllm.platforms.cuda as cuda_mod
    import vllm.plugins as vplugins
    from vllm.v1.attention.backends import registry

    overrides = dict(registry._ATTN_OVERRIDES)
    method = cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"]
    loaded = vplugins.plugins_loaded
    try:
        yield
    finally:
        registry._ATTN_OVERRIDES.clear()
        registry._ATTN_OVERRIDES.update(overrides)
        cuda_mod.CudaPlatformBase.get_valid_backends = method
        vplugins.plugins_loaded = loaded


def _stock_valid_backends(cuda_mod):
    fn = cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"].__func__
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


# ---- registration ----------------------------------------------------------------------------------------------

def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "triton_mla_sparse"]
    assert len(eps) == 1
    assert eps[0].value == "sparse_mla.vllm_plugin:register"
    import sparse_mla.vllm_plugin

    assert eps[0].load() is sparse_mla.vllm_plugin.register


def test_register_is_reentrant(vllm_state):
    import vllm.platforms.cuda as cuda_mod
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, _ATTN_OVERRIDES

    import sparse_mla.vllm_plugin as plugin
    from sparse_mla.vllm_plugin import selector
    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    plugin.register()
    first = cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"]
    plugin.register()
    second = cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"]
    assert second is first                                  # not wrapped a second time
    fn = second.__func__
    assert getattr(fn, selector._MARK, False)
    assert not getattr(fn.__wrapped__, selector._MARK, False)   # wraps vLLM's own method, once
    assert fn.__wrapped__ is _stock_valid_backends(cuda_mod)
    assert _ATTN_OVERRIDES[AttentionBackendEnum.CUSTOM] == "sparse_mla.vllm_plugin.backend.TritonMLASparseBackend"
    assert AttentionBackendEnum.CUSTOM.get_path() == selector.BACKEND_PATH
    assert AttentionBackendEnum.CUSTOM.get_class() is TritonMLASparseBackend
    assert TritonMLASparseBackend.get_name() == OURS


def test_vllm_plugin_loader_calls_register(vllm_state, monkeypatch):
    """vLLM's own ``load_general_plugins()`` (what every vLLM process runs) finds the entry point and calls it, once
    per process (its ``plugins_loaded`` flag)."""
    import vllm.envs as envs
    import vllm.plugins as vplugins
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, _ATTN_OVERRIDES

    import sparse_mla.vllm_plugin as plugin
    from sparse_mla.vllm_plugin import selector

    if envs._is_envs_cache_enabled():
        pytest.skip("vLLM's environment cache is on in this process; VLLM_PLUGINS would not be re-read")
    calls = []
    real = plugin.register

    def spy():
        calls.append(1)
        real()

    monkeypatch.setattr(plugin, "register", spy)          # EntryPoint.load() resolves sparse_mla.vllm_plugin:register
    monkeypatch.setenv("VLLM_PLUGINS", "triton_mla_sparse")
    monkeypatch.setattr(vplugins, "plugins_loaded", False)
    _ATTN_OVERRIDES.pop(AttentionBackendEnum.CUSTOM, None)

    vplugins.load_general_plugins()
    assert calls == [1]
    assert _ATTN_OVERRIDES[AttentionBackendEnum.CUSTOM] == selector.BACKEND_PATH
    vplugins.load_general_plugins()                        # a second call in the same process does nothing
    assert calls == [1]


@pytest.mark.parametrize("allowed", [None, "triton_mla_sparse", "some_other_plugin", "", "gguf, triton_mla_sparse",
                                     "some_other_plugin,triton_mla_sparse"])
def test_not_loaded_by_vllm_is_what_vllms_loader_does(vllm_state, monkeypatch, allowed):
    """Issue 47, breaker round 7 (e23): with ``VLLM_PLUGINS`` naming other plugins only, vLLM never calls our
    ``register()``. :func:`not_loaded_by_vllm` answers as vLLM's own ``load_general_plugins()`` then does (spied on),
    and names the variable and its value where it says no."""
    import vllm.envs as envs
    import vllm.plugins as vplugins

    import sparse_mla.vllm_plugin as plugin
    from sparse_mla.vllm_plugin.register import not_loaded_by_vllm

    if envs._is_envs_cache_enabled():
        pytest.skip("vLLM's environment cache is on in this process; VLLM_PLUGINS would not be re-read")
    if allowed is None:
        monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("VLLM_PLUGINS", allowed)
    why = not_loaded_by_vllm()
    calls = []
    monkeypatch.setattr(plugin, "register", lambda: calls.append(1))
    monkeypatch.setattr(vplugins, "plugins_loaded", False)
    monkeypatch.setattr(vplugins, "load_plugins_by_group", lambda group, real=vplugins.load_plugins_by_group: {
        k: f for k, f in real(group).items() if k == "triton_mla_sparse"})     # ours only: no other plugin runs here
    vplugins.load_general_plugins()
    assert (why is None) == (calls == [1]), (allowed, why, calls)
    if why is not None:
        assert why.startswith(f"VLLM_PLUGINS={allowed!r} does not name triton_mla_sparse: ") and "\n" not in why
        assert "accepted: VLLM_PLUGINS unset, or naming triton_mla_sparse" in why


def test_register_leaves_another_plugins_custom_backend_alone(vllm_state, caplog):
    """vLLM has one CUSTOM slot: a backend another plugin put there is kept, with a warning, and the fallback then
    offers nothing (vLLM would resolve CUSTOM to the other class)."""
    import torch
    import vllm.platforms.cuda as cuda_mod
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    from vllm.v1.attention.selector import AttentionSelectorConfig

    import sparse_mla.vllm_plugin as plugin
    from sparse_mla.vllm_plugin import selector

    other = "someone_else.attention.TheirBackend"
    register_backend(AttentionBackendEnum.CUSTOM, other)
    method = cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"]
    with caplog.at_level("WARNING", logger="sparse_mla.vllm_plugin"):
        assert plugin.register() is False
    assert AttentionBackendEnum.CUSTOM.get_path() == other
    assert cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"] is method
    assert other in caplog.text and "not registered" in caplog.text

    # the other order: ours first, then another plugin overwrites the slot
    AttentionBackendEnum.CUSTOM.clear_override()
    assert plugin.register() is True
    sel = AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype="bfloat16", block_size=None,
                                  use_mla=True, use_sparse=True)
    valid, invalid = selector.offer_triton_mla_sparse([], {}, DeviceCapability(12, 0), sel, 64)
    assert [c.backend for c in valid] == [AttentionBackendEnum.CUSTOM]
    register_backend(AttentionBackendEnum.CUSTOM, other)
    assert selector.offer_triton_mla_sparse([], {}, DeviceCapability(12, 0), sel, 64) == ([], {})


# ---- the selection matrix with the plugin ----------------------------------------------------------------------

def test_sm120_bf16_selects_triton_mla_sparse(probes):
    rec = probes("12.0", "bfloat16")
    assert rec["selected"] == OURS and rec["valid"] == [OURS]
    assert rec["verdict"].startswith("Using CUSTOM attention backend out of potential backends: ['CUSTOM']")
    assert rec["backends"][OURS]["reasons"] == []
    # vLLM's own backends still say no, with the same reasons as without the plugin
    assert rec["backends"]["TRITON_MLA"]["reasons"] == ["sparse not supported"]
    assert "kv_cache_dtype not supported" in rec["backends"]["FLASHINFER_MLA_SPARSE_SM120"]["reasons"]
    assert rec["plugin"]["overrides"] == {"CUSTOM": "sparse_mla.vllm_plugin.backend.TritonMLASparseBackend"}
    assert rec["plugin"]["wrapped"] == ["CudaPlatformBase.get_valid_backends"]


@pytest.mark.parametrize("capability, kv", [("8.9", "auto"), ("8.9", "bfloat16"), ("8.0", "auto"),
                                            ("8.0", "bfloat16")])
def test_ampere_ada_select_triton_mla_sparse(probes, capability, kv):
    rec = probes(capability, kv)
    assert rec["selected"] == OURS and rec["valid"] == [OURS]
    assert rec["backends"]["FLASHMLA_SPARSE"]["reasons"] == ["compute capability not supported"]


def test_sm90_unchanged(probes):
    rec = probes("9.0", "auto")
    stock = dg.diagnose("glm-5", "9.0", "auto")
    assert rec["selected"] == stock["selected"] == "FLASH_ATTN_MLA_SPARSE"
    assert rec["valid"] == stock["valid"] and OURS not in rec["valid"]
    # offered only where vLLM has nothing: reported, but not on the priority list
    assert rec["backends"][OURS] == {"priority": None, "reasons": []}


def test_sm100_unchanged(probes):
    rec = probes("10.0", "auto")
    stock = dg.diagnose("glm-5", "10.0", "auto")
    assert rec["selected"] == stock["selected"] and stock["selected"] not in (None, OURS)    # vLLM's own choice
    if rec["vllm_version"].startswith("0.26."):
        assert stock["selected"] == "FLASHMLA_SPARSE"                        # tp=1: 64 heads per rank
    assert rec["valid"] == stock["valid"] and OURS not in rec["valid"]


def test_sm120_fp8_ds_mla(probes):
    rec = probes("12.0", "fp8_ds_mla")
    stock = dg.diagnose("glm-5", "12.0", "fp8_ds_mla")
    if rec["simulated"]["host_dependent"].get("flashinfer_sparse_mla_sm120_api"):
        assert rec["selected"] == "FLASHINFER_MLA_SPARSE_SM120"
    if stock["selected"] is not None:                        # vLLM has a backend here, so not ours
        assert rec["selected"] == stock["selected"] != OURS
    else:                                                     # a host without FlashInfer's SM120 API: ours
        assert rec["selected"] == OURS
    assert rec["backends"][OURS]["reasons"] == []            # ours takes the fp8_ds_mla cache too


def test_prefer_switch_takes_sm90(probes, monkeypatch):
    import sparse_mla.vllm_plugin as plugin
    from sparse_mla.vllm_plugin import selector

    monkeypatch.setenv(selector.PREFER_ENV, "1")
    rec = dg.diagnose("glm-5", "9.0", "auto", with_plugin=True)
    assert rec["selected"] == OURS
    assert rec["valid"][0] == OURS and "FLASH_ATTN_MLA_SPARSE" in rec["valid"]
    assert rec["backends"][OURS]["priority"] == -1
    # an fp8 cache is ours too when preferred, stored as fp8_ds_mla (vLLM's rule for its sparse backends)
    fp8 = dg.diagnose("glm-5", "9.0", "fp8", with_plugin=True)
    assert fp8["selected"] == OURS and fp8["effective_kv_cache_dtype"] == "fp8_ds_mla"
    e5m2 = dg.diagnose("glm-5", "9.0", "fp8_e5m2", with_plugin=True)
    assert e5m2["backends"][OURS]["reasons"] == ["kv_cache_dtype not supported"]


def test_disable_switch(monkeypatch):
    import sparse_mla.vllm_plugin as plugin
    from sparse_mla.vllm_plugin import selector

    monkeypatch.setenv(selector.DISABLE_ENV, "1")
    rec = dg.diagnose("glm-5", "8.9", "auto", with_plugin=True)
    assert rec["selected"] is None and rec["valid"] == []


@pytest.mark.parametrize("capability", ["12.0", "9.0", "8.9"])
def test_dense_mla_never_gets_ours(probes, dense_config, monkeypatch, capability):
    import sparse_mla.vllm_plugin as plugin
    from sparse_mla.vllm_plugin import selector

    rec = probes(capability, "bfloat16", model=dense_config)
    assert rec["mla"] == "dense"
    assert rec["selected"] is not None and rec["selected"] != OURS and OURS not in rec["valid"]
    monkeypatch.setenv(selector.PREFER_ENV, "1")
    preferred = dg.diagnose(dense_config, capability, "bfloat16", with_plugin=True)
    assert preferred["selected"] == rec["selected"] and OURS not in preferred["valid"]


def test_offer_leaves_non_sparse_requests_alone(probes):
    """The selector hook itself: a dense MLA request goes back exactly as vLLM's stock list left it."""
    import torch
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.selector import AttentionSelectorConfig

    from sparse_mla.vllm_plugin.selector import offer_triton_mla_sparse

    probes("12.0", "bfloat16")
    sel = AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=None,
                                  use_mla=True, use_sparse=False)
    valid, invalid = [], {}
    assert offer_triton_mla_sparse(valid, invalid, DeviceCapability(8, 9), sel, 64) == ([], {})


def test_cli_with_plugin_json(run_cli):
    rc, out, _ = run_cli("--with-plugin", "--capability", "12.0", "--kv-cache-dtype", "bfloat16", "--json")
    assert rc == 0
    rec = json.loads(out)
    assert rec["selected"] == OURS and rec["plugin"]["called"] == "sparse_mla.vllm_plugin.register()"


# ---- our reasons are vLLM's generic reasons ----------------------------------------------------------------------

@pytest.mark.parametrize("change, expected", [
    ({"head_size": 192}, "head_size not supported"),
    ({"kv_cache_dtype": "fp8_e5m2"}, "kv_cache_dtype not supported"),
    ({"kv_cache_dtype": "int8_per_token_head"}, "kv_cache_dtype not supported"),
    ({"capability": (7, 5)}, "compute capability not supported"),
    ({"use_sparse": False}, "non-sparse not supported"),
    ({"block_size": 16}, "block_size not supported"),
    ({"dtype": "float32"}, "dtype not supported"),
])
def test_rejection_reasons_are_vllm_generic(change, expected):
    import torch
    from vllm.platforms.interface import DeviceCapability

    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    args = {**GOOD, "dtype": torch.bfloat16, "device_capability": DeviceCapability(12, 0)}
    for k, v in change.items():
        if k == "capability":
            args["device_capability"] = DeviceCapability(*v)
        elif k == "dtype":
            args["dtype"] = getattr(torch, v)
        else:
            args[k] = v
    ours = TritonMLASparseBackend.validate_configuration(**args)
    generic = generic_backend().validate_configuration(**args)
    assert generic == [expected]           # the analogous trivial subclass: vLLM's wording, one reason
    assert ours == generic


def test_good_configuration_and_declarations():
    import torch
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backend import AttentionCGSupport, MultipleOf

    from sparse_mla.vllm_lines import current_line
    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend as B
    from sparse_mla.vllm_plugin.backend import TritonMLASparseImpl, TritonMLASparseMetadataBuilder

    for cap in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]:
        for kv in ("auto", "bfloat16", "float16"):
            assert B.validate_configuration(**{**GOOD, "kv_cache_dtype": kv}, dtype=torch.bfloat16,
                                            device_capability=DeviceCapability(*cap)) == []
    assert B.validate_configuration(**{**GOOD, "block_size": 128}, dtype=torch.float16,
                                    device_capability=DeviceCapability(12, 0)) == []   # a multiple of 64
    assert B.get_supported_head_sizes() == [576, 512]
    sizes = B.get_supported_kernel_block_sizes()       # FLASHMLA_SPARSE's answer off SM100, on each line
    assert sizes == ([64] if current_line() == "0.26" else [MultipleOf(64)]), sizes
    assert B.is_mla() and B.is_sparse()
    assert B.get_impl_cls() is TritonMLASparseImpl and B.get_builder_cls() is TritonMLASparseMetadataBuilder
    assert TritonMLASparseMetadataBuilder._cudagraph_support is AttentionCGSupport.UNIFORM_BATCH
    assert B.get_kv_cache_shape(10, 64, 1, 576) == (10, 64, 576)


def test_model_without_index_topk_is_rejected_by_combination(probes):
    """``supports_combination`` reads the model from vLLM's current config (as the in-tree sparse backends do)."""
    import types

    import torch
    from vllm.config import set_current_vllm_config
    from vllm.platforms.interface import DeviceCapability

    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    probes("12.0", "bfloat16")
    ns = types.SimpleNamespace
    args = {**GOOD, "dtype": torch.bfloat16, "device_capability": DeviceCapability(12, 0)}

    def cfg(hf, dcp=1):
        return ns(model_config=ns(hf_config=hf, hf_text_config=hf),
                  parallel_config=ns(decode_context_parallel_size=dcp, prefill_context_parallel_size=1),
                  compilation_config=ns(custom_ops=[], mode=0))

    with set_current_vllm_config(cfg(ns(index_topk=2048))):
        assert TritonMLASparseBackend.validate_configuration(**args) == []
    with set_current_vllm_config(cfg(ns(kv_lora_rank=512))):
        assert TritonMLASparseBackend.validate_configuration(**args) == \
            [f"{OURS} requires a model with index_topk config"]
    with set_current_vllm_config(cfg(ns(index_topk=2048), dcp=2)):
        assert TritonMLASparseBackend.validate_configuration(**args) == [f"{OURS} does not support DCP for now"]
    with set_current_vllm_config(cfg(ns(index_topk=100))):   # vLLM's index conversion needs multiples of 128
        reasons = TritonMLASparseBackend.validate_configuration(**args)
        assert len(reasons) == 1 and "index_topk" in reasons[0] and "got 100" in reasons[0]


# ---- vLLM versions ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, ok", [("0.26.0", True), ("0.26.3", True), ("0.26.1.dev7+g1234abc", True),
                                         ("0.33.0", True), ("0.33.2rc1", True), ("0.27.0", False), ("0.32.1", False),
                                         ("0.34.0", True), ("0.34.1", True), ("0.35.0", False), ("0.25.1", False),
                                         ("nonsense", False)])
def test_supported_vllm_versions(version, ok):
    from sparse_mla.vllm_plugin.register import vllm_supported

    got, line = vllm_supported(version)
    assert got is ok and version in line and "0.26.x, 0.33.x, 0.34.x" in line and "\n" not in line
    assert ("not registered" in line) is not ok


def test_register_outside_the_supported_range_changes_nothing(vllm_state, monkeypatch, caplog):
    """On a vLLM of no tested line (0.30: other backend and indexer interfaces) the plugin registers nothing and
    says so once."""
    import logging

    import vllm
    import vllm.platforms.cuda as cuda_mod
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES

    import sparse_mla.vllm_plugin as plugin
    reg = importlib.import_module("sparse_mla.vllm_plugin.register")   # (the package's `register` is the function)

    monkeypatch.setattr(vllm, "__version__", "0.30.0")
    monkeypatch.setattr(reg, "_WARNED", set())
    before = (dict(_ATTN_OVERRIDES), cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"])
    with caplog.at_level(logging.WARNING, logger="sparse_mla.vllm_plugin.register"):
        assert plugin.register() is False
        assert plugin.register() is False
    assert (dict(_ATTN_OVERRIDES), cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"]) == before
    lines = [r.getMessage() for r in caplog.records if "0.30.0" in r.getMessage()]
    assert len(lines) == 1 and "not registered" in lines[0]
    from sparse_mla.errors import UserInputError

    with pytest.raises(UserInputError, match=r"vLLM 0\.30\.0 is installed; the diagnosis runs on vLLM 0\.26\.x, "
                                             r"0\.33\.x"):
        dg.diagnose("glm-5", "12.0", "bfloat16", with_plugin=True)        # one line, not a traceback


def test_every_plugin_line_adapter_defines_the_same_names():
    """The backend and the indexer hook are written once against these names (``vllm_plugin/lines/__init__.py``);
    each line's module imports without its vLLM (its vLLM imports are on first use)."""
    from sparse_mla.vllm_lines import TESTED_LINES
    from sparse_mla.vllm_plugin import lines

    names = ("ImplForward", "customize_spec", "deepgemm_adapters", "FP8_STORE_HOOKS", "FP8_STORE_STAND_INS",
             "TRITON_FP8_MLA_CACHE_WRITE", "KPOOL_DEEPGEMM_MODULE")
    for line in TESTED_LINES:
        mod = importlib.import_module(f"sparse_mla.vllm_plugin.lines.{lines.module_name(line)}")
        assert all(hasattr(mod, n) for n in names), (line, [n for n in names if not hasattr(mod, n)])
    current = lines.module_name(lines.current_line())
    assert lines.adapter() is importlib.import_module(f"sparse_mla.vllm_plugin.lines.{current}")
