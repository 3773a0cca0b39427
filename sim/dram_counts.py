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
   ``n = ⌊(hi − 1)/G⌋ − ⌊lo/G⌋ + 1`` are consecutive, so each is one activation and banks get
   ``⌊n/NB⌋`` or ``⌈n/NB⌉`` of them: ``bank_max = ⌈n/NB⌉``. O(min(P, chunks)) per transfer.
2. **Monotone rows.** With ``S ≥ L`` the rows are disjoint and increasing, and local addresses
   grow with the global address on each pseudo-channel, so every bank sees non-decreasing pages:
   its activations are its *distinct* pages. (``S < L``, overlapping rows, never produced by the
   engine, falls back to the reference.)
3. **Translation.** ``W = P · lcm(I, G)`` (``period_bytes``) maps chunks to the same
   pseudo-channel and shifts every local address by a whole number of pages
   (``σ_W = lcm(I, G)/G``): bursts and page *counts* per pseudo-channel are invariant, and bank
   ``b``'s count moves to bank ``b + σ_W mod NB``. Rows ``r`` and ``r + Π`` differ by ``Π·S``,
   a multiple of ``W`` when ``Π`` is a multiple of ``π = W / gcd(S, W)``. Two rows can share a
   page only if they are closer than ``ρ + 1`` rows, ``ρ = ⌈(W + L − 1)/S⌉ − 1`` (a page lies in
   a ``W``-window). With ``Π`` the least multiple of ``π`` above ``ρ`` and ``R = qΠ + s``, the
   pages that rows ``[n, n + Π)`` add to rows ``[0, n)`` depend only on rows ``[n − Π, n + Π)``,
   and shift by ``σ = Π·S/(P·G)`` pages per ``Π`` rows. Hence, per pseudo-channel and bank,
   with ``f(n)`` the count after ``n`` rows and ``g = f(2Π + s) − f(Π + s)``::

       f_b(R) = f_b(Π + s) + Σ_{j=0}^{q−2} g_{(b − j·σ) mod NB}

   (bursts: the same without the bank rotation). The sum over ``j`` runs along the cycles of
   ``b ↦ b − σ`` in ``Z_NB`` (``d = gcd(σ, NB)`` cycles of ``NB/d``): whole cycles add the
   cycle's total, the rest is a window of a prefix sum, O(NB) per pseudo-channel.

