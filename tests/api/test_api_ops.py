"""The torch.library ops tlgemm::matmul / addmm / bmm / scaled_mm: registered, fake
implementations with the right shapes, dtypes and strides, and torch.compile(fullgraph=True)
tracing models that call tlgemm (meta tensors: no data, no GPU)."""

import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tlgemm
from tlgemm.schedules import Schedule

E4M3 = torch.float8_e4m3fn
OPS = ("matmul", "addmm", "bmm", "scaled_mm")


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_ops_are_registered():
    import tlgemm.ops  # noqa: F401

    for name in OPS:
        op = getattr(torch.ops.tlgemm, name).default
        assert op.name() == f"tlgemm::{name}"
        assert not op._schema.is_mutable


FAKE_CASES = {
    "matmul": (lambda: torch.ops.tlgemm.matmul(_meta(7, 32), _meta(32, 5)), (7, 5), torch.bfloat16),
    "matmul_cols": (lambda: torch.ops.tlgemm.matmul(_meta(7, 32), _meta(5, 32).t(), torch.float32), (7, 5),
                    torch.float32),
    "matmul_fp8": (lambda: torch.ops.tlgemm.matmul(_meta(7, 32, dtype=E4M3), _meta(32, 5, dtype=E4M3)), (7, 5),
                   torch.bfloat16),
    "matmul_int8": (lambda: torch.ops.tlgemm.matmul(_meta(7, 32, dtype=torch.int8), _meta(32, 5, dtype=torch.int8)),
                    (7, 5), torch.int32),
    "addmm": (lambda: torch.ops.tlgemm.addmm(_meta(5), _meta(7, 32), _meta(32, 5), 0.5, 2.0), (7, 5), torch.bfloat16),
    "addmm_full_bias": (lambda: torch.ops.tlgemm.addmm(_meta(7, 5, dtype=torch.float32), _meta(7, 32), _meta(32, 5)),
                        (7, 5), torch.bfloat16),
    "bmm": (lambda: torch.ops.tlgemm.bmm(_meta(3, 7, 32), _meta(3, 32, 5), torch.float16), (3, 7, 5), torch.float16),
    "scaled_mm": (lambda: torch.ops.tlgemm.scaled_mm(
        _meta(7, 32, dtype=E4M3), _meta(32, 5, dtype=E4M3), _meta(7, 1, dtype=torch.float32),
        _meta(1, 5, dtype=torch.float32)), (7, 5), torch.bfloat16),
    "scaled_mm_block": (lambda: torch.ops.tlgemm.scaled_mm(
        _meta(7, 256, dtype=E4M3), _meta(128, 256, dtype=E4M3).t(), _meta(7, 2, dtype=torch.float32),
        _meta(1, 2, dtype=torch.float32), _meta(128), torch.float16), (7, 128), torch.float16),
}


@pytest.mark.parametrize("case", FAKE_CASES)
def test_fake_implementation(case):
    run, shape, dtype = FAKE_CASES[case]
    out = run()
    assert out.device.type == "meta" and tuple(out.shape) == shape and out.dtype == dtype and out.is_contiguous()


def test_fake_implementation_under_fake_tensor_mode():
    with FakeTensorMode():
        a = torch.empty(9, 64, dtype=torch.bfloat16)
        b = torch.empty(64, 24, dtype=torch.bfloat16)
        out = torch.ops.tlgemm.matmul(a, b, torch.float32)
        assert tuple(out.shape) == (9, 24) and out.dtype == torch.float32 and out.stride() == (24, 1)
        with pytest.raises(ValueError, match=r"a, b: inner dimensions differ"):
            torch.ops.tlgemm.matmul(a, a)
        with pytest.raises(TypeError, match=r"a: addmm takes float32, float16 or bfloat16 inputs"):
            torch.ops.tlgemm.addmm(torch.empty(24), a.to(E4M3), b.to(E4M3))
        with pytest.raises(ValueError, match=r"bias: scaled_mm takes a 1-D \[N\] = \[24\] bias"):
            torch.ops.tlgemm.scaled_mm(a.to(E4M3), b.to(E4M3), torch.ones(1), torch.ones(1), torch.empty(9, 24))
        for call in (lambda: torch.ops.tlgemm.matmul(a, b, None, "cuda"),
                     lambda: torch.ops.tlgemm.bmm(a[None], b[None], None, "cuda"),
                     lambda: torch.ops.tlgemm.addmm(torch.empty(24), a, b, 1.0, 1.0, None, "cuda"),
                     lambda: torch.ops.tlgemm.scaled_mm(a.to(E4M3), b.to(E4M3), torch.ones(1), torch.ones(1),
                                                        None, None, "cuda")):
            with pytest.raises(ValueError, match=r"backend: expected 'auto', 'tilelang' or 'triton', got 'cuda'"):
                call()


