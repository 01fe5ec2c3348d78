"""diagnose --model FILE.gguf: the config vLLM gets from the GGUF's metadata, the GGUF wall at the config stage
(stock vLLM 0.26: no GGUF loader; vllm-gguf-plugin: no glm-dsa map; ours: ok) and the record's checkpoint field."""
from __future__ import annotations

import json

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.diagnose import diagnose  # noqa: E402
from sparse_mla.diagnose.gguf import gguf_wall, read_gguf  # noqa: E402
from sparse_mla.errors import UserInputError  # noqa: E402
from sparse_mla.gguf.files import is_gguf  # noqa: E402
from sparse_mla.launch.checkpoint import load_checkpoint, make_checkpoint  # noqa: E402
from sparse_mla.gguf.writer import write_gguf  # noqa: E402

pytestmark = pytest.mark.gguf

try:
    import vllm_gguf_plugin  # noqa: F401
    PLUGIN = True
except ImportError:
    PLUGIN = False


@pytest.fixture(scope="module")
def ckpt(module_tmp):
    return make_checkpoint(module_tmp("dg") / "ck", index_topk=256, seed=7, gguf=("Q8_0",))


def test_diagnosis_of_a_gguf_names_the_gguf_wall_at_the_config_stage(ckpt):
    rec = diagnose(str(ckpt / "model-Q8_0.gguf"), "8.0", "auto")
    ck = rec["checkpoint"]
    assert ck["format"] == "gguf" and ck["quantization"] == "Q8_0" and ck["file"] == "model-Q8_0.gguf"
    assert set(ck["tensor_types"]) == {"F32", "Q8_0"}
    wall = ck["wall"]
    assert "has no GGUF loader" in wall["stock"] and "'gguf'" in wall["stock"]
    if PLUGIN:
        assert "Unknown gguf model_type: glm_moe_dsa" in wall["vllm_gguf_plugin"] and wall["with_plugin"] == "ok"
        assert wall["blocker"].endswith("; accepted: --with-plugin (this plugin's GlmDsaGGUFAdapter loads it)")
    else:
        assert "vllm-gguf-plugin is not installed" in wall["vllm_gguf_plugin"]
    assert rec["blockers"][0] == {"stage": "config", "reason": wall["blocker"]}
    assert rec["engine_starts"] is False and rec["stages"]["config"].startswith("BLOCKED")
    assert rec["stages"]["config"].endswith(wall["blocker"][-60:])   # the text line keeps the install hint at its end
    # the config vLLM built is the one the GGUF's metadata describes: the checkpoint's
    cfg, _ = load_checkpoint(ckpt)
    assert rec["config"]["architecture"] == "GlmMoeDsaForCausalLM" and rec["config"]["index_topk"] == 256
    assert rec["mla"] == "sparse (DSA)"
    assert rec["memory"]["quantization"] == "gguf-q8_0"
    json.dumps(rec)


def test_safetensors_checkpoint_record(ckpt):
    """A checkpoint folder's record and text carry the vllm serve line diagnosed, built as a GGUF's is."""
    from sparse_mla.diagnose import format_record

    rec = diagnose(str(ckpt), "8.0", "auto", with_plugin=True)
    serve = f"vllm serve {ckpt} --tensor-parallel-size 1 --kv-cache-dtype auto"
    assert rec["checkpoint"] == {"format": "safetensors", "quantization": "bf16", "serve": serve}
    assert rec["engine_starts"] is True and not rec["blockers"]
    assert f"\nvllm serve line: {serve}\n" in format_record(rec)


def test_gguf_wall_with_our_adapter(ckpt):
    info = read_gguf(ckpt / "model-Q8_0.gguf")
    wall = gguf_wall(info, with_plugin=True)
    if PLUGIN:
        assert wall["with_plugin"] == "ok" and wall["blocker"] is None
    else:   # ours needs vllm-gguf-plugin underneath: the wall says so
        assert wall["blocker"] == wall["with_plugin"] and "pip install" in wall["blocker"]


