"""sparse_mla.records.tables (and its kernel_tables, engine_tables, common): each table, rendered from records written
here with fresh random figures, holds exactly those figures (formatted as the table says), names its records, and
refuses bad input with one UserInputError line."""
from __future__ import annotations

import json
import os
import random

import pytest

from sparse_mla.errors import UserInputError
from sparse_mla.records import tables
from sparse_mla.records.common import markdown

#: Random figures from one seed per run: fixed unless SPARSE_MLA_TEST_SEED gives another (a failure names its seed,
#: and the same seed reproduces it; the tables' formatting is checked on every figure, not on chosen ones)
SEED = int(os.environ.get("SPARSE_MLA_TEST_SEED", "20261204"))


def rows(md: str) -> list[list[str]]:
    """The body rows of the first pipe table in ``md``, as cell strings."""
    lines = [ln for ln in md.split("\n") if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]]


def columns(md: str) -> list[str]:
    return [c.strip() for c in md.split("\n")[0].strip("|").split(" | ")]


def write(tmp_path, name, rec) -> str:
    (tmp_path / name).write_text(json.dumps(rec))
    return name


ENV = {"gpu": "NVIDIA H200", "date": "2026-12-01T13:54:22+00:00", "command": "sparse-mla bench kernel --quick",
       "peer": "flash_mla_sparse_fwd (bf16 prefill)"}


def kernel_record(rng: random.Random, with_old=True) -> dict:
    bench = []
    for h in (8, 64, 128):
        for t in (1, 32, 1024):
            if (h, t) == (128, 1024):
                continue                                    # a case the run did not make
            ours, peer = rng.uniform(5, 5000), rng.uniform(5, 5000)
            r = {"H": h, "T": t, "topk": 2048, "cache_tokens": 131072, "triton_graph_us": ours,
                 "flashmla_graph_us": peer, "speedup_vs_flashmla_graph": peer / ours,
                 "frac_of_copy_bw": rng.random(), "triton_TFLOPs": rng.uniform(1, 300),
                 "flashmla_TFLOPs": rng.uniform(1, 500)}
            if with_old:
                old = rng.uniform(5, 5000)
                r.update(old_graph_us=old, speedup_new_vs_old=old / ours)
            bench.append(r)
    checks = [{"H": 8, "T": 1, "nan": 0, "out_rel_err": rng.uniform(1e-3, 4e-3), "lse_max_abs_err": rng.random() * 1e-3,
               "flashmla_out_rel_err": rng.uniform(1e-3, 5e-3), "flashmla_lse_err_if_natural": rng.random() * 1e-3}
              for _ in range(5)]
    return {"environment": ENV, "bench": bench, "checks": checks}


def test_kernel_matrix_holds_each_cases_figure(tmp_path):
    rng = random.Random(SEED)
    rec = kernel_record(rng)
    f = write(tmp_path, "bench_kernel_x.json", rec)
    by_case = {(r["H"], r["T"]): r for r in rec["bench"]}
    for metric, value, form in [("peer", lambda r: r["flashmla_graph_us"] / r["triton_graph_us"], "{:.2f}x"),
                                ("old-peer", lambda r: r["flashmla_graph_us"] / r["old_graph_us"], "{:.2f}x"),
                                ("launch", lambda r: r["old_graph_us"] / r["triton_graph_us"], "{:.2f}x"),
                                ("copy", lambda r: r["frac_of_copy_bw"], "{:.2f}"),
                                ("us", lambda r: r["triton_graph_us"], "{:.1f}")]:
        md = tables.render("kernel", [f, metric], tmp_path)
        assert columns(md) == ["H", "T = 1", "T = 32", "T = 1024"], md
        got = {(int(r[0]), t): cell for r in rows(md) for t, cell in zip((1, 32, 1024), r[1:])}
        want = {c: form.format(value(by_case[c])) if c in by_case else "—" for c in got}
        assert got == want, (SEED, metric)
        assert "Record: `bench_kernel_x.json`: NVIDIA H200, 2026-12-01, `sparse-mla bench kernel --quick`" in md
    assert tables.render("kernel", [f], tmp_path) == tables.render("kernel", [f, "peer"], tmp_path)


