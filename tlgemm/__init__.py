"""tlgemm: Hopper GEMMs built from WGMMA macro-instructions, in TileLang and Triton.

The entry points load on first use, so ``import tlgemm`` imports neither torch, TileLang nor
Triton: matmul, addmm, bmm, scaled_mm, explain, autotune (tlgemm.api; the torch.library ops
in tlgemm.ops) and quantize_fp8_blockwise / dequantize_fp8_blockwise (tlgemm.quantize).
"""

from importlib import import_module as _import_module

__version__ = "0.1.0"

_LAZY = {
    **dict.fromkeys(("matmul", "addmm", "bmm", "scaled_mm", "explain", "autotune", "Explanation", "AutotuneResult"),
                    "tlgemm.api"),
    **dict.fromkeys(("quantize_fp8_blockwise", "dequantize_fp8_blockwise"), "tlgemm.quantize"),
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tlgemm' has no attribute {name!r}")
    value = getattr(_import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
