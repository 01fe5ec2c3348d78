"""``TRITON_MLA_SPARSE``: a vLLM sparse MLA (DSA) attention backend on the portable Triton kernel (vLLM 0.26 and
0.33: what differs between them is in :mod:`sparse_mla.vllm_plugin.lines`).

Follows the shape of vLLM's own sparse backends (``vllm/v1/attention/backends/mla/flashattn_mla_sparse.py``,
``flashmla_sparse.py``): a Backend class that only declares, a metadata builder that only prepares tensors (vLLM's
``SparseMLACommonMetadataBuilder``), and an Impl (on vLLM's ``SparseMLACommonImpl``) whose entry point converts the
indexer's request-local top-k positions to cache rows with vLLM's own ``triton_convert_req_index_to_global_index``
(on 0.33 vLLM's base class does, with the block stride) and calls :func:`sparse_mla.kernels.launch`.

Accepted: head size 576 (``kv_lora_rank 512 + qk_rope_head_dim 64``) or GLM-5.3-Flash's NoPE 512
(``qk_rope_head_dim`` 0), model dtype bf16/fp16, KV cache ``auto``/``bfloat16``/``float16`` or
``fp8``/``fp8_e4m3``/``fp8_ds_mla`` -- stored for head 576 as vLLM's 656-byte ``fp8_ds_mla`` rows (the
``FLASHMLA_SPARSE`` layout), for the NoPE head as vLLM 0.33/0.34's 528-byte rows (512 e4m3 codes + 4 fp32 scales, the
layout ``FLASHINFER_MLA_SPARSE_SM120`` asks for: :meth:`TritonMLASparseImpl.get_fp8_ds_mla_row_bytes` answers 528 as
its ``get_fp8_ds_mla_row_bytes`` does; :data:`sparse_mla.layouts.FP8_DS_MLA_NOPE_ROW_BYTES`), only on a vLLM that asks
the impl for the row's size (0.26 sizes every fp8_ds_mla row at 656 and has no GLM-5.3-Flash) --, kernel block size
64 on 0.26, any multiple of 64 on 0.33/0.34 (as ``FLASHMLA_SPARSE``: GLM-5.3-Flash's manager blocks are 512 tokens), compute capability >= 8.0 (fp8 decoded in software on SM80/86), any number of heads per rank, a
model with ``index_topk``. Everything else is rejected by ``validate_configuration`` with vLLM-style reasons
("kv_cache_dtype not supported", ...), before any kernel runs.

fp8: vLLM turns ``fp8``/``fp8_e4m3`` into ``fp8_ds_mla`` only for the backends it names in
``_canonicalize_sparse_mla_kv_cache_dtype`` (``vllm/model_executor/layers/attention/mla_attention.py``, called by
``MLAAttention.__init__`` after backend selection). :func:`install_fp8_ds_mla_canonicalization` (called by the plugin's
``register()``) wraps that function: vLLM's original first, then ``TRITON_MLA_SPARSE`` + ``fp8``/``fp8_e4m3`` ->
``fp8_ds_mla``, so the cache spec, shape (656 bytes per token) and vLLM's writer (``concat_and_cache_mla(...,
"fp8_ds_mla", ...)``) follow the in-tree sparse backends'. For the NoPE head the same names map the same way, as
vLLM maps them for ``FLASHINFER_MLA_SPARSE_SM120`` (which maps ``auto`` too: it reads no bf16 cache, ours does); the
row is then the impl's 528 bytes (vLLM 0.34 ``mla_attention.py:1581-1584``, ``sparse_mla_attention.py:742-746``), which
vLLM's writer fills without a rope part.

Prefill: tokens of prompts no longer than ``index_topk`` go through vLLM's dense MHA prefill (inherited
``forward_mha``, the selected MLA prefill backend) exactly as for the in-tree sparse backends; all other tokens
(decode, chunked and long prefill) go through ``forward_mqa``, one query row per token over its own top-k slots.
CUDA graphs: ``UNIFORM_BATCH`` (the launch depends only on shapes; no host sync).
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from vllm.config.cache import CacheDType
from vllm.model_executor.layers.attention.sparse_mla_attention import (
    SparseMLACommonImpl,
    SparseMLACommonMetadataBuilder,
)
from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    MLAAttentionImpl,
)

from ..capability import vllm_capability
from ..kernels.fp8 import has_fp8_conversion
from ..layouts import (BACKEND_KV_CACHE_DTYPES, FP8_DS_MLA_NOPE_ROW_BYTES, FP8_DS_MLA_ROW_BYTES,
                       FP8_DS_MLA_ROW_BYTES_BY_DIMS, FP8_KV_CACHE_DTYPES, IMPL_KV_CACHE_DTYPES, INDEX_TOPK_MULTIPLE,
                       KV_LORA_RANK, MLA_HEAD_SIZES, PATCH_MARK)
from .lines import adapter

#: The installed vLLM line's adapter (:mod:`sparse_mla.vllm_plugin.lines`): metadata class, impl entry point, spec.
LINE = adapter()

BACKEND_NAME = "TRITON_MLA_SPARSE"
MIN_CAPABILITY = (8, 0)


def vllm_sizes_fp8_rows_per_impl() -> bool:
    """True where this vLLM sizes an fp8_ds_mla row by asking the layer's impl (``MLAAttentionImpl.
    get_fp8_ds_mla_row_bytes``, vLLM 0.34 ``v1/attention/backend.py:1017``; the KV-cache spec's
    ``state_content_bytes``): there the NoPE head's 528-byte rows exist. vLLM 0.26 has no such method (every
    fp8_ds_mla row is 656 bytes, its writer refuses a rope part other than 64)."""
    from vllm.v1.attention.backend import MLAAttentionImpl as _Impl

    return hasattr(_Impl, "get_fp8_ds_mla_row_bytes")


class TritonMLASparseBackend(AttentionBackend):
    """Declarations only: what ``TRITON_MLA_SPARSE`` accepts (see the module docstring)."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[CacheDType]] = list(BACKEND_KV_CACHE_DTYPES)

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list:
        return LINE.kernel_block_sizes()    # any spec (vLLM 0.33 passes the layer's; 0.26 none)

    @classmethod
    def customize_spec(cls, spec):
        """vLLM 0.33's hook on the layer's KV-cache spec (the line adapter's; 0.26 never calls it)."""
        return LINE.customize_spec(spec)

    @staticmethod
    def get_builder_cls() -> type["TritonMLASparseMetadataBuilder"]:
        return TritonMLASparseMetadataBuilder

    @staticmethod
    def get_impl_cls() -> type[MLAAttentionImpl[Any]]:
        return TritonMLASparseImpl

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(MLA_HEAD_SIZES)

    @classmethod
    def is_mla(cls) -> bool:
        return True

    @classmethod
    def is_sparse(cls) -> bool:
        return True

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return (capability.major, capability.minor) >= MIN_CAPABILITY

    @classmethod
    def supports_combination(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,
                             use_mm_prefix, device_capability) -> str | None:
        from vllm.config import get_current_vllm_config_or_none

        vllm_config = get_current_vllm_config_or_none()
        if vllm_config is not None and vllm_config.model_config is not None:
            if vllm_config.parallel_config.decode_context_parallel_size > 1:
                return f"{BACKEND_NAME} does not support DCP for now"
            hf_config = vllm_config.model_config.hf_config
            if not hasattr(hf_config, "index_topk"):
                return f"{BACKEND_NAME} requires a model with index_topk config"
            dims = (getattr(hf_config, "kv_lora_rank", None), getattr(hf_config, "qk_rope_head_dim", None))
            if head_size == KV_LORA_RANK and dims != (KV_LORA_RANK, 0):
                return (f"{BACKEND_NAME} reads head size {KV_LORA_RANK} as a NoPE latent (kv_lora_rank "
                        f"{KV_LORA_RANK}, qk_rope_head_dim 0); got {dims[0]} and {dims[1]}")
            if hf_config.index_topk % INDEX_TOPK_MULTIPLE:
                return (f"{BACKEND_NAME} requires index_topk to be a multiple of {INDEX_TOPK_MULTIPLE} "
                        f"(vLLM's top-k index conversion); got {hf_config.index_topk}")
            if kv_cache_dtype in FP8_KV_CACHE_DTYPES and dims not in FP8_DS_MLA_ROW_BYTES_BY_DIMS:
                return (f"{BACKEND_NAME} stores an fp8 KV cache as fp8_ds_mla, which needs kv_lora_rank 512 and "
                        f"qk_rope_head_dim 64 (or 0, the NoPE head); got {dims[0]} and {dims[1]}")
        if head_size == KV_LORA_RANK and kv_cache_dtype in FP8_KV_CACHE_DTYPES and not vllm_sizes_fp8_rows_per_impl():
            return (f"{BACKEND_NAME} reads the NoPE head {KV_LORA_RANK}'s fp8 cache as the 528-byte rows vLLM 0.33/0.34 "
                    f"size and write; this vLLM has no such row (nor GLM-5.3-Flash); a bf16 cache (kv_cache_dtype "
                    f"auto) works")
        if (LINE.TRITON_FP8_MLA_CACHE_WRITE and kv_cache_dtype in FP8_KV_CACHE_DTYPES and device_capability is not None
                and not has_fp8_conversion((device_capability.major, device_capability.minor))):
            return (f"{BACKEND_NAME}: this vLLM writes a {kv_cache_dtype} MLA cache in fused_norm_rope's Triton kernel, "
                    f"which needs fp8 conversions (compute capability 8.9+, this is "
                    f"{device_capability.major}.{device_capability.minor}); a bf16 cache (kv_cache_dtype auto) works")
        return None

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
                           cache_dtype_str: str = "auto") -> tuple[int, ...]:
        if cache_dtype_str == "fp8_ds_mla":     # uint8 rows: 512 e4m3 + 4 fp32 scales + 64 bf16 (FLASHMLA_SPARSE's),
            # the NoPE head's without the rope part (vLLM 0.33+ ask the impl instead and never call this)
            return (num_blocks, block_size,
                    FP8_DS_MLA_NOPE_ROW_BYTES if head_size == KV_LORA_RANK else FP8_DS_MLA_ROW_BYTES)
        return (num_blocks, block_size, head_size)


