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
import re
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
        return _collapse_lists(f"{type(e).__name__}: " + "; ".join(p for p in parts if p))
    return _collapse_lists((str(e).strip() or type(e).__name__).split("\n    For further information")[0])


def raised_where(e: BaseException) -> str:
    """Where in vLLM (or transformers) ``e`` was raised: `` (vllm/.../file.py:LINE, in FUNC: `source line`)`` from the
    innermost frame of either package, or ``""`` where none is in the traceback. A ``KeyError: 'factor'`` alone does
    not say which dictionary vLLM read; the line does."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if "site-packages/vllm/" in f.filename
              or "site-packages/transformers/" in f.filename] if e.__traceback__ is not None else []
    if not frames:
        return ""
    f = frames[-1]
    return f" ({f.filename.split('site-packages/')[-1]}:{f.lineno}, in {f.name}: `{(f.line or '').strip()[:160]}`)"


def rope_hint(e: BaseException, cfg: dict[str, Any] | None) -> str:
    """Where vLLM's rotary-embedding code, or a line of its model code that reads the rope settings, raised a
    ``KeyError`` for a key the config's rope settings lack (``get_rope`` reads ``factor`` or
    ``original_max_position_embeddings`` for any ``rope_type`` but ``"default"``; vLLM 0.34's DeepSeek-V3.2 attention
    reads ``rope_parameters["factor"]``):
    ``"; config.json's rope_parameters (rope_type 'banana') has no 'factor', which vLLM reads for that rope type"``,
    naming the config's value, not vLLM's line alone; ``""`` for any other exception."""
    import traceback

    if not isinstance(e, KeyError) or not e.args or not isinstance(cfg, dict) or e.__traceback__ is None:
        return ""
    if not any("rotary_embedding" in f.filename or "rope_parameters" in (f.line or "") or "rope_scaling" in
               (f.line or "") for f in traceback.extract_tb(e.__traceback__)):
        return ""       # (vLLM 0.34's DeepSeek-V3.2 attention reads rope_parameters["factor"] itself)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    for key in ("rope_parameters", "rope_scaling"):
        rope = text.get(key)
        if isinstance(rope, dict) and e.args[0] not in rope:
            kind = rope.get("rope_type", rope.get("type", "default"))
            return (f"; config.json's {key} (rope_type {kind!r}) has no {e.args[0]!r}, which vLLM reads for that rope "
                    f"type; accepted: rope_type 'default', or the keys its rope type takes (YaRN: factor, "
                    f"original_max_position_embeddings)")
    return ""


#: A list in vLLM's message longer than this many characters (its model registry's 250-odd architectures: 18 KB) is
#: shown by its first items and its count.
LONG_LIST_CHARS = 1000


def _collapse_lists(msg: str) -> str:
    """``msg`` with every list longer than :data:`LONG_LIST_CHARS` (``[...]`` or ``dict_keys([...])``) cut to its
    first 5 items and its length: ``['A', 'B', ... (250 in all)]``."""
    import re

    def cut(m):
        items = [i.strip() for i in m.group(2).split(",") if i.strip()]
        return f"{m.group(1) or ''}[{', '.join(items[:5])}, ... ({len(items)} in all)]{')' if m.group(1) else ''}"

    return re.sub(r"(dict_keys\()?\[([^\[\]]{%d,})\]\)?" % LONG_LIST_CHARS, cut, msg)


def load_hf_config(path: Path, name: str):
    """vLLM's own loading of ``config.json`` (``vllm.transformers_utils.config.get_config``). A config vLLM cannot
    load is bad input: :class:`UserInputError` with vLLM's reason and what it accepts -- the field transformers
    refused, where its error names one (a validation error for a field, a ``KeyError`` of a letter a field holds),
    else a config of a model type vLLM or transformers knows."""
    from vllm.transformers_utils.config import get_config

    try:
        return get_config(str(path), trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - vLLM/transformers raise ValueError, OSError, KeyError ...
        # on one line: transformers' validation errors put the reason on the line after "Validation error for field
        # 'x':"; the folder vLLM read may be a temporary copy of the user's config.json, named as the user named it
        first = (" ".join(str(e).replace(str(path), name).split()) or type(e).__name__)[:300]
        field = None
        if isinstance(e, KeyError):          # transformers' lookup of a config value's part: say which value holds it
            held = _holding(path, e.args[0] if e.args else None)
            first, field = f"KeyError {first}{held}", held.split(" = ")[0].removeprefix(" (in ") or None
        field = field or next(iter(re.findall(r"[Vv]alidation error for field '([^']+)'", str(e))), None)
        pattern = _pattern_behind(path) if field == "indexer_types" else None
        if pattern is not None:      # transformers' indexer_types derived from the pattern: the key the user wrote
            first, field = f"{first} (transformers derives indexer_types from index_topk_pattern = {pattern!r})", \
                "index_topk_pattern"
        accepted = _accepted_config(field, "validation error" in str(e).lower())
        raise UserInputError(f"vLLM cannot load the config of model {name!r}: {first}; accepted: {accepted}") from None


def _accepted_config(field: str | None, validated: bool) -> str:
    """What :func:`load_hf_config` says is accepted: the field transformers refused where its error names one, values
    its config class validates where a validator of the whole class refused them, else a known model type (an
    unrecognised model, the only case where the model type is what to change)."""
    compare = "compare the config.json `sparse-mla make-checkpoint` writes"
    if field == "index_topk_pattern":       # GlmMoeDsaConfig: {"F": "full", "S": "shared"}[letter] (round 18, Y3)
        return (f"an index_topk_pattern of the letters F (full) and S (shared), which transformers' config class "
                f"maps to indexer_types, or a list ({compare})")
    if field:
        return (f"{'an' if field[:1].lower() in 'aeiou' else 'a'} {field} that transformers' config class takes, of "
                f"the type the error names ({compare})")
    if validated:
        return f"values that transformers' config class validates, as the error says ({compare})"
    return "a Hugging Face config.json with a model_type vLLM or transformers knows (e.g. glm_moe_dsa, deepseek_v32)"


def _pattern_behind(path: Path):
    """The ``index_topk_pattern`` of the config.json in ``path`` where it has no ``indexer_types`` (transformers'
    ``GlmMoeDsaConfig`` then derives that field from the pattern, and its validation error names the field the user
    never wrote: breaker round 19, U19-2), else None."""
    text = _text_config_of(path) or {}
    return text.get("index_topk_pattern") if text.get("indexer_types") is None else None


def _text_config_of(path: Path) -> dict | None:
    """The text config of the config.json in ``path`` for the refusal's hints, None where it cannot be read."""
    from ..files import read_json
    from ..models import text_config

    try:
        cfg = read_json(path / "config.json")
    except Exception:  # noqa: BLE001 - only a hint
        return None
    return text_config(cfg) if isinstance(cfg, dict) else None


