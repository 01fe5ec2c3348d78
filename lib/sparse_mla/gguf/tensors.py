"""A GGUF's tensors against a config: the checks the weights adapter's load plan
(:class:`~sparse_mla.vllm_plugin.gguf_adapter.GlmDsaGGUFAdapter`) and the diagnosis both make.

* :func:`check_shards`: the shards state one split (``split.count``, ``split.tensors.count``), none missing, no
  tensor held by two, as many tensors as the split states;
* :func:`check_indexer_tensors`: every block has the DSA indexer's tensors (a GGUF without them would run dense);
* :func:`check_coverage`: the name map of the config vLLM loads and the files' tensors agree on the model's own
  tensors (:func:`described_tensors`: those the GGUF's own metadata maps);
* :func:`tensor_problem`: all of that, and the shapes, for the config vLLM reads, asked whichever loader would read
  the files.

Of a split model, each refusal names the shard files that hold the tensors it lists (:func:`holders`; breaker round
12: "blk.1.attn_k_b.weight is [16, ...]" alone left a user of 60 shards to find the foreign one by hand).

vllm-gguf-plugin's default adapter refuses a ``glm-dsa`` GGUF before it reads a tensor, and stock vLLM 0.26 has no
GGUF loader: on those paths nothing looked at the tensors, so a split with a shard of another model (a tensor twice,
another missing, an 8-head shard inside a 64-head split) was diagnosed as if it would load. :func:`tensor_problem`
asks the same questions of every GGUF, loader aside:

* the tensors the config maps that no file holds (or that it gives no parameter):
  :func:`check_coverage`, the load plan's own check, with the config vLLM reads (the LM head as vllm-gguf-plugin's
  patch decides it: present or tied); a tensor held by two shards is refused before, where the files are read
  (:func:`check_shards` in :func:`sparse_mla.diagnose.gguf.read_gguf`);
* each tensor's shape against :func:`expected_shapes`: the shapes llama.cpp's ``glm-dsa`` converter writes for the
  config's geometry (``convert_hf_to_gguf.py``, ``GlmMoeDsaModel`` / ``DeepseekV2Model.modify_tensors``: ``kv_b_proj``
  split per head into ``attn_k_b`` [heads, kv_lora_rank, qk_nope_head_dim] and ``attn_v_b`` [heads, v_head_dim,
  kv_lora_rank]; experts stacked [n_routed_experts, ...]), in PyTorch's row-major order (gguf-py's ``shape``
  reversed).
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any

from ..errors import UserInputError
from .metadata import config_from_gguf, metadata_field
from .names import INDEXER_TENSORS, TOP_LEVEL, gguf_to_hf_names, gguf_to_vllm_names


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
    return [text for _, text in _wrong_shapes(shapes, cfg)]


def _wrong_shapes(shapes: dict[str, tuple[int, ...]], cfg: dict[str, Any]) -> list[tuple[str, str]]:
    top, block = expected_shapes(cfg)
    out = []
    for name, shape in shapes.items():
        want = top.get(name) if not name.startswith("blk.") else block.get(name.split(".", 2)[-1])
        if want is not None and tuple(shape) != tuple(want):
            out.append((name, f"{name} is {list(shape)}, the config's geometry gives {list(want)}"))
    return out


def tensor_problem(readers, cfg: dict[str, Any], source: str, files=None) -> str | None:
    """What is wrong with a GGUF model's tensors (every shard's ``readers``, gguf-py, of ``files``; no tensor twice)
    for the config vLLM reads (``cfg``, a Hugging Face config dict): a tensor the config needs that no file holds or
    that it gives no parameter (the load plan's check), a shape the config's geometry does not give
    (:func:`shape_problems`, the first four and a count), each named with the shard that holds it (:func:`holders`;
    ``files`` None: not named). None where nothing is."""
    names = [t.name for r in readers for t in r.tensors]
    where = holders(readers, files) if files is not None else None
    try:
        tied = {**cfg, "tie_word_embeddings": "output.weight" not in names}   # vllm-gguf-plugin's patch
        check_coverage(set(names), gguf_to_vllm_names(tied), source, int(cfg["num_hidden_layers"]),
                       described_tensors(readers[0], names), where)
    except UserInputError as e:
        return str(e)
    except (KeyError, TypeError, ValueError) as e:   # a config the name map cannot read: the config stage's to say
        return f"GGUF {source!r}: the config vLLM reads gives no tensor map ({type(e).__name__}: {e})"
    wrong = _wrong_shapes({t.name: tuple(int(s) for s in reversed(t.shape)) for r in readers for t in r.tensors},
                          cfg)
    if not wrong:
        return None
    return (f"GGUF {source!r}: tensors whose shape is not the config's: {_show_in(wrong, where, '; ')} (a shard of "
            f"another model, or the config.json of another); refused. accepted: every shard of one glm-dsa model, "
            f"with the config.json of the same model")


def check_indexer_tensors(tensor_names, n_layers: int, source: str) -> None:
    """Refuse a GGUF that lacks any DSA indexer tensor (:data:`INDEXER_TENSORS`) of blocks ``0 .. n_layers - 1``:
    :class:`UserInputError` naming the missing tensors -- such a file would run dense attention."""
    have = set(tensor_names)
    missing = [f"blk.{i}.{t}" for i in range(n_layers) for t in INDEXER_TENSORS if f"blk.{i}.{t}" not in have]
    if missing:
        shown = ", ".join(missing[:4]) + (f" ... ({len(missing)} in all)" if len(missing) > 4 else "")
        raise UserInputError(f"GGUF {source!r} has no DSA indexer tensors ({shown}): converted without the lightning "
                             f"indexer (early llama.cpp conversions of GLM-5 as glm4moe), it would run dense attention; "
                             f"refused. accepted: a glm-dsa GGUF with blk.N.indexer.* tensors (llama.cpp's converter "
                             f"with DSA support, or sparse-mla make-checkpoint --gguf)")


def _show(names: list[str], sep: str = ", ") -> str:
    return sep.join(names[:4]) + (f" ... ({len(names)} in all)" if len(names) > 4 else "")


def holders(readers, files) -> dict[str, tuple[str, ...]] | None:
    """``{tensor name: the names of the files that hold it, in file order}`` for a split model (each shard's gguf-py
    reader in ``readers``, its path in ``files``): what the refusals below name, so that the reader learns which
    shard to replace. None for a single file (nothing to tell apart)."""
    if len(files) < 2:
        return None
    out: dict[str, list[str]] = {}
    for r, f in zip(readers, files):
        for t in r.tensors:
            out.setdefault(t.name, []).append(os.path.basename(str(f)))
    return {n: tuple(v) for n, v in out.items()}


def _show_in(items: list[tuple[str, str]], where, sep: str = ", ") -> str:
    """``items`` (tensor name, what is said of it) grouped by the files that hold them (:func:`holders`: ``"in F1:
    a, b; in F2 and F3: c"``), the first four items shown (at least one of each group) and every group's count; past eight
    groups, only the files of the rest (sixteen of them). Without ``where``: the first four and a count."""
    if where is None:
        return _show([text for _, text in items], sep)
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, text in items:
        groups.setdefault(where.get(name, ()), []).append(text)
    parts, left = [], 4
    for files, texts in sorted(groups.items()):
        shown = texts[:max(left, 1)]
        left -= len(shown)
        more = f" ... ({len(texts)} in all)" if len(texts) > len(shown) else ""
        parts.append(f"in {' and '.join(files) or 'no file'}: {sep.join(shown)}{more}")
    rest = sorted(groups)[8:]
    return "; ".join(parts[:8]) + (f"; and in {len(rest)} more: {', '.join(' and '.join(k) for k in rest[:16])}"
                                   f"{' ...' if len(rest) > 16 else ''}" if rest else "")


def check_coverage(file_tensors, mapped, source: str, main_layers: int, described=None, where=None) -> None:
    """Refuse a load whose name map (GGUF name -> vLLM name, ``mapped``, from the config vLLM loads) and the files'
    tensors (``file_tensors``, every shard's) disagree on the model's own tensors -- :data:`TOP_LEVEL` and the blocks
    ``blk.0`` .. ``blk.{main_layers - 1}``: :class:`UserInputError` naming the tensors the config gives no parameter
    although the GGUF's own metadata describes them (``described``: the GGUF names of :func:`config_from_gguf`'s map;
    the config and the GGUF describe different models, e.g. a router bias that would be ignored), the tensors of a
    block that no layer of the config has (neither ``blk.0`` .. ``blk.{main_layers - 1}`` nor an MTP block the map
    names: a shard of a deeper model), and the mapped tensors no file holds (their parameters would stay empty);
    ``where`` (:func:`holders`) names the shard of each. The MTP blocks (``blk.{main_layers}`` on, as many as the
    map names) are left out otherwise: the model skips them; only MTP speculative decoding loads them. Tensors the
    metadata's map does not name either (``attn_kv_b`` beside ``attn_k_b``/``attn_v_b``, as some converters keep it)
    are ignored, as the plugin ignores them; with ``described`` None, every unmapped tensor is."""
    def block(name: str) -> int | None:
        part = name.split(".")[1] if name.startswith("blk.") else ""
        return int(part) if part.isdigit() else None

    def own(name: str) -> bool:
        if not name.startswith("blk."):
            return name in TOP_LEVEL
        return block(name) is not None and block(name) < main_layers

    have, want = set(file_tensors), set(mapped)
    layers = set(range(main_layers)) | ({block(n) for n in want} - {None})
    ignored = sorted(n for n in have - want if own(n) and n in set(described or ()))
    foreign = sorted(n for n in have if block(n) is not None and block(n) not in layers)
    absent = sorted(n for n in want - have if own(n))
    if not (ignored or foreign or absent):
        return
    parts = ([f"tensors the config gives no vLLM parameter (their values would be ignored): "
              f"{_show_in([(n, n) for n in ignored], where)}"] if ignored else []) + (
        [f"tensors of blocks no layer of the config has (its blocks: "
         f"{f'blk.0 .. blk.{max(layers)}' if layers else 'none'}): "
         f"{_show_in([(n, n) for n in foreign], where)}"] if foreign else []) + (
        [f"tensors the config needs that no file holds (their parameters would stay empty): {_show(absent)}"]
        if absent else [])
    raise UserInputError(f"GGUF {source!r}: {'; '.join(parts)}; refused. accepted: every shard of one glm-dsa model "
                         f"as llama.cpp's converter writes it, with the config.json of the same model")


def described_tensors(first_reader, names) -> set[str] | None:
    """The GGUF names the model's own metadata maps (:func:`gguf_to_hf_names` of :func:`config_from_gguf`), or None
    where the metadata lacks what that config needs (vLLM reads ``config.json``, not the metadata, so such a file is
    not refused for it here)."""
    try:
        return set(gguf_to_hf_names(config_from_gguf(first_reader, names)))
    except UserInputError:
        return None


#: What gguf-py's split writer (``GGUFWriter.write_header_to_file``) writes alike into every shard of one split: the
#: number of shards and of tensors in all of them (llama.cpp's ``gguf-split`` writes the same keys)
SPLIT_KEYS = ("split.count", "split.tensors.count")


def _one_split(readers, files, source: str) -> None:
    """Every shard states the same :data:`SPLIT_KEYS` (the first's, or the most shards' where shard 1 is the odd
    one): a shard of another split (round 10: a 3-layer model's shard 2, ``split.tensors.count`` 67 among 44s, was
    refused as a GGUF converted without the indexer) is named before anything asks what its tensors lack."""
    said = [tuple(metadata_field(r, k, None) for k in SPLIT_KEYS) for r in readers]
    split = Counter(said).most_common(1)[0][0]
    odd = [f"{os.path.basename(str(f))} says {', '.join(f'{k} {x}' for k, x in zip(SPLIT_KEYS, v))}"
           for f, v in zip(files, said) if v != split]
    if odd:
        raise UserInputError(f"GGUF {source!r}: {'; '.join(odd)}; the other shards say "
                             f"{', '.join(f'{k} {x}' for k, x in zip(SPLIT_KEYS, split))}: a shard of another split; "
                             f"refused. accepted: the shards of one model, as written (the same "
                             f"{' and '.join(SPLIT_KEYS)} in each)")


def check_shards(readers, files, source: str) -> None:
    """Refuse what vllm-gguf-plugin's shard discovery (``_get_all_gguf_files``: the shards that exist) passes over
    silently: shards whose split metadata disagree (:func:`_one_split`: one of another split), a split whose first
    shard (``split.no`` 0, the metadata) or any other is missing (``split.count`` of the first file found), a tensor
    name held twice (shards of two splits mixed), and shards holding other than ``split.tensors.count`` tensors:
    :class:`UserInputError` naming them."""
    _one_split(readers, files, source)
    no, count = metadata_field(readers[0], "split.no", None), metadata_field(readers[0], "split.count", None)
    if count is not None and (no != 0 or len(files) != count):
        found = ", ".join(os.path.basename(str(f)) for f in files)
        raise UserInputError(f"GGUF {source!r}: a split of {count} shards, found {len(files)} ({found}), the first "
                             f"{'is' if no == 0 else 'is not'} shard 1 (split.no 0, the metadata); refused. accepted: "
                             f"every shard of the model in one folder")
    seen = Counter(t.name for r in readers for t in r.tensors)
    twice = sorted(n for n, k in seen.items() if k > 1)
    if twice:
        raise UserInputError(f"GGUF {source!r}: tensors held by more than one shard: "
                             f"{_show_in([(n, n) for n in twice], holders(readers, files))} (shards of different "
                             f"splits mixed?); refused. accepted: the shards of one model, as written")
    total = metadata_field(readers[0], SPLIT_KEYS[1], None)
    if isinstance(total, int) and sum(seen.values()) != total:
        raise UserInputError(f"GGUF {source!r}: its {len(files)} shards hold {sum(seen.values())} tensors "
                             f"({_shard_counts(readers, files)}), their {SPLIT_KEYS[1]} {total}: a shard of another "
                             f"split; refused. accepted: the shards of one model, as written")


def _shard_counts(readers, files) -> str:
    """Each shard's own tensor count (its header's, as gguf-py reads it), for a split whose counts do not add up to its
    ``split.tensors.count``: the shards whose count is not the one most others but the last hold where that is most
    of them (a split by tensor count, ``--split-max-tensors``), else every shard's (sixteen at most)."""
    counts = [(os.path.basename(str(f)), len(r.tensors)) for r, f in zip(readers, files)]
    body = Counter(k for _, k in counts[:-1]).most_common()
    if len(body) > 1 and body[0][1] > body[1][1] and body[0][1] * 2 > len(counts) - 1:
        usual = body[0][0]
        odd = [f"{n} holds {k}" for n, k in counts[:-1] if k != usual]
        return f"{', '.join(odd[:16])}{' ...' if len(odd) > 16 else ''}; the other shards but the last {usual} each"
    return ", ".join(f"{n} {k}" for n, k in counts[:16]) + (" ..." if len(counts) > 16 else "")
