"""A serving benchmark's record (``bench_serve_*.json``, :mod:`sparse_mla.bench.serve`) against itself: ``records
check`` calls one whose parts say otherwise than each other **invalid** (no writer of ours makes one). Checked, where
the record has them (a record of the live-server method: runs with ``servers`` and ``passes``):

* each timed pass (``passes[].timed``, what :func:`sparse_mla.bench.serve._bench_pass` wrote of its ``vllm bench
  serve``) against vLLM's result it kept (``repeats[run][repeat - 1]``): the same ``duration``, ``completed`` and
  ``failed``; vLLM's ``duration`` within the client's wall ``seconds``; no more prompts completed than the load asks;
  a pass that says no failure has its result; vLLM's ``duration`` of a pass that says it did not time out within
  ``server.bench_timeout_s`` (the writer kills a pass at its time-out; issue 47, round 10); each repeat timed once,
  at its place (``position``) in its round of ``order``; each server's warm-up pass likewise (one that completed
  fewer prompts than the load asks says it failed: :func:`passes_not_completed`, read by
  :func:`sparse_mla.workbook.proof.said_failed`);
* the agreement summaries: ``agreement_vs_baseline`` one entry per run without speculation but the ``baseline``,
  ``speculative_vs_plain`` one per speculative run naming its plain run, each total the sum of its repeats
  (``per_repeat``), no repeat comparing more requests than both passes completed, each repeat's first divergences
  those of the requests it found differing (:func:`_divergences`; the texts compared are not in the record, so the
  counts are not recomputed); ``output_throughput_ratio`` and ``acceptance_rate_percent`` the runs' summaries'
  (:func:`sparse_mla.bench.serve.compare_runs`); each run's ``agreement_across_repeats`` against its first repeat
  with a result;
* ``verdict``: its rule and metrics, each pair, its ranges, its ranking and its line as
  :func:`sparse_mla.bench.serve.session_verdict` gives them from the repeats (the line up to the numbers later
  writers added to it);
* ``server``: the ``vllm serve`` options each server's ``command`` was given (``--max-model-len``,
  ``--tensor-parallel-size``, ``--kv-cache-dtype``, ``--gpu-memory-utilization``, ``--max-num-seqs``,
  ``--enforce-eager``), a ``tp`` on the GPUs the header counts that divides the model's heads, a ``max_model_len``
  that holds the load's longest prompt and its new tokens and is no more than the writer gives it
  (:func:`sparse_mla.bench.serve.server_max_model_len`; the model's ``max_position_embeddings``, which the writer
  writes where it is less, is not in the record), ``max_num_seqs`` the load's concurrency, each run's KV-cache
  dtype and CUDA graphs the server's; a server's ``log_tail`` only beside its ``error`` (the writer keeps the log's
  tail of a server that failed);
* each run's ``ran`` one of its live servers' (the writer's ``refresh_run``); each server's ``ran`` is judged against
  the run's request (:func:`sparse_mla.vllm_plugin.ran.contradictions`) by :mod:`sparse_mla.workbook.proof` and
  against the model by :func:`sparse_mla.workbook.consistency.model_layer_problems`.
"""
from __future__ import annotations

import math
import re

from ..records.values import is_int as _int, is_number as _num, same_json as _same


def _number(v):
    """A count or a time however vLLM's result wrote it (``100``, ``100.0``, ``"100"``: the same number), else the
    value itself."""
    try:
        return float(v) if isinstance(v, (int, float, str)) and not isinstance(v, bool) else v
    except ValueError:
        return v


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v) -> list:
    return v if isinstance(v, list) else []


def live_server_runs(rec: dict) -> dict[str, dict]:
    """The runs of a serving benchmark of the live-server method (``repeats`` an object, runs with ``servers``):
    ``{name: run}``; ``{}`` for another record."""
    if not isinstance(rec.get("repeats"), dict) or not isinstance(rec.get("runs"), dict):
        return {}
    return {k: r for k, r in rec["runs"].items() if isinstance(r, dict) and isinstance(r.get("servers"), list)}


