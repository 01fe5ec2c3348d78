"""A kernel benchmark's record (``sparse-mla bench kernel``, :func:`sparse_mla.bench.kernel.bench_kernel`: no engine,
no ``ran``) against its writer: the cache layouts it names, the ones the writer can write; each speedup of a row
its two times' ratio, by the writer's formula (:func:`sparse_mla.bench.kernel.speedups`; an indexer benchmark's
speed, :func:`sparse_mla.bench.indexer.speedups`). Its header is judged by
:func:`sparse_mla.workbook.proof.header_problems` as every record's is. Issue 47, round 12: ``kv_cache_dtype: "fp4"``
in a case of ``bench_kernel_h200.json`` and a ``speedup_vs_flashmla`` of 50 beside times of 0.54 were proven
("unproven: no engine run", its names and figures never read).

Issue 47, round 13: the header's command is read by the writer's own parser (``sparse-mla bench kernel`` or
``indexer``, :func:`sparse_mla.bench.cli.add_cli`, :func:`sparse_mla.workbook.commands.parsed_cli`), the record's kind
by the keys its writer writes, and a kernel record's cache layout (header and rows) held to the command's
``--kv-cache-dtype``: a command with another layout, an option the tool does not take or the other tool's command
was proven (r31-r33, r49, r50, r55). A speedup without both its times, or not a number (r35, r36), and an indexer
row's ``speed_vs_deepgemm`` other than its times' ratio (s16) were proven too.
"""
from __future__ import annotations

import math

from ..records.values import header_time, is_int, is_number

#: The keys only each benchmark writer writes at the top of its record (:func:`sparse_mla.bench.kernel.run_bench`:
#: ``environment``, ``checks``, ``bench``; :func:`sparse_mla.bench.indexer.run_bench`: ``environment``, ``bench``,
#: ``targets``, ``sm80_build``): the record's kind, the ``sparse-mla bench`` subcommand that wrote it.
KIND_KEYS = {"kernel": ("checks",), "indexer": ("targets", "sm80_build")}
#: From c854b63 (2026-11-29T22:29:33+00:00) on, the header's command is :func:`sparse_mla.records.cli_command`'s;
#: before, the writer wrote ``sparse-mla`` and ``sys.argv[1:]`` whatever program ran it (``sparse-mla /root/out``
#: from a script: results/h200/bench_kernel_h200_sweep1.json), so an older record's command is not compared.
COMMAND_SINCE = "2026-11-29T22:29:33+00:00"


def _dicts(v) -> list[dict]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def kernel_record_problems(rec: dict) -> list[str]:
    """Each ``kv_cache_dtype`` of the header, the ``bench`` rows and the ``checks`` that is no cache layout the
    writer writes (:data:`sparse_mla.layouts.CACHE_LAYOUTS`: it takes the layout through
    :func:`sparse_mla.kernels.launch_plan.check_cache_layout`, which answers one of those names and refuses any
    other), one line each naming the value and what is accepted; then the record against its command
    (:func:`command_problems`) and each row's speedups its times' ratio (:func:`_speedup_problems`). ``[]`` for a
    record with none of these fields."""
    from ..layouts import CACHE_LAYOUTS

    env = rec.get("environment")
    places = [("environment", env)] if isinstance(env, dict) else []
    places += [(f"{k}[{i}]", row) for k in ("bench", "checks") for i, row in enumerate(_dicts(rec.get(k)))]
    return [f"{where}.kv_cache_dtype {d['kv_cache_dtype']!r} is not accepted; accepted: "
            f"{', '.join(map(repr, CACHE_LAYOUTS))} (the cache layouts the kernels read, sparse_mla.layouts."
            f"CACHE_LAYOUTS)" for where, d in places
            if "kv_cache_dtype" in d and d["kv_cache_dtype"] not in CACHE_LAYOUTS] + \
        command_problems(rec, places) + _speedup_problems(rec)


