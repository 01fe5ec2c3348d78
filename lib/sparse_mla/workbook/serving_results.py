"""vLLM's own results of a serving benchmark (``bench_serve_*.json`` of the live-server method, its ``repeats``)
against themselves, the load, the servers and the header; each server's command line against its run; the session's
wall time against what it ran. ``records check`` calls a record whose parts say otherwise **invalid** (issue 47,
round 7: ``total_output_tokens: 1``, a p99 below the median, a negative ``p99_tpot_ms``, a billion input tokens, a
request throughput that is not completed over duration, ``max_concurrency`` 64 under a load of 32, another
``model_id`` than the server's, a result dated 1999, ``wall_s: 1.0`` beside passes of minutes, a server started with
another ``--attention-backend`` or none were proven).

Checked per result (``repeats[run][i]``, as ``vllm bench serve --save-result`` writes it,
``vllm/benchmarks/serve.py``): every number finite; ``request_throughput`` = completed / duration,
``output_throughput`` = output tokens / duration, ``total_token_throughput`` = (input + output tokens) / duration; the
output tokens ``completed`` x the load's ``output_len`` (``ignore_eos``: each request makes exactly its length;
``output_range_ratio`` widens it), the input tokens ``completed`` x the load's ``input_lengths`` (``PROMPT_SLACK``
either side); each latency figure (mean, median, std, pN of ttft, tpot, itl, e2el) 0 or more, percentiles in order,
the median the p50; ``max_concurrency`` and ``num_prompts`` the load's; ``model_id`` the model the run's server
serves; the fields vLLM copies from its pass's command line (:data:`ECHOED`: ``backend``, ``label``, ``tokenizer_id``,
...) that command's; ``date`` in vLLM's format and within the session (the header's date, ``wall_s`` and 14 hours of
time zone either side). The load's prompt lengths are the model's ``index_topk``'s, its ``prompts_file`` and
``dataset_args`` the writer's (:func:`load_problems`). Issue 47, round 10: a result's ``backend`` 'vllm' under
``--backend openai``, another ``tokenizer_id``, a ``label`` no ``--label`` gave, a ``date`` of ``2026-12-04`` and a
``prompts_file`` beside the ``random`` dataset were proven. Issue 47, round 11: the relations vLLM's
``calculate_metrics`` makes between one result's figures (:data:`RELATIONS`), one ``total_input_tokens`` for every
pass that completed the load, and each server's command the one the writer builds for its run
(:func:`rebuilt_server_problems`).
"""
from __future__ import annotations

import datetime
import functools
import math
import re
from pathlib import Path

from ..records.values import header_time, is_int, is_number as _num
from .serving import live_server_runs

#: A latency figure of vLLM's result: its statistic and metric (``p99_ttft_ms``, ``median_tpot_ms``).
LATENCY = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
#: vLLM's throughputs, as its numerator over the result's ``duration``.
RATES = {"request_throughput": ("completed",), "output_throughput": ("total_output_tokens",),
         "total_token_throughput": ("total_input_tokens", "total_output_tokens")}


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-9)


def _rate_problems(where: str, res: dict) -> list[str]:
    """The throughputs of one result against its counts and duration."""
    dur = res.get("duration")
    if not (_num(dur) and dur > 0):
        return []
    out = []
    for rate, parts in RATES.items():
        have, counts = res.get(rate), [res.get(p) for p in parts]
        if _num(have) and all(_num(c) for c in counts) and not _close(have, sum(counts) / dur):
            out.append(f"{where}.{rate} {have!r}, not its {' + '.join(parts)} {sum(counts)!r} over its duration "
                       f"{dur!r} s ({sum(counts) / dur!r})")
    return out


def _token_problems(where: str, res: dict, load: dict) -> list[str]:
    """One result's token totals against the load: output tokens ``completed`` x ``output_len`` (within
    ``output_range_ratio``; at least one a request without ``ignore_eos``), input tokens within ``input_lengths``."""
    from ..bench.serve import PROMPT_SLACK

    done, out = res.get("completed"), []
    if not _num(done):
        return []
    n, ratio = load.get("output_len"), load.get("output_range_ratio") or 0
    if _num(n) and _num(res.get("total_output_tokens")):
        lo = done * (math.floor(n * (1 - ratio)) if load.get("ignore_eos") else 1)
        hi = done * math.ceil(n * (1 + ratio))
        if not lo <= res["total_output_tokens"] <= hi:
            out.append(f"{where}.total_output_tokens {res['total_output_tokens']!r}: {done} requests of the load's "
                       f"output_len {n} make {lo} to {hi}")
    lens = _list(load.get("input_lengths"))
    if len(lens) == 2 and all(_num(x) for x in lens) and _num(res.get("total_input_tokens")):
        lo, hi = done * max(1, lens[0] - PROMPT_SLACK), done * (lens[1] + PROMPT_SLACK)
        if not lo <= res["total_input_tokens"] <= hi:
            out.append(f"{where}.total_input_tokens {res['total_input_tokens']!r}: {done} prompts of the load's "
                       f"{lens[0]} to {lens[1]} tokens (+-{PROMPT_SLACK}) make {lo} to {hi}")
    return out


