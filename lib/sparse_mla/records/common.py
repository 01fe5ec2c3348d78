"""What every records table shares: the :class:`Table` entry, the markdown writer, number formats and the record
reader (one :class:`~sparse_mla.errors.UserInputError` line for a file that is missing, unreadable or of another
kind)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError
from .schema import require


@dataclass(frozen=True)
class Table:
    """One table: ``usage`` (``"NAME ARGS"``), one line on what it shows, and ``render(args, base) -> markdown``
    (``args`` as the caller wrote them, paths read relative to the folder ``base``)."""

    usage: str
    doc: str
    render: Callable[[list[str], Path], str]

    @property
    def name(self) -> str:
        return self.usage.split()[0]


def registry(*tables: Table) -> dict[str, Table]:
    """``{table.name: table}``."""
    return {t.name: t for t in tables}


def check_args(args: list[str], usage: str, least: int, most: int | None = None) -> None:
    """Raise :class:`UserInputError` unless ``least <= len(args) <= most`` (``most`` None: no limit)."""
    if len(args) < least or (most is not None and len(args) > most):
        raise UserInputError(f"records table {usage.split()[0]}: {len(args)} argument(s) {args!r}; accepted: {usage}")


# -- markdown and number formats --------------------------------------------------------------------------------------

def markdown(columns: list[str], rows: list[list], notes: list[str] = ()) -> str:
    """A pipe table (``None`` and NaN cells as ``—``, ``|`` escaped), then ``notes`` after a blank line, one line
    each."""
    def cell(v) -> str:
        return "—" if missing(v) else str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    text = "\n".join(lines + ([""] + list(notes) if notes else []))
    # a file name that is not UTF-8 (lone surrogates) is written escaped, as the commands print it
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def missing(v) -> bool:
    """``None`` or NaN (a record's "not measured")."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _number(v) -> bool:
    """A finite number a float holds (an integer past 1.8e308 is none: formatting it would raise OverflowError)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not missing(v) and \
        (math.isfinite(v) if isinstance(v, float) else abs(v) < 2 ** 1023)


def fmt(spec: str, suffix: str = "") -> Callable[[object], str | None]:
    """A formatter: ``fmt(".2f", "x")(6.685)`` -> ``"6.69x"``; ``None`` for a value that is not a number."""
    return lambda v: format(v, spec) + suffix if _number(v) else None


ratio, fixed0, fixed1, fixed2 = fmt(".2f", "x"), fmt(".0f"), fmt(".1f"), fmt(".2f")


def sci(v) -> str | None:
    """``0.00203`` -> ``"2.0e-3"``; ``None`` for a value that is not a number."""
    if not _number(v):
        return None
    mantissa, exp = f"{v:.1e}".split("e")
    return f"{mantissa}e{int(exp)}"


def span(values, form: Callable[[object], str | None]) -> str | None:
    """``"lo–hi"`` of the numbers among ``values`` (one value: itself), each formatted with ``form``."""
    nums = [v for v in values if _number(v)]
    if not nums:
        return None
    lo, hi = form(min(nums)), form(max(nums))
    return lo if lo == hi else f"{lo}–{hi}"


# -- reading records --------------------------------------------------------------------------------------------------

def load(arg: str, base: Path, kind: str, needs: tuple[str, ...]) -> dict:
    """The JSON object in ``base / arg``: a record of ``kind`` (a key of :data:`sparse_mla.records.schema.KINDS`)
    holding every key of ``needs``, each field of the type the project writes; else one :class:`UserInputError`
    naming the file, the field and what is accepted."""
    from ..files import read_json

    from ..errors import expand_path

    path = expand_path(Path(base) / arg, f"record {arg!r}")   # a name the file system refuses is one line
    article = "an" if kind[:1] in "aeiou" else "a"
    accepted = f"{article} {kind} record" + (f" (a JSON object with {', '.join(repr(k) for k in needs)})" if needs
                                             else " (a JSON object)")
    if not path.is_file():
        why = "does not exist" if not path.exists() else "is not a regular file"
        where = "" if str(path) == arg else f" ({path})"
        raise UserInputError(f"record {arg!r}{where} {why}; accepted: {accepted}")
    rec = read_json(path, f"record {arg!r}", accepted, unique_keys=True)
    lacks = [k for k in needs if not isinstance(rec, dict) or k not in rec]
    if lacks:
        raise UserInputError(f"record {arg!r} is not a {kind} record: it has no {', '.join(map(repr, lacks))}; "
                             f"accepted: {accepted}")
    require(rec, kind, arg)              # every field the tables read of the type the project writes
    return rec


def header(rec: dict) -> dict:
    """The record's header fields (its ``environment``, or the top level where the earliest records kept some)."""
    env = rec.get("environment")
    env = env if isinstance(env, dict) else {}
    return {k: env.get(k, rec.get(k)) for k in ("gpu", "date", "command", "revision", "peer")}


def source(arg: str, rec: dict) -> str:
    """One line naming a record: ``"`file`: GPU, date, `command`"``, and its ``note`` where it has one (e.g. a header
    assembled by hand)."""
    h = header(rec)
    line = f"`{arg}`: {h['gpu'] or 'no GPU named'}, {str(h['date'] or 'no date')[:10]}, " + \
        (f"`{h['command']}`" if h["command"] else "no command")
    return line + (f"; the record's note: {rec['note']}" if rec.get("note") else "")
