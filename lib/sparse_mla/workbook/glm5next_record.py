"""A GLM-5.3-Flash comparison (``tools/gpu/glm5next_parity.py``) against its own data: what the tool computes from
its engines' generations and the float64 reference, recomputed here; ``records check`` calls a record whose figures
say otherwise **invalid** (issue 47, breaker round 8: a forged reference argmax, a step's regret, a criterion gap
other than the reference's, layers other than ``ran`` counts were proven).

* each generation: ``max_tokens`` tokens (the tool ignores EOS), one log-prob per token;
* the reference's view of each (``reference.<run>[i]``, the tool's ``judge``): its steps are the generation's tokens
  and log-probs, ``abs_diff`` their difference to the reference's log-prob, ``regret`` 0 where the token is the
  reference's argmax and above 0 elsewhere; ``max_regret`` and ``max_abs_logprob_diff`` the steps' largest;
  ``first_token`` the generation's first token, the reference's argmax its greedy first token and its first step's,
  its top-2 gap the greedy's first; ``first_divergence`` where the tokens first leave the reference's greedy ones;
* the first-token criterion (:func:`sparse_mla.launch.first_token.glm5next_first_token_criterion`): the same prompts,
  first tokens and reference argmax, its ``gap`` the reference's top-2 gap, ``decisive`` its gap above its
  tolerance, each tolerance ``lam sqrt(2)`` times its sigma (:mod:`sparse_mla.workbook.consistency`);
* each engine's ``layers``: as many layers per backend as its ``ran`` counts (attention, indexer cache, other).

What it cannot see: a ``sigma`` (or a whole record) forged with its figures; the spread needs the checkpoint's
Monte Carlo forwards to recompute.
"""
from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from ..records import schema
from ..records.values import is_number, same_json
from .consistency import (_criterion, criterion_figure_problems, first_step_problems, layer_count_problems,
                          layer_map_problems, unrecorded_failures, vocab_problems)

#: Relative (and absolute, near 0) difference within which two of the writer's float figures are one number.
SAME = 1e-9


def _same(a, b) -> bool:
    return is_number(a) and is_number(b) and abs(a - b) <= SAME * max(1.0, abs(a), abs(b))


def _ok_runs(rec: dict) -> dict[str, dict]:
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    return {k: r for k, r in runs.items() if isinstance(r, dict) and r.get("error") is None}


def generation_problems(rec: dict) -> list[str]:
    """Each engine's generations: ``max_tokens`` tokens each, one log-prob per token, a prompt of 1 token or more,
    a greedy first step (:func:`sparse_mla.workbook.consistency.first_step_problems`)."""
    n = rec.get("max_tokens")
    out = []
    for k, r in _ok_runs(rec).items():
        gens = r.get("generations")
        if not isinstance(gens, list) or not gens:
            out.append(f"{k}: no generations")
            continue
        for g in gens:
            toks, lps = (g.get("token_ids"), g.get("logprobs")) if isinstance(g, dict) else (None, None)
            if not isinstance(toks, list) or not isinstance(lps, list) or len(toks) != len(lps) or len(toks) != n:
                out.append(f"{k}: a generation of {len(toks) if isinstance(toks, list) else toks!r} tokens and "
                           f"{len(lps) if isinstance(lps, list) else lps!r} log-probs; the record's max_tokens is "
                           f"{n!r} (the tool ignores EOS)")
        out += first_step_problems(k, gens)
        out += vocab_problems(k, gens, (rec.get("model_config") or {}).get("vocab_size"))
    return out


