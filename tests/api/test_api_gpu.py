"""GPU: tlgemm.matmul / addmm / bmm / scaled_mm against the float64 reference in both backends
(outputs NaN-poisoned first), the torch.library ops (opcheck, gradients) and
torch.compile(fullgraph=True) of a small MLP against eager.

Shapes are chosen so that most cases of a dtype share one M bucket and (N, K), hence one
schedule and one compiled kernel per layout: the suite exercises the entry points, not every
kernel (tests/cross_backend and the backends' own suites do that)."""

import importlib

import pytest
import torch

import tlgemm
from tlgemm import api
from tlgemm.testing import assert_gemm_close, poison_, poison_allocator, poisoned, random_operand, reference_gemm

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
BACKENDS = ["triton", "tilelang"]


def _need(backend: str, kernel: str = "matmul") -> None:
    if backend != "tilelang":
        return
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the TileLang backend runs on sm_90 only")
    if not hasattr(importlib.import_module("tlgemm.tilelang"), kernel):
        pytest.skip(f"tlgemm.tilelang has no {kernel} in this checkout")


def _operands(M, N, K, dtype, layout, generator):
    a = random_operand((M, K) if layout[0] == "n" else (K, M), dtype, generator=generator, device="cuda")
    b = random_operand((K, N) if layout[1] == "n" else (N, K), dtype, generator=generator, device="cuda")
    return (a if layout[0] == "n" else a.t()), (b if layout[1] == "n" else b.t())


def _out_dtype(dtype):
    return torch.int32 if dtype == torch.int8 else torch.bfloat16 if dtype == E4M3 else dtype


