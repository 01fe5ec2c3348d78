"""Capture the exact Triton specializations (signature / constexprs / attrs / options)
that vLLM 0.34's GLM-5.3-Flash KDA layer would launch, by running the real host
wrappers on CPU tensors with a fake CUDA driver and a jit_cache_hook that records
and skips compilation.  Every autotune config is recorded (config index kept).
Output: captured.pkl (list of dicts) in $KDA_AOT_OUT (default: the current folder).
"""
import os
import pickle
import sys

os.environ.setdefault("TRITON_INTERPRET", "0")

import torch
import triton

# 1. make vLLM believe exactly one Triton driver (CUDA) is active
import stand_in_driver  # noqa: E402  (this folder: the script's own)

stand_in_driver.install()

CAPTURED = []
CURRENT = {"cfg_idx": None, "n_cfgs": None, "call": None}


def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
    jf = fn.jit_function
    CAPTURED.append(dict(
        call=CURRENT["call"],
        name=jf.fn.__name__,
        module=jf.fn.__module__,
        signature=dict(compile["signature"]),
        constants=dict(compile["constants"]),
        attrs=compile["configs"][0],
        num_warps=compile["num_warps"],
        num_stages=compile["num_stages"],
        num_ctas=compile["num_ctas"],
        cfg_idx=CURRENT["cfg_idx"],
        n_cfgs=CURRENT["n_cfgs"],
        repr=repr,
    ))
    return True  # skip compile -> run() returns None, no launch


triton.knobs.runtime.jit_cache_hook = hook

# 2. autotuner: run every config (recorded) instead of benchmarking
from triton.runtime.autotuner import Autotuner


def _run_all(self, *args, **kwargs):
    self.nargs = dict(zip(self.arg_names, args))
    for i, cfg in enumerate(self.configs):
        CURRENT["cfg_idx"], CURRENT["n_cfgs"] = i, len(self.configs)
        self.fn.run(*args, **kwargs, **cfg.all_kwargs())
    CURRENT["cfg_idx"], CURRENT["n_cfgs"] = None, None
    self.nargs = None
    return None


Autotuner.run = _run_all

# 3. now import vLLM pieces
from vllm.platforms import current_platform  # noqa: E402

# PDL flag: record with False; the compile step sets it per target (major >= 9)
type(current_platform).is_arch_support_pdl = classmethod(lambda cls: False)
# fla utils evaluates is_nvidia_hopper at import from the device name/capability;
# record with an SM80-like answer (default paths don't depend on it, see report)
from vllm.platforms.interface import DeviceCapability  # noqa: E402
type(current_platform).get_device_name = classmethod(lambda cls, *a, **k: "FAKE NVIDIA A100")
type(current_platform).get_device_capability = classmethod(lambda cls, *a, **k: DeviceCapability(8, 0))

from vllm.triton_utils import HAS_TRITON  # noqa: E402

assert HAS_TRITON, "vllm.triton_utils still has the placeholder"

import vllm.models.glm5next.nvidia.ops.third_party.kda.kernels as KK  # noqa: E402
from vllm.third_party.flash_linear_attention.ops.kda import rms_norm_gated  # noqa: E402
from vllm.model_executor.layers.mamba.ops import causal_conv1d as CC  # noqa: E402
from vllm.model_executor.layers.mamba.ops import gather_initial_states as GI  # noqa: E402
from vllm.model_executor.layers.mamba.ops import scatter_states as SS  # noqa: E402
import vllm.third_party.flash_linear_attention.ops.utils as FU  # noqa: E402
import vllm.third_party.flash_linear_attention.ops.index as FI  # noqa: E402

# no pinned-memory H2D on CPU: same dtype, stays on CPU
FI.async_tensor_h2d = lambda data, device=None, dtype=None, out=None: torch.as_tensor(data).to(dtype)

