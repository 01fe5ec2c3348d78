"""TRITON_MLA_SPARSE's vLLM glue on the CPU: index conversion (vLLM's Triton kernel under the interpreter) against
a plain PyTorch version, and the Impl's forward_mqa on a synthetic mixed batch against the float64 reference -- its
``out`` and the kernel's ``lse``, within the limits of the variant the planner ran, and a planted fault that the check
catches (these run in the GPU pass too)."""
from __future__ import annotations

import functools

import pytest
import torch

from backend_cases import GOOD, generic_backend, make_impl, mixed_batch
from sparse_mla.kernels.error_bounds import check_attention
from sparse_mla.kernels.reference import req_local_to_global_slots_ref

pytestmark = pytest.mark.every_line


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("block_size", [16, 64])
def test_index_conversion_matches_plain_pytorch(block_size):
    """vLLM 0.26: the impl converts the top-k itself (on 0.33 vLLM's base class does, and the forward tests below
    check the result)."""
    from sparse_mla.vllm_lines import current_line

    if current_line() != "0.26":
        pytest.skip("vLLM 0.33 converts the top-k in its own SparseMLACommonImpl.forward_mqa")
    from sparse_mla.vllm_plugin.lines.v0_26 import convert_to_global_slots

    b = mixed_batch(topk=128, block_size=block_size, seed=block_size, device=_device())
    # a position past the request's block table must become -1 too
    b.topk_indices[0, 0] = b.block_table.shape[1] * block_size + 3
    got = convert_to_global_slots(b.req_id_per_token, b.block_table, b.topk_indices, block_size)
    want = req_local_to_global_slots_ref(b.req_id_per_token, b.block_table, b.topk_indices, block_size)
    assert got.dtype == torch.int32
    assert torch.equal(got.cpu(), want.cpu())
    assert got[0, 0].item() == -1


def _metadata(b):
    from sparse_mla.vllm_plugin.backend import TritonMLASparseMetadata

    return TritonMLASparseMetadata(
        num_reqs=len(b.seqs), max_query_len=max(q for _, q in b.seqs), max_seq_len=max(s for s, _ in b.seqs),
        num_actual_tokens=b.T, query_start_loc=None, slot_mapping=None, block_table=b.block_table,
        req_id_per_token=b.req_id_per_token, seq_lens=None, block_size=b.block_size, topk_tokens=b.topk,
        num_decodes=1, num_prefills=2, num_decode_tokens=1)


def _forward_mqa(impl, b, cache, monkeypatch, drop: bool = False, poison: bool = False):
    """``impl.forward_mqa`` on batch ``b`` (vLLM 0.33: vLLM's own, which calls ours), the kernel launch it makes
    recorded: ``(out, lse, cfg)`` -- ``lse`` as the kernel wrote it (vLLM's sparse MLA path returns ``(out, None)``;
    the kernel's lse is what a split merge would use) and the launch configuration the planner chose. ``drop``: every
    other valid slot of the first (decode) token set to -1 on its way to the kernel (a planted fault); ``poison``: the
    impl's ``out`` and ``lse`` filled with NaN before the kernel runs (an element it leaves unwritten shows)."""
    import sparse_mla.kernels as kernels

    real, seen = kernels.launch, {}

    def launch(q_nope, q_pe, kv, slots, scale, out, lse, cfg, **kw):
        seen.update(lse=lse, cfg=cfg)
        if poison:
            out.fill_(float("nan"))
            lse.fill_(float("nan"))
        if drop:
            slots = slots.clone()
            slots[0, (slots[0] >= 0).nonzero()[::2, 0]] = -1
        return real(q_nope, q_pe, kv, slots, scale, out, lse, cfg, **kw)

    monkeypatch.setattr(kernels, "launch", launch)
    if not torch.cuda.is_available() and getattr(impl, "index_group", None) is not None:
        # vLLM 0.33 converts a group's top-k once, on a CUDA side stream; on the CPU, the per-layer conversion (the
        # same vLLM kernel, the path of backends that convert per layer) is taken
        monkeypatch.setattr(impl, "group_conversion_decode_only", True, raising=False)
    out, none = impl.forward_mqa((b.q_nope, b.q_pe), cache, _metadata(b), layer=None)
    assert none is None and out.shape == (b.T, b.H, 512) and out.dtype == b.q_nope.dtype and out.is_contiguous()
    return out, seen["lse"], seen["cfg"]


