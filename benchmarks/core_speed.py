"""Issue 6's speed table, in one run: the TileLang persistent kernel (through tlgemm.matmul,
select()'s schedule) vs cuBLAS, vs TileLang's own T.gemm and vs tlgemm's Triton backend, at
4096³, 8192³ and 4096×7168×16384 in bf16 and fp8 (e4m3 in, bf16 out), plus a few schedule
variants of the TileLang kernel (Stream-K over the last partial wave, the other raster order,
wider raster groups, 2-CTA clusters with TMA multicast) to show where select()'s choice stands.

    python benchmarks/core_speed.py --out benchmarks/results/core_speed_h100.json

C[M, N] = A[M, K] · W[N, K]ᵀ, both operands K-major; cuBLAS is torch.matmul (bf16) and
torch._scaled_mm with per-tensor scales of one (fp8). T.gemm: T.Pipelined + T.gemm, 128x256
tile, 3 stages, 256 threads (benchmarks/emitter_vs_tgemm.py). Every kernel's result is checked
against cuBLAS's before it is timed (a wrong one gets no number). Timing:
triton.testing.do_bench medians (it flushes L2 between repetitions). Targets (issue 6): the
TileLang kernel >= 1.0x cuBLAS in bf16 and >= 1.05x in fp8 on these shapes.
"""

import argparse
import datetime
import json
from dataclasses import replace

import tilelang
import torch
from triton.testing import do_bench

import tlgemm
from emitter_vs_tgemm import tgemm
from tlgemm.testing import relative_error

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384))
DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}


def cublas_call(a, w):
    """cuBLAS's C = A · Wᵀ with a bf16 result: torch.matmul for 16-bit inputs, torch._scaled_mm
    with unit per-tensor scales for fp8."""
    if a.dtype.itemsize == 2:
        return lambda: torch.matmul(a, w.t())
    one = torch.ones((), device=a.device)
    return lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def variants(schedule, M, N, sms):
    """select()'s schedule and the variants compared with it, by label."""
    tiles = -(-M // schedule.block_m) * -(-N // schedule.block_n)
    out = {"select": schedule, "raster_n": replace(schedule, raster="n"),
           "group16": replace(schedule, group_size_m=16), "cluster2": schedule.cluster(2),
           "cluster2_group16": replace(schedule, group_size_m=16).cluster(2)}
    if tiles % sms:
        out["streamk_tail"] = schedule.streamk(tiles % sms)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rep", type=int, default=200, help="do_bench measuring time per kernel, ms")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    rows = []
    for name, dtype in DTYPES.items():
        for M, N, K in SHAPES:
            a = torch.randn(M, K, device="cuda").to(dtype)
            w = torch.randn(N, K, device="cuda").to(dtype)
            cublas = cublas_call(a, w)
            ref = cublas().float()
            c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            plan = tlgemm.explain(a, w.t(), backend="tilelang", out_dtype=torch.bfloat16)
            tg = tgemm(M, N, K, "bf16" if name == "bf16" else "e4m3", 128, 256, 64 if name == "bf16" else 128, 3, 256)
            kernels = {"cublas": cublas,
                       "tgemm": lambda: tg(a, w, c),
                       "tilelang": lambda: tlgemm.matmul(a, w.t(), out=c, backend="tilelang"),
                       "triton": lambda: tlgemm.matmul(a, w.t(), out=c, backend="triton")}
            for label, s in variants(plan.schedule, M, N, props.multi_processor_count).items():
                if label != "select":
                    kernels[f"tilelang_{label}"] = (
                        lambda s=s: tlgemm.matmul(a, w.t(), out=c, backend="tilelang", schedule=s))
            flops = 2 * M * N * K
            row = {"dtype": name, "M": M, "N": N, "K": K, "schedule": str(plan.schedule)}
            for label, fn in kernels.items():
                c.fill_(float("nan"))
                result = fn()
                result = result if isinstance(result, torch.Tensor) else c  # T.gemm writes c
                err = relative_error(result.float(), ref)
                if not err < 1e-2:
                    row[label] = None
                    row[f"{label}_error"] = err
                    continue
                row[label] = flops / do_bench(fn, warmup=50, rep=args.rep) / 1e9
            rows.append(row)
            print(json.dumps(row), flush=True)
            result = {"gpu": props.name, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                      "torch": torch.__version__, "tilelang": tilelang.__version__, "rows": rows}
            with open(args.out, "w") as f:  # after every row: a cut-off run keeps what it measured
                json.dump(result, f, indent=1)
    labels = [k for k in rows[0] if k not in ("dtype", "M", "N", "K", "schedule") and not k.endswith("_error")]
    print(f"\n{props.name}; TFLOP/s, and tilelang / cuBLAS")
    print("| dtype | M x N x K | " + " | ".join(labels) + " | tilelang / cuBLAS |")
    print("|---" * (len(labels) + 3) + "|")
    for r in rows:
        cells = [f"{r[k]:.0f}" if r.get(k) else "-" for k in labels]
        ratio = r["tilelang"] / r["cublas"] if r.get("tilelang") and r.get("cublas") else 0
        print(f"| {r['dtype']} | {r['M']}x{r['N']}x{r['K']} | " + " | ".join(cells) + f" | {ratio:.3f} |")


if __name__ == "__main__":
    main()