class MLP(torch.nn.Module):
    """Two tlgemm layers (addmm with a bias, then matmul) around a GELU."""

    def __init__(self, d_in, d_hidden, d_out, device="meta", dtype=torch.bfloat16):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.empty(d_hidden, d_in, device=device, dtype=dtype))
        self.b1 = torch.nn.Parameter(torch.empty(d_hidden, device=device, dtype=dtype))
        self.w2 = torch.nn.Parameter(torch.empty(d_out, d_hidden, device=device, dtype=dtype))

    def forward(self, x):
        h = torch.nn.functional.gelu(tlgemm.addmm(self.b1, x, self.w1.t()))
        return tlgemm.matmul(h, self.w2.t())


def _captured(fn, *args):
    """Run torch.compile(fn, fullgraph=True) with a backend that records the traced graphs."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, fullgraph=True, backend=backend)(*args)
    return out, graphs


def _targets(graphs):
    return [node.target for gm in graphs for node in gm.graph.nodes if node.op == "call_function"]


def test_compile_traces_an_mlp_without_graph_breaks():
    model = MLP(64, 256, 32)
    x = _meta(10, 64)
    with torch.no_grad():
        out, graphs = _captured(model, x)
    assert out.device.type == "meta" and tuple(out.shape) == (10, 32) and out.dtype == torch.bfloat16
    assert len(graphs) == 1
    targets = _targets(graphs)
    assert torch.ops.tlgemm.addmm.default in targets and torch.ops.tlgemm.matmul.default in targets


def test_compile_with_autograd_traces_the_ops():
    model = MLP(64, 128, 16)
    torch._dynamo.reset()
    out = torch.compile(model, fullgraph=True, backend="aot_eager")(_meta(4, 64))
    assert tuple(out.shape) == (4, 16) and out.requires_grad


def test_compile_traces_an_fp8_layer_whose_bias_requires_grad():
    """scaled_mm's backward raised for any input requiring grad, and torch.compile traces the
    backward ahead of the forward: a bias Parameter failed the compiled forward."""
    a = torch.empty(16, 64, device="meta", dtype=torch.float8_e4m3fn)
    w = torch.empty(32, 64, device="meta", dtype=torch.float8_e4m3fn)
    bias = torch.nn.Parameter(torch.empty(32, device="meta", dtype=torch.bfloat16))
    scale = torch.ones(1, device="meta")
    torch._dynamo.reset()
    out = torch.compile(lambda a, w, bias: tlgemm.scaled_mm(a, w.t(), scale, scale, bias=bias), fullgraph=True,
                        backend="aot_eager")(a, w, bias)
    assert tuple(out.shape) == (16, 32) and out.requires_grad


@pytest.mark.parametrize("kind", ["bmm", "scaled_mm", "out", "schedule"])
def test_compile_other_entry_points(kind):
    schedule = Schedule(block_m=64, block_n=128).persistent(132)
    if kind == "bmm":
        def fn(a, b):
            return tlgemm.bmm(a, b, out_dtype=torch.float32).relu()
        args = (_meta(2, 8, 32), _meta(2, 32, 16))
        shape, dtype = (2, 8, 16), torch.float32
    elif kind == "scaled_mm":
        def fn(a, b, sa, sb):
            return tlgemm.scaled_mm(a, b, sa, sb, out_dtype=torch.float16) * 2
        args = (_meta(8, 32, dtype=E4M3), _meta(16, 32, dtype=E4M3).t(), _meta(8, 1, dtype=torch.float32),
                _meta(1, 16, dtype=torch.float32))
        shape, dtype = (8, 16), torch.float16
    elif kind == "out":
        def fn(a, b, out):
            return tlgemm.matmul(a, b, out=out)
        args = (_meta(8, 32), _meta(32, 16), _meta(8, 16))
        shape, dtype = (8, 16), torch.bfloat16
    else:
        def fn(a, b):
            return tlgemm.matmul(a, b, schedule=schedule, backend="triton")
        args = (_meta(8, 32), _meta(32, 16))
        shape, dtype = (8, 16), torch.bfloat16
    out, graphs = _captured(fn, *args)
    assert tuple(out.shape) == shape and out.dtype == dtype and len(graphs) == 1
    if kind == "schedule":
        node = next(n for gm in graphs for n in gm.graph.nodes if n.target == torch.ops.tlgemm.matmul.default)
        assert Schedule.parse(node.args[4]) == schedule and node.args[3] == "triton"


def test_compile_takes_a_second_schedule():
    """The ops take a schedule as its text: its int fields, read one by one, became symbolic
    when dynamo recompiled for a second schedule, and fullgraph=True failed."""
    torch._dynamo.reset()
    seen = []

    def backend(gm, example_inputs):
        seen.extend(Schedule.parse(n.args[4]) for n in gm.graph.nodes if n.target == torch.ops.tlgemm.matmul.default)
        return gm.forward

    fn = torch.compile(lambda a, b, s: tlgemm.matmul(a, b, schedule=s, backend="triton"), fullgraph=True,
                       backend=backend)
    schedules = [Schedule(block_m=64, block_n=128, num_stages=s).persistent(132) for s in (2, 3, 4)]
    for s in schedules:
        assert tuple(fn(_meta(8, 32), _meta(32, 16), s).shape) == (8, 16)
    assert seen == schedules


def test_meta_tensors_run_the_fake_implementations_without_grad():
    """Without an input requiring grad, meta tensors went to the eager path, which refused
    their device; with one they took the ops' fake implementations."""
    a, b = _meta(8, 32), _meta(32, 16)
    assert tlgemm.matmul(a, b).shape == (8, 16) and tlgemm.bmm(a[None], b[None]).shape == (1, 8, 16)
    assert tlgemm.addmm(_meta(16), a, b, beta=0.5).shape == (8, 16)
    out = tlgemm.scaled_mm(_meta(8, 32, dtype=E4M3), _meta(16, 32, dtype=E4M3).t(), _meta(1, dtype=torch.float32),
                           _meta(1, dtype=torch.float32))
    assert out.shape == (8, 16) and out.dtype == torch.bfloat16