def _result(rec: dict, key: str, repeat) -> dict | None:
    """vLLM's result of run ``key``'s repeat ``repeat`` (1-based), or None."""
    reps = _list(_dict(rec.get("repeats")).get(key))
    return reps[repeat - 1] if _int(repeat) and 1 <= repeat <= len(reps) and isinstance(reps[repeat - 1], dict) \
        else None


def _bench_pass(where: str, timed: dict, result: dict | None, asked, limit=None) -> list[str]:
    """One ``vllm bench serve`` pass as recorded (``timed`` or ``warmup``) against vLLM's result, the load and the
    time-out ``limit`` (the server block's ``bench_timeout_s``: a pass that ran longer was killed,
    :func:`sparse_mla.bench.vllm_client.run_pass`, and says ``timed_out``)."""
    out = [f"{where}.{f} {timed[f]!r}, vLLM's result {result.get(f)!r}" for f in ("duration", "completed", "failed")
           if result is not None and f in timed and _number(timed[f]) != _number(result.get(f))]
    dur, sec = timed.get("duration"), timed.get("seconds")
    if _num(dur) and _num(sec) and dur > sec + 0.005:         # seconds: the client's wall time, to 0.01 s
        out.append(f"{where}: vLLM's duration {dur!r} s is longer than the {sec!r} s the client ran")
    if _num(dur) and _num(limit) and dur > limit and timed.get("timed_out") is not True:
        out.append(f"{where}: vLLM's duration {dur!r} s is longer than the server block's bench_timeout_s {limit!r} "
                   f"s, yet timed_out {timed.get('timed_out')!r} (the writer kills a pass at its time-out)")
    if _num(timed.get("completed")) and _int(asked) and timed["completed"] > asked:
        out.append(f"{where}: {timed['completed']} prompts completed, more than the load's {asked}")
    return out


def pass_problems(rec: dict) -> list[str]:
    """Each timed pass and warm-up against vLLM's results and the load (module docstring)."""
    load, limit = _dict(rec.get("load")), _dict(rec.get("server")).get("bench_timeout_s")
    asked, n = load.get("num_prompts"), load.get("repeats")
    out = []
    for k, run in live_server_runs(rec).items():
        seen = []
        for i, p in enumerate(_list(run.get("passes"))):
            if not isinstance(p, dict):
                continue
            r, where = p.get("repeat"), f"runs.{k}.passes[{i}]"
            if not _int(r) or (_int(n) and not 1 <= r <= n) or r in seen:
                out.append(f"{where}: repeat {r!r} is not one of the load's repeats 1 to {n}, each timed once")
            seen.append(r)
            result = _result(rec, k, r)
            if result is None and not p.get("failures") and not p.get("error"):
                out.append(f"{where}: no failure, yet repeats.{k}[{r}] holds no result of vLLM's")
            out += _bench_pass(f"{where}.timed", _dict(p.get("timed")), result, asked, limit)
        for i, s in enumerate(_list(run.get("servers"))):
            warm = _dict(_dict(s).get("warmup"))
            out += _bench_pass(f"runs.{k}.servers[{i}].warmup", warm, None, asked, limit)
            if "output_len" in warm and warm["output_len"] != load.get("output_len"):
                out.append(f"runs.{k}.servers[{i}].warmup.output_len {warm['output_len']!r}, the load's "
                           f"{load.get('output_len')!r}")
    return out


def position_problems(rec: dict) -> list[str]:
    """Each timed pass's ``position`` its place in its round of ``order`` among the runs with live servers (those
    with passes; ``bench_serve`` counts the runs whose server started), as the writer numbers it (1-based)."""
    order, runs = _list(rec.get("order")), live_server_runs(rec)
    live = {k for k, run in runs.items() if _list(run.get("passes"))}
    out = []
    for k, run in runs.items():
        for i, p in enumerate(_list(run.get("passes"))):
            r = _dict(p).get("repeat")
            if not (_int(r) and 1 <= r <= len(order) and "position" in p) or k not in _list(order[r - 1]):
                continue
            want = [x for x in order[r - 1] if x in live].index(k) + 1
            if p["position"] != want:
                out.append(f"runs.{k}.passes[{i}].position {p['position']!r}: round {r} of the record's order "
                           f"{order[r - 1]} serves it {want}")
    return out


