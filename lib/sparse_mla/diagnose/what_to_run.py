"""What to run: for a machine of several GPUs, every weights format x KV-cache dtype, stock vLLM and with the plugin
-- the attention backend and the DSA indexer vLLM picks, whether the engine starts, what fits in memory, and the
``vllm serve`` line to type. Every answer is a :func:`~sparse_mla.diagnose.path.diagnose` record; nothing here is
typed by hand but the machines asked about (:data:`MACHINES`) and the placeholder checkpoint paths of the commands.

An answer rests on a run only where a run made it (the H200 records in ``results/h200/``: our backend and indexer,
FLASHMLA_SPARSE and FLASH_ATTN_MLA_SPARSE at 9.0, our kernels at simulated 8.0/8.9/12.0); elsewhere it rests on
vLLM's own claims, and the ``rests_on`` column says which: vLLM's ``support_deep_gemm()`` for DeepGEMM's indexer on
SM12x, FlashInfer's SM120 sparse MLA kernel (a host-dependent import; upstream reports garbled output on vLLM 0.26,
vllm issue 49886), a quantization's ``get_min_capability()`` where the GPU has no native path for it.

GLM-5.3-Flash (a ``glm5_next`` config.json, vLLM 0.33/0.34) gets its own table (``what_to_run_glm5next``): its
weights formats (:data:`GLM5NEXT_WEIGHTS`), its placeholder checkpoints, and ``rests_on`` from vLLM's decisions for
that model and our NoPE kernel's checks -- none of the GLM-5 records.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UserInputError
from ..files import atomic_write_all
from ..layouts import WHAT_TO_RUN_KV_CACHE_DTYPES
from ..vllm_plugin.switches import INDEXER_NAME
from .request import GPU_PRESETS, QUANTIZATIONS

#: The machines the workbook answers for: label -> (GPU preset, GPUs). The first is the user's.
MACHINES: dict[str, tuple[str, int]] = {"8x RTX PRO 6000": ("rtx-pro-6000", 8), "8x A100 80 GB": ("a100", 8),
                                        "8x RTX 4090": ("rtx-4090", 8), "8x H200": ("h200", 8)}
WEIGHTS: tuple[str, ...] = ("bf16", "fp8", "nvfp4", "gguf-q4_k")
#: The KV-cache dtypes the table asks about (``layouts.WHAT_TO_RUN_KV_CACHE_DTYPES``, their one home).
KV_CACHE_DTYPES: tuple[str, ...] = WHAT_TO_RUN_KV_CACHE_DTYPES
#: Placeholder checkpoints of the ``vllm serve`` lines (replace with your own path), by weights format, ``{name}`` the
#: model's (:func:`checkpoint`); another format's is ``/models/{name}-{weights}``
CHECKPOINTS = {"bf16": "/models/{name}", "fp8": "/models/{name}-FP8", "nvfp4": "/models/{name}-NVFP4",
               "gguf-q4_k": "/models/{name}-GGUF/{name}-Q4_K_M-00001-of-00010.gguf"}
#: The models' names in the placeholders: the presets' (:data:`sparse_mla.models.PRESETS`) as their makers spell them
MODEL_NAMES = {"glm-5": "GLM-5", "deepseek-v3.2": "DeepSeek-V3.2"}
#: GLM-5.3-Flash (``glm5_next``, vLLM 0.33/0.34: a config.json such as ``make-checkpoint DIR --preset glm-5.3-flash
#: --config-only`` writes): its name, its weights formats asked by default, its tables' stem
GLM5NEXT_NAME = "GLM-5.3-Flash"
GLM5NEXT_WEIGHTS: tuple[str, ...] = ("bf16", "fp8")
GLM5NEXT_STEM = "what_to_run_glm5next"
COLUMNS: tuple[str, ...] = ("machine", "weights", "kv_cache_dtype", "vllm", "backend", "indexer", "kv_cache",
                            "engine_starts", "fits", "max_model_len", "kv_cache_tokens", "blocked_at", "fix",
                            "rests_on", "serve", "why")
STEM = "what_to_run"
OURS = "TRITON_MLA_SPARSE"
#: GPU capabilities (major, minor) whose engines ran on a GPU, read in the engines' workers (records check: proven)
RAN = {(9, 0): "the H200 records (results/h200/)"}
#: Capabilities at which a *proven* engine record of a simulated GPU exists (records check), with that record: ours with
#: the Triton indexer, vLLM seeing the capability and Triton compiling for it (the binaries ran as sm_90a on the H200).
#: tests/diagnose/test_what_to_run.py holds this to the record. (Older attempts: the 2026-12-01 record has no ran
#: block, the 2026-12-02 one is invalid, the 2026-12-03 engines died in vLLM's dense prefill.)
SIMULATED_RECORD = "results/h200/launch_h200_simulated.json"
SIMULATED: frozenset = frozenset({(8, 0), (8, 9), (12, 0)})


def check_request(machines, weights, kv_cache_dtypes) -> tuple[list[str], list[str], list[str]]:
    """The three lists, checked before any probe: one :class:`UserInputError` naming a value that is not accepted."""
    out = []
    for name, values, accepted in (("machines", machines, MACHINES), ("weights", weights, QUANTIZATIONS),
                                   ("kv_cache_dtypes", kv_cache_dtypes, ("auto", "bfloat16", "fp8", "fp8_ds_mla"))):
        if isinstance(values, str):
            raise UserInputError(f"{name} {values!r} is one string; accepted: a list of them, e.g. [{values!r}]")
        values = list(values)
        bad = [v for v in values if v not in accepted]
        if bad or not values:
            raise UserInputError(f"{name} {bad or values!r} not accepted; accepted: one or more of "
                                 f"{', '.join(map(str, accepted))}")
        out.append(values)
    return out[0], out[1], out[2]


def model_name(model) -> str:
    """The name of ``model`` (a preset, a config.json or a folder holding one) in the placeholder checkpoints:
    :data:`MODEL_NAMES` of a preset, :data:`GLM5NEXT_NAME` for GLM-5.3-Flash, else the checkpoint folder's name."""
    from ..models import preset_key

    if is_glm5next(model):
        return GLM5NEXT_NAME
    key = preset_key(model)                 # as models.load_model reads it
    if key in MODEL_NAMES:
        return MODEL_NAMES[key]
    path = Path(str(model))
    return (path.parent if path.suffix == ".json" else path).resolve().name


