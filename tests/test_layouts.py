"""sparse_mla.layouts: the fp8_ds_mla row's views follow from its parts, and vLLM allocates the same row."""
from __future__ import annotations

from sparse_mla import layouts as L


def test_fp8_ds_mla_views():
    assert (L.FP8_DS_MLA_ROW_BYTES, L.FP8_DS_MLA_ROW_F32, L.FP8_DS_MLA_ROW_BF16) == (656, 164, 328)
    assert L.FP8_DS_MLA_SCALES_F32 * 4 == L.KV_LORA_RANK                       # scales right after the codes
    assert L.FP8_DS_MLA_ROPE_BF16 * 2 == L.KV_LORA_RANK + 16                   # rope right after the 4 scales
    assert L.FP8_DS_MLA_ROPE_BF16 + L.ROPE_DIM == L.FP8_DS_MLA_ROW_BF16        # and it ends the row
    assert L.LATENT_DIM == 576 and abs(L.LN2 * L.LOG2E - 1) < 1e-15


def test_vllm_allocates_the_same_row():
    from sparse_mla.diagnose.probe import load_vllm_extensions

    load_vllm_extensions()
    from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend

    shape = FlashMLASparseBackend.get_kv_cache_shape(3, 64, 1, L.LATENT_DIM, cache_dtype_str="fp8_ds_mla")
    assert shape[-1] == L.FP8_DS_MLA_ROW_BYTES


def test_kv_cache_dtype_names_match_whatever_their_case():
    """One rule for every name the commands take (GPU presets and backends already matched any case)."""
    import pytest

    from sparse_mla.errors import UserInputError
    from sparse_mla.layouts import CACHE_LAYOUTS, check_kv_cache_dtype

    assert check_kv_cache_dtype("FP8") == "fp8" and check_kv_cache_dtype("Fp8_Ds_Mla") == "fp8_ds_mla"
    assert check_kv_cache_dtype("AUTO", CACHE_LAYOUTS) == "auto"
    for bad in ("fp8 ", "", "fp9", None, 8, "bfloat16,fp8"):
        with pytest.raises(UserInputError, match="is not accepted; accepted: 'auto'"):
            check_kv_cache_dtype(bad)


def test_nope_fp8_ds_mla_row():
    """GLM-5.3-Flash's NoPE row: the 656-byte row without its 64 bf16 rope values; scales at the same place."""
    import pytest

    from sparse_mla.errors import UserInputError

    assert (L.FP8_DS_MLA_NOPE_ROW_BYTES, L.FP8_DS_MLA_NOPE_ROW_F32) == (528, 132)
    assert L.FP8_DS_MLA_NOPE_ROW_BYTES == L.FP8_DS_MLA_ROW_BYTES - 2 * L.ROPE_DIM == L.FP8_DS_MLA_ROPE_BF16 * 2
    assert L.fp8_ds_mla_row_bytes(512, 64) == 656 and L.fp8_ds_mla_row_bytes(512, 0) == 528
    with pytest.raises(UserInputError, match="has no fp8_ds_mla layout"):
        L.fp8_ds_mla_row_bytes(448, 64)


def test_vllm_sizes_the_nope_row_as_we_do():
    """vLLM 0.33/0.34's SM120 impl answers the NoPE row's bytes (the KV-cache spec's ``state_content_bytes``); 0.26
    has no such method."""
    from types import SimpleNamespace

    import pytest

    from sparse_mla.diagnose.probe import load_vllm_extensions

    load_vllm_extensions()
    sm120 = pytest.importorskip("vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm120")
    rows = getattr(sm120.FlashInferMLASparseSM120Impl, "get_fp8_ds_mla_row_bytes", None)
    if rows is None:
        pytest.skip("this vLLM (0.26) sizes every fp8_ds_mla row at 656 bytes: no NoPE row")
    assert rows(SimpleNamespace(kv_lora_rank=512, qk_rope_head_dim=0)) == L.FP8_DS_MLA_NOPE_ROW_BYTES
