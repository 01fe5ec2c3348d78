"""Occupancy and the launch plan of the sparse MLA kernel from a GPU's own numbers: how many programs of a compiled
kernel stay resident on one SM (shared memory, registers, threads, the resident-block limit), and which head tile and
split-KV count keep the GPU's slots busy (:func:`plan_launch`). Shapes only, so a plan is CUDA-graph safe. The limits
are those of the CUDA programming guide's "Compute capabilities" table; :mod:`.api` compiles the tiles and asks."""

from __future__ import annotations

import torch
import triton

from ..gpus import CPU_LIMITS, DEVICE_LIMITS, DeviceLimits  # noqa: F401 - the plan's names for them




def device_limits(device: torch.device) -> DeviceLimits:
    """:class:`DeviceLimits` of ``device`` from its properties (SM count, shared memory per SM and per block, registers,
    threads); the resident-block limit, which CUDA does not report, from :data:`DEVICE_LIMITS` (16 if unknown)."""
    if device.type != "cuda":
        return CPU_LIMITS
    p = torch.cuda.get_device_properties(device)
    known = DEVICE_LIMITS.get((p.major, p.minor))
    return DeviceLimits(p.multi_processor_count, p.shared_memory_per_multiprocessor, p.shared_memory_per_block_optin,
                        p.regs_per_multiprocessor, p.max_threads_per_multi_processor,
                        known.max_blocks_per_sm if known else 16)


#: The limits each plan of this process was made with, by the capability it planned for (:func:`planning_limits`):
#: what the ``ran`` block reports (``sparse_mla.vllm_plugin.ran``).
_PLANNED: dict[str, dict] = {}


def planning_limits(device: torch.device, capability=None) -> DeviceLimits:
    """The limits a launch on ``device`` is planned with: the device's own (:func:`device_limits`), unless
    ``capability`` -- vLLM's ``current_platform.get_device_capability()``, which the kernels are given -- names
    another GPU with a row in :data:`DEVICE_LIMITS`: then that GPU's numbers (a capability simulation,
    ``tools/gpu/simulate_capability``, plans as on the simulated GPU: SM120's 99 KB and 188 SMs on an H200). On a
    real GPU the two agree. Each answer is noted for :func:`planned_limits`."""
    own = None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        own = (int(major), int(minor))
    cap = own if capability is None else (int(capability[0]), int(capability[1]))
    if device.type == "cuda" and cap != own and cap in DEVICE_LIMITS:
        lim, source = DEVICE_LIMITS[cap], f"DEVICE_LIMITS[{cap[0]}.{cap[1]}]"
    else:
        lim, source = device_limits(device), "device" if device.type == "cuda" else "cpu"
    if cap is not None:
        _PLANNED[f"{cap[0]}.{cap[1]}"] = {"from": source, "sm_count": lim.sm_count,
                                          "smem_per_block": lim.smem_per_block, "smem_per_sm": lim.smem_per_sm}
    return lim


def planned_limits() -> dict[str, dict]:
    """``{"M.m": {"from", "sm_count", "smem_per_block", "smem_per_sm"}}``: the limits this process planned launches
    with, per capability planned for; ``from`` is ``"device"`` (the GPU's own properties), ``"DEVICE_LIMITS[M.m]"``
    (another GPU's numbers: a simulated capability) or ``"cpu"`` (the interpreter's stand-in)."""
    return {k: dict(v) for k, v in _PLANNED.items()}


