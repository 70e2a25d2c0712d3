"""The schedule-trace kernel (the GEMM kernels' loops, recording instead of computing) runs
in the interpreter; for every launch program its (pid_m, pid_n, k_begin, k_end) steps must
equal tlgemm.schedules.work(pid, ...), in order."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlgemm.schedules import Schedule, num_programs, work

BASE = Schedule(block_m=32, block_n=16, block_k=16)
SCHEDULES = {
    "one_program_per_tile": BASE,
    "persistent_row": BASE.map("row").persistent(5),
    "persistent_column": BASE.map("column").persistent(4),
    "grouped_m3": BASE.map("grouped", 3).persistent(6),
    "grouped_n2": BASE.map("grouped_n", 2).persistent(7),
    "grouped_more_programs_than_tiles": BASE.map("grouped", 4).persistent(64),
    "chiplet_8x1": BASE.chiplet(8, 1).persistent(16),
    "chiplet_4x2": BASE.map("grouped", 2).chiplet(4, 2).persistent(12),
    "chiplet_3x4_ragged": BASE.chiplet(3, 4).persistent(29),
    "chiplet_not_persistent": BASE.chiplet(2, 3),
    "streamk_all_tiles": BASE.streamk(10_000).persistent(7),
    "streamk_3_tiles": BASE.map("grouped", 2).streamk(3).persistent(5),
    "streamk_1_tile_many_programs": BASE.streamk(1).persistent(13),
    "streamk_raster_n_chiplet": BASE.map("grouped_n", 3).streamk(5).chiplet(2, 2).persistent(6),
}
SHAPES = [(100, 70, 50), (1, 16, 16), (64, 48, 0), (33, 17, 200)]


def _check(interp, M, N, K, s):
    traced = interp.triton.schedule_trace(M, N, K, s, device="cpu")
    expected = [work(p, M, N, K, s) for p in range(num_programs(M, N, K, s))]
    assert traced == expected, f"{s} at {(M, N, K)}"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", SCHEDULES)
def test_trace_equals_host_reference(interp, name, shape):
    _check(interp, *shape, SCHEDULES[name])


@settings(max_examples=40, deadline=None)
@given(
    M=st.integers(1, 130), N=st.integers(1, 130), K=st.integers(0, 160),
    block_m=st.sampled_from([16, 32, 64]), block_n=st.sampled_from([16, 32]), block_k=st.sampled_from([16, 32]),
    kind=st.sampled_from(["grouped", "grouped_n", "row", "column"]), group=st.integers(1, 5),
    persistent=st.booleans(), num_sms=st.integers(1, 20), streamk=st.integers(0, 12),
    xcds=st.sampled_from([1, 2, 3, 8]), chunk=st.integers(1, 4),
)
def test_trace_equals_host_reference_random(interp, M, N, K, block_m, block_n, block_k, kind, group,
                                            persistent, num_sms, streamk, xcds, chunk):
    s = Schedule(block_m=block_m, block_n=block_n, block_k=block_k)
    s = s.map(kind, None if kind in ("row", "column") else group).chiplet(xcds, chunk if xcds > 1 else 1)
    if persistent or streamk:
        s = s.streamk(streamk).persistent(num_sms)
    _check(interp, M, N, K, s)
