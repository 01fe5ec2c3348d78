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
                                          (".ci", "repository's .ci/"), (".venv/x", "repository's .venv/"),
                                          ("lib/sparse_mla", "repository's lib/"), ("tests/x", "repository's tests/"),
                                          (".git", "repository's .git/"), ("params", "repository's params/")])
def test_out_dir_in_the_repositorys_code_tests_or_git_is_refused(project, folder, says):
    root, nbs = project
    for d in ("lib/sparse_mla", "tests", ".git", ".ci", ".venv"):
        (root / d).mkdir(parents=True, exist_ok=True)
    before = _tree(root)
    with pytest.raises(UserInputError, match=f"is (\\(inside\\) )?(the )?{says}"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=root / folder, progress=False)
    assert _tree(root) == before


def test_the_default_output_is_the_checkouts_results_wherever_the_command_runs(project, monkeypatch, capsys):
    """The workbook is its checkout: run from another folder, its executed notebooks go to the checkout's
    results/<profile>/; a relative --out-dir is read from the current folder; the checkout's own folders are refused
    from there too; --help names the checkout."""
    root, nbs = project
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    chain.run_chain("cpu", notebooks_dir=nbs, progress=False)
    assert (root / "results" / "cpu" / "01_a.ipynb").exists() and not any(elsewhere.iterdir())
    chain.run_chain("cpu", notebooks_dir=nbs, out_dir="mine", progress=False)
    assert (elsewhere / "mine" / "01_a.ipynb").exists()
    for rel in ("../notebooks", "../results/h200", ".."):
        with pytest.raises(UserInputError, match="output directory"):
            chain.run_chain("cpu", notebooks_dir=nbs, out_dir=rel, progress=False)
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert f"installedfrom({root})" in "".join(capsys.readouterr().out.split())     # argparse wraps at hyphens


