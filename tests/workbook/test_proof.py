"""``sparse-mla records check``: verdicts on records made here (a fresh header, ``ran`` blocks as the engine writes
them) and on the committed ones (CI runs the check on ``results/``)."""
import json
import math
from pathlib import Path

import pytest

from sparse_mla import cli
from sparse_mla.records import environment
from sparse_mla.workbook import proof, records_cli

RAN = {"capability": "9.0", "triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm90"]},
       "indexer": {"triton": 0, "deepgemm": 8}, "attention": {"TRITON_MLA_SPARSE": 4}}


#: What launch asks for a checkpoint folder (engine.weights_asked) and what an engine that loaded it reports.
FOLDER = {"format": "safetensors", "file": None, "load_format": None, "quantization": None}
FOLDER_LOADED = {"load_format": "auto", "quantization": None, "gguf_adapter": None}


def command(*backends: str) -> str:
    """The ``sparse-mla launch`` command line of a parity run of ``backends`` (``records check`` holds a record's runs
    to it: :mod:`sparse_mla.workbook.commands`); none: one engine's."""
    if not backends:
        return "sparse-mla launch --model /tmp/ck --backend TRITON_MLA_SPARSE"
    return f"sparse-mla launch --model /tmp/ck --parity --eager-only --no-serve --backends {','.join(backends)}"


def record(**run_changes):
    env = environment(command("TRITON_MLA_SPARSE"))
    env.setdefault("vllm", "0.26.0")
    env.update(gpu="NVIDIA H200", capability="9.0")   # what the GPU's process reads; a proven record names both
    if env["revision"].startswith("unknown"):
        env["revision"] = "0" * 40                  # a checkout without git (the header field exists either way)
    run = {"run": "TRITON_MLA_SPARSE", "backend_requested": "TRITON_MLA_SPARSE", "indexer": "vllm", "ran": RAN,
           **run_changes}
    return {"environment": env, "runs": {"TRITON_MLA_SPARSE": run}}


def verdict(tmp_path, rec, name="r.json"):
    (tmp_path / name).write_text(rec if isinstance(rec, str) else json.dumps(rec))
    [v] = proof.check([str(tmp_path / name)])
    return v


def test_a_record_whose_ran_matches_its_request_is_proven(tmp_path):
    v = verdict(tmp_path, record())
    assert v.status == "proven", v.line()


@pytest.mark.parametrize("changes,status,reason", [
    ({"simulated": {"capability": "8.0"}}, "invalid", "capability: asked 8.0, vLLM saw 9.0"),
    ({"indexer": "TRITON_DSA_INDEXER", "run": "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER"}, "invalid",
     "the Triton indexer made 0 calls, DeepGEMM 8"),
    # the Triton indexer asked, one call of it beside vLLM's 317: DeepGEMM ran the engine's indexer
    ({"indexer": "TRITON_DSA_INDEXER", "run": "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER",
      "ran": {**RAN, "indexer": {"triton": 1, "deepgemm": 317}}}, "invalid",
     "the Triton indexer made 1 calls, DeepGEMM 317"),
    # a DSA engine in which no indexer ran
    ({"ran": {**RAN, "indexer": {"triton": 0, "deepgemm": 0}}}, "invalid", "the Triton indexer made 0 calls, DeepGEMM 0"),
    # a GGUF asked (the record's checkpoint), loaded by vllm-gguf-plugin's default adapter
    ({"checkpoint": {"format": "gguf", "load_format": "gguf"},
      "ran": {**RAN, "weights": {"load_format": "gguf", "gguf_adapter": "DeepseekV2GGUFAdapter"}}}, "invalid",
     "a GGUF asked, the engine's weights adapter was DeepseekV2GGUFAdapter"),
    ({"backend_requested": "TRITON_MLA_SPARSE_TURBO"}, "invalid", "backend 'TRITON_MLA_SPARSE_TURBO' is no vLLM backend"),
    ({"ran": {**RAN, "attention": {"MAGIC_MLA": 4}}, "backend_requested": "auto"}, "invalid",
     "backend 'MAGIC_MLA' is no vLLM backend"),
    ({"indexer": "FAST_INDEXER"}, "invalid", "indexer 'FAST_INDEXER' is neither"),
    ({"ran": {**RAN, "attention": {"FLASH_ATTN_MLA_SPARSE": 4}}}, "invalid", "attention: asked TRITON_MLA_SPARSE"),
    ({"ran": None}, "invalid", "no ran block: nothing was read"),
    # round 17: a kernel no revision of ours has (B4); Triton indexer calls with none of its kernels compiled (c2_09r)
    ({"ran": {**RAN, "triton_targets": {**RAN["triton_targets"], "attention._no_such_kernel": ["sm90"]}}}, "invalid",
     "triton_targets names 'attention._no_such_kernel', no Triton kernel of ours"),
    ({"indexer": "TRITON_DSA_INDEXER", "run": "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER",
      "ran": {**RAN, "indexer": {"triton": 8, "deepgemm": 0}}}, "invalid",
     "triton_targets: 8 Triton indexer calls, none of its kernels was compiled"),
    # round 19 (R19-1): a folder asked, other weights loaded -- vLLM's random weights, a .pt load, an online fp8
    ({"checkpoint": FOLDER, "ran": {**RAN, "weights": {**FOLDER_LOADED, "load_format": "dummy"}}}, "invalid",
     "weights: a safetensors checkpoint asked (quantization None), the engine loaded {'load_format': 'dummy'"),
    ({"checkpoint": FOLDER, "ran": {**RAN, "weights": {**FOLDER_LOADED, "load_format": "pt"}}}, "invalid",
     "the engine loaded {'load_format': 'pt'"),
    ({"checkpoint": FOLDER, "ran": {**RAN, "weights": {**FOLDER_LOADED, "quantization": "fp8"}}}, "invalid",
     "a safetensors checkpoint asked (quantization None), the engine loaded {'load_format': 'auto', 'quantization': "
     "'fp8'"),
    # ... where the folder's config declares fp8 (launch asks it: engine.folder_quantization), a bf16 load is other
    ({"checkpoint": {**FOLDER, "quantization": "fp8"}, "ran": {**RAN, "weights": FOLDER_LOADED}}, "invalid",
     "a safetensors checkpoint asked (quantization 'fp8'), the engine loaded"),
    # round 17's B3: the tail of a log the writer keeps only for an engine that failed, in a run with no error
    ({"log_tail": "RuntimeError: CUDA error: an illegal memory access was encountered"}, "invalid",
     "accepted: a log_tail only beside an error"),
])
def test_a_ran_that_contradicts_the_request_is_invalid(tmp_path, changes, status, reason):
    v = verdict(tmp_path, record(**changes))
    assert v.status == status and reason in v.reason, v.line()


@pytest.mark.parametrize("asked, loaded", [({}, {}), ({}, {"load_format": "safetensors"}),
                                           ({"quantization": "fp8"}, {"quantization": "fp8"})])
def test_a_folder_loaded_as_asked_is_proven(tmp_path, asked, loaded):
    """vLLM's default load format (``auto``) or ``safetensors``, with the quantization the folder's config declares."""
    v = verdict(tmp_path, record(checkpoint={**FOLDER, **asked}, ran={**RAN, "weights": {**FOLDER_LOADED, **loaded}}))
    assert v.status == "proven", v.line()


def test_header_gaps(tmp_path):
    rec = record()
    del rec["environment"]["revision"]
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and v.reason == "no revision", v.line()     # claims proof: the header must be whole
    del rec["runs"]["TRITON_MLA_SPARSE"]["ran"]
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and v.reason == "no ran block in TRITON_MLA_SPARSE; no revision", v.line()


def test_unreadable_and_partial_records(tmp_path):
    assert verdict(tmp_path, "{not json").status == "invalid"
    rec = record()
    rec["runs"]["FLASHMLA_SPARSE"] = {"backend_requested": "FLASHMLA_SPARSE", "error": "exit 1"}
    rec["environment"]["command"] = command("TRITON_MLA_SPARSE", "FLASHMLA_SPARSE")
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and "1 engine(s) failed" in v.reason, v.line()
    del rec["runs"]["TRITON_MLA_SPARSE"]                                   # every engine died: said so, not "no ran"
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and v.reason == "1 engine(s) failed", v.line()
    rec["runs"]["TRITON_MLA_SPARSE"] = dict(record()["runs"]["TRITON_MLA_SPARSE"])
    del rec["runs"]["TRITON_MLA_SPARSE"]["ran"]                            # one died, one ran without a ran block
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and v.reason == "no ran block in TRITON_MLA_SPARSE; 1 engine(s) failed", v.line()
    (tmp_path / "summary.json").write_text(json.dumps({"notebooks": []}))
    [s] = proof.check([str(tmp_path / "summary.json")])                       # a generated summary is no record
    assert s.status == "skipped"