print("fla utils flags: is_nvidia", FU.is_nvidia, "is_amd", FU.is_amd,
      "is_nvidia_hopper", FU.is_nvidia_hopper, "is_tma_supported", FU.is_tma_supported,
      file=sys.stderr)

# ---- GLM-5.3-Flash shapes (transformers Glm5NextTextConfig defaults), TP=1 ----
H, D, W = 64, 128, 4          # linear_num_heads, linear_head_dim, linear_conv_kernel_dim
LB = -5.0                     # linear_lower_bound
HIDDEN = 4096
bf16, f32, i32 = torch.bfloat16, torch.float32, torch.int32
PROJ = H * D
NUM_BLOCKS = 8                # mamba cache lines (block 0 = null)

# prefill: two sequences (lengths 100 and 157) -> varlen
seqlens = [100, 157]
T = sum(seqlens)
N = len(seqlens)
cu = torch.tensor([0, 100, 257], dtype=i32)


def projected(T):
    # in_proj_qkvbfg_a output: [T, 3*PROJ + H + D + D] bf16, split into views
    p = torch.empty(T, 3 * PROJ + H + D + D, dtype=bf16)
    qkv, beta_raw, f_a, g_a = p.split([3 * PROJ, H, D, D], dim=-1)
    return qkv, beta_raw


A_log = torch.empty(1, 1, H, 1, dtype=f32)
dt_bias = torch.empty(PROJ, dtype=f32)
recurrent_state = torch.empty(NUM_BLOCKS, H, D, D, dtype=f32)  # mamba_ssm_cache_dtype auto -> fp32
conv_w = torch.empty(3 * PROJ, 1, W, dtype=f32).view(3 * PROJ, W)  # conv1d params_dtype fp32
# SD layout (default) stored as [blocks, state_len, dim], transposed to (dim, state_len)
conv_state_sd = torch.empty(NUM_BLOCKS, W - 1, 3 * PROJ, dtype=bf16)
conv_state = conv_state_sd.transpose(-1, -2)


def rearr(x):
    return x.reshape(1, -1, H, D)


# ===== prefill path =====
CURRENT["call"] = "prefill:causal_conv1d_fn"
qkv, beta_raw = projected(T)
has_init = torch.tensor([True, False])
state_idx = torch.tensor([3, 5], dtype=i32)
qkv_c = CC.causal_conv1d_fn(qkv.transpose(0, 1), conv_w, None, activation="silu",
                            conv_states=conv_state, has_initial_state=has_init,
                            cache_indices=state_idx, query_start_loc=cu,
                            metadata=None).transpose(0, 1)
q, k, v = qkv_c.split(PROJ, dim=-1)

CURRENT["call"] = "prefill:gather_initial_states"
GI._gather_initial_states_kernel[(1, N)](
    recurrent_state, state_idx, has_init, torch.empty(N, H, D, D, dtype=f32),
    recurrent_state.stride(0), state_idx.stride(0), has_init.stride(0),
    row_size=H * D * D, BLOCK_SIZE=1024, num_warps=8, launch_pdl=False)
init_state = torch.empty(N, H, D, D, dtype=f32)

CURRENT["call"] = "prefill:chunk_kda_with_fused_gate"
g1 = torch.empty(1, T, H, D, dtype=bf16)          # f_b_proj output (bf16)
beta_f32 = torch.empty(1, T, H, dtype=f32)       # _cast_sigmoid -> fp32
o, last_state = KK.chunk_kda_with_fused_gate(
    q=rearr(q), k=rearr(k), v=rearr(v), raw_g=g1, beta=beta_f32, A_log=A_log,
    g_bias=dt_bias, initial_state=init_state, output_final_state=True,
    use_qk_l2norm_in_kernel=True, cu_seqlens=cu, safe_gate=True, lower_bound=LB)