def _check(b, cache, out, lse, cfg, **kw):
    """``(out, lse)`` against the float64 reference within the limits of the variant that ran (``cfg``)."""
    slots = req_local_to_global_slots_ref(b.req_id_per_token.cpu(), b.block_table.cpu(), b.topk_indices.cpu(),
                                          b.block_size).to(out.device)
    return check_attention(out, lse, b.q_nope, b.q_pe, cache, slots, b.sm_scale, fp8_scales=cfg.fp8_scales
                           if cfg.kv_cache_dtype == "fp8_ds_mla" else None, kv_cache_dtype=cfg.kv_cache_dtype, **kw)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("H,dtype", [(8, torch.float32), (3, torch.float32), (16, torch.float16)])
def test_forward_mqa_mixed_batch(H, dtype, seed, monkeypatch):
    dev = _device()
    if dev == "cuda":
        dtype = torch.bfloat16
    b = mixed_batch(H=H, topk=128, dtype=dtype, device=dev, seed=H + 50 * seed)
    buf = torch.full((b.T + 7, b.topk), 12345, dtype=torch.int32, device=dev)   # rows past T must be ignored
    buf[: b.T] = b.topk_indices
    out, lse, cfg = _forward_mqa(make_impl(H, buf), b, b.kv_cache, monkeypatch)
    c = _check(b, b.kv_cache, out, lse, cfg)
    assert c.ok, c.explain()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("H,dtype", [(8, torch.float32), (16, torch.float16)])
def test_forward_mqa_nope_head_512(H, dtype, seed, monkeypatch):
    """GLM-5.3-Flash's NoPE MLA layer (issue 51 item 1): head 512, ``q_pe`` ``[T, H, 0]``, a 512-wide bf16/fp16 cache,
    through vLLM's own entry point, against the float64 reference; the backend declares head 512 and takes it only
    as a NoPE latent with a bf16 cache."""
    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    dev = _device()
    if dev == "cuda":
        dtype = torch.bfloat16
    b = mixed_batch(H=H, topk=128, dtype=dtype, device=dev, seed=H + 70 * seed, dr=0)
    assert b.q_pe.shape == (b.T, H, 0) and b.kv_cache.shape[-1] == 512
    buf = torch.full((b.T + 7, b.topk), 12345, dtype=torch.int32, device=dev)
    buf[: b.T] = b.topk_indices
    out, lse, cfg = _forward_mqa(make_impl(H, buf, dr=0), b, b.kv_cache, monkeypatch)
    c = _check(b, b.kv_cache, out, lse, cfg)
    assert c.ok, c.explain()
    assert 512 in TritonMLASparseBackend.get_supported_head_sizes()


def test_nope_head_fp8_is_taken_where_vllm_has_its_rows():
    """The NoPE head's fp8 cache: accepted where vLLM sizes the rows by the impl (0.33/0.34: 528 bytes), refused by
    name on 0.26 (no such row, no GLM-5.3-Flash); the impl answers vLLM's row size, the 0.26-style shape agrees."""
    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend, vllm_sizes_fp8_rows_per_impl

    for kv in ("fp8", "fp8_e4m3", "fp8_ds_mla"):
        why = TritonMLASparseBackend.supports_combination(512, torch.bfloat16, kv, 64, True, False, True, False, None)
        if vllm_sizes_fp8_rows_per_impl():
            assert why is None, why
        else:
            assert why and "528-byte rows vLLM 0.33/0.34 size and write; this vLLM has no such row" in why, why
    impl = make_impl(8, torch.zeros(1, 128, dtype=torch.int32), kv_cache_dtype="fp8_ds_mla", dr=0)
    assert impl.get_fp8_ds_mla_row_bytes() == 528
    assert make_impl(8, torch.zeros(1, 128, dtype=torch.int32), kv_cache_dtype="fp8_ds_mla").get_fp8_ds_mla_row_bytes() \
        == 656
    assert TritonMLASparseBackend.get_kv_cache_shape(3, 64, 1, 512, cache_dtype_str="fp8_ds_mla") == (3, 64, 528)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])   # a second seed: the slow tier
