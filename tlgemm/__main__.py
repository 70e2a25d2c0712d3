"""The ``tlgemm`` command (also ``python -m tlgemm``).

    tlgemm run M N K --dtype bf16 [--backend auto] [--layout nt]   run, check, TFLOP/s vs cuBLAS (GPU)
    tlgemm explain M N K --dtype bf16 [--gpu sm90]                 backend, schedule, kernel, instruction, why
    tlgemm inspect M N K --dtype bf16 --emit tir|cuda|ptx|sass      the TileLang kernel's code
    tlgemm autotune 4096x4096x4096 ... --dtype bf16                 time candidates, store winners (GPU)
    tlgemm bench ...                                                the benchmark harness (tlgemm.bench)
    tlgemm layout [--dtype e4m3 ...]                                operand layouts and WGMMA descriptors

``layout`` needs no GPU (it imports TileLang, and with it torch, for the emitter's widest
instruction); the others import torch, TileLang and Triton when they run. Exit
status: 0; 1 where ``run``'s check or an ``autotune`` entry failed, or where stdout was closed
early (``tlgemm explain ... | head -1``: the rest of the output is dropped, no traceback); 2 for
an invalid request; ``bench`` returns tlgemm.bench's.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys

from tlgemm.macros.operands import (SMEM_ADDRESS_LIMIT, Major, choose_swizzle, decode, describe, descriptor_for,
                                   encode)
from tlgemm.schedules.schedule import INT32_MAX

#: --dtype names -> (torch dtype name, TF32 on).
_DTYPES = {"fp32": ("float32", False), "tf32": ("float32", True), "fp16": ("float16", False),
           "bf16": ("bfloat16", False), "e4m3": ("float8_e4m3fn", False), "e5m2": ("float8_e5m2", False),
           "int8": ("int8", False)}
_OUT_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int32": "int32"}
_LAYOUTS = ("nt", "nn", "tn", "tt")
#: Every wgmma is m64: a warpgroup reads its A tile in 64-row instructions (PTX ISA 9.7.15).
_INST_M = 64


def _operand_params(name: str, tile_mn: int, tile_k: int, dtype: str, major: str):
    """describe() of operand ``name`` ("A" or "B") of a `tlgemm layout` tile, as WGMMAEmitter lays
    it out on one warpgroup: A read by m64 instructions, B by the widest legal N that tiles
    block_n (``widest_n``), an MN-major operand swizzled for that instruction extent; the tile
    must fit the shared memory a descriptor reaches. A broken rule is reported against the
    option that set the value."""
    from tlgemm.macros.emitter import widest_n

    mn_option = "--block-m" if name == "A" else "--block-n"
    renamed = {"dtype": "--dtype", "major": f"--{name.lower()}-major", "tile_mn": mn_option, "tile_k": "--block-k",
               "extent": mn_option}
    try:
        whole = tile_mn > 0 and tile_mn % 8 == 0  # else describe() names the rule
        inst_mn = _INST_M if name == "A" else widest_n(tile_mn, dtype) if whole else None
        mn_major = whole and Major.parse(major) is Major.MN
        params = describe(tile_mn, tile_k, dtype, major, choose_swizzle(min(inst_mn, tile_mn), dtype) if mn_major
                          else None)
    except ValueError as err:
        field, _, rule = str(err).partition(": ")
        if field in renamed:
            raise ValueError(f"{renamed[field]}: {rule}") from None
        raise ValueError(f"{mn_option}, --block-k: the {name} tile {tile_mn}x{tile_k}: {err}") from None
    try:
        params.check_instruction(inst_mn)
    except ValueError as err:
        raise ValueError(f"{mn_option}: {err} ({name} is read by m64n{inst_mn} wgmma instructions, the emitter's: "
                         "the widest N that tiles block_n)" if name == "B" else
                         f"--block-m: {err} (A is read by m{_INST_M} wgmma instructions)") from None
    if params.tile_bytes > SMEM_ADDRESS_LIMIT:
        raise ValueError(f"{mn_option}, --block-k: the {name} tile {tile_mn}x{tile_k} {params.dtype.name} is "
                         f"{params.tile_bytes} B, more than the {SMEM_ADDRESS_LIMIT} B of shared memory a "
                         "descriptor's 14-bit start address reaches")
    return params


def _describe_operand(name: str, params) -> list[str]:
    tile_mn, tile_k = params.tile_mn, params.tile_k
    rows, cols = params.smem_shape
    lines = [
        f"{name}: {tile_mn}x{tile_k} {params.dtype.name}, {params.major.value}-major -> shared "
        f"[{rows}, {cols}] ({params.tile_bytes} B), swizzle {params.swizzle.name} "
        f"(rows of {params.swizzle.span_bytes} B, atom {params.swizzle.atom_bytes} B, "
        f"align {params.swizzle.alignment} B, layout_type {params.swizzle.layout_type})",
        f"   LBO {params.leading_byte_offset} B, SBO {params.stride_byte_offset} B, "
        f"instruction K {params.inst_k}, {params.num_k_atoms} K atoms",
    ]
    for k0 in range(0, tile_k, params.inst_k):
        word = encode(descriptor_for(params, 0, k0, base=0))
        d = decode(word)
        lines.append(
            f"   k0={k0:<4} desc {word:#018x}  start={d.start_address:#07x} lbo={d.leading_byte_offset} "
            f"sbo={d.stride_byte_offset} base_offset={d.base_offset} layout={d.layout_type.name}")
    return lines


def cmd_layout(args) -> int:
    """Print operand layouts, swizzles and descriptors of one WGMMA tile (nothing where the
    tile is invalid: the error alone)."""
    a = _operand_params("A", args.block_m, args.block_k, args.dtype, args.a_major)
    b = _operand_params("B", args.block_n, args.block_k, args.dtype, args.b_major)
    lines = _describe_operand("A", a) + _describe_operand("B", b)
    print(f"tile {args.block_m}x{args.block_n}x{args.block_k} {args.dtype} "
          f"(A {args.a_major}-major, B {args.b_major}-major); descriptors at shared address 0")
    for line in lines:
        print(line)
    return 0


# ---- shared pieces of run / explain / inspect / autotune -----------------------------------


def _dtype_spec(name: str) -> tuple[str, bool]:
    """(torch dtype name, TF32 on) of a --dtype name."""
    if name not in _DTYPES:
        raise ValueError(f"--dtype: {name!r} is not one of {', '.join(_DTYPES)}")
    return _DTYPES[name]


def _input_dtype(name: str):
    """The torch dtype of a --dtype name; fp32 and tf32 also set TF32 for this process, off
    (torch.backends.cuda.matmul.fp32_precision "ieee") and on ("tf32"), whatever it was."""
    import torch

    dtype, tf32 = _dtype_spec(name)
    if dtype == "float32":
        torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
    return getattr(torch, dtype)


def _output_dtype(name: str | None):
    import torch

    return None if name is None else getattr(torch, _OUT_DTYPES[name])


def _meta_operands(args, dtype):
    """a [M, K] and b [K, N] on the meta device, stored per --layout (no memory). An operand of
    2**31 elements or more is the API's ValueError, raised before torch sizes its storage
    (which overflows, a RuntimeError, for sizes near 2**63)."""
    import torch

    from tlgemm.api import _check_elements

    _check_elements("a", args.M * args.K)
    _check_elements("b", args.K * args.N)
    layout = args.layout
    a = torch.empty((args.M, args.K) if layout[0] == "n" else (args.K, args.M), dtype=dtype, device="meta")
    b = torch.empty((args.K, args.N) if layout[1] == "n" else (args.N, args.K), dtype=dtype, device="meta")
    return (a if layout[0] == "n" else a.t()), (b if layout[1] == "n" else b.t())


def _target(args):
    """The target of --gpu (default: this machine's GPU, else sm90) and --sm-count."""
    import torch

    from tlgemm.api import _explain_target

    if args.sm_count is not None and args.sm_count > INT32_MAX:
        raise ValueError(f"--sm-count: {args.sm_count} is more than 2**31 - 1 (the kernels take the SM count as "
                         "an int32)")
    gpu = args.gpu if args.gpu is not None else ("cuda" if torch.cuda.is_available() else "sm90")
    target = _explain_target(gpu, torch.device("meta"))
    if args.sm_count is None:
        return target
    return dataclasses.replace(target, num_sms=args.sm_count, name=f"{target.name} with {args.sm_count} SMs")


def _explain(args, a, b, out_dtype, backend=None):
    """explain for the command's problem, target and backend (``backend``, else --backend)."""
    import tlgemm

    return tlgemm.explain(a, b, out_dtype=out_dtype, backend=backend or args.backend, gpu=_target(args))


def _gpu(what: str):
    """The current CUDA device; a clear error where there is none."""
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"{what} runs kernels on a GPU, but torch.cuda.is_available() is False on this machine; "
                         "`tlgemm explain` and `tlgemm inspect --emit tir|cuda` work without one")
    return torch.device("cuda", torch.cuda.current_device())


