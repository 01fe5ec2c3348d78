"""Stage 5 of vLLM's path, *memory*: whether the model fits the GPUs, per tensor-parallel rank, before anything loads.

vLLM answers this only at start-up, after minutes of loading: it loads the weights, profiles a forward pass and then
checks that the KV cache left over holds one request of ``max_model_len``. This stage asks the same of vLLM's own code
without a GPU:

* **weights per rank**: vLLM's model class built on the ``meta`` device as one of ``tp`` ranks builds it, with the
  checkpoint's quantization (:mod:`.meta_model`): every parameter's bytes as vLLM allocates it, plus the bf16
  ``W_UK_T``/``W_UV`` copies of ``kv_b_proj`` vLLM makes after loading. GGUF, which vLLM 0.26 loads only through an
  out-of-tree plugin, is sized from the same model: the layers vLLM hands a checkpoint's quantization config (the
  linear layers it builds with ``quant_config``, the MoE experts) and the embeddings and ``lm_head`` -- what
  vllm-gguf-plugin's ``GGUFConfig`` quantizes -- a GGUF file's each from the tensors it loads, at their own types
  (:mod:`.gguf_memory`), a ``--quantization gguf-<type>`` at that type's bytes per value
  (:data:`~sparse_mla.gguf.types.GGUF_TYPES`); the rest as vLLM holds it.
* **KV cache per token per rank**: the KV-cache specs vLLM's layers hand the engine (the MLA latent cache and the DSA
  indexer's cache, one head each, on every rank: ``MLAAttentionSpec.page_size_bytes / block_size``).
* **memory for the KV cache per rank** = vLLM's ``request_memory`` (``ceil(total x gpu_memory_utilization)``,
  ``vllm/v1/worker/utils.py``) - the weights left on the GPU (``--cpu-offload-gb`` moves whole decoder-layer
  parameters to the CPU in order, as vLLM's ``UVAOffloader`` does) - :data:`ALLOWANCE_GIB` (activations of vLLM's
  profile run, CUDA graphs, non-torch memory, the driver's reservation: vLLM measures these at start-up,
  ``gpu_worker.determine_available_memory``; here they are an estimate, recorded as one).
* **fits**: the weights fit and vLLM's ``get_kv_cache_configs`` (``vllm/v1/core/kv_cache_utils.py``, the engine's
  own call) accepts that memory: its ``_check_enough_kv_cache_memory`` is vLLM's start-up check that one request of
  ``max_model_len`` fits; its refusal is quoted. ``max_tokens`` is the "GPU KV cache size" vLLM logs for it
  (``get_kv_cache_capacity``).

Where it does not fit, ``fixes`` names the nearest changes that make it fit, each checked by this same computation:
the ``fp8_ds_mla`` cache, the largest ``max_model_len`` that fits, the smallest larger tensor-parallel size that
divides the heads, the smallest ``--cpu-offload-gb``.
"""
from __future__ import annotations

import json
import math
import types
from dataclasses import dataclass, replace
from typing import Any

from . import gguf_memory
from .config import raised_where, rope_hint
from .meta_model import RankModel, rank_model
from ..gguf.types import GGUF_TYPES
from .request import GPUS, Request

GIB = 1024 ** 3

#: Per-rank memory outside the weights and the KV cache that vLLM measures at start-up and this stage cannot:
#: activations of the profile run (``max_num_batched_tokens`` tokens through the MoE, the indexer, the sampler), CUDA
#: graphs, non-torch memory (CUDA context, NCCL, cuBLAS workspaces), buffers outside the parameters (the DSA top-k
#: index buffer) and the driver's reservation (nvidia-smi's total less CUDA's). An estimate, recorded as one.
ALLOWANCE_GIB = 5.0



def _gguf_layout():
    """A vLLM ``QuantizationConfig`` that marks the layers a quantized checkpoint quantizes and keeps their logical
    shapes (unquantized methods): built with it, every parameter of such a layer has ``quantized`` set
    (:class:`~sparse_mla.diagnose.meta_model.Param`). vLLM 0.26 has no GGUF config of its own."""
    import torch
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

    class GGUFLayout(QuantizationConfig):
        def get_name(self):
            return "gguf"

        def get_supported_act_dtypes(self):
            return [torch.bfloat16, torch.float16]

        @classmethod
        def get_min_capability(cls):
            return 0

        @staticmethod
        def get_config_filenames():
            return []

        @classmethod
        def from_config(cls, config):
            return cls()

        def get_quant_method(self, layer, prefix):
            return UnquantizedLinearMethod() if isinstance(layer, LinearBase) else None   # others: unquantized

    return GGUFLayout()


