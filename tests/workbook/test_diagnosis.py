"""``records check`` on the diagnosis against real engines (``tools/gpu/diagnose_vs_engine.py``,
:mod:`sparse_mla.workbook.diagnosis`): issue 47, round 7 -- a record whose differences said the prediction was wrong,
whose prediction named another backend than its engine ran, or whose engine ran a backend nobody predicted, was
proven; round 8 -- a diagnosis's headline, blockers or resolved KV-cache dtype that its prediction does not give, or
a key beside them no writer writes, was proven."""
import json
from pathlib import Path

import pytest

from sparse_mla.workbook import diagnosis, proof

RECORD = Path(__file__).resolve().parents[2] / "results" / "h200" / "diagnose_vs_engine_h200.json"


def verdict(tmp_path, rec) -> proof.Verdict:
    (tmp_path / "d.json").write_text(json.dumps(rec))
    [v] = proof.check([str(tmp_path / "d.json")])
    return v


def _engine_ran(r, backend: str):
    """The fp8 engine's record as if vLLM had chosen ``backend``: its layers and its ran block alike."""
    run = r["runs"]["fp8"]
    for v in run["layers"].values():
        if v["backend"] == "FLASHMLA_SPARSE":
            v["backend"], v["impl"] = backend, proof.backend_impl(backend)
    run["ran"]["attention"] = {backend: 2}
    run["attention_backends"] = sorted(["DEEPSEEK_V32_INDEXER", backend])


def _predicted(r, **changes):
    r["diagnosis"]["fp8"]["predicted"].update(changes)


@pytest.mark.parametrize("edit,says", [
    # the record's differences not what its prediction and engine give (a42, a43, a44, d04)
    (lambda r: r["differences"].update(fp8=["the diagnosis predicted FLASHMLA_SPARSE, the engine ran another"]),
     "differences.fp8 ['the diagnosis predicted FLASHMLA_SPARSE, the engine ran another'], its prediction and engine "
     "give []"),
    (lambda r: _predicted(r, attention="TRITON_MLA_SPARSE"),
     "differences.fp8 [], its prediction and engine give [\"attention: diagnosed 'TRITON_MLA_SPARSE', the engine ran "
     "'FLASHMLA_SPARSE'\"]"),
    (lambda r: (_predicted(r, engine_starts=False), r["diagnosis"]["fp8"].update(blockers=["no backend"])),
     "['engine_starts: diagnosed False, the engine ran True']"),
    (lambda r: _engine_ran(r, "FLASH_ATTN_MLA_SPARSE"),
     "give [\"attention: diagnosed 'FLASHMLA_SPARSE', the engine ran 'FLASH_ATTN_MLA_SPARSE'\"]"),
    # the three blocks naming other KV-cache dtypes, a run of another dtype, a prediction of another shape
    (lambda r: r["runs"].pop("fp8"), "diagnosis names ['auto', 'bfloat16', 'fp8', 'fp8_ds_mla'], runs ['auto', "
                                     "'bfloat16', 'fp8_ds_mla']"),
    (lambda r: r["runs"]["fp8"].update(kv_cache_dtype="fp8_ds_mla"), "runs.fp8: kv_cache_dtype 'fp8_ds_mla', not the "
                                                                     "dtype it is the run of"),
    (lambda r: r["diagnosis"]["fp8"].update(predicted="FLASHMLA_SPARSE"), "diagnosis.fp8.predicted 'FLASHMLA_SPARSE' "
                                                                          "is not {attention, "),
])
def test_a_diagnosis_record_whose_differences_are_not_its_data_is_invalid(tmp_path, edit, says):
    rec = json.loads(RECORD.read_text())
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_a_diagnosis_that_honestly_predicted_otherwise_is_unproven(tmp_path):
    """The prediction and the engine disagree and the record says so: it proves no diagnosis."""
    rec = json.loads(RECORD.read_text())
    _engine_ran(rec, "FLASH_ATTN_MLA_SPARSE")
    run = rec["runs"]["fp8"]
    rec["differences"]["fp8"] = diagnosis.differences(rec["diagnosis"]["fp8"]["predicted"], diagnosis.observed(run))
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and "differences.fp8 says the diagnosis was wrong: attention: diagnosed " \
                                      "'FLASHMLA_SPARSE', the engine ran 'FLASH_ATTN_MLA_SPARSE'" in v.reason, v.line()


