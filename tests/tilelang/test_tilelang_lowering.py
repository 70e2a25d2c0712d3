"""CPU: each TileLang kernel family lowers for sm_90a; the CUDA source has TMA loads,
mbarrier pipelining, the expected wgmma instantiations, a TMA store, and no mma.sync."""

import dataclasses
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlgemm.schedules import Schedule
from tlgemm.schedules.selection import store_staging
from tlgemm.tilelang import kernel_source
from tlgemm.tilelang.kernels import blockscaled_gemm
from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
from tlgemm.tilelang.launch import blockscaled_spec

SCHEDULE = Schedule(block_m=128, block_n=256, block_k=64, num_stages=3, num_warpgroups=2).persistent(132)
CASES = {
    "persistent-bf16": (torch.bfloat16, torch.bfloat16, None, SCHEDULE, {}),
    "persistent-f16-mn": (torch.float16, torch.float16, None, SCHEDULE, dict(a_major="MN", b_major="MN")),
    "scaled-e4m3": (torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                    Schedule(block_m=128, block_n=128, block_k=128, num_stages=4).persistent(132),
                    dict(scale_a="row", scale_b="col", bias=True)),
    "streamk-tf32": (torch.float32, torch.float32, None,
                     Schedule(block_m=128, block_n=128, block_k=32, num_stages=3).persistent(132).streamk(40), {}),
    "streamk-bf16": (torch.bfloat16, torch.bfloat16, None,
                     Schedule(block_m=128, block_n=256, block_k=64, num_stages=4, num_warpgroups=2)
                     .persistent(132).streamk(66), {}),
    "persistent-int8": (torch.int8, torch.int8, None,
                        Schedule(block_m=128, block_n=128, block_k=128, num_stages=4).persistent(132), {}),
    "swap-ab-streamk-e4m3": (torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                             Schedule(block_m=128, block_n=16, block_k=128, num_stages=9).persistent(132)
                             .streamk(56).swap_ab(), dict(scale_a="tensor", scale_b="tensor")),
    # TileLang's ThreadSync rejected this one while the fix-up's barriers sat under a per-program test
    "streamk-bf16-tall-narrow": (torch.bfloat16, torch.bfloat16, None,
                                 Schedule(block_m=256, block_n=16, block_k=64, num_stages=6).persistent(132)
                                 .streamk(43), {}),
}
WGMMA = {
    "persistent-bf16": "kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 256, 16, false, false",
    "persistent-f16-mn": "kFloat16, tl::DataType::kFloat16, tl::DataType::kFloat32, 64, 256, 16, true, true",
    "scaled-e4m3": "kFloat8_e4m3, tl::DataType::kFloat8_e4m3, tl::DataType::kFloat32, 64, 128, 32, false, false",
    "streamk-tf32": "kTensorFloat32, tl::DataType::kTensorFloat32, tl::DataType::kFloat32, 64, 128, 8, false, false",
    "streamk-bf16": "kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 256, 16, false, false",
    "persistent-int8": "kInt8, tl::DataType::kInt8, tl::DataType::kInt32, 64, 128, 32, false, false",
    "swap-ab-streamk-e4m3": "kFloat8_e4m3, tl::DataType::kFloat8_e4m3, tl::DataType::kFloat32, 64, 16, 32, false, false",
    "streamk-bf16-tall-narrow": "kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 16, 16, false, false",
}


@pytest.fixture(scope="module", params=list(CASES))
def lowered(request):
    a, b, out, schedule, kw = CASES[request.param]
    return request.param, schedule, kernel_source(512, 512, 512, a, b, out, schedule, **kw)


def test_structure(lowered):
    name, schedule, src = lowered
    assert "mma.sync" not in src and "mma_sync" not in src
    assert src.count("tl::tma_load(") >= 2 and "tl::tma_store(" in src
    assert re.search(r"\.expect_transaction\(", src) and re.search(r"\]\.wait\(", src)
    assert f"init({schedule.num_warpgroups})" in src, "empty barriers count one arrival per consumer warpgroup"
    first_of_warpgroup = "% 128) == 0) {" if schedule.num_warpgroups > 1 else "(((int)threadIdx.x) == 0) {"
    assert first_of_warpgroup in src, "the first thread of each warpgroup releases a slot"
    store = src.index("tl::tma_store(")
    in_flight = store_staging(schedule.block_n)[1] - 1
    assert f"tl::tma_store_wait<{in_flight}, true>()" in src[:store], "a chunk's store waits only for the one before"
    assert "tl::tma_store_wait<0, true>()" in src[store:], "the last store is drained before exit"
    assert "warpgroup_reg_dealloc<40>" in src and "warpgroup_reg_alloc<232>" in src
    instantiations = set(re.findall(r"wgmma_ss<tl::DataType::([^>]*)>", src))
    assert instantiations and all(i.startswith(WGMMA[name]) for i in instantiations), instantiations
    assert "warpgroup_wait<1>" in src, "one wgmma batch stays in flight across K-iterations"


@pytest.mark.parametrize("major", ["K", "MN"])
def test_batched_kernel_loads_and_stores_3d_boxes(major):
    """bmm's kernel: every TMA load and the store carry the tile's GEMM index as the third
    coordinate; the tiles of all GEMMs are dealt out batch-major by one persistent grid."""
    src = kernel_source(512, 512, 512, torch.bfloat16, torch.bfloat16, None, SCHEDULE, a_major=major, b_major=major,
                        batched=True)
    loads = re.findall(r"tl::tma_load\(([AB])_desc, [^;]*, (\w+)\);", src)
    assert {name for name, _ in loads} == {"A", "B"} and len({batch for _, batch in loads}) == 1, loads
    batch = loads[0][1]
    assert re.search(rf"tl::tma_store\(C_desc, [^;]*, {batch}\);", src)
    assert "BATCH" in src and "mma.sync" not in src


def test_streamk_fixup_is_flagged():
    """Partials published after a consumer-only named barrier with a release store; the owner
    spins with acquire loads, then sets the flag back to 0 (relaxed) for the next launch."""
    a, b, out, schedule, kw = CASES["streamk-tf32"]
    src = kernel_source(512, 512, 512, a, b, out, schedule, **kw)
    assert "AtomicLoad" in src and "__sync_thread_partial(9" in src
    stores = re.findall(r"AtomicStore\(\(&\(flags\[[^\]]+\]\)\), (\d), (\d)\)", src)
    assert sorted(stores) == [("0", "0"), ("1", "3")], stores


def test_tir_is_available_without_gpu():
    tir = kernel_source(64, 64, 64, torch.bfloat16, torch.bfloat16, None, SCHEDULE, emit="tir")
    assert "ptx_wgmma_ss" in tir


def test_errors():
    with pytest.raises(ValueError, match="emit"):
        kernel_source(64, 64, 64, torch.bfloat16, torch.bfloat16, None, SCHEDULE, emit="ptx")
    with pytest.raises(ValueError, match="M: expected a positive int"):
        kernel_source(0, 64, 64, torch.bfloat16, torch.bfloat16, None, SCHEDULE)


def test_schedule_rules():
    with pytest.raises(ValueError, match="split_k"):
        kernel_source(64, 64, 64, torch.bfloat16, torch.bfloat16, None, Schedule().splitk(2))
    bf16 = torch.bfloat16
    cases = {  # schedules that lowered into a kernel that hangs, spills or fails deep in TileLang
        "one stage": (Schedule(block_m=64, block_n=64, block_k=64, num_stages=1).persistent(132),
                      r"schedule: num_stages must be >= 2 for the TileLang kernels"),
        "N split": (Schedule(block_m=64, block_n=128, block_k=64, num_warpgroups=2).persistent(132),
                    r"schedule: a 64x128 tile on 2 consumer warpgroups splits block_n between them"),
        "spill": (Schedule(block_m=128, block_n=256, block_k=64, num_warpgroups=1).persistent(132),
                  r"schedule: a 128x256 tile on 1 consumer warpgroup\(s\) holds 256 accumulators per thread, more "
                  r"than 192"),
        "shared memory": (Schedule(block_m=256, block_n=16, block_k=128, num_stages=6).persistent(132).streamk(43),
                          r"schedule: needs 427008 bytes of shared memory .* the device allows 232448"),
        "int32 walk": (Schedule(block_m=64, block_n=16, block_k=16).persistent(132).streamk(10**6),
                       r"schedule: Stream-K numbers the K-iterations of all 1048576 tiles \(2048 each\)"),
    }
    for name, (schedule, message) in cases.items():
        with pytest.raises(ValueError, match=message):
            kernel_source(32768, 32768, 32768, bf16, bf16, None, schedule)
    one_stage = Schedule(block_m=64, block_n=128, block_k=128, num_stages=1).persistent(132)
    with pytest.raises(ValueError, match=r"schedule: num_stages must be >= 2"):
        blockscaled_gemm(blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, bf16, one_stage, 132))
    with pytest.raises(ValueError, match=r"schedule: bmm runs the persistent kernel \(no Stream-K, swap-AB"):
        kernel_source(64, 512, 64, bf16, bf16, None, SCHEDULE.swap_ab(), batched=True)
    with pytest.raises(ValueError, match=r"a_major: expected 'K' or 'MN', got 'X'"):
        kernel_source(64, 64, 64, bf16, bf16, None, SCHEDULE, a_major="X")
    with pytest.raises(ValueError, match=r"scale_a: expected None, 'tensor' or 'row', got 'col'"):
        kernel_source(64, 64, 64, torch.float8_e4m3fn, torch.float8_e4m3fn, None, SCHEDULE, scale_a="col")