#: The metadata vLLM's sparse MLA builder fills: the line adapter's (ours on 0.26, vLLM's own on 0.33).
TritonMLASparseMetadata = LINE.SparseMetadata


class TritonMLASparseMetadataBuilder(SparseMLACommonMetadataBuilder[TritonMLASparseMetadata]):
    """vLLM's sparse MLA builder; a token counts as decode when its request adds one query token (plus
    speculative tokens when spec decode is on)."""

    metadata_cls = TritonMLASparseMetadata
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True)


class TritonMLASparseImpl(LINE.ImplForward, SparseMLACommonImpl[TritonMLASparseMetadata]):
    """Sparse MLA on the Triton kernel. vLLM's MLA layer calls the line adapter's entry point
    (:mod:`sparse_mla.vllm_plugin.lines`) with ``(ql_nope [T, H, 512], q_pe [T, H, 64])`` strided views in the model
    dtype and the layer's cache -- ``[num_blocks, block_size, 576]`` (``uint8 [num_blocks, block_size, 656]`` for
    fp8_ds_mla, 528 for the NoPE head's; the kernel decodes e4m3 for vLLM's device capability) -- which turns the
    indexer's top-k into cache
    rows and calls :meth:`attend`; ``out [T, H, 512]`` (q dtype) is returned. LSE is natural-log (``lse_base_on_e``)
    but not returned (no DCP)."""

    can_return_lse_for_decode: bool = False
    supports_dcp: bool = False

    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                 logits_soft_cap, attn_type, kv_sharing_target_layer_name, topk_indices_buffer=None, indexer=None,
                 **mla_args) -> None:
        if alibi_slopes or sliding_window or logits_soft_cap:
            raise NotImplementedError(f"{BACKEND_NAME} does not support alibi, sliding window or logits soft cap.")
        if kv_cache_dtype not in IMPL_KV_CACHE_DTYPES:
            hint = (" vLLM stores it as fp8_ds_mla only with sparse_mla's canonicalization installed "
                    "(sparse_mla.vllm_plugin.register())." if kv_cache_dtype in FP8_KV_CACHE_DTYPES else "")
            raise NotImplementedError(f"{BACKEND_NAME} supports auto/bfloat16/float16/fp8_ds_mla KV caches, got "
                                      f"{kv_cache_dtype!r}.{hint}")
        super().__init__(num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                         logits_soft_cap, attn_type, kv_sharing_target_layer_name, indexer=indexer,
                         topk_indices_buffer=topk_indices_buffer, **mla_args)
        assert self.topk_indices_buffer is not None, "Indexer or topk_indices_buffer required for sparse MLA"
        self.supports_quant_query_input = False
        # the kernel's cache layout, and the GPU its launches are planned for and its fp8 decoded for: vLLM's
        # capability (a capability simulation sets it: the plan then uses that GPU's limits, kernels.occupancy)
        self.kernel_kv_cache_dtype = "fp8_ds_mla" if kv_cache_dtype == "fp8_ds_mla" else "auto"
        self.capability = vllm_capability()

    def get_fp8_ds_mla_row_bytes(self) -> int:
        """Bytes of one fp8_ds_mla row of this layer, which vLLM 0.33/0.34 asks the impl for to size the KV-cache
        spec and the index group's rows (``mla_attention.py:1581-1584``, ``sparse_mla_attention.py:742-746``): 528
        for the NoPE head (``kv_lora_rank`` 512, ``qk_rope_head_dim`` 0), as ``FlashInferMLASparseSM120Impl.
        get_fp8_ds_mla_row_bytes`` answers (``flashinfer_mla_sparse_sm120.py:40-43``); 656 otherwise (vLLM's
        base, ``v1/attention/backend.py:1017-1018``). vLLM 0.26 never calls it."""
        dims = (getattr(self, "kv_lora_rank", None), getattr(self, "qk_rope_head_dim", None))
        return FP8_DS_MLA_ROW_BYTES_BY_DIMS.get(dims, FP8_DS_MLA_ROW_BYTES)

    def split_q(self, q) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q_nope [T, H, kv_lora_rank], q_pe [T, H, qk_rope_head_dim])`` from vLLM's tuple or one ``[T, H, 576]``
        (``[T, H, 512]`` for a NoPE head: ``q_pe`` is then ``[T, H, 0]``)."""
        if isinstance(q, tuple):
            return q
        return q.split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)

    def attend(self, q_nope: torch.Tensor, q_pe: torch.Tensor, cache: torch.Tensor,
               slots: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The kernel (:func:`sparse_mla.kernels.launch`) over ``slots`` ``[T, topk]`` int32 rows of ``cache`` read
        flat (row ``s`` at ``s x row bytes``; ``-1`` = none): ``(out [T, H, 512] in q's dtype, None)``."""
        from ..kernels import choose_config, launch

        T, H = q_pe.shape[:2]
        out = torch.empty((T, H, self.kv_lora_rank), dtype=q_nope.dtype, device=q_nope.device)
        lse = torch.empty((T, H), dtype=torch.float32, device=q_nope.device)
        if T:
            cfg = choose_config(T, H, slots.shape[1], q_nope.dtype, q_nope.device,
                                kv_cache_dtype=self.kernel_kv_cache_dtype, capability=self.capability)
            launch(q_nope, q_pe, cache, slots, self.scale, out, lse, cfg)
        return out, None