# ---- commands -----------------------------------------------------------------------------


def cmd_explain(args) -> int:
    """Which backend, schedule, kernel and instruction would run, and why."""
    a, b = _meta_operands(args, _input_dtype(args.dtype))
    print(_explain(args, a, b, _output_dtype(args.out_dtype)))
    return 0


def wheel_disassembler() -> str | None:
    """The nvdisasm of NVIDIA's nvidia-cuda-nvdisasm wheel (the test extra installs it under
    site-packages/nvidia/cu*/bin), or None."""
    from pathlib import Path

    try:
        import nvidia
    except ImportError:
        return None
    found = [p for root in nvidia.__path__ for p in sorted(Path(root).glob("cu*/bin/nvdisasm"))
             if os.access(p, os.X_OK)]
    return str(found[-1]) if found else None


def _missing_cuda_tools(emit: str) -> list[str]:
    """The CUDA tools --emit ptx/sass needs that TileLang cannot find (nvcc under CUDA_HOME;
    nvdisasm or cuobjdump on PATH or under CUDA_HOME for SASS). The wheel's nvdisasm
    (``wheel_disassembler``) is put on PATH, where TileLang looks for it."""
    import shutil

    from tilelang import env

    def under_home(name: str) -> bool:
        return bool(env.CUDA_HOME) and os.path.exists(os.path.join(env.CUDA_HOME, "bin", name))

    missing = [] if under_home("nvcc") else ["nvcc"]
    if emit == "sass" and not any(shutil.which(t) or under_home(t) for t in ("nvdisasm", "cuobjdump")):
        wheel = wheel_disassembler()
        if wheel is None:
            missing.append("nvdisasm or cuobjdump")
        else:
            os.environ["PATH"] = os.pathsep.join((os.path.dirname(wheel), os.environ.get("PATH", "")))
    return missing


