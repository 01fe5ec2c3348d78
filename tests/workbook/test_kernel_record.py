"""``records check`` on kernel benchmark records (no engine, no ``ran``): their header and cache-layout names are
judged as an engine record's are (:mod:`sparse_mla.workbook.kernel_record`, :func:`sparse_mla.workbook.proof.
header_problems`) and its speedups its times' ratios (:func:`sparse_mla.bench.kernel.speedups`). Issue 47, breaker
round 12 (d52, d53, d56, d57): edits of ``bench_kernel_h200.json`` were proven."""
import copy
import json
from pathlib import Path

import pytest

from sparse_mla.workbook import proof

RESULTS = Path(__file__).resolve().parents[2] / "results"
_COMMITTED = json.loads((RESULTS / "h200" / "bench_kernel_h200.json").read_text())   # each case edits a copy
_INDEXER = json.loads((RESULTS / "h200" / "bench_indexer_h200.json").read_text())


def verdict(tmp_path, rec) -> proof.Verdict:
    (tmp_path / "k.json").write_text(json.dumps(rec))
    [v] = proof.check([str(tmp_path / "k.json")])
    return v


@pytest.mark.parametrize("edit, says", [
    (lambda r: r["environment"].update(capability="8.0"),                                                    # d52
     "the header's GPU 'NVIDIA H200' is a h200 (capability 9.0), not capability 8.0"),
    (lambda r: r["environment"].update(sm_count=78),                                                         # d57
     "environment.sm_count 78 on a 'NVIDIA H200'; accepted: 132 (its SMs, sparse_mla.gpus.GPUS)"),
    (lambda r: r["bench"][0].update(kv_cache_dtype="fp4"),                                                   # d56
     "bench[0].kv_cache_dtype 'fp4' is not accepted; accepted: 'auto', 'fp8_ds_mla'"),
    (lambda r: r["checks"][1].update(kv_cache_dtype="fp8"),          # vLLM's name, never the kernel writer's
     "checks[1].kv_cache_dtype 'fp8' is not accepted; accepted: 'auto', 'fp8_ds_mla'"),
    (lambda r: r["environment"].update(kv_cache_dtype="bfloat16"),
     "environment.kv_cache_dtype 'bfloat16' is not accepted"),
    (lambda r: r["bench"][0].update(speedup_vs_flashmla=50.0),                                             # d53
     "bench[0].speedup_vs_flashmla 50.0, not its flashmla_us 61.792001128196716 over its triton_us 114.656001329422"),
    (lambda r: r["bench"][3].update(old_graph_us=r["bench"][3]["old_graph_us"] * 2),
     "bench[3].speedup_new_vs_old "),
])
def test_a_kernel_record_whose_header_or_names_no_writer_writes_is_invalid(tmp_path, edit, says):
    rec = copy.deepcopy(_COMMITTED)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_a_kernel_record_written_on_a_mig_slice_is_not_invalid(tmp_path):
    """Its name the GPU's and profile, its SMs the slice's (torch reads both so; issue 47 round 13, r42)."""
    rec = copy.deepcopy(_COMMITTED)
    rec["environment"].update(gpu="NVIDIA H100 80GB HBM3 MIG 1g.10gb", sm_count=16)
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and v.reason.startswith("no engine run"), v.line()


def test_the_committed_records_without_an_engine_run_keep_their_verdict():
    files = [f for f in RESULTS.rglob("*.json") if f.name.startswith(("bench_kernel", "bench_indexer", "fp8_where"))]
    verdicts = proof.check([str(f) for f in files])
    assert len(verdicts) >= 10 and all(v.status == "unproven" and v.reason.startswith("no engine run")
                                       for v in verdicts), [v.line() for v in verdicts]


def _command(old: str, new: str):
    def edit(r):
        assert old in r["environment"]["command"]
        r["environment"]["command"] = r["environment"]["command"].replace(old, new)
    return edit


