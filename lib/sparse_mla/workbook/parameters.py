"""The values a profile gives the notebooks' parameters, checked before any notebook runs (issue 47): a ``tp: -8`` or
``device: gpu`` of the right kind would otherwise run a notebook up to the cell that refuses it, and so would
``device: cuda`` on a machine whose notebooks would find no CUDA GPU (:func:`sparse_mla.machine.cuda_unavailable`,
told without initialising CUDA in this process).

Each check is the library's own where it has one (:func:`sparse_mla.diagnose.request.resolve` for a diagnosis's
model, capability, KV-cache dtype and tensor parallelism; :data:`sparse_mla.diagnose.what_to_run.MACHINES`); the
notebooks' sizes are integers within what a run could use, their seeds what ``torch.manual_seed`` takes, a
checkpoint's ``index_topk`` what ``make-checkpoint`` takes (:func:`sparse_mla.launch.checkpoint.check_index_topk`);
``out_dir`` is the run's own (``--out-dir``), the folder a profile has a notebook write (``checkpoint_dir``) must lie
inside the run's output folder, and the record it has one read (``launch_record``) inside ``results_dir``. A parameter
named here by no notebook is harmless.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserInputError

#: sizes of the notebooks' checks and benchmarks: integers from 1 to what a run of the model could use -- heads per
#: rank up to vLLM's MLA limit (128), top-k and index_topk up to 16 x GLM-5's 2048, a prompt up to GLM-5's
#: max_position_embeddings (202,752), caches up to 2**24 tokens
POSITIVE = {"tokens": 4096, "heads": 128, "topk": 32768, "block_size": 1024, "num_blocks": 2 ** 20,
            "index_topk": 32768, "prompt_len": 202752, "bench_cache_tokens": 2 ** 24}
#: lists of sizes: non-empty, each an integer >= 1
POSITIVE_LISTS = ("bench_heads", "bench_tokens")
#: seeds: integers >= 0, at most what ``torch.manual_seed`` / ``torch.Generator.manual_seed`` take (the notebooks seed
#: torch only; a larger one fails inside the notebook, "Overflow when unpacking long long")
SEEDS = ("seed",)
SEED_MAX = 2 ** 64 - 1
#: where a notebook's kernels run
DEVICES = ("cpu", "cuda")
#: the parameters a diagnosis request is made of (request.resolve checks them together)
REQUEST = ("model", "tp", "capability", "kv_cache_dtype", "with_plugin")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _one(key: str, value) -> str | None:
    """Why ``value`` is refused for ``key`` (the accepted values named), or None."""
    if key in POSITIVE and not (_is_int(value) and 1 <= value <= POSITIVE[key]):
        return f"accepted: an integer from 1 to {POSITIVE[key]}"
    if key in POSITIVE_LISTS and not (isinstance(value, list) and value and all(_is_int(v) and v >= 1 for v in value)):
        return "accepted: a non-empty list of integers >= 1"
    if key in SEEDS and not (_is_int(value) and 0 <= value <= SEED_MAX):
        return f"accepted: an integer >= 0 and at most {SEED_MAX} (2**64 - 1, the largest seed torch.manual_seed takes)"
    if key == "index_topk":
        from ..launch.checkpoint import check_index_topk

        try:
            check_index_topk(value)         # the notebook makes its checkpoint with it: make-checkpoint's own rule
        except UserInputError as e:
            return f"make-checkpoint's rule: {e}"
    if key == "out_dir":
        return "set by sparse-mla run itself; accepted: sparse-mla run --out-dir DIR"
    if key == "device" and value not in DEVICES:
        return f"accepted: {', '.join(DEVICES)}"
    if key == "device" and value == "cuda":
        from ..machine import cuda_unavailable

        why = cuda_unavailable()
        if why:
            return f"this machine {why}, and the notebook would fail inside; accepted on this machine: cpu"
    if key == "machine":
        from ..diagnose.what_to_run import MACHINES

        if value not in MACHINES:
            return f"accepted: {', '.join(MACHINES)}"
    return None


def _as_read(value, notebooks_dir: Path) -> Path:
    """A path as the notebook reads it: relative to the notebooks' folder unless absolute."""
    return Path(str(value)) if Path(str(value)).is_absolute() else notebooks_dir / str(value)


