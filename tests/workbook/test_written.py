"""``records check`` against the keys the project's writers write (:mod:`sparse_mla.workbook.written`): issue 47,
round 7 -- failures under keys of their own (``"timeout": true``, a run's ``"rc": 1``, ``"traceback"``, a ``ran``
block's ``nan_detected``) were proven; at the levels whose writers' keys are known, a key none writes is invalid."""
import json
from pathlib import Path

import pytest

from sparse_mla.records import schema
from sparse_mla.workbook import proof, written

ROOT = Path(__file__).resolve().parents[2]
SIMULATED, GGUF = "h200/launch_h200_simulated.json", "h200/launch_h200_gguf_q8_0.json"
DIAGNOSIS, ONE_ENGINE = "h200/diagnose_vs_engine_h200.json", "h200/launch_h200_vllm033_simulated_sm80_engine.json"
FM = "FLASHMLA_SPARSE"


def _committed(name: str) -> dict:
    return json.loads((ROOT / "results" / name).read_text())


def verdict(tmp_path, rec) -> proof.Verdict:
    (tmp_path / "r.json").write_text(json.dumps(rec))
    [v] = proof.check([str(tmp_path / "r.json")])
    return v


def _served_check(r: dict) -> dict:
    """A served check beside the GGUF record's runs, with the keys run_serve and the parity run write."""
    run = r["runs"]["TRITON_MLA_SPARSE"]
    r["serve"] = {**{k: json.loads(json.dumps(run[k])) for k in ("run", "backend_requested", "indexer",
                                                                  "kv_cache_dtype", "checkpoint", "ran")},
                  "compared_with": "TRITON_MLA_SPARSE", "matches_offline": True,
                  "token_ids": run["generations"][0]["token_ids"][:16]}
    return r["serve"]


@pytest.mark.parametrize("name,edit,where", [
    # the engine record's top level (the breaker's a26, a29, a34, a35, a36)
    (SIMULATED, lambda r: r.update(timeout=True), "the key 'timeout' at the top level"),
    (SIMULATED, lambda r: r.update(state="failed"), "the key 'state' at the top level"),
    (SIMULATED, lambda r: r.update(terminated=True), "the key 'terminated' at the top level"),
    (SIMULATED, lambda r: r.update(stderr="torch.OutOfMemoryError"), "the key 'stderr' at the top level"),
    (SIMULATED, lambda r: r.update(failed_requests={"min": 0, "median": 0, "max": 0, "total": 12}),
     "the key 'failed_requests' at the top level"),
    # each engine run (a27, a28, a30 to a33)
    (SIMULATED, lambda r: r["runs"][FM].update(result="ERROR"), f"the key 'result' at runs.{FM}"),
    (SIMULATED, lambda r: r["runs"][FM].update(traceback="RuntimeError: CUDA error"),
     f"the key 'traceback' at runs.{FM}"),
    (SIMULATED, lambda r: r["runs"][FM].update(errno=12), f"the key 'errno' at runs.{FM}"),
    (SIMULATED, lambda r: r["runs"][FM].update(exit=1), f"the key 'exit' at runs.{FM}"),
    (SIMULATED, lambda r: r["runs"][FM].update(rc=1, signal=9), f"the keys 'rc', 'signal' at runs.{FM}"),
    (SIMULATED, lambda r: r["runs"][FM].update(exit_code=0), f"the key 'exit_code' at runs.{FM}"),
    # the ran block, wherever it is (c30), and its weights
    (SIMULATED, lambda r: r["runs"][FM]["ran"].update(nan_detected=True), f"the key 'nan_detected' at runs.{FM}.ran"),
    (SIMULATED, lambda r: r["runs"][FM]["ran"]["weights"].update(dtype="fp8"),
     f"the key 'dtype' at runs.{FM}.ran.weights"),
    (GGUF, lambda r: _served_check(r)["ran"].update(oom=False), "the key 'oom' at serve.ran"),
    # the served check, one engine's record, the diagnosis against engines
    (GGUF, lambda r: _served_check(r).update(exit_code=0), "the key 'exit_code' at serve"),
    (ONE_ENGINE, lambda r: r.update(rc=1), "the key 'rc' at the top level"),
    (ONE_ENGINE, lambda r: r.update(speculative=False), "the key 'speculative' at the top level"),   # a parity run's
    (DIAGNOSIS, lambda r: r.update(timeout=True), "the key 'timeout' at the top level"),
    (DIAGNOSIS, lambda r: r["runs"]["fp8"].update(signal=9), "the key 'signal' at runs.fp8"),
    # another kind's keys do not make an engine record another kind, nor does a GLM-5.3-Flash block
    (SIMULATED, lambda r: r.update(repeats={}, complete=True, timeout=True),
     "the keys 'repeats', 'complete', 'timeout' at the top level"),
    (SIMULATED, lambda r: r.update(model_config={"model_type": "glm5_next"}),
     "the key 'model_config' at the top level"),
    (SIMULATED, lambda r: r.update(diagnosis={}), "the key 'diagnosis' at the top level"),
])
def test_a_key_no_writer_writes_makes_an_engine_record_invalid(tmp_path, name, edit, where):
    """Each edit of a committed proven record (the breaker's round 7 and the forms a failure could take next): one
    line naming the key, where it is and what is accepted there."""
    rec = _committed(name)
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and f"no writer writes {where}; accepted: " in v.reason, v.line()


