"""A kernel benchmark's record (``sparse-mla bench kernel``, :func:`sparse_mla.bench.kernel.bench_kernel`: no engine,
no ``ran``) against its writer: the cache layouts it names, the ones the writer can write. Its header is judged by
:func:`sparse_mla.workbook.proof.header_problems` as every record's is. Issue 47, round 12: ``kv_cache_dtype: "fp4"``
in a case of ``bench_kernel_h200.json`` was proven ("unproven: no engine run", its names never read).
"""
from __future__ import annotations


def _dicts(v) -> list[dict]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def kernel_record_problems(rec: dict) -> list[str]:
    """Each ``kv_cache_dtype`` of the header, the ``bench`` rows and the ``checks`` that is no cache layout the
    writer writes (:data:`sparse_mla.layouts.CACHE_LAYOUTS`: it takes the layout through
    :func:`sparse_mla.kernels.launch_plan.check_cache_layout`, which answers one of those names and refuses any
    other), one line each naming the value and what is accepted; ``[]`` for a record with no such field."""
    from ..layouts import CACHE_LAYOUTS

    env = rec.get("environment")
    places = [("environment", env)] if isinstance(env, dict) else []
    places += [(f"{k}[{i}]", row) for k in ("bench", "checks") for i, row in enumerate(_dicts(rec.get(k)))]
    return [f"{where}.kv_cache_dtype {d['kv_cache_dtype']!r} is not accepted; accepted: "
            f"{', '.join(map(repr, CACHE_LAYOUTS))} (the cache layouts the kernels read, sparse_mla.layouts."
            f"CACHE_LAYOUTS)" for where, d in places
            if "kv_cache_dtype" in d and d["kv_cache_dtype"] not in CACHE_LAYOUTS]
