"""``sparse-mla records check``: which records prove what ran.

Every JSON object under the given paths (default ``results/``) with a header, engine runs or an engine request
(:data:`RECORD_KEYS`) is a run record; other JSON files (summaries, a checkpoint's config) are counted as skipped, and
non-regular files inside a folder (a FIFO) are not opened. Each run record gets one verdict:

* ``proven``: every engine run in it carries a ``ran`` block (:mod:`sparse_mla.vllm_plugin.ran`, read inside the
  engine) that nothing in its request contradicts (backend per layer, indexer kind and its calls, weights' load
  format, simulated capability, speculation), nothing in the record itself says it failed, and the record's header
  has a command, a date, the versions (torch, Triton, vLLM) and a git revision;
* ``unproven: REASON``: no ``ran`` block (every record made before the block existed, the 2026-12-01 ones included;
  benchmark records of single kernels, which start no engine), engines that failed (counted: a record whose engines
  all died proves nothing ran), or a record that says it failed (:func:`said_failed`: its ``failures``, an engine's
  ``ran_contradictions`` as the writer found them, ``interrupted``, a serving benchmark's ``complete: false``; at any
  depth a key naming a failure, :data:`FAILURE_STEMS`, that holds anything, and an outcome, :data:`OUTCOME_KEYS`, other
  than its writer's success value: anything but the success value is a failure, whatever words it is in), or
  whose revision the full git repository holding it has no commit of (:func:`revision_unknown`); gaps in its header
  are listed too;
* ``invalid: REASON``: a record with a field of another type than the project writes (the shapes of
  :mod:`sparse_mla.records.schema`, the ones the tables refuse: the same line; a negative throughput, a date or
  revision of another form; an outcome of another type, :func:`outcome_problems`: an exit status ``true``), an
  engine record, serving benchmark or ``ran`` block holding a key no writer of the project writes at its level
  (:mod:`sparse_mla.workbook.written`: ``"timeout": true``, a run's ``"rc": 1``, a server's ``"hung": true``; the
  failure words above are read where a record's keys are not all known: vLLM's own results, a kernel benchmark), a
  record
  that claims proof (a ``ran`` block) with a header gap, a request that cannot
  be read or names a backend or indexer no vLLM line of ours has, a header whose GPU capability is not the device's
  that ``ran`` read or whose fields are not each other's (:func:`environment_problems`: SMs, CUDA, pinned
  versions; judged on a record without ``ran`` too, as a kernel benchmark's cache-layout names are,
  :mod:`sparse_mla.workbook.kernel_record`), a layer whose impl is not its backend's (:func:`impl_problems`), a
  ``ran`` that contradicts what was asked (:func:`sparse_mla.vllm_plugin.ran.contradictions`), summaries that are
  not what the record's own data give (:mod:`sparse_mla.workbook.consistency`), or a file that is not readable JSON
  (duplicated keys included: no writer makes them, and the last would win).

What the check cannot catch: records are unsigned JSON, so a record edited by hand to look like a run that passed
(its ``failures`` deleted, a ``ran`` block pasted from another run) is judged as written. The logs of the run, kept
beside the records of a GPU session, are the evidence such an edit would have to forge too.

The command exits 1 if any record is invalid. A file named on the command line must be a ``*.json`` file; a folder
with no JSON file is named as such (nothing to check there is not an error).

``proof [PATH ...]`` is also a table of ``sparse-mla records table`` (:data:`sparse_mla.workbook.records_cli.TABLES`:
the record tables of :mod:`sparse_mla.records.tables` and this one), so that a document quotes the verdicts as the
check gives them; the command itself is :mod:`sparse_mla.workbook.records_cli`.
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError, expand_path
from ..files import DuplicateKey, no_duplicate_keys
from ..launch.engine import nan_logprobs
from ..records import schema
from ..records.common import markdown
from ..records.engine_tables import engine_runs
from ..records.values import header_time, is_int as _int
from ..vllm_plugin.ran import contradictions
from .commands import command_problems
from .consistency import consistency_problems, ran_blocks, unrecorded_failures
from .serving import passes_not_completed
from .diagnosis import diagnosis_problems, diagnosis_said
from .kernel_record import kernel_record_problems
from .written import is_glm5next_comparison, unwritten_keys

HEADER = ("command", "date", "torch", "triton", "vllm", "revision")
#: What a record that claims proof must also name: the GPU it ran on and its capability, read in the process.
PROOF_HEADER = ("gpu", "capability")


@dataclass(frozen=True)
class Verdict:
    path: str
    status: str            # "proven" | "unproven" | "invalid" | "skipped" (not a run record)
    reason: str = ""

    def line(self) -> str:
        return f"{self.path}: {self.status}" + (f": {self.reason}" if self.reason else "")


def header_gaps(rec: dict) -> list[str]:
    """The header fields (:data:`HEADER`) a record lacks, read from its ``environment`` (or the top level, where the
    earliest records kept them)."""
    env = rec.get("environment")
    if not isinstance(env, dict):
        env = {}
    return [f"no {k}" for k in HEADER if not _known(env.get(k)) and not _known(rec.get(k))]


def _known(value) -> bool:
    return isinstance(value, str) and bool(value.strip()) and not value.startswith(("unknown", "unavailable"))


def said_failed(rec: dict) -> list[str]:
    """What the record itself says went wrong, one line each: its ``failures`` (a parity run's verdict), each
    engine's ``ran_contradictions`` (what the writer found in ``ran``), ``interrupted`` (a time limit or Ctrl-C cut
    the run short), a serving benchmark's ``complete: false`` and client passes that completed fewer prompts than
    its load asks (:func:`sparse_mla.workbook.serving.passes_not_completed`), a generation with a NaN log-prob
    (:func:`sparse_mla.launch.engine.nan_logprobs`) or a reference comparison with one (:func:`nan_reference`), a
    diagnosis that predicted otherwise than its engine ran (:func:`sparse_mla.workbook.diagnosis.diagnosis_said`) and
    what :func:`_said_anywhere` finds."""
    died = {f"engine {k}: {r['error']}" for k, r in engine_runs(rec).items() if r.get("error")}   # counted apart
    if rec.get("interrupted") is not None:
        died.add(f"parity run {rec['interrupted']}")                                               # said below
    out = [f"it says it failed: {str(f)[:160]}" for f in (rec.get("failures") or [])
           if isinstance(rec.get("failures"), list) and f not in died]
    out += [f"{k} says what ran contradicts what was asked: {c}" for k, r in engine_runs(rec).items()
            if isinstance(r.get("ran_contradictions"), list) for c in r["ran_contradictions"]]
    if rec.get("interrupted") is not None:
        out.append(f"it was interrupted: {str(rec['interrupted'])[:120]}")
    if rec.get("complete") is False or ("repeats" in rec and rec.get("complete") is not True):
        out.append(f"it says it is not complete (complete: {rec.get('complete', 'absent')})")
    out += [f"{k}: {line}: no agreement of its tokens proves a match" for k, r in engine_runs(rec).items()
            for line in nan_logprobs(r)]
    out += nan_reference(rec) + diagnosis_said(rec) + passes_not_completed(rec)
    engines = [id(r) for r in engine_runs(rec).values()]
    said = " ".join(out)    # a line the record's failures already hold (the criterion's error) is not said twice
    return out + [ln for ln in _said_anywhere(rec, "", engines) if ln.split(" says something failed: ")[-1][:60]
                  not in said]


def nan_reference(rec: dict) -> list[str]:
    """One line per ``reference_first_token`` row whose ``max_abs_logprob_diff`` is NaN. The writer
    (:func:`sparse_mla.launch.engine.compare_reference`) leaves out the engine's NaN log-probs and keeps the
    reference forward's, and :func:`~sparse_mla.launch.agreement.largest` is NaN where any difference is: a NaN there
    is the reference's NaN log-prob, a comparison that measured nothing (issue 47, round 12: b24 was proven)."""
    ref = rec.get("reference_first_token") if isinstance(rec.get("reference_first_token"), dict) else {}
    return [f"reference_first_token.{k}[{i}].max_abs_logprob_diff is NaN (a NaN log-prob of the reference forward, "
            f"launch.engine.compare_reference): no comparison with the reference proves a match"
            for k, rows in ref.items() if isinstance(rows, list) for i, row in enumerate(rows)
            if isinstance(row, dict) and isinstance(row.get("max_abs_logprob_diff"), float)
            and row["max_abs_logprob_diff"] != row["max_abs_logprob_diff"]]


