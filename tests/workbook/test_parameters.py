"""``sparse_mla.workbook.parameters``: a profile's values of the right kind but refused (``tp: -8``, ``device: gpu``)
stop ``sparse-mla run`` before any notebook runs, naming the notebook, the key, the value and what is accepted; the
notebooks' own defaults and the committed profiles pass."""
from __future__ import annotations

import pytest

from sparse_mla import cli
from sparse_mla.errors import UserInputError
from sparse_mla.workbook import chain
from sparse_mla.workbook.parameters import check_values


@pytest.mark.parametrize("key, value, accepted", [
    ("tokens", 0, "an integer from 1 to 4096"), ("topk", -96, "an integer from 1"), ("index_topk", 2.5, "from 1"),
    ("prompt_len", 10 ** 9, "an integer from 1 to 202752"), ("out_dir", "../lib", "sparse-mla run --out-dir"),
    ("bench_heads", [], "non-empty list"), ("bench_tokens", [1, 0], "non-empty list"), ("seed", -1, "an integer >= 0"),
    ("device", "gpu", "cpu, cuda"), ("machine", "8x H100", "8x RTX PRO 6000"),
    ("tp", -8, "num_attention_heads"), ("tp", 3, "num_attention_heads"), ("capability", "rtx-9090", "h200"),
    ("kv_cache_dtype", "fp4", "fp8_ds_mla"), ("model", "glm-6", "glm-5"),
    # the empty value by name, not read as the notebooks' folder (issue 47, breaker round 13, p32)
    ("model", "", "model '' is empty; accepted: a preset (glm-5, deepseek-v3.2)"), ("model", " ", "model ' ' is empty"),
    # a GGUF, which the notebooks' load_model does not read (breaker round 14: notebook 01 failed in its fifth cell)
    ("model", "/nowhere/GLM-5-Q4_K_M.gguf", "is a GGUF; accepted: a preset (glm-5, deepseek-v3.2), a config.json"),
    # no GGUF offered where the notebooks take none (breaker round 15, r01)
    ("model", "GLM-5 ", "model 'GLM-5 ' is no preset and no file or folder"),
    # round 16 (p05, p19): a folder without config.json, a device -- none offered a GGUF
    ("model", "/", "model '/' is a folder without a config.json (/); accepted: a preset"),
    ("model", "/dev/null", "model '/dev/null' is no regular file (/dev/null); accepted: a preset"),
])
def test_a_refused_value_names_the_notebook_key_value_and_what_is_accepted(key, value, accepted, tmp_path):
    defaults = {"model": "glm-5", "tp": 8, "capability": "rtx-pro-6000", "kv_cache_dtype": "bfloat16"}
    with pytest.raises(UserInputError) as e:
        check_values("p", "01_x", {key: value}, defaults, tmp_path)
    assert str(e.value).startswith(f"profile 'p': 01_x's {key}") and accepted in str(e.value), str(e.value)
    assert repr(value) in str(e.value) or key in REQUEST_KEYS


REQUEST_KEYS = ("tp", "capability", "kv_cache_dtype", "model")


def test_a_preset_in_another_case_passes_as_the_notebook_reads_it(tmp_path):
    """``GLM-5``: the notebook's ``load_model`` reads it as the preset where no such path is beside the notebooks
    (breaker round 14, q10: refused as '<notebooks>/GLM-5')."""
    check_values("p", "01_x", {"model": "GLM-5"}, {"model": "glm-5", "tp": 8, "capability": "h200"}, tmp_path)


def test_accepted_values_and_the_notebooks_defaults_pass(tmp_path, monkeypatch):
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)      # device: cuda where a GPU is
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    check_values("p", "nb", {"tokens": 1, "bench_heads": [8, 64], "seed": 0, "device": "cuda",
                             "machine": "8x RTX PRO 6000", "tp": 4, "results_dir": "../results"},
                 {"model": "glm-5", "capability": "rtx-pro-6000"}, chain.project_root() / "notebooks")
    root = chain.project_root()
    from papermill import inspect_notebook

    for nb in chain.discover(root / "notebooks"):
        defaults = chain._defaults(inspect_notebook(str(nb)))
        given = {k: v for k, v in defaults.items() if k != "out_dir"}        # the run's own (--out-dir)
        check_values("defaults", nb.stem, given, defaults, nb.parent)


