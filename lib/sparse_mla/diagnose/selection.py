"""Stage 2 of vLLM's path, *attention*: which MLA backend an attention layer gets, and why not the others; and the
KV-cache dtype vLLM then allocates.

``MLAAttention.__init__`` (``vllm/model_executor/layers/attention/mla_attention.py``) calls
``get_attn_backend(head_size, dtype, kv_cache_dtype, use_mla=True, use_sparse=..., num_heads=...)``
(``vllm/v1/attention/selector.py``), which builds an ``AttentionSelectorConfig`` from the engine configuration and
asks ``current_platform.get_attn_backend_cls``: ``CudaPlatformBase`` (``vllm/platforms/cuda.py``) walks the
per-architecture priority list ``_get_backend_priorities(...)``, asks every backend ``validate_configuration(...)``
(``vllm/v1/attention/backend.py`` plus each backend's ``supports_combination``) and either logs ``"Using X attention
backend out of potential backends: [...]"`` or raises ``ValueError("No valid attention backend found ...")`` (or,
for a backend the user forced, ``"Selected backend X is not valid for this configuration. Reason: [...]"``). The
layer then rewrites the cache dtype for sparse MLA (``_canonicalize_sparse_mla_kv_cache_dtype``: FLASHMLA_SPARSE
with a quantized cache and FLASHINFER_MLA_SPARSE_SM120 with ``auto``/``fp8`` run on ``fp8_ds_mla``).

:func:`attention_stage` makes exactly those calls, with the layer's arguments read from vLLM's engine configuration
(``model_config.get_head_size()``, ``model_config.dtype``, ``cache_config.cache_dtype``, ``get_num_attention_heads``,
``hasattr(hf_config, "index_topk")`` as ``deepseek_v2.py`` tests it), and tabulates every MLA backend vLLM knows with
vLLM's own reasons. No message is re-typed here.
"""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from typing import Any

from . import probe as pr
from .request import PLUGIN_BACKEND_NAME

def cuda_mla_backends() -> list:
    """Every MLA backend vLLM's CUDA platform considers on some GPU: the union of ``_get_backend_priorities(use_mla=
    True, ...)`` (``vllm/platforms/cuda.py``) over the capability families and the cache/head variants that change
    its lists, in first-seen order. ROCm, XPU and DeepSeek-V4 backends are on none of them."""
    import vllm.platforms.cuda as cuda_mod
    from vllm.platforms.interface import DeviceCapability

    seen: list = []
    for major in (8, 9, 10, 11, 12):
        for kv in ("auto", "fp8"):
            for heads in (8, 128):
                for m in cuda_mod._get_backend_priorities(True, DeviceCapability(major, 0), heads, kv, False):
                    if m not in seen:
                        seen.append(m)
    return seen


def apply_plugin() -> dict[str, Any]:
    """The workbook's plugin in the probe: :func:`sparse_mla.vllm_plugin.register` (the ``vllm.general_plugins``
    entry point vLLM itself calls in every process), called inside :func:`pr.stock_selection` after the probe platform
    is installed and before the backends are enumerated and the selector runs, so vLLM's own selection sees whatever
    it registers. Returns what it changed: vLLM's backend overrides and the wrapped CUDA platform methods (the probe
    undoes both after each diagnosis)."""
    import vllm.platforms.cuda as cuda_mod
    from vllm.v1.attention.backends import registry

    from ..vllm_plugin import register

    before = dict(registry._ATTN_OVERRIDES)
    methods = ("get_attn_backend_cls", "get_valid_backends")
    before_m = {k: cuda_mod.CudaPlatformBase.__dict__[k] for k in methods}
    registered = register()
    overrides = {m.name: p for m, p in registry._ATTN_OVERRIDES.items() if before.get(m) != p}
    wrapped = [f"CudaPlatformBase.{k}" for k in methods if cuda_mod.CudaPlatformBase.__dict__[k] is not before_m[k]]
    return {"module": "sparse_mla.vllm_plugin", "called": "sparse_mla.vllm_plugin.register()",
            "registered": registered is not False, "overrides": overrides, "wrapped": wrapped}


