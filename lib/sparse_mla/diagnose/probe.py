"""The probe: vLLM's own CUDA platform code run for a GPU that is not there.

* :func:`probe_platform_cls` -- a ``CudaPlatformBase`` subclass whose ``get_device_capability()`` returns the target
  (and ``device_count()`` the tensor-parallel size), installed as ``vllm.platforms.current_platform`` for the duration
  of a probe (:func:`use_platform`), because capability checks such as ``is_device_capability_family`` read
  ``current_platform``, not an argument;
* :func:`load_vllm_extensions` -- vLLM's CUDA extension modules need ``libcuda.so.1`` to load; without the NVIDIA
  driver they are loaded for real against a stand-in driver library whose entry points all answer "no device", so
  backends and vLLM's ops are judged as on a GPU machine;
* :func:`cuda_alloc_on_meta` / :func:`import_backend` -- a backend module that allocates CUDA memory at import
  (``CUTLASS_MLA``) is imported with that allocation on PyTorch's ``meta`` device;
* :func:`stock_selection` -- backend registrations and selector wrappers set aside, so that a probe sees stock vLLM;
* :func:`quiet_logs` / :func:`collect_logs` / :func:`capture_selector_log` -- vLLM's log lines kept off the
  caller's output, the config hooks' and the selector's ("Using X attention backend") lines captured.

Everything is restored after each probe; the stubs stay in ``sys.modules`` for the rest of the process.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import types
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..layouts import PATCH_MARK


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

# ----------------------------------------------------------------------------------------------------------------
# The driver stand-in (imports vLLM's real extensions)
# ----------------------------------------------------------------------------------------------------------------

DRIVER: dict[str, Any] = {}      # how libcuda.so.1 was provided in this process (see load_vllm_extensions)
SHIMMED: dict[str, str] = {}     # backend name -> how its module was imported under cuda_alloc_on_meta
_PROBE_CLS: type | None = None    # the ProbeCudaPlatform class (created after vLLM is importable)
PROBE: Any = None                # its single instance (modules imported during a probe keep a reference to it)

#: What every entry point of the stand-in driver returns: ``CUDA_ERROR_NO_DEVICE`` (``cuda.h``).
CUDA_ERROR_NO_DEVICE = 100


def _vllm_dir() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("vLLM is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def driver_symbols() -> list[str]:
    """The CUDA driver API functions (``cu*``, unversioned) that vLLM's extension modules import from
    ``libcuda.so.1``, read from their ELF dynamic symbol tables (``pyelftools``, a vLLM dependency)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    names: set[str] = set()
    for so in sorted(_vllm_dir().rglob("*.so")):
        try:
            with open(so, "rb") as f:
                elf = ELFFile(f)
                dyn = elf.get_section_by_name(".dynamic")
                if not isinstance(dyn, DynamicSection) or not any(
                        t.entry.d_tag == "DT_NEEDED" and t.needed == "libcuda.so.1" for t in dyn.iter_tags()):
                    continue
                syms = elf.get_section_by_name(".dynsym")
                for s in syms.iter_symbols() if syms is not None else ():
                    if s["st_shndx"] == "SHN_UNDEF" and s.name.startswith("cu") and not s.name.startswith("cuda") \
                            and "@" not in s.name and not s.name.startswith(("cublas", "cufft", "curand", "cusparse",
                                                                             "cusolver", "cudnn", "cupti")):
                        names.add(s.name)
        except (OSError, ValueError, TypeError) as e:   # not an ELF we can read: it cannot need libcuda either
            DRIVER.setdefault("unreadable", []).append(f"{so.name}: {type(e).__name__}")
    return sorted(names | {"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet"})