def test_the_command_exits_1_on_an_invalid_record_and_names_it(tmp_path, capsys):
    (tmp_path / "good.json").write_text(json.dumps(record()))
    assert cli.main(["records", "check", str(tmp_path)]) == 0
    (tmp_path / "bad.json").write_text(json.dumps(record(simulated={"capability": "8.6"})))
    assert cli.main(["records", "check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "bad.json: invalid: TRITON_MLA_SPARSE: capability: asked 8.6" in out and "good.json: proven" in out
    assert cli.main(["records", "check", str(tmp_path / "nope")]) == 2
    assert "records path" in capsys.readouterr().err


def test_the_committed_records(capsys):
    """CI's check of ``results/``: none invalid; the 2026-12-01 engine records, made before ``ran``, unproven; the
    H200 indexer-in-engine record of 2026-12-02 proven."""
    assert cli.main(["records", "check", str(Path(__file__).resolve().parents[2] / "results")]) == 0
    out = capsys.readouterr().out
    for name in ("launch_h200_simulated_sm80.json", "launch_h200_fp8_ds_mla.json"):
        assert f"/results/h200/{name}: unproven: no ran block" in out, out
    assert "/results/h200/launch_h200_triton_indexer_fork_failure.json: unproven: no ran block in serve; 3 engine(s) " \
           "failed" in out, out
    # the split Q4_K_M GGUF: both engines died on 2026-12-05 (empty LM head), ran after the fix on 2026-12-05b
    assert "/results/h200/launch_h200_gguf_q4_k_m_split.json: proven" in out, out
    # its engines ran and agreed, but its first-token criterion died of memory: the record says so, so unproven
    assert "/results/h200/launch_h200_long_prompts.json: unproven: it says it failed: first-token criterion: " \
           "OutOfMemoryError" in out, out
    assert "/results/h200/launch_h200_ran_indexer.json: proven" in out, out
    # GLM-5.3-Flash's comparisons (H100, 2026-12-06d): numbers against the float64 reference, written before the
    # criterion; those of 2026-12-06f (9.0, both engines; ours at a simulated 8.0) proven by it
    assert "/results/h100-80gb-hbm3/sessions/2026-12-06d/lease2/glm5next_parity_h100-80gb-hbm3_vllm033.json: " \
           "unproven: a GLM-5.3-Flash comparison" in out, out
    for name in ("glm5next_parity_h100-80gb-hbm3_vllm033.json", "glm5next_parity_h100-80gb-hbm3_vllm033_sim80.json"):
        assert f"/results/h100-80gb-hbm3/{name}: proven: " in out, out
    assert "glm5next_parity_h100-80gb-hbm3_vllm033_flashmla.json: unproven: 1 engine(s) failed: TRITON_MLA_SPARSE" \
        in out, out


def test_a_glm5next_comparison_without_a_criterion_is_unproven():
    """A record of ``tools/gpu/glm5next_parity.py`` (its model's config under ``model_config``, or ``checkpoint`` as
    on 2026-12-06) written before its first-token criterion is unproven, whatever its runs say."""
    rec = json.loads((Path(__file__).resolve().parents[2] / "results" / "h100-80gb-hbm3" /
                      "sessions/2026-12-06d/lease2/glm5next_parity_h100-80gb-hbm3_vllm033.json").read_text())
    assert proof.judge("x.json", rec).status == "unproven"
    renamed = {**{k: v for k, v in rec.items() if k != "checkpoint"}, "model_config": rec["checkpoint"]}
    assert proof.judge("x.json", renamed).status == "unproven"
    other = {**renamed, "model_config": {**rec["checkpoint"], "model_type": "glm_moe_dsa"}}
    assert proof.judge("x.json", other).status == "invalid"     # judged as a launch record: GLM-5's rules


GLM5NEXT_RUN = "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.9"


def _glm5next_record(sigma: float = 0.02) -> dict:
    """The H100's simulated-8.9 GLM-5.3-Flash run (2026-12-06d) as the tool writes it now: ``ran`` with the KDA and
    KPool-tail layers under ``other_layers``, and a first-token criterion over its two prompts with the spread
    ``sigma`` (0.02: the 48-token prompt's gap 0.317 decides, the 900-token prompt's 0.033 does not)."""
    import math

    from sparse_mla.kernels.error_bounds import P_FAIL
    from sparse_mla.launch.first_token import RULE
    from sparse_mla.launch.forward_rounding import VLLM_BF16

    rec = json.loads((Path(__file__).resolve().parents[2] / "results" / "h100-80gb-hbm3" /
                      "glm5next_parity_h100-80gb-hbm3_vllm033_simulated.json").read_text())
    run = dict(rec["runs"][GLM5NEXT_RUN])
    att = run["ran"]["attention"]
    run["ran"] = {**run["ran"], "attention": {"TRITON_MLA_SPARSE": att["TRITON_MLA_SPARSE"]},
                  "other_layers": {n: c for n, c in att.items() if n != "TRITON_MLA_SPARSE"}}
    run["ran_contradictions"] = []
    ref = rec["reference"][GLM5NEXT_RUN]
    tol = math.sqrt(2.0 * math.log(4.0 / P_FAIL)) * math.sqrt(2.0) * sigma
    per = [{"prompt_len": e["prompt_len"], "reference_argmax": e["first_token"]["reference_argmax"],
            "reference_second": 0, "gap": e["first_token"]["reference_top2_gap"], "tolerance": tol, "sigma": sigma,
            "decisive": e["first_token"]["reference_top2_gap"] > tol,
            "first_tokens": {GLM5NEXT_RUN: g["token_ids"][0]}} for e, g in zip(ref, run["generations"])]
    crit = {"rule": RULE, "arithmetic": VLLM_BF16.__dict__, "samples": 16, "per_prompt": per,
            "decisive_prompts": sum(p["decisive"] for p in per), "failures": []}
    env = {**rec["environment"], "command": rec["environment"]["command"].replace(
        "TRITON_MLA_SPARSE@12.0,", "")}                   # the run that failed left out, as if never asked
    return {**{k: v for k, v in rec.items() if k not in ("checkpoint", "environment")}, "environment": env,
            "model_config": rec["checkpoint"], "runs": {GLM5NEXT_RUN: run}, "reference": {GLM5NEXT_RUN: ref},
            "engine_agreement": {}, "first_token_criterion": crit}      # one run: none to compare with the first


def test_a_glm5next_comparison_is_proven_by_its_criterion():
    rec = _glm5next_record()
    assert [p["decisive"] for p in rec["first_token_criterion"]["per_prompt"]] == [True, False]
    v = proof.judge("x.json", rec)
    assert v.status == "proven", v.line()
    assert "1 decisive prompt" in v.reason


def _wrong_first_token(rec: dict, failures: list[str]) -> dict:
    """``rec`` with the decisive prompt's first token another (generations and criterion alike)."""
    import copy

    rec = copy.deepcopy(rec)
    gen = rec["runs"][GLM5NEXT_RUN]["generations"][0]
    top, old = gen["first_top_logprobs"], str(gen["token_ids"][0])
    gen["token_ids"][0] += 1                          # vLLM's greedy choice: its first-step log-prob the highest
    top[old], top[str(gen["token_ids"][0])] = top.get(str(gen["token_ids"][0]), min(top.values())), top[old]
    rec["first_token_criterion"]["per_prompt"][0]["first_tokens"][GLM5NEXT_RUN] = gen["token_ids"][0]
    rec["first_token_criterion"]["failures"] = failures
    ref = rec["reference"][GLM5NEXT_RUN][0]          # the reference's view of it, as the tool would write it
    ref["steps"][0].update(token=gen["token_ids"][0], regret=0.5)
    ref.update(max_regret=max(s["regret"] for s in ref["steps"]), first_divergence=0,
               reference_gap_at_divergence=ref["reference_greedy"]["top2_gaps"][0])
    ref["first_token"]["vllm"] = gen["token_ids"][0]
    return rec


def _edit(rec: dict, path: str, value) -> dict:
    """``rec`` with the value at the dotted ``path`` (``RUN`` for the run's name, which has dots) replaced."""
    import copy

    rec = copy.deepcopy(rec)
    *keys, last = [GLM5NEXT_RUN if k == "RUN" else k for k in path.split(".")]
    d = rec
    for k in keys:
        d = d[int(k)] if isinstance(d, list) else d[k]
    d[int(last) if isinstance(d, list) else last] = value
    return rec


def _layer_backend(r: dict, backend: str) -> dict:
    import copy

    r = copy.deepcopy(r)
    r["runs"][GLM5NEXT_RUN]["layers"]["model.layers.3.self_attn.attn"]["backend"] = backend
    return r


def _nan_top(r: dict) -> dict:
    import copy

    r = copy.deepcopy(r)
    top = r["runs"][GLM5NEXT_RUN]["generations"][0]["first_top_logprobs"]
    top[next(iter(top))] = float("nan")
    return r


def _not_greedy(r: dict) -> dict:
    """``r`` with another token's first-step log-prob above the chosen one's."""
    import copy

    r = copy.deepcopy(r)
    g = r["runs"][GLM5NEXT_RUN]["generations"][0]
    other = next(k for k in g["first_top_logprobs"] if k != str(g["token_ids"][0]))
    g["first_top_logprobs"][other] = g["logprobs"][0] + 1.0
    return r


@pytest.mark.parametrize("make, status, needle", [      # issue 47, breaker round 8 (2026-12-06e)
    (lambda r: _edit(r, "first_token_criterion.per_prompt.1.gap", 0.5), "invalid", "gap"),
    (lambda r: _edit(r, "reference.RUN.0.steps.0.reference_argmax", 5), "invalid", "argmax"),
    (lambda r: _edit(r, "reference.RUN.0.steps.1.regret", 3.0), "invalid", "regret"),
    (lambda r: _edit(r, "reference.RUN.0.first_divergence", 0), "invalid", "first_divergence"),
    (lambda r: _edit(r, "reference.RUN.0.steps.0.abs_diff", 4.0), "invalid", "abs_diff"),
    (lambda r: _edit(r, "reference.RUN.0.max_abs_logprob_diff", 0.0), "invalid", "max_abs_logprob_diff"),
    (lambda r: _edit(r, "reference.RUN.0.first_token.vllm", 999), "invalid", "first_token.vllm 999"),
    (lambda r: _edit(r, "reference.RUN.0.first_token.reference_top2_gap", 0.9), "invalid", "reference_top2_gap"),
    (lambda r: _edit(r, "reference.RUN.0.reference_greedy.token_ids.0", 5), "invalid", "argmax"),
    (lambda r: _layer_backend(r, "FLASHMLA_SPARSE"), "invalid", "layers name"),
    (lambda r: _edit(r, "runs.RUN.ran.other_layers", {"GDN_ATTN": 60, "KPOOL_TAIL": 2}), "invalid", "layers name"),
    (lambda r: _edit(r, "runs.RUN.simulated_capability", "8.0"), "invalid", "not the request"),
    (lambda r: _edit(r, "environment.vllm", "0.26.0"), "invalid", "no vLLM line with GLM-5.3-Flash"),
    (lambda r: _edit(r, "model_config.index_topk", 100), "invalid", "index_topk 100"),
    (lambda r: _edit(r, "model_config.num_hidden_layers", 2), "invalid", "num_hidden_layers is 2"),
    (lambda r: _edit(r, "runs.RUN.status", "failed"), "invalid", "no writer writes the key 'status'"),
    (lambda r: _edit(r, "banana", 1), "invalid", "no writer writes the key 'banana'"),
    (lambda r: _edit(r, "failures", ["engine died"]), "invalid", "no writer writes the key 'failures'"),
    (lambda r: _edit(r, "runs.RUN.generations.0.logprobs", [-1.0]), "invalid", "log-probs"),
    (lambda r: _edit(r, "max_tokens", 4), "invalid", "max_tokens is 4"),
    (_nan_top, "unproven", "NaN"),
    (lambda r: _edit(r, "environment.command", r["environment"]["command"].replace("48,900", "48,900,1000")),
     "invalid", "--prompt-lengths [48, 900, 1000]"),
    (lambda r: _edit(r, "environment.command", r["environment"]["command"].replace("--runs ", "--runs auto,")),
     "invalid", "its command's --runs"),
    (lambda r: _edit(r, "environment.command", "python3 other.py"), "invalid", "is not tools/gpu/glm5next_parity"),
    (lambda r: _edit(r, "runs.RUN.stderr", "Traceback ..."), "invalid", "stderr beside no error"),
    (lambda r: _edit(r, "first_token_criterion.verdict", "fail"), "invalid", "first_token_criterion holds"),
    (lambda r: _edit(r, "first_token_criterion.rule", "anything goes"), "invalid", "rule 'anything goes'"),
    (lambda r: _edit(r, "runs.RUN.ran.weights.load_format", "gguf"), "invalid", "ran.weights"),
    # the header's SMs not its GPU's, a first step greedy sampling does not make (engine records' g21, g28)
    (lambda r: _edit(r, "environment.sm_count", 78), "invalid", "environment.sm_count 78 on a 'NVIDIA H100 80GB "
                                                                "HBM3'; accepted: 132"),
    (_not_greedy, "invalid", "below their highest"),
])
def test_the_breakers_round_eight_on_glm5next_comparisons(make, status, needle):
    v = proof.judge("x.json", make(_glm5next_record()))
    assert v.status == status and needle in v.reason, v.line()


@pytest.mark.parametrize("make, status, needle", [
    (lambda r: _wrong_first_token(r, ["first token: wrong"]), "unproven", "first token: wrong"),
    (lambda r: _wrong_first_token(r, []), "invalid", "is decisive and"),
    (lambda r: _edit(r, "first_token_criterion.per_prompt.0.tolerance", 0.5), "invalid", "tolerance 0.5"),
    (lambda r: _edit(r, "first_token_criterion.per_prompt.1.decisive", True), "invalid", "decisive True"),
    (lambda r: _edit(r, "first_token_criterion.per_prompt.0.reference_argmax", 7), "invalid", "reference_argmax 7"),
    (lambda r: _edit(r, "first_token_criterion.decisive_prompts", 2), "invalid", "decisive_prompts 2"),
    (lambda r: _edit(r, "first_token_criterion.arithmetic.store", 1e-7), "invalid", "arithmetic"),
    (lambda r: _edit(r, "first_token_criterion", {"error": "OutOfMemoryError: x"}), "unproven", "OutOfMemoryError"),
    (lambda r: {k: v for k, v in r.items() if k != "first_token_criterion"}, "unproven", "without first_token_crit"),
    (lambda r: _edit(r, "runs.RUN.ran.indexer", {"triton": 0, "deepgemm": 18}), "invalid", "indexer"),
    (lambda r: _edit(r, "runs.RUN.ran.capability", "9.0"), "invalid", "capability"),
    # the device an engine read against the header's GPU (issue 47 round 7, a49), the header's GPU one of ours
    (lambda r: _edit(r, "runs.RUN.ran.device_capability", "12.0"), "invalid",
     "is not the device the engine read (12.0)"),
    (lambda r: _edit(r, "environment.gpu", "Tesla V100-SXM2-32GB"), "invalid", "is none of ours"),
    # a preset's name, not the device's (issue 47 round 12, b43)
    (lambda r: _edit(r, "environment.gpu", "h100"), "invalid", "the header's GPU 'h100' is none of ours"),
    (lambda r: _edit(r, "runs.RUN.ran_contradictions", ["x"]), "unproven", "ran_contradictions"),
    (lambda r: _edit(r, "runs.RUN.error", "RuntimeError: died"), "unproven", "1 engine(s) failed"),
    (lambda r: _edit(r, "reference", {"error": "OOM"}), "unproven", "reference: OOM"),
    (lambda r: _edit(r, "runs.RUN.backend_requested", "NOPE"), "invalid", "NOPE"),
    (lambda r: {**r, "runs": {"TRITON_MLA_SPARSE@12.0": {**r["runs"][GLM5NEXT_RUN], "indexer": "vllm",
                                                         "simulated_capability": "12.0"}}},
     "unproven", "test neither GPU"),
])
def test_a_glm5next_comparison_that_says_otherwise_is_not_proven(make, status, needle):
    v = proof.judge("x.json", make(_glm5next_record()))
    assert v.status == status and needle in v.reason, v.line()


_GLM_DIR = Path(__file__).resolve().parents[2] / "results" / "h100-80gb-hbm3"
#: The committed proven GLM-5.3-Flash comparisons (two engines; one simulating 8.0), read once.
_GLM_PROVEN = {n: (_GLM_DIR / f"glm5next_parity_h100-80gb-hbm3_vllm033{n}.json").read_text() for n in ("", "_sim80")}
_FM, _TM, _SIM = "FLASHMLA_SPARSE", "TRITON_MLA_SPARSE", "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.0"


@pytest.mark.parametrize("gpu, sm_count, status, needle", [
    # a MIG slice: the driver's name of its GPU and profile, its own SMs (issue 47 round 13: r72 was invalid)
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 60, "proven", "first-token criterion"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", 16, "proven", "first-token criterion"),
    ("NVIDIA H100 80GB HBM3 MIG 7g.80gb", 133, "invalid",
     "environment.sm_count 133 on a 'NVIDIA H100 80GB HBM3 MIG 7g.80gb'; accepted: 1 to 132 (a MIG slice"),
    ("NVIDIA H100 80GB HBM3 MIG", 60, "invalid", "environment.sm_count 60 on a 'NVIDIA H100 80GB HBM3 MIG'; "
                                                 "accepted: 132 (its SMs"),        # no profile: no slice's name
])
def test_a_header_written_on_a_mig_slice_is_judged_by_its_whole_gpu(gpu, sm_count, status, needle):
    rec = json.loads(_GLM_PROVEN["_sim80"])
    rec["environment"].update(gpu=gpu, sm_count=sm_count)
    v = proof.judge("x.json", rec)
    assert v.status == status and needle in v.reason, v.line()
_MLA_LAYER = "model.layers.3.self_attn.attn"


def _set(r: dict, path: list, value) -> dict:
    d = r
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return r


@pytest.mark.parametrize("which, edit, needle", [     # issue 47, breaker round 9 (j04-j33, z15, z17)
    ("", lambda r: _set(r, ["engine_agreement", _TM, "per_prompt", 0, "identical"], False),
     f"engine_agreement.{_TM}: not what the generations of '{_TM}' and the first run '{_FM}' give"),
    ("", lambda r: _set(r, ["engine_agreement", _TM, "all_identical"], False), f"engine_agreement.{_TM}: not what"),
    ("", lambda r: _set(r, ["engine_agreement", _FM], r["engine_agreement"][_TM]), f"engine_agreement.{_FM}: not"),
    ("", lambda r: r.pop("engine_agreement"), "engine_agreement None, the tool writes"),
    ("", lambda r: _set(r, ["reference", _TM, 2, "reference_greedy", "top2_gaps", 3], -0.1),
     "top2_gaps [0.70"),
    ("", lambda r: _set(r, ["runs", _TM, "layers", _MLA_LAYER, "kv_cache_dtype"], "fp8"),
     f"layer {_MLA_LAYER} has KV dtype 'fp8', the run asked 'auto'"),
    ("", lambda r: _set(r, ["runs", _TM, "simulated"], {"capability": "8.0"}),
     f"{_TM}: simulated {{'capability': '8.0'}} beside simulated_capability None"),
    ("_sim80", lambda r: _set(r, ["runs", _SIM, "simulated", "capability"], "8.9"),
     "beside simulated_capability '8.0'"),
    ("_sim80", lambda r: r["runs"][_SIM].pop("simulated"), "simulated None beside simulated_capability '8.0'"),
    ("", lambda r: _set(r, ["model_config", "layer_types", 0], "indexed_attention"),
     "MLA attention in decoder layers [3, 7], the model's layer_types make [0, 3, 7] MLA"),
    ("", lambda r: _set(r, ["runs", _TM, "layers", _MLA_LAYER, "mla"], False),
     f"{_TM}: layers give attention {{'{_TM}': 1}} (by backend and mla flag), its ran counts {{'{_TM}': 2}}"),
    # our backend's impl on any vLLM line (z16), token ids below the model's vocab (z18)
    ("", lambda r: _set(r, ["runs", _TM, "layers", _MLA_LAYER, "impl"], "FlashMLASparseImpl"),
     "names impl 'FlashMLASparseImpl' beside backend 'TRITON_MLA_SPARSE'; accepted: 'TritonMLASparseImpl'"),
    ("", lambda r: _set(r, ["runs", _TM, "generations", 1, "first_top_logprobs", "50000"], -30.0),
     "generation 1 names token 50000; accepted: ids below the model's vocab_size 2048"),
    ("", lambda r: _set(r, ["runs", _TM, "generations", 0, "token_ids", 3], 2048), "names token 2048"),
])
def test_a_glm5next_comparisons_figures_are_what_its_runs_give(which, edit, needle):
    """Round 9: engine_agreement recomputed with the tool's ``launch.engine.compare`` against the first run, the
    reference's top-2 gaps, each layer's side, KV dtype and place, a run's ``simulated`` block."""
    assert proof.judge("x.json", json.loads(_GLM_PROVEN[which])).status == "proven"
    rec = json.loads(_GLM_PROVEN[which])
    edit(rec)
    v = proof.judge("x.json", rec)
    assert v.status == "invalid" and needle in v.reason, v.line()


def _command(old: str, new: str):
    """An edit of the header command: ``old`` (at the end where empty) replaced by ``new``."""
    def edit(r: dict) -> None:
        cmd = r["environment"]["command"]
        assert old in cmd, old
        r["environment"]["command"] = cmd.replace(old, new) if old else cmd + new
    return edit


@pytest.mark.parametrize("edit, needle", [     # issue 47, breaker round 10 (g01-g09, g13); None: proven
    (_command("--max-tokens 8", "--max-tokens=8"), None),
    (_command("--runs FLASHMLA", "--runs=FLASHMLA"), None),
    (_command("--max-tokens 8", "--max-tok 8"), None),                  # an abbreviation argparse takes
    (_command("--max-tokens 8", "--max-tokens 08"), None),
    (_command("", " --banana 3"), "arguments tools/gpu/glm5next_parity.py does not take: ['--banana', '3']"),
    (_command("", " --max-tokens 16"), "max_tokens 8, its command's --max-tokens 16"),      # argparse: the last
    (_command("", " --prompt-lengths 48,900"), "its command's --prompt-lengths [48, 900]"),
    (_command("", " --runs TRITON_MLA_SPARSE"), "its command's --runs ['TRITON_MLA_SPARSE']"),
    (_command("python3 tools", "echo tools"), "is not tools/gpu/glm5next_parity.py's; accepted: `python3 tools/gpu/"),
    (_command("", " --engine FLASHMLA_SPARSE"), "child mode (--engine FLASHMLA_SPARSE)"),
    (_command("--max-tokens 8", "--max 8"), "ambiguous option: --max could match --max-tokens, --max-model-len"),
    (_command("48,160", "48,,160"), "--prompt-lengths '48,,160,560,900': the tool stops on it"),
], ids=["g01", "g02", "g03", "g13", "g04", "g05", "g06", "g07", "g08", "g09", "ambiguous", "bad_prompt_lengths"])
def test_a_glm5next_comparisons_command_is_read_by_the_tools_parser(edit, needle):
    """Round 10: the header command is read by the tool's own argparse parser
    (:func:`sparse_mla.workbook.glm5next_record.parsed_command`): its ``=`` forms, abbreviations and ``08`` are the
    tool's values; an option it does not take, the last of a repeated option, other first words than the tool
    writes and its child mode ``--engine`` are not the record's."""
    rec = json.loads(_GLM_PROVEN[""])
    edit(rec)
    v = proof.judge("x.json", rec)
    assert (v.status, needle is None or needle in v.reason) == ("proven" if needle is None else "invalid", True), \
        v.line()


@pytest.mark.parametrize("name, run", [("h200/launch_h200_simulated.json", "FLASHMLA_SPARSE"),
                                       ("h200/diagnose_vs_engine_h200.json", "fp8")])
def test_an_engine_runs_python_is_the_records(name, run):
    """Round 9 (n26, z04): each engine of a record is the same interpreter; a run's own header naming another Python
    is invalid, as another torch, Triton or CUDA is."""
    rec = json.loads((Path(__file__).resolve().parents[2] / "results" / name).read_text())
    assert proof.judge("x.json", rec).status == "proven"
    rec["runs"][run]["environment"]["python"] = "3.12.4" if rec["environment"]["python"] != "3.12.4" else "3.12.5"
    v = proof.judge("x.json", rec)
    assert v.status == "invalid" and f"{run}'s header: python '3.12." in v.reason, v.line()


def test_a_layers_prefill_is_a_vllm_mla_prefill():
    """Round 9 (n09): a layer's ``prefill`` is held to vLLM's MLA prefills as ``ran.mla_prefill``'s names are."""
    rec = json.loads((Path(__file__).resolve().parents[2] / "results/h200/launch_h200_simulated.json").read_text())
    layer = rec["runs"]["FLASHMLA_SPARSE"]["layers"]["model.layers.0.self_attn.attn"]
    if proof.known_prefills() is None:
        pytest.skip("the installed vLLM has no MLA prefill registry")
    assert layer["prefill"] and proof.judge("x.json", rec).status == "proven"
    layer["prefill"] = "BANANA"
    v = proof.judge("x.json", rec)
    assert v.status == "invalid" and "prefill 'BANANA' is no vLLM MLA prefill" in v.reason, v.line()


def _simulated() -> dict:
    return json.loads((Path(__file__).resolve().parents[2] / "results/h200/launch_h200_simulated.json").read_text())


_ATTN = "model.layers.0.self_attn.attn"


@pytest.mark.parametrize("edit, status, needle", [      # round 9's leftovers (n04, n05, n10, n17)
    (lambda r: r["runs"]["FLASHMLA_SPARSE"]["generations"][1]["token_ids"].__setitem__(5, 5000), "invalid",
     "FLASHMLA_SPARSE: generation 1 names token 5000; accepted: ids below the model's vocab_size 2048"),
    (lambda r: r["runs"]["FLASH_ATTN_MLA_SPARSE"]["generations"][0]["first_top_logprobs"].update({"99999": -30.0}),
     "invalid", "generation 0 names token 99999"),
    (lambda r: r["runs"]["FLASHMLA_SPARSE"]["layers"][_ATTN].update(layer="Attention"), "invalid",
     f"layers.{_ATTN}: class 'Attention' is vLLM's attention layer without MLA, on the MLA backend FLASHMLA_SPARSE"),
    (lambda r: r["runs"]["FLASHMLA_SPARSE"]["ran"].update(launch_plan={"9.0": {
        "from": "device", "sm_count": 132, "smem_per_block": 232448, "smem_per_sm": 233472}}), "invalid",
     "yet Triton generated none of our kernels in the engine (triton_targets empty)"),
])
def test_token_ids_layer_classes_and_launch_plans_are_the_engines(edit, status, needle):
    """A record that states its model's ``vocab_size`` (launch writes it since 2026-12-07) names no token at or past
    it; an MLA backend's layer is no vLLM attention class without MLA; a launch plan only beside our kernels."""
    rec = _simulated()
    rec["model"]["vocab_size"] = 2048                           # make-checkpoint's tokenizer (the record predates it)
    assert proof.judge("x.json", rec).status == "proven"
    edit(rec)
    v = proof.judge("x.json", rec)
    assert v.status == status and needle in v.reason, v.line()


_FA, _FM = "FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"


@pytest.mark.parametrize("edit, status, needle", [      # round 12's b09, b18, b24
    (lambda r: r["runs"][_FA]["throughput"].update(seconds=math.nan), "invalid",
     f"{_FA}: throughput.output_tokens_per_s 4315.6, not its 4096 generated tokens in nan s"),
    (lambda r: r["runs"][_FM].update(tp=True), "invalid", f"runs.{_FM}.tp is True; accepted: an integer"),
    (lambda r: r["reference_first_token"][_FM][0].update(max_abs_logprob_diff=math.nan), "unproven",
     f"reference_first_token.{_FM}[0].max_abs_logprob_diff is NaN (a NaN log-prob of the reference forward"),
])
def test_a_rate_of_unmeasured_seconds_a_runs_tp_and_a_nan_reference_difference(edit, status, needle):
    """A throughput's NaN seconds ("not measured") give no finite rate (the writer times every pass); a run's ``tp``
    is an integer as the record's is; a NaN reference difference is the writer's (``compare_reference`` keeps the
    reference forward's NaN log-prob) and a comparison that measured nothing: unproven."""
    rec = _simulated()
    assert proof.judge("x.json", rec).status == "proven"
    edit(rec)
    v = proof.judge("x.json", rec)
    assert v.status == status and needle in v.reason, v.line()


def test_the_launch_writer_states_the_vocab_size(tmp_path):
    from sparse_mla.launch.engine import model_block
    from sparse_mla.records.schema import MODEL_KEYS

    cfg = {"index_topk": 512, "num_attention_heads": 64, "num_hidden_layers": 2, "vocab_size": 2048, "other": 1}
    assert model_block(tmp_path / "ck", cfg) == {"path": "ck", "index_topk": 512, "num_attention_heads": 64,
                                                 "num_hidden_layers": 2, "num_nextn_predict_layers": None,
                                                 "vocab_size": 2048}
    assert "vocab_size" in MODEL_KEYS


def test_a_parity_record_with_its_keys_reordered_stays_proven():
    """Round 9 (n21): JSON does not fix the order of an object's keys; the parity record rewritten with sorted keys,
    or its runs in reverse order, is the same record (``parity_pairs`` pairs the runs in their order)."""
    text = (Path(__file__).resolve().parents[2] / "results/h200/launch_h200_simulated.json").read_text()
    rec = json.loads(json.dumps(json.loads(text), sort_keys=True))
    v = proof.judge("x.json", rec)
    assert v.status == "proven", v.line()
    rec["runs"] = dict(reversed(list(rec["runs"].items())))
    assert proof.judge("x.json", rec).status == "proven"
    rec["parity_pairs"][0]["all_identical"] = not rec["parity_pairs"][0]["all_identical"]   # a figure, no order
    assert "parity_pairs: not what its runs give" in proof.judge("x.json", rec).reason


def test_the_h200_record_of_the_old_simulation_is_invalid():
    """A real engine record (H200, 2026-12-02, ``results/h200/sessions/2026-12-02/GPU_RAN_2026-12-02.md``), kept here because it must fail
    the check: vLLM saw the simulated 8.0 while Triton compiled our kernels for sm90."""
    [v] = proof.check([str(Path(__file__).parent / "records" / "launch_h200_ran_simulated_sm80.json")])
    assert v.status == "invalid", v.line()
    assert "triton_targets: vLLM saw capability 8.0, Triton generated" in v.reason and "indexer: " not in v.reason, v.line()


@pytest.mark.parametrize("changes", [
    {"simulated": "8.0"}, {"simulated": ["8.0"]}, {"backend_requested": None}, {"backend_requested": ["X"]},
    {"ran": "yes"}, {"ran": [RAN]}, {"ran": {**RAN, "capability": None}}, {"ran": {**RAN, "capability": 9.0}},
    {"ran": {**RAN, "capability": "abc"}}, {"ran": {**RAN, "triton_targets": ["sm90"]}},
    {"ran": {**RAN, "triton_targets": {"attention.k": "sm90"}}}, {"ran": {**RAN, "indexer": "triton"}},
    {"ran": {**RAN, "indexer": {"triton": -5, "deepgemm": 0}}}, {"ran": {**RAN, "attention": ["TRITON_MLA_SPARSE"]}},
    {"ran": {k: v for k, v in RAN.items() if k != "indexer"}}, {"ran": {k: v for k, v in RAN.items() if k != "attention"}},
])
def test_malformed_ran_blocks_and_requests_are_invalid_never_proven(tmp_path, changes):
    v = verdict(tmp_path, record(**changes))
    assert v.status == "invalid", v.line()


@pytest.mark.parametrize("env,says", [(["a"], "environment is ['a']; accepted: an object"),
                                      (5, "environment is 5; accepted: an object"),
                                      ("text", "environment is 'text'; accepted: an object"),
                                      ({"command": 1, "date": True, "torch": [0]},
                                       "environment.date is True; accepted: a text (and 2 more)")])
def test_headers_of_other_types_are_invalid_naming_the_field_not_crashes(tmp_path, env, says):
    rec = record()
    rec["environment"] = env
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and v.reason == f"not a record as the project writes it: {says}", v.line()


def test_paths_and_files_that_are_not_records(tmp_path, capsys):
    import os

    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "deep.json").write_text("[" * 100000)
    os.mkfifo(tmp_path / "pipe.json")                      # skipped inside a folder (reading it would block)
    got = {Path(v.path).name: v for v in proof.check([str(tmp_path)])}
    assert set(got) == {"list.json", "deep.json"}
    assert got["list.json"].status == "skipped" and got["deep.json"].status == "invalid"
    assert cli.main(["records", "check", str(tmp_path / "pipe.json")]) == 2
    assert cli.main(["records", "check", ""]) == 2
    assert "neither a regular file nor a folder" in capsys.readouterr().err


def test_a_named_file_must_be_json_and_an_empty_folder_is_named(tmp_path, capsys):
    (tmp_path / "notes.md").write_text("# not a record\n")
    assert cli.main(["records", "check", str(tmp_path / "notes.md")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "notes.md' is not a JSON record" in err and "accepted:" in err
    (tmp_path / "empty").mkdir()
    assert cli.main(["records", "check", str(tmp_path / "empty")]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'empty'}: no JSON record in this folder\nno JSON records: " \
                                      f"nothing checked\n"


def test_counts_are_singular_for_one(tmp_path, capsys):
    (tmp_path / "good.json").write_text(json.dumps(record()))
    (tmp_path / "summary.json").write_text(json.dumps({"notebooks": []}))
    assert cli.main(["records", "check", str(tmp_path)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "1 run record: 1 proven, 0 unproven, 0 invalid; 1 other JSON file skipped (not run records)", last


def test_the_proof_table_gives_the_checks_verdicts(tmp_path):
    (tmp_path / "good.json").write_text(json.dumps(record()))
    (tmp_path / "bad.json").write_text(json.dumps(record(simulated={"capability": "8.6"})))
    md = records_cli.TABLES["proof"].render(["."], tmp_path)
    lines = md.split("\n")
    assert lines[2].startswith("| `bad.json` | invalid | TRITON_MLA_SPARSE: capability: asked 8.6"), md
    assert lines[3] == "| `good.json` | proven | 1 engine run(s) with ran |", md
    assert lines[-1] == ("2 run records under `.`: 1 proven, 0 unproven, 1 invalid (`sparse-mla records check` of the "
                         "same paths).")


def test_the_what_to_run_table_renders_what_starts_and_refuses_bad_input(tmp_path):
    """``records table what-to-run FILE MACHINE`` (the README's block): the rows of a written what-to-run table whose
    engine starts, ours first, with their serve lines; a file of other columns, a machine not in it, a missing file:
    one UserInputError each."""
    from sparse_mla.diagnose import what_to_run as wtr
    from sparse_mla.errors import UserInputError

    row = {c: "-" for c in wtr.COLUMNS}
    rows = [{**row, "machine": "8x M", "weights": "nvfp4", "kv_cache_dtype": "bfloat16", "vllm": v, "backend": b,
             "indexer": "DEEPGEMM", "engine_starts": s, "max_model_len": "4096", "serve": cmd}
            for v, b, s, cmd in (("stock", "none", "no", "-"), ("with the plugin", "TRITON_MLA_SPARSE", "yes",
                                                                   "vllm serve /m --max-model-len 4096"),
                                 ("stock", "OTHER", "host-dependent", "vllm serve /m"))]
    import pandas as pd

    pd.DataFrame(rows, columns=list(wtr.COLUMNS)).to_csv(tmp_path / "w.csv", index=False)
    md = records_cli.TABLES["what-to-run"].render(["w.csv", "8x", "M"], tmp_path)
    body = [ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(body) == 2 and "TRITON_MLA_SPARSE + DEEPGEMM | yes | `vllm serve /m --max-model-len 4096`" in body[0]
    assert "OTHER + DEEPGEMM | host-dependent" in body[1]
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00a,b\n")
    (tmp_path / "quote.csv").write_text('machine,"weights\n8x M,a\n')
    for args, says in ((["w.csv", "8x", "N"], "machine '8x N' is not in"), (["x.csv", "8x", "M"], "not a what-to-run"),
                       (["empty.csv", "8x", "M"], "'empty.csv' cannot be read as a what-to-run table \\(EmptyDataError"),
                       (["bin.csv", "8x", "M"], "'bin.csv' cannot be read as a what-to-run table \\(UnicodeDecodeError"),
                       (["quote.csv", "8x", "M"], "'quote.csv' cannot be read as a what-to-run table \\(ParserError"),
                       (["gone.csv", "8x", "M"], "is not a file"), (["w.csv"], "accepted: what-to-run FILE MACHINE")):
        with pytest.raises(UserInputError, match=says):
            records_cli.TABLES["what-to-run"].render(args, tmp_path)


@pytest.mark.parametrize("top,says", [
    ({"failures": ["first-token criterion: OutOfMemoryError"]}, "it says it failed: first-token criterion"),
    ({"interrupted": "interrupted during engine X"}, "it was interrupted"),
])
def test_a_record_that_says_it_failed_is_never_proven(tmp_path, top, says):
    """Every engine ran and matches its request, but the record itself says the run failed (a parity verdict, a time
    limit): unproven, with the record's own words. (A serving benchmark cut short, ``complete: false``:
    :func:`test_a_serving_benchmark_cut_short_is_never_proven`; an engine record holding ``complete``, a key no writer
    of its writes, is invalid since issue 47 round 7: ``tests/workbook/test_written.py``.)"""
    v = verdict(tmp_path, {**record(), **top})
    assert v.status == "unproven" and says in v.reason, v.line()


def test_a_serving_benchmark_cut_short_is_never_proven(tmp_path):
    rec = _committed(SERVE_RECORD)
    rec["complete"] = False
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and "not complete" in v.reason, v.line()


def test_an_engine_whose_writer_found_contradictions_is_never_proven(tmp_path):
    v = verdict(tmp_path, record(ran_contradictions=["weights: a GGUF asked, the adapter was another"]))
    assert v.status == "unproven" and "says what ran contradicts what was asked: weights" in v.reason, v.line()


@pytest.mark.parametrize("edit,says", [
    (lambda r: r["runs"]["TRITON_MLA_SPARSE"].update(throughput={"output_tokens_per_s": -1090.0}),
     "output_tokens_per_s"),
    (lambda r: r.update(throughput_tokens_per_s={"TRITON_MLA_SPARSE": -5.0}), "throughput_tokens_per_s"),
    (lambda r: r["environment"].update(date="yesterday"), "environment.date"),
    # issue 47, round 12 (b06): the header's date without its zone (records.environment writes +00:00)
    (lambda r: r["environment"].update(date="2026-12-04T20:06:11"), "environment.date is '2026-12-04T20:06:11'"),
    (lambda r: r["environment"].update(date="2026-12-04"), "environment.date is '2026-12-04'"),
    (lambda r: r["environment"].update(revision="HEAD~1"), "environment.revision"),
    (lambda r: r["environment"].update(gpu="  "), "environment.gpu"),
    (lambda r: r["environment"].update(capability="9"), "environment.capability"),
])
def test_figures_and_headers_no_writer_makes_are_invalid(tmp_path, edit, says):
    rec = record()
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_duplicated_keys_are_invalid(tmp_path):
    text = json.dumps(record())
    twice = text.replace('"runs": {', '"runs": {"TRITON_MLA_SPARSE": {"error": "exit 1"}, ', 1)
    v = verdict(tmp_path, twice)
    assert v.status == "invalid" and "'TRITON_MLA_SPARSE' appears twice" in v.reason, v.line()


def test_a_header_gpu_that_is_not_the_engines_device_is_invalid(tmp_path):
    rec = record(ran={**RAN, "device_capability": "8.0"})
    rec["environment"].update(gpu="NVIDIA H200", capability="9.0")
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and "NVIDIA H200, capability 9.0) is not the device the engine read (8.0)" in \
        v.reason, v.line()
    rec["runs"]["TRITON_MLA_SPARSE"]["ran"]["device_capability"] = "9.0"
    assert verdict(tmp_path, rec).status == "proven"


@pytest.mark.parametrize("edit,status,says", [
    # the record's own verdict in another shape than a list of lines: no writer makes it
    (lambda r: r.update(failures="parity: tokens differ"), "invalid", "failures"),
    # a failure line that merely reads like the interruption's, with no interruption
    (lambda r: r.update(failures=["parity run None"]), "unproven", "it says it failed: parity run None"),
    (lambda r: r.update(interrupted=False), "invalid", "interrupted"),
    (lambda r: r["runs"]["TRITON_MLA_SPARSE"].update(simulated_capability="8.0",
                                                     simulated={"capability": "8.9"}), "invalid",
     "simulated_capability '8.0'"),     # its key names no @8.0 (round 14, t40), and its simulated block 8.9
    # vLLM saw another GPU than the device, and no simulation was asked
    (lambda r: r["runs"]["TRITON_MLA_SPARSE"].update(ran={**RAN, "capability": "8.0", "device_capability": "9.0",
                                                          "triton_targets": {"attention.k": ["sm80"]}}),
     "invalid", "no simulation asked, vLLM saw 8.0 on a 9.0 device"),
    (lambda r: r["environment"].update(gpu="NVIDIA A100-SXM4-80GB"), "invalid", "is a a100 (capability 8.0)"),
    (lambda r: r["environment"].pop("capability"), "invalid", "no capability"),
    (lambda r: r["environment"].pop("gpu"), "invalid", "no gpu"),
    # a safetensors checkpoint asked, the engine loaded a GGUF
    (lambda r: (r.update(checkpoint={"format": "safetensors", "load_format": None}),
                r["runs"]["TRITON_MLA_SPARSE"].update(ran={**RAN, "weights": {"load_format": "gguf"}})),
     "invalid", "a safetensors checkpoint asked"),
    (lambda r: r.update(checkpoint={"load_format": 5}), "invalid", "checkpoint.load_format"),
    (lambda r: r["runs"]["TRITON_MLA_SPARSE"].update(run="FLASHMLA_SPARSE"), "invalid", "is not the request"),
    (lambda r: r["runs"]["TRITON_MLA_SPARSE"].update(ran={**RAN, "indexer": {"triton": 0, "deepgemm": 10 ** 30}}),
     "invalid", "deepgemm"),
    (lambda r: r["environment"].update(date="2999-01-01"), "invalid", "no later than today"),
    (lambda r: r["runs"]["TRITON_MLA_SPARSE"].update(layers={}, ran={**RAN, "speculative": {
        "drafts": 3, "draft_tokens": 9, "accepted_tokens": 2}}), "invalid", "speculative: none asked"),
    (lambda r: r["runs"]["TRITON_MLA_SPARSE"].update(error=""), "unproven", "1 engine(s) failed"),
])
def test_records_no_writer_makes_or_that_say_they_failed_are_never_proven(tmp_path, edit, status, says):
    """The breaker's round on revision 218d0ce: each edit of a proven record, and what the check must say."""
    rec = record()
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == status and says in v.reason, v.line()


def test_a_one_engine_records_served_check_counts(tmp_path):
    layer = {"layer": "MLAAttention", "backend": "TRITON_MLA_SPARSE", "impl": "TritonMLASparseImpl",
             "kv_cache_dtype": "auto", "prefill": None}
    rec = {**record()["runs"]["TRITON_MLA_SPARSE"], "environment": {**record()["environment"], "command": command()},
           "layers": {f"model.layers.{i}.self_attn.attn": layer for i in range(4)},
           "generations": [{"prompt_len": 48, "token_ids": [7] * 32, "logprobs": [-0.5] * 32}]}   # launch's defaults
    assert verdict(tmp_path, rec).status == "proven"
    rec["serve"] = {"backend_requested": "TRITON_MLA_SPARSE", "error": "server died"}
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and "1 engine(s) failed" in v.reason, v.line()


def test_table_paths_may_not_be_empty_and_tables_refuse_duplicate_keys(tmp_path):
    from sparse_mla.errors import UserInputError
    from sparse_mla.records import tables

    with pytest.raises(UserInputError, match="records path '' is empty"):
        records_cli.TABLES["proof"].render([""], tmp_path)
    (tmp_path / "v.json").write_text('{"environment": {"gpu": "G"}, "sweep": null}')
    with pytest.raises(UserInputError, match="sweep is None"):
        tables.render("kernel-sweep", ["v.json"], tmp_path)
    (tmp_path / "v.json").write_text('{"environment": {"gpu": "G"}, "environment": {"gpu": "H"}, "sweep": []}')
    with pytest.raises(UserInputError, match="'environment' appears twice"):
        tables.render("kernel-sweep", ["v.json"], tmp_path)


def test_a_record_with_a_byte_order_mark_or_broken_json_says_why(tmp_path):
    """Not a bare JSONDecodeError: the byte-order mark named, else the decoder's message and place."""
    (tmp_path / "bom.json").write_text("\ufeff{}", encoding="utf-8")
    (tmp_path / "cut.json").write_text('{"a": 1,\n')
    got = {Path(v.path).name: (v.status, v.reason) for v in proof.check([str(tmp_path)])}
    assert got["bom.json"] == ("invalid", "not readable JSON (it starts with a UTF-8 byte-order mark, which no writer "
                                          "of ours makes)")
    assert got["cut.json"][0] == "invalid" and got["cut.json"][1].startswith("not readable JSON (Expecting "), got
    assert "at line 2 column 1" in got["cut.json"][1]
    (tmp_path / "utf16.json").write_text('{"runs": {}}', encoding="utf-16")     # breaker round 16 (x26)
    [v] = proof.check([str(tmp_path / "utf16.json")])
    assert v.status == "invalid" and "it is not UTF-8 (" in v.reason and "accepted: UTF-8 JSON" in v.reason, v.line()


def test_a_file_larger_than_any_record_is_invalid_unread(tmp_path, monkeypatch):
    """A 1 GiB all-NUL ``huge.json`` was read whole (2.2 GB of memory) before it was called unreadable (issue 47,
    round 9, m03): its size is read first. A sparse file (no disk); reading it is made to fail the test."""
    from sparse_mla.workbook.chain import project_root

    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(1 << 30)
    read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda p, *a, **k: pytest.fail("read") if p == huge else read(p, *a, **k))
    [v] = proof.check([str(tmp_path)])
    assert (v.status, v.reason) == ("invalid", f"{1 << 30} bytes, larger than {proof.MAX_RECORD_MIB} MiB; accepted: a "
                                               f"record as the writers write them (at most {proof.MAX_RECORD_MIB} MiB)")
    largest = max(p.stat().st_size for p in (project_root() / "results").rglob("*.json"))
    assert largest * 20 < proof.MAX_RECORD_MIB << 20                       # the cap is well above every record


def _hours_before(date: str, hours: int) -> str:
    """A header date (``records.environment``'s form) ``hours`` earlier, in that form."""
    import datetime

    return (datetime.datetime.fromisoformat(date) - datetime.timedelta(hours=hours)).isoformat(timespec="seconds")


def _committed(name: str) -> dict:
    from sparse_mla.workbook.chain import project_root

    return json.loads((project_root() / "results" / "h200" / name).read_text())


GGUF_RECORD, SERVE_RECORD = "launch_h200_gguf_q8_0.json", "bench_serve_h200_8heads.json"
_T = "TRITON_MLA_SPARSE"


@pytest.mark.parametrize("name,edit,says", [
    # what the record says anywhere below its top level, and its top level's own keys
    (GGUF_RECORD, lambda r: r.setdefault("first_token_criterion", {}).update(failures=["x"]), "first_token_criterion"),
    # (keys no writer of an engine record writes at their level: invalid since issue 47 round 7)
    (GGUF_RECORD, lambda r: r.update(ran_contradictions=["attention: x"]),
     "no writer writes the key 'ran_contradictions' at the top level"),
    (GGUF_RECORD, lambda r: r.update(error="it died"), "no writer writes the key 'error' at the top level"),
    (GGUF_RECORD, lambda r: r.update(interrupted=""), "it was interrupted"),
    (GGUF_RECORD, lambda r: r["runs"][_T].update(failures=["x"]), f"no writer writes the key 'failures' at runs.{_T}"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0].update(failures=["x"]), "servers[0].failures"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0].update(error="died"), "servers[0].error"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["passes"][0].update(failures=["x"]), "passes[0].failures"),
    (SERVE_RECORD, lambda r: r.pop("complete"), "not complete (complete: absent)"),
    # a GGUF asked and loaded otherwise
    (GGUF_RECORD, lambda r: r["runs"][_T]["ran"]["weights"].update(quantization="fp8"), "quantization was 'fp8'"),
    (GGUF_RECORD, lambda r: [c.update(load_format=None) for c in (r["checkpoint"], *(v["checkpoint"] for v in
                                                                                     r["runs"].values()))],
     "checkpoint format 'gguf' with load_format"),
    # names: the runs' keys against their requests, the layers against ran
    (GGUF_RECORD, lambda r: r.update(runs=dict(zip(reversed(list(r["runs"])), r["runs"].values()))),
     "is not the request"),
    (GGUF_RECORD, lambda r: [v.update(backend="FLASHMLA_SPARSE") for v in r["runs"][_T]["layers"].values()
                             if v.get("layer") == "MLAAttention"], "layers name the backend"),
    # a run's own header, absurd counts
    (GGUF_RECORD, lambda r: r["runs"][_T].setdefault("environment", {}).update(date="2999-01-01"), "today"),
    (GGUF_RECORD, lambda r: r["environment"].update(date="1970-01-01"), "from 2025-01-01 on"),
    (GGUF_RECORD, lambda r: r.update(tp=0), "tp"),
    (GGUF_RECORD, lambda r: r["environment"].update(gpu_count=0), "gpu_count"),
])
def test_the_breakers_second_round_on_committed_records(tmp_path, name, edit, says):
    """Issue 47, the breaker's round on e1b48b2: edits of committed proven records (a GGUF parity run, a serving
    benchmark) that were called proven; none is now."""
    rec = _committed(name)
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status != "proven" and says in v.reason, v.line()


NGRAM_RECORD = "launch_h200_ngram.json"


def _completed(r, run: str, completed):
    """Repeat 1 of ``run`` completing ``completed`` requests (in vLLM's result, as vLLM or another writer wrote the
    number), the figures vLLM derives from it (its token totals and throughputs over the same duration: records check
    holds them to each other since issue 47 round 7), and what the writer derives from those: the pass's copy of the
    count, the run's summary and the verdict, and the agreements comparing that pass (no more requests than it
    completed)."""
    from sparse_mla.bench.serve import SUMMARY_METRICS, session_verdict, spread

    n = int(float(completed))
    res = r["repeats"][run][0]
    res.update(completed=completed, total_output_tokens=n * r["load"]["output_len"],
               total_input_tokens=round(res["total_input_tokens"] * n / res["num_prompts"]))
    res.update(request_throughput=n / res["duration"], output_throughput=res["total_output_tokens"] / res["duration"],
               total_token_throughput=(res["total_input_tokens"] + res["total_output_tokens"]) / res["duration"])
    res.update(max_concurrent_requests=min(res["max_concurrent_requests"], n),     # vLLM's peaks count completed
               max_output_tokens_per_s=min(res["max_output_tokens_per_s"], res["total_output_tokens"] + n))  # requests
    reps = [x for x in r["repeats"][run] if x is not None]
    r["runs"][run]["summary"].update({m: spread(x.get(m) for x in reps) for m in SUMMARY_METRICS})
    r["verdict"] = session_verdict(r)
    r["runs"][run]["passes"][0]["timed"]["completed"] = n
    for entry in (r["agreement_vs_baseline"][run], {"per_repeat": r["runs"][run]["agreement_across_repeats"]}):
        for e in entry["per_repeat"]:
            if e["repeat"] == 1 or e.get("against_repeat") == 1:
                e.update(compared=min(e["compared"], n), identical=min(e["identical"], n))
                if e["compared"] == e["identical"]:           # none differs: no first divergence
                    e.update(first_divergence_min=None, first_divergence_median=None)
        if "compared" in entry:
            entry.update({f: sum(e[f] for e in entry["per_repeat"]) for f in ("compared", "identical")})


def _ran(r, **changes):
    r["runs"][_T]["ran"].update(changes)


@pytest.mark.parametrize("name,edit,says", [
    # names no writer writes
    (GGUF_RECORD, lambda r: r["run_specs"].update(X=r["run_specs"][_T]), "run_specs name"),
    (GGUF_RECORD, lambda r: r["run_specs"][_T].update(backend_requested="FLASHMLA_SPARSE"), "not the run's"),
    (GGUF_RECORD, lambda r: _ran(r, indexer_cache={"MY_INDEXER": 2}), "indexer_cache: backend 'MY_INDEXER'"),
    (GGUF_RECORD, lambda r: _ran(r, mla_prefill={"NOT_A_PREFILL FA3": 2}), "no vLLM MLA prefill"),
    (GGUF_RECORD, lambda r: r["runs"][_T].update(attention_backends=["NOT_A_BACKEND"]), "is no vLLM backend"),
    (GGUF_RECORD, lambda r: r["environment"].update(vllm="99.1.0"), "no tested line"),
    (GGUF_RECORD, lambda r: r["environment"].update(vllm="banana"), "environment.vllm"),
    # figures no engine makes
    (GGUF_RECORD, lambda r: r["throughput_tokens_per_s"].update({_T: 1e300}), "tokens per second"),
    (GGUF_RECORD, lambda r: r["runs"][_T]["generations"][0]["logprobs"].__setitem__(0, 0.5), "log-probability"),
    (GGUF_RECORD, lambda r: _ran(r, attention={_T: 10 ** 15}), "up to 1024"),
    (GGUF_RECORD, lambda r: _ran(r, mla_prefill={"FLASH_ATTN FA3": 3}), "more than the 2 MLA layers"),
    (NGRAM_RECORD, lambda r: _ran(r, speculative={**r["runs"][_T]["ran"]["speculative"], "accepted_tokens": 10 ** 6}),
     "accepted_tokens <= draft_tokens"),
    # what ran against what was asked
    (GGUF_RECORD, lambda r: _ran(r, indexer={"triton": 0, "deepgemm": 1}), "1 calls for 2 indexer layers"),
    (GGUF_RECORD, lambda r: _ran(r, triton_binaries=["sm80"]), "ptxas assembled for ['sm80']"),
    (GGUF_RECORD, lambda r: r["runs"][_T].update(speculative=True), "speculative true without"),
    (GGUF_RECORD, lambda r: r.pop("reference_first_token"), "reference_first_token has []"),
])
def test_the_breakers_third_round_on_committed_records(tmp_path, name, edit, says):
    """Issue 47, what the breaker's round on e1b48b2 left proven: names no vLLM has, figures no engine makes, a run
    that contradicts what was asked, a reference comparison deleted. Each edit of a proven committed record is
    refused, naming what."""
    rec = _committed(name)
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status != "proven" and says in v.reason, v.line()


@pytest.mark.parametrize("name,edit,says", [
    # failures the record holds under other names
    (SERVE_RECORD, lambda r: r["runs"]["FLASHMLA_SPARSE"]["passes"][0]["timed"].update(exit_code=1), "exit_code 1"),
    (SERVE_RECORD, lambda r: r["runs"]["FLASHMLA_SPARSE"]["passes"][0]["timed"].update(timed_out=True), "timed_out"),
    # the same signs written as other types or in other words (the breaker's round of 2026-12-06): where the writer
    # writes the key (a client pass's exit code and time limit), or where keys are not all known (vLLM's result); in a
    # server, a pass or an engine run a key no writer writes there is invalid (issue 47 rounds 7 and 8:
    # tests/workbook/test_written.py)
    (SERVE_RECORD, lambda r: r["runs"][_T]["passes"][0]["timed"].update(exit_code="1"), "exit_code '1'"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(returncode=137.0), "returncode 137.0"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0]["warmup"].update(timed_out="true"), "timed_out 'true'"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(status="killed by OOM"), "status 'killed by OOM'"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(Error="CUDA error: illegal memory access"), "Error says"),
    (SERVE_RECORD, lambda r: _completed(r, "FLASHMLA_SPARSE", 0), "0 of 160 prompts completed"),
    (SERVE_RECORD, lambda r: _completed(r, "FLASHMLA_SPARSE", "100"), "100 of 160 prompts"),
    (SERVE_RECORD, lambda r: _completed(r, "FLASHMLA_SPARSE", 100.0), "100 of 160 prompts"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0]["warmup"].update(exit_code=[1]), "exit_code [1]"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(status={"text": "crashed"}), "status {'text': 'crashed'}"),
    # (a negative count is no writer's: since the pass's shape (issue 47, hole 7) invalid, no longer read as a failure)
    (SERVE_RECORD, lambda r: r["runs"]["FLASHMLA_SPARSE"]["passes"][0]["timed"].update(failed=-5), "timed.failed is -5"),
    (SERVE_RECORD, lambda r: r["runs"]["FLASHMLA_SPARSE"]["summary"].update(
        failed={"min": 0, "median": 3, "max": 0, "n": 5}), "summary.failed"),
    (SERVE_RECORD, lambda r: r["repeats"].update(FLASHMLA_SPARSE=[]), "0 repeats of the 5 repeats"),
    (SERVE_RECORD, lambda r: r["runs"]["FLASHMLA_SPARSE"].update(servers=[]), "no server"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(exception="RuntimeError: CUDA error"), "exception says"),
    (GGUF_RECORD, lambda r: r["first_token_criterion"]["per_prompt"][0]["first_tokens"].update(FLASHMLA_SPARSE=42),
     "is not the reference's argmax"),
    # a run pasted from another record or machine
    (GGUF_RECORD, lambda r: r["runs"][_T]["environment"].update(gpu="NVIDIA H100 80GB HBM3"), "header: gpu"),
    (GGUF_RECORD, lambda r: r["runs"][_T]["environment"].update(vllm="0.33.0"), "header: vllm"),
    (GGUF_RECORD, lambda r: r["runs"][_T]["environment"].update(revision="0" * 40), "header: revision"),
    (GGUF_RECORD, lambda r: r["runs"][_T]["environment"].update(date="2026-12-01T00:00:00+00:00"), "6 hours"),
    (NGRAM_RECORD, lambda r: r["runs"][_T].update(tp=8), "tp 8, the record's 1"),
    (NGRAM_RECORD, lambda r: r.update(tp=3), "does not divide"),
    (NGRAM_RECORD, lambda r: [v.update(kv_cache_dtype="banana") for v in (r, *r["runs"].values(),
                                                                            *r["run_specs"].values())], "banana"),
])
def test_the_breakers_round_on_2026_12_05(tmp_path, name, edit, says):
    """Issue 47, the breaker's round of 2026-12-05 (147 attempts, 64 edits of proven records called proven): the
    classes fixed here -- a failure said under another key (an exit status, a time limit, prompts not completed, a
    negative or summarised count, missing repeats or servers, a decisive prompt's wrong token without a failure), a
    run whose header, tp or KV dtype is not its record's. Each edit of a proven committed record is refused."""
    rec = _committed(name)
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status != "proven" and says in v.reason, v.line()


LONG_RECORD = "../h100-80gb-hbm3/launch_h100-80gb-hbm3_long_prompts.json"
H100_GGUF = "../h100-80gb-hbm3/launch_h100-80gb-hbm3_gguf_q4_k.json"
MTP_RECORD = "../h100-80gb-hbm3/launch_h100-80gb-hbm3_mtp.json"


def _first_gen(r, run=_T):
    return r["runs"][run]["generations"][0]


def _serve_as_offline(r, same: bool):
    toks = _first_gen(r)["token_ids"][:16]
    r["serve"] = {"backend_requested": _T, "compared_with": _T, "token_ids": toks, "matches_offline": same}


@pytest.mark.parametrize("name,edit,says", [
    # summaries edited, their data left: each is recomputed from the data (sparse_mla.workbook.consistency)
    (GGUF_RECORD, lambda r: [e.update(same_first_token=False) for v in r["reference_first_token"].values()
                             for e in v], "same_first_token False"),
    (GGUF_RECORD, lambda r: r["reference_first_token"][_T][0].update(vllm_first_token=7), "vllm_first_token 7"),
    (GGUF_RECORD, lambda r: r["parity_vs_ours"]["FLASHMLA_SPARSE"]["per_prompt"][0].update(identical=False),
     "parity_vs_ours: not what its runs give"),
    (GGUF_RECORD, lambda r: r["parity_pairs"][0].update(all_identical=False), "parity_pairs"),
    (GGUF_RECORD, lambda r: _first_gen(r)["token_ids"].__setitem__(-1, 3), "parity_pairs: not what its runs give"),
    (LONG_RECORD, lambda r: r["engine_agreement"][0]["vs"]["FLASHMLA_SPARSE"].update(same_first_token=False),
     "engine_agreement: not what"),
    # ... and the holes the breaker's next round found in those checks (helper, 2026-12-06): the criterion's own
    # first tokens, its decisive flags and count, entries or summaries deleted, throughput, top_k
    (H100_GGUF, lambda r: r["first_token_criterion"]["per_prompt"][0]["first_tokens"].update(TRITON_MLA_SPARSE=1311),
     "first_tokens"),
    (H100_GGUF, lambda r: r["first_token_criterion"]["per_prompt"][0].update(decisive=False), "decisive False"),
    (H100_GGUF, lambda r: r["first_token_criterion"].update(decisive_prompts=0), "decisive_prompts 0"),
    (H100_GGUF, lambda r: r["first_token_criterion"]["per_prompt"][0].update(reference_argmax=1311),
     "reference_argmax 1311"),
    (H100_GGUF, lambda r: r.pop("first_token_criterion"), "no first_token_criterion"),
    (H100_GGUF, lambda r: r["first_token_criterion"].update(error=[]), "first_token_criterion.error is empty"),
    (H100_GGUF, lambda r: r["reference_first_token"].update({_T: []}), "not one entry per judged prompt"),
    (H100_GGUF, lambda r: r["reference_first_token"].update(error=[]), "reference_first_token.error is empty"),
    (H100_GGUF, lambda r: r["reference_first_token"].pop(_T), "reference_first_token compares"),
    (H100_GGUF, lambda r: r["reference_first_token"][_T][0].update(top_k=3), "top_k 3"),
    (H100_GGUF, lambda r: r["throughput_tokens_per_s"].update({_T: 99999.0}), "throughput_tokens_per_s: not what"),
    (H100_GGUF, lambda r: r.pop("parity_pairs"), "no parity_pairs"),
    (LONG_RECORD, lambda r: r.update(engine_agreement=[]), "engine_agreement: not what"),
    (LONG_RECORD, lambda r: r.pop("engine_agreement"), "no engine_agreement"),
    (LONG_RECORD, lambda r: r["parity_vs_ours"].pop("FLASHMLA_SPARSE"), "parity_vs_ours: not what"),
    (GGUF_RECORD, lambda r: _serve_as_offline(r, False), "matches_offline False, yet"),
    (GGUF_RECORD, lambda r: (_serve_as_offline(r, True), r["serve"].pop("matches_offline")), "no matches_offline"),
    (H100_GGUF, lambda r: [(v.pop("kv_cache_dtype"), [x.update(kv_cache_dtype="fp8_ds_mla") for x in v["layers"].values()
                                                      if x.get("layer") == "MLAAttention"]) for v in r["runs"].values()],
     "the run asked 'auto'"),
    (H100_GGUF, lambda r: [v.update(layers={n: x for n, x in v["layers"].items() if x.get("layer") != "MLAAttention"})
                           for v in r["runs"].values()], "layers name {'DEEPSEEK_V32_INDEXER': 2}, its ran counts"),
    (H100_GGUF, lambda r: r["runs"][_T].update(attention_backends=["FLASHMLA_SPARSE"]), "attention_backends"),
    (H100_GGUF, lambda r: [g.update(token_ids=[], logprobs=[]) for v in r["runs"].values() for g in v["generations"]],
     "has 0 token(s)"),
    (H100_GGUF, lambda r: r["model"].update(num_hidden_layers="2"), "model.num_hidden_layers is '2'"),   # (schema)
    (MTP_RECORD, lambda r: r["runs"][_T]["ran"]["speculative"].update(acceptance_rate=1.0), "acceptance_rate ="),
    (SERVE_RECORD, lambda r: r["runs"][_T]["summary"]["output_throughput"].update(
        median=r["runs"][_T]["summary"]["output_throughput"]["max"]), "summary.output_throughput not the spread"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(output_throughput=1e8), "not the spread of its repeats"),
    (H100_GGUF, lambda r: r.update(prompt_lengths="48,900"), "prompt_lengths is '48,900'"),   # (schema)
    # per run: KV dtypes, layer counts, empty blocks
    (GGUF_RECORD, lambda r: [v.update(kv_cache_dtype="fp8_ds_mla") for v in r["runs"][_T]["layers"].values()
                             if v.get("layer") == "MLAAttention"], "KV dtype 'fp8_ds_mla', the run asked 'auto'"),
    (GGUF_RECORD, lambda r: r["model"].update(num_hidden_layers=78), "the record's model has 78"),
    (GGUF_RECORD, lambda r: r["runs"][_T].update(layers={}), "layers is empty"),
    (GGUF_RECORD, lambda r: r["runs"][_T].update(generations=[]), "generations is empty"),
    (GGUF_RECORD, lambda r: r.update(prompt_lengths=r["prompt_lengths"][::-1]), "the record's prompt_lengths"),
    # version fields that are no version
    (GGUF_RECORD, lambda r: r["environment"].update(torch="banana"), "environment.torch"),
    (GGUF_RECORD, lambda r: r["runs"][_T]["environment"].update(triton="x"), "triton"),
    (GGUF_RECORD, lambda r: [v.update(torch="2.11.0+cu130 (edited)") for v in (r["environment"], *(
        x["environment"] for x in r["runs"].values()))], "torch"),
    (H100_GGUF, lambda r: r["runs"][_T]["environment"].update(date=_hours_before(r["environment"]["date"], 12)),
     "not within 6 hours"),
    (H100_GGUF, lambda r: r["runs"][_T]["environment"].update(date="2025-03-01T00:00:00+00:00"), "not within 6 hours"),
    # a header date in another zone or none is no writer's (round 12, b06)
    (H100_GGUF, lambda r: r["runs"][_T]["environment"].update(date=r["environment"]["date"][:19] + "+12:00"),
     "environment.date is"),
])
def test_the_breakers_round_on_2026_12_06(tmp_path, name, edit, says):
    """Issue 47, what the breaker's round of 2026-12-06 left proven: summaries (reference first tokens, parity flags,
    engine agreement, the served check) edited apart from the data they summarize, a layer's KV dtype or the model's
    layer count not what ran, empty layers or generations, version fields that are no version. Each edit of a proven
    committed record is invalid, naming what."""
    rec = _committed(name)
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_a_served_check_that_matches_and_an_mtp_layer_count_stay_proven(tmp_path):
    """The same checks on data that agrees: a served check whose tokens are the offline run's, an MTP record whose
    draft layer is in ``layers`` but not in ``ran.attention``."""
    rec = _committed(GGUF_RECORD)
    _serve_as_offline(rec, True)
    v = verdict(tmp_path, rec)
    assert "matches_offline" not in v.reason, v.line()
    assert verdict(tmp_path, _committed(MTP_RECORD), "m.json").status == "proven"


def test_a_revision_that_is_no_commit_of_the_records_repository_is_unproven(tmp_path):
    """Issue 47 (2026-12-06): a revision of the right form that names no commit. Where a full git repository holds
    the record it is asked; elsewhere (no repository, a shallow clone) the form alone is judged."""
    import subprocess

    def git(*a):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *a],
                              check=True, capture_output=True, text=True).stdout.strip()

    rec = _committed(GGUF_RECORD)
    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "x")
    head = git("rev-parse", "HEAD")
    for r in (rec, *rec["runs"].values()):
        r["environment"]["revision"] = f"{head} (REVISION file: the tree copied to this machine)"
    assert verdict(tmp_path, rec).status == "proven"
    fake = "1234567" + head[7:]
    for r in (rec, *rec["runs"].values()):
        r["environment"]["revision"] = fake
    v = verdict(tmp_path, rec, "fake.json")
    assert v.status == "unproven" and f"its revision {fake} is no commit" in v.reason, v.line()
    for r in (rec, *rec["runs"].values()):          # the header's revision at the top level, as the earliest records
        r["environment"].pop("revision")
    rec["revision"] = fake
    v = verdict(tmp_path, rec, "top.json")
    assert v.status == "unproven" and f"its revision {fake} is no commit" in v.reason, v.line()


