"""sparse_mla.launch.agreement: the engines of a parity run against each other beyond --reference-max-len."""
from __future__ import annotations

import random

import pytest

from sparse_mla.launch.agreement import first_token_agreement, only_prompts, split_prompts


def gen(n, first, top):
    return {"prompt_len": n, "token_ids": [first, 7], "logprobs": [top.get(str(first), -1.0), -2.0],
            "first_top_logprobs": top}


@pytest.mark.parametrize("limit,judged,beyond", [(None, [0, 1, 2], []), (900, [0, 1], [2]), (10, [], [0, 1, 2])])
def test_split_prompts(limit, judged, beyond):
    assert split_prompts([[1] * 48, [1] * 900, [1] * 16384], limit) == (judged, beyond)


def test_only_prompts_keeps_the_generations_at_the_indices_and_nothing_else():
    runs = {"a": {"x": 1, "generations": ["g0", "g1", "g2"]}}
    assert only_prompts(runs, [0, 2]) == {"a": {"x": 1, "generations": ["g0", "g2"]}}
    assert runs["a"]["generations"] == ["g0", "g1", "g2"]          # the run records are not changed


def test_first_token_agreement_against_the_baseline():
    """Same first token or not; the largest |difference| over the token ids both top-k hold (ids only one holds, and
    -inf, left out); the baseline's own top-2 gap."""
    rng = random.Random(3)
    base_top = {str(t): -rng.uniform(1, 6) for t in range(20)}
    first = max(base_top, key=base_top.get)
    other_top = {k: v + rng.uniform(-0.05, 0.05) for k, v in list(base_top.items())[:15]}
    other_top.update({"999": -0.5, "3": float("-inf")})
    runs = {"base": {"generations": [gen(48, 0, {}), gen(65536, int(first), base_top)]},
            "other": {"generations": [gen(48, 0, {}), gen(65536, 999, other_top)]}}
    [row] = first_token_agreement(runs, "base", [1])
    ranked = sorted(base_top.values(), reverse=True)
    common = [k for k in other_top if k in base_top and k != "3"]
    assert row["prompt_len"] == 65536 and row["baseline_first_token"] == int(first)
    assert row["baseline_top2_gap"] == pytest.approx(ranked[0] - ranked[1])
    vs = row["vs"]["other"]
    assert vs == {"first_token": 999, "same_first_token": False, "common_top_k": len(common),
                  "max_abs_logprob_diff": pytest.approx(max(abs(other_top[k] - base_top[k]) for k in common))}
    assert "base" not in row["vs"]
