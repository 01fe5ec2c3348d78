"""Which decoder layers of a DSA model run their own lightning indexer and which reuse the previous one's top-k.

GLM-5.2 shares top-k across layers (IndexCache / "IndexShare", arXiv 2603.12201): a *shared* layer builds no indexer
and attends to the token positions the last *full* layer before it selected. A ``config.json`` says which layer is
which in one of three ways:

* ``indexer_types``: ``["full", "shared", ...]``, one per decoder layer (GLM-5.x configs; transformers'
  ``GlmMoeDsaConfig``, ``models/glm_moe_dsa/configuration_glm_moe_dsa.py``; llama.cpp's converter);
* ``index_topk_pattern``: a string of ``"F"`` / ``"S"``, one letter per layer;
* ``index_topk_freq`` / ``index_skip_topk_offset`` (defaults 1 / 2): layer ``l`` is full iff
  ``max(l - offset + 1, 0) % freq == 0``.

vLLM 0.26.0 reads only the last two (``DeepseekV2MLAAttention.__init__``, ``vllm/model_executor/models/
deepseek_v2.py`` 1079-1103; layers past the pattern's end and the MTP layers are full), transformers all three
(``indexer_types`` first; it derives it from the other two when absent). So a config with only ``indexer_types``
builds an indexer in every layer in vLLM (:mod:`sparse_mla.vllm_plugin.indexer_types` gives vLLM the pattern).

:func:`own_indexer` is the model's declaration read as transformers reads it, with vLLM's reading of a pattern. It is
a mirror of vLLM's rule, on purpose: vLLM's rule is an inline expression in a module constructor (no function to
call), the reference forward (:mod:`.glm5_reference`) is independent of vLLM by design -- it is what vLLM is compared
with -- and ``make-checkpoint`` runs without vLLM's CUDA platform, which building vLLM's layers needs. The mirror is
checked against vLLM building the model on the meta device (the diagnosis' ``indexer_layers``,
``tests/diagnose/test_config.py``) and against transformers' derivation (``tests/launch/test_index_sharing.py``).
"""
from __future__ import annotations

from typing import Any

from ..errors import UserInputError
from ..models import sharing_disagreement

#: ``indexer_types`` values (transformers' ``GlmMoeDsaConfig``) and the pattern letters vLLM reads for them.
TYPE_LETTERS = {"full": "F", "shared": "S"}
#: How ``make-checkpoint`` writes a sharing into ``config.json``.
STYLES = ("pattern", "freq", "indexer_types")
_VLLM_DEFAULT_OFFSET = 2     # deepseek_v2.py: getattr(config, "index_skip_topk_offset", 2)


def freq_pattern(num_layers: int, freq: int, offset: int = _VLLM_DEFAULT_OFFSET,
                 name: str = "index_topk_freq / index_skip_topk_offset") -> str:
    """The ``F``/``S`` letters of ``index_topk_freq = freq``, ``index_skip_topk_offset = offset`` for
    ``num_layers`` layers (layer ``l`` full iff ``max(l - offset + 1, 0) % freq == 0``). The two values pass the
    rule the diagnosis reads a config by (:func:`sparse_mla.models.check_config`: ``freq`` any finite number but 0 --
    vLLM 0.26 divides by it and reads a float or a negative one so (round 18, Y3); transformers reads one below 1 as
    1 --, ``offset`` any finite number, as vLLM and transformers both read it; round 10: -1 was refused here and
    diagnosed as vLLM runs it; make-checkpoint's flags take integers only, :func:`sharing_keys`). Raises
    :class:`UserInputError`
    naming ``name`` (where the values come from), the key and what is accepted."""
    from ..models import check_config

    check_config({"index_topk_freq": freq, "index_skip_topk_offset": offset}, name)
    return "".join("F" if max(i - offset + 1, 0) % freq == 0 else "S" for i in range(num_layers))