def passes_not_completed(rec: dict) -> list[str]:
    """What a live-server benchmark's client passes say failed, one line each: a warm-up or timed pass that completed
    fewer prompts than the load asks (``vllm bench serve``'s ``completed``; its ``failed`` is a failure count that
    :func:`sparse_mla.workbook.proof.said_failed` reads wherever it is)."""
    asked = _dict(rec.get("load")).get("num_prompts")
    if not _int(asked):
        return []
    out = []
    for k, run in live_server_runs(rec).items():
        passes = [(f"servers[{i}].warmup", _dict(s).get("warmup")) for i, s in enumerate(_list(run.get("servers")))]
        passes += [(f"passes[{i}].timed", _dict(p).get("timed")) for i, p in enumerate(_list(run.get("passes")))]
        for where, p in passes:
            done = _number(_dict(p).get("completed"))
            if _num(done) and done < asked:
                out.append(f"runs.{k}.{where} says something failed: {done:g} of the load's {asked} prompts completed")
    return out


def _summed(where: str, entry: dict, rec: dict, a: str, b: str) -> list[str]:
    """An agreement of runs ``a`` and ``b`` over repeats: its totals the sums of ``per_repeat``, each repeat
    comparing no more requests than both passes completed, each identical count at most its compared, its first
    divergences those of its differing requests (:func:`_divergences`)."""
    per = [p for p in _list(entry.get("per_repeat")) if isinstance(p, dict)]
    if "per_repeat" not in entry:
        return []
    out = [f"{where}.{f} {entry.get(f)!r}, its repeats' sum {sum(p.get(f) for p in per if _num(p.get(f)))}"
           for f in ("compared", "identical") if not _same(entry.get(f), sum(p.get(f) for p in per
                                                                                 if _num(p.get(f))))]
    for p in per:
        done = [(_result(rec, x, p.get("repeat")) or {}).get("completed") for x in (a, b)]
        if _num(p.get("compared")) and all(_num(d) for d in done) and p["compared"] > min(done):
            out.append(f"{where}: repeat {p.get('repeat')} compares {p['compared']} requests, more than the "
                       f"{min(done)} both passes completed")
        if _num(p.get("identical")) and _num(p.get("compared")) and p["identical"] > p["compared"]:
            out.append(f"{where}: repeat {p.get('repeat')} has {p['identical']} identical of {p['compared']} compared")
        else:
            out += _divergences(f"{where}: repeat {p.get('repeat')}", p, _dict(rec.get("load")).get("output_len"))
    return out


def _divergences(where: str, p: dict, output_len) -> list[str]:
    """One repeat's agreement as :func:`sparse_mla.bench.vllm_client.text_agreement` writes it: the requests that
    differ (compared less identical) each have a first differing character, ``first_divergence_min`` the least of
    them and ``first_divergence_median`` the middle one (the same where one differs), both integers from 0 to the
    characters of ``output_len`` tokens (:data:`~sparse_mla.bench.vllm_client.MAX_TOKEN_CHARS` each); none differ:
    both null."""
    from ..bench.vllm_client import MAX_TOKEN_CHARS

    low, mid = p.get("first_divergence_min"), p.get("first_divergence_median")
    if not (_int(p.get("compared")) and _int(p.get("identical"))) or not {"first_divergence_min",
                                                                         "first_divergence_median"} <= set(p):
        return []
    differ = p["compared"] - p["identical"]
    if differ == 0:
        return [] if low is None and mid is None else [
            f"{where}: none of its {p['compared']} requests differs, yet first_divergence_min {low!r} and "
            f"first_divergence_median {mid!r}; accepted: null and null"]
    most = output_len * MAX_TOKEN_CHARS if _int(output_len) else None
    if not (_int(low) and _int(mid) and low <= mid and (differ > 1 or low == mid) and (most is None or mid <= most)):
        return [f"{where}: {differ} of its {p['compared']} requests differ, first_divergence_min {low!r} and "
                f"first_divergence_median {mid!r}; accepted: character indexes, the least at most the median (equal "
                f"where one differs)" + (f", up to {most} (the load's {output_len} tokens of at most "
                                         f"{MAX_TOKEN_CHARS} characters)" if most is not None else "")]
    return []


