"""A random-weight GLM-5-architecture checkpoint, generated locally, and a loader for any Hugging Face checkpoint.

:func:`make_checkpoint` writes a Hugging Face model directory that vLLM 0.26.0 loads as ``GlmMoeDsaForCausalLM``
(an alias of ``DeepseekV2ForCausalLM``, ``vllm/model_executor/models/deepseek_v2.py``) and transformers (>= 5.5)
loads as ``GlmMoeDsaForCausalLM`` (``transformers/models/glm_moe_dsa/modeling_glm_moe_dsa.py``)::

    config.json              architectures ["GlmMoeDsaForCausalLM"], model_type "glm_moe_dsa"
    generation_config.json   bos/eos/pad token ids
    model.safetensors        seeded random weights, bf16 (e_score_correction_bias fp32, as in real checkpoints)
    tokenizer.json, tokenizer_config.json, ...   byte-level BPE trained locally with ``tokenizers``

Preset ``glm-5-tiny`` keeps GLM-5's attention geometry exactly -- 64 heads (64 KV heads), kv_lora_rank 512,
qk_nope 192, qk_rope 64, v_head 256 (absorbed MLA head 576, sm_scale 1/16), indexer 32 heads x 128, interleaved
RoPE (theta 1e6) in both attention and indexer -- and shrinks everything else: q_lora_rank 512 (GLM-5: 2048; the
indexer's ``wq_b`` input shrinks with it), hidden 1024, 2 layers (layer 0 dense, layer 1 MoE), 8 routed experts
top-2 + 1 shared (moe_intermediate 256), vocab 2048, max_position_embeddings 8192, no MTP layer by default.

Preset ``deepseek-v3.2-tiny`` (``DeepseekV32ForCausalLM`` / ``deepseek_v32``) keeps DeepSeek-V3.2's attention geometry
the same way -- 128 heads, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128 (head 576, sm_scale 192^-0.5 times
YaRN's mscale^2), indexer 64 heads x 128 with NeoX rope (no ``indexer_rope_interleave``), its YaRN rope (factor 40 over
4096 positions, theta 1e4) and group routing (n_group 8, topk_group 4) -- with the sizes above, 16 routed experts
top-4 and max_position_embeddings 163840 (4096 x 40, as V3.2).

Preset ``glm-5.3-flash`` (GLM-5.3-Flash, ``Glm5NextForCausalLM`` / ``glm5_next``: KDA linear attention in three of four
layers, a NoPE MLA (DSA) layer with a KPool indexer in every fourth, MHC residual streams) writes a tiny checkpoint
of transformers' geometry (:mod:`.glm5next_config`) whose tensors are named by transformers' own model and seeded as
the others (:mod:`.glm5next_weights`), with the same tokenizer; vLLM 0.33/0.34 load it and
:class:`~sparse_mla.launch.glm5next_reference.Glm5NextReference` runs it in float64. ``config_only=True``
(``--config-only``) writes the real model's ``config.json`` alone, for the diagnosis.

Top-k sharing (GLM-5.2, :mod:`.index_sharing`): ``index_topk_pattern`` (``--index-topk-pattern FSSF``),
``index_topk_freq`` (``--index-topk-freq N [--index-skip-topk-offset M]``) or GLM-5.2's ``indexer_types``
(``--indexer-types FSSF``, written as ``["full", "shared", ...]``) in ``config.json``; a shared layer has no
``indexer.*`` tensors (its weights are otherwise the same bytes as without sharing).

``mtp=True`` (``make-checkpoint --mtp``) adds GLM-5's one MTP layer (``num_nextn_predict_layers: 1``) as vLLM's
``DeepSeekMTP`` loads it (``vllm/model_executor/models/deepseek_mtp.py``; ``glm_moe_dsa`` is mapped to
``deepseek_mtp`` by ``SpeculativeConfig.hf_config_override`` in ``vllm/config/speculative.py``): under
``model.layers.{num_hidden_layers}.`` a whole decoder layer (attention with its indexer; MoE by vLLM's layer rule)
plus ``enorm``, ``hnorm``, ``eh_proj [hidden, 2 * hidden]``, ``shared_head.norm``, ``shared_head.head`` and
``embed_tokens``. As in DeepSeek-V3/GLM-5 the MTP module shares the embedding and output head with the main model:
those two are stored as copies of ``model.embed_tokens`` and ``lm_head`` (vLLM shares the target model's anyway,
``llm_base_proposer.py`` ``_maybe_share_embeddings``/``_maybe_share_lm_head``). Every other tensor keeps its own seed,
so the main model's tensors are byte-identical with and without ``mtp``. The main model (vLLM's and
:class:`~sparse_mla.launch.glm5_reference.Glm5Reference`) ignores the MTP layer.

Tensor names are the per-expert, unfused names vLLM's ``DeepseekV2Model.load_weights`` maps
(deepseek_v2.py ``load_weights``: ``q_a_proj``/``kv_a_proj_with_mqa`` -> ``fused_qkv_a_proj``, ``gate_proj``/``up_proj``
-> ``gate_up_proj``, ``indexer.wk``/``indexer.weights_proj`` -> ``indexer.wk_weights_proj``,
``mlp.experts.{e}.*`` -> FusedMoE ``w13_weight``/``w2_weight``); transformers fuses the experts itself on load
(``conversion_mapping.py``: ``glm_moe_dsa`` -> ``qwen2_moe`` pattern). See :func:`expected_weight_shapes`.

Weight scales (chosen so bf16 activations stay O(1) through the layers and attention is neither flat nor one-hot):
linear weights ``N(0, 1/fan_in)``, embeddings ``N(0, 1)``, norm weights ``1 + N(0, 0.05^2)``, LayerNorm bias and
``e_score_correction_bias`` ``N(0, 0.05^2)``. Every tensor draws from its own generator seeded from ``(seed, name)``,
so the bytes depend only on the seed (and a tensor does not change when ``num_layers`` does).
"""
from __future__ import annotations

import copy
import functools
import json
import re
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

from ..errors import UserInputError, cli_int, expand_path, refuse_system_folders, what_would_fix, writable_dir
from ..files import is_write_failure, make_dir, write_failure
from ..layouts import INDEX_TOPK_MULTIPLE
from ..models import PRESET_CONFIGS as MODEL_PRESETS, require_vllm_model
from .glm5next_config import PRESET as GLM5_NEXT_PRESET
from ..gguf.writer import GGUF_TYPES, gguf_file_name
from .index_sharing import own_indexer, sharing_keys

