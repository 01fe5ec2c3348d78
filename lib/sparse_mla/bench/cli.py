"""``sparse-mla bench WHAT``: the GPU benchmarks, one subcommand each (``kernel``). Each writes its record (CSV, JSON,
PNG) named after the GPU that made it, into ``results/<gpu>/`` unless ``--out-dir`` says otherwise."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserInputError, writable_dir


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

    k.add_argument("--heads", type=int, nargs="+", default=list(HEADS))
    k.add_argument("--tokens", type=int, nargs="+", default=None,
                   help=f"query tokens per case (default {' '.join(map(str, TOKENS))}; with --kv-cache-dtype "
                        f"fp8_ds_mla {' '.join(map(str, FP8_TOKENS))})")
    k.add_argument("--kv-cache-dtype", default="auto", metavar="{auto,fp8_ds_mla}",
                   help="latent cache format: auto (bf16, 1152 B/token) or fp8_ds_mla (656 B/token; records "
                        "bench_kernel_fp8_ds_mla_<gpu>.*)")
    k.add_argument("--cache-tokens", type=int, default=128 * 1024)
    k.add_argument("--sweep", action="store_true", help="also time a grid of launch configurations")
    k.add_argument("--quick", action="store_true", help="shorter timing repetitions")
    k.add_argument("--configs", default=None, metavar="BH,BN,BDV,WARPS,STAGES;...",
                   help="launch configurations for --sweep (default: the built-in grids)")
    k.add_argument("--no-check", action="store_true", help="skip the correctness pass")
    k.add_argument("--compare-launch", action="store_true",
                   help="also time the previous launch choice (the H200-tuned constants, launch='v3') in each case")
    _record_args(k)
    k.set_defaults(func=_kernel_cli)


def _record_args(p) -> None:
    p.add_argument("--tag", default=None,
                   help="suffix of the record files (default: this GPU's name, e.g. h200)")
    p.add_argument("--out-dir", type=Path, default=None, help="folder of the records (default results/<gpu>)")


def record_place(args) -> tuple[Path, str]:
    """``(out_dir, tag)`` for a benchmark record: both default to this GPU's name (:func:`.common.gpu_slug`), so a
    record made on an RTX PRO 6000 never lands under an H200's name. Checked before any benchmark runs."""
    from .common import gpu_slug, require_cuda

    require_cuda()
    slug = gpu_slug()
    tag = slug if args.tag is None else str(args.tag)
    if not tag or not all(c.isalnum() or c in "-_." for c in tag) or tag.startswith("."):
        raise UserInputError(f"--tag {tag!r} is not accepted; accepted: letters, digits, '-', '_' and '.' (default: the "
                             f"GPU's name, here {slug!r})")
    out_dir = Path("results") / slug if args.out_dir is None else args.out_dir
    return writable_dir(out_dir, "--out-dir"), tag


def _kernel_cli(args) -> int:
    from .kernel import TOPK, run_bench

    from ..kernels import KV_CACHE_DTYPES

    if args.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise UserInputError(f"--kv-cache-dtype {args.kv_cache_dtype!r} is not accepted; accepted: "
                             f"{', '.join(KV_CACHE_DTYPES)}")
    for name in ("heads", "tokens"):
        bad = [v for v in getattr(args, name) or [] if v < 1]
        if bad:
            raise UserInputError(f"--{name} {bad[0]} is not accepted; accepted: positive integers")
    if args.cache_tokens < TOPK or args.cache_tokens % 64:
        raise UserInputError(f"--cache-tokens {args.cache_tokens} is not accepted; accepted: a multiple of 64 >= {TOPK}")
    configs = None
    if args.configs:
        try:
            configs = [tuple(int(v) for v in c.split(",")) for c in args.configs.split(";") if c.strip()]
            assert all(len(c) == 5 and min(c) > 0 for c in configs)
        except (ValueError, AssertionError):
            raise UserInputError(f"--configs {args.configs!r} is not accepted; accepted: "
                                 f"'BH,BN,BDV,WARPS,STAGES;...' e.g. '64,64,512,8,1'") from None
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