def host_dependent_checks() -> dict[str, bool]:
    """Answers vLLM's backends take from this machine's software, not from the GPU (a GPU box may differ):
    FLASHINFER_MLA_SPARSE_SM120 needs FlashInfer's sparse MLA API plus flashinfer-cubin or ``nvcc`` on PATH
    (``vllm/utils/flashinfer.py``); TOKENSPEED_MLA needs the ``tokenspeed_mla`` package."""
    out: dict[str, bool] = {}
    with contextlib.suppress(Exception):
        from vllm.utils.flashinfer import has_flashinfer_sparse_mla_sm120

        out["flashinfer_sparse_mla_sm120_api"] = bool(has_flashinfer_sparse_mla_sm120())
    with contextlib.suppress(Exception):
        out["tokenspeed_mla_installed"] = importlib.util.find_spec("tokenspeed_mla") is not None
    return out


def layer_arguments(vc) -> dict[str, Any]:
    """The arguments ``MLAAttention.__init__`` passes to ``get_attn_backend`` for this engine configuration."""
    mc = vc.model_config
    return dict(head_size=mc.get_head_size(), dtype=mc.dtype, kv_cache_dtype=vc.cache_config.cache_dtype,
                use_mla=bool(mc.use_mla), use_sparse=hasattr(mc.hf_config, "index_topk"),
                num_heads=mc.get_num_attention_heads(vc.parallel_config))


def _select(vc, args: dict[str, Any]) -> dict[str, Any]:
    """vLLM's ``get_attn_backend`` under ``set_current_vllm_config(vc)``, with the selector configuration it builds
    captured (for the backend table) and its verdict (log line or exception text)."""
    import vllm.v1.attention.selector as selector_mod
    from vllm.config import set_current_vllm_config

    captured: dict[str, Any] = {}
    original = selector_mod._cached_get_attn_backend

    def capture(backend, attn_selector_config, num_heads=None, **line_keywords):
        # line_keywords: what a line's get_attn_backend passes on besides (0.33: _run_kv_cache_dtype), unchanged
        captured.update(backend=backend, config=attn_selector_config, num_heads=num_heads)
        return original(backend=backend, attn_selector_config=attn_selector_config, num_heads=num_heads,
                        **line_keywords)

    original.cache_clear()
    selector_mod._cached_get_attn_backend = capture
    out: dict[str, Any] = {"backend_cls": None, "error": None}
    try:
        with set_current_vllm_config(vc), pr.capture_selector_log() as logged:
            try:
                out["backend_cls"] = selector_mod.get_attn_backend(
                    args["head_size"], args["dtype"], args["kv_cache_dtype"], use_mla=args["use_mla"],
                    use_sparse=args["use_sparse"], num_heads=args["num_heads"])
            except ValueError as e:
                out["error"] = str(e)
    finally:
        selector_mod._cached_get_attn_backend = original
        original.cache_clear()
    out["log"] = list(logged)
    out.update(captured)
    return out


def attention_stage(vc, platform_cls, cap, local: bool, with_plugin: bool) -> dict[str, Any]:
    """Stage 2: vLLM's selection for this engine configuration plus every MLA backend's verdict.

    Returns ``selected`` (name or None), ``valid`` (names in priority order), ``backends`` (``{NAME: {"priority",
    "reasons"}}``), ``verdict`` (vLLM's log line or exception text), ``error`` (the exception text or None),
    ``forced`` (the backend the configuration forces, or None), ``configured_kv_cache_dtype`` (after
    ``_canonicalize_sparse_mla_kv_cache_dtype``: the string the layers hold, e.g. ``auto``),
    ``effective_kv_cache_dtype`` (that string resolved: ``auto`` -> the model dtype), ``kv_note``, ``args`` (the layer's arguments, printable),
    ``import_errors``, ``skipped``.
    """
    import vllm.platforms.cuda as cuda_mod
    from vllm.config import set_current_vllm_config

    args = layer_arguments(vc)
    forced = vc.attention_config.backend

    # The MLA backends vLLM's CUDA platform knows (on this GPU's priority list or another GPU's), plus a backend the
    # configuration forces and the plugin's registration (CUSTOM). A member whose module cannot be imported here is
    # kept with its import error as the reason. They are imported before vLLM's selector runs: a module that
    # allocates CUDA memory when imported (cutlass_mla's SM100Workspace) is then imported by import_backend with that
    # allocation on the meta device; imported first by the selector, it raised "Found no NVIDIA driver" (SM100).
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES

    members = cuda_mla_backends()
    for m in [forced, *_ATTN_OVERRIDES]:
        if m is not None and m not in members:
            members.append(m)
    imported = {m: pr.import_backend(m, probing=not local) for m in members}

    choice = _select(vc, args)
    sel = choice.get("config")
    heads = args["num_heads"]
    kv = args["kv_cache_dtype"]
    priorities = list(cuda_mod._get_backend_priorities(args["use_mla"], cap, heads, kv, False))

    candidates, import_errors, skipped = _mla_candidates(members, imported)
    with set_current_vllm_config(vc):
        backends, names, valid_cands = _verdicts(platform_cls, cap, sel, heads, candidates, priorities, with_plugin)
    backend_cls = choice["backend_cls"]
    selected = None
    if backend_cls is not None:
        path = cuda_mod._backend_cls_path(backend_cls)
        selected = names.get(path) or str(backend_cls.get_name())
    valid = [names.get(cuda_mod._backend_cls_path(c.backend_class), pr.display_name(c.backend, c.backend_class))
             for c in sorted(valid_cands, key=lambda c: c.priority)]
    if selected is not None and selected not in valid:
        valid.insert(0, selected)
    if choice["error"] is not None:
        verdict = choice["error"]
    else:
        using = [m for m in choice["log"] if m.startswith("Using ")]
        verdict = using[-1] if using else f"Using {selected} attention backend (selected: {forced or 'auto'})"
    configured, effective, kv_note = _effective_kv_cache_dtype(vc, backend_cls, args, selected)
    return {"selected": selected, "valid": valid, "backends": dict(sorted(
                backends.items(), key=lambda kv_: (kv_[1]["priority"] is None, kv_[1]["priority"] or 0))),
            "verdict": verdict, "error": choice["error"], "forced": None if forced is None else str(forced.name),
            "configured_kv_cache_dtype": configured, "effective_kv_cache_dtype": effective, "kv_note": kv_note, "backend_cls": backend_cls,
            "args": {**{k: v for k, v in args.items() if k != "dtype"}, "dtype": str(args["dtype"]).replace("torch.", "")},
            "import_errors": import_errors, "skipped": skipped}


