"""``sparse_mla.workbook.serving`` through ``records check``: a serving benchmark's passes, agreement summaries,
verdict, server block and servers' ``ran`` blocks against each other (issue 47, hole 7 of the verification round of
2026-12-06: none was checked, and each edit below of the committed, proven H200 serving record was proven)."""
import copy
import json

import pytest

from sparse_mla.workbook import proof
from sparse_mla.workbook.chain import project_root

SERVE_RECORD = project_root() / "results" / "h200" / "bench_serve_h200_8heads.json"
T, F = "TRITON_MLA_SPARSE", "FLASHMLA_SPARSE"


def verdict(tmp_path, rec):
    (tmp_path / "r.json").write_text(json.dumps(rec))
    [v] = proof.check([str(tmp_path / "r.json")])
    return v


def _timed(r, **changes):
    r["runs"][T]["passes"][0]["timed"].update(changes)


def _agreement(r, **changes):
    """Repeat 1 of the first run's agreement with the baseline given ``changes``, its totals re-summed."""
    a = r["agreement_vs_baseline"][F]
    a["per_repeat"][0].update(changes)
    a.update({f: sum(p[f] for p in a["per_repeat"]) for f in ("compared", "identical")})


def _servers(r, **changes):
    """Every server's command and the server block given ``changes`` alike (``max_model_len``, ``tp``)."""
    flags = {"max_model_len": "--max-model-len", "tp": "--tensor-parallel-size"}
    r["server"].update(changes)
    for run in r["runs"].values():
        cmd = run["servers"][0]["command"]
        for f, v in changes.items():
            cmd[cmd.index(flags[f]) + 1] = str(v)


@pytest.mark.parametrize("edit,says", [
    # the timed passes against vLLM's results and the load
    (lambda r: _timed(r, completed=999), f"runs.{T}.passes[0].timed.completed 999, vLLM's result 160"),
    (lambda r: _timed(r, duration=-3.0), f"runs.{T}.passes[0].timed.duration is -3.0; accepted: a number above 0"),
    (lambda r: _timed(r, seconds=0.5), "vLLM's duration 3.977707426000052 s is longer than the 0.5 s the client ran"),
    (lambda r: r["runs"][T]["passes"][1].update(repeat=1), f"runs.{T}.passes[1]: repeat 1 is not one of the load's"),
    # the agreement summaries against the repeats they sum
    (lambda r: r["agreement_vs_baseline"][F].update(identical=799), f"agreement_vs_baseline.{F}.identical 799, its "
                                                                     f"repeats' sum 36"),
    (lambda r: r["agreement_vs_baseline"][F].update(baseline=T + "X"), f"baseline '{T}X', the record's '{T}'"),
    (lambda r: r["agreement_vs_baseline"].pop(F), "agreement_vs_baseline compares ['FLASH_ATTN_MLA_SPARSE'], the "
                                                  "record's runs give"),
    (lambda r: r["speculative_vs_plain"].update({T + "+mtp": {"plain": T, "compared": 5, "identical": 5}}),
     f"speculative_vs_plain compares ['{T}+mtp'], the record's runs give []"),
    (lambda r: r["agreement_vs_baseline"][F]["per_repeat"][0].update(compared=900), "repeat 1 compares 900 requests, "
                                                                                    "more than the 160"),
    # each repeat's first divergences those of its differing requests (issue 47, round 8 leftovers: the breaker's
    # s08, 160 of 160 identical beside a divergence, and s10, a median past what 256 tokens can hold, were proven)
    (lambda r: _agreement(r, identical=160), f"agreement_vs_baseline.{F}: repeat 1: none of its 160 requests "
                                             f"differs, yet first_divergence_min 0 and first_divergence_median 161"),
    (lambda r: _agreement(r, first_divergence_median=100000), "first_divergence_median 100000; accepted: character "
                                                              "indexes, the least at most the median (equal where "
                                                              "one differs), up to 65536 (the load's 256 tokens"),
    (lambda r: _agreement(r, first_divergence_min=170), "first_divergence_min 170 and first_divergence_median 161"),
    (lambda r: _agreement(r, first_divergence_min=None), "152 of its 160 requests differ, first_divergence_min None"),
    (lambda r: _agreement(r, identical=159), "1 of its 160 requests differ, first_divergence_min 0 and "
                                             "first_divergence_median 161"),
    (lambda r: r["runs"][F]["agreement_across_repeats"][0].update(first_divergence_median=2.5),
     f"runs.{F}.agreement_across_repeats: repeat 2: 121 of its 160 requests differ"),
    # each timed pass's place in its round of the order (s17: every position 1)
    (lambda r: [p.update(position=1) for p in r["runs"][F]["passes"]],
     f"runs.{F}.passes[0].position 1: round 1 of the record's order ['{T}', '{F}', 'FLASH_ATTN_MLA_SPARSE'] serves "
     f"it 2"),
    (lambda r: r["runs"][T]["passes"][1].update(position=2), f"runs.{T}.passes[1].position 2: round 2"),
    # the verdict's rule and metrics the writer's (s26)
    (lambda r: r["verdict"].update(rule="A > B whenever the median is higher"),
     "verdict.rule 'A > B whenever the median is higher' is not the writer's; accepted: 'A > B on a metric only"),
    (lambda r: r["verdict"]["metrics"]["median_ttft_ms"].update(better="higher"),
     "verdict.metrics \"{'median_ttft_ms': {'label': 'median TTFT (ms)', 'better': 'higher'}}\" is not the "
     "writer's; accepted: \"{'median_ttft_ms': {'label': 'median TTFT (ms)', 'better': 'lower'}}\""),
    # the verdict against the repeats it ranks
    (lambda r: r["verdict"]["pairs"][0].update(better=T), "verdict.pairs[0]: better not what the repeats give"),
    (lambda r: r["verdict"]["pairs"][0].update(line=f"output tokens/s: {T} > {F}"), "verdict.pairs[0]: line not"),
    (lambda r: r["verdict"]["lines"].__setitem__(0, f"output tokens/s: {T} > {F}"), "verdict.lines are not its pairs'"),
    # the server block against the servers' commands, the header, the model and the load
    (lambda r: r["server"].update(tp=8), f"runs.{T}.servers[0].command: --tensor-parallel-size 1, the record's server"),
    (lambda r: _servers(r, tp=8), "server.tp 8 on the header's 1 GPU(s)"),
    (lambda r: _servers(r, max_model_len=512), "server.max_model_len 512: the load's longest prompt, its slack and new "
                                               "tokens need 1216"),
    (lambda r: _servers(r, max_model_len=10 ** 6), "and the writer gives at most 4096"),
    # the servers' ran blocks: against the request, and the run's one of them
    (lambda r: r["runs"][T]["servers"][0]["ran"].update(attention={F: 2}), f"{T}: servers[0].ran: attention: asked {T}"),
    (lambda r: r["runs"][T]["servers"][0].pop("ran"), f"runs.{T}.ran is none of its servers' ran"),
])
def test_a_serving_records_parts_are_each_others(tmp_path, edit, says):
    rec = json.loads(SERVE_RECORD.read_text())
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


