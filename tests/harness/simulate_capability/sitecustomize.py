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
"""
import os
import sys

_ENV = "SPARSE_MLA_SIMULATED_CAPABILITY"
_TARGET = "vllm.platforms.cuda"


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


class _Loader:
    def __init__(self, inner, capability):
        self._inner, self._capability = inner, capability

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _patch(module, self._capability)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Finder:
    def __init__(self, capability):
        self._capability = capability

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, self._capability)
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
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET], capability)
    else:
        sys.meta_path.insert(0, _Finder(capability))


_install()
