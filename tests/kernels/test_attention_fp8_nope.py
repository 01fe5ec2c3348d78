"""The Triton sparse MLA kernel on GLM-5.3-Flash's NoPE ``fp8_ds_mla`` rows (``kv_lora_rank`` 512, ``qk_rope_head_dim``
0: 528 bytes per token, :data:`sparse_mla.layouts.FP8_DS_MLA_NOPE_ROW_BYTES`), under TRITON_INTERPRET=1 on the CPU,
against the float64 reference (:func:`sparse_mla_attention_ref`, which decodes the rows with PyTorch's own
``float8_e4m3fn``), within the limits :mod:`sparse_mla.kernels.error_bounds` derives from the arithmetic (the 656-byte
row's derivation with a 512-term score: no rope term). The rows are written as vLLM 0.34.0's own writer writes them
(:func:`fp8_ds_mla_encode_vllm034_ref`: power-of-two scales, read from its CUDA kernel's SASS; vLLM has no Python
writer to call and no GPU runs here) from random bf16 latents; outputs are poisoned (NaN) before every run. Both
scale variants ("fold", "registers"), both e4m3 decode paths (software: SM80/86; hardware: SM89+), direct and
split-KV, fp32 and fp16 queries, -1 anywhere, all-invalid rows."""
from __future__ import annotations

import pytest
import torch

from sparse_mla import sparse_mla_attention
from sparse_mla.errors import UserInputError
from sparse_mla.kernels.cases import random_indices, random_q
from sparse_mla.kernels.reference import fp8_ds_mla_decode_ref, fp8_ds_mla_encode_vllm034_ref
from sparse_mla.layouts import FP8_DS_MLA_NOPE_ROW_BYTES
from test_attention_fp8 import check   # the 656-byte tests' run-and-check: poisoned outputs, derived limits

FP8 = "fp8_ds_mla"
ROW = FP8_DS_MLA_NOPE_ROW_BYTES


def nope_case(T, H, topk, *, num_blocks=6, block_size=16, dtype=torch.float32, pad="none", seed=0, strided_q=False,
              magnitude=1.0):
    """``(q_nope [T, H, 512], q_pe [T, H, 0], cache uint8 [num_blocks, block_size, 528], indices, sm_scale)``: the
    cache written by vLLM 0.34's writer from bf16 latents ~ N(0, magnitude^2) with a random magnitude per tile."""
    g = torch.Generator().manual_seed(seed)
    tile = torch.rand(num_blocks, block_size, 4, 1, generator=g) * 4 + 0.25
    kv_c = (torch.randn(num_blocks, block_size, 4, 128, generator=g) * tile * magnitude).reshape(
        num_blocks, block_size, 512).to(torch.bfloat16)
    cache = fp8_ds_mla_encode_vllm034_ref(kv_c)
    q_nope, q_pe = random_q(T, H, g, dtype=dtype, strided=strided_q)
    idx = random_indices(T, topk, num_blocks * block_size, g, pad=pad)
    return q_nope, q_pe[..., :0], cache, idx, 256 ** -0.5


# ---- vLLM 0.34's writer, as emulated, and the reference's decoder --------------------------------------------------

def test_writer_rows_hold_codes_then_four_power_of_two_scales():
    g = torch.Generator().manual_seed(1)
    kv_c = (torch.randn(3, 8, 512, generator=g) * torch.rand(3, 8, 1, generator=g) * 5).to(torch.bfloat16)
    kv_c[0, 0, 128:256] = 0.0                                 # an all-zero tile: s = max(0, 1e-4) -> 2**-13, codes 0
    cache = fp8_ds_mla_encode_vllm034_ref(kv_c)
    assert cache.dtype == torch.uint8 and cache.shape == (3, 8, ROW)
    rows = cache.reshape(-1, ROW)
    scale = rows[:, 512:528].contiguous().view(torch.float32).double()                          # [N, 4]
    x = kv_c.reshape(-1, 4, 128).double()
    s = torch.clamp(x.abs().amax(-1) / 448, min=float(torch.tensor(1e-4)))
    assert bool(((scale >= s) & (scale < 2 * s)).all())       # the power of two at or above s
    assert bool((torch.frexp(scale)[0] == 0.5).all())         # ... a power of two
    assert scale[0, 1].item() == 2.0 ** -13 and bool((rows[0, 128:256] == 0).all())
    dec = fp8_ds_mla_decode_ref(cache)
    assert dec.shape == (3, 8, 512) and dec.dtype == torch.float64
    err = (dec.reshape(-1, 4, 128) - x).abs()
    # x / scale <= 448 (scale >= amax / 448): round to nearest, half an ulp of 3 mantissa bits (2**-4 relative),
    # subnormals 2**-10 * scale
    assert bool((err <= torch.maximum(x.abs() * 2 ** -4, scale[..., None] * 2 ** -10)).all())


