"""TileLang backend: the stages on the WGMMA emitter (``tlgemm.tilelang.stages``), the
kernels written with them (``tlgemm.tilelang.kernels``) and their host launchers."""

from .launch import (blockscaled_bmm, blockscaled_matmul, bmm, cached_launch, kernel_source, matmul, persistent_matmul,
                     schedule_trace, streamk_matmul)

__all__ = ["matmul", "persistent_matmul", "streamk_matmul", "bmm", "schedule_trace", "kernel_source", "cached_launch",
           "blockscaled_matmul", "blockscaled_bmm"]
