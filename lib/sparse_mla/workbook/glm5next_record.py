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

import re
from collections import Counter

from ..records import schema
from ..records.values import is_number
from .consistency import _criterion, criterion_figure_problems, first_step_problems, unrecorded_failures

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
    ``other_layers`` together, and entries for each of the model's ``num_hidden_layers`` decoder layers."""
    cfg = rec.get("model_config", rec.get("checkpoint"))
    n_layers = cfg.get("num_hidden_layers") if isinstance(cfg, dict) else None
    out = []
    for k, r in _ok_runs(rec).items():
        ran, layers = r.get("ran"), r.get("layers")
        if not isinstance(ran, dict) or not isinstance(layers, dict):
            continue
        have = Counter(v.get("backend") for v in layers.values() if isinstance(v, dict) and v.get("backend"))
        said = Counter()
        for part in ("attention", "indexer_cache", "other_layers"):
            said.update(ran.get(part) or {})
        if have != said:
            out.append(f"{k}: layers name {dict(sorted(have.items()))}, its ran counts {dict(sorted(said.items()))}")
        idx = sorted({int(m.group(1)) for n in layers if (m := re.match(r"model\.layers\.(\d+)\.", n))})
        if idx != list(range(n_layers if isinstance(n_layers, int) else -1)):
            out.append(f"{k}: layers of {len(idx)} decoder layers, the model's num_hidden_layers is {n_layers!r}")
    return out


#: The tool's command line (``environment.command``): its path and the options whose values the record holds.
TOOL = "tools/gpu/glm5next_parity.py"
#: The keys of the tool's ``first_token_criterion`` (``first_token.judge_first_tokens``), or of its error.
CRITERION_KEYS = (set(schema.CRITERION_KEYS), {"error"})


def _option(cmd: list[str], name: str, default: str) -> str:
    return cmd[cmd.index(name) + 1] if name in cmd[:-1] else default


def command_problems(rec: dict) -> list[str]:
    """The record against the tool's command line it names: the tool's own, its ``--runs`` the record's runs (in
    order), its ``--prompt-lengths`` each generation's prompts, its ``--max-tokens`` ``max_tokens`` (the tool's
    defaults where an option is absent); a run's ``stderr`` only beside its ``error``; the criterion's keys and
    rule the writer's; ``ran.weights`` a safetensors load (the tool loads no other)."""
    from ..launch.first_token import RULE

    cmd = str((rec.get("environment") or {}).get("command") or "").split()
    if TOOL not in cmd:
        return [f"environment.command {' '.join(cmd)[:80]!r} is not {TOOL}'s"]
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    out = []
    want = [r for r in _option(cmd, "--runs", "auto,TRITON_MLA_SPARSE").split(",") if r]
    if list(runs) != want:
        out.append(f"runs {list(runs)}, its command's --runs {want}")
    lens = [int(x) for x in _option(cmd, "--prompt-lengths", "48,900").split(",") if x.isdigit()]
    out += [f"{k}: generations of prompts {[g.get('prompt_len') for g in r['generations']]}, its command's "
            f"--prompt-lengths {lens}" for k, r in _ok_runs(rec).items() if isinstance(r.get("generations"), list)
            and [g.get("prompt_len") if isinstance(g, dict) else None for g in r["generations"]] != lens]
    if str(rec.get("max_tokens")) != _option(cmd, "--max-tokens", "16"):
        out.append(f"max_tokens {rec.get('max_tokens')!r}, its command's --max-tokens "
                   f"{_option(cmd, '--max-tokens', '16')}")
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


def glm5next_record_problems(rec: dict) -> list[str]:
    """Everything above, one line each (``[]``: the record's figures are what its data give)."""
    out = command_problems(rec) + generation_problems(rec) + layer_problems(rec)
    return out + (reference_problems(rec) if not out else []) + (criterion_problems(rec) if not out else [])


