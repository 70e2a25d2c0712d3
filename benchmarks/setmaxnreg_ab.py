"""A/B of the persistent kernel's structure, in one process against cuBLAS: separate producer and
consumer branches to the end of the kernel (tlgemm.tilelang's persistent_gemm: ptxas honours
setmaxnreg, 40 / 232 registers) vs one tile loop shared by both sides (ptxas ignores setmaxnreg,
warning C7507, and every thread runs on the launch's 168). Usage (GPU machine):
    python benchmarks/setmaxnreg_ab.py      # writes $OUT/split_probe.json (or /tmp)
Fixed schedule 128x256x{64 bf16, 128 fp8}, 4 stages, 2 consumer warpgroups; do_bench medians."""
import json
import os

import tilelang
import tilelang.language as T
import torch
import triton

from tlgemm.schedules import Schedule
from tlgemm.tilelang import launch as L
from tlgemm.tilelang.kernels import _operand_shapes, _epilogue_shapes, _views
from tlgemm.tilelang.stages import ScheduleContext


def shared_loop_gemm(spec):
    ctx = spec.context()
    M, N, K, NC = T.dynamic("M"), T.dynamic("N"), T.dynamic("K"), T.dynamic("NC")
    a_shape, b_shape = _operand_shapes(spec, M, N, K)
    sa_shape, sb_shape, bias_shape = _epilogue_shapes(spec, M, N)
    s = spec.schedule
    num_programs = T.min(spec.num_sms, T.ceildiv(M, s.block_m) * T.ceildiv(N, s.block_n))

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, ctx.a_storage), B: T.Tensor(b_shape, ctx.b_storage),
             C: T.Tensor((M, NC), spec.out_storage), A_scale: T.Tensor(sa_shape, "float32"),
             B_scale: T.Tensor(sb_shape, "float32"), bias: T.Tensor(bias_shape, "float32")):
        with T.Kernel(num_programs, threads=ctx.threads) as pid:
            tensorA, tensorB, tensorC, scale, bias_view = _views(spec, A, B, C, A_scale, B_scale, bias, M, N)
            ctx.allocate()
            sched = ScheduleContext(M, N, K, ctx, pid, num_programs)
            start, _, step = sched.persistent_tile_range()
            for t in T.serial(sched.num_local_tiles()):
                tile = ctx.bind_tile(sched.get_tile_from_idx(start + t * step))
                ctx.reduce_axis(tensorA, tensorB, tile, 0, sched.iters_per_tile)
                tensorC.store(ctx, tile, scale=scale, bias=bias_view)
            tensorC.drain(ctx)
    return gemm


dev = "cuda"
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for dt in ("bf16", "fp8"):
    torch_dt = torch.bfloat16 if dt == "bf16" else torch.float8_e4m3fn
    bk = 64 if dt == "bf16" else 128
    sched = Schedule(block_m=128, block_n=256, block_k=bk, num_stages=4, num_warpgroups=2).persistent(SMS)
    spec = L.make_spec(torch_dt, torch_dt, torch.bfloat16, sched, SMS)
    old = tilelang.compile(shared_loop_gemm(spec), target="cuda", pass_configs=L.PASS_CONFIGS)
    for (M, N, K) in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384), (2048, 2048, 2048)]:
        a = torch.randn(M, K, device=dev).to(torch_dt)
        w = torch.randn(N, K, device=dev).to(torch_dt)
        out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        one = torch.ones(1, device=dev)
        if dt == "bf16":
            ref = (a @ w.t()).float(); cublas = lambda: torch.mm(a, w.t(), out=out)
        else:
            ref = torch._scaled_mm(a, w.t(), scale_a=one[0], scale_b=one[0], out_dtype=torch.bfloat16).float()
            cublas = lambda: torch._scaled_mm(a, w.t(), scale_a=one[0], scale_b=one[0], out_dtype=torch.bfloat16)
        fns = {"cublas": cublas,
               "split": lambda: L.persistent_matmul(a, w.t(), sched, out=out),
               "shared_loop": lambda: old(a, w, out, one, one, one)}
        for name, f in fns.items():
            out.fill_(float("nan"))
            r = f(); torch.cuda.synchronize()
            res = r if (name == "cublas" and dt == "fp8") else out
            err = ((res.float() - ref).norm() / ref.norm()).item()
            ms = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median") if err < 1e-2 else float("nan")
            rows.append(dict(dtype=dt, M=M, N=N, K=K, impl=name, err=err, tflops=2 * M * N * K / ms / 1e9))
            print(f"{dt} {M}x{N}x{K} {name:12s} err={err:.1e} {rows[-1]['tflops']:7.1f}", flush=True)
json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), open(os.path.join(os.environ.get("OUT", "/tmp"), "split_probe.json"), "w"), indent=1)
