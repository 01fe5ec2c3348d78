"""The shape of every record kind, in one place: the fields the tables and ``sparse-mla records check`` read, with
the types the project's writers give them (pydantic models, strict: ``"yes"`` is no boolean, ``"3"`` no number, a
list no mapping; fields the readers do not use may be anything).

Records are files a user may have edited, merged or truncated. :func:`problems` lists what in a record is not its
kind's shape, one line each (``"runs.X.summary.output_throughput.median is 'yes'; accepted: a number"``);
:func:`require` turns the first into one :class:`~sparse_mla.errors.UserInputError` naming the file, the field's path
and the type expected. Every field is optional here (records made before a field existed lack it); which fields a
table needs, it says itself (:func:`sparse_mla.records.common.load`'s ``needs``).

Kinds (:data:`KINDS`): the attention-kernel benchmark (``bench_kernel_*.json``), the indexer benchmark
(``bench_indexer_*.json``), the fp8 kernel variants (``fp8_where_time_goes_*.json``), an engine record
(``launch_*.json``: parity runs, one engine, a served check) and the serving benchmark (``bench_serve_*.json``). The
``ran`` block an engine writes (:mod:`sparse_mla.vllm_plugin.ran`) is :class:`Ran`.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Optional, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, StringConstraints, Tag,
                      ValidationError, create_model, model_validator)
from pydantic_core import PydanticCustomError

from ..errors import UserInputError

def _finite_or_nan(v: float) -> float:
    if math.isinf(v):
        raise ValueError("a finite number (or NaN: not measured)")
    return v


def _within(low: float, high: float, what: str):
    """A validator: ``low <= v <= high`` (NaN passes: a record's "not measured"), else ``what`` is accepted."""
    def check(v: float) -> float:
        if not math.isnan(v) and not low <= v <= high:
            raise ValueError(what)
        return v
    return check


def _power_of_two(v: int) -> int:
    if not (1 <= v <= 2 ** 16 and v & (v - 1) == 0):
        raise ValueError("a power of two from 1 to 65536")
    return v


#: A figure: an int or a float (strict: never a bool or a text), finite, or NaN (a record's "not measured").
Figure = Annotated[float, AfterValidator(_finite_or_nan)]
#: A count or a size: an integer from 0 to 2**53 (what a float still holds exactly).
Count = Annotated[int, Field(ge=0, le=2 ** 53)]
#: A time or a rate that the tables divide by: a finite number above 0.
Positive = Annotated[float, Field(gt=0), AfterValidator(_finite_or_nan)]
#: A kernel time in µs: no GPU kernel takes less than a nanosecond, and none of ours a week (or NaN: not measured).
Time = Annotated[float, AfterValidator(_within(1e-3, 1e12, "a time in µs from 0.001 to 1e12 (or NaN: not measured)"))]
#: A ratio of two times or throughputs: above 0, finite (or NaN).
Ratio = Annotated[float, AfterValidator(_within(1e-12, 1e12, "a ratio from 1e-12 to 1e12 (or NaN: not measured)"))]
#: A throughput, an error, a share: 0 or more, finite (or NaN).
NonNeg = Annotated[float, AfterValidator(_within(0.0, 1e300, "a finite number of at least 0 (or NaN: not measured)"))]
#: A Triton launch's block size or warp count as the writers' launch plans choose it: a power of two, 1 to 2**16.
PowerOfTwo = Annotated[int, AfterValidator(_power_of_two)]
#: A launch's split or stage count: 1 or more (the plan never chooses 0), at most 2**20.
Launches = Annotated[int, Field(ge=1, le=2 ** 20)]
Text = Optional[str]
Int = Optional[Count]
Num = Optional[Figure]
Flag = Optional[bool]
_CAPABILITY = r"^\d{1,2}\.\d$"
Capability = Annotated[str, StringConstraints(pattern=_CAPABILITY)]
#: A number of layers: 1 to the deepest model a config may describe (``models.UPPER_BOUNDS``' num_hidden_layers).
Layers = Annotated[int, Field(gt=0, le=1024)]
#: An engine's tokens per second: no GPU generates a billion (or NaN: not measured).
TokenRate = Annotated[float, AfterValidator(_within(0.0, 1e9, "tokens per second from 0 to 1e9 (or NaN: not measured)"))]
#: A run's time in seconds (an engine's start-up, a pass, a benchmark's wall time): 0 to 1e6 s (11 days; no run of
#: ours takes an hour), or NaN (not measured).
Seconds = Annotated[float, AfterValidator(_within(0.0, 1e6, "seconds from 0 to 1e6 (or NaN: not measured)"))]
#: A count of SMs: one GPU has at least one and no GPU of ours 1024 (an H200: 132).
SmCount = Annotated[int, Field(ge=1, le=1024)]
#: Bytes of shared memory: at least one, at most 2**31 - 1 (an H200's per SM: 233472).
SharedMemory = Annotated[int, Field(ge=1, le=2 ** 31 - 1)]
#: A log-probability: at most 0 (vLLM's logprobs are natural-log probabilities).
LogProb = Annotated[float, AfterValidator(_within(-1e9, 0.0, "a log-probability, at most 0"))]


class _Shape(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class _Written(_Shape):
    """A level of a record whose writers' keys are all known (issue 47: a failure said under a key of its own --
    ``timeout``, ``rc``, ``traceback`` -- was read by no check): its fields are every key some writer of the project
    writes there, past or present, and another key is a problem, ``no writer writes the key 'K' at PATH; accepted:
    ...`` (:func:`problems`)."""

    @model_validator(mode="before")
    @classmethod
    def _written_keys(cls, data):
        if isinstance(data, dict):
            known = {f.alias or n for n, f in cls.model_fields.items()}
            unknown = [k for k in data if k not in known]
            if unknown:
                raise PydanticCustomError("unwritten_key", "no writer writes {keys}", {
                    "keys": ("the key " if len(unknown) == 1 else "the keys ") + ", ".join(map(repr, unknown)),
                    "accepted": ", ".join(sorted(known))})
        return data


# -- the header -------------------------------------------------------------------------------------------------------

#: No record of ours is older: DeepSeek-V3.2's sparse attention (DSA) was published in 2025.
FIRST_DATE = __import__("datetime").date(2025, 1, 1)


def _iso_date(v: str) -> str:
    import datetime

    try:
        when = datetime.datetime.fromisoformat(v)
    except ValueError:
        raise ValueError("an ISO 8601 date, e.g. 2026-12-05 or 2026-12-05T13:36:46+00:00") from None
    if when.date() > datetime.date.today() + datetime.timedelta(days=1):      # written when it ran: never ahead
        raise ValueError("an ISO 8601 date no later than today")
    if when.date() < FIRST_DATE:                                              # before any DSA model or this project
        raise ValueError(f"an ISO 8601 date from {FIRST_DATE} on")
    return v


def _header_date(v: str) -> str:
    import datetime

    _iso_date(v)
    when = datetime.datetime.fromisoformat(v)
    if when.utcoffset() != datetime.timedelta(0) or when.isoformat(timespec="seconds") != v:
        raise ValueError("a date as sparse_mla.records.environment writes it: ISO 8601 in UTC to the second, e.g. "
                         "2026-12-05T13:36:46+00:00")
    return v


#: A date in ISO 8601 (a record's top-level ``date``, which the earliest records wrote by hand: ``2026-11-29``).
Date = Optional[Annotated[str, AfterValidator(_iso_date)]]
#: A header's date as :func:`sparse_mla.records.environment` writes it (``now(timezone.utc).isoformat(timespec=
#: "seconds")``): a time without a zone cannot be compared with the runs' (issue 47, round 12: b06 was proven).
HeaderDate = Optional[Annotated[str, AfterValidator(_header_date)]]
#: A git revision (7 to 40 hex digits, then anything: "(REVISION file: ...)"), or the writer's "unknown: ..." when it
#: found none.
Revision = Optional[Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{7,40}\b|unknown)")]]
#: A package's version as its ``__version__`` reads (``2.11.0+cu130``, ``3.6.0``, ``3.12.3``, CUDA's ``13.0``): digits
#: a release, a pre/dev/post release and a local label as PEP 440 writes them, nothing after; no writer of ours writes a
#: word there.
VERSION_PATTERN = r"^\d{1,4}\.\d{1,4}(\.\d{1,4})?((a|b|rc)\d+|\.(dev|post)\d+)*(\+[0-9a-z.]+)?$"
Version = Optional[Annotated[str, StringConstraints(pattern=VERSION_PATTERN)]]
#: The Pythons the project runs on, ``[first, end)``: pyproject.toml's ``requires-python`` (held equal by
#: tests/records/test_schema.py). No writer of ours ran on another.
REQUIRES_PYTHON = ((3, 11), (3, 14))


def _our_python(v: str) -> str:
    first, end = REQUIRES_PYTHON
    if not first <= tuple(int(x) for x in v.split(".")[:2]) < end:
        raise ValueError(f"a Python the project runs on, {first[0]}.{first[1]} to {end[0]}.{end[1] - 1} "
                         f"(requires-python)")
    return v


#: A GPU's name: some text.
GpuName = Optional[Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]]


class Header(_Shape):
    """``environment`` (:func:`sparse_mla.records.environment`): what ran, where, when; ``capability`` the live
    device's ``"M.m"``."""
    gpu: GpuName = None
    date: HeaderDate = None
    command: Text = None
    revision: Revision = None
    capability: Optional[Capability] = None
    gpu_count: Optional[Annotated[int, Field(ge=1, le=1024)]] = None
    peer: Text = None
    torch: Version = None
    triton: Version = None
    python: Optional[Annotated[str, StringConstraints(pattern=VERSION_PATTERN), AfterValidator(_our_python)]] = None
    sm_count: Optional[SmCount] = None
    cuda: Version = None
    vllm: Version = None
    #: the benchmarks' measured device-to-device copy bandwidth, their rows' ``frac_of_copy_bw`` is of (round 19, R19-2)
    copy_bandwidth_GBps: Positive = None


class Record(_Shape):
    """What every record may hold: the header, at the top level too where the earliest records kept it."""
    environment: Optional[Header] = None
    gpu: GpuName = None
    date: Date = None
    command: Text = None
    revision: Revision = None
    note: Text = None


# -- kernel benchmarks ------------------------------------------------------------------------------------------------

class KernelRow(_Shape):
    H: Int = None
    T: Int = None
    topk: Int = None
    cache_tokens: Int = None
    triton_graph_us: Optional[Time] = None
    flashmla_graph_us: Optional[Time] = None
    old_graph_us: Optional[Time] = None
    speedup_vs_flashmla_graph: Optional[Ratio] = None
    speedup_new_vs_old: Optional[Ratio] = None
    speedup_default_vs_alt: Optional[Ratio] = None
    frac_of_copy_bw: Optional[NonNeg] = None
    triton_TFLOPs: Optional[NonNeg] = None
    flashmla_TFLOPs: Optional[NonNeg] = None
    triton_us: Optional[Time] = None
    flashmla_us: Optional[Time] = None
    alt_graph_us: Optional[Time] = None
    speedup_vs_flashmla: Optional[Ratio] = None
    triton_TBps: Optional[NonNeg] = None
    block_h: Optional[PowerOfTwo] = None
    block_n: Optional[PowerOfTwo] = None
    block_dv: Optional[PowerOfTwo] = None
    num_warps: Optional[PowerOfTwo] = None
    old_block_h: Optional[PowerOfTwo] = None
    old_block_n: Optional[PowerOfTwo] = None
    old_num_warps: Optional[PowerOfTwo] = None
    alt_block_h: Optional[PowerOfTwo] = None
    alt_block_n: Optional[PowerOfTwo] = None
    num_splits: Optional[Launches] = None
    old_num_splits: Optional[Launches] = None
    num_stages: Optional[Launches] = None


class KernelCheck(_Shape):
    out_rel_err: Optional[NonNeg] = None
    lse_max_abs_err: Optional[NonNeg] = None
    nan: Int = None
    flashmla_out_rel_err: Optional[NonNeg] = None
    flashmla_lse_err_if_natural: Optional[NonNeg] = None
    flashmla_lse_err_if_base2: Optional[NonNeg] = None
    flashmla_lse_max_abs_err: Optional[NonNeg] = None


class KernelBench(Record):
    bench: list[KernelRow] = None          # (each: may be absent, never null)
    checks: list[KernelCheck] = None


class IndexerRow(_Shape):
    kind: Text = None
    H: Int = None
    M: Int = None
    N: Int = None
    B: Int = None
    context: Int = None
    next_n: Int = None
    triton_us: Optional[Time] = None
    deepgemm_us: Optional[Time] = None
    speed_vs_deepgemm: Optional[Ratio] = None
    frac_of_copy_bw: Optional[NonNeg] = None
    triton_TFLOPs: Optional[NonNeg] = None
    deepgemm_TFLOPs: Optional[NonNeg] = None
    sm80_path_us: Optional[Time] = None
    sm80_path_TFLOPs: Optional[NonNeg] = None
    triton_GBps: Optional[NonNeg] = None
    deepgemm_GBps: Optional[NonNeg] = None
    rel_err_vs_ref: Optional[NonNeg] = None
    rel_err_vs_deepgemm: Optional[NonNeg] = None
    sm80_path_rel_err_vs_deepgemm: Optional[NonNeg] = None
    splits: Optional[Launches] = None


class IndexerTarget(_Shape):
    target: Text = None
    goal: Num = None
    min: Num = None
    max: Num = None
    met: Int = None
    cases: Int = None


class IndexerBench(Record):
    bench: list[IndexerRow] = None
    targets: list[IndexerTarget] = None


class VariantTimes(_Shape):
    """Median µs per variant of ``tools/gpu/fp8_where_time_goes.py`` (``flashmla`` where FlashMLA ran)."""
    gather: Time
    loads: Time
    decode: Time
    scores: Time
    full: Time
    flashmla: Time = None        # may be absent, never null


class VariantCase(_Shape):
    H: Count
    T: Count
    topk: Count
    cache_tokens: Count
    num_splits: Count
    block_h: Count
    block_n: Count
    num_warps: Count
    us: VariantTimes
    us_repeats: Optional[dict[str, list[Figure]]] = None


class SweepRow(_Shape):
    """One launch of the sweep (``tools/gpu/fp8_where_time_goes.py``): its tile, warps, splits, option set, time
    (NaN where it failed to launch, with ``error``) and whether it is the planned launch."""
    H: Count
    T: Count
    block_h: Count
    block_n: Count
    num_warps: Count
    num_splits: Count
    options: str
    us: Annotated[float, AfterValidator(_within(1e-3, 1e12, "a time in µs from 0.001 to 1e12 (or NaN: failed)"))]
    planned: bool
    error: Text = None


class KernelVariants(Record):
    cases: Annotated[list[VariantCase], Field(min_length=1)] = None     # may be absent, never null
    sweep: Annotated[list[SweepRow], Field(min_length=1)] = None        # may be absent, never null or empty
    copy_bandwidth_TBps: Positive = None     # may be absent, never null


# -- engines ----------------------------------------------------------------------------------------------------------

class IndexerCalls(_Shape):
    model_config = ConfigDict(strict=True, extra="forbid")
    triton: Count
    deepgemm: Count


#: Where a plan's limits came from: the device, the interpreter's stand-in, or another GPU's row.
PLAN_SOURCE = r"^(device|cpu|DEVICE_LIMITS\[\d{1,2}\.\d\])$"


class PlanLimits(_Written):
    """The limits a launch plan was made with (``sparse_mla.kernels.occupancy.planning_limits``): where from (the
    device's own properties, another GPU's row of ``gpus.DEVICE_LIMITS``, the interpreter's stand-in) and the
    numbers; held to their source by :func:`sparse_mla.vllm_plugin.ran.contradictions`."""
    from_: Annotated[str, StringConstraints(pattern=PLAN_SOURCE)] = Field(alias="from")
    sm_count: SmCount = None
    smem_per_block: SharedMemory = None
    smem_per_sm: SharedMemory = None

    @model_validator(mode="after")
    def _block_within_sm(self):
        # a device's own limits: one block's shared memory is at most an SM's (issue 47, round 11: x04)
        if self.smem_per_block is not None and self.smem_per_sm is not None and self.smem_per_block > self.smem_per_sm:
            raise ValueError(f"smem_per_block <= smem_per_sm (one block runs on one SM; {self.smem_per_block} > "
                             f"{self.smem_per_sm})")
        return self


class SpeculativeCounts(_Written):
    """The engine's own speculation counters (``launch.engine.speculative_counts``, its keys alone): every draft
    proposes at least one token, and no more tokens are accepted than were proposed (``acceptance_rate`` = accepted /
    proposed, 0 to 1)."""
    drafts: Count
    draft_tokens: Count
    accepted_tokens: Count
    acceptance_rate: Optional[Annotated[float, AfterValidator(_within(0.0, 1.0, "a share from 0 to 1"))]] = None

    @model_validator(mode="after")
    def _counted(self):
        if not self.drafts <= self.draft_tokens or self.accepted_tokens > self.draft_tokens:
            raise ValueError("drafts <= draft_tokens and accepted_tokens <= draft_tokens")
        rate = self.accepted_tokens / self.draft_tokens if self.draft_tokens else None
        if self.acceptance_rate is not None and rate is not None and not abs(self.acceptance_rate - rate) <= 1e-6:
            raise ValueError(f"acceptance_rate = accepted_tokens / draft_tokens ({rate:.6g})")
        return self


class RanWeights(_Written):
    """How a worker loaded its weights (:func:`sparse_mla.vllm_plugin.ran.weights_loaded`): vLLM's load format and
    quantization, the GGUF adapter that mapped the file (null: none)."""
    load_format: Text = None
    quantization: Text = None
    gguf_adapter: Text = None


class Ran(_Written):
    """What ran, read inside the engine (:func:`sparse_mla.vllm_plugin.ran.collect`, and the engine's speculative
    counters ``launch.engine`` adds): ``capability`` ``"M.m"``, ``triton_targets`` ``{kernel: [target, ...]}``,
    ``indexer`` ``{"triton": calls, "deepgemm": calls}``, ``attention`` ``{backend: layers}`` (non-empty: a ``ran``
    without a worker's layers proves no engine); the later fields where present. Its keys are ``collect``'s alone."""
    capability: Capability
    triton_targets: dict[str, Annotated[list[str], Field(min_length=1)]]
    indexer: IndexerCalls
    attention: Annotated[dict[str, Layers], Field(min_length=1)]
    indexer_cache: Optional[dict[str, Layers]] = None
    other_layers: Optional[dict[str, Layers]] = None
    draft_attention: Optional[dict[str, Layers]] = None
    mla_prefill: Optional[dict[str, Layers]] = None
    device_capability: Optional[Capability] = None
    triton_binaries: Optional[list[str]] = None
    launch_plan: Optional[dict[Capability, PlanLimits]] = None
    speculative: Optional[SpeculativeCounts] = None
    weights: Optional[RanWeights] = None


class Simulated(_Shape):
    capability: Capability


class SpeculativeConfig(_Shape):
    method: str


class Layer(_Shape):
    backend: Text = None


class Throughput(_Shape):
    """The throughput pass: ``num_seqs`` prompts of ``prompt_len`` tokens, ``max_tokens`` new tokens each,
    ``generated_tokens`` in ``seconds``, ``output_tokens_per_s`` their quotient (held to it by
    :mod:`sparse_mla.workbook.consistency`)."""
    output_tokens_per_s: Optional[TokenRate] = None
    seconds: Optional[Seconds] = None
    num_seqs: Int = None
    prompt_len: Int = None
    max_tokens: Int = None
    generated_tokens: Int = None


#: A token id as a JSON object's key (``first_top_logprobs``): its decimal digits.
TokenKey = Annotated[str, StringConstraints(pattern=r"^\d{1,10}$")]


class Generation(_Shape):
    """One prompt's generated tokens and their log-probabilities: a prompt of at least one token, the first step's
    top-k log-probabilities by token id (``launch.engine.generations``)."""
    prompt_len: Optional[Annotated[int, Field(ge=1, le=2 ** 31 - 1)]] = None
    token_ids: Optional[list[Count]] = None
    logprobs: Optional[list[LogProb]] = None
    first_top_logprobs: Optional[dict[TokenKey, LogProb]] = None


class EngineRun(_Shape):
    """One engine's run: what was asked, what it read inside (``ran``), how it ended."""
    run: Text = None
    backend_requested: Text = None
    indexer: Text = None
    kv_cache_dtype: Text = None
    simulated_capability: Optional[Capability] = None
    simulated: Optional[Simulated] = None
    speculative_config: Optional[SpeculativeConfig] = None
    enforce_eager: Flag = None
    cuda_graphs: Flag = None
    matches_offline: Flag = None
    ran: Optional[Ran] = None
    ran_per_rank: Optional[list[Ran]] = None          # every rank's, where the engine is tensor-parallel
    layers: Optional[dict[str, Layer]] = None
    attention_backends: Optional[list[str]] = None
    backend_log_lines: Optional[list[str]] = None
    error: Text = None
    ran_contradictions: Optional[list] = None
    throughput: Optional[Throughput] = None
    generations: Optional[list[Generation]] = None
    engine_init_s: Optional[Seconds] = None
    environment: Optional[Header] = None     # a run's own header (a parity run's engines each write one)
    tp: Optional[Annotated[int, Field(ge=1, le=1024)]] = None
    log_tail: Text = None

    @model_validator(mode="after")
    def _log_tail_beside_its_error(self):
        if self.log_tail is not None and not self.error:      # launch.engine writes {"error", "log_tail"} together
            raise ValueError("a log_tail only beside an error (sparse_mla.launch.engine writes the two together, for "
                             "an engine that failed)")
        return self


class PromptParity(_Shape):
    prompt_len: Int = None
    identical: Flag = None
    first_divergence: Int = None
    max_abs_logprob_diff: Optional[NonNeg] = None


class Pair(_Shape):
    a: Text = None
    b: Text = None
    per_prompt: Optional[list[PromptParity]] = None


class FirstToken(_Shape):
    """One prompt's first token against the reference's: token ids, the top-k log-probs compared, their largest
    absolute difference (0 or more)."""
    same_first_token: Flag = None
    prompt_len: Int = None
    vllm_first_token: Int = None
    reference_argmax: Int = None
    top_k: Int = None
    max_abs_logprob_diff: Optional[NonNeg] = None


#: A spread or a tolerance that a criterion divides or scales by: a finite number above 0 (never NaN).
PositiveFinite = Annotated[float, Field(gt=0), AfterValidator(_finite_or_nan)]
#: A difference of log-probabilities that is 0 or more by construction (the top-2 gap): finite, never NaN.
NonNegFinite = Annotated[float, Field(ge=0), AfterValidator(_finite_or_nan)]
#: A unit roundoff (``sparse_mla.kernels.error_bounds.unit_roundoff``): above 0 and below 1 (float32's 2**-24,
#: bfloat16's 2**-8, fp8 e4m3's 2**-4).
UnitRoundoff = Annotated[float, Field(gt=0, lt=1)]


class CriterionArithmetic(_Shape):
    """The engine's arithmetic the criterion simulated (``forward_rounding.Arithmetic``): unit roundoffs of the dot
    products' sums, the stored activations, the indexer's q and k and the latent cache (null: not quantized)."""
    acc: UnitRoundoff = None                 # may be absent, never null
    store: UnitRoundoff = None
    indexer: Optional[UnitRoundoff] = None
    cache: Optional[UnitRoundoff] = None


class CriterionPrompt(_Shape):
    """One prompt of the first-token criterion: the reference's two most likely tokens (two tokens), their gap (0 or
    more), the gap's spread ``sigma`` over the rounded forwards and the ``tolerance`` it gives (each above 0)."""
    prompt_len: Annotated[int, Field(ge=1, le=2 ** 31 - 1)] = None
    reference_argmax: Count = None
    reference_second: Count = None
    gap: NonNegFinite = None
    tolerance: PositiveFinite = None
    sigma: PositiveFinite = None
    decisive: bool = None
    first_tokens: dict[str, Count] = None

    @model_validator(mode="after")
    def _two_tokens(self):
        if self.reference_argmax is not None and self.reference_argmax == self.reference_second:
            raise ValueError(f"reference_second another token than reference_argmax {self.reference_argmax} (the "
                             f"reference's top 2 are two tokens)")
        return self


class FirstTokenCriterion(_Shape):
    """``first_token_criterion`` (:func:`sparse_mla.launch.first_token.first_token_criterion`): the arithmetic
    simulated, ``samples`` rounded forwards per prompt (at least 2: a spread needs two), one entry per judged prompt,
    the decisive prompts' count and the failures (or the writer's ``error`` where it could not be made, judged by
    :mod:`sparse_mla.workbook.consistency`)."""
    arithmetic: CriterionArithmetic = None
    samples: Annotated[int, Field(ge=2, le=2 ** 20)] = None
    per_prompt: list[CriterionPrompt] = None
    decisive_prompts: Count = None
    failures: list[str] = None


#: A model dimension (heads, layers, top-k, vocabulary, a length in tokens): an integer from 1 to 2**31 - 1.
Dimension = Optional[Annotated[int, Field(ge=1, le=2 ** 31 - 1)]]


class ModelBlock(_Shape):
    """What an engine or serving record says of its checkpoint: its path and geometry (each a positive integer; MTP
    layers 0 or more)."""
    path: Text = None
    index_topk: Dimension = None
    num_attention_heads: Dimension = None
    num_hidden_layers: Optional[Layers] = None
    num_nextn_predict_layers: Int = None
    vocab_size: Dimension = None


class Weights(_Shape):
    """What an engine was asked to load (``launch.engine.weights_asked``): the checkpoint's format and file, the load
    format and quantization vLLM is given (``gguf`` for a GGUF, null for its default)."""
    format: Text = None
    file: Text = None
    load_format: Text = None
    quantization: Text = None


class Engine(Record, EngineRun):
    """An engine record: parity runs (``runs``, a served check ``serve``), or one engine's record at the top level;
    ``failures``, the record's own verdict (a parity run's: one line per failure, none: passed)."""
    runs: dict[str, EngineRun] = None        # may be absent, never null
    failures: Optional[list[str]] = None
    interrupted: Text = None                 # where a time limit or Ctrl-C cut the run (absent: it ran out)
    checkpoint: Optional[Weights] = None
    serve: Optional[EngineRun] = None
    parity_pairs: Optional[list[Pair]] = None
    parity_vs_ours: Optional[dict[str, Pair]] = None
    parity_baseline: Text = None
    reference_first_token: Optional[dict[str, list[FirstToken]]] = None
    first_token_criterion: Optional[FirstTokenCriterion] = None
    throughput_tokens_per_s: Optional[dict[str, Optional[TokenRate]]] = None
    model: Optional[ModelBlock] = None
    max_model_len: Dimension = None
    prompt_lengths: Optional[list[Annotated[int, Field(ge=1, le=2 ** 31 - 1)]]] = None
    reference_max_len: Dimension = None


# -- the keys an engine record's writers write ------------------------------------------------------------------------
# (audited 2026-12-07 in launch/engine.py, vllm_plugin/ran.py, cli.py, tools/gpu/diagnose_vs_engine.py and every
# committed record; the ``ran`` block's are :class:`Ran`'s fields)

#: The header, at the top level where the earliest records kept it (2026-11-30/12-01: ``command``, ``date``), and a
#: record's description (``what``, ``note``).
HEADER_KEYS = ("environment", "gpu", "date", "command", "revision", "note", "what")
#: One offline engine's record: :func:`sparse_mla.launch.engine.run_offline` (``launch --json-out``; ``simulated``
#: by ``with_simulated``, ``throughput`` where asked, ``ran_per_rank`` where tensor-parallel).
OFFLINE_KEYS = ("environment", "run", "backend_requested", "indexer", "simulated_capability", "checkpoint",
                "kv_cache_dtype", "tp", "enforce_eager", "speculative_config", "engine_init_s", "layers",
                "attention_backends", "generations", "throughput", "ran", "ran_per_rank", "ran_contradictions",
                "simulated")
#: One engine of a parity run (``launch.engine._engine_runs``): the request (with ``speculative``, whether it
#: speculates), then the engine's record, or ``error`` and the tail of its log.
PARITY_RUN_KEYS = (*OFFLINE_KEYS, "speculative", "error", "log_tail")
#: A served engine: :func:`sparse_mla.launch.engine.run_serve` (``launch --serve``; ``ran_error`` where the server
#: could not answer the ``ran`` call, ``served_ran``).
SERVED_KEYS = ("run", "backend_requested", "indexer", "simulated_capability", "checkpoint", "kv_cache_dtype", "tp",
               "speculative_config", "command", "server_up_s", "token_ids", "logprobs", "backend_log_lines",
               "custom_backend_selected", "ran", "ran_per_rank", "ran_contradictions", "ran_error", "simulated")
#: A parity record's served check (``launch.engine._judge_engines``: the offline run it is compared with, whether
#: it matched, or ``error`` and the log's tail; ``plugin_loaded``: the served check of 2026-12-01).
SERVED_CHECK_KEYS = (*SERVED_KEYS, "compared_with", "matches_offline", "error", "log_tail", "plugin_loaded")
#: A parity record's top level (:func:`sparse_mla.launch.engine.run_parity`, ``_judge_engines``).
PARITY_KEYS = (*HEADER_KEYS, "model", "checkpoint", "tp", "kv_cache_dtype", "speculative_config", "prompt_lengths",
               "max_model_len", "reference_max_len", "run_specs", "runs", "interrupted", "failures", "parity_baseline",
               "parity_vs_ours", "parity_pairs", "engine_agreement", "reference_first_token", "first_token_criterion",
               "throughput_tokens_per_s", "serve", "simulated")
#: One engine's record at the top level (offline or served), with a served check beside it.
ONE_ENGINE_KEYS = tuple(dict.fromkeys((*HEADER_KEYS, *OFFLINE_KEYS, *SERVED_KEYS, "serve")))
#: ``tools/gpu/diagnose_vs_engine.py``: the diagnosis per KV-cache dtype against an engine each (its ``launch
#: --json-out`` record without its generations, or ``error`` and the log's tail).
DIAGNOSIS_KEYS = ("what", "environment", "runs", "diagnosis", "differences")
#: ``tools/gpu/glm5next_parity.py``: a GLM-5.3-Flash comparison (``checkpoint`` for the model's config in those of
#: 2026-12-06), and one of its engines (its request, its record, or ``error`` and ``stderr``).
GLM5NEXT_KEYS = ("what", "environment", "model_config", "checkpoint", "max_tokens", "runs", "engine_agreement",
                 "reference", "first_token_criterion")
GLM5NEXT_RUN_KEYS = ("run", "backend_requested", "indexer", "simulated_capability", "engine_init_s", "layers",
                     "attention_backends", "generations", "ran", "ran_contradictions", "ran_error", "simulated",
                     "error", "stderr")
#: Its ``engine_agreement.<run>`` (:func:`sparse_mla.launch.engine.compare`) and one prompt's entry there.
AGREEMENT_KEYS = ("per_prompt", "all_identical")
AGREEMENT_PROMPT_KEYS = ("prompt_len", "identical", "first_divergence", "max_abs_logprob_diff")
#: Its ``reference.<run>[i]`` (the tool's ``judge``), one of its steps, and the reference's own greedy tokens; or
#: the reference's failure (``{"error", "traceback"}``).
GLM5NEXT_REFERENCE_KEYS = ("prompt_len", "steps", "max_regret", "max_abs_logprob_diff", "reference_greedy",
                           "first_divergence", "reference_gap_at_divergence", "first_token")
GLM5NEXT_STEP_KEYS = ("token", "reference_logprob", "vllm_logprob", "abs_diff", "regret", "reference_argmax")
GLM5NEXT_REFERENCE_ERROR_KEYS = ("error", "traceback")
#: A first-token criterion (:func:`sparse_mla.launch.first_token.judge_first_tokens`) and one prompt of it.
CRITERION_KEYS = ("rule", "arithmetic", "samples", "per_prompt", "decisive_prompts", "failures")
CRITERION_PROMPT_KEYS = ("prompt_len", "reference_argmax", "reference_second", "gap", "tolerance", "sigma",
                         "decisive", "first_tokens")
DIAGNOSED_ENGINE_KEYS = (*OFFLINE_KEYS, "error", "log_tail")
#: Its diagnosis of one KV-cache dtype (``sparse_mla.workbook.diagnosis.entry``: the prediction, and the diagnosis's
#: own headline, resolved KV-cache dtype and blockers), and the prediction (``sparse_mla.workbook.diagnosis.predicted``;
#: issue 47, round 8: a ``note`` beside them was proven).
DIAGNOSIS_ENTRY_KEYS = ("predicted", "headline", "effective_kv_cache_dtype", "blockers")
PREDICTED_KEYS = ("attention", "kv_cache_dtype", "indexer", "engine_starts")
# The levels below (issue 47, round 8: a generation's ``finish_reason``, a layer's or the checkpoint's ``banana``,
# ``throughput.valid``, ``environment.note`` were proven):
#: The header, at every level an engine record has it (:func:`sparse_mla.records.environment`).
ENVIRONMENT_KEYS = ("date", "command", "python", "torch", "triton", "revision", "vllm", "gpu", "gpu_count",
                    "capability", "sm_count", "cuda")
#: One prompt's generation (:func:`sparse_mla.launch.engine.generations`).
GENERATION_KEYS = ("prompt_len", "token_ids", "logprobs", "first_top_logprobs")
#: One layer of ``layers`` (:func:`sparse_mla.vllm_plugin.ran.layer_backends`; ``prefill`` and ``mla`` absent from
#: the earlier records).
LAYER_KEYS = ("layer", "backend", "mla", "impl", "kv_cache_dtype", "prefill")
#: The throughput pass (``launch.engine.run_offline``: the pass asked for, its time, tokens and rate).
THROUGHPUT_KEYS = ("num_seqs", "prompt_len", "max_tokens", "seconds", "generated_tokens", "output_tokens_per_s")
#: The simulated capability (``launch.specs.simulated``; ``differs`` absent from the earlier records).
SIMULATED_KEYS = ("capability", "how", "differs")
#: The weights asked for (:func:`sparse_mla.launch.engine.weights_asked`).
CHECKPOINT_KEYS = ("format", "file", "load_format", "quantization")
#: An engine or serving record's model (``launch.engine.model_block``; ``num_nextn_predict_layers`` absent from the
#: earliest parity records, ``vocab_size`` from the parity records before 2026-12-07).
MODEL_KEYS = ("path", "index_topk", "num_attention_heads", "num_hidden_layers", "num_nextn_predict_layers",
              "vocab_size")
#: One run spec of a parity record's ``run_specs`` (``launch.engine.run_parity``).
RUN_SPEC_KEYS = ("run", "backend_requested", "indexer", "kv_cache_dtype")


def _written(name: str, keys: tuple[str, ...], doc: str, **typed) -> type[_Written]:
    """A model of one level's keys (``keys``, each may hold anything: their types are the record kinds' shapes'),
    ``typed`` the levels below it that are written too."""
    fields = {k: (Any, None) for k in keys if k != "model_config"}
    if "model_config" in keys:              # pydantic's own name: the field under another, the key as its alias
        fields["model_config_"] = (Any, Field(None, alias="model_config"))
    fields.update({k: (Optional[t], None) for k, t in typed.items()})
    return create_model(name, __base__=_Written, __doc__=doc, **fields)


_LEVELS = {"environment": _written("Environment", ENVIRONMENT_KEYS, "The header."),
           "generations": list[_written("WrittenGeneration", GENERATION_KEYS, "One prompt's generation.")],
           "layers": dict[str, _written("WrittenLayer", LAYER_KEYS, "One layer's backend.")],
           "throughput": _written("WrittenThroughput", THROUGHPUT_KEYS, "The throughput pass."),
           "simulated": _written("WrittenSimulated", SIMULATED_KEYS, "The simulated capability."),
           "checkpoint": _written("WrittenCheckpoint", CHECKPOINT_KEYS, "The weights asked for."),
           "model": _written("WrittenModel", MODEL_KEYS, "A parity record's model."),
           "run_specs": dict[str, _written("WrittenRunSpec", RUN_SPEC_KEYS, "One run spec.")]}


def _levels(keys: tuple[str, ...], *but: str) -> dict[str, type]:
    """The written levels (:data:`_LEVELS`) under the keys ``keys`` of a level, but ``but``."""
    return {k: t for k, t in _LEVELS.items() if k in keys and k not in but}


ParityRun = _written("ParityRun", PARITY_RUN_KEYS, "One engine of a parity run (runs.X).", **_levels(PARITY_RUN_KEYS))
ServedCheck = _written("ServedCheck", SERVED_CHECK_KEYS, "A served engine or a parity record's served check.",
                       **_levels(SERVED_CHECK_KEYS))
#: The keys of an engine (launch) record as its writers write them, per form: a parity run, one engine's record,
#: the diagnosis against engines. A record of another kind has no such model (its keys are not all known).
ParityRecord = _written("ParityRecord", PARITY_KEYS, "A parity record's top level.", runs=dict[str, ParityRun],
                        serve=ServedCheck, **_levels(PARITY_KEYS))
OneEngineRecord = _written("OneEngineRecord", ONE_ENGINE_KEYS, "One engine's record.", serve=ServedCheck,
                           **_levels(ONE_ENGINE_KEYS))
#: A tagged union's branch names: no part of a record's path (:func:`problems` drops them).
_BRANCHES = ("<failed>", "<per run>")


def _failed_or(keys: tuple[str, ...], name: str, per_run) -> type:
    """A level the writer fills per run (``per_run``), or with its failure (an object holding ``error``: the
    ``keys`` alone)."""
    return Annotated[Union[Annotated[_written(name, keys, "A failure."), Tag(_BRANCHES[0])],
                           Annotated[per_run, Tag(_BRANCHES[1])]],
                     Discriminator(lambda v: _BRANCHES[0] if isinstance(v, dict) and "error" in v else _BRANCHES[1])]


_GLM5NEXT_REFERENCE = _written("Glm5NextReference", GLM5NEXT_REFERENCE_KEYS, "The reference's view of one prompt.",
                               steps=list[_written("Glm5NextStep", GLM5NEXT_STEP_KEYS, "One generated token.")])
Glm5NextRecord = _written("Glm5NextRecord", GLM5NEXT_KEYS, "A GLM-5.3-Flash comparison's top level.",
                          runs=dict[str, _written("Glm5NextRun", GLM5NEXT_RUN_KEYS, "One compared engine.",
                                                  **_levels(GLM5NEXT_RUN_KEYS))],
                          engine_agreement=dict[str, _written(
                              "Agreement", AGREEMENT_KEYS, "One run against the first.",
                              per_prompt=list[_written("AgreementPrompt", AGREEMENT_PROMPT_KEYS, "One prompt.")])],
                          reference=_failed_or(GLM5NEXT_REFERENCE_ERROR_KEYS, "ReferenceFailed",
                                               dict[str, list[_GLM5NEXT_REFERENCE]]),
                          first_token_criterion=_failed_or(("error",), "CriterionFailed", _written(
                              "Criterion", CRITERION_KEYS, "The first-token criterion.",
                              per_prompt=list[_written("CriterionPrompt", CRITERION_PROMPT_KEYS, "One prompt.")])),
                          **_levels(GLM5NEXT_KEYS, "checkpoint"))     # its checkpoint: the model's config.json
DiagnosisRecord = _written("DiagnosisRecord", DIAGNOSIS_KEYS, "The diagnosis against engines.",
                           runs=dict[str, _written("DiagnosedEngine", DIAGNOSED_ENGINE_KEYS, "One diagnosed engine.",
                                                   **_levels(DIAGNOSED_ENGINE_KEYS))],
                           diagnosis=dict[str, _written("DiagnosisEntry", DIAGNOSIS_ENTRY_KEYS,
                                                        "The diagnosis of one KV-cache dtype.",
                                                        predicted=_written("Prediction", PREDICTED_KEYS,
                                                                           "What it predicts."))],
                           **_levels(DIAGNOSIS_KEYS))


# -- serving benchmark ------------------------------------------------------------------------------------------------

class Stat(_Shape):
    """A throughput or latency over repeats: each may be absent, none null, none below 0 (the table prints
    median (min-max) over n repeats, n >= 1, min <= median <= max)."""
    median: NonNeg = None
    min: NonNeg = None
    max: NonNeg = None
    n: Annotated[int, Field(ge=1, le=2 ** 53)] = None

    @model_validator(mode="after")
    def _ordered(self):
        vals = [v for v in (self.min, self.median, self.max) if v is not None and not math.isnan(v)]
        if vals != sorted(vals):
            raise ValueError("min <= median <= max")
        return self


class AcceptanceRate(_Shape):
    acceptance_rate: Num = None


class Summary(_Shape):
    """Statistics over repeats under vLLM's ``vllm bench serve`` names, or the 2026-12-01 client's."""
    output_throughput: Optional[Stat] = None
    median_ttft_ms: Optional[Stat] = None
    median_tpot_ms: Optional[Stat] = None
    spec_decode_acceptance_rate: Optional[Stat] = None
    output_tokens_per_s: Optional[Stat] = None
    ttft_ms_median: Optional[Stat] = None
    tpot_ms_median: Optional[Stat] = None


class ClientPass(_Shape):
    """One ``vllm bench serve`` client run as the writer records it (``passes[].timed``, ``servers[].warmup``:
    ``sparse_mla.bench.serve._bench_pass``): its command, its wall ``seconds`` (above 0), vLLM's ``duration`` (s,
    above 0), the requests ``completed`` and ``failed`` (0 or more). Its exit status and time limit are judged
    wherever they are (``sparse_mla.workbook.proof.OUTCOME_KEYS``)."""
    command: list[str] = None
    result_file: Text = None
    seconds: Positive = None
    duration: Positive = None
    completed: Count = None
    failed: Count = None
    output_len: Dimension = None


class Server(_Shape):
    """One live ``vllm serve`` of a run: its command, start-up and wall time, warm-up pass, and the ``ran`` block
    read in its workers after its last pass."""
    command: list[str] = None
    server_up_s: Optional[Seconds] = None
    wall_s: Optional[Seconds] = None
    warmup: ClientPass = None
    failures: list[str] = None
    ran: Optional[Ran] = None
    ran_per_rank: Optional[list[Ran]] = None
    ran_contradictions: Optional[list] = None


class TimedPass(_Shape):
    """One timed pass of a run: its repeat (1-based), its place in the round, its failures and its client run."""
    repeat: Annotated[int, Field(ge=1, le=1024)] = None
    position: Annotated[int, Field(ge=1, le=1024)] = None
    failures: list[str] = None
    timed: ClientPass = None


class RepeatAgreement(_Shape):
    """Greedy agreement of two passes (``sparse_mla.bench.vllm_client.text_agreement``): requests compared and
    identical (at most compared), the first differing character (0 or more)."""
    repeat: Annotated[int, Field(ge=1, le=1024)] = None
    against_repeat: Annotated[int, Field(ge=1, le=1024)] = None
    compared: Count = None
    identical: Count = None
    first_divergence_min: Int = None
    first_divergence_median: Optional[NonNeg] = None

    @model_validator(mode="after")
    def _at_most_compared(self):
        if self.identical is not None and self.compared is not None and self.identical > self.compared:
            raise ValueError("identical <= compared")
        return self


class ServeRun(EngineRun):
    summary: Optional[Summary] = None
    spec_decode: Optional[AcceptanceRate] = None
    servers: list[Server] = None
    passes: list[TimedPass] = None
    agreement_across_repeats: list[RepeatAgreement] = None


class Agreement(_Shape):
    identical: Int = None
    compared: Int = None
    baseline: Text = None
    plain: Text = None
    per_repeat: list[RepeatAgreement] = None
    output_throughput_ratio: Optional[Ratio] = None
    acceptance_rate_percent: Num = None

    @model_validator(mode="after")
    def _at_most_compared(self):
        if self.identical is not None and self.compared is not None and self.identical > self.compared:
            raise ValueError("identical <= compared")
        return self


class ServerBlock(_Shape):
    """``server``: what every live ``vllm serve`` of the benchmark was given."""
    kv_cache_dtype: Text = None
    tp: Annotated[int, Field(ge=1, le=1024)] = None
    enforce_eager: bool = None
    cuda_graphs: bool = None
    prefix_caching: bool = None
    max_model_len: Dimension = None
    max_num_seqs: Dimension = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = None
    server_timeout_s: Positive = None
    bench_timeout_s: Positive = None


class BenchResult(_Shape):
    """One ``vllm bench serve`` pass as vLLM wrote it: its duration (s, above 0) and its figures (0 or more); the
    prompts asked and completed are read whatever they are written as (``sparse_mla.workbook.proof``: fewer
    completed is a failure, more an inconsistency)."""
    duration: Positive = None                # may be absent, never null
    output_throughput: Optional[NonNeg] = None
    median_ttft_ms: Optional[NonNeg] = None
    median_tpot_ms: Optional[NonNeg] = None
    median_itl_ms: Optional[NonNeg] = None


class Load(_Shape):
    """A serving benchmark's load: prompts per pass, concurrency, repeats, new tokens (each 1 or more)."""
    num_prompts: Dimension = None
    num_requests: Dimension = None
    max_concurrency: Dimension = None
    concurrency: Dimension = None
    repeats: Dimension = None
    output_len: Dimension = None
    max_tokens: Dimension = None


class Serve(Record):
    runs: dict[str, ServeRun] = None         # may be absent, never null
    repeats: Optional[dict[str, list[Optional[BenchResult]]]] = None    # null: a pass without a result
    load: Optional[Load] = None
    order: Optional[list[list[str]]] = None
    wall_s: Optional[Seconds] = None
    server: ServerBlock = None
    agreement_vs_baseline: Optional[dict[str, Agreement]] = None
    speculative_vs_plain: Optional[dict[str, Agreement]] = None
    complete: Flag = None
    method: Text = None


# -- the keys a serving benchmark's writers write ---------------------------------------------------------------------
# (audited 2026-12-07 in bench/serve.py ``_session_record``, ``start_server``, ``timed_pass``, ``finish_server``,
# ``refresh_run``, ``compare_runs``, bench/vllm_client.py ``run_pass``, launch/engine.py ``served_ran``, the writer
# of 2026-12-03 (git 0ac84b4: a fresh server per repeat) and the committed records: those of 2026-12-01's client
# wrote a run's ``command``, ``log``, ``token_ids``, ``warmup``, ``repeats``, ``self_agreement`` and summaries under
# other names; vLLM's own results under the top level's ``repeats`` are held to no list: their keys are vLLM's, of
# any version, and a failure said there is read by ``sparse_mla.workbook.proof.said_failed``)

#: The top level (``_session_record`` with ``simulated`` by ``with_simulated``, then ``verdict`` and the comparisons).
SERVING_KEYS = ("what", "method", "environment", "complete", "model", "load", "server", "speculative_config",
                "baseline", "order", "runs", "repeats", "failures", "wall_s", "verdict", "agreement_vs_baseline",
                "speculative_vs_plain", "simulated")
#: One run (the run spec's request, its servers and passes, then ``refresh_run``'s; the 2026-12-01 client's).
SERVE_RUN_KEYS = ("run", "backend_requested", "indexer", "simulated_capability", "run_spec", "kv_cache_dtype",
                  "speculative_config", "cuda_graphs", "servers", "passes", "summary", "ran", "ran_contradictions",
                  "error", "agreement_across_repeats", "command", "log", "repeats", "self_agreement", "server_up_s",
                  "spec_decode", "token_ids", "wall_s", "warmup")
#: A run's summary (``refresh_run``: ``SUMMARY_METRICS``, ``server_up_s``; the 2026-12-01 client's names).
SUMMARY_KEYS = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms",
                "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "failed", "server_up_s", "errors",
                "output_tokens_per_s", "tpot_ms_all", "tpot_ms_median", "ttft_ms_all", "ttft_ms_median")