def _step_problems(where: str, steps, gen: dict) -> list[str]:
    toks, lps = gen["token_ids"], gen["logprobs"]
    if not isinstance(steps, list) or len(steps) != len(toks):
        return [f"{where}: not one step per generated token ({len(toks)})"]
    out = []
    for j, (s, t, lp) in enumerate(zip(steps, toks, lps)):
        ref, reg = s.get("reference_logprob"), s.get("regret")
        if s.get("token") != t or not _same(s.get("vllm_logprob"), lp):
            out.append(f"{where}: step {j} is token {s.get('token')!r} at {s.get('vllm_logprob')!r}, the engine "
                       f"generated {t!r} at {lp!r}")
        if not (is_number(ref) and _same(s.get("abs_diff"), abs(ref - lp))):
            out.append(f"{where}: step {j}'s abs_diff {s.get('abs_diff')!r} is not |{ref!r} - {lp!r}|")
        if not is_number(reg) or reg < 0 or (reg == 0) is not (t == s.get("reference_argmax")):
            out.append(f"{where}: step {j}'s regret {reg!r} with token {t!r} and reference argmax "
                       f"{s.get('reference_argmax')!r} (0 exactly where they are one token)")
    return out


def _entry_problems(where: str, e: dict, gen: dict) -> list[str]:
    """One ``reference.<run>[i]`` entry against its generation (module docstring)."""
    if not isinstance(e, dict) or e.get("prompt_len") != gen.get("prompt_len"):
        return [f"{where}: not the {gen.get('prompt_len')}-token prompt's entry"]
    steps = e.get("steps")
    out = _step_problems(where, steps, gen)
    if out:
        return out
    for key, field in (("max_regret", "regret"), ("max_abs_logprob_diff", "abs_diff")):
        if not _same(e.get(key), max(s[field] for s in steps)):
            out.append(f"{where}: {key} {e.get(key)!r} is not its steps' largest {field}")
    greedy, first = e.get("reference_greedy") or {}, e.get("first_token") or {}
    own, gaps = greedy.get("token_ids") or [None], greedy.get("top2_gaps") or [None]
    toks = gen["token_ids"]
    if first.get("vllm") != toks[0]:
        out.append(f"{where}: first_token.vllm {first.get('vllm')!r}, the engine generated {toks[0]!r}")
    if not first.get("reference_argmax") == steps[0].get("reference_argmax") == own[0]:
        out.append(f"{where}: the reference's first argmax is {first.get('reference_argmax')!r} (first_token), "
                   f"{steps[0].get('reference_argmax')!r} (step 0), {own[0]!r} (its greedy tokens)")
    if not _same(first.get("reference_top2_gap"), gaps[0]):
        out.append(f"{where}: first_token.reference_top2_gap {first.get('reference_top2_gap')!r}, its greedy "
                   f"first gap {gaps[0]!r}")
    div = next((i for i, (a, b) in enumerate(zip(toks, own)) if a != b), None)
    if e.get("first_divergence") != div:
        out.append(f"{where}: first_divergence {e.get('first_divergence')!r}, the tokens first leave the "
                   f"reference's greedy ones at {div!r}")
    if not all(is_number(g) and g >= 0 for g in gaps):      # its best log-prob minus its second: never below 0
        out.append(f"{where}: reference_greedy.top2_gaps {gaps}; accepted: numbers of at least 0 (the reference's "
                   f"best log-prob minus its second)")
    elif div is not None and div < len(gaps) and not _same(e.get("reference_gap_at_divergence"), gaps[div]):
        out.append(f"{where}: reference_gap_at_divergence {e.get('reference_gap_at_divergence')!r}, its greedy "
                   f"gap at step {div} {gaps[div]!r}")
    return out


def reference_problems(rec: dict) -> list[str]:
    """The reference's view of every engine that ran (module docstring); none where the reference failed."""
    ref, ok = rec.get("reference"), _ok_runs(rec)
    if not isinstance(ref, dict) or "error" in ref:
        return [] if not isinstance(ref, dict) or ref["error"] else ["reference.error is empty (the tool writes the "
                                                                     "exception)"]
    if set(ref) != set(ok):
        return [f"reference compares {sorted(ref)}, the runs that ran are {sorted(ok)}"]
    out = []
    for k, entries in ref.items():
        gens = ok[k].get("generations") or []
        if not isinstance(entries, list) or len(entries) != len(gens):
            out.append(f"reference.{k}: not one entry per generation ({len(gens)})")
            continue
        for i, (e, g) in enumerate(zip(entries, gens)):
            out += _entry_problems(f"reference.{k}[{i}]", e, g)
    return out


