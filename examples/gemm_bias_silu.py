"""A fused GEMM + bias + SiLU kernel written on tlgemm's WGMMA emitter.

    C[M, N] = silu(A[M, K] @ W[N, K]^T + bias[N]),   silu(x) = x / (1 + exp(-x))

This file is what a TileLang kernel author writes *outside* tlgemm: an ordinary
``@T.prim_func`` in which ``tlgemm.macros.WGMMAEmitter`` supplies the Hopper parts:

* the swizzled shared-memory layouts of the A and W tiles (``em.a_shared_layout``,
  ``em.b_shared_layout``), which are the layouts its wgmma descriptors were proven
  against, and the register layout of the accumulator (``em.accum_layout()``);
* ``em.ss(...)``: descriptors, fences and one ``wgmma.mma_async`` batch per K-block
  (SS: both operands read from shared memory), then ``wgmma.wait_group``.

Everything else is the author's own: the K loop (``T.Pipelined`` multi-buffers the tile
copies), and the epilogue, which adds the bias and applies SiLU to the fp32 accumulator
while it is still in registers (``T.Parallel`` over the fragment: each thread touches only
the elements it holds), then converts and stores. Nothing goes back to memory between the
GEMM and the activation.

Run it on an sm_90a GPU (H100/H200) with TileLang, torch and Triton installed:

    python examples/gemm_bias_silu.py                      # bf16, 4096 x 4096 x 4096
    python examples/gemm_bias_silu.py --dtype fp16 --m 2048 --n 8192 --k 1024
    python examples/gemm_bias_silu.py --emit cuda          # print the CUDA source; no GPU needed

It checks the result against a float64 reference, ``silu(a.double() @ w.double().T +
bias.double())``, with the bf16/fp16 bound of tlgemm's test suite (relative Frobenius
error <= 1e-2; the output is poisoned with NaN first, so an unwritten element fails),
prints the error and the TFLOP/s, and exits with status 1 on a mismatch.
M, N and K must be multiples of the block (128 x 256 x 64 by default).
"""

from __future__ import annotations

import argparse
import sys

import tilelang
import tilelang.language as T

from tlgemm.macros import WGMMAEmitter

#: Input dtype flag -> (the emitter's type name, TileLang's storage dtype).
DTYPES = {"bf16": ("bf16", "bfloat16"), "fp16": ("f16", "float16")}

#: TileLang 0.1.15's automatic warp specialisation would move the wgmma warpgroups to
#: threads [128, 256) without moving our hand-annotated accumulator layout with them.
#: With it off, T.Pipelined multi-buffers the tiles with cp.async copies (one thread
#: block, every warpgroup both loads and computes); tlgemm's own kernels compile the same way.
PASS_CONFIGS = {"tl.disable_warp_specialized": True}