def checkpoint(name: str, weights: str) -> str:
    """The placeholder checkpoint of model ``name`` (:func:`model_name`) in ``weights`` (:data:`CHECKPOINTS`)."""
    return CHECKPOINTS.get(weights, "/models/{name}-" + weights).format(name=name)


def serve_line(rec: dict[str, Any], weights: str, kv_cache_dtype: str, tp: int, forced: bool = False,
               name: str = MODEL_NAMES["glm-5"]) -> str:
    """The ``vllm serve`` command of a configuration whose engine starts (``"-"`` otherwise): the checkpoint
    (:func:`checkpoint` of model ``name``, a placeholder), tensor parallelism, the KV-cache dtype, the longest
    ``--max-model-len`` the memory stage found room for, and for a GGUF its folder as the tokenizer
    (vllm-gguf-plugin reads the config.json beside the file; ``sparse-mla launch`` serves a GGUF the same way). With the
    plugin installed (``pip install``, its ``vllm.general_plugins`` entry point) no flag is needed: vLLM's own
    selection picks ``TRITON_MLA_SPARSE`` where it has nothing; ``forced`` adds ``--attention-backend CUSTOM`` (the
    plugin's slot), which takes ours where vLLM has a backend of its own."""
    from .gguf_config import serve_flags
    from .serve import serve_command

    if rec.get("engine_starts") is False or not (rec.get("memory") or {}).get("fits"):
        return "-"
    model = checkpoint(name, weights)
    return serve_command(model, tp, kv_cache_dtype, max_model_len=rec["memory"]["max_model_len"],
                         gguf_flags=serve_flags(Path(model).parent) if weights.startswith("gguf") else (),
                         attention_backend="CUSTOM" if forced else None)


