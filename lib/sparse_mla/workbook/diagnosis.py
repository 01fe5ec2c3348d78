"""The diagnosis against real engines (``tools/gpu/diagnose_vs_engine.py``, a record with ``diagnosis`` beside its
``runs``): what ``sparse-mla diagnose --capability local`` predicted per KV-cache dtype, what a real engine on the
same GPU (``launch --backend auto``) ran, and the ``differences`` between them -- computed here, by the tool when it
writes the record and by ``records check`` when it reads one (issue 47, round 7: a record whose differences said the
prediction was wrong, or whose engine ran a backend the diagnosis did not predict, was proven).

``records check`` calls such a record **invalid** where its ``differences`` are not what its predictions and engines
give, or its three blocks do not name the same KV-cache dtypes, each run asking its own; **unproven** where the
differences say the diagnosis was wrong (an honest record of a wrong prediction proves no diagnosis).
"""
from __future__ import annotations


def predicted(diag: dict) -> dict:
    """What a diagnosis record (``sparse_mla.diagnose.diagnose``) says the engine will do: the attention backend, the
    cache dtype string of its MLA layers (``configured_kv_cache_dtype``: what ``layer.kv_cache_dtype`` reads in the
    engine, ``auto`` unresolved -- like with like; the resolved dtype is ``effective_kv_cache_dtype``, kept in the
    record beside it), who computes the indexer's logits (``"triton"`` where the plugin's Triton indexer replaces
    DeepGEMM's) and whether the engine starts."""
    ix = diag.get("indexer") or {}
    ours = ix.get("with_plugin") == "TRITON_DSA_INDEXER"
    return {"attention": diag.get("selected"), "kv_cache_dtype": diag.get("configured_kv_cache_dtype"),
            "indexer": "triton" if ours else "deepgemm", "engine_starts": diag.get("engine_starts")}


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
        run, pred = runs[kv] if isinstance(runs[kv], dict) else {}, (diag[kv] or {}).get("predicted")
        if "kv_cache_dtype" in run and run["kv_cache_dtype"] != kv:
            out.append(f"runs.{kv}: kv_cache_dtype {run['kv_cache_dtype']!r}, not the dtype it is the run of")
        if not isinstance(pred, dict) or set(pred) != {"attention", "kv_cache_dtype", "indexer", "engine_starts"}:
            out.append(f"diagnosis.{kv}.predicted {pred!r} is not {{attention, kv_cache_dtype, indexer, "
                       f"engine_starts}}")
            continue
        want = differences(pred, observed(run))
        if said[kv] != want:
            out.append(f"differences.{kv} {said[kv]!r}, its prediction and engine give {want!r}")
    return out


def diagnosis_said(rec: dict) -> list[str]:
    """What a diagnosis record says went wrong: each KV-cache dtype whose ``differences`` say the diagnosis
    predicted otherwise than the engine ran, one line each; ``[]`` for another record."""
    if not is_diagnosis_record(rec):
        return []
    return [f"differences.{kv} says the diagnosis was wrong: {'; '.join(map(str, d))[:160]}"
            for kv, d in _blocks(rec)[2].items() if d]
