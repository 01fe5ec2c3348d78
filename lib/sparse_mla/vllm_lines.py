"""The vLLM release lines the workbook is built and tested for, and which one is installed.

A *line* is a vLLM minor release (``0.26``, ``0.33``). vLLM changes its backend, metadata-builder and indexer
interfaces between minor releases, so the plugin (:mod:`sparse_mla.vllm_plugin.lines`) and the diagnosis
(:mod:`sparse_mla.diagnose.lines`) keep what differs in one small adapter module per line; everything else is written
once. A vLLM outside :data:`TESTED_LINES` gets one warning naming them and no registration (never a traceback).
"""
from __future__ import annotations

#: line -> version specifier. 0.26.0 is the GPU image's line, pinned; 0.34.0 the newest release on the package index;
#: 0.33.0 the line between, run once on the H200 from a carried bundle. Their torch: :data:`TORCH_PINS`. Which
#: environments test which line: :data:`CI_LINES` and :data:`NOT_IN_CI`.
TESTED_LINES: dict[str, str] = {"0.26": ">=0.26.0,<0.27", "0.33": ">=0.33.0,<0.34", "0.34": ">=0.34.0,<0.35"}

#: line -> the torch its vLLM wheels require (their ``Requires-Dist: torch==...``: 0.26.0 and 0.34.0 as installed in
#: ``.venv`` and ``.venv034``; 0.33.0's from its bundle, ``docs/own-vllm.md``). A record's header names a torch of its
#: vLLM's line (``records check``; a local build label such as ``+cu130`` aside).
TORCH_PINS: dict[str, str] = {"0.26": "==2.11.0", "0.33": "==2.14.0", "0.34": "==2.14.0"}
#: torch -> the Triton that torch's wheel requires on Linux (its ``Requires-Dist: triton...``, read from the installed
#: torch 2.11.0 and 2.14.0). ``tests/test_vllm_lines.py`` holds both tables to the installed packages' metadata.
TRITON_PINS: dict[str, str] = {"2.11.0": "==3.6.0", "2.14.0": "~=3.8.0"}

#: The line policy: CI (the README's test commands, ``.ci/run``) covers the pinned line and the newest release, each in
#: an environment of its own; a line between them is not installed in CI (the time of another vLLM and torch install)
#: and says why here. ``tests/test_vllm_lines.py`` holds this against TESTED_LINES and the README's commands.
CI_LINES: dict[str, str] = {
    "0.26": "the pinned line (.venv): every test and notebook",
    "0.34": "the newest release (.venv034): the tests of what differs per line (plugin, diagnosis lines, selection, "
            "path, memory, config, GLM-5.3-Flash)",
}
NOT_IN_CI: dict[str, str] = {
    "0.33": "between the pinned line and the newest: its plugin and diagnosis adapters are 0.34's except DeepGEMM's "
            "call signatures (no logits_dtype); in CI until revision a7d1725 (2026-12-05), run once on the H200",
}


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


def pin_problems(vllm, torch, triton) -> list[str]:
    """A header's torch and Triton against its vLLM (``environment.vllm``, ``.torch``, ``.triton``, as
    :func:`sparse_mla.records.environment` reads their ``__version__``): torch the one :data:`TORCH_PINS` gives the
    vLLM's line, Triton the one :data:`TRITON_PINS` gives that torch. One line each; ``[]`` where they agree or the
    vLLM is no tested line (named elsewhere) or a version does not parse (the schema names it)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    line = line_of(vllm) if isinstance(vllm, str) else None
    if line is None or not isinstance(torch, str):
        return []
    try:
        t = Version(torch)
    except InvalidVersion:
        return []
    if not SpecifierSet(TORCH_PINS[line]).contains(t, prereleases=True):
        return [f"torch {torch!r} beside vLLM {vllm}; accepted: torch{TORCH_PINS[line]} (the {line} line's pin, "
                f"sparse_mla.vllm_lines.TORCH_PINS)"]
    want = TRITON_PINS.get(t.public)
    try:
        ok = want is None or not isinstance(triton, str) or SpecifierSet(want).contains(Version(triton),
                                                                                       prereleases=True)
    except InvalidVersion:
        return []
    return [] if ok else [f"triton {triton!r} beside torch {torch}; accepted: triton{want} (torch {t.public}'s pin, "
                          f"sparse_mla.vllm_lines.TRITON_PINS)"]
