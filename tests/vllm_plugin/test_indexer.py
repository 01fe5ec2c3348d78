"""``sparse_mla.vllm_plugin.indexer``: the Triton DSA indexer hooked into vLLM 0.26.0 on the CPU.

vLLM's CUDA modules are imported with the diagnosis probe's extension stubs (no driver here). Checked: the hook
patches modules imported before and after it, is idempotent and undoes completely; the adapters have DeepGEMM's
wrappers' signatures (``vllm/utils/deep_gemm.py``) and compute through our kernels (interpreter, CPU tensors) what the
float64 references give; ``wanted()`` follows vLLM's ``support_deep_gemm`` rule and the switch; ``indexer_reasons``;
``register()`` installs it.
"""
import importlib
import inspect
import sys

import pytest
import torch

from sparse_mla.kernels import error_bounds as eb
from sparse_mla.kernels import reference as ref

pytestmark = pytest.mark.every_line

SAI = "vllm.model_executor.layers.sparse_attn_indexer"
BUILDER = "vllm.v1.attention.backends.mla.indexer"
MODEL = "vllm.model_executor.models.deepseek_v2"
D = 128


@pytest.fixture(scope="module")
def vllm_cuda():
    """vLLM's CUDA-side modules importable on this machine (the probe's stubs for the driver-bound extensions)."""
    from sparse_mla.diagnose import probe

    probe.load_vllm_extensions()
    import vllm.platforms.cuda  # noqa: F401
    return importlib.import_module(BUILDER)


@pytest.fixture
def vi(vllm_cuda, monkeypatch):
    """The plugin's indexer module with the switch on, uninstalled again after the test."""
    from sparse_mla.vllm_plugin import indexer

    monkeypatch.setenv(indexer.FORCE_ENV, "1")
    indexer.uninstall_indexer_hook()
    yield indexer
    indexer.uninstall_indexer_hook()


def test_install_patches_loaded_and_later_modules_and_undoes(vi):
    import vllm.utils.deep_gemm as dg

    builder = importlib.import_module(BUILDER)              # loaded before the hook
    stock_builder_flag = builder.has_deep_gemm
    assert vi.install_indexer_hook() is True
    assert vi.install_indexer_hook() is True                # idempotent
    assert sys.meta_path.count(vi._FINDER) == 1
    assert builder.has_deep_gemm is vi.no_deep_gemm and builder.has_deep_gemm() is False
    sai = importlib.import_module(SAI)                      # loaded before or after: patched either way
    model = importlib.import_module(MODEL)
    assert sai.fp8_fp4_mqa_logits is vi.fp8_fp4_mqa_logits
    assert sai.fp8_fp4_paged_mqa_logits is vi.fp8_fp4_paged_mqa_logits
    assert sai.has_deep_gemm() is True
    # the q quantization and packing are replaced where the GPU has no e4m3 conversion (or no GPU: this CPU machine)
    from sparse_mla.kernels.fp8 import has_fp8_conversion

    cap = vi.vllm_capability()
    soft = cap is None or not has_fp8_conversion(cap)
    ours = {"q_rope_quant": "sparse_mla.vllm_plugin.indexer.fused_indexer_q_rope_quant",
            "pack_seq": "sparse_mla.vllm_plugin.indexer.pack_seq_triton",      # the hook's own, the line adapter's:
            **{role: f"{f.__module__}.{f.__qualname__}" for role, f in vi.LINE.FP8_STORE_STAND_INS.items()}}
    soft_hooks = {f"{m}.{a}": ours[role] for (m, a), role in vi.LINE.FP8_STORE_HOOKS.items()}   # fp8-store sites
    assert f"{SAI}.pack_seq_triton" in soft_hooks                              # on every line
    assert (model.fused_indexer_q_rope_quant is vi.fused_indexer_q_rope_quant) == (
        soft and f"{MODEL}.fused_indexer_q_rope_quant" in soft_hooks)
    assert inspect.getsource(model.Indexer.forward)                            # the wrapped loader still serves source
    assert vi.hooked() == {
        f"{SAI}.fp8_fp4_mqa_logits": "sparse_mla.vllm_plugin.indexer.fp8_fp4_mqa_logits",
        f"{SAI}.fp8_fp4_paged_mqa_logits": "sparse_mla.vllm_plugin.indexer.fp8_fp4_paged_mqa_logits",
        f"{SAI}.has_deep_gemm": "sparse_mla.vllm_plugin.indexer.deep_gemm_stand_in",
        **(soft_hooks if soft else {}),
        f"{BUILDER}.has_deep_gemm": "sparse_mla.vllm_plugin.indexer.no_deep_gemm",
        **kpool_hooks(vi)}
    vi.uninstall_indexer_hook()
    assert vi._FINDER not in sys.meta_path and vi.hooked() == {}
    assert builder.has_deep_gemm is stock_builder_flag
    assert sai.fp8_fp4_mqa_logits is dg.fp8_fp4_mqa_logits and sai.fp8_fp4_paged_mqa_logits is dg.fp8_fp4_paged_mqa_logits
    assert sai.has_deep_gemm is dg.has_deep_gemm
    assert model.fused_indexer_q_rope_quant is sai.fused_indexer_q_rope_quant
    from vllm.v1.attention.ops.common import pack_seq_triton
    assert sai.pack_seq_triton is pack_seq_triton


