"""The DSA lightning indexer's logits in Triton, for GPUs DeepGEMM has no kernel for (SM80/86/89).

DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5) picks, for every query token, the ``index_topk`` cache positions the
sparse MLA attention then reads. The picker is the *lightning indexer*: ``index_n_heads`` small heads (GLM-5: 32,
DeepSeek-V3.2: 64) of ``index_head_dim = 128``, one fp8 e4m3 key per cached token shared by all heads (MQA), a
per-token fp32 key scale, and per-(token, head) weights that already hold the query's ue8m0 scale, ``D ** -0.5`` and
``H ** -0.5`` (``vllm/model_executor/models/deepseek_v2.py``, ``Indexer.forward``). For query row ``m`` and key
``n`` (vLLM's torch reference, ``fp8_mqa_logits_torch`` in ``vllm/v1/attention/ops/rocm_aiter_mla_sparse.py``)::

    logits[m, n] = sum_h relu(q[m, h] . k[n] * kscale[n]) * w[m, h]          for ks[m] <= n < ke[m]

The kernels compute ``kscale[n] * sum_h relu(q[m, h] . k[n]) * w[m, h]``: equal for the positive scales vLLM writes
(``max(amax, 1e-4) / 448``, rounded up to a power of two), and one multiply per logit instead of one per head (the
paged torch reference, ``fp8_paged_mqa_logits_torch``, scales after the head sum too). Outside a row's window
nothing is promised (``clean_logits=False``, as vLLM calls DeepGEMM): vLLM's top-k kernels read only ``[ks, ke)``
(prefill) and ``[0, context_len)`` (decode). ``clean_logits=True`` fills the rest with ``-inf``.

Two kernels, the two DeepGEMM calls of ``vllm/model_executor/layers/sparse_attn_indexer.py``:

* :func:`indexer_logits_prefill` (``fp8_fp4_mqa_logits``; ragged keys gathered from the cache, a window per query
  row) -- compute-bound. A program takes ``BLOCK_M`` query tokens x all heads as the ``M = BLOCK_M * BLOCK_H`` rows
  of one dot against a ``[D, BLOCK_N]`` key tile (``BLOCK_M * BLOCK_H = 128``: 4 tokens of GLM-5, 2 of V3.2), applies
  relu and the weights, reduces over the heads and scales by the keys' scales. It walks only the key tiles that meet
  some row's window (causal prefill: about half of them), split over ``S`` programs (``S`` from shapes only);
  programs start with the last query rows, whose causal windows are longest.
* :func:`indexer_logits_paged` (``fp8_fp4_paged_mqa_logits``; decode, ``next_n`` = 1 + MTP tokens per request, keys
  in the paged index cache) -- memory-bound. A program owns a contiguous share of one request's cache blocks and
  reads each block once for all ``next_n x H`` query rows of the request (one dot of ``M = next_n * H`` rows); the
  share is computed in the kernel from the request's context length, over a grid sized from shapes only (batch,
  ``cdiv(4 * SMs, batch)`` splits): no host sync, CUDA-graph safe.

The paged index cache (vLLM's layout, written by ``ops.indexer_k_quant_and_cache``, read by
``ops.cp_gather_indexer_k_quant_cache``; torch reader in ``rocm_aiter_mla_sparse.py``): a uint8 tensor
``[num_blocks, block_size, D + 4]`` (or ``[num_blocks, block_size, 1, D + 4]``) whose *block* holds
``[block_size x D e4m3 codes][block_size x fp32 scale]`` -- the shape's per-token rows are not the storage's.

**e4m3 and the GPU.** Codes are decoded by :func:`sparse_mla.kernels.fp8.e4m3_to_f32`; the dot operands are:

* ``"fp8"`` (SM89 and up): the codes bitcast to ``fp8e4nv`` -- Triton's fp8 ``tl.dot`` (``mma``/``wgmma`` e4m3);
* ``"fp16"`` (SM80/86, where Triton cannot compile ``fp8e4nv``): the exact software decode, then fp16 (every e4m3
  value is exact in fp16), fp16 tensor-core dots with fp32 accumulation (``mma.sync ... f16``);
* ``"fp32"`` (CPU, ``TRITON_INTERPRET=1``): the software decode, IEEE fp32 dots.

:func:`dot_mode` picks one from the compute capability (the tensors' device's unless the caller passes one).

**Top-k stays vLLM's.** After the logits vLLM selects with its own C ops (``torch.ops._C.top_k_per_row_prefill``,
``top_k_per_row_decode``, ``persistent_topk``; ``cooperative_topk`` only from SM90). ``vllm/_C_stable_libtorch.abi3.so``
of vLLM 0.26.0 carries sm_80 and sm_86 machine code for all three, so no top-k of ours is needed: extracted with
Triton's bundled ``cuobjdump -xelf all``, the sm_80 cubin (file 135 of the fatbin) and the sm_86 one (136) each hold
``.text`` sections for ``vllm::topKPerRowPrefill<512, *>`` (2), ``vllm::topKPerRowDecode<*>`` (4),
``vllm::persistent::persistent_topk_kernel<*>`` (9) and ``vllm::filtered_topk::FilteredTopK*`` (9), as do sm_89, sm_90
and sm_120; so do the cache ops the indexer needs (``indexer_k_quant_and_cache``: 15 sections, ``cp_gather_indexer``:
6). ``cooperative_topk`` has sm_90+ code only, and vLLM calls it only from SM90 (``sparse_attn_indexer.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..capability import as_capability, device_capability
from ..errors import UserInputError
from ..machine import interpreting
from .fp8 import e4m3_to_f32, has_fp8_conversion
from .occupancy import planning_limits

#: The index head dim the kernels handle (GLM-5 and DeepSeek-V3.2: 128; vLLM's fused q kernel assumes it too).
HEAD_DIM = 128
#: Most index heads per query token (the dot's rows are ``BLOCK_M * BLOCK_H``; 128 heads already fill 128 rows).
MAX_HEADS = 128
#: Most query tokens per request in the paged kernel (MTP with up to 3 speculative tokens).
MAX_NEXT_N = 4
#: Lowest compute capability the kernels are built for.
MIN_CAPABILITY = (8, 0)
DOT_MODES = ("fp8", "fp16", "fp32")


def dot_mode(capability: tuple[int, int] | None, interpret: bool | None = None) -> tuple[str, bool]:
    """``(dot operand dtype, HW)`` for a compute capability: ``("fp8", True)`` from SM89, ``("fp16", False)`` on
    SM80/86, ``("fp32", False)`` for ``None`` (CPU) and always under the interpreter (``interpret``, default: whether
    ``TRITON_INTERPRET`` is set). ``HW`` says whether :func:`~sparse_mla.kernels.fp8.e4m3_to_f32` uses the hardware
    conversion."""
    if capability is None or (interpreting() if interpret is None else interpret):
        return "fp32", False
    if has_fp8_conversion(capability):
        return "fp8", True
    return "fp16", False


@triton.jit
def _operand(code, HW: tl.constexpr, DOT: tl.constexpr):
    """uint8 e4m3 codes -> a ``tl.dot`` operand: bitcast to fp8e4nv (``DOT == "fp8"``), or decoded exactly and cast
    to fp16 / fp32."""
    if DOT == "fp8":
        return code.to(tl.float8e4nv, bitcast=True)
    elif DOT == "fp16":
        return e4m3_to_f32(code, HW).to(tl.float16)
    else:
        return e4m3_to_f32(code, HW)


# Sizes that change from call to call are not specialised (no recompilation when a prefill chunk's M or N, or the
# split count, changes its divisibility by 16); strides and head counts are.
@triton.jit
def _prefill_logits_kernel(
    Q, K, KScale, W, KS, KE, Out,
    M, N, H, SPLITS,
    stride_qm, stride_qh, stride_kn, stride_wm, stride_om,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT: tl.constexpr, HW: tl.constexpr,
):
    """Rows ``[pm * BLOCK_M, +BLOCK_M)`` x this split's share of the key tiles that meet one of their windows."""
    pm = tl.num_programs(0) - 1 - tl.program_id(0)          # last rows first: causal windows grow with the row
    ps = tl.program_id(1)
    R: tl.constexpr = BLOCK_M * BLOCK_H
    offs_m = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    ks = tl.maximum(tl.load(KS + offs_m, mask=m_ok, other=0), 0)
    ke = tl.minimum(tl.load(KE + offs_m, mask=m_ok, other=0), N)
    live = m_ok & (ke > ks)
    lo = tl.min(tl.where(live, ks, N), 0)
    hi = tl.max(tl.where(live, ke, 0), 0)
    t_lo = lo // BLOCK_N
    n_tiles = tl.maximum(tl.cdiv(hi, BLOCK_N) - t_lo, 0)
    per = tl.cdiv(n_tiles, SPLITS)
    first = t_lo + ps * per
    last = tl.minimum(first + per, t_lo + n_tiles)

    rows = tl.arange(0, R)                                  # row r = (token r // BLOCK_H, head r % BLOCK_H)
    r_tok = (pm * BLOCK_M + rows // BLOCK_H).to(tl.int64)
    r_head = rows % BLOCK_H
    r_ok = (r_tok < M) & (r_head < H)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + r_tok[:, None] * stride_qm + r_head[:, None] * stride_qh + offs_d[None, :],
                mask=r_ok[:, None], other=0)
    q = _operand(q, HW, DOT)
    w = tl.load(W + r_tok * stride_wm + r_head, mask=r_ok, other=0.0)

    out_rows = Out + offs_m.to(tl.int64)[:, None] * stride_om
    for t in range(first, last):
        offs_n = t * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        k = tl.load(K + offs_n.to(tl.int64)[:, None] * stride_kn + offs_d[None, :], mask=n_ok[:, None], other=0)
        k = _operand(k, HW, DOT)
        if DOT == "fp32":
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.maximum(s, 0.0) * w[:, None]
        logit = tl.sum(tl.reshape(s, [BLOCK_M, BLOCK_H, BLOCK_N]), axis=1)
        scale = tl.load(KScale + offs_n, mask=n_ok, other=0.0)
        logit = logit * scale[None, :]
        in_win = (offs_n[None, :] >= ks[:, None]) & (offs_n[None, :] < ke[:, None]) & m_ok[:, None]
        tl.store(out_rows + offs_n[None, :], logit, mask=in_win)


