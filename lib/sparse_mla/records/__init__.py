"""What every record of a run shares: its header (GPU, versions, date, command) and where a GPU's records go.

Records are named after the GPU that made them, so that a record made on an RTX PRO 6000 never lands under an H200's
name: ``results/<gpu>/`` with ``<gpu>`` = :func:`gpu_slug` of the device's name (``results/h200/``). The workbook's
notebook chain writes per profile instead (``results/<profile>/``, :mod:`sparse_mla.workbook.chain`).

The markdown tables the docs quote from records are :mod:`sparse_mla.records.tables` (one function per table) and
:mod:`sparse_mla.records.blocks` (the ``<!-- records-table: NAME ARGS -->`` blocks of a document,
``sparse-mla records table``).
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import sys
from pathlib import Path


def environment(command: str | None = None) -> dict:
    """GPU, versions, git revision (:func:`revision`), date and the command that produced a record: the header of
    every record, read in the process that runs it.

    ``command`` defaults to the ``sparse-mla`` command line when called from the CLI, else to the calling function
    (a notebook kernel's own arguments are not a command anyone could re-run)."""
    import torch
    import triton

    info = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": command or cli_command(),
            "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
            "revision": revision()}
    try:
        import vllm

        info["vllm"] = vllm.__version__
    except Exception as e:  # noqa: BLE001
        info["vllm"] = f"unavailable: {e}"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_count=torch.cuda.device_count(), capability=f"{p.major}.{p.minor}",
                    sm_count=p.multi_processor_count,
                    cuda=torch.version.cuda)
    return info


def revision() -> str:
    """The git commit of the checkout this ``sparse_mla`` was imported from, ``"+dirty"`` appended where tracked files
    differ from it (``git rev-parse HEAD``, ``git status --porcelain --untracked-files=no``, run in the package's
    folder); else the ``REVISION`` file of a copy (:func:`_revision_file`); else ``"unknown: ..."``."""
    import subprocess

    here = Path(__file__).resolve().parents[1]   # the sparse_mla package folder
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return _revision_file(here)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return _revision_file(here)
    rev = head.stdout.strip() + ("+dirty" if dirty else "")
    carried = _revision_file(here)
    if not carried.startswith(("unknown", rev)):   # a copy whose git is older than the tree carried with it
        rev += f"; {carried}"
    return rev


def _revision_file(here: Path) -> str:
    """The ``REVISION`` file at the checkout's root, which a maintainer writes with ``git rev-parse HEAD`` before the
    working tree is copied to the lent GPU machine (whose copy has no ``.git``, or one at an older commit with the
    tree's changes as uncommitted edits: seen on 2026-12-02, ``43cbadc+dirty`` for a tree at ``ac226ef``)."""
    f = here.parent.parent / "REVISION"
    if f.is_file():
        text = f.read_text().strip().splitlines()
        if text and re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", text[0]):
            return f"{text[0]} (REVISION file: the tree copied to this machine)"
    return "unknown: not a git checkout and no REVISION file"


#: The header's command where ``sparse_mla`` was not run as the ``sparse-mla`` CLI (:func:`cli_command`): ``{}`` is
#: the calling program's file name (``ipykernel_launcher.py``), or "an interpreter".
CALLED_FROM = "python: sparse_mla (called from {})"


def cli_command() -> str:
    """This process's ``sparse-mla`` command line (``sparse-mla`` and its arguments, whether run as ``sparse-mla`` or
    ``python -m sparse_mla``), or where it was called from (:data:`CALLED_FROM`; another package's ``python -m``,
    e.g. ``python -m pytest``, is no ``sparse-mla`` command: its arguments are that package's)."""
    argv0 = os.path.basename(sys.argv[0]) if sys.argv else ""
    ours = os.path.basename(os.path.dirname(sys.argv[0])) == "sparse_mla" if sys.argv else False
    if argv0 == "sparse-mla" or (argv0 in ("__main__.py", "cli.py") and ours):
        return " ".join(shlex.quote(a) for a in ["sparse-mla", *sys.argv[1:]])
    return CALLED_FROM.format(argv0 or "an interpreter")


def called_from(command: str) -> bool:
    """Whether ``command`` is a header command :func:`cli_command` writes where ``sparse_mla`` was not run as the
    CLI (:data:`CALLED_FROM`, any program name)."""
    head, _, tail = CALLED_FROM.partition("{}")
    return command.startswith(head) and command.endswith(tail) and len(command) > len(head) + len(tail)


def gpu_slug(name: str | None = None) -> str:
    """A file-name form of a GPU's name: ``"NVIDIA H200"`` -> ``"h200"``, ``"NVIDIA RTX PRO 6000 Blackwell Server
    Edition"`` -> ``"rtx-pro-6000-blackwell-server-edition"``. ``name`` defaults to GPU 0's name; ``"gpu"`` without
    a CUDA GPU."""
    if name is None:
        import torch

        if not torch.cuda.is_available():
            return "gpu"
        name = torch.cuda.get_device_name(0)
    words = re.sub(r"[^a-z0-9]+", " ", name.lower()).split()
    words = [w for w in words if w not in ("nvidia", "geforce", "tesla")]
    return "-".join(words) or "gpu"


def gpu_record_dir(gpu: str | None = None) -> Path:
    """``results/<gpu>``, relative to the current directory: where a GPU's records go unless the user names a folder
    (``gpu`` a :func:`gpu_slug`; default: this machine's)."""
    return Path("results") / (gpu or gpu_slug())
