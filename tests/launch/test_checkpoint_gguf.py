"""make-checkpoint --gguf: the GGUF types and layouts it refuses before anything is written, its exit code, and
its overwrite of an earlier output with GGUFs."""
from __future__ import annotations

import pytest

pytest.importorskip("gguf", reason="gguf-py is not installed (the gguf and test extras bring it)")

from sparse_mla.errors import UserInputError  # noqa: E402
from sparse_mla.launch.checkpoint import make_checkpoint  # noqa: E402


def test_bad_gguf_type_is_one_error_naming_it(tmp_path):
    with pytest.raises(UserInputError, match=r"--gguf 'Q3_K'.*accepted: F16, Q8_0, Q4_K"):
        make_checkpoint(tmp_path / "x", gguf=("Q3_K",))
    assert not (tmp_path / "x").exists()


def test_cli_gguf_exit_code_2_and_overwrite_keeps_gguf_outputs(tmp_path, capsys):
    from sparse_mla.cli import main

    assert main(["make-checkpoint", str(tmp_path / "c"), "--gguf", "Q9"]) == 2
    assert "--gguf 'Q9'" in capsys.readouterr().err
    out = make_checkpoint(tmp_path / "c", index_topk=256, gguf=("f16",))
    assert (out / "model-F16.gguf").is_file()
    make_checkpoint(out, index_topk=256, overwrite=True)   # an earlier output with a GGUF is ours to replace
    assert not (out / "model-F16.gguf").exists()


@pytest.mark.parametrize("argv, says", [
    (["--indexer-types", "FSSF"], "--gguf with top-k sharing (indexer_types)"),
    (["--index-topk-pattern", "FSSF"], "--gguf with top-k sharing (index_topk_pattern)"),
    (["--index-topk-freq", "2"], "--gguf with top-k sharing (index_topk_freq)"),
    (["--preset", "deepseek-v3.2-tiny"], "--gguf with --preset 'deepseek-v3.2-tiny'")])
def test_gguf_refuses_what_the_glm_dsa_layout_cannot_describe(tmp_path, capsys, argv, says):
    """A GGUF of a shared-top-k checkpoint (some layers without indexer tensors, no glm-dsa key saying why) or of
    DeepSeek-V3.2 (YaRN, NeoX indexer rope) would be read back as something else: refused before anything is written."""
    from sparse_mla.cli import main

    assert main(["make-checkpoint", str(tmp_path / "c"), "--index-topk", "256", "--gguf", "Q8_0", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "c").exists() and list(tmp_path.iterdir()) == []
