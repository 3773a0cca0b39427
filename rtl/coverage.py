"""Bench coverage you can read: how many of each corner class a :class:`~diptych.rtl.plan.Plan`
exercises, and the classes each bench configuration claims (issue 26 item 6).

The counts come from the plan alone, never from the RTL: its issue schedule (the cycles with
``in_valid``, its ``runs`` included), the output cycles it predicts per tile and the golden
model's expected bits. A plan the scoreboard passes showed exactly these outputs, so the counts
are also what the array did. Classes (the same set for every datapath; a class a datapath
cannot reach is not claimed for it):

* ``bubbles``: idle cycles (``in_valid`` low) strictly between the first and last issue of a
  tile (OS: a tile ends at ``in_last``; WS: one starts at ``in_first``).
* ``back_to_back``: tiles (after the first) whose first issue is the earliest cycle the timing
  contract allows after the previous tile (:func:`diptych.sim.timing.os_schedule` /
  :func:`~diptych.sim.timing.ws_schedule`, as the plans are made).
* ``int32_wrap``: INT8-mode output elements whose exact sum leaves the int32 range (the
  accumulator must wrap; a saturating one fails). OS: the exact sums are re-derived here from
  the lanes of every step (and checked against the expected bits modulo 2³²). WS: the exact
  sum is the top-edge partial sum (signed int32) plus the products' sum, which is the expected
  bits minus the partial sum modulo 2³² read as signed, since at most 2R products of
  magnitude ≤ 2¹⁴ cannot leave the int32 range themselves.
* ``zero_out``, ``neg_zero_out``, ``inf_out``, ``nan_out``: FP-mode output elements (FP32
  bits) that are ±0, −0, ±Inf, NaN.
* Block-scaled plans (``mx``, ``mxdot4``, ``mxint8``, ``fp4dot8``) also count the rounding classes of
  :data:`EXACT_CLASSES` from each output's exact value (:mod:`diptych.rtl.coverage_exact`):
  ``inexact_out``, ``tie_out``, ``subnormal_exact`` (a nonzero exact value below 2^-126, which
  every datapath flushes: no expected output is subnormal) and ``saturated_out``.

For the other datapaths the unit-level classes (ties, inexact, subnormal inputs and results)
are the FP-unit vectors' (docs/rtl.md).
"""

from __future__ import annotations

from collections import Counter

from ..sim import timing
from .coverage_exact import EXACT_CLASSES, exact_counts
from .datapath import get_datapath
from .plan import Plan, unpack
from .special_plan import special_tiles

__all__ = ["CLASSES", "EXACT_CLASSES", "count", "total", "claims", "missing",
            "claim_errors", "describe"]

CLASSES = ("bubbles", "back_to_back", "int32_wrap", "zero_out", "neg_zero_out", "inf_out",
           "nan_out")
_FP_CLASSES = ("zero_out", "neg_zero_out", "inf_out", "nan_out")


def _issues(plan: Plan) -> list[tuple[int, int, dict]]:
    """``(first, last, values)`` stretches of cycles with ``in_valid`` high, in cycle order (a
    ``run`` is one stretch unless its values mark a tile boundary, then one per cycle)."""
    out = [(c, c, v) for c, v in plan.inputs.items() if v.get("in_valid")]
    for first, last, v in plan.runs:
        if not v.get("in_valid"):
            continue
        if v.get("in_last") or v.get("in_first"):
            out += [(c, c, v) for c in range(first, last + 1)]
        else:
            out.append((first, last, v))
    return sorted(out, key=lambda s: s[0])


def _tiles(plan: Plan) -> list[list[tuple[int, int, dict]]]:
    """The issue stretches grouped per tile, in order."""
    tiles: list[list] = []
    cur: list = []
    for s in _issues(plan):
        if plan.dataflow == "ws" and s[2].get("in_first") and cur:
            tiles.append(cur)
            cur = []
        cur.append(s)
        if plan.dataflow == "os" and s[2].get("in_last"):
            tiles.append(cur)
            cur = []
    if cur:
        tiles.append(cur)
    if len(tiles) != plan.n_tiles:
        raise ValueError(f"the plan's issue schedule has {len(tiles)} tiles, its n_tiles is "
                         f"{plan.n_tiles}")
    return tiles