def record_kind(rec: dict) -> str | list[str] | None:
    """``"kernel"`` or ``"indexer"``: which ``sparse-mla bench`` writer writes a record with ``rec``'s top-level keys
    (:data:`KIND_KEYS`, beside ``bench``); None for a record without ``bench`` rows or with neither's keys (another
    tool's), or one line where it holds both writers' keys."""
    if not isinstance(rec.get("bench"), list):
        return None
    kinds = [k for k, keys in KIND_KEYS.items() if any(key in rec for key in keys)]
    if len(kinds) > 1:
        return [f"it holds {', '.join(k for ks in KIND_KEYS.values() for k in ks if k in rec)}: keys of both the "
                f"kernel and the indexer benchmark's records; no writer writes both (sparse_mla.workbook."
                f"kernel_record.KIND_KEYS)"]
    return kinds[0] if kinds else None


def command_problems(rec: dict, places: list[tuple[str, dict]]) -> list[str]:
    """A benchmark record against its header's command (module docstring): the command read by the parser of the
    subcommand that writes the record's kind (:func:`record_kind`; :func:`sparse_mla.workbook.commands.parsed_cli`:
    another subcommand, an option it does not take, a form the writer never writes are one line), and a kernel
    record's ``kv_cache_dtype`` in ``places`` (``[(where, header or row)]``) the layout the command asked for
    (``--kv-cache-dtype``, read as the CLI reads it: :func:`sparse_mla.layouts.check_kv_cache_dtype` of
    :data:`~sparse_mla.layouts.CACHE_LAYOUTS`; the writer writes it into the header and every row). ``[]`` for a
    record of a notebook or script (``python: sparse_mla (called from ...)``), without a command, or older than
    :data:`COMMAND_SINCE`."""
    from ..bench.cli import add_cli, check_indexer_args, check_kernel_args
    from ..errors import UserInputError
    from ..layouts import CACHE_LAYOUTS
    from .commands import parsed_cli

    kind = record_kind(rec)
    env = rec.get("environment") if isinstance(rec.get("environment"), dict) else {}
    when = header_time(env.get("date"))
    if isinstance(kind, list) or not isinstance(env.get("command"), str) or (
            when is not None and when < header_time(COMMAND_SINCE)):
        return kind if isinstance(kind, list) else []
    if kind is None:
        return _kind_missing(rec, env["command"])
    args = parsed_cli(env["command"], ("bench", kind), add_cli, f"a{'n' if kind == 'indexer' else ''} {kind} "
                                                               f"benchmark's record")
    if args is None or isinstance(args, str):
        return [args] if isinstance(args, str) else []
    try:        # what the writer refuses before it runs (bench.cli.check_kernel_args / check_indexer_args)
        checked = (check_indexer_args if kind == "indexer" else check_kernel_args)(args)
    except UserInputError as e:
        return [f"environment.command's values are none bench {kind} takes ({e})"]
    if kind == "indexer":
        return _indexer_case_problems(rec, args, checked)
    kv = args.kv_cache_dtype
    other: dict = {}
    for where, d in places:
        if d.get("kv_cache_dtype") in CACHE_LAYOUTS and d["kv_cache_dtype"] != kv:
            other.setdefault(d["kv_cache_dtype"], []).append(where)
    return [f"{w[0]}.kv_cache_dtype {v!r}{f' (and {len(w) - 1} more)' if len(w) > 1 else ''}, the command asked "
            f"--kv-cache-dtype {kv} (sparse-mla bench kernel writes it into the header and every row)"
            for v, w in other.items()] + _kernel_asked_problems(rec, args, kv)


def _kind_missing(rec: dict, command: str) -> list[str]:
    """A record with ``bench`` rows whose keys name no writer (:func:`record_kind` None) but whose command is one of
    the two benchmarks': the keys that writer always writes are missing (issue 47, round 14, t65: a kernel record
    without ``checks`` was never compared with its command)."""
    from .commands import shell_words

    words = shell_words(command)
    sub = words[1:3] if isinstance(words, list) and words[:1] == ["sparse-mla"] else []
    if not isinstance(rec.get("bench"), list) or sub[:1] != ["bench"] or sub[1:] not in (["kernel"], ["indexer"]):
        return []
    return [f"no {' or '.join(KIND_KEYS[sub[1]])}, which `sparse-mla bench {sub[1]}` writes into every record "
            f"(sparse_mla.workbook.kernel_record.KIND_KEYS)"]


