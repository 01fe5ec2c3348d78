"""What a run record holds twice, recomputed from its own data: ``records check`` calls a record whose summaries say
otherwise than the data they summarize **invalid** (no writer of ours makes one; each summary is computed from that
data by the function named below, in the process that ran).

* a parity record's (:func:`parity_record`: one with ``run_specs``, or an earlier one's) ``parity_baseline``,
  ``parity_vs_ours``, ``parity_pairs``, ``engine_agreement`` and ``throughput_tokens_per_s`` are what the writer's
  own functions (:func:`sparse_mla.launch.engine.compare`, :func:`sparse_mla.launch.agreement.first_token_agreement`)
  give from its runs, each present where the writer writes it (a run cut short, ``interrupted``, writes what it had);
* its ``reference_first_token`` has one entry per run and judged prompt (within ``reference_max_len``) whose first
  token, ``same_first_token`` and ``top_k`` are the run's (:func:`sparse_mla.launch.engine.compare_reference`), and
  its ``first_token_criterion`` (records from :data:`CRITERION_SINCE` on) judges the same prompts with the runs' first
  tokens and the same reference argmax, ``decisive`` its gap above its tolerance, ``decisive_prompts`` their count,
  each tolerance ``lam sqrt(2)`` times its sigma and its arithmetic vLLM's for the record's KV-cache dtype;
* a serving benchmark's per-run ``summary``: the spread of its repeats (:func:`sparse_mla.bench.serve.spread`); its
  passes, agreement summaries, verdict, server block and servers' ``ran`` (:mod:`sparse_mla.workbook.serving`);
  vLLM's results, its servers' command lines and its wall time (:mod:`sparse_mla.workbook.serving_results`);
* ``serve.matches_offline``: the served tokens against the first 16 of the run it names (``compared_with``; before
  :data:`COMPARED_WITH_SINCE`, our backend's);
* each engine run's ``throughput``: ``output_tokens_per_s`` its ``generated_tokens`` over its ``seconds``, those
  ``num_seqs`` x ``max_tokens`` (it ignores EOS); its prompts and generations within the record's ``max_model_len``;
* a serving benchmark's ``repeats``: none completed more prompts than it asked, each asked the load's
  ``num_prompts``, each is of a run of the record; its ``order`` one round per repeat, each the record's runs, each
  once;
* each engine run: ``layers`` and ``generations`` not empty where the writer wrote them, one generation per prompt of
  ``prompt_lengths`` in its order, each generation's first step greedy (:func:`first_step_problems`), every
  attention layer's KV dtype the one asked (an fp8 request: vLLM's fp8 layout, ``fp8_ds_mla``,
  :data:`sparse_mla.layouts.FP8_KV_CACHE_DTYPES`), ``ran.attention`` counting as many layers as the record's
  ``model.num_hidden_layers`` (every layer of a GLM-5 / DeepSeek-V3.2 checkpoint is an MLA layer) and
  ``ran.indexer_cache`` no more, in every ``ran`` block (a served check's and each live server's too), and ``layers``
  holding at least the attention and indexer-cache layers ``ran`` counts.

What it cannot see: a record whose data and summaries were edited together (:mod:`sparse_mla.workbook.proof`); a
criterion's ``sigma`` forged with its tolerances (the spread needs the checkpoint's Monte Carlo forwards to
recompute: a large one makes no prompt decisive, ``docs/records.md``).
"""
from __future__ import annotations

import re
from collections import Counter

from ..layouts import FP8_KV_CACHE_DTYPES
from ..records.values import header_time, is_int as _int, is_number as _num, same_json as _same
from ..vllm_plugin.ran import count_backends
from .commands import parity_record
from .serving import serving_record_problems
from .serve_command import serve_command_problems
from .serving_results import serving_result_problems


def _with_generations(rec: dict) -> dict[str, dict]:
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    return {k: r for k, r in runs.items() if isinstance(r, dict) and isinstance(r.get("generations"), list)}


def _ok(rec: dict) -> dict[str, dict]:
    """The runs the writer compares: its engine runs without an ``error`` (``_judge_engines``'s ``ok``)."""
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    return {k: r for k, r in runs.items() if isinstance(r, dict) and "error" not in r}


def _split(rec: dict) -> tuple[list[int], list[int]]:
    """``(judged, beyond)`` prompt indices by ``reference_max_len`` (:func:`sparse_mla.launch.agreement.split_prompts`
    on the record's ``prompt_lengths``)."""
    lens = rec.get("prompt_lengths")
    if not isinstance(lens, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in lens):
        raise ValueError(f"prompt_lengths {lens!r} is not a list of token counts")
    limit = rec.get("reference_max_len")
    judged = [i for i, n in enumerate(lens) if limit is None or n <= limit]
    return judged, [i for i in range(len(lens)) if i not in judged]


