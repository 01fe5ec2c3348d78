"""How far the forward on a GGUF's dequantized weights may land from the forward on the weights it was quantized
from: Monte Carlo on the weights, as :mod:`sparse_mla.launch.forward_rounding` does on the arithmetic.

Each GGML type bounds the error of every element it stores (:func:`sparse_mla.gguf.quant.error_bound`: half a
quantization step for the round-to-nearest types, the k-quants' bound with their fp16 scales). The model: every
weight's error is independent and uniform in ``[-b, b]`` for its bound ``b`` (variance ``b^2 / 3``). For Q8_0, Q5_0 and
F16, which round to nearest on a grid of step ``2b``, that is the rounding error's own variance; for Q4_K (bound: a
worst case that includes the scales' rounding) it is larger than the real one -- the model errs on the large side.
:func:`quantization_limit` runs the float64 reference (:class:`~sparse_mla.launch.glm5_reference.Glm5Reference`)
``samples`` times on weights carrying such errors; the root-mean-square distance of each logit from the unperturbed
forward is ``sigma``, and one quantized model (the GGUF) lies within ``lam * sigma`` of it, ``lam`` the Gaussian tail
for all logits together at :data:`~sparse_mla.kernels.error_bounds.P_FAIL`. Every later layer, indexer and router
carries the errors, as in the model: a selection or routing flip the errors cause in a sample widens the limit.
The samples are seeded: the same limit on every machine.
"""
from __future__ import annotations

import math

import torch

from ..kernels.error_bounds import P_FAIL
from .forward_rounding import ForwardLimit, _check
from .glm5_reference import Glm5Reference


def weight_error_bounds(config: dict, state: dict[str, torch.Tensor], tensor_types: dict[str, str]) -> dict:
    """``{Hugging Face name: float32 bound tensor}`` in the checkpoint's layout: each element's error bound for the
    GGML type its GGUF tensor has (``tensor_types``: GGUF tensor name -> type name, as read from the file), computed on
    the tensor as llama.cpp's converter lays it out (experts stacked, ``kv_b_proj`` split) and laid back by the
    same inverse the reader uses (:func:`sparse_mla.gguf.dequantize.from_converter_tensors`). Raises ValueError
    for a tensor without a type."""
    from ..gguf.dequantize import from_converter_tensors
    from ..gguf.names import gguf_to_hf_names
    from ..gguf.quant import error_bound
    from ..gguf.writer import converter_tensors

    type_of = {h: tensor_types[g] for g, h in gguf_to_hf_names(config).items() if g in tensor_types}
    items = []
    for h, a in converter_tensors(config, state):
        if h not in type_of:
            raise ValueError(f"no GGML type for tensor {h!r}; accepted: the types of a GGUF of this checkpoint")
        items.append((h, error_bound(a, type_of[h])))
    return from_converter_tensors(config, items)


def locked_forward(config: dict, state: dict[str, torch.Tensor], input_ids: torch.Tensor,
                   decisions: list | None = None) -> tuple[torch.Tensor, list]:
    """``(logits [T, vocab] float64, decisions)``: the float64 reference on ``state`` with the discrete decisions of
    ``decisions`` replayed (:class:`LockedDecisions`), or, for ``None``, its own decisions recorded and returned."""
    model = LockedDecisions(config, {k: v.double() for k, v in state.items()}, decisions)
    return model.forward(input_ids), model.decisions


def quantization_limit(config: dict, state: dict[str, torch.Tensor], bounds: dict[str, torch.Tensor],
                       input_ids: torch.Tensor, *, samples: int = 8, p_fail: float = P_FAIL) -> ForwardLimit:
    """The limit on ``|forward(quantized) - forward(state)|`` per logit of ``input_ids [T]``, both float64 forwards
    with the decisions of the forward on ``state`` (:func:`locked_forward`), for a quantization whose per-element
    errors are bounded by ``bounds`` (:func:`weight_error_bounds`; see the module docstring). ``sigma`` [T, vocab] is
    the samples' root-mean-square distance from the unperturbed forward, pooled over each position's vocabulary (the
    logits of one position are the same hidden state through the rows of one ``lm_head``: pooling turns ``samples``
    estimates per logit, which a few samples put far too low at some of thousands of logits, into ``samples * vocab``
    per position); the limit is ``lam * sigma``. Runs
    ``samples + 1`` float64 forwards on the CPU. Raises ValueError for ``samples`` other than an integer >= 2 or
    ``p_fail`` outside (0, 1)."""
    _check(samples, p_fail)
    base, decisions = locked_forward(config, state, input_ids)
    gen = torch.Generator().manual_seed(0)
    sq = torch.zeros_like(base)
    for _ in range(samples):
        noisy = {k: v.double() + (2 * torch.rand(v.shape, generator=gen, dtype=torch.float64) - 1) * bounds[k].double()
                 if k in bounds else v for k, v in state.items()}
        sq += (locked_forward(config, noisy, input_ids, decisions)[0] - base) ** 2
    sigma = (sq.mean(dim=-1, keepdim=True) / samples).sqrt().expand_as(base)
    lam = math.sqrt(2.0 * math.log(2.0 * sigma.numel() / p_fail))
    return ForwardLimit(limit=lam * sigma, sigma=sigma, lam=lam, samples=samples)


class LockedDecisions(Glm5Reference):
    """The float64 reference whose discrete decisions -- each indexer's top-k selection and each MoE router's experts
    -- are those of a first forward (``record``), replayed in later forwards (``replay``) in the same order.

    A weight error near a tie flips a decision, and the forward is not continuous there: a sample of the model would
    have to hit the same tie to widen the limit. With the decisions locked, the forward is a smooth function of the
    weights, :func:`quantization_limit`'s model holds, and :meth:`flips` counts the decisions an unlocked forward
    changes (reported, not judged)."""

    def __init__(self, config: dict, state_dict: dict[str, torch.Tensor], decisions: list | None = None):
        super().__init__(config, state_dict, dtype=torch.float64)
        self.recorded = decisions is None
        self.decisions = [] if decisions is None else decisions
        self.at = 0

    def _decide(self, fresh: torch.Tensor) -> torch.Tensor:
        if self.recorded:
            self.decisions.append(fresh)
            return fresh
        d = self.decisions[self.at]
        self.at += 1
        return d

    def _indexer_topk(self, q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return self._decide(super()._indexer_topk(q, k, weights))

    def _route(self, choice: torch.Tensor, k: int) -> torch.Tensor:
        return self._decide(super()._route(choice, k))

    @staticmethod
    def flips(a: list[torch.Tensor], b: list[torch.Tensor]) -> int:
        """How many (token, decision) rows differ as sets between two recorded forwards' decisions."""
        n = 0
        for x, y in zip(a, b):
            n += int((x.sort(-1).values != y.sort(-1).values).any(-1).sum())
        return n
