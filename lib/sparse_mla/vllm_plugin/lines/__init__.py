"""What differs between the tested vLLM lines for the plugin: one small adapter module per line (``v0_26``,
``v0_33``, ``v0_34``: 0.33's with DeepGEMM's 0.34 signatures; named after :data:`sparse_mla.vllm_lines.TESTED_LINES`),
each giving the same names:

* ``SparseMetadata``: the metadata class vLLM's ``SparseMLACommonMetadataBuilder.build`` fills for a sparse MLA backend
  (0.26: ours, declaring the fields ``build`` passes; 0.33: vLLM's own ``SparseMLACommonMetadata``);
* ``ImplForward``: the impl's entry point from vLLM's MLA layer (0.26: a ``forward_mqa`` that converts the indexer's
  request-local top-k to cache slots with vLLM's kernel; 0.33: the ``_forward_mqa_kernel`` vLLM's own ``forward_mqa``
  calls with physical rows, after the block-stride, index-group and DCP conversions), both ending in the impl's
  ``attend``;
* ``customize_spec(spec)``: the backend's say on its KV-cache spec (0.33 only; 0.26 has no such hook);
* ``deepgemm_adapters(prefill, paged)``: the indexer hook's DeepGEMM stand-ins, in this line's call signatures and
  output layout (:mod:`sparse_mla.vllm_plugin.indexer`);
* ``FP8_STORE_HOOKS``: every place the line's DSA path calls a Triton kernel that stores fp8 (which SM80/86 cannot
  compile), with the hook's stand-in; ``FP8_STORE_STAND_INS``: the stand-ins the adapter provides itself (0.33's
  ``fused_q`` and ``fused_norm_rope``);
* ``TRITON_FP8_MLA_CACHE_WRITE``: whether the line writes a quantized MLA cache in Triton (0.33), which the backend
  then refuses below SM89.
* ``KPOOL_DEEPGEMM_MODULE``: the module of GLM-5.3-Flash's KPool indexer whose DeepGEMM names the indexer hook also
  rebinds (0.33/0.34: ``vllm.models.glm5next.nvidia.sparse_indexer``; 0.26, which has no such model: None).

The backend, indexer and registration are written once against these names.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from ...vllm_lines import TESTED_LINES, current_line, installed_vllm, module_name, tested_text


def adapter() -> ModuleType:
    """The installed vLLM's line adapter. Raises ImportError naming the tested lines for a vLLM outside them (the
    plugin's ``register()`` checks first and warns instead)."""
    line = current_line()
    if line not in TESTED_LINES:
        raise ImportError(f"sparse_mla's vLLM plugin is built for {tested_text()}; this is vLLM {installed_vllm()}")
    return importlib.import_module(f".{module_name(line)}", __name__)