def test_the_committed_records_differences_are_its_data():
    rec = json.loads(RECORD.read_text())
    assert diagnosis.diagnosis_problems(rec) == [] and diagnosis.diagnosis_said(rec) == []
    assert diagnosis.diagnosis_problems({"runs": {}}) == [] == diagnosis.diagnosis_said({"runs": {}})


def _stops(ent: dict) -> dict:
    """``ent`` as the diagnosis writes one that stops at the attention stage: its blocker, engine_starts False and
    the headline the diagnosis's own function gives them."""
    ent["blockers"] = [{"stage": "attention", "reason": "No valid attention backend found"}]
    ent["predicted"]["engine_starts"] = False
    ent["headline"] = diagnosis.headlines(ent["predicted"], ent["effective_kv_cache_dtype"], ent["blockers"])[0]
    return ent


@pytest.mark.parametrize("edit,says", [
    # the breaker's d01: another dtype's headline
    (lambda r: r["diagnosis"]["auto"].update(headline=r["diagnosis"]["fp8"]["headline"]),
     "diagnosis.auto.headline 'FLASHMLA_SPARSE on fp8_ds_mla, indexer DEEPGEMM: engine starts', not what the "
     "diagnosis writes for its prediction, effective_kv_cache_dtype and blockers; accepted: 'FLASH_ATTN_MLA_SPARSE on "
     "bfloat16, indexer DEEPGEMM: engine starts' or "),
    (lambda r: r["diagnosis"]["fp8"].update(headline="FLASHMLA_SPARSE on fp8_ds_mla, indexer DEEPGEMM: engine "
                                                     "starts (stock: VLLM_PLUGINS=oops leaves the plugin out)"),
     "diagnosis.fp8.headline 'FLASHMLA_SPARSE on fp8_ds_mla, indexer DEEPGEMM: engine starts (stock: VLLM_PLUGINS="),
    # d02: a blocker beside "the engine starts" (a text, or as the diagnosis writes one); a blocker of another shape
    (lambda r: r["diagnosis"]["fp8"].update(blockers=["no FP8 attention on this GPU"]),
     "diagnosis.fp8.blockers ['no FP8 attention on this GPU'] beside predicted engine_starts True; accepted: a list, "
     "empty where the engine starts (True), not where it stops (False)"),
    (lambda r: r["diagnosis"]["fp8"].update(blockers=[{"stage": "memory", "reason": "does not fit"}]),
     "diagnosis.fp8.blockers [{'stage': 'memory', 'reason': 'does not fit'}] beside predicted engine_starts True"),
    (lambda r: r["diagnosis"]["fp8"].update(blockers=None), "diagnosis.fp8.blockers None beside predicted"),
    (lambda r: _stops(r["diagnosis"]["fp8"])["blockers"][0].update(note="x"),
     "diagnosis.fp8.blockers [{'stage': 'attention', 'reason': 'No valid attention backend found', 'note': 'x'}]; "
     "accepted: [{'stage': TEXT, 'reason': TEXT}, ...]"),
    # d03: a resolved KV-cache dtype its prediction's does not resolve to (auto: a model dtype; else itself)
    (lambda r: r["diagnosis"]["auto"].update(effective_kv_cache_dtype="fp8_ds_mla"),
     "diagnosis.auto.effective_kv_cache_dtype 'fp8_ds_mla': the predicted kv_cache_dtype 'auto' resolves to "
     "'bfloat16' or 'float16' or 'float32'"),
    (lambda r: r["diagnosis"]["fp8"].update(effective_kv_cache_dtype="fp8"),
     "diagnosis.fp8.effective_kv_cache_dtype 'fp8': the predicted kv_cache_dtype 'fp8_ds_mla' resolves to "
     "'fp8_ds_mla'"),
    (lambda r: r["diagnosis"]["auto"].update(effective_kv_cache_dtype="float16"),    # a model dtype, not the headline's
     "diagnosis.auto.headline 'FLASH_ATTN_MLA_SPARSE on bfloat16, indexer DEEPGEMM: engine starts', not what"),
    # d06, d07: a key no writer writes beside the diagnosis's or its prediction's
    (lambda r: r["diagnosis"]["auto"].update(note="prediction wrong on retry"),
     "no writer writes the key 'note' at diagnosis.auto; accepted: blockers, effective_kv_cache_dtype, headline, "
     "predicted"),
    (lambda r: r["diagnosis"]["auto"]["predicted"].update(memory_ok=False),
     "no writer writes the key 'memory_ok' at diagnosis.auto.predicted; accepted: attention, engine_starts, indexer, "
     "kv_cache_dtype"),
])
def test_a_diagnosis_its_prediction_does_not_give_is_invalid(tmp_path, edit, says):
    """Round 8 (d01, d02, d03, d06): each recomputed with the diagnosis's own functions from the entry's prediction."""
    rec = json.loads(RECORD.read_text())
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_every_diagnosis_the_writer_may_write_is_accepted():
    """The committed record's entries as they are, with the note of a plugin vLLM would not load (``VLLM_PLUGINS``
    unset or quoted), and stopping at a stage: no line (the writer's own records: tests/diagnose/test_path.py)."""
    from sparse_mla.diagnose.path import not_loaded_note

    rec = json.loads(RECORD.read_text())
    for ent in rec["diagnosis"].values():
        assert diagnosis.entry_problems(ent) == []
        base = ent["headline"]
        for raw in (None, "some_other_plugin", "", "it's"):
            assert diagnosis.entry_problems({**ent, "headline": base + not_loaded_note(raw)}) == [], raw
        assert diagnosis.entry_problems(_stops(ent)) == []
    assert list(rec["diagnosis"]["auto"]) == list(diagnosis.entry({}))      # the writer's keys, the record's


