"""The mapper: split a GEMM across the chip's arrays, then pick dataflow, blocks and loop order.

1. **Orientation.** A ``Gemm`` whose B is a shared weight (``b_is_weight``) with ``batch > 1``
   is one product with ``M·batch`` rows (the A and C matrices are stacked). Otherwise the batch
   elements are independent products. Input stationary is weight stationary on the transposed
   problem (``Cᵀ = Bᵀ·Aᵀ``): M and N swap and so do the operands.
2. **Multi-array split.** The chip's ``tensor_cores × arrays`` arrays each take an equal
   share: ``pb`` ways over the batch, then ``pm × pn`` ways over M and N. Each array plays the
   same schedule on its share; DRAM pseudo-channels are time-shared by the ``active`` arrays
   (each sees ``1/active`` of every channel), a core's DMA engines and scratchpad are split
   among its busy arrays. Splitting M makes every array read its own copy of its B columns;
   splitting N or the batch duplicates nothing. Every distinct split is a candidate like the
   blockings below (the search is over split × dataflow × blocking).
3. **Blocks.** Candidate block sizes are the array-aligned sizes ``R·2^i`` (rows),
   ``Rk·2^i`` or ``R·2^i`` (depth), ``C·2^i`` (columns) and the full extent, for both loop
   orders, that fit the scratchpad with two slots each for the X and W blocks and two output
   tiles (in the accumulator SRAM when the chip has one). Each candidate has a valid lower
   bound (busy cycles; DRAM bytes at peak share) and an estimate; candidates are simulated in
   order of the estimate and pruned when their lower bound cannot beat the best so far (a run
   also stops as soon as it cannot), within a budget of :data:`MAX_SIMULATED_BLOCKS`. The fastest simulated candidate wins; ties break on
   the candidate order, so the choice is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..arch.dtypes import DTYPE_BYTES
from . import engine as E
from . import mapper_kernels as MK
from . import timing as T
from .array import Rates
from .dram import DramTiming, refresh_lower_bound_ns

#: Budget of one mapping decision: engine runs stop once the candidates simulated so far hold
#: this many blocks in all (small problems are therefore searched exhaustively, up to the
#: lower-bound pruning; large ones in order of the estimate until the budget is spent).
MAX_SIMULATED_BLOCKS = 100_000

#: A candidate whose lower bound is within this fraction of the best simulated time is not
#: simulated: the mapper may miss a mapping at most 0.01 % faster than the one it reports.
PRUNE_TOLERANCE = 1e-4

_BASE_ALIGN = 1 << 20  # operands are placed at 1 MiB-aligned addresses


def _bits(dtype: str) -> int:
    return int(round(DTYPE_BYTES[dtype] * 8))


@dataclass(frozen=True)
class Problem:
    """An oriented GEMM for one array: ``batch × (X[m×k] · W[k×n])``."""

    dataflow: str        # the user-visible dataflow: os, ws, is
    m: int
    k: int
    n: int
    batch: int
    x_bits: int
    w_bits: int
    o_bits: int
    acc_bits: int
    transposed: bool     # input stationary: X = Bᵀ, W = Aᵀ, O = Cᵀ
    x_ld: int
    w_ld: int
    o_ld: int
    x_bstride: int
    w_bstride: int
    o_bstride: int
    x_base: int
    w_base: int
    o_base: int
    x_dup: int = 1       # arrays reading the same X slice (the split ways over W's columns)
    w_dup: int = 1       # arrays reading the same W slice (the split ways over X's rows)


@dataclass(frozen=True)
class Split:
    pb: int
    pm: int
    pn: int
    batch: int   # per-array share
    m: int
    n: int
    active: int
    arrays_per_core: int


@dataclass(frozen=True)
class Blocks:
    mb: int
    kb: int
    nb: int
    order: int   # 0: M outermost (mnk), 1: N outermost (nmk)
    #: shared-buffer use of X and W: 0 none; 1 the ``dup`` arrays sharing a slice read it from
    #: DRAM once (in lockstep) and the copies come from the buffer; 2 as 1 and re-reads within
    #: the array too
    x_sb: int = 0
    w_sb: int = 0


def _cdiv(a, b):
    return -(-a // b)


def splits(chip, batch: int, m: int, n: int) -> list[Split]:
    """Every distinct way to share (batch, M, N) over the chip's arrays, deterministic order.

    ``pb`` (batch ways) and ``pn`` (N ways) run over powers of two and the largest value that
    fits; ``pm`` (M ways) over powers of two up to the arrays left and that largest value, so a
    split may leave arrays idle rather than duplicate an operand across them. Splits giving the
    same per-array share are merged.
    """
    arrays = chip.arrays
    out = {}
    top = min(batch, arrays)
    for pb in _ways(top):
        rest = arrays // pb
        for pn in _ways(rest):
            for pm in _ways(min(rest // pn, m)):
                bs, ms, ns = _cdiv(batch, pb), max(1, _cdiv(m, pm)), _cdiv(n, pn)
                if (bs, ms, ns) in out:
                    continue
                act = _cdiv(batch, bs) * _cdiv(m, ms) * _cdiv(n, ns)
                apc = min(chip.core.arrays, _cdiv(act, chip.tensor_cores))
                out[(bs, ms, ns)] = Split(pb=_cdiv(batch, bs), pm=_cdiv(m, ms), pn=_cdiv(n, ns),
                                          batch=bs, m=ms, n=ns, active=act, arrays_per_core=apc)
    return list(out.values())


def _ways(top: int) -> list[int]:
    """1, 2, 4, ... up to ``top``, and ``top`` itself."""
    top = max(1, top)
    return sorted({top} | {2 ** i for i in range(40) if 2 ** i <= top})


def orient(op, dataflow: str, split: Split, m_total: int) -> Problem:
    """The per-array problem for ``dataflow`` (IS transposes), with DRAM layout strides."""
    ab, bb, cb, accb = (_bits(op.a_dtype), _bits(op.b_dtype), _bits(op.c_dtype),
                        _bits(op.acc_dtype))
    k, n = op.k, op.n
    a_ld, b_ld, c_ld = _cdiv(k * ab, 8), _cdiv(n * bb, 8), _cdiv(n * cb, 8)
    folded = op.b_is_weight
    a_bs = 0 if folded else m_total * a_ld
    b_bs = 0 if folded else k * b_ld
    c_bs = 0 if folded else m_total * c_ld
    a_size = m_total * a_ld * (1 if folded else op.batch)
    b_size = k * b_ld * (1 if folded else op.batch)
    b_base = _cdiv(a_size, _BASE_ALIGN) * _BASE_ALIGN
    c_base = b_base + _cdiv(b_size, _BASE_ALIGN) * _BASE_ALIGN
    if dataflow != "is":
        return Problem(dataflow=dataflow, m=split.m, k=k, n=split.n, batch=split.batch,
                       x_bits=ab, w_bits=bb, o_bits=cb, acc_bits=accb, transposed=False,
                       x_ld=a_ld, w_ld=b_ld, o_ld=c_ld, x_bstride=a_bs, w_bstride=b_bs,
                       o_bstride=c_bs, x_base=0, w_base=b_base, o_base=c_base,
                       x_dup=split.pn, w_dup=split.pm)
    # X = Bᵀ (at b_base), W = Aᵀ (at 0), O = Cᵀ
    return Problem(dataflow=dataflow, m=split.n, k=k, n=split.m, batch=split.batch,
                   x_bits=bb, w_bits=ab, o_bits=cb, acc_bits=accb, transposed=True,
                   x_ld=b_ld, w_ld=a_ld, o_ld=c_ld, x_bstride=b_bs, w_bstride=a_bs,
                   o_bstride=c_bs, x_base=b_base, w_base=0, o_base=c_base,
                   x_dup=split.pm, w_dup=split.pn)


def engine_params(chip, pb: Problem, blk: Blocks, rates: Rates, split: Split,
                  memory: bool) -> tuple[np.ndarray, np.ndarray]:
    """The integer and float parameter vectors of :func:`engine.run_schedule`."""
    ip, fp = engine_base(chip, pb, rates, split, memory)
    return set_blocking(ip.copy(), blk), fp


def set_blocking(ip: np.ndarray, blk: Blocks) -> np.ndarray:
    """Write a blocking into an integer parameter vector (returned)."""
    ip[E.P_MB], ip[E.P_KB], ip[E.P_NB], ip[E.P_ORDER] = blk.mb, blk.kb, blk.nb, blk.order
    ip[E.P_X_SB], ip[E.P_W_SB] = blk.x_sb, blk.w_sb
    return ip


def engine_base(chip, pb: Problem, rates: Rates, split: Split,
                memory: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`engine_params` without the blocking (shared by a group's candidates)."""
    arr = chip.core.array
    ip = np.zeros(E.N_IPARAMS, dtype=np.int64)
    ip[E.P_DF] = 0 if pb.dataflow == "os" else 1
    ip[E.P_R], ip[E.P_C] = arr.rows, arr.cols
    ip[E.P_M], ip[E.P_K], ip[E.P_N], ip[E.P_BATCH] = pb.m, pb.k, pb.n, pb.batch
    ip[E.P_OS_NUM], ip[E.P_OS_DEN] = rates.os_num, rates.os_den
    ip[E.P_WS_NUM], ip[E.P_WS_DEN] = rates.ws_num, rates.ws_den
    ip[E.P_RK] = rates.stationary_rows
    t = 1 if pb.transposed else 0
    ip[E.P_X_BASE], ip[E.P_X_LD], ip[E.P_X_BITS], ip[E.P_X_T], ip[E.P_X_BSTRIDE] = \
        pb.x_base, pb.x_ld, pb.x_bits, t, pb.x_bstride
    ip[E.P_W_BASE], ip[E.P_W_LD], ip[E.P_W_BITS], ip[E.P_W_T], ip[E.P_W_BSTRIDE] = \
        (pb.w_base, pb.w_ld, pb.w_bits, t, pb.w_bstride)
    ip[E.P_O_BASE], ip[E.P_O_LD], ip[E.P_O_BITS], ip[E.P_O_T], ip[E.P_O_BSTRIDE] = \
        pb.o_base, pb.o_ld, pb.o_bits, t, pb.o_bstride
    ip[E.P_ACC_BITS] = pb.acc_bits
    engines, per_engine = dma_share(chip, split)
    ip[E.P_ENGINES], ip[E.P_MAXOUT], ip[E.P_SETUP] = engines, chip.dma.max_outstanding, \
        chip.dma.setup_cycles
    ip[E.P_MEMORY] = 1 if memory else 0
    fp = np.zeros(E.N_FPARAMS)
    fp[E.F_GHZ], fp[E.F_DMA_BPC], fp[E.F_SHARE] = chip.clock_ghz, per_engine, float(split.active)
    fp[E.F_X_DUP], fp[E.F_W_DUP] = float(pb.x_dup), float(pb.w_dup)
    fp[E.F_SB_BPC] = shared_buffer_bpc(chip, split)
    return ip, fp


