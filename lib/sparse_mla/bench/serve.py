"""``sparse-mla bench serve``: the engine as a vLLM user meets it -- ``vllm serve`` per run spec, a bounded seeded
load through the ``openai`` client, repeated, with the greedy outputs compared across backends.

For each run spec (``BACKEND`` or ``BACKEND+TRITON_DSA_INDEXER``, :mod:`sparse_mla.launch.specs`), one after the
other, one server at a time: ``vllm serve`` on 127.0.0.1 at a free port (:func:`sparse_mla.launch.engine.serve_command`
and :func:`sparse_mla.launch.server.served`: bounded wait for ``/health``, stdout/stderr in a log file next to the
record, the server's process group always stopped), then

* **warm-up**: every prompt of the load once with :data:`WARMUP_TOKENS` new tokens (Triton and DeepGEMM compile their
  kernels for new shapes on first use; that must not land in the measured TTFT);
* **load**, ``repeats`` times: ``num_requests`` completions of seeded token-id prompts (:func:`make_prompts`: half
  shorter than the checkpoint's ``index_topk``, where sparse attention equals dense attention, half longer, where the
  indexer selects), at most ``concurrency`` in flight, greedy, ``max_tokens`` new tokens each (``ignore_eos``),
  streamed (``stream=True``, ``return_token_ids``). Prefix caching is off (``--no-enable-prefix-caching``) so that
  the repeats are the same work.

Per repeat, as vLLM's own ``vllm bench serve`` defines them (``vllm/benchmarks/serve.py`` ``calculate_metrics``):
output tokens/s = generated tokens / wall time from the first request sent to the last one finished; TTFT = time from
sending a request to its first streamed token; TPOT = (latency - TTFT) / (output tokens - 1). Reported per run:
the median over repeats with min and max, plus the inter-quartile range over all requests (:func:`spread`).

Greedy agreement: each request's tokens against the first run's (the baseline, ours by default) and against the same
run's first repeat (the noise floor: batch composition differs between repeats, and random weights make near-ties).
With ``speculative_config`` (e.g. ``{"method": "mtp", "num_speculative_tokens": 1}``, checkpoint from
``make-checkpoint --mtp``) every run spec is served a second time with it: per request its greedy tokens against
the run without speculation, the acceptance rate and mean acceptance length from the server's Prometheus counters
(:data:`SPEC_COUNTERS`, read before and after the measured load), and the speed.

Record: ``bench_serve_<tag>.{json,csv,png}`` plus one ``bench_serve_<tag>_<run>.log`` per server, all in ``out_dir``
and nothing elsewhere; the JSON and CSV are rewritten after every server (``"complete": false`` until the end), so an
interrupted session keeps what it measured.
"""
from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..files import atomic_write, atomic_write_text, read_json
from ..models import text_config
from ..errors import UserInputError

DEFAULT_RUNS = ("TRITON_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE")
DEFAULTS = {"num_requests": 96, "concurrency": 32, "repeats": 2, "max_tokens": 48}
QUICK = {"num_requests": 48, "repeats": 1}
WARMUP_TOKENS = 2
#: vLLM 0.26's spec-decode counters (``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm``, lines 229-231 and 255);
#: Prometheus exposes each with a ``_total`` suffix, the per-position one with a ``position`` label.
SPEC_COUNTERS = {"drafts": "vllm:spec_decode_num_drafts", "draft_tokens": "vllm:spec_decode_num_draft_tokens",
                 "accepted_tokens": "vllm:spec_decode_num_accepted_tokens"}
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
#: Extra ``vllm serve`` options: repeats are the same work without prefix caching; no access-log line per request.
SERVER_EXTRA = ("--no-enable-prefix-caching", "--disable-uvicorn-access-log")
LIMITS = {"num_requests": (1, 4096), "concurrency": (1, 1024), "repeats": (1, 20), "max_tokens": (2, 1024),
          "seed": (0, 2**31 - 1)}


# ------------------------------------------------------------------------------------------------ the load
@dataclass(frozen=True)
class Load:
    """The bounded load one server gets: ``num_requests`` completions, at most ``concurrency`` in flight, ``repeats``
    times, ``max_tokens`` greedy tokens each, prompts from ``seed``."""

    num_requests: int = DEFAULTS["num_requests"]
    concurrency: int = DEFAULTS["concurrency"]
    repeats: int = DEFAULTS["repeats"]
    max_tokens: int = DEFAULTS["max_tokens"]
    seed: int = 0

    def __post_init__(self):
        for k, (lo, hi) in LIMITS.items():
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise UserInputError(f"--{k.replace('_', '-')} {v!r} is not accepted; accepted: an integer from {lo} "
                                     f"to {hi}")


