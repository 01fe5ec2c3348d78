"""The Triton DSA indexer hooked into GLM-5.3-Flash's KPool indexer (vLLM 0.33/0.34's
``vllm/models/glm5next/nvidia/sparse_indexer.py``), on the CPU.

vLLM's CUDA modules are imported with the diagnosis probe's extension stubs; the GPU is vLLM's own CUDA platform class
with the capability patched at its source (``tests/diagnose/vllm_oracles.py``), never the probe's. Checked: by vLLM's
``support_deep_gemm`` rule alone (no switch) the hook rebinds the KPool module's DeepGEMM names on SM89 and leaves
them on SM90 (counted there where asked), and uninstalling puts vLLM's functions back; the logits, called through the
names the KPool module looks up with the arguments ``sparse_attn_indexer_kpool`` passes (pool windows, the pool cache
as ``kv_cache_as_quant_view`` shapes it, pool-granular 2-D context lengths, ``max_model_len = max_pool_len``), against
vLLM's own torch references (``fp8_mqa_logits_torch``, ``fp8_paged_mqa_logits_torch`` in
``vllm/v1/attention/ops/rocm_aiter_mla_sparse.py``) and a float64 computation (:mod:`sparse_mla.kernels.reference`);
and vLLM's own pool writer (``kpool_compress_and_write_cache``) lays out the cache our paged kernel reads.

Limits (:func:`sparse_mla.kernels.error_bounds.indexer_limit`): e4m3 codes and their products are exact in fp32 (8
significant bits) and the scales vLLM writes are powers of two, so every error is fp32 accumulation. For a logit
``sum_h relu(q_h . k_n) w_h s_n`` with ``M = sum_h |w_h| s_n sum_d |q_hd k_nd|``, ``u = 2^-24``:
``|ours - exact| <= (lam sqrt(D) u + 3 u + lam sqrt(H) u) M`` (the ``D = 128``-term dots, the ``w`` and ``s``
products and the result's rounding, the ``H = 32``-term head sum; ``lam = sqrt(2 ln(2 D count / 1e-9))``, about 8 to
9: Higham & Mary's probabilistic bound, all dots together failing with probability below 1e-9). Against vLLM's
prefill reference, which stores its per-head scores in bf16, its own bound adds ``2^-8 M``; against its paged one
(fp32 as ours) twice ours. The largest error/limit ratio of each comparison is printed (``-s``).
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import sys
from pathlib import Path

import pytest
import torch

from sparse_mla.kernels import error_bounds as eb
from sparse_mla.kernels import indexer as kernels
from sparse_mla.kernels import reference as ref
from sparse_mla.models import GLM5_NEXT_VLLM_LINE, GLM5_NEXT_VLLM_LINES
from sparse_mla.vllm_lines import current_line

pytestmark = [pytest.mark.every_line,
              pytest.mark.skipif(current_line() not in GLM5_NEXT_VLLM_LINES,
                                 reason=f"vLLM {GLM5_NEXT_VLLM_LINE} has GLM-5.3-Flash (its KPool indexer)")]

KPOOL = "vllm.models.glm5next.nvidia.sparse_indexer"
BUILDER = "vllm.v1.attention.backends.mla.indexer"
D = 128
RATIOS: dict[str, float] = {}


@pytest.fixture(scope="module")
def flash():
    """vLLM's CUDA-side modules importable here (the probe's extension stubs), the KPool module imported, and
    GLM-5.3-Flash's indexer geometry from transformers' ``Glm5NextTextConfig`` (32 heads x 128, pools of 16)."""
    from sparse_mla.diagnose import probe

    probe.load_vllm_extensions()
    import vllm.platforms.cuda  # noqa: F401
    from transformers import Glm5NextTextConfig

    cfg = Glm5NextTextConfig()
    assert cfg.index_head_dim == D
    return importlib.import_module(KPOOL), cfg


@pytest.fixture
def vi(flash, monkeypatch):
    """The plugin's indexer module with neither switch set (vLLM's rule decides), uninstalled after the test."""
    from sparse_mla.vllm_plugin import indexer

    monkeypatch.delenv(indexer.FORCE_ENV, raising=False)
    monkeypatch.delenv(indexer.COUNT_ENV, raising=False)
    indexer.uninstall_indexer_hook()
    yield indexer
    indexer.uninstall_indexer_hook()


@contextlib.contextmanager
def on_gpu(cap):
    """vLLM's own CUDA platform class at ``cap`` as vLLM's ``current_platform`` (``tests/diagnose/vllm_oracles.py``)."""
    from sparse_mla.diagnose import probe

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnose"))
    try:
        from vllm_oracles import vllms_own_cuda_platform
    finally:
        sys.path.pop(0)
    with contextlib.ExitStack() as stack:
        platform = stack.enter_context(vllms_own_cuda_platform(cap, 1))
        stack.enter_context(probe.use_platform(platform))
        yield platform


# ---- where it is installed, and undone -----------------------------------------------------------------------------

def test_rebinds_the_kpool_modules_deepgemm_names_on_sm89_and_undoes(vi, flash):
    import vllm.utils.deep_gemm as dg
    from vllm.utils import import_utils

    from sparse_mla.vllm_plugin.indexer_kpool import kpool_served

    kpool, _ = flash
    assert vi.KPOOL_MOD == KPOOL
    stock = {n: getattr(kpool, n) for n in ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "has_deep_gemm")}
    assert stock == {"fp8_fp4_mqa_logits": dg.fp8_fp4_mqa_logits, "has_deep_gemm": import_utils.has_deep_gemm,
                     "fp8_fp4_paged_mqa_logits": dg.fp8_fp4_paged_mqa_logits}
    with on_gpu((8, 9)) as platform:
        assert not platform.support_deep_gemm() and vi.wanted() is True
        assert vi.install_indexer_hook() is True
        ours = {n: getattr(kpool, n) for n in stock}
        assert vi.install_indexer_hook() is True and {n: getattr(kpool, n) for n in stock} == ours    # idempotent
        # the DSA module's stand-ins, as the KPool module's own objects (each marked with what it replaced there)
        for name, theirs in (("fp8_fp4_mqa_logits", vi.fp8_fp4_mqa_logits), ("has_deep_gemm", vi.deep_gemm_stand_in),
                             ("fp8_fp4_paged_mqa_logits", vi.fp8_fp4_paged_mqa_logits)):
            assert ours[name].__code__ is theirs.__code__ and ours[name].__wrapped__ is stock[name], name
            assert inspect.signature(ours[name]) == inspect.signature(stock[name]), name
        assert kpool.has_deep_gemm() is True                                     # SparseAttnIndexerKpool's check
        assert importlib.import_module(BUILDER).has_deep_gemm() is False   # no get_paged_mqa_logits_metadata call
        hooked = vi.hooked()
        assert {k for k in hooked if k.startswith(KPOOL + ".")} == {f"{KPOOL}.{n}" for n in stock}
        assert kpool_served(hooked, KPOOL)
    vi.uninstall_indexer_hook()
    assert {n: getattr(kpool, n) for n in stock} == stock and vi.hooked() == {} and vi._FINDER not in sys.meta_path


ATTENTION = "vllm.models.glm5next.common.attention"
OPS = "vllm.models.glm5next.nvidia.ops.kpool_compress"
#: GLM-5.3-Flash's fp8-store sites (``module.name``) and the stand-in each gets below SM89.
KPOOL_STORES = {f"{ATTENTION}.fwht128_quant_fp8": "sparse_mla.vllm_plugin.kpool_stores.fwht128_quant_fp8",
                f"{OPS}.kpool_compress_and_write_cache":
                    "sparse_mla.vllm_plugin.kpool_stores.kpool_compress_and_write_cache",
                f"{OPS}.kpool_decode_update_and_maybe_write_cache_batched":
                    "sparse_mla.vllm_plugin.kpool_stores.kpool_decode_update_and_maybe_write_cache_batched",
                f"{KPOOL}.pack_seq_triton": "sparse_mla.vllm_plugin.indexer.pack_seq_triton"}


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9)])
def test_fp8_store_stand_ins_where_the_gpu_has_no_fp8_conversion_only(vi, flash, cap):
    """Below SM89 the hook puts the byte-storing stand-ins where GLM-5.3-Flash's callers look them up (the
    ``Indexer``'s own ``fwht128_quant_fp8``, ``kpool_ops.<writer>`` in ``sparse_indexer.py``, its ``pack_seq_triton``),
    each marked with vLLM's function it replaced; from SM89 it leaves them; uninstalling puts vLLM's back."""
    kpool, _ = flash
    mods = {m: importlib.import_module(m) for m in (ATTENTION, OPS, KPOOL)}
    stock = {site: getattr(mods[site.rsplit(".", 1)[0]], site.rsplit(".", 1)[1]) for site in KPOOL_STORES}
    with on_gpu(cap):
        assert vi.install_indexer_hook() is True
        hooked = vi.hooked()
        now = {site: getattr(mods[site.rsplit(".", 1)[0]], site.rsplit(".", 1)[1]) for site in KPOOL_STORES}
        if cap >= (8, 9):
            assert not set(KPOOL_STORES) & set(hooked) and now == stock
        else:
            assert {site: hooked.get(site) for site in KPOOL_STORES} == KPOOL_STORES
            for site, fn in now.items():
                assert fn is not stock[site] and fn.__wrapped__ is stock[site], site
                assert inspect.signature(fn) == inspect.signature(stock[site]), site
            assert kpool.kpool_ops.kpool_compress_and_write_cache is now[f"{OPS}.kpool_compress_and_write_cache"]
            sai = importlib.import_module("vllm.model_executor.layers.sparse_attn_indexer")
            assert kpool.pack_seq_triton is not sai.pack_seq_triton          # each module's own copy
            assert kpool.pack_seq_triton.__code__ is sai.pack_seq_triton.__code__
    vi.uninstall_indexer_hook()
    assert {site: getattr(mods[site.rsplit(".", 1)[0]], site.rsplit(".", 1)[1]) for site in KPOOL_STORES} == stock


@pytest.mark.interpreter
def test_the_prefill_writer_runs_through_its_caller_on_sm86(vi, flash):
    """``sparse_attn_indexer_kpool``'s prefill helper (``_kpool_compress_insert``: pools gathered from the batch,
    written at the pool slots of the pools' last tokens) through the hook's stand-in: the pools it writes are the
    stand-in's own output for those pools, every other byte of the poisoned cache untouched."""
    from sparse_mla.vllm_plugin import kpool_stores

    kpool, cfg = flash
    pool = int(cfg.index_kpool)
    g = torch.Generator().manual_seed(4)
    n = 3 * pool + 1
    k = torch.randn(n, D, generator=g).to(torch.bfloat16)
    gate = torch.randn(n, D, generator=g).to(torch.bfloat16)
    ape = torch.randn(pool, D, generator=g)
    slots = torch.full((n,), -1, dtype=torch.int64)
    slots[pool - 1::pool] = torch.tensor([5, 0, 9])
    poison = torch.randint(0, 256, (2, 8, D + 4), generator=g, dtype=torch.uint8)
    cache = poison.clone()
    with on_gpu((8, 6)):
        assert vi.install_indexer_hook() is True
        kpool._kpool_compress_insert(k, gate, ape, cache, slots, pool, D, True)
    idx = torch.arange(pool)[None, :] + torch.arange(0, 3 * pool, pool)[:, None]
    want = poison.clone()
    kpool_stores.kpool_compress_and_write_cache(want, k[idx], gate[idx], ape, torch.tensor([5, 0, 9]), pool)
    assert torch.equal(cache, want) and not torch.equal(cache, poison)


