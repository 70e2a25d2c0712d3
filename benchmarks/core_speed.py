"""Issue 6's speed table, in one run: the TileLang persistent kernel (through tlgemm.matmul,
select()'s schedule) vs cuBLAS, vs TileLang's own T.gemm and vs tlgemm's Triton backend, at
4096³, 8192³ and 4096×7168×16384 in bf16 and fp8 (e4m3 in, bf16 out), plus a few schedule
variants of the TileLang kernel (Stream-K over the last partial wave, the other raster order,
raster groups of 8 tile rows (select()'s before ``raster_group``), 2-CTA clusters with TMA
multicast) to show where select()'s choice stands.

    python benchmarks/core_speed.py --out benchmarks/results/core_speed_h100.json --rounds 3 --kernel-time
        [--dtypes fp8]

C[M, N] = A[M, K] · W[N, K]ᵀ, both operands K-major; cuBLAS is torch.matmul (bf16) and
torch._scaled_mm with per-tensor scales of one (fp8), whose default promotes the tensor cores'
partial sums into float32 as K advances; ``cublas_fast_accum`` (fp8 rows) is the same call with
use_fast_accum=True, which does not, as tlgemm's per-tensor fp8 kernel does not (its relative
error grows with K; DESIGN.md's fp8 bound holds). T.gemm: T.Pipelined + T.gemm, 128x256
tile, 3 stages, 256 threads (benchmarks/emitter_vs_tgemm.py). Every kernel, cuBLAS included, is
checked before it is timed against the float64 product of the same inputs on a NaN-poisoned output
(tlgemm.testing.assert_gemm_close: DESIGN.md's bound for the input dtype; a wrong one gets no number). Timing:
triton.testing.do_bench medians (it flushes L2 between repetitions); with ``--rounds R`` every kernel
of every row is timed once per round, rows and kernels interleaved, and a cell is the median of
its R figures (one host drifts by several percent within minutes, so back-to-back timings of
one row would compare the kernels at different moments). Each round draws a new order of the rows
and of each row's kernels (``--seed``; the JSON's ``orders``): under the board's power limit a
kernel's do_bench figure moves with what ran before it (results/core_speed.md), so no kernel keeps
the first place after the checks' idle time or any other. The seed is drawn afresh unless given
(a fixed seed repeats the same orders, and so the same bias, in every run). A ratio is the
median of the per-round ratios, each between two kernels timed in the same round (the kernels
of one round share its moment of the host's drift; a ratio of two medians can pair rounds
minutes apart). ``--kernel-time`` adds cuBLAS's and tilelang's device time per call
(tlgemm.bench.kernel_time_us, DeepGEMM's method). balanced_order.py times cuBLAS, tilelang and
its group-8 variant in all six orders of the three, for the ratios alone. Targets (issue 6): the
TileLang kernel >= 1.0x cuBLAS in bf16 and >= 1.05x in fp8 on these shapes.
"""

import argparse
import datetime
import json
import random
import statistics
from dataclasses import replace

import tilelang
import torch
from triton.testing import do_bench

import tlgemm
from emitter_vs_tgemm import tgemm
from tlgemm.bench import kernel_time_us, median_rate
from tlgemm.testing import assert_gemm_close, poison_allocator, reference_gemm

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384))
DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}


def cublas_call(a, w, fast_accum=False):
    """cuBLAS's C = A · Wᵀ with a bf16 result: torch.matmul for 16-bit inputs, torch._scaled_mm
    with unit per-tensor scales for fp8 (``fast_accum``: its use_fast_accum, cuBLAS's fp8
    kernel without the periodic promotion of the tensor cores' partial sums into float32)."""
    if a.dtype.itemsize == 2:
        return lambda: torch.matmul(a, w.t())
    one = torch.ones((), device=a.device)
    return lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast_accum)


