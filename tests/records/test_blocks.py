"""sparse_mla.records.blocks: the generated tables of the docs. Every block in README.md and
results/h200/KERNEL_NOTES.md equals its rendering from the committed records (so every figure quoted there is its
record's); blocks are found, rendered and rewritten atomically, and malformed markers, unknown tables and missing
files are one error line, exit 2."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparse_mla import cli
from sparse_mla.errors import UserInputError
from sparse_mla.records import blocks
from sparse_mla.records.tables import render
from sparse_mla.workbook.records_cli import TABLES

ROOT = Path(__file__).resolve().parents[2]
# every document of the repository (README, docs/, the kernel notes), each with at least this many blocks
DOCS = {**{p: 0 for p in sorted((ROOT / "docs").glob("*.md"))}, ROOT / "README.md": 2,
        ROOT / "docs" / "measurements.md": 15, ROOT / "docs" / "own-vllm.md": 1,
        ROOT / "results" / "h200" / "KERNEL_NOTES.md": 17}


@pytest.mark.parametrize("doc", list(DOCS), ids=lambda p: p.name)
def test_every_block_of_the_docs_equals_its_records(doc):
    found = blocks.blocks(doc.read_text(), str(doc))
    assert len(found) >= DOCS[doc], [b.name for b in found]
    stale = [f"{doc.name}:{b.open_line + 1} {b.name} {' '.join(b.args)}" for b in found
             if b.body != blocks.render_block(b, doc.parent, str(doc), TABLES)]
    assert not stale, f"stale blocks (run `sparse-mla records table --update {doc.relative_to(ROOT)}`): {stale}"


def record(tmp_path, name="r.json", peer=2.0):
    header = {"gpu": "G", "date": "2026-01-02T10:00:00+00:00", "command": "c"}
    (tmp_path / name).write_text(json.dumps({"environment": header,
                                             "bench": [{"H": 8, "T": 1, "speedup_vs_flashmla_graph": peer}]}))
    return name


DOC = """# notes

text before
<!-- records-table: kernel r.json -->
stale text
<!-- /records-table -->

