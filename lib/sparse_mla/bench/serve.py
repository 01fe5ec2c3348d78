"""``sparse-mla bench serve``: the engine as a vLLM user meets it -- ``vllm serve`` per run spec, loaded and measured
by vLLM's own ``vllm bench serve``, every cache warm before any timed pass, timed passes in alternating order, ranked
only where the repeats allow.

Runs: every run spec (``BACKEND`` or ``BACKEND+TRITON_DSA_INDEXER``, :mod:`sparse_mla.launch.specs`; the first is
the agreement baseline) and, with a speculative config (``--speculative ngram|mtp`` or ``--speculative-config
JSON``), every run spec again with it (record key ``SPEC+<method>``; an MTP drafter runs on the run's own backend,
:func:`sparse_mla.launch.engine.serve_command`).

The method (:data:`METHOD`; why: on 2026-12-04 the old one -- a fresh server per repeat, a 2-token warm-up, 32 prompts
of 24 tokens -- moved every backend's throughput 5-7x between repeats, the last repeat of every backend the fastest:
the timed window was a fraction of a second to a few seconds, and JIT/autotune shapes first met in a timed pass were
compiled there, then found in the on-disk caches by later servers):

1. **live servers**: one ``vllm serve`` per run (:func:`start_server`; loopback, a free port, prefix caching off so
   that passes are the same work, the log next to the record, every process group stopped when the session ends),
   started one after another (vLLM measures free memory at start), each with :func:`server_memory_share` of the GPU;
2. **warm-up at the timed load**: right after its start, each server gets one whole ``vllm bench serve`` pass of
   exactly the timed load (same prompts, output length, concurrency): the Triton and DeepGEMM JIT shapes, autotune
   and CUDA graphs the timed passes meet are all filled before any timed pass; recorded, not a repeat;
3. **timed passes** (:func:`timed_pass`): ``repeats`` rounds; round ``r`` runs one pass on each live server in the
   order rotated by ``r`` (A B C / B C A / C A B / ..., :func:`rotated`), one server loaded at a time, the others
   idle: each pass is ``num_prompts`` requests, at most ``max_concurrency`` in flight, greedy, ``output_len`` new
   tokens each (``--ignore-eos``), TTFT / TPOT / ITL / E2EL percentiles; vLLM's result file is kept next to the
   record as vLLM wrote it, and in the record under ``repeats`` without its per-request arrays. The defaults make a
   pass a window of many seconds (:data:`DEFAULTS`);
4. **what ran**: the ``ran`` block read in each server's workers after its last pass (:func:`finish_server`,
   :func:`sparse_mla.launch.engine.served_ran`) and what in it contradicts the run spec.

Prompts: vLLM's ``random`` dataset with ``--random-input-len index_topk`` and input range ratio
:data:`INPUT_RANGE_RATIO` (lengths uniform in [topk/4, 7 topk/4]: half the prompts shorter than ``index_topk``,
where sparse attention equals dense, half longer, where the indexer selects); or ``repeat`` (the default with ngram
speculation): vLLM's ``custom`` dataset over a JSONL this writes, each prompt a random segment of 8-32 tokens
repeated to the same lengths, so that ngram lookup finds matches and acceptance is real. Same seed, same prompts in
every pass: vLLM's datasets are seeded (the record checks that every pass saw the same prompt lengths).

Verdict (:mod:`sparse_mla.bench.ranking`): for each pair of runs without speculation (and each pair under the same
speculation) and each of output tokens/s, median TTFT, TPOT and ITL, "A > B" only where the runs' ranges over
repeats do not overlap, with at least :data:`~sparse_mla.bench.ranking.MIN_REPEATS` repeats each (two runs of the
same engine are then ranked with probability :data:`~sparse_mla.bench.ranking.FALSE_RANK_RATE` per metric and pair,
0.79 %). Greedy agreement (vLLM's ``generated_texts``): each run against the baseline run, each speculative run
against the same run spec without speculation, and each run's repeats against its first (the noise floor).
Speculative runs: vLLM's own spec-decode numbers of each repeat (acceptance rate and length, drafts, accepted
tokens, per position); a speculative pass without drafts is a failure.

Failures (one line each in the record's ``failures``; ``sparse-mla bench serve`` then exits 1): a server that does not
start or dies, a ``vllm bench serve`` pass that fails or has failed requests, a ``ran`` that contradicts the run
spec, speculation without drafts, passes that did not get the same prompts. Record: ``bench_serve_<tag>.{json,csv,
png}`` (:mod:`sparse_mla.bench.serve_record`), rewritten after every server start and every pass (``"complete":
false`` until the end), plus per run ``bench_serve_<tag>_<run>.log`` (``vllm serve``), ``..._bench.log`` (every client
pass), ``..._warmup.json`` and ``..._r<repeat>.json`` (vLLM's results), all in ``out_dir`` and nothing elsewhere.
"""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError, cli_float, cli_int
from ..files import atomic_write_text, make_dir, read_json
from ..models import text_config
from . import ranking
from . import vllm_client as vc
from .serve_record import csv_rows, write_record

DEFAULT_RUNS = ("TRITON_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE")
#: A pass of 256 x 256 greedy tokens at concurrency 32 is a window of many seconds on the tiny checkpoints (65K output
#: tokens; the 2026-12-01 H200 records ran 2-6K tokens/s); --quick keeps 40K.
DEFAULTS = {"num_prompts": 256, "max_concurrency": 32, "repeats": ranking.MIN_REPEATS, "output_len": 256}
QUICK = {"num_prompts": 160, "output_len": 256}
LIMITS = {"num_prompts": (1, 4096), "max_concurrency": (1, 1024), "repeats": (1, 20), "output_len": (2, 1024),
          "seed": (0, 2**31 - 1)}
