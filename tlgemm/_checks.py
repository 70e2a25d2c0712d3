"""Host-side argument rules both backends' launchers share (torch only): dtype classes, the
output dtype rule, scale/bias vectors, the block-scaled GEMM's operand rules, and a tensor's
launch signature with the bounded caches keyed by it, a CUDA device's limits, the Stream-K
workspaces kept per stream, and the zero-padded operand copies both launchers make. Errors name
the argument: TypeError for a wrong type or dtype, ValueError otherwise."""

import functools
import math

import torch

from tlgemm.schedules import cdiv
from tlgemm.schedules.schedule import INT32_MAX

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
FLOAT_OUT = (torch.float32, torch.float16, torch.bfloat16)
#: DeepSeek-V3's scale block: 1x128 groups of the activation, 128x128 blocks of the weight.
SCALE_BLOCK = 128


def matmul_uses_tf32() -> bool:
    """Whether torch.matmul computes float32 in TF32: ``torch.backends.cuda.matmul.fp32_precision``
    (torch >= 2.9, resolved through ``torch.backends.fp32_precision``; once that API has set it,
    reading the legacy ``allow_tf32`` raises), else ``allow_tf32``."""
    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", None)
    return precision == "tf32" if precision is not None else bool(matmul.allow_tf32)


def output_dtype(a_dtype, out_dtype, epilogue: bool, name: str = "out_dtype"):
    """The output dtype: ``out_dtype``, else bf16 for fp8 inputs, int32 for int8, the input's
    otherwise; int32 output (int8 inputs only) takes no scale/bias epilogue. Errors name
    ``name``: "out" where the dtype is that of a given out."""
    if out_dtype is None:
        out_dtype = torch.bfloat16 if a_dtype in FP8 else torch.int32 if a_dtype == torch.int8 else a_dtype
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"{name}: expected a torch.dtype, got {type(out_dtype).__name__}")
    allowed = FLOAT_OUT + ((torch.int32,) if a_dtype == torch.int8 else ())
    if out_dtype not in allowed:
        raise TypeError(f"{name}: for {a_dtype} inputs must be one of {[str(d) for d in allowed]}, got {out_dtype}")
    if out_dtype == torch.int32 and epilogue:
        raise ValueError(f"{name}: int32 output takes no scale_a/scale_b/bias; choose a float "
                         f"{'out dtype' if name == 'out' else 'out_dtype'}")
    return out_dtype


def check_strided(name, t) -> None:
    """TypeError for a sparse, nested (or other non-strided) tensor: the kernels read strided
    memory. A nested tensor reports the strided layout but has no single shape and strides."""
    if t.is_nested:
        raise TypeError(f"{name}: expected a dense (strided) tensor, got a nested tensor; pass one tensor per matrix "
                        "(e.g. torch.stack of equal shapes, or t.to_padded_tensor(0))")
    if t.layout != torch.strided:
        raise TypeError(f"{name}: expected a dense (strided) tensor, got layout {t.layout}; pass t.to_dense()")


def check_int32_buffer(name: str, shape, backend: str, what: str = "the result") -> None:
    """ValueError where a buffer a launcher allocates for the kernel (``what``: the result, or
    a temporary standing in for ``name``) holds 2**31 elements or more: the kernels index in
    int32, as for the tensors a caller passes."""
    count = math.prod(shape)
    if count > INT32_MAX:
        raise ValueError(f"{name}: {what} {tuple(shape)} would hold {count} elements; the {backend} kernels index "
                         "in int32 (< 2**31)")


def check_not_negated(name, t) -> None:
    """ValueError for a tensor with torch's negative bit set (a lazily negated view, e.g.
    ``z.conj().imag``): its memory holds the values' negatives, which a kernel would read."""
    if t.is_neg():
        raise ValueError(f"{name}: has the negative bit set (a lazily negated view such as z.conj().imag); "
                         "pass t.resolve_neg()")


def vector(name, v, length, dtypes, device, first="a", *, per_row=False, scalar=False):
    """``v`` flattened to 1-D after checking its type, dtype, shape, device and that it is not
    a negated view (``check_not_negated``). The shape is [length] or its 2-D form: [length, 1]
    where ``per_row`` (a scale of A's rows), else [1, length] (per column: a scale of B's
    columns, a bias); where ``scalar`` also any one-element shape (a per-tensor scale). An
    element count alone is not enough: an [M, 1] bias of a square product is per row."""
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(v).__name__}")
    check_strided(name, v)
    check_not_negated(name, v)
    if v.dtype not in dtypes:
        raise TypeError(f"{name}: dtype must be one of {[str(d) for d in dtypes]}, got {v.dtype}")
    shapes = [(length,), (length, 1) if per_row else (1, length)]
    if not (scalar and v.numel() == 1) and tuple(v.shape) not in shapes:
        raise ValueError(f"{name}: expected {'one element, ' if scalar else ''}"
                         f"{' or '.join(str(list(shape)) for shape in shapes)}, got shape {list(v.shape)}")
    if v.device != device:
        raise ValueError(f"{name}: on {v.device}, but {first} is on {device}; all tensors must share a device")
    return v.reshape(-1)


