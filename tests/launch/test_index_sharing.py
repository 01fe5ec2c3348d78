"""sparse_mla.launch.index_sharing (GLM-5.2's shared top-k) and what rests on it: the rule against transformers'
``GlmMoeDsaConfig`` (its own derivation of ``indexer_types``; the rule against vLLM's model built on the meta device
is in tests/diagnose/test_config.py, where vLLM's probe already runs), user-input errors, the reference forward on a
GLM-5.2-style checkpoint against transformers' GlmMoeDsaForCausalLM (which runs shared layers itself), and our
attention kernel and indexer kernels on that checkpoint's own inputs (Triton interpreter)."""
from __future__ import annotations

import random
import re

import pytest
import torch

from parity_cases import CheckedReference
from sparse_mla.errors import UserInputError
from sparse_mla.launch import checkpoint as ck
from sparse_mla.launch import glm5_reference as gr
from sparse_mla.launch import index_sharing as ix

INDEX_TOPK = 128
LONG = 160       # > INDEX_TOPK: the selection binds on the last rows


@pytest.fixture(scope="module")
def glm52(module_tmp):
    """GLM-5.2 style: layer 0 full, layer 1 shared, declared only as ``indexer_types``; no layer-1 indexer tensors."""
    return ck.make_checkpoint(module_tmp("share") / "glm52", index_topk=INDEX_TOPK, indexer_types="FS")


def _transformers_types(**kw) -> list[str]:
    from transformers import GlmMoeDsaConfig

    return GlmMoeDsaConfig(**kw).indexer_types


# ------------------------------------------------------------------ the rule
def test_own_indexer_matches_transformers_derivation():
    """On random layer counts, freq/offset pairs and patterns, the declaration read here equals the ``indexer_types``
    transformers derives from the same keys (full where ours says True)."""
    pytest.importorskip("transformers")
    rng = random.Random(0)
    for _ in range(60):
        n = rng.randint(1, 40)
        freq, offset = rng.randint(1, 6), rng.randint(1, 5)
        ours = ix.own_indexer({"num_hidden_layers": n, "index_topk_freq": freq, "index_skip_topk_offset": offset})
        assert ["full" if o else "shared" for o in ours] == _transformers_types(
            num_hidden_layers=n, index_topk_freq=freq, index_skip_topk_offset=offset), (n, freq, offset)
        pattern = "F" + "".join(rng.choice("FS") for _ in range(n - 1))
        assert ix.letters(ix.own_indexer({"num_hidden_layers": n, "index_topk_pattern": pattern})) == pattern
        types = _transformers_types(num_hidden_layers=n, index_topk_pattern=pattern)
        assert ix.own_indexer({"num_hidden_layers": n, "indexer_types": types}) == [t == "full" for t in types]
    # GLM-5.2 (index_topk_freq 4, index_skip_topk_offset 3, 78 layers): 21 full layers by this rule
    glm52 = ix.own_indexer({"num_hidden_layers": 78, "index_topk_freq": 4, "index_skip_topk_offset": 3})
    assert sum(glm52) == 21 and glm52[:8] == [True, True, True, False, False, False, True, False]
    # no declaration: every layer full (GLM-5, DeepSeek-V3.2)
    assert ix.own_indexer({"num_hidden_layers": 3}) == [True] * 3


def test_a_negative_offset_is_read_as_vllm_and_transformers_read_it_and_make_checkpoint_writes_it():
    """Breaker round 10 (t7): index_skip_topk_offset -1 was refused here (make-checkpoint, the reference forward)
    and diagnosed as vLLM runs it; vLLM and transformers both read any integer by max(l - offset + 1, 0) % freq, so
    the rule is theirs, the diagnosis' (models.check_config): the same layers, and the config written."""
    pytest.importorskip("transformers")
    for n, freq, offset in ((2, 2, -1), (5, 2, -1), (6, 3, -2)):
        ours = ix.own_indexer({"num_hidden_layers": n, "index_topk_freq": freq, "index_skip_topk_offset": offset})
        assert ["full" if o else "shared" for o in ours] == _transformers_types(
            num_hidden_layers=n, index_topk_freq=freq, index_skip_topk_offset=offset), (n, freq, offset)
    assert ix.sharing_keys(2, index_topk_freq=2, index_skip_topk_offset=-1) == {"index_topk_freq": 2,
                                                                                "index_skip_topk_offset": -1}
    with pytest.raises(UserInputError, match=r"--index-skip-topk-offset True is not accepted; accepted: an integer"):
        ix.sharing_keys(2, index_topk_freq=2, index_skip_topk_offset=True)


def test_pattern_read_as_vllm_reads_it():
    """vLLM: a layer is shared iff its pattern letter is "S"; layers past the pattern's end are full."""
    assert ix.own_indexer({"num_hidden_layers": 5, "index_topk_pattern": "FSS"}) == [True, False, False, True, True]