def prompt_length_ranges(index_topk: int) -> dict[str, tuple[int, int]]:
    """Inclusive prompt-length ranges in tokens: ``short`` within ``index_topk`` (every causal token selected),
    ``long`` beyond it (the indexer selects ``index_topk`` of them): ``[topk/4, 3 topk/4]`` and
    ``[5 topk/4, 2 topk]``."""
    return {"short": (max(8, index_topk // 4), index_topk * 3 // 4), "long": (index_topk * 5 // 4, index_topk * 2)}


def make_prompts(n: int, index_topk: int, vocab_size: int, seed: int = 0) -> list[dict]:
    """``n`` seeded token-id prompts, half short and half long (:func:`prompt_length_ranges`) in a seeded order,
    token ids uniform in ``[2, vocab_size)`` (0 and 1 are the tiny checkpoint's eos and pad). Same arguments ->
    same prompts. Each: ``{"index", "kind", "prompt_len", "token_ids"}``."""
    rng = random.Random(f"sparse-mla bench serve {seed}")
    ranges = prompt_length_ranges(index_topk)
    kinds = ["short", "long"] * (n // 2) + ["short"] * (n % 2)
    rng.shuffle(kinds)
    out = []
    for i, kind in enumerate(kinds):
        length = rng.randint(*ranges[kind])
        out.append({"index": i, "kind": kind, "prompt_len": length,
                    "token_ids": [rng.randrange(2, vocab_size) for _ in range(length)]})
    return out


def spread(values) -> dict | None:
    """``{"median", "min", "max", "q1", "q3", "n"}`` of finite ``values`` (quartiles as ``numpy.percentile``'s
    linear interpolation, as ``vllm bench serve``); ``None`` when there are none."""
    import numpy as np

    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not v.size:
        return None
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {"median": float(med), "min": float(v.min()), "max": float(v.max()), "q1": float(q1), "q3": float(q3),
            "n": int(v.size)}


# ------------------------------------------------------------------------------------------------ the client
@dataclass
class RequestResult:
    """One streamed completion: its tokens and times (seconds, ``time.perf_counter``)."""

    index: int
    kind: str
    prompt_len: int
    token_ids: list[int] = field(default_factory=list)
    start: float = 0.0
    ttft_s: float | None = None
    latency_s: float | None = None
    usage_tokens: int | None = None
    error: str | None = None

    @property
    def tpot_s(self) -> float | None:
        n = len(self.token_ids)
        return (self.latency_s - self.ttft_s) / (n - 1) if self.error is None and n > 1 else None


async def _one(client, model: str, prompt: dict, max_tokens: int, sem: asyncio.Semaphore) -> RequestResult:
    res = RequestResult(prompt["index"], prompt["kind"], prompt["prompt_len"])
    async with sem:
        res.start = time.perf_counter()
        try:
            stream = await client.completions.create(
                model=model, prompt=prompt["token_ids"], max_tokens=max_tokens, temperature=0.0, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True, "return_token_ids": True})
            async for chunk in stream:
                for ch in chunk.choices or ():
                    ids = getattr(ch, "token_ids", None) or []
                    if ids and res.ttft_s is None:
                        res.ttft_s = time.perf_counter() - res.start
                    res.token_ids.extend(int(t) for t in ids)
                if getattr(chunk, "usage", None) is not None:
                    res.usage_tokens = chunk.usage.completion_tokens
            res.latency_s = time.perf_counter() - res.start
            if res.ttft_s is None:
                res.error = "no token in the stream"
            elif res.usage_tokens is not None and res.usage_tokens != len(res.token_ids):
                res.error = f"usage says {res.usage_tokens} tokens, the stream carried {len(res.token_ids)}"
        except Exception as e:  # noqa: BLE001  (connection, HTTP status, timeout: recorded per request)
            res.error = f"{type(e).__name__}: {str(e)[:200]}"
    return res


async def _load(base_url: str, prompts: list[dict], concurrency: int, max_tokens: int, request_timeout_s: float,
                model: str) -> tuple[list[RequestResult], float]:
    import openai

    sem = asyncio.Semaphore(concurrency)
    async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="none", timeout=request_timeout_s,
                                  max_retries=0) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_one(client, model, p, max_tokens, sem) for p in prompts))
        return list(results), time.perf_counter() - t0


