"""The planted faults of issue 49: each a few exact text replacements in the library and the test selections that
should turn red with it. ``run.py`` applies each replacement only where ``old`` occurs exactly once in the file, and
fails loudly otherwise: when the code moves, update the definition here instead of letting the tool test nothing.

Selections name a venv (``.venv``: vLLM 0.26 with the gguf extra; ``.venv034``: vLLM 0.34, the 0.33+ plugin line)
and pytest arguments relative to the repository root. The project's ``addopts`` (``-ra -m 'not slow'``) still applies
unless a selection passes its own ``-m``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """One exact replacement: ``old`` must occur exactly once in ``path`` (relative to the repository root)."""
    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Selection:
    """A pytest run: ``venv`` (a folder at the repository root) and the arguments after ``python -m pytest``."""
    label: str
    venv: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Fault:
    """A realistic fault: its edits (applied together) and the selections expected to catch it."""
    number: int
    name: str
    site: str
    edits: tuple[Edit, ...]
    selections: tuple[Selection, ...]


VLLM034_LINE = "every_line and not slow"

FAULTS: tuple[Fault, ...] = (
    Fault(
        1, "GGUF Q6_K sized as Q4_K",
        "gguf/types.py GGUF_TYPES (the block table the memory stage and the GGUF reader share): "
        "Q6_K (256, 210) -> (256, 144)",
        (Edit("lib/sparse_mla/gguf/types.py", '"Q6_K": (256, 210)', '"Q6_K": (256, 144)'),),
        (Selection("gguf_memory", ".venv", ("tests/diagnose/test_gguf_memory.py",)),
         Selection("memory", ".venv", ("tests/diagnose/test_memory.py",)),
         Selection("types", ".venv", ("tests/gguf/test_types.py",))),
    ),
    Fault(
        2, "Ran.capability loosened to str",
        "records/schema.py class Ran: capability: Capability -> capability: str",
        (Edit("lib/sparse_mla/records/schema.py",
              "    fields where present.\"\"\"\n    capability: Capability\n",
              "    fields where present.\"\"\"\n    capability: str\n"),),
        (Selection("records", ".venv", ("tests/records",)),),
    ),
    Fault(
        3, "fp8 rule ignores the minor version (SM89 = SM80)",
        "kernels/fp8.py has_fp8_conversion, the one rule every caller asks: compares the major only, "
        "8 > 8 is False for SM89",
        (Edit("lib/sparse_mla/kernels/fp8.py",
              "    return tuple(capability) >= FP8_HW_CAPABILITY\n",
              "    return tuple(capability)[:1] > FP8_HW_CAPABILITY[:1]\n"),),
        (Selection("glm5next@0.34", ".venv034", ("tests/diagnose/test_glm5next.py",)),
         Selection("lines@0.34", ".venv034", ("tests/diagnose/test_lines.py",)),
         Selection("fp8", ".venv", ("tests/kernels/test_fp8.py",))),
    ),
    Fault(
        4, "0.33+ line: Triton fp8 MLA cache write flag off",
        "vllm_plugin/lines/v0_33.py (v0_34 imports it): TRITON_FP8_MLA_CACHE_WRITE = True -> False",
        (Edit("lib/sparse_mla/vllm_plugin/lines/v0_33.py",
              "TRITON_FP8_MLA_CACHE_WRITE = True\n", "TRITON_FP8_MLA_CACHE_WRITE = False\n"),),
        (Selection("backend@0.34", ".venv034", ("tests/vllm_plugin/test_backend.py",)),
         Selection("register@0.34", ".venv034", ("tests/vllm_plugin/test_register.py",)),
         Selection("diagnose@0.34", ".venv034", ("-m", VLLM034_LINE, "tests/diagnose"))),
    ),
    Fault(
        5, "indexer RoPE sign flipped in fused_q and its reference",
        "kernels/fused_q.py (interleaved indexer RoPE: sign -1 on even dims -> +1) and the same sign in "
        "kernels/reference.py fused_q_ref, so that our kernel and our transcription still agree",
        (Edit("lib/sparse_mla/kernels/fused_q.py",
              "sign = tl.where(block % 2 == 0, -1.0, 1.0)", "sign = tl.where(block % 2 == 0, 1.0, -1.0)"),
         Edit("lib/sparse_mla/kernels/reference.py",
              "block // 2, torch.where(in_rope, block ^ 1, block), (block % 2 == 0)",
              "block // 2, torch.where(in_rope, block ^ 1, block), (block % 2 == 1)")),
        (Selection("fused_q-vs-ours@0.34", ".venv034", ("tests/kernels/test_fused_q.py", "-k", "fused_q")),
         Selection("fused_q-vs-vllm@0.34", ".venv034", ("tests/vllm_plugin/test_indexer.py", "-k", "fused_q"))),
    ),
)
