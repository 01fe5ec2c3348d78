"""The parity criterion of a launch record: each engine's first token against the independent reference, where the
reference decides it.

An engine computing a bf16 checkpoint in bf16 with an fp8 indexer does not reproduce the float32 reference's
logits; it reproduces them within its rounding. Its first greedy token must be the reference's argmax wherever the
reference's gap between its two most likely tokens is larger than the gap can move under the engine's arithmetic,
and decides nothing where it is smaller (random weights make near-ties: on 2026-12-01 the 900-token prompt's top-2
log-probs were 0.08 apart while engines differed from the reference by up to 0.085).

The tolerance per prompt is :func:`sparse_mla.launch.forward_rounding.first_token_gap`: ``lam * sqrt(2)`` times the
gap's spread over Monte Carlo forwards of the reference with vLLM's arithmetic (bf16 activations and cache or the
fp8_ds_mla cache, fp8 e4m3 indexer q and k: :func:`~sparse_mla.launch.forward_rounding.engine_arithmetic`), ``lam``
the Gaussian tail for all prompts together at ``P_FAIL``.
"""
from __future__ import annotations

import os

RULE = ("first token == the reference's argmax for every prompt whose reference top-2 log-prob gap exceeds the "
        "tolerance lam * sqrt(2) * sigma, sigma the gap's spread over Monte Carlo forwards of the reference with the "
        "engine's arithmetic (sparse_mla.launch.forward_rounding.first_token_gap); other prompts decide nothing")


def first_token_criterion(model: str | os.PathLike, prompts: list[list[int]], ref: list[dict], runs: dict[str, dict],
                          kv_cache_dtype: str = "auto", samples: int = 16, device: str | None = None) -> dict:
    """The criterion (module docstring) over ``runs`` (``{key: offline run record}`` with ``generations``, in prompt
    order) against ``ref`` (:func:`sparse_mla.launch.engine.reference_first_token`, the same prompts). Returns
    ``{"rule", "arithmetic", "per_prompt": [{"prompt_len", "reference_argmax", "reference_second", "gap",
    "tolerance", "sigma", "decisive", "first_tokens": {key: token}}], "decisive_prompts", "failures"}``; ``failures``
    names each run whose first token differs from the argmax on a decisive prompt. ``device``: where the float64
    forwards run (default: a GPU if there is one)."""
    import torch

    from .checkpoint import load_weights
    from .forward_rounding import engine_arithmetic, first_token_gap

    cfg, sd = load_weights(model)
    arithmetic = engine_arithmetic(str(cfg.get("dtype", cfg.get("torch_dtype", "bfloat16"))), kv_cache_dtype)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")

    def gap(ids, top2):
        return first_token_gap(cfg, sd, torch.tensor(ids), top2, samples=samples, count=len(prompts),
                               arithmetic=arithmetic, device=device)

    return judge_first_tokens(prompts, [r["logprobs"] for r in ref], runs, gap, arithmetic, samples)


def glm5next_first_token_criterion(reference, prompts: list[list[int]], runs: dict[str, dict],
                                   dtype: str = "bfloat16", samples: int = 16) -> dict:
    """:func:`first_token_criterion` for GLM-5.3-Flash: ``reference`` a :class:`~sparse_mla.launch.glm5next_reference.
    Glm5NextReference` (its device runs the float64 forwards), its first-token log-probs and the gap's spread under
    vLLM's arithmetic for a checkpoint of ``dtype`` (its ``config.json``'s) and a cache of that dtype
    (:func:`sparse_mla.launch.glm5next_rounding.first_token_gap`); the same record."""
    import torch

    from .forward_rounding import engine_arithmetic
    from .glm5next_rounding import first_token_gap

    arithmetic = engine_arithmetic(dtype, "auto")
    ref = [torch.log_softmax(reference.logits(ids)[-1], -1).cpu() for ids in prompts]

    def gap(ids, top2):
        return first_token_gap(reference, ids, top2, samples=samples, count=len(prompts), arithmetic=arithmetic)

    return judge_first_tokens(prompts, ref, runs, gap, arithmetic, samples)


def judge_first_tokens(prompts: list[list[int]], ref: list, runs: dict[str, dict], gap, arithmetic,
                       samples: int) -> dict:
    """The criterion's record from the reference's first-token log-probs ``ref`` (one float tensor ``[vocab]`` per
    prompt) and ``gap(ids, (argmax, second))`` (a ``first_token_gap`` dict with ``tolerance`` and ``sigma``)."""
    import torch

    per, failures = [], []
    for i, (ids, lp) in enumerate(zip(prompts, ref)):
        top = [int(t) for t in torch.topk(lp, 2).indices]
        g = gap(ids, (top[0], top[1]))
        gap_ = float(lp[top[0]] - lp[top[1]])
        firsts = {k: v["generations"][i]["token_ids"][0] for k, v in runs.items()}
        decisive = gap_ > g["tolerance"]
        per.append({"prompt_len": len(ids), "reference_argmax": top[0], "reference_second": top[1], "gap": gap_,
                    "tolerance": g["tolerance"], "sigma": g["sigma"], "decisive": decisive, "first_tokens": firsts})
        failures += [f"first token: {k} gave {t} for the {len(ids)}-token prompt, the reference's argmax is {top[0]} "
                     f"with a top-2 gap {gap_:.4g} > tolerance {g['tolerance']:.4g}"
                     for k, t in firsts.items() if decisive and t != top[0]]
    return {"rule": RULE, "arithmetic": arithmetic.__dict__, "samples": samples, "per_prompt": per,
            "decisive_prompts": sum(p["decisive"] for p in per), "failures": failures}