def _mla_candidates(members, imported) -> tuple[list[tuple[Any, Any, str | None]], dict[str, str], dict[str, str]]:
    """``(candidates, import_errors, skipped)``: each member with its class (or None and its import error as the
    reason); members that are not MLA backends skipped."""
    candidates: list[tuple[Any, Any, str | None]] = []
    import_errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for member in members:
        cls, err = imported[member]
        if cls is not None:
            try:
                if not cls.is_mla():
                    skipped[member.name] = "not an MLA backend"
                    continue
            except Exception as e:  # noqa: BLE001
                cls, err = None, e
        if cls is None:
            candidates.append((member, None, pr.fmt_exc(err)))
            import_errors[member.name] = pr.fmt_exc(err)
            continue
        candidates.append((member, cls, None))
    return candidates, import_errors, skipped


def _verdicts(platform_cls, cap, sel, heads, candidates, priorities, with_plugin):
    """``(backends, names, valid candidates)``: every candidate's priority and vLLM's reasons (its own
    ``validate_configuration``, then vLLM's ``get_valid_backends`` view, which wins), and the plugin's backend with
    ``with_plugin``; ``names`` maps class paths to display names. Runs inside ``set_current_vllm_config``."""
    import vllm.platforms.cuda as cuda_mod

    backends: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}      # class path -> display name
    if sel is None:
        return backends, names, []
    for member, cls, err in candidates:
        name = pr.display_name(member, cls)
        if cls is None:
            reasons = [err]
        else:
            names[cuda_mod._backend_cls_path(cls)] = name
            try:
                reasons = list(cls.validate_configuration(device_capability=cap, **sel._asdict()))
            except ImportError:
                reasons = ["ImportError"]          # what vLLM's get_valid_backends records
            except Exception as e:  # noqa: BLE001
                reasons = [pr.fmt_exc(e)]
        prio = priorities.index(member) if member in priorities else None
        if name in backends and backends[name]["priority"] is not None and prio is None:
            continue    # a plugin class registered twice (e.g. CUSTOM too): keep the prioritised entry
        backends[name] = {"priority": prio, "reasons": [str(r) for r in reasons]}
    # vLLM's own view (get_valid_backends, possibly extended by a plugin) wins over the direct calls above
    blocked = {m.get_path(include_classname=False): err for m, c, err in candidates
               if c is None and m in priorities and not err.startswith(("ImportError", "ModuleNotFoundError"))}
    finder = pr.BlockImports(blocked)
    if blocked:
        sys.meta_path.insert(0, finder)
    try:
        valid_cands, invalid_map = platform_cls.get_valid_backends(
            device_capability=cap, attn_selector_config=sel, num_heads=heads)
    finally:
        if blocked:
            sys.meta_path.remove(finder)
    for member, (prio, reasons) in invalid_map.items():
        with contextlib.suppress(Exception):
            backends[pr.display_name(member, member.get_class())] = {
                "priority": prio, "reasons": [str(r) for r in reasons]}
    for c in valid_cands:
        name = names.setdefault(cuda_mod._backend_cls_path(c.backend_class),
                                pr.display_name(c.backend, c.backend_class))
        backends[name] = {"priority": c.priority, "reasons": []}
    if with_plugin and PLUGIN_BACKEND_NAME not in backends:
        from ..vllm_plugin.backend import TritonMLASparseBackend

        try:
            reasons = list(TritonMLASparseBackend.validate_configuration(device_capability=cap, **sel._asdict()))
        except Exception as e:  # noqa: BLE001
            reasons = [pr.fmt_exc(e)]
        backends[PLUGIN_BACKEND_NAME] = {"priority": None, "reasons": [str(r) for r in reasons]}
    return backends, names, valid_cands