@pytest.mark.parametrize("order", [sorted, lambda keys: list(reversed(keys))])      # breaker round 9 (v33, v38)
def test_the_verdict_does_not_follow_the_json_key_order_of_the_runs(tmp_path, order):
    """The runs (and repeats) in another key order -- the same JSON object -- are the same record: still proven."""
    rec = json.loads(SERVE_RECORD.read_text())
    for part in ("runs", "repeats"):
        rec[part] = {k: rec[part][k] for k in order(list(rec[part]))}
    assert list(rec["runs"]) != rec["order"][0]
    v = verdict(tmp_path, rec)
    assert v.status == "proven", v


def _across(r, i, **changes):
    r["runs"][F]["agreement_across_repeats"][i].update(changes)


@pytest.mark.parametrize("edit,says", [                  # breaker round 9 (v04, v05, v08, w24, w25)
    (lambda r: _across(r, 1, note="x"), f"runs.{F}.agreement_across_repeats: repeat 3 has a note 'x' yet compared 160"),
    (lambda r: _across(r, 0, against_repeat=2), "compares (repeat, against_repeat) [(2, 2), (3, 1)"),
    (lambda r: r["runs"][F]["agreement_across_repeats"].pop(), "(5, 1)] (each once, against the first)"),
    (lambda r: _across(r, 1, repeat=2), "compares (repeat, against_repeat) [(2, 1), (2, 1), (4, 1)"),
    (lambda r: r["agreement_vs_baseline"][F]["per_repeat"][4].update(repeat=6),
     f"agreement_vs_baseline.{F}.per_repeat compares repeats [1, 2, 3, 4, 6]; the repeats where both runs have a "
     f"result give [1, 2, 3, 4, 5]"),
])
def test_each_agreement_compares_the_repeats_the_writer_compares(edit, says):
    from sparse_mla.workbook.serving import agreement_problems

    rec = json.loads(SERVE_RECORD.read_text())
    assert agreement_problems(rec) == []
    edit(rec)
    assert any(says in p for p in agreement_problems(rec)), agreement_problems(rec)


_COMMITTED = json.loads(SERVE_RECORD.read_text())      # loaded once: each case below edits a copy


def _bench_timeout(r, seconds: float):
    r["environment"]["command"] += f" --bench-timeout {seconds}"
    r["server"]["bench_timeout_s"] = seconds


