"""The indexer kernels compiled ahead of time (no GPU) for sm_80, sm_86, sm_89, sm_90 and sm_120: every default launch
fits the GPU's shared memory without register spills; sm_80/86 builds use fp16 tensor-core MMAs and no fp8 conversion
instruction (Triton cannot emit one there), sm_89+ use e4m3 MMAs; the q quantization compiles everywhere, while vLLM's
own kernel (fp8 stores) does not compile below SM89 -- the reason ours exists. Runs in subprocesses with
``TRITON_INTERPRET=0`` (this process runs Triton's interpreter).

What the sm_80 builds use (the benchmark record and notebook 03 cite this): ``mma.sync.aligned.m16n8k16.row.col
.f32.f16.f16.f32``, ``cp.async`` pipelined loads, no ``cvt ... e4m3x2``, 16.9-43 KB of shared memory, 96-168
registers, no spills (``sparse_mla.kernels.indexer_build.build_report``).
"""
import json
import os
import subprocess
import sys

import pytest

from sparse_mla.kernels.indexer_build import CAPABILITIES, CASES


@pytest.fixture(scope="module")
def builds():
    """The default builds per GPU, plus the SM80 paths compiled for sm_90 (a simulated SM80 on the H200)."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    script = ("import json\n"
              "from sparse_mla.kernels.indexer_build import build_report, describe, CASES\n"
              "rows = build_report()\n"
              "rows += [describe(k, (9, 0), h, n, config_capability=(8, 0)) for k, h, n in CASES]\n"
              "print(json.dumps(rows))\n")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _rows(builds, cap, path_of=None):
    return [r for r in builds if r["capability"] == cap and r["path_of"] == (path_of or cap)]


def test_every_build_fits_and_does_not_spill(builds):
    assert len(builds) == len(CAPABILITIES) * len(CASES) + len(CASES)
    for r in builds:
        assert r["fits"], r
        assert r["spill_bytes"] in (0, None), r
        if r["kernel"] != "q_quant":
            assert r["cp_async"], r                     # the key loads are pipelined (cp.async), not plain loads


@pytest.mark.parametrize("cap", ["8.0", "8.6"])
def test_ampere_builds_use_fp16_mma_and_no_fp8_conversion(cap, builds):
    for r in _rows(builds, cap):
        assert not r["fp8_cvt"], r
        if r["kernel"] == "q_quant":
            assert r["dot"] == "sw-store"
        else:
            assert r["dot"] == "fp16" and r["mma"] == "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", r


@pytest.mark.parametrize("cap, mma", [("8.9", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"),
                                      ("12.0", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"),
                                      ("9.0", "wgmma.mma_async.sync.aligned.m64n")])
def test_fp8_gpus_use_e4m3_mma(cap, mma, builds):
    for r in _rows(builds, cap):
        if r["kernel"] == "q_quant":
            assert r["fp8_cvt"] and r["dot"] == "hw-store"
        else:
            assert r["dot"] == "fp8" and r["mma"].startswith(mma) and "e4m3.e4m3" in r["mma"], r


def test_the_sm80_path_builds_for_the_h200(builds):
    """What a simulated SM80 runs on the H200: fp16 dots (wgmma f16 for the 64-row tiles), software fp8 stores."""
    rows = _rows(builds, "9.0", "8.0")
    assert len(rows) == len(CASES)
    for r in rows:
        assert not r["fp8_cvt"], r
        if r["kernel"] != "q_quant":
            assert r["dot"] == "fp16" and ".f16" in r["mma"], r


VLLM_SCRIPT = r"""
import json, torch, triton
import sparse_mla
from sparse_mla.diagnose.probe import load_vllm_extensions
load_vllm_extensions()
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import vllm.model_executor.layers.sparse_attn_indexer as sai
K = sai._fused_indexer_q_rope_quant_kernel
sig = {n: "i32" for n in K.arg_names}
sig.update(positions="*i64", q="*bf16", cos_sin_cache="*bf16", q_fp8="*fp8e4nv", weights="*bf16",
           weights_out="*fp32", softmax_scale="fp32", head_scale="fp32")
consts = dict(fp8_min=-448.0, fp8_max=448.0, is_neox=False)
sig.update({n: "constexpr" for n in consts})
out = {}
for cap in (80, 86, 89):
    src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index(n),): v for n, v in consts.items()})
    try:
        triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"num_warps": 1})
        out[cap] = "ok"
    except Exception as e:
        out[cap] = str(e).strip().splitlines()[-1]
print(json.dumps(out))
"""


@pytest.mark.slow   # default tier's budget (2026-12-07: a fresh process, ~7 s); .ci/run's slow tier runs it
def test_vllm_q_quant_kernel_does_not_build_below_sm89():
    env = dict(os.environ, TRITON_INTERPRET="0")
    r = subprocess.run([sys.executable, "-c", VLLM_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert "fp8e4nv not supported" in got["80"] and "fp8e4nv not supported" in got["86"]
    assert got["89"] == "ok"
