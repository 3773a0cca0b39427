"""Timing one GEMM: validate, split over arrays, map, run the engine, gather statistics."""

from __future__ import annotations

import heapq
import math
import operator
from functools import lru_cache

import numpy as np

from ..arch.dtypes import DTYPE_BYTES
from . import engine as E
from . import mapper as MP
from . import mapper_kernels as MK
from . import split_kernels as SK
from .array import array_rates
from .dram import dram_timing, pattern_cache, pin_bytes_per_s
from .fabric import dram_vectors, fabric
from ..workloads.ops import VectorOp
from .support import check_dataflows
from .regime import busiest_unit, memory_roof_bytes_per_s, regime
from .stats import OpStats


_SB_MODES = ("dram", "shared copies", "shared copies and re-reads")

# untraced runs share these (the engine writes nothing into empty traces)
_NO_TRACE_BLOCKS = np.zeros((0, E.N_TRACE))
_NO_TRACE_SPANS = np.zeros((0, 4))


def run_engine(chip, pb, blk, rates, split, memory: bool, trace_blocks: int = 0,
               trace_spans: int = 0, cutoff: int = 0, periods: int | None = None,
               best: int = 0, base=None, dram=None):
    """One engine run; returns (output vector, block trace, channel-span trace).

    ``cutoff`` > 0 lets the engine give up once it cannot beat that many cycles, and ``best``
    (the best cycles so far) once a bound shows it cannot (``periods``:
    :func:`mapper.period_cycles` of the blocking, if already known). ``base``: the group's
    :func:`mapper.engine_base` vectors, if already built; ``dram``: :func:`engine_dram_inputs`
    of ``chip``, if already looked up (a search asks once, not once per candidate)."""
    if base is None:
        base = MP.engine_base(chip, pb, rates, split, memory)
    ip, fp = MP.set_blocking(base[0].copy(), blk), base[1]
    if cutoff > 0:
        ip[E.P_CUTOFF] = cutoff
        ip[E.P_PERIODS] = MP.period_cycles(chip, pb, blk, rates) if periods is None else periods
        ip[E.P_TRAFFIC] = int(MP.traffic_bytes(pb, blk))
        ip[E.P_BEST] = best
    dip, dfp, pcache = engine_dram_inputs(chip) if dram is None else dram
    tb = np.zeros((trace_blocks, E.N_TRACE)) if trace_blocks else _NO_TRACE_BLOCKS
    tp = np.zeros((trace_spans, 4)) if trace_spans else _NO_TRACE_SPANS
    out = E.run_schedule(ip, fp, dip, dfp, pcache, tb, tp)
    return out, tb, tp


def engine_dram_inputs(chip):
    """The chip-only DRAM inputs of :func:`engine.run_schedule`: (integer vector, float
    vector, this thread's pattern cache of the chip's DRAM geometry). Entries of the pattern
    cache are exact counts, so holding it across a search changes no result."""
    dip, dfp = dram_vectors(chip)
    return dip, dfp, pattern_cache(dram_timing(chip))


def _groups(op, chip, rates, flows, m_total: int, batch: int) -> list[list]:
    """The mapper's (split, dataflow) groups of ``op``, each ``[floor, position, problem,
    split, peak bytes per cycle, extra cycles, dataflow, layout, own, bytes floor]``, in
    split order then ``flows`` order: the floor bounds every candidate of the group (its
    table is built only when the search reaches it); ``own``: a split of the chip's own
    (:func:`mapper.own_splits`), not only of a sub-chip's. The floor is the larger of the
    bytes-and-MACs floor (:func:`mapper.group_floor`, which does not depend on the dataflow,
    computed once per split without orienting the problem) and the fold count's
    (:func:`mapper.split_fold_floor`, per dataflow); the bytes floor alone is kept too
    (``plan`` leaves a sub-chip's split out by the budget when the search has passed its
    bytes floor with the budget spent). A group's problem (``None`` until then) is oriented
    when its table is built.

    The splits come from the compiled enumeration (:func:`mapper.split_rows`) and the floors
    are computed over all of them at once (:func:`mapper.split_floor_arrays`,
    :func:`mapper.split_fold_floor_array`): the same groups, bit for bit, as
    :func:`_groups_ref` (tests/sim/test_split_kernels.py), which this falls back to where
    a split's integer products are too large for float64 to hold exactly, and where
    :func:`mapper.splits` has been replaced (tests force the search's splits so)."""
    lazy = _lazy_groups(op, chip, rates, flows, m_total, batch)
    if lazy is None:
        return _groups_ref(op, chip, rates, flows, m_total, batch)
    return [lazy.group(i) for i in range(len(lazy.floors))]


