"""vLLM's own model, built on the ``meta`` device as one tensor-parallel rank builds it: every parameter that rank holds
(name, shape, dtype) and the KV-cache specs its attention layers hand the engine -- no weights read, no memory
allocated, no GPU.

:func:`rank_model` calls vLLM's ``initialize_model`` (``vllm/model_executor/model_loader/utils.py``, what every
model loader calls) on a copy of the diagnosis' engine configuration, with the checkpoint's quantization config, so
that vLLM's own layers decide every shape: column/row-parallel linears and attention heads split by TP, the
vocab-parallel embedding and ``lm_head`` split, MoE experts split by TP (no expert parallelism), the
``ReplicatedLinear`` parts (``q_a``/``kv_a``, the router, the indexer's projections) whole on every rank, the fp8
block scales or NVFP4 scales vLLM allocates. The KV-cache specs are vLLM's model runner's
(``GPUModelRunner.get_kv_cache_spec``, ``vllm/v1/worker/gpu_model_runner.py``) on those layers, after vLLM's
``update_block_size_for_backend``.

What is stood in for, because nothing here runs (each while building only, restored afterwards):

* the device: ``torch.device("meta")`` (and ``torch.empty(device="cuda")`` gives a meta tensor);
* the tensor-parallel group: vLLM's process groups report ``tp`` ranks, this one rank 0 (pipeline, data, expert and
  context parallel groups of 1);
* the attention backend: the class the attention stage selected (or none), subclassed so that its kernels' ``impl``
  is not constructed; vLLM's ``MLAAttention`` still rewrites the cache dtype with that backend's name
  (``_canonicalize_sparse_mla_kv_cache_dtype``) and vLLM picks the block size from it; the MLA prefill backend (no
  weights) is not selected;
* compilation: mode ``NONE`` (custom ops are not compiled), no MoE shared-experts CUDA stream, no weight-reload
  metadata.

The multi-token-prediction layer (``num_nextn_predict_layers``) is not built: vLLM loads it only as the drafter of
``--speculative-config`` (``DeepSeekMTP``), not with the main model.
"""
from __future__ import annotations

import contextlib
import copy
import types
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import probe as pr


@dataclass(frozen=True)
class Param:
    """One parameter (or buffer) of the rank's model as vLLM created it."""

    name: str
    numel: int
    nbytes: int
    dtype: str          # torch dtype name, e.g. "bfloat16", "float8_e4m3fn", "uint8"
    embedding: bool     # of a VocabParallelEmbedding (embed_tokens, lm_head)
    quantized: bool     # of a layer vLLM hands the checkpoint's quantization config (its module's quant_config)
    layer: int | None   # index of the decoder layer (vLLM's make_layers) holding it, else None


@dataclass(frozen=True)
class RankModel:
    """What one tensor-parallel rank of vLLM's model holds."""

    tp: int
    params: tuple[Param, ...]       # parameters, in vLLM's module order
    buffer_bytes: int               # buffers (the rotary cos/sin cache; the DSA top-k buffer, UNREGISTERED_BUFFERS)
    absorbed_bytes: int             # the bf16 W_UK_T / W_UV copies MLAAttention makes after loading (_absorbed_bytes)
    renames: tuple[tuple[str, str], ...]   # checkpoint-name fragment -> parameter-name fragment (checkpoint_renames)
    kv_specs: dict[str, Any] | None   # layer name -> vLLM KVCacheSpec (MLAAttentionSpec: MLA and the indexer cache)
    kv_layers: dict[str, str] | None  # layer name -> its class (MLAAttention, DeepseekV32IndexerCache)
    vllm_config: Any                  # the configuration copy the KV specs were built under (block size, cache dtype)


def _fake_group(n: int):
    group = types.SimpleNamespace(size=lambda: n, rank=lambda: 0)
    return types.SimpleNamespace(world_size=n, rank_in_group=0, rank=0, local_rank=0, ranks=list(range(n)),
                                 is_first_rank=True, is_last_rank=True, device_group=group, cpu_group=group,
                                 unique_name=f"probe_{n}")