def _throughput(r, **changes):
    r["runs"][_T]["throughput"].update(changes)


@pytest.mark.parametrize("name,edit,status,says", [
    # figures no run has: the model's geometry, lengths, a first-token difference below 0, a serving pass's figures
    (MTP_RECORD, lambda r: r["model"].update(num_attention_heads=0), "invalid", "model.num_attention_heads is 0"),
    (MTP_RECORD, lambda r: r["model"].update(index_topk=-512), "invalid", "model.index_topk is -512"),
    (MTP_RECORD, lambda r: r.update(max_model_len=-4096), "invalid", "max_model_len is -4096"),
    (MTP_RECORD, lambda r: r["reference_first_token"][_T][0].update(max_abs_logprob_diff=-0.5), "invalid",
     "max_abs_logprob_diff is -0.5"),
    (MTP_RECORD, lambda r: _throughput(r, generated_tokens=-4096), "invalid", "generated_tokens is -4096"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(duration=0.0), "invalid", "duration is 0.0"),
    (SERVE_RECORD, lambda r: r.update(wall_s=-437.0), "invalid", "wall_s is -437.0"),
    (SERVE_RECORD, lambda r: r["load"].update(num_prompts=0), "invalid", "load.num_prompts is 0"),
    # figures that contradict each other within the record
    (MTP_RECORD, lambda r: (_throughput(r, output_tokens_per_s=92370.0),
                            r["throughput_tokens_per_s"].update({_T: 92370.0})), "invalid",
     "output_tokens_per_s 92370.0, not its 4096 generated tokens in 4.434 s"),
    (MTP_RECORD, lambda r: _throughput(r, seconds=0), "invalid", "not its 4096 generated tokens in 0 s"),
    (MTP_RECORD, lambda r: _throughput(r, generated_tokens=409600), "invalid", "not num_seqs 32 x max_tokens"),
    (MTP_RECORD, lambda r: _throughput(r, generated_tokens=4095), "invalid", "4095, not num_seqs 32 x max_tokens"),
    (MTP_RECORD, lambda r: r.update(max_model_len=64), "invalid", "exceed max_model_len 64"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(completed=10 ** 6), "invalid",
     "completed 1000000 prompts of the 160"),
    (SERVE_RECORD, lambda r: r["order"][0].__setitem__(0, "BANANA"), "invalid", "order round 1"),
    (SERVE_RECORD, lambda r: r["order"][1].__setitem__(0, r["order"][1][1]), "invalid", "order round 2"),
    # ... and the holes a second pass on these checks found: an order round short of a run or a round too many,
    # repeats of a run the record lacks, a NaN acceptance rate beside its counts, an engine start of 31,000 years
    (SERVE_RECORD, lambda r: r["order"].__setitem__(0, r["order"][0][:2]), "invalid", "order round 1"),
    (SERVE_RECORD, lambda r: r["order"].append(r["order"][0]), "invalid", "order has 6 rounds, the load 5 repeats"),
    (SERVE_RECORD, lambda r: r["repeats"].update(OTHER=r["repeats"][_T]), "invalid", "repeats of 'OTHER'"),
    (MTP_RECORD, lambda r: r["runs"][_T]["ran"]["speculative"].update(acceptance_rate=float("nan")), "invalid",
     "acceptance_rate = accepted_tokens / draft_tokens"),
    (MTP_RECORD, lambda r: r["runs"][_T].update(engine_init_s=1e12), "invalid", "engine_init_s is 1000000000000.0"),
    # a status in another writer's words: in an engine run or a serving benchmark's server, a key no writer writes
    # (issue 47 rounds 7 and 8, superseding the reading of its words); in vLLM's result, read as before
    (MTP_RECORD, lambda r: r["runs"][_T].update(status="segfault"), "invalid",
     f"no writer writes the key 'status' at runs.{_T}"),
    (MTP_RECORD, lambda r: r["runs"][_T].update(status="terminated by signal 9"), "invalid",
     f"no writer writes the key 'status' at runs.{_T}"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0].update(status="died"), "invalid",
     f"no writer writes the key 'status' at runs.{_T}.servers[0]"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(status="terminated by signal 9"), "unproven", "signal 9"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(status="died"), "unproven", "status 'died'"),
])
def test_the_breakers_round_six(tmp_path, name, edit, status, says):
    """Issue 47, the sixth breaker round (2026-12-06): figures no run has (a model of 0 heads, a negative
    max_model_len, first-token difference or generated count, a serving pass of 0 s), figures that contradict each
    other (a throughput that is not its tokens over its seconds, prompts longer than max_model_len, more prompts
    completed than asked, an order naming another run) and a status in words of its own ("segfault") were proven."""
    rec = _committed(name)
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == status and says in v.reason, v.line()