def test_not_installed_where_deepgemm_runs_and_counted_there_where_asked(vi, flash, monkeypatch):
    """SM90: vLLM's ``support_deep_gemm()`` is True, the KPool module keeps DeepGEMM; with
    ``SPARSE_MLA_COUNT_INDEXER_CALLS=1`` its calls pass through a counter (a stand-in for DeepGEMM here, which has no
    CPU kernels) and come back on uninstall."""
    kpool, _ = flash
    seen = []

    def deepgemm(*args, **kwargs):
        seen.append((args, kwargs))
        return "logits"

    monkeypatch.setattr(kpool, "fp8_fp4_paged_mqa_logits", deepgemm)
    stock_prefill = kpool.fp8_fp4_mqa_logits
    with on_gpu((9, 0)) as platform:
        assert platform.support_deep_gemm() and vi.wanted() is False
        assert vi.install_indexer_hook() is False and vi.hooked() == {}
        assert kpool.fp8_fp4_paged_mqa_logits is deepgemm and kpool.fp8_fp4_mqa_logits is stock_prefill
        monkeypatch.setenv(vi.COUNT_ENV, "1")
        before = vi.indexer_calls()
        assert vi.install_indexer_hook() is False and vi.hooked() == {}
        assert kpool.fp8_fp4_paged_mqa_logits is not deepgemm
        assert kpool.fp8_fp4_paged_mqa_logits(1, 2, max_model_len=3) == "logits" and seen == [((1, 2), {"max_model_len": 3})]
        assert vi.indexer_calls() == {**before, "deepgemm": before["deepgemm"] + 1}
    vi.uninstall_indexer_hook()
    assert kpool.fp8_fp4_paged_mqa_logits is deepgemm and kpool.fp8_fp4_mqa_logits is stock_prefill


