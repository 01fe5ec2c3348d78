"""TRITON_MLA_SPARSE's metadata builder on the CPU: vLLM's ``SparseMLACommonMetadataBuilder`` (which the backend
subclasses) fed synthetic ``CommonAttentionMetadata`` for mixed, decode-only and prefill-only batches.

The builder is constructed with a real ``MLAAttentionSpec`` and a minimal stand-in for ``VllmConfig`` carrying only
what vLLM reads (``SparseMLACommonMetadataBuilder.__init__`` / ``determine_chunked_prefill_workspace_size``,
``AttentionMetadataBuilder._init_reorder_batch_threshold``, ``get_mla_dims``).

Two things vLLM does that need the NVIDIA driver, handled here:

* ``_build_req_id_per_token`` copies through ``np_to_pinned_tensor``, which pins host memory when
  ``vllm.utils.torch_utils.PIN_MEMORY`` is true; without a CUDA/CPU vLLM platform (this machine's platform is
  ``UnspecifiedPlatform``) it is true and ``pin_memory()`` raises "Found no NVIDIA driver". The tests set it to
  False (a GPU machine pins; the values are the same).
* the chunked-context part of the prefill metadata (a prefill with earlier context *and* a prefill backend) calls
  ``build_mla_chunked_context_metadata``, which allocates with ``pin_memory=True`` unconditionally; that one case
  runs only where CUDA is available. Everything else (including prefill metadata for fresh prompts, with a
  stand-in prefill backend) is checked here.
"""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.every_line

LAYER = "model.layers.0.self_attn.attn"
INDEX_TOPK = 2048
BLOCK = 64
ns = types.SimpleNamespace


class FakePrefillBackend:
    """What the builder uses of an MLA prefill backend: ``clone()`` and ``prepare_metadata(prefill)``."""

    def __init__(self):
        self.prepared = []

    def clone(self):
        return self

    def prepare_metadata(self, prefill):
        self.prepared.append(prefill)


def _vllm_config(prefill_backend=None, index_topk=INDEX_TOPK, speculative_tokens=None, dcp=1):
    hf = ns(index_topk=index_topk, kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256,
            q_lora_rank=2048)
    spec = None if speculative_tokens is None else ns(num_speculative_tokens=speculative_tokens,
                                                      parallel_drafting=False,
                                                      max_num_new_slots_for_drafting=0)   # (0.34: MTP adds none)
    return ns(   # what the builder reads of the engine's configuration (vLLM 0.33 reads the arch config, the cache
        # dtype and the attention config too)
        model_config=ns(hf_config=hf, hf_text_config=hf, dtype=torch.bfloat16, max_model_len=4096,
                        model_arch_config=ns(total_num_attention_heads=64), use_mla=True),
        scheduler_config=ns(max_num_batched_tokens=512, max_num_seqs=16),
        cache_config=ns(block_size=BLOCK, cache_dtype="auto"),
        parallel_config=ns(prefill_context_parallel_size=1, decode_context_parallel_size=dcp,
                           cp_kv_cache_interleave_size=1),
        compilation_config=ns(static_forward_context={LAYER: ns(prefill_backend=prefill_backend)}),
        attention_config=ns(hisparse_config=None, sparse_mla_force_mqa=False),
        speculative_config=spec,
    )


@pytest.fixture(autouse=True)
def no_pinned_memory(monkeypatch):
    if not torch.cuda.is_available():
        import vllm.model_executor.layers.attention.sparse_mla_attention as sma
        import vllm.utils.torch_utils as tu

        monkeypatch.setattr(tu, "PIN_MEMORY", False)
        monkeypatch.setattr(sma, "PIN_MEMORY", False, raising=False)     # vLLM 0.33 imports it by name


@pytest.fixture(scope="module")
def spec():
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    return MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=576, dtype=torch.bfloat16,
                            cache_dtype_str="auto")


