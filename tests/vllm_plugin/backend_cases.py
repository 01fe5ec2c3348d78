"""A synthetic mixed batch as vLLM hands it to a sparse MLA backend: requests with a decode token, a chunked
prefill and a fresh prompt, a shuffled block table, request-local causal top-k indices with -1 tails."""
from __future__ import annotations

from types import SimpleNamespace

import torch

DL, DR = 512, 64


def mixed_batch(H=8, topk=128, block_size=64, device="cpu", dtype=torch.float32, seed=0,
                seqs=((300, 1), (200, 5), (90, 90)), dr=DR):
    """seqs: (seq_len, query_len) per request (decode first, as vLLM orders them); ``dr``: the rope part's width (0:
    GLM-5.3-Flash's NoPE head 512).

    Returns a namespace with q_nope/q_pe (strided views, like vLLM's), kv_cache, block_table, req_id_per_token,
    topk_indices (request-local), and the metadata fields forward_mqa reads."""
    g = torch.Generator().manual_seed(seed)
    blocks_per_req = [(s + block_size - 1) // block_size for s, _ in seqs]
    num_blocks = sum(blocks_per_req) + 3
    perm = torch.randperm(num_blocks, generator=g)
    max_blocks = max(blocks_per_req) + 1
    block_table = torch.zeros(len(seqs), max_blocks, dtype=torch.int32)
    k = 0
    for r, nb in enumerate(blocks_per_req):
        block_table[r, :nb] = perm[k:k + nb].to(torch.int32)
        k += nb
    T = sum(q for _, q in seqs)
    req_id = torch.cat([torch.full((q,), r, dtype=torch.int32) for r, (_, q) in enumerate(seqs)])
    rows = []
    for s, q in seqs:
        for j in range(q):
            pos = s - q + j                   # this token's position; it may attend to 0..pos
            n = min(topk, pos + 1)
            sel = torch.randperm(pos + 1, generator=g)[:n].to(torch.int32)
            row = torch.full((topk,), -1, dtype=torch.int32)
            row[:n] = sel
            rows.append(row)
    topk_indices = torch.stack(rows)
    kv_cache = torch.randn(num_blocks, block_size, DL + dr, generator=g).to(dtype)
    q_nope = torch.randn(H, T, DL, generator=g).to(dtype).transpose(0, 1)            # strides (512, T*512, 1)
    q_pe = torch.randn(T, H, 192 + dr, generator=g).to(dtype)[..., 192:]             # slice of the full q
    ns = SimpleNamespace(q_nope=q_nope.to(device), q_pe=q_pe.to(device), kv_cache=kv_cache.to(device),
                         block_table=block_table.to(device), req_id_per_token=req_id.to(device),
                         topk_indices=topk_indices.to(device), block_size=block_size, T=T, H=H, topk=topk,
                         sm_scale=(192 + dr) ** -0.5, seqs=seqs)
    return ns


def make_impl(H, topk_indices_buffer, kv_cache_dtype="auto", dr=DR):
    """TritonMLASparseImpl with GLM-5 dims (``dr`` 0: GLM-5.3-Flash's NoPE head), built as MLAAttention builds it
    (keyword arguments)."""
    from types import SimpleNamespace as ns

    from vllm.config import set_current_vllm_config

    from sparse_mla.diagnose.meta_model import _process_groups
    from sparse_mla.vllm_plugin.backend import TritonMLASparseImpl

    # what vLLM 0.33's impl reads of the engine's configuration (DCP size; the index group: no HiSparse), and 0.34's
    # (whether ShardQ applies: TP size, the cudagraph mode, the ShardQ switch)
    config = ns(parallel_config=ns(decode_context_parallel_size=1, prefill_context_parallel_size=1,
                                   tensor_parallel_size=1),
                attention_config=ns(hisparse_config=None, sparse_mla_shard_q=False),
                compilation_config=ns(custom_ops=[], mode=0, cudagraph_mode=None))
    with set_current_vllm_config(config), _process_groups(1):     # (0.33 asks the TP group's size)
        return TritonMLASparseImpl(
            num_heads=H, head_size=DL + dr, scale=(192 + dr) ** -0.5, num_kv_heads=1, alibi_slopes=None,
            sliding_window=None, kv_cache_dtype=kv_cache_dtype, logits_soft_cap=None, attn_type="decoder",
            kv_sharing_target_layer_name=None, q_lora_rank=2048, kv_lora_rank=DL, qk_nope_head_dim=192,
            qk_rope_head_dim=dr, qk_head_dim=192 + dr, v_head_dim=256, kv_b_proj=None, indexer=None,
            topk_indices_buffer=topk_indices_buffer)


#: The arguments of ``AttentionBackend.validate_configuration`` for GLM-5's sparse MLA layer (dtype, KV dtype and
#: capability are the test's).
GOOD = dict(head_size=576, kv_cache_dtype="auto", block_size=64, use_mla=True, has_sink=False, use_sparse=True,
            use_mm_prefix=False, use_per_head_quant_scales=False, attn_type="decoder")


def generic_backend():
    """A trivial ``AttentionBackend`` declaring what TRITON_MLA_SPARSE declares (dtypes, KV-cache dtypes, block size,
    head size, MLA, sparse, capability >= 8.0); its ``validate_configuration`` is vLLM's base-class logic, untouched,
    so its reasons are vLLM's current wording."""
    from vllm.v1.attention.backend import AttentionBackend

    from sparse_mla.vllm_plugin.backend import TritonMLASparseBackend

    class Generic(AttentionBackend):
        supported_dtypes = [torch.float16, torch.bfloat16]
        supported_kv_cache_dtypes = list(TritonMLASparseBackend.supported_kv_cache_dtypes)

        @staticmethod
        def get_supported_kernel_block_sizes(kv_cache_spec=None):
            return [64]

        @classmethod
        def get_supported_head_sizes(cls):
            return TritonMLASparseBackend.get_supported_head_sizes()

        @classmethod
        def is_mla(cls):
            return True

        @classmethod
        def is_sparse(cls):
            return True

        @classmethod
        def supports_compute_capability(cls, capability):
            return capability.major >= 8

    return Generic
