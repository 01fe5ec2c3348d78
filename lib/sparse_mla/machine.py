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


def host_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (``sysconf``: pages x page size), or None where the system does not
    say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


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
    check_working_folder()


def check_working_folder() -> None:
    """Refuse a working folder that no longer exists, or whose path, with its final NUL, is longer than the system's
    ``PATH_MAX`` (4096 bytes on Linux): the kernel's ``getcwd`` fails there, and torch's import dies in Intel oneMKL
    with "Cannot load libtorch_cpu.so" and no Python error (issue 47: breaker round 16's e11, a folder 4096 bytes
    deep; round 17's U1/B9, a folder deleted under the shell)."""
    from .errors import UserInputError

    try:
        cwd = os.fsencode(os.getcwd())
    except FileNotFoundError:       # deleted (or moved) under the shell: torch's oneMKL dies there the same way
        raise UserInputError("the working folder no longer exists (deleted or moved while this shell was in it): "
                             "torch cannot load its libraries from there; accepted: an existing working folder (cd "
                             "to one)") from None
    except OSError:                 # not readable (permissions): torch loads there, the commands' paths are judged
        return
    try:
        limit = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):   # no such limit: nothing to judge here
        return
    if len(cwd) + 1 > limit:
        raise UserInputError(f"the working folder's path is {len(cwd)} bytes, past the system's PATH_MAX of {limit} "
                             f"with its final NUL: torch cannot load its libraries from there; accepted: a working "
                             f"folder whose path is at most {limit - 1} bytes (cd to one; absolute paths in the "
                             f"arguments may stay long)")


#: The cache folders vLLM, FlashInfer and Triton create and write (at import, model inspection, kernel builds): per
#: library, the variables that name its cache, the first one set winning, each with the part of the path the library
#: adds below it; the last is ``HOME`` (``~``). As vLLM's ``envs.VLLM_CACHE_ROOT``, FlashInfer's
#: ``jit.env.FLASHINFER_CACHE_DIR`` and Triton's ``knobs.cache.dir`` derive them (tests/test_machine.py asks them).
CACHE_FOLDERS = (("vLLM", (("VLLM_CACHE_ROOT", ""), ("XDG_CACHE_HOME", "vllm"), ("HOME", ".cache/vllm"))),
                 ("FlashInfer", (("FLASHINFER_WORKSPACE_BASE", ".cache/flashinfer"), ("HOME", ".cache/flashinfer"))),
                 ("Triton", (("TRITON_CACHE_DIR", ""), ("TRITON_HOME", ".triton/cache"), ("HOME", ".triton/cache"))))
#: Caches whose default is outside the home folder, checked where their variable names one: torch's inductor
#: (``torch._inductor.runtime.cache_dir_utils.cache_dir``: the variable, else the temp folder), which vLLM's logger
#: import creates (issue 47, round 8: ``TORCHINDUCTOR_CACHE_DIR=/proc/x`` was a traceback).
NAMED_CACHE_FOLDERS = (("torch's inductor", "TORCHINDUCTOR_CACHE_DIR"),)


def cache_folders() -> dict[str, str]:
    """``{library: its cache folder}`` for :data:`CACHE_FOLDERS`, as each library derives it from this environment
    (absolute paths)."""
    out = {}
    for owner, chain in CACHE_FOLDERS:
        var, sub = next((v, s) for v, s in chain if v == "HOME" or os.environ.get(v))
        base = os.path.expanduser("~") if var == "HOME" else os.path.expanduser(os.environ[var])
        out[owner] = os.path.abspath(os.path.join(base, sub))
    return out


def _cache_folder_problem(folder: str) -> str | None:
    """Why ``folder`` cannot be made and written, as the rest of a "cannot hold ..." line (`` (X is not a folder)``,
    ``: it leads into /proc, ...``), or None: its nearest existing part no folder (``/dev/null/x``), in the system's
    own folders (:func:`~sparse_mla.errors.system_folder_of`: it passes for a folder but holds nothing), or not
    writable by this user."""
    from .errors import system_folder_of

    here = os.path.abspath(folder)
    while not os.path.lexists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    if not os.path.isdir(here):
        return f" ({here} is not a folder)"
    system = system_folder_of(folder)
    if system is not None:
        return f": it leads into {system}, the folder of the system's devices, processes or kernel objects"
    if not os.access(here, os.W_OK | os.X_OK):
        return f" ({here} is not writable by this user)"
    return None


