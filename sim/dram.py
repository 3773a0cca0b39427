"""The fast, analytic DRAM model (HBM pseudo-channels or DDR channels).

Address mapping (both models). The byte address ``a`` falls in interleave chunk
``c = a // I`` (``I`` = ``interleave_bytes``), which lives on pseudo-channel ``c % P``; inside
that pseudo-channel its local address is ``(c // P)·I + a % I``. Local addresses fill a page
(row buffer, ``page_bytes``) and then move to the next bank: page ``g = local // page_bytes``
is row ``g // banks`` of bank ``g % banks``. A sequential stream therefore spreads evenly over
all pseudo-channels and, inside each, rotates through the banks one page at a time.

Per transfer, per pseudo-channel (analytic, O(1) after counting). Count the bursts ``n_b`` (one
``burst_bytes`` access each) and the row activations ``n_a`` (accesses to a bank whose open row
differs; every transfer starts with closed rows, a slightly pessimistic open-page policy). Then

* the data bus needs ``n_b · t_burst`` with ``t_burst = burst_bytes·8 / (bits · Gb/s)``;
* the first data arrives ``tRCD + tCL`` after the transfer is issued, and no earlier than the
  bus is free (plus ``tWTR`` or ``tRTW`` when the direction changes);
* activations obey the four-activate window: activation ``j`` is at least ``tFAW`` after
  activation ``j − 4`` (state kept per pseudo-channel across transfers), and the data that
  follows the last activation ends no earlier than ``a_last + tRCD + tCL + t_burst``;
* a bank activated ``n`` times in one transfer (row conflicts) needs ``(n − 1)·tRC`` between
  its first and last activation (``tRC = tRAS + tRP``);
* all-bank refresh: in each window ``[k·tREFI, k·tREFI + tRFC + tRCD + tCL)`` (k ≥ 1) the
  data bus is dark (refresh, then the rows must be re-opened); data time is work-conserving
  around those windows, which keeps the model monotone in start time and in work.

Bank precharge (tRP, tRAS) is hidden by bank-level parallelism in streaming access; the
burst-level reference (:mod:`diptych.sim.dram_ref`) models it and the tests check that the two
agree within 5 % on small transfers. ``share`` > 1 stretches data and activation time by that
factor: the representative array of a multi-array chip sees its pseudo-channels time-sliced
with the other ``share − 1`` arrays doing the same work. Their transfers go to other
addresses, so a transfer touching ``t`` of the ``P`` pseudo-channels is stretched by
``max(1, share · t / P)``: the average load the others put on those channels. On top, an
aggregate server caps the array at ``1/share`` of the pin bandwidth (all bursts of all arrays
at peak rate, dark during refresh), so the chip never moves more than its peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numba
import numpy as np

import os as _os

from ..arch.chip import Dram
from .dram_counts import I_BANKS, I_BURST, I_INTERLEAVE, I_P, I_PAGE, I_PERIOD  # noqa: F401
from .dram_counts import (COUNT_DTYPE, call_count, count_c, count_pattern,  # noqa: F401
                          count_transfer)
from .jit import invalidate_stale_cache, jit

_here = _os.path.dirname(_os.path.abspath(__file__))
invalidate_stale_cache(__file__, *(_os.path.join(_here, f) for f in ("dram_counts.py", "jit.py")))

#: Four-activate window in ns. Ramulator2's JESD238A HBM3 preset: nFAW 48 at tCK 0.625 ns =
#: 30 ns; DRAMsim3 HBM2_8Gb_x128.ini: tFAW 30 at tCK 1 ns (reference.md §2b). DDR3/4 x8
#: devices with 1-2 KiB pages have 25-35 ns, so 30 ns serves every kind.
T_FAW_NS = 30.0

#: Reorder look-ahead of the burst-level reference controller: a row activation may be issued
#: while the previous ``LOOKAHEAD_BURSTS`` bursts are still waiting for the data bus (a 64-entry
#: command queue, as in DRAMsim3's default ``cmd_queue_size`` range of 32-64 [assumption]).
LOOKAHEAD_BURSTS = 64

#: Bytes of the pattern cache shared by engine runs on one DRAM geometry: per entry and
#: pseudo-channel a record of four int32 (the channel and its three counts: 16 bytes), so
#: 16,384 entries at 256 pseudo-channels and 65,536 at 64.
PERSISTENT_CACHE_BYTES = 64 << 20

#: Pattern caches kept (one per DRAM geometry and thread, least recently used dropped).
PERSISTENT_CACHES = 4

# Layout of the float parameter vector shared by the kernels (the integer one, I_*, lives in
# dram_counts).
# ``F_FABRIC``: ns per byte of the fabric server (the NoC/D2D cap of :mod:`.fabric`; 0 = none).
F_TBURST, F_LAT, F_TRFC, F_TREFI, F_BLACKOUT, F_TWTR, F_TRTW, F_TFAW, F_TRC, F_FABRIC = range(10)


@dataclass(frozen=True)
class DramTiming:
    """DRAM parameters the models use, derived from :class:`diptych.arch.Dram` (times in ns)."""

    pseudo_channels: int
    interleave_bytes: int
    page_bytes: int
    burst_bytes: int
    banks: int
    t_burst_ns: float
    t_rcd_ns: float
    t_cl_ns: float
    t_rp_ns: float
    t_ras_ns: float
    t_rfc_ns: float
    t_refi_ns: float
    t_wtr_ns: float
    t_rtw_ns: float
    t_faw_ns: float
    peak_bytes_per_ns: float

    @classmethod
    def from_dram(cls, d) -> "DramTiming":
        if d.interleave_bytes % d.burst_bytes:
            raise ValueError(f"dram.interleave_bytes ({d.interleave_bytes}) must be a multiple of "
                             f"dram.burst_bytes ({d.burst_bytes})")
        if d.page_bytes % d.interleave_bytes and d.interleave_bytes % d.page_bytes:
            raise ValueError(f"dram.page_bytes ({d.page_bytes}) and dram.interleave_bytes "
                             f"({d.interleave_bytes}) must divide one another")
        gbps = d.bits_per_pseudo_channel * d.gbps_per_pin  # Gb/s per pseudo-channel
        return cls(
            pseudo_channels=d.pseudo_channels, interleave_bytes=d.interleave_bytes,
            page_bytes=d.page_bytes, burst_bytes=d.burst_bytes, banks=d.banks_per_pseudo_channel,
            t_burst_ns=d.burst_bytes * 8.0 / gbps, t_rcd_ns=d.t_rcd_ns, t_cl_ns=d.t_cl_ns,
            t_rp_ns=d.t_rp_ns, t_ras_ns=d.t_ras_ns, t_rfc_ns=d.t_rfc_ns, t_refi_ns=d.t_refi_ns,
            t_wtr_ns=d.t_wtr_ns, t_rtw_ns=d.t_rtw_ns, t_faw_ns=T_FAW_NS,
            peak_bytes_per_ns=d.pseudo_channels * gbps / 8.0)

    @property
    def period_bytes(self) -> int:
        """Address period after which the per-channel access pattern repeats."""
        return self.pseudo_channels * math.lcm(self.interleave_bytes, self.page_bytes)

    def iparams(self) -> np.ndarray:
        return np.array([self.pseudo_channels, self.interleave_bytes, self.page_bytes,
                         self.burst_bytes, self.banks, self.period_bytes], dtype=np.int64)

    def fparams(self) -> np.ndarray:
        lat = self.t_rcd_ns + self.t_cl_ns
        return np.array([self.t_burst_ns, lat, self.t_rfc_ns, self.t_refi_ns,
                         self.t_rfc_ns + lat, self.t_wtr_ns, self.t_rtw_ns, self.t_faw_ns,
                         self.t_ras_ns + self.t_rp_ns, 0.0],
                        dtype=np.float64)


#: Indices of the pattern-cache tuple (:func:`pattern_cache`): the reference's per-bank state
#: (open row, stamp, activations), the transfer counter, the key of each entry, the dense
#: per-pseudo-channel counts of the last fill (one row: the counting function's outputs),
#: then per entry (touched pseudo-channels, total bursts) and its records, one per touched
#: pseudo-channel in channel order: (channel, bursts, activations, most on one bank). The
#: records keep a hit's reads (and a fill's writes) to ``16 · touched`` contiguous bytes of
#: the entry; dense counts per entry were four rows of ``4 · P`` bytes, mostly cache misses
#: at 256 pseudo-channels. The counter holds [transfer id, address of the counting function
#: (:data:`~diptych.sim.dram_counts.count_c`, called on misses)].
(C_OPEN, C_STAMP, C_BANK, C_COUNTER, C_KEYS, C_BURSTS, C_ACTS, C_BMAX, C_META,
 C_RECS) = range(10)
#: Fields of a record (the last axis of ``C_RECS``).
R_PC, R_BURSTS, R_ACTS, R_BMAX = range(4)

#: Indices of the run-state tuple (:func:`run_state`): per pseudo-channel bus-free time, last
#: direction, the last four activations, busy time; the aggregate servers' free times (the
#: pins', then the fabric's).
S_BUS, S_DIR, S_ACT, S_BUSY, S_AGG = range(5)

_PATTERN_CACHES: dict = {}

# with NUMBA_DISABLE_JIT=1 (tests that perturb the timing contract) the kernels are plain
# Python and the counting function is called directly
_PURE_PYTHON = bool(numba.config.DISABLE_JIT)


def new_pattern_cache(timing: DramTiming, entries: int):
    """A fresh pattern cache (see the ``C_*`` indices) with ``entries`` direct-mapped entries."""
    p, b = timing.pseudo_channels, timing.banks
    z = np.zeros
    return (np.full((p, b), -1, dtype=np.int64), z((p, b), dtype=np.int64),
            z((p, b), dtype=np.int64),
            np.array([0, 0 if _PURE_PYTHON else count_c.address], dtype=np.int64),
            np.full((entries, 4), -1, dtype=np.int64), z((1, p), dtype=COUNT_DTYPE),
            z((1, p), dtype=COUNT_DTYPE), z((1, p), dtype=COUNT_DTYPE),
            z((entries, 2), dtype=np.int64), z((entries, p, 4), dtype=COUNT_DTYPE))


def persistent_entries(pseudo_channels: int) -> int:
    """Entries of a shared pattern cache: a power of two filling :data:`PERSISTENT_CACHE_BYTES`
    (2,048 to 65,536)."""
    n = 2048
    while n < 65536 and 2 * n * pseudo_channels * 16 <= PERSISTENT_CACHE_BYTES:
        n *= 2
    return n


def pattern_cache(timing: DramTiming, entries: int | None = None):
    """The per-thread pattern cache of one DRAM geometry, shared by engine runs
    (:func:`persistent_entries` entries unless given).

    Entries hold exact counts, so sharing cannot change results.
    """
    import threading
    key = (timing.pseudo_channels, timing.interleave_bytes, timing.page_bytes,
           timing.burst_bytes, timing.banks, threading.get_ident())
    c = _PATTERN_CACHES.pop(key, None)
    if c is None:
        c = new_pattern_cache(timing, entries or persistent_entries(timing.pseudo_channels))
        while len(_PATTERN_CACHES) >= PERSISTENT_CACHES:
            del _PATTERN_CACHES[next(iter(_PATTERN_CACHES))]
    _PATTERN_CACHES[key] = c           # most recently used last
    return c


# ---------------------------------------------------------------------------------------------
# Numba kernels (also called by the engine kernel)

@jit
def run_state(p):
    """Fresh per-run DRAM state for ``p`` pseudo-channels (see the ``S_*`` indices)."""
    return (np.zeros(p), np.full(p, -1, dtype=np.int64), np.full((p, 4), -1e18), np.zeros(p),
            np.zeros(2))


#: :func:`run_state` as plain Python (its ``py_func``; itself with ``NUMBA_DISABLE_JIT=1``).
_RUN_STATE = getattr(run_state, "py_func", run_state)


@jit
def advance(t, work, trefi, blk):
    """Finish time of ``work`` ns of data-bus time started at ``t``, skipping the refresh
    windows ``[k·trefi, k·trefi + blk)`` (k ≥ 1); all in ns. Not inlined: compiled once for
    its callers (scalar arguments: a call costs no reference counting)."""
    while True:
        k = math.floor(t / trefi)
        if k >= 1 and t < k * trefi + blk:
            t = k * trefi + blk
        nxt = (k + 1) * trefi
        if t + work <= nxt:
            return t + work
        work -= nxt - t
        t = nxt + blk


@jit
def refresh_window(t, trefi, blk):
    """The part of :func:`advance` that depends on the start ``t`` only, as two numbers: the
    end of the refresh window ``t`` falls in or last passed, ``k·trefi + blk`` with
    ``k = floor(t / trefi)`` (``-inf`` when ``k`` < 1: no window before it), and the start of
    the next one, ``(k + 1)·trefi``; in ns. ``t`` moved past its window is the larger of ``t``
    and the first; ``advance(t, work)`` is that plus ``work`` when it is at most the second,
    else ``advance(next + blk, work − (next − t'))`` (its own next step): :func:`play_one`
    uses this to reuse the window of a start it has already seen. Compiled once (scalars)."""
    k = math.floor(t / trefi)
    return (k * trefi + blk if k >= 1 else -math.inf), (k + 1) * trefi


@jit
def _advance(t, work, fp):
    """:func:`advance` with the refresh parameters of ``fp``."""
    return advance(t, work, fp[F_TREFI], fp[F_BLACKOUT])


@jit(no_cpython_wrapper=True)
def _fill_entry(h, a_mod, rows, row_bytes, stride, ip, pat):
    """Count a transfer into pattern-cache entry ``h`` (the miss path of :func:`pattern_entry`,
    kept out of line so that hits stay cheap)."""
    p_n = ip[I_P]
    counter = pat[C_COUNTER]
    counter[0] += 1
    bursts = pat[C_BURSTS][0]     # (zero between fills: each is cleared as it is copied)
    acts = pat[C_ACTS][0]
    bmax = pat[C_BMAX][0]
    if _PURE_PYTHON:   # NUMBA_DISABLE_JIT: no function pointers
        count_transfer(a_mod, rows, row_bytes, stride, ip, pat[C_OPEN], pat[C_STAMP],
                       pat[C_BANK], counter[0], bursts, acts, bmax)
    else:              # count_transfer, through its C function pointer
        call_count(counter[1], a_mod, rows, row_bytes, stride, ip.ctypes.data,
                   pat[C_OPEN].ctypes.data, pat[C_STAMP].ctypes.data, pat[C_BANK].ctypes.data,
                   counter[0], bursts.ctypes.data, acts.ctypes.data, bmax.ctypes.data)
    keys = pat[C_KEYS]
    keys[h, 0] = a_mod
    keys[h, 1] = rows
    keys[h, 2] = row_bytes
    keys[h, 3] = stride
    n = 0
    tot = 0
    recs = pat[C_RECS][h]
    for p in range(p_n):
        nb = bursts[p]
        if nb > 0:
            recs[n, R_PC] = p
            recs[n, R_BURSTS] = nb
            recs[n, R_ACTS] = acts[p]
            recs[n, R_BMAX] = bmax[p]
            bursts[p] = 0
            acts[p] = 0
            bmax[p] = 0
            n += 1
            tot += nb
    pat[C_META][h, 0] = n
    pat[C_META][h, 1] = tot


@jit(inline="always")
def pattern_entry(addr, rows, row_bytes, stride, ip, pat):
    """The pattern-cache entry holding this transfer's counts (counted on a miss)."""
    keys = pat[C_KEYS]
    a_mod = addr % ip[I_PERIOD]
    x = ((a_mod * 1000003 + rows) * 1000003 + row_bytes) * 1000003 + stride
    x ^= x >> 29
    x *= 0x5851F42D4C957F2D
    x ^= x >> 32
    h = (x & 0x7FFFFFFF) % keys.shape[0]
    if not (keys[h, 0] == a_mod and keys[h, 1] == rows and keys[h, 2] == row_bytes
            and keys[h, 3] == stride):
        _fill_entry(h, a_mod, rows, row_bytes, stride, ip, pat)
    return h


#: :func:`play_one`'s memo before any walk (``nan`` never equals a start nor a window's
#: next start; the empty window interval ``[inf, -inf]`` holds none).
NO_MEMO = (math.nan, math.nan, 0.0, math.inf, -math.inf, -math.inf, math.nan)


@jit(inline="always")
def play_one(start_ns, is_write, share, tp, bus_free, last_dir, a0, a1, a2, a3, nb, na, bm,
             memo):
    """The per-channel rule of a transfer for one pseudo-channel: its state is the bus-free time
    ``bus_free`` (ns), the last direction ``last_dir`` (-1 none, 0 read, 1 write) and its last
    four activations ``a0..a3`` (ns, oldest first); ``nb`` bursts, ``na`` activations, ``bm``
    the most on one bank; ``tp``: :func:`play_params`. Returns (data start ns, data end ns,
    the new four activations, memo). Scalars only: an array argument of an inlined helper
    costs two atomic reference-count updates per call.

    ``memo``: (start, work, finish) of the last refresh walk (:func:`advance`, a pure
    function), then ``[lo, hi]``, starts known to fall in one refresh window, and that
    window's ``k·tREFI + blackout`` (``-inf`` for the first, ``k`` = 0) and next window
    ``(k + 1)·tREFI`` (:data:`NO_MEMO` for none). The channels of one transfer mostly start
    at the same time (95 % of the headline's channel plays start with their predecessor's):
    with the same work too, the finish is reused; with other work (channels with other
    counts), the start's window (:func:`refresh_window`) is, so only a data time that crosses
    into the next window walks on. A start between two starts of one window is in that
    window too (``floor(t / tREFI)``, a correctly rounded division and a floor, is
    non-decreasing in ``t``), so busy channels, whose starts differ, skip the division as
    well. All give :func:`advance`'s number bit for bit (``tests/sim/test_dram_play_memo.py``);
    the walk's division and call were most of a channel's cost."""
    tb, lat, tfaw, twtr, trtw, trc, trefi, blk = tp
    ta = 0.0
    if last_dir >= 0 and last_dir != is_write:
        ta = twtr if last_dir == 1 else trtw
    d0 = max(start_ns + lat, bus_free + ta)
    work = nb * tb * share
    m_d0, m_work, m_end, lo, hi, w0, nxt = memo
    if d0 == m_d0 and work == m_work:
        end = m_end
    else:
        if not (lo <= d0 <= hi):
            w1, n1 = refresh_window(d0, trefi, blk)
            if n1 == nxt:            # the same window: widen its interval
                lo = min(lo, d0)
                hi = max(hi, d0)
            else:
                lo = d0
                hi = d0
                w0 = w1
                nxt = n1
        t1 = max(d0, w0)
        if t1 + work <= nxt:
            end = t1 + work
        else:
            end = advance(nxt + blk, work - (nxt - t1), trefi, blk)
        memo = (d0, work, end, lo, hi, w0, nxt)
    if na > 0:
        f0 = max(start_ns, a0 + tfaw)
        f1 = max(start_ns, a1 + tfaw)
        f2 = max(start_ns, a2 + tfaw)
        f3 = max(start_ns, a3 + tfaw)
        if na >= 4:   # activation j (0-based) at first[j % 4] + (j // 4)·tFAW; keep the last 4
            # (j = na − 4 .. na − 1; spelled per j % 4 without indexing a tuple: the same sums)
            j = np.int64(na) - 4
            q = j >> 2
            r = j & 3
            u = (q + 1) * tfaw
            v = q * tfaw
            if r == 0:
                a0, a1, a2, a3 = f0 + v, f1 + v, f2 + v, f3 + v
            elif r == 1:
                a0, a1, a2, a3 = f1 + v, f2 + v, f3 + v, f0 + u
            elif r == 2:
                a0, a1, a2, a3 = f2 + v, f3 + v, f0 + u, f1 + u
            else:
                a0, a1, a2, a3 = f3 + v, f0 + u, f1 + u, f2 + u
        elif na == 1:   # the ring shifts by na
            a0, a1, a2, a3 = a1, a2, a3, f0
        elif na == 2:
            a0, a1, a2, a3 = a2, a3, f0, f1
        else:
            a0, a1, a2, a3 = a3, f0, f1, f2
        end = max(end, a3 + lat + tb, start_ns + (bm - 1) * trc + lat + tb)
    return d0, end, a0, a1, a2, a3, memo


@jit(inline="always")
def play_params(fp):
    """The scalars :func:`play_one` reads from the float parameters ``fp`` (ns): burst time,
    tRCD + tCL, tFAW, tWTR, tRTW, tRC, tREFI and the refresh blackout."""
    return (fp[F_TBURST], fp[F_LAT], fp[F_TFAW], fp[F_TWTR], fp[F_TRTW], fp[F_TRC], fp[F_TREFI],
            fp[F_BLACKOUT])


@jit(inline="always")
def _play(start_ns, is_write, share, fp, st, recs, n, pc_start, pc_end):
    """The per-channel part of a transfer on the channels of its records ``recs[:n]`` (channel
    and counts, ``R_*``); updates the run state and returns the latest data end (ns, at least
    ``start_ns``). ``pc_start``/``pc_end`` (unless empty) get each channel's data interval."""
    bus_free = st[S_BUS]
    last_dir = st[S_DIR]
    act_ring = st[S_ACT]
    busy_ns = st[S_BUSY]
    spans = pc_start.shape[0] > 0
    tp = play_params(fp)
    finish = start_ns
    memo = NO_MEMO
    for t in range(n):
        p = np.uint64(recs[t, R_PC])     # (unsigned: no negative-index wraparound)
        d0, end, a0, a1, a2, a3, memo = play_one(start_ns, is_write, share, tp, bus_free[p],
                                                 last_dir[p], act_ring[p, 0], act_ring[p, 1],
                                                 act_ring[p, 2], act_ring[p, 3],
                                                 recs[t, R_BURSTS], recs[t, R_ACTS],
                                                 recs[t, R_BMAX], memo)
        act_ring[p, 0] = a0
        act_ring[p, 1] = a1
        act_ring[p, 2] = a2
        act_ring[p, 3] = a3
        if spans:
            pc_start[p] = d0
            pc_end[p] = end
        busy_ns[p] += end - d0
        bus_free[p] = end
        last_dir[p] = is_write
        if end > finish:
            finish = end
    return finish


@jit(inline="always")
def _aggregate(start_ns, bursts, share, ip, fp, agg):
    """Play ``bursts`` (this array's, standing for ``share`` arrays' alike) on the aggregate
    servers: the pins (all bursts at peak rate, dark during refresh) and, when
    ``fp[F_FABRIC]`` > 0, the fabric (the NoC/D2D cap, never dark). Returns the later finish."""
    p_n = ip[I_P]
    agg_start = max(start_ns, agg[0])
    agg[0] = _advance(agg_start, bursts * fp[F_TBURST] * share / p_n, fp)
    if fp[F_FABRIC] > 0.0:
        agg[1] = max(start_ns, agg[1]) + bursts * ip[I_BURST] * share * fp[F_FABRIC]
        return max(agg[0], agg[1])
    return agg[0]


@jit(inline="always")
def dram_transfer(start_ns, addr, rows, row_bytes, stride, is_write, share, ip, fp, st, pat,
                  pc_start, pc_end):
    """Schedule one 2-D transfer on the pseudo-channels; returns its finish time in ns.

    ``st`` is the run state (:func:`run_state`), ``pat`` the pattern cache. Unless they are
    empty, ``pc_start``/``pc_end`` receive each pseudo-channel's data interval (-1 when
    untouched). Costs O(pseudo-channels the transfer touches) once its counts are cached.
    """
    p_n = ip[I_P]
    h = pattern_entry(addr, rows, row_bytes, stride, ip, pat)
    touched = pat[C_META][h, 0]
    # aggregate caps: all ``share`` arrays together never exceed the pin bandwidth (nor the
    # fabric's)
    agg_end = _aggregate(start_ns, pat[C_META][h, 1], share, ip, fp, st[S_AGG])
    # the other share-1 arrays' transfers spread over all channels: this transfer's channels
    # carry share × touched / P of them on average
    share = max(1.0, share * touched / p_n)
    if pc_start.shape[0] > 0:
        for p in range(p_n):
            pc_start[p] = -1.0
            pc_end[p] = -1.0
    finish = _play(start_ns, is_write, share, fp, st, pat[C_RECS][h], touched, pc_start, pc_end)
    return max(finish, agg_end)


@jit
def stream_transfers(start_ns, addr, total_bytes, chunk_bytes, is_write, ip, fp, st, pat,
                     pc_start, pc_end):
    """Issue ``total_bytes`` from ``addr`` as back-to-back 1-row transfers of ``chunk_bytes``
    (the last one shorter), all at ``start_ns``; returns the last one's finish time (``start_ns``
    when there are no bytes). One compiled call instead of one per chunk; the reference of
    :func:`stream_classes`."""
    done = start_ns
    left = total_bytes
    one = np.int64(1)    # (a literal would compile another specialisation)
    while left > 0:
        n = min(chunk_bytes, left)
        done = dram_transfer(start_ns, addr, one, n, n, is_write, 1.0, ip, fp, st, pat, pc_start,
                             pc_end)
        addr += n
        left -= n
    return done


# ---------------------------------------------------------------------------------------------
# Python conveniences

#: Longest period of chunk addresses (mod ``period_bytes``) that :func:`stream_classes`
#: groups pseudo-channels over; longer ones are streamed transfer by transfer.
MAX_STREAM_PERIOD = 64


@jit
def stream_classes(start_ns, addr, total_bytes, chunk_bytes, is_write, ip, fp, st, pat):
    """:func:`stream_transfers` (same result, same final state) in O(chunks × classes).

    All chunks start at ``start_ns`` and the share is 1, so a pseudo-channel's trajectory
    depends only on its state and the counts it gets from each chunk. Chunk ``i`` starts at
    ``addr + i·chunk``; its counts depend on that address mod ``period_bytes``, which repeats
    every ``π = period / gcd(chunk, period)`` chunks. Pseudo-channels with equal state and
    equal counts in the π chunk patterns (and the shorter last chunk) form a class: one member
    is simulated with exactly the per-channel update of :func:`dram_transfer`, the others
    copy its final state. The aggregate server is played chunk by chunk. (Used when π is
    small, see :meth:`FastDram.stream`.)"""
    p_n = ip[I_P]
    if total_bytes <= 0:
        return start_ns
    w = ip[I_PERIOD]
    n = (total_bytes + chunk_bytes - 1) // chunk_bytes
    last = total_bytes - (n - 1) * chunk_bytes
    g = chunk_bytes
    b = w
    while b:
        g, b = b, g % b
    period = w // g
    # counts of the period's full chunks (k < period) and of the last chunk (k = period)
    nk = period + 1
    cnt = np.zeros((3, nk, p_n), dtype=COUNT_DTYPE)
    tot = np.zeros(nk, dtype=np.int64)
    for k in range(nk):
        a = addr + (k if k < period else n - 1) * chunk_bytes
        size = chunk_bytes if k < period else last
        h = pattern_entry(a, np.int64(1), size, size, ip, pat)
        tot[k] = pat[C_META][h, 1]
        recs = pat[C_RECS][h]
        for t in range(pat[C_META][h, 0]):
            p = recs[t, R_PC]
            cnt[0, k, p] = recs[t, R_BURSTS]
            cnt[1, k, p] = recs[t, R_ACTS]
            cnt[2, k, p] = recs[t, R_BMAX]
    # classes: equal state and counts (compared with each class's first member)
    bus_free = st[S_BUS]
    last_dir = st[S_DIR]
    act_ring = st[S_ACT]
    busy = st[S_BUSY]
    rep = np.empty(p_n, dtype=np.int64)        # each channel's class representative
    firsts = np.empty(p_n, dtype=np.int64)     # the representatives so far
    nfirst = 0
    for pa in range(p_n):
        rep[pa] = pa
        for c in range(nfirst):
            pb = firsts[c]
            same = (last_dir[pa] == last_dir[pb] and bus_free[pa] == bus_free[pb]
                    and busy[pa] == busy[pb])
            for q in range(4):
                same = same and act_ring[pa, q] == act_ring[pb, q]
            for k in range(nk):
                for c3 in range(3):
                    same = same and cnt[c3, k, pa] == cnt[c3, k, pb]
            if same:
                rep[pa] = pb
                break
        if rep[pa] == pa:
            firsts[nfirst] = pa
            nfirst += 1
    # per chunk pattern, the records of the representatives it touches
    reps = np.empty((nk, p_n, 4), dtype=COUNT_DTYPE)
    nrep = np.zeros(nk, dtype=np.int64)
    for k in range(nk):
        for p in range(p_n):
            if rep[p] == p and cnt[0, k, p] > 0:
                reps[k, nrep[k], R_PC] = p
                reps[k, nrep[k], R_BURSTS] = cnt[0, k, p]
                reps[k, nrep[k], R_ACTS] = cnt[1, k, p]
                reps[k, nrep[k], R_BMAX] = cnt[2, k, p]
                nrep[k] += 1
    # play the chunks on the representatives (and the aggregate server), as dram_transfer does
    share = 1.0
    no_spans = np.zeros(0)
    finish = start_ns
    agg_end = start_ns
    for c in range(n):
        k = c % period if c < n - 1 else period
        agg_end = _aggregate(start_ns, tot[k], share, ip, fp, st[S_AGG])
        finish = _play(start_ns, is_write, share, fp, st, reps[k], nrep[k], no_spans, no_spans)
    # the other members copy their representative's state
    for p in range(p_n):
        r = rep[p]
        if r != p:
            bus_free[p] = bus_free[r]
            last_dir[p] = last_dir[r]
            busy[p] = busy[r]
            for q in range(4):
                act_ring[p, q] = act_ring[r, q]
    return max(finish, agg_end)


class FastDram:
    """The analytic model with its state, for tests, benchmarks and vector-op traffic.

    ``fabric_ns_per_byte`` > 0 adds the fabric server (a NoC/D2D cap of
    ``1 / fabric_ns_per_byte`` bytes per ns, :mod:`.fabric`)."""

    def __init__(self, dram, fabric_ns_per_byte: float = 0.0):
        self.timing = DramTiming.from_dram(dram)
        # the kernel's own Python (the same NumPy arrays): a process that times vector ops
        # needs no compiled run_state of its own (its cache load, ~4 ms, issue 27)
        self.state = _RUN_STATE(self.timing.pseudo_channels)
        # the shared pattern cache of this DRAM geometry (exact counts: sharing changes no
        # result; a fresh one per model cost a quarter of a millisecond per vector op)
        self.patterns = pattern_cache(self.timing)
        self._ip = self.timing.iparams()
        self._fp = self.timing.fparams()
        self._fp[F_FABRIC] = fabric_ns_per_byte
        p = self.timing.pseudo_channels
        self._s = np.zeros(p)
        self._e = np.zeros(p)

    def stream(self, start_ns: float, addr: int, total_bytes: int, chunk_bytes: int,
               write: bool = False) -> float:
        """:func:`stream_transfers` on this model's state: the finish time (ns) of the last of
        the back-to-back chunks (``start_ns`` when ``total_bytes`` is 0)."""
        args = (float(start_ns), int(addr), int(total_bytes), int(chunk_bytes), int(write),
                self._ip, self._fp, self.state, self.patterns)
        period = self.timing.period_bytes // math.gcd(int(chunk_bytes), self.timing.period_bytes)
        if period <= MAX_STREAM_PERIOD:
            return float(stream_classes(*args))
        no_spans = np.zeros(0)
        return float(stream_transfers(*args, no_spans, no_spans))

    def transfer(self, start_ns: float, addr: int, rows: int, row_bytes: int, stride: int,
                 write: bool = False, share: float = 1.0) -> float:
        """Finish time (ns) of a 2-D transfer of ``rows`` × ``row_bytes`` at ``stride``."""
        return float(dram_transfer(float(start_ns), int(addr), int(rows), int(row_bytes),
                                   int(stride), int(write), float(share), self._ip, self._fp,
                                   self.state, self.patterns, self._s, self._e))


def refresh_lower_bound_ns(work_ns, t_refi_ns: float, blackout_ns: float):
    """Least time to do ``work_ns`` of data-bus work from t = 0 around the refresh windows
    ``[k·tREFI, k·tREFI + blackout)`` (k ≥ 1), counting only windows that end before the work
    does: ``T = work + k·blackout`` with the largest ``k`` such that ``k·tREFI + blackout ≤ T``,
    i.e. ``k = floor((work − blackout) / (tREFI − blackout))``. Works on NumPy arrays too."""
    w = np.asarray(work_ns, dtype=np.float64)
    k = np.maximum(0.0, np.floor((w - blackout_ns) / (t_refi_ns - blackout_ns)))
    return w + k * blackout_ns


def stream_bytes_per_ns(dram, nbytes: int, *, write: bool = False, chunk_bytes: int = 1 << 20) -> float:
    """Achieved bandwidth (bytes/ns) of a long sequential stream issued in ``chunk_bytes`` pieces."""
    m = FastDram(dram)
    t = 0.0
    done = 0.0
    addr = 0
    while addr < nbytes:
        n = min(chunk_bytes, nbytes - addr)
        done = m.transfer(t, addr, 1, n, n, write)
        addr += n
    return nbytes / done


# ---- the chip's DRAM as the engine sees it ------------------------------------------------
# Chip-only derivations are memoised on the chip (frozen; its hash is computed once per object
# and covers the fields __eq__ compares, so equal chips share an entry and a changed chip is
# another key): the engine and the mapper ask for them thousands of times per op.
@lru_cache(maxsize=256)
def dram_timing(chip) -> DramTiming:
    """The DRAM model's parameters for ``chip`` (:func:`engine_dram`), shared."""
    return _dram_timing(engine_dram(chip))


def engine_dram(chip):
    """The DRAM description the engine's memory model is built from: the chip's, or for an
    all-SRAM chip (no ``[dram]``) :data:`NO_DRAM`, a placeholder geometry no transfer ever
    reaches (every operand of such a chip is resident; :func:`diptych.sim.limits.check_sources`
    refuses anything else)."""
    return chip.dram if chip.dram is not None else NO_DRAM


@lru_cache(maxsize=256)
def pin_bytes_per_s(chip) -> float:
    """The DRAM pin bandwidth the mapper's bounds use, bytes/s (the placeholder's for an
    all-SRAM chip: its bounds then only see resident operands, which move no DRAM byte)."""
    return engine_dram(chip).peak_bytes_per_s


def _placeholder_dram():
    # one HBM3-like stack [placeholder, never transferred to: see engine_dram]
    return Dram(kind="hbm3", stacks=1, channels_per_stack=16, pseudo_channels_per_channel=2,
                bits_per_pseudo_channel=32, gbps_per_pin=6.4, banks_per_pseudo_channel=16,
                page_bytes=1024, burst_bytes=64, interleave_bytes=256, t_rcd_ns=14.0,
                t_cl_ns=14.0, t_rp_ns=14.0, t_ras_ns=33.0, t_rfc_ns=350.0, t_refi_ns=3900.0,
                t_wtr_ns=2.5, t_rtw_ns=2.0, capacity_gib=1.0)


NO_DRAM = _placeholder_dram()


@lru_cache(maxsize=64)
def _dram_timing(dram) -> DramTiming:
    return DramTiming.from_dram(dram)


@lru_cache(maxsize=64)
def timing_vectors(dram) -> tuple[np.ndarray, np.ndarray]:
    """The DRAM model's (integer, float) parameter vectors of one ``[dram]`` table, shared: the
    kernels only read them (:func:`diptych.sim.fabric.dram_vectors` adds a chip's fabric cap)."""
    t = _dram_timing(dram)
    return t.iparams(), t.fparams()
