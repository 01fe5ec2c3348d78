"""Model presets and Hugging Face config loading: the attention geometry that decides vLLM's backend choice.

GLM-5 (``zai-org/GLM-5``, ``GlmMoeDsaForCausalLM`` / ``glm_moe_dsa``) and DeepSeek-V3.2 (``DeepseekV32ForCausalLM`` /
``deepseek_v32``) are DeepSeek-Sparse-Attention (DSA) models: Multi-head Latent Attention (MLA) whose absorbed
head is ``kv_lora_rank + qk_rope_head_dim = 512 + 64 = 576`` wide, plus a lightning *indexer* that selects
``index_topk`` cache entries per query token. vLLM turns ``use_sparse`` on when the config has ``index_topk``
(``vllm/model_executor/models/deepseek_v2.py``: ``self.is_v32 = hasattr(config, "index_topk")``).

GLM-5.3-Flash (``glm5_next``, :data:`GLM5_NEXT_MODEL_TYPES`) is read too, for the diagnosis only: its MLA layers have
no RoPE part (``qk_rope_head_dim`` 0, absorbed head ``kv_lora_rank`` = 512) and only vLLM 0.33's model registry has it
(``vllm/models/glm5next/``); :func:`require_vllm_model` refuses it, in one line, under a vLLM that does not.

Sources: transformers ``configuration_glm_moe_dsa.py`` (defaults are zai-org/GLM-5), DeepSeek-V3.2-Exp
``inference/config_671B_v3.2.json``, transformers ``configuration_glm5_next.py`` (``Glm5NextTextConfig``:
``qk_rope_head_dim`` 0, "Expecting NoPE for the DSA attention layers").
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserInputError, expand_path

#: The full Hugging Face ``config.json`` of each preset (real geometry, real sizes).
PRESET_CONFIGS: dict[str, dict[str, Any]] = {
    "glm-5": {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "vocab_size": 154880,
        "hidden_size": 6144,
        "intermediate_size": 12288,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 78,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "q_lora_rank": 2048,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "v_head_dim": 256,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 202752,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "rope_interleave": True,
        "index_topk": 2048,
        "index_head_dim": 128,
        "index_n_heads": 32,
        "indexer_rope_interleave": True,
        "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    },
    "deepseek-v3.2": {
        "architectures": ["DeepseekV32ForCausalLM"],
        "model_type": "deepseek_v32",
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "n_group": 8,
        "topk_group": 4,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 163840,
        "rope_parameters": {
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
            "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
            "mscale": 1.0, "mscale_all_dim": 1.0,
        },
        "index_topk": 2048,
        "index_head_dim": 128,
        "index_n_heads": 64,
        "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    },
}

PRESETS = tuple(PRESET_CONFIGS)

#: GLM-5.3-Flash's model types: the flat (text-only) config and a multimodal config's ``text_config``
#: (transformers ``Glm5NextConfig`` / ``Glm5NextTextConfig``). Their MLA is NoPE: ``qk_rope_head_dim`` 0 is allowed
#: for them only.
GLM5_NEXT_MODEL_TYPES = ("glm5_next", "glm5_next_text")
#: Its architectures, as vLLM's model registry names them (``vllm/model_executor/models/registry.py`` of 0.33).
GLM5_NEXT_ARCHITECTURES = ("Glm5NextForCausalLM", "Glm5NextForConditionalGeneration")
#: The tested vLLM lines (:data:`sparse_mla.vllm_lines.TESTED_LINES`) whose registry has them
#: (``tests/diagnose/test_glm5next.py`` holds them to the installed registry), and the first of them, which messages
#: name; the workbook diagnoses the model there and does not run it.
GLM5_NEXT_VLLM_LINES = ("0.33", "0.34")
GLM5_NEXT_VLLM_LINE = GLM5_NEXT_VLLM_LINES[0]

#: Keys an MLA config must have for vLLM to build MLA attention from it.
_MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "num_attention_heads")


@dataclass(frozen=True)
class ModelGeometry:
    """The attention geometry of an MLA (optionally DSA-sparse) model.

    ``head_size`` is vLLM's absorbed MLA head, ``kv_lora_rank + qk_rope_head_dim`` (576 for GLM-5 and
    DeepSeek-V3.2); ``sm_scale`` is the softmax scale the model uses, ``qk_head_dim ** -0.5`` where
    ``qk_head_dim = qk_nope_head_dim + qk_rope_head_dim`` (1/16 for GLM-5), not ``576 ** -0.5``.
    ``index_topk`` is ``None`` for dense MLA (DeepSeek-V3-style configs), which vLLM selects as non-sparse.
    """

    name: str
    model_type: str
    architecture: str
    num_attention_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_topk: int | None
    index_head_dim: int | None
    index_n_heads: int | None
    hf_config: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    #: the whole config.json as given (``hf_config`` is its text part) and the file or folder it came from
    raw_config: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    source: str | None = field(default=None, compare=False)

    @property
    def head_size(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def sm_scale(self) -> float:
        return self.qk_head_dim ** -0.5

    @property
    def use_sparse(self) -> bool:
        """vLLM's rule: a model is DSA-sparse iff its config has ``index_topk``."""
        return self.index_topk is not None

    def heads_per_rank(self, tp: int) -> int:
        """Attention heads one tensor-parallel rank holds (vLLM shards MLA heads evenly)."""
        if tp < 1 or self.num_attention_heads % tp:
            raise UserInputError(
                f"tensor-parallel size {tp!r} does not divide num_attention_heads "
                f"{self.num_attention_heads}; accepted: a positive divisor of it")
        return self.num_attention_heads // tp

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("hf_config")
        d.pop("raw_config")
        d.update(head_size=self.head_size, qk_head_dim=self.qk_head_dim, sm_scale=self.sm_scale,
                 use_sparse=self.use_sparse)
        return d


