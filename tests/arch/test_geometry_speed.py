"""The outline search's fast shortfall (:func:`edge_shortfall`) against the placement itself
(:func:`assign_edges`, the reference): the same shortfalls, exactly, on random dies."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch.geometry import assign_edges, edge_shortfall
from diptych.arch.tables import DEFAULT_DIE, EDGES

lengths = st.floats(min_value=0.5, max_value=40.0, allow_nan=False)
d2d_edges = st.dictionaries(st.sampled_from(EDGES), st.floats(min_value=0.0, max_value=40.0),
                            max_size=2)


@st.composite
def dies(draw):
    """A die (w, h: either orientation), its spec and its interfaces (edge_shortfall's
    keyword arguments)."""
    spec = dataclasses.replace(DEFAULT_DIE, hbm_edges=draw(st.integers(1, 4)),
                               mm_edge_per_hbm_phy=draw(st.floats(0.5, 12.0)),
                               mm_edge_per_link=draw(st.floats(0.0, 3.0)),
                               corner_keepout_mm=draw(st.floats(0.0, 2.0)))
    depth = draw(st.floats(0.0, 3.0))
    kw = dict(hbm_phys=draw(st.integers(0, 12)), links=draw(st.integers(0, 40)),
              d2d=draw(d2d_edges),
              blocked=tuple(draw(st.lists(st.sampled_from(EDGES), max_size=2, unique=True))),
              phy_depth_mm=depth, link_depth_mm=depth / 2, d2d_depth_mm=depth / 3,
              tier_phys=draw(st.integers(0, 10)), tier_mm=draw(st.floats(0.5, 8.0)),
              tier_depth_mm=depth / 4)
    return draw(lengths), draw(lengths), spec, kw


@settings(max_examples=400, deadline=None)
@given(die=dies())
def test_edge_shortfall_is_assign_edges_shortfall(die):
    w, h, spec, kw = die
    w, h = max(w, h), min(w, h)
    _, want = assign_edges(w, h, spec, **kw)
    assert edge_shortfall(w, h, spec, **kw) == want


@settings(max_examples=300, deadline=None)
@given(area=st.floats(min_value=20.0, max_value=1200.0), hbm=st.integers(0, 12),
       links=st.integers(0, 30), d2d=d2d_edges,
       blocked=st.lists(st.sampled_from(EDGES), max_size=2, unique=True),
       hbm_edges=st.integers(1, 4), per_phy=st.floats(2.0, 12.0), ratio=st.floats(1.0, 3.0),
       depth=st.floats(0.0, 3.0), link_depth=st.floats(0.0, 3.0), d2d_depth=st.floats(0.0, 3.0),
       n=st.sampled_from([1, 7, 60]))
def test_the_pruned_fit_probe_agrees_with_the_scan(area, hbm, links, d2d, blocked, hbm_edges,
                                                   per_phy, ratio, depth, link_depth,
                                                   d2d_depth, n):
    """``_outline(fits_only=True)`` (which skips dies whose PHY sites cannot fit) answers
    whether an outline fits exactly as the full scan, and returns the same first fit."""
    from diptych.arch.geometry import _outline

    spec = dataclasses.replace(DEFAULT_DIE, hbm_edges=hbm_edges, mm_edge_per_hbm_phy=per_phy,
                               max_aspect_ratio=ratio)
    kw = dict(hbm_phys=hbm, links=links, d2d=d2d, blocked=tuple(blocked), phy_depth_mm=depth,
              link_depth_mm=depth * link_depth, d2d_depth_mm=depth * d2d_depth)
    full = _outline(area, spec, n, **kw)
    fast = _outline(area, spec, n, fits_only=True, **kw)
    assert fast[2] == full[2]
    if full[2]:
        assert fast == full


@settings(max_examples=400, deadline=None)
@given(die=dies())
def test_shortfall_scan_is_edge_shortfall(die):
    """The scan's per-outline shortfall (arch/geometry.py ``shortfall_scan``, what
    ``_outline`` asks at each ratio) is ``_shortfall_mm`` of :func:`edge_shortfall` exactly,
    on dies of either orientation, one scan asked about several outlines in turn."""
    from diptych.arch.geometry import _shortfall_mm, shortfall_scan

    w, h, spec, kw = die
    miss = shortfall_scan(spec, **kw)
    for ww, hh in ((w, h), (h, w), (w * 1.5, h), (w, h * 0.5)):
        assert miss(ww, hh) == _shortfall_mm(edge_shortfall(ww, hh, spec, **kw), spec)
