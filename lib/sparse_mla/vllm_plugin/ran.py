"""What ran, read inside an engine's own processes: the ``ran`` block of every launch record, and what contradicts it.

A record that only echoed its arguments could not fail (the 2026-12-01 simulated-SM80 record said "sm80" while
Triton compiled for sm_90). :func:`collect` runs in each vLLM worker (``LLM.collective_rpc``) after the engine has
generated and reads, there:

* ``capability``: what vLLM's ``current_platform.get_device_capability()`` returns in that process, and
  ``device_capability``: what torch reads off the GPU itself (the two differ only under a capability simulation);
* ``triton_targets``: ``{our kernel: ["sm80", ...]}``, the architecture Triton generated each compiled kernel's
  code for (``CompiledKernel.metadata.arch``; only kernels that were launched appear), and ``triton_binaries``: the
  architectures ptxas assembled them for (``metadata.target``);
* ``launch_plan``: ``{"M.m": {"from", "sm_count", "smem_per_block", ...}}``, the GPU limits our launches were planned
  with (:func:`sparse_mla.kernels.occupancy.planned_limits`);
* ``indexer``: ``{"triton": calls, "deepgemm": calls}`` (:func:`sparse_mla.vllm_plugin.indexer.indexer_calls`;
  DeepGEMM's calls are counted where the engine had ``SPARSE_MLA_COUNT_INDEXER_CALLS=1``);
* ``attention``: ``{backend: number of layers}`` over the MLA attention layers of vLLM's static forward context
  (the indexer's cache layers, backend ``DEEPSEEK_V32_INDEXER``, apart under ``indexer_cache``), without the
  speculative drafter's layers, which are ``draft_attention`` (``{backend: layers}``, present with a draft model);
* ``other_layers``: ``{backend: layers}`` of a hybrid model's layers that are not MLA (GLM-5.3-Flash: ``GDN_ATTN``,
  ``KPOOL_TAIL``; absent for GLM-5 and DeepSeek-V3.2);
* ``mla_prefill``: ``{prefill: layers}``, the dense-MHA prefill the MLA layers run for prompts no longer than
  ``index_topk`` (:func:`prefill_name`, e.g. ``"FLASH_ATTN FA3"``; absent where no layer has one);
* ``speculative`` (offline engines that speculated): ``{"drafts", "draft_tokens", "accepted_tokens",
  "acceptance_rate"}`` from the engine's own counters (``sparse_mla.launch.engine.speculative_counts``).

An offline engine (``vllm.LLM``) runs :func:`collect` through ``LLM.collective_rpc``; a ``vllm serve`` started with
:data:`SERVE_OPTIONS` and :data:`SERVE_ENV` has :class:`RanWorkerExtension` mixed into its workers and answers
``POST /collective_rpc {"method": "sparse_mla_ran"}`` (vLLM's development API, on the loopback server only) with
every worker's block.

:func:`contradictions` compares a ``ran`` block with what was asked; a run with any is a failed run.
"""
from __future__ import annotations

import functools
import importlib

from ..records import schema

#: Modules whose ``@triton.jit`` kernels are ours.
KERNEL_MODULES = ("sparse_mla.kernels.attention", "sparse_mla.kernels.fp8", "sparse_mla.kernels.indexer",
                  "sparse_mla.kernels.indexer_quant", "sparse_mla.kernels.fused_q", "sparse_mla.kernels.indexer_k_cache",
                  "sparse_mla.kernels.simple", "sparse_mla.kernels.kpool_quant", "sparse_mla.kernels.kpool_cache")
#: Our attention backend's name (:data:`sparse_mla.vllm_plugin.backend.BACKEND_NAME`; that module imports vLLM).
OUR_BACKEND = "TRITON_MLA_SPARSE"
#: vLLM's name for the indexer's cache layers (``DeepseekV32IndexerCache``), which are not attention.
INDEXER_CACHE_BACKEND = "DEEPSEEK_V32_INDEXER"


def _defined_kernels():
    """``("module.name", function)`` for every ``@triton.jit`` function defined (not imported) in
    :data:`KERNEL_MODULES`: a ``JITFunction``, or under Triton's interpreter an ``InterpretedFunction``."""
    from triton.runtime.jit import KernelInterface

    for mod_name in KERNEL_MODULES:
        for name, obj in vars(importlib.import_module(mod_name)).items():
            if isinstance(obj, KernelInterface) and getattr(getattr(obj, "fn", obj), "__module__", None) == mod_name:
                yield f"{mod_name.rsplit('.', 1)[-1]}.{name}", obj