class _LazyGroups:
    """:func:`_groups`' groups, each built when it is first asked for (:meth:`group`; a
    search opens ~10 % of them), from the numbers computed for all of them at once;
    ``floors`` holds every group's floor (its first field)."""

    __slots__ = ("floors", "_flows", "_ctx", "_sps", "_peak", "_extra", "_own", "_old")

    def __init__(self, floors, flows, ctx, sps, peak, extra, own, old):
        self.floors, self._flows, self._ctx, self._sps = floors, flows, ctx, sps
        self._peak, self._extra, self._own, self._old = peak, extra, own, old

    def group(self, i: int) -> list:
        """Group ``i`` (split-major, dataflow-minor), a new list."""
        s, d = divmod(i, len(self._flows))
        return [self.floors[i], i, None, self._sps[s], self._peak[s], self._extra[s],
                self._flows[d], self._ctx, self._own[s], self._old[s]]

    def pending(self):
        """(floors, group of position ``k``) in the search's order, ``sorted(groups,
        key=_FLOOR_KEY)``'s: by floor, ties in group order (a stable sort of the positions by
        floor; None when a floor is NaN, for which the two orders could differ). A group is
        built once, at its first request."""
        f = self.floors
        if any(x != x for x in f):
            return None
        order = sorted(range(len(f)), key=f.__getitem__)
        made: dict = {}

        def get(k: int) -> list:
            g = made.get(k)
            if g is None:
                g = made[k] = self.group(order[k])
            return g
        return [f[i] for i in order], get


def _lazy_groups(op, chip, rates, flows, m_total: int, batch: int):
    """The numbers of :func:`_groups` as a :class:`_LazyGroups`; None where :func:`_groups`
    takes the reference path."""
    if MP.splits is not _SPLITS:
        return None
    view = _as_oriented(op, m_total, batch)
    layout = MP.op_layout(view, m_total, chip.tensor_cores, chip)
    pin = pin_bytes_per_s(chip)
    # split-K writes partial tiles to DRAM and reduces them there: only for an op whose
    # result goes to DRAM (not on an all-SRAM chip, not a result kept on chip)
    partials_ok = chip.has_dram and getattr(op, "c_dest", "dram") == "dram"
    k = op.k if partials_ok else 0
    rows, own = MP.split_rows(chip, batch, m_total, op.n, k)
    floors = MP.split_floor_arrays(chip, layout, flows[0], rows, op.k, rates, pin)
    folds = [MP.split_fold_floor_array(chip, df, rows, op.k, rates) for df in flows]
    if floors is None or any(f is None for f in folds):
        return None
    peak, floor = floors
    # split-K: the reduction's cycles follow the partial products (a constant per split,
    # timed when the group's table is built; until then its bytes at the pins bound it)
    pk = rows[:, SK.F_PK]
    extra = np.zeros(len(rows), dtype=np.int64)
    for p in np.unique(pk[pk > 1]).tolist():
        r = _reduction_op(op, p)
        extra[pk == p] = math.floor((r.read_bytes + r.write_bytes) * chip.clock_hz / pin)
    # (group floors split-major, dataflow-minor: the groups' order)
    gfloor = np.stack([np.maximum(floor, f * (1.0 - 1e-9)) + extra for f in folds],
                      axis=1).ravel().tolist()
    ctx = (view, m_total, layout)
    sps = MP.lazy_splits(rows)    # (a split's fields are read only if its group opens)
    return _LazyGroups(gfloor, tuple(flows), ctx, sps, peak.tolist(), extra.tolist(),
                       own.tolist(), (floor + extra).tolist())


#: The mapper's own :func:`mapper.splits` (:func:`_groups` takes the reference path when it
#: has been replaced).
_SPLITS = MP.splits