def test_compile_traces_meta_tensors_in_an_autocast_region():
    """Autocast's check for the meta device raised inside dynamo, where no except clause
    catches it; meta tensors are left as they are (no autocast for that device)."""
    def fn(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return tlgemm.matmul(a, b)

    out, graphs = _captured(fn, _meta(8, 32, dtype=torch.float32), _meta(32, 16, dtype=torch.float32))
    assert out.shape == (8, 16) and out.dtype == torch.float32 and len(graphs) == 1


def test_compiled_no_grad_call_writes_an_out_that_requires_grad():
    """Under no_grad torch.mm writes into a leaf that requires grad (an optimizer's parameter);
    the compiled path refused it whatever the grad mode."""
    out = torch.nn.Parameter(_meta(8, 16))
    with torch.no_grad():
        result, _ = _captured(lambda a, b, out: tlgemm.matmul(a, b, out=out), _meta(8, 32), _meta(32, 16), out)
    assert result.shape == (8, 16)


def test_gradients_have_the_inputs_shapes():
    with FakeTensorMode():
        bias = torch.empty(24, dtype=torch.float32, requires_grad=True)
        a = torch.empty(9, 64, dtype=torch.float32, requires_grad=True)
        w = torch.empty(24, 64, dtype=torch.float32, requires_grad=True)
        out = tlgemm.addmm(bias, a, w.t(), alpha=0.5)
        x = torch.empty(3, 5, 9, requires_grad=True)
        tlgemm.bmm(x, tlgemm.matmul(out, w).expand(3, 9, 64)).sum().backward()
        assert a.grad.shape == a.shape and w.grad.shape == w.shape and bias.grad.shape == bias.shape
        assert x.grad.shape == x.shape


def test_export_takes_a_dynamic_m_bounded_by_the_int32_rule(tmp_path):
    """torch.export traces the op with a dynamic M; the int32 size rule (M·K < 2**31) leaves a guard
    that an unbounded Dim violates, a bounded one satisfies; the program loads in a process that
    imported tlgemm.ops (README)."""
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(64, 32))

        def forward(self, x):
            return tlgemm.matmul(x, self.w)

    x = torch.randn(8, 64)
    bounded = torch.export.Dim("m", max=2**31 // 64 - 1)
    exported = torch.export.export(Layer(), (x,), dynamic_shapes={"x": {0: bounded}})
    assert "tlgemm.matmul.default" in str(exported.graph)
    with pytest.raises(torch._dynamo.exc.UserError, match=r"Constraints violated \(m\)"):
        torch.export.export(Layer(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("m")}})
    saved = tmp_path / "layer.pt2"
    torch.export.save(exported, saved)
    load = f"import torch, tlgemm.ops; print(torch.export.load({str(saved)!r}).graph)"
    result = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "tlgemm.matmul.default" in result.stdout, result.stderr[-3000:]