def our_kernels() -> dict[str, object]:
    """``{"module.name": JITFunction}`` for every Triton kernel of :data:`KERNEL_MODULES` (compiled ones have
    ``device_caches``; under ``TRITON_INTERPRET=1`` Triton makes interpreted functions, which have none)."""
    return {name: fn for name, fn in _defined_kernels() if hasattr(fn, "device_caches")}


#: Kernel names of earlier revisions that records may hold and :func:`kernel_names` no longer finds (none yet: a kernel
#: renamed or removed goes here, so that records made before stay judged by the names they were written with).
RETIRED_KERNELS: tuple[str, ...] = ()


@functools.cache
def kernel_names() -> frozenset[str]:
    """Every name :func:`triton_targets` can write: each of :func:`_defined_kernels` (compiled or interpreted, where
    :func:`our_kernels` finds none) and :data:`RETIRED_KERNELS`. ``records check`` refuses another (breaker round
    17's B4); once per process (the modules' kernels do not change)."""
    return frozenset({*RETIRED_KERNELS, *(name for name, _ in _defined_kernels())})


def _compiled(kernels: dict | None):
    """``(kernel name, CompiledKernel)`` for every compiled variant of ``kernels`` (default :func:`our_kernels`)."""
    for name, fn in (our_kernels() if kernels is None else kernels).items():
        for cache in getattr(fn, "device_caches", {}).values():
            for compiled in cache[0].values():
                yield name, compiled


def _arch(target) -> str:
    return f"sm{target.arch}" if target.backend == "cuda" else f"{target.backend}:{target.arch}"


def triton_targets(kernels: dict | None = None) -> dict[str, list[str]]:
    """``{kernel: sorted architectures}`` Triton generated code for, over every compiled variant of each kernel in
    ``kernels`` (default :func:`our_kernels`): the compiled options' ``arch`` (``"sm80"``; the TTGIR and LLVM stages
    follow it, and ``TRITON_OVERRIDE_ARCH`` sets it), else the target's (``"sm90a"`` is reported as ``"sm90"``);
    kernels never compiled in this process are left out."""
    out: dict[str, set] = {}
    for name, compiled in _compiled(kernels):
        md = getattr(compiled, "metadata", None)
        arch = getattr(md, "arch", None)
        target = getattr(md, "target", None)
        if isinstance(arch, str) and arch:
            out.setdefault(name, set()).add(arch)
        elif target is not None:
            out.setdefault(name, set()).add(_arch(target))
    return {k: sorted(v) for k, v in out.items()}


def triton_binaries(kernels: dict | None = None) -> list[str]:
    """The GPU architectures ptxas assembled those kernels for (the targets of their cubins, ``"sm90"``); other than
    :func:`triton_targets` only where Triton generated another GPU's code (a capability simulation)."""
    return sorted({_arch(c.metadata.target) for _, c in _compiled(kernels)
                   if getattr(getattr(c, "metadata", None), "target", None) is not None})


def prefill_name(layer) -> str | None:
    """The dense-MHA prefill an MLA layer runs for prompts no longer than ``index_topk`` (vLLM's
    ``MLAAttention.prefill_backend``, chosen by ``v1/attention/backends/mla/prefill/selector.py``): its name, with the
    FlashAttention version where it has one (``"FLASH_ATTN FA3"``); ``None`` for a layer without one."""
    backend = getattr(layer, "prefill_backend", None)
    if backend is None:
        return None
    name = backend.get_name() if hasattr(backend, "get_name") else type(backend).__name__
    version = getattr(backend, "vllm_flash_attn_version", None)
    return f"{name} FA{version}" if version is not None else name


def layer_backends(worker) -> dict:
    """Every attention layer of a vLLM worker's static forward context: ``{name: {"layer", "backend", "mla", "impl",
    "kv_cache_dtype", "prefill"}}`` (``worker.model_runner.compilation_config.static_forward_context``; ``mla``: the
    backend's own ``is_mla()``, None without a backend; ``prefill``: :func:`prefill_name`)."""
    ctx = worker.model_runner.compilation_config.static_forward_context
    out = {}
    for name, layer in ctx.items():
        backend = getattr(layer, "attn_backend", None)
        if backend is None and hasattr(layer, "get_attn_backend"):
            try:
                backend = layer.get_attn_backend()
            except Exception:  # noqa: BLE001
                backend = None
        is_mla = getattr(backend, "is_mla", None)
        out[name] = {"layer": type(layer).__name__,
                     "backend": backend.get_name() if backend is not None else None,
                     "mla": bool(is_mla()) if callable(is_mla) else None,
                     "impl": type(getattr(layer, "impl", None)).__name__,
                     "kv_cache_dtype": str(getattr(layer, "kv_cache_dtype", "")), "prefill": prefill_name(layer)}
    return out


