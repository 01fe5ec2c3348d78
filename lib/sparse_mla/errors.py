"""One error type for bad user input.

Every function that takes user input (a preset name, a path, a capability, a KV-cache dtype, a tensor
handed to the public kernel API) raises :class:`UserInputError` with one line that names the bad value
and what is accepted. ``sparse-mla`` prints that line and exits with status 2, without a traceback.
"""


class UserInputError(ValueError):
    """Bad input: the message names the offending value and what would be accepted."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, after which a writer kept a partial output on purpose (a notebook's partial run as
    ``NN_*.failed.ipynb``): ``kept``, the paths, which ``sparse-mla`` names in its one interrupted line instead of
    saying that nothing was written."""

    def __init__(self, kept: list[str]):
        super().__init__(f"interrupted; kept: {', '.join(kept)}")
        self.kept = list(kept)


# -- numbers from the command line: one way, ASCII digits (Python's int() and float() also take "²", "８", "1_0") -----
_INT = r"[+-]?[0-9]{1,30}"       # (past 30 digits no size or count here means anything; int() refuses 4300)
_FLOAT = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


def is_ascii_int(text) -> bool:
    """Whether ``text`` is an integer written in ASCII digits (an optional sign, surrounding blanks allowed)."""
    import re

    return isinstance(text, str) and re.fullmatch(_INT, text.strip()) is not None


def cli_int(text: str) -> int:
    """argparse ``type`` for an integer option: ASCII digits only (``ValueError`` otherwise, which argparse reports as
    one line, "invalid int value")."""
    if not is_ascii_int(text):
        raise ValueError(text)
    return int(text.strip())


def cli_float(text: str) -> float:
    """argparse ``type`` for a number option: ASCII decimal or exponent notation only; no inf or nan."""
    import re

    if not isinstance(text, str) or re.fullmatch(_FLOAT, text.strip()) is None:
        raise ValueError(text)
    return float(text.strip())


cli_int.__name__, cli_float.__name__ = "int", "float"      # argparse names the type in its message


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
        if e.errno == errno.ELOOP:
            raise UserInputError(f"{what} {str(path)!r} is a loop of symbolic links; accepted: a path that leads to a "
                                 f"file or folder (or to none yet)") from None
        if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF):
            raise UserInputError(f"{what} {str(path)!r} cannot be looked up ({e.strerror}); accepted: a path with "
                                 f"names the file system allows, in folders you may search") from None
    except ValueError:   # an embedded NUL byte: no file system takes it
        raise UserInputError(f"{what} {str(path)!r} holds a NUL byte; accepted: a path without one") from None
    return p


def writable_dir(path, what: str = "output directory"):
    """Return ``path`` as a :class:`pathlib.Path` after checking that it is a directory, or can be made one, that the
    command may write into. Nothing is created: the writer makes the folder when it writes (``files.atomic_write``),
    so that a command refused later leaves no folder behind -- the one output-path rule of every command.

    Raises :class:`UserInputError` naming the path when it, or a parent of it, is an existing file, or when the
    folder (or the nearest existing one above it) may not be written -- before any long work starts.
    """
    import os

    if str(path).strip() == "":
        raise UserInputError(f"{what} is empty; accepted: a directory path")
    p = expand_path(path, what)
    _refuse_the_workbooks_own_folders(p, path, what)
    refuse_system_folders(p, path, what)
    for q in (p, *p.parents):
        if q.is_symlink() and not q.exists():
            raise UserInputError(f"{what} {str(path)!r} leads through the symbolic link {str(q)!r} to "
                                 f"{os.readlink(q)!r}, which does not exist; accepted: a directory path, or a link to an "
                                 f"existing directory")
        if q.exists() and not q.is_dir():
            raise UserInputError(f"{what} {str(path)!r} is not a directory ({str(q)!r} is a file); accepted: a "
                                 f"directory path")
        if q.exists():
            if not os.access(q, os.W_OK | os.X_OK):
                where = "" if q == p else f" ({str(q)!r}, where it would be made, is not)"
                raise UserInputError(f"{what} {str(path)!r} is not writable{where}; accepted: a writable directory")
            _try_a_folder_in(q, p, path, what)
            break
    return p