#: The load (``bench.serve.Load``'s fields and what ``_session_record`` adds; the 2026-12-01 client's).
LOAD_KEYS = ("num_prompts", "max_concurrency", "repeats", "output_len", "seed", "dataset", "input_lengths",
             "output_range_ratio", "warmup_output_len", "temperature", "ignore_eos", "dataset_args", "prompts_file",
             "concurrency", "greedy", "max_tokens", "num_requests", "prompt_kinds", "prompt_lengths",
             "prompt_tokens", "request_timeout_s", "warmup_tokens")
#: What every server was given (``bench_serve``'s ``server_kw`` and ``_session_record``'s).
SERVER_BLOCK_KEYS = ("kv_cache_dtype", "tp", "enforce_eager", "max_model_len", "gpu_memory_utilization",
                     "cuda_graphs", "max_num_seqs", "prefix_caching", "server_timeout_s", "bench_timeout_s")
# Below a run (issue 47, round 8: a server's ``"hung": true`` and a pass's ``"valid": false`` were proven; a failure
# said under a key of its own there is now a key no writer writes):
#: One ``vllm bench serve`` pass, timed (``passes[].timed``): ``bench.serve._bench_pass`` (its command and result
#: file, :func:`sparse_mla.bench.vllm_client.run_pass`'s exit code, wall seconds and time limit, vLLM's duration,
#: completed and failed requests).
CLIENT_PASS_KEYS = ("command", "result_file", "exit_code", "seconds", "timed_out", "duration", "completed", "failed")
#: A server's warm-up pass (``servers[].warmup``, ``start_server``): a client pass and its new tokens per request.
WARMUP_KEYS = (*CLIENT_PASS_KEYS, "output_len")
#: One live server (``servers[]``): ``start_server`` (its command, logs, failures, start-up, warm-up and wall time,
#: or ``error`` and the log's tail), ``finish_server`` (``launch.engine.served_ran``'s ``ran`` fields); ``repeat``,
#: ``timed`` and ``position``: the 2026-12-03 writer's server per repeat, which held its timed pass.
SERVER_KEYS = ("command", "log", "bench_log", "failures", "server_up_s", "warmup", "wall_s", "error", "log_tail",
               "ran", "ran_per_rank", "ran_contradictions", "ran_error", "repeat", "timed", "position")
