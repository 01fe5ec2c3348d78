"""vLLM plugin entry point (``vllm.general_plugins``: ``triton_mla_sparse = sparse_mla.plugin:register``).

vLLM calls :func:`register` once in every process it starts (front end, engine core, each worker: see
``vllm/plugins/__init__.py``), so it is re-entrant. It does two things, neither of which edits vLLM's files:

1. ``register_backend(AttentionBackendEnum.CUSTOM, "sparse_mla.backend.TritonMLASparseBackend")`` (vLLM's own
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
"""
from __future__ import annotations

import logging
import os

BACKEND_PATH = "sparse_mla.backend.TritonMLASparseBackend"
PREFER_ENV = "SPARSE_MLA_PREFER_TRITON"
DISABLE_ENV = "SPARSE_MLA_DISABLE_FALLBACK"
_MARK = "_sparse_mla_fallback"

logger = logging.getLogger(__name__)


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() not in ("", "0", "false", "no", "off")


def custom_slot_holder() -> str | None:
    """The class path in vLLM's ``CUSTOM`` backend slot, or ``None`` while it is empty."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return AttentionBackendEnum.CUSTOM.get_path() if AttentionBackendEnum.CUSTOM.is_overridden() else None


def register() -> bool:
    """Register ``TRITON_MLA_SPARSE`` as vLLM's CUSTOM backend and install the selector fallback (idempotent).

    Returns False, with a warning naming the holder, and changes nothing when another plugin's backend already holds
    vLLM's ``CUSTOM`` slot."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    holder = custom_slot_holder()
    if holder not in (None, BACKEND_PATH):
        logger.warning("sparse_mla: vLLM's CUSTOM attention backend slot already holds %s (another plugin); "
                       "TRITON_MLA_SPARSE is not registered and its selector fallback is off in this process. "
                       "Uninstall or disable the other plugin (VLLM_PLUGINS) to use TRITON_MLA_SPARSE.", holder)
        return False
    register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
    install_selector_fallback()
    return True


def install_selector_fallback() -> bool:
    """Wrap ``CudaPlatformBase.get_valid_backends`` once; returns False where vLLM's CUDA platform cannot be
    imported (a machine without the CUDA driver and without the diagnosis probe's stubs)."""
    try:
        from vllm.platforms import cuda as vllm_cuda
    except Exception as e:  # no libcuda.so.1: nothing to select on this machine
        logger.debug("sparse_mla: CUDA platform not importable (%s); selector fallback not installed", e)
        return False
    base = vllm_cuda.CudaPlatformBase
    current = base.__dict__["get_valid_backends"]
    if getattr(current.__func__, _MARK, False):
        return True
    original = current.__func__

    def get_valid_backends(cls, device_capability, attn_selector_config, num_heads=None):
        valid, invalid = original(cls, device_capability, attn_selector_config, num_heads)
        return offer_triton_mla_sparse(valid, invalid, device_capability, attn_selector_config, num_heads)

    setattr(get_valid_backends, _MARK, True)
    get_valid_backends.__wrapped__ = original
    get_valid_backends.__doc__ = (original.__doc__ or "") + "\n\n(wrapped by sparse_mla.plugin: TRITON_MLA_SPARSE fallback)"
    base.get_valid_backends = classmethod(get_valid_backends)
    return True


def offer_triton_mla_sparse(valid, invalid, device_capability, attn_selector_config, num_heads=None):
    """Add ``TRITON_MLA_SPARSE`` (enum slot ``CUSTOM``) to a ``get_valid_backends`` result when the request is
    sparse MLA and either no stock backend is valid or :data:`PREFER_ENV` is set. Its priority is the length of the
    stock list (after everything) or ``-1`` (before everything) when preferred; a rejection is reported with its
    reasons like any stock backend's."""
    if not (attn_selector_config.use_mla and attn_selector_config.use_sparse) or _flag(DISABLE_ENV):
        return valid, invalid
    prefer = _flag(PREFER_ENV)
    if valid and not prefer:
        return valid, invalid
    holder = custom_slot_holder()
    if holder != BACKEND_PATH:   # the slot was taken by another plugin after ours (or never registered)
        logger.warning("sparse_mla: vLLM's CUSTOM attention backend slot holds %s, not TRITON_MLA_SPARSE; the "
                       "fallback offers nothing", holder)
        return valid, invalid
    from vllm.platforms.cuda import _BackendCandidate
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from .backend import TritonMLASparseBackend

    priority = -1 if prefer else len(valid) + len(invalid)
    reasons = TritonMLASparseBackend.validate_configuration(device_capability=device_capability,
                                                            **attn_selector_config._asdict())
    if reasons:
        invalid = {**invalid, AttentionBackendEnum.CUSTOM: (priority, reasons)}
    else:
        valid = [*valid, _BackendCandidate(TritonMLASparseBackend, AttentionBackendEnum.CUSTOM, priority)]
    return valid, invalid
