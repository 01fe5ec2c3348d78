"""GLM-5 (``glm-dsa``) GGUF files in vLLM 0.26 through ``vllm-gguf-plugin``: a weights adapter and a config mapping.

``vllm-gguf-plugin`` (PyPI 0.0.5; vLLM 0.26 has no GGUF loader of its own) loads a GGUF through a *weights adapter*
(``vllm_gguf_plugin/weights_adapter``: ``matches(config)``, ``prepare_loading``, ``prepare_weights``), picked from
``weights_adapter._ADAPTER_REGISTRY`` by ``get_weights_adapter``. Its default adapter maps names with gguf-py's
``get_tensor_name_map`` for the HF ``model_type``; ``glm_moe_dsa`` has no gguf-py architecture of that name
(gguf-py calls it ``glm-dsa``), so the default raises "Unknown gguf model_type: glm_moe_dsa".
:class:`GlmDsaGGUFAdapter` (registered first in that list by :func:`register_adapter`, called from the plugin's
``register()`` where vllm-gguf-plugin is installed) maps llama.cpp's ``glm-dsa`` layout
(:mod:`sparse_mla.gguf.writer`) onto the names vLLM's ``DeepseekV2ForCausalLM.load_weights`` (and
``DeepSeekMTP.load_weights``) consume:

* GGUF name <- gguf-py's own ``TensorNameMap`` of ``MODEL_ARCH.GLM_DSA`` applied to each Hugging Face name of the
  config (:func:`hf_weight_names`), so the map and llama.cpp's converter cannot disagree;
* stacked experts ``ffn_*_exps`` -> ``mlp.experts.0.*`` (the plugin's ``map_weights`` splits them per expert);
* ``attn_k_b`` [heads, kv_lora_rank, nope] and ``attn_v_b`` [heads, v, kv_lora_rank] are dequantized (gguf-py) and
  joined back into ``kv_b_proj`` [heads * (nope + v), kv_lora_rank] in the model dtype: vLLM's MLA takes
  ``kv_b_proj`` and makes its own absorbed copies after loading; ``kv_b_proj`` is then an unquantized module;
* ``indexer.attn_k`` and ``indexer.proj`` are dequantized too: vLLM fuses them into ``wk_weights_proj``, a linear
  built with ``quant_config=None`` (deepseek_v2.py ``Indexer``);
* ``indexer.attn_q_b`` is dequantized and ``indexer.wq_b`` loaded unquantized: it is vLLM 0.26's one quantized
  ``ReplicatedLinear`` in GLM-5, and vllm-gguf-plugin 0.0.5's GGUF linear loads through the layer's
  ``weight_loader_v2``, which ``ReplicatedLinear`` lacks; its own ``weight_loader`` then refuses the GGUF tensor
  ("Tried to load weights of size torch.Size([4096, 544]) to a parameter of size torch.Size([0])", the H200,
  2026-12-03). The values are the GGUF's either way;
* a GGUF without the DSA indexer tensors (llama.cpp's early GLM-5 conversions, mapped to ``glm4moe``) is refused by
  :func:`check_indexer_tensors`, naming the missing tensors: it would otherwise run dense, silently;
* a split model's LM head: vllm-gguf-plugin 0.0.5 patches the config from the one file the loader is given
  (``maybe_patch_hf_config_from_gguf``: ``tie_word_embeddings`` is "that file has no ``output.weight``"), so a split
  GGUF whose ``output.weight`` is in another shard was loaded as tied, ``output.weight`` skipped, and vLLM's
  ``DeepseekV2ForCausalLM`` (which never ties) ran with an empty LM head: "size mismatch, got input (64), mat
  (64x1024), vec (0)" in the profile run's sampler (the H200, 2026-12-05,
  ``results/h200/launch_h200_gguf_q4_k_m_split.json``; that the empty head came from this rule is inferred from the
  CPU, where the name map lacked ``output.weight``: no GPU has run the fix. vllm-gguf-plugin's PR 54, closed, proposed
  a fix for the analogous per-shard rule in ``update_tie_word_embeddings``, which this adapter does not call). The
  adapter asks the plugin's own ``extract_lm_head_from_gguf`` of every shard (:func:`lm_head_in`);
* the load plan (``plan``) refuses by name what would otherwise load silently wrong: a missing shard or a tensor held
  twice (:func:`check_shards`; the plugin's discovery skips a missing shard), no ``output.weight`` anywhere
  (:data:`UNTIED_LM_HEAD`), and a config that disagrees with the files on the model's tensors
  (:func:`check_coverage`: one the metadata describes but the map skips would be ignored, one no file holds would
  leave its parameter empty).

:func:`config_from_gguf` is the config mapping: the Hugging Face ``glm_moe_dsa`` config that a ``glm-dsa`` GGUF's
metadata describes (the inverse of the converter's ``set_gguf_parameters``).
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any

from ..errors import UserInputError

#: gguf-py's architecture name of GLM-5 (``MODEL_ARCH_NAMES[MODEL_ARCH.GLM_DSA]``).
GLM_DSA = "glm-dsa"

#: The DSA indexer's tensors of each block, as gguf-py names them (``TENSOR_NAMES[MODEL_TENSOR.INDEXER_*]``).
INDEXER_TENSORS = ("indexer.attn_q_b.weight", "indexer.attn_k.weight", "indexer.proj.weight",
                   "indexer.k_norm.weight", "indexer.k_norm.bias")

#: Set in the process where :class:`GlmDsaGGUFAdapter` prepared a GGUF's loading: ``{"adapter": class name,
#: "file": the GGUF's file name}`` (read by the ``ran`` block, :func:`sparse_mla.vllm_plugin.ran.weights_loaded`).
USED: dict[str, str] = {}

#: The parameter suffix under which the joined ``attn_k_b``/``attn_v_b`` halves are handed to vLLM.
KV_B = ".kv_b_proj.weight"

#: GGUF tensors the adapter dequantizes and hands over unquantized (see the module docstring).
DEQUANTIZED = ("attn_k_b.weight", "attn_v_b.weight", "indexer.attn_k.weight", "indexer.proj.weight",
               "indexer.attn_q_b.weight")


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
    (``attn_k_b``/``attn_v_b`` -> ``k_b_proj``/``v_b_proj``, which :class:`GlmDsaGGUFAdapter` joins into
    ``kv_b_proj``)."""
    return {g: _vllm_name(h) for g, h in gguf_to_hf_names(cfg).items()}