def _side(layer: dict) -> str | None:
    """Where a :func:`layer_backends` entry is counted: ``"indexer_cache"`` (backend :data:`INDEXER_CACHE_BACKEND`),
    ``"other"`` (its backend says it is not MLA, ``"mla": False``: a hybrid model's linear-attention layers,
    GLM-5.3-Flash's ``GDN_ATTN`` and its KPool tail cache ``KPOOL_TAIL``), ``"attention"`` (the rest; entries written
    before ``mla`` existed included), None without a backend."""
    b = layer.get("backend")
    if not b:
        return None
    return "indexer_cache" if b == INDEXER_CACHE_BACKEND else "other" if layer.get("mla") is False else "attention"


def _count(layers: dict, side: str) -> dict[str, int]:
    out = {}
    for v in layers.values():
        if _side(v) == side:
            out[v["backend"]] = out.get(v["backend"], 0) + 1
    return out


def count_backends(layers: dict) -> tuple[dict[str, int], dict[str, int]]:
    """``(attention, indexer_cache)``: ``{backend: layers}`` of :func:`layer_backends`' output, split by whether the
    layer is the indexer's cache; layers whose backend says it is not MLA are in neither (:func:`other_layers`)."""
    return _count(layers, "attention"), _count(layers, "indexer_cache")


def other_layers(layers: dict) -> dict[str, int]:
    """``{backend: layers}`` of :func:`layer_backends`' layers that are neither MLA nor the indexer's cache (a hybrid
    model's: GLM-5.3-Flash's KDA layers on ``GDN_ATTN``, its KPool tail cache on ``KPOOL_TAIL``); ``{}`` for GLM-5."""
    return _count(layers, "other")


#: The load formats vLLM reads a safetensors checkpoint folder with: its default ``auto`` (which picks the folder's
#: ``*.safetensors``) and ``safetensors`` itself; ``dummy`` (random weights), ``pt``, ``gguf`` and the rest load other
#: weights than the folder's.
FOLDER_LOAD_FORMATS = ("auto", "safetensors")


def weights_loaded(worker) -> dict:
    """How this worker loaded its weights: vLLM's ``load_config.load_format`` and ``model_config.quantization`` of the
    worker's own config, and the vllm-gguf-plugin weights adapter that mapped a GGUF in this process, if any
    (:data:`sparse_mla.vllm_plugin.gguf_adapter.USED`)."""
    from . import gguf_adapter

    cfg = getattr(worker, "vllm_config", None)
    load = getattr(getattr(cfg, "load_config", None), "load_format", None)
    return {"load_format": None if load is None else str(load),
            "quantization": getattr(getattr(cfg, "model_config", None), "quantization", None),
            "gguf_adapter": gguf_adapter.USED.get("adapter")}


def collect(worker) -> dict:
    """The ``ran`` block of this process (module docstring), ``worker`` the vLLM worker it runs in (its layers)."""
    import torch
    from vllm.platforms import current_platform

    from ..kernels.occupancy import planned_limits
    from .indexer import indexer_calls

    cap = current_platform.get_device_capability() if current_platform.is_cuda() else None
    dev = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    layers = layer_backends(worker)
    draft = set(getattr(getattr(worker.model_runner, "drafter", None), "_draft_attn_layer_names", None) or ())
    attention, indexer_cache = count_backends({k: v for k, v in layers.items() if k not in draft})
    out = {"capability": None if cap is None else f"{cap.major}.{cap.minor}",
           "device_capability": None if dev is None else f"{dev[0]}.{dev[1]}",
           "triton_targets": triton_targets(), "triton_binaries": triton_binaries(), "launch_plan": planned_limits(),
           "indexer": indexer_calls(), "attention": attention, "indexer_cache": indexer_cache}
    out["weights"] = weights_loaded(worker)
    prefill = {}
    for k, v in layers.items():
        if v["prefill"] and k not in draft:
            prefill[v["prefill"]] = prefill.get(v["prefill"], 0) + 1
    if prefill:
        out["mla_prefill"] = prefill
    other = other_layers({k: v for k, v in layers.items() if k not in draft})
    if other:
        out["other_layers"] = other
    if draft:
        out["draft_attention"] = count_backends({k: v for k, v in layers.items() if k in draft})[0]
    return out


