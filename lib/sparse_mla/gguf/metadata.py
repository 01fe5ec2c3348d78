"""The Hugging Face ``glm_moe_dsa`` config a ``glm-dsa`` GGUF's metadata describes (:func:`config_from_gguf`, the
inverse of llama.cpp's converter's ``set_gguf_parameters``), read key by key as llama.cpp writes them
(:func:`metadata_field`, typed by :func:`_typed`), and the file's type (:func:`file_type`).
"""
from __future__ import annotations

from typing import Any

from ..errors import UserInputError
from .names import GLM_DSA


def metadata_field(reader, key: str, default: Any = None) -> Any:
    """The GGUF metadata value ``key`` as gguf-py reads it (``default`` where the file has no such key)."""
    f = reader.get_field(key)
    if f is None:
        return default
    v = f.contents()
    return v


_MISSING = object()
_KINDS = {int: "an integer", float: "a number", bool: "a boolean", str: "a string"}


def _typed(reader, key: str, kind: type, default: Any = _MISSING) -> Any:
    """The GGUF metadata value ``key`` as ``kind`` (int, float, bool or str), read as llama.cpp writes it: an integer
    type for ``int`` (no float, string, array or bool), an integer or float for ``float``, a bool or an integer for
    ``bool``, a string for ``str``. A missing key gives ``default`` (none given: refused). Raises :class:`UserInputError` naming the key,
    what it holds and the type expected."""
    v = metadata_field(reader, key, _MISSING)
    if v is _MISSING:
        if default is _MISSING:
            raise UserInputError(f"GGUF metadata has no {key}; accepted: a glm-dsa GGUF as llama.cpp's converter "
                                 f"writes it")
        return default
    ok = (isinstance(v, int) and not isinstance(v, bool) if kind is int else
          isinstance(v, (int, float)) and not isinstance(v, bool) if kind is float else isinstance(v, str)
          if kind is str else isinstance(v, (bool, int)))
    if not ok:
        raise UserInputError(f"GGUF metadata {key} is {v!r} ({type(v).__name__}); accepted: {_KINDS[kind]}, as "
                             f"llama.cpp's converter writes it")
    return kind(v)


def config_from_gguf(reader, tensor_names=None) -> dict[str, Any]:
    """The Hugging Face ``glm_moe_dsa`` config a ``glm-dsa`` GGUF's metadata describes (``gguf.GGUFReader``).
    ``tensor_names``: the model's tensors, where they are not all in ``reader`` (a split model: the metadata is in
    the first shard, the tensors -- which say whether the router has a bias and the head is tied -- in all).

    Raises :class:`UserInputError` for another architecture, a missing key the config needs, or a key of another
    type than llama.cpp writes (:func:`_typed`)."""
    arch = metadata_field(reader, "general.architecture")
    if arch != GLM_DSA:
        raise UserInputError(f"GGUF architecture {arch!r} is not {GLM_DSA!r}; accepted: a GLM-5 GGUF (glm-dsa)")

    def need(key: str, kind: type = int):
        return _typed(reader, f"{GLM_DSA}.{key}", kind)

    def opt(key: str, default, kind: type = int):
        return _typed(reader, f"{GLM_DSA}.{key}", kind, default)

    nextn = opt("nextn_predict_layers", 0)
    rope = need("rope.dimension_count")
    names = set(tensor_names) if tensor_names is not None else {t.name for t in reader.tensors}
    cfg = {
        "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "dtype": "bfloat16",
        "vocab_size": need("vocab_size"), "hidden_size": need("embedding_length"),
        "intermediate_size": need("feed_forward_length"),
        "moe_intermediate_size": need("expert_feed_forward_length"),
        "num_hidden_layers": need("block_count") - nextn, "num_nextn_predict_layers": nextn,
        "num_attention_heads": need("attention.head_count"),
        "num_key_value_heads": need("attention.head_count"),
        "q_lora_rank": need("attention.q_lora_rank"), "kv_lora_rank": need("attention.kv_lora_rank"),
        "qk_nope_head_dim": need("attention.key_length_mla") - rope, "qk_rope_head_dim": rope,
        "v_head_dim": need("attention.value_length_mla"),
        "n_routed_experts": need("expert_count"), "n_shared_experts": need("expert_shared_count"),
        "num_experts_per_tok": need("expert_used_count"),
        "first_k_dense_replace": need("leading_dense_block_count"), "moe_layer_freq": 1,
        "n_group": opt("expert_group_count", 1), "topk_group": opt("expert_group_used_count", 1),
        "topk_method": "noaux_tc" if any(n.endswith("exp_probs_b.bias") for n in names) else "greedy",
        "scoring_func": "sigmoid" if opt("expert_gating_func", 2) == 2 else "softmax",
        "norm_topk_prob": opt("expert_weights_norm", False, bool),
        "routed_scaling_factor": opt("expert_weights_scale", 1.0, float),
        "hidden_act": "silu", "rms_norm_eps": need("attention.layer_norm_rms_epsilon", float),
        "max_position_embeddings": need("context_length"),
        "rope_parameters": _rope_parameters(need, opt),
        "rope_interleave": True, "indexer_rope_interleave": True,
        "index_topk": need("attention.indexer.top_k"), "index_head_dim": need("attention.indexer.key_length"),
        "index_n_heads": need("attention.indexer.head_count"),
        "tie_word_embeddings": "output.weight" not in names, "attention_bias": False,
    }
    for key, tok in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                     ("pad_token_id", "padding_token_id")):
        v = _typed(reader, f"tokenizer.ggml.{tok}", int, None)
        if v is not None:
            cfg[key] = v
    return cfg


#: gguf-py's ``RopeScalingType`` values -> transformers' ``rope_type`` (llama.cpp's "none" is transformers' "default").
ROPE_TYPES = {"none": "default", "linear": "linear", "yarn": "yarn", "longrope": "longrope"}


def _rope_parameters(need, opt) -> dict[str, Any]:
    """``rope_parameters`` from ``rope.freq_base`` and the ``rope.scaling.*`` keys. llama.cpp's converter
    (``TextModel.set_gguf_parameters``, which ``GlmMoeDsaModel`` / ``DeepseekV2Model`` call first) writes
    ``rope.scaling.type`` and ``rope.scaling.factor`` for every linear or YaRN ``rope_type`` with a factor, and our
    writer (:func:`sparse_mla.gguf.writer.write_metadata`) writes GLM-5's unscaled rope only (make-checkpoint refuses
    ``--gguf`` for other presets): a GGUF without them states no scaling, ``rope_type`` "default"."""
    scaling = opt("rope.scaling.type", "none", str)
    out: dict[str, Any] = {"rope_theta": need("rope.freq_base", float), "rope_type": ROPE_TYPES.get(scaling, scaling)}
    if scaling != "none":
        out["factor"] = opt("rope.scaling.factor", 1.0, float)
        orig = opt("rope.scaling.original_context_length", None)
        if orig is not None:
            out["original_max_position_embeddings"] = orig
    return out


def file_type(reader) -> str:
    """The GGUF's ``general.file_type`` as gguf-py's ``LlamaFileType`` name without ``MOSTLY_`` (``Q8_0``,
    ``Q4_K_S``, ``F16``), or ``unknown``."""
    import gguf

    f = reader.get_field("general.file_type")
    try:
        return gguf.LlamaFileType(int(f.contents())).name.removeprefix("MOSTLY_")
    except (AttributeError, ValueError, TypeError):
        return "unknown"