LAYER = "model.layers.0.self_attn.indexer.k_cache"      # the first layer of each record edited below


@pytest.mark.parametrize("name,edit,where", [
    # round 8: the levels below an engine run (the breaker's generations, layers, throughput, simulated, checkpoint)
    (SIMULATED, lambda r: r["runs"][FM]["generations"][0].update(banana=1),
     f"the key 'banana' at runs.{FM}.generations[0]"),
    (SIMULATED, lambda r: r["runs"][FM]["generations"][0].update(finish_reason="abort"),
     f"the key 'finish_reason' at runs.{FM}.generations[0]"),
    (SIMULATED, lambda r: r["runs"][FM]["generations"][1].update(retries=3),
     f"the key 'retries' at runs.{FM}.generations[1]"),
    (SIMULATED, lambda r: r["runs"][FM]["layers"][LAYER].update(banana=1),
     f"the key 'banana' at runs.{FM}.layers.{LAYER}"),
    (SIMULATED, lambda r: r["runs"][FM]["throughput"].update(valid=False), f"the key 'valid' at runs.{FM}.throughput"),
    (SIMULATED, lambda r: r["runs"][FM]["throughput"].update(truncated=True),
     f"the key 'truncated' at runs.{FM}.throughput"),
    (SIMULATED, lambda r: r["runs"][FM]["checkpoint"].update(banana=1), f"the key 'banana' at runs.{FM}.checkpoint"),
    (ONE_ENGINE, lambda r: r["simulated"].update(banana=1), "the key 'banana' at simulated"),
    (ONE_ENGINE, lambda r: r["generations"][0].update(finish_reason="abort"),
     "the key 'finish_reason' at generations[0]"),
    (ONE_ENGINE, lambda r: r["layers"][LAYER].update(hung=True), f"the key 'hung' at layers.{LAYER}"),
    (ONE_ENGINE, lambda r: r["throughput"].update(valid=False), "the key 'valid' at throughput"),
    # the parity record's own levels: the checkpoint, the model, each run spec
    (SIMULATED, lambda r: r["checkpoint"].update(banana=1), "the key 'banana' at checkpoint"),
    (SIMULATED, lambda r: r["model"].update(banana=1), "the key 'banana' at model"),
    (SIMULATED, lambda r: r["run_specs"][FM].update(banana=1), f"the key 'banana' at run_specs.{FM}"),
    # the header, at every level it appears
    (SIMULATED, lambda r: r["environment"].update(note="engine hung"), "the key 'note' at environment"),
    (SIMULATED, lambda r: r["runs"][FM]["environment"].update(note="engine hung"),
     f"the key 'note' at runs.{FM}.environment"),
    (ONE_ENGINE, lambda r: r["environment"].update(note="engine hung"), "the key 'note' at environment"),
    (DIAGNOSIS, lambda r: r["environment"].update(note="engine hung"), "the key 'note' at environment"),
    (DIAGNOSIS, lambda r: r["runs"]["fp8"]["environment"].update(note="engine hung"),
     "the key 'note' at runs.fp8.environment"),
    (DIAGNOSIS, lambda r: r["runs"]["fp8"]["layers"][LAYER].update(banana=1),
     f"the key 'banana' at runs.fp8.layers.{LAYER}"),
])
def test_a_key_no_writer_writes_below_an_engine_run_makes_the_record_invalid(tmp_path, name, edit, where):
    """Round 8: the levels below an engine run and the header are held to their writers' keys too."""
    test_a_key_no_writer_writes_makes_an_engine_record_invalid(tmp_path, name, edit, where)