@pytest.fixture
def tf32():
    torch.backends.cuda.matmul.fp32_precision = "tf32"


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_layouts(backend, layout, generator):
    _need(backend)
    for M in (77, 100, 128):
        a, b = _operands(M, 256, 512, torch.bfloat16, layout, generator)
        out = poisoned((M, 256), torch.bfloat16, "cuda")
        assert tlgemm.matmul(a, b, out=out, backend=backend) is out
        assert_gemm_close(out, reference_gemm(a, b), torch.bfloat16, what=f"{backend} {layout} M={M}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, E4M3, torch.int8], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_dtypes(backend, dtype, generator, tf32):
    _need(backend)
    for M, N, K in ((77, 256, 512), (128, 200, 384), (1, 256, 512)):
        a, b = _operands(M, N, K, dtype, "nt", generator)
        poison_allocator((M, N), _out_dtype(dtype), "cuda")  # the output it allocates next: poisoned memory
        out = tlgemm.matmul(a, b, backend=backend)
        assert out.dtype == _out_dtype(dtype) and out.is_contiguous()
        assert_gemm_close(out, reference_gemm(a, b), dtype, allow_tf32=dtype == torch.float32,
                          what=f"{backend} {dtype} {M}x{N}x{K}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_strides_and_out(backend, generator):
    _need(backend)
    a = random_operand((77, 1024), torch.bfloat16, generator=generator, device="cuda")[:, ::2]  # copied
    b = random_operand((256, 512), torch.bfloat16, generator=generator, device="cuda").t()
    out = poisoned((256, 77), torch.bfloat16, "cuda").t()  # a column-major out
    assert tlgemm.matmul(a, b, out=out, backend=backend) is out
    assert_gemm_close(out, reference_gemm(a, b), torch.bfloat16)
    out32 = poisoned((77, 256), torch.float32, "cuda")
    tlgemm.matmul(a.contiguous(), b, out=out32, backend=backend)
    assert_gemm_close(out32, reference_gemm(a, b), torch.bfloat16)


BIASES = {
    "vector": lambda M, N, g: torch.randn(N, generator=g).to(torch.bfloat16),
    "fp32_vector": lambda M, N, g: torch.randn(N, generator=g),
    "scalar": lambda M, N, g: torch.randn((), generator=g),
    "full": lambda M, N, g: torch.randn(M, N, generator=g).to(torch.bfloat16),
    "per_row": lambda M, N, g: torch.randn(M, 1, generator=g),
}


@pytest.mark.parametrize("alpha, beta", [(1, 1), (0.5, 2.0)])
@pytest.mark.parametrize("kind", BIASES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_addmm(backend, kind, alpha, beta, generator):
    _need(backend)
    M, N, K = 77, 256, 512
    a, b = _operands(M, N, K, torch.bfloat16, "nt", generator)
    bias = BIASES[kind](M, N, generator).cuda()
    poison_allocator((M, N), torch.bfloat16, "cuda")
    out = tlgemm.addmm(bias, a, b, alpha=alpha, beta=beta, backend=backend)
    ref = torch.addmm(bias.double(), a.double(), b.double(), alpha=alpha, beta=beta)
    assert_gemm_close(out, ref, torch.bfloat16, what=f"addmm {backend} {kind}")


@pytest.mark.parametrize("kind", ["full", "row_of_out"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_addmm_into_its_own_bias(backend, kind, generator):
    """torch.addmm(c, a, b, out=c), and a bias that is a row of out (read by the epilogue while
    the kernel writes out): the bias as it was before the call."""
    _need(backend)
    M, N, K = 77, 256, 512
    a, b = _operands(M, N, K, torch.bfloat16, "nt", generator)
    out = torch.randn(M, N, generator=generator).to(torch.bfloat16).cuda()
    bias = out if kind == "full" else out[5]
    ref = torch.addmm(bias.double(), a.double(), b.double(), alpha=0.5, beta=2.0)
    assert tlgemm.addmm(bias, a, b, alpha=0.5, beta=2.0, out=out, backend=backend) is out
    assert_gemm_close(out, ref, torch.bfloat16, what=f"addmm into its bias, {backend} {kind}")


def test_repeat_call_with_an_out_sharing_an_input_is_refused(generator):
    _need("tilelang")
    a, b = _operands(128, 128, 128, torch.bfloat16, "nn", generator)
    out = torch.empty(128, 128, dtype=torch.bfloat16, device="cuda")
    tlgemm.matmul(a, b, out=out)
    assert api._REPEATS and tlgemm.matmul(a, b, out=out) is out
    with pytest.raises(ValueError, match=r"out: shares memory with a"):
        tlgemm.matmul(a, b, out=a)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bmm(backend, generator):
    _need(backend, "bmm")
    a = random_operand((1, 77, 512), torch.bfloat16, generator=generator, device="cuda").expand(3, 77, 512)
    b = random_operand((3, 256, 512), torch.bfloat16, generator=generator, device="cuda").mT
    out = poisoned((3, 77, 256), torch.bfloat16, "cuda")
    assert tlgemm.bmm(a, b, out=out, backend=backend) is out
    assert_gemm_close(out, a.double() @ b.double(), torch.bfloat16)
    poison_allocator((3, 77, 256), torch.bfloat16, "cuda")
    c = tlgemm.bmm(a.mT.contiguous().mT, b.contiguous(), backend=backend)
    assert_gemm_close(c, a.double() @ b.double(), torch.bfloat16)


@pytest.mark.parametrize("dtype", [E4M3, torch.int8], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_scaled_mm(backend, dtype, generator):
    _need(backend)
    M, N, K = 77, 256, 512
    a, b = _operands(M, N, K, dtype, "nt", generator)
    for sa, sb in ((torch.rand(1, generator=generator) + 0.5, torch.rand(1, generator=generator) + 0.5),
                   (torch.rand(M, 1, generator=generator) + 0.5, torch.rand(1, N, generator=generator) + 0.5)):
        sa, sb = sa.cuda(), sb.cuda()
        bias = torch.randn(N, generator=generator).to(torch.bfloat16).cuda()
        poison_allocator((M, N), torch.bfloat16, "cuda")
        out = tlgemm.scaled_mm(a, b, sa, sb, bias=bias, backend=backend)
        assert out.dtype == torch.bfloat16
        # int8 products are exact; the bf16 output rounding sets the bound
        assert_gemm_close(out, reference_gemm(a, b, scale_a=sa, scale_b=sb, bias=bias),
                          torch.bfloat16 if dtype == torch.int8 else dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scaled_mm_block_wise(backend, generator):
    _need(backend, "blockscaled_matmul")
    quantize = pytest.importorskip("tlgemm.quantize")
    M, N, K = 77, 256, 512
    x = torch.randn(M, K, generator=generator).cuda()
    w = torch.randn(N, K, generator=generator).cuda()
    xq, xs = quantize.quantize_fp8_blockwise(x, (1, 128))
    wq, ws = quantize.quantize_fp8_blockwise(w, (128, 128))
    poison_allocator((M, N), torch.bfloat16, "cuda")
    out = tlgemm.scaled_mm(xq, wq.t(), xs, ws, backend=backend)
    ref = (quantize.dequantize_fp8_blockwise(xq, xs, (1, 128)).double()
           @ quantize.dequantize_fp8_blockwise(wq, ws, (128, 128)).double().T)
    assert_gemm_close(out, ref, E4M3, blockscaled=True)


@pytest.mark.parametrize("M, N, K", [(100, 72, 1001), (300, 1001, 512), (16, 1001, 1001)])
def test_auto_runs_unaligned_rows_on_tilelang_with_its_copies(M, N, K, generator):
    """K or N rows that are not 16-byte aligned: "auto" keeps TileLang on Hopper (K zero-padded,
    the result through a temporary), into a poisoned out that is itself unaligned."""
    _need("tilelang")
    a, b = _operands(M, N, K, torch.bfloat16, "nt", generator)
    assert tlgemm.explain(a, b).backend == "tilelang"
    out = poisoned((M, N), torch.bfloat16, "cuda")
    assert tlgemm.matmul(a, b, out=out) is out
    assert_gemm_close(out, reference_gemm(a, b), torch.bfloat16, what=f"auto {M}x{N}x{K}")
    x = random_operand((3, M, K), torch.bfloat16, generator=generator, device="cuda")
    y = random_operand((3, K, N), torch.bfloat16, generator=generator, device="cuda")
    assert tlgemm.explain(x, y).backend == "tilelang"
    out3 = poisoned((3, M, N), torch.bfloat16, "cuda")
    assert tlgemm.bmm(x, y, out=out3) is out3
    assert_gemm_close(out3, x.double() @ y.double(), torch.bfloat16, what=f"auto bmm {M}x{N}x{K}")


def test_auto_backend_and_explain(generator):
    a, b = _operands(256, 512, 512, torch.bfloat16, "nt", generator)
    explanation = tlgemm.explain(a, b)
    assert explanation.target.name == torch.cuda.get_device_name() and not explanation.target.analysis
    tilelang_backend = importlib.import_module("tlgemm.tilelang")
    hopper = torch.cuda.get_device_capability() == (9, 0) and hasattr(tilelang_backend, "matmul")
    assert explanation.backend == ("tilelang" if hopper else "triton")
    if hopper:
        assert explanation.instruction.startswith("wgmma.m64n")


def test_repeat_calls_do_not_select_again(monkeypatch, tmp_path, generator):
    monkeypatch.setenv("TLGEMM_CACHE_DIR", str(tmp_path))
    calls = []
    select = api.select
    monkeypatch.setattr(api, "select", lambda *args, **kwargs: calls.append(args) or select(*args, **kwargs))
    api._forget_plans()
    a, b = _operands(100, 256, 512, torch.bfloat16, "nt", generator)
    for _ in range(4):
        poison_allocator((100, 256), torch.bfloat16, "cuda")
        assert_gemm_close(tlgemm.matmul(a, b), reference_gemm(a, b), torch.bfloat16)
    assert len(calls) == 1


def test_repeat_calls_reuse_the_launch_only_for_their_signature(generator):
    """A repeated TileLang matmul goes straight to its cached launch (api._REPEATS); calls
    whose a, b or out differ in strides, alignment or dtype take the full path, and every
    result matches the reference on fresh data."""
    _need("tilelang")
    api._forget_plans()
    for _ in range(3):
        a, b = _operands(100, 256, 512, torch.bfloat16, "nt", generator)
        poison_allocator((100, 256), torch.bfloat16, "cuda")
        assert_gemm_close(tlgemm.matmul(a, b, backend="tilelang"), reference_gemm(a, b), torch.bfloat16)
    assert len(api._REPEATS) == 1
    flat = random_operand((100 * 512 + 1,), torch.bfloat16, generator=generator, device="cuda")
    variants = {
        "a column-major": (a.t().contiguous().t(), b, None),
        "a misaligned": (flat[1:].view(100, 512), b, None),  # base 2 bytes off 16: K padded in a copy
        "out given": (a, b, poisoned((100, 256), torch.bfloat16, "cuda")),
        "out column-major": (a, b, poisoned((256, 100), torch.bfloat16, "cuda").t()),
        "out float32": (a, b, poisoned((100, 256), torch.float32, "cuda")),
        "8 rows (swap-AB candidates)": (a[:8], b, None),
    }
    for name, (x, y, out) in variants.items():
        for _ in range(2):
            result = tlgemm.matmul(x, y, out=out, backend="tilelang")
            assert out is None or result is out
            assert_gemm_close(result, reference_gemm(x, y), result.dtype, what=name)
    assert len(api._REPEATS) == 1 + len(variants)


def test_triton_repeat_calls_launch_the_compiled_kernel(generator):
    """A repeated Triton matmul goes straight to its compiled kernel (api._REPEATS,
    tlgemm.triton.cached_launch), persistent and Stream-K, each call's fresh data matching
    the reference; calls whose a, b or out differ in strides or dtype get their own; an
    operand that the API or the Triton launcher copies (neither row- nor column-major; rows
    along the unit stride no 16-byte multiple; data off 16-byte alignment) is never kept."""
    from tlgemm.schedules import Schedule

    api._forget_plans()
    for schedule in (None, Schedule(block_m=64, block_n=64).streamk(10_000).persistent()):
        for _ in range(3):
            a, b = _operands(100, 256, 512, torch.bfloat16, "nt", generator)
            poison_allocator((100, 256), torch.bfloat16, "cuda")
            result = tlgemm.matmul(a, b, backend="triton", schedule=schedule)
            assert_gemm_close(result, reference_gemm(a, b), torch.bfloat16)
    assert len(api._REPEATS) == 2
    flat = random_operand((100 * 512 + 1,), torch.bfloat16, generator=generator, device="cuda")
    kept = {
        "b row-major": lambda a, b: (a, b.contiguous(), None),
        "out given": lambda a, b: (a, b, poisoned((100, 256), torch.bfloat16, "cuda")),
        "out column-major": lambda a, b: (a, b, poisoned((256, 100), torch.bfloat16, "cuda").t()),
        "out float32": lambda a, b: (a, b, poisoned((100, 256), torch.float32, "cuda")),
    }
    copied = {
        "a column-major, rows of 100 elements": lambda a, b: (a.t().contiguous().t(), b, None),
        "a misaligned": lambda a, b: (flat[1:].view(100, 512).copy_(a), b, None),
        "a strided": lambda a, b: (torch.cat([a, a], 1)[:, ::2].copy_(a), b, None),
    }
    for variants, count in ((kept, 2 + len(kept)), (copied, 2 + len(kept))):
        for name, make in variants.items():
            for _ in range(3):
                x, y, out = make(*_operands(100, 256, 512, torch.bfloat16, "nt", generator))
                result = tlgemm.matmul(x, y, out=out, backend="triton")
                assert out is None or result is out
                assert_gemm_close(result, reference_gemm(x, y), result.dtype, what=name)
        assert len(api._REPEATS) == count, variants


class MLP(torch.nn.Module):
    def __init__(self, d_in, d_hidden, d_out, generator):
        super().__init__()

        def param(*shape):
            return torch.nn.Parameter((torch.randn(*shape, generator=generator) / shape[-1] ** 0.5).to(
                torch.bfloat16).cuda())

        self.w1, self.b1, self.w2 = param(d_hidden, d_in), param(d_hidden), param(d_out, d_hidden)

    def forward(self, x):
        return tlgemm.matmul(torch.nn.functional.gelu(tlgemm.addmm(self.b1, x, self.w1.t())), self.w2.t())


def test_compiled_mlp_matches_eager(generator):
    model = MLP(512, 1024, 256, generator)
    x = random_operand((77, 512), torch.bfloat16, generator=generator, device="cuda")
    with torch.no_grad():
        eager = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True)(x)
    assert_gemm_close(compiled, eager.double(), torch.bfloat16, what="compiled MLP vs eager")
    ref = torch.nn.functional.gelu(torch.addmm(model.b1.float(), x.float(), model.w1.float().t())).to(torch.bfloat16)
    assert_gemm_close(eager, (ref.double() @ model.w2.double().t()), torch.bfloat16, what="eager MLP vs torch")


def test_gradients_match_torch(generator):
    a = random_operand((77, 512), torch.bfloat16, generator=generator, device="cuda").requires_grad_()
    w = random_operand((256, 512), torch.bfloat16, generator=generator, device="cuda").requires_grad_()
    bias = torch.randn(256, generator=generator).cuda().requires_grad_()
    g = torch.randn(77, 256, generator=generator).cuda()
    (tlgemm.addmm(bias, a, w.t(), alpha=0.5).float() * g).sum().backward()
    a64, w64, b64 = (t.detach().double().requires_grad_() for t in (a, w, bias))
    (torch.addmm(b64, a64, w64.t(), alpha=0.5) * g.double()).sum().backward()
    for got, want in ((a.grad, a64.grad), (w.grad, w64.grad), (bias.grad, b64.grad)):
        assert got.shape == want.shape
        assert_gemm_close(got, want, torch.bfloat16)


@pytest.mark.parametrize("op", ["matmul", "addmm", "bmm", "scaled_mm"])
def test_opcheck(op, generator):
    def bf16(*shape):
        return random_operand(shape, torch.bfloat16, generator=generator, device="cuda")

    if op == "matmul":
        args = (bf16(77, 512).requires_grad_(), bf16(256, 512).t().requires_grad_(), None, "auto", None)
    elif op == "addmm":
        args = (bf16(256).requires_grad_(), bf16(77, 512).requires_grad_(), bf16(512, 256).requires_grad_(), 0.5, 2.0,
                None, "auto", None)
    elif op == "bmm":
        args = (bf16(2, 77, 512).requires_grad_(), bf16(2, 512, 256).requires_grad_(), None, "auto", None)
    else:
        a, b = _operands(77, 256, 512, E4M3, "nt", generator)
        args = (a, b, torch.rand(77, 1, device="cuda") + 0.5, torch.rand(1, 256, device="cuda") + 0.5, None,
                torch.bfloat16, "auto", None)
    # opcheck's test_schema perturbs the inputs with mul, which torch 2.11 has no fp8 kernel
    # for (seen on the H200: "mul_cuda" not implemented for 'Float8_e4m3fn'); the other checks run.
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    kwargs = {"test_utils": utils} if op == "scaled_mm" else {}
    torch.library.opcheck(getattr(torch.ops.tlgemm, op).default, args, **kwargs)


def _streamk(backend):
    """The backends' own Stream-K test schedules (a workspace per stream, flags the kernel resets)."""
    from tlgemm.schedules import Schedule

    if backend == "tilelang":
        return Schedule(block_m=128, block_n=128, block_k=64, num_stages=4).persistent().streamk(40)
    return Schedule(block_m=128, block_n=128, block_k=64, num_stages=3).streamk(48).persistent()


def _calls(backend, generator):
    """One call of each entry point as (name, make, call, reference, bound): make() draws fresh
    inputs (a dict whose "out" is the output buffer), call(**inputs) runs it on them,
    reference(**inputs) is its float64 result, and bound holds assert_gemm_close's dtype (and
    blockscaled) for it."""
    quantize = importlib.import_module("tlgemm.quantize")
    M, N, K = 1024, 768, 512

    def dense():
        a, b = _operands(M, N, K, torch.bfloat16, "nt", generator)
        return dict(a=a, b=b, out=poisoned((M, N), torch.bfloat16, "cuda"))

    def with_bias():
        return dict(dense(), c=random_operand((N,), torch.bfloat16, generator=generator, device="cuda"))

    def block_scaled():
        xq, xs = quantize.quantize_fp8_blockwise(torch.randn(M, K, generator=generator).cuda(), (1, 128))
        wq, ws = quantize.quantize_fp8_blockwise(torch.randn(N, K, generator=generator).cuda(), (128, 128))
        return dict(xq=xq, wq=wq, xs=xs, ws=ws, out=poisoned((M, N), torch.bfloat16, "cuda"))

    def blockwise_reference(xq, wq, xs, ws, out):
        return (quantize.dequantize_fp8_blockwise(xq, xs, (1, 128)).double()
                @ quantize.dequantize_fp8_blockwise(wq, ws, (128, 128)).double().T)

    def product(a, b, out, c=None):
        return reference_gemm(a, b) if c is None else reference_gemm(a, b) + c.double()

    return [
        ("matmul", dense, lambda a, b, out: tlgemm.matmul(a, b, out=out, backend=backend), product,
         dict(dtype=torch.bfloat16)),
        ("matmul, Stream-K", dense,
         lambda a, b, out: tlgemm.matmul(a, b, out=out, backend=backend, schedule=_streamk(backend)), product,
         dict(dtype=torch.bfloat16)),
        ("addmm", with_bias, lambda a, b, out, c: tlgemm.addmm(c, a, b, out=out, backend=backend), product,
         dict(dtype=torch.bfloat16)),
        ("scaled_mm, block-wise", block_scaled,
         lambda xq, wq, xs, ws, out: tlgemm.scaled_mm(xq, wq.t(), xs, ws, out=out, backend=backend),
         blockwise_reference, dict(dtype=E4M3, blockscaled=True)),  # against the dequantised inputs: 1e-2
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_calls_run_on_the_current_stream(backend, generator):
    """Each entry point launches on torch's current stream: on a side stream that writes the
    inputs only after a long sleep, a launch on any other stream would read poisoned inputs."""
    _need(backend, "blockscaled_matmul")
    side = torch.cuda.Stream()
    for name, make, call, reference, bound in _calls(backend, generator):
        inputs = make()
        call(**inputs)  # compile, select and build workspaces first
        fresh = make()
        for t in inputs.values():
            poison_(t)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(100_000_000)
            for key, t in inputs.items():
                if key != "out":
                    t.copy_(fresh[key])
            result = call(**inputs)
        torch.cuda.synchronize()
        assert result is inputs["out"]
        assert_gemm_close(result, reference(**fresh), **bound, what=f"{backend} {name}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_calls_replay_in_a_cuda_graph(backend, generator):
    """Each entry point captured in a CUDA graph (after a warm-up on a side stream, as torch
    asks) replays on fresh inputs copied into the captured buffers; Stream-K builds its
    workspace on the capture stream and leaves its flags zero for the next replay."""
    _need(backend, "blockscaled_matmul")
    for name, make, call, reference, bound in _calls(backend, generator):
        inputs = make()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call(**inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call(**inputs)
        for replay in range(3):
            fresh = make()
            for key, t in inputs.items():
                if key != "out":
                    t.copy_(fresh[key])
            poison_(inputs["out"])
            graph.replay()
            torch.cuda.synchronize()
            assert_gemm_close(inputs["out"], reference(**fresh), **bound, what=f"{backend} {name}, replay {replay}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_calls_on_another_gpu_than_the_current(backend, generator, tmp_path):
    """Tensors on cuda:1 while cuda:0 is current: each entry point runs on cuda:1 (first call
    and matmul's repeat path), as torch's ops do, and autotune times on the device it is given."""
    _need(backend, "blockscaled_matmul")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    torch.cuda.set_device(0)
    for name, make, call, reference, bound in _calls(backend, generator):
        with torch.cuda.device(1):
            inputs = make()
        for call_number in range(2):
            poison_(inputs["out"])
            result = call(**inputs)
            torch.cuda.synchronize(1)
            assert result is inputs["out"] and result.device == torch.device("cuda", 1)
            assert_gemm_close(result, reference(**inputs), **bound, what=f"{backend} {name}, call {call_number}")
    from tlgemm.schedules import AutotuneCache

    (tuned,) = tlgemm.autotune([(256, 256, 512)], torch.bfloat16, backend=backend, candidates=1, device="cuda:1",
                               cache=AutotuneCache(tmp_path), progress=False)
    assert tuned.schedule is not None, tuned.failed
    assert torch.cuda.current_device() == 0
