"""The front door and the rooms behind it: the README stays short, and every link in it and in docs/ leads to a file
of the repository."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(doc):
    links = [m.group(1) for m in LINK.finditer(doc.read_text()) if "://" not in m.group(1)]
    missing = [x for x in links if not (doc.parent / x).exists()]
    assert not missing, missing


def test_the_readme_links_every_doc():
    text = (ROOT / "README.md").read_text()
    assert [p.name for p in DOCS[1:] if f"docs/{p.name}" not in text] == []


def test_the_layout_names_every_module():
    """docs/architecture.md's layout block names every module of the package (its file name without .py)."""
    pkg = ROOT / "lib" / "sparse_mla"
    doc = (ROOT / "docs" / "architecture.md").read_text()
    layout = doc[doc.index("```", doc.index("## Layout")):]
    layout = layout[:layout.index("```", 3)]
    modules = sorted(p.relative_to(pkg) for p in pkg.rglob("*.py") if p.name != "__init__.py")
    missing = [str(m) for m in modules if not re.search(rf"(?<![\w.]){re.escape(m.stem)}(?!\w)", layout)]
    assert not missing, missing


def test_ci_runs_the_readmes_commands_read_from_the_readme():
    """.ci/run takes the set-up and test commands from the README (one home: they cannot drift); the reader finds
    them, set-up first, and refuses a README without them."""
    import runpy

    reader = runpy.run_path(str(ROOT / ".ci" / "readme_commands.py"))["commands"]
    cmds = reader((ROOT / "README.md").read_text())
    assert cmds[0].startswith("python3 -m venv .venv && .venv/bin/pip install") and len(cmds) >= 4, cmds
    assert any("--nbval-lax tests notebooks" in c for c in cmds) and any("-m slow" in c for c in cmds)
    assert all("#" not in c for c in cmds)
    assert "readme_commands.py README.md" in (ROOT / ".ci" / "run").read_text()
    with pytest.raises(SystemExit, match="no section '## Test'"):
        reader("# x\n\n## Set up\n\n```bash\npip install .\n```\n")


def test_the_readmes_test_runs_select_by_registered_markers_not_file_lists():
    """Each test run of the README picks its tests by markers (issue 49 item 3): no test file is named, so a new GGUF
    or every-line test is taken by marking it; every marker a run names is registered in pyproject.toml."""
    import re
    import runpy
    import tomllib

    cmds = runpy.run_path(str(ROOT / ".ci" / "readme_commands.py"))["commands"]((ROOT / "README.md").read_text())
    runs = [c.split("-m pytest", 1)[1] for c in cmds if "-m pytest" in c]
    assert len(runs) == 4, runs
    assert not [r for r in runs if re.search(r"tests/\S+\.py|tests/\w+(\s|$)", r)], runs
    registered = {m.split(":")[0] for m in
                  tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]}
    named = {w for r in runs for expr in re.findall(r"-m '([^']+)'|-m (\w+)", r) for e in expr
             for w in re.findall(r"\w+", e) if w not in ("and", "or", "not")}
    assert named == {"slow", "gguf", "every_line"} and named <= registered, (named, registered)