def programs_per_sm(resources: dict | None, num_warps: int, lim: DeviceLimits) -> int:
    """Programs of one compiled kernel resident on an SM at once: the least of what its shared memory (plus the
    per-block reservation), its registers (allocated per warp in units of 256) and its threads allow, and the
    resident-block limit; 0 if it does not fit at all. ``resources`` (:func:`.api.kernel_resources`) None: 1."""
    if resources is None:
        return 1
    if resources["shared"] > lim.smem_per_block:
        return 0
    by_smem = lim.smem_per_sm // (resources["shared"] + lim.smem_reserved_per_block)
    by_regs = lim.regs_per_sm // (-(-resources["regs"] * 32 // 256) * 256 * num_warps)
    return max(0, min(by_smem, by_regs, lim.max_threads_per_sm // (32 * num_warps), lim.max_blocks_per_sm))


#: Planner policy: a launch is good when its programs keep at least this share of the resident slots busy, and a
#: larger split count must promise at least (1 - this) less time to be worth its partial results and merge.
TARGET_UTILIZATION = 0.9


def _split_count(base: int, slots: int, topk: int, block_n: int, min_chunk: int) -> int:
    """The split count: among those the launch can make (chunks are whole ``block_n`` tiles, at least ``min_chunk``
    entries), the smallest whose modelled time ``waves(S) / S`` (``waves = cdiv(base * S, slots)``; a program covers
    ``1 / S`` of the row) is within ``1 / TARGET_UTILIZATION`` of the best: more partial results and a bigger merge
    only for a real gain."""
    counts = sorted({1} | {triton.cdiv(topk, k * block_n)
                           for k in range(triton.cdiv(min_chunk, block_n), triton.cdiv(topk, block_n) + 1)})
    t = {S: triton.cdiv(base * S, slots) / S for S in counts}
    best = min(t.values())
    return min(S for S in counts if t[S] <= best / TARGET_UTILIZATION)


def plan_launch(T: int, H: int, topk: int, tiles, lim: DeviceLimits, num_splits: int | None = None):
    """Head tile and split count from the GPU's own numbers (shapes only: CUDA-graph safe).

    ``tiles``: ``(block_h, block_n, num_warps, resources)``, largest head tile first (one gathered row serves
    ``block_h`` heads). A tile that fits runs ``slots = SMs x programs_per_sm(resources)`` programs at once.

    * **direct** with the first tile that fits when its ``T * cdiv(H, block_h)`` programs keep at least
      :data:`TARGET_UTILIZATION` of its slots busy;
    * else **split-KV**: with the 64-head tile where ``T * cdiv(H, 64)`` programs times its largest split count fill
      its slots (many heads, ``T`` of 4-128: each row gathered once for 64 heads), otherwise with a 16-head tile (the
      decode tile measured best on the H200); the split count by :func:`_split_count`, each split at least
      ``max(64, block_n, 2 * block_h)`` index entries (a program gathers more than it loads of q).

    Returns ``(block_h, block_n, num_warps, num_splits, utilization)``, utilization ``P / (waves * slots)``."""
    fits = []
    for bh, bn, nw, res in tiles:
        occ = programs_per_sm(res, nw, lim)
        if occ:
            fits.append((bh, bn, nw, lim.sm_count * occ, max(64, bn, 2 * bh)))
    if not fits:   # nothing fits by the compiled numbers: the smallest tile, and launch()'s fallback chain
        bh, bn, nw, _ = tiles[-1]
        return bh, bn, nw, num_splits or 1, 0.0

    def result(bh, bn, nw, slots, S):
        P = T * triton.cdiv(H, bh) * S
        return bh, bn, nw, S, P / (triton.cdiv(P, slots) * slots)

    bh, bn, nw, slots, _ = fits[0]
    if num_splits == 1 or (num_splits is None and T * triton.cdiv(H, bh) >= TARGET_UTILIZATION * slots):
        return result(bh, bn, nw, slots, 1)
    wide = [f for f in fits if f[0] >= 64 and
            T * triton.cdiv(H, f[0]) * max(1, topk // f[4]) >= TARGET_UTILIZATION * f[3]]
    narrow = [f for f in fits if f[0] == 16] or fits[-1:]
    bh, bn, nw, slots, min_chunk = (wide or narrow)[0]
    return result(bh, bn, nw, slots,
                  num_splits or _split_count(T * triton.cdiv(H, bh), slots, topk, bn, min_chunk))