def _baseline(specs: list[str]) -> str | None:
    """:func:`sparse_mla.launch.engine.parity_baseline` of the run specs the user asked (the plan's own additions,
    ``+no-speculation`` or ``+eager``, are no run spec it parses)."""
    from ..errors import UserInputError
    from ..launch.engine import parity_baseline
    from ..launch.specs import parse_run_spec

    def asked(s):
        try:
            return parse_run_spec(s) is not None
        except UserInputError:
            return False

    return parity_baseline([s for s in specs if asked(s)])


def writer_summaries(rec: dict) -> dict:
    """What ``sparse_mla.launch.engine._judge_engines`` writes from a parity record's runs alone, recomputed by the
    writer's own functions: ``parity_baseline``, ``parity_vs_ours``, ``parity_pairs``, ``engine_agreement``,
    ``throughput_tokens_per_s`` (each where the writer writes it)."""
    from ..launch.agreement import first_token_agreement
    from ..launch.engine import compare

    ok = _ok(rec)
    specs = rec["run_specs"] if isinstance(rec.get("run_specs"), dict) else rec["runs"]      # an earlier record's runs
    base = rec["parity_baseline"] if "parity_baseline" in rec else _baseline(list(specs))
    out: dict = {}
    if base in ok and len(ok) > 1:
        out["parity_baseline"] = base
        out["parity_vs_ours"] = {k: compare(ok[base], v) for k, v in ok.items() if k != base}
    keys = list(ok)
    out["parity_pairs"] = [{"a": a, "b": b, **compare(ok[a], ok[b])} for i, a in enumerate(keys) for b in keys[i + 1:]]
    beyond = _split(rec)[1]
    if ok and beyond and base in ok:
        out["engine_agreement"] = first_token_agreement(ok, base, beyond)
    out["throughput_tokens_per_s"] = {k: (v.get("throughput") or {}).get("output_tokens_per_s") for k, v in ok.items()}
    return out


def _unordered(key: str, value):
    """``parity_pairs`` (``value`` under ``key``) in an order of its own: the writer pairs its runs in the order of
    ``runs``' keys, which JSON does not fix (a record rewritten with sorted keys is the same record, issue 47 round 9:
    n21), and ``compare`` is symmetric (the same figures for ``a, b`` as for ``b, a``). Anything else as it is."""
    if key != "parity_pairs" or not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
        return value
    return sorted(({**p, "a": min(str(p.get("a")), str(p.get("b"))), "b": max(str(p.get("a")), str(p.get("b")))}
                   for p in value), key=lambda p: (p["a"], p["b"]))


def summary_problems(rec: dict) -> list[str]:
    """A parity record's (:func:`parity_record`) summaries against :func:`writer_summaries`: each the writer writes
    must be there and equal, and none it does not write may be; an earlier record's (no ``run_specs``) each where it
    has it (that writer wrote fewer)."""
    if not parity_record(rec):
        return []
    try:
        want = writer_summaries(rec)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        return [f"its runs' generations cannot give its summaries ({type(e).__name__}: {str(e)[:120]})"]
    out = [f"{k}: not what its runs give (recomputed by the writer's own functions)"
           for k, v in want.items() if k in rec and not _same(*map(_unordered, (k, k), (v, rec[k])))]
    out += [f"no {k}, which the writer writes from these runs" for k in want if k not in rec
            and rec.get("interrupted") is None and "run_specs" in rec]      # a run cut short mid-way writes what it had
    out += [f"{k}, which the writer does not write from these runs" for k in ("parity_baseline", "parity_vs_ours",
                                                                              "engine_agreement")
            if k in rec and k not in want]
    return out


def reference_problems(rec: dict) -> list[str]:
    """``reference_first_token`` and ``first_token_criterion`` of a parity record against its runs' generations:
    every run the writer compares has one entry per judged prompt (those within ``reference_max_len``), whose first
    token is the run's and ``same_first_token`` and ``top_k`` its own; the criterion judges the same prompts with the
    same first tokens and reference argmax, ``decisive`` is its gap above its tolerance, ``decisive_prompts`` their
    count. An ``error`` in either (the writer's, holding the exception) leaves the rest to ``said_failed``."""
    if not parity_record(rec):
        return []
    ok = _ok(rec)
    try:
        judged = _split(rec)[0]
    except ValueError as e:
        return [str(e)]
    if not ok or not judged or any(not isinstance(r.get("generations"), list) or len(r["generations"]) !=
                                   len(rec["prompt_lengths"]) for r in ok.values()):
        return []                   # no comparison, or generations short of the prompts (run_problems says which)
    ref = rec.get("reference_first_token")
    if not isinstance(ref, dict):
        return [] if rec.get("interrupted") is not None else \
            ["no reference_first_token, which the writer writes for the prompts within reference_max_len"]
    if "error" in ref:
        return [] if ref["error"] else ["reference_first_token.error is empty (the writer writes the exception)"]
    if set(ref) != set(ok):
        return [f"reference_first_token compares {sorted(ref)}, the runs that ran are {sorted(ok)}"]
    out: list[str] = []
    gens = {k: [r["generations"][i] for i in judged] for k, r in ok.items()}
    for k, entries in ref.items():
        out += _entries(k, entries, gens[k])
    if out or (rec.get("interrupted") is not None and "first_token_criterion" not in rec):
        return out
    return _criterion(rec.get("first_token_criterion"), ref, gens, (rec.get("environment") or {}).get("date"))


