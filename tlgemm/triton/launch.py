"""Host launchers of the Triton kernels: validation, grid from tlgemm.schedules, launch.

Rules enforced here (each violation is a TypeError for a wrong type/dtype, else ValueError,
naming the argument):

* a [M, K] and b [K, N] are 2-D torch tensors with the same dtype, except that fp8
  e4m3fn/e5m2 may mix; input dtypes fp32, fp16, bf16, fp8 (e4m3fn, e5m2), int8.
* Output dtype: fp32/fp16/bf16 (default: the input's; bf16 for fp8); int8 inputs may also
  give int32 (their default), which takes no scale or bias.
* scale_a: one value or M values (per row of A); scale_b: one value or N values (per column
  of B); both float32. bias: N float values, added to every row (torch.addmm).
* All tensors on one device: CUDA, or CPU while interpreting (TRITON_INTERPRET=1).
* Any strides, but every tensor spans fewer than 2**31 elements (the kernels index in
  int32) and ``out`` must not overlap itself.
* The schedule: a tlgemm.schedules.Schedule without split_k or swap-AB (not implemented by
  this backend); block_k >= 32 for 8-bit inputs (tl.dot's minimum K for 8-bit operands).
"""

from __future__ import annotations

import torch

from tlgemm.schedules import Schedule, WorkItem, num_programs, num_tiles

from .kernels import persistent_gemm_kernel, schedule_trace_kernel, streamk_gemm_kernel
from .shim import interpreting

__all__ = ["matmul", "persistent_matmul", "streamk_matmul", "schedule_trace"]

_INTERPRETED = interpreting()
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8) + _FP8
_FLOAT_OUT = (torch.float32, torch.float16, torch.bfloat16)
_INT32_INDEX = 2**31


def _check_tensor(name, t, ndim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(t.shape)}")
    span = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
    if t.numel() and span >= _INT32_INDEX:
        raise ValueError(f"{name}: spans {span} elements; the Triton kernels index in int32 (< 2**31)")


def _check_device(device, named):
    for name, t in named:
        if t is not None and t.device != device:
            raise ValueError(f"{name}: on {t.device}, but a is on {device}; all tensors must share a device")
    if device.type != "cuda" and not _INTERPRETED:
        raise ValueError(f"a: on {device}; the Triton kernels need CUDA tensors (CPU only under TRITON_INTERPRET=1)")


def _check_no_overlap(name, t):
    """2-D non-overlap: some order of the axes has each stride >= the span of the inner one."""
    (m, n), (sm, sn) = t.shape, t.stride()
    if m <= 1 or n <= 1:
        ok = (m <= 1 or sm >= 1) and (n <= 1 or sn >= 1)
    else:
        ok = (sn >= 1 and sm >= n * sn) or (sm >= 1 and sn >= m * sm)
    if not ok:
        raise ValueError(f"{name}: strides {t.stride()} make elements of shape {tuple(t.shape)} overlap")


def _vector(name, v, lengths, dtypes, device):
    """(flat tensor, stride) of a scale/bias vector; stride 0 for a single value."""
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(v).__name__}")
    if v.dtype not in dtypes:
        raise TypeError(f"{name}: dtype must be one of {[str(d) for d in dtypes]}, got {v.dtype}")
    if v.numel() not in lengths:
        raise ValueError(f"{name}: expected {' or '.join(map(str, lengths))} elements, got {v.numel()}")
    if v.device != device:
        raise ValueError(f"{name}: on {v.device}, but a is on {device}; all tensors must share a device")
    flat = v.reshape(-1)
    _check_tensor(name, flat)
    return flat, (flat.stride(0) if flat.numel() > 1 else 0)


def _out_dtype(a_dtype, out_dtype, epilogue):
    if out_dtype is None:
        out_dtype = torch.bfloat16 if a_dtype in _FP8 else torch.int32 if a_dtype == torch.int8 else a_dtype
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype: expected a torch.dtype, got {type(out_dtype).__name__}")
    allowed = _FLOAT_OUT + ((torch.int32,) if a_dtype == torch.int8 else ())
    if out_dtype not in allowed:
        raise TypeError(f"out_dtype: for {a_dtype} inputs must be one of {[str(d) for d in allowed]}, got {out_dtype}")
    if out_dtype == torch.int32 and epilogue:
        raise ValueError("out_dtype: int32 output takes no scale_a/scale_b/bias; choose a float out_dtype")
    return out_dtype