def checkpoint_dtype(model_config: dict) -> str:
    """The checkpoint dtype the tool's first-token criterion takes vLLM's arithmetic for: its ``config.json``'s
    ``dtype`` (the record's ``model_config``), bfloat16 where it names none."""
    return str(model_config.get("dtype", "bfloat16"))


def arithmetic_problems(rec: dict) -> list[str]:
    """``first_token_criterion.arithmetic`` against vLLM's for the record's checkpoint dtype (:func:`checkpoint_dtype`,
    :func:`sparse_mla.launch.forward_rounding.engine_arithmetic`, the tool's engines on vLLM's default KV cache;
    issue 47, round 11: a float16 checkpoint judged with bfloat16's arithmetic was proven)."""
    from ..launch.forward_rounding import engine_arithmetic

    crit, mc = rec.get("first_token_criterion"), rec.get("model_config")
    if not isinstance(crit, dict) or not isinstance(crit.get("arithmetic"), dict) or not isinstance(mc, dict):
        return []
    want = engine_arithmetic(checkpoint_dtype(mc), KV_CACHE_DTYPE).__dict__
    said = crit["arithmetic"]
    if set(said) == set(want) and all(_same(said[k], v) or said[k] == v for k, v in want.items()):
        return []
    return [f"first_token_criterion: arithmetic {said}, vLLM's for the checkpoint's dtype "
            f"{checkpoint_dtype(mc)!r} is {want} (the tool takes it from model_config's dtype)"]


def criterion_problems(rec: dict) -> list[str]:
    """``first_token_criterion`` against the runs' first tokens and the reference's argmax and top-2 gap, and its
    figures (:func:`sparse_mla.workbook.consistency.criterion_figure_problems`); a decisive prompt with another first
    token and no failure recorded."""
    ok, ref, crit = _ok_runs(rec), rec.get("reference"), rec.get("first_token_criterion")
    if not isinstance(ref, dict) or "error" in ref or set(ref) != set(ok) or not ok:
        return []                  # no reference to hold it to (reference_problems / the verdict say why)
    try:
        firsts = {k: [e["first_token"] for e in es] for k, es in ref.items()}
    except (KeyError, TypeError) as e:
        return [f"reference: an entry without first_token ({type(e).__name__}: {e})"]
    gens = {k: r["generations"] for k, r in ok.items()}
    out = _criterion(crit, {k: [{"reference_argmax": f.get("reference_argmax")} for f in fs]
                            for k, fs in firsts.items()}, gens) + criterion_figure_problems(rec)
    if out or not isinstance(crit, dict) or "error" in crit:
        return out
    gaps = [f.get("reference_top2_gap") for f in next(iter(firsts.values()))]
    out += [f"first_token_criterion: gap {p.get('gap')!r} for the {p.get('prompt_len')}-token prompt, the "
            f"reference's top-2 gap {g!r}" for p, g in zip(crit.get("per_prompt") or [], gaps)
            if not _same(p.get("gap"), g)]
    return out if crit.get("failures") else out + unrecorded_failures(crit)


def layer_problems(rec: dict) -> list[str]:
    """Each engine's ``layers``: as many per backend as its ``ran`` counts in ``attention``, ``indexer_cache`` and
    ``other_layers``, each side its own (:func:`_side_problems`), the tool's KV dtype (:func:`_layer_kv_problems`),
    entries for each of the model's ``num_hidden_layers`` decoder layers, MLA ones where its ``layer_types`` says
    (:func:`_layer_type_problems`)."""
    cfg = rec.get("model_config", rec.get("checkpoint"))
    n_layers = cfg.get("num_hidden_layers") if isinstance(cfg, dict) else None
    out = []
    for k, r in _ok_runs(rec).items():
        ran, layers = r.get("ran"), r.get("layers")
        if not isinstance(ran, dict) or not isinstance(layers, dict):
            continue
        counts = layer_count_problems(k, ran, layers)
        if counts:                                  # the layers are not the engine's: nothing more to read in them
            out += counts
            continue
        # a layer's mla flag (absent from the earliest records, which count linear attention as attention) tells
        # the MLA layers from the others: their sides, their KV dtype, where they are
        flagged = all(isinstance(v, dict) and "mla" in v for v in layers.values())
        found = _side_problems(k, ran, layers) + _layer_kv_problems(k, r) if flagged else []
        found += layer_map_problems(k, ran, layers, "absent" if n_layers is None else n_layers)
        if not found and flagged and isinstance(cfg.get("layer_types"), list):
            found += _layer_type_problems(k, cfg["layer_types"], layers)
        out += found
    return out