def joined_name(loaded_as: str) -> str:
    """The name of the parameter vLLM loads ``loaded_as`` into after :class:`GlmDsaGGUFAdapter` joins the halves
    (``...self_attn.k_b_proj.weight`` / ``v_b_proj`` -> ``...self_attn.kv_b_proj.weight``); other names as given."""
    for half in (".k_b_proj.weight", ".v_b_proj.weight"):
        if loaded_as.endswith(half):
            return loaded_as.removesuffix(half) + KV_B
    return loaded_as


def join_kv_b(k_b, v_b, num_heads: int):
    """``kv_b_proj`` [heads * (nope + v), kv_lora_rank] from llama.cpp's split halves (numpy arrays):
    ``attn_k_b`` [heads, kv_lora_rank, nope] (transposed back per head) and ``attn_v_b`` [heads, v, kv_lora_rank] --
    the inverse of ``DeepseekV2Model.modify_tensors`` (llama.cpp ``convert_hf_to_gguf.py``)."""
    import numpy as np

    k = k_b.reshape(num_heads, -1, k_b.shape[-1]).transpose(0, 2, 1)     # [nh, nope, kv_lora_rank]
    v = v_b.reshape(num_heads, -1, v_b.shape[-1])                        # [nh, v, kv_lora_rank]
    return np.ascontiguousarray(np.concatenate([k, v], axis=1).reshape(-1, k.shape[-1]))


def dequantize(tensor):
    """A gguf-py ``ReaderTensor`` dequantized by gguf-py to a float32 numpy array in PyTorch's row-major shape."""
    import gguf

    shape = tuple(int(s) for s in reversed(tensor.shape))
    return gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)


