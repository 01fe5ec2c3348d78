"""GLM-5.3-Flash's ``config.json`` without a model hub: ``make-checkpoint OUT --preset glm-5.3-flash``, for the
diagnosis only (``sparse-mla diagnose --model OUT`` under vLLM 0.33; no weights, no tokenizer: the diagnosis reads
neither, ``load_format="dummy"`` and ``skip_tokenizer_init``).

The geometry is transformers' own: :func:`glm5next_config` instantiates ``Glm5NextTextConfig``
(``transformers/models/glm5_next/configuration_glm5_next.py``, documented for ``zai-org/GLM-5.3-Flash``) and writes its
fields -- 45 layers, every 4th an MLA (DSA) layer (``layer_types`` ``indexed_attention``) and the others KDA linear
attention; 64 heads, ``kv_lora_rank`` 512, ``qk_nope_head_dim`` 256, ``qk_rope_head_dim`` 0 (NoPE: the absorbed head
is 512), ``v_head_dim`` 256, ``q_lora_rank`` 1536; indexer 32 heads x 128, ``index_topk`` 2048 over keys pooled 16 to
one (``index_kpool``, tail always selected); KDA 64 heads x 128, conv 4; MHC ``hc_mult`` 4; 288 routed experts top-8 --
as the flat (text-only) form ``Glm5NextConfig`` reads (``model_type`` ``glm5_next``, architecture
``Glm5NextForCausalLM``). transformers derives ``layer_types``, ``mlp_layer_types`` and ``indexer_types`` from the
layer count, so ``--layers`` keeps its schedule.

vLLM 0.33's model code (``vllm/models/glm5next/common/``) also reads keys transformers' class does not define (an
attribute only where ``config.json`` has it): :data:`VLLM_KEYS`, each with where vLLM reads it and why its value is
GLM-5.3-Flash's. Refused, in one line: a transformers without ``glm5_next`` (here), and -- by ``make-checkpoint``,
before writing -- a vLLM whose model registry lacks GLM-5.3-Flash (:func:`sparse_mla.models.require_vllm_model`: vLLM
0.26).
"""
from __future__ import annotations

from typing import Any

from ..errors import UserInputError
from ..layouts import INDEX_TOPK_MULTIPLE
from ..models import GLM5_NEXT_ARCHITECTURES, GLM5_NEXT_VLLM_LINE

#: make-checkpoint's name for it.
PRESET = "glm-5.3-flash"

#: Keys vLLM 0.33's glm5next model code reads that ``Glm5NextTextConfig`` does not define, and their values:
#: ``mla_use_nope`` -- ``Glm5NextDecoderLayer`` passes ``skip_rope=config.mla_use_nope`` (``common/model.py``); the MLA
#: has no RoPE part (transformers refuses ``qk_rope_head_dim > 0``: "Expecting NoPE"). ``mhc`` -- ``self.mhc =
#: config.mhc`` (``common/model.py``); transformers' model always runs ``hc_mult`` residual streams.
#: ``indexer_rope_interleave`` -- ``get_rope(qk_rope_head_dim, is_neox_style=not config.indexer_rope_interleave)``
#: (``common/attention.py``); with no rope dimensions its value changes nothing (GLM-5's True kept).
#: ``topk_method`` ``noaux_tc`` and ``scoring_func`` ``sigmoid`` -- ``Glm5NextMoE`` (``common/model.py``); transformers'
#: router takes ``sigmoid`` scores plus ``e_score_correction_bias``, which ``noaux_tc`` gives the gate.
VLLM_KEYS: dict[str, Any] = {"mla_use_nope": True, "mhc": True, "indexer_rope_interleave": True,
                             "topk_method": "noaux_tc", "scoring_func": "sigmoid"}

#: ``PreTrainedConfig.to_dict()`` entries that are no model geometry (run-time switches, bookkeeping, derived values).
_NOT_WRITTEN = ("_name_or_path", "transformers_version", "output_attentions", "output_hidden_states", "return_dict",
                "problem_type", "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id",
                "qk_head_dim")

#: At least one MLA layer: transformers' schedule makes layer 3 the first ``indexed_attention`` one.
MIN_LAYERS = 4
MAX_LAYERS = 128
MAX_HEADS = 128