def cmd_inspect(args) -> int:
    """The TileLang kernel's code (TIR, CUDA, PTX or SASS) for the schedule explain chooses, with
    the operand majors the launcher reads (it copies some operands to K-major: _tilelang_layout)."""
    backend = importlib.import_module("tlgemm.tilelang")
    if not hasattr(backend, "kernel_source"):
        raise ValueError("inspect: tlgemm.tilelang.kernel_source is not in this installation")
    missing = _missing_cuda_tools(args.emit) if args.emit in ("ptx", "sass") else []
    if missing:
        from tilelang import env

        raise ValueError(f"--emit {args.emit} needs the CUDA toolkit's {' and '.join(missing)}, not found "
                         f"(CUDA_HOME={env.CUDA_HOME or 'unset'}, and PATH for the disassemblers); --emit tir "
                         "and --emit cuda need neither a toolkit nor a GPU")
    from tlgemm.api import _tilelang_layout

    if _dtype_spec(args.dtype) == ("float32", False):
        raise ValueError("--dtype: fp32 is float32 with TF32 off, which no TileLang kernel runs (wgmma takes float32 "
                         "only as TF32); inspect --dtype tf32 shows the TF32 kernel")
    dtype, out_dtype = _input_dtype(args.dtype), _output_dtype(args.out_dtype)
    target = _target(args)
    if not target.hopper:
        raise ValueError(f"--gpu: inspect shows TileLang kernels, which issue wgmma (sm_90 only); the target is "
                         f"{target.arch}")
    a, b = _meta_operands(args, dtype)
    explanation = _explain(args, a, b, out_dtype, backend="tilelang")
    a_major, b_major = _tilelang_layout("a", a, args.K)[1], _tilelang_layout("b", b, args.K)[1]
    code = backend.kernel_source(args.M, args.N, args.K, dtype, dtype, out_dtype, explanation.schedule,
                                 a_major=a_major, b_major=b_major, emit="tir" if args.emit == "tir" else "cuda",
                                 num_sms=explanation.target.num_sms, smem_limit=explanation.target.smem_bytes)
    if args.emit in ("ptx", "sass"):
        from tilelang import tvm
        from tilelang.contrib import nvcc

        with tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}):
            code = nvcc.get_ptx_from_source(code) if args.emit == "ptx" else nvcc.get_sass_from_source(code)
    print(f"// tlgemm inspect: {explanation.problem}; schedule {explanation.schedule}; "
          f"A {a_major}-major, B {b_major}-major; --emit {args.emit}")
    print(code)
    return 0