def _command(where, old, new):
    """Edit ``old`` to ``new`` in the header's command (``where`` None) or run ``where``'s own command."""
    def edit(r):
        env = r["environment"] if where is None else r["runs"][where]["environment"]
        assert old in env["command"]
        env["command"] = env["command"].replace(old, new)
    return edit


@pytest.mark.parametrize("edit,says", [
    # k10: the fp8 run's own command asks another KV-cache dtype than the run's
    (_command("fp8", "--kv-cache-dtype fp8 ", "--kv-cache-dtype fp8_ds_mla "),
     "runs.fp8: its own command asks --kv-cache-dtype fp8_ds_mla, the tool asks fp8 for the header's checkpoint "
     "/tmp/ck512 and the run's dtype 'fp8'"),
    # k11: the header names another checkpoint than every run used
    (_command(None, "/tmp/ck512", "/tmp/ck8"), "runs.auto: its own command asks --model /tmp/ck512, the tool asks "
                                              "/tmp/ck8 for the header's checkpoint /tmp/ck8"),
    (_command(None, "diagnose_vs_engine_h200.json", "diagnose_vs_engine_h200.json fp8"),
     "runs ['auto', 'bfloat16', 'fp8', 'fp8_ds_mla'], the header command's KV-cache dtypes ['fp8']"),
    (_command(None, "diagnose_vs_engine.py", "other_tool.py"), "is not the tool's (no diagnose_vs_engine.py); "
                                                               "accepted: python3 .../diagnose_vs_engine.py"),
    (_command("auto", "--max-tokens 4", "--max-tokens 8"), "runs.auto: its own command asks --max-tokens 8, the tool "
                                                           "asks 4"),
])
def test_a_diagnosis_record_against_the_commands_that_wrote_it(tmp_path, edit, says):
    """Issue 47, round 9 (k10, k11): each run's own command and the header's, read by the tool's and launch's own
    argument handling (``diagnosis.tool_arguments``, ``engine_words``), against the record."""
    rec = json.loads(RECORD.read_text())
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_the_tools_command_line_is_read_back_as_written():
    argv = ["/tmp/a b/ck", "out.json", "fp8"]
    cmd = diagnosis.tool_command("tools/gpu", argv)
    assert cmd == "python3 tools/gpu/diagnose_vs_engine.py '/tmp/a b/ck' out.json fp8"
    assert diagnosis.tool_arguments(argv) == ("/tmp/a b/ck", "out.json", ["fp8"])
    assert diagnosis.command_problems(json.loads(RECORD.read_text())) == []
