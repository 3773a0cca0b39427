"""Timing one GEMM: validate, split over arrays, map, run the engine, gather statistics."""

from __future__ import annotations

import heapq
import math

import numpy as np

from . import engine as E
from . import mapper as MP
from .array import array_rates
from .dram import pattern_cache
from .ops import check_dataflows
from .stats import OpStats


_SB_MODES = ("dram", "shared copies", "shared copies and re-reads")

# untraced runs share these (the engine writes nothing into empty traces)
_NO_TRACE_BLOCKS = np.zeros((0, E.N_TRACE))
_NO_TRACE_SPANS = np.zeros((0, 4))


def run_engine(chip, pb, blk, rates, split, memory: bool, trace_blocks: int = 0,
               trace_spans: int = 0, cutoff: int = 0, periods: int | None = None,
               best: int = 0, base=None):
    """One engine run; returns (output vector, block trace, channel-span trace).

    ``cutoff`` > 0 lets the engine give up once it cannot beat that many cycles, and ``best``
    (the best cycles so far) once a bound shows it cannot (``periods``:
    :func:`mapper.period_cycles` of the blocking, if already known). ``base``: the group's
    :func:`mapper.engine_base` vectors, if already built."""
    if base is None:
        base = MP.engine_base(chip, pb, rates, split, memory)
    ip, fp = MP.set_blocking(base[0].copy(), blk), base[1]
    if cutoff > 0:
        ip[E.P_CUTOFF] = cutoff
        ip[E.P_PERIODS] = MP.period_cycles(chip, pb, blk, rates) if periods is None else periods
        ip[E.P_TRAFFIC] = int(MP.traffic_bytes(pb, blk))
        ip[E.P_BEST] = best
    t = MP.dram_timing(chip)
    dip, dfp = MP.dram_vectors(chip.dram)
    tb = np.zeros((trace_blocks, E.N_TRACE)) if trace_blocks else _NO_TRACE_BLOCKS
    tp = np.zeros((trace_spans, 4)) if trace_spans else _NO_TRACE_SPANS
    out = E.run_schedule(ip, fp, dip, dfp, pattern_cache(t), tb, tp)
    return out, tb, tp


def plan(op, chip, dataflow=None):
    """Choose the split, dataflow and blocking for ``op``; returns a dict of the decision."""
    dtype = op.compute_dtype
    rates = array_rates(chip, dtype)
    flows = check_dataflows(chip, dataflow)
    folded = op.b_is_weight and op.batch > 1
    m_total = op.m * op.batch if folded else op.m
    batch = 1 if folded else op.batch
    # Candidates are simulated in order of their estimate across every (split, dataflow)
    # group (ties: group order, then blocking order), skipping those whose bound cannot beat
    # the best. A group's table is built lazily: only once the next candidate's estimate
    # reaches the group's floor (a bound below every estimate and bound in it), and never when
    # that floor cannot beat the best; the order is the same as with every table built.
    view = _as_oriented(op, m_total, batch)
    groups = []
    for split in MP.splits(chip, batch, m_total, op.n):
        peak_bpc = chip.dram.peak_bytes_per_s / chip.clock_hz / split.active
        for df in flows:
            pb = MP.orient(view, df, split, m_total)
            groups.append([MP.group_floor(chip, pb, rates, split, peak_bpc), len(groups), pb,
                           split, peak_bpc, None])
    pending = sorted(groups, key=lambda g: (g[0], g[1]))
    built = []          # [group, table, est order, est sorted, lb sorted, pointer, engine base]
    heads = []          # heap of (est, group position, local index, built index): each built
    #                     group's next candidate (lazily checked against the threshold)
    errors = []
    n_cands = 0
    best = None
    sims = 0
    spent = 0
    while True:
        thr = math.inf if best is None else best[0] * (1.0 - MP.PRUNE_TOLERANCE)
        # the head: the least (est, group, local) among the groups' next candidates whose
        # bound can beat the best (skipped ones never can again: thr only falls)
        while heads:
            b = built[heads[0][3]]
            lbs = b[4]
            if lbs[b[5]] < thr:
                break
            heapq.heappop(heads)
            ahead = np.flatnonzero(lbs[b[5]:] < thr)
            if ahead.size:
                b[5] += int(ahead[0])
                heapq.heappush(heads, (b[3][b[5]], b[0][1], int(b[2][b[5]]), b[7]))
        head = heads[0] if heads else None
        if pending and pending[0][0] < thr and (head is None or pending[0][0] <= head[0]):
            g = pending.pop(0)
            _, _, pb, split, peak_bpc, _ = g
            try:
                cs, est, lb = MP.candidate_table(chip, pb, rates, split, peak_bpc)
            except ValueError as exc:
                errors.append(exc)
                continue
            order = np.argsort(est, kind="stable")
            b = [g, cs, order, est[order], lb[order], 0, None, len(built)]
            built.append(b)
            heapq.heappush(heads, (b[3][0], g[1], int(order[0]), b[7]))
            n_cands += len(cs)
            continue
        if head is None:
            break
        if best is not None and spent >= MP.MAX_SIMULATED_BLOCKS:
            break
        _, gpos, local, bi = heapq.heappop(heads)
        b = built[bi]
        b[5] += 1
        if b[5] < len(b[4]):
            heapq.heappush(heads, (b[3][b[5]], gpos, int(b[2][b[5]]), bi))
        pb, split, cs = b[0][2], b[0][3], b[1]
        if b[6] is None:
            b[6] = MP.engine_base(chip, pb, rates, split, True)
        blk = cs[local]
        spent += pb.batch * MP._cdiv(pb.m, blk.mb) * MP._cdiv(pb.k, blk.kb) * MP._cdiv(pb.n, blk.nb)
        cut = 0 if best is None else int(best[0] * (1.0 - MP.PRUNE_TOLERANCE)) + 1
        out, _, _ = run_engine(chip, pb, blk, rates, split, True, cutoff=cut,
                               periods=int(cs.periods[local]),
                               best=0 if best is None else best[0], base=b[6])
        sims += 1
        if out[E.O_ABORTED]:
            continue
        key = (int(out[E.O_CYCLES]), gpos, local)
        if best is None or key < best[:3]:
            best = (key[0], gpos, local, pb, blk, out, split)
    if best is None:
        raise errors[0]
    _, _, _, pb, blk, out, split = best
    return dict(rates=rates, split=split, problem=pb, blocks=blk, out=out,
                candidates=n_cands, simulated=sims, dtype=dtype)