@pytest.mark.parametrize("edit,says", [                                    # breaker round 10 (s02, s49)
    (lambda r: _bench_timeout(r, 0.5), f"runs.{T}.passes[0].timed: vLLM's duration 3.977707426000052 s is longer than "
                                       f"the server block's bench_timeout_s 0.5 s, yet timed_out False"),
    (lambda r: r["runs"][F]["servers"][0].update(log_tail=["Traceback (most recent call last):"]),
     f"runs.{F}.servers[0] has a log_tail and no error; accepted: a log_tail only beside the error"),
])
def test_a_serving_record_whose_servers_say_what_the_writer_never_writes_is_invalid(tmp_path, edit, says):
    rec = copy.deepcopy(_COMMITTED)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


EARLIER = project_root() / "results" / "h200" / "bench_serve_h200.json"     # the openai-client method, no ran


def _rep(r, run=T, **changes):
    r["runs"][run]["repeats"][0].update(changes)


@pytest.mark.parametrize("edit,says", [                     # issue 47, breaker round 13 (r26, s14)
    (lambda r: r["load"].__setitem__("num_requests", 64), "repeats[0].requests 48, the load's num_requests 64"),
    (lambda r: _rep(r, output_tokens_per_s=float("inf")), "output_tokens_per_s inf, its output_tokens 2304"),
    (lambda r: _rep(r, output_tokens_per_s=1300.0), "output_tokens_per_s 1300.0, its output_tokens 2304"),
    (lambda r: _rep(r, duration_s=float("nan")), "duration_s nan is no time above 0 s"),
    (lambda r: r["runs"][T]["repeats"][0]["ttft_ms"].__setitem__("max", float("inf")), "ttft_ms.max inf"),
    (lambda r: _rep(r, errors=49), "errors 49 is no count of its 48 requests"),
    (lambda r: r["runs"][T]["repeats"].append(copy.deepcopy(r["runs"][T]["repeats"][0])),
     f"runs.{T}: 2 repeats, the load asks 1"),
    (lambda r: r["runs"][T]["summary"].__setitem__("errors", 3), "summary.errors 3, its repeats' errors sum to 0"),
])
def test_an_earlier_serving_record_is_held_to_its_own_load(tmp_path, edit, says):
    """A serving record of the earlier method (before ``vllm bench serve``) has no ``ran`` block, so it is never
    more than unproven; its repeats are still its load's and its figures finite (the live-server method's were)."""
    rec = json.loads(EARLIER.read_text())
    assert verdict(tmp_path, rec).status == "unproven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert (v.status, says in v.reason) == ("invalid", True), v.line()


def test_an_earlier_repeats_rate_is_its_tokens_over_its_rounded_duration():
    """The earlier writer divided by the unrounded duration and wrote ``duration_s`` to 0.1 ms: a rate whose implied
    duration rounds to it is the writer's, one just past half a step is not."""
    from sparse_mla.workbook.serving import earlier_method_problems

    rec = json.loads(EARLIER.read_text())
    rep = rec["runs"][T]["repeats"][0]
    tok, dur = rep["output_tokens"], rep["duration_s"]
    for implied, ok in ((dur + 4.9e-5, True), (dur - 4.9e-5, True), (dur + 5.2e-5, False)):
        rep["output_tokens_per_s"] = tok / implied
        assert (earlier_method_problems(rec) == []) is ok, (implied, earlier_method_problems(rec))


@pytest.mark.parametrize("edit,says", [                     # breaker round 14 (t43, t52, t55, t56)
    (lambda r: _rep(r, duration_s=0.0), "repeats[0].duration_s 0.0 is no time above 0 s"),
    (lambda r: _rep(r, output_tokens=2304.5, output_tokens_per_s=2304.5 / 1.9037), "output_tokens 2304.5 is no count"),
    (lambda r: r["runs"][T]["repeats"][0]["tpot_ms"].__setitem__("min", 50.0), "tpot_ms: min 50.0 above q1"),
    (lambda r: r["runs"][T].__setitem__("servers", []), f"runs.{T}.servers: the live-server method's"),
    (lambda r: r["runs"][T].pop("repeats"), f"runs.{T}.repeats None is no list of repeats"),
    (lambda r: r["runs"][T]["repeats"][0]["ttft_ms"].pop("median"), "ttft_ms: no median, which the writer's spread"),
    # round 16 (v22, v25, v26): a statistic the writer never writes; n none of the completed requests
    (lambda r: r["runs"][T]["repeats"][0]["ttft_ms"].__setitem__("mean", 500.0), "ttft_ms.mean: no statistic"),
    (lambda r: r["runs"][T]["repeats"][0]["ttft_ms"].__setitem__("n", 0), "ttft_ms.n 0: accepted exactly 48"),
    (lambda r: r["runs"][T]["repeats"][0]["tpot_ms"].__setitem__("n", 49), "tpot_ms.n 49: accepted from 1 to 48"),
])
def test_an_earlier_serving_records_repeats_are_its_writers(tmp_path, edit, says):
    rec = json.loads(EARLIER.read_text())
    edit(rec)
    v = verdict(tmp_path, rec)
    assert (v.status, says in v.reason) == ("invalid", True), v.line()
