"""Host-side argument rules both backends' launchers share (torch only): dtype classes, the
output dtype rule, scale/bias vectors, and a tensor's launch signature. Errors name the
argument: TypeError for a wrong type or dtype, ValueError otherwise."""

import torch

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
FLOAT_OUT = (torch.float32, torch.float16, torch.bfloat16)


def output_dtype(a_dtype, out_dtype, epilogue: bool):
    """The output dtype: ``out_dtype``, else bf16 for fp8 inputs, int32 for int8, the input's
    otherwise; int32 output (int8 inputs only) takes no scale/bias epilogue."""
    if out_dtype is None:
        out_dtype = torch.bfloat16 if a_dtype in FP8 else torch.int32 if a_dtype == torch.int8 else a_dtype
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype: expected a torch.dtype, got {type(out_dtype).__name__}")
    allowed = FLOAT_OUT + ((torch.int32,) if a_dtype == torch.int8 else ())
    if out_dtype not in allowed:
        raise TypeError(f"out_dtype: for {a_dtype} inputs must be one of {[str(d) for d in allowed]}, got {out_dtype}")
    if out_dtype == torch.int32 and epilogue:
        raise ValueError("out_dtype: int32 output takes no scale_a/scale_b/bias; choose a float out_dtype")
    return out_dtype


def vector(name, v, lengths, dtypes, device, first="a"):
    """``v`` flattened to 1-D after checking its type, dtype, element count and device."""
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(v).__name__}")
    if v.dtype not in dtypes:
        raise TypeError(f"{name}: dtype must be one of {[str(d) for d in dtypes]}, got {v.dtype}")
    if v.numel() not in lengths:
        raise ValueError(f"{name}: expected {' or '.join(map(str, lengths))} elements, got {v.numel()}")
    if v.device != device:
        raise ValueError(f"{name}: on {v.device}, but {first} is on {device}; all tensors must share a device")
    return v.reshape(-1)


def signature(t):
    """What a launch derives from a tensor argument (None: not given): its shape, strides,
    dtype, device and whether its base address is 16-byte aligned (what TMA needs)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)