def test_kernel_variants_holds_each_variants_time(tmp_path):
    """tools/gpu/fp8_where_time_goes.py's record: every variant's median and the figures derived from them, per
    case, the caption's topk / cache / repeats from the record; a record without cases, or with a field of another
    type, is refused naming the field."""
    rng = random.Random(SEED + 7)
    cases = []
    for h, t in ((8, 1), (16, 512)):
        us = {k: rng.uniform(2, 700) for k in ("gather", "loads", "decode", "scores", "full", "flashmla")}
        cases.append({"H": h, "T": t, "topk": 512, "cache_tokens": 4096, "block_h": 16, "block_n": 32, "num_warps": 4,
                      "num_splits": rng.randint(1, 64), "us": us, "us_repeats": {k: [v] * 5 for k, v in us.items()}})
    f = write(tmp_path, "fp8_variants.json", {"environment": ENV, "copy_bandwidth_TBps": 4.25, "cases": cases})
    md = tables.render("kernel-variants", [f], tmp_path)
    assert columns(md)[:4] == ["H", "T", "tile", "splits"] and len(rows(md)) == 2
    for row, c in zip(rows(md), cases):
        us, nbytes = c["us"], c["T"] * 512 * 656
        assert row[:4] == [str(c["H"]), str(c["T"]), "16x32 w4", str(c["num_splits"])]
        assert row[4:10] == [f"{us[k]:.1f}" for k in ("gather", "loads", "decode", "scores", "full", "flashmla")]
        assert row[10:] == [f"{nbytes / (us['loads'] * 1e-6) / 1e12:.2f}", f"{nbytes / (us['full'] * 1e-6) / 1e12:.2f}",
                            f"{us['flashmla'] / us['full']:.2f}x"], SEED
    assert "medians of 5 repeats" in md and "topk 512, 4096-slot" in md and "copy bandwidth was 4.25 TB/s" in md
    assert "Record: `fp8_variants.json`: NVIDIA H200" in md
    for case, says in (([], r"cases is \[\]; accepted: at least 1 entry"), ({"x": 1}, r"cases is \{'x': 1\}; accepted: a list"),
                       ([{**cases[0], "H": "eight"}], r"cases\[0\]\.H is 'eight'"),
                       ([{**cases[0], "us": [1, 2]}], r"cases\[0\]\.us"),
                       ([{**cases[0], "us": {**cases[0]["us"], "full": "fast"}}], r"cases\[0\]\.us"),
                       ([{**cases[0], "num_splits": True}], "num_splits is True"), (["a case"], r"cases\[0\]")):
        bad = write(tmp_path, "bad.json", {"environment": ENV, "cases": case})
        with pytest.raises(UserInputError, match=says):
            tables.render("kernel-variants", [bad], tmp_path)


def test_kernel_sweep_picks_each_option_sets_fastest_against_the_planned(tmp_path):
    """The variants record's sweep: per case the planned launch, each option set's fastest launch (its tile, warps,
    splits, time and planned / it), failed launches (NaN) counted and never picked."""
    rng = random.Random(SEED + 8)
    opts = ("none", "VEC_SCALES", "KEEP_CODES", "KEEP_CODES+VEC_SCALES")
    sweep = [{"H": 8, "T": 128, "block_h": 16, "block_n": bn, "num_warps": nw, "num_splits": sp, "options": o,
              "us": rng.uniform(50, 300), "planned": (bn, nw, sp, o) == (32, 4, 3, "none"), "error": ""}
             for bn in (16, 32) for nw in (4, 8) for sp in (3, 6) for o in opts]
    sweep.append({**sweep[0], "us": float("nan"), "block_n": 64, "error": "OutOfResources"})
    sweep.append({**sweep[1], "us": 0.5, "block_n": 64, "options": "KEEP_CODES"})   # a tile only one option set has
    f = write(tmp_path, "fp8_variants.json", {"environment": ENV, "sweep": sweep})
    md = tables.render("kernel-sweep", [f], tmp_path)
    [row] = rows(md)
    plan = next(r for r in sweep if r["planned"])
    assert row[:3] == ["8", "128", f"16x32 w4 s3: {plan['us']:.1f}"]
    for cell, o in zip(row[3:7], opts):
        best = min((r for r in sweep if r["options"] == o and r["us"] == r["us"]), key=lambda r: r["us"])
        assert cell == (f"16x{best['block_n']} w{best['num_warps']} s{best['num_splits']}: {best['us']:.1f} "
                        f"({plan['us'] / best['us']:.2f}x)"), (cell, best)
    assert row[7] == "1"
    bad = write(tmp_path, "bad.json", {"environment": ENV, "sweep": [{**sweep[0], "planned": "yes"}]})
    with pytest.raises(UserInputError, match=r"sweep\[0\]\.planned is 'yes'"):
        tables.render("kernel-sweep", [bad], tmp_path)