def _side_problems(k: str, ran: dict, layers: dict) -> list[str]:
    """Each side of ``layers`` (:func:`sparse_mla.vllm_plugin.ran.count_backends`, ``other_layers``: by backend and
    its ``mla`` flag) what ``ran`` counts there (``collect`` counts them so)."""
    from ..vllm_plugin.ran import count_backends, other_layers

    entries = {n: v for n, v in layers.items() if isinstance(v, dict)}
    have = dict(zip(("attention", "indexer_cache"), count_backends(entries)), other_layers=other_layers(entries))
    return [f"{k}: layers give {part} {have[part]} (by backend and mla flag), its ran counts {ran.get(part) or {}}"
            for part in have if have[part] != (ran.get(part) or {})]


#: The KV-cache dtype the tool's engines run: it asks none (vLLM's default).
KV_CACHE_DTYPE = "auto"


def _layer_kv_problems(k: str, r: dict) -> list[str]:
    """Each attention layer's KV dtype the tool's (:data:`KV_CACHE_DTYPE`; ``launch``'s check,
    :func:`sparse_mla.workbook.consistency._layer_problems`)."""
    from .consistency import _layer_problems

    return _layer_problems({"kv_cache_dtype": KV_CACHE_DTYPE}, k, {**r, "kv_cache_dtype": KV_CACHE_DTYPE})


def _layer_type_problems(k: str, layer_types: list, layers: dict) -> list[str]:
    """The decoder layers holding an MLA attention layer (``attention`` side) those the model's ``layer_types``
    makes MLA (:func:`sparse_mla.diagnose.config.mla_layers`)."""
    from ..diagnose.config import mla_layers
    from ..vllm_plugin.ran import count_backends

    got = sorted({int(m.group(1)) for n, v in layers.items() if isinstance(v, dict) and count_backends({n: v})[0]
                  and (m := re.match(r"model\.layers\.(\d+)\.", n))})
    want = mla_layers(layer_types)
    return [] if got == want else [f"{k}: MLA attention in decoder layers {got}, the model's layer_types make "
                                   f"{want} MLA (the others linear_attention)"]


def simulated_problems(rec: dict) -> list[str]:
    """Each engine's ``simulated`` block (``launch.specs.with_simulated``, written where the run's process had a
    simulated capability: its run spec's ``@M.m``): present exactly where the run spec simulates, with its
    capability."""
    out = []
    for k, r in _ok_runs(rec).items():
        cap, sim = r.get("simulated_capability"), r.get("simulated")
        have = sim.get("capability") if isinstance(sim, dict) else sim
        if have != cap:
            out.append(f"{k}: simulated {str(sim)[:60]} beside simulated_capability {cap!r}; accepted: a simulated "
                       f"block with the run spec's capability where it simulates one, none elsewhere")
    return out


def agreement_problems(rec: dict) -> list[str]:
    """``engine_agreement``: what the tool's :func:`sparse_mla.launch.engine.compare` gives for each run that ran
    against the first of its command's ``--runs`` (no entry for that one; none at all where it failed)."""
    from ..launch.engine import compare

    ok, asked = _ok_runs(rec), _runs_asked(rec)
    base = asked[0] if asked else next(iter(ok), None)
    want = {k: compare(ok[base], v) for k, v in ok.items() if k != base} if base in ok else None
    got = rec.get("engine_agreement")
    if same_json(got, want):
        return []
    if not isinstance(got, dict) or not isinstance(want, dict):
        return [f"engine_agreement {str(got)[:60]}, the tool writes {str(want)[:60]} (against the first run "
                f"{base!r})"]
    return [f"engine_agreement.{k}: not what the generations of {k!r} and the first run {base!r} give "
            f"(launch.engine.compare)" for k in sorted(set(got) | set(want)) if not same_json(got.get(k), want.get(k))]


