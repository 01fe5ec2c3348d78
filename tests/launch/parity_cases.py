"""Our Triton kernels on a tiny checkpoint's own inputs, layer by layer, through the reference forward (CPU,
``TRITON_INTERPRET=1``): the sparse MLA attention kernel on every layer's queries, latent cache, slots and softmax
scale, and the DSA indexer's kernels (vLLM's fused q rope + fp8 quantization, the prefill logits) on every full
layer's indexer inputs. Each output is held to the limit derived from its arithmetic on those inputs
(``sparse_mla.kernels.error_bounds``) against a float64 reference, or to bit equality where the reference is the
interpreter's own arithmetic. The interpreter runs a kernel row by row, so the kernels see a subset of the query rows
(:data:`ATTENTION_ROWS` / :data:`INDEXER_ROWS`: the first ones and those past ``index_topk``, where the selection
binds); the forward itself carries on with the plain gather."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

import sparse_mla
from sparse_mla.kernels import error_bounds as eb
from sparse_mla.kernels import reference as kref
from sparse_mla.kernels.indexer import indexer_logits_prefill
from sparse_mla.kernels.indexer_quant import indexer_q_rope_quant
from sparse_mla.launch import glm5_reference as gr


def rows(T: int, index_topk: int, early: int, late: int) -> torch.Tensor:
    """``early`` rows from the start and ``late`` rows spread over ``index_topk .. T - 1``."""
    if T <= index_topk:
        return torch.arange(min(early, T))
    tail = torch.linspace(index_topk, T - 1, late).round().long()
    return torch.unique(torch.cat([torch.arange(min(early, T)), tail]))


ATTENTION_ROWS = dict(early=3, late=5)
INDEXER_ROWS = dict(early=4, late=16)
QUANT_ROWS = dict(early=1, late=1)      # the fused q kernel runs one program per (row, head)


@dataclass
class KernelRun:
    """What :class:`CheckedReference` saw: one attention check per layer, one indexer record per full layer."""

    attention: list = field(default_factory=list)      # (layer, Comparison, sm_scale, slots)
    indexer: list = field(default_factory=list)        # dicts of indexer_parity


class CheckedReference(gr.Glm5Reference):
    """The reference forward with our kernels checked on every layer's inputs (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, attention_fn=self._checked_attention, **kwargs)
        self.run = KernelRun()
        self._layer = 0

    def attention(self, layer, *args, **kwargs):
        self._layer = layer
        return super().attention(layer, *args, **kwargs)

    def _checked_attention(self, q_nope, q_pe, kv_cache, slots, sm_scale):
        r = rows(q_nope.shape[0], self.index_topk, **ATTENTION_ROWS)
        out, lse = sparse_mla.sparse_mla_attention(q_nope[r].contiguous(), q_pe[r].contiguous(), kv_cache,
                                                   slots[r].contiguous(), sm_scale)
        check = eb.check_attention(out, lse, q_nope[r], q_pe[r], kv_cache, slots[r], sm_scale)
        self.run.attention.append((self._layer, check, sm_scale, slots.clone()))
        return gr.gather_sparse_mla_attention(q_nope, q_pe, kv_cache, slots, sm_scale)

    def indexer(self, layer, x, qr, cos, sin):
        q, k, w = self.indexer_inputs(layer, x, qr)
        self.run.indexer.append(dict(layer=layer, **indexer_parity(q, k, w, cos, sin, self.indexer_interleaved,
                                                                   self.index_topk)))
        return super().indexer(layer, x, qr, cos, sin)


def indexer_parity(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   interleaved: bool, index_topk: int) -> dict:
    """vLLM's indexer path on one layer's inputs (``q [T, H, 128]``, ``k [T, 128]`` before rope, ``w [T, H]`` raw
    head weights; ``cos, sin [T, 32]`` of positions ``0 .. T-1``): q through our fused rope + fp8 quantization
    (against its op-for-op reference on :data:`QUANT_ROWS`: ``q_bits_equal``, ``w_equal``; the reference's codes
    then stand in for ours on the other rows), k roped and quantized as vLLM's cache write
    does, then our prefill logits against the float64 reference (``logits_ratio``, error / derived limit), and the
    top-k of our logits against the reference's (``selection_differs``: rows whose selections differ other than
    between entries within the limit of the cut)."""
    T, H, D = q.shape
    pos = torch.arange(T)
    cache = torch.cat([cos, sin], dim=-1).float().contiguous()               # vLLM's cos_sin_cache rows
    r, rq = rows(T, index_topk, **INDEXER_ROWS), rows(T, index_topk, **QUANT_ROWS)

    def quant_args(sel):
        return (pos[sel], q[sel].to(torch.bfloat16).contiguous(), cache, w[sel].float().contiguous(), D ** -0.5,
                H ** -0.5, not interleaved)

    ours_q, ours_w = indexer_q_rope_quant(*quant_args(rq))
    ref_q, ref_w = kref.indexer_q_rope_quant_ref(*quant_args(rq))
    codes, weights = kref.indexer_q_rope_quant_ref(*quant_args(r))     # equal to ours bit for bit (checked on rq)
    rot = cos.shape[-1] * 2
    k_roped = torch.cat([gr.apply_rope(k[:, :rot].float(), cos, sin, interleaved), k[:, rot:].float()], dim=-1)
    bs = 64
    kv = torch.zeros((T + bs - 1) // bs, bs, D + 4, dtype=torch.uint8)
    kref.index_cache_write_ref(kv, k_roped.to(torch.bfloat16), pos)
    flat = kv.view(kv.shape[0], bs * (D + 4))        # per block: bs x D codes, then bs fp32 scales
    k_codes = flat[:, :bs * D].reshape(-1, D)[:T].contiguous()
    k_scales = flat[:, bs * D:].contiguous().view(torch.float32).reshape(-1)[:T].contiguous()
    ks, ke = torch.zeros(len(r), dtype=torch.int32), (r + 1).to(torch.int32)
    ours = indexer_logits_prefill(codes, k_codes, k_scales, weights, ks, ke, clean_logits=True)
    want = kref.indexer_logits_prefill_ref(codes, k_codes, k_scales, weights, ks, ke)
    limit = eb.indexer_limit(eb.indexer_magnitude_prefill(codes, k_codes, k_scales, weights, ks, ke), heads=H,
                             arithmetic="fp32")
    differs = []
    for i, t in enumerate(r.tolist()):
        n = min(index_topk, t + 1)
        a = set(ours[i].topk(n).indices.tolist())
        b = set(want[i].topk(n).indices.tolist())
        cut = float(want[i].topk(n).values[-1])
        if any(abs(float(want[i, j]) - cut) > 2 * float(limit[i, j]) for j in a ^ b):
            differs.append(t)
    return dict(q_bits_equal=torch.equal(ours_q.view(torch.uint8), ref_q.view(torch.uint8)),
                w_equal=torch.equal(ours_w, ref_w), logits_ratio=eb.indexer_error_ratio(ours, want, limit),
                selection_differs=differs, rows=r)
