"""sparse_mla.bench.serve on the CPU: argument checks (one line each), the seeded load, the statistics, the
Prometheus reading (against vLLM's own SpecDecodingProm output), the streaming client's TTFT/TPOT bookkeeping
against a fake OpenAI-compatible server with known delays, the server lifecycle with a fake ``vllm`` on PATH, and a
whole session end to end."""
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
from sparse_mla.bench import serve as bs
from sparse_mla.errors import UserInputError
from sparse_mla.launch import server as srv
from sparse_mla.launch.specs import SIMULATED_ENV, parse_run_spec

FAKE = os.path.join(os.path.dirname(__file__), "fake_vllm.py")


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an unreaped child of an init that does not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ----------------------------------------------------------------------------------------------- arguments
@pytest.fixture
def bench_cli(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("bench.cli",))
    monkeypatch.setattr(bs, "bench_serve", lambda *a, **k: pytest.fail("a server was started"))

    def run(*argv):
        rc = cli.main(["bench", "serve", *argv])
        out, err = capsys.readouterr()
        return rc, out, err.strip().splitlines()
    return run


@pytest.mark.parametrize("argv,says", [
    (["--num-requests", "0"], "--num-requests 0 is not accepted; accepted: an integer from 1 to 4096"),
    (["--concurrency", "5000"], "--concurrency 5000 is not accepted"),
    (["--repeats", "0"], "--repeats 0 is not accepted"),
    (["--max-tokens", "1"], "--max-tokens 1 is not accepted; accepted: an integer from 2"),
    (["--seed", "-1"], "--seed -1 is not accepted"),
    (["--backends", "FOO"], "attention backend 'FOO' is unknown"),
    (["--backends", " , "], "names no backend"),
    (["--backends", "TRITON_MLA"], "'TRITON_MLA' is not a CUDA sparse MLA backend"),
    (["--backends", "FLASHMLA_SPARSE+FAST"], "run spec 'FLASHMLA_SPARSE+FAST' is not accepted"),
    (["--backends", "auto"], "names no backend"),
    (["--speculative-config", "{bad"], "is not valid JSON"),
    (["--speculative-config", "[1]"], "is not accepted; accepted: a non-empty JSON object"),
    (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype 'fp4' is not accepted"),
    (["--tp", "3"], "tensor-parallel size 3 does not divide the model's 64 attention heads"),
    (["--server-timeout", "0"], "--server-timeout 0.0 is not accepted"),
    (["--request-timeout", "nan"], "--request-timeout nan is not accepted"),
    (["--max-tokens", "1024"], "exceeds the model's max_position_embeddings 1100"),
])
def test_bad_arguments_one_line_each(bench_cli, model_dir, argv, says):
    cfg = json.loads((model_dir / "config.json").read_text())
    if argv == ["--max-tokens", "1024"]:
        (model_dir / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 1100}))
    rc, out, err = bench_cli("--model", str(model_dir), *argv)
    assert rc == 2 and out == "" and len(err) == 1, err
    assert err[0].startswith("sparse-mla bench: error:") and says in err[0], err


def test_mtp_needs_the_checkpoints_mtp_layer(bench_cli, model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**cfg, "num_nextn_predict_layers": 0}))
    rc, _, err = bench_cli("--model", str(model_dir), "--speculative-config", bs.DEFAULTS and
                           '{"method": "mtp", "num_speculative_tokens": 1}')
    assert rc == 2 and len(err) == 1 and "make-checkpoint --mtp" in err[0], err


@pytest.mark.parametrize("tokens", ['"two"', "[1]", "1e400", "-5", "1.5", "0", "true"])
def test_num_speculative_tokens_must_be_a_positive_integer(bench_cli, model_dir, tokens):
    """It was passed to int() unchecked: a traceback for "two", [1] or 1e400 (inf); -5 and 1.5 reached the GPU."""
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
    assert f"has max_position_embeddings = " in err[0] and "accepted: a positive integer" in err[0], err


