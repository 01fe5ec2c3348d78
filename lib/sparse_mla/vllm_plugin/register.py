"""vLLM plugin entry point (``vllm.general_plugins``: ``triton_mla_sparse = sparse_mla.vllm_plugin:register``).

vLLM calls :func:`register` once in every process it starts (front end, engine core, each worker: see
``vllm/plugins/__init__.py``), so it is re-entrant. It does two things, neither of which edits vLLM's files:

1. ``register_backend(AttentionBackendEnum.CUSTOM, "sparse_mla.vllm_plugin.backend.TritonMLASparseBackend")`` (vLLM's own
   out-of-tree registry, ``vllm/v1/attention/backends/registry.py``): the backend is then selected explicitly with
   ``--attention-backend CUSTOM`` / ``attention_config={"backend": "CUSTOM"}``, and vLLM still validates it.
2. **Fallback selection.** vLLM's CUDA selector (``CudaPlatformBase.get_attn_backend_cls``) only considers the
   backends on each GPU's priority list. The plugin wraps ``CudaPlatformBase.get_valid_backends`` (it calls the
   original and adds to its result): for a sparse MLA request where the stock list has *no* valid backend
   (SM120 with a bf16 KV cache, SM80/86/89 with any), ``TRITON_MLA_SPARSE`` is offered after the stock list, after
   passing its own ``validate_configuration``. Where vLLM has a valid backend (SM90, SM100, SM120 with fp8), its
   choice is unchanged.

vLLM has a single ``CUSTOM`` slot. If another plugin already holds it, :func:`register` leaves that plugin's backend
in place and logs a warning (ours is then neither selectable as ``CUSTOM`` nor offered by the fallback); if another
plugin takes the slot after ours, the fallback sees that at selection time and offers nothing, so vLLM never picks a
stranger's backend in our name.

Switch: ``SPARSE_MLA_PREFER_TRITON=1`` in the environment offers ``TRITON_MLA_SPARSE`` *ahead* of the stock list
for every sparse MLA request it accepts (to run it on an H100/H200/B200 where vLLM has its own kernels).
``SPARSE_MLA_DISABLE_FALLBACK=1`` turns the fallback off (explicit ``CUSTOM`` still works).

It also installs the Triton DSA indexer in place of DeepGEMM's where vLLM has no DeepGEMM for the GPU (SM80/86/89;
``SPARSE_MLA_TRITON_INDEXER=1`` forces it): :func:`sparse_mla.vllm_plugin.indexer.install_indexer_hook`; and a config
hook that gives vLLM a GLM-5.x checkpoint's ``indexer_types`` as the ``index_topk_pattern`` vLLM 0.26 reads (shared
top-k layers build no indexer, so such checkpoints load): :mod:`sparse_mla.vllm_plugin.indexer_types`. Neither depends
on the ``CUSTOM`` slot.
"""
from __future__ import annotations

import logging
import os

from ..vllm_lines import installed_vllm, line_of, tested_text
from .selector import BACKEND_PATH, custom_slot_holder, install_selector_fallback


logger = logging.getLogger(__name__)

#: The plugin's entry point in vLLM's ``vllm.general_plugins`` group (pyproject.toml), by its object reference.
ENTRY_POINT = "sparse_mla.vllm_plugin:register"

#: The vLLM releases the plugin is built and tested for are its lines (:data:`sparse_mla.vllm_lines.TESTED_LINES`).
#: The workbook's GPU records are 0.26.0's but for one 0.33 session (results/h200/sessions/2026-12-05/GPU_SESSION_2026-12-05.md: torch 2.14
#: carried in pieces); every `.ci/run` tests both lines on the CPU.
_WARNED: set[str] = set()


