"""GPU checks of the kernel (skipped without CUDA): bf16 at GLM-5 shapes against the fp32 reference, and slots
whose byte offset needs 64 bits. The full matrix of shapes and the timing live in `sparse-mla bench kernel`."""
from __future__ import annotations

import pytest
import torch

from sparse_mla import sparse_mla_attention
from sparse_mla.bench.kernel import GLM5_SCALE, make_inputs, reference_chunked

pytestmark = pytest.mark.gpu


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("H,T", [(8, 1), (16, 4), (64, 32), (128, 128), (64, 1024), (1, 3), (3, 17)])
def test_bf16_glm5_shapes(H, T):
    q_nope, q_pe, kv, idx = make_inputs(T, H, 16384, seed=H * 1000 + T)
    idx[:, ::5] = -1
    out = torch.full((T, H, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
    lse = torch.full((T, H), float("nan"), device="cuda")
    sparse_mla_attention(q_nope, q_pe, kv, idx, GLM5_SCALE, out=out, lse=lse)
    ref_o, ref_l = reference_chunked(q_nope, q_pe, kv, idx, GLM5_SCALE)
    assert not out.isnan().any() and not lse.isnan().any()
    assert _rel(out, ref_o) < 1e-2
    assert (lse - ref_l).abs().max().item() < 2e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("H,T", [(8, 1), (64, 4), (64, 512), (128, 300), (32, 300)])
def test_fp32_fp16_every_path_fits(dtype, H, T):
    """Split-KV and direct paths at GLM-5 head counts in float32 / float16 (notebook 05's reference forward runs the
    kernel in float32 with 64 heads): no out-of-shared-memory launch, results within the dtype's tolerance."""
    q_nope, q_pe, kv, idx = make_inputs(T, H, 4096, seed=H * 1000 + T, topk=256)
    q_nope, q_pe, kv = q_nope.to(dtype), q_pe.to(dtype), kv.to(dtype)
    idx[:, ::7] = -1
    out = torch.full((T, H, 512), float("nan"), device="cuda", dtype=dtype)
    lse = torch.full((T, H), float("nan"), device="cuda")
    sparse_mla_attention(q_nope, q_pe, kv, idx, GLM5_SCALE, out=out, lse=lse)
    ref_o, ref_l = reference_chunked(q_nope, q_pe, kv, idx, GLM5_SCALE)
    assert not out.isnan().any() and not lse.isnan().any()
    tol = 1e-4 if dtype == torch.float32 else 2e-3
    assert _rel(out, ref_o) < tol
    assert (lse - ref_l).abs().max().item() < tol * 10


def test_slots_past_int32_byte_offsets():
    slots = 4 * 1024 * 1024                      # 4M slots * 576 elements > 2**31
    T, H, topk = 2, 16, 256
    g = torch.Generator(device="cuda").manual_seed(0)
    kv = torch.randn(slots // 64, 64, 576, device="cuda", dtype=torch.bfloat16, generator=g)
    q_nope = torch.randn(T, H, 512, device="cuda", dtype=torch.bfloat16, generator=g)
    q_pe = torch.randn(T, H, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    idx = torch.randint(slots - 100_000, slots, (T, topk), device="cuda", dtype=torch.int32, generator=g)
    assert int(idx.min()) * 576 > 2**31
    out, lse = sparse_mla_attention(q_nope, q_pe, kv, idx, GLM5_SCALE)
    ref_o, ref_l = reference_chunked(q_nope, q_pe, kv, idx, GLM5_SCALE)
    assert _rel(out, ref_o) < 1e-2