def make_builder(spec, **kw):
    from sparse_mla.vllm_plugin.backend import TritonMLASparseMetadataBuilder

    return TritonMLASparseMetadataBuilder(spec, [LAYER], _vllm_config(**kw), torch.device("cpu"))


def common_metadata(query_lens, seq_lens, max_blocks=8, seed=0):
    """``CommonAttentionMetadata`` of a batch in vLLM's order (decodes first), with a shuffled block table."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    g = torch.Generator().manual_seed(seed)
    n = len(query_lens)
    qsl = torch.tensor(np.concatenate([[0], np.cumsum(query_lens)]), dtype=torch.int32)
    T = int(qsl[-1])
    block_table = torch.randperm(n * max_blocks + 5, generator=g)[: n * max_blocks].to(torch.int32).view(n, max_blocks)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        num_reqs=n, num_actual_tokens=T, max_query_len=max(query_lens), max_seq_len=max(seq_lens),
        block_table_tensor=block_table, slot_mapping=torch.arange(T, dtype=torch.int64) + 1000,
        seq_lens_cpu_upper_bound=torch.tensor(seq_lens, dtype=torch.int32))


def _req_ids(query_lens):
    return np.repeat(np.arange(len(query_lens)), query_lens)


def _check_passthrough(md, cm, query_lens):
    assert md.num_reqs == len(query_lens) and md.num_actual_tokens == sum(query_lens)
    assert md.max_query_len == max(query_lens) and md.max_seq_len == cm.max_seq_len
    assert md.block_table is cm.block_table_tensor
    assert md.seq_lens is cm.seq_lens
    assert md.query_start_loc is cm.query_start_loc
    assert md.slot_mapping is cm.slot_mapping
    assert md.req_id_per_token.dtype == torch.int32
    np.testing.assert_array_equal(md.req_id_per_token.numpy(), _req_ids(query_lens))
    assert md.block_size == BLOCK and md.topk_tokens == INDEX_TOPK
    assert md.cp_kv_cache_interleave_size == 1


# ---- construction --------------------------------------------------------------------------------------------------

def test_builder_class_declarations(spec):
    from vllm.v1.attention.backend import AttentionCGSupport

    from sparse_mla.vllm_plugin.backend import TritonMLASparseMetadata, TritonMLASparseMetadataBuilder

    b = make_builder(spec)
    assert TritonMLASparseMetadataBuilder._cudagraph_support is AttentionCGSupport.UNIFORM_BATCH
    assert TritonMLASparseMetadataBuilder.get_cudagraph_support(_vllm_config(), spec) is AttentionCGSupport.UNIFORM_BATCH
    assert b.reorder_batch_threshold == 1
    assert b.metadata_cls is TritonMLASparseMetadata
    assert b.topk_tokens == INDEX_TOPK
    assert (b.mla_dims.kv_lora_rank, b.mla_dims.qk_rope_head_dim) == (512, 64)
    assert b.chunked_prefill_workspace.shape[1] == 576 and b.chunked_prefill_workspace.dtype == torch.bfloat16
    assert b.req_id_per_token_buffer.shape == (512,)
    assert b._prefill_backend is None


def test_reorder_threshold_follows_speculative_tokens(spec):
    """``_init_reorder_batch_threshold(1, supports_spec_as_decode=True)``: with 2 speculative tokens a request with
    up to 3 query tokens counts as a decode."""
    assert make_builder(spec, speculative_tokens=2).reorder_batch_threshold == 3


def test_topk_from_config(spec):
    b = make_builder(spec, index_topk=512)
    md = b.build(0, common_metadata([1, 7], [40, 7]))
    assert md.topk_tokens == 512


# ---- batches -------------------------------------------------------------------------------------------------------

def test_mixed_batch(spec):
    """2 decodes (query length 1), a chunked prefill (5 new tokens after 80 cached) and a fresh 37-token prompt."""
    query_lens, seq_lens = [1, 1, 5, 37], [300, 200, 85, 37]
    cm = common_metadata(query_lens, seq_lens)
    md = make_builder(spec).build(0, cm)
    _check_passthrough(md, cm, query_lens)
    assert (md.num_decodes, md.num_prefills, md.num_decode_tokens) == (2, 2, 2)
    assert md.prefill is None and md.prefill_max_seq_len == 0       # no prefill backend: all tokens to forward_mqa
    assert md.req_id_per_token.tolist() == [0, 1] + [2] * 5 + [3] * 37


def test_decode_only_batch(spec):
    query_lens, seq_lens = [1, 1, 1], [1000, 65, 2]
    cm = common_metadata(query_lens, seq_lens, max_blocks=16)
    md = make_builder(spec).build(0, cm)
    _check_passthrough(md, cm, query_lens)
    assert (md.num_decodes, md.num_prefills, md.num_decode_tokens) == (3, 0, 3)
    assert md.prefill is None


def test_prefill_only_batch(spec):
    query_lens, seq_lens = [16, 37, 2], [16, 37, 2]
    cm = common_metadata(query_lens, seq_lens)
    md = make_builder(spec).build(0, cm)
    _check_passthrough(md, cm, query_lens)
    assert (md.num_decodes, md.num_prefills, md.num_decode_tokens) == (0, 3, 0)


def test_buffer_reuse_does_not_leak_previous_batch(spec):
    """The builder reuses one ``req_id_per_token`` buffer; a smaller batch after a larger one reads only its own
    tokens (vLLM 0.26's builder also zeroes the buffer past them; 0.33's hands over only the batch's rows)."""
    from sparse_mla.vllm_lines import current_line

    b = make_builder(spec)
    b.build(0, common_metadata([1, 1, 5, 37], [300, 200, 85, 37]))
    md = b.build(0, common_metadata([1, 3], [10, 3]))
    assert md.req_id_per_token.tolist() == [0, 1, 1, 1]
    if current_line() == "0.26":
        assert int(b.req_id_per_token_buffer[4:].abs().sum()) == 0


def test_prefill_metadata_with_prefill_backend(spec):
    """With an MLA prefill backend (the dense MHA path for short prompts): prefill metadata for the prefill
    requests only, relative to the first prefill token; ``prefill_max_seq_len`` is what ``MLAAttention`` compares
    with ``topk_tokens`` to route prefill tokens to ``forward_mha``."""
    fake = FakePrefillBackend()
    query_lens, seq_lens = [1, 1, 5, 37], [300, 200, 5, 37]        # fresh prompts: no chunked context
    cm = common_metadata(query_lens, seq_lens)
    md = make_builder(spec, prefill_backend=fake).build(0, cm)
    _check_passthrough(md, cm, query_lens)
    assert (md.num_decodes, md.num_prefills, md.num_decode_tokens) == (2, 2, 2)
    assert md.prefill_max_seq_len == 37
    p = md.prefill
    assert p is not None and fake.prepared == [p] and p.prefill_backend is fake
    assert torch.equal(p.block_table, cm.block_table_tensor[2:])
    assert p.query_start_loc.tolist() == [0, 5, 42]
    assert p.max_query_len == 37
    assert p.chunked_context is None
    assert p.q_data_type == torch.bfloat16


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="vLLM's build_mla_chunked_context_metadata allocates pinned host memory "
                           "(pin_memory=True), which needs the NVIDIA driver")
def test_chunked_prefill_context_metadata(spec):
    fake = FakePrefillBackend()
    query_lens, seq_lens = [1, 1, 5, 37], [300, 200, 85, 37]
    cm = common_metadata(query_lens, seq_lens)
    md = make_builder(spec, prefill_backend=fake).build(0, cm)
    assert md.prefill_max_seq_len == 85
    cc = md.prefill.chunked_context
    assert cc is not None
    assert sum(cc.seq_tot) == 80 and max(cc.max_seq_lens) == 80     # the chunked prefill's 80 cached tokens
