"""Writing records so that a reader never sees a half-written file: the one atomic writer of the workbook."""
from __future__ import annotations

import contextlib
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
