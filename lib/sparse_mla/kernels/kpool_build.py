"""GLM-5.3-Flash's KPool stand-ins (:mod:`.kpool_quant`, :mod:`.kpool_cache`) built ahead of time for a GPU that is not
here (``triton.compile`` with a ``GPUTarget``; ``TRITON_INTERPRET`` unset or 0), as the plugin launches them for
GLM-5.3-Flash (``index_kpool`` 4, 64 pools per cache block, a tail ring of 4, bf16 keys): the check that they compile
where vLLM's kernels do not (SM80/86). :func:`compile_kpool` also builds another kernel of the same arguments -- vLLM's
own, given by the caller -- with its fp8 pointers typed ``fp8e4nv``, as vLLM launches them.
"""
from __future__ import annotations

from ..machine import interpreting

#: ``kernel -> (pointer and float types by argument name, constexprs)``; other arguments are i32.
KPOOL_KERNELS = {
    "fwht": ({"q_ptr": "*bf16", "qout_ptr": "*u8", "sout_ptr": "*fp32"}, dict(BLOCK_R=32)),
    "compress": ({"buf_u8_ptr": "*u8", "buf_fp8_ptr": "*fp8e4nv", "buf_fp32_ptr": "*fp32", "slot_k_ptr": "*bf16",
                  "slot_score_ptr": "*bf16", "ape_ptr": "*fp32", "loc_ptr": "*i64", "write_mask_ptr": "*i1",
                  "compressed_k_ptr": "*u8", "compressed_scale_ptr": "*fp32"},
                 dict(PAGE_SIZE=64, BUF_NUMEL_PER_PAGE=64 * 132, POOL_SIZE=4, HEAD_DIM=128,
                      S_OFFSET_NBYTES_IN_PAGE=64 * 128, ROUND_SCALE=True, MX_SCALE=False, HAS_WRITE_MASK=True,
                      RETURN_COMPRESSED=False, WRITE_CACHE=True, BLOCK_D=128)),
    "decode": ({"buf_u8_ptr": "*u8", "buf_fp8_ptr": "*fp8e4nv", "buf_fp32_ptr": "*fp32", "tail_kv_ptr": "*bf16",
                "tail_slot_mapping_ptr": "*i32", "key_ptr": "*bf16", "slot_score_ptr": "*bf16", "ape_ptr": "*fp32",
                "slot_mapping_ptr": "*i32", "positions_ptr": "*i32"},
               dict(PAGE_SIZE=64, BUF_NUMEL_PER_PAGE=64 * 132, POOL_SIZE=4, RING=4, TAIL_BLOCK_ELEMS=2 * 4 * 128,
                    KPOOL_HEAD=4 * 128, HEAD_DIM=128, S_OFFSET_NBYTES_IN_PAGE=64 * 128, ROUND_SCALE=True,
                    MX_SCALE=False, BLOCK_D=128)),
}
#: vLLM's names for the output pointers our kernels type ``uint8``.
_FP8_OUTPUTS = ("qout_ptr", "compressed_k_ptr")


def compile_kpool(kernel: str, capability: tuple[int, int], *, fn=None, generate_for: tuple[int, int] | None = None):
    """Compile the stand-in ``kernel`` (``"fwht"``, ``"compress"``, ``"decode"``) for ``capability`` (``(8, 0)``)
    with the fp8 store path of that GPU (hardware from SM89), or ``fn``: another Triton kernel of the same arguments
    without ``HW`` (vLLM's), its fp8 outputs typed ``fp8e4nv``; ``generate_for``: the code of that GPU assembled for
    ``capability`` (a capability simulation, :func:`.aot.compile_options`). Returns Triton's compiled kernel
    (``.asm["ptx"]``).
    Raises RuntimeError under the interpreter, ValueError for another kernel name, and Triton's compile error where
    the kernel does not build for that GPU."""
    from .aot import compile_by_names
    from .fp8 import has_fp8_conversion
    from .kpool_cache import _kpool_compress_kernel, _kpool_decode_kernel
    from .kpool_quant import _fwht_quant_kernel

    if interpreting():
        raise RuntimeError("compile_kpool compiles for a GPU target; unset TRITON_INTERPRET (=0)")
    if kernel not in KPOOL_KERNELS:
        raise ValueError(f"kernel {kernel!r}: one of {sorted(KPOOL_KERNELS)}")
    ours = {"fwht": _fwht_quant_kernel, "compress": _kpool_compress_kernel, "decode": _kpool_decode_kernel}[kernel]
    K = fn or ours
    types, consts = KPOOL_KERNELS[kernel]
    types = dict(types, **({n: "*fp8e4nv" for n in _FP8_OUTPUTS} if fn is not None else {}))
    consts = dict(consts, **({"HW": has_fp8_conversion(generate_for or capability)} if "HW" in K.arg_names else {}))
    return compile_by_names(K, types, consts, capability, generate_for, num_warps=2 if kernel == "fwht" else 4)