def test_majors_take_their_aliases():
    """"mn" names the MN-major A as "MN" does (the kernel read a K-major view of it before)."""
    upper = kernel_source(512, 512, 512, torch.float16, torch.float16, None, SCHEDULE, a_major="MN", b_major="K",
                          emit="tir")
    assert kernel_source(512, 512, 512, torch.float16, torch.float16, None, SCHEDULE, a_major="mn", b_major="k-major",
                         emit="tir") == upper
    assert 'A = T.match_buffer(A_handle, (M, K), "float16", strides=(1, M))' in upper


def test_swap_ab_source_is_the_launched_kernel():
    """kernel_source under swap-AB builds what the launcher does: the kernel's A is b.T (so the
    call's per-row scale_a is the kernel's per-column scale_b) and the bias runs along its rows."""
    schedule = Schedule(block_m=64, block_n=16, block_k=64, num_stages=4).persistent(132)
    tir = kernel_source(16, 4096, 512, torch.bfloat16, torch.bfloat16, None, schedule.swap_ab(), scale_a="row",
                        bias=True, emit="tir")
    assert "A_scale = T.match_buffer(A_scale_handle, (1,), strides=(1,))" in tir
    assert "B_scale = T.match_buffer(B_scale_handle, (N,), strides=(1,))" in tir
    assert 'bias = T.match_buffer(bias_handle, (M,), "bfloat16", strides=(1,))' in tir


def test_swap_ab_stores_the_swapped_problem_transposed_into_c():
    """Swap-AB runs the plain kernel on Cᵀ = Bᵀ·Aᵀ and stores each tile transposed into the
    caller's row-major C [M, N] (declared [N, NC] in the kernel's terms): no second kernel."""
    schedule = Schedule(block_m=64, block_n=32, block_k=64, num_stages=4).persistent(132)
    swapped = kernel_source(16, 1024, 512, torch.bfloat16, torch.bfloat16, None, schedule.swap_ab(), emit="tir")
    plain = kernel_source(1024, 16, 512, torch.bfloat16, torch.bfloat16, None, schedule, emit="tir")
    assert 'C = T.match_buffer(C_handle, (N, NC), "bfloat16", strides=(NC, 1))' in swapped
    assert 'C = T.match_buffer(C_handle, (M, NC), "bfloat16", strides=(NC, 1))' in plain


def test_blockscaled_kernel_lowers():
    """One consumer warpgroup (64x128): QGMMA e4m3 into two temporary accumulators, each batch
    cleared by scale-d = 0; the next K block's batch is in flight (wait_group 1) while the
    previous one is promoted; A and B arrive by TMA, the scales by cp.async tracked by the same
    mbarrier, into a scale ring of stages + 1 slots; each K block's A/B slot is released right
    after its wgmma is done, before its promotion."""
    import tilelang
    from tilelang import tvm

    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import BLOCKSCALED_PASS_CONFIGS, blockscaled_spec
    from tlgemm.tilelang.stages import BLOCKSCALED_PRODUCER_REGISTERS, BlockScaledContext

    schedule = Schedule(block_m=64, block_n=128, block_k=128, num_stages=4, num_warpgroups=1).persistent(132)
    assert BlockScaledContext.fragments_of(schedule) == (2, 1)
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(opt_level=3, config=BLOCKSCALED_PASS_CONFIGS), target:
        src = tilelang.lower(blockscaled_gemm(spec), target=target).kernel_source
    wgmma = re.findall(r"wgmma_ss<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, "
                       r"tl::DataType::kFloat32, 64, 128, 32, false, false, 1, 1>\([^;]*, (\w+|\d)\);", src)
    assert len(wgmma) == 16 and wgmma == ["0", "1", "1", "1"] * 4, wgmma
    assert "warpgroup_wait<1>" in src and "warpgroup_wait<0>" in src
    assert "mma.sync" not in src and src.count("tl::tma_load(") == 2
    assert "mbarrier_cp_async_arrive_noinc" in src and "cp_async_gs_conditional" not in src
    stages = spec.schedule.num_stages
    assert re.search(rf"cp_async_gs<4>\(\(&\(\(\(float\*\)v_\d+\)\[\(+v_\d+ % {stages + 1}\) \* 64\)", src)
    releases = re.findall(r"warpgroup_wait<(\d)>\(\);\s*if \(\(\(int\)threadIdx.x\) == 0\) \{\s*"
                          rf"v_\d+\[\(it_\d+ % {stages}\)\]\.arrive\(\);", src)
    assert releases == ["1", "1", "1", "0", "0"], releases
    copies = re.findall(r"cp_async_gs<4>\([^;]*(SA|SB)\[([^;]*)", src)  # the scales at their own strides
    assert sorted(name for name, _ in copies) == ["SA", "SB"], copies
    assert all(f"{name.lower()}_stride0" in index and f"{name.lower()}_stride1" in index for name, index in copies)
    assert f"warpgroup_reg_dealloc<{BLOCKSCALED_PRODUCER_REGISTERS}>" in src and "warpgroup_reg_alloc<232>" in src


@pytest.mark.parametrize("a_dtype, b_dtype", [(torch.float8_e4m3fn, torch.float8_e5m2),
                                              (torch.float8_e5m2, torch.float8_e4m3fn)], ids=str)
@pytest.mark.parametrize("swap", [True, False])
def test_mixed_fp8_blockscaled_kernel_takes_wgmma_dtypes_in_operand_order(a_dtype, b_dtype, swap):
    """Mixed e4m3/e5m2: under swap-AB the WGMMA A operand is B (the weights), so the wgmma
    names b's dtype first, and A's and B's tiles are staged in their own dtypes (TileLang
    refused to lower a TMA copy between buffers of different fp8 dtypes when the context
    took them in the call's order)."""
    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.launch import _lowering

    schedule = Schedule(block_m=64, block_n=16 if swap else 128, block_k=128, num_stages=4,
                        num_warpgroups=1).persistent(132)
    schedule = schedule.swap_ab() if swap else schedule
    with _lowering(schedule):
        src = lower_to_cuda(blockscaled_gemm(blockscaled_spec(a_dtype, b_dtype, torch.bfloat16, schedule, 132)),
                            BLOCKSCALED_PASS_CONFIGS)
    names = {torch.float8_e4m3fn: "kFloat8_e4m3", torch.float8_e5m2: "kFloat8_e5m2"}
    first, second = (b_dtype, a_dtype) if swap else (a_dtype, b_dtype)
    wgmma = set(re.findall(r"wgmma_ss<tl::DataType::(\w+), tl::DataType::(\w+),", src))
    assert wgmma == {(names[first], names[second])}, wgmma


@pytest.mark.parametrize("block_n", [16, 64, 128])
def test_blockscaled_two_warpgroups_take_one_temporary(block_n):
    """Two consumer warpgroups (128 x block_n, block_k 128): one temporary, each K block's
    batch waited for (wait_group 0) before its promotion, none left in flight; at block_k 256
    (two scale blocks a K-iteration) the tile keeps its two temporaries."""
    import tilelang
    from tilelang import tvm

    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import BLOCKSCALED_PASS_CONFIGS, blockscaled_spec
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = Schedule(block_m=128, block_n=block_n, block_k=128, num_stages=4, num_warpgroups=2).persistent(132)
    assert BlockScaledContext.fragments_of(schedule) == (1, 1)
    assert BlockScaledContext.fragments_of(dataclasses.replace(schedule, block_k=256)) == (2, 1)
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(opt_level=3, config=BLOCKSCALED_PASS_CONFIGS), target:
        src = tilelang.lower(blockscaled_gemm(spec), target=target).kernel_source
    assert "warpgroup_wait<0>" in src and "warpgroup_wait<1>" not in src
    assert re.search(rf"wgmma_ss<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, "
                     rf"tl::DataType::kFloat32, 64, {block_n}, 32,", src)


def test_batched_blockscaled_kernel_lowers():
    """blockscaled_bmm's kernel: the TMA loads and the store carry the GEMM index, and the
    scale copies read the batch's own scale rows."""
    import tilelang
    from tilelang import tvm

    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import BLOCKSCALED_PASS_CONFIGS, blockscaled_spec, default_blockscaled_schedule

    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                            default_blockscaled_schedule(4096).persistent(132), 132, batched=True)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(opt_level=3, config=BLOCKSCALED_PASS_CONFIGS), target:
        src = tilelang.lower(blockscaled_gemm(spec), target=target).kernel_source
    loads = re.findall(r"tl::tma_load\(([AB])_desc, [^;]*, (\w+)\);", src)
    assert {name for name, _ in loads} == {"A", "B"} and len({batch for _, batch in loads}) == 1, loads
    assert re.search(rf"tl::tma_store\(C_desc, [^;]*, {loads[0][1]}\);", src)
    copies = re.findall(r"cp_async_gs<4>\([^;]*(SA|SB)\[([^;]*)", src)
    assert {name for name, _ in copies} == {"SA", "SB"}, copies
    assert all(f"((int64_t){loads[0][1]}) * ((int64_t){name.lower()}_stride0)" in index for name, index in copies)


