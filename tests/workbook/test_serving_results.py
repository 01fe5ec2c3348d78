"""``records check`` on vLLM's own results of a serving benchmark, its servers' command lines and its wall time
(:mod:`sparse_mla.workbook.serving_results`): issue 47, round 7 -- edits of the committed live-server record that
were proven."""
import copy
import json
from pathlib import Path

import pytest

from sparse_mla.workbook import proof, serving_results

RECORD = Path(__file__).resolve().parents[2] / "results" / "h200" / "bench_serve_h200_8heads.json"
FM = "FLASHMLA_SPARSE"


def verdict(tmp_path, rec) -> proof.Verdict:
    (tmp_path / "s.json").write_text(json.dumps(rec))
    [v] = proof.check([str(tmp_path / "s.json")])
    return v


def _result(r, **changes):
    r["repeats"][FM][0].update(changes)


def _output_tokens(r, n: int):
    """Repeat 1 of FLASHMLA_SPARSE making ``n`` output tokens, its throughputs what vLLM computes from them."""
    res = r["repeats"][FM][0]
    res.update(total_output_tokens=n, output_throughput=n / res["duration"],
               total_token_throughput=(res["total_input_tokens"] + n) / res["duration"])


def _server_command(r, edit):
    edit(r["runs"][FM]["servers"][0]["command"])


def _drop_backend(cmd: list):
    i = cmd.index("--attention-backend")
    del cmd[i:i + 2]


@pytest.mark.parametrize("edit,says", [
    # vLLM's figures against each other (b02, b04, b26)
    (lambda r: _result(r, total_output_tokens=1), f"repeats.{FM}[0].output_throughput 6530.225439404965, not its "
                                                  f"total_output_tokens 1 over its duration"),
    (lambda r: _result(r, request_throughput=999.0), f"repeats.{FM}[0].request_throughput 999.0, not its completed 160"),
    (lambda r: _output_tokens(r, 1), f"repeats.{FM}[0].total_output_tokens 1: 160 requests of the load's output_len "
                                     f"256 make 40960 to 40960"),
    (lambda r: _result(r, total_input_tokens=10 ** 9), "total_input_tokens 1000000000: 160 prompts of the load's 128 "
                                                       "to 896 tokens"),
    # latencies no run has, or out of order (b27, b28)
    (lambda r: _result(r, p99_tpot_ms=-3.0), f"repeats.{FM}[0].p99_tpot_ms is -3.0; accepted: a time in ms of at "
                                             f"least 0"),
    (lambda r: _result(r, p99_ttft_ms=0.001), f"repeats.{FM}[0]: the ttft percentiles "),
    (lambda r: _result(r, median_itl_ms=50.0), f"repeats.{FM}[0].median_itl_ms 50.0, its p50 "),
    # the load, the server, the session (b12, b13, b16)
    (lambda r: _result(r, max_concurrency=64), f"repeats.{FM}[0].max_concurrency 64, the load's 32"),
    (lambda r: _result(r, model_id="/tmp/some_other_model"),
     f"repeats.{FM}[0].model_id '/tmp/some_other_model', the run's server serves ['/tmp/ck8']"),
    (lambda r: _result(r, date="19991204-132508"), f"repeats.{FM}[0].date '19991204-132508' is not within the session"),
    # each server's command line against its run and the record (b07, b09, b21)
    (lambda r: _server_command(r, lambda c: c.__setitem__(c.index("--attention-backend") + 1,
                                                          "FLASH_ATTN_MLA_SPARSE")),
     f"runs.{FM}.servers[0].command: --attention-backend FLASH_ATTN_MLA_SPARSE, the run spec 'FLASHMLA_SPARSE' is "
     f"served with FLASHMLA_SPARSE"),
    (lambda r: _server_command(r, _drop_backend), f"runs.{FM}.servers[0].command: no --attention-backend"),
    (lambda r: _server_command(r, lambda c: c.__setitem__(2, "/tmp/other_model")),
     f"runs.{FM}.servers[0].command: serves '/tmp/other_model', the record's model.path 'ck8'"),
    (lambda r: _server_command(r, lambda c: c.__setitem__(c.index("--port") + 1, "1")),
     f"runs.{FM}.warmup: --base-url http://127.0.0.1:37221, its server listens on port 1"),
    # the load's prompts sized by another top-k than the model's
    (lambda r: r["model"].update(index_topk=500), "load.input_lengths [128, 896], the model's index_topk 500 gives "
                                                  "[125, 875]"),
    # the session's wall time (b10)
    (lambda r: r.update(wall_s=1.0), "wall_s 1.0: the session ran 3 server(s) and 15 timed pass(es) one after "
                                     "another, 418.4 s"),
])
def test_a_serving_record_whose_results_servers_or_time_disagree_is_invalid(tmp_path, edit, says):
    rec = json.loads(RECORD.read_text())
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_the_committed_serving_records_agree_with_themselves():
    for f in sorted(RECORD.parent.glob("bench_serve_*.json")):
        assert serving_results.serving_result_problems(json.loads(f.read_text())) == [], f


