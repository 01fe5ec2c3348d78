"""Shared memory of the kernel's tiles on the GPUs we cannot run here, compiled ahead of time on the CPU.

The user's GPU (RTX PRO 6000, SM120) has 99 KB of shared memory per block, the H200 227 KB. Triton compiles the
attention kernel for a ``GPUTarget`` without a GPU, and the compiled kernel reports its shared memory:

* the H200-tuned tiles (:func:`sparse_mla.bench.launch_v3.v3_config`) must reach, through :func:`sparse_mla.kernels.launch`'s
  fallback chain (:func:`smaller_configs`), a configuration that fits;
* the tiles the planner picks (:func:`choose_config`, with each target's :data:`DEVICE_LIMITS`) fit as they
  are, fp8_ds_mla tiles included, on sm_80/86/89/120/90.

Triton's interpreter cannot compile, so the check runs in a subprocess with ``TRITON_INTERPRET=0``.
"""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, torch
from sparse_mla.kernels import SMEM_PER_BLOCK, choose_config, shared_memory_bytes, smaller_configs
from sparse_mla.kernels import DEVICE_LIMITS, planned_launches
from sparse_mla.bench.launch_v3 import v3_config
rows = []
cpu = torch.device("cpu")
CASES = [((12, 0), torch.bfloat16, [(1, 8), (4096, 8), (4096, 32), (4096, 64)]),
         ((9, 0), torch.bfloat16, [(1, 8), (4096, 32), (4096, 64)]),
         ((12, 0), torch.float32, [(1, 8), (4096, 64)]),
         ((9, 0), torch.float32, [(4096, 64)])]
FP8_CASES = [(cap, torch.bfloat16, [(1, 64), (4096, 64)]) for cap in ((8, 0), (8, 6), (8, 9), (12, 0), (9, 0))]
for kv, cases, launch in (("auto", CASES, "v3"), ("fp8_ds_mla", FP8_CASES, "plan")):
    for cap, dtype, shapes in cases:
        for T, H in shapes:
            if launch == "plan":
                cfg = choose_config(T, H, 2048, dtype, cpu, kv_cache_dtype=kv, capability=cap, limits=DEVICE_LIMITS[cap])
            else:   # v3 with the CPU stand-in's limits, as before
                cfg = v3_config(T, H, 2048, dtype, cpu, kv_cache_dtype=kv, capability=cap)
            chain = []
            for c in (cfg, *smaller_configs(cfg)):
                chain.append((c.block_h, c.block_n, c.num_warps, c.num_stages, c.split, c.fp8_scales, c.fp8_hw,
                              shared_memory_bytes(c, dtype, cap)))
                if chain[-1][-1] <= SMEM_PER_BLOCK[cap]:
                    break
            rows.append(dict(cap=list(cap), dtype=str(dtype).removeprefix("torch."), kv=kv, T=T, H=H, chain=chain,
                             limit=SMEM_PER_BLOCK[cap]))
plans = {kv: planned_launches((12, 0), torch.bfloat16, kv, shapes=[(1, 8), (128, 8), (1, 64), (4, 64), (32, 64),
                                                                   (4096, 64)]) for kv in ("auto", "fp8_ds_mla")}
print(json.dumps({"fits": rows, "plans": plans}))
"""


@pytest.fixture(scope="module")
def aot():
    """Every case above compiled ahead of time in one subprocess (about 100 s on 2 cores): the slow tier; the default
    tier's AOT check is :func:`test_user_gpu_decode_and_prefill_tiles_fit`."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fits(aot):
    return aot["fits"]


def _row(fits, cap, dtype, T, H, kv="auto"):
    return next(r for r in fits if r["cap"] == list(cap) and r["dtype"] == dtype and r["T"] == T and r["H"] == H
                and r["kv"] == kv)


@pytest.mark.slow
def test_every_default_reaches_a_fitting_config(fits):
    assert len(fits) == 10 + 10
    for r in fits:
        assert r["chain"][-1][-1] <= r["limit"], r


@pytest.mark.slow
def test_fp8_ds_mla_tiles_fit(fits):
    """The fp8_ds_mla tiles the planner picks with each target's numbers (fold: codes converted in dot-operand
    registers from one uint8 copy; registers: the 64-head tile on SM90) fit as they are: decode (split-KV, 16 heads)
    everywhere, the 64-head prefill tile on SM80 (163 KB) and SM90, 32 x 32 on the 99 KB GPUs. The e4m3 decode is the
    software one on SM80/86, the hardware one from SM89."""
    for cap in ((8, 0), (8, 6), (8, 9), (12, 0), (9, 0)):
        hw = cap >= (8, 9)
        dec = _row(fits, cap, "bfloat16", 1, 64, "fp8_ds_mla")["chain"]
        assert len(dec) == 1 and dec[0][:7] == [16, 32, 4, 2, True, "fold", hw]
        wide = _row(fits, cap, "bfloat16", 4096, 64, "fp8_ds_mla")["chain"]
        assert len(wide) == 1 and not wide[0][4]
        if cap in ((8, 0), (9, 0)):
            assert wide[0][:2] == [64, 64] and wide[0][5] == ("registers" if cap == (9, 0) else "fold")
        else:
            assert wide[0][:2] == [32, 32] and wide[0][5] == "fold"
        # fewer bytes per row: the decode tile needs less shared memory than the bf16 one on the same GPU
        assert dec[0][-1] < _row(fits, (12, 0), "bfloat16", 1, 8)["chain"][0][-1]


