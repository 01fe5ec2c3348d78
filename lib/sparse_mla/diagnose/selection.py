"""Step 1, *diagnose*: ask vLLM 0.26.0's own attention selector why each MLA backend rejects a model on a GPU.

vLLM picks the attention backend of an MLA layer in ``CudaPlatformBase.get_attn_backend_cls``
(``vllm/platforms/cuda.py``): it walks the per-architecture priority list ``_get_backend_priorities(...)`` and
asks every backend class ``validate_configuration(...)`` (``vllm/v1/attention/backend.py`` plus each backend's
``supports_combination``, ``vllm/v1/attention/backends/mla/*.py``), then either logs
``"Using X attention backend out of potential backends: [...]"`` or raises
``ValueError("No valid attention backend found for cuda with AttentionSelectorConfig(...). Reasons: {...}")``.
GLM-5 / DeepSeek-V3.2 reach it with ``use_mla=True`` and ``use_sparse=True`` because their config has
``index_topk`` (``vllm/model_executor/models/deepseek_v2.py``).

:func:`diagnose` runs exactly that code for any target GPU, also on a machine without one, and returns one JSON
record: which backend vLLM would select, which are valid, and every MLA backend's priority and vLLM's reasons.
:mod:`sparse_mla.diagnose.matrix` runs it for every GPU x KV-cache dtype (table, heatmap, CSV).
No message is re-typed here: reasons are the strings vLLM's ``validate_configuration`` returns and the verdict is
the text of vLLM's own ``ValueError`` or log line.

How a target GPU is probed without a GPU (everything listed in the record's ``"simulated"`` entry):

* a *probe platform*, :class:`ProbeCudaPlatform` (a ``CudaPlatformBase`` subclass whose
  ``get_device_capability()`` returns the target), is installed as ``vllm.platforms._current_platform`` for the
  duration of the probe, because capability checks such as ``is_device_capability_family`` (FlashMLA, FA3 MLA)
  read ``current_platform``, not the ``device_capability`` argument;
* vLLM's CUDA extension modules that cannot load without the driver (``libcuda.so.1``) are replaced by empty
  ``sys.modules`` entries, so backends are judged as they would be on a GPU machine instead of failing with
  "_flashmla_C is not available" or ``ImportError`` (only modules that really fail to load are stubbed);
* a backend module that crashes at import without a driver (``CUTLASS_MLA`` allocates a CUDA workspace at module
  level, ``cutlass_mla.py``) is imported with that allocation redirected to PyTorch's ``meta`` device; if it still
  fails, its exception becomes its reason and the selector sees an ``ImportError`` for it, as vLLM handles those;
* backends that read the model from ``get_current_vllm_config()`` get a stand-in config carrying the model's Hugging
  Face config (``index_topk``, head dims) and a parallel config with no decode/prefill context parallelism.

After every call the previous ``current_platform`` (also in vLLM modules imported during the probe), backend
registrations, selector methods and logger levels are restored. The stubs stay in ``sys.modules`` for the rest of
the process (modules imported during a probe hold on to them), so after a probe ``import vllm.platforms.cuda``
succeeds on a machine without a driver, where it fails otherwise; vLLM modules loaded by a probe stay loaded.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import types
from typing import Any

from ..errors import UserInputError
from . import probe as pr
from .request import PLUGIN_BACKEND_NAME, Request, accepted_capabilities, resolve

#: MLA backends every record lists (the CUDA MLA priority lists of ``vllm/platforms/cuda.py`` plus the sparse
#: backends reachable only by name). Others found in ``AttentionBackendEnum`` are added when they can be probed.
CORE_MLA_BACKENDS: tuple[str, ...] = (
    "FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA",
    "FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120",
    "XPU_MLA_SPARSE",
)

def _stand_in_vllm_config(req: Request):
    """What ``get_current_vllm_config()`` returns during the probe: the fields vLLM's MLA backends read in
    ``supports_combination`` (``model_config.hf_config``/``hf_text_config``, ``parallel_config``)."""
    import torch

    hf = dict(req.geometry.hf_config or {})
    # vLLM tests hasattr(config, "index_topk") on transformers' config object, which may fill in a default
    # (GlmMoeDsaConfig: 2048); the geometry carries that resolved value, None for dense MLA
    if req.geometry.index_topk is None:
        hf.pop("index_topk", None)
    else:
        hf["index_topk"] = req.geometry.index_topk
    hf_ns = types.SimpleNamespace(**hf)
    ns = types.SimpleNamespace
    try:
        from vllm.config import AttentionConfig

        attention_config = AttentionConfig()
    except Exception:  # noqa: BLE001
        attention_config = ns(backend=None, flash_attn_version=None, backend_per_kind={},
                              sparse_mla_force_mqa=False, mla_prefill_backend=None, use_fp4_indexer_cache=False)
    return ns(
        model_config=ns(hf_config=hf_ns, hf_text_config=hf_ns, model=req.geometry.name, dtype=getattr(torch, req.dtype),
                        use_mla=True, is_diffusion=False, architectures=[req.geometry.architecture]),
        parallel_config=ns(tensor_parallel_size=req.tp, pipeline_parallel_size=1, data_parallel_size=1,
                           decode_context_parallel_size=1, prefill_context_parallel_size=1,
                           cp_kv_cache_interleave_size=1),
        cache_config=ns(cache_dtype=req.kv_cache_dtype, block_size=None, user_specified_block_size=False),
        attention_config=attention_config,
        compilation_config=ns(custom_ops=[], mode=0),
    )


def _apply_plugin() -> dict[str, Any]:
    """STEP 3 HOOK: the single place where the workbook's own backend enters the probe.

    Imports :mod:`sparse_mla.vllm_plugin` and calls its ``register()`` (the ``vllm.general_plugins`` entry point that
    vLLM itself calls in every process), inside :func:`pr.stock_selection`, after the probe platform is installed and
    before backends are enumerated and the selector runs. Whatever ``register()`` does (``register_backend`` of a
    member, a patched selector) is then seen by vLLM's own selection; the backend whose ``get_name()`` is
    ``TRITON_MLA_SPARSE`` is reported under that name. ``register()`` must re-apply its changes on every call
    (the sandbox undoes them after each probe).
    """
    from vllm.v1.attention.backends import registry

    try:
        plugin = importlib.import_module("sparse_mla.vllm_plugin")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("sparse_mla.vllm_plugin"):
            raise UserInputError("--with-plugin needs the step 3 plugin (module sparse_mla.vllm_plugin), which is not "
                                 "installed yet; accepted: run without --with-plugin") from None
        raise
    register = getattr(plugin, "register", None) or getattr(plugin, "install_selector_fallback", None)
    if not callable(register):
        raise UserInputError("--with-plugin needs the step 3 plugin's register() function; sparse_mla.vllm_plugin has "
                             "none; accepted: run without --with-plugin")
    import vllm.platforms.cuda as cuda_mod

    before = dict(registry._ATTN_OVERRIDES)
    methods = ("get_attn_backend_cls", "get_valid_backends")
    before_m = {k: cuda_mod.CudaPlatformBase.__dict__[k] for k in methods}
    register()
    overrides = {m.name: p for m, p in registry._ATTN_OVERRIDES.items() if before.get(m) != p}
    wrapped = [f"CudaPlatformBase.{k}" for k in methods if cuda_mod.CudaPlatformBase.__dict__[k] is not before_m[k]]
    return {"module": "sparse_mla.vllm_plugin", "called": f"sparse_mla.vllm_plugin.{register.__name__}()",
            "overrides": overrides, "wrapped": wrapped}


def _plugin_backend_class():
    """The step 3 backend class if the plugin exposes one outside the enum (fallback-selector style)."""
    from vllm.v1.attention.backend import AttentionBackend

    for mod_name in ("sparse_mla.vllm_plugin", "sparse_mla.vllm_plugin.backend"):
        mod = sys.modules.get(mod_name)
        if mod is None and mod_name == "sparse_mla.vllm_plugin.backend" and importlib.util.find_spec(mod_name) is not None:
            with contextlib.suppress(Exception):
                mod = importlib.import_module(mod_name)
        for obj in vars(mod).values() if mod is not None else ():
            if isinstance(obj, type) and issubclass(obj, AttentionBackend) and obj is not AttentionBackend:
                with contextlib.suppress(Exception):
                    if obj.get_name() == PLUGIN_BACKEND_NAME:
                        return obj
    return None


def _host_dependent_checks() -> dict[str, bool]:
    """Answers vLLM's backends take from this machine's software, not from the GPU (a GPU box may differ):
    FLASHINFER_MLA_SPARSE_SM120 needs FlashInfer's sparse MLA API plus flashinfer-cubin or ``nvcc`` on PATH
    (``vllm/utils/flashinfer.py``); TOKENSPEED_MLA needs the ``tokenspeed_mla`` package."""
    out: dict[str, bool] = {}
    with contextlib.suppress(Exception):
        from vllm.utils.flashinfer import has_flashinfer_sparse_mla_sm120

        out["flashinfer_sparse_mla_sm120_api"] = bool(has_flashinfer_sparse_mla_sm120())
    with contextlib.suppress(Exception):
        out["tokenspeed_mla_installed"] = importlib.util.find_spec("tokenspeed_mla") is not None
    return out


def _probe(req: Request) -> dict[str, Any]:
    import torch
    import vllm
    from vllm.utils.import_utils import resolve_obj_by_qualname

    local = req.gpu == "local"
    stubbed = [] if local else pr.ensure_extension_modules()
    import vllm.platforms.cuda as cuda_mod
    from vllm.config import set_current_vllm_config
    from vllm.platforms.interface import DeviceCapability
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

    simulated: dict[str, Any]
    if local:
        import vllm.platforms as plat

        platform = plat.current_platform
        if not isinstance(platform, cuda_mod.CudaPlatformBase):
            raise UserInputError(f"capability 'local': vLLM's platform here is {type(platform).__name__}, not CUDA;"
                                 f" accepted: {accepted_capabilities().replace('; or local', '')}")
        cap = platform.get_device_capability()
        platform_cls = type(platform)
        simulated = {"probe": False, "platform": platform_cls.__name__, "device_name": platform.get_device_name(),
                     "device_capability": f"{cap.major}.{cap.minor}", "stubbed_modules": []}
    else:
        platform_cls = pr.probe_platform_cls()
        cap = DeviceCapability(*req.capability)
        platform_cls.probe_capability = cap
        platform = pr.PROBE
        simulated = {"probe": True,
                     "platform": f"{__name__}.{platform_cls.__name__} (vllm.platforms.cuda.CudaPlatformBase "
                                 f"subclass) as vllm.platforms.current_platform",
                     "device_name": "probe", "device_capability": f"{cap.major}.{cap.minor}",
                     "stubbed_modules": stubbed,
                     "stubbed_because": sorted(pr.STUB_REASONS)}
    simulated["vllm_config"] = ("stand-in for get_current_vllm_config(): the model's hf config, "
                                "parallel_config with decode/prefill context parallel size 1")
    import_errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    plugin_info: dict[str, Any] | None = None
    dtype = getattr(torch, req.dtype)
    heads = req.heads_per_rank
    sel = AttentionSelectorConfig(head_size=req.geometry.head_size, dtype=dtype, kv_cache_dtype=req.kv_cache_dtype,
                                  block_size=None, use_mla=True, use_sparse=req.geometry.use_sparse)

    refreshed: list[str] = []
    flags = contextlib.nullcontext() if local else pr.extension_flags(refreshed)
    with pr.use_platform(platform), pr.stock_selection(), flags:
        if req.with_plugin:
            plugin_info = _apply_plugin()
        priorities = list(cuda_mod._get_backend_priorities(True, cap, heads, req.kv_cache_dtype, False))

        # Every MLA backend vLLM knows: enum members whose class says is_mla(). Members that cannot be imported
        # here are kept (with their import error as reason) if they are core MLA backends or in this GPU's
        # priority list; others are skipped and named in "simulated" -- in vLLM 0.26.0 that is the DeepSeek-V4
        # backends (FLASHMLA_SPARSE_DSV4, ...), which need ops of the real _C_stable_libtorch at import, take
        # head size 512 and are in no CUDA MLA priority list.
        candidates: list[tuple[Any, Any, str | None]] = []
        for member in AttentionBackendEnum:
            if not pr.is_mla_candidate(member):
                continue
            cls, err = pr.import_backend(member, probing=not local)
            if cls is not None:
                try:
                    if not cls.is_mla():
                        continue
                except Exception as e:  # noqa: BLE001
                    cls, err = None, e
            if cls is None:
                if member.name in CORE_MLA_BACKENDS or member in priorities:
                    candidates.append((member, None, pr.fmt_exc(err)))
                    import_errors[member.name] = pr.fmt_exc(err)
                else:
                    skipped[member.name] = pr.fmt_exc(err)
                continue
            candidates.append((member, cls, None))

        cfg = _stand_in_vllm_config(req)
        backends: dict[str, dict[str, Any]] = {}
        names: dict[str, str] = {}      # class path -> display name
        with set_current_vllm_config(cfg):
            for member, cls, err in candidates:
                name = pr.display_name(member, cls)
                if cls is None:
                    reasons = [err]
                else:
                    names[cuda_mod._backend_cls_path(cls)] = name
                    try:
                        reasons = list(cls.validate_configuration(device_capability=cap, **sel._asdict()))
                    except ImportError:
                        reasons = ["ImportError"]          # what vLLM's get_valid_backends records
                    except Exception as e:  # noqa: BLE001
                        reasons = [pr.fmt_exc(e)]
                prio = priorities.index(member) if member in priorities else None
                if name in backends and backends[name]["priority"] is not None and prio is None:
                    continue    # a plugin class registered twice (e.g. CUSTOM too): keep the prioritised entry
                backends[name] = {"priority": prio, "reasons": [str(r) for r in reasons]}

            # vLLM's own decision. Backends whose import crashed with something other than ImportError are made to
            # raise ImportError for the duration, which vLLM's get_valid_backends handles ("ImportError").
            blocked = {m.get_path(include_classname=False): err for m, c, err in candidates
                       if c is None and m in priorities and not err.startswith(("ImportError", "ModuleNotFoundError"))}
            finder = pr.BlockImports(blocked)
            if blocked:
                sys.meta_path.insert(0, finder)
            try:
                valid_cands, invalid_map = platform_cls.get_valid_backends(
                    device_capability=cap, attn_selector_config=sel, num_heads=heads)
                with pr.capture_selector_log() as logged:
                    try:
                        path = platform_cls.get_attn_backend_cls(None, sel, num_heads=heads)
                        error = None
                    except ValueError as e:
                        path, error = None, str(e)
            finally:
                if blocked:
                    sys.meta_path.remove(finder)

            # vLLM's own view (get_valid_backends, possibly extended by a plugin) wins over the direct calls above
            for member, (prio, reasons) in invalid_map.items():
                with contextlib.suppress(Exception):
                    backends[pr.display_name(member, member.get_class())] = {
                        "priority": prio, "reasons": [str(r) for r in reasons]}
            for c in valid_cands:
                name = names.setdefault(cuda_mod._backend_cls_path(c.backend_class),
                                        pr.display_name(c.backend, c.backend_class))
                backends[name] = {"priority": c.priority, "reasons": []}

            selected = None
            if path:
                selected = names.get(path)
                if selected is None:        # a class outside the enum (e.g. a plugin's fallback selector)
                    sel_cls = resolve_obj_by_qualname(path)
                    selected = str(sel_cls.get_name())
                    names[path] = selected
            valid = [names.get(cuda_mod._backend_cls_path(c.backend_class), pr.display_name(c.backend, c.backend_class))
                     for c in sorted(valid_cands, key=lambda c: c.priority)]
            if selected is not None and selected not in valid:
                valid.insert(0, selected)
            if req.with_plugin and PLUGIN_BACKEND_NAME not in backends:
                pcls = _plugin_backend_class()
                if pcls is not None:
                    try:
                        reasons = list(pcls.validate_configuration(device_capability=cap, **sel._asdict()))
                    except Exception as e:  # noqa: BLE001
                        reasons = [pr.fmt_exc(e)]
                    backends[PLUGIN_BACKEND_NAME] = {"priority": None, "reasons": [str(r) for r in reasons]}

    if error is not None:
        verdict = error
    else:
        using = [m for m in logged if m.startswith("Using ")]
        verdict = using[-1] if using else f"(vLLM logged no verdict; get_attn_backend_cls returned {path})"
    simulated["host_dependent"] = _host_dependent_checks()
    shims = {} if local else {k: v for k, v in pr.SHIMMED.items() if k in backends}
    if shims:
        simulated["import_shims"] = shims
    if refreshed:
        simulated["refreshed_flags"] = refreshed
    if import_errors:
        simulated["import_errors"] = import_errors
    if skipped:
        simulated["skipped_backends"] = skipped

    record: dict[str, Any] = {
        "model": req.geometry.name,
        "capability": f"{cap.major}.{cap.minor}",
        "kv_cache_dtype": req.kv_cache_dtype,
        "tp": req.tp,
        "vllm_version": vllm.__version__,
        "simulated": simulated,
        "selected": selected,
        "valid": valid,
        "backends": backends,
        "verdict": verdict,
        "mla": "sparse (DSA)" if req.geometry.use_sparse else "dense",
        "gpu": req.gpu,
        "dtype": req.dtype,
        "heads_per_rank": heads,
    }
    # priority-list members first (in vLLM's order), then the others in enum order
    record["backends"] = dict(sorted(backends.items(), key=lambda kv: (kv[1]["priority"] is None,
                                                                       kv[1]["priority"] or 0)))
    if plugin_info is not None:
        record["plugin"] = plugin_info
    return record


# ----------------------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------------------

def diagnose(model: str | os.PathLike = "glm-5", capability: str = "12.0", kv_cache_dtype: str = "auto",
             tp: int = 1, with_plugin: bool = False) -> dict[str, Any]:
    """Ask vLLM's attention selector which MLA backend it would use for ``model`` on a GPU, and why not the others.

    Args:
        model: a preset of :data:`sparse_mla.models.PRESETS` (``glm-5``, ``deepseek-v3.2``), a ``config.json`` path
            or a checkpoint directory holding one (:func:`sparse_mla.models.load_model`). The selector gets
            ``head_size = kv_lora_rank + qk_rope_head_dim``, the config's dtype (bf16/fp16; else bf16),
            ``use_mla=True`` and ``use_sparse = "index_topk" in config``.
        capability: target GPU, ``"12.0"``-style ``major.minor``, a :data:`GPU_PRESETS` name, or ``"local"`` (this
            machine's GPU through vLLM's real platform; no probe).
        kv_cache_dtype: ``auto``, ``bfloat16``, ``fp8``, ``fp8_ds_mla`` or another vLLM ``CacheDType``.
        tp: tensor-parallel size; the selector gets ``num_heads = num_attention_heads // tp`` (it orders the SM100
            sparse backends by it).
        with_plugin: also register the step 3 backend (``sparse_mla.vllm_plugin.register()``) before selecting.

    Returns:
        A JSON-serialisable dict: ``model, capability, kv_cache_dtype, tp, vllm_version, simulated`` (what was
        simulated: probe platform, stubbed modules, import shims, skipped backends), ``selected`` (backend name or
        None), ``valid`` (names, priority order), ``backends`` (``{NAME: {"priority": index in vLLM's priority
        list for that GPU or None, "reasons": vLLM's rejection strings, [] = accepted}}``), ``verdict`` (vLLM's own
        ``ValueError`` text or "Using X attention backend ..." log line), ``mla`` (``"sparse (DSA)"`` or
        ``"dense"``), ``gpu`` (preset name, ``"local"`` or None), ``dtype``, ``heads_per_rank``; plus ``plugin``
        with ``with_plugin``.

    Raises:
        UserInputError: unknown preset / capability / KV-cache dtype, unreadable or non-MLA config, ``tp`` not
            dividing the heads, ``local`` without a GPU, ``with_plugin`` without the step 3 plugin. Checked before
            vLLM is imported.

    Source: ``vllm/platforms/cuda.py`` (``_get_backend_priorities``, ``CudaPlatformBase.get_valid_backends`` and
    ``get_attn_backend_cls``), ``vllm/v1/attention/selector.py`` (``AttentionSelectorConfig``),
    ``vllm/v1/attention/backend.py`` (``validate_configuration``), ``vllm/v1/attention/backends/mla/*.py``.
    """
    req = resolve(model, capability, kv_cache_dtype, tp, with_plugin)
    with pr.quiet_logs():
        return _probe(req)
