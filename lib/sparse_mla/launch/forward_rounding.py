"""How far two correct float32 forwards of one GLM-5 model may land apart: Monte Carlo arithmetic on the reference.

A whole-model forward chains too many operations for a worst-case rounding bound to be useful, and a fixed
tolerance on the logits is a guess. Instead, the reference (:class:`~sparse_mla.launch.glm5_reference.
Glm5Reference`) runs in float64 ``samples`` times, and every rounding a float32 forward makes is replaced by an
independent random error of its size (Monte Carlo arithmetic: D. S. Parker, *Monte Carlo Arithmetic: exploiting
randomness in floating-point arithmetic*, UCLA CSD-970002, 1997). The spread of a logit over the samples is how far
float32 rounding moves it; the model carries each error through every later layer, indexer and router included.

The rounding model, with ``u = 2^-24`` (float32, round to nearest; each rounding a relative error uniform in
``[-u, u]``, variance ``u^2 / 3``, independent of the others):

* **A dot product** of ``n`` terms ``t_i`` (every linear layer, the absorbed ``W_UK``/``W_UV`` products, the
  attention scores and ``P V``), summed one term at a time: ``n`` roundings of partial sums ``s_k`` plus the
  stored result ``y``, variance ``u^2 / 3 * (sum_k s_k^2 + y^2)``. For terms of mean zero (random weights)
  ``E s_k^2 <= sum_i t_i^2``, so the variance taken is ``u^2 / 3 * (n sum_i t_i^2 + y^2)``. Blocked or pairwise
  summation, as BLAS and Triton do, rounds less: the model errs on the large side.
* **RMSNorm**: the mean of squares (``n`` positive terms, relative ``u sqrt(n / 3)``, halved by the square root,
  one error per row) and the stored output (``u / sqrt(3)`` relative per element).
* Left out: element-wise operations that round once (RoPE, SiLU, residual adds, the router's softmax), each a
  relative ``u / sqrt(3)``, against at least ``u sqrt(n / 3)`` with ``n >= 64`` for every dot above.

Two independent float32 implementations differ by two such errors, so the limit on ``|a - b|`` per logit is
``lam * sqrt(2) * sigma``, with ``sigma`` the spread of that logit over the samples and ``lam`` the Gaussian
tail for all logits together at :data:`~sparse_mla.kernels.error_bounds.P_FAIL` (``2 N exp(-lam^2 / 2)``). The
spread is estimated from ``samples`` runs (16 by default: the estimate is below half the true spread with
probability about 2e-3 per logit, which then still leaves ``lam / 2`` standard deviations).

Another implementation's arithmetic (:class:`Arithmetic`) changes the sizes, not the model: vLLM running a bf16
checkpoint (:data:`VLLM_BF16`) accumulates its dots in float32 but stores every activation in bf16 (``u = 2^-8`` on
each stored output, the KV cache included), and its DSA indexer quantizes q and k to fp8 e4m3 before the logits
(``u = 2^-4`` per element; a Hadamard rotation before it in vLLM changes no size), which moves its top-k selection
near ties -- a sample of this model does that too. :func:`first_token_gap` applies it to the one question a parity
run asks: how far the gap between the reference's two most likely first tokens may move.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..kernels.error_bounds import P_FAIL, unit_roundoff
from ..kernels.reference import gather_rows_ref
from .glm5_reference import Glm5Reference


@dataclass(frozen=True)
class Arithmetic:
    """The roundings of one implementation, as unit roundoffs: ``acc`` of its dot products' partial sums, ``store`` of
    every stored activation (a dot's output, a norm's, the latent cache), ``indexer`` of the DSA indexer's q and k
    before the indexer logits (``None``: not quantized)."""

    acc: float
    store: float
    indexer: float | None = None
    cache: float | None = None       # the latent cache's 512 values, where stored coarser than ``store`` (fp8_ds_mla)

    @property
    def var_acc(self) -> float:
        return self.acc ** 2 / 3.0

    @property
    def var_store(self) -> float:
        return self.store ** 2 / 3.0


#: Two float32 implementations (the reference, a float32 kernel).
FLOAT32 = Arithmetic(unit_roundoff(torch.float32), unit_roundoff(torch.float32))
#: vLLM on a bf16 checkpoint: float32 accumulation, bf16 activations and cache, fp8 e4m3 indexer q and k.
VLLM_BF16 = Arithmetic(unit_roundoff(torch.float32), unit_roundoff(torch.bfloat16),
                       unit_roundoff(torch.float8_e4m3fn))


def engine_arithmetic(dtype: str = "bfloat16", kv_cache_dtype: str = "auto") -> Arithmetic:
    """vLLM's arithmetic for a checkpoint of ``dtype`` (``"bfloat16"``, ``"float16"``, ``"float32"``) and a KV cache
    of ``kv_cache_dtype`` (``fp8_ds_mla``, ``fp8``, ``fp8_e4m3``: the latent values stored in e4m3 with a scale per
    128; anything else in the model dtype): :data:`VLLM_BF16` with that store and cache."""
    store = unit_roundoff({"float16": torch.float16, "float32": torch.float32}.get(str(dtype), torch.bfloat16))
    fp8 = kv_cache_dtype in ("fp8_ds_mla", "fp8", "fp8_e4m3")
    return Arithmetic(unit_roundoff(torch.float32), store, unit_roundoff(torch.float8_e4m3fn),
                      unit_roundoff(torch.float8_e4m3fn) if fp8 else None)


class _RoundedForward(Glm5Reference):
    """The float64 reference with a random error of ``arithmetic``'s size at every rounding of the model above."""

    def __init__(self, config: dict, state_dict: dict[str, torch.Tensor], arithmetic: Arithmetic = FLOAT32,
                 device: str | torch.device = "cpu"):
        super().__init__(config, state_dict, dtype=torch.float64, device=device, attention_fn=self._attention)
        # noise drawn on the model's device (drawn on the host, every noise tensor of a GPU forward crossed to it)
        self.generator = torch.Generator(device=device).manual_seed(0)
        self.arithmetic = arithmetic

    def _err(self, y: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(y.shape, generator=self.generator, dtype=y.dtype, device=self.generator.device)
        return y + var.sqrt() * noise.to(y.device)

    def _dot(self, y: torch.Tensor, n: int, squares: torch.Tensor) -> torch.Tensor:
        """``y`` = a dot of ``n`` terms whose squares sum to ``squares``."""
        a = self.arithmetic
        return self._err(y, a.var_acc * n * squares + a.var_store * y * y)

    def _indexer_topk(self, q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The selection on q and k each rounded to the indexer's precision (a relative error per element)."""
        u = self.arithmetic.indexer
        if u is not None:
            var = u * u / 3.0
            q, k = self._err(q, var * q * q), self._err(k, var * k * k)
        return super()._indexer_topk(q, k, weights)

    def _lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w = self.w[name]
        return self._dot(x @ w.t(), w.shape[1], (x * x) @ (w * w).t())

    def _contract(self, equation: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self._dot(torch.einsum(equation, a, b), a.shape[-1], torch.einsum(equation, a * a, b * b))

    def _rms(self, x: torch.Tensor, name: str) -> torch.Tensor:
        y = super()._rms(x, name)
        row = torch.randn(y.shape[:-1] + (1,), generator=self.generator, dtype=y.dtype,
                          device=self.generator.device).to(y.device)
        y = y * (1.0 + 0.5 * math.sqrt(self.arithmetic.var_acc * x.shape[-1]) * row)
        return self._err(y, self.arithmetic.var_store * y * y)

    def _attention(self, q_nope: torch.Tensor, q_pe: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor,
                   sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Sparse MLA by gather (as :func:`~sparse_mla.launch.glm5_reference.gather_sparse_mla_attention`), with the
        score and ``P V`` dots rounded by the model."""
        dc = q_nope.shape[-1]
        if self.arithmetic.cache is not None:        # the latent values stored coarser: one rounding per cache row
            var = self.arithmetic.cache ** 2 / 3.0
            kv_cache = torch.cat([self._err(kv_cache[..., :dc], var * kv_cache[..., :dc] ** 2), kv_cache[..., dc:]],
                                 dim=-1)
        q = torch.cat([q_nope, q_pe], dim=-1)                               # [T, H, D]
        rows = max(1, self.CHUNK_ELEMENTS // max(1, slots.shape[-1] * q.shape[-1]))
        parts = [self._attention_rows(q[t0:t0 + rows], kv_cache, slots[t0:t0 + rows], sm_scale, dc)
                 for t0 in range(0, q.shape[0], rows)]
        return torch.cat([o for o, _ in parts]), torch.cat([lse for _, lse in parts])

    #: Elements of one chunk's gathered rows ``[rows, topk, D]`` (float64: 2 GiB): a 16K-token prompt at index_topk
    #: 2048 gathers 154 GB at once otherwise (the H200, 2026-12-05: out of memory)
    CHUNK_ELEMENTS = 2 ** 28

    def _attention_rows(self, q: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor, sm_scale: float,
                        dc: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_attention` for the query rows ``q [t, H, D]`` and their ``slots [t, topk]``."""
        k, valid = gather_rows_ref(kv_cache, slots)                         # [t, topk, D] float64
        s = self._dot(torch.einsum("thd,tkd->thk", q, k), q.shape[-1], torch.einsum("thd,tkd->thk", q * q, k * k))
        s = (s * sm_scale).masked_fill(~valid[:, None, :], float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        v = k[..., :dc]
        out = self._dot(torch.einsum("thk,tkc->thc", p, v), k.shape[1], torch.einsum("thk,tkc->thc", p * p, v * v))
        return out, lse.float()


@dataclass(frozen=True)
class ForwardLimit:
    """Per-logit limit ``[T, vocab]`` (float64) on ``|a - b|`` between two correct float32 forwards, the spread
    ``sigma`` it comes from, ``lam`` and the number of ``samples``."""

    limit: torch.Tensor
    sigma: torch.Tensor
    lam: float
    samples: int

    def share(self, a: torch.Tensor, b: torch.Tensor, rows: slice = slice(None)) -> float:
        """The largest ``|a - b| / limit`` over ``a, b [T', vocab]``, the logits of prompt positions ``rows`` (all by
        default); below 1: within the limit."""
        return float(((a.double().cpu() - b.double().cpu()).abs() / self.limit[rows]).max())


def _check(samples, p_fail) -> None:
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        raise ValueError(f"samples={samples!r}; accepted: an integer of at least 2 (a spread needs two runs)")
    if not (isinstance(p_fail, float | int) and 0 < p_fail < 1):
        raise ValueError(f"p_fail={p_fail!r}; accepted: a probability in (0, 1)")


def rounded_forwards(config: dict, state_dict: dict[str, torch.Tensor], input_ids: torch.Tensor, *, samples: int = 16,
                     arithmetic: Arithmetic = FLOAT32, device: str | torch.device = "cpu") -> torch.Tensor:
    """``[samples, T, vocab]`` float64 logits of ``samples`` forwards of ``input_ids [T]``, each with its own seeded
    random roundings of ``arithmetic``'s size (the same on every machine for the same seeds; ``device`` only moves the
    float64 arithmetic, e.g. to a GPU)."""
    model = _RoundedForward(config, state_dict, arithmetic, device)
    runs = []
    for i in range(samples):
        model.generator.manual_seed(i)
        runs.append(model.forward(input_ids.to(model.device)).cpu())
    return torch.stack(runs)


def forward_limit(config: dict, state_dict: dict[str, torch.Tensor], input_ids: torch.Tensor, *, samples: int = 16,
                  p_fail: float = P_FAIL, arithmetic: Arithmetic = FLOAT32) -> ForwardLimit:
    """The limit on the logits of ``input_ids [T]`` (one sequence, as :meth:`Glm5Reference.forward`) for two
    correct forwards of the checkpoint ``(config, state_dict)`` of ``arithmetic`` (float32 by default; see the module
    docstring). Runs ``samples`` float64 forwards on the CPU (seeded: the same limit on every machine). Raises
    ValueError for ``samples`` other than an integer >= 2 or ``p_fail`` outside (0, 1), UserInputError for ids
    :meth:`Glm5Reference.forward` refuses."""
    _check(samples, p_fail)
    sigma = rounded_forwards(config, state_dict, input_ids, samples=samples, arithmetic=arithmetic).std(dim=0)
    lam = math.sqrt(2.0 * math.log(2.0 * sigma.numel() / p_fail))
    return ForwardLimit(limit=lam * math.sqrt(2.0) * sigma, sigma=sigma, lam=lam, samples=samples)


def first_token_gap(config: dict, state_dict: dict[str, torch.Tensor], input_ids: torch.Tensor, top2: tuple[int, int],
                    *, samples: int = 16, count: int = 1, p_fail: float = P_FAIL, arithmetic: Arithmetic = VLLM_BF16,
                    device: str | torch.device = "cpu") -> dict:
    """How far an implementation of ``arithmetic`` may move the gap ``logit[top2[0]] - logit[top2[1]]`` at the last
    position of ``input_ids`` (the reference's two most likely first tokens): ``{"sigma", "lam", "tolerance",
    "samples"}`` with ``tolerance = lam * sqrt(2) * sigma``, ``sigma`` the gap's spread over ``samples`` rounded
    forwards (:func:`rounded_forwards`), ``lam`` the Gaussian tail at ``p_fail`` for ``count`` such gaps checked
    together. Where the reference's gap exceeds the tolerance, a correct engine's first token is the reference's
    argmax; below it, the first token decides nothing."""
    _check(samples, p_fail)
    last = rounded_forwards(config, state_dict, input_ids, samples=samples, arithmetic=arithmetic,
                            device=device)[:, -1, :]
    sigma = float((last[:, top2[0]] - last[:, top2[1]]).std())
    lam = math.sqrt(2.0 * math.log(2.0 * max(1, count) / p_fail))
    return {"sigma": sigma, "lam": lam, "tolerance": lam * math.sqrt(2.0) * sigma, "samples": samples}
