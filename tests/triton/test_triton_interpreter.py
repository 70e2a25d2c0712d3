"""The Triton kernels and stages run in the Triton interpreter (CPU) against the float64
reference: ragged shapes, fp32/fp16/bf16 (plus int8 and fp8), persistent and Stream-K, any
strides, every epilogue. Outputs are NaN-poisoned so an unwritten element fails."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import triton.language as tl
from triton.language.core import _aggregate

from tlgemm._checks import _STREAM_WORKSPACES
from tlgemm.schedules import (
    Schedule,
    chiplet_transform,
    chiplet_transform_chunked,
    num_tiles,
    streamk_plan,
    tile_contributors,
)
from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm
from tlgemm.triton.shim import aggregate

SHAPES = [(37, 53, 29), (1, 64, 128), (130, 70, 300)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Small blocks keep the interpreter quick while giving several tiles and K-steps.
PERSISTENT = Schedule(block_m=32, block_n=32, block_k=32, group_size_m=2).persistent(3)
STREAMK = Schedule(block_m=32, block_n=32, block_k=32, group_size_m=2, raster="n").streamk(4).persistent(7)
SCHEDULES = {"persistent": PERSISTENT, "streamk": STREAMK}


def _coarser(*dtypes):
    """The dtype with the loosest tolerance (the output rounding may dominate)."""
    order = [torch.float32, torch.float16, torch.bfloat16]
    return max(dtypes, key=order.index)


def _scales(M, N, generator, kind):
    if kind == "per_tensor":
        return torch.rand(1, generator=generator) + 0.5, torch.rand(1, generator=generator) + 0.5
    return torch.rand(M, generator=generator) + 0.5, torch.rand(N, generator=generator) + 0.5


@pytest.mark.parametrize("kernel", SCHEDULES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_matches_reference(interp, generator, shape, dtype, kernel):
    M, N, K = shape
    a = random_operand((M, K), dtype, generator=generator)
    b = random_operand((K, N), dtype, generator=generator)
    out = poisoned((M, N), dtype, "cpu")
    assert interp.triton.matmul(a, b, SCHEDULES[kernel], out=out) is out
    assert_gemm_close(out, reference_gemm(a, b), dtype)


@pytest.mark.parametrize("kernel", SCHEDULES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scale_kind", ["per_tensor", "per_row_col"])
@pytest.mark.parametrize("shape", [(37, 53, 29), (130, 70, 300)], ids=lambda s: "x".join(map(str, s)))
def test_scaled_gemm_with_bias(interp, generator, shape, scale_kind, dtype, kernel):
    M, N, K = shape
    a = random_operand((M, K), dtype, generator=generator)
    b = random_operand((K, N), dtype, generator=generator)
    scale_a, scale_b = _scales(M, N, generator, scale_kind)
    bias = random_operand((N,), dtype, generator=generator)
    out = poisoned((M, N), torch.bfloat16, "cpu")
    interp.triton.matmul(a, b, SCHEDULES[kernel], out=out, scale_a=scale_a, scale_b=scale_b, bias=bias)
    ref = reference_gemm(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias)
    assert_gemm_close(out, ref, _coarser(dtype, torch.bfloat16))


@pytest.mark.parametrize("kernel", SCHEDULES)
@pytest.mark.parametrize("which", ["scale_a", "scale_b", "bias"])
def test_single_epilogue_operand(interp, generator, which, kernel):
    """Each of scale_a (per row), scale_b (per column), bias alone; the other scale is 1."""
    M, N, K = 45, 38, 70
    a = random_operand((M, K), torch.float32, generator=generator)
    b = random_operand((K, N), torch.float32, generator=generator)
    extra = {"scale_a": torch.rand(M, generator=generator) + 0.5, "scale_b": torch.rand(N, generator=generator) + 0.5,
             "bias": torch.randn(N, generator=generator)}
    kwargs = {which: extra[which]}
    out = poisoned((M, N), torch.float32, "cpu")
    interp.triton.matmul(a, b, SCHEDULES[kernel], out=out, **kwargs)
    assert_gemm_close(out, reference_gemm(a, b, **kwargs), torch.float32)


def test_bias_is_per_column(interp, generator):
    """The chosen convention: bias has length N and is added to every row (torch.addmm)."""
    M, N, K = 20, 36, 16
    a = random_operand((M, K), torch.float32, generator=generator)
    b = random_operand((K, N), torch.float32, generator=generator)
    bias = torch.randn(N, generator=generator)
    out = interp.triton.matmul(a, b, PERSISTENT, bias=bias)
    torch.testing.assert_close(out, torch.addmm(bias, a, b), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"^bias: expected \[36\] or \[1, 36\], got shape \[20\]$"):
        interp.triton.matmul(a, b, PERSISTENT, bias=torch.randn(M, generator=generator))
    square = random_operand((K, M), torch.float32, generator=generator)
    for bias in (torch.randn(M, 1, generator=generator), torch.randn(N, 1, generator=generator)):
        # an [M, 1] bias is per row (torch broadcasting): as many elements as a per-column one of a
        # square product, so it was added per column; [N, 1] does not broadcast to [M, N] at all
        with pytest.raises(ValueError, match=r"^bias: expected \[\d+\] or \[1, \d+\], got shape \[\d+, 1\]$"):
            interp.triton.matmul(a, square if bias.shape[0] == M else b, PERSISTENT, bias=bias)


@pytest.mark.parametrize("kernel", SCHEDULES)
@pytest.mark.parametrize("a_layout", ["row", "col"])
@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_any_strides(interp, generator, a_layout, b_layout, kernel):
    """Row- or column-major A and B, a sliced (padded) A and a transposed output."""
    M, N, K = 37, 53, 70
    a = random_operand((M, K) if a_layout == "row" else (K, M), torch.float16, generator=generator)
    a = a if a_layout == "row" else a.T
    b = random_operand((K, N) if b_layout == "row" else (N, K), torch.float16, generator=generator)
    b = b if b_layout == "row" else b.T
    out = poisoned((N, M), torch.float16, "cpu").T
    interp.triton.matmul(a, b, SCHEDULES[kernel], out=out)
    assert_gemm_close(out, reference_gemm(a, b), torch.float16)
    padded = random_operand((M, K + 9), torch.float16, generator=generator)[:, 3:K + 3]
    out = poisoned((M, N), torch.float16, "cpu")
    interp.triton.matmul(padded, b, SCHEDULES[kernel], out=out)
    assert_gemm_close(out, reference_gemm(padded, b), torch.float16)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # K = 0: masked lanes wrap modulo 0
@pytest.mark.parametrize("kernel", SCHEDULES)
@pytest.mark.parametrize("K", [0, 5, 32])
def test_short_k(interp, generator, K, kernel):
    """K = 0 (one fully masked step: zeros, then the epilogue), K < block_k, K = block_k."""
    M, N = 33, 40
    a = random_operand((M, K), torch.float32, generator=generator)
    b = random_operand((K, N), torch.float32, generator=generator)
    bias = torch.randn(N, generator=generator)
    out = poisoned((M, N), torch.float32, "cpu")
    interp.triton.matmul(a, b, SCHEDULES[kernel], out=out, bias=bias)
    assert_gemm_close(out, reference_gemm(a, b, bias=bias), torch.float32)


@pytest.mark.parametrize("kernel", SCHEDULES)
def test_int8_exact_and_scaled(interp, generator, kernel):
    M, N, K = 37, 53, 100
    a = random_operand((M, K), torch.int8, generator=generator)
    b = random_operand((K, N), torch.int8, generator=generator)
    out = poisoned((M, N), torch.int32, "cpu")
    interp.triton.matmul(a, b, SCHEDULES[kernel], out=out)
    assert torch.equal(out, (a.long() @ b.long()).int())
    scale_a, scale_b = _scales(M, N, generator, "per_row_col")
    out = interp.triton.matmul(a, b, SCHEDULES[kernel], scale_a=scale_a, scale_b=scale_b, out_dtype=torch.float32)
    assert_gemm_close(out, reference_gemm(a, b, scale_a=scale_a, scale_b=scale_b), torch.float32)


@pytest.mark.parametrize("kernel", SCHEDULES)
@pytest.mark.parametrize("dtypes", [(torch.float8_e4m3fn,) * 2, (torch.float8_e5m2,) * 2,
                                    (torch.float8_e4m3fn, torch.float8_e5m2)], ids=str)
def test_fp8(interp, generator, dtypes, kernel):
    M, N, K = 37, 53, 70
    a = random_operand((M, K), dtypes[0], generator=generator)
    b = random_operand((K, N), dtypes[1], generator=generator)
    scale_a, scale_b = _scales(M, N, generator, "per_tensor")
    out = poisoned((M, N), torch.bfloat16, "cpu")
    interp.triton.matmul(a, b, SCHEDULES[kernel], out=out, scale_a=scale_a, scale_b=scale_b)
    assert_gemm_close(out, reference_gemm(a, b, scale_a=scale_a, scale_b=scale_b), torch.float8_e4m3fn)


def test_streamk_split_patterns(interp, generator):
    """Stream-K tiles split over 2-3 programs, programs spanning several tiles, and more
    programs than Stream-K iterations (q = 0): every partial is added exactly once."""
    M, N, K = 96, 64, 300  # 3 x 2 tiles of 32 x 32, 10 K-iterations each
    a = random_operand((M, K), torch.float32, generator=generator)
    b = random_operand((K, N), torch.float32, generator=generator)
    base = Schedule(block_m=32, block_n=32, block_k=32)
    for tiles, sms in [(6, 4), (6, 9), (2, 3), (1, 16), (3, 5)]:
        out = poisoned((M, N), torch.float32, "cpu")
        interp.triton.streamk_matmul(a, b, base.streamk(tiles).persistent(sms), out=out)
        assert_gemm_close(out, reference_gemm(a, b), torch.float32, what=f"streamk_tiles={tiles} num_sms={sms}")


def test_streamk_reuses_its_workspace(interp, generator):
    """Repeated Stream-K launches share one workspace, which each launch leaves with its
    counters zero: a counter left non-zero would tell a later launch to store a tile early."""
    M, N, K = 96, 64, 300
    s = Schedule(block_m=32, block_n=32, block_k=32).streamk(6).persistent(4)
    for _ in range(3):
        a = random_operand((M, K), torch.float32, generator=generator)
        b = random_operand((K, N), torch.float32, generator=generator)
        out = poisoned((M, N), torch.float32, "cpu")
        interp.triton.streamk_matmul(a, b, s, out=out)
        assert_gemm_close(out, reference_gemm(a, b), torch.float32)
        (partials, counters), = [w for k, w in _STREAM_WORKSPACES.items() if k[2:7] == ("triton", 4, 32, 32, 6)]
        assert partials.shape == (4, 2, 32, 32) and counters.tolist() == [0] * 6


def test_streamk_counters_cover_the_split_tiles_only(interp, generator):
    """streamk_tiles beyond the tile count means every tile (``Schedule.streamk``): one counter
    per split tile, not streamk_tiles of them (10**9 would ask for 4 GB)."""
    M, N, K = 40, 40, 64
    s = Schedule(block_m=32, block_n=32, block_k=32).streamk(10**9).persistent(3)
    a = random_operand((M, K), torch.float32, generator=generator)
    b = random_operand((K, N), torch.float32, generator=generator)
    out = poisoned((M, N), torch.float32, "cpu")
    interp.triton.streamk_matmul(a, b, s, out=out)
    assert_gemm_close(out, reference_gemm(a, b), torch.float32)
    (_, counters), = [w for k, w in _STREAM_WORKSPACES.items() if k[2:7] == ("triton", 3, 32, 32, 4)]
    assert counters.tolist() == [0] * 4


@pytest.mark.parametrize("M, N, K, tiles, sms", [(96, 64, 300, 6, 4), (96, 64, 300, 6, 9), (64, 64, 500, 4, 3),
                                                 (32, 32, 160, 1, 4)])
def test_streamk_fixup_stores_each_split_tile_once(interp, M, N, K, tiles, sms):
    """Exactly one contributor of each split tile (the last to publish) is told to store, and
    the total it reads holds every contributor's partial once."""
    s = Schedule(block_m=32, block_n=32, block_k=32).streamk(tiles).persistent(sms)
    plan = streamk_plan(M, N, K, s)
    T = num_tiles(M, N, s)
    partials = torch.full((sms, 2, 32, 32), float("nan"))
    counters = torch.zeros(plan.streamk_tiles, dtype=torch.int32)
    stores = torch.zeros(T, dtype=torch.int32)
    totals = torch.full((T, 32, 32), float("nan"))
    interp.probes.streamk_fixup_probe[(sms,)](partials, counters, stores, totals, M, N, K, BLOCK_M=32, BLOCK_N=32,
                                             BLOCK_K=32, NUM_SMS=sms, STREAMK_TILES=tiles)
    split = [t for t in range(T) if t >= plan.full_tiles and len(tile_contributors(t, plan)) > 1]
    assert split, "the case must split some tile"
    assert stores.tolist() == [int(t in split) for t in range(T)]
    for t in split:
        assert torch.equal(totals[t], torch.full((32, 32), float(plan.iters_per_tile)))
    assert counters.tolist() == [0] * (T - plan.full_tiles)  # the completing program resets its tile's