METHOD = ("live servers, one per run, started one after another; each warmed with one pass of the timed load; timed "
          "passes in rotated order, one server loaded at a time")
INPUT_RANGE_RATIO = 0.75
DATASETS = ("random", "repeat")
REPEAT_PERIOD = (8, 32)    # tokens of the segment a ``repeat`` prompt repeats
PROMPT_SLACK = 64          # tokens a re-tokenized prompt may exceed its target length by (max-model-len margin)
#: ``--speculative`` presets: vLLM's ``SpeculativeConfig`` fields (``vllm/config/speculative.py``).
SPECULATIVE_PRESETS = {"ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
                                 "prompt_lookup_min": 2},
                       "mtp": {"method": "mtp", "num_speculative_tokens": 1}}
#: Extra ``vllm serve`` options: repeats are the same work without prefix caching; no access-log line per request.
SERVER_EXTRA = ("--no-enable-prefix-caching", "--disable-uvicorn-access-log")
#: What every pass asks beside the :class:`Load` (the record's ``load``): greedy (``--temperature 0``), each request
#: exactly ``output_len`` new tokens (``--ignore-eos``, an output range of 0).
GREEDY = {"output_range_ratio": 0.0, "temperature": 0.0, "ignore_eos": True}


# ------------------------------------------------------------------------------------------------ the load
@dataclass(frozen=True)
class Load:
    """What each server gets: ``num_prompts`` requests per pass, at most ``max_concurrency`` in flight,
    ``output_len`` greedy tokens each, prompts of ``dataset`` (:data:`DATASETS`) from ``seed``; ``repeats`` timed
    passes per run on its live server."""

    num_prompts: int = DEFAULTS["num_prompts"]
    max_concurrency: int = DEFAULTS["max_concurrency"]
    repeats: int = DEFAULTS["repeats"]
    output_len: int = DEFAULTS["output_len"]
    seed: int = 0
    dataset: str = "random"

    def __post_init__(self):
        for k, (lo, hi) in LIMITS.items():
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise UserInputError(f"--{k.replace('_', '-')} {v!r} is not accepted; accepted: an integer from {lo} "
                                     f"to {hi}")
        if self.dataset not in DATASETS:
            raise UserInputError(f"--dataset {self.dataset!r} is not accepted; accepted: {', '.join(DATASETS)}")


def input_length_range(index_topk: int) -> tuple[int, int]:
    """Prompt lengths in tokens, ``[floor(topk (1 - r)), ceil(topk (1 + r))]`` with r = :data:`INPUT_RANGE_RATIO`:
    vLLM's random dataset's range for ``--random-input-len index_topk`` (``vllm/benchmarks/datasets/utils.py``
    ``get_sampling_params``, for a tokenizer that adds no special tokens)."""
    return math.floor(index_topk * (1 - INPUT_RANGE_RATIO)), math.ceil(index_topk * (1 + INPUT_RANGE_RATIO))


def dataset_args(dataset: str, index_topk: int, output_len: int, prompts_file: Path | None = None) -> list[str]:
    """``vllm bench serve``'s dataset arguments: ``random`` (input lengths :func:`input_length_range`, every output
    ``output_len`` tokens) or ``repeat`` (vLLM's ``custom`` dataset over ``prompts_file``, no chat template)."""
    if dataset == "random":
        return ["--dataset-name", "random", "--random-input-len", str(index_topk), "--random-range-ratio",
                json.dumps({"input": INPUT_RANGE_RATIO, "output": 0.0}), "--random-output-len", str(output_len)]
    return ["--dataset-name", "custom", "--dataset-path", str(prompts_file), "--custom-output-len", str(output_len),
            "--skip-chat-template"]


