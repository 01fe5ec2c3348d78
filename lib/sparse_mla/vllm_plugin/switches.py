"""The plugin's switches in an engine's environment, in one light module (no torch, no vLLM), so that the launch
commands can set them without importing the indexer.

* ``SPARSE_MLA_TRITON_INDEXER``: ``1`` runs the Triton DSA indexer in place of vLLM's DeepGEMM one (``0`` keeps
  vLLM's; unset: the plugin's rule per capability, :func:`sparse_mla.vllm_plugin.indexer.wanted`);
* ``SPARSE_MLA_COUNT_INDEXER_CALLS``: ``1`` counts vLLM's DeepGEMM logits calls too, for the ``ran`` block
  (``sparse-mla launch`` sets it for its engines).
"""
from __future__ import annotations

#: The run-spec suffix (``TRITON_MLA_SPARSE+TRITON_DSA_INDEXER``) and the indexer's name in records.
INDEXER_NAME = "TRITON_DSA_INDEXER"
FORCE_ENV = "SPARSE_MLA_TRITON_INDEXER"
COUNT_ENV = "SPARSE_MLA_COUNT_INDEXER_CALLS"
