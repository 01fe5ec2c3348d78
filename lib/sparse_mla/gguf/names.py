"""The ``glm-dsa`` tensor name map: which tensors a GLM-5 GGUF of a config holds, and the names they take in Hugging
Face checkpoints and in vLLM.

* GGUF name <- gguf-py's own ``TensorNameMap`` of ``MODEL_ARCH.GLM_DSA`` applied to each Hugging Face name of the
  config (:func:`hf_weight_names`), so the map and llama.cpp's converter (:mod:`sparse_mla.gguf.writer`) cannot
  disagree;
* the Hugging Face names are in the converter's form: routed experts stacked (``mlp.experts.{gate,up,down}_proj``,
  gguf-py's ``ffn_*_exps``), ``kv_b_proj`` split into ``k_b_proj`` / ``v_b_proj`` (``attn_k_b`` / ``attn_v_b``),
  ``e_score_correction.bias`` (``exp_probs_b.bias``);
* the vLLM names (:func:`gguf_to_vllm_names`) are those ``DeepseekV2ForCausalLM.load_weights`` (and
  ``DeepSeekMTP.load_weights``) consume after vllm-gguf-plugin's per-expert split: ``mlp.experts.0.*``,
  ``e_score_correction_bias``; the halves ``k_b_proj`` / ``v_b_proj`` are joined into ``kv_b_proj`` (:data:`KV_B`,
  :func:`joined_name`) before vLLM sees them.
"""
from __future__ import annotations

#: gguf-py's architecture name of GLM-5 (``MODEL_ARCH_NAMES[MODEL_ARCH.GLM_DSA]``).
GLM_DSA = "glm-dsa"

#: The DSA indexer's tensors of each block, as gguf-py names them (``TENSOR_NAMES[MODEL_TENSOR.INDEXER_*]``).
INDEXER_TENSORS = ("indexer.attn_q_b.weight", "indexer.attn_k.weight", "indexer.proj.weight",
                   "indexer.k_norm.weight", "indexer.k_norm.bias")


#: The parameter suffix under which the joined ``attn_k_b``/``attn_v_b`` halves are handed to vLLM.
KV_B = ".kv_b_proj.weight"


#: The GGUF tensors outside the blocks that vLLM's GLM-5 model loads (gguf-py's glm-dsa names).
TOP_LEVEL = ("token_embd.weight", "output_norm.weight", "output.weight")



def _is_moe_layer(cfg: dict, i: int) -> bool:
    return (cfg.get("n_routed_experts") is not None and i >= cfg.get("first_k_dense_replace", 0)
            and i % (cfg.get("moe_layer_freq") or 1) == 0)


def hf_weight_names(cfg: dict) -> list[str]:
    """The Hugging Face names of a GLM-5 / DeepSeek-V3.2 config's tensors in the converter's form (experts stacked as
    ``mlp.experts.{gate,up,down}_proj.weight``, ``kv_b_proj`` split into ``k_b_proj``/``v_b_proj``,
    ``e_score_correction.bias``), MTP layers included."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not cfg.get("tie_word_embeddings"):
        names.append("lm_head.weight")
    n_main = int(cfg["num_hidden_layers"])
    for i in range(n_main + int(cfg.get("num_nextn_predict_layers") or 0)):
        p, a = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        names += [a + n + ".weight" for n in ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa",
                                              "kv_a_layernorm", "k_b_proj", "v_b_proj", "o_proj")]
        names += [a + "indexer." + n for n in ("wq_b.weight", "wk.weight", "weights_proj.weight", "k_norm.weight",
                                               "k_norm.bias")]
        m = p + "mlp."
        if _is_moe_layer(cfg, i):
            names.append(m + "gate.weight")
            if cfg.get("topk_method") == "noaux_tc":
                names.append(m + "gate.e_score_correction.bias")
            names += [m + f"experts.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")]
            if cfg.get("n_shared_experts"):
                names += [m + f"shared_experts.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")]
        else:
            names += [m + f"{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")]
        if i >= n_main:
            names += [p + n + ".weight" for n in ("enorm", "hnorm", "eh_proj", "shared_head.norm",
                                                  "shared_head.head", "embed_tokens")]
    return names


def _vllm_name(hf_name: str) -> str:
    """The name vLLM's ``load_weights`` (and the plugin's per-expert split) takes for a converter-form name."""
    return (hf_name.replace(".mlp.experts.", ".mlp.experts.0.")
            .replace("e_score_correction.bias", "e_score_correction_bias"))


def gguf_to_hf_names(cfg: dict) -> dict[str, str]:
    """GGUF tensor name -> its Hugging Face name in the converter's form (:func:`hf_weight_names`), for every tensor a
    ``glm-dsa`` GGUF of ``cfg`` holds. gguf-py's ``TensorNameMap`` gives every GGUF name."""
    import gguf

    blocks = int(cfg["num_hidden_layers"]) + int(cfg.get("num_nextn_predict_layers") or 0)
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GLM_DSA, blocks)
    out = {}
    for hf in hf_weight_names(cfg):
        g = name_map.get_name(hf, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise ValueError(f"gguf-py has no glm-dsa name for {hf!r}")
        out[g] = hf
    return out


def gguf_to_vllm_names(cfg: dict) -> dict[str, str]:
    """GGUF tensor name -> the name vLLM loads it as, for every tensor a ``glm-dsa`` GGUF of ``cfg`` holds
    (``attn_k_b``/``attn_v_b`` -> ``k_b_proj``/``v_b_proj``, which
    :class:`~sparse_mla.vllm_plugin.gguf_adapter.GlmDsaGGUFAdapter` joins into ``kv_b_proj``)."""
    return {g: _vllm_name(h) for g, h in gguf_to_hf_names(cfg).items()}


def joined_name(loaded_as: str) -> str:
    """The name of the parameter vLLM loads ``loaded_as`` into after the adapter joins the halves
    (``...self_attn.k_b_proj.weight`` / ``v_b_proj`` -> ``...self_attn.kv_b_proj.weight``); other names as given."""
    for half in (".k_b_proj.weight", ".v_b_proj.weight"):
        if loaded_as.endswith(half):
            return loaded_as.removesuffix(half) + KV_B
    return loaded_as
