"""Python entry points: matmul, addmm, bmm, scaled_mm, explain, autotune.

Results follow torch.mm / torch.addmm / torch.bmm / torch._scaled_mm. What tlgemm adds is
below; a broken rule raises TypeError (a wrong type or dtype) or ValueError (anything else)
naming the argument and the rule.

Dtypes   a, b: float32, float16, bfloat16 (a and b alike), float8_e4m3fn / float8_e5m2 (may
         mix), int8. out_dtype: float32, float16, bfloat16; int8 inputs also int32 (matmul,
         bmm; not scaled_mm). Defaults:
         the input's dtype, bfloat16 for fp8, int32 for int8 (scaled_mm: bfloat16). float32
         inputs use TF32 when torch.matmul does (torch.backends.cuda.matmul.fp32_precision "tf32",
         or allow_tf32 where torch predates that API);
         TileLang has no full-precision float32 path, so with TF32 off "auto" takes Triton and
         backend="tilelang" is an error. addmm takes 16/32-bit floats; scaled_mm 8-bit inputs.
         float8_e4m3fn needs an NVIDIA GPU of compute capability 8.9 or newer (Triton's fp8e4nv).
Devices  every tensor on one CUDA (or ROCm) device. CPU tensors are an error, except under
         TRITON_INTERPRET=1 (Triton's interpreter, for debugging) and for empty problems.
         Meta tensors take the ops' fake implementations (below): shapes, dtypes, the int32
         size rule and the backend's name and schedule's type are checked, the result's shape
         and dtype returned; whether the backend can run there and the schedule's rules are not.
Empty    M, N, K or the batch = 0: no kernel runs. The result is empty, or zeros when K = 0
         (addmm: beta·bias broadcast; scaled_mm: its bias broadcast). Checked before devices;
         the backend as a non-empty call resolves it on the tensors' GPU or Triton's
         interpreter (a named one must be able to run there), and a schedule against that
         backend's rules that need no sizes and no GPU. On other devices (but meta, above),
         where no kernel runs, "auto" names no backend and a named one's schedule rules alone
         apply.
Layout   (the copy rule; explain() lists each copy) Triton: a matrix is read as it is when
         row-major or column-major (unit stride in one of its two dims, the other stride at
         least that dim's extent; any batch stride, 0 included, so an expanded batch costs no
         copy); anything else is copied once, K-major (a row-major, b column-major). Its
         launcher (tlgemm.triton.launch)
         also copies both operands K-major with K zero-padded when K's rows are not 16-byte
         multiples, and K-major an operand whose rows along its unit stride are not (its
         kernels would load such rows element by element). TileLang: its launcher's rule
         (tlgemm.tilelang.launch): dense K-major operands (a row-major, b column-major) and,
         for 16-bit inputs, dense MN-major ones are read as they are, anything else is copied
         once to K-major; TMA needs 16-byte aligned rows, so K is zero-padded (a copy) when
         K's rows are not, unless both operands are MN-major, and the result goes through a
         temporary when N's rows are not or `out` is not a dense row-major matrix. bmm's operands must also be dense across the
         batch (its 3-D TMA box): another batch stride, a broadcast (0) one included, is
         copied once. "auto" keeps TileLang when K or N rows are not 16-byte aligned: with its
         copies it ran 1.2-69x faster on the H100 than the Triton kernels (which load such
         rows without vectors) on 16 of 17 calls measured, 0.87x on the other
         (benchmarks/results/unaligned_rows.md).
Size     the kernels index in int32: a tensor holding 2**31 elements or more is an error; an
         operand spanning that many (a sparse view) but holding fewer is copied compactly.
Backend  "auto": TileLang on sm_90 (Hopper) when tlgemm.tilelang has the kernel, Triton
         elsewhere (other NVIDIA GPUs, AMD through ROCm); explain() says which and why. On
         gfx942 (MI300) Triton widens the OCP float8 types torch has (e4m3fn, e5m2) to float16,
         since that chip's fp8 MFMA takes the FNUZ formats: fp8 runs there, at float16's rate.
Schedule None: for matmul, addmm and scaled_mm with per-tensor/row/column scales, the
         autotune cache (tlgemm.autotune) entry for this GPU, backend, dtypes, operand layout
         (row- or column-major a and b: autotune's ``layout``) and shape bucket, else
         tlgemm.schedules.select's best candidate that the backends run (no split-K; swap-AB
         in TileLang's matmul only; a block_n no power of two only there and with B read
         K-major; bmm: no Stream-K). bmm reads no cache: select() for the [B·M, N, K]
         problem. Block-wise scaled_mm: the block-scaled launcher's default schedule.
Caches   the resolved backend, schedule and kernel are kept per (op, shape bucket, N, K,
         dtypes, device, backend, schedule, operand layouts and 16-byte alignment): a
         repeated call selects nothing, reads no cache
         file and validates no dtype again; it checks shapes, devices and strides, allocates
         the output and launches. A matmul is also kept per the signatures of a, b and out
         (shapes, strides, dtypes, device, 16-byte alignment) with out_dtype, backend and
         schedule: a call matching one goes straight to the launcher's cached launch
         (tlgemm.tilelang.cached_launch; tlgemm.triton.cached_launch, the compiled Triton
         kernel, where that backend read a and b without a copy).
torch    eager calls go straight to the kernels. Under torch.compile, torch.jit.trace, a
         dispatch mode (make_fx's, FakeTensorMode, ...) or a functorch
         transform (torch.vmap), for tensor subclasses other than Parameter, when an input
         requires grad, and for meta tensors, the same call goes through the torch.library ops
         tlgemm::matmul / addmm / bmm / scaled_mm (tlgemm.ops: fake implementations for
         tracing; gradients for matmul, addmm and bmm, and for scaled_mm's bias). They are
         registered on the first use of an entry point, or by ``import tlgemm.ops`` (before
         torch.export.load of a program that calls them, say). Forward-mode AD
         (torch.func.jvp, torch.autograd.forward_ad) is a NotImplementedError. Under
         torch.autocast, matmul, addmm and bmm cast float inputs to its dtype as torch.mm,
         addmm and bmm do, except with out= (as torch's out= variants).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import numbers
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch
from torch.autograd import forward_ad as _forward_ad

from tlgemm._checks import FLOAT_OUT as _FLOAT
from tlgemm._checks import FP8 as _FP8
from tlgemm._checks import (SCALE_BLOCK, TMA_ALIGN, check_no_overlap, check_not_negated, check_out_dtype,
                             check_out_reads, check_strided, loads_as_vectors, matmul_uses_tf32, may_share_memory,
                             padded, remember, signature, span_bytes, tma_read)
from tlgemm.schedules import AutotuneCache, Schedule, Selection, cdiv, m_bucket, num_programs, select

__all__ = ["matmul", "addmm", "bmm", "scaled_mm", "explain", "autotune", "Explanation", "AutotuneResult",
           "Target", "TARGETS"]

_INPUTS = _FLOAT + _FP8 + (torch.int8,)
_LIMIT = 2**31
_BACKENDS = ("auto", "tilelang", "triton")
#: op -> the backend function that runs it.
_KERNEL = {"matmul": "matmul", "addmm": "matmul", "scaled_mm": "matmul", "bmm": "bmm",
           "blockscaled": "blockscaled_matmul"}
_PUBLIC = {"matmul": "matmul", "addmm": "addmm", "scaled_mm": "scaled_mm", "bmm": "bmm",
           "blockscaled": "scaled_mm"}
_WGMMA_TYPE = {torch.float32: "tf32", torch.float16: "f16", torch.bfloat16: "bf16",
               torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2", torch.int8: "s8"}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---- targets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A GPU as the dispatcher sees it: a real device, or a named target for analysis."""

    name: str  # the GPU's name (autotune cache key) or the analysis target's label
    vendor: str  # "cuda", "hip" or "interpreter"
    arch: str  # "sm_90", "sm_80", "gfx942", "cpu"
    num_sms: int
    smem_bytes: int  # shared memory per block (opt-in maximum)
    analysis: bool = False  # a description only: nothing runs, no autotune cache

    @property
    def hopper(self) -> bool:
        return self.vendor == "cuda" and self.arch == "sm_90"

    def __str__(self) -> str:
        return f"{self.name} ({self.arch}, {self.num_sms} SMs, {self.smem_bytes / 1024:.0f} KB shared memory per block)"


#: Analysis targets for explain(gpu=...) and `tlgemm explain --gpu`.
TARGETS = {
    "sm90": Target("H100 SXM", "cuda", "sm_90", 132, 232448, analysis=True),
    "sm80": Target("A100 SXM", "cuda", "sm_80", 108, 166912, analysis=True),
    "gfx942": Target("MI300X", "hip", "gfx942", 304, 65536, analysis=True),
}
_INTERPRETER = Target("Triton interpreter", "interpreter", "cpu", 8, 232448)


@functools.lru_cache(maxsize=None)
def _device_target(device: torch.device) -> Target:
    props = torch.cuda.get_device_properties(device)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or getattr(props, "shared_memory_per_block", 49152)
    if torch.version.hip:
        return Target(props.name, "hip", props.gcnArchName.split(":")[0], props.multi_processor_count, smem)
    return Target(props.name, "cuda", f"sm_{props.major}{props.minor}", props.multi_processor_count, smem)


def _kernel_target(device: torch.device) -> Target | None:
    """Where the kernels run for tensors on ``device``: its GPU, Triton's interpreter for CPU
    tensors under TRITON_INTERPRET=1, else nowhere (None)."""
    if device.type == "cuda":
        return _device_target(device)
    if device.type == "cpu":
        from tlgemm.triton.shim import interpreting

        if interpreting():
            return _INTERPRETER
    return None


def _target_of(device: torch.device) -> Target:
    target = _kernel_target(device)
    if target is not None:
        return target
    raise ValueError(f"a: on {device}; tlgemm's kernels run on CUDA (or ROCm) GPUs: move the tensors there "
                     "(e.g. a.cuda()); CPU tensors run only under TRITON_INTERPRET=1 (Triton's interpreter)")