def _build_stub_driver(symbols: list[str]) -> Path:
    """Compile a ``libcuda.so.1`` whose entry points all return ``CUDA_ERROR_NO_DEVICE`` (``cuGetErrorString``
    fills in a message) into a fresh temporary folder; the caller loads it and removes the folder. Raises
    :class:`UserInputError` naming what stopped the build: no C compiler, a ``CC`` that does not compile, a file-size
    limit or a full temporary folder (breaker round 17's B6/B7: tracebacks advising to install gcc)."""
    import shutil
    import subprocess
    import tempfile

    cc = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if cc is None:
        raise _stub_error("no C compiler (cc, gcc or clang) is on PATH", "a C compiler on PATH")
    folder = Path(tempfile.mkdtemp(prefix="sparse_mla_probe_"))
    lines = ["/* stand-in for the NVIDIA driver: sparse_mla.diagnose.probe; no GPU, every call fails */",
             f"#define NO_DEVICE {CUDA_ERROR_NO_DEVICE}"]
    for name in symbols:
        if name == "cuGetErrorString":
            lines.append('int cuGetErrorString(int e, const char **s) { '
                         '*s = "no CUDA driver (sparse_mla diagnosis probe)"; return 0; }')
        elif name == "cuGetErrorName":
            lines.append('int cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_NO_DEVICE"; return 0; }')
        else:
            lines.append(f"int {name}() {{ return NO_DEVICE; }}")
    so = folder / "libcuda.so.1"
    try:
        (folder / "stub.c").write_text("\n".join(lines) + "\n")
        r = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", str(so),
                            str(folder / "stub.c")], capture_output=True, text=True)
        out = " ".join((r.stderr or r.stdout).split())      # one line: the compiler's own words
    except OSError as e:
        r, out = None, f"{type(e).__name__}: {e.strerror or e}"
    if r is None or r.returncode != 0 or not so.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        raise _stub_failure(cc, r, out)
    return so


def _stub_error(why: str, accepted: str):
    from ..errors import UserInputError

    return UserInputError(f"the GPU-less probe needs a stand-in libcuda.so.1 and could not build one in the temporary "
                          f"folder: {why}; accepted: {accepted}, or a machine with the NVIDIA driver")


def _stub_failure(cc: str, r, out: str):
    """The :func:`_stub_error` of a compiler run that failed (``r`` None: it could not be started or written)."""
    who = f"CC={cc!r}" if cc == os.environ.get("CC") else f"{cc!r}"
    said = f": {out[:300]}" if out else ""
    if "File size limit exceeded" in out or "signal 25" in out or "File too large" in out:
        return _stub_error(f"{who} was stopped by a file-size limit (ulimit -f){said}",
                           "no file-size limit, or one of a few MB")
    if "cannot create temporary file" in out.lower() and os.environ.get("TMPDIR"):
        # the compiler writes its own temporary files in $TMPDIR (Python's tempfile fell back from it; round 20, U2)
        return _stub_error(f"{who} could not write its temporary files in TMPDIR={os.environ.get('TMPDIR')!r}{said}",
                           "a TMPDIR that is a writable folder, or TMPDIR unset")
    if "No space left on device" in out or "Disk quota exceeded" in out:
        return _stub_error(f"the temporary folder is full{said}", "a temporary folder with room ($TMPDIR)")
    if r is not None and r.returncode == 0:
        return _stub_error(f"{who} exited 0 without writing libcuda.so.1", "CC unset, or a C compiler (gcc, clang)")
    return _stub_error(f"{who} failed{said}", "CC unset, or a C compiler that builds a shared library (gcc, clang)")