@pytest.mark.slow
def test_h200_bf16_defaults_fit_as_benchmarked(fits):
    """The configurations timed on the H200 (results/h200/bench_kernel_h200.*) run there unchanged."""
    for T, H in [(1, 8), (4096, 32), (4096, 64)]:
        assert len(_row(fits, (9, 0), "bfloat16", T, H)["chain"]) == 1


@pytest.mark.slow
def test_sm120_needs_the_fallback_for_wide_head_tiles(fits):
    """On SM120 (99 KB) the 16-head tiles fit as they are (decode, and GLM-5 at TP 8: 8 heads per GPU), while the
    32- and 64-head prefill tiles (115 KB / 156 KB compiled for sm_120) must step down."""
    assert len(_row(fits, (12, 0), "bfloat16", 1, 8)["chain"]) == 1
    assert len(_row(fits, (12, 0), "bfloat16", 4096, 8)["chain"]) == 1
    for H in (32, 64):
        chain = _row(fits, (12, 0), "bfloat16", 4096, H)["chain"]
        assert chain[0][-1] > 101376 and len(chain) > 1
        assert chain[-1][:2] == [32, 32]   # the fastest fallback tile that fits (78 KB), not the 16-head one


@pytest.mark.slow
def test_fp32_64_head_tile_does_not_fit_an_h200(fits):
    """Found by notebook 05's float32 reference forward on the H200 (64 heads): 311808 > 232448 bytes with Triton
    3.6.0 (the same with the JIT's divisibility hints). Asserted: over the limit and a step down, not the exact bytes
    (another Triton lays the tile out otherwise)."""
    row = _row(fits, (9, 0), "float32", 4096, 64)
    assert row["chain"][0][-1] > row["limit"] and len(row["chain"]) > 1 and row["chain"][-1][-1] <= row["limit"]


def test_launch_steps_down_and_remembers_the_fitting_config(monkeypatch):
    """launch's fallback logic, with a fake launcher that refuses tiles over 1024 entries (no GPU needed)."""
    import torch
    from triton.runtime.errors import OutOfResources

    from sparse_mla.kernels import LaunchConfig
    from sparse_mla.kernels import launcher as api

    tried = []

    def fake_launch(q_nope, q_pe, kv_cache, indices, sm_scale, out, lse, cfg, fp8_options=None):
        tried.append((cfg.block_h, cfg.block_n))
        if cfg.block_h * cfg.block_n > 1024:
            raise OutOfResources(150000, 101376, "shared memory")

    monkeypatch.setattr(api, "_launch", fake_launch)
    monkeypatch.setattr(api, "interpreting", lambda: False)
    monkeypatch.setattr(api, "_FITTED", {})
    q, p, kv = torch.zeros(1, 64, 512), torch.zeros(1, 64, 64), torch.zeros(1, 64, 576)
    cfg = LaunchConfig(64, 64, 512, 1, 8, 2, torch.bfloat16)
    api.launch(q, p, kv, None, 1.0, None, None, cfg)
    assert tried == [(64, 64), (64, 32), (32, 64), (32, 32)]   # the planner's tiles, in its order
    assert api.fitted_config(q, p, kv, cfg) == LaunchConfig(32, 32, 512, 1, 4, 2, torch.bfloat16)
    tried.clear()
    api.launch(q, p, kv, None, 1.0, None, None, cfg)
    assert tried == [(32, 32)]                      # remembered: no second failing compile
    with pytest.raises(OutOfResources):             # sweeps ask for exactly their configuration
        api.launch(q, p, kv, None, 1.0, None, None, cfg, fallback=False)
    monkeypatch.setattr(api, "_launch", lambda *a: (_ for _ in ()).throw(OutOfResources(1, 0, "shared memory")))
    with pytest.raises(OutOfResources):             # nothing fits: the last error, not silence
        api.launch(q, p, kv, None, 1.0, None, None, LaunchConfig(16, 64, 512, 1, 4, 2, torch.float32))


@pytest.mark.slow
def test_planned_launches_for_sm120(aot):
    """What choose_config plans on an RTX PRO 6000 (SM120, 188 SMs, 99 KB per block) from tiles compiled for sm_120:
    every pick fits, prefill at 64 heads takes the widest tile that fits (32 x 32, bf16 and fp8), decode 16-head
    tiles split to keep the SMs busy, and the 64-head split tile (too big for 99 KB) is never chosen."""
    for kv, rows in aot["plans"].items():
        got = {(r["T"], r["H"]): r for r in rows}
        for r in rows:
            assert r["programs_per_sm"] >= 1 and r["shared"] <= 101376, r
            assert not r["tile"].startswith("64x"), r
        assert got[(4096, 64)]["tile"].startswith("32x32") and got[(4096, 64)]["num_splits"] == 1
        assert got[(128, 8)]["num_splits"] >= 1 and got[(128, 8)]["tile"].startswith("16x")
        for T in (1, 4):
            assert got[(T, 64)]["tile"].startswith("16x") and got[(T, 64)]["num_splits"] > 1
        assert (got[(1, 8)]["fp8_scales"] == "fold") == (kv == "fp8_ds_mla")


