"""sparse_mla.records.values: what a value in a record is, as records check asks it."""
import datetime

import pytest

from sparse_mla.records import environment
from sparse_mla.records.values import header_time, is_int, is_number, same_json

UTC = datetime.timezone.utc


def test_header_time_reads_what_the_writer_writes():
    """The header's own date (written now, here) reads back as the moment it was written, in UTC."""
    before = datetime.datetime.now(UTC).replace(microsecond=0)
    t = header_time(environment("test")["date"])
    assert t is not None and t.tzinfo is not None
    assert before <= t <= datetime.datetime.now(UTC)


@pytest.mark.parametrize("text, want", [
    ("2026-12-05T13:36:46", datetime.datetime(2026, 12, 5, 13, 36, 46, tzinfo=UTC)),       # no zone: UTC
    ("2026-12-05T14:36:46+01:00", datetime.datetime(2026, 12, 5, 13, 36, 46, tzinfo=UTC)),  # another zone
    ("2026-12-05", datetime.datetime(2026, 12, 5, tzinfo=UTC)),
    ("5 Dec 2026", None), ("", None), (None, None), ("2026-13-05", None),
])
def test_header_time(text, want):
    assert header_time(text) == want


def test_value_kinds():
    assert is_int(3) and not is_int(True) and not is_int(3.0)
    assert is_number(3.0) and not is_number(False) and not is_number("3")
    assert same_json(float("nan"), float("nan")) and not same_json({"a": 1}, {"a": 1.5})
