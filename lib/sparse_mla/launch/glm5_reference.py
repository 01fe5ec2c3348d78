"""An independent plain-PyTorch forward of the GLM-5 architecture (``glm_moe_dsa``: DeepSeek-V3.2 DSA attention).

:class:`Glm5Reference` runs one sequence through the model (full causal prefill) on CPU or GPU in float32 (or
float64) and returns logits. It does not import vLLM; its math follows, and is checked against:

* vLLM 0.26.0 ``vllm/model_executor/models/deepseek_v2.py`` (``DeepseekV2MLAAttention``, ``Indexer``,
  ``DeepseekV2MoE``, ``DeepseekV2DecoderLayer``), ``vllm/model_executor/layers/mla.py``
  (``MultiHeadLatentAttentionWrapper.forward``), ``layers/fused_moe/router/grouped_topk_router.py``
  (``grouped_topk``) and ``layers/rotary_embedding/{base,common}.py``;
* DeepSeek-V3.2-Exp ``inference/model.py`` (``Indexer``, ``MLA``, ``Gate``, ``MoE``);
* transformers ``models/glm_moe_dsa/modeling_glm_moe_dsa.py`` (loaded in ``tests/launch/test_glm5_reference.py``).

Per layer (``x`` = ``input_layernorm`` output ``[T, hidden]``; ``H`` heads, ``nope=192, rope=64, v=256``,
``kv_lora_rank=512`` for GLM-5):

1. ``qr = q_a_layernorm(q_a_proj(x))`` ``[T, q_lora_rank]``; ``q = q_b_proj(qr).view(T, H, nope + rope)`` split
   into ``q_nope`` (first 192) and ``q_pe`` (last 64).
2. ``kv_a_proj_with_mqa(x)`` -> ``kv_c [T, 512]``, ``k_pe [T, 64]``; ``kv_c_normed = kv_a_layernorm(kv_c)``.
3. RoPE on ``q_pe`` and ``k_pe``: interleaved (GPT-J) pairs ``(x[2i], x[2i+1])`` rotated by
   ``pos * theta^(-2i/64)``. vLLM hard-codes ``is_neox_style=False`` for MLA attention (``DeepseekV2MLAAttention``
   ``get_rope(..., is_neox_style=False)``); ``rope_interleave`` in the config is not read by vLLM.
4. Latent cache: ``kv_cache[slot] = [kv_c_normed || k_pe]`` (576 wide) in a paged layout ``[num_blocks, block_size,
   576]`` with ``slot = block_table[pos // block_size] * block_size + pos % block_size``.
5. Indexer (``Indexer.forward``): ``q_i = wq_b(qr).view(T, 32, 128)``, ``k_i = k_norm(wk(x))`` (``LayerNorm``, eps
   1e-6, with bias) ``[T, 128]``; RoPE on the **first** 64 dims of each (``torch.split(q, [rope_dim, head_dim -
   rope_dim])``), interleaved iff ``indexer_rope_interleave`` (vLLM: ``is_neox_style=not indexer_rope_interleave``;
   GLM-5: interleaved, DeepSeek-V3.2: NeoX); ``w = weights_proj(x) * index_head_dim^-0.5 * index_n_heads^-0.5``
   (vLLM ``weights * q_scale * softmax_scale * n_head_scale``, q_scale = 1 here: no fp8);
   ``logits[t, s] = sum_h relu(q_i[t, h] . k_i[s]) * w[t, h]`` for ``s <= t``; the ``min(index_topk, t + 1)``
   largest are selected (request-local positions, ``-1``-padded to ``index_topk``), then converted to cache slots.
6. Absorbed sparse MLA: ``kv_b_proj.weight.view(H, nope + v, 512)`` -> ``W_UK [H, nope, 512]``, ``W_UV [H, v, 512]``;
   ``q_nope_absorbed = einsum('thn,hnc->thc', q_nope, W_UK)``; ``attention_fn(q_nope_absorbed, q_pe, kv_cache,
   slots, sm_scale)`` with ``sm_scale = (nope + rope)^-0.5`` (1/16; no YaRN mscale for GLM-5's default rope) ->
   ``out_latent [T, H, 512]``; ``o_proj(einsum('thc,hvc->thv', out_latent, W_UV).reshape(T, H * v))``.
7. MLP: SiLU-gated (``down(silu(gate(x)) * up(x))``); MoE layers (``layer >= first_k_dense_replace`` and
   ``layer % moe_layer_freq == 0``): fp32 router ``sigmoid(gate(x))``, selection on ``scores +
   e_score_correction_bias`` (``noaux_tc``; group top-2-sum / ``topk_group`` masking when ``n_group > 1``), weights
   from the **unbiased** scores, renormalised if ``norm_topk_prob``, times ``routed_scaling_factor``; plus shared
   experts (not scaled).
8. Residual adds around attention and MLP; final RMSNorm; ``lm_head``. RMSNorm eps is ``rms_norm_eps`` everywhere
   (vLLM; transformers' GLM-MoE-DSA uses 1e-6 for ``q_a_layernorm``/``kv_a_layernorm``: 6.7e-6 of the largest logit
   on the 2-layer test checkpoint, about the size of float32 rounding, ``tests/launch/test_glm5_reference.py``).

DeepSeek-V3.2 (``deepseek_v32``) runs through the same forward with its own geometry (128 heads, ``nope = v = 128``,
indexer 64 heads, NeoX indexer rope) and its YaRN rope: ``rope_parameters`` of ``rope_type`` ``"yarn"`` rotate with
YaRN's blended frequencies (:func:`yarn_inv_freq`: the rotation counts ``beta_fast``/``beta_slow`` over
``original_max_position_embeddings`` pick the dims that keep ``theta^(-2i/d)`` and those divided by ``factor``, a linear
ramp between) and cos/sin times ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)``, ``mscale(s, m) = 0.1 m
ln s + 1``, in both the attention and the indexer (vLLM turns the config's rope into ``deepseek_yarn`` for both,
``DeepseekScalingRotaryEmbedding``), and the softmax scale is ``(nope + rope)^-0.5 * mscale(factor,
mscale_all_dim)^2`` (DeepSeek-V3.2-Exp ``inference/model.py`` ``MLA.__init__``; vLLM ``DeepseekV2MLAAttention``).

Shared top-k (GLM-5.2, :mod:`.index_sharing`): a layer the config declares *shared* (``indexer_types``,
``index_topk_pattern`` or ``index_topk_freq``; :func:`~sparse_mla.launch.index_sharing.own_indexer`) runs no indexer
and attends to the token positions of the last full layer before it (the same ``topk_local``, converted to slots the
same way); its checkpoint has no ``indexer.*`` tensors.

Differences from vLLM by design: everything runs in float32 without fp8 -- vLLM quantises indexer q/k to fp8 e4m3
(ue8m0 scales) before the logits, so when a prompt is longer than ``index_topk`` near-ties in the indexer logits may
select different tokens than vLLM does. For prompts of length ``<= index_topk`` every causal token is selected, so
sparse attention equals dense causal attention and the selection cannot differ. DeepSeek-V3.2's reference also
applies a Hadamard rotation to indexer q/k before fp8 quantisation; it is orthogonal, so without quantisation it does
not change the logits and is omitted (vLLM omits it too).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import UserInputError
from .index_sharing import own_indexer

#: ``attention_fn(q_nope_absorbed [T,H,kv_lora_rank], q_pe [T,H,rope], kv_cache [num_blocks,block_size,
#: kv_lora_rank+rope], indices [T,topk] int32 global slots (-1 = none), sm_scale)``
#: ``-> (out [T,H,kv_lora_rank], lse [T,H] natural log)``
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float],
                       tuple[torch.Tensor, torch.Tensor]]

DEFAULT_BLOCK_SIZE = 64


def gather_sparse_mla_attention(q_nope_absorbed: torch.Tensor, q_pe: torch.Tensor, kv_cache: torch.Tensor,
                                indices: torch.Tensor, sm_scale: float, *, chunk: int = 128,
                                compute_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Default ``attention_fn``: sparse MLA over a paged latent cache by plain gather + softmax.

    ``q_nope_absorbed [T, H, Dc]``, ``q_pe [T, H, Dr]``, ``kv_cache [num_blocks, block_size, Dc + Dr]`` (``[..., :Dc]``
    is both the key's nope part and the value), ``indices [T, topk]`` int32 global slots (negative = none; duplicates
    count once per listing; a slot ``>= num_blocks * block_size`` raises :class:`UserInputError`), ``sm_scale`` float. Returns ``out [T, H, Dc]`` (dtype of ``q_nope_absorbed``) and
    ``lse [T, H]`` float32 = natural-log ``logsumexp`` of the scaled scores (``-inf``, ``out = 0`` for rows with no
    valid index). Computed in ``compute_dtype`` (default: float32, or float64 for float64 queries), ``chunk`` query
    rows at a time.
    """
    if compute_dtype is None:
        compute_dtype = torch.promote_types(q_nope_absorbed.dtype, torch.float32)
    T, Hn, Dc = q_nope_absorbed.shape
    Dr = q_pe.shape[-1]
    kv = kv_cache.reshape(-1, Dc + Dr).to(compute_dtype)
    n_slots = kv.shape[0]
    if indices.numel() and int(indices.max()) >= n_slots:
        raise UserInputError(f"indices hold slot {int(indices.max())} but kv_cache has {n_slots} slots; accepted: "
                             f"global slots in [0, {n_slots}) or negative for none")
    out = torch.zeros(T, Hn, Dc, dtype=compute_dtype, device=q_nope_absorbed.device)
    lse = torch.full((T, Hn), float("-inf"), dtype=torch.float32, device=q_nope_absorbed.device)
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        idx = indices[t0:t1].long()
        valid = idx >= 0
        # compact each row's valid entries to the front (a stable sort keeps duplicates) and drop all-empty columns
        order = torch.sort((~valid).to(torch.int8), dim=-1, stable=True).indices
        n = int(valid.sum(dim=-1).max())
        if n == 0:
            continue
        idx, valid = idx.gather(1, order)[:, :n], valid.gather(1, order)[:, :n]
        safe = torch.where(valid, idx, torch.zeros_like(idx))
        k = kv[safe]  # [t, topk, Dc + Dr]
        q = torch.cat([q_nope_absorbed[t0:t1], q_pe[t0:t1]], dim=-1).to(compute_dtype)  # [t, H, Dc + Dr]
        s = torch.einsum("thd,tkd->thk", q, k) * sm_scale
        s = s.masked_fill(~valid[:, None, :], float("-inf"))
        row_lse = torch.logsumexp(s, dim=-1)  # [t, H]
        has = valid.any(dim=-1)[:, None]
        p = torch.where(has[..., None], torch.exp(s - torch.where(has, row_lse, torch.zeros_like(row_lse))[..., None]),
                        torch.zeros_like(s))
        out[t0:t1] = torch.einsum("thk,tkc->thc", p, k[..., :Dc])
        lse[t0:t1] = row_lse.float()
    return out.to(q_nope_absorbed.dtype), lse


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude scale ``0.1 * mscale * ln(factor) + 1`` (1 for ``factor <= 1``; DeepSeek-V3 ``inference/
    model.py``)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_inv_freq(rotary_dim: int, theta: float, factor: float, original_max_position: int, beta_fast: float = 32,
                  beta_slow: float = 1) -> torch.Tensor:
    """``[rotary_dim // 2]`` float32 YaRN frequencies (B. Peng et al., *YaRN*, arXiv 2309.00071; DeepSeek-V3
    ``precompute_freqs_cis``): dims below ``low`` keep ``theta^(-2i/d)``, dims above ``high`` are divided by
    ``factor``, a linear ramp between; ``low``/``high`` are the dims that turn ``beta_fast``/``beta_slow`` times over
    ``original_max_position`` positions (floor / ceil, clamped to ``[0, d - 1]``)."""
    d = rotary_dim
    base = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))

    def dim_of(rotations: float) -> float:
        return d * math.log(original_max_position / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = max(math.floor(dim_of(beta_fast)), 0), min(math.ceil(dim_of(beta_slow)), d - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp                 # 1: the dim keeps its frequency (extrapolation), 0: divided by factor
    return base / factor * (1 - keep) + base * keep


def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float,
                 yarn: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin [T, rotary_dim // 2]`` float32. Default RoPE as vLLM's ``RotaryEmbedding`` (``base.py``
    ``_compute_inv_freq``/``_compute_cos_sin_cache``): ``inv_freq = 1 / theta^(arange(0, d, 2) / d)``. With ``yarn``
    (the config's ``rope_parameters`` of a ``"yarn"`` rope): :func:`yarn_inv_freq` and cos/sin times ``mscale(factor,
    mscale) / mscale(factor, mscale_all_dim) * attn_factor``."""
    if yarn is None:
        inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
        scale = 1.0
    else:
        factor = float(yarn["factor"])
        inv_freq = yarn_inv_freq(rotary_dim, theta, factor, int(yarn["original_max_position_embeddings"]),
                                 float(yarn.get("beta_fast", 32)), float(yarn.get("beta_slow", 1)))
        scale = (yarn_mscale(factor, float(yarn.get("mscale", 1))) /
                 yarn_mscale(factor, float(yarn.get("mscale_all_dim", 0) or 0)) * float(yarn.get("attn_factor", 1)))
    freqs = positions.to(torch.float32)[:, None] * inv_freq.to(positions.device)[None, :]
    return freqs.cos() * scale, freqs.sin() * scale


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate the last dim of ``x [T, ..., d]`` (``cos/sin [T, d/2]``).

    ``interleaved=True``: GPT-J style (vLLM ``is_neox_style=False``, ``rotate_gptj``): pairs ``(x[2i], x[2i+1])``,
    output stays interleaved. ``interleaved=False``: NeoX style (``rotate_neox``): pairs ``(x[i], x[i + d/2])``.
    """
    shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[-1],)
    c = cos.reshape(shape).to(x.dtype)
    s = sin.reshape(shape).to(x.dtype)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def positions_to_slots(topk_local: torch.Tensor, block_table: torch.Tensor, block_size: int) -> torch.Tensor:
    """Request-local token positions ``[T, topk]`` (``-1`` = none) -> global cache slots (int32, ``-1`` kept):
    ``slot = block_table[pos // block_size] * block_size + pos % block_size`` (vLLM ``sparse_utils.py``
    ``triton_convert_req_index_to_global_index`` for one request)."""
    pos = topk_local.long()
    valid = pos >= 0
    p = torch.where(valid, pos, torch.zeros_like(pos))
    slots = block_table.long()[p // block_size] * block_size + p % block_size
    return torch.where(valid, slots, torch.full_like(slots, -1)).to(torch.int32)


def make_block_table(num_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE, shuffle: bool = True, seed: int = 0,
                     spare_blocks: int = 3) -> tuple[torch.Tensor, int]:
    """A block table for one request of ``num_tokens`` and the cache's ``num_blocks``.

    ``shuffle=True`` draws the request's blocks from a pool with ``spare_blocks`` unused blocks in a seeded random
    order (a non-identity, non-contiguous table, as after other requests have come and gone); ``False`` gives
    blocks ``0, 1, 2, ...``.
    """
    n = max(1, math.ceil(num_tokens / block_size))
    if not shuffle:
        return torch.arange(n, dtype=torch.int32), n
    num_blocks = n + spare_blocks
    g = torch.Generator().manual_seed(seed)
    table = torch.randperm(num_blocks, generator=g)[:n].to(torch.int32)
    return table, num_blocks


def indexer_topk(q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor, index_topk: int,
                 chunk: int = 512) -> torch.Tensor:
    """DSA lightning-indexer selection for one sequence (full causal prefill).

    ``q [T, Hi, Di]`` and ``k [T, Di]`` (RoPE applied), ``weights [T, Hi]`` (scales folded in). Scores
    ``logits[t, s] = sum_h relu(q[t, h] . k[s]) * weights[t, h]`` for ``s <= t``; returns ``[T, index_topk]`` int32
    request-local positions of the ``min(index_topk, t + 1)`` highest scores per row, ascending, ``-1``-padded.
    """
    T = q.shape[0]
    out = torch.full((T, index_topk), -1, dtype=torch.int32, device=q.device)
    kk = min(index_topk, T)
    s_pos = torch.arange(T, device=q.device)
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        scores = torch.einsum("thd,sd->ths", q[t0:t1], k).relu()
        logits = torch.einsum("ths,th->ts", scores, weights[t0:t1])
        causal = s_pos[None, :] <= torch.arange(t0, t1, device=q.device)[:, None]
        logits = logits.masked_fill(~causal, float("-inf"))
        vals, idx = logits.topk(kk, dim=-1)
        idx = torch.where(torch.isneginf(vals), torch.full_like(idx, T + 1), idx)  # drop masked picks, sort them last
        idx, _ = idx.sort(dim=-1)
        idx = torch.where(idx > T, torch.full_like(idx, -1), idx)
        out[t0:t1, :kk] = idx.to(torch.int32)
    return out


class Glm5Reference:
    """Plain-PyTorch GLM-5 (``glm_moe_dsa``) forward for one sequence; see the module docstring for the math.

    ``config``: a Hugging Face ``config.json`` dict (GLM-5 / DeepSeek-V3.2 DSA keys; ``rope_parameters.rope_type``
    ``default`` or ``yarn``; a top-k sharing as :func:`~sparse_mla.launch.index_sharing.own_indexer` reads it, whose
    answer is ``self.own_indexer``). ``state_dict``: tensors under vLLM/HF checkpoint names
    (:func:`sparse_mla.launch.checkpoint.load_checkpoint`; per-expert ``mlp.experts.{e}.*`` names; bf16/fp32 -- fp8 checkpoints are not supported).
    Weights are converted to ``dtype`` (float32 default) on ``device``.

    ``attention_fn`` (constructor argument or attribute): the absorbed sparse MLA core, signature
    :data:`AttentionFn`; default :func:`gather_sparse_mla_attention`. It is called once per layer with the layer's
    queries, the paged latent cache built from the whole prompt, the indexer's slots and ``sm_scale``; inputs are
    in ``dtype`` on ``device`` (cast them inside if a kernel needs bf16/fp16).

    ``block_size`` (64) and ``shuffle_blocks`` (True) choose the paged cache layout; ``block_table`` may also be given
    to :meth:`forward`. After :meth:`forward`, ``self.last`` holds per-layer ``topk_local`` and ``slots`` (int32
    ``[T, index_topk]``), ``block_table``, ``num_blocks`` and the last layer's ``lse``.
    """

    def __init__(self, config: dict[str, Any], state_dict: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", attention_fn: AttentionFn | None = None,
                 block_size: int = DEFAULT_BLOCK_SIZE, shuffle_blocks: bool = True):
        from ..models import text_config

        cfg = text_config(config)
        self.config = dict(cfg)
        self.dtype = dtype
        self.device = torch.device(device)
        self.attention_fn: AttentionFn = attention_fn if attention_fn is not None else gather_sparse_mla_attention
        self.block_size = int(block_size)
        self.shuffle_blocks = shuffle_blocks
        self.last: dict[str, Any] = {}

        c = self.config
        missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "q_lora_rank",
                               "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "index_topk",
                               "index_n_heads", "index_head_dim", "vocab_size") if c.get(k) is None]
        if missing:
            raise UserInputError(f"config is not a GLM-5/DeepSeek-V3.2 DSA config: missing {', '.join(missing)}; "
                                 f"accepted: a glm_moe_dsa / deepseek_v32 config.json with q_lora_rank and index_topk")
        rp = c.get("rope_parameters") or c.get("rope_scaling") or {}
        self.rope_theta = float(rp.get("rope_theta", c.get("rope_theta", 10000.0)))
        self.yarn = self._yarn(rp)
        self.H = int(c["num_attention_heads"])
        self.nope, self.rope, self.vdim = int(c["qk_nope_head_dim"]), int(c["qk_rope_head_dim"]), int(c["v_head_dim"])
        self.kv_lora_rank = int(c["kv_lora_rank"])
        self.q_lora_rank = int(c["q_lora_rank"])
        self.sm_scale = (self.nope + self.rope) ** -0.5
        if self.yarn is not None:       # vLLM and DeepSeek-V3.2: times mscale(factor, mscale_all_dim)^2
            mscale_all_dim = float(self.yarn.get("mscale_all_dim", 0) or 0)
            self.sm_scale *= yarn_mscale(float(self.yarn["factor"]), mscale_all_dim) ** 2
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.index_topk = int(c["index_topk"])
        self.index_n_heads, self.index_head_dim = int(c["index_n_heads"]), int(c["index_head_dim"])
        self.indexer_interleaved = bool(c.get("indexer_rope_interleave", False))
        self.num_layers = int(c["num_hidden_layers"])
        #: per layer: True where it runs its own indexer, False where it reuses the previous full layer's top-k
        self.own_indexer = own_indexer(c)
        self.skip_topk = [not o for o in self.own_indexer]

        self.w: dict[str, torch.Tensor] = {}
        for name, t in state_dict.items():
            if not isinstance(t, torch.Tensor):
                continue
            if t.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
                raise UserInputError(f"tensor {name!r} is {t.dtype}: fp8 checkpoints are not supported by the "
                                     f"reference; accepted: bf16/fp16/fp32 weights")
            self.w[name] = t.to(device=self.device, dtype=dtype)
        self._check_weights()

    # ---------------------------------------------------------------- helpers
    def _check_weights(self) -> None:
        need = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
        for i in range(self.num_layers):
            a = f"model.layers.{i}.self_attn."
            need += [a + n for n in ("q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight",
                                     "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight",
                                     "o_proj.weight")]
            if self.own_indexer[i]:
                need += [a + "indexer." + n for n in ("wq_b.weight", "wk.weight", "weights_proj.weight",
                                                      "k_norm.weight", "k_norm.bias")]
        missing = [n for n in need if n not in self.w]
        if missing:
            raise UserInputError(f"state_dict lacks {len(missing)} required tensor(s), e.g. {missing[0]!r}; accepted: "
                                 f"vLLM/HF GLM-5 checkpoint names (see sparse_mla.launch.checkpoint.expected_weight_shapes)")

    @staticmethod
    def _yarn(rp: dict[str, Any]) -> dict[str, Any] | None:
        """The ``rope_parameters`` of a YaRN rope (None: the default rope). Raises :class:`UserInputError` for
        another rope type or a YaRN rope without ``factor`` / ``original_max_position_embeddings``."""
        rope_type = rp.get("rope_type", rp.get("type", "default"))
        if rope_type == "default":
            return None
        if rope_type != "yarn" or not rp.get("apply_yarn_scaling", True):
            raise UserInputError(f"rope_type {rope_type!r} is not supported by the reference; accepted: 'default' "
                                 f"(GLM-5) or 'yarn' (DeepSeek-V3.2)")
        missing = [k for k in ("factor", "original_max_position_embeddings") if rp.get(k) is None]
        if missing:
            raise UserInputError(f"rope_type 'yarn' without {', '.join(missing)}; accepted: a yarn rope_parameters "
                                 f"with factor and original_max_position_embeddings (DeepSeek-V3.2: 40, 4096)")
        return dict(rp)

    def is_moe_layer(self, layer: int) -> bool:
        c = self.config
        return (c.get("n_routed_experts") is not None and layer >= int(c.get("first_k_dense_replace", 0))
                and layer % int(c.get("moe_layer_freq", 1)) == 0)

    @property
    def _acc(self) -> torch.dtype:
        """Where vLLM computes in float32 (norms, router, indexer scores): float32, or float64 in a float64 run."""
        return torch.promote_types(self.dtype, torch.float32)

    def _rms(self, x: torch.Tensor, name: str) -> torch.Tensor:
        x32 = x.to(self._acc)
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.w[name].to(self._acc)).to(x.dtype)

    def _lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ self.w[name].t()

    def _contract(self, equation: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``einsum(equation, a, b)`` contracting ``a``'s last dimension (the absorbed ``W_UK`` / ``W_UV`` products)."""
        return torch.einsum(equation, a, b)

    def _mlp(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        return self._lin(F.silu(self._lin(x, prefix + "gate_proj.weight")) * self._lin(x, prefix + "up_proj.weight"),
                         prefix + "down_proj.weight")

    # ---------------------------------------------------------------- blocks
    def indexer(self, layer: int, x: torch.Tensor, qr: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        """Request-local top-k positions ``[T, index_topk]`` int32 for layer ``layer`` (``x`` = normed hidden)."""
        Hi, Di, r = self.index_n_heads, self.index_head_dim, self.rope
        q, k, w = self.indexer_inputs(layer, x, qr)
        q = torch.cat([apply_rope(q[..., :r], cos, sin, self.indexer_interleaved), q[..., r:]], dim=-1)
        k = torch.cat([apply_rope(k[..., :r], cos, sin, self.indexer_interleaved), k[..., r:]], dim=-1)
        weights = w * (Di ** -0.5) * (Hi ** -0.5)
        return self._indexer_topk(q.to(self._acc), k.to(self._acc), weights.to(self._acc))

    def indexer_inputs(self, layer: int, x: torch.Tensor, qr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                                       torch.Tensor]:
        """The indexer's ``q [T, Hi, Di]`` (``wq_b(qr)``), ``k [T, Di]`` (``k_norm(wk(x))``) before RoPE, and its
        head weights ``weights_proj(x) [T, Hi]`` before the scales (vLLM's ``Indexer.forward`` inputs to its fused
        q rope + fp8 quantization and to the key cache)."""
        p = f"model.layers.{layer}.self_attn.indexer."
        T, Hi, Di = x.shape[0], self.index_n_heads, self.index_head_dim
        q = self._lin(qr, p + "wq_b.weight").view(T, Hi, Di)
        k = F.layer_norm(self._lin(x, p + "wk.weight"), (Di,), self.w[p + "k_norm.weight"], self.w[p + "k_norm.bias"],
                         eps=1e-6)
        return q, k, self._lin(x, p + "weights_proj.weight")

    def _indexer_topk(self, q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The selection on the indexer's roped ``q``, ``k`` and folded ``weights`` (:func:`indexer_topk`)."""
        return indexer_topk(q, k, weights, self.index_topk)

    def attention(self, layer: int, x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  block_table: torch.Tensor, num_blocks: int, prev_topk: torch.Tensor | None) -> tuple[torch.Tensor,
                                                                                                    torch.Tensor]:
        """Sparse MLA attention of layer ``layer`` -> (output ``[T, hidden]``, topk_local ``[T, index_topk]``)."""
        a = f"model.layers.{layer}.self_attn."
        T = x.shape[0]
        H, nope, r, vd, Dc = self.H, self.nope, self.rope, self.vdim, self.kv_lora_rank
        qr = self._rms(self._lin(x, a + "q_a_proj.weight"), a + "q_a_layernorm.weight")
        q = self._lin(qr, a + "q_b_proj.weight").view(T, H, nope + r)
        q_nope, q_pe = q[..., :nope], q[..., nope:]
        kv = self._lin(x, a + "kv_a_proj_with_mqa.weight")
        kv_c, k_pe = kv[:, :Dc], kv[:, Dc:]
        kv_c_normed = self._rms(kv_c, a + "kv_a_layernorm.weight")
        q_pe = apply_rope(q_pe, cos, sin, interleaved=True)
        k_pe = apply_rope(k_pe, cos, sin, interleaved=True)

        if self.skip_topk[layer]:      # a shared layer: the last full layer's selection (layer 0 is full)
            topk_local = prev_topk
        else:
            topk_local = self.indexer(layer, x, qr, cos, sin)
        slots = positions_to_slots(topk_local, block_table, self.block_size)

        kv_cache = torch.zeros(num_blocks, self.block_size, Dc + r, dtype=x.dtype, device=x.device)
        pos_slots = positions_to_slots(positions[:, None], block_table, self.block_size)[:, 0].long()
        kv_cache.view(-1, Dc + r)[pos_slots] = torch.cat([kv_c_normed, k_pe], dim=-1)

        w_kv = self.w[a + "kv_b_proj.weight"].view(H, nope + vd, Dc)
        w_uk, w_uv = w_kv[:, :nope, :], w_kv[:, nope:, :]
        q_nope_absorbed = self._contract("thn,hnc->thc", q_nope, w_uk)
        out_latent, lse = self.attention_fn(q_nope_absorbed.contiguous(), q_pe.contiguous(), kv_cache, slots,
                                            self.sm_scale)
        out_latent = out_latent.to(x.dtype)
        v = self._contract("thc,hvc->thv", out_latent, w_uv).reshape(T, H * vd)
        self.last.setdefault("topk_local", []).append(topk_local)
        self.last.setdefault("slots", []).append(slots)
        self.last["lse"] = lse
        return self._lin(v, a + "o_proj.weight"), topk_local

    def _route(self, choice: torch.Tensor, k: int) -> torch.Tensor:
        """The router's decision: the ``k`` experts of highest ``choice [T, experts]`` (groups outside ``topk_group``
        already at -inf) -> expert ids ``[T, k]``."""
        return choice.topk(k, dim=-1)[1]

    def moe(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """MoE block (vLLM ``DeepseekV2MoE`` + ``grouped_topk``; fp32 router as vLLM does for ``glm_moe_dsa``)."""
        c = self.config
        m = f"model.layers.{layer}.mlp."
        E, k = int(c["n_routed_experts"]), int(c["num_experts_per_tok"])
        n_group, topk_group = int(c.get("n_group", 1) or 1), int(c.get("topk_group", 1) or 1)
        logits = x.to(self._acc) @ self.w[m + "gate.weight"].to(self._acc).t()
        scoring = c.get("scoring_func", "softmax")
        scores = logits.sigmoid() if scoring == "sigmoid" else logits.softmax(dim=-1)
        bias = self.w.get(m + "gate.e_score_correction_bias")
        if bias is not None:
            choice = scores + bias.to(self._acc)[None, :]
            group_scores = choice.view(-1, n_group, E // n_group).topk(min(2, E // n_group), dim=-1)[0].sum(-1)
        else:
            choice = scores
            group_scores = choice.view(-1, n_group, E // n_group).max(dim=-1).values
        gidx = group_scores.topk(topk_group, dim=-1)[1]
        gmask = torch.zeros_like(group_scores).scatter_(1, gidx, 1.0)
        smask = gmask[:, :, None].expand(-1, n_group, E // n_group).reshape(-1, E).bool()
        topk_ids = self._route(choice.masked_fill(~smask, float("-inf")), k)
        topk_w = scores.gather(1, topk_ids)
        if c.get("norm_topk_prob", True):
            topk_w = topk_w / topk_w.sum(dim=-1, keepdim=True)
        topk_w = topk_w * float(c.get("routed_scaling_factor", 1.0))

        out = torch.zeros_like(x)
        for e in topk_ids.unique().tolist():
            tok, slot = (topk_ids == e).nonzero(as_tuple=True)
            y = self._mlp(x[tok], m + f"experts.{e}.")
            out.index_add_(0, tok, y * topk_w[tok, slot, None].to(x.dtype))
        if c.get("n_shared_experts"):
            out = out + self._mlp(x, m + "shared_experts.")
        return out

    # ---------------------------------------------------------------- forward
    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, block_table: torch.Tensor | None = None,
                num_blocks: int | None = None) -> torch.Tensor:
        """``input_ids [T]`` (LongTensor, one sequence, positions ``0..T-1``) -> logits ``[T, vocab]`` in ``dtype``.

        ``block_table [ceil(T / block_size)]`` int32 and ``num_blocks`` choose the paged cache layout (default: a
        seeded shuffled table, see :func:`make_block_table`).
        """
        ids = torch.as_tensor(input_ids, device=self.device)
        vocab = self.w["model.embed_tokens.weight"].shape[0]
        if ids.dim() != 1 or ids.numel() == 0 or ids.dtype.is_floating_point or ids.dtype.is_complex \
                or ids.dtype == torch.bool:
            raise UserInputError(f"input_ids of shape {tuple(ids.shape)} and dtype {ids.dtype} are not accepted; "
                                 f"accepted: a 1-D integer tensor of at least one token id")
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise UserInputError(f"input_ids hold token id {int(ids.min()) if int(ids.min()) < 0 else int(ids.max())}"
                                 f"; accepted: ids in [0, {vocab}) (the vocabulary)")
        ids = ids.long()
        T = ids.shape[0]
        if block_table is None:
            block_table, nb = make_block_table(T, self.block_size, shuffle=self.shuffle_blocks)
            num_blocks = nb if num_blocks is None else num_blocks
        block_table = block_table.to(self.device)
        if num_blocks is None:
            num_blocks = int(block_table.max()) + 1
        if block_table.numel() * self.block_size < T or int(block_table.max()) >= num_blocks:
            raise UserInputError(f"block_table of {block_table.numel()} block(s) (max id {int(block_table.max())}) "
                                 f"cannot hold {T} tokens in {num_blocks} blocks of {self.block_size}")
        self.last = {"block_table": block_table, "num_blocks": num_blocks}
        positions = torch.arange(T, device=self.device)
        cos, sin = rope_cos_sin(positions, self.rope, self.rope_theta, self.yarn)

        h = self.w["model.embed_tokens.weight"][ids]
        prev_topk = None
        for i in range(self.num_layers):
            p = f"model.layers.{i}."
            attn, prev_topk = self.attention(i, self._rms(h, p + "input_layernorm.weight"), positions, cos, sin,
                                             block_table, num_blocks, prev_topk)
            h = h + attn
            x = self._rms(h, p + "post_attention_layernorm.weight")
            h = h + (self.moe(i, x) if self.is_moe_layer(i) else self._mlp(x, p + "mlp."))
        h = self._rms(h, "model.norm.weight")
        return self._lin(h, "lm_head.weight")

    __call__ = forward

    @classmethod
    def from_pretrained(cls, path, **kwargs) -> "Glm5Reference":
        """Load a checkpoint directory with :func:`sparse_mla.launch.checkpoint.load_checkpoint`, or a GGUF file's
        dequantized weights with the config beside it (:func:`sparse_mla.launch.gguf_reader.load_gguf_checkpoint`),
        and build the reference."""
        from .checkpoint import load_weights

        cfg, sd = load_weights(path)
        return cls(cfg, sd, **kwargs)