#: What a notebook reads from ``results_dir`` whatever its other parameters (the committed records it shows), by its
#: number: a ``results_dir`` a profile gives must hold them (issue 47, round 8: an empty folder was accepted and
#: notebook 02 failed in its fifth cell).
RESULTS_READ = {"01": ("what_to_run.csv",),
                "02": ("h200/bench_kernel_h200.json", "h200/bench_kernel_h200.csv", "h200/bench_kernel_h200.png"),
                "04": ("h200/launch_h200_cudagraph.json", "what_to_run.csv"),
                "05": ("what_to_run.csv", "h200/bench_serve_h200_8heads.json", "h200/diagnose_vs_engine_h200.json")}


def _results_read(notebook: str, results: Path) -> None:
    """``results`` holds what the notebook ``notebook`` (its file stem, ``04_register...``) reads from it."""
    missing = [f for f in RESULTS_READ.get(notebook[:2], ()) if not (results / f).is_file()]
    if missing:
        raise UserInputError(f"results_dir {str(results)!r} has no {', '.join(missing)}, which the notebook reads; "
                             f"accepted: a folder of the records as results/ holds them (results/, relative to "
                             f"notebooks/)")


def _launch_record(given, record: Path) -> None:
    """``launch_record`` a record ``sparse-mla launch --parity`` wrote: runs beside a header whose command is it."""
    import json

    from .written import launch_command

    try:
        rec = json.loads(record.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        rec = f"{type(e).__name__}"
    if not isinstance(rec, dict) or not isinstance(rec.get("runs"), dict) or not launch_command(rec):
        raise UserInputError(f"launch_record {given!r} is no record of `sparse-mla launch --parity` (runs and its "
                             f"command in the header); accepted: one, e.g. h200/launch_h200.json")


def _folders(given: dict, values: dict, notebooks_dir: Path, out_dir: Path, notebook: str = "") -> None:
    """A profile's folders, relative to the notebooks' folder as the notebook reads them: ``checkpoint_dir`` a folder
    any command may write (:func:`sparse_mla.errors.writable_dir`: not the package, ``lib/``, ``tests/``, ``.git``)
    inside the run's output folder ``out_dir`` (:func:`_inside_the_run`), ``results_dir`` an existing folder,
    ``launch_record`` a file in it (after ``..`` and links: ``../../../../etc/passwd`` is not)."""
    from ..errors import writable_dir

    if given.get("checkpoint_dir") is not None:
        _inside_the_run(given["checkpoint_dir"], notebooks_dir, out_dir)
    results = _as_read(values.get("results_dir", "../results"), notebooks_dir)
    if "results_dir" in given and not results.is_dir():
        raise UserInputError(f"results_dir {given['results_dir']!r} is not a folder; accepted: the folder of the "
                             f"records (results/, relative to notebooks/)")
    if "results_dir" in given:
        _results_read(notebook, results)
    if "launch_record" in given:
        record = (results / str(given["launch_record"])).resolve()
        if not record.is_relative_to(results.resolve()):
            raise UserInputError(f"launch_record {given['launch_record']!r} leads to {record}, outside results_dir "
                                 f"({results.resolve()}), where the notebook reads records; accepted: a launch record "
                                 f"there (h200/launch_h200.json)")
        if not record.is_file():
            raise UserInputError(f"launch_record {given['launch_record']!r} is not a file in results_dir; accepted: a "
                                 f"launch record there (h200/launch_h200.json)")
        _launch_record(given["launch_record"], record)
    if given.get("checkpoint_dir") is not None:
        writable_dir(_as_read(given["checkpoint_dir"], notebooks_dir), "checkpoint_dir")


def _prompt_beyond_topk(given: dict, values: dict) -> None:
    """A notebook with both ``prompt_len`` and ``index_topk`` (05) shows the tokens the indexer drops: the prompt must
    be longer than the top-k (issue 47, round 8: ``prompt_len: 100`` at top-k 128 failed in its twentieth cell)."""
    n, k = values.get("prompt_len"), values.get("index_topk")
    if ("prompt_len" in given or "index_topk" in given) and isinstance(n, int) and isinstance(k, int) and n <= k:
        raise UserInputError(f"prompt_len {n} is not longer than index_topk {k}: the notebook shows the tokens the "
                             f"indexer drops, and drops none; accepted: prompt_len > index_topk (e.g. 160 and 128)")


def _inside_the_run(value, notebooks_dir: Path, out_dir: Path) -> None:
    """``checkpoint_dir``, where the notebook writes (and replaces) its checkpoint, a path (text) that leads inside the
    run's output folder ``out_dir``, below it (``~``, ``..`` and links followed, as ``make_checkpoint`` follows them):
    ``../params/ck`` put 199 MB into the checkout. Raises :class:`UserInputError` naming the value, where it leads and
    what is accepted."""
    import os

    from ..errors import expand_path

    out = expand_path(out_dir, "output directory").resolve()
    example = os.path.relpath(out / "tmp" / "ck", notebooks_dir.resolve())
    if not isinstance(value, str) or not value.strip():
        raise UserInputError(f"checkpoint_dir {value!r} is no folder path; accepted: a folder inside the run's output "
                             f"folder ({out}), e.g. {example!r} (tmp/ is git-ignored), or null (the notebook's own)")
    where = _as_read(expand_path(value, "checkpoint_dir"), notebooks_dir).resolve()
    if where == out or not where.is_relative_to(out):
        raise UserInputError(f"checkpoint_dir {value!r} leads to {where}, not inside the run's output folder ({out}); "
                             f"accepted: a folder inside it, e.g. {example!r} (tmp/ is git-ignored; relative to "
                             f"notebooks/), or null (the notebook's own, <out_dir>/tmp/glm5-tiny)")


def _request(values: dict, notebooks_dir: Path) -> None:
    """The diagnosis request a notebook's model / tp / capability / KV-cache dtype make, checked by vLLM-free
    :func:`~sparse_mla.diagnose.request.resolve` (a model path relative to the notebooks' folder, as the notebook
    reads it)."""
    from ..diagnose.request import resolve
    from ..models import PRESET_CONFIGS

    model = values.get("model", "glm-5")
    if isinstance(model, str) and model not in PRESET_CONFIGS:
        model = str(_as_read(model, notebooks_dir))
    resolve(model, values.get("capability", "h200"), values.get("kv_cache_dtype", "auto"), values.get("tp", 1),
            values.get("with_plugin", False))


def check_values(profile: str, notebook: str, given: dict, defaults: dict, notebooks_dir: Path,
                 out_dir: Path | None = None) -> None:
    """Every value ``given`` (a profile's parameters of ``notebook``) that a check here names; ``defaults``: the
    notebook's own (papermill's ``inspect_notebook``, evaluated), which the request check completes ``given`` with;
    ``out_dir``: the run's output folder (default ``results/<profile>/`` beside ``notebooks_dir``, as ``sparse-mla
    run`` has it).

    Raises:
        UserInputError: naming the profile, the notebook, the key, the value and what is accepted.
    """
    for key, value in given.items():
        why = _one(key, value)
        if why:
            raise UserInputError(f"profile {profile!r}: {notebook}'s {key} = {value!r} is not accepted; {why}")
    try:
        _folders(given, {**defaults, **given}, notebooks_dir,
                 notebooks_dir.parent / "results" / profile if out_dir is None else Path(out_dir), notebook)
        _prompt_beyond_topk(given, {**defaults, **given})
    except UserInputError as e:
        raise UserInputError(f"profile {profile!r}: {notebook}'s {e}") from None
    asked = [k for k in REQUEST if k in given]
    if asked:
        try:
            _request({**defaults, **given}, notebooks_dir)
        except UserInputError as e:
            raise UserInputError(f"profile {profile!r}: {notebook}'s {', '.join(asked)}: {e}") from None
