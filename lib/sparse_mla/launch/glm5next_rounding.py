"""How far vLLM's arithmetic may move GLM-5.3-Flash's first-token gap: Monte Carlo arithmetic on transformers' model.

The GLM-5 criterion (:mod:`sparse_mla.launch.forward_rounding`) rounds the operations of our own float64 reference.
GLM-5.3-Flash's reference is transformers' model (:class:`~sparse_mla.launch.glm5next_reference.Glm5NextReference`),
so the same rounding model is applied from outside it, while it runs in float64:

* **every dot product** -- each ``torch.nn.functional.linear`` (the projections, the experts, the KDA and MHC
  projections) and each ``matmul`` (the attention scores and ``P V``, the KDA chunk products, the KPool indexer's
  logits, the MHC mixing) -- gets a random error of variance ``u_acc^2 / 3 * (n sum_i t_i^2) + u_store^2 / 3 * y^2``
  (``n`` terms ``t_i``, result ``y``), as :meth:`forward_rounding._RoundedForward._dot`;
* **every norm** (the RMSNorms, the gated RMSNorm of the KDA output, the indexer's LayerNorm) a relative error of its
  mean of squares per row and the store's per element, as ``_RoundedForward._rms``;
* **the KPool indexer's q and pooled keys**, the operands of its logits (the first ``matmul`` of each
  ``Glm5NextTextIndexer`` call), a relative error of fp8 e4m3's size per element, as vLLM quantizes them.

Left out, as there: element-wise operations that round once (activations, gates, the short convolution's 4 taps,
residual adds, softmaxes, the pooling's weighted sum of 16 keys). :class:`~sparse_mla.launch.forward_rounding.
Arithmetic`'s ``cache`` (an fp8 latent cache) is not modelled here: vLLM 0.33 runs GLM-5.3-Flash's NoPE head on a
bf16 cache only in this workbook's runs; :func:`first_token_gap` refuses an arithmetic with one.
"""
from __future__ import annotations

import math
from typing import Any

from ..kernels.error_bounds import P_FAIL
from .forward_rounding import VLLM_BF16, Arithmetic, _check

#: Module classes (transformers' ``glm5_next``) whose output is a norm's: rounded as ``_RoundedForward._rms``.
NORMS = ("Glm5NextTextRMSNorm", "Glm5NextTextUnweightedRMSNorm", "Glm5NextTextRMSNormGated", "LayerNorm")
#: The KPool indexer's class: its first ``matmul`` is the logits of q against the pooled keys.
INDEXER = "Glm5NextTextIndexer"


