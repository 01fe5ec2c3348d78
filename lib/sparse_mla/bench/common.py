"""What every benchmark record shares: the CUDA check, the header (GPU, versions, date, command) and the measured
copy bandwidth that achieved bandwidths are compared with."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import sys

from ..errors import UserInputError


def require_cuda():
    import torch

    if not torch.cuda.is_available():
        raise UserInputError("`sparse-mla bench` needs a CUDA GPU and found none; accepted: a machine with an NVIDIA "
                             "GPU (the workbook's records come from an H200, see results/)")
    return torch


def environment(command: str | None = None) -> dict:
    """GPU, versions, date and the command that produced a record: the header of every record.

    ``command`` defaults to the ``sparse-mla`` command line when called from the CLI, else to the calling function
    (a notebook kernel's own arguments are not a command anyone could re-run)."""
    import torch
    import triton

    info = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": command or cli_command(),
            "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__}
    try:
        import vllm

        info["vllm"] = vllm.__version__
    except Exception as e:  # noqa: BLE001
        info["vllm"] = f"unavailable: {e}"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_count=torch.cuda.device_count(), capability=f"{p.major}.{p.minor}",
                    sm_count=p.multi_processor_count,
                    cuda=torch.version.cuda)
    return info


def cli_command() -> str:
    argv0 = os.path.basename(sys.argv[0]) if sys.argv else ""
    if argv0 in ("sparse-mla", "__main__.py", "cli.py"):
        return " ".join(shlex.quote(a) for a in ["sparse-mla", *sys.argv[1:]])
    return "python: sparse_mla (called from " + (argv0 or "an interpreter") + ")"


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written (do_bench median)."""
    torch = require_cuda()
    import triton

    a = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=50, rep=300, return_mode="median")
    del a, b
    return 2 * nbytes / (ms * 1e-3)


def gpu_slug(name: str | None = None) -> str:
    """A file-name form of a GPU's name, for records named after the GPU that made them: ``"NVIDIA H200"`` ->
    ``"h200"``, ``"NVIDIA RTX PRO 6000 Blackwell Server Edition"`` -> ``"rtx-pro-6000-blackwell-server-edition"``.
    ``name`` defaults to GPU 0's name (needs CUDA)."""
    import re

    if name is None:
        torch = require_cuda()
        name = torch.cuda.get_device_name(0)
    words = re.sub(r"[^a-z0-9]+", " ", name.lower()).split()
    words = [w for w in words if w not in ("nvidia", "geforce", "tesla")]
    return "-".join(words) or "gpu"
