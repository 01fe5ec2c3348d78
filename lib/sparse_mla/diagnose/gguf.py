"""``sparse-mla diagnose --model FILE.gguf``: the config a GLM-5 GGUF describes, and the GGUF wall of the config stage.

A GGUF file carries its config as metadata; :func:`load_gguf` reads it with gguf-py and builds the Hugging Face
``glm_moe_dsa`` config from it (:func:`sparse_mla.gguf.metadata.config_from_gguf`, the inverse of llama.cpp's
converter), which the config stage then hands to vLLM's own ``EngineArgs.create_engine_config()``. A GGUF
without the DSA indexer tensors is refused by name (it would run dense).

Whether vLLM can load the file at all is the *GGUF wall* (:func:`gguf_wall`), asked of the code that decides it
(the weights adapter's part, :func:`adapter_wall`, also of a model with no file: ``--what-to-run``'s GGUF rows):

* stock vLLM 0.26: no ``gguf`` load format in ``model_loader._LOAD_FORMAT_TO_MODEL_LOADER`` and no ``gguf``
  quantization method (in-tree GGUF support was removed, vllm-project/vllm#39583);
* with ``vllm-gguf-plugin`` (installed, it is a vLLM general plugin and loads by itself): its own weights adapter for
  the config (``get_weights_adapter``; the default one raises "Unknown gguf model_type: glm_moe_dsa": gguf-py names
  the architecture ``glm-dsa``);
* with ours (``--with-plugin``): :class:`~sparse_mla.vllm_plugin.gguf_adapter.GlmDsaGGUFAdapter`'s load plan, the
  one the engine runs (shards, LM head, every tensor of the model mapped and present).

The record's ``checkpoint`` is ``{"format": "safetensors" | "gguf", "quantization": ...}`` plus, for a GGUF, its
first file, every file (a split model's shards, :mod:`sparse_mla.gguf.files`), file type, tensor types,
the wall, where vLLM reads the config and tokenizer from (beside the file, or ``--hf-config-path`` / ``--tokenizer``:
:mod:`sparse_mla.diagnose.gguf_config`) and the ``vllm serve`` line diagnosed.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import UserInputError
from ..models import text_config
from ..gguf import files as gguf_files
from ..gguf.files import read_model
from ..gguf.metadata import config_from_gguf, file_type
from ..gguf.tensors import check_indexer_tensors, tensor_problem


#: Why vllm-gguf-plugin cannot build a GGUF's config without a ``config.json`` beside it or named by a flag.
NO_CONFIG_BESIDE = ("no config.json beside the GGUF and no --hf-config-path: vllm-gguf-plugin reads the model's config "
                    "from the GGUF's folder where neither --hf-config-path nor --tokenizer names another; accepted: a "
                    ".gguf file in a folder with the model's config.json and tokenizer (sparse-mla make-checkpoint OUT "
                    "--gguf Q8_0), or --hf-config-path DIR (and --tokenizer DIR) for the folder that has them")


def config_record(first_file: Path, metadata_config: dict, hf_config_path=None, tokenizer=None) -> dict[str, Any]:
    """``{"config_json": the config.json vLLM builds the model from (None: none beside the GGUF), "config_source":
    {"folder", "flag", "decided_by", "differs": where the config.json sets what the metadata states otherwise and
    vLLM takes it (:data:`~sparse_mla.diagnose.gguf_config.SETTINGS`), else None}, "tokenizer": the folder vLLM loads
    the tokenizer from, "tokenizer_error": vLLM's refusal to load a tokenizer from the GGUF's own folder (None: it
    loads one, or a flag named the folder), "serve_flags": the vllm serve arguments for them}`` of a GGUF whose first
    file is ``first_file`` (:mod:`sparse_mla.diagnose.gguf_config`); ``hf_config_path`` / ``tokenizer`` as given
    (folders). Raises :class:`UserInputError` for a flag's value that is no folder here or holds no config.json or
    tokenizer it must, and a config.json that describes another model than the metadata."""
    from .gguf_config import (HF_CONFIG_PATH, TOKENIZER, check_folder, check_tokenizer, config_json, config_source,
                              serve_flags)

    given = {HF_CONFIG_PATH: hf_config_path, TOKENIZER: tokenizer}
    hf_dir, tok_dir = (None if v is None else check_folder(v, flag) for flag, v in given.items())
    folder, flag, how = config_source(first_file, hf_dir, tok_dir)
    cfg, differs = config_json(first_file, folder, flag, given.get(flag), metadata_config)
    tok_folder, tok_flag = (tok_dir, TOKENIZER) if tok_dir is not None else (folder, flag)
    return {"config_json": cfg, "config_source": {"folder": str(folder), "flag": flag, "decided_by": how,
                                                  "differs": differs},
            "tokenizer": str(tok_folder), "tokenizer_error": check_tokenizer(tok_folder, tok_flag, given.get(tok_flag)),
            "serve_flags": serve_flags(first_file.parent, hf_config_path, tokenizer)}


def read_gguf(path: str | os.PathLike, hf_config_path=None, tokenizer=None, model=None) -> dict[str, Any]:
    """``{"path": the first file, "files": every file's name, "discovery", "file_type", "tensor_types": {type:
    count}, "tensors": [names], "tensor_sizes": [(name, type, values, bytes)] as gguf-py reads them, "config": HF
    config dict from the metadata, "config_json", "config_source", "tokenizer", "tokenizer_error", "serve_flags",
    "vllm_config" and "quantization_config_overridden" (:func:`vllm_config`), "tensor_problem"}``
    (:func:`config_record`: the config.json beside the file, or in the folder ``hf_config_path`` / ``tokenizer``
    name, as ``vllm serve --hf-config-path`` / ``--tokenizer`` take them) of a
    ``glm-dsa`` GGUF ``--model`` (a file, any shard of a split model, or ``DIR:QUANT``), read as vllm-gguf-plugin
    reads it (:func:`sparse_mla.gguf.files.read_model`, or ``model``, what it returned for ``path``: each file is
    read once): the metadata from the first shard, the tensors from all. Raises
    :class:`UserInputError` for a missing shard or file, a tensor held by two shards, a file gguf-py cannot read,
    another architecture, missing metadata, missing indexer tensors (over all shards), a flag's folder that is missing or has no config.json, or a
    config.json that describes another model (:func:`config_record`)."""
    from ..extras import require

    require("diagnose --model FILE.gguf", "gguf")
    files, discovery, readers = read_model(path) if model is None else model
    tensors = [t for r in readers for t in r.tensors]
    names = [t.name for t in tensors]
    cfg = config_from_gguf(readers[0], names)   # the metadata: the first shard's; the tensors: every shard's
    check_indexer_tensors(names, cfg["num_hidden_layers"], str(path))
    types = Counter(t.tensor_type.name for t in tensors)
    info = {"model": str(path), "path": str(files[0]), "files": [f.name for f in files], "discovery": discovery,
            "file_type": file_type(readers[0]), "tensor_types": dict(sorted(types.items())), "tensors": names,
            "tensor_sizes": [(t.name, t.tensor_type.name, int(t.n_elements), int(t.n_bytes)) for t in tensors],
            "config": cfg, **config_record(files[0], cfg, hf_config_path, tokenizer)}
    info["vllm_config"], info["quantization_config_overridden"] = vllm_config(info)   # read once, used by all
    info["tensor_problem"] = tensor_problem(readers, text_config(info["vllm_config"]), str(path), files)
    return info


def vllm_config(info: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``(config, note)``: the config vLLM builds a GGUF model from -- the ``config.json`` it reads (beside the file
    or named by a flag: :func:`config_record`), else the one the GGUF's metadata describes (a folder without one is
    the folder wall's) -- and, where that config.json has a ``quantization_config`` (an FP8 checkpoint's, copied
    beside its GGUF), why it is not the model's: vllm-gguf-plugin sets ``--quantization gguf`` and its
    ``GGUFConfig.override_quantization_method`` then takes the place of the config's method (asked where the
    plugin is importable; its rule applied here where not). The returned config has no ``quantization_config``."""
    cfg = info.get("config_json")
    if not isinstance(cfg, dict):
        return info["config"], None
    text = text_config(cfg)
    qc = text.get("quantization_config", cfg.get("quantization_config"))
    if qc is None:
        return cfg, None
    decide = gguf_files.plugin_object("quantization.config", "GGUFConfig")
    method = decide.override_quantization_method(qc if isinstance(qc, dict) else {}, "gguf") if decide else "gguf"
    if method != "gguf":
        return cfg, None                                   # the plugin keeps it: vLLM's config stage judges it
    drop = {k: v for k, v in cfg.items() if k != "quantization_config"}
    if isinstance(drop.get("text_config"), dict):
        drop["text_config"] = {k: v for k, v in drop["text_config"].items() if k != "quantization_config"}
    quant = qc.get("quant_method") if isinstance(qc, dict) else qc
    who = "GGUFConfig.override_quantization_method" if decide else "its GGUFConfig's rule, applied here"
    return drop, (f"config.json's quantization_config (quant_method {quant!r}) does not apply: vllm-gguf-plugin loads "
                  f"the GGUF with --quantization gguf ({who})")


