"""GPU: every kernel family in both backends on the same random inputs, checked three ways —
TileLang vs the float64 reference, Triton vs the reference, and TileLang vs Triton — with
outputs poisoned first; and the two backends' schedule traces against the host reference.

Each family draws CASES random problems (seeded, so a failure names a reproducible case):
ragged M, N, K including M ∈ {1, 7, 64, 65} and K < block_k, random dtypes, row- or
column-major operands, and (scaled and batched families) random epilogues. The batched family
runs bmm on 1 to 4 GEMMs, some with one operand broadcast over the batch (stride 0).
"""

import dataclasses
import random

import pytest
import torch

import tlgemm.tilelang as TL
import tlgemm.triton as TR
from tlgemm.schedules import Schedule, num_programs, work
from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm

pytestmark = pytest.mark.gpu

DEV = "cuda"
CASES = 200
SMALL_M = (1, 7, 64, 65)
# name: (a dtype, b dtype, out dtype); float32 inputs run on the TF32 path
DTYPES = {
    "bf16": (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    "fp16": (torch.float16, torch.float16, torch.float16),
    "tf32": (torch.float32, torch.float32, torch.float32),
    "e4m3": (torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16),
    "int8": (torch.int8, torch.int8, torch.int32),
}
# The persistent families run on 16 programs: the Triton kernels take the grid size as a
# compile-time constant, so this bounds their recompiles; Stream-K keeps the SM count.
FAMILIES = {
    "persistent": (("bf16", "fp16", "tf32", "e4m3", "int8"), False,
                   Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent(16)),
    "streamk": (("bf16", "e4m3", "tf32"), False,
                Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent(132).streamk(50)),
    "scaled": (("bf16", "e4m3"), True, Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent(16)),
    "batched": (("bf16", "fp16", "tf32", "e4m3", "int8"), True,
                Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).persistent(16)),
}


def _schedule_for(base: Schedule, dtype: torch.dtype) -> Schedule:
    """One 128-byte swizzle row of K per stage (tf32: 32, 16-bit: 64, 8-bit: 128)."""
    return dataclasses.replace(base, block_k=128 // dtype.itemsize)


def _case(rng: random.Random, dtypes, epilogues: bool):
    M = rng.choice(SMALL_M) if rng.random() < 0.3 else rng.randint(1, 1500)
    N = rng.randint(1, 1500)
    K = rng.randint(1, 127) if rng.random() < 0.2 else rng.randint(1, 2048)
    dtype = rng.choice(dtypes)
    sixteen = DTYPES[dtype][0].itemsize == 2
    layouts = (rng.random() < 0.5, rng.random() < 0.5) if sixteen else (rng.random() < 0.2, rng.random() < 0.2)
    epi = {}
    if epilogues:
        epi = dict(scale_a=rng.choice([None, "tensor", "row"]), scale_b=rng.choice([None, "tensor", "col"]),
                   bias=rng.random() < 0.5)
    return M, N, K, dtype, layouts, epi


def _operand(rows, cols, dtype, generator, column_major, batch=None, broadcast=False):
    """[rows, cols] (or [batch, rows, cols], optionally one matrix expanded over the batch),
    row- or column-major."""
    lead = () if batch is None else (1 if broadcast else batch,)
    if column_major:
        t = random_operand((*lead, cols, rows), dtype, generator=generator, device=DEV).mT
    else:
        t = random_operand((*lead, rows, cols), dtype, generator=generator, device=DEV)
    return t.expand(batch, rows, cols) if broadcast else t


def _epilogue(epi, M, N, out_dtype, generator):
    kw = {}
    if epi.get("scale_a"):
        kw["scale_a"] = (torch.rand(M if epi["scale_a"] == "row" else 1, generator=generator) + 0.5).to(DEV)
    if epi.get("scale_b"):
        kw["scale_b"] = (torch.rand(N if epi["scale_b"] == "col" else 1, generator=generator) + 0.5).to(DEV)
    if epi.get("bias"):
        kw["bias"] = torch.randn(N, generator=generator).to(DEV, out_dtype)
    return kw


def _close(out, ref, dtype, what):
    """The input dtype's bound (int8: exact into int32), or bf16's for a product rounded to bf16."""
    assert_gemm_close(out, ref, dtype, allow_tf32=dtype == torch.float32, what=what)


@pytest.mark.parametrize("index", range(CASES))
@pytest.mark.parametrize("family", FAMILIES)
def test_backends_agree(family, index):
    dtypes, epilogues, base = FAMILIES[family]
    rng = random.Random(f"cross-{family}-{index}")
    generator = torch.Generator().manual_seed(rng.randrange(2**31))
    M, N, K, dtype, layouts, epi = _case(rng, dtypes, epilogues)
    a_dtype, b_dtype, out_dtype = DTYPES[dtype]
    if (epi.get("scale_a") or epi.get("scale_b") or epi.get("bias")) and out_dtype == torch.int32:
        out_dtype = torch.bfloat16  # exact int32 products, rounded to bf16 by the epilogue
    schedule = _schedule_for(base, a_dtype)
    batch, shared = None, None
    if family == "batched":
        M, N, batch = min(M, 600), min(N, 600), rng.randint(1, 4)
        shared = rng.choice([None, None, "a", "b"])
    a = _operand(M, K, a_dtype, generator, layouts[0], batch, shared == "a")
    b = _operand(K, N, b_dtype, generator, layouts[1], batch, shared == "b")
    kw = _epilogue(epi, M, N, out_dtype, generator)
    ref = reference_gemm(a, b, **kw)
    what = f"M={M} N={N} K={K} batch={batch} shared={shared} {dtype} layouts={layouts} epilogue={epi}"
    outs = {}
    for name, backend in (("tilelang", TL), ("triton", TR)):
        out = poisoned((M, N) if batch is None else (batch, M, N), out_dtype, DEV)
        (backend.matmul if batch is None else backend.bmm)(a, b, schedule, out=out, **kw)
        _close(out, ref, a_dtype, f"{what} [{name} vs reference]")
        outs[name] = out
    _close(outs["tilelang"], outs["triton"].to(torch.float64), a_dtype, f"{what} [tilelang vs triton]")


@pytest.mark.parametrize("schedule", [
    Schedule().persistent(), Schedule(group_size_m=4, raster="n").persistent(),
    Schedule().persistent().streamk(40), Schedule(block_m=64, block_n=256).persistent().streamk(9),
], ids=["persistent", "grouped-n", "streamk", "streamk-64x256"])
@pytest.mark.parametrize("shape", [(2000, 3000, 700), (100, 4000, 1000), (64, 64, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_traces_agree(shape, schedule):
    M, N, K = shape
    tilelang_trace = TL.schedule_trace(M, N, K, schedule, num_sms=132)
    triton_trace = TR.schedule_trace(M, N, K, schedule, num_sms=132)
    host = [work(p, M, N, K, schedule, 132) for p in range(num_programs(M, N, K, schedule, 132))]
    assert triton_trace == host
    assert tilelang_trace == host