def _entry_point_calls(a, b, bias, scale):
    """Each entry point once on [M, K] a and [K, N] b (8-bit copies for scaled_mm)."""
    a8, b8 = a.to(torch.int8), b.to(torch.int8)
    return (tlgemm.matmul(a, b), tlgemm.addmm(bias, a, b, beta=0.5), tlgemm.bmm(a[None], b[None]),
            tlgemm.scaled_mm(a8, b8, scale, scale))


@pytest.mark.parametrize("tracing_mode", ["fake", "symbolic"])
def test_make_fx_records_the_ops(tracing_mode):
    """make_fx (a dispatch mode: what torch.fx tools trace with) saw the entry points launch their
    kernels straight away, on tensors without storage ("Cannot access data pointer of Tensor")."""
    from torch.fx.experimental.proxy_tensor import make_fx

    a, b = torch.randn(7, 32, dtype=torch.bfloat16), torch.randn(32, 5, dtype=torch.bfloat16)
    bias, scale = torch.randn(5, dtype=torch.bfloat16), torch.ones(())
    graph = str(make_fx(_entry_point_calls, tracing_mode=tracing_mode)(a, b, bias, scale).graph)
    for name in OPS:
        assert f"tlgemm.{name}.default" in graph, graph


def test_fake_tensors_take_the_fake_implementations():
    """FakeTensorMode's tensors (and FakeTensors passed outside it) went to the launchers."""
    with FakeTensorMode() as mode:
        a, b = torch.randn(7, 32, dtype=torch.bfloat16), torch.randn(32, 5, dtype=torch.bfloat16)
        bias, scale = torch.randn(5, dtype=torch.bfloat16), torch.ones(())
        results = _entry_point_calls(a, b, bias, scale)
    assert [tuple(r.shape) for r in results] == [(7, 5), (7, 5), (1, 7, 5), (7, 5)]
    assert [r.dtype for r in results] == [torch.bfloat16] * 4
    fake_a = mode.from_tensor(torch.randn(7, 32))
    assert tlgemm.matmul(fake_a, fake_a.t()).shape == (7, 7)
