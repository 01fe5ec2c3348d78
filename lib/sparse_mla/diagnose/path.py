"""What the installed vLLM (a tested line: 0.26.x, 0.33.x) would really do with a checkpoint on a given GPU:
:func:`diagnose`, stage by stage, in vLLM's own words, for any GPU (a probe platform stands in for one that is not
there).

The stages, in the order a ``vllm serve`` start meets them:

1. **config** (:mod:`.config`): ``EngineArgs(...).create_engine_config()`` -- vLLM's config loading, architecture
   hooks and platform checks;
2. **attention** (:mod:`.selection`): the MLA layer's backend selection and the KV-cache dtype it then allocates;
3. **indexer** (:mod:`.runtime`): the DSA indexer's DeepGEMM kernels (and its fp8 query quantization);
4. **kernel** (:mod:`.runtime`): the sparse backends' top-k index conversion;
5. **memory** (:mod:`.memory`): the weights per rank, the KV cache per token, whether one request of
   ``max_model_len`` fits the GPU's memory (vLLM's start-up check), and what would make it fit.

The record's ``blockers`` list what stops the engine, in that order; ``engine_starts`` is ``False`` when there is
one, ``True`` when none is found and nothing depended on this host's own software, ``None`` when no blocker is found
but the answer depends on what is installed on the machine that runs vLLM (FlashInfer's SM120 sparse MLA API).

How a GPU that is not there is probed (everything listed in the record's ``"simulated"``): the probe platform
(:func:`.probe.probe_platform_cls`, a ``CudaPlatformBase`` reporting the target capability and ``tp`` GPUs) is
``vllm.platforms.current_platform`` for the duration of the call; where no NVIDIA driver is installed, vLLM's
extensions are loaded against a stand-in ``libcuda.so.1`` (:func:`.probe.load_vllm_extensions`); vLLM's
model-architecture inspection runs in this process instead of a subprocess; a backend module that allocates CUDA
memory at import gets it on the ``meta`` device. After every call the previous platform, backend registrations,
patched globals and logger levels are restored.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from ..errors import UserInputError
from ..layouts import INDEX_TOPK_MULTIPLE
from . import memory
from . import probe as pr
from .report import memory_line
from .request import Request, accepted_capabilities, resolve

STAGES = ("config", "attention", "indexer", "kernel", "memory")


def _platform(req: Request):
    import vllm.platforms.cuda as cuda_mod
    from vllm.platforms.interface import DeviceCapability

    if req.gpu == "local":
        import vllm.platforms as plat

        platform = plat.current_platform
        if not isinstance(platform, cuda_mod.CudaPlatformBase):
            raise UserInputError(f"capability 'local': vLLM's platform here is {type(platform).__name__}, not CUDA;"
                                 f" accepted: {accepted_capabilities().replace('; or local', '')}")
        cap = platform.get_device_capability()
        return platform, type(platform), cap, {
            "probe": False, "platform": type(platform).__name__, "device_name": platform.get_device_name(),
            "device_capability": f"{cap.major}.{cap.minor}"}
    cls = pr.probe_platform_cls()
    cap = DeviceCapability(*req.capability)
    cls.probe_capability = cap
    cls.probe_device_count = req.tp
    return pr.PROBE, cls, cap, {
        "probe": True,
        "platform": f"{pr.__name__}.{cls.__name__} (vllm.platforms.cuda.CudaPlatformBase subclass) as "
                    f"vllm.platforms.current_platform, reporting {req.tp} GPU(s)",
        "device_name": "probe", "device_capability": f"{cap.major}.{cap.minor}",
        "driver": dict(pr.DRIVER),
        "model_inspection": "vLLM's architecture inspection ran in this process (vLLM runs it in a subprocess)"}


def _short(text: str, n: int = 160) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= n else line[: n - 3] + "..."


def _stages(req: Request, vc, cfg: dict, platform_cls, cap, local: bool):
    """The attention, indexer and kernel stages on vLLM's engine config ``vc`` (None: vLLM refused the config, whose
    reason becomes the one blocker). Returns ``(attention, indexer, kernel, other, blockers)``: ``other`` is the
    backend a host with the other answer to the host-dependent check would select."""
    from . import glm5next, runtime, selection

    if vc is None:
        att = {"selected": None, "valid": [], "backends": {}, "verdict": "(not reached: vLLM refused the "
               "configuration)", "error": None, "forced": req.backend, "configured_kv_cache_dtype": None,
               "effective_kv_cache_dtype": None,
               "kv_note": None, "backend_cls": None, "args": {}, "import_errors": {}, "skipped": {}}
        ix = {"needed": False, "stock": None, "with_plugin": None, "reasons": [], "hooked": {}}
        return att, ix, {"checked": False, "reasons": []}, None, [{"stage": "config", "reason": cfg["error"]}]
    blockers: list[dict[str, str]] = []
    att = selection.attention_stage(vc, platform_cls, cap, local, req.with_plugin)
    if att["error"] is not None:
        blockers.append({"stage": "attention", "reason": att["error"]})
    other = None if local else selection.flip_host_check(vc, selection.layer_arguments(vc))
    kpool = glm5next.applies(vc)       # GLM-5.3-Flash: vLLM 0.33's KPool indexer, wider top-k rows
    ix = (glm5next.indexer_stage if kpool else runtime.indexer_stage)(vc, cap, req.with_plugin)
    chosen_ix = ix["with_plugin"] if req.with_plugin else ix["stock"]
    if ix["needed"] and chosen_ix is None:
        reasons = ix.get("plugin_reasons") or ix["reasons"] if req.with_plugin else ix["reasons"]
        blockers.append({"stage": "indexer", "reason": "; ".join(reasons)})
    kern = runtime.kernel_stage(vc, att, ix["kpool"]["topk_width"] if kpool else None)
    blockers += [{"stage": "kernel", "reason": r} for r in kern["reasons"]]
    return att, ix, kern, other, blockers


def _host_dependence(vc, att: dict, other, blockers: list, local: bool) -> tuple[bool, bool | None]:
    """``(host_dependent, engine_starts)``: whether the selection depends on the host (a GPU not simulated here:
    ``other``, the backend selected where the host's optional kernels differ, is not the one selected), and whether
    the engine starts (False with a blocker, None where it depends on the host, else True)."""
    selected = att["selected"]
    host_dependent = other is not None and other != (selected or None) if not local else False
    if vc is not None and not local and (other or None) != (selected or None):
        host_dependent = True
    return host_dependent, engine_starts_of(blockers, host_dependent)


def engine_starts_of(blockers: list, host_dependent: bool) -> bool | None:
    """A record's ``engine_starts`` from its ``blockers`` and whether the selection depends on the host: False with
    a blocker, None without one where it depends on the host, else True (a ``local`` diagnosis never depends on it).
    ``records check`` recomputes it from a diagnosis record's blockers (:mod:`sparse_mla.workbook.diagnosis`)."""
    if blockers:
        return False
    return None if host_dependent else True


def _note_simulation(simulated: dict, att: dict, refreshed: list[str], host) -> None:
    """Add to the record's ``simulated`` what the probe changed to answer: the import shims of the backends asked,
    the extension flags refreshed, the backends' import errors and the host-dependent checks."""
    if pr.SHIMMED:
        simulated["import_shims"] = {k: v for k, v in pr.SHIMMED.items() if k in att["backends"]}
    if refreshed:
        simulated["refreshed_flags"] = refreshed
    if att["import_errors"]:
        simulated["import_errors"] = att["import_errors"]
    simulated["host_dependent"] = host


def _probe(req: Request) -> dict[str, Any]:
    import vllm

    from . import config as stage_config
    from . import selection

    local = req.gpu == "local"
    if not local:
        pr.load_vllm_extensions()
    platform, platform_cls, cap, simulated = _platform(req)
    plugin_info = None
    refreshed: list[str] = []
    with pr.use_platform(platform), pr.stock_selection(), pr.extension_flags(refreshed), \
            stage_config.config_hooks_restored():
        if req.with_plugin:
            plugin_info = selection.apply_plugin()
        with stage_config.model_dir(req) as path:
            vc, cfg = stage_config.engine_config(req, path, req.backend)
            if vc is not None and req.memory is not None and req.memory.max_model_len is not None:
                refused = memory.apply_max_model_len(vc, req.memory.max_model_len)   # vLLM's ModelConfig check
                if refused:
                    vc, cfg["error"] = None, refused
            att, ix, kern, other, blockers = _stages(req, vc, cfg, platform_cls, cap, local)
            ixl = stage_config.indexer_layers_stage(req, vc, cfg)   # vLLM's model on meta; the weight index
            if ixl["blocker"]:      # vLLM meets it loading weights: after the attention stage, before the first forward
                _insert_blocker(blockers, "indexer", ixl["blocker"], before=("indexer", "kernel"))
            mem = None if vc is None else memory.memory_stage(req, vc, att, f"{cap.major}.{cap.minor}")
            blockers += [b for b in [memory.blocker(mem)] if b]
            flash = _glm5next_section(vc, cap, att, ix, mem, req.with_plugin)
            if flash is not None and flash["mhc"]["blocker"]:   # vLLM meets it in the first forward: before memory
                _insert_blocker(blockers, "mhc", flash["mhc"]["blocker"], before=("memory",))
            from .gguf import checkpoint_record
            checkpoint = checkpoint_record(req)     # a GGUF's wall comes first: vLLM meets it loading the config
            if (checkpoint.get("wall") or {}).get("blocker"):
                blockers.insert(0, {"stage": "config", "reason": checkpoint["wall"]["blocker"]})
        host = selection.host_dependent_checks()

    selected = att["selected"]
    host_dependent, engine_starts = _host_dependence(vc, att, other, blockers, local)
    sparse = vc is not None and hasattr(vc.model_config.hf_config, "index_topk")
    _note_simulation(simulated, att, refreshed, host)
    record: dict[str, Any] = {
        "model": req.geometry.name,
        "capability": f"{cap.major}.{cap.minor}",
        "gpu": req.gpu,
        "kv_cache_dtype": req.kv_cache_dtype,
        "tp": req.tp,
        "forced_backend": req.backend,
        "vllm_version": vllm.__version__,
        "config": {k: v for k, v in cfg.items() if k != "error"},
        "mla": ("sparse (DSA)" if sparse else "dense") if vc is not None else None,
        "dtype": att["args"].get("dtype", req.dtype),
        "heads_per_rank": att["args"].get("num_heads", req.heads_per_rank),
        "selected": selected,
        "valid": att["valid"],
        "backends": att["backends"],
        "verdict": att["verdict"] if vc is not None else cfg["error"],
        "configured_kv_cache_dtype": att["configured_kv_cache_dtype"],
        "effective_kv_cache_dtype": att["effective_kv_cache_dtype"],
        "indexer": {"stock": ix["stock"], "with_plugin": ix["with_plugin"] if req.with_plugin else None,
                    "reasons": list(ix["reasons"]) + list(ix.get("plugin_reasons") or [])},
        "blockers": blockers,
        "engine_starts": engine_starts,
        "host_dependent": {"depends": bool(host_dependent), "selected_if_host_differs": other}
        if not local else {"depends": False, "selected_if_host_differs": None},
        "simulated": simulated,
        "memory": mem,
        "indexer_layers": ixl["layers"],
        "checkpoint": checkpoint,
    }
    if flash is not None:           # GLM-5.3-Flash only: what vLLM 0.33's path runs and what our kernels would need
        record["glm5next"] = flash
    from ..vllm_plugin.register import vllm_supported

    record["vllm_supported"] = dict(zip(("supported", "note"), vllm_supported(vllm.__version__)))
    record["stages"] = _stage_lines(record, cfg, att, ix, kern, sparse)
    record["headline"] = headline(record)
    if plugin_info is not None:
        record["plugin"] = plugin_info
    return record


def _insert_blocker(blockers: list[dict], stage: str, reason: str, before: tuple[str, ...]) -> None:
    """``{"stage", "reason"}`` into ``blockers`` ahead of the first one of a stage in ``before`` (else last): where
    on vLLM's path the engine meets it."""
    at = next((i for i, b in enumerate(blockers) if b["stage"] in before), len(blockers))
    blockers.insert(at, {"stage": stage, "reason": reason})


def _glm5next_section(vc, cap, att, ix, mem, with_plugin: bool) -> dict[str, Any] | None:
    """GLM-5.3-Flash's part of the record (None for another model or where vLLM refused the configuration): ``kpool``
    (the indexer's numbers, :func:`.glm5next.kpool_geometry`), ``kda`` (:func:`.glm5next.kda_stage`), ``mhc``
    (:func:`.glm5next.mhc_stage`) and ``ours``
    (whether the plugin runs it and what our kernels would need, :func:`.glm5next_needs.needs`), ``with_plugin`` (the
    diagnosis registered the plugin)."""
    from . import glm5next
    from .glm5next_needs import needs

    if vc is None or not glm5next.applies(vc):
        return None
    kda = glm5next.kda_stage(vc)
    kv = att["effective_kv_cache_dtype"] if att["selected"] else None
    return {"model": "GLM-5.3-Flash", "kpool": ix["kpool"], "kda": kda, "mhc": glm5next.mhc_stage(vc),
            "with_plugin": with_plugin,
            "ours": needs(vc, cap, att["args"], kv, ix["kpool"], kda, mem, ix["plugin"])}


def _stage_lines(rec, cfg, att, ix, kern, sparse) -> dict[str, str]:
    """One verdict line per stage (the text output prints them)."""
    by = {b["stage"]: b["reason"] for b in rec["blockers"]}
    lines: dict[str, str] = {}
    if "config" in by:      # the stages after it are not reached: the engine line follows
        lines["config"] = f"BLOCKED: {' '.join(by['config'].split())}"   # whole: the GGUF wall's install hint is last
        lines["engine"] = engine_line(rec)
        return lines
    notes = "; ".join(cfg.get("notes") or [])
    lines["config"] = (f"ok: {cfg.get('architecture')} ({cfg.get('model_type')}, {cfg.get('hf_config_type')}), "
                       f"{rec['mla']} MLA, dtype {cfg.get('dtype')}, kv_cache_dtype {cfg.get('cache_dtype')}"
                       + (f"; {notes}" if notes else ""))
    if "attention" in by:
        # vLLM's text whole, with only the selector configuration it repeats folded (the record's "verdict" keeps it)
        text = re.sub(r"AttentionSelectorConfig\([^)]*\)", "AttentionSelectorConfig(...)", by["attention"])
        lines["attention"] = f"BLOCKED: {' '.join(text.split())}"
    else:
        forced = f" (forced: {rec['forced_backend']})" if rec["forced_backend"] else ""
        lines["attention"] = f"ok: {rec['selected']}{forced}"
        kv = rec["effective_kv_cache_dtype"]
        lines["kv cache"] = att["kv_note"] or f"{kv} (as configured)"
    if sparse:
        if "indexer" in by:
            lines["indexer"] = f"BLOCKED: {by['indexer']}"
        else:
            name = rec["indexer"]["with_plugin"] or rec["indexer"]["stock"]
            stock = rec["indexer"]["stock"]
            why = "; ".join(ix["reasons"]) or (f"{stock}, replaced by the plugin's rule or SPARSE_MLA_TRITON_INDEXER"
                                               if stock else "none")
            extra = "" if stock == name else f" (stock vLLM: {why})"
            lines["indexer"] = f"ok: {name}{extra}"
        if kern["checked"]:
            rows = (f"top-k rows of {kern['num_topk_tokens']} (index_topk {cfg.get('index_topk')} and its KPool tail)"
                    if kern.get("num_topk_tokens") not in (None, cfg.get("index_topk")) else
                    f"index_topk {cfg.get('index_topk')}")
            lines["kernel"] = (f"BLOCKED: {by['kernel']}" if "kernel" in by else
                               f"ok: {rows} passes vLLM's top-k index conversion (a multiple of {INDEX_TOPK_MULTIPLE})")
    if rec.get("glm5next"):
        kda = rec["glm5next"]["kda"]
        lines["kda"] = (f"{len(kda['layers'])} linear-attention layers on {kda['mamba_backend']}, prefill "
                        f"{kda['prefill'] or 'refused: ' + str(kda['prefill_error'])}, state per request "
                        + ", ".join(f"{k} {v['shape']} {v['dtype']}" for k, v in kda["state"].items()))
    if rec.get("glm5next") and rec["glm5next"]["mhc"]["used"]:
        mhc = rec["glm5next"]["mhc"]
        lines["mhc"] = (f"BLOCKED: {mhc['blocker']}" if mhc["blocker"] else
                        f"{len(mhc['layers'])} layers' hyper-connections (hc_mult {mhc['hc_mult']}) on vLLM's TileLang "
                        f"kernels ({mhc['kernels']}), compiled by TileLang at first use; whether TileLang builds them "
                        f"for this GPU is not checked here")
    if rec.get("memory"):
        lines["memory"] = memory_line(rec["memory"])
    lines["engine"] = engine_line(rec)
    if rec.get("glm5next"):
        lines["ours"] = _glm5next_ours(rec)
    return lines


def engine_line(rec: dict[str, Any]) -> str:
    """The record's ``engine`` stage line, from ``engine_starts`` and its first blocker's stage: every record ends its
    stages with it, a blocker at the config stage included."""
    starts = rec["engine_starts"]
    if starts is None:
        return ("no blocker found, but the answer depends on this host's software (FlashInfer's SM120 API); with it "
                f"answering the other way vLLM would select "
                f"{rec['host_dependent']['selected_if_host_differs'] or 'no backend'}")
    if starts:
        return "starts: no blocker on vLLM's path up to the first forward"
    return f"does not start: first blocker at the {rec['blockers'][0]['stage'] if rec['blockers'] else '?'} stage"


def _glm5next_ours(rec: dict[str, Any]) -> str:
    """The "ours" line of a GLM-5.3-Flash record: whether the plugin runs it here (:func:`.glm5next_needs.needs`), and
    with what -- vLLM's selection with the plugin registered where the diagnosis had it, else what it would take."""
    from ..vllm_plugin.switches import INDEXER_NAME

    ours = rec["glm5next"]["ours"]
    if not ours["supported"]:
        why = "; ".join(ours["attention_reasons"])
        return ("not run by the plugin here (a diagnosis, not support): "
                + (f"TRITON_MLA_SPARSE's validate_configuration: {why}" if why else
                   f"{INDEXER_NAME} would compute the KPool indexer's logits, but the rest of that indexer does not "
                   f"run on this GPU (the indexer stage's reasons with --with-plugin, and the needs below)"
                   if ours["indexer_logits"] else
                   "vLLM's KPool indexer has no kernels on this GPU and the plugin has none for it (the needs below)"))
    kv = rec["effective_kv_cache_dtype"] or "model dtype"
    ix = (f"our {INDEXER_NAME} on the KPool indexer's logits" if ours["indexer"] == INDEXER_NAME else
          f"vLLM's KPool indexer ({ours['indexer']})")
    parts = f"TRITON_MLA_SPARSE on the NoPE MLA layers ({kv} cache), {ix}, KDA and MHC kernels"
    if not rec["glm5next"]["with_plugin"]:
        return f"runs with the plugin (--with-plugin shows vLLM's path with it): {parts}"
    if rec["selected"] != "TRITON_MLA_SPARSE":
        return (f"vLLM selects its own {rec['selected']}; ours with --attention-backend CUSTOM: {parts}")
    return f"runs with the plugin, by vLLM's decisions: {parts}"


def headline(rec: dict[str, Any]) -> str:
    """One short line for summaries: the attention backend, the KV cache it runs on, the indexer, whether the engine
    starts (the full vLLM texts stay in the record)."""
    if rec["blockers"] and rec["blockers"][0]["stage"] == "config":
        return f"vLLM refuses the configuration: {_short(rec['blockers'][0]['reason'], 120)}"
    att = rec["selected"] or "no valid attention backend"
    kv = f" on {rec['effective_kv_cache_dtype']}" if rec["selected"] else ""
    ix = rec["indexer"]["with_plugin"] or rec["indexer"]["stock"]
    ix_s = "" if rec["mla"] != "sparse (DSA)" else (f", indexer {ix}" if ix else ", no indexer kernels")
    first = rec["blockers"][0]["stage"] if rec["blockers"] else None
    starts = {True: "engine starts", False: f"engine stops at the {first} stage" if first else "engine stops",
              None: "engine starts only if the host has FlashInfer's SM120 API"}[rec["engine_starts"]]
    return f"{att}{kv}{ix_s}: {starts}"


def diagnose(model: str | os.PathLike = "glm-5", capability: str = "12.0", kv_cache_dtype: str = "auto",
             tp: int = 1, with_plugin: bool = False, backend: str | None = None, *, quantization: str | None = None,
             gpu_memory_gib: float | None = None, gpu_memory_utilization: float | None = None,
             max_model_len: int | None = None, cpu_offload_gb: float | None = None,
             hf_config_path: str | os.PathLike | None = None,
             tokenizer: str | os.PathLike | None = None) -> dict[str, Any]:
    """What the installed vLLM would do with ``model`` on a GPU, from ``config.json`` to a running engine, in its words.

    Args:
        model: a preset of :data:`sparse_mla.models.PRESETS` (``glm-5``, ``deepseek-v3.2``), a ``config.json`` path
            or a checkpoint directory holding one. vLLM loads it with its own config loader.
        capability: target GPU, ``"12.0"``-style ``major.minor``, a :data:`~sparse_mla.diagnose.request.GPU_PRESETS`
            name, or ``"local"`` (this machine's GPU through vLLM's real platform; no probe).
        kv_cache_dtype: ``--kv-cache-dtype``: ``auto``, ``bfloat16``, ``fp8``, ``fp8_ds_mla`` or another vLLM
            ``CacheDType``.
        tp: ``--tensor-parallel-size`` (heads per rank = heads / tp; the probe reports ``tp`` GPUs).
        with_plugin: also call the step 4 plugin's ``register()`` (as vLLM's entry-point loader does) first; where
            vLLM's loader would not load it (``VLLM_PLUGINS`` naming other plugins only, no entry point installed:
            :func:`sparse_mla.vllm_plugin.register.not_loaded_by_vllm`), stock vLLM's answer, with a ``plugin`` stage
            line saying so.
        backend: ``--attention-backend``: ``None``/``"auto"`` for vLLM's choice, a vLLM backend name, or
            ``TRITON_MLA_SPARSE`` (with ``with_plugin``); vLLM's own rejection is reported when it does not fit.
        quantization: the checkpoint's quantization (``bf16``, ``fp8``, ``nvfp4``, ``gguf-q4_k``, ...; see
            :data:`~sparse_mla.diagnose.request.QUANTIZATIONS`) where its config.json has no ``quantization_config``.
        gpu_memory_gib: GiB of one GPU (default: the GPU preset's; unknown for a plain ``major.minor``).
        gpu_memory_utilization: vLLM's ``--gpu-memory-utilization`` (default: vLLM's ``CacheConfig`` default).
        max_model_len: ``--max-model-len`` (default: vLLM's, from the config; vLLM refuses more than the config allows).
        cpu_offload_gb: vLLM's ``--cpu-offload-gb`` (GiB of weights per GPU kept in host memory).
        hf_config_path: for a GGUF ``model``, ``vllm serve --hf-config-path``: the folder holding the model's
            ``config.json`` (default: the GGUF's folder); checked against the GGUF's metadata as the config beside it
            is (:mod:`sparse_mla.diagnose.gguf_config`).
        tokenizer: for a GGUF ``model``, ``vllm serve --tokenizer``: the tokenizer's folder (vllm-gguf-plugin also
            reads the config from it where ``hf_config_path`` is not given).

    Returns:
        A JSON-serialisable record: ``model, capability, gpu, kv_cache_dtype, tp, forced_backend, vllm_version``;
        ``config`` (architecture, model_type, vLLM's config class, notes on what vLLM changed, the EngineArgs);
        ``mla`` (``"sparse (DSA)"``/``"dense"``, as vLLM decides it), ``dtype``, ``heads_per_rank``;
        ``selected``, ``valid``, ``backends`` (``{NAME: {"priority", "reasons"}}``, vLLM's rejection strings),
        ``verdict`` (vLLM's selection log line or exception text); ``configured_kv_cache_dtype`` (the string the
        selected backend's layers hold, as a running engine's ``layer.kv_cache_dtype`` reads: ``auto`` stays
        ``auto``), ``effective_kv_cache_dtype`` (what vLLM allocates: ``auto`` resolved to the model dtype); ``indexer`` (``{"stock", "with_plugin", "reasons"}``); ``blockers`` (``[{"stage", "reason"}]``
        in the order vLLM meets them); ``engine_starts`` (True / False / None, see the module docstring);
        ``host_dependent``; ``memory`` (:func:`sparse_mla.diagnose.memory.memory_stage`; None when vLLM refused the
        configuration); ``indexer_layers`` (the decoder layers vLLM builds a DSA indexer in, from vLLM's model
        built on the meta device: GLM-5.2's shared top-k layers build none; ``[]`` dense, None when vLLM refused;
        a checkpoint folder lacking one of those layers' indexer tensors is an ``indexer`` blocker,
        :func:`sparse_mla.diagnose.config.indexer_layers_stage`); ``stages`` (one verdict line per stage);
        ``headline``; ``simulated``; ``plugin``; ``checkpoint`` (:func:`sparse_mla.diagnose.gguf.checkpoint_record`:
        for a GGUF the files, the GGUF wall, where the config and tokenizer are read from and the ``vllm serve``
        line); for GLM-5.3-Flash only (vLLM 0.33), ``glm5next``: ``kpool`` (the KPool indexer's numbers),
        ``kda`` (its linear-attention layers) and ``ours`` (what our kernels would need; ``supported`` False), see
        :mod:`sparse_mla.diagnose.glm5next` and :mod:`sparse_mla.diagnose.glm5next_needs`.

    Raises:
        UserInputError: unknown preset / capability / KV-cache dtype / backend, unreadable or non-MLA config, a config
            vLLM cannot load, ``tp`` not dividing the heads, ``local`` without a GPU, ``with_plugin`` without the
            step 4 plugin, an unknown quantization, a GPU memory, utilization, ``max_model_len`` or offload that is
            not a number in range; ``hf_config_path`` / ``tokenizer`` that is no folder here, lacks the config.json
            it must hold or holds another model's, or is given with a model that is no GGUF.
    """
    req = resolve(model, capability, kv_cache_dtype, tp, with_plugin, backend, hf_config_path=hf_config_path,
                  tokenizer=tokenizer, quantization=quantization,
                  gpu_memory_gib=gpu_memory_gib, gpu_memory_utilization=gpu_memory_utilization,
                  max_model_len=max_model_len, cpu_offload_gb=cpu_offload_gb)
    with pr.quiet_logs():
        from ..vllm_plugin.register import not_loaded_by_vllm

        unloaded = not_loaded_by_vllm() if req.with_plugin else None     # vLLM's plugin loader would skip ours
        rec = _probe(req if unloaded is None else dataclasses.replace(req, with_plugin=False))
    return rec if unloaded is None else _plugin_not_loaded(rec, unloaded)


def _plugin_not_loaded(rec: dict[str, Any], why: str) -> dict[str, Any]:
    """A ``with_plugin`` record where vLLM would not load the plugin (``why``: :func:`~sparse_mla.vllm_plugin.register.
    not_loaded_by_vllm`): stock vLLM's answer, which it is, said first in its ``stages`` and in its ``headline``, and
    ``plugin`` ``{"loaded": False, "not_loaded": why, "registered": False}``."""
    rec["plugin"] = {"module": "sparse_mla.vllm_plugin", "called": None, "loaded": False, "registered": False,
                     "not_loaded": why, "overrides": {}, "wrapped": []}
    rec["stages"] = {"plugin": f"NOT LOADED: {why}; what follows is stock vLLM's answer", **rec["stages"]}
    raw = os.environ.get("VLLM_PLUGINS")
    rec["headline"] += not_loaded_note(raw)
    return rec


def not_loaded_note(raw: str | None) -> str:
    """What a ``with_plugin`` record's ``headline`` ends with where vLLM would not load the plugin: ``raw`` is
    ``VLLM_PLUGINS`` as set (None: unset)."""
    return f" (stock: VLLM_PLUGINS={raw!r} leaves the plugin out)" if raw is not None else \
        " (stock: the plugin is not loaded)"
