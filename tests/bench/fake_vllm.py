#!/usr/bin/env python3
"""A stand-in for ``vllm serve`` in tests (standard library only): ``fake_vllm.py serve MODEL --port P [...]``.

Serves on 127.0.0.1:P what ``sparse_mla.launch`` and vLLM's own ``vllm bench serve`` client
(``vllm/benchmarks/lib/endpoint_request_func.py`` ``async_request_openai_completions``) use of vLLM's OpenAI server:
``GET /health`` (503 until ``FAKE_VLLM_STARTUP_S`` has passed, then 200), ``GET /v1/models``, ``POST
/v1/completions`` (``stream: true`` -> SSE chunks with ``choices[0].text`` and ``token_ids``, a final usage chunk with
``completion_tokens`` and ``[DONE]``, as vLLM's ``completion_stream_generator``; else one JSON body with
``logprobs.tokens`` as ``token_id:N``) and ``GET /metrics`` (vLLM's spec-decode counters when ``--speculative-config``
is on the command line). No ``/tokenize``: vLLM's client then keeps its own prompts ("/tokenize unavailable").

Generation is deterministic: token ``k`` of a completion is ``(h * 31 + 7 * k) % 2048``, ``h`` the sum of a token-id
prompt or the CRC-32 of a text prompt; its text is `` w0123`` (the id, four digits). With ``--attention-backend
FLASHMLA_SPARSE``, requests whose ``x-request-id`` ends in an even number (vLLM's bench numbers its requests; token-id
prompts: of even length) part from that at token 3: from there the text reads `` x0123`` (a stand-in for near-ties
between backends). A text prompt's usage carries no ``prompt_tokens`` (the client keeps its tokenizer's count).
Timing: the first token after ``FAKE_VLLM_TTFT_S``, each further one ``FAKE_VLLM_TPOT_S`` later (per backend:
``FAKE_VLLM_TPOT_S_<BACKEND>``, the ``--attention-backend`` value, e.g. ``FAKE_VLLM_TPOT_S_FLASHMLA_SPARSE``),
``FAKE_VLLM_TOKENS_PER_CHUNK`` tokens per SSE chunk (2 with ``--speculative-config``, as accepted drafts arrive).
Speculative counters: per request ``n - 1`` draft tokens in ``n - 1`` drafts, of which ``(n - 1) // 2`` accepted, at
position 0; none when ``FAKE_VLLM_NO_DRAFTS`` names the backend (or is ``1``): the counters stay at 0.

``POST /collective_rpc {"method": "sparse_mla_ran"}`` (only with ``VLLM_SERVER_DEV_MODE=1`` and the worker extension on
the command line, as vLLM): one worker's ``ran`` block for what was asked -- every attention layer on the requested
backend (``CUSTOM`` = ``TRITON_MLA_SPARSE``, none = ``FLASH_ATTN_MLA_SPARSE``), capability ``FAKE_VLLM_CAPABILITY``
(default ``SPARSE_MLA_SIMULATED_CAPABILITY``, else 9.0), our kernels compiled for it, and indexer calls by the Triton
indexer where ``SPARSE_MLA_TRITON_INDEXER=1`` (else DeepGEMM's); ``FAKE_VLLM_RAN_BACKEND`` overrides the layers'
backend (a server that ran something else). With an MTP ``--speculative-config`` (method ``mtp`` or ``*_mtp``) the
block has the drafter's layer apart, ``draft_attention``: on the config's ``attention_backend`` (vLLM's own choice,
``FLASH_ATTN_MLA_SPARSE``, where it names none), or on ``FAKE_VLLM_RAN_DRAFT_BACKEND``.

Other switches: ``FAKE_VLLM_EXIT=N`` exits with N at once; ``FAKE_VLLM_DIE_AFTER=N`` exits (status 3) when completion
request N + 1 arrives (a server that dies under load); ``FAKE_VLLM_CHILD=1`` starts a sleeping child process (like
vLLM's engine core) and prints its pid; ``FAKE_VLLM_IGNORE_TERM=1`` ignores SIGTERM. Bounded: it exits by itself after
``FAKE_VLLM_LIFETIME_S`` (default 300) seconds, and a SIGTERM or SIGKILL to its process group stops it. It prints its
argv and the indexer switch to stdout, a line to stderr, and the line vLLM logs for the CUSTOM backend.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = sys.argv[1:]
LOCK = threading.Lock()
COUNTERS = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_pos0": 0, "completions": 0}


def opt(name, default=None):
    return ARGS[ARGS.index(name) + 1] if name in ARGS else default


SPECULATIVE = opt("--speculative-config") is not None
BACKEND = opt("--attention-backend", "auto")
STARTED = time.time()
STARTUP_S = float(os.environ.get("FAKE_VLLM_STARTUP_S", "0"))
TTFT_S = float(os.environ.get("FAKE_VLLM_TTFT_S", "0.01"))
TPOT_S = float(os.environ.get(f"FAKE_VLLM_TPOT_S_{BACKEND}") or os.environ.get("FAKE_VLLM_TPOT_S", "0.002"))
NO_DRAFTS = os.environ.get("FAKE_VLLM_NO_DRAFTS") in ("1", BACKEND)
DIE_AFTER = int(os.environ.get("FAKE_VLLM_DIE_AFTER", "-1"))
PER_CHUNK = int(os.environ.get("FAKE_VLLM_TOKENS_PER_CHUNK", "2" if SPECULATIVE else "1"))


def tokens_for(prompt, n, request_id=None):
    """Token ids and their texts; FLASHMLA_SPARSE parts at token 3 (see the module docstring)."""
    base = (zlib.crc32(prompt.encode()) if isinstance(prompt, str) else sum(prompt)) * 31
    out = [(base + 7 * k) % 2048 for k in range(n)]
    texts = [f" w{t:04d}" for t in out]
    even = int(request_id.rsplit("-", 1)[-1]) % 2 == 0 if request_id and request_id[-1:].isdigit() else \
        not isinstance(prompt, str) and len(prompt) % 2 == 0
    if BACKEND == "FLASHMLA_SPARSE" and even and n > 3:
        out[3:] = [(t + 1) % 2048 for t in out[3:]]
        texts[3:] = [f" x{t:04d}" for t in out[3:]]
    return out, texts


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):  # keep the access log off stderr
        pass

    def _json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            ready = time.time() - STARTED >= STARTUP_S
            self.send_response(200 if ready else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": opt("--served-model-name", "m"), "object": "model",
                                                         "root": ARGS[1] if len(ARGS) > 1 else "m"}]})
        elif self.path == "/metrics":
            lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
                     "# TYPE vllm:num_requests_running gauge",
                     'vllm:num_requests_running{engine="0",model_name="glm5"} 0.0']
            if SPECULATIVE:
                lab = 'engine="0",model_name="glm5"'
                with LOCK:
                    c = dict(COUNTERS)
                for name, key in (("num_drafts", "drafts"), ("num_draft_tokens", "draft_tokens"),
                                  ("num_accepted_tokens", "accepted_tokens")):
                    lines += [f"# HELP vllm:spec_decode_{name}_total x",
                              f"# TYPE vllm:spec_decode_{name}_total counter",
                              f"vllm:spec_decode_{name}_total{{{lab}}} {float(c[key])}",
                              f"vllm:spec_decode_{name}_created{{{lab}}} 1.7e9"]
                lines += ["# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total x",
                          "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
                          f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} '
                          f'{float(c["accepted_pos0"])}']
            body = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json(404, {"error": self.path})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/collective_rpc" and os.environ.get("VLLM_SERVER_DEV_MODE") == "1" \
                and "--worker-extension-cls" in ARGS and req.get("method") == "sparse_mla_ran":
            return self._json(200, {"results": [ran_block()]})
        if self.path != "/v1/completions":
            return self._json(404, {"error": self.path})
        with LOCK:
            COUNTERS["completions"] += 1
            if COUNTERS["completions"] == DIE_AFTER + 1:
                print(f"FAKE_VLLM dies at completion request {DIE_AFTER + 1}", flush=True)
                os._exit(3)
        prompt, n = req["prompt"], int(req["max_tokens"])
        toks, texts = tokens_for(prompt, n, self.headers.get("x-request-id"))
        if SPECULATIVE and not NO_DRAFTS:
            with LOCK:
                COUNTERS["drafts"] += n - 1
                COUNTERS["draft_tokens"] += n - 1
                COUNTERS["accepted_tokens"] += (n - 1) // 2
                COUNTERS["accepted_pos0"] += (n - 1) // 2
        usage = {"completion_tokens": n}
        if not isinstance(prompt, str):
            usage.update(prompt_tokens=len(prompt), total_tokens=len(prompt) + n)
        head = {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": req["model"]}
        if not req.get("stream"):
            time.sleep(TTFT_S + TPOT_S * (n - 1))
            lp = {"tokens": [f"token_id:{t}" for t in toks], "token_logprobs": [-1.0 - 0.01 * t for t in toks],
                  "text_offset": list(range(n)), "top_logprobs": [{f"token_id:{t}": -1.0} for t in toks]}
            return self._json(200, {**head, "choices": [{"index": 0, "text": "".join(texts), "logprobs": lp,
                                                         "finish_reason": "length"}], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(TTFT_S)
        sent = 0
        while sent < n:
            part = toks[sent:sent + (1 if sent == 0 else PER_CHUNK)]
            text = "".join(texts[sent:sent + len(part)])
            if sent:
                time.sleep(TPOT_S * len(part))
            sent += len(part)
            choice = {"index": 0, "text": text, "logprobs": None,
                      "finish_reason": "length" if sent >= n else None, "token_ids": part}
            self.wfile.write(f"data: {json.dumps({**head, 'choices': [choice]})}\n\n".encode())
            self.wfile.flush()
        if (req.get("stream_options") or {}).get("include_usage"):
            self.wfile.write(f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def ran_block():
    cap = os.environ.get("FAKE_VLLM_CAPABILITY") or os.environ.get("SPARSE_MLA_SIMULATED_CAPABILITY") or "9.0"
    backend = os.environ.get("FAKE_VLLM_RAN_BACKEND") or {"CUSTOM": "TRITON_MLA_SPARSE",
                                                           "auto": "FLASH_ATTN_MLA_SPARSE"}.get(BACKEND, BACKEND)
    ours = backend == "TRITON_MLA_SPARSE"
    triton = os.environ.get("SPARSE_MLA_TRITON_INDEXER") == "1"
    sm = "sm" + cap.replace(".", "")
    targets = {"attention._sparse_mla_fwd_kernel": [sm]} if ours else {}
    if triton:
        targets["indexer._prefill_logits_kernel"] = [sm]
    out = {"capability": cap, "triton_targets": targets, "indexer": {"triton": 4 if triton else 0,
                                                                     "deepgemm": 0 if triton else 4},
           "attention": {backend: 2}, "indexer_cache": {"DEEPSEEK_V32_INDEXER": 2}}
    spec = json.loads(opt("--speculative-config") or "{}")
    method = str(spec.get("method") or "")
    if method == "mtp" or method.endswith("_mtp"):   # vLLM's MTPModelTypes: a drafter with attention layers
        asked = {"CUSTOM": "TRITON_MLA_SPARSE"}.get(spec.get("attention_backend"), spec.get("attention_backend"))
        out["draft_attention"] = {os.environ.get("FAKE_VLLM_RAN_DRAFT_BACKEND") or asked or "FLASH_ATTN_MLA_SPARSE": 1}
    return out


def main():
    print("FAKE_VLLM argv", json.dumps(ARGS), flush=True)
    print("FAKE_VLLM env SPARSE_MLA_TRITON_INDEXER=" + repr(os.environ.get("SPARSE_MLA_TRITON_INDEXER")) +
          " VLLM_LOGGING_LEVEL=" + repr(os.environ.get("VLLM_LOGGING_LEVEL")), flush=True)
    print("FAKE_VLLM stderr line", file=sys.stderr, flush=True)
    if BACKEND == "CUSTOM":
        print("(EngineCore pid=1) INFO [cuda.py:422] Using AttentionBackendEnum.CUSTOM backend.", flush=True)
    if os.environ.get("FAKE_VLLM_EXIT"):
        sys.exit(int(os.environ["FAKE_VLLM_EXIT"]))
    if os.environ.get("FAKE_VLLM_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lifetime = float(os.environ.get("FAKE_VLLM_LIFETIME_S", "300"))
    stop = threading.Timer(lifetime, lambda: os._exit(4))   # bounded even if nobody stops it
    stop.daemon = True
    stop.start()
    if os.environ.get("FAKE_VLLM_CHILD"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"FAKE_VLLM child pid {child.pid}", flush=True)
    server = ThreadingHTTPServer((opt("--host", "127.0.0.1"), int(opt("--port"))), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