def _prepare(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms):
    """Validate everything; return (out, the kernel arguments, the compile-time arguments)."""
    _check_tensor("a", a, 2)
    _check_tensor("b", b, 2)
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    if schedule.split_k > 1:
        raise ValueError("schedule: split_k > 1 is not implemented by the Triton backend (use streamk_tiles)")
    if schedule.is_swap_ab:
        raise ValueError("schedule: is_swap_ab is not implemented by the Triton backend (pass b.T, a.T instead)")
    if not isinstance(allow_tf32, bool):
        raise TypeError(f"allow_tf32: expected a bool, got {type(allow_tf32).__name__}")
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in _INPUT_DTYPES:
            raise TypeError(f"{name}: dtype must be one of {[str(d) for d in _INPUT_DTYPES]}, got {t.dtype}")
    if a.dtype != b.dtype and not (a.dtype in _FP8 and b.dtype in _FP8):
        raise TypeError(f"a, b: dtypes must match (only fp8 e4m3fn/e5m2 may mix), got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a, b: inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    eight_bit = a.element_size() == 1
    if eight_bit and schedule.block_k < 32:
        raise ValueError(f"schedule: block_k must be >= 32 for 8-bit inputs, got {schedule.block_k}")
    (M, K), N = a.shape, b.shape[1]
    device = a.device
    if out is not None:
        _check_tensor("out", out, 2)
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out: expected shape {(M, N)}, got {tuple(out.shape)}")
        _check_no_overlap("out", out)
        if out_dtype is not None and out.dtype != out_dtype:
            raise ValueError(f"out: dtype {out.dtype} differs from out_dtype={out_dtype}")
    _check_device(device, (("b", b), ("out", out)))
    epilogue = scale_a is not None or scale_b is not None or bias is not None
    out_dtype = _out_dtype(a.dtype, out_dtype if out is None else out.dtype, epilogue)
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=device)
    scales = (None, None, 0, 0)
    if scale_a is not None or scale_b is not None:
        ones = torch.ones(1, dtype=torch.float32, device=device)
        sa, sa_stride = _vector("scale_a", ones if scale_a is None else scale_a, (1, M), (torch.float32,), device)
        sb, sb_stride = _vector("scale_b", ones if scale_b is None else scale_b, (1, N), (torch.float32,), device)
        scales = (sa, sb, sa_stride, sb_stride)
    bias_arg, bias_stride = None, 0
    if bias is not None:
        bias_arg, bias_stride = _vector("bias", bias, (N,), _FLOAT_OUT, device)
    P = None
    if M and N:
        if schedule.is_persistent and schedule.num_sms is None and num_sms is None and device.type == "cuda":
            num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        P = num_programs(M, N, K, schedule, num_sms)
    args = (a, b, out, scales[0], scales[1], bias_arg, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
            scales[2], scales[3], bias_stride)
    return out, args, kernel_meta(schedule, P, K, quantized=a.dtype == torch.int8, allow_tf32=allow_tf32)


def kernel_meta(schedule, num_programs, K, *, quantized, allow_tf32=False):
    """Compile-time arguments of the GEMM kernels for ``schedule`` launched on
    ``num_programs`` programs (Triton's num_warps = 4 per consumer warpgroup)."""
    return dict(BLOCK_M=schedule.block_m, BLOCK_N=schedule.block_n, BLOCK_K=schedule.block_k,
                GROUP_SIZE_M=schedule.group_size_m, RASTER=schedule.raster, NUM_SMS=num_programs,
                NUM_XCDS=schedule.num_xcds, CHUNK_SIZE=schedule.chunk_size,
                EVEN_K=K > 0 and K % schedule.block_k == 0, QUANTIZED=quantized, ALLOW_TF32=allow_tf32,
                num_warps=schedule.consumer_warps, num_stages=schedule.num_stages)


def persistent_matmul(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None,
                      allow_tf32=False, num_sms=None):
    """C = (scale_a · A @ B · scale_b) + bias with the persistent kernel (schedule without
    Stream-K; a non-persistent schedule runs one program per tile). Returns ``out``.

    The grid size P = tlgemm.schedules.num_programs(...) is a compile-time constant of the
    kernel (the persistent stride), so each distinct P compiles once; persistent schedules
    on large problems all have P = the SM count."""
    if isinstance(schedule, Schedule) and schedule.streamk_tiles:
        raise ValueError("schedule: streamk_tiles > 0 needs streamk_matmul (or matmul)")
    out, args, meta = _prepare(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms)
    if meta["NUM_SMS"]:
        persistent_gemm_kernel[(meta["NUM_SMS"],)](*args, **meta)
    return out


def streamk_matmul(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None,
                   allow_tf32=False, num_sms=None):
    """Like ``persistent_matmul`` with the Stream-K kernel (schedule.streamk_tiles > 0)."""
    if isinstance(schedule, Schedule) and not schedule.streamk_tiles:
        raise ValueError("schedule: streamk_matmul needs streamk_tiles > 0 (see Schedule.streamk)")
    out, args, meta = _prepare(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, allow_tf32, num_sms)
    P = meta["NUM_SMS"]
    if P:
        M, N = out.shape
        acc_dtype = torch.int32 if meta["QUANTIZED"] else torch.float32
        partials = torch.empty((P, 2, schedule.block_m, schedule.block_n), dtype=acc_dtype, device=out.device)
        counters = torch.zeros(min(schedule.streamk_tiles, num_tiles(M, N, schedule)), dtype=torch.int32,
                               device=out.device)
        streamk_gemm_kernel[(P,)](*args[:6], partials, counters, *args[6:], STREAMK_TILES=schedule.streamk_tiles,
                                  **meta)
    return out


def matmul(a, b, schedule, **kwargs):
    """``streamk_matmul`` when schedule.streamk_tiles > 0, else ``persistent_matmul``."""
    launcher = streamk_matmul if isinstance(schedule, Schedule) and schedule.streamk_tiles else persistent_matmul
    return launcher(a, b, schedule, **kwargs)


def schedule_trace(M, N, K, schedule, *, num_sms=None, device="cuda"):
    """Run the schedule-trace kernel: for each launch program p, the WorkItems it runs, in
    order (to compare with tlgemm.schedules.work(p, ...))."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    if schedule.split_k > 1 or schedule.is_swap_ab:
        raise ValueError("schedule: split_k and is_swap_ab are not implemented by the Triton backend")
    device = torch.device(device)
    if schedule.is_persistent and schedule.num_sms is None and num_sms is None and device.type == "cuda":
        num_sms = torch.cuda.get_device_properties(device).multi_processor_count
    P = num_programs(M, N, K, schedule, num_sms)
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
