"""Tile waves over every core and operand tiles shared by a core's arrays (issue 9 item 5):
closed-form wave counts, the golden twin on waves and shared blocks, hand counts of bytes, and
"more cores never slower"."""

import dataclasses
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch import load_chip
from diptych.sim import engine as E
from diptych.sim import engine_ref as G
from diptych.sim import mapper as MP
from diptych.sim.dram import dram_timing
from diptych.sim.array import array_rates
from diptych.sim.gemm import gemm_stats, run_engine
from diptych.workloads.ops import Gemm

from simtest_helpers import check_more_bandwidth_or_scratchpad, golden_problem, small_chip

SLACK = 1.0 / (1.0 - MP.PRUNE_TOLERANCE)   # the mapper's documented pruning tolerance


def _forced(op, chip, split):
    with mock.patch.object(MP, "splits", lambda *a, _s=split: [_s]):
        return gemm_stats(op, chip)


def _find(chip, batch, m, n, **want):
    hits = [s for s in MP.splits(chip, batch, m, n)
            if all(getattr(s, k) == v for k, v in want.items())]
    assert hits, want
    return hits[0]


def test_h100_8192_cubed_in_128x256_tiles_is_15_5_waves():
    """132 SMs, 128×256 output tiles: 64 × 32 = 2048 tiles = 15.5 waves, so 16 waves of which
    the last has 2048 − 15·132 = 68 SMs busy; each SM's four tensor cores take 64×128 sub-tiles
    (2×2). Every number below is the hand count."""
    chip = load_chip("h100")
    sp = _find(chip, 1, 8192, 8192, pm=64, pn=32, qm=2, qn=2)
    assert (sp.tiles, sp.waves, sp.units, sp.active, sp.arrays_per_core) == (2048, 16, 132, 528, 4)
    assert (sp.m, sp.n, sp.batch) == (64, 128, 16)        # 16 sub-tiles of 64×128 per array
    assert sp.tail_active == 68 * 4
    assert sp.wave_efficiency == pytest.approx(2048 / (16 * 132))   # 15.5 / 16
    assert sp.scale == 2048 * 4 / 16
    s = _forced(Gemm(name="g", m=8192, k=8192, n=8192), chip, sp)
    mp = s.mapping
    assert (mp["waves"], mp["tiles"], mp["busy_units"], mp["last_wave_units"]) == (16, 2048, 132, 68)
    assert mp["units"] == "cores" and mp["core_tile"] == {"m": 2, "n": 2}
    assert mp["wave_quantisation_loss"] == pytest.approx(1 - 2048 / 2112)
    # busy cycles: 16 sub-tiles of 64×8192×128 MACs on a 16×32 array at 1 MAC/PE/cycle
    assert s.array_busy_cycles == 16 * 64 * 8192 * 128 // (16 * 32)
    # the MACs each array is charged for (16 tiles) over the GEMM's: the quantisation loss
    assert s.macs / (528 * s.array_busy_cycles * 16 * 32) == pytest.approx(2048 / 2112)


def test_non_power_of_two_cores_use_every_core():
    """On 132 SMs a one-wave power-of-two factorisation leaves SMs idle; the mapper's split
    keeps every SM busy for a large GEMM (one wave of 132, or waves)."""
    chip = load_chip("h100")
    s = gemm_stats(Gemm(name="g", m=8192, k=8192, n=8192), chip)
    assert s.mapping["active_arrays"] == 528
    assert s.mapping["wave_quantisation_loss"] < 0.05
    # and it beats the best split of the old search (a factorisation over arrays, one wave)
    old = [sp for sp in MP.splits(chip, 1, 8192, 8192) if sp.qm * sp.qn == 1 and sp.waves == 1]
    with mock.patch.object(MP, "splits", lambda *a: old):
        before = gemm_stats(Gemm(name="g", m=8192, k=8192, n=8192), chip)
    assert s.seconds < 0.7 * before.seconds


