"""An engine record against its own command line: what ``sparse-mla launch`` was asked (``environment.command``,
parsed by launch's own argument parser) against what the record holds.

``records check`` otherwise judges the runs a record holds, and a run asked for but never written (``--backends
A,B,C`` with runs A and B), another KV cache, TP, prompt lengths or token budget, an engine run in another mode
(``enforce_eager: false`` under ``--eager-only``) or with other speculation than the plan's, one engine's record
without its generations, or a command of another tool, passed unseen (issue 47, round 7). A record whose command is
``python: sparse_mla (called from ...)`` (:func:`sparse_mla.records.cli_command`, from a notebook) or absent (the
earliest records) is not compared; one in any other form no writer writes (``python -m sparse_mla launch ...``) is
that line (issue 47, round 10). Each engine of a parity record is also held to its own command, the one its process
ran (:func:`own_command_problems`; issue 47, round 8).
"""
from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from ..layouts import FP8_KV_CACHE_DTYPES
from ..records.values import is_int as _int

#: Top-level keys of a serving benchmark's record (``sparse-mla bench serve``), whose command is not launch's.
SERVE_KEYS = ("repeats", "load")
#: What :func:`parsed_cli` says of a header command in no form :func:`sparse_mla.records.cli_command` writes.
NO_WRITTEN_FORM = "is in no form the writer writes"


class _RaisingParser(argparse.ArgumentParser):
    """An argument parser that raises what it refuses (``argparse.ArgumentError``) where argparse would print its usage
    and exit (a missing positional, an ambiguous abbreviation): ``records check`` reports it on the record's line."""

    def error(self, message):
        raise argparse.ArgumentError(None, message)


def parsed_words(words: list[str], add_arguments, name: str) -> argparse.Namespace | str:
    """``words`` (a command line's arguments after its program) parsed by the command's own parser: ``add_arguments``
    fills an empty ``argparse.ArgumentParser`` (no ``--help``) with the command's arguments (or subcommands) as the
    command does. Returns the namespace (argparse's values: the last of a repeated option, abbreviations as argparse
    expands them), or a line naming ``name`` and what its parser refuses or the arguments it does not take."""
    parser = _RaisingParser(prog=name, exit_on_error=False, add_help=False)
    add_arguments(parser)
    try:
        args, extra = parser.parse_known_args(words)
    except (argparse.ArgumentError, SystemExit) as e:
        return f"environment.command is no {name} command line {name}'s parser takes ({e})"
    return f"environment.command has arguments {name} does not take: {extra}" if extra else args


def shell_words(command: str) -> list[str] | str:
    """``command`` split as a POSIX shell line (``shlex.split``, what ``shlex.join`` wrote), or a line saying why it
    does not split."""
    try:
        return shlex.split(command)
    except ValueError as e:
        return f"environment.command does not parse as a shell line ({e})"


def parsed_cli(command: str, subcommand: tuple[str, ...], add_cli, record: str) -> argparse.Namespace | str | None:
    """``command`` parsed by the parser of ``sparse-mla SUBCOMMAND`` (``add_cli``, the command's own, adding it to a
    subparsers object; :func:`parsed_words`): the namespace, a line saying why it is not such a command (another
    subcommand, named for ``record``'s kind, e.g. "an engine record's"; what the parser refuses; arguments it does
    not take; a command in no form the writer writes), or None where ``command`` is the writer's ``python: sparse_mla
    (called from ...)`` (:func:`sparse_mla.records.called_from`: no command line to compare). The writer
    (:func:`sparse_mla.records.cli_command`) writes nothing else: ``python -m sparse_mla ...`` and
    ``/usr/bin/sparse-mla ...`` are written ``sparse-mla ...`` (issue 47, round 10: e01/e02 were not compared)."""
    from ..records import CALLED_FROM, called_from

    name = " ".join(subcommand)
    if called_from(command):
        return None
    words = shell_words(command)
    if isinstance(words, str):
        return words
    if words[:1] != ["sparse-mla"]:
        return (f"environment.command {command[:80]!r} {NO_WRITTEN_FORM}; accepted: `sparse-mla {name} "
                f"...` or {CALLED_FROM.format('...')!r} (sparse_mla.records.cli_command)")
    if tuple(words[1:1 + len(subcommand)]) != subcommand:
        return (f"environment.command is `sparse-mla {' '.join(words[1:1 + len(subcommand)])} ...`; {record} is "
                f"`sparse-mla {name} ...`")
    return parsed_words(words[1:], lambda p: add_cli(p.add_subparsers()), name)


