"""``sparse_mla.vllm_plugin.ran``: the ``ran`` block, read in a real process, and what contradicts a request.

The collection runs in a fresh subprocess with Triton compiling (``TRITON_INTERPRET=0``): our q-quant kernel is
compiled ahead of time for one target and put where Triton's JIT keeps what it compiled (``device_caches``), the
indexer adapter is called there, and a stand-in vLLM worker carries three layers. What comes back is what that process
read, so a wrong reading of Triton's caches, the counters or the layers shows here.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from sparse_mla.vllm_plugin import ran

pytestmark = pytest.mark.every_line

CHILD = textwrap.dedent("""
    import json, os, sys, types
    os.environ["TRITON_INTERPRET"] = "0"
    from sparse_mla.kernels import indexer_build, indexer_quant
    from sparse_mla.vllm_plugin import indexer, ran

    arch = int(sys.argv[1])
    compiled = indexer_build.compile_for("q_quant", (arch // 10, arch % 10))
    indexer_quant._indexer_q_rope_quant_kernel.device_caches[0] = ({"key": compiled}, {}, None, None, None)
    for _ in range(int(sys.argv[2])):
        indexer._CALLS["triton"] += 1          # what each adapter call does (tests/vllm_plugin/test_indexer.py)

    class Backend:
        def __init__(self, name, mla=None):
            self.name = name
            if mla is not None:                 # vLLM's backends answer is_mla(); GLM-5.3-Flash's KDA/tail are not
                self.is_mla = lambda: mla
        def get_name(self):
            return self.name

    class Prefill:                              # vLLM's FlashAttnPrefillBackend keeps its FA version
        vllm_flash_attn_version = 3
        @staticmethod
        def get_name():
            return "FLASH_ATTN"

    def layer(kind, backend, prefill=None, mla=None):
        return type(kind, (), {"attn_backend": Backend(backend, mla), "kv_cache_dtype": "auto",
                               "prefill_backend": prefill})()

    ctx = {"model.layers.0.self_attn.attn": layer("MLAAttention", "TRITON_MLA_SPARSE", Prefill()),
           "model.layers.1.self_attn.attn": layer("MLAAttention", "TRITON_MLA_SPARSE", Prefill()),
           "model.layers.0.self_attn.indexer.k_cache": layer("DeepseekV32IndexerCache", "DEEPSEEK_V32_INDEXER"),
           "model.layers.2.self_attn.attn": layer("MLAAttention", "FLASHMLA_SPARSE"),
           # a hybrid model's layers that are not MLA (GLM-5.3-Flash's KDA layer and KPool tail cache, H100 2026-12-06)
           "model.layers.3.self_attn": layer("Glm5NextLinearAttention", "GDN_ATTN", mla=False),
           "model.layers.4.self_attn.indexer.tail_cache": layer("Glm5NextTailCache", "KPOOL_TAIL", mla=False),
           "model.layers.5.self_attn.attn": layer("MLAAttention", "TRITON_MLA_SPARSE", mla=True)}
    # the MTP drafter's layer (vLLM's proposer keeps their names): counted apart from the model's
    drafter = types.SimpleNamespace(_draft_attn_layer_names={"model.layers.2.self_attn.attn"})
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(static_forward_context=ctx), drafter=drafter))
    import torch
    from sparse_mla.kernels.occupancy import planning_limits
    planning_limits(torch.device("cpu"), (arch // 10, arch % 10))     # a plan made in this process
    print(json.dumps(ran.collect(worker)))
""")


@pytest.mark.parametrize("arch,calls", [(80, 3), (89, 0)])
def test_collect_reads_the_compiled_target_the_calls_and_the_layers_in_its_own_process(arch, calls):
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(arch), str(calls)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["triton_targets"] == {"indexer_quant._indexer_q_rope_quant_kernel": [f"sm{arch}"]}
    assert got["indexer"] == {"triton": calls, "deepgemm": 0}
    assert got["attention"] == {"TRITON_MLA_SPARSE": 3}                   # an MLA backend with or without is_mla
    assert got["other_layers"] == {"GDN_ATTN": 1, "KPOOL_TAIL": 1}
    assert got["draft_attention"] == {"FLASHMLA_SPARSE": 1}
    assert got["indexer_cache"] == {"DEEPSEEK_V32_INDEXER": 1}
    assert got["mla_prefill"] == {"FLASH_ATTN FA3": 2}                    # the drafter's layer has none here
    shaped = {**got, "capability": "8.0"}                                 # what a CUDA platform would report
    assert ran.shape_errors(shaped) == [] and ran.shape_errors({**shaped, "mla_prefill": {"FLASH_ATTN FA3": 0}})
    assert got["capability"] is None and got["device_capability"] is None   # no CUDA platform, no GPU here
    assert got["triton_binaries"] == [f"sm{arch}"]
    assert got["launch_plan"] == {f"{arch // 10}.{arch % 10}": {"from": "cpu", "sm_count": 8, "smem_per_block": 232448,
                                                                "smem_per_sm": 232448}}


def test_every_kernels_module_with_a_triton_kernel_is_read():
    """``ran.KERNEL_MODULES`` names every module of ``sparse_mla.kernels`` that defines a ``@triton.jit`` kernel (the
    KPool stand-ins of 2026-12-06 were missing: an engine would have run them without ``triton_targets`` saying so)."""
    import pathlib

    import sparse_mla.kernels as k

    root = pathlib.Path(k.__file__).parent
    jitted = {f"sparse_mla.kernels.{p.stem}" for p in root.glob("*.py")         # a decorator line, not a mention
              if any(line.lstrip().startswith("@triton.jit") for line in p.read_text().splitlines())}
    assert jitted <= set(ran.KERNEL_MODULES), sorted(jitted - set(ran.KERNEL_MODULES))


def test_our_kernels_are_the_packages_triton_kernels():
    names = set(ran.our_kernels()) if os.environ.get("TRITON_INTERPRET") != "1" else None
    if names is None:                        # interpreted functions keep no compiled variants: ask a fresh process
        code = "import os; os.environ['TRITON_INTERPRET']='0'; from sparse_mla.vllm_plugin import ran; " \
               "print(' '.join(ran.our_kernels()))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "TRITON_INTERPRET": "0"})
        assert out.returncode == 0, out.stderr[-2000:]
        names = set(out.stdout.split())
    for k in ("attention._sparse_mla_fwd_kernel", "attention._sparse_mla_fp8_fwd_kernel",
              "attention._merge_splits_kernel", "indexer._prefill_logits_kernel", "indexer._paged_logits_kernel",
              "indexer_quant._indexer_q_rope_quant_kernel"):
        assert k in names, (k, sorted(names))


@pytest.fixture(scope="module")
def vllm_rules():
    """vLLM's CUDA platform importable here (the probe's extension stand-ins): the default-indexer rule is vLLM's."""
    from sparse_mla.diagnose import probe

    probe.load_vllm_extensions()


OK = {"capability": "9.0", "triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm90"]},
      "indexer": {"triton": 0, "deepgemm": 12}, "attention": {"TRITON_MLA_SPARSE": 4}}
