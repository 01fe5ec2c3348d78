"""Reading a diagnosis record: one backend's verdict, the backends as a table, the record as text, what was
simulated, and vLLM's own source lines to quote."""
from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def backend_verdict(rec: Mapping[str, Any], name: str) -> str:
    """One backend's line in a :func:`diagnose` record: ``SELECTED``, ``valid`` (with a note when the backend is not
    on this GPU's priority list, so vLLM's selector never tries it), or vLLM's reasons joined by ``"; "``."""
    b = rec["backends"][name]
    if b["reasons"]:
        return "; ".join(b["reasons"])
    if name == rec["selected"]:
        return "SELECTED"
    return "valid" + ("" if b["priority"] is not None else " (not in this GPU's priority list)")


def backends_frame(rec: Mapping[str, Any]):
    """The record's ``backends`` as a ``pandas.DataFrame`` (backend, priority, verdict), in the record's order."""
    import pandas as pd

    rows = []
    for name, b in rec["backends"].items():
        rows.append({"backend": name, "priority": b["priority"], "verdict": backend_verdict(rec, name)})
    df = pd.DataFrame(rows, columns=["backend", "priority", "verdict"])
    df["priority"] = df["priority"].astype("Int64")
    return df.set_index("backend")


def vllm_source(module: str, pattern: str, after: int = 0) -> str:
    """Lines of vLLM's source that contain ``pattern`` (plus ``after`` following lines), as
    ``vllm/<path>:<line>: <text>``, read from the installed file without importing the module."""
    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{module} is not installed")
    root = Path(list(spec.submodule_search_locations)[0]).parent
    rel = Path(*module.split(".")).with_suffix(".py")
    lines = (root / rel).read_text().splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if pattern in line:
            for j in range(i, min(i + after + 1, len(lines))):
                out.append(f"{rel.as_posix()}:{j + 1}: {lines[j]}")
    return "\n".join(out)


def memory_line(mem: Mapping[str, Any]) -> str:
    """The memory stage's verdict in one line: weights per rank, the KV cache per token, and whether one request of
    ``max_model_len`` fits (with the changes that make it fit when it does not)."""
    head = f"quantization {mem['quantization']}"
    if mem.get("weights_gib_per_rank") is None:
        return f"BLOCKED: {mem['reason']}" if mem.get("fits") is False else f"{head}: not computed"
    kv = (f"KV cache {mem['kv_cache_bytes_per_token']:,} B per token ({mem['kv_cache_dtype']}, "
          + " + ".join(f"{k} {v:,}" for k, v in mem["kv_cache_bytes_per_token_by_layer"].items()) + ")")
    held = mem["quantization"]     # unquantized weights are held in vLLM's model dtype (float32 below SM80)
    if held == "bf16" and mem.get("model_dtype") not in (None, "bfloat16"):
        held = f"unquantized, {mem['model_dtype']}"
    weights = f"weights {mem['weights_gib_per_rank']:.1f} GiB per rank ({held})"
    if mem.get("offloaded_gib"):
        weights += f", {mem['offloaded_gib']:.1f} GiB of it offloaded to the CPU" + offload_text(mem.get("offload"))
    if mem["fits"] is None:
        return f"{weights}; {kv}; fits: not checked (GPU memory {mem['gpu_memory_source']})"
    tokens = (f"room for {mem['max_tokens']:,} tokens" if mem.get("kv_cache_available_gib") is not None else "no room")
    tokens += f" in {mem['gpu_memory_gib']:.1f} GiB x {mem['gpu_memory_utilization']:g}"
    if mem["fits"]:
        return f"ok: {weights}; {kv}; {tokens}; max_model_len {mem['max_model_len']:,} fits"
    fixes = [f["change"] for f in mem.get("fixes", []) if f.get("fits")]
    reason = str(mem["reason"]).split(" Try increasing")[0]      # vLLM's advice follows; the record keeps it whole
    return (f"BLOCKED: {weights}; {kv}; {tokens}: {reason}"
            + (f"; fits with: {'; '.join(fixes)}" if fixes else "; no single change found that makes it fit"))