def check_pattern(pattern: Any, num_layers: int, what: str = "index_topk_pattern") -> str:
    """``pattern`` as an ``F``/``S`` string of exactly ``num_layers`` letters whose first layer is full (a shared
    layer 0 has no earlier top-k to reuse: vLLM would read a buffer no layer wrote). Accepts the letters or a list of
    ``indexer_types`` values. Raises :class:`UserInputError` naming the value and what is accepted."""
    if isinstance(pattern, (list, tuple)):
        bad = [t for t in pattern if t not in TYPE_LETTERS]
        if bad:
            raise UserInputError(f"{what} {list(pattern)!r} holds {bad[0]!r}; accepted: {', '.join(TYPE_LETTERS)}")
        pattern = "".join(TYPE_LETTERS[t] for t in pattern)
    if not isinstance(pattern, str) or not pattern or set(pattern) - {"F", "S"}:
        raise UserInputError(f"{what} {pattern!r} is not accepted; accepted: letters F (full: the layer runs its "
                             f"indexer) and S (shared: it reuses the previous full layer's top-k), one per layer, "
                             f"e.g. FSSF")
    from ..models import check_sharing_length

    check_sharing_length(pattern, num_layers, what)
    if pattern[0] != "F":
        raise UserInputError(f"{what} {pattern!r} makes layer 0 shared, with no earlier layer's top-k to reuse; "
                             f"accepted: a pattern starting with F")
    return pattern


def sharing_config(style: str, pattern: str, num_layers: int, freq: int | None = None,
                   offset: int | None = None) -> dict[str, Any]:
    """The ``config.json`` keys that declare ``pattern`` in ``style`` (:data:`STYLES`): ``{"index_topk_pattern":
    pattern}``, ``{"index_topk_freq": freq[, "index_skip_topk_offset": offset]}`` (which must give ``pattern``) or
    ``{"indexer_types": ["full", "shared", ...]}`` (GLM-5.2 style)."""
    flag = {"pattern": "--index-topk-pattern (index_topk_pattern)", "indexer_types": "--indexer-types (indexer_types)",
            "freq": "the pattern of --index-topk-freq / --index-skip-topk-offset"}.get(style, "index_topk_pattern")
    pattern = check_pattern(pattern, num_layers, flag)       # named as the user typed it
    if style == "pattern":
        return {"index_topk_pattern": pattern}
    if style == "indexer_types":
        letters = {v: k for k, v in TYPE_LETTERS.items()}
        return {"indexer_types": [letters[c] for c in pattern]}
    if style == "freq":
        keys: dict[str, Any] = {"index_topk_freq": freq}
        if offset is not None:
            keys["index_skip_topk_offset"] = offset
        if freq_pattern(num_layers, freq, _VLLM_DEFAULT_OFFSET if offset is None else offset) != pattern:
            raise UserInputError(f"index_topk_freq {freq!r} / index_skip_topk_offset {offset!r} do not give "
                                 f"{pattern!r}; accepted: the freq/offset of that pattern")
        return keys
    raise UserInputError(f"sharing style {style!r} is not accepted; accepted: {', '.join(STYLES)}")


def _declared(cfg: dict[str, Any], num_layers: int) -> str | None:
    """The pattern ``index_topk_pattern`` / ``index_topk_freq`` declare as vLLM reads them (None: neither key)."""
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        if not isinstance(pattern, (str, list, tuple)):
            raise UserInputError(f"index_topk_pattern {pattern!r} is not a string; accepted: F/S letters, e.g. FSSF")
        # vLLM: layer l is shared iff pattern[l] == "S" (a string's letter or a list's entry: any other is full);
        # layers past the end are full
        return "".join("S" if i < len(pattern) and pattern[i] == "S" else "F" for i in range(num_layers))
    freq, offset = cfg.get("index_topk_freq"), cfg.get("index_skip_topk_offset")
    if freq is None and offset is None:
        return None
    return freq_pattern(num_layers, 1 if freq is None else freq, _VLLM_DEFAULT_OFFSET if offset is None else offset)