def agreement_problems(rec: dict) -> list[str]:
    """``agreement_vs_baseline``, ``speculative_vs_plain`` and each run's ``agreement_across_repeats`` against the
    runs and repeats they summarise (module docstring)."""
    runs = live_server_runs(rec)
    if not runs or "baseline" not in rec:
        return []
    base = rec["baseline"]
    plain = [k for k, r in runs.items() if not r.get("speculative_config")]
    spec = [k for k in runs if k not in plain]
    vs_base, vs_plain = _dict(rec.get("agreement_vs_baseline")), _dict(rec.get("speculative_vs_plain"))
    out = [f"{what} compares {sorted(have)}, the record's runs give {sorted(want)}" for what, have, want in
           (("agreement_vs_baseline", vs_base, set(plain) - {base}), ("speculative_vs_plain", vs_plain, set(spec)))
           if set(have) != want]
    for k, e in vs_base.items():
        if isinstance(e, dict) and k in runs:
            out += [f"agreement_vs_baseline.{k}: baseline {e.get('baseline')!r}, the record's {base!r}"] \
                if e.get("baseline") != base else []
            out += _summed(f"agreement_vs_baseline.{k}", e, rec, base, k)
    for k, e in vs_plain.items():
        if isinstance(e, dict) and k in runs:
            out += _speculative_summary(rec, k, e)
    for k, run in runs.items():
        for e in _list(run.get("agreement_across_repeats")):
            if isinstance(e, dict):
                out += _summed(f"runs.{k}.agreement_across_repeats", {"per_repeat": [e], "compared": e.get(
                    "compared"), "identical": e.get("identical")}, rec, k, k)
    return out + compared_repeats_problems(rec)


def _with_result(rec: dict, k: str) -> list[int]:
    """The repeats (1-based) of run ``k`` that have vLLM's result (``repeats[k][i]`` not null)."""
    return [i + 1 for i, x in enumerate(_list(_dict(rec.get("repeats")).get(k))) if x is not None]


def compared_repeats_problems(rec: dict) -> list[str]:
    """Which repeats each agreement compares, as :func:`sparse_mla.bench.serve.refresh_run` and ``compare_runs``
    pick them: a run's ``agreement_across_repeats`` each other repeat with a result once, in order, against the first
    with one; a comparison's ``per_repeat`` each repeat where both runs have a result, once, in order; an entry's
    ``note`` (``text_agreement``'s, passes of different numbers of requests) only where it compared none."""
    runs = live_server_runs(rec)
    out = []
    for k, run in runs.items():
        have = [(e.get("repeat"), e.get("against_repeat")) for e in _list(run.get("agreement_across_repeats"))
                if isinstance(e, dict)]
        done = _with_result(rec, k)
        want = [(q, done[0]) for q in done[1:]]
        if "agreement_across_repeats" in run and have != want:
            out.append(f"runs.{k}.agreement_across_repeats compares (repeat, against_repeat) {have}; the repeats with "
                       f"a result give {want} (each once, against the first)")
    for part, other in (("agreement_vs_baseline", "baseline"), ("speculative_vs_plain", "plain")):
        for k, e in _dict(rec.get(part)).items():
            if not isinstance(e, dict) or "per_repeat" not in e or k not in runs:
                continue
            have = [p.get("repeat") for p in _list(e["per_repeat"]) if isinstance(p, dict)]
            want = [r for r in _with_result(rec, k) if r in _with_result(rec, str(e.get(other)))]
            if have != want:
                out.append(f"{part}.{k}.per_repeat compares repeats {have}; the repeats where both runs have a "
                           f"result give {want} (each once)")
    entries = [(f"runs.{k}.agreement_across_repeats", e) for k, r in runs.items()
               for e in _list(r.get("agreement_across_repeats"))] + \
        [(f"{part}.{k}.per_repeat", p) for part in ("agreement_vs_baseline", "speculative_vs_plain")
         for k, e in _dict(rec.get(part)).items() for p in _list(_dict(e).get("per_repeat"))]
    return out + [f"{where}: repeat {e.get('repeat')} has a note {str(e['note'])[:60]!r} yet compared "
                  f"{e.get('compared')!r}; accepted: a note only where the passes' numbers of requests differ "
                  f"(compared 0)" for where, e in entries if isinstance(e, dict) and "note" in e
                  and e.get("compared") != 0]