class _Oriented:
    """A view of a Gemm with the weight-shared batch folded into M."""

    def __init__(self, op, m_total, batch):
        self.a_dtype, self.b_dtype, self.c_dtype = op.a_dtype, op.b_dtype, op.c_dtype
        self.acc_dtype, self.k, self.n = op.acc_dtype, op.k, op.n
        self.b_is_weight = op.b_is_weight
        self.batch = batch
        self.m = m_total


def _as_oriented(op, m_total, batch):
    return _Oriented(op, m_total, batch)


def gemm_stats(op, chip, dataflow=None) -> OpStats:
    """Simulate one :class:`~diptych.sim.ops.Gemm` (uncached; see :func:`simulate`)."""
    p = plan(op, chip, dataflow)
    rates, split, pb, blk, out = p["rates"], p["split"], p["problem"], p["blocks"], p["out"]
    comp, _, _ = run_engine(chip, pb, blk, rates, split, False)
    act = split.active
    cycles = int(out[E.O_CYCLES])
    compute_cycles = int(comp[E.O_CYCLES])
    busy = int(out[E.O_BUSY])
    dram_stall = int(out[E.O_DRAM_STALL])
    wb_stall = int(out[E.O_WB_STALL])
    fill = compute_cycles - busy
    seconds = cycles / chip.clock_hz
    dram_rd = float(out[E.O_DRAM_RD]) * act
    dram_wr = float(out[E.O_DRAM_WR]) * act
    sram_rd = float(out[E.O_SRAM_RD]) * act
    sram_wr = float(out[E.O_SRAM_WR]) * act
    sb_rd = float(out[E.O_SB_RD]) * act
    macs = op.macs
    peak = chip.peak_macs_per_cycle(p["dtype"])
    util = macs / (cycles * peak)
    en = chip.energy
    e = {
        "mac": macs * en.pj_per_mac[p["dtype"]] * 1e-12,
        "sram": (sram_rd + sram_wr + sb_rd) * en.pj_per_sram_byte * 1e-12,
        "dram": (dram_rd + dram_wr) * 8 * en.pj_per_dram_bit * 1e-12,
        "vector": 0.0,
        "static": en.static_w * seconds,
    }
    dram_bps = (dram_rd + dram_wr) / seconds
    array_frac = busy / cycles
    dram_frac = dram_bps / chip.dram.peak_bytes_per_s
    mapping = {
        "dataflow": pb.dataflow,
        "dtype": p["dtype"],
        "macs_per_pe_per_cycle": rates.rate,
        "split": {"batch": split.pb, "m": split.pm, "n": split.pn},
        "active_arrays": act,
        "arrays_per_core": split.arrays_per_core,
        "per_array": {"batch": pb.batch, "m": pb.m, "k": pb.k, "n": pb.n,
                      "transposed": pb.transposed},
        "block": {"m": blk.mb, "k": blk.kb, "n": blk.nb},
        "loop_order": "mnk" if blk.order == 0 else "nmk",
        "shared_buffer": {("B" if pb.transposed else "A"): _SB_MODES[blk.x_sb],
                          ("A" if pb.transposed else "B"): _SB_MODES[blk.w_sb]},
        "buffering": "double",
        "scratchpad_bytes_used": MP.footprint(pb, blk.mb, blk.kb, blk.nb,
                                              MP.capacity(chip, split)[1]),
        "scratchpad_bytes_per_array": MP.capacity(chip, split)[0],
        "blocks": int(out[E.O_BLOCKS]),
        "folds": int(out[E.O_FOLDS]),
        "dma_transfers": int(out[E.O_TRANSFERS]),
        "candidates": p["candidates"],
        "simulated_candidates": p["simulated"],
    }
    return OpStats(
        name=op.name, kind="gemm", cycles=cycles, seconds=seconds,
        compute_cycles=compute_cycles, array_busy_cycles=busy, stall_cycles=cycles - busy,
        stall_breakdown={"fill_drain": fill, "dram": dram_stall, "writeback": wb_stall},
        macs=macs, flops=float(op.flops), utilization=util, dram_read_bytes=dram_rd,
        dram_write_bytes=dram_wr, sram_read_bytes=sram_rd, sram_write_bytes=sram_wr,
        dram_bytes_per_s=dram_bps, energy_j=sum(e.values()), energy_breakdown=e,
        bound="memory" if dram_frac > array_frac else "compute", mapping=mapping,
        shared_buffer_read_bytes=sb_rd)