def _try_a_folder_in(q, p, path, what: str) -> None:
    """Make and remove one empty folder in ``q``: what ``os.access`` cannot tell (``/proc``, a file system out of
    inodes or mounted read-only) is refused here, before any long work."""
    import os
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".sparse-mla-probe-", dir=q))
    except OSError as e:
        import errno

        where = "" if q == p else f" ({str(q)!r}, where it would be made, refuses a new folder)"
        why = e.strerror or str(e)
        if e.errno == errno.ENOENT:     # the folder exists: a virtual file system answers so (/proc, /sys)
            why = f"{str(q)!r} exists but refuses a new folder with '{why}' (a virtual file system such as /proc)"
        raise UserInputError(f"{what} {str(path)!r} cannot be written{where}: {why}; accepted: "
                             f"{what_would_fix(e)}") from None


def what_would_fix(e: OSError) -> str:
    """What a user can change when the OS refuses a new folder or file with ``e``: free space (``ENOSPC``,
    ``EDQUOT``), a shorter name (``ENAMETOOLONG``), else a writable directory with free space."""
    import errno

    return {errno.ENOSPC: "free space on that disk (it is full)", errno.EDQUOT: "free space within your disk quota",
            errno.ENAMETOOLONG: "a shorter name"}.get(e.errno, "a writable directory with free space")


#: Folders of the system's own file systems (devices, processes, the kernel's objects): no output goes there, though
#: root may create a folder in /dev (a devtmpfs in memory). /dev/shm, shared memory that scratch files use, is not one.
SYSTEM_FOLDERS = ("/dev", "/proc", "/sys")


def system_folder_of(p):
    """The folder of :data:`SYSTEM_FOLDERS` that path ``p`` leads into (links followed; ``/dev/shm`` excepted), as a
    :class:`pathlib.Path`, or None (also where the path cannot be resolved)."""
    from pathlib import Path

    try:
        where = Path(p).resolve()
    except (OSError, RuntimeError):
        return None
    return next((f for f in map(Path, SYSTEM_FOLDERS) if where.is_relative_to(f)
                 and not where.is_relative_to("/dev/shm")), None)


def refuse_system_folders(p, path, what: str) -> None:
    """:data:`SYSTEM_FOLDERS` (where ``path`` leads, links followed), ``/dev/shm`` excepted: one UserInputError line."""
    folder = system_folder_of(p)
    if folder is not None:
        raise UserInputError(f"{what} {str(path)!r} leads into {folder}, the folder of the system's devices, "
                             f"processes or kernel objects; accepted: a folder on a disk (e.g. results/ or a "
                             f"scratch directory such as /tmp)")


def _refuse_the_workbooks_own_folders(p, path, what: str) -> None:
    """No command writes into the installed ``sparse_mla`` package, or into the repository's ``lib/``, ``tests/`` or
    ``.git/`` when it runs from a checkout (found from the package's own location)."""
    from pathlib import Path

    package = Path(__file__).resolve().parent
    checkout = package.parents[1] if (package.parents[1] / "pyproject.toml").is_file() else None
    own = [(package, "the installed sparse_mla package")] + (
        [(checkout / d, f"the repository's {d}/") for d in ("lib", "tests", ".git")] if checkout else [])
    try:
        where = p.resolve()
    except (OSError, RuntimeError):
        return
    for folder, name in own:
        if where.is_relative_to(folder):
            raise UserInputError(f"{what} {str(path)!r} is inside {name}; accepted: a folder outside the workbook's "
                                 f"code, tests and git folder (e.g. results/ or a scratch directory)")


def writable_file(path, what: str = "output file"):
    """Return ``path`` as a :class:`pathlib.Path` after checking that a file can be written there: not empty, not an
    existing directory or special file (device, FIFO: the atomic write would replace it), its folder writable or
    makeable (:func:`writable_dir`; nothing is created). Raises :class:`UserInputError` naming the path --
    before the work whose result would go there."""
    from pathlib import Path

    if path is None or str(path).strip() == "":
        raise UserInputError(f"{what} {str(path)!r} is empty; accepted: a file path")
    if str(path).strip() == ".":
        raise UserInputError(f"{what} '.' is the current directory; accepted: a file path")
    p = expand_path(path, what)
    if p.is_dir():
        raise UserInputError(f"{what} {str(path)!r} is a directory; accepted: a file path")
    if p.exists() and not p.is_file():
        raise UserInputError(f"{what} {str(path)!r} is not a regular file (a device, FIFO or socket), which a record "
                             f"would replace; accepted: a regular file path")
    writable_dir(p.parent if str(p.parent) else Path("."), f"folder of the {what}")
    return p
