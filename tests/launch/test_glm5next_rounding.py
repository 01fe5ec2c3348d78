"""Monte Carlo arithmetic on transformers' GLM-5.3-Flash (:mod:`sparse_mla.launch.glm5next_rounding`) and the
first-token criterion built on it (:func:`sparse_mla.launch.first_token.glm5next_first_token_criterion`).

The rounding is applied from outside transformers' model, so the tests hold it to that model: with no roundoff the
rounded forward is the reference's, bit for bit (the intercepted dots and norms compute what the model computes, bias
included); every dot the plain forward makes is rounded (counted by a second, independent ``TorchFunctionMode``); the
indexer's operands once per indexer call; one seed gives one sample on every call. Needs a vLLM line with GLM-5.3-
Flash (make-checkpoint) and a transformers with ``glm5_next``.
"""
from __future__ import annotations

import math

import pytest
import torch

from sparse_mla.launch import checkpoint as ck
from sparse_mla.launch.forward_rounding import FLOAT32, VLLM_BF16, Arithmetic
from sparse_mla.models import GLM5_NEXT_VLLM_LINE, GLM5_NEXT_VLLM_LINES
from sparse_mla.vllm_lines import current_line

pytestmark = pytest.mark.every_line

PROMPT = [579, 367, 377, 348, 268, 70, 66, 69, 84, 360, 361, 303]


@pytest.fixture(scope="module")
def reference(module_tmp):
    if current_line() not in GLM5_NEXT_VLLM_LINES:
        pytest.skip(f"vLLM {GLM5_NEXT_VLLM_LINE} has GLM-5.3-Flash")
    from sparse_mla.launch.glm5next_reference import Glm5NextReference

    path = ck.make_checkpoint(module_tmp("flash") / "glm53", preset="glm-5.3-flash", index_topk=128)
    return Glm5NextReference.from_pretrained(path)


def test_without_roundoff_it_is_the_reference(reference):
    from sparse_mla.launch.glm5next_rounding import RoundedGlm5Next

    exact = RoundedGlm5Next(reference, Arithmetic(0.0, 0.0, 0.0)).logits(PROMPT, seed=3)
    assert torch.equal(exact, reference.logits(PROMPT))


def test_every_dot_norm_and_indexer_call_is_rounded(reference):
    """The dots rounded are the plain forward's ``linear`` and ``matmul`` calls, counted apart; the norms every
    module of :data:`NORMS`' classes; the indexer's operands once per indexer module. Without roundoff, so that the
    rounded forward takes the plain one's path (a rounding can move the router's choice: the eager experts then make
    another number of dots)."""
    from torch.overrides import TorchFunctionMode

    from sparse_mla.launch.glm5next_reference import float64_upcasts
    from sparse_mla.launch.glm5next_rounding import INDEXER, NORMS, RoundedGlm5Next

    dots = {"n": 0}

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            dots["n"] += getattr(func, "__name__", "") in ("linear", "matmul", "__matmul__")
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), float64_upcasts(), Count():
        reference.model(input_ids=torch.tensor([PROMPT]), use_cache=False)
    model = RoundedGlm5Next(reference, Arithmetic(0.0, 0.0, 0.0))
    seen = {"dot": 0, "indexer": 0, "norm": 0}
    dot, operands, norm = model.dot, model.indexer_operands, model._norm_hook
    model.dot = lambda *a: (seen.__setitem__("dot", seen["dot"] + 1), dot(*a))[1]
    model.indexer_operands = lambda a, b: (seen.__setitem__("indexer", seen["indexer"] + model._indexer_pending),
                                           operands(a, b))[1]
    model._norm_hook = lambda *a: (seen.__setitem__("norm", seen["norm"] + 1), norm(*a))[1]
    model.logits(PROMPT, seed=0)
    mods = [type(m).__name__ for m in reference.model.modules()]
    assert seen["dot"] == dots["n"] + 1 > 100                  # and the output head
    assert seen["indexer"] == mods.count(INDEXER) == 2
    assert seen["norm"] == sum(mods.count(n) for n in NORMS) > 0


def test_one_seed_one_sample_and_the_spread_follows_the_roundoff(reference):
    """The same seed draws the same logits; two seeds differ; bf16 stores spread the logits far wider than float32
    (u 2^-8 against 2^-24: the spread of the last row's logits grows by more than 2^12, whatever the model does)."""
    from sparse_mla.launch.glm5next_rounding import RoundedGlm5Next

    def spread(arithmetic):
        m = RoundedGlm5Next(reference, arithmetic)
        a, b, a2 = m.logits(PROMPT, seed=1), m.logits(PROMPT, seed=2), m.logits(PROMPT, seed=1)
        assert torch.equal(a, a2) and not torch.equal(a, b)
        return float((a[-1] - b[-1]).abs().max())

    assert spread(VLLM_BF16) > 2 ** 12 * spread(FLOAT32) > 0


def test_first_token_gap_figures(reference):
    from sparse_mla.kernels.error_bounds import P_FAIL
    from sparse_mla.launch.glm5next_rounding import first_token_gap

    g = first_token_gap(reference, PROMPT, (1, 2), samples=3, count=2)
    lam = math.sqrt(2.0 * math.log(4.0 / P_FAIL))
    assert g["samples"] == 3 and g["lam"] == pytest.approx(lam) and g["sigma"] > 0
    assert g["tolerance"] == pytest.approx(lam * math.sqrt(2.0) * g["sigma"])
    with pytest.raises(ValueError, match="samples=1"):
        first_token_gap(reference, PROMPT, (1, 2), samples=1)
    with pytest.raises(ValueError, match="cache"):
        first_token_gap(reference, PROMPT, (1, 2), samples=2, arithmetic=Arithmetic(1e-7, 1e-3, 0.06, 0.06))


def test_the_criterion_fails_a_wrong_first_token_only_where_it_decides(reference):
    """Two runs, one with the reference's argmax first, one with its runner-up: the second fails exactly where the
    prompt is decisive (gap above tolerance); the record's figures are the gap function's."""
    from sparse_mla.launch.first_token import glm5next_first_token_criterion

    prompts = [PROMPT, PROMPT[:7]]
    lps = [torch.log_softmax(reference.logits(p)[-1], -1) for p in prompts]
    tops = [torch.topk(lp, 2).indices.tolist() for lp in lps]
    runs = {"right": {"generations": [{"token_ids": [t[0]]} for t in tops]},
            "wrong": {"generations": [{"token_ids": [t[1]]} for t in tops]}}
    crit = glm5next_first_token_criterion(reference, prompts, runs, samples=3)
    per = crit["per_prompt"]
    assert [p["reference_argmax"] for p in per] == [t[0] for t in tops]
    assert [p["decisive"] for p in per] == [p["gap"] > p["tolerance"] for p in per]
    assert crit["decisive_prompts"] == sum(p["decisive"] for p in per)
    assert len(crit["failures"]) == crit["decisive_prompts"]
    assert all("wrong gave" in f for f in crit["failures"])
    assert crit["arithmetic"] == VLLM_BF16.__dict__