def parsed_launch(command: str) -> argparse.Namespace | str | None:
    """``command`` parsed by ``sparse-mla launch``'s parser (:func:`sparse_mla.launch.engine.add_cli`,
    :func:`parsed_cli`)."""
    from ..launch.engine import add_cli

    return parsed_cli(command, ("launch",), add_cli, "an engine record's")


def launch_refuses(args: argparse.Namespace) -> list[str]:
    """What ``sparse-mla launch`` refuses in its parsed arguments ``args`` before an engine starts, by its own checks
    (:func:`sparse_mla.launch.engine.check_cli_args`, those that need no checkpoint): one line, or none. A record of
    such a command is none launch writes (issue 47, round 11: ``--backends`` without ``--parity``,
    ``--reference-max-len 0``, prompts longer than ``--max-model-len`` allows were proven)."""
    from ..errors import UserInputError
    from ..launch.engine import check_cli_args

    try:
        check_cli_args(args)
    except UserInputError as e:
        return [f"environment.command's values are none launch takes ({e})"]
    return []


def _same_kv(a, b) -> bool:
    return a == b or (a in FP8_KV_CACHE_DTYPES and b in FP8_KV_CACHE_DTYPES)


def command_problems(rec: dict, plan: bool = True) -> list[str]:
    """What in engine record ``rec`` contradicts its ``environment.command`` (module docstring), one line each: the
    runs (the parity plan of ``--backends``, ``--eager-only``, ``--speculative-config``:
    :func:`sparse_mla.launch.engine.parity_plan`, each run's mode and speculation the plan's), or the one engine's run
    spec, mode, speculation and generations; ``--prompt-lengths`` against the
    prompts generated; ``--max-tokens`` against the tokens each generated; ``--kv-cache-dtype``, ``--tp``,
    ``--max-model-len`` and ``--model`` (``model.path``, :func:`model_name`). ``plan`` False: a parity record's runs
    are not held to today's plan (a record older than ``run_specs``, 2026-12-01, ran another: 0b16541's eager engines
    and a ``+cudagraph`` run, ``results/h200/launch_h200.json``); the rest is compared all the same."""
    env = rec.get("environment") if isinstance(rec.get("environment"), dict) else {}
    cmd = env.get("command")
    if any(k in rec for k in (*SERVE_KEYS, "diagnosis")):
        return []                  # serve_command and diagnosis hold those records to their tools' command lines
    args = parsed_launch(cmd) if isinstance(cmd, str) else None
    if args is None or isinstance(args, str):
        return ([] if args is None else [args]) + own_command_problems(rec, None)
    planned = _run_problems(rec, args) if plan or not args.parity or isinstance(rec.get("run_specs"), dict) else \
        _exempt_run_problems(rec, args)
    out = launch_refuses(args) + planned + own_command_problems(rec, args if args.parity else None)
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
            if isinstance(g.get("token_ids"), list) and len(g["token_ids"]) != args.max_tokens:   # EOS ignored
                out.append(f"{name}: {len(g['token_ids'])} tokens generated, the command asked --max-tokens "
                           f"{args.max_tokens} (launch ignores EOS: every generation has that many)")
    # run_parity writes both as asked; a one-engine record's tp is one_engine_problems'
    for field in ("tp", "max_model_len") if args.parity else ("max_model_len",):
        if isinstance(rec.get(field), int) and rec[field] != getattr(args, field):
            out.append(f"{field} {rec[field]}, the command asked --{field.replace('_', '-')} {getattr(args, field)}")
    out += _reference_problems(rec, args, lens) if args.parity else []
    path = rec["model"].get("path") if isinstance(rec.get("model"), dict) else None
    if isinstance(path, str) and path != model_name(args.model):
        out.append(f"model.path {path!r}, the command asked --model {args.model} ({model_name(args.model)!r})")
    return list(dict.fromkeys(out))


