"""A GLM-5 checkpoint as a GGUF file laid out the way llama.cpp's converter writes ``glm-dsa``.

llama.cpp's ``convert_hf_to_gguf.py`` converts ``GlmMoeDsaForCausalLM`` with ``GlmMoeDsaModel(DeepseekV2Model)``
(``conversion/glm.py``, ``conversion/deepseek.py``; gguf-py 0.19 ``MODEL_ARCH.GLM_DSA`` = ``"glm-dsa"``). What it does,
and :func:`converter_tensors` / :func:`write_metadata` do the same:

* names: gguf-py's own ``get_tensor_name_map(MODEL_ARCH.GLM_DSA, blocks)`` maps every Hugging Face name
  (``model.layers.{i}.self_attn.indexer.wq_b`` -> ``blk.{i}.indexer.attn_q_b``, ``indexer.wk`` -> ``indexer.attn_k``,
  ``indexer.weights_proj`` -> ``indexer.proj``, ``indexer.k_norm`` -> ``indexer.k_norm``; the MTP layer's ``enorm``,
  ``hnorm``, ``eh_proj``, ``embed_tokens``, ``shared_head.{norm,head}`` -> ``blk.{L}.nextn.*``);
* ``kv_b_proj`` [heads * (nope + v), kv_lora_rank] is split per head into ``attn_k_b`` [heads, kv_lora_rank, nope]
  (transposed, for MLA's absorbed form) and ``attn_v_b`` [heads, v, kv_lora_rank] (``DeepseekV2Model.modify_tensors``);
* routed experts are stacked: ``ffn_{gate,up,down}_exps`` [experts, out, in];
* ``e_score_correction_bias`` becomes ``blk.{i}.exp_probs_b.bias`` (``ModelBase.filter_tensors``);
* types (``ModelBase.prepare_tensors``): 1-D tensors, ``*_norm.weight``, the router ``ffn_gate_inp`` and every
  non-``.weight`` tensor stay F32; the rest takes the file's type, and a row length the type's block does not divide
  falls back as llama.cpp's quantizer does (``llama_tensor_get_type``: Q4_K -> Q5_0; a type gguf-py cannot quantize
  the row of -> F16);
* metadata: the keys llama.cpp's ``glm-dsa`` loader reads (``src/llama-model.cpp``): block count (main + MTP layers),
  context, embedding and feed-forward lengths, heads (``head_count_kv`` 1: MLA as MQA), RoPE base and dimension,
  RMS-norm epsilon, q/kv LoRA ranks, MLA key/value lengths, experts (count, used, shared, feed-forward length,
  weights scale and norm, sigmoid gating, leading dense blocks), ``nextn_predict_layers``, the indexer's head count,
  key length and top-k; the tokenizer as ``gpt2`` BPE (tokens, types, merges, special ids by gguf-py's
  ``SpecialVocab``).

Q4_K's quantizer is :func:`sparse_mla.gguf.quant.quantize_q4_k` (gguf-py has none); the file type key is then
``MOSTLY_Q4_K_S`` (Q4_K for the weights, with llama.cpp's fallbacks). Needs gguf-py (``pip install
'sparse-mla-workbook[gguf]'``).

``Q4_K_M`` is a mixed recipe (file type key ``MOSTLY_Q4_K_M``), the per-tensor types ``llama-quantize ... Q4_K_M``
gives (``src/llama-quant.cpp``: ``llama_tensor_get_type_impl``, ``tensor_type_fallback``; read at ggml-org/llama.cpp
007dbbf) as its rules apply to GLM-5 (:func:`q4_k_m_type`):

* F32 as in every file: 1-D tensors, ``*_norm.weight``, the router ``ffn_gate_inp``, ``exp_probs_b.bias``;
* Q6_K: ``output.weight`` (llama.cpp: Q8_0 where its row is not a multiple of 256);
* Q6_K: every tensor whose name holds ``ffn_down`` (the dense ``ffn_down``, ``ffn_down_exps``, ``ffn_down_shexp``)
  in a "use_more_bits" block ``i`` of ``n`` = the GGUF's block count (main + MTP layers, llama.cpp's ``n_layer_all``;
  a MoE model's layer is read from the name ``blk.{i}.``): ``i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2`` (integer
  division; 2 layers + MTP: only block 2);
* Q4_K for every other 2-D weight (``token_embd`` too: the output is not tied), then llama.cpp's fallback where a
  row is not a multiple of 256: Q4_K -> Q5_0 (``attn_k_b``, rows of qk_nope 192), Q6_K -> Q8_0; F16 where the
  fallback's 32 does not divide it either.

Where it departs from llama.cpp, or where llama.cpp's rules do not reach a GLM-5 tensor:

* llama.cpp's attn_v-like category (Q6_K in use_more_bits layers) is ``attn_v``, ``attn_qkv`` and ``attn_kv_b``; the
  glm-dsa converter writes ``attn_k_b`` / ``attn_v_b`` instead, which match none of them (``attn_v_b.weight`` does
  not contain ``attn_v.weight``), so llama-quantize leaves ``attn_v_b`` at Q4_K, and so does this recipe;
* llama.cpp has Mixtral branches for exactly 8 experts (``n_expert == 8``: ``attn_output`` Q5_K, ``attn_k`` -- which
  matches ``indexer.attn_k`` -- and attn_v-like Q8_0). GLM-5 has 256 routed experts, so they do not fire for it;
  ``glm-5-tiny`` has 8, where llama-quantize would take them and this recipe does not (it writes the types GLM-5's
  own Q4_K_M has; there is no Q5_K quantizer here);
* the quantizers are ours (:mod:`sparse_mla.gguf.quant`: max-based scales, not llama.cpp's search, no
  importance matrix); the types and byte layouts are llama.cpp's.
"""
from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .names import GLM_DSA

