"""Host overhead per call of tlgemm.matmul against torch.matmul at tiny shapes, in one run.

    python benchmarks/host_overhead.py [--calls 300] [--repeats 21] [--out benchmarks/results/host_overhead.json]

For each shape (16³ and 64³, bf16; a row-major, b the transpose of a row-major [N, K] weight)
and each implementation: one checked call (against the float64 product of the same inputs,
its output buffer poisoned with NaN first; a wrong result stops the run) and a warm-up (compilation, tlgemm's plan cache). Then ``repeats`` rounds, each timing
``calls`` back-to-back calls of every implementation in turn (time.perf_counter, a final
synchronize); per call = wall time / calls, the median over the rounds. Round-robin rounds
keep the host's own warm-up (clock ramp, caches: the first loop of a fresh process runs up to
1.5x slower) from landing on whichever row is timed first. A kernel this small runs in a few
microseconds, so the GPU never holds up the loop and the wall time per call is the host's time
per call ("issue" is the loop alone, before the synchronize; 300 calls stay well below the
roughly thousand pending launches at which a launch call blocks, so a kernel slower than the
host would show as wall > issue rather than inside the issue time). Rows:

  torch.matmul                      cuBLAS through torch, allocating its output
  torch.matmul(out=)                the same into a preallocated output
  tlgemm.matmul [backend]           the entry point, allocating its output
  tlgemm.matmul(out=) [backend]     the entry point into a preallocated output
  tlgemm.<backend>.matmul(out=)     the backend's launcher with the resolved schedule: what
                                    the entry point adds is the difference to the row above

Target (issue 7): tlgemm.matmul takes no more per call than torch.matmul. The JSON records the
GPU's name, the library versions and the date.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import pathlib
import platform
import statistics
import time

import torch

import tlgemm
from tlgemm.testing import assert_gemm_close, random_operand, reference_gemm

SHAPES = ((16, 16, 16), (64, 64, 64))


def timed_loop(fn, calls: int) -> tuple[float, float]:
    """(wall, issue) microseconds per call of one loop of ``calls`` calls."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter()
    torch.cuda.synchronize()
    done = time.perf_counter()
    return (done - start) / calls * 1e6, (issued - start) / calls * 1e6


def per_call_us(fns, calls: int, repeats: int) -> list[tuple[float, float]]:
    """(wall, issue) microseconds per call of each fn: medians over ``repeats`` round-robin
    rounds of one ``calls``-call loop per fn, after a warm-up loop of each."""
    for fn in fns:
        timed_loop(fn, max(10, calls // 10))
    loops = [[timed_loop(fn, calls) for fn in fns] for _ in range(repeats)]
    return [(statistics.median(r[i][0] for r in loops), statistics.median(r[i][1] for r in loops))
            for i in range(len(fns))]


def backends() -> list[str]:
    """TileLang (on sm_90, when the backend has matmul), then Triton."""
    tilelang_backend = importlib.import_module("tlgemm.tilelang")
    hopper = torch.cuda.get_device_capability() == (9, 0)
    return (["tilelang"] if hopper and hasattr(tilelang_backend, "matmul") else []) + ["triton"]


def implementations(a, b, backend_names):
    """((label, fn) pairs, the output buffer of the ``out=`` rows); each fn returns the result
    it computed."""
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    impls = [("torch.matmul", lambda: torch.matmul(a, b)),
             ("torch.matmul(out=)", lambda: torch.matmul(a, b, out=out))]
    for name in backend_names:
        tlgemm.matmul(a, b, backend=name)  # resolves (and caches) the plan; explain then reports it
        schedule = tlgemm.explain(a, b, backend=name).schedule
        launcher = importlib.import_module(f"tlgemm.{name}").matmul
        impls += [(f"tlgemm.matmul [{name}]", lambda name=name: tlgemm.matmul(a, b, backend=name)),
                  (f"tlgemm.matmul(out=) [{name}]", lambda name=name: tlgemm.matmul(a, b, out=out, backend=name)),
                  (f"tlgemm.{name}.matmul(out=)", lambda launcher=launcher, s=schedule: launcher(a, b, s, out=out))]
    return impls, out


def version(module: str) -> str:
    try:
        return importlib.import_module(module).__version__
    except (ImportError, AttributeError):
        return "unknown"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--out", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent / "results" / "host_overhead.json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    gpu = torch.cuda.get_device_name()
    names = backends()
    generator = torch.Generator().manual_seed(20261121)
    rows = []
    print(f"host time per call on {gpu} ({args.calls} calls x {args.repeats} repeats, median), bf16, layout nt")
    print(f"{'shape':>10}  {'implementation':32s} {'us/call':>9} {'issue us':>9} {'vs torch.matmul':>16}")
    for M, N, K in SHAPES:
        a = random_operand((M, K), torch.bfloat16, generator=generator, device="cuda")
        b = random_operand((N, K), torch.bfloat16, generator=generator, device="cuda").t()
        reference = reference_gemm(a, b)
        impls, out = implementations(a, b, names)
        for label, fn in impls:
            out.fill_(float("nan"))
            assert_gemm_close(fn(), reference, torch.bfloat16, what=label)
        times = per_call_us([fn for _, fn in impls], args.calls, args.repeats)
        baseline = times[0][0]
        for (label, _), (wall, issue) in zip(impls, times):
            rows.append({"M": M, "N": N, "K": K, "impl": label, "us_per_call": wall, "issue_us_per_call": issue,
                         "ratio_to_torch_matmul": wall / baseline})
            print(f"{f'{M}x{N}x{K}':>10}  {label:32s} {wall:9.2f} {issue:9.2f} {wall / baseline:15.2f}x")
    record = {
        "benchmark": "host_overhead", "gpu": gpu, "capability": list(torch.cuda.get_device_capability()),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"torch": torch.__version__, "triton": version("triton"), "tilelang": version("tilelang"),
                     "python": platform.python_version()},
        "calls": args.calls, "repeats": args.repeats, "dtype": "bfloat16", "layout": "nt", "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