def load_gguf(model, quantization: str | None = None, hf_config_path=None, tokenizer=None):
    """``(geometry, quantization)`` for ``diagnose --model FILE.gguf [--hf-config-path DIR] [--tokenizer DIR]``: the
    geometry of the config the GGUF's metadata describes (``source`` the file; the :func:`read_gguf` record kept in
    :data:`GGUF_FILES`) and, where ``--quantization`` is not given, the memory stage's ``gguf-<type>`` for the file's
    weight type (``Q4_K_M`` and ``Q4_K_S`` as ``gguf-q4_k``; a file type that names no tensor type, ``IQ3_M``, as
    the type holding most of its bytes). The memory stage sizes each tensor of the file at its own type
    (:mod:`.gguf_memory`); the name is the record's label."""
    from dataclasses import replace

    from ..models import geometry_from_config
    from .quantizations import QUANTIZATIONS

    info = read_gguf(model, hf_config_path, tokenizer)
    geometry = replace(geometry_from_config(info["vllm_config"], str(model)), source=info["path"])
    GGUF_FILES[info["path"]] = info
    base = info["file_type"].split("_")
    name = "gguf-" + "_".join(base[:2] if len(base) > 2 else base).lower()
    if name not in QUANTIZATIONS:
        name = _main_type(info)
    if quantization is None:
        quantization = name                                  # a QUANTIZATIONS name either way (_main_type's too)
    elif str(quantization).lower() != name:
        raise UserInputError(f"--quantization {quantization!r} contradicts the GGUF's own weight type "
                             f"{info['file_type']} ({info['path']!r}); accepted: {name}, or no --quantization (the "
                             f"file's type is read from it)")
    return geometry, quantization


