"""Step 5: GLM-5 through vLLM on a chosen attention backend, offline (``vllm.LLM``) or served (``vllm serve`` +
the ``openai`` client), with parity checks against vLLM's own sparse backends and an independent PyTorch forward.

* :func:`run_offline` starts one engine, reports the backend every attention layer got, generates greedily with
  log-probs, and measures decode throughput of a decode-heavy batch.
* :func:`run_serve` starts ``vllm serve`` on 127.0.0.1 (:func:`serve_command`, :func:`server_env`, and
  :func:`sparse_mla.launch.server.served`: a free port, a bounded wait for ``/health``, the server's process group
  always stopped), sends one completion through the ``openai`` client and reads back which backend the server's
  worker picked. ``sparse_mla.bench.serve`` drives the same pieces under load.
* :func:`run_parity` runs :func:`run_offline` for several run specs, each in its own process (a clean GPU per
  engine), runs the served check, computes the reference forward's first-token log-probs
  (:class:`sparse_mla.launch.glm5_reference.Glm5Reference`), and writes one JSON record.

A **run spec** is ``BACKEND`` or ``BACKEND+TRITON_DSA_INDEXER`` (:mod:`sparse_mla.launch.specs`). Backend names:
``TRITON_MLA_SPARSE`` (this workbook's, registered by the ``vllm.general_plugins`` entry point into vLLM's ``CUSTOM``
slot, so ``CUSTOM`` is an alias; vLLM's own selector also picks it where it has no sparse MLA backend), ``auto``
(vLLM's choice), or one of vLLM's CUDA sparse MLA backends for the 576-wide MLA head (e.g.
``FLASH_ATTN_MLA_SPARSE``, ``FLASHMLA_SPARSE``). The ``+TRITON_DSA_INDEXER`` suffix runs that engine with
``SPARSE_MLA_TRITON_INDEXER=1`` in its environment.

Every record names each run's backend, indexer and KV-cache dtype, and carries ``"simulated"`` when
``SPARSE_MLA_SIMULATED_CAPABILITY`` is set (``specs.simulated``). An engine needs a CUDA GPU: vLLM's CPU platform
refuses MLA and sparse attention.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from ..files import atomic_write_text, parse_json, read_json
from ..errors import UserInputError, cli_int, expand_path, writable_file
from ..gguf.files import is_gguf
from .agreement import first_token_agreement, largest, only_prompts, split_prompts
from .first_token import first_token_criterion
from .server import HOST, ServerError, backend_log_lines, collective_rpc, free_port, served
from ..vllm_plugin.switches import COUNT_ENV
from ..vllm_plugin.ran import RAN_METHOD, SERVE_ENV, SERVE_OPTIONS, collect, contradictions, layer_backends
from ..layouts import ENGINE_KV_CACHE_DTYPES, INDEX_TOPK_MULTIPLE, check_kv_cache_dtype
from ..models import GLM5_NEXT_VLLM_LINE, check_config, is_glm5_next, known_model_type, text_config
from .specs import (MTP_EXAMPLE, OURS, PEERS, TRITON_INDEXER, RunSpec, attention_config,
                    check_speculative_config, drafter_backend, normalize_backends, parse_run_spec, patched_environ,
                    simulated, with_drafter_backend, with_simulated)

SERVED_NAME = "glm5"


def require_gpu() -> None:
    from .. import machine

    machine.require_gpu("an engine launch (vLLM's CPU platform refuses MLA and sparse attention)",
                        "a machine with an NVIDIA GPU, or notebook 05's CPU path (reference forward with the kernel "
                        "under the Triton interpreter)")


def check_model_dir(model: str | os.PathLike) -> Path:
    """The checkpoint directory as a :class:`~pathlib.Path`, after checking that it holds a DSA model's config.

    vLLM's ``deepseek_v2.py`` turns on sparse attention exactly when the config has ``index_topk``; MLA needs
    ``kv_lora_rank``. Raises :class:`UserInputError` for a missing directory or ``config.json``, a file that is not
    JSON, or a config without those keys -- before any engine starts.
    """
    p = expand_path(model, "model directory")
    accepted = "accepted: a Hugging Face checkpoint directory (e.g. from `sparse-mla make-checkpoint`, or a real GLM-5 " \
               "download)"
    if not p.exists():
        raise UserInputError(f"model directory {str(model)!r} does not exist; {accepted}")
    if not p.is_dir():
        raise UserInputError(f"model directory {str(model)!r} is not a directory; {accepted}")
    if not (p / "config.json").is_file():
        raise UserInputError(f"model directory {str(model)!r} has no config.json; {accepted}")
    name = str(p / "config.json")
    raw = read_json(p / "config.json", accepted="a Hugging Face config.json")
    cfg = check_config(raw, name)
    if is_glm5_next(raw):
        raise UserInputError(f"{name!r} is GLM-5.3-Flash (model_type {cfg.get('model_type')!r}), which the workbook "
                             f"diagnoses but does not run: its NoPE MLA head is 512 and its indexer pools keys "
                             f"(KPool), and the plugin's kernels take head 576 and a token-level indexer; accepted: a "
                             f"GLM-5 / DeepSeek-V3.2 checkpoint, or `sparse-mla diagnose --model {str(p)}` under vLLM "
                             f"{GLM5_NEXT_VLLM_LINE}")
    missing = [k for k in ("index_topk", "kv_lora_rank", "num_attention_heads") if k not in cfg]
    if missing:
        arch = ", ".join(map(str, cfg.get("architectures") or [])) or cfg.get("model_type") or "unknown architecture"
        raise UserInputError(f"{str(p / 'config.json')!r} ({arch}) is not a DSA (sparse MLA) model: no "
                             f"{', '.join(missing)}; accepted: a GLM-5 / DeepSeek-V3.2 architecture "
                             f"(GlmMoeDsaForCausalLM, DeepseekV32ForCausalLM) with index_topk and kv_lora_rank")
    for k, hi in (("index_topk", 2**20), ("kv_lora_rank", 2**16), ("num_attention_heads", 4096)):
        v = cfg[k]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            raise UserInputError(f"{str(p / 'config.json')!r} has {k} = {v!r}; accepted: an integer from 1 to {hi}")
    if cfg["index_topk"] % INDEX_TOPK_MULTIPLE:
        raise UserInputError(f"{name!r} has index_topk = {cfg['index_topk']}, which vLLM's sparse top-k conversion "
                             f"cannot take (the engine would stop at its first forward; `sparse-mla diagnose --model "
                             f"{str(p)!r}` shows where); accepted: a multiple of {INDEX_TOPK_MULTIPLE}")
    mt = cfg.get("model_type")
    if mt is None or not known_model_type(mt):
        raise UserInputError(f"{name!r} has model_type = {mt!r}, which vLLM's config loader does not know; accepted: "
                             f"a model_type of transformers or vLLM, e.g. 'glm_moe_dsa' (GLM-5) or 'deepseek_v32'")
    return p


def check_model(model: str | os.PathLike) -> Path:
    """:func:`check_model_dir` for a checkpoint directory; for a GLM-5 GGUF file (``*.gguf``) the file, after checking
    that the ``gguf`` extra (gguf-py, vllm-gguf-plugin: vLLM 0.26 has no GGUF loader of its own) is installed, that the
    file is a ``glm-dsa`` GGUF with the DSA indexer tensors whose metadata agrees with the ``config.json`` beside it
    (:func:`sparse_mla.launch.gguf_reader.gguf_config`; vllm-gguf-plugin reads the config from the file's folder),
    that the folder passes :func:`check_model_dir`, and that our adapter's load plan takes the files (the engine's
    own: :func:`sparse_mla.diagnose.gguf.gguf_wall`) and the tensors' shapes fit the config -- vLLM's import-time
    logging kept off stdout (:func:`sparse_mla.diagnose.probe.quiet_logs`). Raises :class:`UserInputError` naming
    what is wrong."""
    if not is_gguf(model):
        return check_model_dir(model)
    from ..extras import require

    what = "launch --model FILE.gguf (vLLM 0.26 loads a GGUF through vllm-gguf-plugin)"
    require(what, "gguf")
    from ..diagnose.gguf import gguf_wall, read_gguf
    from ..diagnose.probe import quiet_logs
    from .gguf_reader import gguf_config

    # every GGUF form (a file, a shard, DIR:QUANT) meets the plugin first here, is_gguf being the form alone: vLLM's
    # first import (the plugin's quant test, shard discovery) logs on stdout, kept off as in the diagnosis
    with quiet_logs():
        info = read_gguf(model)      # the files first, read once: importing vllm-gguf-plugin imports vLLM (seconds)
        p, _ = gguf_config(model, info)
        check_model_dir(p.parent)
        require(what, "gguf", "vllm_gguf_plugin")
        wall = gguf_wall(info, with_plugin=True)   # our adapter's load plan (the engine's), the tensors' shapes
    for why in (wall["with_plugin"], wall["tensors"]):
        if why != "ok":
            raise UserInputError(f"GGUF model {str(model)!r} would not load: {why}")
    return p


def model_dir(model: Path) -> Path:
    """The checkpoint directory of a checked ``--model`` (:func:`check_model`): the GGUF's folder for a GGUF file
    (its config and tokenizer), else ``model`` itself."""
    return model.parent if is_gguf(model) else model


def weights_asked(model: Path) -> dict:
    """What the engine must report having loaded (the ``ran`` block's ``weights``): vllm-gguf-plugin's ``gguf`` load
    format and quantization for a GGUF file, vLLM's default for a directory; plus the checkpoint's format and file."""
    if is_gguf(model):
        return {"format": "gguf", "file": model.name, "load_format": "gguf", "quantization": "gguf"}
    return {"format": "safetensors", "file": None, "load_format": None, "quantization": folder_quantization(model)}


def folder_quantization(model: Path) -> str | None:
    """The quantization method a checkpoint folder's ``config.json`` declares (``quantization_config.quant_method``,
    e.g. ``"fp8"`` for DeepSeek-V3.2's block-fp8 weights), which vLLM loads it with unasked; None for an unquantized
    one (make-checkpoint's, every record's so far) or a folder without a readable config."""
    from ..files import read_json
    from ..models import text_config

    try:
        cfg = read_json(Path(model) / "config.json")
    except Exception:  # noqa: BLE001 - launch checked the folder before; a config it cannot read asks nothing
        return None
    q = (text_config(cfg) if isinstance(cfg, dict) else {}).get("quantization_config")
    q = q if isinstance(q, dict) else (cfg.get("quantization_config") if isinstance(cfg, dict) else None)
    method = q.get("quant_method") if isinstance(q, dict) else None
    return method if isinstance(method, str) and method else None


def check_tp(model: str | os.PathLike, tp) -> int:
    """``tp`` as an int after checking it against the checkpoint's heads and the visible GPUs.

    vLLM shards MLA by heads (``num_attention_heads // tp`` per rank), so ``tp`` must divide them. Raises
    :class:`UserInputError` naming the value and the accepted sizes -- before any engine starts.
    """
    cfg = read_json(model_dir(check_model(model)) / "config.json")
    heads = int(text_config(cfg)["num_attention_heads"])
    ok = [d for d in range(1, heads + 1) if heads % d == 0]
    if isinstance(tp, bool) or not isinstance(tp, int):
        raise UserInputError(f"tensor-parallel size {tp!r} is not an integer; accepted: {', '.join(map(str, ok))}")
    if tp < 1 or heads % tp:
        raise UserInputError(f"tensor-parallel size {tp!r} does not divide the model's {heads} attention heads; "
                             f"accepted: {', '.join(map(str, ok))}")
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n and tp > n:
        raise UserInputError(f"tensor-parallel size {tp} needs {tp} GPUs and {n} are visible; accepted: "
                             f"{', '.join(str(d) for d in ok if d <= n)}")
    return tp


MAX_MODEL_LEN = 4096   # the engines' max_model_len (offline and served) unless --max-model-len raises it
DEFAULT_THROUGHPUT = {"num_seqs": 32, "prompt_len": 600, "max_tokens": 128}


def record_file(path, model: Path, what: str = "record file") -> Path:
    """``path`` for a launch record, checked before any engine: a writable regular-file path (``errors.writable_file``)
    outside the model directory (a record must never replace the config or weights the engine reads). Raises
    :class:`UserInputError` naming the path."""
    if path is not None and str(path).strip() not in ("", "."):
        where, model = expand_path(path, what).resolve(), Path(model).resolve()
        # a Hugging Face cache snapshot links its files to ../blobs/: those targets are the model's files too
        if where.is_relative_to(model) or where in {q.resolve() for q in model.iterdir()}:
            raise UserInputError(f"{what} {str(path)!r} is (a link target of) a file of the model directory "
                                 f"{str(model)!r}, which the engine reads; accepted: a path outside it")
    return writable_file(path, what)


def _pos_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def check_max_model_len(max_model_len, model: Path | None = None) -> int:
    """The engines' ``max_model_len``: an integer >= 1 and, where ``model`` is given, at most its config.json's
    ``max_position_embeddings`` (vLLM refuses a longer one). Raises :class:`UserInputError` naming the value."""
    if not _pos_int(max_model_len):
        raise UserInputError(f"max model len {max_model_len!r} is not accepted; accepted: an integer >= 1")
    limit = (read_json(model_dir(model) / "config.json") or {}).get("max_position_embeddings") if model else None
    if isinstance(limit, int) and max_model_len > limit:
        raise UserInputError(f"max model len {max_model_len} exceeds the model's max_position_embeddings {limit}; "
                             f"accepted: at most {limit}")
    return max_model_len


def check_reference_max_len(reference_max_len) -> int | None:
    """``None`` (the reference judges every prompt) or an integer >= 1. Raises :class:`UserInputError`."""
    if reference_max_len is not None and not _pos_int(reference_max_len):
        raise UserInputError(f"reference max len {reference_max_len!r} is not accepted; accepted: an integer >= 1")
    return reference_max_len


def check_generation(prompt_lengths, max_tokens, throughput=None, max_model_len: int = MAX_MODEL_LEN):
    """Prompt lengths, new tokens and the throughput batch, checked against the engines' ``max_model_len``
    (:data:`MAX_MODEL_LEN` unless raised); returns them (lengths as a tuple). Raises :class:`UserInputError` naming
    the value."""
    pos_int = _pos_int
    if not pos_int(max_tokens):
        raise UserInputError(f"max tokens {max_tokens!r} is not accepted; accepted: an integer >= 1")
    try:
        lengths = tuple(prompt_lengths)
    except TypeError:
        lengths = ()
    if not lengths or not all(pos_int(n) for n in lengths):
        raise UserInputError(f"prompt lengths {prompt_lengths!r} are not accepted; accepted: positive integers")
    if max(lengths) + max_tokens > max_model_len:
        raise UserInputError(f"prompt length {max(lengths)} + max tokens {max_tokens} exceeds the engines' "
                             f"max_model_len {max_model_len}; accepted: a sum <= {max_model_len} (--max-model-len "
                             f"raises it)")
    if throughput is not None:
        keys = ("num_seqs", "prompt_len", "max_tokens")
        if not isinstance(throughput, dict) or not all(pos_int(throughput.get(k)) for k in keys):
            raise UserInputError(f"throughput {throughput!r} is not accepted; accepted: a dict (JSON) with positive "
                                 f"integers num_seqs, prompt_len, max_tokens")
        if throughput["prompt_len"] + throughput["max_tokens"] > max_model_len or throughput["num_seqs"] > 1024:
            raise UserInputError(f"throughput {throughput!r} is not accepted; accepted: prompt_len + max_tokens <= "
                                 f"{max_model_len} and num_seqs <= 1024")
        throughput = {k: throughput[k] for k in keys}
    return lengths, max_tokens, throughput


def prompt_ids(model_dir: Path, lengths: list[int], seed: int = 0) -> list[list[int]]:
    """Deterministic prompts of exact token lengths: text through the checkpoint's tokenizer, repeated and cut."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    words = ("the sparse attention kernel reads the latent cache while the indexer picks the top tokens of each "
             "query and the router sends every token to its experts").split()
    out = []
    for i, n in enumerate(lengths):
        text = " ".join(words[(j * 7 + i + seed) % len(words)] for j in range(n + 8))
        ids = tok(text, add_special_tokens=False).input_ids
        while len(ids) < n:
            ids = ids + ids
        out.append(ids[:n])
    return out


def check_offline_spec(spec: RunSpec) -> RunSpec:
    """``spec`` for an engine started in this process: one with a simulated capability (``@M.m``) only where this
    process runs under that simulation already (vLLM's front end, which runs here, decides with the capability too).
    Raises :class:`UserInputError` naming the run spec otherwise."""
    here = (simulated() or {}).get("capability")
    if spec.capability and spec.capability != here:
        raise UserInputError(f"run spec {spec.name!r} asks for a simulated capability {spec.capability} and this "
                             f"process runs with {here or 'none'}: vLLM's front end decides with it too; accepted: "
                             f"the run spec in a parity run (--parity --backends {spec.name}, each engine in its own "
                             f"process), or SPARSE_MLA_SIMULATED_CAPABILITY={spec.capability} for the whole command "
                             f"(tools/gpu/simulate_capability)")
    return spec


def generations(llm, prompts: list[list[int]], sp) -> list[dict]:
    """Greedy generations of a vLLM ``LLM`` for token-id ``prompts`` under ``SamplingParams`` ``sp``, one record per
    prompt: ``{"prompt_len", "token_ids", "logprobs" (of the chosen tokens), "first_top_logprobs" ({token id as str:
    log-prob} of the first step's top-k)}``."""
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    gens = []
    for p, o in zip(prompts, outs):
        c = o.outputs[0]
        lps = c.logprobs or []
        gens.append({"prompt_len": len(p), "token_ids": list(c.token_ids),
                     "logprobs": [lp[t].logprob for lp, t in zip(lps, c.token_ids)],
                     "first_top_logprobs": {str(k): v.logprob for k, v in (lps[0].items() if lps else [])}})
    return gens


def attention_backends(layers: dict) -> list[str]:
    """A run record's ``attention_backends``: the backends its ``layers``
    (:func:`sparse_mla.vllm_plugin.ran.layer_backends`, ``{name: {"backend": str | None, ...}}``) name, sorted, each
    once (the indexer's cache's ``DEEPSEEK_V32_INDEXER`` and a hybrid model's linear attention included)."""
    return sorted({v["backend"] for v in layers.values() if v["backend"]})


def run_offline(model: str | os.PathLike, backend: str = OURS, kv_cache_dtype: str = "auto", tp: int = 1,
                prompts: list[list[int]] | None = None, max_tokens: int = 32, logprobs: int = 20,
                enforce_eager: bool = True, max_model_len: int = 4096, gpu_memory_utilization: float = 0.35,
                throughput: dict | None = None, seed: int = 0, speculative_config: dict | str | None = None) -> dict:
    """One engine for the run spec ``backend`` (:func:`parse_run_spec`): per-layer backends, greedy generations with
    log-probs, optional decode throughput.

    ``throughput`` = ``{"num_seqs": 32, "prompt_len": 600, "max_tokens": 128}`` runs a decode-heavy batch and reports
    generated tokens/s (wall clock around one ``LLM.generate`` call after a warm-up batch; the prompts' prefill is
    inside the timed call). ``speculative_config`` goes to ``LLM(speculative_config=...)``, with an MTP drafter put on
    the run's backend (:func:`~sparse_mla.launch.specs.with_drafter_backend`); the record's ``ran`` then carries the
    engine's speculative counters (:func:`speculative_counts`).
    """
    require_gpu()
    model = check_model(model)
    tp = check_tp(model, tp)
    spec = check_offline_spec(parse_run_spec(backend))
    speculative_config = check_speculative_config(speculative_config, model_dir(model))
    kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype, what="kv_cache_dtype")
    # layer_backends and collect travel to the workers by pickle (LLM.collective_rpc with a function)
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    # Start vLLM's engine core with spawn, not fork: on the H200 (2026-12-01) engines of this function started by
    # fork died in init_device with "Cannot re-initialize CUDA in forked subprocess" for kv_cache_dtype auto (an fp8_ds_mla
    # parity in the same session started fine; the cause was not found); the same run with spawn generated
    # (results/h200/sessions/2026-12-01/GPU_SESSION_2026-12-01.md). A value the user set wins.
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    from vllm import LLM, SamplingParams

    kw = dict(model=str(model), tensor_parallel_size=tp, enforce_eager=enforce_eager, max_model_len=max_model_len,
              gpu_memory_utilization=gpu_memory_utilization, seed=seed, max_num_seqs=64,
              kv_cache_dtype=kv_cache_dtype)
    if is_gguf(model):     # vllm-gguf-plugin: weights from the file, config and tokenizer from its folder
        kw["tokenizer"] = str(model_dir(model))
    ac = attention_config(spec.backend)
    if ac:
        kw["attention_config"] = ac
    speculative_config = with_drafter_backend(spec, speculative_config)
    if speculative_config:   # and its counters, which vLLM keeps only with stats logging on
        kw.update(speculative_config=speculative_config, disable_log_stats=False)
    # the engine's processes inherit the indexer switch, and the DeepGEMM call counter, when they start
    with patched_environ({**spec.env, COUNT_ENV: "1"}):
        t0 = time.time()
        llm = LLM(**kw)
        init_s = time.time() - t0
    layers = llm.collective_rpc(layer_backends)[0]
    prompts = prompts or prompt_ids(model_dir(model), [48])
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=logprobs, ignore_eos=True, seed=seed)
    gens = generations(llm, prompts, sp)
    from ..records import environment

    rec = {"environment": environment(), **spec.describe(), "checkpoint": weights_asked(model),
           "kv_cache_dtype": kv_cache_dtype, "tp": tp,
           "enforce_eager": enforce_eager, "speculative_config": speculative_config,
           "engine_init_s": round(init_s, 1), "layers": layers,
           "attention_backends": attention_backends(layers),
           "generations": gens}
    if throughput:
        n, plen, mt = throughput["num_seqs"], throughput["prompt_len"], throughput["max_tokens"]
        batch = [{"prompt_token_ids": ids} for ids in prompt_ids(model_dir(model), [plen] * n, seed=1)]
        tsp = SamplingParams(temperature=0.0, max_tokens=mt, ignore_eos=True)
        warm_seqs, warm_tokens = THROUGHPUT_WARMUP
        llm.generate(batch[:warm_seqs], SamplingParams(temperature=0.0, max_tokens=warm_tokens, ignore_eos=True),
                     use_tqdm=False)
        t1 = time.time()
        res = llm.generate(batch, tsp, use_tqdm=False)
        dt = time.time() - t1
        gen_tokens = sum(len(r.outputs[0].token_ids) for r in res)
        rec["throughput"] = {**throughput, "seconds": round(dt, 3), "generated_tokens": gen_tokens,
                             "output_tokens_per_s": round(gen_tokens / dt, 1)}
    rec.update(_ran_fields(llm, spec, speculative_config, rec["checkpoint"]))
    del llm
    return with_simulated(rec)


