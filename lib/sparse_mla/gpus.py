"""The GPUs the workbook names and plans for, in one module: the named presets (``--capability NAME``: compute
capability and memory) and the per-SM limits the launch plan uses for a GPU it plans ahead of time (CUDA programming
guide, "Compute capabilities" table). The diagnosis (:mod:`sparse_mla.diagnose.request`) and the kernels' plan
(:mod:`sparse_mla.kernels.occupancy`) read them from here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPreset:
    """A named GPU: its CUDA compute capability, its memory and the SM counts of the cards whose name holds it."""

    capability: str      # "major.minor"
    memory_mib: int      # memory.total as nvidia-smi reports it (MiB), see GPUS
    note: str
    sms: int | None = None                    # multiProcessorCount of the card the note names (see GPUS); None unknown
    variants: tuple[tuple[str, int], ...] = ()    # (a word of another card's name, its SMs): ("PCIE", 114)
    mig: bool = False                         # partitions into MIG slices (NVIDIA's MIG user guide, supported GPUs)

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    def sm_count(self, gpu: str) -> int | None:
        """The SMs of the card named ``gpu`` (a name holding this preset's, ``torch.cuda.get_device_name()``): the
        first variant whose word the name holds (any case), else :attr:`sms`. A MIG slice's name (:data:`MIG_SLICE`)
        gives its whole GPU's, the most the slice may have."""
        words = set(name_words(gpu))
        return next((n for word, n in self.variants if word in words), self.sms)


#: The named GPUs (``--capability NAME``): the one home of their capability and memory. ``memory_mib`` is
#: ``memory.total`` as ``nvidia-smi`` prints it (``97887MiB`` on an RTX PRO 6000 Blackwell, in public nvidia-smi
#: output of each card; ECC on where data-centre cards ship with it on). vLLM multiplies CUDA's total
#: (``torch.cuda.mem_get_info``) by ``gpu_memory_utilization``, which is a few hundred MiB lower than nvidia-smi's
#: (memory the driver keeps); the memory stage's allowance covers that (:mod:`.memory`). ``sms`` (and ``variants``,
#: other cards whose name holds the preset's as a word: ``NVIDIA H100 PCIe``) is what
#: ``torch.cuda.get_device_properties(0).multi_processor_count`` reads: NVIDIA's specifications, CUDA cores over the
#: cores per SM (64 on the A100, 128 on the others); ``records check`` holds a header's ``sm_count`` to it.
GPUS: dict[str, GpuPreset] = {
    "rtx-pro-6000": GpuPreset("12.0", 97887, "RTX PRO 6000 Blackwell (Workstation, Max-Q, Server Edition), 96 GB",
                              188, mig=True),
    "rtx-5090": GpuPreset("12.0", 32607, "GeForce RTX 5090, 32 GB", 170, (("LAPTOP", 82),)),   # 5090 D: 170 too
    "b200": GpuPreset("10.0", 183359, "B200, 180 GB", 148, mig=True),
    "h100": GpuPreset("9.0", 81559, "H100 80GB HBM3", 132, (("PCIE", 114),), mig=True),      # NVL: 132 too
    "h200": GpuPreset("9.0", 143771, "H200, 141 GB", 132, mig=True),                         # NVL: 132 too
    "a100": GpuPreset("8.0", 81920, "A100 80GB (SXM4, PCIe); the 40 GB A100 (40960 MiB): --gpu-memory-gib 40", 108,
                      mig=True),
    "l40s": GpuPreset("8.9", 46068, "L40S, 48 GB, ECC on", 142),
    "rtx-4090": GpuPreset("8.9", 24564, "GeForce RTX 4090, 24 GB", 128, (("D", 114), ("LAPTOP", 76))),
    "rtx-3090": GpuPreset("8.6", 24576, "GeForce RTX 3090, 24 GB", 82, (("TI", 84),)),
    "a40": GpuPreset("8.6", 46068, "A40, 48 GB, ECC on (49140 MiB with ECC off)", 84),
    "gb10": GpuPreset("12.1", 124611, "GB10 (DGX Spark): 128 GB shared with the CPU; nvidia-smi reports no total, "
                                      "CUDA reports 121.69 GiB (the number given here)", 48),
}

#: How a GPU's name begins as a header holds it: the NVIDIA driver's product name, which
#: ``torch.cuda.get_device_properties(0).name`` reads (:func:`sparse_mla.records.environment`): ``NVIDIA H200``,
#: ``NVIDIA H100 80GB HBM3``, ``NVIDIA GeForce RTX 4090``, ``NVIDIA A100-SXM4-80GB``. A preset's name (``h100``) or a
#: file-name form (:func:`sparse_mla.records.gpu_slug`) is none.
DEVICE_NAME_PREFIX = "NVIDIA "
#: The brand the driver puts before a consumer card's product (``NVIDIA GeForce RTX 4090``), and only there; a preset
#: whose ``note`` starts with it is such a card.
GEFORCE = "GeForce "


def device_name_preset(gpu) -> str | None:
    """The preset (a key of :data:`GPUS`) that ``gpu`` is a driver's product name of, or None: the driver writes
    :data:`DEVICE_NAME_PREFIX`, ``GeForce `` on consumer cards, then the product, whose first words are the preset's in
    upper case (``NVIDIA H200``, ``NVIDIA H100 PCIe``, ``NVIDIA A100-SXM4-80GB``, ``NVIDIA GeForce RTX 4090 D``,
    ``NVIDIA RTX PRO 6000 Blackwell Server Edition``), a MIG slice its whole GPU's (:func:`mig_parent`). Issue 47,
    round 13 (r46, r47): ``NVIDIA h200`` and ``NVIDIA Fake H200 Clone`` held a preset as a word and were accepted;
    round 14 (t88-t96): ``GeForce`` on a data-centre card or missing on a consumer one, a profile twice or in other
    case, a trailing line break; round 15 (u40, u46, u47): an engine suffix twice, a slice of a card without MIG
    (:attr:`GpuPreset.mig`)."""
    if not isinstance(gpu, str) or not gpu.startswith(DEVICE_NAME_PREFIX) or gpu != gpu.strip():
        return None
    parent, slice_ = mig_parent(gpu)
    if "MIG" in parent.upper().split() or not parent.isprintable():   # one slice's profile, once, as the driver
        return None                                                      # writes it; no line breaks
    product = parent[len(DEVICE_NAME_PREFIX):]
    for key, preset in GPUS.items():
        brand = GEFORCE if preset.note.startswith(GEFORCE) else ""      # the note names a consumer card's brand
        if re.match(re.escape(brand + key.upper().replace("-", " ")) + r"(?:\Z|[ -])", product):
            return key if preset.mig or not slice_ else None            # a slice only of a GPU that has MIG
    return None


#: How a MIG slice's name ends: the driver names a MIG instance by its GPU's name and its profile, which
#: ``torch.cuda.get_device_properties(0).name`` reads with the slice's own ``multi_processor_count`` (JAX's GPU
#: table: ``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` with 16 SMs, ``NVIDIA B200 MIG 1g.23gb`` with 18; NVIDIA's MIG user
#: guide names the profiles ``MIG <g>g.<mem>gb``, those with the media engines ``+me``, a compute instance smaller
#: than its GPU instance ``<c>c.<g>g.<mem>gb``, as in an OpenCL listing's ``A100-SXM4-40GB MIG 4c.7g.40gb``). Later
#: drivers' other engine suffixes (``-me``, ``+me.all``, ``+gfx``: named by round 14's breaker from NVIDIA's guide,
#: not seen here) are taken in the same form, ``+`` or ``-`` and lower-case words. Case as the driver writes it. The
#: slice has its GPU's capability and at most its SMs; which SMs a profile has is not tabled here.
MIG_SLICE = re.compile(r" MIG (?:\d+c\.)?\d+g\.\d+gb(?:[+-][a-z]+(?:\.[a-z]+)?)?\Z")


def mig_parent(gpu: str) -> tuple[str, bool]:
    """``(name of the whole GPU, whether gpu names a MIG slice of it)``: ``"NVIDIA H100 80GB HBM3 MIG 1g.10gb"`` ->
    ``("NVIDIA H100 80GB HBM3", True)``; any other name is its own GPU's (:data:`MIG_SLICE`)."""
    parent = MIG_SLICE.sub("", gpu)
    return parent, parent != gpu


def name_words(gpu: str) -> list[str]:
    """The words of a GPU's name as presets and variants are matched against it, in upper case, punctuation dropped;
    a MIG slice's, its whole GPU's (:func:`mig_parent`): ``"NVIDIA A100-SXM4-80GB MIG 1g.10gb"`` -> ``["NVIDIA",
    "A100", "SXM4", "80GB"]``."""
    return re.sub(r"[^A-Z0-9]+", " ", mig_parent(gpu)[0].upper()).split()


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
