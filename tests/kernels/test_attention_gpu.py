"""GPU checks of the kernel (skipped without CUDA): bf16 at GLM-5 shapes against the float64 reference, and slots
whose byte offset needs 64 bits, each held to the limit :mod:`sparse_mla.kernels.error_bounds` derives for the GPU's
arithmetic (bf16/fp16 dots, truncating tensor-core accumulation, P rounded to the dot dtype). The full matrix of
shapes and the timing live in `sparse-mla bench kernel`."""
from __future__ import annotations

import pytest
import torch

from sparse_mla import sparse_mla_attention
from sparse_mla.bench.kernel import GLM5_SCALE, make_inputs
from sparse_mla.kernels.error_bounds import check_attention

pytestmark = pytest.mark.gpu


def _check(out, lse, q_nope, q_pe, kv, idx):
    c = check_attention(out, lse, q_nope, q_pe, kv, idx, GLM5_SCALE)
    print(f"\n{tuple(q_nope.shape)} {q_nope.dtype}: {c.explain()}")
    assert c.ok, c.explain()


@pytest.mark.parametrize("H,T", [(8, 1), (16, 4), (64, 32), (128, 128), (64, 1024), (1, 3), (3, 17)])
def test_bf16_glm5_shapes(H, T):
    q_nope, q_pe, kv, idx = make_inputs(T, H, 16384, seed=H * 1000 + T)
    idx[:, ::5] = -1
    out = torch.full((T, H, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
    lse = torch.full((T, H), float("nan"), device="cuda")
    sparse_mla_attention(q_nope, q_pe, kv, idx, GLM5_SCALE, out=out, lse=lse)
    _check(out, lse, q_nope, q_pe, kv, idx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("H,T", [(8, 1), (64, 4), (64, 512), (128, 300), (32, 300)])
def test_fp32_fp16_every_path_fits(dtype, H, T):
    """Split-KV and direct paths at GLM-5 head counts in float32 / float16 (notebook 05's reference forward runs the
    kernel in float32 with 64 heads): no out-of-shared-memory launch, results within the derived limits."""
    q_nope, q_pe, kv, idx = make_inputs(T, H, 4096, seed=H * 1000 + T, topk=256)
    q_nope, q_pe, kv = q_nope.to(dtype), q_pe.to(dtype), kv.to(dtype)
    idx[:, ::7] = -1
    out = torch.full((T, H, 512), float("nan"), device="cuda", dtype=dtype)
    lse = torch.full((T, H), float("nan"), device="cuda")
    sparse_mla_attention(q_nope, q_pe, kv, idx, GLM5_SCALE, out=out, lse=lse)
    _check(out, lse, q_nope, q_pe, kv, idx)


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
    _check(out, lse, q_nope, q_pe, kv, idx)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8_ds_mla"])
def test_planner_reads_this_gpu(kv_cache_dtype):
    """The launch planner on the real GPU: its limits are the device's, a tile's resources come from compiling it
    for this GPU, and they are those of the kernel Triton's JIT then launches (shared memory equal, registers within
    a few: the JIT also specializes the split path's lse strides). Prints both."""
    from sparse_mla.kernels import choose_config, device_limits, launch, programs_per_sm
    from sparse_mla.kernels import launch_plan as api
    from sparse_mla.kernels.attention import kernel_for

    dev = torch.device("cuda")
    p = torch.cuda.get_device_properties(dev)
    lim = device_limits(dev)
    assert (lim.sm_count, lim.smem_per_block, lim.regs_per_sm) == (p.multi_processor_count,
                                                                   p.shared_memory_per_block_optin,
                                                                   p.regs_per_multiprocessor)
    T, H = 32, 64
    q_nope, q_pe, kv, idx = make_inputs(T, H, 32768, kv_cache_dtype=kv_cache_dtype)
    cfg = choose_config(T, H, idx.shape[1], q_nope.dtype, dev, kv_cache_dtype=kv_cache_dtype)
    res = api.tile_resources(cfg, q_nope.dtype, torch.cuda.get_device_capability(dev))
    assert res is not None and programs_per_sm(res, cfg.num_warps, lim) >= 1
    out = torch.empty(T, H, 512, device="cuda", dtype=q_nope.dtype)
    lse = torch.empty(T, H, device="cuda")
    launch(q_nope, q_pe, kv, idx, GLM5_SCALE, out, lse, cfg, fallback=False)
    torch.cuda.synchronize()
    kernel = kernel_for(cfg.kv_cache_dtype, cfg.fp8_scales)
    jit = [k for k in kernel.device_caches[torch.cuda.current_device()][0].values()
           if k.metadata.num_warps == cfg.num_warps and k.metadata.shared == res["shared"]]
    print(f"\nplanned {cfg} on {p.name}: AOT {res}; JIT {[(k.metadata.shared, k.n_regs) for k in jit]}")
    assert jit and min(abs(k.n_regs - res["regs"]) for k in jit) <= 16