CURRENT["call"] = "prefill:scatter_states"
SS._scatter_states_kernel[(1, N)](
    recurrent_state, torch.empty(N, H, D, D, dtype=f32), state_idx,
    recurrent_state.stride(0), H * D * D, state_idx.stride(0),
    row_size=H * D * D, BLOCK_SIZE=1024, num_warps=8, launch_pdl=False)

# ===== plain decode path =====
ND = 4
qkv, beta_raw = projected(ND)
dec_idx = torch.tensor([1, 2, 3, 4], dtype=i32)
cu_d = torch.arange(ND + 1, dtype=i32)
CURRENT["call"] = "decode:causal_conv1d_update"
qkv_c = CC.causal_conv1d_update(qkv, conv_state, conv_w, None, activation="silu",
                                conv_state_indices=dec_idx)
q, k, v = qkv_c.split(PROJ, dim=-1)
CURRENT["call"] = "decode:fused_recurrent_kda"
out_buf = torch.empty(1, ND, H, D, dtype=bf16)
KK.fused_recurrent_kda(
    q=rearr(q), k=rearr(k), v=rearr(v), g=torch.empty(1, ND, H, D, dtype=bf16),
    beta=beta_raw.unsqueeze(0), initial_state=recurrent_state,
    use_qk_l2norm_in_kernel=True, cu_seqlens=cu_d, ssm_state_indices=dec_idx,
    out=out_buf, sigmoid_beta=True, a_log=A_log, g_bias=dt_bias, compute_gate=True,
    lower_bound=LB)

# ===== spec-decode (MTP) path: 4 seqs x (1+1 spec) tokens =====
NS, S = 4, 2
TS = NS * S
qkv, beta_raw = projected(TS)
spec_idx = torch.arange(1, 1 + NS * S, dtype=i32).view(NS, S)
n_acc = torch.ones(NS, dtype=i32)
cu_s = torch.arange(0, TS + 1, S, dtype=i32)
conv_state_sd2 = torch.empty(NUM_BLOCKS + 8, W - 1 + (S - 1), 3 * PROJ, dtype=bf16)
CURRENT["call"] = "spec:causal_conv1d_update"
qkv_c = CC.causal_conv1d_update(qkv, conv_state_sd2.transpose(-1, -2), conv_w, None,
                                activation="silu", conv_state_indices=spec_idx[:, 0],
                                num_accepted_tokens=n_acc, query_start_loc=cu_s,
                                max_query_len=S)
q, k, v = qkv_c.split(PROJ, dim=-1)
CURRENT["call"] = "spec:fused_recurrent_kda"
rs2 = torch.empty(NUM_BLOCKS + 8, H, D, D, dtype=f32)
KK.fused_recurrent_kda(
    q=rearr(q), k=rearr(k), v=rearr(v), g=torch.empty(1, TS, H, D, dtype=bf16),
    beta=beta_raw.unsqueeze(0), initial_state=rs2, use_qk_l2norm_in_kernel=True,
    cu_seqlens=cu_s, ssm_state_indices=spec_idx, num_accepted_tokens=n_acc,
    out=torch.empty(1, TS, H, D, dtype=bf16), sigmoid_beta=True, a_log=A_log,
    g_bias=dt_bias, compute_gate=True, lower_bound=LB)

# ===== o_norm (FusedRMSNormGated, sigmoid) when the custom op runs forward_cuda =====
CURRENT["call"] = "all:o_norm rms_norm_gated"
rms_norm_gated(torch.empty(1, T, H, D, dtype=bf16), torch.empty(T, H, D, dtype=bf16),
               torch.empty(D, dtype=bf16), None, "sigmoid", eps=1e-5)

with open(os.path.join(os.path.abspath(os.environ.get("KDA_AOT_OUT", ".")), "captured.pkl"), "wb") as f:
    pickle.dump(CAPTURED, f)
from collections import Counter
print("captured", len(CAPTURED))
for (c, n), cnt in Counter((d["call"], d["name"]) for d in CAPTURED).items():
    print(f"  {c:40s} {n:55s} configs={cnt}")