@contextlib.contextmanager
def _process_groups(tp: int) -> Iterable[None]:
    """vLLM's parallel groups as one rank of ``tp`` tensor-parallel ranks sees them (``get_tp_group()`` & co. read
    these module globals)."""
    import vllm.distributed.parallel_state as ps

    names = ("_WORLD", "_TP", "_DCP", "_PP", "_DP", "_EP", "_EPLB", "_PCP")
    saved = {k: getattr(ps, k) for k in names if hasattr(ps, k)}
    for k in saved:
        setattr(ps, k, _fake_group(tp if k in ("_WORLD", "_TP") else 1))
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(ps, k, v)


def _no_impl():
    """A kernel-free impl: vLLM's own ``MLAAttentionImpl`` (``vllm/v1/attention/backend.py``), whose base gives every
    attribute ``MLAAttention.__init__`` reads of an impl (the context-parallel ranks, ``supports_dense_mha_prefill``,
    ``lse_base_on_e``, ``supports_quant_query_input``, ``process_weights_after_loading``, ... as the line defines
    them), with an ``__init__`` that keeps only ``is_sparse`` (sparse layers pass a ``topk_indices_buffer``) and no
    abstract method left (nothing here runs a forward)."""
    from vllm.v1.attention.backend import MLAAttentionImpl

    class NoImpl(MLAAttentionImpl):
        def __init__(self, **kwargs):
            self.is_sparse = "topk_indices_buffer" in kwargs

    NoImpl.__abstractmethods__ = frozenset()
    return NoImpl


def _backend_without_kernels(backend_cls):
    """The selected backend class with a kernel-free impl (``None``: a nameless MLA backend that rewrites nothing)."""
    from vllm.v1.attention.backend import AttentionBackend

    NoImpl = _no_impl()

    base = backend_cls if backend_cls is not None else AttentionBackend
    attrs = {"get_impl_cls": staticmethod(lambda: NoImpl)}
    if backend_cls is None:
        attrs.update(get_name=staticmethod(lambda: "NONE"), is_mla=classmethod(lambda cls: True))
    return type(f"Probe{getattr(base, '__name__', 'Backend')}", (base,), attrs)


@contextlib.contextmanager
def _building(backend_cls) -> Iterable[None]:
    """The stand-ins of the module docstring, on vLLM's module globals, restored afterwards."""
    import vllm.model_executor.layers.attention.mla_attention as mla
    import vllm.model_executor.layers.fused_moe.runner.shared_experts as shared
    import vllm.model_executor.model_loader.utils as loader

    class NoPrefill:
        def __init__(self, **kwargs):
            pass

    backend = _backend_without_kernels(backend_cls)
    patches = [(mla, "get_attn_backend", lambda *a, **k: backend),
               (mla, "get_mla_prefill_backend", lambda vc: NoPrefill), (shared, "aux_stream", lambda: None),
               (loader, "record_metadata_for_reloading", lambda model: None)]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    for mod, name, value in patches:
        setattr(mod, name, value)
    try:
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


