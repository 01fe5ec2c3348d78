"""Step 4, *register*: ``TRITON_MLA_SPARSE`` in vLLM as an out-of-tree plugin, no vLLM file edited.

* :mod:`.register` -- the ``vllm.general_plugins`` entry point (``triton_mla_sparse = sparse_mla.vllm_plugin:register``);
* :mod:`.backend` -- the attention backend (declarations, metadata builder, impl);
* :mod:`.selector` -- the fallback that lets vLLM's own selector pick it where vLLM has no sparse MLA backend;
* :mod:`.indexer_types` -- GLM-5.x ``indexer_types`` given to vLLM as the ``index_topk_pattern`` it reads.

Importing this package does not import vLLM; :func:`register` does.
"""
from .register import register

__all__ = ["register"]