#: Word stems that make a key one naming a failure, wherever it is in a record and however it is spelled
#: (``failures``, ``failed_requests``, ``num_failed``, ``errored``, ``Error``, ``crashed``, ``oom_killed``,
#: ``ranContradictions``: a word of the key's name starting with a stem): such a key holds the writer's "nothing"
#: (null, false, 0, an empty list or object, a spread of zeros) or says that something failed. What a writer of ours
#: puts where a part of the run failed, and what another writer would name it; no list of the failure's own words.
FAILURE_STEMS = ("fail", "error", "crash", "exception", "abort", "kill", "interrupt", "oom", "died", "fatal", "panic",
                 "segfault", "contradiction")
#: The statuses that say a step ended well, in any case; any other status text ("segfault", "died", "terminated by
#: signal 9", "running") says it did not, whatever words another writer chose.
OK_STATUSES = ("ok", "okay", "success", "succeeded", "successful", "pass", "passed", "done", "complete", "completed",
               "finished")


def _exit_status(v) -> str | None:
    """An exit status: the integer 0 (success); another integer says the step failed; any other type (``true``,
    ``"1"``, ``137.0``, ``[1]``) is no exit status a writer writes."""
    if isinstance(v, int) and not isinstance(v, bool):
        return None if v == 0 else "failed"
    return "an integer exit status (0: success)"


def _flag_of_failure(v) -> str | None:
    """A flag that is set where the step failed (``timed_out``): ``false`` (success) or ``true`` (failed), nothing
    else (``"Y"``, ``"true"``, ``1``)."""
    if isinstance(v, bool):
        return "failed" if v else None
    return "true or false"


def _flag_of_success(v) -> str | None:
    """A flag that is set where the step succeeded (``ok``, ``success``, ``passed``): ``true``; ``false`` says it
    failed; nothing else is a flag."""
    if isinstance(v, bool):
        return None if v else "failed"
    return "true or false"


def _status(v) -> str | None:
    """A status text: one of :data:`OK_STATUSES` (any case, a final ``.`` or ``!`` aside) is success, any other text
    says the step did not end well; a status that is no text is no status a writer writes."""
    if isinstance(v, str):
        return None if v.strip().lower().rstrip(".!") in OK_STATUSES else "failed"
    return "a text (a status such as 'ok')"


#: Keys (their words joined by ``_``, any case) whose value is the outcome of a step, and what each accepts: the
#: writer's success value, what says the step failed (``"failed"``), else what is accepted (the value is of a type no
#: writer writes: the record is invalid).
OUTCOME_KEYS = {**dict.fromkeys(("exit_code", "exitcode", "returncode", "return_code", "exit_status"), _exit_status),
                **dict.fromkeys(("timed_out", "timedout"), _flag_of_failure),
                **dict.fromkeys(("ok", "success", "succeeded", "passed"), _flag_of_success), "status": _status}


def _words(key: str) -> list[str]:
    """A key's words: split at anything but letters and digits and between a lower-case letter and a capital
    (``failedRequests`` -> ``failed``, ``requests``), lower-cased."""
    return [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key).lower()) if w]


def names_a_failure(key) -> bool:
    """Whether a key's name is one of a failure (:data:`FAILURE_STEMS`)."""
    return isinstance(key, str) and any(w.startswith(FAILURE_STEMS) for w in _words(key))


def _outcomes(node, where: str, engines: list[int]):
    """``(path, key, value, verdict)`` for every outcome in a record at any depth: keys naming a failure that hold
    something (verdict ``"failed"``) and :data:`OUTCOME_KEYS` whose value is not their success (``"failed"``, or
    what is accepted); an engine run's own ``error`` is counted apart (the engines that failed), the top level's
    ``failures`` and ``interrupted`` by :func:`said_failed`."""
    if isinstance(node, list):
        for i, v in enumerate(node):
            yield from _outcomes(v, f"{where}[{i}]", engines)
        return
    if not isinstance(node, dict):
        return
    for k, v in node.items():
        here = f"{where}.{k}" if where else str(k)
        judge_value = OUTCOME_KEYS.get("_".join(_words(k))) if isinstance(k, str) else None
        if judge_value is not None:
            verdict = judge_value(v)
            if verdict is not None:
                yield here, k, v, verdict
        elif names_a_failure(k):
            said_apart = (not where and k in ("failures", "interrupted")) or (k == "error" and id(node) in engines)
            if not said_apart and _holds_something(v):
                yield here, k, v, "failed"
        elif isinstance(v, (dict, list)):
            yield from _outcomes(v, here, engines)


def outcome_problems(rec: dict) -> list[str]:
    """The outcomes (:data:`OUTCOME_KEYS`) anywhere in ``rec`` written as no writer writes them (an exit status
    ``true`` or ``"1"``, a ``timed_out`` of ``"Y"``, a status that is no text), one line each naming the value and
    what is accepted."""
    engines = [id(r) for r in engine_runs(rec).values()]
    return [f"{path} {v!r} is not accepted; accepted: {verdict}" for path, _, v, verdict in _outcomes(rec, "", engines)
            if verdict != "failed"]


def _said_anywhere(node, where: str, engines: list[int]) -> list[str]:
    """What the record says failed at any depth (:func:`_outcomes`), one line each, and a ``vllm bench serve``
    result that completed fewer prompts than it asked."""
    out = [f"{path} says something failed: " + (f"{k} {v!r}" if "_".join(_words(k)) in OUTCOME_KEYS else str(v)[:120])
           for path, k, v, verdict in _outcomes(node, where, engines) if verdict == "failed"]
    return out + _prompts_not_completed(node, where)


