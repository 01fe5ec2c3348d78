"""What the diagnosis reads differently on each tested vLLM line: one adapter module per line, picked here.

The diagnosis (:mod:`sparse_mla.diagnose`) asks vLLM's own code everything; the lines differ only in where a few
functions live and how they are called. Each adapter module holds exactly those differences and nothing else:

* :mod:`.v0_26` -- vLLM 0.26.x (the GPU image's line);
* :mod:`.v0_33` -- vLLM 0.33.x (``kv_cache_planning``, the resolved KV-cache layout, the ``deepseek_v32`` model tree);
* :mod:`.v0_34` -- vLLM 0.34.x (0.33's, and one more platform cache).

Every adapter defines the same names (``tests/diagnose/test_lines.py`` checks it):

* ``PATCHABLE_MODULES`` -- vLLM modules of this line whose globals a plugin may rebind (added to
  :data:`sparse_mla.diagnose.probe.PATCHABLE_MODULES`);
* ``PLATFORM_DEPENDENT_CACHES`` -- ``(module, function)`` pairs of ``functools.cache``'d helpers of this line whose
  answer depends on ``current_platform`` (added to the probe's list);
* ``QUIET_LOGGERS`` -- loggers of this line (vLLM's, or its torch's) that log, even at ERROR, what the diagnosis
  reports itself or what is no news to its user; :func:`sparse_mla.diagnose.probe.quiet_logs` silences them, after
  ``settle_logging()``, which applies the line's logging configuration where vLLM would re-apply it later;
* ``INDEXER_FP8_KERNELS`` -- ``(function, module, caller and role)`` of the line's CUDA DSA path's Triton kernels
  that store ``fp8e4nv`` for the indexer (named in the reasons the indexer stage gives), and
  ``indexer_fp8_build()``, the first of them as vLLM launches it, ready for ``triton.compile`` for any GPU target
  (so the tests hear from Triton, for vLLM's own kernel, which GPUs it builds for);
* ``kv_cache_specs(vc)`` -- every attention layer's KV-cache spec, as the line's GPU model runner collects them;
* ``resolve_kv_cache_layout(vc, specs)`` -- what the engine core does with the workers' KV-cache specs before any
  planning (a no-op where the line has no layout to resolve);
* ``kv_cache_groups(vc, specs)``, ``kv_cache_config_from_groups(vc, groups, available)`` and
  ``check_kv_cache_configs(vc, specs, available)`` -- vLLM's KV-cache planning functions, called as the line's
  engine core calls them (the last raises vLLM's ``ValueError`` where the cache does not fit).
"""
from __future__ import annotations

import importlib
from types import ModuleType

from ...vllm_lines import TESTED_LINES, module_name

#: tested line (:data:`sparse_mla.vllm_lines.TESTED_LINES`) -> its adapter module here.
MODULES: dict[str, str] = {line: module_name(line) for line in TESTED_LINES}


def adapter(line: str | None = None) -> ModuleType:
    """The adapter module of ``line`` (default: the installed vLLM's, :func:`sparse_mla.vllm_lines.current_line`).

    Raises UserInputError (one line) for a vLLM outside the tested lines, naming it and the lines the diagnosis
    runs on; ImportError where no vLLM is installed.
    """
    from ...errors import UserInputError
    from ...vllm_lines import current_line, installed_vllm, tested_text

    if line is None:
        line = current_line()
        if line is None:
            raise UserInputError(f"vLLM {installed_vllm()} is installed; the diagnosis runs on {tested_text()}")
    if line not in MODULES:
        raise UserInputError(f"vLLM line {line!r} has no diagnosis adapter; the lines are {', '.join(MODULES)}")
    return importlib.import_module(f".{MODULES[line]}", __name__)