def test_every_committed_record_holds_only_keys_its_writer_writes():
    """Every run record under results/ and tests/**/records/ (the allow-lists were audited against them and the
    writers): no line; and every committed engine record is held to a list."""
    files = sorted([*(ROOT / "results").rglob("*.json"), *(ROOT / "tests").rglob("records/*.json")])
    held = []
    for f in files:
        rec = json.loads(f.read_text())
        assert written.unwritten_keys(rec) == [], f
        assert not [line for line in schema.problems_of_any_kind(rec) if "no writer writes" in line], f
        if written.written_shape(rec) is not None:
            held.append(f.name)
    assert {n for n in held if n.startswith("launch_")} == {f.name for f in files if f.name.startswith("launch_")}
    assert "diagnose_vs_engine_h200.json" in held
    assert not [n for n in held if n.startswith(("bench_", "fp8_")) and not n.startswith("bench_serve")]
    assert {n for n in held if n.startswith("bench_serve")} == {f.name for f in files
                                                               if f.name.startswith("bench_serve")}
    assert {n for n in held if n.startswith("glm5next_")} == {f.name for f in files if f.name.startswith("glm5next_")}


def test_the_accepted_keys_are_named_once_in_one_line():
    rec = _committed(SIMULATED)
    rec["runs"][FM]["rc"] = 1
    [line] = written.unwritten_keys(rec)
    assert line.startswith(f"no writer writes the key 'rc' at runs.{FM}; accepted: attention_backends, ")
    assert "\n" not in line and line.count("log_tail") == 1


def test_a_glm5next_comparison_is_held_to_its_writers_keys_below_its_engines():
    """A GLM-5.3-Flash comparison's engines' generations and layers and its header (its ``checkpoint`` is the
    model's config.json, held to no list)."""
    rec = json.loads((ROOT / "results" / "h100-80gb-hbm3" / "sessions" / "2026-12-06d" / "lease2" /
                      "glm5next_parity_h100-80gb-hbm3_vllm033.json").read_text())
    run = next(iter(rec["runs"]))
    rec["runs"][run]["generations"][0]["finish_reason"] = "abort"
    rec["environment"]["note"] = "engine hung"
    rec["checkpoint"]["banana"] = 1
    assert [line.split(";")[0] for line in written.unwritten_keys(rec)] == [
        "no writer writes the key 'note' at environment",
        f"no writer writes the key 'finish_reason' at runs.{run}.generations[0]"]


GLM = "h100-80gb-hbm3/glm5next_parity_h100-80gb-hbm3_vllm033.json"
TM = "TRITON_MLA_SPARSE"


@pytest.mark.parametrize("name,edit,where", [
    # round 9: the GLM-5.3-Flash comparison's own levels (the breaker's j27-j30), an engine's speculation (n46)
    (GLM, lambda r: r["reference"][TM][0]["steps"][0].update(note=1), f"the key 'note' at reference.{TM}[0].steps[0]"),
    (GLM, lambda r: r["reference"][TM][0].update(note=1), f"the key 'note' at reference.{TM}[0]"),
    (GLM, lambda r: r.update(reference={"error": "OOM", "retried": True}), "the key 'retried' at reference"),
    (GLM, lambda r: r["engine_agreement"][TM]["per_prompt"][0].update(note=1),
     f"the key 'note' at engine_agreement.{TM}.per_prompt[0]"),
    (GLM, lambda r: r["engine_agreement"][TM].update(note=1), f"the key 'note' at engine_agreement.{TM}"),
    (GLM, lambda r: r["first_token_criterion"]["per_prompt"][0].update(note=1),
     "the key 'note' at first_token_criterion.per_prompt[0]"),
    ("h200/launch_h200_ngram.json", lambda r: r["runs"][TM]["ran"]["speculative"].update(banana=1),
     f"the key 'banana' at runs.{TM}.ran.speculative"),
])
def test_a_key_no_writer_writes_in_a_comparisons_figures_makes_the_record_invalid(tmp_path, name, edit, where):
    """Round 9: a GLM-5.3-Flash comparison's reference entries and steps, its engines' agreement and its criterion's
    prompts, and an engine's speculation counters are held to their writers' keys too."""
    test_a_key_no_writer_writes_makes_an_engine_record_invalid(tmp_path, name, edit, where)


def test_a_failed_reference_or_criterion_is_no_unwritten_key():
    """The tool writes a failed reference as ``{"error", "traceback"}`` and a failed criterion as ``{"error"}``:
    those keys, not the per-run ones, are what is accepted there."""
    rec = _committed(GLM)
    rec["reference"] = {"error": "RuntimeError: OOM", "traceback": "..."}
    rec["first_token_criterion"] = {"error": "RuntimeError: OOM"}
    assert schema.problems(rec, schema.Glm5NextRecord) == []


SERVE = "h200/bench_serve_h200_8heads.json"