def _main_type(info: dict[str, Any]) -> str:
    """``gguf-<type>`` of the tensor type that holds most of the bytes of a :func:`read_gguf` record, among the
    memory stage's types (:data:`~sparse_mla.gguf.types.GGUF_TYPES`) other than F16/BF16; ``gguf-f16`` where none is."""
    from ..gguf.types import GGUF_TYPES

    held: dict[str, int] = {}
    for _, kind, _, nbytes in info["tensor_sizes"]:
        if kind in GGUF_TYPES and kind not in ("F16", "BF16"):
            held[kind] = held.get(kind, 0) + nbytes
    return "gguf-" + (max(held, key=held.get) if held else "F16").lower()


#: GGUF records read in this process, by path (:func:`load_gguf` -> :func:`checkpoint_record`).
GGUF_FILES: dict[str, dict[str, Any]] = {}


def indexer_tensor_layers(source) -> list[int] | None:
    """The main decoder layers (``blk.0`` .. ``blk.{num_hidden_layers - 1}`` of the GGUF's metadata) whose DSA indexer
    tensors (:data:`~sparse_mla.gguf.names.INDEXER_TENSORS`) the GGUF model ``source`` (its first file, as
    :func:`load_gguf` read it in this process) holds; None where ``source`` is no GGUF read here."""
    from ..gguf.names import INDEXER_TENSORS

    info = GGUF_FILES.get(str(source)) if source is not None else None
    if info is None:
        return None
    names = set(info["tensors"])
    return [i for i in range(int(info["config"]["num_hidden_layers"]))
            if any(f"blk.{i}.{t}" in names for t in INDEXER_TENSORS)]


def _hf_config(cfg: dict):
    from transformers import AutoConfig

    return AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})


#: How a user installs vllm-gguf-plugin with this workbook (the package installs from its checkout, as the README's).
INSTALL_GGUF = "pip install '.[gguf]' in this workbook's checkout"


def stock_wall() -> str | None:
    """vLLM's own GGUF support, as registered by vLLM itself (not by a plugin): None where it has a loader."""
    import vllm
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER

    loader = _LOAD_FORMAT_TO_MODEL_LOADER.get("gguf")
    if loader is not None and loader.__module__.startswith("vllm.") and "gguf" in QUANTIZATION_METHODS:
        return None
    formats = sorted(k for k, v in _LOAD_FORMAT_TO_MODEL_LOADER.items() if v.__module__.startswith("vllm."))
    return (f"vLLM {vllm.__version__} has no GGUF loader: load format 'gguf' is not among its own "
            f"({', '.join(formats)}) and 'gguf' is not a quantization method of its own (in-tree GGUF was removed, "
            f"vllm-project/vllm#39583); accepted: vllm-gguf-plugin ({INSTALL_GGUF})")


