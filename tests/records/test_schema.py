"""sparse_mla.records.schema: every committed record has its kind's shape; a field of another type than the project
writes (a list where a mapping is, a text where a number or a boolean is, a list where a number is, a number past
what a float holds, a mapping's key that is no capability) is one line naming the file, the field's path and the
type expected -- the same line from every table that reads the record (exit 2) and from ``records check`` (invalid,
exit 1); nothing is rendered from it."""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from sparse_mla import cli
from sparse_mla.records import schema
from sparse_mla.workbook import proof

from test_tables import SEED, engine_record, kernel_record

RESULTS = Path(__file__).resolve().parents[2] / "results"
#: committed record files -> their kind, by the name their writer gives them
KIND_OF = {"bench_kernel_": "kernel benchmark", "bench_indexer_": "indexer benchmark",
           "fp8_where_time_goes_": "kernel-variants", "launch_": "engine (launch)", "bench_serve_": "serving benchmark"}


def committed() -> list[tuple[Path, str]]:
    out = []
    for f in sorted(RESULTS.rglob("*.json")):
        kind = next((k for prefix, k in KIND_OF.items() if f.name.startswith(prefix)), None)
        if kind:
            out.append((f, kind))
    return out


def test_every_committed_record_has_its_kinds_shape():
    found = committed()
    assert {k for _, k in found} == set(schema.KINDS), found      # each kind has committed records
    for f, kind in found:
        rec = json.loads(f.read_text())
        assert schema.problems(rec, schema.KINDS[kind]) == [], f
        assert schema.problems_of_any_kind(rec) == [], f


def serve_record(rng: random.Random) -> dict:
    stat = lambda: {"median": rng.uniform(1, 900), "min": 0.5, "max": 1000.0, "n": 5}   # noqa: E731
    run = {"backend_requested": "TRITON_MLA_SPARSE", "summary": {"output_throughput": stat(), "median_ttft_ms": stat(),
                                                                  "median_tpot_ms": stat()}}
    header = {"gpu": "NVIDIA H200", "date": "2026-12-04T10:00:00+00:00", "command": "sparse-mla bench serve"}
    return {"environment": header,
            "method": "live warmed servers", "complete": True, "runs": {"TRITON_MLA_SPARSE": run},
            "agreement_vs_baseline": {"TRITON_MLA_SPARSE": {"identical": 8, "compared": 8, "baseline": "X"}}}


def variants_record(rng: random.Random) -> dict:
    us = {k: rng.uniform(2, 700) for k in ("gather", "loads", "decode", "scores", "full")}
    case = {"H": 8, "T": 512, "topk": 512, "cache_tokens": 4096, "num_splits": 4, "block_h": 16, "block_n": 32,
            "num_warps": 4, "us": us}
    return {"environment": {"gpu": "NVIDIA H200", "command": "fp8_where_time_goes"}, "cases": [case]}


def indexer_record(rng: random.Random) -> dict:
    row = {"kind": "decode", "H": 64, "B": 8, "context": 8192, "next_n": 1, "triton_us": rng.uniform(5, 90),
           "deepgemm_us": rng.uniform(5, 90)}
    return {"environment": {"gpu": "NVIDIA H200"}, "bench": [row],
            "targets": [{"target": "decode", "goal": 0.7, "min": 0.5, "max": 0.9, "met": 1, "cases": 1}]}