```
<!-- records-table: not a block inside a code fence -->
```
and after
"""


def test_blocks_are_found_rendered_and_rewritten(tmp_path):
    record(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    [b] = blocks.blocks(DOC, "doc.md")
    assert (b.name, b.args, b.open_line, b.close_line, b.body) == ("kernel", ("r.json",), 3, 5, "stale text")
    assert blocks.update([str(doc)]) == [f"{doc}: 1 block(s), 1 rewritten"]
    text = doc.read_text()
    table = render("kernel", ["r.json"], tmp_path)
    assert text == DOC.replace("stale text", table) and "| 8 | 2.00x |" in table
    mtime = doc.stat().st_mtime_ns
    assert blocks.update([str(doc)]) == [f"{doc}: 1 block(s), 0 rewritten"]
    assert doc.stat().st_mtime_ns == mtime                          # nothing to change: not written
    record(tmp_path, peer=3.0)
    assert blocks.update([str(doc)]) == [f"{doc}: 1 block(s), 1 rewritten"] and "| 8 | 3.00x |" in doc.read_text()


@pytest.mark.parametrize("kind", ["read-only", "symlink", "crlf", "group-writable"])
def test_documents_are_rewritten_in_place_as_editors_do(tmp_path, kind):
    """``--update`` on a read-only document keeps it read-only, on a symbolic link writes the link's target (the link
    stays a link), on a CRLF document keeps CRLF (the new table's lines too), on a 0664 document keeps 0664."""
    record(tmp_path)
    real = tmp_path / ("real.md" if kind == "symlink" else "doc.md")
    real.write_bytes((DOC.replace("\n", "\r\n") if kind == "crlf" else DOC).encode())
    mode = {"read-only": 0o444, "group-writable": 0o664}.get(kind, 0o644)
    os.chmod(real, mode)
    doc = tmp_path / "doc.md"
    if kind == "symlink":
        doc.symlink_to(real.name)
    assert blocks.update([str(doc)]) == [f"{doc}: 1 block(s), 1 rewritten"]
    assert (real.stat().st_mode & 0o777) == mode
    assert doc.is_symlink() == (kind == "symlink") and os.path.realpath(doc) == str(real)
    raw = real.read_bytes().decode()
    table = render("kernel", ["r.json"], tmp_path)
    want = DOC.replace("stale text", table)
    assert raw == (want.replace("\n", "\r\n") if kind == "crlf" else want)
    if kind == "crlf":
        assert "\r\n" in raw and "\n" not in raw.replace("\r\n", "")       # every line end, the table's too


@pytest.mark.parametrize("text,says", [
    ("<!-- records-table: kernel r.json -->\nx\n", "doc.md:1: the block is never closed"),
    ("<!-- /records-table -->\n", "doc.md:1: a closing marker outside any block"),
    ("<!-- records-table: kernel r.json -->\n<!-- records-table: kernel r.json -->\n<!-- /records-table -->\n",
     "doc.md:2: a block opens inside the block of line 1"),
    ("a\n<!-- records-table kernel r.json -->\n", "doc.md:2: malformed marker"),
    ("<!-- records-table: -->\n<!-- /records-table -->\n", "doc.md:1: malformed marker"),
    ("<!-- records-table: kernel 'r.json -->\n<!-- /records-table -->\n", "doc.md:1: the marker's arguments"),
])
def test_malformed_markers_are_one_error_naming_the_line(text, says):
    with pytest.raises(UserInputError) as e:
        blocks.blocks(text, "doc.md")
    assert str(e.value).startswith(says) and "accepted: '<!-- records-table: NAME ARGS -->'" in str(e.value)


def test_a_bad_block_leaves_every_file_as_it_was(tmp_path):
    record(tmp_path)
    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_text(DOC)
    bad.write_text("<!-- records-table: kernel missing.json -->\n<!-- /records-table -->\n")
    with pytest.raises(UserInputError, match=r"bad\.md:1: record 'missing\.json' \(.*\) does not exist"):
        blocks.update([str(good), str(bad)])
    assert good.read_text() == DOC and sorted(os.listdir(tmp_path)) == ["bad.md", "good.md", "r.json"]


def test_a_file_that_refuses_the_write_leaves_every_file_as_it_was(tmp_path, monkeypatch):
    """The second document's write fails (a full disk, an immutable file): the first, already rewritten, gets its old
    text back, and the error says so."""
    import sparse_mla.files as files

    record(tmp_path)
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(DOC)
    b.write_text(DOC)
    real = files.rewrite_in_place

    def refuse_b(path, text, newline="\n"):
        if os.path.basename(path) == "b.md":
            raise OSError(28, "No space left on device")
        return real(path, text, newline)

    monkeypatch.setattr(files, "rewrite_in_place", refuse_b)
    with pytest.raises(UserInputError, match=r"b\.md' cannot be rewritten \(OSError: No space left on device\); "
                                             r".*a\.md restored as they were"):
        blocks.update([str(a), str(b)])
    assert a.read_text() == DOC and b.read_text() == DOC
    assert sorted(os.listdir(tmp_path)) == ["a.md", "b.md", "r.json"]

    def refuse_b_as_the_writer_does(path, text, newline="\n"):   # files.write_failure's one line (an immutable file)
        if os.path.basename(path) == "b.md":
            raise files.write_failure(path, PermissionError(1, "Operation not permitted"))
        return real(path, text, newline)

    monkeypatch.setattr(files, "rewrite_in_place", refuse_b_as_the_writer_does)
    with pytest.raises(UserInputError, match=r"b\.md' failed: Operation not permitted\); .*a\.md restored"):
        blocks.update([str(a), str(b)])
    assert a.read_text() == DOC and b.read_text() == DOC


def test_the_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    record(tmp_path)
    (tmp_path / "doc.md").write_text(DOC)
    assert cli.main(["records", "table", "kernel", "r.json"]) == 0
    assert capsys.readouterr().out == render("kernel", ["r.json"], tmp_path) + "\n"
    assert cli.main(["records", "table", "--update", "doc.md"]) == 0
    assert capsys.readouterr().out == "doc.md: 1 block(s), 1 rewritten\n"
    (tmp_path / "plain.md").write_text("no blocks\n")
    assert cli.main(["records", "table", "--update", "plain.md"]) == 0
    assert capsys.readouterr().out == "plain.md: no records-table block\n"


@pytest.mark.parametrize("argv,says", [
    (["kernels", "r.json"], "records table 'kernels' is unknown; accepted: engines FILE"),
    (["kernel", "nope.json"], "record 'nope.json' does not exist"),
    ([], "records table: no table named; accepted:"),
    (["kernel", "r.json", "--update", "doc.md"], "both a table ('kernel') and --update"),
    (["--update", "nope.md"], "document 'nope.md' does not exist"),
    (["--update", "bad.md"], "bad.md:1: malformed marker"),
    (["--update", "."], "document '.' is the current directory"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    record(tmp_path)
    (tmp_path / "doc.md").write_text(DOC)
    (tmp_path / "bad.md").write_text("<!-- records-table kernel -->\n")
    assert cli.main(["records", "table", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and says in err and err.count("\n") == 1, err


def test_a_linked_document_reads_its_records_from_its_own_folder_and_keeps_its_byte_order_mark(tmp_path):
    """A document reached through a link in another folder is rendered with the paths of the document itself (its
    target's folder), as the document's author wrote them; a UTF-8 byte-order mark before the first line stays."""
    record(tmp_path, peer=2.0)
    other = tmp_path / "other"
    other.mkdir()
    record(other, peer=9.0)                               # a record of the same name beside the link: not the one
    doc = tmp_path / "doc.md"
    doc.write_text("\ufeff" + DOC)
    (other / "link.md").symlink_to("../doc.md")
    assert blocks.update([str(other / "link.md")]) == [f"{other / 'link.md'}: 1 block(s), 1 rewritten"]
    text = doc.read_text()
    assert text.startswith("\ufeff# notes") and "| 8 | 2.00x |" in text and "9.00x" not in text
    assert (other / "link.md").is_symlink()
