"""GLM-5.3-Flash's tiny checkpoint on the GPU against its float64 reference (maintainers' harness, not product code;
issue 51 item 5, the GPU half).

    python3 tools/gpu/glm5next_parity.py CHECKPOINT OUT.json [--prompt-lengths 48,900] [--max-tokens 16]

CHECKPOINT is ``sparse-mla make-checkpoint CHECKPOINT --preset glm-5.3-flash`` (vLLM 0.33/0.34). One vLLM engine with
the attention backend vLLM selects (no ``attention_config``: stock vLLM, the plugin's backend is not asked for), eager,
greedy with log-probs; then the float64 reference (:class:`sparse_mla.launch.glm5next_reference.Glm5NextReference`:
transformers' own model, on this GPU) on the same prompts:

* along vLLM's own tokens (teacher forcing, one forward of prompt + vLLM's tokens): at every step the reference's
  log-prob of vLLM's token, the difference to vLLM's log-prob of it, and the *regret* -- the reference's best log-prob
  minus that of vLLM's token (0 where vLLM picked the reference's argmax; small where it picked a near-tie);
* the reference's own greedy tokens and top-2 gaps, and where vLLM's tokens first leave them;
* the first token: vLLM's top-k log-probs against the reference's at the same ids (``launch --parity``'s measure).

``sparse-mla launch --parity`` does not run this model: ``engine.check_model_dir`` refuses GLM-5.3-Flash, its
reference forward (``engine.reference_first_token``) is :class:`~sparse_mla.launch.glm5_reference.Glm5Reference`
(GLM-5's layers: no KDA, MHC or KPool indexer), and its first-token criterion's tolerance comes from Monte Carlo
arithmetic on that reference (:mod:`sparse_mla.launch.forward_rounding`). So this record gives the numbers and no
verdict: no tolerance for this model is derived yet. Exits 1 if the engine or the reference failed, else 0.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path


def run_vllm(ckpt: Path, prompts: list[list[int]], max_tokens: int, max_model_len: int) -> dict:
    """vLLM's engine on ``ckpt`` with the backend it selects: per-layer backends and greedy generations with
    log-probs (vLLM's top 20 at each step)."""
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")    # layer_backends travels by pickle
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    from vllm import LLM, SamplingParams

    from sparse_mla.launch.engine import generations
    from sparse_mla.vllm_plugin.ran import layer_backends

    t0 = time.time()
    llm = LLM(model=str(ckpt), enforce_eager=True, max_model_len=max_model_len, gpu_memory_utilization=0.35, seed=0,
              max_num_seqs=8)
    init_s = time.time() - t0
    layers = llm.collective_rpc(layer_backends)[0]
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=20, ignore_eos=True, seed=0)
    gens = generations(llm, prompts, sp)
    del llm
    return {"engine_init_s": round(init_s, 1), "layers": layers,
            "attention_backends": sorted({v["backend"] for v in layers.values() if v["backend"]}),
            "generations": gens}


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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--prompt-lengths", default="48,900")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--max-model-len", type=int, default=4096)
    a = p.parse_args(argv)
    import torch

    from sparse_mla.files import atomic_write_text
    from sparse_mla.launch.engine import prompt_ids
    from sparse_mla.launch.glm5next_reference import Glm5NextReference
    from sparse_mla.records import environment

    prompts = prompt_ids(a.checkpoint, [int(n) for n in a.prompt_lengths.split(",")])
    rec = {"what": "GLM-5.3-Flash tiny checkpoint: vLLM's selected backend against the float64 reference "
                   "(transformers' model); numbers only, no verdict", "environment": environment(
                       " ".join(["python3", "tools/gpu/glm5next_parity.py", *argv])),
           "checkpoint": json.loads((a.checkpoint / "config.json").read_text()), "max_tokens": a.max_tokens}
    failed = False
    try:
        rec["vllm"] = run_vllm(a.checkpoint, prompts, a.max_tokens, a.max_model_len)
        print("vLLM ran:", rec["vllm"]["attention_backends"], flush=True)
    except Exception as e:  # noqa: BLE001 - the record says why
        rec["vllm"], failed = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}, True
    atomic_write_text(a.out, json.dumps(rec, indent=1, default=str))
    if not failed:
        try:
            ref = Glm5NextReference.from_pretrained(a.checkpoint, device="cuda" if torch.cuda.is_available() else "cpu")
            rec["reference"] = [judge(ref, pr, g, a.max_tokens) for pr, g in zip(prompts, rec["vllm"]["generations"])]
            for r in rec["reference"]:
                print(f"{r['prompt_len']} tokens: max regret {r['max_regret']:.4g}, max |logprob diff| "
                      f"{r['max_abs_logprob_diff']:.4g}, first divergence {r['first_divergence']} (reference gap "
                      f"{r['reference_gap_at_divergence']})", flush=True)
        except Exception as e:  # noqa: BLE001
            rec["reference"], failed = {"error": f"{type(e).__name__}: {e}",
                                        "traceback": traceback.format_exc()[-4000:]}, True
    atomic_write_text(a.out, json.dumps(rec, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
