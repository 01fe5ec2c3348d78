"""Python entry point of the Triton sparse MLA kernel: checks inputs, picks the launch shape, launches.

Contract (what vLLM's sparse ``forward_mqa`` receives; ``vllm/model_executor/layers/attention/mla_attention.py``,
``sparse_mla_attention.py``): see :func:`sparse_mla_attention`.
"""
from __future__ import annotations

import math
import numbers

import torch

from ..errors import UserInputError
from ..layouts import FP8_DS_MLA_ROW_BYTES_BY_DIMS
from .launch_plan import CONFIG_KEYS, FLOAT_DTYPES, check_cache_layout, choose_config
from .launcher import launch

#: Largest accepted softmax scale: far above any model's ``qk_head_dim ** -0.5`` (<= 1); fp32 scores stay finite.
MAX_SM_SCALE = 1e4


def _check_inputs(q_nope, q_pe, kv_cache, indices, sm_scale, kv_cache_dtype="auto"):
    fp8 = check_cache_layout(kv_cache_dtype) == "fp8_ds_mla"
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
        if q_nope.dtype not in FLOAT_DTYPES or q_pe.dtype != q_nope.dtype or kv_cache.dtype != torch.uint8:
            raise UserInputError(
                f"dtypes q_nope={q_nope.dtype}, q_pe={q_pe.dtype}, kv_cache={kv_cache.dtype} are not accepted with "
                f"kv_cache_dtype='fp8_ds_mla'; accepted: q_nope and q_pe of one dtype (bfloat16, float16 or float32) "
                f"and a torch.uint8 cache")
    elif q_nope.dtype not in FLOAT_DTYPES or q_pe.dtype != q_nope.dtype or kv_cache.dtype != q_nope.dtype:
        raise UserInputError(
            f"dtypes q_nope={q_nope.dtype}, q_pe={q_pe.dtype}, kv_cache={kv_cache.dtype} are not accepted; accepted: "
            f"q_nope, q_pe and the cache of one dtype, bfloat16, float16 or float32 (a uint8 fp8_ds_mla cache needs "
            f"kv_cache_dtype='fp8_ds_mla')")
    for name, d in (("q_nope", DL), ("q_pe", DR)):
        if (d < 16 or d > 1024 or d & (d - 1)) and not (name == "q_pe" and d == 0):
            raise UserInputError(f"{name} last dimension {d} is not accepted; accepted: a power of two from 16 to 1024 "
                                 f"(512 and 64 for DeepSeek-V3.2 / GLM-5), or 0 for q_pe of a NoPE head "
                                 f"(GLM-5.3-Flash: 512 and 0)")
    if fp8 and (DL, DR) not in FP8_DS_MLA_ROW_BYTES_BY_DIMS:
        raise UserInputError(f"q_nope / q_pe last dimensions {DL} / {DR} are not accepted with kv_cache_dtype="
                             f"'fp8_ds_mla'; accepted: 512 / 64 (656-byte rows) or 512 / 0 (the NoPE head's 528-byte "
                             f"rows), the layouts' kv_lora_rank and qk_rope_head_dim")
    row = FP8_DS_MLA_ROW_BYTES_BY_DIMS[(DL, DR)] if fp8 else DL + DR
    if kv_cache.dim() not in (2, 3):
        raise UserInputError(f"kv_cache must be [num_blocks, block_size, {row}] (or [num_slots, {row}]); "
                             f"got shape {tuple(kv_cache.shape)}")
    if fp8 and kv_cache.shape[-1] != row:
        parts = "512 e4m3 + 4 fp32 scales" + (" + 64 bf16 rope" if DR else ", the NoPE head's row")
        raise UserInputError(f"kv_cache last dimension {kv_cache.shape[-1]} is not accepted with kv_cache_dtype="
                             f"'fp8_ds_mla' and q_pe width {DR}; accepted: {row} bytes per token ({parts})")
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