def _text_config_class():
    """transformers' ``Glm5NextTextConfig``; one UserInputError line where the installed transformers has none."""
    import transformers

    cls = getattr(transformers, "Glm5NextTextConfig", None)
    if cls is None:
        raise UserInputError(f"--preset {PRESET} writes transformers' Glm5NextTextConfig (model_type glm5_next), which "
                             f"the installed transformers {transformers.__version__} does not have; accepted: a "
                             f"transformers with glm5_next (vLLM {GLM5_NEXT_VLLM_LINE}'s environment), or another "
                             f"preset")
    return cls


def _overrides(index_topk, num_layers, num_heads) -> dict[str, int]:
    """The checked ``Glm5NextTextConfig`` arguments make-checkpoint's options give (None: transformers' default)."""
    def integer(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not integer(index_topk) or index_topk <= 0 or index_topk % INDEX_TOPK_MULTIPLE:
        raise UserInputError(f"index_topk {index_topk!r} is not a positive multiple of {INDEX_TOPK_MULTIPLE}; "
                             f"accepted: e.g. 2048 (GLM-5.3-Flash's)")
    out = {"index_topk": index_topk}
    if num_layers is not None:
        if not integer(num_layers) or not MIN_LAYERS <= num_layers <= MAX_LAYERS:
            raise UserInputError(f"num_layers {num_layers!r} is not accepted with --preset {PRESET} (every 4th layer "
                                 f"is an MLA layer, the first is layer 3); accepted: an integer from {MIN_LAYERS} to "
                                 f"{MAX_LAYERS}")
        out["num_hidden_layers"] = num_layers
    if num_heads is not None:
        if not integer(num_heads) or not 1 <= num_heads <= MAX_HEADS:
            raise UserInputError(f"heads (num_attention_heads) {num_heads!r} is not accepted; accepted: an integer "
                                 f"from 1 to {MAX_HEADS}")
        out["num_attention_heads"] = out["num_key_value_heads"] = num_heads
    return out


def glm5next_config(index_topk: int = 2048, num_layers: int | None = None,
                    num_heads: int | None = None) -> dict[str, Any]:
    """GLM-5.3-Flash's ``config.json`` dict (see the module docstring): transformers' ``Glm5NextTextConfig`` with
    ``index_topk``, ``num_hidden_layers`` and ``num_attention_heads`` = ``num_key_value_heads`` (None: its defaults),
    in the flat ``glm5_next`` form, ``dtype`` bfloat16, plus :data:`VLLM_KEYS`.

    Raises :class:`UserInputError` (one line): a transformers without ``glm5_next``, an ``index_topk`` that is not a
    positive multiple of 128, a layer count outside
    :data:`MIN_LAYERS`..:data:`MAX_LAYERS`, a head count outside 1..:data:`MAX_HEADS`, or what transformers' own
    validation refuses (e.g. an ``index_topk`` ``index_kpool`` does not divide), in its words.
    """
    cls = _text_config_class()
    kwargs = _overrides(index_topk, num_layers, num_heads)
    try:
        text = cls(**kwargs)        # transformers' @strict validation runs here (validate_architecture)
    except Exception as e:  # noqa: BLE001 - huggingface_hub's StrictDataclass errors are no ValueError
        raise UserInputError(f"transformers' Glm5NextTextConfig refuses {kwargs}: {' '.join(str(e).split())[:200]}; "
                             f"accepted: make-checkpoint's defaults for --preset {PRESET}") from None
    cfg = {k: v for k, v in text.to_dict().items() if k not in _NOT_WRITTEN}
    cfg.update(model_type="glm5_next", architectures=[GLM5_NEXT_ARCHITECTURES[0]], dtype="bfloat16", **VLLM_KEYS)
    return cfg


def refuse_weight_options(*, mtp: bool, gguf, seed, **sharing) -> None:
    """make-checkpoint's options that shape weights, MTP, GGUFs or top-k sharing have no meaning for the config-only
    preset: one UserInputError line naming the first one given (``seed`` only where it is not the default 0)."""
    given = (["--mtp"] if mtp else []) + (["--gguf"] if gguf else []) + (["--seed"] if seed != 0 else []) + \
        ["--" + k.replace("_", "-") for k, v in sharing.items() if v is not None]
    if given:
        raise UserInputError(f"{given[0]} with --preset {PRESET}: the preset writes config.json only (GLM-5.3-Flash is "
                             f"diagnosed, not run: no weights, tokenizer, MTP layer, GGUF or top-k sharing); "
                             f"accepted: --preset {PRESET} with --index-topk, --layers, --heads or --overwrite")
