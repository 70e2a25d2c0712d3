"""Reference GEMM and tolerance rules shared by tests and benchmarks.

The reference upcasts every input to float64 and computes on the CPU or the
inputs' device, so it is independent of any tensor-core path. Tolerances are the
relative Frobenius error bounds of DESIGN.md ("Tolerance").
"""

from __future__ import annotations

import math

import torch

#: Relative Frobenius error bound per input precision (DESIGN.md, "Tolerance").
TOLERANCE = {
    "fp32": 1e-5,
    "tf32": 1e-3,
    "fp16": 1e-2,
    "bf16": 1e-2,
    "fp8": 5e-2,
    # Block-scaled fp8 against the product of the dequantised inputs: each 128-deep K block's sum
    # is promoted into float32 with its two scales, so what is left is float32 accumulation and
    # the output's rounding, as for 16-bit inputs (measured at most 1.7e-3 into bf16, K to 16384:
    # benchmarks/results/deepgemm_kernel_time.md). fp8's 5e-2, which also covers quantisation
    # against unquantised inputs, would pass 30 times that; this bound is DESIGN.md's 16-bit one.
    "fp8-block": 1e-2,
    "int8": 0.0,
}

#: The bound a product exact but for its rounding to a 16-bit output keeps: unit roundoff 2**-8
#: (bfloat16) or 2**-11 (float16) per element, about 0.4 of it in the Frobenius norm (measured
#: 1.7e-3 and 2.1e-4); bfloat16 keeps DESIGN.md's 16-bit bound, float16 the same factor over its
#: 8x smaller roundoff.
OUTPUT_ROUNDING = {torch.bfloat16: 1e-2, torch.float16: 2e-3}

_PRECISION_OF_DTYPE = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float8_e4m3fn: "fp8",
    torch.float8_e5m2: "fp8",
    torch.int8: "int8",
    torch.uint8: "int8",
}


def precision_of(dtype: torch.dtype, *, allow_tf32: bool = False, blockscaled: bool = False) -> str:
    """The tolerance class of an input dtype ("tf32" for fp32 inputs on the TF32 path,
    "fp8-block" for block-scaled fp8 checked against its dequantised inputs)."""
    try:
        name = _PRECISION_OF_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"dtype: no tolerance rule for {dtype}") from None
    if blockscaled:
        if name != "fp8":
            raise ValueError(f"dtype: block scaling takes fp8 inputs, got {dtype}")
        return "fp8-block"
    return "tf32" if name == "fp32" and allow_tf32 else name


def tolerance(dtype: torch.dtype, *, allow_tf32: bool = False, blockscaled: bool = False,
              out_dtype: torch.dtype | None = None) -> float:
    """The relative Frobenius error bound for GEMM inputs of ``dtype`` (``precision_of``), at
    least ``OUTPUT_ROUNDING``'s where the output (``out_dtype``) is bfloat16 or float16: its
    rounding alone exceeds the float32, TF32 and int8 bounds."""
    bound = TOLERANCE[precision_of(dtype, allow_tf32=allow_tf32, blockscaled=blockscaled)]
    return max(bound, OUTPUT_ROUNDING.get(out_dtype, 0.0))


def _as_vector(t: torch.Tensor, name: str, shapes: list[tuple[int, ...]]) -> torch.Tensor:
    """``t`` as a float64 vector, where its shape is one of ``shapes`` (torch._scaled_mm's and
    addmm's conventions); any other shape is an error, not a reshape."""
    if tuple(t.shape) not in shapes:
        raise ValueError(f"{name}: expected a shape in {', '.join(map(str, map(list, shapes)))}, got "
                         f"{list(t.shape)}")
    return t.detach().to(torch.float64).reshape(-1)


def _as_scale(scale, length: int, name: str, vector: tuple[int, ...]) -> torch.Tensor | float:
    """A scale as a float64 scalar or vector of ``length`` (per-row / per-column), given as a
    number, a 1-element tensor of at most two dimensions, [length] or ``vector``."""
    if scale is None:
        return 1.0
    if isinstance(scale, (int, float)):
        return float(scale)
    return _as_vector(scale, name, list(dict.fromkeys([(), (1,), (1, 1), (length,), vector])))


