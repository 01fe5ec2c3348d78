"""``TRITON_DSA_INDEXER``: the Triton lightning indexer in place of DeepGEMM's, inside vLLM, no vLLM file edited.

Written for vLLM 0.26; what differs on 0.33 (DeepGEMM's signatures and prefill layout, where fp8 stores are called)
is in the line adapter (:mod:`sparse_mla.vllm_plugin.lines`). On 0.26:

vLLM's DSA indexer (``vllm/model_executor/layers/sparse_attn_indexer.py``, ``sparse_attn_indexer``) computes its logits
with DeepGEMM, which has kernels for SM90/100/120 only; on SM80/86/89 the first prefill dies in ``fp8_fp4_mqa_logits``
and the first decode metadata build in ``get_paged_mqa_logits_metadata``; on SM80/86 the Triton q-quant kernel
``fused_indexer_q_rope_quant`` does not even compile (its fp8 stores need SM89). :func:`install_indexer_hook` rebinds
the module globals vLLM looks these functions up in at call time:

* ``vllm.model_executor.layers.sparse_attn_indexer.fp8_fp4_mqa_logits`` and ``.fp8_fp4_paged_mqa_logits`` ->
  :func:`fp8_fp4_mqa_logits`, :func:`fp8_fp4_paged_mqa_logits` (DeepGEMM's signatures, our kernels);
* ``...sparse_attn_indexer.has_deep_gemm`` -> True (``SparseAttnIndexer.__init__`` refuses to build without
  DeepGEMM; our kernels stand in);
* ``vllm.v1.attention.backends.mla.indexer.has_deep_gemm`` -> False: the metadata builder then skips
  ``get_paged_mqa_logits_metadata`` (its only use of the flag; the schedule buffer it would fill is passed along
  unfilled, and our decode kernel does not read it);
* on vLLM 0.33/0.34, GLM-5.3-Flash's KPool indexer too: ``fp8_fp4_mqa_logits``, ``fp8_fp4_paged_mqa_logits`` and
  ``has_deep_gemm`` in ``vllm.models.glm5next.nvidia.sparse_indexer`` (the line adapter's ``KPOOL_DEEPGEMM_MODULE``)
  -> copies of the same three stand-ins (:mod:`sparse_mla.vllm_plugin.indexer_kpool`: its logits over pools are the
  DSA logits over a cache of pool keys);
* only where the GPU has no fp8 conversion (SM80/86): ``vllm.model_executor.models.deepseek_v2.fused_indexer_q_rope_quant``
  -> ours (:mod:`sparse_mla.kernels.indexer_quant`), and ``...sparse_attn_indexer.pack_seq_triton`` -> a wrapper that
  packs fp8 q as bytes (the stock kernel stores an fp32 pad into fp8, which does not compile there; vLLM calls it for
  MTP batches of uneven decode lengths); on vLLM 0.33/0.34 also the line adapter's other fp8-store sites
  (``FP8_STORE_HOOKS``: GLM-5's ``fused_q`` / ``fused_norm_rope``; GLM-5.3-Flash's ``fwht128_quant_fp8``, its two
  pool writers and its KPool module's ``pack_seq_triton``, :mod:`sparse_mla.vllm_plugin.kpool_stores`).

Modules not imported yet are patched right after their import (a ``sys.meta_path`` finder that wraps their loader);
installing twice changes nothing; :func:`uninstall_indexer_hook` puts vLLM's functions back. The index-cache layout,
the cache spec, the K insert (``ops.indexer_k_quant_and_cache``), the gather and vLLM's top-k ops are unchanged (their
C kernels have sm_80/86 code: see :mod:`sparse_mla.kernels.indexer`).

When: where vLLM's own ``current_platform.support_deep_gemm()`` is False on a CUDA GPU of SM80 or newer, or where
``SPARSE_MLA_TRITON_INDEXER=1`` asks for it (to run it on an H100/H200); ``SPARSE_MLA_TRITON_INDEXER=0`` keeps stock
vLLM. The kernels are given the capability vLLM's platform reports (so a simulated SM80, ``tools/gpu/``, runs the
SM80 code paths on any GPU). The adapters do no host sync and size their grids from shapes only (vLLM captures decode
in full CUDA graphs).
"""
# No ``from __future__ import annotations``: the adapters' signatures must equal vLLM's DeepGEMM wrappers'
# (``vllm/utils/deep_gemm.py``), annotations included.
import importlib.abc
import logging
import sys
import threading

import torch

