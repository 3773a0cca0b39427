"""A lazily simulated interpolation grid: the generic part of the serving step timer.

A function that is costly to evaluate (a simulation) is tabulated at the vertices of integer
axes (:class:`Axis`; :func:`geometric_axis` spaces them) and interpolated between them
(:func:`lerp`, :func:`bilinear` over tuples of numbers). Vertices are evaluated the first
time a query needs them (the caller memoises). Where the function is not linear between two
vertices, a cell is halved, down to neighbouring integers (exact: no integer lies between):
:class:`RefinedAxis` by the cell's simulated midpoint against the interpolant,
:func:`descend` by a caller's test of the cell; :func:`centre_gap` measures how far a
two-dimensional cell's centre is from its bilinear interpolant. Nothing here knows what is
tabulated (:mod:`diptych.sim.serving.grid_timer` tabulates a serving step's pieces).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable


def geometric_axis(dense_to: int, ratio: float, limit: int, start: int = 1) -> list[int]:
    """Integers ``start..dense_to`` then a geometric progression of ``ratio`` (rounded,
    strictly increasing) up to and including ``limit``."""
    pts = list(range(start, dense_to + 1))
    x = float(dense_to)
    while pts[-1] < limit:
        x *= ratio
        v = min(limit, int(round(x)))
        if v > pts[-1]:
            pts.append(v)
    return pts


def coarse_start(pts: list[int], upto: int, ratio: float) -> list[int]:
    """``pts`` (increasing, from 1) with its vertices below ``upto`` replaced by a geometric
    progression of ``ratio`` from 1 (rounded, strictly increasing: 1, 2, 4, … for 2): the
    coarse start of an axis that a :class:`RefinedAxis` refines where queries land."""
    low = [1]
    while low[-1] < upto:
        low.append(min(upto, max(low[-1] + 1, int(round(low[-1] * ratio)))))
    return low + [p for p in pts if p > upto]


class Axis:
    """Increasing integer vertices of one input of a tabulated function (``pts``, mutable:
    refinement inserts vertices); ``name`` is the input's, for error messages."""

    __slots__ = ("pts", "name")

    def __init__(self, pts: list[int], name: str):
        self.pts = pts
        self.name = name

    def locate(self, x: float) -> tuple[int, int, float]:
        """(lower vertex, upper vertex, weight of the upper one)."""
        pts = self.pts
        i = bisect_right(pts, x) - 1
        if i < 0:
            raise ValueError(f"{self.name} {x} is below the grid's first vertex {pts[0]}")
        a = pts[i]
        if a == x or i + 1 == len(pts):
            if a != x:
                raise ValueError(f"{self.name} {x} is beyond the grid's last vertex {a}")
            return a, a, 0.0
        b = pts[i + 1]
        return a, b, (x - a) / (b - a)


def lerp(u: tuple, v: tuple, w: float) -> list[float]:
    """``u + (v − u)·w``, element by element."""
    return [a + (b - a) * w for a, b in zip(u, v)]


class RefinedAxis(Axis):
    """An integer axis whose cells are halved where the tabulated function is not linear
    (:attr:`GridSpec.refine_tol`).

    A query in a cell ``(a, b)`` not yet certified simulates its midpoint ``m`` (which becomes
    a vertex): if ``|f(m) − lerp(f(a), f(b))(m)| ≤ tol·f(m)`` (``f`` the scalar ``measure``
    of the tabulated tuple) both halves are certified linear; otherwise the half holding the
    query is examined the same way, down to a cell of two neighbouring integers (exact: no
    integer lies between). A jump ``J`` of a staircase inside a cell shows at its midpoint as
    ``J/2``, so every jump larger than ``2·tol`` is isolated between neighbouring integers
    in ``log2(width)`` simulations. What a midpoint cannot see — a narrow spike between two
    agreeing points — is not hidden either: it stays an interpolation error (measured,
    docs/serving.md). Simulations are bounded by the integers of the cells queried."""

    __slots__ = ("value", "measure", "tol", "ok")

    def __init__(self, pts: list[int], name: str, value, measure, tol: float):
        super().__init__(list(pts), name)
        self.value, self.measure, self.tol = value, measure, tol
        self.ok: set[tuple[int, int]] = set()

    def locate(self, x: float) -> tuple[int, int, float]:
        a, b, w = super().locate(x)
        while w and (a, b) not in self.ok and b - a >= 2:
            m = (a + b) // 2
            fa, fb = self.measure(self.value(a)), self.measure(self.value(b))
            fm = self.measure(self.value(m))
            insort(self.pts, m)
            if abs(fm - (fa + (fb - fa) * (m - a) / (b - a))) <= self.tol * abs(fm):
                self.ok.update(((a, m), (m, b)))
            if x == m:
                return m, m, 0.0
            a, b = (a, m) if x < m else (m, b)
            w = (x - a) / (b - a)
        return a, b, w