def test_a_long_speculative_load_names_the_speculative_tokens():
    with pytest.raises(UserInputError, match=r"48 new tokens \+ 100000 speculative tokens exceeds .* 8192; "
                                             r"accepted: fewer --max-tokens or num_speculative_tokens"):
        bs.server_max_model_len(128, 48, 100000, 8192)


def test_good_arguments_need_a_gpu_and_missing_model_is_named(bench_cli, model_dir, tmp_path, monkeypatch):
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: False)   # a machine without one, also on a GPU
    rc, _, err = bench_cli("--model", str(model_dir), "--quick")
    assert rc == 2 and len(err) == 1 and "needs a CUDA GPU" in err[0], err
    rc, _, err = bench_cli("--model", str(tmp_path / "nope"))
    assert rc == 2 and len(err) == 1 and "nope" in err[0] and "config.json" in err[0], err


# ----------------------------------------------------------------------------------------------- the load
def test_prompts_are_seeded_and_straddle_index_topk():
    a = bs.make_prompts(97, 512, 2048, seed=3)
    assert a == bs.make_prompts(97, 512, 2048, seed=3)
    assert [p["token_ids"] for p in a] != [p["token_ids"] for p in bs.make_prompts(97, 512, 2048, seed=4)]
    assert [p["index"] for p in a] == list(range(97))
    kinds = [p["kind"] for p in a]
    assert kinds.count("short") == 49 and kinds.count("long") == 48
    assert kinds != sorted(kinds) and kinds != ["short", "long"] * 48 + ["short"]   # shuffled, not interleaved
    r = bs.prompt_length_ranges(512)
    for p in a:
        lo, hi = r[p["kind"]]
        assert lo <= p["prompt_len"] == len(p["token_ids"]) <= hi
        assert (p["prompt_len"] < 512) == (p["kind"] == "short")
        assert all(2 <= t < 2048 for t in p["token_ids"])
    assert len({p["prompt_len"] for p in a}) > 40   # lengths vary within each range


def test_server_max_model_len():
    assert bs.server_max_model_len(512, 48) == 4096
    assert bs.server_max_model_len(2048, 48, 1) == 5120            # 4096 + 48 + 1 + 8 -> next 1024
    assert bs.server_max_model_len(2048, 48, 0, 4500) == 4500     # capped by the model
    with pytest.raises(UserInputError, match="exceeds the model's max_position_embeddings 4000"):
        bs.server_max_model_len(2048, 48, 0, 4000)


# ----------------------------------------------------------------------------------------------- statistics
def test_spread_against_statistics_module():
    vals = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, float("nan"), None]
    s = bs.spread(vals)
    finite = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    q1, med, q3 = statistics.quantiles(finite, n=4, method="inclusive")   # = numpy's linear interpolation
    assert s == {"median": pytest.approx(med), "min": 1.0, "max": 10.0, "q1": pytest.approx(q1),
                 "q3": pytest.approx(q3), "n": 6}
    assert bs.spread([]) is None and bs.spread([float("inf")]) is None
    assert bs.spread([7.0]) == {"median": 7.0, "min": 7.0, "max": 7.0, "q1": 7.0, "q3": 7.0, "n": 1}


def _res(i, toks, ttft, lat, err=None):
    return bs.RequestResult(i, "short", 10, token_ids=list(toks), ttft_s=ttft, latency_s=lat, error=err)


