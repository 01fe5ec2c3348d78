"""sparse-mla launch --model FILE.gguf: the checks before any engine (the gguf extra, the GGUF and the config beside
it), what vLLM is given (the GGUF as the model, its folder as tokenizer and config), what the engine must report having
loaded, and the reference on the GGUF's dequantized weights. The engine runs themselves are GPU work (harness stage
``gguf``)."""
from __future__ import annotations

import sys
import types

import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

import sparse_mla.machine  # noqa: E402
from sparse_mla import cli  # noqa: E402
from sparse_mla.launch import engine as launch  # noqa: E402
from sparse_mla.launch.checkpoint import load_weights, make_checkpoint  # noqa: E402
from sparse_mla.launch.specs import parse_run_spec  # noqa: E402
from sparse_mla.vllm_plugin.ran import contradictions  # noqa: E402

pytestmark = pytest.mark.gguf


@pytest.fixture(scope="module")
def ck(module_tmp):
    return make_checkpoint(module_tmp("lg") / "ck", index_topk=128, seed=2, gguf=("Q8_0",))


@pytest.fixture
def with_plugin(monkeypatch):
    """vllm-gguf-plugin importable: the real one where the gguf extra is installed; else a stand-in module, and our
    adapter's load plan (which needs the real one; tests/gguf/test_model_files.py runs it) taken as passed."""
    try:
        import vllm_gguf_plugin.weights_adapter  # noqa: F401
    except ImportError:
        import sparse_mla.diagnose.gguf as dg

        monkeypatch.setitem(sys.modules, "vllm_gguf_plugin", types.ModuleType("vllm_gguf_plugin"))
        monkeypatch.setattr(dg, "gguf_wall", lambda info, with_plugin: {   # the tensors' own check still asked
            "with_plugin": "ok", "tensors": info.get("tensor_problem") or "ok"})


def test_without_the_plugin_a_gguf_model_names_the_gguf_extra(ck, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm_gguf_plugin", None)     # import fails as where it is not installed
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)
    assert cli.main(["launch", "--model", str(ck / "model-Q8_0.gguf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs the gguf extra (vllm_gguf_plugin not installed)" in err[0], err
    assert "pip install 'sparse-mla-workbook[gguf]'" in err[0]


def test_check_model_takes_a_gguf_file_and_its_folder(ck, with_plugin):
    p = launch.check_model(ck / "model-Q8_0.gguf")
    assert p == ck / "model-Q8_0.gguf" and launch.model_dir(p) == ck
    assert launch.check_model(ck) == ck and launch.model_dir(ck) == ck
    assert launch.check_tp(p, 1) == 1
    assert launch.weights_asked(p) == {"format": "gguf", "file": "model-Q8_0.gguf", "load_format": "gguf",
                                       "quantization": "gguf"}
    assert launch.weights_asked(ck)["format"] == "safetensors" and launch.weights_asked(ck)["load_format"] is None


@pytest.mark.parametrize("bad,says", [
    ("missing.gguf", "is not a file"),
    ("notgguf.gguf", "is not a GGUF file gguf-py can read"),
])
def test_bad_gguf_models_are_one_error_before_any_engine(ck, tmp_path, capsys, with_plugin, monkeypatch, bad, says):
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)
    for fn in ("run_offline", "run_serve", "run_parity"):
        monkeypatch.setattr(launch, fn, lambda *a, **k: pytest.fail("an engine was started"))
    (tmp_path / "notgguf.gguf").write_text("not a gguf")
    assert cli.main(["launch", "--model", str(tmp_path / bad), "--parity"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_record_inside_the_ggufs_folder_is_refused(ck, tmp_path, capsys, with_plugin, monkeypatch):
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)
    assert cli.main(["launch", "--model", str(ck / "model-Q8_0.gguf"), "--json-out", str(ck / "rec.json")]) == 2
    assert "a file of the model directory" in capsys.readouterr().err and not (ck / "rec.json").exists()


def test_vllm_gets_the_gguf_as_model_and_its_folder_as_tokenizer(ck, with_plugin, monkeypatch):
    import vllm

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)
    seen = {}

    class FakeLLM:
        def __init__(self, **kw):
            seen.update(kw)
            raise RuntimeError("stop here")

    monkeypatch.setattr(vllm, "LLM", FakeLLM)
    with pytest.raises(RuntimeError, match="stop here"):
        launch.run_offline(ck / "model-Q8_0.gguf")
    assert seen["model"] == str(ck / "model-Q8_0.gguf") and seen["tokenizer"] == str(ck)
    cmd = launch.serve_command(ck / "model-Q8_0.gguf", parse_run_spec("TRITON_MLA_SPARSE"), 8000)
    assert cmd[2:5] == [str(ck / "model-Q8_0.gguf"), "--tokenizer", str(ck)]
    assert "--tokenizer" not in launch.serve_command(ck, parse_run_spec("TRITON_MLA_SPARSE"), 8000)


def test_the_engine_must_report_the_gguf_load_through_our_adapter():
    ran = {"capability": "9.0", "device_capability": "9.0", "triton_targets": {}, "triton_binaries": [],
           "indexer": {"triton": 3, "deepgemm": 0}, "attention": {"FLASHMLA_SPARSE": 2}, "indexer_cache": {}}
    asked = {"backend_requested": "FLASHMLA_SPARSE", "indexer": "TRITON_DSA_INDEXER", "load_format": "gguf"}
    ok = {"load_format": "gguf", "quantization": "gguf", "gguf_adapter": "GlmDsaGGUFAdapter"}
    assert not [c for c in contradictions(asked, {**ran, "weights": ok}) if c.startswith("weights")]
    said = contradictions(asked, {**ran, "weights": {**ok, "load_format": "auto"}})
    assert any("asked load_format gguf" in c for c in said), said
    said = contradictions(asked, {**ran, "weights": {**ok, "gguf_adapter": None}})
    assert any("weights adapter was None" in c for c in said), said
    assert not [c for c in contradictions({**asked, "load_format": None}, ran) if c.startswith("weights")]


def test_the_reference_reads_the_ggufs_dequantized_weights(ck):
    cfg, sd = load_weights(ck / "model-Q8_0.gguf")
    cfg2, sd2 = load_weights(ck)
    assert cfg == cfg2 and set(sd) == set(sd2)
    assert any(not (sd[k] == sd2[k].float()).all() for k in sd)      # quantized, not the safetensors