def check_indexer_tensors(tensor_names, n_layers: int, source: str) -> None:
    """Refuse a GGUF that lacks any DSA indexer tensor (:data:`INDEXER_TENSORS`) of blocks ``0 .. n_layers - 1``:
    :class:`UserInputError` naming the missing tensors -- such a file would run dense attention."""
    have = set(tensor_names)
    missing = [f"blk.{i}.{t}" for i in range(n_layers) for t in INDEXER_TENSORS if f"blk.{i}.{t}" not in have]
    if missing:
        shown = ", ".join(missing[:4]) + (f" ... ({len(missing)} in all)" if len(missing) > 4 else "")
        raise UserInputError(f"GGUF {source!r} has no DSA indexer tensors ({shown}): converted without the lightning "
                             f"indexer (early llama.cpp conversions of GLM-5 as glm4moe), it would run dense attention; "
                             f"refused. accepted: a glm-dsa GGUF with blk.N.indexer.* tensors (llama.cpp's converter "
                             f"with DSA support, or sparse-mla make-checkpoint --gguf)")


def lm_head_in(files) -> bool:
    """Whether any of a model's GGUF ``files`` (every shard) holds the LM head, by vllm-gguf-plugin's own test
    (``gguf_utils.extract_lm_head_from_gguf``: an ``output.weight`` tensor), which the plugin asks of one file only."""
    from vllm_gguf_plugin.gguf_utils import extract_lm_head_from_gguf

    return any(extract_lm_head_from_gguf(f) for f in files)


#: The GGUF tensors outside the blocks that vLLM's GLM-5 model loads (gguf-py's glm-dsa names).
TOP_LEVEL = ("token_embd.weight", "output_norm.weight", "output.weight")

#: Why a glm-dsa GGUF without ``output.weight`` is refused: vLLM's ``GlmMoeDsaForCausalLM`` is
#: ``DeepseekV2ForCausalLM``, which builds its own ``ParallelLMHead`` and never ties it to the embedding
#: (``tests/vllm_plugin/test_gguf_adapter.py`` reads that in vLLM's code), so a tied config loads nothing into it.
#: On a CUDA host vLLM 0.33 loads ``deepseek_v32``'s ``DeepseekV32ForCausalLM`` instead, a subclass with
#: ``DeepseekV2ForCausalLM``'s head construction (read, not tested here: that module does not import without CUDA).
UNTIED_LM_HEAD = ("vLLM's GlmMoeDsaForCausalLM (DeepseekV2ForCausalLM) never ties its LM head to the embedding, so it "
                  "would run with an empty LM head")


def _show(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" ... ({len(names)} in all)" if len(names) > 4 else "")


def check_coverage(file_tensors, mapped, source: str, main_layers: int, described=None) -> None:
    """Refuse a load whose name map (GGUF name -> vLLM name, ``mapped``, from the config vLLM loads) and the files'
    tensors (``file_tensors``, every shard's) disagree on the model's own tensors -- :data:`TOP_LEVEL` and the blocks
    ``blk.0`` .. ``blk.{main_layers - 1}``: :class:`UserInputError` naming the tensors the config gives no parameter
    although the GGUF's own metadata describes them (``described``: the GGUF names of :func:`config_from_gguf`'s map;
    the config and the GGUF describe different models, e.g. a router bias that would be ignored) and the mapped
    tensors no file holds (their parameters would stay empty). The MTP blocks (``blk.{main_layers}`` on) are left
    out: the model skips them; only MTP speculative decoding loads them. Tensors the metadata's map does not name
    either (``attn_kv_b`` beside ``attn_k_b``/``attn_v_b``, as some converters keep it) are ignored, as the plugin
    ignores them; with ``described`` None, every unmapped tensor is."""
    def own(name: str) -> bool:
        if not name.startswith("blk."):
            return name in TOP_LEVEL
        block = name.split(".")[1]
        return block.isdigit() and int(block) < main_layers

    have, want = set(file_tensors), set(mapped)
    ignored = sorted(n for n in have - want if own(n) and n in set(described or ()))
    absent = sorted(n for n in want - have if own(n))
    if not (ignored or absent):
        return
    parts = ([f"tensors the config gives no vLLM parameter (their values would be ignored): {_show(ignored)}"]
             if ignored else []) + (
        [f"tensors the config needs that no file holds (their parameters would stay empty): {_show(absent)}"]
        if absent else [])
    raise UserInputError(f"GGUF {source!r}: {'; '.join(parts)}; refused. accepted: every shard of one glm-dsa model "
                         f"as llama.cpp's converter writes it, with the config.json of the same model")


def described_tensors(first_reader, names) -> set[str] | None:
    """The GGUF names the model's own metadata maps (:func:`gguf_to_hf_names` of :func:`config_from_gguf`), or None
    where the metadata lacks what that config needs (vLLM reads ``config.json``, not the metadata, so such a file is
    not refused for it here)."""
    try:
        return set(gguf_to_hf_names(config_from_gguf(first_reader, names)))
    except UserInputError:
        return None


