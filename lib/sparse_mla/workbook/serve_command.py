"""A serving benchmark's record (``sparse-mla bench serve``, the live-server method) against its own command line:
what ``environment.command`` asked, parsed by the CLI's own ``bench serve`` parser (:func:`sparse_mla.bench.cli.add_cli`)
and derived as the writer derives it (:func:`sparse_mla.bench.serve.asked_load`, ``speculative_request``,
``plan_runs``, ``rotated``, ``record_place``'s tag), against what the record holds.

Issue 47, round 9: a header command with other ``--backends``, ``--num-prompts``, ``--kv-cache-dtype``, ``--eager``,
``--model``, ``--speculative``, ``--seed``, ``--tag``, an option ``bench serve`` refuses, or a command of another tool
was proven. A record whose command is ``python: sparse_mla (called from ...)`` (a script calling
:func:`sparse_mla.bench.serve.bench_serve`, :func:`sparse_mla.records.cli_command`) is not compared; the engine records'
commands are :mod:`sparse_mla.workbook.commands`'.

Issue 47, round 10: a command in a form the writer never writes (``python -m sparse_mla bench serve ...``,
``/usr/local/bin/sparse-mla ...``: :func:`~sparse_mla.records.cli_command` writes ``sparse-mla ...`` for both) was
not compared and proven; a ``--server-timeout`` the command refuses, a ``gpu_memory_utilization`` other than
:func:`sparse_mla.bench.serve.server_memory_share` of the runs, and vLLM's result files in another folder than
``--out-dir`` were proven.
"""
from __future__ import annotations

import argparse

from .commands import parsed_cli
from .serving import live_server_runs


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def parsed_serve(command: str) -> argparse.Namespace | str | None:
    """``command`` parsed by ``sparse-mla bench serve``'s parser (:func:`sparse_mla.bench.cli.add_cli`,
    :func:`sparse_mla.workbook.commands.parsed_cli`)."""
    from ..bench.cli import add_cli

    return parsed_cli(command, ("bench", "serve"), add_cli, "a serving benchmark's")


def asked(args: argparse.Namespace, gpu) -> dict | str:
    """What the parsed command ``args`` makes the writer write (:func:`sparse_mla.bench.serve.cli_run`): ``runs``
    (the run specs), ``plan`` keys, ``order``, ``load`` (its fields), ``server`` fields, ``memory_share`` (each
    server's ``gpu_memory_utilization``: the CLI gives :func:`~sparse_mla.bench.serve.server_memory_share` of the
    runs), ``speculative_config``, ``model`` (the checkpoint's name) and ``tag`` (``--tag``, else the header GPU's
    :func:`gpu_slug`); or the line of the writer's own check that refuses a value
    (:func:`sparse_mla.bench.serve.check_timeouts` among them)."""
    from pathlib import Path

    from ..bench.serve import asked_load, check_timeouts, plan_runs, rotated, server_memory_share, speculative_request
    from ..errors import UserInputError
    from ..launch.specs import normalize_backends
    from ..layouts import check_kv_cache_dtype
    from ..records import gpu_slug

    try:
        kv = check_kv_cache_dtype(args.kv_cache_dtype)
        runs = normalize_backends([b for b in str(args.backends).split(",") if b.strip()])
        spec = speculative_request(args.speculative, args.speculative_config, None)
        load = asked_load(args, spec)
        check_timeouts(args)
    except UserInputError as e:
        return f"environment.command: {e}"
    plan = [k for k, _, _ in plan_runs(runs, spec)]
    return {"runs": list(runs), "plan": plan, "order": rotated(plan, load.repeats), "load": dict(load.__dict__),
            "speculative_config": spec, "model": Path(args.model).name, "memory_share": server_memory_share(len(plan)),
            "tag": args.tag or (gpu_slug(gpu) if isinstance(gpu, str) else None),
            "server": {"kv_cache_dtype": kv, "tp": args.tp, "enforce_eager": bool(args.eager),
                       "cuda_graphs": not args.eager, "max_num_seqs": load.max_concurrency,
                       "server_timeout_s": args.server_timeout, "bench_timeout_s": args.bench_timeout}}