def _speculative_summary(rec: dict, k: str, e: dict) -> list[str]:
    """One ``speculative_vs_plain`` entry against its runs: the plain run is the speculative run's run spec, its
    sums its repeats', its throughput ratio and acceptance rate the runs' summaries' medians."""
    run = rec["runs"][k]
    plain = run.get("run_spec")
    out = [f"speculative_vs_plain.{k}: plain {e.get('plain')!r}, the run's run spec {plain!r}"] \
        if e.get("plain") != plain else []
    out += _summed(f"speculative_vs_plain.{k}", e, rec, str(plain), k)
    med = lambda r, m: (_dict(_dict(_dict(r).get("summary")).get(m))).get("median")  # noqa: E731
    tp_spec, tp_plain = med(run, "output_throughput"), med(_dict(rec["runs"]).get(plain), "output_throughput")
    want = {"output_throughput_ratio": tp_spec / tp_plain if tp_spec and tp_plain else None,
            "acceptance_rate_percent": med(run, "spec_decode_acceptance_rate")}
    return out + [f"speculative_vs_plain.{k}.{f} {e.get(f)!r}, the runs' summaries give {v!r}"
                  for f, v in want.items() if f in e and not _same(e[f], v)]


def _line_core(line) -> str:
    """A verdict line without the numbers a later writer added to an unranked pair (``; spread over repeats ...``)."""
    return re.sub(r"; spread over repeats [^)]*\)$", ")", str(line))


def _not_the_writers(where: str, have, want) -> str:
    """One line for a verdict's ``rule`` or ``metrics`` that is not :func:`sparse_mla.bench.ranking.verdict`'s: of
    metrics, the entries that differ."""
    if isinstance(have, dict) and isinstance(want, dict):
        keys = [k for k in dict.fromkeys([*have, *want]) if not _same(have.get(k), want.get(k))]
        have, want = {k: have.get(k) for k in keys}, {k: want.get(k) for k in keys}
    return f"{where} {str(have)[:80]!r} is not the writer's; accepted: {str(want)[:80]!r} (sparse_mla.bench.ranking)"


def _in_writers_order(rec: dict) -> dict:
    """``rec`` with its ``runs`` (and ``repeats``) in the order the writer made them, its plan's, which is the
    record's first round (``order[0]``, :func:`sparse_mla.bench.serve.rotated` rotates by the round): JSON's key
    order is no part of what a record says, and a reader or editor that sorts the keys changes no verdict."""
    first = _list(rec.get("order"))[:1]
    keys = first[0] if first and isinstance(first[0], list) else None
    runs, reps = _dict(rec.get("runs")), _dict(rec.get("repeats"))
    if keys is None or len(keys) != len(runs) or not all(isinstance(k, str) and k in runs for k in keys):
        return rec
    return {**rec, "runs": {k: runs[k] for k in keys},
            "repeats": {**{k: reps[k] for k in keys if k in reps}, **reps}}


def verdict_problems(rec: dict) -> list[str]:
    """``verdict`` against :func:`sparse_mla.bench.serve.session_verdict` of the record's repeats, its runs in the
    writer's order (:func:`_in_writers_order`): the same pairs in order, each with its ranges, the run ranked better
    and its line; ``lines`` the pairs' lines."""
    have = rec.get("verdict")
    if not isinstance(have, dict) or not live_server_runs(rec):
        return []
    from ..bench.serve import session_verdict

    try:
        want = session_verdict(_in_writers_order(rec))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return [f"verdict: the repeats cannot give a verdict ({type(e).__name__}: {str(e)[:120]})"]
    out = [_not_the_writers(f"verdict.{f}", have[f], want[f]) for f in ("rule", "metrics")
           if f in have and not _same(have[f], want[f])]
    pairs = [p for p in _list(have.get("pairs")) if isinstance(p, dict)]
    if len(pairs) != len(want["pairs"]):
        return out + [f"verdict: {len(pairs)} pairs, the record's runs and metrics give {len(want['pairs'])}"]
    for i, (p, w) in enumerate(zip(pairs, want["pairs"])):
        bad = [f for f in ("metric", "runs", "ranges", "better", "spread", "medians_apart")
               if (f in p or f in ("metric", "runs", "ranges", "better")) and not _same(p.get(f), w.get(f))]
        if _line_core(p.get("line")) != _line_core(w["line"]):
            bad.append("line")
        if bad:
            out.append(f"verdict.pairs[{i}]: {', '.join(bad)} not what the repeats give ({w['line']})")
    if "lines" in have and have["lines"] != [p.get("line") for p in pairs]:
        out.append("verdict.lines are not its pairs' lines")
    return out


