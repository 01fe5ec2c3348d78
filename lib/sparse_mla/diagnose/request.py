"""What is diagnosed: the target GPU (a compute capability or a GPU preset, its memory), the KV-cache dtype, the
tensor-parallel size, the model and its checkpoint's quantization, and the memory stage's settings (GPU memory,
``gpu_memory_utilization``, ``max_model_len``, ``cpu_offload_gb``), checked before vLLM is imported (the KV-cache
dtype excepted: it is checked against the installed vLLM's own ``CacheDType``, read from ``vllm.config.cache``).

:func:`parse_capability` and :func:`resolve` turn user input into a :class:`Request` or raise
:class:`sparse_mla.errors.UserInputError` with one line naming the bad value and what is accepted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..capability import as_capability, check_gpu_capability
from ..errors import UserInputError, cli_float, cli_int
from ..gpus import GPU_PRESETS, GPUS, GpuPreset  # noqa: F401 - the diagnosis's names for them
from ..layouts import MATRIX_KV_CACHE_DTYPES, check_kv_cache_dtype
from .quantizations import QUANTIZATIONS



#: The KV-cache dtypes the matrix asks about (``layouts.MATRIX_KV_CACHE_DTYPES``, their one home).
KV_CACHE_DTYPES: tuple[str, ...] = MATRIX_KV_CACHE_DTYPES


def vllm_cache_dtypes() -> tuple[str, ...]:
    """The installed vLLM's own ``--kv-cache-dtype`` values: ``typing.get_args`` of its ``vllm.config.cache.CacheDType``
    literal (imports that module, and so vLLM, on the first call, under :func:`.probe.quiet_logs`: vLLM's first
    import logs, on 0.33 torch 2.14's deprecations; also reachable as ``VLLM_CACHE_DTYPES``)."""
    import typing

    from .probe import quiet_logs

    with quiet_logs():
        from vllm.config.cache import CacheDType

    return tuple(typing.get_args(CacheDType))


def __getattr__(name: str):
    """``VLLM_CACHE_DTYPES``: :func:`vllm_cache_dtypes`, read when first asked for (so importing this module does not
    import vLLM)."""
    if name == "VLLM_CACHE_DTYPES":
        return vllm_cache_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Name under which the step 4 plugin's backend is reported.
PLUGIN_BACKEND_NAME = "TRITON_MLA_SPARSE"

_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16"}

@dataclass(frozen=True)
class Quantization:
    """The checkpoint's quantization, as the memory stage sizes its weights."""

    name: str                        # a QUANTIZATIONS name, or the quant_method of a checkpoint's quantization_config
    method: str | None               # vLLM's quantization method for ``config`` (None: unquantized, GGUF, or read
    config: dict[str, Any] | None    #   by vLLM itself from the checkpoint's config.json)
    gguf_type: str | None            # a sparse_mla.gguf.types.GGUF_TYPES key
    source: str                      # "--quantization", "config.json quantization_config" or "unquantized"
    gguf_tensors: tuple | None = None   # a GGUF file's tensors (gguf_memory.GGUFTensor): each sized at its own type


@dataclass(frozen=True)
class MemorySettings:
    """What the memory stage is asked, besides the model, GPU and tensor-parallel size."""

    quantization: Quantization
    gpu_memory_gib: float | None = None          # --gpu-memory-gib; None: the preset's (or the local GPU's)
    gpu_memory_utilization: float | None = None  # None: vLLM's CacheConfig default
    max_model_len: int | None = None             # None: vLLM's, derived from the config
    cpu_offload_gb: float = 0.0


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
    memory: MemorySettings | None = None   # the memory stage's settings (None: the defaults, unquantized)


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
            cap = as_capability(capability)
        except UserInputError:
            raise UserInputError(f"unknown capability {capability!r}; accepted: (major, minor) with major 0-99 and "
                                 f"minor 0-9, or {accepted_capabilities()}") from None
        return check_gpu_capability(cap), None
    s = str(capability).strip()
    key = s.lower()
    if key == "local":
        return None, "local"
    if key in GPU_PRESETS:
        return as_capability(GPU_PRESETS[key], text=True), key
    try:
        cap = as_capability(s, text=True)
    except UserInputError:
        raise UserInputError(f"unknown capability {s!r}; accepted: {accepted_capabilities()}") from None
    return check_gpu_capability(cap), None


def check_cache_dtype(kv_cache_dtype: str) -> str:
    """``kv_cache_dtype`` if it is one of the installed vLLM's own ``CacheDType`` values (:func:`vllm_cache_dtypes`:
    the diagnosis asks vLLM about any of them), else one UserInputError line."""
    return check_kv_cache_dtype(kv_cache_dtype, vllm_cache_dtypes())


def _model_dtype(geometry) -> str:
    """The dtype vLLM's ``--dtype auto`` gives the layer: the config's ``dtype``/``torch_dtype`` if it is fp16 or
    bf16, else bfloat16 (vLLM runs fp32 checkpoints in bf16 on GPUs that support it)."""
    cfg = geometry.hf_config or {}
    raw = str(cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16").replace("torch.", "").lower()
    return _DTYPES.get(raw, "bfloat16")


def checkpoint_quantization(geometry, quantization: str | None = None) -> Quantization:
    """The checkpoint's quantization, the one place it is decided: the ``quantization_config`` of its config.json
    (vLLM reads that itself; ``--quantization`` must then be absent or name the same), else ``--quantization`` (a
    :data:`QUANTIZATIONS` name, whatever its case), else unquantized. Raises :class:`UserInputError` for an unknown
    name, a ``quantization_config`` without ``quant_method``, or a contradiction."""
    raw = geometry.raw_config or {}
    qc = raw.get("quantization_config", (geometry.hf_config or {}).get("quantization_config"))
    asked = None if quantization is None else str(quantization).strip().lower()
    if asked is not None and asked not in QUANTIZATIONS:
        raise UserInputError(f"unknown quantization {quantization!r}; accepted: {', '.join(QUANTIZATIONS)}")
    if qc is not None:
        if not isinstance(qc, dict) or not isinstance(qc.get("quant_method"), str):
            raise UserInputError(f"config {geometry.name!r} has quantization_config = {str(qc)[:60]!r} without a "
                                 f"quant_method; accepted: a Hugging Face quantization_config (e.g. quant_method fp8)")
        algo = str(qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo") or "").upper()
        name = "nvfp4" if qc["quant_method"] == "modelopt" and algo == "NVFP4" else qc["quant_method"].lower()
        if asked is not None and asked != name:
            raise UserInputError(f"--quantization {quantization!r} contradicts the quantization_config of "
                                 f"{geometry.name!r} ({name}); accepted: no --quantization, or --quantization {name}")
        return Quantization(name, None, None, None, "config.json quantization_config")
    if asked is None or asked == "bf16":
        return Quantization("bf16", None, None, None, "--quantization" if asked else "unquantized")
    method, config = QUANTIZATIONS[asked]
    gguf = asked.removeprefix("gguf-").upper() if asked.startswith("gguf-") else None
    return Quantization(asked, method, config, gguf, "--quantization")


def _number(value, what: str, accepted: str, *, integer: bool = False) -> float:
    """``value`` (a number or its text) as a finite float (an int with ``integer``), else one UserInputError line."""
    if isinstance(value, bool):
        raise UserInputError(f"{what} {value!r} is not a number; accepted: {accepted}")
    try:
        if isinstance(value, str):       # command-line text: ASCII digits only (errors.cli_int / cli_float)
            number = cli_int(value) if integer else cli_float(value)
        else:
            number = int(value) if integer and not isinstance(value, int) else float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserInputError(f"{what} {value!r} is not {'an integer' if integer else 'a number'}; "
                             f"accepted: {accepted}") from None
    if not math.isfinite(number):
        raise UserInputError(f"{what} {value!r} is not a finite number; accepted: {accepted}")
    return number


#: The largest memory size the diagnosis takes, GiB per GPU (1 PiB: no machine reaches it; past it the arithmetic
#: of the memory stage would overflow before it answered) and the longest context (2**40 tokens).
MAX_GIB = 1024.0 ** 2
MAX_TOKENS = 2 ** 40


def _size(value, what: str, unit: str, above_zero: bool = False) -> float:
    """A memory size in GiB from the command line or a call: a finite number in (0 or [0, :data:`MAX_GIB`], else
    one UserInputError line with the accepted range."""
    low = "above 0" if above_zero else ">= 0"
    accepted = f"{unit}, a number {low} and at most {MAX_GIB:.0f} (1 PiB; e.g. 95.6)"
    number = _number(value, what, accepted)
    if number < 0 or (above_zero and number == 0) or number > MAX_GIB:
        raise UserInputError(f"{what} {value!r} is outside the accepted range; accepted: {accepted}")
    return number


def check_memory_settings(geometry, quantization=None, gpu_memory_gib=None, gpu_memory_utilization=None,
                          max_model_len=None, cpu_offload_gb=None) -> MemorySettings:
    """The memory stage's inputs, each checked: ``gpu_memory_gib`` > 0, ``gpu_memory_utilization`` in (0, 1]
    (vLLM's ``CacheConfig`` field), ``max_model_len`` a positive integer (vLLM checks it against the config later),
    ``cpu_offload_gb`` >= 0 (vLLM's ``UVAOffloadConfig``); one UserInputError line naming the bad value."""
    gib = util = length = None
    if gpu_memory_gib is not None:
        gib = _size(gpu_memory_gib, "--gpu-memory-gib", "GiB of one GPU", above_zero=True)
    if gpu_memory_utilization is not None:
        util = _number(gpu_memory_utilization, "--gpu-memory-utilization", "a fraction in (0, 1], e.g. 0.92")
        if not 0 < util <= 1:
            raise UserInputError(f"--gpu-memory-utilization {gpu_memory_utilization!r} is outside (0, 1]; accepted: "
                                 f"a fraction in (0, 1], e.g. 0.92")
    if max_model_len is not None:
        length = int(_number(max_model_len, "--max-model-len", "a positive integer (tokens)", integer=True))
        if not 1 <= length <= MAX_TOKENS:
            raise UserInputError(f"--max-model-len {max_model_len!r} is outside 1..{MAX_TOKENS}; accepted: a positive "
                                 f"integer (tokens) up to {MAX_TOKENS}")
    offload = 0.0 if cpu_offload_gb is None else _size(cpu_offload_gb, "--cpu-offload-gb", "GiB per GPU")
    return MemorySettings(checkpoint_quantization(geometry, quantization), gib, util, length, offload)


def resolve(model, capability, kv_cache_dtype, tp, with_plugin, backend=None, *, hf_config_path=None,
            tokenizer=None, **memory) -> Request:
    """The checked :class:`Request`; ``hf_config_path`` / ``tokenizer``: a GGUF model's config and tokenizer folders
    (:func:`check_gguf_flags`); ``memory``: the keyword arguments of :func:`check_memory_settings`
    (``quantization``, ``gpu_memory_gib``, ``gpu_memory_utilization``, ``max_model_len``, ``cpu_offload_gb``)."""
    from ..models import load_model, require_vllm_model

    cap, gpu = parse_capability(capability)
    kv = check_cache_dtype(str(kv_cache_dtype))
    from .gguf import load_gguf
    from ..gguf.files import is_gguf

    if is_gguf(model):     # the config its metadata describes; its weight type sizes the memory stage
        geometry, memory["quantization"] = load_gguf(model, memory.get("quantization"), hf_config_path, tokenizer)
    else:
        geometry = load_model(model)
        require_vllm_model(geometry.raw_config, geometry.name)    # GLM-5.3-Flash: vLLM 0.33's registry only
        check_gguf_flags(model, hf_config_path, tokenizer)
    if isinstance(tp, bool) or not isinstance(tp, int):
        try:
            tp = cli_int(str(tp))
        except ValueError:
            raise UserInputError(f"tensor-parallel size {tp!r} is not an integer; accepted: a positive divisor "
                                 f"of num_attention_heads {geometry.num_attention_heads}") from None
    heads = geometry.heads_per_rank(tp)
    if gpu == "local":
        from ..machine import require_gpu

        require_gpu("capability 'local'", accepted_capabilities().replace("; or local", ""))
    settings = check_memory_settings(geometry, **memory)
    return Request(geometry=geometry, capability=cap, gpu=gpu, kv_cache_dtype=kv, tp=tp, heads_per_rank=heads,
                    dtype=_model_dtype(geometry), with_plugin=bool(with_plugin),
                    backend=check_backend(backend, with_plugin), memory=settings)


def check_gguf_flags(model, hf_config_path=None, tokenizer=None) -> None:
    """``--hf-config-path`` and ``--tokenizer`` are taken with a GGUF ``--model`` only: a preset, ``config.json`` or
    checkpoint directory is itself the config the diagnosis reads (pass the folder holding the config as ``--model``),
    and the diagnosis loads no tokenizer (vLLM's ``skip_tokenizer_init``), so either would be ignored. Raises
    :class:`UserInputError` naming the flag given with a model that is no GGUF."""
    given = [f"{flag} {v!r}" for flag, v in (("--hf-config-path", hf_config_path), ("--tokenizer", tokenizer))
             if v is not None]
    if given:
        raise UserInputError(f"{' and '.join(given)} would be ignored: --model {str(model)!r} is no GGUF (a preset, "
                             f"config.json or checkpoint directory is its own config, and the diagnosis loads no "
                             f"tokenizer); accepted: {' and '.join(g.split()[0] for g in given)} with a GGUF --model "
                             f"(FILE.gguf, any shard, DIR:QUANT), or the folder holding the config.json as --model")


def check_backend(backend, with_plugin: bool) -> str | None:
    """A forced backend (``--backend``) as vLLM's ``AttentionBackendEnum`` name, or None for vLLM's own choice
    (``None``/``auto``; an empty name is refused like any unknown one: issue 47, round 8). ``TRITON_MLA_SPARSE`` is
    the plugin's backend, which vLLM knows as ``CUSTOM``."""
    if backend is None or str(backend).strip().lower() == "auto":
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
