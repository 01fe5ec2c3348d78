"""Test set-up: importing sparse_mla applies the CPU-only defaults (TRITON_INTERPRET=1, CUDA_VISIBLE_DEVICES="")
before any test module imports triton or vLLM."""
import sparse_mla  # noqa: F401
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
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