def _reference_problems(rec: dict, args: argparse.Namespace, lens: list[int]) -> list[str]:
    """A parity record's reference comparison against ``--reference-max-len``: ``reference_max_len`` as asked
    (run_parity writes it from the start of the run, since the option came, df7fde4 2026-12-05: a record without it
    is older and its command has none), and each run's ``reference_first_token`` rows the prompts of ``lens`` (the
    command's ``--prompt-lengths``) that the reference judges (:func:`sparse_mla.launch.agreement.split_prompts`),
    in order. Issue 47, round 12 (c08): ``--reference-max-len 100`` on a record without the key, whose reference
    judged 560- and 900-token prompts, was proven."""
    from ..launch.agreement import split_prompts

    asked = args.reference_max_len
    if "reference_max_len" in rec and rec["reference_max_len"] != asked:
        return [f"reference_max_len {rec['reference_max_len']!r}, the command asked --reference-max-len {asked} "
                f"(run_parity writes it as asked)"]
    out = [f"no reference_max_len, the command asked --reference-max-len {asked} (run_parity writes it beside "
           f"the option)"] if "reference_max_len" not in rec and asked is not None else []
    judged = [lens[i] for i in split_prompts([range(n) for n in lens], asked)[0]]
    ref = rec.get("reference_first_token") if isinstance(rec.get("reference_first_token"), dict) else {}
    for k, rows in ref.items():
        have = [r.get("prompt_len") if isinstance(r, dict) else r for r in rows] if isinstance(rows, list) else None
        if have is not None and have != judged:
            out.append(f"reference_first_token.{k} judges the prompts {have}, the command's --prompt-lengths "
                       f"{args.prompt_lengths} and --reference-max-len {asked} give {judged} "
                       f"(launch.agreement.split_prompts)")
    return out


#: The parsed launch arguments that do not say what an engine ran: where it wrote its record.
_NOT_COMPARED = ("json_out", "func", "model", "throughput", "speculative_config")


def parity_record(rec: dict) -> bool:
    """A record of ``launch --parity``: one with ``run_specs`` (its writer since 2026-12-01), or one of the earlier
    writer, which wrote no ``run_specs``, ``parity_baseline`` nor ``parity_pairs`` but the same ``parity_vs_ours``,
    ``reference_first_token`` and ``throughput_tokens_per_s`` (``results/h200/launch_h200.json``, ``launch_tp2.json``,
    ``launch_h200_topk256.json``)."""
    return isinstance(rec.get("runs"), dict) and (isinstance(rec.get("run_specs"), dict) or "parity_vs_ours" in rec)


def own_command_problems(rec: dict, args: argparse.Namespace | None) -> list[str]:
    """Each engine run of a parity record (:func:`parity_record`, also the earlier
    writer's without ``run_specs``) against the command that ran it, its own ``environment.command`` (every engine
    runs in a ``sparse-mla launch`` process of its own): that command is one engine's
    (:func:`one_engine_problems`: its ``--backend`` the run's spec, its mode, speculation, generations and
    throughput batch the run's); and where the record's own command ``args`` (parsed, ``--parity``) is known, it is
    the one the parity run gives that engine (:func:`sparse_mla.launch.engine.engine_args` of the parity plan's entry,
    both read by launch's parser; ``--model`` by its folder and the checkpoint's name, :func:`same_model`). Issue 47,
    round 13 (r02): an earlier record's run whose own command asked 16 tokens beside the parity command's 32 was not
    compared. Its scratch files' names are today's writer's only where the record has ``run_specs`` (the earlier
    writer named ``TRITON_MLA_SPARSE+eager.json``, not ``TRITON_MLA_SPARSE_eager.json``). One line per difference."""
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    if not parity_record(rec):
        return []                          # no parity record: another tool's runs
    want = _engine_commands(args) if args is not None else {}
    if isinstance(want, str):
        return [want]
    from ..launch.engine import engine_files

    out, files = [], {}
    for key, run in runs.items():
        env = run.get("environment") if isinstance(run, dict) else None
        if not isinstance(env, dict) or "command" not in env:
            continue                       # an engine that died writes no header
        own = parsed_launch(env["command"]) if isinstance(env["command"], str) else None
        if own is None or isinstance(own, str) or own.parity:
            out.append(f"{key}: its own command {str(env['command'])[:80]!r} is no one-engine `sparse-mla launch` "
                       f"({own or 'not a sparse-mla command'}); launch runs each engine of a parity run as one")
            continue
        files[key] = (own.json_out, lambda folder, k=key: engine_files(folder, k)[0])
        out += [f"{key}: {p}" for p in one_engine_problems(run, own)]
        mml = rec.get("max_model_len")
        if args is None and isinstance(mml, int) and own.max_model_len != mml:     # run_parity passes its own on
            out.append(f"{key}: its own command asks --max-model-len {own.max_model_len}, the record's max_model_len "
                       f"{mml} (launch.engine.engine_args)")
        w = want.get(key)
        if isinstance(w, argparse.Namespace):
            differ = [f for f in vars(w) if f not in _NOT_COMPARED and getattr(own, f, None) != getattr(w, f)]
            differ += [f for f, read in (("throughput", _json), ("speculative_config", _json))
                       if read(getattr(own, f)) != read(getattr(w, f))]
            differ += [] if same_model(w.model, own.model) else ["model"]
            out += [f"{key}: its own command asks --{f.replace('_', '-')} {getattr(own, f)}, the parity run's command "
                    f"gives this engine {getattr(w, f)} (launch.engine.engine_args)" for f in differ]
    return out + (scratch_problems(files) if isinstance(rec.get("run_specs"), dict) else [])


