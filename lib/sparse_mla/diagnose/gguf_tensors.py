"""A GGUF's tensors against the config vLLM builds the model from, asked whichever loader would read them.

vllm-gguf-plugin's default adapter refuses a ``glm-dsa`` GGUF before it reads a tensor, and stock vLLM 0.26 has no
GGUF loader: on those paths nothing looked at the tensors, so a split with a shard of another model (a tensor twice,
another missing, an 8-head shard inside a 64-head split) was diagnosed as if it would load. :func:`tensor_problem`
asks the same questions of every GGUF, loader aside:

* the tensors the config maps that no file holds (or that it gives no parameter):
  :func:`sparse_mla.vllm_plugin.gguf_adapter.check_coverage`, the load plan's own check, with the config vLLM reads
  (the LM head as vllm-gguf-plugin's patch decides it: present or tied); a tensor held by two shards is refused
  before, where the files are read (``check_shards`` in :func:`sparse_mla.diagnose.gguf.read_gguf`);
* each tensor's shape against :func:`expected_shapes`: the shapes llama.cpp's ``glm-dsa`` converter writes for the
  config's geometry (``convert_hf_to_gguf.py``, ``GlmMoeDsaModel`` / ``DeepseekV2Model.modify_tensors``: ``kv_b_proj``
  split per head into ``attn_k_b`` [heads, kv_lora_rank, qk_nope_head_dim] and ``attn_v_b`` [heads, v_head_dim,
  kv_lora_rank]; experts stacked [n_routed_experts, ...]), in PyTorch's row-major order (gguf-py's ``shape``
  reversed).
"""
from __future__ import annotations

from typing import Any

from ..errors import UserInputError


def _block_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    D, nh = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    qr, kvr = cfg.get("q_lora_rank"), int(cfg["kv_lora_rank"])
    nope, rope = int(cfg.get("qk_nope_head_dim", 128)), int(cfg["qk_rope_head_dim"])
    v = int(cfg.get("v_head_dim", 128))
    out = {"attn_norm.weight": (D,), "ffn_norm.weight": (D,), "attn_kv_a_mqa.weight": (kvr + rope, D),
           "attn_kv_a_norm.weight": (kvr,), "attn_k_b.weight": (nh, kvr, nope), "attn_v_b.weight": (nh, v, kvr),
           "attn_output.weight": (D, nh * v)}
    if qr is not None:
        out.update({"attn_q_a.weight": (qr, D), "attn_q_a_norm.weight": (qr,),
                    "attn_q_b.weight": (nh * (nope + rope), int(qr))})
    ih, idim = cfg.get("index_n_heads"), cfg.get("index_head_dim")
    if ih is not None and idim is not None and qr is not None:
        out.update({"indexer.attn_q_b.weight": (ih * idim, qr), "indexer.attn_k.weight": (idim, D),
                    "indexer.proj.weight": (ih, D), "indexer.k_norm.weight": (idim,),
                    "indexer.k_norm.bias": (idim,)})
    if cfg.get("intermediate_size") is not None:
        inter = int(cfg["intermediate_size"])
        out.update({"ffn_gate.weight": (inter, D), "ffn_up.weight": (inter, D), "ffn_down.weight": (D, inter)})
    E, im = cfg.get("n_routed_experts"), cfg.get("moe_intermediate_size")
    if E is not None and im is not None:
        out.update({"ffn_gate_inp.weight": (E, D), "exp_probs_b.bias": (E,), "ffn_gate_exps.weight": (E, im, D),
                    "ffn_up_exps.weight": (E, im, D), "ffn_down_exps.weight": (E, D, im)})
        if cfg.get("n_shared_experts"):
            s = im * int(cfg["n_shared_experts"])
            out.update({"ffn_gate_shexp.weight": (s, D), "ffn_up_shexp.weight": (s, D), "ffn_down_shexp.weight": (D, s)})
    return out


def expected_shapes(cfg: dict[str, Any]) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """``(top-level name -> shape, block suffix -> shape)``: the PyTorch-order shapes of a ``glm-dsa`` GGUF's tensors
    for the Hugging Face config ``cfg`` (GLM-5 / DeepSeek-V3.2 keys), as llama.cpp's converter writes them (see the
    module docstring); a block tensor ``blk.N.<suffix>`` has its suffix's shape in every block."""
    D, V = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    top = {"token_embd.weight": (V, D), "output.weight": (V, D), "output_norm.weight": (D,)}
    return top, _block_shapes(cfg)


def shape_problems(shapes: dict[str, tuple[int, ...]], cfg: dict[str, Any]) -> list[str]:
    """``"NAME is [a, b], the config's geometry gives [c, d]"`` for each tensor of ``shapes`` (GGUF name ->
    PyTorch-order shape) whose shape is not :func:`expected_shapes`' for ``cfg``; tensors it has no shape for (MTP's
    own, converters' extras) are left alone."""
    top, block = expected_shapes(cfg)
    out = []
    for name, shape in shapes.items():
        want = top.get(name) if not name.startswith("blk.") else block.get(name.split(".", 2)[-1])
        if want is not None and tuple(shape) != tuple(want):
            out.append(f"{name} is {list(shape)}, the config's geometry gives {list(want)}")
    return out


def tensor_problem(readers, cfg: dict[str, Any], source: str) -> str | None:
    """What is wrong with a GGUF model's tensors (every shard's ``readers``, gguf-py; no tensor twice) for the config
    vLLM reads (``cfg``, a Hugging Face config dict): a tensor the config needs that no file holds or that it gives
    no parameter (the load plan's check), a shape the config's geometry does not give (:func:`shape_problems`, the
    first four and a count). None where nothing is."""
    from ..vllm_plugin.gguf_adapter import check_coverage, described_tensors, gguf_to_vllm_names

    names = [t.name for r in readers for t in r.tensors]
    try:
        tied = {**cfg, "tie_word_embeddings": "output.weight" not in names}   # vllm-gguf-plugin's patch
        check_coverage(set(names), gguf_to_vllm_names(tied), source, int(cfg["num_hidden_layers"]),
                       described_tensors(readers[0], names))
    except UserInputError as e:
        return str(e)
    except (KeyError, TypeError, ValueError) as e:   # a config the name map cannot read: the config stage's to say
        return f"GGUF {source!r}: the config vLLM reads gives no tensor map ({type(e).__name__}: {e})"
    wrong = shape_problems({t.name: tuple(int(s) for s in reversed(t.shape)) for r in readers for t in r.tensors},
                           cfg)
    if not wrong:
        return None
    more = f" ... ({len(wrong)} in all)" if len(wrong) > 4 else ""
    return (f"GGUF {source!r}: tensors whose shape is not the config's: {'; '.join(wrong[:4])}{more} (a shard of "
            f"another model, or the config.json of another); refused. accepted: every shard of one glm-dsa model, "
            f"with the config.json of the same model")
