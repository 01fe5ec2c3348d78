"""``vllm bench serve`` as the serving benchmark's client: vLLM's own load generator, timing and metrics
(``vllm/benchmarks/serve.py`` in vLLM 0.26: ``main_async``, ``benchmark``, ``calculate_metrics``), one pass per call,
each pass a process of its own.

A pass is ``vllm bench serve ARGS`` as a user types it: vLLM's command-line entry point
(``vllm.entrypoints.cli.main.main``) with ``sys.argv = ["vllm", "bench", "serve", *ARGS]``, its stdout and stderr
appended to a log file, its exit status returned. The ``vllm`` on ``PATH`` is not used (the CPU tests put a stand-in
for ``vllm serve`` there). The process is forked from multiprocessing's *forkserver*, which imported vLLM's command
line once (:data:`CLI_MODULES`, ``set_forkserver_preload``): ``python -m vllm.entrypoints.cli.main bench serve`` spends
10-20 s importing vLLM before its first request (15-22 s measured on 2 CPU cores, 13 s of it imports), a forked pass
about 1 s in all -- the same code, arguments and exit status. A module of that list that fails to import costs only
the time (the pass imports what it needs). A pass that runs past its time limit, or is interrupted, is killed.

The result file (``--save-result --save-detailed``) is vLLM's, kept as it wrote it: :func:`read_result` loads it,
:func:`summary` drops its per-request arrays (:data:`DETAIL_KEYS`), :func:`text_agreement` compares two passes'
greedy outputs request by request.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

#: vLLM's command-line modules, imported once by the forkserver: the CLI's entry point imports the first group inside
#: ``main()``, ``vllm bench`` the second inside its parser (``vllm/entrypoints/cli/main.py``,
#: ``vllm/entrypoints/cli/benchmark/main.py`` ``_import_bench_subcommand_modules``).
CLI_MODULES = ("vllm.entrypoints.cli.main", "vllm.entrypoints.cli.openai", "vllm.entrypoints.cli.serve",
               "vllm.entrypoints.cli.launch", "vllm.entrypoints.cli.collect_env", "vllm.entrypoints.cli.run_batch",
               "vllm.entrypoints.serve.utils.api_utils", "vllm.entrypoints.cli.benchmark.main",
               "vllm.entrypoints.cli.benchmark.latency", "vllm.entrypoints.cli.benchmark.mm_processor",
               "vllm.entrypoints.cli.benchmark.serve", "vllm.entrypoints.cli.benchmark.startup",
               "vllm.entrypoints.cli.benchmark.sweep", "vllm.entrypoints.cli.benchmark.throughput",
               "vllm.benchmarks.serve")
#: The per-request fields of a result: the ones ``vllm bench serve`` itself drops without ``--save-detailed``
#: (``vllm/benchmarks/serve.py`` ``main_async``).
DETAIL_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")
#: The latency metrics asked of vLLM (``--percentile-metrics``) and their percentiles (``--metric-percentiles``).
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
PERCENTILES = "50,90,99"


def bench_argv(base_url: str, model: str | os.PathLike, served_name: str, dataset_args: list[str], *,
               num_prompts: int, max_concurrency: int, seed: int, result_path: str | os.PathLike,
               ready_timeout_s: float) -> list[str]:
    """The arguments of one ``vllm bench serve`` pass (after ``vllm bench serve``) against ``base_url``: the
    OpenAI completions endpoint, the model served as ``served_name``, the checkpoint's tokenizer, ``dataset_args``
    (e.g. ``--dataset-name random ...``),
    every request sent at once (``--request-rate inf``) with at most ``max_concurrency`` in flight, greedy
    (``--temperature 0``), ``--ignore-eos``, the result with its per-request fields written to ``result_path``."""
    result_path = Path(result_path)
    return ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", str(model),
            "--served-model-name", served_name, "--tokenizer", str(model), *dataset_args,
            "--num-prompts", str(num_prompts), "--max-concurrency", str(max_concurrency), "--request-rate", "inf",
            "--seed", str(seed), "--temperature", "0", "--ignore-eos", "--percentile-metrics", PERCENTILE_METRICS,
            "--metric-percentiles", PERCENTILES, "--save-result", "--save-detailed", "--result-dir",
            str(result_path.parent), "--result-filename", result_path.name,
            "--ready-check-timeout-sec", str(max(1, int(ready_timeout_s))), "--disable-tqdm"]


def _pass(argv: list[str], log_path: str, env: dict[str, str]) -> None:
    """The forked pass: stdout and stderr appended to ``log_path``, the caller's environment, vLLM's CLI."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["vllm", "bench", "serve", *argv]
    print(f"$ vllm bench serve {' '.join(argv)}", flush=True)
    from vllm.entrypoints.cli.main import main

    main()