def _groups_ref(op, chip, rates, flows, m_total: int, batch: int,
                splits_of=None) -> list[list]:
    """:func:`_groups` the plain way, split by split (``splits_of``, default
    :func:`mapper.splits`, as it is when called; :func:`mapper.split_floors`,
    :func:`mapper.split_fold_floor`): the reference the tests compare it with (with
    ``splits_of`` = :func:`mapper.splits_ref`), and its path where a product of a split's
    integers is too large for float64 to hold exactly. The mapper's (split, dataflow) groups
    of ``op``, each ``[floor, position, problem,
    split, peak bytes per cycle, extra cycles, dataflow, layout, own, bytes floor]``:
    the floor bounds every candidate of the group (its table is built only when the search
    reaches it); ``own``: a split of the chip's own (:func:`mapper.own_splits`), not only of
    a sub-chip's. The floor is the larger of the bytes-and-MACs floor (:func:`mapper.group_floor`,
    which does not depend on the dataflow, computed once per split by
    :func:`mapper.split_floor`, without orienting the problem) and the fold count's
    (:func:`mapper.split_fold_floor`, per dataflow); the bytes floor alone is kept too
    (``plan`` leaves a sub-chip's split out by the budget when the search has passed its
    bytes floor with the budget spent). A group's problem (``None`` until then) is oriented
    when its table is built."""
    view = _as_oriented(op, m_total, batch)
    layout = MP.op_layout(view, m_total, chip.tensor_cores, chip)
    groups = []
    pin = pin_bytes_per_s(chip)
    # split-K writes partial tiles to DRAM and reduces them there: only for an op whose
    # result goes to DRAM (not on an all-SRAM chip, not a result kept on chip)
    partials_ok = chip.has_dram and getattr(op, "c_dest", "dram") == "dram"
    k = op.k if partials_ok else 0
    arr = chip.core.array
    own = set(MP.own_splits(chip.tensor_cores, chip.core.arrays, arr.rows, arr.cols, batch,
                            m_total, op.n, k))
    sps = (splits_of or MP.splits)(chip, batch, m_total, op.n, k)
    seen: dict = {}
    ctx = (view, m_total, layout)
    for split, (peak_bpc, floor) in zip(sps, MP.split_floors(chip, layout, flows[0], sps, op.k,
                                                               rates, pin)):
        mine = split in own          # (hashed once per split, not per dataflow)
        # split-K: the reduction's cycles follow the partial products (a constant per split,
        # timed when the group's table is built; until then its bytes at the pins bound it)
        extra = 0
        if split.pk > 1:
            r = _reduction_op(op, split.pk)
            extra = math.floor((r.read_bytes + r.write_bytes) * chip.clock_hz / pin)
        old = floor + extra
        for df in flows:
            # (memoised per op: many splits give the arrays the same batch, m, n and k)
            key = (df, split.batch, split.m, split.n, split.k if split.pk > 1 else 0)
            folds = seen.get(key)
            if folds is None:
                folds = seen[key] = MP.split_fold_floor(chip, df, split, op.k, rates) * (
                    1.0 - 1e-9)
            groups.append([max(floor, folds) + extra, len(groups), None, split, peak_bpc,
                           extra, df, ctx, mine, old])
    return groups