def _finite_problems(where: str, res: dict) -> list[str]:
    """Every number of one result finite, one line per field that is not: vLLM's figures are counts and statistics
    of finite times (``calculate_metrics``), and where a rate is infinite it writes the text ``"inf"``
    (``request_rate``), never a JSON ``Infinity``; a NaN is what no completed pass makes. Issue 47, round 12: a
    ``request_throughput`` of Infinity was proven, where a NaN ``mean_ttft_ms`` was refused (one field at a time)."""
    return [f"{where}.{k} is {v!r}; accepted: a finite number (vLLM's figures of a pass)" for k, v in res.items()
            if _num(v) and not math.isfinite(v)]


def _latency_problems(where: str, res: dict) -> list[str]:
    """One result's latency figures: each a number of 0 or more, each metric's percentiles in order, its median
    its p50 (a figure that is not finite is :func:`_finite_problems`' line, and left out here)."""
    per: dict[str, dict[str, float]] = {}
    out = []
    for k, v in res.items():
        m = LATENCY.match(str(k))
        if not m or (_num(v) and not math.isfinite(v)):
            continue
        if not _num(v) or v < 0:
            out.append(f"{where}.{k} is {v!r}; accepted: a time in ms of at least 0")
            continue
        per.setdefault(m[3], {})[m[1]] = v
    for metric, stats in per.items():
        pct = sorted((float(s[1:]), v) for s, v in stats.items() if s.startswith("p"))
        if [v for _, v in pct] != sorted(v for _, v in pct):
            out.append(f"{where}: the {metric} percentiles {dict((f'p{p:g}', v) for p, v in pct)} are not in order")
        if "median" in stats and "p50" in stats and not _close(stats["median"], stats["p50"]):
            out.append(f"{where}.median_{metric}_ms {stats['median']!r}, its p50 {stats['p50']!r}")
    return out


#: Relations that vLLM's ``calculate_metrics`` (``vllm/benchmarks/serve.py``; its figures are statistics of one list
#: per completed request, each request timed by ``benchmarks/lib/endpoint_request_func.py``) makes between the figures
#: of one result: ``(left, relation, right, why)``. ``{s}`` stands for each statistic of a metric but its std (mean,
#: median, pN) that both sides have, ``{m}`` for each metric (ttft, tpot, itl, e2el); ``"<="``: left at most right (a
#: right side in :data:`_DERIVED` computed from the result); ``"std 0"``: the metric's std 0 only where its median and
#: percentiles are one value. Issue 47, round 11: a median, mean or p90 e2el below the ttft's, a p99 e2el past the
#: duration, a std 0 beside a spread, 50000 peak tokens/s of a pass of 40960 tokens and 500 peak concurrent requests
#: of 160 were proven. (The peak concurrency counts the requests active in a 1 s bucket: above ``max_concurrency``.)
RELATIONS = (
    ("{s}_ttft_ms", "<=", "{s}_e2el_ms", "a request's latency runs to its last chunk and its ttft to its first, so "
                                         "each statistic of e2el is at least the same one of ttft"),
    ("{s}_e2el_ms", "<=", "duration_ms", "every request runs within the pass (benchmark_duration spans them all)"),
    ("max_output_tokens_per_s", "<=", "chunks", "its busiest 1 s bucket counts a token per streamed chunk (the "
                                                "first and one per itl): at most the output tokens and a closing "
                                                "chunk per completed request"),
    ("max_concurrent_requests", "<=", "completed", "its busiest 1 s bucket counts each completed request once"),
    ("std_{m}_ms", "std 0", "{s}_{m}_ms", "np.std of a list is 0 only where its values are one value"),
)
#: The right sides of :data:`RELATIONS` computed from the result: ``{name: (what it is, how)}``.
_DERIVED = {"duration_ms": ("its duration in ms", lambda r: float(r["duration"]) * 1000),
            "chunks": ("its total_output_tokens + completed", lambda r: r["total_output_tokens"] + r["completed"])}