#: ``--gguf TYPE`` -> (GGML type of the quantized weights, gguf-py ``LlamaFileType`` name of the file).
GGUF_TYPES: dict[str, tuple[str, str]] = {
    "F16": ("F16", "MOSTLY_F16"),
    "Q8_0": ("Q8_0", "MOSTLY_Q8_0"),
    "Q4_K": ("Q4_K", "MOSTLY_Q4_K_S"),
    "Q4_K_M": ("Q4_K", "MOSTLY_Q4_K_M"),   # mixed: per-tensor types by :func:`q4_k_m_type`
}

#: llama.cpp's fallback where a row is not a multiple of a k-quant's 256 values (``llama_tensor_get_type``).
_K_FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}


def gguf_file_name(gguf_type: str) -> str:
    """``model-{TYPE}.gguf``: the name vllm-gguf-plugin finds for ``DIR:TYPE`` (``resolve_local_gguf``:
    ``*-{TYPE}.gguf``)."""
    return f"model-{gguf_type}.gguf"


def block_count(cfg: dict) -> int:
    """GGUF blocks: the decoder layers plus the MTP (nextn) layers, as the converter counts them."""
    return int(cfg["num_hidden_layers"]) + int(cfg.get("num_nextn_predict_layers") or 0)


def converter_tensors(cfg: dict, state: dict) -> Iterator[tuple[str, "np.ndarray"]]:
    """``(Hugging Face name after the converter's rewrites, float32 array)`` for every tensor of ``state`` (names of
    :func:`sparse_mla.launch.checkpoint.expected_weight_shapes`): experts stacked under
    ``model.layers.{i}.mlp.experts.{gate,up,down}_proj.weight``, ``kv_b_proj`` split into ``k_b_proj`` (transposed per
    head) and ``v_b_proj``, ``e_score_correction_bias`` renamed ``e_score_correction.bias``."""
    nh, nope, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    experts: dict[str, dict[int, np.ndarray]] = {}
    for name, t in state.items():
        a = t.float().numpy()
        if ".mlp.experts." in name:
            prefix, rest = name.split(".mlp.experts.")
            e, proj = rest.split(".", 1)
            experts.setdefault(f"{prefix}.mlp.experts.{proj}", {})[int(e)] = a
            continue
        if name.endswith("kv_b_proj.weight"):
            kv_b = a.reshape(nh, nope + v, a.shape[-1])
            yield name.replace("kv_b_proj", "k_b_proj"), np.ascontiguousarray(kv_b[:, :nope].transpose(0, 2, 1))
            yield name.replace("kv_b_proj", "v_b_proj"), np.ascontiguousarray(kv_b[:, nope:])
            continue
        yield name.replace("e_score_correction_bias", "e_score_correction.bias"), a
    for name, by_expert in experts.items():
        yield name, np.stack([by_expert[e] for e in range(len(by_expert))])