def _sorted(values: set) -> list:
    """Numbers in order, then anything else (a hand-edited row's text) by its text."""
    return sorted(values, key=lambda v: (0, v, "") if is_number(v) else (1, 0, str(v)))


def _asked_problems(rec: dict, asked: dict[str, set], tool: str) -> list[str]:
    """Each row field of ``asked`` (``{field: the values the command asks}``): the values of the ``bench`` rows are
    those values, every one asked run (the writer times every case it is asked)."""
    rows = _dicts(rec.get("bench"))
    out = []
    for field, want in asked.items():
        have = {r.get(field) for r in rows if field in r}
        if rows and have != want:
            out.append(f"its rows' {field} {_sorted(have)}, the command's `sparse-mla {tool}` asks {_sorted(want)}")
    return out


def _case(row: dict, fields: tuple[str, ...]) -> tuple:
    """A row's case: its ``fields`` in order, each an integer as the writer writes it, else the text ``"<value>"``
    (a float ``1.0`` equals ``1`` in Python; the writer writes neither a float nor text there)."""
    return tuple(v if is_int(v) or isinstance(v, str) else f"<{v!r}>" for v in (row.get(f) for f in fields))


def _case_problems(what: str, have: list[tuple], want, whose: str, why: str) -> list[str]:
    """``have`` (a record's cases, in any order) against ``want`` (a ``Counter`` of the writer's): one line naming
    what is more and what is missing."""
    from collections import Counter

    got = Counter(have)
    if got == want:
        return []
    extra, missing = sorted((got - want).elements(), key=str), sorted((want - got).elements(), key=str)
    return [f"{what} are not {whose}: {len(extra)} more ({extra[:3]}), {len(missing)} missing ({missing[:3]}); {why}"]


def _indexer_case_problems(rec: dict, args, prefill) -> list[str]:
    """An indexer record's rows against its command: one row per case :func:`sparse_mla.bench.indexer.cases` gives
    for ``--heads``, ``--batches``, ``--contexts``, ``--prefill`` (parsed: ``prefill``) and ``--quick``, each as often
    as listed. Issue 47, round 16 (v20, v21): a repeated or deleted row, and heads compared as a set."""
    from collections import Counter

    from ..bench.indexer import cases

    decode, pre = cases(args.heads, args.batches, args.contexts, prefill, args.quick)
    want = Counter([("decode", *c) for c in decode] + [("prefill", *c) for c in pre])
    have = [_case(r, ("kind", "H", "B", "context", "next_n") if r.get("kind") == "decode" else ("kind", "H", "M", "N"))
            for r in _dicts(rec.get("bench"))]
    return _case_problems("its rows' cases (kind, H, B, context, next_n / M, N)", have, want, "the command's",
                          "the writer times each case of bench.indexer.cases once")