def _prompts_not_completed(node, where: str) -> list[str]:
    """Every ``vllm bench serve`` result (an object with ``completed`` and ``num_prompts``) at any depth that completed
    fewer prompts than it asked, or whose counts (:data:`RESULT_COUNTS`) are written as text or as a float
    (``"completed": "160"``, ``160.0``: vLLM writes an integer, no writer writes either, and docs/records.md calls such
    a record unproven; issue 47 rounds 12 and 13), one line each."""
    out = []
    if isinstance(node, dict):
        done, asked = _count(node.get("completed")), _count(node.get("num_prompts"))
        if done is not None and asked is not None and done < asked:
            out.append(f"{where or '(the record)'} says something failed: {done:g} of {asked:g} prompts completed")
        if done is not None and asked is not None:
            out += [f"{where}.{k} {node[k]!r} is a count written as {'text' if isinstance(node[k], str) else 'a float'}"
                    f"; accepted: an integer (vLLM's count, written as an int: vllm/benchmarks/serve.py)"
                    for k in RESULT_COUNTS if isinstance(node.get(k), (str, float))]
        for k, v in node.items():
            out += _prompts_not_completed(v, f"{where}.{k}" if where else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _prompts_not_completed(v, f"{where}[{i}]")
    return out


#: The counts of a ``vllm bench serve`` result, each written as an ``int`` (``BenchmarkMetrics``' int fields as its
#: result names them, ``num_prompts`` and ``max_concurrency`` from its arguments; vllm/benchmarks/serve.py).
RESULT_COUNTS = ("num_prompts", "completed", "failed", "total_input_tokens", "total_output_tokens",
                 "max_concurrent_requests", "max_concurrency")


def _count(v) -> float | None:
    """A prompt count, whatever it was written as (``100``, ``100.0``, ``"100"``); None where it is none."""
    if isinstance(v, bool):
        return None
    try:
        return float(v) if isinstance(v, (int, float, str)) else None
    except ValueError:
        return None


def _holds_something(v) -> bool:
    if v is None or v is False:
        return False
    if isinstance(v, (int, float)):
        return v != 0                 # a count of failures: no writer writes a negative one
    if isinstance(v, dict) and any(isinstance(v.get(k), (int, float)) for k in ("min", "median", "max")):
        return any(isinstance(v.get(k), (int, float)) and v[k] != 0 for k in ("min", "median", "max"))   # over repeats
    if isinstance(v, (list, dict)):
        return len(v) > 0
    return True            # a text, "" included: no writer of ours writes an empty one


def header_problems(rec: dict, with_ran: dict[str, dict]) -> list[str]:
    """The header's GPU (``environment.gpu``, a name holding one of our GPU presets, :data:`sparse_mla.gpus.GPUS`)
    and capability (``environment.capability``, the live device's) against each other, and the device each ``ran``
    block read inside its engine: its capability (``device_capability``; ``capability`` where no simulation was
    asked) and the SMs of a launch planned with the device's own limits (``launch_plan``, ``environment.sm_count``):
    one line per disagreement."""
    env = rec.get("environment") if isinstance(rec.get("environment"), dict) else {}
    cap = env.get("capability")
    if not isinstance(cap, str):
        return environment_problems(env)
    named = gpu_presets_named(env.get("gpu"))
    out = [f"the header's GPU {env.get('gpu')!r} is a {name} (capability {c}), not capability {cap}"
           for name, c in named if c != cap]
    out += [f"{k}: ran.launch_plan.{c} was planned with the device's {p.get('sm_count')!r} SMs, the header's "
            f"sm_count is {env['sm_count']!r}" for k, r in with_ran.items() if "sm_count" in env
            for c, p in ((r.get("ran") or {}).get("launch_plan") or {}).items()
            if isinstance(p, dict) and p.get("from") == "device" and p.get("sm_count") != env["sm_count"]]
    for k, r in with_ran.items():
        ran = r["ran"] if isinstance(r.get("ran"), dict) else {}
        device = ran.get("device_capability")
        simulated = r.get("simulated_capability") or r.get("simulated") or rec.get("simulated")
        if device is None and not simulated:
            device = ran.get("capability")
        if isinstance(device, str) and device != cap:
            out.append(f"{k}: the header's GPU ({env.get('gpu')}, capability {cap}) is not the device the engine "
                       f"read ({device})")
    return environment_problems(env) + out


def environment_problems(env: dict) -> list[str]:
    """A header's fields against each other, as :func:`sparse_mla.records.environment` reads them in one process:
    ``gpu`` the device's name (:func:`sparse_mla.gpus.device_name_preset`: the driver's name of one of our presets;
    issue 47, round 12: a GLM-5.3-Flash record's ``h100`` was proven; round 13: ``NVIDIA Fake H200 Clone``);
    ``sm_count`` the SMs of the GPU it names
    (:meth:`sparse_mla.gpus.GpuPreset.sm_count`, where the name holds a preset that knows them; no check elsewhere),
    1 to those on a MIG slice of it (:data:`sparse_mla.gpus.MIG_SLICE`; issue 47, round 13: r42, r72 were refused);
    ``cuda`` (``torch.version.cuda``) the CUDA torch was
    built for, which torch's local version names (``2.11.0+cu130``: ``13.0``); torch and Triton the ones the header's
    vLLM line pins (:func:`sparse_mla.vllm_lines.pin_problems`). One line per disagreement."""
    from ..gpus import DEVICE_NAME_PREFIX, GPUS, device_name_preset, mig_parent
    from ..vllm_lines import pin_problems

    gpu, named = env.get("gpu"), gpu_presets_named(env.get("gpu"))
    out = [] if not isinstance(gpu, str) or device_name_preset(gpu) else [
        f"the header's GPU {gpu!r} is none of ours; accepted: the driver's name of one of "
        f"{', '.join(k.upper().replace('-', ' ') for k in GPUS)} (sparse_mla.gpus.GPUS) as the header's writer reads "
        f"the device's (torch.cuda.get_device_properties(0).name: {DEVICE_NAME_PREFIX!r}, 'GeForce ' on consumer "
        f"cards, then the product, e.g. 'NVIDIA H100 80GB HBM3'; sparse_mla.gpus.device_name_preset)"]
    sms = {GPUS[name].sm_count(gpu) for name, _ in named} - {None}
    if sms and _int(env.get("sm_count")) and mig_parent(env["gpu"])[1]:
        if env["sm_count"] > max(sms):     # a MIG slice: some of its GPU's SMs (the schema holds it to 1 or more)
            out.append(f"environment.sm_count {env['sm_count']} on a {env['gpu']!r}; accepted: 1 to {max(sms)} (a MIG "
                       f"slice of a GPU with {max(sms)} SMs, sparse_mla.gpus.GPUS, MIG_SLICE)")
    elif sms and _int(env.get("sm_count")) and env["sm_count"] not in sms:
        out.append(f"environment.sm_count {env['sm_count']} on a {env['gpu']!r}; accepted: "
                   f"{' or '.join(map(str, sorted(sms)))} (its SMs, sparse_mla.gpus.GPUS)")
    m = re.search(r"\+cu(\d+)(\d)$", env["torch"]) if isinstance(env.get("torch"), str) else None
    if m and "cuda" in env and env["cuda"] != f"{m[1]}.{m[2]}":
        out.append(f"environment.cuda {env['cuda']!r} beside torch {env['torch']}; accepted: '{m[1]}.{m[2]}' "
                   f"(torch.version.cuda, the CUDA that torch build names)")
    return out + [f"environment: {p}" for p in pin_problems(env.get("vllm"), env.get("torch"), env.get("triton"))]


def revision_unknown(path: str, rec: dict) -> list[str]:
    """The header's revision where the git repository holding the record can tell it is no commit of its own (one
    line; ``[]`` where it is one, or where no full repository holds the record: none, a shallow clone, no git). A
    record that is a link is held by the repository of the folder the link is in as well as its target's: a record
    linked into ``results/`` from outside is judged where it is shown, not only where it lives."""
    env = rec.get("environment") if isinstance(rec.get("environment"), dict) else {}
    m = re.match(r"[0-9a-f]{7,40}\b", str(env.get("revision") or rec.get("revision") or ""))
    if not m:
        return []
    rev = m.group()
    folders = dict.fromkeys([os.path.dirname(os.path.abspath(path)), str(Path(path).resolve().parent)])
    known = [_commit_known(rev, f) for f in folders]
    return [f"its revision {rev} is no commit of the repository holding it"] if False in known else []


@functools.cache
def _commit_known(rev: str, folder: str) -> bool | None:
    """Whether ``rev`` names a commit of the git repository ``folder`` is in; None where that cannot be told."""
    def git(*args):
        return subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=20)

    try:
        shallow = git("rev-parse", "--is-shallow-repository")
        if shallow.returncode or shallow.stdout.strip() != "false":
            return None
        return git("cat-file", "-e", f"{rev}^{{commit}}").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_presets_named(gpu) -> list[tuple[str, str]]:
    """``(preset, capability)`` of the diagnosis's GPU presets (:data:`sparse_mla.diagnose.request.GPUS`) whose name
    a GPU name holds as a word (``NVIDIA A100-SXM4-80GB`` -> ``a100``, 8.0); a MIG slice's, its whole GPU's
    (``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` -> ``h100``, 9.0: :func:`sparse_mla.gpus.mig_parent`)."""
    from ..gpus import GPUS, name_words

    if not isinstance(gpu, str):
        return []
    words = " " + " ".join(name_words(gpu)) + " "
    return [(k, p.capability) for k, p in GPUS.items() if f" {k.upper().replace('-', ' ')} " in words]