@pytest.mark.parametrize("block_n, temporaries, width, branches", [(160, 1, 2, 4), (192, 1, 2, 2), (112, 1, 2, 0),
                                                                    (176, 1, 3, 0)])
def test_blockscaled_kernel_lowers_with_non_power_of_two_block_n(block_n, temporaries, width, branches):
    """A 128 x block_n tile on two warpgroups: wgmma N = block_n, one temporary (no wait_group 1;
    ``BlockScaledContext.fragments_of``), the B scales of every
    128-column block a tile can touch staged, each column selecting its own: in one branch
    per offset of the tile modulo 128 where a whole-tile temporary has at most
    ``offset_branches`` of them (``branches``), else by a select per 8-column group."""
    import tilelang
    from tilelang import tvm

    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import BLOCKSCALED_PASS_CONFIGS, blockscaled_spec
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = Schedule(block_m=128, block_n=block_n, block_k=128, num_stages=4, num_warpgroups=2).persistent(132)
    assert BlockScaledContext.fragments_of(schedule) == (temporaries, 1)
    assert BlockScaledContext.b_scale_width_of(block_n) == width
    assert BlockScaledContext.promotes_by_offset(schedule) == bool(branches)
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(opt_level=3, config=BLOCKSCALED_PASS_CONFIGS), target:
        src = tilelang.lower(blockscaled_gemm(spec), target=target).kernel_source
    assert set(re.findall(r"wgmma_ss<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, "
                          r"tl::DataType::kFloat32, 64, (\d+), 32,", src)) == {str(block_n)}
    assert ("warpgroup_wait<1>" in src) == (temporaries == 2)
    assert f"* {block_n}) % 128)" in src  # the tile's offset into its first scale block selects the B scale
    offsets = sorted(int(k) for k in re.findall(rf"\* {block_n}\) % 128\) == (\d+)\)", src))
    assert offsets == list(range(0, 128, 128 // branches) if branches else [])
    # the per-group select reads the tile's offset; with the branches only their tests do
    selects = src.count(f"* {block_n}) % 128)") - len(offsets)
    assert (selects > 0) == (not branches)
    assert "mma.sync" not in src


def ring_rounds(stages: int) -> str:
    """The block-scaled consumer's test for a tile that starts at ring slot 0 and fills whole
    rounds of a ring of ``stages`` (``consume_blockscaled``'s ``unroll_rounds``), as the
    generated CUDA writes it."""
    return rf"if \(\(\(\w+ % {stages}\) \+ \(max\(1, \(\(K \+ 127\) >> 7\)\) % {stages}\)\) == 0\) \{{"


RING_ROUNDS = ring_rounds(4)


@pytest.mark.parametrize("block_m, warpgroups", [(128, 2), (64, 1)])
def test_blockscaled_wide_tile_splits_its_temporary(block_m, warpgroups):
    """128x256 on two warpgroups (64x256 on one): each K block as two m64n128 wgmma batches into one
    half-width temporary, A from registers (RS, copied once per K block: the first block's
    before the loop, each next block's once the last batch's wait has freed the registers,
    before that batch's promotion), B's descriptor moved 128 rows (16 KiB) for the second,
    each batch waited for (wait_group 0) and promoted before the next; the last K block
    peeled off (nothing to copy after it; on one warpgroup it lowers only with its slot
    given back after its promotions); one staging buffer, so the ring keeps 4 stages in
    227 KiB. On two warpgroups, with the token scales by TMA, a tile that starts at ring slot 0
    and fills whole rounds of the ring runs each round unrolled, every slot a constant: B's
    descriptor moved by literal offsets (2048 a slot, 1024 for the second part), before the
    generic loop; with the scales by cp.async (ptxas spilled the producer) it does not."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import _blockscaled_smem, blockscaled_spec, blockscaled_stages_that_fit
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = blockscaled_stages_that_fit(Schedule(block_m=block_m, block_n=256, block_k=128, num_stages=4,
                                                    num_warpgroups=warpgroups).persistent(132))
    assert schedule.num_stages == 4 and BlockScaledContext.store_staging_of(schedule) == (64, 1)
    assert _blockscaled_smem(schedule, torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16) <= 232448
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132)
    assert re.search(RING_ROUNDS, lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)) is None
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                            tma_token_scales=True)
    src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
    assert set(re.findall(r"wgmma_rs<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, "
                          r"tl::DataType::kFloat32, 64, (\d+), 32,", src)) == {"128"} and "wgmma_ss" not in src
    rounds = re.search(RING_ROUNDS, src)
    assert (rounds is not None) == (warpgroups == 2)
    if rounds:
        generic = src.index("} else {", rounds.end())
        literal = re.findall(r"wgmma_rs<[^;]*, uint64_t\(desc\w* \+ (\d+)\), [^;]*, 0\);", src[rounds.end():generic])
        # the unrolled round in the loop, then the last round (its last block peeled): 4 blocks x 2 parts each
        assert literal == [str(1024 * i) for i in range(8)] * 2, literal
        assert src.count("wgmma_rs<") == 16 + 64
    full, src = src, src[generic:] if rounds else src  # the generic path: as on one warpgroup
    a_copies = [m.start() for m in re.finditer(r"\*\(fp8_e4_4_t\*\)\(\w+ \+ \(\w+ \* 4\)\) = ", src)]
    assert len(a_copies) == 2  # A: 16 x 4 bytes a thread, before the loop and inside it
    # each part's first atom (scale-d 0): B's start address, in 16-byte units, 1024 further for the second part
    b_atoms = list(re.finditer(r"wgmma_rs<[^;]*, uint64_t\((desc\w*) \+ \(*([^;]*?)\)+, "
                               r"reinterpret_cast<uint32_t\*>\(\w+ \+ 0\), 0\);", src))
    b_offsets = [m.groups() for m in b_atoms]
    assert len(b_offsets) == 4 and len({d for d, _ in b_offsets}) == 1, b_offsets  # the loop's block, the last
    assert all(o.endswith("+ 1024") == (i % 2 == 1) for i, (_, o) in enumerate(b_offsets)), b_offsets
    # the next block's A: after the loop's second batch and its wait, before the peeled last block
    second_wait = src.index("warpgroup_wait<0>", b_atoms[1].end())
    assert a_copies[0] < b_atoms[0].start() and second_wait < a_copies[1] < b_atoms[2].start()
    assert full.count("initialize_wgmma_descriptor") == 1, "B's descriptor is built once, before the K loop"
    assert "warpgroup_wait<1>" not in full and src.count("warpgroup_wait<0>") >= 2
    assert "mma.sync" not in full


@pytest.mark.parametrize("block_n", [192, 176])
def test_blockscaled_whole_tile_unrolls_the_ring_rounds(block_n):
    """128x192 / 128x176 on two warpgroups, one whole-tile temporary, both operands from shared
    memory: with the token scales by TMA a tile that starts at ring slot 0 and fills whole rounds
    of the 4-stage ring runs each round unrolled, A's and B's descriptors moved by literal
    offsets (a slot: 1024 and block_n * 8 in 16-byte units); then the generic loop. With the
    scales by cp.async there are no rounds."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import blockscaled_spec

    schedule = Schedule(block_m=128, block_n=block_n, block_k=128, num_stages=4, num_warpgroups=2).persistent(132)
    for tma in (False, True):
        spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                                tma_token_scales=tma)
        src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
        rounds = re.search(RING_ROUNDS, src)
        assert (rounds is not None) == tma
        if tma:
            body = src[rounds.end():]  # the generic loop's offsets are not literals: it matches none
            firsts = re.findall(r"wgmma_ss<[^;]*uint64_t\(desc_a \+ \(*\w+ \* 512\)(?: \+ (\d+))?\)+, "
                                r"uint64_t\(desc_b \+ (\d+)\), [^;]*, 0\);", body)
            assert firsts == [(str(1024 * s) if s else "", str(block_n * 8 * s)) for s in range(4)], firsts
        assert "mma.sync" not in src


@pytest.mark.parametrize("block_m, block_n, warpgroups, swap, waves",
                         [(256, 128, 2, False, 2), (128, 128, 1, False, 2), (128, 128, 2, False, 1),
                          (128, 256, 2, False, 1), (256, 64, 2, False, 1), (256, 96, 2, False, 1),
                          (128, 32, 1, True, 1)], ids=str)
def test_blockscaled_row_waves_rule(block_m, block_n, warpgroups, swap, waves):
    """Row waves where two whole-tile temporaries do not fit but the result and one wave's do,
    the warpgroups splitting M and block_n a power of two up to 128 (not swap-AB); such a tile
    has one temporary and no parts."""
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = Schedule(block_m=block_m, block_n=block_n, block_k=128, num_stages=4,
                        num_warpgroups=warpgroups).persistent()
    schedule = schedule.swap_ab() if swap else schedule
    assert BlockScaledContext.waves_of(schedule) == waves
    if waves > 1:
        assert BlockScaledContext.fragments_of(schedule) == (1, 1)


@pytest.mark.parametrize("stages, ring", [(2, 16), (3, 16), (4, 16), (6, 16), (7, 16), (8, 24)])
def test_blockscaled_scale_ring(stages, ring):
    """The staged scales' ring: a multiple of the scale group (its slots contiguous) with at
    least stages + group + 1 slots (a group written while K-iterations it - stages - 1 .. it - 1
    may still be read); the launcher's shared-memory count includes it."""
    import torch

    from tlgemm.tilelang.launch import _blockscaled_smem
    from tlgemm.tilelang.stages import BlockScaledContext

    assert BlockScaledContext.scale_group == 8
    schedule = Schedule(block_m=128, block_n=128, block_k=128, num_stages=stages, num_warpgroups=1).persistent()
    assert BlockScaledContext.scale_ring_of(schedule) == ring
    more = Schedule(block_m=128, block_n=128, block_k=128, num_stages=stages + 4, num_warpgroups=1).persistent()
    rows = BlockScaledContext.scale_widths_of(schedule)
    grow = (BlockScaledContext.scale_ring_of(more) - ring) * sum(rows) * 4
    tiles = 4 * (128 * 128 + 128 * 128)
    assert (_blockscaled_smem(more, torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16)
            - _blockscaled_smem(schedule, torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16)) == tiles + grow


@pytest.mark.parametrize("block_m, block_n, block_k, warpgroups, group", [
    (128, 256, 128, 2, 16), (128, 176, 128, 2, 8), (64, 112, 256, 1, 8), (64, 64, 256, 1, 16)])
def test_blockscaled_scale_group_fits_the_producer_lanes(monkeypatch, block_m, block_n, block_k, warpgroups, group):
    """A scale group's weight-block scales take one producer lane each: the group is halved until
    group · scale blocks per K-iteration · staged weight blocks <= 32 (shown with a group of 16)."""
    from tlgemm.tilelang.stages import BlockScaledContext

    monkeypatch.setattr(BlockScaledContext, "scale_group", 16)
    schedule = Schedule(block_m=block_m, block_n=block_n, block_k=block_k, num_stages=4,
                        num_warpgroups=warpgroups).persistent()
    assert BlockScaledContext.scale_group_of(schedule) == group
    assert BlockScaledContext.scale_ring_of(schedule) % group == 0


@pytest.mark.parametrize("stages, chunk, buffers", [(3, 64, 2), (4, 32, 1)], ids=str)
def test_blockscaled_row_waves_lower(stages, chunk, buffers):
    """256x128 on two warpgroups in two row waves (3 stages with two 64-column output buffers,
    or 4 with one of 32 columns, ``BlockScaledContext.wave_store_chunk``, both within 227 KiB):
    every wgmma m64n128 from shared memory (no A copied into registers); in an unrolled round
    each slot issues wave 0 at A's slot offset (2048 16-byte units a slot) and wave 1 128 rows
    further (1024; a warpgroup's rows 512 further in each), both on the slot's B tile (1024 a
    slot); the epilogue's TMA stores step by the chunk."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import _blockscaled_smem, blockscaled_spec, blockscaled_stages_that_fit
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = blockscaled_stages_that_fit(Schedule(block_m=256, block_n=128, block_k=128, num_stages=stages,
                                                    num_warpgroups=2).persistent(132))
    assert schedule.num_stages == stages and BlockScaledContext.store_staging_of(schedule) == (chunk, buffers)
    assert _blockscaled_smem(schedule, torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16) <= 232448
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                            tma_token_scales=True)
    src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
    assert set(re.findall(r"wgmma_(\w\w)<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, "
                          r"tl::DataType::kFloat32, 64, (\d+), 32,", src)) == {("ss", "128")}
    rounds = re.search(ring_rounds(stages), src)
    assert rounds is not None
    firsts = re.findall(r"wgmma_ss<[^;]*uint64_t\(desc_a \+ \(*\w+ \* 512\)(?: \+ (\d+))?\)+, "
                        r"uint64_t\(desc_b \+ (\d+)\), [^;]*, 0\);", src[rounds.end():])
    assert firsts == [(str(2048 * s + 1024 * w) if s or w else "", str(1024 * s))
                      for s in range(stages) for w in range(2)]
    assert set(re.findall(r"tma_store\(C_desc, [^;]*\(c \* (\d+)\)\)", src)) == {str(chunk)}
    assert "mma.sync" not in src


def test_blockscaled_streamk_lowers():
    """Stream-K on 64x64 tiles: all 132 programs launched, a program publishes its partial
    result (release store of its flag) and a tile's owner spins on the later programs' flags
    (acquire loads), resetting each; the whole-tile kernel takes no such workspace."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import blockscaled_spec

    schedule = Schedule(block_m=64, block_n=64, block_k=128, num_stages=8, num_warpgroups=1).persistent(132)
    for streamk in (True, False):
        spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                                schedule.streamk(33) if streamk else schedule, 132)
        src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
        assert (re.search(r"AtomicStore\(\(&\(flags\[", src) is not None) == streamk
        assert (re.search(r"AtomicLoad\(\(&\(flags\[", src) is not None) == streamk
        assert "mma.sync" not in src


