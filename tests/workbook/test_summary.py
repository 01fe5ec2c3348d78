"""`sparse_mla.workbook.summary`: reports displayed by notebooks are read back from executed notebooks by the chain and
written to summary.json / summary.md; a failing notebook leaves the earlier summary and results in place."""
import json

import nbformat
import numpy as np
import pytest

from notebook_cases import write_notebook
from sparse_mla.errors import UserInputError
from sparse_mla.workbook import chain, summary


def test_report_cleans_values_and_rejects_bad_ones(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append(obj))
    clean = summary.report("T", {"a": np.float32(0.123456789), "b": [np.int64(3), True], "c": float("nan"),
                                 "d": {"x": None}})
    assert clean == {"a": 0.1235, "b": [3, True], "c": "nan", "d": {"x": None}}
    assert shown[0][summary.MIME] == {"title": "T", "values": [["a", 0.1235], ["b", [3, True]], ["c", "nan"],
                                                               ["d", {"x": None}]]}
    assert "| a | 0.1235 |" in shown[0]["text/markdown"]
    summary.report("T", {"max |Δ|": "a|b"})
    assert "| max \\|Δ\\| | a\\|b |" in shown[-1]["text/markdown"]
    with pytest.raises(UserInputError, match=r"summary value 'bad' has type object"):
        summary.report("T", {"bad": object()})
    loop = {"a": 1}
    loop["self"] = loop
    with pytest.raises(UserInputError, match=r"summary value 'd.self' contains itself"):
        summary.report("T", {"d": loop})
    deep = [1]
    for _ in range(40):
        deep = [deep]
    with pytest.raises(UserInputError, match="nested deeper than 32"):
        summary.report("T", {"deep": deep})
    with pytest.raises(UserInputError, match="integer of 16610 bits"):
        summary.report("T", {"huge": 10**5000})
    shared = [1, 2]
    assert summary.report("T", {"twice": [shared, shared]}) == {"twice": [[1, 2], [1, 2]]}   # shared, not a cycle
    for title, values in (("", {"a": 1}), ("T", {}), ("T", [("a", 1)])):
        with pytest.raises(UserInputError):
            summary.report(title, values)


def test_chain_collects_reports_and_keeps_them_after_a_failure(tmp_path, monkeypatch):
    nbs, out = tmp_path / "notebooks", tmp_path / "results"
    nbs.mkdir()
    write_notebook(nbs / "01_first.ipynb", "from sparse_mla.workbook import summary\nimport random\n"
                                      "v = random.random()\nsummary.report('first', {'x': x, 'v': v})")
    write_notebook(nbs / "02_second.ipynb", "raise RuntimeError('second failed on purpose')")
    monkeypatch.setattr(chain, "load_profile", lambda p: {"01_first": {"x": 7}})
    with pytest.raises(Exception, match="second failed on purpose"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=out, progress=False)
    data = json.loads((out / "summary.json").read_text())
    [rep] = data["notebooks"]
    assert rep["notebook"] == "01_first.ipynb" and rep["profile"] == "cpu" and rep["parameters"] == {"x": 7}
    assert rep["values"]["x"] == 7
    assert list(rep["values"]) == ["x", "v"]   # the notebook's order, not sorted
    # the value in the summary is the one the executed notebook displayed, not a recomputation
    executed = nbformat.read(str(out / "01_first.ipynb"), as_version=4)
    shown = [o["data"][summary.MIME] for c in executed.cells for o in c.get("outputs", []) if summary.MIME in
             o.get("data", {})]
    assert dict(shown[0]["values"])["v"] == rep["values"]["v"]
    md = (out / "summary.md").read_text()
    assert "## first" in md and "| x | 7 |" in md and "profile `cpu`" in md
    assert (out / "02_second.failed.ipynb").exists() and not (out / "02_second.ipynb").exists()
    before = (out / "summary.json").read_text()
    with pytest.raises(chain.NotebookFailed, match=r"02_second.ipynb failed in cell 1 \(In \[\d+\], starting "
                                                   r"\"raise RuntimeError.*RuntimeError: second failed on purpose"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=out, progress=False, only=["02"])
    assert (out / "summary.json").read_text() == before