def plan(op, chip, dataflow=None, reference: bool = False, chains: bool = True):
    """Choose the split, dataflow and blocking for ``op``; returns a dict of the decision
    (``budget_hit``: the search stopped on :data:`mapper.MAX_SIMULATED_BLOCKS` with candidates
    left that could have won, a group or a group's rest it left out for the budget; otherwise
    its answer is within :data:`mapper.PRUNE_TOLERANCE` of the best candidate's cycles;
    ``candidates``: the candidates of the groups whose tables the search built, those its
    floors opened; ``simulated``: the engine runs made).

    ``reference``: each candidate's engine run made the plain way (its :class:`mapper.Blocks`
    built, :func:`run_engine` filling fresh vectors), the reference that tests compare the
    default path with (:func:`_run_candidate`: the same runs, the same answer and counts).

    ``chains``: skip the engine run of a candidate whose load-chain bound
    (:func:`mapper_kernels.chain_bound`, at most its engine cycles) is above the best cycles
    so far: it cannot win, not even a tie, so the search makes the same decisions and returns
    the same mapping, budget and candidate count with fewer runs (``simulated`` counts the
    runs made); False runs it as before (tests compare the two)."""
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
    # (:func:`_groups`' groups, in that order; built as the search reaches them)
    lazy = _lazy_groups(op, chip, rates, flows, m_total, batch)
    pend = None if lazy is None else lazy.pending()
    if pend is None:
        groups = (_groups_ref(op, chip, rates, flows, m_total, batch) if lazy is None
                  else [lazy.group(i) for i in range(len(lazy.floors))])
        pending = sorted(groups, key=_FLOOR_KEY)
        pend = [g[0] for g in pending], pending.__getitem__
    pfloor, pget = pend
    npend = 0           # the groups pending[npend:] are not opened yet
    # The budget leaves a sub-chip's split out where the search passed the group's
    # bytes-and-MACs floor (g[9]) with the budget spent, as it did before the floors counted
    # the array's folds (mapper.fold_floor), which open a group later: ``reach`` is the
    # highest estimate the search has reached, ``cross`` its value when the budget was first
    # found spent (a group of a bytes floor above it is left out; its fold floor would only
    # have postponed the same verdict, so the chosen mappings do not depend on fold floors).
    reach = -math.inf
    cross = math.inf
    built = []          # [group, table, est order, est sorted, lb sorted, pointer, engine base]
    heads = []          # heap of (est, group position, local index, built index): each built
    #                     group's next candidate (lazily checked against the threshold); Python
    #                     floats and ints (ndarray.item: cheaper to compare than NumPy scalars)
    errors = []
    n_cands = 0         # the candidates of the tables built (the groups the search opened)
    best = None
    sims = 0
    # the budget: the chip's own splits' candidates are searched until their blocks reach it,
    # its sub-chips' only while all blocks simulated are within it, so that the sub-chips
    # never leave a search that stops on the budget worse off than without them (up to the
    # tolerance) and cost at most one more budget
    spent = own_spent = 0
    dram = engine_dram_inputs(chip)
    budget_hit = False   # the search itself left candidates out on MAX_SIMULATED_BLOCKS
    # an opened group's table, its estimates and bounds in estimate order, made from the
    # split's fields (mapper.split_table; the reference orients the problem first: the same
    # numbers); ``inputs``: what the search's tables share (mapper.search_inputs)
    inputs = None
    run = None          # the engine's compiled entry point (engine_entry), at the first run
    # (looked up once: the loop runs ~50 times per GEMM, ~8,400 times in the headline)
    keep = 1.0 - MP.PRUNE_TOLERANCE
    budget = MP.MAX_SIMULATED_BLOCKS
    heapreplace, heappop = heapq.heapreplace, heapq.heappop
    t_blocks, t_chain = MK.T_BLOCKS, MK.T_CHAIN

    while True:
        thr = math.inf if best is None else best[0] * keep
        # the head: the least (est, group, local) among the groups' next candidates whose
        # bound can beat the best (skipped ones never can again: thr only falls)
        while heads:
            b = built[heads[0][3]]
            lbs = b[4]
            if lbs.item(b[5]) < thr:
                break
            ahead = lbs[b[5]:] < thr
            i = int(ahead.argmax())          # (the first candidate that can, if any)
            if ahead[i]:          # (pop and push in one: the heap's keys are distinct)
                b[5] += i
                heapreplace(heads, (b[3].item(b[5]), b[0][1], b[2].item(b[5]), b[7]))
            else:
                heappop(heads)
        head = heads[0] if heads else None
        if cross == math.inf and best is not None and spent >= budget:
            cross = reach
        if npend < len(pfloor) and pfloor[npend] < thr and (
                head is None or pfloor[npend] <= head[0]):
            g = pget(npend)
            npend += 1
            if g[0] > reach:
                reach = g[0]
            if not g[8] and g[9] > cross:
                budget_hit = True
                continue
            _, _, pb, split, peak_bpc, extra, df, (view, mt, layout), *_ = g
            if split.pk > 1:   # (memoised per ways: _reduction_stats)
                g[5] = extra = split_k_reduction(op, chip, split).cycles
            try:
                if reference:
                    if pb is None:
                        g[2] = pb = MP.orient(view, df, split, mt, chip.tensor_cores, layout)
                    cs, order, est, lb = MP.group_table_reference(chip, pb, rates, split,
                                                                  peak_bpc, extra)
                else:      # (oriented at the group's first engine run, if it has one)
                    if inputs is None:       # (one view and layout per search)
                        inputs = MP.search_inputs(chip, rates, layout, view.k)
                    cs, order, est, lb = MP.split_table(chip, rates, inputs, view, df, split,
                                                        mt, layout, peak_bpc, extra,
                                                        explain=False)
            except ValueError as exc:
                errors.append(exc)
                continue
            b = [g, cs, order, est, lb, 0, None, len(built)]
            built.append(b)
            heapq.heappush(heads, (est.item(0), g[1], order.item(0), b[7]))
            n_cands += len(cs)
            continue
        if head is None:
            break
        if head[0] > reach:
            reach = head[0]
        if best is not None and spent >= budget and (
                own_spent >= budget or not built[head[3]][0][8]):
            budget_hit = True
            if own_spent >= budget:
                break
            heappop(heads)     # the rest of this sub-chip split's group is left out
            continue
        _, gpos, local, bi = head
        b = built[bi]
        b[5] += 1
        if b[5] < len(b[4]):
            heapreplace(heads, (b[3].item(b[5]), gpos, b[2].item(b[5]), bi))
        else:
            heappop(heads)
        pb, split, cs, extra = b[0][2], b[0][3], b[1], b[0][5]
        if reference:
            blk = cs[local]
            blocks = pb.batch * MP._cdiv(pb.m, blk.mb) * MP._cdiv(pb.k, blk.kb) * \
                MP._cdiv(pb.n, blk.nb)
        else:
            blocks = cs.rows.item(local, t_blocks)
        spent += blocks
        own_spent += blocks if b[0][8] else 0
        cut = 0 if best is None else int(best[0] * keep) + 1
        if best is not None and cut - extra <= 1:
            continue                       # the reduction alone cannot beat the best
        if chains and best is not None and cs.rows.item(local, t_chain) + extra > best[0]:
            continue    # its load chains alone exceed the best: it could not even tie
        if b[6] is None:     # built at the group's first engine run (none if all are skipped)
            if pb is None:
                _, _, _, _, _, _, df, (view, mt, layout), *_ = b[0]
                b[0][2] = pb = MP.orient(view, df, split, mt, chip.tensor_cores, layout)
            b[6] = MP.engine_base(chip, pb, rates, split, True)
            if run is None:  # (the same argument types for every group of the search)
                run = engine_entry(b[6], dram)
        if reference:
            out, _, _ = run_engine(chip, pb, blk, rates, split, True,
                                   cutoff=cut - extra if cut else 0,
                                   periods=int(cs.periods[local]),
                                   best=0 if best is None else best[0] - extra, base=b[6],
                                   dram=dram)
        else:
            out = _run_candidate(b[6], cs, local, cut - extra if cut else 0,
                                 0 if best is None else best[0] - extra, dram, run)
        sims += 1
        if out.item(E.O_ABORTED):
            continue
        key = (int(out.item(E.O_CYCLES)) + extra, gpos, local)
        if best is None or key < best[:3]:
            best = (key[0], gpos, local, pb, cs[local], out, split)
    if best is None:   # (the first group's error; a NoFit's message is built here)
        exc = errors[0]
        raise exc.explained() if isinstance(exc, MP.NoFit) else exc
    _, _, _, pb, blk, out, split = best
    return dict(rates=rates, split=split, problem=pb, blocks=blk, out=out,
                candidates=n_cands, simulated=sims, dtype=dtype, budget_hit=budget_hit)


