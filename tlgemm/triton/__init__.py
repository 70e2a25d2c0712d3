"""Triton backend: the stages abstractions (``tlgemm.triton.stages``), the kernels written
with them (``tlgemm.triton.kernels``) and their host launchers."""

from .launch import (
    blockscaled_bmm,
    blockscaled_matmul,
    bmm,
    cached_launch,
    matmul,
    persistent_matmul,
    schedule_trace,
    streamk_matmul,
)

__all__ = ["matmul", "persistent_matmul", "streamk_matmul", "bmm", "cached_launch", "blockscaled_matmul",
           "blockscaled_bmm", "schedule_trace"]
