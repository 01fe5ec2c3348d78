"""The chain's Jupyter kernel, quiet when the run is interrupted.

A kernel is a process of its own that writes to the terminal it was started from. Stopped in the middle of a cell
(``sparse-mla run`` receives Ctrl-C or SIGTERM), it dies writing a ZMQ traceback there, and nbclient's abandoned task
logs a ``DeadKernelError`` traceback at exit -- noise around the one line the run prints. Here:

* :class:`QuietKernelManager` (nbclient's ``kernel_manager_class``) starts the kernel with its standard error on a
  pipe that a thread copies to ours line by line, dropping jupyter_client's "running over TCP without encryption"
  warning (the kernel talks to this process only, over the loopback) and everything once the kernel is being shut
  down (after the last cell, a cell timeout, an interruption);
* :func:`interruptible` marks the run interrupted on SIGINT/SIGTERM before unwinding as ``KeyboardInterrupt`` (so the
  copying stops before the kernel is shut down), and then silences asyncio's "exception was never retrieved" log.

Anything else the kernel process writes (a crash at start, a library writing to file descriptor 2) still reaches
the terminal.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import threading

from jupyter_client.manager import AsyncKernelManager

INTERRUPTED = threading.Event()
#: kernel standard-error lines that are tool noise, not the notebook's (matched as substrings)
NOISE = ("Kernel is running over TCP without encryption",)


def _copy(stream, shut: threading.Event) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "backslashreplace")
        if not (shut.is_set() or INTERRUPTED.is_set()) and not any(n in line for n in NOISE):
            sys.stderr.write(line)
            sys.stderr.flush()
    stream.close()


class QuietKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel's standard error passes through :func:`_copy` (module docstring) until the
    kernel is shut down: what a kernel writes while nbclient stops it (after the last cell, a cell timeout or an
    interruption) is its dying, not the notebook's."""

    async def _async_launch_kernel(self, kernel_cmd, **kw) -> None:
        self._shut = threading.Event()
        kw["stderr"] = subprocess.PIPE
        await super()._async_launch_kernel(kernel_cmd, **kw)
        threading.Thread(target=_copy, args=(self.provisioner.process.stderr, self._shut), daemon=True,
                         name="sparse-mla-kernel-stderr").start()

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        if getattr(self, "_shut", None) is not None:
            self._shut.set()
        await super()._async_shutdown_kernel(now=now, restart=restart)

    _launch_kernel = _async_launch_kernel
    shutdown_kernel = _async_shutdown_kernel


def _interrupt(signum, frame):
    INTERRUPTED.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible():
    """While the block runs, SIGINT and SIGTERM set :data:`INTERRUPTED` and raise ``KeyboardInterrupt`` (in the main
    thread; elsewhere the handlers stay as they are); after an interruption asyncio's logger is silenced. The
    previous handlers come back on exit."""
    INTERRUPTED.clear()
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    except KeyboardInterrupt:
        INTERRUPTED.set()
        logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)    # the abandoned task's DeadKernelError
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
