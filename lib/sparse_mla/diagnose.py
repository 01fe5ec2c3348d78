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
:mod:`sparse_mla.matrix` runs it for every GPU x KV-cache dtype (table, heatmap, CSV).
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
import json
import logging
import os
import re
import sys
import types
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UserInputError, writable_dir, writable_file

#: Named GPUs accepted as ``capability`` (CUDA compute capability ``major.minor``).
GPU_PRESETS: dict[str, str] = {
    "rtx-pro-6000": "12.0",
    "rtx-5090": "12.0",
    "b200": "10.0",
    "h100": "9.0",
    "h200": "9.0",
    "a100": "8.0",
    "l40s": "8.9",
    "rtx-4090": "8.9",
}

#: The KV-cache dtypes the workbook diagnoses (``--kv-cache-dtype``; the matrix's columns).
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "bfloat16", "fp8", "fp8_ds_mla")

#: vLLM 0.26.0's ``vllm.config.cache.CacheDType`` literal, copied so that input is validated before vLLM is
#: imported (tests/test_diagnose.py checks it against the installed vLLM).
VLLM_CACHE_DTYPES: tuple[str, ...] = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "turboquant_k8v4",
    "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "int4_per_token_head",
    "int8_per_token_head", "fp8_per_token_head", "nvfp4",
)

#: vLLM's CUDA extension modules; each needs ``libcuda.so.1`` at load time. ``_C_stable_libtorch`` is imported
#: unguarded by ``vllm/platforms/cuda.py``; the FlashMLA and FlashAttention ones decide FLASHMLA(_SPARSE) and
#: FLASH_ATTN_MLA(_SPARSE) availability (``vllm/v1/attention/ops/flashmla.py``,
#: ``vllm/vllm_flash_attn/flash_attn_interface.py``).
CUDA_EXTENSION_MODULES: tuple[str, ...] = (
    "vllm._C_stable_libtorch",
    "vllm._flashmla_C",
    "vllm._flashmla_extension_C",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
)

#: MLA backends every record lists (the CUDA MLA priority lists of ``vllm/platforms/cuda.py`` plus the sparse
#: backends reachable only by name). Others found in ``AttentionBackendEnum`` are added when they can be probed.
CORE_MLA_BACKENDS: tuple[str, ...] = (
    "FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA",
    "FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120",
    "XPU_MLA_SPARSE",
)

#: Name under which the step 3 plugin's backend is reported.
PLUGIN_BACKEND_NAME = "TRITON_MLA_SPARSE"

#: ``functools.cache``'d vLLM helpers whose answer depends on ``current_platform`` without taking the capability
#: as an argument; cleared before and after each probe. (``_get_backend_priorities`` and the MLA prefill selector
#: are keyed on the capability and need no clearing.)
_PLATFORM_DEPENDENT_CACHES: tuple[tuple[str, str], ...] = (
    ("vllm.model_executor.layers.attention.mla_attention", "backend_supports_prefill_query_quantization"),
    ("vllm.utils.flashinfer", "supports_trtllm_attention"),
    ("vllm.utils.flashinfer", "has_flashinfer_fp8_blockscale_gemm"),
    ("vllm.utils.platform_utils", "num_compute_units"),
    ("vllm.utils.platform_utils", "get_device_name_as_file_name"),
    ("vllm.v1.attention.selector", "_cached_get_attn_backend"),
)

_CAP_RE = re.compile(r"^(\d{1,2})\.(\d)$")
_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16"}


# ----------------------------------------------------------------------------------------------------------------
# Input validation (no vLLM / torch import)
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Request:
    geometry: Any            # sparse_mla.models.ModelGeometry
    capability: tuple[int, int] | None   # None: the local GPU
    gpu: str | None          # preset name, "local", or None for a plain major.minor
    kv_cache_dtype: str
    tp: int
    heads_per_rank: int
    dtype: str               # torch dtype name passed to the selector
    with_plugin: bool


def _accepted_capabilities() -> str:
    return "major.minor such as 12.0, 9.0, 8.9; a GPU preset (" + ", ".join(GPU_PRESETS) + "); or local"


def parse_capability(capability: str | float | tuple[int, int]) -> tuple[tuple[int, int] | None, str | None]:
    """Turn ``capability`` into ``((major, minor), preset_name)``; ``(None, "local")`` for ``"local"``.

    Accepts ``"12.0"``-style strings, a :data:`GPU_PRESETS` name, ``"local"`` or a ``(major, minor)`` tuple.
    Raises :class:`UserInputError` naming the value for anything else (``"12"``, ``"twelve"``, ``"12.0.1"``).
    Does not check that a local GPU exists (:func:`diagnose` does).
    """
    if isinstance(capability, tuple) and len(capability) == 2 and all(isinstance(x, int) for x in capability):
        return (int(capability[0]), int(capability[1])), None
    s = str(capability).strip()
    key = s.lower()
    if key == "local":
        return None, "local"
    if key in GPU_PRESETS:
        major, minor = GPU_PRESETS[key].split(".")
        return (int(major), int(minor)), key
    m = _CAP_RE.match(s)
    if not m:
        raise UserInputError(f"unknown capability {s!r}; accepted: {_accepted_capabilities()}")
    return (int(m.group(1)), int(m.group(2))), None