def test_cli_run_failure_is_one_line_exit_1(tmp_path, monkeypatch, capsys):
    from sparse_mla import cli

    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write_notebook(nbs / "01_boom.ipynb", "1 / 0")
    monkeypatch.setattr(chain, "load_profile", lambda p: {})
    real = chain.run_chain
    monkeypatch.setattr(chain, "run_chain", lambda *a, **k: real(*a, **{**k, "notebooks_dir": nbs, "progress": False}))
    rc = cli.main(["run", "--profile", "cpu", "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[-1].startswith("sparse-mla run: failed: 01_boom.ipynb failed in cell 1") and "ZeroDivisionError" in err[-1]


def test_collect_skips_notebooks_without_report_and_failed_ones(tmp_path):
    write_notebook(tmp_path / "01_plain.ipynb", "1 + 1")
    write_notebook(tmp_path / "02_x.failed.ipynb", "1")
    (tmp_path / "notes.txt").write_text("not a notebook")
    assert summary.collect(tmp_path) == []
    paths = summary.write_summary(tmp_path)
    assert json.loads(paths["json"].read_text()) == {"notebooks": []}


def test_collect_reports_unreadable_notebooks_instead_of_failing(tmp_path):
    (tmp_path / "01_bad.ipynb").write_text("not json")
    (tmp_path / "02_list.ipynb").write_text("[]")
    reps = summary.collect(tmp_path)
    assert [r["notebook"] for r in reps] == ["01_bad.ipynb", "02_list.ipynb"]
    assert all("unreadable" in r["title"] and "error" in r["values"] for r in reps)
    with pytest.raises(UserInputError, match="not a directory"):
        summary.collect(tmp_path / "missing")


def test_report_title_must_be_one_line(monkeypatch):
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: None)
    for bad in ("a\nb", 5):
        with pytest.raises(UserInputError, match="one-line"):
            summary.report(bad, {"a": 1})


def test_run_refuses_out_dir_equal_to_notebooks_and_bad_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(chain, "load_profile", lambda p: {})
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "1")
    before = (nbs / "01_a.ipynb").read_text()
    with pytest.raises(UserInputError, match="notebooks' own folder"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=nbs, progress=False)
    with pytest.raises(UserInputError, match="empty"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir="", progress=False)
    with pytest.raises(UserInputError, match="timeout"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=tmp_path / "o", timeout=-5, progress=False)
    assert (nbs / "01_a.ipynb").read_text() == before


def test_default_out_dir_is_per_profile(tmp_path, monkeypatch):
    """A CPU run must not replace the executed notebooks of a GPU run: each profile has its own folder."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "from sparse_mla.workbook import summary\nsummary.report('a', {'x': x})")
    gpu_record = tmp_path / "results" / "gpu" / "01_a.ipynb"
    gpu_record.parent.mkdir(parents=True)
    gpu_record.write_text("the GPU run's record")
    monkeypatch.setattr(chain, "project_root", lambda: tmp_path)
    monkeypatch.setattr(chain, "load_profile", lambda p: {"01_a": {"x": 3}})
    [done] = chain.run_chain("cpu", notebooks_dir=nbs, progress=False)
    assert done == tmp_path / "results" / "cpu" / "01_a.ipynb"
    assert (tmp_path / "results" / "cpu" / "summary.md").exists()
    assert gpu_record.read_text() == "the GPU run's record"


def test_overview_puts_every_profile_folder_side_by_side(tmp_path, monkeypatch):
    """results/summary.{json,md} gathers the reports of all profile folders; a run of one profile rewrites its own
    part and keeps the other's, values as each executed notebook displayed them."""
    import random

    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "from sparse_mla.workbook import summary\nsummary.report('a', {'x': x})")
    monkeypatch.setattr(chain, "project_root", lambda: tmp_path)
    xs = {"cpu": random.randint(0, 10**6), "other": random.randint(0, 10**6)}
    monkeypatch.setattr(chain, "load_profile", lambda p: {"01_a": {"x": xs[p]}})
    chain.run_chain("cpu", notebooks_dir=nbs, progress=False)
    chain.run_chain("other", notebooks_dir=nbs, progress=False)
    results = tmp_path / "results"
    data = json.loads((results / "summary.json").read_text())
    assert sorted(data["profiles"]) == ["cpu", "other"]
    for name, x in xs.items():
        [rep] = data["profiles"][name]
        assert rep["profile"] == name and rep["values"] == {"x": x}
        # the profile folder's own summary says the same
        assert json.loads((results / name / "summary.json").read_text())["notebooks"] == [rep]
    md = (results / "summary.md").read_text()
    assert md.index("## Profile folder `cpu/`") < md.index(f"| x | {xs['cpu']} |") \
        < md.index("## Profile folder `other/`") < md.index(f"| x | {xs['other']} |")
    xs["cpu"] += 1
    chain.run_chain("cpu", notebooks_dir=nbs, progress=False)
    data = json.loads((results / "summary.json").read_text())
    assert data["profiles"]["cpu"][0]["values"] == {"x": xs["cpu"]}
    assert data["profiles"]["other"][0]["values"] == {"x": xs["other"]}