def _layer_index(name: str) -> int | None:
    """The decoder layer of ``model.layers.<i>.…`` (vLLM's ``make_layers``), else None."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part == "layers" and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return None


def _params(model) -> tuple[Param, ...]:
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    modules = dict(model.named_modules())
    out = []
    for name, t in model.named_parameters():
        owner = modules[name.rsplit(".", 1)[0]]
        out.append(Param(name, t.numel(), t.numel() * t.element_size(), str(t.dtype).replace("torch.", ""),
                         isinstance(owner, VocabParallelEmbedding), getattr(owner, "quant_config", None) is not None,
                         _layer_index(name)))
    return tuple(out)


def checkpoint_renames(model) -> tuple[tuple[str, str], ...]:
    """``(checkpoint fragment, parameter fragment)`` pairs by which vLLM's ``load_weights`` loads a checkpoint tensor
    into a parameter of another name, experts first: the model's expert mapping (``get_expert_mapping``, expert 0:
    ``experts.0.gate_proj.`` -> ``experts.routed_experts.w13_``) and its ``packed_modules_mapping`` (``.q_a_proj.`` ->
    ``.fused_qkv_a_proj.``, ``.gate_proj.`` -> ``.gate_up_proj.``). The first pair whose fragment a name holds
    applies."""
    experts = [(ckpt, param) for param, ckpt, expert, _ in getattr(model, "get_expert_mapping", list)()
               if expert == 0]
    packed = [(f".{part}.", f".{whole}.") for whole, parts in getattr(model, "packed_modules_mapping", {}).items()
              for part in parts]
    return tuple(experts + packed)


def _absorbed_bytes(vc) -> int:
    """Bytes of ``W_UK_T`` and ``W_UV``, which ``MLAAttention.process_weights_after_loading``
    (``vllm/model_executor/layers/attention/mla_attention.py``) makes from ``kv_b_proj`` on every MLA layer, in the
    model dtype ("we just store fp16/bf16 copies"): ``kv_lora_rank x heads per rank x (qk_nope_head_dim +
    v_head_dim)`` each layer; ``kv_b_proj`` itself stays."""
    import torch
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    size = torch.empty((), dtype=vc.model_config.dtype).element_size()
    return sum(m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim) * size
               for m in get_layers_from_vllm_config(vc, MLAAttention).values())


def _kv_specs(vc) -> dict[str, Any]:
    """The KV-cache spec of every attention layer, as vLLM's engine collects them: the platform's
    ``update_block_size_for_backend`` (the block size the backend prefers), then the specs of the layers just built as
    the line's GPU model runner collects them (``kv_cache_specs`` of :mod:`.lines`: each layer's
    ``get_kv_cache_spec`` with its backend's say). Then, on a line whose engine core resolves one KV-cache layout
    before planning (0.33, 0.34), that layout, from the layers' backends, onto ``vc`` (:mod:`.lines`)."""
    from vllm.platforms import current_platform

    from .lines import adapter

    current_platform.update_block_size_for_backend(vc)
    specs = adapter().kv_cache_specs(vc)            # the line's runner: GPUModelRunner (0.26, 0.33), gpu/ (0.34)
    adapter().resolve_kv_cache_layout(vc, specs)    # the engine core's step before planning, where the line has it
    return specs


_WEIGHTS: OrderedDict[tuple, tuple] = OrderedDict()     # key + tp -> (params, buffer/absorbed bytes, renames)
_KV: OrderedDict[tuple, tuple] = OrderedDict()          # key + backend + cache dtype -> (specs, layers, vllm_config)
_CACHE_SIZE = 64


def _cached(cache: OrderedDict, key: tuple, value=None):
    """Look ``key`` up in ``cache`` (``value`` None) or store ``value`` there, keeping the newest entries."""
    if value is None:
        if key in cache:
            cache.move_to_end(key)
        return cache.get(key)
    cache[key] = value
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return value


@contextlib.contextmanager
def default_dtype(dtype):
    """vLLM's ``set_default_torch_dtype`` (``vllm/utils/torch_utils.py``) with torch's default dtype restored also when
    the block raises: vLLM's context restores it only after a clean exit, so a model vLLM refused to build left the
    process's default dtype bf16 (tensors made later without a dtype came out bf16; CI, 2026-12-06)."""
    import torch
    from vllm.utils.torch_utils import set_default_torch_dtype

    before = torch.get_default_dtype()
    try:
        with set_default_torch_dtype(dtype):
            yield
    finally:
        torch.set_default_dtype(before)


