"""Host launchers of the TileLang kernels: validation, operand orientation, compile cache.

Same signature and rules as ``tlgemm.triton.launch`` (TypeError for a wrong type/dtype, else
ValueError, naming the argument), plus what TMA needs. The copy rule (each operand at most
one copy, documented here and by ``explain``):

* A [M, K] is taken as-is when row-major (K-major) or, for 16-bit inputs, column-major
  (MN-major: the kernel reads A.T, a dense [K, M]); B [K, N] as-is when column-major (K-major:
  B.T is a dense [N, K]) or, for 16-bit inputs, row-major (MN-major). Anything else (other
  strides, MN-major fp8/int8/fp32 — WGMMA reads only K-major for those, PTX ISA 9.7.15.5.1)
  is copied once into the K-major layout.
* TMA needs 16-byte aligned base addresses and row pitches (cuTensorMapEncodeTiled): when
  the contiguous extent of an operand is not a multiple of 16 bytes, K is zero-padded for
  both operands (exact: the padding adds zero products; an operand that is copied anyway is
  padded in the same copy), and C is computed into a padded buffer and copied into ``out``.
  ``out`` that is not a dense row-major [M, N] is likewise written through one temporary.
  ``out`` must not share memory with a tensor the kernel reads (checked on every call).
  What is padded is padded to rows of a multiple of 128 bytes (``tlgemm._checks.PITCH``), not
  just 16: with operand rows 16 to 112 bytes off whole 128-byte lines the kernel ran 1.4-2.0x
  slower on the H100 (e.g. 4096x4096x4001 bf16: 366 TFLOP/s with K padded to 4008, 749 to
  4032); C's temporary measured level either way (benchmarks/results/unaligned_rows.md).
  The kernel's K is then the padded width (a kernel parameter's row pitch is its K): for a
  block_k of fewer than 128 bytes it may walk up to 128 bytes of all-zero K-iterations more
  than ceil(K / block_k) (bf16 K = 33 at block_k 16: 4 instead of 3), and a Stream-K schedule
  splits the padded width's K-iterations (the Triton kernel walks ceil(K / block_k)).

Schedules the kernels take (else a ``schedule:`` ValueError): one or two consumer warpgroups;
at least two stages (a consumer releases a ring slot only after issuing the next K-iteration's
wgmma); two warpgroups on a tile of fewer than 128 rows split block_n, which lowers up to
block_n = 64; at most ``GemmContext.fragment_registers`` accumulators a thread (more spill); the
operand ring and staging within the device's shared memory; a tile walk within int32
(``tlgemm._checks.check_int32_walk``).

A swap-AB schedule (``is_swap_ab``, chosen by tlgemm.schedules.select for small M) runs the
plain kernel on the swapped problem Cᵀ[N, M] = Bᵀ · Aᵀ, so the small M becomes WGMMA's N
and the 64-row instruction side is N: scale_a and scale_b trade places and the bias is added
per row of Cᵀ. The kernel stores Cᵀ's tiles transposed straight into a row-major ``out``
(``KernelSpec.c_transposed``; no second kernel), plainly into ``out.T`` when ``out`` is
column-major, and into a temporary copied once into ``out`` only where neither is a dense,
16-byte aligned TMA target (e.g. N not a multiple of 16 bytes of C).

Compiled kernels are cached in memory per ``KernelSpec`` and on disk by TileLang's cache, so
only the first call of a spec compiles; M, N and K are run-time values. What a call derives
from its arguments (``_Launch``) is cached per argument signature (shapes, strides, dtypes,
devices, 16-byte alignment), so a repeated call validates and derives nothing again and calls
the kernel's TVM-FFI entry directly. Stream-K workspaces are kept per stream
(``_streamk_workspace``).
"""

import contextlib
import dataclasses
import functools

import torch

from tlgemm._checks import FLOAT_OUT as _FLOAT_OUT
from tlgemm._checks import FP8 as _FP8
from tlgemm._checks import SCALE_BLOCK as _SCALE_BLOCK
from tlgemm._checks import TMA_ALIGN as _TMA_ALIGN
from tlgemm._checks import (blockscaled_problem, check_int32_buffer, check_int32_walk, check_no_overlap,
                             check_not_negated, check_num_sms, check_out_dtype, check_out_reads, check_streamk_workspace,
                             check_strided, cuda_limits, output_dtype, padded, remember, signature, stream_workspace,
                             tma_read, vector)
from tlgemm._checks import padded_copy as _k_major_copy
from tlgemm import schedules
from tlgemm.macros.operands import Major
from tlgemm.schedules import Schedule, WorkItem, num_programs, num_tiles

from .emitter_gemm import BLOCKSCALED_PASS_CONFIGS, KERNEL_PASS_CONFIGS, PASS_CONFIGS, lower_to_cuda
from .kernels import KernelSpec, build, schedule_trace_kernel
from .stages import BlockScaledContext

__all__ = ["matmul", "persistent_matmul", "streamk_matmul", "bmm", "schedule_trace", "kernel_source", "make_spec",
           "cached_launch", "check_bmm_schedule",
           "blockscaled_matmul", "blockscaled_bmm", "blockscaled_spec", "default_blockscaled_schedule",
           "blockscaled_stages_that_fit", "operands_read_once", "read_once", "PASS_CONFIGS",
           "KERNEL_PASS_CONFIGS", "BLOCKSCALED_PASS_CONFIGS"]

_WGMMA_INPUT = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "tf32",
                torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2", torch.int8: "s8"}
_STORAGE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.int32: "int32"}
_INT32_INDEX = 2**31
#: Grid bound of a non-persistent schedule: min(bound, tiles) = one program per tile.
_ONE_PROGRAM_PER_TILE = 2**31 - 1



def _check_tensor(name, t, ndim):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    check_strided(name, t)
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(t.shape)}")
    check_not_negated(name, t)
    if t.numel() >= _INT32_INDEX:
        raise ValueError(f"{name}: {t.numel()} elements; the TileLang kernels index in int32 (< 2**31)")


def _check_allocations(out, shape, c_shape) -> None:
    """The int32 rule of ``_check_tensor`` for what a launch allocates: the result [.., M, N]
    where no ``out`` is given, and C's row-padded temporary ``c_shape`` (None: C is written
    directly)."""
    if out is None:
        check_int32_buffer("out", shape, "TileLang")
    if c_shape is not None:
        check_int32_buffer("out", c_shape, "TileLang", "its row-padded temporary")


def _orientation(M, K, N, a_stride, b_stride, a_based, b_based, size):
    """(how A is read, how B is read, K padding) per the module's copy rule
    (tlgemm._checks.tma_read), from the operands' strides and base alignment: "K" / "MN" read
    as they are, "copy" = one K-major copy."""
    pad = padded(K, size) - K if (K * size) % _TMA_ALIGN else 0
    return (tma_read(M, K, a_stride[1], a_stride[0], a_based, size),
            tma_read(N, K, b_stride[0], b_stride[1], b_based, size), pad)


def _reading(a, b):
    """``_orientation`` of a [.., M, K] and b [.., K, N] (2-D, or 3-D for bmm). A batched operand
    must also be dense across the batch (batch stride = one matrix, as the kernel's 3-D TMA box
    walks it): with any other batch stride, a broadcast one included, it is copied."""
    (M, K), N = a.shape[-2:], b.shape[-1]
    a_how, b_how, pad = _orientation(M, K, N, a.stride()[-2:], b.stride()[-2:], a.data_ptr() % _TMA_ALIGN == 0,
                                     b.data_ptr() % _TMA_ALIGN == 0, a.element_size())
    if a.dim() == 3 and a.shape[0] > 1 and a.stride(0) != M * K:
        a_how = "copy"
    if b.dim() == 3 and b.shape[0] > 1 and b.stride(0) != K * N:
        b_how = "copy"
    return a_how, b_how, pad


def _oriented(a, b, a_how, b_how, pad):
    """A [.., M, K] and B [.., K, N] as the kernel takes them (kernels._operand_params: the
    logical orientation, with the strides of the stored one) for the reading ``_orientation``
    chose: a read operand as it is, a copied one as the K-major copy's transposing view, K
    zero-padded by ``pad``."""
    A = a if a_how != "copy" else _k_major_copy(a, pad)
    B = b if b_how != "copy" else _k_major_copy(b.mT, pad).mT
    # a copy is padded already, and an operand read K-major has no padding (its rows of K are 16-byte
    # multiples); MN-major ones are padded unless both are: then K is the outer dimension of both
    if pad and (a_how, b_how) != ("MN", "MN"):
        if a_how == "MN":
            A = torch.nn.functional.pad(A.mT, (0, 0, 0, pad)).mT
        if b_how == "MN":
            B = torch.nn.functional.pad(B, (0, 0, 0, pad))
    return A, B


def _empty_k(target, bias):
    """The result of a product with K = 0 (no launch): zeros, plus the bias row when given."""
    return target.zero_() if bias is None else target.copy_(bias.expand(target.shape))


