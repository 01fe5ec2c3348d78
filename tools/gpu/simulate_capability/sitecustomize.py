"""Test harness, never product code: every Python process started with this folder on ``PYTHONPATH`` and
``SPARSE_MLA_SIMULATED_CAPABILITY=8.0`` (any ``major.minor``) sees that compute capability from vLLM's CUDA platform,
and Triton generates that GPU's code (``TRITON_OVERRIDE_ARCH=sm80``, Triton's own knob: its TTGIR and LLVM stages
follow it, ptxas assembles the result for the live GPU, ``triton/backends/nvidia/compiler.py``), unless
``TRITON_OVERRIDE_ARCH`` is set already.

Python imports ``sitecustomize`` at start-up from the first folder on ``sys.path`` that has one, so vLLM's engine-core
and worker processes (spawned interpreters that inherit the environment) are covered too. Nothing is imported here:
a ``sys.meta_path`` finder waits for ``vllm.platforms.cuda`` and, right after it has executed, replaces
``get_device_capability`` of ``CudaPlatformBase``, ``NvmlCudaPlatform`` and ``NonNvmlCudaPlatform`` (vLLM's capability
checks -- ``has_device_capability``, ``is_device_capability(_family)``, ``support_deep_gemm``, the attention selector's
priority lists -- all go through it). ``torch.cuda.get_device_capability`` is left alone: vLLM 0.26.0 reads it directly
only for decisions a GLM-5 run does not depend on (PDL for DeepGEMM, a tile size of the non-MLA Triton cache writer,
FA4/CuTe paths). See README.md.

One decision of vLLM's is bent, and only where the live machine cannot follow it: with an SM8x/SM12x capability,
``get_flash_attn_version`` (``v1/attention/backends/fa_utils.py``) chooses FlashAttention 2 for the dense-MHA prefill
of prompts no longer than ``index_topk``; a vLLM build without FA2 (the H200 bundle ships FA3 only) then returns
``None`` and the prefill dies in ``_vllm_fa2_C.varlen_fwd`` (H200, 2026-12-03). Where FA2 is absent, FA3 is present
and torch's device is SM90, the version becomes 3 (FA3's own kernel, built for the live GPU, like every other compiled
vLLM kernel the simulation runs); the ``ran`` block shows it (``mla_prefill``). With FA2 present nothing changes.
"""
import os
import sys

_ENV = "SPARSE_MLA_SIMULATED_CAPABILITY"
_TARGET = "vllm.platforms.cuda"
_FA_UTILS = "vllm.v1.attention.backends.fa_utils"


def _parse(value):
    major, _, minor = value.strip().partition(".")
    return int(major), int(minor or 0)


def _patch(module, capability):
    from vllm.platforms.interface import DeviceCapability

    cap = DeviceCapability(*capability)

    def get_device_capability(cls, device_id=0):
        return cap

    for name in ("CudaPlatformBase", "NvmlCudaPlatform", "NonNvmlCudaPlatform"):
        cls = module.__dict__.get(name)
        if cls is not None:
            cls.get_device_capability = classmethod(get_device_capability)
    module.SPARSE_MLA_SIMULATED_CAPABILITY = capability


def _live_needs_fa3():
    """True where this vLLM build lacks FlashAttention 2, has FA3, and torch's device is SM90."""
    import torch
    from vllm.vllm_flash_attn import flash_attn_interface as fa

    return (not fa.FA2_AVAILABLE and fa.FA3_AVAILABLE and torch.cuda.is_available()
            and torch.cuda.get_device_capability()[0] == 9)


def _patch_fa_utils(module, capability):
    chosen = module.get_flash_attn_version

    def get_flash_attn_version(*args, **kwargs):
        version = chosen(*args, **kwargs)
        if version in (None, 2) and _live_needs_fa3():
            return 3
        return version

    module.get_flash_attn_version = get_flash_attn_version


_PATCHES = {_TARGET: _patch, _FA_UTILS: _patch_fa_utils}


class _Loader:
    def __init__(self, inner, capability, patch):
        self._inner, self._capability, self._patch = inner, capability, patch

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._patch(module, self._capability)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Finder:
    def __init__(self, capability):
        self._capability = capability

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, self._capability, _PATCHES[fullname])
                return spec
        return None


def _install():
    value = os.environ.get(_ENV, "").strip()
    if not value:
        return
    try:
        capability = _parse(value)
    except ValueError:
        sys.stderr.write(f"sitecustomize: {_ENV}={value!r} is not major.minor (e.g. 8.0); ignored\n")
        return
    # Triton reads the knob when it compiles; the engine's processes inherit it (and set it again, here, anyway)
    os.environ.setdefault("TRITON_OVERRIDE_ARCH", f"sm{capability[0] * 10 + capability[1]}")
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name], capability)
    if not all(name in sys.modules for name in _PATCHES):
        sys.meta_path.insert(0, _Finder(capability))


_install()
