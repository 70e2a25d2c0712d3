"""A fake GPU and fake backends for the CPU tests of tlgemm.api's dispatch.

``fake_gpu`` makes CPU tensors look like tensors on an sm_90 device (or another target) and
replaces tlgemm.triton / tlgemm.tilelang with kernels that compute in float64 with torch and
record each call, so every dispatch rule (plans, caches, copies, epilogue routing, fallbacks)
runs in-process on a CPU-only machine. The autotune cache points at a fresh directory.
"""

import types

import pytest
import torch

from tlgemm import api


def _expand_blocks(scales: torch.Tensor, rows: int, cols: int, block_rows: int) -> torch.Tensor:
    full = scales.repeat_interleave(block_rows, dim=0).repeat_interleave(128, dim=1)
    return full[:rows, :cols].double()


class FakeBackend:
    """The launcher functions of one backend; ``calls`` records (name, a, b, schedule, kwargs)."""

    def __init__(self, name: str, kernels=("matmul", "bmm", "blockscaled_matmul")):
        self.name = name
        self.calls = []
        self.reject = set()  # schedules whose launch raises "schedule: ..." (shared memory)
        self.module = types.SimpleNamespace(**{k: getattr(self, k) for k in kernels})

    def _check(self, schedule):
        if schedule in self.reject:
            raise ValueError(f"schedule: {schedule} needs more shared memory than the device has")

    def matmul(self, a, b, schedule, *, out, scale_a=None, scale_b=None, bias=None, **extra):
        self._check(schedule)
        self.calls.append(("matmul", a, b, schedule, dict(scale_a=scale_a, scale_b=scale_b, bias=bias, **extra)))
        c = a.double() @ b.double()
        if scale_a is not None:
            c = c * (scale_a.double().reshape(-1, 1) if scale_a.numel() > 1 else scale_a.double())
        if scale_b is not None:
            c = c * scale_b.double().reshape(-1)
        if bias is not None:
            c = c + bias.double().reshape(-1)
        return out.copy_(c)

    def bmm(self, a, b, schedule, *, out, scale_a=None, scale_b=None, bias=None, **extra):
        self._check(schedule)
        self.calls.append(("bmm", a, b, schedule, dict(extra)))
        return out.copy_(a.double() @ b.double())

    def blockscaled_matmul(self, a, b, scale_a, scale_b, schedule=None, *, out, out_dtype=None, bias=None,
                           num_sms=None):
        self.calls.append(("blockscaled_matmul", a, b, schedule, dict(out_dtype=out_dtype, bias=bias)))
        (M, K), N = a.shape, b.shape[0]
        c = (a.double() * _expand_blocks(scale_a, M, K, 1)) @ (b.double() * _expand_blocks(scale_b, N, K, 128)).T
        if bias is not None:
            c = c + bias.double()
        return out.copy_(c)


@pytest.fixture(autouse=True)
def _keep_tf32():
    """Tests (and `tlgemm explain --dtype tf32`) switch TF32 by assignment: restore it after
    each. (monkeypatch cannot: fp32_precision is a property of torch's cuBLASModule, and
    pytest >= 9.2 undoes such a setattr with delattr.)"""
    saved = torch.backends.cuda.matmul.fp32_precision
    yield
    torch.backends.cuda.matmul.fp32_precision = saved


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """Returns a namespace: .triton and .tilelang (FakeBackend), .target (settable), .selects
    (count of select() calls)."""
    monkeypatch.setenv("TLGEMM_CACHE_DIR", str(tmp_path / "cache"))
    ns = types.SimpleNamespace(triton=FakeBackend("triton"), tilelang=FakeBackend("tilelang"),
                               target=api.Target("Fake H100", "cuda", "sm_90", 132, 232448), selects=0)
    monkeypatch.setattr(api, "_kernel_target", lambda device: ns.target)
    monkeypatch.setattr(api, "_backend_kernel",
                        lambda backend, op: getattr(getattr(ns, backend).module, api._KERNEL[op], None))
    select = api.select

    def counting_select(*args, **kwargs):
        ns.selects += 1
        return select(*args, **kwargs)

    monkeypatch.setattr(api, "select", counting_select)
    api._forget_plans()
    yield ns
    api._forget_plans()