def _check_kv_cache_dtype(kv_cache_dtype: str) -> str:
    if kv_cache_dtype not in VLLM_CACHE_DTYPES:
        raise UserInputError(
            f"unknown KV-cache dtype {kv_cache_dtype!r}; accepted: {', '.join(KV_CACHE_DTYPES)} "
            f"(or another vLLM CacheDType: {', '.join(d for d in VLLM_CACHE_DTYPES if d not in KV_CACHE_DTYPES)})")
    return kv_cache_dtype


def _model_dtype(geometry) -> str:
    """The dtype vLLM's ``--dtype auto`` gives the layer: the config's ``dtype``/``torch_dtype`` if it is fp16 or
    bf16, else bfloat16 (vLLM runs fp32 checkpoints in bf16 on GPUs that support it)."""
    cfg = geometry.hf_config or {}
    raw = str(cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16").replace("torch.", "").lower()
    return _DTYPES.get(raw, "bfloat16")


def _plugin_available() -> bool:
    if "sparse_mla.plugin" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("sparse_mla.plugin") is not None
    except (ImportError, ValueError):
        return False


def _resolve(model, capability, kv_cache_dtype, tp, with_plugin) -> _Request:
    from .models import load_model

    cap, gpu = parse_capability(capability)
    kv = _check_kv_cache_dtype(str(kv_cache_dtype))
    geometry = load_model(model)
    if isinstance(tp, bool) or not isinstance(tp, int):
        try:
            tp = int(str(tp), 10)
        except ValueError:
            raise UserInputError(f"tensor-parallel size {tp!r} is not an integer; accepted: a positive divisor "
                                 f"of num_attention_heads {geometry.num_attention_heads}") from None
    heads = geometry.heads_per_rank(tp)
    if gpu == "local":
        from ._env import has_nvidia_gpu

        if not has_nvidia_gpu():
            raise UserInputError(f"capability 'local': this machine has no NVIDIA GPU; accepted: "
                                 f"{_accepted_capabilities().replace('; or local', '')}")
    if with_plugin and not _plugin_available():
        raise UserInputError("--with-plugin needs the step 3 plugin (module sparse_mla.plugin), which is not "
                             "installed yet; accepted: run without --with-plugin")
    return _Request(geometry=geometry, capability=cap, gpu=gpu, kv_cache_dtype=kv, tp=tp, heads_per_rank=heads,
                    dtype=_model_dtype(geometry), with_plugin=bool(with_plugin))


# ----------------------------------------------------------------------------------------------------------------
# Probe machinery (imports vLLM)
# ----------------------------------------------------------------------------------------------------------------

_STUBBED: list[str] = []          # extension modules replaced by stubs in this process
_STUB_REASONS: dict[str, list[str]] = {}   # loader error -> modules stubbed for it
_SHIMMED: dict[str, str] = {}     # backend name -> how its module was imported under _cuda_alloc_on_meta
_PROBE_CLS: type | None = None    # the ProbeCudaPlatform class (created after vLLM is importable)
_PROBE: Any = None                # its single instance (modules imported during a probe keep a reference to it)


def _vllm_dir() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("vLLM is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def _load_extension(name: str) -> str | None:
    """Load a vLLM extension module the way ``import`` would, without running its parent package's ``__init__``
    (``vllm.vllm_flash_attn`` raises at import when neither FA ``.so`` loads, which would hide the cause).
    Returns None when it loaded or is absent from the wheel (then vLLM sees what a GPU machine sees), else the
    loader's error (e.g. ``libcuda.so.1: cannot open shared object file``)."""
    if name in sys.modules:
        return None
    parent, _, leaf = name.rpartition(".")
    folder = _vllm_dir().parent.joinpath(*parent.split("."))
    files = sorted(folder.glob(f"{leaf}.*.so")) + sorted(folder.glob(f"{leaf}.so"))
    spec = importlib.util.spec_from_file_location(name, files[0]) if files else None
    if spec is None or spec.loader is None:
        return None
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except (ImportError, OSError) as e:
        return str(e) or type(e).__name__
    sys.modules[name] = mod
    return None


def _ensure_extension_modules() -> list[str]:
    """Stub each of :data:`CUDA_EXTENSION_MODULES` that cannot load because the NVIDIA driver library is missing
    (errors naming ``libcuda``); an extension that fails for another reason would fail on a GPU machine too and is
    left alone. Returns all modules stubbed so far in this process."""
    for name in CUDA_EXTENSION_MODULES:
        if name in sys.modules:
            continue
        err = _load_extension(name)
        if err is None or "libcuda" not in err:
            continue
        stub = types.ModuleType(name)
        stub.__doc__ = f"sparse_mla.diagnose stub: the real extension cannot load here ({err})"
        stub.__sparse_mla_stub__ = True
        sys.modules[name] = stub
        _STUBBED.append(name)
        _STUB_REASONS.setdefault(err, []).append(name)
    # An earlier failed ``import vllm.vllm_flash_attn`` leaves flash_attn_interface cached with FA2/FA3 marked
    # unavailable; drop it so that it is re-imported against the stubs.
    if "vllm.vllm_flash_attn" not in sys.modules:
        iface = sys.modules.get("vllm.vllm_flash_attn.flash_attn_interface")
        if iface is not None and not (getattr(iface, "FA2_AVAILABLE", True) or getattr(iface, "FA3_AVAILABLE", True)):
            del sys.modules["vllm.vllm_flash_attn.flash_attn_interface"]
    return list(_STUBBED)


#: Module-level "extension loaded" flags vLLM computes at import; a module imported before the probe (without the
#: stubs, or under the CPU-less UnspecifiedPlatform) holds False although the extension is now importable.
_EXTENSION_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("vllm.v1.attention.ops.flashmla", "_flashmla_C_AVAILABLE", "vllm._flashmla_C"),
    ("vllm.v1.attention.ops.flashmla", "_flashmla_extension_C_AVAILABLE", "vllm._flashmla_extension_C"),
    ("vllm.vllm_flash_attn.flash_attn_interface", "FA2_AVAILABLE", "vllm.vllm_flash_attn._vllm_fa2_C"),
    ("vllm.vllm_flash_attn.flash_attn_interface", "FA3_AVAILABLE", "vllm.vllm_flash_attn._vllm_fa3_C"),
)


@contextlib.contextmanager
def _extension_flags(refreshed: list[str]) -> Iterable[None]:
    """Set stale extension flags (see :data:`_EXTENSION_FLAGS`) to True while probing; names them in ``refreshed``."""
    changed = []
    for mod_name, flag, ext in _EXTENSION_FLAGS:
        mod = sys.modules.get(mod_name)
        if mod is not None and getattr(mod, flag, True) is False and ext in sys.modules:
            setattr(mod, flag, True)
            changed.append((mod, flag))
            refreshed.append(f"{mod_name}.{flag}")
    try:
        yield
    finally:
        for mod, flag in changed:
            setattr(mod, flag, False)


def _probe_platform_cls():
    """Create (once) :class:`ProbeCudaPlatform`, a ``CudaPlatformBase`` whose capability is set per probe."""
    global _PROBE_CLS, _PROBE
    if _PROBE_CLS is None:
        from vllm.platforms.cuda import CudaPlatformBase
        from vllm.platforms.interface import DeviceCapability

        class ProbeCudaPlatform(CudaPlatformBase):
            """CUDA platform of a GPU that is not there: capability from :func:`diagnose`, no NVML, no driver."""

            probe_capability = DeviceCapability(12, 0)

            @classmethod
            def get_device_capability(cls, device_id: int = 0):
                return cls.probe_capability

            @classmethod
            def get_device_name(cls, device_id: int = 0) -> str:
                return "probe"

            @classmethod
            def get_device_total_memory(cls, device_id: int = 0) -> int:
                return 0

            @classmethod
            def is_fully_connected(cls, device_ids) -> bool:
                return True

        _PROBE_CLS = ProbeCudaPlatform
        _PROBE = ProbeCudaPlatform()
    return _PROBE_CLS


def _clear_platform_caches() -> None:
    for mod_name, attr in _PLATFORM_DEPENDENT_CACHES:
        fn = getattr(sys.modules.get(mod_name), attr, None)
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()


@contextlib.contextmanager
def _platform(platform) -> Iterable[None]:
    """Make ``platform`` vLLM's ``current_platform`` (lazy lookups and module globals bound earlier), then restore
    the previous one everywhere, also in modules imported meanwhile."""
    import vllm.platforms as plat
    from vllm.platforms.interface import Platform

    previous = plat._current_platform
    patched: list[tuple[types.ModuleType, Any]] = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("vllm.") or mod is None:
            continue
        cur = getattr(mod, "__dict__", {}).get("current_platform")
        if isinstance(cur, Platform) and cur is not platform:
            patched.append((mod, cur))
            mod.current_platform = platform
    plat._current_platform = platform
    _clear_platform_caches()
    try:
        yield
    finally:
        plat._current_platform = previous
        for mod, cur in patched:
            mod.current_platform = cur
        # modules first imported during the probe bound the probe platform: point them at the real one again, so
        # that vLLM used later in this process (e.g. an engine on a GPU machine) does not see the probe
        if previous is not None and previous is not platform:
            for name, mod in list(sys.modules.items()):
                if name.startswith("vllm.") and mod is not None and \
                        getattr(mod, "__dict__", {}).get("current_platform") is platform:
                    mod.current_platform = previous
        _clear_platform_caches()


@contextlib.contextmanager
def _cuda_alloc_on_meta() -> Iterable[None]:
    """While importing a backend module that allocates CUDA memory at module level: ``torch.empty(device="cuda")``
    gives a ``meta`` tensor and ``num_compute_units`` returns 0."""
    import torch
    import vllm.utils.platform_utils as pu

    real_empty, real_ncu = torch.empty, pu.num_compute_units

    def empty(*args, **kwargs):
        dev = kwargs.get("device")
        if dev is not None and str(dev).startswith("cuda"):
            kwargs["device"] = "meta"
        return real_empty(*args, **kwargs)

    torch.empty = empty
    pu.num_compute_units = lambda device_id=0: 0
    try:
        yield
    finally:
        torch.empty = real_empty
        pu.num_compute_units = real_ncu


class _BlockImports:
    """``sys.meta_path`` finder: importing one of ``modules`` raises ImportError (vLLM's selector catches only
    ImportError; a backend whose import crashes otherwise would abort the whole selection)."""

    def __init__(self, modules: Mapping[str, str]):
        self.modules = dict(modules)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.modules:
            raise ImportError(f"{fullname}: {self.modules[fullname]}")
        return None


def _fmt_exc(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}".rstrip(": ")


def _import_backend(member, probing: bool):
    """Return ``(class, error)`` for an ``AttentionBackendEnum`` member; retries a non-ImportError import crash
    under :func:`_cuda_alloc_on_meta` when probing (remembered in ``_SHIMMED`` for the records)."""
    try:
        return member.get_class(), None
    except ImportError as e:
        return None, e
    except Exception as e:  # noqa: BLE001 - e.g. RuntimeError "Found no NVIDIA driver" at module level
        if not probing:
            return None, e
        first = e
    try:
        with _cuda_alloc_on_meta():
            cls = member.get_class()
    except Exception:  # noqa: BLE001
        return None, first
    _SHIMMED[member.name] = (f"module-level CUDA allocation moved to the meta device while importing "
                          f"{member.get_path(include_classname=False)} (without it: {_fmt_exc(first)})")
    return cls, None


def _is_mla_candidate(member) -> bool:
    """Cheap pre-filter before importing: MLA backends carry "MLA" in the enum name or "mla" in the module path.
    (Importing every backend of the enum just to call ``is_mla()`` would load FlashInfer, FlexAttention, ... for
    nothing; the final word is the class's ``is_mla()``.)"""
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES

    if member in _ATTN_OVERRIDES:        # a registered plugin/custom backend: always look at it
        return True
    value = member.value or ""
    return bool(value) and ("MLA" in member.name or ".mla." in value or "_mla" in value)


def _display_name(member, cls) -> str:
    """The enum name, or the class's own ``get_name()`` when a plugin overrode that member with another backend."""
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES

    if cls is not None and member in _ATTN_OVERRIDES:
        try:
            name = cls.get_name()
        except Exception:  # noqa: BLE001
            return member.name
        if name and name != member.name:
            return str(name)
    return member.name


def _stand_in_vllm_config(req: _Request):
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


@contextlib.contextmanager
def _capture_selector_log() -> Iterable[list[str]]:
    """Collect the messages ``vllm.platforms.cuda`` logs at INFO+ (the "Using X attention backend ..." line) without
    printing them; clears vLLM's ``info_once`` de-duplication so repeated probes log again."""
    from vllm import logger as vlog

    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    lg = logging.getLogger("vllm.platforms.cuda")
    old = (lg.level, lg.propagate)
    handler = _Collect(level=logging.INFO)
    info_once = getattr(vlog, "_print_info_once", None)
    if hasattr(info_once, "cache_clear"):
        info_once.cache_clear()
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    lg.propagate = False
    try:
        yield messages
    finally:
        lg.removeHandler(handler)
        lg.setLevel(old[0])
        lg.propagate = old[1]


@contextlib.contextmanager
def _quiet_logs() -> Iterable[None]:
    """vLLM and torch log at INFO/WARNING (and packages warn) while backend modules import; keep that off the
    caller's output."""
    importlib.import_module("vllm.logger")   # configures the "vllm" logger first, so the level set below sticks

    loggers = [logging.getLogger(n) for n in ("vllm", "torch.utils.cpp_extension")]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():     # import-time Deprecation/Tqdm warnings of third-party packages
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lvl in zip(loggers, old):
            lg.setLevel(lvl)


@contextlib.contextmanager
def _stock_selection() -> Iterable[None]:
    """Run the probe against stock vLLM selection and undo any change made inside it.

    On entry, backend overrides (``register_backend``) are set aside and selector methods of ``CudaPlatformBase``
    that carry a ``__wrapped__`` original (a plugin's wrapper, e.g. ``sparse_mla.plugin``'s fallback, installed
    earlier in this process) are unwrapped; on exit everything is put back as it was. So ``with_plugin=False``
    always diagnoses stock vLLM 0.26.0, and ``with_plugin=True`` sees exactly what the plugin's ``register()``
    adds to it.
    """
    import vllm.platforms.cuda as cuda_mod
    import vllm.v1.attention.selector as selector_mod
    from vllm.v1.attention.backends import registry

    base = cuda_mod.CudaPlatformBase
    overrides = dict(registry._ATTN_OVERRIDES)
    cls_attrs = {k: base.__dict__[k] for k in ("get_attn_backend_cls", "get_valid_backends")}
    mod_attrs = [(cuda_mod, "_get_backend_priorities", cuda_mod._get_backend_priorities),
                 (selector_mod, "get_attn_backend", selector_mod.get_attn_backend),
                 (selector_mod, "_cached_get_attn_backend", selector_mod._cached_get_attn_backend)]
    registry._ATTN_OVERRIDES.clear()
    for k, v in cls_attrs.items():
        fn = v.__func__ if isinstance(v, classmethod) else v
        unwrapped = fn
        while hasattr(unwrapped, "__wrapped__"):
            unwrapped = unwrapped.__wrapped__
        if unwrapped is not fn:
            setattr(base, k, classmethod(unwrapped))
    try:
        yield
    finally:
        registry._ATTN_OVERRIDES.clear()
        registry._ATTN_OVERRIDES.update(overrides)
        for k, v in cls_attrs.items():
            setattr(base, k, v)
        for mod, attr, v in mod_attrs:
            setattr(mod, attr, v)


def _apply_plugin() -> dict[str, Any]:
    """STEP 3 HOOK: the single place where the workbook's own backend enters the probe.

    Imports :mod:`sparse_mla.plugin` and calls its ``register()`` (the ``vllm.general_plugins`` entry point that
    vLLM itself calls in every process), inside :func:`_stock_selection`, after the probe platform is installed and
    before backends are enumerated and the selector runs. Whatever ``register()`` does (``register_backend`` of a
    member, a patched selector) is then seen by vLLM's own selection; the backend whose ``get_name()`` is
    ``TRITON_MLA_SPARSE`` is reported under that name. ``register()`` must re-apply its changes on every call
    (the sandbox undoes them after each probe).
    """
    from vllm.v1.attention.backends import registry

    try:
        plugin = importlib.import_module("sparse_mla.plugin")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("sparse_mla.plugin"):
            raise UserInputError("--with-plugin needs the step 3 plugin (module sparse_mla.plugin), which is not "
                                 "installed yet; accepted: run without --with-plugin") from None
        raise
    register = getattr(plugin, "register", None) or getattr(plugin, "install_selector_fallback", None)
    if not callable(register):
        raise UserInputError("--with-plugin needs the step 3 plugin's register() function; sparse_mla.plugin has "
                             "none; accepted: run without --with-plugin")
    import vllm.platforms.cuda as cuda_mod

    before = dict(registry._ATTN_OVERRIDES)
    methods = ("get_attn_backend_cls", "get_valid_backends")
    before_m = {k: cuda_mod.CudaPlatformBase.__dict__[k] for k in methods}
    register()
    overrides = {m.name: p for m, p in registry._ATTN_OVERRIDES.items() if before.get(m) != p}
    wrapped = [f"CudaPlatformBase.{k}" for k in methods if cuda_mod.CudaPlatformBase.__dict__[k] is not before_m[k]]
    return {"module": "sparse_mla.plugin", "called": f"sparse_mla.plugin.{register.__name__}()",
            "overrides": overrides, "wrapped": wrapped}


def _plugin_backend_class():
    """The step 3 backend class if the plugin exposes one outside the enum (fallback-selector style)."""
    from vllm.v1.attention.backend import AttentionBackend

    for mod_name in ("sparse_mla.plugin", "sparse_mla.backend"):
        mod = sys.modules.get(mod_name)
        if mod is None and mod_name == "sparse_mla.backend" and importlib.util.find_spec(mod_name) is not None:
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


def _probe(req: _Request) -> dict[str, Any]:
    import torch
    import vllm
    from vllm.utils.import_utils import resolve_obj_by_qualname

    local = req.gpu == "local"
    stubbed = [] if local else _ensure_extension_modules()
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
                                 f" accepted: {_accepted_capabilities().replace('; or local', '')}")
        cap = platform.get_device_capability()
        platform_cls = type(platform)
        simulated = {"probe": False, "platform": platform_cls.__name__, "device_name": platform.get_device_name(),
                     "device_capability": f"{cap.major}.{cap.minor}", "stubbed_modules": []}
    else:
        platform_cls = _probe_platform_cls()
        cap = DeviceCapability(*req.capability)
        platform_cls.probe_capability = cap
        platform = _PROBE
        simulated = {"probe": True,
                     "platform": f"{__name__}.{platform_cls.__name__} (vllm.platforms.cuda.CudaPlatformBase "
                                 f"subclass) as vllm.platforms.current_platform",
                     "device_name": "probe", "device_capability": f"{cap.major}.{cap.minor}",
                     "stubbed_modules": stubbed,
                     "stubbed_because": sorted(_STUB_REASONS)}
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
    flags = contextlib.nullcontext() if local else _extension_flags(refreshed)
    with _platform(platform), _stock_selection(), flags:
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
            if not _is_mla_candidate(member):
                continue
            cls, err = _import_backend(member, probing=not local)
            if cls is not None:
                try:
                    if not cls.is_mla():
                        continue
                except Exception as e:  # noqa: BLE001
                    cls, err = None, e
            if cls is None:
                if member.name in CORE_MLA_BACKENDS or member in priorities:
                    candidates.append((member, None, _fmt_exc(err)))
                    import_errors[member.name] = _fmt_exc(err)
                else:
                    skipped[member.name] = _fmt_exc(err)
                continue
            candidates.append((member, cls, None))

        cfg = _stand_in_vllm_config(req)
        backends: dict[str, dict[str, Any]] = {}
        names: dict[str, str] = {}      # class path -> display name
        with set_current_vllm_config(cfg):
            for member, cls, err in candidates:
                name = _display_name(member, cls)
                if cls is None:
                    reasons = [err]
                else:
                    names[cuda_mod._backend_cls_path(cls)] = name
                    try:
                        reasons = list(cls.validate_configuration(device_capability=cap, **sel._asdict()))
                    except ImportError:
                        reasons = ["ImportError"]          # what vLLM's get_valid_backends records
                    except Exception as e:  # noqa: BLE001
                        reasons = [_fmt_exc(e)]
                prio = priorities.index(member) if member in priorities else None
                if name in backends and backends[name]["priority"] is not None and prio is None:
                    continue    # a plugin class registered twice (e.g. CUSTOM too): keep the prioritised entry
                backends[name] = {"priority": prio, "reasons": [str(r) for r in reasons]}

            # vLLM's own decision. Backends whose import crashed with something other than ImportError are made to
            # raise ImportError for the duration, which vLLM's get_valid_backends handles ("ImportError").
            blocked = {m.get_path(include_classname=False): err for m, c, err in candidates
                       if c is None and m in priorities and not err.startswith(("ImportError", "ModuleNotFoundError"))}
            finder = _BlockImports(blocked)
            if blocked:
                sys.meta_path.insert(0, finder)
            try:
                valid_cands, invalid_map = platform_cls.get_valid_backends(
                    device_capability=cap, attn_selector_config=sel, num_heads=heads)
                with _capture_selector_log() as logged:
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
                    backends[_display_name(member, member.get_class())] = {
                        "priority": prio, "reasons": [str(r) for r in reasons]}
            for c in valid_cands:
                name = names.setdefault(cuda_mod._backend_cls_path(c.backend_class),
                                        _display_name(c.backend, c.backend_class))
                backends[name] = {"priority": c.priority, "reasons": []}

            selected = None
            if path:
                selected = names.get(path)
                if selected is None:        # a class outside the enum (e.g. a plugin's fallback selector)
                    sel_cls = resolve_obj_by_qualname(path)
                    selected = str(sel_cls.get_name())
                    names[path] = selected
            valid = [names.get(cuda_mod._backend_cls_path(c.backend_class), _display_name(c.backend, c.backend_class))
                     for c in sorted(valid_cands, key=lambda c: c.priority)]
            if selected is not None and selected not in valid:
                valid.insert(0, selected)
            if req.with_plugin and PLUGIN_BACKEND_NAME not in backends:
                pcls = _plugin_backend_class()
                if pcls is not None:
                    try:
                        reasons = list(pcls.validate_configuration(device_capability=cap, **sel._asdict()))
                    except Exception as e:  # noqa: BLE001
                        reasons = [_fmt_exc(e)]
                    backends[PLUGIN_BACKEND_NAME] = {"priority": None, "reasons": [str(r) for r in reasons]}

    if error is not None:
        verdict = error
    else:
        using = [m for m in logged if m.startswith("Using ")]
        verdict = using[-1] if using else f"(vLLM logged no verdict; get_attn_backend_cls returned {path})"
    simulated["host_dependent"] = _host_dependent_checks()
    shims = {} if local else {k: v for k, v in _SHIMMED.items() if k in backends}
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
        with_plugin: also register the step 3 backend (``sparse_mla.plugin.register()``) before selecting.

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
    req = _resolve(model, capability, kv_cache_dtype, tp, with_plugin)
    with _quiet_logs():
        return _probe(req)