def test_chiplet_schedule_gemm(interp, generator):
    M, N, K = 130, 70, 64
    a = random_operand((M, K), torch.float32, generator=generator)
    b = random_operand((K, N), torch.float32, generator=generator)
    for s in [PERSISTENT.chiplet(2, 2), STREAMK.chiplet(3, 1), Schedule(block_m=16, block_n=32).chiplet(4, 2)]:
        out = poisoned((M, N), torch.float32, "cpu")
        interp.triton.matmul(a, b, s, out=out)
        assert_gemm_close(out, reference_gemm(a, b), torch.float32, what=str(s))


# ---- single stages ---------------------------------------------------------------------------


@pytest.mark.parametrize("M, N, pid_m, pid_n", [(70, 53, 2, 1), (5, 3, 0, 0), (64, 96, 1, 2)])
def test_tile_layout_masks_raw_indices_then_wraps(interp, M, N, pid_m, pid_n):
    BM, BN = 32, 32
    rm, rn = torch.empty(BM, dtype=torch.int32), torch.empty(BN, dtype=torch.int32)
    mask = torch.empty((BM, BN), dtype=torch.int8)
    interp.probes.tile_layout_probe[(1,)](rm, rn, mask, pid_m, pid_n, M, N, BLOCK_M=BM, BLOCK_N=BN)
    raw_m, raw_n = pid_m * BM + torch.arange(BM), pid_n * BN + torch.arange(BN)
    assert torch.equal(rm.long(), raw_m % M)
    assert torch.equal(rn.long(), raw_n % N)
    assert torch.equal(mask.bool(), (raw_m[:, None] < M) & (raw_n[None, :] < N))


