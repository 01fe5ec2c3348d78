"""``sparse-mla records``: ``check`` (the verdict of :mod:`.proof` on every run record) and ``table`` (the markdown
tables the docs quote: the record tables of :mod:`sparse_mla.records`, ``proof``, ``status`` (:mod:`.status`) and
the what-to-run tables read from the diagnosis's CSV). The command's home, apart from the judging itself, so that
:mod:`.proof` and :mod:`.status` import nothing of each other but :mod:`.status` of :mod:`.proof`."""
from __future__ import annotations

from pathlib import Path

from ..records import blocks, tables
from ..records.common import Table, markdown
from .proof import _plural, check, proof_table
from .status import status_table


def what_to_run_table(args: list[str], base: Path, brief: bool = False) -> str:
    """``what-to-run FILE MACHINE``: the configurations of ``MACHINE`` (a label of
    :data:`sparse_mla.diagnose.what_to_run.MACHINES`) that start, from a written what-to-run table (``sparse-mla
    diagnose --what-to-run``): weights, KV dtype, vLLM stock or with the plugin, backend + indexer, the ``vllm serve``
    line, what the answer rests on."""
    from ..diagnose import what_to_run as wtr
    from ..errors import UserInputError
    from ..records.common import check_args

    check_args(args, "what-to-run FILE MACHINE", 2)
    machine = " ".join(args[1:])          # a label such as "8x RTX PRO 6000", whatever the splitting of the words
    path = Path(base) / args[0]
    if not path.is_file():
        raise UserInputError(f"what-to-run table {args[0]!r} ({path}) is not a file; accepted: the CSV that "
                             f"`sparse-mla diagnose --what-to-run` writes (results/what_to_run.csv)")
    try:
        df = wtr.read(path)
    except Exception as e:  # noqa: BLE001 - pandas' EmptyDataError / ParserError, UnicodeDecodeError, OSError
        raise UserInputError(f"{args[0]!r} cannot be read as a what-to-run table ({type(e).__name__}: "
                             f"{str(e).strip()[:120]}); accepted: the CSV of `sparse-mla diagnose --what-to-run`") \
            from None
    if list(df.columns) != list(wtr.COLUMNS):
        raise UserInputError(f"{args[0]!r} is not a what-to-run table (its columns are not {', '.join(wtr.COLUMNS)}); "
                             f"accepted: the CSV of `sparse-mla diagnose --what-to-run`")
    if machine not in set(df["machine"]):
        raise UserInputError(f"machine {machine!r} is not in {args[0]!r}; accepted: "
                             f"{', '.join(dict.fromkeys(df['machine']))}")
    answers = wtr.answer(df.replace({"": None}), machine)
    caption = [f"From `{args[0]}` (`sparse-mla diagnose --what-to-run`, vLLM's own path on the diagnosis's probe "
               f"platform; the checkpoint paths are placeholders)."]
    if brief:
        return markdown(["weights", "KV cache", "vLLM", "backend", "command"],
                        [[a["weights"], a["kv_cache_dtype"], a["vllm"], a["backend"], f"`{a['serve']}`"]
                         for a in answers if a["engine_starts"] == "yes"], caption)
    rows = [[a["weights"], a["kv_cache_dtype"], a["vllm"], f"{a['backend']} + {a['indexer']}", a["engine_starts"],
             f"`{a['serve']}`", a["rests_on"]] for a in answers]
    return markdown(["weights", "KV cache", "vLLM", "backend + indexer", "engine starts", "command", "rests on"],
                    rows, caption)


def what_to_run_commands(args: list[str], base: Path) -> str:
    """``what-to-run-commands FILE MACHINE``: the ``vllm serve`` lines of :func:`what_to_run_table` whose engine
    starts, without the evidence column (the README's short form; the full table names what each rests on)."""
    return what_to_run_table(args, base, brief=True)


#: The tables of ``sparse-mla records table``: those that read records, ``proof``, ``status`` and ``what-to-run``.
TABLES = {**tables.TABLES, "proof": Table("proof [PATH ...]", "the verdict of `records check` on every run record",
                                          proof_table),
          "status": Table("status [PATH ...]", "what has run where, per machine we plan for, from the proven records",
                          status_table),
          "what-to-run": Table("what-to-run FILE MACHINE", "the configurations of a machine that start, from the "
                                                            "diagnosis's what-to-run table", what_to_run_table),
          "what-to-run-commands": Table("what-to-run-commands FILE MACHINE", "the vllm serve lines of a machine "
                                        "whose engine starts (what-to-run without its evidence column)",
                                        what_to_run_commands)}


def add_cli(sub) -> None:
    p = sub.add_parser("records", help="check which records under results/ prove what ran; render the tables the "
                                       "docs quote from them",
                       description="records check [PATH ...]: one line per run record (proven / unproven / "
                                   "invalid: REASON); exit 1 if any is invalid. records table NAME [ARGS] | "
                                   "--update FILE ...: the markdown tables the docs quote from records.")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = actions.add_parser("check", help="verdict per record",
                           description="One line per run record (proven / unproven / invalid: REASON); exit 1 if "
                                       "any is invalid.")
    c.add_argument("paths", nargs="*", default=["results"], help="record files or folders (default: results)")
    c.set_defaults(func=_cli)
    blocks.add_cli(actions, TABLES)


def _cli(args) -> int:
    verdicts = check(args.paths)
    for v in verdicts:
        if v.status != "skipped":
            print(v.line())
    for raw in args.paths:
        if Path(raw).is_dir() and not any(Path(v.path).is_relative_to(raw) for v in verdicts):
            print(f"{raw}: no JSON record in this folder")
    if not verdicts:
        print("no JSON records: nothing checked")
        return 0
    counts = {s: sum(v.status == s for v in verdicts) for s in ("proven", "unproven", "invalid", "skipped")}
    print(f"{_plural(len(verdicts) - counts['skipped'], 'run record')}: " +
          ", ".join(f"{n} {s}" for s, n in counts.items() if s != "skipped") +
          f"; {_plural(counts['skipped'], 'other JSON file')} skipped (not run records)")
    return 1 if counts["invalid"] else 0