#: The tool's path as its record's header names it (``environment.command``: ``python3 TOOL ARGV``, ``tool_command``).
TOOL = "tools/gpu/glm5next_parity.py"
#: The keys of the tool's ``first_token_criterion`` (``first_token.judge_first_tokens``), or of its error.
CRITERION_KEYS = (set(schema.CRITERION_KEYS), {"error"})


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments of ``tools/gpu/glm5next_parity.py`` added to ``p`` (``p`` returned): the tool's own parser and
    ``records check``'s reading of its record's command (:func:`parsed_command`) are this one. ``--engine RUN`` (with
    ``--prompts-json``) is the tool's child mode: one engine's JSON to OUT, no comparison record."""
    p.add_argument("checkpoint", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--runs", default="auto,TRITON_MLA_SPARSE", help="run specs; the first is the others' baseline")
    p.add_argument("--prompt-lengths", default="48,900")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--engine-timeout", type=int, default=420)
    p.add_argument("--engine", help=argparse.SUPPRESS)          # the child: one engine, its JSON to OUT
    p.add_argument("--prompts-json", type=Path, help=argparse.SUPPRESS)
    return p


def tool_command(argv: list[str]) -> str:
    """The tool's command line as its record's header names it (``python3 tools/gpu/glm5next_parity.py ARGV``,
    joined as a shell line)."""
    return shlex.join(["python3", TOOL, *argv])


def run_specs(args: argparse.Namespace) -> list[str]:
    """The tool's runs, in order: ``--runs`` split at commas, blanks dropped."""
    return [r.strip() for r in args.runs.split(",") if r.strip()]


def prompt_lengths(args: argparse.Namespace) -> list[int]:
    """The tool's prompt lengths (tokens): ``--prompt-lengths`` split at commas. Raises ValueError (a part that is
    no integer: the tool stops there, before any engine)."""
    return [int(n) for n in args.prompt_lengths.split(",")]


def parsed_command(rec: dict) -> argparse.Namespace | str:
    """``environment.command`` of ``rec`` parsed by the tool's own parser (:func:`add_arguments`, read as
    :func:`sparse_mla.workbook.commands.parsed_words` reads ``sparse-mla`` commands: the last of a repeated option,
    abbreviations as argparse takes them): the namespace, or a line saying why the tool would not have written this
    record with it (other first words than :func:`tool_command`'s, an argument the parser refuses or does not take,
    the child mode ``--engine``)."""
    from .commands import parsed_words, shell_words

    cmd = (rec.get("environment") if isinstance(rec.get("environment"), dict) else {}).get("command")
    words = shell_words(cmd) if isinstance(cmd, str) else f"environment.command {cmd!r} is no command line"
    if isinstance(words, str):
        return words
    if words[:2] != ["python3", TOOL]:
        return (f"environment.command {shlex.join(words)[:80]!r} is not {TOOL}'s; accepted: `python3 {TOOL} "
                f"CHECKPOINT OUT.json [OPTIONS]`, as the tool writes it")
    args = parsed_words(words[2:], add_arguments, TOOL)
    if isinstance(args, argparse.Namespace) and args.engine:       # the tool's own test of its child mode
        return (f"environment.command runs {TOOL}'s child mode (--engine {args.engine}), which writes one engine's "
                f"JSON, not a comparison record; accepted: the command without --engine")
    return args


def _runs_asked(rec: dict) -> list[str]:
    """The run specs of the record's command (:func:`run_specs`; ``[]`` where the command is not the tool's)."""
    args = parsed_command(rec)
    return run_specs(args) if isinstance(args, argparse.Namespace) else []


