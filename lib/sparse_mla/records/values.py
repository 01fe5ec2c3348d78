"""What a value in a record is, as the checks of ``records check`` ask it (``sparse_mla.workbook.proof``,
``.consistency``, ``.serving``): JSON values, where ``true`` is no number."""
from __future__ import annotations

import json


def is_int(v) -> bool:
    """An integer, not a boolean."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    """An integer or a float, not a boolean."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def same_json(a, b) -> bool:
    """Equal as JSON writes them (a NaN equals a NaN; float values survive JSON exactly)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def header_time(text):
    """A record's date as :func:`sparse_mla.records.environment` writes it (ISO 8601, ``2026-12-05T13:36:46+00:00``)
    as an aware ``datetime``: a time without a zone is the writer's UTC; ``None`` for what is no ISO 8601 text (the
    schema names that). The one reader of header dates for the checks (``sparse_mla.workbook.proof``,
    ``.consistency``, ``.serving_results``)."""
    import datetime

    try:
        t = datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)
