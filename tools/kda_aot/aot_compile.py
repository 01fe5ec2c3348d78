"""AOT-compile every captured KDA-layer kernel specialization for SM80/86/89/90/120 with
triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", CAP, 32)).
Usage: aot_compile.py [first|all] [nproc]
Reads captured.pkl from and writes results_<mode>.json (and a Triton cache) into $KDA_AOT_OUT (default: the
current folder).
"""
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import traceback

OUT = os.path.abspath(os.environ.get("KDA_AOT_OUT", "."))   # where captured.pkl is and results_<mode>.json go
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(OUT, "triton_cache"))
os.environ["TRITON_INTERPRET"] = "0"
os.environ.pop("TRITON_OVERRIDE_ARCH", None)

HERE = os.path.dirname(os.path.abspath(__file__))
CAPS = [80, 86, 89, 90, 120]
SMEM_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448, 120: 101376}


def setup():
    import stand_in_driver   # this folder: the script's own

    stand_in_driver.install()
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability
    P = type(current_platform)
    P.is_arch_support_pdl = classmethod(lambda cls: False)
    P.get_device_name = classmethod(lambda cls, *a, **k: "FAKE NVIDIA A100")
    P.get_device_capability = classmethod(lambda cls, *a, **k: DeviceCapability(8, 0))
    from vllm.triton_utils import HAS_TRITON
    assert HAS_TRITON
    import vllm.models.glm5next.nvidia.ops.third_party.kda.kernels  # noqa: F401
    import vllm.third_party.flash_linear_attention.ops.kda  # noqa: F401
    import vllm.model_executor.layers.mamba.ops.causal_conv1d  # noqa: F401
    import vllm.model_executor.layers.mamba.ops.gather_initial_states  # noqa: F401
    import vllm.model_executor.layers.mamba.ops.scatter_states  # noqa: F401


def get_jit(module, name):
    import importlib
    from triton.runtime.jit import JITFunction
    obj = getattr(importlib.import_module(module), name)
    while not isinstance(obj, JITFunction):
        obj = obj.fn
    return obj


def resources(compiled):
    import triton
    shared = int(compiled.metadata.shared)
    regs = stack = None
    try:
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "k.cubin")
            open(p, "wb").write(compiled.asm["cubin"])
            out = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "--dump-resource-usage", p],
                                 capture_output=True, text=True).stdout
        m = re.search(r"REG:(\d+) STACK:(\d+)", out)
        if m:
            regs, stack = int(m[1]), int(m[2])
    except Exception as e:  # noqa: BLE001
        regs = f"cuobjdump failed: {e}"
    return shared, regs, stack


def compile_one(task):
    d, cap = task
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    fn = get_jit(d["module"], d["name"])
    consts = dict(d["constants"])
    if "launch_pdl" in fn.arg_names:  # vLLM: current_platform.is_arch_support_pdl() == (major >= 9)
        consts[(fn.arg_names.index("launch_pdl"),)] = cap >= 90
    src = ASTSource(fn=fn, signature=d["signature"], constexprs=consts, attrs=d["attrs"])
    opts = dict(num_warps=d["num_warps"], num_stages=d["num_stages"], num_ctas=d["num_ctas"], arch=f"sm{cap}")
    t0 = time.time()
    res = dict(call=d["call"], name=d["name"], cfg_idx=d["cfg_idx"], n_cfgs=d["n_cfgs"], cap=cap,
               num_warps=d["num_warps"], num_stages=d["num_stages"],
               cfg_kwargs=d.get("cfg_kwargs"))
    try:
        ck = triton.compile(src, target=GPUTarget("cuda", cap, 32), options=opts)
        shared, regs, stack = resources(ck)
        ptx = ck.asm.get("ptx", "")
        res.update(ok=True, shared=shared, regs=regs, stack=stack,
                   smem_fits=shared <= SMEM_LIMIT[cap],
                   ptx_target=(re.search(r"\.target\s+(\S+)", ptx) or [None, None])[1],
                   uses_wgmma="wgmma" in ptx, uses_mma="mma.sync" in ptx,
                   uses_cp_async_bulk="cp.async.bulk" in ptx, uses_griddepcontrol="griddepcontrol" in ptx)
    except Exception as e:  # noqa: BLE001
        lines = (f"{type(e).__name__}: {e}").splitlines()
        res.update(ok=False, error="\n".join(lines[:12]))
    res["secs"] = round(time.time() - t0, 1)
    return res


def _init():
    setup()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "first"
    nproc = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    C = pickle.load(open(os.path.join(OUT, "captured.pkl"), "rb"))
    # dedupe identical specializations (e.g. l2norm for q and for k)
    uniq, seen = [], set()
    for d in C:
        key = (d["name"], repr(sorted(d["signature"].items())), repr(sorted(d["constants"].items())),
               repr(sorted(d["attrs"].items())), d["num_warps"], d["num_stages"])
        if key in seen:
            continue
        seen.add(key)
        if mode == "first" and d["cfg_idx"] not in (None, 0):
            continue
        uniq.append(d)
    tasks = [(d, cap) for d in uniq for cap in CAPS]
    print(f"{len(uniq)} specializations x {len(CAPS)} targets = {len(tasks)} compiles", flush=True)
    import multiprocessing as mp
    out = []
    with mp.get_context("fork").Pool(nproc, initializer=_init) as pool:
        for r in pool.imap_unordered(compile_one, tasks):
            out.append(r)
            s = (f"ok smem={r['shared']} regs={r['regs']} stack={r['stack']} fits={r['smem_fits']}"
                 if r["ok"] else "FAIL " + r["error"].splitlines()[0][:200])
            print(f"[{len(out)}/{len(tasks)}] sm{r['cap']} {r['name']} cfg={r['cfg_idx']} {s} ({r['secs']}s)",
                  flush=True)
            if len(out) % 20 == 0:
                json.dump(out, open(os.path.join(OUT, f"results_{mode}.json"), "w"), indent=1)
    json.dump(out, open(os.path.join(OUT, f"results_{mode}.json"), "w"), indent=1)
