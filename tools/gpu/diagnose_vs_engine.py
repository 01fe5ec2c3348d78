"""The diagnosis against the real device (maintainers' harness, not product code): on a GPU machine,
``sparse-mla diagnose --capability local`` predicts, for each KV-cache dtype, the attention backend vLLM selects, the
cache dtype it allocates and the indexer's kernels; then a real engine on the same GPU (``sparse-mla launch --backend
auto``, vLLM's own choice, the plugin installed as users install it) runs, and its ``ran`` block -- read in the
engine's workers -- says what vLLM did. The probe platform is thereby checked once by something other than itself.

    python3 tools/gpu/diagnose_vs_engine.py CHECKPOINT OUT.json [KV ...]   # default: every diagnosed KV dtype

Writes one record (header, the predictions, every engine's record with its ``ran``, the comparisons) and exits 1 if
any prediction differs from what ran or an engine failed.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def predicted(diag: dict) -> dict:
    """What a diagnosis record says the engine will do: the attention backend, the cache dtype string of its MLA
    layers (``configured_kv_cache_dtype``: what ``layer.kv_cache_dtype`` reads in the engine, ``auto`` unresolved --
    like with like; the resolved dtype is ``effective_kv_cache_dtype``, kept in the record beside it) and who computes
    the indexer's logits (``"triton"`` where the plugin's Triton indexer replaces DeepGEMM's)."""
    ix = diag.get("indexer") or {}
    ours = ix.get("with_plugin") == "TRITON_DSA_INDEXER"
    return {"attention": diag.get("selected"), "kv_cache_dtype": diag.get("configured_kv_cache_dtype"),
            "indexer": "triton" if ours else "deepgemm", "engine_starts": diag.get("engine_starts")}


def observed(engine: dict) -> dict:
    """The same three facts, read off an engine record (its ``layers`` and its ``ran`` block)."""
    ran = engine.get("ran") or {}
    att = sorted(ran.get("attention") or {})
    kv = sorted({v.get("kv_cache_dtype") for v in (engine.get("layers") or {}).values()
                 if v.get("backend") in att and v.get("kv_cache_dtype")})
    calls = ran.get("indexer") or {}
    return {"attention": att[0] if len(att) == 1 else att, "kv_cache_dtype": kv[0] if len(kv) == 1 else kv,
            "indexer": "triton" if calls.get("triton") else "deepgemm" if calls.get("deepgemm") else None,
            "engine_starts": "error" not in engine}


def differences(pred: dict, obs: dict) -> list[str]:
    """One line per fact the prediction got wrong (``[]``: the diagnosis said what the engine did)."""
    return [f"{k}: diagnosed {pred[k]!r}, the engine ran {obs[k]!r}" for k in pred if pred[k] != obs.get(k)]


def main(argv: list[str]) -> int:
    from sparse_mla.diagnose import diagnose
    from sparse_mla.diagnose.request import KV_CACHE_DTYPES
    from sparse_mla.files import atomic_write_text
    from sparse_mla.records import environment

    ckpt, out, kvs = Path(argv[0]), Path(argv[1]), argv[2:] or list(KV_CACHE_DTYPES)
    rec = {"what": "sparse-mla diagnose --capability local against a real engine (launch --backend auto) per KV "
                   "dtype", "environment": environment(" ".join(["python3", "tools/gpu/diagnose_vs_engine.py",
                                                                 *argv])), "runs": {}, "diagnosis": {},
           "differences": {}}
    tmp = Path(tempfile.mkdtemp(prefix="diag-vs-engine-"))
    for kv in kvs:
        diag = diagnose(str(ckpt), "local", kv, with_plugin=True)
        rec["diagnosis"][kv] = {"predicted": predicted(diag), "headline": diag.get("headline"),
                                "effective_kv_cache_dtype": diag.get("effective_kv_cache_dtype"),
                                "blockers": diag.get("blockers")}
        f = tmp / f"{kv}.json"
        r = subprocess.run([sys.executable, "-m", "sparse_mla", "launch", "--model", str(ckpt), "--backend", "auto",
                            "--kv-cache-dtype", kv, "--prompt-lengths", "48,900", "--max-tokens", "4",
                            "--json-out", str(f)], capture_output=True, text=True)
        engine = json.loads(f.read_text()) if f.is_file() else {"error": f"exit {r.returncode}",
                                                                   "log_tail": (r.stdout + r.stderr)[-3000:]}
        engine.pop("generations", None)
        rec["runs"][kv] = engine
        rec["differences"][kv] = differences(rec["diagnosis"][kv]["predicted"], observed(engine))
        print(f"{kv}: {rec['diagnosis'][kv]['predicted']} -> {observed(engine)}: "
              f"{rec['differences'][kv] or 'as diagnosed'}", flush=True)
        atomic_write_text(out, json.dumps(rec, indent=1, default=str))
    return 1 if any(rec["differences"].values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