def test_notebooks_of_an_earlier_chain_are_left_but_not_summarised(tmp_path, monkeypatch, capsys):
    """After notebooks are renamed, the executed notebooks under their old names stay where they are (nothing of the
    user's is deleted), the run says so, and neither summary reports them."""
    import random

    nbs, out = tmp_path / "notebooks", tmp_path / "results" / "cpu"
    nbs.mkdir()
    out.mkdir(parents=True)
    write_notebook(nbs / "01_new.ipynb", "from sparse_mla.workbook import summary\nsummary.report('new', {'x': x})")
    _executed(out / "01_old.ipynb")   # as an earlier run left it, with a report
    old = (out / "01_old.ipynb").read_text()
    x = random.randint(0, 10**6)
    monkeypatch.setattr(chain, "project_root", lambda: tmp_path)
    monkeypatch.setattr(chain, "load_profile", lambda p: {"01_new": {"x": x}})
    chain.run_chain("cpu", notebooks_dir=nbs, progress=True)
    printed = capsys.readouterr().out
    assert "01_old.ipynb in results/cpu match no notebook of notebooks" in printed
    assert (out / "01_old.ipynb").read_text() == old
    [rep] = json.loads((out / "summary.json").read_text())["notebooks"]
    assert rep["notebook"] == "01_new.ipynb" and rep["values"] == {"x": x}
    overview = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert [r["notebook"] for r in overview["profiles"]["cpu"]] == ["01_new.ipynb"]
    assert "01_old" not in (out / "summary.md").read_text() + (tmp_path / "results" / "summary.md").read_text()
    # without the chain's names (the library call), every executed notebook is reported, as before
    assert [r["notebook"] for r in summary.collect(out)] == ["01_new.ipynb", "01_old.ipynb"]