#: Dimensions of a Hugging Face MLA / MoE config that must be positive integers (below 2**31) wherever the config has
#: them: the workbook's own rule, applied before vLLM or transformers see the config (``null`` stays allowed: e.g.
#: ``q_lora_rank`` of DeepSeek-V2-Lite).
POSITIVE_DIMENSIONS = ("hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
                       "num_attention_heads", "num_key_value_heads", "vocab_size", "max_position_embeddings",
                       "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                       "index_topk", "index_head_dim", "index_n_heads", "n_routed_experts", "num_experts_per_tok",
                       "moe_layer_freq", "n_group", "topk_group")
#: Counts that may be 0 but not negative (a model without shared experts, dense layers or MTP layers).
NON_NEGATIVE_DIMENSIONS = ("n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers")
#: ``(smaller, larger)``: a config's ``smaller`` may not exceed its ``larger`` (experts routed to per token among the
#: routed experts; groups kept among the groups; dense layers among the layers; the indexer's rotary part within its
#: head: vLLM's ``Indexer`` splits the head into ``[qk_rope_head_dim, index_head_dim - qk_rope_head_dim]``).
AT_MOST = (("num_experts_per_tok", "n_routed_experts"), ("topk_group", "n_group"),
           ("first_k_dense_replace", "num_hidden_layers"), ("qk_rope_head_dim", "index_head_dim"))


#: Upper bounds checked before vLLM builds anything (the diagnosis builds vLLM's model on the meta device, one module
#: per layer: 100,000 layers ran past two minutes; 10 million experts took 4 GB of host memory; 2**31 - 1 attention
#: heads took 20 GB and ran past 150 s, a million 42 s: issue 47, round 15, z64): far above any DSA model (GLM-5:
#: 78 layers, 256 experts, 64 attention heads, 32 indexer heads; DeepSeek-V3.2: 128 and 64).
UPPER_BOUNDS = {"num_hidden_layers": 1024, "n_routed_experts": 65536, "num_experts_per_tok": 65536,
                "num_attention_heads": 4096, "num_key_value_heads": 4096, "index_n_heads": 4096}


#: Numbers of a config vLLM's model code computes with (``RMSNorm(..., eps=config.rms_norm_eps)``, the routed experts'
#: output times ``routed_scaling_factor`` in ``deepseek_v2.py``): finite and not negative (a NaN epsilon makes every
#: norm NaN, yet vLLM builds the model and the engine starts).
FINITE_NON_NEGATIVE = ("rms_norm_eps", "routed_scaling_factor")


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The text model's part of a Hugging Face config: its ``text_config`` when that is an object, else the config
    itself (the one reading of every module)."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, dict) else cfg