def cmd_run(args) -> int:
    """Run tlgemm.matmul once, check it against the float64 reference, time it against cuBLAS."""
    import torch
    from triton.testing import do_bench

    import tlgemm
    from tlgemm._checks import matmul_uses_tf32
    from tlgemm.api import _operands, _result_dtype
    from tlgemm.testing import assert_gemm_close, poisoned, reference_gemm

    device = _gpu("tlgemm run")
    dtype, out_dtype = _input_dtype(args.dtype), _output_dtype(args.out_dtype)
    tf32 = dtype == torch.float32 and matmul_uses_tf32()
    a, b = _operands(args.M, args.N, args.K, dtype, args.layout, device)
    # out poisoned first (NaN, or int32's minimum): an element of it left unwritten fails the check
    out = poisoned((args.M, args.N), _result_dtype("matmul", dtype, dtype, out_dtype), device)
    tlgemm.matmul(a, b, out=out, backend=args.backend)
    explanation = tlgemm.explain(a, b, out_dtype=out_dtype, backend=args.backend)
    print(f"tlgemm run: {explanation.problem}, layout {args.layout}, on {explanation.target.name}")
    print(f"  backend {explanation.backend}, schedule {explanation.schedule}")
    try:
        err = assert_gemm_close(out, reference_gemm(a, b), dtype, allow_tf32=tf32, what="tlgemm.matmul")
    except AssertionError as failure:
        print(f"  check: FAILED: {failure}")
        return 1
    print(f"  check: relative Frobenius error {err:.2e} against the float64 reference: ok")
    flop = 2 * args.M * args.N * args.K
    ms = do_bench(lambda: tlgemm.matmul(a, b, out=out, backend=args.backend), warmup=args.warmup, rep=args.rep,
                  return_mode="median")
    print(f"  tlgemm  {ms * 1e3:10.1f} us  {flop / ms * 1e-9:8.1f} TFLOP/s")
    cublas, why = _cublas(a, b, dtype, out.dtype)
    if cublas is not None:
        try:
            cublas()
        except RuntimeError as err:
            cublas, why = None, f"{why} failed: {(str(err).splitlines() or [''])[0]}"
    if cublas is None:
        print(f"  cuBLAS  not timed: {why}")
        return 0
    ms_ref = do_bench(cublas, warmup=args.warmup, rep=args.rep, return_mode="median")
    print(f"  cuBLAS  {ms_ref * 1e3:10.1f} us  {flop / ms_ref * 1e-9:8.1f} TFLOP/s  ({why})")
    print(f"  tlgemm / cuBLAS: {ms_ref / ms:.2f}x")
    return 0


def _cublas(a, b, dtype, out_dtype):
    """(a callable running cuBLAS on the same problem, what it is) or (None, why not)."""
    import torch

    if dtype.itemsize > 1:
        return (lambda: torch.matmul(a, b)), "torch.matmul"
    if dtype == torch.int8:
        if a.stride(1) != 1 or b.stride(0) != 1:
            return None, "torch._int_mm takes a row-major and b column-major (layout nt)"
        return (lambda: torch._int_mm(a, b)), "torch._int_mm"
    if a.stride(1) != 1 or b.stride(0) != 1:
        return None, "torch._scaled_mm takes a row-major and b column-major (layout nt)"
    one = torch.ones((), dtype=torch.float32, device=a.device)
    return (lambda: torch._scaled_mm(a, b, one, one, out_dtype=out_dtype)), "torch._scaled_mm, per-tensor scales 1"


