"""sparse_mla.files: the one JSON reader. JSON the decoder itself refuses (malformed, an integer past Python's
4300-digit limit, nesting past its recursion) is one line naming the file or option, exit status 2, in every command
that reads a config file or a JSON option (bad-input issue, class 1)."""
from __future__ import annotations

import json
import os

import pytest

from sparse_mla import cli
from sparse_mla.errors import UserInputError
from sparse_mla.files import parse_json, read_json
from sparse_mla.models import PRESET_CONFIGS

HUGE_INT = "9" * 5000
DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("text, why", [
    ('{"hidden_size": ' + HUGE_INT + "}", "4300 digits"),
    (DEEP, "nested too deeply"),
    ("{bad", "line 1 column 2"),
    ("", "line 1 column 1"),
])
def test_parse_json_refusals_are_one_line(text, why):
    with pytest.raises(UserInputError) as e:
        parse_json(text, "the config", "a JSON object")
    msg = str(e.value)
    assert msg.startswith("the config is not valid JSON (") and why in msg and msg.endswith("accepted: a JSON object")
    assert "\n" not in msg


def test_read_json_names_unreadable_and_non_utf8_files(tmp_path):
    (tmp_path / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(UserInputError, match="is not UTF-8 text"):
        read_json(tmp_path / "latin1.json")
    with pytest.raises(UserInputError, match="cannot be read"):
        read_json(tmp_path)                                  # a folder
    assert read_json(_write(tmp_path, "ok.json", '{"a": 1}')) == {"a": 1}


def _write(folder, name, text):
    p = folder / name
    p.write_text(text)
    return p


def _model_dir(tmp_path, text):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(text)
    return d


HUGE_CONFIG = json.dumps(PRESET_CONFIGS["glm-5"])[:-1] + ', "huge": ' + HUGE_INT + "}"


@pytest.mark.parametrize("argv", [
    ["diagnose", "--model", "{cfg}"],
    ["diagnose", "--model", "{dir}"],
    ["launch", "--model", "{dir}"],
    ["bench", "serve", "--model", "{dir}"],
    ["launch", "--model", "{good}", "--throughput", DEEP],
    ["launch", "--model", "{good}", "--speculative-config", DEEP],
    ["bench", "serve", "--model", "{good}", "--speculative-config", '{"num_speculative_tokens": ' + HUGE_INT + "}"],
])
def test_commands_refuse_json_the_decoder_refuses_in_one_line(tmp_path, capsys, argv):
    d = _model_dir(tmp_path, HUGE_CONFIG)
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text(json.dumps(PRESET_CONFIGS["glm-5"]))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    names = {"{cfg}": d / "config.json", "{dir}": d, "{good}": good}
    args = [str(names.get(a, a)) for a in argv]
    assert cli.main(args) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "is not valid JSON" in lines[0] and "Traceback" not in err, err[-2000:]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before     # nothing written


_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)          # a write past the limit then fails with EFBIG (errno 27)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from sparse_mla import cli
sys.exit(cli.main({argv!r}))
"""


@pytest.mark.parametrize("what", ["make-checkpoint", "make-checkpoint --gguf", "records table --update"])
def test_a_write_the_system_refuses_is_one_line_and_leaves_nothing(tmp_path, what):
    """A file-size limit (as a full disk, an OSError while writing): each writer gives one line naming the path and
    the system's words, exit 2, no traceback, nothing half-written (safetensors' own error wraps the OSError)."""
    import subprocess
    import sys

    if what.startswith("make-checkpoint"):
        argv = ["make-checkpoint", str(tmp_path / "ck"), "--index-topk", "128"]
        argv += ["--gguf", "Q8_0"] if "gguf" in what else []
        limit = 100_000 if "gguf" not in what else 60_000_000
    else:
        doc = tmp_path / "doc.md"
        doc.write_text("x\n" + "<!-- records-table: proof results -->\n<!-- /records-table -->\n")
        (tmp_path / "results").mkdir()
        argv, limit = ["records", "table", "--update", str(doc)], 10
    before = sorted(p.name for p in tmp_path.iterdir())
    r = subprocess.run([sys.executable, "-c", _LIMITED.format(limit=limit, argv=argv)], capture_output=True,
                       text=True, timeout=600)
    err = [ln for ln in r.stderr.strip().splitlines() if "Warning" not in ln and "warn(" not in ln]
    assert r.returncode == 2, r.stderr[-2000:]
    assert len(err) == 1 and "failed:" in err[0] and "nothing was left behind" in err[0], err
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before       # no checkpoint, no temporary file


def test_a_command_that_cannot_start_for_a_file_size_limit_is_one_line():
    """``ulimit -f 0``: a command imports torch, whose dependencies ask for a temporary folder, which the system
    refuses: one line naming it, exit 2, no traceback; ``sparse-mla --help`` imports neither and still answers."""
    import subprocess
    import sys

    code = _LIMITED.format(limit=0, argv=["diagnose", "--model", "glm-5"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("sparse-mla: error: cannot start:") and "Traceback" not in out.stderr, lines
    out = subprocess.run([sys.executable, "-c", _LIMITED.format(limit=0, argv=["--help"])], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "usage: sparse-mla" in out.stdout, out.stderr[-2000:]


def test_make_dir_names_a_folder_the_system_refuses_and_leaves_nothing(tmp_path, monkeypatch):
    from pathlib import Path

    from sparse_mla.files import make_dir

    assert make_dir(tmp_path / "a" / "b").is_dir()
    real = Path.mkdir

    def refuse_c(self, *a, **k):
        if self.name == "c":
            raise OSError(28, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", lambda self, parents=False, exist_ok=False: (
        [real(q, exist_ok=True) if q.name != "c" else refuse_c(q) for q in [*reversed(self.parents), self]
         if not q.exists()] if parents else refuse_c(self)))
    with pytest.raises(UserInputError, match=r"folder '.*/x/c' cannot be made \(No space left on device\); nothing "
                                             r"was left behind"):
        make_dir(tmp_path / "x" / "c")
    assert not (tmp_path / "x").exists()


def test_atomic_write_all_replaces_nothing_when_one_write_fails(tmp_path):
    """A CSV and its plot: the plot's writer fails, so the CSV keeps its old content and no temporary file stays."""
    from pathlib import Path

    from sparse_mla.files import atomic_write_all

    (tmp_path / "m.csv").write_text("old")

    def plot(tmp):
        raise RuntimeError("matplotlib could not draw")

    with pytest.raises(RuntimeError, match="could not draw"):
        atomic_write_all([(tmp_path / "m.csv", lambda t: Path(t).write_text("new")), (tmp_path / "m.png", plot)])
    assert (tmp_path / "m.csv").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["m.csv"]
    atomic_write_all([(tmp_path / "m.csv", lambda t: Path(t).write_text("new")),
                      (tmp_path / "m.png", lambda t: Path(t).write_bytes(b"png"))])
    assert (tmp_path / "m.csv").read_text() == "new" and (tmp_path / "m.png").read_bytes() == b"png"


