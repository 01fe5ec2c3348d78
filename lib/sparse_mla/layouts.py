"""Facts of the sparse MLA latent cache and of vLLM's sparse index path, one home each.

* **The latent row** of MLA after weight absorption: ``kv_lora_rank`` (512) compressed-KV values, then the
  ``qk_rope_head_dim`` (64) rope key: 576 values, vLLM's MLA ``head_size``.
* **vLLM's fp8_ds_mla row** (FlashMLA's FP8 sparse layout, ``flash_mla_with_kvcache`` docstring; written by vLLM's
  ``concat_and_cache_mla(..., "fp8_ds_mla", ...)``): 656 bytes per token -- 512 e4m3 codes, 4 fp32 scales (one per
  128 latent values), 64 bf16 rope values. Kernels read one row through three views of the same storage: uint8
  (row stride 656), fp32 (stride 164, scales at element 128) and bf16 (stride 328, rope at element 264).
* **vLLM's NoPE fp8_ds_mla row** (GLM-5.3-Flash's MLA layer: ``kv_lora_rank`` 512, ``qk_rope_head_dim`` 0, head
  512), vLLM 0.33/0.34 only: 528 bytes per token -- the 656-byte row without its rope part: 512 e4m3 codes, then 4
  fp32 scales (one per 128 latent values, at byte 512, so at element 128 of the fp32 view of stride 132), nothing
  else (no padding). Where it comes from, in vLLM 0.34.0's own files:

  - the size: ``FlashInferMLASparseSM120Impl.get_fp8_ds_mla_row_bytes`` (``v1/attention/backends/mla/
    flashinfer_mla_sparse_sm120.py:40-43``: ``if self.kv_lora_rank == 512 and self.qk_rope_head_dim == 0: return
    528``; the base ``MLAAttentionImpl.get_fp8_ds_mla_row_bytes`` in ``v1/attention/backend.py:1017-1018`` returns
    656), which sizes the KV-cache spec (``MLAAttention.get_kv_cache_spec``, ``model_executor/layers/attention/
    mla_attention.py:1581-1584``: ``state_content_bytes=impl.get_fp8_ds_mla_row_bytes()`` for ``fp8_ds_mla``) and
    the index group's row width (``sparse_mla_attention.py:742-746``);
  - the writer: ``MLAAttention.update_kv_cache`` -> ``impl.do_kv_cache_update`` (``v1/attention/backend.py:
    1088-1110``) -> ``ops.concat_and_cache_mla(kv_c, k_pe, cache, slots, "fp8_ds_mla", scale)``, a CUDA op
    (``_C_stable_libtorch.abi3.so``; its checks read "pe_dim must be 64 or 0 for fp8_ds_mla" and "fp8_ds_mla
    requires 656-byte rows, or 528-byte rows with pe_dim == 0"). No Python or torch path writes these rows; the
    layout and arithmetic below were read from that kernel's SASS (``cuobjdump -sass -fun
    _ZN4vllm30concat_and_cache_ds_mla_kernelI13__nv_bfloat16hLNS_18Fp8KVCacheDataTypeE2EEEvPKT_S5_PT0_PKliiiiiiibPKf``,
    sm_80, sm_90 and sm_120 alike): threads 0-63 each quantize 8 latent values, half a warp (16 threads) per
    128-value tile; ``scale = 2 ** ceil(log2(max(amax / 448, 1e-4)))`` (a power of two, from 2**-13 up; vLLM
    0.26's kernel stores ``max(amax / 448, FLT_MIN)`` instead), stored as fp32 at float index ``kv_lora_rank / 4 +
    tile``; codes ``e4m3(x / scale)`` saturated, round to nearest even, at bytes ``[8 t, 8 t + 8)``; threads
    64-95 write the rope part only when the kernel's bool argument says the row has one (656 bytes: ``k_pe``, or
    zeros where ``pe_dim`` is 0), so a 528-byte row ends with the scales;
  - the reader vLLM pairs with it: FlashInfer's SM120 decode with ``kv_scale_format="arbitrary_fp32"`` for GLM
    models (``_kv_scale_format_for_model``, ``flashinfer_mla_sparse_sm120.py:28-31``: ``"arbitrary_fp32"`` where
    ``model_type`` starts with ``glm``, else ``"pow2_fp32"``), FlashInfer's ``GLM53_NOPE`` family (``d_qk=512``,
    ``bytes_per_token=528``, inline fp32 scales; ``flashinfer/mla/_sparse_mla_sm120/_policy.py``, ``_api.py``).
    Our kernels multiply by whatever fp32 scale the row holds, so either format reads.

  Other vLLM backends store the NoPE head differently: ``FLASHMLA_SPARSE`` on SM90 keeps the 656-byte row with a
  zero rope slot (``flashmla_sparse.py:777-784``, base ``get_fp8_ds_mla_row_bytes``); ``TRITON_MLA_SPARSE`` answers
  528, as the SM120 backend does.
* **The top-k multiple**: vLLM converts request-local top-k indices to cache slots in 128-wide column tiles
  (``triton_convert_req_index_to_global_index``), so ``index_topk`` must be a multiple of 128.
* **The patch mark**: the attribute set on every function the plugin puts in place of one of vLLM's, so that the
  diagnosis probe can restore stock vLLM (``diagnose.probe``).
* **ln 2 and log2 e** for the base-2 softmax (the kernels work in base 2; ``lse`` is returned in natural log).
"""
from __future__ import annotations