@pytest.mark.parametrize("text", ["ok", "Success", "done.", "completed"])
def test_a_status_no_writer_writes_makes_an_engine_run_invalid_and_a_vllm_results_success_stays_proven(tmp_path,
                                                                                                       text):
    """Issue 47 round 7 supersedes the reading of a status in an engine run, round 8 in a serving benchmark's server:
    no writer writes a ``status`` there, whatever its words (the maintainer's allow-lists). Where keys are not all
    known (vLLM's own result of a pass) a status of success is still one."""
    rec = _committed(MTP_RECORD)
    rec["runs"][_T]["status"] = text
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and f"no writer writes the key 'status' at runs.{_T}; accepted: " in v.reason, v.line()
    rec = _committed(SERVE_RECORD)
    rec["runs"][_T]["servers"][0]["status"] = text
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and f"no writer writes the key 'status' at runs.{_T}.servers[0]; " in v.reason, \
        v.line()
    rec = _committed(SERVE_RECORD)
    rec["repeats"][_T][0]["status"] = text
    assert verdict(tmp_path, rec).status == "proven"


def test_a_record_linked_into_a_repository_is_judged_where_it_is_shown(tmp_path):
    """Issue 47, left by the round of 2026-12-06: a record outside any repository, linked into one, was judged by its
    target's folder (no git: the revision's form alone), so a revision that is no commit of the repository it is
    shown in stayed proven through the link."""
    import subprocess

    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()

    def git(*a):
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *a],
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("commit", "-q", "--allow-empty", "-m", "x")
    rec = _committed(GGUF_RECORD)
    fake = "1234567" + git("rev-parse", "HEAD")[7:]
    for r in (rec, *rec["runs"].values()):
        r["environment"]["revision"] = fake
    (outside / "r.json").write_text(json.dumps(rec))
    assert proof.check([str(outside / "r.json")])[0].status == "proven"      # no repository: the form alone
    (repo / "r.json").symlink_to(outside / "r.json")
    [v] = proof.check([str(repo / "r.json")])
    assert v.status == "unproven" and f"its revision {fake} is no commit" in v.reason, v.line()


