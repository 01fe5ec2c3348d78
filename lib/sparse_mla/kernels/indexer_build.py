"""The indexer kernels built ahead of time for GPUs that are not here: shared memory, registers, instructions.

Triton compiles for a ``GPUTarget`` without a GPU (``TRITON_INTERPRET`` unset or 0). :func:`compile_for` builds one
kernel as a launch from vLLM would specialise it (16-byte aligned pointers, ``tt.divisibility = 16`` on integer
arguments that are multiples of 16: without that, Triton neither vectorises nor pipelines the loads);
:func:`build_report` builds the default launches of :mod:`sparse_mla.kernels.indexer` and
:mod:`sparse_mla.kernels.indexer_quant` for several GPUs and says, per build, how much shared memory it takes (against
:data:`sparse_mla.kernels.aot.SMEM_PER_BLOCK`), which MMA instruction it uses, whether it converts fp8 in hardware
(``e4m3x2`` ``cvt`` instructions), and its registers and spills (read with the ``cuobjdump`` Triton bundles).

``python -m sparse_mla.kernels.indexer_build`` prints the report as JSON (what tests and notebook 03 run in a
subprocess, since their own process runs Triton's interpreter).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton

from ..machine import interpreting
from .aot import compile_options
from .indexer import (HEAD_DIM, IndexerConfig, _paged_logits_kernel, _prefill_logits_kernel,
                      paged_config, prefill_config)
from .indexer_quant import _indexer_q_rope_quant_kernel

#: GPUs of the report: Ampere (A100, RTX 30xx), Ada, Hopper, Blackwell workstation.
CAPABILITIES = ((8, 0), (8, 6), (8, 9), (9, 0), (12, 0))
#: (kernel, index heads, next_n) built per GPU: GLM-5 (32 heads) and DeepSeek-V3.2 (64), decode with and without MTP.
CASES = (("prefill", 32, 1), ("prefill", 64, 1), ("paged", 32, 1), ("paged", 64, 1), ("paged", 32, 2),
         ("paged", 64, 2), ("q_quant", 32, 1))


def compile_for(kernel: str, capability: tuple[int, int], cfg: IndexerConfig | None = None, *, D: int = HEAD_DIM,
                ctx_2d: bool = True, ints: dict[str, int] | None = None, hw: bool | None = None,
                generate_for: tuple[int, int] | None = None):
    """Compile ``"prefill"``, ``"paged"`` (logits, launch ``cfg``) or ``"q_quant"`` (``hw``: hardware fp8 stores,
    default from the capability generated for) for ``capability``. ``ints`` overrides the integer arguments' example
    values (GLM-5-like strides, odd sizes) that decide the divisibility hints. ``generate_for``: that GPU's code
    assembled for ``capability`` (:func:`sparse_mla.kernels.aot.compile_options`). Returns Triton's compiled kernel:
    ``.metadata.shared`` (bytes), ``.asm["ptx"]``, ``.asm["ttgir"]``, ``.asm["cubin"]``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .fp8 import E4M3_MAX, has_fp8_conversion

    if interpreting():
        raise RuntimeError("compile_for compiles for a GPU target; unset TRITON_INTERPRET (=0)")
    options = {}
    if kernel == "q_quant":
        K = _indexer_q_rope_quant_kernel
        ptrs = {"positions": "*i64", "q": "*bf16", "cos_sin_cache": "*bf16", "q_fp8": "*u8", "weights": "*bf16",
                "weights_out": "*fp32"}
        floats = {"softmax_scale": "fp32", "head_scale": "fp32"}
        consts = dict(fp8_min=-E4M3_MAX, fp8_max=E4M3_MAX, is_neox=False,
                      HW=has_fp8_conversion(generate_for or capability) if hw is None else hw, SOFT_BF16=False)
        values = dict(q_s0=32 * 128, q_s1=128, cos_sin_s0=64, q_fp8_s0=32 * 128, q_fp8_s1=128, weights_s0=32,
                      weights_s1=1, weights_out_s0=32, weights_out_s1=1)
        options = {"num_warps": 1}
    else:
        if cfg is None:
            raise ValueError("a launch configuration (IndexerConfig) is needed for the logits kernels")
        H = cfg.block_h
        floats = {}
        options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        if kernel == "prefill":
            K = _prefill_logits_kernel
            ptrs = {"Q": "*u8", "K": "*u8", "KScale": "*fp32", "W": "*fp32", "KS": "*i32", "KE": "*i32",
                    "Out": "*fp32"}
            consts = dict(D=D, BLOCK_M=cfg.block_m, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, DOT=cfg.dot,
                          HW=cfg.hw)
            # M, N and SPLITS are do_not_specialize in the kernel (never hinted); the strides are
            values = dict(M=4095, N=32767, H=H, SPLITS=3, stride_qm=H * D, stride_qh=D, stride_kn=D, stride_wm=H,
                          stride_om=32768)
        elif kernel == "paged":
            K = _paged_logits_kernel
            ptrs = {"Q": "*u8", "KV": "*u8", "KVScale": "*fp32", "W": "*fp32", "Ctx": "*i32", "BT": "*i32",
                    "Out": "*fp32"}
            consts = dict(D=D, BS=cfg.block_n, BLOCK_NN=cfg.block_m, BLOCK_H=cfg.block_h, CTX_2D=ctx_2d,
                          DOT=cfg.dot, HW=cfg.hw)
            bs = cfg.block_n
            values = dict(H=H, NEXT_N=3, MAX_LEN=131071, MAX_BLOCKS=2047, SPLITS=5, stride_qb=3 * H * D,
                          stride_qn=H * D, stride_qh=D, stride_kvb=bs * (D + 4), stride_kvsb=bs * (D + 4) // 4,
                          stride_wr=H, stride_cb=3, stride_btb=2048, stride_or=131072)
        else:
            raise ValueError(f"kernel {kernel!r}: 'prefill', 'paged' or 'q_quant'")
    values.update(ints or {})
    sig = dict(ptrs)
    sig.update(floats)
    sig.update({n: "i32" for n in K.arg_names if n not in sig and n not in consts})
    sig.update({n: "constexpr" for n in consts})
    aligned = list(ptrs) + [n for n, v in values.items() if v % 16 == 0]
    attrs = {(K.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index(n),): v for n, v in consts.items()},
                    attrs=attrs)
    major, minor = capability
    return triton.compile(src, target=GPUTarget("cuda", major * 10 + minor, 32),
                          options=compile_options(capability, generate_for, **options))


