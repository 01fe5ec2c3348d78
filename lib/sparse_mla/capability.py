"""The CUDA compute capability: one type, one parser, and the two places it is read from.

A capability is ``(major, minor)`` with ``major`` 0-99 and ``minor`` 0-9 -- the range vLLM's ``DeviceCapability``
accepts (it asserts ``0 <= minor < 10``) and the ``"major.minor"`` text users type (``"12.0"``, ``"8.9"``).
"""
from __future__ import annotations

import numbers
import re
from typing import Any

from .errors import UserInputError

#: ``(major, minor)``, e.g. ``(12, 0)`` for an RTX PRO 6000, ``(9, 0)`` for an H200.
Capability = tuple[int, int]

ACCEPTED = "(major, minor) integers with major 0-99 and minor 0-9, e.g. (8, 0)"

#: The compute capabilities NVIDIA GPUs have: LLVM's NVPTX target list (``llvm/lib/Target/NVPTX/NVPTX.td``, sm_20
#: .. sm_121 as of llvm-project PR 156857, which added sm_88 and sm_110). A diagnosis asks vLLM about a GPU, so its
#: target is one of these; the kernels' own parser above keeps vLLM's wider range.
CUDA_CAPABILITIES: tuple[Capability, ...] = (
    (2, 0), (2, 1), (3, 0), (3, 2), (3, 5), (3, 7), (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2),
    (7, 5), (8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0), (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1))


def check_gpu_capability(cap: Capability) -> Capability:
    """``cap`` where a GPU has it (:data:`CUDA_CAPABILITIES`); raises :class:`UserInputError` naming it otherwise."""
    if tuple(cap) not in CUDA_CAPABILITIES:
        raise UserInputError(f"capability {cap[0]}.{cap[1]} is no NVIDIA GPU's; accepted: one of "
                             + ", ".join(f"{a}.{b}" for a, b in CUDA_CAPABILITIES))
    return cap
_TEXT = re.compile(r"^([0-9]{1,2})\.([0-9])$")


def as_capability(value: Any, *, text: bool = False) -> Capability:
    """``value`` as a :data:`Capability`: a tuple or list of two integers (vLLM's ``DeviceCapability``, torch's
    ``get_device_capability()`` and ``torch.Size`` are tuples; numpy integers count), or with ``text`` also
    ``"major.minor"`` in ASCII digits. Raises :class:`UserInputError` naming the value and what is accepted for
    anything else (bools, floats, ``(9,)``, ``"12"``, ``(12, 10)``, sets, dicts, iterators)."""
    if text and isinstance(value, str):
        m = _TEXT.match(value.strip())
        if m:
            return int(m.group(1)), int(m.group(2))
    elif isinstance(value, (tuple, list)) and len(value) == 2 \
            and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value) \
            and 0 <= int(value[0]) <= 99 and 0 <= int(value[1]) <= 9:
        return int(value[0]), int(value[1])
    raise UserInputError(f"capability {_shown(value)} is not accepted; accepted: {ACCEPTED}"
                         + (" or 'major.minor' text such as '12.0'" if text else ""))


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` on one line, cut at ``limit`` characters."""
    try:
        r = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named by its type
        r = f"<{type(value).__name__}>"
    r = r.replace("\n", "\\n")
    return r if len(r) <= limit else r[:limit - 3] + "..."


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