KILLED_RUN = """
import sys
from pathlib import Path
from sparse_mla import cli
from sparse_mla.workbook import chain
root = Path(sys.argv[1])
chain.project_root = lambda: root
chain.load_profile = lambda p: {}
sys.exit(cli.main(["run", "--profile", "cpu"]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_run_stopped_mid_cell_prints_one_line_and_leaves_no_kernel(project, sig):
    """SIGTERM (a time limit, a kill) or SIGINT (Ctrl-C) while a cell runs: exit 130, the one line, no traceback of
    the dying kernel or of nbclient's abandoned task, the partial notebook kept as *.failed.ipynb, the kernel gone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root, nbs = project
    marker = root / "kernel.pid"
    write_notebook(nbs / "02_long.ipynb", f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n"
                                          "time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not (marker.exists() and marker.read_text()) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert marker.exists(), proc.communicate(timeout=60)
    kernel = int(marker.read_text())
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=120)
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("Executing")]
    assert proc.returncode == 130, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith("sparse-mla run: interrupted; no finished output was replaced; "
                                                   "the partial output is kept as ") and \
        lines[0].endswith("02_long.failed.ipynb"), lines
    assert (root / "results" / "cpu" / "02_long.failed.ipynb").exists()
    assert not (root / "results" / "cpu" / ".02_long.running.ipynb").exists()
    for _ in range(50):                                  # the kernel is shut down with the run
        try:
            os.kill(kernel, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(kernel, signal.SIGKILL)
        pytest.fail(f"the kernel {kernel} outlived the run")


def test_an_interrupted_notebook_names_the_partial_output_it_keeps(tmp_path, monkeypatch, capsys):
    """The breaker's sixth round (2026-12-06): a run stopped mid-notebook kept its partial output as
    ``NN_*.failed.ipynb`` and said "nothing half-written was left in place"; the line now names what it kept."""
    from pathlib import Path

    import papermill as pm

    def stopped(nb, out, **kw):
        Path(out).write_text("{}")              # papermill writes the notebook as it goes
        raise KeyboardInterrupt

    monkeypatch.setattr(pm, "execute_notebook", stopped)
    target = tmp_path / "01_a.ipynb"
    with pytest.raises(KeyboardInterrupt) as e:
        chain._execute(tmp_path / "01_a.ipynb", tmp_path / ".01_a.running.ipynb", target, {}, tmp_path, None, False,
                       60, tmp_path)
    assert getattr(e.value, "kept", None) == ["01_a.failed.ipynb"] and (tmp_path / "01_a.failed.ipynb").exists()
    monkeypatch.setattr(cli, "build_parser", lambda: _Parser(e.value))
    assert cli.main(["run"]) == 130
    assert capsys.readouterr().err.strip() == ("sparse-mla run: interrupted; no finished output was replaced; the "
                                               "partial output is kept as 01_a.failed.ipynb")


class _Parser:
    """A parser whose one command raises ``error`` (cli.main's handling alone)."""

    def __init__(self, error):
        self.error = error

    def parse_args(self, argv):
        import argparse

        def func(args):
            raise self.error
        return argparse.Namespace(command="run", func=func)


def test_a_profile_parameter_the_notebook_does_not_have_is_refused_by_name(project, monkeypatch, capsys):
    """papermill only warns about a name the notebook's parameters cell does not have, and runs the default: a
    misspelled key (``capabilty``) is refused before any notebook runs, naming it and the accepted names."""
    root, nbs = project
    monkeypatch.setattr(chain, "load_profile", lambda p: {"01_a": {"x": 2, "capabilty": "h200"}})
    real = chain.run_chain
    monkeypatch.setattr(chain, "run_chain", lambda *a, **k: real(*a, **{**k, "notebooks_dir": nbs, "progress": False}))
    before = _tree(root)
    assert cli.main(["run", "--profile", "cpu", "--out-dir", str(root / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sparse-mla run: error: profile 'cpu': 01_a has no parameter 'capabilty'; accepted: x (its "
                   "parameters cell)"], err
    assert _tree(root) == before
    monkeypatch.setattr(chain, "load_profile", lambda p: {"01_a": {"x": 2}})
    [done] = chain.run_chain("cpu", notebooks_dir=nbs, out_dir=root / "out", progress=False)
    assert done.is_file()


@pytest.mark.parametrize("value, shown", [("2", "'2' (str)"), (True, "True (bool)"), ([2], "[2] (list)")])
def test_a_profile_value_of_another_kind_than_the_default_is_refused_by_name(project, monkeypatch, capsys, value,
                                                                             shown):
    """A YAML ``"false"`` for a ``False`` default would run the notebook into an error deep inside (``KeyError:
    'selected'`` in 01): the kind of the parameters cell's default is the one accepted, before any notebook runs."""
    root, nbs = project
    monkeypatch.setattr(chain, "load_profile", lambda p: {"01_a": {"x": value}})
    before = _tree(root)
    assert cli.main(["run", "--profile", "cpu", "--out-dir", str(root / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"profile 'cpu': 01_a's x = {shown}; accepted: an integer" in err[0], err
    assert _tree(root) == before
    chain._check_parameter_type("p", "nb", "flag", False, "False")
    with pytest.raises(UserInputError, match=r"nb's flag = 'false' \(str\); accepted: true or false"):
        chain._check_parameter_type("p", "nb", "flag", "false", "False")
    chain._check_parameter_type("p", "nb", "ratio", 2, "0.5")          # an integer is a number
    chain._check_parameter_type("p", "nb", "anything", "x", "None")    # None takes anything


def test_the_committed_profiles_name_only_parameters_the_notebooks_have(monkeypatch):
    import sparse_mla.machine

    # each profile as judged on the machine it is for: the gpu profile's device: cuda where a GPU is (issue 47)
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    root = chain.project_root()
    nbs = chain.discover(root / "notebooks")
    for profile in chain.profiles(root / "params"):
        chain._check_parameter_names(profile, chain.load_profile(profile, root / "params"), nbs)


def test_a_profile_key_written_twice_is_refused(tmp_path):
    """YAML keeps the last of two equal keys silently (a section written twice dropped the first, misspelling
    included): refused naming the key."""
    (tmp_path / "p.yaml").write_text("01_a:\n  tp: 8\n  tp: 4\n")
    with pytest.raises(UserInputError, match=r"profile file p\.yaml is not accepted YAML \(the key 'tp' appears twice"):
        chain.load_profile("p", tmp_path)
    (tmp_path / "q.yaml").write_text("01_a:\n  capabilty: h200\n01_a:\n  tp: 8\n")
    with pytest.raises(UserInputError, match=r"the key '01_a' appears twice"):
        chain.load_profile("q", tmp_path)


def test_a_package_installed_outside_its_checkout_says_so(tmp_path, monkeypatch):
    """A plain ``pip install .`` puts the package in site-packages, without notebooks/ and params/: ``sparse-mla
    run`` said "unknown profile 'cpu'; accepted: none found"; now it names where it is installed and the editable
    install it needs."""
    import pytest

    from sparse_mla.errors import UserInputError

    fake = tmp_path / "site-packages" / "sparse_mla" / "workbook" / "chain.py"
    monkeypatch.setattr(chain, "__file__", str(fake))
    with pytest.raises(UserInputError, match=r"outside a checkout of the workbook .*accepted: from the checkout, "
                                             r"pip install -e"):
        chain.project_root()
    for d in ("notebooks", "params"):
        (tmp_path / d).mkdir()
    assert chain.project_root() == tmp_path