def test_kernel_cases_and_errors(tmp_path):
    rng = random.Random(SEED + 1)
    rec = kernel_record(rng)
    f = write(tmp_path, "k.json", rec)
    md = tables.render("kernel-cases", [f, "64:32", "8:1"], tmp_path)
    r = {(x["H"], x["T"]): x for x in rec["bench"]}
    assert [row[:7] for row in rows(md)] == [
        [str(h), str(t), f"{r[h, t]['triton_graph_us']:.1f}", f"{r[h, t]['flashmla_graph_us']:.1f}",
         f"{r[h, t]['speedup_vs_flashmla_graph']:.2f}x", f"{r[h, t]['old_graph_us']:.1f}",
         f"{r[h, t]['speedup_new_vs_old']:.2f}x"] for h, t in ((64, 32), (8, 1))], SEED
    assert "previous launch (µs)" not in tables.render("kernel-cases", [write(tmp_path, "n.json", kernel_record(
        rng, with_old=False)), "8:1"], tmp_path)
    err = tables.render("kernel-errors", [f], tmp_path)
    ours = [c["out_rel_err"] for c in rec["checks"]]
    lo, hi = (f"{v:.1e}".replace("e-03", "e-3") for v in (min(ours), max(ours)))
    assert rows(err)[0][:3] == ["ours", "5", f"{lo}–{hi}" if lo != hi else lo], SEED
    assert "fp32 reference" in err


@pytest.mark.parametrize("args,says", [
    (["k.json", "speed"], "metric 'speed' is unknown; accepted: peer, launch"),
    (["n.json", "launch"], "holds no 'launch' figure"),
    (["k.json", "peer", "extra"], "3 argument(s)"),
    (["missing.json"], "record 'missing.json' (" ),
    (["list.json"], "is not a kernel benchmark record: it has no 'bench'"),
    (["bad.json"], "is not valid JSON"),
])
def test_kernel_matrix_refuses_bad_input(tmp_path, args, says):
    rng = random.Random(SEED)
    write(tmp_path, "k.json", kernel_record(rng))
    write(tmp_path, "n.json", kernel_record(rng, with_old=False))
    write(tmp_path, "list.json", [1, 2])
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(UserInputError, match="accepted") as e:
        tables.render("kernel", args, tmp_path)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["64", "a:b", "64:", "3:3"])
def test_kernel_cases_refuse_a_case_the_record_lacks_or_not_h_t(tmp_path, case):
    f = write(tmp_path, "k.json", kernel_record(random.Random(SEED)))
    with pytest.raises(UserInputError, match="accepted"):
        tables.render("kernel-cases", [f, case], tmp_path)


def test_indexer_tables(tmp_path):
    rng = random.Random(SEED + 2)
    dec = {"kind": "decode", "H": 32, "B": 8, "context": 8192, "next_n": 1, "triton_us": rng.uniform(1, 99),
           "deepgemm_us": rng.uniform(1, 99), "frac_of_copy_bw": rng.random(), "sm80_path_us": float("nan")}
    pre = {"kind": "prefill", "H": 32, "M": 1024, "N": 8192, "triton_us": rng.uniform(100, 900),
           "deepgemm_us": rng.uniform(50, 99), "sm80_path_us": rng.uniform(900, 2000)}
    for r in (dec, pre):
        r["speed_vs_deepgemm"] = r["deepgemm_us"] / r["triton_us"]
    target = {"target": "decode: speed vs DeepGEMM", "goal": 0.7, "min": rng.random(), "max": 1 + rng.random(),
              "met": 1, "cases": 1}
    f = write(tmp_path, "i.json", {"environment": ENV, "bench": [dec, pre], "targets": [target]})
    got = rows(tables.render("indexer", [f], tmp_path))
    assert got[0][:7] == ["decode", "32", "B 8 × context 8192, next_n 1", f"{dec['triton_us']:.1f}",
                          f"{dec['deepgemm_us']:.1f}", f"{dec['speed_vs_deepgemm']:.2f}x",
                          f"{dec['frac_of_copy_bw']:.2f}"] and got[0][-1] == "—", SEED
    assert got[1][2] == "M 1024 × N 8192" and got[1][6] == "—" and got[1][-1] == f"{pre['sm80_path_us']:.1f}"
    assert rows(tables.render("indexer-targets", [f], tmp_path)) == [
        ["decode: speed vs DeepGEMM", "0.70", f"{target['min']:.2f}", f"{target['max']:.2f}", "1 of 1"]]