def test_waves_deal_tiles_round_robin_closed_form():
    """Units 6 (not a power of two), a 4 × 4 grid of tiles: 16 tiles = 3 waves, the last with
    16 − 12 = 4 units busy; DRAM bytes = the representative array's × tiles ÷ waves."""
    chip = small_chip(8, 8, cores=6, arrays=1, spad_mib=1.0)
    sp = _find(chip, 1, 256, 256, pm=4, pn=4)
    assert (sp.waves, sp.tail_active, sp.active, sp.batch, sp.m, sp.n) == (3, 4, 6, 3, 64, 64)
    op = Gemm(name="g", m=256, k=96, n=256)
    s = _forced(op, chip, sp)
    pb = MP.orient(_view(op), s.mapping["dataflow"], sp, 256)
    blk = MP.Blocks(s.mapping["block"]["m"], s.mapping["block"]["k"], s.mapping["block"]["n"],
                    0 if s.mapping["loop_order"] == "mnk" else 1)
    per_array = MP.traffic_bytes(pb, blk)                 # 3 tiles of this array
    assert s.dram_read_bytes + s.dram_write_bytes == pytest.approx(per_array * 16 / 3, rel=1e-12)
    # every tile writes its 64×64 output once: 256 × 256 × 2 bytes in all
    assert s.dram_write_bytes == pytest.approx(256 * 256 * 2, rel=1e-12)


def test_core_shares_operand_blocks_hand_count():
    """Four arrays of one core as 2×2 sub-tiles of the core tile: the core loads each X and W
    block once for the two arrays sharing it, so the DRAM bytes of each operand halve against
    four independent arrays doing the same work (no shared buffer)."""
    chip = small_chip(8, 8, cores=1, arrays=4, spad_mib=1.0)
    op = Gemm(name="g", m=128, k=256, n=128)
    shared = _find(chip, 1, 128, 128, qm=2, qn=2, pm=1, pn=1)
    alone = MP.Split(pb=1, pm=2, pn=2, batch=1, m=64, n=64, active=4, arrays_per_core=4)
    rates = array_rates(chip, "bf16")
    for sp in (shared, alone):
        assert (sp.m, sp.n, sp.active) == (64, 64, 4)
    pb_s = MP.orient(_view(op), "os", shared, 128)
    pb_a = MP.orient(_view(op), "os", alone, 128)
    assert (pb_s.x_cdup, pb_s.w_cdup, pb_a.x_cdup, pb_a.w_cdup) == (2, 2, 1, 1)
    blk = MP.Blocks(32, 64, 32, 0)
    # per array: X 64×256 bf16 read once per N block (2), W 256×64 once per M block (2), C once
    x, w, o = 64 * 256 * 2, 256 * 64 * 2, 64 * 64 * 2
    assert MP.traffic_bytes(pb_a, blk) == 2 * x + 2 * w + o
    assert MP.traffic_bytes(pb_s, blk) == 2 * x / 2 + 2 * w / 2 + o
    assert MP.port_bytes(pb_s, blk) == 2 * x / 2 + 2 * w / 2 + o
    out_s, _, _ = run_engine(chip, pb_s, blk, rates, shared, True)
    out_a, _, _ = run_engine(chip, pb_a, blk, rates, alone, True)
    assert out_s[E.O_DRAM_RD] == 2 * x / 2 + 2 * w / 2
    assert out_a[E.O_DRAM_RD] == 2 * x + 2 * w
    assert out_s[E.O_CYCLES] <= out_a[E.O_CYCLES]
    # the footprint counts half of each shared block
    assert MP.footprint(pb_s, 32, 64, 32, 0) == 2 * (32 * 64 * 2) // 2 * 2 + 2 * 32 * 32 * 4
    # the mapper never does worse with sharing available than the old split of the same work
    best = gemm_stats(op, chip).cycles
    assert best <= _forced(op, chip, alone).cycles * SLACK