@pytest.mark.parametrize("H,dtype", [(8, torch.float32), (16, torch.float16), (64, torch.float32)])
def test_forward_mqa_nope_head_fp8_cache(H, dtype, seed, monkeypatch):
    """GLM-5.3-Flash's NoPE layer on its 528-byte fp8_ds_mla rows, written as vLLM 0.34's ``concat_and_cache_mla``
    writes them (:func:`fp8_ds_mla_encode_vllm034_ref`) from the batch's latents in bf16, through vLLM's own entry
    point, ``out`` and ``lse`` poisoned first, against the float64 reference on the same bytes within the limits of
    the scale variant the planner ran."""
    from sparse_mla.kernels.reference import fp8_ds_mla_encode_vllm034_ref

    dev = _device()
    if dev == "cuda":
        dtype = torch.bfloat16
    b = mixed_batch(H=H, topk=128, dtype=dtype, device=dev, seed=300 + H + 70 * seed, dr=0)
    cache = fp8_ds_mla_encode_vllm034_ref(b.kv_cache.cpu().to(torch.bfloat16)).to(dev)
    assert cache.shape == (*b.kv_cache.shape[:2], 528) and cache.dtype == torch.uint8
    impl = make_impl(H, b.topk_indices.clone(), kv_cache_dtype="fp8_ds_mla", dr=0)
    assert impl.kernel_kv_cache_dtype == "fp8_ds_mla"
    out, lse, cfg = _forward_mqa(impl, b, cache, monkeypatch, poison=True)
    assert cfg.kv_cache_dtype == "fp8_ds_mla"
    c = _check(b, cache, out, lse, cfg)
    assert c.ok, c.explain()


@pytest.mark.parametrize("kv, match", [("fp8", "canonicalization"), ("fp8_e4m3", "canonicalization"),
                                       ("fp8_e5m2", "got 'fp8_e5m2'")])
def test_impl_rejects_caches_it_cannot_read(kv, match):
    """An fp8 name that reached the impl un-canonicalized would mean a per-tensor fp8 cache of 576 bytes per token,
    which the kernel does not read."""
    with pytest.raises(NotImplementedError, match=match):
        make_impl(8, torch.zeros(1, 128, dtype=torch.int32), kv_cache_dtype=kv)


def _fp8_batch(H, seed, dev):
    from sparse_mla.kernels.reference import fp8_ds_mla_encode_ref

    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    b = mixed_batch(H=H, topk=128, dtype=dtype, device=dev, seed=100 + H + 50 * seed,
                    seqs=((300, 1), (200, 3), (70, 12)))
    cache = fp8_ds_mla_encode_ref(b.kv_cache[..., :512].float(), b.kv_cache[..., 512:].float()).to(dev)
    return b, cache


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("H", [8, 3, 64])
def test_forward_mqa_fp8_ds_mla_cache(H, seed, monkeypatch):
    """forward_mqa on a 656-byte fp8_ds_mla cache (written by the reference encoder) against the float64 reference
    on the same bytes, ``out`` and the kernel's ``lse``, within the limits of the scale variant the planner ran (on
    an H200: "fold" below 64 heads, "registers" at 64); the impl passes the cache dtype and vLLM's capability."""
    dev = _device()
    b, cache = _fp8_batch(H, seed, dev)
    impl = make_impl(H, b.topk_indices.clone(), kv_cache_dtype="fp8_ds_mla")
    assert impl.kernel_kv_cache_dtype == "fp8_ds_mla"
    out, lse, cfg = _forward_mqa(impl, b, cache, monkeypatch)
    assert cfg.kv_cache_dtype == "fp8_ds_mla"
    c = _check(b, cache, out, lse, cfg)
    assert c.ok, c.explain()