def unknown_names(run: dict) -> list[str]:
    """Backend and indexer names in an engine run that no vLLM of ours has: the request's ``backend_requested`` and
    ``indexer`` and the backends in ``ran.attention`` (:func:`known_backends`); the MLA prefills of ``ran`` and of
    each layer (:func:`known_prefills`); the kernels of ``ran.triton_targets`` (``ran.kernel_names``); a layer on an
    MLA backend of ``ran.attention`` whose class is one of vLLM's attention layers without MLA
    (:func:`non_mla_layer_classes`)."""
    from ..launch.specs import TRITON_INDEXER
    from ..vllm_plugin.ran import INDEXER_CACHE_BACKEND

    known = known_backends()
    ran = run.get("ran") if isinstance(run.get("ran"), dict) else {}
    layers = run.get("layers") if isinstance(run.get("layers"), dict) else {}
    mla = [v.get("backend") for v in layers.values() if isinstance(v, dict) and v.get("layer") == "MLAAttention"]
    listed = run.get("attention_backends") if isinstance(run.get("attention_backends"), list) else []
    names = [run.get("backend_requested"), *(ran.get("attention") or {}), *(ran.get("draft_attention") or {}), *mla,
             *(n for n in listed if n != INDEXER_CACHE_BACKEND)]     # the indexer's cache: ran.contradictions
    out = [f"backend {n!r} is no vLLM backend" for n in names if isinstance(n, str) and n not in known]
    prefills = known_prefills()
    out += [f"mla_prefill {n!r} is no vLLM MLA prefill" for n in ran.get("mla_prefill") or {}
            if prefills is not None and str(n).split(" ")[0] not in prefills]
    out += [f"layers.{k}.prefill {v['prefill']!r} is no vLLM MLA prefill" for k, v in layers.items()   # the same
            if isinstance(v, dict) and isinstance(v.get("prefill"), str) and prefills is not None   # name (n09)
            and v["prefill"].split(" ")[0] not in prefills]
    targets = ran.get("triton_targets") if isinstance(ran.get("triton_targets"), dict) else {}
    if targets:
        from ..vllm_plugin.ran import kernel_names

        ours = kernel_names()
        out += [f"triton_targets names {n!r}, no Triton kernel of ours (sparse_mla.vllm_plugin.ran.kernel_names)"
                for n in targets if n not in ours]
    attention = set(ran.get("attention") or {}) if isinstance(ran.get("attention"), dict) else set()
    not_mla = non_mla_layer_classes() if attention else set()
    wrong = [(k, v["layer"]) for k, v in layers.items() if isinstance(v, dict) and v.get("backend") in attention
             and v.get("layer") in not_mla][:1]
    out += [f"layers.{k}: class {c!r} is vLLM's attention layer without MLA, on the MLA backend {layers[k]['backend']}"
            f"; accepted: MLAAttention or a subclass" for k, c in wrong]
    if mla and isinstance(ran.get("attention"), dict) and set(mla) - set(ran["attention"]) - set(
            ran.get("draft_attention") or {}):
        out.append(f"layers name the backend(s) {sorted(set(mla))}, the engine's ran.attention "
                   f"{sorted(ran['attention'])}")
    ix = run.get("indexer", "vllm")
    if isinstance(ix, str) and ix not in ("vllm", TRITON_INDEXER):
        out.append(f"indexer {ix!r} is neither 'vllm' nor {TRITON_INDEXER!r}")
    return out


def impl_problems(name: str, run: dict, vllm) -> list[str]:
    """Each layer's ``impl`` (``type(layer.impl).__name__``, :func:`sparse_mla.vllm_plugin.ran.layer_backends`)
    against its ``backend``: the class that backend's ``get_impl_cls()`` gives (:func:`backend_impl`). Judged where
    the run's vLLM (``vllm``, its header's) is of the installed vLLM's line (another line may name its classes
    otherwise) and for the backends of vLLM's registry, and for ours on every line (the indexer's cache and
    linear-attention layers have no impl: ``NoneType``, no check). The first layer that differs, one line."""
    from ..vllm_lines import current_line, line_of

    from ..launch.specs import OURS

    layers = run.get("layers") if isinstance(run.get("layers"), dict) else {}
    same_line = isinstance(vllm, str) and line_of(vllm) is not None and line_of(vllm) == current_line()
    for n, v in layers.items():     # our backend's impl is ours on every line (issue 47, round 9: z16)
        want = backend_impl(v.get("backend")) if isinstance(v, dict) and isinstance(v.get("backend"), str) and \
            (same_line or v["backend"] == OURS) else None
        if want is not None and v.get("impl") != want:
            return [f"{name}: layer {n} names impl {v.get('impl')!r} beside backend {v['backend']!r}; accepted: "
                    f"{want!r} (that backend's get_impl_cls(), vLLM {vllm})"]
    return []


@functools.cache
def backend_impl(backend: str) -> str | None:
    """The class name of ``backend``'s attention impl (``get_impl_cls().__name__``): ours from the plugin's backend
    class (:data:`sparse_mla.vllm_plugin.selector.BACKEND_PATH`), another from the installed vLLM's
    ``AttentionBackendEnum``; None for a name neither has or a class that does not import here."""
    import importlib

    from ..diagnose.probe import quiet_logs
    from ..launch.specs import OURS
    from ..vllm_plugin.selector import BACKEND_PATH

    _vllm_importable()
    try:
        with quiet_logs():
            if backend == OURS:
                module, cls = BACKEND_PATH.rsplit(".", 1)
                return getattr(importlib.import_module(module), cls).get_impl_cls().__name__
            from vllm.v1.attention.backends.registry import AttentionBackendEnum

            member = AttentionBackendEnum.__members__.get(backend)
            return None if member is None or backend == "CUSTOM" else member.get_class().get_impl_cls().__name__
    except Exception:  # noqa: BLE001 - a class that needs what this machine lacks: no judgment
        return None


def known_backends() -> set[str]:
    """The installed vLLM's attention backends (``AttentionBackendEnum``), ours and ``auto``."""
    from ..diagnose.probe import quiet_logs
    from ..launch.specs import OURS

    _vllm_importable()
    with quiet_logs():
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
    return {*AttentionBackendEnum.__members__, OURS, "auto"}


def non_mla_layer_classes() -> set[str]:
    """The installed vLLM's attention layer classes (``vllm.model_executor.layers.attention``) that are not
    ``MLAAttention`` or a subclass of it: an MLA backend never runs a layer of one of them."""
    from ..diagnose.probe import quiet_logs

    _vllm_importable()
    with quiet_logs():
        import vllm.model_executor.layers.attention as layers
    return {n for n in getattr(layers, "__all__", ()) if isinstance(getattr(layers, n, None), type)
            and not issubclass(getattr(layers, n), layers.MLAAttention)}


def known_prefills() -> set[str] | None:
    """The installed vLLM's MLA prefill backends (``MLAPrefillBackendEnum``; a ``ran.mla_prefill`` name is one of
    them, with its FlashAttention version after a space), or None where this vLLM has no such registry."""
    from ..diagnose.probe import quiet_logs

    try:
        with quiet_logs():
            from vllm.v1.attention.backends.mla.prefill.registry import MLAPrefillBackendEnum
    except ImportError:
        return None
    return set(MLAPrefillBackendEnum.__members__)


def record_problems(rec: dict, runs: dict[str, dict]) -> list[str]:
    """What a record says of itself that its writer never writes: ``run_specs`` other than its runs' requests; a
    header naming a vLLM that is no tested line; a first-token criterion at odds with its own data
    (:func:`_criterion_problems`); a serving benchmark short of its repeats (:func:`_serving_problems`); an engine
    run that is not its record's (:func:`_run_headers`); speculation other than the record's or than its counters and
    drafter layers allow (:func:`_speculation_problems`); weights asked otherwise than the record asks them
    (:func:`_checkpoint_problems`); summaries that are not their data's
    (:mod:`sparse_mla.workbook.consistency`)."""
    from ..vllm_lines import TESTED_LINES, line_of

    out = []
    specs = rec.get("run_specs")
    if isinstance(specs, dict):
        engines = {k: r for k, r in runs.items() if k != "serve"}
        if set(specs) != set(engines):
            out.append(f"run_specs name {sorted(specs)}, the runs are {sorted(engines)}")
        for k in set(specs) & set(engines):
            differ = [f for f, v in (specs[k] or {}).items() if f in engines[k] and engines[k][f] != v]
            if differ:
                out.append(f"run_specs.{k}: {', '.join(differ)} not the run's")
    for where, env in (("the header", rec.get("environment")),
                       *((f"{k}'s header", r.get("environment")) for k, r in runs.items())):
        v = env.get("vllm") if isinstance(env, dict) else None
        if isinstance(v, str) and line_of(v) not in TESTED_LINES:
            out.append(f"{where}: vLLM {v} is no tested line ({', '.join(TESTED_LINES)})")
    return out + _criterion_problems(rec) + _serving_problems(rec, runs) + _run_headers(rec, runs) + \
        _speculation_problems(rec, runs) + _checkpoint_problems(rec, runs) + consistency_problems(rec, runs)


#: Header fields every engine run of one record shares with the record (one machine, one install -- its Python
#: too: each engine is the same interpreter, sys.executable --, one revision).
SHARED_HEADER = ("gpu", "gpu_count", "capability", "python", "cuda", "vllm", "torch", "triton", "revision")