# ---- the logits, through the KPool module's names ------------------------------------------------------------------

def _pool_keys(n, g):
    """``n`` pool keys as vLLM's pool writer stores them: per-key absmax scale rounded up to a power of two
    (``scale_fmt`` ue8m0), e4m3 codes; returns ``(codes [n, D] e4m3, scales [n] fp32, floats [n, D])``."""
    x = torch.randn(n, D, generator=g) * torch.rand(n, 1, generator=g).mul(8)
    scale = torch.exp2(torch.ceil(torch.log2(x.abs().amax(-1).clamp_min(1e-4) / 448)))
    return (x / scale[:, None]).clamp(-448, 448).to(torch.float8_e4m3fn), scale, x


def _queries(shape, g):
    """e4m3 query codes ``[*shape, D]`` as ``fwht128_quant_fp8`` leaves them (each row's absmax scaled to 448)."""
    x = torch.randn(*shape, D, generator=g)
    return (x * 448 / x.abs().amax(-1, keepdim=True)).to(torch.float8_e4m3fn)


@pytest.fixture
def poisoned(monkeypatch):
    """The kernels' logits buffers filled with NaN and never cleaned: a logit our kernel does not write stays NaN."""
    real = kernels._logits_buffer

    def buffer(rows, width, clean, device):
        return real(rows, width, False, device).fill_(float("nan"))

    monkeypatch.setattr(kernels, "_logits_buffer", buffer)


