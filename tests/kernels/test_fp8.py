"""``sparse_mla.kernels.fp8``: the software e4m3 path (SM80/86) against PyTorch's ``float8_e4m3fn``, bit for bit, under
the interpreter; both paths compiled ahead of time (the hardware one must fail below SM89, which is why the software
one exists)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from sparse_mla.kernels.fp8 import has_fp8_conversion, roundtrip


@pytest.mark.interpreter
def test_decode_all_256_codes_bit_exact():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ref = codes.view(torch.float8_e4m3fn).float()
    values = torch.full((256,), 12345.0)
    values, recoded, _ = roundtrip(codes, torch.zeros(256), hw=False)
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(values), nan) and int(nan.sum()) == 2          # 0x7F and 0xFF
    assert torch.equal(values[~nan].view(torch.int32), ref[~nan].view(torch.int32))  # -0.0 and subnormals included
    assert torch.equal(recoded[~nan], codes[~nan])


@pytest.mark.interpreter
@pytest.mark.parametrize("seed", [0, 1])
def test_encode_rounds_like_torch(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.randn(4000, generator=g) * s for s in (2e-3, 0.02, 0.5, 20.0, 150.0)])
    grid = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()
    grid = grid[torch.isfinite(grid)].unique()
    mids = (grid[1:] + grid[:-1]) / 2                               # every tie between neighbouring codes
    x = torch.cat([x, grid, mids, -mids, torch.tensor([0.0, -0.0])]).clamp(-448.0, 448.0)
    _, _, enc = roundtrip(torch.zeros(x.numel(), dtype=torch.uint8), x, hw=False)
    assert torch.equal(enc, x.to(torch.float8_e4m3fn).view(torch.uint8))


@pytest.mark.interpreter
def test_roundtrip_reads_a_float8_tensor_as_its_bytes():
    """A ``float8_e4m3fn`` tensor in place of its uint8 view failed in the kernel (an InterpreterError "cannot cast")."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    want = roundtrip(codes, torch.zeros(256), hw=False)
    got = roundtrip(codes.view(torch.float8_e4m3fn), torch.zeros(256), hw=False)
    assert all(torch.equal(a.view(torch.int32) if a.is_floating_point() else a,
                           b.view(torch.int32) if b.is_floating_point() else b) for a, b in zip(got, want))


@pytest.mark.parametrize("codes, x, hw, says", [
    (torch.zeros(4, dtype=torch.int64), torch.zeros(4), True, "codes dtype torch.int64 is not accepted"),
    (torch.zeros(4), torch.zeros(4), False, "codes dtype torch.float32 is not accepted"),
    ([1, 2], torch.zeros(2), False, "codes must be a torch.Tensor, got list"),
    (torch.zeros(4, dtype=torch.uint8), torch.zeros(4, dtype=torch.int32), False, "x dtype torch.int32"),
    (torch.zeros(4, dtype=torch.uint8), torch.zeros(5), False, "same number of elements, got 4 and 5"),
    (torch.zeros(4, dtype=torch.uint8), torch.zeros(4), "no", "hw 'no' is not accepted"),
])
def test_roundtrip_bad_input_is_one_user_error(codes, x, hw, says):
    """These gave an InterpreterError (int64 codes, hw path), an AttributeError (a list), a plain ValueError (sizes),
    or ran ("no" taken as the hardware path; float codes converted by value, not read as codes)."""
    from sparse_mla.errors import UserInputError

    with pytest.raises(UserInputError, match=says):
        roundtrip(codes, x, hw)


def test_has_fp8_conversion():
    assert [has_fp8_conversion(c) for c in [(8, 0), (8, 6), (8, 9), (9, 0), (12, 0)]] == [False, False, True, True,
                                                                                            True]


SCRIPT = r"""
import json, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from sparse_mla.kernels import fp8
K = fp8._roundtrip_kernel
out = {}
for cap in (80, 86, 89, 120):
    for hw in (False, True):
        sig = {"Codes": "*u8", "Values": "*fp32", "Recoded": "*u8", "X": "*fp32", "Encoded": "*u8", "N": "i32",
               "HW": "constexpr", "BLOCK": "constexpr"}
        src = ASTSource(fn=K, signature=sig, constexprs={(K.arg_names.index("HW"),): hw,
                                                        (K.arg_names.index("BLOCK"),): 256})
        try:
            k = triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"num_warps": 4})
            out[f"{cap}-{hw}"] = "e4m3x2" in k.asm["ptx"]
        except Exception as e:  # noqa: BLE001 -- recorded with its root cause; the test decides what is expected
            root = e
            while root.__cause__ or root.__context__:
                root = root.__cause__ or root.__context__
            out[f"{cap}-{hw}"] = f"refused: {type(root).__name__}: {root}"
print(json.dumps(out))
"""


def test_compiles_for_every_target():
    env = dict(os.environ, TRITON_INTERPRET="0")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for cap in (80, 86, 89, 120):
        assert got[f"{cap}-False"] is False            # software path: builds everywhere, no fp8 conversion in it
    for cap in (80, 86):                             # hardware path: Triton refuses fp8e4nv below SM89, and only that
        assert got[f"{cap}-True"] == ("refused: ValueError: type fp8e4nv not supported in this architecture. The "
                                      "supported fp8 dtypes are ('fp8e4b15', 'fp8e5')"), got[f"{cap}-True"]
    assert got["89-True"] is True and got["120-True"] is True