def check_config(cfg, name: str) -> dict[str, Any]:
    """The text config (``text_config`` if there is one) of a Hugging Face config dict, after the one validation
    ``diagnose``, ``make-checkpoint`` and ``launch`` share: a JSON object; each of :data:`POSITIVE_DIMENSIONS` it has
    a positive integer (``qk_rope_head_dim`` may be 0 for GLM-5.3-Flash's NoPE MLA, :data:`GLM5_NEXT_MODEL_TYPES`);
    ``model_type`` a string; ``architectures`` a non-empty list of class names. Raises
    :class:`UserInputError` naming the config, the field and what is accepted."""
    if not isinstance(cfg, dict):
        raise UserInputError(f"config {name!r} is not a JSON object; accepted: a Hugging Face config.json")
    if cfg.get("text_config") is not None and not isinstance(cfg["text_config"], dict):
        raise UserInputError(f"config {name!r} has text_config = {_short(cfg['text_config'])}, which is not a config "
                             f"object; accepted: a JSON object (the text model's config) or no text_config")
    text = text_config(cfg)
    for k in POSITIVE_DIMENSIONS:
        v = text.get(k)
        if k == "qk_rope_head_dim" and v == 0 and _nope(text, cfg):
            continue
        top = UPPER_BOUNDS.get(k, 2**31 - 1)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= top):
            glm5 = PRESET_CONFIGS["glm-5"].get(k)
            raise UserInputError(f"config {name!r} has {k} = {_short(v)}, which must be a positive integer up to {top}; "
                                 f"accepted: an integer from 1 to {top}" + (f" (GLM-5: {k} {glm5})" if glm5 else ""))
    for k in NON_NEGATIVE_DIMENSIONS:
        v = text.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 2**31 - 1):
            raise UserInputError(f"config {name!r} has {k} = {_short(v)}; accepted: an integer from 0 to {2**31 - 1}")
    for k in FINITE_NON_NEGATIVE:
        v = text.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
            raise UserInputError(f"config {name!r} has {k} = {_short(v)}; accepted: a finite number of at least 0 "
                                 f"(GLM-5: {k} {PRESET_CONFIGS['glm-5'][k]})")
    ihd = text.get("index_head_dim")
    if isinstance(ihd, int) and ihd % INDEXER_QUANT_BLOCK:
        raise UserInputError(f"config {name!r} has index_head_dim = {ihd}; accepted: a multiple of "
                             f"{INDEXER_QUANT_BLOCK} (vLLM's indexer K cache keeps one fp32 scale per "
                             f"{INDEXER_QUANT_BLOCK} values, Indexer.quant_block_size in deepseek_v2.py; GLM-5: 128)")
    for small, large in AT_MOST:
        a, b = text.get(small), text.get(large)
        if isinstance(a, int) and isinstance(b, int) and a > b:
            raise UserInputError(f"config {name!r} has {small} = {a} above {large} = {b}; accepted: {small} from "
                                 f"{0 if small in NON_NEGATIVE_DIMENSIONS or small == 'qk_rope_head_dim' else 1} "
                                 f"to {large}")
    _check_rope_scaling(text, name)
    _check_block_size(text, cfg, name)
    _check_sharing(text, name)
    for k in ("dtype", "torch_dtype"):
        v = text.get(k, cfg.get(k))
        if v is not None and not (isinstance(v, str) and v.isidentifier()):
            raise UserInputError(f"config {name!r} has {k} = {_short(v)}; accepted: a dtype name, e.g. 'bfloat16'")
    mt = text.get("model_type", cfg.get("model_type"))
    if mt is not None and not isinstance(mt, str):
        raise UserInputError(f"config {name!r} has model_type = {_short(mt)}; accepted: a string, e.g. 'glm_moe_dsa'")
    archs = text.get("architectures", cfg.get("architectures"))
    if archs is not None and (not isinstance(archs, list) or not archs
                              or not all(isinstance(a, str) and a.isidentifier() for a in archs)):
        raise UserInputError(f"config {name!r} has architectures = {_short(archs)}; accepted: a list of class names, "
                             f"e.g. [\"GlmMoeDsaForCausalLM\"]")
    return text


