"""The diagnosis against real engines (``tools/gpu/diagnose_vs_engine.py``, a record with ``diagnosis`` beside its
``runs``): what ``sparse-mla diagnose --capability local`` predicted per KV-cache dtype, what a real engine on the
same GPU (``launch --backend auto``) ran, and the ``differences`` between them -- computed here, by the tool when it
writes the record and by ``records check`` when it reads one (issue 47, round 7: a record whose differences said the
prediction was wrong, or whose engine ran a backend the diagnosis did not predict, was proven).

``records check`` calls such a record **invalid** where its ``differences`` are not what its predictions and engines
give, or its three blocks do not name the same KV-cache dtypes, each run asking its own, or a diagnosis's own
``effective_kv_cache_dtype``, ``blockers`` and ``headline`` are not what the diagnosis writes beside its prediction
(round 8: a headline of another dtype, a blocker beside "engine starts", an ``auto`` cache resolved to
``fp8_ds_mla`` were proven); **unproven** where the differences say the diagnosis was wrong (an honest record of a
wrong prediction proves no diagnosis). The keys of a diagnosis and of its prediction are
:data:`sparse_mla.records.schema.DIAGNOSIS_ENTRY_KEYS` and ``PREDICTED_KEYS`` (:mod:`.written` holds a record to them).
"""
from __future__ import annotations

import argparse
import ast
import shlex
from pathlib import Path

from ..diagnose.path import engine_starts_of, headline, not_loaded_note
from ..diagnose.runtime import DEEPGEMM_INDEXER
from ..diagnose.selection import auto_kv_cache_dtypes, resolved_kv_cache_dtype
from ..records.schema import PREDICTED_KEYS
from ..vllm_plugin.switches import INDEXER_NAME


def predicted(diag: dict) -> dict:
    """What a diagnosis record (``sparse_mla.diagnose.diagnose``) says the engine will do: the attention backend, the
    cache dtype string of its MLA layers (``configured_kv_cache_dtype``: what ``layer.kv_cache_dtype`` reads in the
    engine, ``auto`` unresolved -- like with like; the resolved dtype is ``effective_kv_cache_dtype``, kept in the
    record beside it), who computes the indexer's logits (``"triton"`` where the plugin's Triton indexer replaces
    DeepGEMM's) and whether the engine starts."""
    ix = diag.get("indexer") or {}
    ours = ix.get("with_plugin") == INDEXER_NAME
    return {"attention": diag.get("selected"), "kv_cache_dtype": diag.get("configured_kv_cache_dtype"),
            "indexer": "triton" if ours else "deepgemm", "engine_starts": diag.get("engine_starts")}


def entry(diag: dict) -> dict:
    """A diagnosis record's (``sparse_mla.diagnose.diagnose``) entry in the record, under its KV-cache dtype:
    ``{"predicted": predicted(diag), "headline", "effective_kv_cache_dtype", "blockers"}``, the last three the
    diagnosis's own (:data:`sparse_mla.records.schema.DIAGNOSIS_ENTRY_KEYS`)."""
    return {"predicted": predicted(diag), "headline": diag.get("headline"),
            "effective_kv_cache_dtype": diag.get("effective_kv_cache_dtype"), "blockers": diag.get("blockers")}


def observed(engine: dict) -> dict:
    """The same facts, read off an engine record (its ``layers`` and its ``ran`` block; ``error``: it did not
    start)."""
    ran = engine.get("ran") if isinstance(engine.get("ran"), dict) else {}
    att = sorted(ran.get("attention") or {})
    layers = engine.get("layers") if isinstance(engine.get("layers"), dict) else {}
    kv = sorted({v.get("kv_cache_dtype") for v in layers.values()
                 if isinstance(v, dict) and v.get("backend") in att and v.get("kv_cache_dtype")})
    calls = ran.get("indexer") if isinstance(ran.get("indexer"), dict) else {}
    return {"attention": att[0] if len(att) == 1 else att, "kv_cache_dtype": kv[0] if len(kv) == 1 else kv,
            "indexer": "triton" if calls.get("triton") else "deepgemm" if calls.get("deepgemm") else None,
            "engine_starts": "error" not in engine}


