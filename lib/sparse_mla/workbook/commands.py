"""An engine record against its own command line: what ``sparse-mla launch`` was asked (``environment.command``,
parsed by launch's own argument parser) against what the record holds.

``records check`` otherwise judges the runs a record holds, and a run asked for but never written (``--backends
A,B,C`` with runs A and B), another KV cache, TP, prompt lengths or token budget, or a command of another tool,
passed unseen (issue 47, round 7). A record whose command is not ``sparse-mla launch ...`` as written by
:func:`sparse_mla.records.environment` (``python: sparse_mla (called from ...)`` from a notebook, none in the earliest
records) is not compared.
"""
from __future__ import annotations

import argparse
import shlex

from ..layouts import FP8_KV_CACHE_DTYPES

#: Top-level keys of a serving benchmark's record (``sparse-mla bench serve``), whose command is not launch's.
SERVE_KEYS = ("repeats", "load")


def parsed_launch(command: str) -> argparse.Namespace | str | None:
    """``command`` parsed by ``sparse-mla launch``'s parser (:func:`sparse_mla.launch.engine.add_cli`): the namespace,
    a line saying why it does not parse, or None where ``command`` is no ``sparse-mla ...`` command line."""
    from ..launch.engine import add_cli

    try:
        words = shlex.split(command)
    except ValueError as e:
        return f"environment.command does not parse as a shell line ({e})"
    if len(words) < 2 or words[0] not in ("sparse-mla", "python3 -m sparse_mla"):
        return None
    if words[1] != "launch":
        return f"environment.command is `sparse-mla {words[1]} ...`; an engine record's is `sparse-mla launch ...`"
    parser = argparse.ArgumentParser(prog="sparse-mla", exit_on_error=False, add_help=False)
    add_cli(parser.add_subparsers())
    try:
        args, extra = parser.parse_known_args(words[1:])
    except (argparse.ArgumentError, SystemExit) as e:
        return f"environment.command is no launch command line launch's parser takes ({e})"
    return f"environment.command has arguments launch does not take: {extra}" if extra else args


def _same_kv(a, b) -> bool:
    return a == b or (a in FP8_KV_CACHE_DTYPES and b in FP8_KV_CACHE_DTYPES)


def command_problems(rec: dict) -> list[str]:
    """What in engine record ``rec`` contradicts its ``environment.command`` (module docstring), one line each: the
    runs (the parity plan of ``--backends``, ``--eager-only``, ``--speculative-config``:
    :func:`sparse_mla.launch.engine.parity_plan`), or the one engine's run spec; ``--prompt-lengths`` against the
    prompts generated; ``--max-tokens`` against the tokens each generated; ``--kv-cache-dtype`` and ``--tp``."""
    env = rec.get("environment") if isinstance(rec.get("environment"), dict) else {}
    cmd = env.get("command")
    if not isinstance(cmd, str) or any(k in rec for k in SERVE_KEYS):
        return []
    args = parsed_launch(cmd)
    if args is None or isinstance(args, str):
        return [] if args is None else [args]
    out = _run_problems(rec, args)
    runs = rec["runs"] if isinstance(rec.get("runs"), dict) else {}
    lens = [int(n) for n in str(args.prompt_lengths).split(",") if n.strip().isdigit()]
    for name, run in [*runs.items(), ("(the record)", rec)]:
        if not isinstance(run, dict):
            continue
        kv = run.get("kv_cache_dtype")
        if isinstance(kv, str) and not _same_kv(kv, args.kv_cache_dtype):
            out.append(f"{name}: kv_cache_dtype {kv!r}, the command asked --kv-cache-dtype {args.kv_cache_dtype}")
        for g in run.get("generations") or []:
            if not isinstance(g, dict):
                continue
            if isinstance(g.get("prompt_len"), int) and lens and g["prompt_len"] not in lens:
                out.append(f"{name}: a prompt of {g['prompt_len']} tokens, the command asked --prompt-lengths "
                           f"{args.prompt_lengths}")
            if isinstance(g.get("token_ids"), list) and len(g["token_ids"]) > args.max_tokens:
                out.append(f"{name}: {len(g['token_ids'])} tokens generated, the command asked --max-tokens "
                           f"{args.max_tokens}")
    if isinstance(rec.get("tp"), int) and rec["tp"] != args.tp:
        out.append(f"tp {rec['tp']}, the command asked --tp {args.tp}")
    return list(dict.fromkeys(out))


def _run_problems(rec: dict, args: argparse.Namespace) -> list[str]:
    """The runs ``rec`` holds against the ones ``args`` asked for."""
    from ..launch.engine import parity_plan
    from ..launch.specs import OURS, PEERS, parse_run_spec

    runs = rec["runs"] if isinstance(rec.get("runs"), dict) else {}
    if not args.parity:
        asked = parse_run_spec(args.backend)
        said = rec.get("run") or rec.get("backend_requested")
        return [f"the engine ran {said!r}, the command asked --backend {args.backend}"] \
            if isinstance(said, str) and said not in (asked.name, asked.backend) else []
    names = str(args.backends).split(",") if args.backends else [OURS, *PEERS]
    specs = tuple(dict.fromkeys(parse_run_spec(n).name for n in names if n.strip()))
    plan = {k for k, *_ in parity_plan(specs, graph=not args.eager_only, speculative=bool(args.speculative_config))}
    if set(runs) != plan:
        return [f"runs {sorted(runs)}, the command's parity plan {sorted(plan)}"]
    return []
