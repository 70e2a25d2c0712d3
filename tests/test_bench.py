"""CPU tests of the benchmark harness (tlgemm.bench): shape sets, FLOP/byte counts, the
reference check, the summaries and writers on synthetic timings, the command line."""

import argparse
import concurrent.futures
import json
import math
import os
import pathlib
import re
import runpy
import shlex
import subprocess
import sys
import textwrap
import types
import uuid

import pytest
import torch

from tlgemm import bench
from tlgemm.quantize import dequantize_fp8_blockwise
from tlgemm.schedules import Schedule
from tlgemm.testing import relative_error

ROOT = pathlib.Path(__file__).resolve().parents[1]
H100 = bench.Device("NVIDIA H100 80GB HBM3", 132, 232448, 50 * 2**20, 80 * 2**30, "9.0")


# ---- shape sets ----------------------------------------------------------------------------

def test_shape_sets_are_well_formed():
    for name, shapes in bench.SHAPE_SETS.items():
        assert shapes, name
        assert len(set(shapes)) == len(shapes), f"{name} repeats a shape"
        for shape in shapes:
            assert len(shape) == 3 and all(isinstance(v, int) and v > 0 for v in shape), (name, shape)
    square = bench.SHAPE_SETS["square"]
    assert all(m == n == k for m, n, k in square)
    sizes = [m for m, _, _ in square]
    assert sizes == sorted(sizes) and sizes[0] == 1024 and sizes[-1] == 16384
    assert {2**p for p in range(10, 15)} <= set(sizes) and len(sizes) > 5  # powers of two and sizes between
    llm = set(bench.SHAPE_SETS["llm"])
    for n, k in bench.DEEPSEEK_V3 + ((4096, 11008), (11008, 4096), (14336, 4096), (4096, 14336)):
        assert {(m, n, k) for m in (1, 16, 64, 128, 512, 4096)} <= llm
    assert all(m <= 128 for m, _, _ in bench.SHAPE_SETS["decode"])
    ragged = bench.SHAPE_SETS["ragged"]
    assert (1000, 3000, 777) in ragged
    assert all(any(v % 16 for v in shape) for shape in ragged), "every ragged shape has an odd-sized dimension"
    blockscaled = bench.SHAPE_SETS["fp8-blockscaled"]
    assert set(blockscaled) == {(m, n, k) for n, k in bench.DEEPSEEK_V3 for m in (64, 128, 4096)}
    assert all(k % bench.SCALE_BLOCK == 0 for _, _, k in blockscaled)


def test_plan_cases_dtypes_and_drops():
    cases, notes = bench.plan_cases(["square", "fp8-blockscaled"], ["bf16", "fp8"])
    assert [c.dtype for c in cases if c.set == "fp8-blockscaled"] == ["fp8-block"] * 18
    assert {c.dtype for c in cases if c.set == "square"} == {"bf16", "fp8"}
    assert not notes
    cases, notes = bench.plan_cases(["ragged"], ["fp8-block"])
    assert [(c.M, c.N, c.K) for c in cases] == [(77, 11008, 4096)]
    assert len(notes) == len(bench.RAGGED) - 1 and all("multiple of 128" in n for n in notes)
    cases, _ = bench.plan_cases(["llm"], ["bf16"], shapes=((3, 5, 7),))
    assert cases == [bench.Case("custom", "bf16", 3, 5, 7)]


def test_plan_cases_measures_a_repeated_case_once():
    """A shape, set or dtype named twice is one case, in its first place, and a note says so
    (once per case); a repeated shape that block scaling drops is noted as dropped once."""
    cases, notes = bench.plan_cases([], ["bf16", "fp8", "bf16"], shapes=((3, 5, 7), (8, 8, 8), (3, 5, 7)))
    assert [(c.dtype, c.shape) for c in cases] == [("bf16", "3x5x7"), ("bf16", "8x8x8"), ("fp8", "3x5x7"),
                                                   ("fp8", "8x8x8")]
    assert notes == ["the repeat of custom bf16 3x5x7 (named more than once, measured once)",
                     "the repeat of custom fp8 3x5x7 (named more than once, measured once)",
                     "the repeat of custom bf16 8x8x8 (named more than once, measured once)"]
    cases, _ = bench.plan_cases(["square", "square"], ["bf16"])
    assert len(cases) == len(bench.SHAPE_SETS["square"])
    cases, notes = bench.plan_cases([], ["fp8-block"], shapes=((128, 256, 200), (128, 256, 200)))
    assert cases == [] and notes == ["custom 128x256x200: fp8-block needs K a multiple of 128; dropped"]