# ---- issue 47, the holes the verification round of 2026-12-06 found still open ---------------------------------------

@pytest.mark.parametrize("name,edit,path", [
    # (in an engine run of an engine record or a serving benchmark's server: a key no writer writes there,
    # tests/workbook/test_written.py; in vLLM's result, whose keys are not all known, read)
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(exit_code=True), f"repeats.{_T}[0].exit_code True"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(returncode=False), f"repeats.{_T}[0].returncode False"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["passes"][0]["timed"].update(exit_code=True),
     f"runs.{_T}.passes[0].timed.exit_code True"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0]["warmup"].update(exit_code=False),
     f"runs.{_T}.servers[0].warmup.exit_code False"),
])
def test_a_boolean_exit_status_is_invalid(tmp_path, name, edit, path):
    """Hole 1: ``exit_code: true`` was read as the integer 1 would not be (bool is an int in Python) and the record
    stayed proven. An exit status is an integer; a boolean is a type no writer writes."""
    rec = _committed(name)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and f"{path} is not accepted; accepted: an integer exit status" in v.reason, v.line()


@pytest.mark.parametrize("name,edit,status,says", [
    # (in an engine run of an engine record or a serving benchmark's server or pass: a key no writer writes there,
    # tests/workbook/test_written.py; in vLLM's result, whose keys are not all known, read)
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(crashed=True), "unproven",
     f"repeats.{_T}[0].crashed says something failed"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(errored=True), "unproven",
     f"repeats.{_T}[0].errored says something failed"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(failed_requests=3), "unproven",
     "failed_requests says something failed: 3"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(numFailed=2), "unproven", "numFailed says something failed: 2"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(ok=False), "unproven", "ok says something failed: ok False"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(status="errored"), "unproven", "status 'errored'"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["passes"][0]["timed"].update(timed_out="Y"), "invalid",
     "timed_out 'Y' is not accepted; accepted: true or false"),
    (SERVE_RECORD, lambda r: r["repeats"][_T][0].update(status=0), "invalid",
     "status 0 is not accepted; accepted: a text"),
    # the writer's own failure keys of a server's warm-up pass (round 8: and the prompts it completed)
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0]["warmup"].update(failed=3), "unproven",
     f"runs.{_T}.servers[0].warmup.failed says something failed: 3"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0]["warmup"].update(exit_code=1), "unproven",
     "warmup.exit_code says something failed: exit_code 1"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0]["warmup"].update(completed=100), "unproven",
     f"runs.{_T}.servers[0].warmup says something failed: 100 of the load's 160 prompts completed"),
])
def test_anything_but_the_writers_success_value_is_a_failure(tmp_path, name, edit, status, says):
    """Hole 8: a failure in words outside the lists (a key ``crashed``, ``failed_requests``, ``errored``, a
    ``timed_out`` of ``"Y"``) was no failure. A key naming a failure holds nothing or says one; an outcome key holds
    its writer's success value, another value of its type (a failure) or is invalid."""
    rec = _committed(name)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == status and says in v.reason, v.line()