def differences(pred: dict, obs: dict) -> list[str]:
    """One line per fact the prediction got wrong (``[]``: the diagnosis said what the engine did)."""
    return [f"{k}: diagnosed {pred[k]!r}, the engine ran {obs.get(k)!r}" for k in pred if pred[k] != obs.get(k)]


#: The tool's file name: its record's ``environment.command`` is ``python3 <folder>/diagnose_vs_engine.py ARGS``.
TOOL = "diagnose_vs_engine.py"
#: What the tool asks each engine besides its checkpoint, KV-cache dtype and record file.
ENGINE_ARGS = ("--backend", "auto", "--prompt-lengths", "48,900", "--max-tokens", "4")


def tool_arguments(argv: list[str]) -> tuple[str, str, list[str]]:
    """The tool's arguments ``CHECKPOINT OUT.json [KV ...]``: ``(checkpoint, out, KV-cache dtypes)``, every dtype
    the diagnosis knows (``sparse_mla.diagnose.request.KV_CACHE_DTYPES``) where none is named. Raises ValueError
    (fewer than two arguments)."""
    from ..diagnose.request import KV_CACHE_DTYPES

    if len(argv) < 2:
        raise ValueError(f"{len(argv)} argument(s); accepted: CHECKPOINT OUT.json [KV ...]")
    return str(Path(argv[0])), argv[1], list(argv[2:]) or list(KV_CACHE_DTYPES)


def tool_command(folder: str, argv: list[str]) -> str:
    """The tool's command line as its record's header names it (``python3 FOLDER/diagnose_vs_engine.py ARGV``)."""
    return shlex.join(["python3", f"{folder}/{TOOL}", *argv])


def engine_words(checkpoint: str, kv: str, json_out: str) -> list[str]:
    """The ``sparse-mla`` arguments the tool runs one engine with (``launch --model ... --kv-cache-dtype KV``)."""
    return ["launch", "--model", str(checkpoint), *ENGINE_ARGS[:2], "--kv-cache-dtype", kv, *ENGINE_ARGS[2:],
            "--json-out", str(json_out)]


def engine_record_file(folder: Path, kv: str) -> Path:
    """The ``--json-out`` the tool gives the engine of KV-cache dtype ``kv``: a file named after it in the tool's one
    scratch folder (``folder``, a ``tempfile.mkdtemp``)."""
    return Path(folder) / f"{kv}.json"


def command_problems(rec: dict) -> list[str]:
    """A diagnosis record against the commands that wrote it (issue 47, round 9: a run's own command asking
    another KV-cache dtype, a header naming another checkpoint than every run's, were proven): the header's
    ``environment.command`` is the tool's (:func:`tool_arguments`), its dtypes the record's runs; each run's own
    command (where its engine wrote a header) is the one :func:`engine_words` gives for the header's checkpoint and
    the run's dtype, both read by launch's parser (:func:`sparse_mla.workbook.commands.parsed_launch`; the record
    file aside), and the run what its own command asked (:func:`sparse_mla.workbook.commands.one_engine_problems`:
    its tp, mode, speculation; issue 47, round 10: d12, d13). One line per difference; ``[]`` for another record or
    a header without a command."""
    from .commands import one_engine_problems, parsed_launch, scratch_problems

    env = rec.get("environment") if is_diagnosis_record(rec) and isinstance(rec.get("environment"), dict) else {}
    if not isinstance(env.get("command"), str):
        return []
    try:
        words = shlex.split(env["command"])
        at = next(i for i, w in enumerate(words) if Path(w).name == TOOL)
        ckpt, _, kvs = tool_arguments(words[at + 1:])
    except (ValueError, StopIteration) as e:
        return [f"environment.command {env['command'][:120]!r} is not the tool's ({str(e) or 'no ' + TOOL}); accepted: "
                f"python3 .../{TOOL} CHECKPOINT OUT.json [KV ...]"]
    runs = _blocks(rec)[1]
    if set(kvs) != set(runs):
        return [f"runs {sorted(runs)}, the header command's KV-cache dtypes {sorted(set(kvs))}"]
    out, files = [], {}
    for kv, run in runs.items():
        if isinstance(run, dict) and "generations" in run:
            out.append(f"runs.{kv}: generations, which the tool removes from every engine's record")
        cmd = run.get("environment", {}).get("command") if isinstance(run, dict) and isinstance(
            run.get("environment"), dict) else None
        if cmd is None:
            continue                       # an engine that died writes no header
        own = parsed_launch(cmd) if isinstance(cmd, str) else "not a command line"
        want = parsed_launch(shlex.join(["sparse-mla", *engine_words(ckpt, kv, "-")]))
        if not isinstance(own, argparse.Namespace):
            out.append(f"runs.{kv}: its own command {str(cmd)[:80]!r} is no `sparse-mla launch` ({own})")
            continue
        files[f"runs.{kv}"] = (own.json_out, lambda folder, k=kv: engine_record_file(folder, k))
        out += [f"runs.{kv}: {p}" for p in one_engine_problems(run, own, generations=False)]    # the tool drops them
        out += [f"runs.{kv}: its own command asks --{f.replace('_', '-')} {getattr(own, f, None)}, the tool asks "
                f"{getattr(want, f)} for the header's checkpoint {ckpt} and the run's dtype {kv!r}"
                for f in vars(want) if f != "json_out" and getattr(own, f, None) != getattr(want, f)]
    return out + scratch_problems(files)