def _view(op):
    class V:
        pass
    v = V()
    v.a_dtype, v.b_dtype, v.c_dtype, v.acc_dtype = op.a_dtype, op.b_dtype, op.c_dtype, op.acc_dtype
    v.k, v.n, v.b_is_weight, v.batch, v.m = op.k, op.n, op.b_is_weight, op.batch, op.m
    return v


@settings(max_examples=120, deadline=None)
@given(R=st.sampled_from([2, 4, 8]), C=st.sampled_from([2, 4, 8]), m=st.integers(1, 40),
       k=st.integers(1, 40), n=st.integers(1, 40), df=st.sampled_from(["os", "ws", "is"]),
       fm=st.integers(1, 3), fk=st.integers(1, 3), fn=st.integers(1, 3), order=st.integers(0, 1),
       memory=st.booleans(), tiles=st.integers(1, 3), bs=st.integers(1, 2),
       active=st.sampled_from([2, 6, 16]), tail=st.integers(0, 5), qm=st.integers(1, 3),
       qn=st.integers(1, 3), x_sb=st.integers(0, 2), w_sb=st.integers(0, 2),
       xd=st.integers(1, 3), wd=st.integers(1, 3))
def test_engine_equals_golden_with_waves_and_shared_blocks(R, C, m, k, n, df, fm, fk, fn, order,
                                                            memory, tiles, bs, active, tail, qm,
                                                            qn, x_sb, w_sb, xd, wd):
    """The Numba engine and the golden twin agree exactly on runs of several tiles (waves) with
    a partly full last wave, and with operand blocks shared by the arrays of a core (with and
    without the shared buffer); DRAM, shared-buffer and port bytes follow the closed forms."""
    sb = x_sb or w_sb
    chip = small_chip(R, C, cores=4, arrays=qm * qn, sb_mib=1.0 if sb else None, sb_bpc=24.0)
    tail_active = min(tail, active - 1) * qm * qn if tiles > 1 else 0
    split = MP.Split(pb=1, pm=1, pn=1, batch=bs * tiles, m=m, n=n, active=active * qm * qn,
                     arrays_per_core=qm * qn, waves=tiles, tail_active=tail_active, qm=qm, qn=qn,
                     a_dup=qn * xd, b_dup=qm * wd)
    op = Gemm(name="t", m=m, k=k, n=n, batch=bs, b_is_weight=False)
    rates = array_rates(chip, "bf16")
    pb = MP.orient(_view(op), df, split, m)
    kb = rates.stationary_rows * fk if df != "os" else R * fk
    blk = MP.Blocks(min(pb.m, R * fm), min(pb.k, kb), min(pb.n, C * fn), order, x_sb, w_sb)
    out, _, _ = run_engine(chip, pb, blk, rates, split, memory)
    ref = G.run(golden_problem(chip, pb, blk, rates, split, memory), chip.dram)
    assert out[E.O_CYCLES] == ref.cycles
    assert out[E.O_BUSY] == ref.busy
    assert out[E.O_DRAM_STALL] == ref.dram_stall and out[E.O_WB_STALL] == ref.wb_stall
    assert out[E.O_DRAM_RD] == ref.dram_rd and out[E.O_DRAM_WR] == ref.dram_wr
    assert out[E.O_SRAM_RD] == ref.sram_rd and out[E.O_SRAM_WR] == ref.sram_wr
    assert out[E.O_TRANSFERS] == ref.transfers and out[E.O_SB_RD] == ref.sb_rd
    assert out[E.O_DRAM_RD] + out[E.O_DRAM_WR] == pytest.approx(MP.traffic_bytes(pb, blk),
                                                                rel=1e-12)
    assert out[E.O_SB_RD] == pytest.approx(MP.shared_buffer_bytes(pb, blk), rel=1e-12)
    # the memory-free cycles are the closed form's
    free, _, _ = run_engine(chip, pb, blk, rates, split, False)
    assert free[E.O_CYCLES] == MP.compute_cycles(chip, pb, blk, rates)