@pytest.mark.parametrize("edit,where", [
    # round 8: a serving benchmark at every level its writers' keys are known
    (lambda r: r.update(banana=1), "the key 'banana' at the top level"),
    (lambda r: r["environment"].update(note="engine hung"), "the key 'note' at environment"),
    (lambda r: r["runs"][next(iter(r["runs"]))].update(note="hung"), "the key 'note' at runs.{run}"),
    (lambda r: r["runs"][next(iter(r["runs"]))]["summary"].update(banana=1), "the key 'banana' at runs.{run}.summary"),
    (lambda r: r["load"].update(banana=1), "the key 'banana' at load"),
    (lambda r: r["server"].update(hung=True), "the key 'hung' at server"),
    (lambda r: r["model"].update(banana=1), "the key 'banana' at model"),
])
def test_a_key_no_writer_writes_makes_a_serving_benchmark_invalid(tmp_path, edit, where, name=SERVE):
    """Round 8: a serving benchmark (``bench_serve_*.json``) held no list; an edit of a committed one at each level
    held to one is invalid, naming the key and the level."""
    rec = _committed(name)
    before = verdict(tmp_path, rec).status
    assert before != "invalid"
    edit(rec)
    v = verdict(tmp_path, rec)
    where = where.format(run=next(iter(rec["runs"])))
    assert v.status == "invalid" and f"no writer writes {where}; accepted: " in v.reason, v.line()


SERVE_2026_12_01 = "h200/bench_serve_h200.json"      # the 2026-12-01 client's (unproven: no ran block)
_FM = "runs.FLASHMLA_SPARSE"


@pytest.mark.parametrize("name,edit,where", [
    # round 8 leftovers: below a run, its servers, passes and client passes (the breaker's s03 and s04), and a failure
    # or success said there under a key of its own, read until then (tests/workbook/test_proof.py reads them in
    # vLLM's result, whose keys are vLLM's)
    (SERVE, lambda r: r["runs"][FM]["servers"][0].update(hung=True), f"the key 'hung' at {_FM}.servers[0]"),
    (SERVE, lambda r: r["runs"][FM]["passes"][0]["timed"].update(valid=False),
     f"the key 'valid' at {_FM}.passes[0].timed"),
    (SERVE, lambda r: r["runs"][FM]["servers"][0].update(status="ok", crashed=False),
     f"the keys 'status', 'crashed' at {_FM}.servers[0]"),
    (SERVE, lambda r: r["runs"][FM]["servers"][0].update(exit_code=1), f"the key 'exit_code' at {_FM}.servers[0]"),
    (SERVE, lambda r: r["runs"][FM]["passes"][1].update(ok=False), f"the key 'ok' at {_FM}.passes[1]"),
    (SERVE, lambda r: r["runs"][FM]["passes"][0]["timed"].update(failed_requests=3),
     f"the key 'failed_requests' at {_FM}.passes[0].timed"),
    (SERVE, lambda r: r["runs"][FM]["servers"][0]["warmup"].update(returncode=0),
     f"the key 'returncode' at {_FM}.servers[0].warmup"),
    (SERVE, lambda r: r["runs"][FM]["passes"][0]["timed"].update(output_len=256),     # the warm-up's, not a timed one's
     f"the key 'output_len' at {_FM}.passes[0].timed"),
    # the 2026-12-01 client's warm-up and repeats of a run
    (SERVE_2026_12_01, lambda r: r["runs"][FM]["warmup"].update(hung=True), f"the key 'hung' at {_FM}.warmup"),
    (SERVE_2026_12_01, lambda r: r["runs"][FM]["repeats"][0].update(status="died"),
     f"the key 'status' at {_FM}.repeats[0]"),
])
def test_a_key_no_writer_writes_below_a_serving_run_makes_the_record_invalid(tmp_path, name, edit, where):
    test_a_key_no_writer_writes_makes_a_serving_benchmark_invalid(tmp_path, edit, where, name)


SERVE = "h200/bench_serve_h200_8heads.json"


@pytest.mark.parametrize("edit,where", [                 # breaker round 9 (v04's entry, w05, w06, w07)
    (lambda r: r["runs"][FM]["agreement_across_repeats"][1].update(valid=False),
     f"the key 'valid' at runs.{FM}.agreement_across_repeats[1]"),
    (lambda r: r["agreement_vs_baseline"][FM]["per_repeat"][0].update(banana=1),
     f"the key 'banana' at agreement_vs_baseline.{FM}.per_repeat[0]"),
    (lambda r: r["agreement_vs_baseline"][FM].update(hung=True), f"the key 'hung' at agreement_vs_baseline.{FM}"),
    (lambda r: r["verdict"]["pairs"][0].update(note=1), "the key 'note' at verdict.pairs[0]"),
    (lambda r: r["verdict"].update(note=1), "the key 'note' at verdict"),
])
def test_a_serving_records_agreements_and_verdict_hold_only_their_writers_keys(edit, where):
    rec = _committed(SERVE)
    assert written.unwritten_keys(rec) == []
    edit(rec)
    assert any(f"no writer writes {where}; accepted: " in p for p in written.unwritten_keys(rec)), \
        written.unwritten_keys(rec)
