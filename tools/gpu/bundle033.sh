#!/usr/bin/env bash
# vLLM 0.33.0 for the lent H200, carried in pieces over back-to-back calls of one lease (maintainers' harness, not
# product code; issue 36 item 5). vLLM 0.33.0 pins torch 2.14.0 and triton 3.8: the image's torch 2.11.0+cu130 and
# triton 3.6.0 cannot serve it, so torch and triton travel too, which no single 64 MiB call holds (0.26's one-call
# recipe is ../shared/device/build_bundle.sh; sizes and the verdict: results/h200/sessions/2026-12-05/vllm033_bundle.md).
#
# Here, from the project root (about 15-25 min on 2 busy cores, most of it xz; 3 GB of scratch):
#   bash tools/gpu/bundle033.sh build   .dev033/parts/bundle033.tar.xz.NN (pieces), .dev033/device_env033.sh
#   bash tools/gpu/bundle033.sh calls   one line per device call: what to carry and the command
# On the GPU machine every call carries .dev033/device_env033.sh and one piece, and starts with
#   source .dev033/device_env033.sh
# which moves the carried piece to /tmp/b033 and, once every piece is there (checked by sha256), unpacks them into
# /tmp/site033 and sets PYTHONPATH; before that it says which pieces are missing and returns 3, so that
# `source .dev033/device_env033.sh && CMD` runs CMD only on a complete bundle. A warm machine keeps /tmp but goes back
# after 30 s idle: the calls must follow each other at once, or the pieces are lost and the run starts over.
#
# DL=DIR takes the torch/triton/vllm wheels from DIR instead of downloading ~1.1 GB; WORK=DIR keeps the unpacked tree
# (default: a temporary folder removed on exit); PIECE_BYTES overrides the piece size.
set -euo pipefail
S=$(cd "$(dirname "$0")" && pwd)
ROOT=$(git rev-parse --show-toplevel)
SHARED=${SHARED:-$ROOT/../shared/device}
cd "$ROOT"
# a call carries at most 64 MiB, the tracked tree included: a piece is what is left of it, less 1 MiB for the
# bootstrap, the tree's growth and rounding
tree_bytes() { git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}'; }
PIECE_BYTES=${PIECE_BYTES:-$(( (64 - 1) * 1048576 - $(tree_bytes) ))}