def _holding(path: Path, key) -> str:
    """`` (in FIELD = VALUE)`` for the config.json fields whose text value holds ``key`` (a KeyError's key, e.g. the
    'X' of index_topk_pattern "FX"), else ""."""
    text = _text_config_of(path)
    if not isinstance(key, str) or not key or text is None:
        return ""
    held = [f"{k} = {v!r}" for k, v in text.items() if isinstance(v, str) and key in v and k != "model_type"]
    patterns = [h for h in held if h.split(" = ")[0].endswith(("pattern", "types"))]   # a pattern's letters first
    return f" (in {', '.join((patterns or held)[:2])})" if held else ""


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
    with _in_process_inspection(), plugin_config_hooks(req.with_plugin), \
            pr.collect_logs(("vllm.model_executor.models.config", "vllm.config")) as logged:
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


@contextlib.contextmanager
def plugin_config_hooks(with_plugin: bool) -> Iterable[None]:
    """vLLM's per-architecture config hooks as the diagnosis asks for them: without the plugin, the plugin's
    ``indexer_types`` hook (:mod:`sparse_mla.vllm_plugin.indexer_types`, an entry of vLLM's ``MODELS_CONFIG_MAP``)
    is taken out for the duration, so that stock vLLM's reading of the config is diagnosed even in a process where the
    plugin was registered; with it, the config is read as ``register()`` left vLLM."""
    if with_plugin:
        yield
        return
    from ..vllm_plugin.indexer_types import suspended

    with suspended():
        yield


@contextlib.contextmanager
def config_hooks_restored() -> Iterable[None]:
    """What the plugin's ``register()`` adds to vLLM's ``MODELS_CONFIG_MAP`` inside a probe (the ``indexer_types``
    hook) taken out again afterwards, unless it was there before (the probe's other undo steps are
    :func:`sparse_mla.diagnose.probe.stock_selection`'s)."""
    from ..vllm_plugin.indexer_types import hooked, uninstall_indexer_types_hook

    before = hooked()
    try:
        yield
    finally:
        if not before:
            uninstall_indexer_types_hook()