def test_repeat_stats_and_summary():
    rs = [_res(0, range(5), 0.1, 0.5), _res(1, range(3), 0.2, 0.4), _res(2, [1], 0.3, 0.3),
          _res(3, [], None, None, err="ConnectionError: x")]
    st = bs.repeat_stats(rs, 2.0)
    assert st["requests"] == 4 and st["errors"] == 1 and st["first_errors"] == ["ConnectionError: x"]
    assert st["output_tokens"] == 9 and st["output_tokens_per_s"] == pytest.approx(4.5)
    assert st["ttft_ms"]["median"] == pytest.approx(200.0) and st["ttft_ms"]["n"] == 3
    # TPOT = (latency - TTFT) / (tokens - 1); a one-token request has none
    assert rs[0].tpot_s == pytest.approx(0.1) and rs[1].tpot_s == pytest.approx(0.1) and rs[2].tpot_s is None
    assert st["tpot_ms"]["n"] == 2 and st["tpot_ms"]["median"] == pytest.approx(100.0)
    st2 = bs.repeat_stats([_res(0, range(5), 0.3, 0.7)], 1.0)
    s = bs.summarize([st, st2], rs + [_res(0, range(5), 0.3, 0.7)])
    assert s["output_tokens_per_s"]["min"] == pytest.approx(4.5) and s["output_tokens_per_s"]["max"] == 5.0
    assert s["ttft_ms_median"]["min"] == pytest.approx(200.0) and s["ttft_ms_median"]["max"] == pytest.approx(300.0)
    assert s["ttft_ms_all"]["n"] == 4 and s["errors"] == 1


def test_agreement():
    a = [[1, 2, 3], [4, 5, 6], [7, 8], None]
    b = [[1, 2, 3], [4, 9, 6], [7, 8, 9], [1]]
    g = bs.agreement(a, b)
    assert g["compared"] == 3 and g["identical"] == 1
    assert [p.get("first_divergence") for p in g["per_request"]] == [None, 1, 2, None]
    assert g["per_request"][3] == {"index": 3, "compared": False}
    assert g["first_divergence_min"] == 1 and g["first_divergence_median"] == 2


def test_spec_counters_read_vllms_own_prometheus_output():
    """The oracle is vLLM's SpecDecodingProm (the class that exports the counters): drive it with known draft
    statistics, render its Prometheus text, and read it back."""
    pytest.importorskip("vllm.v1.spec_decode.metrics")
    import prometheus_client
    from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingStats

    registry_before = set(prometheus_client.REGISTRY._collector_to_names)
    try:
        prom = SpecDecodingProm(type("SC", (), {"num_speculative_tokens": 2})(), ["model_name", "engine"],
                                {0: ["glm5", "0"], 1: ["glm5", "1"]})
        text0 = prometheus_client.generate_latest().decode()
        for engine, drafts in ((0, [(2, 1), (2, 2), (2, 0)]), (1, [(2, 2)])):
            st = SpecDecodingStats.new(2)
            for n_draft, n_acc in drafts:
                st.observe_draft(n_draft, n_acc)
            prom.observe(st, engine)
        text1 = prometheus_client.generate_latest().decode()
    finally:
        for c in set(prometheus_client.REGISTRY._collector_to_names) - registry_before:
            prometheus_client.REGISTRY.unregister(c)
    c0, c1 = bs.spec_decode_counters(text0), bs.spec_decode_counters(text1)
    assert c0 == {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "accepted_per_pos": {0: 0.0, 1: 0.0}}
    assert c1 == {"drafts": 4.0, "draft_tokens": 8.0, "accepted_tokens": 5.0, "accepted_per_pos": {0: 3.0, 1: 2.0}}
    acc = bs.acceptance(c0, c1)
    assert acc["acceptance_rate"] == pytest.approx(5 / 8) and acc["mean_acceptance_length"] == pytest.approx(1 + 5 / 4)
    assert acc["acceptance_rate_per_pos"] == {0: pytest.approx(0.75), 1: pytest.approx(0.5)}
    assert bs.spec_decode_counters("# no spec decode here\nvllm:num_requests_running 0.0\n") is None
    assert bs.acceptance(None, None) is None