from .errors import UserInputError

KV_LORA_RANK = 512
ROPE_DIM = 64
#: vLLM's MLA head_size: the latent row ``c_kv || k_pe``.
LATENT_DIM = KV_LORA_RANK + ROPE_DIM

FP8_DS_MLA_SCALE_GROUP = 128                      # latent values per fp32 scale
FP8_DS_MLA_SCALES = KV_LORA_RANK // FP8_DS_MLA_SCALE_GROUP           # 4
FP8_DS_MLA_ROW_BYTES = KV_LORA_RANK + 4 * FP8_DS_MLA_SCALES + 2 * ROPE_DIM   # 656
FP8_DS_MLA_ROW_F32 = FP8_DS_MLA_ROW_BYTES // 4    # 164: the row in the fp32 view
FP8_DS_MLA_SCALES_F32 = KV_LORA_RANK // 4         # 128: first scale in the fp32 view
FP8_DS_MLA_ROW_BF16 = FP8_DS_MLA_ROW_BYTES // 2   # 328: the row in the bf16 view
FP8_DS_MLA_ROPE_BF16 = (KV_LORA_RANK + 4 * FP8_DS_MLA_SCALES) // 2   # 264: first rope value in the bf16 view
#: (kv_lora_rank, qk_rope_head_dim) the 656-byte layout holds.
FP8_DS_MLA_DIMS = (KV_LORA_RANK, ROPE_DIM)
#: GLM-5.3-Flash's NoPE fp8_ds_mla row (module docstring): 512 e4m3 codes + 4 fp32 scales, no rope part.
FP8_DS_MLA_NOPE_ROW_BYTES = KV_LORA_RANK + 4 * FP8_DS_MLA_SCALES           # 528
FP8_DS_MLA_NOPE_ROW_F32 = FP8_DS_MLA_NOPE_ROW_BYTES // 4                   # 132: the row in the fp32 view
#: (kv_lora_rank, qk_rope_head_dim) the 528-byte layout holds (its scales sit where the 656-byte row's do).
FP8_DS_MLA_NOPE_DIMS = (KV_LORA_RANK, 0)
#: fp8_ds_mla row bytes per (kv_lora_rank, qk_rope_head_dim): the two layouts vLLM writes for our backend.
FP8_DS_MLA_ROW_BYTES_BY_DIMS = {FP8_DS_MLA_DIMS: FP8_DS_MLA_ROW_BYTES, FP8_DS_MLA_NOPE_DIMS: FP8_DS_MLA_NOPE_ROW_BYTES}
#: The MLA heads the backend reads, ``kv_lora_rank + qk_rope_head_dim``: GLM-5 / DeepSeek-V3.2's 576 and
#: GLM-5.3-Flash's NoPE 512 (``qk_rope_head_dim`` 0; vLLM 0.33's ``vllm/models/glm5next``), both bf16/fp16 and fp8_ds_mla caches (656- and 528-byte rows).
MLA_HEAD_SIZES = (LATENT_DIM, KV_LORA_RANK)