def is_diagnosis_record(rec) -> bool:
    """Whether ``rec`` is a record of ``tools/gpu/diagnose_vs_engine.py`` (a ``diagnosis`` beside its ``runs``)."""
    return isinstance(rec, dict) and "diagnosis" in rec and "runs" in rec


def _blocks(rec: dict) -> tuple[dict, dict, dict]:
    return tuple(rec.get(k) if isinstance(rec.get(k), dict) else {} for k in ("diagnosis", "runs", "differences"))


def diagnosis_problems(rec: dict) -> list[str]:
    """What a diagnosis record says otherwise than its own data, one line each: ``diagnosis``, ``runs`` and
    ``differences`` naming other KV-cache dtypes, a run asking another KV-cache dtype than its key, a prediction that
    is not ``{attention, kv_cache_dtype, indexer, engine_starts}``, and ``differences`` that are not what
    :func:`differences` gives from the prediction and the engine's record; ``[]`` for another record."""
    if not is_diagnosis_record(rec):
        return []
    diag, runs, said = _blocks(rec)
    if not set(diag) == set(runs) == set(said):
        return [f"diagnosis names {sorted(diag)}, runs {sorted(runs)}, differences {sorted(said)}: one KV-cache dtype "
                f"each, the same in all three"]
    out = []
    for kv in diag:
        run, ent = (x[kv] if isinstance(x[kv], dict) else {} for x in (runs, diag))
        pred = ent.get("predicted")
        if "kv_cache_dtype" in run and run["kv_cache_dtype"] != kv:
            out.append(f"runs.{kv}: kv_cache_dtype {run['kv_cache_dtype']!r}, not the dtype it is the run of")
        if not isinstance(pred, dict) or set(pred) != set(PREDICTED_KEYS):
            out.append(f"diagnosis.{kv}.predicted {pred!r} is not {{{', '.join(PREDICTED_KEYS)}}}")
            continue
        want = differences(pred, observed(run))
        if said[kv] != want:
            out.append(f"differences.{kv} {said[kv]!r}, its prediction and engine give {want!r}")
        out += [f"diagnosis.{kv}.{line}" for line in entry_problems(ent)]
    return out + command_problems(rec)