def _kernel_asked_problems(rec: dict, args, kv: str) -> list[str]:
    """A kernel record's rows and checks against ``sparse-mla bench kernel``'s ``args`` (the writer's ``run_bench``):
    its cases are ``--heads`` x ``--tokens`` in that order, each value as often as listed (default tokens
    :data:`sparse_mla.bench.kernel.TOKENS`, or ``FP8_TOKENS`` on ``fp8_ds_mla``); one row per case, each at
    ``--cache-tokens``; the launch comparison's ``old_*`` figures in every row exactly where ``--compare-launch``
    asked them; one check per case (its ``H`` and ``T``), none under ``--no-check``. Issue 47, round 14 (t61-t64,
    t68): only ``--kv-cache-dtype`` was compared; round 15 (u01, u09-u12): a missing, repeated or other case, and a
    check of another case, passed a comparison of sets."""
    from collections import Counter

    from ..bench.kernel import CHECK_CACHE_TOKENS, FP8_TOKENS, TOKENS, TOPK

    tokens = args.tokens or (FP8_TOKENS if kv == "fp8_ds_mla" else TOKENS)
    cases = Counter((h, t) for h in args.heads for t in tokens)
    rows = _dicts(rec.get("bench"))
    out = _asked_problems(rec, {"cache_tokens": {args.cache_tokens}, "topk": {TOPK}}, "bench kernel")
    for what, items, want in (("rows", rows, cases), ("checks", _dicts(rec.get("checks")),
                                                      Counter() if args.no_check else cases)):
        none = " (--no-check: none)" if args.no_check and what == "checks" else ""
        out += _case_problems(f"its {what}' cases (H, T)", [_case(r, ("H", "T")) for r in items], want,
                              f"the command's{none}", "the writer runs --heads x --tokens, each as listed "
                                                       "(bench.kernel.run_bench)")
    caches = CHECK_CACHE_TOKENS[:2] if args.quick else CHECK_CACHE_TOKENS      # run_bench's, case i on i % len
    quick = ", --quick: the first two" if args.quick else ""
    out += [f"checks[{i}].cache_tokens {c.get('cache_tokens')!r}, the writer checks case {i} on "
            f"{caches[i % len(caches)]} (bench.kernel.CHECK_CACHE_TOKENS{quick})"
            for i, c in enumerate(_dicts(rec.get("checks"))) if c.get("cache_tokens") != caches[i % len(caches)]
            or not is_int(c.get("cache_tokens"))]
    compared = [i for i, r in enumerate(rows) if "old_graph_us" in r]
    if bool(args.compare_launch) != bool(compared) or (compared and len(compared) != len(rows)):
        out.append(f"{len(compared)} of its {len(rows)} rows hold the launch comparison (old_graph_us); the command "
                   f"{'asked' if args.compare_launch else 'did not ask'} --compare-launch (every row or none)")
    return out


def _speedup_problems(rec: dict) -> list[str]:
    """Each speedup of a ``bench`` row (:data:`sparse_mla.bench.kernel.SPEEDUPS`, an indexer row's
    :data:`sparse_mla.bench.indexer.SPEEDUPS`: the names are apart) that is not its two times' ratio as the writer's
    ``speedups`` computes it (to 1e-9 relative: the record holds µs, the writer divided ms; NaN where a time is NaN),
    that is not a number, or that stands without both its times (the writer writes a speedup only beside them), one
    line each."""
    from ..bench import indexer, kernel

    out = []
    for i, row in enumerate(_dicts(rec.get("bench"))):
        for mod in (kernel, indexer):
            out += _row_speedups(f"bench[{i}]", row, mod.SPEEDUPS, mod.speedups, mod.__name__)
    return out


def _row_speedups(where: str, row: dict, table: dict, formula, source: str) -> list[str]:
    out = []
    for k, (a, b) in table.items():
        if k not in row:
            continue
        why = ("is not a number" if not is_number(row[k]) else
               f"stands without its {' and '.join(t for t in (a, b) if not is_number(row.get(t)))} (a number)"
               if not (is_number(row.get(a)) and is_number(row.get(b))) else None)
        if why:
            out.append(f"{where}.{k} {row[k]!r} {why}; accepted: its {a} over its {b}, the writer writes all three "
                       f"({source}.speedups)")
    try:
        want = formula({t: row[t] for pair in table.values() for t in pair if is_number(row.get(t))})
    except ZeroDivisionError:          # a time of 0 is the shape check's line
        return out
    for k, w in want.items():
        have = row.get(k)
        if is_number(have) and not (math.isnan(have) and math.isnan(w)) and not abs(have - w) <= 1e-9 * abs(w):
            a, b = table[k]
            out.append(f"{where}.{k} {have!r}, not its {a} {row[a]!r} over its {b} {row[b]!r} ({w!r}, "
                       f"{source}.speedups)")
    return out