def _timed_option(r, option: str, value: str):
    cmd = r["runs"][FM]["passes"][0]["timed"]["command"]
    cmd[cmd.index(option) + 1] = value


@pytest.mark.parametrize("edit, says", [                  # issue 47, breaker round 8 (s19, s20, s28, s21)
    (lambda r: _timed_option(r, "--max-concurrency", "64"), "'--max-concurrency 64' where the writer puts "
                                                            "'--max-concurrency 32'"),
    (lambda r: _timed_option(r, "--num-prompts", "16"), "'--num-prompts 16'"),
    (lambda r: r["load"].update(seed=7), "'--seed 0' where the writer puts '--seed 7'"),
    (lambda r: r["runs"][FM]["servers"][0]["warmup"].update(result_file="other_r1.json"), "warmup.command"),
])
def test_a_client_pass_is_the_command_the_writer_builds_for_the_load(tmp_path, edit, says):
    rec = json.loads(RECORD.read_text())
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def _command(r, old: str, new: str):
    r["environment"]["command"] = r["environment"]["command"].replace(old, new)


@pytest.mark.parametrize("edit, says", [              # issue 47, breaker round 9 (x01-x10, w36-w38)
    (lambda r: _command(r, "--quick", "--quick --backends FLASHMLA_SPARSE"),
     "runs ['TRITON_MLA_SPARSE', 'FLASHMLA_SPARSE', 'FLASH_ATTN_MLA_SPARSE'], the command asks ['FLASHMLA_SPARSE']"),
    (lambda r: _command(r, "--quick", "--quick --backends FLASHMLA_SPARSE,TRITON_MLA_SPARSE,FLASH_ATTN_MLA_SPARSE"),
     "baseline 'TRITON_MLA_SPARSE', the command's first run 'FLASHMLA_SPARSE'"),
    (lambda r: _command(r, "--quick", "--quick --num-prompts 256"), "load.num_prompts 160, the command asks 256"),
    (lambda r: _command(r, "--quick", "--repeats 3"), "load.repeats 5, the command asks 3"),
    (lambda r: _command(r, "--quick", "--quick --kv-cache-dtype fp8"), "server.kv_cache_dtype 'auto', the command asks 'fp8'"),
    (lambda r: _command(r, "--quick", "--quick --eager"), "server.cuda_graphs True, the command asks False"),
    (lambda r: _command(r, "/tmp/ck8", "/tmp/ck512"), "model.path 'ck8', the command asks --model /tmp/ck512 ('ck512')"),
    (lambda r: _command(r, "bench serve", "bench kernel"), "environment.command is `sparse-mla bench kernel ...`"),
    (lambda r: _command(r, "--quick", "--quick --speculative ngram"), "TRITON_MLA_SPARSE+ngram"),
    (lambda r: _command(r, "--quick", "--quick --seed 7"), "load.seed 0, the command asks 7"),
    (lambda r: _command(r, "--quick", "--quick --banana 3"), "arguments bench serve does not take: ['--banana', '3']"),
    (lambda r: _command(r, "--quick", "--quick --speculative banana"), "environment.command: --speculative 'banana' is not"),
    (lambda r: _command(r, "h200_8heads", "h200_other"), f"runs.{FM}.servers[0].log 'bench_serve_h200_8heads_{FM}.log', "
                                                         f"the writer's 'bench_serve_h200_other_{FM}.log'"),
])
def test_a_serving_record_is_what_its_own_command_asks(edit, says):
    from sparse_mla.workbook.serve_command import serve_command_problems

    rec = json.loads(RECORD.read_text())
    assert serve_command_problems(rec) == []
    edit(rec)
    assert any(says in p for p in serve_command_problems(rec)), serve_command_problems(rec)


