"""``sparse-mla bench WHAT``: the GPU benchmarks, one subcommand each (``kernel``, ``indexer``, ``serve``). Each writes its
record (CSV, JSON,
PNG) named after the GPU that made it, into ``results/<gpu>/`` unless ``--out-dir`` says otherwise."""
from __future__ import annotations

import json
from pathlib import Path

from ..extras import require
from ..errors import UserInputError, cli_int, writable_dir


def add_cli(sub) -> None:
    """Add ``sparse-mla bench`` and its subcommands."""
    p = sub.add_parser("bench", help="GPU benchmarks against vLLM's own kernels in the same run",
                       description="Benchmarks that need a CUDA GPU; each record is named after the GPU that made it "
                                   "and goes to results/<gpu>/ (e.g. results/h200/bench_kernel_h200.csv).")
    what = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    k = what.add_parser("kernel", help="the Triton sparse MLA kernel vs vLLM's FlashMLA sparse kernels",
                        description="Correctness at GLM-5 shapes and CUDA-graph timings of the Triton sparse MLA kernel "
                                    "against vLLM's FlashMLA sparse kernel in the same run: flash_mla_sparse_fwd on a "
                                    "bf16 cache, FlashMLA's fp8 sparse decode (flash_mla_with_kvcache) on an "
                                    "fp8_ds_mla cache written by vLLM's concat_and_cache_mla.")
    from .kernel import FP8_TOKENS, HEADS, TOKENS

    k.add_argument("--heads", type=cli_int, nargs="+", default=list(HEADS))
    k.add_argument("--tokens", type=cli_int, nargs="+", default=None,
                   help=f"query tokens per case (default {' '.join(map(str, TOKENS))}; with --kv-cache-dtype "
                        f"fp8_ds_mla {' '.join(map(str, FP8_TOKENS))})")
    k.add_argument("--kv-cache-dtype", default="auto", metavar="{auto,fp8_ds_mla}",
                   help="latent cache format: auto (bf16, 1152 B/token) or fp8_ds_mla (656 B/token; records "
                        "bench_kernel_fp8_ds_mla_<gpu>.*)")
    k.add_argument("--cache-tokens", type=cli_int, default=128 * 1024)
    k.add_argument("--sweep", action="store_true", help="also time a grid of launch configurations")
    k.add_argument("--quick", action="store_true", help="shorter timing repetitions")
    k.add_argument("--configs", default=None, metavar="BH,BN,BDV,WARPS,STAGES;...",
                   help="launch configurations for --sweep (default: the built-in grids)")
    k.add_argument("--no-check", action="store_true", help="skip the correctness pass")
    k.add_argument("--compare-launch", action="store_true",
                   help="also time the previous launch choice (the H200-tuned constants of bench/launch_v3.py) in each case")
    _record_args(k)
    k.set_defaults(func=_kernel_cli)
    from . import indexer as ib

    i = what.add_parser("indexer", help="the Triton DSA indexer (logits) vs DeepGEMM's",
                        description="Correctness and CUDA-graph timings of the Triton DSA indexer logits (paged decode "
                                    "and prefill) against DeepGEMM's in the same run; GB/s, TFLOP/s, copy bandwidth.")
    i.add_argument("--heads", type=cli_int, nargs="+", default=list(ib.HEADS), help="index_n_heads (GLM-5 32, V3.2 64)")
    i.add_argument("--batches", type=cli_int, nargs="+", default=list(ib.BATCHES), help="decode batch sizes")
    i.add_argument("--contexts", type=cli_int, nargs="+", default=None,
                   help=f"decode context lengths (default {' '.join(map(str, ib.CONTEXTS))}; --quick: "
                        f"{' '.join(map(str, ib.QUICK_CONTEXTS))})")
    i.add_argument("--prefill", nargs="+", default=None, metavar="MxN",
                   help="prefill shapes, queries x keys (default " + " ".join(f"{m}x{n}" for m, n in ib.PREFILL) + ")")
    i.add_argument("--quick", action="store_true", help="fewer cases and shorter timings (under 90 s on an H200)")
    i.add_argument("--sweep", action="store_true", help="also time a few launch configurations per case")
    i.add_argument("--no-check", action="store_true", help="skip the correctness pass")
    _record_args(i)
    i.set_defaults(func=_indexer_cli)
    _add_serve(what)