def run_load(base_url: str, prompts: list[dict], concurrency: int, max_tokens: int, *, model: str = "glm5",
             request_timeout_s: float = 120.0, load_timeout_s: float = 600.0) -> tuple[list[RequestResult], float]:
    """Send ``prompts`` to ``base_url`` (an OpenAI-compatible server, ``/v1/completions`` with SSE streaming), at most
    ``concurrency`` at a time; returns the per-request results (in prompt order) and the wall time in seconds from
    the first request sent to the last one finished. Bounded: ``request_timeout_s`` per request (recorded as that
    request's error), ``load_timeout_s`` for the whole load (raises :class:`TimeoutError`)."""
    coro = asyncio.wait_for(_load(base_url, prompts, concurrency, max_tokens, request_timeout_s, model),
                            load_timeout_s)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures   # called from a running loop (a notebook): run it on a thread of its own

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def repeat_stats(results: list[RequestResult], duration_s: float) -> dict:
    """One repeat: requests, errors, output tokens and tokens/s, and :func:`spread` of TTFT, TPOT and latency (ms)."""
    ok = [r for r in results if r.error is None]
    tokens = sum(len(r.token_ids) for r in ok)
    return {"requests": len(results), "errors": len(results) - len(ok),
            "first_errors": sorted({r.error for r in results if r.error})[:3], "duration_s": round(duration_s, 4),
            "output_tokens": tokens, "output_tokens_per_s": tokens / duration_s if duration_s > 0 else None,
            "ttft_ms": spread(r.ttft_s * 1e3 for r in ok), "tpot_ms": spread(r.tpot_s * 1e3 for r in ok
                                                                             if r.tpot_s is not None),
            "latency_ms": spread(r.latency_s * 1e3 for r in ok)}


def summarize(repeats: list[dict], pooled: list[RequestResult]) -> dict:
    """Across repeats: :func:`spread` of tokens/s and of the per-repeat TTFT/TPOT medians; over all requests of all
    repeats: TTFT/TPOT spreads (their ``q1``/``q3`` are the inter-quartile range)."""
    med = lambda rep, k: (rep[k] or {}).get("median")  # noqa: E731
    ok = [r for r in pooled if r.error is None]
    return {"output_tokens_per_s": spread(r["output_tokens_per_s"] for r in repeats),
            "ttft_ms_median": spread(med(r, "ttft_ms") for r in repeats),
            "tpot_ms_median": spread(med(r, "tpot_ms") for r in repeats),
            "ttft_ms_all": spread(r.ttft_s * 1e3 for r in ok),
            "tpot_ms_all": spread(r.tpot_s * 1e3 for r in ok if r.tpot_s is not None),
            "errors": sum(r["errors"] for r in repeats)}


