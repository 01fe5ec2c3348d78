"""A capability simulation runs the simulated GPU's code: every kernel the engine launches, generated for SM80, SM89
or SM120 and assembled for the live H200's sm_90a, as Triton does under ``TRITON_OVERRIDE_ARCH`` (what
``tools/gpu/simulate_capability`` sets).

Compiled on the CPU (a ``GPUTarget`` of 9.0 and the simulated GPU's ``arch``: ``kernels.aot.compile_options``), each
kernel must show it: its metadata says it was generated for the simulated architecture and assembled for sm_90 (the
cubin exists, ptxas accepted it), its PTX targets ``sm_90a`` and has no ``wgmma`` (Hopper's MMA: an SM80 or SM120
never issues it), and the fp8 kernels convert e4m3 in hardware exactly where the simulated GPU can (SM89 and up; SM80
decodes in software). Compared with the same kernels generated for sm_90 itself, which do use ``wgmma`` for the
64-head tile: the check can fail.
"""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys, torch
from sparse_mla.kernels import aot, indexer_build
from sparse_mla.kernels.indexer import paged_config, prefill_config
from sparse_mla.kernels.launch_plan import LaunchConfig
from sparse_mla.kernels.fp8 import has_fp8_conversion
from sparse_mla.vllm_plugin.ran import triton_binaries, triton_targets

gen = tuple(json.loads(sys.argv[1]))
live = (9, 0)
cpu = torch.device("cpu")
hw = has_fp8_conversion(gen)
built = {}
for name, kv, scales in (("_sparse_mla_fwd_kernel", "auto", "fold"), ("_sparse_mla_fp8_fwd_kernel", "fp8_ds_mla", "fold"),
                         ("_sparse_mla_fp8_registers_fwd_kernel", "fp8_ds_mla", "registers")):
    cfg = LaunchConfig(64, 64 if kv == "auto" else 32, 512, 2, 8, 2, torch.bfloat16, kv, fp8_hw=hw and kv != "auto",
                       fp8_scales=scales)
    built["attention." + name] = aot.compile_for(cfg, torch.bfloat16, live, generate_for=gen)
built["attention._merge_splits_kernel"] = aot.compile_merge_for(live, generate_for=gen)
built["indexer._prefill_logits_kernel"] = indexer_build.compile_for(
    "prefill", live, prefill_config(4096, 32768, 32, cpu, gen), generate_for=gen)
built["indexer._paged_logits_kernel"] = indexer_build.compile_for(
    "paged", live, paged_config(32, 1, 32, 64, 131072, cpu, gen), generate_for=gen)
built["indexer_quant._indexer_q_rope_quant_kernel"] = indexer_build.compile_for("q_quant", live, generate_for=gen)
built["fused_q._fused_q_kernel"] = indexer_build.compile_stand_in("fused_q", live, generate_for=gen)
built["indexer_k_cache._indexer_k_cache_kernel"] = indexer_build.compile_stand_in("k_cache", live, generate_for=gen)
from sparse_mla.kernels.kpool_build import compile_kpool          # GLM-5.3-Flash's KPool fp8-store stand-ins
built["kpool_quant._fwht_quant_kernel"] = compile_kpool("fwht", live, generate_for=gen)
built["kpool_cache._kpool_compress_kernel"] = compile_kpool("compress", live, generate_for=gen)
built["kpool_cache._kpool_decode_kernel"] = compile_kpool("decode", live, generate_for=gen)
out = {}
for name, k in built.items():
    ptx = k.asm["ptx"]
    out[name] = {"arch": k.metadata.arch, "target": k.metadata.target.arch, "cubin": len(k.asm["cubin"]),
                 "ptx_target": [l.split()[1] for l in ptx.splitlines() if l.startswith(".target")][0],
                 "wgmma": "wgmma" in ptx, "mma_sync": "mma.sync" in ptx, "e4m3_cvt": "e4m3x2" in ptx}
# what the ran block reads off Triton's caches (vllm_plugin.ran), on these compiled kernels
fakes = {n: type("K", (), {"device_caches": {0: ({"k": k}, None)}})() for n, k in built.items()}
out["_ran"] = {"targets": triton_targets(fakes), "binaries": triton_binaries(fakes)}
print(json.dumps(out))
"""

#: The kernels an engine launches (our attention backend and indexer); ``fp8._roundtrip_kernel`` (a test kernel of
#: the e4m3 helpers) and ``simple._simple_kernel`` (notebook 02's teaching kernel) never run in vLLM.
NOT_IN_ENGINES = {"fp8._roundtrip_kernel", "simple._simple_kernel"}


def _build(gen):
    env = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TRITON_OVERRIDE_ARCH", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(gen)], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def engine_kernels():
    """The ``*_kernel`` functions of our kernel modules that an engine launches (read off the package, so a kernel
    added later must be added to this check)."""
    code = ("import os; os.environ['TRITON_INTERPRET']='0'; from sparse_mla.vllm_plugin import ran; "
            "print(' '.join(n for n in ran.our_kernels() if n.endswith('_kernel')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-2000:]
    return set(r.stdout.split()) - NOT_IN_ENGINES


@pytest.mark.slow
@pytest.mark.parametrize("gen", [(8, 0), (8, 9), (12, 0)])
def test_every_engine_kernel_is_the_simulated_gpus_code_assembled_for_sm90a(gen, engine_kernels):
    got = _build(gen)
    ran = got.pop("_ran")
    assert set(got) == engine_kernels
    arch = f"sm{gen[0] * 10 + gen[1]}"
    for name, k in got.items():
        assert k["arch"] == arch and k["target"] == 90, (name, k)       # generated for the simulated GPU, for sm_90
        assert k["cubin"] > 0 and k["ptx_target"] == "sm_90a", (name, k)   # and assembled by ptxas for the H200
        assert not k["wgmma"], (name, k)                                # no Hopper MMA in an SM80/89/120 program
    fp8 = ["attention._sparse_mla_fp8_fwd_kernel", "attention._sparse_mla_fp8_registers_fwd_kernel",
           "indexer_quant._indexer_q_rope_quant_kernel", "fused_q._fused_q_kernel",
           "indexer_k_cache._indexer_k_cache_kernel"]
    assert all(got[n]["e4m3_cvt"] is (gen >= (8, 9)) for n in fp8), {n: got[n] for n in fp8}
    assert got["attention._sparse_mla_fwd_kernel"]["mma_sync"]
    # the ran block reports the generated architecture per kernel, and the architecture the cubins are for
    assert ran["targets"] == {n: [arch] for n in got} and ran["binaries"] == ["sm90"]


@pytest.mark.slow
def test_the_same_kernels_generated_for_sm90_use_wgmma():
    """The control: the 64-head attention tile generated for sm_90 itself issues wgmma, so the check above can fail."""
    got = _build((9, 0))
    got.pop("_ran")
    assert got["attention._sparse_mla_fwd_kernel"]["wgmma"] and got["attention._sparse_mla_fwd_kernel"]["arch"] == "sm90"
