"""``records check`` on the diagnosis against real engines (``tools/gpu/diagnose_vs_engine.py``,
:mod:`sparse_mla.workbook.diagnosis`): issue 47, round 7 -- a record whose differences said the prediction was wrong,
whose prediction named another backend than its engine ran, or whose engine ran a backend nobody predicted, was
proven."""
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
            v["backend"] = backend
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
