"""Per-pseudo-channel counts of one 2-D strided DRAM transfer: bursts, row activations and the
most activations of any one bank — by enumeration (the reference) and without it (the fast path).

The address mapping is the one of :mod:`diptych.sim.dram`: byte ``a`` is in interleave chunk
``c = a // I`` on pseudo-channel ``c % P`` at local address ``(c // P)·I + a % I``; local page
``g = local // G`` is row ``g // NB`` of bank ``g % NB``. A transfer is ``R`` rows of ``L`` bytes
at stride ``S``; rows start closed for every transfer.

:func:`count_pattern` (the reference) walks every interleave chunk and page of every row with a
per-bank open-row state: O(R · (L/I + pages)). :func:`count_transfer` gives the same numbers
(exactly; property-tested against it) from three facts:

1. **One row** ``[a, a + L)`` touches, on each pseudo-channel ``p``, one contiguous range of
   local addresses ``[lo_p, hi_p)``: its first chunk ``c_f`` is the first chunk ``≥ a // I``
   with ``c ≡ p (mod P)``, its last ``c_l`` the last ``≤ (a + L − 1) // I``; only ``c_f`` may
   start inside the chunk and only ``c_l`` end inside it. Chunk boundaries are burst-aligned
   (``I`` is a multiple of ``B``), so the bursts are ``⌈hi/B⌉ − ⌊lo/B⌋``; the pages
   ``n = ⌊(hi − 1)/G⌋ − ⌊lo/G⌋ + 1`` are consecutive, so each is one activation and banks
   get ``⌊n/NB⌋`` or ``⌈n/NB⌉`` of them: ``bank_max = ⌈n/NB⌉``. O(min(P, chunks)) per
   transfer.
2. **Monotone rows.** With ``S ≥ L`` the rows are disjoint and increasing, and local addresses
   grow with the global address on each pseudo-channel, so every bank sees non-decreasing pages:
   its activations are its *distinct* pages. (``S < L``, overlapping rows, never produced by the
   engine, falls back to the reference.)
3. **Translation and drift.** ``W = P · lcm(I, G)`` (``period_bytes``) maps chunks to the same
   pseudo-channel and shifts every local address by a whole number of pages
   (``σ_W = lcm(I, G)/G``): bursts and page *counts* per pseudo-channel are invariant, and
   bank ``b``'s pages move to bank ``b + σ_W mod NB``. Choose ``T`` rows (the near period) with
   ``T·S = m·W + ε``, ``|ε| ≤ W/2``. Row ``ρ + jT`` (sub-progression ``ρ < T``, step ``j``)
   starts at ``x_ρ + j·m·W + j·ε``: in the *reduced frame* (translations by ``W`` dropped) it
   is the row ``[y_j, y_j + L)``, ``y_j = x_ρ + j·ε``, drifting by ``ε`` per step, and its pages
   are the reduced ones shifted by ``j·m·σ_W``. So

   * a burst at reduced address ``β`` is touched by the steps with
     ``β − L + 1 ≤ y_j ≤ β + B − 1``: one contiguous range of ``j`` (two floor divisions);
     its pseudo-channel is the reduced one;
   * an interleave unit (``min(I, G)`` bytes: within one page) is touched by one contiguous
     range ``j1..j2``, and the pages it stands for are the arithmetic progression
     ``lp + m·σ_W·j``. Per pseudo-channel, merging these progressions (same step; by residue
     class, then start) gives the distinct pages (= activations, fact 2) and, with each
     progression's bank cycle ``b ↦ b + m·σ_W mod NB``, the pages per bank and their maximum.

   Every ``T`` is exact (tested with random ``T``); the cost is the bursts visited,
   ``≈ (|ε|·R + T·L)/B``, plus the merges. :func:`near_period` searches ``T ≤ 1024`` for the
   cheapest; ``ε = 0`` is an exact period (a 16 KiB stride on train-2026 repeats every 12 rows),
   small ``ε`` the odd strides of real shapes (K = 16385 → 32,770 bytes drifts by 12 bytes every
   6 rows: ~2,000 bursts visited instead of 16,000 row pieces walked). When no near period
   beats the reference walk (strides sharing few factors with ``W``), or rows overlap, the
   reference is used: the counts are exact whichever path runs.
"""

from __future__ import annotations

import os as _os

import numba
import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, overload

from .jit import JIT, cached_cfunc, invalidate_stale_cache, jit

_here = _os.path.dirname(_os.path.abspath(__file__))
invalidate_stale_cache(__file__, _os.path.join(_here, "jit.py"))

#: Integer type of the per-channel count outputs (bursts, activations, most on one bank) as
#: the pattern cache stores them: 2^31 bursts per channel is a 64 GiB transfer.
COUNT_DTYPE = np.int32

