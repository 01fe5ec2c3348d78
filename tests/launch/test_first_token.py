"""sparse_mla.launch.first_token: the parity criterion, on a real tiny checkpoint and its reference forward (CPU).

The tolerance of a prompt's top-2 gap comes from Monte Carlo forwards with vLLM's bf16 arithmetic; a bf16 forward of
the same model (the reference run in bf16, an implementation of that arithmetic) must land within it, and a run whose
first token is not the argmax fails only where the gap is larger than the tolerance.
"""
from __future__ import annotations

import pytest
import torch

from sparse_mla.launch import checkpoint as ck
from sparse_mla.launch.engine import reference_first_token
from sparse_mla.launch.first_token import first_token_criterion
from sparse_mla.launch.forward_rounding import VLLM_BF16, engine_arithmetic, first_token_gap
from sparse_mla.launch.glm5_reference import Glm5Reference

SAMPLES = 16      # forward_rounding's argument for the spread's estimate assumes 16 (slow tier where it costs)


@pytest.fixture(scope="module")
def case(module_tmp):
    model = ck.make_checkpoint(module_tmp("ft") / "tiny", index_topk=128, seed=11)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(2, 2048, (n,), generator=g).tolist() for n in (20, 40)]
    return model, prompts, reference_first_token(model, prompts, device="cpu")


def _run(tokens):
    return {"generations": [{"token_ids": [t, 0]} for t in tokens]}


@pytest.mark.slow
def test_a_bf16_forward_moves_the_gap_less_than_the_tolerance(case):
    """The reference run in bf16 (bf16 weights, activations and cache; float32 norms and indexer) is one
    implementation of the modelled arithmetic: its top-2 gap stays within the tolerance of the float32 gap."""
    model, prompts, ref = case
    cfg, sd = ck.load_checkpoint(model)
    bf16 = Glm5Reference(cfg, sd, dtype=torch.bfloat16)
    for ids, r in zip(prompts, ref):
        top = [int(t) for t in torch.topk(r["logprobs"], 2).indices]
        gap32 = float(r["logprobs"][top[0]] - r["logprobs"][top[1]])
        lp16 = torch.log_softmax(bf16.forward(torch.tensor(ids))[-1].double(), -1)
        g = first_token_gap(cfg, sd, torch.tensor(ids), (top[0], top[1]), samples=SAMPLES)
        assert g["sigma"] > 0 and abs(float(lp16[top[0]] - lp16[top[1]]) - gap32) < g["tolerance"], (g, gap32)


@pytest.mark.slow
def test_decisive_prompts_fail_a_wrong_first_token_and_near_ties_decide_nothing(case):
    model, prompts, ref = case
    real = first_token_criterion(model, prompts, ref, {"ours": _run([r["argmax"] for r in ref])}, samples=SAMPLES,
                                 device="cpu")
    assert real["failures"] == [] and real["arithmetic"] == VLLM_BF16.__dict__
    tol = [p["tolerance"] for p in real["per_prompt"]]
    # the reference made decisive (its argmax raised far past the tolerance) and a near-tie (top-2 equal)
    wide, tie = [], []
    for r, t in zip(ref, tol):
        lp = r["logprobs"].clone()
        top = torch.topk(lp, 2).indices
        lp[top[0]] = lp[top[1]] + 10 * t
        wide.append({"argmax": int(top[0]), "logprobs": lp})
        lp2 = r["logprobs"].clone()
        lp2[top[0]] = lp2[top[1]]
        tie.append({"argmax": int(top[0]), "logprobs": lp2})
    second = [int(torch.topk(r["logprobs"], 2).indices[1]) for r in ref]
    bad = {"ours": _run([r["argmax"] for r in ref]), "other": _run(second)}
    got = first_token_criterion(model, prompts, wide, bad, samples=SAMPLES, device="cpu")
    assert got["decisive_prompts"] == 2 and len(got["failures"]) == 2
    assert all(f.startswith("first token: other gave") for f in got["failures"])
    got = first_token_criterion(model, prompts, tie, bad, samples=SAMPLES, device="cpu")
    assert got["decisive_prompts"] == 0 and got["failures"] == []


def test_engine_arithmetic_follows_the_cache_and_model_dtypes():
    assert engine_arithmetic() == VLLM_BF16 and VLLM_BF16.cache is None
    fp8 = engine_arithmetic("bfloat16", "fp8_ds_mla")
    assert fp8.cache == 2.0 ** -4 and fp8.store == 2.0 ** -8 and fp8.indexer == 2.0 ** -4
    assert engine_arithmetic("float16").store == 2.0 ** -11
