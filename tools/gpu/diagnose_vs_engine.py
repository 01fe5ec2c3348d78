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

from sparse_mla.workbook.diagnosis import (differences, engine_record_file, engine_words, entry,  # records check
                                           observed, predicted, tool_arguments, tool_command)     # reads them alike

__all__ = ["differences", "engine_record_file", "engine_words", "entry", "main", "observed", "predicted",
           "tool_arguments", "tool_command"]


def main(argv: list[str]) -> int:
    from sparse_mla.diagnose import diagnose
    from sparse_mla.files import atomic_write_text
    from sparse_mla.records import environment

    ckpt, out, kvs = tool_arguments(argv)
    out = Path(out)
    rec = {"what": "sparse-mla diagnose --capability local against a real engine (launch --backend auto) per KV "
                   "dtype", "environment": environment(tool_command("tools/gpu", argv)), "runs": {},
           "diagnosis": {}, "differences": {}}
    tmp = Path(tempfile.mkdtemp(prefix="diag-vs-engine-"))
    for kv in kvs:
        diag = diagnose(ckpt, "local", kv, with_plugin=True)
        rec["diagnosis"][kv] = entry(diag)
        f = engine_record_file(tmp, kv)
        r = subprocess.run([sys.executable, "-m", "sparse_mla", *engine_words(ckpt, kv, str(f))], capture_output=True,
                           text=True)
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