# ---- fp8 / fp8_e4m3 -> fp8_ds_mla for TRITON_MLA_SPARSE, as vLLM does for its own sparse backends -----------------

_CANON = "_canonicalize_sparse_mla_kv_cache_dtype"
_CANON_MARK = "_sparse_mla_fp8_ds_mla"


def canonical_kv_cache_dtype(backend_name: str, kv_cache_dtype: str) -> str | None:
    """Our rule, after vLLM's: ``fp8``/``fp8_e4m3`` for ``TRITON_MLA_SPARSE`` are stored as ``fp8_ds_mla`` (the
    in-tree FLASHINFER_MLA_SPARSE_SM120 maps the same names, ``mla_attention.py:378-383`` in vLLM 0.34), for head 576
    and the NoPE head alike: the row's bytes are the impl's (:meth:`TritonMLASparseImpl.get_fp8_ds_mla_row_bytes`, 528
    for the NoPE head); ``auto`` stays the model dtype's cache, which we read. None where vLLM's answer stands."""
    if backend_name == BACKEND_NAME and kv_cache_dtype in ("fp8", "fp8_e4m3"):
        return "fp8_ds_mla"
    return None


def install_fp8_ds_mla_canonicalization() -> bool:
    """Wrap vLLM's ``mla_attention._canonicalize_sparse_mla_kv_cache_dtype`` (looked up by ``MLAAttention.__init__``
    at call time) so that ``TRITON_MLA_SPARSE`` gets the fp8 rule of the in-tree sparse backends: the original is
    called first, then :func:`canonical_kv_cache_dtype`. Idempotent; returns False (and changes nothing) where the
    function does not exist in this vLLM. :func:`uninstall_fp8_ds_mla_canonicalization` undoes it."""
    from vllm.model_executor.layers.attention import mla_attention

    original = getattr(mla_attention, _CANON, None)
    if original is None:
        return False
    if getattr(original, _CANON_MARK, False):
        return True

    def _canonicalize_sparse_mla_kv_cache_dtype(attn_backend, kv_cache_dtype):
        normalized = original(attn_backend, kv_cache_dtype)
        ours = canonical_kv_cache_dtype(attn_backend.get_name(), normalized)
        return normalized if ours is None else ours

    setattr(_canonicalize_sparse_mla_kv_cache_dtype, _CANON_MARK, True)
    setattr(_canonicalize_sparse_mla_kv_cache_dtype, PATCH_MARK, True)   # the diagnosis probe unwraps it for stock vLLM
    _canonicalize_sparse_mla_kv_cache_dtype.__wrapped__ = original
    _canonicalize_sparse_mla_kv_cache_dtype.__doc__ = (
        (original.__doc__ or "") + "\n\n(wrapped by sparse_mla.vllm_plugin: TRITON_MLA_SPARSE fp8 -> fp8_ds_mla)")
    setattr(mla_attention, _CANON, _canonicalize_sparse_mla_kv_cache_dtype)
    return True


def uninstall_fp8_ds_mla_canonicalization() -> bool:
    """Put vLLM's own ``_canonicalize_sparse_mla_kv_cache_dtype`` back (for tests); True if a wrapper was removed."""
    from vllm.model_executor.layers.attention import mla_attention

    current = getattr(mla_attention, _CANON, None)
    if current is None or not getattr(current, _CANON_MARK, False):
        return False
    setattr(mla_attention, _CANON, current.__wrapped__)
    return True
