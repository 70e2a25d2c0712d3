"""Block-wise FP8 quantisation (DeepSeek-V3 / DeepGEMM layout), pure torch, CPU or CUDA.

``quantize_fp8_blockwise(x, block=(1, 128))`` gives the per-token-group activation scales
that the block-scaled GEMM reads as scale_a [M, K/128]; ``block=(128, 128)`` gives the
per-block weight scales scale_b [N/128, K/128] of a weight stored [N, K].

Facts relied on: the largest finite values are 448 for float8_e4m3fn and 57344 for
float8_e5m2 (``torch.finfo``); torch's cast to float8_e4m3fn turns values beyond the
format's range into NaN (the format has no infinity), so quotients are clamped to ±max
before the cast.
"""

from __future__ import annotations

import math
import numbers

import torch

__all__ = ["quantize_fp8_blockwise", "dequantize_fp8_blockwise", "FP8_DTYPES"]

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_FLOAT_INPUTS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check_block(block) -> tuple[int, int]:
    if (not isinstance(block, (tuple, list)) or len(block) != 2
            or not all(isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in block)):
        raise TypeError(f"block: expected a pair of ints (rows, cols), got {block!r}")
    if block[0] < 1 or block[1] < 1:
        raise ValueError(f"block: sizes must be >= 1, got {tuple(block)}")
    return int(block[0]), int(block[1])


def _within(br: int, bc: int, rows: int, cols: int) -> tuple[int, int]:
    """The block clipped to the tensor: a block at least as large as a dimension is one
    block along it whatever its size, so padding and expansion never exceed x's extent
    (a block of 2**40 columns on a 100-column tensor allocates as one of 100)."""
    return max(1, min(br, rows)), max(1, min(bc, cols))


def _blocks(x: torch.Tensor, br: int, bc: int) -> torch.Tensor:
    """x [..., R, C] zero-padded to whole blocks and viewed as [..., R/br, br, C/bc, bc]."""
    *lead, rows, cols = x.shape
    pr, pc = math.ceil(rows / br) * br, math.ceil(cols / bc) * bc
    if (pr, pc) != (rows, cols):
        x = torch.nn.functional.pad(x, (0, pc - cols, 0, pr - rows))
    return x.reshape(*lead, pr // br, br, pc // bc, bc)


def _expand(scales: torch.Tensor, br: int, bc: int, rows: int, cols: int) -> torch.Tensor:
    """scales [..., R/br, C/bc] repeated over each block and cropped to [..., rows, cols]."""
    full = scales.repeat_interleave(br, dim=-2).repeat_interleave(bc, dim=-1)
    return full[..., :rows, :cols]


@torch.no_grad()
def quantize_fp8_blockwise(x: torch.Tensor, block=(1, 128), dtype: torch.dtype = torch.float8_e4m3fn):
    """(x_fp8, scales) with x ≈ x_fp8.float() · scales broadcast over each block.

    x: [..., rows, cols] fp32/fp16/bf16/fp64 (leading dimensions are batch dimensions). x is
    expected finite and, for fp64, within float32's range (the scales are float32):
    checking would synchronise a CUDA device, so inf, NaN and fp64 values beyond float32 are
    not detected and give non-finite results in their block. block: (rows, cols) of one
    scale block; edge blocks may be partial, and a block larger than a dimension is one block
    along all of it. dtype: float8_e4m3fn or float8_e5m2.
    Returns x_fp8 of x's shape and ``dtype``, contiguous, and float32 scales
    [..., ⌈rows/br⌉, ⌈cols/bc⌉] with scale = amax(|block|) / max(dtype), rounded to nearest,
    or to the next float32 up where amax / scale in float32 exceeds max(dtype) (a subnormal
    scale, of few bits, fell up to 29% below), so the float32 quotients x / scale that are
    rounded to fp8 stay within max(dtype) and no value is clamped; the exact quotient may
    exceed max(dtype) by float32's rounding (about 448.00001 for e4m3). A block
    whose scale would be 0 (all zeros, or an amax so small that amax / max(dtype) underflows
    float32) gets scale 1 instead: its values quantise to 0 or fp8 subnormals, and no finite
    input yields a 0, inf or NaN scale. Not differentiable: computed without autograd.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_INPUTS:
        raise TypeError(f"x: dtype must be one of {[str(d) for d in _FLOAT_INPUTS]}, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"x: expected at least 2 dimensions [..., rows, cols], got shape {tuple(x.shape)}")
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype: must be one of {[str(d) for d in FP8_DTYPES]}, got {dtype}")
    rows, cols = x.shape[-2:]
    br, bc = _within(*_check_block(block), rows, cols)
    fp8_max = torch.finfo(dtype).max
    amax = _blocks(x.to(torch.float32), br, bc).abs().amax(dim=(-3, -1))
    # A tensor divisor: CUDA divides by a Python scalar as a multiplication by its reciprocal,
    # which rounds differently from the CPU's division; elementwise division is IEEE on both.
    scales = amax / torch.full_like(amax, fp8_max)
    underflow = scales == 0  # an all-zero block, or amax / max below float32's subnormals; NaN stays NaN
    scales = torch.where(amax / scales > fp8_max, torch.nextafter(scales, torch.full_like(scales, math.inf)), scales)
    scales = torch.where(underflow, torch.ones_like(scales), scales)
    scaled = x.to(torch.float32) / _expand(scales, br, bc, rows, cols)
    return scaled.clamp(-fp8_max, fp8_max).to(dtype, memory_format=torch.contiguous_format), scales


def dequantize_fp8_blockwise(x_fp8: torch.Tensor, scales: torch.Tensor, block=(1, 128)) -> torch.Tensor:
    """x_fp8.float() · scales broadcast over each block (float32), the inverse of
    ``quantize_fp8_blockwise``; scales must be [..., ⌈rows/br⌉, ⌈cols/bc⌉]."""
    for name, t in (("x_fp8", x_fp8), ("scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if x_fp8.dtype not in FP8_DTYPES:
        raise TypeError(f"x_fp8: dtype must be one of {[str(d) for d in FP8_DTYPES]}, got {x_fp8.dtype}")
    if not scales.is_floating_point():
        raise TypeError(f"scales: expected a floating-point tensor, got {scales.dtype}")
    if x_fp8.dim() < 2:
        raise ValueError(f"x_fp8: expected at least 2 dimensions [..., rows, cols], got shape {tuple(x_fp8.shape)}")
    br, bc = _check_block(block)
    *lead, rows, cols = x_fp8.shape
    expected = (*lead, math.ceil(rows / br), math.ceil(cols / bc))
    if tuple(scales.shape) != expected:
        raise ValueError(f"scales: expected shape {expected} for x_fp8 {tuple(x_fp8.shape)} and block {(br, bc)}, "
                         f"got {tuple(scales.shape)}")
    if scales.device != x_fp8.device:
        raise ValueError(f"scales: on {scales.device}, but x_fp8 is on {x_fp8.device}")
    return x_fp8.to(torch.float32) * _expand(scales.to(torch.float32), *_within(br, bc, rows, cols), rows, cols)
