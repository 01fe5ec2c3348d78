"""``records table status [PATH ...]``: what has run where, for the machines the workbook plans for, from the records
that ``records check`` calls proven (:mod:`sparse_mla.workbook.proof`).

One row per machine of the diagnosis's what-to-run table (:data:`sparse_mla.diagnose.what_to_run.MACHINES`: its GPU's
capability and the tensor-parallel size people run it at): where our backend (``TRITON_MLA_SPARSE``) ran with that
capability on a real GPU of it (an H100 for the 8x H200 row counts: the same capability, named in the cell), and where
vLLM saw it on another GPU (the harness's capability simulation: vLLM's decisions and Triton's code for that GPU, run
on an SM90 GPU), with the GPUs' names, the largest tensor-parallel size, the KV-cache dtypes,
the weights' formats, whether CUDA graphs were captured, the models and the records. A cell with nothing proven says
"never". The model is what the record's writer ran: a GLM-5.3-Flash comparison (``tools/gpu/glm5next_parity.py``,
:func:`sparse_mla.workbook.written.is_glm5next_comparison`) ran GLM-5.3-Flash (head 512, KPool indexer); a ``launch``
record a checkpoint of the 576-head DSA MLA architecture (GLM-5's, DeepSeek-V3.2's).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..diagnose.what_to_run import MACHINES
from ..records.common import markdown
from ..records.engine_tables import engine_runs
from . import proof
from .written import is_glm5next_comparison

OURS = "TRITON_MLA_SPARSE"
#: The model a record ran, by its writer (module docstring).
GLM5_NEXT, HEAD_576 = "GLM-5.3-Flash", "576-head DSA MLA"


def our_runs(paths: list[str]) -> list[dict]:
    """Every engine run of our backend in a proven record under ``paths``: ``{"record", "capability" (vLLM's),
    "device" (the GPU's own), "tp", "kv", "weights", "graphs", "vllm", "gpu", "model"}``."""
    import json

    out = []
    for v in proof.check(paths):
        if v.status != "proven":
            continue
        rec = json.loads(Path(v.path).read_text())
        env = rec.get("environment") or {}
        model = GLM5_NEXT if is_glm5next_comparison(rec) else HEAD_576
        for run in engine_runs(rec).values():
            ran = run.get("ran") or {}
            if run.get("backend_requested") != OURS or not ran:
                continue
            cap = ran["capability"]
            out.append({"record": v.path, "capability": cap, "device": ran.get("device_capability") or
                        env.get("capability") or cap, "tp": rec.get("tp") or run.get("tp") or 1,
                        "kv": run.get("kv_cache_dtype") or rec.get("kv_cache_dtype") or "auto",
                        "weights": (rec.get("checkpoint") or {}).get("format") or "safetensors",
                        "graphs": run.get("enforce_eager") is False or run.get("cuda_graphs") is True,
                        "vllm": env.get("vllm"), "gpu": env.get("gpu"), "model": model})
    return out


def _cell(runs: list[dict], base: Path) -> str:
    """One cell: "never", or a line per model (its runs' GPUs, vLLM lines, TP, KV, weights, graphs and records)."""
    if not runs:
        return "never"
    return "<br>".join(f"{m}: " + _model_runs([r for r in runs if r["model"] == m], base)
                       for m in sorted({r["model"] for r in runs}))


#: A cell names at most this many records, then how many more there are (the README stays short).
MAX_NAMED = 3


def _model_runs(runs: list[dict], base: Path) -> str:
    records = sorted({os.path.relpath(r["record"], base) for r in runs})
    named = ", ".join(f"`{x}`" for x in records[:MAX_NAMED])
    more = f" and {len(records) - MAX_NAMED} more (`sparse-mla records check results`)" \
        if len(records) > MAX_NAMED else ""
    graphs = "CUDA graphs" if any(r["graphs"] for r in runs) else "eager only"
    gpus = ", ".join(sorted({str(r["gpu"]).removeprefix("NVIDIA ") for r in runs}))
    tp = max(r["tp"] for r in runs)
    return (f"on {gpus}; vLLM {', '.join(sorted({str(r['vllm']) for r in runs}))}; "
            f"{'TP 1' if tp == 1 else f'TP up to {tp}'}; "
            f"KV {', '.join(sorted({r['kv'] for r in runs}))}; {', '.join(sorted({r['weights'] for r in runs}))}; "
            f"{graphs}; {named}{more}")


def status_table(args: list[str], base: Path) -> str:
    """The table (module docstring) over the records under ``args`` (default ``results``, relative to ``base``)."""
    from ..diagnose.request import GPUS

    runs = our_runs(proof.paths_under(base, args))
    rows = []
    for label, (preset, tp) in MACHINES.items():
        cap = GPUS[preset].capability
        real = [r for r in runs if r["capability"] == cap and r["device"] == cap]
        sim = [r for r in runs if r["capability"] == cap and r["device"] != cap]
        rows.append([label, f"{cap}, TP {tp}", _cell(real, base), _cell(sim, base)])
    return markdown(["machine", "GPU capability, TP people run", "ours on a GPU of that capability", "ours with vLLM "
                     "seeing that capability on another GPU (simulated)"], rows,
                    ["Our backend's engine runs in the records `sparse-mla records check` calls proven (read in the "
                     "engine's workers); generated by `sparse-mla records table status`. Every record's model is a "
                     f"tiny random-weight checkpoint of make-checkpoint's: {HEAD_576} (the architecture GLM-5 and "
                     f"DeepSeek-V3.2 share) or {GLM5_NEXT} (head 512, the KPool indexer); no real weights have run "
                     "anywhere."])