#: ``vllm serve`` options of a server's command and the ``server`` fields they carry.
SERVER_OPTIONS = {"--max-model-len": "max_model_len", "--tensor-parallel-size": "tp",
                  "--kv-cache-dtype": "kv_cache_dtype", "--gpu-memory-utilization": "gpu_memory_utilization",
                  "--max-num-seqs": "max_num_seqs"}


def server_problems(rec: dict) -> list[str]:
    """The ``server`` block against each server's command, the header, the model and the load (module docstring)."""
    srv, runs = rec.get("server"), live_server_runs(rec)
    if not isinstance(srv, dict) or not runs:
        return []
    out = []
    for k, run in runs.items():
        for i, s in enumerate(_list(run.get("servers"))):
            cmd = [str(c) for c in _list(_dict(s).get("command"))]
            given = {f: cmd[cmd.index(o) + 1] if o in cmd[:-1] else None for o, f in SERVER_OPTIONS.items()}
            bad = [f"{o} {given[f]}" for o, f in SERVER_OPTIONS.items() if f in srv and given[f] != str(srv[f])]
            if "enforce_eager" in srv and ("--enforce-eager" in cmd) != (srv["enforce_eager"] is True):
                bad.append(f"--enforce-eager {'given' if '--enforce-eager' in cmd else 'not given'}")
            if cmd and bad:
                out.append(f"runs.{k}.servers[{i}].command: {', '.join(bad)}, the record's server block "
                           f"{({f: srv.get(f) for f in (*SERVER_OPTIONS.values(), 'enforce_eager')})}")
            if "log_tail" in _dict(s) and not s.get("error"):
                out.append(f"runs.{k}.servers[{i}] has a log_tail and no error; accepted: a log_tail only beside the "
                           f"error of a server that failed (bench.serve.start_server, finish_server)")
        out += [f"runs.{k}.{f} {run[f]!r}, the server's {srv[f]!r}" for f in ("kv_cache_dtype", "cuda_graphs")
                if f in run and f in srv and run[f] != srv[f]]
    return out + _server_sizes(rec, srv)


def _server_sizes(rec: dict, srv: dict) -> list[str]:
    """The server's ``tp`` (the header's GPUs, the model's heads), ``max_model_len`` (the load's longest prompt and
    new tokens, at most what the writer gives) and ``max_num_seqs`` (the load's concurrency)."""
    from ..bench.serve import PROMPT_SLACK, input_length_range, server_max_model_len

    env, model, load = _dict(rec.get("environment")), _dict(rec.get("model")), _dict(rec.get("load"))
    tp, mml, out = srv.get("tp"), srv.get("max_model_len"), []
    if _int(tp) and _int(env.get("gpu_count")) and tp > env["gpu_count"]:
        out.append(f"server.tp {tp} on the header's {env['gpu_count']} GPU(s)")
    if _int(tp) and _int(model.get("num_attention_heads")) and model["num_attention_heads"] % tp:
        out.append(f"server.tp {tp} does not divide the model's {model['num_attention_heads']} heads")
    if "max_num_seqs" in srv and "max_concurrency" in load and srv["max_num_seqs"] != load["max_concurrency"]:
        out.append(f"server.max_num_seqs {srv['max_num_seqs']!r}, the load's max_concurrency {load['max_concurrency']!r}")
    topk, new = model.get("index_topk"), load.get("output_len")
    spec = _dict(rec.get("speculative_config")).get("num_speculative_tokens") or 0
    if _int(mml) and _int(topk) and _int(new) and _int(spec):
        need = input_length_range(topk)[1] + PROMPT_SLACK + new + spec
        most = server_max_model_len(topk, new, spec)
        if not need <= mml <= most:
            out.append(f"server.max_model_len {mml}: the load's longest prompt, its slack and new tokens need {need}, "
                       f"and the writer gives at most {most}")
    return out