def _with_cores(chip, cores):
    return dataclasses.replace(chip, tensor_cores=cores)


chips = st.builds(
    lambda r, c, cores, arrays, spad, sb: small_chip(
        r, c, cores=cores, arrays=arrays, spad_mib=spad, sb_mib=sb[0], sb_bpc=sb[1]),
    st.sampled_from([4, 8]), st.sampled_from([4, 8]), st.integers(1, 6), st.integers(1, 4),
    st.sampled_from([0.0625, 0.25]),
    st.sampled_from([(None, 0.0), (0.125, 256.0)]))


#: One more core changes the split sets (the largest ways that fit: 6 on 6 cores, 7 on 7), and
#: more busy arrays time-share DRAM more finely: a latency-bound GEMM of a few hundred cycles
#: may then lose a few cycles (it did before waves too: 1×33×37 on 6 → 7 cores of 4×4 took
#: 280 → 281 cycles; now 252 → 256). The split sets are not nested either: 1×65×66 on 6 cores
#: of two 4×4 arrays takes N in 6 ways of 11 (361 cycles), on 7 cores in 10 ways of 7 (370
#: cycles, +2.5 %), because each unit count offers its own largest ways, not every smaller
#: count's (search time); 1×65×129 on 5 → 6 cores of four 4×8 arrays: 340 → 351 cycles. A
#: different split of such a GEMM serialises at most one more first block fetch: DMA setup plus
#: the DRAM's first-access latency (tRCD + tCL). Anything beyond 3 % plus that one fetch is a
#: real loss of the extra core.
CORE_SLACK = 1.03


def first_fetch_cycles(chip) -> float:
    """DMA setup plus the DRAM's first-access latency, in cycles."""
    t = dram_timing(chip)
    return chip.dma.setup_cycles + (t.t_rcd_ns + t.t_cl_ns) * chip.clock_ghz


@settings(max_examples=150, deadline=None)
@given(chip=chips, m=st.integers(1, 300), k=st.integers(1, 300), n=st.integers(1, 300),
       batch=st.integers(1, 3), shared=st.booleans())
def test_more_cores_never_slower(chip, m, k, n, batch, shared):
    """A chip with one more core (the tiles dealt over one more unit) is never slower, beyond
    CORE_SLACK and one first block fetch."""
    op = Gemm(name="g", m=m, k=k, n=n, batch=batch, b_is_weight=shared)
    base = gemm_stats(op, chip)
    more = gemm_stats(op, _with_cores(chip, chip.tensor_cores + 1))
    assert more.cycles <= base.cycles * SLACK * CORE_SLACK + first_fetch_cycles(chip)


def test_trace_of_a_wave_split_covers_the_gemm_once():
    """The trace deals the representative array's tiles to every array wave by wave (and a
    core's sub-tiles to its arrays): the compute spans tile C = A·B exactly once, and an array
    with no tile in the partly full last wave shows none there."""
    import math
    from diptych.sim.trace import gemm_trace
    chip = load_chip("h100")
    sp = _find(chip, 1, 2048, 2048, pm=16, pn=16, qm=2, qn=2)
    assert (sp.waves, sp.tiles, sp.tail_active) == (2, 256, (256 - 132) * 4)
    with mock.patch.object(MP, "splits", lambda *a: [sp]):
        tr = gemm_trace(2048, 512, 2048, chip)
    compute = [e for e in tr["traceEvents"] if e["ph"] == "X" and e.get("tid") == 3
               and e["pid"] <= sp.active]
    assert sum(math.prod(hi - lo for lo, hi in e["args"]["gemm_range"].values())
               for e in compute) == 2048 * 512 * 2048
    per_array = {}
    for e in compute:
        per_array[e["pid"]] = per_array.get(e["pid"], 0) + 1
    blocks = tr["otherData"]["blocks_per_array"]
    # cores 0..123 have a tile in both waves, cores 124..131 only in the first
    assert per_array[1] == blocks and per_array[528] == blocks // 2