_METRICS = ("ttft", "tpot", "itl", "e2el")


def _side(res: dict, template: str, metric: str) -> dict[str, tuple[str, float]]:
    """The figures of ``res`` that one side of a relation names: ``{statistic or "": (name, value)}``."""
    if template in _DERIVED:
        try:
            v = _DERIVED[template][1](res)
        except (KeyError, TypeError, ValueError):
            return {}
        return {"": (_DERIVED[template][0], v)} if _num(v) else {}
    stats = [m[1] for k in res if (m := LATENCY.match(str(k))) and m[1] != "std"] if "{s}" in template else [""]
    names = {s: template.format(s=s, m=metric) for s in stats}
    return {s: (n, res[n]) for s, n in names.items() if _num(res.get(n)) and not math.isnan(res[n])}


def _relation_problems(where: str, res: dict) -> list[str]:
    """One result against :data:`RELATIONS`, one line per figure that breaks one."""
    out = []
    for left, rel, right, why in RELATIONS:
        for metric in _METRICS if "{m}" in left else ("",):
            lhs, rhs = _side(res, left, metric), _side(res, right, metric)
            if rel == "std 0":
                spread = {n: v for s, (n, v) in rhs.items() if s != "mean"}
                out += [f"{where}.{n} 0, yet its {spread} differ (vLLM: {why})" for n, v in lhs.values()
                        if v == 0 and len(set(spread.values())) > 1]
                continue
            for s, (n, v) in lhs.items():
                rn, rv = rhs.get(s) or rhs.get("") or (None, None)
                if rn is not None and v > rv * (1 + 1e-9):
                    out.append(f"{where}.{n} {v!r} is more than {rn if right in _DERIVED else 'its ' + rn} {rv!r}; "
                               f"accepted: at most that (vLLM: {why})")
    return out


def _same_prompts_problems(rec: dict) -> list[str]:
    """Every pass of the record with all its requests completed the same ``total_input_tokens``: one load (its
    ``dataset_args``, ``seed`` and the model's tokenizer) samples the same prompts for each (``get_samples``), and
    vLLM sums the server's ``prompt_tokens`` of each completed request (``calculate_metrics``)."""
    asked = _dict(rec.get("load")).get("num_prompts")
    first, out = None, []
    for k in live_server_runs(rec):
        for i, res in enumerate(_list(_dict(rec.get("repeats")).get(k))):
            if not (isinstance(res, dict) and res.get("completed") == asked and res.get("failed") == 0
                    and _num(res.get("total_input_tokens"))):
                continue
            if first is None:
                first = (f"repeats.{k}[{i}]", res["total_input_tokens"])
            elif res["total_input_tokens"] != first[1]:
                out.append(f"repeats.{k}[{i}].total_input_tokens {res['total_input_tokens']!r}, {first[0]}'s "
                           f"{first[1]!r}: every pass completing the load sends its same prompts (one dataset, seed "
                           f"and tokenizer)")
    return out


#: The date format of vLLM's result (``vllm/benchmarks/serve.py``: ``datetime.now().strftime(...)``, local time).
VLLM_DATE = "%Y%m%d-%H%M%S"


def _when(text, vllms: bool = False) -> datetime.datetime | None:
    """A date as the header (ISO 8601, no zone: UTC) or, ``vllms``, vLLM's result (:data:`VLLM_DATE`; its local
    time, read as UTC) writes it; None for another text."""
    if not vllms:
        return header_time(text)
    try:
        return datetime.datetime.strptime(str(text), VLLM_DATE).replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


