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