def _earliest_first(plan: Plan, prev, tile) -> int:
    """The earliest legal first issue of ``tile`` after ``prev`` (both lists of stretches)."""
    R, C = plan.rows, plan.cols
    n = sum(last - first + 1 for first, last, _ in tile)
    if plan.dataflow == "os":
        return timing.os_schedule(R, C, [1, n], start=prev[-1][1])[1][0]
    first, last = prev[0][0], prev[-1][1]
    return timing.ws_schedule(R, C, [last - first + 1, n], start=first - R)[1][1][0]


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) else v


def _os_int8_sums(plan: Plan, tile) -> list[list[int]]:
    """Exact integer sums C[i][j] of an INT8-mode OS tile, from its steps' lanes."""
    dp = get_datapath(plan.dtype)
    n, eb = dp.macs_per_cycle("int8"), dp.element_bits("int8")
    acc = [[0] * plan.cols for _ in range(plan.rows)]
    for first, last, v in tile:
        times = last - first + 1
        a = [[_signed(e, eb) for e in unpack(lane, eb, n)]
             for lane in unpack(v["a_data"], plan.lane_bits, plan.rows)]
        b = [[_signed(e, eb) for e in unpack(lane, eb, n)]
             for lane in unpack(v["b_data"], plan.lane_bits, plan.cols)]
        for i in range(plan.rows):
            for j in range(plan.cols):
                acc[i][j] += times * sum(x * y for x, y in zip(a[i], b[j]))
    return acc


def _ws_int8_sums(plan: Plan, tile, words) -> list[list[int]]:
    """Exact integer sums of an INT8-mode WS tile: partial sum plus products (module
    docstring); the products' bound is checked."""
    depth = timing.ws_stationary_depth(plan.rows, get_datapath(plan.dtype).macs_per_cycle("int8"))
    if depth * 2**14 >= 2**31:
        raise ValueError(f"{depth} INT8 products may leave the int32 range themselves")
    out = []
    for (cycle, _, v), row in zip(tile, words):
        psum = unpack(v.get("psum_data", 0), 32, plan.cols)
        out.append([_signed(p, 32) + _signed((w - p) & 0xFFFFFFFF, 32)
                    for p, w in zip(psum, row)])
    return out


def _fp_classes(word: int) -> list[str]:
    exp, frac = (word >> 23) & 0xFF, word & 0x7FFFFF
    if exp == 0 and frac == 0:
        return ["zero_out"] + (["neg_zero_out"] if word >> 31 else [])
    if exp == 0xFF:
        return ["nan_out" if frac else "inf_out"]
    return []


def count(plan: Plan) -> Counter:
    """The corner classes ``plan`` exercises, with how many times (module docstring).

    ValueError when the issue schedule does not split into ``plan.n_tiles`` tiles or an INT8
    OS tile's re-derived sums disagree with the expected bits (the plan is inconsistent)."""
    c = Counter(dict.fromkeys(CLASSES, 0))
    tiles = _tiles(plan)
    for t, tile in enumerate(tiles):
        span = tile[-1][1] - tile[0][0] + 1
        c["bubbles"] += span - sum(last - first + 1 for first, last, _ in tile)
        if t and tile[0][0] == _earliest_first(plan, tiles[t - 1], tile):
            c["back_to_back"] += 1
        mode = plan.modes[t]
        words = [plan.expected[cy][1] for cy in plan.predicted[t]]
        if mode == "int8":
            sums = (_os_int8_sums(plan, tile) if plan.dataflow == "os"
                    else _ws_int8_sums(plan, tile, words))
            for i, row in enumerate(sums):
                for j, s in enumerate(row):
                    if (s & 0xFFFFFFFF) != words[i][j]:
                        raise ValueError(f"tile {t}: the exact sum {s} of output ({i}, {j}) "
                                         f"disagrees with the expected bits {words[i][j]:#010x}")
                    c["int32_wrap"] += not -2**31 <= s < 2**31
        else:
            for w in words:
                for x in w:
                    for k in _fp_classes(x):
                        c[k] += 1
    if get_datapath(plan.dtype).block_scaled:
        c.update(exact_counts(plan, tiles, [[plan.expected[cy][1] for cy in plan.predicted[t]]
                                            for t in range(len(tiles))]))
    return c