# Layout of the integer parameter vector (also dram.iparams()).
I_P, I_INTERLEAVE, I_PAGE, I_BURST, I_BANKS, I_PERIOD = range(6)


@jit(inline="always")
def _log2(x):
    """log2 of ``x`` when it is a power of two, else -1."""
    if x <= 0 or x & (x - 1):
        return -1
    n = 0
    while x > 1:
        x >>= 1
        n += 1
    return n


@jit(inline="always")
def _dv(x, d, sh):
    """``x // d`` for ``x`` ≥ 0, a shift when ``sh`` = log2(d) ≥ 0."""
    return x >> sh if sh >= 0 else x // d


@jit(inline="always")
def _md(x, d, sh):
    """``x % d`` for ``x`` ≥ 0, a mask when ``sh`` = log2(d) ≥ 0."""
    return x & (d - 1) if sh >= 0 else x % d


@jit(inline="always")
def _open_page(pc, bank, row, tid, open_row, stamp, bank_cnt, acts, bank_max):
    """The per-bank open-row rule: ``row`` of ``bank`` on pseudo-channel ``pc`` is touched;
    an activation unless it is the bank's open row in this transfer (``stamp == tid``), and
    ``bank_max`` the most any bank needed."""
    if stamp[pc, bank] != tid:
        stamp[pc, bank] = tid
        open_row[pc, bank] = row
        bank_cnt[pc, bank] = 1
        acts[pc] += 1
        if bank_max[pc] < 1:
            bank_max[pc] = 1
    elif open_row[pc, bank] != row:
        open_row[pc, bank] = row
        bank_cnt[pc, bank] += 1
        acts[pc] += 1
        if bank_cnt[pc, bank] > bank_max[pc]:
            bank_max[pc] = bank_cnt[pc, bank]


@jit
def count_pattern(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
                  acts, bank_max):
    """The reference: add one transfer's bursts and row activations per pseudo-channel into
    ``bursts``/``acts``; ``bank_max`` gets the most activations any single bank of the
    pseudo-channel needs. Walks every chunk and page of every row.

    Rows start closed for the transfer (``stamp`` != ``tid`` means closed); ``bank_cnt`` holds
    each bank's activations so far (valid where ``stamp == tid``)."""
    p_n = ip[I_P]
    il = ip[I_INTERLEAVE]
    page = ip[I_PAGE]
    burst = ip[I_BURST]
    banks = ip[I_BANKS]
    full_bursts = il // burst
    # each row's first chunk, offset, pseudo-channel and chunk index inside it, stepped from
    # the previous row's by the stride's (no division per row; a negative stride divides)
    c0 = addr // il
    off0 = addr - c0 * il
    pc0 = c0 % p_n
    q0 = c0 // p_n
    dc = stride // il
    doff = stride - dc * il
    dpc = dc % p_n
    dq = dc // p_n
    gq = -1               # the q whose page (bank, row) is held: whole chunks of one q share it
    bank = 0
    row = 0
    # (shifts and masks for the power-of-two sizes: local addresses are non-negative)
    page_sh = _log2(page)
    burst_sh = _log2(burst)
    banks_sh = _log2(banks)
    for r in range(rows):
        a = addr + r * stride
        end = a + row_bytes
        if stride >= 0:
            off = off0
            pc = pc0
            q = q0        # chunk index inside the pseudo-channel
            off0 += doff
            pc0 += dpc
            q0 += dq
            if off0 >= il:
                off0 -= il
                pc0 += 1
            if pc0 >= p_n:
                pc0 -= p_n
                q0 += 1
        else:
            c = a // il
            off = a - c * il
            pc = c % p_n
            q = c // p_n
        while a < end:
            take = min(il - off, end - a)
            lo = q * il + off
            hi = lo + take
            if take == il and il <= page:
                # a whole chunk inside one page: its page is shared by the whole sweep
                bursts[pc] += full_bursts
                if gq != q:
                    gq = q
                    g = _dv(lo, page, page_sh)
                    bank = _md(g, banks, banks_sh)
                    row = _dv(g, banks, banks_sh)
                _open_page(pc, bank, row, tid, open_row, stamp, bank_cnt, acts, bank_max)
            else:
                bursts[pc] += _dv(hi + burst - 1, burst, burst_sh) - _dv(lo, burst, burst_sh)
                g = _dv(lo, page, page_sh)
                g_last = _dv(hi - 1, page, page_sh)
                while g <= g_last:
                    _open_page(pc, _md(g, banks, banks_sh), _dv(g, banks, banks_sh), tid,
                               open_row, stamp, bank_cnt, acts, bank_max)
                    g += 1
            a += take
            off = 0
            pc += 1
            if pc == p_n:
                pc = 0
                q += 1


