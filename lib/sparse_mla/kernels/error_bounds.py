"""How far a correct sparse MLA kernel may land from the float64 reference: limits derived from its arithmetic.

Every test, notebook check and GPU check of the attention kernel compares against these limits (one home for the
tolerances of the kernel), and each limit follows from the floating-point operations the kernel does on *these*
inputs, never from a run's measured error:

* **Dot products** (the 576-wide score ``q . k_j``, fp32 accumulation): Higham & Mary's probabilistic bound
  (*A New Approach to Probabilistic Rounding Error Analysis*, SIAM J. Sci. Comput. 41(5), 2019, Thm 3.1):
  ``|fl(x . y) - x . y| <= lambda sqrt(n) u sum_i |x_i y_i|`` for round-to-nearest, which fails with probability at
  most ``2 n exp(-lambda^2 / 2)`` per dot. ``lambda`` is chosen from that formula so that the whole check fails by
  chance with probability below ``P_FAIL`` (:func:`confidence_lambda`). Tensor cores do not round their fp32
  accumulation to nearest (Fasi, Higham, Mikaitis, Pranesh, *Numerical behavior of NVIDIA tensor cores*, PeerJ CS 7,
  2021: truncation, no guard bits), so with ``accumulate="truncate"`` the deterministic ``n u`` with ``u = 2^-23``
  replaces ``lambda sqrt(n) u``.
* **Scaling and exponentials**: ``s_j`` is scaled by ``sm_scale * log2(e)`` (a constant rounded once, so the same
  relative error for every slot: never cancels), ``exp2``/``log2`` are within a few ulp (4 ``u`` taken), ``lse`` is
  rescaled by ``ln 2``: each a relative ``u`` of the value it touches.
* **Softmax sums** over the ``topk`` slots (positive terms, ``lambda sqrt(topk) u`` relative), and the split-KV merge
  (at most ``topk`` partial states).
* **P before the second dot**: on a GPU with bf16/fp16 dots the probabilities are rounded to the dot dtype
  (``u_dot``); each rounding is independent and centred, so their sum over the slots obeys Hoeffding's inequality
  (``lambda u_dot sqrt(sum_j (p_j v_j)^2)``).
* **The stored output** rounds once more to ``out_dtype``.

The fp8_ds_mla caches need no term of their own beyond ``u`` per score term (a dequantized value, or a folded scale
times the tile's dot): the e4m3 codes are exact in every dot dtype, so the same limits hold for the 656-byte rows
(``D = 576``) and for the NoPE head's 528-byte rows (``D = 512``, no rope term: ``q`` and ``k`` are 512 wide); the fold
kernel's four 128-term partial dots plus their three additions round fewer times than one ``D``-term sum, which the
bound assumes.

First-order terms only (every relative error here is below 1e-2, so second-order terms are below 1 % of the
limit). With fp32 everything (the CPU interpreter) the limit on ``lse`` comes out at a few 1e-5 for unit-variance
inputs: the sum of ``|q_d k_jd|`` over 576 terms, not the much smaller error the dot usually makes, sets it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: Probability, per check, that a correct kernel is refused by chance (the rounding errors are random variables).
P_FAIL = 1e-9

_UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11,
                  torch.bfloat16: 2.0 ** -8, torch.float8_e4m3fn: 2.0 ** -4}


def unit_roundoff(dtype: torch.dtype) -> float:
    """``u = 2^-(p)`` for a ``p``-bit significand (round to nearest): fp64 2^-53, fp32 2^-24, fp16 2^-11,
    bf16 2^-8, e4m3 2^-4 (normal numbers). Raises ValueError for other dtypes."""
    if dtype not in _UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff for {dtype}; accepted: {', '.join(map(str, _UNIT_ROUNDOFF))}")
    return _UNIT_ROUNDOFF[dtype]


def confidence_lambda(n: int, count: int, p_fail: float = P_FAIL) -> float:
    """The ``lambda`` of Higham & Mary's bound for ``count`` dots of length ``n``: ``2 n count exp(-lambda^2/2) =
    p_fail``, i.e. ``lambda = sqrt(2 ln(2 n count / p_fail))`` (about 8-9 for the test sizes)."""
    return math.sqrt(2.0 * math.log(2.0 * max(n, 1) * max(count, 1) / p_fail))


@dataclass(frozen=True)
class AttentionLimits:
    """Per-element limits on ``|kernel - reference|``: ``out [T, H, DL]`` and ``lse [T, H]`` (float64; rows without a
    valid slot get 0: there the kernel must be exact, ``out = 0`` and ``lse = -inf``). ``ref_out [T, H, DL]`` and
    ``ref_lse [T, H]``: the float64 attention the limits were derived from (the math of
    :func:`~sparse_mla.kernels.reference.sparse_mla_attention_ref`, computed once for both)."""

    out: torch.Tensor
    lse: torch.Tensor
    lam: float
    ref_out: torch.Tensor | None = None
    ref_lse: torch.Tensor | None = None


def attention_limits(q: torch.Tensor, k: torch.Tensor, valid: torch.Tensor, sm_scale: float, *,
                     out_dtype: torch.dtype, dot_dtype: torch.dtype = torch.float32,
                     k_rounded: bool = False, accumulate: str = "round", dv: int = 512) -> AttentionLimits:
    """Limits for sparse MLA attention computed from the inputs themselves.

    Args:
        q: ``[T, H, D]`` float64 query (``q_nope || q_pe``, D = 576), the values the kernel read.
        k: ``[T, topk, D]`` float64 gathered cache rows (dequantized for fp8_ds_mla); ``v = k[..., :dv]``.
        valid: ``[T, topk]`` bool, False where the index is -1.
        sm_scale: the softmax scale.
        out_dtype: dtype the kernel stores ``out`` in.
        dot_dtype: dtype of the dots' inputs (P is rounded to it before ``P V``): float32 under the interpreter.
        k_rounded: the kernel rounds each cache value to ``dot_dtype`` before the dots (the fp8 "registers"
            variant's dequantized tile); False where the dots read exact values (a float cache, e4m3 codes).
        accumulate: ``"round"`` (round-to-nearest fp32, the CPU) or ``"truncate"`` (tensor cores).

    Returns: :class:`AttentionLimits`. Source of each term: this module's docstring.
    """
    if accumulate not in ("round", "truncate"):
        raise ValueError(f"accumulate {accumulate!r}: 'round' or 'truncate'")
    T, H, D = q.shape
    topk = k.shape[1]
    u, u_dot = unit_roundoff(torch.float32), unit_roundoff(dot_dtype)
    lam = confidence_lambda(D, T * H * max(topk, 1))

    def acc_rel(n: int) -> float:                       # relative error of an n-term fp32 accumulation
        return n * 2.0 ** -23 if accumulate == "truncate" else lam * math.sqrt(n) * u

    mask = valid[:, None, :]
    s = (torch.einsum("thd,tkd->thk", q, k) * sm_scale).masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    finite = torch.isfinite(lse)
    p = torch.exp(s - torch.where(finite, lse, torch.zeros_like(lse))[..., None]).masked_fill(~mask, 0.0)
    s0 = s.masked_fill(~mask, 0.0)
    # per-score error, natural units: the dot (+ u for a dequantized value or a folded scale, + u_dot if the cache
    # values are rounded to the dot dtype), the scale constant, the product and the exp2 argument
    abs_terms = torch.einsum("thd,tkd->thk", q.abs(), k.abs()) * sm_scale
    dot_rel = acc_rel(D) + u + (u_dot if k_rounded else 0.0)
    e_s = dot_rel * abs_terms + 3 * u * s0.abs() + u * (s0.amax(-1, keepdim=True) - s0).abs()
    e_s = e_s.masked_fill(~mask, 0.0)
    sums = acc_rel(topk) + 4 * u + 3 * u * lse.abs().masked_fill(~finite, 0.0)   # sums, exp2/log2, ln 2, merge
    lse_lim = (p * e_s).sum(-1) + sums
    v = k[..., :dv]
    out = torch.einsum("thk,tkd->thd", p, v)
    pv_abs = torch.einsum("thk,tkd->thd", p, v.abs())
    e_mean = (p * e_s).sum(-1, keepdim=True)
    # d out = sum_j p_j (v_j - out) d s_j  <=  sum_j p_j e_j |v_j| + |out| sum_j p_j e_j
    through_softmax = torch.einsum("thk,tkd->thd", p * e_s, v.abs()) + out.abs() * e_mean
    p_round = lam * u_dot * torch.sqrt(torch.einsum("thk,tkd->thd", p ** 2, v ** 2))   # Hoeffding over slots
    v_round = (u_dot if k_rounded else 0.0) * pv_abs
    out_lim = through_softmax + p_round + v_round + sums[..., None] * (pv_abs + out.abs()) \
        + unit_roundoff(out_dtype) * out.abs()
    return AttentionLimits(out=torch.where(finite[..., None], out_lim, torch.zeros_like(out_lim)),
                           lse=torch.where(finite, lse_lim, torch.zeros_like(lse_lim)), lam=lam,
                           ref_out=out, ref_lse=lse)


@dataclass(frozen=True)
class Comparison:
    """One kernel run against the reference: the largest error, the largest limit (inputs only) and the worst
    error/limit ratio (``<= 1`` passes) for ``out`` and ``lse``; ``nan_left`` poisoned elements the kernel did not write;
    ``empty_ok``: rows without a valid slot gave exactly ``out = 0``, ``lse = -inf``."""

    out_max_err: float
    out_limit: float
    out_ratio: float
    lse_max_err: float
    lse_limit: float
    lse_ratio: float
    nan_left: int
    empty_ok: bool

    @property
    def ok(self) -> bool:
        return self.nan_left == 0 and self.empty_ok and self.out_ratio <= 1.0 and self.lse_ratio <= 1.0

    def explain(self) -> str:
        return (f"out: max |err| {self.out_max_err:.2e}, limits up to {self.out_limit:.2e}, worst err/limit "
                f"{self.out_ratio:.3f}; lse: max |err| {self.lse_max_err:.2e}, limits up to {self.lse_limit:.2e}, "
                f"worst err/limit {self.lse_ratio:.3f}; NaN left {self.nan_left}; empty rows exact {self.empty_ok}")


def _worst(err: torch.Tensor, lim: torch.Tensor) -> tuple[float, float, float]:
    """``(max error, max limit, max error/limit)``: the limit's maximum depends on the inputs only (the same on
    every machine), the ratio's on the kernel's rounding."""
    if err.numel() == 0:
        return 0.0, 0.0, 0.0
    ratio = err / lim.clamp_min(1e-300)
    return float(err.max()), float(lim.max()), float(ratio.max())


def compare_attention(out: torch.Tensor, lse: torch.Tensor | None, ref_out: torch.Tensor, ref_lse: torch.Tensor,
                      limits: AttentionLimits, valid: torch.Tensor) -> Comparison:
    """Compare a kernel's ``(out, lse)`` with the float64 reference's elementwise against ``limits``
    (``lse=None``: ``out`` alone). ``valid``: ``[T, topk]`` bool as given to :func:`attention_limits`."""
    ref_out, ref_lse = ref_out.detach().cpu().double(), ref_lse.detach().cpu().double()
    out = out.detach().cpu().double()
    lse = ref_lse if lse is None else lse.detach().cpu().double()          # out only (vLLM's forward_mqa)
    empty = ~valid.cpu().any(dim=1)
    nan_left = int(out.isnan().sum() + lse.isnan().sum())
    empty_ok = bool((out[empty] == 0).all() and lse[empty].isneginf().all())
    rows = ~empty
    o = _worst((out[rows] - ref_out[rows]).abs().nan_to_num(math.inf), limits.out.cpu()[rows])
    s = _worst((lse[rows] - ref_lse[rows]).abs().nan_to_num(math.inf), limits.lse.cpu()[rows])
    return Comparison(*o, *s, nan_left=nan_left, empty_ok=empty_ok)


def check_attention(out: torch.Tensor, lse: torch.Tensor | None, q_nope: torch.Tensor, q_pe: torch.Tensor,
                    kv_cache: torch.Tensor, indices: torch.Tensor, sm_scale: float, *, kv_cache_dtype: str = "auto",
                    dot_dtype: torch.dtype | None = None, fp8_scales: str | None = None) -> Comparison:
    """A kernel's ``(out, lse)`` for these inputs against the float64 reference
    (:func:`~sparse_mla.kernels.reference.sparse_mla_attention_ref` on float64 queries, so its ``out`` is not
    rounded) within :func:`attention_limits`. ``dot_dtype``: the kernel's (default: float32 under the
    interpreter, else q's dtype); accumulation rounds on the CPU and truncates on a GPU's tensor cores;
    ``fp8_scales="registers"`` with bf16/fp16 dots rounds the dequantized cache to the dot dtype."""
    from .reference import gather_rows_ref

    on_gpu = q_nope.is_cuda
    if dot_dtype is None:
        dot_dtype = q_nope.dtype if on_gpu else torch.float32
    k, valid = gather_rows_ref(kv_cache, indices, kv_cache_dtype)
    q = torch.cat([q_nope.double(), q_pe.double()], dim=-1)
    limits = attention_limits(q, k, valid, sm_scale, out_dtype=out.dtype, dot_dtype=dot_dtype,
                              k_rounded=kv_cache_dtype == "fp8_ds_mla" and fp8_scales == "registers"
                              and dot_dtype != torch.float32,
                              accumulate="truncate" if on_gpu and dot_dtype != torch.float32 else "round")
    return compare_attention(out, lse, limits.ref_out, limits.ref_lse, limits, valid)


def share_of_limit(ratio: float, bounds: tuple[float, ...] = (0.01, 0.1, 1.0)) -> str:
    """The largest error/limit ratio of a family of runs as a decade (``"below 0.01"``, ``"below 0.1"``,
    ``"below 1"``, else ``"above the limit (R)"``): what a notebook's checked output shows, so that a drift of the
    errors by a decade changes it before any run fails, while machine-to-machine rounding differences (a few times
    the error, never a decade on these sizes) do not. ``bounds``: the decades told apart (ascending, the last 1);
    leave out one that a family's ratio sits next to."""
    for b in bounds:
        if ratio < b:
            return f"below {b:g}"
    return f"above the limit ({ratio:.2f})"