# ----------------------------------------------------------------------------------------------- the client
def test_client_loop_ttft_tpot_against_a_streaming_server(fake_server):
    """Known server delays: first token after 0.15 s, then one every 0.03 s (two per SSE chunk). The client must
    see TTFT >= 0.15 s and latency >= 0.15 + 6 x 0.03 s (sleeps never end early), TPOT near 0.03 s (a first chunk
    read late lengthens TTFT and shortens TPOT by as much / 6), all tokens in order, and the wall time of two waves
    of requests."""
    url = fake_server(FAKE_VLLM_TTFT_S=0.15, FAKE_VLLM_TPOT_S=0.03, FAKE_VLLM_TOKENS_PER_CHUNK=2)
    prompts = bs.make_prompts(6, 128, 2048, seed=1)
    res, dur = bs.run_load(url, prompts, concurrency=3, max_tokens=7, model="m")
    assert [r.index for r in res] == list(range(6)) and all(r.error is None for r in res), [r.error for r in res]
    for r, p in zip(res, prompts):
        base = sum(p["token_ids"]) * 31
        assert r.token_ids == [(base + 7 * k) % 2048 for k in range(7)] and r.usage_tokens == 7
        assert 0.15 <= r.ttft_s < 0.15 + 0.25, r.ttft_s
        assert r.latency_s >= 0.15 + 6 * 0.03 and 0.03 - 0.015 < r.tpot_s < 0.03 + 0.04, (r.latency_s, r.tpot_s)
        assert r.latency_s == pytest.approx(r.ttft_s + 6 * r.tpot_s)
    one = 0.15 + 6 * 0.03
    assert 2 * one <= dur < 2 * one + 1.0, dur       # 6 requests, 3 at a time: two waves
    st = bs.repeat_stats(res, dur)
    assert st["output_tokens"] == 42 and st["output_tokens_per_s"] == pytest.approx(42 / dur)


def test_client_records_errors_and_bounds_the_load(fake_server):
    url = fake_server(FAKE_VLLM_TTFT_S=2.0)
    prompts = bs.make_prompts(2, 128, 2048)
    res, _ = bs.run_load(url, prompts, 2, 4, model="m", request_timeout_s=0.3)
    assert all(r.error and "Timeout" in r.error for r in res), [r.error for r in res]
    with pytest.raises(TimeoutError):
        bs.run_load(url, prompts, 2, 4, model="m", load_timeout_s=0.5)
    dead = f"http://127.0.0.1:{srv.free_port()}"
    res, _ = bs.run_load(dead, prompts, 2, 4, model="m")
    assert all(r.error and "Connection" in r.error for r in res)


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
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    cmd = serve_command("/m", parse_run_spec("TRITON_MLA_SPARSE+TRITON_DSA_INDEXER"), 8123, kv_cache_dtype="fp8_ds_mla",
                        tp=2, enforce_eager=False, max_model_len=5120, max_num_seqs=32, speculative_config=mtp,
                        extra=bs.SERVER_EXTRA)
    assert cmd[:3] == ["vllm", "serve", "/m"]
    ns = parser.parse_args(cmd[3:])
    assert (ns.host, ns.port, ns.served_model_name, ns.seed) == ("127.0.0.1", 8123, ["glm5"], 0)
    assert (ns.attention_backend, ns.kv_cache_dtype, ns.speculative_config) == ("CUSTOM", "fp8_ds_mla", mtp)
    assert (ns.max_model_len, ns.max_num_seqs, ns.tensor_parallel_size) == (5120, 32, 2)
    assert ns.enable_prefix_caching is False and ns.disable_uvicorn_access_log is True and not ns.enforce_eager
    assert parser.parse_args(serve_command("/m", parse_run_spec("FLASHMLA_SPARSE"), 1)[3:]).enforce_eager


def test_served_starts_waits_logs_and_kills(vllm_on_path, tmp_path, model_dir):
    from sparse_mla.launch.engine import serve_command, server_env

    port = srv.free_port()
    spec = parse_run_spec("TRITON_MLA_SPARSE+TRITON_DSA_INDEXER")
    cmd = serve_command(model_dir, spec, port, kv_cache_dtype="fp8_ds_mla",
                        speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    log = tmp_path / "server.log"
    env = {**server_env(spec), "FAKE_VLLM_STARTUP_S": "0.4", "FAKE_VLLM_CHILD": "1"}
    t0 = time.time()
    with srv.served(cmd, env, log, port, timeout_s=30) as s:
        assert s.up_s >= 0.4 and s.base_url == f"http://127.0.0.1:{port}"
        assert s.proc.poll() is None and os.getpgid(s.proc.pid) == s.proc.pid   # its own process group
        res, _ = bs.run_load(s.base_url, bs.make_prompts(2, 128, 2048), 2, 3, model="glm5")
        assert all(r.error is None for r in res)
        proc = s.proc
    assert time.time() - t0 < 20 and proc.poll() is not None
    text = log.read_text()
    argv = json.loads(text.split("FAKE_VLLM argv ", 1)[1].splitlines()[0])
    assert argv[:2] == ["serve", str(model_dir)] and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--attention-backend") + 1] == "CUSTOM"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8_ds_mla"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 1}
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
        t0 = time.time()
        srv.stop_server(p, grace_s=0.5)
    assert p.returncode == -signal.SIGKILL and time.time() - t0 < 5