def rests_on(rec: dict[str, Any], cap: tuple[int, int], weights: str, with_plugin: bool,
             gguf_loader: str | None = None) -> str:
    """What the answer of one configuration rests on: a GPU run (:data:`RAN`), our kernels' compiles and the
    simulated-capability engines, or vLLM's claims (module docstring); GLM-5.3-Flash's by :func:`_glm5next_rests_on`.
    ``gguf_loader``: why no GGUF adapter loads the model (:func:`sparse_mla.diagnose.gguf.adapter_wall` with ours;
    None where one does)."""
    if rec.get("glm5next"):
        return _glm5next_rests_on(rec, cap, with_plugin)
    claims = []
    if cap in RAN:
        claims.append(f"runs: {RAN[cap]}")
    elif with_plugin and rec.get("selected") == "TRITON_MLA_SPARSE":
        sim = (f" and an engine at simulated capability on the H200 ({SIMULATED_RECORD})" if cap in SIMULATED else
               "; no engine ran at this capability, simulated or real")
        claims.append(f"ours: Triton compiled for sm_{cap[0]}{cap[1]} ahead of time{sim}" +
                      (f"; no {cap[0]}.{cap[1]} GPU ran it" if cap in SIMULATED else ""))
    if rec.get("selected") == "FLASHINFER_MLA_SPARSE_SM120":
        claims.append("vLLM's claim: FlashInfer's SM120 sparse MLA kernel (host-dependent import; upstream reports "
                      "garbled output on vLLM 0.26, vllm issue 49886)")
    ix = rec.get("indexer") or {}
    if (ix.get("with_plugin") if with_plugin else ix.get("stock")) == "DEEPGEMM" and cap[0] == 12:
        claims.append("vLLM's claim: DeepGEMM's SM12x indexer (support_deep_gemm() is True for 12.x)")
    if weights.startswith("gguf"):
        claims.append(("GGUF: needs vllm-gguf-plugin and this plugin's glm-dsa adapter (the gguf extra); loaded so "
                       "on the H200 for Q8_0 (results/h200/launch_h200_gguf_q8_0.json) and for a split Q4_K_M from its "
                       "second shard (results/h200/launch_h200_gguf_q4_k_m_split.json)" if gguf_loader is None else
                       f"GGUF: not loadable, vllm-gguf-plugin with this plugin has no adapter for it ({gguf_loader})")
                      + ("" if with_plugin else "; stock vLLM 0.26 has no GGUF loader"))
    if weights in ("fp8", "nvfp4") and cap < ((8, 9) if weights == "fp8" else (10, 0)):
        claims.append(f"vLLM's claim: {weights} weights without native support on {cap[0]}.{cap[1]} (vLLM's "
                      f"get_min_capability() is 75: a Marlin weight-only path)")
    return "; ".join(claims) or "-"