def result_problems(rec: dict) -> list[str]:
    """Each of vLLM's results of a live-server serving benchmark against itself, the load, its run's server and the
    session's date (module docstring), one line each."""
    load, env = _dict(rec.get("load")), _dict(rec.get("environment"))
    start, wall = _when(env.get("date")), rec.get("wall_s")
    zone = datetime.timedelta(hours=14, seconds=wall if _num(wall) and not math.isnan(wall) else 0)
    out = []
    for k, run in live_server_runs(rec).items():
        models = {_served_model(s) for s in _list(run.get("servers")) if isinstance(s, dict)} - {None}
        for i, res in enumerate(_list(_dict(rec.get("repeats")).get(k))):
            if not isinstance(res, dict):
                continue
            where = f"repeats.{k}[{i}]"
            out += _finite_problems(where, res) + _rate_problems(where, res) + _token_problems(where, res, load)
            out += _latency_problems(where, res)
            out += _relation_problems(where, res)
            out += [f"{where}.{f} {res[f]!r}, the load's {load[f]!r}" for f in ("max_concurrency", "num_prompts")
                    if f in res and f in load and res[f] != load[f]]
            out += _echo_problems(where, run, i + 1, res)
            if "model_id" in res and models and res["model_id"] not in models:
                out.append(f"{where}.model_id {res['model_id']!r}, the run's server serves {sorted(models)}")
            when = _when(res.get("date"), vllms=True) if "date" in res else None
            if "date" in res and when is None:
                out.append(f"{where}.date {res['date']!r} is not vLLM's; accepted: a date as {VLLM_DATE!r}")
            elif "date" in res and start and not start - zone <= when <= start + zone:
                out.append(f"{where}.date {res['date']!r} is not within the session of {env.get('date')} "
                           f"(its wall time and 14 hours of time zone either side)")
    return out + _same_prompts_problems(rec)


#: vLLM's result fields that echo its pass's command line (``vllm/benchmarks/serve.py`` ``main_async``, "Setup" and
#: "Traffic": ``endpoint_type`` and ``backend`` both ``--backend``; ``tokenizer_id`` ``--tokenizer``, else the model,
#: None with ``--skip-tokenizer-init``), and the numbers among them.
ECHOED = {"backend": "--backend", "endpoint_type": "--backend", "label": "--label", "model_id": "--model",
          "tokenizer_id": "--tokenizer", "request_rate": "--request-rate", "burstiness": "--burstiness"}
_NUMBERS = ("request_rate", "burstiness")
#: vLLM's result fields that are null unless the pass's command gives an option (``main_async``'s result:
#: ``"request_goodput": metrics.request_goodput if goodput_config_dict else None``; issue 47, round 11: a goodput
#: of a pass without ``--goodput`` was proven).
ONLY_WITH = {"request_goodput": "--goodput"}
#: What :func:`_vllm_default` answers where vLLM cannot be imported.
_UNKNOWN = object()


def _echo_problems(where: str, run: dict, repeat: int, res: dict) -> list[str]:
    """vLLM's result of one repeat against its pass's command line (:data:`ECHOED`): each field the option the
    command gives, else the default of ``vllm bench serve``'s parser (read from vLLM's ``add_cli_args``)."""
    cmds = [[str(c) for c in _list(_dict(p.get("timed")).get("command"))] for p in _list(run.get("passes"))
            if isinstance(p, dict) and p.get("repeat") == repeat]
    if len(cmds) != 1:
        return []
    c, out = cmds[0], []
    given = {o: c[c.index(o) + 1] for o in set(ECHOED.values()) if o in c[:-1]}
    for f, opt in ECHOED.items():
        if f not in res:
            continue
        if opt in given:
            asked, said = given[opt], f"{opt} {given[opt]}"
        elif f == "tokenizer_id":
            asked = None if "--skip-tokenizer-init" in c else given.get("--model", _UNKNOWN)
            said = f"no --tokenizer: {'--skip-tokenizer-init' if asked is None else f'its --model {asked}'}"
        else:
            asked = _vllm_default(opt[2:].replace("-", "_"))
            said = f"no {opt}: vLLM's default {asked!r}"
        if asked is _UNKNOWN:
            continue
        try:
            same = float(res[f]) == float(asked) if f in _NUMBERS else res[f] == asked
        except (TypeError, ValueError):
            same = False
        if not same:
            out.append(f"{where}.{f} {res[f]!r}, its pass's command asks {said}")
    return out + [f"{where}.{f} {res[f]!r}, its pass's command gives no {opt}; accepted: null (vLLM writes a {f} "
                  f"only under {opt})" for f, opt in ONLY_WITH.items() if res.get(f) is not None and opt not in c]


@functools.lru_cache(maxsize=None)
def _vllm_default(dest: str):
    """The default of ``vllm bench serve``'s option ``dest`` (``vllm/benchmarks/serve.py`` ``add_cli_args``), or
    :data:`_UNKNOWN` where vLLM cannot be imported."""
    import argparse

    try:
        from vllm.benchmarks.serve import add_cli_args
    except ImportError:
        return _UNKNOWN
    p = argparse.ArgumentParser(add_help=False)
    add_cli_args(p)
    return p.get_default(dest)


