"""sparse_mla.launch.glm5_reference: building blocks (RoPE, indexer top-k, slot conversion, gather attention), the
attention_fn hook, and the whole forward against transformers' independent GlmMoeDsaForCausalLM (which implements
the DSA top-k mask in its eager path), including a prompt longer than index_topk."""
from __future__ import annotations

import json
import math

import pytest
import torch

from sparse_mla.launch import checkpoint as ck
from sparse_mla.launch import glm5_reference as gr
from sparse_mla.kernels.error_bounds import attention_limits, check_attention, compare_attention
from sparse_mla.kernels.reference import gather_rows_ref
from sparse_mla.launch.forward_rounding import forward_limit
from sparse_mla.errors import UserInputError

INDEX_TOPK = 128  # the smallest vLLM accepts; keeps the CPU test short
LONG = 160  # > INDEX_TOPK: the indexer's selection binds for rows 128..159


@pytest.fixture(scope="module")
def ckpt(module_tmp):
    return ck.make_checkpoint(module_tmp("ref") / "glm5tiny", index_topk=INDEX_TOPK, seed=0)


@pytest.fixture(scope="module")
def loaded(ckpt):
    return ck.load_checkpoint(ckpt)


@pytest.fixture(scope="module")
def ref(loaded):
    cfg, sd = loaded
    return gr.Glm5Reference(cfg, sd)


@pytest.fixture(scope="module")
def hf_model(ckpt):
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "GlmMoeDsaForCausalLM"):
        pytest.skip("this transformers has no GlmMoeDsaForCausalLM")
    m = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32,
                                                          attn_implementation="eager")
    assert type(m).__name__ == "GlmMoeDsaForCausalLM"
    # transformers' glm_moe_dsa builds q_a_layernorm / kv_a_layernorm with its default eps 1e-6, where vLLM
    # (deepseek_v2.py) and the reference use rms_norm_eps (1e-5 here): a modelling difference of the size of float32
    # rounding (80-90 % of the limit below), aligned so that the comparison sees rounding only.
    eps = json.loads((ckpt / "config.json").read_text())["rms_norm_eps"]
    for layer in m.model.layers:
        layer.self_attn.q_a_layernorm.variance_epsilon = eps
        layer.self_attn.kv_a_layernorm.variance_epsilon = eps
    return m.eval()


@pytest.fixture(scope="module")
def short(loaded, ref, hf_model):
    """The 40-token prompt: ids, our logits, transformers' logits and the float32 rounding limit between them."""
    ids = _ids(40)
    with torch.no_grad():
        theirs = hf_model(ids[None]).logits[0]
    return ids, ref.forward(ids), theirs, forward_limit(*loaded, ids)