from ..capability import as_capability, vllm_capability
from ..layouts import PATCH_MARK
from ..kernels.indexer import indexer_logits_paged, indexer_logits_prefill
from ..kernels.indexer_quant import launch_q_rope_quant
from .indexer_kpool import kpool_counters, kpool_plan, own_copy
from .lines import adapter
from .switches import COUNT_ENV, FORCE_ENV, INDEXER_NAME, switch  # noqa: F401  (the switches' home; named here too)

#: The installed vLLM line's adapter (:mod:`sparse_mla.vllm_plugin.lines`): DeepGEMM signatures, fp8-store hooks.
LINE = adapter()


SPARSE_MOD = "vllm.model_executor.layers.sparse_attn_indexer"
BUILDER_MOD = "vllm.v1.attention.backends.mla.indexer"
#: GLM-5.3-Flash's KPool indexer module on this vLLM line (None on 0.26).
KPOOL_MOD = LINE.KPOOL_DEEPGEMM_MODULE

logger = logging.getLogger(__name__)

_LOCK = threading.RLock()
_MISSING = object()
_PLAN: dict = {}          # (module, attr) -> our object, while installed
_ORIGINALS: dict = {}     # (module, attr) -> vLLM's object we replaced (or _MISSING)
_STATE = {"capability": None, "q_hw": False, "soft_bf16": False}
#: Indexer logits calls made in this process, by whose kernels (:func:`indexer_calls`).
_CALLS = {"triton": 0, "deepgemm": 0}


# ----------------------------------------------------------------------------------------------------------------
# The adapters (DeepGEMM's call signatures, ``vllm/utils/deep_gemm.py``)
# ----------------------------------------------------------------------------------------------------------------

def _prefill_logits(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, clean_logits):
    """DeepGEMM's ``fp8_fp4_mqa_logits`` (fp8 q only) through :func:`sparse_mla.kernels.indexer.indexer_logits_prefill`:
    ``q = (q_fp8 [M, H, D], None)``, ``kv = (k_fp8 [N, D], k_scale [N] fp32)``, ``weights [M, H]``, windows
    ``[ks, ke)`` -> ``[M, N]`` float32 logits at absolute key columns."""
    q_values, q_scale = _split_q(q)
    _CALLS["triton"] += 1
    k, k_scale = kv
    return indexer_logits_prefill(q_values, k, k_scale, weights, cu_seqlen_ks, cu_seqlen_ke,
                                  clean_logits=clean_logits, capability=_STATE["capability"])


def _paged_logits(q, kv_cache, weights, context_lens, block_tables, max_model_len, clean_logits):
    """DeepGEMM's ``fp8_fp4_paged_mqa_logits`` (fp8 q only) through
    :func:`sparse_mla.kernels.indexer.indexer_logits_paged`: ``q = (q_fp8 [B, next_n, H, D], None)``, the paged index
    cache, ``weights [B * next_n, H]``, ``context_lens [B, next_n]`` (or ``[B]``), ``block_tables [B, max_blocks]``
    -> ``[B * next_n, max_model_len]`` float32 logits. DeepGEMM's SM schedule metadata is not needed."""
    q_values, q_scale = _split_q(q)
    _CALLS["triton"] += 1
    return indexer_logits_paged(q_values, kv_cache, weights, context_lens, block_tables, int(max_model_len),
                                clean_logits=clean_logits, capability=_STATE["capability"])


def _named(fn, name: str, doc: str):
    fn.__module__, fn.__name__, fn.__qualname__, fn.__doc__ = __name__, name, name, doc
    return fn


#: The adapters vLLM's indexer calls in place of DeepGEMM's wrappers (``vllm/utils/deep_gemm.py``), in the installed
#: vLLM line's signatures and output layout (:mod:`sparse_mla.vllm_plugin.lines`), on our kernels.
fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits = (
    _named(f, n, d) for f, n, d in zip(
        LINE.deepgemm_adapters(_prefill_logits, _paged_logits),
        ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits"),
        (f"DeepGEMM's ``fp8_fp4_mqa_logits`` of vLLM {LINE.__name__.rsplit('.', 1)[-1]} on the Triton indexer "
         f"(:func:`_prefill_logits`; the line adapter's layout).",
         f"DeepGEMM's ``fp8_fp4_paged_mqa_logits`` of vLLM {LINE.__name__.rsplit('.', 1)[-1]} on the Triton "
         f"indexer (:func:`_paged_logits`).")))


