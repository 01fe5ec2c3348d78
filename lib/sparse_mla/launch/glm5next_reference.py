"""GLM-5.3-Flash's float64 reference: transformers' own model of it, run in float64 on a checkpoint directory.

:class:`Glm5NextReference` is transformers' ``Glm5NextTextModel`` (``transformers/models/glm5_next/
modeling_glm5_next.py``: KDA linear attention with its chunked PyTorch path, the NoPE MLA with the KPool DSA indexer's
top-k mask, MHC residual streams, the sigmoid router with its correction bias, SwiGLU clamped at ``swiglu_limit``) plus
the checkpoint's ``lm_head`` -- independent of vLLM and of this workbook's kernels. transformers has no text-only causal
LM class for ``glm5_next`` (only ``Glm5NextForConditionalGeneration``, with a vision tower), so the head is applied
here: ``logits = lm_head.weight @ final hidden state``, as vLLM's ``Glm5NextForCausalLM`` (``_LOGIT_SCALE`` 1.0).
The weights load through transformers' ``from_pretrained`` (its ``glm5_next`` conversion: per-expert tensors stacked,
``q/k/v_conv1d`` concatenated, ``hc_*`` renamed); a checkpoint that leaves one of its parameters unset is refused.

Float64 throughout: the model's parameters are float64, and transformers' float32 up-casts (``.float()``,
``.to(torch.float32)``, ``dtype=torch.float32`` in the router, the MHC mixing, the KDA gates and recurrences, the
eager softmax) would otherwise round there; :func:`float64_upcasts` (a ``TorchFunctionMode``) turns each of those into
float64 while the model runs, so no operation of the forward rounds to float32 (``tests/launch/test_glm5next_checkpoint.py``
holds every module's floating outputs to float64). The attention and experts run transformers' ``eager`` paths.

Greedy decoding recomputes the whole sequence at every step (no cache): transformers' prefill path only.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UserInputError, expand_path
from ..models import is_glm5_next


def _float64_mode():
    """The ``TorchFunctionMode`` class of :func:`float64_upcasts` (torch imported on first use)."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Float64(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.float and args[0].is_floating_point():
                return args[0].to(torch.float64)
            args = tuple(torch.float64 if a is torch.float32 else a for a in args)
            if kwargs.get("dtype") is torch.float32:
                kwargs["dtype"] = torch.float64
            return func(*args, **kwargs)

    return Float64


@contextlib.contextmanager
def float64_upcasts() -> Iterable[None]:
    """While it is entered, every torch call that asks for float32 -- ``Tensor.float()`` of a floating tensor,
    ``torch.float32`` as a positional argument (``.to``, ``.type``) or as ``dtype=`` -- gets float64 instead."""
    with _float64_mode()():
        yield