def _rounding_mode():
    """The ``TorchFunctionMode`` class that rounds every dot product and the indexer's operands (torch on first use)."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    matmuls = {torch.matmul, torch._C.TensorBase.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}

    class Rounding(TorchFunctionMode):
        def __init__(self, owner: "RoundedGlm5Next"):
            super().__init__()
            self.owner = owner

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is F.linear or func is torch._C._nn.linear:
                x, w = args[0], args[1] if len(args) > 1 else kwargs["weight"]
                bias = args[2] if len(args) > 2 else kwargs.get("bias")
                y = self.owner.dot(F.linear(x, w), x.shape[-1], F.linear(x * x, w * w))
                return y if bias is None else y + bias
            if func in matmuls:
                a, b = args[0], args[1]
                a, b = self.owner.indexer_operands(a, b)
                return self.owner.dot(torch.matmul(a, b), a.shape[-1], torch.matmul(a * a, b * b))
            return func(*args, **kwargs)

    return Rounding


class RoundedGlm5Next:
    """Transformers' GLM-5.3-Flash (a :class:`Glm5NextReference`) run with a random error of ``arithmetic``'s size at
    every rounding the module docstring lists; ``generator`` seeds them (one seed: one sample)."""

    def __init__(self, reference: Any, arithmetic: Arithmetic = VLLM_BF16):
        import torch

        if arithmetic.cache is not None:
            raise ValueError(f"arithmetic {arithmetic!r} rounds the latent cache; accepted: a bf16/fp16/fp32 cache "
                             f"(cache None): this model's fp8 cache is not modelled")
        self.reference, self.arithmetic = reference, arithmetic
        self.generator = torch.Generator(device=reference.lm_head_weight.device).manual_seed(0)
        self._indexer_pending = False

    def _noise(self, like):
        import torch

        return torch.randn(like.shape, generator=self.generator, dtype=like.dtype, device=self.generator.device)

    def dot(self, y, n: int, squares):
        """``y`` = a dot of ``n`` terms whose squares sum to ``squares``, with its rounding error drawn."""
        a = self.arithmetic
        return y + (a.var_acc * n * squares + a.var_store * y * y).sqrt() * self._noise(y)

    def indexer_operands(self, a, b):
        """``a, b`` of a matmul; the first of an indexer call each rounded to fp8 e4m3 (relative, per element)."""
        u = self.arithmetic.indexer
        if not self._indexer_pending or u is None:
            return a, b
        self._indexer_pending = False
        var = u * u / 3.0
        return a + (var * a * a).sqrt() * self._noise(a), b + (var * b * b).sqrt() * self._noise(b)

    def _norm_hook(self, module, inputs, y):
        n = inputs[0].shape[-1]
        row = self._noise(y[..., :1])
        y = y * (1.0 + 0.5 * math.sqrt(self.arithmetic.var_acc * n) * row)
        return y + (self.arithmetic.var_store * y * y).sqrt() * self._noise(y)

    def _indexer_pre(self, module, args, kwargs=None):
        self._indexer_pending = True

    def logits(self, input_ids, seed: int):
        """Float64 logits ``[T, vocab]`` of ``input_ids`` under the roundings drawn from ``seed``."""
        import torch

        from .glm5next_reference import float64_upcasts

        self.generator.manual_seed(seed)
        model, handles = self.reference.model, []
        for m in model.modules():
            name = type(m).__name__
            if name in NORMS:
                handles.append(m.register_forward_hook(self._norm_hook))
            elif name == INDEXER:
                handles.append(m.register_forward_pre_hook(self._indexer_pre))
        try:
            ids = self.reference._ids(input_ids)
            with torch.no_grad(), float64_upcasts(), _rounding_mode()(self):
                hidden = model(input_ids=ids, use_cache=False).last_hidden_state[0]
                return hidden @ self.reference.lm_head_weight.T
        finally:
            for h in handles:
                h.remove()
            self._indexer_pending = False


def first_token_gap(reference: Any, input_ids, top2: tuple[int, int], *, samples: int = 16, count: int = 1,
                    p_fail: float = P_FAIL, arithmetic: Arithmetic = VLLM_BF16) -> dict:
    """:func:`sparse_mla.launch.forward_rounding.first_token_gap` for GLM-5.3-Flash: how far an implementation of
    ``arithmetic`` may move ``logit[top2[0]] - logit[top2[1]]`` at the last position of ``input_ids`` (a sequence of
    ``T`` token ids), from ``samples`` rounded forwards of ``reference`` (a :class:`Glm5NextReference`, on its device;
    seeds 0..samples-1: the same on every machine up to the device's float64 arithmetic). Returns ``{"sigma", "lam",
    "tolerance", "samples"}``. Raises ValueError for ``samples`` < 2, ``p_fail`` outside (0, 1) or an arithmetic with
    an fp8 cache, UserInputError for ids the reference refuses."""
    _check(samples, p_fail)
    model = RoundedGlm5Next(reference, arithmetic)
    gaps = []
    for i in range(samples):
        last = model.logits(input_ids, seed=i)[-1]
        gaps.append(float(last[top2[0]] - last[top2[1]]))
    mean = sum(gaps) / len(gaps)
    sigma = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1))
    lam = math.sqrt(2.0 * math.log(2.0 * max(1, count) / p_fail))
    return {"sigma": sigma, "lam": lam, "tolerance": lam * math.sqrt(2.0) * sigma, "samples": samples}