def _explain_target(gpu, device: torch.device) -> Target:
    if isinstance(gpu, Target):
        return gpu
    if gpu is None:
        if device.type == "cuda":
            return _device_target(device)
        from tlgemm.triton.shim import interpreting

        return _INTERPRETER if device.type == "cpu" and interpreting() else TARGETS["sm90"]
    if isinstance(gpu, str) and gpu in TARGETS:
        return TARGETS[gpu]
    if isinstance(gpu, str) and gpu.split(":")[0] == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"gpu: {gpu!r} names the CUDA device, but torch.cuda.is_available() is False here; "
                             f"use one of {sorted(TARGETS)}")
        return _device_target(torch.device(gpu if ":" in gpu else f"cuda:{torch.cuda.current_device()}"))
    raise ValueError(f"gpu: expected one of {sorted(TARGETS)}, 'cuda[:N]' or a tlgemm.api.Target, got {gpu!r}")


# ---- validation ---------------------------------------------------------------------------


def _check_pair(a, b, ndim: int) -> tuple[int, int, int, int]:
    """(M, N, K, batch) of a [.., M, K] @ b [.., K, N]: types, layouts, ranks, shapes, one device,
    int32 sizes."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.ndim == ndim and b.ndim == ndim
            and a.layout == b.layout == torch.strided and not (a.is_nested or b.is_nested)):
        for name, t, dims in (("a", a, "M, K"), ("b", b, "K, N")):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
            check_strided(name, t)
            if t.ndim != ndim:
                dims = dims if ndim == 2 else "B, " + dims
                raise ValueError(f"{name}: expected a {ndim}-D tensor [{dims}], got shape {list(t.shape)}")
    sa, sb = a.shape, b.shape
    if sa[-1] != sb[-2]:
        raise ValueError(f"a, b: inner dimensions differ: a is {list(sa)}, b is {list(sb)} "
                         "(a [.., M, K] needs b [.., K, N])")
    batch = 1
    if ndim == 3:
        batch = sa[0]
        if sb[0] != batch:
            raise ValueError(f"a, b: batch sizes differ: a is {list(sa)}, b is {list(sb)}; like torch.bmm, bmm does "
                             "not broadcast: expand the smaller one (a stride-0 batch costs no copy on the Triton "
                             "backend)")
    if b.device != a.device:
        raise ValueError(f"b: on {b.device}, but a is on {a.device}; all tensors must be on one device")
    M, K, N = sa[-2], sa[-1], sb[-1]
    if a.numel() >= _LIMIT or b.numel() >= _LIMIT or batch * M * N >= _LIMIT:
        for name, numel in (("a", a.numel()), ("b", b.numel()), ("out", batch * M * N)):
            _check_elements(name, numel)
    return M, N, K, batch


def _check_elements(name: str, numel: int) -> None:
    """ValueError for a tensor of 2**31 elements or more: the kernels index in int32."""
    if numel >= _LIMIT:
        raise ValueError(f"{name}: holds {numel} elements; the kernels index in int32 (fewer than 2**31 "
                         "elements per tensor): split the problem")


def _check_out(op: str, out, out_dtype, shape: tuple[int, ...], reads: dict):
    """The effective out_dtype argument: out.dtype when out is given (after checking it: a
    dtype ``op`` can write for reads["a"] and reads["b"], their device, no two of its elements
    one memory location, and no memory shared with the tensors the kernel ``reads``, by name,
    while it writes out)."""
    if out is None:
        return out_dtype
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out: expected a torch.Tensor, got {type(out).__name__}")
    check_strided("out", out)
    check_not_negated("out", out)
    if out.requires_grad and torch.is_grad_enabled():
        raise ValueError("out: requires grad, and the kernels write it without recording the write for autograd; "
                         "pass an out that does not require grad (or none)")
    if out.shape != shape:
        raise ValueError(f"out: expected shape {list(shape)}, got {list(out.shape)}")
    check_out_dtype(out, out_dtype)
    a, b = reads["a"], reads["b"]
    _result_dtype(op, a.dtype, b.dtype, out.dtype, source="out")
    if out.device != a.device:
        raise ValueError(f"out: on {out.device}, but a is on {a.device}; all tensors must be on one device")
    check_no_overlap("out", out)
    check_out_reads(out, reads.items())
    return out.dtype


def _aliases(out, t) -> bool:
    """Whether ``out`` may share memory with ``t`` (None, or a scalar that is no tensor: no)."""
    return isinstance(t, torch.Tensor) and may_share_memory(out, t)


def _check_scaled_mm_bias(bias, M: int, N: int, device: torch.device) -> None:
    """scaled_mm's bias: a float [N] vector (the kernel's epilogue adds it)."""
    _bias_route(bias, M, N, device)
    if bias.shape != (N,):
        raise ValueError(f"bias: scaled_mm takes a 1-D [N] = [{N}] bias (the kernel epilogue), "
                         f"got shape {list(bias.shape)}")


def _own_bias(bias, out):
    """``bias``, copied where it shares memory with ``out``: the kernel writes out before
    (an [M, N] bias, added after it) or while (the epilogue's [N] bias) it reads bias, and
    torch.addmm(c, a, b, out=c) is an idiom."""
    return bias.clone() if out is not None and _aliases(out, bias) else bias


def _result_dtype(op: str, a_dtype: torch.dtype, b_dtype: torch.dtype, out_dtype, source="out_dtype") -> torch.dtype:
    """The output dtype of ``op`` for these inputs (the dtype rules of the module docstring);
    ``source``: the argument an unsupported out_dtype came from ("out" for out's dtype)."""
    allowed_inputs = ", ".join(map(_name, _INPUTS))
    for name, dtype in (("a", a_dtype), ("b", b_dtype)):
        if dtype not in _INPUTS:
            raise TypeError(f"{name}: dtype {_name(dtype)} is not a tlgemm input; expected one of {allowed_inputs}")
    if a_dtype != b_dtype and not (a_dtype in _FP8 and b_dtype in _FP8):
        raise TypeError(f"a, b: dtypes must match (only float8_e4m3fn and float8_e5m2 may mix), "
                        f"got {_name(a_dtype)} and {_name(b_dtype)}")
    if op == "addmm" and a_dtype not in _FLOAT:
        raise TypeError(f"a: addmm takes float32, float16 or bfloat16 inputs, got {_name(a_dtype)}; "
                        "8-bit inputs with a bias: tlgemm.scaled_mm(..., bias=)")
    if op in ("scaled_mm", "blockscaled") and a_dtype.itemsize != 1:
        raise TypeError(f"a: scaled_mm takes 8-bit inputs (float8_e4m3fn, float8_e5m2, int8), got {_name(a_dtype)}; "
                        "16/32-bit inputs: tlgemm.matmul or tlgemm.addmm")
    if op == "blockscaled" and a_dtype not in _FP8:
        raise TypeError(f"a, b: block-wise scales take fp8 inputs (float8_e4m3fn, float8_e5m2), got {_name(a_dtype)}")
    if op in ("scaled_mm", "blockscaled"):
        default = torch.bfloat16
    else:
        default = torch.bfloat16 if a_dtype in _FP8 else torch.int32 if a_dtype == torch.int8 else a_dtype
    if out_dtype is None:
        return default
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype: expected a torch.dtype, got {type(out_dtype).__name__}")
    allowed = _FLOAT + ((torch.int32,) if default == torch.int32 else ())
    if out_dtype not in allowed:
        raise TypeError(f"{source}: for {_name(a_dtype)} inputs ({_PUBLIC[op]}) one of "
                        f"{', '.join(map(_name, allowed))}, got {_name(out_dtype)}")
    return out_dtype


def _bias_route(bias, M: int, N: int, device: torch.device) -> str:
    """"scalar", "vector" ([N] or [1, N]: the kernel's epilogue) or "full" (added after the kernel)."""
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias: expected a torch.Tensor, got {type(bias).__name__}")
    check_strided("bias", bias)
    if bias.dtype not in _FLOAT:
        raise TypeError(f"bias: dtype must be float32, float16 or bfloat16, got {_name(bias.dtype)}")
    if bias.device != device:
        raise ValueError(f"bias: on {bias.device}, but a is on {device}; all tensors must be on one device")
    shape = list(bias.shape)
    if len(shape) > 2 or any(d not in (1, full) for d, full in zip(shape[::-1], (N, M), strict=False)):
        raise ValueError(f"bias: shape {shape} does not broadcast to the result [M, N] = [{M}, {N}]")
    if bias.numel() == 1:
        return "scalar"
    if shape[-1] == N and bias.numel() == N:
        return "vector"
    return "full"


def _scale_kind(scale_a, scale_b, M: int, N: int, K: int, device: torch.device) -> bool:
    """True for block-wise scales, False for per-tensor / per-row / per-column ones.

    The first rule that fits wins; where both fit (K <= 128 and N = 1, or single blocks) the
    two readings compute the same product."""
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(s).__name__}")
        check_strided(name, s)
        if s.dtype != torch.float32:
            raise TypeError(f"{name}: dtype must be float32, got {_name(s.dtype)}")
        if s.device != device:
            raise ValueError(f"{name}: on {s.device}, but a is on {device}; all tensors must be on one device")
    sa, sb = tuple(scale_a.shape), tuple(scale_b.shape)
    if (scale_a.numel() == 1 or sa in ((M,), (M, 1))) and (scale_b.numel() == 1 or sb in ((N,), (1, N))):
        return False
    kb, nb = cdiv(K, 128), cdiv(N, 128)
    if sa == (M, kb) and sb == (nb, kb):
        if K % SCALE_BLOCK:
            raise ValueError(f"a, b: block-wise scales need K a multiple of {SCALE_BLOCK} (whole 1x128 and 128x128 "
                             f"scale blocks along K; both backends' kernels take one per K-step), got K = {K}")
        return True
    hint = ("; this scale_b is torch._scaled_mm's [K/128, N/128] layout: pass scale_b.t()"
            if sb == (kb, nb) != (nb, kb) else "")
    raise ValueError(f"scale_a, scale_b: shapes {list(sa)} and {list(sb)} match no scaling of [{M}, {K}] @ [{K}, {N}]: "
                     "per-tensor (1 element), per-row scale_a [M, 1] or [M], per-column scale_b [1, N] or [N], or "
                     f"block-wise scale_a [M, ceil(K/128)] = [{M}, {kb}] with scale_b [ceil(N/128), ceil(K/128)] = "
                     f"[{nb}, {kb}]{hint}")


# ---- plans: backend, schedule and kernel, cached ----------------------------------------


@dataclass(frozen=True)
class _Plan:
    """What a call with this key runs."""

    op: str
    backend: str
    launch: Callable  # launch(a, b, schedule, out, scale_a, scale_b, bias)
    schedule: Schedule | None
    out_dtype: torch.dtype
    target: Target
    fallbacks: tuple[Schedule, ...] = ()  # select()'s next candidates, tried if the backend rejects `schedule`
    #: for an autotune cache entry: select()'s candidates, computed only if the backend rejects it
    #: (e.g. shared memory: the entry was tuned on a GPU of the same name with more of it)
    reselect: Callable[[], tuple[Schedule, ...]] | None = None


_PLANS: dict[tuple, _Plan] = {}
#: Repeated tlgemm.matmul calls: ``_repeat_key`` → (the launcher's cached launch
#: (tlgemm.tilelang.cached_launch, or tlgemm.triton.cached_launch where the Triton backend
#: read both operands as given), called with no other step; the byte lengths of a, b and out
#: (``span_bytes``, None without an out), which the key's shapes, strides and dtypes fix).
_REPEATS: dict[tuple, tuple] = {}


def _apart(out, out_bytes: int, t, t_bytes: int) -> bool:
    """Whether ``out`` and ``t`` (of one device, of these ``span_bytes``) cannot share
    memory: their byte ranges do not intersect (``may_share_memory``'s conservative test,
    without its storage lookups: two data pointers, on matmul's repeat path); an empty range
    strictly inside the other counts as meeting it, which only sends the call to the checked path."""
    o, p = out.data_ptr(), t.data_ptr()
    return o + out_bytes <= p or p + t_bytes <= o


def _forget_plans() -> None:
    """Drop every cached plan (the next calls select again)."""
    _PLANS.clear()
    _REPEATS.clear()


def _repeat_key(a, b, out, out_dtype, backend, schedule) -> tuple:
    """Everything a matmul call's plan and launch derive from its arguments, as one flat
    tuple (cheap to build and hash): backend, schedule, out_dtype, TF32 for float32 inputs,
    and the signatures of a, b and out (shape, strides, dtype, device, 16-byte alignment).
    The signatures are ``tlgemm._checks.signature``'s fields, inlined for a and b (a call
    less per argument on the hot path). Raises AttributeError for a non-tensor and, on
    lookup, TypeError for an unhashable argument: the caller then takes the full path, which
    names it."""
    return (backend, schedule, out_dtype, a.dtype == torch.float32 and matmul_uses_tf32(),
            a.shape, a.stride(), a.dtype, a.device, a.data_ptr() % 16 == 0, a.is_neg(),
            b.shape, b.stride(), b.dtype, b.device, b.data_ptr() % 16 == 0, b.is_neg(), signature(out))


def _backend_kernel(backend: str, op: str):
    return getattr(importlib.import_module(f"tlgemm.{backend}"), _KERNEL[op], None)


def _tilelang_obstacles(op, N, K, a_dtype, out_dtype, target, tf32) -> tuple[str | None, str | None]:
    """(hard, soft): why TileLang cannot run this call, or why it would need copies."""
    hard = soft = None
    if not target.hopper:
        hard = f"{target.arch} is not sm_90: TileLang's kernels issue wgmma (Hopper only)"
    elif a_dtype == torch.float32 and not tf32:
        hard = ("float32 inputs with TF32 off (torch.backends.cuda.matmul.fp32_precision is not 'tf32'): "
                "wgmma has no full-precision float32 path")
    else:
        try:
            if _backend_kernel("tilelang", op) is None:
                hard = f"tlgemm.tilelang has no {_KERNEL[op]} kernel in this installation"
        except ImportError as err:
            hard = f"tlgemm.tilelang does not import here ({err})"
    size_in, size_out = a_dtype.itemsize, out_dtype.itemsize
    # the operands' own copies depend on their layouts, which explain() lists per operand (_tilelang_layout)
    copies = []
    if (K * size_in) % 16:
        copies.append(f"K={K} ({K * size_in}-byte rows): unless a and b are both stored MN-major (K their outer "
                      "dimension), TileLang zero-pads K in a copy of each operand")
    if (N * size_out) % 16:
        copies.append(f"N={N} ({N * size_out}-byte rows of the output): C goes through a padded temporary")
    if copies:
        soft = "rows not 16-byte aligned, which TMA needs: " + "; ".join(copies)
    return hard, soft


def runs_schedule(backend: str, op: str, s: Schedule, b_k_major: bool = True) -> bool:
    """Whether ``backend``'s launcher for ``op`` takes this schedule: no split-K; swap-AB,
    clusters (cluster_m > 1) and a block_n that is no power of two only in the TileLang
    backend's matmul (not bmm); that block_n only where the kernel reads B K-major
    (``b_k_major``: the TileLang launcher's rule, ``_tilelang_layout``); bmm: no Stream-K."""
    if s.split_k > 1 or (op == "bmm" and s.streamk_tiles):
        return False
    if (s.cluster_m > 1 or not s.has_pow2_block_n) and (backend != "tilelang" or _KERNEL[op] != "matmul"):
        return False
    if not s.has_pow2_block_n and not b_k_major:
        return False
    return not s.is_swap_ab or (backend == "tilelang" and op != "bmm")


def _call_layout(a: torch.Tensor, b: torch.Tensor) -> str:
    """The operands' storage, BLAS style as autotune's ``layout``: "n" for a row-major a
    [M, K] or b [K, N], "t" for a column-major one (the order ``_layout`` reads)."""
    return "".join("n" if _layout(t)[1] == "row" else "t" for t in (a, b))


def _dtype_key(a_dtype, b_dtype, out_dtype, tf32: bool) -> tuple[str, str, str]:
    if tf32:
        return "tf32", "tf32", _name(out_dtype)
    return _name(a_dtype), _name(b_dtype), _name(out_dtype)


_MAX_FALLBACKS = 7


def _choose_schedule(op, backend, M, N, K, dtypes, target, schedule, info, use_cache, layout, b_k_major):
    """(schedule, fallbacks, reselect): the caller's, the autotune cache's entry for this
    ``layout`` (select()'s candidates computed only should the backend reject it) or
    select()'s best one that the backend runs with B read K-major or not (``b_k_major``)."""
    if schedule is not None:
        info["schedule"] = "given by the caller"
        return schedule, (), None
    if op == "blockscaled":
        info["schedule"] = "chosen by the block-scaled launcher (schedule=None)"
        return None, (), None
    use_cache = use_cache and not target.analysis and target.vendor != "interpreter" and op != "bmm"
    if use_cache:
        hit = AutotuneCache().get(target.name, backend, dtypes, M, N, K, layout=layout)
        if hit is not None and runs_schedule(backend, op, hit, b_k_major):
            info["schedule"] = (f"autotune cache entry for {target.name}, {backend}, {dtypes}, layout {layout}, "
                                f"shape bucket of M={M}")
            return hit, (), lambda: _selected(op, backend, M, N, K, dtypes, target, {}, use_cache, b_k_major)
    chosen, *fallbacks = _selected(op, backend, M, N, K, dtypes, target, info, use_cache, b_k_major)
    return chosen, tuple(fallbacks), None


def _selected(op, backend, M, N, K, dtypes, target, info, use_cache, b_k_major) -> tuple[Schedule, ...]:
    """select()'s best runnable schedule and its fallbacks: the next ``_MAX_FALLBACKS`` and the
    best with a power-of-two block_n."""
    m_min, bucket = m_bucket(M)
    selection = select(bucket, N, K, dtypes, target.num_sms, target.smem_bytes, explain=True, m_min=m_min)
    runnable = list(dict.fromkeys(c.schedule for c in selection.candidates
                                  if runs_schedule(backend, op, c.schedule, b_k_major)))
    if not runnable:
        raise ValueError(f"schedule: select() offers no candidate the {backend} backend runs for M={M}, N={N}, K={K}")
    rank = next(i for i, c in enumerate(selection.candidates) if c.schedule == runnable[0])
    skipped = (f"; {rank} better-modelled candidates use what the {backend} backend does not run "
               "(split-K; swap-AB outside TileLang's matmul; Stream-K in bmm; a block_n no power of two with B "
               "read MN-major)") if rank else ""
    no_cache = "no autotune cache entry" if use_cache else "autotune cache not consulted"
    rows = f"the [B·M, N, K] problem, M bucket {bucket}" if op == "bmm" else f"M bucket {bucket}"
    info["schedule"] = (f"tlgemm.schedules.select ({no_cache}; {rows}){skipped}; should the backend reject it at "
                        "the first launch (shared memory), the next candidate runs")
    info["selection"] = selection
    return tuple(runnable[:1 + _MAX_FALLBACKS])


def _check_schedule(schedule) -> None:
    if schedule is not None and not isinstance(schedule, Schedule):
        raise TypeError(f"schedule: expected a tlgemm.schedules.Schedule or None, got {type(schedule).__name__}")


def _check_backend(backend) -> None:
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected 'auto', 'tilelang' or 'triton', got {backend!r}")


def _resolve_backend(op, N, K, a_dtype, out_dtype, backend, target, tf32) -> tuple[str, str]:
    """(the backend that runs the call, why): for "auto" TileLang where it can run it on
    ``target``, else Triton; ValueError where backend="tilelang" cannot."""
    hard, soft = _tilelang_obstacles(op, N, K, a_dtype, out_dtype, target, tf32)
    if backend == "tilelang" and hard:
        raise ValueError(f"backend: 'tilelang' cannot run this: {hard}")
    if backend == "auto":
        if hard:
            return "triton", f"auto: {hard}"
        return "tilelang", f"auto: {target.arch} is Hopper" + (f"; {soft}" if soft else "")
    return backend, "given by the caller" + (f"; {soft}" if backend == "tilelang" and soft else "")


def _check_fp8_arch(a_dtype, b_dtype, target) -> None:
    """float8_e4m3fn on an NVIDIA GPU older than sm_89: Triton compiles its fp8e4nv type only from
    compute capability 8.9 (triton/backends/nvidia/compiler.py), and TileLang needs sm_90."""
    capability = re.match(r"sm_(\d+)", target.arch) if target.vendor == "cuda" else None
    if torch.float8_e4m3fn in (a_dtype, b_dtype) and capability and int(capability[1]) < 89:
        raise ValueError(f"a, b: float8_e4m3fn needs compute capability 8.9 or newer (Triton's fp8e4nv type), "
                         f"the target is {target.arch}")


def _make_plan(op, M, N, K, a_dtype, b_dtype, out_dtype, device, backend, schedule, tf32, target=None, info=None,
               use_cache=True, layout="nt", b_k_major=True):
    """Resolve backend, schedule and kernel (validating dtypes and the device); M = B·M for bmm.
    ``layout`` (``_call_layout``) keys the autotune cache; ``b_k_major``: whether the TileLang
    kernel would read B K-major (``_tilelang_layout``), which a block_n no power of two needs."""
    info = {} if info is None else info
    _check_backend(backend)
    out_dtype = _result_dtype(op, a_dtype, b_dtype, out_dtype)
    _check_schedule(schedule)
    target = target or _target_of(device)
    name, info["backend"] = _resolve_backend(op, N, K, a_dtype, out_dtype, backend, target, tf32)
    _check_fp8_arch(a_dtype, b_dtype, target)
    fn = _backend_kernel(name, op)
    if fn is None:
        raise NotImplementedError(f"backend: tlgemm.{name} has no {_KERNEL[op]} kernel in this installation")
    chosen, fallbacks, reselect = _choose_schedule(op, name, M, N, K, _dtype_key(a_dtype, b_dtype, out_dtype, tf32),
                                                   target, schedule, info, use_cache, layout, b_k_major)
    if op == "blockscaled":
        def launch(a, b, schedule, out, scale_a, scale_b, bias):
            return fn(a, b.mT, scale_a, scale_b, schedule, out=out, out_dtype=out.dtype, bias=bias,
                      num_sms=target.num_sms)
    else:
        extra = {"allow_tf32": tf32} if name == "triton" else {}
        if device.type != "cuda":  # the interpreter: no device to take the SM count from
            extra["num_sms"] = target.num_sms

        def launch(a, b, schedule, out, scale_a, scale_b, bias):
            return fn(a, b, schedule, out=out, scale_a=scale_a, scale_b=scale_b, bias=bias, **extra)
    return _Plan(op, name, launch, chosen, out_dtype, target, fallbacks, reselect)


# ---- operands and launch ------------------------------------------------------------------


def _layout(t: torch.Tensor) -> tuple[str | None, str]:
    """The Triton copy rule: (why t is copied, or None; "row" or "col", the order read)."""
    shape, stride = t.shape, t.stride()
    rows, cols, rs, cs = shape[-2], shape[-1], stride[-2], stride[-1]
    if (cs == 1 or cols == 1) and (rs >= cols or rows == 1):
        major = "row"
    elif (rs == 1 or rows == 1) and (cs >= rows or cols == 1):
        major = "col"
    else:
        return "neither row- nor column-major", "row"
    span = (rows - 1) * rs + (cols - 1) * cs + (1 if len(shape) == 2 else (shape[0] - 1) * stride[0] + 1)
    if span >= _LIMIT:
        return "spans 2**31 elements or more (int32 indexing): copied compactly", major
    return None, major


def _operand(name: str, t: torch.Tensor) -> torch.Tensor:
    """Operand ``name`` ("a" or "b") as the Triton backend gets it: as given, or (``_layout``'s
    rule) copied K-major (a row-major, b column-major), the order whose rows the launcher
    loads as 16-byte vectors wherever K's rows are 16-byte multiples; a row-major copy of a b
    with N unaligned was copied K-major a second time by the launcher. TileLang's launcher
    applies its own rule."""
    if _layout(t)[0] is None:
        return t
    return t.contiguous() if name == "a" else t.mT.contiguous().mT


def _read_once_notes(M: int, N: int, schedule: Schedule) -> list[str]:
    """Which operand the TileLang kernel reads once and so loads with the L2 evict_first hint
    (``tlgemm.tilelang.launch.operands_read_once``)."""
    from tlgemm.tilelang.launch import operands_read_once

    a_once, b_once = operands_read_once(M, N, schedule)
    other = {"a": "N", "b": "M"}
    return [f"{name} is read once by the grid (the problem's {other[name]} fits one tile): the kernel loads it with "
            "the L2 evict_first hint" for name, once in (("a", a_once), ("b", b_once)) if once]


def _tilelang_layout(name: str, t: torch.Tensor, K: int) -> tuple[str, str]:
    """What tlgemm.tilelang's launcher does with operand ``name`` by its own layout (its copy
    rule, ``tma_read``), and the major order ("K" or "MN") the kernel then reads; a batched
    operand must also be dense across the batch. K's padding, which depends on both operands,
    is ``_tilelang_layouts``'s."""
    (rows, cols), (rs, cs) = t.shape[-2:], t.stride()[-2:]
    if t.dim() == 3 and t.shape[0] > 1 and t.stride(0) != rows * cols:
        return ("copied to K-major by the TileLang launcher (the batch stride is not one matrix, which its "
                "3-D TMA box needs)"), "K"
    mn, k_stride, mn_stride = (rows, cs, rs) if name == "a" else (cols, rs, cs)
    how = tma_read(mn, K, k_stride, mn_stride, t.data_ptr() % TMA_ALIGN == 0, t.element_size())
    if how == "K":
        return "K-major, read as it is", "K"
    if how == "MN":
        return "MN-major (16-bit), read as it is", "MN"
    return ("copied to K-major by the TileLang launcher (not a dense, 16-byte aligned K-major matrix with rows of "
            "K in 16-byte multiples, nor such a 16-bit MN-major one)"), "K"


def _tilelang_layouts(a: torch.Tensor, b: torch.Tensor, K: int) -> list[tuple[str, str]]:
    """``_tilelang_layout`` of a and b with K's padding: where K's rows are no 16-byte multiple
    (TMA's row pitch), the launcher zero-pads K to whole 128-byte rows in a copy of each operand
    (tlgemm.tilelang.launch._oriented), unless both are read MN-major: then K is the outer
    dimension of both, which TMA's box bounds need no padding for."""
    layouts = [_tilelang_layout("a", a, K), _tilelang_layout("b", b, K)]
    if K * a.element_size() % 16 == 0 or all(major == "MN" for _, major in layouts):
        return layouts
    zeros = f"K zero-padded from {K} to {padded(K, a.element_size())} (whole 128-byte rows of K)"
    return [(f"{state.removesuffix(', read as it is')}, copied with {zeros}" if state.endswith("read as it is")
             else f"{state}; {zeros}", major) for state, major in layouts]


@functools.cache
def _gpu_count() -> int:
    """torch.cuda.device_count(), fixed for the process once CUDA is initialised."""
    return torch.cuda.device_count()


def _on_device(device: torch.device):
    """A context making ``device`` the current CUDA device where it is not: Triton launches on
    the current device, and TileLang's launch makes the tensors' GPU current and leaves it so,
    so a call on tensors of another GPU than the current one runs with that GPU current
    (torch.cuda.device) and returns with the caller's, as torch's own ops do. Nothing to do
    in a process with one GPU or on the CPU (the interpreter)."""
    if _gpu_count() < 2 or device.type != "cuda" or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def _gemm(op, a, b, M, N, K, batch, out, out_dtype, backend, schedule, scale_a=None, scale_b=None, bias=None,
          repeat_key=None):
    """Plan (cached), prepare operands and output, launch, with a's device current
    (``_on_device``). Inputs checked by _check_pair/_check_out. With a ``repeat_key``
    (matmul), the launch is kept in ``_REPEATS`` under it."""
    with _on_device(a.device):
        if schedule is not None:
            _check_schedule(schedule)
        device, a_dtype = a.device, a.dtype
        tf32 = a_dtype == torch.float32 and matmul_uses_tf32()
        rows = batch * M
        key = _plan_key(op, rows, N, K, a, b, out_dtype, backend, schedule, tf32)
        plan = _PLANS.get(key)
        fresh = plan is None
        if fresh:
            plan = _make_plan(op, rows, N, K, a_dtype, b.dtype, out_dtype, device, backend, schedule, tf32,
                              layout=_call_layout(a, b), b_k_major=_tilelang_layout("b", b, K)[1] == "K")
        if out is None:
            shape = (M, N) if batch == 1 and a.ndim == 2 else (batch, M, N)
            out = torch.empty(shape, dtype=plan.out_dtype, device=device)
        given = a, b
        if plan.backend == "triton":
            a, b = _operand("a", a), _operand("b", b)
        if fresh:
            plan = _PLANS[key] = _first_launch(plan, a, b, out, scale_a, scale_b, bias)
        else:
            plan.launch(a, b, plan.schedule, out, scale_a, scale_b, bias)
        if repeat_key is not None:
            if plan.backend == "tilelang":
                launch = importlib.import_module("tlgemm.tilelang").cached_launch(a, b, plan.schedule, out)
            elif a is given[0] and b is given[1]:  # a repeat passes the caller's operands: none may need a copy
                launch = importlib.import_module("tlgemm.triton").cached_launch(a, b, plan.schedule, out, tf32)
            else:
                launch = None
            if launch is not None:
                out_bytes = None if repeat_key[-1] is None else span_bytes(out)
                remember(_REPEATS, repeat_key, (launch, span_bytes(given[0]), span_bytes(given[1]), out_bytes))
        return out


def _plan_key(op, rows, N, K, a, b, out_dtype, backend, schedule, tf32) -> tuple:
    """The ``_PLANS`` key of a call: the problem, dtypes, device and options, and each operand's
    layout (``_layout``), 16-byte alignment, the major the TileLang kernel reads B in
    (``_tilelang_layout``: a padded leading stride is copied K-major) and whether the Triton
    kernel loads it as vectors, since a schedule that runs with one may be rejected with
    another (the TileLang kernels take a block_n that is no power of two only with B read
    K-major; the Triton kernel's shared memory depends on the order it reads)."""
    return (op, m_bucket(rows), N, K, a.dtype, b.dtype, out_dtype, a.device, backend, schedule, tf32, _layout(a),
            _layout(b), a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0, _tilelang_layout("b", b, K)[1],
            loads_as_vectors(a), loads_as_vectors(b))


def _first_launch(plan: _Plan, a, b, out, scale_a, scale_b, bias) -> _Plan:
    """Launch a new plan; when the backend rejects its schedule ("schedule: ..." errors, e.g.
    shared memory beyond the device's), the next candidate runs: select()'s fallbacks, or, for
    an autotune cache entry, select()'s candidates (``_Plan.reselect``). A schedule with no
    candidate after it (the caller's) raises the backend's own error. Returns the plan that
    ran, to be cached."""
    rejected = []
    candidates = [plan.schedule, *plan.fallbacks]
    while candidates:
        schedule = candidates.pop(0)
        try:
            plan.launch(a, b, schedule, out, scale_a, scale_b, bias)
        except (ValueError, NotImplementedError) as err:
            if not str(err).startswith("schedule:"):
                raise
            if not candidates and plan.reselect is not None:
                candidates = [s for s in plan.reselect() if s != schedule]
                plan = replace(plan, reselect=None)
            if not rejected and not candidates:
                raise
            rejected.append(f"{schedule}: {err}")
            continue
        return replace(plan, schedule=schedule, fallbacks=(), reselect=None)
    raise ValueError(f"schedule: the {plan.backend} backend rejected all {len(rejected)} candidates; "
                     f"first: {rejected[0]}")


def _empty(op, a, b, out, out_dtype, shape, backend, schedule):
    """The result of a problem with M, N, K or the batch 0: zeros (no launch), after the
    checks a launch would make of the dtypes, the backend and the schedule
    (``_check_empty_schedule``)."""
    _check_backend(backend)
    _check_schedule(schedule)
    dtype = _result_dtype(op, a.dtype, b.dtype, out_dtype)
    _check_empty_schedule(op, a, b, shape[-1], dtype, backend, schedule)
    return torch.zeros(shape, dtype=dtype, device=a.device) if out is None else out.zero_()


def _check_empty_schedule(op, a, b, N, out_dtype, backend, schedule, target=None) -> None:
    """An empty problem's backend and schedule: the error a non-empty call with these dtypes
    raises by a rule that needs no sizes, layout or GPU. The backend is resolved as a launch
    would on ``target`` (default: a's device; ``_resolve_backend``: "auto" picks one, a named
    one must be able to run there), then the schedule checked against its rules
    (``_check_backend_schedule``). Where no kernel runs (CPU without TRITON_INTERPRET=1, meta)
    "auto" checks nothing and a named backend its schedule rules, if it imports."""
    target = target or _kernel_target(a.device)
    if target is not None:
        tf32 = a.dtype == torch.float32 and matmul_uses_tf32()
        backend = _resolve_backend(op, N, a.shape[-1], a.dtype, out_dtype, backend, target, tf32)[0]
        _check_fp8_arch(a.dtype, b.dtype, target)
    elif backend == "auto":
        return
    if schedule is None:
        return
    try:
        _check_backend_schedule(op, a.dtype, b.dtype, out_dtype, backend, schedule)
    except ImportError:  # no kernel target, and the named backend does not import here: no rules to check
        return


@functools.lru_cache(maxsize=256)
def _check_backend_schedule(op, a_dtype, b_dtype, out_dtype, backend, schedule) -> None:
    """``backend``'s rules for ``schedule`` with these dtypes that need no sizes, layout or GPU.
    Triton: its launchers' ``check_schedule``; TileLang: ``make_spec`` and the kernel's context
    with both operands K-major, bmm's ``check_bmm_schedule``, the block-scaled spec and its
    context. Not checked: shared memory, the grid (int32 tile walk, Stream-K's programs),
    lowering, and TileLang's block_n no power of two with B MN-major. Cached when it passes
    (building a TileLang context costs about 80 us: empty problems come in loops, e.g. over
    experts that got no tokens); an error raises again each time."""
    if backend == "triton":
        from tlgemm.triton.launch import check_schedule

        check_schedule(schedule, a_dtype, batched=op == "bmm", blockscaled=op == "blockscaled")
        return
    from tlgemm.tilelang import launch

    # num_sms=1: the specs' grid bound, which no rule checked here reads
    if op == "blockscaled":
        launch.blockscaled_spec(a_dtype, b_dtype, out_dtype, schedule, num_sms=1).context()
        return
    if op == "bmm":
        launch.check_bmm_schedule(schedule)
    launch.make_spec(a_dtype, b_dtype, out_dtype, schedule, num_sms=1).context()


_SCALARS: dict[tuple[float, torch.device], torch.Tensor] = {}


def _scalar(value: float, device: torch.device) -> torch.Tensor:
    """A cached one-element float32 tensor (addmm's alpha as the kernel's per-tensor scale)."""
    key = (value, device)
    t = _SCALARS.get(key)
    if t is None:
        if len(_SCALARS) >= 64:
            _SCALARS.clear()
        t = _SCALARS[key] = torch.full((1,), value, dtype=torch.float32, device=device)
    return t


# ---- eager implementations (also the bodies of the torch.library ops) ---------------------


def _matmul_eager(a, b, out=None, out_dtype=None, backend="auto", schedule=None, repeat_key=None):
    M, N, K, _ = _check_pair(a, b, 2)
    out_dtype = _check_out("matmul", out, out_dtype, (M, N), {"a": a, "b": b})
    if a.is_neg() or b.is_neg():  # a lazily negated view: resolved (a copy), and no repeat of this launch
        a, b, repeat_key = a.resolve_neg(), b.resolve_neg(), None
    if not (M and N and K):
        return _empty("matmul", a, b, out, out_dtype, (M, N), backend, schedule)
    return _gemm("matmul", a, b, M, N, K, 1, out, out_dtype, backend, schedule, repeat_key=repeat_key)


def _bmm_eager(a, b, out=None, out_dtype=None, backend="auto", schedule=None):
    M, N, K, batch = _check_pair(a, b, 3)
    out_dtype = _check_out("bmm", out, out_dtype, (batch, M, N), {"a": a, "b": b})
    a, b = a.resolve_neg(), b.resolve_neg()
    if not (batch and M and N and K):
        return _empty("bmm", a, b, out, out_dtype, (batch, M, N), backend, schedule)
    return _gemm("bmm", a, b, M, N, K, batch, out, out_dtype, backend, schedule)


def _addmm_eager(bias, a, b, alpha=1.0, beta=1.0, out=None, out_dtype=None, backend="auto", schedule=None):
    M, N, K, _ = _check_pair(a, b, 2)
    out_dtype = _check_out("addmm", out, out_dtype, (M, N), {"a": a, "b": b})
    route = _bias_route(bias, M, N, a.device)
    a, b, bias = a.resolve_neg(), b.resolve_neg(), _own_bias(bias.resolve_neg(), out)
    if not (M and N and K):
        result = _empty("addmm", a, b, out, out_dtype, (M, N), backend, schedule)
        return result.add_(bias, alpha=beta) if K == 0 and result.numel() and beta != 0 else result
    scale_a = None if alpha == 1 else _scalar(float(alpha), a.device)
    kernel_bias = after = None
    if beta != 0 and route == "full":
        after = bias
    elif beta != 0:
        kernel_bias = bias.reshape(1).expand(N) if route == "scalar" else bias.reshape(N)
        if beta != 1:  # scaled in float32: beta·bias may overflow (or round in) the bias's own dtype
            kernel_bias = kernel_bias.float() * beta
    if after is not None and _result_dtype("addmm", a.dtype, b.dtype, out_dtype) == torch.float16:
        # float16 ends at 65504: alpha·(a @ b) rounded to it first may overflow where the sum fits, so the sum is
        # taken in float32 and rounded once, as torch.addmm does (bfloat16 has float32's range)
        wide = _gemm("addmm", a, b, M, N, K, 1, None, torch.float32, backend, schedule, scale_a=scale_a)
        out = torch.empty((M, N), dtype=torch.float16, device=a.device) if out is None else out
        return torch.add(wide, after, alpha=beta, out=out)
    result = _gemm("addmm", a, b, M, N, K, 1, out, out_dtype, backend, schedule, scale_a=scale_a, bias=kernel_bias)
    return result if after is None else result.add_(after, alpha=beta)


def _scaled_mm_eager(a, b, scale_a, scale_b, bias=None, out=None, out_dtype=None, backend="auto", schedule=None):
    M, N, K, _ = _check_pair(a, b, 2)
    op = "blockscaled" if _scale_kind(scale_a, scale_b, M, N, K, a.device) else "scaled_mm"
    out_dtype = _check_out(op, out, out_dtype, (M, N), {"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b})
    a, b, scale_a, scale_b = a.resolve_neg(), b.resolve_neg(), scale_a.resolve_neg(), scale_b.resolve_neg()
    if bias is not None:
        _check_scaled_mm_bias(bias, M, N, a.device)
        bias = _own_bias(bias.resolve_neg(), out)
    if not (M and N and K):
        result = _empty(op, a, b, out, out_dtype, (M, N), backend, schedule)
        return result.add_(bias) if K == 0 and result.numel() and bias is not None else result
    return _gemm(op, a, b, M, N, K, 1, out, out_dtype, backend, schedule,
                 scale_a=scale_a, scale_b=scale_b, bias=bias)


# ---- public functions ---------------------------------------------------------------------


def _schedule_arg(schedule) -> str | None:
    """A Schedule as the ops' string argument: its ``text``, computed when it was built, which
    torch.compile reads as a constant (guarded by value). Its int fields, read one by one,
    became symbolic once a second schedule was seen, and the recompile failed."""
    if schedule is None:
        return None
    _check_schedule(schedule)
    return getattr(schedule, "text", None) or str(schedule)  # unpickled from before Schedule had its text


@functools.lru_cache(maxsize=256)
def _schedule_from_arg(text: str | None) -> Schedule | None:
    return None if text is None else Schedule.parse(text)


def _needs_grad(a, b, *more) -> bool:
    """Whether autograd must see this call (an input requires grad, grad mode on). Two plain
    attribute reads for matmul's operands (its repeated calls pass here); a non-tensor
    counts as not requiring grad (validation names it)."""
    try:
        wanted = a.requires_grad or b.requires_grad
    except AttributeError:
        wanted = False
    for t in more:
        wanted = wanted or getattr(t, "requires_grad", False)
    return wanted and torch.is_grad_enabled()


_AUTOCAST_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _autocast(out, *tensors):
    """``tensors`` as torch.mm, addmm and bmm take them under autocast (torch.amp's ops that
    autocast to lower precision): in an autocast region of their device type, and without
    out= (whose variants autocast leaves alone), float32/float16/bfloat16 ones are cast to
    its dtype; otherwise they are returned as they are. One C call outside any region."""
    if out is not None or not torch._C._is_any_autocast_enabled():
        return tensors
    device = next((t.device.type for t in tensors if isinstance(t, torch.Tensor)), None)
    # the devices tlgemm runs on (cpu: Triton's interpreter); torch.is_autocast_enabled raises for
    # others (meta), which under torch.compile no except clause catches
    if device not in ("cuda", "cpu") or not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype in _AUTOCAST_FLOATS else t for t in tensors)


#: Tensor types the kernels take as they are (a Parameter is a plain tensor to them); any other
#: subclass (FakeTensor, DTensor, ...) dispatches through the op.
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _through_op(a, b, *more) -> bool:
    """Whether the call must go through its torch.library op rather than straight to the kernels:
    something records or redirects torch ops, which a direct launch would bypass (torch.compile,
    torch.jit.trace, a dispatch mode such as make_fx's or FakeTensorMode, a functorch transform
    such as vmap, a tensor subclass), or autograd must see it (an input requires grad, grad mode
    on). Torch-function modes (``with torch.device(...)``) do not count. Forward-mode AD is
    refused (``_refuse_forward_ad``). A few C calls and attribute reads on plain tensors (matmul's
    repeated calls pass here); a non-tensor argument goes on to the eager path's validation."""
    if torch.compiler.is_compiling():
        _refuse_forward_ad((a, b, *more), functorch=False)  # torch.compile does not trace functorch's stack
        return True
    if (torch._C._is_tracing() or torch._C._len_torch_dispatch_stack()
            or torch._C._functorch.peek_interpreter_stack() is not None or _forward_ad._current_level >= 0):
        _refuse_forward_ad((a, b, *more), functorch=True)
        return True
    if type(a) is torch.Tensor and type(b) is torch.Tensor and not more:
        return _needs_grad(a, b)
    if any(type(t) not in _PLAIN_TENSORS and isinstance(t, torch.Tensor) for t in (a, b, *more)):
        return True
    return _needs_grad(a, b, *more)


def _refuse_forward_ad(tensors, functorch: bool) -> None:
    """NotImplementedError under forward-mode AD (one of ``tensors`` a dual tensor of
    torch.autograd.forward_ad, or with ``functorch`` a torch.func.jvp / jacfwd transform active):
    the ops have reverse-mode gradients only, and torch.func would drop their tangents silently
    (zeros)."""
    dual = _forward_ad._current_level >= 0 and any(
        isinstance(t, torch.Tensor) and _forward_ad.unpack_dual(t).tangent is not None for t in tensors)
    if dual or functorch and any(i.key() == torch._C._functorch.TransformType.Jvp
                                 for i in torch._functorch.pyfunctorch.retrieve_all_functorch_interpreters()):
        raise NotImplementedError("tlgemm's GEMMs have no forward-mode AD (torch.autograd.forward_ad, torch.func.jvp "
                                  "or jacfwd): use reverse mode (backward, torch.autograd.grad) or torch's own matmul "
                                  "there")


def _on_meta(t) -> bool:
    """A meta tensor: no kernel can run, and the ops' fake implementations give the result's
    shape and dtype, as they do for a call that needs autograd."""
    return isinstance(t, torch.Tensor) and t.device.type == "meta"


def _op_result(result: torch.Tensor, out):
    """Copy an op's result into a given out (the ops are functional; under autograd the copy is
    recorded, so a result written to out stays differentiable)."""
    if out is None:
        return result
    if out.shape != result.shape or out.dtype != result.dtype:
        raise ValueError(f"out: expected shape {list(result.shape)} and dtype {result.dtype}, "
                         f"got {list(out.shape)} and {out.dtype}")
    if out.device != result.device:
        raise ValueError(f"out: on {out.device}, but a is on {result.device}; all tensors must be on one device")
    return out.copy_(result)


def _op_dtype(op, out, out_dtype, backend, reads, more=()):
    """The op path's checks of the arguments the eager path checks first (the ops' schema would
    reject them with the dispatcher's message, or out.copy_ after the kernel ran; ``reads``:
    (name, tensor) pairs out must not share memory with; ``more``: other (name, tensor or
    None) arguments), and its out_dtype: out's dtype when given."""
    _check_backend(backend)
    for name, t in (*reads, *((name, t) for name, t in more if t is not None)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.is_nested:  # the ops' dispatcher has no nested kernel (other layouts: the ops' own checks)
            check_strided(name, t)
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype: expected a torch.dtype, got {type(out_dtype).__name__}")
    if out is None:
        return out_dtype
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out: expected a torch.Tensor, got {type(out).__name__}")
    check_strided("out", out)
    if out.is_leaf and out.requires_grad and torch.is_grad_enabled():
        raise ValueError("out: a leaf tensor that requires grad, which autograd cannot record a write into; pass an "
                         "out that does not require grad (or none)")
    for name, t in reads:  # a sparse input has no storage for check_out_reads to compare
        check_strided(name, t)
    check_out_dtype(out, out_dtype)
    a, b = reads[0][1], reads[1][1]
    _result_dtype(op, a.dtype, b.dtype, out.dtype, source="out")
    if not torch.compiler.is_compiling():  # storage pointers and the negative bit are not traceable
        check_not_negated("out", out)
        check_no_overlap("out", out)
        check_out_reads(out, reads)
    return out.dtype


def matmul(a, b, *, out=None, out_dtype=None, backend="auto", schedule=None):
    """a [M, K] @ b [K, N] -> [M, N] (torch.mm), on the GPU tlgemm picks (see explain).

    out: write here (shape [M, N]); out_dtype: the result's dtype (module docstring, "Dtypes");
    backend: "auto", "tilelang" or "triton"; schedule: a tlgemm.schedules.Schedule, or None
    for the autotune cache / select. Under autocast (torch.autocast) float inputs are cast to
    its dtype as torch.mm's are, unless out is given."""
    if out is None and torch._C._is_any_autocast_enabled():  # inline: matmul's repeat path passes here
        a, b = _autocast(out, a, b)
    if _through_op(a, b):
        return _matmul_op(a, b, out, out_dtype, backend, schedule)
    try:
        key = _repeat_key(a, b, out, out_dtype, backend, schedule)
        repeat = _REPEATS.get(key)
    except (AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse tensor has no strides
        key = repeat = None
    if repeat is not None and (out is None or not out.requires_grad and _apart(out, repeat[3], a, repeat[1])
                               and _apart(out, repeat[3], b, repeat[2])):
        launch = repeat[0]
        if _gpu_count() < 2:  # one GPU is the current one; skips _on_device's context (about 0.3 us a call)
            return launch(a, b, out)
        with _on_device(a.device):
            return launch(a, b, out)
    if _on_meta(a):
        return _matmul_op(a, b, out, out_dtype, backend, schedule)
    return _matmul_eager(a, b, out, out_dtype, backend, schedule, key)


def _matmul_op(a, b, out, out_dtype, backend, schedule):
    """matmul through torch.ops.tlgemm.matmul (``_through_op``'s cases and meta tensors)."""
    dtype = _op_dtype("matmul", out, out_dtype, backend, (("a", a), ("b", b)))
    result = torch.ops.tlgemm.matmul.default(a, b, dtype, backend, _schedule_arg(schedule))
    return _op_result(result, out)


def bmm(a, b, *, out=None, out_dtype=None, backend="auto", schedule=None):
    """a [B, M, K] @ b [B, K, N] -> [B, M, N] (torch.bmm: equal batch sizes, no broadcasting;
    an expanded, stride-0 batch is read without a copy on the Triton backend and copied once
    by TileLang's, whose 3-D TMA box needs a dense batch). Arguments (and autocast) as matmul."""
    a, b = _autocast(out, a, b)
    if _through_op(a, b) or _on_meta(a):
        dtype = _op_dtype("bmm", out, out_dtype, backend, (("a", a), ("b", b)))
        result = torch.ops.tlgemm.bmm.default(a, b, dtype, backend, _schedule_arg(schedule))
        return _op_result(result, out)
    return _bmm_eager(a, b, out, out_dtype, backend, schedule)


def addmm(bias, a, b, *, alpha=1, beta=1, out=None, out_dtype=None, backend="auto", schedule=None):
    """beta · bias + alpha · (a [M, K] @ b [K, N]) (torch.addmm), float32/float16/bfloat16 inputs.

    bias broadcasts to [M, N]: an [N] or [1, N] bias and alpha (a per-tensor scale) go into the
    kernel's epilogue (beta != 1 costs one [N] multiply, bias · beta, per call); a one-element
    bias is expanded to [N] first; any other shape ([M, 1], [M, N]) is added after the kernel, in
    the output dtype (one extra pass over the output: out += beta · bias), except for a float16
    output: there the kernel writes a float32 temporary and the sum is rounded once, as torch.addmm
    does, since alpha · (a @ b) rounded to float16 first may overflow where the sum fits (the
    temporary costs 4 more bytes an element of traffic). beta = 0 ignores
    bias (NaNs included), as torch does. out may be bias itself (torch.addmm(c, a, b, out=c)):
    a bias that shares memory with out is copied first; out must not share memory with a or b.
    Under autocast bias, a and b are cast as torch.addmm's are, unless out is given."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not isinstance(value, numbers.Real):
            kind = type(value)
            kind_name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
            raise TypeError(f"{name}: expected a real number (int, float, bool), got {kind_name}")
    alpha, beta = float(alpha), float(beta)  # torch's alpha= takes no Fraction, and a bool only for bool results
    bias, a, b = _autocast(out, bias, a, b)
    if _through_op(bias, a, b) or _on_meta(a):
        dtype = _op_dtype("addmm", out, out_dtype, backend, (("a", a), ("b", b)), (("bias", bias),))
        result = torch.ops.tlgemm.addmm.default(bias, a, b, alpha, beta, dtype, backend, _schedule_arg(schedule))
        return _op_result(result, out)
    return _addmm_eager(bias, a, b, alpha, beta, out, out_dtype, backend, schedule)


def scaled_mm(a, b, scale_a, scale_b, *, bias=None, out=None, out_dtype=None, backend="auto", schedule=None):
    """(a [M, K] @ b [K, N]) · scales + bias for 8-bit a, b (torch._scaled_mm); out_dtype default bfloat16.

    Scales (float32): per-tensor (one element each), per-row scale_a [M, 1] or [M] and/or
    per-column scale_b [1, N] or [N]; or block-wise (DeepSeek-V3 style, fp8 inputs, K a
    multiple of 128, any M and N): scale_a [M, K/128] (1x128 groups of a) with scale_b
    [ceil(N/128), K/128] (128x128 blocks of the weight w = b.T [N, K], as
    tlgemm.quantize_fp8_blockwise(w, (128, 128)) returns them). A scale_b laid out for
    torch._scaled_mm, [K/128, N/128], goes in as its .t(); where N and K have as many blocks
    the two layouts have one shape, so passing it untransposed is not detected.
    bias: [N], float. out (if given) must not share memory with a, b or the scales; a bias
    that shares it is copied first."""
    if _through_op(a, b, scale_a, scale_b, bias) or _on_meta(a):
        reads = (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b))
        dtype = _op_dtype("scaled_mm", out, out_dtype, backend, reads, (("bias", bias),))
        result = torch.ops.tlgemm.scaled_mm.default(a, b, scale_a, scale_b, bias, dtype, backend,
                                                    _schedule_arg(schedule))
        return _op_result(result, out)
    return _scaled_mm_eager(a, b, scale_a, scale_b, bias, out, out_dtype, backend, schedule)


# ---- explain ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Explanation:
    """What explain() found: which backend, schedule, kernel and instruction, and why."""

    op: str
    problem: str
    target: Target
    backend: str
    schedule: Schedule | None
    kernel: str
    instruction: str
    reasons: tuple[str, ...]
    selection: Selection | None

    def __str__(self) -> str:
        lines = [f"tlgemm.{self.op}: {self.problem}",
                 f"target:      {self.target}" + ("  [analysis target]" if self.target.analysis else ""),
                 f"backend:     {self.backend}",
                 f"kernel:      {self.kernel}",
                 f"instruction: {self.instruction}",
                 f"schedule:    {self.schedule if self.schedule is not None else '-'}",
                 "why:", *(f"  - {reason}" for reason in self.reasons)]
        if self.selection is not None:
            lines += ["selection:", *("  " + line for line in str(self.selection).splitlines())]
        return "\n".join(lines)


def _instruction(plan: _Plan, a_dtype, b_dtype, a_major: str, b_major: str, tf32: bool) -> str:
    """The tensor-core instruction, from WGMMAEmitter on sm_90; majors "K" or "MN" (A, B)."""
    target = plan.target
    if target.vendor == "interpreter":
        return "none: Triton's interpreter runs tl.dot with numpy on the CPU"
    if a_dtype == torch.float32 and not tf32:
        return ("no tensor-core instruction: tl.dot in full float32 precision runs as FMA on the CUDA cores "
                "(TF32 is off; wgmma and mma take float32 only as TF32)")
    if target.vendor == "hip":
        if target.arch.startswith("gfx942") and {a_dtype, b_dtype} & set(_FP8):
            return ("v_mfma on float16 (Triton widens OCP float8 e4m3fn/e5m2 to float16 on gfx942, whose fp8 MFMA "
                    "takes the FNUZ formats: fp8 runs at float16's rate there)")
        return f"v_mfma (Triton's compiler chooses it for {target.arch})"
    if not target.hopper:
        return f"mma.sync (Triton's compiler chooses it for {target.arch}; wgmma needs sm_90)"
    s = plan.schedule
    if s is not None and s.is_swap_ab:  # the kernel multiplies Bᵀ·Aᵀ: its A is b, read as b.T
        a_dtype, b_dtype, a_major, b_major = b_dtype, a_dtype, b_major, a_major
    ta, tb = _WGMMA_TYPE[a_dtype], _WGMMA_TYPE[b_dtype]
    acc = "s32" if a_dtype == torch.int8 else "f32"
    if s is None:
        return f"wgmma.m64nNk32.{acc}.{ta}.{tb} (N chosen by the block-scaled launcher), promoted per 128-deep K block"
    from tlgemm.macros.emitter import WGMMAEmitter

    sixteen = a_dtype.itemsize == 2
    majors = dict(a_major=a_major if sixteen else "K", b_major=b_major if sixteen else "K")
    try:
        em = WGMMAEmitter(ta, tb, acc, block_m=s.block_m, block_n=s.block_n, block_k=s.block_k,
                          warpgroups_m=s.num_warpgroups, **majors)
    except (ValueError, NotImplementedError) as err:
        return f"no wgmma for this tile: {err}"
    text = (f"wgmma.{em.instruction}.{acc}.{ta}.{tb}: {em.num_warpgroups} consumer warpgroup(s), each "
            f"{em.num_inst_m}x{em.num_inst_n} instructions x {em.num_k_atoms} K atoms per block_k; "
            f"A {majors['a_major']}-major {em.a_params.swizzle.name}, B {majors['b_major']}-major "
            f"{em.b_params.swizzle.name} swizzle")
    if plan.backend == "triton":
        text += " (WGMMAEmitter's choice for this tile; Triton's compiler picks its own for tl.dot)"
    return text


def explain(a, b, *, bias=None, scale_a=None, scale_b=None, out_dtype=None, backend="auto", schedule=None,
            gpu=None) -> Explanation:
    """Which backend, schedule, kernel and instruction a call would run, and why (nothing runs).

    The call explained: scaled_mm when scales are given (both), addmm with a bias, bmm for
    3-D inputs, else matmul. Tensors may be on the meta device (no data needed). gpu: None
    (the tensors' CUDA device; sm90 for CPU/meta tensors, Triton's interpreter for CPU tensors
    under TRITON_INTERPRET=1), a key of TARGETS ("sm90", "sm80", "gfx942"), "cuda[:N]", or a
    Target (tlgemm.api.Target, e.g. with another SM count). A caller's schedule is shown as
    given: whether the backend takes it is checked at the call."""
    if scale_a is None and scale_b is None:  # the call's autocast casts (not scaled_mm's)
        a, b, bias = _autocast(None, a, b, bias)
    plain = bias is None and scale_a is None and scale_b is None  # addmm and scaled_mm take matrices only
    ndim = 3 if plain and isinstance(a, torch.Tensor) and a.dim() == 3 else 2
    M, N, K, batch = _check_pair(a, b, ndim)
    epilogue = "none"
    if scale_a is not None or scale_b is not None:
        if scale_a is None or scale_b is None:
            raise ValueError("scale_a, scale_b: scaled_mm takes both")
        block = _scale_kind(scale_a, scale_b, M, N, K, a.device)
        op = "blockscaled" if block else "scaled_mm"
        epilogue = ("block-wise scales promoted per 128-deep K block" if block else
                    f"scale_a {'per-tensor' if scale_a.numel() == 1 else 'per-row'}, "
                    f"scale_b {'per-tensor' if scale_b.numel() == 1 else 'per-column'}")
        if bias is not None:
            _check_scaled_mm_bias(bias, M, N, a.device)
            epilogue += ", bias [N]"
    elif bias is not None:
        op = "addmm"
        route = _bias_route(bias, M, N, a.device)
        epilogue = "alpha as a per-tensor scale; " + {
            "scalar": "the one-element bias expanded to [N], added in the epilogue",
            "vector": "bias [N] added in the epilogue",
            "full": f"the {list(bias.shape)} bias added after the kernel (one extra pass over the output; to a "
                    "float32 temporary the kernel writes, where the output is float16)"}[route]
    else:
        op = "bmm" if ndim == 3 else "matmul"
    dims = f"B={batch} M={M} N={N} K={K}" if ndim == 3 else f"M={M} N={N} K={K}"
    target = _explain_target(gpu, a.device)
    if not (M and N and K and batch):
        _check_backend(backend)  # the checks of the empty call (_empty), for the explained target
        _check_schedule(schedule)
        dtype = _result_dtype(op, a.dtype, b.dtype, out_dtype)
        _check_empty_schedule(op, a, b, N, dtype, backend, schedule, target)
        return Explanation(_PUBLIC[op], f"{dims}, {_name(a.dtype)} @ {_name(b.dtype)} -> {_name(dtype)}", target,
                           "none", None, "none: an empty problem returns zeros (or the bias) without a launch", "none",
                           ("M, N, K or the batch is 0",), None)
    tf32 = a.dtype == torch.float32 and matmul_uses_tf32()
    info: dict = {}
    result_dtype = _result_dtype(op, a.dtype, b.dtype, out_dtype)
    wide = op == "addmm" and route == "full" and result_dtype == torch.float16  # as _addmm_eager runs it
    kernel_out = torch.float32 if wide else out_dtype
    plan = _make_plan(op, batch * M, N, K, a.dtype, b.dtype, kernel_out, a.device, backend, schedule, tf32,
                      target=target, info=info, layout=_call_layout(a, b),
                      b_k_major=_tilelang_layout("b", b, K)[1] == "K")
    reasons = [f"backend {plan.backend}: {info['backend']}", f"schedule: {info['schedule']}"]
    key = _plan_key(op, batch * M, N, K, a, b, kernel_out, backend, schedule, tf32)
    ran = None if target.analysis else _PLANS.get(key)
    if ran is not None and ran.schedule != plan.schedule:
        plan = ran
        reasons.append(f"an earlier call in this process runs {ran.schedule} (the backend rejected the schedules "
                       "select() ranks above it)")
    if a.device.type != "cuda":
        reasons.append(f"the tensors are on {a.device}: analysed for {target.name} ({target.arch})")
    if tf32:
        reasons.append("float32 inputs computed in TF32 (torch.backends.cuda.matmul.fp32_precision)")
    negated = [name for name, t in (("a", a), ("b", b)) if t.is_neg()]
    if negated:
        reasons.append(f"{' and '.join(negated)}: torch's negative bit (a lazily negated view) is resolved into a "
                       "copy (t.resolve_neg()) before the launch")
    majors = []
    tilelang_layouts = _tilelang_layouts(a, b, K) if plan.backend == "tilelang" else None
    for i, (name, t) in enumerate((("a", a), ("b", b))):
        if tilelang_layouts:
            state, major = tilelang_layouts[i]
        else:
            why, order = _layout(t)
            if why is None:
                state = f"{order}-major, read as it is"
                major = "K" if (order == "row") == (name == "a") else "MN"
            else:
                state, major = f"copied once, K-major: {why}", "K"
            if plan.backend == "triton" and K * t.element_size() % 16:
                state = (f"{'copied K-major, then ' if why else f'{order}-major, '}copied K-major by the Triton "
                         "launcher with K zero-padded to whole 128-byte rows (rows of K that are no 16-byte multiple "
                         "load without vectors)")
                major = "K"
            elif plan.backend == "triton" and why is None and not loads_as_vectors(t):
                state = (f"{order}-major, copied K-major by the Triton launcher (its rows along the unit stride "
                         "are no 16-byte multiple, or its data is not 16-byte aligned: they would load without "
                         "vectors)")
                major = "K"
        reasons.append(f"{name} {list(t.shape)} strides {list(t.stride())}: {state}")
        majors.append(major)
    s = plan.schedule
    if plan.backend == "tilelang" and s is not None:
        reasons.extend(_read_once_notes(M, N, s))
    if s is None:
        family = "block-scaled FP8 GEMM"
    else:
        family = "Stream-K GEMM" if s.streamk_tiles else "persistent GEMM" if s.is_persistent else "GEMM"
        family = f"{'batched ' if op == 'bmm' else ''}{family}"
        if op != "bmm":
            family += f", {num_programs(M, N, K, s, target.num_sms)} programs"
        if s.cluster_m > 1:
            shared = "B" if s.raster == "m" else "A"
            family += f" in clusters of {s.cluster_m} (TMA multicast of {shared} where a pair's tiles share it)"
    kernel = f"tlgemm.{plan.backend}.{_KERNEL[op]}: {family}; epilogue: {epilogue}"
    problem = f"{dims}, {_name(a.dtype)} @ {_name(b.dtype)} -> {_name(result_dtype)}"
    return Explanation(_PUBLIC[op], problem, target, plan.backend, s, kernel,
                       _instruction(plan, a.dtype, b.dtype, majors[0], majors[1], tf32), tuple(reasons),
                       info.get("selection"))


# ---- autotune -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AutotuneResult:
    """The winner for one shape and dtype (schedule None when every candidate failed)."""

    M: int
    N: int
    K: int
    dtypes: tuple[str, str, str]
    backend: str
    schedule: Schedule | None
    time_us: float | None
    tflops: float | None
    tried: int
    failed: tuple[str, ...]  # "schedule: why" of candidates that did not compile, run or match


def _operands(M, N, K, dtype, layout, device, generator=None):
    """Random a [M, K], b [K, N] stored per ``layout`` ("nt": a row-major, b the transpose of
    a row-major [N, K]; "n"/"t" per operand, BLAS style); on the meta device, no data."""
    from tlgemm.testing import random_operand

    if layout not in ("nn", "nt", "tn", "tt"):
        raise ValueError(f"layout: expected nn, nt, tn or tt, got {layout!r}")

    def make(shape):
        if torch.device(device).type == "meta":
            return torch.empty(shape, dtype=dtype, device="meta")
        return random_operand(shape, dtype, generator=generator, device=device)

    a = make((M, K) if layout[0] == "n" else (K, M))
    b = make((K, N) if layout[1] == "n" else (N, K))
    return (a if layout[0] == "n" else a.t()), (b if layout[1] == "n" else b.t())


class _Progress:
    """tqdm when installed, else one line per step on stderr."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.total, self.done, self.enabled = total, 0, enabled
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, desc="tlgemm autotune", unit="cand", file=sys.stderr)

    def step(self, text: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update()
        elif self.enabled:
            print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def autotune(shapes: Iterable[tuple[int, int, int]], dtypes=torch.bfloat16, *, out_dtype=None, backend="auto",
             layout="nt", candidates=8, device=None, cache: AutotuneCache | None = None, warmup=25, rep=100,
             progress=True) -> list[AutotuneResult]:
    """Time select()'s best ``candidates`` schedules for each (M, N, K) and dtype with
    triton.testing.do_bench (median; random inputs stored per ``layout``), on the TileLang
    backend also the 2-CTA cluster form (``Schedule.cluster``) of each persistent one without
    Stream-K (select() does not model multicast, so only timing decides); a candidate is timed
    only after its result matches the float64 reference (tlgemm.testing tolerances). Winners go
    into ``cache`` under ``layout``; matmul/addmm/scaled_mm consult the default AutotuneCache()
    (``TLGEMM_CACHE_DIR`` or its default folder) with schedule=None for calls whose a and b are
    stored so, so a cache elsewhere serves only its own readers. Arguments are checked before
    anything is timed (shapes: an iterable of (M, N, K) positive ints; dtypes: a torch.dtype or a
    list or tuple of them; candidates: an int >= 1; cache: an AutotuneCache whose folder can be
    created); two shapes whose M share a bucket at one (N, K) (``m_bucket``: one cache entry)
    are refused. Returns one AutotuneResult per (shape, dtype)."""
    if isinstance(candidates, bool) or not isinstance(candidates, int):
        raise TypeError(f"candidates: expected an int >= 1 (select()'s best schedules to time), got {candidates!r}")
    if candidates < 1:
        raise ValueError(f"candidates: expected an int >= 1 (select()'s best schedules to time), got {candidates!r}")
    if cache is not None and not isinstance(cache, AutotuneCache):
        raise TypeError(f"cache: expected a tlgemm.schedules.AutotuneCache or None, got {type(cache).__name__}")
    dtype_list = list(dtypes) if isinstance(dtypes, (list, tuple)) else [dtypes]
    for dtype in dtype_list:
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtypes: expected a torch.dtype or a list or tuple of them, got {dtypes!r}")
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Iterable):
        raise TypeError(f"shapes: expected an iterable of (M, N, K) tuples, got {shapes!r}")
    shape_list = [tuple(shape) if isinstance(shape, Iterable) and not isinstance(shape, (str, bytes)) else shape
                  for shape in shapes]
    for shape in shape_list:
        if not isinstance(shape, tuple) or len(shape) != 3 or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in shape):
            raise TypeError(f"shapes: each shape is (M, N, K) of positive ints, got {shape!r}")
        if not all(x > 0 for x in shape):
            raise ValueError(f"shapes: each shape is (M, N, K) of positive ints, got {shape!r}")
        M, N, K = shape
        for name, numel in (("a", M * K), ("b", K * N), ("out", M * N)):
            _check_elements(f"shapes: {shape}: {name}", numel)
    entries: dict = {}
    for index, shape in enumerate(shape_list):
        M, N, K = shape
        first = entries.setdefault((m_bucket(M), N, K), index)
        if first != index:
            m_min, m_max = m_bucket(M)
            raise ValueError(f"shapes: {shape_list[first]} and {shape} share one cache entry (M bucket "
                             f"{m_min}..{m_max} at N={N}, K={K}; tlgemm.schedules.m_bucket), so the second would "
                             "overwrite the first's winner; tune one M per bucket")
    if device is None:
        if not torch.cuda.is_available():
            raise ValueError("device: autotune times kernels on a GPU, but torch.cuda.is_available() is False")
        device = torch.device("cuda", torch.cuda.current_device())
    if isinstance(device, int) and not isinstance(device, bool):
        device = f"cuda:{device}"  # torch's reading of a bare index
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: expected a torch.device, a device string such as 'cuda:0' or a CUDA device "
                         f"index, got {device!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device}, but torch.cuda.is_available() is False here")
    target = _kernel_target(device)
    if target is None:
        raise ValueError(f"device: {device}; autotune times tlgemm's kernels on a CUDA (or ROCm) GPU (a CPU only "
                         "under TRITON_INTERPRET=1, Triton's interpreter)")
    cache = cache if cache is not None else AutotuneCache()
    try:
        cache.directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cache: cannot create its folder {cache.directory}: {err.strerror or err}") from None
    jobs = []
    for dtype in dtype_list:
        for M, N, K in shape_list:
            tf32 = dtype == torch.float32 and matmul_uses_tf32()
            info: dict = {}
            b_k_major = _tilelang_layout("b", _operands(M, N, K, dtype, layout, "meta")[1], K)[1] == "K"
            plan = _make_plan("matmul", M, N, K, dtype, dtype, out_dtype, device, backend, None, tf32,
                              target=target, info=info, use_cache=False, layout=layout, b_k_major=b_k_major)
            pool = [c.schedule for c in info["selection"].candidates
                    if runs_schedule(plan.backend, "matmul", c.schedule, b_k_major)]
            pool = list(dict.fromkeys(pool))[:candidates]
            clustered = [s.cluster(2) for s in pool if s.is_persistent and not s.streamk_tiles]
            pool += [s for s in clustered if runs_schedule(plan.backend, "matmul", s, b_k_major)]
            jobs.append((M, N, K, dtype, tf32, plan, pool))
    bar = _Progress(sum(len(job[-1]) for job in jobs), progress)
    results = []
    try:
        for M, N, K, dtype, tf32, plan, pool in jobs:
            with _on_device(device):
                best, failed = _time_candidates(plan, pool, M, N, K, dtype, tf32, layout, device, warmup, rep, bar)
            keys = _dtype_key(dtype, dtype, plan.out_dtype, tf32)
            if best is None:
                results.append(AutotuneResult(M, N, K, keys, plan.backend, None, None, None, len(pool), failed))
                continue
            us, tflops = best[1] * 1e3, 2 * M * N * K / best[1] * 1e-9
            cache.put(target.name, plan.backend, keys, M, N, K, best[0], layout=layout,
                      info={"time_us": us, "tflops": tflops, "candidates": len(pool)})
            results.append(AutotuneResult(M, N, K, keys, plan.backend, best[0], us, tflops, len(pool), failed))
    finally:
        bar.close()
        _forget_plans()
    return results


def _time_candidates(plan, pool, M, N, K, dtype, tf32, layout, device, warmup, rep, bar):
    """((fastest schedule, ms) or None, failures) over ``pool`` on random inputs; each candidate
    is checked against the float64 reference (output NaN-poisoned) before it is timed."""
    from triton.testing import do_bench

    from tlgemm.testing import assert_gemm_close, reference_gemm

    a, b = _operands(M, N, K, dtype, layout, device)
    if plan.backend == "triton":
        a, b = _operand("a", a), _operand("b", b)
    ref = reference_gemm(a, b)
    out = torch.empty((M, N), dtype=plan.out_dtype, device=device)
    poison = float("nan") if out.is_floating_point() else torch.iinfo(out.dtype).min
    best, failed = None, []
    for s in pool:
        try:
            plan.launch(a, b, s, out.fill_(poison), None, None, None)
            assert_gemm_close(out, ref, dtype, allow_tf32=tf32)
            ms = do_bench(functools.partial(plan.launch, a, b, s, out, None, None, None), warmup=warmup, rep=rep,
                          return_mode="median")
        except Exception as err:  # a candidate that fails to compile, launch or match is skipped
            failed.append(f"{s}: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}")
            bar.step(f"{M}x{N}x{K} {_name(dtype)}: failed")
            continue
        if best is None or ms < best[1]:
            best = (s, ms)
        bar.step(f"{M}x{N}x{K} {_name(dtype)}: {2 * M * N * K / ms * 1e-9:.0f} TFLOP/s")
    return best, tuple(failed)


from tlgemm import ops as _ops  # noqa: E402,F401  (registers torch.ops.tlgemm.*; it imports this module)