def _served_model(server: dict) -> str | None:
    """The model a ``vllm serve`` command line serves (the word after ``serve``)."""
    cmd = [str(c) for c in _list(server.get("command"))]
    return cmd[cmd.index("serve") + 1] if "serve" in cmd[:-1] else None


def server_command_problems(rec: dict) -> list[str]:
    """Each server's command line against its run and the record: ``--attention-backend`` the one launch gives the
    run's run spec (:func:`sparse_mla.launch.engine.attention_config`: ``CUSTOM`` for ours, none for ``auto``), the
    model it serves the record's (``model.path`` its name), each pass's ``--model`` and ``--base-url`` port its."""
    from ..errors import UserInputError
    from ..launch.engine import attention_config
    from ..launch.specs import parse_run_spec

    path = _dict(rec.get("model")).get("path")
    out = []
    for k, run in live_server_runs(rec).items():
        try:
            want = (attention_config(parse_run_spec(run.get("run_spec") or run.get("backend_requested")).backend)
                    or {}).get("backend")
        except (UserInputError, AttributeError, TypeError):
            want = "?"
        for i, s in enumerate(x for x in _list(run.get("servers")) if isinstance(x, dict)):
            cmd, where = [str(c) for c in _list(s.get("command"))], f"runs.{k}.servers[{i}].command"
            got = cmd[cmd.index("--attention-backend") + 1] if "--attention-backend" in cmd[:-1] else None
            if cmd and want != "?" and got != want:
                out.append(f"{where}: {f'--attention-backend {got}' if got else 'no --attention-backend'}, the run "
                           f"spec {run.get('run_spec')!r} is served with {want or 'none (vLLM chooses)'}")
            model = _served_model(s)
            if model is not None and isinstance(path, str) and Path(model).name != path:
                out.append(f"{where}: serves {model!r}, the record's model.path {path!r}")
            out += _client_problems(f"runs.{k}", run, s, cmd)
            out += _client_load_problems(f"runs.{k}", run, s, _dict(rec.get("load")),
                                         _dict(rec.get("server")).get("server_timeout_s"))
    return out + _port_problems(rec) + rebuilt_server_problems(rec)


def _options(cmd: list[str]) -> dict[str, list[str | None]]:
    """A ``vllm serve`` command line after its model as ``{option: [its values]}`` (a flag's value None): the parsed
    form two command lines are compared in, the order of their options aside."""
    out: dict[str, list[str | None]] = {}
    for i, a in enumerate(cmd):
        if a.startswith("--"):
            v = cmd[i + 1] if i + 1 < len(cmd) and not cmd[i + 1].startswith("--") else None
            out.setdefault(a, []).append(v)
        elif i == 0 or not cmd[i - 1].startswith("--"):
            out.setdefault("(word)", []).append(a)
    return out


def rebuilt_server_problems(rec: dict) -> list[str]:
    """Each server's command line against the one the writer builds for its run (:func:`sparse_mla.bench.serve.
    start_server`: :func:`sparse_mla.launch.engine.serve_command` of the run's run spec and speculative config, the
    server block's sizes, :data:`~sparse_mla.bench.serve.SERVER_EXTRA`) with the model and port the command itself
    names, compared as parsed options (:func:`_options`): every flag at once -- the served model name and host of
    :mod:`sparse_mla.launch` that every pass asks, seed 0, the worker extension that collects ``ran``. A GGUF's
    ``--tokenizer`` folder is taken as the command gives it where the model's name does not say GGUF (the writer
    reads the file). Issue 47, round 11: ``--served-model-name glm6``, ``--seed 7``, ``--host 0.0.0.0`` and no
    ``--worker-extension-cls`` were proven."""
    from ..bench.serve import SERVER_EXTRA
    from ..diagnose.gguf_config import serve_flags
    from ..errors import UserInputError
    from ..launch.engine import serve_command
    from ..launch.specs import parse_run_spec

    srv, out = _dict(rec.get("server")), []
    keys = ("kv_cache_dtype", "tp", "enforce_eager", "max_model_len", "gpu_memory_utilization")
    if not all(k in srv for k in (*keys, "max_num_seqs")):
        return []
    for k, run in live_server_runs(rec).items():
        for i, s in enumerate(x for x in _list(run.get("servers")) if isinstance(x, dict)):
            cmd = [str(c) for c in _list(s.get("command"))]
            model = _served_model(s)
            if model is None or "--port" not in cmd[:-1]:
                continue
            try:
                want = serve_command(model, parse_run_spec(run.get("run_spec")), int(cmd[cmd.index("--port") + 1]),
                                     speculative_config=run.get("speculative_config"),
                                     max_num_seqs=srv["max_num_seqs"], extra=SERVER_EXTRA,
                                     **{f: srv[f] for f in keys})
            except (UserInputError, TypeError, ValueError, AttributeError):
                continue
            gguf = serve_flags(Path(model).parent)
            if cmd[3:3 + len(gguf)] == gguf and want[3:3 + len(gguf)] != gguf:
                want[3:3] = gguf
            have, need = _options(cmd), _options([str(w) for w in want])
            bad = [f"{o} {' '.join(str(v) for v in have.get(o, ['absent']) if v is not None) or 'given'} where the "
                   f"writer puts {' '.join(str(v) for v in need.get(o, ['none']) if v is not None) or o}"
                   for o in dict.fromkeys([*need, *have]) if have.get(o) != need.get(o)]
            if bad:
                out.append(f"runs.{k}.servers[{i}].command: {'; '.join(bad)} (launch.engine.serve_command for the "
                           f"run spec {run.get('run_spec')!r} and the record's server block)")
    return out


