"""The attention kernel compiled ahead of time for any GPU target on a machine without one (``triton.compile`` with a
``GPUTarget``), and the resources the compiled kernel needs: shared memory from Triton's metadata, registers and
spills from the cubin. The launch plan reads them (:func:`sparse_mla.kernels.launch_plan.tile_resources`); the fit
tests compare them with each GPU's limits (:data:`SMEM_PER_BLOCK`).
"""
from __future__ import annotations

import os

import torch
import triton

from ..machine import interpreting
from .attention import kernel_for
from .occupancy import DEVICE_LIMITS

#: Shared memory per block (opt-in maximum, bytes) by compute capability, read off :data:`~sparse_mla.kernels.occupancy.
#: DEVICE_LIMITS` (the one table of device limits). At run time the device's own ``shared_memory_per_block_optin``
#: is what counts; this view serves ahead-of-time checks (tests/kernels/test_fit.py, kernels.indexer_build).
SMEM_PER_BLOCK = {cap: lim.smem_per_block for cap, lim in DEVICE_LIMITS.items()}


def compile_options(capability: tuple[int, int], generate_for: tuple[int, int] | None = None, **options) -> dict:
    """Triton compile options for a ``GPUTarget`` of ``capability``: ``options`` plus the architecture Triton
    generates code for, named explicitly (``"arch": "sm80"``) so that a ``TRITON_OVERRIDE_ARCH`` in the environment
    never changes what an ahead-of-time compile is for. ``generate_for`` (default ``capability``) other than
    ``capability``: Triton generates that GPU's code (its TTGIR and LLVM IR: ``mma.sync`` instead of ``wgmma``, no
    hardware e4m3 below SM89) and ptxas assembles it for ``capability`` -- what a capability simulation runs on the
    live GPU (``tools/gpu/simulate_capability``; Triton 3.6 ``backends/nvidia/compiler.py``: the ttir/ttgir/llir
    stages use ``options.arch``, the ptx/cubin stages the target)."""
    major, minor = generate_for or capability
    return {**options, "arch": f"sm{major * 10 + minor}"}


def compile_by_names(kernel, types: dict[str, str], consts: dict, capability: tuple[int, int],
                     generate_for: tuple[int, int] | None = None, **options):
    """``triton.compile`` of the ``@triton.jit`` function ``kernel`` for ``capability`` (``generate_for``:
    :func:`compile_options`), its arguments typed by name: ``consts`` the constexprs, ``types`` the pointer and float
    types (``"*u8"``, ``"fp32"``), every other argument ``i32``. Returns Triton's compiled kernel."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {n: "constexpr" if n in consts else types.get(n, "i32") for n in kernel.arg_names}
    src = ASTSource(fn=kernel, signature=sig,
                    constexprs={(kernel.arg_names.index(n),): v for n, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", capability[0] * 10 + capability[1], 32),
                          options=compile_options(capability, generate_for, **options))


def compile_for(cfg, dtype: torch.dtype, capability: tuple[int, int], split: bool | None = None,
                DL: int = 512, DR: int = 64, generate_for: tuple[int, int] | None = None,
                fp8_options: dict | None = None):
    """The attention kernel of launch config ``cfg`` (:class:`sparse_mla.kernels.launch_plan.LaunchConfig`; not imported
    here: the plan imports this module) compiled ahead of time for ``capability`` (no GPU needed: ``triton.compile``
    with a ``GPUTarget``), specialized as Triton's JIT specializes it at GLM-5 serving shapes: every pointer 16-byte aligned,
    the strides, ``H``, ``topk`` and the split chunk multiples of 16, ``lse``'s unit head stride a constant. Without
    these hints the gathers compile to scalar loads and the numbers (shared memory, registers) are not the launch's.
    ``generate_for``: the code of that GPU assembled for ``capability`` (:func:`compile_options`); ``fp8_options``:
    the fold fp8 kernel's options under measurement (:data:`sparse_mla.kernels.launcher.FP8_OPTIONS`), default off.
    Returns Triton's ``CompiledKernel`` (``.metadata.shared``, ``.asm["cubin"]``)."""
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if interpreting():
        raise RuntimeError("compile_for compiles for a GPU target; unset TRITON_INTERPRET (=0)")
    fp8 = cfg.kv_cache_dtype == "fp8_ds_mla"
    K = kernel_for(cfg.kv_cache_dtype, cfg.fp8_scales)
    tl_dtype = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    ptr = f"*{tl_dtype[dtype]}"
    types = {"Q_nope": ptr, "Q_pe": ptr, "KV": "*u8" if fp8 else ptr, "KV_f32": "*fp32", "KV_bf16": "*bf16",
             "Idx": "*i32", "Out": ptr, "Lse": "*fp32", "O_part": "*fp32", "Lse_part": "*fp32",
             "sm_scale_log2": "fp32"}
    sig = {n: types[n] for n in K.arg_names[:K.arg_names.index("sm_scale_log2") + 1]}
    pointers = list(sig)[:-1]
    sig.update({n: "i32" for n in K.arg_names[len(sig):K.arg_names.index("DL")]})
    not_multiple_of_16 = {"sm_scale_log2", "stride_lp_t", "stride_lp_h"}    # S-dependent
    consts = dict(DL=DL, DR=DR, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, BLOCK_DV=min(cfg.block_dv, DL),
                  SPLIT=cfg.split if split is None else split,
                  DOT_DTYPE={torch.bfloat16: tl.bfloat16, torch.float16: tl.float16,
                             torch.float32: tl.float32}[cfg.dot_dtype],
                  IEEE=cfg.dot_dtype == torch.float32, stride_l_h=1)
    if fp8:
        consts["FP8_HW"] = cfg.fp8_hw
    if "KEEP_CODES" in K.arg_names:      # the fold kernel's options: off, as the planned launch runs it, unless asked
        consts.update({"KEEP_CODES": False, "VEC_SCALES": False, **(fp8_options or {})})
    sig.update({k: "constexpr" for k in consts})
    attrs = {(K.arg_names.index(n),): [["tt.divisibility", 16]] for n in sig
             if n not in consts and n not in not_multiple_of_16}
    assert all((K.arg_names.index(n),) in attrs for n in pointers)
    src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index(k),): v for k, v in consts.items()},
                    attrs=attrs)
    major, minor = capability
    return triton.compile(src, target=GPUTarget("cuda", major * 10 + minor, 32),
                          options=compile_options(capability, generate_for, num_warps=cfg.num_warps,
                                                  num_stages=cfg.num_stages))