#: The indexer sharing keys of a config, the types vLLM reads them as and their items (``None``: any item), as the
#: config's reader takes them: ``indexer_types`` as transformers and vLLM 0.34 map it (``["full", "shared", ...]``);
#: ``index_topk_pattern`` as vLLM reads it (``pattern[layer] == "S"`` on a string or a list, ``deepseek_v2.py``; the
#: letters transformers' ``GlmMoeDsaConfig`` cannot map are its ``KeyError``, named by the diagnosis in vLLM's words);
#: ``index_skip_topk_offset`` any number (vLLM: ``max(layer - offset + 1, 0)``); ``index_topk_freq``:
#: :func:`_check_freq`.
SHARING_KEYS = {"index_topk_pattern": ((str, list), None, "a string (or list) of F (full) and S (shared), one per "
                                       "layer; vLLM reads every entry but 'S' as full"),
                "indexer_types": (list, ("full", "shared"), "a list of 'full' / 'shared', one per layer"),
                "index_skip_topk_offset": ((int, float), None, "a finite number (vLLM's default: 2)")}


def check_sharing_length(pattern: str, num_layers: int, what: str) -> None:
    """A top-k sharing's ``F``/``S`` letters (an ``index_topk_pattern``, or an ``indexer_types`` list as letters) one
    per decoder layer: make-checkpoint's and the reference forward's rule (:mod:`sparse_mla.launch.index_sharing`),
    and vLLM's from 0.34, which refuses an ``indexer_types`` of another length ("indexer_types must contain one entry
    per hidden layer"); the diagnosis names a declaration vLLM 0.26 runs otherwise by it. Raises
    :class:`UserInputError` naming ``what`` (the key or flag), the letters and what is accepted."""
    if len(pattern) != num_layers:
        raise UserInputError(f"{what} {pattern!r} has {len(pattern)} letters for {num_layers} layers; accepted: one "
                             f"letter per decoder layer ({num_layers})")


def sharing_disagreement(indexer_types: str, vllm_reads: str) -> str | None:
    """Where a config declares its top-k sharing twice, ``indexer_types`` (as ``F``/``S`` letters) and
    ``index_topk_pattern`` / ``index_topk_freq`` (``vllm_reads``: the letters vLLM builds from them, one per layer),
    the line naming both where they differ: transformers (and the reference forward) follow ``indexer_types``, vLLM
    0.26 the pattern / freq (``DeepseekV2MLAAttention.__init__`` reads nothing else; the plugin's hook gives vLLM
    ``indexer_types`` only where neither is set). None where they agree. make-checkpoint writes one of the keys
    (:func:`sparse_mla.launch.index_sharing.sharing_keys`); the reference forward refuses two that disagree
    (``own_indexer``); the diagnosis names them (breaker round 11: th)."""
    if indexer_types == vllm_reads:
        return None
    return (f"the config's indexer_types ({indexer_types}) and its index_topk_pattern / index_topk_freq "
            f"({vllm_reads}) disagree: transformers follows the first, vLLM the second")


def _check_sharing(text: dict[str, Any], name: str) -> None:
    """The indexer sharing keys (:data:`SHARING_KEYS`), where present, of a type vLLM reads, each item of
    ``indexer_types`` one transformers maps; ``index_topk_freq`` by :func:`_check_freq`. What vLLM reads its own way
    (a lower-case or list pattern, a float or negative freq) passes: the diagnosis says what vLLM builds from it, and
    vLLM 0.34 (or transformers) refuses what it refuses in its own words (breaker round 18, Y3). Raises
    :class:`UserInputError` naming the key, the value, the item and what is accepted."""
    for k in ("index_topk_freq", "index_skip_topk_offset"):     # vLLM and transformers compute with them (round 20)
        if k in text and text[k] is None:
            raise UserInputError(f"config {name!r} has {k} = null, which vLLM and transformers compute with (a "
                                 f"TypeError); accepted: a number, or no {k} key (vLLM's default: "
                                 f"{ {'index_topk_freq': 1, 'index_skip_topk_offset': 2}[k] })")
    for k, (kind, items, what) in SHARING_KEYS.items():
        v = text.get(k)
        if v is None:
            continue
        if (isinstance(v, bool) and k != "index_skip_topk_offset") or not isinstance(v, kind) \
                or (isinstance(v, float) and not math.isfinite(v)):
            raise UserInputError(f"config {name!r} has {k} = {_short(v)}; accepted: {what}")
        bad = next(((i, x) for i, x in enumerate(v) if x not in items), None) if items else None
        if bad is not None:
            raise UserInputError(f"config {name!r} has {k} = {_short(v)}, whose {'letter' if kind is str else 'item'} "
                                 f"{bad[0]} is {_short(bad[1])}; accepted: {what}")
    _check_freq(text.get("index_topk_freq"), name)


