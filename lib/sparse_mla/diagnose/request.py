"""What is diagnosed: the target GPU (a compute capability or a GPU preset), the KV-cache dtype, the tensor-parallel
size and the model, checked before vLLM is imported.

:func:`parse_capability` and :func:`resolve` turn user input into a :class:`Request` or raise
:class:`sparse_mla.errors.UserInputError` with one line naming the bad value and what is accepted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..capability import as_capability
from ..errors import UserInputError
from ..layouts import check_kv_cache_dtype


#: Named GPUs accepted as ``capability`` (CUDA compute capability ``major.minor``).
GPU_PRESETS: dict[str, str] = {
    "rtx-pro-6000": "12.0",
    "rtx-5090": "12.0",
    "b200": "10.0",
    "h100": "9.0",
    "h200": "9.0",
    "a100": "8.0",
    "l40s": "8.9",
    "rtx-4090": "8.9",
    "rtx-3090": "8.6",
    "a40": "8.6",
    "gb10": "12.1",
}

#: The KV-cache dtypes the workbook diagnoses (``--kv-cache-dtype``; the matrix's columns).
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "bfloat16", "fp8", "fp8_ds_mla")

#: vLLM 0.26.0's ``vllm.config.cache.CacheDType`` literal, copied so that input is validated before vLLM is
#: imported (tests/diagnose/test_selection.py checks it against the installed vLLM).
VLLM_CACHE_DTYPES: tuple[str, ...] = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "turboquant_k8v4",
    "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "int4_per_token_head",
    "int8_per_token_head", "fp8_per_token_head", "nvfp4",
)

#: Name under which the step 4 plugin's backend is reported.
PLUGIN_BACKEND_NAME = "TRITON_MLA_SPARSE"

_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16"}


# ----------------------------------------------------------------------------------------------------------------
# Input validation (no vLLM / torch import)
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    geometry: Any            # sparse_mla.models.ModelGeometry
    capability: tuple[int, int] | None   # None: the local GPU
    gpu: str | None          # preset name, "local", or None for a plain major.minor
    kv_cache_dtype: str
    tp: int
    heads_per_rank: int
    dtype: str               # torch dtype name passed to the selector
    with_plugin: bool
    backend: str | None = None   # a backend forced as with --attention-backend (vLLM's enum name), or None


def accepted_capabilities() -> str:
    return "major.minor such as 12.0, 9.0, 8.9; a GPU preset (" + ", ".join(GPU_PRESETS) + "); or local"


def parse_capability(capability: str | float | tuple[int, int]) -> tuple[tuple[int, int] | None, str | None]:
    """Turn ``capability`` into ``((major, minor), preset_name)``; ``(None, "local")`` for ``"local"``.

    Accepts ``"12.0"``-style strings, a :data:`GPU_PRESETS` name, ``"local"`` or a ``(major, minor)`` tuple.
    Raises :class:`UserInputError` naming the value for anything else (``"12"``, ``"twelve"``, ``"12.0.1"``).
    Does not check that a local GPU exists (:func:`diagnose` does).
    """
    if isinstance(capability, (tuple, list)):
        try:
            return as_capability(capability), None
        except UserInputError:
            raise UserInputError(f"unknown capability {capability!r}; accepted: (major, minor) with major 0-99 and "
                                 f"minor 0-9, or {accepted_capabilities()}") from None
    s = str(capability).strip()
    key = s.lower()
    if key == "local":
        return None, "local"
    if key in GPU_PRESETS:
        return as_capability(GPU_PRESETS[key], text=True), key
    try:
        return as_capability(s, text=True), None
    except UserInputError:
        raise UserInputError(f"unknown capability {s!r}; accepted: {accepted_capabilities()}") from None


def check_cache_dtype(kv_cache_dtype: str) -> str:
    """``kv_cache_dtype`` if it is one of vLLM's own ``CacheDType`` values (:data:`VLLM_CACHE_DTYPES`: the diagnosis
    asks vLLM about any of them), else one UserInputError line."""
    return check_kv_cache_dtype(kv_cache_dtype, VLLM_CACHE_DTYPES)


def _model_dtype(geometry) -> str:
    """The dtype vLLM's ``--dtype auto`` gives the layer: the config's ``dtype``/``torch_dtype`` if it is fp16 or
    bf16, else bfloat16 (vLLM runs fp32 checkpoints in bf16 on GPUs that support it)."""
    cfg = geometry.hf_config or {}
    raw = str(cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16").replace("torch.", "").lower()
    return _DTYPES.get(raw, "bfloat16")


def resolve(model, capability, kv_cache_dtype, tp, with_plugin, backend=None) -> Request:
    from ..models import load_model

    cap, gpu = parse_capability(capability)
    kv = check_cache_dtype(str(kv_cache_dtype))
    geometry = load_model(model)
    if isinstance(tp, bool) or not isinstance(tp, int):
        try:
            tp = int(str(tp), 10)
        except ValueError:
            raise UserInputError(f"tensor-parallel size {tp!r} is not an integer; accepted: a positive divisor "
                                 f"of num_attention_heads {geometry.num_attention_heads}") from None
    heads = geometry.heads_per_rank(tp)
    if gpu == "local":
        from ..machine import require_gpu

        require_gpu("capability 'local'", accepted_capabilities().replace("; or local", ""))
    return Request(geometry=geometry, capability=cap, gpu=gpu, kv_cache_dtype=kv, tp=tp, heads_per_rank=heads,
                    dtype=_model_dtype(geometry), with_plugin=bool(with_plugin),
                    backend=check_backend(backend, with_plugin))


def check_backend(backend, with_plugin: bool) -> str | None:
    """A forced backend (``--backend``) as vLLM's ``AttentionBackendEnum`` name, or None for vLLM's own choice
    (``None``/``auto``). ``TRITON_MLA_SPARSE`` is the plugin's backend, which vLLM knows as ``CUSTOM``."""
    if backend is None or str(backend).strip().lower() in ("", "auto"):
        return None
    name = str(backend).strip().upper()
    if name == PLUGIN_BACKEND_NAME:
        if not with_plugin:
            raise UserInputError(f"--backend {backend!r} is the workbook's own backend, registered by the step 4 plugin; "
                                 f"accepted: --with-plugin --backend {PLUGIN_BACKEND_NAME}, or a vLLM backend name")
        return "CUSTOM"
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    names = [m.name for m in AttentionBackendEnum]
    if name not in names:
        raise UserInputError(f"unknown attention backend {backend!r}; accepted: auto, {PLUGIN_BACKEND_NAME} (with "
                             f"--with-plugin) or one of vLLM's: {', '.join(names)}")
    return name