@functools.lru_cache(maxsize=None)
def _placeholder(device) -> torch.Tensor:
    """The one-element float32 tensor passed for an unused scale/bias argument."""
    return torch.ones(1, dtype=torch.float32, device=device)


def shared_memory_bytes(schedule: Schedule, a_dtype, b_dtype, out_dtype) -> int:
    """Shared memory of a kernel (operand ring, output staging tile, barrier reserve):
    tlgemm.schedules.shared_memory_bytes for these torch dtypes."""
    return schedules.shared_memory_bytes(schedule, tuple(str(d).removeprefix("torch.")
                                                         for d in (a_dtype, b_dtype, out_dtype)))


def read_once(M: int, N: int, schedule: Schedule) -> tuple[bool, bool]:
    """Whether the grid of a kernel computing C [M, N] = A · B reads each byte of A, and of B,
    once: each tile column reads A's rows again and each tile row B's columns, so A is read
    once when N fits one tile (N <= block_n) and B when M does (M <= block_m). Such an
    operand's loads carry the L2 evict_first hint (``stages.InputView``)."""
    return N <= schedule.block_n, M <= schedule.block_m


def operands_read_once(M: int, N: int, schedule: Schedule) -> tuple[bool, bool]:
    """``read_once`` in a call's names: (a, b) of C [M, N] = a · b (the block-scaled GEMM's
    tokens and weights). Under swap-AB the kernel computes Cᵀ = bᵀ · aᵀ, b being its A."""
    if schedule.is_swap_ab:
        return read_once(N, M, schedule)[::-1]
    return read_once(M, N, schedule)


def make_spec(a_dtype, b_dtype, out_dtype, schedule, num_sms, *, a_major="K", b_major="K", scale_a=None,
              scale_b=None, bias_dtype=None, bias_per_row=False) -> KernelSpec:
    """The KernelSpec of a problem (torch dtypes; scale_a None/"tensor"/"row", scale_b
    None/"tensor"/"col"). A swap-AB schedule is launched as its plain form on the swapped
    problem (see ``matmul``), so the spec is that of ``schedule.swap_ab(False)``."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    a_major, b_major = _major("a_major", a_major), _major("b_major", b_major)
    for name, mode, per_line in (("scale_a", scale_a, "row"), ("scale_b", scale_b, "col")):
        if mode not in (None, "tensor", per_line):
            raise ValueError(f"{name}: expected None, 'tensor' or {per_line!r}, got {mode!r}")
    if schedule.split_k > 1:
        raise ValueError("schedule: split_k > 1 is not implemented by the TileLang backend (use streamk_tiles)")
    if not schedule.has_pow2_block_n and b_major != "K":
        raise ValueError(f"schedule: block_n={schedule.block_n} is not a power of two, which the TileLang GEMM "
                         "kernels take only with B K-major (B [K, N] the transpose of a row-major [N, K]): the "
                         "128-byte swizzled TMA box of an N-major B spans a power-of-two number of columns")
    schedule = schedule.swap_ab(False)
    if schedule.num_xcds != 1:
        raise ValueError("schedule: num_xcds > 1 is the AMD chiplet transform; the TileLang backend targets Hopper")
    accum = "s32" if a_dtype == torch.int8 else "f32"
    return KernelSpec(_WGMMA_INPUT[a_dtype], _WGMMA_INPUT[b_dtype], accum, _STORAGE[out_dtype],
                      schedule, num_sms, a_major, b_major, scale_a, scale_b,
                      None if bias_dtype is None else _STORAGE[bias_dtype], bias_per_row and bias_dtype is not None)


def _major(name: str, value) -> str:
    """"K" or "MN" for an operand's ``Major`` (its names and aliases, macros.operands.Major.parse)."""
    try:
        return Major.parse(value).value
    except ValueError as err:
        raise ValueError(f"{name}: expected 'K' or 'MN', got {value!r}") from err


def _check_shared_memory(schedule: Schedule, a_dtype, b_dtype, out_dtype, smem_limit: int) -> None:
    need = shared_memory_bytes(schedule, a_dtype, b_dtype, out_dtype)
    if need > smem_limit:
        raise ValueError(f"schedule: needs {need} bytes of shared memory (num_stages={schedule.num_stages}, "
                         f"{schedule.block_m}x{schedule.block_n}x{schedule.block_k}), the device allows {smem_limit}")


@contextlib.contextmanager
def _lowering(schedule: Schedule):
    """A TileLang pass that cannot lower a kernel raises a TVMError from deep inside the
    compiler; it is raised again as a ``schedule:`` ValueError naming the schedule and the
    pass's own last line (the cause chained), which ``tlgemm.matmul`` answers, for a schedule
    select() chose, by launching the next candidate."""
    import tvm

    try:
        yield
    except tvm.error.TVMError as err:
        raise ValueError(f"schedule: TileLang cannot lower the kernel of {schedule}: {_tvm_reason(err)}") from err


def _tvm_reason(err: Exception) -> str:
    """The line of a TVM error that says why: its failed check, else its last line that is not
    a source excerpt's gutter or caret (TileLang 0.1.15 may end the message with `|   ^`)."""
    lines = [line.strip() for line in str(err).splitlines()]
    said = [line for line in lines if line and not set(line) <= set("|^~ 0123456789")]
    checks = [line for line in said if "Check failed" in line]
    return (checks or said or [type(err).__name__])[-1]


@functools.lru_cache(maxsize=None)
def _compiled(spec: KernelSpec):
    import tilelang

    with _lowering(spec.schedule):
        return tilelang.compile(build(spec), target="cuda", pass_configs=KERNEL_PASS_CONFIGS)


def _kernel_for(a_dtype, b_dtype, out_dtype, schedule, sms, smem_limit, a_major, b_major, scale_a, scale_b,
                bias_dtype, bias_per_row, once, batched=False, c_transposed=False):
    """The compiled kernel of a launch (``schedule`` without swap-AB; ``once``: ``read_once``
    of its problem; ``c_transposed``: see KernelSpec), after the shared-memory check
    (``_compiled`` caches per KernelSpec; ``_LAUNCHES`` spares a repeated call even this)."""
    _check_shared_memory(schedule, a_dtype, b_dtype, out_dtype, smem_limit)
    spec = make_spec(a_dtype, b_dtype, out_dtype, schedule, sms, a_major=a_major, b_major=b_major, scale_a=scale_a,
                     scale_b=scale_b, bias_dtype=bias_dtype, bias_per_row=bias_per_row)
    return _compiled(dataclasses.replace(spec, batched=batched, a_read_once=once[0], b_read_once=once[1],
                                         c_transposed=c_transposed))


