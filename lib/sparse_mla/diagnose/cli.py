"""``sparse-mla diagnose``: one probe (text or ``--json``), the GPU x KV-dtype matrix (``--matrix``), the matrix of
what fits in memory (``--memory-matrix``) or what to run on the workbook's machines (``--what-to-run``)."""
from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable

from ..extras import require
from ..errors import UserInputError, cli_int, writable_dir, writable_file
from .matrix import MEMORY_MATRIX_GPUS, MEMORY_MATRIX_MODELS, MEMORY_MATRIX_QUANTIZATIONS
from ..vllm_lines import tested_text
from .report import format_record
from .request import GPU_PRESETS, QUANTIZATIONS, resolve
from .path import diagnose

_MEMORY_OPTIONS = ("quantization", "gpu_memory_gib", "gpu_memory_utilization", "max_model_len", "cpu_offload_gb")
#: A GGUF model's config and tokenizer folders: one probe only (the tables take the config beside the GGUF).
_GGUF_OPTIONS = ("hf_config_path", "tokenizer")


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterable[None]:
    """Send everything written to stdout (Python and C level) to stderr, so that stdout carries one JSON document."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    saved = os.dup(fd) if fd is not None else None
    try:
        if fd is not None:
            sys.stderr.flush()
            os.dup2(sys.stderr.fileno(), fd)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)


def add_cli(subparsers) -> None:
    """Add ``sparse-mla diagnose``."""
    p = subparsers.add_parser(
        "diagnose", help="what vLLM would do with a DSA model on a GPU: config, attention, KV cache, indexer, kernel",
        description=f"Run the installed vLLM's own path ({tested_text()}) for an MLA model on any target GPU "
                    "(also without a GPU: a probe platform stands in): the engine configuration as `vllm serve` "
                    "builds it, the attention backend and the KV-cache dtype it allocates, the DSA indexer's kernels, "
                    "the top-k index conversion; one verdict line per stage, every MLA backend's priority and "
                    "vLLM's reasons, vLLM's own texts.")
    p.add_argument("--model", default=None,
                   help="preset (glm-5, deepseek-v3.2), config.json, checkpoint directory or GGUF (FILE.gguf, any "
                        "shard, DIR:QUANT) (default glm-5); GLM-5.3-Flash (make-checkpoint --preset glm-5.3-flash) is "
                        "diagnosed under vLLM 0.33 and 0.34")
    p.add_argument("--hf-config-path", default=None, metavar="DIR",
                   help="with a GGUF --model: the folder holding its config.json, as vllm serve takes it (default: "
                        "the GGUF's folder)")
    p.add_argument("--tokenizer", default=None, metavar="DIR",
                   help="with a GGUF --model: its tokenizer's folder, as vllm serve takes it (vllm-gguf-plugin also "
                        "reads the config from it without --hf-config-path)")
    p.add_argument("--capability", default=None,
                   help="major.minor (default 12.0), a GPU preset (" + ", ".join(GPU_PRESETS) + ") or local")
    p.add_argument("--kv-cache-dtype", default=None,
                   help="auto (default), bfloat16, fp8, fp8_ds_mla or another vLLM CacheDType")
    p.add_argument("--tp", type=cli_int, default=None,
                   help="tensor-parallel size (heads per rank = heads / tp; default 1, with --memory-matrix 8)")
    p.add_argument("--backend", default=None, metavar="NAME",
                   help="what if vLLM is told --attention-backend NAME: a vLLM backend name, or TRITON_MLA_SPARSE "
                        "with --with-plugin (default: vLLM's own choice)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON record on stdout")
    p.add_argument("--matrix", action="store_true",
                   help="every GPU preset x KV dtype (auto, bfloat16, fp8, fp8_ds_mla): table on stdout, CSV and "
                        "PNG heatmap into --out-dir")
    p.add_argument("--out-dir", default=None,
                   help="where --matrix / --memory-matrix write their files (default ./results)")
    m = p.add_argument_group("memory stage (weights per rank, KV cache, whether max_model_len fits)")
    m.add_argument("--quantization", default=None, metavar="NAME",
                   help="the checkpoint's quantization where its config.json names none: " + ", ".join(QUANTIZATIONS)
                        + " (default bf16, unquantized)")
    m.add_argument("--gpu-memory-gib", default=None, metavar="GIB",
                   help="memory of one GPU in GiB (default: the GPU preset's; unknown for a plain major.minor)")
    m.add_argument("--gpu-memory-utilization", default=None, metavar="FRACTION",
                   help="vLLM's --gpu-memory-utilization, in (0, 1] (default: vLLM's)")
    m.add_argument("--max-model-len", default=None, metavar="TOKENS",
                   help="vLLM's --max-model-len (default: vLLM's, from the config)")
    m.add_argument("--cpu-offload-gb", default=None, metavar="GIB",
                   help="vLLM's --cpu-offload-gb: GiB of weights per GPU kept in host memory (default 0; at most "
                        "1048576). Not refused for the host's size: the memory line names the pinned host memory "
                        "it takes over all ranks (vLLM moves at most every decoder layer's weights) and says where "
                        "that is more than this machine's memory; the GPU presets name no host memory")
    m.add_argument("--memory-matrix", action="store_true",
                   help="what fits: " + " / ".join(MEMORY_MATRIX_MODELS) + " x "
                        + " / ".join(MEMORY_MATRIX_QUANTIZATIONS) + " x 8 x " + " / ".join(MEMORY_MATRIX_GPUS)
                        + " (--model, --quantization, --tp narrow it): table on stdout, "
                        "diagnose_memory_matrix.csv and .md into --out-dir")
    p.add_argument("--what-to-run", action="store_true",
                   help="for 8x RTX PRO 6000, 8x A100 80 GB, 8x RTX 4090 and 8x H200: every weights format (bf16, fp8, "
                        "nvfp4, gguf-q4_k) x KV dtype (bfloat16, fp8), stock vLLM and with the plugin -- backend, "
                        "indexer, what fits, the vllm serve line (--model narrows the model; a GLM-5.3-Flash config.json "
                        "gets its own table, bf16/fp8 weights): what_to_run.csv and .md (what_to_run_glm5next.*) into "
                        "--out-dir, the Markdown on stdout")
    p.add_argument("--with-plugin", action="store_true",
                   help="register the step 4 TRITON_MLA_SPARSE backend (sparse_mla.vllm_plugin) before selecting, "
                        "where vLLM's plugin loader would load it (else, e.g. VLLM_PLUGINS naming other plugins only: "
                        "stock vLLM's answer, its first line saying why); with --matrix: stock and with-plugin "
                        "verdicts side by side (diagnose_matrix_plugin.csv/.png)")
    p.set_defaults(func=_cli)


def _given(args, names) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n) is not None and getattr(args, n) is not False]


def _cli(args) -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    quiet = _stdout_to_stderr() if args.json else contextlib.nullcontext()
    tables = [n for n in ("matrix", "memory_matrix", "what_to_run") if getattr(args, n)]
    if len(tables) > 1:
        raise UserInputError(f"{' and '.join('--' + n.replace('_', '-') for n in tables)} are separate tables; "
                             f"accepted: one of them per command")
    if args.what_to_run:
        return _what_to_run(args, quiet)
    if args.matrix:
        return _matrix(args, quiet)
    if args.memory_matrix:
        return _memory_matrix(args, quiet)
    if args.out_dir is not None:
        raise UserInputError(f"--out-dir {args.out_dir!r} is only used with --matrix, --memory-matrix or --what-to-run "
                             f"(a single probe writes no files); accepted: --matrix --out-dir DIR, or no --out-dir")
    memory = {n: getattr(args, n) for n in _MEMORY_OPTIONS}
    with quiet:
        rec = diagnose(model="glm-5" if args.model is None else args.model,
                       capability="12.0" if args.capability is None else args.capability,
                       kv_cache_dtype="auto" if args.kv_cache_dtype is None else args.kv_cache_dtype,
                       tp=1 if args.tp is None else args.tp, with_plugin=args.with_plugin, backend=args.backend,
                       hf_config_path=args.hf_config_path, tokenizer=args.tokenizer, **memory)
    print(json.dumps(rec, indent=2) if args.json else format_record(rec))
    return 0


def _matrix(args, quiet) -> int:
    require("sparse-mla diagnose --matrix", "pandas", "matplotlib")
    from .matrix import diagnose_matrix, write_matrix

    given = _given(args, ("capability", "kv_cache_dtype", "backend", *_MEMORY_OPTIONS, *_GGUF_OPTIONS))
    if given:
        raise UserInputError(f"--matrix probes every GPU preset and KV-cache dtype, so {' and '.join(given)} would "
                             f"be ignored; accepted: --matrix without them, or {' and '.join(given)} without "
                             f"--matrix (one probe)")
    model, tp = "glm-5" if args.model is None else args.model, 1 if args.tp is None else args.tp
    resolve(model, "12.0", "auto", tp, args.with_plugin)
    out_dir = writable_dir("results" if args.out_dir is None else args.out_dir, "--out-dir")   # before probing
    stem = "diagnose_matrix_plugin" if args.with_plugin else "diagnose_matrix"
    for ext in ("csv", "png"):
        writable_file(out_dir / f"{stem}.{ext}", "matrix file")
    with quiet:
        df = diagnose_matrix(model=model, tp=tp, with_plugin=args.with_plugin)
        paths = write_matrix(df, out_dir)
    return _print_matrix(df, paths, args.json, "png")


def _print_matrix(df, paths: dict, as_json: bool, second: str) -> int:
    """A matrix on stdout (``--json``: its rows and files) and the files written (the CSV and ``second``)."""
    if as_json:
        print(json.dumps({"rows": df.to_dict(orient="records"),
                          "files": {k: str(v) for k, v in paths.items()}}, indent=2))
    else:
        print(df.to_string(index=False))
        print(f"\nwrote {paths['csv']} and {paths[second]}")
    return 0


def _memory_matrix(args, quiet) -> int:
    require("sparse-mla diagnose --memory-matrix", "pandas")
    from .matrix import MEMORY_MATRIX_STEM, memory_matrix, write_memory_matrix

    given = _given(args, ("capability", "backend", "gpu_memory_gib", "cpu_offload_gb", *_GGUF_OPTIONS))
    if given:
        raise UserInputError(f"--memory-matrix takes its GPUs from the presets {', '.join(MEMORY_MATRIX_GPUS)} with no "
                             f"offload, so {' and '.join(given)} would be ignored; accepted: --memory-matrix without "
                             f"them (--model, --quantization, --tp, --kv-cache-dtype, --gpu-memory-utilization, "
                             f"--max-model-len, --with-plugin narrow or set it), or {' and '.join(given)} without it")
    models = list(MEMORY_MATRIX_MODELS) if args.model is None else [args.model]
    quants = list(MEMORY_MATRIX_QUANTIZATIONS) if args.quantization is None else [args.quantization]
    settings = dict(kv_cache_dtype="auto" if args.kv_cache_dtype is None else args.kv_cache_dtype,
                    tp=8 if args.tp is None else args.tp, with_plugin=args.with_plugin,
                    gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len)
    out_dir = writable_dir("results" if args.out_dir is None else args.out_dir, "--out-dir")   # before probing
    for ext in ("csv", "md"):
        writable_file(out_dir / f"{MEMORY_MATRIX_STEM}.{ext}", "matrix file")
    with quiet:
        df = memory_matrix(models, quants, MEMORY_MATRIX_GPUS, **settings)   # checks every input before probing
        paths = write_memory_matrix(df, out_dir)
    return _print_matrix(df, paths, args.json, "md")


def _what_to_run(args, quiet) -> int:
    require("sparse-mla diagnose --what-to-run", "pandas")
    from . import what_to_run as wtr

    given = _given(args, ("capability", "kv_cache_dtype", "backend", "tp", "with_plugin", *_MEMORY_OPTIONS,
                           *_GGUF_OPTIONS))
    if given:
        raise UserInputError(f"--what-to-run asks every machine, weights format and KV dtype, stock and with the "
                             f"plugin, so {' and '.join(given)} would be ignored; accepted: --what-to-run with only "
                             f"--model and --out-dir, or {' and '.join(given)} without it")
    model = "glm-5" if args.model is None else args.model
    resolve(model, "12.0", "auto", 8, False)
    out_dir = writable_dir("results" if args.out_dir is None else args.out_dir, "--out-dir")   # before probing
    for ext in ("csv", "md"):
        writable_file(out_dir / f"{wtr.stem(model)}.{ext}", "what-to-run file")
    with quiet:
        df = wtr.what_to_run(model, progress=not args.json)
        paths = wtr.write(df, out_dir)
    if args.json:
        print(json.dumps({"rows": df.to_dict(orient="records"), "files": {k: str(v) for k, v in paths.items()}},
                         indent=2, default=str))
    else:
        print(wtr.markdown(df))
        print(f"wrote {paths['csv']} and {paths['md']}")
    return 0