def _port_problems(rec: dict) -> list[str]:
    """The servers live at once (``bench_serve`` starts one per run and stops none before the last pass; not those
    that failed to start, nor the 2026-12-03 writer's server per repeat) each on a port of its own."""
    seen: dict[str, str] = {}
    out = []
    for k, run in live_server_runs(rec).items():
        for i, s in enumerate(x for x in _list(run.get("servers")) if isinstance(x, dict)):
            cmd = [str(c) for c in _list(s.get("command"))]
            if "error" in s or "repeat" in s or "--port" not in cmd[:-1]:
                continue
            port, where = cmd[cmd.index("--port") + 1], f"runs.{k}.servers[{i}]"
            if port in seen:
                out.append(f"{where}.command: --port {port}, the port of {seen[port]}, live at the same time")
            seen.setdefault(port, where)
    return out


def _client_load_problems(where: str, run: dict, server: dict, load: dict, ready=None) -> list[str]:
    """Each ``vllm bench serve`` pass's command line (warm-up and timed) the one the writer builds for the record's
    load (:func:`sparse_mla.bench.vllm_client.bench_argv`: its dataset arguments, a ``repeat`` dataset's prompts
    file in the result folder, where :func:`sparse_mla.bench.serve.bench_serve` writes it; prompts, concurrency,
    seed), the pass's ``result_file`` and the server block's ``server_timeout_s`` ``ready`` (the ready time-out; else
    the command's own), with the address, model and result folder the command itself names (issue 47, round 8:
    ``--max-concurrency 64``, ``--num-prompts 16``, ``--seed 7`` and another run's result file beside a load of 32,
    160 and 0 were proven)."""
    from ..bench.vllm_client import bench_argv

    keys = ("dataset_args", "num_prompts", "max_concurrency", "seed")
    if not all(k in load for k in keys):
        return []
    passes = [("warmup", _dict(server.get("warmup")))]
    passes += [(f"passes[{j}].timed", _dict(_dict(p).get("timed"))) for j, p in enumerate(_list(run.get("passes")))]
    out = []
    for name, p in passes:
        c = [str(x) for x in _list(p.get("command"))]
        named = {o: c[c.index(o) + 1] for o in ("--base-url", "--model", "--served-model-name", "--result-dir",
                                                "--ready-check-timeout-sec") if o in c[:-1]}
        if len(named) < 5 or not isinstance(p.get("result_file"), str):
            continue
        data = list(_list(load["dataset_args"]))
        if "--dataset-path" in data[:-1]:     # the prompts file the writer wrote beside the record, vLLM's results
            data[data.index("--dataset-path") + 1] = str(Path(named["--result-dir"]) / data[data.index(
                "--dataset-path") + 1])
        try:
            want = ["vllm", "bench", "serve", *bench_argv(
                named["--base-url"], named["--model"], named["--served-model-name"], data,
                num_prompts=load["num_prompts"], max_concurrency=load["max_concurrency"], seed=load["seed"],
                result_path=Path(named["--result-dir"]) / p["result_file"],
                ready_timeout_s=float(ready if _num(ready) else named["--ready-check-timeout-sec"]))]
        except (TypeError, ValueError):
            continue
        if c != want:
            diff = next(i for i, (a, b) in enumerate(zip(c + [None] * len(want), want + [None] * len(c))) if a != b)
            out.append(f"{where}.{name}.command: {' '.join(c[max(0, diff - 1):diff + 1])!r} where the writer puts "
                       f"{' '.join(map(str, want[max(0, diff - 1):diff + 1]))!r} for the record's load and result_file")
    return out


