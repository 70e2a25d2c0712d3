"""CPU: the TileLang launcher's copy rule (operand orientation, TMA alignment padding) keeps
the product exact, its validation names the argument, and its Stream-K workspaces are kept."""

import pytest
import torch

from tlgemm._checks import check_int32_walk
from tlgemm.api import _tilelang_layouts
from tlgemm.schedules import Schedule
from tlgemm.tilelang import blockscaled_bmm, blockscaled_matmul, bmm, matmul
from tlgemm.tilelang import launch
from tlgemm.tilelang.launch import _orientation, _oriented, _output_route, _reading


def _stored(t, major, operand):
    """The stored orientation of a logical [M, K] / [K, N] operand: what TMA reads."""
    if operand == "A":
        return t if major == "K" else t.mT
    return t.mT if major == "K" else t


@pytest.mark.parametrize("shape", [(5, 7, 3), (16, 24, 29), (16, 24, 32), (1, 8, 8), (9, 1, 17)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float32])
@pytest.mark.parametrize("layouts", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_orientation_keeps_the_product(generator, shape, dtype, layouts):
    M, N, K = shape
    a = torch.randn(M, K, generator=generator).to(dtype)
    b = torch.randn(K, N, generator=generator).to(dtype)
    if layouts[0]:
        a = a.t().contiguous().t()
    if layouts[1]:
        b = b.t().contiguous().t()
    (M, K), N = a.shape, b.shape[1]
    how = _orientation(M, K, N, a.stride(), b.stride(), a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0,
                       a.element_size())
    A, B = _oriented(a, b, *how)
    a_major, b_major = ("MN" if h == "MN" else "K" for h in how[:2])
    stored = _stored(A, a_major, "A"), _stored(B, b_major, "B")
    assert all(t.is_contiguous() for t in stored), "the kernel declares each operand dense in its stored orientation"
    if dtype.itemsize != 2:
        assert a_major == b_major == "K", "WGMMA reads 8-bit and tf32 operands K-major only"
    for t in stored:
        assert (t.shape[-1] * t.element_size()) % 16 == 0, "TMA needs 16-byte row pitches"
    product = A.double() @ B.double()
    torch.testing.assert_close(product, a.double() @ b.double(), rtol=1e-12, atol=1e-12)


def _laid_out(t, layout):
    """t row-major (0), column-major (1), as every other column of a wider matrix (2), or
    row-major one element past a 16-byte boundary (3)."""
    if layout == 1:
        return t.t().contiguous().t()
    if layout == 2:
        return torch.cat([t, t], 1).reshape(t.shape[0], t.shape[1], 2)[..., 0]
    if layout == 3:
        return torch.cat([t.new_zeros(1), t.flatten()])[1:].view(t.shape)
    return t


@pytest.mark.parametrize("shape", [(16, 24, 29), (16, 24, 32), (8, 5, 29), (1, 8, 13), (9, 1, 17), (64, 128, 1),
                                   (8, 8, 1), (16, 16, 8)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float32])
@pytest.mark.parametrize("layouts", [(x, y) for x in range(4) for y in range(4)])
def test_explain_names_the_copies_the_launcher_makes(generator, shape, dtype, layouts):
    """explain()'s operand lines (api._tilelang_layouts) say "read as it is" exactly for the
    operands that the launcher's _oriented passes on without a copy, "copied" for the others,
    and the major it reads: an MN-major operand is copied to pad K unless both operands are
    MN-major, and with K = 1 a 16-bit operand that is dense both ways is read MN-major."""
    M, N, K = shape
    a = _laid_out(torch.randn(M, K, generator=generator).to(dtype), layouts[0])
    b = _laid_out(torch.randn(K, N, generator=generator).to(dtype), layouts[1])
    _check_explain_against_launcher(a, b, K)


def _check_explain_against_launcher(a, b, K):
    how = _reading(a, b)
    oriented = _oriented(a, b, *how)
    for (state, major), given, ran, h in zip(_tilelang_layouts(a, b, K), (a, b), oriented, how[:2]):
        read_as_given = ran.data_ptr() == given.data_ptr() and ran.stride() == given.stride()
        assert ("read as it is" in state) == read_as_given != ("copied" in state), (state, how)
        assert major == ("MN" if h == "MN" else "K"), (state, how)
        if how[2] and not read_as_given:
            assert f"K zero-padded from {K} to {K + how[2]}" in state, (state, how)


def _batched(t, matrix_layout, batch_layout):
    """A [B, rows, cols] operand from t [B, rows, cols]: each matrix laid out as ``_laid_out``'s
    ``matrix_layout`` (0-3), and the batch dense (0), broadcast from one matrix (stride 0, 1) or
    every other matrix of a stack twice as long (2)."""
    if batch_layout == 2:
        return _batched(torch.cat([t, t]), matrix_layout, 0)[::2]
    if matrix_layout == 1:
        t = t.mT.contiguous().mT
    elif matrix_layout == 2:
        t = torch.cat([t, t], -1).reshape(*t.shape, 2)[..., 0]
    elif matrix_layout == 3:
        t = torch.cat([t.new_zeros(1), t.flatten()])[1:].view(t.shape)
    return t[:1].expand(t.shape) if batch_layout == 1 else t


@pytest.mark.parametrize("shape", [(16, 24, 29), (16, 16, 32), (8, 8, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("matrix_layouts", [(0, 0), (1, 1), (0, 1), (3, 2)])
@pytest.mark.parametrize("batch_layouts", [(x, y) for x in range(3) for y in range(3)])
def test_explain_names_the_copies_the_bmm_launcher_makes(generator, shape, dtype, matrix_layouts, batch_layouts):
    """For bmm's 3-D operands too, explain's lines match the launcher's reading (``_reading``:
    an operand not dense across the batch, a broadcast one included, is copied K-major)."""
    M, N, K = shape
    a = _batched(torch.randn(3, M, K, generator=generator).to(dtype), matrix_layouts[0], batch_layouts[0])
    b = _batched(torch.randn(3, K, N, generator=generator).to(dtype), matrix_layouts[1], batch_layouts[1])
    _check_explain_against_launcher(a, b, K)
    if batch_layouts != (0, 0):
        assert "copied" in " ".join(state for state, _ in _tilelang_layouts(a, b, K))


@pytest.mark.parametrize("matrix_layouts", [(0, 0), (1, 1), (0, 1), (1, 0)])
@pytest.mark.parametrize("batch_stride", ["unsqueeze", 0, 7])
def test_a_batch_of_one_is_read_as_given_whatever_its_batch_stride(generator, matrix_layouts, batch_stride):
    """With one matrix in the batch the batch stride is never stepped: an operand of any batch
    stride (a column-major matrix's unsqueeze(0): M or K, a broadcast: 0, an odd one: 7) is
    read as given."""
    M, N, K = 16, 24, 32

    def one_matrix(t, matrix_layout):
        t = t.mT.contiguous().mT if matrix_layout else t
        if batch_stride == "unsqueeze":
            return t.unsqueeze(0)
        return t.as_strided((1, *t.shape), (batch_stride, *t.stride()))

    a = one_matrix(torch.randn(M, K, generator=generator).to(torch.bfloat16), matrix_layouts[0])
    b = one_matrix(torch.randn(K, N, generator=generator).to(torch.bfloat16), matrix_layouts[1])
    _check_explain_against_launcher(a, b, K)
    assert all("read as it is" in state for state, _ in _tilelang_layouts(a, b, K))


@pytest.mark.parametrize("dtype, K, pad", [(torch.bfloat16, 1001, 23), (torch.bfloat16, 4001, 31),
                                           (torch.bfloat16, 4040, 0), (torch.float8_e4m3fn, 4001, 95),
                                           (torch.float32, 30, 2), (torch.bfloat16, 64, 0)])
def test_k_padding_fills_whole_128_byte_rows(dtype, K, pad):
    """K rows that TMA cannot read (not 16-byte multiples) are zero-padded to whole 128-byte rows:
    16-byte rows that straddle lines ran 1.4-2.0x slower on the H100. Rows TMA can read are
    not copied for alignment at all."""
    size = dtype.itemsize
    assert _orientation(64, K, 64, (K, 1), (1, K), True, True, size) == (
        ("copy", "copy", pad) if pad else ("K", "K", 0))
    if pad:
        assert ((K + pad) * size) % 128 == 0 and pad < 128 // size
    a = torch.randn(8, K).to(dtype)
    b = torch.randn(K, 8).to(dtype)
    A, B = _oriented(a, b, *_orientation(8, K, 8, a.stride(), b.stride(), True, True, size))
    assert A.shape == (8, K + pad) and B.shape == (K + pad, 8)
    assert A[:, K:].float().abs().sum() == 0 and B[K:].float().abs().sum() == 0


def test_cpu_tensors_are_rejected():
    a = torch.randn(8, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a: on cpu"):
        matmul(a, a, Schedule().persistent())


def test_tile_walk_must_fit_int32():
    """Both launchers refuse a tile walk the kernels' int32 arithmetic cannot number
    (``check_int32_walk``): Stream-K's K-iterations of all tiles, a raster group's tiles."""
    streamk = Schedule(block_m=64, block_n=16, block_k=16).persistent().streamk(10**6)
    with pytest.raises(ValueError, match=r"schedule: Stream-K numbers the K-iterations of all 2097152 tiles \(1024 "):
        check_int32_walk(streamk, 2**11 * 64, 2**10 * 16, 2**10 * 16)  # 2**21 tiles x 2**10 K-iterations
    check_int32_walk(streamk, 2**11 * 64, 2**10 * 16, 2**10 * 16 - 16)
    check_int32_walk(streamk.streamk(0), 2**11 * 64, 2**10 * 16, 2**20 * 16)
    grouped = Schedule(block_m=64, block_n=16, block_k=64, group_size_m=2**20).persistent()
    with pytest.raises(ValueError, match=r"schedule: group_size_m=1048576 tile rows of 2048 tiles each exceed .*"
                                         r"here 512 tile rows or more make one group: use group_size_m=512"):
        check_int32_walk(grouped, 512 * 64, 2048 * 16, 64)
    check_int32_walk(grouped, 512 * 64, 2047 * 16, 64)
    with pytest.raises(ValueError, match=r"group_size_m=1048576 tile columns of 2048 tiles each"):
        check_int32_walk(grouped.map("grouped_n", 2**20), 2048 * 64, 512 * 16, 64)


@pytest.mark.parametrize("a, b, match", [
    (torch.randn(8, 8, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64), "a: dtype"),
    (torch.randn(8, 8).half(), torch.randn(8, 8).bfloat16(), "dtypes must match"),
    (torch.randn(8, 4).half(), torch.randn(8, 8).half(), "inner dimensions"),
    (torch.randn(8).half(), torch.randn(8, 8).half(), "2-D"),
])
def test_bad_operands(a, b, match):
    with pytest.raises((TypeError, ValueError), match=match):
        matmul(a, b, Schedule().persistent())


def test_bmm_names_its_operands_whole():
    a, b = torch.randn(2, 8, 8).half(), torch.randn(2, 4, 8).half()
    with pytest.raises(ValueError, match=r"inner dimensions differ: a is \(2, 8, 8\), b is \(2, 4, 8\)"):
        bmm(a, b, Schedule().persistent())
    with pytest.raises(ValueError, match="batch sizes differ"):
        bmm(a, torch.randn(3, 8, 8).half(), Schedule().persistent())


@pytest.mark.parametrize("num_sms, error", [(0, ValueError), (-4, ValueError), (2**31, ValueError),
                                            (2.5, TypeError), ("132", TypeError), (True, TypeError)])
def test_num_sms_is_checked_by_every_launcher(num_sms, error):
    """matmul, bmm and kernel_source took any num_sms into the kernel's spec: 0 and "132" were
    reported as a schedule's lowering error, -4 compiled, 2**31 and beyond were accepted."""
    a, b = torch.zeros(8, 16).half(), torch.zeros(16, 8).half()
    message = rf"^num_sms: expected (None or )?an int in 1\.\.2\*\*31 - 1 \(the kernels take it as an int32\), got "
    for call in (lambda: matmul(a, b, Schedule().persistent(), num_sms=num_sms),
                 lambda: bmm(a[None], b[None], Schedule().persistent(), num_sms=num_sms),
                 lambda: launch.kernel_source(8, 8, 16, torch.half, torch.half, None, Schedule().persistent(),
                                              num_sms=num_sms)):
        with pytest.raises(error, match=message):
            call()


def test_launch_keys_keep_the_type_of_num_sms():
    """2.0 and True hash as 2 and 1: without num_sms's type in the launch keys, a call with them
    after one with 2 or 1 skipped the check."""
    a = torch.zeros(8, 16).half()
    for value, other in ((2, 2.0), (1, True)):
        assert launch._launch_key(a, a, None, None, None, None, None, None, value) != launch._launch_key(
            a, a, None, None, None, None, None, None, other)
        assert launch._blockscaled_key(False, None, None, value, a, a, a, a, None, None) != launch._blockscaled_key(
            False, None, None, other, a, a, a, a, None, None)


def test_token_scales_with_a_zero_stride_are_not_read_by_tma():
    """A tensor map's strides are non-zero (the kernel's is built from the tensor's own), so a
    per-token scale broadcast over K blocks, or an xs shared by a batch, is not a TMA layout."""
    outer = torch.ones(4, 200).mT
    assert launch._tma_token_scales(outer) and launch._tma_token_scales(torch.ones(2, 4, 200).mT)
    assert not launch._tma_token_scales(torch.ones(200)[:, None].expand(200, 4))
    assert not launch._tma_token_scales(outer[None].expand(2, 200, 4))


def test_blockscaled_validation_names_the_argument():
    E4M3 = torch.float8_e4m3fn
    a, b = torch.zeros(4, 256).to(E4M3), torch.zeros(8, 256).to(E4M3)
    sa, sb = torch.ones(4, 2), torch.ones(1, 2)
    with pytest.raises(ValueError, match="out: dtype torch.bfloat16 differs from out_dtype=torch.float32"):
        blockscaled_matmul(a, b, sa, sb, out=torch.empty(4, 8, dtype=torch.bfloat16), out_dtype=torch.float32)
    with pytest.raises(TypeError, match="out: expected a torch.Tensor"):
        blockscaled_matmul(a, b, sa, sb, out=[1.0])
    with pytest.raises(TypeError, match=r"^out: dtype must be one of .*, got torch.int32$"):
        blockscaled_matmul(a, b, sa, sb, out=torch.empty(4, 8, dtype=torch.int32))
    with pytest.raises(TypeError, match="bias: expected a torch.Tensor"):
        blockscaled_matmul(a, b, sa, sb, bias=[0.0] * 8)
    with pytest.raises(ValueError, match=r"num_sms: expected None or an int in 1\.\.2\*\*31 - 1 .* got 0$"):
        blockscaled_matmul(a, b, sa, sb, num_sms=0)
    with pytest.raises(ValueError, match="scale_b: expected shape"):
        blockscaled_matmul(a, b, sa, torch.ones(2, 2))
    with pytest.raises(ValueError, match="a: on cpu"):
        blockscaled_matmul(a, b, sa, sb)
    with pytest.raises(ValueError, match="xs: expected a 3-D tensor"):
        blockscaled_bmm(a[None], b[None], sa, sb[None])
    with pytest.raises(ValueError, match="xs: expected shape"):
        blockscaled_bmm(a[None], b[None], sa[None, :, :1], sb[None])


@pytest.mark.parametrize("swap, out, M, N, route", [
    (False, "fresh", 24, 64, (False, True)),
    (False, "fresh", 24, 60, (False, False)),      # rows of 120 bytes: a padded temporary
    (False, "row", 24, 64, (False, True)),
    (False, "column", 24, 64, (False, False)),
    (True, "fresh", 64, 24, (True, True)),         # Cᵀ's tiles stored transposed into a fresh C [24, 64]
    (True, "fresh", 60, 24, (True, False)),
    (True, "fresh", 1, 24, (False, True)),         # a fresh C [24, 1]: its transpose is one dense row
    (True, "fresh", 1, 20, (True, False)),
    (True, "row", 64, 24, (True, True)),
    (True, "column", 64, 24, (False, True)),       # out.T is Cᵀ, row-major: the plain store
    (True, "strided", 64, 24, (True, False)),
])
def test_output_route(swap, out, M, N, route):
    """Where the kernel of the problem [M, N] (under swap-AB Cᵀ: the caller's C is [N, M])
    writes: transposed tiles for swap-AB unless out.T is a TMA target; directly into a dense,
    16-byte aligned buffer with 16-byte rows, else through a temporary."""
    shape = (N, M) if swap else (M, N)
    buffers = {"fresh": None, "row": torch.empty(shape, dtype=torch.bfloat16),
               "column": torch.empty(shape[::-1], dtype=torch.bfloat16).t(),
               "strided": torch.empty((shape[0], 2 * shape[1]), dtype=torch.bfloat16)[:, ::2]}
    assert _output_route(M, N, swap, buffers[out], 8) == route


def test_streamk_workspace_is_kept_per_stream_and_shape():
    """``_streamk_workspace`` (through ``tlgemm._checks.stream_workspace``): one (partials, flags)
    per stream and shape, flags zero, the same tensors again for the next launch (the kernel
    leaves the flags zero, so none is allocated or cleared per call). On the CPU, as the CUDA
    path needs a device, the stream part of the key is None."""
    cpu = torch.device("cpu")
    partials, flags = launch._streamk_workspace(cpu, 132, 128, 64, torch.float32)
    assert partials.shape == (132, 128, 64) and partials.dtype == torch.float32
    assert flags.dtype == torch.int32 and flags.tolist() == [0] * 132
    again = launch._streamk_workspace(cpu, 132, 128, 64, torch.float32)
    assert again[0] is partials and again[1] is flags
    other = launch._streamk_workspace(cpu, 132, 128, 64, torch.int32)
    assert other[0] is not partials and other[0].dtype == torch.int32


def test_a_lowering_error_names_its_failed_check_not_a_source_caret():
    """TileLang 0.1.15 can end a TVM error with the caret line of a source excerpt; the
    schedule error took the last line and so said nothing (e.g. mixed e4m3/e5m2 block-scaled
    GEMMs under swap-AB)."""
    from tlgemm.tilelang.launch import _tvm_reason

    message = ("InternalError: Traceback (most recent call last):\n  0: tvm::tl::LowerTileOp\n"
               "  File \"kernels.py\", line 560\nCheck failed: (result.supported) is false: T.tma_copy() requires "
               "TMA-capable target\n  560 |     T.copy(B[0, 0], ring)\n      |             ^")
    assert _tvm_reason(RuntimeError(message)).startswith("Check failed: (result.supported) is false: T.tma_copy()")
    assert _tvm_reason(RuntimeError("ValueError: no layout for buffer X\n   |   ^")) == \
        "ValueError: no layout for buffer X"
    assert _tvm_reason(RuntimeError("")) == "RuntimeError"