def ran_problems(rec: dict) -> list[str]:
    """Each run's ``ran``, where it has one, one of its live servers' ``ran`` (the writer copies the first server's,
    a contradicting one's first)."""
    out = []
    for k, run in live_server_runs(rec).items():
        served = [s["ran"] for s in _list(run.get("servers")) if isinstance(s, dict) and "ran" in s]
        if "ran" in run and not any(_same(run["ran"], r) for r in served):
            out.append(f"runs.{k}.ran is none of its servers' ran ({len(served)} server(s) with one)")
    return out


def earlier_runs(rec: dict) -> dict[str, dict]:
    """The runs of a serving benchmark of the earlier method (the openai client's load, before vLLM's ``bench serve``,
    2026-12-01: a ``load`` block and no top-level ``repeats``; each run a ``repeats`` list, no ``servers``;
    ``results/h200/bench_serve_h200*.json``): ``{name: run}``; ``{}`` for another record."""
    if "load" not in rec or "repeats" in rec or not isinstance(rec.get("runs"), dict):
        return {}
    return {k: r for k, r in rec["runs"].items() if isinstance(r, dict)}


def _finite(v) -> bool:
    return _num(v) and math.isfinite(v) and v >= 0


#: A spread's statistics in the order they must hold (the earlier writer's ``spread``: min, quartiles, median, max).
_SPREAD_ORDER = ("min", "q1", "median", "q3", "max")


def _spread_problems(where: str, spread, ok) -> list[str]:
    """One of the earlier writer's spreads (its ``spread``: ``{"min", "q1", "median", "q3", "max", "n"}`` of finite
    milliseconds over ``n`` values, None where there were none) of a repeat whose ``ok`` requests completed (None:
    not known): exactly those keys, each figure finite and >= 0, in that order; ``n`` a count from 1 to ``ok``, and
    ``ok`` itself for TTFT and latency (every completed request has both; TPOT only those with two tokens or more).
    Issue 47, round 15 (u28) and 16: a missing median, an extra key, ``n`` 0 or above the requests passed."""
    if spread is None:
        return [] if ok == 0 or where.endswith("tpot_ms") else [f"{where} None beside {ok} completed requests"]
    d = _dict(spread)
    keys = (*_SPREAD_ORDER, "n")
    out = [f"{where}: no {f}, which the writer's spread holds ({', '.join(keys)})" for f in keys if f not in d]
    out += [f"{where}.{f}: no statistic the writer's spread holds ({', '.join(keys)})" for f in d if f not in keys]
    out += [f"{where}.{f} {v!r} is no finite figure >= 0" for f, v in d.items()
            if f in _SPREAD_ORDER and not _finite(v)]
    have = [(f, d[f]) for f in _SPREAD_ORDER if _finite(d.get(f))]
    out += [f"{where}: {a} {x!r} above {b} {y!r}" for (a, x), (b, y) in zip(have, have[1:]) if x > y]
    n, top = d.get("n"), ok if _int(ok) else None
    exact = not where.endswith("tpot_ms")
    if "n" in d and not (_int(n) and n >= 1 and (top is None or (n == top if exact else n <= top))):
        out.append(f"{where}.n {n!r}: accepted {'exactly' if exact else 'from 1 to'} "
                   f"{top if top is not None else 'a count'} (the requests that completed: requests - errors)")
    return out