@pytest.mark.parametrize("keys, letters", [
    ({"index_topk_pattern": ["F", "S", "F", "S"]}, "FSFS"),    # a list: pattern[layer] == "S" as on a string
    ({"index_topk_pattern": "fsfs"}, "FFFF"),                  # only "S" is shared
    ({"index_topk_pattern": "F S "}, "FFSF"),
    ({"index_topk_freq": 2.0}, "FFSF"),
    ({"index_topk_freq": -1}, "FFFF"),                         # Python's % of a negative divisor; as transformers
    ({"index_topk_freq": True}, "FFFF"),
])
def test_a_sharing_vllm_reads_its_own_way_is_read_so(keys, letters):
    """Breaker round 18 (Y3): the reference forward reads what vLLM 0.26 reads, as its ``DeepseekV2MLAAttention``
    builds it (the diagnosis' ``indexer_layers`` is vLLM's own answer: ``tests/diagnose/test_config.py``)."""
    assert ix.letters(ix.own_indexer({"num_hidden_layers": 4, **keys})) == letters


@pytest.mark.parametrize("kw, says", [
    (dict(index_topk_freq=-2), "--index-topk-freq -2 is not accepted; accepted: an integer from 1"),
    (dict(index_topk_freq=2.0), "--index-topk-freq 2.0 is not accepted"),
    (dict(index_topk_freq=True), "--index-topk-freq True is not accepted"),
    (dict(index_topk_freq=2, index_skip_topk_offset=1.5), "--index-skip-topk-offset 1.5 is not accepted"),
])
def test_make_checkpoint_writes_integers_only(kw, says):
    """A config may hold a freq vLLM 0.26 reads its own way; make-checkpoint writes only what vLLM 0.26, 0.34 and
    transformers read alike (transformers reads a freq below 1 as 1, vLLM 0.34 refuses all but a positive integer)."""
    with pytest.raises(UserInputError, match=re.escape(says)):
        ix.sharing_keys(4, **kw)


@pytest.mark.parametrize("cfg, says", [
    ({"num_hidden_layers": 2, "index_topk_pattern": "SF"}, "layer 0 shared"),
    ({"num_hidden_layers": 3, "index_topk_freq": 2, "index_skip_topk_offset": 0}, "layer 0 shared"),
    ({"num_hidden_layers": 2, "indexer_types": ["full", "sparse"]}, "'sparse'"),
    ({"num_hidden_layers": 3, "indexer_types": ["full", "shared"]}, "2 letters for 3 layers"),
    ({"num_hidden_layers": 2, "indexer_types": ["full", "shared"], "index_topk_pattern": "FF"}, "disagree"),
    ({"num_hidden_layers": 2, "index_topk_freq": 0}, "index_topk_freq = 0; accepted: a number other than 0"),
    # round 18 (Y3): vLLM 0.26 builds FFSF (Python's % of -2), transformers FFFF (max(freq, 1))
    ({"num_hidden_layers": 4, "index_topk_freq": -2}, "index_topk_freq -2 gives FFSF as vLLM 0.26 reads it and FFFF "
                                                      "as transformers reads it"),
])
def test_own_indexer_refuses(cfg, says):
    with pytest.raises(UserInputError, match=says):
        ix.own_indexer(cfg)


def test_agreeing_declarations_are_accepted():
    cfg = {"num_hidden_layers": 3, "indexer_types": ["full", "shared", "full"], "index_topk_pattern": "FSF"}
    assert ix.own_indexer(cfg) == [True, False, True]


def test_sharing_keys_styles():
    assert ix.sharing_keys(4, index_topk_pattern="FSSF") == {"index_topk_pattern": "FSSF"}
    assert ix.sharing_keys(4, indexer_types="FSSF") == {"indexer_types": ["full", "shared", "shared", "full"]}
    assert ix.sharing_keys(4, index_topk_freq=2) == {"index_topk_freq": 2}
    assert ix.sharing_keys(4, index_topk_freq=2, index_skip_topk_offset=1) == {"index_topk_freq": 2,
                                                                               "index_skip_topk_offset": 1}
    assert ix.sharing_keys(4) == {}
    for kw, says in [(dict(index_topk_pattern="FS", indexer_types="FS"), "both declare"),
                     (dict(index_skip_topk_offset=1), "without index_topk_freq"),
                     (dict(index_topk_pattern="FSX"), "letters F"),
                     (dict(index_topk_pattern="FS"), "2 letters for 4 layers"),
                     (dict(index_topk_freq=2, index_skip_topk_offset=0), "layer 0 shared")]:
        with pytest.raises(UserInputError, match=says):
            ix.sharing_keys(4, **kw)