# ----------------------------------------------------------------------------------------------- a session
def test_bench_serve_end_to_end_with_a_fake_vllm(vllm_on_path, model_dir, tmp_path, monkeypatch):
    """Two run specs, each also with MTP: four servers one after the other, the record, the CSV, the plot and four
    logs in the out-dir and nothing else; agreement and acceptance as the fake server's rules make them."""
    monkeypatch.setenv(SIMULATED_ENV, "8.6")
    monkeypatch.setenv("SPARSE_MLA_TRITON_INDEXER", "1")   # a plain run spec must not inherit it
    out = tmp_path / "out"
    out.mkdir()
    load = bs.Load(num_requests=8, concurrency=4, repeats=2, max_tokens=5, seed=2)
    rec = bs.bench_serve(model_dir, ["TRITON_MLA_SPARSE", "FLASHMLA_SPARSE+TRITON_DSA_INDEXER"], load,
                         out_dir=out, tag="cpu", speculative_config='{"method": "mtp", "num_speculative_tokens": 1}')
    keys = ["TRITON_MLA_SPARSE", "TRITON_MLA_SPARSE+mtp", "FLASHMLA_SPARSE+TRITON_DSA_INDEXER",
            "FLASHMLA_SPARSE+TRITON_DSA_INDEXER+mtp"]
    assert list(rec["runs"]) == keys and rec["complete"] is True
    logs = {f"bench_serve_cpu_{k.replace('+', '_')}.log" for k in keys}
    assert {p.name for p in out.iterdir()} == {"bench_serve_cpu.json", "bench_serve_cpu.csv",
                                               "bench_serve_cpu.png"} | logs
    assert rec["simulated"]["capability"] == "8.6" and SIMULATED_ENV in rec["simulated"]["how"]
    prompts = bs.make_prompts(8, 128, 2048, seed=2)
    for k in keys:
        r = rec["runs"][k]
        assert "error" not in r, r.get("error")
        assert r["log"] in logs and len(r["repeats"]) == 2 and r["summary"]["errors"] == 0
        assert r["warmup"] == {"requests": 8, "max_tokens": bs.WARMUP_TOKENS, "duration_s": r["warmup"]["duration_s"],
                               "errors": 0}
        assert all(rep["output_tokens"] == 40 for rep in r["repeats"])
        assert r["self_agreement"][0]["identical"] == 8
        cmd = r["command"]
        assert "--no-enable-prefix-caching" in cmd and cmd[cmd.index("--max-num-seqs") + 1] == "4"
        assert "--enforce-eager" not in cmd and ("--speculative-config" in cmd) == k.endswith("+mtp")
        text = (out / r["log"]).read_text()
        indexer = "'1'" if "TRITON_DSA_INDEXER" in k else "None"
        assert f"SPARSE_MLA_TRITON_INDEXER={indexer}" in text
        assert r["indexer"] == ("TRITON_DSA_INDEXER" if "TRITON_DSA_INDEXER" in k else "vllm")
    base = rec["runs"]["TRITON_MLA_SPARSE"]
    assert base["token_ids"] == [[(sum(p["token_ids"]) * 31 + 7 * j) % 2048 for j in range(5)] for p in prompts]
    # the fake FLASHMLA_SPARSE parts from the others at token 3 on prompts of even length
    g = rec["agreement_vs_baseline"]["FLASHMLA_SPARSE+TRITON_DSA_INDEXER"]
    even = [p["prompt_len"] % 2 == 0 for p in prompts]
    assert 0 < sum(even) < 8
    assert [q["first_divergence"] for q in g["per_request"]] == [3 if e else None for e in even]
    assert g["identical"] == 8 - sum(even) and g["baseline"] == "TRITON_MLA_SPARSE"
    for k in ("TRITON_MLA_SPARSE+mtp", "FLASHMLA_SPARSE+TRITON_DSA_INDEXER+mtp"):
        v = rec["speculative_vs_plain"][k]
        assert v["identical"] == 8 and v["plain"] == k.removesuffix("+mtp")
        sd = rec["runs"][k]["spec_decode"]   # fake: per request 4 drafts of 1 token, 2 accepted; 2 repeats
        assert sd["drafts"] == 2 * 8 * 4 and sd["accepted_tokens"] == 2 * 8 * 2
        assert sd["acceptance_rate"] == pytest.approx(0.5) and v["acceptance_rate"] == pytest.approx(0.5)
        assert math.isfinite(v["tokens_per_s_ratio"])
    assert rec["runs"]["TRITON_MLA_SPARSE"]["spec_decode"] is None
    on_disk = json.loads((out / "bench_serve_cpu.json").read_text())
    assert on_disk["runs"].keys() == rec["runs"].keys() and on_disk["complete"]
    csv = (out / "bench_serve_cpu.csv").read_text().splitlines()
    assert csv[0].split(",") == list(bs.CSV_COLUMNS) and len(csv) == 5
    assert (out / "bench_serve_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_serve_records_a_server_that_does_not_start(vllm_on_path, model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_EXIT", "1")
    load = bs.Load(num_requests=2, concurrency=1, repeats=1, max_tokens=2)
    rec = bs.bench_serve(model_dir, ["FLASHMLA_SPARSE"], load, out_dir=tmp_path, tag="x", server_timeout_s=20)
    r = rec["runs"]["FLASHMLA_SPARSE"]
    assert "exited with 1" in r["error"] and "FAKE_VLLM argv" in r["log_tail"]
    assert rec["complete"] and "simulated" not in rec
    assert "error" in (tmp_path / "bench_serve_x.csv").read_text().splitlines()[0]