def load_vllm_extensions() -> dict[str, Any]:
    """Make vLLM's CUDA extension modules (:data:`CUDA_EXTENSION_MODULES`) importable on this machine, for real.

    Each of them needs ``libcuda.so.1`` at load time. Where the NVIDIA driver library is present it is used as is
    (also without a GPU). Otherwise a stand-in ``libcuda.so.1`` is compiled (every entry point returns
    ``CUDA_ERROR_NO_DEVICE``; the functions are those the extensions import, :func:`driver_symbols`), loaded with
    ``RTLD_GLOBAL`` under the driver's soname, and its temporary folder removed again: the dynamic loader then
    resolves the extensions' ``libcuda.so.1`` to it, vLLM's real ops register (``torch.ops._C.*``, FlashMLA, FA3), and
    anything that would touch a device gets an error, as on a machine whose GPU is gone. Once per process.

    Returns (and keeps in :data:`DRIVER`) ``{"driver": "nvidia" | "stand-in", "symbols": n, "loaded": [...],
    "failed": {module: error}}``. Raises :class:`UserInputError` when no driver is present and no stand-in can be
    built (no C compiler, a ``CC`` that does not compile, a file-size limit, a full temporary folder).
    """
    import ctypes
    import shutil

    import torch  # noqa: F401,I001  (the extensions need libtorch loaded first)

    if "driver" not in DRIVER:
        try:
            ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
            DRIVER["driver"] = "nvidia"
        except OSError:
            symbols = driver_symbols()
            so = _build_stub_driver(symbols)
            try:
                ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
            finally:
                shutil.rmtree(so.parent, ignore_errors=True)
            DRIVER.update(driver="stand-in", symbols=len(symbols))
        DRIVER["loaded"], DRIVER["failed"] = [], {}
    for name in CUDA_EXTENSION_MODULES:
        if name in DRIVER["loaded"] or name in DRIVER["failed"]:
            continue
        err = _load_extension(name)
        if err is None:
            DRIVER["loaded"].append(name)
        else:
            DRIVER["failed"][name] = err
    # an earlier failed ``import vllm.vllm_flash_attn`` leaves flash_attn_interface cached with FA2/FA3 marked
    # unavailable; drop it so that it is imported again against the loaded extensions
    if "vllm.vllm_flash_attn" not in sys.modules:
        iface = sys.modules.get("vllm.vllm_flash_attn.flash_attn_interface")
        if iface is not None and not (getattr(iface, "FA2_AVAILABLE", True) or getattr(iface, "FA3_AVAILABLE", True)):
            del sys.modules["vllm.vllm_flash_attn.flash_attn_interface"]
    for mod_name, name in _CUDA_ONLY_NAMES:     # imported earlier under another platform: import again in the probe
        mod = sys.modules.get(mod_name)
        if mod is not None and not hasattr(mod, name):
            del sys.modules[mod_name]
    return dict(DRIVER)



def _load_extension(name: str) -> str | None:
    """Load a vLLM extension module the way ``import`` would, without running its parent package's ``__init__``
    (``vllm.vllm_flash_attn`` raises at import when neither FA ``.so`` loads, which would hide the cause).
    Returns None when it loaded or is absent from the wheel, else the loader's error."""
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


#: vLLM modules that bind a CUDA-only name at import only where ``current_platform.is_cuda()``, with that name.
#: Imported before the probe under another platform (this machine's: vLLM's attention layers, which the plugin imports,
#: import ``fa_utils``), they lack it, and a backend that imports the name from them fails to import in the probe
#: (vLLM 0.33's ``flashattn_mla.py`` imports ``flash_attn_varlen_func`` from ``fa_utils``: FLASH_ATTN_MLA got an
#: ImportError as its reason and a dense model at 9.0 FLASHMLA). :func:`load_vllm_extensions` drops such a module, so
#: the backends import it again under the probe platform.
_CUDA_ONLY_NAMES: tuple[tuple[str, str], ...] = (
    ("vllm.v1.attention.backends.fa_utils", "flash_attn_varlen_func"),
)

#: Module-level "extension loaded" flags vLLM computes at import; a module imported before the probe (without the
#: stubs, or under the CPU-less UnspecifiedPlatform) holds False although the extension is now importable.
_EXTENSION_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("vllm.v1.attention.ops.flashmla", "_flashmla_C_AVAILABLE", "vllm._flashmla_C"),
    ("vllm.v1.attention.ops.flashmla", "_flashmla_extension_C_AVAILABLE", "vllm._flashmla_extension_C"),
    ("vllm.vllm_flash_attn.flash_attn_interface", "FA2_AVAILABLE", "vllm.vllm_flash_attn._vllm_fa2_C"),
    ("vllm.vllm_flash_attn.flash_attn_interface", "FA3_AVAILABLE", "vllm.vllm_flash_attn._vllm_fa3_C"),
)


@contextlib.contextmanager
def extension_flags(refreshed: list[str]) -> Iterable[None]:
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