@pytest.mark.parametrize("edit", [lambda s: s.update(crashed=False, failed_requests=0, errors=[], timed_out=False,
                                                     exit_code=0, ok=True),
                                  lambda s: s.update(stderr="warnings only", error_bound=None)])
def test_the_writers_success_values_stay_proven(tmp_path, edit):
    """Where a record's keys are not all known (vLLM's result of a pass). In an engine run of an engine record and
    in a serving benchmark's server these are keys no writer writes there, invalid since issue 47 rounds 7 and 8
    (tests/workbook/test_written.py)."""
    rec = _committed(SERVE_RECORD)
    edit(rec["repeats"][_T][0])
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec["runs"][_T]["servers"][0])
    assert verdict(tmp_path, rec).status == "invalid"


def _per_prompt(r, **changes):
    for p in r["first_token_criterion"]["per_prompt"]:
        p.update(changes)


@pytest.mark.parametrize("edit,says", [
    (lambda r: r["first_token_criterion"].update(samples=-16), "first_token_criterion.samples is -16; accepted: a "
                                                               "number of at least 2"),
    (lambda r: r["first_token_criterion"].update(samples=0), "first_token_criterion.samples is 0"),
    (lambda r: _per_prompt(r, sigma=-0.01), "per_prompt[0].sigma is -0.01; accepted: a number above 0"),
    (lambda r: _per_prompt(r, sigma=0.0), "per_prompt[0].sigma is 0.0; accepted: a number above 0"),
    (lambda r: _per_prompt(r, tolerance=0.0, decisive=True), "per_prompt[0].tolerance is 0.0; accepted: a number above"),
    (lambda r: _per_prompt(r, gap=-1.0, decisive=False), "per_prompt[0].gap is -1.0; accepted: a number of at least 0"),
    (lambda r: r["first_token_criterion"]["arithmetic"].update(store=-0.00390625), "arithmetic.store is -0.00390625"),
    (lambda r: r["first_token_criterion"]["arithmetic"].update(acc=0), "arithmetic.acc is 0; accepted: a number above"),
    # figures of the right sign that contradict each other
    (lambda r: [p.update(sigma=p["sigma"] * 2) for p in r["first_token_criterion"]["per_prompt"]],
     "is not 9.40416 x its sigma"),
    (lambda r: r["first_token_criterion"]["arithmetic"].update(cache=0.0625), "is not vLLM's for a KV cache of 'auto'"),
])
def test_the_first_token_criterions_figures_are_positive_and_its_own(tmp_path, edit, says):
    """Hole 3: the criterion's samples, sigma, tolerance and arithmetic were accepted negative or 0. Samples are at
    least 2 (a spread needs two), sigma and tolerance above 0 and each tolerance lam sqrt(2) x its sigma (9.40416 for
    the two prompts judged together, P_FAIL 1e-9), the arithmetic vLLM's unit roundoffs for the record's KV cache."""
    rec = _committed(GGUF_RECORD)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def _served_check(r, layers: int):
    """A served check beside the GGUF record's runs, its ``ran`` (the baseline's) counting ``layers`` layers."""
    run = r["runs"][_T]
    r["serve"] = {k: json.loads(json.dumps(run[k])) for k in ("run", "backend_requested", "indexer", "kv_cache_dtype",
                                                                "checkpoint", "ran")}   # run_serve writes no header
    r["serve"]["ran"].update(attention={_T: layers}, indexer_cache={"DEEPSEEK_V32_INDEXER": layers},
                             mla_prefill={"FLASH_ATTN FA3": layers})


@pytest.mark.parametrize("name,edit,says", [
    (GGUF_RECORD, lambda r: _served_check(r, 5), "serve: ran.indexer_cache counts 5 indexer-cache layer(s), more than "
                                                 "the record's model's 2 layers"),
    (GGUF_RECORD, lambda r: _served_check(r, 5), "serve: ran.attention counts 5 attention layer(s), the record's model "
                                                 "has 2"),
    (SERVE_RECORD, lambda r: r["runs"][_T]["servers"][0]["ran"].update(indexer_cache={"DEEPSEEK_V32_INDEXER": 3}),
     f"{_T}: servers[0].ran.indexer_cache counts 3 indexer-cache layer(s), more than the record's model's 2"),
])
def test_every_ran_blocks_indexer_cache_is_held_to_the_model(tmp_path, name, edit, says):
    """Hole 2: the indexer-cache layers of a served check's ``ran`` or a live server's were held to no model (the
    offline runs' were): 5 indexer-cache layers in a 2-layer model were proven."""
    rec = _committed(name)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_a_served_check_of_the_models_layers_stays_proven(tmp_path):
    rec = _committed(GGUF_RECORD)
    _served_check(rec, 2)
    assert verdict(tmp_path, rec).status == "proven"


NO_SPEC = f"{_T}+no-speculation"


@pytest.mark.parametrize("name,edit,says", [
    (MTP_RECORD, lambda r: r["runs"][NO_SPEC]["ran"].update(draft_attention={_T: 1}),
     f"{NO_SPEC}: draft_attention: no drafter asked"),
    (NGRAM_RECORD, lambda r: r["runs"][_T]["ran"].update(draft_attention={_T: 1}), f"{_T}: draft_attention: no drafter"),
    (MTP_RECORD, lambda r: r["runs"][_T]["ran"].update(draft_attention={_T: 3}),
     f"{_T}: ran.draft_attention counts 3 drafter layer(s), the record's model has 1 MTP layer(s)"),
    (MTP_RECORD, lambda r: r["runs"][_T].update(speculative=False), "speculative false beside the speculative_config"),
    (MTP_RECORD, lambda r: r["runs"][_T]["speculative_config"].update(num_speculative_tokens=3),
     f"{_T}: speculative_config asks {{'method': 'mtp', 'num_speculative_tokens': 3}}, the record's"),
    (NGRAM_RECORD, lambda r: r.update(speculative_config=None), "the record's None"),
    (NGRAM_RECORD, lambda r: r["runs"][_T]["ran"]["speculative"].update(draft_tokens=900, acceptance_rate=447 / 900),
     "900 draft tokens in 225 drafts, more than the 3 a draft"),
])
def test_a_runs_speculation_is_held_to_what_it_ran_and_the_records(tmp_path, name, edit, says):
    """Hole 4: a run's speculation was held to its ``ran`` only where an MTP drafter's backend was asked: drafter
    layers in a run without speculation (or with ngram, which drafts from the tokens alone), more drafter layers than
    the model's MTP layers, a run asking other speculation than its record, or more draft tokens than its drafts
    propose, were proven."""
    rec = _committed(name)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


@pytest.mark.parametrize("at", [0, 3])
def test_a_nan_log_prob_is_never_proven_as_a_match(tmp_path, at):
    """Hole 5: the parity summaries take the largest log-prob difference with Python's ``max``, which keeps a NaN
    only where it comes first; a run with a NaN log-prob, its summaries made by the writer's own functions, was
    proven. The largest difference of a list holding NaN is NaN, and a NaN log-prob leaves the record unproven."""
    import math

    from sparse_mla.launch.engine import compare
    from sparse_mla.workbook.consistency import writer_summaries

    rec = _committed(GGUF_RECORD)
    rec["runs"][_T]["generations"][0]["logprobs"][at] = float("nan")
    rec.update(writer_summaries(rec))                           # as the writer would summarise these runs
    diff = compare(rec["runs"]["FLASHMLA_SPARSE"], rec["runs"][_T])["per_prompt"][0]["max_abs_logprob_diff"]
    assert math.isnan(diff), diff
    v = verdict(tmp_path, rec)
    assert v.status == "unproven" and f"{_T}: the generation for the 48-token prompt has a NaN log-prob" in v.reason, \
        v.line()


def _all_checkpoints(r, **changes):
    for c in (r["checkpoint"], *(v["checkpoint"] for v in r["runs"].values())):
        c.update(changes)


@pytest.mark.parametrize("name,edit,says", [
    (GGUF_RECORD, lambda r: r["checkpoint"].update(format="safetensors", file=None, load_format=None,
                                                    quantization=None),
     f"{_T}: checkpoint {{'format': 'gguf', 'file': 'model-Q8_0.gguf', 'load_format': 'gguf', 'quantization': "
     f"'gguf'}}, the record's {{'format': 'safetensors'"),
    (GGUF_RECORD, lambda r: r["checkpoint"].update(file="model-Q4_K.gguf"), "the record's {'format': 'gguf', 'file': "
                                                                            "'model-Q4_K.gguf'"),
    (GGUF_RECORD, lambda r: _all_checkpoints(r, quantization="fp8"), "'quantization': 'fp8'} is none of what launch "
                                                                     "asks"),
    (GGUF_RECORD, lambda r: _all_checkpoints(r, file="model-Q8_0.bin"), "is none of what launch asks"),
    (GGUF_RECORD, lambda r: _all_checkpoints(r, file="other-Q8_0.gguf"), "model.path 'model-Q8_0.gguf' is not the "
                                                                         "checkpoint asked"),
    (MTP_RECORD, lambda r: r["runs"][_T]["ran"]["weights"].update(quantization="gguf"), "weights: a safetensors "
                                                                                        "checkpoint asked"),
])
def test_the_records_checkpoint_is_what_its_runs_asked_and_loaded(tmp_path, name, edit, says):
    """Hole 6: each run judged its weights by its own ``checkpoint`` block, and the record's top-level one (what was
    asked to load) by none: a GGUF record saying it asked a folder, another GGUF file or an fp8 quantization was
    proven."""
    rec = _committed(name)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


# ---- issue 47, the breaker's round 7 (revision 3938ff8) -------------------------------------------------------------

SIMULATED_RECORD = "launch_h200_simulated.json"
_T8 = "TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.0"


