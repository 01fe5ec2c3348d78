"""Files of the workbook: the one atomic writer (a reader never sees a half-written record) and the one JSON reader
for everything a user hands in (config files, JSON options), whose refusals are one line."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Call ``write(tmp)`` on a temporary file in ``path``'s folder, then ``os.replace`` it onto ``path``.

    The temporary file has ``path``'s suffix (so writers that infer a format from it work) and gets the usual
    permissions (``mkstemp`` creates 0600); on any failure it is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write` of a text."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def parse_json(text: str, what: str, accepted: str = "JSON"):
    """``json.loads(text)``, or one :class:`~sparse_mla.errors.UserInputError` line naming ``what`` and why: malformed
    JSON, an integer beyond Python's 4300-digit conversion limit (a ValueError of the decoder), or nesting deeper than
    the decoder's recursion (a RecursionError). ``accepted`` ends the line."""
    from .errors import UserInputError

    try:
        return json.loads(text)
    except RecursionError:
        reason = "nested too deeply for the JSON decoder"
    except ValueError as e:            # json.JSONDecodeError, and the int-digits limit
        reason = str(e).split(":")[0] if not isinstance(e, json.JSONDecodeError) else f"{e.msg} at line {e.lineno} " \
            f"column {e.colno}"
    raise UserInputError(f"{what} is not valid JSON ({reason}); accepted: {accepted}")


def read_json(path: str | os.PathLike, what: str | None = None, accepted: str = "a JSON file"):
    """The JSON content of the file ``path`` (:func:`parse_json`); a file that cannot be read or is not UTF-8 text is
    one UserInputError line too. ``what`` names it in the message (default: the path)."""
    from .errors import UserInputError

    what = what or repr(str(path))
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserInputError(f"{what} is not UTF-8 text; accepted: {accepted}") from None
    except OSError as e:
        raise UserInputError(f"{what} cannot be read ({e.strerror or type(e).__name__}); accepted: {accepted}") from None
    return parse_json(text, what, accepted)