#: ``(sequences, tokens each)`` of the untimed warm-up generation before run_offline's throughput pass.
THROUGHPUT_WARMUP = (4, 8)


def counted_tokens(rec: dict) -> int | None:
    """The tokens an offline engine's record ``rec`` (:func:`run_offline`) generated in all, as vLLM's counters
    (``ran.speculative``, :func:`speculative_counts`) cover them: its generations' tokens, and with a throughput pass
    its warm-up (:data:`THROUGHPUT_WARMUP`) and its ``generated_tokens``; None where the record does not say
    (no generations list, a throughput block without its count). A draft is made at most once a decoding step, each
    step generating a token: ``drafts`` is at most this."""
    gens = rec.get("generations")
    if not isinstance(gens, list) or not all(isinstance(g, dict) and isinstance(g.get("token_ids"), list)
                                             for g in gens):
        return None
    n = sum(len(g["token_ids"]) for g in gens)
    thr = rec.get("throughput")
    if thr is None:
        return n
    if not isinstance(thr, dict) or not all(_pos_int(thr.get(k)) for k in ("num_seqs", "generated_tokens")):
        return None
    seqs, tokens = THROUGHPUT_WARMUP
    return n + min(seqs, thr["num_seqs"]) * tokens + thr["generated_tokens"]