def repeat_prompts(tokenizer, n: int, index_topk: int, seed: int = 0) -> list[str]:
    """``n`` seeded prompts whose text repeats: each a segment of :data:`REPEAT_PERIOD` random token ids (at most a
    quarter of the prompt) repeated to a length uniform in :func:`input_length_range`, decoded. The ids are the
    tokenizer's, without its special tokens and without byte pieces that do not decode to text on their own (a
    byte-level BPE's partial UTF-8)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    special = set(tokenizer.all_special_ids)
    allowed = np.array([t for t in range(tokenizer.vocab_size)
                        if t not in special and "\ufffd" not in tokenizer.decode([t])])
    lo, hi = input_length_range(index_topk)
    out = []
    for _ in range(n):
        length, period = int(rng.integers(lo, hi + 1)), int(rng.integers(REPEAT_PERIOD[0], REPEAT_PERIOD[1] + 1))
        period = min(period, max(1, length // 4))   # at least four times over
        segment = allowed[rng.integers(0, len(allowed), period)].tolist()
        out.append(tokenizer.decode((segment * -(-length // period))[:length]))
    return out


def write_repeat_prompts(path: Path, model: Path, load: Load, index_topk: int) -> Path:
    """The ``repeat`` dataset as vLLM's ``custom`` JSONL (``{"prompt": ...}`` per line), with the checkpoint's
    tokenizer as ``vllm bench serve`` loads it (``vllm.tokenizers.get_tokenizer``)."""
    from vllm.tokenizers import get_tokenizer

    prompts = repeat_prompts(get_tokenizer(str(model)), load.num_prompts, index_topk, load.seed)
    return atomic_write_text(path, "".join(json.dumps({"prompt": p}) + "\n" for p in prompts))


def server_max_model_len(index_topk: int, output_len: int, spec_tokens: int = 0,
                         max_position_embeddings: int | None = None) -> int:
    """``--max-model-len`` for the load: at least the engines' usual 4096, enough for the longest prompt
    (:func:`input_length_range` + :data:`PROMPT_SLACK`) plus its new (and speculative) tokens, in steps of 1024.
    Raises :class:`UserInputError` past the model's ``max_position_embeddings``."""
    from ..launch.engine import MAX_MODEL_LEN

    longest = input_length_range(index_topk)[1]
    need = longest + PROMPT_SLACK + output_len + spec_tokens
    n = max(MAX_MODEL_LEN, -(-need // 1024) * 1024)
    if max_position_embeddings and n > max_position_embeddings:
        if need > max_position_embeddings:
            spec = f" + {spec_tokens} speculative tokens" if spec_tokens else ""
            raise UserInputError(f"the load's longest prompt ({longest} + {PROMPT_SLACK} tokens, 7/4 x index_topk "
                                 f"{index_topk}) + {output_len} new tokens{spec} exceeds the model's "
                                 f"max_position_embeddings {max_position_embeddings}; accepted: fewer --output-len"
                                 f"{' or num_speculative_tokens' if spec else ''} or a checkpoint with a smaller "
                                 f"index_topk")
        n = max_position_embeddings
    return n


# ------------------------------------------------------------------------------------------------ the plan
def plan_runs(runs, speculative_config: dict | None) -> list[tuple[str, str, dict | None]]:
    """``(record key, run spec, speculative config)`` per run: every run spec, each followed by itself with
    ``speculative_config`` (key ``SPEC+<method>``) when one is given."""
    method = str((speculative_config or {}).get("method") or "spec")
    out = []
    for name in runs:
        out.append((name, name, None))
        if speculative_config:
            out.append((f"{name}+{method}", name, speculative_config))
    return out


def rotated(keys: list[str], repeats: int) -> list[list[str]]:
    """The serving order of each repeat: ``keys`` rotated left by the repeat's index (A B C / B C A / C A B / A B C
    ...), so that each run is served first, in the middle and last alike."""
    keys = list(keys)
    return [keys[r % len(keys):] + keys[:r % len(keys)] for r in range(repeats)] if keys else []


# ------------------------------------------------------------------------------------------------ one server
def safe_name(name: str) -> str:
    """A run key as a file-name part of its logs and result files (``TRITON_MLA_SPARSE+mtp`` -> ``TRITON_MLA_SPARSE_mtp``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def _bench_pass(base_url: str, model: Path, args: list[str], load: Load, result: Path, log: Path,
                timeout_s: float, ready_timeout_s: float) -> tuple[dict, dict | None, str | None]:
    """One ``vllm bench serve`` pass: ``(what the pass did, vLLM's result or None, the problem or None)``."""
    from ..launch.engine import SERVED_NAME

    result.unlink(missing_ok=True)   # a pass that writes nothing must not find an older session's file
    argv = vc.bench_argv(base_url, model, SERVED_NAME, args, num_prompts=load.num_prompts,
                         max_concurrency=load.max_concurrency, seed=load.seed, result_path=result,
                         ready_timeout_s=ready_timeout_s)
    done = vc.run_pass(argv, log, timeout_s)
    res = vc.read_result(result) if done["exit_code"] == 0 else None
    info = {"command": ["vllm", "bench", "serve", *argv], "result_file": result.name, **done}
    if res is not None:
        info.update({k: res.get(k) for k in ("duration", "completed", "failed")})
    if done["timed_out"]:
        return info, None, f"vllm bench serve ran past {timeout_s:.0f} s and was killed; log: {log.name}"
    if done["exit_code"] != 0:
        return info, None, f"vllm bench serve exited with {done['exit_code']}; log: {log.name}"
    if res is None:
        return info, None, f"vllm bench serve wrote no result {result.name}; log: {log.name}"
    if vc.failed_requests(res):
        return info, res, (f"{res['failed']} of {load.num_prompts} requests failed (vLLM's result "
                           f"{result.name}); log: {log.name}")
    return info, res, None


def start_server(stack, model: Path, key: str, spec, speculative_config: dict | None, load: Load, data_args,
                 stem: Path, *, server_timeout_s: float = 300.0, bench_timeout_s: float = 600.0,
                 **server_kw) -> tuple[dict, object | None]:
    """Start the live ``vllm serve`` of run ``key`` (run spec ``spec``) inside ``stack`` (a ``contextlib.ExitStack``:
    the server is stopped when the session's stack closes, however it closes) and warm it with one whole pass of the
    **timed load itself** (same prompts, output length and concurrency: every Triton/DeepGEMM JIT shape, autotune and
    CUDA graph the timed passes meet is filled here). ``data_args(output_len)``: the dataset arguments; files are
    ``stem`` + ``.log``, ``_bench.log``, ``_warmup.json``. Returns ``(server entry, the Server or None)``: None where
    the server did not start or the warm-up failed (the entry's ``failures`` and ``error`` say why)."""
    from ..launch.engine import serve_command, server_env
    from ..launch.server import ServerError, free_port, served

    port = free_port()
    cmd = serve_command(model, spec, port, speculative_config=speculative_config,
                        max_num_seqs=load.max_concurrency, extra=SERVER_EXTRA, **server_kw)
    log, bench_log = stem.with_name(stem.name + ".log"), stem.with_name(stem.name + "_bench.log")
    entry = {"command": cmd, "log": log.name, "bench_log": bench_log.name, "failures": []}
    atomic_write_text(bench_log, "")
    t0 = time.time()
    try:
        srv = stack.enter_context(served(cmd, server_env(spec), log, port, server_timeout_s))
    except ServerError as e:
        entry.update(error=str(e), log_tail=_tail(log), wall_s=round(time.time() - t0, 1))
        entry["failures"].append(f"{key}: {e}")
        return entry, None
    entry["server_up_s"] = srv.up_s
    entry["warmup"], _, problem = _bench_pass(srv.base_url, model, data_args(load.output_len), load,
                                              stem.with_name(stem.name + "_warmup.json"), bench_log,
                                              timeout_s=bench_timeout_s, ready_timeout_s=server_timeout_s)
    entry["warmup"]["output_len"] = load.output_len
    entry["wall_s"] = round(time.time() - t0, 1)
    if problem:
        entry.update(error=f"warm-up pass: {problem}", log_tail=_tail(log))
        entry["failures"].append(f"{key}: warm-up pass: {problem}")
        return entry, None
    return entry, srv


def timed_pass(srv, model: Path, key: str, speculative_config: dict | None, repeat: int, load: Load, data_args,
               stem: Path, bench_log: Path, *, bench_timeout_s: float = 600.0,
               server_timeout_s: float = 300.0) -> tuple[dict, dict | None]:
    """Timed pass ``repeat`` (0-based) of run ``key`` on its live server ``srv``: ``(pass entry, vLLM's result or
    None)``; the entry's ``failures`` holds one line per failure (a failed pass, failed requests, a dead server,
    speculation without drafts). vLLM's result file is ``stem`` + ``.json``."""
    entry = {"repeat": repeat + 1, "failures": []}
    fail = lambda msg: entry["failures"].append(f"{key} repeat {repeat + 1}: {msg}")  # noqa: E731
    if srv.proc.poll() is not None:
        entry["error"] = f"vllm serve exited with {srv.proc.returncode} before this pass; log: {srv.log_path.name}"
        fail(entry["error"])
        return entry, None
    entry["timed"], result, problem = _bench_pass(srv.base_url, model, data_args(load.output_len), load,
                                                  stem.with_name(stem.name + ".json"), bench_log,
                                                  timeout_s=bench_timeout_s, ready_timeout_s=server_timeout_s)
    if problem:
        fail(f"timed pass: {problem}")
    if srv.proc.poll() is not None:
        entry["error"] = f"vllm serve exited with {srv.proc.returncode} during the pass; log: {srv.log_path.name}"
        fail(entry["error"])
    if speculative_config and result is not None and not result.get("spec_decode_num_drafts"):
        fail(f"speculation asked ({json.dumps(speculative_config)}) and none happened: vLLM's result has no "
             f"drafts (spec_decode_num_drafts {result.get('spec_decode_num_drafts')!r}; vLLM leaves the spec_decode "
             f"keys out where the server's draft counters did not grow during the pass)")
    return entry, result


def finish_server(srv, entry: dict, key: str, spec, speculative_config: dict | None) -> None:
    """The ``ran`` block read in the live server's workers after its last pass
    (:func:`sparse_mla.launch.engine.served_ran`), what in it contradicts the run spec, and a server that died."""
    from ..launch.engine import served_ran

    if srv.proc.poll() is not None:
        entry["error"] = f"vllm serve exited with {srv.proc.returncode} during the benchmark; log: {srv.log_path.name}"
        entry["failures"].append(f"{key}: {entry['error']}")
        entry["log_tail"] = _tail(srv.log_path)
        return
    entry.update(served_ran(srv.base_url, spec, speculative_config))
    for c in entry.get("ran_contradictions", []):
        entry["failures"].append(f"{key}: what ran contradicts what was asked: {c}")


# ------------------------------------------------------------------------------------------------ the session
def _check_session(model, runs, load, kv_cache_dtype, tp, speculative_config) -> tuple:
    from ..launch.engine import check_model_dir, check_tp
    from ..launch.specs import check_speculative_config, normalize_backends
    from ..layouts import check_kv_cache_dtype

    model = check_model_dir(model).resolve()
    kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)   # before the backend names, whose check imports vLLM
    runs = normalize_backends(runs)
    tp = check_tp(model, tp)
    speculative_config = check_speculative_config(speculative_config, model)
    cfg = text_config(read_json(model / "config.json"))
    spec_tokens = int((speculative_config or {}).get("num_speculative_tokens") or 0)
    max_model_len = server_max_model_len(cfg["index_topk"], load.output_len, spec_tokens,
                                         cfg.get("max_position_embeddings"))
    return model, runs, kv_cache_dtype, tp, speculative_config, cfg, max_model_len


def server_memory_share(runs: int, cap: float = 0.35) -> float:
    """``--gpu-memory-utilization`` of each live server: ``runs`` servers share one GPU (0.85 of it among them, at
    most ``cap`` each); vLLM checks at start that this share is free, and the servers start one after another."""
    return round(min(cap, 0.85 / max(1, runs)), 3)


def _session_record(*, model, cfg, runs, plan, load, prompts, topk, server_kw, order, kv_cache_dtype, cuda_graphs,
                    speculative_config, server_timeout_s, bench_timeout_s) -> dict:
    """The record of :func:`bench_serve` before its first server starts (``complete`` False, no pass yet)."""
    from ..launch.engine import model_block
    from ..launch.specs import parse_run_spec, with_simulated
    from ..records import environment

    return with_simulated({
        "what": "vllm serve per run spec, all live at once, each warmed with one pass of the timed load; then the "
                "timed passes in rotated order, one run at a time; the load and the metrics are vLLM's own "
                "`vllm bench serve`",
        "method": METHOD, "environment": environment(), "complete": False,
        "model": model_block(model, cfg),
        "load": {**load.__dict__, "input_lengths": list(input_length_range(topk)), **GREEDY,
                 "warmup_output_len": load.output_len,
                 "dataset_args": dataset_args(load.dataset, topk, load.output_len, prompts and Path(prompts.name)),
                 "prompts_file": prompts and prompts.name},
        "server": {**server_kw, "cuda_graphs": cuda_graphs, "max_num_seqs": load.max_concurrency,
                   "prefix_caching": "--no-enable-prefix-caching" not in SERVER_EXTRA, "server_timeout_s": server_timeout_s, "bench_timeout_s": bench_timeout_s},
        "speculative_config": speculative_config, "baseline": runs[0], "order": order,
        "runs": {k: {**parse_run_spec(name).describe(), "run": k, "run_spec": name, "kv_cache_dtype": kv_cache_dtype,
                     "speculative_config": scfg, "cuda_graphs": cuda_graphs, "servers": [], "passes": []}
                 for k, name, scfg in plan},
        "repeats": {k: [None] * load.repeats for k, _, _ in plan}, "failures": []})


def bench_serve(model, runs=DEFAULT_RUNS, load: Load | None = None, *, out_dir, tag: str,
                kv_cache_dtype: str = "auto", tp: int = 1, cuda_graphs: bool = True,
                speculative_config: dict | str | None = None, server_timeout_s: float = 300.0,
                bench_timeout_s: float = 600.0, gpu_memory_utilization: float | None = None) -> dict:
    """The whole session (module docstring); returns the record, also written to ``out_dir`` after every server
    start and every timed pass. ``runs``: run specs, the first the agreement baseline. ``gpu_memory_utilization``:
    each live server's share (default :func:`server_memory_share`). Needs a ``vllm`` command on ``PATH`` for
    ``vllm serve`` (a GPU for real numbers; nothing here checks for one, so that the whole path runs against a
    stand-in server). The client passes are forked from multiprocessing's forkserver
    (:mod:`sparse_mla.bench.vllm_client`): a script calling this needs the ``if __name__ == "__main__":`` guard, as
    for vLLM's own offline engine."""
    from contextlib import ExitStack

    from ..launch.specs import parse_run_spec

    load = load or Load()
    model, runs, kv_cache_dtype, tp, speculative_config, cfg, max_model_len = _check_session(
        model, runs, load, kv_cache_dtype, tp, speculative_config)
    out_dir = Path(out_dir)
    make_dir(out_dir)
    topk = cfg["index_topk"]
    prompts = write_repeat_prompts(out_dir / f"bench_serve_{tag}_prompts.jsonl", model, load, topk) \
        if load.dataset == "repeat" else None
    plan = plan_runs(runs, speculative_config)
    server_kw = dict(kv_cache_dtype=kv_cache_dtype, tp=tp, enforce_eager=not cuda_graphs,
                     max_model_len=max_model_len,
                     gpu_memory_utilization=gpu_memory_utilization or server_memory_share(len(plan)))
    order = rotated([k for k, _, _ in plan], load.repeats)
    rec = _session_record(model=model, cfg=cfg, runs=runs, plan=plan, load=load, prompts=prompts, topk=topk,
                          server_kw=server_kw, order=order, kv_cache_dtype=kv_cache_dtype, cuda_graphs=cuda_graphs,
                          speculative_config=speculative_config, server_timeout_s=server_timeout_s,
                          bench_timeout_s=bench_timeout_s)
    results: dict[tuple[str, int], dict] = {}
    specs = {k: (parse_run_spec(name), scfg) for k, name, scfg in plan}
    data = lambda n: dataset_args(load.dataset, topk, n, prompts)  # noqa: E731
    kw = dict(server_timeout_s=server_timeout_s, bench_timeout_s=bench_timeout_s)
    t0, live = time.time(), {}
    with ExitStack() as stack:
        for i, (key, _, _) in enumerate(plan):
            stem = out_dir / f"bench_serve_{tag}_{safe_name(key)}"
            print(f"[bench serve] server {i + 1}/{len(plan)}, {key}: vllm serve + warm-up pass, log {stem.name}.log",
                  flush=True)
            entry, srv = start_server(stack, model, key, *specs[key], load, data, stem, **kw, **server_kw)
            rec["runs"][key]["servers"].append(entry)
            if srv is not None:
                live[key] = (srv, stem)
            refresh_run(rec, key, results)
            rec["wall_s"] = round(time.time() - t0, 1)
            write_record(rec, out_dir, tag)
            print(f"[bench serve] server {i + 1}/{len(plan)}, {key}: " + (
                f"up in {entry['server_up_s']} s, warm-up {entry['warmup'].get('duration', 0):.1f} s"
                if srv is not None else "; ".join(entry["failures"])), flush=True)
        n, total = 0, len(live) * load.repeats
        for r, keys in enumerate(order):
            for pos, key in enumerate(k for k in keys if k in live):
                n += 1
                srv, stem = live[key]
                entry, result = timed_pass(srv, model, key, specs[key][1], r, load, data,
                                           stem.with_name(f"{stem.name}_r{r + 1}"),
                                           stem.with_name(stem.name + "_bench.log"), **kw)
                entry["position"] = pos + 1
                record_pass(rec, key, r, entry, result, results)
                rec["wall_s"] = round(time.time() - t0, 1)
                write_record(rec, out_dir, tag)
                print(f"[bench serve {n}/{total}] repeat {r + 1}, {key}: {_progress(entry, result)}", flush=True)
        for key, (srv, _) in live.items():
            finish_server(srv, rec["runs"][key]["servers"][0], key, *specs[key])
            refresh_run(rec, key, results)
    rec["verdict"] = session_verdict(rec)
    rec["complete"] = True
    rec["wall_s"] = round(time.time() - t0, 1)
    write_record(rec, out_dir, tag)
    return rec


def _progress(entry: dict, result: dict | None) -> str:
    if result is None:
        return "; ".join(entry["failures"]) or entry.get("error", "no result")
    return (f"{result.get('duration', 0):.1f} s, {result.get('output_throughput', 0):.1f} tokens/s, median TPOT "
            f"{result.get('median_tpot_ms', 0):.2f} ms" + (f"; {len(entry['failures'])} failure(s)"
                                                              if entry["failures"] else ""))


# ------------------------------------------------------------------------------------------------ the record
SUMMARY_METRICS = (*ranking.METRICS, "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "failed")


def spread(values) -> dict | None:
    """``{"min", "median", "max", "n"}`` of the values that are numbers (``numpy.median``); ``None`` if none are."""
    import numpy as np

    v = [float(x) for x in values if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]
    return {"min": min(v), "median": float(np.median(v)), "max": max(v), "n": len(v)} if v else None


def record_pass(rec: dict, key: str, r: int, entry: dict, result: dict | None, results: dict) -> None:
    """Put one timed pass's entry and vLLM's result (``repeats[key][r]``, without per-request arrays) into ``rec``,
    then :func:`refresh_run`."""
    rec["runs"][key]["passes"].append(entry)
    if result is not None:
        results[(key, r)] = result
        rec["repeats"][key][r] = vc.summary(result)
    refresh_run(rec, key, results)


def refresh_run(rec: dict, key: str, results: dict) -> None:
    """Everything derived from run ``key``'s server and passes: its summary, ``ran``, error, agreement across
    repeats, the comparisons between runs and the session's failures."""
    run = rec["runs"][key]
    reps = [x for x in rec["repeats"][key] if x is not None]
    run["summary"] = {m: spread(x.get(m) for x in reps) for m in SUMMARY_METRICS}
    run["summary"]["server_up_s"] = spread(s.get("server_up_s") for s in run["servers"])
    with_ran = [s for s in run["servers"] if s.get("ran") is not None]
    bad = [s for s in with_ran if s.get("ran_contradictions")]
    if with_ran:   # the record's ran: a contradicting server's where there is one (records check judges it)
        run["ran"] = (bad or with_ran)[0]["ran"]
    run["ran_contradictions"] = sorted({c for s in run["servers"] for c in s.get("ran_contradictions", [])})
    errors = [s["error"] for s in run["servers"] if s.get("error")] + \
        [f"repeat {p['repeat']}: {p['error']}" for p in run["passes"] if p.get("error")]
    run.pop("error", None)
    if errors:
        run["error"] = "; ".join(errors)
    first = min((q for (k, q) in results if k == key), default=None)
    run["agreement_across_repeats"] = [{"repeat": q + 1, "against_repeat": first + 1,
                                        **vc.text_agreement(results[(key, first)], results[(key, q)])}
                                       for q in sorted(q for (k, q) in results if k == key and q != first)]
    rec.update(compare_runs(rec, results))
    rec["failures"] = session_failures(rec, results)


def _agreement_per_repeat(results: dict, a: str, b: str, repeats: int) -> dict:
    per = [{"repeat": r + 1, **vc.text_agreement(results[(a, r)], results[(b, r)])} for r in range(repeats)
           if (a, r) in results and (b, r) in results]
    return {"compared": sum(p["compared"] for p in per), "identical": sum(p["identical"] for p in per),
            "per_repeat": per}


def compare_runs(rec: dict, results: dict) -> dict:
    """Greedy agreement, repeat by repeat, of every run without speculation with the baseline run, and of every
    speculative run with the same run spec without it (plus its output tokens/s over the plain run's, medians over
    repeats, and its median acceptance rate)."""
    base, n = rec["baseline"], len(next(iter(rec["repeats"].values()), []))
    vs_base, vs_plain = {}, {}
    for k, run in rec["runs"].items():
        if not run.get("speculative_config"):
            if k != base:
                vs_base[k] = {"baseline": base, **_agreement_per_repeat(results, base, k, n)}
            continue
        plain = run["run_spec"]
        tp_spec = (run.get("summary") or {}).get("output_throughput") or {}
        tp_plain = (rec["runs"][plain].get("summary") or {}).get("output_throughput") or {}
        acc = (run.get("summary") or {}).get("spec_decode_acceptance_rate") or {}
        vs_plain[k] = {"plain": plain, **_agreement_per_repeat(results, plain, k, n),
                       "output_throughput_ratio": tp_spec["median"] / tp_plain["median"]
                       if tp_spec.get("median") and tp_plain.get("median") else None,
                       "acceptance_rate_percent": acc.get("median")}
    return {"agreement_vs_baseline": vs_base, "speculative_vs_plain": vs_plain}


def session_failures(rec: dict, results: dict) -> list[str]:
    """Every server's failure lines, then one line if the passes did not all get prompts of the same lengths
    (vLLM's ``input_lens``: same seed and dataset must give the same prompts in every pass)."""
    out = [f for run in rec["runs"].values() for s in (*run["servers"], *run.get("passes", [])) for f in s["failures"]]
    lens = {json.dumps(res.get("input_lens")) for res in results.values() if res.get("input_lens") is not None}
    if len(lens) > 1:
        out.append(f"the timed passes did not get the same prompts: {len(lens)} different lists of prompt lengths "
                   f"(vLLM's input_lens) for one seed and dataset")
    return out


def session_verdict(rec: dict) -> dict:
    """:func:`sparse_mla.bench.ranking.verdict` over the runs without speculation, and over the runs under the
    (one) speculative config, from ``repeats``."""
    values = {k: {m: [(rep or {}).get(m) for rep in reps] for m in ranking.METRICS}
              for k, reps in rec["repeats"].items()}
    groups = {"plain": [k for k, r in rec["runs"].items() if not r.get("speculative_config")]}
    spec = [k for k, r in rec["runs"].items() if r.get("speculative_config")]
    if spec:
        groups["speculative " + json.dumps(rec.get("speculative_config"))] = spec
    return ranking.verdict(values, groups)


# ------------------------------------------------------------------------------------------------ command line
def add_arguments(p) -> None:
    """``sparse-mla bench serve``'s own arguments (``--tag``/``--out-dir`` come from ``bench.cli``)."""
    p.add_argument("--model", required=True, help="checkpoint directory (sparse-mla make-checkpoint; --mtp for MTP)")
    p.add_argument("--backends", default=",".join(DEFAULT_RUNS),
                   help="comma-separated run specs, BACKEND or BACKEND+TRITON_DSA_INDEXER; the first is the "
                        "agreement baseline (default: %(default)s)")
    for k, what in (("num_prompts", "requests per vllm bench serve pass"),
                    ("max_concurrency", "requests in flight (also the server's --max-num-seqs)"),
                    ("repeats", "timed passes per run on its live server, in rotated order; runs with fewer "
                                f"than {ranking.MIN_REPEATS} are not ranked"),
                    ("output_len", "new tokens per request (greedy, ignore_eos)")):
        quick = f", --quick: {QUICK[k]}" if k in QUICK else ""
        p.add_argument(f"--{k.replace('_', '-')}", type=cli_int, default=None,
                       help=f"{what} (default {DEFAULTS[k]}{quick})")
    p.add_argument("--seed", type=cli_int, default=0, help="vllm bench serve's dataset seed (default 0)")
    p.add_argument("--dataset", default=None, metavar="{random,repeat}",
                   help="random: vLLM's random dataset, lengths index_topk/4..7 index_topk/4; repeat: prompts whose "
                        "text repeats (vLLM's custom dataset), for ngram speculation (default: repeat with "
                        "--speculative ngram, else random)")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK['num_prompts']} prompts of {QUICK['output_len']} new tokens; still "
                        f"{DEFAULTS['repeats']} repeats (fewer cannot rank)")
    p.add_argument("--eager", action="store_true", help="--enforce-eager (default: CUDA graphs, vLLM's default)")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--tp", type=cli_int, default=1, help="tensor-parallel size")
    p.add_argument("--speculative", default=None, metavar="{" + ",".join(SPECULATIVE_PRESETS) + "}",
                   help="also serve every run spec with this speculative decoding: "
                        + "; ".join(f"{k} = '{json.dumps(v)}'" for k, v in SPECULATIVE_PRESETS.items())
                        + " (mtp needs make-checkpoint --mtp)")
    p.add_argument("--speculative-config", default=None, metavar="JSON",
                   help="as --speculative, any vLLM speculative config (e.g. '{\"method\": \"mtp\", "
                        "\"num_speculative_tokens\": 2}')")
    p.add_argument("--server-timeout", type=cli_float, default=300.0, help="seconds a server may take to be ready")
    p.add_argument("--bench-timeout", type=cli_float, default=600.0,
                   help="seconds one vllm bench serve pass may take (then it is killed)")


def speculative_request(preset, config, model) -> dict | None:
    """The speculative config of ``--speculative PRESET`` (:data:`SPECULATIVE_PRESETS`) or ``--speculative-config
    JSON`` (not both), checked (:func:`sparse_mla.launch.specs.check_speculative_config`, then
    ``num_speculative_tokens`` a positive integer); ``None`` for none. Raises :class:`UserInputError`."""
    from ..launch.specs import MTP_EXAMPLE, check_speculative_config

    if preset is not None and config is not None:
        raise UserInputError(f"--speculative {preset!r} and --speculative-config are both given; accepted: one of them")
    if preset is not None:
        name = str(preset).strip().lower()
        if name not in SPECULATIVE_PRESETS:
            raise UserInputError(f"--speculative {preset!r} is not accepted; accepted: "
                                 f"{', '.join(SPECULATIVE_PRESETS)} (or --speculative-config JSON)")
        config = dict(SPECULATIVE_PRESETS[name])
    spec = check_speculative_config(config, model)
    tokens = (spec or {}).get("num_speculative_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise UserInputError(f"--speculative-config num_speculative_tokens {tokens!r} is not accepted; accepted: "
                             f"a positive integer, e.g. '{MTP_EXAMPLE}'")
    return spec


def asked_load(args, spec_cfg: dict | None) -> Load:
    """The :class:`Load` that the parsed command ``args`` asks (``--quick``: :data:`QUICK`, else :data:`DEFAULTS`
    for what is not given; the dataset ``repeat`` under ngram speculation ``spec_cfg``, else ``random``). Raises
    :class:`UserInputError` for a value out of :data:`LIMITS`."""
    dataset = args.dataset if args.dataset is not None else \
        "repeat" if (spec_cfg or {}).get("method") == "ngram" else "random"
    vals = {k: getattr(args, k) if getattr(args, k) is not None else (QUICK.get(k) if args.quick else None)
            or DEFAULTS[k] for k in DEFAULTS}
    return Load(**vals, seed=args.seed, dataset=str(dataset).strip().lower())


#: The longest ``--server-timeout`` and ``--bench-timeout`` the command takes, in seconds.
MAX_TIMEOUT_S = 3600


def check_timeouts(args) -> None:
    """``--server-timeout`` and ``--bench-timeout`` of the parsed command ``args``: seconds in (0,
    :data:`MAX_TIMEOUT_S`]. Raises :class:`UserInputError` naming the first that is not."""
    for name in ("server_timeout", "bench_timeout"):
        v = getattr(args, name)
        if not (math.isfinite(v) and 0 < v <= MAX_TIMEOUT_S):
            raise UserInputError(f"--{name.replace('_', '-')} {v!r} is not accepted; accepted: seconds in (0, "
                                 f"{MAX_TIMEOUT_S}]")


def _check_arguments(args) -> tuple:
    """Every argument of the command, one line each (:class:`UserInputError`), before the GPU is looked for."""
    from ..launch.engine import check_model_dir, check_tp
    from ..launch.specs import normalize_backends
    from ..layouts import check_kv_cache_dtype

    model = check_model_dir(args.model)
    args.kv_cache_dtype = check_kv_cache_dtype(args.kv_cache_dtype)   # before the backend names (imports vLLM)
    names = [b for b in str(args.backends).split(",") if b.strip()]
    if not names:
        raise UserInputError(f"--backends {args.backends!r} names no backend; accepted: e.g. {','.join(DEFAULT_RUNS)}")
    runs = normalize_backends(names)
    spec_cfg = speculative_request(args.speculative, args.speculative_config, model)
    load = asked_load(args, spec_cfg)
    check_timeouts(args)
    check_tp(model, args.tp)
    cfg = text_config(read_json(model / "config.json"))   # check_model_dir held its dimensions (models.check_config)
    mpe = cfg.get("max_position_embeddings")
    server_max_model_len(cfg["index_topk"], load.output_len,
                         int((spec_cfg or {}).get("num_speculative_tokens") or 0), mpe)
    return model, runs, load, spec_cfg


def cli_run(args, record_place) -> int:
    """Check every argument (one line each), then the GPU and the record's place (``record_place(args)``), then
    run; print one line per run, the verdict and the failures. Returns 1 if anything failed (the record is written
    with its ``failures``), else 0."""
    import shutil

    model, runs, load, spec_cfg = _check_arguments(args)
    out_dir, tag = record_place(args)   # needs the GPU (its name is the record's)
    if shutil.which("vllm") is None:
        raise UserInputError("no `vllm` command on PATH; accepted: an environment where `vllm serve` runs (the "
                             "README's set-up installs vLLM 0.26.0 and its `vllm` command into .venv/bin)")
    rec = bench_serve(model, runs, load, out_dir=out_dir, tag=tag, kv_cache_dtype=args.kv_cache_dtype, tp=args.tp,
                      cuda_graphs=not args.eager, speculative_config=spec_cfg,
                      server_timeout_s=args.server_timeout, bench_timeout_s=args.bench_timeout)
    for r in csv_rows(rec):
        print(run_line(r))
    print("verdict (" + ranking.RULE + "):")
    for line in rec["verdict"]["lines"]:
        print("  " + line)
    for f in rec["failures"]:
        print(f"failure: {f}")
    print(f"record: {out_dir / f'bench_serve_{tag}.json'} (+ .csv, .png; per run vLLM's result files and logs)")
    return 1 if rec["failures"] else 0


def run_line(r: dict) -> str:
    """One printed line for a CSV row: medians over repeats with their ranges, agreement and acceptance."""
    def rng(k, unit=""):
        if r[f"{k}_median"] is None:
            return "-"
        return f"{r[f'{k}_median']:.4g}{unit} [{r[f'{k}_min']:.4g}..{r[f'{k}_max']:.4g}]"

    acc = r["spec_decode_acceptance_rate_median"]
    return (f"{r['run']:<40} {rng('output_throughput')} tok/s  TTFT {rng('median_ttft_ms', ' ms')}  TPOT "
            f"{rng('median_tpot_ms', ' ms')}  ITL {rng('median_itl_ms', ' ms')}  repeats {r['repeats_with_result']}  "
            f"same as baseline {r['identical_vs_baseline'] or '-'}  across repeats "
            f"{r['identical_across_repeats'] or '-'}  as plain {r['identical_vs_plain'] or '-'}  acceptance "
            + ("-" if acc is None else f"{acc:.1f}%") + (f"  error: {r['error']}" if r["error"] else ""))