def reference_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    scale_a=None,
    scale_b=None,
    bias: torch.Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
) -> torch.Tensor:
    """``alpha * (diag(scale_a) @ A @ B @ diag(scale_b)) + beta * bias`` in float64.

    ``a`` is [M, K] and ``b`` is [K, N] (any strides, any dtype); both are upcast to
    float64 before the product. ``scale_a`` is a scalar, a 1-element tensor, [M] or [M, 1]
    (per row of A); ``scale_b`` a scalar, a 1-element tensor, [N] or [1, N] (per column of B).
    ``bias`` is [N] or [1, N], broadcast over rows (torch.addmm's convention). Other shapes
    are refused: a scale or bias of the right size but the wrong orientation is not reshaped.
    Batched inputs ([B, M, K] @ [B, K, N]) are handled by broadcasting.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dim() < 2:
            raise ValueError(f"{name}: expected a matrix or a batch of matrices (2-D or more), got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    a64 = a.detach().to(torch.float64)
    b64 = b.detach().to(torch.float64)
    out = a64 @ b64
    m, n = out.shape[-2], out.shape[-1]
    sa = _as_scale(scale_a, m, "scale_a", (m, 1))
    sb = _as_scale(scale_b, n, "scale_b", (1, n))
    if isinstance(sa, torch.Tensor) and sa.numel() == m and m != 1:
        sa = sa.reshape(m, 1)
    out = out * sa * sb * alpha
    if bias is not None:
        out = out + beta * _as_vector(bias, "bias", [(n,), (1, n)])
    return out


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error ``||out - ref||_F / ||ref||_F`` in float64. Against a zero
    reference (an empty one included) only an exact match counts: 0, else inf."""
    out64 = out.detach().to(torch.float64).to(ref.device)
    ref64 = ref.detach().to(torch.float64)
    denom = torch.linalg.vector_norm(ref64).item()
    num = torch.linalg.vector_norm(out64 - ref64).item()
    if denom == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / denom


#: The blocks ``worst_block`` measures: [rows, columns] of the last two dimensions; 4096 elements
#: keep a block's error a steady statistic, few enough that a wrong tile stands out in its blocks
#: (one wrong quarter of a block already reads 0.5).
ERROR_BLOCK = (64, 64)

#: How far over the bound one block's error may go (``assert_gemm_close``). The whole result's
#: relative error averages a wrong tile away: at fp8's 5e-2, one zeroed 128x256 tile of a
#: 4096x4096 result reads 0.044 overall, 1.0 in its blocks.
BLOCK_ERROR_FACTOR = 4