def scratch_problems(files: dict) -> list[str]:
    """Each run's own ``--json-out`` against where its writer puts it (issue 47, round 11: a run's file in another
    scratch folder than its siblings', or named after another run, was proven): ``files`` is ``{label: (path,
    file_of)}``, ``file_of(folder)`` the writer's file for that run in a folder (launch:
    :func:`sparse_mla.launch.engine.engine_files`; the diagnosis tool:
    :func:`sparse_mla.workbook.diagnosis.engine_record_file`). Every engine of one record writes into one folder.
    One line per difference."""
    paths = {k: (Path(p), file_of) for k, (p, file_of) in files.items() if isinstance(p, str)}
    folders = sorted({str(p.parent) for p, _ in paths.values()})
    out = [f"its runs' own --json-out files lie in {len(folders)} folders {folders}; the writer gives every engine "
           f"of one record the same scratch folder"] if len(folders) > 1 else []
    return out + [f"{k}: its own command's --json-out {p}, the writer names this run's file {file_of(p.parent)}"
                  for k, (p, file_of) in paths.items() if file_of(p.parent) != p]


def _json(text):
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def _engine_commands(args: argparse.Namespace) -> dict[str, argparse.Namespace | str | None] | str:
    """``{run key: parsed arguments}`` the parity command ``args`` gives each engine of its plan
    (:func:`sparse_mla.launch.engine.engine_args` after the writer's own checks of its values), or a line saying
    the command's values are none launch takes."""
    from ..errors import UserInputError
    from ..launch.engine import DEFAULT_THROUGHPUT, check_generation, engine_args, parity_plan
    from ..layouts import check_kv_cache_dtype

    try:
        lens = [int(n) for n in str(args.prompt_lengths).split(",") if n.strip()]
        thr = json.loads(args.throughput) if args.throughput is not None else None
        lens, max_tokens, thr = check_generation(lens, args.max_tokens, thr, args.max_model_len)
        kv = check_kv_cache_dtype(args.kv_cache_dtype)
        specs = _command_specs(args)
    except (UserInputError, ValueError, TypeError) as e:
        return f"environment.command's values are none launch takes ({str(e)[:120]})"
    scfg = _asked_speculation(args)
    scfg = scfg if isinstance(scfg, dict) else None
    out: dict = {}
    for key, name, graph, speculates in parity_plan(specs, graph=not args.eager_only, speculative=scfg is not None):
        words = engine_args(args.model, name, lens, max_tokens, thr or DEFAULT_THROUGHPUT, args.tp, kv,
                            args.max_model_len, graph, scfg if speculates else None)
        out[key] = parsed_launch(shlex.join(["sparse-mla", "launch", *words]))
    return out


def model_name(model: str) -> str:
    """The ``model.path`` launch writes for ``--model`` (``run_parity``: the checkpoint's name; a split GGUF's first
    shard, which ``check_model`` loads from whichever shard is named)."""
    from ..gguf.files import SPLIT

    name = Path(str(model)).name
    return SPLIT.sub(lambda m: f"-{1:0{len(m[1])}d}-of-{m[2]}.gguf", name)