def check_problem(M, N, K, dtype, block_m=128, block_n=256, block_k=64) -> None:
    """ValueError unless ``dtype`` is one of DTYPES and M, N, K are positive multiples of their
    blocks (this example has no ragged edges)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype!r} is not one of {sorted(DTYPES)}")
    for name, extent, block in (("M", M, block_m), ("N", N, block_n), ("K", K, block_k)):
        if not isinstance(extent, int) or extent <= 0 or extent % block:
            raise ValueError(f"{name}: {extent!r} must be a positive multiple of the block ({block})")


def gemm_bias_silu(M: int, N: int, K: int, dtype: str = "bf16", *, block_m: int = 128,
                   block_n: int = 256, block_k: int = 64, warpgroups_m: int = 2, num_stages: int = 3):
    """The prim_func for C = silu(A @ W^T + bias); the emitter is attached as ``func.emitter``.

    A is [M, K], W is [N, K] (a weight as nn.Linear stores it), bias is [N], C is [M, N];
    all of ``dtype`` ("bf16" or "fp16"), accumulation in fp32. Each thread block computes a
    block_m x block_n tile of C with ``warpgroups_m`` warpgroups stacked along M.
    """
    check_problem(M, N, K, dtype, block_m, block_n, block_k)
    wgmma_type, dt = DTYPES[dtype]
    accum = "float32"

    # Both operands K-major in shared memory: A tile [block_m, block_k], W tile [block_n, block_k].
    # The emitter picks the instruction (here m64n256k16: each warpgroup owns 64 x 256 of C) and
    # the widest swizzle the tile allows (128 B for a 64-deep bf16 K block).
    em = WGMMAEmitter(wgmma_type, wgmma_type, "f32", block_m=block_m, block_n=block_n, block_k=block_k,
                      a_major="K", b_major="K", warpgroups_m=warpgroups_m)

    @T.prim_func
    def kernel(A: T.Tensor((M, K), dt), W: T.Tensor((N, K), dt), Bias: T.Tensor((N,), dt),
               C: T.Tensor((M, N), dt)):
        with T.Kernel(N // block_n, M // block_m, threads=em.threads) as (bx, by):
            A_shared = T.alloc_shared((block_m, block_k), dt)
            W_shared = T.alloc_shared((block_n, block_k), dt)
            acc = T.alloc_fragment((block_m, block_n), accum)
            # The emitter's layouts: the copies below write the swizzle its descriptors read,
            # and acc[i, j] lives in the register where wgmma puts element (i, j) of D.
            T.annotate_layout({A_shared: em.a_shared_layout, W_shared: em.b_shared_layout,
                               acc: em.accum_layout()})
            T.clear(acc)

            # Main loop: T.Pipelined keeps num_stages K-blocks of A and W in flight.
            for ko in T.Pipelined(K // block_k, num_stages=num_stages):
                T.copy(A[by * block_m, ko * block_k], A_shared)
                T.copy(W[bx * block_n, ko * block_k], W_shared)
                # One pipeline step (a unit loop), so the fence lands after the pipeline's
                # cp.async wait and barrier: the copies wrote shared memory through the generic
                # proxy, wgmma reads it through the async proxy (PTX ISA 9.7.15.3).
                for _ in T.serial(1):
                    T.fence_proxy_async()
                    # acc += A_shared @ W_shared^T: one wgmma batch; wait=0 retires it before
                    # the pipeline overwrites this stage's buffers.
                    em.ss(A_shared, W_shared, acc, wait=0)

            # Epilogue on the accumulator in registers: bias, then SiLU in fp32.
            for i, j in T.Parallel(block_m, block_n):
                x = acc[i, j] + T.cast(Bias[bx * block_n + j], accum)
                acc[i, j] = x / (T.float32(1) + T.exp(-x))
            T.copy(acc, C[by * block_m, bx * block_n])  # fp32 -> dtype, straight from registers

    kernel.emitter = em
    return kernel


def cuda_source(M: int = 4096, N: int = 4096, K: int = 4096, dtype: str = "bf16", **block) -> str:
    """The generated CUDA source for sm_90a; lowering needs no GPU and no nvcc."""
    from tilelang import tvm

    func = gemm_bias_silu(M, N, K, dtype, **block)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(opt_level=3, config=PASS_CONFIGS), target:
        return tilelang.lower(func, target=target).kernel_source


def compile_kernel(M: int, N: int, K: int, dtype: str = "bf16", **block):
    """Compile for the local GPU (needs nvcc); call as ``kernel(a, w, bias, c)``."""
    return tilelang.compile(gemm_bias_silu(M, N, K, dtype, **block), target="cuda",
                            pass_configs=PASS_CONFIGS)


def check(M: int = 1024, N: int = 1024, K: int = 1024, dtype: str = "bf16", *, seed: int = 0,
          bench: bool = False, **block) -> dict:
    """Run the kernel on random CUDA inputs and compare with the float64 reference.

    Raises AssertionError (from tlgemm.testing.assert_gemm_close) on a NaN left in the
    poisoned output or an error above the dtype's bound. Returns {"error", "bound"}, with
    ``bench`` also "ms", "tflops" and "torch_ms" (torch's unfused silu(addmm)).
    """
    import torch
    import torch.nn.functional as F

    from tlgemm.testing import assert_gemm_close, poisoned, random_operand, reference_gemm, tolerance

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    kernel = compile_kernel(M, N, K, dtype, **block)
    g = torch.Generator().manual_seed(seed)
    a = random_operand((M, K), torch_dtype, generator=g, device="cuda")
    w = random_operand((N, K), torch_dtype, generator=g, device="cuda")
    bias = random_operand((N,), torch_dtype, generator=g, device="cuda")
    c = poisoned((M, N), torch_dtype, "cuda")

    kernel(a, w, bias, c)
    torch.cuda.synchronize()
    ref = F.silu(reference_gemm(a, w.t(), bias=bias))        # float64 on the GPU
    result = {"error": assert_gemm_close(c, ref, torch_dtype, what="gemm_bias_silu"),
              "bound": tolerance(torch_dtype)}

    if bench:
        from triton.testing import do_bench

        ms = do_bench(lambda: kernel(a, w, bias, c))
        result.update(ms=ms, tflops=2 * M * N * K / ms * 1e-9,
                      torch_ms=do_bench(lambda: F.silu(torch.addmm(bias, a, w.t()))))
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--emit", choices=["cuda"], help="print the generated source instead of running")
    args = p.parse_args(argv)

    try:
        check_problem(args.m, args.n, args.k, args.dtype)
    except ValueError as e:
        p.error(str(e))
    if args.emit == "cuda":
        print(cuda_source(args.m, args.n, args.k, args.dtype))
        return 0
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        found = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
        print(f"gemm_bias_silu: running the kernel needs an sm_90 GPU (H100/H200), found {found}; "
              "--emit cuda prints its source without one", file=sys.stderr)
        return 2
    try:
        r = check(args.m, args.n, args.k, args.dtype, bench=True)
    except AssertionError as e:
        print(f"MISMATCH: {e}", file=sys.stderr)
        return 1
    print(f"silu(A @ W^T + bias)  {args.dtype}  M={args.m} N={args.n} K={args.k}")
    print(f"  relative Frobenius error vs float64: {r['error']:.2e}  (bound {r['bound']:.0e})")
    print(f"  {r['ms']:.3f} ms  {r['tflops']:.0f} TFLOP/s   "
          f"(torch silu(addmm) unfused: {r['torch_ms']:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
