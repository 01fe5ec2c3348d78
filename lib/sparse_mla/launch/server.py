"""``vllm serve`` as a child process: a free loopback port, a bounded wait for ``/health``, its stdout/stderr in a
log file, and the whole process group (API server, engine core, workers) always stopped -- on success, on an error,
on Ctrl-C and on SIGTERM (``sparse-mla`` turns SIGTERM into KeyboardInterrupt). Knows nothing about backends:
:func:`sparse_mla.launch.engine.serve_command` builds the command, :func:`sparse_mla.launch.engine.run_serve` and
:mod:`sparse_mla.bench.serve` use :func:`served`.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"


class ServerError(RuntimeError):
    """``vllm serve`` exited or did not become ready in time (the message names its log file)."""


@dataclass
class Server:
    """A running ``vllm serve``: its process (leader of its own process group), base URL and log file."""

    proc: subprocess.Popen
    base_url: str
    log_path: Path
    up_s: float


def free_port(host: str = HOST) -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it; the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def stop_server(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM to the server's whole process group (API server, engine core, workers), SIGKILL after ``grace_s``,
    then wait (bounded) until no process of the group is left, so that the next server finds the GPU free."""
    def group(sig) -> bool:
        try:
            os.killpg(proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    if group(signal.SIGTERM):
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            group(signal.SIGKILL)
    proc.wait()
    group(signal.SIGKILL)   # children that outlived the leader
    deadline = time.time() + 10
    while group(0) and time.time() < deadline:
        time.sleep(0.1)


def wait_ready(proc: subprocess.Popen, base_url: str, log_path: Path, timeout_s: float, poll_s: float = 0.5) -> float:
    """Seconds until ``GET base_url/health`` answers 200. Raises :class:`ServerError` if the process exits first or
    ``timeout_s`` passes."""
    t0 = time.time()
    while True:
        if proc.poll() is not None:
            raise ServerError(f"vllm serve exited with {proc.returncode} before it was ready; log: {log_path}")
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=5) as r:
                if r.status == 200:
                    return time.time() - t0
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.time() - t0 > timeout_s:
            raise ServerError(f"vllm serve not ready after {timeout_s:.0f} s; log: {log_path}")
        time.sleep(poll_s)


@contextlib.contextmanager
def served(cmd: list[str], env: dict, log_path: str | os.PathLike, port: int,
           timeout_s: float = 300.0) -> Iterator[Server]:
    """Run ``cmd`` (a :func:`serve_command`) with stdout and stderr in ``log_path``, in its own session (a Ctrl-C in
    the terminal reaches this process, which then stops the server), wait for readiness (:func:`wait_ready`) and
    yield a :class:`Server`; the server is stopped (:func:`stop_server`) however the block ends -- an error, Ctrl-C
    or SIGTERM (``sparse-mla`` turns it into KeyboardInterrupt) included."""
    log_path = Path(log_path)
    base_url = f"http://{HOST}:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        try:
            up_s = wait_ready(proc, base_url, log_path, timeout_s)
            yield Server(proc, base_url, log_path, round(up_s, 1))
        finally:
            stop_server(proc)


def collective_rpc(base_url: str, method: str, timeout_s: float = 60.0) -> list:
    """``POST base_url/collective_rpc {"method": method}``: vLLM's development API (a server started with
    ``VLLM_SERVER_DEV_MODE=1``) calls ``method`` on every worker and answers one result per worker. Raises
    :class:`ServerError` naming the status or the reply's shape where it gives none."""
    import json

    req = urllib.request.Request(f"{base_url}/collective_rpc", data=json.dumps({"method": method}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            body = json.loads(r.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError) as e:
        raise ServerError(f"collective_rpc {method!r} at {base_url}: {type(e).__name__}: {e}") from None
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list):
        raise ServerError(f"collective_rpc {method!r} at {base_url} answered {str(body)[:200]}, not {{'results': "
                          f"[...]}}")
    return results


def backend_log_lines(log_path: Path, limit: int = 20) -> list[str]:
    """The server log's lines that name an attention backend."""
    lines = [ln.strip() for ln in Path(log_path).read_text(errors="replace").splitlines()
             if "attention backend" in ln.lower() or "Using " in ln and "backend" in ln]
    return lines[:limit]
