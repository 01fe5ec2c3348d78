"""Python entry point of the Triton sparse MLA kernel: checks inputs, picks the launch shape, launches.

Contract (what vLLM's sparse ``forward_mqa`` receives; ``vllm/model_executor/layers/attention/mla_attention.py``,
``sparse_mla_attention.py``): see :func:`sparse_mla_attention`.
"""
from __future__ import annotations

import functools
import math
import numbers
import os
from dataclasses import dataclass, replace

import torch
import triton

from ..capability import as_capability
from ..errors import UserInputError
from ..layouts import CACHE_LAYOUTS, FP8_DS_MLA_ROW_BYTES, LOG2E
from .attention import _merge_splits_kernel, _sparse_mla_fp8_fwd_kernel, _sparse_mla_fwd_kernel
from .fp8 import has_fp8_conversion
from .occupancy import DEVICE_LIMITS, DeviceLimits, device_limits, plan_launch, programs_per_sm

_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: Launch overrides :func:`sparse_mla_attention` passes on to :func:`choose_config`.
CONFIG_KEYS = ("block_h", "block_n", "block_dv", "num_splits", "num_warps", "num_stages", "dot_dtype", "fp8_scales",
               "launch")
#: How an fp8_ds_mla kernel applies the per-128 scales (:mod:`sparse_mla.kernels.attention`): "fold" (into the dots,
#: the default) or "registers" (dequantize the tile, then the bf16 kernel's dots).
FP8_SCALES = ("fold", "registers")
#: Largest accepted softmax scale: far above any model's ``qk_head_dim ** -0.5`` (<= 1); fp32 scores stay finite.
MAX_SM_SCALE = 1e4
_TORCH_TO_TL = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def interpreting() -> bool:
    """True when Triton runs through its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


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


def check_kv_cache_dtype(kv_cache_dtype) -> str:
    """``kv_cache_dtype`` if it is one of :data:`sparse_mla.layouts.CACHE_LAYOUTS`, else one UserInputError line."""
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in CACHE_LAYOUTS:
        raise UserInputError(f"kv_cache_dtype {kv_cache_dtype!r} is not accepted; accepted: "
                             f"{', '.join(repr(k) for k in CACHE_LAYOUTS)} (vLLM's fp8/fp8_e4m3 for a sparse MLA "
                             f"backend is stored as 'fp8_ds_mla')")
    return kv_cache_dtype


def _capability(capability) -> tuple[int, int] | None:
    return None if capability is None else as_capability(capability)


def fp8_hardware_path(device: torch.device, capability=None) -> bool:
    """Whether fp8_ds_mla codes are decoded by the hardware conversion (SM89+) or the exact software path (SM80/86).

    ``capability`` (e.g. vLLM's ``current_platform.get_device_capability()``) overrides the device's own: it can turn
    the hardware path off (a simulated SM80 on an H200 runs the software path), never on beyond what the GPU has. On
    the CPU (Triton's interpreter) the software path is the default; an explicit capability >= 8.9 selects the
    hardware path there (the interpreter executes both)."""
    cap = _capability(capability)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        own = has_fp8_conversion((major, minor))
        return own and (cap is None or has_fp8_conversion(cap))
    return cap is not None and has_fp8_conversion(cap)


def _operands_from_shared_memory(device: torch.device, capability=None) -> bool:
    """True on GPUs whose large-tile tensor-core dots read both operands from shared memory (Hopper wgmma, SM90;
    datacenter Blackwell tcgen05, SM100): there the fp8 "fold" variant's advantage (codes converted in dot-operand
    registers from one uint8 copy) does not exist, and the 64-head fp8 tile compiles without spills as "registers"
    (AOT sm_90: 189696 bytes, 255 registers, no stack; "fold" spills 328 bytes)."""
    cap = _capability(capability)
    if device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
    return cap is not None and cap[0] in (9, 10)


#: Tiles the planner considers, per cache format, in preference order (``block_h, block_n, num_warps``).
PLAN_TILES = {"auto": ((64, 64, 8), (64, 32, 8), (32, 64, 8), (32, 32, 4), (16, 64, 4), (16, 32, 4)),
              "fp8_ds_mla": ((64, 64, 8), (64, 32, 8), (32, 32, 4), (16, 32, 4))}
_RESOURCES: dict[tuple, dict | None] = {}


def tile_resources(cfg: LaunchConfig, dtype: torch.dtype, capability: tuple[int, int] | None) -> dict | None:
    """:func:`kernel_resources` of ``cfg``'s split-KV kernel compiled for ``capability`` (memoized; None on the CPU
    or where Triton cannot compile for it)."""
    if capability is None or interpreting():
        return None
    key = (tuple(capability), dtype, replace(cfg, num_splits=2))
    if key not in _RESOURCES:
        try:
            _RESOURCES[key] = kernel_resources(compile_for(key[2], dtype, tuple(capability)))
        except Exception:   # noqa: BLE001  (no compiler for this target: the launch's fallback chain decides)
            _RESOURCES[key] = None
    return _RESOURCES[key]


def _v3_choice(T, H, topk, fp8, sm, block_h, block_n, num_warps, num_splits):
    """The launch before :func:`plan_launch` (constants tuned on the H200; kept for side-by-side benchmarks)."""
    programs = T * triton.cdiv(H, 16)
    if num_splits is None:
        if programs >= 2 * sm:
            num_splits = 1
        elif programs < 64:
            num_splits = min(32, max(8, 256 // programs))
        else:
            num_splits = triton.cdiv(2 * sm, programs)
        num_splits = min(num_splits, max(1, topk // 64))
    if num_splits > 1 or H <= 16:
        bh, bn, nw = block_h or 16, block_n or (32 if fp8 else 64), num_warps or 4
    elif H <= 32:
        bh, bn, nw = (block_h or 32, block_n or 32, num_warps or 4) if fp8 else \
            (block_h or 32, block_n or 64, num_warps or 8)
    else:
        bh, bn, nw = block_h or 64, block_n or 64, num_warps or 8
    return bh, bn, nw, num_splits


def choose_config(T: int, H: int, topk: int, dtype: torch.dtype, device: torch.device, *,
                  block_h: int | None = None, block_n: int | None = None, block_dv: int | None = None,
                  num_splits: int | None = None,
                  num_warps: int | None = None, num_stages: int | None = None,
                  dot_dtype: torch.dtype | None = None, kv_cache_dtype: str = "auto",
                  capability=None, fp8_scales: str | None = None, launch: str = "plan",
                  limits: DeviceLimits | None = None) -> LaunchConfig:
    """Pick a launch configuration from shapes only (never from data: CUDA-graph safe).

    ``launch="plan"`` (default): :func:`plan_launch` over :data:`PLAN_TILES` with this GPU's numbers -- its SM count
    and limits (:func:`device_limits`, or ``limits``) and each tile's shared memory and registers compiled for it
    (:func:`tile_resources`); the same code plans for a GPU it never ran on from an ahead-of-time compile
    (:func:`planned_launches`). ``launch="v3"``: the constants tuned on the H200 before (split-KV with 16-head tiles
    when ``T * cdiv(H, 16) < 2 * SMs``, ``clamp(256 // programs, 8, 32)`` or ``cdiv(2 * SMs, programs)`` splits;
    direct 16 / 32 / 64-head tiles by head count), kept for ``sparse-mla bench kernel --compare-launch``.

    Fewer heads than ``BLOCK_H`` are masked, never padded in memory. Any explicit argument overrides the choice (the
    benchmark sweeps them). Where a tile does not fit after all, :func:`launch` steps down through
    :func:`smaller_configs`.

    ``kv_cache_dtype="fp8_ds_mla"``: the fp8 tiles (``BLOCK_N = 32`` below 64 heads: no register spills on any target,
    ``results/h200/KERNEL_NOTES.md``); "registers" for 64-head tiles where dots read both operands from shared memory
    (SM90/SM100, :func:`_operands_from_shared_memory`), else "fold"; e4m3 decoded in hardware per
    :func:`fp8_hardware_path` (``device`` and ``capability``).

    Memoized (vLLM calls it in every layer's ``forward_mqa``, outside CUDA graphs for prefill).
    """
    args = (T, H, topk, dtype, device, block_h, block_n, block_dv, num_splits, num_warps, num_stages, dot_dtype,
            kv_cache_dtype, capability, fp8_scales, launch, limits)
    try:
        return _choose_cached(*args)
    except TypeError:   # an unhashable argument (e.g. a list as capability): plan without the memo
        return _choose_uncached(*args)


@functools.lru_cache(maxsize=4096)
def _choose_cached(*args) -> LaunchConfig:
    return _choose_uncached(*args)


def _choose_uncached(T, H, topk, dtype, device, block_h, block_n, block_dv, num_splits, num_warps, num_stages,
                     dot_dtype, kv_cache_dtype, capability, fp8_scales, launch, limits) -> LaunchConfig:
    check_kv_cache_dtype(kv_cache_dtype)
    fp8 = kv_cache_dtype == "fp8_ds_mla"
    fp8_hw = fp8 and fp8_hardware_path(device, capability)
    if fp8_scales is not None and fp8_scales not in FP8_SCALES:
        raise UserInputError(f"fp8_scales {fp8_scales!r} is not accepted; accepted: {', '.join(map(repr, FP8_SCALES))}")
    if launch not in ("plan", "v3"):
        raise UserInputError(f"launch {launch!r} is not accepted; accepted: 'plan' (from the GPU's numbers) or 'v3'")
    for name, v, lo, hi in (("block_h", block_h, 16, 128), ("block_n", block_n, 16, 256),
                            ("block_dv", block_dv, 16, 512), ("num_warps", num_warps, 1, 32)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi or v & (v - 1)):
            raise UserInputError(f"{name} {v!r} is not accepted; accepted: a power of two from {lo} to {hi}")
    for name, v, lo, hi in (("num_splits", num_splits, 1, 1024), ("num_stages", num_stages, 1, 8)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi):
            raise UserInputError(f"{name} {v!r} is not accepted; accepted: an integer from {lo} to {hi}")
    if dot_dtype is not None and dot_dtype not in _FLOAT_DTYPES:
        raise UserInputError(f"dot_dtype {dot_dtype!r} is not accepted; accepted: torch.bfloat16, torch.float16 or "
                             f"torch.float32")
    if fp8 and fp8_scales != "registers" and block_dv is not None and block_dv < 128:
        raise UserInputError(f"block_dv {block_dv} is not accepted with an fp8_ds_mla cache; accepted: 128, 256 or 512 "
                             f"(whole 128-value scale tiles; fp8_scales='registers' takes any)")
    if dot_dtype is None:
        dot_dtype = torch.float32 if (interpreting() or dtype == torch.float32) else dtype
    wgmma = _operands_from_shared_memory(device, capability)

    def make(bh, bn, nw, S):
        scales = fp8_scales or ("registers" if fp8 and bh >= 64 and wgmma else "fold")
        S = max(1, min(S, triton.cdiv(topk, bn)))
        return LaunchConfig(bh, bn, block_dv or 512, S, nw, num_stages or 2, dot_dtype, kv_cache_dtype, fp8_hw, scales)

    if launch == "v3":
        lim = limits or device_limits(device)
        return make(*_v3_choice(T, H, topk, fp8, lim.sm_count, block_h, block_n, num_warps, num_splits))
    lim = limits or device_limits(device)
    cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else _capability(capability)
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
                            capability=capability, limits=lim, dot_dtype=dtype, launch="plan")
        res = tile_resources(cfg, dtype, capability)
        occ = programs_per_sm(res, cfg.num_warps, lim)
        P = T * triton.cdiv(H, cfg.block_h) * cfg.num_splits
        rows.append(dict(capability=f"{capability[0]}.{capability[1]}", sm_count=lim.sm_count, T=T, H=H,
                         tile=f"{cfg.block_h}x{cfg.block_n} w{cfg.num_warps}", fp8_scales=cfg.fp8_scales if
                         kv_cache_dtype == "fp8_ds_mla" else "", num_splits=cfg.num_splits, programs=P,
                         programs_per_sm=occ, shared=res and res["shared"], regs=res and res["regs"],
                         utilization=round(P / (triton.cdiv(P, lim.sm_count * occ) * lim.sm_count * occ), 3)))
    return rows


def _check_inputs(q_nope, q_pe, kv_cache, indices, sm_scale, kv_cache_dtype="auto"):
    fp8 = check_kv_cache_dtype(kv_cache_dtype) == "fp8_ds_mla"
    for name, x in (("q_nope", q_nope), ("q_pe", q_pe), ("kv_cache", kv_cache), ("indices", indices)):
        if not isinstance(x, torch.Tensor):
            raise UserInputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.layout != torch.strided:
            raise UserInputError(f"{name} has layout {x.layout}; accepted: dense (torch.strided) tensors")
    if q_nope.dim() != 3 or q_pe.dim() != 3:
        raise UserInputError(f"q_nope and q_pe must be [T, H, D]; got shapes {tuple(q_nope.shape)} and "
                             f"{tuple(q_pe.shape)}")
    if q_nope.shape[:2] != q_pe.shape[:2]:
        raise UserInputError(f"q_nope {tuple(q_nope.shape)} and q_pe {tuple(q_pe.shape)} disagree on [T, H]")
    T, H, DL = q_nope.shape
    DR = q_pe.shape[2]
    if fp8:
        if q_nope.dtype not in _FLOAT_DTYPES or q_pe.dtype != q_nope.dtype or kv_cache.dtype != torch.uint8:
            raise UserInputError(
                f"dtypes q_nope={q_nope.dtype}, q_pe={q_pe.dtype}, kv_cache={kv_cache.dtype} are not accepted with "
                f"kv_cache_dtype='fp8_ds_mla'; accepted: q_nope and q_pe of one dtype (bfloat16, float16 or float32) "
                f"and a torch.uint8 cache")
    elif q_nope.dtype not in _FLOAT_DTYPES or q_pe.dtype != q_nope.dtype or kv_cache.dtype != q_nope.dtype:
        raise UserInputError(
            f"dtypes q_nope={q_nope.dtype}, q_pe={q_pe.dtype}, kv_cache={kv_cache.dtype} are not accepted; accepted: "
            f"q_nope, q_pe and the cache of one dtype, bfloat16, float16 or float32 (a uint8 fp8_ds_mla cache needs "
            f"kv_cache_dtype='fp8_ds_mla')")
    for name, d in (("q_nope", DL), ("q_pe", DR)):
        if d < 16 or d > 1024 or d & (d - 1):
            raise UserInputError(f"{name} last dimension {d} is not accepted; accepted: a power of two from 16 to 1024 "
                                 f"(512 and 64 for DeepSeek-V3.2 / GLM-5)")
    if fp8 and (DL, DR) != (512, 64):
        raise UserInputError(f"q_nope / q_pe last dimensions {DL} / {DR} are not accepted with kv_cache_dtype="
                             f"'fp8_ds_mla'; accepted: 512 / 64 (the layout's kv_lora_rank and qk_rope_head_dim)")
    row = FP8_DS_MLA_ROW_BYTES if fp8 else DL + DR
    if kv_cache.dim() not in (2, 3):
        raise UserInputError(f"kv_cache must be [num_blocks, block_size, {row}] (or [num_slots, {row}]); "
                             f"got shape {tuple(kv_cache.shape)}")
    if fp8 and kv_cache.shape[-1] != row:
        raise UserInputError(f"kv_cache last dimension {kv_cache.shape[-1]} is not accepted with kv_cache_dtype="
                             f"'fp8_ds_mla'; accepted: {row} bytes per token (512 e4m3 + 4 fp32 scales + 64 bf16 rope)")
    if not fp8 and kv_cache.shape[-1] != DL + DR:
        raise UserInputError(f"kv_cache last dimension {kv_cache.shape[-1]} != q_nope {DL} + q_pe {DR} = {DL + DR}; "
                             f"accepted: a latent cache row c_kv ({DL}) || k_pe ({DR})")
    if not kv_cache.is_contiguous():
        raise UserInputError(f"kv_cache with strides {tuple(kv_cache.stride())} is not contiguous; accepted: a "
                             f"contiguous [num_blocks, block_size, {row}] cache (vLLM's layout)")
    if fp8 and kv_cache.storage_offset() % 4:
        raise UserInputError(f"kv_cache starts at byte {kv_cache.storage_offset()} of its storage; accepted: a "
                             f"multiple of 4 (its scales are read as float32)")
    if indices.dim() != 2 or indices.shape[0] != T:
        raise UserInputError(f"indices must be [T={T}, topk]; got shape {tuple(indices.shape)}")
    if indices.dtype not in (torch.int32, torch.int64):
        raise UserInputError(f"indices dtype {indices.dtype} is not accepted; accepted: torch.int32 (or int64) "
                             f"global cache slots, -1 for none")
    if indices.shape[1] < 1:
        raise UserInputError("indices has topk = 0 columns; accepted: topk >= 1")
    devs = {x.device for x in (q_nope, q_pe, kv_cache, indices)}
    if len(devs) != 1:
        raise UserInputError(f"tensors are on different devices {sorted(map(str, devs))}; accepted: one device")
    if q_nope.device.type == "meta":
        raise UserInputError("tensors on the meta device hold no data; accepted: cuda (or cpu under TRITON_INTERPRET=1)")
    try:
        finite = isinstance(sm_scale, numbers.Real) and not isinstance(sm_scale, bool) and math.isfinite(sm_scale)
    except OverflowError:   # an int or Fraction beyond float range
        finite = False
    if not finite or not 0 < sm_scale <= MAX_SM_SCALE:
        raise UserInputError(f"sm_scale {sm_scale!r} is not accepted; accepted: a real number in (0, {MAX_SM_SCALE:g}] "
                             f"(qk_head_dim ** -0.5, 1/16 for GLM-5)")


def _check_outputs(out, lse, T, H, DL, dtype, device):
    for name, x in (("out", out), ("lse", lse)):
        if x is None:
            continue
        if not isinstance(x, torch.Tensor):
            raise UserInputError(f"{name} must be a torch.Tensor or None, got {type(x).__name__}")
        if x.device != device:
            raise UserInputError(f"{name} is on {x.device} and the inputs on {device}; accepted: the inputs' device")
        if x.layout != torch.strided:
            raise UserInputError(f"{name} has layout {x.layout}; accepted: a dense (torch.strided) tensor")
        if any(st == 0 and n > 1 for st, n in zip(x.stride(), x.shape)):
            raise UserInputError(f"{name} with strides {tuple(x.stride())} has rows that share memory (an expanded "
                                 f"view); accepted: a tensor with its own storage per element, e.g. torch.empty")
    if out is not None and (out.shape != (T, H, DL) or out.dtype != dtype or out.stride(2) != 1):
        raise UserInputError(f"out {tuple(out.shape)} {out.dtype} does not fit; accepted: [{T}, {H}, {DL}] "
                             f"{dtype} with a unit last stride")
    if lse is not None and (lse.shape != (T, H) or lse.dtype != torch.float32):
        raise UserInputError(f"lse {tuple(lse.shape)} {lse.dtype} does not fit; accepted: [{T}, {H}] float32")


def sparse_mla_attention(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    *,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    check_indices: bool = True,
    kv_cache_dtype: str = "auto",
    capability=None,
    **config,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA attention of each query token over its own top-k cache slots (Triton).

    Args:
        q_nope: ``[T, H, kv_lora_rank=512]`` query absorbed into the latent space (``ql_nope`` in vLLM), bf16, fp16
            or fp32; any strides with a unit last stride (vLLM passes a strided view).
        q_pe: ``[T, H, qk_rope_head_dim=64]`` rotary query part, same dtype; strided views accepted.
        kv_cache: ``[num_blocks, block_size, 576]`` contiguous paged latent cache (bf16, fp16 or fp32); per token
            ``c_kv (512) || k_pe (64)`` (vLLM's bf16 MLA cache layout; block size any, vLLM uses 64). With
            ``kv_cache_dtype="fp8_ds_mla"``: ``uint8 [num_blocks, block_size, 656]``, per token 512 e4m3 codes, 4
            fp32 scales (one per 128 codes) and 64 bf16 rope values, as vLLM's ``concat_and_cache_mla(...,
            "fp8_ds_mla", ...)`` writes it (``vllm/v1/attention/backends/mla/flashmla_sparse.py``).
        indices: ``[T, topk]`` int32 global cache slots (``slot = block * block_size + offset``); ``-1`` = no token,
            anywhere in a row; repeats count repeatedly.
        sm_scale: the model's softmax scale, ``qk_head_dim ** -0.5`` (GLM-5: 1/16, not ``576 ** -0.5``).
        out: optional preallocated ``[T, H, 512]`` output (q dtype, unit last stride).
        lse: optional preallocated ``[T, H]`` float32 log-sum-exp output.
        check_indices: check that every slot is ``-1`` or inside the cache (one device sync; vLLM's backend passes
            False).
        kv_cache_dtype: ``"auto"`` (the cache has q's dtype) or ``"fp8_ds_mla"``.
        capability: ``(major, minor)`` overriding the device's for the fp8 decode path (hardware from SM89, software
            below; see :func:`fp8_hardware_path`); vLLM's backend passes ``current_platform.get_device_capability()``.
        **config: launch overrides for :func:`choose_config` (``block_h``, ``block_n``, ``num_splits``,
            ``num_warps``, ``num_stages``, ``dot_dtype``).

    Returns:
        ``(out [T, H, 512] in q's dtype, lse [T, H] float32)``; ``lse`` is the natural-log log-sum-exp of the scaled
        scores (FlashMLA's README documents a base-2 ``lse``, ``lse_e = lse_2 * ln 2``; the ``flash_mla_sparse_fwd``
        vendored in vLLM 0.26.0 returned natural log on the H200, see :mod:`sparse_mla.kernels.reference`). A row whose
        indices are all ``-1`` gives ``out = 0`` and ``lse = -inf``.

    Raises:
        sparse_mla.errors.UserInputError: wrong ranks or last dimensions, mismatched ``T``/``H``, non-integer indices,
            ``topk == 0``, a slot past the cache (with ``check_indices``), a non-contiguous cache, mixed dtypes or
            devices (``out`` and ``lse`` included), meta tensors, an ``sm_scale`` outside ``(0, 1e4]``, an unknown or
            out-of-range launch override, an unknown ``kv_cache_dtype`` or a cache that does not fit it, a malformed
            ``capability``.
    """
    _check_inputs(q_nope, q_pe, kv_cache, indices, sm_scale, kv_cache_dtype)
    T, H, DL = q_nope.shape
    DR = q_pe.shape[2]
    _check_outputs(out, lse, T, H, DL, q_nope.dtype, q_nope.device)
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise UserInputError(f"unknown launch override(s) {', '.join(unknown)}; accepted: {', '.join(CONFIG_KEYS)}")
    sm_scale = float(sm_scale)
    num_slots = kv_cache.numel() // (FP8_DS_MLA_ROW_BYTES if kv_cache_dtype == "fp8_ds_mla" else DL + DR)
    if (check_indices or indices.dtype != torch.int32) and indices.numel():
        # on the caller's dtype, before any int32 cast could wrap an int64 value into range
        lo, hi = int(indices.min()), int(indices.max())
        if lo < -1 or hi >= min(num_slots, 2**31 - 1) or (not check_indices and hi >= 2**31):
            bad = lo if lo < -1 else hi
            raise UserInputError(f"indices hold slot {bad}, outside the cache; accepted: -1 or 0 <= slot < "
                                 f"{num_slots} (num_blocks * block_size)")
    if indices.dtype != torch.int32:
        indices = indices.to(torch.int32)
    if indices.stride(1) != 1:
        indices = indices.contiguous()
    if q_nope.stride(2) != 1:
        q_nope = q_nope.contiguous()
    if q_pe.stride(2) != 1:
        q_pe = q_pe.contiguous()
    if out is None:
        out = torch.empty((T, H, DL), dtype=q_nope.dtype, device=q_nope.device)
    if lse is None:
        lse = torch.empty((T, H), dtype=torch.float32, device=q_nope.device)
    if T == 0 or H == 0:
        return out, lse
    cfg = choose_config(T, H, indices.shape[1], q_nope.dtype, q_nope.device, kv_cache_dtype=kv_cache_dtype,
                        capability=capability, **config)
    launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg, fallback=not config)
    return out, lse


#: Shared memory per block (opt-in maximum, bytes) by compute capability, read off :data:`~sparse_mla.kernels.occupancy.
#: DEVICE_LIMITS` (the one table of device limits). At run time the device's own ``shared_memory_per_block_optin``
#: is what counts; this view serves ahead-of-time checks (tests/kernels/test_fit.py, kernels.indexer_build).
SMEM_PER_BLOCK = {cap: lim.smem_per_block for cap, lim in DEVICE_LIMITS.items()}

_FITTED: dict[tuple, LaunchConfig] = {}   # (device, dtypes, dims, heuristic config) -> the config that compiled


# Fallback tiles (BLOCK_H, BLOCK_N, warps, stages), fastest first on the H200 at 64 heads (sweep1, T = 1024: 64x32 1745
# us, 32x32 1968 us, 16x64 2482 us; the default 64x64 1354 us). Compiled for sm_120: 123, 78, 92, 59 and 37 KB.
_FALLBACK_TILES = ((64, 32, 8, 2), (32, 32, 4, 2), (16, 64, 4, 2), (16, 32, 4, 2), (16, 16, 4, 1))


def smaller_configs(cfg: LaunchConfig):
    """Configurations to try, in order, when ``cfg``'s tiles do not fit the GPU's shared memory: the tiles of
    :data:`_FALLBACK_TILES` with no more heads per program than ``cfg`` and a smaller tile area (same split, dot
    dtype and ``block_dv``). On SM120 (99 KB) the 64-head default steps down to 32 x 32 (78 KB)."""
    area = cfg.block_h * cfg.block_n
    for bh, bn, nw, ns in _FALLBACK_TILES:
        if bh <= cfg.block_h and bh * bn < area:
            yield replace(cfg, block_h=bh, block_n=bn, num_warps=nw, num_stages=ns)


def compile_for(cfg: LaunchConfig, dtype: torch.dtype, capability: tuple[int, int], split: bool | None = None,
                DL: int = 512, DR: int = 64):
    """The attention kernel compiled ahead of time for ``capability`` (no GPU needed: ``triton.compile`` with a
    ``GPUTarget``), specialized as Triton's JIT specializes it at GLM-5 serving shapes: every pointer 16-byte aligned,
    the strides, ``H``, ``topk`` and the split chunk multiples of 16, ``lse``'s unit head stride a constant. Without
    these hints the gathers compile to scalar loads and the numbers (shared memory, registers) are not the launch's.
    Returns Triton's ``CompiledKernel`` (``.metadata.shared``, ``.asm["cubin"]``)."""
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if interpreting():
        raise RuntimeError("compile_for compiles for a GPU target; unset TRITON_INTERPRET (=0)")
    fp8 = cfg.kv_cache_dtype == "fp8_ds_mla"
    fold = fp8 and cfg.fp8_scales == "fold"
    K = _sparse_mla_fp8_fwd_kernel if fold else _sparse_mla_fwd_kernel
    tl_dtype = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    ptr = f"*{tl_dtype[dtype]}"
    sig = {"Q_nope": ptr, "Q_pe": ptr, "KV": "*u8" if fp8 else ptr, "KV_f32": "*fp32" if fp8 else ptr,
           "KV_bf16": "*bf16" if fp8 else ptr, "Idx": "*i32", "Out": ptr, "Lse": "*fp32", "O_part": "*fp32",
           "Lse_part": "*fp32", "sm_scale_log2": "fp32"}
    pointers = list(sig)[:-1]
    sig.update({n: "i32" for n in K.arg_names[len(sig):K.arg_names.index("DL")]})
    not_multiple_of_16 = {"sm_scale_log2", "stride_lp_t", "stride_lp_h"}    # S-dependent
    consts = dict(DL=DL, DR=DR, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, BLOCK_DV=min(cfg.block_dv, DL),
                  SPLIT=cfg.split if split is None else split,
                  DOT_DTYPE={torch.bfloat16: tl.bfloat16, torch.float16: tl.float16,
                             torch.float32: tl.float32}[cfg.dot_dtype],
                  IEEE=cfg.dot_dtype == torch.float32, FP8_HW=fp8 and cfg.fp8_hw, stride_l_h=1)
    if not fold:
        consts["KV_FP8"] = fp8
    sig.update({k: "constexpr" for k in consts})
    attrs = {(K.arg_names.index(n),): [["tt.divisibility", 16]] for n in sig
             if n not in consts and n not in not_multiple_of_16}
    assert all((K.arg_names.index(n),) in attrs for n in pointers)
    src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index(k),): v for k, v in consts.items()},
                    attrs=attrs)
    major, minor = capability
    return triton.compile(src, target=GPUTarget("cuda", major * 10 + minor, 32),
                          options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})