# ------------------------------------------------------------------ the reference forward on a GLM-5.2 checkpoint
def test_reference_shares_top_k_and_matches_transformers(glm52):
    """A prompt past index_topk: layer 1 runs no indexer and attends to layer 0's selection (the same positions,
    the same slots); transformers' GlmMoeDsaForCausalLM, which builds no indexer in the shared layer either, selects
    the same positions in both layers. Dropping the sharing (a layer-1 indexer) is refused for want of its weights."""
    transformers = pytest.importorskip("transformers")
    cfg, sd = ck.load_checkpoint(glm52)
    assert not [k for k in sd if k.startswith("model.layers.1.self_attn.indexer.")]
    calls = []

    class Spy(gr.Glm5Reference):
        def indexer(self, layer, *a):
            calls.append(layer)
            return super().indexer(layer, *a)

    ref = Spy(cfg, sd)
    ids = torch.randint(2, cfg["vocab_size"], (LONG,), generator=torch.Generator().manual_seed(3))
    ref.forward(ids)
    assert calls == [0] and ref.own_indexer == [True, False]
    t0, t1 = ref.last["topk_local"]
    assert t1 is t0 and torch.equal(ref.last["slots"][1], ref.last["slots"][0])
    assert ((t0 >= 0).sum(-1) == torch.arange(1, LONG + 1).clamp(max=INDEX_TOPK)).all()

    m = transformers.AutoModelForCausalLM.from_pretrained(str(glm52), dtype=torch.float32, attn_implementation="eager")
    assert [layer.self_attn.indexer is None for layer in m.model.layers] == [False, True]
    caught = []
    hooks = [layer.self_attn.register_forward_hook(lambda mod, i, o: caught.append(o[2])) for layer in m.model.layers]
    try:
        with torch.no_grad():
            m(ids[None])
    finally:
        for h in hooks:
            h.remove()
    assert caught[1] is caught[0]
    for t in range(INDEX_TOPK - 1, LONG):      # rows where transformers' top-k holds no masked picks
        assert set(caught[0][0, t].tolist()) == set(t0[t].tolist()), t
    with pytest.raises(UserInputError, match="indexer"):
        gr.Glm5Reference({k: v for k, v in cfg.items() if k != "indexer_types"}, sd)


@pytest.mark.interpreter
@pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")  # Triton interpreter
def test_kernels_on_glm52_checkpoint(glm52):
    """Our sparse MLA kernel on both layers' inputs (layer 1 with the slots it shares with layer 0) and our indexer
    kernels on layer 0's, each within its derived limit (tests/launch/parity_cases.py); no indexer runs in layer 1."""
    cfg, sd = ck.load_checkpoint(glm52)
    ref = CheckedReference(cfg, sd)
    ids = torch.randint(2, cfg["vocab_size"], (LONG,), generator=torch.Generator().manual_seed(3))
    ref.forward(ids)
    att = ref.run.attention
    assert [a[0] for a in att] == [0, 1] and all(a[1].ok for a in att), [a[1].explain() for a in att]
    assert torch.equal(att[0][3], att[1][3]) and att[0][2] == pytest.approx(1 / 16)
    assert [d["layer"] for d in ref.run.indexer] == [0]
    d = ref.run.indexer[0]
    assert d["q_bits_equal"] and d["w_equal"] and d["logits_ratio"] <= 1 and d["selection_differs"] == []
    assert int(d["rows"].max()) == LONG - 1


@pytest.mark.slow
def test_logits_match_transformers_where_sharing_binds(glm52):
    """Logits against transformers within the float32 rounding limit of two forwards, with index_topk 16 in both
    (so that on a 40-token prompt the shared layer's reuse of layer 0's selection decides its attention), and far
    outside it when the reference would run dense attention instead."""
    transformers = pytest.importorskip("transformers")
    from sparse_mla.launch.forward_rounding import forward_limit

    cfg, sd = ck.load_checkpoint(glm52)
    cfg16 = dict(cfg, index_topk=16)
    m = transformers.AutoModelForCausalLM.from_pretrained(str(glm52), dtype=torch.float32, attn_implementation="eager",
                                                          index_topk=16)
    for layer in m.model.layers:       # transformers' q_a/kv_a norms use eps 1e-6; vLLM and the reference rms_norm_eps
        layer.self_attn.q_a_layernorm.variance_epsilon = cfg["rms_norm_eps"]
        layer.self_attn.kv_a_layernorm.variance_epsilon = cfg["rms_norm_eps"]
    ids = torch.randint(2, cfg["vocab_size"], (40,), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        theirs = m(ids[None]).logits[0]
    ours = gr.Glm5Reference(cfg16, sd).forward(ids)
    lim = forward_limit(cfg16, sd, ids, samples=16)   # seeded: the same limit everywhere; 16 as the argument assumes
    assert lim.share(ours, theirs) < 1, lim.share(ours, theirs)
    dense = gr.Glm5Reference(cfg, sd).forward(ids)                    # index_topk 128 > 40: every token
    assert lim.share(dense[16:], theirs[16:], slice(16, None)) > 100
