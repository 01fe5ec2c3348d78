"""What ran, read inside an engine's own processes: the ``ran`` block of every launch record, and what contradicts it.

A record that only echoed its arguments could not fail (the 2026-12-01 simulated-SM80 record said "sm80" while
Triton compiled for sm_90). :func:`collect` runs in each vLLM worker (``LLM.collective_rpc``) after the engine has
generated and reads, there:

* ``capability``: what vLLM's ``current_platform.get_device_capability()`` returns in that process;
* ``triton_targets``: ``{our kernel: ["sm80", ...]}``, from the metadata of every kernel Triton compiled in that
  process (``CompiledKernel.metadata.target``; only kernels that were launched appear);
* ``indexer``: ``{"triton": calls, "deepgemm": calls}`` (:func:`sparse_mla.vllm_plugin.indexer.indexer_calls`;
  DeepGEMM's calls are counted where the engine had ``SPARSE_MLA_COUNT_INDEXER_CALLS=1``);
* ``attention``: ``{backend: number of layers}`` over the MLA attention layers of vLLM's static forward context
  (the indexer's cache layers, backend ``DEEPSEEK_V32_INDEXER``, apart under ``indexer_cache``).

:func:`contradictions` compares a ``ran`` block with what was asked; a run with any is a failed run.
"""
from __future__ import annotations

import importlib
import re

#: Modules whose ``@triton.jit`` kernels are ours.
KERNEL_MODULES = ("sparse_mla.kernels.attention", "sparse_mla.kernels.fp8", "sparse_mla.kernels.indexer",
                  "sparse_mla.kernels.indexer_quant", "sparse_mla.kernels.simple")
#: vLLM's name for the indexer's cache layers (``DeepseekV32IndexerCache``), which are not attention.
INDEXER_CACHE_BACKEND = "DEEPSEEK_V32_INDEXER"


def our_kernels() -> dict[str, object]:
    """``{"module.name": JITFunction}`` for every Triton kernel of :data:`KERNEL_MODULES` (compiled ones have
    ``device_caches``; under ``TRITON_INTERPRET=1`` Triton makes interpreted functions, which have none)."""
    out = {}
    for mod_name in KERNEL_MODULES:
        mod = importlib.import_module(mod_name)
        for name, obj in vars(mod).items():
            if hasattr(obj, "device_caches") and getattr(obj, "__module__", None) == mod_name:
                out[f"{mod_name.rsplit('.', 1)[-1]}.{name}"] = obj
    return out


def triton_targets(kernels: dict | None = None) -> dict[str, list[str]]:
    """``{kernel: sorted targets}`` (``"sm80"``, ``"sm90a"`` is reported as ``"sm90"``: the arch number Triton
    compiled for) over every compiled variant of each kernel in ``kernels`` (default :func:`our_kernels`); kernels
    never compiled in this process are left out."""
    out = {}
    for name, fn in (our_kernels() if kernels is None else kernels).items():
        archs = set()
        for cache in getattr(fn, "device_caches", {}).values():
            for compiled in cache[0].values():
                target = getattr(getattr(compiled, "metadata", None), "target", None)
                if target is not None:
                    archs.add(f"sm{target.arch}" if target.backend == "cuda" else f"{target.backend}:{target.arch}")
        if archs:
            out[name] = sorted(archs)
    return out


def layer_backends(worker) -> dict:
    """Every attention layer of a vLLM worker's static forward context: ``{name: {"layer", "backend", "impl",
    "kv_cache_dtype"}}`` (``worker.model_runner.compilation_config.static_forward_context``)."""
    ctx = worker.model_runner.compilation_config.static_forward_context
    out = {}
    for name, layer in ctx.items():
        backend = getattr(layer, "attn_backend", None)
        if backend is None and hasattr(layer, "get_attn_backend"):
            try:
                backend = layer.get_attn_backend()
            except Exception:  # noqa: BLE001
                backend = None
        out[name] = {"layer": type(layer).__name__,
                     "backend": backend.get_name() if backend is not None else None,
                     "impl": type(getattr(layer, "impl", None)).__name__,
                     "kv_cache_dtype": str(getattr(layer, "kv_cache_dtype", ""))}
    return out


def count_backends(layers: dict) -> tuple[dict[str, int], dict[str, int]]:
    """``(attention, indexer_cache)``: ``{backend: layers}`` of :func:`layer_backends`' output, split by whether the
    layer is the indexer's cache."""
    att, idx = {}, {}
    for v in layers.values():
        b = v.get("backend")
        if b:
            side = idx if b == INDEXER_CACHE_BACKEND else att
            side[b] = side.get(b, 0) + 1
    return att, idx