def own_indexer(cfg: dict[str, Any]) -> list[bool]:
    """Per decoder layer (``num_hidden_layers``; not the MTP layers, which always have one), whether it runs its own
    indexer (True: full) or reuses the previous full layer's top-k (False: shared), as the config declares it.

    ``indexer_types`` wins where present (transformers); else ``index_topk_pattern``, else ``index_topk_freq`` /
    ``index_skip_topk_offset`` (vLLM and transformers alike); none of them: every layer is full. Raises
    :class:`UserInputError` for a shared layer 0, an ``indexer_types`` of another length or values, an
    ``indexer_types`` that a pattern / freq in the same config contradicts, or a freq below 1 that transformers (which
    reads it as 1) and vLLM 0.26 read as different layers (transformers and vLLM would then run different models).
    """
    n = int(cfg["num_hidden_layers"])
    declared = _declared(cfg, n)
    types = cfg.get("indexer_types")
    freq = cfg.get("index_topk_freq")
    if types is None and cfg.get("index_topk_pattern") is None and freq is not None and freq < 1:
        offset = cfg.get("index_skip_topk_offset", _VLLM_DEFAULT_OFFSET)
        theirs = freq_pattern(n, max(freq, 1), offset)      # GlmMoeDsaConfig: max(index_topk_freq, 1)
        if theirs != declared:
            raise UserInputError(f"index_topk_freq {freq!r} gives {declared} as vLLM 0.26 reads it and {theirs} as "
                                 f"transformers reads it (a freq below 1 as 1; vLLM 0.34 refuses it): they would run "
                                 f"different models; accepted: an index_topk_freq from 1")
    if types is None:
        pattern = declared or "F" * n
        if pattern[0] != "F":
            raise UserInputError(f"the config's top-k sharing {pattern!r} makes layer 0 shared, with no earlier "
                                 f"layer's top-k to reuse; accepted: layer 0 full")
        return [c == "F" for c in pattern]
    pattern = check_pattern(types, n, "indexer_types")
    why = None if declared is None else sharing_disagreement(pattern, declared)
    if why is not None:
        raise UserInputError(f"{why}; accepted: one declaration, or two that agree")
    return [c == "F" for c in pattern]


def sharing_keys(num_layers: int, *, index_topk_pattern: str | None = None, index_topk_freq: int | None = None,
                 index_skip_topk_offset: int | None = None, indexer_types: str | None = None) -> dict[str, Any]:
    """The ``config.json`` keys of ``make-checkpoint``'s sharing options for ``num_layers`` layers: at most one of
    ``index_topk_pattern`` (F/S letters), ``index_topk_freq`` (with an optional ``index_skip_topk_offset``) and
    ``indexer_types`` (F/S letters, written GLM-5.2 style as ``["full", "shared", ...]``); none: ``{}`` (every layer
    full, as GLM-5). Raises :class:`UserInputError` for two of them, an offset without a freq, or a sharing whose
    layer 0 is shared."""
    given = [k for k, v in (("index_topk_pattern", index_topk_pattern), ("index_topk_freq", index_topk_freq),
                            ("indexer_types", indexer_types)) if v is not None]
    if len(given) > 1:
        raise UserInputError(f"{' and '.join(given)} both declare the top-k sharing; accepted: one of "
                             f"index_topk_pattern, index_topk_freq (+ index_skip_topk_offset), indexer_types")
    for flag, v, least in (("--index-topk-freq", index_topk_freq, 1), ("--index-skip-topk-offset",
                                                                         index_skip_topk_offset, None)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or (least is not None and v < least)):
            # a config may hold what vLLM 0.26 reads its own way (models.check_config); make-checkpoint writes what
            # vLLM 0.26, 0.34 and transformers read alike
            raise UserInputError(f"{flag} {v!r} is not accepted; accepted: an integer"
                                 + (f" from {least}" if least is not None else ""))
    if index_skip_topk_offset is not None and index_topk_freq is None:
        raise UserInputError(f"index_skip_topk_offset {index_skip_topk_offset!r} without index_topk_freq; accepted: "
                             f"it together with index_topk_freq")
    if index_topk_pattern is not None:
        return sharing_config("pattern", index_topk_pattern, num_layers)
    if indexer_types is not None:
        return sharing_config("indexer_types", indexer_types, num_layers)
    if index_topk_freq is not None:
        offset = _VLLM_DEFAULT_OFFSET if index_skip_topk_offset is None else index_skip_topk_offset
        return sharing_config("freq", freq_pattern(num_layers, index_topk_freq, offset,
                                                   "--index-topk-freq / --index-skip-topk-offset"), num_layers,
                              index_topk_freq, index_skip_topk_offset)
    return {}


def letters(own: list[bool]) -> str:
    """``own_indexer``'s answer as ``F``/``S`` letters."""
    return "".join("F" if o else "S" for o in own)