def test_gguf_without_indexer_is_refused_by_name(ckpt, tmp_path):
    cfg, state = load_checkpoint(ckpt)
    [p] = write_gguf(tmp_path / "dense-Q8_0.gguf", cfg, {k: v for k, v in state.items() if ".indexer." not in k},
                   ckpt, "Q8_0")
    assert is_gguf(p) and not is_gguf(ckpt / "config.json")
    with pytest.raises(UserInputError, match=r"no DSA indexer tensors \(blk\.0\.indexer"):
        diagnose(str(p), "8.0", "auto")


@pytest.mark.parametrize("q", ["fp8", "gguf-q4_k", "bf16"])
def test_quantization_contradicting_the_ggufs_own_type_is_refused(ckpt, capsys, q):
    from sparse_mla import cli

    assert cli.main(["diagnose", "--model", str(ckpt / "model-Q8_0.gguf"), "--capability", "9.0",
                     "--quantization", q]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--quantization {q!r} contradicts the GGUF's own weight type Q8_0" in err[0], err
    assert "accepted: gguf-q8_0, or no --quantization" in err[0]


def test_the_config_beside_the_gguf_is_what_vllm_gguf_plugin_builds_from(ckpt, tmp_path, capsys):
    """A GGUF next to another model's config.json is refused by name (launch refuses it too); without a config.json
    beside it, vllm-gguf-plugin (which reads the config from the folder) cannot start it: the wall says so."""
    import shutil

    from sparse_mla import cli

    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(ckpt / "model-Q8_0.gguf", other / "m.gguf")
    cfg = json.loads((ckpt / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "index_topk": 512}))
    assert cli.main(["diagnose", "--model", str(other / "m.gguf"), "--capability", "9.0", "--with-plugin"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has index_topk = 256 and the config.json beside it 512" in err[0], err
    (other / "config.json").unlink()
    info = read_gguf(other / "m.gguf")
    assert info["config_json"] is None
    wall = gguf_wall(info, with_plugin=True)
    assert wall["blocker"] == "; then: ".join(w for w in (wall["with_plugin"], wall["folder"]) if w != "ok")
    assert "no config.json beside the GGUF" in wall["folder"] and "no config.json beside the GGUF" in wall["blocker"]
    assert PLUGIN or wall["blocker"].startswith("vllm-gguf-plugin is not installed")


@pytest.mark.parametrize("key, value, write", [
    ("attention.head_count", "64", "add_string"), ("attention.head_count", [64, 64], "add_array"),
    ("attention.head_count", 64.0, "add_float32"), ("attention.indexer.top_k", "256", "add_string"),
    ("expert_weights_scale", "2.5", "add_string")])
@pytest.mark.parametrize("command", ["diagnose", "launch"])
def test_gguf_metadata_of_another_type_is_refused_by_key(ckpt, tmp_path, monkeypatch, capsys, key, value, write,
                                                         command):
    """A glm-dsa GGUF whose metadata holds another type than llama.cpp writes (a string, an array, a float where an
    integer goes): ``diagnose`` and ``launch`` refuse it in one line naming the key and the type expected (it ended
    in ValueError/TypeError)."""
    from sparse_mla import cli

    cfg, state = load_checkpoint(ckpt)
    setter = {"attention.head_count": "add_head_count", "attention.indexer.top_k": "add_indexer_top_k",
              "expert_weights_scale": "add_expert_weights_scale"}[key]
    full = f"glm-dsa.{key}"
    monkeypatch.setattr(gguf.GGUFWriter, setter, lambda self, *_a: getattr(self, write)(full, value))
    [path] = write_gguf(tmp_path / "model-Q8_0.gguf", cfg, state, ckpt, "Q8_0")
    monkeypatch.undo()
    (tmp_path / "config.json").write_text((ckpt / "config.json").read_text())
    argv = {"diagnose": ["diagnose", "--model", str(path), "--capability", "9.0"],
            "launch": ["launch", "--model", str(path)]}[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"GGUF metadata {full} is" in err[0] and "accepted:" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