def test_default_blockscaled_schedule_takes_the_wide_tile():
    """256x128 row waves with raster "n" at K = 512..7168 where N is a multiple of 128, the tiles
    make a wave and M pads no more than with 128 rows: 3 stages in groups of 8 up to K = 1536,
    4 stages in groups of 16 (the epilogue staged 32 columns at a time, one buffer) above;
    128x256 where it measured faster (M = 4096, N a multiple of 256, K >= 1024); where N is no
    multiple of 128 and K >= 1024, a width dividing N that fills the last wave better than 128,
    one whose promotion branches on the tile offset first (2112 = 11 · 192, though 12 · 176
    fills more), else the fullest (2880 = 20 · 144); 128x128 on the other shapes, where N and
    K are not given, and where it fills its waves so much better (``_NARROW_PER_FLOP``)."""
    from tlgemm.tilelang.launch import _blockscaled_smem, default_blockscaled_schedule
    from tlgemm.tilelang.stages import BlockScaledContext

    def tile(M, N=None, K=None):
        s = default_blockscaled_schedule(M, N=N, K=K)
        return s.block_m, s.block_n, s.num_stages

    for M, N, K in ((4096, 24576, 1536), (4096, 32768, 512), (2048, 4096, 1536), (8192, 16384, 1024),
                    (1000, 24576, 1536)):
        s = default_blockscaled_schedule(M, N=N, K=K)
        assert (s.block_m, s.block_n, s.num_stages, s.raster, s.group_size_m) == (256, 128, 3, "n", 8), (M, N, K, s)
        assert BlockScaledContext.waves_of(s) == 2 and BlockScaledContext.store_staging_of(s) == (64, 2)
    for M, N, K in ((4096, 7168, 2048), (4096, 4096, 7168), (2048, 24576, 2048), (1024, 7168, 7168),
                    (8192, 16384, 4096)):
        s = default_blockscaled_schedule(M, N=N, K=K)
        assert (s.block_m, s.block_n, s.num_stages, s.raster, s.group_size_m) == (256, 128, 4, "n", 16), (M, N, K, s)
        assert BlockScaledContext.store_staging_of(s) == (32, 1)
        assert _blockscaled_smem(s, torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16) <= 232448
    # K = 8192 or 256, 128 tiles (< 132 SMs), M = 4097 (17 tile rows of 256 against 33 of 128), N = 2112
    for M, N, K in ((4096, 7168, 8192), (4096, 4096, 256), (1024, 4096, 1536), (4097, 24576, 1536),
                    (4096, 2112, 1024)):
        assert default_blockscaled_schedule(M, N=N, K=K).block_m == 128, (M, N, K)
    for N, K in ((7168, 16384), (4096, 16384), (7168, 8192), (24576, 8192)):
        assert tile(4096, N, K) == (128, 256, 4), (N, K)
    for N, K in ((2112, 512), (4160, 7168)):
        assert tile(4096, N, K) == (128, 128, 4), (N, K)
    assert tile(4096, 2112, 7168) == (128, 192, 4)
    assert tile(4096, 2880, 7168) == (128, 144, 4)
    assert tile(4096, 2304, 16384)[:2] == (128, 256)
    assert tile(4096) == (128, 128, 4)
    # 128x128 where its last wave is so much fuller (fill 1.33x) that it is faster: instead of the
    # waves (1536x4096x7168: 1.45 waves of 256x128, 2.91 of 128x128; 768x7168x7168, 2048x2816x2048)
    # or of 128x256 (1536x4096x16384, 384x14336x2048); not where it fills 1.2x (2560x4096x16384,
    # 1280x7168x7168), nor where its own last wave is under the fill floor (640x7168x7168)
    for M, N, K in ((1536, 4096, 7168), (768, 7168, 7168), (2048, 2816, 2048), (1536, 4096, 16384),
                    (384, 14336, 2048)):
        s = default_blockscaled_schedule(M, N=N, K=K)
        assert (s.block_m, s.block_n, s.num_warpgroups, s.raster) == (128, 128, 2, "m"), (M, N, K, s)
        assert BlockScaledContext.fragments_of(s) == (1, 1)
    assert tile(2560, 4096, 16384)[:2] == (128, 256) and tile(640, 7168, 7168)[:2] == (128, 256)
    assert tile(1280, 7168, 7168)[:2] == (256, 128)
    # above M = 96 a 64x128 tile becomes 128x64 (one tile row: the weights read once)
    assert tile(96, 7168, 16384)[:2] == (64, 128)
    for M, N, K in ((97, 7168, 16384), (128, 7168, 16384), (128, 24576, 1536), (128, 7168, 2048)):
        s = default_blockscaled_schedule(M, N=N, K=K)
        assert (s.block_m, s.block_n, s.num_warpgroups) == (128, 64, 1), (M, N, K, s)
    assert tile(128, 4096, 7168)[:2] == (64, 64)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_default_blockscaled_schedule_fits(out_dtype):
    """Every default fits 227 KiB of shared memory with its output: M from 1 to 8192, ragged,
    DeepGEMM's (N, K) pairs and others, single and batched. A float32 output (its staging twice
    as large) never takes the 256x128 row waves, which would not fit even at 2 stages."""
    from tlgemm.tilelang.launch import _blockscaled_smem, default_blockscaled_schedule
    from tlgemm.tilelang.stages import BlockScaledContext

    pairs = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (16384, 1024),
             (1000, 1000), (2880, 7168), (14336, 4096), (7168, 7168), (None, None)]
    for M in (1, 32, 33, 65, 97, 128, 129, 300, 1000, 2048, 4097, 8192):
        for N, K in pairs:
            for batch in (1, 3):
                s = default_blockscaled_schedule(M, out_dtype, N=N, K=K, batch=batch)
                assert _blockscaled_smem(s, torch.float8_e4m3fn, torch.float8_e4m3fn, out_dtype) <= 232448, s
                assert out_dtype != torch.float32 or BlockScaledContext.waves_of(s) == 1, s


