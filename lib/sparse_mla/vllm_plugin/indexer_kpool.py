"""The Triton indexer's reach into GLM-5.3-Flash's KPool indexer (vLLM 0.33/0.34): which names of its module the hook
of :mod:`sparse_mla.vllm_plugin.indexer` rebinds, and the counters of vLLM's DeepGEMM calls there.

``SparseAttnIndexerKpool`` (``vllm/models/glm5next/nvidia/sparse_indexer.py``, ``sparse_attn_indexer_kpool``) looks up
in its own module globals, at call time, what it imported from ``vllm/utils/deep_gemm.py``: ``has_deep_gemm`` (its
``__init__`` refuses to build on CUDA without DeepGEMM), ``fp8_fp4_mqa_logits`` (prefill) and
``fp8_fp4_paged_mqa_logits`` (decode). ``get_paged_mqa_logits_metadata`` is not among them: the decode metadata of its
index cache is built by the DSA indexer's ``DeepseekV32IndexerMetadataBuilder`` (``Glm5NextIndexerBackend`` keeps
it), which asks its own module's ``has_deep_gemm`` -- already False under the hook. Where the hook is installed, the
three names of :data:`KPOOL_DEEPGEMM_NAMES` become the hook's own DeepGEMM stand-ins, the same functions the DSA path
gets: the KPool path calls DeepGEMM with the DSA path's arguments, only over pools instead of tokens.

What the KPool path passes (read from vLLM 0.34.0; 0.33.0 the same without ``logits_dtype``):

* its index cache holds one key per pool of ``index_kpool`` tokens (``Glm5NextIndexerCache``: ``tokens_per_state =
  index_kpool``), uint8 ``[num_blocks, num_states, 132]`` with ``num_states`` = 32 or 64 pools per block
  (``Glm5NextIndexerBackend.get_supported_kernel_block_sizes``: ``index_kpool * get_paged_mqa_page_sizes()``); the
  block layout is the DSA cache's: ``[num_states x 128 e4m3 codes][num_states x fp32 scale]``
  (``kpool_compress_and_write_cache`` writes code ``t`` at ``t * 128`` and its scale at float ``num_states * 32 +
  t``), the scale ``max(amax, 1e-4) / 448`` (a power of two with ``scale_fmt``): positive, as our kernels require;
* prefill: ``(q_fp8 [rows, H, 128], None)``, the pools gathered by vLLM's ``cp_gather_indexer_k_quant_cache`` as
  ``(k_fp8 [N, 128], k_scale [N] fp32)``, fp32 ``weights [rows, H]`` (the query's ue8m0 scale, ``128 ** -0.5`` and
  ``H ** -0.5`` folded in), pool windows ``cu_seqlen_ks / ke`` and ``max_seqlen_k``; it wants the windowed
  (compressed) layout, which the line adapter's ``fp8_fp4_mqa_logits`` returns;
* decode: ``(q_fp8 [B, next_n, H, 128], None)``, the cache as vLLM's ``kv_cache_as_quant_view`` (``[num_blocks,
  num_states, 1, 132]``), ``weights [B * next_n, H]``, pool-granular ``context_lens [B, next_n]``, the pool block
  table, an unfilled schedule (our kernel does not read it), ``max_model_len = max_pool_len``, ``indices=None``
  (the varlen form is SM100's); it wants ``[B * next_n, max_pool_len]`` logits, valid below each row's pool count;
* ``H`` = 32: GLM-5.3-Flash's 16 index heads zero-padded by vLLM (``_pad_indexer_heads``: DeepGEMM takes 32 or 64);
  the padded heads have zero weights and add nothing. There is no ``clean_logits`` on these lines: vLLM's top-k
  reads each row's window only (our adapters fill the rest with ``-inf`` all the same).

The pool compression and its tail cache (``kpool_ops``), the top-k over pools, the expansion back to tokens and the
query's Hadamard quantization stay vLLM's: Triton kernels, three of which store fp8 (SM89 and up; see
``sparse_mla.diagnose.glm5next.KPOOL_FP8_KERNELS``).
"""
from __future__ import annotations

from typing import Callable

#: The KPool module's globals the hook rebinds, each to the stand-in of the role named: DeepGEMM's logits calls and
#: the flag ``SparseAttnIndexerKpool.__init__`` checks.
KPOOL_DEEPGEMM_NAMES = {"fp8_fp4_mqa_logits": "prefill", "fp8_fp4_paged_mqa_logits": "paged",
                        "has_deep_gemm": "deep_gemm"}


def kpool_plan(module: str | None, ours: dict[str, Callable]) -> dict[tuple[str, str], Callable]:
    """``(module, name) -> a copy of ours[role]`` (:func:`own_copy`) for every name of :data:`KPOOL_DEEPGEMM_NAMES`;
    ``{}`` where the vLLM line has no KPool indexer (``module`` None: the line adapter's ``KPOOL_DEEPGEMM_MODULE`` on
    0.26). ``ours`` maps the roles ``prefill``, ``paged``, ``deep_gemm`` to the hook's functions; a missing role raises
    KeyError. Call it once: each call makes new copies."""
    if module is None:
        return {}
    return {(module, name): own_copy(ours[role]) for name, role in KPOOL_DEEPGEMM_NAMES.items()}


def own_copy(fn: Callable) -> Callable:
    """A second function object of ``fn``: the same code, globals, closure, defaults, annotations, names and docstring
    (so the same signature and behaviour), none of its attributes. The hook marks each replacement with the function
    it replaced (``__wrapped__``, which the diagnosis probe unwraps); the KPool module's replacements are their own
    objects so that this mark is that module's original, whatever the DSA module held."""
    import types

    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__annotations__ = dict(fn.__annotations__)
    new.__module__, new.__qualname__, new.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    return new


def kpool_counters(module: str | None, calls: dict[str, int], originals: dict) -> dict[tuple[str, str], Callable]:
    """Counting pass-throughs for the KPool module's two DeepGEMM logits calls (``SPARSE_MLA_COUNT_INDEXER_CALLS=1``
    where the Triton indexer is not installed): each adds one to ``calls["deepgemm"]`` and calls vLLM's function,
    found in ``originals[(module, name)]`` (the hook's record of what it replaced). ``{}`` for ``module`` None."""
    if module is None:
        return {}

    def counter(name: str) -> Callable:
        def counted(*args, **kwargs):
            calls["deepgemm"] += 1
            return originals[(module, name)](*args, **kwargs)

        counted.__name__ = counted.__qualname__ = f"counted_kpool_{name}"
        counted.__doc__ = (f"vLLM's DeepGEMM ``{name}`` as the KPool indexer ({module}) calls it, called unchanged "
                           f"and counted.")
        return counted

    return {(module, name): counter(name) for name in ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits")}


def kpool_served(hooked: dict[str, str], module: str | None) -> bool:
    """Whether ``hooked`` (:func:`sparse_mla.vllm_plugin.indexer.hooked`: ``"module.attr" -> ours``) rebinds every
    name of :data:`KPOOL_DEEPGEMM_NAMES` in the KPool ``module``, i.e. whether the Triton indexer computes the KPool
    indexer's logits. False for ``module`` None."""
    return module is not None and all(f"{module}.{name}" in hooked for name in KPOOL_DEEPGEMM_NAMES)