#: One timed pass (``passes[]``): ``timed_pass`` (its repeat, failures, client pass or ``error``) and its place in
#: the round (``position``, ``bench_serve``).
PASS_KEYS = ("repeat", "failures", "error", "timed", "position")
#: The 2026-12-01 client's warm-up (a run's ``warmup``) and repeats (a run's ``repeats``: ``repeat_stats``).
WARMUP_2026_12_01_KEYS = ("requests", "max_tokens", "duration_s", "errors")
REPEAT_2026_12_01_KEYS = ("requests", "errors", "first_errors", "duration_s", "output_tokens", "output_tokens_per_s",
                          "ttft_ms", "tpot_ms", "latency_ms")

# (issue 47, round 9: a key of its own in an agreement entry, a verdict or a verdict's pair was proven)
#: Greedy agreement of two passes (``sparse_mla.bench.vllm_client.text_agreement``; ``note`` where their numbers of
#: requests differ).
AGREEMENT_KEYS = ("compared", "identical", "first_divergence_min", "first_divergence_median", "note")
#: One repeat against the run's first (a run's ``agreement_across_repeats[]``, ``refresh_run``).
ACROSS_REPEATS_KEYS = ("repeat", "against_repeat", *AGREEMENT_KEYS)
#: One repeat of a comparison between two runs (``per_repeat[]``, ``_agreement_per_repeat``).
PER_REPEAT_KEYS = ("repeat", *AGREEMENT_KEYS)
#: A run against the baseline (``agreement_vs_baseline.X``, ``compare_runs``; the 2026-12-01 client's).
VS_BASELINE_KEYS = ("baseline", "compared", "identical", "per_repeat", "first_divergence_min",
                    "first_divergence_median", "per_request")