def _build(vc, tp: int, quant_config, backend_cls, cache_dtype: str | None) -> tuple[tuple, tuple]:
    """Build vLLM's model for one of ``tp`` ranks on a copy of ``vc``: ``(weights, kv)`` as :class:`RankModel`
    holds them."""
    import torch
    from vllm.config import CompilationMode
    from vllm.model_executor.model_loader.utils import initialize_model

    vc = copy.deepcopy(vc)
    vc.quant_config = quant_config
    if cache_dtype is not None:
        vc.cache_config.cache_dtype = cache_dtype
    vc.parallel_config.tensor_parallel_size = tp
    vc.compilation_config.mode = CompilationMode.NONE
    vc.compilation_config.static_forward_context.clear()
    with _process_groups(tp), _building(backend_cls), pr.cuda_alloc_on_meta(), torch.device("meta"), \
            default_dtype(vc.model_config.dtype):
        model = initialize_model(vc)
        specs = _kv_specs(vc)
        layers = vc.compilation_config.static_forward_context
        weights = (_params(model), sum(b.numel() * b.element_size() for b in model.buffers()) +
                   _unregistered_buffer_bytes(model), _absorbed_bytes(vc), checkpoint_renames(model))
        kv = (specs, {n: type(layers[n]).__name__ for n in specs}, vc)
    vc.compilation_config.static_forward_context.clear()   # the layers are no longer needed
    return weights, kv


#: Tensors vLLM's model code allocates on the GPU as plain attributes, not registered buffers, by attribute name:
#: ``DeepseekV2Model.__init__`` (``deepseek_v2.py``) allocates ``torch.empty(max_num_batched_tokens, index_topk,
#: int32)`` and hands it to every sparse layer (``Indexer.topk_indices_buffer``): 64 MiB for GLM-5 at 8,192 tokens.
UNREGISTERED_BUFFERS = ("topk_indices_buffer",)


def _unregistered_buffer_bytes(model) -> int:
    """The bytes of :data:`UNREGISTERED_BUFFERS` in ``model``'s modules, each tensor counted once (all layers share
    one)."""
    seen: dict[int, int] = {}
    for m in model.modules():
        for name in UNREGISTERED_BUFFERS:
            t = getattr(m, name, None)
            if hasattr(t, "numel") and hasattr(t, "element_size"):
                seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


def rank_model(vc, *, tp: int, quant_config, backend_cls, key: tuple, cache_dtype: str | None = None,
               weights_only: bool = False) -> RankModel:
    """vLLM's model for one of ``tp`` tensor-parallel ranks, built on the meta device (see the module docstring).

    Args:
        vc: the diagnosis' ``VllmConfig`` (not changed: a copy is built under); the probe platform must be current.
        tp: tensor-parallel ranks (vLLM requires it to divide the attention heads).
        quant_config: a vLLM ``QuantizationConfig`` (the checkpoint's quantization) or None (unquantized).
        backend_cls: the attention backend class vLLM selected, or None.
        key: what makes two builds' weights equal besides ``tp`` (model config, quantization, model dtype, and the
            GPU where the quantization's layout may depend on it); results are kept for the process. The KV-cache
            specs are kept under ``key``, the backend and the cache dtype, not ``tp``: an MLA cache has one head on
            every rank
            (a hybrid model's, vLLM's ``ModelConfig.is_hybrid`` -- GLM-5.3-Flash's KDA state -- also under ``tp``).
        cache_dtype: ``--kv-cache-dtype`` to build with instead of the configuration's (vLLM's layers may still
            rewrite it for the backend).
        weights_only: the KV-cache fields may be None (no build just for them).

    Returns:
        :class:`RankModel`. Raises whatever vLLM's model code raises for this configuration (e.g. a dimension a
        quantization's block does not divide at this TP).
    """
    backend = None if backend_cls is None else f"{backend_cls.__module__}.{backend_cls.__qualname__}"
    # a hybrid model's linear-attention state is split by TP (and vLLM sizes the block to it): its specs are per TP
    per_tp = (tp,) if getattr(vc.model_config, "is_hybrid", False) else ()
    wkey, kkey = (*key, tp), (*key, backend, cache_dtype or vc.cache_config.cache_dtype, *per_tp)
    weights, kv = _cached(_WEIGHTS, wkey), _cached(_KV, kkey)
    if weights is None or (kv is None and not weights_only):
        weights, kv = _build(vc, tp, quant_config, backend_cls, cache_dtype)
        _cached(_WEIGHTS, wkey, weights)
        _cached(_KV, kkey, kv)
    return RankModel(tp, *weights, *(kv or (None, None, None)))