def _entries(k: str, entries, gens: list[dict]) -> list[str]:
    if not isinstance(entries, list) or [e.get("prompt_len") if isinstance(e, dict) else None for e in entries] != \
            [g.get("prompt_len") for g in gens]:
        return [f"reference_first_token.{k}: not one entry per judged prompt ({[g.get('prompt_len') for g in gens]})"]
    out = []
    for e, g in zip(entries, gens):
        first = (g.get("token_ids") or [None])[0]
        top = len(g.get("first_top_logprobs") or {})
        if e.get("vllm_first_token") != first:
            out.append(f"reference_first_token.{k}: vllm_first_token {e.get('vllm_first_token')!r} for the "
                       f"{e['prompt_len']}-token prompt, the run generated {first!r}")
        if e.get("same_first_token") is not (first == e.get("reference_argmax")):
            out.append(f"reference_first_token.{k}: same_first_token {e.get('same_first_token')!r} for the "
                       f"{e['prompt_len']}-token prompt, yet {first!r} vs the reference's {e.get('reference_argmax')!r}")
        if e.get("top_k") != top:
            out.append(f"reference_first_token.{k}: top_k {e.get('top_k')!r}, the run returned {top} log-probs")
    return out


#: When the writer began to write ``first_token_criterion`` (commit 7989dbb's date): records of runs before it have
#: none.
CRITERION_SINCE = "2026-12-02T19:16:21+00:00"


def _criterion_written(date) -> bool:
    when = header_time(date)
    return when is None or when >= header_time(CRITERION_SINCE)


def _criterion(crit, ref: dict, gens: dict[str, list[dict]], date=None) -> list[str]:
    if not isinstance(crit, dict):
        return [] if not _criterion_written(date) else \
            ["no first_token_criterion beside the reference comparison (the writer writes one, or its error)"]
    if "error" in crit:
        return [] if crit["error"] else ["first_token_criterion.error is empty (the writer writes the exception)"]
    per = crit.get("per_prompt")
    lens = [g.get("prompt_len") for g in next(iter(gens.values()))]
    if not isinstance(per, list) or [p.get("prompt_len") if isinstance(p, dict) else None for p in per] != lens:
        return [f"first_token_criterion: per_prompt is not one entry per judged prompt ({lens})"]
    out = []
    for i, p in enumerate(per):
        firsts = {k: (g[i].get("token_ids") or [None])[0] for k, g in gens.items()}
        argmaxes = {e[i].get("reference_argmax") for e in ref.values()}
        gap, tol = p.get("gap"), p.get("tolerance")
        if p.get("first_tokens") != firsts:
            out.append(f"first_token_criterion: first_tokens {p.get('first_tokens')} for the {lens[i]}-token prompt, "
                       f"the runs generated {firsts}")
        if argmaxes != {p.get("reference_argmax")}:
            out.append(f"first_token_criterion: reference_argmax {p.get('reference_argmax')!r} for the {lens[i]}-token "
                       f"prompt, reference_first_token's {sorted(map(str, argmaxes))}")
        if not isinstance(gap, (int, float)) or not isinstance(tol, (int, float)) or p.get("decisive") is not (gap > tol):
            out.append(f"first_token_criterion: decisive {p.get('decisive')!r} for the {lens[i]}-token prompt with gap "
                       f"{gap!r} and tolerance {tol!r}")
    if crit.get("decisive_prompts") != sum(p.get("decisive") is True for p in per):
        out.append(f"first_token_criterion: decisive_prompts {crit.get('decisive_prompts')!r}, per_prompt has "
                   f"{sum(p.get('decisive') is True for p in per)}")
    return out


def unrecorded_failures(crit: dict) -> list[str]:
    """A first-token criterion's decisive prompts whose first token in some run is not the reference's argmax, where
    it records no failure (its writer writes one for each): one line per prompt."""
    out = []
    for p in crit.get("per_prompt") or []:
        if isinstance(p, dict) and p.get("decisive") is True and isinstance(p.get("first_tokens"), dict):
            wrong = {k: t for k, t in p["first_tokens"].items() if t != p.get("reference_argmax")}
            if wrong:
                out.append(f"first_token_criterion: prompt {p.get('prompt_len')} is decisive and {wrong} is not the "
                           f"reference's argmax {p.get('reference_argmax')}, yet no failure is recorded")
    return out