def test_a_serving_record_whose_command_disagrees_is_invalid(tmp_path):
    rec = json.loads(RECORD.read_text())
    _command(rec, "--quick", "--quick --seed 7")
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and "load.seed 0, the command asks 7" in v.reason


def _no_command(r):
    r["environment"]["command"] = "python: sparse_mla (called from bench.py)"


@pytest.mark.parametrize("edit, says", [              # breaker round 9 (v25, w08, w09, w18, v28)
    (lambda r: r["load"].update(temperature=0.7), "load.temperature 0.7; accepted: 0.0"),
    (lambda r: r["load"].update(ignore_eos=False), "load.ignore_eos False; accepted: True"),
    (lambda r: r["server"].update(prefix_caching=True), "server.prefix_caching True; accepted: False"),
    (lambda r: r["runs"][FM]["servers"][0]["command"].remove("--no-enable-prefix-caching"),
     f"runs.{FM}.servers[0].command: --no-enable-prefix-caching absent, the record's server.prefix_caching False"),
    (lambda r: r["runs"][FM]["servers"][0].update(wall_s=10.0),
     f"runs.{FM}.servers[0].wall_s 10.0, less than its server_up_s 93.1"),
])
def test_a_serving_record_holds_what_its_writer_writes_whatever_the_command(edit, says):
    rec = json.loads(RECORD.read_text())
    assert serving_results.serving_result_problems(rec) == []
    edit(rec)
    assert any(says in p for p in serving_results.serving_result_problems(rec)), \
        serving_results.serving_result_problems(rec)


def test_a_servers_log_names_its_own_run_without_a_command():
    from sparse_mla.workbook.serve_command import serve_command_problems

    rec = json.loads(RECORD.read_text())
    _no_command(rec)
    assert serve_command_problems(rec) == []
    rec["runs"][FM]["servers"][0]["log"] = "bench_serve_h200_8heads_TRITON_MLA_SPARSE.log"
    assert any(f"runs.{FM}.servers[0].log 'bench_serve_h200_8heads_TRITON_MLA_SPARSE.log', not the writer's "
               f"bench_serve_<tag>_{FM}.log" in p for p in serve_command_problems(rec))


def test_the_session_speculation_is_its_runs():                # breaker round 9 (v24)
    rec = json.loads(RECORD.read_text())
    assert serving_results.speculation_problems(rec) == []
    rec["speculative_config"] = {"method": "ngram", "num_speculative_tokens": 3}
    assert serving_results.speculation_problems(rec) == [
        "speculative_config {'method': 'ngram', 'num_speculative_tokens': 3}, yet no run is served with it"]
    rec["runs"][FM]["speculative_config"] = {"method": "mtp"}
    assert f"runs.{FM}.speculative_config {{'method': 'mtp'}}, the record's speculative_config" in \
        serving_results.speculation_problems(rec)[0]


@pytest.mark.parametrize("field, value", [("burstiness", 2.0), ("request_rate", 5.0)])      # round 9 (w29, w30)
def test_a_results_arrival_is_what_its_pass_asked(field, value):
    rec = json.loads(RECORD.read_text())
    _result(rec, **{field: value})
    assert any(p.startswith(f"repeats.{FM}[0].{field} {value}, its pass's command asks")
               for p in serving_results.result_problems(rec)), serving_results.result_problems(rec)