def command_problems(rec: dict) -> list[str]:
    """The record against the tool's command line it names, read by the tool's own parser (:func:`parsed_command`;
    issue 47, round 10: a first-occurrence reading of the words called ``--max-tokens=8`` invalid and proved
    ``--banana 3``, a repeated option, ``echo ...`` and the child mode): its ``--runs`` the record's runs (in order),
    its ``--prompt-lengths`` each generation's prompts, its ``--max-tokens`` ``max_tokens`` (the tool's defaults
    where an option is absent); a run's ``stderr`` only beside its ``error``; the criterion's keys and
    rule the writer's; ``ran.weights`` a safetensors load (the tool loads no other)."""
    from ..launch.first_token import RULE

    args = parsed_command(rec)
    if isinstance(args, str):
        return [args]
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    out = []
    if list(runs) != run_specs(args):
        out.append(f"runs {list(runs)}, its command's --runs {run_specs(args)}")
    try:
        lens = prompt_lengths(args)
    except ValueError as e:
        return out + [f"environment.command's --prompt-lengths {args.prompt_lengths!r}: the tool stops on it ({e}); "
                      f"accepted: integers joined by commas"]
    out += [f"{k}: generations of prompts {[g.get('prompt_len') for g in r['generations']]}, its command's "
            f"--prompt-lengths {lens}" for k, r in _ok_runs(rec).items() if isinstance(r.get("generations"), list)
            and [g.get("prompt_len") if isinstance(g, dict) else None for g in r["generations"]] != lens]
    out += _limit_problems(rec, args)
    n = rec.get("max_tokens")
    if not (isinstance(n, int) and not isinstance(n, bool) and n == args.max_tokens):
        out.append(f"max_tokens {n!r}, its command's --max-tokens {args.max_tokens}")
    out += [f"{k}: stderr beside no error (the tool writes it for an engine that failed)" for k, r in runs.items()
            if isinstance(r, dict) and "stderr" in r and r.get("error") is None]
    out += [f"{k}: ran.weights {r['ran']['weights']}, the tool loads safetensors (load_format auto, no quantization)"
            for k, r in _ok_runs(rec).items() if isinstance(r.get("ran"), dict) and isinstance(r["ran"].get("weights"),
                                                                                             dict)
            and (r["ran"]["weights"].get("load_format"), r["ran"]["weights"].get("quantization")) != ("auto", None)]
    crit = rec.get("first_token_criterion")
    if isinstance(crit, dict) and set(crit) not in CRITERION_KEYS:
        out.append(f"first_token_criterion holds {sorted(crit)}; the tool writes {sorted(CRITERION_KEYS[0])} or error")
    elif isinstance(crit, dict) and "rule" in crit and crit["rule"] != RULE:
        out.append(f"first_token_criterion.rule {str(crit['rule'])[:60]!r} is not the criterion's")
    return out


def _limit_problems(rec: dict, args: argparse.Namespace) -> list[str]:
    """The runs that ran against the command's limits (issue 47, round 11: h13, h14): each generation's prompt and
    tokens within ``--max-model-len`` (the tool's engines' ``max_model_len``: vLLM holds prompt + output to it), and
    none at all under an ``--engine-timeout`` of 0 or less (``subprocess.run(timeout=...)`` stops the engine's process
    at once: the tool records "ran past")."""
    ok = _ok_runs(rec)
    if args.engine_timeout <= 0 and ok:
        return [f"runs {list(ok)} ran, its command's --engine-timeout {args.engine_timeout} stops every engine's "
                f"process at once (subprocess.run's timeout); accepted: a positive number of seconds"]
    return [f"{k}: a {g['prompt_len']}-token prompt and its {len(g['token_ids'])} generated tokens exceed its "
            f"command's --max-model-len {args.max_model_len} (the engines' max_model_len)"
            for k, r in ok.items() for g in (r.get("generations") if isinstance(r.get("generations"), list) else [])
            if isinstance(g, dict) and isinstance(g.get("prompt_len"), int) and isinstance(g.get("token_ids"), list)
            and g["prompt_len"] + len(g["token_ids"]) > args.max_model_len][:4]


def glm5next_record_problems(rec: dict) -> list[str]:
    """Everything above, one line each (``[]``: the record's figures are what its data give)."""
    out = command_problems(rec) + generation_problems(rec) + layer_problems(rec) + simulated_problems(rec)
    out += arithmetic_problems(rec)
    out += agreement_problems(rec) if not out else []
    return out + (reference_problems(rec) if not out else []) + (criterion_problems(rec) if not out else [])