@pytest.mark.parametrize("name,edit,says", [
    ("launch_tp2.json", lambda r: r["environment"].update(gpu="h200"), "the header's GPU 'h200' is none of ours"),
    ("launch_tp2.json", lambda r: r["runs"]["FLASHMLA_SPARSE"]["environment"].update(gpu="h200"),
     "FLASHMLA_SPARSE: the header's GPU 'h200' is none of ours"),
    ("bench_kernel_h200.json", lambda r: r["environment"].update(gpu="h200"), "the header's GPU 'h200' is none"),
    ("bench_kernel_h200.json", lambda r: r["environment"].update(capability="8.0"),
     "the header's GPU 'NVIDIA H200' is a h200 (capability 9.0), not capability 8.0"),
])
def test_the_header_of_a_record_without_ran_is_held_to_itself(name, edit, says):
    """Issue 47, round 12 (b43, d52): a header's fields against each other need no ``ran`` block: a record older
    than them (or a kernel benchmark's) whose header no writer writes is invalid, not 'unproven: no ran block'."""
    rec = _committed(name)
    assert proof.judge(name, rec).status == "unproven"
    edit(rec)
    v = proof.judge(name, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def _every_header(r, **changes):
    for env in (r["environment"], *(v["environment"] for v in r["runs"].values())):
        env.update(changes)


@pytest.mark.parametrize("name,edit,says", [
    # a GPU that is none of ours, with the capability of one (b36, b37)
    (SIMULATED_RECORD, lambda r: _every_header(r, gpu="Tesla V100-SXM2-32GB"),
     "the header's GPU 'Tesla V100-SXM2-32GB' is none of ours; accepted: the driver's name of one of "),
    (SIMULATED_RECORD, lambda r: _every_header(r, gpu="Banana Accelerator 9000"), "'Banana Accelerator 9000' is none"),
    (SIMULATED_RECORD, lambda r: _every_header(r, gpu="H200"), "the header's GPU 'H200' is none of ours"),   # b43
    # SMs no GPU has, or not the device's the launch was planned with (a20, a21)
    (SIMULATED_RECORD, lambda r: r["environment"].update(sm_count=-1),
     "environment.sm_count is -1; accepted: a number"),
    (SIMULATED_RECORD, lambda r: r["environment"].update(sm_count="lots"),
     "environment.sm_count is 'lots'; accepted: an integer"),
    (GGUF_RECORD, lambda r: _every_header(r, sm_count=100), f"{_T}: ran.launch_plan.9.0 was planned with the device's "
                                                            f"132 SMs, the header's sm_count is 100"),
    # a Python the project does not run on (a18)
    (SIMULATED_RECORD, lambda r: _every_header(r, python="2.7.18"),
     "environment.python is '2.7.18'; accepted: a Python the project runs on, 3.11 to 3.13"),
    # a plan made with another GPU's row, other numbers (b53)
    (SIMULATED_RECORD, lambda r: r["runs"][_T8]["ran"]["launch_plan"]["8.0"].update(sm_count=0),
     "launch_plan.8.0.sm_count is 0; accepted: a number of at least 1"),
    (SIMULATED_RECORD, lambda r: r["runs"][_T8]["ran"]["launch_plan"]["8.0"].update(sm_count=100),
     f"{_T8}: launch_plan.8.0: {{'from': 'DEVICE_LIMITS[8.0]', 'sm_count': 100, 'smem_per_block': 166912, "
     f"'smem_per_sm': 167936}} is not DEVICE_LIMITS[8.0] ({{'sm_count': 108, "),
    (SIMULATED_RECORD, lambda r: r["runs"][_T8]["ran"]["launch_plan"]["8.0"].update({"from": "a guess"}),
     "launch_plan.8.0.from is 'a guess'"),
])
def test_header_fields_nobody_compared_are_held_to_the_device(tmp_path, name, edit, says):
    """Issue 47 round 7, class 4: a GPU name that is none of our presets beside capability 9.0, an SM count below 1
    or of another type, a Python 2.7 beside torch 2.11, a launch plan of 0 SMs were proven. The header's GPU names a
    preset, its SMs are the device's plan's, its Python one the project runs on, each plan its source's numbers."""
    rec = _committed(name)
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


ONE_ENGINE_RECORD = "launch_h200_vllm033_simulated_sm80_engine.json"
_FM = "FLASHMLA_SPARSE"


def _speculation(r, **cfg):
    """The ngram record's speculative config, at the top and in each speculating run, set to ``cfg``."""
    for x in (r, *(v for k, v in r["runs"].items() if not k.endswith("+no-speculation"))):
        x["speculative_config"] = cfg


@pytest.mark.parametrize("name,edit,status,says", [
    # a speculative config vLLM's own SpeculativeConfig refuses (c16, c17), or another than the command's
    (NGRAM_RECORD, lambda r: _speculation(r, method="banana", num_speculative_tokens=3), "invalid",
     "method 'banana' is none of vLLM's; accepted: ngram, "),
    (NGRAM_RECORD, lambda r: _speculation(r, method="ngram", num_speculative_tokens=3, prompt_lookup_max=2,
                                          prompt_lookup_min=9), "invalid",
     "vLLM's SpeculativeConfig refuses it: Value error, prompt_lookup_min=9 must be <= prompt_lookup_max=2"),
    (NGRAM_RECORD, lambda r: _speculation(r, method="ngram", num_speculative_tokens=3, prompt_lookup_max=5,
                                          prompt_lookup_min=2), "invalid",
     "speculative_config {'method': 'ngram', 'num_speculative_tokens': 3, 'prompt_lookup_max': 5, 'prompt_lookup_min': "
     "2}, the command asked --speculative-config"),
    # an engine in another mode than the command's plan or command (b39)
    (SIMULATED_RECORD, lambda r: r["runs"][_FM].update(enforce_eager=False), "invalid",
     f"{_FM}: enforce_eager False, the command's plan runs it eager (--eager-only)"),
    (ONE_ENGINE_RECORD, lambda r: r.update(enforce_eager=False), "invalid",
     "enforce_eager False, the command runs eager (no --cuda-graphs)"),
    # one engine's weights loaded otherwise than the others' (b45)
    (SIMULATED_RECORD, lambda r: r["runs"][_FM]["ran"]["weights"].update(quantization="fp8"), "invalid",
     f"the engines of one checkpoint loaded it differently: "),
    # one engine's record without its generations, or with a prompt of no token (c05, c09)
    (ONE_ENGINE_RECORD, lambda r: r.pop("generations"), "invalid",
     "generations for the prompts none, the command asked --prompt-lengths 48,560,900 (one each, in order)"),
    (ONE_ENGINE_RECORD, lambda r: r["generations"][0].update(prompt_len=-48), "invalid",
     "generations[0].prompt_len is -48; accepted: a number of at least 1"),
    # a first-step top log-prob that is NaN, or keyed by no token (c31)
    (SIMULATED_RECORD, lambda r: r["runs"][_FM]["generations"][0]["first_top_logprobs"].update({"1752": float("nan")}),
     "unproven", f"{_FM}: the generation for the 48-token prompt has a NaN first-step top log-prob"),
    (SIMULATED_RECORD, lambda r: r["runs"][_FM]["generations"][0]["first_top_logprobs"].update(banana=-1.0),
     "invalid", "first_top_logprobs.banana (a key) is 'banana'"),
    # the model another than the command's (b48), a simulation without the block its engine writes (c01)
    (SIMULATED_RECORD, lambda r: r["model"].update(path="GLM-5-real"), "invalid",
     "model.path 'GLM-5-real', the command asked --model /tmp/ck512 ('ck512')"),
    (SIMULATED_RECORD, lambda r: r["runs"][_T8].pop("simulated"), "invalid",
     f"{_T8}: simulated_capability '8.0' without the simulated block its engine writes"),
])
def test_what_a_run_asked_is_held_to_vllm_and_its_command(tmp_path, name, edit, status, says):
    """Issue 47 round 7, class 5: a speculation method vLLM does not have, an ngram config vLLM refuses, an engine in
    CUDA-graph mode under --eager-only, one engine of a checkpoint loading fp8 weights, one engine's record without
    generations, a NaN top log-prob, another model than the command's were proven."""
    rec = _committed(name)
    assert verdict(tmp_path, rec).status == "proven"
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == status and says in v.reason, v.line()


# ---- issue 47, the breaker's round 8 on engine records: what was left proven --------------------------------------

def _first_step(r, top=None, drop=False):
    """The FLASHMLA_SPARSE run's 48-token generation: its first token's first-step log-prob set to ``top`` (a
    function of ``logprobs[0]``), or dropped."""
    g = r["runs"][_FM]["generations"][0]
    if drop:
        g["first_top_logprobs"].pop(str(g["token_ids"][0]))
    else:
        g["first_top_logprobs"][str(g["token_ids"][0])] = top(g["logprobs"][0])


def _run_command(r, key, old, new):
    env = r["runs"][key]["environment"]
    assert old in env["command"]
    env["command"] = env["command"].replace(old, new)


@pytest.mark.parametrize("edit,says", [
    # a header whose fields are not each other's: SMs of another GPU, a CUDA other than torch's build, versions
    # other than the vLLM line's pins (e19-e22)
    (lambda r: _every_header(r, sm_count=78), "environment.sm_count 78 on a 'NVIDIA H200'; accepted: 132"),
    (lambda r: _every_header(r, cuda="12.1"), "environment.cuda '12.1' beside torch 2.11.0+cu130; accepted: '13.0'"),
    (lambda r: _every_header(r, triton="9.9.9"), "triton '9.9.9' beside torch 2.11.0+cu130; accepted: triton==3.6.0"),
    (lambda r: _every_header(r, torch="0.1.0"), "torch '0.1.0' beside vLLM 0.26.0; accepted: torch==2.11.0"),
    # a greedy first step that is not greedy, or not its own log-prob (e25, e26)
    (lambda r: _first_step(r, lambda lp: -20.0), "its first token 1752 has log-prob -20.0 among its first-step "
                                                 "log-probs, below their highest"),
    (lambda r: _first_step(r, lambda lp: lp + 1.0), "logprobs[0] -4.898020267486572, its first-step log-prob of "
                                                    "token 1752 -3.898020267486572"),
    (lambda r: _first_step(r, drop=True), "its first token 1752 is not among its first-step log-probs"),
    # a run's own command naming another backend (e28), the record's another token budget (e31), a throughput
    # batch other than the command's (e40)
    (lambda r: _run_command(r, _T8, f"--backend {_T8}", "--backend FLASHMLA_SPARSE"),
     f"{_T8}: the engine ran '{_T8}', the command asked --backend FLASHMLA_SPARSE"),
    (lambda r: r["environment"].update(command=r["environment"]["command"].replace("--max-tokens 16",
                                                                                   "--max-tokens 17")),
     "16 tokens generated, the command asked --max-tokens 17"),
    (lambda r: r["runs"][_FM]["throughput"].update(prompt_len=100000), f"{_FM}: throughput {{'num_seqs': 32, "
                                                                       f"'prompt_len': 100000"),
    # a layer's impl other than its backend's (e37)
    (lambda r: r["runs"][_FM]["layers"]["model.layers.0.self_attn.attn"].update(impl="TritonMLASparseImpl"),
     f"{_FM}: layer model.layers.0.self_attn.attn names impl 'TritonMLASparseImpl' beside backend '{_FM}'; "
     f"accepted: 'FlashMLASparseImpl'"),
])
def test_engine_record_fields_are_held_to_each_other_and_the_writer(tmp_path, edit, says):
    """Issue 47 round 8 (edits of the committed simulated-capability parity record, each proven before): header
    fields against each other (``records.environment`` reads them in one process), a generation's first step
    against greedy sampling, each run against the command that ran it, each layer's impl against vLLM's class for
    its backend. Each is invalid, naming the value and what is accepted."""
    rec = _committed(SIMULATED_RECORD)
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_a_gpu_variant_with_the_same_sms_stays_proven(tmp_path):
    """The same rule passes what a writer makes: an H200 NVL has the H200's 132 SMs (e38)."""
    rec = _committed(SIMULATED_RECORD)
    _every_header(rec, gpu="NVIDIA H200 NVL")
    assert verdict(tmp_path, rec).status == "proven"


_R10 = {"S": SIMULATED_RECORD, "N": NGRAM_RECORD, "Q": GGUF_RECORD, "D": "diagnose_vs_engine_h200.json",
        "G": "../h100-80gb-hbm3/glm5next_parity_h100-80gb-hbm3_vllm033.json"}
_NOTEBOOK = "python: sparse_mla (called from ipykernel_launcher.py)"


@pytest.fixture(scope="module")
def round10_records() -> dict[str, str]:
    """The committed records of the breaker's round 10, each read once (proven, as ``records check results`` says)."""
    return {k: json.dumps(_committed(name)) for k, name in _R10.items()}


def _header(r, old, new):
    assert old in r["environment"]["command"]
    r["environment"]["command"] = r["environment"]["command"].replace(old, new)


def _extra_layer(r, run):
    """``run``'s layers with one more MLA layer, a copy of its last, under a decoder layer the model does not have."""
    layers = r["runs"][run]["layers"]
    last = [n for n in layers if n.endswith("self_attn.attn")][-1]
    layers["model.layers.5.self_attn.attn"] = dict(layers[last])


@pytest.mark.parametrize("key,edit,says", [
    # a header command in a form no writer writes (records.cli_command): e01, e02
    ("S", lambda r: (_header(r, "sparse-mla launch", "python -m sparse_mla launch"),
                     _header(r, "--max-tokens 16", "--max-tokens 8")),
     "environment.command 'python -m sparse_mla launch --model /tmp/ck512 --parity --eager-only --no-serve ' is in no "
     "form the writer writes; accepted: `sparse-mla launch ...` or 'python: sparse_mla (called from ...)'"),
    ("S", lambda r: _header(r, "sparse-mla launch", "/usr/local/bin/sparse-mla launch"),
     "environment.command '/usr/local/bin/sparse-mla launch"),
    # mla_prefill counting fewer layers than ran that prefill: e53, g11, d03
    ("S", lambda r: r["runs"][_FM]["ran"].update(mla_prefill={"FLASH_ATTN FA3": 1}),
     f"{_FM}: ran.mla_prefill {{'FLASH_ATTN FA3': 1}}, its layers name the prefill {{'FLASH_ATTN FA3': 2}}"),
    ("G", lambda r: r["runs"][_FM]["ran"].update(mla_prefill={"FLASH_ATTN FA3": 1}),
     f"{_FM}: ran.mla_prefill {{'FLASH_ATTN FA3': 1}}, its layers name the prefill {{'FLASH_ATTN FA3': 2}}"),
    ("D", lambda r: r["runs"]["fp8"]["ran"].update(mla_prefill={"FLASH_ATTN FA3": 1}),
     "fp8: ran.mla_prefill {'FLASH_ATTN FA3': 1}, its layers name the prefill {'FLASH_ATTN FA3': 2}"),
    ("S", lambda r: [(x["ran"].update(mla_prefill={"FLASH_ATTN FA3": 1}), x.pop("layers")) for x in r["runs"].values()],
     "ran.mla_prefill counts 1 layer(s), the 2 MLA layers that ran each have one"),
    # a layer of a decoder layer the model does not have: e12, d04
    ("S", lambda r: _extra_layer(r, _FM), f"{_FM}: layers name {{'DEEPSEEK_V32_INDEXER': 2, '{_FM}': 3}}, its ran "
                                          f"counts {{'DEEPSEEK_V32_INDEXER': 2, '{_FM}': 2}}"),
    ("S", lambda r: r["runs"][_FM]["layers"].update({"model.layers.7.self_attn.attn": r["runs"][_FM]["layers"].pop(
        "model.layers.1.self_attn.attn")}), f"{_FM}: layers of 3 decoder layers, the model's num_hidden_layers is 2"),
    ("D", lambda r: _extra_layer(r, "auto"), "auto: layers name {'DEEPSEEK_V32_INDEXER': 2, 'FLASH_ATTN_MLA_SPARSE': "
                                             "3}"),
    # a record's or a run's field other than its command's: e06, d12, d13; attention_backends not its layers': d16
    ("N", lambda r: r.update(max_model_len=8192), "max_model_len 8192, the command asked --max-model-len 4096"),
    ("N", lambda r: (r.update(max_model_len=8192), r["environment"].update(command=_NOTEBOOK)),
     f"{_T}: its own command asks --max-model-len 4096, the record's max_model_len 8192"),
    ("D", lambda r: r["runs"]["auto"].update(tp=2), "runs.auto: tp 2, the command asked --tp 1"),
    ("D", lambda r: r["runs"]["auto"].update(enforce_eager=False),
     "runs.auto: enforce_eager False, the command runs eager (no --cuda-graphs)"),
    ("D", lambda r: r["runs"]["auto"].update(attention_backends=["FLASH_ATTN_MLA_SPARSE"]),
     "auto: attention_backends ['FLASH_ATTN_MLA_SPARSE'], its layers' backends ['DEEPSEEK_V32_INDEXER', "
     "'FLASH_ATTN_MLA_SPARSE']"),
    # a GGUF loaded without vllm-gguf-plugin's quantization: e28
    ("Q", lambda r: [x["ran"]["weights"].update(quantization=None) for x in r["runs"].values()],
     f"{_T}: weights: a GGUF asked, the engine's quantization was None; accepted: 'gguf'"),
    # a kernel of ours generated in an engine that ran neither our backend nor our indexer: e64
    ("S", lambda r: r["runs"][_FM]["ran"].update(triton_targets={"attention._sparse_mla_fwd_kernel": ["sm90"]}),
     f"{_FM}: triton_targets: Triton generated our kernels ['attention._sparse_mla_fwd_kernel'], yet the engine ran "
     f"neither {_T}"),
])
def test_the_breakers_round_10_on_engine_records(tmp_path, round10_records, key, edit, says):
    """Issue 47, breaker round 10 (batches e and g): each edit of a committed record, proven, was proven; now each is
    invalid, naming the value and what the writer writes (its command line's form, ``collect``'s counts of the same
    layers, the run's own command, vllm-gguf-plugin's quantization, where our kernels run)."""
    rec = json.loads(round10_records[key])
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


@pytest.mark.parametrize("key,edit", [
    ("S", lambda r: r["environment"].update(command=_NOTEBOOK)),      # the writer's form from a notebook
    ("D", lambda r: None),
    ("G", lambda r: None),
])
def test_what_the_writers_write_stays_proven(tmp_path, round10_records, key, edit):
    """The same rules on what the writers make: a parity run's header written from a notebook (no command line to
    compare: its engines' own commands are), the diagnosis and GLM-5.3-Flash records as committed."""
    rec = json.loads(round10_records[key])
    edit(rec)
    assert verdict(tmp_path, rec).status == "proven"


_R11 = {"M": "../h100-80gb-hbm3/launch_h100-80gb-hbm3_mtp.json",
        "L": "../h100-80gb-hbm3/launch_h100-80gb-hbm3_long_prompts.json", "K": "launch_h200_gguf_q4_k_m_split.json",
        "X": ONE_ENGINE_RECORD, "D": _R10["D"], "G": _R10["G"]}


@pytest.fixture(scope="module")
def round11_records() -> dict[str, str]:
    """The committed records of the breaker's round 11, each read once (proven, as ``records check results`` says)."""
    return {k: json.dumps(_committed(name)) for k, name in _R11.items()}


def _own_command(r, run, old, new):
    assert old in r["runs"][run]["environment"]["command"]
    r["runs"][run]["environment"]["command"] = r["runs"][run]["environment"]["command"].replace(old, new)


def _date_before_runs(r):
    import datetime

    first = min(datetime.datetime.fromisoformat(x["environment"]["date"]) for x in r["runs"].values())
    r["environment"]["date"] = (first - datetime.timedelta(hours=1)).isoformat()


@pytest.mark.parametrize("key,edit,says", [
    # the header's values launch refuses or the record does not hold: n11, x15, n19, n28, n66
    ("L", lambda r: _header(r, "--reference-max-len 16384", "--reference-max-len 900"),
     "reference_max_len 16384, the command asked --reference-max-len 900"),
    ("M", lambda r: _header(r, "--parity", "--parity --reference-max-len 0"),
     "values are none launch takes (--reference-max-len: reference max len 0 is not accepted; accepted: an integer"),
    ("K", lambda r: _header(r, "/tmp/ckq4km/", "/tmp/otherck/"),
     f"{_T}: its own command asks --model /tmp/ckq4km/model-Q4_K_M-00001-of-00004.gguf, the parity run's command "
     f"gives this engine /tmp/otherck/"),
    ("M", lambda r: _header(r, "--parity ", ""), "--backends 'TRITON_MLA_SPARSE,FLASHMLA_SPARSE' takes effect with "
                                                 "--parity only"),
    ("X", lambda r: _header(r, "--max-tokens 16", "--max-tokens 16 --max-model-len 100"),
     "prompt length 900 + max tokens 16 exceeds the engines' max_model_len 100"),
    # each run's --json-out in the writer's one scratch folder, named after the run: n07, n08, h35, h38
    ("M", lambda r: _own_command(r, _FM, "/tmp/sparse-mla-launch-", "/tmp/sparse-mla-launch-zz"),
     "its runs' own --json-out files lie in 2 folders"),
    ("M", lambda r: _own_command(r, _FM, f"{_FM}.json", f"{_T}.json"),
     f"{_FM}: its own command's --json-out /tmp/"),
    ("D", lambda r: _own_command(r, "fp8", "/tmp/diag-vs-engine-", "/tmp/diag-vs-engine-zz"),
     "its runs' own --json-out files lie in 2 folders"),
    ("D", lambda r: _own_command(r, "auto", "/auto.json", "/bfloat16.json"), "the writer names this run's file /tmp/"),
    # counters beyond what the run allows: n01, x04; a header dated before its runs: n06
    ("M", lambda r: r["runs"][_T]["ran"]["speculative"].update(drafts=50000, draft_tokens=50000, accepted_tokens=0,
                                                                acceptance_rate=0.0),
     f"{_T}: ran.speculative: 50000 drafts, more than the 4256 tokens the engine generated in all"),
    ("M", lambda r: r["runs"][_T]["ran"]["launch_plan"]["9.0"].update(smem_per_block=300000),
     "smem_per_block <= smem_per_sm"),
    ("M", _date_before_runs, f"{_T}: its header's date 2026-12-05T23:27:21+00:00 is after the record's"),
    # GLM-5.3-Flash: the criterion's arithmetic, --max-model-len, --engine-timeout: h12, h13, h14
    ("G", lambda r: r["model_config"].update(dtype="float16"),
     "vLLM's for the checkpoint's dtype 'float16' is {'acc': 5.960464477539063e-08, 'store': 0.00048828125"),
    ("G", lambda r: _header(r, "--max-tokens 8", "--max-tokens 8 --max-model-len 100"),
     f"{_FM}: a 160-token prompt and its 8 generated tokens exceed its command's --max-model-len 100"),
    ("G", lambda r: _header(r, "--max-tokens 8", "--max-tokens 8 --engine-timeout 0"),
     "its command's --engine-timeout 0 stops every engine's process at once"),
    # a diagnose_vs_engine run with the generations the tool removes: h37
    ("D", lambda r: r["runs"]["auto"].update(generations=[{"prompt_len": 48, "token_ids": [1, 2, 3, 4],
                                                           "logprobs": [-1.0] * 4}]),
     "runs.auto: generations, which the tool removes"),
])
def test_the_breakers_round_11_on_engine_records(tmp_path, round11_records, key, edit, says):
    """Issue 47, breaker round 11 (batches n, x, h): each edit of a committed record was proven; now each is invalid,
    naming the value and the writer's rule (launch's own argument checks, ``engine_files``, ``counted_tokens``, the
    order run_parity writes in, the GLM tool's dtype, limits and ``pop("generations")``)."""
    rec = json.loads(round11_records[key])
    edit(rec)
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()


def test_round_11s_records_stay_proven(tmp_path, round11_records):
    """The base records of the round as committed: launch's checks, the scratch files, the counters and dates hold."""
    assert [verdict(tmp_path, json.loads(t)).status for t in round11_records.values()] == ["proven"] * len(_R11)


# -- issue 47, round 13 (M1): a record without ran blocks is held to every check that does not read ran ----------------

_TP2 = Path(__file__).resolve().parents[2] / "results" / "h200" / "launch_tp2.json"
_T, _FM = "TRITON_MLA_SPARSE", "FLASHMLA_SPARSE"


@pytest.fixture(scope="module")
def tp2() -> dict:
    """``results/h200/launch_tp2.json``: written 2026-11-30 by the parity writer before ``run_specs`` and ``ran``."""
    return json.loads(_TP2.read_text())


def _mla_impl(r: dict) -> None:
    next(v for v in r["layers"].values() if v.get("layer") == "MLAAttention")["impl"] = "TritonMLASparseImpl"


def _not_argmax(r: dict) -> None:
    g = r["generations"][0]
    g["token_ids"][0] = int(list(g["first_top_logprobs"])[1])


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d.__setitem__("prompt_lengths", [48, 600]), "the record's prompt_lengths are [48, 600]"),      # r01
    (lambda d: d["runs"][_T].__setitem__("backend_requested", _FM), "is not the request"),                   # r03
    (lambda d: d["runs"][_FM]["environment"].__setitem__("gpu", "NVIDIA H100 80GB HBM3"), "gpu 'NVIDIA H100"),  # r07
    (lambda d: d["runs"][_FM]["environment"].__setitem__("date", "2026-12-02T00:11:41+00:00"),
     "not within 6 hours"),                                                                                  # r08
    (lambda d: d["runs"][_T]["throughput"].__setitem__("generated_tokens", 2048), "generated_tokens 2048"),  # r12
    (lambda d: _mla_impl(d["runs"][_FM]), "names impl 'TritonMLASparseImpl'"),                               # r13
    (lambda d: d["runs"][_T]["throughput"].__setitem__("seconds", math.nan), "in nan s"),                    # r14
    (lambda d: d["runs"][_T].__setitem__("tp", 1), "tp 1, the record's 2"),                                  # r23
    (lambda d: d["parity_vs_ours"][_FM]["per_prompt"][0].__setitem__("identical", True), "parity_vs_ours"),  # s05
    (lambda d: d["throughput_tokens_per_s"].__setitem__(_T, 9999.0), "throughput_tokens_per_s"),            # s06
    (lambda d: d["reference_first_token"][_T][0].__setitem__("same_first_token", False),
     "same_first_token False"),                                                                              # s07
    (lambda d: d["runs"][_T]["attention_backends"].append(_FM), "its layers' backends"),                    # s08
    (lambda d: _not_argmax(d["runs"][_T]), "vllm_first_token"),                                              # s09
    (lambda d: d["runs"].__setitem__(f"{_T}+bogus", d["runs"].pop(f"{_T}+eager")), "reference_first_token"),  # s11
    (lambda d: d["serve"].__setitem__("matches_offline", True), "serve: matches_offline True"),
])
def test_a_record_without_ran_is_held_to_what_needs_no_ran(tp2, edit, needle):
    """The breaker's round 13 edits of a record without ``ran`` blocks (each invalid on a record with them): invalid
    too, naming what is not its writer's (before: 'unproven: no ran block', every within-record check skipped)."""
    import copy

    rec = copy.deepcopy(tp2)
    edit(rec)
    v = proof.judge(str(_TP2), rec)
    assert (v.status, needle in v.reason) == ("invalid", True), v.reason