def kpool_hooks(vi) -> dict[str, str]:
    """What the hook rebinds in GLM-5.3-Flash's KPool indexer module (vLLM 0.33/0.34; none on 0.26):
    ``tests/vllm_plugin/test_indexer_kpool.py`` checks them there."""
    if vi.KPOOL_MOD is None:
        return {}
    ours = "sparse_mla.vllm_plugin.indexer"
    return {f"{vi.KPOOL_MOD}.fp8_fp4_mqa_logits": f"{ours}.fp8_fp4_mqa_logits",
            f"{vi.KPOOL_MOD}.fp8_fp4_paged_mqa_logits": f"{ours}.fp8_fp4_paged_mqa_logits",
            f"{vi.KPOOL_MOD}.has_deep_gemm": f"{ours}.deep_gemm_stand_in"}


def test_a_diagnosis_probe_takes_the_hook_out_and_puts_it_back(vi):
    """The probe meets the hook only through its install/uninstall: stock vLLM inside the probe, ours again after,
    and an uninstall after that still finds vLLM's originals."""
    import vllm.utils.deep_gemm as dg

    from sparse_mla.diagnose import probe

    sai = importlib.import_module(SAI)
    assert vi.install_indexer_hook() is True
    before = vi.hooked()
    with probe.stock_selection():
        assert sai.fp8_fp4_mqa_logits is dg.fp8_fp4_mqa_logits and vi.hooked() == {}
    assert sai.fp8_fp4_mqa_logits is vi.fp8_fp4_mqa_logits and vi.hooked() == before
    vi.uninstall_indexer_hook()
    assert sai.fp8_fp4_mqa_logits is dg.fp8_fp4_mqa_logits and sai.has_deep_gemm is dg.has_deep_gemm