def _run_headers(rec: dict, runs: dict[str, dict]) -> list[str]:
    """Each engine run against the record it is part of: its header's machine, install and revision the record's, its
    date within 6 hours of the record's (one GPU session: a lease is 30 minutes); its ``tp`` and ``kv_cache_dtype``
    the record's; a ``tp`` that divides the model's heads, a KV-cache dtype vLLM's engine takes
    (``layouts.ENGINE_KV_CACHE_DTYPES``)."""
    import datetime

    from ..layouts import ENGINE_KV_CACHE_DTYPES

    top = rec.get("environment") if isinstance(rec.get("environment"), dict) else {}
    out = []

    def when(env):        # a date alone is its day's noon, +-12 hours
        t = header_time(env.get("date"))
        return t + datetime.timedelta(hours=12) if t and len(str(env.get("date"))) == 10 else t

    for k, r in [("the record", rec), *runs.items()]:
        env = r.get("environment") if isinstance(r.get("environment"), dict) else {}
        if r is not rec:
            out += [f"{k}'s header: {f} {env[f]!r}, the record's {top[f]!r}" for f in SHARED_HEADER
                    if f in env and f in top and env[f] != top[f]]
            a, b = when(env), when(top)
            slack = datetime.timedelta(hours=18 if 10 in (len(str(env.get("date"))), len(str(top.get("date")))) else 6)
            if a and b and abs(a - b) > slack:
                out.append(f"{k}'s header: date {env['date']}, not within 6 hours of the record's {top['date']}")
            out += [f"{k}: {f} {r[f]!r}, the record's {rec[f]!r}" for f in ("tp", "kv_cache_dtype")
                    if f in r and f in rec and r[f] != rec[f]]
        kv = r.get("kv_cache_dtype")
        if isinstance(kv, str) and kv not in ENGINE_KV_CACHE_DTYPES:
            out.append(f"{k}: kv_cache_dtype {kv!r} is none of {', '.join(ENGINE_KV_CACHE_DTYPES)}")
    heads, tp = (rec.get("model") or {}).get("num_attention_heads") if isinstance(rec.get("model"), dict) else None, \
        rec.get("tp")
    if isinstance(heads, int) and isinstance(tp, int) and tp > 0 and heads % tp:
        out.append(f"tp {tp} does not divide the model's {heads} heads")
    return out


def written_after_runs(rec: dict) -> list[str]:
    """A parity record's header date (``environment.date``, :func:`sparse_mla.records.environment`, UTC to the
    second) against its engines' own: ``run_parity`` writes its header after the engines ran, so no run's date is
    later (issue 47, round 11: n06). One line per run dated later; ``[]`` for another record or a date that is no ISO
    time (the schema names that)."""
    def when(env):
        return header_time(env.get("date")) if "date" in env else None

    head = when(rec.get("environment")) if isinstance(rec.get("environment"), dict) else None
    runs = rec.get("runs") if isinstance(rec.get("runs"), dict) and isinstance(rec.get("run_specs"), dict) else {}
    out = []
    for k, r in runs.items():
        ran = when(r.get("environment")) if isinstance(r, dict) and isinstance(r.get("environment"), dict) else None
        if head is not None and ran is not None and ran > head:
            out.append(f"{k}: its header's date {r['environment']['date']} is after the record's "
                       f"{rec['environment']['date']}; launch --parity writes its header after its engines ran")
    return out


def _speculation_problems(rec: dict, runs: dict[str, dict]) -> list[str]:
    """Each run's speculation against the record's and against what ran: a run's ``speculative_config`` asks the
    method and ``num_speculative_tokens`` of the record's (where the record has the key; a run without one runs
    without speculation, e.g. ``+no-speculation``); its engine's ``speculative`` counters (every ``ran`` block)
    propose at most ``num_speculative_tokens`` tokens a draft, and a run's engine at most one draft per token it
    generated (:func:`sparse_mla.launch.engine.counted_tokens`); an MTP drafter's layers (``draft_attention``) are at
    most the model's MTP layers (``model.num_nextn_predict_layers``)."""
    from ..launch.engine import counted_tokens
    from ..launch.specs import is_mtp

    model = rec.get("model") if isinstance(rec.get("model"), dict) else {}
    nextn, top = model.get("num_nextn_predict_layers"), rec.get("speculative_config")
    out = []
    for k, r in runs.items():
        scfg = r.get("speculative_config")
        if not isinstance(scfg, dict):
            continue
        asked = {f: scfg.get(f) for f in ("method", "num_speculative_tokens")}
        if r is not rec and "speculative_config" in rec and (
                not isinstance(top, dict) or asked != {f: top.get(f) for f in asked}):
            out.append(f"{k}: speculative_config asks {asked}, the record's {top}")
        n = scfg.get("num_speculative_tokens")
        for where, ran in ran_blocks({k: r}):
            c = ran.get("speculative") if isinstance(ran.get("speculative"), dict) else {}
            if _int(n) and _int(c.get("drafts")) and _int(c.get("draft_tokens")) and c["draft_tokens"] > c["drafts"] * n:
                out.append(f"{where}.speculative: {c['draft_tokens']} draft tokens in {c['drafts']} drafts, more than "
                           f"the {n} a draft of the speculative_config proposes")
            made = counted_tokens(r) if ran is r.get("ran") else None
            if made is not None and _int(c.get("drafts")) and c["drafts"] > made:
                out.append(f"{where}.speculative: {c['drafts']} drafts, more than the {made} tokens the engine "
                           f"generated in all (one draft at most per decoding step; launch.engine.counted_tokens)")
            drafted = sum(v for v in (ran.get("draft_attention") or {}).values() if _int(v)) \
                if isinstance(ran.get("draft_attention"), dict) else 0
            if is_mtp(scfg) and _int(nextn) and drafted > nextn:
                out.append(f"{where}.draft_attention counts {drafted} drafter layer(s), the record's model has {nextn} "
                           f"MTP layer(s)")
    return out


#: What ``launch`` asks an engine to load (:func:`sparse_mla.launch.engine.weights_asked`), field by field: a GGUF file
#: through vllm-gguf-plugin, or a checkpoint folder at vLLM's defaults (its ``quantization`` the method its config
#: declares, if any: :func:`sparse_mla.launch.engine.folder_quantization`).
ASKED_WEIGHTS = {"gguf": {"format": "gguf", "load_format": "gguf", "quantization": "gguf"},
                 "safetensors": {"format": "safetensors", "file": None, "load_format": None, "quantization": None}}


def _checkpoint_problems(rec: dict, runs: dict[str, dict]) -> list[str]:
    """The record's ``checkpoint`` (what was asked to load) against its runs and model: each checkpoint block one of
    :data:`ASKED_WEIGHTS` (a GGUF's ``file`` a ``*.gguf`` name), every run's own block the record's, and the
    record's ``model.path`` the GGUF file asked (a folder's name otherwise). What each engine loaded against it:
    :func:`sparse_mla.vllm_plugin.ran.contradictions`."""
    fields = ("format", "file", "load_format", "quantization")
    top = rec.get("checkpoint")
    blocks = [("checkpoint", top)] if isinstance(top, dict) else []
    blocks += [(f"{k}: checkpoint", r["checkpoint"]) for k, r in runs.items()
               if r is not rec and isinstance(r.get("checkpoint"), dict)]
    out = []
    for where, c in blocks:
        want = ASKED_WEIGHTS.get(c.get("format"))
        if want is not None and c.get("format") == "safetensors" and isinstance(c.get("quantization"), str) \
                and c["quantization"].strip():         # a folder whose config declares its quantization method
            want = {**want, "quantization": c["quantization"]}
        file = c.get("file")
        if want is None or any(c.get(f) != v for f, v in want.items()) or (
                c.get("format") == "gguf" and not (isinstance(file, str) and file.lower().endswith(".gguf"))):
            out.append(f"{where} {({f: c.get(f) for f in fields})} is none of what launch asks (a GGUF file: "
                       f"{ {**ASKED_WEIGHTS['gguf'], 'file': 'NAME.gguf'} }, or a folder: {ASKED_WEIGHTS['safetensors']})")
        elif isinstance(top, dict) and c is not top and any(c.get(f) != top.get(f) for f in fields):
            out.append(f"{where} {({f: c.get(f) for f in fields})}, the record's {({f: top.get(f) for f in fields})}")
    path = (rec.get("model") or {}).get("path") if isinstance(rec.get("model"), dict) else None
    if isinstance(top, dict) and isinstance(path, str) and (path.lower().endswith(".gguf") != (top.get("format") ==
                                                                                             "gguf") or (
            top.get("format") == "gguf" and path != top.get("file"))):
        out.append(f"model.path {path!r} is not the checkpoint asked ({top.get('format')!r}, file {top.get('file')!r})")
    return out + _weights_alike(runs)