def _tf32_groups(names: list[str]) -> list[list[str]]:
    """--dtype names (each once) cut into runs that one TF32 setting serves, in order: fp32 (TF32
    off) and tf32 (on) never share one."""
    if "fp32" in names and "tf32" in names:
        cut = max(names.index("fp32"), names.index("tf32"))
        return [names[:cut], names[cut:]]
    return [names]


def cmd_autotune(args) -> int:
    """Time select()'s best candidates per shape and dtype; store the winners in the cache.
    Each dtype is tuned under the TF32 setting it names (fp32 off, tf32 on); the caller's
    setting is restored afterwards."""
    import torch

    import tlgemm
    from tlgemm.schedules import AutotuneCache

    device = _gpu("tlgemm autotune")
    names = list(dict.fromkeys(args.dtype.split(",")))
    for name in names:  # every name before any timing
        _dtype_spec(name)
    shapes = list(dict.fromkeys(args.shapes))
    out_dtype = _output_dtype(args.out_dtype)
    cache = AutotuneCache(args.cache_dir) if args.cache_dir else AutotuneCache()
    try:  # before any timing: the winners are stored at the end
        os.makedirs(cache.directory, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--cache-dir: cannot create {cache.directory}: {err.strerror}") from err
    if not os.access(cache.directory, os.W_OK):
        raise ValueError(f"--cache-dir: {cache.directory} is not writable")
    precision, results = torch.backends.cuda.matmul.fp32_precision, []
    try:
        for group in _tf32_groups(names):
            dtypes = [_input_dtype(name) for name in group]
            results += tlgemm.autotune(shapes, dtypes, out_dtype=out_dtype, backend=args.backend, layout=args.layout,
                                       candidates=args.candidates, device=device, cache=cache)
    finally:
        torch.backends.cuda.matmul.fp32_precision = precision
    print(f"autotune cache: {cache.path}")
    for r in results:
        head = f"{r.M}x{r.N}x{r.K} {','.join(r.dtypes)} [{r.backend}]"
        if r.schedule is None:
            print(f"{head}: every one of {r.tried} candidates failed; first: {r.failed[0] if r.failed else '-'}")
        else:
            print(f"{head}: {r.schedule}  {r.time_us:.1f} us  {r.tflops:.1f} TFLOP/s  "
                  f"({r.tried} tried, {len(r.failed)} failed)")
    return 0 if all(r.schedule is not None for r in results) else 1


def cmd_bench(argv: list[str]) -> int:
    """Delegate to tlgemm.bench.main (the benchmark harness)."""
    try:
        bench = importlib.import_module("tlgemm.bench")
    except ModuleNotFoundError as err:
        if err.name != "tlgemm.bench":
            raise
        raise ValueError("bench: tlgemm.bench is not in this installation") from None
    return bench.main(argv)


# ---- parser -------------------------------------------------------------------------------


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected MxNxK with positive integers, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _problem_arguments(p: argparse.ArgumentParser, *, backend: bool = True) -> None:
    p.add_argument("M", type=_positive)
    p.add_argument("N", type=_positive)
    p.add_argument("K", type=_positive)
    p.add_argument("--dtype", default="bf16", choices=list(_DTYPES),
                   help="input dtype; fp32 and tf32 are float32 with TF32 off and on (they set "
                        "torch.backends.cuda.matmul.fp32_precision to ieee / tf32 whatever the environment says)")
    p.add_argument("--out-dtype", choices=list(_OUT_DTYPES), help="output dtype (default: the input's; bf16 for fp8, "
                                                                   "int32 for int8)")
    p.add_argument("--layout", default="nt", choices=_LAYOUTS,
                   help="storage of a and b, BLAS style: n = as given ([M, K], [K, N]), t = transposed storage; "
                        "nt (default): a row-major, b the transpose of a row-major [N, K] weight")
    if backend:
        p.add_argument("--backend", default="auto", choices=["auto", "tilelang", "triton"])


def _target_arguments(p: argparse.ArgumentParser, *, hopper_only: bool = False) -> None:
    only = "; inspect shows TileLang kernels, which need sm90" if hopper_only else ""
    p.add_argument("--gpu", default=None,
                   help="sm90 (H100, the default without a GPU), sm80 (A100), gfx942 (MI300X), or cuda[:N] "
                        f"for this machine's GPU (the default when there is one){only}")
    p.add_argument("--sm-count", type=_positive, default=None, help="override the target's SM count")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tlgemm", description="Hopper GEMMs from WGMMA macro-instructions")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a GEMM, check it, report TFLOP/s against cuBLAS (needs a GPU)")
    _problem_arguments(p)
    p.add_argument("--warmup", type=_positive, default=25, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=_positive, default=100, help="do_bench repetition time, ms")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("explain", help="which backend, schedule, kernel and instruction would run, and why")
    _problem_arguments(p)
    _target_arguments(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("inspect", help="the TileLang kernel's code for a configuration")
    _problem_arguments(p, backend=False)
    _target_arguments(p, hopper_only=True)
    p.add_argument("--emit", default="cuda", choices=["tir", "cuda", "ptx", "sass"],
                   help="tir and cuda need no GPU; ptx needs nvcc, sass nvcc and nvdisasm or cuobjdump (PATH, "
                        "CUDA_HOME or the nvidia-cuda-nvdisasm wheel)")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("autotune", help="time schedule candidates and store the winners (needs a GPU)")
    p.add_argument("shapes", nargs="+", type=_shape, metavar="MxNxK", help="each is tuned once")
    p.add_argument("--dtype", default="bf16", help=f"comma-separated, of {', '.join(_DTYPES)}; each is tuned once, "
                                                   "fp32 with TF32 off and tf32 with TF32 on")
    p.add_argument("--out-dtype", choices=list(_OUT_DTYPES))
    p.add_argument("--layout", default="nt", choices=_LAYOUTS)
    p.add_argument("--backend", default="auto", choices=["auto", "tilelang", "triton"])
    p.add_argument("--candidates", type=_positive, default=8,
                   help="select()'s best N candidates are timed (on TileLang also their 2-CTA cluster forms)")
    p.add_argument("--cache-dir", default=None, help="autotune cache directory (default: $TLGEMM_CACHE_DIR, "
                                                     "$XDG_CACHE_HOME/tlgemm or ~/.cache/tlgemm)")
    p.set_defaults(func=cmd_autotune)

    sub.add_parser("bench", help="the benchmark harness (tlgemm.bench; `tlgemm bench --help`)", add_help=False)

    p = sub.add_parser("layout", help="operand layouts, swizzle modes and encoded descriptors of a tile")
    p.add_argument("--dtype", default="bf16",
                   help="WGMMA operand type: f16, bf16, tf32, e4m3, e5m2, s8 or u8 (or fp16, float16, int8, ...)")
    p.add_argument("--block-m", type=int, default=128)
    p.add_argument("--block-n", type=int, default=256)
    p.add_argument("--block-k", type=int, default=64)
    p.add_argument("--a-major", default="K", choices=[m.value for m in Major])
    p.add_argument("--b-major", default="K", choices=[m.value for m in Major])
    p.set_defaults(func=cmd_layout)
    return parser


#: The API arguments that a command's options set: an API message about one names the option.
_OPTION_OF_ARGUMENT = {"gpu": "--gpu", "out_dtype": "--out-dtype", "backend": "--backend"}


def _option_message(err: Exception, args) -> str:
    """``err``'s message, its leading API argument (``gpu: ...``) named as the option that sets it
    where the command has that option."""
    text = str(err)
    name, sep, rest = text.partition(": ")
    if sep and name in _OPTION_OF_ARGUMENT and hasattr(args, name):
        return f"{_OPTION_OF_ARGUMENT[name]}: {rest}"
    return text


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (module docstring)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = None
    try:
        if argv[:1] == ["bench"]:
            status = cmd_bench(argv[1:])
        else:
            args = build_parser().parse_args(argv)
            status = args.func(args)
        sys.stdout.flush()  # a closed pipe raises here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        # The reader went away (`| head -1`): stdout to /dev/null so the interpreter's final flush of what
        # is still buffered does not fail again (Python docs, signal module, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, TypeError, NotImplementedError) as err:
        print(f"tlgemm: error: {_option_message(err, args)}", file=sys.stderr)
        return 2
    except OSError as err:  # e.g. stdout on a full device (`> /dev/full`), or a file a command writes
        try:
            sys.stdout.flush()  # what was printed still reaches stdout where stdout works
        except OSError:  # stdout itself failed: to /dev/null as above
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"tlgemm: error: {err.strerror or err}" + (f": {err.filename}" if err.filename else ""),
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