def _ratio(name, got, want, limit):
    """Worst ``|got - want| / limit`` over ``want``'s finite entries (every one of them written: none NaN in ``got``),
    asserted ``<= 1``, kept in :data:`RATIOS` and printed."""
    win = torch.isfinite(want)
    assert win.any() and torch.isfinite(got[win]).all(), f"{name}: an in-window logit was not written"
    r = eb.indexer_error_ratio(got, want, limit, win)
    RATIOS[name] = max(RATIOS.get(name, 0.0), r)
    print(f"\n{name}: largest error/limit {r:.4f} over {int(win.sum())} logits")
    assert r <= 1.0, (name, r)
    return r


def _kw(fn, **kw):
    """``kw`` less what this vLLM line's DeepGEMM signature lacks (0.33 has no ``logits_dtype``)."""
    params = inspect.signature(fn).parameters
    return {k: v for k, v in kw.items() if k in params}


@pytest.mark.interpreter
def test_prefill_pool_logits_are_deepgemms(vi, flash, poisoned):
    """A prefill chunk of two requests (41 and 1078 tokens, pools of 16: 2 + 67 complete pools gathered), query rows
    at the positions vLLM scores (rows whose token completes no pool see none), called as ``sparse_attn_indexer_kpool``
    calls ``fp8_fp4_mqa_logits`` on SM89: the windowed layout (row ``i``'s pool ``ks[i] + j`` in column ``j``)."""
    from vllm.v1.attention.ops.rocm_aiter_mla_sparse import fp8_mqa_logits_torch

    kpool, cfg = flash
    g = torch.Generator().manual_seed(51)
    kp, H = cfg.index_kpool, cfg.index_n_heads
    pools = [41 // kp, 1078 // kp]
    k, k_scale, _ = _pool_keys(sum(pools), g)
    pos = torch.tensor([0, 15, 16, 40, 0, 14, 200, 511, 512, 1060, 1072, 1077])        # each row's token position
    req = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    ks = torch.tensor([0, pools[0]], dtype=torch.int32)[req]
    ke = (ks + (pos + 1) // kp).to(torch.int32)
    M = pos.numel()
    q, w = _queries((M, H), g), torch.randn(M, H, generator=g) * 0.05
    width = int((ke - ks).max())
    with on_gpu((8, 9)):
        assert vi.install_indexer_hook() is True
        calls = vi.indexer_calls()["triton"]
        fn = kpool.fp8_fp4_mqa_logits
        got = fn((q, None), (k, k_scale), w, ks, ke, width, **_kw(fn, logits_dtype=torch.float32))
        assert vi.indexer_calls()["triton"] == calls + 1
    assert got.shape == (M, width) and got.dtype == torch.float32
    cols = ks.long()[:, None] + torch.arange(width)[None, :]
    inside = cols < ke.long()[:, None]
    assert int(inside.sum()) == int((ke - ks).sum()) and not inside[0].any()     # position 0: no pool yet

    def windowed(full):       # [M, N] at absolute columns -> the windowed layout, -inf past each window
        return torch.where(inside, full.gather(1, cols.clamp(max=full.shape[1] - 1)), float("-inf"))

    exact = windowed(ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke))                # float64, then fp32
    theirs = windowed(fp8_mqa_logits_torch(q, (k, k_scale[:, None]), w, ks, ke))
    magnitude = windowed(eb.indexer_magnitude_prefill(q, k, k_scale, w, ks, ke))
    ours_limit = eb.indexer_limit(magnitude, heads=H)
    assert torch.equal(torch.isfinite(exact), inside) and torch.equal(torch.isfinite(theirs), inside)
    _ratio("prefill vs float64", got, exact, ours_limit)
    _ratio("prefill vs vLLM fp8_mqa_logits_torch", got, theirs,
           ours_limit + eb.indexer_limit(magnitude, heads=H, arithmetic="bf16-scores"))


def _pool_cache(nb, num_states, kv_lens, g):
    """A pool index cache ``[nb, num_states, D + 4]`` holding each request's pools in the blocks its (shuffled) block
    table names, written as vLLM's layout (:func:`sparse_mla.kernels.reference.index_cache_write_ref`); the rest
    random bytes. Returns ``(cache, block_table int32 [B, max_blocks])``."""
    kv = torch.randint(0, 256, (nb, num_states, D + 4), generator=g, dtype=torch.uint8)
    kv.view(nb, -1)[:, num_states * D:] = 0           # unwritten scales: zero, not NaN bytes
    per = max(math.ceil(n / num_states) for n in kv_lens)
    bt = torch.randperm(nb, generator=g)[: len(kv_lens) * per].reshape(len(kv_lens), per).to(torch.int32)
    for b, n in enumerate(kv_lens):
        _, _, x = _pool_keys(n, g)
        slots = bt[b].long().repeat_interleave(num_states)[:n] * num_states + torch.arange(n) % num_states
        ref.index_cache_write_ref(kv, x, slots)
    return kv, bt


@pytest.mark.interpreter
@pytest.mark.parametrize("num_states, next_n", [(64, 1), (32, 2)])
def test_decode_pool_logits_are_deepgemms(vi, flash, poisoned, num_states, next_n):
    """Decode as ``sparse_attn_indexer_kpool`` calls ``fp8_fp4_paged_mqa_logits`` on SM89: the pool cache through
    vLLM's ``kv_cache_as_quant_view``, 32 or 64 pools per block (``Glm5NextIndexerBackend``'s block sizes over
    ``index_kpool``), pool-granular 2-D context lengths (MTP: the second token may complete one more pool), the
    builder's unfilled schedule buffer, ``max_model_len = max_pool_len``, ``indices=None``."""
    from vllm.models.glm5next.common.sparse_indexer import kv_cache_as_quant_view
    from vllm.v1.attention.ops.rocm_aiter_mla_sparse import fp8_paged_mqa_logits_torch

    kpool, cfg = flash
    g = torch.Generator().manual_seed(num_states + next_n)
    H, max_pool_len = cfg.index_n_heads, 160
    lens = [[37, 38], [64, 64], [1, 1], [150, 151]] if next_n == 2 else [[37], [64], [1], [151]]
    ctx = torch.tensor(lens, dtype=torch.int32)
    kv, bt = _pool_cache(20, num_states, ctx.max(-1).values.tolist(), g)
    B = ctx.shape[0]
    q, w = _queries((B, next_n, H), g), torch.randn(B * next_n, H, generator=g) * 0.05
    view = kv_cache_as_quant_view(kv, D, False)
    schedule = torch.empty(B + 1, 2, dtype=torch.int32)
    with on_gpu((8, 9)):
        assert vi.install_indexer_hook() is True
        fn = kpool.fp8_fp4_paged_mqa_logits
        got = fn((q, None), view, w, ctx, bt, schedule, max_model_len=max_pool_len,
                 **_kw(fn, logits_dtype=torch.float32, indices=None))
    assert got.shape == (B * next_n, max_pool_len) and got.dtype == torch.float32
    exact = ref.indexer_logits_paged_ref(q, kv, w, ctx, bt, max_pool_len)
    theirs = fp8_paged_mqa_logits_torch(q, view, w, ctx, bt, max_pool_len)
    window = torch.arange(max_pool_len)[None, :] < ctx.reshape(-1, 1)
    assert torch.equal(torch.isfinite(exact), window) and torch.equal(torch.isfinite(theirs), window)
    assert torch.isnan(got[~window]).all()            # nothing written past a row's pools (the poison is intact)
    limit = eb.indexer_limit(eb.indexer_magnitude_paged(q, kv, w, ctx, bt, max_pool_len), heads=H)
    _ratio("decode vs float64", got, exact, limit)
    _ratio("decode vs vLLM fp8_paged_mqa_logits_torch", got, theirs, 2 * limit)


@pytest.mark.interpreter
def test_vllms_pool_writer_lays_out_what_our_paged_kernel_reads(vi, flash, poisoned):
    """vLLM's own ``kpool_compress_and_write_cache`` (pools of 16 bf16 keys, softmax-gated, Hadamard-rotated,
    quantized) writes each pool's codes and scale where our paged kernel reads them
    (:func:`sparse_mla.kernels.indexer.split_index_cache`), a positive power-of-two scale; our logits over that cache
    agree with vLLM's paged reference. (Triton's interpreter converts bf16/fp8 wrongly in places: its codes are no
    numerical oracle here, only the bytes' places are compared, and both readers read the same bytes.)"""
    from vllm.models.glm5next.common.sparse_indexer import kv_cache_as_quant_view
    from vllm.models.glm5next.nvidia.ops import kpool_compress as kpool_ops
    from vllm.v1.attention.ops.rocm_aiter_mla_sparse import fp8_paged_mqa_logits_torch

    kpool, cfg = flash
    g = torch.Generator().manual_seed(3)
    kp, H, ns, nb = cfg.index_kpool, cfg.index_n_heads, 32, 4
    kv = torch.zeros(nb, ns, D + 4, dtype=torch.uint8)
    bt = torch.tensor([[2, 0]], dtype=torch.int32)
    n = 40                                              # pools 0..39 of one request: block 2, then block 0
    loc = bt[0].long().repeat_interleave(ns)[:n] * ns + torch.arange(n) % ns
    keys = torch.randn(n, kp, D, generator=g).to(torch.bfloat16)
    gate = torch.randn(n, kp, D, generator=g).to(torch.bfloat16)
    codes, scales = kpool_ops.kpool_compress_and_write_cache(
        kv, keys, gate, torch.randn(kp, D, generator=g), loc, kp, D, round_scale=True, return_compressed=True)
    flat_codes, flat_scales, bs = kernels.split_index_cache(kv, D)
    assert bs == ns
    blk, off = loc // ns, loc % ns
    for i in range(n):
        assert torch.equal(flat_codes[blk[i], off[i] * D:(off[i] + 1) * D], codes[i].view(torch.uint8)), i
        assert flat_scales[blk[i], ns * D // 4 + off[i]] == scales[i]
    assert (scales > 0).all() and torch.equal(torch.exp2(torch.log2(scales).round()), scales)
    ctx = torch.tensor([[n]], dtype=torch.int32)
    q, w = _queries((1, 1, H), g), torch.randn(1, H, generator=g) * 0.05
    view = kv_cache_as_quant_view(kv, D, False)
    with on_gpu((8, 9)):
        assert vi.install_indexer_hook() is True
        fn = kpool.fp8_fp4_paged_mqa_logits
        got = fn((q, None), view, w, ctx, bt, torch.empty(2, 2, dtype=torch.int32), max_model_len=64,
                 **_kw(fn, logits_dtype=torch.float32))
    theirs = fp8_paged_mqa_logits_torch(q, view, w, ctx, bt, 64)
    limit = eb.indexer_limit(eb.indexer_magnitude_paged(q, kv, w, ctx, bt, 64), heads=H)
    _ratio("vLLM-written pools vs vLLM fp8_paged_mqa_logits_torch", got, theirs, 2 * limit)