def _weights_alike(runs: dict[str, dict]) -> list[str]:
    """Every engine of one record loads its one checkpoint alike: the ``ran.weights`` of each ``ran`` block (every
    run's, server's and rank's) the same load format, quantization and adapter; one line naming each way where they
    differ (``quantization: 'fp8'`` in one engine of a bfloat16 checkpoint, issue 47 round 7)."""
    ways: dict[str, list[str]] = {}
    for where, ran in ran_blocks(runs):
        if isinstance(ran.get("weights"), dict):
            ways.setdefault(json.dumps(ran["weights"], sort_keys=True), []).append(where.removesuffix(": ran"))
    if len(ways) < 2:
        return []
    return ["the engines of one checkpoint loaded it differently: " +
            "; ".join(f"{', '.join(w)}: weights {json.loads(k)}" for k, w in ways.items())]


def _criterion_problems(rec: dict) -> list[str]:
    """The first-token criterion's own data: the reference comparison of every run it judged, and its verdict -- a
    decisive prompt whose first token in some run is not the reference's argmax is a failure the criterion writes;
    a record that holds such a prompt and no failure says otherwise than its data."""
    crit = rec.get("first_token_criterion")
    if not isinstance(crit, dict):
        return []
    out = []
    judged = {k for p in crit.get("per_prompt") or [] for k in (p.get("first_tokens") or {})}
    have = rec.get("reference_first_token") if isinstance(rec.get("reference_first_token"), dict) else {}
    if judged - set(have):
        out.append(f"first_token_criterion judges {sorted(judged - set(have))}, reference_first_token has "
                   f"{sorted(have)}")
    if crit.get("failures") or rec.get("failures"):
        return out
    return out + unrecorded_failures(crit)