def criterion_figure_problems(rec: dict) -> list[str]:
    """``first_token_criterion``'s figures against each other, as
    :func:`sparse_mla.launch.forward_rounding.first_token_gap` makes them: each prompt's ``tolerance`` is
    ``lam * sqrt(2) * sigma``, ``lam = sqrt(2 ln(2 n / P_FAIL))`` for the ``n`` prompts judged together (to 1e-9
    relative); its ``arithmetic`` is vLLM's (:func:`~sparse_mla.launch.forward_rounding.engine_arithmetic`) for a
    checkpoint dtype and the record's KV-cache dtype (an fp8 cache: e4m3's roundoff, else none)."""
    import math

    crit = rec.get("first_token_criterion")
    if not isinstance(crit, dict) or "error" in crit:
        return []
    from ..kernels.error_bounds import P_FAIL
    from ..launch.forward_rounding import engine_arithmetic

    per = [p for p in crit.get("per_prompt") or [] if isinstance(p, dict)]
    lam = math.sqrt(2.0 * math.log(2.0 * max(1, len(per)) / P_FAIL)) * math.sqrt(2.0)
    out = [f"first_token_criterion: tolerance {p['tolerance']!r} for the {p.get('prompt_len')}-token prompt is not "
           f"{lam:.6g} x its sigma {p['sigma']!r} (lam sqrt(2) for {len(per)} prompts judged together)"
           for p in per if _num(p.get("tolerance")) and _num(p.get("sigma"))
           and not abs(p["tolerance"] - lam * p["sigma"]) <= 1e-9 * abs(lam * p["sigma"])]
    kv = rec.get("kv_cache_dtype", "auto")
    arith = crit.get("arithmetic")
    if isinstance(arith, dict) and isinstance(kv, str):
        engines = [engine_arithmetic(d, kv).__dict__ for d in ("bfloat16", "float16", "float32")]
        if not any(_same(arith, e) for e in engines):
            out.append(f"first_token_criterion: arithmetic {arith} is not vLLM's for a KV cache of {kv!r} "
                       f"(engine_arithmetic: {engines[0]} for a bfloat16 checkpoint)")
    return out


#: When the writer began to write ``serve.compared_with`` (commit 8cef006's date): before it, ``matches_offline``
#: compared the served tokens with our backend's offline run (:data:`sparse_mla.launch.specs.OURS`) and named none
#: (``results/h200/launch_h200.json``, ``launch_tp2.json``).
COMPARED_WITH_SINCE = "2026-11-30T00:48:46+00:00"


def _compared_with(rec: dict, s: dict):
    """The offline run ``serve.matches_offline`` compares with: its ``compared_with``, or our backend's run in a
    record dated before :data:`COMPARED_WITH_SINCE` that names none."""
    from ..launch.specs import OURS

    when = header_time((rec.get("environment") or {}).get("date")) if isinstance(rec.get("environment"), dict) \
        else None
    older = "compared_with" not in s and when is not None and when < header_time(COMPARED_WITH_SINCE)
    return OURS if older else s.get("compared_with")


def served_problems(rec: dict) -> list[str]:
    """``serve.matches_offline`` against the served tokens and the offline run it names (``compared_with``: the
    writer writes both or neither; a record before :data:`COMPARED_WITH_SINCE`: ours, unnamed)."""
    s = rec.get("serve")
    if not isinstance(s, dict) or ("matches_offline" not in s and "compared_with" not in s):
        return []
    if "matches_offline" not in s:
        return [f"serve: compared_with {s.get('compared_with')!r} and no matches_offline (the writer writes both)"]
    against = _compared_with(rec, s)
    run = _with_generations(rec).get(against)
    if run is None or not run["generations"] or not isinstance(run["generations"][0], dict):
        return [f"serve: matches_offline compares with {against!r}, which has no generations here"]
    same = s.get("token_ids") == run["generations"][0].get("token_ids", [])[:16]
    return [] if s["matches_offline"] is same else \
        [f"serve: matches_offline {s['matches_offline']!r}, yet its tokens and {against}'s first 16 are "
         f"{'the same' if same else 'not the same'}"]


def run_problems(rec: dict, name: str, run: dict) -> list[str]:
    """One engine run's ``layers``, ``generations`` and ``ran`` against its request and the record's
    ``prompt_lengths`` and ``model`` (module docstring)."""
    out = [f"{name}: {key} is empty" for key in ("layers", "generations") if key in run and not run[key]]
    lens = rec.get("prompt_lengths")
    gens = run.get("generations") if isinstance(run.get("generations"), list) else []
    if isinstance(lens, list) and gens and [g.get("prompt_len") if isinstance(g, dict) else None for g in gens] != lens:
        out.append(f"{name}: generations for prompts of {[g.get('prompt_len') for g in gens if isinstance(g, dict)]} "
                   f"tokens, the record's prompt_lengths are {lens}")
    out += [f"{name}: the generation for the {g.get('prompt_len')}-token prompt has {len(g.get('token_ids') or [])} "
            f"token(s) and {len(g.get('logprobs') or [])} log-prob(s)" for g in gens if isinstance(g, dict)
            and (not g.get("token_ids") or len(g.get("logprobs") or []) != len(g["token_ids"]))][:1]
    vocab = rec["model"].get("vocab_size") if isinstance(rec.get("model"), dict) else None
    return out + first_step_problems(name, gens) + vocab_problems(name, gens, vocab) + _layer_problems(rec, name, run)