def test_servers_live_at_once_listen_on_ports_of_their_own():          # breaker round 9 (w33)
    rec = json.loads(RECORD.read_text())
    assert serving_results.server_command_problems(rec) == []
    t, f = (rec["runs"][k]["servers"][0]["command"] for k in ("TRITON_MLA_SPARSE", FM))
    f[f.index("--port") + 1] = t[t.index("--port") + 1]
    for p in rec["runs"][FM]["passes"]:
        p["timed"]["command"] = [c.replace(c.rsplit(":", 1)[-1], t[t.index("--port") + 1]) if c.startswith("http")
                                 else c for c in p["timed"]["command"]]
    assert any(f"runs.{FM}.servers[0].command: --port {t[t.index('--port') + 1]}, the port of "
               f"runs.TRITON_MLA_SPARSE.servers[0], live at the same time" in p
               for p in serving_results.server_command_problems(rec)), serving_results.server_command_problems(rec)


_COMMITTED = json.loads(RECORD.read_text())          # loaded once: each case below edits a copy


def _all_passes(r):
    for run in r["runs"].values():
        yield from [s["warmup"] for s in run["servers"]] + [p["timed"] for p in run["passes"]]


def _option(cmd: list, option: str, value: str):
    cmd[cmd.index(option) + 1] = value


def _server_timeout(r, seconds: int):
    """The header asking ``--server-timeout seconds``, the server block and every pass's ready time-out with it."""
    _command(r, "--quick", f"--quick --server-timeout {seconds}")
    r["server"]["server_timeout_s"] = float(seconds)
    for p in _all_passes(r):
        _option(p["command"], "--ready-check-timeout-sec", str(seconds))


def _memory_share(r, share: float):
    r["server"]["gpu_memory_utilization"] = share
    for run in r["runs"].values():
        _option(run["servers"][0]["command"], "--gpu-memory-utilization", str(share))


@pytest.mark.parametrize("edit, says", [             # breaker round 10 (s01, s05-s07, s09, s14, s23-s27)
    (lambda r: _command(r, "sparse-mla bench", "python -m sparse_mla bench"),
     "environment.command 'python -m sparse_mla bench serve --model /tmp/ck8 --quick --out-dir results/h200' is in no "
     "form the writer writes; accepted: `sparse-mla bench serve ...`"),
    (lambda r: _command(r, "sparse-mla bench", "/usr/local/bin/sparse-mla bench"), "is in no form the writer writes"),
    (lambda r: _server_timeout(r, 5000),
     "environment.command: --server-timeout 5000.0 is not accepted; accepted: seconds in (0, 3600]"),
    (lambda r: _option(r["runs"][FM]["passes"][0]["timed"]["command"], "--ready-check-timeout-sec", "5000"),
     "'--ready-check-timeout-sec 5000' where the writer puts '--ready-check-timeout-sec 300'"),
    (lambda r: _command(r, "--out-dir results/h200", "--out-dir results/h100"),
     "warmup.command: --result-dir results/h200, the command's --out-dir results/h100"),
    (lambda r: _memory_share(r, 0.4), "server.gpu_memory_utilization 0.4, the writer's share of the GPU for the "
                                      "command's 3 runs 0.283 (bench.serve.server_memory_share)"),
    (lambda r: _result(r, backend="vllm", endpoint_type="vllm"),
     f"repeats.{FM}[0].backend 'vllm', its pass's command asks --backend openai"),
    (lambda r: _result(r, tokenizer_id="/tmp/other"),
     f"repeats.{FM}[0].tokenizer_id '/tmp/other', its pass's command asks --tokenizer /tmp/ck8"),
    (lambda r: _result(r, label="x"), f"repeats.{FM}[0].label 'x', its pass's command asks no --label"),
    (lambda r: _result(r, date="2026-12-04"),
     f"repeats.{FM}[0].date '2026-12-04' is not vLLM's; accepted: a date as '%Y%m%d-%H%M%S'"),
    (lambda r: r["load"].update(prompts_file="/tmp/x.jsonl"),
     "load.prompts_file '/tmp/x.jsonl' with the dataset 'random'; accepted: None"),
])
def test_a_serving_record_the_writer_would_not_write_is_invalid(tmp_path, edit, says):
    rec = copy.deepcopy(_COMMITTED)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


