"""Triton kernels for DSA sparse MLA: :func:`sparse_mla_attention` (split-KV decode and direct prefill, bf16/fp16/fp32
or fp8_ds_mla latent cache; the launch planned from the GPU's own numbers) and the teaching kernel
:func:`sparse_mla_attention_simple` used in notebook 02."""
from .api import (DEVICE_LIMITS, SMEM_PER_BLOCK, DeviceLimits, LaunchConfig, choose_config,
                  compile_for, device_limits, fitted_config, fp8_hardware_path, interpreting, kernel_resources, launch,
                  plan_launch, planned_launches, programs_per_sm, shared_memory_bytes, smaller_configs,
                  sparse_mla_attention)
from .simple import sparse_mla_attention_simple

__all__ = ["DEVICE_LIMITS", "SMEM_PER_BLOCK", "DeviceLimits", "LaunchConfig", "choose_config",
           "compile_for", "device_limits", "fitted_config", "fp8_hardware_path", "interpreting", "kernel_resources",
           "launch", "plan_launch", "planned_launches", "programs_per_sm", "shared_memory_bytes", "smaller_configs",
           "sparse_mla_attention", "sparse_mla_attention_simple"]