def _glm5next_rests_on(rec: dict[str, Any], cap: tuple[int, int], with_plugin: bool) -> str:
    """What a GLM-5.3-Flash answer rests on: vLLM's own decisions for the model (no GLM-5 record speaks for it), our
    NoPE kernel's checks where ours is selected, our indexer's checks where it computes the KPool logits, and the KPool
    indexer's DeepGEMM where vLLM claims it."""
    claims = []
    if with_plugin and rec.get("selected") == OURS:
        kv = rec.get("effective_kv_cache_dtype")
        rows = ("its 528-byte fp8 rows as vLLM 0.34's CUDA writer writes them (read from its machine code; that writer "
                "never ran beside ours)" if kv == "fp8_ds_mla" else f"a {kv} cache")
        claims.append(f"ours: the NoPE head 512 over {rows} checked on the CPU against the float64 reference and "
                      f"compiled for sm_{cap[0]}{cap[1]} ahead of time; no engine ran GLM-5.3-Flash with it")
    if rec.get("selected") == "FLASHINFER_MLA_SPARSE_SM120":
        claims.append("vLLM's claim: FlashInfer's SM120 sparse MLA kernel (host-dependent import)")
    ix = rec.get("indexer") or {}
    if with_plugin and ix.get("with_plugin") == INDEXER_NAME:
        claims.append(f"ours: {INDEXER_NAME} on the KPool logits, through vLLM's KPool module on the CPU against vLLM's "
                      f"torch references and float64 (tests/vllm_plugin/test_indexer_kpool.py); no engine ran "
                      f"GLM-5.3-Flash with it")
        if cap < (8, 9):
            claims.append(f"ours: the KPool path's fp8 stores written as bytes (sparse_mla.vllm_plugin.kpool_stores), "
                          f"byte for byte against vLLM's kernels in Triton's interpreter "
                          f"(tests/kernels/test_kpool_stand_ins.py) and compiled for sm_{cap[0]}{cap[1]} ahead of "
                          f"time; no GPU ran them")
    if ix.get("stock") == "DEEPGEMM":
        claims.append(f"vLLM's claim: its KPool indexer's DeepGEMM calls on {cap[0]}.{cap[1]} (support_deep_gemm())")
    return "; ".join(claims) or "vLLM's decisions on the diagnosis' probe platform"


def _gguf_wall(rec: dict[str, Any], with_plugin: bool, loader: str | None) -> dict[str, Any]:
    """``rec`` of a GGUF checkpoint with its GGUF wall first, as the diagnosis of a ``.gguf`` file puts it (the
    diagnosis of a preset sizes GGUF weights but has no file to load): on stock vLLM its own loader registry
    (:func:`sparse_mla.diagnose.gguf.stock_wall`), with the plugin ``loader`` (the weights adapter's refusal,
    :func:`sparse_mla.diagnose.gguf.adapter_wall` with ours; None where it loads the model)."""
    from .gguf import stock_wall

    wall = loader if with_plugin else stock_wall()
    if wall is None:
        return rec
    return {**rec, "engine_starts": False, "blockers": [{"stage": "config", "reason": wall},
                                                        *(rec.get("blockers") or [])]}


def _row(rec: dict[str, Any], machine: str, weights: str, kv: str, with_plugin: bool, tp: int,
         forced: bool = False, name: str = MODEL_NAMES["glm-5"], loader: str | None = None) -> dict[str, Any]:
    """One row of :func:`what_to_run` (:data:`COLUMNS`) from the diagnosis ``rec``; ``name``: the model's
    (:func:`model_name`), ``loader``: why no GGUF adapter loads it (:func:`_gguf_wall`)."""
    if weights.startswith("gguf"):
        rec = _gguf_wall(rec, with_plugin, loader)
    mem = rec.get("memory") or {}
    ix = rec.get("indexer") or {}
    fixes = mem.get("fixes") or []
    cap = tuple(int(x) for x in rec["capability"].split("."))
    starts = rec.get("engine_starts")
    return {"machine": machine, "weights": weights, "kv_cache_dtype": kv,
            "vllm": "with the plugin, --attention-backend CUSTOM" if forced else "with the plugin" if with_plugin
            else "stock",
            "backend": rec.get("selected") or "none",
            "indexer": (ix.get("with_plugin") if with_plugin else ix.get("stock")) or "none",
            "kv_cache": rec.get("effective_kv_cache_dtype") or "-",
            "engine_starts": {True: "yes", False: "no", None: "host-dependent"}[starts],
            "fits": "yes" if mem.get("fits") else "no" if mem else "not reached",
            "max_model_len": mem.get("max_model_len") if mem.get("fits") else None,
            "kv_cache_tokens": mem.get("max_tokens"),
            "blocked_at": rec["blockers"][0]["stage"] if rec.get("blockers") else "-",
            "fix": "; ".join(f["change"] for f in fixes) if fixes else "-",
            "rests_on": rests_on(rec, cap, weights, with_plugin, loader if weights.startswith("gguf") else None),
            "serve": serve_line(rec, weights, kv, tp, forced, name),
            "why": " | ".join(b["reason"] for b in rec.get("blockers") or []) or "-"}