@pytest.mark.parametrize("command", [                # the forms the writer writes for the same run stay proven
    "sparse-mla bench serve --model /tmp/ck8 --quick --tag h200_8heads",          # no --out-dir: results/<the GPU>
    "sparse-mla bench serve --model /tmp/ck8 --quick --out-dir ./results/h200/ --tag h200_8heads",
    "python: sparse_mla (called from bench.py)",
])
def test_a_serving_record_in_a_form_the_writer_writes_is_proven(tmp_path, command):
    rec = copy.deepcopy(_COMMITTED)
    rec["environment"]["command"] = command
    assert verdict(tmp_path, rec).status == "proven", verdict(tmp_path, rec).line()


def test_a_repeat_dataset_record_as_the_writer_writes_it_is_proven(tmp_path):
    """The ``repeat`` dataset (the default under ``--speculative ngram``): the load names the prompts file, each pass
    reads it from the record's folder (``bench_serve`` writes it there); round 8's check of the pass commands called
    every such record invalid. Made from the committed record with the writer's own ``dataset_args``."""
    from sparse_mla.bench.serve import dataset_args

    rec, name = copy.deepcopy(_COMMITTED), "bench_serve_h200_8heads_prompts.jsonl"
    _command(rec, "--quick", "--quick --dataset repeat")
    old = rec["load"]["dataset_args"]
    rec["load"].update(dataset="repeat", prompts_file=name, dataset_args=dataset_args("repeat", 512, 256, Path(name)))
    new = dataset_args("repeat", 512, 256, Path("results/h200") / name)
    for p in _all_passes(rec):
        i = p["command"].index(old[0])
        p["command"][i:i + len(old)] = new
    assert verdict(tmp_path, rec).status == "proven", verdict(tmp_path, rec).line()
    rec["load"]["prompts_file"] = None
    assert "load.prompts_file None with the dataset 'repeat'" in verdict(tmp_path, rec).reason


def _input_tokens(r, n: int):
    """Repeat 3 of FLASHMLA_SPARSE sending ``n`` prompt tokens, its total throughput what vLLM computes from them."""
    res = r["repeats"][FM][2]
    res.update(total_input_tokens=n, total_token_throughput=(n + res["total_output_tokens"]) / res["duration"])


@pytest.mark.parametrize("edit, says", [            # breaker round 11: vLLM's metric relations (RELATIONS)
    (lambda r: _result(r, median_e2el_ms=50.0), f"repeats.{FM}[0].median_ttft_ms 105.10588600004667 is more than "
                                                f"its median_e2el_ms 50.0"),                            # v03
    (lambda r: _result(r, mean_e2el_ms=200.0), f"repeats.{FM}[0].mean_ttft_ms 313.3412113187518 is more than its "
                                               f"mean_e2el_ms 200.0"),                                  # w02
    (lambda r: _result(r, p90_e2el_ms=900.0), f"repeats.{FM}[0].p90_ttft_ms 987.7709982000397 is more than its "
                                              f"p90_e2el_ms 900.0"),                                    # w03
    (lambda r: _result(r, mean_ttft_ms=1300.0), "mean_ttft_ms 1300.0 is more than its mean_e2el_ms"),   # w17
    (lambda r: _result(r, p99_e2el_ms=9000.0), f"repeats.{FM}[0].p99_e2el_ms 9000.0 is more than its duration in ms "
                                               f"6272.371509999857"),                                   # v16
    (lambda r: _result(r, std_e2el_ms=0.0), f"repeats.{FM}[0].std_e2el_ms 0, yet its {{'median_e2el_ms': "),  # w18
    (lambda r: _result(r, max_output_tokens_per_s=50000.0), f"repeats.{FM}[0].max_output_tokens_per_s 50000.0 is "
                                                            f"more than its total_output_tokens + completed 41120"),
    (lambda r: _result(r, max_concurrent_requests=500), f"repeats.{FM}[0].max_concurrent_requests 500 is more than "
                                                        f"its completed 160"),                          # v21
    (lambda r: _input_tokens(r, 84000), f"repeats.{FM}[2].total_input_tokens 84000, repeats.TRITON_MLA_SPARSE[0]'s "
                                        f"84502: every pass completing the load sends its same prompts"),  # w08
    (lambda r: _result(r, request_goodput=12.5), f"repeats.{FM}[0].request_goodput 12.5, its pass's command gives "
                                                 f"no --goodput; accepted: null"),                      # v04
])
def test_a_result_breaking_vllms_metric_relations_is_invalid(edit, says):
    rec = copy.deepcopy(_COMMITTED)
    edit(rec)
    problems = serving_results.serving_result_problems(rec)
    assert any(says in p for p in problems), problems