@pytest.mark.parametrize("programs, xcds, chunk", [(16, 8, 1), (13, 4, 2), (30, 8, 3), (7, 2, 4), (64, 8, 4)])
def test_device_chiplet_transforms_match_host(interp, programs, xcds, chunk):
    plain, chunked = torch.empty(programs, dtype=torch.int32), torch.empty(programs, dtype=torch.int32)
    interp.probes.chiplet_probe[(programs,)](plain, chunked, NUM_XCDS=xcds, CHUNK_SIZE=chunk)
    assert plain.tolist() == [chiplet_transform(p, programs, xcds) for p in range(programs)]
    assert chunked.tolist() == [chiplet_transform_chunked(p, programs, xcds, chunk) for p in range(programs)]


@pytest.mark.parametrize("K", [64, 50])
def test_reduce_tile_step_by_step(interp, generator, K):
    """The reference API's per-step loop: reduce_tile, a masked boundary step, store."""
    M, N, BM, BN, BK = 40, 24, 16, 16, 16
    a = random_operand((K, M), torch.float32, generator=generator).T
    b = random_operand((K, N), torch.float32, generator=generator)
    c = poisoned((M, N), torch.float32, "cpu")
    grid = (triton_cdiv(M, BM), triton_cdiv(N, BN))
    interp.probes.reduce_tile_probe[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                          BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
    assert_gemm_close(c, reference_gemm(a, b), torch.float32)


def test_output_view_load_and_user_mask(interp, generator):
    M, N, BM, BN = 20, 24, 16, 16
    c = torch.randn((M, N), generator=generator)
    expected = c * 2
    expected[:, ::BN] = c[:, ::BN]
    interp.probes.output_load_probe[(2, 2)](c, M, N, *c.stride(), BLOCK_M=BM, BLOCK_N=BN)
    assert torch.equal(c, expected)


def triton_cdiv(a, b):
    return -(-a // b)


# ---- the interpreter shim --------------------------------------------------------------------


def test_shim_keeps_aggregate_methods_under_the_interpreter():
    """Without the shim, @aggregate drops @triton.jit methods under TRITON_INTERPRET=1."""
    import triton

    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = True

        class Pair:
            first: tl.tensor
            second: tl.tensor

            @triton.constexpr_function
            def __init__(self, first, second):
                self.first = first
                self.second = second

            @triton.jit
            def total(self):
                return self.first + self.second

        plain, shimmed = _aggregate(Pair), aggregate(Pair)
    assert not hasattr(plain, "total")
    assert callable(shimmed.total)


def test_under_real_triton_interpret_env():
    """TRITON_INTERPRET=1 set before triton is imported (a fresh process): the stages and
    both kernels run through the shim alone."""
    script = textwrap.dedent("""
        import torch
        from triton.runtime.interpreter import InterpretedFunction
        import tlgemm.triton as T
        from tlgemm.triton.kernels import streamk_gemm_kernel
        from tlgemm.schedules import Schedule, num_programs, work
        from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm
        assert isinstance(streamk_gemm_kernel, InterpretedFunction)
        g = torch.Generator().manual_seed(7)
        a = random_operand((37, 29), torch.bfloat16, generator=g)
        b = random_operand((29, 53), torch.bfloat16, generator=g)
        bias = random_operand((53,), torch.bfloat16, generator=g)
        base = Schedule(block_m=16, block_n=32, block_k=16)
        for s in (base.persistent(3), base.streamk(5).persistent(4)):
            out = poisoned((37, 53), torch.bfloat16, "cpu")
            T.matmul(a, b, s, out=out, bias=bias)
            assert_gemm_close(out, reference_gemm(a, b, bias=bias), torch.bfloat16)
            P = num_programs(37, 53, 29, s)
            assert T.schedule_trace(37, 53, 29, s, device="cpu") == [work(p, 37, 53, 29, s) for p in range(P)]
        print("interpreted ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "interpreted ok" in result.stdout, result.stderr[-4000:]


@pytest.mark.parametrize("streamk", [False, True], ids=["persistent", "streamk"])
def test_cached_launch_passes_what_the_full_path_passes(interp, monkeypatch, generator, streamk):
    """``tlgemm.triton.cached_launch`` (the repeat of a call, straight to the compiled kernel)
    hands the kernel the same arguments as ``matmul``'s whole path for tensors of the same
    signatures, its compile-time ones in the kernel's parameter order: each path's launch is
    recorded instead of run (the CUDA-only parts stand in for a device)."""
    L = interp.triton.launch
    s = Schedule(block_m=32, block_n=32, block_k=32).persistent(4)
    s = s.streamk(3) if streamk else s
    kernel = L.streamk_gemm_kernel if streamk else L.persistent_gemm_kernel
    full = []
    monkeypatch.setattr(L, "_PLANS", {})
    monkeypatch.setattr(L, "_launch", lambda k, grid, schedule, args, meta, runners: full.append((k, args, meta)))

    def operands():
        return (random_operand((96, 200), torch.float32, generator=generator),
                random_operand((200, 64), torch.float32, generator=generator).T.contiguous().T,
                torch.empty((96, 64), dtype=torch.float32))

    a, b, out = operands()
    L.matmul(a, b, s, out=out)
    (k, args, meta), = full
    assert k is kernel
    constants = tuple(meta[name] for name in kernel.arg_names[len(args):])
    (plan,) = L._PLANS.values()
    recorded = []
    plan.runners[(kernel, 0)] = (lambda *values: recorded.append(values), constants)
    monkeypatch.setattr(L, "_INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    launch = L.cached_launch(a, b, s, out)
    a2, b2, out2 = operands()
    assert launch(a2, b2, out2) is out2
    L.matmul(a2, b2, s, out=out2)
    expected = (*full[1][1], *constants)
    (values,) = recorded
    assert len(values) == len(expected)
    for got, want in zip(values, expected):
        assert got is want if isinstance(want, torch.Tensor) else got == want



@pytest.mark.parametrize("dtype, K, N, b_layout", [
    (torch.bfloat16, 29, 53, "row"), (torch.float32, 30, 48, "col"), (torch.float16, 64, 21, "row"),
    (torch.float16, 64, 21, "col"), (torch.bfloat16, 64, 1, "row")], ids=str)
@pytest.mark.parametrize("batched", [False, True], ids=["matmul", "bmm"])
def test_unaligned_rows_are_copied_for_vector_loads(interp, monkeypatch, generator, dtype, K, N, b_layout, batched):
    """K rows that are no multiple of 16 bytes: the kernel gets K-major copies of both operands
    with K zero-padded to 128-byte rows, and as its K, K rounded up to block_k (its K-iterations
    those of tlgemm.schedules; the copies' width added up to three all-zero ones). Otherwise an operand whose rows
    along its unit stride are none (b [K, N] row-major with N = 21) is copied K-major, one
    whose rows are (b column-major; a single column) read as it is. Results against float64
    on a poisoned ``out``; a call that copies is never a cached launch."""
    L = interp.triton.launch
    s = Schedule(block_m=32, block_n=32, block_k=32).persistent(3)
    launches = []
    real = L._launch
    monkeypatch.setattr(L, "_PLANS", {})
    monkeypatch.setattr(L, "_launch", lambda k, grid, schedule, args, meta, runners: (
        launches.append(args), real(k, grid, schedule, args, meta, runners)))
    lead = (2,) if batched else ()
    a = random_operand((*lead, 37, K), dtype, generator=generator)
    b = random_operand((*lead, K, N), dtype, generator=generator)
    if b_layout == "col":
        b = b.mT.contiguous().mT
    out = poisoned((*lead, 37, N), dtype, "cpu")
    assert (L.bmm if batched else L.matmul)(a, b, s, out=out) is out
    assert_gemm_close(out, a.double() @ b.double(), dtype)
    (args,), size = launches, dtype.itemsize
    A, B = args[:2]
    pad = (K * size) % 16 != 0
    b_copied = pad or (b_layout == "row" and N > 1 and (N * size) % 16 != 0)
    assert A.shape[-1] == B.shape[-2] == (K + (-K) % (128 // size) if pad else K)
    assert args[9 if batched else 8] == K + (-K) % s.block_k, "the kernel's K: whole K blocks"
    if pad and not batched:  # K blocks wider than the copies' rows: the kernel's K is the copies' width, masked
        deep = Schedule(block_m=32, block_n=32, block_k=128).persistent(3)
        plan = L._plan(a, b, deep, None, None, None, None, None, False, None, False)
        assert plan.K == plan.K_copy == A.shape[-1] < 128 and plan.meta["EVEN_K"] is False
    assert (A is a) == (not pad) and (B is b) == (not b_copied)
    if b_copied:
        assert A.stride()[-1] == 1 and B.stride()[-2] == 1, "copies K-major"
        assert A[..., K:].abs().sum() == 0 and B[..., K:, :].abs().sum() == 0
    if not batched:  # a compiled kernel kept for the plan, as on a GPU: only a copying call declines it
        (plan,) = L._PLANS.values()
        plan.runners[(L.persistent_gemm_kernel, 0)] = (lambda *values: None, ())
        monkeypatch.setattr(L, "_INTERPRETED", False)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        assert (L.cached_launch(a, b, s, out) is None) == b_copied


def test_padded_copies_beyond_int32_indexing_are_an_error(interp):
    """An operand under 2**31 elements whose zero-padded K-major copy is not (fp16 K = 127 padded
    to 128) is refused with the copy's size; it overflowed the kernels' int32 offsets."""
    a = torch.zeros(1, 127, dtype=torch.float16).expand(16_900_000, 127)
    b = torch.zeros(127, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"^a: its K-major copy, K zero-padded from 127 to 128 \(rows of whole "
                                         r"128-byte multiples\) holds 2163200000 elements; the Triton kernels index "
                                         r"in int32 \(< 2\*\*31\)$"):
        interp.triton.matmul(a, b, Schedule(block_m=256, block_n=16, block_k=64).persistent(2))
    with pytest.raises(ValueError, match=r"^b: its K-major copy.* holds 2163200000 elements"):
        interp.triton.matmul(b.t(), a.t(), Schedule(block_m=16, block_n=256, block_k=64).persistent(2))
    # an unpadded copy of a broadcast batch: b [K, N] rows of 1001 halves cannot load as vectors
    w = torch.zeros(64, 1001, dtype=torch.float16).expand(40000, 64, 1001)
    with pytest.raises(ValueError, match=r"^b: its K-major copy holds 2562560000 elements; the Triton kernels index"):
        interp.triton.bmm(torch.zeros(40000, 1, 64, dtype=torch.float16), w,
                          Schedule(block_m=16, block_n=16, block_k=64).persistent(2))
    assert interp.triton.matmul(a[:0], b, Schedule(block_m=256, block_n=16, block_k=64).persistent(2)).shape == (0, 16)


def test_loads_as_vectors(interp):
    """The Triton launcher's rule for reading an operand as it is: 16-byte aligned data, rows
    along the unit stride (and a batch's matrices) 16-byte multiples apart."""
    rule = interp.triton.launch.loads_as_vectors
    x = torch.empty(64, 48, dtype=torch.bfloat16)
    assert rule(x) and rule(x.t()) and rule(x[:, :16]) and rule(x[:, ::2])
    assert not rule(torch.empty(64, 21, dtype=torch.bfloat16)) and not rule(torch.empty(64, 21).bfloat16().t())
    assert rule(torch.empty(64, 1, dtype=torch.bfloat16)) and rule(torch.empty(1, 21, dtype=torch.bfloat16))
    assert not rule(torch.empty(64 * 48 + 1, dtype=torch.bfloat16)[1:].view(64, 48))
    assert rule(torch.empty(3, 8, 16, dtype=torch.bfloat16)) and rule(torch.empty(1, 8, 16).expand(3, 8, 16))
    batch = {pitch: torch.empty(3, pitch, dtype=torch.bfloat16)[:, :128].view(3, 8, 16) for pitch in (132, 136)}
    assert not rule(batch[132]) and rule(batch[136])  # matrices 264 / 272 bytes apart