def worst_block(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, tuple[int, ...]]:
    """(error, index) of the ``ERROR_BLOCK`` of the last two dimensions with the largest relative
    error; index = (batch, row, column) of the block's first element, the leading dimensions
    flattened into one batch index (0 for a matrix).

    A block's error norm is taken relative to the larger of its reference's norm and what the
    whole reference's mean square gives a block of its size, so a block whose values cancel to
    near zero (a ragged corner of one element, say) is not held to its own small norm. A zero
    reference takes an exact match (0, else inf), as in ``relative_error``.
    """
    if out.shape != ref.shape:
        raise ValueError(f"out: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    if ref.dim() < 2 or ref.numel() == 0:
        return relative_error(out, ref), (0,) * 3
    rows, cols = ref.shape[-2:]
    br, bc = ERROR_BLOCK
    padding = (0, -cols % bc, 0, -rows % br)

    def block_sums(t: torch.Tensor) -> torch.Tensor:
        t = torch.nn.functional.pad(t.reshape(-1, rows, cols), padding)
        return t.reshape(t.shape[0], t.shape[1] // br, br, t.shape[2] // bc, bc).sum(dim=(2, 4))

    def extents(n: int, block: int) -> torch.Tensor:
        """Elements of each block along one dimension (the last one ragged)."""
        return torch.tensor([min(block, n - start) for start in range(0, n, block)], dtype=torch.float64,
                            device=ref.device)

    ref64 = ref.detach().to(torch.float64)
    ref_squares = ref64 ** 2
    diff_sq = block_sums((out.detach().to(torch.float64).to(ref.device) - ref64) ** 2)
    ref_sq = block_sums(ref_squares)
    expected_sq = torch.outer(extents(rows, br), extents(cols, bc)) * ref_squares.mean()
    denom_sq = torch.maximum(ref_sq, expected_sq)
    ratio = torch.where(denom_sq > 0, (diff_sq / denom_sq).sqrt(),
                        torch.where(diff_sq > 0, math.inf, 0.0))
    worst = int(ratio.argmax())
    b, rest = divmod(worst, ratio.shape[1] * ratio.shape[2])
    i, j = divmod(rest, ratio.shape[2])
    return float(ratio.reshape(-1)[worst]), (b, i * br, j * bc)


def assert_gemm_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, *,
                      allow_tf32: bool = False, blockscaled: bool = False, what: str = "result") -> float:
    """Check every element was written (no NaN left from poisoning), the error bound
    (``tolerance`` of the inputs' ``dtype`` and out's dtype; ``blockscaled``: a block-scaled fp8
    GEMM against its dequantised inputs), and that no block of the result is more than
    ``BLOCK_ERROR_FACTOR`` times over it (``worst_block``: a wrong tile in a large result).

    Returns the measured relative error of the whole result so callers can report it.
    """
    if out.shape != ref.shape:
        raise AssertionError(f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    nan = torch.isnan(out.detach().to(torch.float32)) if out.is_floating_point() else None
    if nan is not None and bool(nan.any()):
        idx = nan.nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int(nan.sum())} elements not written (NaN poison left), first at {idx}")
    err = relative_error(out, ref)
    tol = tolerance(dtype, allow_tf32=allow_tf32, blockscaled=blockscaled, out_dtype=out.dtype)
    kind = "block-scaled " if blockscaled else ""
    if not (err <= tol) or math.isnan(err):
        raise AssertionError(f"{what}: relative Frobenius error {err:.3e} > {tol:.0e} for {kind}{dtype}")
    block_err, (b, i, j) = worst_block(out, ref)
    if not block_err <= BLOCK_ERROR_FACTOR * tol:
        where = f"rows {i}.. columns {j}.." + (f" of batch {b}" if ref.dim() > 2 else "")
        raise AssertionError(f"{what}: relative Frobenius error {block_err:.3e} in the {ERROR_BLOCK[0]}x"
                             f"{ERROR_BLOCK[1]} block at {where}, over {BLOCK_ERROR_FACTOR}x the bound {tol:.0e} "
                             f"for {kind}{dtype} (whole result {err:.3e})")
    return err


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` in place with NaN (byte 0x7F for the fp8 dtypes, NaN in both e4m3fn and
    e5m2), or the dtype's minimum for signed integers; returns ``t``. Other dtypes (bool,
    complex, unsigned: no value there stands out from a result) are a TypeError."""
    if t.dtype == torch.bool or t.dtype.is_complex or (not t.dtype.is_floating_point and not t.dtype.is_signed):
        raise TypeError(f"t: no poison value for {t.dtype} (floating-point and signed integer outputs only)")
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t.view(torch.uint8).fill_(0x7F)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
    else:
        t.fill_(torch.iinfo(t.dtype).min)
    return t


def poisoned(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """An output buffer filled with NaN (or the dtype's extreme for integers): ``poison_``."""
    return poison_(torch.empty(shape, dtype=dtype, device=device))


def poison_allocator(shape, dtype: torch.dtype, device) -> None:
    """Leave a poisoned block of ``shape`` at the top of the caching allocator's free list, so
    that an implementation allocating its own output of that shape next gets poisoned memory
    (the allocator hands a freed block of the same size back first)."""
    poisoned(shape, dtype, device)


def random_operand(shape, dtype: torch.dtype, *, generator: torch.Generator | None = None,
                   device="cpu") -> torch.Tensor:
    """Random GEMM input: normal values (scaled into range for fp8), or integers for int8."""
    if dtype in (torch.int8,):
        x = torch.randint(-8, 8, shape, generator=generator, dtype=torch.int8)
    elif dtype == torch.uint8:
        x = torch.randint(0, 16, shape, generator=generator, dtype=torch.uint8)
    else:
        x = torch.randn(shape, generator=generator, dtype=torch.float32)
        if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            x = x.clamp(-8, 8)
        x = x.to(dtype)
    return x.to(device)