#: A speculative run against its plain run (``speculative_vs_plain.X``, ``compare_runs``; the 2026-12-01 client's).
VS_PLAIN_KEYS = ("plain", "compared", "identical", "per_repeat", "output_throughput_ratio", "acceptance_rate_percent",
                 "first_divergence_min", "first_divergence_median", "per_request", "acceptance_rate",
                 "tokens_per_s_ratio")
#: The verdict (``sparse_mla.bench.ranking.verdict``) and one of its pairs (``ranking.compare``).
VERDICT_KEYS = ("rule", "metrics", "pairs", "lines")
VERDICT_PAIR_KEYS = ("metric", "runs", "ranges", "better", "line", "spread", "medians_apart")

_ClientPass = _written("WrittenClientPass", CLIENT_PASS_KEYS, "One timed vllm bench serve pass.")
_PerRepeat = list[_written("WrittenPerRepeat", PER_REPEAT_KEYS, "One repeat of a comparison of two runs.")]
_ServeRun = _written("WrittenServeRun", SERVE_RUN_KEYS, "One run of a serving benchmark.",
                     summary=_written("WrittenSummary", SUMMARY_KEYS, "A run's summary."),
                     servers=list[_written("WrittenServer", SERVER_KEYS, "One live server.",
                                           warmup=_written("WrittenWarmup", WARMUP_KEYS, "A server's warm-up pass."),
                                           timed=_ClientPass)],
                     passes=list[_written("WrittenPass", PASS_KEYS, "One timed pass.", timed=_ClientPass)],
                     agreement_across_repeats=list[_written("WrittenAcrossRepeats", ACROSS_REPEATS_KEYS,
                                                            "One repeat against the run's first.")],
                     warmup=_written("WrittenWarmup20261201", WARMUP_2026_12_01_KEYS, "The 2026-12-01 warm-up."),
                     repeats=list[_written("WrittenRepeat20261201", REPEAT_2026_12_01_KEYS,
                                           "One repeat of the 2026-12-01 client.")])