#: What ``glm-5-tiny`` changes in GLM-5's real config (:data:`sparse_mla.models.PRESET_CONFIGS` ``["glm-5"]``):
#: sizes only. The attention geometry (64 heads, kv_lora_rank 512, qk_nope 192, rope 64, v 256, indexer 32 x 128,
#: interleaved rope, theta 1e6) and the routing rules are inherited unchanged; ``q_lora_rank`` 512 instead of 2048
#: does not change the 576-wide MLA head.
GLM5_TINY_OVERRIDES: dict[str, Any] = {
    "vocab_size": 2048,
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "moe_intermediate_size": 256,
    "num_hidden_layers": 2,          # layer 0 dense, layer 1 MoE
    "q_lora_rank": 512,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 8192,
    "num_nextn_predict_layers": 0,
    "attention_bias": False,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 1,
    "initializer_range": 0.02,
}

#: What ``deepseek-v3.2-tiny`` changes in DeepSeek-V3.2's config: the sizes of ``glm-5-tiny``, 16 routed experts
#: (2 per group of V3.2's 8, of which 4 are chosen) top-4. Geometry, YaRN rope and routing rules stay V3.2's.
DSV32_TINY_OVERRIDES: dict[str, Any] = {
    **{k: v for k, v in GLM5_TINY_OVERRIDES.items() if k != "max_position_embeddings"},
    "n_routed_experts": 16,
    "num_experts_per_tok": 4,
}

#: Preset configs (``config.json`` contents before ``index_topk`` / ``num_hidden_layers`` are filled in).
PRESET_CONFIGS: dict[str, dict[str, Any]] = {
    "glm-5-tiny": {**copy.deepcopy(MODEL_PRESETS["glm-5"]), **GLM5_TINY_OVERRIDES},
    "deepseek-v3.2-tiny": {**copy.deepcopy(MODEL_PRESETS["deepseek-v3.2"]), **DSV32_TINY_OVERRIDES},
}

#: Every ``--preset``: the GLM-5 / DeepSeek-V3.2 presets above, and GLM-5.3-Flash's (:mod:`.glm5next_config`: a tiny
#: checkpoint, or with ``config_only`` the real model's ``config.json`` for the diagnosis under vLLM 0.33/0.34).
PRESETS = (*PRESET_CONFIGS, GLM5_NEXT_PRESET)


#: Tokenizer special tokens (ids 0 and 1 in the trained vocabulary).
_SPECIAL_TOKENS = ("<|endoftext|>", "<|pad|>")

_NORM_WEIGHT_STD = 0.05
_BIAS_STD = 0.05


#: Upper bounds of make-checkpoint's knobs: index_topk as ``sparse-mla launch`` accepts it
#: (``launch.check_model_dir``), layers well above GLM-5's 78 (each tiny layer is ~100 MB of weights).
MAX_INDEX_TOPK = 2**20
MAX_LAYERS = 128
#: Upper bound of ``--heads`` (attention heads per rank: DeepSeek-V3.2 has 128, GLM-5 64).
MAX_HEADS = 128
#: Upper bound of ``--max-position-embeddings`` (GLM-5's is 202752; 2**20 leaves room for longer-context relatives).
MAX_POSITIONS = 2**20


def check_index_topk(index_topk) -> None:
    """The ``index_topk`` a GLM-5 / DeepSeek-V3.2 checkpoint is made with (``make-checkpoint --index-topk``, notebook
    05's parameter): a positive multiple of :data:`~sparse_mla.layouts.INDEX_TOPK_MULTIPLE` (128) up to
    :data:`MAX_INDEX_TOPK`. Raises :class:`UserInputError` naming the value and what is accepted."""
    if isinstance(index_topk, bool) or not isinstance(index_topk, int) or index_topk <= 0 \
            or index_topk % INDEX_TOPK_MULTIPLE or index_topk > MAX_INDEX_TOPK:
        raise UserInputError(
            f"index_topk {index_topk!r} is not a positive multiple of {INDEX_TOPK_MULTIPLE} up to {MAX_INDEX_TOPK} "
            f"(vLLM converts top-k indices in groups of {INDEX_TOPK_MULTIPLE}; `sparse-mla launch` takes at most "
            f"{MAX_INDEX_TOPK}); accepted: e.g. 256, 512, 1024, 2048")