def what_to_run(model: str = "glm-5", machines: Iterable[str] | None = None, weights: Iterable[str] | None = None,
                kv_cache_dtypes: Iterable[str] | None = None, progress: bool = False):
    """One :func:`diagnose` per machine x weights x KV dtype x (stock, with the plugin) -- and with the plugin asked
    for by name (``--attention-backend CUSTOM``) where vLLM selects a backend of its own --, as a ``pandas.DataFrame`` of
    :data:`COLUMNS`: ``backend`` and ``indexer`` as vLLM selects them (``none``), ``kv_cache`` the dtype vLLM
    allocates, ``engine_starts`` (``yes``/``no``/``host-dependent``), ``fits`` and the longest ``max_model_len`` with
    ``kv_cache_tokens`` of room, ``blocked_at`` (the first stage that stops the engine) and ``fix`` (what the memory
    stage found would fit), ``rests_on`` (:func:`rests_on`), ``serve`` (:func:`serve_line`), ``why`` (vLLM's reasons,
    whole). ``machines``: labels of :data:`MACHINES` (default all); ``weights``: :data:`~sparse_mla.diagnose.request.
    QUANTIZATIONS` names (default :data:`WEIGHTS`); ``kv_cache_dtypes`` (default :data:`KV_CACHE_DTYPES`). Raises
    :class:`UserInputError` before any probe for a value not accepted. About 1.5 s per probe on a CPU."""
    import pandas as pd

    from .path import diagnose

    flash = is_glm5next(model)
    machines, weights, kvs = check_request(list(MACHINES) if machines is None else machines,
                                           list(GLM5NEXT_WEIGHTS if flash else WEIGHTS) if weights is None else weights,
                                           list(KV_CACHE_DTYPES) if kv_cache_dtypes is None else kv_cache_dtypes)
    cells = [(m, w, kv, p) for m in machines for w in weights for kv in kvs for p in (False, True)]
    if progress:
        from tqdm.auto import tqdm

        cells = tqdm(cells, desc="diagnose", leave=False)
    name, loader = model_name(model), _gguf_loader(model, weights)
    rows = []
    for machine, w, kv, plugin in cells:
        gpu, tp = MACHINES[machine]
        rec = diagnose(model, gpu, kv, tp=tp, with_plugin=plugin, quantization=w)
        rows.append(_row(rec, machine, w, kv, plugin, tp, name=name, loader=loader))
        if plugin and rec.get("selected") not in (None, OURS):   # vLLM has its own: ours only when asked for
            rec = diagnose(model, gpu, kv, tp=tp, with_plugin=True, quantization=w, backend=OURS)
            rows.append(_row(rec, machine, w, kv, True, tp, forced=True, name=name, loader=loader))
    df = pd.DataFrame(rows, columns=list(COLUMNS)).astype({"max_model_len": "Int64", "kv_cache_tokens": "Int64"})
    df.attrs.update(model="GLM-5.3-Flash" if flash else model, stem=GLM5NEXT_STEM if flash else STEM)
    return df


def _gguf_loader(model, weights) -> str | None:
    """Why no weights adapter of vllm-gguf-plugin, ours registered first, loads a GGUF of ``model`` -- the decision
    the diagnosis of a ``.gguf`` file asks (:func:`sparse_mla.diagnose.gguf.adapter_wall`), of the model's config --
    or None where one does or no GGUF weights are asked."""
    if not any(str(w).startswith("gguf") for w in weights):
        return None
    from ..models import load_model
    from .gguf import adapter_wall

    return adapter_wall(load_model(model).raw_config, ours=True)


def is_glm5next(model) -> bool:
    """Whether ``model`` (a preset name, a config.json or a folder holding one) is GLM-5.3-Flash (``model_type``
    ``glm5_next``); a file that cannot be read as JSON is not (the diagnosis then says why)."""
    import json

    path = Path(str(model))
    path = path / "config.json" if path.is_dir() else path
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        return json.loads(path.read_text()).get("model_type") == "glm5_next"
    except (OSError, ValueError, AttributeError):
        return False


