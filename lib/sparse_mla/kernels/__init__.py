"""Triton kernels for DSA sparse MLA: :func:`sparse_mla_attention` (split-KV decode and direct prefill) and the
teaching kernel :func:`sparse_mla_attention_simple` used in notebook 02."""
from .api import (SMEM_PER_BLOCK, LaunchConfig, choose_config, fitted_config, interpreting, launch,
                  shared_memory_bytes, smaller_configs, sparse_mla_attention)
from .simple import sparse_mla_attention_simple

__all__ = ["SMEM_PER_BLOCK", "LaunchConfig", "choose_config", "fitted_config", "interpreting", "launch",
           "shared_memory_bytes", "smaller_configs", "sparse_mla_attention",
           "sparse_mla_attention_simple"]
