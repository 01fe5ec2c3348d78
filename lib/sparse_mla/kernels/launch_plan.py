"""The launch plan of the sparse MLA attention kernel: which tile, how many KV splits, warps and stages, from shapes
only (CUDA-graph safe) and the GPU's own numbers (SM count, shared memory, registers per tile compiled for it).

:func:`choose_config` is what every call uses; :func:`planned_launches` shows the plan for a GPU this machine does
not have (tiles compiled ahead of time, :mod:`sparse_mla.kernels.aot`); :func:`smaller_configs` is the fallback
order when a tile does not fit after all (:func:`sparse_mla.kernels.launcher.launch`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
import triton

from ..capability import as_capability
from ..errors import UserInputError
from ..layouts import CACHE_LAYOUTS, check_kv_cache_dtype
from ..machine import interpreting
from . import aot
from .fp8 import has_fp8_conversion
from .occupancy import DEVICE_LIMITS, DeviceLimits, plan_launch, planning_limits, programs_per_sm

#: The float dtypes the kernel computes in (q, the bf16-layout cache, the dots).
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: Launch overrides :func:`sparse_mla.kernels.api.sparse_mla_attention` passes on to :func:`choose_config`.
CONFIG_KEYS = ("block_h", "block_n", "block_dv", "num_splits", "num_warps", "num_stages", "dot_dtype", "fp8_scales")
#: How an fp8_ds_mla kernel applies the per-128 scales (:mod:`sparse_mla.kernels.attention`): "fold" (into the dots,
#: the default) or "registers" (dequantize the tile, then the bf16 kernel's dots).
FP8_SCALES = ("fold", "registers")


def check_cache_layout(kv_cache_dtype) -> str:
    """``kv_cache_dtype`` if it is a layout the kernels read (:data:`sparse_mla.layouts.CACHE_LAYOUTS`), else one
    UserInputError line."""
    return check_kv_cache_dtype(kv_cache_dtype, CACHE_LAYOUTS, "kv_cache_dtype",
                                "(vLLM's fp8/fp8_e4m3 for a sparse MLA backend is stored as 'fp8_ds_mla')")


@dataclass(frozen=True)
class LaunchConfig:
    """How one call is launched: head tile, index tile, number of KV splits, warps and pipeline stages."""

    block_h: int
    block_n: int
    block_dv: int
    num_splits: int
    num_warps: int
    num_stages: int
    dot_dtype: torch.dtype
    kv_cache_dtype: str = "auto"     # "auto" or "fp8_ds_mla"
    fp8_hw: bool = False             # fp8_ds_mla: hardware e4m3 conversion (SM89+) instead of the software path
    fp8_scales: str = "fold"         # fp8_ds_mla: "fold" or "registers" (FP8_SCALES)

    @property
    def split(self) -> bool:
        return self.num_splits > 1


def fp8_hardware_path(device: torch.device, capability=None) -> bool:
    """Whether fp8_ds_mla codes are decoded by the hardware conversion (SM89+) or the exact software path (SM80/86).

    ``capability`` (e.g. vLLM's ``current_platform.get_device_capability()``) overrides the device's own: it can turn
    the hardware path off (a simulated SM80 on an H200 runs the software path), never on beyond what the GPU has. On
    the CPU (Triton's interpreter) the software path is the default; an explicit capability >= 8.9 selects the
    hardware path there (the interpreter executes both)."""
    cap = None if capability is None else as_capability(capability)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        own = has_fp8_conversion((major, minor))
        return own and (cap is None or has_fp8_conversion(cap))
    return cap is not None and has_fp8_conversion(cap)


def operands_from_shared_memory(device: torch.device, capability=None) -> bool:
    """True on GPUs whose large-tile tensor-core dots read both operands from shared memory (Hopper wgmma, SM90;
    datacenter Blackwell tcgen05, SM100): there the fp8 "fold" variant's advantage (codes converted in dot-operand
    registers from one uint8 copy) does not exist, and the 64-head fp8 tile compiles without spills as "registers"
    (AOT sm_90: 189696 bytes, 255 registers, no stack; "fold" spills 328 bytes). ``capability`` (vLLM's) is the GPU
    planned for (:func:`planned_capability`)."""
    cap = planned_capability(device, capability)
    return cap is not None and cap[0] in (9, 10)


def planned_capability(device: torch.device, capability=None) -> tuple[int, int] | None:
    """The GPU a launch is planned for: ``capability`` (vLLM's ``current_platform.get_device_capability()``, which a
    capability simulation sets) where given, else the device's own; None on the CPU without one."""
    if capability is not None:
        return as_capability(capability)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return int(major), int(minor)
    return None


#: Tiles the planner considers, per cache format, in preference order (``block_h, block_n, num_warps``).
PLAN_TILES = {"auto": ((64, 64, 8), (64, 32, 8), (32, 64, 8), (32, 32, 4), (16, 64, 4), (16, 32, 4)),
              "fp8_ds_mla": ((64, 64, 8), (64, 32, 8), (32, 32, 4), (16, 32, 4))}
#: The smallest tile (``block_h, block_n, num_warps, num_stages``), tried last: it fits 99 KB in float32 (the 16 x 32
#: two-stage tile does not).
LAST_RESORT_TILE = (16, 16, 4, 1)
_RESOURCES: dict[tuple, dict | None] = {}


def tile_resources(cfg: LaunchConfig, dtype: torch.dtype, capability: tuple[int, int] | None) -> dict | None:
    """:func:`kernel_resources` of ``cfg``'s split-KV kernel compiled for ``capability`` (memoized; None on the CPU
    or where Triton cannot compile for it)."""
    if capability is None or interpreting():
        return None
    key = (tuple(capability), dtype, replace(cfg, num_splits=2))
    if key not in _RESOURCES:
        try:
            _RESOURCES[key] = aot.kernel_resources(aot.compile_for(key[2], dtype, tuple(capability)))
        except Exception:   # noqa: BLE001  (no compiler for this target: the launch's fallback chain decides)
            _RESOURCES[key] = None
    return _RESOURCES[key]


def choose_config(T: int, H: int, topk: int, dtype: torch.dtype, device: torch.device, *,
                  block_h: int | None = None, block_n: int | None = None, block_dv: int | None = None,
                  num_splits: int | None = None,
                  num_warps: int | None = None, num_stages: int | None = None,
                  dot_dtype: torch.dtype | None = None, kv_cache_dtype: str = "auto",
                  capability=None, fp8_scales: str | None = None,
                  limits: DeviceLimits | None = None) -> LaunchConfig:
    """Pick a launch configuration from shapes only (never from data: CUDA-graph safe).

    :func:`plan_launch` over :data:`PLAN_TILES` with the numbers of the GPU planned for (``capability``, vLLM's, else
    the device's: :func:`planned_capability`) -- its SM count and limits (:func:`~sparse_mla.kernels.occupancy.
    planning_limits`, or ``limits``) and each tile's shared memory and registers compiled for it
    (:func:`tile_resources`); the same code plans for a GPU it never ran on from an ahead-of-time compile
    (:func:`planned_launches`).

    Fewer heads than ``BLOCK_H`` are masked, never padded in memory. Any explicit argument overrides the choice (the
    benchmark sweeps them). Where a tile does not fit after all, :func:`~sparse_mla.kernels.launcher.launch` steps down through
    :func:`smaller_configs`.

    ``kv_cache_dtype="fp8_ds_mla"``: the fp8 tiles (``BLOCK_N = 32`` below 64 heads: no register spills on any target,
    ``results/h200/KERNEL_NOTES.md``); "registers" for 64-head tiles where dots read both operands from shared memory
    (SM90/SM100, :func:`operands_from_shared_memory`), else "fold"; e4m3 decoded in hardware per
    :func:`fp8_hardware_path` (``device`` and ``capability``).

    Memoized (vLLM calls it in every layer's ``forward_mqa``, outside CUDA graphs for prefill).
    """
    args = (T, H, topk, dtype, device, block_h, block_n, block_dv, num_splits, num_warps, num_stages, dot_dtype,
            kv_cache_dtype, capability, fp8_scales, limits)
    try:
        return _choose_cached(*args)
    except TypeError:   # an unhashable argument (e.g. a list as capability): plan without the memo
        return _choose_uncached(*args)


@functools.lru_cache(maxsize=4096)
def _choose_cached(*args) -> LaunchConfig:
    return _choose_uncached(*args)


def _choose_uncached(T, H, topk, dtype, device, block_h, block_n, block_dv, num_splits, num_warps, num_stages,
                     dot_dtype, kv_cache_dtype, capability, fp8_scales, limits) -> LaunchConfig:
    _check_shape_args(T, H, topk, dtype, device, limits)
    kv_cache_dtype = check_cache_layout(kv_cache_dtype)
    fp8 = kv_cache_dtype == "fp8_ds_mla"
    fp8_hw = fp8 and fp8_hardware_path(device, capability)
    if fp8_scales is not None and fp8_scales not in FP8_SCALES:
        raise UserInputError(f"fp8_scales {fp8_scales!r} is not accepted; accepted: {', '.join(map(repr, FP8_SCALES))}")
    for name, v, lo, hi in (("block_h", block_h, 16, 128), ("block_n", block_n, 16, 256),
                            ("block_dv", block_dv, 16, 512), ("num_warps", num_warps, 1, 32)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi or v & (v - 1)):
            raise UserInputError(f"{name} {v!r} is not accepted; accepted: a power of two from {lo} to {hi}")
    for name, v, lo, hi in (("num_splits", num_splits, 1, 1024), ("num_stages", num_stages, 1, 8)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi):
            raise UserInputError(f"{name} {v!r} is not accepted; accepted: an integer from {lo} to {hi}")
    if dot_dtype is not None and dot_dtype not in FLOAT_DTYPES:
        raise UserInputError(f"dot_dtype {dot_dtype!r} is not accepted; accepted: torch.bfloat16, torch.float16 or "
                             f"torch.float32")
    if fp8 and fp8_scales != "registers" and block_dv is not None and block_dv < 128:
        raise UserInputError(f"block_dv {block_dv} is not accepted with an fp8_ds_mla cache; accepted: 128, 256 or 512 "
                             f"(whole 128-value scale tiles; fp8_scales='registers' takes any)")
    if dot_dtype is None:
        dot_dtype = torch.float32 if (interpreting() or dtype == torch.float32) else dtype
    wgmma = operands_from_shared_memory(device, capability)

    def make(bh, bn, nw, S):
        scales = fp8_scales or ("registers" if fp8 and bh >= 64 and wgmma else "fold")
        S = max(1, min(S, triton.cdiv(topk, bn)))
        return LaunchConfig(bh, bn, block_dv or 512, S, nw, num_stages or 2, dot_dtype, kv_cache_dtype, fp8_hw, scales)

    cap = planned_capability(device, capability)
    lim = limits or planning_limits(device, cap)
    tiles = []
    for bh, bn, nw in PLAN_TILES[kv_cache_dtype]:
        if bh > max(16, triton.next_power_of_2(H)):
            continue
        bh, bn, nw = block_h or bh, block_n or bn, num_warps or nw
        if (bh, bn, nw) not in [t[:3] for t in tiles]:
            res = tile_resources(make(bh, bn, nw, 2), dtype, cap)
            tiles.append((bh, bn, nw, res))
    bh, bn, nw, S, _ = plan_launch(T, H, topk, tiles, lim, num_splits)
    return make(bh, bn, nw, S)


def planned_launches(capability: tuple[int, int], dtype: torch.dtype = torch.bfloat16, kv_cache_dtype: str = "auto",
                     shapes=((1, 8), (4, 8), (32, 8), (128, 8), (1024, 8), (1, 64), (4, 64), (32, 64), (128, 64),
                             (1024, 64), (4, 128), (32, 128), (128, 128)), topk: int = 2048,
                     limits: DeviceLimits | None = None) -> list[dict]:
    """What :func:`choose_config` picks on a GPU of ``capability`` it never ran on: tiles compiled ahead of time for
    that target (no GPU needed; unset ``TRITON_INTERPRET``), limits from :data:`DEVICE_LIMITS` (or ``limits``). One
    dict per ``(T, H)``: the tile, split count, programs per SM and the utilization the plan expects."""
    lim = limits or DEVICE_LIMITS[tuple(capability)]
    rows = []
    for T, H in shapes:
        cfg = choose_config(T, H, topk, dtype, torch.device("cpu"), kv_cache_dtype=kv_cache_dtype,
                            capability=capability, limits=lim, dot_dtype=dtype)
        res = tile_resources(cfg, dtype, capability)
        occ = programs_per_sm(res, cfg.num_warps, lim)
        P = T * triton.cdiv(H, cfg.block_h) * cfg.num_splits
        rows.append(dict(capability=f"{capability[0]}.{capability[1]}", sm_count=lim.sm_count, T=T, H=H,
                         tile=f"{cfg.block_h}x{cfg.block_n} w{cfg.num_warps}", fp8_scales=cfg.fp8_scales if
                         kv_cache_dtype == "fp8_ds_mla" else "", num_splits=cfg.num_splits, programs=P,
                         programs_per_sm=occ, shared=res and res["shared"], regs=res and res["regs"],
                         utilization=round(P / (triton.cdiv(P, lim.sm_count * occ) * lim.sm_count * occ), 3)))
    return rows


def _check_shape_args(T, H, topk, dtype, device, limits) -> None:
    """One UserInputError line for a launch question that has no answer: ``T``, ``H``, ``topk`` not positive
    integers, a dtype the kernel does not compute in, ``device`` not a ``torch.device`` (a CUDA one only with a
    GPU), ``limits`` not :class:`DeviceLimits`."""
    for name, v in (("T", T), ("H", H), ("topk", topk)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UserInputError(f"{name} {v!r} is not accepted; accepted: a positive integer")
    if dtype not in FLOAT_DTYPES:
        raise UserInputError(f"dtype {dtype!r} is not accepted; accepted: torch.bfloat16, torch.float16 or torch.float32")
    if not isinstance(device, torch.device):
        raise UserInputError(f"device {device!r} is not accepted; accepted: a torch.device (e.g. q_nope.device)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserInputError(f"device {str(device)!r} is not accepted here: torch sees no CUDA GPU; accepted: "
                             f"torch.device('cpu') under TRITON_INTERPRET=1, with capability= for a GPU's plan")
    if limits is not None and not isinstance(limits, DeviceLimits):
        raise UserInputError(f"limits {limits!r} is not accepted; accepted: a DeviceLimits (kernels.DEVICE_LIMITS)")


def smaller_configs(cfg: LaunchConfig):
    """Configurations to try, in order, when ``cfg``'s tiles do not fit the GPU's shared memory (a tile whose
    resources the planner could not read, or an explicit one): the planner's own tiles (:data:`PLAN_TILES` of the
    cache layout, in its preference order) with no more heads per program than ``cfg`` and a smaller tile area, then
    :data:`LAST_RESORT_TILE`; same split, dot dtype, stages and ``block_dv``. On SM120 (99 KB) the 64-head bf16 tile
    steps down to 32 x 32 (78 KB compiled for sm_120)."""
    area = cfg.block_h * cfg.block_n
    for bh, bn, nw in PLAN_TILES[cfg.kv_cache_dtype]:
        if bh <= cfg.block_h and bh * bn < area:
            yield replace(cfg, block_h=bh, block_n=bn, num_warps=nw)
    bh, bn, nw, ns = LAST_RESORT_TILE
    if bh * bn < area:
        yield replace(cfg, block_h=bh, block_n=bn, num_warps=nw, num_stages=ns)


_AOT_SCRIPT = r"""
import json, sys, torch
from sparse_mla.kernels.launch_plan import planned_launches
caps, dtype, kv, shapes = json.loads(sys.argv[1])
kw = {"shapes": [tuple(s) for s in shapes]} if shapes else {}
rows = [r for cap in caps for r in planned_launches(tuple(cap), getattr(torch, dtype), kv, **kw)]
print(json.dumps(rows))
"""


def planned_launches_aot(capabilities, dtype: str = "bfloat16", kv_cache_dtype: str = "auto",
                         shapes=None) -> list[dict]:
    """:func:`planned_launches` for each of ``capabilities`` (e.g. ``[(8, 0), (12, 0)]``), run in a subprocess with
    ``TRITON_INTERPRET=0`` and no GPU visible: Triton's interpreter replaces the compiler that the ahead-of-time
    compiles need, so a process under ``TRITON_INTERPRET=1`` (a CPU notebook) asks one without it. ``dtype``: a torch
    dtype name; ``shapes``: ``(T, H)`` pairs (default :func:`planned_launches`'). Raises RuntimeError with the subprocess's last output lines if it fails."""
    import json
    import os
    import subprocess
    import sys

    if isinstance(capabilities, (str, bytes)) or not hasattr(capabilities, "__iter__"):
        raise UserInputError(f"capabilities {capabilities!r} is not accepted; accepted: a list such as [(8, 0), (12, 0)]")
    caps = [list(as_capability(c)) for c in capabilities]
    unknown = [f"{a}.{b}" for a, b in caps if (a, b) not in DEVICE_LIMITS]
    if unknown or not caps:
        raise UserInputError(f"capabilities {unknown or caps!r} are not accepted; accepted: one or more of "
                             f"{', '.join(f'{a}.{b}' for a, b in DEVICE_LIMITS)} (the GPUs kernels.DEVICE_LIMITS knows)")
    if shapes is not None and (isinstance(shapes, (str, bytes)) or not all(
            isinstance(s, (tuple, list)) and len(s) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                 and v >= 1 for v in s) for s in shapes)):
        raise UserInputError(f"shapes {shapes!r} is not accepted; accepted: (T, H) pairs of positive integers")
    kv_cache_dtype = check_cache_layout(kv_cache_dtype)
    if dtype not in ("bfloat16", "float16", "float32"):
        raise UserInputError(f"dtype {dtype!r} is not accepted; accepted: 'bfloat16', 'float16', 'float32'")
    arg = json.dumps([caps, dtype, kv_cache_dtype, [list(s) for s in shapes] if shapes else None])
    env = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", _AOT_SCRIPT, arg], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"planned_launches in a subprocess failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
