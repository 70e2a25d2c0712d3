"""Host launchers of the Triton kernels: validation, grid from tlgemm.schedules, launch.

Rules enforced here (each violation is a TypeError for a wrong type/dtype, else ValueError,
naming the argument):

* a [M, K] and b [K, N] (``bmm``: a [B, M, K] and b [B, K, N]) are torch tensors with the
  same dtype, except that fp8 e4m3fn/e5m2 may mix; input dtypes fp32, fp16, bf16, fp8
  (e4m3fn, e5m2), int8.
* Output dtype: fp32/fp16/bf16 (default: the input's; bf16 for fp8); int8 inputs may also
  give int32 (their default), which takes no scale or bias.
* scale_a: one element, [M] or [M, 1] (per row of A); scale_b: one element, [N] or [1, N]
  (per column of B); both float32. bias: [N] or [1, N] floats, added to every row
  (torch.addmm). Other shapes of as many elements are refused: an [M, 1] bias is per row.
* Block-scaled FP8 (``blockscaled_matmul``/``blockscaled_bmm``): a [M, K] and b [N, K] fp8,
  scale_a [M, K/128] and scale_b [ceil(N/128), K/128] float32 (a batch dimension in front for
  the batched form); K a multiple of 128, any M and N; block_k = 128.
* All tensors on one device: CUDA, or CPU while interpreting (TRITON_INTERPRET=1).
* Any strides (a batch stride of 0 broadcasts), but every tensor spans fewer than 2**31
  elements (the kernels index in int32), and so does every operand copy below (a broadcast
  batch copied in full counts whole); ``out`` must not overlap itself nor share memory
  with a tensor the kernel reads (checked on every call).
* The schedule: a tlgemm.schedules.Schedule without split_k or swap-AB (not implemented by
  this backend; ``bmm`` and the block-scaled kernels also without Stream-K); block_k >= 32
  for 8-bit inputs (tl.dot's minimum K for 8-bit operands); a power-of-two num_warpgroups
  (Triton's num_warps); its tile walk within int32 (``tlgemm._checks.check_int32_walk``:
  a raster group's tiles, Stream-K's K-iterations of all tiles); its operand ring
  (``operand_ring_bytes``) must fit the device's shared memory, and a kernel that Triton
  compiles to more shared memory, or that ptxas cannot fit in the registers of its warps,
  is reported as a ValueError naming ``schedule`` too.

Operand rows that the kernels cannot load as 16-byte vectors are copied: when K's rows are
not a multiple of 16 bytes, both operands are copied K-major with K zero-padded to whole
128-byte rows (exact: the padding adds zero products; the kernel's K is K rounded up to
block_k, at most the copies' width, so its K-iterations stay tlgemm.schedules'); otherwise an
operand whose rows along its unit-stride dimension are no 16-byte multiple, or whose data is
not 16-byte aligned, is copied K-major. Without the copies those kernels loaded element by element: 6-25 TFLOP/s at
an odd K, 5.5 at a [K, N] b with N = 1001, on the H100 (benchmarks/results/unaligned_rows.md).

The launchers validate a call once per argument signature (shapes, strides, dtypes, device:
``tlgemm._checks.signature``) and keep what they derived for later calls with the same
signature, as the TileLang launchers do.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from triton.compiler import CompiledKernel
from triton.runtime.errors import OutOfResources, PTXASError

from tlgemm._checks import FLOAT_OUT as _FLOAT_OUT
from tlgemm._checks import FP8 as _FP8
from tlgemm._checks import (SCALE_BLOCK, VECTOR_BYTES, blockscaled_problem, by_signature, check_int32_buffer,
                             check_int32_walk, check_no_overlap, check_not_negated, check_num_sms, check_out_dtype,
                             check_out_reads, check_streamk_workspace, check_strided, cuda_limits, loads_as_vectors,
                             output_dtype, padded, padded_copy, span_bytes, stream_workspace, vector)
from tlgemm.schedules import Schedule, WorkItem, num_programs, num_tiles, persistent_programs, resolve_num_sms

from .kernels import (
    batched_gemm_kernel,
    blockscaled_gemm_kernel,
    persistent_gemm_kernel,
    schedule_trace_kernel,
    streamk_gemm_kernel,
)
from .shim import interpreting

__all__ = [
    "matmul", "persistent_matmul", "streamk_matmul", "bmm", "cached_launch", "blockscaled_matmul", "blockscaled_bmm",
    "schedule_trace", "operand_ring_bytes", "check_shared_memory", "check_schedule", "shared_memory_limit",
    "default_blockscaled_schedule", "SCALE_BLOCK", "loads_as_vectors",
]

_INTERPRETED = interpreting()
_INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8) + _FP8
_INT32_INDEX = 2**31


# ---- shared memory ---------------------------------------------------------------------------


def operand_ring_bytes(schedule: Schedule, a_dtype: torch.dtype, b_dtype: torch.dtype) -> int:
    """Shared memory of the pipelined operand tiles: num_stages · (block_m · block_k · |a| +
    block_k · block_n · |b|) bytes (each stage holds one K-step's A and B tiles). Triton may
    allocate more (e.g. TF32 operands with unaligned strides), never less."""
    per_stage = schedule.block_m * schedule.block_k * a_dtype.itemsize + schedule.block_k * schedule.block_n * b_dtype.itemsize
    return schedule.num_stages * per_stage


def check_shared_memory(schedule: Schedule, a_dtype: torch.dtype, b_dtype: torch.dtype, limit: int | None) -> None:
    """ValueError naming ``schedule`` when its operand ring exceeds ``limit`` bytes (None: no limit)."""
    need = operand_ring_bytes(schedule, a_dtype, b_dtype)
    if limit is not None and need > limit:
        raise ValueError(
            f"schedule: {schedule} needs {need} bytes of shared memory for {a_dtype} x {b_dtype} operands "
            f"(num_stages x (block_m*block_k + block_k*block_n) x element bytes), more than the {limit} bytes "
            f"per block of the device; use smaller blocks or fewer stages")


def shared_memory_limit(device: torch.device) -> int | None:
    """Opt-in shared memory per block of a CUDA device (227 KiB = 232448 bytes on H100/H200),
    None for other devices (the interpreter has no such limit)."""
    if device.type != "cuda":
        return None
    return cuda_limits(device)[1]


def _launch(kernel, grid: int, schedule, args, meta, runners: dict):
    """kernel[(grid,)](*args, **meta); Triton's shared-memory OutOfResources (raised when the
    compiled kernel is loaded) becomes a ValueError naming ``schedule``.

    ``runners`` belongs to a validated plan, whose calls all specialise the kernel alike
    (same dtypes, sizes, strides, None arguments and 16-byte alignment: the plan's
    ``tlgemm._checks.signature`` key). The first launch on a device keeps the compiled
    kernel there; later ones call it directly (``CompiledKernel[grid]``, with the
    compile-time arguments appended in the kernel's parameter order), skipping
    ``JITFunction.run``'s argument binding and cache lookup: 19.5 against 8.3 us of host
    time a launch on an H100 host (benchmarks/results/host_overhead.md)."""
    entry = runners.get((kernel, torch.cuda.current_device())) if runners else None
    if entry is not None:
        runner, constants = entry
        runner(*args, *constants)
        return
    try:
        compiled = kernel[(grid,)](*args, **meta)
    except OutOfResources as error:
        if error.name != "shared memory":
            raise
        raise ValueError(
            f"schedule: {schedule} compiles to a kernel using {error.required} bytes of shared memory, more than "
            f"the device's {error.limit}; use smaller blocks or fewer stages") from error
    except PTXASError as error:
        if "Insufficient registers" not in str(error):
            raise
        raise ValueError(f"schedule: {schedule} needs more registers a thread than its {schedule.consumer_warps} "
                         "consumer warps can hold (ptxas); use a smaller tile or more warpgroups") from error
    if isinstance(compiled, CompiledKernel):
        constants = tuple(meta[name] for name in kernel.arg_names[len(args):])
        runners[(kernel, torch.cuda.current_device())] = (compiled[(grid, 1, 1)], constants)


# ---- validation ------------------------------------------------------------------------------


def _check_tensor(name, t, ndim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    check_strided(name, t)
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(t.shape)}")
    check_not_negated(name, t)
    span = span_bytes(t) // t.element_size()
    if span >= _INT32_INDEX:
        raise ValueError(f"{name}: spans {span} elements; the Triton kernels index in int32 (< 2**31)")


def _check_device(device, named, first="a"):
    for name, t in named:
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t is not None and t.device != device:
            raise ValueError(f"{name}: on {t.device}, but {first} is on {device}; all tensors must share a device")
    if device.type != "cuda" and not (_INTERPRETED and device.type == "cpu"):
        raise ValueError(f"{first}: on {device}; the Triton kernels need CUDA tensors (CPU only under TRITON_INTERPRET=1)")


def _vector(name, v, length, dtypes, device, first="a", **shape_rule):
    """(flat tensor, stride) of a scale/bias vector (``tlgemm._checks.vector``'s shapes); stride
    0 for a single value."""
    flat = vector(name, v, length, dtypes, device, first, **shape_rule)
    _check_tensor(name, flat)
    return flat, (flat.stride(0) if flat.numel() > 1 else 0)


def check_schedule(schedule, a_dtype: torch.dtype, *, batched: bool = False, blockscaled: bool = False) -> None:
    """The launchers' rules for a schedule that need no sizes and no device, for ``a_dtype``
    inputs (``batched``: bmm; ``blockscaled``: the block-scaled GEMMs), in the order a
    launcher checks them."""
    if batched and not blockscaled:
        _check_bmm_schedule(schedule)
    _check_schedule(schedule)
    if blockscaled:
        _check_blockscaled_schedule(schedule)
    else:
        _check_block_k_for(schedule, a_dtype)


def _check_bmm_schedule(schedule):
    if isinstance(schedule, Schedule) and schedule.streamk_tiles:
        raise ValueError("schedule: streamk_tiles > 0 is not implemented for bmm (use a persistent schedule)")


def _check_block_k_for(schedule, a_dtype: torch.dtype):
    if a_dtype.itemsize == 1 and schedule.block_k < 32:
        raise ValueError(f"schedule: block_k must be >= 32 for 8-bit inputs, got {schedule.block_k}")


def _check_blockscaled_schedule(schedule):
    if schedule.block_k != SCALE_BLOCK:
        raise ValueError(f"schedule: block_k must be {SCALE_BLOCK} (the scale block along K), got {schedule.block_k}")
    if schedule.streamk_tiles:
        raise ValueError("schedule: streamk_tiles > 0 is not implemented for the block-scaled GEMM")


def _check_schedule(schedule):
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    if schedule.split_k > 1:
        raise ValueError("schedule: split_k > 1 is not implemented by the Triton backend (use streamk_tiles)")
    if schedule.is_swap_ab:
        raise ValueError("schedule: is_swap_ab is not implemented by the Triton backend (pass b.T, a.T instead)")
    if schedule.cluster_m > 1:
        raise ValueError(f"schedule: cluster_m={schedule.cluster_m} (TMA multicast within a thread-block cluster) is "
                         "a TileLang-backend schedule; the Triton backend launches no clusters")
    if not schedule.has_pow2_block_n:
        raise ValueError(f"schedule: block_n={schedule.block_n} is not a power of two, which tl.arange needs (other "
                         "multiples of 16 run on the TileLang backend: its block-scaled kernel, and its matmul with B "
                         "K-major)")
    if schedule.num_warpgroups & (schedule.num_warpgroups - 1):
        raise ValueError(f"schedule: num_warpgroups={schedule.num_warpgroups} is not a power of two; the Triton "
                         "backend launches 4 warps per warpgroup and Triton's num_warps must be a power of two")


def _check_out(out, shape, out_dtype, ndim):
    _check_tensor("out", out, ndim)
    if tuple(out.shape) != shape:
        raise ValueError(f"out: expected shape {shape}, got {tuple(out.shape)}")
    check_no_overlap("out", out)
    check_out_dtype(out, out_dtype)


def _num_sms(schedule, num_sms, device):
    """``num_sms``, or the CUDA device's SM count where a persistent schedule needs one and
    neither it nor the caller gives one."""
    if schedule.is_persistent and schedule.num_sms is None and num_sms is None and device.type == "cuda":
        return cuda_limits(device)[0]
    return num_sms


def _grid_size(units, schedule, num_sms, device):
    """Programs to launch for ``units`` whole tiles: ``persistent_programs`` when persistent,
    else one per tile (tlgemm.schedules.num_programs without split-K or Stream-K)."""
    if not schedule.is_persistent:
        return units
    return persistent_programs(units, resolve_num_sms(schedule, _num_sms(schedule, num_sms, device)), schedule.raster)


@dataclass(frozen=True)
class _Plan:
    """What a validated GEMM call derives from its arguments' signatures: output shape and
    dtype, sizes, grid size P (0: nothing to launch), whether the epilogue takes scales, the
    epilogue vectors' strides and the kernel's compile-time arguments."""

    shape: tuple
    out_dtype: torch.dtype
    M: int
    N: int
    K: int
    batch: int
    P: int
    scaled: bool
    epilogue_strides: tuple
    copies: tuple  # (a, b): copied K-major with K zero-padded to K_copy (module docstring)
    K_copy: int
    meta: dict = field(hash=False, compare=False)
    runners: dict = field(default_factory=dict, hash=False, compare=False)  # ``_launch``'s compiled kernels


#: Validated GEMM plans per call signature (bounded: ``tlgemm._checks.remember``).
_PLANS: dict = {}

@functools.lru_cache(maxsize=None)
def _ones(device: torch.device) -> torch.Tensor:
    """The float32 scale 1.0 passed for a missing scale_a or scale_b (read only)."""
    return torch.ones(1, dtype=torch.float32, device=device)


def _plan(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms, batched) -> _Plan:
    """Validate a GEMM (``batched``: one per leading index) and derive its ``_Plan``: the
    strides of the operand copies the kernel reads, and its K, K rounded up to block_k, at most
    the copies' width K_copy (module docstring)."""
    ndim = 3 if batched else 2
    _check_tensor("a", a, ndim)
    _check_tensor("b", b, ndim)
    _check_schedule(schedule)
    check_num_sms(num_sms)
    if not isinstance(allow_tf32, bool):
        raise TypeError(f"allow_tf32: expected a bool, got {type(allow_tf32).__name__}")
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in _INPUT_DTYPES:
            raise TypeError(f"{name}: dtype must be one of {[str(d) for d in _INPUT_DTYPES]}, got {t.dtype}")
    if a.dtype != b.dtype and not (a.dtype in _FP8 and b.dtype in _FP8):
        raise TypeError(f"a, b: dtypes must match (only fp8 e4m3fn/e5m2 may mix), got {a.dtype} and {b.dtype}")
    if batched and a.shape[0] != b.shape[0]:
        raise ValueError(f"a, b: batch sizes differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"a, b: inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    _check_block_k_for(schedule, a.dtype)
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = a.shape[0] if batched else 1
    shape = (batch, M, N) if batched else (M, N)
    device = a.device
    if out is not None:
        _check_out(out, shape, out_dtype, ndim)
    else:
        check_int32_buffer("out", shape, "Triton")
    _check_device(device, (("b", b), ("out", out)))
    epilogue = scale_a is not None or scale_b is not None or bias is not None
    out_dtype = (output_dtype(a.dtype, out_dtype, epilogue) if out is None
                 else output_dtype(a.dtype, out.dtype, epilogue, "out"))
    scaled = scale_a is not None or scale_b is not None
    sa_stride = sb_stride = bias_stride = 0
    if scaled:
        ones = _ones(device)
        _, sa_stride = _vector("scale_a", ones if scale_a is None else scale_a, M, (torch.float32,), device,
                               per_row=True, scalar=True)
        _, sb_stride = _vector("scale_b", ones if scale_b is None else scale_b, N, (torch.float32,), device,
                               scalar=True)
    if bias is not None:
        _, bias_stride = _vector("bias", bias, N, _FLOAT_OUT, device)
    check_shared_memory(schedule, a.dtype, b.dtype, shared_memory_limit(device))
    K_copy = padded(K, a.element_size()) if (K * a.element_size()) % VECTOR_BYTES else K
    # The kernel's K: whole K blocks of the zero-padded copies, at most their width, so that
    # its K-iterations are tlgemm.schedules' (num_k_iters(K)), Stream-K's split included.
    K_run = min(-(-K // schedule.block_k) * schedule.block_k, K_copy)
    check_int32_walk(schedule, M, N, K_run)
    P = 0
    if batch and M and N:
        if batched:
            P = _grid_size(batch * num_tiles(M, N, schedule), schedule, num_sms, device)
        else:
            P = num_programs(M, N, K, schedule, _num_sms(schedule, num_sms, device))
    if schedule.streamk_tiles and P:
        check_streamk_workspace(P, 2, schedule.block_m, schedule.block_n)
    copies = (True, True) if K_copy != K else (not loads_as_vectors(a), not loads_as_vectors(b))
    for name, rows, copied in (("a", M, copies[0]), ("b", N, copies[1])):
        if P and copied and batch * rows * K_copy >= _INT32_INDEX:
            padding = f", K zero-padded from {K} to {K_copy} (rows of whole 128-byte multiples)" if K_copy != K else ""
            raise ValueError(f"{name}: its K-major copy{padding} holds {batch * rows * K_copy} elements; the Triton "
                             "kernels index in int32 (< 2**31)")
    lead = shape[:-2]
    a_strides = torch.empty((*lead, M, K_copy), device="meta").stride() if copies[0] else a.stride()
    b_strides = torch.empty((*lead, N, K_copy), device="meta").mT.stride() if copies[1] else b.stride()
    c_strides = out.stride() if out is not None else torch.empty(shape, device="meta").stride()
    sizes = (M, N, K_run, *a_strides[-2:], *b_strides[-2:], *c_strides[-2:])
    if batched:
        sizes += (a_strides[0], b_strides[0], c_strides[0])
    return _Plan(shape, out_dtype, M, N, K_run, batch, P, scaled, (sa_stride, sb_stride, bias_stride), copies, K_copy,
                 kernel_meta(schedule, P, K_run, quantized=a.dtype == torch.int8, allow_tf32=allow_tf32, sizes=sizes))


def _prepare(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms, *, batched=False):
    """A GEMM's ``_Plan`` (validated once per argument signature, ``tlgemm._checks.signature``,
    then kept: validation costs the host more than Triton's own launch) bound to this call's
    tensors: a namespace with out (allocated when None), the operands the kernel reads (a and
    b: K-major copies where the plan says so), the epilogue vectors, their strides, sizes, grid
    size P and meta."""
    check_out_reads(out, (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias)))
    # the option types are in the key: validation of allow_tf32=1 or num_sms=2.0 must not be skipped after True or 2
    plan = by_signature(_PLANS, (batched, schedule, out_dtype, type(allow_tf32), allow_tf32, type(num_sms), num_sms),
                        (a, b, out, scale_a, scale_b, bias),
                        lambda: _plan(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms,
                                      batched))
    if out is None:
        out = torch.empty(plan.shape, dtype=plan.out_dtype, device=a.device)
    sa = sb = None
    if plan.scaled:
        ones = _ones(a.device)
        sa = (ones if scale_a is None else scale_a).reshape(-1)
        sb = (ones if scale_b is None else scale_b).reshape(-1)
    if plan.P:  # K-major copies, K zero-padded to K_copy (a's rows, b's columns)
        pad = plan.K_copy - a.shape[-1]
        a = padded_copy(a, pad) if plan.copies[0] else a
        b = padded_copy(b.mT, pad).mT if plan.copies[1] else b
    return SimpleNamespace(
        out=out, a=a, b=b, M=plan.M, N=plan.N, K=plan.K, batch=plan.batch, P=plan.P,
        epilogue=(sa, sb, None if bias is None else bias.reshape(-1)), epilogue_strides=plan.epilogue_strides,
        meta=plan.meta, runners=plan.runners)


def triton_warps(schedule: Schedule) -> int:
    """Triton's num_warps for the dense GEMM kernels: 4 per consumer warpgroup, and at least 8
    on a 256-row tile. On the H100 (Triton 3.6) a 256x64 bf16 tile on 4 warps ran at 129-132
    TFLOP/s against 455-469 on 8 (1024 and 2048x2112x7168, 4096³; fp8 level at 960-1007),
    benchmarks/results/triton_persistent.md."""
    return max(schedule.consumer_warps, 8) if schedule.block_m >= 256 else schedule.consumer_warps


def divisor(value: int) -> int:
    """The largest power of two, at most 16, that divides ``value`` (0: 16); for 1, which
    Triton compiles as a constant, 1 (``stages.aligned``)."""
    return 16 if value == 0 else min(16, value & -value)


def kernel_meta(schedule, num_programs, K, *, quantized, allow_tf32=False, sizes=None):
    """Compile-time arguments of the GEMM kernels for ``schedule`` launched on
    ``num_programs`` programs (``triton_warps``). ``sizes``: M, N, K and the A, B and C
    strides in the kernel's argument order (am, ak, bk, bn, cm, cn, then the batched kernel's
    ab, bb, cb), passed as their ``divisor``s (None: no claim beyond Triton's own)."""
    return dict(BLOCK_M=schedule.block_m, BLOCK_N=schedule.block_n, BLOCK_K=schedule.block_k,
                GROUP_SIZE_M=schedule.group_size_m, RASTER=schedule.raster, NUM_SMS=num_programs,
                NUM_XCDS=schedule.num_xcds, CHUNK_SIZE=schedule.chunk_size,
                DIVISORS=(1,) * 12 if sizes is None else tuple(divisor(v) for v in sizes),
                EVEN_K=K > 0 and K % schedule.block_k == 0, QUANTIZED=quantized, ALLOW_TF32=allow_tf32,
                num_warps=triton_warps(schedule), num_stages=schedule.num_stages)


def _args_2d(g):
    """Arguments of the persistent and Stream-K kernels (before the workspace)."""
    return ((g.a, g.b, g.out, *g.epilogue, g.M, g.N, g.K, *g.a.stride(), *g.b.stride(), *g.out.stride(),
             *g.epilogue_strides))


# ---- launchers -------------------------------------------------------------------------------


def persistent_matmul(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None,
                      allow_tf32=False, num_sms=None):
    """C = (scale_a · A @ B · scale_b) + bias with the persistent kernel (schedule without
    Stream-K; a non-persistent schedule runs one program per tile). Returns ``out``.

    The grid size P = tlgemm.schedules.num_programs(...) is a compile-time constant of the
    kernel (the persistent stride), so each distinct P compiles once; persistent schedules
    on large problems all have P = the SM count."""
    if isinstance(schedule, Schedule) and schedule.streamk_tiles:
        raise ValueError("schedule: streamk_tiles > 0 needs streamk_matmul (or matmul)")
    g = _prepare(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms)
    if g.P:
        _launch(persistent_gemm_kernel, g.P, schedule, _args_2d(g), g.meta, g.runners)
    return g.out


def cached_launch(a, b, schedule, out, allow_tf32=False):
    """The launch that ``matmul(a, b, schedule, out=out, allow_tf32=allow_tf32)`` (no
    scales, bias, out_dtype or num_sms) ran on the current device, once a call with these
    argument signatures has run there, else None. Called as ``launch(a2, b2, out2)`` with
    tensors of the same signatures, it repeats that call without validating again: the
    compiled kernel with the arguments the signatures fix (tlgemm.matmul does so);
    ``out2=None`` allocates the output, which serves exactly when ``out`` was a fresh
    ``torch.empty`` of the result. If the current device has changed, it takes ``matmul``'s
    whole path."""
    plan = by_signature(_PLANS, (False, schedule, None, type(allow_tf32), allow_tf32, type(None), None),
                        (a, b, out, None, None, None))
    if plan is None or not plan.P or plan.scaled or any(plan.copies) or _INTERPRETED:
        return None
    kernel = streamk_gemm_kernel if schedule.streamk_tiles else persistent_gemm_kernel
    device = torch.cuda.current_device()
    entry = plan.runners.get((kernel, device))
    if entry is None:
        return None
    runner, constants = entry
    args = _args_2d(_prepare(a, b, schedule, out, None, None, None, None, allow_tf32, None))
    epilogue, trailing = args[3:6], (*args[6:], *constants)  # the arguments the signatures fix
    acc_dtype = torch.int32 if plan.meta["QUANTIZED"] else torch.float32

    def launch(a, b, out):
        if torch.cuda.current_device() != device:
            return matmul(a, b, schedule, out=out, allow_tf32=allow_tf32)
        target = torch.empty(plan.shape, dtype=plan.out_dtype, device=a.device) if out is None else out
        if schedule.streamk_tiles:
            runner(a, b, target, *epilogue, *_streamk_workspace(a.device, plan.P, schedule, num_tiles(plan.M, plan.N, schedule), acc_dtype), *trailing)
        else:
            runner(a, b, target, *epilogue, *trailing)
        return target
    return launch


def _new_streamk_workspace(device, programs: int, block_m: int, block_n: int, split_tiles: int, dtype):
    return (torch.empty((programs, 2, block_m, block_n), dtype=dtype, device=device),
            torch.zeros(split_tiles, dtype=torch.int32, device=device))


def _streamk_workspace(device, programs: int, schedule: Schedule, tiles: int, dtype):
    """(partials, counters) of a Stream-K launch over ``tiles`` tiles on ``device``'s current
    stream (``tlgemm._checks.stream_workspace``): a counter per split tile, min(streamk_tiles,
    tiles), zeroed once; the completing program of each split tile sets its counter back to 0
    (``StreamKWorkspace.publish``)."""
    shape = (programs, schedule.block_m, schedule.block_n, min(schedule.streamk_tiles, tiles), dtype)
    return stream_workspace(device, ("triton", *shape), _new_streamk_workspace, device, *shape)


def streamk_matmul(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None,
                   allow_tf32=False, num_sms=None):
    """Like ``persistent_matmul`` with the Stream-K kernel (schedule.streamk_tiles > 0)."""
    if isinstance(schedule, Schedule) and not schedule.streamk_tiles:
        raise ValueError("schedule: streamk_matmul needs streamk_tiles > 0 (see Schedule.streamk)")
    g = _prepare(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms)
    if g.P:
        acc_dtype = torch.int32 if g.meta["QUANTIZED"] else torch.float32
        partials, counters = _streamk_workspace(g.out.device, g.P, schedule, num_tiles(g.M, g.N, schedule), acc_dtype)
        args = _args_2d(g)
        _launch(streamk_gemm_kernel, g.P, schedule, (*args[:6], partials, counters, *args[6:]),
                dict(g.meta, STREAMK_TILES=schedule.streamk_tiles), g.runners)
    return g.out


def matmul(a, b, schedule, **kwargs):
    """``streamk_matmul`` when schedule.streamk_tiles > 0, else ``persistent_matmul``."""
    launcher = streamk_matmul if isinstance(schedule, Schedule) and schedule.streamk_tiles else persistent_matmul
    return launcher(a, b, schedule, **kwargs)


def bmm(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None, allow_tf32=False,
        num_sms=None):
    """C[i] = (scale_a · A[i] @ B[i] · scale_b) + bias for a [B, M, K], b [B, K, N] (any
    strides; batch stride 0 broadcasts one matrix), same dtype rules as ``matmul``; scale_a,
    scale_b and bias are shared by every batch. One persistent launch over all B · tiles
    tiles (no Stream-K). Returns ``out`` [B, M, N]."""
    _check_bmm_schedule(schedule)
    g = _prepare(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms, batched=True)
    if g.P:
        args = (g.a, g.b, g.out, *g.epilogue, g.batch, g.M, g.N, g.K, *g.a.stride(), *g.b.stride(),
                *g.out.stride(), *g.epilogue_strides)
        _launch(batched_gemm_kernel, g.P, schedule, args, g.meta, g.runners)
    return g.out


# ---- block-scaled FP8 ------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _blockscaled_schedule(narrow: bool) -> Schedule:
    """``default_blockscaled_schedule``'s two Schedules, built once."""
    if narrow:
        return Schedule(block_m=64, block_n=128, block_k=SCALE_BLOCK, num_stages=4).persistent()
    return Schedule(block_m=128, block_n=128, block_k=SCALE_BLOCK, num_stages=4, num_warpgroups=2).persistent()


def default_blockscaled_schedule(M: int) -> Schedule:
    """Persistent, block_k = SCALE_BLOCK (one scale per K-step), 128-column tiles, 4 stages.
    M <= 64: 64-row tiles on one consumer warpgroup (wgmma's M per warpgroup is 64); else
    128-row tiles on two, so the result and the K-block partial (two fp32 tiles) take
    2 · 64 registers per thread. Operand ring: 96 or 128 KiB. The two Schedules are built
    once (building and validating one costs about 10 us of host time)."""
    return _blockscaled_schedule(M <= 64)


def blockscaled_kernel_meta(schedule, num_programs):
    """Compile-time arguments of ``blockscaled_gemm_kernel``."""
    return dict(BLOCK_M=schedule.block_m, BLOCK_N=schedule.block_n, BLOCK_K=schedule.block_k,
                GROUP_SIZE_M=schedule.group_size_m, RASTER=schedule.raster, NUM_SMS=num_programs,
                NUM_XCDS=schedule.num_xcds, CHUNK_SIZE=schedule.chunk_size, SCALE_GROUP_N=SCALE_BLOCK,
                num_warps=schedule.consumer_warps, num_stages=schedule.num_stages)


@dataclass(frozen=True)
class _BlockScaledLaunch:
    """A validated block-scaled launch: the grid, the integer arguments (sizes, strides) and
    the compile-time ones; ``__call__`` takes the tensors of a call with the same signature
    (``tlgemm._checks.signature``: same shapes, strides, dtypes and device)."""

    schedule: Schedule
    grid: int  # 0: an empty problem, nothing to launch
    shape: tuple
    out_dtype: torch.dtype
    scalars: tuple
    meta: dict = field(hash=False, compare=False)
    runners: dict = field(default_factory=dict, hash=False, compare=False)  # ``_launch``'s compiled kernels

    def __call__(self, a, b, scale_a, scale_b, out, bias):
        if out is None:
            out = torch.empty(self.shape, dtype=self.out_dtype, device=a.device)
        if self.grid:
            args = (a, b, out, scale_a, scale_b, None if bias is None else bias.reshape(-1), *self.scalars)
            _launch(blockscaled_gemm_kernel, self.grid, self.schedule, args, self.meta, self.runners)
        return out


#: Cached block-scaled launches per call signature (bounded: ``tlgemm._checks.remember``).
_BLOCKSCALED_LAUNCHES: dict = {}


def _blockscaled(names, a, b, scale_a, scale_b, schedule, out, out_dtype, bias, num_sms, batched):
    """Validate a block-scaled GEMM; ``names`` are the caller's argument names of (a, b,
    scale_a, scale_b). Returns its ``_BlockScaledLaunch``."""
    na, nb, nsa, nsb = names
    ndim = 3 if batched else 2
    batch, M, N, K = blockscaled_problem(names, a, b, scale_a, scale_b, batched, _check_tensor)
    check_num_sms(num_sms)
    if schedule is None:
        schedule = default_blockscaled_schedule(M)
    _check_schedule(schedule)
    _check_blockscaled_schedule(schedule)
    shape = (*batch, M, N)
    if out is not None:
        _check_out(out, shape, out_dtype, ndim)
        out_dtype = out.dtype
    else:
        check_int32_buffer("out", shape, "Triton")
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    source = "out_dtype" if out is None else "out"
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype: expected a torch.dtype, got {type(out_dtype).__name__}")
    if out_dtype not in _FLOAT_OUT:
        raise TypeError(f"{source}: dtype must be one of {[str(d) for d in _FLOAT_OUT]}, got {out_dtype}")
    device = a.device
    _check_device(device, ((nb, b), (nsa, scale_a), (nsb, scale_b), ("out", out), ("bias", bias)), first=na)
    bias_stride = 0
    if bias is not None:
        _, bias_stride = _vector("bias", bias, N, _FLOAT_OUT, device, first=na)
    check_shared_memory(schedule, a.dtype, b.dtype, shared_memory_limit(device))
    out_strides = out.stride() if out is not None else torch.empty(shape, device="meta").stride()
    units = (batch[0] if batch else 1) * num_tiles(M, N, schedule) if M and N else 0
    check_int32_walk(schedule, M, N, K)
    P = _grid_size(units, schedule, num_sms, device) if units else 0
    lead = (lambda strides: strides[0]) if batched else (lambda strides: 0)
    scalars = (batch[0] if batch else 1, M, N, K,
               *(value for strides in (a.stride(), b.stride(), out_strides, scale_a.stride(), scale_b.stride())
                 for value in (lead(strides), *strides[-2:])), bias_stride)
    return _BlockScaledLaunch(schedule, P, shape, out_dtype, scalars, blockscaled_kernel_meta(schedule, P))


def _blockscaled_call(names, a, b, scale_a, scale_b, schedule, out, out_dtype, bias, num_sms, batched):
    """``_blockscaled`` once per argument signature, its ``_BlockScaledLaunch`` after that
    (validation and the schedule cost the host more than Triton's own launch)."""
    check_out_reads(out, (*zip(names, (a, b, scale_a, scale_b)), ("bias", bias)))
    launch = by_signature(_BLOCKSCALED_LAUNCHES, (batched, schedule, out_dtype, type(num_sms), num_sms),
                          (a, b, scale_a, scale_b, out, bias),
                          lambda: _blockscaled(names, a, b, scale_a, scale_b, schedule, out, out_dtype, bias, num_sms,
                                               batched))
    return launch(a, b, scale_a, scale_b, out, bias)


def blockscaled_matmul(a, b, scale_a, scale_b, schedule=None, *, out=None, out_dtype=None, bias=None, num_sms=None):
    """C[m, n] = Σ_kb (Σ_{k in kb} a[m, k] · b[n, k]) · scale_a[m, kb] · scale_b[n // 128, kb]
    (+ bias[n]), DeepSeek-V3's block-scaled FP8 GEMM: a [M, K] and b [N, K] fp8 (e4m3fn or
    e5m2; b is the weight as stored, torch._scaled_mm's second operand is b.t()), scale_a
    [M, K/128] and scale_b [ceil(N/128), K/128] float32, any strides; K a multiple of 128, any
    M and N (a partial last row block of b has its own scale row, DeepGEMM's layout for
    N = 2112). Each 128-deep K block
    is accumulated in fp32 from zero and promoted with its two scales. out_dtype: bf16 (the
    default; ``out``'s dtype when given), fp16 or fp32. schedule: block_k = 128, None =
    ``default_blockscaled_schedule(M)``. Returns ``out`` [M, N]."""
    return _blockscaled_call(("a", "b", "scale_a", "scale_b"), a, b, scale_a, scale_b, schedule, out, out_dtype, bias,
                             num_sms, batched=False)


def blockscaled_bmm(x, y, xs, ys, schedule=None, *, out=None, out_dtype=None, bias=None, num_sms=None):
    """The batched ``blockscaled_matmul`` (FlagGems' w8a8 block-FP8 bmm): x [B, M, K],
    y [B, N, K] fp8, xs [B, M, K/128], ys [B, ceil(N/128), K/128] float32 (any strides) →
    z [B, M, N]; bias (length N) is shared by every batch. Returns ``out``."""
    return _blockscaled_call(("x", "y", "xs", "ys"), x, y, xs, ys, schedule, out, out_dtype, bias, num_sms,
                             batched=True)


def schedule_trace(M, N, K, schedule, *, num_sms=None, device="cuda"):
    """Run the schedule-trace kernel: for each launch program p, the WorkItems it runs, in
    order (to compare with tlgemm.schedules.work(p, ...))."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    if schedule.split_k > 1 or schedule.is_swap_ab:
        raise ValueError("schedule: split_k and is_swap_ab are not implemented by the Triton backend")
    device = torch.device(device)
    P = num_programs(M, N, K, schedule, _num_sms(schedule, num_sms, device))
    max_items = num_tiles(M, N, schedule) + 1
    trace = torch.full((P, max_items, 4), -1, dtype=torch.int32, device=device)
    counts = torch.full((P,), -1, dtype=torch.int32, device=device)
    schedule_trace_kernel[(P,)](
        trace, counts, M, N, K, max_items, BLOCK_M=schedule.block_m, BLOCK_N=schedule.block_n,
        BLOCK_K=schedule.block_k, GROUP_SIZE_M=schedule.group_size_m, RASTER=schedule.raster, NUM_SMS=P,
        NUM_XCDS=schedule.num_xcds, CHUNK_SIZE=schedule.chunk_size, STREAMK_TILES=schedule.streamk_tiles)
    trace, counts = trace.cpu().tolist(), counts.cpu().tolist()
    if not all(0 <= c <= max_items for c in counts):
        raise RuntimeError(f"schedule_trace: item counts {counts} outside [0, {max_items}]")
    return [[WorkItem(*item) for item in trace[p][:counts[p]]] for p in range(P)]