def preset_config(preset: str = "glm-5-tiny", index_topk: int = 2048, num_layers: int | None = None,
                  mtp: bool = False, num_heads: int | None = None, max_position_embeddings: int | None = None,
                  **sharing) -> dict:
    """The ``config.json`` dict of ``preset`` with ``index_topk``, ``num_hidden_layers``, (``num_heads``, default the
    preset's) ``num_attention_heads`` = ``num_key_value_heads`` and (``mtp``: GLM-5's 1, else 0)
    ``num_nextn_predict_layers`` filled in, plus the top-k sharing keys of ``sharing``
    (:func:`~sparse_mla.launch.index_sharing.sharing_keys`: ``index_topk_pattern``, ``index_topk_freq``,
    ``index_skip_topk_offset``, ``indexer_types``); a pattern sets the layer count where ``num_layers`` is None.
    ``max_position_embeddings`` (default the preset's: 8192 for the tiny GLM-5) bounds the context vLLM accepts.

    Raises :class:`UserInputError` for an unknown preset, an ``index_topk`` that is not a positive multiple of
    128, a layer count that leaves no MoE layer, a head count outside 1..:data:`MAX_HEADS`, or a sharing
    :func:`sharing_keys` refuses.
    """
    if preset not in PRESET_CONFIGS:
        what = " (make_checkpoint writes it, with glm5next_config)" if preset == GLM5_NEXT_PRESET else ""
        raise UserInputError(f"unknown checkpoint preset {preset!r}{what}; accepted: "
                              f"{', '.join([*PRESET_CONFIGS, GLM5_NEXT_PRESET])}")
    check_index_topk(index_topk)
    cfg = copy.deepcopy(PRESET_CONFIGS[preset])
    letters = sharing.get("index_topk_pattern") or sharing.get("indexer_types")
    if num_layers is None and isinstance(letters, str) and letters:
        num_layers = len(letters)
    if num_layers is not None:
        min_layers = cfg["first_k_dense_replace"] + 1
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not \
                min_layers <= num_layers <= MAX_LAYERS:
            raise UserInputError(
                f"num_layers {num_layers!r} is not accepted (at least {min_layers} so that one MoE layer follows "
                f"first_k_dense_replace {cfg['first_k_dense_replace']} dense ones; at most {MAX_LAYERS}, above "
                f"GLM-5's 78); accepted: an integer from {min_layers} to {MAX_LAYERS}")
        cfg["num_hidden_layers"] = num_layers
    if not isinstance(mtp, bool):
        raise UserInputError(f"mtp {mtp!r} is not accepted; accepted: True (GLM-5's one MTP layer) or False")
    if num_heads is not None:
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or not 1 <= num_heads <= MAX_HEADS:
            raise UserInputError(f"heads (num_attention_heads) {num_heads!r} is not accepted; accepted: an integer from 1 to {MAX_HEADS} "
                                 f"(e.g. 8: GLM-5's 64 heads per rank at tensor-parallel 8)")
        cfg["num_attention_heads"] = cfg["num_key_value_heads"] = num_heads
    if max_position_embeddings is not None:
        if isinstance(max_position_embeddings, bool) or not isinstance(max_position_embeddings, int) or not \
                1 <= max_position_embeddings <= MAX_POSITIONS:
            raise UserInputError(f"max_position_embeddings {max_position_embeddings!r} is not accepted; accepted: an "
                                 f"integer from 1 to {MAX_POSITIONS} (GLM-5: 202752)")
        cfg["max_position_embeddings"] = max_position_embeddings
    cfg["index_topk"] = index_topk
    cfg["num_nextn_predict_layers"] = MODEL_PRESETS["glm-5"]["num_nextn_predict_layers"] if mtp else 0
    cfg.update(sharing_keys(cfg["num_hidden_layers"], **sharing))
    return cfg


def is_moe_layer(cfg: dict, layer_idx: int) -> bool:
    """vLLM's rule (deepseek_v2.py ``DeepseekV2DecoderLayer.__init__``): MoE iff ``n_routed_experts`` is set,
    ``layer_idx >= first_k_dense_replace`` and ``layer_idx % moe_layer_freq == 0``."""
    return (cfg.get("n_routed_experts") is not None and layer_idx >= cfg["first_k_dense_replace"]
            and layer_idx % cfg.get("moe_layer_freq", 1) == 0)