def _plugin_wall(info: dict, ours: bool) -> str | None:
    """:func:`adapter_wall` of a read GGUF ``info`` (:func:`read_gguf`): the config vLLM builds the model from --
    the config.json it reads (beside the GGUF or named by a flag), else the one the GGUF's metadata describes (a
    folder without one is the folder wall's) -- and the file."""
    return adapter_wall(info.get("vllm_config") or info["config"], ours, info)


def adapter_wall(config: dict, ours: bool, info: dict | None = None) -> str | None:
    """vllm-gguf-plugin's weights adapter for a GGUF of the model ``config`` (a Hugging Face config dict), as
    ``get_weights_adapter`` picks it: its default one and those it registers (``ours`` False), or ours first in that
    list (``ours`` True, as the plugin's ``register()`` puts it). None where the adapter loads it, else its reason.
    With ``info`` (a :func:`read_gguf` record) ours is asked what it does at load time (``GlmDsaGGUFAdapter.plan`` of
    the first shard, the file the diagnosed ``vllm serve`` line and ``launch`` give vLLM -- the plan reads every
    shard from any of them) and another adapter maps every tensor of the file; without one (a model with no file:
    ``diagnose --what-to-run``) ours loads a config it matches (:data:`~sparse_mla.vllm_plugin.gguf_adapter.
    MODEL_TYPE`; loaded so on the H200) and another adapter must build its name map for the config. Where ours does
    not match, the reason says so first."""
    from types import SimpleNamespace

    from ..vllm_plugin.gguf_adapter import MODEL_TYPE

    text = text_config(config)
    theirs = ours and text.get("model_type") != MODEL_TYPE
    head = (f"this plugin's GlmDsaGGUFAdapter takes {MODEL_TYPE} configs only (this one's model_type: "
            f"{text.get('model_type')!r}); " if theirs else "")
    if ours and not theirs and info is None:
        return None
    try:
        from vllm_gguf_plugin.weights_adapter import _ADAPTER_REGISTRY, GGUFWeightsAdapter
    except ImportError:
        return (f"{head}vllm-gguf-plugin is not installed (vLLM 0.26 loads GGUF only through it); accepted: "
                f"{INSTALL_GGUF}")
    from ..vllm_plugin.gguf_adapter import adapter_class

    hf = _hf_config(text)
    mine = adapter_class()
    cls = next((c for c in ([mine] if ours else []) + [c for c in _ADAPTER_REGISTRY if c is not mine]
                if c.matches(hf)), GGUFWeightsAdapter)
    model_config = SimpleNamespace(hf_config=hf, trust_remote_code=False)
    label = "this plugin's GlmDsaGGUFAdapter" if cls is mine else f"vllm-gguf-plugin's {cls.__name__}"
    try:
        if cls is mine:
            cls(hf).plan(info["path"], model_config)
            return None
        mapped = cls(hf).build_name_map(model_config)
    except UserInputError as e:                       # our adapter's refusal, whole
        return f"{head}{label}: {e}"
    except Exception as e:  # noqa: BLE001 - the plugin's own refusal (or what it called), in its words
        return f"{head}{label}: {type(e).__name__}: {str(e)[:200]}"
    unmapped = [n for n in (info or {}).get("tensors", ()) if n not in mapped]
    if unmapped:
        return (f"{head}{cls.__name__} maps no vLLM parameter to {len(unmapped)} GGUF tensors "
                f"({', '.join(unmapped[:3])})")
    return None