#: vLLM 0.33's fp8-storing DSA kernels rebuilt for SM80/86 (:mod:`.fused_q`, :mod:`.indexer_k_cache`), as the
#: plugin's stand-ins launch them for GLM-5: ``(pointer types, constexprs)`` by name.
STAND_INS = {
    "fused_q": ({"positions": "*i64", "q_pe": "*bf16", "q_pe_cos_sin": "*bf16", "q_pe_out": "*bf16",
                 "index_q": "*bf16", "index_q_cos_sin": "*bf16", "codes": "*u8", "weights": "*fp32",
                 "weights_out": "*fp32", "softmax_scale": "fp32", "head_scale": "fp32"},
                dict(NUM_Q_HEADS=64, Q_PE_HALF_ROT_DIM=32, NUM_INDEX_Q_HEADS=32, INDEX_Q_HALF_ROT_DIM=32,
                     INDEX_Q_HEAD_DIM=HEAD_DIM, HAS_INDEXER=True, INDEX_ROPE_INTERLEAVE=True)),
    "k_cache": ({"k": "*fp32", "slot_mapping": "*i64", "indexer_slot_mapping": "*i64", "cache": "*u8",
                 "cache_scale": "*fp32"}, dict(HEAD_DIM=HEAD_DIM)),
}


def compile_stand_in(kernel: str, capability: tuple[int, int], *, generate_for: tuple[int, int] | None = None):
    """Compile a stand-in of :data:`STAND_INS` (``"fused_q"`` or ``"k_cache"``) for ``capability`` with the fp8
    store path of the GPU generated for (hardware from SM89). Returns Triton's compiled kernel (``.asm["ptx"]``)."""
    from .aot import compile_by_names
    from .fp8 import E4M3_MAX, has_fp8_conversion
    from .fused_q import _fused_q_kernel
    from .indexer_k_cache import _indexer_k_cache_kernel

    if interpreting():
        raise RuntimeError("compile_stand_in compiles for a GPU target; unset TRITON_INTERPRET (=0)")
    if kernel not in STAND_INS:
        raise ValueError(f"kernel {kernel!r}: one of {sorted(STAND_INS)}")
    K = {"fused_q": _fused_q_kernel, "k_cache": _indexer_k_cache_kernel}[kernel]
    ptrs, consts = STAND_INS[kernel]
    consts = {**consts, "FP8_MAX": E4M3_MAX, "HW": has_fp8_conversion(generate_for or capability)}
    return compile_by_names(K, ptrs, consts, capability, generate_for, num_warps=1)