def _differ(where: str, have: dict, want: dict) -> list[str]:
    return [f"{where}.{k} {have.get(k)!r}, the command asks {v!r}" for k, v in want.items() if have.get(k) != v]


def serve_command_problems(rec: dict) -> list[str]:
    """What in live-server record ``rec`` contradicts its ``environment.command`` (module docstring), one line each:
    the runs and their order, the baseline, the load, the server block, the speculative config, ``model.path`` and
    the tag in each server's log and each pass's result file."""
    runs = live_server_runs(rec)
    env = _dict(rec.get("environment"))
    if not runs and "load" in rec and isinstance(rec.get("runs"), dict) and isinstance(env.get("command"), str):
        return _earlier_method_problems(rec)
    if not runs or not isinstance(env.get("command"), str):
        return _tag_problems(runs, None)
    args = parsed_serve(env["command"])
    if args is None:                   # the writer's "called from" form: no command line (commands.parsed_cli)
        return _tag_problems(runs, None)
    if isinstance(args, str):
        return [args]
    want = asked(args, env.get("gpu"))
    if isinstance(want, str):
        return [want]
    out = []
    if sorted(rec["runs"]) != sorted(want["plan"]):          # the order is the record's ``order``
        out.append(f"runs {list(rec['runs'])}, the command asks {want['plan']}")
    if rec.get("order") != want["order"]:
        out.append(f"order {rec.get('order')}, the command's runs {want['plan']} rotated over its "
                   f"{want['load']['repeats']} repeats give {want['order']}")
    if rec.get("baseline") != want["runs"][0]:
        out.append(f"baseline {rec.get('baseline')!r}, the command's first run {want['runs'][0]!r}")
    out += _differ("load", _dict(rec.get("load")), want["load"])
    out += _differ("server", _dict(rec.get("server")), want["server"])
    share = _dict(rec.get("server")).get("gpu_memory_utilization", want["memory_share"])
    if share != want["memory_share"]:
        out.append(f"server.gpu_memory_utilization {share!r}, the writer's share of the GPU for the command's "
                   f"{len(want['plan'])} runs {want['memory_share']!r} (bench.serve.server_memory_share)")
    if rec.get("speculative_config") != want["speculative_config"]:
        out.append(f"speculative_config {rec.get('speculative_config')!r}, the command asks "
                   f"{want['speculative_config']!r}")
    path = _dict(rec.get("model")).get("path")
    if path != want["model"]:
        out.append(f"model.path {path!r}, the command asks --model {args.model} ({want['model']!r})")
    return out + _tag_problems(runs, want["tag"]) + _result_dir_problems(runs, args.out_dir, env.get("gpu"))


#: The server fields a serving record of the earlier method (the openai client's load, before vLLM's ``bench serve``;
#: ``results/h200/bench_serve_h200*.json``) wrote as its command asked them, as the writer does today.
EARLIER_SERVER = ("kv_cache_dtype", "tp", "enforce_eager", "cuda_graphs", "max_num_seqs", "server_timeout_s")


def _earlier_method_problems(rec: dict) -> list[str]:
    """A serving record of the earlier method (runs without ``servers``, no ``repeats`` object) against its command:
    its speculative config (the record's and each speculating run's method and token count) and the server fields
    of :data:`EARLIER_SERVER` it holds, as today's writer derives them (:func:`asked`); its runs are not held to
    today's plan (that writer kept no run whose server died). Issue 47, round 12 (d35): such a record has no ``ran``
    block, and its command was never compared."""
    from .commands import spec_method

    env = _dict(rec.get("environment"))
    args = parsed_serve(env["command"])
    if args is None:
        return []
    want = args if isinstance(args, str) else asked(args, env.get("gpu"))
    if isinstance(want, str):
        return [want]
    server = _dict(rec.get("server"))
    out = _differ("server", server, {f: want["server"][f] for f in EARLIER_SERVER if f in server})
    said = [("speculative_config", rec.get("speculative_config"))] + [
        (f"runs.{k}.speculative_config", r["speculative_config"]) for k, r in rec["runs"].items()
        if isinstance(r, dict) and r.get("speculative_config") is not None]
    return out + [f"{where} {have!r}, the command asks {want['speculative_config']!r}" for where, have in said
                  if spec_method(have) != spec_method(want["speculative_config"])]


