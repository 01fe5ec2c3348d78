"""TRITON_MLA_SPARSE's vLLM glue on the CPU: index conversion (vLLM's Triton kernel under the interpreter) against
a plain PyTorch version, and the Impl's forward_mqa on a synthetic mixed batch against the float64 reference."""
from __future__ import annotations

import pytest
import torch

from backend_cases import make_impl, mixed_batch
from kernel_cases import rel_err
from sparse_mla.kernels.reference import req_local_to_global_slots_ref, sparse_mla_attention_ref


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("block_size", [16, 64])
def test_index_conversion_matches_plain_pytorch(block_size):
    from sparse_mla.vllm_plugin.backend import convert_to_global_slots

    b = mixed_batch(topk=128, block_size=block_size, seed=block_size, device=_device())
    # a position past the request's block table must become -1 too
    b.topk_indices[0, 0] = b.block_table.shape[1] * block_size + 3
    got = convert_to_global_slots(b.req_id_per_token, b.block_table, b.topk_indices, block_size)
    want = req_local_to_global_slots_ref(b.req_id_per_token, b.block_table, b.topk_indices, block_size)
    assert got.dtype == torch.int32
    assert torch.equal(got.cpu(), want.cpu())
    assert got[0, 0].item() == -1


@pytest.mark.parametrize("H,dtype", [(8, torch.float32), (3, torch.float32), (16, torch.float16)])
def test_forward_mqa_mixed_batch(H, dtype):
    from sparse_mla.vllm_plugin.backend import TritonMLASparseMetadata

    dev = _device()
    if dev == "cuda":
        dtype = torch.bfloat16
    b = mixed_batch(H=H, topk=128, dtype=dtype, device=dev, seed=H)
    buf = torch.full((b.T + 7, b.topk), 12345, dtype=torch.int32, device=dev)   # rows past T must be ignored
    buf[: b.T] = b.topk_indices
    impl = make_impl(H, buf)
    md = TritonMLASparseMetadata(
        num_reqs=len(b.seqs), max_query_len=max(q for _, q in b.seqs), max_seq_len=max(s for s, _ in b.seqs),
        num_actual_tokens=b.T, query_start_loc=None, slot_mapping=None, block_table=b.block_table,
        req_id_per_token=b.req_id_per_token, seq_lens=None, block_size=b.block_size, topk_tokens=b.topk,
        num_decodes=1, num_prefills=2, num_decode_tokens=1)
    out, lse = impl.forward_mqa((b.q_nope, b.q_pe), b.kv_cache, md, layer=None)
    assert lse is None
    assert out.shape == (b.T, H, 512) and out.dtype == b.q_nope.dtype and out.is_contiguous()
    slots = req_local_to_global_slots_ref(b.req_id_per_token.cpu(), b.block_table.cpu(), b.topk_indices.cpu(),
                                          b.block_size)
    ref, _ = sparse_mla_attention_ref(b.q_nope.cpu(), b.q_pe.cpu(), b.kv_cache.cpu(), slots, b.sm_scale)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    assert rel_err(out.cpu(), ref) < tol


def test_impl_rejects_fp8_cache():
    with pytest.raises(NotImplementedError, match="fp8_ds_mla"):
        make_impl(8, torch.zeros(1, 128, dtype=torch.int32), kv_cache_dtype="fp8_ds_mla")