def _effective_kv_cache_dtype(vc, backend_cls, args, selected) -> tuple[str, str, str | None]:
    """``(configured, effective, note)``: the cache dtype string the selected backend's layers hold (vLLM's
    ``_canonicalize_sparse_mla_kv_cache_dtype`` of the request: what a running engine's ``layer.kv_cache_dtype``
    reads, e.g. ``auto``), the dtype that string resolves to (``auto`` as vLLM's ``kv_cache_dtype_str_to_dtype``
    resolves it: the model dtype) and a note saying why, if it differs from the request."""
    from vllm.model_executor.layers.attention import mla_attention

    kv = args["kv_cache_dtype"]
    effective, kv_note = kv, None
    if backend_cls is not None and args["use_mla"] and args["use_sparse"]:
        effective = mla_attention._canonicalize_sparse_mla_kv_cache_dtype(backend_cls, kv)
        if effective != kv:
            kv_note = (f"{selected} runs the cache as {effective} (vLLM's _canonicalize_sparse_mla_kv_cache_dtype, "
                       f"mla_attention.py: {kv} -> {effective})")
    configured = effective
    if effective == "auto":      # resolved as vLLM resolves it, also where no backend was selected (the memory stage)
        effective = resolved_kv_cache_dtype(configured, vc.model_config)
        kv_note = f"{effective} (auto: vLLM's kv_cache_dtype_str_to_dtype gives the model dtype)"
    return configured, effective, kv_note


def resolved_kv_cache_dtype(configured: str | None, model_config) -> str | None:
    """A record's ``effective_kv_cache_dtype`` from its ``configured_kv_cache_dtype``: ``auto`` as vLLM's
    ``kv_cache_dtype_str_to_dtype`` resolves it (``model_config.dtype``, the model's; ``"bfloat16"``), any other
    string (or None: no backend) as it is."""
    if configured != "auto":
        return configured
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    return str(kv_cache_dtype_str_to_dtype("auto", model_config)).replace("torch.", "")


def auto_kv_cache_dtypes() -> set[str]:
    """Every ``effective_kv_cache_dtype`` an ``auto`` cache may resolve to (:func:`resolved_kv_cache_dtype`): one per
    model dtype vLLM accepts (``ModelDType``, each as vLLM's ``STR_DTYPE_TO_TORCH_DTYPE`` maps it), e.g.
    ``{"float16", "bfloat16", "float32"}``."""
    import types
    import typing

    from vllm.config.model import ModelDType
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    return {resolved_kv_cache_dtype("auto", types.SimpleNamespace(dtype=STR_DTYPE_TO_TORCH_DTYPE[d]))
            for d in typing.get_args(ModelDType) if d != "auto"}


def flip_host_check(vc, args: dict[str, Any]) -> str | None:
    """The backend vLLM would select if this host's FlashInfer SM120 sparse MLA API check
    (``vllm.utils.flashinfer.has_flashinfer_sparse_mla_sm120``) answered the other way; ``"none"`` for no backend.
    A cell whose answer changes depends on what is installed on the machine that runs vLLM, not only on the GPU."""
    import vllm.utils.flashinfer as fi

    real = fi.has_flashinfer_sparse_mla_sm120
    answer = bool(real())
    fi.has_flashinfer_sparse_mla_sm120 = lambda: not answer
    try:
        other = _select(vc, args)
    finally:
        fi.has_flashinfer_sparse_mla_sm120 = real
    return None if other["backend_cls"] is None else str(other["backend_cls"].get_name())
