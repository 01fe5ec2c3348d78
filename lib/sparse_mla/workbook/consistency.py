"""What a run record holds twice, recomputed from its own data: ``records check`` calls a record whose summaries say
otherwise than the data they summarize **invalid** (no writer of ours makes one; each summary is computed from that
data by the function named below, in the process that ran).

* ``parity_vs_ours`` and ``parity_pairs``: ``identical``, ``first_divergence``, ``all_identical`` and the log-prob
  differences are :func:`sparse_mla.launch.engine.compare` of the two runs' ``generations``;
* ``engine_agreement``: :func:`sparse_mla.launch.agreement.first_token_agreement` of the runs' generations;
* ``reference_first_token``: each ``vllm_first_token`` is its run's first generated token for that prompt, and
  ``same_first_token`` says whether it is the ``reference_argmax`` (:func:`sparse_mla.launch.engine.compare_reference`);
* ``serve.matches_offline``: the served tokens against the first 16 of the run it names (``compared_with``);
* each engine run: ``layers`` and ``generations`` not empty where the writer wrote them, one generation per prompt of
  ``prompt_lengths`` in its order, every attention layer's KV dtype the one asked (an fp8 request: vLLM's fp8 layout,
  ``fp8_ds_mla``, :data:`sparse_mla.layouts.FP8_KV_CACHE_DTYPES`), and ``ran.attention`` counting as many layers as
  the record's ``model.num_hidden_layers`` (every layer of a GLM-5 / DeepSeek-V3.2 checkpoint is an MLA layer; a
  model block that says otherwise names ``mla_layers``).

What it cannot see: a record whose data and summaries were edited together (:mod:`sparse_mla.workbook.proof`).
"""
from __future__ import annotations

import json

from ..layouts import FP8_KV_CACHE_DTYPES
from ..vllm_plugin.ran import count_backends


def _same(a, b) -> bool:
    """Equal as JSON writes them (a NaN equals a NaN; float values survive JSON exactly)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _with_generations(rec: dict) -> dict[str, dict]:
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) else {}
    return {k: r for k, r in runs.items() if isinstance(r, dict) and isinstance(r.get("generations"), list)}


def parity_problems(rec: dict) -> list[str]:
    """``parity_vs_ours`` (every run against ``parity_baseline``) and ``parity_pairs`` against
    :func:`sparse_mla.launch.engine.compare` of the runs' generations."""
    from ..launch.engine import compare

    ok, out = _with_generations(rec), []
    pairs = [(rec.get("parity_baseline"), k, v, f"parity_vs_ours.{k}")
             for k, v in (rec.get("parity_vs_ours") or {}).items()] if isinstance(rec.get("parity_vs_ours"), dict) \
        else []
    pairs += [(p.get("a"), p.get("b"), {f: p.get(f) for f in ("per_prompt", "all_identical")},
               f"parity_pairs {p.get('a')} / {p.get('b')}")
              for p in rec.get("parity_pairs") or [] if isinstance(p, dict)]
    for a, b, said, where in pairs:
        if a not in ok or b not in ok:
            out.append(f"{where}: compares {a} with {b}, and the record has no generations of "
                       f"{a if a not in ok else b}")
        elif not _same(compare(ok[a], ok[b]), said):
            out.append(f"{where}: not what its runs' generations give (identical, first_divergence, all_identical "
                       f"or log-prob differences)")
    return out


def agreement_problems(rec: dict) -> list[str]:
    """``engine_agreement`` rows against :func:`sparse_mla.launch.agreement.first_token_agreement`."""
    from ..launch.agreement import first_token_agreement

    rows = rec.get("engine_agreement")
    if not isinstance(rows, list) or not rows:
        return []
    ok = _with_generations(rec)
    base = rows[0].get("baseline") if isinstance(rows[0], dict) else None
    if base not in ok:
        return [f"engine_agreement: its baseline {base!r} has no generations in the record"]
    lens = [r.get("prompt_len") if isinstance(r, dict) else None for r in rows]
    keep = [i for i, g in enumerate(ok[base]["generations"]) if isinstance(g, dict) and g.get("prompt_len") in lens]
    try:
        want = first_token_agreement(ok, base, keep)
    except (KeyError, IndexError, TypeError) as e:
        return [f"engine_agreement: its runs' generations cannot give it ({type(e).__name__}: {e})"]
    return [] if _same(want, rows) else ["engine_agreement: not what its runs' generations give (first tokens, "
                                         "same_first_token, common top-k or log-prob differences)"]