def _check_options(kv_cache_dtype: str, check_indices, config: dict) -> None:
    """:func:`sparse_mla_attention`'s options: ``check_indices`` a bool, ``fp8_scales`` only with an fp8_ds_mla cache,
    launch overrides among :data:`CONFIG_KEYS`. Raises :class:`UserInputError`."""
    if not isinstance(check_indices, bool):
        raise UserInputError(f"check_indices {check_indices!r} is not accepted; accepted: True or False")
    if config.get("fp8_scales") is not None and kv_cache_dtype != "fp8_ds_mla":
        raise UserInputError(f"fp8_scales {config['fp8_scales']!r} applies to an fp8_ds_mla cache only; accepted: "
                             f"fp8_scales with kv_cache_dtype='fp8_ds_mla', or no fp8_scales")
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise UserInputError(f"unknown launch override(s) {', '.join(unknown)}; accepted: {', '.join(CONFIG_KEYS)}")


def _slots_int32(indices: torch.Tensor, num_slots: int, check_indices: bool) -> torch.Tensor:
    """``indices`` as the kernel reads them (int32, unit last stride), each slot checked to be ``-1`` or inside the
    cache where ``check_indices`` asks or a cast could wrap (one device sync). Raises :class:`UserInputError`."""
    if (check_indices or indices.dtype != torch.int32) and indices.numel():
        # on the caller's dtype, before any int32 cast could wrap an int64 value into range
        lo, hi = int(indices.min()), int(indices.max())
        if lo < -1 or hi >= min(num_slots, 2**31 - 1) or (not check_indices and hi >= 2**31):
            bad = lo if lo < -1 else hi
            raise UserInputError(f"indices hold slot {bad}, outside the cache; accepted: -1 or 0 <= slot < "
                                 f"{num_slots} (num_blocks * block_size)")
    if indices.dtype != torch.int32:
        indices = indices.to(torch.int32)
    return indices if indices.stride(1) == 1 else indices.contiguous()


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
        q_pe: ``[T, H, qk_rope_head_dim=64]`` rotary query part, same dtype; strided views accepted. ``[T, H, 0]``
            for a NoPE MLA head (GLM-5.3-Flash: ``qk_rope_head_dim`` 0, head 512): a float cache of 512-wide rows, or
            an fp8_ds_mla cache of 528-byte rows.
        kv_cache: ``[num_blocks, block_size, 576]`` contiguous paged latent cache (bf16, fp16 or fp32); per token
            ``c_kv (512) || k_pe (64)`` (vLLM's bf16 MLA cache layout; block size any, vLLM uses 64). With
            ``kv_cache_dtype="fp8_ds_mla"``: ``uint8 [num_blocks, block_size, 656]``, per token 512 e4m3 codes, 4
            fp32 scales (one per 128 codes) and 64 bf16 rope values, as vLLM's ``concat_and_cache_mla(...,
            "fp8_ds_mla", ...)`` writes it (``vllm/v1/attention/backends/mla/flashmla_sparse.py``); for the NoPE
            head (``q_pe`` ``[T, H, 0]``) ``uint8 [num_blocks, block_size, 528]``: the 512 codes and 4 scales alone,
            vLLM 0.33/0.34's row for it (:data:`sparse_mla.layouts.FP8_DS_MLA_NOPE_ROW_BYTES`).
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
    kv_cache_dtype = check_cache_layout(kv_cache_dtype)
    _check_options(kv_cache_dtype, check_indices, config)
    _check_inputs(q_nope, q_pe, kv_cache, indices, sm_scale, kv_cache_dtype)
    T, H, DL = q_nope.shape
    DR = q_pe.shape[2]
    _check_outputs(out, lse, T, H, DL, q_nope.dtype, q_nope.device)
    sm_scale = float(sm_scale)
    num_slots = kv_cache.numel() // (FP8_DS_MLA_ROW_BYTES_BY_DIMS[(DL, DR)] if kv_cache_dtype == "fp8_ds_mla"
                                     else DL + DR)
    indices = _slots_int32(indices, num_slots, check_indices)
    q_nope, q_pe = (x if x.stride(2) == 1 else x.contiguous() for x in (q_nope, q_pe))
    if out is None:
        out = torch.empty((T, H, DL), dtype=q_nope.dtype, device=q_nope.device)
    if lse is None:
        lse = torch.empty((T, H), dtype=torch.float32, device=q_nope.device)
    if T == 0 or H == 0:
        return out, lse
    cfg = choose_config(T, H, indices.shape[1], q_nope.dtype, q_nope.device, kv_cache_dtype=kv_cache_dtype,
                        capability=capability, **config)
    # the fallback to smaller tiles is for the planner's own choice; an explicit override is launched as asked
    launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg,
           fallback=all(v is None for v in config.values()))
    return out, lse
