"""``sparse_mla.diagnose.what_to_run``: the "what to run" table -- each row as its diagnosis says, the selection
against a reading of vLLM's source, the ``vllm serve`` lines, the GGUF wall on stock vLLM, the forced row where
vLLM has a backend of its own, vLLM's reasons whole, and bad input refused before any probe."""
from __future__ import annotations

import functools

import pytest

from sparse_mla.diagnose import what_to_run as wtr
from sparse_mla.errors import UserInputError
from vllm_oracles import from_vllm_source

USER = "8x RTX PRO 6000"


@pytest.fixture(scope="module")
def table():
    return wtr.what_to_run(machines=[USER, "8x A100 80 GB"], weights=["nvfp4", "gguf-q4_k"],
                           kv_cache_dtypes=["bfloat16", "fp8"])


def _row(df, machine, weights, kv, vllm):
    g = df[(df["machine"] == machine) & (df["weights"] == weights) & (df["kv_cache_dtype"] == kv)
           & (df["vllm"] == vllm)]
    assert len(g) == 1, (machine, weights, kv, vllm)
    return g.iloc[0].to_dict()


@pytest.mark.slow   # the table fixture probes 16 cells (about 15 s)
def test_the_users_configuration(table):
    """8x RTX PRO 6000, NVFP4 weights, a bf16 cache: stock vLLM has no backend (as a reading of vLLM's source
    says); with the plugin vLLM's own selection takes TRITON_MLA_SPARSE, the engine starts, and the serve line is
    the one to type (no backend flag: vLLM selects ours)."""
    stock = _row(table, USER, "nvfp4", "bfloat16", "stock")
    assert from_vllm_source("glm-5", 12, "bfloat16", 8)[0] is None
    assert stock["backend"] == "none" and stock["engine_starts"] == "no" and stock["blocked_at"] == "attention"
    assert stock["serve"] == "-" and "No valid attention backend found" in stock["why"]
    ours = _row(table, USER, "nvfp4", "bfloat16", "with the plugin")
    assert ours["backend"] == "TRITON_MLA_SPARSE" and ours["engine_starts"] == "yes" and ours["fits"] == "yes"
    assert ours["serve"] == (f"vllm serve {wtr.checkpoint('GLM-5', 'nvfp4')} --tensor-parallel-size 8 --kv-cache-dtype "
                             f"bfloat16 --max-model-len {ours['max_model_len']}")
    assert ours["max_model_len"] > 0 and ours["kv_cache_tokens"] >= ours["max_model_len"]
    assert (f"an engine at simulated capability on the H200 ({wtr.SIMULATED_RECORD}); no 12.0 GPU ran it"
            in ours["rests_on"] and "DeepGEMM's SM12x indexer" in ours["rests_on"])
    assert wtr.answer(table, USER)[0]["serve"] == ours["serve"]          # what starts, ours first


@pytest.mark.slow   # the table fixture probes 16 cells (about 15 s)
def test_vllms_own_backend_and_ours_asked_for_by_name(table):
    """fp8 on SM120: vLLM selects its own backend where this host has FlashInfer's SM120 API (a claim, said so);
    the plugin's backend then only by name, --attention-backend CUSTOM, in its own row."""
    want, _ = from_vllm_source("glm-5", 12, "fp8", 8)
    stock = _row(table, USER, "nvfp4", "fp8", "stock")
    assert stock["backend"] == (want or "none")
    forced = table[(table["machine"] == USER) & (table["vllm"] == "with the plugin, --attention-backend CUSTOM")]
    if want is None:
        assert forced.empty
    else:
        assert "FlashInfer's SM120 sparse MLA kernel" in stock["rests_on"] and "49886" in stock["rests_on"]
        row = _row(table, USER, "nvfp4", "fp8", "with the plugin, --attention-backend CUSTOM")
        assert row["backend"] == "TRITON_MLA_SPARSE" and row["kv_cache"] == "fp8_ds_mla"
        assert row["serve"].endswith("--attention-backend CUSTOM")


@pytest.mark.slow   # the table fixture probes 16 cells (about 15 s)
def test_gguf_on_stock_vllm_stops_at_its_loader(table):
    """Stock vLLM 0.26 has no GGUF loader (its own loader registry says so): the GGUF rows stop at the config stage
    whatever the attention; with the plugin (the gguf extra) the serve line takes the GGUF and its folder."""
    from sparse_mla.diagnose.gguf import stock_wall

    stock = _row(table, USER, "gguf-q4_k", "bfloat16", "stock")
    assert stock["blocked_at"] == "config" and stock["engine_starts"] == "no" and stock["serve"] == "-"
    assert stock_wall() in stock["why"]
    ours = _row(table, USER, "gguf-q4_k", "bfloat16", "with the plugin")
    path = wtr.checkpoint("GLM-5", "gguf-q4_k")
    assert ours["serve"].startswith(f"vllm serve {path} --tokenizer {path.rsplit('/', 1)[0]} ")
    assert "vllm-gguf-plugin" in ours["rests_on"]