def _check_freq(freq, name: str) -> None:
    """``index_topk_freq``, where present, a finite number other than 0: vLLM 0.26 divides by it (layer ``l`` full iff
    ``max(l - offset + 1, 0) % freq == 0``, ``deepseek_v2.py``; 0 is its ``ZeroDivisionError``) and reads any other
    number so (a float, a negative one, ``true`` as 1); vLLM 0.34 refuses all but a positive integer itself
    (``compute_skip_topk_layers``), transformers reads one below 1 as 1. Raises :class:`UserInputError`."""
    if freq is None:
        return
    if not isinstance(freq, (int, float)) or (isinstance(freq, float) and not math.isfinite(freq)) or freq == 0:
        raise UserInputError(f"config {name!r} has index_topk_freq = {_short(freq)}; accepted: a number other than 0 "
                             f"(vLLM divides by it: layer l is full iff max(l - offset + 1, 0) % index_topk_freq == 0; "
                             f"GLM-5.2: 4)")


#: The longest model a config may describe in tokens: vLLM holds ``max_model_len`` as an integer, and a rope scaling
#: factor times the positions it scales is one (``factor * original_max_position_embeddings``).
MAX_MODEL_TOKENS = 2**31 - 1

#: The rope scaling fields vLLM's ``get_rope`` reads as numbers (YaRN's betas and mscales, Llama 3's frequency factors).
ROPE_NUMBERS = ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "low_freq_factor",
                "high_freq_factor", "extrapolation_factor")
#: Those of :data:`ROPE_NUMBERS` that must be above 0: YaRN's rotation counts, whose logarithm vLLM's
#: ``yarn_find_correction_dim`` takes (``log(max_position / (beta * 2 pi))``: a math domain error below 0, a division
#: by zero at 0).
ROPE_POSITIVE = ("beta_fast", "beta_slow")


def _check_rope_scaling(text: dict[str, Any], name: str) -> None:
    """The rotary base ``rope_theta`` (top level or in ``rope_parameters``) a positive finite number; the rope
    settings (``rope_parameters`` or the older ``rope_scaling``) an object or null; a rope scaling's ``factor`` a
    positive finite number and its ``original_max_position_embeddings`` a positive integer: vLLM multiplies the two
    into the model's length, so a negative factor otherwise surfaces as a negative ``max_model_len`` and a huge one as
    an infinity vLLM cannot convert (:func:`_check_rope_length`). Raises :class:`UserInputError`."""
    _check_rope_theta(text.get("rope_theta"), "rope_theta", name)
    for key in ("rope_parameters", "rope_scaling"):
        rope = text.get(key)
        if rope is not None and not isinstance(rope, dict):
            raise UserInputError(f"config {name!r} has {key} = {_short(rope)}; accepted: an object of the rope's "
                                 f"settings, e.g. {{\"rope_type\": \"default\", \"rope_theta\": 1000000.0}} (GLM-5) or "
                                 f"{{\"rope_type\": \"yarn\", \"factor\": 40, ...}}, or null")
        if not isinstance(rope, dict):
            continue
        if key == "rope_parameters":                 # where transformers' newer configs keep the rotary base
            _check_rope_theta(rope.get("rope_theta"), f"{key}.rope_theta", name)
        f = rope.get("factor")
        if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f <= 0):
            raise UserInputError(f"config {name!r} has {key}.factor = {_short(f)}; accepted: a positive number (the "
                                 f"rope scaling factor, e.g. 40 for YaRN)")
        _check_rope_type(rope, key, name)
        for k in ROPE_NUMBERS:
            v = rope.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or (k in ROPE_POSITIVE and v <= 0)):
                which = "a positive number" if k in ROPE_POSITIVE else "a finite number"
                raise UserInputError(f"config {name!r} has {key}.{k} = {_short(v)}; accepted: {which} (GLM-5's "
                                     f"rope has none; YaRN's beta_fast 32, beta_slow 1)")
        m = rope.get("original_max_position_embeddings")
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or not 0 < m <= 2**31 - 1):
            raise UserInputError(f"config {name!r} has {key}.original_max_position_embeddings = {_short(m)}; "
                                 f"accepted: an integer from 1 to {2**31 - 1}")
        base = m if isinstance(m, int) and not isinstance(m, bool) else text.get("max_position_embeddings")
        _check_rope_length(f, base if isinstance(base, int) and not isinstance(base, bool) and base > 0 else None,
                           key, name)