def test_cli_glue_quick_defaults_and_printout(vllm_on_path, model_dir, tmp_path, monkeypatch, capsys):
    """The command line's own path after the GPU check (record_place stands in): --quick gives 1 repeat, explicit
    values win over --quick, one line per run and the record's place are printed."""
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("bench.cli",))
    args = cli.build_parser().parse_args(["bench", "serve", "--model", str(model_dir), "--quick", "--num-requests",
                                          "4", "--concurrency", "2", "--max-tokens", "3", "--backends",
                                          "FLASHMLA_SPARSE,TRITON_MLA_SPARSE"])
    seen = {}
    real = bs.bench_serve
    monkeypatch.setattr(bs, "bench_serve", lambda model, runs, load, **kw: seen.update(load=load, runs=runs, **kw)
                        or real(model, runs, load, **kw))
    assert bs.cli_run(args, lambda a: (tmp_path, "t")) == 0
    assert seen["load"] == bs.Load(num_requests=4, concurrency=2, repeats=1, max_tokens=3, seed=0)
    assert seen["runs"] == ("FLASHMLA_SPARSE", "TRITON_MLA_SPARSE") and seen["cuda_graphs"] is True
    out = capsys.readouterr().out.splitlines()
    lines = [ln for ln in out if not ln.startswith("[bench serve")]
    assert lines[0].startswith("FLASHMLA_SPARSE ") and "tok/s" in lines[0] and "same as baseline -" in lines[0]
    assert lines[1].startswith("TRITON_MLA_SPARSE ") and "same as baseline" in lines[1]
    assert lines[2].startswith("record: ") and (tmp_path / "bench_serve_t.json").is_file()