# ---- the DSA indexer's logits ------------------------------------------------------------------------------------
#: How each implementation computes ``sum_h relu(q_h . k_n) w_h k_scale_n`` (products of e4m3 codes are exact in
#: fp32, 8 significant bits), keyed by the indexer kernel's dot modes (``kernels.indexer.DOT_MODES``) and vLLM's
#: torch oracle: how its ``D``-term dot rounds, with the source of the model.
INDEXER_ARITHMETIC = {
    # fp32 sums rounded to nearest (the CPU interpreter; vLLM's fp8_paged_mqa_logits_torch): Higham & Mary
    "fp32": "round",
    # fp16 tensor-core dots with fp32 accumulation (our SM80/86 path): truncating accumulation (Fasi et al. 2021)
    "fp16": "truncate",
    # fp8 tensor-core dots (our SM89+ path, and DeepGEMM): the accumulator keeps about 14 bits on Hopper
    # (DeepSeek-V3 Technical Report, arXiv 2412.19437, section 3.3.2), taken as truncation at u = 2^-13
    "fp8": "truncate-14",
    # vLLM's fp8_mqa_logits_torch: a bf16 einsum, its per-head scores stored in bf16 (u = 2^-8), then fp32
    "bf16-scores": "round+bf16",
}


def indexer_limit(magnitude: torch.Tensor, *, heads: int, head_dim: int = 128, arithmetic: str = "fp32",
                  p_fail: float = P_FAIL) -> torch.Tensor:
    """Limit ``[rows, N]`` (float64) on ``|logit - exact|`` for one implementation's indexer logits.

    ``magnitude``: ``sum_h |w_h| k_scale_n sum_d |q_hd k_nd|`` per logit (:func:`indexer_magnitude_prefill` /
    :func:`indexer_magnitude_paged`), which bounds every partial sum of the computation. First-order terms, each a
    relative error of ``magnitude``: the ``head_dim``-term dot (``arithmetic``, :data:`INDEXER_ARITHMETIC`), the
    products with ``w`` and ``k_scale`` (``u`` each), the ``heads``-term sum (``lam sqrt(H) u``), the float32 result
    (``u``). ``lam`` as :func:`confidence_lambda` for all dots together. Raises ValueError for another
    ``arithmetic``."""
    if not isinstance(arithmetic, str) or arithmetic not in INDEXER_ARITHMETIC:
        raise ValueError(f"arithmetic {arithmetic!r}; accepted: {', '.join(INDEXER_ARITHMETIC)}")
    for name, v in (("heads", heads), ("head_dim", head_dim)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r}; accepted: a positive integer")
    if not (isinstance(p_fail, float | int) and 0 < p_fail < 1):
        raise ValueError(f"p_fail={p_fail!r}; accepted: a probability in (0, 1)")
    if not isinstance(magnitude, torch.Tensor):
        raise ValueError(f"magnitude of type {type(magnitude).__name__}; accepted: a tensor of sum_h |w_h| k_scale "
                         f"sum_d |q_hd k_nd| (indexer_magnitude_prefill / _paged)")
    u = unit_roundoff(torch.float32)
    lam = confidence_lambda(head_dim, magnitude.numel() * heads, p_fail)
    mode = INDEXER_ARITHMETIC[arithmetic]
    dot = {"round": lam * math.sqrt(head_dim) * u, "truncate": head_dim * 2.0 ** -23,
           "truncate-14": head_dim * 2.0 ** -13, "round+bf16": lam * math.sqrt(head_dim) * u + 2.0 ** -8}[mode]
    return (dot + 3 * u + lam * math.sqrt(heads) * u) * magnitude.double()