def _ran_fields(llm, spec: RunSpec, speculative_config: dict | None, weights: dict | None = None) -> dict:
    """``ran`` (rank 0's block, read in every worker after all generation, plus the engine's speculative counters
    where it speculated), ``ran_per_rank`` where there are more ranks, and ``ran_contradictions`` against ``spec``
    (its simulated capability, the drafter's backend, the speculation asked for) and ``weights``
    (:func:`weights_asked`: a GGUF's load format)."""
    ranks = llm.collective_rpc(collect)
    if speculative_config:
        ranks[0]["speculative"] = speculative_counts(llm.get_metrics())
    out = {"ran": ranks[0], **({"ran_per_rank": ranks} if len(ranks) > 1 else {})}
    asked = {**spec.describe(), "capability": spec.capability or (simulated() or {}).get("capability"),
             "draft_backend": drafter_backend(spec, speculative_config),
             "speculative": (speculative_config or {}).get("method"),
             "load_format": (weights or {}).get("load_format"), "quantization": (weights or {}).get("quantization")}
    out["ran_contradictions"] = sorted({c for r in ranks for c in contradictions(asked, r)})
    return out


#: vLLM 0.26's speculative-decoding counters (``v1/spec_decode/metrics.py``), by the names ``LLM.get_metrics()``
#: gives them (``v1/metrics/reader.py``).
SPEC_COUNTERS = {"drafts": "vllm:spec_decode_num_drafts", "draft_tokens": "vllm:spec_decode_num_draft_tokens",
                 "accepted_tokens": "vllm:spec_decode_num_accepted_tokens"}