def expected_weight_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Checkpoint tensor name -> shape (``[out_features, in_features]`` for linears) for a GLM-5 / DeepSeek-V3.2
    config, under the names vLLM 0.26.0's ``DeepseekV2ForCausalLM.load_weights`` maps (deepseek_v2.py 1503-1740),
    followed by the MTP layers (``num_nextn_predict_layers``, :func:`mtp_weight_shapes`) if the config has any.

    Requires ``q_lora_rank`` (DSA indexers read ``q_a_layernorm``'s output) and ``index_topk``.
    """
    D = cfg["hidden_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg["vocab_size"], D)}
    for i in range(cfg["num_hidden_layers"]):
        shapes.update(decoder_layer_shapes(cfg, i))
    shapes["model.norm.weight"] = (D,)
    shapes["lm_head.weight"] = (cfg["vocab_size"], D)
    shapes.update(mtp_weight_shapes(cfg))
    return shapes


def decoder_layer_shapes(cfg: dict, i: int) -> dict[str, tuple[int, ...]]:
    """Tensors of decoder layer ``i`` (``model.layers.{i}.``): norms, MLA attention with its DSA indexer (none in
    a layer that shares the previous layer's top-k, :func:`~sparse_mla.launch.index_sharing.own_indexer`; MTP layers
    always have one), and a dense MLP or (:func:`is_moe_layer`) the routed + shared experts."""
    D = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    qr, kvr = cfg["q_lora_rank"], cfg["kv_lora_rank"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    ih, idim = cfg["index_n_heads"], cfg["index_head_dim"]
    p = f"model.layers.{i}."
    a = p + "self_attn."
    shapes = {
        p + "input_layernorm.weight": (D,),
        p + "post_attention_layernorm.weight": (D,),
        a + "q_a_proj.weight": (qr, D),
        a + "q_a_layernorm.weight": (qr,),
        a + "q_b_proj.weight": (nh * (nope + rope), qr),
        a + "kv_a_proj_with_mqa.weight": (kvr + rope, D),
        a + "kv_a_layernorm.weight": (kvr,),
        a + "kv_b_proj.weight": (nh * (nope + v), kvr),
        a + "o_proj.weight": (D, nh * v),
        a + "indexer.wq_b.weight": (ih * idim, qr),
        a + "indexer.wk.weight": (idim, D),
        a + "indexer.weights_proj.weight": (ih, D),
        a + "indexer.k_norm.weight": (idim,),
        a + "indexer.k_norm.bias": (idim,),
    }
    if i < cfg["num_hidden_layers"] and not own_indexer(cfg)[i]:
        shapes = {k: v for k, v in shapes.items() if not k.startswith(a + "indexer.")}
    m = p + "mlp."
    if is_moe_layer(cfg, i):
        E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        shapes[m + "gate.weight"] = (E, D)
        if cfg.get("topk_method") == "noaux_tc":
            shapes[m + "gate.e_score_correction_bias"] = (E,)
        for e in range(E):
            shapes.update({m + f"experts.{e}.gate_proj.weight": (I, D), m + f"experts.{e}.up_proj.weight": (I, D),
                           m + f"experts.{e}.down_proj.weight": (D, I)})
        if cfg.get("n_shared_experts"):
            Is = I * cfg["n_shared_experts"]
            shapes.update({m + "shared_experts.gate_proj.weight": (Is, D),
                           m + "shared_experts.up_proj.weight": (Is, D),
                           m + "shared_experts.down_proj.weight": (D, Is)})
    else:
        I = cfg["intermediate_size"]
        shapes.update({m + "gate_proj.weight": (I, D), m + "up_proj.weight": (I, D), m + "down_proj.weight": (D, I)})
    return shapes


#: MTP tensors that are copies of the main model's (DeepSeek-V3 / GLM-5 share embedding and output head).
MTP_SHARED = {"embed_tokens.weight": "model.embed_tokens.weight", "shared_head.head.weight": "lm_head.weight"}


def mtp_weight_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Tensors of the MTP layers ``model.layers.{L}.`` for ``L`` in ``num_hidden_layers ..
    num_hidden_layers + num_nextn_predict_layers - 1``, as vLLM's ``DeepSeekMTP.load_weights`` consumes them
    (deepseek_mtp.py: ``DeepSeekMultiTokenPredictorLayer`` holds ``enorm``, ``hnorm``, ``eh_proj =
    nn.Linear(2 * hidden, hidden, bias=False)``, ``shared_head.norm``/``shared_head.head`` and ``mtp_block`` = a
    ``DeepseekV2DecoderLayer`` with layer index ``L``; ``_rewrite_spec_layer_name`` moves every other name of the
    layer under ``mtp_block`` and ``embed_tokens`` to the top level)."""
    D, V = cfg["hidden_size"], cfg["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {}
    first = cfg["num_hidden_layers"]
    for L in range(first, first + int(cfg.get("num_nextn_predict_layers") or 0)):
        p = f"model.layers.{L}."
        shapes.update(decoder_layer_shapes(cfg, L))
        shapes.update({p + "enorm.weight": (D,), p + "hnorm.weight": (D,), p + "eh_proj.weight": (D, 2 * D),
                       p + "shared_head.norm.weight": (D,), p + "shared_head.head.weight": (V, D),
                       p + "embed_tokens.weight": (V, D)})
    return shapes


def _tensor_seed(seed: int, name: str) -> int:
    return (int(seed) * 0x9E3779B1 + zlib.crc32(name.encode())) % (2**63 - 1)


def _init_tensor(name: str, shape: tuple[int, ...], seed: int):
    """One seeded random tensor (bf16; ``e_score_correction_bias`` fp32). See the module docstring for scales."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(_tensor_seed(seed, name))
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    if name.endswith("e_score_correction_bias"):
        return x.mul_(_BIAS_STD)
    if name.endswith(".bias"):
        x.mul_(_BIAS_STD)
    elif len(shape) == 1:  # RMSNorm / LayerNorm weight
        x.mul_(_NORM_WEIGHT_STD).add_(1.0)
    elif name == "model.embed_tokens.weight":
        pass  # N(0, 1): the residual stream starts at unit scale
    else:  # linear [out, in]
        x.mul_(shape[1] ** -0.5)
    return x.to(torch.bfloat16)


def make_state_dict(cfg: dict, seed: int = 0) -> dict:
    """Seeded random weights for ``cfg`` under :func:`expected_weight_shapes` names (bf16 / fp32 bias); an MTP
    layer's ``embed_tokens`` and ``shared_head.head`` are copies of the main model's (:data:`MTP_SHARED`)."""
    mtp = mtp_weight_shapes(cfg)
    sd = {}
    for name, shape in expected_weight_shapes(cfg).items():
        shared = next((src for leaf, src in MTP_SHARED.items() if name in mtp and name.endswith("." + leaf)), None)
        sd[name] = sd[shared].clone() if shared else _init_tensor(name, shape, seed)
    return sd


@functools.lru_cache(maxsize=4)
def _train_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer trained on a fixed synthetic corpus (deterministic; no downloads). Trained once per
    vocabulary size and process (the same corpus and seed give the same tokenizer; only ever saved, never changed)."""
    import random

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    words = ["the", "model", "attention", "sparse", "kernel", "token", "cache", "index", "expert", "router",
             "layer", "hidden", "query", "key", "value", "rope", "latent", "rank", "head", "block", "page",
             "decode", "prefill", "batch", "glm", "deep", "seek", "triton", "vllm", "softmax", "gather"]
    corpus = [" ".join(rng.choice(words) + rng.choice(["", "s", "ed", "ing", "er", "."]) for _ in range(64))
              for _ in range(2000)]
    corpus += ["".join(chr(c) for c in range(32, 127))] * 10
    corpus += [" ".join(str(rng.randrange(10**6)) for _ in range(32)) for _ in range(200)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(_SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=_SPECIAL_TOKENS[0], eos_token=_SPECIAL_TOKENS[0],
                                   pad_token=_SPECIAL_TOKENS[1])


#: The files ``make_checkpoint`` writes: ``--overwrite`` replaces a folder only if it holds nothing else (so never a
#: project, a home directory or a real Hugging Face download).
CHECKPOINT_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                              "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                              *(gguf_file_name(t) for t in GGUF_TYPES)})


#: The key ``make_checkpoint`` adds to ``config.json`` (transformers and vLLM keep unknown keys as attributes and
#: ignore them): ``--overwrite`` replaces a folder only if it carries it (file names alone would let it replace
#: someone's checkpoint of the same layout). Not in the safetensors header: its metadata map is written in no fixed
#: order, and the files must be byte-identical for the same arguments.
CHECKPOINT_MARK = {"sparse_mla_make_checkpoint": True}


def _checkpoint_file(name: str) -> bool:
    """A file name ``make_checkpoint`` writes: :data:`CHECKPOINT_FILES`, or a shard of one of its split GGUFs
    (``model-TYPE-NNNNN-of-NNNNN.gguf``, ``--gguf-split-max-tensors``)."""
    m = re.fullmatch(r"(model-[A-Za-z0-9_]+)-\d{5}-of-\d{5}(\.gguf)", name)
    return name in CHECKPOINT_FILES or (m is not None and m.group(1) + m.group(2) in CHECKPOINT_FILES)


def _marked(out: Path) -> bool:
    """True if ``out/config.json`` carries :data:`CHECKPOINT_MARK`, or ``out`` is a checkpoint of this workbook made
    before the mark (2026-11-29/30): a ``config.json`` of the glm-5-tiny preset's architecture, ``hidden_size`` and
    ``vocab_size``, and a ``model.safetensors`` whose header metadata is exactly ``{"format": "pt"}``."""
    from safetensors import safe_open

    try:
        cfg = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(cfg, dict):
        return False
    if all(cfg.get(k) == v for k, v in CHECKPOINT_MARK.items()):
        return True
    tiny = PRESET_CONFIGS["glm-5-tiny"]
    if any(cfg.get(k) != tiny[k] for k in ("architectures", "hidden_size", "vocab_size")):
        return False
    try:
        with safe_open(str(out / "model.safetensors"), framework="np") as f:
            return (f.metadata() or {}) == {"format": "pt"}
    except Exception:  # noqa: BLE001  (not a safetensors file, unreadable: not ours)
        return False


def _check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuse an output that is a file, that holds the current working directory, a non-empty directory without
    ``overwrite``, or -- even with ``overwrite`` -- a directory that is not an earlier ``make_checkpoint`` output
    (a ``config.json``, nothing but :data:`CHECKPOINT_FILES`, and a ``model.safetensors`` with
    :data:`CHECKPOINT_MARK`)."""
    try:
        os.fsencode(str(out)).decode("utf-8")
    except UnicodeDecodeError:   # the tokenizer's writer (Rust) and vLLM's loader take UTF-8 paths only
        raise UserInputError(f"checkpoint output {str(out)!r} is not a UTF-8 path; accepted: a path whose names are "
                             f"UTF-8 text (the tokenizer library and vLLM read no other)") from None
    if out.exists() and not out.is_dir():
        raise UserInputError(f"checkpoint output {str(out)!r} exists and is not a directory; accepted: a new or "
                             f"empty directory path")
    if out.is_symlink() and not out.exists():   # the final rename could not replace it with the checkpoint
        raise UserInputError(f"checkpoint output {str(out)!r} is a symbolic link to {os.readlink(out)!r}, which does "
                             f"not exist; accepted: a new or empty directory path (or a link to an existing one)")
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise UserInputError(f"checkpoint directory {str(out)!r} is or holds the current working directory, which "
                             f"would be replaced; accepted: a directory outside it")
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not overwrite:
        raise UserInputError(f"checkpoint directory {str(out)!r} exists and is not empty; accepted: a new or empty "
                             f"directory, or --overwrite (overwrite=True in Python) for an earlier checkpoint")
    others = sorted((p for p in out.iterdir() if not _checkpoint_file(p.name) or not p.is_file()), key=str)
    if others or not (out / "config.json").is_file():
        what = (f"holds {', '.join(map(_entry, others[:5]))}{' ...' if len(others) > 5 else ''}" if others else
                "has no config.json")
        raise UserInputError(f"checkpoint directory {str(out)!r} {what}: --overwrite replaces only an earlier "
                             f"make-checkpoint output (the files {', '.join(sorted(CHECKPOINT_FILES))}); accepted: a "
                             f"new or empty directory, or such a checkpoint with --overwrite")
    if not _marked(out):
        raise UserInputError(f"checkpoint directory {str(out)!r} was not written by make-checkpoint (its "
                             f"config.json does not carry {json.dumps(CHECKPOINT_MARK)[1:-1]}, nor is it a glm-5-tiny "
                             f"checkpoint of an earlier version): --overwrite replaces only an earlier "
                             f"make-checkpoint output; accepted: a new or empty directory (delete an old one yourself)")


def _entry(p: Path) -> str:
    """A folder entry's name and, where it is no regular file, what it is (issue 47, round 9: a folder or a link to
    /dev/full named like a checkpoint file was named only)."""
    if p.is_symlink():
        return f"{p.name} (a link to {os.readlink(p)!r}{', not a regular file' if not p.is_file() else ''})"
    if p.is_dir():
        return f"{p.name} (a folder)"
    return p.name if p.is_file() else f"{p.name} (not a regular file: a FIFO, device or socket)"


def _check_gguf_types(types) -> tuple[str, ...]:
    """``--gguf`` values as :data:`GGUF_TYPES` keys (whatever their case, each once), with gguf-py importable; one
    UserInputError line naming a bad type or the missing extra."""
    if isinstance(types, str):
        types = (types,)
    out: list[str] = []
    for t in types or ():
        key = str(t).strip().upper()
        if key not in GGUF_TYPES:
            raise UserInputError(f"--gguf {t!r} is not a GGUF type make-checkpoint writes; accepted: "
                                 f"{', '.join(GGUF_TYPES)}")
        if key not in out:
            out.append(key)
    if out:
        from ..extras import require

        require("make-checkpoint --gguf", "gguf")
    return tuple(out)


def _check_gguf_layout(types: tuple[str, ...], preset: str, cfg: dict) -> None:
    """``--gguf`` writes llama.cpp's glm-dsa layout of GLM-5 (every layer with its indexer, GLM-5's rope): refuse it,
    in one UserInputError line, for a checkpoint that layout cannot describe -- top-k sharing (glm-dsa has no key for
    it, and a GGUF missing some layers' indexer tensors reads as converted without the indexer) and any preset other
    than glm-5-tiny (DeepSeek-V3.2's YaRN and NeoX indexer rope have no glm-dsa keys)."""
    if not types:
        return
    if preset != "glm-5-tiny":
        raise UserInputError(f"--gguf with --preset {preset!r}: make-checkpoint writes GGUFs in llama.cpp's glm-dsa "
                             f"layout of GLM-5 only; accepted: --gguf with --preset glm-5-tiny")
    shared = [k for k in ("index_topk_pattern", "index_topk_freq", "indexer_types") if cfg.get(k) is not None]
    if shared:
        raise UserInputError(f"--gguf with top-k sharing ({shared[0]}): llama.cpp's glm-dsa layout has no key for "
                             f"shared top-k layers (every layer carries its indexer); accepted: --gguf without "
                             f"--index-topk-pattern, --index-topk-freq and --indexer-types")


def clear_stale_temporaries(out: Path) -> list[Path]:
    """Remove the hidden folders an earlier ``make_checkpoint`` into ``out`` left beside it when it was killed (SIGKILL
    leaves no time to clean up): ``.{name}.tmp-{pid}-*`` and ``.{name}.old-{pid}-*`` whose process no longer runs.
    A live process's temporaries (another make-checkpoint into the same folder) are left alone. Returns those
    removed."""
    import re

    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(?:tmp|old)-(\d+)-")
    removed = []
    for p in out.parent.iterdir() if out.parent.is_dir() else ():
        m = pattern.match(p.name)
        if not m or not p.is_dir() or p.is_symlink():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue                                   # its process still runs
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, OSError):
            continue                                   # another user's process, or no answer: leave it
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def _preset_config(preset, index_topk, num_layers, mtp, num_heads, max_position_embeddings, sharing: dict, *,
                   gguf, seed, gguf_split_max_tensors, config_only: bool = False) -> tuple[str, dict]:
    """``(preset, config)`` of :func:`make_checkpoint`: the preset's name in its own case where it is known, and its
    ``config.json`` (GLM-5.3-Flash: the tiny form, or with ``config_only`` the real one; the options it cannot honour
    refused). Raises :class:`UserInputError`."""
    if isinstance(preset, str) and preset.lower() in (*PRESET_CONFIGS, GLM5_NEXT_PRESET):
        preset = preset.lower()                       # names match whatever their case (an unknown one: as given)
    if not isinstance(config_only, bool):
        raise UserInputError(f"config_only {config_only!r} is not accepted; accepted: True or False")
    if preset != GLM5_NEXT_PRESET:
        if config_only and preset in PRESET_CONFIGS:
            raise UserInputError(f"--config-only with --preset {preset!r}: only --preset {GLM5_NEXT_PRESET} writes a "
                                 f"config alone (for the diagnosis); accepted: --preset {GLM5_NEXT_PRESET} "
                                 f"--config-only, or --preset {preset!r} without it")
        return preset, preset_config(preset, index_topk, num_layers, mtp, num_heads, max_position_embeddings,
                                     **sharing)
    from .glm5next_config import glm5next_config, refuse_options

    refuse_options(config_only=config_only, mtp=mtp, gguf=gguf, seed=seed,
                   gguf_split_max_tensors=gguf_split_max_tensors or None, **sharing)
    cfg = glm5next_config(index_topk, num_layers, num_heads, tiny=not config_only,
                          max_position_embeddings=max_position_embeddings)
    require_vllm_model(cfg, preset)       # a config for vLLM 0.33/0.34: refused where vLLM has no GLM-5.3-Flash
    return preset, cfg


def _checked_out_dir(out_dir, overwrite: bool) -> Path:
    """The absolute checkpoint folder of :func:`make_checkpoint` (through a symlink: where it points), its parent
    made once every check passed. Raises :class:`UserInputError`."""
    if str(out_dir).strip() == "":
        raise UserInputError(f"checkpoint directory {str(out_dir)!r} is empty; accepted: a directory path")
    out = Path(os.path.normpath(expand_path(out_dir, "checkpoint directory").absolute()))   # "..", "a/." too
    if out.is_symlink() and out.exists():   # written through the link: the checkpoint goes where it points
        out = out.resolve()
    refuse_system_folders(out, out_dir, "checkpoint directory")     # /dev itself too, before "not empty"
    _check_out_dir(out, overwrite)
    writable_dir(out.parent, "checkpoint parent directory")
    make_dir(out.parent)   # every check passed: the folder the checkpoint goes into
    clear_stale_temporaries(out)
    return out


def make_checkpoint(out_dir: str | os.PathLike, preset: str = "glm-5-tiny", index_topk: int = 2048, seed: int = 0,
                    num_layers: int | None = None, overwrite: bool = False, mtp: bool = False,
                    gguf: tuple[str, ...] = (), *, index_topk_pattern: str | None = None,
                    index_topk_freq: int | None = None, index_skip_topk_offset: int | None = None,
                    indexer_types: str | None = None, num_heads: int | None = None,
                    gguf_split_max_tensors: int = 0, max_position_embeddings: int | None = None,
                    config_only: bool = False) -> Path:
    """Write a random-weight GLM-5-architecture Hugging Face checkpoint to ``out_dir`` and return its path.

    Everything is written into a temporary directory next to ``out_dir`` and renamed into place at the end, so a
    failed run leaves nothing half-written. Same arguments -> byte-identical files. ``mtp`` adds GLM-5's MTP layer
    (see the module docstring); without it the files are those of earlier versions for the same seed. ``gguf``
    (``--gguf TYPE``, repeatable): also write the checkpoint as ``model-{TYPE}.gguf`` in llama.cpp's ``glm-dsa`` layout
    for each TYPE of :data:`~sparse_mla.gguf.writer.GGUF_TYPES` (:func:`~sparse_mla.gguf.writer.write_gguf`;
    needs gguf-py, the ``gguf`` extra); ``gguf_split_max_tensors`` > 0 writes each split as GGUFs of large models
    ship, ``model-{TYPE}-00001-of-0000N.gguf`` ... (gguf-py's split writer).

    ``preset`` ``glm-5.3-flash`` writes GLM-5.3-Flash's tiny checkpoint (:mod:`.glm5next_config`,
    :mod:`.glm5next_weights`: ``index_topk``, ``num_layers``, ``num_heads``, ``seed``, ``max_position_embeddings`` and
    ``overwrite`` apply; ``mtp``, ``gguf`` and top-k sharing are refused), or with ``config_only`` the real model's
    ``config.json`` alone, for the diagnosis (``index_topk``, ``num_layers``, ``num_heads`` and ``overwrite`` apply).
    Both need vLLM 0.33/0.34 (its model registry) and a transformers with ``glm5_next``.

    ``preset`` matches whatever its case. Raises :class:`UserInputError` for an unknown preset, a bad ``index_topk``
    (not a positive multiple of 128) or ``num_layers``, or an existing non-empty ``out_dir`` without
    ``overwrite=True``.
    """
    sharing = dict(index_topk_pattern=index_topk_pattern, index_topk_freq=index_topk_freq,
                   index_skip_topk_offset=index_skip_topk_offset, indexer_types=indexer_types)
    preset, cfg = _preset_config(preset, index_topk, num_layers, mtp, num_heads, max_position_embeddings, sharing,
                                 gguf=gguf, seed=seed, gguf_split_max_tensors=gguf_split_max_tensors,
                                 config_only=config_only)
    gguf = _check_gguf_types(gguf)
    _check_gguf_layout(gguf, preset, cfg)
    if isinstance(gguf_split_max_tensors, bool) or not isinstance(gguf_split_max_tensors, int) \
            or gguf_split_max_tensors < 0 or (gguf_split_max_tensors and not gguf):
        raise UserInputError(f"--gguf-split-max-tensors {gguf_split_max_tensors!r} is not accepted; accepted: a "
                             f"positive integer (tensors per shard) together with --gguf TYPE (0, the default: no "
                             f"split)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserInputError(f"seed {seed!r} is not a non-negative integer; accepted: 0, 1, 2, ...")
    out = _checked_out_dir(out_dir, overwrite)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    except OSError as e:
        raise UserInputError(f"checkpoint directory {str(out_dir)!r}: no folder can be made next to it ({e.strerror}); "
                             f"accepted: {what_would_fix(e)}") from None
    try:
        (tmp / "config.json").write_text(json.dumps({**cfg, **CHECKPOINT_MARK}, indent=2, sort_keys=True) + "\n")
        if not config_only:
            _write_weights(tmp, cfg, seed, gguf, gguf_split_max_tensors, glm5next=preset == GLM5_NEXT_PRESET)
        os.chmod(tmp, 0o755)
        # Re-check right before the rename (another process may have created the directory meanwhile).
        _check_out_dir(out, overwrite)
        if out.is_dir():
            _replace_dir(out, tmp)
        else:
            os.rename(tmp, out)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_write_failure(e):         # a full disk, a file-size limit: one line, nothing left behind
            raise write_failure(out, e) from None
        raise
    return out


def _replace_dir(out: Path, new: Path) -> None:
    """Put the folder ``new`` where the folder ``out`` is: ``out`` moved aside first, removed once ``new`` stands in its
    place. Where ``out`` cannot be moved (a mount point, an immutable folder) nothing has changed and
    :class:`UserInputError` says why; where ``new`` then cannot take its place, ``out`` is moved back first."""
    trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
    try:
        os.rename(out, trash / out.name)
    except OSError as e:
        trash.rmdir()
        raise UserInputError(f"checkpoint directory {str(out)!r} cannot be replaced: it cannot be renamed "
                             f"({e.strerror}: a mount point, an immutable folder?); it was left as it was; accepted: "
                             f"a folder this user may rename, or a new OUT") from None
    try:
        os.rename(new, out)
    except BaseException:
        os.rename(trash / out.name, out)
        trash.rmdir()
        raise
    shutil.rmtree(trash, ignore_errors=True)


def _write_weights(tmp: Path, cfg: dict, seed: int, gguf: tuple[str, ...], gguf_split_max_tensors: int,
                   glm5next: bool = False) -> None:
    """Into ``tmp``: the seeded weights (``model.safetensors``; ``glm5next``: GLM-5.3-Flash's,
    :func:`sparse_mla.launch.glm5next_weights.make_state_dict`), ``generation_config.json``, the tokenizer and each
    GGUF of ``gguf`` (see :func:`make_checkpoint`)."""
    import torch
    from safetensors.torch import save_file

    with torch.no_grad():
        if glm5next:
            from .glm5next_weights import make_state_dict as glm5next_state_dict

            sd = glm5next_state_dict(cfg, seed)
        else:
            sd = make_state_dict(cfg, seed)
    save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    os.chmod(tmp / "model.safetensors", 0o644)   # safetensors creates it 0600; other users' servers read it
    gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
           "pad_token_id": cfg["pad_token_id"]}
    (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")
    _train_tokenizer(cfg["vocab_size"]).save_pretrained(str(tmp))
    if gguf:
        from ..gguf.writer import converter_tensors, write_gguf

        count = sum(1 for _ in converter_tensors(cfg, sd))
        if gguf_split_max_tensors and gguf_split_max_tensors >= count:
            raise UserInputError(f"--gguf-split-max-tensors {gguf_split_max_tensors} is not below the model's "
                                 f"{count} GGUF tensors: gguf-py would write one unsplit file; accepted: 1 to "
                                 f"{count - 1}, or no --gguf-split-max-tensors for one file")
        for t in gguf:
            write_gguf(tmp / gguf_file_name(t), cfg, sd, tmp, t, split_max_tensors=gguf_split_max_tensors)


def load_weights(path: str | os.PathLike) -> tuple[dict, dict]:
    """``(config dict, {name: tensor})`` of a checkpoint directory (:func:`load_checkpoint`) or of a GLM-5 GGUF file
    (``*.gguf``: the config beside it and its dequantized weights, :func:`sparse_mla.launch.gguf_reader.
    load_gguf_checkpoint`) -- the weights an engine loads from ``path``."""
    from ..gguf.files import is_gguf

    if is_gguf(path):
        from .gguf_reader import load_gguf_checkpoint

        return load_gguf_checkpoint(path)
    return load_checkpoint(path)


def load_checkpoint(path: str | os.PathLike) -> tuple[dict, dict]:
    """Read a Hugging Face checkpoint directory: ``(config dict, {name: tensor})``.

    Accepts ``config.json`` plus either ``model.safetensors.index.json`` (sharded; the files its ``weight_map``
    names) or every ``*.safetensors`` in the directory. No tokenizer is needed, so a real GLM-5 directory works too
    (tensors keep their stored dtypes -- fp8 weights and their ``weight_scale_inv`` stay as stored).
    Raises :class:`UserInputError` if the directory, its config or its weights are missing.
    """
    from safetensors.torch import load_file

    d = expand_path(path, "checkpoint")
    if not d.is_dir():
        raise UserInputError(f"checkpoint {str(path)!r} is not a directory; accepted: a Hugging Face model directory "
                             f"with config.json and *.safetensors")
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise UserInputError(f"checkpoint {str(path)!r} has no config.json; accepted: a Hugging Face model directory")
    from ..files import read_json

    cfg = read_json(cfg_path, accepted="a JSON Hugging Face config")
    index = d / "model.safetensors.index.json"
    if index.is_file():
        accepted = "a JSON object with a 'weight_map' of tensor name -> shard file"
        try:
            weight_map = read_json(index, accepted=accepted)["weight_map"]
            files = [d / f for f in sorted(set(weight_map.values()))]
        except (KeyError, TypeError, AttributeError) as e:
            raise UserInputError(f"malformed {str(index)!r} ({type(e).__name__}: {e}); accepted: a JSON object with a "
                                 f"'weight_map' of tensor name -> shard file") from None
    else:
        files = sorted(d.glob("*.safetensors"))
    if not files:
        raise UserInputError(f"checkpoint {str(path)!r} has no *.safetensors files; accepted: a directory with "
                             f"model.safetensors or a sharded model.safetensors.index.json")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise UserInputError(f"checkpoint {str(path)!r}: shard(s) named by model.safetensors.index.json are missing: "
                             f"{', '.join(missing)}")
    state: dict = {}
    for f in files:
        try:
            state.update(load_file(str(f)))
        except Exception as e:  # noqa: BLE001  (safetensors raises its own SafetensorError)
            raise UserInputError(f"cannot read {str(f)!r} ({type(e).__name__}: {e}); accepted: a safetensors "
                                 f"file") from None
    return cfg, state


def checkpoint_summary(path: str | os.PathLike) -> dict[str, Any]:
    """Path, parameter count (from safetensors headers, no tensor loading) and file sizes of a checkpoint dir."""
    from safetensors import safe_open

    d = Path(path)
    n_params = 0
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            for k in sf.keys():
                shape = sf.get_slice(k).get_shape()
                n = 1
                for s in shape:
                    n *= s
                n_params += n
    files = {p.name: p.stat().st_size for p in sorted(d.iterdir()) if p.is_file()}
    return {"path": str(d), "num_parameters": n_params, "files": files, "total_bytes": sum(files.values())}


def _cmd_make_checkpoint(args) -> int:
    out = make_checkpoint(args.out, preset=args.preset, index_topk=args.index_topk, seed=args.seed,
                          num_layers=args.layers, overwrite=args.overwrite, mtp=args.mtp, gguf=tuple(args.gguf or ()),
                          index_topk_pattern=args.index_topk_pattern, index_topk_freq=args.index_topk_freq,
                          index_skip_topk_offset=args.index_skip_topk_offset, indexer_types=args.indexer_types,
                          num_heads=args.heads, gguf_split_max_tensors=args.gguf_split_max_tensors,
                          max_position_embeddings=args.max_position_embeddings, config_only=args.config_only)
    s = checkpoint_summary(out)
    print(f"wrote {s['path']}")
    if args.config_only:
        print(f"  GLM-5.3-Flash's config only, no weights: `sparse-mla diagnose --model {s['path']}` under vLLM 0.33/0.34")
    else:
        print(f"  parameters: {s['num_parameters']:,} ({s['num_parameters'] / 1e6:.1f} M)")
    for name, size in s["files"].items():
        print(f"  {name:<28} {size:>14,} B")
    print(f"  total: {s['total_bytes'] / 2**20:.1f} MiB")
    return 0


def add_cli(subparsers) -> None:
    """Add ``make-checkpoint`` to the ``sparse-mla`` command line."""
    p = subparsers.add_parser(
        "make-checkpoint", help="write a random-weight GLM-5-architecture checkpoint (HF format)",
        description="Write a seeded random-weight GLM-5-architecture (glm_moe_dsa) Hugging Face checkpoint: "
                    "config.json, model.safetensors (bf16, vLLM weight names), generation_config.json, tokenizer "
                    f"(--preset {GLM5_NEXT_PRESET}: GLM-5.3-Flash's, glm5_next, tensors named by transformers).")
    p.add_argument("out", metavar="OUT", help="output directory (must be new or empty unless --overwrite)")
    p.add_argument("--preset", default="glm-5-tiny", help=f"config preset (default glm-5-tiny; accepted: "
                                                          f"{', '.join(PRESETS)}; {GLM5_NEXT_PRESET}: a tiny "
                                                          f"GLM-5.3-Flash for vLLM 0.33/0.34)")
    p.add_argument("--index-topk", type=cli_int, default=2048,
                   help="indexer top-k, a positive multiple of 128 (default 2048 as GLM-5; e.g. 256 makes "
                        "sparsity bind on short prompts)")
    p.add_argument("--seed", type=cli_int, default=0, help="weight seed (default 0)")
    p.add_argument("--layers", type=cli_int, default=None, help=f"number of layers (default: the preset's: 2; {GLM5_NEXT_PRESET} 8)")
    p.add_argument("--heads", type=cli_int, default=None,
                   help=f"attention heads (default: the preset's, GLM-5's 64; {GLM5_NEXT_PRESET} 8); 8 is GLM-5's heads "
                        f"per rank at tensor-parallel 8, served on one GPU")
    p.add_argument("--max-position-embeddings", type=cli_int, default=None, metavar="N",
                   help="config max_position_embeddings, the longest context vLLM accepts (default: the preset's, "
                        "8192 for glm-5-tiny; GLM-5's is 202752): raise it for long prompts")
    p.add_argument("--overwrite", action="store_true", help="replace an existing non-empty OUT")
    p.add_argument("--config-only", action="store_true",
                   help=f"with --preset {GLM5_NEXT_PRESET}: the real GLM-5.3-Flash's config.json alone (45 layers, 64 "
                        f"heads, 288 experts; no weights, no tokenizer), for `sparse-mla diagnose --model OUT`")
    p.add_argument("--mtp", action="store_true",
                   help="add GLM-5's one MTP layer (num_nextn_predict_layers 1) for vLLM's speculative decoding "
                        "(--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}')")
    p.add_argument("--gguf", action="append", metavar="TYPE",
                   help=f"also write OUT/model-TYPE.gguf in llama.cpp's glm-dsa layout (repeatable; accepted: "
                        f"{', '.join(GGUF_TYPES)}; needs the gguf extra)")
    p.add_argument("--gguf-split-max-tensors", type=cli_int, metavar="N", default=0,
                   help="with --gguf: split each GGUF as large models ship, at most N tensors per shard "
                        "(OUT/model-TYPE-00001-of-0000K.gguf ..., gguf-py's split writer)")
    share = p.add_mutually_exclusive_group()
    share.add_argument("--index-topk-pattern", metavar="FS..", default=None,
                       help="GLM-5.2 top-k sharing as vLLM reads it: config index_topk_pattern, one letter per layer "
                            "(F: own indexer, S: reuse the previous full layer's top-k, no indexer weights); sets "
                            "--layers to its length")
    share.add_argument("--index-topk-freq", type=cli_int, metavar="N", default=None,
                       help="top-k sharing as config index_topk_freq (layer l full iff max(l - offset + 1, 0) %% N "
                            "== 0)")
    share.add_argument("--indexer-types", metavar="FS..", default=None,
                       help="GLM-5.2-style config: the sharing as indexer_types [\"full\", \"shared\", ...] only "
                            "(vLLM 0.26 does not read it: load it with the sparse_mla plugin)")
    p.add_argument("--index-skip-topk-offset", type=cli_int, metavar="M", default=None,
                   help="with --index-topk-freq: config index_skip_topk_offset (vLLM's default 2)")
    p.set_defaults(func=_cmd_make_checkpoint)
