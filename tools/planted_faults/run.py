#!/usr/bin/env python3
"""Planted faults (issue 49): show that the test suite catches each fault of ``faults.py``.

Makes a throwaway git worktree of HEAD, checks that each venv imports ``sparse_mla`` from that copy, runs every
selection once on the clean copy (the baseline: a selection must be green before a red means anything), then for each
fault alone: applies its edits (each ``old`` exactly once, or the tool stops), runs its selections with a time limit,
restores the files and checks the copy is clean again. Prints one row per selection and a Markdown summary; exits 0
only if every fault turned at least one selection red.

    python tools/planted_faults/run.py [--only N ...] [--keep] [--no-baseline] [--check]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faults import FAULTS, Edit, Fault, Selection  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"(\d+) (failed|passed|skipped|deselected|errors?|xfailed|xpassed)")


@dataclass
class Outcome:
    """One pytest run: exit code, counts by outcome, failing node ids (first first), seconds, verdict."""
    rc: int
    counts: dict[str, int] = field(default_factory=dict)
    failing: list[str] = field(default_factory=list)
    seconds: float = 0.0
    verdict: str = ""


def git(*args: str, cwd: Path = REPO) -> str:
    """Run git in ``cwd``; returns stdout, raises on failure."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_copy(path: Path) -> None:
    """A detached worktree of HEAD at ``path`` (which must not exist)."""
    if path.exists():
        raise SystemExit(f"{path} exists; remove it or pass another --copy")
    git("worktree", "add", "--detach", str(path), "HEAD")


def remove_copy(path: Path) -> None:
    """Remove the worktree made by :func:`make_copy`."""
    git("worktree", "remove", "--force", str(path))


def run_env(copy: Path) -> dict[str, str]:
    """The environment of every run: the copy's ``lib`` first on the path, no bytecode written (a same-size edit
    within one second must not be served from a stale .pyc)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(copy / "lib"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def check_imports(copy: Path, venvs: set[str]) -> None:
    """Stop unless each venv's python imports ``sparse_mla`` from the copy (not the editable install of the repo)."""
    for venv in sorted(venvs):
        py = REPO / venv / "bin" / "python"
        out = subprocess.run([str(py), "-c", "import sparse_mla; print(sparse_mla.__file__)"], cwd=copy,
                             env=run_env(copy), capture_output=True, text=True, timeout=300)
        got = out.stdout.strip()
        if out.returncode or not got.startswith(str(copy / "lib") + os.sep):
            raise SystemExit(f"{venv}: sparse_mla imported from {got or out.stderr[-500:]!r}, not from {copy}/lib")
        print(f"{venv}: sparse_mla from {got}")


def apply_edits(copy: Path, edits: tuple[Edit, ...]) -> dict[Path, str]:
    """Apply each edit (its ``old`` exactly once, else SystemExit after restoring); returns the original texts."""
    originals: dict[Path, str] = {}
    try:
        for e in edits:
            f = copy / e.path
            text = f.read_text()
            originals.setdefault(f, text)
            n = text.count(e.old)
            if n != 1:
                raise SystemExit(f"fault edit does not apply: {e.old!r} occurs {n} times in {e.path} (want 1); "
                                 f"the code moved: update tools/planted_faults/faults.py")
            f.write_text(text.replace(e.old, e.new))
    except BaseException:
        restore(copy, originals)
        raise
    return originals


def restore(copy: Path, originals: dict[Path, str]) -> None:
    """Write the original texts back and check that git sees no change in the copy's tracked files."""
    for f, text in originals.items():
        f.write_text(text)
    changed = git("status", "--porcelain", "--untracked-files=no", cwd=copy).strip()
    if changed:
        raise SystemExit(f"the copy is not clean after restoring:\n{changed}")


def parse_output(text: str) -> tuple[dict[str, int], list[str]]:
    """Counts from pytest's last summary line and the node ids of its FAILED/ERROR lines, in order."""
    counts: dict[str, int] = {}
    for line in reversed(text.splitlines()):
        if " in " in line and SUMMARY.search(line):
            counts = {k.rstrip("s") if k.startswith("error") else k: int(n) for n, k in SUMMARY.findall(line)}
            break
    failing = [line.split(" ", 1)[1].split(" - ", 1)[0].strip() for line in text.splitlines()
               if line.startswith(("FAILED ", "ERROR "))]
    return counts, failing