@jit
def count_walk(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
               acts, bank_max):
    """:func:`count_pattern`'s numbers (same arguments and state arrays) by the same walk over
    every piece (a row's part in one interleave chunk), faster when the rows do not overlap and
    increase (``stride >= row_bytes``, always in the engine): then every bank sees
    non-decreasing pages (fact 2 of the module docstring), so a pseudo-channel's pages are
    non-decreasing too, a page is a new activation exactly when it differs from the last page
    the transfer touched on that pseudo-channel, and each bank's activations are its distinct
    pages. Per piece that is one compare against the pseudo-channel's last page (kept in
    ``open_row[pc, 0]``, valid when ``stamp[pc, 0] == tid``; ``bank_cnt[pc, :]`` is zeroed at
    a pseudo-channel's first touch) instead of the reference's open-row lookup per bank.
    Other strides (overlapping or decreasing rows) take the reference's per-bank open-row
    rule on the same pieces. ``tests/sim/test_dram_counts.py`` compares it with
    :func:`count_pattern` on random geometries and strides. Outputs must be zero on entry."""
    p_n = ip[I_P]
    il = ip[I_INTERLEAVE]
    page = ip[I_PAGE]
    burst = ip[I_BURST]
    banks = ip[I_BANKS]
    mono = stride >= row_bytes
    page_sh = _log2(page)
    burst_sh = _log2(burst)
    banks_sh = _log2(banks)
    # each row's first chunk, offset, pseudo-channel and chunk index inside it, stepped from
    # the previous row's (as count_pattern; a negative stride divides)
    c0 = addr // il
    off0 = addr - c0 * il
    pc0 = c0 % p_n
    q0 = c0 // p_n
    dc = stride // il
    doff = stride - dc * il
    dpc = dc % p_n
    dq = dc // p_n
    for r in range(rows):
        if stride >= 0:
            off = off0
            pc = pc0
            q = q0
            off0 += doff
            pc0 += dpc
            q0 += dq
            if off0 >= il:
                off0 -= il
                pc0 += 1
            if pc0 >= p_n:
                pc0 -= p_n
                q0 += 1
        else:
            a = addr + r * stride
            c = a // il
            off = a - c * il
            pc = c % p_n
            q = c // p_n
        left = row_bytes
        while left > 0:
            take = min(il - off, left)
            lo = q * il + off
            hi = lo + take
            bursts[pc] += _dv(hi + burst - 1, burst, burst_sh) - _dv(lo, burst, burst_sh)
            g = _dv(lo, page, page_sh)
            g_last = _dv(hi - 1, page, page_sh)
            if mono:
                if stamp[pc, 0] != tid:      # first touch of this pseudo-channel
                    stamp[pc, 0] = tid
                    open_row[pc, 0] = -1
                    for bk in range(banks):
                        bank_cnt[pc, bk] = 0
                if g == open_row[pc, 0]:     # the page already open: no activation
                    g += 1
                if g <= g_last:
                    open_row[pc, 0] = g_last
                    acts[pc] += g_last - g + 1
                    while g <= g_last:
                        bk = _md(g, banks, banks_sh)
                        n = bank_cnt[pc, bk] + 1
                        bank_cnt[pc, bk] = n
                        if n > bank_max[pc]:
                            bank_max[pc] = n
                        g += 1
            else:
                while g <= g_last:
                    _open_page(pc, _md(g, banks, banks_sh), _dv(g, banks, banks_sh), tid,
                               open_row, stamp, bank_cnt, acts, bank_max)
                    g += 1
            left -= take
            off = 0
            pc += 1
            if pc == p_n:
                pc = 0
                q += 1


#: Pseudo-channels per mask word of :func:`count_rows` (32: masks stay non-negative in an
#: int64, in compiled code and plain Python alike).
MASK_BITS = 32
MASK_SH = 5


def _ctz(x):
    """Trailing zero bits of a mask ``x`` > 0 (plain Python with NUMBA_DISABLE_JIT)."""
    x = int(x)
    return (x & -x).bit_length() - 1


@overload(_ctz, jit_options=dict(JIT))
def _ctz_jit(x):
    return lambda x: trailing_zeros(x)


@jit(inline="always")
def _set_channels(msk, lo, hi):
    """Set the bits of pseudo-channels ``lo .. hi − 1`` in the mask words ``msk``."""
    w = lo >> MASK_SH
    last = (hi - 1) >> MASK_SH
    b = w << MASK_SH
    if w == last:          # (most ranges: a few channels in one word)
        msk[w] |= ((1 << (hi - lo)) - 1) << (lo - b)
        return
    msk[w] |= ((1 << (b + MASK_BITS - lo)) - 1) << (lo - b)
    for full in range(w + 1, last):
        msk[full] = (1 << MASK_BITS) - 1
    b = last << MASK_SH
    msk[last] |= (1 << (hi - b)) - 1