@pytest.mark.parametrize("edit, says", [       # breaker round 13: a benchmark record against its command (M2) and rows
    (_command("--compare-launch", "--compare-launch --kv-cache-dtype fp8_ds_mla"),                          # r31
     "environment.kv_cache_dtype 'auto' (and 48 more), the command asked --kv-cache-dtype fp8_ds_mla"),
    (lambda r: r["environment"].update(kv_cache_dtype="fp8_ds_mla"),                                          # r50
     "environment.kv_cache_dtype 'fp8_ds_mla', the command asked --kv-cache-dtype auto"),
    (lambda r: [row.update(kv_cache_dtype="fp8_ds_mla") for row in r["bench"]],              # rows alone, as r49's
     "bench[0].kv_cache_dtype 'fp8_ds_mla' (and 23 more), the command asked --kv-cache-dtype auto"),
    (_command("--quick", "--quick --banana 3"),                                                               # r32
     "environment.command has arguments bench kernel does not take: ['--banana', '3']"),
    (_command("--quick", "--quick --kv-cache-dtype fp8"),
     "environment.command's values are none bench kernel takes (--kv-cache-dtype 'fp8' is not accepted"),
    (_command("bench kernel", "bench indexer"),                                                               # r33
     "environment.command is `sparse-mla bench indexer ...`; a kernel benchmark's record is `sparse-mla bench kernel"),
    (lambda r: r.update(targets=[]),
     "it holds checks, targets: keys of both the kernel and the indexer benchmark's records"),
    (lambda r: r["bench"][0].pop("flashmla_us"),                                                              # r35
     "bench[0].speedup_vs_flashmla 0.5389338579029984 stands without its flashmla_us (a number)"),
    (lambda r: r["bench"][0].update(speedup_vs_flashmla=str(r["bench"][0]["speedup_vs_flashmla"])),         # r36
     "bench[0].speedup_vs_flashmla is '0.5389338579029984'; accepted: a number"),   # the row's shape, since round 17
    # breaker round 14: the command's cases, cache size, launch comparison and checks against the rows (t61-t65)
    (_command("--quick", "--quick --heads 16"), "its rows' cases (H, T) are not the command's: 18 more"),
    (_command("--quick", "--quick --tokens 1 4"), "its rows' cases (H, T) are not the command's: 16 more"),
    (_command("--quick", "--quick --cache-tokens 65536"), "its rows' cache_tokens [131072], the command's"),
    (_command(" --compare-launch", ""), "24 of its 24 rows hold the launch comparison (old_graph_us); the command "
                                        "did not ask --compare-launch"),
    (lambda r: r["bench"][2].pop("old_graph_us"), "23 of its 24 rows hold the launch comparison"),
    (_command("--quick", "--quick --no-check"), "its checks' cases (H, T) are not the command's (--no-check: none): "
                                                "24 more"),
    (lambda r: r["checks"].pop(), "its checks' cases (H, T) are not the command's: 0 more ([]), 1 missing"),
    (lambda r: r.pop("checks"), "no checks, which `sparse-mla bench kernel` writes into every record"),
    # round 15: the cases as a list, not a set (u09-u12)
    (lambda r: r["bench"].pop(0), "its rows' cases (H, T) are not the command's: 0 more ([]), 1 missing ([(8, 1)])"),
    (lambda r: r["bench"].append(dict(r["bench"][5])), "its rows' cases (H, T) are not the command's: 1 more "
                                                       "([(8, 4096)]), 0 missing"),
    (lambda r: r["checks"][0].update(H=999), "its checks' cases (H, T) are not the command's: 1 more ([(999, 1)]), "
                                             "1 missing ([(8, 1)])"),
    # round 16 (v02, v06, v11): a case written as a float, a command value the writer refuses, another top-k
    (lambda r: r["checks"][0].update(T=1.0), "its checks' cases (H, T) are not the command's: 1 more ([(8, '<1.0>')])"),
    (_command("--quick", "--quick --heads 0"), "environment.command's values are none bench kernel takes (--heads 0"),
    (lambda r: r["bench"][3].update(topk=1024), "its rows' topk [1024, 2048], the command's `sparse-mla bench kernel` "
                                                "asks [2048]"),
    (lambda r: r["checks"][0].update(H=8.0), "its checks' cases (H, T) are not the command's: 1 more ([('<8.0>', 1)])"),
    # a check's cache as text, or another cache than the writer's (v53, v09)
    (lambda r: r["checks"][0].update(cache_tokens="8192"), "checks[0].cache_tokens '8192', the writer checks case 0 on "
                                                           "8192 (bench.kernel.CHECK_CACHE_TOKENS, --quick: the first"),
    (lambda r: r["checks"][1].update(cache_tokens=131072), "checks[1].cache_tokens 131072, the writer checks case 1 on "
                                                           "32768"),
])
def test_a_kernel_record_against_its_command_and_times(tmp_path, edit, says):
    """Each edit of the committed record makes it one its writer never writes."""
    rec = copy.deepcopy(_COMMITTED)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