def gguf_tensor_name(name_map, hf_name: str) -> str:
    """gguf-py's name for ``hf_name`` (``TensorNameMap.get_name`` with the ``.weight``/``.bias`` suffixes)."""
    out = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
    if out is None:
        raise ValueError(f"gguf-py has no glm-dsa name for tensor {hf_name!r}")
    return out


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's ``use_more_bits(i_layer, n_layers)`` (``src/llama-quant.cpp``): the first eighth of ``n`` blocks,
    the last eighth, and every third block between (integer division, as in C++)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_type(gguf_name: str, n_blocks: int) -> str:
    """The type of the 2-D weight ``gguf_name`` in a ``Q4_K_M`` file of ``n_blocks`` GGUF blocks, before the row
    fallback (see the module docstring): ``Q6_K`` for ``output.weight`` and for ``ffn_down*`` in a
    :func:`use_more_bits` block, else ``Q4_K``."""
    if gguf_name == "output.weight":
        return "Q6_K"
    if "ffn_down" in gguf_name and gguf_name.startswith("blk.") \
            and use_more_bits(int(gguf_name.split(".")[1]), n_blocks):
        return "Q6_K"
    return "Q4_K"


def tensor_type(gguf_name: str, shape: tuple[int, ...], gguf_type: str, n_blocks: int = 0) -> str:
    """The GGML type llama.cpp's converter (and, for the mixed ``Q4_K_M``, ``llama-quantize``) gives ``gguf_name`` of
    numpy ``shape`` in a ``gguf_type`` file (see the module docstring); ``n_blocks``: the GGUF's block count
    (:func:`block_count`), which ``Q4_K_M`` needs. Raises ValueError for ``Q4_K_M`` without ``n_blocks``."""
    if len(shape) <= 1 or gguf_name.endswith("_norm.weight") or not gguf_name.endswith(".weight") \
            or ".ffn_gate_inp." in gguf_name:
        return "F32"
    qtype = GGUF_TYPES[gguf_type][0]
    if gguf_type == "Q4_K_M":
        if n_blocks <= 0:
            raise ValueError(f"Q4_K_M types depend on the block count; got n_blocks={n_blocks!r}, accepted: >= 1")
        qtype = q4_k_m_type(gguf_name, n_blocks)
    if qtype in _K_FALLBACK and shape[-1] % 256:
        qtype = _K_FALLBACK[qtype]
    if qtype not in ("F16", "F32") and shape[-1] % 32:
        qtype = "F16"
    return qtype