def test_overview_of_an_empty_or_missing_results_folder(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no notebooks here")
    paths = summary.write_overview(tmp_path)
    assert json.loads(paths["json"].read_text()) == {"profiles": {}}
    assert "No executed notebooks yet" in paths["md"].read_text()
    with pytest.raises(UserInputError, match="not a directory"):
        summary.write_overview(tmp_path / "missing")


def _executed(path, meta=None, mime=None):
    """A notebook as the chain leaves it, with papermill metadata and one report output (both overridable)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = meta if meta is not None else {"parameters": {"x": 1}, "end_time": "2026-12-01T00:00"}
    nb.metadata["sparse_mla"] = {"profile": "cpu"}
    cell = nbformat.v4.new_code_cell("summary.report(...)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        summary.MIME: mime if mime is not None else {"title": "t", "values": [["a", 1]]}, "text/plain": "a: 1"})]
    nb.cells = [cell]
    nbformat.write(nb, str(path))


@pytest.mark.parametrize("meta, mime", [
    ({"parameters": {}, "end_time": 17}, None),
    ({"parameters": [1, 2], "end_time": None}, None),
    (None, {"title": "t", "values": [[1, 2]]}),
    (None, {"title": 5, "values": []}),
])
def test_malformed_records_become_unreadable_entries_not_failures(tmp_path, meta, mime):
    _executed(tmp_path / "01_good.ipynb")
    _executed(tmp_path / "02_odd.ipynb", meta, mime)
    paths = summary.write_summary(tmp_path)
    reps = json.loads(paths["json"].read_text())["notebooks"]
    assert [r["title"] for r in reps] == ["t", "02_odd.ipynb (unreadable)"]
    md = paths["md"].read_text()
    assert "## t" in md and "## 02_odd.ipynb (unreadable)" in md
    (tmp_path / "gpu").mkdir()
    _executed(tmp_path / "gpu" / "01_x.ipynb", meta, mime)
    assert json.loads(summary.write_overview(tmp_path)["json"].read_text())["profiles"]["gpu"][0]["title"] == \
        "01_x.ipynb (unreadable)"


def test_special_files_are_skipped_and_empty_paths_refused(tmp_path):
    import os

    _executed(tmp_path / "01_good.ipynb")
    os.mkfifo(tmp_path / "02_pipe.ipynb")
    assert [r["notebook"] for r in summary.collect(tmp_path)] == ["01_good.ipynb"]   # returns: the FIFO is not read
    for fn in (summary.write_summary, summary.write_overview):
        for bad in ("", "  ", None):
            with pytest.raises(UserInputError, match="is empty"):
                fn(bad)


def test_run_refuses_results_root_and_another_profiles_folder(tmp_path, monkeypatch):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "1")
    (tmp_path / "params").mkdir()
    for name in ("cpu", "gpu"):
        (tmp_path / "params" / f"{name}.yaml").write_text("{}")
    monkeypatch.setattr(chain, "project_root", lambda: tmp_path)
    overview = tmp_path / "results" / "summary.json"
    overview.parent.mkdir()
    overview.write_text("the overview")
    with pytest.raises(UserInputError, match="is results/ itself"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=tmp_path / "results", progress=False)
    with pytest.raises(UserInputError, match=r"is \(inside\) the records of profile 'gpu'"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=tmp_path / "results" / "gpu", progress=False)
    assert overview.read_text() == "the overview" and not (tmp_path / "results" / "gpu").exists()
    for inside in (nbs / "05_out.ipynb", tmp_path / "results" / "gpu" / "x"):
        with pytest.raises(UserInputError, match=r"is \(inside\)"):
            chain.run_chain("cpu", notebooks_dir=nbs, out_dir=inside, progress=False)
        assert not inside.exists()
    (tmp_path / "o" / "01_a.ipynb").mkdir(parents=True)
    with pytest.raises(UserInputError, match="01_a.ipynb in .* are folders where the chain's records go"):
        chain.run_chain("cpu", notebooks_dir=nbs, out_dir=tmp_path / "o", progress=False)
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["01_a.ipynb"]


def test_profile_files_with_odd_content(tmp_path, monkeypatch):
    params = tmp_path / "params"
    params.mkdir()
    (params / "d.yaml").mkdir()
    (params / "cpu.yaml").write_text("{}")
    assert chain.profiles(params) == ["cpu"]
    for name, text, match in (
            ("dated", "01_a: {model: 2020-01-01}\n", "dated.yaml: parameters of '01_a' are not plain values"),
            ("mixed", "01: {}\nfoo: {}\n", "entries 1 are not accepted; accepted: notebook stems \\(strings\\)"),
            ("bomb", "a: &a [x, x]\nb: &b [*a, *a]\n01_a: {v: *b}\n", "bomb.yaml is not accepted YAML \\(YAML aliases"),
            ("names", "01_a: {1: 2, not-a-name: 3, ok: 4}\n", "'01_a' has parameter names 1, 'not-a-name'"),
            ("deep", "01_a: " + "[" * 5000 + "]" * 5000 + "\n", "deep.yaml is not accepted YAML \\(nested too deeply"),
            ("deepmap", "01_a: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "deepmap.yaml is not accepted YAML"),
            ("digits", "01_a: {x: " + "9" * 5000 + "}\n", "digits.yaml is not accepted YAML \\(Exceeds the limit"),
            ("keyword", "01_a: {class: 1, ok: 2}\n", "'01_a' has parameter names 'class'; accepted: Python "
                                                       "identifiers that are not keywords"),
            ("nested", "01_a: {x: " + "[" * 150 + "]" * 150 + "}\n", "parameters 'x' of '01_a' nest deeper than 100")):
        (params / f"{name}.yaml").write_text(text)
        with pytest.raises(UserInputError, match=match):
            chain.load_profile(name, params)


def test_overview_failure_warns_and_the_chain_goes_on(tmp_path, monkeypatch, capsys):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    write_notebook(nbs / "01_a.ipynb", "from sparse_mla.workbook import summary\nsummary.report('a', {'x': 1})")
    write_notebook(nbs / "02_b.ipynb", "from sparse_mla.workbook import summary\nsummary.report('b', {'y': 2})")
    monkeypatch.setattr(chain, "project_root", lambda: tmp_path)
    monkeypatch.setattr(chain, "load_profile", lambda p: {})
    (tmp_path / "results" / "summary.md").mkdir(parents=True)   # a folder where the overview's file goes
    with pytest.raises(UserInputError, match=r"\.\./summary.md in .* are folders where the chain's records go"):
        chain.run_chain("cpu", notebooks_dir=nbs, progress=False)
    assert not (tmp_path / "results" / "cpu" / "01_a.ipynb").exists()
    (tmp_path / "results" / "summary.md").rmdir()

    def no_disk(folder, names=None):
        raise PermissionError(13, "Permission denied", str(folder))

    monkeypatch.setattr(summary, "write_overview", no_disk)   # e.g. a read-only results/ (root ignores modes)
    done = chain.run_chain("cpu", notebooks_dir=nbs, progress=True)
    assert [p.name for p in done] == ["01_a.ipynb", "02_b.ipynb"]
    out = capsys.readouterr().out
    assert "warning: results/summary.* not updated" in out
    assert [r["title"] for r in json.loads((tmp_path / "results" / "cpu" / "summary.json").read_text())["notebooks"]] \
        == ["a", "b"]