def check_shards(readers, files, source: str) -> None:
    """Refuse what vllm-gguf-plugin's shard discovery (``_get_all_gguf_files``: the shards that exist) passes over
    silently: a split whose first shard (``split.no`` 0, the metadata) or any other is missing (``split.count`` of
    the first file found), and a tensor name held twice (shards of two splits mixed): :class:`UserInputError`
    naming them."""
    no, count = metadata_field(readers[0], "split.no", None), metadata_field(readers[0], "split.count", None)
    if count is not None and (no != 0 or len(files) != count):
        found = ", ".join(os.path.basename(str(f)) for f in files)
        raise UserInputError(f"GGUF {source!r}: a split of {count} shards, found {len(files)} ({found}), the first "
                             f"{'is' if no == 0 else 'is not'} shard 1 (split.no 0, the metadata); refused. accepted: "
                             f"every shard of the model in one folder")
    seen = Counter(t.name for r in readers for t in r.tensors)
    twice = sorted(n for n, k in seen.items() if k > 1)
    if twice:
        raise UserInputError(f"GGUF {source!r}: tensors held by more than one shard: {_show(twice)} (shards of "
                             f"different splits mixed?); refused. accepted: the shards of one model, as written")


def metadata_field(reader, key: str, default: Any = None) -> Any:
    """The GGUF metadata value ``key`` as gguf-py reads it (``default`` where the file has no such key)."""
    f = reader.get_field(key)
    if f is None:
        return default
    v = f.contents()
    return v


_MISSING = object()
_KINDS = {int: "an integer", float: "a number", bool: "a boolean"}


def _typed(reader, key: str, kind: type, default: Any = _MISSING) -> Any:
    """The GGUF metadata value ``key`` as ``kind`` (int, float or bool), read as llama.cpp writes it: an integer type
    for ``int`` (no float, string, array or bool), an integer or float for ``float``, a bool or an integer for
    ``bool``. A missing key gives ``default`` (none given: refused). Raises :class:`UserInputError` naming the key,
    what it holds and the type expected."""
    v = metadata_field(reader, key, _MISSING)
    if v is _MISSING:
        if default is _MISSING:
            raise UserInputError(f"GGUF metadata has no {key}; accepted: a glm-dsa GGUF as llama.cpp's converter "
                                 f"writes it")
        return default
    ok = (isinstance(v, int) and not isinstance(v, bool) if kind is int else
          isinstance(v, (int, float)) and not isinstance(v, bool) if kind is float else isinstance(v, (bool, int)))
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
        "rope_parameters": {"rope_theta": need("rope.freq_base", float), "rope_type": "default"},
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