So a multi-row transfer enumerates ``2Π + s < 3Π`` rows instead of ``R`` (for the strides of
real operands, multiples of 2^9 and more, ``Π`` is tens of rows: a 4,096-row block on
train-2026 takes 64) and combines in O(touched pseudo-channels × NB). Strides with few factors
in common with ``W`` (e.g. odd multiples of 2 bytes) have ``Π ≥ R/3`` and are enumerated in
full: always exact, never slower than the reference.
"""

from __future__ import annotations

import os as _os

from .jit import invalidate_stale_cache, jit

invalidate_stale_cache(__file__, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "jit.py"))

# Layout of the integer parameter vector (also dram.iparams()).
I_P, I_INTERLEAVE, I_PAGE, I_BURST, I_BANKS, I_PERIOD = range(6)


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
    for r in range(rows):
        a = addr + r * stride
        end = a + row_bytes
        c = a // il
        off = a - c * il
        pc = c % p_n
        q = c // p_n          # chunk index inside the pseudo-channel
        gq = -1               # page of the current q when a chunk lies inside one page
        bank = 0
        row = 0
        while a < end:
            take = min(il - off, end - a)
            lo = q * il + off
            hi = lo + take
            if take == il and il <= page:
                # a whole chunk inside one page: its page is shared by the whole sweep
                bursts[pc] += full_bursts
                if gq != q:
                    gq = q
                    g = lo // page
                    bank = g % banks
                    row = g // banks
                # (inlined _touch)
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
            else:
                bursts[pc] += (hi + burst - 1) // burst - lo // burst
                g = lo // page
                g_last = (hi - 1) // page
                while g <= g_last:
                    bk = g % banks
                    rw = g // banks
                    if stamp[pc, bk] != tid:
                        stamp[pc, bk] = tid
                        open_row[pc, bk] = rw
                        bank_cnt[pc, bk] = 1
                        acts[pc] += 1
                        if bank_max[pc] < 1:
                            bank_max[pc] = 1
                    elif open_row[pc, bk] != rw:
                        open_row[pc, bk] = rw
                        bank_cnt[pc, bk] += 1
                        acts[pc] += 1
                        if bank_cnt[pc, bk] > bank_max[pc]:
                            bank_max[pc] = bank_cnt[pc, bk]
                    g += 1
            a += take
            off = 0
            pc += 1
            if pc == p_n:
                pc = 0
                q += 1


@jit
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


@jit
def fold_period(rows, row_bytes, stride, ip):
    """(Π, q, s) of fact 3: rows per translation step, whole steps and leftover rows."""
    w = ip[I_PERIOD]
    pi = w // _gcd(stride, w)
    rho = (w + row_bytes - 1 + stride - 1) // stride - 1
    big_pi = ((rho + pi) // pi) * pi                 # least multiple of pi above rho
    return big_pi, rows // big_pi, rows % big_pi


@jit
def count_transfer(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
                   acts, bank_max, base, aux):
    """The fast path: the same numbers as :func:`count_pattern` (module docstring).

    ``base`` (P × NB) and ``aux`` (≥ P + 2·NB + 1) are scratch; ``open_row``, ``stamp`` and
    ``bank_cnt`` are the reference's state (used for the enumerated rows)."""
    if rows <= 0 or row_bytes <= 0:
        return
    if rows == 1:
        count_row(addr, row_bytes, ip, bursts, acts, bank_max)
        return
    if stride < row_bytes:
        count_pattern(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
                      acts, bank_max)
        return
    big_pi, q, s = fold_period(rows, row_bytes, stride, ip)
    if q < 3:
        count_pattern(addr, rows, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
                      acts, bank_max)
        return
    p_n = ip[I_P]
    banks = ip[I_BANKS]
    # rows [0, Π + s): f(Π + s), kept in base (banks) and aux[:P] (bursts)
    count_pattern(addr, big_pi + s, row_bytes, stride, ip, open_row, stamp, bank_cnt, tid, bursts,
                  acts, bank_max)
    for p in range(p_n):
        aux[p] = bursts[p]
        if bursts[p] > 0:
            for b in range(banks):
                base[p, b] = bank_cnt[p, b] if stamp[p, b] == tid else 0
    # rows [Π + s, 2Π + s): f(2Π + s) in bank_cnt and bursts
    count_pattern(addr + (big_pi + s) * stride, big_pi, row_bytes, stride, ip, open_row, stamp,
                  bank_cnt, tid, bursts, acts, bank_max)
    n = q - 1                                        # translated increments to add
    sigma = (big_pi * stride) // (p_n * ip[I_PAGE]) % banks
    d = banks if sigma == 0 else _gcd(sigma, banks)  # cycles of b -> b - sigma in Z_NB
    lam = banks // d                                 # ... each this long
    whole = n // lam
    rem = n % lam
    pre = aux[p_n:]
    for p in range(p_n):
        if bursts[p] == 0:
            continue
        b1 = aux[p]
        bursts[p] = b1 + n * (bursts[p] - b1)
        total = 0
        best = 0
        for c in range(d):
            # the cycle c, c - sigma, c - 2 sigma, ...: prefix sums of g over two turns
            pre[0] = 0
            for i in range(2 * lam):
                b = (c - (i % lam) * sigma) % banks
                g = (bank_cnt[p, b] if stamp[p, b] == tid else 0) - (base[p, b] if b1 > 0 else 0)
                pre[i + 1] = pre[i] + g
            cyc = pre[lam]
            for i in range(lam):
                b = (c - i * sigma) % banks
                f = (base[p, b] if b1 > 0 else 0) + whole * cyc + pre[i + rem] - pre[i]
                total += f
                if f > best:
                    best = f
        acts[p] = total
        bank_max[p] = best
