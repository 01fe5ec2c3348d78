"""The GPUs the workbook names and plans for, in one module: the named presets (``--capability NAME``: compute
capability and memory) and the per-SM limits the launch plan uses for a GPU it plans ahead of time (CUDA programming
guide, "Compute capabilities" table). The diagnosis (:mod:`sparse_mla.diagnose.request`) and the kernels' plan
(:mod:`sparse_mla.kernels.occupancy`) read them from here.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPreset:
    """A named GPU: its CUDA compute capability and its memory."""

    capability: str      # "major.minor"
    memory_mib: int      # memory.total as nvidia-smi reports it (MiB), see GPUS
    note: str

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


#: The named GPUs (``--capability NAME``): the one home of their capability and memory. ``memory_mib`` is
#: ``memory.total`` as ``nvidia-smi`` prints it (``97887MiB`` on an RTX PRO 6000 Blackwell, in public nvidia-smi
#: output of each card; ECC on where data-centre cards ship with it on). vLLM multiplies CUDA's total
#: (``torch.cuda.mem_get_info``) by ``gpu_memory_utilization``, which is a few hundred MiB lower than nvidia-smi's
#: (memory the driver keeps); the memory stage's allowance covers that (:mod:`.memory`).
GPUS: dict[str, GpuPreset] = {
    "rtx-pro-6000": GpuPreset("12.0", 97887, "RTX PRO 6000 Blackwell (Workstation, Max-Q, Server Edition), 96 GB"),
    "rtx-5090": GpuPreset("12.0", 32607, "GeForce RTX 5090, 32 GB"),
    "b200": GpuPreset("10.0", 183359, "B200, 180 GB"),
    "h100": GpuPreset("9.0", 81559, "H100 80GB HBM3"),
    "h200": GpuPreset("9.0", 143771, "H200, 141 GB"),
    "a100": GpuPreset("8.0", 81920, "A100 80GB (SXM4, PCIe); the 40 GB A100 (40960 MiB): --gpu-memory-gib 40"),
    "l40s": GpuPreset("8.9", 46068, "L40S, 48 GB, ECC on"),
    "rtx-4090": GpuPreset("8.9", 24564, "GeForce RTX 4090, 24 GB"),
    "rtx-3090": GpuPreset("8.6", 24576, "GeForce RTX 3090, 24 GB"),
    "a40": GpuPreset("8.6", 46068, "A40, 48 GB, ECC on (49140 MiB with ECC off)"),
    "gb10": GpuPreset("12.1", 124611, "GB10 (DGX Spark): 128 GB shared with the CPU; nvidia-smi reports no total, "
                                      "CUDA reports 121.69 GiB (the number given here)"),
}

#: Named GPUs accepted as ``capability`` (CUDA compute capability ``major.minor``), from :data:`GPUS`.
GPU_PRESETS: dict[str, str] = {name: gpu.capability for name, gpu in GPUS.items()}


@dataclass(frozen=True)
class DeviceLimits:
    """What bounds the programs resident on one SM (CUDA programming guide, "Compute capabilities" table), and the
    SM count. At run time :func:`device_limits` reads them from the device; :data:`DEVICE_LIMITS` holds them for
    GPUs planned ahead of time."""

    sm_count: int
    smem_per_sm: int               # bytes of shared memory the blocks on one SM can use together
    smem_per_block: int            # opt-in maximum of one block
    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    smem_reserved_per_block: int = 1024   # the driver's per-block reservation (SM80 and later)


#: Limits per capability, with the SM count of one GPU each (A100, RTX A6000, L40S, H100/H200 SXM, B200, RTX PRO 6000).
DEVICE_LIMITS = {(8, 0): DeviceLimits(108, 167936, 166912, 65536, 2048, 32),
                 (8, 6): DeviceLimits(84, 102400, 101376, 65536, 1536, 16),
                 (8, 9): DeviceLimits(142, 102400, 101376, 65536, 1536, 24),
                 (9, 0): DeviceLimits(132, 233472, 232448, 65536, 2048, 32),
                 (10, 0): DeviceLimits(148, 233472, 232448, 65536, 2048, 32),
                 (12, 0): DeviceLimits(188, 102400, 101376, 65536, 1536, 32)}
#: The interpreter's stand-in device (programs run one after another anyway).
CPU_LIMITS = DeviceLimits(8, 232448, 232448)