def vocab_problems(k: str, gens: list, vocab) -> list[str]:
    """Token ids (generated, and the first step's top log-probs' keys) below the model's ``vocab_size`` (``vocab``;
    not an integer: a record without one, nothing checked). The first generation that names another, one line."""
    if not isinstance(vocab, int):
        return []
    for i, g in enumerate(gens):
        top = g.get("first_top_logprobs") if isinstance(g, dict) and isinstance(g.get("first_top_logprobs"), dict) \
            else {}
        ids = [*(g.get("token_ids") or []), *(int(t) if t.isdigit() else t for t in top)] if isinstance(g, dict) \
            else []
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            return [f"{k}: generation {i} names token {bad[0]!r}; accepted: ids below the model's vocab_size {vocab}"]
    return []


def first_step_problems(name: str, gens: list) -> list[str]:
    """Each generation's first step against itself, as :func:`sparse_mla.launch.engine.generations` writes it from
    one vLLM ``Logprob`` dict at ``temperature=0`` (launch's and the GLM-5.3-Flash tool's sampling: greedy): vLLM
    returns the chosen token's log-prob with the top-k, so the first token is a key of ``first_top_logprobs``; greedy
    chose it, so its log-prob there is the highest (ties allowed: two logits a log-softmax rounds alike); and
    ``logprobs[0]`` is that log-prob, exactly (the same float of the same dict). Non-finite values are left to
    :func:`sparse_mla.launch.engine.nan_logprobs` (unproven). The first line that fails, per run."""
    import math

    for g in gens:
        toks, lps, top = (g.get("token_ids"), g.get("logprobs"), g.get("first_top_logprobs")) if isinstance(
            g, dict) else (None, None, None)
        if not (isinstance(toks, list) and toks and isinstance(lps, list) and lps and isinstance(top, dict) and top):
            continue
        where = f"{name}: the generation for the {g.get('prompt_len')}-token prompt"
        chosen = top.get(str(toks[0]))
        if chosen is None:
            return [f"{where}: its first token {toks[0]} is not among its first-step log-probs "
                    f"({len(top)}; vLLM returns the chosen token's with the top-k)"]
        finite = [v for v in top.values() if _num(v) and math.isfinite(v)]
        if not (_num(chosen) and math.isfinite(chosen)) or not (_num(lps[0]) and math.isfinite(lps[0])):
            continue
        if chosen < max(finite):
            return [f"{where}: its first token {toks[0]} has log-prob {chosen!r} among its first-step log-probs, "
                    f"below their highest {max(finite)!r}; greedy (temperature 0) chooses the highest"]
        if lps[0] != chosen:
            return [f"{where}: logprobs[0] {lps[0]!r}, its first-step log-prob of token {toks[0]} {chosen!r} (the "
                    f"same float, written from one vLLM Logprob)"]
    return []


def layer_map_problems(name: str, ran: dict, layers: dict, n_layers=None) -> list[str]:
    """A run's ``layers`` (:func:`sparse_mla.vllm_plugin.ran.layer_backends`: ``{name: {"backend", "prefill",
    ...}}``) against its ``ran`` block, which :func:`~sparse_mla.vllm_plugin.ran.collect` counts from those same
    layers: per backend, the layers ``ran`` counts in ``attention``, ``indexer_cache``, ``other_layers`` and
    ``draft_attention``; per MLA prefill, the layers ``mla_prefill`` counts (where the layers name their prefill);
    a speculative drafter's layers are in ``layers`` and counted in ``draft_attention`` only (its indexer's cache
    and its prefill in neither count: at most one each per drafter layer); with ``n_layers`` (the model's decoder
    layers, a drafter's included; None: not known), entries for the decoder layers ``0 .. n_layers - 1`` exactly (a
    non-integer ``n_layers``: none matches). One line per disagreement (issue 47, round 10: e12, d04, e53, d03,
    g11)."""
    if not _counted(ran):
        return []                                   # no counts: the ran block's shape line (ran.shape_errors)
    entries = [v for v in layers.values() if isinstance(v, dict)]
    drafted = _layers(ran.get("draft_attention")) or 0
    out = layer_count_problems(name, ran, layers)
    pre, counted = Counter(v["prefill"] for v in entries if v.get("prefill")), ran.get("mla_prefill") or {}
    over = {p: pre[p] - counted.get(p, 0) for p in {*pre, *counted}} if _layers(counted) is not None else {}
    if any("prefill" in v for v in entries) and (min(over.values(), default=0) < 0 or sum(over.values()) > drafted):
        out.append(f"{name}: ran.mla_prefill {counted}, its layers name the prefill {dict(pre)} (collect counts each "
                   f"MLA layer's" + (f"; the drafter's {drafted} layer(s) in neither)" if drafted else ")"))
    idx = sorted({int(m.group(1)) for n in layers if (m := re.match(r"model\.layers\.(\d+)\.", n))})
    if n_layers is not None and idx != list(range(n_layers if _int(n_layers) else -1)):
        out.append(f"{name}: layers of {len(idx)} decoder layers, the model's num_hidden_layers is {n_layers!r}"
                   + (f" (and {drafted} drafter layer(s))" if drafted else ""))
    return out