def test_sparse_mla_run_refuses_a_negative_tp_before_any_notebook_runs(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(chain, "load_profile", lambda p: {"01_diagnose_backend_rejection": {"tp": -8}})
    assert cli.main(["run", "--profile", "cpu", "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "profile 'cpu': 01_diagnose_backend_rejection's tp: " in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_profiles_folders_are_where_the_notebook_reads_and_writes(tmp_path):
    """checkpoint_dir under the same rule as every output folder (not the package's lib/), results_dir an existing
    folder, launch_record a file in it -- refused before any notebook runs (the breaker's round on 2026-12-05)."""
    root = chain.project_root()
    nbs = root / "notebooks"
    for given, says in (({"checkpoint_dir": "../lib/ck"}, "lib"), ({"results_dir": str(tmp_path / "missing")}, "not a folder"),
                        ({"launch_record": "h200/nope.json"}, "not a file in results_dir")):
        with pytest.raises(UserInputError, match="profile 'p': 05_x's ") as e:
            check_values("p", "05_x", given, {"results_dir": "../results"}, nbs)
        assert says in str(e.value), str(e.value)
    check_values("p", "05_x", {"checkpoint_dir": str(tmp_path / "ck"), "launch_record": "h200/launch_h200.json"},
                 {"results_dir": "../results"}, nbs, out_dir=tmp_path)


@pytest.mark.parametrize("value", ["../params/ck", "../results/h200/ck", ".", "../notebooks", "../results/p", 5, ""])
def test_a_checkpoint_dir_outside_the_runs_output_folder_is_refused(value):
    """Issue 47, breaker round 7 (p08, p12, p13, p25, p26): notebook 05 writes and replaces its checkpoint at
    ``checkpoint_dir``; ``../params/ck`` put 199 MB into the checkout. Inside the run's output folder only (here the
    default, results/p/), not that folder itself."""
    nbs = chain.project_root() / "notebooks"
    with pytest.raises(UserInputError) as e:
        check_values("p", "05_x", {"checkpoint_dir": value}, {"results_dir": "../results"}, nbs)
    line = str(e.value)
    assert line.startswith(f"profile 'p': 05_x's checkpoint_dir {value!r} ") and "\n" not in line, line
    assert f"the run's output folder ({chain.project_root() / 'results' / 'p'})" in line, line
    assert "e.g. '../results/p/tmp/ck'" in line and "or null" in line, line


def test_a_checkpoint_dir_inside_the_runs_output_folder_passes_links_followed(tmp_path):
    nbs = chain.project_root() / "notebooks"
    out = tmp_path / "out"
    for ok in ("../results/p/tmp/ck", str(chain.project_root() / "results" / "p" / "ck")):
        check_values("p", "05_x", {"checkpoint_dir": ok}, {}, nbs)
    check_values("p", "05_x", {"checkpoint_dir": str(out / "tmp" / "ck")}, {}, nbs, out_dir=out)
    out.mkdir()
    (out / "away").symlink_to(tmp_path)                         # inside by name, outside where it leads
    with pytest.raises(UserInputError, match="not inside the run's output folder"):
        check_values("p", "05_x", {"checkpoint_dir": str(out / "away" / "ck")}, {}, nbs, out_dir=out)


@pytest.mark.parametrize("given, says", [
    # p09: torch.manual_seed in notebook 02 failed, "Overflow when unpacking long long"
    ({"seed": 1180591620717411303424}, "accepted: an integer >= 0 and at most 18446744073709551615"),
    ({"seed": 2 ** 64}, "at most 18446744073709551615"),
    # p14: make_checkpoint in notebook 05 refused it, after the notebook had run four cells
    ({"index_topk": 100}, "is not accepted; make-checkpoint's rule: index_topk 100 is not a positive multiple of 128"),
    ({"index_topk": 200}, "not a positive multiple of 128"),
    # p19: resolved outside results/ (and /etc/passwd is a file)
    ({"launch_record": "../../../../etc/passwd"}, "leads to /etc/passwd, outside results_dir"),
    ({"launch_record": "/etc/passwd"}, "leads to /etc/passwd, outside results_dir"),
])
def test_what_the_notebook_would_fail_on_is_refused_by_the_check_before_the_run(given, says):
    """Issue 47, breaker round 7: values the check passed and the notebook then failed on (or read outside results/)."""
    nbs = chain.project_root() / "notebooks"
    with pytest.raises(UserInputError) as e:
        check_values("p", "05_x", given, {"results_dir": "../results"}, nbs)
    assert str(e.value).startswith(f"profile 'p': 05_x's {next(iter(given))}") and says in str(e.value), str(e.value)


def test_the_largest_seed_torch_takes_and_make_checkpoints_index_topk_pass():
    import torch

    from sparse_mla.workbook.parameters import SEED_MAX

    torch.Generator().manual_seed(SEED_MAX)                     # the bound is torch's own
    with pytest.raises(ValueError):
        torch.Generator().manual_seed(SEED_MAX + 1)
    check_values("p", "05_x", {"seed": SEED_MAX, "index_topk": 256}, {}, chain.project_root() / "notebooks")


def test_sparse_mla_run_refuses_a_checkpoint_dir_in_the_checkout_before_any_notebook(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(chain, "load_profile", lambda p: {"05_launch_glm5": {"checkpoint_dir": "../params/ck"}})
    monkeypatch.setattr(chain, "_execute", lambda *a, **k: pytest.fail("a notebook ran"))
    assert cli.main(["run", "--profile", "mine", "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"not inside the run's output folder ({tmp_path / 'out'})" in err[0], err
    assert not (tmp_path / "out").exists() and not (chain.project_root() / "params" / "ck").exists()


@pytest.mark.parametrize("gpu, visible, says", [
    (False, None, "this machine has no NVIDIA GPU (no /dev/nvidiactl, /dev/nvidia0 or nvidia-smi)"),
    (True, "", "this machine hides its GPUs from CUDA (CUDA_VISIBLE_DEVICES='')"),
    (True, "-1", "CUDA_VISIBLE_DEVICES='-1'"),
])
def test_device_cuda_where_the_notebooks_find_no_gpu_is_refused_before_any_notebook(monkeypatch, capsys, tmp_path,
                                                                                     gpu, visible, says):
    """Issue 47, the verification round of 2026-12-06: a profile other than ``gpu`` saying ``device: cuda`` on a
    machine without a GPU ran notebook 02 up to its ``RuntimeError``; refused up front (exit 2), one line naming the
    notebook, the value and what this machine accepts."""
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: gpu)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(chain, "load_profile", lambda p: {"02_sparse_mla_triton_kernel": {"device": "cuda"}})
    monkeypatch.setattr(chain, "_execute", lambda *a, **k: pytest.fail("a notebook ran"))
    assert cli.main(["run", "--profile", "mine", "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "profile 'mine': 02_sparse_mla_triton_kernel's device = 'cuda' is not accepted; " \
        in err[0] and says in err[0] and err[0].endswith("accepted on this machine: cpu"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("nb, given, says", [        # issue 47, breaker round 8 (2026-12-06e)
    ("02_x", {"results_dir": "EMPTY"}, "has no h200/bench_kernel_h200.json"),
    ("01_x", {"results_dir": "EMPTY"}, "has no what_to_run.csv"),
    ("04_x", {"launch_record": "../notebooks/../results/h200/bench_serve_h200_8heads.json"},
     "is no record of `sparse-mla launch --parity`"),
    ("04_x", {"launch_record": "what_to_run.csv"}, "is no record of `sparse-mla launch --parity`"),
    ("05_x", {"prompt_len": 100}, "prompt_len 100 is not longer than index_topk 128"),
    ("05_x", {"index_topk": 256}, "prompt_len 160 is not longer than index_topk 256"),
])
def test_what_the_notebooks_read_and_show_is_checked_before_the_run(tmp_path, nb, given, says):
    """An empty ``results_dir`` (notebook 02 failed in its fifth cell), a ``launch_record`` that is no launch record
    (04: KeyError after 68 s), a prompt no longer than the top-k (05: IndexError after 98 s) were accepted."""
    nbs = chain.project_root() / "notebooks"
    (tmp_path / "empty").mkdir()
    given = {k: str(tmp_path / "empty") if v == "EMPTY" else v for k, v in given.items()}
    defaults = {"results_dir": "../results", "prompt_len": 160, "index_topk": 128}
    with pytest.raises(UserInputError, match=f"profile 'p': {nb}'s ") as e:
        check_values("p", nb, given, defaults, nbs, out_dir=tmp_path)
    assert says in str(e.value), str(e.value)
    check_values("p", nb, {"results_dir": "../results", "launch_record": "h200/launch_h200.json", "prompt_len": 129},
                 defaults, nbs, out_dir=tmp_path)             # what the committed results/ hold passes


@pytest.fixture(scope="module")
def notebook_defaults():
    """``{two-digit number: (stem, its parameters cell's defaults)}`` of the real notebooks, read once."""
    from papermill import inspect_notebook

    return {nb.stem[:2]: (nb.stem, chain._defaults(inspect_notebook(str(nb))))
            for nb in chain.discover(chain.project_root() / "notebooks")}


MAXED = {"heads": 128, "tokens": 4096, "topk": 32768, "num_blocks": 2 ** 20, "block_size": 1024}


@pytest.mark.parametrize("nb, given, says", [        # issue 47, breaker round 8 (2026-12-06e), "unclear"
    ("02", {"num_blocks": 2, "block_size": 16, "topk": 32},              # q01: stage 1's 64 slots drawn from 32
     "'s cache of num_blocks * block_size = 2 * 16 = 32 slots holds fewer than the 64 that its stage 1 (dense, one "
     "tile) selects per token: slots would repeat"),
    ("02", {"topk": 200}, "= 8 * 16 = 128 slots holds fewer than the 200 that topk selects per token"),     # q02
    ("02", {"block_size": 3, "topk": 24}, "= 8 * 3 = 24 slots holds fewer than the 64 that its stage 1"),  # q03
    ("02", MAXED, "'s tokens 4096, heads 128, topk 32768, num_blocks 1048576, block_size 1024 would have the "  # q25
                  "notebook hold at least 7,568.0 GiB in this machine's memory (its fp8_ds_mla section's caches of "
                  "1073741824 slots, 7568 B each), more than its 64.0 GiB; accepted: sizes whose tensors fit"),
    ("05", {"prompt_len": 9000}, "'s prompt_len 9000 is longer than the max_position_embeddings 8192 of the "   # q06
                                 "checkpoint the notebook makes (glm-5-tiny)"),
    ("05", {"checkpoint_dir": "OUT/05_launch_glm5.ipynb"},                                                 # q10
     "05_launch_glm5.ipynb, where the run writes its own 05_launch_glm5.ipynb; accepted: a folder inside"),
    ("05", {"checkpoint_dir": "OUT/.05_launch_glm5.running.ipynb/ck"}, "its own .05_launch_glm5.running.ipynb"),
    ("05", {"checkpoint_dir": "OUT/summary.md"}, "where the run writes its own summary.md"),
    ("01", {"machine": "8x H200", "capability": "a100"},                                                   # q15
     "'s machine '8x H200' (GPU h200, capability 9.0) and capability 'a100' name different GPUs: sections 1-7 would "
     "diagnose one and section 8 answer the other; accepted: capability 'h200' (or '9.0') with it, or machine '8x "
     "A100 80 GB'"),
    ("01", {"machine": "8x H200"}, "and capability 'rtx-pro-6000' name different GPUs"),
    ("01", {"machine": "8x A100 80 GB", "capability": "8.9"}, "accepted: capability 'a100' (or '8.0') with it, or "
                                                               "machine '8x RTX 4090'"),
    ("01", {"machine": "8x H200", "capability": "h200", "tp": 16},                 # round 9, p48 with its machine
     "'s machine '8x H200' has 8 GPUs and tp 16 asks for 16 ranks: sections 1-7 would diagnose 16 GPUs and section "
     "8 answer 8; accepted: tp from 1 to 8 with it"),
])
def test_values_the_notebook_would_mis_run_together_are_refused(notebook_defaults, monkeypatch, tmp_path, nb, given,
                                                                says):
    """Each value passes alone; together they are what the notebook would fail on or silently mis-run: top-k slots
    drawn with repeats from a smaller cache, tensors past the machine's memory, a prompt past the checkpoint's
    positions, a checkpoint made where the run writes its own notebook, a diagnosis of one GPU beside the answer for
    another machine."""
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "host_memory_bytes", lambda: 64 * 2 ** 30)
    stem, defaults = notebook_defaults[nb]
    given = {k: v.replace("OUT", str(tmp_path)) if isinstance(v, str) else v for k, v in given.items()}
    nbs = chain.project_root() / "notebooks"
    with pytest.raises(UserInputError) as e:
        check_values("p", stem, given, defaults, nbs, out_dir=tmp_path, run_files=chain.run_files(chain.discover(nbs)))
    assert str(e.value).startswith(f"profile 'p': {stem}'s ") and says in str(e.value), str(e.value)


@pytest.mark.parametrize("nb, given", [
    ("02", {"block_size": 3, "num_blocks": 32}),       # q03 held: the kernel reads global slots, any block size
    ("02", {"topk": 128}), ("02", {"num_blocks": 4, "topk": 64}),
    ("05", {"prompt_len": 8192}), ("05", {"checkpoint_dir": "OUT/tmp/05_launch_glm5.ipynb"}),
    ("01", {"capability": "h100"}),                    # alone: section 8 answers its default machine
    ("01", {"kv_cache_dtype": "fp8_e5m2", "capability": "h100"}),   # q23 held: the diagnosis shows vLLM's refusal
    ("01", {"machine": "8x H200", "capability": "9.0"}), ("01", {"machine": "8x H200", "capability": "h200"}),
    ("01", {"tp": 16}),                                # p48: alone, the user's own 16 ranks, diagnosed per rank
    ("01", {"machine": "8x H200", "capability": "h200", "tp": 4}),
])
def test_values_the_notebook_runs_as_asked_pass(notebook_defaults, monkeypatch, tmp_path, nb, given):
    import sparse_mla.machine

    monkeypatch.setattr(sparse_mla.machine, "host_memory_bytes", lambda: 64 * 2 ** 30)
    stem, defaults = notebook_defaults[nb]
    given = {k: v.replace("OUT", str(tmp_path)) if isinstance(v, str) else v for k, v in given.items()}
    nbs = chain.project_root() / "notebooks"
    check_values("p", stem, given, defaults, nbs, out_dir=tmp_path, run_files=chain.run_files(chain.discover(nbs)))


def test_notebook_02s_memory_is_bounded_where_its_check_runs(notebook_defaults, monkeypatch):
    """The float64 reference check of a kernel run lands on the CPU with ``device: cpu`` only; the fp8_ds_mla
    section's caches always (its ``torch.randn`` takes no device). Its stage 1's slot count is the notebook's own."""
    import sparse_mla.machine
    from sparse_mla.workbook.parameters import NB02_DENSE_TOPK

    stem, defaults = notebook_defaults["02"]
    source = (chain.project_root() / "notebooks" / f"{stem}.ipynb").read_text()
    assert f"dense_topk = {NB02_DENSE_TOPK} " in source
    monkeypatch.setattr(sparse_mla.machine, "host_memory_bytes", lambda: 2 ** 30)
    monkeypatch.setattr(sparse_mla.machine, "has_nvidia_gpu", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    big = {"tokens": 4096, "heads": 128, "topk": 4096, "num_blocks": 512, "block_size": 16}   # 8192 slots: 59 MiB
    with pytest.raises(UserInputError, match=r"at least 136\.0 GiB .*\(the float64 reference check of tokens x topk "
                                             r"= 4096 x 4096 gathered rows and 128 heads' scores\), more than its 1\.0"):
        check_values("p", stem, {**big, "device": "cpu"}, defaults, chain.project_root() / "notebooks")
    check_values("p", stem, {**big, "device": "cuda"}, defaults, chain.project_root() / "notebooks")


def test_sparse_mla_run_refuses_a_checkpoint_dir_at_its_own_notebook_before_any_notebook(monkeypatch, capsys,
                                                                                       tmp_path):
    out = tmp_path / "out"
    monkeypatch.setattr(chain, "load_profile",
                        lambda p: {"05_launch_glm5": {"checkpoint_dir": str(out / "05_launch_glm5.ipynb")}})
    monkeypatch.setattr(chain, "_execute", lambda *a, **k: pytest.fail("a notebook ran"))
    assert cli.main(["run", "--profile", "mine", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "where the run writes its own 05_launch_glm5.ipynb" in err[0], err
    assert not out.exists()


def test_sparse_mla_run_refuses_notebook_03s_results_dir_one_folder_too_deep(monkeypatch, capsys, tmp_path):
    """Breaker round 10 (q02): ``results_dir: ../results/h200`` was accepted; notebook 03 read results/h200/h200 and
    said "no H200 record yet" beside results/h200/bench_indexer_h200.json."""
    monkeypatch.setattr(chain, "load_profile", lambda p: {"03_dsa_indexer_triton": {"results_dir": "../results/h200"}})
    monkeypatch.setattr(chain, "_execute", lambda *a, **k: pytest.fail("a notebook ran"))
    assert cli.main(["run", "--profile", "mine", "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "profile 'mine': 03_dsa_indexer_triton's results_dir '../results/h200' (" in err[0] \
        and "has no h200/bench_indexer_h200.json, h200/bench_indexer_h200.png, which the notebook reads; accepted: " \
        in err[0] and err[0].endswith("e.g. the folder above it, '../results'"), err


def test_each_notebook_reading_results_dir_has_its_files_in_results_read():
    """A notebook whose code past its parameters cell reads ``results_dir`` names what it reads there in
    ``RESULTS_READ`` (round 10: notebook 03 had no entry); each file named is one the notebook reads."""
    import json
    import re

    from sparse_mla.workbook.parameters import RESULTS_READ

    for nb in chain.discover(chain.project_root() / "notebooks"):
        code = "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"]
                         if c["cell_type"] == "code" and "parameters" not in c["metadata"].get("tags", ()))
        assert ("results_dir" in code) == (nb.stem[:2] in RESULTS_READ), nb.name
        tails = {t.rsplit("/", 1)[-1] for t in re.findall(r'"([^"\n]+\.(?:json|csv|png))"', code)}  # file names
        names = [re.sub(r"\\\{.*?\\\}", r"[\\w.-]+", re.escape(t)) for t in tails      # an f-string's "{s}": any
                 if len(re.sub(r"\{.*?\}", "", t)) > 8]
        for f in RESULTS_READ.get(nb.stem[:2], ()):
            assert any(re.fullmatch(n, f.rsplit("/", 1)[-1]) for n in names), (nb.name, f)