def same_model(asked: str, ran: str) -> bool:
    """Whether ``--model asked`` (a parity command's) gives an engine ``--model ran``: run_parity gives each engine
    the path it checked (``Path(model).expanduser()``; a split GGUF's first shard, in the same folder), so the same
    folder and :func:`model_name`. A path from ``~`` is held to its name alone (whose home it was is not in the
    record). Issue 47, round 11: a header's GGUF in another folder was compared by its file name."""
    same_dir = str(asked).startswith("~") or Path(str(asked)).parent == Path(str(ran)).parent
    return same_dir and model_name(asked) == model_name(ran)


def _asked_speculation(args: argparse.Namespace) -> dict | None | str:
    """The ``--speculative-config`` of a launch command line as launch reads it (a JSON object, or None), or a line
    saying it is none."""
    if args.speculative_config is None or not str(args.speculative_config).strip():
        return None
    try:
        cfg = json.loads(args.speculative_config)
    except ValueError:
        cfg = None
    return cfg if isinstance(cfg, dict) and cfg else \
        f"environment.command's --speculative-config {str(args.speculative_config)[:80]!r} is no JSON object"


def _run_problems(rec: dict, args: argparse.Namespace) -> list[str]:
    """The runs ``rec`` holds against the ones ``args`` asked for: the parity plan's engines and its baseline
    (``parity_baseline``, the first run spec on our backend; issue 47, round 12: c02's --backends in another order,
    another baseline, was proven), each in its mode (eager or CUDA graphs) and with or without speculation as the plan runs it, the record's speculative config
    the command's; or the one engine's (:func:`one_engine_problems`)."""
    from ..launch.engine import parity_baseline, parity_plan

    if not args.parity:
        return one_engine_problems(rec, args)
    runs = rec["runs"] if isinstance(rec.get("runs"), dict) else {}
    specs = _command_specs(args)
    scfg = _asked_speculation(args)
    if isinstance(scfg, str):
        return [scfg]
    plan = parity_plan(specs, graph=not args.eager_only, speculative=scfg is not None)
    if set(runs) != {k for k, *_ in plan}:
        return [f"runs {sorted(runs)}, the command's parity plan {sorted(k for k, *_ in plan)}"]
    base = parity_baseline(specs)         # the runs' order is JSON's to keep or not (round 9, n21); the baseline's
    out = [f"parity_baseline {rec['parity_baseline']!r}, the command's {base!r} (launch.engine.parity_baseline of "
            f"its --backends)"] if "parity_baseline" in rec and rec["parity_baseline"] != base else []
    out += [f"speculative_config {rec['speculative_config']!r}, the command asked --speculative-config {scfg!r}"
           for _ in [0] if "speculative_config" in rec and rec["speculative_config"] != scfg]
    for key, _, graph, speculates in plan:
        run = runs[key] if isinstance(runs[key], dict) else {}
        if "enforce_eager" in run and run["enforce_eager"] is graph:
            why = "--eager-only" if args.eager_only else "no --eager-only"
            out.append(f"{key}: enforce_eager {run['enforce_eager']!r}, the command's plan runs it "
                       f"{'with CUDA graphs' if graph else 'eager'} ({why})")
        if "speculative" in run and run["speculative"] is not speculates:
            out.append(f"{key}: speculative {run['speculative']!r}, the command's plan runs it "
                       f"{'with' if speculates else 'without'} --speculative-config")
    return out


def _command_specs(args: argparse.Namespace) -> tuple[str, ...]:
    """The run spec names a parity command's ``--backends`` asks (launch's default: ours and vLLM's peers), each once,
    in order."""
    from ..launch.specs import OURS, PEERS, parse_run_spec

    names = str(args.backends).split(",") if args.backends else [OURS, *PEERS]
    return tuple(dict.fromkeys(parse_run_spec(n).name for n in names if n.strip()))