def descend(a: int, b: int, x: float, accept: Callable[[int, int], bool]
            ) -> tuple[int, int, float]:
    """The cell of ``x`` (``a <= x <= b``, integers; ``a == b``: ``x`` on a vertex) found
    by halving ``(a, b)`` towards ``x`` until ``accept(a, b)`` holds or ``a`` and ``b`` are
    neighbouring integers: (lower vertex, upper vertex, weight of the upper one). Nothing
    is inserted anywhere: the cell depends on ``x`` and ``accept`` only, never on earlier
    queries (a shared axis that one query's halving refined would give another query a
    smaller cell, and a different interpolant, than it gets alone: results would depend on
    the order of the queries)."""
    w = (x - a) / (b - a) if b > a else 0.0
    while w and b - a >= 2:
        if accept(a, b):
            break
        m = (a + b) // 2          # strictly between a and b
        if x == m:
            return m, m, 0.0
        a, b = (a, m) if x < m else (m, b)
        w = (x - a) / (b - a)
    return a, b, w


def bilinear(fn, ax: Axis, ay: Axis, x: float, y: float, *extra
             ) -> tuple[list[float], tuple[int, int, int, int]]:
    """``fn`` (a tuple of numbers per vertex ``fn(x, y, *extra)``) interpolated at ``(x, y)``,
    and its cell ``(x0, x1, y0, y1)``."""
    return bilinear_in(fn, ax.locate(x), ay.locate(y), *extra)


def bilinear_in(fn, xcell: tuple[int, int, float], ycell: tuple[int, int, float], *extra
                ) -> tuple[list[float], tuple[int, int, int, int]]:
    """:func:`bilinear` in given cells: ``(lower, upper, weight of the upper)`` per axis."""
    x0, x1, wx = xcell
    y0, y1, wy = ycell
    lo = fn(x0, y0, *extra)
    if wx:
        lo = lerp(lo, fn(x1, y0, *extra), wx)
    if not wy:
        return list(lo), (x0, x1, y0, y1)
    hi = fn(x0, y1, *extra)
    if wx:
        hi = lerp(hi, fn(x1, y1, *extra), wx)
    return lerp(lo, hi, wy), (x0, x1, y0, y1)


def centre_gap(fn, cell: tuple[int, int, int, int], extra: tuple,
               measure: Callable[[tuple, int], float], per_token: bool) -> float:
    """How far a cell of ``fn`` is from bilinear: the relative gap in ``measure`` between the
    cell's centre evaluated and its interpolant (0 for a cell without an interior point).
    ``measure(value, x)`` reduces a tuple to a scalar (``x``: the centre's first coordinate
    when ``per_token``, else 1)."""
    x0, x1, y0, y1 = cell
    if x1 - x0 < 2 and y1 - y0 < 2:
        return 0.0
    xm, ym = (x0 + x1) // 2, (y0 + y1) // 2
    wx = (xm - x0) / (x1 - x0) if x1 > x0 else 0.0
    wy = (ym - y0) / (y1 - y0) if y1 > y0 else 0.0
    lo = lerp(fn(x0, y0, *extra), fn(x1, y0, *extra), wx)
    hi = lerp(fn(x0, y1, *extra), fn(x1, y1, *extra), wx)
    t = xm if per_token else 1
    want = measure(fn(xm, ym, *extra), t)
    return abs(measure(lerp(lo, hi, wy), t) - want) / want
