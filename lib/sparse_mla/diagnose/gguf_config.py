"""Where vLLM reads a GGUF model's config and tokenizer: beside the file, or ``--hf-config-path`` / ``--tokenizer``.

A GGUF carries the weights; vLLM 0.26 takes the model's ``config.json`` and tokenizer from a Hugging Face folder. Which
folder is decided by vllm-gguf-plugin 0.0.5's patch of ``EngineArgs.create_model_config`` (``plugin.
_get_gguf_config_source``): ``--hf-config-path`` where given, else ``--tokenizer`` (a folder, not a GGUF), else the
GGUF's own folder. vLLM's ``ModelConfig`` then reads ``config.json`` from that folder (``get_config(hf_config_path or
model)``; a folder -- a path to the ``config.json`` file itself is refused, ``OSError: Repo id must be in the form
...``) and, where no ``--tokenizer`` is given, the tokenizer from it too (``tokenizer = model``). Checked with the
plugin's 0.0.5 code: ``EngineArgs(model=FILE.gguf, hf_config_path=DIR).create_model_config()`` reads ``DIR``'s
config and tokenizer, ``EngineArgs(model=FILE.gguf, tokenizer=DIR)`` too.

:func:`config_source` asks the plugin's function where it is importable and a flag is given (without a flag the
answer for a local file is its folder; the plugin, which imports vLLM, is not imported for that), else applies the same
rule here; :func:`config_json` reads that folder's ``config.json``, refuses one that describes another model than
the GGUF's metadata (:data:`AGREE`) and names the settings it states otherwise (:data:`SETTINGS`, vLLM takes
config.json's), by one rule (:func:`compared`); :func:`serve_flags` gives a ``vllm serve`` line the same folders.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserInputError, expand_path
from ..gguf import files as gguf_files
from ..gguf.files import PLUGIN

HF_CONFIG_PATH = "--hf-config-path"
TOKENIZER = "--tokenizer"
#: Where the config comes from when neither flag is given.
BESIDE = "beside the GGUF"
#: Who decided the config's folder (besides :data:`~sparse_mla.gguf.files.PLUGIN`, the plugin's own code).
RULE_HERE = "vllm-gguf-plugin's rule, applied here (the plugin is not importable)"
NO_FLAG = "no flag: the GGUF's folder (vllm-gguf-plugin's rule for a local file)"

#: Keys of :data:`AGREE` the weights were trained with beyond their shapes (breaker round 11: cf, cj, ck, co, cl were
#: "config ok"): vLLM takes them from config.json (``RMSNorm(eps=config.rms_norm_eps)``, the routed output times
#: ``routed_scaling_factor``, ``renormalize=config.norm_topk_prob``, ``scoring_func=getattr(config, "scoring_func",
#: "softmax")``, ``deepseek_v2.py``); ``tie_word_embeddings`` is "the GGUF has no ``output.weight``", so a tied
#: config.json beside a GGUF with its own LM head describes another model (vllm-gguf-plugin then patches the flag from
#: the files; our adapter too); a GGUF without one is the load plan's wall (``UNTIED_LM_HEAD``), not compared. A config.json without one is read as transformers' config class sets it
#: (:func:`as_read`; ``scoring_func`` has no default there, and vLLM's ``"softmax"`` is refused against a sigmoid GGUF).
#: ``n_group`` / ``topk_group`` (round 12, q06): vLLM's grouped top-k routing (``num_expert_group=config.n_group``,
#: ``topk_group=config.topk_group``), the GGUF's ``expert_group_count`` / ``expert_group_used_count``.
WEIGHTS_MADE_WITH = ("rms_norm_eps", "routed_scaling_factor", "norm_topk_prob", "scoring_func", "tie_word_embeddings",
                     "n_group", "topk_group")
#: Config keys a GGUF's metadata and the ``config.json`` vLLM reads must agree on (else the file is another model's):
#: the geometry, routing and indexer the weights were made with. Every key both state is compared by one rule
#: (:func:`compared`, read by :func:`as_read`): these refused where they differ, :data:`SETTINGS` named.
#: The metadata's side is :func:`sparse_mla.gguf.metadata.config_from_gguf`'s reading (the inverse of
#: :func:`sparse_mla.gguf.writer.write_metadata`: llama.cpp's ``glm-dsa`` keys, e.g. ``rms_norm_eps`` from
#: ``attention.layer_norm_rms_epsilon``, ``scoring_func`` from ``expert_gating_func``).
AGREE = ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads", "kv_lora_rank", "q_lora_rank",
         "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts", "index_topk", "index_n_heads",
         "index_head_dim", "model_type", "architectures", "intermediate_size", "moe_intermediate_size",
         "n_shared_experts", "num_experts_per_tok", "first_k_dense_replace", *WEIGHTS_MADE_WITH)
#: Config keys the metadata states too that are the user's to set in the ``config.json`` vLLM reads, and vLLM takes
#: from it (as does the diagnosis): the model's length (issue 47 item 2: a config.json raising it to 1M beside the
#: GGUF is served, and diagnosed, at 1M) and the rotary base (llama.cpp's ``--rope-freq-base`` overrides the file's
#: likewise), and its scaling (round 12, q03: a YaRN factor 4 beside an unscaled GGUF; llama.cpp's ``--rope-scaling``
#: / ``--rope-scale`` override the file's; a GGUF without ``rope.scaling.*`` keys states none:
#: :func:`sparse_mla.gguf.metadata._rope_parameters` says why). A difference is named in the record
#: (``config_source["differs"]``, round 10: k2, k8), not refused.
ROPE_TYPE, ROPE_FACTOR = "rope_parameters.rope_type", "rope_parameters.factor"
SETTINGS = ("max_position_embeddings", "rope_theta", ROPE_TYPE, ROPE_FACTOR)

_WHAT = {HF_CONFIG_PATH: "the folder holding the model's config.json", TOKENIZER: "the folder holding the model's "
         "tokenizer files"}


def check_folder(value, flag: str) -> Path:
    """``value`` of ``--hf-config-path`` or ``--tokenizer`` (``flag``) as an existing local folder. Raises
    :class:`UserInputError` naming the value for a path that does not exist here (a hub repository id too: the
    diagnosis downloads nothing) and for a file (vLLM reads ``config.json`` and the tokenizer from a folder)."""
    if value is None or str(value).strip() == "":
        raise UserInputError(f"{flag} {value!r} is empty; accepted: {_WHAT[flag]}, or no {flag}")
    p = expand_path(str(value), flag)
    if p.is_file():
        raise UserInputError(f"{flag} {str(value)!r} is a file; accepted: {_WHAT[flag]} (vLLM reads it from a "
                             f"folder, not from a file path)")
    if not p.is_dir():
        raise UserInputError(f"{flag} {str(value)!r} is not a folder here; accepted: {_WHAT[flag]}, on this machine "
                             f"(the diagnosis downloads nothing: fetch a hub repository's config.json and tokenizer "
                             f"files into a folder first)")
    return p


def tokenizer_error(folder: Path) -> str | None:
    """vLLM's own refusal to load a tokenizer from ``folder`` (``vllm.tokenizers.registry.cached_get_tokenizer``, what
    the engine calls on ``ModelConfig.tokenizer`` at start-up), one line; None where it loads one."""
    from vllm.tokenizers.registry import cached_get_tokenizer

    from .probe import quiet_logs

    try:
        with quiet_logs():
            cached_get_tokenizer(str(folder))
    except Exception as e:  # noqa: BLE001 - vLLM's (or transformers') refusal, in its words
        return f"{type(e).__name__}: {' '.join(str(e).split())[:320]}"
    return None


def check_tokenizer(folder: Path, flag: str, given) -> str | None:
    """:func:`tokenizer_error` of the folder vLLM loads the tokenizer from, named by ``flag`` (``given``: the flag's
    value as given). Raises :class:`UserInputError` where a flag named it; returns the refusal for the GGUF's own
    folder (:data:`BESIDE`: a GGUF downloaded alone), which the GGUF wall reports."""
    why = tokenizer_error(folder)
    if why is None or flag == BESIDE:
        return why
    via = "" if flag == TOKENIZER else " (vLLM loads the tokenizer from the --hf-config-path folder where no " \
                                      "--tokenizer is given)"
    raise UserInputError(f"{flag} {str(given)!r} holds no tokenizer vLLM can load{via}: {why}; accepted: "
                         f"{_WHAT[TOKENIZER]} (tokenizer.json, tokenizer_config.json)"
                         + ("" if flag == TOKENIZER else ", or --tokenizer DIR for the folder that has them"))


def config_source(first_file: Path, hf_config_path: Path | None = None,
                  tokenizer: Path | None = None) -> tuple[Path, str, str]:
    """``(folder, flag, decided by)``: the folder vLLM reads a GGUF model's ``config.json`` from, the flag that named
    it (:data:`HF_CONFIG_PATH`, :data:`TOKENIZER` or :data:`BESIDE`), and whose code decided
    (:data:`~sparse_mla.gguf.files.PLUGIN`; :data:`RULE_HERE` where vllm-gguf-plugin is not importable;
    :data:`NO_FLAG` where no flag is given). ``first_file``: the model's first GGUF file;
    ``hf_config_path`` / ``tokenizer``: folders checked by :func:`check_folder`."""
    if hf_config_path is None and tokenizer is None:
        return first_file.parent, BESIDE, NO_FLAG
    decide = gguf_files.plugin_object("plugin", "_get_gguf_config_source")
    if decide is not None:
        folder, how = Path(decide(str(first_file), None if tokenizer is None else str(tokenizer),
                                  None if hf_config_path is None else str(hf_config_path))), PLUGIN
    else:
        folder, how = hf_config_path if hf_config_path is not None else tokenizer, RULE_HERE
    flag = HF_CONFIG_PATH if folder == hf_config_path else TOKENIZER if folder == tokenizer else BESIDE
    return folder, flag, how


def as_read(cfg: dict, key: str):
    """``key`` of a config dict as transformers reads it: ``rope_theta`` from the rope dict (``rope_scaling``, else
    ``rope_parameters``) where it has one, else the top level (``PreTrainedConfig.convert_rope_params_to_dict``:
    ``rope_parameters = rope_scaling or rope_parameters``, then ``setdefault("rope_theta", <top level>)``);
    :data:`ROPE_TYPE` as its ``rope_type`` (the older ``type``; none: ``"default"``) and :data:`ROPE_FACTOR` as its
    ``factor`` (1.0 for the unscaled ``"default"``); a key of ``WEIGHTS_MADE_WITH`` the dict lacks as the config
    class of its ``model_type`` sets it (:func:`_class_default`); any other key as written (None: absent)."""
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    rope = rope if isinstance(rope, dict) else {}
    if key == "rope_theta" and "rope_theta" in rope:
        return rope["rope_theta"]
    if key in (ROPE_TYPE, ROPE_FACTOR):
        kind = rope.get("rope_type", rope.get("type", "default"))
        return kind if key == ROPE_TYPE else rope.get("factor", 1.0 if kind == "default" else None)
    if key not in cfg and key in WEIGHTS_MADE_WITH:
        return _class_default(cfg.get("model_type"), key)
    return cfg.get(key)


def _class_default(model_type, key: str):
    """transformers' default of ``key`` in the config class of ``model_type`` (``AutoConfig.for_model``), what a
    config.json without the key is read as; None where transformers has no such class or attribute."""
    try:
        from transformers import AutoConfig

        return getattr(AutoConfig.for_model(model_type), key, None)
    except Exception:  # noqa: BLE001 - no transformers, or a model type it does not know: nothing read
        return None


def _same(a, b) -> bool:
    """Whether two values of a key are one, a float as the GGUF stores it (float32: ``rope.freq_base``)."""
    import struct

    if isinstance(a, float) or isinstance(b, float):
        try:
            return struct.pack("<f", a) == struct.pack("<f", b)
        except (struct.error, OverflowError, TypeError):
            return False
    return a == b


def compared(cfg: dict, metadata_config: dict) -> tuple[str | None, list[str]]:
    """``(the first key of AGREE that the config.json cfg lacks or states otherwise than the GGUF's metadata, or None;
    the keys of SETTINGS it states otherwise)``, each read by :func:`as_read` and compared by :func:`_same`: the one
    rule for every key both state."""
    def differ(k):
        if k == "tie_word_embeddings" and as_read(metadata_config, k) is True:
            return False      # a GGUF with no output.weight: the load plan's wall says vLLM's GLM-5 never ties
        return not _same(as_read(cfg, k), as_read(metadata_config, k))

    return (next((k for k in AGREE if differ(k)), None),
            [k for k in SETTINGS if as_read(metadata_config, k) is not None and differ(k)])


def config_json(path: Path, folder: Path, flag: str, given, metadata_config: dict) -> tuple[dict | None, str | None]:
    """``(config, differs)``: the ``config.json`` in ``folder`` (from :func:`config_source`; ``given``: the flag's
    value as given) -- the config vLLM builds the GGUF model ``path`` from -- or None where there is none beside the
    GGUF; and where it sets a key of :data:`SETTINGS` otherwise than the metadata, a line naming both values
    (:func:`compared`), else None. Raises :class:`UserInputError` where a folder named by a flag has no
    ``config.json``, and where the config lacks or contradicts the GGUF's metadata on a key of :data:`AGREE`, naming
    the key and both values."""
    from ..files import read_json

    f = folder / "config.json"
    where = "the config.json beside it" if flag == BESIDE else f"the config.json of {flag} {str(given)!r}"
    if not f.is_file():
        if flag == BESIDE:
            return None, None
        why = ("" if flag == HF_CONFIG_PATH else ": vllm-gguf-plugin reads the model's config from the --tokenizer "
               "folder where no --hf-config-path is given")
        raise UserInputError(f"{flag} {str(given)!r} has no config.json{why}; accepted: "
                             + ("the folder holding the model's config.json" if flag == HF_CONFIG_PATH else
                                "--hf-config-path DIR for the folder with the model's config.json, or a --tokenizer "
                                "folder that holds it"))
    cfg = read_json(f, accepted="a Hugging Face config.json")
    named = f"{where[0].upper()}{where[1:]} ({f})"
    if not isinstance(cfg, dict):
        raise UserInputError(f"{named} holds a JSON {type(cfg).__name__}, not an object; accepted: a Hugging Face "
                             f"config.json (a JSON object of the model's settings)")
    k, settings = compared(cfg, metadata_config)
    if k is not None and k not in cfg:
        raise UserInputError(f"{named} has no {k} (the GGUF model {str(path)!r} has {k} = "
                             f"{as_read(metadata_config, k)!r}); accepted: the config.json of the model the GGUF was "
                             f"made from")
    if k is not None:
        held = (" (it holds its own LM head, output.weight)" if k == "tie_word_embeddings"
                and as_read(metadata_config, k) is False else "")
        raise UserInputError(f"GGUF model {str(path)!r} has {k} = {as_read(metadata_config, k)!r}{held} and {where} "
                             f"{as_read(cfg, k)!r}: another model's file; accepted: the config.json of the model the "
                             f"GGUF was made from")
    differs = [(f"{k} {as_read(cfg, k)!r}" if as_read(cfg, k) is not None else f"no {k}")
               + f" (the GGUF's {as_read(metadata_config, k)!r})" for k in settings]
    return cfg, (f"{where} sets {', '.join(differs)}: vLLM takes config.json's" if differs else None)


def serve_flags(folder: str | Path, hf_config_path=None, tokenizer=None) -> list[str]:
    """The ``vllm serve`` arguments that give vLLM a GGUF model's config and tokenizer: ``--hf-config-path`` and
    ``--tokenizer`` as given (``~`` expanded: vLLM does not expand it, and ``shlex`` quotes it) where either is,
    else ``--tokenizer FOLDER``, the GGUF's own folder ``folder``
    (vllm-gguf-plugin then reads the config from it too). Arguments, not shell text (``shlex.join`` makes a line)."""
    if hf_config_path is None and tokenizer is None:
        return [TOKENIZER, str(folder)]
    return [a for flag, v in ((HF_CONFIG_PATH, hf_config_path), (TOKENIZER, tokenizer)) if v is not None
            for a in (flag, os.path.expanduser(str(v)))]   # vLLM expands no "~", and a quoted one stays literal
