"""``sparse-mla records check``: which records prove what ran.

Every JSON object under the given paths (default ``results/``) is a run record, except the generated summaries
(``summary.json``: only ``notebooks`` / ``profiles``). Each run record gets one verdict:

* ``proven``: every engine run in it carries a ``ran`` block (:mod:`sparse_mla.vllm_plugin.ran`, read inside the
  engine) that nothing in its request contradicts, and the record's header has a command, a date, the versions
  (torch, Triton, vLLM) and a git revision;
* ``unproven: REASON``: no ``ran`` block (every record made before the block existed, the 2026-12-01 ones included;
  benchmark records of single kernels, which start no engine); gaps in its header are listed too;
* ``invalid: REASON``: a record that claims proof (a ``ran`` block) with a header gap, or whose ``ran`` contradicts
  what was asked (:func:`sparse_mla.vllm_plugin.ran.contradictions`), or a file that is not readable JSON.

The command exits 1 if any record is invalid.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError
from ..vllm_plugin.ran import contradictions

HEADER = ("command", "date", "torch", "triton", "vllm", "revision")


@dataclass(frozen=True)
class Verdict:
    path: str
    status: str            # "proven" | "unproven" | "invalid"
    reason: str = ""

    def line(self) -> str:
        return f"{self.path}: {self.status}" + (f": {self.reason}" if self.reason else "")


def header_gaps(rec: dict) -> list[str]:
    """The header fields (:data:`HEADER`) a record lacks, read from its ``environment`` (or the top level, where the
    earliest records kept them)."""
    env = rec.get("environment")
    if isinstance(env, str) or env is None:
        env = {}
    return [f"no {k}" for k in HEADER if not _known(env.get(k)) and not _known(rec.get(k))]


def _known(value) -> bool:
    return bool(value) and not str(value).startswith(("unknown", "unavailable"))


def engine_runs(rec: dict) -> dict[str, dict]:
    """``{name: run}`` of a record's engine runs: its ``runs`` (a parity record), or the record itself where it is one
    engine's record (``layers`` at the top level)."""
    runs = rec.get("runs")
    if isinstance(runs, dict):
        return {k: v for k, v in runs.items() if isinstance(v, dict)}
    return {"engine": rec} if "layers" in rec else {}


def asked(run: dict, rec: dict) -> dict:
    """What an engine run was asked for: its run spec and, where the record says so, a simulated capability."""
    sim = run.get("simulated") or rec.get("simulated") or {}
    return {"backend_requested": run.get("backend_requested"), "indexer": run.get("indexer", "vllm"),
            "capability": sim.get("capability") if isinstance(sim, dict) else None}


SUMMARY_KEYS = {"notebooks", "profiles"}


def is_run_record(obj) -> bool:
    """Every JSON object but the workbook's generated summaries (``summary.json``, whose only keys are
    :data:`SUMMARY_KEYS`)."""
    return isinstance(obj, dict) and bool(obj) and not set(obj) <= SUMMARY_KEYS


def judge(path: str, obj) -> Verdict:
    """The verdict on one run record (module docstring)."""
    gaps = header_gaps(obj)
    runs = engine_runs(obj)
    failed = [r for r in runs.values() if "error" in r]
    live = {k: r for k, r in runs.items() if "error" not in r}
    with_ran = {k: r for k, r in live.items() if "ran" in r}
    if not with_ran:
        what = "no engine run" if not runs else "no ran block"
        return Verdict(path, "unproven", "; ".join([what, *gaps]))
    if gaps:
        return Verdict(path, "invalid", "; ".join(gaps))
    _vllm_importable()
    bad = [f"{k}: {c}" for k, r in with_ran.items() for c in contradictions(asked(r, obj), r["ran"])]
    if bad:
        return Verdict(path, "invalid", "; ".join(bad))
    missing = [k for k in live if k not in with_ran]
    if missing or failed:
        parts = ([f"no ran block in {', '.join(missing)}"] if missing else []) + \
                ([f"{len(failed)} engine(s) failed"] if failed else [])
        return Verdict(path, "unproven", "; ".join(parts))
    return Verdict(path, "proven", f"{len(with_ran)} engine run(s) with ran")


def _vllm_importable() -> None:
    """vLLM's CUDA platform rules (the default indexer per capability) importable on a machine without the NVIDIA
    driver: the diagnosis's extension stand-ins (:func:`sparse_mla.diagnose.probe.load_vllm_extensions`)."""
    from ..diagnose.probe import load_vllm_extensions

    load_vllm_extensions()


def record_files(paths: list[str]) -> list[Path]:
    """Every ``*.json`` under ``paths`` (files or folders), sorted. Raises :class:`UserInputError` naming a path that
    does not exist."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.rglob("*.json"))
        elif p.is_file():
            out.append(p)
        else:
            raise UserInputError(f"records path {str(p)!r} does not exist; accepted: record files or folders")
    return out


def check(paths: list[str]) -> list[Verdict]:
    """Verdicts on the run records under ``paths``; files that are JSON but not run records are left out."""
    verdicts = []
    for f in record_files(paths):
        try:
            obj = json.loads(f.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            verdicts.append(Verdict(str(f), "invalid", f"not readable JSON ({type(e).__name__})"))
            continue
        if is_run_record(obj):
            verdicts.append(judge(str(f), obj))
    return verdicts


def add_cli(sub) -> None:
    p = sub.add_parser("records", help="check which records under results/ prove what ran",
                       description="records check [PATH ...]: one line per run record (proven / unproven / "
                                   "invalid: REASON); exit 1 if any is invalid.")
    p.add_argument("action", choices=["check"], help="check: verdict per record")
    p.add_argument("paths", nargs="*", default=["results"], help="record files or folders (default: results)")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    verdicts = check(args.paths)
    for v in verdicts:
        print(v.line())
    counts = {s: sum(v.status == s for v in verdicts) for s in ("proven", "unproven", "invalid")}
    print(f"{len(verdicts)} run records: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["invalid"] else 0