def test_parse_shapes():
    assert bench.parse_shapes("1x2x3, 4X5X6") == ((1, 2, 3), (4, 5, 6))
    for bad in ("1x2", "1x2x0", "axbxc", "1x2x3x4", "\uff14x2x3"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_shapes(bad)
    for big, what in (("46341x46341x1", "C: holds 2147488281 elements"),
                      ("99999999999999999999x1x1", "A: holds 99999999999999999999 elements")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^shape '{big}': {what}; the kernels index in int32"):
            bench.parse_shapes(big)  # accepted before, then the run failed at that case's inputs
    assert bench.parse_shapes("46340x46340x46340") == ((46340, 46340, 46340),)


# ---- FLOPs, bytes, roofline ----------------------------------------------------------------

def test_flop_and_byte_counts():
    assert bench.gemm_flops(2, 3, 4) == 48
    assert bench.Case("s", "bf16", 2, 3, 4).bytes == (2 * 4 + 3 * 4) * 2 + 2 * 3 * 2
    assert bench.Case("s", "fp16", 2, 3, 4).bytes == (2 * 4 + 3 * 4) * 2 + 2 * 3 * 2
    assert bench.Case("s", "fp8", 2, 3, 4).bytes == (2 * 4 + 3 * 4) * 1 + 2 * 3 * 2
    # fp8-block adds fp32 scales: A [M, K/128], W [ceil(N/128), K/128] (2112 = 16.5 blocks).
    M, N, K = 64, 2112, 7168
    plain = (M * K + N * K) + M * N * 2
    assert bench.Case("s", "fp8-block", M, N, K).bytes == plain + (M * 56 + 17 * 56) * 4
    assert bench.Case("s", "fp8-block", M, N, K).flops == 2 * M * N * K


def test_roofline_picks_the_binding_limit():
    # 8192^3 bf16 on 800 TFLOP/s and 3000 GB/s: compute-bound, 2*8192^3 / 800e12 s.
    flops, nbytes = bench.gemm_flops(8192, 8192, 8192), bench.Case("s", "bf16", 8192, 8192, 8192).bytes
    floor, bound = bench.roofline(flops, nbytes, 800.0, 3000.0)
    assert bound == "compute" and floor == pytest.approx(flops / 800e12 * 1e3)
    # M = 1 decode: memory-bound, the weight read dominates.
    case = bench.Case("s", "bf16", 1, 7168, 16384)
    floor, bound = bench.roofline(case.flops, case.bytes, 800.0, 3000.0)
    assert bound == "memory" and floor == pytest.approx(case.bytes / 3000e9 * 1e3)


def test_rotation_sets():
    l2 = 50 * 2**20
    assert bench.rotation_sets(2**20, l2, 80 * 2**30) == 8  # tiny sets: the cap
    assert bench.rotation_sets(40 * 2**20, l2, 80 * 2**30) == 5  # 4 x L2 / 40 MiB
    assert bench.rotation_sets(2**30, l2, 80 * 2**30) == 2  # large sets: at least two
    assert bench.rotation_sets(2**30, l2, 6 * 2**30) == 1  # a quarter of free memory holds one


def test_split_profiled_calls_sums_each_calls_activities():
    flush, call = ["fill"], ["copy", "gemm"]
    names = (flush + call) * 3
    durations = [900.0, 1.0, 10.0, 901.0, 2.0, 20.0, 902.0, 3.0, 30.0]
    assert bench.split_profiled_calls(names, durations, flush, call, 3) == [11.0, 22.0, 33.0]
    # a call whose own kernels share the flush's name is still split by position
    assert bench.split_profiled_calls(["fill", "fill"] * 2, [5.0, 1.0, 6.0, 2.0], ["fill"], ["fill"], 2) == [1.0, 2.0]


@pytest.mark.parametrize("names", [["fill", "gemm", "fill"],  # a call missing
                                   ["fill", "gemm", "fill", "gemm", "gemm"],  # a call launched more
                                   ["fill", "other", "fill", "gemm"]])  # a different kernel
def test_split_profiled_calls_rejects_an_irregular_record(names):
    with pytest.raises(ValueError, match="do not repeat"):
        bench.split_profiled_calls(names, [1.0] * len(names), ["fill"], ["gemm"], 2)


# ---- inputs and reference ------------------------------------------------------------------

def test_make_inputs_and_reference_on_cpu():
    dense = bench.make_inputs(bench.Case("s", "bf16", 5, 7, 9), 2, seed=1, device="cpu")
    assert len(dense) == 2 and dense[0].a.dtype == torch.bfloat16 and dense[0].w.shape == (7, 9)
    assert not torch.equal(dense[0].a, dense[1].a)
    fp8 = bench.make_inputs(bench.Case("s", "fp8", 5, 7, 9), 1, seed=1, device="cpu")[0]
    assert fp8.a.dtype == torch.float8_e4m3fn and fp8.scale_a.item() == 1.0 and fp8.out.dtype == torch.bfloat16
    case = bench.Case("s", "fp8-block", 3, 200, 256)
    blk = bench.make_inputs(case, 1, seed=1, device="cpu")[0]
    assert blk.scale_a.shape == (3, 2) and blk.scale_b.shape == (2, 2)
    assert blk.scale_a_mn.stride() == (1, 3) and torch.equal(blk.scale_a_mn, blk.scale_a)
    assert blk.scale_a.unique().numel() > 1, "block scales are drawn at random, not all equal"
    a = blk.a.double() * blk.scale_a.double().repeat_interleave(128, 1)
    w = blk.w.double() * blk.scale_b.double().repeat_interleave(128, 0)[:200].repeat_interleave(128, 1)
    # tlgemm.quantize dequantises in float32: exact up to one rounding of each product
    assert relative_error(bench.reference(case, blk), a @ w.t()) < 1e-6


# ---- measuring one implementation (the reference check) ------------------------------------

class _Fake(bench.Impl):
    key = "tlgemm-triton"

    def __init__(self, compute):
        super().__init__()
        self.compute = compute

    def build(self, case, inp, dev):
        return bench.Prepared(self.compute, "fake")


def _measure(compute, monkeypatch, dtype="bf16"):
    monkeypatch.setattr(bench, "bench_rotating", lambda fn, sets, warmup, rep: 0.5)
    case = bench.Case("s", dtype, 33, 20, 70)
    sets = bench.make_inputs(case, 2, seed=3, device="cpu")
    return bench.measure_impl(_Fake(compute), case, sets, bench.reference(case, sets[0]), H100, 1, 1)


def test_measure_impl_times_a_correct_kernel(monkeypatch):
    entry = _measure(lambda i: i.out.copy_(i.a.float() @ i.w.float().t()), monkeypatch)
    assert entry["status"] == "ok" and entry["ms"] == 0.5 and entry["error"] < 1e-2
    assert entry["tflops"] == pytest.approx(2 * 33 * 20 * 70 / 0.5e-3 / 1e12)


@pytest.mark.parametrize("wrong", ["perturbed", "partial", "transposed-operand"])
def test_reference_check_rejects_a_wrong_result(monkeypatch, wrong):
    def compute(i):
        c = i.a.float() @ i.w.float().t()
        if wrong == "perturbed":
            c = c * 1.05
        elif wrong == "transposed-operand":
            c = i.a.float() @ i.w.float().flip(0).t()
        if wrong == "partial":
            i.out[:-1].copy_(c[:-1])  # last row left as the NaN poison
        else:
            i.out.copy_(c)
        return i.out

    entry = _measure(compute, monkeypatch)
    assert entry["status"] == "incorrect" and "ms" not in entry and "tflops" not in entry
    assert ("not written" if wrong == "partial" else "relative Frobenius error") in entry["reason"]


def test_measure_impl_failures_and_unsupported(monkeypatch):
    def boom(i):
        raise RuntimeError("kernel exploded\nsecond line")

    entry = _measure(boom, monkeypatch)
    assert entry == {"info": "fake", "status": "fail", "reason": "RuntimeError: kernel exploded"}

    class Unsupporting(_Fake):
        def build(self, case, inp, dev):
            raise bench.Unsupported("not this shape")

    impl = Unsupporting(None)
    case = bench.Case("s", "bf16", 4, 4, 4)
    sets = bench.make_inputs(case, 1, seed=0, device="cpu")
    assert bench.measure_impl(impl, case, sets, bench.reference(case, sets[0]), H100, 1, 1) == \
        {"status": "n/a", "reason": "not this shape"}
    impl.unavailable = "import failed"
    assert bench.measure_impl(impl, case, sets, None, H100, 1, 1) == {"status": "n/a", "reason": "import failed"}


# ---- tlgemm schedules: select(), rejected candidates, operand swap ---------------------------

class _Backend:
    """A stand-in tlgemm backend module that rejects split-K and swap-AB schedules."""

    def __init__(self):
        self.schedules = []

    def matmul(self, a, b, schedule, *, out=None, scale_a=None, scale_b=None):
        if schedule.split_k > 1 or schedule.is_swap_ab:
            raise ValueError("schedule: not implemented here")
        self.schedules.append(schedule)
        return out.copy_(a.float() @ b.float())


def _first_case(predicate):
    for m, n, k in bench.SHAPE_SETS["llm"] + bench.SHAPE_SETS["decode"]:
        case = bench.Case("llm", "bf16", m, n, k)
        if predicate(bench.top_schedule(case, H100)):
            return case
    raise AssertionError("no shape in the sets gives such a schedule")


@pytest.mark.parametrize("kind", ["swap-AB", "split-K"])
def test_tlgemm_falls_back_from_rejected_schedules(kind):
    predicate = (lambda s: s.is_swap_ab and s.split_k == 1) if kind == "swap-AB" else (
        lambda s: s.split_k > 1 and not s.is_swap_ab)
    case = _first_case(predicate)
    impl = bench.Tlgemm("triton")
    impl.module = _Backend()
    inp = bench.make_inputs(case, 1, seed=0, device="cpu")[0]
    prepared = impl.build(case, inp, H100)
    used = impl.module.schedules[-1]
    assert used.split_k == 1 and not used.is_swap_ab
    if kind == "swap-AB":
        assert "(operand swap)" in prepared.info
        assert used == bench.top_schedule(case, H100).swap_ab(False)
    else:  # split-K, which no backend runs, is passed over without a launch (a swap-AB next runs as an operand swap)
        assert used == next(c.schedule for c in bench.top_schedule(case, H100, explain=True).candidates
                            if c.schedule.split_k == 1).swap_ab(False)
    err = bench.check(prepared.fn, inp, bench.reference(case, inp), torch.bfloat16, "fake")
    assert err < 1e-2


def test_tlgemm_tilelang_compiles_ahead_once_per_schedule(monkeypatch):
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    dev = bench.Device(**{**vars(H100), "torch_device": "cpu"})
    cases = [bench.Case("s", "bf16", m, 256, 192) for m in (64, 64, 65, 256)] + [bench.Case("s", "fp16", 64, 256, 192)]
    impl = bench.Tlgemm("tilelang")
    impl.module = _Backend()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = impl.compile_ahead(cases, dev, pool, seed=0)
    distinct = {(c.dtype, bench.top_schedule(c, dev)) for c in cases}
    assert len(futures) == len(distinct) == len(impl.module.schedules) / 2 < len(cases)  # build + one more call
    triton = bench.Tlgemm("triton")
    assert triton.compile_ahead(cases, dev, None, seed=0) == []  # Triton compiles on first call, in the loop


def test_tgemm_config_follows_the_schedule():
    case = bench.Case("s", "fp8-block", 64, 7168, 2048)
    swap = Schedule(block_m=128, block_n=64, block_k=128, num_stages=5, num_warpgroups=1).swap_ab()
    cfg = bench.tgemm_config(case, swap)
    assert (cfg.rows, cfg.cols, cfg.row_group, cfg.col_group) == (7168, 64, 128, 1)
    assert (cfg.block_m, cfg.block_n, cfg.stages, cfg.threads) == (128, 64, 5, 128)
    cfg = bench.tgemm_config(bench.Case("s", "bf16", 300, 500, 700), Schedule(num_warpgroups=2, block_m=256))
    assert (cfg.rows, cfg.cols, cfg.row_group, cfg.threads, cfg.out) == (300, 500, 0, 256, "bfloat16")


def _fake_tgemm_compile(cfg):
    """A CPU kernel with the compiled T.gemm kernel's calling convention."""
    def kernel(*args):
        a, b, c = args[0].float(), args[1].float(), args[-1]
        if cfg.row_group:
            a = dequantize_fp8_blockwise(args[0], args[2], (cfg.row_group, bench.SCALE_BLOCK))
            b = dequantize_fp8_blockwise(args[1], args[3], (cfg.col_group, bench.SCALE_BLOCK))
        c.copy_(a @ b.t())
    return kernel


def test_tgemm_compiles_ahead_and_runs_swapped_problems(monkeypatch):
    monkeypatch.setattr(bench.TGemmConfig, "compile", _fake_tgemm_compile)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    dev = bench.Device(**{**vars(H100), "tgemm_kernels": {}})
    cases = [bench.Case("s", dtype, m, n, k) for dtype in ("bf16", "fp8-block")
             for m, n, k in ((1, 2112, 7168), (300, 512, 384), (300, 512, 384))]
    impl = bench.TileLangGemm()
    swaps = {c: bench.TileLangGemm.config(c, dev)[1] for c in cases}
    assert set(swaps.values()) == {True, False}, "the cases cover swap-AB and plain schedules"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = impl.compile_ahead(cases, dev, pool, seed=0)
    assert len(futures) == len(dev.tgemm_kernels) == 4  # one kernel per distinct config
    for case in cases:
        inp = bench.make_inputs(case, 1, seed=1, device="cpu")[0]
        prepared = impl.build(case, inp, dev)
        assert ("swap-AB" in prepared.info) == swaps[case]
        tol = torch.float8_e4m3fn if case.dtype == "fp8-block" else torch.bfloat16
        assert bench.check(prepared.fn, inp, bench.reference(case, inp), tol, "fake") < 1e-2


def test_tgemm_kernels_lower_for_sm90():
    pytest.importorskip("tilelang")
    import tilelang
    from tilelang import tvm

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    configs = [bench.TGemmConfig(512, 768, 1024, "bfloat16", "bfloat16", 128, 256, 64, 3, 256),
               bench.TGemmConfig(2112, 64, 1024, "float8_e4m3fn", "bfloat16", 128, 64, 128, 4, 128, 128, 1)]
    for cfg in configs:
        with tvm.transform.PassContext(opt_level=3), target:
            source = tilelang.lower(cfg.prim_func(), target=target).kernel_source
        assert "wgmma" in source and "tma_load" in source, cfg
    assert "SR[" in source and "SC[" in source  # the block-scaled kernel promotes with both scales


def test_tutorial_kernel_in_the_interpreter():
    # The interpreter needs tlgemm.triton.shim's repair for NumPy >= 2.4 (int() of 1-element arrays).
    script = textwrap.dedent("""
        import torch
        from tlgemm.bench import tutorial_matmul
        from tlgemm.triton.shim import _patch_interpreter
        _patch_interpreter()
        g = torch.Generator().manual_seed(0)
        a = torch.randn(37, 45, generator=g)
        w = torch.randn(29, 45, generator=g)
        c = torch.full((37, 29), float("nan"))
        tutorial_matmul(a, w.t(), c, 4, block_m=16, block_n=16, block_k=16, group_m=2, stages=1, warps=1)
        torch.testing.assert_close(c, a @ w.t(), rtol=1e-4, atol=1e-4)
        print("ok")
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# ---- summaries and writers on synthetic timings --------------------------------------------

PEAKS = {"tflops": {"bf16": {"tflops": 800.0, "shape": "4096x4096x4096", "how": "torch.mm"},
                    "fp8": {"tflops": 1300.0, "shape": "8192x8192x8192", "how": "torch._scaled_mm"}},
         "copy": {"gbps": 3000.0, "how": "copy"}}


def _ok(case, tflops):
    ms = case.flops / (tflops * 1e12) * 1e3
    return {"status": "ok", "ms": ms, "tflops": tflops, "error": 1e-3, "info": "128x256x64"}


def _synthetic_run():
    rows = []
    table = [("square", "bf16", 4096, 4096, 4096, 700, 630, 560, "incorrect"),
             ("square", "bf16", 8192, 8192, 8192, 680, 700, 600, 650),
             ("llm", "fp8", 1, 7168, 16384, 30, 15, "fail", 20),
             ("llm", "fp8", 4096, 2112, 7168, 1100, 880, 990, 1000)]
    for set_name, dtype, m, n, k, cublas, tl_triton, tgemm, tutorial in table:
        case = bench.Case(set_name, dtype, m, n, k)
        results = {"cublas": _ok(case, cublas), "tlgemm-tilelang": {"status": "n/a", "reason": "no matmul yet"},
                   "tlgemm-triton": _ok(case, tl_triton)}
        results["tilelang-tgemm"] = _ok(case, tgemm) if tgemm != "fail" else {"status": "fail",
                                                                              "reason": "RuntimeError: nvcc"}
        results["triton-tutorial"] = (_ok(case, tutorial) if tutorial != "incorrect" else
                                      {"status": "incorrect", "reason": "relative Frobenius error 3e-1"})
        rows.append(bench._row(case, PEAKS, 2, results))
    return {"format": bench.FORMAT,
            "environment": {"gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0", "num_sms": 132,
                            "l2_bytes": 50 * 2**20, "memory_bytes": 80 * 2**30,
                            "clocks_start": {"clocks.sm": "1980 MHz", "clocks.max.sm": "1980 MHz",
                                             "clocks.mem": "2619 MHz", "power.limit": "700.00 W",
                                             "driver_version": "580.1"},
                            "versions": {"python": "3.12.3", "torch": "2.11.0", "cuda": "13.0", "triton": "3.6.0",
                                         "tilelang": "0.1.15", "tlgemm": "0.1.0", "tlgemm_commit": "abc1234"},
                            "date": "2026-11-22T10:00:00+00:00",
                            "command": "python benchmarks/run.py --sets square,llm --quick"},
            "options": {"sets": ["square", "llm"], "dtypes": ["bf16", "fp8"], "seed": 0, "input_sets": "auto",
                        "warmup_ms": 5.0, "rep_ms": 25.0, "budget_s": 540, "fast_accum": False,
                        "reduced": "fewer repetitions than the default"},
            "implementations": {}, "peaks": PEAKS, "rows": rows, "skipped": 1, "aborted": None}


def test_geomean_and_worst_shapes():
    assert bench.geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert bench.geomean([]) is None
    rows = _synthetic_run()["rows"]
    table = bench.geomean_table(rows)
    g, n = table[("square", "bf16")]["tlgemm-triton"]
    assert n == 2 and g == pytest.approx(math.sqrt(630 / 700 * 700 / 680))
    assert table[("square", "bf16")]["tlgemm-tilelang"] == (None, 0)
    assert table[("square", "bf16")]["triton-tutorial"][1] == 1  # the incorrect row is left out
    worst = bench.worst_shapes(rows, "tlgemm-triton")
    assert [round(r, 3) for r, _ in worst] == [0.5, 0.8, 0.9]
    assert worst[0][1]["M"] == 1 and worst[0][1]["bound"] == "memory"
    assert bench.floor_fraction(worst[0][1], "tlgemm-triton") == pytest.approx(
        worst[0][1]["floor_ms"] / worst[0][1]["results"]["tlgemm-triton"]["ms"])


def test_text_table_and_summary():
    rows = _synthetic_run()["rows"]
    text = bench.text_table(rows)
    lines = text.splitlines()
    assert "tlgemm Triton" in lines[0] and "cuBLAS" in lines[0]
    assert len({len(line) for line in lines[:2 + len(rows)]}) == 1  # aligned columns
    assert "630.0 0.90x" in text and "wrong" in text and "fail" in text
    summary = bench.summary_text(rows)
    assert "square bf16" in summary and "worst for tlgemm Triton: llm fp8 1x7168x16384 0.50x" in summary


def test_markdown_json_round_trip(tmp_path, capsys):
    run = _synthetic_run()
    path = tmp_path / "run.json"
    bench.write_json(path, run)
    assert bench.load_runs([path]) == [json.loads(json.dumps(run))]
    md = tmp_path / "RESULTS.md"
    assert bench.main(["--from-json", str(path), "--markdown", str(md), "--no-plots"]) == 0
    text = md.read_text()
    assert text == bench.markdown([json.loads(path.read_text())])
    assert "`python benchmarks/run.py --sets square,llm --quick`" in text
    assert "NVIDIA H100 80GB HBM3" in text and "Reduced run" in text and "1 cases not run" in text
    assert "## Geomean ratio to cuBLAS" in text and "| square | bf16 |" in text
    assert "### tlgemm Triton" in text and "| llm | fp8 | 1x7168x16384 | 0.50x |" in text
    assert "TileLang T.gemm, fail (1: fp8 1x7168x16384): RuntimeError: nvcc" in text
    assert "tlgemm TileLang, n/a (4:" in text
    assert "- fp8 accumulation: cuBLAS with use_fast_accum=False adds" in text
    out = capsys.readouterr().out
    assert "geomean ratio to cuBLAS" in out and f"wrote {md}" in out


def test_the_header_gives_the_clocks_after_the_run_and_the_dropped_shapes():
    """The start clocks are read before any GPU work (idle, e.g. 345 MHz): the header also gives
    those read after the last case, and the shapes plan_cases dropped, which only stdout had."""
    run = _synthetic_run()
    text = bench.markdown([run])
    assert "after the last case" not in text and "Not measured:" not in text
    run["environment"]["clocks_end"] = {"clocks.sm": "1635 MHz", "power.draw": "330.12 W"}
    _, notes = bench.plan_cases([], ["fp8-block"], [(128, 256, 200)])
    run["dropped"] = notes
    text = bench.markdown([run])
    assert "before the run: SM clock 1980 MHz (max 1980 MHz)" in text
    assert "after the last case: SM clock 1635 MHz, power draw 330.12 W" in text
    assert "- Not measured: custom 128x256x200: fp8-block needs K a multiple of 128; dropped" in text


def test_the_commit_is_marked_dirty_where_tracked_files_changed(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "f.py").write_text("x = 1\n")
    subprocess.run(git + ["add", "f.py"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], check=True)
    monkeypatch.setattr(bench, "__file__", str(repo / "f.py"))
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    (repo / "untracked.py").write_text("")
    assert bench._git_commit() == head
    (repo / "f.py").write_text("x = 2\n")
    assert bench._git_commit() == head + "+dirty"


def test_clocks_come_from_the_gpu_torch_runs_on(monkeypatch):
    """nvidia-smi is asked by the device's UUID: torch's index counts the GPUs CUDA_VISIBLE_DEVICES
    leaves (torch's 0 may be nvidia-smi's 3); a device without a UUID (off CUDA) runs no nvidia-smi."""
    gpu = uuid.UUID("5b9c1ab6-3c5e-6d0b-5e0f-9ad3c1b2e7f4")  # str() as torch's _CUuuid: no "GPU-"
    props = types.SimpleNamespace(name="NVIDIA H200", multi_processor_count=132, total_memory=141 * 2**30, major=9,
                                  minor=0, uuid=gpu)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    queried = []

    def nvidia_smi(argv, **kwargs):
        if argv[0] != "nvidia-smi":
            return subprocess.CompletedProcess(argv, 1, "", "")
        queried.append(argv[-1])
        return subprocess.CompletedProcess(argv, 0, "1980 MHz, 1980 MHz, 3201 MHz, 3201 MHz, 120.50 W, 700.00 W, 31, "
                                                    "P0, 580.1\n", "")

    monkeypatch.setattr(bench.subprocess, "run", nvidia_smi)
    clocks = bench.environment(bench.Device.current(), "tlgemm bench")["clocks_start"]
    assert queried == [f"--id=GPU-{gpu}"]
    assert clocks["clocks.mem"] == "3201 MHz" and clocks["driver_version"] == "580.1"
    assert bench.environment(H100, "")["clocks_start"] is None and len(queried) == 1


def test_from_json_merges_runs_and_rejects_other_files(tmp_path, capsys):
    first, second = _synthetic_run(), _synthetic_run()
    second["rows"] = second["rows"][:1]
    second["environment"]["command"] = "python benchmarks/run.py --sets fp8-blockscaled"
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for p, r in zip(paths, (first, second)):
        bench.write_json(p, r)
    md = tmp_path / "merged.md"
    assert bench.main(["--from-json", *map(str, paths), "--markdown", str(md), "--no-plots"]) == 0
    text = md.read_text()
    assert "## Run 1" in text and "## Run 2" in text and "--sets fp8-blockscaled" in text
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert bench.main(["--from-json", str(bad), "--no-plots", "--out", str(tmp_path)]) == 2
    assert "not a tlgemm-bench/1 record" in capsys.readouterr().err


def test_median_rate_is_the_rate_at_the_median_time():
    """Rounds of 1 and 2 ms are a median time of 1.5 ms: 2/3 of the 1-ms rate, not the 0.75 that
    the median of the two rates gives."""
    assert bench.median_rate([1.0, 0.5]) == pytest.approx(2 / 3)
    assert bench.median_rate([3.0, 1.0, 2.0]) == 2.0
    for rates in ([], [float("nan"), 1.0, 2.0], [1.0, float("nan"), 2.0], [0.0, 1.0, 2.0], [float("inf")]):
        with pytest.raises(ValueError, match=r"^rates: "):
            bench.median_rate(rates)  # a NaN's place decided the median; 0 raised ZeroDivisionError


def test_from_json_renders_rows_without_a_floor(tmp_path, capsys):
    """floor_ms = None is a valid record (its cells show "-"), but the worst-shapes lines
    formatted its floor fraction as a percentage and the render failed."""
    run = _synthetic_run()
    for row in run["rows"]:
        row["floor_ms"] = None
    path, md = tmp_path / "a.json", tmp_path / "out.md"
    bench.write_json(path, run)
    assert bench.main(["--from-json", str(path), "--markdown", str(md), "--no-plots"]) == 0
    assert "- of floor)" in capsys.readouterr().out and "## Three worst shapes" in md.read_text()


@pytest.mark.parametrize("options, named", [
    (["--list"], "--list"),
    (["--shapes", "64x64x64", "--dtypes", "bf16"], "--dtypes, --shapes"),
    (["--quick", "--json", "x.json"], "--quick, --json"),
])
def test_from_json_refuses_measuring_options(options, named, tmp_path, capsys):
    path = tmp_path / "a.json"
    bench.write_json(path, _synthetic_run())
    md = tmp_path / "out.md"
    assert bench.main(["--from-json", str(path), "--markdown", str(md), "--no-plots", *options]) == 2
    out, err = capsys.readouterr()
    assert out == "" and not md.exists()
    assert err == (f"tlgemm bench: error: --from-json renders earlier runs and measures nothing; {named} would not "
                   "apply (render all of their rows, or measure again)\n")


def test_from_json_reports_a_case_in_several_runs_once(tmp_path, capsys):
    """A case (set, dtype, shape) in more than one run is one row, the last run's, in the place of
    the first (tables and geomeans count it once); a row the --budget left unrun replaces none;
    the run whose rows replaced others says which."""
    first, second = _synthetic_run(), _synthetic_run()
    case = bench.Case("square", "bf16", 4096, 4096, 4096)
    rerun = bench._row(case, PEAKS, 2, {"cublas": _ok(case, 700), "tlgemm-triton": _ok(case, 350)})
    unrun = bench._row(bench.Case("square", "bf16", 8192, 8192, 8192), PEAKS, 0,
                       {"cublas": {"status": "skipped"}, "tlgemm-triton": {"status": "skipped"}})
    second["rows"] = [rerun, unrun]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, run in zip(paths, (first, second)):
        bench.write_json(path, run)
    md = tmp_path / "merged.md"
    assert bench.main(["--from-json", *map(str, paths), "--markdown", str(md), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert out.count("square   bf16  4096x4096x4096") == 1 and "tlgemm Triton 0.717x (2)" in out
    assert ("note: run 2 replaces the earlier row of 1 case: square bf16 4096x4096x4096 (Run 1; its TileLang T.gemm, "
            "Triton tutorial results dropped)") in out
    text = md.read_text()
    assert text.count("| 4096 | 4096 | 4096 |") == 1
    assert "| 4096 | 4096 | 4096 | 171.8 com | 700.0 88% |  | 350.0 0.50x 44% |" in text
    assert "| square | bf16 | - | 0.717x (2) |" in text
    assert "## Run 2\n" in text and "- Replaces the earlier row of 1 case: square bf16 4096x4096x4096 (Run 1; " in text
    rows, replaced = bench.merge_rows(bench.load_runs(paths))
    assert [(r["M"], r["results"]["tlgemm-triton"]["tflops"]) for r in rows] == [
        (4096, 350), (8192, 700), (1, 15), (4096, 880)]
    assert replaced == [[], ["square bf16 4096x4096x4096 (Run 1; its TileLang T.gemm, Triton tutorial results "
                             "dropped)"]]
    assert bench.geomean_table(rows)[("square", "bf16")]["tlgemm-triton"] == (
        pytest.approx(math.sqrt(350 / 700 * 700 / 680)), 2)


def test_from_json_names_the_implementations_a_replacing_row_lacks(tmp_path, capsys):
    """A re-run with fewer implementations replaces the whole row; the note names the earlier
    results that the merged report no longer shows (a skipped or n/a one is not named)."""
    first, second = _synthetic_run(), _synthetic_run()
    case = bench.Case("square", "bf16", 8192, 8192, 8192)
    second["rows"] = [bench._row(case, PEAKS, 2, {"cublas": _ok(case, 690), "tlgemm-triton": _ok(case, 701)})]
    first["rows"][1]["results"]["triton-tutorial"] = {"status": "skipped"}
    rows, replaced = bench.merge_rows([first, second])
    assert replaced == [[], ["square bf16 8192x8192x8192 (Run 1; its TileLang T.gemm results dropped)"]]
    assert sorted(rows[1]["results"]) == ["cublas", "tlgemm-triton"]


@pytest.mark.parametrize("change, expected", [
    (lambda run: run["environment"].update(gpu="NVIDIA H200"),
     "measured on NVIDIA H200, {a} on NVIDIA H100 80GB HBM3; runs on different GPUs are not one table"),
    (lambda run: run["options"].update(fast_accum=True),
     "its fp8 rows time cuBLAS with use_fast_accum=True, {a}'s with use_fast_accum=False; their ratios are not "
     "one table"),
])
def test_from_json_refuses_runs_that_are_not_one_table(change, expected, tmp_path, capsys):
    """Runs from different GPUs, or fp8 rows against cuBLAS with and without use_fast_accum, are
    refused with the two files named; fast accumulation does not matter where one run has no
    fp8 rows."""
    first, second = _synthetic_run(), _synthetic_run()
    change(second)
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, run in zip(paths, (first, second)):
        bench.write_json(path, run)
    assert bench.main(["--from-json", *map(str, paths), "--no-plots", "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"tlgemm bench: error: --from-json {paths[1]}: " + expected.format(a=paths[0]) + \
        ": report each on its own\n"
    bf16_only = _synthetic_run()
    bf16_only["rows"] = [r for r in bf16_only["rows"] if r["dtype"] == "bf16"]
    bf16_only["options"]["fast_accum"] = True
    bench.write_json(paths[1], bf16_only)
    assert bench.main(["--from-json", *map(str, paths), "--no-plots", "--out", str(tmp_path / "out")]) == 0


def test_from_json_compares_fast_accumulation_among_the_runs_with_fp8_rows(tmp_path):
    """The fp8 rows' cuBLAS setting is compared among the runs that have fp8 rows, whichever run
    comes first (a run without fp8 rows in front let two differing ones through)."""
    bf16_only, fast, plain = _synthetic_run(), _synthetic_run(), _synthetic_run()
    bf16_only["rows"] = [r for r in bf16_only["rows"] if r["dtype"] == "bf16"]
    fast["options"]["fast_accum"] = True
    paths = [tmp_path / f"{name}.json" for name in ("bf16", "fast", "plain")]
    expected = f"{paths[2]}: its fp8 rows time cuBLAS with use_fast_accum=False, {paths[1]}'s with use_fast_accum=True"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}"):
        bench.check_one_table([bf16_only, fast, plain], paths)
    bench.check_one_table([bf16_only, fast, fast], paths)


def _without(record: dict, key: str) -> dict:
    return {k: v for k, v in record.items() if k != key}


@pytest.mark.parametrize("content, expected", [
    ("", "the file is empty"),
    (" \n", "the file is empty"),
    ("run 1: 700 TFLOP/s", "not JSON (Expecting value: line 1 column 1)"),
    (json.dumps(_synthetic_run())[:300], "not JSON (Unterminated string starting at: line 1 column 290; the file "
                                         "ends early, cut short?)"),
    ('{"format": "tlgemm-bench/1", "rows": [\n', "not JSON (Expecting value: line 2 column 1; the file ends early, "
                                                  "cut short?)"),
    ("[1, 2]", "not a tlgemm-bench/1 record (a JSON list, not an object)"),
    ('"tlgemm-bench/1"', "not a tlgemm-bench/1 record (a JSON str, not an object)"),
    (json.dumps({"format": bench.FORMAT}), "a tlgemm-bench/1 record without its list of rows"),
    (json.dumps({"format": bench.FORMAT, "rows": {}}), "a tlgemm-bench/1 record without its list of rows"),
    (json.dumps({**_synthetic_run(), "rows": [{"set": "square"}]}),
     "row 0 of the tlgemm-bench/1 record is not an object with the keys set, dtype, M, N, K"),
    (json.dumps({**_synthetic_run(), "rows": [7]}), "row 0 of the tlgemm-bench/1 record is not an object"),
    (json.dumps(_without(_synthetic_run(), "environment")),
     "a tlgemm-bench/1 record the reports cannot read (missing 'environment')"),
    (json.dumps({**_synthetic_run(), "options": []}), "a tlgemm-bench/1 record the reports cannot read (TypeError"),
    (b"\xff\xfe{}", "not a text file (not UTF-8)"),
    (json.dumps(_synthetic_run()).replace('"ms": ', '"ms": NaN, "x": ', 1),
     "row 0 of the tlgemm-bench/1 record has results.cublas.ms = nan, not a finite time"),
    (json.dumps({**_synthetic_run(), "rows": [{**_synthetic_run()["rows"][1], "floor_ms": -1}]}),
     "row 0 of the tlgemm-bench/1 record has floor_ms = -1, not a finite time"),
    (None, "cannot read it: No such file or directory"),
])
def test_from_json_names_the_option_the_file_and_what_is_wrong(content, expected, tmp_path, capsys):
    """An unreadable, empty, non-JSON, truncated or wrongly shaped --from-json file: one line, no traceback."""
    path = tmp_path / "run.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert bench.main(["--from-json", str(path), "--no-plots", "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"tlgemm bench: error: --from-json {path}: ") and expected in err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option, target, expected", [
    ("--markdown", "dir", "--markdown: {path} is a directory"),
    ("--markdown", "under_a_file/R.md", "--markdown: {parent} is not a directory"),
    ("--plots", "under_a_file", "--plots: {path} is not a directory"),
    ("--plots", "under_a_file/plots", "--plots: cannot create {path}: Not a directory"),
])
def test_unwritable_outputs_are_named_before_anything_is_read(option, target, expected, tmp_path, capsys):
    """Output paths that cannot be written were a traceback after the table was printed (and,
    measuring, after the peaks were measured and the kernels compiled)."""
    run = tmp_path / "run.json"
    bench.write_json(run, _synthetic_run())
    (tmp_path / "dir").mkdir()
    (tmp_path / "under_a_file").write_text("")
    path = tmp_path / target
    argv = ["--from-json", str(run), option, str(path)] + (["--no-plots"] if option == "--markdown" else
                                                           ["--markdown", str(tmp_path / "R.md")])
    assert bench.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"tlgemm bench: error: {expected.format(path=path, parent=path.parent)}\n"


def test_an_existing_writable_markdown_file_needs_no_writable_folder(tmp_path, monkeypatch, capsys):
    """The Markdown is written in place: a writable file in a folder the user cannot write (e.g.
    /dev/null) is a valid target, and a JSON is replaced through a file beside it."""
    run, md = tmp_path / "run.json", tmp_path / "R.md"
    bench.write_json(run, _synthetic_run())
    md.write_text("")
    folder = str(tmp_path)
    real = os.access
    monkeypatch.setattr(bench.os, "access", lambda p, mode: real(p, mode) and str(p) != folder)
    assert bench.main(["--from-json", str(run), "--markdown", str(md), "--no-plots"]) == 0
    assert "## Results" in md.read_text()
    args = bench.build_parser("tlgemm bench").parse_args(["--json", str(tmp_path / "new.json"), "--no-plots",
                                                          "--markdown", str(md)])
    assert bench._unwritable(args, measuring=True) == f"--json: the folder {folder} is not writable"


def test_the_files_are_written_before_the_printout(tmp_path, monkeypatch):
    """A reader that stops early (``| head -1``) closed stdout during the table, and the Markdown
    named by --markdown was never written."""
    run, md = tmp_path / "run.json", tmp_path / "R.md"
    bench.write_json(run, _synthetic_run())

    def closed(*args, **kwargs):
        raise BrokenPipeError

    monkeypatch.setattr("builtins.print", closed)
    with pytest.raises(BrokenPipeError):
        bench.main(["--from-json", str(run), "--markdown", str(md), "--no-plots"])
    assert "## Results" in md.read_text()


def test_plots(tmp_path):
    pytest.importorskip("matplotlib")
    rows = _synthetic_run()["rows"]
    files = bench.plot(rows, tmp_path / "plots")
    assert set(files) == {"square", "llm"}
    for paths in files.values():
        assert [p.name.split("_")[-1] for p in paths] == ["tflops.png", "ratio.png"]
        assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    md = tmp_path / "RESULTS.md"
    bench.report([_synthetic_run()], md, tmp_path / "plots")
    assert "](plots/bench_square_tflops.png)" in md.read_text()


# ---- command line --------------------------------------------------------------------------

def test_help_and_bad_options(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--sets", "--dtypes", "--quick", "--rep-ms", "--budget", "--json", "--markdown", "--from-json"):
        assert option in out
    assert out.startswith("usage: tlgemm bench")
    with pytest.raises(SystemExit) as exc:
        bench.main(["--sets", "square,bogus"])
    assert exc.value.code == 2 and "choose from" in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["--warmup-ms", "0"], "argument --warmup-ms: expected a number > 0, got '0'"),
    (["--rep-ms", "-25"], "argument --rep-ms: expected a number > 0, got '-25'"),
    (["--rep-ms", "nan"], "argument --rep-ms: expected a number > 0, got 'nan'"),
    (["--warmup-ms", "inf"], "argument --warmup-ms: expected a number > 0, got 'inf'"),
    (["--budget", "-1"], "argument --budget: expected a number >= 0, got '-1'"),
    (["--input-sets", "-1"], "argument --input-sets: expected an integer >= 0, got '-1'"),
    (["--input-sets", "2.5"], "argument --input-sets: expected an integer >= 0, got '2.5'"),
    (["--compile-workers", "-4"], "argument --compile-workers: expected an integer >= 0, got '-4'"),
])
def test_timing_options_reject_values_out_of_range(argv, expected, capsys):
    """Times must be > 0; the budget (0: no case runs), the input sets (0: automatic) and the
    compile workers (0: none ahead of timing) >= 0."""
    with pytest.raises(SystemExit) as exc:
        bench.build_parser().parse_args(argv)
    assert exc.value.code == 2 and expected in capsys.readouterr().err


def test_timing_options_take_positive_times_and_zero_counts():
    args = bench.build_parser().parse_args(["--warmup-ms", "0.5", "--rep-ms", "1e2", "--budget", "0",
                                            "--input-sets", "0", "--compile-workers", "0"])
    assert (args.warmup_ms, args.rep_ms, args.budget, args.input_sets, args.compile_workers) == (0.5, 100.0, 0.0, 0, 0)


def test_arguments_fit_a_subcommand():
    parser = argparse.ArgumentParser(prog="tlgemm")
    bench.add_arguments(parser.add_subparsers(dest="command").add_parser("bench"))
    args = parser.parse_args(["bench", "--sets", "decode", "--dtypes", "fp16", "--quick"])
    assert args.sets == ["decode"] and args.dtypes == ["fp16"] and args.quick


def test_run_script_help(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["benchmarks/run.py", "--help"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(ROOT / "benchmarks" / "run.py"), run_name="__main__")
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage: python benchmarks/run.py")


def test_model_backtest_scores_the_measured_schedules(monkeypatch, capsys, tmp_path):
    """benchmarks/model_backtest.py: the model's first choice among a row's measured schedules
    against the row's best, and the measured pairs it orders right."""
    wide = Schedule(block_n=256, num_stages=4, num_warpgroups=2, is_persistent=True, num_sms=132)
    thin = Schedule(block_m=64, block_n=16, num_stages=4, is_persistent=True, num_sms=132)
    rows = [{"dtype": "bf16", "M": 4096, "N": 4096, "K": 4096, "schedules": {"a": str(wide), "b": str(thin)},
             "tflops": {"a": 700.0, "b": 100.0, "cublas": 750.0}},
            {"dtype": "fp8", "M": 4096, "N": 4096, "K": 4096, "schedules": {"a": str(wide), "b": str(thin)},
             "tflops": {"a": 100.0, "b": 400.0}}]
    path = tmp_path / "probe_h100.json"
    path.write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "rows": rows}))
    (tmp_path / "other_h200.json").write_text(json.dumps({"gpu": "NVIDIA H200", "rows": rows}))
    monkeypatch.setattr(sys, "argv", ["model_backtest.py", str(path), str(tmp_path / "other_h200.json")])
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # as running the script puts its folder first
    runpy.run_path(str(ROOT / "benchmarks" / "model_backtest.py"), run_name="__main__")
    out = capsys.readouterr().out
    # the model takes 128x256 in both rows: right in the first (1.0), a quarter of the best in the second
    assert out.startswith("2 measured rows from 1 files")
    assert "chosen / best 0.5000 (geomean), pairs ordered right 1/2 (50.0%)" in out
    assert "0.250  float8_e4m3fn 4096x4096x4096  chose 128x256x64" in out