# (table, record maker, field path as a list, bad value, the line's "PATH is VALUE; accepted: TYPE")
CASES = [
    ("serve", serve_record, ["runs"], [1, 2], "runs is [1, 2]; accepted: an object"),
    ("serve", serve_record, ["runs", "TRITON_MLA_SPARSE", "summary", "output_throughput", "median"], "fast",
     "runs.TRITON_MLA_SPARSE.summary.output_throughput.median is 'fast'; accepted: a number"),
    ("serve", serve_record, ["complete"], "yes", "complete is 'yes'; accepted: true or false"),
    ("serve", serve_record, ["agreement_vs_baseline", "TRITON_MLA_SPARSE", "identical"], [8],
     "agreement_vs_baseline.TRITON_MLA_SPARSE.identical is [8]; accepted: an integer"),
    ("parity", engine_record, ["parity_pairs", 0, "per_prompt", 1, "identical"], "yes",
     "parity_pairs[0].per_prompt[1].identical is 'yes'; accepted: true or false"),
    ("parity", engine_record, ["parity_pairs", 0, "per_prompt", 0, "max_abs_logprob_diff"], 10 ** 400,
     "parity_pairs[0].per_prompt[0].max_abs_logprob_diff is 1000000000"),
    ("engines", engine_record, ["runs", "ours", "ran", "attention"], ["TRITON_MLA_SPARSE"],
     "runs.ours.ran.attention is ['TRITON_MLA_SPARSE']; accepted: an object"),
    ("engines", engine_record, ["runs", "ours", "ran", "launch_plan"], {"nine": {"from": "x"}},
     "runs.ours.ran.launch_plan.nine (a key) is 'nine'; accepted: a capability 'M.m'"),
    ("engines", engine_record, ["throughput_tokens_per_s", "ours"], "9000",
     "throughput_tokens_per_s.ours is '9000'; accepted: a number"),
    ("engines", engine_record, ["environment", "gpu"], ["H200"], "environment.gpu is ['H200']; accepted: a text"),
    ("kernel", kernel_record, ["bench", 2, "triton_graph_us"], [3.5], "bench[2].triton_graph_us is [3.5]; accepted: "
                                                                      "a number"),
    ("kernel", kernel_record, ["bench", 0, "H"], True, "bench[0].H is True; accepted: an integer"),
    ("kernel-errors", kernel_record, ["checks", 1, "nan"], "0", "checks[1].nan is '0'; accepted: an integer"),
    ("indexer", indexer_record, ["bench", 0, "deepgemm_us"], {"us": 3}, "bench[0].deepgemm_us is {'us': 3}; "
                                                                        "accepted: a number"),
    ("indexer-targets", indexer_record, ["targets", 0, "met"], 0.5, "targets[0].met is 0.5; accepted: an integer"),
    ("kernel-variants", variants_record, ["cases", 0, "us", "full"], None, "cases[0].us.full is None; accepted: a "
                                                                          "number"),
    ("kernel-variants", variants_record, ["cases", 0, "num_warps"], "4", "cases[0].num_warps is '4'; accepted: an "
                                                                        "integer"),
    # values of the right type that no writer makes and the tables cannot use: a time of 0 (divided by), infinities,
    # counts past what a float holds or below 0, null where the tables iterate or format
    ("kernel-variants", variants_record, ["cases", 0, "us", "loads"], 0, "cases[0].us.loads is 0; accepted: a time in µs "
                                                                         "from 0.001"),
    ("kernel-variants", variants_record, ["cases", 0, "T"], 10 ** 60, "cases[0].T is 1000000000000000000000000000000"),
    ("kernel-variants", variants_record, ["cases", 0, "H"], -1, "cases[0].H is -1; accepted: a number of at least 0"),
    ("kernel-variants", variants_record, ["copy_bandwidth_TBps"], float("nan"), "copy_bandwidth_TBps is nan; "
                                                                                "accepted: a number above 0"),
    ("kernel-errors", kernel_record, ["checks", 0, "out_rel_err"], float("inf"), "checks[0].out_rel_err is inf; "
                                                                                 "accepted: a finite number"),
    ("indexer-targets", indexer_record, ["targets"], None, "targets is None; accepted: a list"),
    ("serve", serve_record, ["runs"], None, "runs is None; accepted: an object"),
    ("serve", serve_record, ["runs", "TRITON_MLA_SPARSE", "summary", "output_throughput", "n"], None,
     "runs.TRITON_MLA_SPARSE.summary.output_throughput.n is None; accepted: an integer"),
    ("serve", serve_record, ["runs", "TRITON_MLA_SPARSE", "summary", "median_tpot_ms", "min"], None,
     "runs.TRITON_MLA_SPARSE.summary.median_tpot_ms.min is None; accepted: a number"),
    # round 2: subnormal and astronomical times, negative figures, a stat out of order, more identical than compared
    ("kernel-variants", variants_record, ["cases", 0, "us", "loads"], 5e-324, "cases[0].us.loads is 5e-324; "
                                                                              "accepted: a time in µs from 0.001"),
    ("kernel-variants", variants_record, ["cases", 0, "us", "full"], 1e308, "cases[0].us.full is 1e+308; accepted: "
                                                                            "a time in µs from 0.001 to 1e12"),
    ("kernel", kernel_record, ["bench", 1, "speedup_vs_flashmla_graph"], -2.4,
     "bench[1].speedup_vs_flashmla_graph is -2.4; accepted: a ratio from 1e-12 to 1e12"),
    ("serve", serve_record, ["runs", "TRITON_MLA_SPARSE", "summary", "output_throughput", "median"], -3.0,
     "runs.TRITON_MLA_SPARSE.summary.output_throughput.median is -3.0; accepted: a finite number of at least 0"),
    ("serve", serve_record, ["runs", "TRITON_MLA_SPARSE", "summary", "median_ttft_ms", "min"], 5000.0,
     "runs.TRITON_MLA_SPARSE.summary.median_ttft_ms is {"),
    ("serve", serve_record, ["agreement_vs_baseline", "TRITON_MLA_SPARSE", "identical"], 9,
     "agreement_vs_baseline.TRITON_MLA_SPARSE is {"),
]


