"""GLM-5.x ``indexer_types`` given to vLLM 0.26 as the top-k sharing it reads: ``index_topk_pattern``.

GLM-5.x configs declare which layers share the previous layer's top-k as ``indexer_types`` (``["full", "shared",
...]``; transformers' ``GlmMoeDsaConfig``, llama.cpp's converter). vLLM 0.26.0 decides per layer whether to build an
indexer from ``index_topk_pattern`` or ``index_topk_freq`` / ``index_skip_topk_offset`` only
(``DeepseekV2MLAAttention.__init__``, ``vllm/model_executor/models/deepseek_v2.py``): with ``indexer_types`` alone it
builds one in every layer, which such checkpoints have no weights for. vLLM's default loader
(``vllm/model_executor/model_loader/default_loader.py``) then stops with "Following weights were not initialized from
checkpoint" for an unquantized checkpoint (naming the shared layers' ``k_norm`` parameters: ``track_weights_loading``
exempts every layer with a quantization method, unquantized linears included, so ``wq_b`` / ``wk_weights_proj`` go
unnamed), and for a quantized one (FP8, NVFP4), where that check is off, loads and runs those indexers on
uninitialized weights -- a likely cause of vLLM issue 46726 (GLM-5.2 NVFP4 indexer errors). Both shown on vLLM's own
loader in ``tests/vllm_plugin/test_indexer_types.py``.

The fix: a config hook that sets ``hf_config.index_topk_pattern`` (``"F"`` for ``"full"``, ``"S"`` for ``"shared"``,
the letters transformers maps back) where the config has ``indexer_types`` and none of ``index_topk_pattern``,
``index_topk_freq``, ``index_skip_topk_offset`` (a config with one of those is read by vLLM as it stands; the
diagnosis compares the layers vLLM then builds indexers in with ``indexer_types``).

Why this hook: vLLM's per-architecture config hooks, ``MODELS_CONFIG_MAP`` in ``vllm/model_executor/models/config.py``
(``VerifyAndUpdateConfig`` classes, e.g. ``DeepseekV32ForCausalLM``'s own), are vLLM's place for fixing a model's
config: ``ModelConfig.__post_init__`` calls the architecture's ``verify_and_update_model_config`` once, in the process
that builds the engine configuration, before any model is built; the changed ``hf_config`` travels with the
``VllmConfig`` to the engine core and its workers. Plugins are loaded before that (``EngineArgs.__post_init__`` calls
``load_general_plugins``). No vLLM file is edited and no vLLM function replaced: :func:`install_indexer_types_hook` adds
an entry for each architecture vLLM builds with ``DeepseekV2MLAAttention`` and a DSA indexer, subclassing the entry
vLLM already has (its hooks still run). Alternatives not taken: ``--hf-overrides`` is the user's switch (the same fix
by hand: ``--hf-overrides '{"index_topk_pattern": "FSS..."}'``); vLLM's config-parser registry serves a
``--config-format`` the user must name; wrapping ``get_config`` would miss the names other modules imported.
"""
from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger(__name__)

#: Architectures vLLM 0.26 builds from ``deepseek_v2.py`` with a DSA indexer (``model_executor/models/registry.py``).
ARCHITECTURES = ("GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM")
#: ``indexer_types`` values and the ``index_topk_pattern`` letters vLLM reads for them (transformers maps
#: ``{"F": "full", "S": "shared"}``; vLLM skips the indexer where the letter is ``"S"``).
LETTERS = {"full": "F", "shared": "S"}
#: The config attributes vLLM reads for the sharing (deepseek_v2.py); where one is set, the hook changes nothing.
VLLM_KEYS = ("index_topk_pattern", "index_topk_freq", "index_skip_topk_offset")
_MARK = "_sparse_mla_indexer_types"
_WARNED: set[str] = set()


def pattern_from_indexer_types(indexer_types: Any) -> str | None:
    """``["full", "shared", ...]`` -> ``"FS..."``; None for anything else (not a list, another value)."""
    if not isinstance(indexer_types, (list, tuple)) or not indexer_types:
        return None
    if any(t not in LETTERS for t in indexer_types):
        return None
    return "".join(LETTERS[t] for t in indexer_types)