def engine_record(rng: random.Random) -> dict:
    ran = {"capability": "9.0", "indexer": {"triton": rng.randrange(1, 500), "deepgemm": 0},
           "triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm90"]},
           "attention": {"TRITON_MLA_SPARSE": 2}, "indexer_cache": {"DEEPSEEK_V32_INDEXER": 2}}
    layers = {"l0.attn": {"backend": "FLASHMLA_SPARSE"}, "l0.indexer.k_cache": {"backend": "DEEPSEEK_V32_INDEXER"},
              "l1.attn": {"backend": "FLASHMLA_SPARSE"}}
    tput = {"ours": round(rng.uniform(100, 9000), 1), "peer": round(rng.uniform(100, 9000), 1)}
    return {"environment": {**ENV, "command": "sparse-mla launch --parity"}, "kv_cache_dtype": "auto",
            "runs": {"ours": {"backend_requested": "TRITON_MLA_SPARSE", "indexer": "TRITON_DSA_INDEXER",
                              "enforce_eager": True, "ran": ran},
                     "peer": {"backend_requested": "FLASHMLA_SPARSE", "enforce_eager": False, "layers": layers},
                     "broken": {"backend_requested": "FLASHMLA_SPARSE", "error": "exit 1"}},
            "serve": {"backend_requested": "TRITON_MLA_SPARSE", "matches_offline": False,
                      "backend_log_lines": ["INFO [cuda.py:422] Using AttentionBackendEnum.CUSTOM backend."]},
            "reference_first_token": {"ours": [{"same_first_token": True}, {"same_first_token": False}],
                                      "peer": [{"same_first_token": True}]},
            "throughput_tokens_per_s": tput,
            "parity_pairs": [{"a": "ours", "b": "peer", "per_prompt": [
                {"prompt_len": 48, "identical": False, "first_divergence": 7, "max_abs_logprob_diff": 0.0151},
                {"prompt_len": 900, "identical": True, "first_divergence": None, "max_abs_logprob_diff": 0.031}]}]}


def test_engines_say_what_ran_and_where_it_was_read(tmp_path):
    rec = engine_record(random.Random(SEED + 3))
    f = write(tmp_path, "launch.json", rec)
    md = tables.render("engines", [f], tmp_path)
    got = {r[1]: r for r in rows(md)}
    calls = rec["runs"]["ours"]["ran"]["indexer"]["triton"]
    assert got["ours"][2:] == ["TRITON_DSA_INDEXER", "auto", "no", "TRITON_MLA_SPARSE 2", "ran",
                               f"triton {calls}, deepgemm 0", "1 of 2",
                               f"{rec['throughput_tokens_per_s']['ours']:.0f}", "—"], SEED
    assert got["peer"][5:7] == ["FLASHMLA_SPARSE 2", "layers"] and got["peer"][4] == "yes"   # cache layers left out
    assert got["broken"][-1] == "failed: exit 1" and got["broken"][5] == "—"
    assert got["serve"][5:7] == ["CUSTOM", "server log"] and got["serve"][-1] == "same tokens as offline: no"
    assert all(r[0] == "`launch.json`" for r in rows(md))
    one = write(tmp_path, "one.json", {"backend_requested": "TRITON_MLA_SPARSE", "attention_backends":
                                       ["DEEPSEEK_V32_INDEXER", "TRITON_MLA_SPARSE"], "note": "assembled by hand"})
    md = tables.render("engines", [one], tmp_path)
    assert rows(md)[0][5:7] == ["TRITON_MLA_SPARSE", "attention_backends"]
    assert "`one.json`: no GPU named, no date, no command; the record's note: assembled by hand" in md
    with pytest.raises(UserInputError, match="holds no engine run"):
        tables.render("engines", [write(tmp_path, "s.json", {"notebooks": []})], tmp_path)


def test_parity_of_new_and_old_records(tmp_path):
    rec = engine_record(random.Random(SEED))
    f = write(tmp_path, "new.json", rec)
    old = {"runs": {}, "parity_vs_ours": {"peer": {"per_prompt": rec["parity_pairs"][0]["per_prompt"]}}}  # vs ours
    g = write(tmp_path, "old.json", old)
    got = rows(tables.render("parity", [f, g], tmp_path))
    assert got[:2] == [["`new.json`", "ours", "peer", "48", "no", "7", "0.02"],
                       ["`new.json`", "ours", "peer", "900", "yes", "—", "0.03"]]
    assert [r[1:3] for r in got[2:]] == [["TRITON_MLA_SPARSE", "peer"]] * 2