def planted(make, path, value) -> dict:
    rec = copy.deepcopy(make(random.Random(SEED)))
    node = rec
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return rec


@pytest.mark.parametrize("table,make,path,value,says", CASES, ids=[f"{c[0]}-{c[2][-1]}-{i}" for i, c in enumerate(CASES)])
def test_a_field_of_another_type_is_one_line_from_the_table_and_the_check(tmp_path, capsys, table, make, path,
                                                                           value, says):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(make(random.Random(SEED))))
    assert cli.main(["records", "table", table, str(good)]) == 0            # the record renders before the change
    assert "as the project writes it" not in proof.check([str(good)])[0].reason     # (its header may have gaps)
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(planted(make, path, value)))
    assert cli.main(["records", "table", table, str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert f"record {str(bad)!r} is not a" in err and says in err and "Traceback" not in err, err
    [v] = proof.check([str(bad)])
    assert v.status == "invalid" and says in v.reason, v.line()
    assert cli.main(["records", "check", str(bad)]) == 1
    assert says in capsys.readouterr().out


def test_a_record_of_many_bad_fields_names_the_first_and_counts_the_rest():
    rec = planted(serve_record, ["complete"], "yes")
    rec["method"] = 4
    found = schema.problems(rec, schema.Serve)
    assert found == ["complete is 'yes'; accepted: true or false", "method is 4; accepted: a text"]
    with pytest.raises(Exception, match=r"complete is 'yes'; accepted: true or false \(and 1 more\)$"):
        schema.require(rec, "serving benchmark", "r.json")


def test_a_file_name_that_is_not_utf8_is_written_escaped_in_a_table():
    from sparse_mla.records.common import markdown

    md = markdown(["record"], [["k\udcff.json"]], ["from k\udcff.json"])
    assert "k\\udcff.json" in md and md.encode("utf-8")                   # writable as UTF-8, the name visible


#: Text fields that always have a form, by the name the writers give them (sparse_mla.records.environment, ran.collect)
SHAPED_NAMES = ("capability", "date", "revision", "gpu")


def _wrong_values(shape, path=(), seen=()):
    """``(path, value, record)`` for every field of ``shape`` and of every model inside it: a value of another type
    than the field's (a number for a text, a text for a number or a flag, a list for a mapping, a mapping for a list,
    a text for a model), placed at its path in an otherwise empty record (one ``"k"`` key for a mapping's values, one
    item for a list's)."""
    import types
    import typing

    from pydantic import BaseModel

    def constrained(t) -> bool:
        """Whether an annotation carries constraints (a pattern, a validator) anywhere around its base type."""
        origin = typing.get_origin(t)
        if origin is typing.Annotated:
            return True
        if origin in (typing.Union, types.UnionType):
            return any(constrained(a) for a in typing.get_args(t))
        return False

    def base(t):
        while True:
            origin = typing.get_origin(t)
            if origin is typing.Annotated:
                t = typing.get_args(t)[0]
            elif origin in (typing.Union, types.UnionType):
                args = [a for a in typing.get_args(t) if a is not type(None)]
                t = args[0] if len(args) == 1 else t
                if len(args) != 1:
                    return t
            else:
                return t

    def place(keys, value):
        for k in reversed(keys):
            value = [value] if k == 0 else {k: value}
        return value

    for name, field in shape.model_fields.items():
        key = field.alias or name
        t = base(field.annotation)
        origin = typing.get_origin(t)
        here = (*path, key)
        if isinstance(t, type) and issubclass(t, BaseModel):
            yield here, "x", place(here, "x")
            if t not in seen:
                yield from _wrong_values(t, here, (*seen, t))
        elif origin is dict:
            yield here, [1], place(here, [1])
            inner = base(typing.get_args(t)[1])
            if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in seen:
                yield from _wrong_values(inner, (*here, "k"), (*seen, inner))
        elif origin is list:
            yield here, {"a": 1}, place(here, {"a": 1})
            inner = base(typing.get_args(t)[0])
            if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in seen:
                yield from _wrong_values(inner, (*here, 0), (*seen, inner))
        elif t is str:
            yield here, 12345, place(here, 12345)
            # a pattern, a date: blank text is none of them; and fields named for a capability, a date, a revision or
            # a GPU hold one whatever their annotation says (the writers' names: a field loosened to any text fails)
            if constrained(field.annotation) or field.metadata or key.endswith(SHAPED_NAMES):
                yield here, "  ", place(here, "  ")
        elif t is bool:
            yield here, "yes", place(here, "yes")
        elif t in (int, float):
            yield here, "x", place(here, "x")


@pytest.mark.parametrize("kind", list(schema.KINDS))
def test_a_wrong_type_in_any_field_of_any_kind_is_named(kind):
    """Every field the schema declares, walked from the pydantic models themselves (not a hand-picked list): a value
    of another type there is a problem naming that field's path -- so a field loosened to accept anything fails."""
    shape = schema.KINDS[kind]
    cases = list(_wrong_values(shape))
    assert len(cases) > 5, cases
    missed = []
    for path, value, rec in cases:
        dotted = ".".join(str(p) if p != 0 else "[0]" for p in path).replace(".[0]", "[0]")
        lines = schema.problems(rec, shape)
        if not any(line.startswith(dotted + " ") or line.startswith(dotted + "[") for line in lines):
            missed.append((dotted, value, lines[:3]))
    assert not missed, missed


def test_the_pythons_a_header_may_name_are_the_projects():
    """``environment.python`` is one the project runs on (issue 47 round 7: Python 2.7.18 beside torch 2.11 was
    proven): :data:`sparse_mla.records.schema.REQUIRES_PYTHON` is pyproject.toml's ``requires-python``."""
    import tomllib

    want = tomllib.loads((RESULTS.parent / "pyproject.toml").read_text())["project"]["requires-python"]
    (a, b), (c, d) = schema.REQUIRES_PYTHON
    assert want == f">={a}.{b},<{c}.{d}"
    assert schema.problems({"environment": {"python": f"{a}.{b}.0"}}, schema.Record) == []
    for bad in (f"{a}.{b - 1}.9", f"{c}.{d}.0", "2.7.18"):
        assert schema.problems({"environment": {"python": bad}}, schema.Record) == [
            f"environment.python is {bad!r}; accepted: a Python the project runs on, {a}.{b} to {c}.{d - 1} "
            f"(requires-python)"]