def entry_problems(ent: dict) -> list[str]:
    """What one diagnosis :func:`entry` says beside its prediction (a dict of ``PREDICTED_KEYS``) otherwise than the
    diagnosis writes it, recomputed with the diagnosis's own functions; the first found, one line (``[]``: none):
    ``effective_kv_cache_dtype`` not what the predicted ``kv_cache_dtype`` resolves to
    (:func:`sparse_mla.diagnose.selection.resolved_kv_cache_dtype`: ``auto`` a model dtype vLLM accepts);
    ``blockers`` not ``[{"stage", "reason"}]`` texts, or at odds with ``engine_starts``
    (:func:`sparse_mla.diagnose.path.engine_starts_of`: the tool's diagnosis is ``local``, never host-dependent);
    ``headline`` not :func:`sparse_mla.diagnose.path.headline` of them (:func:`headlines`)."""
    pred, eff, blockers = ent["predicted"], ent.get("effective_kv_cache_dtype"), ent.get("blockers")
    conf = pred["kv_cache_dtype"]
    accepted = sorted(auto_kv_cache_dtypes()) if conf == "auto" else [resolved_kv_cache_dtype(conf, None)]
    if not (eff is None or isinstance(eff, str)) or eff not in accepted:
        return [f"effective_kv_cache_dtype {eff!r}: the predicted kv_cache_dtype {conf!r} resolves to "
                f"{' or '.join(map(repr, accepted))}"]
    if not isinstance(blockers, list) or engine_starts_of(blockers, False) is not pred["engine_starts"]:
        return [f"blockers {blockers!r:.160} beside predicted engine_starts {pred['engine_starts']!r}; accepted: "
                f"a list, empty where the engine starts (True), not where it stops (False)"]
    if not all(isinstance(b, dict) and set(b) == {"stage", "reason"} and all(isinstance(v, str) for v in b.values())
               for b in blockers):
        return [f"blockers {blockers!r:.160}; accepted: [{{'stage': TEXT, 'reason': TEXT}}, ...]"]
    said, want = ent.get("headline"), headlines(pred, eff, blockers)
    if said in want or (pred["indexer"] != "triton" and any(_not_loaded(said, h) for h in want)):
        return []
    note = "" if pred["indexer"] == "triton" else ", each perhaps with the note that vLLM would not load the plugin"
    return [f"headline {said!r:.160}, not what the diagnosis writes for its prediction, effective_kv_cache_dtype "
            f"and blockers; accepted: {' or '.join(map(repr, want))}{note}"]


def headlines(pred: dict, effective: str | None, blockers: list[dict]) -> list[str]:
    """Every ``headline`` (:func:`sparse_mla.diagnose.path.headline`) a diagnosis writes for a prediction, its
    ``effective_kv_cache_dtype`` and ``blockers``, by what the prediction does not keep: a ``"triton"`` indexer is
    the plugin's (``INDEXER_NAME``) on a sparse model; ``"deepgemm"`` is stock vLLM's (``DEEPGEMM``), none (no
    indexer kernels here) or a dense model's."""
    forms = ([("sparse (DSA)", INDEXER_NAME, None)] if pred["indexer"] == "triton" else
             [("sparse (DSA)", None, DEEPGEMM_INDEXER), ("sparse (DSA)", None, None), ("dense", None, None)])
    return [headline({"blockers": blockers, "selected": pred["attention"], "effective_kv_cache_dtype": effective,
                      "mla": mla, "indexer": {"with_plugin": ours, "stock": stock},
                      "engine_starts": pred["engine_starts"]}) for mla, ours, stock in forms]


def _not_loaded(said, base: str) -> bool:
    """Whether ``said`` is ``base`` with :func:`sparse_mla.diagnose.path.not_loaded_note` after it (vLLM would not
    load the plugin: stock vLLM's answer), for ``VLLM_PLUGINS`` unset or as the note quotes it."""
    if not isinstance(said, str) or not said.startswith(base):
        return False
    note = said[len(base):]
    if note == not_loaded_note(None):
        return True
    head, tail = not_loaded_note("\0").split(repr("\0"))
    if not (note.startswith(head) and note.endswith(tail)) or len(note) <= len(head) + len(tail):
        return False
    try:
        raw = ast.literal_eval(note[len(head):len(note) - len(tail)])
    except (ValueError, SyntaxError):
        return False
    return isinstance(raw, str) and note == not_loaded_note(raw)


def diagnosis_said(rec: dict) -> list[str]:
    """What a diagnosis record says went wrong: each KV-cache dtype whose ``differences`` say the diagnosis
    predicted otherwise than the engine ran, one line each; ``[]`` for another record."""
    if not is_diagnosis_record(rec):
        return []
    return [f"differences.{kv} says the diagnosis was wrong: {'; '.join(map(str, d))[:160]}"
            for kv, d in _blocks(rec)[2].items() if d]
