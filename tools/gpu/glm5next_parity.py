"""GLM-5.3-Flash's tiny checkpoint on the GPU: engines against each other and against the float64 reference
(maintainers' harness, not product code; issue 51 item 5, the GPU half).

    python3 tools/gpu/glm5next_parity.py CHECKPOINT OUT.json [--runs auto,TRITON_MLA_SPARSE] \
        [--prompt-lengths 48,900] [--max-tokens 16]

CHECKPOINT is ``sparse-mla make-checkpoint CHECKPOINT --preset glm-5.3-flash`` (vLLM 0.33/0.34). ``--runs`` are run
specs as ``launch --backends`` reads them (:func:`sparse_mla.launch.specs.parse_run_spec`), plus ``auto``: the
attention backend vLLM selects (no ``attention_config``, stock vLLM's choice); ``TRITON_MLA_SPARSE`` is ours (vLLM's
``CUSTOM`` slot; the KPool indexer stays vLLM's: our indexer hook does not reach it); ``@12.0`` simulates that
capability (the harness puts ``tools/gpu/simulate_capability`` on ``PYTHONPATH``). Each run is one eager vLLM engine in
its own process (greedy with log-probs, vLLM's top 20 per step), with the ``ran`` block read in its workers
(:func:`sparse_mla.vllm_plugin.ran.collect`) and its contradictions against what was asked. Then:

* engines against the first run (``launch --parity``'s :func:`~sparse_mla.launch.engine.compare`): token-identical
  or where they first part, the largest log-prob difference before that;
* the first-token criterion (:func:`sparse_mla.launch.first_token.glm5next_first_token_criterion`, Monte Carlo
  arithmetic on the reference: :mod:`sparse_mla.launch.glm5next_rounding`): where the reference's top-2 gap exceeds
  what vLLM's arithmetic may move it, each engine's first token must be the reference's argmax;
* each engine against the float64 reference (:class:`sparse_mla.launch.glm5next_reference.Glm5NextReference`:
  transformers' own model, on this GPU), teacher-forced along the engine's own tokens (one forward of prompt + its
  tokens): at every step the reference's log-prob of the engine's token, the difference to the engine's log-prob of
  it, and the *regret* -- the reference's best log-prob minus that of the engine's token (0 where the engine picked
  the reference's argmax; small where it picked a near-tie); the reference's own greedy tokens and top-2 gaps and
  where the engine's tokens first leave them; the first token's top-k log-probs against the reference's.

``sparse-mla launch --parity`` does not run this model: ``engine.check_model_dir`` refuses GLM-5.3-Flash, its
reference forward (``engine.reference_first_token``) is :class:`~sparse_mla.launch.glm5_reference.Glm5Reference`
(GLM-5's layers: no KDA, MHC or KPool indexer), and its first-token criterion's tolerance comes from Monte Carlo
arithmetic on that reference (:mod:`sparse_mla.launch.forward_rounding`). This tool applies the same criterion to
transformers' model (``first_token_criterion``); ``records check`` judges the record by it. Exits 1 if an engine,
the reference or the criterion failed, or an engine's ``ran`` contradicts what was asked, else 0.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# the tool's parser and command line: records check reads its record's command with the same
from sparse_mla.workbook.glm5next_record import add_arguments, checkpoint_dtype, prompt_lengths, run_specs, tool_command


def run_engine(ckpt: Path, prompts: list[list[int]], max_tokens: int, max_model_len: int, run: str) -> dict:
    """One vLLM engine for the run spec ``run`` (``auto``: vLLM's choice) on ``ckpt``, in this process: per-layer
    backends, greedy generations with log-probs (vLLM's top 20 at each step), ``ran`` and its contradictions."""
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")    # layer_backends travels by pickle
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    from vllm import LLM, SamplingParams

    from sparse_mla.launch.engine import generations
    from sparse_mla.launch.specs import attention_config, parse_run_spec, with_simulated
    from sparse_mla.vllm_plugin.ran import collect, contradictions, layer_backends

    spec = parse_run_spec(run)
    kw = dict(model=str(ckpt), enforce_eager=True, max_model_len=max_model_len, gpu_memory_utilization=0.35, seed=0,
              max_num_seqs=8)
    ac = attention_config(spec.backend)
    if ac:
        kw["attention_config"] = ac
    t0 = time.time()
    llm = LLM(**kw)
    init_s = time.time() - t0
    layers = llm.collective_rpc(layer_backends)[0]
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=20, ignore_eos=True, seed=0)
    rec = {**spec.describe(), "engine_init_s": round(init_s, 1), "layers": layers,
           "attention_backends": sorted({v["backend"] for v in layers.values() if v["backend"]}),
           "generations": generations(llm, prompts, sp)}
    try:        # GLM-5's reading of the workers; GLM-5.3-Flash's KPool indexer and KDA layers are not all in it
        ran = llm.collective_rpc(collect)[0]
        rec["ran"] = ran
        rec["ran_contradictions"] = contradictions({**spec.describe(), "capability": spec.capability}, ran)
    except Exception as e:  # noqa: BLE001 - the record says why
        rec["ran_error"] = f"{type(e).__name__}: {e}"
    del llm
    return with_simulated(rec)


def engine_in_child(a, prompts: list[list[int]], run: str, scratch: Path) -> dict:
    """:func:`run_engine` in a fresh Python process with the run's environment (the indexer switch, a simulated
    capability): a GPU context and vLLM's process state never outlive one engine."""
    from sparse_mla.launch.specs import parse_run_spec

    from sparse_mla.vllm_plugin.switches import COUNT_ENV

    env = {**os.environ, COUNT_ENV: "1"}      # vLLM's DeepGEMM calls counted too (KPool's included), as launch does
    for k, v in parse_run_spec(run).env.items():
        env.pop(k, None) if v is None else env.__setitem__(k, v)
    pin, pout = scratch / f"prompts_{len(prompts)}.json", scratch / f"engine_{run.replace('@', '_at_')}.json"
    pin.write_text(json.dumps(prompts))
    cmd = [sys.executable, str(Path(__file__).resolve()), str(a.checkpoint), str(pout), "--engine", run,
           "--prompts-json", str(pin), "--max-tokens", str(a.max_tokens), "--max-model-len", str(a.max_model_len)]
    try:
        done = subprocess.run(cmd, env=env, timeout=a.engine_timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"run": run, "error": f"the engine's process ran past {a.engine_timeout} s"}
    sys.stdout.write(done.stdout[-2000:])
    if done.returncode != 0 or not pout.exists():
        return {"run": run, "error": f"the engine's process exited {done.returncode}", "stderr": done.stderr[-4000:]}
    return json.loads(pout.read_text())


def judge(ref, prompt: list[int], gen: dict, max_tokens: int) -> dict:
    """The reference's view of one prompt's generation (module docstring)."""
    import torch

    toks = gen["token_ids"]
    logits = ref.logits(prompt + toks[:-1]) if len(toks) > 1 else ref.logits(prompt)
    steps = []
    for i, t in enumerate(toks):
        lp = torch.log_softmax(logits[len(prompt) - 1 + i], -1)
        steps.append({"token": t, "reference_logprob": float(lp[t]), "vllm_logprob": gen["logprobs"][i],
                      "abs_diff": abs(float(lp[t]) - gen["logprobs"][i]), "regret": float(lp.max() - lp[t]),
                      "reference_argmax": int(lp.argmax())})
    own = ref.greedy(prompt, max_tokens)
    first = own["first_logprobs"]
    top = {int(k): v for k, v in gen["first_top_logprobs"].items()}
    diverge = next((i for i, (a, b) in enumerate(zip(toks, own["token_ids"])) if a != b), None)
    return {"prompt_len": len(prompt), "steps": steps, "max_regret": max(s["regret"] for s in steps),
            "max_abs_logprob_diff": max(s["abs_diff"] for s in steps),
            "reference_greedy": {k: own[k] for k in ("token_ids", "logprobs", "top2_gaps")},
            "first_divergence": diverge,
            "reference_gap_at_divergence": None if diverge is None else own["top2_gaps"][diverge],
            "first_token": {"vllm": toks[0], "reference_argmax": int(first.argmax()),
                            "reference_top2_gap": own["top2_gaps"][0],
                            "max_abs_top_k_logprob_diff": max(abs(v - float(first[k])) for k, v in top.items())}}


def main(argv: list[str]) -> int:
    p = add_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    a = p.parse_args(argv)
    from sparse_mla.files import atomic_write_text

    if a.engine:
        prompts = json.loads(a.prompts_json.read_text())
        atomic_write_text(a.out, json.dumps(run_engine(a.checkpoint, prompts, a.max_tokens, a.max_model_len,
                                                       a.engine), indent=1, default=str))
        return 0
    from sparse_mla.launch.engine import prompt_ids
    from sparse_mla.records import environment

    from sparse_mla.launch.specs import check_simulated_indexer, parse_run_spec

    runs = run_specs(a)
    for r in runs:            # a bad name, or a simulation of vLLM's DeepGEMM indexer, stops here, before any engine
        if r != "auto":
            check_simulated_indexer(parse_run_spec(r))
    prompts = prompt_ids(a.checkpoint, prompt_lengths(a))
    rec = {"what": "GLM-5.3-Flash tiny checkpoint: engines against the first run and against the float64 reference "
                   "(transformers' model), and the first-token criterion", "environment": environment(
                       tool_command(argv)),
           "model_config": json.loads((a.checkpoint / "config.json").read_text()), "max_tokens": a.max_tokens,
           "runs": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for run in runs:
            rec["runs"][run] = r = engine_in_child(a, prompts, run, Path(scratch))
            print(f"{run}: {r.get('error') or r['attention_backends']}; contradictions "
                  f"{r.get('ran_contradictions')}", flush=True)
            atomic_write_text(a.out, json.dumps(rec, indent=1, default=str))
    failed = finish(rec, a.checkpoint, prompts, a.max_tokens)
    atomic_write_text(a.out, json.dumps(rec, indent=1, default=str))
    return 1 if failed else 0


def finish(rec: dict, ckpt: Path, prompts: list[list[int]], max_tokens: int) -> bool:
    """Engines against the first run, then each against the float64 reference, into ``rec``; ``True`` where
    something failed (an engine, its ``ran``, the reference)."""
    import torch

    from sparse_mla.launch.engine import compare
    from sparse_mla.launch.glm5next_reference import Glm5NextReference

    ok = {k: v for k, v in rec["runs"].items() if "error" not in v}
    failed = len(ok) < len(rec["runs"]) or any(v.get("ran_contradictions") for v in ok.values())
    base = next(iter(rec["runs"]))
    if base in ok:
        rec["engine_agreement"] = {k: compare(ok[base], v) for k, v in ok.items() if k != base}
        print("agreement with", base, json.dumps(rec["engine_agreement"]), flush=True)
    try:
        ref = Glm5NextReference.from_pretrained(ckpt, device="cuda" if torch.cuda.is_available() else "cpu")
        rec["reference"] = {k: [judge(ref, pr, g, max_tokens) for pr, g in zip(prompts, v["generations"])]
                            for k, v in ok.items()}
        for k, rs in rec["reference"].items():
            for r in rs:
                print(f"{k}, {r['prompt_len']} tokens: max regret {r['max_regret']:.4g}, max |logprob diff| "
                      f"{r['max_abs_logprob_diff']:.4g}, first divergence {r['first_divergence']} (reference gap "
                      f"{r['reference_gap_at_divergence']})", flush=True)
    except Exception as e:  # noqa: BLE001 - the record says why
        rec["reference"], failed = {"error": f"{type(e).__name__}: {e}",
                                    "traceback": traceback.format_exc()[-4000:]}, True
        return failed
    return criterion(rec, ref, prompts, ok) or failed


def criterion(rec: dict, ref, prompts: list[list[int]], ok: dict[str, dict]) -> bool:
    """The first-token criterion (:func:`sparse_mla.launch.first_token.glm5next_first_token_criterion`) of the runs
    that ran, into ``rec``; ``True`` where it failed or could not be computed."""
    from sparse_mla.launch.first_token import glm5next_first_token_criterion

    t0 = time.time()
    try:
        crit = glm5next_first_token_criterion(ref, prompts, ok, checkpoint_dtype(rec["model_config"]))
    except Exception as e:  # noqa: BLE001 - the record says why
        rec["first_token_criterion"] = {"error": f"{type(e).__name__}: {e}"}
        return True
    rec["first_token_criterion"] = crit
    print(f"criterion ({time.time() - t0:.0f} s): {json.dumps(crit['per_prompt'])}; failures {crit['failures']}",
          flush=True)
    return bool(crit["failures"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