def test_default_blockscaled_schedule_streams_few_tiles():
    """Stream-K over all tiles (K >= 1024, a single GEMM) where 64x64 tiles fill at most half
    the SMs and the tiles take one scale block a K-iteration (swap-AB at M <= 32, or K no
    multiple of 256); whole tiles where more fill the SMs, K is short, or the call is batched."""
    from tlgemm.tilelang.launch import default_blockscaled_schedule

    s = default_blockscaled_schedule(16, N=2112, K=7168)
    assert (s.is_swap_ab, s.block_m, s.block_n, s.streamk_tiles, s.num_sms) == (True, 64, 16, 33, None), s
    assert default_blockscaled_schedule(16, N=4096, K=7168).streamk_tiles == 64
    # K no multiple of 256 (block_k 128): Stream-K where 64x64 tiles fill at most half the SMs
    for M, N, tiles in ((64, 4096, 64), (128, 2112, 66)):
        s = default_blockscaled_schedule(M, N=N, K=7040)
        assert (s.block_m, s.block_n, s.block_k, s.streamk_tiles) == (64, 64, 128, tiles), (M, N, s)
    for M, N, K, batch in ((128, 2112, 7168, 1), (64, 4096, 7168, 1), (128, 4096, 7168, 1), (64, 7168, 2048, 1),
                           (64, 2112, 512, 1), (64, 2112, 7168, 2), (64, 2112, 7040, 2)):
        assert default_blockscaled_schedule(M, N=N, K=K, batch=batch).streamk_tiles == 0, (M, N, K, batch)