def indexer_error_ratio(logits: torch.Tensor, want: torch.Tensor, limit: torch.Tensor,
                        window: torch.Tensor | None = None) -> float:
    """The worst ``|logits - want| / limit`` over ``window`` (default: where ``want`` is finite); ``<= 1`` passes, NaN
    if a logit there was left unwritten (NaN); an exact logit counts 0 even where its limit is 0; 0.0 for an empty
    window."""
    win = torch.isfinite(want) if window is None else window
    if not win.any():
        return 0.0
    err = (logits[win].double() - want[win].double()).abs()
    return float(torch.where(err == 0, torch.zeros_like(err), err / limit[win]).max())


def indexer_magnitude_prefill(q: torch.Tensor, k: torch.Tensor, k_scale: torch.Tensor, weights: torch.Tensor,
                              ks: torch.Tensor, ke: torch.Tensor) -> torch.Tensor:
    """``magnitude`` of :func:`indexer_limit` for :func:`~sparse_mla.kernels.reference.indexer_logits_prefill_ref`'s
    arguments: that reference on ``|q|``, ``|k|``, ``|w|`` (``-inf`` outside the windows)."""
    from .reference import abs_e4m3, indexer_logits_prefill_ref

    return indexer_logits_prefill_ref(abs_e4m3(q), abs_e4m3(k), k_scale, weights.abs(), ks, ke)


def indexer_magnitude_paged(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor,
                            context_lens: torch.Tensor, block_table: torch.Tensor, max_model_len: int) -> torch.Tensor:
    """``magnitude`` of :func:`indexer_limit` for :func:`~sparse_mla.kernels.reference.indexer_logits_paged_ref`'s
    arguments: that reference on ``|q|``, ``|w|`` and the cache with ``|codes|`` (scales are positive)."""
    from .reference import abs_index_cache, abs_e4m3, indexer_logits_paged_ref

    return indexer_logits_paged_ref(abs_e4m3(q), abs_index_cache(kv_cache), weights.abs(), context_lens, block_table,
                                    max_model_len)