ASK = {"backend_requested": "TRITON_MLA_SPARSE", "indexer": "vllm"}
#: an engine whose Triton indexer ran: one of its logits kernels compiled beside the attention kernel
IX90 = {"triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm90"], "indexer._prefill_logits_kernel": ["sm90"]}}
SIM80 = {"capability": "8.0", "device_capability": "9.0", "triton_binaries": ["sm90"],
         "triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm80"], "indexer._prefill_logits_kernel": ["sm80"]},
         "launch_plan": {"8.0": {"from": "DEVICE_LIMITS[8.0]", "sm_count": 108, "smem_per_block": 166912}}}


@pytest.mark.parametrize("asked,changes,expect", [
    (ASK, {}, []),
    ({**ASK, "backend_requested": "auto"}, {"attention": {"FLASH_ATTN_MLA_SPARSE": 4}, "triton_targets": {}}, []),
    # the 2026-12-01 simulated-SM80 record: vLLM and Triton saw 9.0, the record said 8.0
    ({**ASK, "capability": "8.0"}, {}, ["capability: asked 8.0"]),
    ({**ASK, "capability": "8.0"}, {"capability": "8.0"},
     ["triton_targets: vLLM saw capability 8.0", "indexer: the default asked, which at capability 8.0 is the Triton"]),
    (ASK, {"attention": {"TRITON_MLA_SPARSE": 3, "FLASH_ATTN_MLA_SPARSE": 1}}, ["attention: asked TRITON_MLA_SPARSE"]),
    (ASK, {"triton_targets": {}}, ["none of its attention kernels"]),
    ({**ASK, "indexer": "TRITON_DSA_INDEXER"}, {}, ["TRITON_DSA_INDEXER asked; the Triton indexer made 0 calls"]),
    # ours asked beside DeepGEMM doing the work; no indexer at all
    ({**ASK, "indexer": "TRITON_DSA_INDEXER"}, {"indexer": {"triton": 1, "deepgemm": 317}, **IX90},
     ["TRITON_DSA_INDEXER asked; the Triton indexer made 1 calls, DeepGEMM 317"]),
    (ASK, {"indexer": {"triton": 0, "deepgemm": 0}}, ["which at capability 9.0 is DeepGEMM; the Triton indexer made 0 calls, DeepGEMM 0"]),
    (ASK, {"indexer": {"triton": 5, "deepgemm": 0}, **IX90},
     ["indexer: the default asked, which at capability 9.0 is DeepGEMM"]),
    # Triton indexer calls with none of its kernels compiled (breaker round 17, c2_09r)
    ({**ASK, "indexer": "TRITON_DSA_INDEXER"}, {"indexer": {"triton": 5, "deepgemm": 0}},
     ["triton_targets: 5 Triton indexer calls, none of its kernels was compiled"]),
    # vLLM has no DeepGEMM at 8.0/8.6/8.9: there the default is the Triton indexer (the H200's simulated-SM80 run)
    (ASK, {"capability": "8.9", "triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm89"],
                                                   "indexer._paged_logits_kernel": ["sm89"]},
           "indexer": {"triton": 32, "deepgemm": 0}}, []),
    (ASK, {"capability": "8.0", "triton_targets": {"attention._sparse_mla_fwd_kernel": ["sm80"]}},
     ["indexer: the default asked, which at capability 8.0 is the Triton indexer; the Triton indexer made 0 calls"]),
    ({**ASK, "indexer": "TRITON_DSA_INDEXER"}, {"indexer": {"triton": 5, "deepgemm": 0}, **IX90}, []),
    # a simulation that runs the simulated GPU's code: SM80 generated, assembled for the H200, planned as an A100
    ({**ASK, "capability": "8.0"}, {**SIM80, "indexer": {"triton": 7, "deepgemm": 0}}, []),
    ({**ASK, "capability": "8.0"}, {**SIM80, "indexer": {"triton": 7, "deepgemm": 0},
                                    "launch_plan": {"8.0": {"from": "device", "sm_count": 132}}},
     ["launch_plan: vLLM saw 8.0 on a 9.0 device, and the launch was planned with the device's limits"]),
    (ASK, {"launch_plan": {"9.0": {"from": "device"}, "12.0": {"from": "DEVICE_LIMITS[12.0]"}}},
     ["launch_plan: planned for 12.0, vLLM saw 9.0"]),
    # speculation with a drafter: its layers on the backend asked for them, and apart from the model's
    ({**ASK, "draft_backend": "TRITON_MLA_SPARSE"}, {"draft_attention": {"TRITON_MLA_SPARSE": 1}}, []),
    ({**ASK, "draft_backend": "TRITON_MLA_SPARSE"}, {"draft_attention": {"FLASH_ATTN_MLA_SPARSE": 1}},
     ["draft_attention: asked TRITON_MLA_SPARSE in the drafter's layers"]),
    ({**ASK, "draft_backend": "TRITON_MLA_SPARSE"}, {}, ["draft_attention: asked TRITON_MLA_SPARSE"]),
])
def test_contradictions(asked, changes, expect, vllm_rules):
    got = ran.contradictions(asked, {**OK, **changes})
    assert len(got) == len(expect), got
    for line, want in zip(got, expect):
        assert line.startswith(want) or want in line, (line, want)


def test_no_ran_block_is_a_contradiction():
    assert ran.contradictions(ASK, None) == ["no ran block: nothing was read inside the engine"]
