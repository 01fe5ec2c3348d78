"""``sparse_mla.workbook.chain``: where a run may write, what a timeout says, and what the executed records keep."""
import nbformat
import pytest

from notebook_cases import write_notebook
from sparse_mla import cli
from sparse_mla.errors import UserInputError
from sparse_mla.workbook import chain


@pytest.fixture
def project(tmp_path, monkeypatch):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "from sparse_mla.workbook import summary\nsummary.report('a', {'x': x})")
    (tmp_path / "params").mkdir()
    for name in ("cpu", "gpu"):
        (tmp_path / "params" / f"{name}.yaml").write_text("{}")
    monkeypatch.setattr(chain, "project_root", lambda: tmp_path)
    monkeypatch.setattr(chain, "load_profile", lambda p: {})
    return tmp_path, nbs


def _tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("folder", ["h200", "h200/sub", "mine"])
def test_out_dir_under_results_other_than_the_profile_is_refused_before_anything_is_written(project, folder):
    root, nbs = project
    h200 = root / "results" / "h200"
    h200.mkdir(parents=True)
    (h200 / "bench_kernel_h200.csv").write_text("H,T\n8,1\n")
    (h200 / "KERNEL_NOTES.md").write_text("notes")
    before = _tree(root)
    with pytest.raises(UserInputError, match="inside results/, where a chain run may write only results/cpu/") as e:
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=root / "results" / folder, progress=False)
    assert "\n" not in str(e.value)
    if folder == "h200":
        assert "bench_kernel_h200.csv" in str(e.value)
    assert _tree(root) == before                                # nothing created, nothing written


def test_cli_run_out_dir_results_h200_exit_2(project, capsys, monkeypatch):
    root, nbs = project
    (root / "results" / "h200").mkdir(parents=True)
    (root / "results" / "h200" / "bench_kernel_h200.json").write_text("{}")
    real = chain.run_chain
    monkeypatch.setattr(chain, "run_chain", lambda *a, **k: real(*a, **{**k, "notebooks_dir": nbs, "progress": False}))
    before = _tree(root)
    assert cli.main(["run", "--profile", "cpu", "--out-dir", str(root / "results" / "h200")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "results/h200" in err[0] and "accepted" in err[0]
    assert _tree(root) == before


def test_the_profile_folder_itself_is_fine(project):
    root, nbs = project
    [done] = chain.run_chain("cpu", notebooks_dir=nbs, out_dir=root / "results" / "cpu", progress=False)
    assert done == root / "results" / "cpu" / "01_a.ipynb"


def test_cell_timeout_is_one_line(project, capsys, monkeypatch):
    root, nbs = project
    write_notebook(nbs / "02_slow.ipynb", "import time\ntime.sleep(30)")
    real = chain.run_chain
    monkeypatch.setattr(chain, "run_chain", lambda *a, **k: real(*a, **{**k, "notebooks_dir": nbs, "progress": False}))
    assert cli.main(["run", "--profile", "cpu", "--timeout", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "02_slow.ipynb" in err[0] and "timeout of 2 s (--timeout)" in err[0]
    assert (root / "results" / "cpu" / "02_slow.failed.ipynb").exists()
    assert (root / "results" / "cpu" / "01_a.ipynb").exists()          # the notebook before it is kept


def test_executed_records_drop_progress_bars_and_kernel_warnings(project):
    root, nbs = project
    write_notebook(nbs / "02_noise.ipynb",
              "import sys\nfrom tqdm import tqdm\nfor _ in tqdm(range(3), desc='work'):\n    pass\n"
              "print('[IPKernelApp] WARNING | Kernel is running over TCP without encryption.', file=sys.stderr)\n"
              "print('a real warning', file=sys.stderr)\nprint('result 42')")
    chain.run_chain("cpu", notebooks_dir=nbs, progress=False)
    nb = nbformat.read(str(root / "results" / "cpu" / "02_noise.ipynb"), as_version=4)
    outs = nb.cells[1].outputs
    text = "".join(o.get("text", "") for o in outs)
    assert "result 42" in text and "a real warning" in text
    assert "it/s" not in text and "work:" not in text and "IPKernelApp" not in text


def test_out_dir_outside_results_is_where_notebooks_write(project, tmp_path):
    """--out-dir outside results/: a notebook's own out_dir parameter points there too, so nothing lands in
    results/; with the default (results/<profile>/) the notebook keeps its own default."""
    root, nbs = project
    (nbs / "01_a.ipynb").unlink()
    (root / "results").mkdir()
    write_notebook(nbs / "01_writes.ipynb", "from pathlib import Path\nPath(out_dir, 'written.txt').write_text('x')",
              parameters='out_dir = "../results"')
    before = _tree(root / "results")
    out = tmp_path / "elsewhere"
    chain.run_chain("cpu", notebooks_dir=nbs, out_dir=out, progress=False)
    assert (out / "written.txt").read_text() == "x" and (out / "01_writes.ipynb").exists()
    assert _tree(root / "results") == before
    chain.run_chain("cpu", notebooks_dir=nbs, progress=False)
    assert (root / "results" / "written.txt").exists() and (root / "results" / "cpu" / "01_writes.ipynb").exists()


@pytest.mark.parametrize("folder, says", [("", "the repository itself"), ("lib", "repository's lib/"),
                                          ("lib/sparse_mla", "repository's lib/"), ("tests/x", "repository's tests/"),
                                          (".git", "repository's .git/"), ("params", "repository's params/")])
def test_out_dir_in_the_repositorys_code_tests_or_git_is_refused(project, folder, says):
    root, nbs = project
    for d in ("lib/sparse_mla", "tests", ".git"):
        (root / d).mkdir(parents=True, exist_ok=True)
    before = _tree(root)
    with pytest.raises(UserInputError, match=f"is (\\(inside\\) )?(the )?{says}"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=root / folder, progress=False)
    assert _tree(root) == before
