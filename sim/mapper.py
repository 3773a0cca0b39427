"""The mapper: split a GEMM across the chip's arrays, then pick dataflow, blocks and loop order.

1. **Orientation.** A ``Gemm`` whose B is a shared weight (``b_is_weight``) with ``batch > 1``
   is one product with ``M·batch`` rows (the A and C matrices are stacked). Otherwise the batch
   elements are independent products. Input stationary is weight stationary on the transposed
   problem (``Cᵀ = Bᵀ·Aᵀ``): M and N swap and so do the operands.
2. **Tiles, waves and cores** (:func:`splits`, :class:`Split`). The output is a grid of tiles
   dealt to units (arrays, or cores whose arrays take ``qm × qn`` sub-tiles and share the
   tile's operand blocks in the core's scratchpad) in ``ceil(tiles / units)`` waves. One
   representative array plays its tiles one after another; DRAM pseudo-channels are
   time-shared by the ``active`` arrays of a full wave (each sees ``1/active`` of every
   channel; the last wave's tile by that wave's arrays), a core's DMA engines and scratchpad
   are split among its busy arrays. Splitting M makes every array read its own copy of its B
   columns unless its core's arrays share them; splitting N or the batch duplicates nothing.
   Every split is a candidate like the blockings below (the search is over split × dataflow ×
   blocking). A chip also offers the splits of its sub-chips, itself with half its tensor
   cores, recursively (a mapping may leave them idle), so that doubling the core count
   never makes a GEMM slower (:func:`splits`; docs/engine.md, "More
   hardware is never slower").
3. **Blocks.** Candidate block sizes are the array-aligned sizes ``R·2^i`` (rows),
   ``Rk·2^i`` or ``R·2^i`` (depth), ``C·2^i`` (columns) and the full extent, for both loop
   orders, that fit the scratchpad with two slots each for the X and W blocks and two output
   tiles (in the accumulator SRAM when the chip has one), and, when the vector unit expands a
   narrow B operand into the scratchpad (:func:`expanded_b_bits`), one more B block at A's
   width beside its slots. Each candidate has a valid lower
   bound (busy cycles; DRAM bytes at peak share) and an estimate; candidates are simulated in
   order of the estimate and pruned when their lower bound cannot beat the best so far (a run
   also stops as soon as it cannot), within a budget of :data:`MAX_SIMULATED_BLOCKS`; a
   candidate whose load-chain bound (:func:`mapper_kernels.chain_bound`) exceeds the best so
   far is not run (it could not win nor tie; the search's decisions are unchanged). The
   fastest simulated candidate wins; ties break on the candidate order, so the choice is
   deterministic.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..arch.dtypes import element_bits
from . import engine as E
from . import mapper_kernels as MK
from . import split_kernels as SK
from . import timing as T
from .array import Rates
from .dram import dram_timing, pin_bytes_per_s
from .fabric import fabric
from .support import expanded_b_bits

#: Budget of one mapping decision: engine runs stop once the candidates simulated so far hold
#: this many blocks in all (small problems are therefore searched exhaustively, up to the
#: lower-bound pruning; large ones in order of the estimate until the budget is spent).
MAX_SIMULATED_BLOCKS = 100_000

#: A candidate whose lower bound is within this fraction of the best simulated time is not
#: simulated: the mapper may miss a mapping at most 0.01 % faster than the one it reports.
PRUNE_TOLERANCE = 1e-4

_BASE_ALIGN = 1 << 20  # operands are placed at 1 MiB-aligned addresses


@lru_cache(maxsize=None)
def _bits(dtype: str) -> int:
    """Bits of one operand element (a block-scaled format's scales are not in the tiles the
    engine moves: :attr:`diptych.workloads.ops.Gemm.a_scale_bytes`)."""
    return element_bits(dtype)


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
    x_dup: int = 1       # arrays reading the same X slice at once (all cores)
    w_dup: int = 1       # arrays reading the same W slice at once (all cores)
    x_cdup: int = 1      # arrays of one core sharing its X block in the scratchpad
    w_cdup: int = 1      # arrays of one core sharing its W block
    # residency: where X and W are read from and O written (engine.SRC_*: 0 DRAM,
    # 1 scratchpad, 2 shared buffer), and scratchpad bytes per core held by resident tensors
    x_src: int = 0
    w_src: int = 0
    o_dst: int = 0
    resident_per_core: int = 0
    # bits per element a slot of X (W) costs in the scratchpad capacity (0: x_bits, w_bits):
    # more than the element's when the vector unit writes an expanded copy of B's block
    # beside its two slots (expanded_b_bits: half that block's bits counted in each slot)
    x_slot_bits: int = 0
    w_slot_bits: int = 0

    @property
    def x_cap_bits(self) -> int:
        return self.x_slot_bits or self.x_bits

    @property
    def w_cap_bits(self) -> int:
        return self.w_slot_bits or self.w_bits


_PROBLEM_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Problem)
                     if f.default is not dataclasses.MISSING}


def _problem(**fields) -> Problem:
    """``Problem(**fields)`` without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field, 28 of them: the search orients a problem per group): the
    same object, equal and hashing alike. ``fields`` must name every field without a default
    (tests/sim/test_plan_fast_path.py checks :func:`orient`'s against the constructor's)."""
    p = object.__new__(Problem)
    d = p.__dict__
    d.update(_PROBLEM_DEFAULTS)
    d.update(fields)
    return p


@dataclass(frozen=True)
class Split:
    """How a GEMM is dealt to the chip's arrays (see :func:`splits`).

    The output is a grid of ``pb × pm × pn`` tiles (batch, M, N ways) dealt to *units* in
    waves, the way thread blocks fill SMs: a unit is one array, or (``qm × qn`` > 1) one core
    whose arrays take ``qm × qn`` sub-tiles of its tile and share its operand blocks in the
    core's scratchpad. ``batch``, ``m``, ``n`` are what the representative array plays: its
    ``waves`` tiles one after another (``batch`` = tiles × the tile's batch share), each
    ``m × K × n``. ``active`` arrays run at once in a full wave, ``tail_active`` in the last
    one when it is partly full (0: every wave is full). With ``pk`` > 1 (split-K) the arrays
    also split K ``pk`` ways, ``k`` deep each, and write FP32 partial tiles that a reduction
    adds (:func:`diptych.sim.gemm.split_k_reduction`)."""

    pb: int
    pm: int
    pn: int
    batch: int   # per-array share: the tile's batch share × waves
    m: int
    n: int
    active: int
    arrays_per_core: int
    waves: int = 1
    tail_active: int = 0
    qm: int = 1          # a core tile's sub-tiles over the core's arrays (M ways, N ways)
    qn: int = 1
    a_dup: int = 0       # arrays reading one A (B) slice at once; 0: pn·qn (pm·qm), one wave
    b_dup: int = 0
    pk: int = 1          # split-K: K ways; each array writes FP32 partial sums, reduced after
    k: int = 0           # its share of K (with pk > 1)

    def __getattr__(self, name: str):
        """A split made by :func:`lazy_splits` fills its fields from its row on first read
        (only then: a search reads the splits of the groups it opens, a third of them);
        otherwise the attribute is missing."""
        d = self.__dict__
        src = d.get("_row")
        if src is None:
            # another thread may have filled the fields between this read's miss and here
            if name in d:
                return d[name]
            raise AttributeError(name)
        rows, i = src
        d.update(zip(SK.FIELDS, rows[i].tolist()))
        d.pop("_row", None)     # (after the fields: a reader in another thread sees either)
        return getattr(self, name)

    def __hash__(self) -> int:
        """The dataclass's hash (of the fields' tuple), computed once per object: a search
        hashes each split several times (de-duplication, the chip's own splits)."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(_SPLIT_FIELDS(self))
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def tiles(self) -> int:
        return self.pb * self.pm * self.pn * self.pk

    @property
    def units(self) -> int:
        """Units busy in a full wave (arrays, or cores sharing tiles)."""
        return self.active // (self.qm * self.qn)

    @property
    def scale(self) -> float:
        """Chip-wide copies of the representative array's run: (tiles × sub-tiles) ÷ waves
        (its bytes and energy times this are the chip's)."""
        t = self.tiles * self.qm * self.qn
        return t if self.waves == 1 else t / self.waves

    @property
    def wave_efficiency(self) -> float:
        """Tiles ÷ (waves × units): 1 when every wave is full (the rest is quantisation loss)."""
        return self.tiles / (self.waves * self.units)

    @property
    def tail_from(self) -> int:
        """The representative array's first batch element in the partial last wave (``batch``
        when there is none)."""
        return self.batch - self.batch // self.waves if self.tail_active else self.batch

    def dram_weight(self) -> float:
        """Its DRAM bytes in units of a full wave's share: the last wave's tile moves at
        ``tail_active / active`` of the time (1.0 without a partial wave)."""
        if not self.tail_active:
            return 1.0
        return (self.waves - 1 + self.tail_active / self.active) / self.waves

    def tail_ratio(self) -> float:
        """The last tile's DRAM time-sharing relative to a full wave's (1.0: none)."""
        return self.tail_active / self.active if self.tail_active else 1.0


_SPLIT_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(Split)))
# The fields' defaults are not left as class attributes (the dataclass's ``__init__`` keeps
# its own copies): a split of :func:`lazy_splits` must reach ``__getattr__`` on its first read
# of any field, a default-valued one too (``pk`` read first would otherwise be the default).
for _f in dataclasses.fields(Split):
    if _f.name in Split.__dict__:
        delattr(Split, _f.name)