def _check_cache_folders() -> None:
    """The cache folders of :data:`CACHE_FOLDERS`: each variable set names a folder that can be made and written
    (:func:`_cache_folder_problem`), and so does the home folder where a cache falls back to it, an absolute path
    (a relative ``HOME`` is read against each process's own folder: issue 47, round 8). Otherwise vLLM logs
    an error with a traceback on every run, and FlashInfer stops at import (``HOME=/proc/self``: its ``makedirs``).
    Raises :class:`~sparse_mla.errors.UserInputError` naming the variable, its value, the folder and what to set."""
    from .errors import UserInputError

    for owner, var in NAMED_CACHE_FOLDERS:
        if os.environ.get(var):
            _check_named(owner, var, "")
    under_home = []
    for owner, chain in CACHE_FOLDERS:
        named = [(var, sub) for var, sub in chain[:-1] if os.environ.get(var)]
        for var, sub in named:
            _check_named(owner, var, sub)
        if not named:
            under_home.append((owner, chain[-1][1], chain[0][0]))
    home = os.path.expanduser("~")
    if under_home and not os.path.isabs(home):
        folders = ", ".join(os.path.join(home, sub) for _, sub, _ in under_home)
        raise UserInputError(f"HOME={os.environ['HOME']!r} is a relative path: the caches of "
                             f"{_and([o for o, _, _ in under_home])} below it ({folders}) would move with the folder "
                             f"each process starts in; accepted: HOME an absolute path (a folder this user may write, "
                             f"on a disk), or {_and([v for _, _, v in under_home])} set to one")
    bad = [(owner, os.path.join(home, sub), var) for owner, sub, var in under_home
           if _cache_folder_problem(os.path.join(home, sub)) is not None]
    if bad:
        shown = f"HOME={os.environ['HOME']!r}" if os.environ.get("HOME") else f"the home folder {home!r} (HOME unset)"
        raise UserInputError(f"{shown} cannot hold the caches of {_and([o for o, _, _ in bad])} below it "
                             f"({', '.join(f for _, f, _ in bad)}){_cache_folder_problem(bad[0][1])}; accepted: HOME "
                             f"a folder this user may write, on a disk, or {_and([v for _, _, v in bad])} set to one")


def _check_named(owner: str, var: str, sub: str) -> None:
    """The folder ``$var/sub`` can hold ``owner``'s cache, ``$var`` an absolute path (a relative one is read against
    each process's own folder: ``XDG_CACHE_HOME=relcache`` made ./relcache/vllm, issue 47, round 9); else one
    UserInputError naming the variable and value."""
    from .errors import UserInputError

    raw = os.environ[var]
    if not os.path.isabs(os.path.expanduser(raw)):
        raise UserInputError(f"{var}={raw!r} is a relative path: {owner}'s cache below it "
                             f"({os.path.join(raw, sub) if sub else raw}) would move with the folder each process "
                             f"starts in; accepted: an absolute path (a folder this user may write, on a disk; ~ "
                             f"expanded), or {var} unset")
    why = _cache_folder_problem(os.path.abspath(os.path.join(os.path.expanduser(raw), sub)))
    if why is not None:
        short = owner.split()[-1].lower()
        ok = ("a folder path" if "not a folder" in why else "a folder this user may write" if "writable" in
              why else f"a folder on a disk (e.g. ~/.cache/{short} or /tmp/{short}-cache)")
        raise UserInputError(f"{var}={raw!r} cannot hold {owner}'s cache{why}; accepted: {ok}, or {var} unset")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _check_vllm_logging_config() -> None:
    """vLLM's other logging variables as vLLM 0.26's ``envs.py`` / ``logger.py`` read them at import:
    ``VLLM_CONFIGURE_LOGGING`` through ``int()``, ``VLLM_LOGGING_CONFIG_PATH`` a JSON file holding an object that
    ``logging.config.dictConfig`` takes (where logging is configured; applied here as vLLM applies it)."""
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
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise UserInputError(f"VLLM_LOGGING_CONFIG_PATH={path!r} cannot be read as vLLM's logging configuration "
                             f"({type(e).__name__}: {e}); accepted: a JSON file holding a logging dictConfig "
                             f"object, or VLLM_LOGGING_CONFIG_PATH unset") from None
    if not isinstance(config, dict):
        raise UserInputError(f"VLLM_LOGGING_CONFIG_PATH={path!r} holds no JSON object; accepted: a JSON file holding "
                             f"a logging dictConfig object, or VLLM_LOGGING_CONFIG_PATH unset")
    import logging.config

    try:        # what vLLM's logger does with it at import (breaker round 18's e02/e06/e13: a traceback there)
        logging.config.dictConfig(config)
    except Exception as e:  # noqa: BLE001 - every refusal of Python's dictConfig, in its words
        why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        raise UserInputError(f"VLLM_LOGGING_CONFIG_PATH={path!r}: Python's logging.config.dictConfig, which vLLM "
                             f"applies it with, refuses it ({why}); accepted: a logging dictConfig object (\"version\": 1, "
                             f"handlers and levels logging knows), or VLLM_LOGGING_CONFIG_PATH unset") from None


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