def kernel_resources(compiled) -> dict:
    """``{"shared": bytes, "regs": per thread, "stack": spill bytes per thread}`` of a compiled kernel: shared memory
    from Triton's metadata, registers and stack from the cubin (``cuobjdump --dump-resource-usage``, the tool Triton
    ships). Works for ahead-of-time compiles (no GPU); a kernel loaded on a GPU also has ``n_regs``."""
    import re
    import subprocess
    import tempfile

    shared = int(compiled.metadata.shared)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        text = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "--dump-resource-usage", path],
                              capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", text)
    if m is None:
        raise RuntimeError(f"no register count in cuobjdump's output: {text[-300:]!r}")
    return {"shared": shared, "regs": int(m[1]), "stack": int(m[2])}


def shared_memory_bytes(cfg: LaunchConfig, dtype: torch.dtype, capability: tuple[int, int], split: bool | None = None,
                        DL: int = 512, DR: int = 64) -> int:
    """Shared memory (bytes) of the attention kernel compiled ahead of time for ``capability``
    (:func:`compile_for`). Compare with :data:`SMEM_PER_BLOCK`."""
    return int(compile_for(cfg, dtype, capability, split, DL, DR).metadata.shared)


def launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg: LaunchConfig, fallback: bool = True) -> None:
    """Launch the kernel(s) with a :class:`LaunchConfig` on checked inputs (no validation, no host sync).

    With ``fallback`` (the default), a configuration whose tiles do not fit the GPU's shared memory (Triton's
    ``OutOfResources``, raised before anything runs) is replaced by the first of :func:`smaller_configs` that fits,
    and that choice is remembered per device, dtypes and configuration. ``fallback=False`` (configuration sweeps)
    raises instead.
    """
    if not fallback or interpreting():
        return _launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg)
    from triton.runtime.errors import OutOfResources

    key = _fit_key(q_nope, q_pe, kv_cache, cfg)
    first = _FITTED.get(key, cfg)
    err = None
    for c in (first, *smaller_configs(first)):
        try:
            _launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, c)
        except OutOfResources as e:
            err = e
            continue
        _FITTED[key] = c
        return
    raise err