def _exempt_run_problems(rec: dict, args: argparse.Namespace) -> list[str]:
    """A parity record exempt from today's plan (no ``run_specs``: its writer ran other mode variants, e.g. a
    ``+cudagraph`` run) against the one thing every plan keeps: its runs' run specs (``backend_requested``,
    ``indexer``, ``simulated_capability``) are among those of the command's ``--backends`` (a spec without a run is
    not held against it: whether that writer kept a run whose engine died is not known), each run's ``tp`` the
    command's ``--tp``. Issue 47, round 13 (r19): ``--backends TRITON_MLA_SPARSE,FLASHMLA_SPARSE`` beside a
    ``FLASH_ATTN_MLA_SPARSE`` run was accepted; round 14 (t21, t28): a run's tp 2 under a command without ``--tp``."""
    from ..errors import UserInputError
    from ..launch.specs import RunSpec

    try:
        want = set(_command_specs(args))
    except UserInputError as e:
        return [f"environment.command's --backends are none launch takes ({str(e)[:120]})"]
    runs = rec["runs"] if isinstance(rec.get("runs"), dict) else {}
    have = {RunSpec(r["backend_requested"], r.get("indexer") or "vllm", r.get("simulated_capability")).name
            for r in runs.values() if isinstance(r, dict) and isinstance(r.get("backend_requested"), str)}
    out = [] if have <= want else [f"its runs ran the specs {sorted(have)}, the command's --backends "
                                    f"{args.backends or '(launch default)'} asks {sorted(want)}"]
    return out + [f"{k}: tp {r['tp']}, the command asked --tp {args.tp} (launch gives every engine its --tp)"
                  for k, r in runs.items() if isinstance(r, dict) and _int(r.get("tp")) and r["tp"] != args.tp]


def spec_method(cfg):
    """A speculative config's method and token count (an MTP drafter's backend is added by the writer), else it."""
    return {f: cfg.get(f) for f in ("method", "num_speculative_tokens")} if isinstance(cfg, dict) else cfg


def one_engine_problems(rec: dict, args: argparse.Namespace, generations: bool = True) -> list[str]:
    """One engine's record against its command line: the run spec, ``tp`` (``--tp``), the mode (``--cuda-graphs``),
    the speculation's method and tokens, the throughput batch (``--throughput``: run_offline writes it into
    ``throughput``, none without), and for an offline engine (not ``--serve``) one generation per
    ``--prompt-lengths`` entry, in its order (run_offline writes one for each; ``generations`` False: a tool that
    drops them, tools/gpu/diagnose_vs_engine.py)."""
    from ..launch.specs import parse_run_spec

    asked = parse_run_spec(args.backend)
    said = rec.get("run") or rec.get("backend_requested")
    out = [f"the engine ran {said!r}, the command asked --backend {args.backend}"] \
        if isinstance(said, str) and said not in (asked.name, asked.backend) else []
    if isinstance(rec.get("tp"), int) and rec["tp"] != args.tp:
        out.append(f"tp {rec['tp']}, the command asked --tp {args.tp}")
    if "enforce_eager" in rec and rec["enforce_eager"] is bool(args.cuda_graphs):
        out.append(f"enforce_eager {rec['enforce_eager']!r}, the command "
                   f"{'asked --cuda-graphs' if args.cuda_graphs else 'runs eager (no --cuda-graphs)'}")
    scfg, have = _asked_speculation(args), rec.get("speculative_config")
    if isinstance(scfg, str) or ("speculative_config" in rec and spec_method(have) != spec_method(scfg)):
        out.append(scfg if isinstance(scfg, str) else f"speculative_config {have!r}, the command asked "
                                                      f"--speculative-config {scfg!r}")
    thr = _json(args.throughput)
    if "throughput" in rec and (not isinstance(thr, dict) or not isinstance(rec["throughput"], dict) or any(
            rec["throughput"].get(k) != v for k, v in thr.items())):
        out.append(f"throughput {str(rec['throughput'])[:120]}, the command asked --throughput {args.throughput}")
    lens = [int(n) for n in str(args.prompt_lengths).split(",") if n.strip().isdigit()]
    gens = rec.get("generations")
    if generations and not args.serve and "error" not in rec and ("layers" in rec or "ran" in rec) and not (
            isinstance(gens, list) and [g.get("prompt_len") if isinstance(g, dict) else g for g in gens] == lens):
        got = [g.get("prompt_len") if isinstance(g, dict) else g for g in gens] if isinstance(gens, list) else "none"
        out.append(f"generations for the prompts {got}, the command asked --prompt-lengths {args.prompt_lengths} "
                   f"(one each, in order)")
    return out