def speculative_counts(metrics) -> dict:
    """``{"drafts", "draft_tokens", "accepted_tokens", "acceptance_rate"}`` summed over engines from vLLM's metrics
    snapshot (``LLM.get_metrics()``: ``Counter`` objects with ``name`` and ``value``); the acceptance rate is vLLM's
    definition (accepted / draft tokens; ``None`` without drafts)."""
    names = {v: k for k, v in SPEC_COUNTERS.items()}
    out = {k: 0 for k in SPEC_COUNTERS}
    for m in metrics:
        key = names.get(str(getattr(m, "name", "")).removesuffix("_total"))
        if key is not None and isinstance(getattr(m, "value", None), (int, float)):
            out[key] += int(m.value)
    out["acceptance_rate"] = out["accepted_tokens"] / out["draft_tokens"] if out["draft_tokens"] else None
    return out


# ------------------------------------------------------------------------------------------------ vllm serve
def serve_command(model: str | os.PathLike, spec: RunSpec, port: int, *, kv_cache_dtype: str = "auto", tp: int = 1,
                  enforce_eager: bool = True, max_model_len: int = MAX_MODEL_LEN,
                  gpu_memory_utilization: float = 0.35, max_num_seqs: int | None = None,
                  speculative_config: dict | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    """The ``vllm serve`` command line for a run spec: loopback only, model served as ``glm5``, seed 0, the
    backend through ``--attention-backend`` (``CUSTOM`` for ours), ``--speculative-config`` as JSON (an MTP drafter on
    the run's backend: :func:`~sparse_mla.launch.specs.with_drafter_backend`), and the worker extension that answers
    the ``ran`` block (:data:`sparse_mla.vllm_plugin.ran.SERVE_OPTIONS`)."""
    from ..diagnose.gguf_config import serve_flags

    cmd = ["vllm", "serve", str(model), *(serve_flags(Path(model).parent) if is_gguf(model) else []),
           "--host", HOST, "--port", str(port), "--served-model-name", SERVED_NAME,
           "--max-model-len", str(max_model_len), "--gpu-memory-utilization", str(gpu_memory_utilization),
           "--seed", "0", "--kv-cache-dtype", kv_cache_dtype, "--tensor-parallel-size", str(tp)]
    cmd += ["--enforce-eager"] if enforce_eager else []
    cmd += ["--max-num-seqs", str(max_num_seqs)] if max_num_seqs else []
    ac = attention_config(spec.backend)
    cmd += ["--attention-backend", ac["backend"]] if ac else []
    speculative_config = with_drafter_backend(spec, speculative_config)
    cmd += ["--speculative-config", json.dumps(speculative_config)] if speculative_config else []
    return cmd + list(SERVE_OPTIONS) + list(extra)


def spec_env(spec: RunSpec, base: dict | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with the run spec's indexer switch set or removed."""
    env = dict(os.environ if base is None else base)
    for k, v in spec.env.items():
        env.pop(k, None) if v is None else env.__setitem__(k, v)
    return env


def server_env(spec: RunSpec, base: dict | None = None) -> dict[str, str]:
    """:func:`spec_env` plus INFO logging (the server's log is where it names its attention backend; a notebook may
    have set ``VLLM_LOGGING_LEVEL=ERROR`` for its own cells, and the server would inherit it), the DeepGEMM call
    counter and vLLM's development API through which the workers answer the ``ran`` block
    (:data:`sparse_mla.vllm_plugin.ran.SERVE_ENV`)."""
    return {**spec_env(spec, base), "VLLM_LOGGING_LEVEL": "INFO", COUNT_ENV: "1", **SERVE_ENV}


def served_ran(base_url: str, spec: RunSpec, speculative_config: dict | None = None,
               weights: dict | None = None) -> dict:
    """The ``ran`` fields of a served engine, read in its workers (:func:`sparse_mla.launch.server.collective_rpc`
    of :data:`~sparse_mla.vllm_plugin.ran.RAN_METHOD`): ``ran`` (rank 0), ``ran_per_rank`` where there are more,
    ``ran_contradictions`` against ``spec`` (a simulated capability, an MTP drafter's backend for
    ``speculative_config``); a server that cannot answer gives
    ``ran_error`` and the contradiction that nothing was read."""
    try:
        ranks = collective_rpc(base_url, RAN_METHOD)
    except ServerError as e:
        return {"ran_error": str(e), "ran_contradictions": ["no ran block: nothing was read inside the engine"]}
    asked = {**spec.describe(), "capability": spec.capability or (simulated() or {}).get("capability"),
             "draft_backend": drafter_backend(spec, speculative_config),
             "load_format": (weights or {}).get("load_format"), "quantization": (weights or {}).get("quantization")}
    out = {"ran": ranks[0] if ranks else None,
           "ran_contradictions": sorted({c for r in (ranks or [None]) for c in contradictions(asked, r)})}
    if len(ranks) > 1:
        out["ran_per_rank"] = ranks
    return out


def run_serve(model: str | os.PathLike, backend: str = OURS, prompt: list[int] | None = None, max_tokens: int = 16,
              port: int | None = None, kv_cache_dtype: str = "auto", timeout_s: float = 300.0,
              log_path: str | os.PathLike | None = None, tp: int = 1,
              speculative_config: dict | str | None = None, max_model_len: int = MAX_MODEL_LEN) -> dict:
    """``vllm serve`` (eager) on 127.0.0.1 for the run spec ``backend``, one greedy completion through the ``openai``
    client.

    Returns the completion's token ids and log-probs and the server log lines that name the attention backend.
    ``port`` defaults to a free one. The server is always stopped before returning (``server.served``).
    """
    require_gpu()
    model = check_model(model)
    tp = check_tp(model, tp)
    spec = parse_run_spec(backend)
    speculative_config = check_speculative_config(speculative_config, model_dir(model))
    port = port or free_port()
    cmd = serve_command(model, spec, port, kv_cache_dtype=kv_cache_dtype, tp=tp,
                        speculative_config=speculative_config, max_model_len=max_model_len)
    log_path = Path(log_path or tempfile.mkstemp(prefix="vllm-serve-", suffix=".log")[1])
    import openai

    with served(cmd, server_env(spec), log_path, port, timeout_s) as srv:
        client = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="none", timeout=60, max_retries=0)
        prompt = prompt or prompt_ids(model_dir(model), [48])[0]
        r = client.completions.create(model=SERVED_NAME, prompt=prompt, max_tokens=max_tokens, temperature=0.0,
                                      logprobs=1, extra_body={"return_tokens_as_token_ids": True,
                                                              "ignore_eos": True})
        ch = r.choices[0]
        toks = [int(t.split(":", 1)[1]) for t in ch.logprobs.tokens]
        ran = served_ran(srv.base_url, spec, speculative_config, weights_asked(model))
    lines = backend_log_lines(log_path)
    return with_simulated({**spec.describe(), "checkpoint": weights_asked(model), "kv_cache_dtype": kv_cache_dtype,
                           "tp": tp,
                            "speculative_config": speculative_config, "command": cmd, "server_up_s": srv.up_s,
                            "token_ids": toks, "logprobs": list(ch.logprobs.token_logprobs),
                            "backend_log_lines": lines,
                            "custom_backend_selected": any("CUSTOM" in ln for ln in lines), **ran})


def reference_first_token(model: str | os.PathLike, prompts: list[list[int]], device: str = "cuda") -> list[dict]:
    """Log-softmax of the independent PyTorch forward at each prompt's last position (fp32): the first token's
    distribution, to compare with vLLM's first-token top log-probs."""
    import torch

    from .glm5_reference import Glm5Reference

    ref = Glm5Reference.from_pretrained(model, dtype=torch.float32, device=device)
    out = []
    with torch.no_grad():
        for p in prompts:
            logits = ref.forward(torch.tensor(p))
            lp = torch.log_softmax(logits[-1].double(), -1)
            out.append({"argmax": int(lp.argmax()), "logprobs": lp.cpu()})
    del ref
    torch.cuda.empty_cache() if device == "cuda" else None
    return out


def compare(a: dict, b: dict) -> dict:
    """Greedy agreement and log-prob differences between two runs' generations (prompt by prompt): the largest
    absolute difference over the tokens before they part, NaN where a log-prob is NaN (:func:`~.agreement.largest`)."""
    res = []
    for ga, gb in zip(a["generations"], b["generations"]):
        ta, tb = ga["token_ids"], gb["token_ids"]
        n = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        d = [abs(x - y) for x, y in zip(ga["logprobs"][:n], gb["logprobs"][:n])]
        res.append({"prompt_len": ga["prompt_len"], "identical": ta == tb, "first_divergence": None if ta == tb else n,
                    "max_abs_logprob_diff": largest(d)})
    return {"per_prompt": res, "all_identical": all(r["identical"] for r in res)}


def compare_reference(run: dict, ref: list[dict]) -> list[dict]:
    """vLLM's first-token top-k log-probs against the reference forward's at the same token ids."""
    out = []
    for g, r in zip(run["generations"], ref):
        top = {int(k): v for k, v in g["first_top_logprobs"].items()}
        diffs = [abs(v - float(r["logprobs"][k])) for k, v in top.items() if math.isfinite(v)]
        out.append({"prompt_len": g["prompt_len"], "vllm_first_token": g["token_ids"][0],
                    "reference_argmax": r["argmax"], "same_first_token": g["token_ids"][0] == r["argmax"],
                    "top_k": len(top), "max_abs_logprob_diff": largest(diffs)})
    return out


def _subprocess_offline(args: list[str], out_json: Path, log: Path, env: dict | None = None) -> dict:
    cmd = [sys.executable, "-m", "sparse_mla", "launch", *args, "--json-out", str(out_json)]
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0 or not out_json.is_file():
        tail = log.read_text(errors="replace")[-3000:]
        return {"error": f"exit {rc}", "log_tail": tail}
    return json.loads(out_json.read_text())


def engine_args(model, name: str, prompt_lengths, max_tokens: int, throughput: dict, tp: int, kv_cache_dtype: str,
                max_model_len: int, graph: bool, speculative_config: dict | None) -> list[str]:
    """The ``sparse-mla launch`` arguments (``--json-out`` aside) of one engine of a parity run, the run spec ``name``
    in its own process (:func:`_engine_runs`): the parity run's checked model, prompts, token budget, throughput
    batch, TP, KV cache and ``max_model_len``; ``--cuda-graphs`` where ``graph``; its ``speculative_config`` where
    the engine speculates (None: it does not)."""
    args = ["--model", str(model), "--backend", name, "--prompt-lengths", ",".join(map(str, prompt_lengths)),
            "--max-tokens", str(max_tokens), "--throughput", json.dumps(throughput), "--tp", str(tp),
            "--kv-cache-dtype", kv_cache_dtype, "--max-model-len", str(max_model_len)]
    args += ["--cuda-graphs"] if graph else []
    return args + (["--speculative-config", json.dumps(speculative_config)] if speculative_config else [])


def engine_files(log_dir: Path, key: str) -> tuple[Path, Path]:
    """``(record, log)``: the files in the parity run's ``log_dir`` (one for all its engines) that the engine of plan
    entry ``key`` (:func:`parity_plan`) writes: its ``--json-out`` and its output, named after the key."""
    file = key.replace("+", "_")
    return Path(log_dir) / f"{file}.json", Path(log_dir) / f"{file}.log"


def _engine_runs(model: Path, plan: list, prompt_lengths, max_tokens: int, throughput: dict, tp: int,
                 kv_cache_dtype: str, speculative_config: dict | None, log_dir: Path,
                 max_model_len: int = MAX_MODEL_LEN) -> tuple[dict, str | None]:
    """``(runs, interrupted)``: one offline engine per entry of ``plan`` (:func:`parity_plan`), each in its own
    process with its run spec's environment, ``runs[key]`` its record or ``{"error", "log_tail"}``. An interruption
    (Ctrl-C, SIGTERM: a time limit) stops the plan: the engine in flight is recorded ``"error": "interrupted"``, those
    not started ``"not run (interrupted)"``, and ``interrupted`` says where it came; ``None`` when the plan ran out."""
    runs = {}
    for i, (key, name, g, speculates) in enumerate(plan):
        spec = parse_run_spec(name)
        args = engine_args(model, name, prompt_lengths, max_tokens, throughput, tp, kv_cache_dtype, max_model_len, g,
                           speculative_config if speculates else None)
        asked = {**spec.describe(), "kv_cache_dtype": kv_cache_dtype, "enforce_eager": not g, "speculative": speculates}
        try:
            runs[key] = {**asked, **_subprocess_offline(args, *engine_files(log_dir, key), spec_env(spec))}
        except KeyboardInterrupt:
            runs[key] = {**asked, "error": "interrupted"}
            for k, n, g2, sp in plan[i + 1:]:
                runs[k] = {**parse_run_spec(n).describe(), "kv_cache_dtype": kv_cache_dtype, "enforce_eager": not g2,
                           "speculative": sp, "error": "not run (interrupted)"}
            return runs, f"interrupted during engine {key}"
    return runs, None


def parity_plan(specs: tuple[str, ...], graph: bool = True,
                speculative: bool = False) -> list[tuple[str, str, bool, bool]]:
    """``(record key, run spec, CUDA graphs, speculative)`` per engine of a parity run: every run spec in vLLM's
    default serving mode (CUDA graphs when ``graph``; with the run's speculation where ``speculative``), plus the
    baseline (:func:`parity_baseline`) once more in eager mode and, where the run speculates, once more without
    speculation (``+no-speculation``: the greedy tokens speculation must not change)."""
    plan = [(s, s, graph, speculative) for s in specs]
    base = parity_baseline(specs)
    plan += [(f"{base}+eager", base, False, speculative)] if graph and base else []
    return plan + ([(f"{base}+no-speculation", base, graph, False)] if speculative and base else [])


def parity_baseline(specs) -> str | None:
    """The run the others are compared with: plain ``TRITON_MLA_SPARSE`` if listed, else the first run spec on our
    backend, else ``None``."""
    ours = [s for s in specs if parse_run_spec(s).backend == OURS]
    return OURS if OURS in ours else ours[0] if ours else None


def model_block(model: Path, cfg: dict) -> dict:
    """The ``model`` block of an engine or serving record: the checkpoint's name (a GGUF's file name) and, from its
    ``config.json`` (``cfg``), the geometry the checks read (:data:`sparse_mla.records.schema.MODEL_KEYS`;
    ``vocab_size`` bounds the token ids the record names)."""
    from ..records.schema import MODEL_KEYS

    return {"path": model.name, **{k: cfg.get(k) for k in MODEL_KEYS if k != "path"}}


def run_parity(model: str | os.PathLike, backends=(OURS, *PEERS), prompt_lengths=(48, 900), max_tokens: int = 32,
               throughput: dict | None = None, serve: bool = True, graph: bool = True,
               out: str | os.PathLike | None = None, log_dir: str | os.PathLike | None = None,
               tp: int = 1, kv_cache_dtype: str = "auto", speculative_config: dict | str | None = None,
               max_model_len: int = MAX_MODEL_LEN, reference_max_len: int | None = None) -> dict:
    """Offline runs per run spec (own processes, each with its spec's environment; CUDA graphs when ``graph``, plus
    an eager run of the baseline), the served check (eager) and the reference comparison; writes the JSON record
    atomically to ``out`` (default :func:`default_record_path`) and returns it.

    ``backends``: run specs (``BACKEND`` or ``BACKEND+TRITON_DSA_INDEXER``, :func:`normalize_backends`). Every
    engine and the server get ``kv_cache_dtype`` (e.g. ``fp8_ds_mla``: ours against ``FLASHMLA_SPARSE`` on the same
    fp8 cache) and ``speculative_config``. ``tp`` > 1 runs every engine and the server tensor-parallel over ``tp``
    GPUs (``num_attention_heads // tp`` heads per rank); the reference forward runs on one GPU. A run that fails is
    recorded with its log tail under ``runs[key]["error"]`` and left out of the comparisons. The record compares
    every run with the baseline (``parity_vs_ours``) and every pair of runs (``parity_pairs``).

    ``max_model_len`` (at most the config's ``max_position_embeddings``) bounds prompt + new tokens for every engine.
    The reference forward judges the prompts of at most ``reference_max_len`` tokens (all when ``None``); for longer
    ones the record holds ``engine_agreement`` (:mod:`sparse_mla.launch.agreement`), with no verdict of its own.
    """
    require_gpu()
    model = check_model(model)
    tp = check_tp(model, tp)
    backends = normalize_backends(backends)
    max_model_len = check_max_model_len(max_model_len, model)
    prompt_lengths, max_tokens, throughput = check_generation(prompt_lengths, max_tokens, throughput, max_model_len)
    reference_max_len = check_reference_max_len(reference_max_len)
    kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype, what="kv_cache_dtype")
    speculative_config = check_speculative_config(speculative_config, model_dir(model))
    out = record_file(out if out is not None else default_record_path(tp), model_dir(model))   # before the engines
    cfg = read_json(model_dir(model) / "config.json")
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="sparse-mla-launch-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    throughput = throughput or DEFAULT_THROUGHPUT
    runs, interrupted = _engine_runs(model, parity_plan(backends, graph, bool(speculative_config)), prompt_lengths,
                                     max_tokens, throughput, tp, kv_cache_dtype, speculative_config, log_dir,
                                     max_model_len)
    prompts = prompt_ids(model_dir(model), list(prompt_lengths))
    from ..records import environment

    rec = {"environment": environment(), "model": model_block(model, cfg),
           "checkpoint": weights_asked(model), "tp": tp, "kv_cache_dtype": kv_cache_dtype,
           "speculative_config": speculative_config, "prompt_lengths": list(prompt_lengths),
           "max_model_len": max_model_len, "reference_max_len": reference_max_len,
           "run_specs": {k: {x: v[x] for x in ("run", "backend_requested", "indexer", "kv_cache_dtype")}
                         for k, v in runs.items()}, "runs": runs}
    if not interrupted:
        try:
            _judge_engines(rec, model, prompts, backends, kv_cache_dtype, serve, tp, speculative_config, log_dir,
                           reference_max_len)
        except KeyboardInterrupt:   # a time limit during the reference forward: the engines' records are kept
            interrupted = "interrupted after the engines ran, during the reference comparison or the served check"
    if interrupted:      # what ran before the interruption, written whole; then the interruption goes on up
        rec["interrupted"] = interrupted
        rec["failures"] = parity_failures(rec)
        atomic_write_text(out, json.dumps(with_simulated(rec), indent=1, default=str))
        print(f"sparse-mla launch: {interrupted}; the record of what ran before it is {out}", file=sys.stderr)
        raise KeyboardInterrupt
    rec["failures"] = parity_failures(rec)
    rec = with_simulated(rec)
    atomic_write_text(out, json.dumps(rec, indent=1, default=str))
    return rec