def _split_q(q):
    q_values, q_scale = q if isinstance(q, (tuple, list)) else (q, None)
    if q_scale is not None:
        raise NotImplementedError(f"{INDEXER_NAME} handles the fp8 indexer cache only (a q scale was given: the MXFP4 "
                                  f"cache, use_fp4_indexer_cache, which vLLM allows on SM100 only)")
    return q_values, q_scale


def fused_indexer_q_rope_quant(
    positions: torch.Tensor,
    q: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    weights: torch.Tensor,
    softmax_scale: float,
    head_scale: float,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``fused_indexer_q_rope_quant`` (same signature, outputs and numbers) with fp8 stores that compile on
    SM80/86 (:mod:`sparse_mla.kernels.indexer_quant`); the store path follows vLLM's platform capability. Traced by
    ``torch.compile`` inside ``Indexer.forward`` like vLLM's (no checks, no imports here)."""
    return launch_q_rope_quant(positions, q, cos_sin_cache, weights, softmax_scale, head_scale, is_neox,
                               hw=_STATE["q_hw"], soft_bf16=_STATE["soft_bf16"])


def pack_seq_triton(x: torch.Tensor, lengths: torch.Tensor, pad_value: float | int = -float("inf"),
                    block_t: int = 64, block_d: int = 64) -> torch.Tensor:
    """vLLM's ``pack_seq_triton`` (``vllm/v1/attention/ops/common.py``), with fp8 inputs packed as their bytes (pad
    byte 0 = +0.0): the stock kernel stores an fp32 pad into fp8, which Triton does not compile on SM80/86. Padded
    rows are dropped again after the top-k (``unpack_seq_triton``), so their value does not matter."""
    from vllm.v1.attention.ops.common import pack_seq_triton as stock

    if x.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
        return stock(x.view(torch.uint8), lengths, pad_value=0, block_t=block_t, block_d=block_d).view(x.dtype)
    return stock(x, lengths, pad_value=pad_value, block_t=block_t, block_d=block_d)


def counted_deepgemm_mqa_logits(*args, **kwargs):
    """vLLM's DeepGEMM ``fp8_fp4_mqa_logits`` (``vllm/utils/deep_gemm.py``), the function this replaced in
    ``sparse_attn_indexer``, called unchanged and counted."""
    _CALLS["deepgemm"] += 1
    return _ORIGINALS[(SPARSE_MOD, "fp8_fp4_mqa_logits")](*args, **kwargs)


def counted_deepgemm_paged_mqa_logits(*args, **kwargs):
    """vLLM's DeepGEMM ``fp8_fp4_paged_mqa_logits``, called unchanged and counted."""
    _CALLS["deepgemm"] += 1
    return _ORIGINALS[(SPARSE_MOD, "fp8_fp4_paged_mqa_logits")](*args, **kwargs)


_COUNTERS = {(SPARSE_MOD, "fp8_fp4_mqa_logits"): counted_deepgemm_mqa_logits,
             (SPARSE_MOD, "fp8_fp4_paged_mqa_logits"): counted_deepgemm_paged_mqa_logits,
             **kpool_counters(KPOOL_MOD, _CALLS, _ORIGINALS)}


def indexer_calls() -> dict[str, int]:
    """``{"triton": n, "deepgemm": m}``: the indexer logits calls (prefill and paged decode, DSA and KPool indexers
    alike) this process made through
    the Triton indexer's adapters and, where ``SPARSE_MLA_COUNT_INDEXER_CALLS=1`` let them be counted, through vLLM's
    DeepGEMM functions. Python-level calls: eager steps and CUDA-graph captures count, graph replays do not."""
    return dict(_CALLS)


def deep_gemm_stand_in() -> bool:
    """``has_deep_gemm`` for ``SparseAttnIndexer.__init__`` (and, on vLLM 0.33/0.34, ``SparseAttnIndexerKpool``'s):
    True, the Triton indexer serves their calls."""
    return True


#: The KPool indexer module's replacements (vLLM 0.33/0.34; none on 0.26): copies of the three above
#: (:func:`sparse_mla.vllm_plugin.indexer_kpool.kpool_plan`).
_KPOOL_PLAN = kpool_plan(KPOOL_MOD, {"prefill": fp8_fp4_mqa_logits, "paged": fp8_fp4_paged_mqa_logits,
                                     "deep_gemm": deep_gemm_stand_in})


def no_deep_gemm() -> bool:
    """``has_deep_gemm`` for the indexer's metadata builder: False, so it never calls DeepGEMM's
    ``get_paged_mqa_logits_metadata``."""
    return False


# ----------------------------------------------------------------------------------------------------------------
# When, and for which configurations
# ----------------------------------------------------------------------------------------------------------------

_PLATFORMS: dict = {}


def _platform_at(capability: tuple[int, int]):
    """vLLM's CUDA platform class as it would be on a GPU of ``capability`` (only ``get_device_capability`` differs),
    to evaluate vLLM's own capability rules without that GPU."""
    if capability not in _PLATFORMS:
        from vllm.platforms.cuda import CudaPlatformBase
        from vllm.platforms.interface import DeviceCapability

        cap = DeviceCapability(*capability)
        _PLATFORMS[capability] = type(f"CudaPlatformAt{capability[0]}{capability[1]}", (CudaPlatformBase,),
                                      {"get_device_capability": classmethod(lambda cls, device_id=0: cap)})
    return _PLATFORMS[capability]


def _force() -> bool | None:
    return switch(FORCE_ENV)


def wanted(capability=None) -> bool:
    """Whether the Triton indexer should replace DeepGEMM's: ``SPARSE_MLA_TRITON_INDEXER=1`` -> yes (``=0`` -> no);
    else where vLLM's ``support_deep_gemm()`` is False on a CUDA GPU of SM80 or newer. ``capability`` (``(8, 6)``,
    ``"8.6"``) asks about that GPU through vLLM's own rule; ``None`` asks vLLM's current platform (False off CUDA).
    Below SM80 the answer is no (the kernels need SM80), forced or not."""
    cap = None
    if capability is not None:
        cap = as_capability(capability, text=True)
        if cap < (8, 0):
            return False
    forced = _force()
    if forced is not None:
        return forced
    if cap is None:
        from vllm.platforms import current_platform

        if not current_platform.is_cuda():
            return False
        dc = current_platform.get_device_capability()
        if dc is None or (dc.major, dc.minor) < (8, 0):
            return False
        return not current_platform.support_deep_gemm()
    return not _platform_at(cap).support_deep_gemm()


def wanted_by_default(capability) -> bool:
    """:func:`wanted` without the ``SPARSE_MLA_TRITON_INDEXER`` switch: whether the plugin installs the Triton indexer
    on a GPU of ``capability`` by vLLM's own rule (``support_deep_gemm()`` False, SM80 or newer)."""
    cap = as_capability(capability, text=True)
    return cap >= (8, 0) and not _platform_at(cap).support_deep_gemm()


def fp8_store_sites(capability) -> list[str]:
    """``"module.attr"`` of every fp8-store site the hook gives a byte-storing stand-in on a GPU of ``capability``
    (``(8, 6)``, ``"8.6"``) where it is installed: the line adapter's ``FP8_STORE_HOOKS`` below SM89, none from
    SM89 (Triton compiles vLLM's fp8 stores there)."""
    from ..kernels.fp8 import has_fp8_conversion

    if has_fp8_conversion(as_capability(capability, text=True)):
        return []
    return [f"{mod}.{attr}" for mod, attr in LINE.FP8_STORE_HOOKS]


def indexer_reasons(index_n_heads: int, index_head_dim: int, capability) -> list[str]:
    """Short reasons (vLLM's ``validate_configuration`` style) why our kernels cannot serve this indexer; ``[]``: they
    can. ``capability`` as ``(major, minor)``, ``"8.6"`` or ``None`` (not checked)."""
    from ..kernels.indexer import HEAD_DIM, MAX_HEADS, MIN_CAPABILITY

    reasons = []
    if capability is not None and as_capability(capability, text=True) < MIN_CAPABILITY:
        reasons.append("compute capability not supported (the Triton indexer needs SM80+)")
    if index_head_dim != HEAD_DIM:
        reasons.append(f"index_head_dim {index_head_dim} not supported ({HEAD_DIM} only)")
    if not 1 <= index_n_heads <= MAX_HEADS:
        reasons.append(f"index_n_heads {index_n_heads} not supported (1 to {MAX_HEADS})")
    return reasons


# ----------------------------------------------------------------------------------------------------------------
# The hook
# ----------------------------------------------------------------------------------------------------------------

class _PatchingLoader(importlib.abc.Loader):
    """Wraps a module's loader: executes the module, then applies the plan to it."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _apply(module)

    def __getattr__(self, name):          # get_source, get_filename, is_package, ...
        return getattr(self._inner, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """``sys.meta_path`` entry: for a module the plan names, find its spec with the other finders and wrap the loader."""

    def find_spec(self, fullname, path=None, target=None):
        with _LOCK:
            if not any(mod == fullname for mod, _ in _PLAN):
                return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


_FINDER = _PostImportFinder()


def _apply(module) -> None:
    with _LOCK:
        for (mod, attr), ours in _PLAN.items():
            if mod != module.__name__:
                continue
            current = module.__dict__.get(attr, _MISSING)
            if current is ours:
                continue
            original = _ORIGINALS.setdefault((mod, attr), current)   # vLLM's, also under a counter replaced
            if original is not _MISSING:     # the mark the diagnosis probe unwraps (sparse_mla.diagnose.probe)
                ours.__wrapped__ = original
                setattr(ours, PATCH_MARK, True)
            setattr(module, attr, ours)


def install_indexer_hook() -> bool:
    """Install the replacement (idempotent) where :func:`wanted` says so; returns whether it is installed. Never
    raises: a failure is logged and leaves vLLM as it was."""
    try:
        if not wanted():
            if switch(COUNT_ENV):
                _install(dict(_COUNTERS))
            return False
        from ..kernels.fp8 import has_fp8_conversion
        from ..machine import interpreting

        cap = vllm_capability()
        plan = {(SPARSE_MOD, "fp8_fp4_mqa_logits"): fp8_fp4_mqa_logits,
                (SPARSE_MOD, "fp8_fp4_paged_mqa_logits"): fp8_fp4_paged_mqa_logits,
                (SPARSE_MOD, "has_deep_gemm"): deep_gemm_stand_in,
                (BUILDER_MOD, "has_deep_gemm"): no_deep_gemm,
                **_KPOOL_PLAN}
        if cap is None or not has_fp8_conversion(cap):
            ours = {"q_rope_quant": fused_indexer_q_rope_quant, "pack_seq": pack_seq_triton,
                    **LINE.FP8_STORE_STAND_INS}
            plan.update(_store_plan(ours))
        _install(plan, dict(capability=cap, q_hw=cap is not None and has_fp8_conversion(cap) and not interpreting(),
                            soft_bf16=interpreting()))
    except Exception as e:  # noqa: BLE001
        logger.warning("sparse_mla: %s not installed (%s: %s); vLLM's DeepGEMM indexer stays", INDEXER_NAME,
                       type(e).__name__, e)
        return False
    logger.info("sparse_mla: %s replaces DeepGEMM's indexer kernels (capability %s): %s", INDEXER_NAME,
                "?" if cap is None else f"{cap[0]}.{cap[1]}", ", ".join(sorted(hooked())))
    return True


def _store_plan(ours: dict) -> dict:
    """``(module, attr) -> stand-in`` for every fp8-store site of the line (``LINE.FP8_STORE_HOOKS``), ``ours`` the
    stand-ins by role; a role serving a second site gets its own copy there (``own_copy``: each replacement is marked
    with what it replaced in its own module)."""
    plan, seen = {}, set()
    for key, role in LINE.FP8_STORE_HOOKS.items():
        plan[key] = own_copy(ours[role]) if role in seen else ours[role]
        seen.add(role)
    return plan


def _install(plan: dict, state: dict | None = None) -> None:
    """Add ``plan`` (``(module, attr) -> ours``; an entry for the same key, e.g. a counter, is replaced) and apply it to
    every loaded module; ``state`` updates the adapters' settings."""
    with _LOCK:
        _STATE.update(state or {})
        _PLAN.update(plan)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
        for mod in {m for m, _ in plan}:
            if mod in sys.modules:
                _apply(sys.modules[mod])


def uninstall_indexer_hook() -> None:
    """Undo :func:`install_indexer_hook`: vLLM's functions back in every loaded module, the import hook removed."""
    with _LOCK:
        while _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        for (mod, attr), original in _ORIGINALS.items():
            module = sys.modules.get(mod)
            if module is None or module.__dict__.get(attr, _MISSING) is not _PLAN.get((mod, attr)):
                continue
            if original is _MISSING:
                delattr(module, attr)
            else:
                setattr(module, attr, original)
        _ORIGINALS.clear()
        _PLAN.clear()
        _STATE.update(capability=None, q_hw=False, soft_bf16=False)


def hooked() -> dict[str, str]:
    """``"module.attr" -> qualified name of ours`` for every replacement installed (applied to the module now, or
    when it is imported); ``{}`` when the hook is off."""
    with _LOCK:
        return {f"{mod}.{attr}": f"{fn.__module__}.{fn.__qualname__}" for (mod, attr), fn in sorted(_PLAN.items())
                if fn not in _COUNTERS.values()}