def shared_buffer_bpc(chip, split: Split) -> float:
    """One array's share of the shared buffer's bandwidth in bytes per cycle (0: none)."""
    sbuf = chip.shared_buffer
    return 0.0 if sbuf is None else sbuf.bytes_per_cycle / split.active


def dma_share(chip, split: Split) -> tuple[int, float]:
    """(engines, bytes per cycle per engine) available to one array."""
    apc = max(1, split.arrays_per_core)
    engines = max(1, chip.dma.engines // apc)
    per_engine = chip.dma.bytes_per_cycle * chip.dma.engines / (apc * engines)
    return engines, per_engine


def capacity(chip, split: Split) -> tuple[int, int]:
    """(scratchpad bytes, accumulator bytes) available to one array."""
    sp = chip.core.scratchpad
    apc = max(1, split.arrays_per_core)
    return int(sp.capacity_mib * 2**20) // apc, int(sp.accumulator_mib * 2**20) // apc


def footprint(pb: Problem, mb: int, kb: int, nb: int, acc_bytes_avail: int) -> int:
    """Scratchpad bytes of a blocking (two slots per operand, two output tiles)."""
    x = 2 * _cdiv(mb * kb * pb.x_bits, 8)
    w = 2 * _cdiv(kb * nb * pb.w_bits, 8)
    o = 2 * _cdiv(mb * nb * pb.acc_bits, 8)
    if acc_bytes_avail and o <= acc_bytes_avail:
        o = 0
    elif acc_bytes_avail:
        return 1 << 62
    return x + w + o


def _sizes(base: int, extent: int) -> list[int]:
    out = []
    s = base
    while s < extent:
        out.append(s)
        s *= 2
    out.append(extent)
    return out


def candidates(chip, pb: Problem, rates: Rates, split: Split) -> list[Blocks]:
    """Every blocking that fits the scratchpad share; ValueError if none does."""
    arr = chip.core.array
    cap, acc = capacity(chip, split)
    if pb.dataflow == "os":
        ms = _sizes(min(arr.rows, pb.m), pb.m)
        ks = _sizes(min(arr.rows, pb.k), pb.k)
    else:
        ms = _sizes(min(arr.rows, pb.m), pb.m)
        ks = _sizes(min(rates.stationary_rows, pb.k), pb.k)
    ns = _sizes(min(arr.cols, pb.n), pb.n)
    out = []
    for mb in ms:
        for kb in ks:
            for nb in ns:
                if footprint(pb, mb, kb, nb, acc) <= cap:
                    out.append(Blocks(mb, kb, nb, 0))
                    # the other loop order only differs when both M and N have several blocks
                    if _cdiv(pb.m, mb) > 1 and _cdiv(pb.n, nb) > 1:
                        out.append(Blocks(mb, kb, nb, 1))
    if not out:
        mb, kb, nb = ms[0], ks[0], ns[0]
        need = footprint(pb, mb, kb, nb, 0)
        raise ValueError(
            f"scratchpad too small for the minimal tile: {pb.dataflow} block {mb}x{kb}x{nb} "
            f"needs {need} bytes (double-buffered), but each array has {cap} bytes of "
            f"scratchpad" + (f" and {acc} bytes of accumulator" if acc else ""))
    return out


def _loads(pb: Problem, blk: Blocks) -> tuple[float, float, float, float, float]:
    """(X bytes, X bytes loaded, W bytes, W bytes loaded, O bytes) of one batch element."""
    nm, nk, nn = _cdiv(pb.m, blk.mb), _cdiv(pb.k, blk.kb), _cdiv(pb.n, blk.nb)
    x = pb.m * pb.k * pb.x_bits / 8
    w = pb.k * pb.n * pb.w_bits / 8
    o = pb.m * pb.n * pb.o_bits / 8
    if blk.order == 0:
        xt = x * (nn if nk > 1 else 1)
        wt = w * (1 if (nk == 1 and nn == 1) else nm)
    else:
        wt = w * (nm if nk > 1 else 1)
        xt = x * (1 if (nk == 1 and nm == 1) else nn)
    return x, xt, w, wt, o


def traffic_bytes(pb: Problem, blk: Blocks) -> float:
    """DRAM bytes of a blocking, this array's part (closed form of the engine's reuse rule).

    An operand in the shared buffer is read from DRAM once for the ``dup`` arrays sharing
    it (each array counts ``1/dup`` of its first touch); its re-reads are
    :func:`shared_buffer_bytes`."""
    x, xt, w, wt, o = _loads(pb, blk)
    xd = (x if blk.x_sb == 2 else xt) / (pb.x_dup if blk.x_sb else 1)
    wd = (w if blk.w_sb == 2 else wt) / (pb.w_dup if blk.w_sb else 1)
    return pb.batch * (xd + wd + o)


def shared_buffer_bytes(pb: Problem, blk: Blocks) -> float:
    """Bytes this array re-reads from the shared buffer."""
    x, xt, w, wt, o = _loads(pb, blk)
    return pb.batch * ((xt - x if blk.x_sb == 2 else 0.0) + (wt - w if blk.w_sb == 2 else 0.0))


def reuse_sets(pb: Problem, blk: Blocks, split: Split) -> tuple[float, float, float, float]:
    """Chip-wide bytes the shared buffer must hold: (X mode 1, X mode 2, W mode 1, W mode 2).

    Mode 1 (copies shared across arrays): the ``dup`` arrays sharing a slice play the same
    schedule in lockstep, so only a slice's two in-flight blocks must stay (``2·Mb·Kb`` for X,
    ``2·Kb·Nb`` for W). Mode 2 (re-reads within an array too): a block must stay between two
    touches, so X's block row (``Mb × K``) when M is outermost, all of X when N is; W's block
    column (``K × Nb``) when N is outermost, all of W when M is. The chip holds one set per
    distinct slice: ``active / dup`` of them."""
    mb, kb, nb = min(blk.mb, pb.m), min(blk.kb, pb.k), min(blk.nb, pb.n)
    xn = split.active // pb.x_dup
    wn = split.active // pb.w_dup
    x1 = 2 * mb * kb * pb.x_bits / 8 * xn
    w1 = 2 * kb * nb * pb.w_bits / 8 * wn
    x2 = (mb * pb.k if blk.order == 0 else pb.m * pb.k) * pb.x_bits / 8 * xn
    w2 = (pb.k * pb.n if blk.order == 0 else pb.k * nb) * pb.w_bits / 8 * wn
    return x1, max(x1, x2), w1, max(w1, w2)


def shared_buffer_modes(chip, pb: Problem, blk: Blocks, split: Split) -> list[Blocks]:
    """``blk`` and its variants using the chip's shared buffer for X and/or W (modes 1, 2):
    a mode is offered when it changes something (mode 1: the operand is duplicated across
    arrays; mode 2: it is re-read within the array) and the chosen sets fit the capacity
    together; mode 0 (bypass) is dropped where mode 1 fits instead (it only lightens DRAM).
    A bigger buffer only adds variants or replaces them by dominating ones."""
    sbuf = chip.shared_buffer
    if sbuf is None:
        return [blk]
    cap = sbuf.capacity_bytes
    x, xt, w, wt, o = _loads(pb, blk)
    x1, x2, w1, w2 = reuse_sets(pb, blk, split)
    xm = [(0, 0.0)] + ([(1, x1)] if pb.x_dup > 1 else []) + ([(2, x2)] if xt > x else [])
    wm = [(0, 0.0)] + ([(1, w1)] if pb.w_dup > 1 else []) + ([(2, w2)] if wt > w else [])
    fits = {(a, b) for a, sa in xm for b, sb in wm if sa + sb <= cap}
    # mode 1 only lightens DRAM (same loads, each shared by dup arrays), so where it fits it
    # dominates mode 0 for the same blocking and other operand's mode: mode 0 is dropped
    keep = {(a, b) for a, b in fits
            if not (a == 0 and (1, b) in fits) and not (b == 0 and (a, 1) in fits)}
    # mode 2 dominates modes 0 and 1 where the buffer serves a re-read at least as fast as the
    # DRAM pins would (its bandwidth ≥ dup × the pins': the DRAM transfer it replaces is
    # time-shared by active/dup arrays, the buffer by active) and it fits
    pin_bpc = chip.dram.peak_bytes_per_s / chip.clock_hz
    if sbuf.bytes_per_cycle >= pb.x_dup * pin_bpc:
        keep = {(a, b) for a, b in keep if not (a < 2 and (2, b) in fits)}
    if sbuf.bytes_per_cycle >= pb.w_dup * pin_bpc:
        keep = {(a, b) for a, b in keep if not (b < 2 and (a, 2) in fits)}
    return [Blocks(blk.mb, blk.kb, blk.nb, blk.order, a, b) for a in range(3) for b in range(3)
            if (a, b) in keep]


def busy_cycles(chip, pb: Problem, blk: Blocks, rates: Rates) -> int:
    """Array-busy cycles of a blocking (a lower bound on its cycles)."""
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    total = 0
    for mb, cm in _parts(pb.m, blk.mb):
        for kb, ck in _parts(pb.k, blk.kb):
            for nb, cn in _parts(pb.n, blk.nb):
                if pb.dataflow == "os":
                    f = _cdiv(mb, R) * _cdiv(nb, C) * _cdiv(kb * rates.os_den, rates.os_num)
                else:
                    f = _cdiv(kb, rates.stationary_rows) * _cdiv(nb, C) * \
                        _cdiv(mb * rates.ws_den, rates.ws_num)
                total += f * cm * ck * cn
    return pb.batch * total


def period_cycles(chip, pb: Problem, blk: Blocks, rates: Rates) -> int:
    """Sum of every fold's steady-state period: a lower bound on the memory-free cycles
    (OS: Σ max(ke, R); WS: Σ max(me, 2R + C − 2); the first fold's fill and the last fold's
    drain exceed the period they replace)."""
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    total = 0
    for mb, cm in _parts(pb.m, blk.mb):
        for kb, ck in _parts(pb.k, blk.kb):
            for nb, cn in _parts(pb.n, blk.nb):
                if pb.dataflow == "os":
                    ke = _cdiv(kb * rates.os_den, rates.os_num)
                    f = _cdiv(mb, R) * _cdiv(nb, C) * T.os_period(R, ke)
                else:
                    me = _cdiv(mb * rates.ws_den, rates.ws_num)
                    f = _cdiv(kb, rates.stationary_rows) * _cdiv(nb, C) * T.ws_period(R, C, me)
                total += f * cm * ck * cn
    return pb.batch * total


def compute_cycles(chip, pb: Problem, blk: Blocks, rates: Rates) -> int:
    """Exact memory-free cycles of a blocking (closed form of the engine's recurrence).

    OS: ``L`` advances by ``max(ke, R)`` per fold after the first, which ends at ``ke − 1``;
    the last output is ``L + 2R + C − 2``. WS: the first row of fold t+1 is
    ``max(s_t + 2R + C − 2, s_t + me_t)``, the first fold's is R, the last output
    ``s_last + me_last − 1 + R + C − 1``. The first fold belongs to block (0, 0, 0), the last
    to the block with every index at its maximum (ragged edges).
    """
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    total = period_cycles(chip, pb, blk, rates)
    m0, k0, n0 = min(blk.mb, pb.m), min(blk.kb, pb.k), min(blk.nb, pb.n)
    ml = pb.m - (_cdiv(pb.m, blk.mb) - 1) * blk.mb
    if pb.dataflow == "os":
        # the first fold's last step is ke0 − 1 instead of a period after the previous one
        ke0 = _cdiv(k0 * rates.os_den, rates.os_num)
        return T.os_last_output(total - T.os_period(R, ke0) + ke0 - 1, R, C) + 1
    # the first fold's first row is R (weights from cycle 0); the last fold streams mel rows
    mel = _cdiv(ml * rates.ws_den, rates.ws_num)
    first = T.ws_first_row(0, -1, R)
    return T.ws_row_output(first + total - T.ws_period(R, C, mel) + mel - 1, R, C) + 1


def edge_bytes(pb: Problem, blk: Blocks) -> float:
    """Bytes that must cross DRAM before the first fold (first X and W blocks, this array's
    part of them) plus after the last one (the last output tile)."""
    return sum(_edge_parts(pb, blk))


def _edge_parts(pb: Problem, blk: Blocks) -> tuple[float, float]:
    m0, k0, n0 = min(blk.mb, pb.m), min(blk.kb, pb.k), min(blk.nb, pb.n)
    ml = pb.m - (_cdiv(pb.m, blk.mb) - 1) * blk.mb
    nl = pb.n - (_cdiv(pb.n, blk.nb) - 1) * blk.nb
    return ((m0 * k0 * pb.x_bits / (pb.x_dup if blk.x_sb else 1)
             + k0 * n0 * pb.w_bits / (pb.w_dup if blk.w_sb else 1)) / 8,
            ml * nl * pb.o_bits / 8)


def edge_cycles(chip, pb: Problem, blk: Blocks, peak_bpc: float) -> float:
    """Cycles a run must add to its memory-free cycles: the first blocks' loads and the last
    tile's write-back each take a DMA setup, then at least the DRAM latency (tRCD + tCL) and
    at least their bytes at the array's share of the pins (the aggregate server)."""
    t = dram_timing(chip)
    lat = (t.t_rcd_ns + t.t_cl_ns) * chip.clock_ghz
    e_in, e_out = _edge_parts(pb, blk)
    return (2 * chip.dma.setup_cycles + max(e_in / peak_bpc, lat) + max(e_out / peak_bpc, lat))


def _parts(extent: int, block: int):
    full, rem = divmod(extent, block)
    out = []
    if full:
        out.append((block, full))
    if rem:
        out.append((rem, 1))
    return out


def dram_timing(chip) -> DramTiming:
    return _dram_timing(chip.dram)


@lru_cache(maxsize=64)
def _dram_timing(dram) -> DramTiming:
    return DramTiming.from_dram(dram)


@lru_cache(maxsize=64)
def dram_vectors(dram) -> tuple[np.ndarray, np.ndarray]:
    """The DRAM model's (integer, float) parameter vectors, shared: the kernels only read them."""
    t = _dram_timing(dram)
    return t.iparams(), t.fparams()



def group_floor(chip, pb: Problem, rates: Rates, split: Split, peak_bpc: float) -> float:
    """A bound below every candidate's estimate and lower bound for this split and dataflow:
    max(MACs at the array's peak rate, the fewest DRAM bytes any mode can move at the array's
    share of the pins). Operands cross DRAM at least once per array, or once per ``dup``
    arrays with a shared buffer."""
    arr = chip.core.array
    macs = pb.batch * pb.m * pb.k * pb.n
    busy = macs / (arr.rows * arr.cols * rates.rate)
    x = pb.m * pb.k * pb.x_bits / 8
    w = pb.k * pb.n * pb.w_bits / 8
    o = pb.m * pb.n * pb.o_bits / 8
    if chip.shared_buffer is not None:
        x, w = x / pb.x_dup, w / pb.w_dup
    # 1e-9: float rounding must not lift the floor above a candidate's own numbers
    return max(busy, pb.batch * (x + w + o) / peak_bpc) * (1.0 - 1e-9)


class BlockTable:
    """A vector of :class:`Blocks` kept as NumPy columns (built lazily when indexed)."""

    def __init__(self, mb, kb, nb, order, x_sb, w_sb):
        self.mb, self.kb, self.nb, self.order, self.x_sb, self.w_sb = mb, kb, nb, order, x_sb, w_sb
        self.periods = None   # filled by candidate_table: period_cycles of each candidate

    def __len__(self):
        return len(self.mb)

    def __getitem__(self, i) -> Blocks:
        if not 0 <= i < len(self.mb):
            raise IndexError(i)
        return Blocks(int(self.mb[i]), int(self.kb[i]), int(self.nb[i]), int(self.order[i]),
                      int(self.x_sb[i]), int(self.w_sb[i]))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def blocks_count(self, pb: Problem) -> np.ndarray:
        """Blocks of each candidate's schedule."""
        return pb.batch * (-(-pb.m // self.mb)) * (-(-pb.k // self.kb)) * (-(-pb.n // self.nb))


def candidate_table(chip, pb: Problem, rates: Rates, split: Split, peak_bpc: float):
    """:func:`candidates` (and their :func:`shared_buffer_modes`) with their estimate and
    lower bound, compiled (:mod:`diptych.sim.mapper_kernels`).

    Returns (BlockTable, est, lb); the same numbers as :func:`compute_cycles`,
    :func:`traffic_bytes` and :func:`edge_bytes` per candidate (the tests compare them and an
    independent NumPy version). ``lb`` = max(memory-free cycles + :func:`edge_cycles`, all
    bytes at the array's share of the pin bandwidth, all loads and write-backs at the array's
    DMA port rate, shared-buffer re-reads at the array's share of its bandwidth); ``est`` =
    max(memory-free cycles, DRAM bytes at 90 % of the pin share, the port time, re-reads at
    90 % of the shared-buffer share) + one DMA setup per block per engine.
    """
    arr = chip.core.array
    cap, acc = capacity(chip, split)
    kbase = arr.rows if pb.dataflow == "os" else rates.stationary_rows
    mb, kb, nb, order = MK.blockings(arr.rows, arr.cols, kbase, pb.m, pb.k, pb.n, pb.x_bits,
                                     pb.w_bits, pb.acc_bits, cap, acc)
    if len(mb) == 0:
        candidates(chip, pb, rates, split)   # raises the explanatory ValueError
    xsb, wsb = np.zeros(len(mb), dtype=np.int64), np.zeros(len(mb), dtype=np.int64)
    if chip.shared_buffer is not None:
        mb, kb, nb, order, xsb, wsb = _shared_buffer_variants(chip, pb, split, mb, kb, nb, order)
    cs = BlockTable(mb, kb, nb, order, xsb, wsb)
    iv, fv = _table_vectors(chip, pb, rates, split, peak_bpc)
    cs.periods, est, lb = MK.table_numbers(mb, kb, nb, order, xsb, wsb, iv, fv)
    return cs, est, lb


def _table_vectors(chip, pb: Problem, rates: Rates, split: Split, peak_bpc: float):
    """The scalar inputs of :func:`mapper_kernels.table_numbers`."""
    arr = chip.core.array
    iv = np.zeros(MK.N_K, dtype=np.int64)
    iv[MK.K_OS] = 1 if pb.dataflow == "os" else 0
    iv[MK.K_R], iv[MK.K_C], iv[MK.K_RK] = arr.rows, arr.cols, rates.stationary_rows
    iv[MK.K_OS_NUM], iv[MK.K_OS_DEN] = rates.os_num, rates.os_den
    iv[MK.K_WS_NUM], iv[MK.K_WS_DEN] = rates.ws_num, rates.ws_den
    iv[MK.K_M], iv[MK.K_K], iv[MK.K_N], iv[MK.K_BATCH] = pb.m, pb.k, pb.n, pb.batch
    iv[MK.K_XBITS], iv[MK.K_WBITS], iv[MK.K_OBITS] = pb.x_bits, pb.w_bits, pb.o_bits
    iv[MK.K_XDUP], iv[MK.K_WDUP] = pb.x_dup, pb.w_dup
    engines, per_engine = dma_share(chip, split)
    iv[MK.K_SETUP], iv[MK.K_ENGINES] = chip.dma.setup_cycles, engines
    t = dram_timing(chip)
    fv = np.zeros(MK.N_G)
    fv[MK.G_PEAK], fv[MK.G_GHZ] = peak_bpc, chip.clock_ghz
    fv[MK.G_LAT] = (t.t_rcd_ns + t.t_cl_ns) * chip.clock_ghz
    fv[MK.G_TREFI], fv[MK.G_BLACKOUT] = t.t_refi_ns, t.t_rfc_ns + t.t_rcd_ns + t.t_cl_ns
    fv[MK.G_PER_ENGINE], fv[MK.G_SB_BPC] = per_engine, shared_buffer_bpc(chip, split)
    return iv, fv


def _shared_buffer_variants(chip, pb: Problem, split: Split, mb, kb, nb, order):
    """Every (X mode, W mode) variant of each blocking that fits the buffer
    (:func:`shared_buffer_modes`, compiled: :func:`mapper_kernels.shared_buffer_variants`)."""
    sv = np.zeros(MK.N_S, dtype=np.int64)
    sv[MK.S_M], sv[MK.S_K], sv[MK.S_N] = pb.m, pb.k, pb.n
    sv[MK.S_XBITS], sv[MK.S_WBITS] = pb.x_bits, pb.w_bits
    sv[MK.S_XDUP], sv[MK.S_WDUP], sv[MK.S_ACTIVE] = pb.x_dup, pb.w_dup, split.active
    pin_bpc = chip.dram.peak_bytes_per_s / chip.clock_hz
    sb_total = chip.shared_buffer.bytes_per_cycle
    sv[MK.S_XFAST] = sb_total >= pb.x_dup * pin_bpc
    sv[MK.S_WFAST] = sb_total >= pb.w_dup * pin_bpc
    idx, xsb, wsb = MK.shared_buffer_variants(mb, kb, nb, order, sv,
                                              float(chip.shared_buffer.capacity_bytes))
    return mb[idx], kb[idx], nb[idx], order[idx], xsb, wsb