def _record_args(p) -> None:
    p.add_argument("--tag", default=None,
                   help="suffix of the record files (default: this GPU's name, e.g. h200)")
    p.add_argument("--out-dir", default=None, help="folder of the records (default results/<gpu>)")


def record_place(args) -> tuple[Path, str]:
    """``(out_dir, tag)`` for a benchmark record: both default to this GPU's name (:func:`sparse_mla.records.gpu_slug`), so a
    record made on an RTX PRO 6000 never lands under an H200's name. Checked before any benchmark runs."""
    from ..records import gpu_record_dir, gpu_slug
    from .common import require_cuda

    # what the user gave first (one line naming it, GPU or not), then the GPU, whose name makes the defaults
    tag = None if args.tag is None else str(args.tag)
    if tag is not None and (not tag or not all(c.isascii() and (c.isalnum() or c in "-_.") for c in tag)
                            or tag.startswith(".")):
        raise UserInputError(f"--tag {tag!r} is not accepted; accepted: letters, digits, '-', '_' and '.', not first "
                             f"(default: the GPU's name, e.g. 'h200')")
    out_dir = None if args.out_dir is None else writable_dir(args.out_dir, "--out-dir")
    require_cuda()
    slug = gpu_slug()
    return (writable_dir(gpu_record_dir(slug), "--out-dir") if out_dir is None else out_dir), (tag or slug)


def _add_serve(what) -> None:
    from .serve import add_arguments

    s = what.add_parser("serve", help="vllm serve per backend, measured by vLLM's own `vllm bench serve`: warmed "
                                      "live servers, timed passes in rotated order, ranked only where they do not "
                                      "overlap",
                        description="Serves the model with one live `vllm serve` per run spec (started one after "
                                    "another, each warmed with one pass of the timed load), then measures timed "
                                    "passes with vLLM's own `vllm bench serve`, round by round in rotated order (A B "
                                    "C / B C A / C A B ...), one server loaded at a time: TTFT, TPOT, ITL and E2EL "
                                    "percentiles, output tokens/s. Keeps every "
                                    "repeat's vLLM result file; ranks two runs on a metric only where their ranges "
                                    "over repeats do not overlap; compares the greedy outputs across backends; with "
                                    "--speculative ngram|mtp (or --speculative-config) serves every run spec again "
                                    "with speculative decoding and records vLLM's acceptance numbers. Exits 1 when a "
                                    "server fails, a pass fails, or what ran contradicts the run spec; the record is "
                                    "written either way.")
    add_arguments(s)
    _record_args(s)
    s.set_defaults(func=_serve_cli)


def _serve_cli(args) -> int:
    require("sparse-mla bench serve", "pandas", "matplotlib")
    from .serve import cli_run

    return cli_run(args, record_place)


def check_kernel_args(args) -> list[tuple[int, ...]] | None:
    """What ``sparse-mla bench kernel`` refuses in its parsed ``args`` before it runs anything (``records check``
    asks the same of a record's command): a cache layout the kernels do not read, heads or tokens below 1, a
    ``--cache-tokens`` that is no multiple of 64 of at least the top-k, malformed ``--configs``. Sets
    ``args.kv_cache_dtype`` to the layout's name; returns the ``--configs`` tuples (None: the built-in grids).
    Raises :class:`UserInputError` naming the value and what is accepted."""
    from .kernel import TOPK

    from ..layouts import CACHE_LAYOUTS, check_kv_cache_dtype

    args.kv_cache_dtype = check_kv_cache_dtype(args.kv_cache_dtype, CACHE_LAYOUTS)
    for name in ("heads", "tokens"):
        bad = [v for v in getattr(args, name) or [] if v < 1]
        if bad:
            raise UserInputError(f"--{name} {bad[0]} is not accepted; accepted: positive integers")
    if args.cache_tokens < TOPK or args.cache_tokens % 64:
        raise UserInputError(f"--cache-tokens {args.cache_tokens} is not accepted; accepted: a multiple of 64 >= {TOPK}")
    configs = None
    if args.configs:
        try:
            configs = [tuple(cli_int(v) for v in c.split(",")) for c in args.configs.split(";") if c.strip()]
            assert all(len(c) == 5 and min(c) > 0 for c in configs)
        except (ValueError, AssertionError):
            raise UserInputError(f"--configs {args.configs!r} is not accepted; accepted: "
                                 f"'BH,BN,BDV,WARPS,STAGES;...' e.g. '64,64,512,8,1'") from None
    return configs


