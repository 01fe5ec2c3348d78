"""A GLM-5 GGUF read back as the checkpoint it was made from: the config beside it and its dequantized weights.

vllm-gguf-plugin (0.0.5, ``GGUFConfigParser`` / ``EngineArgs.create_model_config``) takes a GGUF model's config from
the folder the file is in (or ``--tokenizer`` / ``--hf-config-path``) and only its weights from the file. The
reference forward on a GGUF does the same: :func:`load_gguf_checkpoint` returns that folder's ``config.json`` and the
GGUF's tensors dequantized by gguf-py (``gguf.quants.dequantize``), renamed back to the Hugging Face names the
safetensors hold -- the inverse of llama.cpp's converter (:mod:`sparse_mla.gguf.writer`): gguf-py's
``glm-dsa`` names -> Hugging Face names (:func:`~sparse_mla.gguf.names.gguf_to_hf_names`), stacked experts
``ffn_*_exps`` split per expert, ``attn_k_b`` / ``attn_v_b`` joined into ``kv_b_proj``, ``exp_probs_b.bias`` ->
``e_score_correction_bias`` (:func:`~sparse_mla.gguf.dequantize.from_converter_tensors`).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserInputError

def gguf_config(path: str | os.PathLike, info: dict | None = None) -> tuple[Path, dict]:
    """``(the GGUF's first file, config dict)``: the ``config.json`` in the GGUF's folder, after checking that
    ``path`` (a file, any shard of a split model, or vllm-gguf-plugin's ``DIR:QUANT``;
    :mod:`sparse_mla.gguf.files`) is a ``glm-dsa`` GGUF with every shard present, the DSA indexer tensors,
    and metadata that describes that config (:data:`sparse_mla.diagnose.gguf_config.AGREE`). ``info``: the
    :func:`~sparse_mla.diagnose.gguf.read_gguf` record of ``path`` where the caller has read it already (its files
    are then not read again).

    Raises :class:`UserInputError` for a missing file, shard or ``config.json``, a file gguf-py cannot read, another
    architecture, missing indexer tensors, or a config the GGUF contradicts (naming the key and both values)."""
    from ..diagnose.gguf import read_gguf

    if info is None:
        info = read_gguf(path)   # files, architecture, metadata, indexer tensors, another model's config: refused there
    if info["config_json"] is None:
        raise UserInputError(f"GGUF model {str(path)!r} has no config.json beside it: vllm-gguf-plugin reads the "
                             f"model's config from the GGUF's folder; accepted: a .gguf file in a folder with the "
                             f"model's config.json and tokenizer (sparse-mla make-checkpoint OUT --gguf Q8_0)")
    return Path(info["path"]), info["config_json"]


def load_gguf_checkpoint(path: str | os.PathLike) -> tuple[dict, dict]:
    """``(config dict, {Hugging Face name: float32 tensor})`` of a GLM-5 GGUF (see the module docstring): the names
    and shapes :func:`sparse_mla.launch.checkpoint.load_checkpoint` gives for the safetensors it was made from.
    A tensor the config maps to no name is skipped, as vllm-gguf-plugin skips it. Needs gguf-py (``pip install
    'sparse-mla-workbook[gguf]'``). Raises :class:`UserInputError` as :func:`gguf_config` does."""
    from ..diagnose.gguf import read_gguf
    from ..gguf.dequantize import dequantize, from_converter_tensors
    from ..gguf.files import read_model
    from ..gguf.names import gguf_to_hf_names

    model = read_model(path)                   # every shard read once: checked, then its tensors dequantized
    _, cfg = gguf_config(path, read_gguf(path, model=model))
    names = gguf_to_hf_names(cfg)
    tensors = (t for r in model[2] for t in r.tensors)    # every shard's
    return cfg, from_converter_tensors(cfg, ((names[t.name], dequantize(t)) for t in tensors if t.name in names))