@pytest.mark.slow   # the table fixture probes 16 cells (about 15 s)
def test_a100_needs_the_plugins_indexer_too(table):
    """SM80: no stock backend and no DeepGEMM indexer; with the plugin both are ours, and where the weights do not
    fit the memory stage's fix is in the row, not a serve line. On a line that writes a quantized MLA cache in Triton
    (0.33 on: ``TRITON_FP8_MLA_CACHE_WRITE``) the fp8 cache needs SM89: our backend refuses it by name."""
    from sparse_mla.vllm_plugin.lines import adapter

    LINE = adapter()
    stock = _row(table, "8x A100 80 GB", "nvfp4", "bfloat16", "stock")
    assert stock["backend"] == "none" and stock["indexer"] == "none"
    if LINE.TRITON_FP8_MLA_CACHE_WRITE:
        fp8 = _row(table, "8x A100 80 GB", "nvfp4", "fp8", "with the plugin")
        assert fp8["backend"] == "none" and "TRITON_MLA_SPARSE: this vLLM writes a fp8 MLA cache" in fp8["why"]
    for kv in ("bfloat16",) if LINE.TRITON_FP8_MLA_CACHE_WRITE else ("bfloat16", "fp8"):
        ours = _row(table, "8x A100 80 GB", "nvfp4", kv, "with the plugin")
        assert ours["backend"] == "TRITON_MLA_SPARSE" and ours["indexer"] == "TRITON_DSA_INDEXER"
        assert (ours["serve"] != "-") == (ours["fits"] == "yes" and ours["engine_starts"] == "yes")
        assert (ours["fix"] != "-") or ours["fits"] == "yes"