def backend_verdict(rec: Mapping[str, Any], name: str) -> str:
    """One backend's line in a :func:`diagnose` record: ``SELECTED``, ``valid`` (with a note when the backend is not
    on this GPU's priority list, so vLLM's selector never tries it), or vLLM's reasons joined by ``"; "``."""
    b = rec["backends"][name]
    if b["reasons"]:
        return "; ".join(b["reasons"])
    if name == rec["selected"]:
        return "SELECTED"
    return "valid" + ("" if b["priority"] is not None else " (not in this GPU's priority list)")


def backends_frame(rec: Mapping[str, Any]):
    """The record's ``backends`` as a ``pandas.DataFrame`` (backend, priority, verdict), in the record's order."""
    import pandas as pd

    rows = []
    for name, b in rec["backends"].items():
        rows.append({"backend": name, "priority": b["priority"], "verdict": backend_verdict(rec, name)})
    df = pd.DataFrame(rows, columns=["backend", "priority", "verdict"])
    df["priority"] = df["priority"].astype("Int64")
    return df.set_index("backend")


def vllm_source(module: str, pattern: str, after: int = 0) -> str:
    """Lines of vLLM's source that contain ``pattern`` (plus ``after`` following lines), as
    ``vllm/<path>:<line>: <text>``, read from the installed file without importing the module."""
    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{module} is not installed")
    root = Path(list(spec.submodule_search_locations)[0]).parent
    rel = Path(*module.split(".")).with_suffix(".py")
    lines = (root / rel).read_text().splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if pattern in line:
            for j in range(i, min(i + after + 1, len(lines))):
                out.append(f"{rel.as_posix()}:{j + 1}: {lines[j]}")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------------------
