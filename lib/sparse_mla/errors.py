"""One error type for bad user input.

Every function that takes user input (a preset name, a path, a capability, a KV-cache dtype, a tensor
handed to the public kernel API) raises :class:`UserInputError` with one line that names the bad value
and what is accepted. ``sparse-mla`` prints that line and exits with status 2, without a traceback.
"""


class UserInputError(ValueError):
    """Bad input: the message names the offending value and what would be accepted."""


def expand_path(path, what: str):
    """``Path(path).expanduser()``; a ``~user`` that names no user is a :class:`UserInputError`, not a RuntimeError,
    and so is a path the system cannot even look up (a name longer than the file system allows, a folder that may
    not be searched): ``Path.exists()`` and ``is_dir()`` raise ``OSError`` for those instead of answering False."""
    import errno
    import os
    from pathlib import Path

    try:
        p = Path(path).expanduser()
    except RuntimeError:
        raise UserInputError(f"{what} {str(path)!r} starts with a home directory that cannot be found; accepted: a "
                             f"path without ~, or ~ / ~user for an existing user") from None
    try:
        os.stat(p)
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EBADF):
            raise UserInputError(f"{what} {str(path)!r} cannot be looked up ({e.strerror}); accepted: a path with "
                                 f"names the file system allows, in folders you may search") from None
    except ValueError:   # an embedded NUL byte: no such file, as Path.exists() answers
        pass
    return p


def writable_dir(path, what: str = "output directory"):
    """Return ``path`` as a :class:`pathlib.Path` after making sure it is (or can be made) a directory.

    Raises :class:`UserInputError` naming the path when it, or a parent of it, is an existing file, or when it cannot
    be created or written -- before any long work starts, so that nothing is computed for nowhere.
    """
    import os

    if str(path).strip() == "":
        raise UserInputError(f"{what} is empty; accepted: a directory path")
    p = expand_path(path, what)
    for q in (p, *p.parents):
        if q.exists() and not q.is_dir():
            raise UserInputError(f"{what} {str(path)!r} is not a directory ({str(q)!r} is a file); accepted: a "
                                 f"directory path")
        if q.exists():
            break
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserInputError(f"{what} {str(path)!r} cannot be created ({e.strerror}); accepted: a writable directory") \
            from None
    if not os.access(p, os.W_OK):
        raise UserInputError(f"{what} {str(path)!r} is not writable; accepted: a writable directory")
    return p


def writable_file(path, what: str = "output file"):
    """Return ``path`` as a :class:`pathlib.Path` after checking that a file can be written there: not empty, not an
    existing directory or special file (device, FIFO: the atomic write would replace it), its folder (made if
    missing) writable. Raises :class:`UserInputError` naming the path --
    before the work whose result would go there."""
    from pathlib import Path

    if path is None or str(path).strip() in ("", "."):
        raise UserInputError(f"{what} {str(path)!r} is empty; accepted: a file path")
    p = expand_path(path, what)
    if p.is_dir():
        raise UserInputError(f"{what} {str(path)!r} is a directory; accepted: a file path")
    if p.exists() and not p.is_file():
        raise UserInputError(f"{what} {str(path)!r} is not a regular file (a device, FIFO or socket), which a record "
                             f"would replace; accepted: a regular file path")
    writable_dir(p.parent if str(p.parent) else Path("."), f"folder of the {what}")
    return p