def _serving_problems(rec: dict, runs: dict[str, dict]) -> list[str]:
    """A serving benchmark (``load.repeats``): every engine with at least one server, its passes and its ``repeats``
    entries that many -- an engine that failed (its ``error``) no more passes than that: ``bench serve`` stops its
    passes at the failure and writes a ``None`` repeat for each pass it did not time (a record without ``ran`` blocks
    is judged by this too since round 13)."""
    load = rec.get("load")
    n = load.get("repeats") if isinstance(load, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or "repeats" not in rec:
        return []
    reps = rec.get("repeats") if isinstance(rec.get("repeats"), dict) else {}
    out = []
    for k, r in runs.items():
        if k == "serve" or not isinstance(r, dict):
            continue
        if not r.get("servers"):
            out.append(f"{k}: no server in a serving benchmark")
        for what, have in (("passes", r.get("passes")), ("repeats", reps.get(k))):
            short = what == "passes" and r.get("error") is not None and isinstance(have, list) and len(have) <= n
            if not short and (not isinstance(have, list) or len(have) != n):
                out.append(f"{k}: {len(have) if isinstance(have, list) else 'no'} {what} of the {n} repeats load asks")
    return out


def _spec_mismatch(name, backend: str, indexer: str, cap) -> str | None:
    """Where a run's spec name (``run``: ``BACKEND[+TRITON_DSA_INDEXER][@M.m]``) says another backend, indexer or
    simulated capability than its request fields: the line; None where they agree or the name is no run spec (the
    serving benchmark's ``+mtp`` names)."""
    from ..launch.specs import parse_run_spec

    if not isinstance(name, str):
        return None
    try:
        spec = parse_run_spec(name)
    except UserInputError:
        return None
    if (spec.backend, spec.indexer, spec.capability) != (backend, indexer, cap):   # describe() names @cap (t40)
        return (f"run spec {name!r} is not the request (backend_requested {backend!r}, indexer {indexer!r}, "
                f"simulated_capability {cap!r})")
    return None


def asked(run: dict, rec: dict) -> dict | str:
    """What an engine run was asked for: its run spec and, where the record says so, a simulated capability (the run
    spec's ``@M.m``, ``simulated_capability``, else the ``simulated`` block of the run or the record) and speculation
    (its ``speculative_config``: whether drafter layers run and an MTP drafter's backend,
    :func:`sparse_mla.launch.specs.drafter_layers`; drafts, for an offline engine); a string saying what is
    malformed where the request cannot be read (no backend, a ``simulated`` that is not ``{"capability": "M.m",
    ...}``, a speculative config vLLM refuses, :func:`sparse_mla.launch.specs.speculative_config_problem`)."""
    sim = run.get("simulated", rec.get("simulated"))
    if sim is not None and not (isinstance(sim, dict) and isinstance(sim.get("capability"), str)):
        return f"simulated {str(sim)[:60]} is not {{'capability': 'M.m', ...}}"
    backend, indexer = run.get("backend_requested"), run.get("indexer", "vllm")
    if not isinstance(backend, str) or not isinstance(indexer, str):
        return f"the request (backend_requested {backend!r}, indexer {indexer!r}) is not two names"
    cap = run.get("simulated_capability")
    if cap is not None and not isinstance(cap, str):
        return f"simulated_capability {cap!r} is not 'M.m'"
    mismatch = _spec_mismatch(run.get("run"), backend, indexer, cap)
    if mismatch:
        return mismatch
    out = {"backend_requested": backend, "indexer": indexer, "capability": cap or (sim and sim["capability"])}
    weights = run.get("checkpoint", rec.get("checkpoint"))
    # what launch asked: gguf through our adapter, or vLLM's default (also where the record names no checkpoint)
    out["load_format"] = weights.get("load_format") if isinstance(weights, dict) else None
    out["quantization"] = weights.get("quantization") if isinstance(weights, dict) else None
    if isinstance(weights, dict) and weights.get("format") == "gguf" and out["load_format"] != "gguf":
        return f"checkpoint format 'gguf' with load_format {out['load_format']!r}: launch asks a GGUF as 'gguf'"
    if cap is not None and sim is not None and sim["capability"] != cap:
        return f"simulated_capability {cap!r} and simulated {sim['capability']!r} disagree"
    if cap is not None and sim is None and "ran" in run:   # an engine that simulated writes what it was given
        return (f"simulated_capability {cap!r} without the simulated block its engine writes "
                f"(launch.specs.with_simulated)")
    scfg = run.get("speculative_config")
    if run.get("speculative") and not scfg:
        return "speculative true without a speculative_config"
    if run.get("speculative") is False and scfg:
        return f"speculative false beside the speculative_config {str(scfg)[:60]}"
    if scfg and (not isinstance(scfg, dict) or not isinstance(scfg.get("method"), str)):
        return f"speculative_config {str(scfg)[:60]} is not {{'method': ..., ...}}"
    from ..launch.specs import RunSpec, drafter_backend, drafter_layers, speculative_config_problem

    refused = speculative_config_problem(scfg) if scfg else None       # vLLM's own config, where it can be asked
    if refused:
        return f"speculative_config {str(scfg)[:80]}: {refused}"

    out["drafter_layers"] = drafter_layers(scfg)
    if scfg:
        out["draft_backend"] = drafter_backend(RunSpec(backend, indexer), scfg)
    if "layers" in run:       # an offline engine reads its speculative counters (a server's are the benchmark's)
        out["speculative"] = scfg["method"] if scfg else None
    return out


#: A JSON object with any of these keys is a run record (the header, engine runs, or one engine's request).
RECORD_KEYS = {"environment", "runs", "command", "backend_requested", "layers"}


def is_run_record(obj) -> bool:
    """A JSON object with any of :data:`RECORD_KEYS`; others (generated summaries, a checkpoint's ``config.json``,
    tokenizer files) are not records and are counted apart."""
    return isinstance(obj, dict) and bool(RECORD_KEYS & set(obj))


#: The verdict's reason for a GLM-5.3-Flash comparison record without a criterion (``tools/gpu/glm5next_parity.py``
#: before it wrote ``first_token_criterion``).
GLM5NEXT_UNPROVEN = ("a GLM-5.3-Flash comparison (tools/gpu/glm5next_parity.py) without first_token_criterion: "
                     "engines against each other and the float64 reference, numbers only")


def _glm5next_request(name: str) -> dict | None:
    """What the run spec ``name`` (a key of the record's ``runs``) asked, as ``ran.contradictions`` reads it; None for
    ``auto`` (vLLM's choice: nothing to hold ``ran`` to)."""
    if name == "auto":
        return None
    from ..launch.specs import parse_run_spec

    spec = parse_run_spec(name)
    return {**spec.describe(), "capability": spec.capability}


def _glm5next_spec_problem(name: str) -> str | None:
    """Why the run spec ``name`` tests no GPU (:func:`sparse_mla.launch.specs.check_simulated_indexer`: a simulation
    of vLLM's DeepGEMM indexer) or is no run spec; None for one that does, and ``auto``."""
    from ..launch.specs import check_simulated_indexer, parse_run_spec

    try:
        name == "auto" or check_simulated_indexer(parse_run_spec(name))
    except UserInputError as e:
        return str(e).split("; accepted")[0]
    return None


def _glm5next_request_problems(obj: dict, runs: dict) -> list[str]:
    """A GLM-5.3-Flash comparison's requests and header against what can have run: each run's request fields are its
    run spec's; the header's vLLM is a line with GLM-5.3-Flash; the model's ``index_topk`` one make-checkpoint
    writes."""
    from ..launch.checkpoint import check_index_topk
    from ..models import GLM5_NEXT_VLLM_LINES
    from ..vllm_lines import line_of

    out = [f"{k}: {m}" for k, r in runs.items() if isinstance(r, dict) and "backend_requested" in r
           and (m := _spec_mismatch(k, r.get("backend_requested"), r.get("indexer"), r.get("simulated_capability")))]
    out += [f"{k}: simulated_capability {r.get('simulated_capability')!r} in a run spec without @" for k, r in
            runs.items() if isinstance(r, dict) and "@" not in k and r.get("simulated_capability") is not None]
    vllm = (obj.get("environment") or {}).get("vllm")
    if isinstance(vllm, str) and line_of(vllm) not in GLM5_NEXT_VLLM_LINES:
        out.append(f"environment.vllm {vllm!r}: no vLLM line with GLM-5.3-Flash ({', '.join(GLM5_NEXT_VLLM_LINES)})")
    cfg = obj.get("model_config", obj.get("checkpoint"))
    try:
        check_index_topk(cfg.get("index_topk"))
    except UserInputError as e:
        out.append(f"model_config: {e}")
    return out


def _glm5next_verdict(path: str, obj: dict) -> Verdict:
    """A GLM-5.3-Flash comparison (:func:`sparse_mla.workbook.written.is_glm5next_comparison`, never judged as a
    launch record: its engines run no ``launch`` request): invalid where a run names a backend or indexer no vLLM of
    ours has, the header's GPU is not its capability nor the device its engines read, a run's ``ran`` contradicts its
    run spec or the criterion's figures are not what its runs and reference give; unproven where a run simulates
    vLLM's DeepGEMM indexer (the tool refuses those since 2026-12-06d; a record from before says what ran), an engine,
    the reference or the criterion failed or there is no criterion (records before it); else proven."""
    from .glm5next_record import glm5next_record_problems

    runs = obj.get("runs") if isinstance(obj.get("runs"), dict) else {}
    bad = [f"{k}: {n}" for k, r in runs.items() if isinstance(r, dict)     # the request's names
           for n in unknown_names({f: r[f] for f in ("backend_requested", "indexer") if f in r})]
    bad += header_problems(obj, {k: r for k, r in runs.items() if isinstance(r, dict) and isinstance(r.get("ran"),
                                                                                                       dict)})
    bad += _glm5next_request_problems(obj, runs)
    if bad:
        return Verdict(path, "invalid", "; ".join(bad))
    meaningless = [f"{k}: {e}" for k in runs if (e := _glm5next_spec_problem(k))]     # written before the refusal
    if meaningless:
        return Verdict(path, "unproven", "; ".join(meaningless))
    failed = [k for k, r in runs.items() if not isinstance(r, dict) or r.get("error") is not None]
    if failed or not runs:
        return Verdict(path, "unproven", f"{len(failed)} engine(s) failed: {', '.join(failed)}" if runs else
                       "no engine run")
    if "first_token_criterion" not in obj:
        return Verdict(path, "unproven", GLM5NEXT_UNPROVEN)
    bad = [f"{k}: {c}" for k, r in runs.items() if (req := _glm5next_request(k)) is not None
           for c in contradictions(req, r.get("ran"))]
    bad += glm5next_record_problems(obj) + unwritten_keys(obj)
    bad += [p for k, r in runs.items() for p in impl_problems(k, r, (obj.get("environment") or {}).get("vllm"))]
    if bad:
        return Verdict(path, "invalid", "; ".join(bad))
    said = said_failed(obj)
    said += [f"{k}: ran_contradictions {r['ran_contradictions']}" for k, r in runs.items() if r.get("ran_contradictions")]
    said += [f"{k}: no ran block ({r.get('ran_error')})" for k, r in runs.items() if "ran" not in r]
    ref, crit = obj.get("reference"), obj["first_token_criterion"]
    said += [f"reference: {ref['error']}"] if isinstance(ref, dict) and "error" in ref else []
    said += [f"first_token_criterion: {crit['error']}"] if "error" in crit else list(crit.get("failures") or [])
    if said:
        return Verdict(path, "unproven", "; ".join(said[:3]) + (f" (and {len(said) - 3} more)" if len(said) > 3
                                                                 else ""))
    return Verdict(path, "proven", f"{len(runs)} engine run(s) with ran; first-token criterion: "
                                   f"{crit['decisive_prompts']} decisive prompt(s)")


def judge(path: str, obj) -> Verdict:
    """The verdict on one run record (module docstring); never raises (a record that breaks the reading is invalid,
    with the error)."""
    try:
        return _judge(path, obj)
    except Exception as e:  # noqa: BLE001
        return Verdict(path, "invalid", f"could not be read as a run record ({type(e).__name__}: {str(e)[:120]})")


def _judge(path: str, obj) -> Verdict:
    shape = schema.problems_of_any_kind(obj)     # every field a table reads, refused as the table refuses it
    if shape:
        more = f" (and {len(shape) - 1} more)" if len(shape) > 1 else ""
        return Verdict(path, "invalid", f"not a record as the project writes it: {shape[0]}{more}")
    if is_glm5next_comparison(obj):
        return _glm5next_verdict(path, obj)
    unwritten = unwritten_keys(obj)
    if unwritten:
        return Verdict(path, "invalid", "; ".join(unwritten))
    gaps = header_gaps(obj)
    runs = engine_runs(obj)
    failed = [r for r in runs.values() if "error" in r and r["error"] is not None]    # "" too: no writer makes it
    live = {k: r for k, r in runs.items() if r not in failed}
    with_ran = {k: r for k, r in live.items() if "ran" in r}
    if with_ran:
        gaps += [f"no {k}" for k in PROOF_HEADER if not _known((obj.get("environment") or {}).get(k))]
        if gaps:
            return Verdict(path, "invalid", "; ".join(gaps))
    if runs:
        _vllm_importable()
    requests = {k: asked(r, obj) for k, r in live.items()}
    bad = written_problems(obj, runs, requests, with_ran)
    bad += [f"{k}: {c}" for k, r in with_ran.items() if isinstance(requests[k], dict)
            for c in contradictions(requests[k], r["ran"])]
    bad += [f"{where}: {c}" for k, r in with_ran.items() if isinstance(requests[k], dict)     # each live server's
            for where, ran in ran_blocks({k: r}) if ran is not r["ran"] for c in contradictions(requests[k], ran)]
    if bad:
        return Verdict(path, "invalid", "; ".join(bad))
    if not with_ran:
        what = (["no engine run"] if not runs else
                ([f"no ran block in {', '.join(live)}"] if live else []) + ([f"{len(failed)} engine(s) failed"]
                                                                            if failed else []))
        return Verdict(path, "unproven", "; ".join([*what, *gaps]))
    missing = [k for k in live if k not in with_ran]
    said = said_failed(obj) + revision_unknown(path, obj)
    if missing or failed or said:
        parts = ([f"no ran block in {', '.join(missing)}"] if missing else []) + \
                ([f"{len(failed)} engine(s) failed"] if failed else []) + said[:3] + \
                ([f"(and {len(said) - 3} more)"] if len(said) > 3 else [])
        return Verdict(path, "unproven", "; ".join(parts))
    return Verdict(path, "proven", f"{len(with_ran)} engine run(s) with ran")


def written_problems(rec: dict, runs: dict[str, dict], requests: dict[str, dict | str],
                     with_ran: dict[str, dict]) -> list[str]:
    """What record ``rec`` says of itself that no writer of ours writes, judged whether or not its engines carry a
    ``ran`` block (issue 47, round 13: an older record without one was held to none of it): each request that cannot
    be read (``requests``: :func:`asked` of each live run) or whose run key names another, names no vLLM has, a
    layer's impl not its backend's, ``tp`` beyond the header's GPUs, the header and each run's header
    (:func:`header_problems`, the device of ``with_ran``'s ``ran`` blocks where there are some), a run dated after
    its parity header, :func:`record_problems`, :func:`outcome_problems`, the command
    (:func:`sparse_mla.workbook.commands.command_problems`; today's parity plan only for a record with ``ran``
    blocks or ``run_specs``), the diagnosis, a kernel benchmark's rows. What reads ``ran`` (its contradictions of
    the request) is :func:`_judge`'s. One line each."""
    vllm = (rec.get("environment") or {}).get("vllm")
    bad = [f"{k}: {a}" for k, a in requests.items() if isinstance(a, str)]
    bad += [f"{k}: {n}" for k, r in runs.items() for n in unknown_names(r)]
    bad += [p for k, r in runs.items() if k in requests
            for p in impl_problems(k, r, (r.get("environment") or {}).get("vllm", vllm))]
    bad += [f"{k}: {m}" for k, r in runs.items() if isinstance(requests.get(k), dict)
            for name in {k, r.get("run"), r.get("run_spec")} - {None}
            if (m := _spec_mismatch(name, requests[k]["backend_requested"], requests[k]["indexer"],
                                    r.get("simulated_capability")))]
    env = rec.get("environment") or {}
    if isinstance(rec.get("tp"), int) and isinstance(env.get("gpu_count"), int) and rec["tp"] > env["gpu_count"]:
        bad.append(f"tp {rec['tp']} on {env['gpu_count']} GPU(s)")
    bad += header_problems(rec, with_ran) + written_after_runs(rec) + inherited_simulation_problems(rec, runs)
    if runs or isinstance(rec.get("runs"), dict):     # an engine record, even with its runs emptied (round 18, c1_20)
        bad += record_problems(rec, runs) + outcome_problems(rec) + command_problems(rec, plan=bool(with_ran)) + \
            diagnosis_problems(rec)
    bad += [f"{k}: {p}" for k, r in runs.items() if isinstance(r.get("environment"), dict)   # a run's own header
            for p in header_problems({"environment": r["environment"]}, {k: r} if k in with_ran else {})]
    return bad + kernel_record_problems(rec)


def inherited_simulation_problems(rec: dict, runs: dict[str, dict]) -> list[str]:
    """A record's ``simulated`` block (:func:`sparse_mla.launch.specs.with_simulated`: the variable the harness set in
    the writer's process) against each engine run's that has no capability of its own (no ``simulated_capability``,
    no ``@M.m``): such an engine's process inherits the writer's environment, so its header-written block (a run with
    an ``environment``) says the same capability, or none where the record has none. Issue 47, round 13 (r22): a
    record's ``simulated`` 12.0 beside its run's 8.0 was accepted where the run had no ``ran``."""
    top = rec.get("simulated")
    want = top.get("capability") if isinstance(top, dict) else None
    out = []
    for k, r in runs.items():
        if not isinstance(r.get("environment"), dict) or r.get("simulated_capability") is not None:
            continue
        sim = r.get("simulated")
        have = sim.get("capability") if isinstance(sim, dict) else None
        if have != want:
            out.append(f"{k}: simulated capability {have!r}, the record's {want!r}; an engine without @M.m runs in "
                       f"the writer's environment (launch.specs.with_simulated writes the same block in both)")
    return out


def _vllm_importable() -> None:
    """vLLM's CUDA platform rules (the default indexer per capability) importable on a machine without the NVIDIA
    driver: the diagnosis's extension stand-ins (:func:`sparse_mla.diagnose.probe.load_vllm_extensions`)."""
    from ..diagnose.probe import load_vllm_extensions

    load_vllm_extensions()


def record_files(paths: list[str]) -> list[Path]:
    """Every ``*.json`` regular file under ``paths`` (files or folders), sorted per folder. Raises
    :class:`UserInputError` naming a path that is empty, missing, a file not named ``*.json``, or neither a regular
    file nor a folder."""
    out = []
    for raw in paths:
        if not str(raw).strip():
            raise UserInputError("records path '' is empty; accepted: record files or folders")
        p = expand_path(raw, "records path")     # a name the file system refuses (too long, a NUL) is one line
        if p.is_dir():
            out += sorted(f for f in p.rglob("*.json") if f.is_file())   # regular files only: a FIFO would block
        elif p.is_file():
            if p.suffix.lower() != ".json":
                raise UserInputError(f"records path {str(p)!r} is not a JSON record (its name does not end in .json); "
                                     f"accepted: record files (*.json) or folders")
            out.append(p)
        elif p.exists() or p.is_symlink():
            raise UserInputError(f"records path {str(p)!r} is neither a regular file nor a folder (a FIFO, a device, "
                                 f"a link that does not resolve); accepted: record files or folders")
        else:
            raise UserInputError(f"records path {str(p)!r} does not exist; accepted: record files or folders")
    return out


def _why_unreadable(f: Path, e: BaseException) -> str:
    """One line on why a file is no JSON: a byte-order mark (no writer of ours makes one), the decoder's message
    and place, or the exception's name."""
    if isinstance(e, json.JSONDecodeError):
        if e.msg.startswith("Unexpected UTF-8 BOM"):
            return "it starts with a UTF-8 byte-order mark, which no writer of ours makes"
        return f"{e.msg} at line {e.lineno} column {e.colno}"
    if isinstance(e, UnicodeDecodeError):       # issue 47, round 16 (x26): a UTF-16 file was "UnicodeDecodeError"
        return (f"it is not UTF-8 ({e.reason} at byte {e.start}: a UTF-16 or UTF-32 file, or another encoding); "
                f"accepted: UTF-8 JSON, as every writer of ours writes")
    return type(e).__name__


#: The largest file ``records check`` reads, in MiB: the largest committed record (a serving record) is under
#: 0.1 MiB; a 1 GiB stray ``.json`` took 2.2 GB of memory to call unreadable (issue 47, round 9, m03).
MAX_RECORD_MIB = 16


def check(paths: list[str]) -> list[Verdict]:
    """Verdicts on the JSON files under ``paths``: ``skipped`` for those that are not run records; ``invalid``,
    unread, for one larger than :data:`MAX_RECORD_MIB` (its size read first)."""
    verdicts = []
    for f in record_files(paths):
        try:
            size = f.stat().st_size
            if size > MAX_RECORD_MIB << 20:
                verdicts.append(Verdict(str(f), "invalid", f"{size} bytes, larger than {MAX_RECORD_MIB} MiB; accepted: "
                                                           f"a record as the writers write them (at most "
                                                           f"{MAX_RECORD_MIB} MiB)"))
                continue
            obj = json.loads(f.read_text(), object_pairs_hook=no_duplicate_keys)
        except DuplicateKey as e:
            verdicts.append(Verdict(str(f), "invalid", f"not a record as the project writes it: {e}"))
            continue
        except (OSError, ValueError, RecursionError) as e:   # JSONDecodeError and UnicodeDecodeError are ValueErrors
            verdicts.append(Verdict(str(f), "invalid", f"not readable JSON ({_why_unreadable(f, e)})"))
            continue
        verdicts.append(judge(str(f), obj) if is_run_record(obj) else Verdict(str(f), "skipped", "not a run record"))
    return verdicts


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def paths_under(base: Path, args: list[str]) -> list[str]:
    """The record paths of a table's arguments, relative to ``base`` (default ``results``). Raises
    :class:`UserInputError` for an empty one (it would name ``base`` itself)."""
    if any(not str(a).strip() for a in args):
        raise UserInputError(f"records path {next(a for a in args if not str(a).strip())!r} is empty; accepted: "
                             f"record files or folders")
    return [str(Path(base) / a) for a in (args or ["results"])]


def proof_table(args: list[str], base: Path) -> str:
    """``proof [PATH ...]``: the verdict on every run record under the paths (default ``results``, relative to
    ``base``), one row each, then the counts; the same verdicts as ``sparse-mla records check``."""
    verdicts = [v for v in check(paths_under(base, args)) if v.status != "skipped"]
    rows = [[f"`{os.path.relpath(v.path, base)}`", v.status, v.reason or None] for v in verdicts]
    counts = ", ".join(f"{sum(v.status == s for v in verdicts)} {s}" for s in ("proven", "unproven", "invalid"))
    under = " ".join(f"`{a}`" for a in args or ["results"])
    return markdown(["record", "verdict", "why"], rows, [f"{_plural(len(verdicts), 'run record')} under {under}: "
                                                         f"{counts} (`sparse-mla records check` of the same paths)."])