# Text output and CLI
# ----------------------------------------------------------------------------------------------------------------

def format_record(rec: Mapping[str, Any]) -> str:
    """A readable table of a :func:`diagnose` record: backend, priority, verdict/reasons; then vLLM's verdict and
    what was simulated."""
    lines = [f"model {rec['model']} ({rec['mla']} MLA, {rec['dtype']}, {rec['heads_per_rank']} heads/rank at "
             f"tp={rec['tp']}), capability {rec['capability']}" + (f" [{rec['gpu']}]" if rec.get("gpu") else "")
             + f", kv_cache_dtype {rec['kv_cache_dtype']}, vLLM {rec['vllm_version']}", ""]
    rows = sorted(rec["backends"].items(),
                  key=lambda kv: (kv[1]["priority"] is None, kv[1]["priority"] if kv[1]["priority"] is not None
                                  else 0, kv[0]))
    w = max([len("backend")] + [len(n) for n, _ in rows])
    lines.append(f"{'backend':<{w}}  {'prio':>4}  verdict")
    lines.append(f"{'-' * w}  {'-' * 4}  {'-' * 7}")
    for name, b in rows:
        prio = "-" if b["priority"] is None else str(b["priority"])
        verdict = backend_verdict(rec, name)
        lines.append(f"{name:<{w}}  {prio:>4}  {verdict}")
    lines += ["", f"vLLM: {rec['verdict']}", f"Simulated: {describe_simulated(rec['simulated'])}"]
    if rec.get("plugin"):
        lines.append(f"Plugin: {rec['plugin'].get('called')} overrides {rec['plugin'].get('overrides') or '{}'}")
    return "\n".join(lines)


