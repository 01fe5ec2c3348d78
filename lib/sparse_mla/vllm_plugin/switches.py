"""The plugin's switches in an engine's environment, in one light module (no torch, no vLLM), so that the launch
commands can set them without importing the indexer, and the one reading of them.

* ``SPARSE_MLA_TRITON_INDEXER``: ``1`` runs the Triton DSA indexer in place of vLLM's DeepGEMM one (``0`` keeps
  vLLM's; unset: the plugin's rule per capability, :func:`sparse_mla.vllm_plugin.indexer.wanted`);
* ``SPARSE_MLA_PREFER_TRITON``: ``1`` offers ``TRITON_MLA_SPARSE`` ahead of vLLM's own backends
  (:mod:`sparse_mla.vllm_plugin.selector`);
* ``SPARSE_MLA_DISABLE_FALLBACK``: ``1`` turns the selector fallback off (explicit ``CUSTOM`` still works);
* ``SPARSE_MLA_COUNT_INDEXER_CALLS``: ``1`` counts vLLM's DeepGEMM logits calls too, for the ``ran`` block
  (``sparse-mla launch`` sets it for its engines).

Each takes the words of :data:`SWITCH_ON` / :data:`SWITCH_OFF` (any case) or nothing. Another text is refused by
``sparse-mla`` before a command starts (:func:`check_switches`); inside an engine (where the plugin is loaded by vLLM,
not by ``sparse-mla``) it is logged as a warning naming the variable, its value and what is accepted, and read as
unset (:func:`switch`): refusing there would stop every vLLM process at plugin loading.
"""
from __future__ import annotations

import logging
import os

#: The run-spec suffix (``TRITON_MLA_SPARSE+TRITON_DSA_INDEXER``) and the indexer's name in records.
INDEXER_NAME = "TRITON_DSA_INDEXER"
FORCE_ENV = "SPARSE_MLA_TRITON_INDEXER"
COUNT_ENV = "SPARSE_MLA_COUNT_INDEXER_CALLS"
PREFER_ENV = "SPARSE_MLA_PREFER_TRITON"
DISABLE_ENV = "SPARSE_MLA_DISABLE_FALLBACK"

#: The words every switch takes, any case: on, off.
SWITCH_ON, SWITCH_OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

#: What on, off and unset mean, per switch (the refusal names them).
SWITCHES = {FORCE_ENV: ("the Triton indexer", "vLLM's", "the plugin's rule per GPU"),
            PREFER_ENV: ("TRITON_MLA_SPARSE ahead of vLLM's backends", "only where vLLM has none", "off"),
            DISABLE_ENV: ("no TRITON_MLA_SPARSE fallback", "the fallback", "off: the fallback"),
            COUNT_ENV: ("DeepGEMM's indexer calls counted", "not counted", "off")}

logger = logging.getLogger(__name__)
_WARNED: set[tuple[str, str]] = set()


def refusal(name: str, raw: str) -> str | None:
    """Why the text ``raw`` of the switch ``name`` is refused (one line naming the variable, the value and the words
    accepted), or None for an accepted one (a word of :data:`SWITCH_ON` / :data:`SWITCH_OFF`, any case, or blank)."""
    if not raw.strip() or raw.strip().lower() in SWITCH_ON + SWITCH_OFF:
        return None
    on, off, unset = SWITCHES[name]
    return (f"{name}={raw!r} is no switch value; accepted: {' / '.join(SWITCH_ON)} ({on}), {' / '.join(SWITCH_OFF)} "
            f"({off}), or unset ({unset})")


def switch(name: str) -> bool | None:
    """The switch ``name`` (one of :data:`SWITCHES`) as the plugin reads it: True for a word of :data:`SWITCH_ON`,
    False for one of :data:`SWITCH_OFF`, None where it is unset or blank. Another text is read as None, with one
    warning per value in the log (the plugin runs inside vLLM's processes, where a raise would stop them)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    why = refusal(name, raw)
    if why is not None:
        if (name, raw) not in _WARNED:
            _WARNED.add((name, raw))
            logger.warning("sparse_mla: %s; read as unset", why)
        return None
    return raw.strip().lower() in SWITCH_ON


def check_switches() -> None:
    """Every switch of :data:`SWITCHES` a word of :data:`SWITCH_ON` / :data:`SWITCH_OFF`, empty or unset, checked by
    ``sparse-mla`` before a command starts (a typo such as ``flase`` would otherwise be read as unset inside the
    engine, with a warning in its log only). Raises :class:`~sparse_mla.errors.UserInputError` (one line naming the
    variable, its value and the words accepted)."""
    from ..errors import UserInputError

    for name in SWITCHES:
        raw = os.environ.get(name)
        why = None if raw is None else refusal(name, raw)
        if why is not None:
            raise UserInputError(why)