def gguf_wall(info: dict, with_plugin: bool) -> dict[str, Any]:
    """``{"stock", "vllm_gguf_plugin", "with_plugin", "folder": reason or "ok", "blocker": the reasons that apply or
    None}`` for the GGUF ``info`` (:func:`read_gguf`): the loader -- without ``--with-plugin`` vLLM is stock, plus
    vllm-gguf-plugin where it is installed; with it, our adapter in vllm-gguf-plugin -- then what the GGUF's folder
    lacks (:func:`folder_wall`). Without ``--with-plugin``, a file our adapter would load says so in its blocker."""
    stock = stock_wall()
    plugin = _plugin_wall(info, ours=False)
    ours = _plugin_wall(info, ours=True)
    try:
        import vllm_gguf_plugin  # noqa: F401
        installed = True
    except ImportError:
        installed = False
    loader = ours if with_plugin else plugin if installed else (stock or plugin)
    if loader and not with_plugin and installed and not ours:      # what the user's next step is
        loader += "; accepted: --with-plugin (this plugin's GlmDsaGGUFAdapter loads it)"
    folder = folder_wall(info)
    tensors = info.get("tensor_problem")
    said = tensors if tensors and not (loader and tensors in loader) else None   # the plan may have said it
    return {"stock": stock or "ok", "vllm_gguf_plugin": plugin or "ok", "with_plugin": ours or "ok",
            "vllm_gguf_plugin_installed": installed, "tensors": tensors or "ok", "folder": folder or "ok",
            "blocker": "; then: ".join(w for w in (loader, said, folder) if w) or None}


def folder_wall(info: dict) -> str | None:
    """What the GGUF's own folder lacks that vLLM reads from it where no flag names another (a GGUF downloaded
    alone): the config.json (:data:`NO_CONFIG_BESIDE`) and a tokenizer vLLM can load; None where it lacks neither."""
    missing = [NO_CONFIG_BESIDE] if info.get("config_json") is None else []
    if info.get("tokenizer_error"):
        missing.append(f"vLLM loads no tokenizer from {info['tokenizer']} ({info['tokenizer_error']}); accepted: the "
                       f"model's tokenizer files beside the GGUF, or --tokenizer DIR for the folder that has them")
    return "; ".join(missing) or None


def checkpoint_record(req) -> dict[str, Any]:
    """The record's ``checkpoint``: ``format`` (``gguf`` for a GGUF ``--model``, else ``safetensors``) and
    ``quantization`` (the GGUF's file type; else the memory stage's quantization name); for a checkpoint on disk
    ``serve`` (the ``vllm serve`` line diagnosed: :func:`serve_line`; a preset has none); for a GGUF also its
    ``file``, ``files``, ``discovery``, ``tensor_types``, ``wall`` (:func:`gguf_wall`), ``config_source`` (the folder
    vLLM reads config.json from, the flag that named it) and ``tokenizer`` (the folder vLLM loads it from)."""
    src = req.geometry.source
    info = GGUF_FILES.get(str(src)) if src is not None else None
    if info is None:
        q = req.memory.quantization.name if req.memory is not None else "bf16"
        if src is None:
            return {"format": "safetensors", "quantization": q}
        folder = Path(src) if Path(src).is_dir() else Path(src).parent    # vllm serve takes the config.json's folder
        return {"format": "safetensors", "quantization": q, "serve": serve_line(req, folder)}
    # the first shard, as vllm serve is given a split model (a shard's path given here names the whole model), or
    # vllm-gguf-plugin's DIR:QUANT with the folder's path expanded (neither the plugin nor vLLM expands "~")
    from ..gguf.files import reference

    ref = reference(info["model"])
    model = info["path"] if ref is None else f"{ref[0]}:{ref[1]}"
    return {"format": "gguf", "quantization": info["file_type"], "file": Path(info["path"]).name,
            "files": info["files"], "discovery": info["discovery"], "tensor_types": info["tensor_types"],
            "wall": gguf_wall(info, req.with_plugin),
            "config_source": {**info["config_source"], "config_json": info["config_json"] is not None,
                              "quantization_config": info.get("quantization_config_overridden")},
            "tokenizer_error": info["tokenizer_error"],
            "tokenizer": info["tokenizer"], "serve": serve_line(req, model, info["serve_flags"])}


def serve_line(req, model, gguf_flags=()) -> str:
    """The ``vllm serve`` line a diagnosis answers for: :func:`sparse_mla.diagnose.serve.serve_command` of ``model``
    (a checkpoint folder, a GGUF's first shard or ``DIR:QUANT``) with the request's tensor parallelism, KV-cache dtype,
    forced backend and the memory settings asked (``max_model_len``, ``cpu_offload_gb``, ``gpu_memory_utilization``,
    as given), and a GGUF's config and tokenizer flags (``gguf_flags``, ``~`` expanded)."""
    from .serve import serve_command

    mem = req.memory
    asked = {} if mem is None else {"max_model_len": mem.max_model_len, "cpu_offload_gb": mem.cpu_offload_gb,
                                    "gpu_memory_utilization": mem.gpu_memory_utilization}
    return serve_command(model, req.tp, req.kv_cache_dtype, gguf_flags=gguf_flags, attention_backend=req.backend,
                         **asked)
