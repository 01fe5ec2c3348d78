"""Tables of the engine records: which backend and indexer each engine ran and what it generated (``launch_*.json``,
:mod:`sparse_mla.launch.engine`), greedy-token parity between engines, and the serving benchmark
(``bench_serve_*.json``, :mod:`sparse_mla.bench.serve`). One row per engine run (or pair, or prompt), each naming its
record."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import UserInputError
from .common import Table, check_args, fixed0, fixed1, fixed2, load, markdown, registry, source

ENGINE = "engine (launch)"
SERVE = "serving benchmark"
#: vLLM's backend name of the indexer's cache layers, which are not attention (``vllm_plugin.ran``).
INDEXER_CACHE = "DEEPSEEK_V32_INDEXER"


def engine_runs(rec: dict) -> dict[str, dict]:
    """``{name: run}`` of a record's engine runs (the one reading of the tables and ``records check``): its ``runs``
    (a parity or serving-benchmark record) and its served check (``serve``, named ``"serve"``), or the record itself
    where it is one engine's record -- an offline engine's ``layers`` or ``ran``, or a served engine's request at the
    top level (a served check of 2026-11-30, an engine's own ``--json-out``) -- named by its run spec (``run``), else
    its ``backend_requested``, else ``"engine"``, with its own served check beside it."""
    runs = rec.get("runs")
    if isinstance(runs, dict):
        out = {k: v for k, v in runs.items() if isinstance(v, dict)}
        if isinstance(rec.get("serve"), dict):
            out["serve"] = rec["serve"]
        return out
    if "layers" in rec or "ran" in rec or "backend_requested" in rec:
        name = rec.get("run") or rec.get("backend_requested")
        return {str(name) if isinstance(name, str) and name else "engine": rec,
                **({"serve": rec["serve"]} if isinstance(rec.get("serve"), dict) else {})}
    return {}


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items())


def attention(run: dict) -> tuple[str | None, str | None]:
    """``(backends, read from)``: the attention layers per backend from the ``ran`` block (read inside the engine),
    else the engine's ``layers``, else its ``attention_backends``, else the server log's "Using ... backend" line."""
    ran = run.get("ran")
    if isinstance(ran, dict) and isinstance(ran.get("attention"), dict):
        return _counts(ran["attention"]), "ran"
    if isinstance(run.get("layers"), dict):
        counts = {}
        for v in run["layers"].values():
            b = v.get("backend") if isinstance(v, dict) else None
            if b and b != INDEXER_CACHE:
                counts[b] = counts.get(b, 0) + 1
        return _counts(counts), "layers"
    if isinstance(run.get("attention_backends"), list):
        return ", ".join(b for b in run["attention_backends"] if b != INDEXER_CACHE), "attention_backends"
    for line in run.get("backend_log_lines") or []:
        m = re.search(r"Using AttentionBackendEnum\.(\w+) backend", str(line))
        if m:
            return m.group(1), "server log"
    return None, None


def _first_tokens(rec: dict, name: str) -> str | None:
    got = (rec.get("reference_first_token") or {}).get(name) if isinstance(rec.get("reference_first_token"), dict) \
        else None
    if not isinstance(got, list) or not got:
        return None
    return f"{sum(bool(g.get('same_first_token')) for g in got if isinstance(g, dict))} of {len(got)}"


def _throughput(rec: dict, name: str, run: dict):
    t = rec.get("throughput_tokens_per_s")
    value = t.get(name) if isinstance(t, dict) else None
    return value if value is not None else (run.get("throughput") or {}).get("output_tokens_per_s")


def _notes(rec: dict, run: dict) -> str | None:
    notes = []
    if run.get("error"):
        notes.append(f"failed: {str(run['error'])[:80]}")
    if run.get("ran_contradictions"):
        notes.append(f"{len(run['ran_contradictions'])} contradiction(s) of the request")
    sim = run.get("simulated", rec.get("simulated"))
    if isinstance(sim, dict) and sim.get("capability"):
        notes.append(f"simulated capability {sim['capability']}")
    if "matches_offline" in run:
        notes.append(f"same tokens as offline: {'yes' if run['matches_offline'] else 'no'}")
    return "; ".join(notes) or None


def _graphs(run: dict) -> str | None:
    if "enforce_eager" in run:
        return "no" if run["enforce_eager"] else "yes"
    return None if "cuda_graphs" not in run else ("yes" if run["cuda_graphs"] else "no")


def engines(args: list[str], base: Path) -> str:
    """Every engine run of the records: what was asked, which attention backend its layers ran (and where that was
    read), the indexer's calls (``ran``), first token against the reference's argmax, offline decode throughput."""
    check_args(args, ENGINES_USAGE, 1)
    body, notes = [], []
    for arg in args:
        rec = load(arg, base, ENGINE, ())
        runs = engine_runs(rec)
        if not runs:
            raise UserInputError(f"record {arg!r} holds no engine run; accepted: an {ENGINE} record (a JSON object "
                                 f"with 'runs', or one engine's 'backend_requested')")
        for name, run in runs.items():
            backends, where = attention(run)
            calls = (run.get("ran") or {}).get("indexer") if isinstance(run.get("ran"), dict) else None
            body.append([f"`{arg}`", name, run.get("indexer", "vllm" if name != "serve" else None),
                         run.get("kv_cache_dtype", rec.get("kv_cache_dtype")), _graphs(run), backends, where,
                         _counts(calls) if isinstance(calls, dict) else None, _first_tokens(rec, name),
                         fixed0(_throughput(rec, name, run)), _notes(rec, run)])
        notes.append(source(arg, rec))
    return markdown(["record", "run", "indexer", "KV cache", "CUDA graphs", "attention layers", "read from",
                     "indexer calls", "first token = reference argmax", "output tokens/s", "notes"], body,
                    ["Read from: `ran`, read inside the engine after generating (`sparse_mla.vllm_plugin.ran`); "
                     "`layers`, the engine's layers as the record lists them; `server log`, the line vLLM logs. "
                     "Output tokens/s: one timed offline batch (`throughput`), where the run had one.", "",
                     "Records:", ""] + [f"* {n}" for n in notes])


def _pairs(rec: dict) -> list[dict]:
    pairs = rec.get("parity_pairs")
    if isinstance(pairs, list) and pairs:
        return [p for p in pairs if isinstance(p, dict)]
    vs = rec.get("parity_vs_ours")
    base = rec.get("parity_baseline") or "TRITON_MLA_SPARSE"
    return [{**v, "a": base, "b": k} for k, v in vs.items() if isinstance(v, dict)] if isinstance(vs, dict) else []


def parity(args: list[str], base: Path) -> str:
    """Greedy-token parity between the engines of each record, per prompt: identical or the first token where they
    part, and the largest logprob difference up to there."""
    check_args(args, PARITY_USAGE, 1)
    body, notes = [], []
    for arg in args:
        rec = load(arg, base, ENGINE, ("runs",))
        for p in _pairs(rec):
            for q in p.get("per_prompt") or []:
                body.append([f"`{arg}`", p.get("a"), p.get("b"), q.get("prompt_len"),
                             "yes" if q.get("identical") else "no", q.get("first_divergence"),
                             fixed2(q.get("max_abs_logprob_diff"))])
        notes.append(source(arg, rec) + ("" if _pairs(rec) else " (no pair of engines)"))
    return markdown(["record", "engine a", "engine b", "prompt tokens", "identical", "first differing token",
                     "max abs logprob difference"], body,
                    ["First differing token: its index among the generated tokens (0: the first).", "", "Records:", ""]
                    + [f"* {n}" for n in notes])


#: column -> (summary keys: vLLM's ``vllm bench serve`` name, the 2026-12-01 client's), format
SERVE_METRICS = {"output tokens/s": (("output_throughput", "output_tokens_per_s"), fixed0),
                 "median TTFT (ms)": (("median_ttft_ms", "ttft_ms_median"), fixed1),
                 "median TPOT (ms)": (("median_tpot_ms", "tpot_ms_median"), fixed2)}


def _stat(summary: dict, keys: tuple[str, ...], form) -> str | None:
    s = next((summary[k] for k in keys if isinstance(summary.get(k), dict)), None)
    if s is None or form(s.get("median")) is None:
        return None
    lo, hi = form(s.get("min")), form(s.get("max"))
    spread = f" ({lo}–{hi})" if (s.get("n") or 1) > 1 and lo is not None and hi is not None else ""
    return form(s["median"]) + spread


def _agreement(rec: dict, name: str) -> str | None:
    for key, what in (("agreement_vs_baseline", "baseline"), ("speculative_vs_plain", "plain")):
        a = (rec.get(key) or {}).get(name)
        if isinstance(a, dict):
            return f"{a.get('identical')} of {a.get('compared')} vs {a.get(what, what)}"
    return None


def _acceptance(run: dict) -> str | None:
    """The drafts' acceptance rate in percent: vLLM's ``spec_decode_acceptance_rate`` (percent, median over repeats),
    or the 2026-12-01 client's ``spec_decode.acceptance_rate`` (accepted / draft tokens, a fraction)."""
    s = run.get("summary") or {}
    if isinstance(s.get("spec_decode_acceptance_rate"), dict):
        return fixed1(s["spec_decode_acceptance_rate"].get("median"))
    rate = (run.get("spec_decode") or {}).get("acceptance_rate")
    return fixed1(rate * 100) if isinstance(rate, (int, float)) else None


def serve(args: list[str], base: Path) -> str:
    """Every run of the serving benchmarks: backend, speculation, repeats, vLLM's throughput and latency medians
    (median over repeats, min–max where more than one), greedy outputs identical to the baseline's (or to the same
    backend without speculation), the drafts' acceptance rate."""
    check_args(args, SERVE_USAGE, 1)
    body, notes = [], []
    for arg in args:
        rec = load(arg, base, SERVE, ("runs",))
        for name, run in rec["runs"].items():
            s = run.get("summary") if isinstance(run.get("summary"), dict) else {}
            out = next((s[k] for k in SERVE_METRICS["output tokens/s"][0] if isinstance(s.get(k), dict)), {})
            spec = run.get("speculative_config")
            body.append([f"`{arg}`", name, run.get("backend_requested"),
                         spec.get("method") if isinstance(spec, dict) else None, out.get("n"),
                         *(_stat(s, keys, form) for keys, form in SERVE_METRICS.values()),
                         _agreement(rec, name), _acceptance(run),
                         f"failed: {run['error']}" if run.get("error") else None])
        complete = "" if rec.get("complete", True) is True else " (marked incomplete: `complete` is not true)"
        method = rec.get("method") if isinstance(rec.get("method"), str) else (
            "each repeat a fresh `vllm serve` (a record before 2026-12-04: no method field)" if "method" not in rec
            else f"unreadable ({rec['method']!r} is not a text)")
        notes.append(source(arg, rec) + complete + f"; method: {method}")
    return markdown(["record", "run", "backend", "speculative", "repeats", *SERVE_METRICS,
                     "identical greedy outputs", "acceptance rate (%)", "error"], body,
                    ["Median over repeats, (min–max) where there were more; each record's method below.", "",
                     "Records:", ""] + [f"* {n}" for n in notes])


ENGINES_USAGE = "engines FILE [FILE ...]"
PARITY_USAGE = "parity FILE [FILE ...]"
SERVE_USAGE = "serve FILE [FILE ...]"

TABLES = registry(
    Table(ENGINES_USAGE, "every engine run: backend and indexer that ran, first token, throughput", engines),
    Table(PARITY_USAGE, "greedy-token parity between the engines of a record, per prompt", parity),
    Table(SERVE_USAGE, "every run of a serving benchmark: throughput, latency, agreement", serve),
)