def test_every_committed_record_without_ran_stays_unproven():
    """The older writers' records (no ``ran`` block, most before ``run_specs``) are consistent with themselves under
    the checks above, read in their writer's form: unproven, none invalid."""
    from sparse_mla.records.engine_tables import engine_runs

    root = _TP2.parents[1]
    seen = 0
    for f in sorted(root.rglob("*.json")):
        rec = json.loads(f.read_text())
        if not proof.is_run_record(rec) or any("ran" in r for r in engine_runs(rec).values()):
            continue
        seen += 1
        v = proof.judge(str(f), rec)
        assert v.status == "unproven", (f, v.reason)
    assert seen >= 20


# -- issue 47, round 13 leftovers: an earlier parity record's own commands and --backends; inherited simulation -------

@pytest.mark.parametrize("edit,needle", [
    # r02: a run's own command asks 16 tokens where the parity command gives every engine 32
    (lambda d: d["runs"][_T]["environment"].__setitem__(
        "command", d["runs"][_T]["environment"]["command"].replace("--max-tokens 32", "--max-tokens 16")),
     "TRITON_MLA_SPARSE: its own command asks --max-tokens 16, the parity run's command gives this engine 32"),
    # r19: the parity command's --backends leave out a backend the record ran
    (lambda d: d["environment"].__setitem__(
        "command", d["environment"]["command"].replace("--parity", "--parity --backends TRITON_MLA_SPARSE,"
                                                                   "FLASHMLA_SPARSE")),
     "its runs ran the specs ['FLASHMLA_SPARSE', 'FLASH_ATTN_MLA_SPARSE', 'TRITON_MLA_SPARSE'], the command's "
     "--backends TRITON_MLA_SPARSE,FLASHMLA_SPARSE asks"),
    # round 14 (t21, t28): a run's tp against the command's --tp (absent: 1)
    (lambda d: d["runs"]["FLASHMLA_SPARSE"].__setitem__("tp", 1), "FLASHMLA_SPARSE: tp 1, the command asked --tp 2"),
    (lambda d: d["runs"]["FLASHMLA_SPARSE"].__setitem__("indexer", "TRITON_DSA_INDEXER"),
     "its runs ran the specs ['FLASHMLA_SPARSE+TRITON_DSA_INDEXER', 'FLASH_ATTN_MLA_SPARSE', 'TRITON_MLA_SPARSE'], "
     "the command's --backends (launch default) asks"),
])
def test_an_earlier_parity_record_is_held_to_its_commands(tp2, edit, needle):
    """A parity record without ``run_specs`` is exempt from today's plan (its writer ran other mode variants) but not
    from what every plan keeps: each engine's own command the one its parity command gives it, the runs' specs
    those of ``--backends``."""
    import copy

    rec = copy.deepcopy(tp2)
    edit(rec)
    v = proof.judge(str(_TP2), rec)
    assert (v.status, needle in v.reason) == ("invalid", True), v.reason


_SIM80 = _TP2.parent / "launch_h200_simulated_sm80.json"


@pytest.mark.parametrize("top, run, status", [
    ("12.0", "8.0", "invalid"),        # r22: the record's harness capability is not its engine's
    (None, "8.0", "invalid"),          # an engine simulating where its writer's process did not
    ("8.0", None, "invalid"),
    ("8.0", "8.0", "unproven"),        # as written (no ran blocks: never more than unproven)
    ("8.0", "sim-key", "invalid"),     # round 14 (t40): simulated_capability under a key without its @8.0
])
def test_an_engine_without_its_own_capability_simulates_its_writers(top, run, status):
    import copy

    rec = copy.deepcopy(json.loads(_SIM80.read_text()))
    if run == "sim-key":
        rec["runs"][_T].update(simulated_capability="8.0")
        rec["runs"][_T].pop("simulated")
        run = "8.0"
    for where, cap in ((rec, top), (rec["runs"][_T], run)):
        if "simulated" in where or cap is None:
            where.pop("simulated") if cap is None else where["simulated"].__setitem__("capability", cap)
    v = proof.judge(str(_SIM80), rec)
    assert v.status == status, v.reason
    assert status != "invalid" or "simulated" in v.reason, v.reason


@pytest.mark.parametrize("name, says", [("h200/launch_h200_ran_indexer.json", "run_specs name ['TRITON_MLA_SPARSE', "
                                                                              "'TRITON_MLA_SPARSE+TRITON_DSA_INDEXER'], "
                                                                              "the runs are []"),
                                        ("h200/bench_serve_h200_8heads.json", "which is no run of the record ([])")])
def test_an_engine_record_with_its_runs_emptied_is_held_to_its_summaries(tmp_path, name, says):
    """Breaker round 18's c1_20: ``runs: {}`` beside the run specs and summaries of two runs was "unproven: no engine
    run" (the record's own checks ran only where it had runs); no writer writes it (an interrupted launch writes each
    run with its error)."""
    from pathlib import Path

    rec = json.loads((Path(__file__).resolve().parents[2] / "results" / name).read_text())
    rec["runs"] = {}
    v = verdict(tmp_path, rec)
    assert v.status == "invalid" and says in v.reason, v.line()