assert SK.FIELDS == tuple(f.name for f in dataclasses.fields(Split))


def _split(**fields) -> Split:
    """``Split(**fields)`` without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field): the same object. ``fields`` must name every field
    (the split enumeration builds ~150,000 per shape set; tests/sim/test_plan_fast_path.py
    checks its splits against the constructor's)."""
    p = object.__new__(Split)
    p.__dict__.update(fields)
    return p


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


#: Split-K keeps each array's share of K at least this deep (a shallower share mostly adds
#: partial-sum traffic; 256 rows is one to two folds of the presets' arrays).
MIN_SPLIT_K = 256

#: Wave grids are offered up to this many tiles per unit (quantisation loss ≤ 1/16 when the
#: tiles are at least this many times the units; bigger grids only shrink the tiles).
MAX_WAVES = 16


def splits(chip, batch: int, m: int, n: int, k: int = 0) -> list[Split]:
    """Every distinct way to deal (batch, M, N) to the chip's arrays, deterministic order:
    the chip's own splits (:func:`own_splits`), then those of its sub-chips not already
    among them (:func:`sub_chips`, recursively), less the packings another split dominates
    (:func:`packing_dominates`).

    **Sub-chips.** A mapping may leave cores idle: the splits of the chip with half its
    tensor cores (when the count is even) are splits of this chip too. A :class:`Split`
    carries every number the engine reads of the arrays it uses (``active``,
    ``arrays_per_core``, waves, sub-tiles; the scratchpad, DMA and DRAM shares follow from
    them), so it runs the same on either chip.
    A chip's splits therefore contain those of the chip with ``cores / 2^i`` cores:
    doubling the core count (all else equal) only adds candidates,
    and the search, exhaustive up to its pruning tolerance on problems within its budget,
    is never slower on the bigger chip (docs/engine.md, "More hardware is never slower").
    A chip's own splits are not nested that way: the largest ways that fit, the packing of
    a split's arrays onto the cores, the core splits kept and the wave grids are its own.

    Enumerated by the compiled :func:`split_kernels.chip_split_rows` (:func:`split_rows`);
    :func:`splits_ref` is the same in plain Python (:func:`own_splits`, :func:`_splits`),
    the reference the tests compare it with.
    """
    return [_split(**dict(zip(SK.FIELDS, r)))
            for r in split_rows(chip, batch, m, n, k)[0].tolist()]


def splits_ref(chip, batch: int, m: int, n: int, k: int = 0) -> list[Split]:
    """:func:`splits` the plain Python way (:func:`own_splits` per sub-chip, merged, then
    filtered): the reference that tests compare the compiled enumeration
    (:func:`split_rows`) with."""
    arr = chip.core.array
    return list(_chip_splits_ref(chip.tensor_cores, chip.core.arrays, arr.rows, arr.cols,
                                 chip.dma.engines, batch, m, n, k))