def indexer_layers(vc, tp: int) -> list[int] | None:
    """The decoder layers vLLM builds a DSA indexer in, by vLLM's own rule: its model built on the meta device for
    the engine configuration ``vc`` (:func:`~sparse_mla.diagnose.meta_model.rank_model`, unquantized, no attention
    kernels) and the layers holding ``self_attn.indexer.*`` parameters (``DeepseekV2MLAAttention.__init__`` decides
    inline from ``index_topk_pattern`` / ``index_topk_freq`` / ``index_skip_topk_offset``: there is no function to
    call). ``[]`` for a dense model; None where vLLM's model code refuses to build (the memory stage says why)."""
    from .meta_model import rank_model

    hf = vc.model_config.hf_config
    if not hasattr(hf, "index_topk"):
        return []
    key = ("indexer_layers", json.dumps(hf.to_dict(), sort_keys=True, default=str))
    try:
        rank = rank_model(vc, tp=tp, quant_config=None, backend_cls=None, key=key, weights_only=True)
    except Exception:  # noqa: BLE001 - vLLM's model code refuses the configuration; reported by the memory stage
        return None
    return sorted({p.layer for p in rank.params if p.layer is not None and ".self_attn.indexer." in p.name})


def checkpoint_tensor_names(source: str | None) -> set[str] | None:
    """The tensor names of the checkpoint folder ``source`` (or the folder of a ``config.json``), read from
    ``model.safetensors.index.json``'s ``weight_map`` or else from the ``*.safetensors`` headers -- no tensor is read.
    None where there is no such folder or no weights in it (a preset, a lone config, a GGUF file)."""
    if source is None:
        return None
    d = Path(source)
    d = d if d.is_dir() else d.parent if d.name == "config.json" else None
    if d is None:
        return None
    index = d / "model.safetensors.index.json"
    if index.is_file():
        from ..files import read_json

        weight_map = read_json(index, accepted="a JSON object with a 'weight_map' of tensor name -> shard file")
        names = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(names, dict):
            raise UserInputError(f"{str(index)!r} has no 'weight_map' object; accepted: a JSON object with a "
                                 f"'weight_map' of tensor name -> shard file")
        return set(names)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    names: set[str] = set()
    for f in files:
        try:
            with safe_open(str(f), framework="np") as sf:   # the header only
                names.update(sf.keys())
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise UserInputError(f"cannot read the header of {str(f)!r} ({type(e).__name__}: {e}); accepted: a "
                                 f"safetensors file") from None
    return names