@pytest.mark.parametrize("fault", ["sm_scale", "dropped slot"])
@pytest.mark.parametrize("kv", ["auto", "fp8_ds_mla"])
def test_forward_mqa_checks_catch_a_planted_fault(fault, kv, monkeypatch):
    """The checks above fail on a wrong kernel: the impl's softmax scale off by 10 %, or every other valid top-k slot
    of one token dropped (-1) on its way to the kernel (one slot of 128 moves that token's output by about 1/128 of
    its size, within bf16 limits on a GPU; half of them cannot hide). Run on the CPU here and in the GPU pass."""
    dev = _device()
    if kv == "auto":
        b = mixed_batch(H=8, topk=128, dtype=torch.bfloat16 if dev == "cuda" else torch.float32, device=dev, seed=7)
        cache = b.kv_cache
    else:
        b, cache = _fp8_batch(8, 7, dev)
    impl = make_impl(8, b.topk_indices.clone(), kv_cache_dtype=kv)
    if fault == "sm_scale":
        impl.scale *= 1.1
    out, lse, cfg = _forward_mqa(impl, b, cache, monkeypatch, drop=fault == "dropped slot")
    c = _check(b, cache, out, lse, cfg)
    assert not c.ok, f"a planted fault ({fault}) passed: {c.explain()}"


@functools.cache            # one reading of vLLM's source per process, not one per parametrized case
def vllm_writes_mla_cache_in_triton_fp8() -> bool:
    """Read from the installed vLLM, not from our line adapter: whether its DeepSeek-V3.2 attention writes the MLA cache
    inside ``fused_norm_rope``'s Triton kernel with e4m3 conversions (vLLM 0.33+: ``_fused_norm_rope_kernel`` takes
    an fp8_ds_mla cache, ``MLA_CACHE_DS_MLA``, and converts with ``tl.float8e4nv``, which Triton cannot build below
    SM89); vLLM 0.26 has no such module (it writes the cache with the CUDA op ``concat_and_cache_mla``)."""
    import inspect

    from sparse_mla.diagnose.probe import load_vllm_extensions

    load_vllm_extensions()
    try:
        import vllm.models.deepseek_v32.attention as attention
        from vllm.models.deepseek_v32.common import kernels
    except ImportError:
        return False
    k = getattr(kernels, "_fused_norm_rope_kernel", None)
    return (k is not None and hasattr(attention, "fused_norm_rope") and "MLA_CACHE_DS_MLA" in k.arg_names
            and "float8e4nv" in inspect.getsource(k.fn))


def test_the_lines_fp8_cache_flag_is_what_vllm_does():
    """The line adapter's ``TRITON_FP8_MLA_CACHE_WRITE`` (which decides the backend's fp8 refusal below SM89) against
    vLLM's own source (planted fault: the flag off on the 0.33+ line left every other test green)."""
    from sparse_mla.vllm_plugin.backend import LINE

    assert LINE.TRITON_FP8_MLA_CACHE_WRITE == vllm_writes_mla_cache_in_triton_fp8()


# ---- declarations for the fp8 cache and vLLM's own rules ----------------------------------------------------------

@pytest.mark.parametrize("kv", ["fp8", "fp8_e4m3", "fp8_ds_mla", "auto", "bfloat16", "fp8_e5m2", "fp8_inc",
                                "nvfp4"])
@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9), (9, 0), (12, 0)])
def test_validate_configuration_fp8(kv, cap):
    from vllm.platforms.interface import DeviceCapability

    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    from sparse_mla.kernels.fp8 import has_fp8_conversion

    args = {**GOOD, "kv_cache_dtype": kv, "dtype": torch.bfloat16, "device_capability": DeviceCapability(*cap)}
    ours = TritonMLASparseBackend.validate_configuration(**args)
    fp8 = kv in ("fp8", "fp8_e4m3", "fp8_ds_mla")
    if fp8 and vllm_writes_mla_cache_in_triton_fp8() and not has_fp8_conversion(cap):
        # vLLM 0.33 writes the fp8 MLA cache in Triton (fused_norm_rope): refused below SM89, a bf16 cache offered
        assert len(ours) == 1 and f"writes a {kv} MLA cache in fused_norm_rope's Triton kernel" in ours[0]
        assert "kv_cache_dtype auto" in ours[0]
        return
    assert ours == generic_backend().validate_configuration(**args)     # vLLM's wording
    assert ours == ([] if fp8 or kv in ("auto", "bfloat16") else ["kv_cache_dtype not supported"])