def _prepare(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms, dtype_name="out_dtype"):
    """Validate a GEMM's arguments; ``dtype_name`` names where ``out_dtype`` came from (bmm
    passes its out's dtype as "out")."""
    _check_tensor("a", a, 2)
    _check_tensor("b", b, 2)
    check_num_sms(num_sms)
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in _WGMMA_INPUT:
            raise TypeError(f"{name}: dtype must be one of {[str(d) for d in _WGMMA_INPUT]}, got {t.dtype}")
    if a.dtype != b.dtype and not (a.dtype in _FP8 and b.dtype in _FP8):
        raise TypeError(f"a, b: dtypes must match (only fp8 e4m3fn/e5m2 may mix), got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a, b: inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    device = a.device
    if device.type != "cuda":
        raise ValueError(f"a: on {device}; the TileLang kernels need CUDA tensors")
    for name, t in (("b", b), ("out", out)):
        if t is not None and t.device != device:
            raise ValueError(f"{name}: on {t.device}, but a is on {device}; all tensors must share a device")
    (M, K), N = a.shape, b.shape[1]
    rows, cols = (N, M) if schedule.is_swap_ab else (M, N)
    check_int32_walk(schedule, rows, cols, K)
    if out is not None:
        _check_tensor("out", out, 2)
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out: expected shape {(M, N)}, got {tuple(out.shape)}")
        check_no_overlap("out", out)
        check_out_dtype(out, out_dtype)
    epilogue = scale_a is not None or scale_b is not None or bias is not None
    out_dtype = (output_dtype(a.dtype, out_dtype, epilogue, dtype_name) if out is None
                 else output_dtype(a.dtype, out.dtype, epilogue, "out"))
    modes, vectors = [None, None], [None, None, None]
    if scale_a is not None or scale_b is not None:
        ones = _placeholder(device)
        vectors[0] = vector("scale_a", ones if scale_a is None else scale_a, M, (torch.float32,), device,
                            per_row=True, scalar=True).contiguous()
        vectors[1] = vector("scale_b", ones if scale_b is None else scale_b, N, (torch.float32,), device,
                            scalar=True).contiguous()
        modes = ["row" if vectors[0].numel() == M and M > 1 else "tensor",
                 "col" if vectors[1].numel() == N and N > 1 else "tensor"]
    if bias is not None:
        vectors[2] = vector("bias", bias, N, _FLOAT_OUT, device).contiguous()
    device_sms, smem_limit = cuda_limits(device)
    sms = device_sms
    if not schedule.is_persistent:
        sms = _ONE_PROGRAM_PER_TILE
    elif schedule.num_sms is not None:
        sms = schedule.num_sms
    elif num_sms is not None:
        sms = num_sms
    _check_streamk_programs(schedule, sms, device_sms)
    return (M, N, K), out, out_dtype, modes, vectors, sms, smem_limit


def _check_streamk_programs(schedule: Schedule, programs: int, device_sms: int) -> None:
    """A Stream-K launch's programs must all be resident at once: a tile's owner waits for the
    partial results of later programs (``kernels._walk_streamk``), one program per SM."""
    if schedule.streamk_tiles and programs > device_sms:
        raise ValueError(f"num_sms: a Stream-K schedule runs {programs} programs, more than the device's "
                         f"{device_sms} SMs; each must be resident at once (a tile's owner waits for the others)")


def _entry(kernel):
    """The compiled kernel's TVM-FFI entry function: what TileLang's tvm_ffi adapter calls
    once it has walked the arguments (the compiled host code checks every tensor's shape,
    dtype and strides again); a cached launch calls it directly. A fresh compile holds a
    ``tvm.runtime.Executable`` (jitted on first use), a kernel from TileLang's disk cache the
    loaded ``tvm.runtime.Module``."""
    from tilelang import tvm

    executable = kernel.adapter.get_exportable_executable()
    module = executable.jit() if isinstance(executable, tvm.runtime.Executable) else executable
    return module.main


def _new_streamk_workspace(device, programs: int, block_m: int, block_n: int, dtype):
    return (torch.empty((programs, block_m, block_n), dtype=dtype, device=device),
            torch.zeros(programs, dtype=torch.int32, device=device))


def _streamk_workspace(device, programs: int, block_m: int, block_n: int, dtype):
    """(partials, flags) of a Stream-K launch on ``device``'s current stream
    (``tlgemm._checks.stream_workspace``): flags zeroed once; the kernel sets each flag it
    consumes back to 0 (kernels.streamk_gemm), so the next launch finds them zero."""
    return stream_workspace(device, ("tilelang", programs, block_m, block_n, dtype), _new_streamk_workspace,
                            device, programs, block_m, block_n, dtype)


class _Launch:
    """What a launch derives from its arguments' shapes, strides, dtypes, devices and 16-byte
    base alignment (the key of ``_LAUNCHES``): the kernel's entry function, the operand
    orientation, swap-AB, whether the kernel stores C transposed and whether C needs a
    temporary, whether the kernel takes scale and bias vectors, the Stream-K workspace.
    Calling it allocates the output when none is given, views or copies the operands as
    decided, and launches: a repeated call validates and derives nothing again."""

    __slots__ = ("entry", "shape", "out_dtype", "swap", "transposed", "a_how", "b_how", "pad", "direct",
                 "c_shape", "epilogue", "placeholder", "workspace")

    def __init__(self, entry, shape, out_dtype, swap, transposed, orientation, direct, c_shape, epilogue,
                 placeholder, workspace):
        self.entry, self.shape, self.out_dtype = entry, shape, out_dtype
        self.swap, self.transposed = swap, transposed
        self.a_how, self.b_how, self.pad = orientation
        self.direct, self.c_shape, self.epilogue = direct, c_shape, epilogue
        self.placeholder, self.workspace = placeholder, workspace

    def __call__(self, a, b, out, scale_a, scale_b, bias):
        target = out if out is not None else torch.empty(size=self.shape, dtype=self.out_dtype, device=a.device)
        view = target
        if self.swap:
            a, b, scale_a, scale_b = b.mT, a.mT, scale_b, scale_a
            if not self.transposed:
                view = target.mT
        A, B = _oriented(a, b, self.a_how, self.b_how, self.pad)
        C = view if self.direct else torch.empty(size=self.c_shape, dtype=self.out_dtype, device=a.device)
        if self.epilogue:
            ones = self.placeholder
            vectors = (ones if v is None else v.reshape(-1).contiguous() for v in (scale_a, scale_b, bias))
            if self.workspace is None:
                self.entry(A, B, C, *vectors)
            else:
                self.entry(A, B, C, *vectors, *_streamk_workspace(a.device, *self.workspace))
        else:
            self.entry(A, B, C)
        if not self.direct:
            view.copy_(C[:, :view.shape[1]])
        return target


#: Cached launches (``_Launch``) per call signature (bounded: ``tlgemm._checks.remember``).
_LAUNCHES: dict[tuple, _Launch] = {}


def _launch_key(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms):
    """The ``_LAUNCHES`` key of a call (AttributeError for a non-tensor argument); num_sms's type
    is in it, so that 2.0 or True, which hash as 2 and 1, are not taken for a checked int."""
    return (schedule, out_dtype, type(num_sms), num_sms, signature(a), signature(b), signature(out),
            signature(scale_a), signature(scale_b), signature(bias))


def _cached(*args) -> tuple:
    """(key, cached launch or None) of ``_launch_key(*args)``; key None when an argument is
    not a tensor or not hashable (``_prepare`` then names it)."""
    try:
        key = _launch_key(*args)
        return key, _LAUNCHES.get(key)
    except (AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse tensor's strides or pointer
        return None, None


def _launch(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms):
    check_out_reads(out, (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias)))
    key, launch = _cached(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms)
    if launch is None:
        launch = _new_launch(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms)
        if not isinstance(launch, _Launch):  # an empty problem's result
            return launch
        if key is not None:
            remember(_LAUNCHES, key, launch)
    return launch(a, b, out, scale_a, scale_b, bias)


def cached_launch(a, b, schedule, out):
    """The launch that ``matmul(a, b, schedule, out=out)`` (no scales, bias or num_sms) ran,
    once a call with these argument signatures has run, else None. Called as
    ``launch(a2, b2, out2)`` with tensors of the same signatures it repeats that call without
    validating again (tlgemm.matmul does so); ``out2=None`` allocates the output, which serves
    exactly when ``out`` was a fresh ``torch.empty`` of the result."""
    launch = _cached(a, b, schedule, out, None, None, None, None, None)[1]
    if launch is None:
        return None
    if launch.swap or launch.epilogue or launch.pad or not launch.direct or "copy" in (launch.a_how, launch.b_how):
        return lambda a, b, out: launch(a, b, out, None, None, None)
    return _plain_launch(launch.entry, launch.shape, launch.out_dtype, a.device)


def _plain_launch(entry, shape, out_dtype, device):
    """A repeat of a launch that only reads its operands as they are (``_Launch`` with no
    swap, copy, padding, epilogue or temporary C) as one closure over its constants: the
    fewest Python steps between tlgemm.matmul and the kernel's entry, which takes a and b
    as given (kernels._operand_params)."""
    def launch(a, b, out):
        target = torch.empty(size=shape, dtype=out_dtype, device=device) if out is None else out
        entry(a, b, target)
        return target
    return launch


def _output_route(M, N, swap, out, step):
    """(transposed, direct) for the kernel's problem [M, N] (under swap-AB Cᵀ, ``out`` [N, M]
    or None for a fresh row-major one): a swap-AB kernel stores its tiles transposed into C
    unless ``out.T`` is itself a TMA target (a column-major ``out``, or a fresh one of one
    column, whose transpose is one dense row); C is written directly when the buffer it
    writes is dense, 16-byte aligned and has rows of a multiple of ``step`` elements (16
    bytes, cuTensorMapEncodeTiled), else through a temporary."""
    def tma_target(t, cols):  # None: a fresh dense allocation
        return cols % step == 0 and (t is None or (t.is_contiguous() and t.data_ptr() % _TMA_ALIGN == 0))

    plain_target = None if out is None else out.t() if swap else out
    transposed = swap and not (tma_target(plain_target, N) and (out is not None or M == 1))
    direct = tma_target(out, M) if transposed else tma_target(plain_target, N)
    return transposed, direct


def _new_launch(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms):
    """Validate a call and derive its ``_Launch``; for an empty problem (M, N or K = 0), its result."""
    (M, N, K), out, out_dtype, modes, vectors, sms, smem_limit = _prepare(
        a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms)
    device = a.device
    if not (M and N and K):
        target = out if out is not None else torch.empty((M, N), dtype=out_dtype, device=device)
        if M == 0 or N == 0:
            return target
        return _empty_k(target, vectors[2])
    swap = schedule.is_swap_ab
    if swap:
        a, b, M, N = b.t(), a.t(), N, M
        modes = [{"col": "row"}.get(modes[1], modes[1]), {"row": "col"}.get(modes[0], modes[0])]
        schedule = schedule.swap_ab(False)
    orientation = _reading(a, b)
    a_major, b_major = ("MN" if how == "MN" else "K" for how in orientation[:2])
    step = _TMA_ALIGN // out_dtype.itemsize
    transposed, direct = _output_route(M, N, swap, out, step)
    size = out_dtype.itemsize
    c_shape = (N, padded(M, size)) if transposed else (M, padded(N, size))
    _check_allocations(out, (N, M) if swap else (M, N), None if direct else c_shape)
    if schedule.streamk_tiles:
        check_streamk_workspace(sms, 1, schedule.block_m, schedule.block_n)
    kernel = _kernel_for(a.dtype, b.dtype, out_dtype, schedule, sms, smem_limit, a_major, b_major, modes[0], modes[1],
                         None if vectors[2] is None else vectors[2].dtype, swap, read_once(M, N, schedule),
                         c_transposed=transposed)
    workspace = None
    if schedule.streamk_tiles:
        workspace = (sms, schedule.block_m, schedule.block_n, torch.int32 if a.dtype == torch.int8 else torch.float32)
    # persistent_gemm without scales and bias takes A, B, C only; streamk_gemm always all
    epilogue = modes[0] is not None or vectors[2] is not None or workspace is not None
    return _Launch(_entry(kernel), (N, M) if swap else (M, N), out_dtype, swap, transposed, orientation, direct,
                   c_shape, epilogue, _placeholder(device), workspace)


def persistent_matmul(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None,
                      num_sms=None):
    """C = (scale_a · A @ B · scale_b) + bias with the persistent warp-specialised kernel."""
    if isinstance(schedule, Schedule) and schedule.streamk_tiles:
        raise ValueError("schedule: streamk_tiles > 0 needs streamk_matmul (or matmul)")
    return _launch(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms)


def streamk_matmul(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None,
                   num_sms=None):
    """Like ``persistent_matmul`` with the Stream-K kernel (schedule.streamk_tiles > 0)."""
    if isinstance(schedule, Schedule) and not schedule.streamk_tiles:
        raise ValueError("schedule: streamk_matmul needs streamk_tiles > 0 (see Schedule.streamk)")
    if isinstance(schedule, Schedule) and not schedule.is_persistent:
        raise ValueError("schedule: Stream-K needs a persistent schedule")
    return _launch(a, b, schedule, out, out_dtype, scale_a, scale_b, bias, num_sms)


def matmul(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None, num_sms=None):
    """``streamk_matmul`` when schedule.streamk_tiles > 0, else ``persistent_matmul``."""
    launcher = streamk_matmul if isinstance(schedule, Schedule) and schedule.streamk_tiles else persistent_matmul
    return launcher(a, b, schedule, out=out, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, bias=bias,
                    num_sms=num_sms)


def check_bmm_schedule(schedule: Schedule) -> None:
    """The batched kernel's rule for a schedule (it needs no sizes or GPU: the API checks it for
    an empty bmm too)."""
    if schedule.streamk_tiles or schedule.is_swap_ab or schedule.cluster_m > 1 or not schedule.has_pow2_block_n:
        raise ValueError("schedule: bmm runs the persistent kernel (no Stream-K, swap-AB or clusters; block_n a "
                         "power of two)")


def bmm(a, b, schedule, *, out=None, out_dtype=None, scale_a=None, scale_b=None, bias=None, num_sms=None):
    """C[i] = (scale_a · A[i] @ B[i] · scale_b) + bias for a [B, M, K], b [B, K, N]; one
    persistent launch over all B · tiles tiles (no Stream-K, no swap-AB); scale_a, scale_b
    and bias are shared by every batch. Dtype and orientation rules as ``matmul`` (the
    module's copy rule, per matrix), and each operand must also be dense across the batch
    (batch stride = one matrix, as TMA's 3-D box walks it): any other batch stride, a
    broadcast (stride 0) one included, is copied once. Returns ``out`` [B, M, N]."""
    if isinstance(schedule, Schedule):
        check_bmm_schedule(schedule)
    check_out_reads(out, (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias)))
    _check_tensor("a", a, 3)
    _check_tensor("b", b, 3)
    batch = a.shape[0]
    if b.shape[0] != batch:
        raise ValueError(f"a, b: batch sizes differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if a.shape[2] != b.shape[1]:
        raise ValueError(f"a, b: inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if out is not None:
        _check_tensor("out", out, 3)
        check_out_dtype(out, out_dtype)
    (M, N, K), _, out_dtype, modes, vectors, sms, smem_limit = _prepare(
        a[0] if batch else a.new_empty(a.shape[1:]), b[0] if batch else b.new_empty(b.shape[1:]), schedule, None,
        out.dtype if out is not None else out_dtype, scale_a, scale_b, bias, num_sms,
        "out" if out is not None else "out_dtype")
    device = a.device
    if out is not None:
        if out.device != device:
            raise ValueError(f"out: on {out.device}, but a is on {device}; all tensors must share a device")
        if tuple(out.shape) != (batch, M, N):
            raise ValueError(f"out: expected shape {(batch, M, N)}, got {tuple(out.shape)}")
        check_no_overlap("out", out)
    step = _TMA_ALIGN // out_dtype.itemsize
    direct = (N % step == 0 and (out is None or (out.is_contiguous() and out.data_ptr() % _TMA_ALIGN == 0)))
    if batch and M and N and K:  # an empty problem launches nothing (below)
        _check_allocations(out, (batch, M, N), None if direct else (batch, M, padded(N, out_dtype.itemsize)))
    target = out if out is not None else torch.empty((batch, M, N), dtype=out_dtype, device=device)
    if not (batch and M and N):
        return target
    if not K:
        return _empty_k(target, vectors[2])
    a_how, b_how, pad = _reading(a, b)
    A, B = _oriented(a, b, a_how, b_how, pad)
    kernel = _kernel_for(a.dtype, b.dtype, out_dtype, schedule, sms, smem_limit,
                         "MN" if a_how == "MN" else "K", "MN" if b_how == "MN" else "K", modes[0], modes[1],
                         None if vectors[2] is None else vectors[2].dtype, False, read_once(M, N, schedule),
                         batched=True)
    C = target if direct else torch.empty((batch, M, padded(N, out_dtype.itemsize)), dtype=out_dtype, device=device)
    if modes[0] is not None or vectors[2] is not None:
        ones = _placeholder(device)
        kernel(A, B, C, *(ones if v is None else v for v in vectors))
    else:
        kernel(A, B, C)
    if not direct:
        target.copy_(C[..., :N])
    return target


def kernel_source(M, N, K, a_dtype, b_dtype, out_dtype, schedule, *, a_major="K", b_major="K", scale_a=None,
                  scale_b=None, bias=False, emit="cuda", num_sms=132, smem_limit=232448, batched=False):
    """The kernel that ``matmul`` (``bmm`` with ``batched``) would run for this configuration
    with a fresh output (``_output_route``: under swap-AB, C's tiles stored transposed), as
    TileLang TIR (``emit="tir"``) or CUDA source for sm_90a (``emit="cuda"``); needs no GPU.
    Dtypes are torch dtypes; majors and scale modes are the call's (a swap-AB schedule swaps
    them, as the launcher does); ``bias`` True adds a bias of ``out_dtype``. ``num_sms`` and
    ``smem_limit`` stand for the device's (H100: 132 SMs, 232448 bytes per block): the
    launcher's checks run against them."""
    for name, value in (("M", M), ("N", N), ("K", K)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if emit not in ("tir", "cuda"):
        raise ValueError(f"emit: expected 'tir' or 'cuda' (ptx/sass need the GPU machine's nvcc), got {emit!r}")
    check_num_sms(num_sms, optional=False)
    for name, dt in (("a_dtype", a_dtype), ("b_dtype", b_dtype)):
        if dt not in _WGMMA_INPUT:
            raise TypeError(f"{name}: must be one of {[str(d) for d in _WGMMA_INPUT]}, got {dt}")
    out_dtype = output_dtype(a_dtype, out_dtype, scale_a is not None or scale_b is not None or bias)
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    sms = num_sms
    if not schedule.is_persistent:
        sms = _ONE_PROGRAM_PER_TILE
    elif schedule.num_sms is not None:
        sms = schedule.num_sms
    _check_streamk_programs(schedule, sms, num_sms)
    if batched:
        check_bmm_schedule(schedule)
    rows, cols, swap = M, N, schedule.is_swap_ab
    if swap:  # launched as the plain schedule on Cᵀ = Bᵀ·Aᵀ, as ``_new_launch`` does
        rows, cols, a_dtype, b_dtype = N, M, b_dtype, a_dtype
        a_major, b_major = _major("b_major", b_major), _major("a_major", a_major)
        scale_a, scale_b = {"col": "row"}.get(scale_b, scale_b), {"row": "col"}.get(scale_a, scale_a)
        schedule = schedule.swap_ab(False)
    check_int32_walk(schedule, rows, cols, K)
    _check_shared_memory(schedule, a_dtype, b_dtype, out_dtype, smem_limit)
    spec = make_spec(a_dtype, b_dtype, out_dtype, schedule, sms, a_major=a_major, b_major=b_major,
                     scale_a=scale_a, scale_b=scale_b, bias_dtype=out_dtype if bias else None, bias_per_row=swap)
    a_once, b_once = read_once(rows, cols, schedule)
    transposed, _ = _output_route(rows, cols, swap, None, _TMA_ALIGN // out_dtype.itemsize)
    spec = dataclasses.replace(spec, a_read_once=a_once, b_read_once=b_once, c_transposed=transposed)
    if batched:
        spec = dataclasses.replace(spec, batched=True)
    func = build(spec)
    if emit == "tir":
        return func.script()
    with _lowering(schedule):
        return lower_to_cuda(func, KERNEL_PASS_CONFIGS)


@functools.lru_cache(maxsize=None)
def _compiled_trace(schedule, num_sms, max_items):
    import tilelang

    return tilelang.compile(schedule_trace_kernel(schedule, num_sms, max_items), target="cuda",
                            pass_configs=PASS_CONFIGS)


def schedule_trace(M, N, K, schedule, *, num_sms=None, device="cuda"):
    """For each launch program p, the WorkItems the TileLang kernels' ScheduleContext walks, in
    order (to compare with tlgemm.schedules.work(p, ...) and the Triton trace)."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    make_spec(torch.bfloat16, torch.bfloat16, torch.bfloat16, schedule, 1)
    device = torch.device(device)
    if schedule.is_persistent and schedule.num_sms is None and num_sms is None:
        num_sms = cuda_limits(device)[0]
    P = num_programs(M, N, K, schedule, num_sms)
    max_items = num_tiles(M, N, schedule) + 1
    trace = torch.full((P, max_items, 4), -1, dtype=torch.int32, device=device)
    counts = torch.full((P,), -1, dtype=torch.int32, device=device)
    _compiled_trace(schedule, P, max_items)(trace, counts, M, N, K)
    trace, counts = trace.cpu().tolist(), counts.cpu().tolist()
    if not all(0 <= c <= max_items for c in counts):
        raise RuntimeError(f"schedule_trace: item counts {counts} outside [0, {max_items}]")
    return [[WorkItem(*item) for item in trace[p][:counts[p]]] for p in range(P)]


@functools.lru_cache(maxsize=4096)
def _blockscaled_smem(schedule: Schedule, a_dtype, b_dtype, out_dtype) -> int:
    """The GEMM's shared memory, with the block-scaled epilogue's staging
    (``BlockScaledContext.store_staging_of``), plus the staged scales (float32, in a ring of
    ``BlockScaledContext.scale_ring_of`` slots, each with the K-iteration's scale blocks: one per
    token of the tile and one per 128-block of weight rows it touches), plus a split-K tile's
    ``split_k - 1`` received float32 parts (``kernels._walk_split``)."""
    from .stages import BlockScaledContext

    chunk, buffers = schedules.store_staging(schedule.block_n)
    own_chunk, own_buffers = BlockScaledContext.store_staging_of(schedule)
    staging_saved = (chunk * buffers - own_chunk * own_buffers) * schedule.block_m * out_dtype.itemsize
    return (shared_memory_bytes(schedule, a_dtype, b_dtype, out_dtype) - staging_saved
            + BlockScaledContext.scale_ring_of(schedule) * BlockScaledContext.sub_blocks_of(schedule)
            * sum(BlockScaledContext.scale_widths_of(schedule)) * 4
            + (schedule.split_k - 1) * schedule.block_m * schedule.block_n * 4)


#: Below this fraction of the SMs busy in the last wave, the block-scaled default halves block_n.
_FILL_FLOOR = 0.75
#: Up to this M the block-scaled default runs swap-AB (tokens on WGMMA's N side).
_SWAP_AB_MAX_M = 32
#: Up to this M, 128-row tiles only while they alone make this many waves.
_SMALL_M, _WIDE_WAVES = 128, 1.5
#: Above this M (up to ``_SMALL_M``) a 64x128 default becomes 128x64, both on one consumer
#: warpgroup: as many tiles, but one tile row, so the weights are read once (with the L2
#: evict_first hint, ``read_once``) instead of by two tiles. On the H100 by kernel time at M = 128:
#: 1.11x at 7168x16384, 1.06x at 24576x1536, 1.02x at 7168x2048; at M = 96 0.97x, 1.05x and 1.00x
#: (benchmarks/results/blockscaled_small_m.md).
_ONE_ROW_MIN_M = 96
#: Stages of the default's 128-row tiles: 4 beat 5 (by 0-7%) on all six M = 4096 shapes on the H100
#: once a slot is released before its promotion (benchmarks/results/blockscaled_tiles.md).
_WIDE_STAGES = 4
#: The widest tile (its temporary in two parts, ``BlockScaledContext.fragments_of``) and the
#: least K it is the default for: on the H100 at M = 4096 on DeepGEMM's shapes, 128x256 beat
#: 128x128 by 8-11% at 24576x1536, 4096x7168 and 7168x2048, was level at 7168x16384 (0.99x in
#: the sweep, 1.12x in a probe the same day), lost 3% at K = 512 (4 K blocks a tile, the
#: epilogue's share larger) and 4% at N = 2112 (benchmarks/results/blockscaled_tiles.md).
_WIDEST_N, _WIDEST_MIN_K = 256, 1024
#: The K range (inclusive) where the default takes 256x128 tiles in row waves
#: (``BlockScaledContext.waves_of``) with raster "n", where N is a multiple of 128, the tiles make
#: at least one wave and M pads no more than with 128-row tiles: on the H100 by kernel time, at
#: M = 2048, 4096, 8192 and N x K = 4096x1536, 24576x1536, 16384x1024, 32768x512, 1.01-1.11x the
#: former default (128x256, or 128x128 at K = 512; geomean 1.047); with 3 stages at K = 2048
#: 0.97-0.99x, at K >= 7168 0.78-0.91x; with raster "m" 0.97-1.02x; at M = 256..1024
#: 0.98-1.10x (geomean 1.033) (benchmarks/results/blockscaled_tiles.md). Up to ``_WAVES_SHALLOW_MAX_K`` they run 3 stages in
#: raster groups of 8 (the epilogue staged in two 64-column buffers); above it 4 stages in groups of
#: 16, the epilogue staged in one buffer (``BlockScaledContext.wave_store_chunk``) so that the fourth
#: stage fits: against the former default (128x256) at M = 512..8192, K = 2048..7168, 1.002-1.028x
#: on 18 of 21 shapes, 0.985-0.997x on three (M = 1024 and 2048 at 7168x7168, 1024x16384x4096); at
#: K <= 1536 the deeper ring measured 0.92-1.03x and is not taken ("Four stages for the row waves").
_WAVES_K = (512, 7168)
_WAVES_SHALLOW_MAX_K = 1536
#: The default takes 128x128 tiles (two warpgroups, one temporary) instead of the 256x128 row
#: waves or 128x256 where K is at least ``_NARROW_MIN_K``, 128x128's last wave is at least
#: ``_FILL_FLOOR`` full and fill(128x128) times ``_NARROW_PER_FLOP`` exceeds the wider tile's fill
#: (fill: the share of the waves' SM slots that hold a tile). On the H100 by kernel time, at 14
#: shapes (M = 256..3584, K = 2048..16384) where fill(128x128) is 1.33x the wider tile's, 128x128
#: ran 1.05-1.15x it; where it is 1.20x, 0.97-1.02x; 128x128 runs about 0.8x the wider tiles per
#: FLOP where both fill their waves (benchmarks/results/blockscaled_tiles.md, "One temporary on
#: two warpgroups").
_NARROW_PER_FLOP, _NARROW_MIN_K = 0.8, 2048
#: Widths above 128 whose result and one temporary fit ``fragment_registers`` on 64 rows a
#: warpgroup (multiples of 16 up to 192) that the default takes with 128-row tiles, N no
#: multiple of 128 and K >= ``_WIDEST_MIN_K``: of those dividing N whose last wave is fuller than
#: with 128 columns, one whose promotion branches on the tile's offset
#: (``BlockScaledContext.promotes_by_offset``: 160, 192) before one that selects its scales per
#: column group (144, 176), then the fullest last wave. On the H100 at 4096x2112x7168 (128x128:
#: 4.12 waves), 128x176 (12 tiles across N, 2.91 waves) measured 1.08x 128x128 and 128x192
#: 1.05x, once the promotion read its staged scales from registers; with the branches, 128x192
#: (2.67 waves) measured 1.13x 128x176 (H200); on shapes where 128 and 256 columns fill as
#: well, 160 to 192 ran at 0.74-0.95x the default (benchmarks/results/blockscaled_tiles.md).
_EXACT_N = (144, 160, 176, 192)
#: Stream-K over all tiles (swap-AB's, or 64x64) while K is at least ``_STREAMK_MIN_K`` and 64x64
#: tiles would fill at most ``_STREAMK_FILL`` of the SMs, where the tiles take one scale block a
#: K-iteration (swap-AB at M <= 32, or K no multiple of 256). On the H100 at N = 2112, K = 7168 1.25x
#: (M = 16), 1.15x (M = 64) and 1.20x (M = 128) the whole-tile default; 0.59-0.98x where more tiles
#: fill the SMs (benchmarks/results/blockscaled_streamk.md). Tiles with two scale blocks a
#: K-iteration take ``_split_deep_k``'s rule instead.
_STREAMK_FILL, _STREAMK_MIN_K = 0.5, 1024
#: Stages of the default's tiles at M <= ``_SMALL_M`` on one consumer warpgroup where they take two
#: scale blocks per K-iteration (block_k 256, ``BlockScaledContext.sub_blocks_of``; K a multiple of
#: 256): a K-iteration costs about the same however deep at these shapes (its barrier waits, the
#: producer's issue), so half as many halve that cost. By kernel time on the H100 on inputs made
#: afresh, against the same tile at block_k 128: 1.26x at 128x4096x7168 (64x64), 1.11x at
#: 64x7168x2048 (64x64), 1.03x at 128x7168x2048 (128x64), level at 64x7168x16384 and 64x24576x1536
#: (benchmarks/results/blockscaled_small_m.md, "The consumer's tail at block_k 256"). As many of 8
#: stages as fit (64x64: 6, 128x64: 4): 64x32 tiles with 8 ran 1.04-1.07x those with 6 at
#: 128x2112x7168, 64x4096x7168 and 96x2112x7168 ("Deeper rings and split tiles at block_k 256").
#: 64x128 tiles (at M <= 96 and at 64x32768x512) were not measured with two scale blocks, so the
#: widest tile that takes them is 64 columns wide.
_DEEP_K_STAGES, _DEEP_K_MAX_N = 8, 64
#: ``_split_deep_k``: the split tile's width, its parts (a cluster of that many CTAs, each one
#: equal part of the tile's K-iterations), and the K-iterations a CTA must save against the whole
#: tiles' waves. On the H100 by kernel time on inputs made afresh, the parts added in shared memory
#: (``kernels._walk_split``): saving 14 K-iterations (K = 7168) ran 1.19-1.26x the best whole tiles
#: at 64x2112, 128x1024 and 64x1536, saving 32 (K = 16384) 1.28-1.52x; saving 8 (64x2048x4096)
#: 1.08x fresh but 0.89x after the memset, saving 4 (K = 2048) 0.85x. Four parts ran 1.46x the
#: whole tiles at 64x768x7168 (24 clusters) but 0.68x their own Stream-K form at 64x1024x7168 (32
#: clusters of 4 did not all fit at once) and 0.34x the whole tiles at 64x2112x2048 (two waves of
#: clusters), so the default splits in two. Through the Stream-K workspace (global memory, a flag
#: spin) the same two-part splits ran 0.87-0.95x (blockscaled_small_m.md, "Split-K in a cluster").
_SPLIT_N, _SPLIT_PARTS, _SPLIT_MIN_SAVED = 32, 2, 12
#: The most CTAs of a split-K tile: one cluster holds them, and 8 is the portable cluster size
#: (CUDA C++ Programming Guide, "Thread Block Clusters").
_MAX_SPLITS = 8


@functools.lru_cache(maxsize=4096)
def default_blockscaled_schedule(M: int, out_dtype=torch.bfloat16, smem_limit: int = 232448, *, N: int | None = None,
                                 num_sms: int = 132, batch: int = 1, K: int | None = None,
                                 batched: bool = False) -> Schedule:
    """The block-scaled kernel's schedule, from benchmarks/results/blockscaled_small_m.md and
    blockscaled_tiles.md (H100): for M <= ``_SWAP_AB_MAX_M`` swap-AB on 64 rows of N by 16 or
    32 tokens; for M <= ``_SMALL_M`` 64-row tiles on one consumer warpgroup unless 128-row
    tiles alone make ``_WIDE_WAVES`` waves (64x128 becoming 128x64, one tile row, above
    ``_ONE_ROW_MIN_M``); else 128-row tiles on two (one temporary,
    ``BlockScaledContext.fragments_of``), ``_WIDE_STAGES`` stages, or
    when N and K are given, 256x128 tiles in row waves with raster "n" where K is in
    ``_WAVES_K`` (3 stages, or 4 above ``_WAVES_SHALLOW_MAX_K``) and fit ``smem_limit`` with
    this output (a float32 output's staging leaves no room for them), else 128x``_WIDEST_N`` tiles
    where they make at least one wave, pad N no more than 128-column tiles do and K is at least
    ``_WIDEST_MIN_K``; neither where 128x128 fills its waves so much better that it is faster
    (``_NARROW_PER_FLOP``); else, where N is
    no multiple of 128, a width of ``_EXACT_N`` that divides it and fills the last wave
    better (K as large). A single GEMM
    whose tiles would leave the SMs idle (N and K given, K at least ``_STREAMK_MIN_K``, 64x64
    tiles filling at most ``_STREAMK_FILL`` of the SMs) runs Stream-K over all its tiles:
    swap-AB's for M <= ``_SWAP_AB_MAX_M``, else 64x64 on one warpgroup, where its tiles take
    one scale block a K-iteration.
    block_k is the 128-deep scale block, or two of them (``_DEEP_K_STAGES`` stages, as many as
    fit) for tiles on one consumer warpgroup at M <= ``_SMALL_M``, at most ``_DEEP_K_MAX_N`` wide
    (so they hold two whole-tile temporaries, ``BlockScaledContext.sub_blocks_of``), not swap-AB,
    K a multiple of 256; those become split tiles where ``_split_deep_k`` says (N and K given,
    K at least ``_STREAMK_MIN_K``). Without swap-AB block_n is 128,
    halved (down to 16) while fewer than ``_FILL_FLOOR`` of the ``num_sms`` · waves slots hold a
    tile and halving fills more, when N is given (small M: N / 128 tiles would leave most SMs
    idle). As many stages (at most 8,
    or ``_WIDE_STAGES``) as ``smem_limit`` (sm_90: 227 KiB) holds with this output. Other
    multiples of 16 than these run too (a schedule may name one) but measured slower on
    DeepGEMM's shapes.
    ``batched``: for the batched kernel (``blockscaled_bmm``, a batch of one included), which
    runs neither Stream-K nor split-K: those rules, and block_k 256, apply to a single GEMM only.
    Cached: it builds several Schedules (about 0.1 ms of host time uncached)."""
    known = N is not None and M > 0 and N > 0 and batch > 0
    fp8 = torch.float8_e4m3fn

    def tiles(block_m: int, block_n: int) -> int:
        return batch * -(-M // block_m) * -(-N // block_n)

    def fill(block_m: int, block_n: int) -> float:
        count = tiles(block_m, block_n)
        return count / (-(-count // num_sms) * num_sms)

    single = batch == 1 and not batched  # the single-GEMM kernel, which alone runs Stream-K and split-K
    deep_k = single and K is not None and K % (2 * _SCALE_BLOCK) == 0  # two scale blocks fit a K-iteration
    streamk = (known and single and K is not None and K >= _STREAMK_MIN_K
               and not (M > _SWAP_AB_MAX_M and deep_k) and tiles(64, 64) <= _STREAMK_FILL * num_sms)
    if M <= _SWAP_AB_MAX_M:
        s = Schedule(block_m=64, block_n=16 if M <= 16 else 32, block_k=_SCALE_BLOCK, num_stages=8,
                     num_warpgroups=1).persistent().swap_ab()
        if streamk:
            s = s.streamk(-(-N // 64))
    elif streamk:
        s = Schedule(block_m=64, block_n=64, block_k=_SCALE_BLOCK, num_stages=8,
                     num_warpgroups=1).persistent().streamk(tiles(64, 64))
    else:
        narrow = M <= 64 or (M <= _SMALL_M and known and tiles(128, 128) < _WIDE_WAVES * num_sms)
        block_m, warpgroups = (64, 1) if narrow else (128, 2)
        block_n, raster, group = 128, "m", Schedule.group_size_m
        stages = _WIDE_STAGES if warpgroups == 2 else 8
        wave_stages, wave_group = (3, 8) if K is not None and K <= _WAVES_SHALLOW_MAX_K else (_WIDE_STAGES, 16)

        def narrower_fills(block_m: int, block_n: int) -> bool:
            narrow_fill = fill(128, 128)
            return K >= _NARROW_MIN_K and narrow_fill >= _FILL_FLOOR and narrow_fill * _NARROW_PER_FLOP > fill(
                block_m, block_n)

        waves = (known and not narrow and K is not None and _WAVES_K[0] <= K <= _WAVES_K[1] and N % 128 == 0
                 and tiles(256, 128) >= num_sms and -(-M // 256) * 2 <= -(-M // 128)
                 and _blockscaled_smem(Schedule(block_m=256, block_n=128, block_k=_SCALE_BLOCK, num_stages=wave_stages,
                                                num_warpgroups=2), fp8, fp8, out_dtype) <= smem_limit
                 and not narrower_fills(256, 128))
        widest = (known and not narrow and K is not None and K >= _WIDEST_MIN_K
                  and tiles(block_m, _WIDEST_N) >= num_sms and -(-N // _WIDEST_N) * 2 <= -(-N // 128)
                  and not narrower_fills(block_m, _WIDEST_N))
        exact = [n for n in _EXACT_N if known and not narrow and K is not None and K >= _WIDEST_MIN_K
                 and N % 128 and N % n == 0 and fill(block_m, n) > fill(block_m, 128)]
        if waves:
            block_m, raster, stages, group = 256, "n", wave_stages, wave_group
        elif widest:
            block_n = _WIDEST_N
        elif exact:
            def branched(n: int) -> bool:
                return BlockScaledContext.promotes_by_offset(
                    Schedule(block_m=block_m, block_n=n, block_k=_SCALE_BLOCK, num_warpgroups=warpgroups))

            block_n = max(exact, key=lambda n: (branched(n), fill(block_m, n), n))
        elif known:
            while block_n > 16 and fill(block_m, block_n) < _FILL_FLOOR and fill(block_m, block_n // 2) > fill(
                    block_m, block_n):
                block_n //= 2
        if narrow and M > _ONE_ROW_MIN_M and block_n == 128:
            block_m, block_n = 128, 64
        s = Schedule(block_m=block_m, block_n=block_n, block_k=_SCALE_BLOCK,
                     num_stages=stages, num_warpgroups=warpgroups, raster=raster,
                     group_size_m=group).persistent()
    if deep_k and M <= _SMALL_M and s.num_warpgroups == 1 and s.block_n <= _DEEP_K_MAX_N and not s.is_swap_ab:
        s = dataclasses.replace(s, block_k=2 * _SCALE_BLOCK, num_stages=_DEEP_K_STAGES)
        if known and K >= _STREAMK_MIN_K:
            s = _split_deep_k(s, tiles(s.block_m, s.block_n), tiles(64, _SPLIT_N), K // (2 * _SCALE_BLOCK), num_sms)
    return blockscaled_stages_that_fit(s, out_dtype, smem_limit)


def _split_deep_k(whole: Schedule, whole_tiles: int, split_tiles: int, iterations: int, num_sms: int) -> Schedule:
    """``whole`` (a block_k 256 default of ``whole_tiles`` tiles, ``iterations`` K-iterations
    each), or split-K over the 64x``_SPLIT_N`` tiles (``split_tiles`` of them) in
    ``_SPLIT_PARTS`` equal parts (a cluster of that many CTAs a tile adding their parts in shared
    memory, ``kernels._walk_split``) where all fit the ``num_sms`` SMs at once and each CTA runs
    at least ``_SPLIT_MIN_SAVED`` fewer K-iterations than the whole tiles' waves do."""
    parts = _SPLIT_PARTS
    if (iterations % parts or parts * split_tiles > num_sms
            or -(-whole_tiles // num_sms) * iterations - iterations // parts < _SPLIT_MIN_SAVED):
        return whole
    return Schedule(block_m=64, block_n=_SPLIT_N, block_k=2 * _SCALE_BLOCK, num_stages=_DEEP_K_STAGES,
                    num_warpgroups=1).splitk(parts)


def blockscaled_stages_that_fit(schedule: Schedule, out_dtype=torch.bfloat16, smem_limit: int = 232448) -> Schedule:
    """``schedule`` with its stages lowered (down to 2) until the block-scaled kernel's shared
    memory (``_blockscaled_smem``, e4m3 operands) fits in ``smem_limit``."""
    fp8 = torch.float8_e4m3fn
    while schedule.num_stages > 2 and _blockscaled_smem(schedule, fp8, fp8, out_dtype) > smem_limit:
        schedule = schedule.stages(schedule.num_stages - 1)
    return schedule


@functools.lru_cache(maxsize=None)
def _compiled_blockscaled(spec):
    import tilelang

    from .kernels import blockscaled_gemm

    with _lowering(spec.schedule):
        return tilelang.compile(blockscaled_gemm(spec), target="cuda",
                                pass_configs=BLOCKSCALED_PASS_CONFIGS)


@functools.lru_cache(maxsize=4096)
def blockscaled_spec(a_dtype, b_dtype, out_dtype, schedule, num_sms, bias_dtype=None, batched=False,
                     tma_token_scales=False, read_once=(False, False)):
    """The BlockScaledSpec of a problem (torch dtypes; ``read_once``: whether the grid reads
    each byte of the tokens, and of the weights, once: ``operands_read_once``)."""
    from .kernels import BlockScaledSpec
    from .stages import BlockScaledContext

    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule, got {type(schedule).__name__}")
    BlockScaledContext.sub_blocks_of(schedule)  # block_k 128, or 256 where the tile allows: a "schedule:" error
    if schedule.num_xcds > 1:
        raise ValueError("schedule: num_xcds > 1 is the AMD chiplet transform; the block-scaled kernel targets Hopper")
    if schedule.split_k > 1 and (schedule.is_persistent or schedule.split_k > _MAX_SPLITS or batched):
        raise ValueError(f"schedule: a split-K block-scaled schedule runs one cluster of split_k <= {_MAX_SPLITS} "
                         f"CTAs a tile (not persistent, unbatched), got {schedule}{' batched' if batched else ''}")
    if schedule.streamk_tiles:
        BlockScaledContext.check_streamk(schedule)
    if (schedule.cluster_m > 1 or schedule.streamk_tiles) and batched:
        raise ValueError("schedule: the batched block-scaled kernel runs without clusters (cluster_m = 1) "
                         "and without Stream-K")
    BlockScaledContext.fragments_of(schedule)  # a tile whose fragments do not fit is a "schedule:" error
    return BlockScaledSpec(_WGMMA_INPUT[a_dtype], _WGMMA_INPUT[b_dtype], _STORAGE[out_dtype], schedule, num_sms,
                           None if bias_dtype is None else _STORAGE[bias_dtype], batched, tma_token_scales,
                           *read_once)


def _tma_token_scales(scale_a) -> bool:
    """Whether a TMA copy can read scale_a's tokens: stored outer-dim-major (tokens
    adjacent), its K-block rows and base 16-byte aligned (CUDA tensor maps, PTX ISA 5.5), and
    no stride 0 (a broadcast K block or batch: a tensor map's strides are non-zero, and the
    kernel's is built from the tensor's own, even for a dimension of size 1)."""
    *lead_strides, token_stride, kb_stride = scale_a.stride()
    return (scale_a.shape[-2] > 1 and token_stride == 1
            and all(st > 0 and st % 4 == 0 for st in (*lead_strides, kb_stride))
            and scale_a.data_ptr() % _TMA_ALIGN == 0)


def _token_major_copy(scale_a):
    """scale_a copied outer-dim-major (``_k_major_copy`` of its transpose), each K block's row
    padded to a multiple of 4 tokens (16 bytes, what a TMA copy needs)."""
    M = scale_a.shape[-2]
    return _k_major_copy(scale_a.mT, (-M) % 4)[..., :M].mT


def _blockscaled(names, a, b, scale_a, scale_b, schedule, out, out_dtype, bias, num_sms, batched):
    """Validate a block-scaled GEMM and derive its ``_BlockScaledLaunch`` (for an empty
    problem, its result); ``names`` are the caller's argument names of (a, b, scale_a, scale_b)."""
    na, nb, nsa, nsb = names
    ndim = 3 if batched else 2
    batch, M, N, K = blockscaled_problem(names, a, b, scale_a, scale_b, batched, _check_tensor)
    shape = (*batch, M, N)
    if out is not None:
        _check_tensor("out", out, ndim)
        if tuple(out.shape) != shape:
            raise ValueError(f"out: expected shape {shape}, got {tuple(out.shape)}")
        check_no_overlap("out", out)
        check_out_dtype(out, out_dtype)
        out_dtype = out.dtype
    source = "out_dtype" if out is None else "out"
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    if out_dtype not in _FLOAT_OUT:
        raise TypeError(f"{source}: dtype must be one of {[str(d) for d in _FLOAT_OUT]}, got {out_dtype}")
    if bias is not None and not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias: expected a torch.Tensor, got {type(bias).__name__}")
    check_num_sms(num_sms)
    device = a.device
    if device.type != "cuda":
        raise ValueError(f"{na}: on {device}; the TileLang kernels need CUDA tensors")
    for name, t in ((nb, b), (nsa, scale_a), (nsb, scale_b), ("out", out), ("bias", bias)):
        if t is not None and t.device != device:
            raise ValueError(f"{name}: on {t.device}, but {na} is on {device}; all tensors must share a device")
    bias_vec = None if bias is None else vector("bias", bias, N, _FLOAT_OUT, device).contiguous()
    if not (M and N and (not batched or batch[0])):
        return out if out is not None else torch.empty(shape, dtype=out_dtype, device=device)
    device_sms, smem_limit = cuda_limits(device)
    sms = device_sms if num_sms is None else num_sms
    if schedule is None:
        schedule = default_blockscaled_schedule(M, out_dtype, smem_limit, N=N, K=K, num_sms=sms,
                                                batch=batch[0] if batch else 1, batched=batched)
    elif schedule.num_sms is not None:
        sms = schedule.num_sms
    _check_streamk_programs(schedule, sms, device_sms)
    rows, cols = (N, M) if schedule.is_swap_ab else (M, N)
    check_int32_walk(schedule, rows, cols, K)
    if K and schedule.split_k > -(-K // schedule.block_k):  # K = 0: the bias alone, no kernel (below)
        raise ValueError(f"schedule: split_k = {schedule.split_k} parts need at least as many K-iterations of "
                         f"block_k = {schedule.block_k}; K = {K} has {-(-K // schedule.block_k)}")
    scale_a_copy = M > _SMALL_M and (scale_a.stride(-2) != 1 or 0 in scale_a.stride())
    spec = blockscaled_spec(a.dtype, b.dtype, out_dtype, schedule, sms,
                            None if bias_vec is None else bias_vec.dtype, batched=batched,
                            tma_token_scales=scale_a_copy or _tma_token_scales(scale_a),
                            read_once=operands_read_once(M, N, schedule))
    need = _blockscaled_smem(schedule, a.dtype, b.dtype, out_dtype)
    if need > smem_limit:
        raise ValueError(f"schedule: needs {need} bytes of shared memory, the device allows {smem_limit}")
    if K == 0:
        return _empty_k(out if out is not None else torch.empty(shape, dtype=out_dtype, device=device), bias_vec)
    step = _TMA_ALIGN // out_dtype.itemsize
    direct = N % step == 0 and (out is None or (out.is_contiguous() and out.data_ptr() % _TMA_ALIGN == 0))
    _check_allocations(out, shape, None if direct else (*batch, M, padded(N, out_dtype.itemsize)))
    if schedule.streamk_tiles:
        check_streamk_workspace(sms, 1, schedule.block_m, schedule.block_n)
    workspace = (sms, schedule.block_m, schedule.block_n, torch.float32) if schedule.streamk_tiles else None
    return _BlockScaledLaunch(_entry(_compiled_blockscaled(spec)), shape, (*batch, M, padded(N, out_dtype.itemsize)),
                              out_dtype,
                              a.is_contiguous() and a.data_ptr() % _TMA_ALIGN == 0,
                              b.is_contiguous() and b.data_ptr() % _TMA_ALIGN == 0, direct, _placeholder(device),
                              scale_a_copy, workspace)


class _BlockScaledLaunch:
    """What a block-scaled call derives from its arguments' signatures (the key of
    ``_BLOCKSCALED_LAUNCHES``): the kernel's entry, whether a and b are read as they are,
    whether C is ``out`` itself (else a temporary ``c_shape`` whose rows are padded to whole
    128-byte lines, ``tlgemm._checks.PITCH``; a TMA store needs 16 bytes). Calling it copies
    what must be copied (a, b when not dense; scale_a outer-dim-major when M > ``_SMALL_M`` and
    it is not, or has a stride of 0, ``scale_a_copy``: read in place, a tile's scales of one K
    block lie a row apart, which cost up to 14% at M = 4096 on the H100,
    benchmarks/results/blockscaled_small_m.md; the
    kernel reads every other scale tensor at its own strides, scale_a by TMA where
    ``_tma_token_scales`` allows) and launches with the Stream-K workspace of the current stream
    (``workspace``: its programs, tile and dtype; one-element placeholders without Stream-K),
    validating nothing again."""

    __slots__ = ("entry", "shape", "c_shape", "out_dtype", "a_direct", "b_direct", "direct", "placeholder",
                 "scale_a_copy", "workspace", "no_workspace")

    def __init__(self, entry, shape, c_shape, out_dtype, a_direct, b_direct, direct, placeholder, scale_a_copy,
                 workspace):
        self.entry, self.shape, self.c_shape, self.out_dtype = entry, shape, c_shape, out_dtype
        self.a_direct, self.b_direct, self.direct, self.placeholder = a_direct, b_direct, direct, placeholder
        self.scale_a_copy, self.workspace = scale_a_copy, workspace
        self.no_workspace = (placeholder.view(1, 1, 1), torch.zeros(1, dtype=torch.int32, device=placeholder.device))

    def __call__(self, a, b, scale_a, scale_b, out, bias):
        target = out if out is not None else torch.empty(size=self.shape, dtype=self.out_dtype, device=a.device)
        C = target if self.direct else torch.empty(size=self.c_shape, dtype=self.out_dtype, device=a.device)
        workspace = self.no_workspace if self.workspace is None else _streamk_workspace(a.device, *self.workspace)
        self.entry(a if self.a_direct else _k_major_copy(a, 0), b if self.b_direct else _k_major_copy(b, 0), C,
                   _token_major_copy(scale_a) if self.scale_a_copy else scale_a, scale_b,
                   self.placeholder if bias is None else bias.reshape(-1).contiguous(), *workspace)
        if not self.direct:
            target.copy_(C[..., :self.shape[-1]])
        return target


#: Cached block-scaled launches per call signature (bounded: ``tlgemm._checks.remember``).
_BLOCKSCALED_LAUNCHES: dict[tuple, _BlockScaledLaunch] = {}


def _blockscaled_key(batched, schedule, out_dtype, num_sms, a, b, scale_a, scale_b, out, bias):
    """The ``_BLOCKSCALED_LAUNCHES`` key of a call (as ``_launch_key``: num_sms's type in it)."""
    return (batched, schedule, out_dtype, type(num_sms), num_sms, signature(a), signature(b), signature(scale_a),
            signature(scale_b), signature(out), signature(bias))


def _blockscaled_call(names, a, b, scale_a, scale_b, schedule, out, out_dtype, bias, num_sms, batched):
    """``_blockscaled`` once per argument signature, its ``_BlockScaledLaunch`` after that."""
    check_out_reads(out, (*zip(names, (a, b, scale_a, scale_b)), ("bias", bias)))
    try:
        key = _blockscaled_key(batched, schedule, out_dtype, num_sms, a, b, scale_a, scale_b, out, bias)
        launch = _BLOCKSCALED_LAUNCHES.get(key)
    except (AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse tensor's strides or pointer
        key = launch = None
    if launch is None:
        launch = _blockscaled(names, a, b, scale_a, scale_b, schedule, out, out_dtype, bias, num_sms, batched)
        if not isinstance(launch, _BlockScaledLaunch):  # an empty problem's result
            return launch
        if key is not None:
            remember(_BLOCKSCALED_LAUNCHES, key, launch)
    return launch(a, b, scale_a, scale_b, out, bias)


def blockscaled_matmul(a, b, scale_a, scale_b, schedule=None, *, out=None, out_dtype=None, bias=None,
                       num_sms=None):
    """DeepSeek-V3's block-scaled FP8 GEMM, same contract as tlgemm.triton.blockscaled_matmul:
    a [M, K] and b [N, K] fp8, scale_a [M, K/128] and scale_b [ceil(N/128), K/128] float32 (any
    strides, read in place, but for M > 128 a scale_a not stored outer-dim-major, the layout
    of torch._scaled_mm and DeepGEMM, or broadcast (a stride of 0), is copied to it; a and b
    are copied when not dense),
    K a multiple of 128, any M and N (scale_b has ceil(N/128) rows,
    DeepGEMM's layout for N = 2112); out_dtype bf16 (default), fp16 or fp32; optional bias [N]."""
    return _blockscaled_call(("a", "b", "scale_a", "scale_b"), a, b, scale_a, scale_b, schedule, out, out_dtype,
                             bias, num_sms, batched=False)


def blockscaled_bmm(x, y, xs, ys, schedule=None, *, out=None, out_dtype=None, bias=None, num_sms=None):
    """The batched ``blockscaled_matmul`` (FlagGems' w8a8 block-FP8 bmm), same contract as
    tlgemm.triton.blockscaled_bmm: x [B, M, K], y [B, N, K] fp8, xs [B, M, K/128],
    ys [B, ceil(N/128), K/128] float32 (any strides, read as ``blockscaled_matmul`` reads
    them) → z [B, M, N]; bias (length N) is shared by every batch. One persistent launch
    over all B · tiles tiles. Returns ``out``."""
    return _blockscaled_call(("x", "y", "xs", "ys"), x, y, xs, ys, schedule, out, out_dtype, bias, num_sms,
                             batched=True)
