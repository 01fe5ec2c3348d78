"""The attention kernel's launch before the device-derived plan ("v3": constants tuned on the H200, 2026-11-29), kept
only to time it beside the plan (``sparse-mla bench kernel --compare-launch``) and to read the records made with it.

* split-KV with 16-head tiles when ``T * cdiv(H, 16) < 2 * SMs``: ``clamp(256 // programs, 8, 32)`` splits below 64
  programs, else ``cdiv(2 * SMs, programs)``, at most ``topk // 64``;
* direct launches with 16 / 32 / 64-head tiles by head count (fp8_ds_mla: ``BLOCK_N = 32`` below 64 heads).
"""
from __future__ import annotations

import triton

from ..kernels import LaunchConfig, choose_config, device_limits


def v3_choice(T: int, H: int, topk: int, fp8: bool, sm_count: int) -> tuple[int, int, int, int]:
    """``(block_h, block_n, num_warps, num_splits)`` of the v3 launch for ``T`` tokens, ``H`` heads, ``sm_count``
    SMs."""
    programs = T * triton.cdiv(H, 16)
    if programs >= 2 * sm_count:
        num_splits = 1
    elif programs < 64:
        num_splits = min(32, max(8, 256 // programs))
    else:
        num_splits = triton.cdiv(2 * sm_count, programs)
    num_splits = min(num_splits, max(1, topk // 64))
    if num_splits > 1 or H <= 16:
        return 16, 32 if fp8 else 64, 4, num_splits
    if H <= 32:
        return (32, 32, 4, num_splits) if fp8 else (32, 64, 8, num_splits)
    return 64, 64, 8, num_splits


def v3_config(T: int, H: int, topk: int, dtype, device, *, kv_cache_dtype: str = "auto", capability=None,
              limits=None) -> LaunchConfig:
    """The v3 launch as a :class:`~sparse_mla.kernels.LaunchConfig`: its tile and split count passed to
    :func:`~sparse_mla.kernels.choose_config` as explicit overrides (the cache layout's scale variant, e4m3 path,
    stages and dot dtype as the planner sets them). ``limits``: the device's (:func:`device_limits`) by default."""
    lim = limits or device_limits(device)
    bh, bn, nw, S = v3_choice(T, H, topk, kv_cache_dtype == "fp8_ds_mla", lim.sm_count)
    return choose_config(T, H, topk, dtype, device, block_h=bh, block_n=bn, num_warps=nw, num_splits=S,
                         kv_cache_dtype=kv_cache_dtype, capability=capability, limits=lim)