@jit(inline="always")
def _add_channels(diff, s, n, v, p_n):
    """Add ``v`` to the ``n`` < ``p_n`` pseudo-channels from ``s`` on (cyclic) in the
    difference array ``diff`` (a pseudo-channel's total is the prefix sum)."""
    e = s + n
    diff[s] += v
    if e < p_n:
        diff[e] -= v
    elif e > p_n:
        diff[0] += v
        diff[e - p_n] -= v


@jit
def _flush_page(g, msk, words, stamp, cnt, tid, p_n, banks, banks_sh, one, acts):
    """One page's touched pseudo-channels (the bits of ``msk``): one more distinct page on
    bank ``g mod banks`` of each (``cnt[bank·P + channel]``; a bank's counts are zeroed at its
    first page in this transfer, marked in ``stamp[0, bank]``), or with ``one`` (no bank
    sees two pages) one more activation of each (``acts``); ``msk`` is cleared. Called (not
    inlined: its three call sites in :func:`_count_rows` cost ~1 s of cold compile inlined)
    once a page, not once a row."""
    if one:
        for w in range(words):
            m = msk[w]
            while m != 0:
                acts[(w << MASK_SH) + _ctz(m)] += 1
                m &= m - 1
            msk[w] = 0
        return
    bk = _md(g, banks, banks_sh)
    base = bk * p_n
    if stamp[0, bk] != tid:
        stamp[0, bk] = tid
        for pc in range(base, base + p_n):
            cnt[pc] = 0
    for w in range(words):
        m = msk[w]
        while m != 0:
            cnt[base + (w << MASK_SH) + _ctz(m)] += 1
            m &= m - 1
        msk[w] = 0


@jit(inline="always")
def _page_span(addr, rows, row_bytes, stride, il, per_page):
    """Pages (of every pseudo-channel: ``per_page`` interleave chunks each, chunks inside
    pages) from the one of a transfer's first byte to the one of its last, less one."""
    return (addr + (rows - 1) * stride + row_bytes - 1) // il // per_page - addr // il // per_page


@jit
def count_rows(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
               acts, bank_max):
    """:func:`count_pattern`'s numbers (same arguments and state arrays) row by row instead of
    piece by piece, for increasing rows (``stride >= row_bytes``) when interleave chunks lie
    inside pages (``page % interleave == 0``) and there are at least two banks.

    Then chunk ``c``'s page is ``c // (P · page / interleave)`` on every pseudo-channel (the
    local address ``(c // P)·I + off`` is in page ``(c // P) // (G / I)``), so a row's part in
    one page touches a cyclic range of pseudo-channels, and (fact 2 of the module docstring)
    the transfer visits the pages in non-decreasing order: each pseudo-channel's activations
    are the pages in which it is touched. Per row: its bursts as a difference array over the
    pseudo-channels (the first and last pieces, and a range of whole chunks), its
    pseudo-channels as bits of the current page's mask; when the page changes, each set bit
    counts one page on that pseudo-channel's bank of the page. O(rows + activations +
    banks·P) instead of the walk's O(pieces). The state arrays are scratch (C-contiguous):
    ``open_row`` holds the difference array and the mask words, ``bank_cnt`` the counts per
    (bank, pseudo-channel), ``stamp[0, :]`` marks the banks touched.
    ``tests/sim/test_dram_counts.py`` compares it with :func:`count_pattern`. Outputs must be
    zero on entry."""
    _count_rows(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts, acts,
                bank_max, False)


@jit
def count_rows_one(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
                   acts, bank_max):
    """:func:`count_rows` for a transfer that spans fewer pages (of every pseudo-channel, from
    its first byte's to its last's: :func:`_page_span`) than there are banks: no bank sees two
    of its pages, so a pseudo-channel's activations are the pages it is touched in, at most
    one on any bank, and no per-bank counts are kept (no bank's row of ``P`` counts zeroed,
    no final pass over them: at 256 pseudo-channels, 2.8 µs a fill of sweep-1000's instead of
    the walk's 4.1; at 64 the counts per bank are as fast, so :func:`count_transfer` takes
    this only above :data:`ROWS_MAX_CHANNELS`). Outputs must be zero on entry."""
    _count_rows(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts, acts,
                bank_max, True)