def _check_rope_length(f, base: int | None, key: str, name: str) -> None:
    """A rope scaling ``factor`` times the ``base`` positions it scales (``original_max_position_embeddings``, else
    ``max_position_embeddings``; 1 where neither is known) gives a model of at least one token and at most
    :data:`MAX_MODEL_TOKENS` (vLLM turns the product into its integer ``max_model_len``: ``1e308`` overflows to an
    infinity it cannot convert). Raises :class:`UserInputError` naming the factor and the factors accepted."""
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not f > 0:
        return
    if base is not None and f * base < 1:
        raise UserInputError(f"config {name!r} has {key}.factor = {f!r}, which times the {base} positions it scales "
                             f"gives a model of no token (vLLM's max_model_len 0); accepted: a factor of at least "
                             f"1/{base}, e.g. 40 for YaRN")
    if f * (base or 1) > MAX_MODEL_TOKENS:
        tokens = "more tokens than a float holds" if math.isinf(f * (base or 1)) else f"{f * (base or 1):.3g} tokens"
        scaled = f"times the {base} positions it scales gives {tokens}" if base else f"is a length of {tokens}"
        raise UserInputError(f"config {name!r} has {key}.factor = {f!r}, which {scaled}, past the longest model vLLM "
                             f"holds ({MAX_MODEL_TOKENS} tokens); accepted: a factor up to "
                             f"{MAX_MODEL_TOKENS / (base or 1):.6g}, e.g. 40 for YaRN")


def _check_rope_type(rope: dict[str, Any], key: str, name: str) -> None:
    """A rope's ``rope_type`` (or the older ``type``), where present, a non-empty name: vLLM compares it with its
    names (DeepSeek's MLA runs any but ``"default"`` as YaRN), so a number or an empty text would pass as YaRN
    unnamed. Raises :class:`UserInputError`."""
    for k in ("rope_type", "type"):
        v = rope.get(k)
        if v is not None and not (isinstance(v, str) and v.strip()):
            raise UserInputError(f"config {name!r} has {key}.{k} = {_short(v)}; accepted: a rope type's name, e.g. "
                                 f"'default' (GLM-5) or 'yarn' (DeepSeek-V3.2)")


def _check_block_size(text: dict[str, Any], cfg: dict[str, Any], name: str) -> None:
    """``quantization_config.weight_block_size``, where present, a list of positive integers: vLLM divides the
    layers' sizes by each (a 0 is a ZeroDivisionError in its fp8 code, a negative size a tensor of negative
    dimension); how many it takes vLLM's quantization config says. Raises :class:`UserInputError`."""
    qc = text.get("quantization_config", cfg.get("quantization_config"))
    wbs = qc.get("weight_block_size") if isinstance(qc, dict) else None
    if wbs is None:
        return
    if not isinstance(wbs, list) or not all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 2**31 - 1
                                            for b in wbs):
        raise UserInputError(f"config {name!r} has quantization_config.weight_block_size = {_short(wbs)}; accepted: "
                             f"a list of positive integers up to {2**31 - 1} each, e.g. [128, 128] (the block of one "
                             f"fp8 weight scale)")


def _check_rope_theta(theta, where: str, name: str) -> None:
    if theta is not None and (isinstance(theta, bool) or not isinstance(theta, (int, float))
                              or not math.isfinite(theta) or theta <= 0):
        raise UserInputError(f"config {name!r} has {where} = {_short(theta)}; accepted: a positive number (the "
                             f"rotary base, GLM-5: 1000000.0)")


def _nope(text: dict[str, Any], cfg: dict[str, Any]) -> bool:
    """Whether the config is of a NoPE MLA model type (:data:`GLM5_NEXT_MODEL_TYPES`): ``qk_rope_head_dim`` 0."""
    return text.get("model_type", cfg.get("model_type")) in GLM5_NEXT_MODEL_TYPES


def is_glm5_next(cfg: dict[str, Any]) -> bool:
    """Whether a Hugging Face config dict (or its text part) is GLM-5.3-Flash's (:data:`GLM5_NEXT_MODEL_TYPES`)."""
    return isinstance(cfg, dict) and _nope(text_config(cfg), cfg)


