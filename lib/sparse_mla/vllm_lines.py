"""The vLLM release lines the workbook is built and tested for, and which one is installed.

A *line* is a vLLM minor release (``0.26``, ``0.33``). vLLM changes its backend, metadata-builder and indexer
interfaces between minor releases, so the plugin (:mod:`sparse_mla.vllm_plugin.lines`) and the diagnosis
(:mod:`sparse_mla.diagnose.lines`) keep what differs in one small adapter module per line; everything else is written
once. A vLLM outside :data:`TESTED_LINES` gets one warning naming them and no registration (never a traceback).
"""
from __future__ import annotations

#: line -> (version specifier, what was run on it). 0.26.0 is the GPU image's line (torch 2.11.0); 0.33.0 is the newest
#: release on the package index (torch 2.14.0), tested on the CPU and run once on the H200 from a carried bundle.
TESTED_LINES: dict[str, str] = {"0.26": ">=0.26.0,<0.27", "0.33": ">=0.33.0,<0.34"}


def module_name(line: str) -> str:
    """The name of ``line``'s adapter module in each ``lines`` package (``"0.33"`` -> ``v0_33``)."""
    return "v" + line.replace(".", "_")


def installed_vllm() -> str:
    """The installed vLLM's version (``vllm.__version__``); raises ImportError where none is installed."""
    import vllm

    return str(vllm.__version__)


def line_of(version: str) -> str | None:
    """The tested line (a :data:`TESTED_LINES` key) ``version`` belongs to, or None (pre-releases after a line's first
    release count: ``0.33.1rc1`` is 0.33's, ``0.33.0rc1`` is not; an unparsable version is None)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return None
    return next((line for line, spec in TESTED_LINES.items() if SpecifierSet(spec).contains(v, prereleases=True)),
                None)


def current_line() -> str | None:
    """:func:`line_of` the installed vLLM."""
    return line_of(installed_vllm())


def tested_text() -> str:
    """The tested lines as a reader wants them: ``vLLM 0.26.x, 0.33.x``."""
    return "vLLM " + ", ".join(f"{line}.x" for line in TESTED_LINES)
