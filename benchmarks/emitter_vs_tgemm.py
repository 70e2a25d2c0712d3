"""The emitter GEMMs vs TileLang's T.gemm (same tile, stages, threads) vs cuBLAS, in one run.

Two kernels built on tlgemm.macros.WGMMAEmitter: "emitter" is the minimal GEMM of
tlgemm.tilelang.emitter_gemm (TileLang's pipeline of copies, wait(0) each K step);
"emitter_ws" is tlgemm.tilelang's persistent kernel (a TMA producer warpgroup, mbarrier
ring, one wgmma batch left in flight) with the same tile and stages, and "emitter_ws4" the
same with four stages (its default). T.gemm: T.Pipelined + T.gemm with that tile and stages.

Usage: python benchmarks/emitter_vs_tgemm.py --out benchmarks/results/emitter_vs_tgemm.json
Timings: triton.testing.do_bench (median), random data; every kernel, cuBLAS included, is checked
before it is timed against the float64 product of the same inputs on a NaN-poisoned output
(tlgemm.testing.assert_gemm_close: DESIGN.md's bound for the input dtype; a wrong kernel gets no
number, its check's message instead).
"""

import argparse
import datetime
import json

import tilelang
import tilelang.language as T
import torch
from triton.testing import do_bench

from tlgemm.schedules import Schedule
from tlgemm.tilelang import persistent_matmul
from tlgemm.tilelang.emitter_gemm import compile_kernel, emitter_gemm
from tlgemm.testing import assert_gemm_close, poison_allocator, reference_gemm

CONFIGS = {  # dtype -> (block_m, block_n, block_k, warpgroups_m, stages)
    "bf16": (128, 256, 64, 2, 3),
    "e4m3": (128, 256, 128, 2, 3),
}
TORCH = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}
STORAGE = {"bf16": "bfloat16", "e4m3": "float8_e4m3fn"}


def tgemm(M, N, K, dtype, bm, bn, bk, stages, threads):
    st = STORAGE[dtype]

    @T.prim_func
    def gemm(A: T.Tensor((M, K), st), B: T.Tensor((N, K), st), C: T.Tensor((M, N), "bfloat16")):
        with T.Kernel(N // bn, M // bm, threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), st)
            B_s = T.alloc_shared((bn, bk), st)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(K // bk, num_stages=stages):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[bx * bn, ko * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return tilelang.compile(gemm, target="cuda")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", default="4096,8192")
    args = parser.parse_args()
    gpu = torch.cuda.get_device_name()
    rows = []
    for dtype, (bm, bn, bk, wgm, stages) in CONFIGS.items():
        for size in (int(s) for s in args.sizes.split(",")):
            M = N = K = size
            a = torch.randn(M, K, device="cuda").to(TORCH[dtype])
            b = torch.randn(N, K, device="cuda").to(TORCH[dtype])
            one = torch.ones((), device="cuda")
            ref = reference_gemm(a, b.t())
            if dtype == "bf16":
                cublas = lambda: torch.matmul(a, b.t())  # noqa: E731
            else:
                cublas = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
            flops = 2 * M * N * K
            what = f"cuBLAS {dtype} {size}^3"
            poison_allocator((M, N), torch.bfloat16, a.device)  # cuBLAS allocates its output: poisoned memory
            row = {"dtype": dtype, "M": M, "N": N, "K": K, "tile": f"{bm}x{bn}x{bk}", "stages": stages,
                   "cublas_rel_err": assert_gemm_close(cublas(), ref, TORCH[dtype], what=what),
                   "cublas_tflops": flops / do_bench(cublas) / 1e9}
            em = compile_kernel(emitter_gemm(M, N, K, dtype, dtype, "f32", "bfloat16", block_m=bm, block_n=bn,
                                             block_k=bk, warpgroups_m=wgm, num_stages=stages))
            tg = tgemm(M, N, K, dtype, bm, bn, bk, stages, 128 * wgm)
            kw = {} if dtype == "bf16" else {"out_dtype": torch.bfloat16}

            def warp_specialised(num_stages):
                s = Schedule(block_m=bm, block_n=bn, block_k=bk, num_stages=num_stages,
                             num_warpgroups=wgm).persistent()
                return lambda a_, b_, c_: persistent_matmul(a_, b_.t(), s, out=c_, **kw)

            kernels = (("emitter", em), ("tgemm", tg), ("emitter_ws", warp_specialised(stages)),
                       ("emitter_ws4", warp_specialised(4)))
            for name, kern in kernels:
                c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern(a, b, c)
                try:
                    row[f"{name}_rel_err"] = assert_gemm_close(c, ref, TORCH[dtype], what=f"{name} {dtype} {size}^3")
                except AssertionError as err:
                    row[f"{name}_tflops"] = None
                    row[f"{name}_error"] = str(err)
                    continue
                row[f"{name}_tflops"] = flops / do_bench(lambda: kern(a, b, c)) / 1e9
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"gpu": gpu, "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "torch": torch.__version__, "tilelang": tilelang.__version__, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{gpu}")
    print(f"{'dtype':6} {'size':>6} {'cuBLAS':>8} {'T.gemm':>8} {'emitter':>8} {'ws':>8} {'ws4':>8} "
          f"{'ws/T.gemm':>9} {'ws4/T.gemm':>10} {'ws4/cuBLAS':>10}")
    fmt = lambda v: f"{v:8.1f}" if v else "   wrong"  # noqa: E731
    div = lambda x, y: x / y if x and y else 0  # noqa: E731
    for r in rows:
        em, tg, cb = r.get("emitter_tflops"), r.get("tgemm_tflops"), r["cublas_tflops"]
        ws, ws4 = r.get("emitter_ws_tflops"), r.get("emitter_ws4_tflops")
        print(f"{r['dtype']:6} {r['M']:>6} {fmt(cb)} {fmt(tg)} {fmt(em)} {fmt(ws)} {fmt(ws4)} "
              f"{div(ws, tg):9.3f} {div(ws4, tg):10.3f} {div(ws4, cb):10.3f}")


if __name__ == "__main__":
    main()