_FLOOR_KEY = operator.itemgetter(0, 1)    # a group's (floor, position)

#: The engine parameters of a candidate table's row (``mapper_kernels.T_*``) in its order
#: (P_PERIODS, P_TRAFFIC, P_BEST are read only with a cutoff).
_ROW_PARAMS = np.array((E.P_MB, E.P_KB, E.P_NB, E.P_ORDER, E.P_X_SB, E.P_W_SB, E.P_PERIODS,
                        E.P_TRAFFIC))
_N_ROW_PARAMS = len(_ROW_PARAMS)
assert (MK.T_MB, MK.T_KB, MK.T_NB, MK.T_ORDER, MK.T_XSB, MK.T_WSB, MK.T_PERIODS,
        MK.T_TRAFFIC) == tuple(range(_N_ROW_PARAMS))


def engine_entry(base, dram):
    """:func:`engine.run_schedule` for untraced runs of a group's ``base`` vectors and a
    chip's ``dram`` inputs (:func:`engine_dram_inputs`): its compiled entry point for these
    argument types, which skips Numba's dispatcher's typing of the arguments on every call
    (measured on a run that stops at once: 4.3 us through the dispatcher, 3.5 us through
    the entry point, which unboxes the same 16 arrays). The same
    machine code runs, so results are identical (``plan(reference=True)`` calls the
    dispatcher; the tests compare them). The dispatcher itself when Numba is off
    (``NUMBA_DISABLE_JIT=1``) or its ``overloads``/``compile`` are not as in the Numba
    releases read (0.68: ``Dispatcher.overloads[argument types].entry_point``)."""
    fn = E.run_schedule
    args = (base[0], base[1], *dram[:3], _NO_TRACE_BLOCKS, _NO_TRACE_SPANS)
    # (Numba's typeof of the pattern cache's tuple costs ~0.2 ms: looked up once per set of
    # array properties that decide Numba's array types)
    key = tuple(_array_key(a) if isinstance(a, np.ndarray) else tuple(map(_array_key, a))
                for a in args)
    entry = _ENTRIES.get(key)
    if entry is not None:
        return entry
    try:
        from numba import typeof
        sig = tuple(typeof(a) for a in args)
        cres = fn.overloads.get(sig)
        if cres is None:
            fn.compile(sig)            # (loads it from Numba's cache, or compiles it)
            cres = fn.overloads[sig]
        entry = cres.entry_point
    except (AttributeError, KeyError, TypeError, ImportError):
        entry = fn
    _ENTRIES[key] = entry
    return entry


