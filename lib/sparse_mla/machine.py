"""What this machine has (an NVIDIA GPU; Triton's CPU interpreter) and the defaults for one without a GPU, applied
when :mod:`sparse_mla` is imported.

* ``TRITON_INTERPRET=1``: Triton kernels run on CPU tensors through Triton's interpreter (test in fp32/fp16:
  the interpreter computes bf16 wrongly, triton-lang/triton issue 11584).
* ``CUDA_VISIBLE_DEVICES=""``: without it, ``vllm.triton_utils`` replaces Triton by a placeholder when no GPU
  driver is active.
* ``OPENBLAS_NUM_THREADS=1``: the interpreter's many tiny matrix products run 3-4x faster single-threaded.

Both are ``setdefault``: a value the user already set wins. Nothing is changed on a machine with a GPU.
"""
from __future__ import annotations

import os
import shutil


def has_nvidia_gpu() -> bool:
    """Cheap check (no CUDA context): a driver device node or ``nvidia-smi`` is present."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


def cuda_unavailable() -> str | None:
    """Why a process started from this one (a notebook's kernel) would find no CUDA GPU, or None where it would find
    one as far as can be told without initialising CUDA here: no NVIDIA driver (:func:`has_nvidia_gpu`), or a
    ``CUDA_VISIBLE_DEVICES`` that hides every device (empty, or starting with a negative index, as the CUDA runtime
    reads it; :func:`apply_cpu_defaults` sets it empty on a machine without a GPU)."""
    if not has_nvidia_gpu():
        return "has no NVIDIA GPU (no /dev/nvidiactl, /dev/nvidia0 or nvidia-smi)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.split(",")[0].strip().startswith("-")):
        return f"hides its GPUs from CUDA (CUDA_VISIBLE_DEVICES={visible!r})"
    return None


def require_gpu(what: str, instead: str) -> None:
    """The one "needs a GPU" refusal: a :class:`~sparse_mla.errors.UserInputError` line saying that ``what`` needs a
    CUDA GPU and naming what works here instead (``instead``), where :func:`has_nvidia_gpu` finds none. Creates no
    CUDA context (vLLM forks its engine processes after this check)."""
    if not has_nvidia_gpu():
        from .errors import UserInputError

        raise UserInputError(f"{what} needs a CUDA GPU and this machine has none; accepted: {instead}")


def check_environment() -> None:
    """The environment variables a command depends on, checked before it starts (one line naming the variable, its
    value and what works): ``TRITON_INTERPRET`` set off on a machine without an NVIDIA GPU (Triton then has no driver
    to compile for, and fails deep inside the first kernel), and a ``VLLM_LOGGING_LEVEL`` that is no level name of
    Python's ``logging`` (vLLM's logging configuration raises on it at import)."""
    import logging

    from .errors import UserInputError

    raw = os.environ.get("TRITON_INTERPRET")
    if raw is not None and not interpreting() and not has_nvidia_gpu():
        raise UserInputError(f"TRITON_INTERPRET={raw!r} (off, as Triton reads it) on a machine without an NVIDIA GPU: "
                             f"Triton has no GPU driver to compile for; accepted: TRITON_INTERPRET unset (sparse_mla "
                             f"then sets it to 1), or 1 / true / yes / on")
    level = os.environ.get("VLLM_LOGGING_LEVEL")
    if level is not None and not isinstance(logging.getLevelNamesMapping().get(level.upper()), int):
        raise UserInputError(f"VLLM_LOGGING_LEVEL={level!r} is no logging level; accepted: DEBUG, INFO, WARNING, "
                             f"ERROR or CRITICAL (or unset)")
    _check_vllm_logging_config()
    _check_cache_folders()


def _check_cache_folders() -> None:
    """The cache folders vLLM writes at import and model inspection, where the environment names them
    (``VLLM_CACHE_ROOT``, ``XDG_CACHE_HOME`` under which vLLM's default lies): a path whose nearest existing part is
    not a folder (``/dev/null/x``) makes vLLM log an error with a traceback on every run, and one into the system's
    own folders (``/proc/self/...``, ``/sys``, ``/dev``: :func:`~sparse_mla.errors.system_folder_of`) passes for a
    folder but holds no cache. Raises :class:`~sparse_mla.errors.UserInputError` naming the variable, its value and
    what is accepted."""
    from .errors import UserInputError, system_folder_of

    for var in ("VLLM_CACHE_ROOT", "XDG_CACHE_HOME"):
        raw = os.environ.get(var)
        if not raw:
            continue
        here = os.path.abspath(os.path.expanduser(raw))
        while not os.path.lexists(here) and os.path.dirname(here) != here:
            here = os.path.dirname(here)
        if not os.path.isdir(here):
            raise UserInputError(f"{var}={raw!r} cannot hold vLLM's cache ({here} is not a folder); accepted: a "
                                 f"folder path, or {var} unset")
        system = system_folder_of(os.path.abspath(os.path.expanduser(raw)))
        if system is not None:
            raise UserInputError(f"{var}={raw!r} cannot hold vLLM's cache: it leads into {system}, the folder of the "
                                 f"system's devices, processes or kernel objects; accepted: a folder on a disk (e.g. "
                                 f"~/.cache/vllm or /tmp/vllm-cache), or {var} unset")


def _check_vllm_logging_config() -> None:
    """vLLM's other logging variables as vLLM 0.26's ``envs.py`` / ``logger.py`` read them at import:
    ``VLLM_CONFIGURE_LOGGING`` through ``int()``, ``VLLM_LOGGING_CONFIG_PATH`` a JSON file holding an object (where
    logging is configured)."""
    import json

    from .errors import UserInputError

    raw = os.environ.get("VLLM_CONFIGURE_LOGGING")
    try:
        configure = raw is None or bool(int(raw))
    except ValueError:
        raise UserInputError(f"VLLM_CONFIGURE_LOGGING={raw!r} is not an integer (vLLM reads it with int()); "
                             f"accepted: 0 or 1 (or unset)") from None
    path = os.environ.get("VLLM_LOGGING_CONFIG_PATH")
    if not configure or path is None:
        return
    try:
        with open(path, encoding="utf-8") as f:
            ok = isinstance(json.load(f), dict)
    except (OSError, ValueError) as e:
        raise UserInputError(f"VLLM_LOGGING_CONFIG_PATH={path!r} cannot be read as vLLM's logging configuration "
                             f"({type(e).__name__}: {e}); accepted: a JSON file holding a logging dictConfig "
                             f"object, or VLLM_LOGGING_CONFIG_PATH unset") from None
    if not ok:
        raise UserInputError(f"VLLM_LOGGING_CONFIG_PATH={path!r} holds no JSON object; accepted: a JSON file holding "
                             f"a logging dictConfig object, or VLLM_LOGGING_CONFIG_PATH unset")


def interpreting() -> bool:
    """True when Triton runs through its CPU interpreter: ``TRITON_INTERPRET`` as Triton itself reads it
    (``triton.knobs.runtime.interpret``: 1, true, yes, on are on; 0, off, other words are off)."""
    if os.environ.get("TRITON_INTERPRET") is None:
        return False
    import triton

    return bool(triton.knobs.runtime.interpret)


def apply_cpu_defaults() -> bool:
    """Set the CPU-only defaults if no NVIDIA GPU is present; returns True if it did."""
    if has_nvidia_gpu():
        return False
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    # The interpreter runs many tiny numpy matrix products; multi-threaded OpenBLAS makes them 3-4x slower.
    # Effective only if numpy is not imported yet (sparse_mla is imported first by the CLI, tests and notebooks).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    return True
