"""The simulated-capability harness (``tools/gpu/simulate_capability``): in a fresh interpreter started with the
folder on ``PYTHONPATH``, vLLM's CUDA platform classes report the simulated capability, and vLLM's own rules follow
it; without the variable nothing is patched. CPU only (vLLM's CUDA extensions are stubbed as the diagnosis does)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "simulate_capability"
LIB = Path(__file__).resolve().parents[2] / "lib"

SCRIPT = r"""
import json, sys
import torch
import sparse_mla
from sparse_mla.diagnose.probe import load_vllm_extensions
load_vllm_extensions()
import vllm.platforms.cuda as c
out = {"patched": getattr(c, "SPARSE_MLA_SIMULATED_CAPABILITY", None),
       "sitecustomize": sys.modules["sitecustomize"].__file__ if "sitecustomize" in sys.modules else None}
if out["patched"]:
    out["caps"] = [list(k.get_device_capability()) for k in (c.CudaPlatformBase, c.NvmlCudaPlatform, c.NonNvmlCudaPlatform)]
    out["deep_gemm"] = c.CudaPlatform.support_deep_gemm()
    out["has_90"] = c.CudaPlatform.has_device_capability(90)
print(json.dumps(out))
"""


def _run(value):
    env = {k: v for k, v in os.environ.items() if k != "SPARSE_MLA_SIMULATED_CAPABILITY"}
    # the harness first; whatever PYTHONPATH the machine sets after it (the GPU bundle puts vLLM there)
    env["PYTHONPATH"] = os.pathsep.join([str(HARNESS), str(LIB), *filter(None, [os.environ.get("PYTHONPATH")])])
    if value is not None:
        env["SPARSE_MLA_SIMULATED_CAPABILITY"] = value
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("value, cap, deep_gemm", [("8.0", [8, 0], False),
                                                   pytest.param("9.0", [9, 0], True, marks=pytest.mark.slow)])
def test_platform_reports_the_simulated_capability(value, cap, deep_gemm):
    got = _run(value)
    assert got["sitecustomize"] == str(HARNESS / "sitecustomize.py")
    assert got["patched"] == cap
    assert got["caps"] == [cap, cap, cap]
    assert got["deep_gemm"] is deep_gemm          # vLLM's own rule (CudaPlatformBase.support_deep_gemm) follows
    assert got["has_90"] is (cap >= [9, 0])


def test_nothing_patched_without_the_variable():
    got = _run(None)
    assert got["patched"] is None



@pytest.mark.parametrize("value, arch", [("8.0", "sm80"), ("8.9", "sm89"), ("12.0", "sm120"), (None, None)])
def test_triton_generates_the_simulated_gpus_code(value, arch):
    """Under the harness Triton's own knob names the simulated GPU (its TTGIR/LLVM stages follow it; ptxas assembles
    for the live GPU: tests/kernels/test_generate_for.py compiles every engine kernel that way); without the
    variable it is unset. An arch the caller set already is kept."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE_MLA_SIMULATED_CAPABILITY", "TRITON_OVERRIDE_ARCH")}
    env["PYTHONPATH"] = os.pathsep.join([str(HARNESS), str(LIB), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["TRITON_INTERPRET"] = "0"
    if value is not None:
        env["SPARSE_MLA_SIMULATED_CAPABILITY"] = value
    code = ("import json, os, triton; print(json.dumps({'knob': triton.knobs.runtime.override_arch, "
            "'env': os.environ.get('TRITON_OVERRIDE_ARCH')}))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"knob": arch, "env": arch}
    if value is not None:
        r = subprocess.run([sys.executable, "-c", code], env={**env, "TRITON_OVERRIDE_ARCH": "sm86"},
                           capture_output=True, text=True, timeout=120)
        assert json.loads(r.stdout.strip().splitlines()[-1])["knob"] == "sm86"


FA_SCRIPT = r"""
import json, sys
import torch
import sparse_mla
from sparse_mla.diagnose.probe import load_vllm_extensions
load_vllm_extensions()
from vllm.vllm_flash_attn import flash_attn_interface as fa
# the machine the harness bends for: a build without FA2, with FA3, on an SM90 device (stand-ins on the CPU)
fa.FA2_AVAILABLE, fa.FA3_AVAILABLE = sys.argv[1] == "fa2", True
torch.cuda.is_available = lambda: True
torch.cuda.get_device_capability = lambda device=None: (9, 0)
from vllm.v1.attention.backends import fa_utils
# mla/prefill/flash_attn.py imports the function by name (its import needs CUDA-only names on the CPU)
from vllm.v1.attention.backends.fa_utils import get_flash_attn_version
print(json.dumps({"fa_utils": fa_utils.get_flash_attn_version(head_size=192, head_size_v=128),
                  "prefill": get_flash_attn_version(head_size=192, head_size_v=128)}))
"""


@pytest.mark.parametrize("value, build, version", [("12.0", "no-fa2", 3),     # the others: the slow tier (budget)
                                                   pytest.param("8.0", "fa2", None, marks=pytest.mark.slow),
                                                   pytest.param(None, "no-fa2", None, marks=pytest.mark.slow)])
def test_dense_prefill_takes_fa3_only_where_the_build_has_no_fa2(value, build, version):
    """vLLM's ``get_flash_attn_version`` (what the MLA dense prefill imports by name) answers 3 under the harness
    only where FA2 is missing from the build and the live device is SM90; otherwise vLLM's own answer stands (on the
    CPU it has no capability and answers None)."""
    env = {k: v for k, v in os.environ.items() if k != "SPARSE_MLA_SIMULATED_CAPABILITY"}
    env["PYTHONPATH"] = os.pathsep.join([str(HARNESS), str(LIB), *filter(None, [os.environ.get("PYTHONPATH")])])
    if value is not None:
        env["SPARSE_MLA_SIMULATED_CAPABILITY"] = value
    r = subprocess.run([sys.executable, "-c", FA_SCRIPT, build], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"fa_utils": version, "prefill": version}