INDEX_TOPK_MULTIPLE = 128

PATCH_MARK = "_sparse_mla_patch"

LN2 = 0.6931471805599453
LOG2E = 1.4426950408889634

# ---- KV-cache dtypes: vLLM's names for what users ask, the layouts the kernels read ---------------------------------
#: The latent-cache layouts the kernels read: ``"auto"`` (the cache in the model's float dtype, rows ``c_kv || k_pe``)
#: and ``"fp8_ds_mla"`` (the 656-byte rows above).
CACHE_LAYOUTS = ("auto", "fp8_ds_mla")
#: What vLLM may pass for an fp8 MLA cache; ``TRITON_MLA_SPARSE`` stores and reads each as ``fp8_ds_mla``, as vLLM
#: does for its own sparse backends (``_canonicalize_sparse_mla_kv_cache_dtype``).
FP8_KV_CACHE_DTYPES = ("fp8", "fp8_e4m3", "fp8_ds_mla")
#: The ``--kv-cache-dtype`` values ``TRITON_MLA_SPARSE`` accepts (its ``supported_kv_cache_dtypes``).
BACKEND_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16") + FP8_KV_CACHE_DTYPES
#: What the backend's impl receives once vLLM has canonicalized an fp8 cache.
IMPL_KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8_ds_mla")
#: The ``--kv-cache-dtype`` values the engine commands (``launch``, ``bench serve``) take: vLLM's names; fp8 runs as
#: fp8_ds_mla on every sparse MLA backend.
ENGINE_KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_ds_mla")
#: The KV-cache dtypes the diagnosis matrix asks about (its columns; ``diagnose --matrix``).
MATRIX_KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_ds_mla")
#: The KV-cache dtypes the what-to-run table asks about: the model dtype's cache, and fp8 (stored as fp8_ds_mla on
#: every sparse MLA backend).
WHAT_TO_RUN_KV_CACHE_DTYPES = ("bfloat16", "fp8")


def fp8_ds_mla_row_bytes(kv_lora_rank: int, rope_dim: int) -> int:
    """Bytes of one fp8_ds_mla row for a latent of ``kv_lora_rank`` values and a rope part of ``rope_dim`` values:
    656 for ``(512, 64)`` (GLM-5 / DeepSeek-V3.2), 528 for ``(512, 0)`` (GLM-5.3-Flash's NoPE head, vLLM 0.33/0.34's
    ``FlashInferMLASparseSM120Impl.get_fp8_ds_mla_row_bytes``). Raises :class:`~sparse_mla.errors.UserInputError`
    for any other pair (no fp8_ds_mla layout holds it)."""
    row = FP8_DS_MLA_ROW_BYTES_BY_DIMS.get((kv_lora_rank, rope_dim))
    if row is None:
        raise UserInputError(f"kv_lora_rank {kv_lora_rank} with qk_rope_head_dim {rope_dim} has no fp8_ds_mla layout; "
                             f"accepted: 512 with 64 (656-byte rows) or 512 with 0 (528-byte rows, the NoPE head)")
    return row


def check_kv_cache_dtype(kv_cache_dtype, accepted=ENGINE_KV_CACHE_DTYPES, what: str = "--kv-cache-dtype",
                         note: str = "") -> str:
    """The one of ``accepted`` that ``kv_cache_dtype`` names, in vLLM's spelling, else one
    :class:`~sparse_mla.errors.UserInputError` line naming ``what``, the value and ``accepted`` (then ``note``).
    The one rule for every list above and for vLLM's own ``CacheDType`` (the diagnosis); names match whatever their
    case (``FP8`` is ``fp8``), as GPU presets and backend names do."""
    if isinstance(kv_cache_dtype, str):
        match = next((k for k in accepted if k.lower() == kv_cache_dtype.lower()), None)
        if match is not None:
            return match
    raise UserInputError(f"{what} {kv_cache_dtype!r} is not accepted; accepted: "
                         f"{', '.join(repr(k) for k in accepted)}" + (f" {note}" if note else ""))