def variants(schedule, M, N, sms):
    """select()'s schedule and the variants compared with it, by label."""
    tiles = -(-M // schedule.block_m) * -(-N // schedule.block_n)
    out = {"select": schedule, "raster_n": replace(schedule, raster="n"),
           "group8": replace(schedule, group_size_m=8), "cluster2": schedule.cluster(2)}
    if tiles % sms:
        out["streamk_tail"] = schedule.streamk(tiles % sms)
    return out


def build_row(name, dtype, M, N, K, sms):
    """Inputs and the timed calls of one row, each checked first against the float64 product
    on a NaN-poisoned output: (select()'s schedule, the kernels' labels, the calls that passed
    by label, the check's message for those that did not and the relative error of those that
    did; a wrong kernel gets no number)."""
    a = torch.randn(M, K, device="cuda").to(dtype)
    w = torch.randn(N, K, device="cuda").to(dtype)
    cublas = cublas_call(a, w)
    ref = reference_gemm(a, w.t())
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    plan = tlgemm.explain(a, w.t(), backend="tilelang", out_dtype=torch.bfloat16)
    tg = tgemm(M, N, K, "bf16" if name == "bf16" else "e4m3", 128, 256, 64 if name == "bf16" else 128, 3, 256)
    kernels = {"cublas": cublas, **({"cublas_fast_accum": cublas_call(a, w, True)} if name == "fp8" else {}),
               "tgemm": lambda: tg(a, w, c),
               "tilelang": lambda: tlgemm.matmul(a, w.t(), out=c, backend="tilelang"),
               "triton": lambda: tlgemm.matmul(a, w.t(), out=c, backend="triton")}
    for label, s in variants(plan.schedule, M, N, sms).items():
        if label != "select":
            kernels[f"tilelang_{label}"] = lambda s=s: tlgemm.matmul(a, w.t(), out=c, backend="tilelang", schedule=s)
    checked, errors, rel_errors = {}, {}, {}
    for label, fn in kernels.items():
        c.fill_(float("nan"))
        poison_allocator((M, N), torch.bfloat16, c.device)  # cuBLAS allocates its output: poisoned memory too
        result = fn()
        result = result if isinstance(result, torch.Tensor) else c  # T.gemm writes c
        try:
            rel_errors[label] = assert_gemm_close(result, ref, dtype, what=f"{label} {name} {M}x{N}x{K}")
        except AssertionError as err:
            errors[label] = str(err)
        else:
            checked[label] = fn
    return str(plan.schedule), list(kernels), checked, errors, rel_errors


def table_of(rows):
    """The JSON rows: each kernel's median TFLOP/s and its rounds (None and the error where it
    failed its check), and with kernel time the same for cuBLAS and tilelang."""
    table = []
    for row in rows:
        entry = {k: row[k] for k in ("dtype", "M", "N", "K", "schedule")}
        for label in row["labels"]:
            if label in row["errors"]:
                entry[label], entry[f"{label}_error"] = None, row["errors"][label]
            elif row["samples"][label]:
                entry[label] = median_rate(row["samples"][label])
                entry[f"{label}_rounds"] = row["samples"][label]
                entry[f"{label}_rel_err"] = row["rel_errors"][label]
        for label, samples in row["kernel_samples"].items():
            entry[f"{label}_kernel_time"] = median_rate(samples)
            entry[f"{label}_kernel_time_rounds"] = samples
        table.append(entry)
    return table


def paired_ratio(entry, label, baseline):
    """The median over the rounds of ``label``'s figure over ``baseline``'s in the same round
    (a JSON row of ``table_of``)."""
    return statistics.median(a / b for a, b in zip(entry[f"{label}_rounds"], entry[f"{baseline}_rounds"]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rep", type=int, default=200, help="do_bench measuring time per kernel, ms")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--rounds", type=int, default=1,
                        help="interleaved rounds: every kernel of every row once per round; a cell is the median")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the rounds' orders of rows and kernels (default: drawn afresh, kept in the JSON)")
    parser.add_argument("--kernel-time", action="store_true",
                        help="also cuBLAS's and tilelang's device time (tlgemm.bench.kernel_time_us, L2 evicted "
                             "before each call), median over the rounds")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    rows = []
    for name in args.dtypes:
        for M, N, K in SHAPES:
            schedule, labels, checked, errors, rel_errors = build_row(name, DTYPES[name], M, N, K,
                                                                      props.multi_processor_count)
            rows.append({"dtype": name, "M": M, "N": N, "K": K, "schedule": schedule, "checked": checked,
                         "errors": errors, "rel_errors": rel_errors, "labels": labels,
                         "samples": {label: [] for label in checked},
                         "kernel_samples": {}})
    seed = random.SystemRandom().randrange(2**31) if args.seed is None else args.seed
    rng, orders = random.Random(seed), []
    for _ in range(args.rounds):
        order = []
        for row in rng.sample(rows, len(rows)):
            flops = 2 * row["M"] * row["N"] * row["K"]
            labels = rng.sample(list(row["checked"]), len(row["checked"]))
            order.append(f"{row['dtype']} {row['M']}x{row['N']}x{row['K']}: " + ", ".join(labels))
            for label in labels:
                row["samples"][label].append(flops / do_bench(row["checked"][label], warmup=50, rep=args.rep) / 1e9)
            for label in ("cublas", "cublas_fast_accum", "tilelang") if args.kernel_time else ():
                if label in row["checked"]:
                    us = statistics.median(kernel_time_us(row["checked"][label], calls=20))
                    row["kernel_samples"].setdefault(label, []).append(flops / us / 1e6)
        orders.append(order)
        result = {"gpu": props.name, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                  "torch": torch.__version__, "tilelang": tilelang.__version__, "rounds": len(orders),
                  "rep_ms": args.rep, "seed": seed, "orders": orders, "rows": table_of(rows)}
        with open(args.out, "w") as f:  # after every round: a cut-off run keeps what it measured
            json.dump(result, f, indent=1)
    table = result["rows"]
    labels = list(dict.fromkeys(label for row in rows for label in row["labels"]))
    print(f"\n{props.name}; TFLOP/s (median of {args.rounds} round(s)), and tilelang's ratios (median of the "
          "per-round ratios)")
    ratios = [("tilelang", "cublas"), ("tilelang", "cublas_fast_accum")]
    if args.kernel_time:
        ratios += [("tilelang_kernel_time", "cublas_kernel_time"),
                   ("tilelang_kernel_time", "cublas_fast_accum_kernel_time")]
    heads = [f"{a} / {b}".replace("_kernel_time", "") + (" (kernel time)" if "kernel_time" in a else "")
             for a, b in ratios]
    print("| dtype | M x N x K | " + " | ".join(labels + heads) + " |")
    print("|---" * (len(labels) + 2 + len(heads)) + "|")

    def ratio(r, tilelang, cublas):
        return f"{paired_ratio(r, tilelang, cublas):.3f}" if r.get(tilelang) and r.get(cublas) else "-"

    for r in table:
        cells = [f"{r[k]:.0f}" if r.get(k) else "-" for k in labels]
        cells += [ratio(r, a, b) for a, b in ratios]
        print(f"| {r['dtype']} | {r['M']}x{r['N']}x{r['K']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