def test_split_k_reduction_bytes_hand_count():
    """A skinny GEMM (4 × 8192 × 8) on 8 cores of one 8×8 array: one output tile, so K is split
    8 ways (1024 each). Hand count: the arrays read A (4·8192·2 B) and B (8192·8·2 B) once and
    write 8 partial tiles at FP32 (8·4·8·4 B); the reduction reads them back and writes C
    (4·8·2 B); its 7 adds per element run on the vector units after the partial products."""
    chip = small_chip(8, 8, cores=8, arrays=1, spad_mib=1.0)
    op = Gemm(name="g", m=4, k=8192, n=8)
    s = gemm_stats(op, chip)
    sk = s.mapping["split_k"]
    assert sk is not None and (sk["ways"], sk["k_per_array"]) == (8, 1024)
    partial = 8 * 4 * 8 * 4
    assert sk["partial_bytes"] == partial
    assert s.dram_read_bytes == 4 * 8192 * 2 + 8192 * 8 * 2 + partial
    assert s.dram_write_bytes == partial + 4 * 8 * 2
    assert s.energy_breakdown["vector"] == pytest.approx(
        4 * 8 * 7 * chip.energy.pj_per_vector_op * 1e-12)
    assert s.cycles == s.array_busy_cycles + s.stall_cycles
    assert s.cycles == s.compute_cycles + s.stall_breakdown["dram"] + \
        s.stall_breakdown["writeback"]
    # it beats every split without split-K (at most 8 one-column slices of N)
    plain = [sp for sp in MP.splits(chip, 1, 4, 8, 8192) if sp.pk == 1]
    with mock.patch.object(MP, "splits", lambda *a: plain):
        assert s.cycles < gemm_stats(op, chip).cycles
    # the trace's compute spans cover C = A·B once over the K shares
    import math
    from diptych.sim.trace import gemm_trace
    tr = gemm_trace(4, 8192, 8, chip)
    compute = [e for e in tr["traceEvents"] if e["ph"] == "X" and e.get("tid") == 3
               and e["pid"] <= 8]
    assert sum(math.prod(hi - lo for lo, hi in e["args"]["gemm_range"].values())
               for e in compute) == 4 * 8192 * 8


@settings(max_examples=25, deadline=None)
@given(chip=chips, m=st.integers(1, 16), k=st.integers(512, 4096), n=st.integers(1, 64),
       shared=st.booleans())
def test_split_k_more_bandwidth_or_scratchpad_never_slower(chip, m, k, n, shared):
    """Skinny GEMMs where split-K is offered: the reduction's cost depends on DRAM bandwidth
    only, so more bandwidth or scratchpad is still never slower."""
    check_more_bandwidth_or_scratchpad(
        Gemm(name="g", m=m, k=k, n=n, batch=1, b_is_weight=shared), chip, SLACK)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 1 << 14), st.integers(1, 1 << 14), st.integers(1, 1 << 16),
       st.sampled_from([3, 33, 66, 132, 528, 100, 7]))
def test_wave_grids_are_the_filtered_product(batch, m, n, units):
    """The wave grids the split enumeration offers (its loops stopping at the limit) are
    exactly, and in the order of, the whole power-of-two product filtered by the rule
    (more tiles than units, at most MAX_WAVES per unit, not a multiple of the units)."""
    lim = MP.MAX_WAVES * units
    want = [(pb, pm, pn) for pb in MP._pow2(batch) for pm in MP._pow2(m) for pn in MP._pow2(n)
            if units < pb * pm * pn <= lim and (pb * pm * pn) % units]
    assert list(MP.wave_grids(batch, m, n, units)) == want