def check_int32_walk(schedule, M: int, N: int, K: int) -> None:
    """ValueError where the tile walk of ``schedule`` over the kernel's M x N x K problem (the
    swapped one under swap-AB) leaves the kernels' int32 arithmetic: a raster group's tiles
    (group_size_m · the tiles across it), and under Stream-K the K-iterations of all tiles,
    which it numbers globally."""
    tiles_m, tiles_n, iterations = cdiv(M, schedule.block_m), cdiv(N, schedule.block_n), cdiv(K, schedule.block_k)
    across, along = (tiles_n, tiles_m) if schedule.raster == "m" else (tiles_m, tiles_n)
    if schedule.group_size_m * across > INT32_MAX:
        lines = "rows" if schedule.raster == "m" else "columns"
        raise ValueError(
            f"schedule: group_size_m={schedule.group_size_m} tile {lines} of {across} tiles each exceed the kernels' "
            f"int32 tile arithmetic; here {along} tile {lines} or more make one group: use group_size_m={along}")
    if schedule.streamk_tiles and tiles_m * tiles_n * iterations > INT32_MAX:
        raise ValueError(
            f"schedule: Stream-K numbers the K-iterations of all {tiles_m * tiles_n} tiles ({iterations} each) in "
            "int32, more than 2**31 - 1; use larger tiles or block_k, or no Stream-K")


def check_out_dtype(out, out_dtype) -> None:
    """``out_dtype`` given beside ``out``: a torch.dtype (TypeError) and out's own (ValueError)."""
    if out_dtype is None:
        return
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype: expected a torch.dtype, got {type(out_dtype).__name__}")
    if out.dtype != out_dtype:
        raise ValueError(f"out: dtype {out.dtype} differs from out_dtype={out_dtype}")


def check_num_sms(num_sms, *, optional: bool = True) -> None:
    """``num_sms``: None (the device's count) where ``optional``, else an int in 1..2**31 - 1
    (the kernels take it as an int32): TypeError for another type, ValueError out of range."""
    if num_sms is None and optional:
        return
    expected = (f"num_sms: expected {'None or ' if optional else ''}an int in 1..2**31 - 1 (the kernels take it as "
                "an int32)")
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise TypeError(f"{expected}, got {num_sms!r}")
    if not 1 <= num_sms <= INT32_MAX:
        raise ValueError(f"{expected}, got {num_sms!r}")


def check_no_overlap(name, t):
    """Raise where ``t``'s strides may make two of its elements one memory location: ordered
    by stride, each axis of size > 1 must step past the last element the smaller-stride axes
    reach (a sufficient rule: some interleaved layouts that pass no such test, e.g. shape
    (3, 2) with strides (2, 3), are refused too). An empty tensor has no elements to overlap."""
    if t.numel() == 0:
        return
    span = 0
    for size, stride in sorted((d for d in zip(t.shape, t.stride()) if d[0] > 1), key=lambda d: d[1]):
        if stride <= span:
            raise ValueError(f"{name}: strides {t.stride()} may make elements of shape {tuple(t.shape)} overlap "
                             "(ordered by stride, each dimension must step past the elements of the smaller-stride "
                             "ones)")
        span += (size - 1) * stride


def span_bytes(t) -> int:
    """The bytes from a tensor's first element to the end of its last (0 when it has none)."""
    if not t.numel():
        return 0
    return (sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1) * t.element_size()


def _byte_span(t) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + span_bytes(t)


def may_share_memory(x, y) -> bool:
    """Whether tensors x and y may share memory: one device and intersecting byte ranges of
    their addresses (conservative: two interleaved views of one buffer count as sharing). By
    address, not by storage object: two storages may view one buffer (torch.from_numpy of
    overlapping arrays, DLPack imports). Storage-less tensors (data pointer 0, e.g. on the
    meta device) share nothing."""
    if x.device != y.device or not (x.numel() and y.numel()) or x.data_ptr() == 0 or y.data_ptr() == 0:
        return False
    xs, ys = x.untyped_storage(), y.untyped_storage()
    xp, yp = xs.data_ptr(), ys.data_ptr()
    if xp != yp and (xp + xs.nbytes() <= yp or yp + ys.nbytes() <= xp):  # disjoint allocations: the usual case
        return False
    (x0, x1), (y0, y1) = _byte_span(x), _byte_span(y)
    return x0 < y1 and y0 < x1