def total(counts) -> Counter:
    """Several plans' counts (:func:`count` results, or dicts) added up, every class listed."""
    out = Counter(dict.fromkeys(CLASSES, 0))
    for c in counts:
        out.update(c)
    return out


def claims(rows: int, cols: int, dtype: str, dataflow: str, *, random_tiles: int = 0,
           directed=(), modes=None) -> tuple[str, ...]:
    """The classes a bench configuration claims to exercise: its random plans have
    ``random_tiles`` tiles each (0: none), then the ``directed`` plans of
    :func:`diptych.rtl.verilator.bench_plans` in ``modes`` (default: every mode of the
    datapath). Only what the plans guarantee by construction, whatever the seed:

    * ``bubbles``: random plans of two tiles or more (tile 1 has at least one bubble inside).
    * ``back_to_back``: the special-value plan of two tiles or more (its tiles are all at the
      earliest legal cycles; a block-scaled PE's: of two modes or more).
    * ``int32_wrap``: the ``os_wrap`` tile; the special-value plan on a WS array in INT8 (a
      partial sum of −2³¹ against negative products).
    * ``zero_out``, ``nan_out``: the special-value plan with an FP mode (block-scaled PEs: of
      every mode; one mode's block special values do not always reach a zero or NaN sum);
      ``neg_zero_out`` as well on WS arrays (a −0 partial sum meeting only −0 products; an OS
      tile starts from +0); ``inf_out`` as well with a BF16 or E5M2 mode on a PE without block
      scales (E4M3 has no Inf; the block-scaled plans' Inf sums are too few to promise).
    * block-scaled PEs, the special-value plan of every mode: ``inexact_out``,
      ``subnormal_exact``; ``tie_out`` (not on an MXINT8 or FP4 OS array: from +0 a tile of INT8
      products has at most 20 significant bits, and the FP4 directed plan's one-step tiles at
      most 17 (an 11-bit step sum times NVFP4's scale significands), so no tie);
      ``saturated_out`` on the round-toward-zero PEs (``mxdot4``, ``mxint8``, ``fp4dot8``;
      ``mx`` overflows to Inf).
    """
    dp = get_datapath(dtype)
    modes = tuple(modes or dp.modes)
    special = "special" in directed
    fp = [m for m in modes if m != "int8"]
    out = []
    if random_tiles >= 2:
        out.append("bubbles")
    if special and (len(modes) >= 2 or not dp.block_scaled and sum(
            len(special_tiles(rows, cols, dtype, dataflow, m)) for m in modes) >= 2):
        out.append("back_to_back")
    if "os_wrap" in directed or (special and dataflow == "ws" and "int8" in modes):
        out.append("int32_wrap")
    if special and fp and (not dp.block_scaled or set(modes) == set(dp.modes)):
        out.append("zero_out")
        if dataflow == "ws" and dp.rule != "mxint8":      # INT8 products have no −0
            out.append("neg_zero_out")
        if not dp.block_scaled and any(m == "bf16" or "e5m2" in m for m in fp):
            out.append("inf_out")
        out.append("nan_out")
    if special and dp.block_scaled and set(modes) == set(dp.modes):
        out += ["inexact_out", "subnormal_exact"]
        if dp.rule not in ("mxint8", "fp4dot8") or dataflow == "ws":
            out.append("tie_out")
        if not dp.block_port:
            out.append("saturated_out")
    return tuple(out)


def missing(counts, claimed) -> list[str]:
    """The claimed classes with no hit (empty: the claim holds)."""
    return [k for k in claimed if not counts.get(k)]


def claim_errors(counts, claimed, config: str) -> list[str]:
    """One error per claimed class with no hit, naming the class and ``config``."""
    return [f"coverage: configuration {config} claims corner class {k!r} but its plans "
            f"exercised none ({describe(counts)})" for k in missing(counts, claimed)]


def describe(counts) -> str:
    """One line: ``class count`` for every class (and the rounding classes of block-scaled
    plans when ``counts`` has them)."""
    shown = CLASSES + tuple(k for k in EXACT_CLASSES if k in counts)
    return ", ".join(f"{k} {counts.get(k, 0)}" for k in shown)