def test_default_blockscaled_schedule_splits_deep_k_tiles():
    """Where whole block_k 256 tiles leave the SMs idle, the default splits 64x32 tiles in two
    (split-K, an even count of K-iterations): every program then runs one equal part of one tile,
    as the host reference's ranges show; only where all fit the SMs at once and that saves each
    program at least 12 K-iterations."""
    from tlgemm.schedules import num_programs, num_tiles, work
    from tlgemm.tilelang.launch import default_blockscaled_schedule

    for M, N, K, ways, part in ((64, 2112, 7168, 2, 14), (48, 2112, 7168, 2, 14), (128, 1024, 7168, 2, 14),
                                (64, 1536, 7168, 2, 14), (64, 1024, 7168, 2, 14), (64, 768, 7168, 2, 14),
                                (64, 2112, 16384, 2, 32), (128, 1024, 16384, 2, 32), (33, 128, 7168, 2, 14)):
        s = default_blockscaled_schedule(M, N=N, K=K)
        tiles = num_tiles(M, N, s)
        assert ((s.block_m, s.block_n, s.block_k, s.num_warpgroups, s.split_k, s.streamk_tiles, s.is_persistent)
                == (64, 32, 256, 1, ways, 0, False)), (M, N, K, s)
        assert num_programs(M, N, K, s) == ways * tiles
        ranges = [[((item.pid_m, item.pid_n), item.k_begin, item.k_end) for item in work(p, M, N, K, s)]
                  for p in range(ways * tiles)]
        assert all(len(r) == 1 and r[0][2] - r[0][1] == part for r in ranges), (M, N, K, ranges)
        assert sorted(r[0] for r in ranges) == sorted(((m, n), i * part, (i + 1) * part) for m in range(-(-M // 64))
                                                      for n in range(N // 32) for i in range(ways))
    # the split saves too few K-iterations (K = 2048, 4096), or no split fits the SMs (N = 2560, 64 rows of N
    # in 80 tiles; M = 128 and N = 2112: 132 tiles), or K is no multiple of 256
    for M, N, K in ((64, 2112, 2048), (64, 2048, 4096), (64, 2560, 7168), (128, 2112, 7168), (128, 1536, 7168),
                    (64, 2112, 7040), (64, 1024, 6912)):
        assert default_blockscaled_schedule(M, N=N, K=K).split_k == 1, (M, N, K)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(M=st.one_of(st.integers(1, 128), st.integers(129, 8192)), N=st.integers(1, 32768), k_blocks=st.integers(1, 160),
       num_sms=st.sampled_from([132, 114, 78, 16]), batch=st.sampled_from([1, 1, 3]), batched=st.booleans())
def test_default_blockscaled_schedule_is_launchable(M, N, k_blocks, num_sms, batch, batched):
    """Every block-scaled default (any M, N, K a multiple of 128, SM count, batch; the batched
    kernel's for a batch of one too, ``blockscaled_bmm``) builds a spec and fits the shared
    memory; a split one (``_split_deep_k``) runs at most ``num_sms`` programs, each exactly one
    equal part of one tile's K-iterations in the host reference."""
    from tlgemm.schedules import num_programs, work
    from tlgemm.tilelang.launch import (_blockscaled_smem, blockscaled_spec, default_blockscaled_schedule,
                                        operands_read_once)

    fp8, K, batched = torch.float8_e4m3fn, 128 * k_blocks, batched or batch > 1
    s = default_blockscaled_schedule(M, N=N, K=K, num_sms=num_sms, batch=batch, batched=batched)
    blockscaled_spec(fp8, fp8, torch.bfloat16, s, num_sms, batched=batched, tma_token_scales=True,
                     read_once=operands_read_once(M, N, s))
    assert _blockscaled_smem(s, fp8, fp8, torch.bfloat16) <= 232448, s
    if s.split_k > 1:
        programs = num_programs(M, N, K, s)
        assert not batched and programs <= num_sms and K // s.block_k % s.split_k == 0, s
        lengths = {(len(i), i[0].k_end - i[0].k_begin) for i in (work(p, M, N, K, s) for p in range(programs))}
        assert lengths == {(1, K // s.block_k // s.split_k)}, (s, lengths)


def test_default_blockscaled_schedule_deepens_small_m_tiles():
    """At M <= 128 the default's tiles up to 64 columns wide on one consumer warpgroup (single
    GEMM, not swap-AB, K a multiple of 256) run two scale blocks per K-iteration (block_k 256)
    with 8 stages, or as many as fit, split or not; every other default keeps block_k 128."""
    from tlgemm.tilelang.launch import default_blockscaled_schedule

    for M, N, K, tile, stages in ((128, 4096, 7168, (64, 64), 6), (64, 2112, 7168, (64, 32), 8),
                                  (64, 4096, 7168, (64, 32), 8), (128, 2112, 7168, (64, 32), 8),
                                  (64, 2112, 2048, (64, 16), 8), (65, 4096, 2048, (64, 64), 6),
                                  (64, 24576, 1536, (64, 64), 6), (128, 7168, 2048, (128, 64), 4),
                                  (128, 7168, 16384, (128, 64), 4)):
        s = default_blockscaled_schedule(M, N=N, K=K)
        assert ((s.block_m, s.block_n), s.block_k, s.num_stages, s.num_warpgroups) == (tile, 256, stages, 1), (
            M, N, K, s)
    for M, N, K, batch in ((128, 4096, 7168 - 128, 1), (128, 4096, 7168, 2), (64, 32768, 512, 1),
                           (96, 7168, 16384, 1), (128, 32768, 512, 1), (4096, 7168, 16384, 1), (16, 2112, 7168, 1)):
        assert default_blockscaled_schedule(M, N=N, K=K, batch=batch).block_k == 128, (M, N, K, batch)


def test_blockscaled_sub_blocks_rule():
    """block_k 256 (two scale blocks a K-iteration) only where the tile has two whole-tile
    temporaries; any other block_k, or 256 on a split 128x256 tile, is a "schedule:" error."""
    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.launch import blockscaled_spec
    from tlgemm.tilelang.stages import BlockScaledContext

    def schedule(bm, bn, bk, wgs=1):
        return Schedule(block_m=bm, block_n=bn, block_k=bk, num_stages=4, num_warpgroups=wgs).persistent(132)

    assert BlockScaledContext.sub_blocks_of(schedule(64, 64, 128)) == 1
    assert BlockScaledContext.sub_blocks_of(schedule(64, 64, 256)) == 2
    assert BlockScaledContext.sub_blocks_of(schedule(128, 128, 256, 2)) == 2
    for bad in (schedule(64, 64, 64), schedule(128, 256, 256, 2), schedule(64, 192, 256)):
        with pytest.raises(ValueError, match="schedule: block_k must be 128"):
            blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, bad, 132)


@pytest.mark.parametrize("block_n, streamk", [(64, 0), (16, 0), (64, 33)])
def test_blockscaled_two_scale_blocks_lower(block_n, streamk):
    """block_k 256: each ring slot holds two 128-deep halves of A and B (two TMA boxes each)
    and both halves' scales; each half is its own wgmma batch of four k32 atoms into its own
    temporary, the second half's descriptors 8192 bytes (512 units) further, overwriting its
    temporary at its first atom; the slot goes back once the second half's batch retired. The
    last K-iteration tests whether its second half lies inside K (past K it is zeros, left out;
    the branch also keeps ptxas from serialising the wgmma, test_tilelang_sass.py)."""
    import tilelang
    from tilelang import tvm

    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import BLOCKSCALED_PASS_CONFIGS, blockscaled_spec

    schedule = Schedule(block_m=64, block_n=block_n, block_k=256, num_stages=4, num_warpgroups=1).persistent(132)
    if streamk:
        schedule = schedule.streamk(streamk)
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                            tma_token_scales=True)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(opt_level=3, config=BLOCKSCALED_PASS_CONFIGS), target:
        src = tilelang.lower(blockscaled_gemm(spec), target=target).kernel_source
    assert re.search(r"for \(int \w+ = 0; \w+ < max\(1, \(\(K \+ 255\) >> 8\)\); \+\+\w+\)", src)
    assert re.search(r"tl::tma_load\(A_desc, [^;]*\(\(k \* 256\) \+ \(\w+ \* 128\)\)", src)
    # the tokens' scales of a whole group of K-iterations in one TMA box (16 scale blocks), else one by one
    assert re.search(r"tl::tma_load\(SA_desc, [^;]*, \(\w+ \* 2\)\);", src) and "expect_transaction(4096);" in src
    assert re.search(r"tl::tma_load\(SA_desc_1, [^;]*\(\(\(\w+ \* 2\) \+ \(\w+ \* 2\)\) \+ \w+\)\);", src)
    firsts = re.findall(r"wgmma_ss<[^>]*, 64, " + str(block_n) + r", 32, [^>]*>\(uint64_t\(desc_a \+ (.*?)\), "
                        r"uint64_t\(desc_b[^;]*\(\(uint32_t\*\)\((v_\d+) \+ 0\)\), 0\);", src)
    halves = {(offset.endswith("+ 512)"), temporary) for offset, temporary in firsts}
    assert len(halves) == 2 and len({t for _, t in halves}) == 2 and {h for h, _ in halves} == {True, False}, firsts
    # the whole-tile walk's last K-iteration: its second half inside K (K + 128 > 256 · K-iterations)
    assert re.search(r"if \(\(max\(1, \(\(K \+ 255\) >> 8\)\) \* 256\) < \(K \+ 128\)\) \{", src)
    assert "mma.sync" not in src


@pytest.mark.parametrize("block_n", [16, 48])
def test_blockscaled_swap_ab_lowers(block_n):
    """Swap-AB: B's tile is WGMMA's A (64 rows over N), the tokens its N; the token scales of
    the tile's columns and one weight-block scale per row tile are staged; C is written by a
    TMA store at (token, weight-row) coordinates, the bias indexed by the tile row."""
    import tilelang
    from tilelang import tvm

    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import BLOCKSCALED_PASS_CONFIGS, blockscaled_spec
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = Schedule(block_m=64, block_n=block_n, block_k=128, num_stages=6,
                        num_warpgroups=1).persistent(132).swap_ab()
    assert BlockScaledContext.scale_widths_of(schedule) == (1, -(-block_n // 32) * 32)
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                            torch.bfloat16)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(opt_level=3, config=BLOCKSCALED_PASS_CONFIGS), target:
        src = tilelang.lower(blockscaled_gemm(spec), target=target).kernel_source
    assert set(re.findall(r"wgmma_ss<tl::DataType::kFloat8_e4m3, tl::DataType::kFloat8_e4m3, "
                          r"tl::DataType::kFloat32, 64, (\d+), 32,", src)) == {str(block_n)}
    loads = dict((name, coord) for name, coord in re.findall(r"tl::tma_load\(([AB])_desc, [^;]*, \(?(\w+) \* ", src))
    assert loads == {"B": loads["B"], "A": loads["A"]} and loads["A"] != loads["B"], loads
    store = re.search(r"tl::tma_store\(C_desc, [^;]*, \(?(\w+) \* 64\)?, \(?(\w+) \* " + str(block_n), src)
    assert store and store.group(1) == loads["B"] and store.group(2) == loads["A"], store
    assert re.search(rf"bias\[min\(\(*\(int64_t\){loads['B']}\) \* \(int64_t\)64\)", src)
    assert "mma.sync" not in src


def test_blockscaled_kernel_lowers_in_clusters():
    """cluster_m = 2: a 2-CTA launch whose rank 0 multicasts B (raster m) into both CTAs' ring
    slots, each consumer warpgroup releasing every slot on both CTAs (2 warpgroups x 2 ranks
    arrivals), a cluster barrier before exit."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import blockscaled_spec

    schedule = Schedule(block_m=128, block_n=128, block_k=128, num_stages=5, num_warpgroups=2).persistent(132)
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule.cluster(2), 132)
    src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
    assert re.search(r"tl::tma_load_multicast\(B_desc, ", src) and "tma_load_multicast(A_desc" not in src
    assert src.count(".init(4);") == 5 and src.count("tl::cluster_sync();") == 2
    assert re.search(r"\.arrive\(rank\w*\);", src)



@pytest.mark.parametrize("block_m, block_n, stages, raster", [(128, 256, 4, "m"), (128, 192, 4, "n"),
                                                              (256, 128, 3, "n")], ids=str)
def test_clustered_blockscaled_kernels_unroll_the_ring_rounds(block_m, block_n, stages, raster):
    """In 2-CTA clusters too, with the token scales by TMA, the M = 4096 default tiles (128x256
    from registers, 128x192 one whole-tile temporary, 256x128 row waves) run a tile that starts
    at ring slot 0 and fills whole rounds of the ring unrolled (``consume_blockscaled``'s
    ``unroll_rounds``; the clustered walk had left it off)."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import blockscaled_spec

    schedule = Schedule(block_m=block_m, block_n=block_n, block_k=128, num_stages=stages, num_warpgroups=2,
                        raster=raster).persistent(132).cluster(2)
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                            tma_token_scales=True)
    src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
    assert re.search(ring_rounds(stages), src) and "tl::tma_load_multicast(" in src


@pytest.mark.parametrize("raster", ["m", "n"])
@pytest.mark.parametrize("schedule", [
    Schedule(block_m=64, block_n=144, block_k=128, num_stages=3).persistent(5),
    Schedule(block_m=64, block_n=112, block_k=128, num_stages=3).persistent(9),
    Schedule(block_m=256, block_n=128, block_k=128, num_stages=3, num_warpgroups=2).persistent(5),
    Schedule(block_m=64, block_n=32, block_k=128, num_stages=6).swap_ab().persistent(9),
], ids=str)
def test_clustered_blockscaled_kernels_lower_without_threadsync(schedule, raster):
    """2-CTA cluster kernels lower without TileLang's ThreadSync (``BLOCKSCALED_PASS_CONFIGS``):
    with it, 64x144 under raster n was refused (its barrier's threads counted as 2 of 128)."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import blockscaled_spec

    schedule = dataclasses.replace(schedule, raster=raster).cluster(2)
    assert BLOCKSCALED_PASS_CONFIGS["tl.disable_thread_storage_sync"]
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132)
    src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
    assert src.count("tl::tma_store(") == 1 and src.count("tl::cluster_sync();") == 2
    assert re.search(r"tl::__sync_thread_partial\(9, (128|256)\);\s*#pragma unroll", src), \
        "the consumers' named barrier orders the staging stores"


def _threadsync_kernels():
    """One kernel of each family and form: its TileLang function, its pass configs and how many
    barriers ThreadSync adds to it (tilelang 0.1.15)."""
    from tlgemm.tilelang.emitter_gemm import KERNEL_PASS_CONFIGS
    from tlgemm.tilelang.kernels import build
    from tlgemm.tilelang.launch import default_blockscaled_schedule, make_spec

    e4m3, bf16 = torch.float8_e4m3fn, torch.bfloat16
    wide = Schedule(block_m=128, block_n=256, block_k=64, num_stages=4, num_warpgroups=2).persistent(132)
    dense = {
        "bf16-128x256": (make_spec(bf16, bf16, bf16, wide, 132), 1),
        "e4m3-scales-bias": (make_spec(e4m3, e4m3, bf16, CASES["scaled-e4m3"][3], 132, scale_a="row",
                                       scale_b="col", bias_dtype=bf16), 1),
        "f16-mn-64x128": (make_spec(torch.float16, torch.float16, torch.float32,
                                    Schedule(block_m=64, block_n=128, block_k=64).persistent(132), 132,
                                    a_major="MN", b_major="MN"), 1),
        "bf16-streamk": (make_spec(bf16, bf16, bf16, wide.streamk(66), 132), 2),  # whole tiles and the fix-up
        "bf16-batched": (dataclasses.replace(make_spec(bf16, bf16, bf16, wide, 132), batched=True), 1),
        "bf16-cluster": (make_spec(bf16, bf16, bf16, wide.cluster(2), 132), 1),
    }
    blockscaled = {
        "blockscaled-m128": (default_blockscaled_schedule(128, N=7168, K=2048), {}, 1),
        "blockscaled-row-waves": (default_blockscaled_schedule(4096, N=24576, K=1536), dict(tma_token_scales=True),
                                  1),
        "blockscaled-token-scales-bias": (Schedule(block_m=128, block_n=128, block_k=128, num_stages=4,
                                                   num_warpgroups=2).persistent(132),
                                          dict(bias_dtype=bf16, tma_token_scales=True), 1),
        "blockscaled-swap-ab": (default_blockscaled_schedule(16, N=7168, K=2048), {}, 0),
    }
    return ([pytest.param(lambda spec=spec: build(spec), KERNEL_PASS_CONFIGS, added, id=name)
             for name, (spec, added) in dense.items()]
            + [pytest.param(lambda s=s, kw=kw: blockscaled_gemm(blockscaled_spec(e4m3, e4m3, bf16, s, 132, **kw)),
                            BLOCKSCALED_PASS_CONFIGS, added, id=name) for name, (s, kw, added) in blockscaled.items()])


@pytest.mark.parametrize("kernel, configs, added", _threadsync_kernels())
def test_threadsync_adds_only_redundant_barriers(kernel, configs, added, request):
    """The backend's kernels compile without TileLang's ThreadSync (``KERNEL_PASS_CONFIGS``);
    what the pass would add to each kernel family is only a barrier that orders nothing: a
    second named barrier of the same threads right after the consumers' own before the
    staging stores, or a ``__syncthreads`` between register-only code and the warp roles'
    split (its warning "Hoisting sync out of an if"); the swap-AB block-scaled kernel gets none.
    The counts make a case whose lowering stopped differing (the pass not applied) fail."""
    import difflib

    name = request.node.callspec.id
    assert configs["tl.disable_thread_storage_sync"]
    func = kernel()
    with_pass = lower_to_cuda(func, {k: v for k, v in configs.items() if k != "tl.disable_thread_storage_sync"})
    with_pass, without = with_pass.splitlines(), lower_to_cuda(func, configs).splitlines()
    opcodes = [op for op in difflib.SequenceMatcher(a=with_pass, b=without, autojunk=False).get_opcodes()
               if op[0] != "equal"]
    assert len(opcodes) == added and all(tag == "delete" and i2 == i1 + 1 for tag, i1, i2, _, _ in opcodes), \
        (name, opcodes)
    for _, i, _, _, _ in opcodes:
        line, before, after = with_pass[i].strip(), with_pass[i - 1].strip(), with_pass[i + 1].strip()
        staging = re.fullmatch(r"tl::__sync_thread_partial\(3, (\d+)\);", line)
        if staging:
            assert before == f"tl::__sync_thread_partial(9, {staging.group(1)});", (name, before, line)
        else:
            assert line == "__syncthreads();" and re.fullmatch(r"if \(\d+ <= \(\(int\)threadIdx\.x\)\) \{", after), \
                (name, line, after)
            assert not re.search(r"shared|smem|buf_dyn", before), (name, before)


@pytest.mark.parametrize("swap", [False, True])
def test_blockscaled_token_scales_by_tma(swap):
    """tma_token_scales: one TMA copy per K block brings the tile's token scales (128 of
    them on 128-row tiles, 16 as swap-AB columns), its bytes expected on the slot's ``full``
    barrier; only the weight-block scales still go by cp.async."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import blockscaled_spec, default_blockscaled_schedule

    schedule = default_blockscaled_schedule(32 if swap else 4096, N=7168)
    assert schedule.is_swap_ab == swap
    tokens = schedule.block_n if swap else schedule.block_m
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                            tma_token_scales=True)
    src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
    assert len(re.findall(r"tl::tma_load\(SA_desc, ", src)) == 1
    assert f"expect_transaction({tokens * 4});" in src
    assert {name for name in re.findall(r"cp_async_gs<4>\([^;]*(SA|SB)\[", src)} == {"SB"}


def test_token_scale_layouts_for_tma():
    """_tma_token_scales accepts outer-dim-major scales with 16-byte aligned K-block rows;
    _token_major_copy makes that layout from any other (rows padded to 4 tokens)."""
    from tlgemm.tilelang.launch import _tma_token_scales, _token_major_copy

    sa = torch.rand(10, 7)
    assert not _tma_token_scales(sa) and not _tma_token_scales(sa.t().contiguous().t())  # rows of 10 floats
    assert _tma_token_scales(torch.rand(7, 12).t()) and not _tma_token_scales(torch.rand(1, 7))
    for scales in (sa, torch.rand(3, 10, 7)):
        copied = _token_major_copy(scales)
        assert torch.equal(copied, scales) and copied.stride(-2) == 1 and copied.stride(-1) == 12
        assert _tma_token_scales(copied)


def test_gemm_kernels_take_a_block_n_no_power_of_two_with_b_k_major_only():
    wide = Schedule(block_m=128, block_n=176, block_k=64, num_stages=4, num_warpgroups=2).persistent(132)
    src = kernel_source(4096, 2112, 7168, torch.bfloat16, torch.bfloat16, None, wide)
    assert re.search(r"wgmma_ss<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 176, 16,",
                     src)
    assert "mma.sync" not in src and "tl::tma_store(" in src
    with pytest.raises(ValueError, match="schedule: block_n=96 is not a power of two, which the TileLang GEMM kernels "
                                         "take only with B K-major"):
        kernel_source(512, 512, 512, torch.bfloat16, torch.bfloat16, None, Schedule(block_n=96).persistent(132),
                      b_major="MN")
    with pytest.raises(ValueError, match=r"schedule: bmm runs the persistent kernel .*block_n a power of two"):
        kernel_source(512, 512, 512, torch.bfloat16, torch.bfloat16, None, wide, batched=True)


def test_batched_kernels_reject_clusters():
    clustered = SCHEDULE.cluster(2)
    with pytest.raises(ValueError, match=r"schedule: bmm runs the persistent kernel \(no Stream-K, swap-AB or "
                                         r"clusters"):
        kernel_source(512, 512, 512, torch.bfloat16, torch.bfloat16, None, clustered, batched=True)
    from tlgemm.tilelang.launch import blockscaled_spec

    with pytest.raises(ValueError, match=r"schedule: the batched block-scaled kernel runs without clusters"):
        blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                         Schedule(block_m=128, block_n=128, block_k=128, num_stages=4).persistent(132).cluster(2), 132,
                         batched=True)


def test_blockscaled_width_covers_every_tile():
    """b_scale_width_of: the most 128-column scale blocks any tile touches, for every legal
    block_n (checked by walking the tiles of a wide N)."""
    from tlgemm.schedules import BLOCK_N_STEP
    from tlgemm.tilelang.stages import BlockScaledContext

    for block_n in range(BLOCK_N_STEP, 257, BLOCK_N_STEP):
        touched = max((n0 + block_n - 1) // 128 - n0 // 128 + 1 for n0 in range(0, 128 * block_n, block_n))
        assert BlockScaledContext.b_scale_width_of(block_n) == touched, block_n


def test_blockscaled_schedule_rules():
    from tlgemm.schedules import Schedule
    from tlgemm.tilelang.launch import blockscaled_spec

    with pytest.raises(ValueError, match="block_k must be 128"):
        blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, Schedule(block_k=64), 132)
    with pytest.raises(ValueError, match="split-K"):
        blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                         Schedule(block_k=128).persistent().splitk(2), 132)
    for streamk_too_big in (Schedule(block_m=128, block_n=64, block_k=128, num_warpgroups=2),
                            Schedule(block_m=64, block_n=128, block_k=128, num_warpgroups=1)):
        with pytest.raises(ValueError, match="Stream-K block-scaled kernel runs on one consumer warpgroup"):
            blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                             streamk_too_big.persistent().streamk(4), 132)
    with pytest.raises(ValueError, match="batched block-scaled kernel"):
        blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16,
                         Schedule(block_m=64, block_n=64, block_k=128).persistent().streamk(4), 132, batched=True)
    for too_big in (Schedule(block_m=128, block_n=256, block_k=128, num_warpgroups=1),
                    Schedule(block_m=256, block_n=256, block_k=128, num_warpgroups=2)):
        with pytest.raises(ValueError, match="schedule: .* registers per thread"):
            blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, too_big.persistent(), 132)


