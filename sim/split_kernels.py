"""The mapper's split enumeration, compiled (:func:`diptych.sim.mapper.split_rows`).

One kernel, :func:`chip_split_rows`, lists the splits :func:`diptych.sim.mapper.splits`
offers for one GEMM shape as rows of integers (the :class:`~diptych.sim.mapper.Split`
fields in :data:`FIELDS` order): the chip's own splits (:func:`~diptych.sim.mapper.own_splits`
written over arrays, with open-addressing tables for its dictionaries), then its sub-chips'
not already among them, less the dominated packings. It follows the Python reference
step for step: the same splits in the same order (tests/sim/test_split_kernels.py compares
them on random shapes and the preset chips). Only integer arithmetic and the sub-tile fit
(one IEEE division each way, as in Python) are involved, so the rows are exact.
"""

from __future__ import annotations

import os as _os

import numpy as np

from .jit import invalidate_stale_cache, jit

invalidate_stale_cache(__file__, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)),
                                               "jit.py"))

#: The columns of a split row: :class:`diptych.sim.mapper.Split`'s fields in order.
FIELDS = ("pb", "pm", "pn", "batch", "m", "n", "active", "arrays_per_core", "waves",
          "tail_active", "qm", "qn", "a_dup", "b_dup", "pk", "k")
(F_PB, F_PM, F_PN, F_BATCH, F_M, F_N, F_ACTIVE, F_APC, F_WAVES, F_TAIL, F_QM, F_QN, F_ADUP,
 F_BDUP, F_PK, F_K, N_F) = range(17)

