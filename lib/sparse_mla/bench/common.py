"""What every benchmark shares: the CUDA check and the measured copy bandwidth that achieved bandwidths are compared
with (the record header and where records go: :mod:`sparse_mla.records`)."""
from __future__ import annotations

from ..errors import UserInputError


def time_ratios(row: dict, table: dict[str, tuple[str, str]]) -> dict:
    """The ratios of ``table`` (``{name: (the peer's µs, ours µs)}``) whose two times ``row`` holds, ``{name: their
    µs / ours}`` (NaN where a time is NaN: not measured); the benchmark writers' and ``records check``'s one formula
    (:data:`sparse_mla.bench.kernel.SPEEDUPS`, :data:`sparse_mla.bench.indexer.SPEEDUPS`)."""
    return {k: row[a] / row[b] for k, (a, b) in table.items() if a in row and b in row}


_BENCH_INSTEAD = "a machine with an NVIDIA GPU (the workbook's records come from an H200 and an H100, see results/)"


def require_cuda():
    """torch, once :func:`sparse_mla.machine.require_gpu` and torch agree that a CUDA GPU is here."""
    import torch

    from ..machine import require_gpu

    require_gpu("`sparse-mla bench`", _BENCH_INSTEAD)
    if not torch.cuda.is_available():   # a driver, but no device torch can use
        raise UserInputError(f"`sparse-mla bench` needs a CUDA GPU and torch sees none (torch.cuda.is_available() is "
                             f"False); accepted: {_BENCH_INSTEAD}")
    return torch


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written (do_bench median)."""
    torch = require_cuda()
    import triton

    a = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=50, rep=300, return_mode="median")
    del a, b
    return 2 * nbytes / (ms * 1e-3)
