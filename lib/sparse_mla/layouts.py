"""Facts of the sparse MLA latent cache and of vLLM's sparse index path, one home each.

* **The latent row** of MLA after weight absorption: ``kv_lora_rank`` (512) compressed-KV values, then the
  ``qk_rope_head_dim`` (64) rope key: 576 values, vLLM's MLA ``head_size``.
* **vLLM's fp8_ds_mla row** (FlashMLA's FP8 sparse layout, ``flash_mla_with_kvcache`` docstring; written by vLLM's
  ``concat_and_cache_mla(..., "fp8_ds_mla", ...)``): 656 bytes per token -- 512 e4m3 codes, 4 fp32 scales (one per
  128 latent values), 64 bf16 rope values. Kernels read one row through three views of the same storage: uint8
  (row stride 656), fp32 (stride 164, scales at element 128) and bf16 (stride 328, rope at element 264).
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
#: The MLA heads the backend reads, ``kv_lora_rank + qk_rope_head_dim``: GLM-5 / DeepSeek-V3.2's 576 and
#: GLM-5.3-Flash's NoPE 512 (``qk_rope_head_dim`` 0; vLLM 0.33's ``vllm/models/glm5next``), both bf16/fp16 caches.
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