def offload_text(off: Mapping[str, Any] | None) -> str:
    """The host memory ``--cpu-offload-gb`` pins (the memory stage's ``offload``), in parentheses: over all ranks,
    whether the asked amount is more than vLLM moves (every decoder layer), and where it is more than this machine's
    memory; ``""`` without an offload."""
    if not off:
        return ""
    text = f" ({off['host_gib']:.1f} GiB of pinned host memory over {off['ranks']} rank(s)"
    if off["asked_gib"] > off["moved_gib"] + 1:
        text += f"; --cpu-offload-gb {off['asked_gib']:g} asks more: vLLM moves every decoder layer's weights, no more"
    here = off.get("this_machine_gib")
    if here is not None and off["host_gib"] > here:
        text += f"; more than this machine's {here:.1f} GiB of memory: the GPUs' host needs that much, not checked"
    return text + ")"


def format_record(rec: Mapping[str, Any]) -> str:
    """A :func:`diagnose` record as text: the request, one verdict line per stage of vLLM's path (config, attention,
    KV cache, indexer, kernel, engine), for a checkpoint on disk its ``vllm serve`` line (a GGUF's with its config
    source: :func:`gguf_lines`), the table of MLA backends with vLLM's reasons and vLLM's own selection text (left out
    where the config stage blocks: :func:`config_blocked`), and what was simulated."""
    forced = f", --attention-backend {rec['forced_backend']}" if rec.get("forced_backend") else ""
    lines = [f"model {rec['model']} ({rec['mla'] or '?'} MLA, {rec['dtype']}, {rec['heads_per_rank']} heads/rank at "
             f"tp={rec['tp']}), capability {rec['capability']}" + (f" [{rec['gpu']}]" if rec.get("gpu") else "")
             + f", kv_cache_dtype {rec['kv_cache_dtype']}{forced}, vLLM {rec['vllm_version']}", ""]
    sup = rec.get("vllm_supported") or {}
    if sup and not sup.get("supported"):
        lines[-1:] = [f"warning: {sup['note']}", ""]
    w = max(len(k) for k in rec["stages"])
    for stage, line in rec["stages"].items():
        lines.append(f"{stage:<{w}}  {line}")
    lines += gguf_lines(rec.get("checkpoint") or {})
    lines += glm5next_lines(rec.get("glm5next"))
    reached = not config_blocked(rec)       # the attention stage: vLLM's verdicts on its backends, its selection text
    if rec["backends"] and reached:
        rows = sorted(rec["backends"].items(),
                      key=lambda kv: (kv[1]["priority"] is None, kv[1]["priority"] if kv[1]["priority"] is not None
                                      else 0, kv[0]))
        bw = max([len("backend")] + [len(n) for n, _ in rows])
        lines += ["", f"{'backend':<{bw}}  {'prio':>4}  verdict", f"{'-' * bw}  {'-' * 4}  {'-' * 7}"]
        for name, b in rows:
            prio = "-" if b["priority"] is None else str(b["priority"])
            lines.append(f"{name:<{bw}}  {prio:>4}  {backend_verdict(rec, name)}")
    lines += ["", *([f"vLLM: {rec['verdict']}"] if reached or not rec["backends"] else []),   # or vLLM's refusal
              f"Simulated: {describe_simulated(rec['simulated'])}"]
    if rec.get("plugin"):
        p = rec["plugin"]
        lines.append(f"Plugin: not loaded by vLLM: {p['not_loaded']}" if p.get("not_loaded") else
                     f"Plugin: {p.get('called')} " + (f"overrides {p.get('overrides') or '{}'}"
                                                      if p.get("registered", True) else "registered nothing"))
    return "\n".join(lines)


def config_blocked(rec: Mapping[str, Any]) -> bool:
    """Whether the record's first blocker is at the config stage: vLLM refused the configuration, or a GGUF's wall
    (its loader, its folder) stops it there. The stages after it are not reached: the text output leaves out the
    backend table and vLLM's selection text (a GGUF's wall is met loading the config, after which the probe still
    asks the selection), and keeps vLLM's refusal of the configuration (its ``verdict`` where no backend was asked)."""
    blockers = rec.get("blockers") or []
    return bool(blockers) and blockers[0]["stage"] == "config"


