"""vLLM 0.33's DSA fp8 stores rebuilt for SM80/86 (``sparse_mla.kernels.fused_q``, ``.indexer_k_cache``): under
TRITON_INTERPRET=1 against ``kernels.reference`` (vLLM's arithmetic op for op in float32, so bit for bit), on fresh
random inputs in float32 and float16 (the interpreter computes bf16 wrongly), the index cache poisoned first; and
compiled ahead of time for sm_80 .. sm_120 (subprocess, ``TRITON_INTERPRET=0``): no fp8 conversion instruction below
SM89, where Triton cannot emit one."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from sparse_mla.kernels import reference as ref
from sparse_mla.kernels.fused_q import launch_fused_q
from sparse_mla.kernels.indexer_k_cache import launch_indexer_k_cache

pytestmark = pytest.mark.every_line


def _inputs(T, H, HI, dtype, g, half=32):
    return dict(positions=torch.randint(0, 40, (T,), generator=g),
                q_pe=torch.randn(T, H, 64, generator=g).to(dtype),
                q_pe_cos_sin_cache=torch.randn(40, 64, generator=g).to(dtype),
                index_q=(torch.randn(T, HI, 128, generator=g) * 4).to(dtype),
                index_q_cos_sin_cache=torch.randn(40, 2 * half, generator=g).to(dtype),
                index_weights=torch.randn(T, HI, generator=g))


def _bits(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("T, H, HI, half", [(3, 5, 4, 32), (2, 8, 3, 16), (1, 1, 1, 32)])
def test_fused_q_is_vllms_arithmetic(dtype, interleave, T, H, HI, half):
    g = torch.Generator().manual_seed(T * 100 + H * 10 + HI + half + interleave)
    x = _inputs(T, H, HI, dtype, g, half)
    got = launch_fused_q(**x, index_weights_softmax_scale=128 ** -0.5, index_weights_head_scale=HI ** -0.5,
                         has_indexer=True, index_rope_interleave=interleave, hw=False)
    want = ref.fused_q_ref(x["positions"], x["q_pe"], x["q_pe_cos_sin_cache"], x["index_q"],
                           x["index_q_cos_sin_cache"], x["index_weights"], 128 ** -0.5, HI ** -0.5, interleave)
    assert [tuple(t.shape) for t in got] == [(T, HI, 128), (T, HI), (T, H, 64)]
    assert [t.dtype for t in got] == [torch.float8_e4m3fn, torch.float32, dtype]
    for a, b in zip(got, want):
        assert torch.equal(_bits(a), _bits(b))


@pytest.mark.interpreter
def test_fused_q_without_indexer_ropes_q_pe_only():
    """A layer that reuses another's top-k (``has_indexer=False``): vLLM's one-element placeholders come back."""
    g = torch.Generator().manual_seed(7)
    x = _inputs(4, 3, 1, torch.float32, g)
    codes, w, q = launch_fused_q(x["positions"], x["q_pe"], x["q_pe_cos_sin_cache"], None, None, None, 0.0, 0.0,
                                 has_indexer=False, index_rope_interleave=True, hw=False)
    assert codes.shape == (1, 1, 1) and w.shape == (1, 1)
    want = ref.fused_q_ref(x["positions"], x["q_pe"], x["q_pe_cos_sin_cache"], x["index_q"],
                           x["index_q_cos_sin_cache"], x["index_weights"], 1.0, 1.0, True)[2]
    assert torch.equal(q, want)


@pytest.mark.interpreter
@pytest.mark.parametrize("block_size", [64, 16])
def test_indexer_k_cache_writes_vllms_layout_and_skips_padding(block_size):
    g = torch.Generator().manual_seed(block_size)
    T, nb = 9, 3
    k = torch.randn(T, 128, generator=g) * torch.rand(T, 1, generator=g) * 50
    slots = torch.randperm(nb * block_size, generator=g)[:T].to(torch.int64)
    slots[[2, 5]] = -1                                       # padding (or another DCP rank's tokens)
    cache = torch.randint(0, 256, (nb, block_size, 132), generator=g, dtype=torch.uint8)    # poisoned
    want = ref.index_cache_write_ref(cache.clone(), k, slots)
    launch_indexer_k_cache(k, slots, slots, cache.view(torch.float8_e4m3fn), hw=False)
    assert torch.equal(cache, want)


@pytest.mark.interpreter
def test_indexer_k_cache_writes_at_the_indexer_slot():
    """vLLM skips by the MLA slot and writes at the indexer's own slot mapping."""
    g = torch.Generator().manual_seed(3)
    k = torch.randn(4, 128, generator=g)
    mla = torch.tensor([5, -1, 9, 0])
    idx = torch.tensor([1, 2, 3, 4])
    cache = torch.zeros(1, 16, 132, dtype=torch.uint8)
    launch_indexer_k_cache(k, mla, idx, cache, hw=False)
    want = ref.index_cache_write_ref(torch.zeros_like(cache), k, torch.where(mla < 0, -1, idx))
    assert torch.equal(cache, want)


BUILD = """
import json
from sparse_mla.kernels.indexer_build import compile_stand_in
print(json.dumps({cap: ["e4m3" in compile_stand_in(k, divmod(cap, 10)).asm["ptx"] for k in ("fused_q", "k_cache")]
                  for cap in (80, 86, 89, 90, 120)}))
"""


def test_both_kernels_build_for_every_gpu_with_fp8_conversion_only_from_sm89():
    env = dict(os.environ, TRITON_INTERPRET="0")
    r = subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(got) == {"80", "86", "89", "90", "120"}
    for cap, cvt in got.items():
        assert cvt == [int(cap) >= 89] * 2, (cap, cvt)