def describe_simulated(sim: Mapping[str, Any]) -> str:
    """One line for the record's ``simulated`` entry."""
    if not sim.get("probe"):
        return f"nothing: real {sim.get('platform')} ({sim.get('device_name')}, {sim.get('device_capability')})"
    parts = [f"GPU with compute capability {sim['device_capability']} (probe platform, no device)"]
    if sim.get("stubbed_modules"):
        parts.append("stubbed extensions " + ", ".join(m.rsplit(".", 1)[-1] for m in sim["stubbed_modules"]))
    if sim.get("refreshed_flags"):
        parts.append("extension flags set again: " + ", ".join(f.rsplit(".", 1)[-1] for f in sim["refreshed_flags"]))
    if sim.get("import_shims"):
        parts.append("import shim for " + ", ".join(sim["import_shims"]))
    if sim.get("import_errors"):
        parts.append("import failed: " + ", ".join(sim["import_errors"]))
    if sim.get("skipped_backends"):
        parts.append("not probed: " + ", ".join(sim["skipped_backends"]))
    parts.append("stand-in vLLM config with the model's hf config")
    return "; ".join(parts)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterable[None]:
    """Send everything written to stdout (Python and C level) to stderr, so that stdout carries one JSON document."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    saved = os.dup(fd) if fd is not None else None
    try:
        if fd is not None:
            sys.stderr.flush()
            os.dup2(sys.stderr.fileno(), fd)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)


def add_cli(subparsers) -> None:
    """Add ``sparse-mla diagnose``."""
    p = subparsers.add_parser(
        "diagnose", help="ask vLLM's attention selector why each MLA backend rejects a model on a GPU",
        description="Run vLLM 0.26.0's own attention-backend selection for an MLA model on any target GPU (also "
                    "without a GPU: a probe platform stands in) and print every MLA backend's priority and vLLM's "
                    "reasons, then vLLM's verdict.")
    p.add_argument("--model", default="glm-5",
                   help="preset (glm-5, deepseek-v3.2), config.json or checkpoint directory (default glm-5)")
    p.add_argument("--capability", default=None,
                   help="major.minor (default 12.0), a GPU preset (" + ", ".join(GPU_PRESETS) + ") or local")
    p.add_argument("--kv-cache-dtype", default=None,
                   help="auto (default), bfloat16, fp8, fp8_ds_mla or another vLLM CacheDType")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (heads per rank = heads / tp; default 1)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON record on stdout")
    p.add_argument("--matrix", action="store_true",
                   help="every GPU preset x KV dtype (auto, bfloat16, fp8, fp8_ds_mla): table on stdout, CSV and "
                        "PNG heatmap into --out-dir")
    p.add_argument("--out-dir", default=None, help="where --matrix writes its files (default ./results)")
    p.add_argument("--with-plugin", action="store_true",
                   help="register the step 3 TRITON_MLA_SPARSE backend (sparse_mla.plugin) before selecting; with "
                        "--matrix: stock and with-plugin verdicts side by side (diagnose_matrix_plugin.csv/.png)")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    quiet = _stdout_to_stderr() if args.json else contextlib.nullcontext()
    if args.matrix:
        from .matrix import diagnose_matrix, write_matrix

        given = [f for f, v in (("--capability", args.capability), ("--kv-cache-dtype", args.kv_cache_dtype))
                 if v is not None]
        if given:
            raise UserInputError(f"--matrix probes every GPU preset and KV-cache dtype, so {' and '.join(given)} would "
                                 f"be ignored; accepted: --matrix without them, or {' and '.join(given)} without "
                                 f"--matrix (one probe)")
        _resolve(args.model, "12.0", "auto", args.tp, args.with_plugin)
        out_dir = writable_dir("results" if args.out_dir is None else args.out_dir, "--out-dir")   # before probing
        stem = "diagnose_matrix_plugin" if args.with_plugin else "diagnose_matrix"
        for ext in ("csv", "png"):
            writable_file(out_dir / f"{stem}.{ext}", "matrix file")
        with quiet:
            df = diagnose_matrix(model=args.model, tp=args.tp, with_plugin=args.with_plugin)
            paths = write_matrix(df, out_dir)
        if args.json:
            print(json.dumps({"rows": df.to_dict(orient="records"),
                              "files": {k: str(v) for k, v in paths.items()}}, indent=2))
        else:
            print(df.to_string(index=False))
            print(f"\nwrote {paths['csv']} and {paths['png']}")
        return 0
    if args.out_dir is not None:
        raise UserInputError(f"--out-dir {args.out_dir!r} is only used with --matrix (a single probe writes no files); "
                             f"accepted: --matrix --out-dir DIR, or no --out-dir")
    with quiet:
        rec = diagnose(model=args.model, capability="12.0" if args.capability is None else args.capability,
                       kv_cache_dtype="auto" if args.kv_cache_dtype is None else args.kv_cache_dtype, tp=args.tp,
                       with_plugin=args.with_plugin)
    print(json.dumps(rec, indent=2) if args.json else format_record(rec))
    return 0