def adapter_class():
    """:class:`GlmDsaGGUFAdapter`, defined on first use (vllm-gguf-plugin is an optional extra)."""
    global GlmDsaGGUFAdapter
    if "GlmDsaGGUFAdapter" in globals():
        return GlmDsaGGUFAdapter
    from vllm_gguf_plugin.weights_adapter.base import GGUFLoadSpec
    from vllm_gguf_plugin.weights_adapter.default import GGUFWeightsAdapter

    class _GlmDsaGGUFAdapter(GGUFWeightsAdapter):
        """vllm-gguf-plugin weights adapter for ``glm_moe_dsa`` configs (see the module docstring)."""

        @classmethod
        def matches(cls, config) -> bool:
            return getattr(config, "model_type", None) == "glm_moe_dsa"

        def build_name_map(self, model_config) -> dict[str, str]:
            return gguf_to_vllm_names(model_config.hf_config.to_dict())

        def patch_hf_config(self, model_path: str, hf_config):
            """The plugin's patch (vocabulary, multimodal) from the first shard, which holds the metadata; the LM
            head from every shard (:func:`lm_head_in`)."""
            files = self._get_all_gguf_files(model_path)
            hf_config = super().patch_hf_config(files[0], hf_config)
            hf_config.get_text_config().update({"tie_word_embeddings": not lm_head_in(files)})
            return hf_config

        def plan(self, model_path: str, model_config) -> GGUFLoadSpec:
            """What :meth:`prepare_loading` loads, with no record of it: the shards checked (:func:`check_shards`),
            the config patched (a tied one refused: :data:`UNTIED_LM_HEAD`), the tensors checked (indexer,
            :func:`check_coverage`), the load spec. ``sparse-mla diagnose`` asks this too."""
            import gguf

            files = self._get_all_gguf_files(model_path)
            readers = [gguf.GGUFReader(f) for f in files]
            check_shards(readers, files, model_path)
            names = {t.name for r in readers for t in r.tensors}
            if "output.weight" not in names:
                raise UserInputError(f"GGUF {model_path!r}: no output.weight in any of its {len(files)} file(s): "
                                     f"{UNTIED_LM_HEAD}; refused. accepted: a glm-dsa GGUF with output.weight (GLM-5 "
                                     f"does not tie its embeddings; llama.cpp's converter writes it)")
            model_config.hf_config = self.patch_hf_config(model_path, model_config.hf_config)
            layers = int(model_config.hf_config.num_hidden_layers)
            check_indexer_tensors(names, layers, model_path)
            full = self.build_name_map(model_config)
            check_coverage(names, full, model_path, layers, described_tensors(readers[0], names))
            passthrough = {g: h for g, h in full.items() if not g.endswith(DEQUANTIZED)}
            types = self.get_weight_type_map(model_path, passthrough)
            unquantized = self.get_unquantized_modules(types) + sorted(
                {h.rsplit(".", 2)[0] + ".kv_b_proj" for g, h in full.items() if g.endswith("attn_k_b.weight")}
                | {h.removesuffix(".weight") for g, h in full.items() if g.endswith("indexer.attn_q_b.weight")})
            self.dequantized = {g: h for g, h in full.items() if g.endswith(DEQUANTIZED)}
            self.load_spec = GGUFLoadSpec(weights_source=files, gguf_to_hf_name_map=passthrough,
                                          unquantized_modules=unquantized)
            return self.load_spec

        def prepare_loading(self, model_path: str, model_config) -> GGUFLoadSpec:
            USED.clear()                          # a refused plan leaves no earlier load's record behind
            spec = self.plan(model_path, model_config)
            USED.update(adapter="GlmDsaGGUFAdapter", file=os.path.basename(str(spec.weights_source[0])))
            return spec

        def prepare_weights(self, model_config):
            yield from super().prepare_weights(model_config)
            yield from dequantized_weights(self.load_spec.weights_source, self.dequantized,
                                           model_config.hf_config.to_dict(), model_config.dtype)

    GlmDsaGGUFAdapter = _GlmDsaGGUFAdapter
    return GlmDsaGGUFAdapter


def dequantized_weights(files, names: dict[str, str], cfg: dict, dtype):
    """``(vLLM name, tensor in dtype)`` for the GGUF tensors of ``names`` (GGUF -> converter-form vLLM name),
    dequantized by gguf-py: ``indexer.attn_k``/``indexer.proj`` as they are, ``attn_k_b``/``attn_v_b`` of each layer
    joined into ``kv_b_proj`` (per head: the k part transposed back, then v)."""
    import gguf
    import numpy as np
    import torch

    halves: dict[str, dict[str, np.ndarray]] = {}
    for f in files:
        for t in gguf.GGUFReader(f).tensors:
            if t.name not in names:
                continue
            w, hf = dequantize(t), names[t.name]
            if t.name.endswith(("attn_k_b.weight", "attn_v_b.weight")):
                halves.setdefault(hf.rsplit(".", 2)[0], {})["k" if "k_b" in t.name else "v"] = w
                continue
            yield hf, torch.from_numpy(np.ascontiguousarray(w)).to(dtype)
    for prefix, kv in halves.items():
        kv_b = join_kv_b(kv["k"], kv["v"], cfg["num_attention_heads"])
        yield prefix + KV_B, torch.from_numpy(kv_b).to(dtype)


def register_adapter() -> bool:
    """Put :class:`GlmDsaGGUFAdapter` first in vllm-gguf-plugin's adapter list (idempotent). False where
    vllm-gguf-plugin is not installed."""
    try:
        import vllm_gguf_plugin.weights_adapter as wa
    except ImportError:
        return False
    cls = adapter_class()
    if cls not in wa._ADAPTER_REGISTRY:
        wa._ADAPTER_REGISTRY.insert(0, cls)
    return True