def _server_option(option: str, value: str | None):
    """FLASHMLA_SPARSE's server command with ``option`` set to ``value`` (None: the option and its value gone)."""
    def edit(r):
        cmd = r["runs"][FM]["servers"][0]["command"]
        i = cmd.index(option)
        cmd[i + 1:i + 2] = [value] if value is not None else []
        del cmd[i:i + (value is None)]
    return edit


@pytest.mark.parametrize("edit, says", [            # breaker round 11: the writer's server command, rebuilt
    (_server_option("--served-model-name", "glm6"), "--served-model-name glm6 where the writer puts glm5"),  # v07
    (_server_option("--seed", "7"), "--seed 7 where the writer puts 0"),                                     # v08
    (_server_option("--worker-extension-cls", None), "--worker-extension-cls absent where the writer puts "
                                                     "sparse_mla.vllm_plugin.ran.RanWorkerExtension"),       # v11
    (_server_option("--host", "0.0.0.0"), "--host 0.0.0.0 where the writer puts 127.0.0.1"),                 # v22
    (lambda r: r["runs"][FM]["servers"][0]["command"].append("--trust-remote-code"),
     "--trust-remote-code given where the writer puts none"),
])
def test_a_server_command_is_the_one_the_writer_builds_for_its_run(tmp_path, edit, says):
    rec = copy.deepcopy(_COMMITTED)
    edit(rec)
    assert any(says in p for p in serving_results.server_command_problems(rec)), \
        serving_results.server_command_problems(rec)


def test_the_committed_serving_record_keeps_vllms_relations_and_the_writers_server_commands(tmp_path):
    rec = copy.deepcopy(_COMMITTED)
    assert serving_results.rebuilt_server_problems(rec) == [] and serving_results.serving_result_problems(rec) == []
    _server_option("--seed", "7")(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and "--seed 7 where the writer puts 0" in v.reason, v.line()


@pytest.mark.parametrize("field, value", [          # breaker round 12 (d14): one rule over every number of a result
    ("request_throughput", float("inf")), ("p99_itl_ms", float("inf")), ("mean_ttft_ms", float("nan")),
    ("max_output_tokens_per_s", float("-inf")),
])
def test_a_result_figure_that_is_not_finite_is_invalid(field, value):
    rec = copy.deepcopy(_COMMITTED)
    _result(rec, **{field: value})
    assert serving_results.serving_result_problems(rec) == [
        f"repeats.{FM}[0].{field} is {value!r}; accepted: a finite number (vLLM's figures of a pass)"]


@pytest.mark.parametrize("field, value, says", [      # breaker rounds 12 (d17) and 13 (r64, s22); docs/records.md
    ("completed", "160", "completed '160' is a count written as text"),
    ("completed", 160.0, "completed 160.0 is a count written as a float"),
    ("failed", 0.0, "failed 0.0 is a count written as a float"),
    ("total_output_tokens", 40960.0, "total_output_tokens 40960.0 is a count written as a float"),
])
def test_a_count_written_as_text_or_a_float_is_unproven(tmp_path, field, value, says):
    rec = copy.deepcopy(_COMMITTED)
    rec["repeats"]["TRITON_MLA_SPARSE"][2][field] = value     # vLLM writes an int (vllm/benchmarks/serve.py)
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and f"repeats.TRITON_MLA_SPARSE[2].{says}; accepted: an integer" in v.reason, \
        v.line()