@dataclass(frozen=True)
class Setting:
    """One memory question: a rank's model and the GPU it must fit."""

    rank: RankModel          # weights and KV specs at this tensor-parallel size and cache dtype
    gpu_bytes: int | None    # None: unknown (no preset, no --gpu-memory-gib)
    utilization: float
    max_model_len: int
    cpu_offload_gb: float


def apply_max_model_len(vc, max_model_len: int | None) -> str | None:
    """Set ``--max-model-len`` on vLLM's configuration as vLLM's ``ModelConfig`` does
    (``get_and_verify_max_len``: at most what the config allows); vLLM's refusal as text, or None."""
    if max_model_len is None:
        return None
    try:
        vc.model_config.max_model_len = vc.model_config.get_and_verify_max_len(max_model_len)
    except ValueError as e:
        return str(e).strip()
    return None


def param_bytes(rank: RankModel, quant) -> list[tuple[int | None, int]]:
    """``(decoder layer or None, bytes)`` of every parameter of ``rank`` under ``quant``
    (:class:`~sparse_mla.diagnose.request.Quantization`), in vLLM's order; buffers are not included. A GGUF file's
    parameters at each tensor's own type (:mod:`.gguf_memory`), a ``--quantization gguf-<type>`` at that type."""
    if quant.gguf_type is None:
        return [(p.layer, p.nbytes) for p in rank.params]
    values, size = GGUF_TYPES[quant.gguf_type]
    if quant.gguf_tensors is not None:
        return gguf_memory.param_bytes(rank, quant.gguf_tensors, (values, size))[0]
    return [(p.layer, p.numel * size // values if p.quantized or p.embedding else p.nbytes) for p in rank.params]


def offloaded_bytes(sizes: list[tuple[int | None, int]], cpu_offload_gb: float) -> int:
    """Bytes vLLM's ``UVAOffloader`` (``vllm/model_executor/offloader/uva.py``) moves to the CPU for
    ``--cpu-offload-gb``: whole parameters of the decoder layers, in order, until ``int(gb * 1024**3)`` is reached
    (the parameter that crosses it goes too)."""
    limit, moved = int(cpu_offload_gb * GIB), 0
    for layer, n in sizes:
        if moved >= limit:
            break
        if layer is not None:
            moved += n
    return moved


def _kv_groups(rank: RankModel, available: int, max_model_len: int):
    """vLLM's KV-cache plan for ``available`` bytes: ``(fits, max_tokens, vLLM's refusal or None)``."""
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity

    from .lines import adapter

    line = adapter()        # where the line keeps vLLM's planning functions and how its engine core calls them
    vc = rank.vllm_config
    vc.model_config.max_model_len = max_model_len
    tokens = 0
    if available > 0:
        groups = line.kv_cache_groups(vc, dict(rank.kv_specs))
        tokens = int(get_kv_cache_capacity(vc, line.kv_cache_config_from_groups(vc, groups, available))[0])
    try:
        line.check_kv_cache_configs(vc, dict(rank.kv_specs), available)
    except ValueError as e:
        return False, tokens, " ".join(str(e).split())
    return True, tokens, None


def evaluate(s: Setting, quant) -> dict[str, Any]:
    """The memory computation for one :class:`Setting`: weights, what is left for the KV cache, vLLM's check."""
    from vllm.v1.worker.utils import request_memory

    sizes = param_bytes(s.rank, quant)
    weights = sum(n for _, n in sizes) + s.rank.absorbed_bytes + s.rank.buffer_bytes
    moved = offloaded_bytes(sizes, s.cpu_offload_gb)
    out: dict[str, Any] = {"weights_bytes": weights, "offloaded_bytes": moved, "available_bytes": None,
                           "max_tokens": None, "fits": None, "reason": None}
    if s.gpu_bytes is None:
        return out
    on_gpu = weights - moved
    if on_gpu > s.gpu_bytes:
        out.update(fits=False, max_tokens=0, reason=f"the weights and buffers alone ({on_gpu / GIB:.1f} GiB per "
                                                      f"rank, the DSA top-k buffer included) exceed the GPU's memory "
                                                      f"({s.gpu_bytes / GIB:.1f} GiB): loading them runs out of memory")
        return out
    requested = request_memory(types.SimpleNamespace(total_memory=s.gpu_bytes, free_memory=s.gpu_bytes,
                                                     device_="probe"),
                               # 0.26/0.33 read gpu_memory_utilization, 0.34 its resolved_ property (and the
                               # extensible-cache switch, off unless asked)
                               types.SimpleNamespace(gpu_memory_utilization=s.utilization,
                                                     resolved_gpu_memory_utilization=s.utilization,
                                                     enable_extensible_kv_cache=False))
    available = requested - on_gpu - int(ALLOWANCE_GIB * GIB)
    fits, tokens, reason = _kv_groups(s.rank, available, s.max_model_len)
    out.update(available_bytes=available, max_tokens=tokens, fits=fits, reason=reason)
    return out


def _largest(fits, lo: int, hi: int) -> int | None:
    """The largest n in [lo, hi] with ``fits(n)`` for a ``fits`` that holds up to some n and not beyond; None if
    not even ``lo``."""
    if hi < lo or not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _smallest(fits, lo: int, hi: int) -> int | None:
    """The smallest n in [lo, hi] with ``fits(n)`` for a ``fits`` that fails up to some n and holds beyond."""
    if hi < lo or not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def _fix(change: str, result: dict[str, Any], **extra) -> dict[str, Any]:
    return {"change": change, "weights_gib_per_rank": round(result["weights_bytes"] / GIB, 3),
            "max_tokens": result["max_tokens"], "fits": result["fits"], **extra}


def fixes(base: Setting, quant, build, heads: int, sparse: bool) -> list[dict[str, Any]]:
    """The nearest changes that make ``base`` fit, each checked by :func:`evaluate`, in this order: the
    ``fp8_ds_mla`` cache (DSA models, whose sparse backends read it), the largest ``max_model_len`` that fits, the
    smallest larger tensor-parallel size that divides the ``heads`` (``build(tp, cache_dtype, weights_only)`` builds
    vLLM's model for it), the smallest whole ``--cpu-offload-gb``. A kind of change that cannot make it fit is left
    out; a tensor-parallel size vLLM's model code refuses is listed with ``fits`` False and vLLM's reason."""
    out = []
    tp = base.rank.tp
    if sparse and _cache_dtype(base.rank) != "fp8_ds_mla":
        r = evaluate(replace(base, rank=build(tp, "fp8_ds_mla")), quant)
        if r["fits"]:
            out.append(_fix("--kv-cache-dtype fp8_ds_mla", r))
    n = _largest(lambda m: evaluate(replace(base, max_model_len=m), quant)["fits"], 1, base.max_model_len - 1)
    if n is not None:
        out.append(_fix(f"--max-model-len {n}", evaluate(replace(base, max_model_len=n), quant)))
    for t in (d for d in range(tp + 1, heads + 1) if heads % d == 0):
        try:
            w = build(t, None, weights_only=True)        # the KV cache per rank does not change with TP (MLA)
        except Exception as e:  # noqa: BLE001 - vLLM's model code refuses this tensor-parallel size
            why = " ".join(str(e).split())[:200]
            out.append({"change": f"--tensor-parallel-size {t}", "fits": False,
                        "reason": f"vLLM's model code refuses it: {type(e).__name__}: {why}"})
            break
        rank = replace(base.rank, tp=t, params=w.params, buffer_bytes=w.buffer_bytes, absorbed_bytes=w.absorbed_bytes,
                       renames=w.renames)
        r = evaluate(replace(base, rank=rank), quant)
        if r["fits"]:
            out.append(_fix(f"--tensor-parallel-size {t}", r, gpus=t))
            break
    layers = sum(b for layer, b in param_bytes(base.rank, quant) if layer is not None)
    gb = _smallest(lambda g: evaluate(replace(base, cpu_offload_gb=g), quant)["fits"], 1, math.ceil(layers / GIB))
    if gb is not None:
        r = evaluate(replace(base, cpu_offload_gb=gb), quant)
        out.append(_fix(f"--cpu-offload-gb {gb}", r, offloaded_gib=round(r["offloaded_bytes"] / GIB, 3)))
    return [f for f in out if f["fits"] or "reason" in f]


def _gpu_memory(req: Request) -> tuple[int | None, str]:
    """Bytes of one GPU and where the number comes from: ``--gpu-memory-gib``, the preset (:data:`GPUS`), this
    machine's GPU (``torch.cuda.mem_get_info``, what vLLM's ``MemorySnapshot`` reads), or unknown."""
    mem = req.memory
    if mem is not None and mem.gpu_memory_gib is not None:
        return int(mem.gpu_memory_gib * GIB), "--gpu-memory-gib"
    if req.gpu in GPUS:
        gpu = GPUS[req.gpu]
        return gpu.memory_mib * 1024 ** 2, f"preset {req.gpu}: {gpu.memory_mib} MiB ({gpu.note})"
    if req.gpu == "local":
        import torch

        return int(torch.cuda.mem_get_info()[1]), "this machine's GPU (torch.cuda.mem_get_info)"
    return None, "unknown: name a GPU preset or give --gpu-memory-gib"


def _quant_config(vc, quant):
    """The vLLM ``QuantizationConfig`` to build with: the checkpoint's own (vLLM parsed its config.json), vLLM's config
    class on a :data:`~sparse_mla.diagnose.request.QUANTIZATIONS` entry, :func:`_gguf_layout` for GGUF, or None."""
    from vllm.model_executor.layers.quantization import get_quantization_config

    if quant.source == "config.json quantization_config":
        return vc.quant_config
    if quant.gguf_type:
        return _gguf_layout()
    return None if quant.method is None else get_quantization_config(quant.method).from_config(quant.config)


def _assumptions(req: Request, quant, source: str, rank: RankModel) -> list[str]:
    out = [f"weights: vLLM's {rank.vllm_config.model_config.architecture} built on the meta device as one of "
           f"{rank.tp} tensor-parallel ranks, quantization {quant.name} ({quant.source}); sizes as vLLM allocates them "
           f"at load (repacking after load, e.g. Marlin, not modelled) plus the bf16 W_UK_T/W_UV copies of kv_b_proj",
           "the MTP layer (num_nextn_predict_layers) is not counted: vLLM loads it only as the drafter of "
           "--speculative-config",
           f"KV cache: vLLM's KV-cache specs of the MLA latent cache and the DSA indexer's cache, whole on every rank, "
           f"block size {rank.vllm_config.cache_config.block_size}",
           f"GPU memory: {source}",
           f"allowance {ALLOWANCE_GIB:g} GiB per rank for activations, CUDA graphs, non-torch memory and the driver's "
           f"reservation: an estimate (vLLM measures these at start-up by profiling)",
           "fixes are checked by this memory computation only; the other stages are not run again for them"]
    if quant.source == "--quantization" and quant.name != "bf16":
        out.insert(1, f"--quantization {quant.name}: vLLM's quantization config for it (request.QUANTIZATIONS) is used "
                      f"for the weights only; the other stages ran on the config as given, without it")
    if quant.gguf_tensors is not None:
        out.insert(1, _gguf_file_assumption(quant, rank))
    elif quant.gguf_type:
        values, size = GGUF_TYPES[quant.gguf_type]
        out.insert(1, f"GGUF {quant.gguf_type}: {size} bytes per {values} values for the linear layers vLLM builds "
                      f"with a quantization config, the MoE experts, the embeddings and lm_head, all in one type "
                      f"(llama.cpp's _M/_S mixes keep some tensors in larger types), sharded as vLLM shards them; "
                      f"vLLM 0.26 loads GGUF only through vllm-gguf-plugin")
    if req.memory is not None and req.memory.cpu_offload_gb:
        out.append(f"--cpu-offload-gb {req.memory.cpu_offload_gb:g}: vLLM's UVA offloading of whole decoder-layer "
                   f"parameters, that much pinned host memory per GPU")
    if getattr(rank.vllm_config.cache_config, "enable_extensible_kv_cache", False):
        out.append("vLLM's extensible KV cache (0.34, on by default on CUDA): it sizes the cache from the memory free "
                   "after warm-up and CUDA graph capture, gpu_memory_utilization (resolved to 1.0) only a cap; the "
                   "tokens here are that cap less the weights and the allowance")
    return out


def _gguf_file_assumption(quant, rank: RankModel) -> str:
    """The assumption line of a GGUF file sized tensor by tensor (:mod:`.gguf_memory`)."""
    types: dict[str, int] = {}
    for t in quant.gguf_tensors:
        types[t.type] = types.get(t.type, 0) + 1
    _, missing = gguf_memory.param_bytes(rank, quant.gguf_tensors, GGUF_TYPES[quant.gguf_type])
    text = (f"GGUF file: each tensor at its own type ({', '.join(f'{k} {v}' for k, v in sorted(types.items()))}) "
            f"as vllm-gguf-plugin holds it: quantized blocks as in the file, F32/F16/BF16 tensors and those our "
            f"adapter dequantizes (kv_b, the indexer's) in the model dtype, sharded as vLLM shards them; the MTP "
            f"block's tensors are not counted; vLLM 0.26 loads GGUF only through vllm-gguf-plugin")
    if missing:
        text += (f"; {len(missing)} parameters load no GGUF tensor and are sized at {quant.gguf_type}: "
                 f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    return text


def _per_token(rank: RankModel) -> dict[str, int]:
    """KV-cache bytes per token of one rank, by layer class (``page_size_bytes / block_size`` of vLLM's specs)."""
    out: dict[str, int] = {}
    for name, spec in rank.kv_specs.items():
        kind = rank.kv_layers[name]
        out[kind] = out.get(kind, 0) + spec.page_size_bytes // spec.block_size
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _mla_layer_classes() -> set[str]:
    """The names of vLLM's ``MLAAttention`` and of each of its subclasses imported so far (on 0.33 the GLM-5 /
    DeepSeek-V3.2 layer ``DeepseekV32Attention``): the classes :attr:`RankModel.kv_layers` names for the layers of the
    MLA latent cache (a built model's classes are imported)."""
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    names, todo = set(), [MLAAttention]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo += cls.__subclasses__()
    return names


def _cache_dtype(rank: RankModel) -> str:
    """The MLA latent cache's dtype as vLLM allocates it: the layers' cache dtype after vLLM's rewrite for the backend
    (``fp8_ds_mla`` ...), ``auto`` named by the dtype it means (the model's)."""
    latent = _mla_layer_classes()
    for name, spec in rank.kv_specs.items():
        if rank.kv_layers[name] in latent:
            return spec.cache_dtype_str if spec.cache_dtype_str not in (None, "auto") else \
                str(spec.dtype).replace("torch.", "")
    return str(rank.vllm_config.cache_config.cache_dtype)


def _with_gguf_tensors(req: Request, quant):
    """``quant`` with the GGUF file's tensors (:func:`.gguf_memory.gguf_tensors`) where the model is a GGUF file read
    in this process (:data:`~sparse_mla.diagnose.gguf.GGUF_FILES`) and sized as GGUF."""
    from .gguf import GGUF_FILES

    info = GGUF_FILES.get(str(req.geometry.source)) if quant.gguf_type and req.geometry.source else None
    return quant if info is None else replace(quant, gguf_tensors=gguf_memory.gguf_tensors(info))


def memory_stage(req: Request, vc, att: dict[str, Any], capability: str) -> dict[str, Any]:
    """Stage 5 for the diagnosis' engine configuration ``vc`` and attention stage ``att`` (the probe platform is
    current). Returns the record's ``"memory"`` entry (see the module docstring): ``gpu_memory_gib`` (None: unknown,
    then ``fits`` and ``max_tokens`` are None), ``gpu_memory_source``, ``gpu_memory_utilization``, ``quantization``,
    ``model_dtype`` (vLLM's: what unquantized weights are held in), ``weights_gib_per_rank``, ``offloaded_gib``, ``allowance_gib``, ``kv_cache_available_gib``, ``kv_cache_dtype``,
    ``kv_cache_block_size``, ``kv_cache_bytes_per_token`` (and ``_by_layer``), ``max_tokens``, ``max_model_len``,
    ``fits``, ``reason`` (vLLM's refusal, or why the weights do not load), ``assumptions``, ``fixes``, ``offload``
    (:func:`offload`: the host memory ``--cpu-offload-gb`` pins, None without it)."""
    from .request import MemorySettings, checkpoint_quantization

    mem = req.memory or MemorySettings(checkpoint_quantization(req.geometry))
    quant, backend = _with_gguf_tensors(req, mem.quantization), att.get("backend_cls")
    qc = _quant_config(vc, quant)
    key = (json.dumps(req.geometry.raw_config, sort_keys=True, default=str),
           "gguf" if quant.gguf_type else quant.name, None if qc is None else capability,
           str(vc.model_config.dtype))     # float32 below SM80: another model than bf16's (issue 47)

    def build(tp: int, cache_dtype: str | None, weights_only: bool = False) -> RankModel:
        return rank_model(vc, tp=tp, quant_config=qc, backend_cls=backend, key=key, cache_dtype=cache_dtype,
                          weights_only=weights_only)

    gpu_bytes, source = _gpu_memory(req)
    # vLLM 0.34 leaves gpu_memory_utilization None unless given, and resolves it on first use (the property)
    util = mem.gpu_memory_utilization or getattr(vc.cache_config, "resolved_gpu_memory_utilization",
                                                 vc.cache_config.gpu_memory_utilization)
    out: dict[str, Any] = {"gpu_memory_gib": None if gpu_bytes is None else round(gpu_bytes / GIB, 3),
                           "gpu_memory_source": source, "gpu_memory_utilization": util, "quantization": quant.name,
                           "model_dtype": str(vc.model_config.dtype).replace("torch.", ""),
                           "max_model_len": vc.model_config.max_model_len, "assumptions": [], "fixes": []}
    try:
        rank = build(req.tp, None)
    except Exception as e:  # noqa: BLE001 - vLLM's model code refuses the configuration: the engine cannot start
        out.update(fits=False, reason=f"vLLM's model code raises while building the model: {type(e).__name__}: "
                                      f"{' '.join(str(e).split())[:300]}{raised_where(e)}"
                                      f"{rope_hint(e, req.geometry.raw_config)}")
        return out
    base = Setting(rank, gpu_bytes, util, vc.model_config.max_model_len, mem.cpu_offload_gb)
    r = evaluate(base, quant)
    per = _per_token(rank)
    out.update(weights_gib_per_rank=round(r["weights_bytes"] / GIB, 3),
               offloaded_gib=round(r["offloaded_bytes"] / GIB, 3), allowance_gib=ALLOWANCE_GIB,
               kv_cache_available_gib=None if r["available_bytes"] is None else round(r["available_bytes"] / GIB, 3),
               kv_cache_dtype=_cache_dtype(rank),
               kv_cache_block_size=rank.vllm_config.cache_config.block_size,
               kv_cache_bytes_per_token=sum(per.values()), kv_cache_bytes_per_token_by_layer=per,
               max_tokens=r["max_tokens"], fits=r["fits"], reason=r["reason"],
               assumptions=_assumptions(req, quant, source, rank), offload=offload(mem.cpu_offload_gb, r, req.tp))
    if r["fits"] is False:
        out["fixes"] = fixes(base, quant, build, req.geometry.num_attention_heads, req.geometry.use_sparse)
    return out


def offload(cpu_offload_gb: float, result: dict[str, Any], tp: int) -> dict[str, Any] | None:
    """What ``--cpu-offload-gb`` takes from the GPUs' host, or None without it: ``asked_gib`` (per GPU),
    ``moved_gib`` (per rank, what vLLM's offloader moves: at most every decoder layer's weights, :func:`offloaded_bytes`),
    ``ranks``, ``host_gib`` (the pinned host memory of all ranks together, GiB) and ``this_machine_gib`` (this
    machine's memory, :func:`sparse_mla.machine.host_memory_bytes`; None where unknown). The host that runs the GPUs is
    not this one unless ``--capability local``, and the GPU presets name no host memory: this is said, not a blocker."""
    from ..machine import host_memory_bytes

    if not cpu_offload_gb:
        return None
    here = host_memory_bytes()
    return {"asked_gib": cpu_offload_gb, "moved_gib": round(result["offloaded_bytes"] / GIB, 3), "ranks": tp,
            "host_gib": round(result["offloaded_bytes"] * tp / GIB, 3),
            "this_machine_gib": None if here is None else round(here / GIB, 3)}


def blocker(mem: dict[str, Any] | None) -> dict[str, str] | None:
    """The record's ``{"stage": "memory", "reason"}`` when the memory stage found that it does not fit."""
    if not mem or mem.get("fits") is not False:
        return None
    changes = [f["change"] for f in mem.get("fixes", []) if f.get("fits")]
    return {"stage": "memory", "reason": mem["reason"] + (f" (it fits with: {'; '.join(changes)})" if changes else "")}