def gguf_lines(checkpoint: Mapping[str, Any]) -> list[str]:
    """For a GGUF record's ``checkpoint``: where vLLM reads the config and tokenizer from, and the ``vllm serve``
    line diagnosed (a blank line first); for another checkpoint on disk its ``vllm serve`` line alone; ``[]`` for a
    preset (no checkpoint)."""
    if checkpoint.get("format") != "gguf":
        return ["", f"vllm serve line: {checkpoint['serve']}"] if checkpoint.get("serve") else []
    src = checkpoint["config_source"]
    config = (f"config.json from {src['folder']} ({src['flag']})" if src.get("config_json", True) else
              f"no config.json in {src['folder']} ({src['flag']})")
    tok = (f"tokenizer from {checkpoint['tokenizer']}" if not checkpoint.get("tokenizer_error") else
           f"no tokenizer vLLM can load in {checkpoint['tokenizer']}")
    serve = "vllm serve line" + (" (fails until the folder has them)" if config.startswith("no")
                                 or tok.startswith("no") else "")
    note = [f"  {src[k]}" for k in ("differs", "quantization_config") if src.get(k)]
    return ["", f"GGUF {checkpoint['file']} ({len(checkpoint['files'])} file(s)): {config}, {tok}", *note,
            f"{serve}: {checkpoint['serve']}"]


def glm5next_lines(section: Mapping[str, Any] | None) -> list[str]:
    """For a GLM-5.3-Flash record's ``glm5next`` section (:func:`sparse_mla.diagnose.path.diagnose`): vLLM 0.33's KPool
    indexer (its numbers and kernels), the KDA layers' kernels, and what our kernels would need, after the statement
    that this is a diagnosis, not support (a blank line first); ``[]`` for another model."""
    if not section:
        return []
    kp, kda, ours = section["kpool"], section["kda"], section["ours"]
    out = ["", f"{section['model']} on vLLM's GLM-5.3-Flash path (vllm/models/glm5next/):",
           f"  indexer: {kp['backend']} with KPool: one fp8 key per {kp['index_kpool']} tokens (kernel block sizes "
           f"{kp['kernel_block_sizes']}), top-{kp['pools_selected']} pools of index_topk {kp['index_topk']} expanded to "
           f"rows of {kp['topk_width']} with the tail pool; MLA (DSA) layers {kp['mla_layers']}",
           f"  KDA: layers {kda['layers'][:3]}... ({len(kda['layers'])}); kernels: "
           + "; ".join(f"{k} {v}" for k, v in kda["kernels"].items()),
           f"What our kernels would need ({ours['statement']}):"]
    return out + [f"  {n['part']}: {n['need']}" for n in ours["needs"]]


def format_stages(rec: Mapping[str, Any], width: int | None = None) -> str:
    """The record's verdict per stage of vLLM's path, one line each (wrapped at ``width`` characters if given), then
    the blockers' stages and ``engine_starts``."""
    import textwrap

    head = (f"{rec['model']} on {rec['capability']}" + (f" [{rec['gpu']}]" if rec.get("gpu") else "")
            + f", --kv-cache-dtype {rec['kv_cache_dtype']}" + (f", --attention-backend {rec['forced_backend']}"
                                                               if rec.get("forced_backend") else "")
            + (" (with the plugin)" if rec.get("plugin") and not rec["plugin"].get("not_loaded") else "") + ":")
    lines = [head]
    w = max(len(k) for k in rec["stages"])
    for stage, text in rec["stages"].items():
        first = f"  {stage:<{w}}  "
        if width:
            lines.append(textwrap.fill(text, width=width, initial_indent=first, subsequent_indent=" " * len(first)))
        else:
            lines.append(first + text)
    lines.append(f"  blockers: {[b['stage'] for b in rec['blockers']]} | engine_starts: {rec['engine_starts']}")
    return "\n".join(lines)


def describe_simulated(sim: Mapping[str, Any]) -> str:
    """One line for the record's ``simulated`` entry."""
    if not sim.get("probe"):
        return f"nothing: real {sim.get('platform')} ({sim.get('device_name')}, {sim.get('device_capability')})"
    parts = [f"GPU with compute capability {sim['device_capability']} (probe platform, no device)"]
    drv = sim.get("driver") or {}
    if drv.get("driver") == "stand-in":
        parts.append(f"vLLM's extensions loaded against a stand-in libcuda.so.1 ({drv.get('symbols')} entry points, "
                     f"all returning CUDA_ERROR_NO_DEVICE)")
    if drv.get("failed"):
        parts.append("extensions that failed to load: " + ", ".join(drv["failed"]))
    if sim.get("model_inspection"):
        parts.append("vLLM's model inspection in-process")
    if sim.get("refreshed_flags"):
        parts.append("extension flags set again: " + ", ".join(f.rsplit(".", 1)[-1] for f in sim["refreshed_flags"]))
    if sim.get("import_shims"):
        parts.append("import shim for " + ", ".join(sim["import_shims"]))
    if sim.get("import_errors"):
        parts.append("import failed: " + ", ".join(sim["import_errors"]))
    return "; ".join(parts)
