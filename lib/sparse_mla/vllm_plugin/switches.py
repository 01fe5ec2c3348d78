"""The plugin's switches in an engine's environment, in one light module (no torch, no vLLM), so that the launch
commands can set them without importing the indexer.

* ``SPARSE_MLA_TRITON_INDEXER``: ``1`` runs the Triton DSA indexer in place of vLLM's DeepGEMM one (``0`` keeps
  vLLM's; unset: the plugin's rule per capability, :func:`sparse_mla.vllm_plugin.indexer.wanted`);
* ``SPARSE_MLA_COUNT_INDEXER_CALLS``: ``1`` counts vLLM's DeepGEMM logits calls too, for the ``ran`` block
  (``sparse-mla launch`` sets it for its engines).
"""
from __future__ import annotations

#: The run-spec suffix (``TRITON_MLA_SPARSE+TRITON_DSA_INDEXER``) and the indexer's name in records.
INDEXER_NAME = "TRITON_DSA_INDEXER"
FORCE_ENV = "SPARSE_MLA_TRITON_INDEXER"
COUNT_ENV = "SPARSE_MLA_COUNT_INDEXER_CALLS"

#: The words :data:`FORCE_ENV` takes, any case: on (the Triton indexer), off (vLLM's).
SWITCH_ON, SWITCH_OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def check_switches() -> None:
    """``SPARSE_MLA_TRITON_INDEXER`` one of :data:`SWITCH_ON` / :data:`SWITCH_OFF`, empty or unset, checked by
    ``sparse-mla`` before a command starts: the plugin inside an engine takes any other text as on, so a typo
    (``flase``) would run the Triton indexer unasked. Raises :class:`~sparse_mla.errors.UserInputError` (one line
    naming the value and the words accepted)."""
    import os

    from ..errors import UserInputError

    raw = os.environ.get(FORCE_ENV)
    if raw is not None and raw.strip() and raw.strip().lower() not in SWITCH_ON + SWITCH_OFF:
        raise UserInputError(f"{FORCE_ENV}={raw!r} is no switch value; accepted: {' / '.join(SWITCH_ON)} (the Triton "
                             f"indexer), {' / '.join(SWITCH_OFF)} (vLLM's), or unset (the plugin's rule per GPU)")