def probe_platform_cls():
    """Create (once) :class:`ProbeCudaPlatform`, a ``CudaPlatformBase`` whose capability is set per probe."""
    global _PROBE_CLS, PROBE
    if _PROBE_CLS is None:
        from vllm.platforms.cuda import CudaPlatformBase
        from vllm.platforms.interface import DeviceCapability

        class ProbeCudaPlatform(CudaPlatformBase):
            """CUDA platform of a GPU that is not there: capability from :func:`diagnose`, no NVML, no driver."""

            probe_capability = DeviceCapability(12, 0)
            probe_device_count = 1

            @classmethod
            def get_device_capability(cls, device_id: int = 0):
                return cls.probe_capability

            @classmethod
            def device_count(cls) -> int:
                return cls.probe_device_count

            @classmethod
            def get_device_name(cls, device_id: int = 0) -> str:
                return "probe"

            @classmethod
            def get_device_total_memory(cls, device_id: int = 0) -> int:
                return 96 << 30

            @classmethod
            def is_fully_connected(cls, device_ids) -> bool:
                return True

        _PROBE_CLS = ProbeCudaPlatform
        PROBE = ProbeCudaPlatform()
    return _PROBE_CLS


def platform_dependent_caches() -> tuple[tuple[str, str], ...]:
    """:data:`_PLATFORM_DEPENDENT_CACHES` plus the installed vLLM line's own (its adapter's
    ``PLATFORM_DEPENDENT_CACHES``, :mod:`sparse_mla.diagnose.lines`)."""
    from .lines import adapter

    return _PLATFORM_DEPENDENT_CACHES + adapter().PLATFORM_DEPENDENT_CACHES


def _clear_platform_caches() -> None:
    for mod_name, attr in platform_dependent_caches():
        fn = getattr(sys.modules.get(mod_name), attr, None)
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()
    _forget_platform_entry_packages()


def _forget_platform_entry_packages() -> None:
    """Drop vLLM's model packages (``vllm.models.<name>``, vLLM 0.33+; not their submodules) from ``sys.modules`` and
    its registry's class cache, so that the next import runs their ``__init__`` under the platform current then:
    ``vllm/models/deepseek_v32/__init__.py`` binds GLM-5's class by ``current_platform`` at import time (the CUDA DSA
    model, else DeepSeek-V2's generic one, which ignores ``indexer_types``); imported once without a CUDA platform it
    kept the generic class for every later diagnosis in the process (CI, 2026-12-06, tests/diagnose/test_config.py
    after a test that resolved the class with no platform)."""
    for name in [n for n in sys.modules if n.startswith("vllm.models.") and n.count(".") == 2]:
        sys.modules.pop(name, None)
    fn = getattr(sys.modules.get("vllm.model_executor.models.registry"), "_try_load_model_cls", None)
    if hasattr(fn, "cache_clear"):
        fn.cache_clear()


@contextlib.contextmanager
def use_platform(platform) -> Iterable[None]:
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
def cuda_alloc_on_meta() -> Iterable[None]:
    """While importing a backend module that allocates CUDA memory at module level: ``torch.empty(device="cuda")``
    gives a ``meta`` tensor and ``num_compute_units`` returns 0."""
    import torch
    import torch.utils._device as torch_device
    import vllm.utils.platform_utils as pu

    # torch's device context (``with torch.device("meta")``) recognises its factory functions by identity, from a set
    # built once on first use (``_device_constructors``, cached): built while ``torch.empty`` is the wrapper below, it
    # would hold the wrapper, and every later real ``torch.empty`` would allocate on the host -- 24 GiB for GLM-5's
    # experts at capability 0.0, where nothing had built the set before. Build it from the real functions first.
    torch_device._device_constructors()
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


class BlockImports:
    """``sys.meta_path`` finder: importing one of ``modules`` raises ImportError (vLLM's selector catches only
    ImportError; a backend whose import crashes otherwise would abort the whole selection)."""

    def __init__(self, modules: Mapping[str, str]):
        self.modules = dict(modules)

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.modules:
            raise ImportError(f"{fullname}: {self.modules[fullname]}")
        return None


def fmt_exc(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}".rstrip(": ")