def _ids(n, vocab=2048, seed=1):
    return torch.randint(2, vocab, (n,), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ building blocks
def test_positions_to_slots_shuffled_table():
    bs = 4
    table = torch.tensor([5, 2, 7], dtype=torch.int32)
    local = torch.tensor([[0, 3, 4, 9, -1], [11, 8, -1, -1, 1]], dtype=torch.int32)
    slots = gr.positions_to_slots(local, table, bs)
    expected = [[5 * 4 + 0, 5 * 4 + 3, 2 * 4 + 0, 7 * 4 + 1, -1], [7 * 4 + 3, 7 * 4 + 0, -1, -1, 5 * 4 + 1]]
    assert slots.dtype == torch.int32 and slots.tolist() == expected


def test_make_block_table():
    t, nb = gr.make_block_table(300, 64)
    assert t.numel() == 5 and nb == 8 and len(set(t.tolist())) == 5 and t.tolist() != list(range(5))
    assert int(t.max()) < nb
    t2, nb2 = gr.make_block_table(300, 64, shuffle=False)
    assert t2.tolist() == list(range(5)) and nb2 == 5


def test_indexer_topk_brute_force():
    g = torch.Generator().manual_seed(0)
    T, Hi, Di, K = 9, 3, 8, 4
    q, k, w = torch.randn(T, Hi, Di, generator=g), torch.randn(T, Di, generator=g), torch.randn(T, Hi, generator=g)
    out = gr.indexer_topk(q, k, w, K, chunk=4)
    assert out.shape == (T, K) and out.dtype == torch.int32
    for t in range(T):
        logits = [sum(max(float(q[t, h] @ k[s]), 0.0) * float(w[t, h]) for h in range(Hi)) for s in range(t + 1)]
        best = sorted(sorted(range(t + 1), key=lambda s: -logits[s])[:K])
        assert out[t].tolist() == best + [-1] * (K - len(best)), t


def test_rope_conventions_match_vllm():
    rot = pytest.importorskip("vllm.model_executor.layers.rotary_embedding.base")
    T, H, d = 7, 3, 64
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(T, H, d, generator=g), torch.randn(T, 1, d, generator=g)
    pos = torch.arange(T) * 37
    cos, sin = gr.rope_cos_sin(torch.arange(300), d, 1e6)
    cache = torch.cat([cos, sin], dim=-1)  # vLLM's cos_sin_cache layout
    c, s = gr.rope_cos_sin(pos, d, 1e6)
    for neox in (False, True):
        vq, vk = rot.RotaryEmbedding.forward_static(pos, q.clone(), k.clone(), d, d, cache, neox)
        torch.testing.assert_close(gr.apply_rope(q, c, s, interleaved=not neox), vq)
        torch.testing.assert_close(gr.apply_rope(k, c, s, interleaved=not neox), vk)


def _naive_attention(qn, qp, cache, idx, scale):
    kv = cache.reshape(-1, cache.shape[-1]).double()
    T, H, Dc = qn.shape
    out, lse = torch.zeros(T, H, Dc, dtype=torch.float64), torch.full((T, H), -math.inf, dtype=torch.float64)
    for t in range(T):
        sl = [int(s) for s in idx[t] if s >= 0]
        if not sl:
            continue
        kk = kv[sl]
        sc = torch.cat([qn[t], qp[t]], -1).double() @ kk.T * scale
        lse[t] = torch.logsumexp(sc, -1)
        out[t] = torch.softmax(sc, -1) @ kk[:, :Dc]
    return out, lse


def test_gather_attention_vs_naive():
    g = torch.Generator().manual_seed(0)
    T, H, Dc, Dr, nb, bs = 6, 4, 32, 8, 3, 4
    qn, qp = torch.randn(T, H, Dc, generator=g), torch.randn(T, H, Dr, generator=g)
    cache = torch.randn(nb, bs, Dc + Dr, generator=g)
    idx = torch.tensor([[0, 5, 11, -1], [-1, -1, -1, -1], [3, 3, 7, 2], [-1, 9, -1, 1], [4, 4, 4, 4], [10, 0, 1, 2]],
                       dtype=torch.int32)
    out, lse = gr.gather_sparse_mla_attention(qn, qp, cache, idx, 0.3, chunk=4)
    eo, el = _naive_attention(qn.double(), qp.double(), cache.double(), idx, 0.3)
    k, valid = gather_rows_ref(cache, idx)
    lim = attention_limits(torch.cat([qn, qp], -1).double(), k, valid, 0.3, out_dtype=torch.float32, dv=Dc)
    assert compare_attention(out, lse, eo, el, lim, valid).ok      # float32 gather within its rounding limits
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    assert (out[1] == 0).all() and torch.isneginf(lse[1]).all()


def test_gather_attention_matches_shared_reference():
    """Same contract as the workbook's kernel reference (sparse_mla.kernels.reference), if present."""
    ref_mod = pytest.importorskip("sparse_mla.kernels.reference")
    g = torch.Generator().manual_seed(1)
    T, H, nb, bs = 5, 8, 4, 64
    qn, qp = torch.randn(T, H, 512, generator=g), torch.randn(T, H, 64, generator=g)
    cache = torch.randn(nb, bs, 576, generator=g)
    idx = torch.randint(-1, nb * bs, (T, 128), generator=g, dtype=torch.int32)
    a_out, a_lse = gr.gather_sparse_mla_attention(qn, qp, cache, idx, 1 / 16)
    c = check_attention(a_out, a_lse, qn, qp, cache, idx, 1 / 16)   # against the float64 kernel reference
    assert c.ok, c.explain()


# ------------------------------------------------------------------ whole model
def test_forward_finite(ref):
    logits = ref.forward(_ids(40))
    assert logits.shape == (40, 2048) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    assert 0.3 < logits.std().item() < 10
    assert len(ref.last["topk_local"]) == 2 and ref.last["topk_local"][0].shape == (40, INDEX_TOPK)
    # short prompt: every causal token selected
    tl = ref.last["topk_local"][1]
    assert tl[39, :40].tolist() == list(range(40)) and (tl[39, 40:] == -1).all() and tl[0, 0] == 0


@pytest.mark.slow
def test_block_table_layout_does_not_change_logits(ref):
    ids = _ids(100)
    a = ref.forward(ids)  # default: shuffled table
    shuffled = ref.last["block_table"]
    assert shuffled.tolist() != list(range(shuffled.numel()))
    b = ref.forward(ids, block_table=torch.arange(2, dtype=torch.int32))
    c = ref.forward(ids, block_table=torch.tensor([9, 4], dtype=torch.int32), num_blocks=10)
    # slots follow the table
    sl = ref.last["slots"][0][99]
    assert sorted(sl[sl >= 0].tolist()) == [4 * 64 + p for p in range(100 - 64)] + [9 * 64 + p for p in range(64)]
    # the same arithmetic on the same values in another slot order: identical up to float32 rounding
    lim = forward_limit(ref.config, ref.w, ids, samples=16)
    assert lim.share(a, b) < 1 and lim.share(a, c) < 1


@pytest.mark.slow   # ~35 s (the 16-sample limit); parity_cases and test_engine pass attention_fn in the default tier
def test_attention_fn_is_honored(loaded):
    cfg, sd = loaded
    calls = []

    def spy(q_nope_absorbed, q_pe, kv_cache, indices, sm_scale):
        calls.append(dict(q=tuple(q_nope_absorbed.shape), pe=tuple(q_pe.shape), kv=tuple(kv_cache.shape),
                          idx=(tuple(indices.shape), indices.dtype), scale=sm_scale, indices=indices.clone(),
                          cache=kv_cache.clone()))
        return gr.gather_sparse_mla_attention(q_nope_absorbed, q_pe, kv_cache, indices, sm_scale)

    T = 70
    r = gr.Glm5Reference(cfg, sd, attention_fn=spy)
    ids = _ids(T)
    base = r.forward(ids)
    assert len(calls) == cfg["num_hidden_layers"]
    nb = r.last["num_blocks"]
    for c in calls:
        assert c["q"] == (T, 64, 512) and c["pe"] == (T, 64, 64) and c["kv"] == (nb, 64, 576)
        assert c["idx"] == ((T, INDEX_TOPK), torch.int32) and c["scale"] == pytest.approx(1 / 16)
        # every listed slot holds a written token at a causal position
        table = r.last["block_table"].tolist()
        slot_to_pos = {table[p // 64] * 64 + p % 64: p for p in range(T)}
        for t in (0, 33, T - 1):
            s = [int(x) for x in c["indices"][t] if x >= 0]
            assert sorted(slot_to_pos[x] for x in s) == list(range(t + 1))
        unwritten = [x for x in range(nb * 64) if x not in slot_to_pos]
        assert (c["cache"].reshape(-1, 576)[unwritten] == 0).all()
    # causal: a prefix gives the same logits
    r.attention_fn = gr.gather_sparse_mla_attention
    lim = forward_limit(cfg, sd, ids[:8], samples=16)
    assert lim.share(r.forward(ids[:8]), base[:8]) < 1
    # attribute replacement is honored too, and the output depends on it
    r.attention_fn = lambda q, pe, kv, idx, sc: (torch.zeros_like(q), torch.zeros(q.shape[:2]))
    assert lim.share(r.forward(ids[:8]), base[:8]) > 100


def test_rejects_unsupported(loaded):
    cfg, sd = loaded
    with pytest.raises(UserInputError, match="yarn"):
        gr.Glm5Reference(dict(cfg, rope_parameters={"rope_type": "yarn", "factor": 40}), sd)
    with pytest.raises(UserInputError, match="index_topk"):
        gr.Glm5Reference({k: v for k, v in cfg.items() if k != "index_topk"}, sd)
    with pytest.raises(UserInputError, match="lm_head"):
        gr.Glm5Reference(cfg, {k: v for k, v in sd.items() if k != "lm_head.weight"})


# ------------------------------------------------------------------ cross-check with transformers
@pytest.mark.slow
def test_matches_transformers_short_prompt(short):
    """T = 40 <= index_topk: every causal token is selected in both, so this checks the dense MLA/MoE math, within
    the float32 rounding limit of the two forwards (sparse_mla.launch.forward_rounding)."""
    ids, ours, theirs, lim = short
    assert lim.share(ours, theirs) < 1, lim.share(ours, theirs)
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()


@pytest.mark.slow          # with the comparison it guards (the same transformers model and 40-token limit, ~1 min)
@pytest.mark.parametrize("fault", ["sm_scale * (1 + 1e-3)", "rope not interleaved", "no q_a_layernorm weight"])
def test_transformers_comparison_catches_a_modelling_fault(loaded, short, fault, monkeypatch):
    """The limit is not so loose that a small modelling error hides in it."""
    ids, _, theirs, lim = short
    wrong = gr.Glm5Reference(*loaded)
    if fault.startswith("sm_scale"):
        wrong.sm_scale *= 1 + 1e-3
    elif fault.startswith("rope"):
        real = gr.apply_rope
        monkeypatch.setattr(gr, "apply_rope", lambda x, c, s, interleaved=False: real(x, c, s, not interleaved))
    else:
        for name in list(wrong.w):
            if name.endswith("q_a_layernorm.weight"):
                wrong.w[name] = torch.ones_like(wrong.w[name])
    assert lim.share(wrong.forward(ids), theirs) > 10


@pytest.mark.slow
def test_matches_transformers_sparse_prompt(loaded, ref, hf_model):
    """T = 160 > index_topk = 128: both models must select the same top-k per row and layer (transformers' eager
    path turns its indexer's top-k into an additive mask), and logits must match; a dense run differs a lot."""
    cfg, sd = loaded
    ids = _ids(LONG)
    ours = ref.forward(ids)
    our_topk = ref.last["topk_local"]
    caught = []
    hooks = [layer.self_attn.indexer.register_forward_hook(lambda m, i, o: caught.append(o[0]))
             for layer in hf_model.model.layers]
    try:
        with torch.no_grad():
            theirs = hf_model(ids[None]).logits[0]
    finally:
        for h in hooks:
            h.remove()
    assert len(caught) == len(our_topk) == cfg["num_hidden_layers"]
    for layer, (hf_idx, mine) in enumerate(zip(caught, our_topk)):
        for t in range(INDEX_TOPK - 1, LONG):  # rows where transformers' top-k has no masked picks
            assert set(hf_idx[t].tolist()) == set(mine[t].tolist()), (layer, t)
    lim = forward_limit(cfg, sd, ids, samples=16)   # seeded: the same limit everywhere; 16 as the argument assumes
    assert lim.share(ours, theirs) < 1, lim.share(ours, theirs)
    # a dense run (index_topk 256 > T) does the same arithmetic on the rows before index_topk, and differs far
    # beyond rounding after it
    dense = gr.Glm5Reference(dict(cfg, index_topk=256), sd).forward(ids)
    assert lim.share(dense[:INDEX_TOPK], ours[:INDEX_TOPK], slice(INDEX_TOPK)) < 1
    assert lim.share(dense[INDEX_TOPK:], ours[INDEX_TOPK:], slice(INDEX_TOPK, None)) > 100


@pytest.mark.parametrize("ids, says", [(torch.tensor([[1, 2], [3, 4]]), "shape \\(2, 2\\)"),
                                       (torch.tensor([1.0, 2.0]), "dtype torch.float32"),
                                       (torch.tensor([-1, 2]), "token id -1"), (torch.tensor([10**6]), "token id 1000000"),
                                       (torch.tensor([], dtype=torch.long), "shape \\(0,\\)")])
def test_forward_refuses_ids_it_cannot_embed(ref, ids, says):
    with pytest.raises(UserInputError, match=says):
        ref.forward(ids)


def test_gather_attention_rejects_out_of_range_slot():
    q, pe, cache = torch.zeros(1, 2, 8), torch.zeros(1, 2, 4), torch.zeros(2, 4, 12)
    with pytest.raises(UserInputError, match="slot 8"):
        gr.gather_sparse_mla_attention(q, pe, cache, torch.tensor([[0, 8]], dtype=torch.int32), 1.0)


# ------------------------------------------------------------------ DeepSeek-V3.2: YaRN rope, NeoX indexer, 128 heads
@pytest.fixture(scope="module")
def v32(module_tmp):
    return ck.make_checkpoint(module_tmp("v32") / "v32tiny", preset="deepseek-v3.2-tiny",
                              index_topk=INDEX_TOPK)


@pytest.fixture
def vllm_rope(monkeypatch):
    """vLLM's ``DeepseekScalingRotaryEmbedding`` constructible outside an engine: its custom-op dispatch reads the
    current compilation config, given here as one with every custom op off (the math is vLLM's native one)."""
    co = pytest.importorskip("vllm.model_executor.custom_op")
    from vllm.config import CompilationConfig
    from vllm.model_executor.layers.rotary_embedding.deepseek_scaling_rope import DeepseekScalingRotaryEmbedding

    monkeypatch.setattr(co, "get_cached_compilation_config", lambda: CompilationConfig(custom_ops=["none"]))
    return DeepseekScalingRotaryEmbedding


@pytest.mark.parametrize("mscale", [1.0, 0.707])
def test_yarn_rope_matches_vllm(vllm_rope, mscale):
    """cos/sin (mscale ratio included) and the NeoX rotation as vLLM builds them for DeepSeek-V3.2's rope_parameters
    (deepseek_v2.py turns rope_type yarn into deepseek_yarn; get_rope passes original_max_position_embeddings as the
    cache length), at positions across V3.2's 163840. The limit: the two compute ``pos * inv_freq`` with inv_freq
    rounded differently, 4 float32 roundings of the angle, plus 4 of cos/sin and the mscale product."""
    yarn = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
            "beta_slow": 1, "mscale": mscale, "mscale_all_dim": 1.0}
    theirs = vllm_rope(64, 64, 4096, 10000.0, True, 40.0, torch.float32, beta_fast=32, beta_slow=1, mscale=mscale,
                       mscale_all_dim=1.0)
    pos = torch.arange(0, 163840, 997)
    cos, sin = gr.rope_cos_sin(pos, 64, 1e4, yarn)
    angle = pos.double()[:, None] * gr.yarn_inv_freq(64, 1e4, 40.0, 4096).double()[None, :]
    u = 2.0 ** -24
    limit = 4 * u * (angle.abs() + 2)
    err = (torch.cat([cos, sin], -1).double() - theirs.cos_sin_cache[pos].double()).abs()
    assert (err <= torch.cat([limit, limit], -1)).all(), float((err / torch.cat([limit, limit], -1)).max())
    assert not torch.allclose(cos, gr.rope_cos_sin(pos, 64, 1e4)[0], atol=1e-3)   # yarn is not the default rope
    q = torch.randn(len(pos), 4, 64, generator=torch.Generator().manual_seed(0))
    vq, _ = theirs.forward_native(pos, q.clone(), torch.zeros(len(pos), 1, 64))
    qlim = 2 * torch.cat([limit, limit], -1)[:, None, :] * q.abs().amax(-1, keepdim=True).double() + 4 * u
    assert ((gr.apply_rope(q, cos, sin, interleaved=False).double() - vq.double()).abs() <= qlim).all()


def test_v32_geometry_and_softmax_scale(v32):
    """The preset keeps V3.2's geometry; the softmax scale is vLLM's: qk_head_dim^-0.5 times its yarn_get_mscale
    (factor, mscale_all_dim)^2 (deepseek_v2.py DeepseekV2MLAAttention)."""
    dsv2 = pytest.importorskip("vllm.model_executor.models.deepseek_v2")
    cfg, sd = ck.load_checkpoint(v32)
    assert cfg["architectures"] == ["DeepseekV32ForCausalLM"] and cfg["model_type"] == "deepseek_v32"
    geo = dict(num_attention_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
               index_n_heads=64, index_head_dim=128, n_group=8, topk_group=4)
    assert {k: cfg[k] for k in geo} == geo and "indexer_rope_interleave" not in cfg
    ref = gr.Glm5Reference(cfg, sd)
    rp = cfg["rope_parameters"]
    assert ref.sm_scale == pytest.approx(192 ** -0.5 * dsv2.yarn_get_mscale(rp["factor"], rp["mscale_all_dim"]) ** 2,
                                         rel=1e-12)
    assert ref.indexer_interleaved is False and ref.own_indexer == [True, True]


@pytest.mark.slow   # default tier's budget (2026-12-07: ~5 s); .ci/run's slow tier runs it
def test_v32_selection_matches_transformers(v32):
    """A prompt past index_topk through transformers' DeepseekV32ForCausalLM (its indexer: NeoX rope, YaRN, 64
    heads): every layer selects the same positions as the reference."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "DeepseekV32ForCausalLM"):
        pytest.skip("this transformers has no DeepseekV32ForCausalLM")
    # the class itself, not AutoModelForCausalLM: once vLLM is imported (earlier tests of a suite), its own config
    # class for deepseek_v32 sits in transformers' AutoConfig map and the auto class builds DeepseekV3 (no indexer)
    m = transformers.DeepseekV32ForCausalLM.from_pretrained(str(v32), dtype=torch.float32, attn_implementation="eager")
    ref = gr.Glm5Reference.from_pretrained(v32)
    ids = _ids(LONG, seed=5)
    caught = []
    hooks = [layer.self_attn.indexer.register_forward_hook(lambda mod, i, o: caught.append(o)) for layer in
             m.model.layers]
    try:
        with torch.no_grad():
            m(ids[None])
    finally:
        for h in hooks:
            h.remove()
    ref.forward(ids)
    assert len(caught) == len(ref.last["topk_local"]) == 2
    for layer, (hf_idx, mine) in enumerate(zip(caught, ref.last["topk_local"])):
        for t in range(INDEX_TOPK - 1, LONG):
            assert set(hf_idx[0, t].tolist()) == set(mine[t].tolist()), (layer, t)


@pytest.mark.slow   # default tier's budget (2026-12-07: interpreted kernels, ~7 s); .ci/run's slow tier runs it
@pytest.mark.interpreter
@pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")  # Triton interpreter
def test_kernels_on_v32_checkpoint(v32):
    """Our sparse MLA kernel with 128 heads and V3.2's YaRN softmax scale on both layers' inputs, and our indexer
    kernels (NeoX rope in the fused q quantization, 64 heads) on both, each within its derived limit
    (tests/launch/parity_cases.py)."""
    from parity_cases import CheckedReference

    cfg, sd = ck.load_checkpoint(v32)
    ref = CheckedReference(cfg, sd)
    ref.forward(_ids(LONG, seed=5))
    att = ref.run.attention
    assert [a[0] for a in att] == [0, 1] and all(a[1].ok for a in att), [a[1].explain() for a in att]
    assert att[0][2] == ref.sm_scale > 192 ** -0.5 * 1.8
    assert [d["layer"] for d in ref.run.indexer] == [0, 1]
    for d in ref.run.indexer:
        assert d["q_bits_equal"] and d["w_equal"] and d["logits_ratio"] <= 1 and d["selection_differs"] == [], d


@pytest.mark.slow
def test_v32_logits_match_transformers(v32):
    """Logits against transformers' DeepseekV32ForCausalLM within the float32 rounding limit of two forwards, with
    index_topk 16 in both so that the selection binds on a 40-token prompt."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "DeepseekV32ForCausalLM"):
        pytest.skip("this transformers has no DeepseekV32ForCausalLM")
    cfg, sd = ck.load_checkpoint(v32)
    cfg16 = dict(cfg, index_topk=16)
    m = transformers.DeepseekV32ForCausalLM.from_pretrained(str(v32), dtype=torch.float32, attn_implementation="eager",
                                                          index_topk=16)
    ids = _ids(40, seed=6)
    with torch.no_grad():
        theirs = m(ids[None]).logits[0]
    ours = gr.Glm5Reference(cfg16, sd).forward(ids)
    lim = forward_limit(cfg16, sd, ids, samples=16)   # seeded: the same limit everywhere; 16 as the argument assumes
    assert lim.share(ours, theirs) < 1, lim.share(ours, theirs)
    # the softmax scale without YaRN's mscale^2 is far outside the limit
    wrong = gr.Glm5Reference(cfg16, sd)
    wrong.sm_scale = 192 ** -0.5
    assert lim.share(wrong.forward(ids), theirs) > 10