class RanWorkerExtension:
    """A vLLM worker extension (``--worker-extension-cls``, ``vllm/v1/worker/worker_base.py``: its methods are mixed
    into the worker class): ``collective_rpc("sparse_mla_ran")`` returns :func:`collect` of each worker."""

    def sparse_mla_ran(self) -> dict:
        return collect(self)


#: What a ``vllm serve`` needs so that its workers answer ``sparse_mla_ran``: the worker extension, and vLLM's
#: development API (``VLLM_SERVER_DEV_MODE=1``: ``POST /collective_rpc``, ``vllm/entrypoints/serve/dev/rpc``).
RAN_METHOD = "sparse_mla_ran"
SERVE_OPTIONS = ("--worker-extension-cls", f"{__name__}.{RanWorkerExtension.__name__}")
SERVE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def shape_errors(ran) -> list[str]:
    """What in ``ran`` is not the shape :func:`collect` writes, one line each (``[]``: none): the record shape
    :class:`sparse_mla.records.schema.Ran` (a capability ``"M.m"``, ``triton_targets`` ``{str: [str, ...]}``,
    ``indexer`` ``{"triton": int >= 0, "deepgemm": int >= 0}``, ``attention`` ``{str: int > 0}``, non-empty; the later
    fields where present)."""
    return [f"ran.{line}" for line in schema.problems(ran, schema.Ran)]


def contradictions(asked: dict, ran: dict | None) -> list[str]:
    """What in ``ran`` (:func:`collect`) contradicts ``asked``, one line each (``[]``: none; a ``ran`` of another shape
    gives its :func:`shape_errors`). ``asked`` holds the run's
    ``backend_requested`` (``"auto"``: vLLM's choice, not checked), ``indexer`` (``"vllm"`` or ``TRITON_DSA_INDEXER``),
    optionally ``capability`` (a simulated one, ``"8.0"``), ``draft_backend`` (the backend a draft model's layers
    must run: speculation with a drafter on our backend), ``drafter_layers`` (whether drafter layers run:
    :func:`sparse_mla.launch.specs.drafter_layers`; False: ``draft_attention`` must be absent) and ``speculative``
    (the method asked: the engine's
    ``speculative`` counters must show drafts) and ``load_format`` (``"gguf"``: the weights loaded in that format
    through :class:`~sparse_mla.vllm_plugin.gguf_adapter.GlmDsaGGUFAdapter`; None: a folder's, in one of
    :data:`FOLDER_LOAD_FORMATS` and with ``quantization``, the folder's own quantization method, or None).
    Checked: the capability vLLM saw;
    every attention layer on the requested backend (the drafter's on ``draft_backend``); our Triton kernels generated for that capability's
    architecture only; the launch planned with that GPU's limits (its own where the device is that GPU, else its row
    of ``DEVICE_LIMITS``); the indexer (:func:`_indexer_contradictions`): the Triton indexer alone if it was asked for,
    and otherwise the one the plugin's default puts at the capability vLLM saw
    (:func:`sparse_mla.vllm_plugin.indexer.wanted_by_default`: ours where vLLM has no DeepGEMM, SM80/86/89)."""
    if not ran:
        return ["no ran block: nothing was read inside the engine"]
    bad = shape_errors(ran)
    if bad:
        return bad
    # from here the shape is collect()'s: a capability "M.m", the targets, indexer calls and attention as dicts
    out = []
    cap, att, targets = ran["capability"], ran["attention"], ran["triton_targets"]
    want_cap = asked.get("capability")
    if want_cap is not None and cap != want_cap:
        out.append(f"capability: asked {want_cap}, vLLM saw {cap} in the engine")
    backend = asked.get("backend_requested")
    if backend not in (None, "auto") and set(att) != {backend}:
        out.append(f"attention: asked {backend} in every layer, the engine's layers ran {att}")
    draft = asked.get("draft_backend")
    if draft is not None and set(ran.get("draft_attention") or {}) != {draft}:
        out.append(f"draft_attention: asked {draft} in the drafter's layers, they ran {ran.get('draft_attention')}")
    layers = asked.get("drafter_layers")
    if layers is False and ran.get("draft_attention"):
        out.append(f"draft_attention: no drafter asked (no speculation, or one drafting from the tokens alone), the "
                   f"engine ran drafter layers {ran['draft_attention']}")
    if layers is True and draft is None and not ran.get("draft_attention"):
        out.append("draft_attention: an MTP drafter asked, the engine ran no drafter layer")
    out += _weights_contradictions(asked, ran.get("weights") or {})
    method = asked.get("speculative")
    if method and not (ran.get("speculative") or {}).get("drafts"):
        out.append(f"speculative: {method} asked, the engine made no draft ({ran.get('speculative')})")
    if not method and "speculative" in asked and (ran.get("speculative") or {}).get("drafts"):
        out.append(f"speculative: none asked, the engine made drafts ({ran.get('speculative')})")
    device = ran.get("device_capability")
    if want_cap is None and device is not None and device != cap:
        out.append(f"capability: no simulation asked, vLLM saw {cap} on a {device} device")
    wrong = {k: v for k, v in targets.items() if v != [f"sm{cap.replace('.', '')}"]}
    if wrong:
        out.append(f"triton_targets: vLLM saw capability {cap}, Triton generated {wrong}")
    if backend == OUR_BACKEND and not any(k.startswith("attention.") for k in targets):
        out.append(f"triton_targets: {OUR_BACKEND} asked, none of its attention kernels was compiled")
    if ran["indexer"]["triton"] and not any(k.startswith("indexer.") for k in targets):
        out.append(f"triton_targets: {ran['indexer']['triton']} Triton indexer calls, none of its kernels was compiled "
                   f"(each call launches indexer._prefill_logits_kernel or indexer._paged_logits_kernel)")
    ours_ran = OUR_BACKEND in att or OUR_BACKEND in (ran.get("draft_attention") or {}) or ran["indexer"]["triton"]
    if targets and not ours_ran:
        out.append(f"triton_targets: Triton generated our kernels {sorted(targets)}, yet the engine ran neither "
                   f"{OUR_BACKEND} (ran.attention {att}) nor our indexer (0 Triton indexer calls): only those launch "
                   f"them")
    on = device or (cap if want_cap is None else None)        # the GPU ptxas assembled for
    binaries = ran.get("triton_binaries") or []
    if on is not None and set(binaries) - {f"sm{on.replace('.', '')}"}:
        out.append(f"triton_binaries: the device is {on}, ptxas assembled for {binaries}")
    out += _layer_contradictions(ran)
    out += _plan_contradictions(cap, ran)
    return out + _indexer_contradictions(asked, cap, ran)