def reference_problems(rec: dict) -> list[str]:
    """``reference_first_token``: each entry's first token is its run's, and ``same_first_token`` says whether it is
    the reference's argmax."""
    ref = rec.get("reference_first_token")
    if not isinstance(ref, dict) or "error" in ref:
        return []
    ok, out = _with_generations(rec), []
    for k, entries in ref.items():
        gens = {g.get("prompt_len"): g for g in (ok.get(k) or {}).get("generations", []) if isinstance(g, dict)}
        for e in entries if isinstance(entries, list) else []:
            g = gens.get(e.get("prompt_len")) if isinstance(e, dict) else None
            if g is None:
                out.append(f"reference_first_token.{k}: a prompt of {e.get('prompt_len') if isinstance(e, dict) else e}"
                           f" tokens the run has no generation of")
                continue
            first = (g.get("token_ids") or [None])[0]
            if e.get("vllm_first_token") != first:
                out.append(f"reference_first_token.{k}: vllm_first_token {e.get('vllm_first_token')!r} for the "
                           f"{e['prompt_len']}-token prompt, the run generated {first!r}")
            if e.get("same_first_token") is not (first == e.get("reference_argmax")):
                out.append(f"reference_first_token.{k}: same_first_token {e.get('same_first_token')!r} for the "
                           f"{e['prompt_len']}-token prompt, yet {first!r} vs the reference's "
                           f"{e.get('reference_argmax')!r}")
    return out


def served_problems(rec: dict) -> list[str]:
    """``serve.matches_offline`` against the served tokens and the offline run it names."""
    s = rec.get("serve")
    if not isinstance(s, dict) or "matches_offline" not in s:
        return []
    run = _with_generations(rec).get(s.get("compared_with"))
    if run is None or not run["generations"] or not isinstance(run["generations"][0], dict):
        return [f"serve: matches_offline compares with {s.get('compared_with')!r}, which has no generations here"]
    same = s.get("token_ids") == run["generations"][0].get("token_ids", [])[:16]
    return [] if s["matches_offline"] is same else \
        [f"serve: matches_offline {s['matches_offline']!r}, yet its tokens and {s['compared_with']}'s first 16 are "
         f"{'the same' if same else 'not the same'}"]


def run_problems(rec: dict, name: str, run: dict) -> list[str]:
    """One engine run's ``layers``, ``generations`` and ``ran.attention`` against its request and the record's
    ``prompt_lengths`` and ``model`` (module docstring)."""
    out = []
    for key in ("layers", "generations"):
        if key in run and not run[key]:
            out.append(f"{name}: {key} is empty")
    lens = rec.get("prompt_lengths")
    gens = run.get("generations")
    if isinstance(lens, list) and isinstance(gens, list) and gens and \
            [g.get("prompt_len") if isinstance(g, dict) else None for g in gens] != lens:
        out.append(f"{name}: generations for prompts of {[g.get('prompt_len') for g in gens if isinstance(g, dict)]} "
                   f"tokens, the record's prompt_lengths are {lens}")
    asked = run.get("kv_cache_dtype")
    layers = run.get("layers") if isinstance(run.get("layers"), dict) else {}
    attention = {n: v for n, v in layers.items() if isinstance(v, dict) and n not in _indexer_layers(layers)}
    for n, v in attention.items():
        kv = v.get("kv_cache_dtype")
        if v.get("backend") and isinstance(asked, str) and kv != asked and \
                not (asked in FP8_KV_CACHE_DTYPES and kv in FP8_KV_CACHE_DTYPES):
            out.append(f"{name}: layer {n} has KV dtype {kv!r}, the run asked {asked!r}")
            break
    return out + _layer_count(rec, name, run)


def _indexer_layers(layers: dict) -> set[str]:
    """The names of ``layers`` that are the indexer's cache or have no backend (:func:`count_backends`' split)."""
    return {n for n, v in layers.items() if not v.get("backend") or not count_backends({n: v})[0]}


def _layer_count(rec: dict, name: str, run: dict) -> list[str]:
    model = rec.get("model") if isinstance(rec.get("model"), dict) else {}
    want = model.get("mla_layers", model.get("num_hidden_layers"))
    att = (run.get("ran") or {}).get("attention") if isinstance(run.get("ran"), dict) else None
    if not isinstance(want, int) or not isinstance(att, dict) or not all(isinstance(v, int) for v in att.values()):
        return []
    got = sum(att.values())
    return [] if got == want else [f"{name}: ran.attention counts {got} attention layer(s), the record's model has "
                                   f"{want}"]


def consistency_problems(rec: dict, runs: dict[str, dict]) -> list[str]:
    """Every line of this module's checks for one record (``runs``: its engine runs,
    :func:`sparse_mla.records.engine_tables.engine_runs`); ``[]`` where its summaries are its data's."""
    out = parity_problems(rec) + agreement_problems(rec) + reference_problems(rec) + served_problems(rec)
    return out + [p for k, r in runs.items() if k != "serve" and "ran" in r for p in run_problems(rec, k, r)]