def test_decoder_reads_both_row_widths_and_refuses_others():
    g = torch.Generator().manual_seed(2)
    kv_c = torch.randn(2, 4, 512, generator=g).to(torch.bfloat16)
    wide = fp8_ds_mla_encode_vllm034_ref(kv_c, torch.randn(2, 4, 64, generator=g).to(torch.bfloat16))
    nope = fp8_ds_mla_encode_vllm034_ref(kv_c)
    assert wide.shape[-1] == 656 and torch.equal(wide[..., :ROW], nope)     # the 656-byte row minus its rope part
    assert torch.equal(fp8_ds_mla_decode_ref(wide)[..., :512], fp8_ds_mla_decode_ref(nope))
    with pytest.raises(ValueError, match="528"):
        fp8_ds_mla_decode_ref(torch.zeros(2, 600, dtype=torch.uint8))


# ---- the kernel against the reference --------------------------------------------------------------------------

@pytest.mark.interpreter
@pytest.mark.parametrize("fp8_scales", ["fold", "registers"])
@pytest.mark.parametrize("capability", [(8, 0), (9, 0)])          # software / hardware e4m3 decode
@pytest.mark.parametrize("path", ["direct", "split"])
def test_paths_variants_decoders(fp8_scales, capability, path):
    seed = 100 + {"fold": 0, "registers": 1}[fp8_scales] * 4 + capability[0] % 2 * 2 + (path == "split")
    kw = dict(block_n=16, num_splits=3) if path == "split" else dict(num_splits=1)
    check(*nope_case(2, 8, 56, pad="middle", seed=seed), fp8_scales=fp8_scales, capability=capability, **kw)


@pytest.mark.interpreter
@pytest.mark.parametrize("pad", ["all", "rows", "head"])
def test_padding_and_empty_rows(pad):
    check(*nope_case(3, 4, 48, pad=pad, seed=120 + len(pad)), block_n=16, num_splits=2)


@pytest.mark.interpreter
@pytest.mark.parametrize("block_dv, fp8_scales", [(128, "fold"), (64, "registers")])
def test_output_column_split(block_dv, fp8_scales):
    check(*nope_case(2, 5, 40, pad="middle", seed=130 + block_dv), block_dv=block_dv, fp8_scales=fp8_scales,
          block_n=16, num_splits=2)


@pytest.mark.interpreter
@pytest.mark.parametrize("fp8_scales", ["fold", "registers"])
def test_fp16_strided_queries_flat_cache_and_fp16_dots(fp8_scales):
    """fp16 queries (an fp16 model), strided, on the cache read flat ([slots, 528], as vLLM's ``flat_kv_row_view``
    hands it), with the interpreter's fp32 dots and with fp16 dots (small latents: the fold kernel's 2**9 factor)."""
    q_nope, q_pe, cache, idx, scale = nope_case(2, 6, 30, dtype=torch.float16, strided_q=True, pad="middle", seed=140)
    assert not q_nope.is_contiguous()
    check(q_nope, q_pe, cache.view(-1, ROW), idx.long(), scale, fp8_scales=fp8_scales, num_splits=2, block_n=16)
    small = nope_case(2, 8, 64, dtype=torch.float16, seed=141, magnitude=1e-3)
    check(*small, dot_dtype=torch.float16, fp8_scales=fp8_scales)


@pytest.mark.interpreter
def test_layout_mismatches_are_refused():
    q_nope, q_pe, cache, idx, scale = nope_case(1, 2, 16, seed=150)
    wide_q_pe = torch.zeros(1, 2, 64, dtype=q_nope.dtype)
    with pytest.raises(UserInputError, match="accepted: 656 bytes per token"):
        sparse_mla_attention(q_nope, wide_q_pe, cache, idx, scale, kv_cache_dtype=FP8)
    with pytest.raises(UserInputError, match="accepted: 528 bytes per token"):
        sparse_mla_attention(q_nope, q_pe, torch.zeros(6, 16, 656, dtype=torch.uint8), idx, scale,
                             kv_cache_dtype=FP8)
    with pytest.raises(UserInputError, match="512 / 0"):
        sparse_mla_attention(q_nope[..., :256], q_pe, cache, idx, scale, kv_cache_dtype=FP8)