def resource_usage(compiled) -> dict | None:
    """``{"registers", "spill_bytes"}`` of a compiled kernel, read from its cubin with the ``cuobjdump`` bundled in
    Triton's NVIDIA backend; ``None`` where that tool is missing."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:\d+ SHARED:\d+ LOCAL:(\d+)", out)
    return None if m is None else {"registers": int(m.group(1)), "spill_bytes": int(m.group(2))}


def describe(kernel: str, capability: tuple[int, int], H: int, next_n: int = 1,
             config_capability: tuple[int, int] | None = None) -> dict:
    """Build the default launch of one case for one GPU and describe it (see the module docstring).
    ``config_capability``: build the launch (and operand path) chosen for that GPU instead, compiled for
    ``capability`` -- e.g. the SM80 path on an H200, as a simulated SM80 runs it (``tools/gpu/``)."""
    from .aot import SMEM_PER_BLOCK
    from .fp8 import has_fp8_conversion

    cpu = torch.device("cpu")
    cfg_cap = tuple(config_capability or capability)
    cfg = None
    if kernel == "prefill":
        cfg = prefill_config(4096, 32768, H, cpu, cfg_cap)
    elif kernel == "paged":
        cfg = paged_config(32, next_n, H, 64, 131072, cpu, cfg_cap)
    k = compile_for(kernel, capability, cfg, hw=has_fp8_conversion(cfg_cap) if kernel == "q_quant" else None)
    ptx = k.asm["ptx"]
    mma = sorted(set(re.findall(r"\b(wgmma\.mma_async\.sync\.aligned\.\w+\.\w+\.\w+\.\w+|mma\.sync\.aligned\.[\w.]+)",
                                ptx)))
    row = {"capability": f"{capability[0]}.{capability[1]}", "path_of": f"{cfg_cap[0]}.{cfg_cap[1]}",
           "kernel": kernel, "H": H, "next_n": next_n,
           "dot": cfg.dot if cfg else ("hw-store" if "e4m3x2" in ptx else "sw-store"),
           "config": (f"m{cfg.block_m} h{cfg.block_h} n{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages}"
                      if cfg else "w1"),
           "shared_bytes": int(k.metadata.shared), "smem_limit": SMEM_PER_BLOCK.get(tuple(capability)),
           "mma": " ".join(mma) or "-", "fp8_cvt": "e4m3x2" in ptx, "cp_async": "cp.async" in ptx}
    row["fits"] = row["smem_limit"] is None or row["shared_bytes"] <= row["smem_limit"]
    row.update(resource_usage(k) or {"registers": None, "spill_bytes": None})
    return row


def build_report(capabilities=CAPABILITIES, cases=CASES) -> list[dict]:
    """:func:`describe` for every GPU of ``capabilities`` and every ``(kernel, H, next_n)`` of ``cases``."""
    return [describe(kernel, cap, H, nn) for cap in capabilities for kernel, H, nn in cases]


def build_report_subprocess(capabilities=CAPABILITIES, cases=CASES, timeout: float = 900) -> list[dict]:
    """:func:`build_report` in a fresh interpreter with ``TRITON_INTERPRET=0`` (callable from a process that runs
    Triton's interpreter, e.g. a CPU notebook or test)."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    arg = json.dumps({"capabilities": [list(c) for c in capabilities], "cases": [list(c) for c in cases]})
    r = subprocess.run([sys.executable, "-m", "sparse_mla.kernels.indexer_build", arg], env=env, capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"indexer build report failed: {r.stderr.strip().splitlines()[-1:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    spec = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    caps = [tuple(c) for c in spec.get("capabilities", CAPABILITIES)]
    cases = [tuple(c) for c in spec.get("cases", CASES)]
    print(json.dumps(build_report(caps, cases)))