def test_fp8_needs_the_fp8_ds_mla_dims():
    """``supports_combination``: an fp8 cache is stored as fp8_ds_mla, fixed at kv_lora_rank 512 / rope 64 (a model
    with a 576-wide head of other proportions is refused for fp8, and still accepted with a bf16 cache)."""
    import types

    from vllm.config import set_current_vllm_config
    from vllm.platforms.interface import DeviceCapability

    from sparse_mla.vllm_plugin.backend import BACKEND_NAME, TritonMLASparseBackend

    ns = types.SimpleNamespace

    def cfg(**hf):
        hf = ns(index_topk=2048, **hf)
        return ns(model_config=ns(hf_config=hf, hf_text_config=hf),
                  parallel_config=ns(decode_context_parallel_size=1, prefill_context_parallel_size=1),
                  compilation_config=ns(custom_ops=[], mode=0))

    args = {**GOOD, "dtype": torch.bfloat16, "device_capability": DeviceCapability(8, 9)}
    with set_current_vllm_config(cfg(kv_lora_rank=512, qk_rope_head_dim=64)):
        assert TritonMLASparseBackend.validate_configuration(**{**args, "kv_cache_dtype": "fp8"}) == []
    with set_current_vllm_config(cfg(kv_lora_rank=448, qk_rope_head_dim=128)):
        for kv in ("fp8", "fp8_ds_mla"):
            assert TritonMLASparseBackend.validate_configuration(**{**args, "kv_cache_dtype": kv}) == [
                f"{BACKEND_NAME} stores an fp8 KV cache as fp8_ds_mla, which needs kv_lora_rank 512 and "
                f"qk_rope_head_dim 64 (or 0, the NoPE head); got 448 and 128"]
        assert TritonMLASparseBackend.validate_configuration(**{**args, "kv_cache_dtype": "auto"}) == []


def test_kv_cache_shape_follows_vllms_page_size():
    """656 bytes per token for fp8_ds_mla, as vLLM's own MLAAttentionSpec sizes the page (``real_page_size_bytes``)
    and allocates uint8 (``STR_DTYPE_TO_TORCH_DTYPE``); 576 elements otherwise (vLLM 0.26: the backend states the
    shape; 0.33 builds it from the spec, below)."""
    import math

    from sparse_mla.vllm_lines import current_line

    if current_line() != "0.26":
        pytest.skip("vLLM 0.33 builds the cache shape from the layer's spec (no get_kv_cache_shape)")

    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend as B

    shape = B.get_kv_cache_shape(10, 64, 1, 576, cache_dtype_str="fp8_ds_mla")
    assert shape == (10, 64, 656)
    dtype = STR_DTYPE_TO_TORCH_DTYPE["fp8_ds_mla"]
    spec = MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576, dtype=dtype, cache_dtype_str="fp8_ds_mla")
    assert spec.real_page_size_bytes == math.prod(shape[1:]) * dtype.itemsize
    assert B.get_kv_cache_shape(10, 64, 1, 576) == B.get_kv_cache_shape(10, 64, 1, 576, "bfloat16") == (10, 64, 576)


# ---- fp8 -> fp8_ds_mla canonicalization (vLLM's function, wrapped) -----------------------------------------------

@pytest.fixture
def canonicalization():
    """Install the wrapper for the test and take it off again; vLLM's original is the oracle."""
    from vllm.model_executor.layers.attention import mla_attention

    from sparse_mla.vllm_plugin import backend

    before = mla_attention._canonicalize_sparse_mla_kv_cache_dtype
    original = before
    while getattr(original, "__wrapped__", None) is not None:
        original = original.__wrapped__
    backend.uninstall_fp8_ds_mla_canonicalization()
    assert backend.install_fp8_ds_mla_canonicalization()
    yield mla_attention, original
    backend.uninstall_fp8_ds_mla_canonicalization()
    mla_attention._canonicalize_sparse_mla_kv_cache_dtype = before


def _named(name):
    return type(name, (), {"get_name": staticmethod(lambda: name)})


STOCK = ["FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120", "FLASHINFER_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE",
         "TRITON_MLA", "FLASHMLA", "CUSTOM"]
KV = ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "nvfp4"]