def test_modules_imported_later_are_patched_on_import(vi, tmp_path, monkeypatch):
    """The post-import hook on a module first imported after installation (a stand-in file module)."""
    (tmp_path / "late_module_for_hook.py").write_text("def f():\n    return 'stock'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    vi.install_indexer_hook()
    ours = lambda: "ours"  # noqa: E731
    vi._PLAN[("late_module_for_hook", "f")] = ours
    mod = importlib.import_module("late_module_for_hook")
    try:
        assert mod.f is ours and type(mod.__loader__).__name__ == "_PatchingLoader"
        assert mod.__loader__.get_filename("late_module_for_hook").endswith("late_module_for_hook.py")
        importlib.reload(mod)
        assert mod.f is ours                                  # re-applied after a reload
        vi.uninstall_indexer_hook()
        assert mod.f() == "stock"
    finally:
        sys.modules.pop("late_module_for_hook", None)


def test_not_installed_without_the_switch_off_cuda(vi, monkeypatch):
    monkeypatch.delenv(vi.FORCE_ENV)
    assert vi.wanted() is False                             # this machine's vLLM platform is not CUDA
    assert vi.install_indexer_hook() is False and vi.hooked() == {}
    monkeypatch.setenv(vi.FORCE_ENV, "0")
    assert vi.install_indexer_hook() is False


def test_adapters_have_deepgemm_signatures(vi):
    import vllm.utils.deep_gemm as dg

    sai = importlib.import_module(SAI)
    for name in ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits"):
        assert inspect.signature(getattr(vi, name)) == inspect.signature(getattr(dg, name)), name
    assert inspect.signature(vi.fused_indexer_q_rope_quant) == inspect.signature(sai.fused_indexer_q_rope_quant)
    from vllm.v1.attention.ops.common import pack_seq_triton
    assert inspect.signature(vi.pack_seq_triton).parameters.keys() == inspect.signature(pack_seq_triton).parameters.keys()


def _fp8(*shape, g):
    return (torch.randn(*shape, generator=g) * 2).to(torch.float8_e4m3fn)


def _line(vi) -> str:
    """The vLLM line whose adapter the hook uses (``0.26``, ``0.33``, ``0.34``)."""
    return vi.LINE.__name__.rsplit(".v", 1)[-1].replace("_", ".")


def _within(logits, want, magnitude, heads):
    """In-window logits within the derived limit of the fp32 kernels under the interpreter (kernels.error_bounds)."""
    ratio = eb.indexer_error_ratio(logits, want, eb.indexer_limit(magnitude, heads=heads))
    assert ratio <= 1, ratio


@pytest.mark.interpreter
def test_adapters_compute_through_our_kernels(vi):
    """vLLM's call sites look the functions up in ``sparse_attn_indexer``'s globals; called there with vLLM's
    arguments (tuples, 2-D context lengths, the 4-D cache view) they give the references' logits."""
    vi.install_indexer_hook()
    sai = importlib.import_module(SAI)
    calls = vi.indexer_calls()["triton"]
    g = torch.Generator().manual_seed(0)
    M, H, N = 5, 32, 70
    q, k = _fp8(M, H, D, g=g), _fp8(N, D, g=g)
    k_scale, w = torch.rand(N, generator=g) + 0.5, torch.randn(M, H, generator=g)
    ks = torch.tensor([0, 3, 10, 69, 4], dtype=torch.int32)
    ke = torch.tensor([70, 3, 50, 70, 5], dtype=torch.int32)
    want = ref.indexer_logits_prefill_ref(q, k, k_scale, w, ks, ke)
    magnitude = eb.indexer_magnitude_prefill(q, k, k_scale, w, ks, ke)
    if _line(vi) == "0.26":          # logits at absolute key columns, -inf outside each window
        logits = sai.fp8_fp4_mqa_logits((q, None), (k, k_scale), w, ks, ke, clean_logits=True)
        assert torch.equal(torch.isneginf(logits), torch.isneginf(want))
        _within(logits, want, magnitude, H)
    else:                            # 0.33: compressed, row i holds keys [ks[i], ke[i]) from column 0, tail unread
        width = int((ke - ks).max())
        logits = sai.fp8_fp4_mqa_logits((q, None), (k, k_scale), w, ks, ke, width)
        cols = (ks.long()[:, None] + torch.arange(width)[None]).clamp(max=N - 1)
        inside = torch.arange(width)[None] < (ke - ks)[:, None]
        assert logits.shape == (M, width) and not torch.isneginf(logits[inside]).any()
        _within(torch.where(inside, logits, 0.0), torch.where(inside, want.gather(1, cols), 0.0),
                magnitude.gather(1, cols), H)

    B, next_n, bs, nb, max_len = 2, 2, 16, 8, 64
    kv = torch.zeros(nb, bs, D + 4, dtype=torch.uint8)
    ref.index_cache_write_ref(kv, torch.randn(nb * bs, D, generator=g), torch.arange(nb * bs))
    qd, wd = _fp8(B, next_n, H, D, g=g), torch.randn(B * next_n, H, generator=g)
    ctx = torch.tensor([[20, 21], [47, 48]], dtype=torch.int32)
    bt = torch.tensor([[3, 5, 0, 1], [7, 6, 2, 4]], dtype=torch.int32)
    schedule = torch.empty(9, 2, dtype=torch.int32)               # DeepGEMM's schedule: not read
    clean = {"clean_logits": False} if _line(vi) == "0.26" else {}         # 0.33 has no clean_logits
    logits = sai.fp8_fp4_paged_mqa_logits((qd, None), kv.unsqueeze(-2), wd, ctx, bt, schedule,
                                          max_model_len=max_len, **clean)
    want = ref.indexer_logits_paged_ref(qd, kv, wd, ctx, bt, max_len)
    assert logits.shape == (B * next_n, max_len)
    _within(logits, want, eb.indexer_magnitude_paged(qd, kv, wd, ctx, bt, max_len), H)
    half = 0
    if _line(vi) == "0.34":          # 0.34 asks for the logits' dtype (bf16 on SM100): float32 computed, then cast
        half = sai.fp8_fp4_paged_mqa_logits((qd, None), kv.unsqueeze(-2), wd, ctx, bt, schedule, max_model_len=max_len,
                                            logits_dtype=torch.bfloat16)
        assert half.dtype == torch.bfloat16 and torch.equal(half, logits.to(torch.bfloat16))
        half = 1
    with pytest.raises(NotImplementedError, match="fp8 indexer cache only"):
        sai.fp8_fp4_mqa_logits((q, torch.zeros(M, H, dtype=torch.int32)), (k, k_scale), w, ks, ke, False)
    assert vi.indexer_calls()["triton"] == calls + 2 + half    # the refused call is not counted


def test_deepgemm_calls_are_counted_where_asked_and_the_triton_hook_replaces_the_counter(vi, monkeypatch):
    sai = importlib.import_module(SAI)
    seen = []

    def stand_in(*args, **kwargs):                             # in place of DeepGEMM, which has no CPU kernels
        seen.append((args, kwargs))
        return "logits"

    monkeypatch.setattr(sai, "fp8_fp4_mqa_logits", stand_in)
    monkeypatch.setenv(vi.FORCE_ENV, "0")
    assert vi.install_indexer_hook() is False and sai.fp8_fp4_mqa_logits is stand_in   # not asked: nothing changes
    monkeypatch.setenv(vi.COUNT_ENV, "1")
    before = vi.indexer_calls()
    assert vi.install_indexer_hook() is False and vi.hooked() == {}   # counters are not the Triton indexer
    assert sai.fp8_fp4_mqa_logits((1, None), 2, clean_logits=True) == "logits"
    assert seen == [(((1, None), 2), {"clean_logits": True})]
    assert vi.indexer_calls() == {**before, "deepgemm": before["deepgemm"] + 1}
    monkeypatch.setenv(vi.FORCE_ENV, "1")
    assert vi.install_indexer_hook() is True
    assert sai.fp8_fp4_mqa_logits is vi.fp8_fp4_mqa_logits and vi.fp8_fp4_mqa_logits.__wrapped__ is stand_in
    vi.uninstall_indexer_hook()
    assert sai.fp8_fp4_mqa_logits is stand_in


@pytest.mark.interpreter
def test_q_quant_and_pack_replacements(vi):
    """The replacements, called where vLLM looks them up (the q quant in the model code on vLLM 0.26, whose CUDA
    path it is; the module's own function on 0.33, where the model code no longer calls it)."""
    vi.install_indexer_hook()
    model = importlib.import_module(MODEL)
    sai = importlib.import_module(SAI)
    g = torch.Generator().manual_seed(1)
    T, H = 3, 4
    q = torch.randn(T, H, D, generator=g).to(torch.bfloat16)
    cos_sin, pos, w = torch.randn(16, 64, generator=g), torch.tensor([0, 7, 15]), torch.randn(T, H, generator=g)
    quant = model.fused_indexer_q_rope_quant if _line(vi) == "0.26" else vi.fused_indexer_q_rope_quant
    got = quant(pos, q, cos_sin, w, D ** -0.5, H ** -0.5, False)
    want = ref.indexer_q_rope_quant_ref(pos, q, cos_sin, w, D ** -0.5, H ** -0.5, False)
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(got[1], want[1])
    # MTP with uneven decode lengths: vLLM packs fp8 q per request (the stock kernel would store an fp32 pad in fp8)
    x = _fp8(5, 2, 64, g=g)
    lengths = torch.tensor([2, 1, 2], dtype=torch.int32)
    packed = sai.pack_seq_triton(x, lengths)
    assert packed.dtype == torch.float8_e4m3fn and packed.shape == (3, 2, 2, 64)
    b = packed.view(torch.uint8)
    xb = x.view(torch.uint8)
    assert torch.equal(b[0], xb[0:2]) and torch.equal(b[1, 0], xb[2]) and torch.equal(b[2], xb[3:5])
    assert (b[1, 1] == 0).all()


@pytest.mark.parametrize("cap, expect", [((7, 5), False), ((8, 0), True), ((8, 6), True), ((8, 9), True),
                                         ((9, 0), False), ((10, 0), False), ((12, 0), False), ("8.6", True)])
def test_wanted_follows_vllms_deep_gemm_rule(vi, monkeypatch, cap, expect):
    monkeypatch.delenv(vi.FORCE_ENV)
    assert vi.wanted(cap) is expect
    monkeypatch.setenv(vi.FORCE_ENV, "1")
    assert vi.wanted(cap) is (cap != (7, 5))                 # forced on an H200 too; never below SM80
    monkeypatch.setenv(vi.FORCE_ENV, "0")
    assert vi.wanted(cap) is False


def test_indexer_reasons(vi):
    assert vi.indexer_reasons(32, 128, (8, 0)) == []            # GLM-5
    assert vi.indexer_reasons(64, 128, "8.6") == []             # DeepSeek-V3.2
    assert vi.indexer_reasons(64, 128, None) == []
    assert vi.indexer_reasons(32, 128, (7, 5)) == ["compute capability not supported (the Triton indexer needs SM80+)"]
    assert vi.indexer_reasons(32, 64, (9, 0)) == ["index_head_dim 64 not supported (128 only)"]
    assert vi.indexer_reasons(256, 128, (12, 0)) == ["index_n_heads 256 not supported (1 to 128)"]
    assert len(vi.indexer_reasons(0, 96, (7, 0))) == 3


def test_register_installs_the_hook(vi):
    import vllm.platforms.cuda as cuda_mod
    from vllm.v1.attention.backends import registry

    from sparse_mla.vllm_plugin import register

    overrides = dict(registry._ATTN_OVERRIDES)
    method = cuda_mod.CudaPlatformBase.__dict__["get_valid_backends"]
    try:
        register()
        assert vi.INDEXER_NAME == "TRITON_DSA_INDEXER"
        assert f"{SAI}.fp8_fp4_paged_mqa_logits" in vi.hooked()
    finally:
        registry._ATTN_OVERRIDES.clear()
        registry._ATTN_OVERRIDES.update(overrides)
        cuda_mod.CudaPlatformBase.get_valid_backends = method


# ---- vLLM 0.33: fused_q and fused_norm_rope stand-ins (the fp8 stores SM80/86 cannot compile) ---------------------
#
# Triton 3.8's interpreter converts fp32 -> fp8e4nv wrongly in two ways seen on 2026-12-05 on vLLM's own kernels:
# where rounding carries into the next binade (127.42 gives 64, not 128: the mantissa wraps, the exponent stays) and
# for subnormals (-3.72 * 2**-9 gives -3, not -4 * 2**-9). vLLM's codes under the interpreter are no oracle: the
# stand-ins' codes are held to torch's conversion of the same float32 values (``kernels.reference``), the rest of
# their outputs to vLLM's.

V033 = "vllm.models.deepseek_v32.common.kernels"


@pytest.fixture
def stand_ins(vi):
    if _line(vi) == "0.26":
        pytest.skip("vLLM 0.33's deepseek_v32 path only (0.33, 0.34)")
    return vi.LINE, importlib.import_module(V033)


def test_stand_ins_have_vllms_signatures(stand_ins):
    line, k = stand_ins
    for name in ("fused_q", "fused_norm_rope"):
        assert inspect.signature(line.FP8_STORE_STAND_INS[name]) == inspect.signature(getattr(k, name)), name
    assert {a for (_, a) in line.FP8_STORE_HOOKS} >= {"fused_q", "fused_norm_rope"}


@pytest.mark.parametrize("interleave", [True, False])
def test_fused_q_stand_in_against_vllms(stand_ins, interleave):
    line, k = stand_ins
    g = torch.Generator().manual_seed(11 + interleave)
    T, H, HI = 4, 6, 5
    pos = torch.randint(0, 20, (T,), generator=g)
    q_pe, cs = torch.randn(T, H, 64, generator=g), torch.randn(20, 64, generator=g)
    iq, ics, w = torch.randn(T, HI, 128, generator=g) * 5, torch.randn(20, 64, generator=g), torch.randn(T, HI, generator=g)
    ql, qs = torch.randn(T, H, 512, generator=g), torch.ones(1)
    args = (pos, q_pe, cs, iq, ics, ql, qs, w, 128 ** -0.5, HI ** -0.5)
    kw = dict(has_indexer=True, index_rope_interleave=interleave, quantize_mqa=False)
    got, want = line.fused_q(*args, **kw), k.fused_q(*args, **kw)
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])     # weights, roped q_pe
    codes = got[0].view(torch.uint8)
    assert torch.equal(codes, ref.fused_q_ref(pos, q_pe, cs, iq, ics, w, 128 ** -0.5, HI ** -0.5, interleave)[0]
                       .view(torch.uint8))
    # vLLM's own kernel is the oracle of every code but those its interpreted conversion gets wrong (above): a code
    # with mantissa 0 (where a carry reaches the next binade) or exponent 0 (subnormal)
    trusted = ((codes & 0x07) != 0) & ((codes & 0x78) != 0)
    assert trusted.float().mean() > 0.7, trusted.float().mean()
    assert torch.equal(codes[trusted], want[0].view(torch.uint8)[trusted])
    with pytest.raises(NotImplementedError, match="quantize_mqa"):
        line.fused_q(*args, has_indexer=True, index_rope_interleave=interleave, quantize_mqa=True)


