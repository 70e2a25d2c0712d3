"""select()'s cost model replayed on every measured schedule of benchmarks/results (CPU only).

    python benchmarks/model_backtest.py [--models MODULE ...] [--worst N] [JSON ...]

The A/B and probe scripts (selection_ab.py, small_m_dense.py, schedule_variants.measure) record, per
shape, each timed schedule as ``str(schedule)`` beside its TFLOP/s (kernel time, every kernel checked
against float64 first). For every such row of an H100 JSON (default: all of benchmarks/results) this
ranks each measured schedule as a model module's select() would (``_score`` with the decomposition the
schedule states, swap-AB scored as select() scores it, then ``rank_key``), and reports per model:

- chosen / best: the measured TFLOP/s of the schedule the model ranks first among those measured in
  the row, over the row's best (geomean over rows, and the worst rows);
- pairs: the share of measured pairs more than 5% apart that the model orders the same way.

A model is a module with select()'s ``_score`` and ``rank_key`` (e.g. ``tlgemm.schedules.selection``, or
an edited copy placed next to it); rows measured on older kernels keep their old timings, so read changes of a few
rows, not the last digit.
"""
import argparse
import glob
import importlib
import itertools
import json
import math
import os

from core_speed import DTYPES
from tlgemm.schedules import Schedule
from tlgemm.schedules.dtypes import gemm_dtypes

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SMS = 132  # the H100 SXM's SMs, which every default JSON was measured on
APART = 1.05  # pairs closer than this are not counted


def measured_rows(paths):
    """(file, dtype, M, N, K, [(Schedule, TFLOP/s), ...]) for each row with two or more schedules."""
    rows = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, dict) or "H100" not in str(data.get("gpu", "")):
            continue
        for row in data.get("rows", []):
            if row.get("dtype") not in DTYPES or not isinstance(row.get("schedules"), dict):
                continue  # rows of other kinds (block-scaled, pipeline probes) or without schedules
            dtype = str(DTYPES[row["dtype"]]).removeprefix("torch.")  # the writers' labels (schedule_variants)
            cells = {text: (Schedule.parse(text), row["tflops"][label])
                     for label, text in row["schedules"].items() if label in row.get("tflops", {})}
            if len(cells) >= 2:
                rows.append((os.path.basename(path), dtype, row["M"], row["N"], row["K"], list(cells.values())))
    return rows


def rank(model, s: Schedule, M: int, N: int, K: int, dtype: str) -> tuple:
    """The model's ranking key of schedule s for C[M, N] (select()'s ``rank_key``: modelled time
    times the width margin, then its tie-breaks)."""
    mode = "Stream-K" if s.streamk_tiles else "split-K" if s.split_k > 1 else "data-parallel"
    rows, cols = (N, M) if s.is_swap_ab else (M, N)
    return model.rank_key(model._score(s, mode, rows, cols, K, gemm_dtypes((dtype, dtype, "bfloat16")), SMS, 0), M, N)


def evaluate(model, rows):
    """(geomean chosen / best, [(chosen / best, row, chosen schedule), ...] worst first, right pairs, pairs)."""
    ratios, right, pairs = [], 0, 0
    for row in rows:
        _, dtype, M, N, K, cells = row
        keys = [rank(model, s, M, N, K, dtype) for s, _ in cells]
        tflops = [t for _, t in cells]
        chosen = min(range(len(cells)), key=keys.__getitem__)
        ratios.append((tflops[chosen] / max(tflops), row, cells[chosen][0]))
        for i, j in itertools.combinations(range(len(cells)), 2):
            if max(tflops[i], tflops[j]) > APART * min(tflops[i], tflops[j]):
                pairs += 1
                right += (tflops[i] > tflops[j]) == (keys[i] < keys[j])
    geomean = math.exp(sum(math.log(r) for r, _, _ in ratios) / len(ratios))
    return geomean, sorted(ratios, key=lambda x: x[0]), right, pairs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="*", help="result JSONs (default: every one in benchmarks/results)")
    parser.add_argument("--models", nargs="+", default=["tlgemm.schedules.selection"], help="model modules")
    parser.add_argument("--worst", type=int, default=10, help="rows listed per model (default 10)")
    args = parser.parse_args()
    rows = measured_rows(args.json or sorted(glob.glob(os.path.join(RESULTS, "*.json"))))
    print(f"{len(rows)} measured rows from {len({r[0] for r in rows})} files")
    for name in args.models:
        geomean, ratios, right, pairs = evaluate(importlib.import_module(name), rows)
        print(f"\n{name}: chosen / best {geomean:.4f} (geomean), pairs ordered right {right}/{pairs} "
              f"({right / pairs:.1%})")
        for ratio, (path, dtype, M, N, K, _), s in ratios[:args.worst]:
            print(f"  {ratio:.3f}  {dtype} {M}x{N}x{K}  chose {s}  ({path})")


if __name__ == "__main__":
    main()
