"""GLM-5.3-Flash's checkpoint without a model hub: ``make-checkpoint OUT --preset glm-5.3-flash``.

Two forms, one geometry source. The default is a tiny random-weight checkpoint (:func:`glm5next_config` with
``tiny=True``; weights, tokenizer and ``config.json``, written by :mod:`.glm5next_weights`) that vLLM 0.33/0.34 load
and transformers' own model reads back as the float64 reference (:mod:`.glm5next_reference`). ``--config-only`` writes
the real model's ``config.json`` alone, for the diagnosis (``sparse-mla diagnose --model OUT``: no weights, no
tokenizer; the diagnosis reads neither, ``load_format="dummy"`` and ``skip_tokenizer_init``).

The geometry is transformers' own: :func:`glm5next_config` instantiates ``Glm5NextTextConfig``
(``transformers/models/glm5_next/configuration_glm5_next.py``, documented for ``zai-org/GLM-5.3-Flash``) and writes its
fields -- 45 layers, every 4th an MLA (DSA) layer (``layer_types`` ``indexed_attention``) and the others KDA linear
attention; 64 heads, ``kv_lora_rank`` 512, ``qk_nope_head_dim`` 256, ``qk_rope_head_dim`` 0 (NoPE: the absorbed head
is 512), ``v_head_dim`` 256, ``q_lora_rank`` 1536; indexer 32 heads x 128, ``index_topk`` 2048 over keys pooled 16 to
one (``index_kpool``, tail always selected); KDA 64 heads x 128, conv 4; MHC ``hc_mult`` 4; 288 routed experts top-8 --
as the flat (text-only) form ``Glm5NextConfig`` reads (``model_type`` ``glm5_next``, architecture
``Glm5NextForCausalLM``). transformers derives ``layer_types``, ``mlp_layer_types`` (the first 3 layers dense) and
``indexer_types`` from the layer count, so ``--layers`` keeps its schedule.

The tiny form (:data:`TINY_OVERRIDES`) keeps every per-layer kind and every head geometry -- the NoPE MLA head
(``kv_lora_rank`` 512, ``qk_rope_head_dim`` 0, nope/v 256), the indexer (32 x 128, KPool 16 with its tail), KDA heads
of 128, MHC 4 streams -- and shrinks the sizes: 8 layers (KDA 0-2, 4-6, MLA 3 and 7; dense MLP 0-2, MoE 3-7), hidden
512, 8 heads (GLM-5.3-Flash's 64 per rank at tensor-parallel 8), 4 KDA heads, ``q_lora_rank`` 512, 8 routed experts
top-2 + 1 shared, vocabulary 2048, ``max_position_embeddings`` 8192.

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
#: Upper bound of ``--max-position-embeddings`` for the tiny form (GLM-5.3-Flash's own is 1048576 = 2**20).
MAX_POSITIONS = 2**20

#: What the tiny form changes in ``Glm5NextTextConfig``'s defaults (sizes only; see the module docstring). The
#: special-token ids are those of make-checkpoint's trained tokenizer (``<|endoftext|>`` 0, ``<|pad|>`` 1).
TINY_OVERRIDES: dict[str, Any] = {
    "vocab_size": 2048, "hidden_size": 512, "intermediate_size": 1024, "moe_intermediate_size": 256,
    "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8, "q_lora_rank": 512,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "linear_num_heads": 4,
    "max_position_embeddings": 8192, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 1,
}


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


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _overrides(index_topk, num_layers, num_heads, max_position_embeddings=None) -> dict[str, int]:
    """The checked ``Glm5NextTextConfig`` arguments make-checkpoint's options give (None: the form's default)."""
    if not _integer(index_topk) or index_topk <= 0 or index_topk % INDEX_TOPK_MULTIPLE:
        raise UserInputError(f"index_topk {index_topk!r} is not a positive multiple of {INDEX_TOPK_MULTIPLE}; "
                             f"accepted: e.g. 2048 (GLM-5.3-Flash's)")
    out = {"index_topk": index_topk}
    if num_layers is not None:
        if not _integer(num_layers) or not MIN_LAYERS <= num_layers <= MAX_LAYERS:
            raise UserInputError(f"num_layers {num_layers!r} is not accepted with --preset {PRESET} (every 4th layer "
                                 f"is an MLA layer, the first is layer 3); accepted: an integer from {MIN_LAYERS} to "
                                 f"{MAX_LAYERS}")
        out["num_hidden_layers"] = num_layers
    if num_heads is not None:
        if not _integer(num_heads) or not 1 <= num_heads <= MAX_HEADS:
            raise UserInputError(f"heads (num_attention_heads) {num_heads!r} is not accepted; accepted: an integer "
                                 f"from 1 to {MAX_HEADS}")
        out["num_attention_heads"] = out["num_key_value_heads"] = num_heads
    if max_position_embeddings is not None:
        if not _integer(max_position_embeddings) or not 1 <= max_position_embeddings <= MAX_POSITIONS:
            raise UserInputError(f"max_position_embeddings {max_position_embeddings!r} is not accepted; accepted: an "
                                 f"integer from 1 to {MAX_POSITIONS} (the tiny preset's default: 8192)")
        out["max_position_embeddings"] = max_position_embeddings
    return out


def glm5next_config(index_topk: int = 2048, num_layers: int | None = None, num_heads: int | None = None, *,
                    tiny: bool = False, max_position_embeddings: int | None = None) -> dict[str, Any]:
    """GLM-5.3-Flash's ``config.json`` dict (see the module docstring): transformers' ``Glm5NextTextConfig`` -- with
    ``tiny``, over :data:`TINY_OVERRIDES` -- with ``index_topk``, ``num_hidden_layers``, ``num_attention_heads`` =
    ``num_key_value_heads`` and (``tiny`` only) ``max_position_embeddings`` (None: the form's default), in the flat
    ``glm5_next`` form, ``dtype`` bfloat16, plus :data:`VLLM_KEYS`.

    Raises :class:`UserInputError` (one line): a transformers without ``glm5_next``, an ``index_topk`` that is not a
    positive multiple of 128, a layer count outside :data:`MIN_LAYERS`..:data:`MAX_LAYERS`, a head count outside
    1..:data:`MAX_HEADS`, ``max_position_embeddings`` outside 1..:data:`MAX_POSITIONS` or given without ``tiny``, or
    what transformers' own validation refuses (e.g. an ``index_topk`` ``index_kpool`` does not divide), in its words.
    """
    cls = _text_config_class()
    if max_position_embeddings is not None and not tiny:
        raise UserInputError(f"--max-position-embeddings {max_position_embeddings!r} with --config-only: the config "
                             f"keeps GLM-5.3-Flash's own; accepted: --max-position-embeddings with the tiny "
                             f"(weights) form of --preset {PRESET}")
    kwargs = {**(TINY_OVERRIDES if tiny else {}), **_overrides(index_topk, num_layers, num_heads,
                                                              max_position_embeddings)}
    try:
        text = cls(**kwargs)        # transformers' @strict validation runs here (validate_architecture)
    except Exception as e:  # noqa: BLE001 - huggingface_hub's StrictDataclass errors are no ValueError
        given = {k: v for k, v in kwargs.items() if k not in TINY_OVERRIDES or TINY_OVERRIDES[k] != v}
        raise UserInputError(f"transformers' Glm5NextTextConfig refuses {given}: {' '.join(str(e).split())[:200]}; "
                             f"accepted: make-checkpoint's defaults for --preset {PRESET}") from None
    cfg = {k: v for k, v in text.to_dict().items() if k not in _NOT_WRITTEN}
    cfg.update(model_type="glm5_next", architectures=[GLM5_NEXT_ARCHITECTURES[0]], dtype="bfloat16", **VLLM_KEYS)
    return cfg


def refuse_options(*, config_only: bool, mtp: bool, gguf, seed, **sharing) -> None:
    """make-checkpoint's options the preset cannot honour: one UserInputError line naming the first one given. The
    tiny (weights) form writes no MTP layer, no GGUF and no top-k sharing (transformers' ``indexer_types`` schedule
    stays); ``--config-only`` writes no weights, so ``--seed`` (where not the default 0) is refused there too."""
    given = (["--mtp"] if mtp else []) + (["--gguf"] if gguf else []) + \
        (["--seed"] if config_only and seed != 0 else []) + \
        ["--" + k.replace("_", "-") for k, v in sharing.items() if v is not None]
    if not given:
        return
    if config_only:
        raise UserInputError(f"{given[0]} with --preset {PRESET} --config-only: only config.json is written (no "
                             f"weights, tokenizer, MTP layer, GGUF or top-k sharing); accepted: --config-only with "
                             f"--index-topk, --layers, --heads or --overwrite")
    raise UserInputError(f"{given[0]} with --preset {PRESET}: its tiny checkpoint has no MTP layer, GGUF or top-k "
                         f"sharing (transformers' schedule: every MLA layer runs its indexer); accepted: --preset "
                         f"{PRESET} with --index-topk, --layers, --heads, --seed, --max-position-embeddings, "
                         f"--config-only or --overwrite")