def _client_problems(where: str, run: dict, server: dict, cmd: list[str]) -> list[str]:
    """The ``vllm bench serve`` passes of a run's server (its warm-up and timed passes) asking its model at its
    port."""
    port = cmd[cmd.index("--port") + 1] if "--port" in cmd[:-1] else None
    model, out = _served_model(server), []
    passes = [("warmup", _dict(server.get("warmup")))]
    passes += [(f"passes[{j}].timed", _dict(_dict(p).get("timed"))) for j, p in enumerate(_list(run.get("passes")))]
    for name, p in passes:
        c = [str(x) for x in _list(p.get("command"))]
        asked = {o: c[c.index(o) + 1] for o in ("--model", "--base-url") if o in c[:-1]}
        if model and "--model" in asked and asked["--model"] != model:
            out.append(f"{where}.{name}: --model {asked['--model']}, its server serves {model}")
        if port and "--base-url" in asked and not asked["--base-url"].rstrip("/").endswith(f":{port}"):
            out.append(f"{where}.{name}: --base-url {asked['--base-url']}, its server listens on port {port}")
    return out


def session_time_problems(rec: dict) -> list[str]:
    """The session's ``wall_s`` at least what it ran one after another: each server's start and warm-up (its
    ``wall_s``) and every timed pass (their ``seconds``), to the 0.1 s each is rounded to; each server's ``wall_s`` at
    least its ``server_up_s`` and its warm-up's ``seconds`` (``start_server`` times both within it)."""
    wall, runs = rec.get("wall_s"), live_server_runs(rec)
    out = [f"runs.{k}.servers[{i}].wall_s {s['wall_s']!r}, less than its server_up_s {s['server_up_s']!r} and its "
           f"warm-up's {_dict(s.get('warmup')).get('seconds', 0)!r} s (the writer's wall_s spans both)"
           for k, r in runs.items() for i, s in enumerate(x for x in _list(r.get("servers")) if isinstance(x, dict))
           if all(_num(s.get(f)) for f in ("wall_s", "server_up_s"))
           and s["wall_s"] + 0.15 < s["server_up_s"] + _seconds(_dict(s.get("warmup")).get("seconds"))]
    if not _num(wall) or math.isnan(wall) or not runs:
        return out
    servers = [s.get("wall_s") for r in runs.values() for s in _list(r.get("servers")) if isinstance(s, dict)]
    timed = [_dict(_dict(p).get("timed")).get("seconds") for r in runs.values() for p in _list(r.get("passes"))]
    parts = [x for x in servers + timed if _num(x) and not math.isnan(x)]
    if wall + 0.1 * len(parts) < sum(parts):
        return out + [f"wall_s {wall!r}: the session ran {len(servers)} server(s) and {len(timed)} timed pass(es) "
                      f"one after another, {sum(parts):.1f} s"]
    return out


def _seconds(x) -> float:
    return x if _num(x) and not math.isnan(x) else 0.0


def load_problems(rec: dict) -> list[str]:
    """The load's prompt lengths the model's: ``input_lengths`` :func:`sparse_mla.bench.serve.input_length_range` of
    ``model.index_topk`` and a random dataset's ``--random-input-len`` that index_topk (the writer sizes the prompts
    around the indexer's top-k, so that the sparse selection binds)."""
    from ..bench.serve import input_length_range

    topk, load = _dict(rec.get("model")).get("index_topk"), _dict(rec.get("load"))
    if not live_server_runs(rec):
        return []
    out = _greedy_problems(rec, load) + _prompts_problems(load, topk)
    if not is_int(topk) or topk < 1:
        return out
    out += [f"load.input_lengths {load['input_lengths']!r}, the model's index_topk {topk} gives "
           f"{list(input_length_range(topk))}" for _ in [0]
           if "input_lengths" in load and load["input_lengths"] != list(input_length_range(topk))]
    args = [str(a) for a in _list(load.get("dataset_args"))]
    if "--random-input-len" in args[:-1] and args[args.index("--random-input-len") + 1] != str(topk):
        out.append(f"load.dataset_args: --random-input-len {args[args.index('--random-input-len') + 1]}, the model's "
                   f"index_topk {topk}")
    return out