def indexer_layers_stage(req: Request, vc, cfg: dict[str, Any]) -> dict[str, Any]:
    """``{"layers", "blocker"}``: :func:`indexer_layers` for ``vc`` (None when vLLM refused the config) and, for a
    checkpoint folder whose tensors (:func:`checkpoint_tensor_names`) lack the indexer of a layer vLLM builds one in,
    what vLLM's loader does then (``vllm/model_executor/model_loader/default_loader.py``): it stops with "Following
    weights were not initialized from checkpoint" for an unquantized checkpoint; a quantized one loads without that
    check and runs those indexers on uninitialized weights. A config with ``indexer_types`` that disagrees with the
    layers vLLM builds gets a line in ``cfg["notes"]``."""
    out: dict[str, Any] = {"layers": None, "blocker": None}
    if vc is None:
        return out
    layers = out["layers"] = indexer_layers(vc, req.tp)
    hf = vc.model_config.hf_config
    types = getattr(hf, "indexer_types", None)
    if not layers or not isinstance(types, (list, tuple)):
        declared_shared = []
    else:
        declared_shared = [i for i in layers if i < len(types) and types[i] == "shared"]
    names = checkpoint_tensor_names(req.geometry.source)
    missing = [] if names is None or not layers else \
        [i for i in layers if not any(n.startswith(f"model.layers.{i}.self_attn.indexer.") for n in names)]
    from ..vllm_plugin.indexer_types import pattern_from_indexer_types

    pattern = pattern_from_indexer_types(types)
    fix = (f"; accepted: the sparse_mla plugin (--with-plugin; it gives vLLM index_topk_pattern {pattern!r}) or "
           f"--hf-overrides '{{\"index_topk_pattern\": \"{pattern}\"}}'") if pattern and declared_shared \
        and pattern.startswith("F") else ""     # a shared layer 0 is blocked with the plugin too (below)
    them = "it" if len(declared_shared) == 1 else "them"
    why = (f" (config.json's indexer_types declares {them} shared, and vLLM 0.26 reads only index_topk_pattern / "
           f"index_topk_freq)" if declared_shared else "")
    from ..models import text_config
    from ..vllm_plugin.indexer_types import VLLM_KEYS

    raw = text_config(req.geometry.raw_config)
    twice = None
    if layers is not None:          # vLLM built the model (0.34 refuses another length: the memory stage says so)
        _pattern_length_note(hf, cfg, layers, raw.get("indexer_types"))
        twice = _twice_declared(raw, layers, getattr(hf, "num_hidden_layers", None))
        for note in (twice, _gguf_indexers_unbuilt(req.geometry.source, layers, raw), _own_reading(hf, raw, layers)):
            if note:
                cfg.setdefault("notes", []).append(note)
    shares = any(raw.get(k) is not None for k in (*VLLM_KEYS, "indexer_types"))
    if layers == [] and hasattr(hf, "index_topk") and not shares:   # a sharing that shares every layer: below (U19-1)
        out["blocker"] = _no_indexer_blocker(vc)
        return out
    first = _first_mla_layer(hf)
    if layers is not None and hasattr(hf, "index_topk") and first not in layers:
        # DeepseekV2MLAAttention.__init__ builds layer 0 shared without complaint; DeepseekV2Model allocates the top-k
        # buffer with torch.empty, and layer 0 reads it before any layer has written it
        out["blocker"] = ("the config's top-k sharing makes layer 0 shared (vLLM builds no DSA indexer there): vLLM "
                          "builds the model, and layer 0 then attends to the token positions of a top-k buffer no "
                          "layer has written yet (torch.empty in DeepseekV2Model), i.e. undefined ones; accepted: a "
                          "sharing whose layer 0 is full (index_topk_pattern / indexer_types starting with F / "
                          "\"full\"), as make-checkpoint and the reference forward require")
        return out
    if missing:
        head = (f"vLLM builds a DSA indexer in {_layers(missing)}{why}, but the checkpoint has no indexer tensors for "
                f"{'it' if len(missing) == 1 else 'them'}")
        # vLLM's DefaultModelLoader.load_weights checks that every parameter was loaded only for an unquantized model
        # (default_loader.py: default_enable_weights_track = model_config.quantization is None; inline there)
        quant = vc.model_config.quantization
        out["blocker"] = (f"{head}: vLLM's loader stops with \"Following weights were not initialized from "
                          f"checkpoint\" for those indexer parameters (model_loader/default_loader.py){fix}"
                          if quant is None else
                          f"{head}: the engine starts, but vLLM checks that every weight was loaded only for "
                          f"unquantized checkpoints (model_loader/default_loader.py), so with quantization {quant!r} "
                          f"those indexers run on uninitialized weights and select arbitrary tokens{fix}")
    elif declared_shared and not twice:        # said once: the two declarations' line names these layers
        cfg.setdefault("notes", []).append(
            f"vLLM builds and runs an indexer in {_layers(declared_shared)}; the model declares {them} shared "
            f"(reusing the previous full layer's top-k) in indexer_types, which vLLM 0.26 does not read"
            f"{fix.replace('; accepted:', '; to run it as declared:')}")
    return out


def mla_layers(layer_types) -> list[int]:
    """The decoder layers with MLA attention where ``layer_types`` (GLM-5.3-Flash: ``linear_attention`` KDA layers,
    every 4th ``indexed_attention``) names each layer: those that are not linear (vLLM's ``_is_kda_layer`` false)."""
    return [i for i, t in enumerate(layer_types) if t != "linear_attention"]


def _first_mla_layer(hf) -> int:
    """The first decoder layer with MLA attention: 0, or the first of :func:`mla_layers`."""
    types = getattr(hf, "layer_types", None)
    if isinstance(types, (list, tuple)):
        return next(iter(mla_layers(types)), 0)
    return 0


def _no_indexer_blocker(vc) -> str:
    """A DSA config (``index_topk``) whose model class, as vLLM resolves its ``architectures``, builds no indexer in
    any layer (e.g. ``LlamaForCausalLM`` over a ``glm_moe_dsa`` config): the class vLLM builds, and the one
    transformers names for the model type where it names one."""
    mc = vc.model_config
    mt = getattr(mc.hf_config, "model_type", None)
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as names

        want = names.get(mt)
    except ImportError:
        want = None
    return (f"architectures {list(mc.architectures)} makes vLLM build {mc.architecture} (its model registry), which "
            f"builds no DSA indexer in any layer for this {mt} config with index_topk {mc.hf_config.index_topk}: "
            f"the checkpoint's MLA and indexer tensors have no place in it; accepted: "
            f"{want or 'the architecture of the model type'} (transformers' class for model_type {mt!r})")