@pytest.mark.parametrize("edit, says", [
    (_command("bench indexer", "bench kernel"),                                                               # r55
     "environment.command is `sparse-mla bench kernel ...`; an indexer benchmark's record is `sparse-mla bench "
     "indexer"),
    (_command("--quick", "--quick --kv-cache-dtype auto"),
     "environment.command has arguments bench indexer does not take: ['--kv-cache-dtype', 'auto']"),
    (lambda r: r["bench"][0].update(speed_vs_deepgemm=5.0),                                                  # s16
     "bench[0].speed_vs_deepgemm 5.0, not its deepgemm_us 2.904987316342849 over its triton_us 2.358399987220764"),
    (lambda r: r["bench"][1].pop("triton_us"), "bench[1].speed_vs_deepgemm "),
    (_command("--quick", "--quick --heads 64"), "its rows' cases (kind, H, B, context, next_n / M, N) are not the "
                                                "command's: 9 more"),                                       # t68
    # round 16 (v20, v21): a row twice or missing; a command value the writer refuses (v06)
    (lambda r: r["bench"].append(dict(r["bench"][0])), "are not the command's: 1 more ([('decode', 32, 1, 8192, 1)])"),
    (lambda r: r["bench"].pop(), "are not the command's: 0 more ([]), 1 missing ([('prefill', 32, 4096, 32768)])"),
    (_command("--quick", "--quick --heads 0"), "environment.command's values are none bench indexer takes (--heads 0"),
    (lambda r: [r.pop(k) for k in ("targets", "sm80_build")], "no targets or sm80_build, which `sparse-mla bench "
                                                              "indexer` writes"),
])
def test_an_indexer_record_against_its_command_and_times(tmp_path, edit, says):
    rec = copy.deepcopy(_INDEXER)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_a_record_older_than_the_writers_command_form_is_not_compared(tmp_path):
    """Before c854b63 the writer wrote ``sparse-mla`` and a script's arguments (``sparse-mla /root/out``,
    results/h200/bench_kernel_h200_sweep1.json): such a command is not read; from then on it is."""
    rec = copy.deepcopy(_COMMITTED)
    rec["environment"]["command"] = "sparse-mla /root/out"
    assert verdict(tmp_path, rec).status == "invalid"
    rec["environment"]["date"] = "2026-11-29T21:47:14+00:00"
    assert verdict(tmp_path, rec).status == "unproven"


def test_a_command_listing_a_value_twice_runs_it_twice(tmp_path):
    """``--heads 8 8 --tokens 1``: the writer runs (8, 1) twice, two rows and two checks (breaker round 15, u01: a
    real writer's record was refused by a count of distinct values)."""
    rec = copy.deepcopy(_COMMITTED)
    rec["environment"]["command"] = rec["environment"]["command"] + " --heads 8 8 --tokens 1"
    rec["bench"] = [dict(rec["bench"][0]), dict(rec["bench"][0])]
    rec["checks"] = [dict(rec["checks"][0]), {**rec["checks"][0], "cache_tokens": 32768}]   # case i on cache i % 2
    v = verdict(tmp_path, rec)
    assert v.status == "unproven", v.line()


@pytest.mark.parametrize("record, edit, says", [
    # round 17's B1/B2: every figure either writer writes is held to its range, not only some of each row's
    (_COMMITTED, lambda r: r["bench"][0].update(triton_TBps=-0.2), "bench[0].triton_TBps is -0.2; accepted: a finite "
                                                                    "number of at least 0"),
    (_INDEXER, lambda r: r["bench"][0].update(triton_GBps=-5.0), "bench[0].triton_GBps is -5.0"),
    (_INDEXER, lambda r: r["bench"][0].update(deepgemm_GBps=-366.0), "bench[0].deepgemm_GBps is -366.0"),
    (_INDEXER, lambda r: r["bench"][0].update(rel_err_vs_ref=-1.0), "bench[0].rel_err_vs_ref is -1.0"),
    (_INDEXER, lambda r: r["bench"][0].update(rel_err_vs_deepgemm=-1.0), "bench[0].rel_err_vs_deepgemm is -1.0"),
    (_INDEXER, lambda r: r["bench"][0].update(splits=0), "bench[0].splits is 0; accepted: a number of at least 1"),
    (_COMMITTED, lambda r: r["checks"][0].update(flashmla_lse_err_if_base2=-1.0),
     "checks[0].flashmla_lse_err_if_base2 is -1.0"),
    (_COMMITTED, lambda r: r["bench"][0].update(triton_us=0.0), "bench[0].triton_us is 0.0; accepted: a time in µs"),
    # beyond in round 17 (c3_06, c3_07): launch parameters no Triton launch takes
    (_COMMITTED, lambda r: r["bench"][0].update(block_n=0), "bench[0].block_n is 0; accepted: a power of two"),
    (_COMMITTED, lambda r: r["bench"][0].update(num_warps=3), "bench[0].num_warps is 3; accepted: a power of two"),
    (_COMMITTED, lambda r: r["bench"][0].update(num_splits=0), "bench[0].num_splits is 0; accepted: a number of at "
                                                                "least 1"),
    # round 19 (R19-2): the header's measured copy bandwidth, which every row's frac_of_copy_bw is of
    (_INDEXER, lambda r: r["environment"].update(copy_bandwidth_GBps=-5.0), "environment.copy_bandwidth_GBps is -5.0"),
    (_COMMITTED, lambda r: r["environment"].update(copy_bandwidth_GBps=0), "environment.copy_bandwidth_GBps is 0"),
])
def test_every_figure_of_a_benchmark_row_is_held_to_its_range(tmp_path, record, edit, says):
    rec = copy.deepcopy(record)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()