def _warn_once(line: str) -> None:
    if line not in _WARNED:
        _WARNED.add(line)
        logger.warning(line)


def fix_hf_config(hf_config) -> str | None:
    """Set ``hf_config.index_topk_pattern`` from its ``indexer_types`` where vLLM would not see the sharing (see the
    module docstring). Returns the pattern set, or None when nothing was changed."""
    types = getattr(hf_config, "indexer_types", None)
    if types is None or not hasattr(hf_config, "index_topk"):
        return None
    pattern = pattern_from_indexer_types(types)
    if pattern is None:
        _warn_once(f"sparse_mla: indexer_types {types!r} is not a list of 'full'/'shared'; vLLM's top-k sharing is "
                   f"left as the config's index_topk_pattern / index_topk_freq give it")
        return None
    given = {k: getattr(hf_config, k) for k in VLLM_KEYS if getattr(hf_config, k, None) is not None}
    if given:
        return None
    hf_config.index_topk_pattern = pattern
    logger.info("sparse_mla: indexer_types -> index_topk_pattern %r (vLLM 0.26 reads only the latter)", pattern)
    return pattern


def _hook_class(vllm_entry: type | None) -> type:
    """vLLM's hook for the architecture (``vllm_entry``; None: vLLM has none, then its ``VerifyAndUpdateConfig``)
    with :func:`fix_hf_config` run first in ``verify_and_update_model_config``. The class keeps ``vllm_entry`` for
    :func:`uninstall_indexer_types_hook`."""
    from vllm.model_executor.models.config import VerifyAndUpdateConfig

    base = vllm_entry or VerifyAndUpdateConfig
    original = base.verify_and_update_model_config

    def verify_and_update_model_config(model_config) -> None:
        for cfg in {id(c): c for c in (model_config.hf_config, model_config.hf_text_config)}.values():
            fix_hf_config(cfg)
        original(model_config)

    # vLLM's own hook keeps its name (the diagnosis names the hook that changed the KV-cache dtype)
    return type(base.__name__ if vllm_entry is not None else "SparseMlaIndexerTypes", (base,), {
        "verify_and_update_model_config": staticmethod(verify_and_update_model_config), _MARK: (vllm_entry,)})


def install_indexer_types_hook() -> list[str]:
    """Add the config hook to vLLM's ``MODELS_CONFIG_MAP`` for :data:`ARCHITECTURES` (idempotent). Returns the
    architectures it now covers."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    for arch in ARCHITECTURES:
        current = MODELS_CONFIG_MAP.get(arch)
        if getattr(current, _MARK, None) is None:
            MODELS_CONFIG_MAP[arch] = _hook_class(current)
    return hooked()


def uninstall_indexer_types_hook() -> None:
    """Put back vLLM's own entries (none where vLLM had none)."""
    mod = sys.modules.get("vllm.model_executor.models.config")
    if mod is None:
        return
    for arch in ARCHITECTURES:
        kept = getattr(mod.MODELS_CONFIG_MAP.get(arch), _MARK, None)
        if kept is None:
            continue
        if kept[0] is None:
            del mod.MODELS_CONFIG_MAP[arch]
        else:
            mod.MODELS_CONFIG_MAP[arch] = kept[0]


def hooked() -> list[str]:
    """The architectures whose ``MODELS_CONFIG_MAP`` entry carries the hook (``[]``: not installed, or vLLM not
    imported)."""
    mod = sys.modules.get("vllm.model_executor.models.config")
    if mod is None:
        return []
    return [a for a in ARCHITECTURES if getattr(mod.MODELS_CONFIG_MAP.get(a), _MARK, None) is not None]


@contextlib.contextmanager
def suspended() -> Iterable[None]:
    """The hook taken out for the duration (stock vLLM's config reading, as the diagnosis without the plugin needs
    it) and put back afterwards if it was installed."""
    was = bool(hooked())
    uninstall_indexer_types_hook()
    try:
        yield
    finally:
        if was:
            install_indexer_types_hook()