def _norm_rope_inputs(g, T=6, block_size=16, nb=2):
    f = torch.float32
    x = dict(positions=torch.randint(0, 30, (T,), generator=g), q_c=torch.randn(T, 96, generator=g),
             q_rms_norm_w=torch.randn(96, generator=g), q_rms_eps=1e-6, kv_c=torch.randn(T, 512, generator=g),
             kv_rms_norm_w=torch.randn(512, generator=g), kv_rms_eps=1e-6, k_pe=torch.randn(T, 64, generator=g),
             k_rope_cos_sin_cache=torch.randn(30, 64, generator=g), index_k=torch.randn(T, 128, generator=g) * 3,
             index_k_layer_norm_w=torch.randn(128, generator=g), index_k_layer_norm_bias=torch.randn(128, generator=g),
             index_k_layer_norm_eps=1e-6, index_k_rope_cos_sin_cache=torch.randn(30, 64, generator=g),
             topk_indices_buffer=torch.randint(0, 9, (T, 256), generator=g, dtype=torch.int32))
    slots = torch.randperm(nb * block_size, generator=g)[:T]
    slots[1] = -1
    caches = dict(indexer_k_cache=torch.randint(0, 256, (nb, block_size, 132), generator=g, dtype=torch.uint8),
                  mla_kv_cache=torch.randn(nb, block_size, 576, generator=g, dtype=f))
    return x, slots, caches


