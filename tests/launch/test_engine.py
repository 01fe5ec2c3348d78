"""Step 4 on a machine without a GPU: `sparse-mla launch` input checks, the parity helpers of
:mod:`sparse_mla.launch.engine` on hand-made records, deterministic prompts, and the CPU path of notebook 05 -- the
reference GLM-5 forward with the Triton kernel (interpreter, fp32) as its attention core matches plain attention
on a prompt longer than index_topk."""
import json
import math
import os
import sys

import pytest
import torch

import sparse_mla
import sparse_mla.machine
from sparse_mla import cli
from sparse_mla.launch import engine as launch
from sparse_mla.kernels.error_bounds import check_attention
from sparse_mla.launch.checkpoint import load_checkpoint, make_checkpoint
from sparse_mla.launch.forward_rounding import forward_limit
from sparse_mla.errors import UserInputError
from sparse_mla.launch.glm5_reference import Glm5Reference
from sparse_mla.workbook.written import unwritten_keys

INDEX_TOPK = 128
PROMPT_LEN = 160  # > INDEX_TOPK: the indexer selects a strict subset for the last 32 positions


@pytest.fixture(scope="module")
def ckpt(module_tmp):
    return make_checkpoint(module_tmp("launch") / "glm5tiny", index_topk=INDEX_TOPK, num_layers=2)


@pytest.fixture
def one_blas_thread():
    """Best effort: run numpy's bundled OpenBLAS on one thread for the test (restored afterwards).

    Triton's interpreter executes every tile's ``tl.dot`` as a small numpy matmul; on a small machine a multithreaded
    OpenBLAS only adds synchronisation there (the kernel test runs about 3x faster single-threaded). ``numpy`` is
    imported long before this module, so ``OPENBLAS_NUM_THREADS`` would come too late; the library is found in
    ``/proc/self/maps`` (Linux) and left alone where it is not.
    """
    import ctypes

    import numpy  # noqa: F401  (loads the library)

    get = set_ = None
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and ln.split()[-1].startswith("/")})
    except OSError:
        paths = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for g, s in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                     ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                     ("openblas_get_num_threads", "openblas_set_num_threads")):
            if hasattr(lib, g) and hasattr(lib, s):
                get, set_ = getattr(lib, g), getattr(lib, s)
                break
        if get is not None:
            break
    if get is None:
        yield
        return
    before = int(get())
    set_(1)
    try:
        yield
    finally:
        set_(before)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: False)


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)


