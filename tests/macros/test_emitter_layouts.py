"""CPU: the accumulator's row and column vector layouts hold, on each thread, exactly the rows
and columns its accumulator fragment holds (what ``acc[i, j] * v[i]`` needs to stay in
registers), checked element by element against ``accum_layout``."""

import itertools

import pytest

pytest.importorskip("tilelang")

from tilelang import tvm  # noqa: E402

from tlgemm.macros.emitter import WGMMAEmitter  # noqa: E402

CONFIGS = [  # block_m, block_n, warpgroups_m, warpgroups_n, thread_offset
    (64, 64, 1, 1, 0), (64, 128, 1, 1, 0), (128, 128, 2, 1, 0), (128, 256, 2, 1, 0), (128, 64, 1, 1, 0),
    (64, 256, 1, 2, 0), (128, 128, 1, 2, 0), (256, 128, 2, 1, 0), (64, 32, 1, 1, 128),
]

_ANALYZER = tvm.arith.Analyzer()


def _value(expr) -> int:
    return _ANALYZER.simplify(expr).value


def _c(v):
    return tvm.tirx.const(v, "int32")


def _holders(layout, index):
    """{thread: register index} of every replica of a vector layout's element ``index`` (a
    replicated Fragment's forward variables are (replica, index))."""
    return {_value(layout.map_forward_thread([_c(rep), _c(index)])[0]):
            _value(layout.map_forward_index([_c(rep), _c(index)])[0]) for rep in range(layout.replicate_size.value)}


@pytest.mark.parametrize("block_m, block_n, wgs_m, wgs_n, offset", CONFIGS)
def test_vector_layouts_follow_the_accumulator(block_m, block_n, wgs_m, wgs_n, offset):
    em = WGMMAEmitter("e4m3", "e4m3", "f32", block_m=block_m, block_n=block_n, block_k=128, warpgroups_m=wgs_m,
                      warpgroups_n=wgs_n, thread_offset=offset)
    acc, rows, cols = em.accum_layout(), em.accum_row_layout(), em.accum_col_layout()
    row_threads = {i: set() for i in range(block_m)}
    col_threads = {j: set() for j in range(block_n)}
    for i, j in itertools.product(range(block_m), range(block_n)):
        t = _value(acc.map_forward_thread([_c(i), _c(j)])[0])
        row_threads[i].add(t)
        col_threads[j].add(t)
    for extent, layout, threads in ((block_m, rows, row_threads), (block_n, cols, col_threads)):
        per_thread = {}
        for x in range(extent):
            held = _holders(layout, x)
            assert set(held) == threads[x], (x, sorted(held), sorted(threads[x]))
            for t, register in held.items():
                assert per_thread.setdefault((t, register), x) == x, f"thread {t} register {register} holds two values"
        registers = {r for _, r in per_thread}
        assert registers == set(range(len(registers))), "registers are not dense"
        assert len(per_thread) == extent * layout.replicate_size.value


def test_vector_layout_sizes():
    em = WGMMAEmitter("e4m3", "e4m3", "f32", block_m=128, block_n=256, block_k=128, warpgroups_m=2)
    assert em.accum_row_layout().replicate_size.value == 4
    assert em.accum_col_layout().replicate_size.value == 64
    assert [int(d) for d in em.accum_row_layout().get_output_shape()] == [2]
    assert [int(d) for d in em.accum_col_layout().get_output_shape()] == [64]


@pytest.mark.parametrize("block_m, block_n, wgs_m", [(128, 128, 2), (64, 128, 1), (64, 64, 1)])
@pytest.mark.parametrize("waves", [2, 3])
def test_stacked_waves_accumulator(block_m, block_n, wgs_m, waves):
    """``accum_layout(waves)``: row v · block_m + i of the stacked result sits on the thread
    that holds row i of one wave's accumulator, at that register plus v · accum_elems: every
    (thread, register) once, the registers dense."""
    em = WGMMAEmitter("e4m3", "e4m3", "f32", block_m=block_m, block_n=block_n, block_k=128, warpgroups_m=wgs_m)
    wave, stacked = em.accum_layout(), em.accum_layout(waves)
    assert [int(d) for d in stacked.get_input_shape()] == [waves * block_m, block_n]
    seen = set()
    for v, i, j in itertools.product(range(waves), range(block_m), range(block_n)):
        t = _value(stacked.map_forward_thread([_c(v * block_m + i), _c(j)])[0])
        r = _value(stacked.map_forward_index([_c(v * block_m + i), _c(j)])[0])
        assert t == _value(wave.map_forward_thread([_c(i), _c(j)])[0])
        assert r == _value(wave.map_forward_index([_c(i), _c(j)])[0]) + v * em.accum_elems
        seen.add((t, r))
    assert len(seen) == waves * block_m * block_n
    assert {r for _, r in seen} == set(range(waves * em.accum_elems))


def test_waves_rejects_zero():
    em = WGMMAEmitter("e4m3", "e4m3", "f32", block_m=64, block_n=64, block_k=128)
    with pytest.raises(ValueError, match="waves"):
        em.accum_layout(0)
