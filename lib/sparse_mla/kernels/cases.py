"""Random inputs for the sparse MLA kernel's checks (tests, GPU checks, notebook 02): fresh per call, shapes as vLLM
passes them (``q_nope [T, H, 512]``, ``q_pe [T, H, 64]``, a paged ``[num_blocks, block_size, 576]`` latent cache,
int32 ``[T, topk]`` global slots) with ``-1`` padding placed as asked."""
from __future__ import annotations

import torch

from ..layouts import KV_LORA_RANK as DL
from ..layouts import ROPE_DIM as DR


def random_q(T, H, g, *, dtype=torch.float32, device="cpu", strided=False):
    """``(q_nope [T, H, DL], q_pe [T, H, DR])``; ``strided``: vLLM-like views, q_nope from a [H, T, DL] buffer
    transposed, q_pe sliced out of a wider q."""
    if strided:
        q_nope = torch.randn(H, T, DL, generator=g, device=device).to(dtype).transpose(0, 1)
        q_pe = torch.randn(T, H, 192 + DR, generator=g, device=device).to(dtype)[..., 192:]
    else:
        q_nope = torch.randn(T, H, DL, generator=g, device=device).to(dtype)
        q_pe = torch.randn(T, H, DR, generator=g, device=device).to(dtype)
    return q_nope, q_pe


def random_indices(T, topk, num_slots, g, *, pad="none", repeats=False, device="cpu"):
    """int32 ``[T, topk]`` slots below ``num_slots`` (distinct per row unless ``repeats`` or topk > num_slots).

    pad: "none", "end" (a -1 tail), "middle" (holes), "all" (every index -1), "rows" (some rows all -1), "head"
    (the first half of every row -1: a fully masked first tile, valid entries later)."""
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
    elif pad == "head":
        idx[:, : topk // 2] = -1
    return idx


def make_case(T, H, topk, *, num_blocks=8, block_size=16, dtype=torch.float32, device="cpu", pad="none",
              repeats=False, strided_q=False, generator=None):
    """``(q_nope, q_pe, kv_cache, indices, sm_scale)`` for one check (``pad`` as in :func:`random_indices`; ``sm_scale``
    GLM-5's ``(192 + 64) ** -0.5``); every tensor drawn from ``generator`` on ``device``."""
    g = generator
    q_nope, q_pe = random_q(T, H, g, dtype=dtype, device=device, strided=strided_q)
    kv_cache = torch.randn(num_blocks, block_size, DL + DR, generator=g, device=device).to(dtype)
    idx = random_indices(T, topk, num_blocks * block_size, g, pad=pad, repeats=repeats, device=device)
    sm_scale = (192 + DR) ** -0.5
    return q_nope, q_pe, kv_cache, idx, sm_scale


def rel_err(a, b) -> float:
    """Relative Frobenius error ``|a - b| / |b|`` in float64."""
    a = a.double()
    b = b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