def _model_dir(tmp_path, **overrides):
    """A checkpoint directory holding only a DSA config.json (GLM-5's head count, index_topk and kv_lora_rank)."""
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    cfg = {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "num_attention_heads": 64,
           "kv_lora_rank": 512, "index_topk": 2048, **overrides}
    (d / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return d


# ----------------------------------------------------------------------------------------------- command line
@pytest.mark.parametrize("extra", [[], ["--serve"], ["--parity"]])
def test_cli_launch_without_gpu_exits_2_with_one_line(tmp_path, capsys, no_gpu, extra):
    rc = cli.main(["launch", "--model", str(_model_dir(tmp_path)), *extra])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("sparse-mla launch: error:")
    assert "needs a CUDA GPU" in lines[0]
    assert "Traceback" not in captured.err and captured.out == ""


def test_cli_launch_missing_model_dir_names_path(tmp_path, capsys, fake_gpu):
    missing = tmp_path / "no-such-checkpoint"
    rc = cli.main(["launch", "--model", str(missing)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert str(missing) in err[0] and "does not exist" in err[0]


def test_cli_launch_checks_arguments_before_the_gpu(tmp_path, capsys, no_gpu):
    """On a machine without a GPU a wrong value is still named (and not hidden behind 'needs a CUDA GPU')."""
    d = _model_dir(tmp_path)
    for argv, news in ((["--model", str(tmp_path / "nosuch")], "nosuch"),
                       (["--model", str(d), "--parity", "--backends", "TRITON_MLA_SPARSE,FOO"], "'FOO'"),
                       (["--model", str(d), "--tp", "3"], "tensor-parallel size 3")):
        assert cli.main(["launch", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and news in err[0] and "needs a CUDA GPU" not in err[0], err


def test_cli_launch_dir_without_config_names_path(tmp_path, capsys, fake_gpu):
    d = tmp_path / "empty-model"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"")
    rc = cli.main(["launch", "--model", str(d)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert str(d) in err[0] and "no config.json" in err[0]


def test_cli_launch_bad_prompt_lengths(tmp_path, capsys, fake_gpu):
    d = _model_dir(tmp_path)
    for bad in ("48,x", "0", ","):
        assert cli.main(["launch", "--model", str(d), "--prompt-lengths", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--prompt-lengths" in err[0]


def test_cli_launch_max_model_len_and_reference_max_len(tmp_path, capsys, no_gpu):
    """--max-model-len raises the engines' limit up to the config's max_position_embeddings (a longer one is named,
    as vLLM would refuse it); the prompts are checked against it; --reference-max-len takes a positive integer and
    only with --parity. Every refusal comes before the GPU check, in one line."""
    d = _model_dir(tmp_path, max_position_embeddings=65600)
    for argv, news in ((["--max-model-len", "70000"], "exceeds the model's max_position_embeddings 65600"),
                       (["--max-model-len", "0"], "--max-model-len"),
                       (["--prompt-lengths", "5000"], "max_model_len 4096"),
                       (["--max-model-len", "65600", "--prompt-lengths", "65536", "--max-tokens", "65"],
                        "exceeds the engines' max_model_len 65600"),
                       (["--reference-max-len", "100"], "takes effect with --parity only"),
                       (["--parity", "--reference-max-len", "0"], "--reference-max-len")):
        assert cli.main(["launch", "--model", str(d), *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and news in err[0] and "needs a CUDA GPU" not in err[0], (argv, err)
    # within the limits the arguments pass and the GPU is what is missing
    assert cli.main(["launch", "--model", str(d), "--parity", "--max-model-len", "65600", "--prompt-lengths",
                     "16384,65536", "--max-tokens", "8", "--reference-max-len", "16384"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_a_parity_record_without_a_prompt_for_the_reference_fails():
    rec = {"runs": {}, "prompt_lengths": [65536], "reference_max_len": 16384}
    assert launch.parity_failures(rec) == [
        "reference comparison: not made (no prompt within reference_max_len 16384)"]
    assert launch.parity_failures({**rec, "reference_max_len": None}) == [
        "reference comparison: not made (no engine ran)"]


@pytest.mark.parametrize("fn", [launch.run_offline, launch.run_serve, launch.run_parity])
def test_engine_entry_points_need_a_gpu(tmp_path, no_gpu, fn):
    with pytest.raises(UserInputError, match="needs a CUDA GPU"):
        fn(_model_dir(tmp_path))


def test_require_gpu_passes_with_a_gpu_and_refuses_without(fake_gpu, monkeypatch):
    assert launch.require_gpu() is None                     # a GPU: no error
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: False)
    with pytest.raises(UserInputError, match="needs a CUDA GPU"):
        launch.require_gpu()


@pytest.mark.parametrize("drop", ["index_topk", "kv_lora_rank"])
def test_cli_launch_non_dsa_config_is_refused_before_an_engine(tmp_path, capsys, fake_gpu, monkeypatch, drop):
    """A dense-MLA / non-DSA config (no index_topk, or no MLA) fails with one line naming the file and the key."""
    monkeypatch.setattr(launch, "run_offline", lambda *a, **k: pytest.fail("an engine was started"))
    d = _model_dir(tmp_path, architectures=["DeepseekV3ForCausalLM"], **{drop: None})
    rc = cli.main(["launch", "--model", str(d)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "not a DSA" in err[0] and drop in err[0] and "DeepseekV3ForCausalLM" in err[0] and "config.json" in err[0]


def test_cli_launch_config_not_json(tmp_path, capsys, fake_gpu):
    d = _model_dir(tmp_path)
    (d / "config.json").write_text("{not json")
    assert cli.main(["launch", "--model", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not valid JSON" in err[0]


@pytest.mark.parametrize("tp", ["3", "0", "-2", "128"])
@pytest.mark.parametrize("mode", [[], ["--serve"], ["--parity"]])
def test_cli_launch_tp_not_dividing_heads(tmp_path, capsys, fake_gpu, monkeypatch, tp, mode):
    for fn in ("run_offline", "run_serve", "run_parity"):
        monkeypatch.setattr(launch, fn, lambda *a, **k: pytest.fail("an engine was started"))
    rc = cli.main(["launch", "--model", str(_model_dir(tmp_path)), "--tp", tp, *mode])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert f"tensor-parallel size {tp}" in err[0] and "64 attention heads" in err[0] and "1, 2, 4, 8" in err[0]


def test_check_tp_more_than_visible_gpus(tmp_path, monkeypatch):
    d = _model_dir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert launch.check_tp(d, 2) == 2
    with pytest.raises(UserInputError, match=r"tensor-parallel size 8 needs 8 GPUs and 2 are visible; accepted: 1, 2$"):
        launch.check_tp(d, 8)
    for bad in (True, 2.0, "2"):
        with pytest.raises(UserInputError, match="is not an integer"):
            launch.check_tp(d, bad)


def test_cli_launch_unknown_backend_in_backends_list(tmp_path, capsys, fake_gpu, monkeypatch):
    monkeypatch.setattr(launch, "run_parity", lambda *a, **k: pytest.fail("an engine was started"))
    d = _model_dir(tmp_path)
    for bad in ("TRITON_MLA_SPARSE,NOPE_SPARSE", " , "):
        assert cli.main(["launch", "--model", str(d), "--parity", "--backends", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("NOPE_SPARSE" in err[0] or "names no backend" in err[0]), err


def test_parity_record_dir_checked_before_engines(tmp_path, fake_gpu, monkeypatch):
    monkeypatch.setattr(launch, "_subprocess_offline", lambda *a, **k: pytest.fail("an engine was started"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserInputError, match="folder of the record file"):
        launch.run_parity(_model_dir(tmp_path), out=blocker / "launch.json")


def test_default_record_path_for_tp():
    assert launch.default_record_path(2, gpu="h200") == "results/h200/launch_h200_tp2.json"
    assert launch.default_record_path(8, gpu="rtx-pro-6000") == "results/rtx-pro-6000/launch_rtx-pro-6000_tp8.json"
    assert launch.default_record_path(gpu="h200") == "results/h200/launch_h200.json"


def test_check_model_dir(tmp_path):
    d = _model_dir(tmp_path)
    assert launch.check_model_dir(str(d)) == d
    with pytest.raises(UserInputError, match="'.*nope' does not exist; accepted: a Hugging Face checkpoint"):
        launch.check_model_dir(tmp_path / "nope")            # it said "has no config.json" (the breaker, 2026-12-06)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match="has no config.json"):
        launch.check_model_dir(tmp_path / "empty")
    with pytest.raises(UserInputError, match="is not a directory"):
        launch.check_model_dir(d / "config.json")


# ----------------------------------------------------------------------------------------------- backend names
def test_attention_config_names():
    assert launch.attention_config("TRITON_MLA_SPARSE") == {"backend": "CUSTOM"}
    assert launch.attention_config("auto") is None
    with pytest.raises(UserInputError, match=r"^attention backend '' names no backend; accepted: auto, "):
        launch.attention_config("")           # was None, vLLM's choice: --backend "" ran as auto (issue 47, round 8)
    assert launch.attention_config(None) is None
    assert launch.attention_config("flashmla_sparse") == {"backend": "FLASHMLA_SPARSE"}
    assert launch.attention_config("FLASH_ATTN_MLA_SPARSE") == {"backend": "FLASH_ATTN_MLA_SPARSE"}
    assert launch.attention_config("custom") == {"backend": "CUSTOM"}   # vLLM's slot name for ours
    assert launch.normalize_backends(["custom", "TRITON_MLA_SPARSE", "flashmla_sparse"]) == (
        "TRITON_MLA_SPARSE", "FLASHMLA_SPARSE")


def test_attention_config_unknown_backend_names_it():
    with pytest.raises(UserInputError, match="NOPE") as e:
        launch.attention_config("NOPE")
    assert "TRITON_MLA_SPARSE" in str(e.value) and "FLASHMLA_SPARSE" in str(e.value)


@pytest.mark.parametrize("name", ["FLASH_ATTN", "triton_mla", "FLASHMLA", "XPU_MLA_SPARSE", "ROCM_AITER_MLA_SPARSE"])
def test_attention_config_rejects_dense_backends_before_an_engine(name):
    """vLLM knows these names, but none runs a DSA model's sparse attention: refused by name, not by a failed engine."""
    with pytest.raises(UserInputError, match=rf"{name!r} is not a CUDA sparse MLA backend.*FLASH_ATTN_MLA_SPARSE"):
        launch.attention_config(name)
    with pytest.raises(UserInputError, match="not a CUDA sparse MLA backend"):
        launch.normalize_backends([launch.OURS, name])


# ----------------------------------------------------------------------------------------------- parity helpers
def _gen(prompt_len, tokens, logprobs, first_top=None):
    return {"prompt_len": prompt_len, "token_ids": list(tokens), "logprobs": list(logprobs),
            "first_top_logprobs": {str(k): v for k, v in (first_top or {}).items()}}


def _run(*gens):
    return {"generations": list(gens)}


def test_compare_identical():
    a = _run(_gen(48, [5, 6, 7, 8], [-1.0, -2.0, -3.0, -4.0]))
    c = launch.compare(a, a)
    assert c["all_identical"]
    assert c["per_prompt"] == [{"prompt_len": 48, "identical": True, "first_divergence": None,
                                "max_abs_logprob_diff": 0.0}]


def test_compare_divergence_and_logprob_diffs():
    a = _run(_gen(48, [5, 6, 7, 8], [-1.0, -2.0, -3.0, -4.0]),
             _gen(900, [1, 2, 3, 4], [-1.0, -1.0, -1.0, -1.0]))
    b = _run(_gen(48, [5, 6, 7, 8], [-1.01, -2.0, -3.03, -4.0]),
             _gen(900, [1, 2, 9, 4], [-1.0, -1.02, -0.5, -1.0]))   # diverges at position 2
    c = launch.compare(a, b)
    assert not c["all_identical"]
    p48, p900 = c["per_prompt"]
    assert p48["identical"] and p48["first_divergence"] is None
    assert p48["max_abs_logprob_diff"] == pytest.approx(0.03)
    assert not p900["identical"] and p900["first_divergence"] == 2
    # only positions before the divergence count: the -0.5 at position 2 is a different token's log-prob
    assert p900["max_abs_logprob_diff"] == pytest.approx(0.02)
    assert launch.compare(b, a)["per_prompt"][1]["first_divergence"] == 2


def test_compare_divergence_at_first_token_and_length_mismatch():
    a = _run(_gen(8, [1, 2], [-1.0, -1.0]))
    c = launch.compare(a, _run(_gen(8, [3, 2], [-1.0, -1.0])))["per_prompt"][0]
    assert c["first_divergence"] == 0 and c["max_abs_logprob_diff"] is None
    c = launch.compare(a, _run(_gen(8, [1, 2, 3], [-1.0, -1.5, -1.0])))["per_prompt"][0]
    assert not c["identical"] and c["first_divergence"] == 2 and c["max_abs_logprob_diff"] == pytest.approx(0.5)


def test_compare_reference():
    vocab = 16
    ref_lp = torch.log_softmax(torch.linspace(0.0, 1.5, vocab, dtype=torch.float64), -1)
    top = {15: float(ref_lp[15]) + 0.01, 14: float(ref_lp[14]) - 0.03, 3: -math.inf}  # -inf entries are skipped
    run = _run(_gen(48, [15, 2], [top[15], -3.0], first_top=top), _gen(900, [14, 2], [-1.0, -1.0], first_top={14: -1.0}))
    ref = [{"argmax": int(ref_lp.argmax()), "logprobs": ref_lp}, {"argmax": 15, "logprobs": ref_lp}]
    r48, r900 = launch.compare_reference(run, ref)
    assert r48 == {"prompt_len": 48, "vllm_first_token": 15, "reference_argmax": 15, "same_first_token": True,
                   "top_k": 3, "max_abs_logprob_diff": pytest.approx(0.03)}
    assert r900["same_first_token"] is False and r900["reference_argmax"] == 15 and r900["top_k"] == 1
    assert r900["max_abs_logprob_diff"] == pytest.approx(abs(-1.0 - float(ref_lp[14])))


def test_recorded_h200_parity_matches_an_independent_count():
    """The committed H200 record's parity table against the runs' own token lists, counted here with a plain loop
    (not launch.compare), and against the facts read off the record when it was made: every pair diverges somewhere
    (all_identical false), FLASH_ATTN_MLA_SPARSE at token 31 of the 48-token prompt, FLASHMLA_SPARSE and our
    CUDA-graph run at token 21 of the 900-token prompt."""
    from pathlib import Path

    rec = json.loads((Path(__file__).resolve().parents[2] / "results" / "h200" / "launch_h200.json").read_text())
    ours = rec["runs"][launch.OURS]["generations"]

    def first_divergence(a, b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return i
        return None if len(a) == len(b) else min(len(a), len(b))

    counted = {}
    for key, stored in rec["parity_vs_ours"].items():
        theirs = rec["runs"][key]["generations"]
        divs = [first_divergence(o["token_ids"], t["token_ids"]) for o, t in zip(ours, theirs)]
        assert [p["first_divergence"] for p in stored["per_prompt"]] == divs, key
        assert [p["identical"] for p in stored["per_prompt"]] == [d is None for d in divs], key
        assert stored["all_identical"] == all(d is None for d in divs) is False, key
        counted[key] = divs
    assert counted == {"FLASH_ATTN_MLA_SPARSE": [31, None], "FLASHMLA_SPARSE": [None, 21],
                       "TRITON_MLA_SPARSE+cudagraph": [None, 21]}


# ----------------------------------------------------------------------------------------------- prompts
def test_prompt_ids_exact_lengths_and_deterministic(ckpt):
    lengths = [1, 17, PROMPT_LEN, 700]
    a = launch.prompt_ids(ckpt, lengths)
    assert [len(p) for p in a] == lengths
    assert launch.prompt_ids(ckpt, lengths) == a
    assert all(0 <= t < 2048 for p in a for t in p)
    assert launch.prompt_ids(ckpt, [PROMPT_LEN], seed=1)[0] != a[2]
    # prompts of different positions in one call differ (the word offset depends on the index)
    same_len = launch.prompt_ids(ckpt, [48, 48])
    assert same_len[0] != same_len[1]


# ----------------------------------------------------------------------------------------------- notebook 05, CPU
@pytest.mark.slow
@pytest.mark.interpreter
@pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")  # Triton interpreter
def test_reference_forward_with_triton_kernel_matches_plain_attention(ckpt, one_blas_thread):
    """Notebook 05 section 2 at reduced size: 2 layers, index_topk 128, a 160-token prompt. Each kernel call is held
    to its own derived limits on its inputs (kernels.error_bounds), the logits to the float32 rounding limit of two
    forwards (launch.forward_rounding)."""
    ids = torch.tensor(launch.prompt_ids(ckpt, [PROMPT_LEN])[0])
    ref = Glm5Reference.from_pretrained(ckpt, dtype=torch.float32)
    plain = ref.forward(ids)
    plain_topk = [t.clone() for t in ref.last["topk_local"]]

    calls = []

    def checked_kernel(q_nope, q_pe, kv_cache, slots, sm_scale):
        out, lse = sparse_mla.sparse_mla_attention(q_nope, q_pe, kv_cache, slots, sm_scale)
        calls.append(check_attention(out, lse, q_nope, q_pe, kv_cache, slots, sm_scale))
        return out, lse

    ref.attention_fn = checked_kernel
    kern = ref.forward(ids)
    kern_topk = ref.last["topk_local"]

    assert len(calls) == ref.num_layers and all(c.ok for c in calls), [c.explain() for c in calls]
    assert torch.isfinite(plain).all()
    limit = forward_limit(ref.config, load_checkpoint(ckpt)[1], ids)
    assert limit.share(kern, plain) < 1, limit.share(kern, plain)
    assert torch.equal(kern.argmax(-1), plain.argmax(-1))
    assert all(torch.equal(a, b) for a, b in zip(kern_topk, plain_topk))
    # sparsity binds: positions >= index_topk attend to exactly index_topk of their t + 1 causal tokens
    causal = torch.arange(1, PROMPT_LEN + 1)
    for topk in plain_topk:
        counts = (topk >= 0).sum(-1)
        assert torch.equal(counts, causal.clamp(max=INDEX_TOPK))
        assert int((counts < causal).sum()) == PROMPT_LEN - INDEX_TOPK


# ------------------------------------------------------------------------ inputs checked before any engine starts
@pytest.fixture
def no_engine(monkeypatch):
    for fn in ("run_offline", "run_serve", "_subprocess_offline"):
        monkeypatch.setattr(launch, fn, lambda *a, **k: pytest.fail("an engine was started"))


@pytest.mark.parametrize("mode", [[], ["--serve"], ["--parity"]])
def test_cli_json_out_checked_before_the_engine(tmp_path, capsys, fake_gpu, no_engine, mode):
    blocker = tmp_path / "afile"
    blocker.write_text("keep")
    d = _model_dir(tmp_path)
    blobs = tmp_path / "blobs"   # Hugging Face cache layout: snapshot files are links into blobs/
    blobs.mkdir()
    os.replace(d / "config.json", blobs / "cfgblob")
    os.symlink(blobs / "cfgblob", d / "config.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    config = (d / "config.json").read_text()
    for bad, says in ((tmp_path, "is a directory"), (blocker / "x.json", "is a file"), ("", "is empty"),
                      (fifo, "not a regular file"), (d / "config.json", "a file of the model directory"),
                      (d / "sub" / "rec.json", "a file of the model directory"),
                      (blobs / "cfgblob", "a file of the model directory")):
        assert cli.main(["launch", "--model", str(d), "--json-out", str(bad), *mode]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert blocker.read_text() == "keep" and (d / "config.json").read_text() == config
    assert fifo.exists() and not fifo.is_file() and not (d / "sub").exists()


@pytest.mark.parametrize("overrides,says", [
    ({"text_config": "x"}, "not a config object"),
    ({"num_attention_heads": "sixty"}, "num_attention_heads = 'sixty'"),
    ({"num_attention_heads": 0}, "num_attention_heads = 0"),
    ({"num_attention_heads": 64.5}, "num_attention_heads = 64.5"),
    ({"num_attention_heads": 10**12}, "num_attention_heads = 1000000000000"),
    ({"index_topk": None, "kv_lora_rank": 512}, "no index_topk"),
    ({"index_topk": 0}, "index_topk = 0"),
    ({"kv_lora_rank": "abc"}, "kv_lora_rank = 'abc'"),
])
def test_malformed_dsa_config_values(tmp_path, capsys, fake_gpu, no_engine, overrides, says):
    d = _model_dir(tmp_path, **overrides)
    assert cli.main(["launch", "--model", str(d), "--tp", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


@pytest.mark.parametrize("argv,says", [
    (["--max-tokens", "0"], "max tokens 0"),
    (["--prompt-lengths", "4090", "--max-tokens", "32"], "exceeds the engines' max_model_len 4096"),
    (["--throughput", '{"num_seqs": true, "prompt_len": 8, "max_tokens": 8}'], "throughput"),
    (["--throughput", '{"num_seqs": 4, "prompt_len": 99999, "max_tokens": 8}'], "prompt_len + max_tokens"),
    (["--throughput", ""], "is not valid JSON"),
])
def test_generation_sizes_checked(tmp_path, capsys, fake_gpu, no_engine, argv, says):
    assert cli.main(["launch", "--model", str(_model_dir(tmp_path)), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_backend_names_normalised_and_deduplicated():
    assert launch.normalize_backends([" triton_mla_sparse", "flashmla_sparse", "FLASHMLA_SPARSE"]) == \
        ("TRITON_MLA_SPARSE", "FLASHMLA_SPARSE")
    for bad in ("FLASHMLA_SPARSE", [], ["auto"], [5]):
        with pytest.raises(UserInputError):
            launch.normalize_backends(bad)


def test_run_parity_api_checks_arguments(tmp_path, fake_gpu, no_engine):
    d = _model_dir(tmp_path)
    for kw in ({"prompt_lengths": ()}, {"max_tokens": -1}, {"throughput": {"x": 1}}, {"backends": "FLASHMLA_SPARSE"},
               {"out": tmp_path}):
        with pytest.raises(UserInputError):
            launch.run_parity(d, **kw)


# ------------------------------------------------------------------------ run specs, kv dtype, MTP through --parity
def _fake_offline(calls):
    """Stands in for one engine subprocess: records (args, env) and answers with a run record whose greedy tokens
    depend on the backend (FLASHMLA_SPARSE parts at token 2), like near-ties between backends."""
    def run(args, out_json, log, env=None):
        a = dict(zip(args[::2], args[1::2]))
        calls.append({"args": list(args), "env": env, "log": log})
        lens = [int(x) for x in a["--prompt-lengths"].split(",")]
        part = "FLASHMLA_SPARSE" in a["--backend"]
        gens = [_gen(n, [n, n + 1] + ([9, 9] if part else [n + 2, n + 3]), [-1.0] * 4, first_top={n: -1.0})
                for n in lens]
        return {"layers": {}, "kv_cache_dtype": a["--kv-cache-dtype"], "generations": gens,
                "throughput": {"output_tokens_per_s": 1.0}}
    return run


def test_parity_run_specs_kv_dtype_and_speculative_config_reach_every_engine(ckpt, tmp_path, fake_gpu, monkeypatch):
    calls, served = [], {}
    monkeypatch.setattr(launch, "_subprocess_offline", _fake_offline(calls))
    monkeypatch.setattr(launch, "reference_first_token", lambda model, prompts: [
        {"argmax": len(p), "logprobs": torch.zeros(4096)} for p in prompts])
    monkeypatch.setattr(launch, "first_token_criterion", lambda model, prompts, ref, runs, kv: served.update(
        criterion=(len(prompts), sorted(runs), kv)) or {"failures": []})   # tests/launch/test_first_token.py
    monkeypatch.setattr(launch, "run_serve", lambda model, backend, **kw: served.update(backend=backend, **kw) or {
        "token_ids": [48, 49, 50, 51]})
    monkeypatch.setenv("SPARSE_MLA_TRITON_INDEXER", "1")          # the shell's value must not leak into plain runs
    monkeypatch.setenv("SPARSE_MLA_SIMULATED_CAPABILITY", "8.9")
    cfg = json.loads((ckpt / "config.json").read_text())
    model = tmp_path / "m2"
    model.mkdir()
    for f in ckpt.iterdir():
        if f.name != "config.json":
            (model / f.name).symlink_to(f)
    (model / "config.json").write_text(json.dumps({**cfg, "num_nextn_predict_layers": 1}))
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    rec = launch.run_parity(model, backends=["TRITON_MLA_SPARSE+TRITON_DSA_INDEXER", "TRITON_MLA_SPARSE",
                                             "FLASHMLA_SPARSE"], prompt_lengths=(48, 200), max_tokens=4,
                            out=tmp_path / "rec.json", log_dir=tmp_path / "logs", kv_cache_dtype="fp8_ds_mla",
                            speculative_config=json.dumps(mtp))
    keys = ["TRITON_MLA_SPARSE+TRITON_DSA_INDEXER", "TRITON_MLA_SPARSE", "FLASHMLA_SPARSE", "TRITON_MLA_SPARSE+eager",
            "TRITON_MLA_SPARSE+no-speculation"]
    assert list(rec["runs"]) == keys and len(calls) == 5
    for key, c in zip(keys, calls):
        a = c["args"]
        assert a[a.index("--kv-cache-dtype") + 1] == "fp8_ds_mla"
        plain = key.endswith("+no-speculation")
        assert plain is ("--speculative-config" not in a) and rec["runs"][key]["speculative"] is not plain
        assert plain or json.loads(a[a.index("--speculative-config") + 1]) == mtp
        assert a[a.index("--backend") + 1] == key.removesuffix("+eager").removesuffix("+no-speculation")
        assert ("--cuda-graphs" in a) == (not key.endswith("+eager"))
        assert c["env"].get("SPARSE_MLA_TRITON_INDEXER") == ("1" if "TRITON_DSA_INDEXER" in key else None)
        assert "+" not in c["log"].name      # log names without '+' (they must survive copying off the GPU host)
        r = rec["runs"][key]
        assert r["kv_cache_dtype"] == "fp8_ds_mla" and r["indexer"] == (
            "TRITON_DSA_INDEXER" if "TRITON_DSA_INDEXER" in key else "vllm")
        assert rec["run_specs"][key]["backend_requested"] == key.split("+")[0]
    assert rec["kv_cache_dtype"] == "fp8_ds_mla" and rec["speculative_config"] == mtp
    assert rec["model"]["num_nextn_predict_layers"] == 1 and rec["simulated"]["capability"] == "8.9"
    # ours (plain) is the baseline; every pair is compared once
    assert rec["parity_baseline"] == "TRITON_MLA_SPARSE"
    assert set(rec["parity_vs_ours"]) == set(keys) - {"TRITON_MLA_SPARSE"}
    assert rec["parity_vs_ours"]["TRITON_MLA_SPARSE+TRITON_DSA_INDEXER"]["all_identical"]
    assert rec["parity_vs_ours"]["FLASHMLA_SPARSE"]["per_prompt"][0]["first_divergence"] == 2
    assert [(p["a"], p["b"]) for p in rec["parity_pairs"]] == [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]
    assert all(r["same_first_token"] for rows in rec["reference_first_token"].values() for r in rows)
    assert served["backend"] == "TRITON_MLA_SPARSE" and served["kv_cache_dtype"] == "fp8_ds_mla"
    assert served["speculative_config"] == mtp and rec["serve"]["compared_with"] == "TRITON_MLA_SPARSE+eager"
    assert served["criterion"] == (2, sorted(keys), "fp8_ds_mla") and rec["first_token_criterion"] == {"failures": []}
    assert unwritten_keys(rec) == []        # every key the writer wrote is one records check knows
    assert json.loads((tmp_path / "rec.json").read_text())["run_specs"] == rec["run_specs"]


def test_parity_baseline_without_plain_ours():
    assert launch.parity_baseline(("FLASHMLA_SPARSE", "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER")) == \
        "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER"
    assert launch.parity_baseline(("FLASHMLA_SPARSE",)) is None
    assert launch.parity_plan(("FLASHMLA_SPARSE", "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER"))[-1] == (
        "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER+eager", "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER", False, False)
    assert launch.parity_plan(("FLASHMLA_SPARSE",), graph=False) == [
        ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE", False, False)]
    # with speculation, the baseline once more without it (the greedy tokens speculation must keep)
    assert launch.parity_plan(("TRITON_MLA_SPARSE", "FLASHMLA_SPARSE"), graph=False, speculative=True) == [
        ("TRITON_MLA_SPARSE", "TRITON_MLA_SPARSE", False, True), ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE", False, True),
        ("TRITON_MLA_SPARSE+no-speculation", "TRITON_MLA_SPARSE", False, False)]


def test_cli_parity_passes_run_specs_kv_dtype_and_speculative_config(tmp_path, fake_gpu, monkeypatch, capsys):
    got = {}
    monkeypatch.setattr(launch, "run_parity", lambda model, **kw: got.update(kw) or {})
    d = _model_dir(tmp_path, num_nextn_predict_layers=1)
    assert cli.main(["launch", "--model", str(d), "--parity", "--kv-cache-dtype", "fp8_ds_mla", "--backends",
                     "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER,TRITON_MLA_SPARSE,FLASHMLA_SPARSE",
                     "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}',
                     "--json-out", str(tmp_path / "r.json")]) == 0
    assert got["backends"] == ("TRITON_MLA_SPARSE+TRITON_DSA_INDEXER", "TRITON_MLA_SPARSE", "FLASHMLA_SPARSE")
    assert got["kv_cache_dtype"] == "fp8_ds_mla"
    assert got["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 1}
    for argv, says in ((["--backend", "TRITON_MLA_SPARSE+X"], "run spec"),
                       (["--speculative-config", "{x"], "is not valid JSON"),
                       (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype 'fp4'")):
        assert cli.main(["launch", "--model", str(_model_dir(tmp_path)), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_serve_command_and_environments(monkeypatch):
    spec = launch.parse_run_spec("FLASHMLA_SPARSE+TRITON_DSA_INDEXER")
    cmd = launch.serve_command("/m", spec, 8123, kv_cache_dtype="fp8_ds_mla", tp=2, enforce_eager=False,
                               max_num_seqs=32, speculative_config={"method": "mtp"}, extra=("--x",))
    assert cmd[:3] == ["vllm", "serve", "/m"] and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--attention-backend") + 1] == "FLASHMLA_SPARSE" and "--enforce-eager" not in cmd
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2" and cmd[cmd.index("--max-num-seqs") + 1] == "32"
    # an MTP drafter is told the run's backend (vLLM never lets it inherit one: specs.with_drafter_backend)
    assert json.loads(cmd[cmd.index("--speculative-config") + 1]) == {"method": "mtp",
                                                                      "attention_backend": "FLASHMLA_SPARSE"}
    assert cmd[-1] == "--x"
    ngram = launch.serve_command("/m", spec, 1, speculative_config={"method": "ngram"})
    assert json.loads(ngram[ngram.index("--speculative-config") + 1]) == {"method": "ngram"}
    assert "--attention-backend" not in launch.serve_command("/m", launch.parse_run_spec("auto"), 1)
    custom = launch.serve_command("/m", launch.parse_run_spec("custom"), 1)
    assert custom[custom.index("--attention-backend") + 1] == "CUSTOM"
    assert custom[-2:] == ["--worker-extension-cls", "sparse_mla.vllm_plugin.ran.RanWorkerExtension"]
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "ERROR")
    monkeypatch.setenv("SPARSE_MLA_TRITON_INDEXER", "1")
    plain = launch.parse_run_spec("FLASHMLA_SPARSE")
    assert "SPARSE_MLA_TRITON_INDEXER" not in launch.spec_env(plain)
    assert launch.server_env(spec)["SPARSE_MLA_TRITON_INDEXER"] == "1"
    assert launch.server_env(plain)["VLLM_LOGGING_LEVEL"] == "INFO"
    assert launch.server_env(plain)["VLLM_SERVER_DEV_MODE"] == "1"     # /collective_rpc: the ran block


def _fake_vllm_on_path(tmp_path, monkeypatch) -> None:
    """``vllm`` on PATH is the stand-in server (tests/bench/fake_vllm.py), for this test only."""
    from pathlib import Path

    fake = Path(__file__).resolve().parents[1] / "bench" / "fake_vllm.py"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text(f"#!/bin/sh\nexec {sys.executable} {fake} \"$@\"\n")
    (bindir / "vllm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


def test_run_serve_against_a_fake_vllm(tmp_path, fake_gpu, monkeypatch):
    """run_serve end to end on the CPU: the stand-in `vllm serve` (tests/bench/fake_vllm.py) gets the run spec's
    backend, KV dtype, speculative config and indexer switch, answers one completion, and is stopped."""
    _fake_vllm_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("SPARSE_MLA_SIMULATED_CAPABILITY", "12.0")
    d = _model_dir(tmp_path, num_nextn_predict_layers=1)
    prompt = [5, 6, 7]
    rec = launch.run_serve(d, "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER", prompt=prompt, max_tokens=4,
                           kv_cache_dtype="fp8_ds_mla", log_path=tmp_path / "s.log",
                           speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    assert rec["token_ids"] == [(sum(prompt) * 31 + 7 * k) % 2048 for k in range(4)]
    assert rec["run"] == "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER" and rec["indexer"] == "TRITON_DSA_INDEXER"
    assert rec["kv_cache_dtype"] == "fp8_ds_mla" and rec["custom_backend_selected"] is True
    assert rec["simulated"]["capability"] == "12.0"
    cmd = rec["command"]
    assert cmd[cmd.index("--attention-backend") + 1] == "CUSTOM" and "--enforce-eager" in cmd
    log = (tmp_path / "s.log").read_text()
    assert "SPARSE_MLA_TRITON_INDEXER='1' VLLM_LOGGING_LEVEL='INFO'" in log
    # the ran block came from the server's workers (the stand-in answers vLLM's /collective_rpc only in dev mode,
    # with the worker extension on its command line): what it ran matches the request
    assert cmd[cmd.index("--worker-extension-cls") + 1] == "sparse_mla.vllm_plugin.ran.RanWorkerExtension"
    assert rec["ran"]["attention"] == {"TRITON_MLA_SPARSE": 2} and rec["ran"]["capability"] == "12.0"
    assert rec["ran_contradictions"] == []
    assert unwritten_keys(rec) == [] and unwritten_keys({"runs": {}, "serve": rec}) == []   # records check's lists


def test_run_serve_records_what_the_server_ran_against_the_request(tmp_path, fake_gpu, monkeypatch):
    """A server whose layers ran another backend (the stand-in told so) is a contradiction in the record, and the
    parity failures name it."""
    from sparse_mla.diagnose.probe import load_vllm_extensions

    load_vllm_extensions()   # vLLM's CUDA platform rules (the default indexer) importable without the driver

    _fake_vllm_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_VLLM_RAN_BACKEND", "FLASHMLA_SPARSE")
    d = _model_dir(tmp_path)
    rec = launch.run_serve(d, "TRITON_MLA_SPARSE", prompt=[5, 6, 7], max_tokens=2, log_path=tmp_path / "s.log")
    assert rec["ran"]["attention"] == {"FLASHMLA_SPARSE": 2}
    assert any(c.startswith("attention: asked TRITON_MLA_SPARSE") for c in rec["ran_contradictions"])
    failures = launch.parity_failures({"runs": {}, "reference_first_token": [], "serve": rec})
    assert any(f.startswith("serve: what ran contradicts what was asked: attention") for f in failures)



def test_run_offline_starts_vllm_engines_with_spawn(tmp_path, monkeypatch):
    """Forked engine cores died on the H200 with "Cannot re-initialize CUDA in forked subprocess" (2026-12-01); the
    engine is started with spawn unless the user chose a method."""
    import json as _json

    import vllm

    from sparse_mla.launch import checkpoint as ck

    (tmp_path / "config.json").write_text(_json.dumps(ck.preset_config("glm-5-tiny", index_topk=256)))
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    seen = {}

    class FakeLLM:
        def __init__(self, **kw):
            seen["method"] = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")
            raise RuntimeError("stop here")

    monkeypatch.setattr(vllm, "LLM", FakeLLM)
    with pytest.raises(RuntimeError, match="stop here"):
        launch.run_offline(tmp_path)
    assert seen["method"] == "spawn"
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")
    with pytest.raises(RuntimeError, match="stop here"):
        launch.run_offline(tmp_path)
    assert seen["method"] == "fork"


def test_run_offline_writes_only_the_keys_records_check_knows(tmp_path, monkeypatch):
    """One engine's record as run_offline writes it (a stand-in ``LLM``: layers, one greedy generation, the ``ran``
    block of every rank of a TP-2 engine): its keys are those ``records check`` holds an engine record to
    (:mod:`sparse_mla.workbook.written`, issue 47 round 7), its ``ran`` blocks of the schema's shape."""
    import types

    import vllm

    from sparse_mla.launch import checkpoint as ck
    from sparse_mla.records import schema

    (tmp_path / "config.json").write_text(json.dumps(ck.preset_config("glm-5-tiny", index_topk=256)))
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)
    monkeypatch.setattr(launch, "check_tp", lambda model, tp: tp)
    ran = {"capability": "9.0", "device_capability": "9.0", "triton_targets": {}, "triton_binaries": [],
           "launch_plan": {}, "indexer": {"triton": 0, "deepgemm": 2}, "attention": {"TRITON_MLA_SPARSE": 2},
           "indexer_cache": {"DEEPSEEK_V32_INDEXER": 2}, "weights": {"load_format": "auto", "quantization": None,
                                                                  "gguf_adapter": None}}

    class FakeLLM:
        def __init__(self, **kw):
            pass

        def collective_rpc(self, fn):
            return [{}, {}] if fn is launch.layer_backends else [dict(ran), dict(ran)]

        def generate(self, prompts, sp, use_tqdm=False):
            out = types.SimpleNamespace(token_ids=[5, 6], logprobs=[{5: types.SimpleNamespace(logprob=-0.5)},
                                                                    {6: types.SimpleNamespace(logprob=-0.25)}])
            return [types.SimpleNamespace(outputs=[out]) for _ in prompts]

    monkeypatch.setattr(vllm, "LLM", FakeLLM)
    rec = launch.run_offline(tmp_path, "TRITON_MLA_SPARSE", tp=2, prompts=[[1, 2, 3]], max_tokens=2)
    assert len(rec["ran_per_rank"]) == 2 and rec["generations"][0]["token_ids"] == [5, 6]
    assert unwritten_keys(rec) == [] and unwritten_keys({"runs": {"x": {**rec, "speculative": False}}}) == []
    assert [schema.problems(r, schema.Ran) for r in rec["ran_per_rank"]] == [[], []]


def test_backends_without_parity_is_refused_not_ignored(tmp_path, capsys, no_gpu):
    d = _model_dir(tmp_path)
    assert cli.main(["launch", "--model", str(d), "--backends", "FLASHMLA_SPARSE"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backends 'FLASHMLA_SPARSE' takes effect with --parity only" in err[0], err


def test_a_parity_run_whose_engines_died_fails_and_keeps_its_record(ckpt, tmp_path, fake_gpu, monkeypatch, capsys):
    """The 2026-12-01 indexer-parity stage returned 0 with every engine "exit 1": now the command exits 1, the record
    is written and names each failure (evidence issue, 'failures fail')."""
    monkeypatch.setattr(launch, "_subprocess_offline", lambda *a, **k: {"error": "exit 1", "log_tail": "boom"})
    out = tmp_path / "rec.json"
    rc = cli.main(["launch", "--model", str(ckpt), "--parity", "--no-serve", "--backends",
                   "TRITON_MLA_SPARSE,FLASHMLA_SPARSE", "--json-out", str(out)])
    assert rc == 1
    rec = json.loads(out.read_text())
    engines = [f for f in rec["failures"] if f.startswith("engine ")]
    assert len(engines) == len(rec["runs"]) >= 2 and all(f.endswith("exit 1") for f in engines)
    assert "reference comparison: not made (no engine ran)" in rec["failures"]
    assert "parity run failed: engine " in capsys.readouterr().err
    assert unwritten_keys(rec) == []


def test_an_interrupted_parity_run_writes_what_ran_before_it(ckpt, tmp_path, fake_gpu, monkeypatch, capsys):
    """A time limit (SIGTERM; Ctrl-C) during the second engine: the command exits 130 and the record holds the
    first engine's run, the second as interrupted and the rest as not run (on 2026-12-03 a 360 s limit on an MTP
    parity stage left no record at all)."""
    calls, fake = [], _fake_offline([])

    def engine(args, out_json, log, env=None):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fake(args, out_json, log, env)

    monkeypatch.setattr(launch, "_subprocess_offline", engine)
    monkeypatch.setattr(launch, "reference_first_token", lambda *a: pytest.fail("no reference after an interruption"))
    out = tmp_path / "rec.json"
    rc = cli.main(["launch", "--model", str(ckpt), "--parity", "--no-serve", "--backends",
                   "TRITON_MLA_SPARSE,FLASHMLA_SPARSE,FLASH_ATTN_MLA_SPARSE", "--json-out", str(out)])
    assert rc == 130 and len(calls) == 2
    rec = json.loads(out.read_text())
    assert "generations" in rec["runs"]["TRITON_MLA_SPARSE"]
    assert rec["runs"]["FLASHMLA_SPARSE"]["error"] == "interrupted"
    assert rec["runs"]["FLASH_ATTN_MLA_SPARSE"]["error"] == "not run (interrupted)"
    assert rec["interrupted"] == "interrupted during engine FLASHMLA_SPARSE"
    assert "parity run interrupted during engine FLASHMLA_SPARSE" in rec["failures"]
    assert str(out) in capsys.readouterr().err
    assert unwritten_keys(rec) == []


def test_an_interruption_in_the_reference_forward_keeps_every_engines_run(ckpt, tmp_path, fake_gpu, monkeypatch,
                                                                            capsys):
    """A time limit after the engines, inside the reference forward (on 2026-12-04 a 600 s limit hit the float64
    criterion of a 2000-token prompt after all six simulated-GPU engines had run, and nothing was written): exit 130,
    the record holds every engine's run and says where the interruption came."""
    monkeypatch.setattr(launch, "_subprocess_offline", _fake_offline([]))

    def reference(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "reference_first_token", reference)
    out = tmp_path / "rec.json"
    rc = cli.main(["launch", "--model", str(ckpt), "--parity", "--no-serve", "--backends",
                   "TRITON_MLA_SPARSE,FLASHMLA_SPARSE", "--json-out", str(out)])
    assert rc == 130
    rec = json.loads(out.read_text())
    assert all("generations" in r for r in rec["runs"].values()) and len(rec["runs"]) == 3   # + the eager baseline
    assert rec["interrupted"].startswith("interrupted after the engines ran")
    assert any(f.startswith("parity run interrupted after the engines ran") for f in rec["failures"])
    assert str(out) in capsys.readouterr().err


def test_an_engine_whose_ran_block_contradicts_the_request_fails_and_keeps_its_record(ckpt, tmp_path, fake_gpu,
                                                                                       monkeypatch, capsys):
    """The 2026-12-01 simulated-SM80 record said 8.0 while vLLM saw 9.0: ``launch`` now reads the ``ran`` block in
    the engine's workers (``LLM.collective_rpc``), records what contradicts the request and exits 1."""
    import types

    import vllm

    from sparse_mla.diagnose import probe
    from sparse_mla.vllm_plugin import indexer, ran

    probe.load_vllm_extensions()     # vLLM's CUDA platform rules importable here (the default-indexer check)
    seen = {}
    ran_there = {"capability": "9.0", "triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm90"]},
                 "indexer": {"triton": 0, "deepgemm": 4}, "attention": {"TRITON_MLA_SPARSE": 2}}

    class FakeLLM:
        def __init__(self, **kw):
            seen["count_env"] = os.environ.get(indexer.COUNT_ENV)

        def collective_rpc(self, fn):
            seen.setdefault("rpc", []).append(fn)
            return [{"l": {"layer": "MLAAttention", "backend": "TRITON_MLA_SPARSE"}}] if fn is ran.layer_backends \
                else [ran_there]

        def generate(self, prompts, sp, use_tqdm=False):
            out = types.SimpleNamespace(token_ids=[1, 2], logprobs=None)
            return [types.SimpleNamespace(outputs=[out]) for _ in prompts]

    monkeypatch.setattr(vllm, "LLM", FakeLLM)
    monkeypatch.setenv("SPARSE_MLA_SIMULATED_CAPABILITY", "8.0")
    out = tmp_path / "rec.json"
    assert cli.main(["launch", "--model", str(ckpt), "--json-out", str(out)]) == 1
    rec = json.loads(out.read_text())
    assert seen["count_env"] == "1" and seen["rpc"] == [ran.layer_backends, ran.collect]
    assert rec["ran"] == ran_there
    assert any(c.startswith("capability: asked 8.0, vLLM saw 9.0") for c in rec["ran_contradictions"])
    assert "what ran contradicts what was asked: capability" in capsys.readouterr().err
    monkeypatch.delenv("SPARSE_MLA_SIMULATED_CAPABILITY")
    assert cli.main(["launch", "--model", str(ckpt), "--json-out", str(out)]) == 0
    assert json.loads(out.read_text())["ran_contradictions"] == []
    assert capsys.readouterr().out == ""          # the record went to --json-out; no parity summary for one engine


def test_parity_failures_name_each_contradiction():
    rec = {"runs": {"A": {"ran_contradictions": ["capability: asked 8.0, vLLM saw 9.0 in the engine"]}, "B": {}},
           "reference_first_token": {"A": []}}
    assert launch.parity_failures(rec) == [
        "engine A: what ran contradicts what was asked: capability: asked 8.0, vLLM saw 9.0 in the engine"]


def test_parity_failures_name_the_first_token_criterion():
    """A first token other than the reference's argmax on a decisive prompt fails the run, as does a criterion that
    could not be evaluated (tests/launch/test_first_token.py computes it)."""
    base = {"runs": {"A": {}}, "reference_first_token": {"A": []}}
    line = "first token: A gave 7 for the 48-token prompt, the reference's argmax is 5 with a top-2 gap 0.9 > tolerance 0.1"
    assert launch.parity_failures({**base, "first_token_criterion": {"failures": [line]}}) == [line]
    assert launch.parity_failures({**base, "first_token_criterion": {"failures": []}}) == []
    assert launch.parity_failures({**base, "first_token_criterion": {"error": "OSError: x"}}) == [
        "first-token criterion: OSError: x"]


def test_a_simulated_run_spec_runs_in_its_own_process_only(tmp_path, fake_gpu, monkeypatch, capsys):
    """`launch --backend X@8.0` in this process would leave vLLM's front end on the real capability: refused before
    any engine, unless the process itself runs under that simulation; a parity run gives each engine its own process
    with the variable set."""
    d = _model_dir(tmp_path)
    monkeypatch.delenv("SPARSE_MLA_SIMULATED_CAPABILITY", raising=False)
    assert cli.main(["launch", "--model", str(d), "--backend", "TRITON_MLA_SPARSE@8.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "asks for a simulated capability 8.0 and this process runs with none" in err[0]
    monkeypatch.setenv("SPARSE_MLA_SIMULATED_CAPABILITY", "8.0")
    assert launch.check_offline_spec(launch.parse_run_spec("TRITON_MLA_SPARSE@8.0")).capability == "8.0"
    spec = launch.parse_run_spec("TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.9")
    assert launch.spec_env(spec, {})["SPARSE_MLA_SIMULATED_CAPABILITY"] == "8.9"


def test_a_served_record_from_the_command_line_is_one_records_check_reads(tmp_path, ckpt, fake_gpu, monkeypatch):
    """``launch --serve --json-out`` (the stand-in `vllm serve`) writes the header every record has and its served
    check under ``serve``, as a parity record holds one; ``records check`` reads it, not as a record no writer makes
    (issue 47, 2026-12-06e: at the top level, ``vllm serve``'s command list and no header made it invalid)."""
    from sparse_mla import cli
    from sparse_mla.diagnose.probe import load_vllm_extensions
    from sparse_mla.workbook import proof

    load_vllm_extensions()   # vLLM's CUDA platform rules (the default indexer) importable without the driver
    _fake_vllm_on_path(tmp_path, monkeypatch)
    out = tmp_path / "served.json"
    argv = ["launch", "--model", str(ckpt), "--serve", "--prompt-lengths", "16", "--max-tokens", "2",
            "--json-out", str(out)]
    monkeypatch.setattr(sys, "argv", ["sparse-mla", *argv])       # the header's command is the process's own
    assert cli.main(argv) == 0
    rec = json.loads(out.read_text())
    assert rec["environment"]["command"].startswith("sparse-mla launch") and rec["serve"]["token_ids"]
    [v] = proof.check([str(out)])
    assert v.status != "invalid", v.line()       # unproven: "no engine run" (a served check alone proves no parity)


@pytest.mark.parametrize("config, method", [
    ({}, None), ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, "fp8"),
    ({"text_config": {"quantization_config": {"quant_method": "fp8"}}}, "fp8"), ({"quantization_config": "x"}, None),
])
def test_a_folder_asks_the_quantization_its_config_declares(tmp_path, config, method):
    """Breaker round 19 (R19-1): the ``ran`` block of a folder's engine is held to the folder's own quantization
    method (vLLM loads a block-fp8 DeepSeek-V3.2 as ``fp8`` unasked; a bf16 folder loaded as fp8 is other weights)."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "glm_moe_dsa", **config}))
    assert launch.weights_asked(tmp_path) == {"format": "safetensors", "file": None, "load_format": None,
                                              "quantization": method}
    assert launch.folder_quantization(tmp_path / "absent") is None
