"""A GEMM built only from tlgemm.macros.WGMMAEmitter, TMA copies and a pipelined K loop.

C[M, N] = A[M, K] @ B[K, N] with A stored [M, K] (K-major) or [K, M] (MN-major) and B
stored [N, K] (K-major) or [K, N] (MN-major). The shared tiles carry the emitter's
swizzled layouts (structurally equal to TileLang's bank-swizzled layouts), and
``T.Pipelined`` multi-buffers them; the emitter's descriptors follow the stage.

Known limit (TileLang 0.1.15): its automatic warp specialisation moves the
consumers to threads [128, 256) but does not rebind a user-annotated fragment
layout to that range (only layouts inferred for tile ops are bound), so the
accumulator would be mis-addressed. This kernel therefore compiles with
``tl.disable_warp_specialized`` (PASS_CONFIGS), where the pipeline copies with
cp.async into the same swizzled layout, and the kernel fences the generic-proxy
copies before the async-proxy wgmma reads. M, N, K must be multiples of the block
(this kernel proves the emitter; ragged shapes are the backends' business).
"""


import tilelang
import tilelang.language as T

from tlgemm.macros.emitter import WGMMAEmitter
from tlgemm.macros.operands import Major

#: The storage type TileLang uses for each WGMMA input / accumulator name.
STORAGE = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32", "e4m3": "float8_e4m3fn",
           "e5m2": "float8_e5m2", "s8": "int8", "u8": "uint8"}


def emitter_gemm(M: int, N: int, K: int, a_dtype: str, b_dtype: str, accum_dtype: str, out_dtype: str,
                 *, block_m: int = 128, block_n: int = 128, block_k: int = 64, a_major="K",
                 b_major="K", a_source: str = "shared", warpgroups_m: int = 1, warpgroups_n: int = 1,
                 num_stages: int = 3, clear_in_first_atom: bool = False):
    """The prim_func of the emitter GEMM; ``emitter`` is attached as ``func.emitter``."""
    em = WGMMAEmitter(a_dtype, b_dtype, accum_dtype, block_m=block_m, block_n=block_n, block_k=block_k,
                      a_major=a_major, b_major=b_major, a_source=a_source,
                      warpgroups_m=warpgroups_m, warpgroups_n=warpgroups_n)
    for name, extent, block in (("M", M, block_m), ("N", N, block_n), ("K", K, block_k)):
        if extent % block:
            raise ValueError(f"{name}: {extent} is not a multiple of the block ({block})")
    a_storage, b_storage = STORAGE[em.a_type.name], STORAGE[em.b_type.name]
    a_k = em.a_major is Major.K
    b_k = em.b_major is Major.K
    a_shape = (M, K) if a_k else (K, M)
    b_shape = (N, K) if b_k else (K, N)
    a_tile = (block_m, block_k) if a_k else (block_k, block_m)
    b_tile = (block_n, block_k) if b_k else (block_k, block_n)
    k_iters = K // block_k
    register_a = a_source == "register"

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, a_storage), B: T.Tensor(b_shape, b_storage), C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(N // block_n, M // block_m, threads=em.threads) as (bx, by):
            A_shared = T.alloc_shared(a_tile, a_storage)
            B_shared = T.alloc_shared(b_tile, b_storage)
            C_local = T.alloc_fragment((block_m, block_n), em.accum_storage)
            if register_a:
                A_local = T.alloc_fragment((block_m, block_k), a_storage)
                T.annotate_layout({A_shared: tilelang.layout.make_swizzled_layout(A_shared),
                                   B_shared: em.b_shared_layout, C_local: em.accum_layout(),
                                   A_local: em.a_register_layout()})
            else:
                T.annotate_layout({A_shared: em.a_shared_layout, B_shared: em.b_shared_layout,
                                   C_local: em.accum_layout()})
            if not clear_in_first_atom:
                T.clear(C_local)
            for ko in T.Pipelined(k_iters, num_stages=num_stages):
                if a_k:
                    T.copy(A[by * block_m, ko * block_k], A_shared)
                else:
                    T.copy(A[ko * block_k, by * block_m], A_shared)
                if b_k:
                    T.copy(B[bx * block_n, ko * block_k], B_shared)
                else:
                    T.copy(B[ko * block_k, bx * block_n], B_shared)
                # The copies write shared memory through the generic proxy and wgmma reads it
                # through the async proxy: fence.proxy.async orders them (PTX ISA 9.7.15.3).
                T.fence_proxy_async()
                if register_a:
                    T.copy(A_shared, A_local)
                    em.rs(A_local, B_shared, C_local, clear_accum=clear_in_first_atom and ko == 0)
                else:
                    em.ss(A_shared, B_shared, C_local, clear_accum=clear_in_first_atom and ko == 0)
            T.copy(C_local, C[by * block_m, bx * block_n])

    gemm.emitter = em
    return gemm


#: Pass configuration of ``emitter_gemm`` (see the module docstring).
PASS_CONFIGS = {"tl.disable_warp_specialized": True}
#: The backend's kernels' (tlgemm.tilelang.kernels): they synchronise their warp-specialised
#: pipeline themselves (mbarriers, and the consumers' named barrier around the output staging,
#: ``OutputView.store``), so TileLang's automatic warp specialisation and its ThreadSync pass
#: stay off. Lowered with ThreadSync, every kernel family got only redundant barriers from it: a
#: second named barrier right after the consumers' own, or a ``__syncthreads`` before the warp
#: roles split; and under a 2-CTA cluster round's predicate it miscounted that barrier's
#: threads and refused the kernel (block-scaled 64x144 under raster "n": 2 of 128).
KERNEL_PASS_CONFIGS = {**PASS_CONFIGS, "tl.disable_thread_storage_sync": True}
#: The block-scaled kernel's: also without TileLang's cp.async bounds guard, which misreads
#: strided buffers (tlgemm.tilelang.stages.GroupScaleView clamps its indices itself).
BLOCKSCALED_PASS_CONFIGS = {**KERNEL_PASS_CONFIGS, "tl.disable_safe_memory_legalize": True}


def lower_to_cuda(func, pass_configs=None) -> str:
    """CUDA source for sm_90a without a GPU (DESIGN.md, "Backends"), with ``PASS_CONFIGS``
    unless ``pass_configs`` is given."""
    from tilelang import tvm

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    config = PASS_CONFIGS if pass_configs is None else pass_configs
    with tvm.transform.PassContext(opt_level=3, config=config), target:
        return tilelang.lower(func, target=target).kernel_source


def compile_kernel(func):
    """Compile for the local GPU (needs nvcc)."""
    return tilelang.compile(func, target="cuda", pass_configs=PASS_CONFIGS)