def run_selection(copy: Path, sel: Selection, timeout: float, log: Path) -> Outcome:
    """Run one selection in the copy under ``timeout`` seconds (the process group is killed past it); the output
    goes to ``log``. Verdict: GREEN (rc 0), RED (tests failed, or errors at collection), TIMEOUT, or ERROR."""
    cmd = [str(REPO / sel.venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-q", *sel.args]
    t0 = time.monotonic()
    with log.open("w") as out:
        out.write(f"$ cd {copy} && {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=copy, env=run_env(copy), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -1
    counts, failing = parse_output(log.read_text())
    o = Outcome(rc, counts, failing, time.monotonic() - t0)
    if rc == -1:
        o.verdict = "TIMEOUT"
    elif rc == 0:
        o.verdict = "GREEN"
    elif rc == 1 or (rc == 2 and counts.get("error")):
        o.verdict = "RED"
    else:
        o.verdict = f"ERROR(rc {rc})"
    return o


def safe(label: str) -> str:
    """A label as a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)


def counts_text(o: Outcome) -> str:
    """``2 failed / 50 passed`` style counts."""
    keys = ("failed", "error", "passed", "skipped")
    return " / ".join(f"{o.counts[k]} {k}" for k in keys if o.counts.get(k)) or "-"


def run_fault(copy: Path, fault: Fault, timeout: float, logs: Path, baseline: dict[Selection, Outcome]) -> list:
    """Apply one fault, run its selections, restore. Returns ``[(selection, outcome), ...]``; an outcome's verdict
    becomes INCONCLUSIVE where the same selection was not GREEN on the clean copy."""
    originals = apply_edits(copy, fault.edits)
    rows = []
    try:
        for sel in fault.selections:
            log = logs / f"fault{fault.number}_{safe(sel.label)}.log"
            o = run_selection(copy, sel, timeout, log)
            if sel in baseline and baseline[sel].verdict != "GREEN":
                o.verdict = f"INCONCLUSIVE (baseline {baseline[sel].verdict})"
            print(f"  fault {fault.number} {sel.label}: {o.verdict}, {counts_text(o)}, {o.seconds:.0f} s"
                  + (f", first: {o.failing[0]}" if o.failing else ""), flush=True)
            rows.append((sel, o))
    finally:
        restore(copy, originals)
    return rows


def run_baseline(copy: Path, faults: list[Fault], timeout: float, logs: Path) -> dict[Selection, Outcome]:
    """Every selection of ``faults`` once on the clean copy."""
    out: dict[Selection, Outcome] = {}
    for fault in faults:
        for sel in fault.selections:
            if sel not in out:
                o = run_selection(copy, sel, timeout, logs / f"baseline_{safe(sel.label)}.log")
                print(f"  baseline {sel.label}: {o.verdict}, {counts_text(o)}, {o.seconds:.0f} s", flush=True)
                out[sel] = o
    return out


def report(results: dict[int, list], faults: list[Fault], baseline: dict[Selection, Outcome]) -> bool:
    """Print the per-selection table and the per-fault Markdown summary; True when every fault was caught."""
    print("\n| fault | selection | venv | baseline | with fault | counts | first failing test | s |")
    print("|---|---|---|---|---|---|---|---|")
    for fault in faults:
        for sel, o in results[fault.number]:
            base = baseline[sel].verdict if sel in baseline else "-"
            print(f"| {fault.number} | {sel.label} | {sel.venv} | {base} | {o.verdict} | {counts_text(o)} | "
                  f"{o.failing[0] if o.failing else '-'} | {o.seconds:.0f} |")
    print("\n| # | fault | result | caught by (first failing test) | s |")
    print("|---|---|---|---|---|")
    all_caught = True
    for fault in faults:
        reds = [(s, o) for s, o in results[fault.number] if o.verdict == "RED"]
        secs = sum(o.seconds for _, o in results[fault.number])
        all_caught &= bool(reds)
        who = "; ".join(f"{o.failing[0] if o.failing else s.label} ({s.label})" for s, o in reds[:2]) or "-"
        print(f"| {fault.number} | {fault.name} | {'RED' if reds else 'GREEN'} | {who} | {secs:.0f} |")
    return all_caught


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", type=int, nargs="+", metavar="N", help="run only these fault numbers")
    p.add_argument("--keep", action="store_true", help="keep the copy (and print its path) at the end")
    p.add_argument("--copy", type=Path, help="where to put the worktree (default: a new folder under /tmp)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per pytest run (default 900)")
    p.add_argument("--no-baseline", action="store_true", help="skip the runs on the clean copy")
    p.add_argument("--check", action="store_true", help="only check that every edit applies exactly once")
    p.add_argument("--logs", type=Path, help="folder for the pytest logs (default: a new folder under /tmp)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Make the copy, run the baseline and each fault, report, clean up; 0 only if every fault was caught."""
    args = parse_args(argv)
    faults = [f for f in FAULTS if not args.only or f.number in args.only]
    if not faults:
        raise SystemExit(f"no fault numbered {args.only}; defined: {[f.number for f in FAULTS]}")
    copy = args.copy or Path(tempfile.mkdtemp(prefix="planted_faults_wt_")) / "copy"
    logs = args.logs or Path(tempfile.mkdtemp(prefix="planted_faults_logs_"))
    logs.mkdir(parents=True, exist_ok=True)
    if git("status", "--porcelain", "--untracked-files=no", "--", "lib", "tests").strip():
        print("note: lib/ or tests/ have uncommitted changes; the copy is HEAD and does not include them")
    t0 = time.monotonic()
    make_copy(copy)
    try:
        rev = git("rev-parse", "--short", "HEAD", cwd=copy).strip()
        print(f"copy {copy} at {rev}, logs {logs}", flush=True)
        for fault in faults:                                  # every edit must apply before any time is spent
            restore(copy, apply_edits(copy, fault.edits))
        if args.check:
            print("every edit applies exactly once")
            return 0
        check_imports(copy, {s.venv for f in faults for s in f.selections})
        baseline = {} if args.no_baseline else run_baseline(copy, faults, args.timeout, logs)
        results = {f.number: run_fault(copy, f, args.timeout, logs, baseline) for f in faults}
        caught = report(results, faults, baseline)
        print(f"\n{dt.datetime.now():%Y-%m-%d %H:%M} revision {rev}: "
              f"{'every fault caught' if caught else 'SOME FAULT MISSED'}; {time.monotonic() - t0:.0f} s in all")
        return 0 if caught else 1
    finally:
        if args.keep:
            print(f"kept the copy at {copy}")
        else:
            remove_copy(copy)
            if args.copy is None:
                copy.parent.rmdir()                           # the mkdtemp folder around it


if __name__ == "__main__":
    sys.exit(main())