_ENTRIES: dict = {}


def _array_key(a: np.ndarray) -> tuple:
    """What decides Numba's type of array ``a`` (dtype, dimensions, layout, writable,
    aligned)."""
    f = a.flags
    return (a.dtype.str, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)


def _run_candidate(base, cs, local: int, cutoff: int, best: int, dram,
                   run) -> np.ndarray:
    """:func:`run_engine` of candidate ``local`` of table ``cs`` with ``memory`` on, writing
    its blocking and bounds into the group's :func:`mapper.engine_base` integer vector in
    place (the engine only reads it; every entry a run reads is set here or in the base) and
    taking the table's periods and traffic (``int(mapper.traffic_bytes)``, computed with the
    table): no :class:`mapper.Blocks` is built per run. ``run``: :func:`engine.run_schedule`
    or its :func:`engine_entry`. Returns the output vector."""
    ip = base[0]
    ip[_ROW_PARAMS] = cs.rows[local, :_N_ROW_PARAMS]
    ip[E.P_CUTOFF], ip[E.P_BEST] = cutoff, best
    dip, dfp, pcache = dram
    return run(ip, base[1], dip, dfp, pcache, _NO_TRACE_BLOCKS, _NO_TRACE_SPANS)


def split_k_reduction(op, chip, split) -> OpStats:
    """The reduction of a split-K mapping (``split.pk`` > 1), timed as a vector op: the
    ``pk`` partial output tiles are read back at the accumulator's precision (they were
    written to DRAM by the arrays), the vector units add them (``pk − 1`` adds per output
    element) and the result is written at C's precision. It runs on all the tensor cores, or
    on half, a quarter, ... of them (the sub-chips of :func:`mapper.splits`) when that is
    faster (a vector op's chunks grow with its cores: its fill and drain, and its DRAM
    stream, are not monotone in them), so that doubling the cores never slows it."""
    return _reduction_stats(op, chip, split.pk)


@lru_cache(maxsize=256)
def _reduction_stats(op, chip, pk: int) -> OpStats:
    from .vector import vector_floor_cycles, vector_stats
    r = _reduction_op(op, pk)
    best = None
    for cores in MP.core_counts(chip.tensor_cores):
        if best is not None and vector_floor_cycles(r, chip, cores) >= best.cycles:
            continue     # (a lower bound: this core count cannot beat the best, not even tie)
        st = vector_stats(r, chip, cores)
        if best is None or st.cycles < best.cycles:
            best = st
    return best


