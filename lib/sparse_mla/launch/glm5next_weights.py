"""The tiny GLM-5.3-Flash checkpoint's tensors: names and shapes from transformers' own model, values seeded here.

The names are those transformers writes: :func:`weight_shapes` builds transformers' ``Glm5NextTextModel``
(``transformers/models/glm5_next/modeling_glm5_next.py``) for the config on the meta device (no memory, no values) and
turns its parameter names into checkpoint names with transformers' own ``revert_weight_conversion``
(``transformers/core_model_loading.py``, what ``save_pretrained`` calls; the ``glm5_next`` entry of
``conversion_mapping.py``): ``attn_hc.fn`` -> ``hc_attn_fn`` (and ``base``, ``scale``, ``ffn_hc``),
``self_attn.forget_gate.{f_a_proj, f_b_proj, dt_bias, A_log}`` -> ``self_attn.{...}``, the KDA ``conv1d`` split into
``q_conv1d``/``k_conv1d``/``v_conv1d``, the stacked ``mlp.experts.gate_up_proj``/``down_proj`` split into
``mlp.experts.{e}.{gate_proj, up_proj, down_proj}``. They are prefixed ``model.`` and ``lm_head.weight`` is added: the
causal-LM layout vLLM's ``Glm5NextForCausalLM`` loads (``AutoWeightsLoader``: ``model.`` to ``Glm5NextModel.
load_weights``, ``lm_head.`` to its ``ParallelLMHead``) and transformers' ``Glm5NextTextModel.from_pretrained`` reads
(its ``model.`` prefix stripped; ``lm_head.weight`` is the one key it leaves, which
:class:`~sparse_mla.launch.glm5next_reference.Glm5NextReference` reads itself).

The values are not transformers' initialisation (linears ``N(0, 0.02)``, MHC and KPool gates constant, the
router's correction bias zero: activations fade and routing and pooling are ties): every tensor draws from its own
generator seeded from ``(seed, name)`` (the other presets' rule, :func:`_tensor_seed`) with scales that keep
activations O(1): linears and the MHC projections ``N(0, 1/fan_in)``, the KDA short convolutions ``N(0, 1/kernel)``,
the embedding ``N(0, 1)``, norm weights and the MHC scales ``1 + N(0, 0.05^2)``, biases (LayerNorm, the router's
correction, the KDA ``dt_bias``, ``A_log``, the MHC bases, the KPool position term) ``N(0, 0.05^2)``.

Dtypes are those of vLLM 0.34's parameters (``vllm/models/glm5next/common/``): float32 for :data:`FLOAT32_TENSORS`
(the MHC projections, ``A_log``, ``dt_bias``, the short convolutions, the KPool position term, the indexer's
LayerNorm, the router's correction bias), bfloat16 for everything else -- so vLLM holds exactly the values stored,
and the float64 reference reads the same values.
"""
from __future__ import annotations

import zlib
from typing import Any

from ..errors import UserInputError

#: Checkpoint-name endings stored in float32 (vLLM 0.34 holds these parameters in float32).
FLOAT32_TENSORS = ("hc_attn_fn", "hc_attn_base", "hc_attn_scale", "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale",
                   ".A_log", ".dt_bias", "_conv1d.weight", ".index_kpool_compress_ape", "indexer.k_norm.weight",
                   "indexer.k_norm.bias", ".e_score_correction_bias")
#: Checkpoint-name endings of bias-like tensors: ``N(0, 0.05^2)`` (see the module docstring).
_BIAS_LIKE = (".bias", ".e_score_correction_bias", ".dt_bias", ".A_log", "_base", ".index_kpool_compress_ape")
_SMALL_STD = 0.05


