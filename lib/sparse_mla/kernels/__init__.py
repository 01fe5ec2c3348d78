"""Triton kernels for DSA sparse MLA: :func:`sparse_mla_attention` (split-KV decode and direct prefill, bf16/fp16/fp32
or fp8_ds_mla latent cache) and the teaching kernel :func:`sparse_mla_attention_simple` used in notebook 02."""
from .api import (KV_CACHE_DTYPES, SMEM_PER_BLOCK, LaunchConfig, choose_config, compile_for, fitted_config,
                  fp8_hardware_path, interpreting, launch, shared_memory_bytes, smaller_configs, sparse_mla_attention)
from .simple import sparse_mla_attention_simple

__all__ = ["KV_CACHE_DTYPES", "SMEM_PER_BLOCK", "LaunchConfig", "choose_config", "compile_for", "fitted_config",
           "fp8_hardware_path", "interpreting", "launch", "shared_memory_bytes", "smaller_configs",
           "sparse_mla_attention", "sparse_mla_attention_simple"]
