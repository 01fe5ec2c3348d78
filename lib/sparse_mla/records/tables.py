"""The markdown tables that the docs quote from records: a registry of table names (:data:`TABLES`), each a function
``(args, base) -> markdown`` over JSON records as their writers made them (``sparse-mla records table NAME ARGS``).

A table prints figures only from its records, each table naming its record (one record: under the table, with its
GPU, date and command; several: a column per row). The tables of the kernel benchmarks are in
:mod:`sparse_mla.records.kernel_tables`, those of engines and serving in :mod:`sparse_mla.records.engine_tables`; the
workbook adds ``proof`` (:mod:`sparse_mla.workbook.proof`: which records prove what ran), which judges records with
code of higher floors.

Bad input (an unknown table name, a missing or unreadable record, a record of another kind, an unknown metric or
case) raises :class:`sparse_mla.errors.UserInputError` naming it and what is accepted.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserInputError
from . import engine_tables, kernel_tables
from .common import Table

#: name -> :class:`~sparse_mla.records.common.Table` of the tables that read records only.
TABLES: dict[str, Table] = {**kernel_tables.TABLES, **engine_tables.TABLES}


def accepted(tables: dict[str, Table] | None = None) -> str:
    """The tables' usages on one line: ``"engines FILE [FILE ...], indexer FILE, ..."``."""
    return ", ".join(t.usage for _, t in sorted((TABLES if tables is None else tables).items()))


def render(name: str, args: list[str], base: Path = Path("."), tables: dict[str, Table] | None = None) -> str:
    """The markdown of table ``name`` (a key of ``tables``, default :data:`TABLES`) over ``args`` (paths relative to
    the folder ``base``). Raises :class:`UserInputError` for an unknown name or bad arguments."""
    tables = TABLES if tables is None else tables
    if name not in tables:
        raise UserInputError(f"records table {name!r} is unknown; accepted: {accepted(tables)}")
    return tables[name].render(list(args), Path(base))