def compile_merge_for(capability: tuple[int, int], S: int = 4, DL: int = 512,
                      generate_for: tuple[int, int] | None = None):
    """The split-KV merge kernel (:func:`~sparse_mla.kernels.attention._merge_splits_kernel`) compiled ahead of time
    for ``capability`` as :func:`~sparse_mla.kernels.launcher.launch` launches it (bf16 output, ``S`` splits, 128-wide
    column blocks, 4 warps); ``generate_for`` as in :func:`compile_options`."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .attention import _merge_splits_kernel as K

    if interpreting():
        raise RuntimeError("compile_merge_for compiles for a GPU target; unset TRITON_INTERPRET (=0)")
    ptrs = {"O_part": "*fp32", "Lse_part": "*fp32", "Out": "*bf16", "Lse": "*fp32"}
    consts = {"DL": DL, "BLOCK_S": triton.next_power_of_2(S), "BLOCK_D": min(DL, 128)}
    sig = {**ptrs, **{n: "i32" for n in K.arg_names if n not in ptrs and n not in consts},
           **{n: "constexpr" for n in consts}}
    attrs = {(K.arg_names.index(n),): [["tt.divisibility", 16]] for n in ptrs}
    src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index(k),): v for k, v in consts.items()},
                    attrs=attrs)
    major, minor = capability
    return triton.compile(src, target=GPUTarget("cuda", major * 10 + minor, 32),
                          options=compile_options(capability, generate_for, num_warps=4))


def kernel_resources(compiled) -> dict:
    """``{"shared": bytes, "regs": per thread, "stack": spill bytes per thread}`` of a compiled kernel: shared memory
    from Triton's metadata, registers and stack from the cubin (``cuobjdump --dump-resource-usage``, the tool Triton
    ships). Works for ahead-of-time compiles (no GPU); a kernel loaded on a GPU also has ``n_regs``."""
    import re
    import subprocess
    import tempfile

    shared = int(compiled.metadata.shared)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        text = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "--dump-resource-usage", path],
                              capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", text)
    if m is None:
        raise RuntimeError(f"no register count in cuobjdump's output: {text[-300:]!r}")
    return {"shared": shared, "regs": int(m[1]), "stack": int(m[2])}


def shared_memory_bytes(cfg, dtype: torch.dtype, capability: tuple[int, int], split: bool | None = None,
                        DL: int = 512, DR: int = 64) -> int:
    """Shared memory (bytes) of the attention kernel compiled ahead of time for ``capability``
    (:func:`compile_for`). Compare with :data:`SMEM_PER_BLOCK`."""
    return int(compile_for(cfg, dtype, capability, split, DL, DR).metadata.shared)