def _tag_problems(runs: dict, tag: str | None) -> list[str]:
    """Each server's log and each pass's result file named after the command's tag and its own run (the writer's
    ``bench_serve_<tag>_<run>...``); where the tag is not known (``tag`` None), the logs after their own run."""
    from ..bench.serve import safe_name

    out = []
    for k, run in runs.items():
        stem = f"bench_serve_{tag}_{safe_name(k)}"
        for i, s in enumerate(x for x in run["servers"] if isinstance(x, dict)):
            for f, want in (("log", f"{stem}.log"), ("bench_log", f"{stem}_bench.log")):
                if tag is None and isinstance(s.get(f), str) and not s[f].endswith(want[len(f"bench_serve_{tag}"):]):
                    out.append(f"runs.{k}.servers[{i}].{f} {s[f]!r}, not the writer's bench_serve_<tag>"
                               f"{want[len(f'bench_serve_{tag}'):]} (the run {k!r})")
                elif f in s and tag is not None and s[f] != want:
                    out.append(f"runs.{k}.servers[{i}].{f} {s[f]!r}, the writer's {want!r} (the command's tag "
                               f"{tag!r}, the run {k!r})")
        for i, p in enumerate(x for x in run.get("passes") or [] if isinstance(x, dict)):
            name = _dict(p.get("timed")).get("result_file")
            if isinstance(name, str) and tag is not None and not name.startswith(f"{stem}_r"):
                out.append(f"runs.{k}.passes[{i}].timed.result_file {name!r}, not the writer's {stem}_r<repeat>.json "
                           f"(the command's tag {tag!r})")
    return out


def _result_dir_problems(runs: dict, out_dir, gpu) -> list[str]:
    """Each pass's ``--result-dir`` the record's folder, where the writer puts vLLM's result files
    (:func:`sparse_mla.bench.cli.record_place`: ``--out-dir`` ``out_dir``, else ``results/<the header GPU's
    slug>``). An ``out_dir`` under ``~`` (expanded on the writer's machine) is held to the folders below it."""
    from pathlib import Path

    from ..records import gpu_record_dir, gpu_slug

    if out_dir is None and not isinstance(gpu, str):
        return []
    want = Path(out_dir) if out_dir is not None else gpu_record_dir(gpu_slug(gpu))
    tail = want.parts[1:] if str(want).startswith("~") else None
    said = f"--out-dir {out_dir}" if out_dir is not None else f"no --out-dir: the header GPU's {want}"
    out = []
    for k, run in runs.items():
        passes = [(f"servers[{i}].warmup", _dict(s).get("warmup")) for i, s in enumerate(run["servers"])]
        passes += [(f"passes[{i}].timed", _dict(p).get("timed")) for i, p in enumerate(run.get("passes") or [])]
        for where, p in passes:
            c = _dict(p).get("command")
            cmd = [str(x) for x in c] if isinstance(c, list) else []
            got = Path(cmd[cmd.index("--result-dir") + 1]) if "--result-dir" in cmd[:-1] else None
            if got is not None and (got.parts[len(got.parts) - len(tail):] != tail if tail is not None
                                    else got != want):
                out.append(f"runs.{k}.{where}.command: --result-dir {got}, the command's {said} (the writer puts "
                           f"vLLM's result files beside the record)")
    return out
