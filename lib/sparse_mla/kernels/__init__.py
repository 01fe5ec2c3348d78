"""Triton kernels for DSA sparse MLA: :func:`sparse_mla_attention` (split-KV decode and direct prefill, bf16/fp16/fp32
or fp8_ds_mla latent cache; the launch planned from the GPU's own numbers) and the teaching kernel
:func:`sparse_mla_attention_simple` used in notebook 02.

One module per job: ``api`` (the checked entry point), ``launch_plan`` (tiles and splits from the GPU's numbers),
``aot`` (ahead-of-time compiles and their resources), ``launcher`` (the launch and its fallback), ``attention`` (the
kernels), ``occupancy`` (device limits), ``indexer*`` (the DSA indexer), ``reference`` and ``error_bounds``."""
from .aot import SMEM_PER_BLOCK, compile_for, kernel_resources, shared_memory_bytes
from .api import sparse_mla_attention
from .launch_plan import (LaunchConfig, choose_config, fp8_hardware_path, planned_launches, smaller_configs)
from .launcher import fitted_config, launch
from .occupancy import DEVICE_LIMITS, DeviceLimits, device_limits, plan_launch, programs_per_sm
from .simple import sparse_mla_attention_simple

__all__ = ["DEVICE_LIMITS", "SMEM_PER_BLOCK", "DeviceLimits", "LaunchConfig", "choose_config",
           "compile_for", "device_limits", "fitted_config", "fp8_hardware_path", "kernel_resources",
           "launch", "plan_launch", "planned_launches", "programs_per_sm", "shared_memory_bytes", "smaller_configs",
           "sparse_mla_attention", "sparse_mla_attention_simple"]