def run_pass(argv: list[str], log_path: str | os.PathLike, timeout_s: float, env: dict | None = None) -> dict:
    """Run ``vllm bench serve argv`` (module docstring) with ``env`` (default: this process's environment), its
    output appended to ``log_path``; wait at most ``timeout_s`` seconds, then kill it. Returns ``{"exit_code",
    "seconds", "timed_out"}`` (a killed pass's exit code is ``-9``); a Ctrl-C here kills the pass and propagates."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(CLI_MODULES))   # read when the forkserver starts (the first pass)
    proc = ctx.Process(target=_pass, args=(list(argv), str(log_path), dict(os.environ if env is None else env)),
                       name="vllm bench serve", daemon=True)
    t0 = time.time()
    proc.start()
    try:
        proc.join(timeout_s)
    finally:
        timed_out = proc.exitcode is None
        if timed_out:
            proc.kill()
            proc.join()
    return {"exit_code": proc.exitcode, "seconds": round(time.time() - t0, 2), "timed_out": timed_out}


def read_result(path: str | os.PathLike) -> dict | None:
    """vLLM's result file of a pass; ``None`` where it wrote none (a pass that failed before its end) or where it
    is not a JSON object."""
    try:
        obj = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def summary(result: dict) -> dict:
    """vLLM's result without its per-request arrays (:data:`DETAIL_KEYS`): its keys and values as vLLM wrote them
    (``median_ttft_ms``, ``median_tpot_ms``, ``median_itl_ms``, ``output_throughput``, ``request_throughput``,
    ``completed``, ``failed``, ``spec_decode_*`` where the server exported spec-decode counters, ...)."""
    return {k: v for k, v in result.items() if k not in DETAIL_KEYS}


def failed_requests(result: dict | None) -> int | None:
    """Requests of a pass that failed: vLLM's ``failed`` count (``None`` without a result)."""
    return None if result is None else int(result.get("failed") or 0)


#: The most characters one generated token's text is taken to have: a bound on where two outputs of ``output_len``
#: tokens can first differ (:func:`text_agreement`'s divergence, a character index), for ``records check``. The
#: tokenizer ``sparse-mla make-checkpoint`` trains decodes none to more than 26 (its longest: the alphabet), LLaMA's
#: SentencePiece none to more than 16 (its runs of spaces); a longer token is some other tokenizer's, and this bound
#: an assumption, ten times past the longest known here.
MAX_TOKEN_CHARS = 256


def text_agreement(a: dict, b: dict) -> dict:
    """Greedy outputs of two passes over the same prompts, request by request (vLLM keeps its requests' order in
    ``generated_texts``): ``{"compared", "identical", "first_divergence_min", "first_divergence_median"}``, the
    divergence as the first differing character. Requests that failed in either pass (a non-empty ``errors``
    entry) are not compared; passes over different numbers of requests compare none."""
    ta, tb = a.get("generated_texts") or [], b.get("generated_texts") or []
    ea, eb = a.get("errors") or [""] * len(ta), b.get("errors") or [""] * len(tb)
    if len(ta) != len(tb):
        return {"compared": 0, "identical": 0, "first_divergence_min": None, "first_divergence_median": None,
                "note": f"{len(ta)} against {len(tb)} requests"}
    compared, div = 0, []
    for x, y, e, f in zip(ta, tb, ea, eb):
        if e or f or x is None or y is None:
            continue
        compared += 1
        if x != y:
            div.append(next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y))))
    div.sort()
    return {"compared": compared, "identical": compared - len(div), "first_divergence_min": div[0] if div else None,
            "first_divergence_median": div[len(div) // 2] if div else None}