def text_config(cfg: dict[str, Any]):
    """transformers' ``Glm5NextTextConfig`` of a GLM-5.3-Flash ``config.json`` dict (the flat form
    :func:`~sparse_mla.launch.glm5next_config.glm5next_config` writes). Raises :class:`UserInputError` (one line)
    where transformers has no ``glm5_next`` or refuses the dict."""
    from .glm5next_config import _text_config_class

    cls = _text_config_class()
    keys = set(cls().to_dict())
    try:
        return cls(**{k: v for k, v in cfg.items() if k in keys and k not in ("model_type", "architectures")})
    except Exception as e:  # noqa: BLE001 - huggingface_hub's StrictDataclass errors are no ValueError
        raise UserInputError(f"transformers' Glm5NextTextConfig refuses the config: {' '.join(str(e).split())[:200]}; "
                             f"accepted: a config make-checkpoint --preset glm-5.3-flash writes") from None


#: Parts of transformers' parameter names that its glm5_next weight conversion renames (the module docstring): one left
#: after ``revert_weight_conversion`` means the installed transformers has no such conversion, and vLLM's loader
#: would refuse the checkpoint (vLLM 0.33: ``KeyError: 'layers.0.attn_hc.base'`` on the H100, 2026-12-06)
UNCONVERTED = (".attn_hc.", ".ffn_hc.", ".forget_gate.")


def weight_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Checkpoint tensor name -> shape of the causal LM for the GLM-5.3-Flash config dict ``cfg`` (see the module
    docstring: transformers' model on the meta device, its names reverted to checkpoint names, ``model.``-prefixed,
    plus ``lm_head.weight`` ``[vocab, hidden]``), in transformers' order. Raises :class:`UserInputError` as
    :func:`text_config`, and where a name keeps a part of :data:`UNCONVERTED` (a transformers without glm5_next's
    weight conversion, such as 5.17.0)."""
    import torch
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextTextModel

    text = text_config(cfg)
    with torch.device("meta"):
        model = Glm5NextTextModel(text)
    sd = revert_weight_conversion(model, model.state_dict())
    kept = [k for k in sd if any(m in k for m in UNCONVERTED)]
    if kept:        # transformers 5.17.0 has glm5_next but no weight conversion for it (H100, 2026-12-06)
        import transformers

        raise UserInputError(f"transformers {transformers.__version__} writes GLM-5.3-Flash's tensors under its own "
                             f"names ({kept[0]!r}, {len(kept)} in all), not the checkpoint names vLLM loads "
                             f"('hc_attn_base'...): it has no glm5_next weight conversion; accepted: a transformers "
                             f"whose conversion_mapping has glm5_next (5.22.2 was tested)")
    shapes = {"model." + k: tuple(v.shape) for k, v in sd.items()}
    shapes["lm_head.weight"] = (text.vocab_size, text.hidden_size)
    return shapes


def _tensor_seed(seed: int, name: str) -> int:
    """The generator seed of tensor ``name``: the other presets' rule (``checkpoint._tensor_seed``, not imported:
    checkpoint imports this module)."""
    return (int(seed) * 0x9E3779B1 + zlib.crc32(name.encode())) % (2**63 - 1)


def _init(name: str, shape: tuple[int, ...], seed: int):
    """One seeded tensor of the module docstring's scale, in its stored dtype (:data:`FLOAT32_TENSORS`: float32)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(_tensor_seed(seed, name))
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    if name.endswith(_BIAS_LIKE):
        x.mul_(_SMALL_STD)
    elif len(shape) == 1:                                   # norm weights, the MHC scales
        x.mul_(_SMALL_STD).add_(1.0)
    elif name == "model.embed_tokens.weight":
        pass                                                # N(0, 1): the residual streams start at unit scale
    else:       # fan-in = the last dim: linears [out, in], MHC projections [mix, 4 hidden], convs [channels, 1, kernel]
        x.mul_(shape[-1] ** -0.5)
    return x if name.endswith(FLOAT32_TENSORS) else x.to(torch.bfloat16)


def make_state_dict(cfg: dict[str, Any], seed: int = 0) -> dict:
    """Seeded tensors (module docstring) under :func:`weight_shapes`' names: ``{name: tensor}``, bfloat16 except
    :data:`FLOAT32_TENSORS`. The same ``(cfg, seed)`` gives the same values; each tensor depends only on the seed, its
    name and its shape."""
    return {name: _init(name, shape, seed) for name, shape in weight_shapes(cfg).items()}
