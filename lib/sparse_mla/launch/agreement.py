"""Where the reference forward is not run (prompts longer than ``--reference-max-len``): the engines of a parity run
against each other, through the first token's top-k log-probs each engine returned.

This is weaker than the reference criterion (:mod:`sparse_mla.launch.first_token`): two engines can agree and both be
wrong. It is recorded as what was seen, with no pass/fail verdict of its own; the reference criterion still judges
every prompt within ``--reference-max-len``.
"""
from __future__ import annotations

import math


def largest(values) -> float | None:
    """The largest of ``values`` (numbers), NaN where any is NaN, None where there are none. Python's ``max`` is no
    such maximum: a NaN compares false with everything, so ``max([nan, 1.0])`` is NaN but ``max([1.0, nan])`` is 1.0
    -- a NaN log-probability would vanish from a parity summary by its place in the list."""
    values = list(values)
    if not values:
        return None
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def split_prompts(prompts: list[list[int]], reference_max_len: int | None) -> tuple[list[int], list[int]]:
    """``(judged, beyond)``: the indices of the prompts the reference forward judges (length <= ``reference_max_len``;
    all when it is ``None``) and of those it does not."""
    judged = [i for i, p in enumerate(prompts) if reference_max_len is None or len(p) <= reference_max_len]
    return judged, [i for i in range(len(prompts)) if i not in judged]


def only_prompts(runs: dict[str, dict], keep: list[int]) -> dict[str, dict]:
    """``runs`` (offline run records, ``generations`` in prompt order) with only the generations at ``keep``."""
    return {k: {**v, "generations": [v["generations"][i] for i in keep]} for k, v in runs.items()}


def first_token_agreement(runs: dict[str, dict], baseline: str, keep: list[int]) -> list[dict]:
    """Per prompt at ``keep``, every run against ``baseline``: the first tokens, whether they are equal, the largest
    absolute difference of the first token's log-probs over the token ids both returned in their top-k, and the
    baseline's own top-2 gap (a disagreement where that gap is smaller than the difference is a near-tie)."""
    out = []
    for i in keep:
        base = runs[baseline]["generations"][i]
        btop = _top(base)
        ranked = sorted(btop.values(), reverse=True)
        row = {"prompt_len": base["prompt_len"], "baseline": baseline, "baseline_first_token": base["token_ids"][0],
               "baseline_top2_gap": ranked[0] - ranked[1] if len(ranked) > 1 else None, "vs": {}}
        for k, v in runs.items():
            if k == baseline:
                continue
            g = v["generations"][i]
            top = _top(g)
            diffs = [abs(top[t] - btop[t]) for t in top.keys() & btop.keys()]
            row["vs"][k] = {"first_token": g["token_ids"][0], "same_first_token": g["token_ids"][0] ==
                            base["token_ids"][0], "common_top_k": len(diffs),
                            "max_abs_logprob_diff": largest(diffs)}
        out.append(row)
    return out


def _top(generation: dict) -> dict[int, float]:
    return {int(k): v for k, v in generation.get("first_top_logprobs", {}).items() if math.isfinite(v)}