@jit
def _cd(a, b):
    return -(-a // b)


@jit
def _pow2(top, out):
    """1, 2, 4, ... up to ``top`` into ``out``; returns the count (``_pow2`` of the mapper)."""
    t = max(1, top)
    c = 0
    v = 1
    while v <= t:
        out[c] = v
        c += 1
        v *= 2
    return c


@jit
def _ways(top, out):
    """1, 2, 4, ... up to ``top``, and ``top`` itself, ascending (the mapper's ``_ways``)."""
    t = max(1, top)
    c = _pow2(t, out)
    if out[c - 1] != t:
        out[c] = t
        c += 1
    return c


@jit
def _lookup(slots, keys, at):
    """The index ``i`` whose row ``keys[i]`` equals ``keys[at]`` in the open-addressing table
    ``slots`` (``-1``: free; at most half full), or ``-1 - slot``: the free slot to store
    ``at`` in. The hash is 48-bit FNV-style on non-negative entries (the same in Python with
    ``NUMBA_DISABLE_JIT=1``: the product's low bits do not depend on the overflow)."""
    width = keys.shape[1]
    mask = len(slots) - 1
    h = 0xCBF29CE484222
    for c in range(width):
        h = ((h ^ int(keys[at, c])) * 1099511628211) & 0xFFFFFFFFFFFF
        h ^= h >> 29
    s = h & mask
    while True:
        i = slots[s]
        if i < 0:
            return -1 - s
        same = True
        for c in range(width):
            if keys[i, c] != keys[at, c]:
                same = False
                break
        if same:
            return i
        s = (s + 1) & mask


@jit
def _table(n):
    """An empty table for ``n`` keys (at most half full)."""
    size = 16
    while size < 2 * n:
        size *= 2
    return np.full(size, -1, dtype=np.int64)


@jit
def _tile_split(row, cores, per_core, batch, m, n, pb, pm, pn, qm, qn, units):
    """The mapper's ``_tile_split`` written into ``row`` (called where it is not None)."""
    bs, mu, nu = _cd(batch, pb), max(1, _cd(m, pm)), _cd(n, pn)
    ms, ns = _cd(mu, qm), _cd(nu, qn)
    pb, pm, pn = _cd(batch, bs), _cd(m, mu), _cd(n, nu)
    tiles = pb * pm * pn
    waves = _cd(tiles, units)
    busy = min(tiles, units)
    tail = tiles - (waves - 1) * units
    q = qm * qn
    if q > 1:
        active, apc = busy * q, q
    else:
        active = busy
        apc = min(per_core, _cd(active, cores))
    if waves == 1:
        a_dup, b_dup = pn * qn, pm * qm
    else:
        a_dup, b_dup = min(pn, units) * qn, max(1, min(pm, units // pn)) * qm
    row[F_PB], row[F_PM], row[F_PN], row[F_BATCH], row[F_M], row[F_N] = \
        pb, pm, pn, bs * waves, ms, ns
    row[F_ACTIVE], row[F_APC], row[F_WAVES] = active, apc, waves
    row[F_TAIL] = tail * q if (waves > 1 and tail < units) else 0
    row[F_QM], row[F_QN], row[F_ADUP], row[F_BDUP], row[F_PK], row[F_K] = \
        qm, qn, a_dup, b_dup, 1, 0


@jit
def _grids(cores, per_core, batch, m, n, max_waves, offers):
    """The tile grids ``own_split_rows`` considers, as rows (pb, pm, pn, qm, qn, units) in
    the mapper's order: with ``offers`` 0 its part 1 (one wave, one tile per array), else
    with 1 the grids it offers (2: one wave over the cores, each core's arrays sharing its tile, for
    every factorisation ``qm × qn`` of the core's arrays; 3: waves, the mapper's
    ``wave_grids``). The loops run twice: counting (the array is then allocated), filling."""
    arrays = cores * per_core
    w0 = np.empty(64, dtype=np.int64)
    w1 = np.empty(64, dtype=np.int64)
    w2 = np.empty(64, dtype=np.int64)
    ng = 0
    grids = np.empty((0, 6), dtype=np.int64)
    for fill in range(2):
        if fill:
            grids = np.empty((ng + 1, 6), dtype=np.int64)
            ng = 0
        for qm in range(1, per_core + 1):     # 1: one wave over the arrays (offers False)
            if offers and (per_core == 1 or per_core % qm) or not offers and qm > 1:
                continue
            qn, units = (per_core // qm, cores) if offers else (1, arrays)
            n0 = _ways(min(batch, units), w0)
            for i0 in range(n0):
                rest = units // w0[i0]
                nw1 = _ways(rest, w1)
                for i1 in range(nw1):
                    nw2 = _ways(min(rest // w1[i1], m), w2)
                    if fill:
                        for i2 in range(nw2):
                            g = grids[ng + i2]
                            g[0], g[1], g[2] = w0[i0], w2[i2], w1[i1]
                            g[3], g[4], g[5] = qm, qn, units
                    ng += nw2
        for sub in range(per_core + 1 if offers else 0):   # 0: over the arrays, else cores
            if sub == 0:
                qm, qn, units = 1, 1, arrays
            elif per_core == 1 or per_core % sub:
                continue
            else:
                qm, qn, units = sub, per_core // sub, cores
            if units & (units - 1) == 0:
                continue
            # the mapper's wave_grids(batch, ceil(m / qm), ceil(n / qn), units)
            lim = max_waves * units
            n0 = _pow2(batch, w0)
            nw1 = _pow2(_cd(m, qm), w1)
            nw2 = _pow2(_cd(n, qn), w2)
            for i0 in range(n0):
                if w0[i0] > lim:
                    break
                for i1 in range(nw1):
                    bm = w0[i0] * w1[i1]
                    if bm > lim:
                        break
                    for i2 in range(nw2):
                        t = bm * w2[i2]
                        if t > lim:
                            break
                        if t > units and t % units:
                            if fill:
                                g = grids[ng]
                                g[0], g[1], g[2] = w0[i0], w1[i1], w2[i2]
                                g[3], g[4], g[5] = qm, qn, units
                            ng += 1
    return grids[:ng]


@jit
def own_split_rows(cores, per_core, R, C, batch, m, n, k, min_split_k, max_waves):
    """:func:`diptych.sim.mapper.own_splits` as rows (:data:`FIELDS`), the same order;
    ``min_split_k``, ``max_waves``: the mapper's ``MIN_SPLIT_K`` and ``MAX_WAVES``."""
    arrays = cores * per_core
    # 1. one wave, one tile per array, keyed by the per-array share (first kept)
    # (the flags as int64, not literals: one compiled signature of _grids)
    one = _grids(cores, per_core, batch, m, n, max_waves, np.int64(0))
    grids = _grids(cores, per_core, batch, m, n, max_waves, np.int64(1))
    n1, ng = len(one), len(grids)
    out = np.empty((2 * n1 + ng + 1, N_F), dtype=np.int64)
    keys = np.empty((n1 + 1, 3), dtype=np.int64)
    slots = _table(n1 + 1)
    no = np.int64(0)           # (an int64 from the start: one signature of _lookup)
    for i in range(n1):
        pb, pm, pn = one[i, 0], one[i, 1], one[i, 2]
        keys[no, 0], keys[no, 1], keys[no, 2] = _cd(batch, pb), max(1, _cd(m, pm)), _cd(n, pn)
        j = _lookup(slots, keys, no)
        if j < 0:
            slots[-1 - j] = no
            _tile_split(out[no], cores, per_core, batch, m, n, pb, pm, pn, one[i, 3],
                        one[i, 4], one[i, 5])     # (qm = qn = 1, units = arrays)
            no += 1
    n_one = no
    # 2, 3: the offers (the mapper's _offer): the best-fitting grid kept per key
    fits = np.empty(ng, dtype=np.float64)
    kept = np.empty(ng, dtype=np.int64)     # the grid kept for each key, in first-met order
    rank = np.empty(ng, dtype=np.int64)     # (of a key's first grid: the key's position)
    # an offer's key: the split's pb, pm, pn, pk, units busy, whether a core's arrays share
    # its tile
    gkeys = np.empty((ng, 6), dtype=np.int64)
    bslots = _table(ng)
    nb = 0
    for i in range(ng):
        pb, pm, pn, qm, qn, units = grids[i, 0], grids[i, 1], grids[i, 2], grids[i, 3], \
            grids[i, 4], grids[i, 5]
        mu, nu = max(1, _cd(m, pm)), _cd(n, pn)
        ms, ns = _cd(mu, qm), _cd(nu, qn)
        if _cd(mu, ms) < qm or _cd(nu, ns) < qn:
            continue
        bs = _cd(batch, pb)
        g = gkeys[i]
        g[0], g[1], g[2], g[3] = _cd(batch, bs), _cd(m, mu), _cd(n, nu), 1
        g[4] = min(g[0] * g[1] * g[2], units)
        g[5] = 1 if qm * qn > 1 else 0
        a, b = ms / R, ns / C
        fit = min(a, b) / max(a, b)
        j = _lookup(bslots, gkeys, i)
        if j < 0:
            bslots[-1 - j] = i
            rank[i] = nb
            fits[nb] = fit
            kept[nb] = i
            nb += 1
        elif fit > fits[rank[j]]:
            fits[rank[j]] = fit
            kept[rank[j]] = i
    # 4. split-K over the idle arrays of the one-wave splits of 1
    if k:
        for i in range(n_one):
            tiles = out[i, F_PB] * out[i, F_PM] * out[i, F_PN] * out[i, F_PK]
            pk = 1
            while tiles * pk * 2 <= arrays and _cd(k, pk * 2) >= min_split_k:
                pk *= 2
            if pk > 1:
                ks = _cd(k, pk)
                act = tiles * _cd(k, ks)
                for c in range(N_F):
                    out[no, c] = out[i, c]
                out[no, F_PK], out[no, F_K], out[no, F_ACTIVE] = _cd(k, ks), ks, act
                out[no, F_APC] = min(per_core, _cd(act, cores))
                no += 1
    # 5. the kept offers: a one-wave core split takes the place of the split of 1 of the
    # same per-array work it dominates; a wave split is appended
    for r in range(nb):
        g = grids[kept[r]]
        row = out[no]
        _tile_split(row, cores, per_core, batch, m, n, g[0], g[1], g[2], g[3], g[4], g[5])
        if row[F_WAVES] > 1:
            no += 1
            continue
        keys[n_one, 0], keys[n_one, 1], keys[n_one, 2] = row[F_BATCH], row[F_M], row[F_N]
        j = _lookup(slots, keys, n_one)
        if j >= 0 and out[j, F_QM] * out[j, F_QN] == 1 and \
                out[j, F_ACTIVE] == row[F_ACTIVE] and out[j, F_APC] == row[F_APC]:
            for c in range(N_F):
                out[j, c] = row[c]
    return out[:no]


@jit
def chip_split_rows(cores, per_core, R, C, engines, batch, m, n, k, min_split_k, max_waves):
    """:func:`diptych.sim.mapper.splits` as rows (:data:`FIELDS`), the same order, and
    whether each is one of the chip's own (:func:`own_split_rows` of ``cores``): the own
    splits of the chip and of its halves (``cores / 2^i`` while whole), each first met kept,
    less the packings another split of the same fields dominates (the mapper's
    ``packing_dominates`` on cores of ``engines`` DMA engines)."""
    top = own_split_rows(cores, per_core, R, C, batch, m, n, k, min_split_k, max_waves)
    parts = [top]
    c = cores
    while c % 2 == 0:
        c //= 2
        parts.append(own_split_rows(c, per_core, R, C, batch, m, n, k, min_split_k,
                                    max_waves))
    total = np.int64(0)
    for part in parts:
        total += len(part)
    every = np.empty((total, N_F), dtype=np.int64)
    at = 0
    for part in parts:
        for i in range(len(part)):
            for f in range(N_F):
                every[at, f] = part[i, f]
            at += 1
    # each split first met kept (the chip's own first), grouped by every field but the
    # packing (``gk``: the others, in order)
    gk = np.empty((total, N_F - 1), dtype=np.int64)
    mine = np.empty(total, dtype=np.bool_)
    slots = _table(total)
    gslots = _table(total)
    first = np.empty(total, dtype=np.int64)   # its group's first member
    nxt = np.full(total, -1, dtype=np.int64)  # the next member of its group
    last = np.empty(total, dtype=np.int64)    # (of a group's first: its last member)
    ne = np.int64(0)
    for i in range(total):
        if i > ne:
            for f in range(N_F):
                every[ne, f] = every[i, f]
        j = _lookup(slots, every, ne)
        if j >= 0:
            continue
        slots[-1 - j] = ne
        mine[ne] = i < len(top)
        for f in range(N_F - 1):
            gk[ne, f] = every[ne, f if f < F_APC else f + 1]
        j = _lookup(gslots, gk, ne)
        if j < 0:
            gslots[-1 - j] = ne
            first[ne], last[ne] = ne, ne
        else:
            first[ne] = j
            nxt[last[j]] = ne
            last[j] = ne
        ne += 1
    rows = np.empty((ne, N_F), dtype=np.int64)
    own = np.empty(ne, dtype=np.bool_)
    nk = 0
    for i in range(ne):
        pb_ = every[i, F_APC]
        eb = max(1, engines // pb_)
        o = first[i]
        dominated = False
        while o >= 0 and not dominated:
            pa = every[o, F_APC]
            if pa < pb_:
                ea = max(1, engines // pa)
                dominated = ea >= eb and pa * ea <= pb_ * eb
            o = nxt[o]
        if not dominated:
            for f in range(N_F):
                rows[nk, f] = every[i, f]
            own[nk] = mine[i]
            nk += 1
    return rows[:nk], own[:nk]
