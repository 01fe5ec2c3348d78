"""Launching the sparse MLA attention kernels on checked inputs: the direct kernel, or split-KV partials and their
LSE merge; a tile that does not fit the GPU's shared memory (Triton's ``OutOfResources``) steps down through
:func:`sparse_mla.kernels.launch_plan.smaller_configs`, and the tile that ran is remembered."""
from __future__ import annotations

import torch
import triton

from ..errors import UserInputError
from ..layouts import LOG2E
from ..machine import interpreting
from .attention import _merge_splits_kernel, kernel_for
from .launch_plan import LaunchConfig, smaller_configs

_FITTED: dict[tuple, LaunchConfig] = {}   # (device, dtypes, dims, planned config) -> the config that compiled


def launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg: LaunchConfig, fallback: bool = True,
           fp8_options: dict | None = None) -> None:
    """Launch the kernel(s) with a :class:`LaunchConfig` on checked inputs (no validation, no host sync).

    ``fp8_options``: compile-time options of the "fold" fp8_ds_mla kernel under measurement
    (:data:`FP8_OPTIONS`, e.g. ``{"KEEP_CODES": True}``; benchmarks and tests only, the planned launch passes none).

    With ``fallback`` (the default), a configuration whose tiles do not fit the GPU's shared memory (Triton's
    ``OutOfResources``, raised before anything runs) is replaced by the first of :func:`smaller_configs` that fits,
    and that choice is remembered per device, dtypes and configuration. ``fallback=False`` (configuration sweeps)
    raises instead.
    """
    fp8_options = check_fp8_options(fp8_options, cfg)
    if not fallback or interpreting():
        return _launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg, fp8_options)
    from triton.runtime.errors import OutOfResources

    key = _fit_key(q_nope, q_pe, kv_cache, cfg)
    first = _FITTED.get(key, cfg)
    err = None
    for c in (first, *smaller_configs(first)):
        try:
            _launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, c, fp8_options)
        except OutOfResources as e:
            err = e
            continue
        _FITTED[key] = c
        return
    raise err


#: Compile-time options of the "fold" fp8_ds_mla kernel (:func:`sparse_mla.kernels.attention._sparse_mla_fp8_fwd_kernel`)
#: a benchmark may ask for; ``KEEP_CODES`` needs whole rows per program (``block_dv`` 512).
FP8_OPTIONS = ("KEEP_CODES", "VEC_SCALES")


def check_fp8_options(fp8_options: dict | None, cfg: LaunchConfig) -> dict:
    """``fp8_options`` as the kernel takes them, or one UserInputError line: only :data:`FP8_OPTIONS`, booleans,
    for the "fold" fp8_ds_mla kernel, ``KEEP_CODES`` with ``block_dv`` 512."""
    if not fp8_options:
        return {}
    if cfg.kv_cache_dtype != "fp8_ds_mla" or cfg.fp8_scales != "fold":
        raise UserInputError(f"fp8_options {fp8_options!r} apply to the 'fold' fp8_ds_mla kernel only; accepted: "
                             f"kv_cache_dtype 'fp8_ds_mla' with fp8_scales 'fold'")
    bad = [k for k, v in fp8_options.items() if k not in FP8_OPTIONS or not isinstance(v, bool)]
    if bad:
        raise UserInputError(f"fp8_options {bad!r} are not accepted; accepted: {', '.join(FP8_OPTIONS)} set to "
                             f"True or False")
    if fp8_options.get("KEEP_CODES") and min(cfg.block_dv, 512) != 512:
        raise UserInputError(f"fp8_options KEEP_CODES with block_dv {cfg.block_dv} is not accepted; accepted: "
                             f"block_dv 512 (a program that covers every value tile)")
    return dict(fp8_options)


def fitted_config(q_nope, q_pe, kv_cache, cfg: LaunchConfig) -> LaunchConfig:
    """The configuration :func:`launch` actually used for ``cfg`` on these tensors' device and dtypes (``cfg`` itself
    unless it did not fit)."""
    return _FITTED.get(_fit_key(q_nope, q_pe, kv_cache, cfg), cfg)


def _fit_key(q_nope, q_pe, kv_cache, cfg: LaunchConfig) -> tuple:
    return q_nope.device, q_nope.dtype, kv_cache.dtype, q_nope.shape[2], q_pe.shape[2], cfg


def _launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg: LaunchConfig,
            fp8_options: dict | None = None) -> None:
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
    kernel = kernel_for(cfg.kv_cache_dtype, cfg.fp8_scales)
    common = dict(DL=DL, DR=DR, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, BLOCK_DV=block_dv, DOT_DTYPE=dot_tl,
                  IEEE=ieee, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if DR == 0:   # a NoPE head: no rope part to read; the kernel never touches Q_pe (an empty tensor has no address)
        q_pe = q_nope
    if fp8:   # the same storage read as uint8 (codes), float32 (scales) and bfloat16 (rope): views, no copies; the
        # fp8_ds_mla row is a constant of the fp8 kernels, the float kernel takes the row stride
        common["FP8_HW"] = cfg.fp8_hw
        common.update(fp8_options or {})
        cache, row = (kv_cache, kv_cache.view(torch.float32), kv_cache.view(torch.bfloat16)), ()
    else:
        cache, row = (kv_cache,), (DL + DR,)
    if S == 1:
        kernel[(T, n_hblocks, 1)](
            q_nope, q_pe, *cache, indices, out, lse, out, lse,
            sm_scale * LOG2E, H, topk, chunk,
            q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
            *row, indices.stride(0),
            out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
            0, 0, 0, 0, 0,
            SPLIT=False, **common)
        return
    o_part = torch.empty((T, H, S, DL), dtype=torch.float32, device=q_nope.device)
    lse_part = torch.empty((T, H, S), dtype=torch.float32, device=q_nope.device)
    kernel[(T, n_hblocks, S)](
        q_nope, q_pe, *cache, indices, out, lse, o_part, lse_part,
        sm_scale * LOG2E, H, topk, chunk,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
        *row, indices.stride(0),
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
        SPLIT=True, **common)
    block_d = min(DL, 128)
    _merge_splits_kernel[(T, H, DL // block_d)](
        o_part, lse_part, out, lse, H, S,
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        DL=DL, BLOCK_S=triton.next_power_of_2(S), BLOCK_D=block_d, num_warps=4)