def _judge_engines(rec: dict, model, prompts, backends, kv_cache_dtype: str, serve: bool, tp: int,
                   speculative_config, log_dir: Path, reference_max_len: int | None = None) -> None:
    """What a parity record concludes from its engines' runs (``rec["runs"]``), written into ``rec``: the pairwise
    comparisons, the reference forward's first tokens and the first-token criterion (prompts within
    ``reference_max_len``), the engines' first-token agreement beyond it, the engines' throughput and (``serve``) the
    served check of the baseline."""
    runs = rec["runs"]
    ok = {k: v for k, v in runs.items() if "error" not in v}
    base = parity_baseline(backends)
    if base in ok and len(ok) > 1:
        rec["parity_baseline"] = base
        rec["parity_vs_ours"] = {k: compare(ok[base], v) for k, v in ok.items() if k != base}
    keys = list(ok)
    rec["parity_pairs"] = [{"a": a, "b": b, **compare(ok[a], ok[b])} for i, a in enumerate(keys) for b in keys[i + 1:]]
    judged, beyond = split_prompts(prompts, reference_max_len)
    if ok and beyond and base in ok:
        rec["engine_agreement"] = first_token_agreement(ok, base, beyond)
    if ok and judged:
        ok_judged, prompts_judged = only_prompts(ok, judged), [prompts[i] for i in judged]
        try:
            ref = reference_first_token(model, prompts_judged)
            rec["reference_first_token"] = {k: compare_reference(v, ref) for k, v in ok_judged.items()}
        except Exception as e:  # noqa: BLE001
            ref, rec["reference_first_token"] = None, {"error": f"{type(e).__name__}: {e}"}
        if ref is not None:
            try:
                rec["first_token_criterion"] = first_token_criterion(model, prompts_judged, ref, ok_judged,
                                                                     kv_cache_dtype)
            except Exception as e:  # noqa: BLE001
                rec["first_token_criterion"] = {"error": f"{type(e).__name__}: {e}"}
    rec["throughput_tokens_per_s"] = {k: v.get("throughput", {}).get("output_tokens_per_s") for k, v in ok.items()}
    if serve and base:
        try:
            s = run_serve(model, base, prompt=prompts[0], max_tokens=16, log_path=log_dir / "serve.log", tp=tp,
                          kv_cache_dtype=kv_cache_dtype, speculative_config=speculative_config,
                          max_model_len=rec.get("max_model_len") or MAX_MODEL_LEN)
            # the server runs eager: compare with the baseline's offline eager run (graph runs may part at near-ties)
            same_mode = f"{base}+eager" if f"{base}+eager" in ok else base if base in ok else None
            if same_mode:
                s["compared_with"] = same_mode
                s["matches_offline"] = s["token_ids"] == ok[same_mode]["generations"][0]["token_ids"][:16]
            rec["serve"] = s
        except Exception as e:  # noqa: BLE001
            rec["serve"] = {"error": f"{type(e).__name__}: {e}",
                            "log_tail": (log_dir / "serve.log").read_text(errors="replace")[-3000:]
                            if (log_dir / "serve.log").exists() else ""}