def check_out_reads(out, reads) -> None:
    """ValueError where ``out`` may share memory with a tensor the kernel reads while it writes
    out (``reads``: (name, tensor or None) pairs; ``may_share_memory``); per call, as data
    pointers change between calls of one signature. An ``out`` that is no tensor, or not a
    strided one (sparse: no data pointer), is left to the caller's validation to name, as is
    such a read."""
    if not isinstance(out, torch.Tensor) or out.layout != torch.strided:
        return
    for name, t in reads:
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and may_share_memory(out, t):
            raise ValueError(f"out: shares memory with {name}, which the kernel reads while it writes out; "
                             "pass an out of its own")


def blockscaled_problem(names, a, b, scale_a, scale_b, batched: bool, check_tensor):
    """(batch, M, N, K) of a block-scaled GEMM (batch: () or (B,)) after its operand rules:
    a [(B,) M, K] and b [(B,) N, K] fp8, K a multiple of SCALE_BLOCK, scale_a
    [(B,) M, K/128] and scale_b [(B,) ceil(N/128), K/128] float32. ``names`` are the caller's
    names of (a, b, scale_a, scale_b); ``check_tensor(name, t, ndim)`` is the backend's own
    tensor check (type, rank, index range)."""
    na, nb, nsa, nsb = names
    ndim = 3 if batched else 2
    for name, t in ((na, a), (nb, b)):
        check_tensor(name, t, ndim)
        if t.dtype not in FP8:
            raise TypeError(f"{name}: dtype must be one of {[str(d) for d in FP8]}, got {t.dtype}")
    if batched and a.shape[0] != b.shape[0]:
        raise ValueError(f"{na}, {nb}: batch sizes differ: {na} is {tuple(a.shape)}, {nb} is {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"{na}, {nb}: K differs ({nb} is [N, K]): {na} is {tuple(a.shape)}, {nb} is {tuple(b.shape)}")
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-2]
    batch = (a.shape[0],) if batched else ()
    if K % SCALE_BLOCK:
        raise ValueError(f"{na}: K = {K} must be a multiple of {SCALE_BLOCK} (the scale block along K)")
    for name, t, expected in ((nsa, scale_a, (*batch, M, K // SCALE_BLOCK)),
                              (nsb, scale_b, (*batch, -(-N // SCALE_BLOCK), K // SCALE_BLOCK))):
        check_tensor(name, t, ndim)
        if t.dtype != torch.float32:
            raise TypeError(f"{name}: dtype must be torch.float32, got {t.dtype}")
        if tuple(t.shape) != expected:
            raise ValueError(f"{name}: expected shape {expected}, got {tuple(t.shape)}")
    return batch, M, N, K


#: Entries a launch cache keyed by signatures holds before it is cleared (``remember``).
MAX_CACHED_LAUNCHES = 4096


def remember(cache: dict, key, value) -> None:
    """cache[key] = value, clearing the cache first when it holds MAX_CACHED_LAUNCHES entries
    (call signatures are unbounded; a full cache is rebuilt by the calls that follow)."""
    if len(cache) >= MAX_CACHED_LAUNCHES:
        cache.clear()
    cache[key] = value


def by_signature(cache: dict, key: tuple, tensors: tuple, build=None):
    """``build()``, remembered in ``cache`` under ``key`` and the ``signature`` of each of
    ``tensors``: a later call with the same signature gets it without building (validating)
    again. An argument that is no tensor, or a key part that is not hashable, skips the cache,
    so that ``build()`` raises its error naming the argument. Without ``build``: the value
    remembered, or None."""
    try:
        full_key = (*key, *(signature(t) for t in tensors))
        value = cache.get(full_key)
    except (AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse tensor's strides or pointer
        full_key = value = None
    if value is None and build is not None:
        value = build()
        if full_key is not None:
            remember(cache, full_key, value)
    return value


def signature(t):
    """What a launch derives from a tensor argument (None: not given): its shape, strides,
    dtype, device, whether its base address is 16-byte aligned (what TMA needs) and its
    negative bit (``check_not_negated``)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0, t.is_neg())


@functools.lru_cache(maxsize=None)
def _limits_of(index: int) -> tuple[int, int]:
    props = torch.cuda.get_device_properties(index)
    return props.multi_processor_count, props.shared_memory_per_block_optin


def cuda_limits(device) -> tuple[int, int]:
    """(SMs, opt-in shared memory per block) of a CUDA device (a torch.device or an index; no
    index: the current device), queried once per device: a query costs several microseconds
    of host time, more than a cached launch's own checks."""
    index = device if isinstance(device, int) else device.index
    return _limits_of(torch.cuda.current_device() if index is None else index)


#: The Stream-K launchers' workspaces per (device, stream, key): see ``stream_workspace``.
_STREAM_WORKSPACES: dict[tuple, tuple[torch.Tensor, ...]] = {}


def check_streamk_workspace(programs: int, tiles_per_program: int, block_m: int, block_n: int) -> None:
    """ValueError where a Stream-K workspace of ``tiles_per_program`` partial tiles per program
    holds 2**31 elements or more: the kernels index it in int32."""
    elements = programs * tiles_per_program * block_m * block_n
    if elements > INT32_MAX:
        raise ValueError(f"schedule: Stream-K on {programs} programs needs a workspace of {elements} elements "
                         f"({tiles_per_program} partial {block_m}x{block_n} tile(s) per program), 2**31 or more; the "
                         "kernels index it in int32: run fewer programs (num_sms) or smaller tiles")


def stream_workspace(device, key: tuple, build, *args) -> tuple[torch.Tensor, ...]:
    """``build(*args)``'s tensors for a launch on ``device``'s current stream (CUDA; on the CPU,
    where the Triton interpreter runs, one per key), built once and kept for the process's
    life: no allocation and no memset per call. The Stream-K kernels leave their flags or
    counters zero when they finish, and launches on one stream run in order, so no two use
    a workspace at once. Under CUDA graph capture each launch builds its own."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        # a CUDA graph's own: one kept from another capture lives in that graph's memory pool and
        # was zeroed only by that graph; built here, its zeroing is captured with the launch
        return build(*args)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    full_key = (device, stream, *key)
    workspace = _STREAM_WORKSPACES.get(full_key)
    if workspace is None:
        workspace = _STREAM_WORKSPACES[full_key] = build(*args)
    return workspace


#: Row pitch of a padded operand copy or temporary output: whole 128-byte lines. Rows 16 to
#: 112 bytes off a line ran 1.4-2.0x slower on the H100 (benchmarks/results/unaligned_rows.md).
PITCH = 128

#: The widest vector load (16 bytes: ld.global.v4.b32, cp.async.cg), the unit of the Triton
#: kernels' aligned loads.
VECTOR_BYTES = 16


def loads_as_vectors(t: torch.Tensor) -> bool:
    """Whether the Triton kernels can load ``t`` [.., rows, cols] as 16-byte vectors along a unit-stride
    dimension: its data 16-byte aligned, its rows along that dimension and (batched) its
    matrices 16-byte multiples apart (a matrix with neither stride 1 is read as it is,
    element by element)."""
    rs, cs = t.stride()[-2:]
    rows, cols = t.shape[-2:]
    if t.dim() == 3 and t.shape[0] > 1 and (t.stride(0) * t.element_size()) % VECTOR_BYTES:
        return False
    if cs == 1 and cols > 1:
        pitch = rs if rows > 1 else 0
    elif rs == 1 and rows > 1:
        pitch = cs if cols > 1 else 0
    else:
        return True
    return t.data_ptr() % VECTOR_BYTES == 0 and (pitch * t.element_size()) % VECTOR_BYTES == 0


#: TMA's alignment of a tensor's base address and of its row pitch, in bytes (cuTensorMapEncodeTiled).
TMA_ALIGN = 16


def tma_read(mn: int, K: int, k_stride: int, mn_stride: int, based: bool, size: int) -> str:
    """How the TileLang launcher reads one operand of ``mn`` x ``K`` elements of ``size`` bytes
    (a [M, K] or b [K, N]) by its own layout: "K" (K-major, as it is), "MN" (MN-major, as it is:
    16-bit inputs only, wgmma's transposed operand) or "copy" (one K-major copy). Read as it is
    needs a dense matrix whose data (``based``) and rows lie on TMA_ALIGN bytes; a single row
    or column is dense either way."""
    def dense(unit: int, lead: int, extent: int, single: bool) -> bool:
        return unit == 1 and (lead == extent or single) and based and (extent * size) % TMA_ALIGN == 0

    if dense(k_stride, mn_stride, K, mn == 1):
        return "K"
    if size == 2 and dense(mn_stride, k_stride, mn, K == 1):
        return "MN"
    return "copy"


def padded(extent: int, size: int) -> int:
    """``extent`` elements of ``size`` bytes rounded up to a whole ``PITCH``."""
    return extent + (-extent) % (PITCH // size)


def padded_copy(t: torch.Tensor, pad: int) -> torch.Tensor:
    """A fresh dense [..., rows, cols + pad] copy of ``t`` (zero columns appended): one copy, at
    a new allocation (the caching allocator aligns it to 512 bytes)."""
    *lead, cols = t.shape
    out = torch.empty((*lead, cols + pad), dtype=t.dtype, device=t.device)
    out[..., :cols].copy_(t)
    if pad:
        out[..., cols:].zero_()
    return out