def agreement(a: list[list[int] | None], b: list[list[int] | None]) -> dict:
    """Per request (same index): identical greedy tokens, else the first position where they part; requests that
    failed in either run count as ``compared: False``."""
    per = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x is None or y is None:
            per.append({"index": i, "compared": False})
            continue
        n = next((j for j, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        per.append({"index": i, "compared": True, "identical": x == y, "first_divergence": None if x == y else n})
    cmp = [p for p in per if p["compared"]]
    div = sorted(p["first_divergence"] for p in cmp if not p["identical"])
    return {"compared": len(cmp), "identical": sum(p["identical"] for p in cmp),
            "first_divergence_min": div[0] if div else None,
            "first_divergence_median": div[len(div) // 2] if div else None, "per_request": per}


# ------------------------------------------------------------------------------------------------ metrics
def spec_decode_counters(metrics_text: str) -> dict | None:
    """vLLM's spec-decode counters (:data:`SPEC_COUNTERS`, summed over engines) from a Prometheus ``/metrics`` text,
    plus ``accepted_per_pos``; ``None`` when the server exports none (no speculative decoding)."""
    from prometheus_client.parser import text_string_to_metric_families

    names = {v: k for k, v in SPEC_COUNTERS.items()}
    out: dict = {}
    per_pos: dict[int, float] = {}
    for fam in text_string_to_metric_families(metrics_text):
        for s in fam.samples:
            base = s.name.removesuffix("_total")
            if not s.name.endswith("_total"):
                continue
            if base in names:
                out[names[base]] = out.get(names[base], 0.0) + s.value
            elif base == SPEC_PER_POS:
                pos = int(s.labels.get("position", 0))
                per_pos[pos] = per_pos.get(pos, 0.0) + s.value
    if not out:
        return None
    return {**{k: out.get(k, 0.0) for k in SPEC_COUNTERS}, "accepted_per_pos": dict(sorted(per_pos.items()))}


def acceptance(before: dict | None, after: dict | None) -> dict | None:
    """The counters' increase over the measured load: acceptance rate (accepted / draft tokens, vLLM's PromQL in
    ``SpecDecodingProm``'s docstring), mean acceptance length (1 + accepted / drafts) and per-position rates."""
    if after is None:
        return None
    before = before or {k: 0.0 for k in SPEC_COUNTERS} | {"accepted_per_pos": {}}
    d = {k: after[k] - before.get(k, 0.0) for k in SPEC_COUNTERS}
    pos = {p: v - before["accepted_per_pos"].get(p, 0.0) for p, v in after["accepted_per_pos"].items()}
    return {**d, "acceptance_rate": d["accepted_tokens"] / d["draft_tokens"] if d["draft_tokens"] else None,
            "mean_acceptance_length": 1 + d["accepted_tokens"] / d["drafts"] if d["drafts"] else None,
            "acceptance_rate_per_pos": {p: v / d["drafts"] for p, v in pos.items()} if d["drafts"] else None}


def read_metrics(base_url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as r:
        return r.read().decode("utf-8", "replace")


def _counters(base_url: str) -> dict | None:
    try:
        return spec_decode_counters(read_metrics(base_url))
    except (OSError, ValueError):   # no /metrics, or a text the parser refuses: the run's timings still count
        return None


# ------------------------------------------------------------------------------------------------ one server
def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def serve_and_measure(model: Path, key: str, spec, prompts: list[dict], load: Load, log_path: Path, *,
                      speculative_config: dict | None = None, server_timeout_s: float = 300.0,
                      request_timeout_s: float = 120.0, load_timeout_s: float = 600.0, **server_kw) -> dict:
    """One ``vllm serve`` for ``spec`` (``server_kw``: :func:`sparse_mla.launch.engine.serve_command` options):
    warm-up, ``load.repeats`` measured loads, spec-decode counters; the server is stopped before this returns or
    raises. A server that fails to start is recorded as ``error`` with the log's tail; Ctrl-C propagates."""
    from ..launch.engine import SERVED_NAME, serve_command, server_env
    from ..launch.server import ServerError, free_port, served

    port = free_port()
    cmd = serve_command(model, spec, port, speculative_config=speculative_config, max_num_seqs=load.concurrency,
                        extra=SERVER_EXTRA, **server_kw)
    run = {**spec.describe(), "run": key, "run_spec": spec.name,
           "kv_cache_dtype": server_kw.get("kv_cache_dtype", "auto"), "speculative_config": speculative_config,
           "cuda_graphs": not server_kw.get("enforce_eager", True), "command": cmd, "log": log_path.name}
    t0 = time.time()
    kw = dict(model=SERVED_NAME, request_timeout_s=request_timeout_s, load_timeout_s=load_timeout_s)
    try:
        with served(cmd, server_env(spec), log_path, port, server_timeout_s) as srv:
            run["server_up_s"] = srv.up_s
            warm, wdur = run_load(srv.base_url, prompts, load.concurrency, WARMUP_TOKENS, **kw)
            run["warmup"] = {"requests": len(warm), "max_tokens": WARMUP_TOKENS, "duration_s": round(wdur, 3),
                             "errors": sum(r.error is not None for r in warm)}
            before = _counters(srv.base_url)
            repeats, pooled, tokens = [], [], []
            for _ in range(load.repeats):
                res, dur = run_load(srv.base_url, prompts, load.concurrency, load.max_tokens, **kw)
                repeats.append(repeat_stats(res, dur))
                pooled += res
                tokens.append([r.token_ids if r.error is None else None for r in res])
            after = _counters(srv.base_url)
    except (ServerError, TimeoutError, OSError) as e:
        return {**run, "error": f"{type(e).__name__}: {e}", "log_tail": _tail(log_path),
                "wall_s": round(time.time() - t0, 1)}
    run.update(repeats=repeats, summary=summarize(repeats, pooled), spec_decode=acceptance(before, after),
               token_ids=tokens[0], wall_s=round(time.time() - t0, 1),
               self_agreement=[{k: v for k, v in agreement(tokens[0], t).items() if k != "per_request"}
                               for t in tokens[1:]])
    if run["summary"]["errors"] or run["warmup"]["errors"]:
        run["log_tail"] = _tail(log_path)
    return run


# ------------------------------------------------------------------------------------------------ the session
def server_max_model_len(index_topk: int, max_tokens: int, spec_tokens: int = 0,
                         max_position_embeddings: int | None = None) -> int:
    """``--max-model-len`` for the load: at least the engines' usual 4096, enough for the longest prompt plus its
    new (and speculative) tokens, in steps of 1024. Raises :class:`UserInputError` past the model's
    ``max_position_embeddings``."""
    from ..launch.engine import MAX_MODEL_LEN

    need = prompt_length_ranges(index_topk)["long"][1] + max_tokens + spec_tokens + 8
    n = max(MAX_MODEL_LEN, -(-need // 1024) * 1024)
    if max_position_embeddings and n > max_position_embeddings:
        if need > max_position_embeddings:
            spec = f" + {spec_tokens} speculative tokens" if spec_tokens else ""
            raise UserInputError(f"the load's longest prompt ({prompt_length_ranges(index_topk)['long'][1]} tokens, "
                                 f"2 x index_topk {index_topk}) + {max_tokens} new tokens{spec} exceeds the model's "
                                 f"max_position_embeddings {max_position_embeddings}; accepted: fewer --max-tokens"
                                 f"{' or num_speculative_tokens' if spec else ''} or a checkpoint with a smaller "
                                 f"index_topk")
        n = max_position_embeddings
    return n


def plan_runs(runs, speculative_config: dict | None) -> list[tuple[str, str, dict | None]]:
    """``(record key, run spec, speculative config)`` per server: every run spec, each followed by itself with
    ``speculative_config`` (key ``SPEC+<method>``) when one is given."""
    method = str((speculative_config or {}).get("method") or "spec")
    out = []
    for name in runs:
        out.append((name, name, None))
        if speculative_config:
            out.append((f"{name}+{method}", name, speculative_config))
    return out


def bench_serve(model, runs=DEFAULT_RUNS, load: Load | None = None, *, out_dir, tag: str,
                kv_cache_dtype: str = "auto", tp: int = 1, cuda_graphs: bool = True,
                speculative_config: dict | str | None = None, server_timeout_s: float = 300.0,
                request_timeout_s: float = 120.0, gpu_memory_utilization: float = 0.35) -> dict:
    """The whole session (see the module docstring): every planned server in turn, the record rewritten after each;
    returns the record. ``runs``: run specs (``BACKEND`` or ``BACKEND+TRITON_DSA_INDEXER``), the first is the
    agreement baseline. Needs a ``vllm`` command on ``PATH`` (a GPU for real numbers; nothing here checks for one, so
    that the whole path can be exercised against a stand-in server)."""
    from ..launch.engine import check_model_dir, check_tp
    from ..layouts import check_kv_cache_dtype
    from ..launch.specs import check_speculative_config, normalize_backends, parse_run_spec

    load = load or Load()
    model = check_model_dir(model).resolve()
    kv_cache_dtype = check_kv_cache_dtype(kv_cache_dtype)      # before the backend names, whose check imports vLLM's backends
    runs = normalize_backends(runs)
    tp = check_tp(model, tp)
    speculative_config = check_speculative_config(speculative_config, model)
    cfg = read_json(model / "config.json")
    cfg = text_config(cfg)
    spec_tokens = int((speculative_config or {}).get("num_speculative_tokens") or 0)
    max_model_len = server_max_model_len(cfg["index_topk"], load.max_tokens, spec_tokens,
                                         cfg.get("max_position_embeddings"))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)   # the servers' logs go there from the first run
    prompts = make_prompts(load.num_requests, cfg["index_topk"], int(cfg.get("vocab_size", 2048)), load.seed)
    from ..records import environment
    from ..launch.specs import with_simulated

    server_kw = dict(kv_cache_dtype=kv_cache_dtype, tp=tp, enforce_eager=not cuda_graphs,
                     max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization)
    rec = with_simulated({
        "what": "vllm serve per run spec, one at a time; bounded seeded load through the openai client",
        "environment": environment(), "complete": False,
        "model": {"path": model.name, **{k: cfg.get(k) for k in ("index_topk", "num_attention_heads",
                                                                  "num_hidden_layers", "num_nextn_predict_layers",
                                                                  "vocab_size")}},
        "load": {**load.__dict__, "prompt_lengths": prompt_length_ranges(cfg["index_topk"]),
                 "prompt_kinds": {k: sum(p["kind"] == k for p in prompts) for k in ("short", "long")},
                 "prompt_tokens": sum(p["prompt_len"] for p in prompts), "greedy": True, "ignore_eos": True,
                 "warmup_tokens": WARMUP_TOKENS, "request_timeout_s": request_timeout_s},
        "server": {**server_kw, "cuda_graphs": cuda_graphs, "max_num_seqs": load.concurrency,
                   "prefix_caching": False, "server_timeout_s": server_timeout_s},
        "speculative_config": speculative_config, "runs": {}})
    t0 = time.time()
    plan = plan_runs(runs, speculative_config)
    for i, (key, name, scfg) in enumerate(plan):
        log = out_dir / f"bench_serve_{tag}_{_safe(key)}.log"
        print(f"[bench serve {i + 1}/{len(plan)}] {key}: vllm serve, log {log.name}", flush=True)
        r = rec["runs"][key] = serve_and_measure(model, key, parse_run_spec(name), prompts, load, log,
                                                 speculative_config=scfg, server_timeout_s=server_timeout_s,
                                                 request_timeout_s=request_timeout_s, **server_kw)
        rec.update(compare_runs(rec["runs"], runs[0]), wall_s=round(time.time() - t0, 1))
        write_record(rec, out_dir, tag)
        tps = ((r.get("summary") or {}).get("output_tokens_per_s") or {}).get("median")
        print(f"[bench serve {i + 1}/{len(plan)}] {key}: " + (r["error"] if "error" in r else
              f"up in {r['server_up_s']} s, {tps:.1f} tokens/s (median), {r['wall_s']} s in all"
              if tps is not None else "no request finished"), flush=True)
    rec["complete"] = True
    write_record(rec, out_dir, tag)
    return rec


def compare_runs(runs: dict, baseline: str) -> dict:
    """Greedy agreement of every plain run with ``baseline``'s, and of every speculative run with its plain run
    (plus its acceptance and its tokens/s over the plain run's)."""
    ok = {k: v for k, v in runs.items() if "error" not in v}
    vs_base, vs_plain = {}, {}
    for k, v in ok.items():
        plain = v["run_spec"] if v.get("speculative_config") else None
        if plain is None and k != baseline and baseline in ok:
            vs_base[k] = {"baseline": baseline, **agreement(ok[baseline]["token_ids"], v["token_ids"])}
        if plain is not None and plain in ok:
            a, b = (ok[plain]["summary"]["output_tokens_per_s"] or {}), (v["summary"]["output_tokens_per_s"] or {})
            vs_plain[k] = {"plain": plain, **agreement(ok[plain]["token_ids"], v["token_ids"]),
                           "acceptance_rate": (v.get("spec_decode") or {}).get("acceptance_rate"),
                           "tokens_per_s_ratio": b["median"] / a["median"] if a.get("median") and b.get("median")
                           else None}
    return {"agreement_vs_baseline": vs_base, "speculative_vs_plain": vs_plain}


# ------------------------------------------------------------------------------------------------ the record
CSV_COLUMNS = ("run", "backend_requested", "indexer", "kv_cache_dtype", "speculative", "cuda_graphs", "server_up_s",
               "errors", "tokens_per_s_median", "tokens_per_s_min", "tokens_per_s_max", "ttft_ms_median",
               "ttft_ms_min", "ttft_ms_max", "ttft_ms_q1_all", "ttft_ms_q3_all", "tpot_ms_median", "tpot_ms_min",
               "tpot_ms_max", "tpot_ms_q1_all", "tpot_ms_q3_all", "identical_vs_baseline", "identical_vs_plain",
               "identical_across_repeats", "acceptance_rate", "mean_acceptance_length", "log", "error")


def csv_rows(rec: dict) -> list[dict]:
    """One row per run: the summary numbers the plot shows, agreement counts as ``k/n``."""
    rows = []
    for key, r in rec["runs"].items():
        s = r.get("summary") or {}
        g = lambda k, f: (s.get(k) or {}).get(f)  # noqa: E731
        frac = lambda a: f"{a['identical']}/{a['compared']}" if a else None  # noqa: E731
        self_ = r.get("self_agreement") or []
        sd = r.get("spec_decode") or {}
        rows.append({"run": key, "backend_requested": r.get("backend_requested"), "indexer": r.get("indexer"),
                     "kv_cache_dtype": r.get("kv_cache_dtype"),
                     "speculative": json.dumps(r["speculative_config"]) if r.get("speculative_config") else "",
                     "cuda_graphs": r.get("cuda_graphs"), "server_up_s": r.get("server_up_s"),
                     "errors": s.get("errors"),
                     **{f"tokens_per_s_{f}": g("output_tokens_per_s", f) for f in ("median", "min", "max")},
                     **{f"ttft_ms_{f}": g("ttft_ms_median", f) for f in ("median", "min", "max")},
                     "ttft_ms_q1_all": g("ttft_ms_all", "q1"), "ttft_ms_q3_all": g("ttft_ms_all", "q3"),
                     **{f"tpot_ms_{f}": g("tpot_ms_median", f) for f in ("median", "min", "max")},
                     "tpot_ms_q1_all": g("tpot_ms_all", "q1"), "tpot_ms_q3_all": g("tpot_ms_all", "q3"),
                     "identical_vs_baseline": frac(rec.get("agreement_vs_baseline", {}).get(key)),
                     "identical_vs_plain": frac(rec.get("speculative_vs_plain", {}).get(key)),
                     "identical_across_repeats": ";".join(frac(a) for a in self_) or None,
                     "acceptance_rate": sd.get("acceptance_rate"),
                     "mean_acceptance_length": sd.get("mean_acceptance_length"), "log": r.get("log"),
                     "error": r.get("error")})
    return rows


def write_record(rec: dict, out_dir: Path, tag: str) -> dict[str, Path]:
    """``bench_serve_<tag>.json``, ``.csv`` and ``.png`` in ``out_dir``, each written atomically."""
    import csv
    import io

    paths = {ext: out_dir / f"bench_serve_{tag}.{ext}" for ext in ("json", "csv", "png")}
    atomic_write_text(paths["json"], json.dumps(rec, indent=1, default=str))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(csv_rows(rec))
    atomic_write_text(paths["csv"], buf.getvalue())
    plot(rec, paths["png"])
    return paths


def plot(rec: dict, path: Path) -> None:
    """Tokens/s, TTFT and TPOT per run: bar = median over repeats, whiskers = min..max over repeats (a
    ``matplotlib.figure.Figure``, no pyplot state)."""
    from matplotlib.figure import Figure

    rows = [r for r in csv_rows(rec) if r["tokens_per_s_median"] is not None]
    fig = Figure(figsize=(4.4 * 3, 5.2), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (k, label) in zip(axes, (("tokens_per_s", "output tokens/s"), ("ttft_ms", "TTFT median (ms)"),
                                     ("tpot_ms", "TPOT median (ms)"))):
        if not rows:
            ax.text(0.5, 0.5, "no run finished", ha="center", va="center", transform=ax.transAxes)
            continue
        med = [r[f"{k}_median"] or 0.0 for r in rows]
        err = [[m - (r[f"{k}_min"] or m) for m, r in zip(med, rows)], [(r[f"{k}_max"] or m) - m
                                                                       for m, r in zip(med, rows)]]
        colors = ["tab:orange" if r["backend_requested"] == "TRITON_MLA_SPARSE" else "tab:blue" for r in rows]
        bars = ax.bar(range(len(rows)), med, yerr=err, capsize=4, color=colors,
                      hatch=None, edgecolor="black", linewidth=0.5)
        for b, r in zip(bars, rows):
            if r["speculative"]:
                b.set_hatch("//")
        ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=2)
        ax.set_xticks(range(len(rows)), [r["run"] for r in rows], fontsize=7, rotation=35, ha="right",
                      rotation_mode="anchor")
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    env, ld = rec.get("environment", {}), rec.get("load", {})
    fig.suptitle(f"vllm serve, {env.get('gpu', 'no GPU')}; {ld.get('num_requests')} requests x {ld.get('repeats')} "
                 f"repeats, concurrency {ld.get('concurrency')}, {ld.get('max_tokens')} tokens, index_topk "
                 f"{rec.get('model', {}).get('index_topk')}; whiskers: min..max over repeats; hatched: speculative; "
                 f"vllm {env.get('vllm')}, {str(env.get('date', ''))[:10]}", fontsize=8)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))


# ------------------------------------------------------------------------------------------------ command line
def add_arguments(p) -> None:
    """``sparse-mla bench serve``'s own arguments (``--tag``/``--out-dir`` come from ``bench.cli``)."""
    p.add_argument("--model", required=True, help="checkpoint directory (sparse-mla make-checkpoint; --mtp for MTP)")
    p.add_argument("--backends", default=",".join(DEFAULT_RUNS),
                   help="comma-separated run specs, BACKEND or BACKEND+TRITON_DSA_INDEXER; the first is the "
                        "agreement baseline (default: %(default)s)")
    for k in ("num_requests", "concurrency", "repeats", "max_tokens"):
        quick = f", --quick: {QUICK[k]}" if k in QUICK else ""
        p.add_argument(f"--{k.replace('_', '-')}", type=int, default=None,
                       help=f"default {DEFAULTS[k]}{quick}")
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default 0)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK['num_requests']} requests, {QUICK['repeats']} repeat")
    p.add_argument("--eager", action="store_true", help="--enforce-eager (default: CUDA graphs, vLLM's default)")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--speculative-config", default=None, metavar="JSON",
                   help="also serve every run spec with this (e.g. '{\"method\": \"mtp\", \"num_speculative_tokens\": "
                        "1}', needs make-checkpoint --mtp)")
    p.add_argument("--server-timeout", type=float, default=300.0, help="seconds a server may take to be ready")
    p.add_argument("--request-timeout", type=float, default=120.0, help="seconds per request")


def cli_run(args, record_place) -> int:
    """Check every argument (one line each), then the GPU and the record's place (``record_place(args)``), then run
    and print one line per run."""
    import shutil

    from ..launch.engine import check_model_dir, check_tp
    from ..launch.specs import MTP_EXAMPLE, check_speculative_config, normalize_backends
    from ..layouts import check_kv_cache_dtype

    model = check_model_dir(args.model)
    args.kv_cache_dtype = check_kv_cache_dtype(args.kv_cache_dtype)      # before the backend names, whose check imports vLLM's backends
    names = [b for b in str(args.backends).split(",") if b.strip()]
    if not names:
        raise UserInputError(f"--backends {args.backends!r} names no backend; accepted: e.g. {','.join(DEFAULT_RUNS)}")
    runs = normalize_backends(names)
    vals = {k: getattr(args, k) if getattr(args, k) is not None else (QUICK.get(k) if args.quick else None)
            or DEFAULTS[k] for k in DEFAULTS}
    load = Load(**vals, seed=args.seed)
    for name in ("server_timeout", "request_timeout"):
        v = getattr(args, name)
        if not (math.isfinite(v) and 0 < v <= 3600):
            raise UserInputError(f"--{name.replace('_', '-')} {v!r} is not accepted; accepted: seconds in (0, 3600]")
    spec_cfg = check_speculative_config(args.speculative_config, model)
    check_tp(model, args.tp)
    cfg = read_json(model / "config.json")
    cfg = text_config(cfg)
    spec_tokens = (spec_cfg or {}).get("num_speculative_tokens")
    if spec_tokens is not None and (isinstance(spec_tokens, bool) or not isinstance(spec_tokens, int) or spec_tokens < 1):
        raise UserInputError(f"--speculative-config num_speculative_tokens {spec_tokens!r} is not accepted; accepted: "
                             f"a positive integer, e.g. '{MTP_EXAMPLE}'")
    mpe = cfg.get("max_position_embeddings")
    if mpe is not None and (isinstance(mpe, bool) or not isinstance(mpe, int) or mpe < 1):
        raise UserInputError(f"{str(model / 'config.json')!r} has max_position_embeddings = {mpe!r}; accepted: a "
                             f"positive integer (or no such key)")
    server_max_model_len(cfg["index_topk"], load.max_tokens, spec_tokens or 0, mpe)
    out_dir, tag = record_place(args)   # needs the GPU (its name is the record's)
    if shutil.which("vllm") is None:
        raise UserInputError("no `vllm` command on PATH; accepted: an environment where `vllm serve` runs (the "
                             "README's set-up installs vLLM 0.26.0 and its `vllm` command into .venv/bin)")
    rec = bench_serve(model, runs, load, out_dir=out_dir, tag=tag, kv_cache_dtype=args.kv_cache_dtype, tp=args.tp,
                      cuda_graphs=not args.eager, speculative_config=spec_cfg,
                      server_timeout_s=args.server_timeout, request_timeout_s=args.request_timeout)
    for r in csv_rows(rec):
        if r["error"]:
            print(f"{r['run']:<45} error: {r['error']}")
            continue
        acc = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
        print(f"{r['run']:<45} {r['tokens_per_s_median'] or 0:9.1f} tok/s  TTFT {r['ttft_ms_median'] or 0:7.1f} ms  "
              f"TPOT {r['tpot_ms_median'] or 0:6.2f} ms  same as baseline {r['identical_vs_baseline'] or '-'}  "
              f"as plain {r['identical_vs_plain'] or '-'}  acceptance {acc}")
    print(f"record: {out_dir / f'bench_serve_{tag}.json'} (+ .csv, .png, bench_serve_{tag}_<run>.log)")
    return 0