@pytest.mark.parametrize("interleave", [True, False])
def test_fused_norm_rope_stand_in_against_vllms(stand_ins, interleave):
    """Same q_c, MLA cache and top-k fill as vLLM's; the indexer cache holds the key rows vLLM's own kernel computes
    (its fp32 ``index_k_out``), quantized as torch does, with vLLM's scales; poisoned caches, the padding token's slot
    and every other row left alone."""
    line, k = stand_ins
    x, slots, caches = _norm_rope_inputs(torch.Generator().manual_seed(5 + interleave))
    runs = []
    for fn in (line.fused_norm_rope, k.fused_norm_rope):
        c = {n: t.clone() for n, t in caches.items()}
        buf = x["topk_indices_buffer"].clone()
        q = fn(**{**x, "topk_indices_buffer": buf}, slot_mapping=slots, indexer_slot_mapping=slots,
               mla_kv_cache_dtype="auto", has_indexer=True, index_rope_interleave=interleave, **c)
        runs.append((q, c, buf))
    (q1, c1, b1), (q2, c2, b2) = runs
    assert torch.equal(q1, q2) and torch.equal(c1["mla_kv_cache"], c2["mla_kv_cache"]) and torch.equal(b1, b2)
    assert (b1 == -1).all()
    rows = torch.empty(x["index_k"].shape)
    k.fused_norm_rope(**x, slot_mapping=slots, mla_kv_cache=caches["mla_kv_cache"].clone(), index_k_out=rows,
                      has_indexer=True, index_rope_interleave=interleave)
    want = ref.index_cache_write_ref(caches["indexer_k_cache"].clone(), rows, slots)
    assert torch.equal(c1["indexer_k_cache"], want)
    scales = slice(16 * 128, None)
    assert torch.equal(c1["indexer_k_cache"].view(2, -1)[:, scales], c2["indexer_k_cache"].view(2, -1)[:, scales])