def _kernel_cli(args) -> int:
    require("sparse-mla bench kernel", "pandas", "matplotlib")
    from .kernel import run_bench

    configs = check_kernel_args(args)
    out_dir, tag = record_place(args)
    rec = run_bench(args.heads, args.tokens, args.cache_tokens, sweep=args.sweep, out_dir=out_dir, tag=tag,
                    quick=args.quick, sweep_configs=configs, check=not args.no_check,
                    kv_cache_dtype=args.kv_cache_dtype, compare_launch=args.compare_launch)
    import pandas as pd

    pd.set_option("display.width", 200)
    print(pd.DataFrame(rec["checks"]).to_string(index=False))
    cols = ["H", "T", "num_splits", "block_h", "block_n", "block_dv", "fp8_scales", "triton_us", "flashmla_us",
            "triton_graph_us", "flashmla_graph_us", "speedup_vs_flashmla", "speedup_vs_flashmla_graph",
            "frac_of_copy_bw", "triton_TFLOPs", "flashmla_TFLOPs", "alt_fp8_scales", "alt_graph_us",
            "speedup_default_vs_alt", "old_block_h", "old_num_splits", "old_graph_us", "speedup_new_vs_old"]
    df = pd.DataFrame(rec["bench"])
    print(df[[c for c in cols if c in df.columns]].round(3).to_string(index=False))
    print(json.dumps(rec["environment"]))
    return 0


def check_indexer_args(args) -> list[tuple[int, int]] | None:
    """What ``sparse-mla bench indexer`` refuses in its parsed ``args`` before it runs anything (``records check``
    asks the same of a record's command): heads outside 1..128, batches or contexts below 1, malformed ``--prefill``.
    Returns the ``--prefill`` shapes (None: the defaults). Raises :class:`UserInputError` naming the value."""
    for name in ("heads", "batches", "contexts"):
        bad = [v for v in (getattr(args, name) or []) if v < 1 or (name == "heads" and v > 128)]
        if bad:
            raise UserInputError(f"--{name} {bad[0]} is not accepted; accepted: positive integers"
                                 + (" up to 128" if name == "heads" else ""))
    prefill = None
    if args.prefill:
        try:
            prefill = [tuple(cli_int(v) for v in p.lower().split("x")) for p in args.prefill]
            assert all(len(p) == 2 and 1 <= p[0] <= p[1] for p in prefill)
        except (ValueError, AssertionError):
            raise UserInputError(f"--prefill {' '.join(args.prefill)!r} is not accepted; accepted: MxN shapes with "
                                 f"1 <= M <= N, e.g. 4096x32768") from None
    return prefill


def _indexer_cli(args) -> int:
    require("sparse-mla bench indexer", "pandas", "matplotlib")
    from . import indexer as ib

    prefill = check_indexer_args(args)
    out_dir, tag = record_place(args)
    rec = ib.run_bench(args.heads, args.batches, args.contexts, prefill, quick=args.quick, sweep=args.sweep,
                       check=not args.no_check, out_dir=out_dir, tag=tag)
    import pandas as pd

    pd.set_option("display.width", 250)
    cols = ["kind", "H", "B", "context", "next_n", "M", "N", "triton_us", "deepgemm_us", "sm80_path_us",
            "speed_vs_deepgemm", "frac_of_copy_bw", "triton_GBps", "triton_TFLOPs", "deepgemm_TFLOPs",
            "rel_err_vs_deepgemm", "rel_err_vs_ref"]
    df = pd.DataFrame(rec["bench"])
    print(df[[c for c in cols if c in df]].to_string(index=False))
    print(pd.DataFrame(rec["targets"]).to_string(index=False))
    print(json.dumps(rec["environment"]))
    return 0
