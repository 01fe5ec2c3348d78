"""Random inputs for sparse MLA tests and GPU checks: fresh per call, with -1 padding placed as asked."""
from __future__ import annotations

import torch

DL, DR = 512, 64


def make_case(T, H, topk, *, num_blocks=8, block_size=16, dtype=torch.float32, device="cpu", pad="none",
              repeats=False, strided_q=False, generator=None):
    """Build ``(q_nope, q_pe, kv_cache, indices, sm_scale)`` for one test.

    pad: "none", "end" (a -1 tail), "middle" (holes), "all" (every index -1), "rows" (some rows all -1).
    """
    g = generator
    num_slots = num_blocks * block_size
    if strided_q:  # vLLM-like views: q_nope from a [H, T, DL] buffer transposed, q_pe sliced out of a wider q
        q_nope = torch.randn(H, T, DL, generator=g, device=device).to(dtype).transpose(0, 1)
        q_full = torch.randn(T, H, 192 + DR, generator=g, device=device).to(dtype)
        q_pe = q_full[..., 192:]
    else:
        q_nope = torch.randn(T, H, DL, generator=g, device=device).to(dtype)
        q_pe = torch.randn(T, H, DR, generator=g, device=device).to(dtype)
    kv_cache = torch.randn(num_blocks, block_size, DL + DR, generator=g, device=device).to(dtype)
    if repeats:
        idx = torch.randint(0, num_slots, (T, topk), generator=g, device=device)
    else:
        idx = torch.stack([torch.randperm(num_slots, generator=g, device=device)[:topk] for _ in range(T)]) \
            if topk <= num_slots else torch.randint(0, num_slots, (T, topk), generator=g, device=device)
    idx = idx.to(torch.int32)
    if pad == "end":
        keep = torch.randint(1, topk + 1, (T,), generator=g, device=device)
        idx[torch.arange(topk, device=device)[None, :] >= keep[:, None]] = -1
    elif pad == "middle":
        holes = torch.rand(T, topk, generator=g, device=device) < 0.4
        holes[:, 0] = False
        idx[holes] = -1
    elif pad == "all":
        idx[:] = -1
    elif pad == "rows":
        idx[::2] = -1
    sm_scale = (192 + DR) ** -0.5
    return q_nope, q_pe, kv_cache, idx, sm_scale


def rel_err(a, b):
    a = a.double()
    b = b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
