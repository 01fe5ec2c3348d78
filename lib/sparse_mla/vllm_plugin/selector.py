"""The selector fallback: vLLM's CUDA selector (``CudaPlatformBase.get_attn_backend_cls``) only tries the backends
on each GPU's priority list; :func:`install_selector_fallback` wraps ``CudaPlatformBase.get_valid_backends`` (it calls
the original and adds to its result) so that ``TRITON_MLA_SPARSE`` is offered for a sparse MLA request where the stock
list has no valid backend (or ahead of it with ``SPARSE_MLA_PREFER_TRITON=1``), after passing its own
``validate_configuration``."""
from __future__ import annotations

import logging

from .switches import DISABLE_ENV, PREFER_ENV, switch

#: Where vLLM finds the backend class (``register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)``).
BACKEND_PATH = "sparse_mla.vllm_plugin.backend.TritonMLASparseBackend"
_MARK = "_sparse_mla_fallback"

logger = logging.getLogger(__name__)


def flag(name: str) -> bool:
    """Whether the switch ``name`` (:data:`PREFER_ENV`, :data:`DISABLE_ENV`) is on, as
    :func:`sparse_mla.vllm_plugin.switches.switch` reads it (a value it does not accept: off, with a warning)."""
    return switch(name) is True


def custom_slot_holder() -> str | None:
    """The class path in vLLM's ``CUSTOM`` backend slot, or ``None`` while it is empty."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return AttentionBackendEnum.CUSTOM.get_path() if AttentionBackendEnum.CUSTOM.is_overridden() else None


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
    get_valid_backends.__doc__ = (original.__doc__ or "") + "\n\n(wrapped by sparse_mla.vllm_plugin: TRITON_MLA_SPARSE fallback)"
    base.get_valid_backends = classmethod(get_valid_backends)
    return True


def offer_triton_mla_sparse(valid, invalid, device_capability, attn_selector_config, num_heads=None):
    """Add ``TRITON_MLA_SPARSE`` (enum slot ``CUSTOM``) to a ``get_valid_backends`` result when the request is
    sparse MLA and either no stock backend is valid or :data:`PREFER_ENV` is set. Its priority is the length of the
    stock list (after everything) or ``-1`` (before everything) when preferred; a rejection is reported with its
    reasons like any stock backend's."""
    if not (attn_selector_config.use_mla and attn_selector_config.use_sparse) or flag(DISABLE_ENV):
        return valid, invalid
    prefer = flag(PREFER_ENV)
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