def stem(model) -> str:
    """The tables' file name stem for ``model``: :data:`GLM5NEXT_STEM` for GLM-5.3-Flash, else :data:`STEM`."""
    return GLM5NEXT_STEM if is_glm5next(model) else STEM


def answer(df, machine: str) -> list[dict[str, Any]]:
    """The configurations of ``machine`` in a :func:`what_to_run` frame whose engine starts: ``[{"weights",
    "kv_cache_dtype", "vllm", "backend", "indexer", "max_model_len", "serve", "rests_on"}]`` (host-dependent ones
    after the others)."""
    g = df[(df["machine"] == machine) & df["engine_starts"].isin(["yes", "host-dependent"])]
    g = g.sort_values("engine_starts", key=lambda c: c != "yes", kind="stable")
    keys = ("weights", "kv_cache_dtype", "vllm", "backend", "indexer", "engine_starts", "max_model_len", "serve",
            "rests_on")
    return [{k: r[k] for k in keys} for r in g.to_dict(orient="records")]


def markdown(df) -> str:
    """A :func:`what_to_run` frame as Markdown: one table per machine (the ``why`` column left out: vLLM's reasons
    follow each table whole, once per distinct text)."""
    import pandas as pd
    import vllm

    out = [f"What to run: {df.attrs.get('model', 'glm-5')}, generated by `sparse-mla diagnose --what-to-run` "
           f"(`sparse_mla.diagnose.what_to_run`) from vLLM {vllm.__version__}'s own path, on the diagnosis's probe "
           f"platform. Checkpoint paths in the `vllm serve` lines are placeholders. `rests_on` says what each "
           f"answer rests on: a GPU run, or vLLM's claim.", ""]
    shown = [c for c in COLUMNS if c not in ("machine", "why")]
    for machine, g in df.groupby("machine", sort=False):
        gpu, tp = MACHINES.get(machine, (None, None))
        out += [f"### {machine} (compute capability {GPU_PRESETS[gpu] if gpu else '?'}, TP {tp})", "",
                "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
        for r in g.itertuples(index=False):
            row = r._asdict()
            out.append("| " + " | ".join("-" if pd.isna(row[c]) else
                                         (f"`{row[c]}`" if c == "serve" and row[c] != "-" else str(row[c]))
                                         for c in shown) + " |")
        whys = [w for w in dict.fromkeys(g["why"]) if w != "-"]
        if whys:
            out += ["", "vLLM's reasons, whole:", ""] + [f"* {w}" for w in whys]
        out.append("")
    return "\n".join(out)


def read(path: str | os.PathLike):
    """A written table (``what_to_run.csv``) as text cells, missing values as ``""``: the form :func:`as_written`
    gives a live frame, to compare the two."""
    import pandas as pd

    return pd.read_csv(path, dtype=str, keep_default_na=False)


def as_written(df):
    """A :func:`what_to_run` frame as :func:`read` gives it back from its CSV (text cells, missing values ``""``)."""
    import io

    import pandas as pd

    return pd.read_csv(io.StringIO(df.to_csv(index=False)), dtype=str, keep_default_na=False)


def write(df, out_dir: str | os.PathLike = "results") -> dict[str, Path]:
    """``<out_dir>/what_to_run.csv`` and ``.md`` (``what_to_run_glm5next.*`` for GLM-5.3-Flash: the frame's ``stem``),
    each written atomically. Returns ``{"csv": path, "md": path}``."""
    out = Path(out_dir)
    name = df.attrs.get("stem", STEM)
    paths = {"csv": out / f"{name}.csv", "md": out / f"{name}.md"}
    md = markdown(df)
    atomic_write_all([(paths["csv"], lambda tmp: df.to_csv(tmp, index=False)),
                      (paths["md"], lambda tmp: Path(tmp).write_text(md))])
    return paths