def _checked_dir(path: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """The checkpoint folder and its ``config.json``; one UserInputError line for a missing folder, config, weights,
    or a config that is not GLM-5.3-Flash's."""
    from ..files import read_json

    d = expand_path(path, "checkpoint")
    accepted = "accepted: a GLM-5.3-Flash checkpoint folder (`sparse-mla make-checkpoint OUT --preset glm-5.3-flash`)"
    if not d.is_dir() or not (d / "config.json").is_file():
        raise UserInputError(f"checkpoint {str(path)!r} is not a folder with config.json; {accepted}")
    cfg = read_json(d / "config.json", accepted="a Hugging Face config.json")
    if not is_glm5_next(cfg):
        raise UserInputError(f"checkpoint {str(path)!r} has model_type {cfg.get('model_type')!r}, not GLM-5.3-Flash's "
                             f"'glm5_next'; {accepted}")
    if not any(d.glob("*.safetensors")):
        raise UserInputError(f"checkpoint {str(path)!r} has no *.safetensors (a --config-only config?); {accepted}")
    return d, cfg


def _lm_head(d: Path):
    """``lm_head.weight`` of the checkpoint folder ``d`` (UserInputError where no safetensors file holds it)."""
    from safetensors import safe_open

    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            if "lm_head.weight" in sf.keys():
                return sf.get_tensor("lm_head.weight")
    raise UserInputError(f"checkpoint {str(d)!r} has no lm_head.weight; accepted: a causal-LM checkpoint with its "
                         f"output head (make-checkpoint --preset glm-5.3-flash writes one)")


class Glm5NextReference:
    """transformers' GLM-5.3-Flash text model and the checkpoint's output head, in float64 (module docstring)."""

    def __init__(self, model, lm_head_weight, vocab_size: int):
        self.model, self.lm_head_weight, self.vocab_size = model, lm_head_weight, vocab_size

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, device: str = "cpu") -> "Glm5NextReference":
        """Load the checkpoint folder ``path`` in float64 onto ``device``. Raises :class:`UserInputError` (one line)
        for a folder that is not a GLM-5.3-Flash checkpoint with weights, a transformers without ``glm5_next``, or
        weights that leave a parameter of transformers' model unset or hold a tensor it does not know."""
        import torch
        from transformers.utils import logging as hf_logging

        from .glm5next_weights import text_config

        d, cfg = _checked_dir(path)
        text = text_config(cfg)
        from transformers.models.glm5_next.modeling_glm5_next import Glm5NextTextModel

        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()       # its load report names lm_head.weight, which is read below
        try:
            model, info = Glm5NextTextModel.from_pretrained(
                str(d), config=text, dtype=torch.float64, attn_implementation="eager",
                experts_implementation="eager", output_loading_info=True)
        finally:
            hf_logging.set_verbosity(level)
        wrong = {k: sorted(v) for k, v in info.items() if k != "unexpected_keys" and v}
        extra = sorted(set(info["unexpected_keys"]) - {"lm_head.weight"})
        if wrong or extra:
            raise UserInputError(f"checkpoint {str(path)!r} does not fit transformers' Glm5NextTextModel: "
                                 f"{wrong or {'unexpected_keys': extra}}"[:400] + "; accepted: a checkpoint "
                                 f"make-checkpoint --preset glm-5.3-flash writes")
        model = model.to(device=device, dtype=torch.float64).eval()
        return cls(model, _lm_head(d).to(device=device, dtype=torch.float64), text.vocab_size)

    def _ids(self, input_ids):
        """``input_ids`` as a ``[1, T]`` long tensor on the model's device; UserInputError for an empty sequence or an
        id outside the vocabulary."""
        import torch

        ids = torch.as_tensor(input_ids).reshape(-1).long()
        if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size:
            raise UserInputError(f"input ids {ids.tolist()[:8]}... are not accepted; accepted: a non-empty sequence of "
                                 f"token ids from 0 to {self.vocab_size - 1}")
        return ids.to(self.lm_head_weight.device)[None]

    def logits(self, input_ids) -> Any:
        """Float64 logits ``[T, vocab]`` of the token ids ``input_ids`` (a sequence or tensor of ``T`` ints), one
        causal prefill. Raises :class:`UserInputError` for an empty sequence or an id outside the vocabulary."""
        import torch

        ids = self._ids(input_ids)
        with torch.no_grad(), float64_upcasts():
            hidden = self.model(input_ids=ids, use_cache=False).last_hidden_state[0]
            return hidden @ self.lm_head_weight.T

    def greedy(self, prompt, max_tokens: int) -> dict[str, Any]:
        """Greedy continuation of ``prompt`` by ``max_tokens`` tokens (each step a whole prefill). Returns
        ``{"token_ids": [int], "logprobs": [float] (each chosen token's), "top2_gaps": [float] (its log-prob minus the
        runner-up's), "first_logprobs": float64 tensor [vocab] (the log-softmax at the prompt's last position)}``.
        Raises :class:`UserInputError` for a ``max_tokens`` that is not an integer >= 1, or bad ids."""
        import torch

        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise UserInputError(f"max_tokens {max_tokens!r} is not accepted; accepted: an integer >= 1")
        ids = self._ids(prompt)[0].tolist()
        out: dict[str, Any] = {"token_ids": [], "logprobs": [], "top2_gaps": []}
        for step in range(max_tokens):
            lp = torch.log_softmax(self.logits(ids)[-1], -1)
            top = torch.topk(lp, 2)
            if step == 0:
                out["first_logprobs"] = lp.cpu()
            out["token_ids"].append(int(top.indices[0]))
            out["logprobs"].append(float(top.values[0]))
            out["top2_gaps"].append(float(top.values[0] - top.values[1]))
            ids.append(int(top.indices[0]))
        return out
