"""What one engine run is, checked before any engine starts: a **run spec** (``BACKEND`` or
``BACKEND+TRITON_DSA_INDEXER``), the backend names ``sparse-mla launch`` accepts (vLLM's CUDA sparse MLA backends
for the 576-wide MLA head, computed from vLLM's own classes, plus ours and ``CUSTOM`` as its alias), the
``--speculative-config`` passed to vLLM, and the ``SPARSE_MLA_SIMULATED_CAPABILITY`` report.

The ``+TRITON_DSA_INDEXER`` suffix runs that engine with ``SPARSE_MLA_TRITON_INDEXER=1`` in its environment (the
plugin then replaces vLLM's DeepGEMM indexer calls by the workbook's Triton indexer); without it the variable is
removed from the engine's environment, so a shell that exported it cannot switch a plain run silently.

An ``@M.m`` suffix (``TRITON_MLA_SPARSE+TRITON_DSA_INDEXER@8.0``) asks for that engine under a simulated compute
capability: its process gets ``SPARSE_MLA_SIMULATED_CAPABILITY=M.m``, which only the test harness
``tools/gpu/simulate_capability`` acts on (vLLM's platform then reports ``M.m`` and Triton generates that GPU's
code). sparse-mla simulates nothing itself: without the harness the engine sees the real GPU, its ``ran`` block says
so, and the run fails as a contradiction. Without the suffix the variable is left as the caller's environment has it.
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserInputError
from ..vllm_plugin.switches import FORCE_ENV, INDEXER_NAME

OURS = "TRITON_MLA_SPARSE"
PEERS = ("FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE")
MLA_HEAD_SIZE = 576      # kv_lora_rank 512 + qk_rope_head_dim 64: GLM-5's and DeepSeek-V3.2's absorbed MLA head
TRITON_INDEXER = INDEXER_NAME              # run-spec suffix
INDEXER_ENV = FORCE_ENV                    # what the suffix sets to "1" in the engine's environment
SIMULATED_ENV = "SPARSE_MLA_SIMULATED_CAPABILITY"
MTP_EXAMPLE = '{"method": "mtp", "num_speculative_tokens": 1}'


@dataclass(frozen=True)
class RunSpec:
    """One engine configuration of a run: an attention ``backend`` (normalised name, ``auto`` for vLLM's choice), the
    DSA ``indexer`` (``"vllm"``: vLLM's own, DeepGEMM logits; ``TRITON_DSA_INDEXER``: the workbook's) and optionally a
    simulated ``capability`` (``"8.0"``: the module docstring's ``@M.m``)."""

    backend: str
    indexer: str = "vllm"
    capability: str | None = None

    @property
    def name(self) -> str:
        return (self.backend + (f"+{TRITON_INDEXER}" if self.indexer == TRITON_INDEXER else "")
                + (f"@{self.capability}" if self.capability else ""))

    @property
    def env(self) -> dict[str, str | None]:
        """Environment changes for the engine's processes (``None`` = remove the variable)."""
        env: dict[str, str | None] = {INDEXER_ENV: "1" if self.indexer == TRITON_INDEXER else None}
        if self.capability:
            env[SIMULATED_ENV] = self.capability
        return env

    def describe(self) -> dict:
        return {"run": self.name, "backend_requested": self.backend, "indexer": self.indexer,
                **({"simulated_capability": self.capability} if self.capability else {})}


def parse_run_spec(text) -> RunSpec:
    """``BACKEND``, ``BACKEND+TRITON_DSA_INDEXER``, each optionally ``@M.m`` (any case; ``CUSTOM`` =
    ``TRITON_MLA_SPARSE``) as a :class:`RunSpec`. Raises :class:`UserInputError` naming the value for an unknown
    backend or suffix, or a capability that is not ``major.minor``."""
    accepted = f"BACKEND or BACKEND+{TRITON_INDEXER}, optionally @major.minor (a simulated capability)"
    if not isinstance(text, str):
        raise UserInputError(f"run spec {text!r} is not a name; accepted: {accepted}")
    spec, at, cap = text.partition("@")
    if at:
        from ..capability import as_capability

        try:
            major, minor = as_capability(cap.strip(), text=True)
        except UserInputError:
            raise UserInputError(f"run spec {text!r} has capability {cap.strip()!r}; accepted: {accepted}, e.g. "
                                 f"{OURS}+{TRITON_INDEXER}@8.0") from None
        cap = f"{major}.{minor}"
    head, *suffixes = [part.strip() for part in spec.split("+")]
    if any(sfx.upper() != TRITON_INDEXER for sfx in suffixes) or len(suffixes) > 1 or not head:
        raise UserInputError(f"run spec {text!r} is not accepted; accepted: {accepted} (BACKEND: "
                             f"{accepted_backends()})")
    ac = attention_config(head)
    backend = "auto" if ac is None else OURS if ac["backend"] == "CUSTOM" else ac["backend"]
    return RunSpec(backend, TRITON_INDEXER if suffixes else "vllm", cap if at else None)


def check_simulated_indexer(spec: RunSpec) -> RunSpec:
    """``spec``, where its indexer can be simulated: a simulated capability (``@M.m``) with vLLM's own indexer only
    where the plugin's default puts the Triton indexer at ``M.m`` anyway (SM80/86/89,
    :func:`sparse_mla.vllm_plugin.indexer.wanted_by_default`). Elsewhere vLLM's indexer is DeepGEMM, a CUDA library
    built for the live GPU, whose inputs vLLM then lays out for ``M.m`` (page sizes, scale formats,
    ``vllm/utils/deep_gemm.py``): such a run tests neither GPU (H100 at a simulated 12.0, 2026-12-06: the engine ran and
    left the float64 reference on the first token of a 900-token prompt, regret 1.9 nats; with the Triton indexer it
    kept the reference's tokens). Raises :class:`UserInputError` naming the run spec."""
    if spec.capability and spec.indexer == "vllm":
        from ..vllm_plugin.indexer import wanted_by_default

        if not wanted_by_default(spec.capability):
            raise UserInputError(
                f"run spec {spec.name!r} simulates capability {spec.capability} with vLLM's own indexer, which there "
                f"is DeepGEMM: a library built for the live GPU, fed as vLLM lays out inputs for {spec.capability}, "
                f"so the run would test neither GPU; accepted: {spec.backend}+{TRITON_INDEXER}@{spec.capability}, or "
                f"{spec.backend} without @ (the live GPU)")
    return spec


def normalize_backends(backends) -> tuple[str, ...]:
    """Run-spec names for a parity run (:func:`parse_run_spec`): upper-cased, stripped, duplicates dropped (order
    kept). Raises :class:`UserInputError` for a plain string, an empty list, ``auto`` or an unknown name."""
    if isinstance(backends, str) or not hasattr(backends, "__iter__"):
        raise UserInputError(f"backends {backends!r} is not a list of names; accepted: e.g. [{OURS!r}, {PEERS[0]!r}]")
    out = []
    for b in backends:
        spec = parse_run_spec(b)
        if spec.backend == "auto":
            raise UserInputError(f"backend {b!r} in a parity run names no backend (each run is compared by its "
                                 f"backend's name); accepted: {accepted_backends(auto=False)}")
        check_simulated_indexer(spec)
        if spec.name not in out:
            out.append(spec.name)
    if not out:
        raise UserInputError(f"backends {backends!r} names no backend; accepted: e.g. {OURS},{PEERS[0]}")
    return tuple(out)


@functools.lru_cache(maxsize=None)
def sparse_mla_backend_names(head_size: int = MLA_HEAD_SIZE) -> tuple[str, ...]:
    """vLLM's CUDA sparse MLA backends for an MLA head of ``head_size``: the ``AttentionBackendEnum`` members
    (``vllm/v1/attention/backends/registry.py``) named ``*MLA*SPARSE*`` without the ROCm and XPU ones, whose class
    says ``is_sparse()`` and ``supports_head_size(head_size)`` -- so DeepSeek-V4's 512-wide ``*_DSV4`` backends are
    not offered for GLM-5. A class that cannot be imported on this machine (``FLASH_ATTN_MLA_SPARSE`` without the
    FlashAttention extensions, e.g. a CPU-only vLLM) is kept if it is one of vLLM's general attention backends
    (module under ``vllm.v1.attention.backends``; vLLM judges it when an engine starts on the GPU), and left out if it
    belongs to one model (``vllm.models.*``, as the DeepSeek-V4 ones do), whose head size cannot be read here."""
    from ..diagnose.probe import quiet_logs

    with quiet_logs():   # backend modules log and warn while they import
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        out = []
        for name, member in AttentionBackendEnum.__members__.items():
            if "MLA" not in name or "SPARSE" not in name or name.startswith(("ROCM_", "XPU_")):
                continue
            try:
                cls = member.get_class()
            except Exception:  # noqa: BLE001  (ImportError, or a module that needs the GPU at import)
                if member.get_path().startswith("vllm.v1.attention.backends."):   # not a model's own backend
                    out.append(name)
                continue
            if cls.is_sparse() and cls.supports_head_size(head_size):
                out.append(name)
    return tuple(out)


def accepted_backends(auto: bool = True) -> str:
    """What :func:`attention_config` accepts, as one phrase for error messages (``auto=False``: where a backend must
    be named, e.g. a parity run's)."""
    names = ", ".join(sparse_mla_backend_names())
    return ("auto, " if auto else "") + f"{OURS} (alias CUSTOM), or one of vLLM's CUDA sparse MLA backends ({names})"


def attention_config(backend: str) -> dict | None:
    """vLLM ``attention_config`` for a backend name (``None`` = vLLM's own choice).

    Accepted: ``auto`` / ``None``, ``TRITON_MLA_SPARSE`` (ours, vLLM's ``CUSTOM`` slot; ``CUSTOM`` is the
    same backend) or one of :func:`sparse_mla_backend_names`, any case. Raises :class:`UserInputError` for another
    name -- dense ones such as ``FLASH_ATTN`` or ``TRITON_MLA`` and DeepSeek-V4's ``*_DSV4`` included: vLLM would
    reject them for a GLM-5 model only once an engine had started -- and an empty name (``--backend ""`` ran as
    ``auto``: issue 47, round 8)."""
    if backend is not None and not isinstance(backend, str):
        raise UserInputError(f"attention backend {backend!r} is not a name; accepted: {accepted_backends()}")
    if backend is None or backend.strip().lower() == "auto":
        return None
    backend = backend.strip()
    if backend.upper() in (OURS, "CUSTOM"):
        return {"backend": "CUSTOM"}
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    if backend.upper() not in sparse_mla_backend_names():
        what = (f"is not a CUDA sparse MLA backend for a {MLA_HEAD_SIZE}-wide MLA head (a DSA model's attention on an "
                f"NVIDIA GPU needs one)" if backend.upper() in AttentionBackendEnum.__members__
                else "is unknown" if backend else "names no backend")
        raise UserInputError(f"attention backend {backend!r} {what}; accepted: {accepted_backends()}")
    return {"backend": backend.upper()}


def check_speculative_config(value, model: Path | None = None) -> dict | None:
    """``--speculative-config``: a JSON object (or dict) passed unchanged to vLLM (``LLM(speculative_config=...)``,
    ``vllm serve --speculative-config``); ``None``/empty = none. For an MTP method (vLLM's ``MTPModelTypes``,
    ``vllm/config/speculative.py``) the checkpoint must have an MTP layer (``num_nextn_predict_layers`` >= 1), which
    vLLM's ``DeepSeekMTP.load_weights`` would otherwise report only after the engine started. Raises
    :class:`UserInputError` with one line."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        from ..files import parse_json

        value = parse_json(value, f"--speculative-config {value[:80]!r}", f"a JSON object, e.g. '{MTP_EXAMPLE}'")
    if not isinstance(value, dict) or not value:
        raise UserInputError(f"--speculative-config {value!r} is not accepted; accepted: a non-empty JSON object, "
                             f"e.g. '{MTP_EXAMPLE}'")
    from typing import get_args

    from vllm.config.speculative import MTPModelTypes

    if model is not None and value.get("method") in get_args(MTPModelTypes):
        from ..files import read_json

        cfg = read_json(Path(model) / "config.json")
        from ..models import text_config

        n = text_config(cfg).get("num_nextn_predict_layers") or 0
        if not isinstance(n, int) or n < 1:
            raise UserInputError(f"speculative method {value['method']!r} needs the checkpoint's MTP layer and "
                                 f"{str(Path(model) / 'config.json')!r} has num_nextn_predict_layers = {n!r}; "
                                 f"accepted: a checkpoint with one (sparse-mla make-checkpoint --mtp) or another "
                                 f"method")
    return value


def is_mtp(speculative_config: dict | None) -> bool:
    """Whether the method drafts with the checkpoint's own MTP layer (vLLM's ``MTPModelTypes``)."""
    from typing import get_args

    from vllm.config.speculative import MTPModelTypes

    return bool(speculative_config) and speculative_config.get("method") in get_args(MTPModelTypes)


#: vLLM's speculative methods that draft from the tokens alone (``SpeculativeMethod`` in ``vllm/config/speculative.py``):
#: their engines run no drafter layers.
TOKEN_ONLY_METHODS = ("ngram", "ngram_gpu", "suffix")


def speculative_config_problem(cfg: dict) -> str | None:
    """What the installed vLLM's own ``SpeculativeConfig`` (``vllm/config/speculative.py``) refuses in ``cfg``, where
    it can be asked without a GPU or a model: a ``method`` none of its ``SpeculativeMethod`` names, and for a method
    drafting from the tokens alone (:data:`TOKEN_ONLY_METHODS`) the whole config (``prompt_lookup_min`` above
    ``prompt_lookup_max``, a count below 1, a key it does not take). One line, the value and what vLLM accepts; None
    where vLLM takes it (an MTP or draft-model config is held to its method's name: the rest needs the model)."""
    from typing import get_args

    from pydantic import ValidationError
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod

    methods = get_args(SpeculativeMethod)
    if cfg.get("method") not in methods:
        return f"method {cfg.get('method')!r} is none of vLLM's; accepted: {', '.join(methods)}"
    if cfg["method"] not in TOKEN_ONLY_METHODS:
        return None
    try:
        SpeculativeConfig(**cfg)
    except (ValidationError, ValueError, TypeError) as e:
        errors = e.errors() if isinstance(e, ValidationError) else [{"msg": str(e), "loc": ()}]
        first = errors[0]
        where = ".".join(str(x) for x in first.get("loc") or ())
        return f"vLLM's SpeculativeConfig refuses it: {(where + ': ') if where else ''}{first['msg']}"
    return None


def drafter_layers(speculative_config: dict | None) -> bool | None:
    """Whether an engine given ``speculative_config`` runs drafter layers (``ran.draft_attention``): False without
    speculation or for a method of :data:`TOKEN_ONLY_METHODS`, True for an MTP method (the checkpoint's own MTP
    layers, :func:`is_mtp`), None for another drafter (a draft model of its own: not told here)."""
    if not speculative_config or speculative_config.get("method") in TOKEN_ONLY_METHODS:
        return False
    return True if is_mtp(speculative_config) else None


def with_drafter_backend(spec: RunSpec, speculative_config: dict | None) -> dict | None:
    """The speculative config an engine of ``spec`` gets: for an MTP method, the drafter's ``attention_backend`` set to
    the run's backend (``CUSTOM`` for ours) unless the config names one -- vLLM otherwise selects the drafter's
    backend on its own (``v1/spec_decode/llm_base_proposer.py`` ``_create_draft_vllm_config``: "Never inherit the
    attention backend"), and on 2026-12-01 ours ran with its MTP drafter on FLASH_ATTN_MLA_SPARSE. Other methods
    (ngram: no drafter model) and ``auto`` runs pass unchanged."""
    if not is_mtp(speculative_config) or "attention_backend" in speculative_config:
        return speculative_config
    ac = attention_config(spec.backend)
    return {**speculative_config, "attention_backend": ac["backend"]} if ac else speculative_config


def drafter_backend(spec: RunSpec, speculative_config: dict | None) -> str | None:
    """The backend the drafter's layers must run for ``spec`` (the ``draft_backend`` of a ``ran`` check): the run's
    own where :func:`with_drafter_backend` puts it there; ``None`` where no drafter or no backend is asked."""
    cfg = with_drafter_backend(spec, speculative_config)
    if not is_mtp(cfg) or not cfg.get("attention_backend"):
        return None
    name = str(cfg["attention_backend"]).upper()
    return OURS if name == "CUSTOM" else name


def simulated() -> dict | None:
    """``{"capability", "how"}`` when ``SPARSE_MLA_SIMULATED_CAPABILITY`` is set (a test harness outside this
    package makes vLLM see that compute capability in every process); ``None`` otherwise. sparse-mla itself never
    simulates anything: it only reports the variable, in every launch and serve-benchmark record."""
    cap = os.environ.get(SIMULATED_ENV)
    if cap is None:
        return None
    return {"capability": cap,
            "how": f"{SIMULATED_ENV}={cap!r} was set in this process's environment: a test harness outside "
                   f"sparse-mla (tools/gpu/simulate_capability) makes vLLM see compute capability {cap} in every "
                   f"process and Triton generate that GPU's code (TRITON_OVERRIDE_ARCH); sparse-mla reports it and "
                   f"simulates nothing; the ran block shows what the engine saw and compiled",
            "differs": SIMULATION_DIFFERS}


#: What a capability simulation on another GPU does not reproduce (the record says it; the harness's README explains).
SIMULATION_DIFFERS = ("the final SASS: ptxas assembles the simulated GPU's PTX for the live GPU",
                      "the live GPU's memory system, caches and SM count (the launch plan uses the simulated GPU's)",
                      "vLLM's own compiled CUDA kernels, built for the live GPU (where the build has no "
                      "FlashAttention 2, the dense prefill of prompts up to index_topk runs FlashAttention 3: "
                      "ran.mla_prefill shows which)",
                      "torch.cuda.get_device_capability, which reports the live GPU",
                      "timings: they are the live GPU's")


def with_simulated(rec: dict) -> dict:
    sim = simulated()
    return {**rec, "simulated": sim} if sim else rec


@contextlib.contextmanager
def patched_environ(changes: dict[str, str | None]) -> Iterator[None]:
    """Set (``str``) or remove (``None``) environment variables for the block, then restore them."""
    before = {k: os.environ.get(k) for k in changes}
    try:
        for k, v in changes.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        yield
    finally:
        for k, v in before.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