def import_backend(member, probing: bool):
    """Return ``(class, error)`` for an ``AttentionBackendEnum`` member; retries a non-ImportError import crash
    under :func:`cuda_alloc_on_meta` when probing (remembered in ``SHIMMED`` for the records)."""
    try:
        return member.get_class(), None
    except ImportError as e:
        return None, e
    except Exception as e:  # noqa: BLE001 - e.g. RuntimeError "Found no NVIDIA driver" at module level
        if not probing:
            return None, e
        first = e
    try:
        with cuda_alloc_on_meta():
            cls = member.get_class()
    except Exception:  # noqa: BLE001
        return None, first
    SHIMMED[member.name] = (f"module-level CUDA allocation moved to the meta device while importing "
                          f"{member.get_path(include_classname=False)} (without it: {fmt_exc(first)})")
    return cls, None


def display_name(member, cls) -> str:
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


@contextlib.contextmanager
def collect_logs(names: tuple[str, ...]) -> Iterable[list[str]]:
    """INFO+ messages of the named loggers, collected and not printed (nor passed on to their parents); each
    logger's level and propagation are put back after."""
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    saved = []
    for n in names:
        lg = logging.getLogger(n)
        h = _Collect(level=logging.INFO)
        saved.append((lg, h, lg.level, lg.propagate))
        lg.addHandler(h)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        yield messages
    finally:
        for lg, h, level, prop in saved:
            lg.removeHandler(h)
            lg.setLevel(level)
            lg.propagate = prop


@contextlib.contextmanager
def capture_selector_log() -> Iterable[list[str]]:
    """Collect the messages ``vllm.platforms.cuda`` logs at INFO+ (the "Using X attention backend ..." line) without
    printing them; clears vLLM's ``info_once`` de-duplication so repeated probes log again."""
    from vllm import logger as vlog

    info_once = getattr(vlog, "_print_info_once", None)
    if hasattr(info_once, "cache_clear"):
        info_once.cache_clear()
    with collect_logs(("vllm.platforms.cuda",)) as messages:
        yield messages


@contextlib.contextmanager
def quiet_logs() -> Iterable[None]:
    """vLLM and torch log at INFO/WARNING (and packages warn) while backend modules import; keep that off the
    caller's output. The installed line's adapter names its loggers that log, even at ERROR, what the diagnosis
    reports itself or what is no news to its user (``QUIET_LOGGERS``, :mod:`sparse_mla.diagnose.lines`): silenced
    too."""
    from .lines import adapter

    importlib.import_module("vllm.logger")   # configures the "vllm" logger first, so the level set below sticks

    levels = {"vllm": logging.ERROR, "torch.utils.cpp_extension": logging.ERROR,
              **{n: logging.CRITICAL for n in adapter().QUIET_LOGGERS}}
    loggers = [logging.getLogger(n) for n in levels]
    old = [lg.level for lg in loggers]
    for settle in (adapter().settle_logging, lambda: None):   # where the line re-configures "vllm" later (0.33):
        for lg in loggers:                                    # now, quietly, then the levels again
            lg.setLevel(levels[lg.name])
        settle()
    try:
        with warnings.catch_warnings():     # import-time Deprecation/Tqdm warnings of third-party packages
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lvl in zip(loggers, old):
            lg.setLevel(lvl)


#: vLLM modules whose globals a plugin may rebind (the selector, the sparse MLA cache-dtype rule, the DSA indexer's
#: DeepGEMM calls, the indexer's query quantization); the probe puts every one of their globals back after each call.
PATCHABLE_MODULES: tuple[str, ...] = (
    "vllm.platforms.cuda",
    "vllm.v1.attention.selector",
    "vllm.model_executor.layers.attention.mla_attention",
    "vllm.model_executor.layers.sparse_attn_indexer",
    "vllm.v1.attention.backends.mla.indexer",
    "vllm.model_executor.models.deepseek_v2",
)


def patchable_modules() -> tuple[str, ...]:
    """:data:`PATCHABLE_MODULES` plus the installed vLLM line's own (its adapter's ``PATCHABLE_MODULES``: on 0.33 the
    ``deepseek_v32`` model tree the CUDA DSA path runs through, :mod:`sparse_mla.diagnose.lines`)."""
    from .lines import adapter

    return PATCHABLE_MODULES + adapter().PATCHABLE_MODULES
#: Attribute that the workbook's own patches carry (with ``__wrapped__`` = vLLM's original).


