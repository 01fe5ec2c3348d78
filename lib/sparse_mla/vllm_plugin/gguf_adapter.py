"""GLM-5 (``glm-dsa``) GGUF files in vLLM 0.26 through ``vllm-gguf-plugin``: our weights adapter.

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
  config (the name map, :mod:`sparse_mla.gguf.names`), so the map and llama.cpp's converter cannot disagree;
* stacked experts ``ffn_*_exps`` -> ``mlp.experts.0.*`` (the plugin's ``map_weights`` splits them per expert);
* ``attn_k_b`` [heads, kv_lora_rank, nope] and ``attn_v_b`` [heads, v, kv_lora_rank] are dequantized (gguf-py,
  :mod:`sparse_mla.gguf.dequantize`) and joined back into ``kv_b_proj`` [heads * (nope + v), kv_lora_rank] in the
  model dtype: vLLM's MLA takes ``kv_b_proj`` and makes its own absorbed copies after loading; ``kv_b_proj`` is then
  an unquantized module;
* ``indexer.attn_k`` and ``indexer.proj`` are dequantized too: vLLM fuses them into ``wk_weights_proj``, a linear
  built with ``quant_config=None`` (deepseek_v2.py ``Indexer``);
* ``indexer.attn_q_b`` is dequantized and ``indexer.wq_b`` loaded unquantized: it is vLLM 0.26's one quantized
  ``ReplicatedLinear`` in GLM-5, and vllm-gguf-plugin 0.0.5's GGUF linear loads through the layer's
  ``weight_loader_v2``, which ``ReplicatedLinear`` lacks; its own ``weight_loader`` then refuses the GGUF tensor
  ("Tried to load weights of size torch.Size([4096, 544]) to a parameter of size torch.Size([0])", the H200,
  2026-12-03). The values are the GGUF's either way;
* a GGUF without the DSA indexer tensors (llama.cpp's early GLM-5 conversions, mapped to ``glm4moe``) is refused by
  :func:`~sparse_mla.gguf.tensors.check_indexer_tensors`, naming the missing tensors: it would otherwise run dense,
  silently;
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
  twice (:func:`~sparse_mla.gguf.tensors.check_shards`; the plugin's discovery skips a missing shard), no
  ``output.weight`` anywhere (:data:`UNTIED_LM_HEAD`), and a config that disagrees with the files on the model's
  tensors (:func:`~sparse_mla.gguf.tensors.check_coverage`: one the metadata describes but the map skips would be
  ignored, one no file holds would leave its parameter empty).

The format's facts the adapter uses (the name map, the checks of the files' tensors, the dequantization) are
:mod:`sparse_mla.gguf`'s; this module holds what vllm-gguf-plugin runs.
"""
from __future__ import annotations

import os

from ..errors import UserInputError
from ..gguf.dequantize import dequantized_weights
from ..gguf.names import gguf_to_vllm_names
from ..gguf.tensors import check_coverage, check_indexer_tensors, check_shards, described_tensors, holders

#: Set in the process where :class:`GlmDsaGGUFAdapter` prepared a GGUF's loading: ``{"adapter": class name,
#: "file": the GGUF's file name}`` (read by the ``ran`` block, :func:`sparse_mla.vllm_plugin.ran.weights_loaded`).
USED: dict[str, str] = {}


#: GGUF tensors the adapter dequantizes and hands over unquantized (see the module docstring).
DEQUANTIZED = ("attn_k_b.weight", "attn_v_b.weight", "indexer.attn_k.weight", "indexer.proj.weight",
               "indexer.attn_q_b.weight")



def lm_head_in(files) -> bool:
    """Whether any of a model's GGUF ``files`` (every shard) holds the LM head, by vllm-gguf-plugin's own test
    (``gguf_utils.extract_lm_head_from_gguf``: an ``output.weight`` tensor), which the plugin asks of one file only."""
    from vllm_gguf_plugin.gguf_utils import extract_lm_head_from_gguf

    return any(extract_lm_head_from_gguf(f) for f in files)



#: Why a glm-dsa GGUF without ``output.weight`` is refused: vLLM's ``GlmMoeDsaForCausalLM`` is
#: ``DeepseekV2ForCausalLM``, which builds its own ``ParallelLMHead`` and never ties it to the embedding
#: (``tests/vllm_plugin/test_gguf_adapter.py`` reads that in vLLM's code), so a tied config loads nothing into it.
#: On a CUDA host vLLM 0.33 loads ``deepseek_v32``'s ``DeepseekV32ForCausalLM`` instead, a subclass with
#: ``DeepseekV2ForCausalLM``'s head construction (read, not tested here: that module does not import without CUDA).
UNTIED_LM_HEAD = ("vLLM's GlmMoeDsaForCausalLM (DeepseekV2ForCausalLM) never ties its LM head to the embedding, so it "
                  "would run with an empty LM head")



#: The Hugging Face ``model_type`` :class:`GlmDsaGGUFAdapter` takes (its ``matches``): GLM-5's, which gguf-py calls
#: ``glm-dsa``. ``sparse-mla diagnose`` reads it where vllm-gguf-plugin is not installed.
MODEL_TYPE = "glm_moe_dsa"


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
            return getattr(config, "model_type", None) == MODEL_TYPE

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
            check_coverage(names, full, model_path, layers, described_tensors(readers[0], names),
                           holders(readers, files))
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

