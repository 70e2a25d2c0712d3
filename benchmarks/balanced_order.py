"""Issue 6's ratios with the kernels' order balanced, in one run: cuBLAS, select()'s TileLang
schedule and the same schedule with raster groups of 8 tile rows, on core_speed.py's rows.

    python benchmarks/balanced_order.py --out PATH [--cycles 4] [--rep 200] [--dtypes bf16 fp8]

Why: under the board's power limit a kernel's do_bench figure moves with what ran just before
it (results/core_speed.md), and a few rounds in random orders (core_speed.py) leave each kernel
more often in some places than in others; until 2026-12-02 core_speed.py's fixed seed repeated
the same orders, and the same bias, in every run. Here each cycle runs the three
kernels of every row in all six of their orders (rows interleaved, the row order drawn afresh
per order), so each kernel runs first, second and third equally often and after each of the
others equally often. Every kernel is checked first against the float64 product of the same
inputs on a NaN-poisoned output (tlgemm.testing.assert_gemm_close; a wrong one stops the run).
A cell is the median over all rounds (tlgemm.bench.median_rate); a ratio is the median of
the per-round ratios, each taken between two kernels of the same round. The JSON keeps every
round with its order, and the mean figure per position, which shows the order effect itself.
"""

import argparse
import datetime
import itertools
import json
import random
import statistics
from dataclasses import replace

import tilelang
import torch
from triton.testing import do_bench

import tlgemm
from core_speed import DTYPES, SHAPES
from schedule_variants import checked_calls
from tlgemm.bench import median_rate

LABELS = ("cublas", "select", "group8")


def build_row(name, M, N, K):
    """The checked calls of one row by label, select()'s schedule and the relative errors."""
    plan = tlgemm.explain(torch.empty(M, K, device="cuda", dtype=DTYPES[name]),
                          torch.empty(N, K, device="cuda", dtype=DTYPES[name]).t(), backend="tilelang",
                          out_dtype=torch.bfloat16)
    calls, rel_errors = checked_calls(name, DTYPES[name], M, N, K,
                                      {"select": None, "group8": replace(plan.schedule, group_size_m=8)})
    return {"dtype": name, "M": M, "N": N, "K": K, "schedule": str(plan.schedule), "calls": calls,
            "rel_err": rel_errors, "rounds": []}


def summary(row):
    """The JSON row: medians, paired ratios, per-position means and every round."""
    rates = {label: [r["tflops"][label] for r in row["rounds"]] for label in LABELS}
    by_position = [statistics.fmean(r["tflops"][r["order"][i]] / statistics.fmean(r["tflops"].values())
                                    for r in row["rounds"]) for i in range(len(LABELS))]
    return {**{k: row[k] for k in ("dtype", "M", "N", "K", "schedule", "rel_err")},
            "tflops": {label: median_rate(v) for label, v in rates.items()},
            "select_over_cublas": statistics.median(s / c for s, c in zip(rates["select"], rates["cublas"])),
            "group8_over_select": statistics.median(g / s for g, s in zip(rates["group8"], rates["select"])),
            "position_vs_round_mean": by_position, "rounds": row["rounds"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--cycles", type=int, default=4, choices=range(1, 101), metavar="1..100",
                        help="passes over all six orders of the three kernels")
    parser.add_argument("--rep", type=int, default=200, help="do_bench measuring time per kernel, ms")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--seed", type=int, default=0, help="seed of the row orders")
    args = parser.parse_args()
    rows = [build_row(name, M, N, K) for name in args.dtypes for M, N, K in SHAPES]
    rng = random.Random(args.seed)
    for cycle in range(args.cycles):
        for order in itertools.permutations(LABELS):
            for row in rng.sample(rows, len(rows)):
                flops = 2 * row["M"] * row["N"] * row["K"]
                tflops = {label: flops / do_bench(row["calls"][label], warmup=50, rep=args.rep) / 1e9
                          for label in order}
                row["rounds"].append({"cycle": cycle, "order": list(order), "tflops": tflops})
        result = {"gpu": torch.cuda.get_device_name(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
                  "torch": torch.__version__, "tilelang": tilelang.__version__, "cycles": cycle + 1,
                  "rep_ms": args.rep, "seed": args.seed, "rows": [summary(row) for row in rows]}
        with open(args.out, "w") as f:  # after every cycle: a cut-off run keeps what it measured
            json.dump(result, f, indent=1)
    print(f"\n{result['gpu']}; TFLOP/s, medians of {6 * result['cycles']} rounds in balanced orders")
    print("| dtype | M x N x K | cuBLAS | select | group 8 | select / cuBLAS | group 8 / select "
          "| 1st / 2nd / 3rd place vs round mean |")
    print("|---|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        t = r["tflops"]
        places = " / ".join(f"{p:.3f}" for p in r["position_vs_round_mean"])
        print(f"| {r['dtype']} | {r['M']}x{r['N']}x{r['K']} | {t['cublas']:.0f} | {t['select']:.0f} | "
              f"{t['group8']:.0f} | {r['select_over_cublas']:.3f} | {r['group8_over_select']:.3f} | {places} |")


if __name__ == "__main__":
    main()
