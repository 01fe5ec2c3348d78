"""The values a profile gives the notebooks' parameters, checked before any notebook runs (issue 47): a ``tp: -8`` or
``device: gpu`` of the right kind would otherwise run a notebook up to the cell that refuses it, and so would
``device: cuda`` on a machine whose notebooks would find no CUDA GPU (:func:`sparse_mla.machine.cuda_unavailable`,
told without initialising CUDA in this process).

Each check is the library's own where it has one (:func:`sparse_mla.diagnose.request.resolve` for a diagnosis's
model, capability, KV-cache dtype and tensor parallelism; :data:`sparse_mla.diagnose.what_to_run.MACHINES`); the
notebooks' sizes are integers within what a run could use, their seeds what ``torch.manual_seed`` takes, a
checkpoint's ``index_topk`` what ``make-checkpoint`` takes (:func:`sparse_mla.launch.checkpoint.check_index_topk`);
``out_dir`` is the run's own (``--out-dir``), the folder a profile has a notebook write (``checkpoint_dir``) must lie
inside the run's output folder (not at a file the run writes), and the record it has one read (``launch_record``)
inside ``results_dir``. Values that each pass but not together are refused as the notebook would use them: notebook
02's top-k within its cache and its tensors within this machine's memory, notebook 05's prompt within its
checkpoint's positions and longer than its top-k, notebook 01's ``machine`` the GPU its ``capability`` names. A
parameter named here by no notebook is harmless.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserInputError
from ..layouts import FP8_DS_MLA_ROW_BYTES, KV_LORA_RANK, LATENT_DIM, ROPE_DIM

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
#: notebook 02's stage 1 selects this many slots whatever ``topk`` says (its ``dense_topk``: one tile, a power of two;
#: tests/workbook/test_parameters.py reads it in the notebook)
NB02_DENSE_TOPK = 64
#: bytes per cache slot notebook 02's fp8_ds_mla section holds at once on the CPU, whatever its device: the fp32
#: latent (512) and rope (64), the 656-byte fp8_ds_mla row and its float64 decoding (576); and per (token, slot) of a
#: checked kernel run, the float64 reference's gathered row (576) beside, per head, four float64 scores (scores,
#: probabilities, masked scores, per-score errors: kernels.error_bounds.attention_limits)
NB02_SLOT_BYTES = (KV_LORA_RANK + ROPE_DIM) * 4 + FP8_DS_MLA_ROW_BYTES + LATENT_DIM * 8
NB02_ROW_BYTES, NB02_SCORE_BYTES = LATENT_DIM * 8, 4 * 8


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


#: What a notebook reads from ``results_dir`` (the committed records it shows), by its number: a ``results_dir`` a
#: profile gives must hold them (issue 47, round 8: an empty folder was accepted and notebook 02 failed in its fifth
#: cell; round 10: notebook 03, absent here, read ``../results/h200`` as holding no H200 record and said "none yet").
#: Notebook 03 reads its record on a machine without a GPU (with one it runs the benchmark instead); the others read
#: theirs whatever their other parameters. tests/workbook/test_parameters.py checks each notebook that reads
#: ``results_dir`` has an entry and names each file here.
RESULTS_READ = {"01": ("what_to_run.csv",),
                "02": ("h200/bench_kernel_h200.json", "h200/bench_kernel_h200.csv", "h200/bench_kernel_h200.png",
                       "h200/bench_kernel_sweep_h200_sweep2.csv", "h200/bench_kernel_sweep_h200_sweep3.csv"),
                "03": ("h200/bench_indexer_h200.json", "h200/bench_indexer_h200.png"),
                "04": ("h200/launch_h200_cudagraph.json", "what_to_run.csv"),
                "05": ("what_to_run.csv", "h200/bench_serve_h200_8heads.json", "h200/diagnose_vs_engine_h200.json")}


def _results_read(notebook: str, results: Path, given) -> None:
    """``results`` (the profile's ``results_dir`` ``given``, as the notebook reads it) holds what the notebook
    ``notebook`` (its file stem, ``04_register...``) reads from it (:data:`RESULTS_READ`)."""
    missing = [f for f in RESULTS_READ.get(notebook[:2], ()) if not (results / f).is_file()]
    if missing:
        above = all((results.parent / f).is_file() for f in missing)
        raise UserInputError(f"results_dir {str(given)!r} ({results}) has no {', '.join(missing)}, which the notebook "
                             f"reads; accepted: a folder of the records as results/ holds them (results/, relative to "
                             f"notebooks/)" + (f", e.g. the folder above it, {str(Path(str(given)).parent)!r}"
                                               if above else ""))


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


def _folders(given: dict, values: dict, notebooks_dir: Path, out_dir: Path, notebook: str = "",
             run_files=()) -> None:
    """A profile's folders, relative to the notebooks' folder as the notebook reads them: ``checkpoint_dir`` a folder
    any command may write (:func:`sparse_mla.errors.writable_dir`: not the package, ``lib/``, ``tests/``, ``.git``)
    inside the run's output folder ``out_dir`` (:func:`_inside_the_run`), ``results_dir`` an existing folder,
    ``launch_record`` a file in it (after ``..`` and links: ``../../../../etc/passwd`` is not)."""
    from ..errors import writable_dir

    if given.get("checkpoint_dir") is not None:
        _inside_the_run(given["checkpoint_dir"], notebooks_dir, out_dir, run_files)
    results = _as_read(values.get("results_dir", "../results"), notebooks_dir)
    if "results_dir" in given and not results.is_dir():
        raise UserInputError(f"results_dir {given['results_dir']!r} is not a folder; accepted: the folder of the "
                             f"records (results/, relative to notebooks/)")
    if "results_dir" in given:
        _results_read(notebook, results, given["results_dir"])
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


def _kernel_sizes(given: dict, values: dict) -> None:
    """Notebook 02's sizes (``tokens``, ``heads``, ``topk``, ``num_blocks``, ``block_size``) as it uses them: its
    parameters cell's rule, ``topk`` at most ``num_blocks * block_size`` (else ``make_case`` draws repeated slots, which
    vLLM never passes), also for its stage 1's :data:`NB02_DENSE_TOPK` slots; and the memory its tensors take within
    this machine's (:func:`sparse_mla.machine.host_memory_bytes`), a lower bound (:data:`NB02_SLOT_BYTES`) refused
    before the notebook allocates it (issue 47, round 8: every size at its maximum was accepted)."""
    keys = ("tokens", "heads", "topk", "num_blocks", "block_size", "device")
    if not any(k in given for k in keys) or not all(isinstance(values.get(k), int) for k in keys[:5]):
        return
    t, h, k, nb, bs = (values[k] for k in keys[:5])
    if max(k, NB02_DENSE_TOPK) > nb * bs:
        what = f"{k} that topk" if k > nb * bs else f"{NB02_DENSE_TOPK} that its stage 1 (dense, one tile)"
        raise UserInputError(f"cache of num_blocks * block_size = {nb} * {bs} = {nb * bs} slots holds fewer than the "
                             f"{what} selects per token: slots would repeat, which vLLM never passes; accepted: "
                             f"num_blocks * block_size >= topk and >= {NB02_DENSE_TOPK} (its parameters cell: topk at "
                             f"most num_blocks * block_size; defaults 8 * 16 = 128 and topk 96)")
    from ..machine import host_memory_bytes

    have = host_memory_bytes()
    cache = nb * bs * NB02_SLOT_BYTES
    check = t * k * (NB02_ROW_BYTES + h * NB02_SCORE_BYTES) if values.get("device", "cpu") == "cpu" else 0
    if have is not None and max(cache, check) > have:
        what = (f"its fp8_ds_mla section's caches of {nb * bs} slots, {NB02_SLOT_BYTES} B each" if cache >= check else
                f"the float64 reference check of tokens x topk = {t} x {k} gathered rows and {h} heads' scores")
        raise UserInputError(f"tokens {t}, heads {h}, topk {k}, num_blocks {nb}, block_size {bs} would have the "
                             f"notebook hold at least {max(cache, check) / 2 ** 30:,.1f} GiB in this machine's memory "
                             f"({what}), more than its {have / 2 ** 30:,.1f} GiB; accepted: sizes whose tensors fit "
                             f"(the defaults take about 1 MiB)")


def _prompt_fits_checkpoint(given: dict, values: dict) -> None:
    """Notebook 05's ``prompt_len`` within the ``max_position_embeddings`` of the checkpoint it makes
    (``make_checkpoint``'s default preset, :func:`sparse_mla.launch.checkpoint.preset_config`): the reference runs a
    longer prompt past the positions the model declares, which vLLM refuses (issue 47, round 8: 9000 > 8192)."""
    n = values.get("prompt_len")
    if "prompt_len" not in given or not isinstance(n, int):
        return
    import inspect

    from ..launch.checkpoint import make_checkpoint, preset_config

    preset = inspect.signature(make_checkpoint).parameters["preset"].default
    limit = preset_config(preset)["max_position_embeddings"]
    if n > limit:
        raise UserInputError(f"prompt_len {n} is longer than the max_position_embeddings {limit} of the checkpoint "
                             f"the notebook makes ({preset}): positions past it are outside the model's, and vLLM "
                             f"refuses such a prompt; accepted: prompt_len from index_topk + 1 to {limit}")


def _machine_is_the_gpu(given: dict, values: dict) -> None:
    """A ``machine`` a profile gives notebook 01 (section 8, :data:`sparse_mla.diagnose.what_to_run.MACHINES`: its
    GPU preset) and its ``capability`` (the user's GPU, sections 1-7) name the same GPU: the preset, or its
    ``major.minor`` (issue 47, round 8: ``8x H200`` with ``a100`` diagnosed one machine and answered another).
    ``local`` is not compared, nor a ``capability`` given alone: section 8 then answers its default machine (the
    table has four; an H100 user still diagnoses an H100). Likewise its ``tp`` is at most the machine's GPU count
    (round 9: ``tp: 16`` beside ``8x H200`` diagnosed 16 ranks and answered 8); a ``tp`` given alone is a setup of
    the user's own (16 GPUs on two hosts: the diagnosis is per rank), compared with no machine."""
    if "machine" not in given or not {"machine", "capability"} <= set(values):
        return
    from ..diagnose.request import parse_capability
    from ..diagnose.what_to_run import MACHINES
    from ..gpus import GPU_PRESETS

    machine, capability, tp = values["machine"], values["capability"], values.get("tp")
    if machine not in MACHINES:
        return
    gpu, count = MACHINES[machine]
    if isinstance(tp, int) and not isinstance(tp, bool) and tp > count:
        raise UserInputError(f"machine {machine!r} has {count} GPUs and tp {tp} asks for {tp} ranks: sections 1-7 "
                             f"would diagnose {tp} GPUs and section 8 answer {count}; accepted: tp from 1 to {count} "
                             f"with it")
    try:
        cap, preset = parse_capability(capability)
    except UserInputError:
        return                                  # the request check names it
    if preset == "local":
        return
    want, asked = GPU_PRESETS[gpu], f"{cap[0]}.{cap[1]}"
    if (preset or asked) != (gpu if preset else want):
        same = [m for m, (g, _) in MACHINES.items() if (g == preset if preset else GPU_PRESETS[g] == asked)]
        raise UserInputError(f"machine {machine!r} (GPU {gpu}, capability {want}) and capability {capability!r} name "
                             f"different GPUs: sections 1-7 would diagnose one and section 8 answer the other; "
                             f"accepted: capability {gpu!r} (or {want!r}) with it" +
                             (f", or machine {same[0]!r}" if same else ""))


def _inside_the_run(value, notebooks_dir: Path, out_dir: Path, run_files=()) -> None:
    """``checkpoint_dir``, where the notebook writes (and replaces) its checkpoint, a path (text) that leads inside the
    run's output folder ``out_dir``, below it (``~``, ``..`` and links followed, as ``make_checkpoint`` follows them):
    ``../params/ck`` put 199 MB into the checkout; and not at or below one of ``run_files``, the names the run itself
    writes there (:func:`sparse_mla.workbook.chain.run_files`; round 8: the notebook's own executed copy). Raises
    :class:`UserInputError` naming the value, where it leads and what is accepted."""
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
    taken = next((n for n in run_files if where == out / n or where.is_relative_to(out / n)), None)
    if taken is not None:
        raise UserInputError(f"checkpoint_dir {value!r} leads to {where}, where the run writes its own {taken}; "
                             f"accepted: a folder inside the run's output folder that no file of the run is named, "
                             f"e.g. {example!r} (tmp/ is git-ignored; relative to notebooks/), or null")


def _not_a_notebook_model(path: str, given: str) -> tuple[str, str] | None:
    """Why ``path`` (no preset; ``given`` as the notebook reads it) is no model the notebooks' ``load_model`` reads,
    and a hint to add after what is accepted; None for a file or a folder holding a ``config.json``. Issue 47: a GGUF (round 14:
    the notebooks take none), a missing path (round 15: r01, r10, r11), a folder without ``config.json`` or no
    regular file (round 16: p05, p19) were refused in load_model's words, which offer a GGUF."""
    from ..gguf.files import is_gguf

    p = Path(path)
    if is_gguf(path):
        return "is a GGUF", f"; a GGUF's diagnosis: sparse-mla diagnose --model {given}"
    if not p.exists():
        return f"is no preset and no file or folder ({path})", ""
    if p.is_dir() and not (p / "config.json").is_file():
        return f"is a folder without a config.json ({path})", ""
    if not p.is_dir() and not p.is_file():
        return f"is no regular file ({path})", ""
    return None


def _request(values: dict, notebooks_dir: Path) -> None:
    """The diagnosis request a notebook's model / tp / capability / KV-cache dtype make, checked by vLLM-free
    :func:`~sparse_mla.diagnose.request.resolve` (a model path relative to the notebooks' folder, as the notebook
    reads it; an empty one is refused as given, not read as the notebooks' folder: issue 47, round 13, p32; a preset
    in another case, ``GLM-5``, as the notebook's ``load_model`` reads it: round 14, q10). A GGUF (``DIR:QUANT``, a
    ``.gguf`` file) is refused: the notebooks read their model with :func:`sparse_mla.models.load_model`, which takes
    none (round 14: notebook 01 failed in its fifth cell, after vLLM's import noise)."""
    from ..diagnose.request import resolve
    from ..models import PRESETS, preset_key

    model = values.get("model", "glm-5")
    accepted = (f"accepted: a preset ({', '.join(PRESETS)}), a config.json or a checkpoint directory holding one, "
                f"relative to notebooks/ (the notebooks read the model with load_model)")
    if isinstance(model, str) and not model.strip():             # round 16 (p04): load_model's words offer a GGUF
        raise UserInputError(f"model {model!r} is empty; {accepted}")
    if isinstance(model, str):
        key = preset_key(model, notebooks_dir)
        model = key if key is not None else str(_as_read(model, notebooks_dir))
        why = None if key is not None else _not_a_notebook_model(model, values["model"])
        if why is not None:
            raise UserInputError(f"model {values['model']!r} {why[0]}; {accepted}{why[1]}")
    resolve(model, values.get("capability", "h200"), values.get("kv_cache_dtype", "auto"), values.get("tp", 1),
            values.get("with_plugin", False))


def check_values(profile: str, notebook: str, given: dict, defaults: dict, notebooks_dir: Path,
                 out_dir: Path | None = None, *, run_files=()) -> None:
    """Every value ``given`` (a profile's parameters of ``notebook``) that a check here names; ``defaults``: the
    notebook's own (papermill's ``inspect_notebook``, evaluated), which the request check completes ``given`` with;
    ``out_dir``: the run's output folder (default ``results/<profile>/`` beside ``notebooks_dir``, as ``sparse-mla
    run`` has it); ``run_files``: the names the run writes there (:func:`sparse_mla.workbook.chain.run_files`).

    Raises:
        UserInputError: naming the profile, the notebook, the key, the value and what is accepted.
    """
    for key, value in given.items():
        why = _one(key, value)
        if why:
            raise UserInputError(f"profile {profile!r}: {notebook}'s {key} = {value!r} is not accepted; {why}")
    try:
        values = {**defaults, **given}
        _folders(given, values, notebooks_dir,
                 notebooks_dir.parent / "results" / profile if out_dir is None else Path(out_dir), notebook, run_files)
        _prompt_beyond_topk(given, values)
        _prompt_fits_checkpoint(given, values)
        _kernel_sizes(given, values)
        _machine_is_the_gpu(given, values)
    except UserInputError as e:
        raise UserInputError(f"profile {profile!r}: {notebook}'s {e}") from None
    asked = [k for k in REQUEST if k in given]
    if asked:
        try:
            _request({**defaults, **given}, notebooks_dir)
        except UserInputError as e:
            raise UserInputError(f"profile {profile!r}: {notebook}'s {', '.join(asked)}: {e}") from None