#: The keys of a serving benchmark (``sparse-mla bench serve``) as its writers write them.
ServeRecord = _written("ServeRecord", SERVING_KEYS, "A serving benchmark's top level.", runs=dict[str, _ServeRun],
                       load=_written("WrittenLoad", LOAD_KEYS, "The load."),
                       server=_written("WrittenServerBlock", SERVER_BLOCK_KEYS, "What every server was given."),
                       model=_written("WrittenServeModel", MODEL_KEYS, "A serving benchmark's model."),
                       agreement_vs_baseline=dict[str, _written("WrittenVsBaseline", VS_BASELINE_KEYS,
                                                                "A run against the baseline.", per_repeat=_PerRepeat)],
                       speculative_vs_plain=dict[str, _written("WrittenVsPlain", VS_PLAIN_KEYS,
                                                               "A speculative run against its plain run.",
                                                               per_repeat=_PerRepeat)],
                       verdict=_written("WrittenVerdict", VERDICT_KEYS, "The verdict.",
                                        pairs=list[_written("WrittenVerdictPair", VERDICT_PAIR_KEYS,
                                                            "Two runs on one metric.")]),
                       **_levels(SERVING_KEYS, "model"))


#: kind (the name the tables use) -> its shape
KINDS: dict[str, type[_Shape]] = {
    "kernel benchmark": KernelBench, "indexer benchmark": IndexerBench, "kernel-variants": KernelVariants,
    "engine (launch)": Engine, "serving benchmark": Serve,
}