def require_vllm_model(cfg: dict[str, Any], name: str) -> None:
    """For a GLM-5.3-Flash config (:func:`is_glm5_next`): :class:`UserInputError` (one line naming the model type,
    the installed vLLM and the line that knows it, :data:`GLM5_NEXT_VLLM_LINE`) unless the installed vLLM's model
    registry (``ModelRegistry.get_supported_archs()``) has its architecture. Any other config: nothing to check."""
    if not is_glm5_next(cfg):
        return
    import vllm
    from vllm.model_executor.models.registry import ModelRegistry

    text = text_config(cfg)
    archs = list(text.get("architectures") or cfg.get("architectures") or GLM5_NEXT_ARCHITECTURES[:1])
    if all(a in ModelRegistry.get_supported_archs() for a in archs):
        return
    mt = text.get("model_type", cfg.get("model_type"))
    lines = " or ".join(f"{line}.x" for line in GLM5_NEXT_VLLM_LINES)
    raise UserInputError(f"config {name!r} is GLM-5.3-Flash (model_type {mt!r}, {', '.join(archs)}), which the "
                         f"installed vLLM {vllm.__version__} has no model for; vLLM {lines} has it "
                         f"(vllm/models/glm5next/); accepted: run this under vLLM {lines}, or a "
                         f"GLM-5 / DeepSeek-V3.2 config")


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:40] + f"... ({len(r)} characters)"