def _earlier_repeat(where: str, rep, asked_requests) -> list[str]:
    """One repeat of the earlier writer (its ``repeat_stats``: ``requests`` = the load's prompts, each sent once;
    ``errors`` of them; an integer ``output_tokens`` over a ``duration_s`` above 0 = ``output_tokens_per_s``;
    spreads of finite milliseconds, :func:`_spread_problems`)."""
    if not isinstance(rep, dict):
        return [f"{where} {str(rep)[:40]} is no repeat the writer writes (an object of its figures)"]
    tps, tok, dur = rep.get("output_tokens_per_s"), rep.get("output_tokens"), rep.get("duration_s")
    out = [] if _finite(dur) and dur > 0 else [f"{where}.duration_s {dur!r} is no time above 0 s"]
    out += [] if _int(tok) and tok >= 0 else [f"{where}.output_tokens {tok!r} is no count of tokens"]
    req, err = rep.get("requests"), rep.get("errors")
    ok = req - err if _int(req) and _int(err) and 0 <= err <= req else None
    out += [p for k in ("ttft_ms", "tpot_ms", "latency_ms") for p in _spread_problems(f"{where}.{k}", rep.get(k), ok)]
    if req != asked_requests:
        out.append(f"{where}.requests {req!r}, the load's num_requests {asked_requests!r} (the writer sends each "
                   f"of the load's prompts once a repeat)")
    if not (_int(err) and _int(req) and 0 <= err <= req):
        out.append(f"{where}.errors {err!r} is no count of its {req!r} requests")
    # the writer divided by the unrounded duration and wrote duration_s rounded to 0.1 ms (round(d, 4))
    implied = tok / tps if _finite(tps) and tps > 0 and _finite(tok) else None
    if _finite(tok) and _finite(dur) and dur > 0 and not (implied is not None and abs(implied - dur) <= 5.001e-5):
        out.append(f"{where}.output_tokens_per_s {tps!r}, its output_tokens {tok} over duration_s {dur} (to 0.1 ms) "
                   f"give {tok / dur:.6g}")
    return out


def earlier_method_problems(rec: dict) -> list[str]:
    """A serving record of the earlier method (:func:`earlier_runs`) against its own load: no run holds the later
    method's ``servers`` or ``passes``; each run that did not fail (no ``error``) has ``load.repeats`` repeats, each
    of ``load.num_requests`` requests with the writer's figures (:func:`_earlier_repeat`), and its summary's error
    count their sum. Issue 47, round 13 (r26, s14): such a record with ``num_requests`` 64 beside repeats of 48
    requests, or an infinite tokens/s, was accepted (unproven: no ``ran``), where the live-server method's were
    invalid; round 14 (t43, t52, t55, t56): a 0 s repeat, fractional tokens, a spread out of order, a run with an
    empty ``servers``."""
    load = _dict(rec.get("load"))
    out = []
    for k, run in earlier_runs(rec).items():
        out += [f"runs.{k}.{f}: the live-server method's, in a record of the earlier method (no top-level repeats)"
                for f in ("servers", "passes") if f in run]
        reps = run.get("repeats", [] if run.get("error") is not None else None)
        if not isinstance(reps, list):
            out.append(f"runs.{k}.repeats {str(reps)[:40]} is no list of repeats")
            continue
        if run.get("error") is None and len(reps) != load.get("repeats"):
            out.append(f"runs.{k}: {len(reps)} repeats, the load asks {load.get('repeats')!r}")
        for i, rep in enumerate(reps):
            out += _earlier_repeat(f"runs.{k}.repeats[{i}]", rep, load.get("num_requests"))
        errors = _dict(run.get("summary")).get("errors")
        counted = [r.get("errors") for r in reps if isinstance(r, dict)]
        if "errors" in _dict(run.get("summary")) and all(_int(e) for e in counted) and errors != sum(counted):
            out.append(f"runs.{k}.summary.errors {errors!r}, its repeats' errors sum to {sum(counted)}")
    return out


def serving_record_problems(rec: dict) -> list[str]:
    """Every line of this module's checks for one record; ``[]`` where its parts agree or it is no serving benchmark
    (:func:`earlier_method_problems` for one of the earlier method)."""
    if not live_server_runs(rec):
        return earlier_method_problems(rec)
    return pass_problems(rec) + position_problems(rec) + agreement_problems(rec) + verdict_problems(rec) + \
        server_problems(rec) + ran_problems(rec)