def nan_logprobs(run: dict) -> list[str]:
    """One line per generation of ``run`` (an offline run record) with a NaN log-probability, of a chosen token
    (``logprobs``) or of the first step's top-k (``first_top_logprobs``, what the reference comparison reads): the
    engine computed no probability there, and no agreement of its tokens proves anything."""
    gens = run.get("generations") if isinstance(run.get("generations"), list) else []
    out = []
    for g in gens:
        if not isinstance(g, dict):
            continue
        for field, values in (("log-prob", g.get("logprobs")),
                              ("first-step top log-prob", g.get("first_top_logprobs"))):
            values = values.values() if isinstance(values, dict) else values if isinstance(values, list) else []
            if any(isinstance(x, float) and math.isnan(x) for x in values):
                out.append(f"the generation for the {g.get('prompt_len')}-token prompt has a NaN {field}")
    return out


def parity_failures(rec: dict) -> list[str]:
    """What makes a parity run a failed run, one line each, written into its record: an engine that did not start or
    died, an engine whose ``ran`` block contradicts its run spec (:func:`sparse_mla.vllm_plugin.ran.contradictions`),
    an engine that generated a NaN log-prob (:func:`nan_logprobs`), no reference comparison, the parity criterion (:mod:`sparse_mla.launch.first_token`: a first token other than
    the reference's argmax where the reference's top-2 gap exceeds the tolerance) failed or not evaluated, a served
    engine that failed or whose ``ran`` contradicts its request."""
    failures = [f"engine {k}: {v['error']}" for k, v in rec.get("runs", {}).items() if "error" in v]
    failures += [f"parity run {rec['interrupted']}"] if rec.get("interrupted") else []
    failures += [f"engine {k}: what ran contradicts what was asked: {c}" for k, v in rec.get("runs", {}).items()
                 for c in v.get("ran_contradictions", [])]
    failures += [f"engine {k}: {line}" for k, v in rec.get("runs", {}).items() for line in nan_logprobs(v)]
    ref = rec.get("reference_first_token")
    if ref is None or (isinstance(ref, dict) and "error" in ref):
        judged = [n for n in rec.get("prompt_lengths", []) if rec.get("reference_max_len") is None
                  or n <= rec["reference_max_len"]]
        why = "not made (no engine ran)" if judged or not rec.get("prompt_lengths") else \
            f"not made (no prompt within reference_max_len {rec.get('reference_max_len')})"
        failures.append("reference comparison: " + (ref or {}).get("error", why))
    crit = rec.get("first_token_criterion")
    if isinstance(crit, dict) and "error" in crit:
        failures.append(f"first-token criterion: {crit['error']}")
    failures += list((crit or {}).get("failures", [])) if isinstance(crit, dict) else []
    if isinstance(rec.get("serve"), dict) and "error" in rec["serve"]:
        failures.append(f"serve: {rec['serve']['error']}")
    failures += [f"serve: what ran contradicts what was asked: {c}" for c in
                 (rec.get("serve") or {}).get("ran_contradictions", [])]
    return failures