def known_model_type(model_type: str) -> bool:
    """Whether vLLM's config loader knows ``model_type``: transformers' ``CONFIG_MAPPING_NAMES`` or vLLM's own
    ``_CONFIG_REGISTRY`` (``vllm/transformers_utils/config.py``)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type in CONFIG_MAPPING_NAMES:
        return True
    try:
        from vllm.transformers_utils.config import _CONFIG_REGISTRY
    except Exception:  # noqa: BLE001  (vLLM not importable: transformers' answer)
        return False
    return model_type in _CONFIG_REGISTRY


def geometry_from_config(cfg: dict[str, Any], name: str) -> ModelGeometry:
    """Build a :class:`ModelGeometry` from a Hugging Face config dict.

    Raises :class:`UserInputError` if the config is not an MLA config (no ``kv_lora_rank`` etc.).
    """
    text = check_config(cfg, name)
    for k in _MLA_KEYS:
        v = text.get(k)
        if k == "qk_rope_head_dim" and v == 0 and _nope(text, cfg):
            continue
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise UserInputError(f"config {name!r} has {k} = {v!r}, which must be a positive integer; accepted: a "
                                 f"DeepSeek-V2/V3/V3.2- or GLM-5-style MLA config (GLM-5: kv_lora_rank 512, "
                                 f"qk_rope_head_dim 64)")
    missing = [k for k in _MLA_KEYS if text.get(k) is None]
    if missing:
        raise UserInputError(
            f"config {name!r} is not an MLA config (model_type {text.get('model_type')!r}): missing "
            f"{', '.join(missing)}; accepted: a DeepSeek-V2/V3/V3.2- or GLM-5-style config with kv_lora_rank, "
            f"qk_rope_head_dim and num_attention_heads")
    archs = text.get("architectures") or cfg.get("architectures") or ["?"]
    if "index_topk" in text and text["index_topk"] is None:
        raise UserInputError(f"config {name!r} has index_topk = null; accepted: a positive integer (DSA sparse "
                             f"attention) or no index_topk key")
    try:
        return ModelGeometry(
            name=name,
            model_type=str(text.get("model_type", "?")),
            architecture=str(archs[0]),
            num_attention_heads=int(text["num_attention_heads"]),
            q_lora_rank=None if text.get("q_lora_rank") is None else int(text["q_lora_rank"]),
            kv_lora_rank=int(text["kv_lora_rank"]),
            qk_nope_head_dim=int(text.get("qk_nope_head_dim", 128)),
            qk_rope_head_dim=int(text["qk_rope_head_dim"]),
            v_head_dim=int(text.get("v_head_dim", 128)),
            index_topk=int(text["index_topk"]) if text.get("index_topk") is not None
            else transformers_default_index_topk(str(text.get("model_type", ""))),
            index_head_dim=None if text.get("index_head_dim") is None else int(text["index_head_dim"]),
            index_n_heads=None if text.get("index_n_heads") is None else int(text["index_n_heads"]),
            hf_config=dict(text),
            raw_config=dict(cfg),
        )
    except (TypeError, ValueError, OverflowError) as e:
        raise UserInputError(f"config {name!r} has a non-integer MLA dimension ({e}); accepted: integers") from None


def transformers_default_index_topk(model_type: str) -> int | None:
    """``index_topk`` that transformers' config class for ``model_type`` fills in when ``config.json`` has none.

    vLLM decides sparse vs dense with ``hasattr(hf_config, "index_topk")`` on the *transformers* config object, and
    e.g. ``GlmMoeDsaConfig`` defaults ``index_topk`` to 2048: a ``glm_moe_dsa`` config without the key is still DSA in
    vLLM. ``None`` when transformers' class has no such attribute (dense MLA, e.g. ``deepseek_v3``) or does not know
    the model type.
    """
    if not model_type:
        return None
    try:
        from transformers import AutoConfig

        value = getattr(AutoConfig.for_model(model_type), "index_topk", None)
    except Exception:  # noqa: BLE001  (unknown model type, or a transformers without it)
        return None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


#: The indexer's fp8 K cache keeps one fp32 scale per this many values of a key (``Indexer.quant_block_size``, fixed
#: in vLLM's ``deepseek_v2.py``: a row of ``index_head_dim + index_head_dim // 128 * 4`` bytes), so ``index_head_dim``
#: is a multiple of it.
INDEXER_QUANT_BLOCK = 128
#: The largest ``config.json`` read (a config with a vocabulary map inlined stays far below; no DSA config is near).
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def preset_key(spec: str | Path, base: Path | None = None) -> str | None:
    """The preset (:data:`PRESET_CONFIGS`) that ``spec`` names as :func:`load_model` reads it: its name as written, or
    in another case where no path of that name exists (``GLM-5``, as the other names match whatever their case;
    relative to ``base`` where given, the folder the reader runs in: a notebook's); None for another spec. Raises
    :class:`UserInputError` for a name the file system refuses (too long, a NUL)."""
    s = str(spec)
    if s in PRESET_CONFIGS:
        return s
    if s.strip() and s.lower() in PRESET_CONFIGS and not (
            expand_path(s, "model") if base is None else Path(base) / s).exists():
        return s.lower()
    return None


def load_model(spec: str | Path) -> ModelGeometry:
    """Resolve ``spec`` to a geometry: a preset name (``glm-5``, ``deepseek-v3.2``), a ``config.json`` path,
    or a checkpoint directory holding one.

    Raises :class:`UserInputError` naming the value for an unknown preset, a missing file, malformed JSON or a
    non-MLA config.
    """
    s = str(spec)
    if not s.strip():
        raise UserInputError(f"model {s!r} is empty; accepted: a preset ({', '.join(PRESETS)}), a config.json, a "
                             f"checkpoint directory holding one, or a GLM-5 .gguf file (diagnose)")
    key = preset_key(s)
    if key is not None:
        return geometry_from_config(json.loads(json.dumps(PRESET_CONFIGS[key])), key)
    source = str(expand_path(s, "model"))
    p = expand_path(s, "model")
    if p.is_dir():
        p = p / "config.json"
        if p.exists() and not p.is_file():
            raise UserInputError(f"model directory {s!r} has a config.json that is not a regular file (a folder, "
                                 f"device, FIFO or socket); accepted: a preset ({', '.join(PRESETS)}), a config.json, "
                                 f"a checkpoint directory holding one, or a GLM-5 .gguf file (diagnose)")
        if not p.is_file():
            raise UserInputError(f"model directory {s!r} has no config.json; accepted: a preset "
                                 f"({', '.join(PRESETS)}), a config.json, a checkpoint directory holding one, or a GLM-5 "
                             f".gguf file (diagnose)")
    elif not p.is_file():
        raise UserInputError(f"unknown model {s!r}: not a preset and not a file or directory; accepted: a preset "
                             f"({', '.join(PRESETS)}), a config.json, a checkpoint directory holding one, or a GLM-5 "
                             f".gguf file (diagnose)")
    from .files import read_json

    size = p.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise UserInputError(f"config {str(p)!r} is {size:,} bytes; accepted: a Hugging Face config.json of at most "
                             f"{MAX_CONFIG_BYTES:,} bytes (GLM-5's is about 2 KB)")
    # each key once: transformers and vLLM read such a file with json.load, where the last of two silently wins
    cfg = read_json(p, f"config {str(p)!r}", "a JSON Hugging Face config with each key once", unique_keys=True)
    from dataclasses import replace

    return replace(geometry_from_config(cfg, s), source=source)