@pytest.mark.parametrize("when", ["before the renames", "at the second rename"])
def test_atomic_write_all_puts_back_what_it_replaced_when_a_rename_fails(tmp_path, monkeypatch, when):
    """Breaker round 18's w02: the Markdown path became a folder while the matrix was computed; the CSV had been
    replaced and a hidden temporary file stayed. Now a path that is a folder is refused before any rename, and a
    rename the system refuses puts the files already replaced back; one line, nothing left behind either way."""
    from pathlib import Path

    from sparse_mla.errors import UserInputError
    from sparse_mla.files import atomic_write_all

    (tmp_path / "m.csv").write_text("old")

    def md(tmp):
        Path(tmp).write_text("new md")
        if when == "before the renames":
            (tmp_path / "m.md").mkdir()

    if when == "at the second rename":
        real = os.replace

        def refuse_md(src, dst):
            if str(dst).endswith("m.md"):
                raise OSError(28, "No space left on device", str(dst))
            return real(src, dst)

        monkeypatch.setattr(os, "replace", refuse_md)
    with pytest.raises(UserInputError, match=r"writing '.*m\.md' failed: .*; nothing was left behind"):
        atomic_write_all([(tmp_path / "m.csv", lambda t: Path(t).write_text("new")), (tmp_path / "m.md", md)])
    assert (tmp_path / "m.csv").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["m.csv", "m.md"] if when == "before the renames"
                                                          else ["m.csv"])
