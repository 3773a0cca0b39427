"""Pure-Python golden twin of :func:`diptych.sim.engine.run_schedule`.

Written for clarity rather than speed: the block list is materialised, every fold is stepped
with the issue rules of the timing contract one at a time (no closed forms for runs of folds),
DMA engines are explicit objects and each DRAM transfer goes through :class:`FastDram`. The
tests require that it and the Numba engine agree exactly on random small cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .dram import FastDram


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Operand:
    base: int
    ld: int
    bits: int
    transposed: bool
    batch_stride: int

    def descriptor(self, bt, r0, c0, nr, nc):
        if not self.transposed:
            rows, row_bytes = nr, (nc * self.bits + 7) // 8
            addr = self.base + bt * self.batch_stride + r0 * self.ld + (c0 * self.bits) // 8
        else:
            rows, row_bytes = nc, (nr * self.bits + 7) // 8
            addr = self.base + bt * self.batch_stride + c0 * self.ld + (r0 * self.bits) // 8
        return addr, rows, row_bytes, self.ld


@dataclass
class Problem:
    """Everything :func:`run_schedule` reads from its parameter vectors, by name."""

    dataflow: str          # "os" or "ws" (IS arrives here already transposed to "ws")
    rows: int
    cols: int
    m: int
    k: int
    n: int
    batch: int
    mb: int
    kb: int
    nb: int
    order: str             # "mnk" or "nmk"
    os_rate: tuple[int, int]   # K steps per cycle as (num, den)
    ws_rate: tuple[int, int]   # streamed rows per cycle as (num, den), <= 1
    stationary_rows: int
    x: Operand
    w: Operand
    o: Operand
    acc_bits: int
    engines: int
    max_outstanding: int
    setup_cycles: int
    memory: bool
    clock_ghz: float
    dma_bytes_per_cycle: float
    share: float
    x_sb: int = 0                 # shared-buffer mode of X and W (mapper.Blocks)
    w_sb: int = 0
    x_dup: float = 1.0            # arrays sharing one X / W slice
    w_dup: float = 1.0
    sb_bytes_per_cycle: float = 0.0   # this array's share of the shared buffer
    # residency: where X and W are read from and O is written ("dram", "scratchpad",
    # "shared_buffer") and this array's share of its core's scratchpad bandwidth
    x_src: str = "dram"
    w_src: str = "dram"
    o_dst: str = "dram"
    sp_bytes_per_cycle: float = 0.0
    dram_setup_ns: float = 0.0        # NoC + D2D latency added to each DRAM descriptor's setup
    fabric_ns_per_byte: float = 0.0   # the NoC/D2D bandwidth cap as ns per byte (0: none)
    x_cdup: float = 1.0           # arrays of this core sharing its X / W block (scratchpad)
    w_cdup: float = 1.0
    tail_from: int | None = None  # batch elements from here on are the last wave's tile ...
    share_tail: float = 0.0       # ... and time-share DRAM with this many arrays
    # the WS weight-install path (chip core.array.weight_load_rows_per_cycle, weight_swap):
    # a tile's weights take ceil(R / p) cycles to install; with a global swap every PE switches
    # in the tile's first-row cycle, so the next install may start then (no swap wave)
    ws_load_rows_per_cycle: int = 1
    ws_swap_wave: bool = True


@dataclass
class Result:
    cycles: int = 0
    busy: int = 0
    dram_stall: int = 0
    wb_stall: int = 0
    dram_rd: float = 0.0
    dram_wr: float = 0.0
    sram_rd: float = 0.0
    sram_wr: float = 0.0
    blocks: int = 0
    folds: int = 0
    transfers: int = 0
    sb_rd: float = 0.0


@dataclass
class DmaEngine:
    port_free: float = 0.0
    done: list = field(default_factory=list)   # completion times, in issue order


class Dma:
    def __init__(self, pb: Problem, dram: FastDram, res: Result):
        self.pb, self.dram, self.res = pb, dram, res
        self.engines = [DmaEngine() for _ in range(pb.engines)]
        self.sb_free = 0.0   # the shared buffer serves this array's re-reads one at a time
        self.sp_free = 0.0   # the scratchpad serves resident blocks one at a time

    def local(self, req_ns, nbytes):
        """A block moved within the scratchpad (a resident operand into its slot, a result
        kept on chip out of its slot): no descriptor, no DRAM; returns its completion time."""
        start = max(req_ns, self.sp_free)
        self.sp_free = start + nbytes / (self.pb.sp_bytes_per_cycle * self.pb.clock_ghz)
        return self.sp_free

    def issue(self, req_ns, addr, rows, row_bytes, stride, write, share, sb=False, div=1.0):
        """One descriptor from DRAM (time-shared by ``share`` arrays) or, with ``sb``, from
        the shared buffer; ``div`` arrays of this core share the block (the port and the
        shared buffer carry ``1/div`` of its bytes for this array). Returns its completion
        time in ns."""
        pb = self.pb
        if rows > 1 and stride == row_bytes:
            rows, row_bytes = 1, rows * row_bytes
        eng = self.engines[self.res.transfers % pb.engines]
        t_issue = req_ns
        if len(eng.done) >= pb.max_outstanding:
            t_issue = max(req_ns, eng.done[-pb.max_outstanding])
        else:
            t_issue = max(req_ns, 0.0)
        setup_ns = pb.setup_cycles / pb.clock_ghz
        if not sb:
            setup_ns += pb.dram_setup_ns
        start = max(t_issue + setup_ns, eng.port_free)
        if sb:
            dram_end = max(start, self.sb_free) + (rows * row_bytes / div) / (
                pb.sb_bytes_per_cycle * pb.clock_ghz)
            self.sb_free = dram_end
        else:
            dram_end = self.dram.transfer(start, addr, rows, row_bytes, stride, write, share)
        port_end = start + (rows * row_bytes / div) / (pb.dma_bytes_per_cycle * pb.clock_ghz)
        eng.port_free = port_end
        done = max(dram_end, port_end)
        eng.done.append(done)
        self.res.transfers += 1
        return done


def blocks(pb: Problem):
    """The block visiting order: batch, then M or N outermost, K innermost."""
    nm, nk, nn = cdiv(pb.m, pb.mb), cdiv(pb.k, pb.kb), cdiv(pb.n, pb.nb)
    for bt in range(pb.batch):
        outer = [(i, j) for i in range(nm) for j in range(nn)] if pb.order == "mnk" else \
                [(i, j) for j in range(nn) for i in range(nm)]
        for i, j in outer:
            for k in range(nk):
                yield bt, i, j, k


def run(pb: Problem, dram) -> Result:
    """Play the schedule of ``pb`` on a fresh DRAM model built from ``dram`` (arch.Dram)."""
    res = Result()
    fd = FastDram(dram, pb.fabric_ns_per_byte)
    dma = Dma(pb, fd, res)
    R, C = pb.rows, pb.cols
    nk = cdiv(pb.k, pb.kb)
    blist = list(blocks(pb))
    tail_from = pb.batch if pb.tail_from is None else pb.tail_from

    def share_of(bt):
        """DRAM time-sharing of batch element ``bt``: the last wave has fewer arrays."""
        return pb.share if bt < tail_from else pb.share_tail
    # --- loads: decide which operand blocks each block loads, and into which slot
    x_slot_free, w_slot_free, out_slot_free = [0, 0], [0, 0], [0, 0]
    x_slot_of, w_slot_of, x_ready, w_ready = {}, {}, {}, {}

    def dims(bk):
        bt, i, j, k = bk
        return (min(pb.mb, pb.m - i * pb.mb), min(pb.kb, pb.k - k * pb.kb),
                min(pb.nb, pb.n - j * pb.nb))

    def issue_loads(idx):
        bt, i, j, k = blist[idx]
        mb, kb, nb = dims(blist[idx])
        prev = blist[idx - 1] if idx > 0 else None
        same_x = prev is not None and (prev[0], prev[1], prev[3]) == (bt, i, k)
        same_w = prev is not None and (prev[0], prev[3], prev[2]) == (bt, k, j)
        for (name, same, op, r0, c0, nr, nc, slot_of, slot_free, ready, mode, dup, cdup,
             touched, src) in (
                ("x", same_x, pb.x, i * pb.mb, k * pb.kb, mb, kb, x_slot_of, x_slot_free, x_ready,
                 pb.x_sb, pb.x_dup, pb.x_cdup, j > 0, pb.x_src),
                ("w", same_w, pb.w, k * pb.kb, j * pb.nb, kb, nb, w_slot_of, w_slot_free, w_ready,
                 pb.w_sb, pb.w_dup, pb.w_cdup, i > 0, pb.w_src)):
            if same:
                slot_of[idx] = slot_of[idx - 1]
                ready[idx] = ready[idx - 1]
                continue
            slot = 0 if idx == 0 else 1 - slot_of[idx - 1]
            slot_of[idx] = slot
            addr, rows, rb, st = op.descriptor(bt, r0, c0, nr, nc)
            # shared buffer: mode 1, the dup arrays sharing this slice fetch it from DRAM once;
            # mode 2, also blocks touched before by this array (re-reads) come from the buffer.
            # The cdup arrays of this core sharing the block load it once for all of them.
            # A resident operand: from the scratchpad (no DMA) or the shared buffer (a DMA
            # descriptor served by the buffer, like a re-read); never from DRAM.
            from_sb = (mode == 2 and touched) or src == "shared_buffer"
            once_for = dup if mode else cdup
            if src == "scratchpad":
                res.sram_rd += rows * rb / cdup
            elif from_sb:
                res.sb_rd += rows * rb / cdup
            else:
                res.dram_rd += rows * rb / once_for
            res.sram_wr += rows * rb / cdup
            if pb.memory and src == "scratchpad":
                ready[idx] = dma.local(slot_free[slot] / pb.clock_ghz, rows * rb / cdup)
            elif pb.memory:
                ready[idx] = dma.issue(slot_free[slot] / pb.clock_ghz, addr, rows, rb, st, 0,
                                       share_of(bt) / once_for, sb=from_sb, div=cdup)
            else:
                ready[idx] = 0.0

    issue_loads(0)
    prev_L = None                     # OS: last-input cycle of the previous fold
    prev_first = prev_last = None     # WS: first/last streamed row of the previous fold
    last_out, wb_end, n_out = 0, 0, 0
    for idx, (bt, i, j, k) in enumerate(blist):
        if idx + 1 < len(blist):
            issue_loads(idx + 1)
        mb, kb, nb = dims(blist[idx])
        ready = math.ceil(max(x_ready[idx], w_ready[idx]) * pb.clock_ghz) if pb.memory else 0
        ofree = int(out_slot_free[n_out % 2]) if (pb.memory and k == 0) else 0
        col_folds = cdiv(nb, C)
        if pb.dataflow == "os":
            ke = cdiv(kb * pb.os_rate[1], pb.os_rate[0])
            nfold = cdiv(mb, R) * col_folds
            for f in range(nfold):
                if prev_L is None:
                    first = max(ready, ofree)
                    L = first + ke - 1
                    delay = first
                else:
                    first = prev_L + 1
                    if f == 0:
                        first = max(first, ready, ofree)
                    L = max(first + ke - 1, prev_L + R)
                    delay = L - (prev_L + max(ke, R))
                if f == 0:
                    start_c = first
                    block_delay = delay
                prev_L = L
            consume, lo = prev_L, prev_L + 2 * R + C - 2
            res.busy += nfold * ke
            res.sram_rd += mb * kb * pb.x.bits / 8.0 * col_folds + kb * nb * pb.w.bits / 8.0 * cdiv(mb, R)
            res.sram_wr += mb * nb * (pb.acc_bits / 8.0)
            if k > 0:
                res.sram_rd += mb * nb * (pb.acc_bits / 8.0)
        else:
            me = cdiv(mb * pb.ws_rate[1], pb.ws_rate[0])
            kfolds = cdiv(kb, pb.stationary_rows)
            install = cdiv(R, pb.ws_load_rows_per_cycle)     # weight-load cycles
            swap_gap = R + C - 2 if pb.ws_swap_wave else 0   # first row → next load
            nfold = kfolds * col_folds
            for f in range(nfold):
                if prev_first is None:
                    w = ready
                    s0 = max(w + install, ofree)
                    delay = s0 - install
                else:
                    w = prev_first + swap_gap
                    s0_nd = max(w + install, prev_last + 1)
                    if f == 0:
                        w = max(w, ready)
                        s0 = max(w + install, prev_last + 1, ofree, ready)
                    else:
                        s0 = max(w + install, prev_last + 1)
                    delay = s0 - s0_nd
                if f == 0:
                    block_delay = delay
                prev_first, prev_last = s0, s0 + me - 1
            consume, lo = prev_last, prev_last + R + C - 1
            res.busy += nfold * me
            acc = pb.acc_bits / 8.0
            res.sram_rd += mb * kb * pb.x.bits / 8.0 * col_folds + kb * nb * pb.w.bits / 8.0
            res.sram_wr += mb * nb * acc * kfolds
            res.sram_rd += mb * nb * acc * (kfolds - 1 + (1 if k > 0 else 0))
        if block_delay > 0:
            if ready >= ofree:
                res.dram_stall += block_delay
            else:
                res.wb_stall += block_delay
        res.folds += nfold
        res.blocks += 1
        last_out = lo
        x_slot_free[x_slot_of[idx]] = consume
        w_slot_free[w_slot_of[idx]] = consume
        if k == nk - 1:
            addr, rows, rb, st = pb.o.descriptor(bt, i * pb.mb, j * pb.nb, mb, nb)
            if pb.o_dst == "dram":
                res.dram_wr += rows * rb
            else:                 # kept on chip: a write into the scratchpad or the buffer
                res.sram_wr += rows * rb
            res.sram_rd += rows * rb
            if pb.memory:
                t = (lo + 1) / pb.clock_ghz
                end = (dma.local(t, rows * rb) if pb.o_dst == "scratchpad" else
                       dma.issue(t, addr, rows, rb, st, 1, share_of(bt),
                                 sb=pb.o_dst == "shared_buffer"))
                done = math.ceil(end * pb.clock_ghz)
                out_slot_free[n_out % 2] = done
                wb_end = max(wb_end, done)
            n_out += 1
    cycles = last_out + 1
    if wb_end > cycles:
        res.wb_stall += wb_end - cycles
        cycles = wb_end
    res.cycles = cycles
    return res
