"""Test set-up: importing sparse_mla applies the CPU-only defaults (TRITON_INTERPRET=1, CUDA_VISIBLE_DEVICES="")
before any test module imports triton or vLLM."""
import shutil

import sparse_mla  # noqa: F401
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests are skipped without a CUDA GPU; ``interpreter`` tests (CPU tensors through Triton's interpreter)
    where Triton compiles for a GPU instead (``TRITON_INTERPRET`` unset: a GPU machine). On a GPU machine the whole
    suite is both passes: ``pytest tests`` and ``TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= pytest -m interpreter tests``."""
    from sparse_mla.machine import interpreting

    skips = []
    if not torch.cuda.is_available():
        skips.append(("gpu", pytest.mark.skip(reason="needs a CUDA GPU")))
    if not interpreting():
        skips.append(("interpreter", pytest.mark.skip(reason="runs Triton's CPU interpreter: run with TRITON_INTERPRET=1 "
                                                             "CUDA_VISIBLE_DEVICES=''")))
    for item in items:
        for key, skip in skips:
            if key in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """``sparse_mla.cli.main(["diagnose", ...])`` -> (rc, stdout, stderr). Only the diagnose subcommand is loaded, so
    the test does not depend on the other steps' modules."""
    from sparse_mla import cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", ("diagnose.cli",))

    def run(*argv):
        rc = cli.main(["diagnose", *argv])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
    """``module_tmp(name) -> Path``: a new folder for one test module's fixtures, removed when the module is done.

    The module-scoped checkpoints are 0.2-0.7 GB each; kept to the end of the run (``tmp_path_factory.mktemp``) they
    added up to about 7 GB a tier, and a CI machine's disk ran full mid-run."""
    made = []

    def mk(name: str):
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield mk
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def probes():
    """``diagnose(model, capability, kv, tp=tp, with_plugin=True)`` records, probed on first use and kept for the
    test module (a probe costs seconds)."""
    from sparse_mla import diagnose as dg

    cache: dict[tuple, dict] = {}

    def get(capability, kv="auto", tp=1, model="glm-5"):
        key = (model, capability, kv, tp)
        if key not in cache:
            cache[key] = dg.diagnose(model, capability, kv, tp=tp, with_plugin=True)
        return cache[key]

    return get


@pytest.fixture(autouse=True)
def _torch_default_dtype_as_found():
    """torch's default dtype put back as each test found it: vLLM's ``set_default_torch_dtype`` restores it only after
    a clean exit, so a test whose vLLM model build raised left bf16 as the default for the tests after it in that
    process (CI, 2026-12-06: 16 fp32 tests of another file failed on a bf16 ``lse``). The diagnosis guards its own
    builds (:func:`sparse_mla.diagnose.meta_model.default_dtype`); this guards the tests' other vLLM calls."""
    before = torch.get_default_dtype()
    yield
    if torch.get_default_dtype() != before:
        torch.set_default_dtype(before)