def _weights_contradictions(asked: dict, w: dict) -> list[str]:
    """:func:`contradictions`' lines for the weights: ``w`` (``ran.weights``, :func:`weights_loaded`) against the
    ``load_format`` and ``quantization`` asked -- a GGUF through our adapter with vllm-gguf-plugin's quantization, or
    a folder's weights as they are."""
    load, out = asked.get("load_format"), []
    if load is not None and w.get("load_format") != load:
        out.append(f"weights: asked load_format {load}, the engine loaded {w}")
    if "load_format" in asked and load is None and w and (w.get("load_format") not in FOLDER_LOAD_FORMATS or
                                                          w.get("quantization") != asked.get("quantization")
                                                          or w.get("gguf_adapter")):
        # a folder's weights as they are: vLLM's default load format (no dummy / pt / GGUF load) and the quantization
        # its config declares (none for a bf16 checkpoint: an online fp8 is other weights; round 19, R19-1)
        out.append(f"weights: a safetensors checkpoint asked (quantization {asked.get('quantization')!r}), the engine "
                   f"loaded {w}")
    if str(load).lower() == "gguf" and w.get("gguf_adapter") != "GlmDsaGGUFAdapter":
        out.append(f"weights: a GGUF asked, the engine's weights adapter was {w.get('gguf_adapter')}")
    if str(load).lower() == "gguf" and w.get("quantization") != "gguf":       # launch asks it; the plugin sets it too
        out.append(f"weights: a GGUF asked, the engine's quantization was {w.get('quantization')!r}; accepted: 'gguf' "
                   f"(vllm-gguf-plugin's EngineArgs.create_model_config sets it for every GGUF it loads)")
    return out