def fitted_config(q_nope, q_pe, kv_cache, cfg: LaunchConfig) -> LaunchConfig:
    """The configuration :func:`launch` actually used for ``cfg`` on these tensors' device and dtypes (``cfg`` itself
    unless it did not fit)."""
    return _FITTED.get(_fit_key(q_nope, q_pe, kv_cache, cfg), cfg)


def _fit_key(q_nope, q_pe, kv_cache, cfg: LaunchConfig) -> tuple:
    return q_nope.device, q_nope.dtype, kv_cache.dtype, q_nope.shape[2], q_pe.shape[2], cfg


def _launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg: LaunchConfig) -> None:
    T, H, DL = q_nope.shape
    DR = q_pe.shape[2]
    topk = indices.shape[1]
    import triton.language as tl

    dot_tl = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}[cfg.dot_dtype]
    ieee = cfg.dot_dtype == torch.float32
    block_dv = min(cfg.block_dv, DL)
    if DL % block_dv:
        raise UserInputError(f"block_dv {cfg.block_dv} does not divide {DL}; accepted: a power of two <= {DL}")
    n_hblocks = triton.cdiv(H, cfg.block_h) * (DL // block_dv)
    S = cfg.num_splits
    chunk = triton.cdiv(triton.cdiv(topk, S), cfg.block_n) * cfg.block_n
    S = triton.cdiv(topk, chunk)
    fp8 = cfg.kv_cache_dtype == "fp8_ds_mla"
    fold = fp8 and cfg.fp8_scales == "fold"
    kernel = _sparse_mla_fp8_fwd_kernel if fold else _sparse_mla_fwd_kernel
    common = dict(DL=DL, DR=DR, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, BLOCK_DV=block_dv, DOT_DTYPE=dot_tl,
                  IEEE=ieee, FP8_HW=fp8 and cfg.fp8_hw, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if not fold:
        common["KV_FP8"] = fp8
    # fp8_ds_mla: the same storage read as uint8 (codes), float32 (scales) and bfloat16 (rope); views, no copies
    kv_f32, kv_bf16 = (kv_cache.view(torch.float32), kv_cache.view(torch.bfloat16)) if fp8 else (kv_cache, kv_cache)
    row = FP8_DS_MLA_ROW_BYTES if fp8 else DL + DR
    if S == 1:
        kernel[(T, n_hblocks, 1)](
            q_nope, q_pe, kv_cache, kv_f32, kv_bf16, indices, out, lse, out, lse,
            sm_scale * LOG2E, H, topk, chunk,
            q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
            row, indices.stride(0),
            out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
            0, 0, 0, 0, 0,
            SPLIT=False, **common)
        return
    o_part = torch.empty((T, H, S, DL), dtype=torch.float32, device=q_nope.device)
    lse_part = torch.empty((T, H, S), dtype=torch.float32, device=q_nope.device)
    kernel[(T, n_hblocks, S)](
        q_nope, q_pe, kv_cache, kv_f32, kv_bf16, indices, out, lse, o_part, lse_part,
        sm_scale * LOG2E, H, topk, chunk,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
        row, indices.stride(0),
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
        SPLIT=True, **common)
    block_d = min(DL, 128)
    _merge_splits_kernel[(T, H, DL // block_d)](
        o_part, lse_part, out, lse, H, S,
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        DL=DL, BLOCK_S=triton.next_power_of_2(S), BLOCK_D=block_d, num_warps=4)
