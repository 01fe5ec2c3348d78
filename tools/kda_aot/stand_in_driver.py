"""A stand-in Triton CUDA driver for a machine without a GPU (both scripts of this tool install it): vLLM's
``HAS_TRITON`` becomes true and Triton's JIT reaches its cache hook, which compiles nothing and launches nothing."""
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import driver as nvdrv


class StandInDriver:
    backend = "cuda"

    def get_current_device(self):
        return 0

    def set_current_device(self, d):
        pass

    def get_current_stream(self, d=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        return torch.device("cpu")

    def get_device_interface(self):
        return torch.cuda

    def is_active(self):
        return True

    def get_benchmarker(self):
        raise RuntimeError("no benchmarking on CPU")


def install() -> None:
    """Make vLLM see exactly one active Triton driver (CUDA), this one."""
    nvdrv.CudaDriver.is_active = staticmethod(lambda: True)
    triton.runtime.driver.set_active(StandInDriver())
