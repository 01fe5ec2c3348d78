"""Which writer wrote a record, and the keys it writes: ``records check`` calls an engine record holding a key that
no writer of the project writes at its level **invalid** (issue 47, round 7: ``"timeout": true``, a run's ``"rc":
1``, ``"traceback"``, a ``ran`` block's ``nan_detected`` were proven, and a list of failure words grew each round).

The levels whose keys are known (:mod:`sparse_mla.records.schema`): an engine (launch) record's top level, each of
its engine runs (``runs.X``) and its served check, in each of its forms (a parity run, one engine's record, the
diagnosis against engines of ``tools/gpu/diagnose_vs_engine.py``), and every ``ran`` block wherever it is (one writer,
:func:`sparse_mla.vllm_plugin.ran.collect`: :class:`~sparse_mla.records.schema.Ran`, held by the record kinds'
shapes), and a GLM-5.3-Flash comparison's top level and engines; below them (round 8), each generation, each layer
of ``layers``, ``throughput``, ``simulated``, ``checkpoint`` (a comparison's is its model's config), a parity record's
``model`` and ``run_specs`` entries, and the header ``environment`` wherever an engine record has it; and a serving
benchmark's (:data:`sparse_mla.records.schema.ServeRecord`: its top level, header, model, load, server block, each
run and its summary, and, since the round's leftovers, each run's servers, passes, their client passes (warm-up and
timed) and the 2026-12-01 client's warm-up and repeats; vLLM's own results under ``repeats`` are held to none, their
keys being vLLM's). A kernel benchmark is held to no such list; a failure said anywhere in a record is still read by
:func:`sparse_mla.workbook.proof.said_failed`.
"""
from __future__ import annotations

from ..records import schema
from ..records.engine_tables import engine_runs
from .commands import NO_WRITTEN_FORM, SERVE_KEYS, parsed_launch


def launch_command(rec: dict) -> bool:
    """Whether the record's ``environment.command`` is a ``sparse-mla launch`` command line (parsed or not by
    launch's parser: one that fails to parse is :func:`sparse_mla.workbook.commands.command_problems`' line)."""
    env = rec.get("environment") if isinstance(rec.get("environment"), dict) else {}
    cmd = env.get("command")
    if not isinstance(cmd, str):
        return False
    got = parsed_launch(cmd)
    return got is not None and not (isinstance(got, str) and ("an engine record's is" in got or NO_WRITTEN_FORM in got))


def is_glm5next_comparison(obj) -> bool:
    """Whether ``obj`` is a record of ``tools/gpu/glm5next_parity.py``: its model's ``config.json`` (under
    ``model_config``; ``checkpoint`` in those of 2026-12-06) says ``glm5_next`` and its command is not ``sparse-mla
    launch`` (a launch record given such a block stays one, its block a key its writer does not write)."""
    if not isinstance(obj, dict) or launch_command(obj):
        return False
    cfg = obj.get("model_config", obj.get("checkpoint"))
    return isinstance(cfg, dict) and cfg.get("model_type") == "glm5_next"


def written_shape(rec) -> type | None:
    """The model of the keys ``rec``'s writer writes (:data:`sparse_mla.records.schema.ParityRecord`,
    ``OneEngineRecord``, ``DiagnosisRecord``, ``Glm5NextRecord``, ``ServeRecord``), or None for a record whose keys are not all known. A record whose
    command is ``sparse-mla launch`` is an engine record whatever else it holds (a ``repeats`` or ``diagnosis`` key
    added to it is a key its writer does not write)."""
    if not isinstance(rec, dict):
        return None
    if is_glm5next_comparison(rec):
        return schema.Glm5NextRecord
    if launch_command(rec):
        return schema.ParityRecord if "runs" in rec else schema.OneEngineRecord
    if "diagnosis" in rec:
        return schema.DiagnosisRecord
    if any(k in rec for k in SERVE_KEYS):
        return schema.ServeRecord
    if not engine_runs(rec):
        return None
    return schema.ParityRecord if "runs" in rec else schema.OneEngineRecord


def unwritten_keys(rec: dict) -> list[str]:
    """One line per level of ``rec`` holding a key no writer writes there (``no writer writes the key 'timeout' at
    the top level; accepted: ...``); ``[]`` where there is none or the record's keys are not all known."""
    shape = written_shape(rec)
    return [] if shape is None else [line for line in schema.problems(rec, shape) if line.startswith("no writer")]