@pytest.mark.slow   # the table fixture probes 16 cells (about 15 s)
def test_markdown_prints_vllms_reasons_whole_and_write_is_atomic(table, tmp_path):
    md = wtr.markdown(table)
    assert md.count("### ") == 2 and "| weights | kv_cache_dtype | vllm |" in md
    for why in set(table["why"]) - {"-"}:
        for part in why.split(" | "):
            assert part in md                                          # whole, never cut
    paths = wtr.write(table, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["what_to_run.csv", "what_to_run.md"]
    assert paths["md"].read_text() == md


def test_the_placeholders_are_named_after_the_model_asked():
    """One home for the placeholder checkpoints: each weights format's form, the model's name put in (a preset's as
    its maker spells it); GLM-5's are the committed table's."""
    assert wtr.model_name("deepseek-v3.2") == "DeepSeek-V3.2" and wtr.model_name("glm-5") == "GLM-5"
    assert [wtr.checkpoint("DeepSeek-V3.2", w) for w in wtr.WEIGHTS] == [
        "/models/DeepSeek-V3.2", "/models/DeepSeek-V3.2-FP8", "/models/DeepSeek-V3.2-NVFP4",
        "/models/DeepSeek-V3.2-GGUF/DeepSeek-V3.2-Q4_K_M-00001-of-00010.gguf"]
    assert wtr.checkpoint("GLM-5", "gguf-q8_0") == "/models/GLM-5-gguf-q8_0"
    rec = {"engine_starts": True, "memory": {"fits": True, "max_model_len": 4096}}
    assert wtr.serve_line(rec, "fp8", "auto", 8, name="DeepSeek-V3.2") == (
        "vllm serve /models/DeepSeek-V3.2-FP8 --tensor-parallel-size 8 --kv-cache-dtype auto --max-model-len 4096")


def test_a_gguf_no_adapter_loads_does_not_start():
    """DeepSeek-V3.2's GGUF: our adapter takes glm_moe_dsa only and vllm-gguf-plugin's own has no map for
    deepseek_v32 (asked where it is installed) -- the decision the diagnosis of a .gguf file asks
    (gguf.adapter_wall) -- so its GGUF rows do not start, blocked at the config stage, and say why; GLM-5's does."""
    from sparse_mla.diagnose.gguf import adapter_wall
    from sparse_mla.models import PRESET_CONFIGS

    loader = wtr._gguf_loader("deepseek-v3.2", ["gguf-q4_k"])
    assert loader == adapter_wall(PRESET_CONFIGS["deepseek-v3.2"], ours=True)
    assert "GlmDsaGGUFAdapter takes glm_moe_dsa configs only (this one's model_type: 'deepseek_v32')" in loader
    assert wtr._gguf_loader("glm-5", ["gguf-q4_k"]) is None and wtr._gguf_loader("deepseek-v3.2", ["fp8"]) is None
    rec = {"capability": "9.0", "selected": "FLASH_ATTN_MLA_SPARSE", "engine_starts": True, "blockers": [],
           "indexer": {"stock": "DEEPGEMM", "with_plugin": "DEEPGEMM"}, "effective_kv_cache_dtype": "bfloat16",
           "memory": {"fits": True, "max_model_len": 4096, "max_tokens": 8192}}
    for plugin in (False, True):
        row = wtr._row(rec, "8x H200", "gguf-q4_k", "auto", plugin, 8, name="DeepSeek-V3.2", loader=loader)
        assert (row["engine_starts"], row["blocked_at"], row["serve"]) == ("no", "config", "-")
        assert (f"GGUF: not loadable, vllm-gguf-plugin with this plugin has no adapter for it ({loader})"
                in row["rests_on"])
        assert "glm-dsa adapter" not in row["rests_on"] and (loader == row["why"]) == plugin
    row = wtr._row(rec, "8x H200", "gguf-q4_k", "auto", True, 8, name="GLM-5", loader=None)
    assert row["engine_starts"] == "yes" and "this plugin's glm-dsa adapter" in row["rests_on"]


@pytest.mark.slow   # 3 probes
def test_deepseeks_gguf_rows_do_not_start():
    df = wtr.what_to_run("deepseek-v3.2", machines=["8x H200"], weights=["gguf-q4_k"], kv_cache_dtypes=["auto"])
    assert set(df["engine_starts"]) == {"no"} and set(df["blocked_at"]) == {"config"} and set(df["serve"]) == {"-"}
    assert all("Unknown gguf model_type: deepseek_v32" in w or "not installed" in w
               for w in df[df["vllm"] != "stock"]["why"])


@pytest.mark.parametrize("kw, says", [({"machines": USER}, "is one string"), ({"machines": ["8x B300"]}, "8x B300"),
                                      ({"weights": ["int3"]}, "int3"), ({"kv_cache_dtypes": ["fp16x"]}, "fp16x"),
                                      ({"machines": []}, "machines")])
def test_bad_input_before_any_probe(kw, says, monkeypatch):
    import sparse_mla.diagnose.path as path

    monkeypatch.setattr(path, "diagnose", lambda *a, **k: pytest.fail("probed before checking"))
    with pytest.raises(UserInputError, match=says):
        wtr.what_to_run(**kw)


def test_cli_what_to_run(run_cli, tmp_path, monkeypatch):
    """``sparse-mla diagnose --what-to-run`` (on a smaller grid, to keep the test short): the Markdown on stdout and
    both files in --out-dir; options it would ignore are refused in one line."""
    monkeypatch.setattr(wtr, "what_to_run", functools.partial(wtr.what_to_run, machines=[USER], weights=["nvfp4"],
                                                              kv_cache_dtypes=["bfloat16"]))
    rc, out, _ = run_cli("--what-to-run", "--out-dir", str(tmp_path))
    assert rc == 0 and "### 8x RTX PRO 6000" in out and "vllm serve /models/GLM-5-NVFP4" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["what_to_run.csv", "what_to_run.md"]
    rc, _, err = run_cli("--what-to-run", "--tp", "4")
    assert rc == 2 and "--tp would be ignored" in err
    rc, _, err = run_cli("--what-to-run", "--matrix")
    assert rc == 2 and "separate tables" in err


@pytest.mark.slow
def test_the_committed_table_is_what_the_diagnosis_says_now():
    """``results/what_to_run.csv`` (notebooks 01 and 04 read it) recomputed whole: the same cells (about 1.5 minutes
    on 2 cores). After a change to the diagnosis or vLLM, regenerate it: ``sparse-mla diagnose --what-to-run``."""
    from pathlib import Path

    committed = wtr.read(Path(__file__).resolve().parents[2] / "results" / "what_to_run.csv")
    assert committed.equals(wtr.as_written(wtr.what_to_run()))


def test_the_simulated_capabilities_are_the_proven_records():
    """SIMULATED names exactly the capabilities at which its record's engines ran ours with the Triton indexer: the
    record is proven (each engine's ``ran`` read in its worker), vLLM saw the capability, Triton generated that
    GPU's code for every kernel, our indexer ran and DeepGEMM's did not, and every first token passed the
    reference's criterion."""
    import json

    from sparse_mla.workbook.chain import project_root
    from sparse_mla.workbook import proof

    path = project_root() / wtr.SIMULATED_RECORD
    [verdict] = proof.check([str(path)])
    assert verdict.status == "proven", verdict
    rec = json.loads(path.read_text())
    seen = set()
    for run in rec["runs"].values():
        ran = run["ran"]
        if ran["capability"] == ran["device_capability"]:
            continue
        cap = tuple(int(x) for x in ran["capability"].split("."))
        assert set(ran["attention"]) == {"TRITON_MLA_SPARSE"} and ran["indexer"]["deepgemm"] == 0 < ran["indexer"]["triton"]
        assert {t for ts in ran["triton_targets"].values() for t in ts} == {f"sm{cap[0]}{cap[1]}"}
        seen.add(cap)
    assert rec["failures"] == [] and rec["first_token_criterion"]["failures"] == []
    assert seen == set(wtr.SIMULATED)