def default_record_path(tp: int = 1, gpu: str | None = None) -> str:
    """``results/<gpu>/launch_<gpu>.json`` (``_tp<N>`` added for a tensor-parallel run), ``<gpu>`` the local GPU's
    short name (:func:`sparse_mla.records.gpu_slug`: ``h200`` for "NVIDIA H200"), in :func:`sparse_mla.records.
    gpu_record_dir`, as the benchmarks name their records; relative to the current directory."""
    from ..records import gpu_record_dir, gpu_slug

    gpu = gpu or gpu_slug()
    return str(gpu_record_dir(gpu) / (f"launch_{gpu}" + (f"_tp{tp}" if tp > 1 else "") + ".json"))


def add_cli(sub) -> None:
    p = sub.add_parser("launch", help="run a GLM-5-architecture checkpoint in vLLM on a backend (GPU)",
                       description="Offline vllm.LLM generation (default), `vllm serve` + openai client (--serve), or "
                                   "the full parity record (--parity). Needs a CUDA GPU.")
    p.add_argument("--model", required=True, help="checkpoint directory (sparse-mla make-checkpoint, or real GLM-5), "
                                                  "or a GLM-5 GGUF file in such a directory (needs the gguf extra)")
    p.add_argument("--backend", default=OURS, help=f"run spec: {OURS} (default), auto, or a vLLM sparse MLA backend "
                                                   f"name, optionally +{TRITON_INDEXER}")
    p.add_argument("--kv-cache-dtype", default="auto", help=f"one of {', '.join(ENGINE_KV_CACHE_DTYPES)} (every engine of --parity)")
    p.add_argument("--tp", type=cli_int, default=1, help="tensor-parallel size")
    p.add_argument("--serve", action="store_true", help="start `vllm serve` and query it with the openai client")
    p.add_argument("--parity", action="store_true",
                   help="the --backends run specs (CUDA graphs) + the first of ours eager, the server and the "
                        "reference; writes results/<gpu>/launch_<gpu>.json (launch_<gpu>_tp<N>.json with --tp N > 1) "
                        "(--backend does not apply)")
    p.add_argument("--backends", default=None,
                   help=f"with --parity: comma-separated run specs, BACKEND or BACKEND+{TRITON_INDEXER} "
                        f"(default: {','.join((OURS, *PEERS))})")
    p.add_argument("--prompt-lengths", default="48", help="comma-separated prompt lengths in tokens")
    p.add_argument("--max-tokens", type=cli_int, default=32)
    p.add_argument("--cuda-graphs", action="store_true", help="capture CUDA graphs (default: eager)")
    p.add_argument("--no-serve", action="store_true", help="--parity without the served check (vllm serve)")
    p.add_argument("--eager-only", action="store_true",
                   help="--parity with eager engines only (default: CUDA graphs, plus the baseline eager)")
    p.add_argument("--throughput", default=None, help='JSON, e.g. {"num_seqs": 32, "prompt_len": 600, "max_tokens": 128}')
    p.add_argument("--speculative-config", default=None, metavar="JSON",
                   help=f"passed to vLLM unchanged (LLM(speculative_config=...), vllm serve --speculative-config), "
                        f"e.g. '{MTP_EXAMPLE}' (needs make-checkpoint --mtp)")
    p.add_argument("--max-model-len", type=cli_int, default=MAX_MODEL_LEN,
                   help=f"the engines' max_model_len (default {MAX_MODEL_LEN}; at most the config's "
                        f"max_position_embeddings): raise it for long prompts")
    p.add_argument("--reference-max-len", type=cli_int, default=None, metavar="N",
                   help="with --parity: the reference forward judges prompts of at most N tokens (default: all); "
                        "longer ones are compared engine against engine (engine_agreement)")
    p.add_argument("--json-out", default=None, help="write the record here (default: print it)")
    p.set_defaults(func=_cli)


