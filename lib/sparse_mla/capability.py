"""The CUDA compute capability: one type, one parser, and the two places it is read from.

A capability is ``(major, minor)`` with ``major`` 0-99 and ``minor`` 0-9 -- the range vLLM's ``DeviceCapability``
accepts (it asserts ``0 <= minor < 10``) and the ``"major.minor"`` text users type (``"12.0"``, ``"8.9"``).
"""
from __future__ import annotations

import re
from typing import Any

from .errors import UserInputError

#: ``(major, minor)``, e.g. ``(12, 0)`` for an RTX PRO 6000, ``(9, 0)`` for an H200.
Capability = tuple[int, int]

ACCEPTED = "(major, minor) integers with major 0-99 and minor 0-9, e.g. (8, 0)"
_TEXT = re.compile(r"^(\d{1,2})\.(\d)$")


def as_capability(value: Any, *, text: bool = False) -> Capability:
    """``value`` as a :data:`Capability`: a 2-sequence of ints (a tuple, a list, vLLM's ``DeviceCapability``, torch's
    ``get_device_capability()``), or with ``text`` also ``"major.minor"``. Raises :class:`UserInputError` naming the
    value and what is accepted for anything else (bools, floats, ``(9,)``, ``"12"``, ``(12, 10)``)."""
    if text and isinstance(value, str):
        m = _TEXT.match(value.strip())
        if m:
            return int(m.group(1)), int(m.group(2))
    elif not isinstance(value, (str, bytes)):
        try:
            cap = tuple(value)
        except TypeError:
            cap = ()
        if (len(cap) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in cap)
                and 0 <= cap[0] <= 99 and 0 <= cap[1] <= 9):
            return int(cap[0]), int(cap[1])
    raise UserInputError(f"capability {value!r} is not accepted; accepted: {ACCEPTED}"
                         + (" or 'major.minor' text such as '12.0'" if text else ""))


def vllm_capability() -> Capability | None:
    """What vLLM's ``current_platform.get_device_capability()`` returns in this process, where vLLM runs on CUDA;
    None on another platform (the CPU's ``UnspecifiedPlatform``) or where it has none."""
    try:
        from vllm.platforms import current_platform

        cap = current_platform.get_device_capability() if current_platform.is_cuda() else None
    except Exception:  # noqa: BLE001 - no CUDA platform here: callers then ask the tensors' device
        return None
    return None if cap is None else (int(cap[0]), int(cap[1]))


def device_capability(device) -> Capability | None:
    """torch's capability of a CUDA ``device``; None for a CPU tensor's device (Triton's interpreter)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return int(major), int(minor)