def split_rows(chip, batch: int, m: int, n: int, k: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """:func:`splits` as integer rows (the :class:`Split` fields in order,
    :data:`split_kernels.FIELDS`; read-only, memoised) and whether each split is one of the
    chip's own (:func:`own_splits` of its cores, not only a sub-chip's), from the compiled
    enumeration :func:`split_kernels.chip_split_rows` (the same splits in the same order as
    :func:`splits_ref`)."""
    arr = chip.core.array
    return _split_rows(chip.tensor_cores, chip.core.arrays, arr.rows, arr.cols,
                       chip.dma.engines, batch, m, n, k)


def lazy_splits(rows: np.ndarray) -> list[Split]:
    """A :class:`Split` for each of ``rows`` (:func:`split_rows`' rows), each filling its
    fields from its row when one is first read (equal, and hashing alike, to the split built
    with every field: they are read through the attributes)."""
    new = object.__new__
    out = []
    for i in range(len(rows)):
        sp = new(Split)
        sp.__dict__["_row"] = (rows, i)
        out.append(sp)
    return out


@lru_cache(maxsize=4096)
def _split_rows(cores: int, per_core: int, R: int, C: int, engines: int, batch: int, m: int,
                n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rows, own = SK.chip_split_rows(cores, per_core, R, C, engines, batch, m, n, k,
                                   MIN_SPLIT_K, MAX_WAVES)
    rows.setflags(write=False)
    own.setflags(write=False)
    return rows, own


@lru_cache(maxsize=4096)
def _chip_splits_ref(cores: int, per_core: int, R: int, C: int, engines: int, batch: int,
                     m: int, n: int, k: int) -> tuple[Split, ...]:
    """:func:`_splits` less the dominated packings (:func:`packing_dominates`; a dropped split
    has a kept dominator, so the nesting of sub-chips survives the filter)."""
    every = _splits(cores, per_core, R, C, batch, m, n, k)
    same: dict = {}
    for sp in every:
        same.setdefault(_but_packing(sp), []).append(sp)
    drop = {sp for group in same.values() if len(group) > 1 for sp in group
            if any(packing_dominates(other, sp, engines) for other in group)}
    return tuple(sp for sp in every if sp not in drop) if drop else every


_BUT_PACKING = tuple(f.name for f in dataclasses.fields(Split) if f.name != "arrays_per_core")


_BUT_PACKING_OF = operator.attrgetter(*_BUT_PACKING)


def _but_packing(sp: Split) -> tuple:
    """Every field of ``sp`` but ``arrays_per_core`` (one C-level getter: this runs for every
    split of every new shape)."""
    return _BUT_PACKING_OF(sp)


def packing_dominates(a: Split, b: Split, engines: int) -> bool:
    """Whether ``a``, the same split as ``b`` but for ``arrays_per_core``, spreads its arrays
    more thinly over the cores without giving any array less: fewer arrays per core (a larger
    share of the scratchpad, accumulator and scratchpad bandwidth), at least as many DMA
    engines and at least the per-engine rate (:func:`dma_share` on cores of ``engines``
    engines). Every blocking that fits ``b`` fits ``a`` and runs no slower there (the engine
    is monotone in those shares: tested, not proven, tests/sim/test_monotone_resources.py).
    A thinner packing
    does not always dominate: 3 arrays on a core of 4 engines get one engine at 4/3
    of an engine's rate each, 2 arrays two engines at one engine's rate."""
    pa, pb = a.arrays_per_core, b.arrays_per_core
    if pa >= pb:
        return False
    ea, eb = max(1, engines // pa), max(1, engines // pb)
    # the per-engine rate is engines · rate / (arrays_per_core · engines each)
    return ea >= eb and pa * ea <= pb * eb


def sub_chips(cores: int, per_core: int) -> list[tuple[int, int]]:
    """The (tensor cores, arrays per core) of the sub-chips whose splits :func:`splits`
    includes directly: half the cores (when even). Theirs follow recursively: every
    ``cores / 2^i`` that is whole. Half the arrays per core is not offered: it would make
    doubling ``[core] arrays`` never slower too, at about twice the extra search time
    (measured on the branch that offered it: +30 % mapper CPU instead of about +12 %), and
    the issue's guarantee is on the core count (docs/engine.md, "More hardware is never
    slower")."""
    return [(cores // 2, per_core)] if cores % 2 == 0 else []


def core_counts(cores: int) -> list[int]:
    """The tensor cores of a chip and of its sub-chips (:func:`sub_chips`), most first:
    ``cores``, ``cores / 2``, ... while whole."""
    out = [cores]
    while out[-1] % 2 == 0:
        out.append(out[-1] // 2)
    return out


@lru_cache(maxsize=4096)
def _splits(cores: int, per_core: int, R: int, C: int, batch: int, m: int, n: int,
            k: int) -> tuple[Split, ...]:
    """The chip's own splits, then its sub-chips' (recursively) not already among them, in
    the order first met (memoised: a chip and its shapes repeat)."""
    out = dict.fromkeys(own_splits(cores, per_core, R, C, batch, m, n, k))
    for sub in sub_chips(cores, per_core):
        out.update(dict.fromkeys(_splits(*sub, R, C, batch, m, n, k)))
    return tuple(out)


@lru_cache(maxsize=4096)
def own_splits(cores: int, per_core: int, R: int, C: int, batch: int, m: int, n: int,
               k: int = 0) -> tuple[Split, ...]:
    """The splits a chip of ``cores`` tensor cores of ``per_core`` ``R × C`` arrays offers
    on its own, deterministic order:

    1. **One wave over the arrays** (each array one tile): ``pb`` (batch ways) and ``pn`` (N
       ways) run over powers of two and the largest value that fits; ``pm`` (M ways) over
       powers of two up to the arrays left and that largest value, so a split may leave arrays
       idle rather than duplicate an operand across them.
    2. **One wave over the cores, tiles shared by a core's arrays**: the same grids over the
       cores, each core tile cut into ``qm × qn`` sub-tiles (every factorisation of the
       core's arrays); the core loads each operand block once into its scratchpad for them.
    3. **Waves**: power-of-two grids of more tiles than units (arrays, or cores as in 2), up to
       :data:`MAX_WAVES` per unit, dealt ``ceil(tiles / units)`` tiles to a unit; the last
       wave may be partly full. Only grids whose tile count is not a multiple of the units
       are offered: otherwise each unit's tiles form a tile of a one-wave split (1 or 2) that
       plays the same blocks, so power-of-two unit counts get no wave splits.

    4. **Split-K** (with ``k`` given): a one-wave split of 1 whose tiles are fewer than the
       arrays also splits K over the idle arrays, the most ``pk`` ways (a power of two) that
       fit with each share at least :data:`MIN_SPLIT_K` deep; every array writes its partial
       output tile at the
       accumulator's precision and a reduction (:func:`diptych.sim.gemm.split_k_reduction`)
       adds them.

    Splits giving the same per-array work are merged (the first is kept). Of the sub-grids of
    one core tile grid (2, 3) only the one whose sub-tiles fold most evenly on the array is
    kept: the core loads the same X and W blocks for any of them. A split of 2 takes the place
    of the split of 1 with the same per-array work on as many arrays per core, which it
    dominates (the same blockings fit, each moving at most the bytes it moved there); a split
    of 2 giving work no split of 1 gives is not offered (search time, see the code).
    """
    arrays = cores * per_core
    out = {}
    # 1. one wave, one tile per array (keyed by the per-array share, as it always was)
    top = min(batch, arrays)
    for pb in _ways(top):
        rest = arrays // pb
        bs = -(-batch // pb)
        for pn in _ways(rest):
            nu = -(-n // pn)
            for pm in _ways(min(rest // pn, m)):
                # (the split's batch, m, n: the grid fits the arrays in one wave; the
                # ceiling divisions written out and hoisted, as this loop runs ~10^3 times
                # per new shape; ``or 1``: max(1, ·) of a non-negative count)
                key = (bs, -(-m // pm) or 1, nu)
                if key not in out:
                    out[key] = _tile_split(cores, per_core, batch, m, n, pb, pm, pn, 1, 1,
                                           arrays)
    subs = [(qm, per_core // qm) for qm in range(1, per_core + 1) if per_core % qm == 0] \
        if per_core > 1 else []
    best: dict = {}      # per-array work -> (fit, the split of 2 or 3 kept for it)
    # 2. one wave over the cores, each core's arrays sharing its tile
    for qm, qn in subs:
        top = min(batch, cores)
        for pb in _ways(top):
            rest = cores // pb
            for pn in _ways(rest):
                for pm in _ways(min(rest // pn, m)):
                    _offer(best, (cores, per_core, batch, m, n, pb, pm, pn, qm, qn, cores),
                           R, C)
    # 3. waves over the arrays or over the cores
    for qm, qn, units in [(1, 1, arrays)] + [(qm, qn, cores) for qm, qn in subs]:
        if units & (units - 1) == 0:
            continue
        for pb, pm, pn in wave_grids(batch, _cdiv(m, qm), _cdiv(n, qn), units):
            _offer(best, (cores, per_core, batch, m, n, pb, pm, pn, qm, qn, units), R, C)
    if k:
        for sp in [s for s in out.values() if s.qm * s.qn == 1 and s.waves == 1]:
            # the most ways that fit the idle arrays and the minimum depth (fewer ways leave
            # arrays idle for a smaller reduction, which only matters when the partial tiles
            # are large, i.e. when split-K does not pay anyway)
            pk = 1
            while sp.tiles * pk * 2 <= arrays and _cdiv(k, pk * 2) >= MIN_SPLIT_K:
                pk *= 2
            if pk > 1:
                ks = _cdiv(k, pk)
                act = sp.tiles * _cdiv(k, ks)
                out[len(out), "k"] = dataclasses.replace(
                    sp, pk=_cdiv(k, ks), k=ks, active=act,
                    arrays_per_core=min(per_core, _cdiv(act, cores)))
    for _, args in best.values():
        sp = _tile_split(*args)     # (not None: _offer kept only grids _grid accepts)
        # a core split dominates the one-array-per-tile split giving each array the same work
        # on as many arrays per core (the same blockings fit, each moving at most the bytes it
        # moved there through the port and DRAM): it takes that one's place. A one-wave core
        # split of work no split of 1 gives is not offered: its smaller footprint fits many
        # blockings that tie on compute-bound GEMMs, and the search time grew by a third
        key = (sp.batch, sp.m, sp.n)
        one = out.get(key)
        if sp.waves == 1 and one is not None and one.qm * one.qn == 1 and \
                (one.active, one.arrays_per_core) == (sp.active, sp.arrays_per_core):
            out[key] = sp
        elif sp.waves > 1:
            out[len(out), "tiles"] = sp
    return tuple(out.values())


def wave_grids(batch: int, m: int, n: int, units: int):
    """The power-of-two ``pb × pm × pn`` tile grids (``pb ≤ batch``, ``pm ≤ m``, ``pn ≤ n``)
    of more tiles than ``units`` and at most :data:`MAX_WAVES` per unit, their tile count not
    a multiple of ``units``, in the order of the product loop ``pb``, ``pm``, ``pn`` (each
    ascending). The ways grow along each loop, so a loop stops at its first grid above the
    limit: the same grids in the same order as filtering the whole product, which visited
    ~2,070 grids per new GEMM shape of the examples' trace on the h100 preset (its three chip
    sizes together) to keep ~650 (tested against that filter)."""
    lim = MAX_WAVES * units
    pns = _pow2(n)
    for pb in _pow2(batch):
        if pb > lim:
            break
        for pm in _pow2(m):
            bm = pb * pm
            if bm > lim:
                break
            for pn in pns:
                t = bm * pn
                if t > lim:
                    break
                if t > units and t % units:
                    yield pb, pm, pn


def _offer(best: dict, args: tuple, rows: int, cols: int) -> None:
    """Keep (with its :func:`_fit`) the arguments of the split :func:`_tile_split`
    ``(*args)`` unless it is None or a split of the same tile grid dealt to the same units is
    already kept whose arrays' sub-tiles match the ``rows × cols`` array at least as well (the
    split is built only for the arguments kept at the end, by :func:`own_splits`: most offers
    are displaced by a better fit, and building each cost a quarter of a new shape's
    enumeration). The core
    loads its tile's X and W blocks once whatever the sub-grid (the same bytes cross its
    port), so of one core tile's sub-grids the one whose sub-tiles fold best is kept."""
    _, _, batch, m, n, pb, pm, pn, qm, qn, units = args
    # (:func:`_grid` and :func:`_fit` written out: this runs ~1,000 times per new shape)
    mu, nu = max(1, -(-m // pm)), -(-n // pn)
    ms, ns = -(-mu // qm), -(-nu // qn)
    if -(-mu // ms) < qm or -(-nu // ns) < qn:
        return
    bs = -(-batch // pb)
    pb, pm, pn = -(-batch // bs), -(-m // mu), -(-n // nu)
    # (the split's pb, pm, pn, pk, units, and whether a core's arrays share its tile)
    key = (pb, pm, pn, 1, min(pb * pm * pn, units), qm * qn > 1)
    cur = best.get(key)
    a, b = ms / rows, ns / cols
    fit = min(a, b) / max(a, b)
    if cur is None or fit > cur[0]:   # (cur[0]: the kept split's _fit, of its m and n)
        best[key] = (fit, args)       # built once kept for good (:func:`own_splits`)


def _fit(m: int, n: int, rows: int, cols: int) -> float:
    """How square an ``m × n`` sub-tile is in folds of the array (1: as many row folds as
    column folds)."""
    a, b = m / rows, n / cols
    return min(a, b) / max(a, b)


def _grid(batch: int, m: int, n: int, pb: int, pm: int, pn: int, qm: int,
          qn: int) -> tuple | None:
    """A ``pb × pm × pn`` tile grid of (batch, M, N) with ``qm × qn`` sub-tiles per tile, as
    dealt: (batch, M, N per tile; the grid's ways, fewer when a way would be empty; M, N per
    sub-tile), or None when the sub-tiles would leave one of a core's arrays idle."""
    # (ceiling divisions written out: this runs tens of thousands of times per new chip)
    bs, mu, nu = -(-batch // pb), max(1, -(-m // pm)), -(-n // pn)
    ms, ns = -(-mu // qm), -(-nu // qn)
    if -(-mu // ms) < qm or -(-nu // ns) < qn:
        return None
    return bs, mu, nu, -(-batch // bs), -(-m // mu), -(-n // nu), ms, ns


@lru_cache(maxsize=1 << 16)
def _tile_split(cores: int, per_core: int, batch: int, m: int, n: int, pb: int, pm: int,
                pn: int, qm: int, qn: int, units: int) -> Split | None:
    """The split dealing a ``pb × pm × pn`` tile grid to ``units`` units in waves (cores whose
    arrays take ``qm × qn`` sub-tiles when that is > 1, else arrays, spread over the
    ``cores`` cores of ``per_core`` arrays as thinly as they go); None when a core's
    sub-tiles would leave one of its arrays idle."""
    g = _grid(batch, m, n, pb, pm, pn, qm, qn)
    if g is None:
        return None
    bs, _, _, pb, pm, pn, ms, ns = g
    tiles = pb * pm * pn
    waves = _cdiv(tiles, units)
    busy = min(tiles, units)
    tail = tiles - (waves - 1) * units
    q = qm * qn
    if q > 1:
        active, apc = busy * q, q
    else:
        active = busy
        apc = min(per_core, _cdiv(active, cores))
    if waves == 1:
        a_dup, b_dup = pn * qn, pm * qm
    else:
        # a wave is ``units`` consecutive tiles in raster order (N fastest): an A slice is read
        # by the tiles of its row in the wave, a B slice by the rows the wave covers
        a_dup, b_dup = min(pn, units) * qn, max(1, min(pm, units // pn)) * qm
    return _split(pb=pb, pm=pm, pn=pn, batch=bs * waves, m=ms, n=ns, active=active,
                  arrays_per_core=apc, waves=waves,
                  tail_active=tail * q if (waves > 1 and tail < units) else 0, qm=qm, qn=qn,
                  a_dup=a_dup, b_dup=b_dup, pk=1, k=0)


@lru_cache(maxsize=4096)
def _pow2(top: int) -> list[int]:
    """1, 2, 4, ... up to ``top``."""
    return [2 ** i for i in range(max(1, top).bit_length()) if 2 ** i <= top]


@lru_cache(maxsize=4096)
def _ways(top: int) -> list[int]:
    """1, 2, 4, ... up to ``top``, and ``top`` itself."""
    top = max(1, top)
    return sorted({top} | {2 ** i for i in range(40) if 2 ** i <= top})


#: :data:`diptych.workloads.ops.SOURCES` → the engine's location codes.
SRC_CODE = {"dram": E.SRC_DRAM, "scratchpad": E.SRC_SCRATCHPAD,
            "shared_buffer": E.SRC_SHARED_BUFFER}


def op_layout(op, m_total: int, tensor_cores: int = 1, chip=None) -> tuple:
    """The part of :func:`orient` that does not depend on the split or dataflow (element
    bits, DRAM layout strides and bases, residency, and with ``chip`` the expanded copy of
    B's block the capacity holds, :func:`expanded_b_bits`), for a search to compute once per
    op."""
    a_src = SRC_CODE[getattr(op, "a_source", "dram")]
    b_src = SRC_CODE[getattr(op, "b_source", "dram")]
    o_dst = SRC_CODE[getattr(op, "c_dest", "dram")]
    res = _cdiv(getattr(op, "resident_bytes", 0), tensor_cores)
    ab, bb, cb, accb = (_bits(op.a_dtype), _bits(op.b_dtype), _bits(op.c_dtype),
                        _bits(op.acc_dtype))
    k, n = op.k, op.n
    a_ld, b_ld = _cdiv(k * ab, 8), _cdiv(n * bb, 8)
    folded = op.b_is_weight
    a_bs = 0 if folded else m_total * a_ld
    b_bs = 0 if folded else k * b_ld
    a_size = m_total * a_ld * (1 if folded else op.batch)
    b_size = k * b_ld * (1 if folded else op.batch)
    b_base = _cdiv(a_size, _BASE_ALIGN) * _BASE_ALIGN
    c_base = b_base + _cdiv(b_size, _BASE_ALIGN) * _BASE_ALIGN
    # the result's (bits, row bytes, batch stride): at its dtype, and for split-K's partial
    # sums at the accumulator's precision
    outs = tuple((c, _cdiv(n * c, 8), 0 if folded else m_total * _cdiv(n * c, 8))
                 for c in (cb, accb))
    # the expanded B block (A's bits) counted half in each of B's two slots (footprint)
    b_slot = bb + expanded_b_bits(chip, op) // 2
    return (a_src, b_src, o_dst, res, ab, bb, accb, a_ld, b_ld, a_bs, b_bs, b_base, c_base,
            outs, b_slot)


def orient(op, dataflow: str, split: Split, m_total: int, tensor_cores: int = 1,
           layout: tuple | None = None) -> Problem:
    """The per-array problem for ``dataflow`` (IS transposes), with DRAM layout strides and
    the op's residency (``a_source``, ``b_source``, ``c_dest``, ``resident_bytes`` spread
    over ``tensor_cores``; absent: all in DRAM). ``layout``: :func:`op_layout` of the same
    arguments, if already computed. (:func:`split_table` makes a candidate table's inputs
    from the same fields without the Problem: a change here goes there too;
    tests/sim/test_group_table.py compares them.)"""
    (a_src, b_src, o_dst, res, ab, bb, accb, a_ld, b_ld, a_bs, b_bs, b_base, c_base,
     outs, b_slot) = layout or op_layout(op, m_total, tensor_cores)
    # split-K: partial sums leave at the accumulator's precision
    cb, c_ld, c_bs = outs[1 if split.pk > 1 else 0]
    a_dup = split.a_dup or split.pn * split.qn
    b_dup = split.b_dup or split.pm * split.qm
    # the array's share of K (split-K: its first share's addresses stand for all of them)
    k = split.k if split.pk > 1 else op.k
    if dataflow != "is":
        return _problem(dataflow=dataflow, m=split.m, k=k, n=split.n, batch=split.batch,
                        x_bits=ab, w_bits=bb, o_bits=cb, acc_bits=accb, transposed=False,
                        x_ld=a_ld, w_ld=b_ld, o_ld=c_ld, x_bstride=a_bs, w_bstride=b_bs,
                        o_bstride=c_bs, x_base=0, w_base=b_base, o_base=c_base,
                        x_dup=a_dup, w_dup=b_dup, x_cdup=split.qn, w_cdup=split.qm,
                        x_src=a_src, w_src=b_src, o_dst=o_dst, resident_per_core=res,
                        w_slot_bits=b_slot)
    # X = Bᵀ (at b_base), W = Aᵀ (at 0), O = Cᵀ
    return _problem(dataflow=dataflow, m=split.n, k=k, n=split.m, batch=split.batch,
                    x_bits=bb, w_bits=ab, o_bits=cb, acc_bits=accb, transposed=True,
                    x_ld=b_ld, w_ld=a_ld, o_ld=c_ld, x_bstride=b_bs, w_bstride=a_bs,
                    o_bstride=c_bs, x_base=b_base, w_base=0, o_base=c_base,
                    x_dup=b_dup, w_dup=a_dup, x_cdup=split.qm, w_cdup=split.qn,
                    x_src=b_src, w_src=a_src, o_dst=o_dst, resident_per_core=res,
                    x_slot_bits=b_slot)


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
    ip[E.P_WS_LOAD_P], ip[E.P_WS_WAVE] = rates.ws_load_rows_per_cycle, rates.ws_wave
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
    ip[E.P_X_SRC], ip[E.P_W_SRC], ip[E.P_O_DST] = pb.x_src, pb.w_src, pb.o_dst
    fp = np.zeros(E.N_FPARAMS)
    fp[E.F_GHZ], fp[E.F_DMA_BPC], fp[E.F_SHARE] = chip.clock_ghz, per_engine, float(split.active)
    fp[E.F_X_DUP], fp[E.F_W_DUP] = float(pb.x_dup), float(pb.w_dup)
    fp[E.F_SB_BPC] = shared_buffer_bpc(chip, split)
    fp[E.F_SP_BPC] = scratchpad_bpc(chip, split)
    fp[E.F_DRAM_SETUP_NS] = fabric(chip).dram_setup_ns
    fp[E.F_X_CDUP], fp[E.F_W_CDUP] = float(pb.x_cdup), float(pb.w_cdup)
    ip[E.P_TAIL_BT] = split.tail_from
    fp[E.F_SHARE_TAIL] = float(split.tail_active or split.active)
    return ip, fp


def scratchpad_bpc(chip, split: Split) -> float:
    """One array's share of its core's scratchpad bandwidth in bytes per cycle (the rate at
    which resident operands reach its tile slots)."""
    return chip.core.scratchpad.bytes_per_cycle / max(1, split.arrays_per_core)


def shared_buffer_bpc(chip, split: Split) -> float:
    """One array's share of the shared buffer's bandwidth in bytes per cycle (0: none), the
    buffer capped at the NoC's bisection (:mod:`.fabric`)."""
    if chip.shared_buffer is None:     # (as fabric's, without its look-up)
        return 0.0
    return fabric(chip).shared_buffer_bytes_per_cycle / split.active


def dma_share(chip, split: Split) -> tuple[int, float]:
    """(engines, bytes per cycle per engine) available to one array."""
    apc = max(1, split.arrays_per_core)
    engines = max(1, chip.dma.engines // apc)
    per_engine = chip.dma.bytes_per_cycle * chip.dma.engines / (apc * engines)
    return engines, per_engine


def capacity(chip, split: Split, resident_per_core: int = 0) -> tuple[int, int]:
    """(scratchpad bytes, accumulator bytes) available to one array for tiling: its share of
    the core's scratchpad less ``resident_per_core`` (bytes the residency planner keeps
    there), never below the ``[residency] reserve_fraction`` of it."""
    sp = chip.core.scratchpad
    apc = max(1, split.arrays_per_core)
    core = int(sp.capacity_mib * 2**20)
    if resident_per_core:
        core = max(core - resident_per_core,
                   int(core * chip.residency_policy.reserve_fraction))
    return core // apc, int(sp.accumulator_mib * 2**20) // apc


def footprint(pb: Problem, mb: int, kb: int, nb: int, acc_bytes_avail: int) -> int:
    """Scratchpad bytes of a blocking, this array's part (two slots per operand, two output
    tiles; an operand block shared by ``cdup`` arrays of the core counts ``1/cdup``; an
    expanded copy of B's block, :func:`expanded_b_bits`, half in each of B's slots:
    ``Problem.x_slot_bits``/``w_slot_bits``)."""
    x = 2 * _cdiv(_cdiv(mb * kb * pb.x_cap_bits, 8), pb.x_cdup)
    w = 2 * _cdiv(_cdiv(kb * nb * pb.w_cap_bits, 8), pb.w_cdup)
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
    cap, acc = capacity(chip, split, pb.resident_per_core)
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
    xd = (x if blk.x_sb == 2 else xt) / (pb.x_dup if blk.x_sb else pb.x_cdup)
    wd = (w if blk.w_sb == 2 else wt) / (pb.w_dup if blk.w_sb else pb.w_cdup)
    # resident operands move no DRAM byte (exact zeros: the all-DRAM sum is unchanged)
    return pb.batch * ((0.0 if pb.x_src else xd) + (0.0 if pb.w_src else wd)
                       + (0.0 if pb.o_dst else o))


def shared_buffer_bytes(pb: Problem, blk: Blocks) -> float:
    """Bytes this array reads from the shared buffer: mode-2 re-reads and operands resident
    there (its core reads a block once for the ``cdup`` arrays sharing it; a result kept there
    is a write, counted as SRAM bytes)."""
    x, xt, w, wt, o = _loads(pb, blk)
    return pb.batch * (((xt - x) / pb.x_cdup if blk.x_sb == 2 else 0.0)
                       + ((wt - w) / pb.w_cdup if blk.w_sb == 2 else 0.0)
                       + (xt / pb.x_cdup if pb.x_src == E.SRC_SHARED_BUFFER else 0.0)
                       + (wt / pb.w_cdup if pb.w_src == E.SRC_SHARED_BUFFER else 0.0))


def port_bytes(pb: Problem, blk: Blocks) -> float:
    """Bytes through this array's share of its core's DMA port: every load from DRAM or the
    shared buffer (``1/cdup`` of a block the core's arrays share) and every write-back that
    leaves the scratchpad (operands resident in the scratchpad move within it)."""
    x, xt, w, wt, o = _loads(pb, blk)
    sp = E.SRC_SCRATCHPAD
    return pb.batch * ((0.0 if pb.x_src == sp else xt / pb.x_cdup)
                       + (0.0 if pb.w_src == sp else wt / pb.w_cdup)
                       + (0.0 if pb.o_dst == sp else o))


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
    # mode 1 changes something when more arrays than the core's own share the slice; a
    # resident operand is already on chip: no shared-buffer mode for it
    xm = [(0, 0.0)] + ([(1, x1)] if pb.x_dup > pb.x_cdup and not pb.x_src else []) + (
        [(2, x2)] if xt > x and not pb.x_src else [])
    wm = [(0, 0.0)] + ([(1, w1)] if pb.w_dup > pb.w_cdup and not pb.w_src else []) + (
        [(2, w2)] if wt > w and not pb.w_src else [])
    fits = {(a, b) for a, sa in xm for b, sb in wm if sa + sb <= cap}
    # mode 1 only lightens DRAM (same loads, each shared by dup arrays), so where it fits it
    # dominates mode 0 for the same blocking and other operand's mode: mode 0 is dropped
    keep = {(a, b) for a, b in fits
            if not (a == 0 and (1, b) in fits) and not (b == 0 and (a, 1) in fits)}
    # mode 2 dominates modes 0 and 1 where the buffer serves a re-read at least as fast as the
    # DRAM pins would (its bandwidth ≥ dup × the pins': the DRAM transfer it replaces is
    # time-shared by active/dup arrays, the buffer by active) and it fits
    pin_bpc = pin_bytes_per_s(chip) / chip.clock_hz
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
                    f = _cdiv(mb, R) * _cdiv(nb, C) * \
                        T.os_fold_steps(kb, rates.os_num, rates.os_den)
                else:
                    f = _cdiv(kb, rates.stationary_rows) * _cdiv(nb, C) * \
                        T.ws_fold_rows(mb, rates.ws_num, rates.ws_den)
                total += f * cm * ck * cn
    return pb.batch * total


def period_cycles(chip, pb: Problem, blk: Blocks, rates: Rates) -> int:
    """Sum of every fold's steady-state period: a lower bound on the memory-free cycles
    (OS: Σ max(ke, R); WS: Σ max(me, 2R + C − 2), with a faster install path
    ``max(me, I + R + C − 2)`` or ``max(me, I)``, ``I = ceil(R / p)``; the first fold's fill and
    the last fold's drain exceed the period they replace)."""
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    total = 0
    for mb, cm in _parts(pb.m, blk.mb):
        for kb, ck in _parts(pb.k, blk.kb):
            for nb, cn in _parts(pb.n, blk.nb):
                if pb.dataflow == "os":
                    ke = T.os_fold_steps(kb, rates.os_num, rates.os_den)
                    f = _cdiv(mb, R) * _cdiv(nb, C) * T.os_period(R, ke)
                else:
                    me = T.ws_fold_rows(mb, rates.ws_num, rates.ws_den)
                    f = (_cdiv(kb, rates.stationary_rows) * _cdiv(nb, C)
                         * _ws_period(R, C, me, rates))
                total += f * cm * ck * cn
    return pb.batch * total


def compute_cycles(chip, pb: Problem, blk: Blocks, rates: Rates) -> int:
    """Exact memory-free cycles of a blocking (closed form of the engine's recurrence).

    OS: ``L`` advances by ``max(ke, R)`` per fold after the first, which ends at ``ke − 1``;
    the last output is ``L + 2R + C − 2``. WS: the first row of fold t+1 is
    ``max(s_t + 2R + C − 2, s_t + me_t)`` (``ws_period``: with a faster install path ``2R``
    becomes ``ceil(R / p) + R``, or the period ``max(ceil(R / p), me_t)`` with a global swap),
    the first fold's is R (``ceil(R / p)``), the last output
    ``s_last + me_last − 1 + R + C − 1``. The first fold belongs to block (0, 0, 0), the last
    to the block with every index at its maximum (ragged edges).
    """
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    total = period_cycles(chip, pb, blk, rates)
    k0 = min(blk.kb, pb.k)
    ml = pb.m - (_cdiv(pb.m, blk.mb) - 1) * blk.mb
    if pb.dataflow == "os":
        # the first fold's last step is ke0 − 1 instead of a period after the previous one
        ke0 = T.os_fold_steps(k0, rates.os_num, rates.os_den)
        return T.os_last_output(total - T.os_period(R, ke0) + ke0 - 1, R, C) + 1
    # the first fold's first row is R (weights from cycle 0); the last fold streams mel rows
    mel = T.ws_fold_rows(ml, rates.ws_num, rates.ws_den)
    first = T.ws_first_row(0, -1, R, rates.ws_load_rows_per_cycle)
    return T.ws_row_output(first + total - _ws_period(R, C, mel, rates) + mel - 1, R, C) + 1


def _ws_period(R: int, C: int, me: int, rates: Rates) -> int:
    """``timing.ws_period`` with the array's weight-install path."""
    return T.ws_period(R, C, me, rates.ws_load_rows_per_cycle, rates.ws_wave)


def edge_bytes(pb: Problem, blk: Blocks) -> float:
    """Bytes that must cross DRAM before the first fold (first X and W blocks, this array's
    part of them) plus after the last one (the last output tile)."""
    return sum(_edge_parts(pb, blk))


def _edge_parts(pb: Problem, blk: Blocks) -> tuple[float, float]:
    """DRAM bytes of the first X and W blocks and of the last output tile (resident operands:
    none)."""
    m0, k0, n0 = min(blk.mb, pb.m), min(blk.kb, pb.k), min(blk.nb, pb.n)
    ml = pb.m - (_cdiv(pb.m, blk.mb) - 1) * blk.mb
    nl = pb.n - (_cdiv(pb.n, blk.nb) - 1) * blk.nb
    xdiv = pb.x_dup if blk.x_sb else pb.x_cdup
    wdiv = pb.w_dup if blk.w_sb else pb.w_cdup
    return (((0.0 if pb.x_src else m0 * k0 * pb.x_bits / xdiv)
             + (0.0 if pb.w_src else k0 * n0 * pb.w_bits / wdiv)) / 8,
            0.0 if pb.o_dst else ml * nl * pb.o_bits / 8)


def edge_cycles(chip, pb: Problem, blk: Blocks, peak_bpc: float, tail_ratio: float = 1.0) -> float:
    """Cycles a run must add to its memory-free cycles: the first blocks' loads and the last
    tile's write-back each take a DMA setup, then at least the DRAM latency (tRCD + tCL) and
    at least their bytes at the array's share of the pins (the aggregate server; the last
    write-back at the last wave's share, ``tail_ratio`` of a full wave's time). With resident
    operands: the DRAM terms only where an operand of that end crosses DRAM, the setup only
    where one goes through the DMA (DRAM or the shared buffer)."""
    t = dram_timing(chip)
    lat = (t.t_rcd_ns + t.t_cl_ns) * chip.clock_ghz
    e_in, e_out = _edge_parts(pb, blk)
    if not (pb.x_src or pb.w_src or pb.o_dst):
        return (2 * chip.dma.setup_cycles + max(e_in / peak_bpc, lat)
                + max(e_out * tail_ratio / peak_bpc, lat))
    s = chip.dma.setup_cycles
    dram_in = not pb.x_src or not pb.w_src
    dma_in = dram_in or pb.x_src == E.SRC_SHARED_BUFFER or pb.w_src == E.SRC_SHARED_BUFFER
    e = (s if dma_in else 0) + (max(e_in / peak_bpc, lat) if dram_in else 0.0)
    return e + ((s + max(e_out * tail_ratio / peak_bpc, lat)) if not pb.o_dst
                else (s if pb.o_dst == E.SRC_SHARED_BUFFER else 0))


def _parts(extent: int, block: int):
    full, rem = divmod(extent, block)
    out = []
    if full:
        out.append((block, full))
    if rem:
        out.append((rem, 1))
    return out


def group_floor(chip, pb: Problem, rates: Rates, split: Split, peak_bpc: float) -> float:
    """A bound below every candidate's estimate and lower bound for this split and dataflow:
    max(MACs at the array's peak rate, the fewest DRAM bytes any mode can move at the array's
    share of the pins). Operands cross DRAM at least once per array, or once per ``dup``
    arrays with a shared buffer."""
    arr = chip.core.array
    macs = pb.batch * pb.m * pb.k * pb.n
    busy = macs / (arr.rows * arr.cols * rates.rate)
    x = 0.0 if pb.x_src else pb.m * pb.k * pb.x_bits / 8
    w = 0.0 if pb.w_src else pb.k * pb.n * pb.w_bits / 8
    o = 0.0 if pb.o_dst else pb.m * pb.n * pb.o_bits / 8
    if chip.shared_buffer is not None:
        x, w = x / pb.x_dup, w / pb.w_dup
    else:
        x, w = x / pb.x_cdup, w / pb.w_cdup
    # 1e-9: float rounding must not lift the floor above a candidate's own numbers
    return max(busy, pb.batch * (x + w + o) * split.dram_weight() / peak_bpc) * (1.0 - 1e-9)


def fold_floor(R: int, C: int, dataflow: str, batch: int, m: int, k: int, n: int,
               rates: Rates) -> int:
    """The fewest memory-free cycles any blocking of a ``batch × (m × k) · (k × n)`` problem
    (oriented: IS passes Cᵀ's m and n) can take on an ``R × C`` array: a bound on
    :func:`period_cycles`, hence on :func:`compute_cycles`, the estimate and the lower bound
    of every candidate of its group (and on the engine's cycles). It counts the array's folds,
    which ``MACs / peak`` does not for few-row or short problems:

    * OS: every output tile takes ``ceil(m / R) · ceil(n / C)`` folds at least (a sum of
      ceilings bounds the ceiling of the sum), each K chain at least
      ``max(os_fold_steps(k), R)`` steps (each fold's period is ``max(ke, R)``).
    * WS/IS: ``ceil(k / Rk) · ceil(n / C)`` weight installs at least, each streaming the
      M blocks at least ``ws_period(ws_fold_rows(m))`` (each fold's period is
      ``max(install path, me)``, and the install path does not depend on ``me``).

    A fold's fill and drain only add to its period (``compute_cycles`` ≥ ``period_cycles``;
    tests/sim/test_fold_floor.py checks it against the engine and the candidate tables)."""
    if dataflow == "os":
        return batch * _cdiv(m, R) * _cdiv(n, C) * T.os_period(
            R, T.os_fold_steps(k, rates.os_num, rates.os_den))
    return batch * _cdiv(k, rates.stationary_rows) * _cdiv(n, C) * _ws_period(
        R, C, T.ws_fold_rows(m, rates.ws_num, rates.ws_den), rates)


def split_fold_floor(chip, dataflow: str, split: Split, k_total: int, rates: Rates) -> int:
    """:func:`fold_floor` of the problem ``orient`` gives ``split`` for ``dataflow`` (the
    array's share of K with split-K; IS transposes M and N)."""
    arr = chip.core.array
    k = split.k if split.pk > 1 else k_total
    m, n = (split.n, split.m) if dataflow == "is" else (split.m, split.n)
    return fold_floor(arr.rows, arr.cols, dataflow, split.batch, m, k, n, rates)


def split_floor(chip, layout: tuple, dataflow: str, split: Split, k_total: int, rates: Rates,
                peak_bpc: float) -> float:
    """:func:`group_floor` of ``orient(op, dataflow, split, ...)`` (``layout``: its
    :func:`op_layout`, ``k_total``: the op's K) without building the :class:`Problem`: the
    same numbers in the same order (the search asks it for every split of every op;
    tests/sim/test_split_floor.py compares the two bit for bit)."""
    (a_src, b_src, o_dst, _, ab, bb, _, _, _, _, _, _, _, outs, _) = layout
    cb = outs[1 if split.pk > 1 else 0][0]
    k = split.k if split.pk > 1 else k_total
    a_dup = split.a_dup or split.pn * split.qn
    b_dup = split.b_dup or split.pm * split.qm
    if dataflow != "is":
        m, n, x_bits, w_bits, x_src, w_src = split.m, split.n, ab, bb, a_src, b_src
        x_dup, w_dup, x_cdup, w_cdup = a_dup, b_dup, split.qn, split.qm
    else:
        m, n, x_bits, w_bits, x_src, w_src = split.n, split.m, bb, ab, b_src, a_src
        x_dup, w_dup, x_cdup, w_cdup = b_dup, a_dup, split.qm, split.qn
    batch = split.batch
    arr = chip.core.array
    busy = batch * m * k * n / (arr.rows * arr.cols * rates.rate)
    x = 0.0 if x_src else m * k * x_bits / 8
    w = 0.0 if w_src else k * n * w_bits / 8
    o = 0.0 if o_dst else m * n * cb / 8
    if chip.shared_buffer is not None:
        x, w = x / x_dup, w / w_dup
    else:
        x, w = x / x_cdup, w / w_cdup
    return max(busy, batch * (x + w + o) * split.dram_weight() / peak_bpc) * (1.0 - 1e-9)


def split_floors(chip, layout: tuple, dataflow: str, splits, k_total: int, rates: Rates,
                 pin_bytes_s: float) -> list[tuple[float, float]]:
    """(peak bytes per cycle, :func:`split_floor`) of each split, the peak being the array's
    share of the pins (``pin_bytes_s`` / clock / ``active``): the same numbers in the same
    order of operations, with the chip's and the op's part looked up once for all the
    splits (the search asks it for every split of every op; tests/sim/test_split_floor.py
    compares them)."""
    (a_src, b_src, o_dst, _, ab, bb, _, _, _, _, _, _, _, outs, _) = layout
    arr = chip.core.array
    rate = arr.rows * arr.cols * rates.rate
    hz = chip.clock_hz
    sb = chip.shared_buffer is not None
    cb0, cb1 = outs[0][0], outs[1][0]
    transposed = dataflow == "is"
    out = []
    for split in splits:
        peak_bpc = pin_bytes_s / hz / split.active
        pk, qm, qn = split.pk, split.qm, split.qn
        cb = cb1 if pk > 1 else cb0
        k = split.k if pk > 1 else k_total
        a_dup = split.a_dup or split.pn * qn
        b_dup = split.b_dup or split.pm * qm
        if not transposed:
            m, n, x_bits, w_bits, x_src, w_src = split.m, split.n, ab, bb, a_src, b_src
            x_dup, w_dup, x_cdup, w_cdup = a_dup, b_dup, qn, qm
        else:
            m, n, x_bits, w_bits, x_src, w_src = split.n, split.m, bb, ab, b_src, a_src
            x_dup, w_dup, x_cdup, w_cdup = b_dup, a_dup, qm, qn
        batch = split.batch
        busy = batch * m * k * n / rate
        x = 0.0 if x_src else m * k * x_bits / 8
        w = 0.0 if w_src else k * n * w_bits / 8
        o = 0.0 if o_dst else m * n * cb / 8
        if sb:
            x, w = x / x_dup, w / w_dup
        else:
            x, w = x / x_cdup, w / w_cdup
        out.append((peak_bpc, max(busy, batch * (x + w + o) * split.dram_weight() / peak_bpc)
                    * (1.0 - 1e-9)))
    return out


#: Integers at most this large convert to float64 exactly: :func:`split_floor_arrays` and
#: :func:`split_fold_floor_array` compute in int64 and float64 only below it (so that their
#: numbers equal the Python scalars' bit for bit; above it the callers use the scalars).
EXACT_INT = 2 ** 53


def split_floor_arrays(chip, layout: tuple, dataflow: str, rows: np.ndarray, k_total: int,
                       rates: Rates, pin_bytes_s: float):
    """:func:`split_floors` of the splits given as :func:`split_rows`' rows, vectorised:
    (peak bytes per cycle, floor) as two float64 arrays, the same numbers (each element
    takes the same IEEE operations in the same order: tests/sim/test_split_kernels.py
    compares them bit for bit); None when a product of the split's integers reaches
    :data:`EXACT_INT` (the caller then uses :func:`split_floors`)."""
    (a_src, b_src, o_dst, _, ab, bb, _, _, _, _, _, _, _, outs, _) = layout
    arr = chip.core.array
    rate = arr.rows * arr.cols * rates.rate
    sb = chip.shared_buffer is not None
    r = rows.T
    pk, qm, qn, active = r[SK.F_PK], r[SK.F_QM], r[SK.F_QN], r[SK.F_ACTIVE]
    split_k = pk > 1
    k = np.where(split_k, r[SK.F_K], k_total)
    cb = np.where(split_k, outs[1][0], outs[0][0])
    a_dup = np.where(r[SK.F_ADUP] != 0, r[SK.F_ADUP], r[SK.F_PN] * qn)
    b_dup = np.where(r[SK.F_BDUP] != 0, r[SK.F_BDUP], r[SK.F_PM] * qm)
    batch, m, n = r[SK.F_BATCH], r[SK.F_M], r[SK.F_N]
    if dataflow == "is":
        m, n, x_bits, w_bits, x_src, w_src = n, m, bb, ab, b_src, a_src
        x_dup, w_dup, x_cdup, w_cdup = b_dup, a_dup, qm, qn
    else:
        x_bits, w_bits, x_src, w_src = ab, bb, a_src, b_src
        x_dup, w_dup, x_cdup, w_cdup = a_dup, b_dup, qn, qm
    # (every integer below EXACT_INT: the int64 products are exact and convert exactly)
    top = max(ab, bb, int(cb.max(initial=0)), 1)
    if len(rows) and float(batch.max()) * float(m.max()) * float(k.max()) * float(n.max()) \
            * top >= EXACT_INT / 2:
        return None
    peak = pin_bytes_s / chip.clock_hz / active
    busy = (batch * m * k * n) / rate
    x = np.zeros(len(rows)) if x_src else (m * k * x_bits) / 8
    w = np.zeros(len(rows)) if w_src else (k * n * w_bits) / 8
    o = np.zeros(len(rows)) if o_dst else (m * n * cb) / 8
    if sb:
        x, w = x / x_dup, w / w_dup
    else:
        x, w = x / x_cdup, w / w_cdup
    waves, tail = r[SK.F_WAVES], r[SK.F_TAIL]
    weight = np.where(tail != 0, ((waves - 1) + tail / active) / waves, 1.0)
    floor = np.maximum(busy, batch * (x + w + o) * weight / peak) * (1.0 - 1e-9)
    return peak, floor


def split_fold_floor_array(chip, dataflow: str, rows: np.ndarray, k_total: int,
                           rates: Rates) -> np.ndarray | None:
    """:func:`split_fold_floor` of each split of :func:`split_rows`' rows (int64), the
    timing closed forms evaluated once per distinct K (OS) or M (WS, IS); None when a product
    reaches :data:`EXACT_INT`."""
    arr = chip.core.array
    R, C = arr.rows, arr.cols
    r = rows.T
    k = np.where(r[SK.F_PK] > 1, r[SK.F_K], k_total)
    batch, m, n = r[SK.F_BATCH], r[SK.F_M], r[SK.F_N]
    if dataflow == "is":
        m, n = n, m
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    if dataflow == "os":
        ks, inv = np.unique(k, return_inverse=True)
        per = np.array([T.os_period(R, T.os_fold_steps(v, rates.os_num, rates.os_den))
                        for v in ks.tolist()], dtype=np.int64)[inv.ravel()]
        a, b = -(-m // R), -(-n // C)
    else:
        ms, inv = np.unique(m, return_inverse=True)
        per = np.array([_ws_period(R, C, T.ws_fold_rows(v, rates.ws_num, rates.ws_den), rates)
                        for v in ms.tolist()], dtype=np.int64)[inv.ravel()]
        a, b = -(-k // rates.stationary_rows), -(-n // C)
    if float(batch.max()) * float(a.max()) * float(b.max()) * float(per.max()) >= \
            EXACT_INT / 2:
        return None
    return batch * a * b * per


class BlockTable:
    """A vector of :class:`Blocks` kept as NumPy columns (built lazily when indexed).

    :func:`candidate_table` makes one from its kernel's rows (:meth:`of_rows`): the columns
    are then views of ``rows`` made on first access (the search reads the rows only)."""

    def __init__(self, mb, kb, nb, order, x_sb, w_sb):
        self.mb, self.kb, self.nb, self.order, self.x_sb, self.w_sb = mb, kb, nb, order, x_sb, w_sb
        self.periods = None   # filled by candidate_table: period_cycles of each candidate,
        self.traffic = None   # int(traffic_bytes) of each (the engine's P_TRAFFIC)
        self.blocks = None    # and the blocks of each one's schedule (blocks_count)
        self.rows = None      # (candidate_table) every column above, one row a candidate

    @classmethod
    def of_rows(cls, rows: np.ndarray) -> BlockTable:
        """The table of :func:`mapper_kernels.candidate_table`'s rows (``T_*`` columns)."""
        cs = cls.__new__(cls)
        cs.rows = rows
        return cs

    _COLUMNS = {"mb": MK.T_MB, "kb": MK.T_KB, "nb": MK.T_NB, "order": MK.T_ORDER,
                "x_sb": MK.T_XSB, "w_sb": MK.T_WSB, "periods": MK.T_PERIODS,
                "traffic": MK.T_TRAFFIC, "blocks": MK.T_BLOCKS}

    def __getattr__(self, name):
        # (only for a column not yet set: a table of rows makes its view on first access)
        c = BlockTable._COLUMNS.get(name)
        if c is None or self.__dict__.get("rows") is None:
            raise AttributeError(name)
        col = self.rows[:, c]
        setattr(self, name, col)
        return col

    def __len__(self):
        return len(self.rows) if self.rows is not None else len(self.mb)

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
    90 % of the shared-buffer share) + one DMA setup per block per engine. The table's rows
    also hold each candidate's :func:`mapper_kernels.chain_bound` (``MK.T_CHAIN``), at most
    its engine cycles, which ``gemm.plan`` uses to skip runs that cannot win.
    """
    arr = chip.core.array
    cap, acc = capacity(chip, split, pb.resident_per_core)
    kbase = arr.rows if pb.dataflow == "os" else rates.stationary_rows
    mb, kb, nb, order = MK.blockings(arr.rows, arr.cols, kbase, pb.m, pb.k, pb.n,
                                     pb.x_cap_bits, pb.w_cap_bits, pb.acc_bits, cap, acc,
                                     pb.x_cdup, pb.w_cdup)
    if len(mb) == 0:
        candidates(chip, pb, rates, split)   # raises the explanatory ValueError
    if chip.shared_buffer is not None:
        sv, sb_cap = _sb_vector(chip, pb, split)
        idx, xsb, wsb = MK.shared_buffer_variants(mb, kb, nb, order, sv, sb_cap)
        mb, kb, nb, order = mb[idx], kb[idx], nb[idx], order[idx]
    else:
        xsb, wsb = np.zeros(len(mb), dtype=np.int64), np.zeros(len(mb), dtype=np.int64)
    iv, fv = _table_vectors(chip, pb, rates, split, peak_bpc)
    rows, est, lb = MK.table_numbers(mb, kb, nb, order, xsb, wsb, iv, fv)
    cs = BlockTable.of_rows(rows)
    return cs, est, lb



def search_inputs(chip, rates: Rates, layout: tuple, k_total: int) -> tuple:
    """What :func:`split_table` reads of the chip, the rates and the op (its
    :func:`op_layout` ``layout`` and its K), derived once per search."""
    (a_src, b_src, o_dst, res, ab, bb, accb, a_ld, b_ld, _, _, _, _, outs,
     b_slot) = layout
    arr = chip.core.array
    sp = chip.core.scratchpad
    core = int(sp.capacity_mib * 2**20)
    setup, ghz, lat, trefi, blackout, pin_bpc, sb_total, sb_cap, fab_lat, burst = \
        _chip_consts(chip)
    return (arr.rows, arr.cols, rates.stationary_rows, rates.os_num, rates.os_den,
            rates.ws_num, rates.ws_den, setup, rates.ws_load_rows_per_cycle, rates.ws_wave,
            burst, a_src, b_src, o_dst, res, ab, bb, accb, a_ld, b_ld, outs[0][0], outs[1][0],
            b_slot, k_total, core, int(core * chip.residency_policy.reserve_fraction),
            int(sp.accumulator_mib * 2**20), chip.dma.engines,
            chip.dma.bytes_per_cycle * chip.dma.engines, sp.bytes_per_cycle, ghz, lat, trefi,
            blackout, fab_lat, chip.shared_buffer is not None, sb_total, pin_bpc, sb_cap)


class NoFit(ValueError):
    """No blocking of a group fits its scratchpad share (:func:`split_table` with
    ``explain=False``): the explanatory ValueError of :func:`candidates` is only built when it
    is raised (:meth:`explained`), since a search that finds another group's mapping never
    shows it (its Python loop over the blockings was ~10 % of a sweep point's time on chips
    with little SRAM)."""

    def __init__(self, build):
        super().__init__("no blocking fits the scratchpad (NoFit.explained: the message)")
        self.build = build

    def explained(self) -> ValueError:
        """The explanatory ValueError itself (:func:`candidates`')."""
        try:
            self.build()
        except ValueError as exc:
            return exc
        raise AssertionError("candidates() found a blocking that blockings() did not")


def split_table(chip, rates: Rates, inputs: tuple, op, dataflow: str, split: Split,
                m_total: int, layout: tuple, peak_bpc: float, extra: int = 0,
                explain: bool = True):
    """An opened group's table: :func:`candidate_table` of ``op`` (the search's view,
    :func:`orient`'s argument) on ``split`` in ``dataflow``, ``extra`` cycles (a split-K
    reduction's) added to its estimates and bounds, and their stable order by estimate:
    (BlockTable, order, est[order], lb[order]), the numbers of :func:`group_table_reference`
    on :func:`orient`'s problem (the tests compare them). The problem is not oriented: the
    kernels' inputs are made from the split's fields and the search's ``inputs``
    (:func:`search_inputs` of ``layout``, the op's :func:`op_layout`) with the operations of
    :func:`orient`, :func:`capacity`, :func:`dma_share`, :func:`_table_vectors` and
    :func:`_sb_vector`. ValueError (:func:`candidates`') when no blocking fits; with
    ``explain`` False a :class:`NoFit` instead, which builds that error only when asked."""
    (R, C, RK, os_num, os_den, ws_num, ws_den, setup, ws_lp, ws_wave, burst, a_src, b_src,
     o_dst, res, ab, bb, accb, a_ld, b_ld, cb, pbits, b_slot, k_total, core, reserve,
     acc_total, dma_engines, dma_total, sp_bpc, ghz, lat, trefi, blackout, fab_lat, sb_on,
     sb_total, pin_bpc, sb_cap) = inputs
    sp = split
    a_dup = sp.a_dup or sp.pn * sp.qn
    b_dup = sp.b_dup or sp.pm * sp.qm
    k = sp.k if sp.pk > 1 else k_total
    if dataflow == "is":      # X = Bᵀ, W = Aᵀ
        m, n, xb, wb, xld, wld, xsrc, wsrc = sp.n, sp.m, bb, ab, b_ld, a_ld, b_src, a_src
        xdup, wdup, xcd, wcd = b_dup, a_dup, sp.qm, sp.qn
        xcap, wcap, trans = b_slot or bb, ab, 1
    else:
        m, n, xb, wb, xld, wld, xsrc, wsrc = sp.m, sp.n, ab, bb, a_ld, b_ld, a_src, b_src
        xdup, wdup, xcd, wcd = a_dup, b_dup, sp.qn, sp.qm
        xcap, wcap, trans = ab, b_slot or bb, 0
    apc = max(1, sp.arrays_per_core)
    engines = max(1, dma_engines // apc)
    if res:
        core = max(core - res, reserve)
    iv = np.array((1 if dataflow == "os" else 0, R, C, RK, os_num, os_den, ws_num, ws_den,
                   m, k, n, sp.batch, xb, wb, pbits if sp.pk > 1 else cb, xdup, wdup, setup,
                   engines, xsrc, wsrc, o_dst, xcd, wcd, ws_lp, ws_wave, trans, xld, wld, burst),
                  dtype=np.int64)
    fv = np.array((peak_bpc, ghz, lat, trefi, blackout, dma_total / (apc * engines),
                   sb_total / sp.active if sb_on else 0.0, sp_bpc / apc, sp.dram_weight(),
                   sp.tail_ratio(), fab_lat), dtype=np.float64)
    mb, kb, nb, order = MK.blockings(R, C, R if dataflow == "os" else RK, m, k, n, xcap,
                                     wcap, accb, core // apc, acc_total // apc, xcd, wcd)
    if len(mb) == 0:    # raises the explanatory ValueError (or a NoFit that builds it)
        def build():
            candidates(chip, orient(op, dataflow, split, m_total, chip.tensor_cores, layout),
                       rates, split)
        if not explain:
            raise NoFit(build)
        build()
    if sb_on:
        sv = np.array((m, k, n, xb, wb, xdup, wdup, sp.active, sb_total >= xdup * pin_bpc,
                       sb_total >= wdup * pin_bpc, xsrc != 0, wsrc != 0, xcd, wcd),
                      dtype=np.int64)
        idx, xsb, wsb = MK.shared_buffer_variants(mb, kb, nb, order, sv, sb_cap)
        mb, kb, nb, order = mb[idx], kb[idx], nb[idx], order[idx]
    else:
        xsb = wsb = np.zeros(len(mb), dtype=np.int64)      # (read only)
    rows, est, lb = MK.table_numbers(mb, kb, nb, order, xsb, wsb, iv, fv)
    if extra:
        est, lb = est + extra, lb + extra
    srt = np.argsort(est, kind="stable")
    return BlockTable.of_rows(rows), srt, est[srt], lb[srt]


def group_table_reference(chip, pb: Problem, rates: Rates, split: Split, peak_bpc: float,
                          extra: int = 0):
    """:func:`split_table` made the plain way on the oriented problem ``pb``:
    :func:`candidate_table`, ``extra`` cycles added to ``est`` and ``lb``, a stable NumPy
    argsort; (BlockTable, order, est[order], lb[order]) (``gemm.plan(reference=True)``)."""
    cs, est, lb = candidate_table(chip, pb, rates, split, peak_bpc)
    if extra:
        est, lb = est + extra, lb + extra
    order = np.argsort(est, kind="stable")
    return cs, order, est[order], lb[order]


#: The order of :func:`mapper_kernels.table_numbers`' integer and float inputs, as
#: :func:`_table_vectors` lists them (one array built from a list: it runs once per group).
_IV_ORDER = (MK.K_OS, MK.K_R, MK.K_C, MK.K_RK, MK.K_OS_NUM, MK.K_OS_DEN, MK.K_WS_NUM,
             MK.K_WS_DEN, MK.K_M, MK.K_K, MK.K_N, MK.K_BATCH, MK.K_XBITS, MK.K_WBITS,
             MK.K_OBITS, MK.K_XDUP, MK.K_WDUP, MK.K_SETUP, MK.K_ENGINES, MK.K_XSRC, MK.K_WSRC,
             MK.K_ODST, MK.K_XCDUP, MK.K_WCDUP, MK.K_WS_LOAD_P, MK.K_WS_WAVE, MK.K_TRANS,
             MK.K_XLD, MK.K_WLD, MK.K_BURST)
_FV_ORDER = (MK.G_PEAK, MK.G_GHZ, MK.G_LAT, MK.G_TREFI, MK.G_BLACKOUT, MK.G_PER_ENGINE,
             MK.G_SB_BPC, MK.G_SP_BPC, MK.G_DRAM_W, MK.G_TAIL_R, MK.G_FABRIC)
assert _IV_ORDER == tuple(range(MK.N_K)) and _FV_ORDER == tuple(range(MK.N_G))


@lru_cache(maxsize=256)
def _chip_consts(chip) -> tuple:
    """The chip-only inputs of a candidate table, derived once per chip: (setup cycles,
    clock GHz, DRAM latency tRCD + tCL in cycles, tREFI ns, refresh blackout ns, pin bytes
    per cycle, shared-buffer bytes per cycle and capacity bytes (0 without one), the NoC/D2D
    latency of a DRAM descriptor in cycles, the DRAM burst bytes)."""
    t = dram_timing(chip)
    sb = chip.shared_buffer
    return (chip.dma.setup_cycles, chip.clock_ghz, (t.t_rcd_ns + t.t_cl_ns) * chip.clock_ghz,
            t.t_refi_ns, t.t_rfc_ns + t.t_rcd_ns + t.t_cl_ns,
            pin_bytes_per_s(chip) / chip.clock_hz,
            fabric(chip).shared_buffer_bytes_per_cycle if sb is not None else 0.0,
            float(sb.capacity_bytes) if sb is not None else 0.0,
            fabric(chip).dram_setup_ns * chip.clock_ghz, t.burst_bytes)


def _table_vectors(chip, pb: Problem, rates: Rates, split: Split, peak_bpc: float):
    """The scalar inputs of :func:`mapper_kernels.table_numbers` (in :data:`_IV_ORDER`,
    :data:`_FV_ORDER`; the search's :func:`split_table` makes the same ones)."""
    arr = chip.core.array
    engines, per_engine = dma_share(chip, split)
    setup, ghz, lat, trefi, blackout, _, sb_total, _, fab_lat, burst = _chip_consts(chip)
    # (shared_buffer_bpc without its look-ups: the buffer's bytes per cycle over the active)
    sb_bpc = sb_total / split.active if chip.shared_buffer is not None else 0.0
    iv = np.array((1 if pb.dataflow == "os" else 0, arr.rows, arr.cols, rates.stationary_rows,
                   rates.os_num, rates.os_den, rates.ws_num, rates.ws_den,
                   pb.m, pb.k, pb.n, pb.batch, pb.x_bits, pb.w_bits, pb.o_bits,
                   pb.x_dup, pb.w_dup, setup, engines,
                   pb.x_src, pb.w_src, pb.o_dst, pb.x_cdup, pb.w_cdup,
                   rates.ws_load_rows_per_cycle, rates.ws_wave, 1 if pb.transposed else 0,
                   pb.x_ld, pb.w_ld, burst), dtype=np.int64)
    fv = np.array((peak_bpc, ghz, lat, trefi, blackout,
                   per_engine, sb_bpc, scratchpad_bpc(chip, split),
                   split.dram_weight(), split.tail_ratio(), fab_lat), dtype=np.float64)
    return iv, fv


#: The order of :func:`mapper_kernels.shared_buffer_variants`' integer inputs as
#: :func:`_shared_buffer_variants` lists them.
_SV_ORDER = (MK.S_M, MK.S_K, MK.S_N, MK.S_XBITS, MK.S_WBITS, MK.S_XDUP, MK.S_WDUP, MK.S_ACTIVE,
             MK.S_XFAST, MK.S_WFAST, MK.S_XRES, MK.S_WRES, MK.S_XCDUP, MK.S_WCDUP)
assert _SV_ORDER == tuple(range(MK.N_S))


def _sb_vector(chip, pb: Problem, split: Split) -> tuple[np.ndarray, float]:
    """The inputs of :func:`mapper_kernels.shared_buffer_variants`
    (:func:`shared_buffer_modes` compiled) for ``pb`` on ``split``: its integer vector (in
    :data:`_SV_ORDER`) and the buffer's capacity in bytes."""
    pin_bpc, sb_total, sb_cap = _chip_consts(chip)[5:8]
    sv = np.array((pb.m, pb.k, pb.n, pb.x_bits, pb.w_bits, pb.x_dup, pb.w_dup, split.active,
                   sb_total >= pb.x_dup * pin_bpc, sb_total >= pb.w_dup * pin_bpc,
                   pb.x_src != 0, pb.w_src != 0, pb.x_cdup, pb.w_cdup), dtype=np.int64)
    return sv, sb_cap