def _layer_contradictions(ran: dict) -> list[str]:
    """The indexer's cache layers (backend :data:`INDEXER_CACHE_BACKEND`, one per layer with an indexer) and the MLA
    prefill's layers, neither more than the MLA layers."""
    mla = sum(ran["attention"].values())
    cache = ran.get("indexer_cache") or {}
    out = [f"indexer_cache: backend {k!r}, the indexer's cache is {INDEXER_CACHE_BACKEND}" for k in cache
           if k != INDEXER_CACHE_BACKEND]
    for what, layers in (("indexer_cache", cache), ("mla_prefill", ran.get("mla_prefill") or {})):
        if sum(layers.values()) > mla:
            out.append(f"{what}: {sum(layers.values())} layers, more than the {mla} MLA layers")
    return out


def _indexer_contradictions(asked: dict, cap: str, ran: dict) -> list[str]:
    """The indexer that ran against the one asked: the Triton indexer asked (or the plugin's default at ``cap``) must
    have made calls and vLLM's DeepGEMM indexer none; DeepGEMM the default must have made calls and ours none (a DSA
    model's engine calls its indexer in every full layer of every step: no call means no indexer ran; ``ran``'s
    ``indexer`` counts). Where ``ran`` counts the indexer's layers (``indexer_cache``), the one that ran made at least
    one call per layer: an engine that generated ran its prompt through every indexer layer."""
    from .indexer import wanted_by_default

    ours_asked = asked.get("indexer", "vllm") != "vllm"
    ours = ours_asked or wanted_by_default(cap)
    triton, deepgemm = ran["indexer"]["triton"], ran["indexer"]["deepgemm"]
    what = f"{asked['indexer']} asked" if ours_asked else \
        f"the default asked, which at capability {cap} is {'the Triton indexer' if ours else 'DeepGEMM'}"
    if ours and (not triton or deepgemm):
        return [f"indexer: {what}; the Triton indexer made {triton} calls, DeepGEMM {deepgemm}"]
    if not ours and (triton or not deepgemm):
        return [f"indexer: {what}; the Triton indexer made {triton} calls, DeepGEMM {deepgemm}"]
    layers = sum((ran.get("indexer_cache") or {}).values())
    if layers and (triton if ours else deepgemm) < layers:
        return [f"indexer: {triton if ours else deepgemm} calls for {layers} indexer layers; an engine that "
                f"generated made at least one through each"]
    return []


def _plan_contradictions(cap: str, ran: dict) -> list[str]:
    """The launch plan (where the record has one) made for the capability vLLM saw, with that GPU's limits: the
    device's own where the device is that GPU, else ``DEVICE_LIMITS``' row (a simulation plans as the simulated GPU);
    and only beside a kernel of ours that Triton generated (``triton_targets``)."""
    plan = ran.get("launch_plan") or {}
    out = [f"launch_plan: planned for {k}, vLLM saw {cap}" for k in plan if k != cap]
    if plan and not ran.get("triton_targets"):
        out.append(f"launch_plan: planned for {sorted(plan)}, yet Triton generated none of our kernels in the engine "
                   f"(triton_targets empty): a launch is planned only where one of them runs")
    mine = plan.get(cap)
    dev = ran.get("device_capability")
    if mine is not None and dev is not None and dev != cap and mine.get("from") == "device":
        out.append(f"launch_plan: vLLM saw {cap} on a {dev} device, and the launch was planned with the device's "
                   f"limits, not {cap}'s")
    return out + _plan_sources(plan)


def _plan_sources(plan: dict) -> list[str]:
    """Each plan made with another GPU's row of :data:`sparse_mla.gpus.DEVICE_LIMITS` (``from``
    ``DEVICE_LIMITS[M.m]``) for that GPU, with that row's numbers (those it records), one line each."""
    from ..gpus import DEVICE_LIMITS

    out = []
    for k, v in plan.items():
        src = v.get("from") if isinstance(v, dict) else None
        if not (isinstance(src, str) and src.startswith("DEVICE_LIMITS[")):
            continue
        row = src[len("DEVICE_LIMITS["):-1]
        lim = DEVICE_LIMITS.get(tuple(int(x) for x in row.split(".")))
        want = None if lim is None else {f: getattr(lim, f) for f in ("sm_count", "smem_per_block", "smem_per_sm")}
        if row != k or want is None or any(f in v and v[f] != n for f, n in want.items()):
            have = {f: v.get(f) for f in ("from", "sm_count", "smem_per_block", "smem_per_sm")}
            out.append(f"launch_plan.{k}: {have} is not {src} ({want or 'no such row'}) for {k}")
    return out
