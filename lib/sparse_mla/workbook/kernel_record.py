"""A kernel benchmark's record (``sparse-mla bench kernel``, :func:`sparse_mla.bench.kernel.bench_kernel`: no engine,
no ``ran``) against its writer: the cache layouts it names, the ones the writer can write; each speedup of a row
its two times' ratio, by the writer's formula (:func:`sparse_mla.bench.kernel.speedups`). Its header is judged by
:func:`sparse_mla.workbook.proof.header_problems` as every record's is. Issue 47, round 12: ``kv_cache_dtype: "fp4"``
in a case of ``bench_kernel_h200.json`` and a ``speedup_vs_flashmla`` of 50 beside times of 0.54 were proven
("unproven: no engine run", its names and figures never read).
"""
from __future__ import annotations

import math

from ..records.values import is_number


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
            if "kv_cache_dtype" in d and d["kv_cache_dtype"] not in CACHE_LAYOUTS] + _speedup_problems(rec)


def _speedup_problems(rec: dict) -> list[str]:
    """Each speedup of a ``bench`` row (:data:`sparse_mla.bench.kernel.SPEEDUPS`) that is not its two times' ratio
    as :func:`sparse_mla.bench.kernel.speedups` computes it (to 1e-9 relative: the record holds µs, the writer divided
    ms; NaN where a time is NaN), one line each."""
    from ..bench.kernel import SPEEDUPS, speedups

    out = []
    for i, row in enumerate(_dicts(rec.get("bench"))):
        try:
            want = speedups({t: row[t] for pair in SPEEDUPS.values() for t in pair if is_number(row.get(t))})
        except ZeroDivisionError:          # a time of 0 is the shape check's line
            continue
        for k, w in want.items():
            have = row.get(k)
            if is_number(have) and not (math.isnan(have) and math.isnan(w)) and not abs(have - w) <= 1e-9 * abs(w):
                a, b = SPEEDUPS[k]
                out.append(f"bench[{i}].{k} {have!r}, not its {a} {row[a]!r} over its {b} {row[b]!r} ({w!r}, "
                           f"sparse_mla.bench.kernel.speedups)")
    return out
