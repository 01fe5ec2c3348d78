"""sparse_mla.bench.serve on the CPU: argument checks (one line each), vLLM's own datasets and parser on the load's
arguments, the ranking rule on hand-made ranges, vLLM's `vllm bench serve` client against a stand-in server with
known delays, the server lifecycle with a fake ``vllm`` on PATH, and whole sessions end to end: rotation, repeats,
warm-up, verdict, agreement, speculative decoding and the failures that make the command exit 1."""
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time

import pytest

from sparse_mla import cli
from sparse_mla.bench import ranking
from sparse_mla.bench import serve as bs
from sparse_mla.bench import serve_record
from sparse_mla.bench import vllm_client as vc
from sparse_mla.errors import UserInputError
from sparse_mla.launch import server as srv
from sparse_mla.launch.specs import parse_run_spec

FAKE = os.path.join(os.path.dirname(__file__), "fake_vllm.py")
NGRAM = bs.SPECULATIVE_PRESETS["ngram"]


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an unreaped child of an init that does not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def vllm_rules():
    """vLLM's CUDA platform rules importable without the NVIDIA driver (the ran check asks vLLM where the Triton
    indexer is the default)."""
    from sparse_mla.diagnose.probe import load_vllm_extensions

    load_vllm_extensions()


@pytest.fixture(scope="module")
def bench_parser():
    """vLLM 0.26's own `vllm bench serve` argument parser."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    return parser


# ----------------------------------------------------------------------------------------------- arguments
@pytest.fixture
def bench_cli(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("bench.cli",))
    monkeypatch.setattr(bs, "bench_serve", lambda *a, **k: pytest.fail("a server was started"))

    def run(*argv):
        try:
            rc = cli.main(["bench", "serve", *argv])
        except SystemExit as e:      # argparse's own refusal (a value its type= does not take)
            rc = e.code
        out, err = capsys.readouterr()
        return rc, out, err.strip().splitlines()
    return run


@pytest.mark.parametrize("argv,says", [
    (["--num-prompts", "0"], "--num-prompts 0 is not accepted; accepted: an integer from 1 to 4096"),
    (["--max-concurrency", "5000"], "--max-concurrency 5000 is not accepted"),
    (["--repeats", "0"], "--repeats 0 is not accepted"),
    (["--output-len", "1"], "--output-len 1 is not accepted; accepted: an integer from 2"),
    (["--seed", "-1"], "--seed -1 is not accepted"),
    (["--dataset", "sharegpt"], "--dataset 'sharegpt' is not accepted; accepted: random, repeat"),
    (["--backends", "FOO"], "attention backend 'FOO' is unknown"),
    (["--backends", " , "], "names no backend"),
    (["--backends", "TRITON_MLA"], "'TRITON_MLA' is not a CUDA sparse MLA backend"),
    (["--backends", "FLASHMLA_SPARSE+FAST"], "run spec 'FLASHMLA_SPARSE+FAST' is not accepted"),
    (["--backends", "auto"], "names no backend"),
    (["--speculative-config", "{bad"], "is not valid JSON"),
    (["--speculative-config", "[1]"], "is not accepted; accepted: a non-empty JSON object"),
    (["--speculative", "eagle"], "--speculative 'eagle' is not accepted; accepted: ngram, mtp"),
    (["--speculative", "ngram", "--speculative-config", '{"method": "ngram"}'], "are both given"),
    (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype 'fp4' is not accepted"),
    (["--tp", "3"], "tensor-parallel size 3 does not divide the model's 64 attention heads"),
    (["--server-timeout", "0"], "--server-timeout 0.0 is not accepted"),
    (["--bench-timeout", "nan"], "argument --bench-timeout: invalid float value: 'nan'; accepted: a number"),
    (["--output-len", "1024"], "exceeds the model's max_position_embeddings 1100"),
])
def test_bad_arguments_one_line_each(bench_cli, model_dir, argv, says):
    cfg = json.loads((model_dir / "config.json").read_text())
    if argv == ["--output-len", "1024"]:
        (model_dir / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 1100}))
    rc, out, err = bench_cli("--model", str(model_dir), *argv)
    assert rc == 2 and out == "" and len(err) == 1, err
    assert err[0].startswith(("sparse-mla bench: error:", "sparse-mla bench serve: error:")) and says in err[0], err


@pytest.mark.parametrize("argv", [["--speculative", "mtp"],
                                  ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}']])
def test_mtp_needs_the_checkpoints_mtp_layer(bench_cli, model_dir, argv):
    cfg = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**cfg, "num_nextn_predict_layers": 0}))
    rc, _, err = bench_cli("--model", str(model_dir), *argv)
    assert rc == 2 and len(err) == 1 and "make-checkpoint --mtp" in err[0], err


@pytest.mark.parametrize("tokens", ['"two"', "[1]", "1e400", "-5", "1.5", "0", "true"])
def test_num_speculative_tokens_must_be_a_positive_integer(bench_cli, model_dir, tokens):
    rc, out, err = bench_cli("--model", str(model_dir), "--speculative-config",
                             f'{{"method": "mtp", "num_speculative_tokens": {tokens}}}')
    assert rc == 2 and out == "" and len(err) == 1, err
    assert "num_speculative_tokens" in err[0] and "accepted: a positive integer" in err[0], err


@pytest.mark.parametrize("mpe", ['"8192"', "-1", "8192.5", "[8192]"])
def test_max_position_embeddings_of_the_wrong_type_is_named(bench_cli, model_dir, mpe):
    cfg = (model_dir / "config.json").read_text().replace('"max_position_embeddings": 8192',
                                                           f'"max_position_embeddings": {mpe}')
    (model_dir / "config.json").write_text(cfg)
    rc, out, err = bench_cli("--model", str(model_dir))
    assert rc == 2 and out == "" and len(err) == 1, err
    assert "has max_position_embeddings = " in err[0] and "accepted: an integer from 1" in err[0], err


def test_good_arguments_need_a_gpu_and_missing_model_is_named(bench_cli, model_dir, tmp_path, monkeypatch):
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: False)   # a machine without one, also on a GPU
    rc, _, err = bench_cli("--model", str(model_dir), "--quick")
    assert rc == 2 and len(err) == 1 and "needs a CUDA GPU" in err[0], err
    rc, _, err = bench_cli("--model", str(tmp_path / "nope"))
    assert rc == 2 and len(err) == 1 and "nope" in err[0] and "does not exist" in err[0], err


def test_cli_defaults_quick_keeps_the_repeats_and_ngram_picks_repeating_prompts(model_dir, tmp_path, monkeypatch,
                                                                              capsys):
    """--quick shrinks the requests, not the repeats; explicit values win; --speculative ngram serves vLLM's ngram
    config on prompts that repeat; the command prints the verdict and exits 0 without failures."""
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("bench.cli",))
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/" + name)
    seen = []
    monkeypatch.setattr(bs, "bench_serve", lambda model, runs, load, **kw: seen.append((runs, load, kw)) or
                        {"runs": {}, "repeats": {}, "failures": [], "verdict": {"lines": ["a line of the verdict"]}})
    parse = lambda *a: cli.build_parser().parse_args(["bench", "serve", "--model", str(model_dir), *a])  # noqa: E731
    assert bs.cli_run(parse("--quick"), lambda a: (tmp_path, "t")) == 0
    assert bs.cli_run(parse("--quick", "--repeats", "1", "--num-prompts", "4", "--speculative", "NGRAM",
                            "--backends", "flashmla_sparse,TRITON_MLA_SPARSE"), lambda a: (tmp_path, "t")) == 0
    (runs0, load0, kw0), (runs1, load1, kw1) = seen
    assert load0 == bs.Load(num_prompts=160, max_concurrency=32, repeats=5, output_len=256, seed=0, dataset="random")
    assert runs0 == bs.DEFAULT_RUNS and kw0["speculative_config"] is None and kw0["cuda_graphs"] is True
    assert load1 == bs.Load(num_prompts=4, max_concurrency=32, repeats=1, output_len=256, seed=0, dataset="repeat")
    assert runs1 == ("FLASHMLA_SPARSE", "TRITON_MLA_SPARSE") and kw1["speculative_config"] == NGRAM
    out = capsys.readouterr().out
    assert "verdict (A > B on a metric only where" in out and "  a line of the verdict" in out


# ----------------------------------------------------------------------------------------------- the load
def test_server_max_model_len():
    assert bs.input_length_range(512) == (128, 896) and bs.input_length_range(2048) == (512, 3584)
    assert bs.server_max_model_len(512, 48) == 4096
    assert bs.server_max_model_len(2048, 480, 1) == 5120           # 3584 + 64 + 480 + 1 -> next 1024
    assert bs.server_max_model_len(2048, 480, 0, 4500) == 4500     # capped by the model
    with pytest.raises(UserInputError, match="exceeds the model's max_position_embeddings 4000"):
        bs.server_max_model_len(2048, 480, 0, 4000)
    with pytest.raises(UserInputError, match=r"48 new tokens \+ 100000 speculative tokens exceeds .* 8192; "
                                             r"accepted: fewer --output-len or num_speculative_tokens"):
        bs.server_max_model_len(128, 48, 100000, 8192)


def test_rotation_and_plan():
    assert bs.rotated(["A", "B", "C"], 4) == [["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"], ["A", "B", "C"]]
    assert bs.rotated(["A", "B"], 3) == [["A", "B"], ["B", "A"], ["A", "B"]]
    assert bs.rotated([], 3) == []
    assert bs.plan_runs(["A", "B"], None) == [("A", "A", None), ("B", "B", None)]
    assert bs.plan_runs(["A"], NGRAM) == [("A", "A", None), ("A+ngram", "A", NGRAM)]


@pytest.mark.parametrize("dataset", bs.DATASETS)
def test_vllms_datasets_give_every_pass_the_same_prompts(dataset, bench_parser, model_dir, tmp_path):
    """The load's arguments, read by vLLM's own `vllm bench serve` parser and turned into prompts by vLLM's own
    datasets (``get_samples``) with the checkpoint's tokenizer: the warm-up (2 new tokens) and the timed pass (48)
    get the same prompts for one seed -- also on a later call, as every repeat makes one -- and another seed gives
    others. Random prompts straddle index_topk (128); repeat prompts repeat their text."""
    from vllm.benchmarks.datasets import get_samples
    from vllm.tokenizers import get_tokenizer

    tok = get_tokenizer(str(model_dir))
    load = bs.Load(num_prompts=24, dataset=dataset, seed=3)
    path = bs.write_repeat_prompts(tmp_path / "p.jsonl", model_dir, load, 128) if dataset == "repeat" else None

    def prompts(output_len, seed=3):
        argv = vc.bench_argv("http://127.0.0.1:1", model_dir, "glm5", bs.dataset_args(dataset, 128, output_len, path),
                             num_prompts=24, max_concurrency=4, seed=seed, result_path=tmp_path / "r.json",
                             ready_timeout_s=60)
        args = bench_parser.parse_args(argv)
        assert (args.temperature, args.ignore_eos, args.save_detailed, args.max_concurrency) == (0.0, True, True, 4)
        return [(r.prompt, r.prompt_len, r.expected_output_len) for r in get_samples(args, tok)]

    warm, timed, again, other = prompts(2), prompts(48), prompts(48), prompts(48, seed=4)
    assert [p[:2] for p in warm] == [p[:2] for p in timed] == [p[:2] for p in again] and len(timed) == 24
    assert {p[2] for p in warm} == {2} and {p[2] for p in timed} == {48}
    assert [p[0] for p in other] != [p[0] for p in timed]
    lens = [p[1] for p in timed]
    lo, hi = bs.input_length_range(128)
    if dataset == "random":
        assert all(lo <= n <= hi for n in lens) and min(lens) < 128 < max(lens), lens
    else:
        assert all(lo // 2 <= n <= hi + bs.PROMPT_SLACK for n in lens), lens
        for text, _, _ in timed:   # some 24-character piece of its first third occurs again further on
            assert any(text.count(text[i:i + 24]) >= 2 for i in range(0, len(text) // 3, 4)), text[:80]


# ----------------------------------------------------------------------------------------------- the verdict
@pytest.mark.parametrize("a,b,better", [
    ([10.0, 11.0, 12.0, 12.5, 11.5], [13.0, 14.0, 15.0, 13.5, 14.5], "B"),   # apart: B has the higher throughput
    ([13.0, 14.0, 15.0, 13.5, 14.5], [10.0, 12.0, 11.0, 11.5, 10.5], "A"),
    ([10.0, 11.0, 12.0, 11.5, 10.5], [12.0, 13.0, 14.0, 13.5, 12.5], None),  # touching at 12: overlap
    ([10.0, 11.0, 12.0, 11.5, 10.5], [10.0, 11.0, 12.0, 11.5, 10.5], None),  # equal
    ([10.0, 11.0, 20.0, 11.5, 10.5], [12.0, 13.0, 14.0, 13.5, 12.5], None),  # one inside the other
    ([10.0, 11.0, 12.0, 11.5, 10.5], [13.0, 14.0, 15.0, 14.5], None),        # B has 4 repeats: fewer than MIN_REPEATS
    ([10.0, None, 11.0, 12.0, 11.5, 10.5], [13.0, None, 14.0, 15.0, 14.5, 13.5], "B"),   # no result: left out
])
def test_ranking_only_where_ranges_do_not_overlap(a, b, better):
    thr = ranking.compare("output_throughput", "A", a, "B", b)
    lat = ranking.compare("median_tpot_ms", "A", a, "B", b)       # lower is better: the opposite winner
    assert thr["better"] == better and lat["better"] == {"A": "B", "B": "A", None: None}[better]
    assert thr["ranges"] == {"A": [min(x for x in a if x is not None), max(x for x in a if x is not None)],
                             "B": [min(x for x in b if x is not None), max(x for x in b if x is not None)]}
    if better:
        lose = "A" if better == "B" else "B"
        assert thr["line"].startswith(f"output tokens/s: {better} > {lose} (") and "higher is better" in thr["line"]
        assert lat["line"].startswith(f"median TPOT (ms): {lose} > {better} (") and "lower is better" in lat["line"]
    else:
        assert "not ranked" in thr["line"] and "not ranked" in lat["line"]
        assert ("ranges overlap (A 10.." in thr["line"]) == (len([x for x in b if x is not None]) >= ranking.MIN_REPEATS)
        if "ranges overlap" in thr["line"]:      # why, in numbers: each run's spread and how far apart the medians are
            med = lambda v: statistics.median(x for x in v if x is not None)  # noqa: E731
            assert thr["medians_apart"] == pytest.approx(abs(med(a) - med(b)) / min(med(a), med(b)))
            assert thr["spread"]["A"] == pytest.approx((thr["ranges"]["A"][1] - thr["ranges"]["A"][0]) / med(a))
            assert f"the medians {100 * thr['medians_apart']:.0f} % apart" in thr["line"]


def test_false_rank_rate_of_the_rule_is_stated_and_at_most_one_percent():
    """Two runs of one engine: every split of 2n distinct values into two runs of n is equally likely; counting the
    splits the rule ranks gives the stated rate exactly (2 / C(10, 5) = 0.79 % at 5 repeats, 10 % at the old 3);
    seeded simulated identical runs (skewed, heavy-tailed noise, as server throughput is) rank at that rate."""
    import itertools

    import numpy as np

    n = ranking.MIN_REPEATS
    vals = list(range(2 * n))
    ranked = sum(ranking.compare("output_throughput", "A", [float(v) for v in left], "B",
                                 [float(v) for v in vals if v not in left])["better"] is not None
                 for left in itertools.combinations(vals, n))
    assert ranked / math.comb(2 * n, n) == ranking.FALSE_RANK_RATE == ranking.false_rank_rate(n) <= 0.01
    assert ranking.false_rank_rate(3) == 0.1 and ranking.false_rank_rate(6) < ranking.FALSE_RANK_RATE
    assert f"{ranking.FALSE_RANK_RATE:.2%}" in ranking.RULE
    rng = np.random.default_rng(0)
    trials = 20000
    draws = 1000 * rng.lognormal(0.0, 0.3, size=(trials, 2, n))
    hits = sum(ranking.compare("median_tpot_ms", "A", list(d[0]), "B", list(d[1]))["better"] is not None
               for d in draws)
    sd = math.sqrt(trials * ranking.FALSE_RANK_RATE * (1 - ranking.FALSE_RANK_RATE))
    assert abs(hits - trials * ranking.FALSE_RANK_RATE) < 5 * sd, (hits, trials * ranking.FALSE_RANK_RATE)


def test_verdict_pairs_within_groups_only():
    v = {k: {m: [x, x + 1, x + 2, x + 0.5, x + 1.5] for m in ranking.METRICS} for k, x in (("A", 0.0), ("B", 10.0), ("C", 20.0),
                                                                           ("A+s", 30.0))}
    out = ranking.verdict(v, {"plain": ["A", "B", "C"], "spec": ["A+s"]})
    assert [p["runs"] for p in out["pairs"]] == [r for r in (["A", "B"], ["A", "C"], ["B", "C"]) for _ in range(4)]
    assert out["rule"] == ranking.RULE and len(out["lines"]) == 12
    assert out["pairs"][0] == {"metric": "output_throughput", "runs": ["A", "B"], "ranges": {"A": [0.0, 2.0],
                               "B": [10.0, 12.0]}, "better": "B", "line": out["lines"][0]}


# ----------------------------------------------------------------------------------------------- vLLM's client
def test_text_agreement_and_summary():
    a = {"generated_texts": [" w1 w2", " w1 w2", "abc", "", "q"], "errors": ["", "", "", "", ""]}
    b = {"generated_texts": [" w1 w2", " w1 x2", "abd", "", "q"], "errors": ["", "", "", "boom", ""]}
    g = vc.text_agreement(a, b)
    assert g == {"compared": 4, "identical": 2, "first_divergence_min": 2, "first_divergence_median": 4}
    assert vc.text_agreement(a, {"generated_texts": ["x"]})["compared"] == 0
    res = {"median_ttft_ms": 1.0, "failed": 0, **{k: [1, 2] for k in vc.DETAIL_KEYS}}
    assert vc.summary(res) == {"median_ttft_ms": 1.0, "failed": 0}
    assert bs.spread([5.0, 1.0, None, float("nan"), 3.0, True]) == {"min": 1.0, "median": 3.0, "max": 5.0, "n": 3}
    assert bs.spread([]) is None and bs.spread([7]) == {"min": 7.0, "median": 7.0, "max": 7.0, "n": 1}
    assert bs.spread([4.0, 1.0, 2.0, 3.0])["median"] == statistics.median([4.0, 1.0, 2.0, 3.0])


@pytest.mark.slow
def test_vllm_bench_serve_against_a_streaming_stand_in(fake_server, model_dir, tmp_path):
    """vLLM's own client, one pass, against known delays: first token after 0.15 s, then one every 0.03 s (two per
    SSE chunk). vLLM's result must show TTFT >= 150 ms (sleeps never end early), TPOT near 30 ms (a first chunk read
    late lengthens TTFT and shortens TPOT by as much / 6), every request complete with 7 tokens, and the texts the
    stand-in generated; a pass the parser refuses exits 2; a pass past its time limit is killed."""
    url = fake_server("--served-model-name", "glm5", FAKE_VLLM_TTFT_S=0.15, FAKE_VLLM_TPOT_S=0.03,
                      FAKE_VLLM_TOKENS_PER_CHUNK=2)
    result = tmp_path / "r.json"
    argv = vc.bench_argv(url, model_dir, "glm5", bs.dataset_args("random", 128, 7), num_prompts=4, max_concurrency=2,
                         seed=0, result_path=result, ready_timeout_s=30)
    done = vc.run_pass(argv, tmp_path / "b.log", 120)
    log = (tmp_path / "b.log").read_text()
    assert done["exit_code"] == 0 and not done["timed_out"], log[-3000:]
    assert log.startswith("$ vllm bench serve --backend openai") and "Serving Benchmark Result" in log
    res = vc.read_result(result)
    assert (res["completed"], res["failed"], res["total_output_tokens"], res["output_lens"]) == (4, 0, 28, [7] * 4)
    # lower bounds only (sleeps never end early; a loaded machine only lengthens them): TTFT >= 150 ms, TPOT >= 25 ms
    # (30 ms, shortened by at most a sixth by a late first chunk); no wall-clock window above, but the pass's own
    # duration bounds every latency in it
    assert res["median_ttft_ms"] >= 150.0 and res["median_tpot_ms"] >= 25.0 * (1 - 1e-6), res
    assert all(0.150 <= t <= res["duration"] for t in res["ttfts"])
    assert res["median_tpot_ms"] * 6 <= res["duration"] * 1e3
    for text in res["generated_texts"]:
        words = text.split()
        assert len(words) == 7 and all(w[0] == "w" for w in words)
        assert [int(w[1:]) for w in words] == [(int(words[0][1:]) + 7 * k) % 2048 for k in range(7)]
    assert vc.run_pass(["--num-prompts", "x"], tmp_path / "bad.log", 60)["exit_code"] == 2
    slow = fake_server("--served-model-name", "glm5", FAKE_VLLM_TTFT_S=60)
    argv = vc.bench_argv(slow, model_dir, "glm5", bs.dataset_args("random", 128, 3), num_prompts=1,
                         max_concurrency=1, seed=0, result_path=tmp_path / "s.json", ready_timeout_s=30)
    t0 = time.time()
    done = vc.run_pass(argv, tmp_path / "s.log", 3)
    assert {k: done[k] for k in ("exit_code", "timed_out")} == {"exit_code": -signal.SIGKILL, "timed_out": True}
    # killed at the limit, and timed inside this call (run_pass rounds to hundredths: half of one either way)
    assert 3 <= done["seconds"] <= time.time() - t0 + 0.005


# ----------------------------------------------------------------------------------------------- lifecycle
def test_vllms_own_parser_accepts_the_server_command():
    """The command line bench serve starts, parsed by vLLM 0.26's own `vllm serve` argument parser
    (``make_arg_parser``; built under the diagnose probe's CUDA platform, since the CPU platform cannot build it)."""
    pytest.importorskip("vllm.entrypoints.openai.cli_args")
    import torch  # noqa: F401  (vLLM's extensions load against torch's libraries)

    from sparse_mla.diagnose import probe as pr
    from sparse_mla.launch.engine import serve_command
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    pr.load_vllm_extensions()
    pr.probe_platform_cls()
    with pr.use_platform(pr.PROBE), pr.quiet_logs():
        from vllm.entrypoints.openai.cli_args import make_arg_parser

        parser = make_arg_parser(FlexibleArgumentParser())
    cmd = serve_command("/m", parse_run_spec("TRITON_MLA_SPARSE+TRITON_DSA_INDEXER"), 8123, kv_cache_dtype="fp8_ds_mla",
                        tp=2, enforce_eager=False, max_model_len=5120, max_num_seqs=32, speculative_config=NGRAM,
                        extra=bs.SERVER_EXTRA)
    assert cmd[:3] == ["vllm", "serve", "/m"]
    ns = parser.parse_args(cmd[3:])
    assert (ns.host, ns.port, ns.served_model_name, ns.seed) == ("127.0.0.1", 8123, ["glm5"], 0)
    assert (ns.attention_backend, ns.kv_cache_dtype, ns.speculative_config) == ("CUSTOM", "fp8_ds_mla", NGRAM)
    assert (ns.max_model_len, ns.max_num_seqs, ns.tensor_parallel_size) == (5120, 32, 2)
    assert ns.enable_prefix_caching is False and ns.disable_uvicorn_access_log is True and not ns.enforce_eager
    assert parser.parse_args(serve_command("/m", parse_run_spec("FLASHMLA_SPARSE"), 1)[3:]).enforce_eager


def test_vllms_speculative_config_accepts_the_presets():
    """vLLM's own SpeculativeConfig fields take the presets' keys (ngram's lookup window is kept as given)."""
    from vllm.config.speculative import SpeculativeConfig

    fields = SpeculativeConfig.__dataclass_fields__
    for preset in bs.SPECULATIVE_PRESETS.values():
        assert set(preset) <= set(fields), preset
    assert NGRAM["prompt_lookup_min"] <= NGRAM["prompt_lookup_max"]


def test_served_starts_waits_logs_and_kills(vllm_on_path, tmp_path, model_dir):
    import urllib.request

    from sparse_mla.launch.engine import serve_command, server_env

    port = srv.free_port()
    spec = parse_run_spec("TRITON_MLA_SPARSE+TRITON_DSA_INDEXER")
    cmd = serve_command(model_dir, spec, port, kv_cache_dtype="fp8_ds_mla",
                        speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    log = tmp_path / "server.log"
    env = {**server_env(spec), "FAKE_VLLM_STARTUP_S": "0.4", "FAKE_VLLM_CHILD": "1"}
    with srv.served(cmd, env, log, port, timeout_s=30) as s:
        assert s.up_s >= 0.4 and s.base_url == f"http://127.0.0.1:{port}"
        assert s.proc.poll() is None and os.getpgid(s.proc.pid) == s.proc.pid   # its own process group
        with urllib.request.urlopen(s.base_url + "/v1/models", timeout=5) as r:
            assert json.loads(r.read())["data"][0]["id"] == "glm5"
        proc = s.proc
    assert proc.poll() is not None                      # stopped when the block ended
    text = log.read_text()
    argv = json.loads(text.split("FAKE_VLLM argv ", 1)[1].splitlines()[0])
    assert argv[:2] == ["serve", str(model_dir)] and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--attention-backend") + 1] == "CUSTOM"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8_ds_mla"
    assert argv[argv.index("--speculative-config") + 1] == cmd[cmd.index("--speculative-config") + 1]
    assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == "mtp"
    assert "SPARSE_MLA_TRITON_INDEXER='1' VLLM_LOGGING_LEVEL='INFO'" in text and "FAKE_VLLM stderr line" in text
    child = int(text.split("FAKE_VLLM child pid ", 1)[1].split()[0])
    assert not _alive(child), "the server's child process outlived it"


def test_served_reports_early_exit_and_timeout(vllm_on_path, tmp_path):
    port = srv.free_port()
    cmd = ["vllm", "serve", "m", "--port", str(port)]
    with pytest.raises(srv.ServerError, match=r"exited with 3 before it was ready; log: .*early.log"):
        with srv.served(cmd, {**os.environ, "FAKE_VLLM_EXIT": "3"}, tmp_path / "early.log", port, timeout_s=30):
            pytest.fail("not ready")
    assert "FAKE_VLLM argv" in (tmp_path / "early.log").read_text()
    with pytest.raises(srv.ServerError, match="not ready after 1 s"):
        with srv.served(cmd, {**os.environ, "FAKE_VLLM_STARTUP_S": "60", "FAKE_VLLM_CHILD": "1"},
                        tmp_path / "slow.log", port, timeout_s=1):
            pytest.fail("not ready")
    child = int((tmp_path / "slow.log").read_text().split("FAKE_VLLM child pid ", 1)[1].split()[0])
    assert not _alive(child)


def test_served_kills_on_ctrl_c_inside_the_block(vllm_on_path, tmp_path):
    port = srv.free_port()
    procs = []
    with pytest.raises(KeyboardInterrupt):
        with srv.served(["vllm", "serve", "m", "--port", str(port)], dict(os.environ), tmp_path / "c.log", port) as s:
            procs.append(s.proc)
            raise KeyboardInterrupt
    assert procs[0].poll() is not None


def test_stop_server_escalates_to_sigkill(tmp_path):
    port = srv.free_port()
    with open(tmp_path / "t.log", "w") as log:
        p = subprocess.Popen([sys.executable, FAKE, "serve", "m", "--port", str(port)], stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, "FAKE_VLLM_IGNORE_TERM": "1"})
        time.sleep(0.5)
        srv.stop_server(p, grace_s=0.5)
    assert p.returncode == -signal.SIGKILL


# ----------------------------------------------------------------------------------------------- sessions
def _cli(model_dir, out, *argv) -> tuple[int, dict]:
    """``sparse-mla bench serve`` after the GPU check (the record's place stands in): its exit status and record."""
    args = cli.build_parser().parse_args(["bench", "serve", "--model", str(model_dir), "--server-timeout", "30",
                                          "--bench-timeout", "120", *argv])
    rc = bs.cli_run(args, lambda a: (out, "cpu"))
    return rc, json.loads((out / "bench_serve_cpu.json").read_text())


@pytest.mark.slow   # three stand-in servers, five passes (about 26 s)
def test_bench_serve_end_to_end_rotates_repeats_and_ranks(vllm_on_path, vllm_rules, model_dir, tmp_path,
                                                          monkeypatch):
    """Two run specs x 5 repeats: two live servers, started one after another, each warmed with one pass of the
    timed load, then ten timed passes of vLLM's `vllm bench serve` in rotated order, every result file kept and in
    `repeats` with vLLM's keys; the stand-in is 15x slower per token on FLASHMLA_SPARSE, so the verdict ranks ours
    above it on TPOT, ITL and tokens/s, and every verdict line follows the rule from the recorded repeats; agreement
    as the stand-in's rules make it; a record that `records check` calls proven."""
    from sparse_mla.workbook.proof import judge

    monkeypatch.setenv("FAKE_VLLM_TPOT_S_FLASHMLA_SPARSE", "0.03")
    monkeypatch.setenv("SPARSE_MLA_TRITON_INDEXER", "1")   # a plain run spec must not inherit it
    out = tmp_path / "out"
    load = bs.Load(num_prompts=5, max_concurrency=2, repeats=5, output_len=5, seed=2)
    runs = ["TRITON_MLA_SPARSE", "FLASHMLA_SPARSE+TRITON_DSA_INDEXER"]
    rec = bs.bench_serve(model_dir, runs, load, out_dir=out, tag="cpu", server_timeout_s=30, bench_timeout_s=120)
    a, b = runs
    assert rec["complete"] is True and rec["failures"] == [] and list(rec["runs"]) == runs
    assert rec["order"] == [[a, b], [b, a], [a, b], [b, a], [a, b]] and rec["method"] == bs.METHOD
    assert rec["server"]["gpu_memory_utilization"] == bs.server_memory_share(2) == 0.35
    stems = {f"bench_serve_cpu_{k.replace('+', '_')}" for k in runs}
    assert {p.name for p in out.iterdir()} == {f"bench_serve_cpu.{x}" for x in ("json", "csv", "png")} | {
        s + x for s in stems for x in (".log", "_bench.log", "_warmup.json")} | {
        f"{s}_r{r}.json" for s in stems for r in range(1, 6)}
    for k in runs:
        run = rec["runs"][k]
        assert len(run["servers"]) == 1 and "error" not in run                    # one live server per run
        server = run["servers"][0]
        assert [p["repeat"] for p in run["passes"]] == [1, 2, 3, 4, 5]
        assert [p["position"] for p in run["passes"]] == [rec["order"][r].index(k) + 1 for r in range(5)]
        warm = json.loads((out / server["warmup"]["result_file"]).read_text())
        assert server["warmup"]["output_len"] == 5 and warm["total_output_tokens"] == 25   # the timed load itself
        for r, (p, rep) in enumerate(zip(run["passes"], rec["repeats"][k])):
            on_disk = json.loads((out / p["timed"]["result_file"]).read_text())   # vLLM's file, as vLLM wrote it
            assert rep == {x: v for x, v in on_disk.items() if x not in vc.DETAIL_KEYS}
            assert rep["completed"] == 5 and rep["failed"] == 0 and rep["total_output_tokens"] == 25
            assert {"median_ttft_ms", "median_tpot_ms", "median_itl_ms", "output_throughput", "p99_itl_ms",
                    "request_throughput", "median_e2el_ms"} <= set(rep) and "generated_texts" not in rep
            assert warm["input_lens"] == on_disk["input_lens"]                      # the same prompts
            warm_cmd = [x.replace("_warmup.json", f"_r{r + 1}.json") for x in server["warmup"]["command"]]
            assert p["timed"]["command"] == warm_cmd               # the warm-up was the timed load itself
            assert p["timed"]["exit_code"] == 0
        assert run["ran_contradictions"] == [] and run["ran"]["attention"] == {k.split("+")[0]: 2}
        assert run["agreement_across_repeats"] == [{"repeat": r, "against_repeat": 1, "compared": 5, "identical": 5,
                                                    "first_divergence_min": None, "first_divergence_median": None}
                                                   for r in (2, 3, 4, 5)]
        text = (out / server["log"]).read_text()
        assert f"SPARSE_MLA_TRITON_INDEXER={chr(39) + '1' + chr(39) if '+' in k else 'None'}" in text
        assert "--no-enable-prefix-caching" in server["command"]
    # the stand-in's FLASHMLA_SPARSE parts from the others at token 3 of requests 0, 2, 4: " w0123" x 3 = 18 chars
    g = rec["agreement_vs_baseline"][b]
    assert [(p["compared"], p["identical"], p["first_divergence_min"]) for p in g["per_repeat"]] == [(5, 2, 19)] * 5
    lines = rec["verdict"]["lines"]
    for m in ("output tokens/s", "median TPOT (ms)", "median ITL (ms)"):
        assert any(ln.startswith(f"{m}: {a} > {b} (") for ln in lines), lines
    for p in rec["verdict"]["pairs"]:          # the rule, recomputed from the repeats
        va = [rep[p["metric"]] for rep in rec["repeats"][a]]
        vb = [rep[p["metric"]] for rep in rec["repeats"][b]]
        apart = max(va) < min(vb) or max(vb) < min(va)
        assert p["ranges"] == {a: [min(va), max(va)], b: [min(vb), max(vb)]} and (p["better"] is not None) == apart
    csv = (out / "bench_serve_cpu.csv").read_text().splitlines()
    assert csv[0].split(",") == list(serve_record.CSV_COLUMNS) and len(csv) == 3
    assert (out / "bench_serve_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert judge("rec", rec).reason == "no gpu; no capability"                 # this CPU names no GPU
    cap = rec["runs"][a]["ran"].get("capability")                            # the stand-in's
    rec["environment"].update(gpu=_gpu_named(cap), capability=cap)          # as a GPU's process writes it
    assert judge("rec", rec).status == "proven", judge("rec", rec)


def _gpu_named(cap: str) -> str:
    """A GPU name as torch reports one of our presets of capability ``cap`` (``records check`` holds a header's GPU
    to the presets, issue 47 round 7): the stand-in's header, as a GPU's process would write it."""
    from sparse_mla.gpus import GPUS

    return f"NVIDIA {next(k for k, g in GPUS.items() if g.capability == cap).upper().replace('-', ' ')} (stand-in)"


@pytest.mark.slow
def test_speculative_ngram_records_vllms_numbers_and_no_drafts_fails(vllm_on_path, vllm_rules, model_dir, tmp_path,
                                                                     monkeypatch, capsys):
    """`--speculative ngram`: vLLM's ngram config on every run spec, on prompts that repeat (for both the plain and
    the speculative passes); vLLM's spec-decode numbers for ours as the stand-in counts them (per request of n
    tokens: n - 1 drafts of one token, (n - 1) // 2 accepted); a server that drafts nothing fails the command."""
    monkeypatch.setenv("FAKE_VLLM_NO_DRAFTS", "FLASHMLA_SPARSE")
    out = tmp_path / "out"
    rc, rec = _cli(model_dir, out, "--backends", "TRITON_MLA_SPARSE,FLASHMLA_SPARSE", "--speculative", "ngram",
                   "--repeats", "1", "--num-prompts", "4", "--max-concurrency", "2", "--output-len", "5")
    printed = capsys.readouterr().out
    assert rc == 1 and rec["complete"] and rec["load"]["dataset"] == "repeat"
    assert list(rec["runs"]) == ["TRITON_MLA_SPARSE", "TRITON_MLA_SPARSE+ngram", "FLASHMLA_SPARSE",
                                 "FLASHMLA_SPARSE+ngram"]
    assert rec["load"]["prompts_file"] == "bench_serve_cpu_prompts.jsonl" and len(
        (out / "bench_serve_cpu_prompts.jsonl").read_text().splitlines()) == 4
    for k, run in rec["runs"].items():
        cmd = run["passes"][0]["timed"]["command"]
        assert cmd[cmd.index("--dataset-name") + 1] == "custom"
        assert ("--speculative-config" in run["servers"][0]["command"]) == k.endswith("+ngram")
    rep = rec["repeats"]["TRITON_MLA_SPARSE+ngram"][0]
    assert (rep["spec_decode_num_drafts"], rep["spec_decode_draft_tokens"], rep["spec_decode_accepted_tokens"]) == \
        (4 * 4, 4 * 4, 4 * 2)
    assert rep["spec_decode_acceptance_rate"] == pytest.approx(50.0) and rep["spec_decode_acceptance_length"] == 1.5
    assert rep["spec_decode_per_position_acceptance_rates"] == [0.5]
    assert "spec_decode_num_drafts" not in rec["repeats"]["TRITON_MLA_SPARSE"][0]
    v = rec["speculative_vs_plain"]["TRITON_MLA_SPARSE+ngram"]
    assert (v["plain"], v["compared"], v["identical"], v["acceptance_rate_percent"]) == ("TRITON_MLA_SPARSE", 4, 4, 50)
    assert v["output_throughput_ratio"] > 0
    assert len(rec["failures"]) == 1 and rec["failures"][0].startswith(
        "FLASHMLA_SPARSE+ngram repeat 1: speculation asked (") and "none happened" in rec["failures"][0]
    assert all("not ranked: 1 and 1 repeats with a result, fewer than 5" in ln for ln in rec["verdict"]["lines"])
    assert len(rec["verdict"]["lines"]) == 8      # 4 metrics x (plain pair + ngram pair)
    assert f"failure: {rec['failures'][0]}" in printed and "acceptance 50.0%" in printed


@pytest.mark.parametrize("env,extra,says", [
    ({"FAKE_VLLM_EXIT": "1"}, [], "TRITON_MLA_SPARSE: vllm serve exited with 1 before it was ready"),
    pytest.param({"FAKE_VLLM_DIE_AFTER": "2"}, [], "TRITON_MLA_SPARSE: warm-up pass: ", marks=pytest.mark.slow),
    ({"FAKE_VLLM_RAN_BACKEND": "FLASHMLA_SPARSE"}, [],
     "TRITON_MLA_SPARSE: what ran contradicts what was asked: attention: asked TRITON_MLA_SPARSE"),
    pytest.param({"FAKE_VLLM_RAN_DRAFT_BACKEND": "FLASH_ATTN_MLA_SPARSE"}, ["--speculative", "mtp"],
                 "TRITON_MLA_SPARSE+mtp: what ran contradicts what was asked: draft_attention: asked TRITON_MLA_SPARSE",
                 marks=pytest.mark.slow),                     # the two slowest cases: the slow tier (budget)
])
def test_a_failing_server_fails_the_command_and_the_record_says_why(vllm_on_path, vllm_rules, model_dir, tmp_path,
                                                                    monkeypatch, env, extra, says):
    """A server that does not start, one that dies under the warm-up, one whose workers ran another backend, one
    whose MTP drafter ran another backend than the run's: exit 1, and the record is still written, complete, with
    one failure line each."""
    from sparse_mla.workbook.proof import judge

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc, rec = _cli(model_dir, tmp_path, "--backends", "TRITON_MLA_SPARSE", "--repeats", "1", "--num-prompts", "3",
                   "--max-concurrency", "1", "--output-len", "3", *extra)
    assert rc == 1 and rec["complete"] and rec["failures"], rec["failures"]
    assert any(f.startswith(says) for f in rec["failures"]), rec["failures"]
    key = says.split(": ")[0]
    run = rec["runs"][key]
    if "RAN" in next(iter(env)):
        assert rec["repeats"][key][0]["completed"] == 3 and "error" not in run
        cap = run["ran"].get("capability")
        rec["environment"].update(gpu=_gpu_named(cap), capability=cap)      # as a GPU writes it
        assert judge("rec", rec).status == "invalid" and "asked" in judge("rec", rec).reason
    else:
        assert run["error"] and "FAKE_VLLM argv" in run["servers"][0]["log_tail"]
        assert rec["repeats"][key] == [None] and judge("rec", rec).status == "unproven", judge("rec", rec).reason
    if "FAKE_VLLM_DIE_AFTER" in env:
        assert any("warm-up pass: " in f for f in rec["failures"])
    if extra:   # MTP: the plain run passed; vLLM's numbers of the speculative pass are in its repeat
        assert rec["runs"]["TRITON_MLA_SPARSE"]["ran_contradictions"] == [] and len(rec["failures"]) == 1
        assert run["ran"]["draft_attention"] == {"FLASH_ATTN_MLA_SPARSE": 1}
        assert rec["repeats"][key][0]["spec_decode_num_drafts"] == 3 * 2