def test_list_needs_no_gpu(capsys):
    assert bench.main(["--list", "--sets", "square,ragged", "--dtypes", "bf16,fp8-block"]) == 0
    out = capsys.readouterr().out
    assert "square bf16 (8):" in out and "ragged fp8-block (1): 77x11008x4096" in out
    assert "needs K a multiple of 128; dropped" in out and out.rstrip().endswith("25 cases")


class _TorchImpl(bench.Impl):
    """A CPU stand-in for a GPU implementation (float32 matmul into the output)."""

    key = "tlgemm-tilelang"

    def build(self, case, inp, dev):
        return bench.Prepared(lambda i: i.out.copy_(i.a.float() @ i.w.float().t()), "torch on the CPU")


@pytest.mark.parametrize("budget", [None, 0])
def test_measure_end_to_end_on_a_cpu_device(monkeypatch, tmp_path, capsys, budget):
    """The whole measuring path (peaks, cases, checks, JSON after every case, reports) with the
    tensors on the CPU, a constant timer and a CPU stand-in for one implementation."""
    cpu = bench.Device("fake GPU", 132, 232448, 50 * 2**20, 8 * 2**30, "9.0", torch_device="cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench.Device, "current", classmethod(lambda cls, fast_accum=False: cpu))
    monkeypatch.setattr(bench, "bench_rotating", lambda fn, sets, warmup_ms, rep_ms: 0.25)
    monkeypatch.setattr(bench, "PEAK_SIZES", (64,))
    monkeypatch.setattr(bench, "COPY_BYTES", 2**20)
    monkeypatch.setitem(bench.IMPLEMENTATIONS, "tlgemm-tilelang", _TorchImpl)
    argv = ["--shapes", "64x48x80,3x5x7", "--dtypes", "bf16", "--impls", "tlgemm-tilelang,tlgemm-triton", "--quick",
            "--out", str(tmp_path), "--no-plots"] + ([] if budget is None else ["--budget", str(budget)])
    assert bench.main(argv) == 0
    record = json.loads((tmp_path / "bench.json").read_text())
    assert record["environment"]["gpu"] == "fake GPU"
    assert record["environment"]["command"] == shlex.join(["tlgemm", "bench", *argv])
    assert record["peaks"]["tflops"]["bf16"]["tflops"] == pytest.approx(2 * 64**3 / 0.25e-3 / 1e12)
    assert [(r["M"], r["N"], r["K"]) for r in record["rows"]] == [(64, 48, 80), (3, 5, 7)]
    statuses = [{k: v["status"] for k, v in r["results"].items()} for r in record["rows"]]
    if budget == 0:
        assert record["skipped"] == 2 and all(set(s.values()) == {"skipped"} for s in statuses)
        assert "2 cases not run" in (tmp_path / "RESULTS.md").read_text()
        return
    assert statuses == [{"cublas": "ok", "tlgemm-tilelang": "ok", "tlgemm-triton": "n/a"}] * 2
    assert "CUDA" in record["rows"][0]["results"]["tlgemm-triton"]["reason"]
    assert record["rows"][0]["input_sets"] == 8 and record["options"]["reduced"]
    text = (tmp_path / "RESULTS.md").read_text()
    assert "| 64 | 48 | 80 |" in text and "1.00x" in text and "Reduced run" in text
    out = capsys.readouterr().out
    assert "fake GPU: 2 cases x 3 implementations" in out and "fewer repetitions" in out


def test_fp8_accumulation_note_follows_the_run():
    """Only a run with fp8 (per-tensor) rows gets the note, worded for its use_fast_accum."""
    run = _synthetic_run()
    run["options"]["fast_accum"] = True
    assert "- fp8 accumulation: cuBLAS with use_fast_accum=True accumulates as" in bench.markdown([run])
    run["rows"] = [row for row in run["rows"] if row["dtype"] != "fp8"]
    assert "fp8 accumulation" not in bench.markdown([run])


def test_main_without_cuda_exits_with_a_message(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--sets", "square", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_deepgemm_table_sits_beside_the_published_figures():
    """fp8-block rows of DeepGEMM's shapes get a table with its H800 figure, the ratio to it,
    cuBLAS block-wise and (from the run's fp8 row of the same shape) cuBLAS per-tensor."""
    run = _synthetic_run()
    case = bench.Case("fp8-blockscaled", "fp8-block", 4096, 2112, 7168)
    results = {"cublas": _ok(case, 1000), "tlgemm-tilelang": _ok(case, 529), "tlgemm-triton": _ok(case, 50)}
    run["rows"].append(bench._row(case, PEAKS, 2, results))
    text = bench.markdown([run])
    assert "## DeepGEMM's shape table" in text
    assert "| 4096 | 2112 | 7168 | 1058 | 529 (0.50x) | 50 (0.05x) | 1000 | 1100 |" in text
    assert "## DeepGEMM's shape table" not in bench.markdown([_synthetic_run()])
    assert len(bench.DEEPGEMM_H800_TFLOPS) == 18
    assert set(bench.DEEPGEMM_H800_TFLOPS) == set(bench.SHAPE_SETS["fp8-blockscaled"])


def test_blockscaled_inputs_and_reference():
    """blockscaled_inputs: e4m3 operands with non-unit block scales (A's also outer-dim-major),
    and a reference equal to the float64 product of the dequantised operands."""
    from tlgemm.bench import blockscaled_inputs
    from tlgemm.testing import relative_error

    N = 200
    inp, ref = blockscaled_inputs(5, N, 256, device="cpu")
    assert inp.a.dtype == inp.w.dtype == torch.float8_e4m3fn and inp.scale_b.shape == (2, 2)
    assert torch.equal(inp.scale_a_mn, inp.scale_a) and inp.scale_a_mn.stride(0) == 1
    assert not torch.all(inp.scale_a == 1) and not torch.all(inp.scale_b == 1)
    a64 = inp.a.double() * inp.scale_a.double().repeat_interleave(128, 1)
    w64 = inp.w.double() * inp.scale_b.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:N]
    assert relative_error(a64 @ w64.T, ref) < 1e-6  # dequantisation rounds to float32


def test_check_blockscaled_holds_a_kernel_to_the_block_scaled_bound():
    """The block-scaled scripts checked with fp8's 5e-2 (blockscaled=False), which passed a
    result 2e-2 off; check_blockscaled applies 1e-2 and poisons the output first."""
    from tlgemm.bench import blockscaled_inputs, check_blockscaled

    inp, ref = blockscaled_inputs(8, 128, 256, device="cpu")

    def off_by(error):
        def fn(i):
            i.out.copy_(ref * (1 + error))
            return i.out
        return fn

    assert check_blockscaled(off_by(1e-3), inp, ref, "close") < 1e-2
    assert bench.check(off_by(2e-2), inp, ref, torch.float8_e4m3fn, "fp8's bound") < 5e-2
    with pytest.raises(AssertionError, match=r"> 1e-02 for block-scaled"):
        check_blockscaled(off_by(2e-2), inp, ref, "block-scaled bound")
    with pytest.raises(AssertionError):
        check_blockscaled(lambda i: i.out, inp, ref, "nothing written")


def test_fresh_blockscaled_inputs_quantise_new_bf16_values():
    """fresh_blockscaled_inputs: e4m3 operands and scales of the block-scaled kernels' layouts
    (A's scales outer-dim-major), new values on each call, dequantising to bf16 normals."""
    from tlgemm.bench import fresh_blockscaled_inputs

    torch.manual_seed(0)
    first = fresh_blockscaled_inputs(3, 130, 256, device="cpu")
    second = fresh_blockscaled_inputs(3, 130, 256, device="cpu")
    assert first.a.dtype == first.w.dtype == torch.float8_e4m3fn and first.out.dtype == torch.bfloat16
    assert first.a.shape == (3, 256) and first.w.shape == (130, 256) and first.out.shape == (3, 130)
    assert first.scale_a.shape == (3, 2) and first.scale_b.shape == (2, 2)
    assert torch.equal(first.scale_a_mn, first.scale_a) and first.scale_a_mn.stride(0) == 1
    assert not torch.equal(first.a, second.a) and not torch.equal(first.w, second.w)
    w = first.w.float() * first.scale_b.repeat_interleave(128, 0).repeat_interleave(128, 1)[:130]
    assert 0.8 < w.std().item() < 1.2  # randn values, quantised


@pytest.mark.gpu
def test_kernel_time_us_reports_each_call():
    a = torch.randn(512, 512, device="cuda")
    buffer = torch.empty(2**24, dtype=torch.int32, device="cuda")
    times = bench.kernel_time_us(lambda: a @ a, calls=4, flush=buffer.zero_)
    assert len(times) == 4 and all(t > 0 for t in times)