class LaunchArgs(NamedTuple):
    """``sparse-mla launch``'s arguments as it takes them (:func:`check_cli_args`)."""
    lengths: list[int]                     # --prompt-lengths, tokens
    throughput: dict | None                # --throughput, filled in (check_generation)
    max_model_len: int                     # --max-model-len, or the engine's default
    kv_cache_dtype: str                    # --kv-cache-dtype
    spec: RunSpec                          # --backend, parsed
    tp: int                                # --tp (checked against the heads where the checkpoint is given)
    backends: list[str]                    # --backends (parity), normalized
    speculative_config: dict | str | None  # --speculative-config, checked by vLLM where the checkpoint is given


def check_cli_args(args, model: Path | None = None) -> LaunchArgs:
    """The values of ``sparse-mla launch``'s parsed arguments (``args``, :func:`add_cli`'s namespace) as launch takes
    them, after every check it makes of them before an engine starts (:class:`LaunchArgs`). ``model`` (the checked checkpoint, :func:`check_model`) adds the checks that read it (the config's
    ``max_position_embeddings``, heads for ``--tp``, ``--speculative-config``'s, which imports vLLM); None skips them
    and gives ``speculative_config`` as asked (``records check`` has a record, not its checkpoint). Raises :class:`UserInputError` naming the value and what
    is accepted."""
    try:
        lengths = [cli_int(x) for x in str(args.prompt_lengths).split(",") if x.strip()]
    except ValueError:
        raise UserInputError(f"--prompt-lengths {args.prompt_lengths!r} is not accepted; accepted: e.g. 48,900") from None
    if not lengths or min(lengths) < 1:
        raise UserInputError(f"--prompt-lengths {args.prompt_lengths!r} is not accepted; accepted: positive integers")
    thr = None
    if args.throughput is not None:
        thr = parse_json(args.throughput, f"--throughput {args.throughput[:80]!r}",
                         f"e.g. {json.dumps(DEFAULT_THROUGHPUT)!r}")
    try:
        max_model_len = check_max_model_len(args.max_model_len, model)
    except UserInputError as e:
        raise UserInputError(f"--max-model-len: {e}") from None
    try:
        lengths, _, thr = check_generation(lengths, args.max_tokens, thr, max_model_len)
    except UserInputError as e:
        raise UserInputError(f"{e} (--prompt-lengths, --max-tokens, --throughput)") from None
    if args.reference_max_len is not None and not args.parity:
        raise UserInputError(f"--reference-max-len {args.reference_max_len} takes effect with --parity only; "
                             f"accepted: --parity --reference-max-len N")
    try:
        check_reference_max_len(args.reference_max_len)
    except UserInputError as e:
        raise UserInputError(f"--reference-max-len: {e}") from None
    kv = check_kv_cache_dtype(args.kv_cache_dtype)
    spec = parse_run_spec(args.backend)   # unknown names fail here, before an engine starts
    tp = check_tp(model, args.tp) if model is not None else args.tp
    if args.backends is not None and not args.parity:
        raise UserInputError(f"--backends {args.backends!r} takes effect with --parity only; accepted: --parity "
                             f"--backends ..., or --backend NAME for one engine")
    backends = [b for b in str(args.backends or ",".join((OURS, *PEERS))).split(",") if b.strip()]
    if not backends:
        raise UserInputError(f"--backends {args.backends!r} names no backend; accepted: e.g. {OURS},{PEERS[0]}")
    backends = normalize_backends(backends)
    spec_cfg = check_speculative_config(args.speculative_config, model_dir(model)) if model is not None else \
        args.speculative_config        # its check imports vLLM (seconds); records check reads it on its own
    return LaunchArgs(lengths, thr, max_model_len, kv, spec, tp, backends, spec_cfg)


def _cli(args) -> int:
    model = check_model(args.model)   # every argument is checked first: a wrong value is news on any machine
    c = check_cli_args(args, model)
    lengths, thr, max_model_len, tp, backends, spec_cfg = \
        c.lengths, c.throughput, c.max_model_len, c.tp, c.backends, c.speculative_config
    args.kv_cache_dtype = c.kv_cache_dtype
    if not args.parity and not args.serve:
        check_offline_spec(c.spec)
    if args.json_out is not None:
        record_file(args.json_out, model_dir(model), "--json-out file")   # before the engine, not after
    require_gpu()
    if args.parity:
        rec = run_parity(model, backends=backends, prompt_lengths=tuple(lengths), max_tokens=args.max_tokens,
                         throughput=thr, out=args.json_out or default_record_path(tp), tp=tp,
                         kv_cache_dtype=args.kv_cache_dtype, speculative_config=spec_cfg, serve=not args.no_serve,
                         graph=not args.eager_only, max_model_len=max_model_len,
                         reference_max_len=args.reference_max_len)
    elif args.serve:
        rec = run_serve(model, args.backend, prompt=prompt_ids(model_dir(model), lengths[:1])[0], max_tokens=args.max_tokens,
                        kv_cache_dtype=args.kv_cache_dtype, tp=tp, speculative_config=spec_cfg)
        from ..records import environment

        rec = {"environment": environment(), "serve": rec}  # a parity record's served check, alone: the same shape
    else:
        rec = run_offline(model, args.backend, args.kv_cache_dtype, tp, prompts=prompt_ids(model_dir(model), lengths),
                          max_tokens=args.max_tokens, enforce_eager=not args.cuda_graphs, throughput=thr,
                          speculative_config=spec_cfg, max_model_len=max_model_len)
    if not args.parity:
        text = json.dumps(rec, indent=1, default=str)
        if args.json_out:
            atomic_write_text(args.json_out, text)
        else:
            print(text)
        said = (rec.get("serve") or rec).get("ran_contradictions")
        if said:   # the record is out, with them; the command fails
            print(f"sparse-mla launch: what ran contradicts what was asked: {'; '.join(said)}", file=sys.stderr)
            return 1
        return 0
    print(json.dumps({k: rec.get(k) for k in ("parity_vs_ours", "throughput_tokens_per_s", "failures")},
                     indent=1, default=str))
    if rec.get("failures"):   # the record is written, with its failures; the command fails
        print(f"sparse-mla launch: parity run failed: {'; '.join(rec['failures'])[:2000]}", file=sys.stderr)
        return 1
    return 0
