"""sparse-mla-workbook: DeepSeek Sparse Attention (DSA) MLA in vLLM on GPUs that vLLM has no sparse MLA kernel for.

Steps: :mod:`sparse_mla.diagnose` (why vLLM rejects GLM-5), :mod:`sparse_mla.kernels` (the Triton kernel, with
:mod:`sparse_mla.kernels.reference` beside it), :mod:`sparse_mla.vllm_plugin.backend` / :mod:`sparse_mla.vllm_plugin` (``TRITON_MLA_SPARSE``
in vLLM), :mod:`sparse_mla.launch.engine` (GLM-5 through vLLM).

Importing the package on a machine without an NVIDIA GPU sets ``TRITON_INTERPRET=1`` and
``CUDA_VISIBLE_DEVICES=""`` unless already set (see :mod:`sparse_mla.machine`).
"""
from .machine import apply_cpu_defaults as _apply_cpu_defaults

_apply_cpu_defaults()

__version__ = "0.1.0"


def sparse_mla_attention(q_nope, q_pe, kv_cache, indices, sm_scale, **kwargs):
    """Sparse MLA attention over a paged latent cache; see :func:`sparse_mla.kernels.sparse_mla_attention`."""
    from .kernels import sparse_mla_attention as _impl

    return _impl(q_nope, q_pe, kv_cache, indices, sm_scale, **kwargs)
