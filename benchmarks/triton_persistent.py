"""Persistent GEMM speed: tlgemm's stages kernel vs a Triton-tutorial-style persistent
kernel (same tiles) vs cuBLAS, bf16, in one run.

    python benchmarks/triton_persistent.py --out benchmarks/results/triton_persistent_h100.json

Each kernel is checked against torch.matmul first, then timed with triton.testing.do_bench
(median of repeated runs, L2 flushed between runs) on random data. Both Triton kernels use
128x256x64 tiles, GROUP_SIZE_M 8, 3 stages, 8 warps and min(SMs, tiles) programs (the
configuration of Triton's 09-persistent-matmul tutorial for 16-bit inputs). The comparison
kernel below is written in that tutorial's style: offsets wrapped with tl.where and
contiguity hints, the K tail masked every step, the tile loop flattened with the K loop.
Layout "nt" passes B as the transpose of a contiguous [N, K] tensor (the tutorial's
benchmark); "nn" passes a contiguous [K, N] B. Target: tlgemm >= 0.97x the tutorial kernel.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

import tlgemm.triton as tlgemm_triton
from tlgemm.schedules import Schedule
from tlgemm.triton.kernels import persistent_gemm_kernel
from tlgemm.triton.launch import _prepare

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, STAGES, WARPS = 128, 256, 64, 8, 3, 8
TARGET_RATIO = 0.97


@triton.jit
def _grouped_tile(tile_id, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    width = GROUP_M * tiles_n
    first_m = (tile_id // width) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile_id % width) % rows, (tile_id % width) // rows


@triton.jit
def tutorial_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                               stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    """Tutorial-style persistent GEMM (the comparison baseline)."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    rk = tl.arange(0, BLOCK_K)
    epilogue_tile = pid - NUM_SMS
    for tile_id in tl.range(pid, tiles_m * tiles_n, NUM_SMS, flatten=True):
        pid_m, pid_n = _grouped_tile(tile_id, tiles_m, tiles_n, GROUP_M)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rm = tl.max_contiguous(tl.multiple_of(tl.where(rm < M, rm, 0), BLOCK_M), BLOCK_M)
        rn = tl.max_contiguous(tl.multiple_of(tl.where(rn < N, rn, 0), BLOCK_N), BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            kk = ki * BLOCK_K + rk
            a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                        mask=rk[None, :] < K - ki * BLOCK_K, other=0.0)
            b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                        mask=rk[:, None] < K - ki * BLOCK_K, other=0.0)
            acc = tl.dot(a, b, acc)
        epilogue_tile += NUM_SMS
        pid_m, pid_n = _grouped_tile(epilogue_tile, tiles_m, tiles_n, GROUP_M)
        cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
                 mask=(cm[:, None] < M) & (cn[None, :] < N))


def tutorial_matmul(a, b, c, num_sms):
    M, K = a.shape
    N = b.shape[1]
    grid = (min(num_sms, triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)),)
    tutorial_persistent_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=BLOCK_M,
                                     BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, NUM_SMS=grid[0],
                                     num_stages=STAGES, num_warps=WARPS)
    return c


def tflops(M, N, K, ms):
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12


def bench_shape(size, layout, num_sms, schedule, warmup, rep):
    M = N = K = size
    g = torch.Generator(device="cuda").manual_seed(size)
    a = torch.randn((M, K), device="cuda", generator=g).to(torch.bfloat16)
    if layout == "nt":
        b = torch.randn((N, K), device="cuda", generator=g).to(torch.bfloat16).T
    else:
        b = torch.randn((K, N), device="cuda", generator=g).to(torch.bfloat16)
    ref = torch.matmul(a, b)
    c_ours = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    c_tutorial = torch.empty_like(c_ours)

    # The tlgemm kernel launched directly with validated arguments (launcher checks are
    # host work outside the kernel); the full launcher is timed too.
    _, args, meta = _prepare(a, b, schedule, c_ours, None, None, None, None, False, num_sms)
    grid = (meta["NUM_SMS"],)

    def ours():
        persistent_gemm_kernel[grid](*args, **meta)

    def ours_launcher():
        tlgemm_triton.persistent_matmul(a, b, schedule, out=c_ours, num_sms=num_sms)

    def tutorial():
        tutorial_matmul(a, b, c_tutorial, num_sms)

    def cublas():
        torch.matmul(a, b)

    for name, fn, c in (("tlgemm", ours, c_ours), ("tutorial", tutorial, c_tutorial)):
        c.fill_(float("nan"))
        fn()
        err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
        if not err <= 1e-2:
            raise SystemExit(f"{name} kernel is wrong at {size}^3 {layout}: relative error {err:.3e}")
    ms = {name: do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
          for name, fn in (("tlgemm", ours), ("tlgemm_launcher", ours_launcher), ("tutorial", tutorial),
                           ("cublas", cublas))}
    row = {"M": M, "N": N, "K": K, "layout": layout, "ms": ms,
           "tflops": {name: tflops(M, N, K, t) for name, t in ms.items()}}
    row["ratio_vs_tutorial"] = ms["tutorial"] / ms["tlgemm"]
    row["ratio_vs_cublas"] = ms["cublas"] / ms["tlgemm"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=pathlib.Path, help="where to write the JSON results")
    parser.add_argument("--sizes", default="4096,8192", help="comma-separated square sizes (M = N = K)")
    parser.add_argument("--layouts", default="nt,nn", help="comma-separated: nt (B = contiguous [N, K]ᵀ), nn")
    parser.add_argument("--warmup", type=int, default=100, help="do_bench warm-up time, ms")
    parser.add_argument("--rep", type=int, default=1000, help="do_bench measuring time, ms")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    props = torch.cuda.get_device_properties(0)
    num_sms = props.multi_processor_count
    schedule = Schedule(block_m=BLOCK_M, block_n=BLOCK_N, block_k=BLOCK_K, group_size_m=GROUP_M,
                        num_stages=STAGES, num_warpgroups=WARPS // 4).persistent()
    rows = [bench_shape(int(size), layout, num_sms, schedule, args.warmup, args.rep)
            for size in args.sizes.split(",") for layout in args.layouts.split(",")]

    print(f"GPU: {props.name} ({num_sms} SMs), torch {torch.__version__}, triton {triton.__version__}")
    print(f"schedule: {schedule}")
    header = f"{'shape':>16} {'layout':>6} {'tlgemm':>9} {'(launcher)':>10} {'tutorial':>9} {'cuBLAS':>9}" \
             f" {'vs tutorial':>11} {'vs cuBLAS':>9}"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        t = r["tflops"]
        print(f"{r['M']:>5}x{r['N']}x{r['K']:<5} {r['layout']:>6} {t['tlgemm']:9.1f} {t['tlgemm_launcher']:10.1f}"
              f" {t['tutorial']:9.1f} {t['cublas']:9.1f} {r['ratio_vs_tutorial']:10.3f}x {r['ratio_vs_cublas']:8.3f}x")
    print("(TFLOP/s from do_bench medians; ratios are time(other) / time(tlgemm))")
    worst = min(r["ratio_vs_tutorial"] for r in rows)
    print(f"target tlgemm >= {TARGET_RATIO}x tutorial: {'met' if worst >= TARGET_RATIO else 'MISSED'} (worst {worst:.3f}x)")

    result = {"gpu": props.name, "num_sms": num_sms, "torch": torch.__version__, "triton": triton.__version__,
              "dtype": "bfloat16", "schedule": schedule.to_dict(), "timing": "triton.testing.do_bench median",
              "target_ratio_vs_tutorial": TARGET_RATIO, "target_met": worst >= TARGET_RATIO, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