@jit
def _count_rows(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts, acts,
                bank_max, one):
    """:func:`count_rows` (``one`` False) and :func:`count_rows_one` (True); the counting
    cfunc calls it with ``one`` a run-time flag, so it is compiled once there (with ``one`` a
    constant in two inlined copies it was ~5 % faster on tpu-v4's fills, but the cfunc's cold
    compile took 9.4 s instead of 5.0)."""
    p_n = ip[I_P]
    il = ip[I_INTERLEAVE]
    burst = ip[I_BURST]
    banks = ip[I_BANKS]
    per_page = p_n * (ip[I_PAGE] // il)     # chunks of one page (all pseudo-channels)
    fb = il // burst                         # bursts of a whole chunk
    il_sh = _log2(il)
    burst_sh = _log2(burst)
    banks_sh = _log2(banks)
    p_sh = _log2(p_n)
    pp_sh = _log2(per_page)
    words = (p_n + MASK_BITS - 1) >> MASK_SH
    scratch = open_row.reshape(p_n * banks)
    cnt = bank_cnt.reshape(p_n * banks)
    diff = scratch[:p_n]
    msk = scratch[p_n:p_n + words]
    diff[:] = 0
    msk[:] = 0
    every = 0                                # bursts added to every pseudo-channel
    gc = -1                                  # the current page (its channels in msk)
    a = addr
    for _ in range(rows):
        end = a + row_bytes
        c1 = _dv(a, il, il_sh)
        c2 = _dv(end - 1, il, il_sh)
        off = a - c1 * il
        p1 = _md(c1, p_n, p_sh)
        # without a branch on c1 == c2: chunks c1 .. c2 − 1 count whole (fb bursts), then
        # chunk c1 loses its bursts before ``off`` and chunk c2 gains those up to ``end``
        bursts[p1] -= _dv(off, burst, burst_sh)
        bursts[_md(c2, p_n, p_sh)] += _dv(end - c2 * il + burst - 1, burst, burst_sh)
        full = c2 - c1
        if full >= p_n:
            rounds = _dv(full, p_n, p_sh)
            every += rounds * fb
            full -= rounds * p_n
        _add_channels(diff, p1, full, fb, p_n)
        # the row's pseudo-channels, page by page, from its first page on
        g1 = _dv(c1, per_page, pp_sh)
        g2 = _dv(c2, per_page, pp_sh)
        if g1 != gc:
            if gc >= 0:
                _flush_page(gc, msk, words, stamp, cnt, tid, p_n, banks, banks_sh, one,
                            acts)
            gc = g1
        if g1 == g2 and c2 - c1 < p_n:     # (most rows: one page, fewer chunks than P)
            e = p1 + c2 - c1 + 1
            if e <= p_n:
                _set_channels(msk, p1, e)
            else:
                _set_channels(msk, p1, p_n)
                _set_channels(msk, 0, e - p_n)
            a += stride
            continue
        for g in range(g1, g2 + 1):
            if g != gc:
                if gc >= 0:
                    _flush_page(gc, msk, words, stamp, cnt, tid, p_n, banks, banks_sh, one,
                                acts)
                gc = g
            cs = max(c1, g * per_page)
            e = min(c2, g * per_page + per_page - 1) - cs + 1     # (chunks, for now)
            lo = 0 if e >= p_n else _md(cs, p_n, p_sh)
            e = p_n if e >= p_n else lo + e
            while True:              # the cyclic range lo .. e − 1: one or two ranges
                _set_channels(msk, lo, min(e, p_n))
                if e <= p_n:
                    break
                lo = 0
                e -= p_n
        a += stride
    _flush_page(gc, msk, words, stamp, cnt, tid, p_n, banks, banks_sh, one, acts)
    run = every
    for pc in range(p_n):
        run += diff[pc]
        bursts[pc] += run
    if one:
        for pc in range(p_n):
            if acts[pc] > 0:
                bank_max[pc] = 1
        return
    for bk in range(banks):
        if stamp[0, bk] == tid:
            base = bk * p_n
            for pc in range(p_n):
                v = cnt[base + pc]
                acts[pc] += v
                if v > bank_max[pc]:
                    bank_max[pc] = v


@jit(inline="always")
def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


@jit
def count_row(a, row_bytes, ip, bursts, acts, bank_max):
    """Fact 1 of the module docstring: one row ``[a, a + row_bytes)`` in O(min(P, chunks))."""
    p_n = ip[I_P]
    il = ip[I_INTERLEAVE]
    page = ip[I_PAGE]
    burst = ip[I_BURST]
    banks = ip[I_BANKS]
    end = a + row_bytes
    c1 = a // il
    c2 = (end - 1) // il
    n_pc = min(p_n, c2 - c1 + 1)
    for t in range(n_pc):
        cf = c1 + t                                  # first chunk on this pseudo-channel
        p = cf % p_n
        cl = cf + ((c2 - cf) // p_n) * p_n           # last chunk on it
        lo = (cf // p_n) * il + (a - c1 * il if cf == c1 else 0)
        hi = (cl // p_n) * il + (end - cl * il if cl == c2 else il)
        bursts[p] += (hi + burst - 1) // burst - lo // burst
        n = (hi - 1) // page - lo // page + 1
        acts[p] += n
        bm = (n + banks - 1) // banks
        if bm > bank_max[p]:
            bank_max[p] = bm


#: Near periods tried by :func:`near_period` (rows per step of the reduced frame).
MAX_NEAR_PERIOD = 1024

#: Costs relative to one burst of the drift walk (~10 ns), measured: a piece (chunk of a row)
#: of the reference walk, and a segment (sorting, merging, banks) of the drift walk.
PIECE_COST = 2.5
SEGMENT_COST = 10

#: :func:`count_rows` serves geometries of at most this many pseudo-channels (two mask words):
#: measured on the fill keys of bench_gemm.py (tpu-v4, 64) it takes 4.5 µs a fill where the
#: walk takes 6.2; on train-2026's (192) and infer-2026's (256) it is no faster (10.3 / 12.8
#: against 10.7 / 11.7 µs: a page's flush and the final pass grow with the channels). Above
#: it, a transfer spanning fewer pages than banks is counted by :func:`count_rows_one`, which
#: has neither.
ROWS_MAX_CHANNELS = 64

#: :func:`count_rows`' cost per row in :func:`near_period`'s units: the drift walk is taken
#: where its cost is below ``rows · ROW_COST`` (on bench_gemm.py's 148 k fill keys, 0 / 5 / 10
#: / 20 gave 5.3 / 5.2 / 6.1 / 11.4 µs a fill; the walk and drift as before, 7.4).
ROW_COST = 4


@jit(inline="always")
def _jrange(lo, hi, x0, eps, n):
    """The steps ``j`` in ``[0, n)`` with ``lo <= x0 + j·eps <= hi`` (first, last; empty if
    first > last)."""
    if eps > 0:
        j1 = -((x0 - lo) // eps)
        j2 = (hi - x0) // eps
    elif eps < 0:
        e = -eps
        j1 = -((hi - x0) // e)
        j2 = (x0 - lo) // e
    else:
        if lo <= x0 <= hi:
            return 0, n - 1
        return 1, 0
    return max(j1, 0), min(j2, n - 1)


@jit
def near_period(rows, row_bytes, stride, ip, limit=-1.0):
    """(T, ε, cost): the rows per step of the reduced frame (fact 3), ``T·S ≡ ε (mod W)``
    with ``|ε| ≤ W/2``, minimising the bursts the drift walk visits (``cost``). The search
    stops once the fixed part of the cost, ``T·(L + 2·unit)/B``, exceeds the best found, or
    reaches ``limit`` (when ≥ 0: the cost of counting otherwise, :func:`count_transfer`), past
    which no ``T`` is cheaper than that: the answer is the same whenever its cost is below
    ``limit``."""
    w = ip[I_PERIOD]
    unit = min(ip[I_INTERLEAVE], ip[I_PAGE])
    burst = ip[I_BURST]
    fixed = (row_bytes + 2 * unit) // burst + 1 + SEGMENT_COST * (row_bytes // unit + 2)
    s_mod = stride % w
    best_t = 1
    best_e = 0
    best = -1
    r = 0
    for t in range(1, min(rows, MAX_NEAR_PERIOD) + 1):
        if best >= 0 and (t * fixed > best or (limit >= 0.0 and t * fixed >= limit)):
            break
        r += s_mod
        if r >= w:
            r -= w
        e = r - w if 2 * r > w else r
        cost = abs(e) * (rows - t) * (unit + SEGMENT_COST * burst) // (burst * unit) + t * fixed
        if best < 0 or cost < best:
            best, best_t, best_e = cost, t, e
    return best_t, best_e, best


@jit(inline="always")
def _bank_cycle(step, banks):
    """Length of the cycle of ``b -> b + step`` in Z_banks."""
    sb = step % banks
    return 1 if sb == 0 else banks // _gcd(sb, banks)


@jit
def count_drift(addr, rows, row_bytes, stride, t_rows, eps, ip, bursts, acts, bank_max):
    """Fact 3 of the module docstring (requires ``stride >= row_bytes`` and units of
    ``min(I, G)`` bytes that are whole bursts); outputs must be zero on entry."""
    p_n = ip[I_P]
    il = ip[I_INTERLEAVE]
    page = ip[I_PAGE]
    burst = ip[I_BURST]
    banks = ip[I_BANKS]
    unit = min(il, page)
    w = ip[I_PERIOD]
    m = (t_rows * stride - eps) // w                 # W-translations per step
    step = m * (w // (p_n * page))                   # local pages per step
    # segments: (pseudo-channel, first local page, pages) of the units each sub-progression
    # touches; the units of one sub-progression's span, summed
    cap = 0
    for rho in range(t_rows):
        n = (rows - rho + t_rows - 1) // t_rows
        cap += (abs(eps) * (n - 1) + row_bytes) // unit + 2
    seg_pc = np.empty(cap, dtype=np.int64)
    seg_s = np.empty(cap, dtype=np.int64)
    seg_c = np.empty(cap, dtype=np.int64)
    ns = 0
    nb_unit = unit // burst
    for rho in range(t_rows):
        n = (rows - rho + t_rows - 1) // t_rows
        if n <= 0:
            continue
        x0 = addr + rho * stride                     # row rho; step j starts at x0 + j·eps
        y_lo = x0 + min(0, eps * (n - 1))
        y_hi = x0 + max(0, eps * (n - 1)) + row_bytes - 1
        for u in range(y_lo // unit, y_hi // unit + 1):
            a = u * unit
            j1, j2 = _jrange(a - row_bytes + 1, a + unit - 1, x0, eps, n)
            if j1 > j2:
                continue
            c = a // il
            pc = c % p_n
            lp = ((c // p_n) * il + a % il) // page
            if eps == 0:   # every step touches what row rho touches
                hi = min(a + unit, x0 + row_bytes)
                bursts[pc] += n * ((hi + burst - 1) // burst - max(a, x0) // burst)
            else:
                for b in range(nb_unit):
                    ab = a + b * burst
                    k1, k2 = _jrange(ab - row_bytes + 1, ab + burst - 1, x0, eps, n)
                    if k1 <= k2:
                        bursts[pc] += k2 - k1 + 1
            seg_pc[ns] = pc
            seg_s[ns] = lp + step * j1
            seg_c[ns] = j2 - j1 + 1 if step > 0 else 1
            ns += 1
    if ns == 0:
        return
    # distinct pages per pseudo-channel: merge the segments of each (channel, class mod step);
    # order them by channel (counting sort), then by (class, start) within a channel
    # (insertion sort: a channel has a few segments)
    smin = seg_s[0]
    for i in range(ns):
        smin = min(smin, seg_s[i])
    mod = step if step > 0 else 1
    key = np.empty(ns, dtype=np.int64)      # class mod step
    for i in range(ns):
        key[i] = (seg_s[i] - smin) % mod
    first = np.zeros(p_n + 1, dtype=np.int64)
    for i in range(ns):
        first[seg_pc[i] + 1] += 1
    for p in range(p_n):
        first[p + 1] += first[p]
    fill = first[:p_n].copy()
    order = np.empty(ns, dtype=np.int64)
    for i in range(ns):
        order[fill[seg_pc[i]]] = i
        fill[seg_pc[i]] += 1
    for p in range(p_n):
        for a in range(first[p] + 1, first[p + 1]):
            o = order[a]
            b = a - 1
            while b >= first[p] and (key[order[b]] > key[o] or (
                    key[order[b]] == key[o] and seg_s[order[b]] > seg_s[o])):
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = o
    lam = _bank_cycle(step, banks)
    merged_s = np.empty(ns, dtype=np.int64)
    merged_c = np.empty(ns, dtype=np.int64)
    cnt = np.zeros(banks, dtype=np.int64)
    i = 0
    while i < ns:
        pc = seg_pc[order[i]]
        nm = 0
        # merge this channel's segments (sorted by class, then start)
        cur_k = -1
        cur_s = 0
        cur_e = 0
        while i < ns and seg_pc[order[i]] == pc:
            o = order[i]
            k = key[o]
            s = seg_s[o]
            e = s + step * (seg_c[o] - 1)
            if k == cur_k and s <= cur_e + step:
                cur_e = max(cur_e, e)
            else:
                if cur_k >= 0:
                    merged_s[nm] = cur_s
                    merged_c[nm] = (cur_e - cur_s) // mod + 1
                    nm += 1
                cur_k, cur_s, cur_e = k, s, e
            i += 1
        merged_s[nm] = cur_s
        merged_c[nm] = (cur_e - cur_s) // mod + 1
        nm += 1
        total = 0
        for t in range(nm):
            total += merged_c[t]
        acts[pc] = total
        if nm == 1:
            bank_max[pc] = (merged_c[0] + lam - 1) // lam
            continue
        # several segments: count per bank (the pages of a segment cycle with period lam)
        for b in range(banks):
            cnt[b] = 0
        for t in range(nm):
            full = merged_c[t] // lam
            rem = merged_c[t] % lam
            for q in range(lam if full > 0 else rem):
                cnt[(merged_s[t] + q * step) % banks] += full + (1 if q < rem else 0)
        best = 0
        for b in range(banks):
            best = max(best, cnt[b])
        bank_max[pc] = best


@jit(inline="always")
def count_transfer(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
                   acts, bank_max):
    """The fast path: the same numbers as :func:`count_pattern` (module docstring); outputs
    must be zero on entry. ``open_row``, ``stamp`` and ``bank_cnt`` are the reference's state,
    used when it is cheaper (or needed: overlapping rows)."""
    if rows <= 0 or row_bytes <= 0:
        return
    if rows == 1:
        count_row(addr, row_bytes, ip, bursts, acts, bank_max)
        return
    if stride >= row_bytes:
        il = ip[I_INTERLEAVE]
        unit = min(il, ip[I_PAGE])
        by_rows = ip[I_PAGE] % il == 0 and ip[I_BANKS] >= 2
        one = by_rows and ip[I_P] > ROWS_MAX_CHANNELS
        if one:    # (fewer pages than banks: count_rows_one; else the walk)
            one = _page_span(addr, rows, row_bytes, stride, il,
                             ip[I_P] * (ip[I_PAGE] // il)) < ip[I_BANKS]
            by_rows = one
        if unit % ip[I_BURST] == 0:
            direct = (rows * ROW_COST if by_rows
                      else rows * (row_bytes // unit + 2) * PIECE_COST)
            t_rows, eps, cost = near_period(rows, row_bytes, stride, ip, direct)
            if cost < direct:
                count_drift(addr, rows, row_bytes, stride, t_rows, eps, ip, bursts, acts,
                            bank_max)
                return
        if by_rows:    # (count_rows or count_rows_one, by the run-time flag: one compiled body)
            _count_rows(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid,
                        bursts, acts, bank_max, one)
            return
    count_walk(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
               acts, bank_max)


# ---------------------------------------------------------------------------------------------
# The fast path as a C-callable function. Callers (the engine's DRAM model) call it through a
# function pointer kept in the pattern cache, so its code is compiled once instead of being
# linked into, and optimised again with, every kernel above it (which made the cold compile
# several times longer).

@intrinsic
def _i64p(typingctx, addr):
    sig = types.CPointer(types.int64)(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.int64)))
    return sig, codegen


@intrinsic
def _i32p(typingctx, addr):
    sig = types.CPointer(types.int32)(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.int32)))
    return sig, codegen


#: addr, rows, row_bytes, stride, then the addresses of ip (6), open_row, stamp, bank_cnt
#: (P × NB int64 each), the transfer id, the addresses of bursts, acts, bank_max (P int32 each)
COUNT_C_SIG = types.void(types.int64, types.int64, types.int64, types.int64, types.uint64,
                         types.uint64, types.uint64, types.uint64, types.int64, types.uint64,
                         types.uint64, types.uint64)


def _count_c(addr, rows, row_bytes, stride, ip_a, open_a, stamp_a, bank_a, tid, bursts_a,
             acts_a, bmax_a):
    ip = carray(_i64p(ip_a), (6,))
    p_n = ip[I_P]
    banks = ip[I_BANKS]
    count_transfer(addr, rows, row_bytes, stride, ip, carray(_i64p(open_a), (p_n, banks)),
                   carray(_i64p(stamp_a), (p_n, banks)), carray(_i64p(bank_a), (p_n, banks)),
                   tid, carray(_i32p(bursts_a), (p_n,)), carray(_i32p(acts_a), (p_n,)),
                   carray(_i32p(bmax_a), (p_n,)))


#: :func:`count_transfer` behind a C function pointer (see above); arrays by address.
#: None with NUMBA_DISABLE_JIT=1 (a cfunc cannot be built from plain Python; sim/dram.py then
#: calls :func:`count_transfer` directly). ``count_transfer`` is inlined into it: compiled on
#: its own it was a second full copy of the counting code for LLVM (~1.2 s of a 5.7 s cold
#: compile). Built at import, not on first use: compiled later in a process (after the
#: mapper's kernels) the same kernels cost ~2 s more CPU in the cold headline (measured,
#: cause not found; docs/limits.md "First run").
count_c = None if numba.config.DISABLE_JIT else cached_cfunc(COUNT_C_SIG, _count_c)


@intrinsic
def call_count(typingctx, fn, addr, rows, row_bytes, stride, ip_a, open_a, stamp_a, bank_a, tid,
               bursts_a, acts_a, bmax_a):
    """Call :data:`count_c` through its address ``fn`` (an int64 held in an array, so that
    compiled callers neither link its code nor carry a function object)."""
    sig = types.void(types.int64, *COUNT_C_SIG.args)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64)] * len(COUNT_C_SIG.args))
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()), args[1:])
        return context.get_dummy_value()
    return sig, codegen