def serve_summary(rng, n):
    vals = [rng.uniform(100, 3000) for _ in range(n)]
    return {"median": sorted(vals)[n // 2], "min": min(vals), "max": max(vals), "n": n}


def test_serve_reads_vllm_names_and_the_first_clients_names(tmp_path):
    rng = random.Random(SEED + 4)
    new = {"environment": ENV, "runs": {
        "ours": {"backend_requested": "TRITON_MLA_SPARSE", "summary": {
            "output_throughput": serve_summary(rng, 3), "median_ttft_ms": serve_summary(rng, 3),
            "median_tpot_ms": serve_summary(rng, 3)}},
        "ours+ngram": {"backend_requested": "TRITON_MLA_SPARSE", "speculative_config": {"method": "ngram"},
                       "summary": {"output_throughput": serve_summary(rng, 3),
                                   "spec_decode_acceptance_rate": {"median": 25.0, "min": 20.0, "max": 30.0, "n": 3}},
                       "error": "server died"}},
        "speculative_vs_plain": {"ours+ngram": {"plain": "ours", "identical": 40, "compared": 96}}}
    old = {"environment": ENV, "complete": False, "runs": {"FLASHMLA_SPARSE": {
        "backend_requested": "FLASHMLA_SPARSE", "spec_decode": {"acceptance_rate": 0.5},   # a fraction then
        "summary": {"output_tokens_per_s": serve_summary(rng, 1), "tpot_ms_median": serve_summary(rng, 1),
                    "errors": 0}}},
        "agreement_vs_baseline": {"FLASHMLA_SPARSE": {"baseline": "TRITON_MLA_SPARSE", "identical": 17,
                                                      "compared": 48}}}
    md = tables.render("serve", [write(tmp_path, "new.json", new), write(tmp_path, "old.json", old)], tmp_path)
    got = {r[1]: r for r in rows(md)}
    t = new["runs"]["ours"]["summary"]["output_throughput"]
    assert got["ours"][4:6] == ["3", f"{t['median']:.0f} ({t['min']:.0f}–{t['max']:.0f})"], SEED
    assert got["ours+ngram"][3] == "ngram" and got["ours+ngram"][-3:] == ["40 of 96 vs ours", "25.0",
                                                                          "failed: server died"]
    o = old["runs"]["FLASHMLA_SPARSE"]["summary"]
    assert got["FLASHMLA_SPARSE"][4:8] == ["1", f"{o['output_tokens_per_s']['median']:.0f}", "—",
                                           f"{o['tpot_ms_median']['median']:.2f}"], SEED
    assert got["FLASHMLA_SPARSE"][8:10] == ["17 of 48 vs TRITON_MLA_SPARSE", "50.0"]
    assert "`old.json`: NVIDIA H200, 2026-12-01" in md and "(marked incomplete" in md


def test_unknown_tables_and_argument_counts(tmp_path):
    with pytest.raises(UserInputError, match=r"'kernels' is unknown; accepted: engines FILE \[FILE \.\.\.\], indexer"):
        tables.render("kernels", [], tmp_path)
    for name in ("kernel", "engines", "serve", "parity", "indexer"):
        with pytest.raises(UserInputError, match=f"records table {name}: 0 argument"):
            tables.render(name, [], tmp_path)


def test_markdown_escapes_pipes_and_shows_missing_values():
    md = markdown(["a", "b"], [["x|y", None], [float("nan"), 1]], ["note"])
    assert md.split("\n") == ["| a | b |", "|---|---|", "| x\\|y | — |", "| — | 1 |", "", "note"]


def test_a_record_that_is_no_json_is_named_in_a_whole_sentence(tmp_path):
    """Issue 47, round 8: "accepted: a engine (launch) record (a JSON object with )" for a kind that needs no key."""
    from sparse_mla.errors import UserInputError
    from sparse_mla.records.common import load

    (tmp_path / "x.json").write_text("not json")
    with pytest.raises(UserInputError) as e:
        load("x.json", tmp_path, "engine (launch)", ())
    assert str(e.value).endswith("accepted: an engine (launch) record (a JSON object)"), str(e.value)
