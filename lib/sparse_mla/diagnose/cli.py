"""``sparse-mla diagnose``: one probe (text or ``--json``) or the GPU x KV-dtype matrix (``--matrix``)."""
from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable

from ..extras import require
from ..errors import UserInputError, writable_dir, writable_file
from .report import format_record
from .request import GPU_PRESETS, resolve
from .path import diagnose


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
        description="Run vLLM 0.26.0's own path for an MLA model on any target GPU (also without a GPU: a probe "
                    "platform stands in): the engine configuration as `vllm serve` builds it, the attention backend "
                    "and the KV-cache dtype it allocates, the DSA indexer's kernels, the top-k index conversion; one "
                    "verdict line per stage, every MLA backend's priority and vLLM's reasons, vLLM's own texts.")
    p.add_argument("--model", default="glm-5",
                   help="preset (glm-5, deepseek-v3.2), config.json or checkpoint directory (default glm-5)")
    p.add_argument("--capability", default=None,
                   help="major.minor (default 12.0), a GPU preset (" + ", ".join(GPU_PRESETS) + ") or local")
    p.add_argument("--kv-cache-dtype", default=None,
                   help="auto (default), bfloat16, fp8, fp8_ds_mla or another vLLM CacheDType")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (heads per rank = heads / tp; default 1)")
    p.add_argument("--backend", default=None, metavar="NAME",
                   help="what if vLLM is told --attention-backend NAME: a vLLM backend name, or TRITON_MLA_SPARSE "
                        "with --with-plugin (default: vLLM's own choice)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON record on stdout")
    p.add_argument("--matrix", action="store_true",
                   help="every GPU preset x KV dtype (auto, bfloat16, fp8, fp8_ds_mla): table on stdout, CSV and "
                        "PNG heatmap into --out-dir")
    p.add_argument("--out-dir", default=None, help="where --matrix writes its files (default ./results)")
    p.add_argument("--with-plugin", action="store_true",
                   help="register the step 4 TRITON_MLA_SPARSE backend (sparse_mla.vllm_plugin) before selecting; with "
                        "--matrix: stock and with-plugin verdicts side by side (diagnose_matrix_plugin.csv/.png)")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    quiet = _stdout_to_stderr() if args.json else contextlib.nullcontext()
    if args.matrix:
        require("sparse-mla diagnose --matrix", "pandas", "matplotlib")
        from .matrix import diagnose_matrix, write_matrix

        given = [f for f, v in (("--capability", args.capability), ("--kv-cache-dtype", args.kv_cache_dtype),
                                ("--backend", args.backend)) if v is not None]
        if given:
            raise UserInputError(f"--matrix probes every GPU preset and KV-cache dtype, so {' and '.join(given)} would "
                                 f"be ignored; accepted: --matrix without them, or {' and '.join(given)} without "
                                 f"--matrix (one probe)")
        resolve(args.model, "12.0", "auto", args.tp, args.with_plugin)
        out_dir = writable_dir("results" if args.out_dir is None else args.out_dir, "--out-dir")   # before probing
        stem = "diagnose_matrix_plugin" if args.with_plugin else "diagnose_matrix"
        for ext in ("csv", "png"):
            writable_file(out_dir / f"{stem}.{ext}", "matrix file")
        with quiet:
            df = diagnose_matrix(model=args.model, tp=args.tp, with_plugin=args.with_plugin)
            paths = write_matrix(df, out_dir)
        if args.json:
            print(json.dumps({"rows": df.to_dict(orient="records"),
                              "files": {k: str(v) for k, v in paths.items()}}, indent=2))
        else:
            print(df.to_string(index=False))
            print(f"\nwrote {paths['csv']} and {paths['png']}")
        return 0
    if args.out_dir is not None:
        raise UserInputError(f"--out-dir {args.out_dir!r} is only used with --matrix (a single probe writes no files); "
                             f"accepted: --matrix --out-dir DIR, or no --out-dir")
    with quiet:
        rec = diagnose(model=args.model, capability="12.0" if args.capability is None else args.capability,
                       kv_cache_dtype="auto" if args.kv_cache_dtype is None else args.kv_cache_dtype, tp=args.tp,
                       with_plugin=args.with_plugin, backend=args.backend)
    print(json.dumps(rec, indent=2) if args.json else format_record(rec))
    return 0