def vllm_supported(version: str | None = None) -> tuple[bool, str]:
    """``(supported, one line)`` for a vLLM version (default: the installed one): supported on a tested line
    (:func:`sparse_mla.vllm_lines.line_of`)."""
    if version is None:
        version = installed_vllm()
    line = line_of(version)
    text = (f"sparse_mla supports {tested_text()}; this is vLLM {version}" +
            (f" (line {line})" if line else ": TRITON_MLA_SPARSE is not registered and nothing in vLLM is changed"))
    return line is not None, text


def register() -> bool:
    """Register ``TRITON_MLA_SPARSE`` as vLLM's CUSTOM backend and install the selector fallback (idempotent).

    Returns False and changes nothing, with one warning line, when vLLM is on no tested line (another line's backend,
    builder and indexer interfaces differ: a registration there could fail deep inside the engine) or when another
    plugin's backend already holds vLLM's ``CUSTOM`` slot."""
    ok, line = vllm_supported()
    if not ok:
        if line not in _WARNED:     # once per process (vLLM calls register() in every process it starts)
            _WARNED.add(line)
            logger.warning(line)
        return False
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from .indexer import install_indexer_hook
    install_indexer_hook()          # the DSA indexer where vLLM has no DeepGEMM (SM80/86/89); independent of CUSTOM
    from .indexer_types import install_indexer_types_hook
    install_indexer_types_hook()    # GLM-5.x indexer_types -> index_topk_pattern; independent of CUSTOM
    from .gguf_adapter import register_adapter
    register_adapter()              # glm-dsa GGUFs through vllm-gguf-plugin, where that plugin is installed
    holder = custom_slot_holder()
    if holder not in (None, BACKEND_PATH):
        logger.warning("sparse_mla: vLLM's CUSTOM attention backend slot already holds %s (another plugin); "
                       "TRITON_MLA_SPARSE is not registered and its selector fallback is off in this process. "
                       "Uninstall or disable the other plugin (VLLM_PLUGINS) to use TRITON_MLA_SPARSE.", holder)
        return False
    register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
    install_selector_fallback()
    from .backend import install_fp8_ds_mla_canonicalization  # fp8 -> fp8_ds_mla, as vLLM's sparse backends get
    install_fp8_ds_mla_canonicalization()
    return True


def not_loaded_by_vllm() -> str | None:
    """Why vLLM would not call :func:`register` in its processes here, one line, or None where it would: decided by
    vLLM's own loader (``vllm.plugins.load_plugins_by_group``, which reads ``VLLM_PLUGINS`` through ``vllm.envs``),
    shown only this plugin's installed entry points (:data:`ENTRY_POINT`), so that no other plugin is imported.
    Where no such entry point is installed, vLLM finds no plugin to load."""
    import importlib.metadata as md

    import vllm.plugins as vllm_plugins

    group = vllm_plugins.DEFAULT_PLUGINS_GROUP
    ours = [ep for ep in md.entry_points(group=group) if ep.value == ENTRY_POINT]
    if not ours:
        return (f"no {group} entry point {ENTRY_POINT!r} is installed in this Python, so vLLM finds no plugin to load; "
                f"accepted: the package installed (pip install -e . in the checkout)")
    real = md.entry_points
    md.entry_points = lambda **kw: md.EntryPoints(ours) if kw.get("group") == group else real(**kw)
    try:
        loaded = vllm_plugins.load_plugins_by_group(group)
    finally:
        md.entry_points = real
    if any(ep.name in loaded for ep in ours):
        return None
    names = ", ".join(ep.name for ep in ours)
    raw = os.environ.get("VLLM_PLUGINS")
    if raw is None:
        return f"vLLM's plugin loader did not load {names} (its log says why)"
    return (f"VLLM_PLUGINS={raw!r} does not name {names}: vLLM loads only the plugins it names, so it would not call "
            f"sparse_mla.vllm_plugin.register() and TRITON_MLA_SPARSE is not registered; accepted: VLLM_PLUGINS unset, "
            f"or naming {names} (e.g. VLLM_PLUGINS={','.join([*filter(None, raw.split(',')), names])})")