_COUNTS = ("attention", "indexer_cache", "other_layers", "draft_attention")


def _counted(ran: dict) -> bool:
    """Whether each of ``ran``'s per-backend counts (:data:`_COUNTS`) that is there is a count of layers."""
    return all(ran.get(p) is None or _layers(ran.get(p)) is not None for p in _COUNTS)


def layer_count_problems(name: str, ran: dict, layers: dict) -> list[str]:
    """Per backend, the layers of ``layers`` against those ``ran`` counts in :data:`_COUNTS` (a speculative drafter's
    indexer cache in neither: at most one per drafter layer); one line, or none (also where ``ran`` has no counts).
    Part of :func:`layer_map_problems`."""
    from ..vllm_plugin.ran import INDEXER_CACHE_BACKEND

    if not _counted(ran):
        return []
    drafted = _layers(ran.get("draft_attention")) or 0
    have, said = Counter(v["backend"] for v in layers.values() if isinstance(v, dict) and v.get("backend")), Counter()
    for p in _COUNTS:
        said.update(ran.get(p) or {})
    extra = {b: have[b] - said[b] for b in {*have, *said}}
    return [] if all(n == 0 or (b == INDEXER_CACHE_BACKEND and 0 < n <= drafted) for b, n in extra.items()) else \
        [f"{name}: layers name {dict(sorted(have.items()))}, its ran counts {dict(sorted(said.items()))}"
         + (f" (the drafter's {drafted} layer(s) in draft_attention)" if drafted else "")]


def _layer_problems(rec: dict, name: str, run: dict) -> list[str]:
    """``layers`` against ``ran`` (:func:`layer_map_problems`; the decoder layers the record's ``model``'s and the
    drafter's) and the KV dtype asked (the run's, else the record's): every attention layer's KV dtype the one asked;
    ``attention_backends`` the layers' backends (:func:`sparse_mla.launch.engine.attention_backends`)."""
    from ..launch.engine import attention_backends

    asked = run.get("kv_cache_dtype", rec.get("kv_cache_dtype"))
    layers = run.get("layers") if isinstance(run.get("layers"), dict) else None
    ran = run.get("ran") if isinstance(run.get("ran"), dict) else {}
    if layers is None:
        return []
    model = rec.get("model") if isinstance(rec.get("model"), dict) else {}
    decoder = model.get("num_hidden_layers")
    decoder = decoder + (_layers(ran.get("draft_attention")) or 0) if _int(decoder) else None
    out = layer_map_problems(name, ran, layers, decoder) if "ran" in run else []
    for n, v in layers.items():
        kv = v.get("kv_cache_dtype") if isinstance(v, dict) else None
        if isinstance(v, dict) and n not in _indexer_layers(layers) and isinstance(asked, str) and kv != asked and \
                not (asked in FP8_KV_CACHE_DTYPES and kv in FP8_KV_CACHE_DTYPES):
            out.append(f"{name}: layer {n} has KV dtype {kv!r}, the run asked {asked!r}")
            break
    listed = run.get("attention_backends")
    named = {**(ran.get("attention") or {}), **(ran.get("indexer_cache") or {}), **(ran.get("other_layers") or {})} \
        if isinstance(ran.get("attention"), dict) else None
    if isinstance(listed, list) and named is not None and set(listed) - set(named):
        out.append(f"{name}: attention_backends {listed}, ran counts {sorted(named)}")
    elif isinstance(listed, list) and all(isinstance(v, dict) and "backend" in v for v in layers.values()) and \
            listed != attention_backends(layers):
        out.append(f"{name}: attention_backends {listed}, its layers' backends {attention_backends(layers)} (the "
                   f"writer lists each once, sorted: launch.engine.attention_backends)")
    return out


def _indexer_layers(layers: dict) -> set[str]:
    """The names of ``layers`` that are the indexer's cache or have no backend (:func:`count_backends`' split)."""
    return {n for n, v in layers.items() if not isinstance(v, dict) or not v.get("backend")
            or not count_backends({n: v})[0]}


