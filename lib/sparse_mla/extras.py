"""Which install extra a command needs, and one clear error when it is missing.

The core install (``pip install sparse-mla-workbook``) brings the vLLM plugin, the kernels, ``sparse-mla diagnose``,
``make-checkpoint`` and ``launch``; the workbook's commands need the ``workbook`` extra (``pyproject.toml``). A command
calls :func:`require` before its first import of such a module, so that a serving environment without the extra gets
one line naming it instead of a ``ModuleNotFoundError`` traceback.
"""
from __future__ import annotations

import importlib

from .errors import UserInputError

#: The distribution name users install (``pyproject.toml`` ``[project] name``).
DISTRIBUTION = "sparse-mla-workbook"

#: Import name -> the extra that provides it.
EXTRA_OF = {"pandas": "workbook", "matplotlib": "workbook", "papermill": "workbook", "nbformat": "workbook",
            "nbclient": "workbook", "gguf": "gguf", "vllm_gguf_plugin": "gguf"}


def require(what: str, *modules: str) -> None:
    """Import ``modules`` (import names in :data:`EXTRA_OF`) or raise :class:`UserInputError`: ``what`` needs the
    extra, which modules are missing, and the one command that installs it."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        extras = sorted({EXTRA_OF[m] for m in missing})
        raise UserInputError(f"{what} needs the {' and '.join(extras)} extra ({', '.join(missing)} not installed); "
                             f"accepted: pip install '{DISTRIBUTION}[{','.join(extras)}]' (from a checkout of it: "
                             f"pip install '.[{','.join(extras)}]')")