def _prompts_problems(load: dict, topk) -> list[str]:
    """The load's ``prompts_file`` the name of the file the writer wrote for the ``repeat`` dataset, None for
    ``random`` (:func:`sparse_mla.bench.serve.bench_serve`); its ``dataset_args``
    :func:`sparse_mla.bench.serve.dataset_args` of its dataset, the model's ``index_topk``, its ``output_len`` and
    that file."""
    from ..bench.serve import DATASETS, dataset_args

    ds, name = load.get("dataset"), load.get("prompts_file")
    if ds not in DATASETS or "prompts_file" not in load:
        return []
    if (ds == "repeat") != isinstance(name, str) or name == "":
        return [f"load.prompts_file {name!r} with the dataset {ds!r}; accepted: "
                + ("the name of the prompts file the writer wrote" if ds == "repeat" else
                   "None (the writer writes a prompts file only for the 'repeat' dataset)")]
    if not (is_int(topk) and is_int(load.get("output_len")) and "dataset_args" in load):
        return []
    want = dataset_args(ds, topk, load["output_len"], name and Path(name))
    return [] if load["dataset_args"] == want else [
        f"load.dataset_args {load['dataset_args']}, the writer's {want} (its dataset {ds!r}, the model's index_topk "
        f"{topk}, its output_len {load['output_len']})"]


def _greedy_problems(rec: dict, load: dict) -> list[str]:
    """What the writer writes whatever the command: the load's :data:`sparse_mla.bench.serve.GREEDY` fields and its
    warm-up of ``output_len`` tokens; ``server.prefix_caching`` as :data:`~sparse_mla.bench.serve.SERVER_EXTRA`
    leaves it and each server's command with it."""
    from ..bench.serve import GREEDY, SERVER_EXTRA

    out = [f"load.{k} {load[k]!r}; accepted: {v!r} (every pass is greedy and ignores EOS, bench.serve.GREEDY)"
           for k, v in GREEDY.items() if k in load and not (load[k] == v and type(load[k]) is type(v))]
    if "warmup_output_len" in load and load["warmup_output_len"] != load.get("output_len"):
        out.append(f"load.warmup_output_len {load['warmup_output_len']!r}, its output_len {load.get('output_len')!r}")
    srv, flag = _dict(rec.get("server")), "--no-enable-prefix-caching"
    if "prefix_caching" in srv and srv["prefix_caching"] is not (flag not in SERVER_EXTRA):
        out.append(f"server.prefix_caching {srv['prefix_caching']!r}; accepted: {flag not in SERVER_EXTRA!r} (the "
                   f"servers run with {flag}, bench.serve.SERVER_EXTRA)")
    out += [f"runs.{k}.servers[{i}].command: {flag} " + ("absent" if srv.get("prefix_caching") is False else
                                                         "given") + f", the record's server.prefix_caching "
            f"{srv.get('prefix_caching')!r}" for k, r in live_server_runs(rec).items()
            for i, s in enumerate(x for x in _list(r.get("servers")) if isinstance(x, dict))
            if isinstance(s.get("command"), list) and isinstance(srv.get("prefix_caching"), bool)
            and (flag in s["command"]) is srv["prefix_caching"]]
    return out


def speculation_problems(rec: dict) -> list[str]:
    """The top level's ``speculative_config`` the one of each run that has one, and none where none has
    (:func:`sparse_mla.bench.serve.plan_runs`: each run spec plain, then under the session's one config)."""
    runs = live_server_runs(rec)
    if not runs or "speculative_config" not in rec:
        return []
    top, got = rec["speculative_config"], [(k, r.get("speculative_config")) for k, r in runs.items()]
    out = [f"runs.{k}.speculative_config {c!r}, the record's speculative_config {top!r}" for k, c in got
           if c is not None and c != top]
    if top and all(c is None for _, c in got):
        out.append(f"speculative_config {top!r}, yet no run is served with it")
    return out


def serving_result_problems(rec: dict) -> list[str]:
    """Every line of this module's checks; ``[]`` for a record that is no live-server serving benchmark."""
    return result_problems(rec) + server_command_problems(rec) + session_time_problems(rec) + load_problems(rec) + \
        speculation_problems(rec)
