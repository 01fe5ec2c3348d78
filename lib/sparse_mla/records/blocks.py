"""The generated tables of a document: blocks

    <!-- records-table: NAME ARGS -->
    (the table, as ``sparse-mla records table NAME ARGS`` prints it)
    <!-- /records-table -->

each rendered by :func:`sparse_mla.records.tables.render` with the record paths of ARGS read relative to the
document's folder. ``sparse-mla records table --update FILE ...`` rewrites every block in place (atomically, after
every block of every file rendered: a bad block leaves all files as they were); ``sparse-mla records table NAME
ARGS`` prints one table (paths relative to the current directory).

Markers stand on lines of their own; ARGS are split like a shell's words. Lines inside fenced code blocks are text,
not markers. A marker line of another form, an opening marker inside a block, a closing marker outside one, or a
block left open is malformed: one :class:`~sparse_mla.errors.UserInputError` naming the file and line.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError
from .common import Table
from .tables import TABLES, accepted, render

CLOSE = "<!-- /records-table -->"
_OPEN = re.compile(r"<!-- records-table: (\S.*?) -->")
_FORMS = f"'<!-- records-table: NAME ARGS -->' ... '{CLOSE}', each on a line of its own"


@dataclass(frozen=True)
class Block:
    """One block: the table's ``name`` and ``args``, the 0-based line numbers of its two markers, its text between
    them."""

    name: str
    args: tuple[str, ...]
    open_line: int
    close_line: int
    body: str


def blocks(text: str, where: str) -> list[Block]:
    """The blocks of ``text`` in order (``where`` names the document in errors). Raises :class:`UserInputError` for a
    malformed marker (module docstring)."""
    lines, out, opened, fence = text.split("\n"), [], None, False
    for i, line in enumerate(lines):
        s = line.strip()
        if opened is None and s.startswith("```"):
            fence = not fence
        if fence or not s.startswith(("<!-- records-table", "<!-- /records-table")):
            continue
        m = _OPEN.fullmatch(s)
        if s == CLOSE:
            if opened is None:
                raise UserInputError(f"{where}:{i + 1}: a closing marker outside any block; accepted: {_FORMS}")
            out.append(Block(*opened, close_line=i, body="\n".join(lines[opened[2] + 1:i])))
            opened = None
        elif m is None:
            raise UserInputError(f"{where}:{i + 1}: malformed marker {s[:80]!r}; accepted: {_FORMS}")
        elif opened is not None:
            raise UserInputError(f"{where}:{i + 1}: a block opens inside the block of line {opened[2] + 1}; "
                                 f"accepted: {_FORMS}")
        else:
            try:
                words = shlex.split(m.group(1))
            except ValueError as e:
                raise UserInputError(f"{where}:{i + 1}: the marker's arguments cannot be split ({e}); accepted: "
                                     f"{_FORMS}") from None
            opened = (words[0], tuple(words[1:]), i)
    if opened is not None:
        raise UserInputError(f"{where}:{opened[2] + 1}: the block is never closed (no {CLOSE!r} follows); accepted: "
                             f"{_FORMS}")
    return out


def render_block(block: Block, base: Path, where: str, tables: dict[str, Table] | None = None) -> str:
    """The text a block should hold; an error in it names the document and line."""
    try:
        return render(block.name, list(block.args), base, tables)
    except UserInputError as e:
        raise UserInputError(f"{where}:{block.open_line + 1}: {e}") from None


def rendered(text: str, base: Path, where: str, tables: dict[str, Table] | None = None) -> tuple[str, int, int]:
    """``(text with every block rendered, blocks, blocks whose text changed)``."""
    lines, found = text.split("\n"), blocks(text, where)
    changed = 0
    for b in reversed(found):
        new = render_block(b, base, where, tables)
        changed += new != b.body
        lines[b.open_line + 1:b.close_line] = new.split("\n")
    return "\n".join(lines), len(found), changed


def update(files: list[str], tables: dict[str, Table] | None = None) -> list[str]:
    """Rewrite the blocks of each document in ``files``; one line per file (``"README.md: 7 blocks, 2 rewritten"``).
    Every file is read and rendered before any is written, and each is rewritten in place atomically
    (:func:`sparse_mla.files.rewrite_in_place`: through a symbolic link, with the document's mode and line ends);
    a file that refuses the write gets the ones rewritten before it their old text back and raises
    :class:`UserInputError` saying so."""
    from ..errors import writable_file
    from ..files import read_text_keeping_newlines, rewrite_in_place

    done = []
    for f in files:
        p = writable_file(f, "document")
        if not p.is_file():
            raise UserInputError(f"document {f!r} does not exist; accepted: a markdown file with records-table blocks")
        try:
            text, newline = read_text_keeping_newlines(p)
        except (OSError, UnicodeDecodeError) as e:
            raise UserInputError(f"document {f!r} cannot be read as UTF-8 text ({type(e).__name__}); accepted: a "
                                 f"markdown file") from None
        bom = "\ufeff" if text.startswith("\ufeff") else ""    # a byte-order mark before the first line stays
        # paths in the blocks are read from the document's own folder: a link's target's, where it is a link
        done.append((p, text, newline, bom, *rendered(text[len(bom):], Path(os.path.realpath(p)).parent, f, tables)))
    lines, written = [], []
    for p, old, newline, bom, new, n, changed in done:
        if bom + new != old:
            try:
                rewrite_in_place(p, bom + new, newline)
            except (OSError, UserInputError) as e:   # a later file refuses: the ones rewritten before get their text back
                if isinstance(e, UserInputError) and not written:
                    raise                          # the writer's own line: nothing was left behind
                for q, q_old, q_newline in reversed(written):
                    rewrite_in_place(q, q_old, q_newline)
                again = f"; {', '.join(str(q) for q, _, _ in written)} restored as they were" if written else ""
                why = getattr(e, "strerror", None) or str(e).split("; nothing was left behind")[0]
                raise UserInputError(f"document {str(p)!r} cannot be rewritten ({type(e).__name__}: {why}){again}; "
                                     f"accepted: documents this user may write") from None
            written.append((p, old, newline))
        lines.append(f"{p}: " + (f"{n} block(s), {changed} rewritten" if n else "no records-table block"))
    return lines


def add_cli(actions, tables: dict[str, Table] | None = None) -> None:
    """``table`` under ``sparse-mla records`` (``actions``: its subparsers), over ``tables`` (default
    :data:`~sparse_mla.records.tables.TABLES`)."""
    tables = TABLES if tables is None else tables
    p = actions.add_parser(
        "table", help="print a table the docs quote from records, or rewrite the docs' tables (--update)",
        description="records table NAME [ARGS]: print the markdown table NAME of records (paths relative to the "
                    "current directory); records table --update FILE ...: rewrite every "
                    "'<!-- records-table: NAME ARGS -->' ... '<!-- /records-table -->' block of each FILE (paths "
                    "relative to the FILE's folder). Tables: " +
                    "; ".join(f"{t.usage}: {t.doc}" for _, t in sorted(tables.items())))
    p.add_argument("name", nargs="?", help="the table's name")
    p.add_argument("args", nargs="*", help="its arguments: record files, a metric, cases")
    p.add_argument("--update", nargs="+", metavar="FILE", help="rewrite the records-table blocks of these documents")
    p.set_defaults(func=lambda args: _cli(args, tables))


def _cli(args, tables: dict[str, Table]) -> int:
    if args.update and args.name:
        raise UserInputError(f"records table: both a table ({args.name!r}) and --update were given; accepted: "
                             f"records table NAME [ARGS], or records table --update FILE ...")
    if args.update:
        print("\n".join(update(args.update, tables)))
    elif args.name:
        print(render(args.name, args.args, Path("."), tables))
    else:
        raise UserInputError(f"records table: no table named; accepted: {accepted(tables)}, or --update FILE ...")
    return 0