def write_metadata(writer, cfg: dict, gguf_type: str) -> None:
    """The ``general.*`` and ``glm-dsa.*`` keys (see the module docstring) for config ``cfg``."""
    import gguf

    w = writer
    w.add_name("glm-5-tiny")
    w.add_file_type(int(gguf.LlamaFileType[GGUF_TYPES[gguf_type][1]]))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_block_count(block_count(cfg))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(1)
    w.add_rope_freq_base(float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 1e4))))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_q_lora_rank(cfg["q_lora_rank"])
    w.add_kv_lora_rank(cfg["kv_lora_rank"])
    w.add_key_length(cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"])
    w.add_value_length(cfg["kv_lora_rank"])
    w.add_key_length_mla(cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"])
    w.add_value_length_mla(cfg["v_head_dim"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_shared_count(cfg.get("n_shared_experts") or 0)
    w.add_expert_weights_scale(float(cfg["routed_scaling_factor"]))
    if cfg.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    if cfg.get("scoring_func") == "sigmoid":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_group_count(cfg.get("n_group") or 1)
    w.add_expert_group_used_count(cfg.get("topk_group") or 1)
    w.add_rope_dimension_count(cfg["qk_rope_head_dim"])
    if cfg.get("num_nextn_predict_layers"):
        w.add_nextn_predict_layers(cfg["num_nextn_predict_layers"])
    w.add_indexer_head_count(cfg["index_n_heads"])
    w.add_indexer_key_length(cfg["index_head_dim"])
    w.add_indexer_top_k(cfg["index_topk"])


def write_vocab(writer, tokenizer_dir: Path, vocab_size: int) -> None:
    """The tokenizer as llama.cpp's ``gpt2`` BPE: every id below ``vocab_size`` (``[PAD{i}]``, type UNUSED, where the
    tokenizer has none, as the converter pads), added special tokens as CONTROL, merges and special ids read by
    gguf-py's ``SpecialVocab`` from ``tokenizer.json`` / ``tokenizer_config.json``."""
    import gguf

    tok = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    special = {a["id"]: a["content"] for a in tok.get("added_tokens", [])}
    by_id.update(special)
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(tokenizer_dir, load_merges=True, n_vocab=vocab_size).add_to_gguf(writer)


def write_gguf(path: str | os.PathLike, cfg: dict, state: dict, tokenizer_dir: str | os.PathLike,
               gguf_type: str, split_max_tensors: int = 0) -> list[Path]:
    """Write ``state`` (a GLM-5 state dict, :func:`~sparse_mla.launch.checkpoint.make_state_dict`) with config
    ``cfg`` to the GGUF file ``path`` as type ``gguf_type`` (a :data:`GGUF_TYPES` key); returns the files written.
    ``split_max_tensors`` > 0: split as GGUFs of large models ship, by gguf-py's own split writer
    (``GGUFWriter(split_max_tensors=...)``: ``PATHSTEM-00001-of-0000N.gguf`` ..., the metadata in the first shard,
    ``split.*`` keys in all). The caller writes into a temporary folder and renames it into place
    (``make_checkpoint`` does), so nothing is half-written.

    Raises ValueError for an unknown ``gguf_type`` or a tensor gguf-py has no glm-dsa name for.
    """
    import gguf

    from .quant import quantize

    if gguf_type not in GGUF_TYPES:
        raise ValueError(f"unknown GGUF type {gguf_type!r}; accepted: {', '.join(GGUF_TYPES)}")
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GLM_DSA, block_count(cfg))
    writer = gguf.GGUFWriter(str(path), GLM_DSA, split_max_tensors=split_max_tensors)
    write_metadata(writer, cfg, gguf_type)
    write_vocab(writer, Path(tokenizer_dir), cfg["vocab_size"])
    for hf_name, a in converter_tensors(cfg, state):
        name = gguf_tensor_name(name_map, hf_name)
        qtype = tensor_type(name, a.shape, gguf_type, block_count(cfg))
        writer.add_tensor(name, quantize(a, qtype), raw_dtype=gguf.GGMLQuantizationType[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    path = Path(path)
    files = [path] if path.exists() else sorted(path.parent.glob(f"{glob.escape(path.stem)}-*-of-*.gguf"))
    for f in files:
        os.chmod(f, 0o644)
    return files