def test_user_gpu_decode_and_prefill_tiles_fit():
    """The default tier's ahead-of-time check (the exhaustive one is the slow tier's): on the user's GPU (RTX PRO 6000,
    sm_120, 99 KB per block) and on an A100 (sm_80), the tiles the planner picks for GLM-5 at TP 8 (8 heads) in decode
    and prefill, bf16 and fp8_ds_mla caches, compiled for that target: each fits its shared memory."""
    from sparse_mla.kernels import DEVICE_LIMITS
    from sparse_mla.kernels.launch_plan import planned_launches_aot

    for kv in ("auto", "fp8_ds_mla"):
        rows = planned_launches_aot([(12, 0), (8, 0)], "bfloat16", kv, shapes=[(1, 8), (4096, 8)])
        assert len(rows) == 4
        for r in rows:
            cap = tuple(int(x) for x in r["capability"].split("."))
            assert r["shared"] is not None and r["shared"] <= DEVICE_LIMITS[cap].smem_per_block, r
            assert r["programs_per_sm"] >= 1, r


NOPE_SCRIPT = r"""
import json, sys, torch
from sparse_mla.kernels import DEVICE_LIMITS, choose_config
from sparse_mla.kernels.aot import compile_for
caps, shapes, kvs = json.loads(sys.argv[1])
rows = []
for kv in kvs:
  for cap in map(tuple, caps):
    for T, H in shapes:
        cfg = choose_config(T, H, 2176, torch.bfloat16, torch.device("cpu"), capability=cap, limits=DEVICE_LIMITS[cap],
                            kv_cache_dtype=kv)
        for split in sorted({cfg.split, False}):
            k = compile_for(cfg, torch.bfloat16, cap, split=split, DL=512, DR=0)
            rows.append({"kv": kv, "cap": list(cap), "T": T, "H": H, "split": split, "scales": cfg.fp8_scales,
                         "tile": [cfg.block_h, cfg.block_n, cfg.num_warps, cfg.num_stages],
                         "shared": int(k.metadata.shared), "limit": DEVICE_LIMITS[cap].smem_per_block})
print(json.dumps(rows))
"""


def _nope_fits(caps, shapes, kvs=("auto",)):
    env = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", NOPE_SCRIPT, json.dumps([caps, shapes, list(kvs)])], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    assert rows and all(x["shared"] <= x["limit"] for x in rows), rows
    return rows


def test_nope_head_512_tiles_fit_the_users_gpu_and_an_a100():
    """GLM-5.3-Flash's NoPE head (512 latent, no rope; index rows of 2176 = 2048 + 16 - 1 rounded up to 128): the
    planner's bf16 tiles at 8 heads, decode and prefill, compiled ahead of time for sm_120 and sm_80, fit."""
    assert len(_nope_fits([[12, 0], [8, 0]], [[1, 8], [4096, 8]])) >= 4


@pytest.mark.slow
def test_nope_head_512_tiles_fit_every_gpu_we_plan_for():
    """The same for sm_80/86/89/90/120 at 8 and 64 heads (TP 8 and TP 1 of a 64-head model)."""
    _nope_fits([[8, 0], [8, 6], [8, 9], [9, 0], [12, 0]], [[1, 8], [4096, 8], [1, 64], [4096, 64]])


def test_nope_head_fp8_tiles_fit_the_users_gpu_and_an_a100():
    """The NoPE head on its 528-byte fp8_ds_mla rows (the fp8 kernels at ``DR = 0``): the planner's tiles at 8 heads,
    decode and prefill, compiled ahead of time for sm_120 and sm_80 (software e4m3 decode), fit."""
    rows = _nope_fits([[12, 0], [8, 0]], [[1, 8], [4096, 8]], kvs=["fp8_ds_mla"])
    assert len(rows) >= 4 and {r["scales"] for r in rows} == {"fold"}


@pytest.mark.slow
def test_nope_head_fp8_tiles_fit_every_gpu_we_plan_for():
    """The same for sm_80/86/89/90/120 at 8 and 64 heads; at 64 heads on sm_90 the planner picks the "registers"
    variant (its wgmma tile), elsewhere "fold": both variants build at ``DR = 0``."""
    rows = _nope_fits([[8, 0], [8, 6], [8, 9], [9, 0], [12, 0]], [[1, 8], [4096, 8], [1, 64], [4096, 64]],
                      kvs=["fp8_ds_mla"])
    assert {r["scales"] for r in rows} == {"fold", "registers"}
    print("\n" + "\n".join(json.dumps(r) for r in rows))
