"""Files of the workbook: the one atomic writer (a reader never sees a half-written record) and the one JSON reader
for everything a user hands in (config files, JSON options), whose refusals are one line."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_failure(path, error: BaseException):
    """The one line for a write that the system refused (a full disk, a file-size limit, a read-only file system;
    an ``OSError``, or safetensors' own error wrapping one): a :class:`~sparse_mla.errors.UserInputError` naming the
    path and the system's words; the caller has removed what it began."""
    from .errors import UserInputError

    why = getattr(error, "strerror", None) or str(error).strip().splitlines()[0][:300]
    why = why.removeprefix("Error while serializing: ")
    import errno

    accepted = ("a file this user may write (its permissions, or an immutable or read-only file system, refuse it)"
                if getattr(error, "errno", None) in (errno.EPERM, errno.EACCES, errno.EROFS) else
                "a folder with room for it, where a file of that size may be written")
    return UserInputError(f"writing {str(path)!r} failed: {why}; nothing was left behind; accepted: {accepted}")


def is_write_failure(error: BaseException) -> bool:
    """An ``OSError`` of writing, or safetensors' ``SafetensorError`` around one (its text names the I/O error)."""
    text = str(error)
    return isinstance(error, OSError) or (type(error).__name__ == "SafetensorError" and any(
        k in text for k in ("I/O error", "IoError", "os error")))


def make_dir(path: str | os.PathLike) -> Path:
    """``mkdir -p path``, or one :class:`~sparse_mla.errors.UserInputError` line naming it where the system refuses
    (``/proc/...``, no free inodes, a read-only file system): the folders it made before failing are removed."""
    from .errors import UserInputError

    path = Path(path)
    made = [q for q in (path, *path.parents) if not q.exists()][::-1]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        for q in reversed(made):
            with contextlib.suppress(OSError):
                q.rmdir()
        raise UserInputError(f"folder {str(path)!r} cannot be made ({e.strerror or e}); nothing was left behind; "
                             f"accepted: a folder this user can create") from None
    return path


def atomic_write_all(writes: list[tuple[str | os.PathLike, Callable[[str], object]]]) -> list[Path]:
    """Several :func:`atomic_write` as one: every ``write(tmp)`` first, then every temporary file renamed onto its
    path; a failure in any write leaves every path as it was (a CSV is not replaced when its plot cannot be)."""
    paths = [Path(p) for p, _ in writes]
    for p in paths:
        make_dir(p.parent)
    tmps: list[str] = []
    try:
        for p, (_, write) in zip(paths, writes):
            fd, tmp = tempfile.mkstemp(prefix=f".{p.stem}.", suffix=p.suffix, dir=p.parent)
            os.close(fd)
            tmps.append(tmp)
            write(tmp)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
    except BaseException as e:
        for tmp in tmps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if is_write_failure(e):
            raise write_failure(paths[len(tmps) - 1], e) from None
        raise
    _replace_all(tmps, paths)
    return paths


def _replace_all(tmps: list[str], paths: list[Path]) -> None:
    """Rename each temporary file onto its path, all or none: a path that has become a folder is refused before the
    first rename, and a rename the system refuses puts back the files already replaced (from hard links made just
    before; where the file system makes none, that path cannot be put back) and removes every temporary file
    (breaker round 17's w02: a Markdown path turned into a folder mid-run left the CSV replaced and a hidden file)."""
    done: list[tuple[Path, bool, str | None]] = []      # (path, it existed, the hard link to its old content)
    try:
        for p in paths:
            if p.is_dir():
                raise IsADirectoryError(21, "Is a directory", str(p))
        for tmp, p in zip(tmps, paths):
            done.append((p, os.path.lexists(p), _hard_link_beside(p)))
            os.replace(tmp, p)
    except BaseException as e:
        for p, existed, old in reversed(done):
            with contextlib.suppress(OSError):
                if old:
                    os.replace(old, p)
                elif not existed:
                    os.unlink(p)
        for tmp in tmps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if is_write_failure(e):
            raise write_failure(getattr(e, "filename", None) or paths[max(len(done) - 1, 0)], e) from None
        raise
    for _, _, old in done:
        if old:
            with contextlib.suppress(OSError):
                os.unlink(old)


def _hard_link_beside(p: Path) -> str | None:
    """A hidden hard link to the file ``p`` in its folder (the old content, kept until every rename is done), or
    None where ``p`` is no file or the file system makes no link."""
    if not p.is_file():
        return None
    old = f"{p.parent}/.{p.stem}.old-{os.getpid()}-{id(p)}{p.suffix}"
    try:
        os.link(p, old)
    except OSError:
        return None
    return old


def atomic_write(path: str | os.PathLike, write: Callable[[str], object], mode: int | None = None) -> Path:
    """Call ``write(tmp)`` on a temporary file in ``path``'s folder, then ``os.replace`` it onto ``path``.

    The temporary file has ``path``'s suffix (so writers that infer a format from it work) and gets the usual
    permissions (``mkstemp`` creates 0600), or ``mode`` where given; on any failure it is removed and ``path`` is left
    as it was (a write the system refuses is :func:`write_failure`'s one line).
    """
    path = Path(path)
    make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if is_write_failure(e):
            raise write_failure(path, e) from None
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write` of a text."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def read_text_keeping_newlines(path: str | os.PathLike) -> tuple[str, str]:
    """``(text with "\\n" line ends, the file's own line end)``: ``"\\r\\n"`` where the file has CRLF line ends,
    else ``"\\n"`` -- what :func:`rewrite_in_place` gives back. Raises OSError / UnicodeDecodeError as reading does."""
    with open(path, encoding="utf-8", newline="") as f:      # (Path.read_text takes newline= only from 3.13)
        raw = f.read()
    newline = "\r\n" if "\r\n" in raw else "\n"
    return raw.replace("\r\n", "\n"), newline


def rewrite_in_place(path: str | os.PathLike, text: str, newline: str = "\n") -> Path:
    """Replace a document's content the way editors and ``sed -i --follow-symlinks`` do: through a symbolic link to its
    target (the link stays a link), keeping the target's permission bits (a read-only document stays read-only), with
    ``newline`` as every line end of ``text`` (``"\\r\\n"`` for a CRLF document, :func:`read_text_keeping_newlines`);
    atomically (:func:`atomic_write`). Returns the target written."""
    target = Path(os.path.realpath(path))
    body = text.replace("\r\n", "\n").replace("\n", newline) if newline != "\n" else text
    return atomic_write(target, lambda tmp: Path(tmp).write_text(body, encoding="utf-8", newline=""),
                        mode=target.stat().st_mode & 0o7777)


class DuplicateKey(ValueError):
    """A JSON object with a key twice (no record writer of ours makes one; ``json`` would keep the last)."""


def no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    """``object_pairs_hook`` for records: the object, or :class:`DuplicateKey` naming the key."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(f"the key {k!r} appears twice in one object (the last would silently win)")
        out[k] = v
    return out


def parse_json(text: str, what: str, accepted: str = "JSON", unique_keys: bool = False):
    """``json.loads(text)``, or one :class:`~sparse_mla.errors.UserInputError` line naming ``what`` and why: malformed
    JSON, an integer beyond Python's 4300-digit conversion limit (a ValueError of the decoder), or nesting deeper than
    the decoder's recursion (a RecursionError); with ``unique_keys`` (records), a key twice in one object.
    ``accepted`` ends the line."""
    from .errors import UserInputError

    try:
        return json.loads(text, object_pairs_hook=no_duplicate_keys if unique_keys else None)
    except DuplicateKey as e:
        reason = str(e)
    except RecursionError:
        reason = "nested too deeply for the JSON decoder"
    except ValueError as e:            # json.JSONDecodeError, and the int-digits limit
        reason = str(e).split(":")[0] if not isinstance(e, json.JSONDecodeError) else f"{e.msg} at line {e.lineno} " \
            f"column {e.colno}"
    raise UserInputError(f"{what} is not valid JSON ({reason}); accepted: {accepted}")


def read_json(path: str | os.PathLike, what: str | None = None, accepted: str = "a JSON file",
              unique_keys: bool = False):
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
    return parse_json(text, what, accepted, unique_keys)