@triton.jit(do_not_specialize=["MAX_LEN", "MAX_BLOCKS", "SPLITS"])
def _paged_logits_kernel(
    Q, KV, KVScale, W, Ctx, BT, Out,
    H, NEXT_N, MAX_LEN, MAX_BLOCKS, SPLITS,
    stride_qb, stride_qn, stride_qh, stride_kvb, stride_kvsb, stride_wr, stride_cb, stride_btb, stride_or,
    D: tl.constexpr, BS: tl.constexpr, BLOCK_NN: tl.constexpr, BLOCK_H: tl.constexpr, CTX_2D: tl.constexpr,
    DOT: tl.constexpr, HW: tl.constexpr,
):
    """Request ``b``, query tokens ``[g * BLOCK_NN, +BLOCK_NN)``, this split's share of the request's cache blocks."""
    b = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    s = tl.program_id(2)
    offs_j = g * BLOCK_NN + tl.arange(0, BLOCK_NN)          # query token j of the request
    j_ok = offs_j < NEXT_N
    if CTX_2D:   # [B, next_n]: each token's own context length
        lens = tl.load(Ctx + b * stride_cb + offs_j, mask=j_ok, other=0)
    else:        # [B]: the request's length; token j sees L - next_n + 1 + j keys (DeepGEMM's convention)
        lens = tl.load(Ctx + b * stride_cb) - NEXT_N + 1 + offs_j
    lens = tl.where(j_ok, tl.minimum(tl.maximum(lens, 0), MAX_LEN), 0)
    n_blocks = tl.minimum(tl.cdiv(tl.max(lens, 0), BS), MAX_BLOCKS)
    per = tl.cdiv(n_blocks, SPLITS)
    first = s * per
    last = tl.minimum(first + per, n_blocks)

    R: tl.constexpr = BLOCK_NN * BLOCK_H
    rows = tl.arange(0, R)                                  # row r = (token g * BLOCK_NN + r // BLOCK_H, head r % BLOCK_H)
    r_tok = g * BLOCK_NN + rows // BLOCK_H
    r_head = rows % BLOCK_H
    r_ok = (r_tok < NEXT_N) & (r_head < H)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + r_tok[:, None] * stride_qn + r_head[:, None] * stride_qh + offs_d[None, :],
                mask=r_ok[:, None], other=0)
    q = _operand(q, HW, DOT)
    w = tl.load(W + (b * NEXT_N + r_tok) * stride_wr + r_head, mask=r_ok, other=0.0)

    offs_t = tl.arange(0, BS)
    out_cols = Out + (b * NEXT_N + offs_j)[None, :] * stride_or      # [1, BLOCK_NN]: this program's output rows
    for blk in range(first, last):
        phys = tl.load(BT + b * stride_btb + blk).to(tl.int64)
        k = tl.load(KV + phys * stride_kvb + offs_t[:, None] * D + offs_d[None, :])
        k = _operand(k, HW, DOT)
        scale = tl.load(KVScale + phys * stride_kvsb + (BS * D // 4) + offs_t)
        # keys as the dot's M (= block size, 64 in vLLM: one Hopper warpgroup MMA even for 32 heads x 1 token)
        if DOT == "fp32":
            sc = tl.dot(k, tl.trans(q), input_precision="ieee")     # [BS, R]
        else:
            sc = tl.dot(k, tl.trans(q))
        sc = tl.maximum(sc, 0.0) * w[None, :]
        logit = tl.sum(tl.reshape(sc, [BS, BLOCK_NN, BLOCK_H]), axis=2) * scale[:, None]   # [BS, BLOCK_NN]
        pos = blk * BS + offs_t
        tl.store(out_cols + pos[:, None], logit, mask=pos[:, None] < lens[None, :])


# ----------------------------------------------------------------------------------------------------------------
# Launch configuration (from shapes only)
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class IndexerConfig:
    """One launch: rows per dot (``block_m`` query tokens x ``block_h`` padded heads), key tile ``block_n`` (the
    cache block size in the paged kernel), ``splits`` programs per row block / request, warps, stages, operands."""

    block_m: int
    block_h: int
    block_n: int
    splits: int
    num_warps: int
    num_stages: int
    dot: str
    hw: bool


_SM_COUNT: dict[tuple, int] = {}


def _sm_count(device: torch.device, capability: tuple[int, int] | None = None) -> int:
    """SMs of the GPU the launch is planned for (:func:`~sparse_mla.kernels.occupancy.planning_limits`: the device's,
    or the simulated GPU's where vLLM's capability names another); 8 on the CPU."""
    if device.type != "cuda":
        return 8
    idx = device.index if device.index is not None else torch.cuda.current_device()
    key = (idx, None if capability is None else tuple(capability))
    if key not in _SM_COUNT:
        _SM_COUNT[key] = planning_limits(torch.device("cuda", idx), capability).sm_count
    return _SM_COUNT[key]


def _block_h(H: int) -> int:
    return max(16, triton.next_power_of_2(H))


def prefill_config(M: int, N: int, H: int, device: torch.device, capability: tuple[int, int] | None, *,
                   block_m: int | None = None, block_n: int | None = None, splits: int | None = None,
                   num_warps: int | None = None, num_stages: int | None = None) -> IndexerConfig:
    """The prefill launch: ``block_m * block_h = 128`` rows, key tiles of 128 (fp8 operands) or 64 (fp16/fp32,
    whose tiles take twice the shared memory), 8 warps; ``splits = cdiv(2 * SMs, row blocks)`` (at most the key
    tiles) so that a few hundred rows still fill the GPU. Explicit arguments override (the benchmark's sweeps)."""
    dot, hw = dot_mode(capability)
    bh = _block_h(H)
    bm = block_m or max(1, 128 // bh)
    bn = block_n or (128 if dot == "fp8" else 64)
    row_blocks = triton.cdiv(max(M, 1), bm)
    if splits is None:
        splits = max(1, min(triton.cdiv(2 * _sm_count(device, capability), row_blocks), triton.cdiv(max(N, 1), bn)))
    return IndexerConfig(bm, bh, bn, splits, num_warps or 8, num_stages or (3 if dot == "fp8" else 2), dot, hw)


def paged_config(B: int, next_n: int, H: int, block_size: int, max_model_len: int, device: torch.device,
                 capability: tuple[int, int] | None, *, splits: int | None = None, num_warps: int | None = None,
                 num_stages: int | None = None) -> IndexerConfig:
    """The decode launch: all ``next_n`` tokens of a request in one program while ``next_n * block_h <= 256`` rows
    (else token groups), one cache block per step; ``splits = cdiv(4 * SMs, B * groups)``, at most the blocks of
    ``max_model_len`` tokens -- from shapes only, so one graph serves every context length."""
    dot, hw = dot_mode(capability)
    bh = _block_h(H)
    bnn = min(triton.next_power_of_2(next_n), max(1, 256 // bh))
    groups = triton.cdiv(next_n, bnn)
    if splits is None:
        max_blocks = triton.cdiv(max(max_model_len, 1), block_size)
        splits = max(1, min(triton.cdiv(4 * _sm_count(device, capability), max(B, 1) * groups), max_blocks))
    rows = bnn * bh
    return IndexerConfig(bnn, bh, block_size, splits, num_warps or (8 if rows >= 256 else 4),
                         num_stages or 3, dot, hw)


# ----------------------------------------------------------------------------------------------------------------
# Checked wrappers
# ----------------------------------------------------------------------------------------------------------------

_FP8 = (torch.float8_e4m3fn, torch.uint8)

#: Launch overrides the wrappers accept: (lowest, highest, power of two). ``splits`` is a grid dimension (CUDA: at most
#: 65535 programs along it).
_OVERRIDES = {"block_m": (1, 128, True), "block_n": (16, 256, True), "splits": (1, 65535, False),
              "num_warps": (1, 32, True), "num_stages": (1, 8, False)}


def _check_overrides(config: dict, accepted: tuple[str, ...]) -> None:
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        raise UserInputError(f"unknown launch override(s) {', '.join(unknown)}; accepted: {', '.join(accepted)}")
    for name, v in config.items():
        lo, hi, pow2 = _OVERRIDES[name]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi
                              or (pow2 and v & (v - 1))):
            raise UserInputError(f"{name} {v!r} is not accepted; accepted: "
                                 + (f"a power of two from {lo} to {hi}" if pow2 else f"an integer from {lo} to {hi}"))


def _as_codes(x: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise UserInputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FP8:
        raise UserInputError(f"{name} dtype {x.dtype} is not accepted; accepted: torch.float8_e4m3fn (or its uint8 "
                             f"view)")
    return x.view(torch.uint8)


def _check_tensor(x, name: str, dtypes: tuple, dim: int | tuple[int, ...]) -> None:
    if not isinstance(x, torch.Tensor):
        raise UserInputError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    dims = (dim,) if isinstance(dim, int) else dim
    if x.dim() not in dims:
        raise UserInputError(f"{name} has shape {tuple(x.shape)}; accepted: {' or '.join(f'{d}-D' for d in dims)}")
    if x.dtype not in dtypes:
        raise UserInputError(f"{name} dtype {x.dtype} is not accepted; accepted: "
                             f"{' or '.join(str(d) for d in dtypes)}")


def _check_heads(H: int, D: int) -> None:
    if D != HEAD_DIM:
        raise UserInputError(f"index_head_dim {D} is not accepted; accepted: {HEAD_DIM} (GLM-5, DeepSeek-V3.2)")
    if not 1 <= H <= MAX_HEADS:
        raise UserInputError(f"index_n_heads {H} is not accepted; accepted: 1 to {MAX_HEADS}")


def _capability(device: torch.device, capability) -> tuple[int, int] | None:
    cap = device_capability(device) if capability is None else as_capability(capability)
    if cap is None:
        return None
    if cap < MIN_CAPABILITY:
        raise UserInputError(f"compute capability {cap[0]}.{cap[1]} is not accepted; accepted: 8.0 and up (the Triton "
                             f"indexer uses fp16/fp8 tensor-core dots)")
    return cap


def _one_device(*xs) -> torch.device:
    devs = {x.device for x in xs}
    if len(devs) != 1:
        raise UserInputError(f"tensors are on different devices {sorted(map(str, devs))}; accepted: one device")
    dev = next(iter(devs))
    if dev.type == "meta":
        raise UserInputError("tensors on the meta device hold no data; accepted: cuda (or cpu under TRITON_INTERPRET=1)")
    return dev


#: Row stride alignment of the logits the wrappers allocate, in floats: 1024 bytes, as DeepGEMM's logits (a view
#: ``[:, :width]`` of a wider buffer; vLLM's top-k kernels take the row stride as an argument).
LOGITS_ROW_ALIGN = 256


def _logits_buffer(rows: int, width: int, clean: bool, device: torch.device) -> torch.Tensor:
    stride = triton.cdiv(max(width, 1), LOGITS_ROW_ALIGN) * LOGITS_ROW_ALIGN
    buf = torch.empty((rows, stride), dtype=torch.float32, device=device)[:, :width]
    return buf.fill_(float("-inf")) if clean else buf


def indexer_logits_prefill(q: torch.Tensor, k: torch.Tensor, k_scale: torch.Tensor, weights: torch.Tensor,
                           ks: torch.Tensor, ke: torch.Tensor, *, clean_logits: bool = False,
                           out: torch.Tensor | None = None, capability: tuple[int, int] | None = None,
                           **config) -> torch.Tensor:
    """Lightning-indexer logits of ragged query rows against a flat key array (DeepGEMM's ``fp8_fp4_mqa_logits``
    with fp8 q, as ``vllm/utils/deep_gemm.py`` documents it).

    Args:
        q: ``[M, H, D=128]`` query codes, ``torch.float8_e4m3fn`` (or its uint8 view); any strides with a unit last
            stride. (Its ue8m0 per-(token, head) scale is already folded into ``weights`` by vLLM.)
        k: ``[N, D]`` key codes (e4m3fn or uint8), unit last stride.
        k_scale: ``[N]`` (or ``[N, 1]``) float32 per-key scales (positive).
        weights: ``[M, H]`` float32 head weights.
        ks, ke: ``[M]`` int32 (or int64) window of each row, keys ``ks[m] <= n < ke[m]`` (``ks == ke``: empty row;
            bounds outside ``[0, N]`` are clipped).
        clean_logits: fill everything outside the windows with ``-inf`` (else it is left unwritten).
        out: optional ``[M, N]`` float32 output (unit last stride; default: a view with a 1024-byte aligned row
            stride, as DeepGEMM returns).
        capability: compute capability that picks the operand path (default: ``q``'s device's; CPU: fp32).
        **config: launch overrides for :func:`prefill_config` (``block_m``, ``block_n``, ``splits``, ``num_warps``,
            ``num_stages``).

    Returns:
        ``[M, N]`` float32 logits, exact on the windows up to fp32 accumulation order.

    Raises:
        sparse_mla.errors.UserInputError: wrong ranks, dtypes, sizes or devices; ``D != 128``; ``H > 128``; a
            capability below 8.0; an unknown or out-of-range launch override.
    """
    q, k = _as_codes(q, "q"), _as_codes(k, "k")
    _check_overrides(config, ("block_m", "block_n", "splits", "num_warps", "num_stages"))
    _check_tensor(k_scale, "k_scale", (torch.float32,), (1, 2))
    _check_tensor(weights, "weights", (torch.float32,), 2)
    for name, x in (("ks", ks), ("ke", ke)):
        _check_tensor(x, name, (torch.int32, torch.int64), 1)
    if q.dim() != 3 or k.dim() != 2:
        raise UserInputError(f"q must be [M, H, D] and k [N, D]; got shapes {tuple(q.shape)} and {tuple(k.shape)}")
    M, H, D = q.shape
    N = k.shape[0]
    _check_heads(H, D)
    if k.shape[1] != D:
        raise UserInputError(f"k has shape {tuple(k.shape)}; accepted: [N, {D}] (q's head dim)")
    k_scale = k_scale.reshape(-1) if k_scale.dim() == 2 and k_scale.shape[1] == 1 else k_scale
    if k_scale.dim() != 1 or k_scale.shape[0] != N:
        raise UserInputError(f"k_scale has shape {tuple(k_scale.shape)}; accepted: [{N}] or [{N}, 1] (one per key)")
    if tuple(weights.shape) != (M, H):
        raise UserInputError(f"weights has shape {tuple(weights.shape)}; accepted: [{M}, {H}] (q's [M, H])")
    for name, x in (("ks", ks), ("ke", ke)):
        if x.shape[0] != M:
            raise UserInputError(f"{name} has shape {tuple(x.shape)}; accepted: [{M}] (one per query row)")
    dev = _one_device(q, k, k_scale, weights, ks, ke)
    cap = _capability(dev, capability)
    if out is None:
        out = _logits_buffer(M, N, clean_logits, dev)
    else:
        if out.shape != (M, N) or out.dtype != torch.float32 or out.device != dev or (N > 1 and out.stride(1) != 1):
            raise UserInputError(f"out {tuple(out.shape)} {out.dtype} on {out.device} does not fit; accepted: [{M}, "
                                 f"{N}] float32 on {dev} with a unit last stride")
        if clean_logits:
            out.fill_(float("-inf"))
    if M == 0 or N == 0:
        return out
    q = q if q.stride(2) == 1 else q.contiguous()
    k = k if k.stride(1) == 1 else k.contiguous()
    weights = weights if weights.stride(1) == 1 else weights.contiguous()
    k_scale = k_scale.contiguous()
    # clipped to [0, N] before the int32 cast, which would wrap an int64 bound past 2**31 back into range
    ks, ke = ks.clamp(0, N).to(torch.int32).contiguous(), ke.clamp(0, N).to(torch.int32).contiguous()
    cfg = prefill_config(M, N, H, dev, cap, **config)
    grid = (triton.cdiv(M, cfg.block_m), cfg.splits)
    _prefill_logits_kernel[grid](
        q, k, k_scale, weights, ks, ke, out, M, N, H, cfg.splits,
        q.stride(0), q.stride(1), k.stride(0), weights.stride(0), out.stride(0),
        D=D, BLOCK_M=cfg.block_m, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n, DOT=cfg.dot, HW=cfg.hw,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


def split_index_cache(kv_cache: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The paged index cache as ``(codes uint8 [num_blocks, block_size * (D + 4)], scales float32 [num_blocks,
    block_size * (D + 4) / 4], block_size)``: two views of the same storage (codes of token ``t`` of a block at
    ``t * D``, its scale at float offset ``block_size * D / 4 + t``)."""
    _check_tensor(kv_cache, "kv_cache", (torch.uint8,), (3, 4))
    if kv_cache.dim() == 4 and kv_cache.shape[2] != 1:
        raise UserInputError(f"kv_cache has shape {tuple(kv_cache.shape)}; accepted: [num_blocks, block_size, "
                             f"{head_dim + 4}] or [num_blocks, block_size, 1, {head_dim + 4}]")
    nb, bs, width = kv_cache.shape[0], kv_cache.shape[1], kv_cache.shape[-1]
    if width != head_dim + 4:
        raise UserInputError(f"kv_cache last dimension {width} is not accepted; accepted: {head_dim + 4} (index_head_dim"
                             f" {head_dim} e4m3 codes + a 4-byte fp32 scale per token)")
    if bs < 16 or bs > 256 or bs & (bs - 1):
        raise UserInputError(f"kv_cache block size {bs} is not accepted; accepted: a power of two from 16 to 256 "
                             f"(vLLM uses 64)")
    inner = kv_cache.stride()[1:]
    if inner[-1] != 1 or kv_cache.stride(1) != width or kv_cache.stride(0) % 4:
        raise UserInputError(f"kv_cache with strides {tuple(kv_cache.stride())} is not accepted; accepted: contiguous "
                             f"blocks of [block_size, {width}] bytes (vLLM's layout)")
    flat = torch.as_strided(kv_cache, (nb, bs * width), (kv_cache.stride(0), 1))
    return flat, flat.view(torch.float32), bs


def indexer_logits_paged(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor,
                         context_lens: torch.Tensor, block_table: torch.Tensor, max_model_len: int, *,
                         clean_logits: bool = False, out: torch.Tensor | None = None,
                         capability: tuple[int, int] | None = None, **config) -> torch.Tensor:
    """Lightning-indexer logits of decode queries against the paged index cache (DeepGEMM's
    ``fp8_fp4_paged_mqa_logits`` with fp8 q, as ``vllm/utils/deep_gemm.py`` documents it).

    Args:
        q: ``[B, next_n, H, D=128]`` query codes (``torch.float8_e4m3fn`` or uint8), ``next_n`` 1 to 4; unit last
            stride.
        kv_cache: the paged index cache, uint8 ``[num_blocks, block_size, D + 4]`` or ``[num_blocks, block_size, 1,
            D + 4]``; per block ``[block_size x D codes][block_size x fp32 scale]`` (vLLM's layout).
        weights: ``[B * next_n, H]`` float32 head weights (row ``b * next_n + j``).
        context_lens: int32 ``[B, next_n]`` (each token's context length: token ``j`` sees keys ``0 ..
            context_lens[b, j] - 1``, vLLM's MTP layout) or ``[B]`` (token ``j`` sees ``L - next_n + 1 + j`` keys).
        block_table: ``[B, max_blocks]`` int32 physical block of each logical block.
        max_model_len: width of the output (context lengths beyond it are cut to it).
        clean_logits: fill positions at or past each row's context length with ``-inf``.
        out: optional ``[B * next_n, max_model_len]`` float32 output (unit last stride; default: a view with a
            1024-byte aligned row stride, as DeepGEMM returns).
        capability: compute capability that picks the operand path (default: ``q``'s device's; CPU: fp32).
        **config: launch overrides for :func:`paged_config` (``splits``, ``num_warps``, ``num_stages``).

    Returns:
        ``[B * next_n, max_model_len]`` float32 logits. No host sync, grid from shapes only (CUDA-graph safe).

    Raises:
        sparse_mla.errors.UserInputError: wrong ranks, dtypes, sizes or devices; ``D != 128``; ``H > 128``;
            ``next_n`` outside 1..4; a block size other than a power of two in 16..256; a capability below 8.0;
            an unknown or out-of-range launch override.
    """
    q = _as_codes(q, "q")
    _check_overrides(config, ("splits", "num_warps", "num_stages"))
    _check_tensor(weights, "weights", (torch.float32,), 2)
    _check_tensor(context_lens, "context_lens", (torch.int32,), (1, 2))
    _check_tensor(block_table, "block_table", (torch.int32,), 2)
    if q.dim() != 4:
        raise UserInputError(f"q has shape {tuple(q.shape)}; accepted: [B, next_n, H, D]")
    B, next_n, H, D = q.shape
    _check_heads(H, D)
    if not 1 <= next_n <= MAX_NEXT_N:
        raise UserInputError(f"next_n {next_n} is not accepted; accepted: 1 to {MAX_NEXT_N} (decode with up to "
                             f"{MAX_NEXT_N - 1} MTP tokens)")
    codes, scales, bs = split_index_cache(kv_cache, D)
    if tuple(weights.shape) != (B * next_n, H):
        raise UserInputError(f"weights has shape {tuple(weights.shape)}; accepted: [{B * next_n}, {H}] (B * next_n, H)")
    if context_lens.shape[0] != B or (context_lens.dim() == 2 and context_lens.shape[1] != next_n):
        raise UserInputError(f"context_lens has shape {tuple(context_lens.shape)}; accepted: [{B}, {next_n}] or [{B}]")
    if block_table.shape[0] != B:
        raise UserInputError(f"block_table has shape {tuple(block_table.shape)}; accepted: [{B}, max_blocks]")
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 1:
        raise UserInputError(f"max_model_len {max_model_len!r} is not accepted; accepted: a positive integer")
    dev = _one_device(q, kv_cache, weights, context_lens, block_table)
    cap = _capability(dev, capability)
    rows = B * next_n
    if out is None:
        out = _logits_buffer(rows, max_model_len, clean_logits, dev)
    else:
        if out.shape != (rows, max_model_len) or out.dtype != torch.float32 or out.device != dev or \
                (max_model_len > 1 and out.stride(1) != 1):
            raise UserInputError(f"out {tuple(out.shape)} {out.dtype} on {out.device} does not fit; accepted: [{rows}, "
                                 f"{max_model_len}] float32 on {dev} with a unit last stride")
        if clean_logits:
            out.fill_(float("-inf"))
    if B == 0 or block_table.shape[1] == 0:
        return out
    q = q if q.stride(3) == 1 else q.contiguous()
    weights = weights if weights.stride(1) == 1 else weights.contiguous()
    ctx = context_lens if context_lens.stride(-1) == 1 else context_lens.contiguous()
    bt = block_table if block_table.stride(1) == 1 else block_table.contiguous()
    cfg = paged_config(B, next_n, H, bs, max_model_len, dev, cap, **config)
    grid = (B, triton.cdiv(next_n, cfg.block_m), cfg.splits)
    _paged_logits_kernel[grid](
        q, codes, scales, weights, ctx, bt, out,
        H, next_n, max_model_len, bt.shape[1], cfg.splits,
        q.stride(0), q.stride(1), q.stride(2), codes.stride(0), scales.stride(0), weights.stride(0), ctx.stride(0),
        bt.stride(0), out.stride(0),
        D=D, BS=bs, BLOCK_NN=cfg.block_m, BLOCK_H=cfg.block_h, CTX_2D=ctx.dim() == 2, DOT=cfg.dot, HW=cfg.hw,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out