@pytest.mark.parametrize("raster, shared", [("m", "B"), ("n", "A")])
def test_clustered_kernel_multicasts_the_shared_operand(raster, shared):
    """cluster_m = 2: a cluster launch whose rank 0 multicasts the operand the pair's tiles
    share (B under raster m, A under raster n) when they share it, else loads its own; each
    consumer warpgroup releases a slot on both CTAs' cluster barriers (two per warpgroup
    counted), and the CTAs meet at a cluster barrier before exit."""
    schedule = SCHEDULE.map("grouped" if raster == "m" else "grouped_n").cluster(2)
    src = kernel_source(512, 512, 512, torch.bfloat16, torch.bfloat16, None, schedule)
    other = "A" if shared == "B" else "B"
    assert re.search(rf"tl::tma_load_multicast\({shared}_desc, [^;]*\(uint16_t\)\(3\)", src)
    assert f"tma_load_multicast({other}_desc" not in src
    assert re.search(rf"if \(\(\(3 >> tl::block_rank_in_cluster\(\)\) & 1\) == 0\) {{\s*tl::tma_load\({shared}_desc", src)
    assert "init(4)" in src, "two consumer warpgroups in each of two CTAs release every slot"
    assert re.search(r"\.arrive\(rank(_\d)?\);", src), "slots are released to both CTAs of the cluster"
    assert src.rstrip().rstrip("}").rstrip().endswith("tl::cluster_sync();")