def _pattern_length_note(hf, cfg: dict[str, Any], layers: list[int], declared) -> None:
    """A top-k sharing with another entry count than the layers (:func:`sparse_mla.models.check_sharing_length`,
    make-checkpoint's rule): the ``indexer_types`` config.json declares (``declared``; transformers derives one from a
    pattern too; vLLM 0.26 reads none, the plugin's hook gives it vLLM as its pattern: round 10, t3 was "ok" with no
    word) named with the ``layers`` vLLM builds indexers in; an
    ``index_topk_pattern``: vLLM reads one letter per layer and builds a full indexer in every layer past its end
    (``DeepseekV2MLAAttention.__init__``, ``deepseek_v2.py``). A note in ``cfg["notes"]``, not a blocker (the engine
    starts)."""
    from ..models import check_sharing_length
    from ..vllm_plugin.indexer_types import pattern_from_indexer_types

    pat, n = getattr(hf, "index_topk_pattern", None), getattr(hf, "num_hidden_layers", None)
    types = pattern_from_indexer_types(declared)
    if not isinstance(n, int):
        return
    if isinstance(types, str):
        try:
            check_sharing_length(types, n, "indexer_types")
        except UserInputError as e:
            built = _layers(layers) if layers else "no layer"
            cfg.setdefault("notes", []).append(f"{e}; make-checkpoint and the reference forward (launch --parity) "
                                               f"refuse it; vLLM builds DSA indexers in {built} from this config")
            return                      # the plugin's hook gave vLLM these letters as its pattern: said once
    if not isinstance(pat, str) or len(pat) == n:
        return
    what = (f"vLLM builds a full indexer in {_layers(list(range(len(pat), n)))}, past its end" if len(pat) < n else
            f"vLLM reads its first {n} and ignores the other {len(pat) - n}")
    cfg.setdefault("notes", []).append(
        f"index_topk_pattern {pat!r} has {len(pat)} letter{'s' if len(pat) != 1 else ''} for {n} layers: {what} "
        f"(DeepseekV2MLAAttention, deepseek_v2.py; the reference forward reads it so too); make-checkpoint writes one "
        f"letter per layer")


def _own_reading(hf, raw: dict[str, Any], layers: list[int]) -> str | None:
    """A top-k sharing vLLM 0.26 reads its own way (breaker round 18, Y3: these were refused as bad input while vLLM
    starts): an ``index_topk_pattern`` that is a list or holds entries other than ``F``/``S`` (vLLM reads a layer as
    shared only where its entry is ``"S"``), an ``index_topk_freq`` / ``index_skip_topk_offset`` that is not an
    integer or a freq below 1 (vLLM takes ``max(l - offset + 1, 0) % freq`` as Python computes it). The note names
    the ``layers`` vLLM builds DSA indexers in (its own model, :func:`indexer_layers`) and, where transformers derived
    other ``indexer_types`` from the same keys (``GlmMoeDsaConfig`` reads a freq below 1 as 1), that the two differ;
    None for what make-checkpoint writes (F/S letters, integer freq from 1 and offset)."""
    pat, freq, off = (raw.get(k) for k in ("index_topk_pattern", "index_topk_freq", "index_skip_topk_offset"))
    odd = []
    if pat is not None and (not isinstance(pat, str) or set(pat) - {"F", "S"}):
        odd.append(f"index_topk_pattern {pat!r} (vLLM reads a layer as shared only where its entry is 'S')")
    if pat is None and freq is not None and (isinstance(freq, bool) or not isinstance(freq, int) or freq < 1):
        odd.append(f"index_topk_freq {freq!r} (vLLM: layer l full iff max(l - offset + 1, 0) % {freq!r} == 0)")
    if pat is None and off is not None and (isinstance(off, bool) or not isinstance(off, int)):
        odd.append(f"index_skip_topk_offset {off!r}")
    n = getattr(hf, "num_hidden_layers", None)
    if not odd or not isinstance(n, int):
        return None
    built = [i for i in layers if i < n]
    note = (f"{'; '.join(odd)}: vLLM builds DSA indexers in {_layers(built) if built else 'no layer'} of {n} from "
            f"this config; make-checkpoint writes F/S letters and integers")
    from ..vllm_plugin.indexer_types import pattern_from_indexer_types

    derived = pattern_from_indexer_types(getattr(hf, "indexer_types", None)) if raw.get("indexer_types") is None \
        else None
    vllm = "".join("F" if i in built else "S" for i in range(n))
    if derived is not None and len(derived) == n and derived != vllm:
        note += (f"; transformers' {type(hf).__name__} derives indexer_types {derived} from it, vLLM builds {vllm}: "
                 f"the two run different models")
    return note