_EXPECTED = {"float_type": "a number", "int_type": "an integer", "bool_type": "true or false",
             "string_type": "a text", "dict_type": "an object", "model_type": "an object",
             "model_attributes_type": "an object", "list_type": "a list", "missing": "present",
             "extra_forbidden": "absent", "none_required": "null"}


def _expected(err: dict) -> str:
    """What pydantic's error ``err`` accepts, in the records' words."""
    ctx = err.get("ctx") or {}
    by_constraint = {"too_short": lambda: f"at least {ctx.get('min_length')} entry",
                     "greater_than": lambda: f"a number above {ctx.get('gt')}",
                     "greater_than_equal": lambda: f"a number of at least {ctx.get('ge')}",
                     "less_than_equal": lambda: f"a number up to {ctx.get('le')}",
                     "less_than": lambda: f"a number below {ctx.get('lt')}",
                     "string_pattern_mismatch": lambda: "a capability 'M.m'" if ctx.get("pattern") == _CAPABILITY
                     else f"a text matching {ctx.get('pattern')}"}
    if err["type"] in by_constraint:
        return by_constraint[err["type"]]()
    if err["type"] == "unwritten_key":
        return ctx["accepted"]
    if err["type"] == "value_error":          # this module's validators say what they accept
        return str(err["msg"]).removeprefix("Value error, ")
    return _EXPECTED.get(err["type"], err["msg"][0].lower() + err["msg"][1:])


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the record)"