@pytest.mark.parametrize("raster", ["m", "n"])
def test_persistent_grid_equals_the_host_rule(raster):
    """The kernels' symbolic grid (``persistent_grid``) takes the value of
    tlgemm.schedules.persistent_programs for every unit count, zero and a partial last round
    included."""
    from tilelang import tvm

    from tlgemm.schedules import persistent_programs
    from tlgemm.tilelang.kernels import persistent_grid

    units = tvm.tirx.Var("units", "int32")
    grid = persistent_grid(132, units, raster)
    analyzer = tvm.arith.Analyzer()
    for count in [*range(0, 400), 512, 896, 2048, 4095, 6144]:
        value = analyzer.simplify(tvm.tirx.stmt_functor.substitute(grid, {units: tvm.tirx.const(count, "int32")}))
        assert int(value) == persistent_programs(count, 132, raster), count


def test_clustered_kernel_launches_pairs():
    """The grid is rounded up to an even size and launched with cluster dims (2, 1, 1)."""
    import tilelang
    from tilelang import tvm

    from tlgemm.tilelang.emitter_gemm import PASS_CONFIGS
    from tlgemm.tilelang.kernels import build
    from tlgemm.tilelang.launch import make_spec

    spec = make_spec(torch.bfloat16, torch.bfloat16, torch.bfloat16, SCHEDULE.cluster(2), 132)
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    with tvm.transform.PassContext(opt_level=3, config=PASS_CONFIGS), target:
        device = str(tilelang.lower(build(spec), target=target).device_mod)
    assert '"cluster_dims": [2, 1, 1]' in device
    # raster "m": the fewest programs that keep ceil(tiles / 132) rounds (persistent_programs)
    # (ceil(tiles / rounds) rounded up to even, simplified by TVM)
    assert re.search(r'"blockIdx\.x": [^"]* // T\.max\([^"]* \+ 131\) // 132, 1\) // 2 \* 2 \+ 2', device)


_EVICT_FIRST = "<tl::CacheHintSm90::EVICT_FIRST>"


def _tma_loads(src):
    """(hint, descriptor) of each TMA load in a kernel's CUDA source."""
    return re.findall(r"tma_load(<[^>]*>)?\((\w+)", src)


def test_read_once_rule():
    """A is read once when N fits one tile column, B when M fits one tile row."""
    from tlgemm.tilelang.launch import operands_read_once, read_once

    s = Schedule()  # 128x128
    assert read_once(128, 4096, s) == (False, True)
    assert read_once(129, 128, s) == (True, False)
    assert read_once(1, 1, s) == (True, True)
    assert read_once(129, 129, s) == (False, False)
    tile = Schedule(block_m=64, block_n=16, block_k=128, num_warpgroups=1)
    assert operands_read_once(64, 4096, tile) == (False, True)
    # swap-AB: the weights are the kernel's A (64 rows of N), the tokens its 16 columns
    assert operands_read_once(16, 4096, tile.swap_ab()) == (False, True)
    assert operands_read_once(17, 4096, tile.swap_ab()) == (False, False)
    assert operands_read_once(4096, 64, tile.swap_ab()) == (True, False)


@pytest.mark.parametrize("M, N, swap, hinted", [(64, 4096, False, ["B_desc"]), (4096, 4096, False, []),
                                                 (4096, 128, False, ["A_desc"]), (64, 4096, True, ["A_desc"])])
def test_operand_read_once_is_loaded_evict_first(M, N, swap, hinted):
    """The operand that the grid reads once (the other side of the problem is one tile: the
    weights at small M; under swap-AB the weights are the kernel's A) is loaded with the L2
    evict_first hint, the other without; the kernel is otherwise the same as without hints."""
    schedule = Schedule().swap_ab() if swap else Schedule()
    src = kernel_source(M, N, 4096, torch.bfloat16, torch.bfloat16, None, schedule)
    loads = _tma_loads(src)
    assert sorted(desc for hint, desc in loads if hint == _EVICT_FIRST) == hinted, loads
    assert {hint for hint, _ in loads} <= {"", _EVICT_FIRST} and {desc for _, desc in loads} == {"A_desc", "B_desc"}
    unhinted = kernel_source(4096, 4096, 4096, torch.bfloat16, torch.bfloat16, None, schedule)
    assert src.replace(_EVICT_FIRST, "") == unhinted


@pytest.mark.parametrize("M, hinted", [(16, ["B_desc"]), (64, ["B_desc"]), (96, []), (128, ["B_desc"]),
                                       (4096, [])])
def test_blockscaled_weights_read_once_are_loaded_evict_first(M, hinted):
    """The block-scaled kernel of the default schedule loads the weights (B) evict_first where
    the tokens fit one tile side (M <= 16 under swap-AB's 64x16 tiles, M <= 64 on 64x64 tiles,
    M = 128 on 128x64 tiles; at M = 96 two 64-row tiles read each weight tile), the tokens and
    their scales never."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import operands_read_once, blockscaled_spec, default_blockscaled_schedule

    schedule = default_blockscaled_schedule(M, N=7168, K=7168)
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                            tma_token_scales=True, read_once=operands_read_once(M, 7168, schedule))
    loads = _tma_loads(lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS))
    assert sorted(desc for hint, desc in loads if hint == _EVICT_FIRST) == hinted, loads
    # SA_desc_1: one scale block, beside a scale group's box (not under swap-AB's 16 token columns)
    assert {desc for _, desc in loads} - {"SA_desc_1"} == {"A_desc", "B_desc", "SA_desc"}


def test_a_pass_that_cannot_lower_the_kernel_is_a_schedule_error(monkeypatch):
    """A TVMError from inside TileLang's passes comes back as a ``schedule:`` ValueError that
    names the schedule and the pass's reason (tlgemm.matmul then runs select()'s next pick)."""
    import tvm

    from tlgemm.tilelang import launch

    def fail(func, pass_configs=None):
        raise tvm.error.InternalError("Traceback (most recent call last):\n  0: Pass\n[ThreadSync] cannot lower this")

    monkeypatch.setattr(launch, "lower_to_cuda", fail)
    with pytest.raises(ValueError, match=r"^schedule: TileLang cannot lower the kernel of 128x256x64 .*: "
                                         r"\[ThreadSync\] cannot lower this$") as info:
        kernel_source(512, 512, 512, torch.bfloat16, torch.bfloat16, None, SCHEDULE)
    assert isinstance(info.value.__cause__, tvm.error.TVMError)


@pytest.mark.parametrize("block_m, block_n, block_k, warpgroups, swap, warps",
                         [(64, 32, 256, 1, False, 2), (64, 16, 128, 1, True, 2), (128, 32, 128, 2, False, 2),
                          (64, 64, 256, 1, False, 1), (128, 64, 256, 1, False, 1), (128, 256, 128, 2, False, 1)],
                         ids=str)
def test_blockscaled_narrow_tiles_take_two_producer_warps(block_m, block_n, block_k, warpgroups, swap, warps):
    """Tiles at most 32 columns wide issue their K-iterations from two producer warps in turns
    (``producer_warps_of``): the producer's branch spans two warps after the consumers, and each
    K-iteration's copies sit behind the test that its parity is the warp's; wider tiles keep one
    producer warp and no such test."""
    from tlgemm.tilelang.emitter_gemm import BLOCKSCALED_PASS_CONFIGS, lower_to_cuda
    from tlgemm.tilelang.kernels import blockscaled_gemm
    from tlgemm.tilelang.launch import blockscaled_spec, blockscaled_stages_that_fit
    from tlgemm.tilelang.stages import BlockScaledContext

    schedule = Schedule(block_m=block_m, block_n=block_n, block_k=block_k, num_stages=4,
                        num_warpgroups=warpgroups).persistent(132)
    schedule = blockscaled_stages_that_fit(schedule.swap_ab() if swap else schedule, torch.bfloat16, 232448)
    assert BlockScaledContext.producer_warps_of(schedule) == warps
    spec = blockscaled_spec(torch.float8_e4m3fn, torch.float8_e4m3fn, torch.bfloat16, schedule, 132,
                            tma_token_scales=True)
    src = lower_to_cuda(blockscaled_gemm(spec), BLOCKSCALED_PASS_CONFIGS)
    consumers = 128 * warpgroups
    assert f"if (((int)threadIdx.x) < {consumers + 32 * warps}) {{" in src
    parity = re.search(r"if \(\(\w+ % 2\) == \(\(\(\(int\)threadIdx\.x\) - " + str(consumers) + r"\) / 32\)\) \{", src)
    assert (parity is not None) == (warps == 2)
