"""Element types as plain names (no torch/triton import): parsing and sizes.

A dtype may be given as a canonical name ("bfloat16"), an alias ("bf16", "fp8", "e4m3"), or
any object whose ``str()`` is one of those after dropping a "torch." / "tl." /
"triton.language." prefix (so ``torch.bfloat16`` works without importing torch here).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DTYPE_BYTES", "INPUT_DTYPES", "OUTPUT_DTYPES", "canonical_dtype", "gemm_dtypes"]

# Canonical name -> bytes per element.
DTYPE_BYTES = {
    "float32": 4,
    "tf32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
    "int32": 4,
}
INPUT_DTYPES = ("float32", "tf32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8")
#: Outputs of every input type; int8 inputs may also give int32.
OUTPUT_DTYPES = ("float32", "float16", "bfloat16")
_ALIASES = {
    "fp32": "float32", "f32": "float32", "float": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "fp8e4nv": "float8_e4m3fn", "float8e4nv": "float8_e4m3fn",
    "float8_e4m3": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2", "fp8e5": "float8_e5m2", "float8e5": "float8_e5m2", "fp8_e5m2": "float8_e5m2",
    "s8": "int8", "i8": "int8", "s32": "int32", "i32": "int32",
}
_FP8 = ("float8_e4m3fn", "float8_e5m2")
_PREFIXES = ("torch.", "triton.language.", "tl.")
# Default output type per input type: 16/32-bit keep theirs, fp8 -> bf16, int8 -> int32.
_DEFAULT_OUT = {"float32": "float32", "tf32": "float32", "float16": "float16", "bfloat16": "bfloat16",
                "float8_e4m3fn": "bfloat16", "float8_e5m2": "bfloat16", "int8": "int32"}


def canonical_dtype(dtype: object) -> str:
    """Canonical name of a dtype (see the module docstring); ValueError if unknown."""
    name = str(dtype).strip().lower()
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = _ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)} and aliases {sorted(_ALIASES)}")
    return name


def gemm_dtypes(dtypes: object) -> tuple[str, str, str]:
    """(a, b, c) canonical names from one dtype or a sequence (a,), (a, b) or (a, b, c).
    c defaults to a's output type (fp8 → bfloat16, int8 → int32, others keep theirs) and is
    one of OUTPUT_DTYPES (or int32 for int8 inputs);
    a and b must be the same input type, except that the two fp8 types may mix."""
    items = [dtypes] if isinstance(dtypes, str) or not isinstance(dtypes, Sequence) else list(dtypes)
    if not 1 <= len(items) <= 3:
        raise ValueError(f"dtypes must be one dtype or a sequence of 1 to 3 (a, b, c), got {dtypes!r}")
    names = [canonical_dtype(d) for d in items]
    a = names[0]
    b = names[1] if len(names) > 1 else a
    for role, name in (("a", a), ("b", b)):
        if name not in INPUT_DTYPES:
            raise ValueError(f"dtype of {role} must be one of {INPUT_DTYPES}, got {name!r}")
    if a != b and not (a in _FP8 and b in _FP8):
        raise ValueError(f"a and b must have the same dtype (only fp8 e4m3/e5m2 may mix), got {a!r} and {b!r}")
    c = names[2] if len(names) > 2 else _DEFAULT_OUT[a]
    outputs = OUTPUT_DTYPES + (("int32",) if a == "int8" else ())
    if c not in outputs:
        raise ValueError(f"dtype of c must be one of {outputs} for {a!r} inputs, got {c!r}")
    return a, b, c