def _value(rec, loc: tuple):
    for part in loc:
        try:
            rec = rec[part]
        except (KeyError, IndexError, TypeError):
            return None
    return rec


def problems(obj, shape: type[_Shape]) -> list[str]:
    """What in ``obj`` is not ``shape``, one line per field (``[]``: none): ``"PATH is VALUE; accepted: TYPE"``."""
    try:
        shape.model_validate(obj)
        return []
    except ValidationError as e:
        seen, out = set(), []
        for err in e.errors(include_url=False):
            key = err["loc"][-1:] == ("[key]",)          # a mapping's key, not its value
            loc = tuple(p for p in (err["loc"][:-1] if key else err["loc"]) if p not in _BRANCHES)
            if loc in seen:
                continue
            seen.add(loc)
            want = _expected(err)
            if err["type"] == "unwritten_key":
                where = _path(loc) if loc else "the top level"
                out.append(f"no writer writes {err['ctx']['keys']} at {where}; accepted: {want}")
                continue
            got = "missing" if err["type"] == "missing" else repr(loc[-1] if key else _value(obj, loc))[:60]
            out.append(f"{_path(loc)}{' (a key)' if key else ''} is {got}; accepted: {want}")
        return out


def problems_of_any_kind(obj) -> list[str]:
    """:func:`problems` against every kind's shape at once (each field a kind reads, wherever a record has it), once
    each: what ``sparse-mla records check`` refuses without knowing which table a record is for."""
    out = []
    for shape in KINDS.values():
        out += [line for line in problems(obj, shape) if line not in out]
    return out


def require(rec, kind: str, name: str) -> None:
    """Raise one :class:`UserInputError` naming record ``name``, the first field of ``rec`` that is not ``kind``'s
    shape (:data:`KINDS`) and the type expected (and how many more there are)."""
    found = problems(rec, KINDS[kind])
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        article = "an" if kind[0] in "aeiou" else "a"
        raise UserInputError(f"record {name!r} is not {article} {kind} record as the project writes it: "
                             f"{found[0]}{more}")