def ran_blocks(runs: dict[str, dict]) -> list[tuple[str, dict]]:
    """``(where, ran)`` of every ``ran`` block of a record's engine runs (``runs``: :func:`sparse_mla.records.
    engine_tables.engine_runs`, the served check included): each run's own and each of its live servers'
    (``servers[i].ran``, a serving benchmark's), and every rank's of a tensor-parallel engine (``ran_per_rank``),
    where they are objects."""
    out = []
    for k, r in runs.items():
        if isinstance(r.get("ran"), dict):
            out.append((f"{k}: ran", r["ran"]))
        servers = r.get("servers") if isinstance(r.get("servers"), list) else []
        out += [(f"{k}: servers[{i}].ran", s["ran"]) for i, s in enumerate(servers)
                if isinstance(s, dict) and isinstance(s.get("ran"), dict)]
        out += [(f"{k}: {where}ran_per_rank[{j}]", ran) for where, holder in
                [("", r), *((f"servers[{i}].", s) for i, s in enumerate(servers) if isinstance(s, dict))]
                for j, ran in enumerate(holder.get("ran_per_rank") if isinstance(holder.get("ran_per_rank"), list)
                                        else []) if isinstance(ran, dict)]
    return out


def _layers(counts) -> int | None:
    """The layers a ``ran`` count (``{backend: layers}``) adds up to; None where it is no such count."""
    if not isinstance(counts, dict) or not all(_int(v) for v in counts.values()):
        return None
    return sum(counts.values())


def model_layer_problems(rec: dict, runs: dict[str, dict]) -> list[str]:
    """Every ``ran`` block (:func:`ran_blocks`) against the record's ``model``: ``attention`` counts
    ``model.num_hidden_layers`` layers (every layer of a GLM-5 / DeepSeek-V3.2 checkpoint is an MLA layer), and the
    indexer's cache layers (``indexer_cache``, one per layer with its own indexer) no more than the model's layers
    nor than the attention layers that ran; ``mla_prefill``, where present, one per attention layer (each MLA layer
    of an engine has the prefill its config selects; a drafter's are not counted); a ``num_hidden_layers`` that is
    no integer is named."""
    model = rec.get("model") if isinstance(rec.get("model"), dict) else {}
    want = model.get("num_hidden_layers")
    if want is not None and not _int(want):
        return [f"model.num_hidden_layers {want!r} is no layer count"]
    out = []
    for where, ran in ran_blocks(runs):
        att, cache = _layers(ran.get("attention")), _layers(ran.get("indexer_cache"))
        if want is not None and att is not None and att != want:
            out.append(f"{where}.attention counts {att} attention layer(s), the record's model has {want}")
        if want is not None and cache is not None and cache > want:
            out.append(f"{where}.indexer_cache counts {cache} indexer-cache layer(s), more than the record's model's "
                       f"{want} layers (one indexer per layer at most)")
        if att is not None and cache is not None and cache > att:
            out.append(f"{where}.indexer_cache counts {cache} indexer-cache layer(s), more than the {att} attention "
                       f"layers that ran")
        pre = _layers(ran.get("mla_prefill"))
        if want is not None and att == want and pre is not None and pre != att:    # all MLA layers: one prefill each
            out.append(f"{where}.mla_prefill counts {pre} layer(s), the {att} MLA layers that ran each have one "
                       f"(vLLM's MLAAttention takes get_mla_prefill_backend(vllm_config), one engine's config)")
    return out


def serving_summary_problems(rec: dict) -> list[str]:
    """A serving benchmark's (``repeats``) per-run ``summary``: the spread of its repeats' metrics and its servers'
    start times, as :func:`sparse_mla.bench.serve.refresh_run` computes it."""
    reps = rec.get("repeats")
    if not isinstance(reps, dict) or not isinstance(rec.get("runs"), dict):
        return []
    from ..bench.serve import SUMMARY_METRICS, spread

    out = []
    for k, run in rec["runs"].items():
        have = [x for x in reps.get(k) or [] if isinstance(x, dict)]
        if not isinstance(run, dict) or "summary" not in run:
            continue
        want = {m: spread(x.get(m) for x in have) for m in SUMMARY_METRICS}
        want["server_up_s"] = spread(s.get("server_up_s") for s in run.get("servers") or [] if isinstance(s, dict))
        bad = sorted(m for m in want if not _same(want[m], (run["summary"] or {}).get(m)))
        if bad:
            out.append(f"{k}: {', '.join('summary.' + m for m in bad)} not the spread of its repeats")
    return out


