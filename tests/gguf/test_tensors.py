"""sparse_mla.gguf.tensors: a GGUF's tensors against the config vLLM reads, whichever loader would read them (issue 47
item 3): a split with a shard of another split (tensors twice) or of another model (an 8-head shard inside a 64-head
split) is named, in the diagnosis with and without ``--with-plugin`` and in launch's check; the shape table is that of
the files llama.cpp's layout gives, and every entry of it can fail; the checks the weights adapter's load plan makes
too (indexer tensors, coverage both ways, shards)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.diagnose import diagnose  # noqa: E402
from sparse_mla.diagnose.gguf import read_gguf  # noqa: E402
from sparse_mla.errors import UserInputError  # noqa: E402
from sparse_mla.gguf.tensors import (check_coverage, check_indexer_tensors, check_shards, expected_shapes,  # noqa: E402
                                     shape_problems)
from sparse_mla.gguf.writer import write_gguf  # noqa: E402
from sparse_mla.launch.checkpoint import make_checkpoint  # noqa: E402

pytestmark = pytest.mark.gguf

SHARDS = [f"model-Q8_0-{i:05d}-of-00004.gguf" for i in range(1, 5)]


@pytest.fixture(scope="module")
def splits(module_tmp):
    """{name: checkpoint}: the 64-head model split 12 tensors a shard, the same split 13 a shard, the 8-head model
    split 12 a shard (the same shard names, split.no and split.count throughout)."""
    root = module_tmp("tensors")
    kw = dict(index_topk=256, seed=3, gguf=("Q8_0",))
    return {"a": make_checkpoint(root / "a", gguf_split_max_tensors=12, **kw),
            "b": make_checkpoint(root / "b", gguf_split_max_tensors=13, **kw),
            "h8": make_checkpoint(root / "h8", gguf_split_max_tensors=12, num_heads=8, **kw)}


def _mixed(splits, tmp_path, other: str):
    """The 64-head split with its second shard taken from ``other``."""
    out = tmp_path / f"with_{other}"
    shutil.copytree(splits["a"], out)
    shutil.copyfile(splits[other] / SHARDS[1], out / SHARDS[1])
    return out


def _shapes(folder):
    return {t.name: tuple(int(s) for s in reversed(t.shape)) for n in SHARDS
            for t in gguf.GGUFReader(str(folder / n)).tensors}


def test_the_shape_table_is_the_files_and_each_entry_can_fail(splits):
    """Every tensor of the model's own blocks and the top level has a shape in the table, and it is the file's (the
    MTP-free fixture); a config with another head count, q_lora_rank, kv_lora_rank, hidden size, indexer or expert
    geometry moves every entry that depends on it."""
    cfg = json.loads((splits["a"] / "config.json").read_text())
    shapes = _shapes(splits["a"])
    top, block = expected_shapes(cfg)
    assert {n if not n.startswith("blk.") else n.split(".", 2)[-1] for n in shapes} == set(top) | set(block)
    assert shape_problems(shapes, cfg) == []
    for key in ("num_attention_heads", "q_lora_rank", "kv_lora_rank", "hidden_size", "qk_nope_head_dim",
                "qk_rope_head_dim", "v_head_dim", "index_n_heads", "index_head_dim", "intermediate_size",
                "n_routed_experts", "moe_intermediate_size", "n_shared_experts", "vocab_size"):
        other = {**cfg, key: cfg[key] * 2}
        moved = {p.split(" is ")[0] for p in shape_problems(shapes, other)}
        top2, block2 = expected_shapes(other)
        changed = {n for n in shapes if (top2.get(n) or block2.get(n.split(".", 2)[-1]))
                   != (top.get(n) or block.get(n.split(".", 2)[-1]))}
        assert moved and moved == changed, key


def test_a_shard_of_another_split_is_refused_naming_the_tensors_held_twice(splits, tmp_path):
    """Its split.no and split.count are right; its tensors are not: named before the indexer check (which would
    call the file one converted without the indexer)."""
    folder = _mixed(splits, tmp_path, "b")
    with pytest.raises(UserInputError, match=rf"tensors held by more than one shard: in {SHARDS[1]} and {SHARDS[2]}: "
                                             rf"blk\.\d+\.\S+"):
        read_gguf(str(folder / SHARDS[0]))      # breaker round 12 (n10, n19): both files named


@pytest.mark.parametrize("with_plugin", [False, True])
def test_a_shard_stating_another_splits_tensor_count_is_named_before_its_tensors(splits, tmp_path, with_plugin):
    """Breaker round 10 (x2): shard 2 of a 3-layer model's split (split.tensors.count 67 among 44s) was refused as a
    GGUF "converted without the lightning indexer"; the shard that disagrees is named, with or without the plugin."""
    folder = tmp_path / "other_count"
    shutil.copytree(splits["a"], folder)
    field = gguf.GGUFReader(str(folder / SHARDS[1]), "r+").get_field("split.tensors.count")
    total = int(field.contents())
    field.parts[field.data[0]][0] = total + 23               # gguf-py's memmap: the value, in place
    with pytest.raises(UserInputError) as e:
        diagnose(str(folder / SHARDS[0]), "9.0", "auto", with_plugin=with_plugin)
    assert (f"{SHARDS[1]} says split.count 4, split.tensors.count {total + 23}; the other shards say split.count 4, "
            f"split.tensors.count {total}: a shard of another split" in str(e.value)), str(e.value)


@pytest.mark.parametrize("with_plugin", [False, True])
def test_an_8_head_shard_inside_a_64_head_split_is_a_blocker_with_or_without_the_plugin(splits, tmp_path,
                                                                                          with_plugin):
    folder = _mixed(splits, tmp_path, "h8")
    held = {t.name for t in gguf.GGUFReader(str(folder / SHARDS[1])).tensors}
    rec = diagnose(str(folder / SHARDS[0]), "9.0", "auto", with_plugin=with_plugin)
    wall = rec["checkpoint"]["wall"]
    q_b = next(n for n in sorted(held) if n.endswith(".attn_q_b.weight") and "indexer" not in n)
    assert f"{q_b} is [{8 * 256}, 512], the config's geometry gives [{64 * 256}, 512]" in wall["tensors"]
    assert f"shape is not the config's: in {SHARDS[1]}: " in wall["tensors"]     # round 12 (n01-n03): the shard
    assert not any(f"in {n}" in wall["tensors"] for n in SHARDS if n != SHARDS[1])
    assert wall["tensors"] in wall["blocker"] and rec["engine_starts"] is False
    good = diagnose(str(splits["a"] / SHARDS[0]), "9.0", "auto", with_plugin=with_plugin)["checkpoint"]["wall"]
    assert good["tensors"] == "ok"


def test_launch_refuses_the_8_head_shard_before_an_engine_starts(splits, tmp_path):
    pytest.importorskip("vllm_gguf_plugin", reason="launch loads a GGUF through vllm-gguf-plugin")
    from sparse_mla.launch.engine import check_model

    folder = _mixed(splits, tmp_path, "h8")
    with pytest.raises(UserInputError, match=r"would not load: .*tensors whose shape is not the config's"):
        check_model(str(folder / SHARDS[0]))
    assert check_model(str(splits["a"] / SHARDS[0])) == splits["a"] / SHARDS[0]


@pytest.mark.parametrize("form", ["file", pytest.param("DIR:QUANT", marks=pytest.mark.slow)])
def test_launch_on_a_gguf_prints_only_its_answer_in_a_fresh_process(splits, tmp_path, form):
    """Breaker round 12 (class 8): launch's GGUF checks import vLLM, whose import logged four "Failed to import from
    vllm._C" warnings on stdout (and torch's "No CUDA runtime" on stderr) before the answer; they run under the
    diagnosis' ``quiet_logs``: stdout empty, stderr the one refusal naming the shard. Round 13 (M6: l01, l02): the
    DIR:QUANT form's plugin test ran before them (is_gguf); a fresh process each (the slow tier has the second,
    the default tier :func:`test_whether_a_model_is_a_gguf_imports_neither_the_plugin_nor_vllm`)."""
    pytest.importorskip("vllm_gguf_plugin", reason="launch loads a GGUF through vllm-gguf-plugin")
    import subprocess
    import sys

    folder = _mixed(splits, tmp_path, "h8")
    model = str(folder / SHARDS[0]) if form == "file" else f"{folder}:Q8_0"
    import os

    import sparse_mla

    lib = str(Path(sparse_mla.__file__).resolve().parents[1])       # this package, not one installed elsewhere
    r = subprocess.run([sys.executable, "-m", "sparse_mla", "launch", "--model", model], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path, env={**os.environ, "PYTHONPATH": lib})
    assert r.returncode == 2 and r.stdout == "", r.stdout[-2000:]
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("sparse-mla launch: error: "), r.stderr[-2000:]
    assert f"in {SHARDS[1]}: " in r.stderr


def test_whether_a_model_is_a_gguf_imports_neither_the_plugin_nor_vllm(splits, monkeypatch):
    """is_gguf is the form alone: the plugin's quant test (it imports vLLM, which logs on stdout) is the reader's,
    under launch's quiet_logs for every GGUF form (round 13, M6: DIR:QUANT's ran before it); its refusal stays."""
    from sparse_mla.gguf import files

    def plugin(*a):
        raise AssertionError(f"the plugin asked for {a} while telling the form")

    with monkeypatch.context() as m:
        m.setattr(files, "plugin_object", plugin)
        assert files.is_gguf(f"{splits['a']}:Q8_0") and files.is_gguf(f"{splits['a']}:q8_0")
        assert files.is_gguf(str(splits["a"] / SHARDS[0])) and not files.is_gguf(str(splits["a"]))
    if files.plugin_object("gguf_utils", "is_local_gguf_quant") is not None:
        with pytest.raises(UserInputError, match="vllm-gguf-plugin does not take 'q8_0'"):
            files.reference(f"{splits['a']}:q8_0")


@pytest.mark.every_line
def test_gguf_without_indexer_tensors_is_refused_by_name(q4k_gguf, tmp_path):
    out, cfg, state, _ = q4k_gguf
    dense = {k: v for k, v in state.items() if ".indexer." not in k}
    [p] = write_gguf(tmp_path / "dense.gguf", cfg, dense, out, "Q8_0")
    names = [t.name for t in gguf.GGUFReader(str(p)).tensors]
    with pytest.raises(UserInputError, match=r"no DSA indexer tensors \(blk\.0\.indexer\.attn_q_b\.weight.*refused"):
        check_indexer_tensors(names, cfg["num_hidden_layers"], str(p))
    check_indexer_tensors([t.name for t in q4k_gguf[3].tensors], cfg["num_hidden_layers"], "ok")


@pytest.mark.every_line
def test_check_coverage_names_both_directions_for_the_models_own_tensors():
    ok = {"token_embd.weight": "e", "output.weight": "h", "blk.0.attn_norm.weight": "n", "blk.2.eh_proj.weight": "m"}
    described = {*ok, "blk.1.exp_probs_b.bias"}
    check_coverage(["token_embd.weight", "output.weight", "blk.0.attn_norm.weight", "output.bias",
                       "blk.2.enorm.weight", "blk.0.attn_kv_b.weight"], ok, "m.gguf", main_layers=2,
                      described=described)      # MTP blocks and what the metadata does not describe pass
    with pytest.raises(UserInputError, match=r"'m\.gguf': tensors of blocks no layer of the config has \(its blocks: "
                                             r"blk\.0 \.\. blk\.2\): in m-2\.gguf: blk\.3\.enorm\.weight; refused"):
        check_coverage(["token_embd.weight", "output.weight", "blk.0.attn_norm.weight", "blk.3.enorm.weight"], ok,
                       "m.gguf", 2, described, {"blk.3.enorm.weight": ("m-2.gguf",)})   # round 12, n17: named
    with pytest.raises(UserInputError, match=r"'m\.gguf': tensors the config gives no vLLM parameter \(their values "
                                             r"would be ignored\): blk\.1\.exp_probs_b\.bias; tensors the config needs "
                                             r"that no file holds \(their parameters would stay empty\): output\.weight; "
                                             r"refused"):
        check_coverage(["token_embd.weight", "blk.0.attn_norm.weight", "blk.1.exp_probs_b.bias"], ok, "m.gguf", 2,
                          described)
    check_coverage(["token_embd.weight", "output.weight", "blk.0.attn_norm.weight", "blk.1.exp_probs_b.bias"], ok,
                      "m.gguf", 2, None)       # metadata that describes no config: only the missing are refused


class _Reader:
    def __init__(self, names, no=None, count=None, total=None):
        from types import SimpleNamespace

        self.tensors = [SimpleNamespace(name=n) for n in names]
        self._f = {"split.no": no, "split.count": count, "split.tensors.count": total}

    def get_field(self, key):
        from types import SimpleNamespace

        v = self._f.get(key)
        return None if v is None else SimpleNamespace(contents=lambda: v)


@pytest.mark.every_line
def test_check_shards_refuses_missing_shards_and_tensors_held_twice():
    check_shards([_Reader(["a"])], ["m.gguf"], "m.gguf")                      # an unsplit file
    check_shards([_Reader(["a"], 0, 2), _Reader(["b"], 1, 2)], ["m-1", "m-2"], "m")
    with pytest.raises(UserInputError, match=r"a split of 3 shards, found 2 \(m-1, m-2\), the first is shard 1"):
        check_shards([_Reader(["a"], 0, 3), _Reader(["b"], 1, 3)], ["m-1", "m-2"], "m")
    with pytest.raises(UserInputError, match=r"tensors held by more than one shard: in m-1 and m-2: b \(shards of "):
        check_shards([_Reader(["a", "b"], 0, 2), _Reader(["b"], 1, 2)], ["m-1", "m-2"], "m")


@pytest.mark.every_line
def test_check_shards_names_the_shard_whose_split_metadata_disagree_and_counts_the_tensors():
    """Breaker round 10 (x2): a shard of another split with the right split.no and split.count."""
    check_shards([_Reader(["a"], 0, 2, 2), _Reader(["b"], 1, 2, 2)], ["m-1", "m-2"], "m")
    with pytest.raises(UserInputError, match=r"m-2 says split.count 3, split.tensors.count 5; the other shards say "
                                             r"split.count 3, split.tensors.count 3: a shard of another split"):
        check_shards([_Reader(["a"], 0, 3, 3), _Reader(["b"], 1, 3, 5), _Reader(["c"], 2, 3, 3)],
                     ["m-1", "m-2", "m-3"], "m")
    with pytest.raises(UserInputError, match=r"its 2 shards hold 3 tensors \(m-1 2, m-2 1\), their "
                                             r"split.tensors.count 2: a shard"):
        check_shards([_Reader(["a", "c"], 0, 2, 2), _Reader(["b"], 1, 2, 2)], ["m-1", "m-2"], "m")
    names = iter(f"t{i}" for i in range(20))      # round 12, n11: a split by count, shard 2 of another one
    held = [[next(names) for _ in range(k)] for k in (4, 3, 4, 2)]
    with pytest.raises(UserInputError, match=r"its 4 shards hold 13 tensors \(m-2 holds 3; the other shards but the "
                                             r"last 4 each\), their split.tensors.count 14"):
        check_shards([_Reader(h, i, 4, 14) for i, h in enumerate(held)], ["m-1", "m-2", "m-3", "m-4"], "m")
