"""Stage 1 of vLLM's path, *config*: the engine configuration built the way ``vllm serve`` builds it.

``vllm serve MODEL --kv-cache-dtype X --tensor-parallel-size N [--attention-backend B]`` turns its arguments into
``EngineArgs`` and calls ``EngineArgs.create_engine_config()`` (``vllm/engine/arg_utils.py``). That loads the
checkpoint's ``config.json`` with vLLM's own loader (``vllm/transformers_utils/config.py``: vLLM's config classes,
else transformers'), inspects the architecture (``vllm/model_executor/models/registry.py``), runs the
per-architecture hook (``verify_and_update_config``, ``vllm/model_executor/models/config.py``: e.g.
``DeepseekV32ForCausalLM`` turns a ``bfloat16`` cache into ``auto``) and the platform's
``check_and_update_config``. :func:`engine_config` does exactly that on the probe platform, with
``load_format="dummy"`` and ``skip_tokenizer_init=True`` (no weights, no tokenizer are read).

Two things are changed for a machine without the target GPU, both recorded: the model-architecture inspection that
vLLM runs in a subprocess (``_run_in_subprocess``) runs in this process, under the probe platform; and the probe
platform reports as many GPUs as the tensor-parallel size asks for.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UserInputError
from . import probe as pr
from .request import Request


@contextlib.contextmanager
def model_dir(req: Request) -> Iterable[Path]:
    """A folder vLLM can load the model's config from: the checkpoint directory itself, or a temporary folder holding
    the preset's (or the given file's) ``config.json`` -- removed afterwards."""
    src = req.geometry.source
    if src is not None and Path(src).is_dir():
        yield Path(src)
        return
    tmp = Path(tempfile.mkdtemp(prefix="sparse_mla_model_"))
    try:
        (tmp / "config.json").write_text(json.dumps(req.geometry.raw_config))
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _in_process_inspection() -> Iterable[None]:
    """vLLM inspects a model class in a subprocess "to avoid initializing CUDA"; the subprocess would not see the
    probe platform, so it runs here (the inspection only imports the model module and reads class attributes)."""
    import vllm.model_executor.models.registry as reg

    saved = reg._run_in_subprocess
    reg._run_in_subprocess = lambda fn: fn()
    try:
        yield
    finally:
        reg._run_in_subprocess = saved


def vllm_error_text(e: BaseException) -> str:
    """vLLM's refusal in its own words. vLLM's configs are pydantic dataclasses, whose ``ValidationError`` hides the
    validator's exception: that exception's message is used, and for a bare ``assert`` the asserting line of vLLM's
    source with its place (e.g. ``assert is_v32`` in ``DeepseekV32ForCausalLM.verify_and_update_config``)."""
    import traceback

    errors = getattr(e, "errors", None)
    parts = []
    if callable(errors):
        try:
            items = errors()
        except Exception:  # noqa: BLE001
            items = []
        for item in items:
            inner = (item.get("ctx") or {}).get("error")
            if isinstance(inner, BaseException):
                msg = str(inner).strip()
                if not msg and inner.__traceback__ is not None:
                    last = traceback.extract_tb(inner.__traceback__)[-1]
                    where = last.filename.split("site-packages/")[-1]
                    msg = f"{type(inner).__name__}: `{(last.line or '').strip()}` ({where}:{last.lineno}, in {last.name})"
                parts.append(msg or type(inner).__name__)
            else:
                parts.append(str(item.get("msg", "")).strip())
    if parts:
        return f"{type(e).__name__}: " + "; ".join(p for p in parts if p)
    return (str(e).strip() or type(e).__name__).split("\n    For further information")[0]


def load_hf_config(path: Path, name: str):
    """vLLM's own loading of ``config.json`` (``vllm.transformers_utils.config.get_config``). A config vLLM cannot
    load is bad input: :class:`UserInputError` with vLLM's reason and what it accepts."""
    from vllm.transformers_utils.config import get_config

    try:
        return get_config(str(path), trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - vLLM/transformers raise ValueError, OSError, KeyError ...
        # on one line: transformers' validation errors put the reason on the line after "Validation error for field
        # 'x':"; the folder vLLM read may be a temporary copy of the user's config.json, named as the user named it
        first = (" ".join(str(e).replace(str(path), name).split()) or type(e).__name__)[:300]
        raise UserInputError(f"vLLM cannot load the config of model {name!r}: {first}; accepted: a Hugging Face "
                             f"config.json with a model_type vLLM or transformers knows (e.g. glm_moe_dsa, "
                             f"deepseek_v32)") from None


def engine_config(req: Request, path: Path, backend: str | None) -> tuple[Any, dict[str, Any]]:
    """``EngineArgs(...).create_engine_config()`` for ``req`` on the probe platform (which must be installed).

    Returns ``(vllm_config or None, info)``: ``info`` has ``args`` (the EngineArgs given), ``architecture`` and
    ``model_type`` as vLLM resolved them, ``notes`` (what vLLM changed or filled in: a missing ``architectures``, a
    config hook's change of the cache dtype, with vLLM's own log lines), ``cache_dtype`` (after the hooks), and
    ``error`` (vLLM's exception text when it refused the configuration: a *config* blocker).
    """
    from vllm.engine.arg_utils import EngineArgs

    args = dict(model=str(path), skip_tokenizer_init=True, load_format="dummy", kv_cache_dtype=req.kv_cache_dtype,
                tensor_parallel_size=req.tp, trust_remote_code=False)
    if backend is not None:
        args["attention_backend"] = backend
    info: dict[str, Any] = {"args": {k: v for k, v in args.items() if k != "model"}, "notes": []}
    hf = load_hf_config(path, req.geometry.name)
    if not req.geometry.raw_config.get("architectures"):
        info["notes"].append(f"config.json has no architectures; vLLM resolves the architecture from model_type "
                             f"{getattr(hf, 'model_type', None)!r}")
    with _in_process_inspection(), pr.collect_logs(("vllm.model_executor.models.config", "vllm.config")) as logged:
        try:
            vc = EngineArgs(**args).create_engine_config()
        except Exception as e:  # noqa: BLE001 - vLLM's own refusal of the configuration
            info["error"] = vllm_error_text(e)
            info["hf_config_type"] = type(hf).__name__
            return None, info
    mc = vc.model_config
    info.update(architecture=mc.architecture, model_type=getattr(mc.hf_config, "model_type", None),
                hf_config_type=type(mc.hf_config).__name__, cache_dtype=vc.cache_config.cache_dtype,
                dtype=str(mc.dtype).replace("torch.", ""), use_mla=bool(mc.use_mla),
                index_topk=getattr(mc.hf_config, "index_topk", None))
    if vc.cache_config.cache_dtype != req.kv_cache_dtype:
        from vllm.model_executor.models.config import MODELS_CONFIG_MAP

        hook = MODELS_CONFIG_MAP.get(mc.architecture)
        who = f"{hook.__name__}.verify_and_update_config" if hook is not None else "vLLM's config"
        info["notes"].append(f"{who} changed kv_cache_dtype {req.kv_cache_dtype} -> {vc.cache_config.cache_dtype}")
    info["vllm_log"] = [m for m in logged if "kv-cache" in m.lower() or "kv cache" in m.lower()]
    return vc, info
