"""The TileLang block-scaled FP8 kernel over tile shapes, on DeepGEMM's shape table, one run.

    python benchmarks/blockscaled_tiles.py      (writes $OUT/bs.json, or /tmp/bs.json)

For each shape: every candidate tile (64-row tiles on one consumer warpgroup for M = 64,
those and 128-row tiles on two for M = 128, 128-row tiles with block_n 96..192 for large M;
block_n in steps of 16, powers of two or not), as many stages (<= 8) as shared memory holds.
Each candidate is checked against a float64 reference on dequantised inputs with random
non-unit scales, output poisoned with NaN (a failing one is listed as BAD), then timed with
triton.testing.do_bench. Prints the six fastest per shape; the JSON holds all.
"""
import json, os, torch, triton
from concurrent.futures import ThreadPoolExecutor
from tlgemm.tilelang.launch import blockscaled_matmul, _blockscaled_smem, _compiled_blockscaled, blockscaled_spec
from tlgemm.schedules import Schedule
from tlgemm.quantize import quantize_fp8_blockwise
torch.manual_seed(0)
fp8, bf16 = torch.float8_e4m3fn, torch.bfloat16
pairs = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
shapes = [(m, n, k) for n, k in pairs for m in (64, 128, 4096)] + [(1000, 2112 + 16 * 7, 384)]

def sched(bm, bn, wg):
    s = Schedule(block_m=bm, block_n=bn, block_k=128, num_stages=2, num_warpgroups=wg).persistent()
    st = 2
    while st < 8 and _blockscaled_smem(s.stages(st + 1), fp8, fp8, bf16) <= 232448:
        st += 1
    return s.stages(st)

def cands(M):
    if M <= 64:
        return [sched(64, bn, 1) for bn in range(16, 193, 16)]
    if M <= 128:
        return [sched(128, bn, 2) for bn in range(16, 193, 16)] + [sched(64, bn, 1) for bn in (32, 64, 96, 128)]
    return [sched(128, bn, 2) for bn in (96, 112, 128, 144, 160, 176, 192)]

specs = {blockscaled_spec(fp8, fp8, bf16, s, 132) for M, _, _ in shapes for s in cands(M)}
print(len(specs), "kernels", flush=True)
with ThreadPoolExecutor(16) as pool:
    list(pool.map(_compiled_blockscaled, specs))
print("compiled", flush=True)
out = []
for M, N, K in shapes:
    x = torch.randn(M, K, device="cuda"); w = torch.randn(N, K, device="cuda")
    a, sa = quantize_fp8_blockwise(x, block=(1, 128)); b, sb = quantize_fp8_blockwise(w, block=(128, 128))
    sa = sa * torch.rand_like(sa).add(0.5); sb = sb * torch.rand_like(sb).add(0.5)
    ref = ((a.double() * sa.double().repeat_interleave(128, 1))
           @ (b.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:N]).t())
    res = []
    for s in cands(M):
        o = torch.full((M, N), float("nan"), dtype=bf16, device="cuda")
        blockscaled_matmul(a, b, sa, sb, s, out=o)
        err = ((o.double() - ref).norm() / ref.norm()).item()
        ms = triton.testing.do_bench(lambda: blockscaled_matmul(a, b, sa, sb, s, out=o), warmup=10, rep=40)
        res.append((2 * M * N * K / ms / 1e9, f"{s.block_m}x{s.block_n}/{s.num_stages}", err))
    bad = [r for r in res if not r[2] < 1e-2]
    res.sort(reverse=True)
    out.append({"M": M, "N": N, "K": K, "res": res})
    print(f"{M}x{N}x{K}:", "  ".join(f"{t:.0f}@{c}" for t, c, e in res[:6]), "| BAD:" if bad else "", bad, flush=True)
json.dump(out, open(os.environ.get("OUT", "/tmp") + "/bs.json", "w"))