def test_fused_norm_rope_stand_in_refuses_what_it_does_not_write(stand_ins):
    line, _ = stand_ins
    x, slots, caches = _norm_rope_inputs(torch.Generator().manual_seed(2))
    with pytest.raises(NotImplementedError, match="'fp8_ds_mla'"):
        line.fused_norm_rope(**x, slot_mapping=slots, mla_kv_cache_dtype="fp8_ds_mla", **caches)
    with pytest.raises(NotImplementedError, match="unshuffled"):
        line.fused_norm_rope(**x, slot_mapping=slots, indexer_cache_shuffled=True, **caches)


NORM_ROPE_BUILD = """
import json, triton
import sparse_mla
from sparse_mla.diagnose.probe import load_vllm_extensions
load_vllm_extensions()
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from vllm.models.deepseek_v32.common import kernels
K = kernels._fused_norm_rope_kernel
ptrs = {n: "*bf16" for n in K.arg_names if n.endswith("_ptr")}
ptrs.update(pos_ptr="*i64", slot_mapping_ptr="*i64", indexer_slot_mapping_ptr="*i64", topk_indices_ptr="*i32",
            index_k_out_ptr="*fp32", index_k_layer_norm_w_ptr="*bf16", index_k_layer_norm_bias_ptr="*bf16",
            mla_cache_scale_ptr="*fp32", mla_cache_ds_scale_ptr="*fp32")
floats = {"q_rms_eps", "kv_rms_eps", "index_k_layer_norm_eps"}
# as the stand-in has vLLM's fused_norm_rope launch it for GLM-5 with a bf16 MLA cache: no indexer cache (None),
# an fp32 index_k_out, no PCP outputs
consts = dict(Q_DIM=2048, Q_BLOCK_SIZE=2048, KV_DIM=512, KPE_HALF_ROT_DIM=32, INDEX_K_DIM=128, INDEX_K_BLOCK_SIZE=128,
              INDEX_K_HALF_ROT_DIM=32, indexer_cache_ptr=None, indexer_cache_scale_ptr=None,
              INDEXER_CACHE_SHUFFLE=False, INDEXER_CACHE_BLOCK_TILE=16, INDEXER_CACHE_HEAD_TILE=16,
              INDEXER_CACHE_MX_SCALE=False, MLA_CACHE_BLOCK_SIZE=64, MLA_CACHE_FP8=False, SKIP_MLA_SCALE=False,
              MLA_CACHE_DS_MLA=False, MLA_CACHE_NVFP4=False, MLA_NUM_TILES=1, MLA_TILE_DIM=1, TOPK=2048,
              TOPK_BLOCK_SIZE=1024, HAS_INDEXER=True, INDEX_ROPE_INTERLEAVE=True, USE_PDL=False, FP8_MAX=448.0,
              USE_FNUZ=False, kv_out_ptr=None, kpe_out_ptr=None)
sig = {n: "constexpr" if n in consts else ptrs.get(n, "fp32" if n in floats else "i32") for n in K.arg_names}
out = {}
for cap in (80, 86):
    src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index(n),): v for n, v in consts.items()})
    c = triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"arch": f"sm{cap}"})
    out[cap] = "e4m3" in c.asm["ptx"]
print(json.dumps(out))
"""


def test_vllms_norm_rope_kernel_builds_for_sm80_as_the_stand_in_launches_it(stand_ins):
    """No indexer cache and a bf16 MLA cache: vLLM 0.33's ``_fused_norm_rope_kernel`` then generates no fp8 store
    (its indexer-cache write is behind a constexpr ``None`` check), so Triton builds it for sm_80/86."""
    import json
    import os
    import subprocess

    r = subprocess.run([sys.executable, "-c", NORM_ROPE_BUILD], env=dict(os.environ, TRITON_INTERPRET="0"),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"80": False, "86": False}