def collect(worker) -> dict:
    """The ``ran`` block of this process (module docstring), ``worker`` the vLLM worker it runs in (its layers)."""
    from vllm.platforms import current_platform

    from .indexer import indexer_calls

    cap = current_platform.get_device_capability() if current_platform.is_cuda() else None
    attention, indexer_cache = count_backends(layer_backends(worker))
    return {"capability": None if cap is None else f"{cap.major}.{cap.minor}", "triton_targets": triton_targets(),
            "indexer": indexer_calls(), "attention": attention, "indexer_cache": indexer_cache}


def shape_errors(ran) -> list[str]:
    """What in ``ran`` is not the shape :func:`collect` writes, one line each (``[]``: none): a capability ``"M.m"``,
    ``triton_targets`` ``{str: [str, ...]}``, ``indexer`` ``{"triton": int >= 0, "deepgemm": int >= 0}``,
    ``attention`` ``{str: int > 0}`` (non-empty: a ``ran`` without a worker's layers proves no engine) and
    ``indexer_cache`` of the same shape where present."""
    if not isinstance(ran, dict):
        return [f"ran block is {type(ran).__name__}, not an object"]
    out = []
    cap = ran.get("capability")
    if not (isinstance(cap, str) and re.fullmatch(r"\d{1,2}\.\d", cap)):
        out.append(f"capability {cap!r} is not what vLLM's platform reports ('M.m')")
    targets = ran.get("triton_targets")
    if not (isinstance(targets, dict) and all(isinstance(k, str) and isinstance(v, list) and v and
                                              all(isinstance(x, str) for x in v) for k, v in targets.items())):
        out.append(f"triton_targets {str(targets)[:80]} is not {{kernel: [target, ...]}}")
    calls = ran.get("indexer")
    if not (isinstance(calls, dict) and set(calls) == {"triton", "deepgemm"} and
            all(type(v) is int and v >= 0 for v in calls.values())):
        out.append(f"indexer {str(calls)[:80]} is not {{'triton': calls, 'deepgemm': calls}}")
    for key in ("attention", "indexer_cache"):
        v = ran.get(key)
        if (v is not None or key == "attention") and not (
                isinstance(v, dict) and (v or key != "attention") and
                all(isinstance(b, str) and type(n) is int and n > 0 for b, n in v.items())):
            out.append(f"{key} {str(v)[:80]} is not {{backend: layers}}")
    return out


def contradictions(asked: dict, ran: dict | None) -> list[str]:
    """What in ``ran`` (:func:`collect`) contradicts ``asked``, one line each (``[]``: none; a ``ran`` of another shape
    gives its :func:`shape_errors`). ``asked`` holds the run's
    ``backend_requested`` (``"auto"``: vLLM's choice, not checked), ``indexer`` (``"vllm"`` or ``TRITON_DSA_INDEXER``)
    and optionally ``capability`` (a simulated one, ``"8.0"``). Checked: the capability vLLM saw; every attention layer
    on the requested backend; our Triton kernels compiled for that capability's target only; the Triton indexer
    called if it was asked for, and otherwise exactly where the plugin's default puts it at the capability vLLM saw
    (:func:`sparse_mla.vllm_plugin.indexer.wanted_by_default`: where vLLM has no DeepGEMM, SM80/86/89)."""
    if not ran:
        return ["no ran block: nothing was read inside the engine"]
    bad = shape_errors(ran)
    if bad:
        return bad
    # from here the shape is collect()'s: a capability "M.m", the targets, indexer calls and attention as dicts
    out = []
    cap, att, targets, calls = ran["capability"], ran["attention"], ran["triton_targets"], ran["indexer"]["triton"]
    want_cap = asked.get("capability")
    if want_cap is not None and cap != want_cap:
        out.append(f"capability: asked {want_cap}, vLLM saw {cap} in the engine")
    backend = asked.get("backend_requested")
    if backend not in (None, "auto") and set(att) != {backend}:
        out.append(f"attention: asked {backend} in every layer, the engine's layers ran {att}")
    wrong = {k: v for k, v in targets.items() if v != [f"sm{cap.replace('.', '')}"]}
    if wrong:
        out.append(f"triton_targets: vLLM saw capability {cap}, Triton compiled {wrong}")
    if backend == "TRITON_MLA_SPARSE" and not any(k.startswith("attention.") for k in targets):
        out.append("triton_targets: TRITON_MLA_SPARSE asked, none of its attention kernels was compiled")
    if asked.get("indexer", "vllm") != "vllm":
        if not calls:
            out.append(f"indexer: {asked['indexer']} asked, the Triton indexer made no call")
    else:
        from .indexer import wanted_by_default

        ours = wanted_by_default(cap)
        if ours != bool(calls):
            out.append(f"indexer: the default asked, which at capability {cap} is "
                       f"{'the Triton indexer' if ours else 'DeepGEMM'}; the Triton indexer made {calls} calls")
    return out