def _marked(value) -> bool:
    """Whether ``value`` is one of the workbook's patches: a plain function carrying :data:`PATCH_MARK` (asked of
    functions only: vLLM 0.33's platform object logs every attribute it lacks)."""
    return isinstance(value, types.FunctionType) and bool(getattr(value, PATCH_MARK, False))


def _unwrap_marked(value):
    while _marked(value) and hasattr(value, "__wrapped__"):
        value = value.__wrapped__
    return value


@contextlib.contextmanager
def stock_selection() -> Iterable[None]:
    """Run the probe against stock vLLM and undo any change made inside it.

    On entry, vLLM's own loading of ``vllm.general_plugins`` is marked done (so ``EngineArgs`` does not register our
    plugin behind the probe's back), backend overrides (``register_backend``) are set aside, selector methods of ``CudaPlatformBase`` that
    carry a ``__wrapped__`` original (a plugin's wrapper) are unwrapped, and globals of :func:`patchable_modules` that
    carry :data:`PATCH_MARK` are set back to vLLM's originals; on exit every global of those modules, the overrides,
    the selector methods and ``sys.meta_path`` are put back exactly as they were (also in those modules first
    imported during the probe, which get vLLM's originals). So ``with_plugin=False`` always diagnoses the installed
    stock vLLM, and ``with_plugin=True`` sees exactly what the plugin's ``register()`` adds to it.
    """
    import vllm.platforms.cuda as cuda_mod
    import vllm.plugins as vllm_plugins
    import vllm.v1.attention.selector as selector_mod
    from vllm.v1.attention.backends import registry

    base = cuda_mod.CudaPlatformBase
    # vLLM's EngineArgs loads the installed vllm.general_plugins (ours among them) once per process; inside the probe
    # it must not: the probe calls the step 4 plugin's register() itself, and only when asked to
    plugins_loaded = vllm_plugins.plugins_loaded
    vllm_plugins.plugins_loaded = True
    overrides = dict(registry._ATTN_OVERRIDES)
    cls_attrs = {k: base.__dict__[k] for k in ("get_attn_backend_cls", "get_valid_backends")}
    # the plugin's indexer hook, if this process installed it: taken out through its own uninstall (vLLM's functions
    # back) before anything is snapshotted, installed again through its own install after everything is put back
    hook = sys.modules.get("sparse_mla.vllm_plugin.indexer")
    hook_was_on = hook is not None and bool(hook.hooked())
    if hook_was_on:
        hook.uninstall_indexer_hook()
    meta_path = list(sys.meta_path)
    patchable = patchable_modules()
    snapshots = {name: dict(vars(sys.modules[name])) for name in patchable if name in sys.modules}
    registry._ATTN_OVERRIDES.clear()
    for k, v in cls_attrs.items():
        fn = v.__func__ if isinstance(v, classmethod) else v
        unwrapped = fn
        while hasattr(unwrapped, "__wrapped__"):
            unwrapped = unwrapped.__wrapped__
        if unwrapped is not fn:
            setattr(base, k, classmethod(unwrapped))
    for name in snapshots:
        mod = sys.modules[name]
        for attr, value in list(vars(mod).items()):
            if _marked(value):
                setattr(mod, attr, _unwrap_marked(value))
    try:
        yield
    finally:
        vllm_plugins.plugins_loaded = plugins_loaded
        hook = sys.modules.get("sparse_mla.vllm_plugin.indexer")
        if hook is not None:            # what the probe's register() installed does not outlive the probe
            hook.uninstall_indexer_hook()
        registry._ATTN_OVERRIDES.clear()
        registry._ATTN_OVERRIDES.update(overrides)
        for k, v in cls_attrs.items():
            setattr(base, k, v)
        sys.meta_path[:] = meta_path
        for name in patchable:
            mod = sys.modules.get(name)
            if mod is None:
                continue
            d = vars(mod)
            if name in snapshots:
                for attr in [a for a in d if a not in snapshots[name]]:
                    del d[attr]
                d.update(snapshots[name])
            else:
                for attr, value in list(d.items()):
                    if _marked(value):
                        d[attr] = _unwrap_marked(value)
        selector_mod._cached_get_attn_backend.cache_clear()
        if hook_was_on:
            hook.install_indexer_hook()