def throughput_problems(name: str, run: dict) -> list[str]:
    """An engine run's ``throughput`` against itself, as :func:`sparse_mla.launch.engine` writes it:
    ``output_tokens_per_s`` is ``generated_tokens`` over the seconds that ``seconds`` rounds to 3 decimals (itself
    rounded to 0.1 tokens/s; a NaN, "not measured", gives none: the writer times every pass), and ``num_seqs`` x
    ``max_tokens`` tokens were generated (the pass ignores EOS)."""
    t = run.get("throughput")
    if not isinstance(t, dict):
        return []
    out = []
    gen, sec, rate = t.get("generated_tokens"), t.get("seconds"), t.get("output_tokens_per_s")
    if _int(gen) and _int(t.get("num_seqs")) and _int(t.get("max_tokens")) and gen != t["num_seqs"] * t["max_tokens"]:
        out.append(f"{name}: throughput.generated_tokens {gen}, not num_seqs {t['num_seqs']} x max_tokens "
                   f"{t['max_tokens']} (the pass ignores EOS)")
    if _int(gen) and _num(sec) and not sec < 0 and "output_tokens_per_s" in t:     # NaN seconds give no rate
        low = gen / (sec + 5e-4) - 0.05                       # seconds was rounded to 3 decimals, the rate to 1
        high = gen / (sec - 5e-4) + 0.05 if sec > 5e-4 else float("inf")
        if not (_num(rate) and low <= rate <= high):
            out.append(f"{name}: throughput.output_tokens_per_s {rate!r}, not its {gen} generated tokens in "
                       f"{sec!r} s")
    return out


def length_problems(rec: dict, name: str, run: dict) -> list[str]:
    """Prompts and generations against the record's ``max_model_len`` (vLLM refuses a request longer than it): every
    length of ``prompt_lengths``, each generation's prompt plus its tokens, the throughput pass's prompt plus its
    ``max_tokens``."""
    mml = rec.get("max_model_len")
    if not _int(mml):
        return []
    gens = [g for g in run.get("generations") or [] if isinstance(g, dict)] if isinstance(run.get("generations"),
                                                                                            list) else []
    t = run.get("throughput") if isinstance(run.get("throughput"), dict) else {}
    lens = [(f"a {g['prompt_len']}-token prompt and its {len(g.get('token_ids') or [])} generated tokens",
             g["prompt_len"] + len(g.get("token_ids") or [])) for g in gens if _int(g.get("prompt_len"))]
    if _int(t.get("prompt_len")) and _int(t.get("max_tokens")):
        lens.append((f"the throughput pass's {t['prompt_len']}-token prompts and {t['max_tokens']} new tokens",
                     t["prompt_len"] + t["max_tokens"]))
    return [f"{name}: {what} exceed max_model_len {mml}" for what, n in lens if n > mml][:1]


def serving_load_problems(rec: dict) -> list[str]:
    """A serving benchmark's repeats against its load and runs: no pass completed more prompts than it asked, each
    asked the load's ``num_prompts`` and is of a run of the record, and ``order`` has one round per repeat of the
    load, each the record's runs, each once (:func:`sparse_mla.bench.serve.rotated`)."""
    reps, load = rec.get("repeats"), rec.get("load")
    if not isinstance(reps, dict):
        return []
    out = []
    asked = load.get("num_prompts") if isinstance(load, dict) else None
    for k, have in reps.items():
        for i, x in enumerate(have if isinstance(have, list) else []):
            if not isinstance(x, dict):
                continue
            done, n = x.get("completed"), x.get("num_prompts")
            if _num(done) and _num(n) and done > n:
                out.append(f"{k}: repeat {i + 1} completed {done} prompts of the {n} it asked")
            if _int(asked) and _num(n) and n != asked:
                out.append(f"{k}: repeat {i + 1} asked {n} prompts, the load {asked}")
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    out += [f"repeats of {k!r}, which is no run of the record ({sorted(runs)})" for k in reps if k not in runs]
    order = rec.get("order") if isinstance(rec.get("order"), list) else []
    for i, rnd in enumerate(order):             # sparse_mla.bench.serve.rotated: every run once a round
        names = rnd if isinstance(rnd, list) else [rnd]
        if sorted(map(str, names)) != sorted(runs):
            out.append(f"order round {i + 1} {names!r} is not the record's runs, each once ({sorted(runs)})")
    n = load.get("repeats") if isinstance(load, dict) else None
    if order and _int(n) and len(order) != n:
        out.append(f"order has {len(order)} rounds, the load {n} repeats")
    return out


def consistency_problems(rec: dict, runs: dict[str, dict]) -> list[str]:
    """Every line of this module's checks for one record (``runs``: its engine runs,
    :func:`sparse_mla.records.engine_tables.engine_runs`); ``[]`` where its summaries are its data's."""
    out = summary_problems(rec) + reference_problems(rec) + criterion_figure_problems(rec) + served_problems(rec)
    out += serving_summary_problems(rec)
    out += serving_load_problems(rec)
    out += [p for k, r in runs.items() if k != "serve" for p in throughput_problems(k, r) + length_problems(rec, k, r)]
    out += model_layer_problems(rec, runs) + serving_record_problems(rec) + serving_result_problems(rec)
    out += serve_command_problems(rec)
    return out + [p for k, r in runs.items() if k != "serve" for p in run_problems(rec, k, r)]