build() {
  grep -qx '/.dev033/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null \
    || echo /.dev033/ >> "$(git rev-parse --git-common-dir)/info/exclude"
  local W=${WORK:-}
  # the trap expands W now: W is this function's local, gone when the EXIT trap runs
  if [ -z "$W" ]; then W=$(mktemp -d); trap "rm -rf '$W'" EXIT; fi
  local SITE=$W/site DL=${DL:-$W/dl}
  rm -rf "$SITE"; mkdir -p "$SITE" "$DL" "$W/wheels"
  # cp312 manylinux x86_64 wheels, whatever Python runs this script (the GPU image has Python 3.12)
  local P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform any"
  local t
  for t in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 \
           manylinux_2_18 manylinux_2_17 manylinux2014 manylinux1; do P="$P --platform ${t}_x86_64"; done
  # torchvision travels too: transformers imports it whenever it is installed (image_utils), and the image's build
  # for torch 2.11 fails under 2.14 ("operator torchvision::nms does not exist", H200, 2026-12-05)
  ls "$DL"/torch-2.14.0-*.whl "$DL"/triton-3.8.0-*.whl "$DL"/vllm-0.33.0-*.whl "$DL"/torchvision-0.29.0-*.whl \
    >/dev/null 2>&1 || python3 -m pip download -q $P -d "$DL" torch==2.14.0 triton==3.8.0 vllm==0.33.0 torchvision==0.29.0
  local w
  for w in "$DL"/torch-2.14.0-*.whl "$DL"/triton-3.8.0-*.whl "$DL"/vllm-0.33.0-*.whl "$DL"/torchvision-0.29.0-*.whl; do
    nice -n 19 unzip -q "$w" -d "$SITE"
  done

  # 1. what a single-H200 run never loads. vllm: as 0.26's recipe (FA2 is for sm_80-89, vllm-rs is the Rust front
  # end, fmha_sm100 is Blackwell's; 0.33's deep_gemm ships one abi3 _C_extension, nothing per Python to drop).
  # torch: protoc is a build tool. triton: cupti/cupti-blackwell and libproton.so serve only the Proton profiler
  # (triton.profiler, TRITON_CUPTI_LIB_PATH), ptxas-blackwell only arch >= 100 (nvidia/compiler.py), the two
  # *TestLib.so only triton's own tests; ptxas, cuobjdump, nvdisasm, libdevice and the CUDA headers stay (the launcher
  # stub is compiled against them on first use)
  cd "$SITE"
  rm -rf vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs vllm/third_party/fmha_sm100 \
         torch/bin/protoc torch/bin/protoc-* \
         triton/backends/nvidia/lib/cupti triton/backends/nvidia/lib/cupti-blackwell triton/_C/libproton.so \
         triton/backends/nvidia/bin/ptxas-blackwell triton/instrumentation/libGPUInstrumentationTestLib.so \
         triton/plugins/libTritonPluginsTestLib.so
  # vLLM's CUDA fused_q imports its CuTeDSL variant, whose module imports nvidia-cutlass-dsl (not carried, as for 0.26):
  # every engine whose fused_q is vLLM's died on "No module named 'cutlass'" (H200, 2026-12-05). A stub that reports
  # the CuTeDSL path unsupported makes vLLM run its Triton fused_q, its fallback where CuTeDSL does not apply. A change
  # to vLLM in this bundle only (the harness'), never in the product; the session notes say which runs had it
  cat > vllm/models/deepseek_v32/nvidia/ops/fused_q_cutedsl.py <<'STUB'
# harness stub (tools/gpu/bundle033.sh): the carried bundle has no nvidia-cutlass-dsl, so the CuTeDSL fused_q is
# reported unsupported and vLLM runs its Triton fused_q
def is_fused_q_cutedsl_supported(*args, **kwargs):
    return False


fused_q_cutedsl = None
STUB
  # 2. only sm_90 machine code in every fatbin (libtorch_cuda.so alone holds 332 MB of cubins for 9 archs; FA3 is
  # sm_90-only already). --drop-ptx as 0.26's recipe: kernels that exist only as sm_80 PTX (Marlin) are lost
  local f
  for f in torch/lib/libtorch_cuda.so torch/lib/libtorch_cuda_linalg.so torch/lib/libtorch_nvshmem.so \
           vllm/_C_stable_libtorch.abi3.so vllm/_moe_C_stable_libtorch.abi3.so vllm/_flashmla_C.abi3.so \
           vllm/_qutlass_C.abi3.so vllm/_flashkda_C.abi3.so vllm/_deepselect_C.abi3.so; do
    nice -n 19 python3 "$SHARED/fatbin_prune.py" prune "$f" "$f.new" --keep-arch 90 --drop-ptx
    mv "$f.new" "$f"; chmod 755 "$f"
  done
  cd "$ROOT"
  # NCCL travels too: torch 2.14's libtorch_cuda.so imports 11 functions (ncclCommGrow, ncclSignal, ...) that the
  # image's NCCL 2.28.9 (torch 2.11's pin) lacks, and Python loads extensions with RTLD_NOW, so `import torch` would
  # fail; cuBLAS, cuDNN and cuSPARSELt of the image export every symbol torch 2.14 and vLLM 0.33 import
  # (results/h200/sessions/2026-12-05/vllm033_bundle.md). Of its 252 MB, 71 MB are .nv_fatbin, 127 MB __nv_relfatbin (relocatable device code,
  # same fatbin format, 7 archs + PTX: xz leaves it at 143 MB if only .nv_fatbin is pruned) and 37 MB debug info: both
  # fatbins keep only sm_90 (a copy of fatbin_prune.py aimed at the other section), debug info goes (31 MB with xz)
  ls "$DL"/nvidia_nccl_cu13-2.30.7-*.whl >/dev/null 2>&1 \
    || python3 -m pip download -q $P -d "$DL" nvidia-nccl-cu13==2.30.7
  nice -n 19 unzip -q "$DL"/nvidia_nccl_cu13-2.30.7-*.whl 'nvidia/nccl/lib/libnccl.so.2' -d "$SITE"
  sed "s/'.nv_fatbin'/'__nv_relfatbin'/" "$SHARED/fatbin_prune.py" > "$W/relfatbin_prune.py"
  f=$SITE/nvidia/nccl/lib/libnccl.so.2
  nice -n 19 python3 "$SHARED/fatbin_prune.py" prune "$f" "$f.a" --keep-arch 90 --drop-ptx
  nice -n 19 python3 "$W/relfatbin_prune.py" prune "$f.a" "$f.b" --keep-arch 90 --drop-ptx
  strip --strip-debug -o "$f" "$f.b"; rm -f "$f.a" "$f.b"; chmod 755 "$f"
  # 3. pure-Python packages the image lacks: 0.26's list with 0.33's changes (openai-harmony became oss-harmony;
  # xgrammar and apache-tvm-ffi pinned to 0.33's versions; orjson, multidict and certifi>=2026.10.19 are new
  # requirements). huggingface-hub (0.33 wants >=1.31) stays the image's: 2.x could break its transformers 5.17
  grep -vE '^(openai-harmony|xgrammar|apache-tvm-ffi)==' "$SHARED/device-wheels.txt" > "$W/wheels.txt"
  printf '%s\n' oss-harmony==0.0.11 xgrammar==0.2.8 apache-tvm-ffi==0.1.11 orjson==3.13.0 multidict==7.2.1 \
    certifi==2026.10.19.post1 >> "$W/wheels.txt"
  python3 -m pip download -q $P -d "$W/wheels" -r "$W/wheels.txt"
  python3 -m pip install -q $P --no-compile --target "$SITE" "$W"/wheels/*.whl
  rm -rf "$SITE/bin"
  du -sb "$SITE" | awk '{printf "unpacked: %.1f MB\n", $1 / 1e6}'

  # 4. one xz stream, cut into pieces that each fit one call beside the tree
  rm -rf .dev033; mkdir -p .dev033/parts
  (cd "$SITE" && tar cf - .) | nice -n 19 xz -9 -T2 | split -b "$PIECE_BYTES" -d -a 2 - .dev033/parts/bundle033.tar.xz.
  local sums; sums=$(cd .dev033/parts && sha256sum bundle033.tar.xz.*)
  { echo "# written by tools/gpu/bundle033.sh build on $(date -u +%F): the pieces and their sha256"
    echo "B033_SUMS='$sums'"
    sed -n '/^# ---- device_env033.sh ----$/,$p' "$S/bundle033.sh" | tail -n +2 | sed 's/^# //; s/^#$//'
  } > .dev033/device_env033.sh
  ls -l .dev033/parts .dev033/device_env033.sh
}

calls() {
  local n=0 p
  for p in .dev033/parts/bundle033.tar.xz.*; do
    n=$((n + 1))
    echo "call $n: carry [\".dev033/device_env033.sh\", \"$p\"]  command: source .dev033/device_env033.sh"
  done
  echo "the last call's command goes on, e.g.: ... && python3 -c 'import torch, vllm; print(torch.__version__)'"
}

# GLM-5.3-Flash's extras for the glm5next stage (h200_session.sh), outside the bundle so that it need not be rebuilt:
# transformers 5.22.2 and what it checks at import (the image's 5.17.0 has no glm5_next weight conversion), TileLang
# 0.1.12 and its requirements the bundle lacks (vLLM runs GLM-5.3-Flash's MHC layers with TileLang only; the bundle's
# apache-tvm-ffi 0.1.11 is the one TileLang takes). Two folders, each one call's carry beside the tree; on the GPU
# machine each call runs `mkdir -p /tmp/tfw && cp .dev033/tf/*.whl /tmp/tfw/` (tl likewise), before the pieces.
extras() {
  local P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform any" t
  for t in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014; do
    P="$P --platform ${t}_x86_64"; done
  mkdir -p .dev033/tf .dev033/tl
  python3 -m pip download -q $P -d .dev033/tf transformers==5.22.2 tokenizers==0.23.3 huggingface-hub==1.33.0 \
    safetensors==0.8.0 regex==2026.12.2 'z3-solver>=4.13.0,<4.15.5' ml-dtypes torch-c-dlpack-ext cloudpickle
  python3 -m pip download -q $P -d .dev033/tl tilelang==0.1.12
  du -sh .dev033/tf .dev033/tl
}

case "${1:-}" in
  build) build ;;
  calls) calls ;;
  extras) extras ;;
  *) sed -n 2,19p "$0"; exit 2 ;;
esac
exit 0

# The bootstrap, written into .dev033/device_env033.sh after the pieces' sums (kept here so that it is reviewed with
# the builder; everything below the marker, less its '# ', is copied). Sourced on the GPU machine from the project root.
# ---- device_env033.sh ----
# B=/tmp/b033 SITE033=/tmp/site033
# mkdir -p "$B"
# # the piece(s) this call carried join those earlier calls of this warm machine left in /tmp
# for _p in .dev033/parts/bundle033.tar.xz.*; do [ -f "$_p" ] && cp -u "$_p" "$B/"; done
# if [ ! -f "$SITE033/.done" ]; then
#   _missing=$(cd "$B" && printf '%s\n' "$B033_SUMS" | sha256sum -c --quiet 2>/dev/null | sed -n 's/: FAILED.*//p')
#   _have=$(ls "$B" | grep -c '^bundle033.tar.xz' || true)
#   _want=$(printf '%s\n' "$B033_SUMS" | wc -l)
#   if [ -n "$_missing" ]; then
#     echo "bundle033: $_have of $_want pieces in $B; missing or damaged: $(echo $_missing)"
#     return 3 2>/dev/null || exit 3
#   fi
#   # all there: unpack once per warm machine and free the pieces (the disk holds both, but /tmp is shared)
#   _t0=$(date +%s)
#   mkdir -p "$SITE033" && cat "$B"/bundle033.tar.xz.* | xz -dc -T0 | tar xf - -C "$SITE033" && touch "$SITE033/.done" \
#     && rm -f "$B"/bundle033.tar.xz.*
#   echo "bundle033: unpacked into $SITE033 in $(( $(date +%s) - _t0 )) s"
# fi
# # torch 2.14's libraries find their CUDA libraries through RPATH $ORIGIN/../../nvidia/*: beside the bundle's NCCL,
# # link the image's (torch 2.11.0+cu130's nvidia-* wheels; the versions that differ: results/h200/sessions/2026-12-05/vllm033_bundle.md)
# if [ ! -f "$SITE033/.nvidia_linked" ]; then
#   _img=$(env -u PYTHONPATH python3 -c 'import importlib.util as u, os
# s = u.find_spec("nvidia.cu13") or u.find_spec("nvidia.cudnn")
# print(os.path.dirname(list(s.submodule_search_locations)[0]) if s else "")' 2>/dev/null)
#   for _d in ${_img:+"$_img"/*/}; do
#     [ -e "$SITE033/nvidia/$(basename "$_d")" ] || ln -s "${_d%/}" "$SITE033/nvidia/$(basename "$_d")"
#   done
#   touch "$SITE033/.nvidia_linked"
#   echo "bundle033: CUDA libraries from ${_img:-nowhere (no nvidia-* wheels in the image)}, NCCL from the bundle"
# fi
# if [ ! -x "$SITE033/bin/vllm" ]; then
#   mkdir -p "$SITE033/bin"
#   printf '#!/bin/sh\nexec python3 -m vllm.entrypoints.cli.main "$@"\n' > "$SITE033/bin/vllm"
#   chmod +x "$SITE033/bin/vllm"
# fi
# export PATH=$SITE033/bin:$PATH
# # PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK: torch 2.14 is built against cuDNN 9.24, the image has 9.19 (if it holds
# # torch 2.11's pin); torch refuses a runtime minor below the compile one at the first cuDNN call, not at import, and
# # vLLM's MLA paths call no cuDNN. FlashInfer is not in the bundle (as for 0.26)
# export PYTHONPATH=$SITE033${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 \
#   HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
#   VLLM_CACHE_ROOT=/tmp/vllmcache033 TOKENIZERS_PARALLELISM=false \
#   VLLM_USE_FLASHINFER_SAMPLER=0 PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1
# command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
# [ -n "${CUDA_HOME:-}" ] || export CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
# # B033_NO_INSTALL=1: the calls that only carry pieces leave the project as h200_session.sh installed it (from
# # /tmp/work, the committed tree the records name)
# if [ -z "${B033_NO_INSTALL:-}" ] && [ -f pyproject.toml ] && [ ! -f "$SITE033/.project_installed" ]; then
#   python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . && touch "$SITE033/.project_installed"
# fi