def _twice_declared(raw: dict[str, Any], layers: list[int], n) -> str | None:
    """A config.json declaring its top-k sharing twice, ``indexer_types`` and ``index_topk_pattern`` /
    ``index_topk_freq`` / ``index_skip_topk_offset``, with ``indexer_types`` (``n`` entries) other than the ``layers``
    vLLM builds indexers in (:func:`sparse_mla.models.sharing_disagreement`, the reference forward's rule; round 11,
    th: pattern FS with indexer_types [full, full] was "ok" with no word): the note, else None. An ``indexer_types``
    of another length is :func:`_pattern_length_note`'s."""
    from ..models import sharing_disagreement
    from ..vllm_plugin.indexer_types import VLLM_KEYS, pattern_from_indexer_types

    types = pattern_from_indexer_types(raw.get("indexer_types"))
    if types is None or not isinstance(n, int) or len(types) != n or all(raw.get(k) is None for k in VLLM_KEYS):
        return None
    why = sharing_disagreement(types, "".join("F" if i in layers else "S" for i in range(n)))
    if why is None:
        return None
    given = ", ".join(f"{k} {raw[k]!r}" for k in VLLM_KEYS if raw.get(k) is not None)
    built = _layers([i for i in layers if i < n]) if any(i < n for i in layers) else "no layer"
    return (f"{why} ({given}): vLLM builds DSA indexers in {built} from this config; make-checkpoint writes one of "
            f"them and the reference forward (launch --parity) refuses both disagreeing")


def _gguf_indexers_unbuilt(source, layers: list[int], raw: dict[str, Any]) -> str | None:
    """A GGUF model (``source``, :func:`sparse_mla.diagnose.gguf.indexer_tensor_layers`) holding DSA indexer weights for
    layers vLLM builds no indexer in (``layers``, vLLM's own answer) by the top-k sharing its config.json (``raw``)
    declares (round 12, q11/q12: "config ok" with nothing said): the note, else None. llama.cpp's glm-dsa layout has
    no key for sharing (every layer carries and runs its own indexer: make-checkpoint refuses --gguf with sharing);
    vLLM's ``DeepseekV2ForCausalLM.load_weights`` drops the weights of a layer without an indexer, and that layer
    reuses the previous full layer's top-k. The other way, a layer vLLM builds an indexer in without the GGUF's
    tensors, is refused before (:func:`sparse_mla.gguf.tensors.check_indexer_tensors`)."""
    from ..vllm_plugin.indexer_types import VLLM_KEYS
    from .gguf import indexer_tensor_layers

    held = indexer_tensor_layers(source)
    unbuilt = [i for i in held or () if i not in layers]
    if not unbuilt:
        return None
    said = ", ".join(f"{k} {raw[k]!r}" for k in (*VLLM_KEYS, "indexer_types") if raw.get(k) is not None)
    return (f"the GGUF holds DSA indexer weights for {_layers(unbuilt)}, where vLLM builds no indexer by the "
            f"config.json's top-k sharing ({said or 'as vLLM reads it'}): vLLM drops those weights "
            f"(DeepseekV2ForCausalLM.load_weights) and reuses the previous full layer's top-k there, while the "
            f"GGUF's model (llama.cpp's glm-dsa layout: no sharing key, every layer runs its own indexer) uses them")


def _layers(layers: list[int]) -> str:
    """``[1]`` -> ``"layer 1"``, ``[1, 2, 3, 5]`` -> ``"layers 1-3, 5"`` (78-layer lists stay one line)."""
    return f"layer{'s' if len(layers) > 1 else ''} {_ranges(layers)}"


def _ranges(layers: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    parts, start = [], None
    for i, x in enumerate(layers):
        start = x if start is None else start
        if i + 1 == len(layers) or layers[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(parts)