def test_canonicalization_keeps_vllms_answers_for_stock_backends(canonicalization):
    mla_attention, original = canonicalization
    wrapped = mla_attention._canonicalize_sparse_mla_kv_cache_dtype
    assert wrapped is not original and wrapped.__wrapped__ is original
    for name in STOCK:
        for kv in KV:
            assert wrapped(_named(name), kv) == original(_named(name), kv), (name, kv)
    # vLLM's own rule, as a sanity check that the oracle is the real one
    assert original(_named("FLASHMLA_SPARSE"), "fp8") == "fp8_ds_mla"
    assert original(_named("TRITON_MLA_SPARSE"), "fp8") == "fp8"


def test_canonicalization_maps_ours(canonicalization):
    mla_attention, original = canonicalization
    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    wrapped = mla_attention._canonicalize_sparse_mla_kv_cache_dtype
    got = {kv: wrapped(TritonMLASparseBackend, kv) for kv in KV}
    assert got == {"auto": "auto", "bfloat16": "bfloat16", "float16": "float16", "fp8": "fp8_ds_mla",
                   "fp8_e4m3": "fp8_ds_mla", "fp8_e5m2": "fp8_e5m2", "fp8_ds_mla": "fp8_ds_mla", "nvfp4": "nvfp4"}


def test_canonicalization_install_is_idempotent_and_undoable(canonicalization):
    mla_attention, original = canonicalization
    from sparse_mla.vllm_plugin import backend

    first = mla_attention._canonicalize_sparse_mla_kv_cache_dtype
    assert backend.install_fp8_ds_mla_canonicalization()
    assert mla_attention._canonicalize_sparse_mla_kv_cache_dtype is first          # not wrapped twice
    assert backend.uninstall_fp8_ds_mla_canonicalization()
    assert mla_attention._canonicalize_sparse_mla_kv_cache_dtype is original
    assert not backend.uninstall_fp8_ds_mla_canonicalization()                     # nothing left to undo


def test_mla_attention_looks_the_rule_up_at_call_time():
    """The wrapper only works because ``MLAAttention.__init__`` calls the module-level name (not a reference taken
    at import time): check vLLM's source says so."""
    import inspect

    from vllm.model_executor.layers.attention import mla_attention

    src = inspect.getsource(mla_attention.MLAAttention.__init__)
    assert "_canonicalize_sparse_mla_kv_cache_dtype(" in src


def test_register_installs_the_canonicalization(monkeypatch):
    """The plugin's register() calls the installer (vLLM's registry and selector left alone here)."""
    import importlib

    import vllm.v1.attention.backends.registry as registry

    from sparse_mla.vllm_plugin import backend

    register = importlib.import_module("sparse_mla.vllm_plugin.register")   # the module, not the function
    calls = []
    monkeypatch.setattr(register, "custom_slot_holder", lambda: None)
    monkeypatch.setattr(register, "install_selector_fallback", lambda: True)
    monkeypatch.setattr(registry, "register_backend", lambda *a, **k: None)
    monkeypatch.setattr(backend, "install_fp8_ds_mla_canonicalization", lambda: calls.append(1) or True)
    assert register.register() is True and calls == [1]


def test_blocks_are_whole_rows_apart_on_0_33():
    """vLLM 0.33 may put other layers' pages between a cache's blocks; the kernel reads the cache as flat rows, so the
    backend asks, through vLLM's own ``customize_spec`` hook, for blocks whole rows apart (``align_blocks_to_rows``,
    as FLASHMLA_SPARSE off SM100) -- for the bf16 and the fp8_ds_mla rows."""
    from sparse_mla.vllm_lines import current_line

    if current_line() == "0.26":
        pytest.skip("vLLM 0.26 has no customize_spec hook (the backend states the cache shape)")
    from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend as B

    for kv, dtype in (("auto", torch.bfloat16), ("bfloat16", torch.bfloat16)):
        spec = MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576, dtype=dtype, cache_dtype_str=kv)
        ours = B.customize_spec(spec)
        assert ours.block_stride_alignment == spec.state_content_size_bytes == 576 * 2
        assert ours == FlashMLASparseBackend.customize_spec(spec)     # the in-tree peer's answer for a bf16 cache