@lru_cache(maxsize=256)
def _reduction_op(op, pk: int) -> VectorOp:
    elements = op.batch * op.m * op.n
    return VectorOp(name=f"{op.name}.split_k_reduce", kind="add", elements=elements,
                    ops_per_element=float(pk - 1),
                    read_bytes=pk * elements * DTYPE_BYTES[op.acc_dtype],
                    write_bytes=elements * DTYPE_BYTES[op.c_dtype], dtype=op.acc_dtype)


class _Oriented:
    """A view of a Gemm with the weight-shared batch folded into M."""

    def __init__(self, op, m_total, batch):
        self.a_dtype, self.b_dtype, self.c_dtype = op.a_dtype, op.b_dtype, op.c_dtype
        self.acc_dtype, self.k, self.n = op.acc_dtype, op.k, op.n
        self.b_is_weight = op.b_is_weight
        self.batch = batch
        self.m = m_total
        self.a_source, self.b_source, self.c_dest = op.a_source, op.b_source, op.c_dest
        self.resident_bytes = op.resident_bytes


def _as_oriented(op, m_total, batch):
    return _Oriented(op, m_total, batch)


def gemm_stats(op, chip, dataflow=None) -> OpStats:
    """Simulate one :class:`~diptych.workloads.ops.Gemm` (uncached; see :func:`simulate`)."""
    p = plan(op, chip, dataflow)
    rates, split, pb, blk, out = p["rates"], p["split"], p["problem"], p["blocks"], p["out"]
    comp, _, _ = run_engine(chip, pb, blk, rates, split, False)
    # the representative array's run, times the chip-wide copies of it (tiles over waves)
    act = split.scale
    cycles = int(out[E.O_CYCLES])
    compute_cycles = int(comp[E.O_CYCLES])
    busy = int(out[E.O_BUSY])
    dram_stall = int(out[E.O_DRAM_STALL])
    wb_stall = int(out[E.O_WB_STALL])
    dram_rd = float(out[E.O_DRAM_RD]) * act
    dram_wr = float(out[E.O_DRAM_WR]) * act
    sram_rd = float(out[E.O_SRAM_RD]) * act
    sram_wr = float(out[E.O_SRAM_WR]) * act
    sb_rd = float(out[E.O_SB_RD]) * act
    red = split_k_reduction(op, chip, split) if split.pk > 1 else None
    if red is not None:
        # the reduction follows the partial products: its vector-unit cycles are memory-free
        # work, the rest of its time is DRAM
        cycles += red.cycles
        compute_cycles += red.compute_cycles
        dram_stall += red.cycles - red.compute_cycles
        dram_rd += red.dram_read_bytes
        dram_wr += red.dram_write_bytes
        sram_rd += red.sram_read_bytes
        sram_wr += red.sram_write_bytes
    acc = getattr(op, "c_read_bytes", 0.0)
    if acc and op.c_dest == "dram" and chip.has_dram:
        # C += A·B (beta = 1): the epilogue reads each output tile before writing it. Hopper's
        # warp-specialised kernels load C by TMA from a producer warp of their own while the
        # consumer warp groups run the main loop [S: NVIDIA/cutlass include/cutlass/gemm/
        # kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp, the "Epilogue Producer Warp"
        # branch taken when collective_epilogue.is_producer_load_needed(); assumption: cuBLAS's
        # Hopper kernels, closed source, load C the same way], so the reads stream beside the
        # operands': they cost time only where the op's DRAM bytes with them exceed what the
        # memory roof moves in the engine's cycles
        dram_rd += acc
        floor = math.ceil((dram_rd + dram_wr) / memory_roof_bytes_per_s(chip) * chip.clock_hz)
        if floor > cycles:
            dram_stall += floor - cycles
            cycles = floor
    elif acc:          # C kept on chip: read back from the scratchpad or the shared buffer
        sram_rd += acc
    fill = compute_cycles - busy
    seconds = cycles / chip.clock_hz
    macs = op.macs
    peak = chip.peak_macs_per_cycle(p["dtype"])
    util = macs / (cycles * peak)
    en = chip.energy
    e = {
        "mac": macs * en.pj_per_mac[p["dtype"]] * 1e-12,
        "sram": (sram_rd + sram_wr + sb_rd) * en.pj_per_sram_byte * 1e-12,
        "dram": (dram_rd + dram_wr) * 8 * en.pj_per_dram_bit * 1e-12,
        "vector": 0.0 if red is None else red.energy_breakdown["vector"],
        "static": en.static_w * seconds,
        **fabric(chip).energy_j(dram_rd + dram_wr, dram_rd + dram_wr + sb_rd),
    }
    dram_bps = (dram_rd + dram_wr) / seconds
    array_frac = busy / cycles
    dram_frac = dram_bps / chip.dram_bytes_per_s if chip.has_dram else 0.0
    mapping = {
        "dataflow": pb.dataflow,
        "dtype": p["dtype"],
        "macs_per_pe_per_cycle": rates.rate,
        "split": {"batch": split.pb, "m": split.pm, "n": split.pn},
        "active_arrays": split.active,
        "arrays_per_core": split.arrays_per_core,
        # tile waves (docs/engine.md "Mapper"): the grid above dealt to units (arrays, or
        # cores whose arrays share the tile's operand blocks as a core_tile grid of sub-tiles)
        "waves": split.waves,
        "tiles": split.tiles,
        "units": "cores" if split.qm * split.qn > 1 else "arrays",
        "busy_units": split.units,
        "last_wave_units": (split.tail_active or split.active) // (split.qm * split.qn),
        "wave_quantisation_loss": 1.0 - split.wave_efficiency,
        "core_tile": {"m": split.qm, "n": split.qn},
        "split_k": ({"ways": split.pk, "k_per_array": split.k,
                     "partial_bytes": red.dram_read_bytes, "reduction_cycles": red.cycles}
                    if red is not None else None),
        "per_array": {"batch": pb.batch, "m": pb.m, "k": pb.k, "n": pb.n,
                      "transposed": pb.transposed},
        "block": {"m": blk.mb, "k": blk.kb, "n": blk.nb},
        "loop_order": "mnk" if blk.order == 0 else "nmk",
        "shared_buffer": {("B" if pb.transposed else "A"): _SB_MODES[blk.x_sb],
                          ("A" if pb.transposed else "B"): _SB_MODES[blk.w_sb]},
        "buffering": "double",
        "scratchpad_bytes_used": MP.footprint(pb, blk.mb, blk.kb, blk.nb,
                                              MP.capacity(chip, split)[1]),
        "scratchpad_bytes_per_array": MP.capacity(chip, split, pb.resident_per_core)[0],
        "blocks": int(out[E.O_BLOCKS]),
        "folds": int(out[E.O_FOLDS]),
        "dma_transfers": int(out[E.O_TRANSFERS]),
        # the unit busiest over the op's cycles (not its regime: sim/regime.py); the arrays
        # count weight installs and fill as busy, which MAC utilisation does not
        "busiest": busiest_unit({"array": array_frac, "dram": dram_frac}),
        "candidates": p["candidates"],
        "simulated_candidates": p["simulated"],
    }
    if op.on_chip or op.resident_bytes:
        mapping["residency"] = {"A": op.a_source, "B": op.b_source, "C": op.c_dest,
                                "resident_bytes": op.resident_bytes}
    return OpStats(
        name=op.name, kind="gemm", cycles=cycles, seconds=seconds,
        compute_cycles=compute_cycles, array_busy_cycles=busy, stall_cycles=cycles - busy,
        stall_breakdown={"fill_drain": fill, "dram": dram_stall, "writeback": wb_stall},
        macs=macs, flops=float(op.flops), utilization=util, dram_read_bytes=dram_rd,
        dram_write_bytes=dram_wr, sram_read_bytes=sram_rd, sram_write_bytes=sram_wr,
        dram_bytes_per_s=dram_bps, energy_j=sum(e.values()), energy_breakdown=e,
        bound=regime(util, dram_bps / memory_roof_bytes_per_s(chip) if chip.has_dram else 0.0),
        mapping=mapping,
        shared_buffer_read_bytes=sb_rd)
