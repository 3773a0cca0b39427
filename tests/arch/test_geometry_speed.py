"""The outline search's fast shortfall (:func:`edge_shortfall`) against the placement itself
(:func:`assign_edges`, the reference): the same shortfalls, exactly, on random dies."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from diptych.arch.geometry import DEFAULT_DIE, EDGES, assign_edges, edge_shortfall

lengths = st.floats(min_value=0.5, max_value=40.0, allow_nan=False)
d2d_edges = st.dictionaries(st.sampled_from(EDGES), st.floats(min_value=0.0, max_value=40.0),
                            max_size=2)


@settings(max_examples=400, deadline=None)
@given(w=lengths, h=lengths, hbm=st.integers(0, 12), links=st.integers(0, 40), d2d=d2d_edges,
       blocked=st.lists(st.sampled_from(EDGES), max_size=2, unique=True),
       hbm_edges=st.integers(1, 4), per_phy=st.floats(0.5, 12.0), per_link=st.floats(0.0, 3.0),
       keepout=st.floats(0.0, 2.0), depth=st.floats(0.0, 3.0))
def test_edge_shortfall_is_assign_edges_shortfall(w, h, hbm, links, d2d, blocked, hbm_edges,
                                                  per_phy, per_link, keepout, depth):
    w, h = max(w, h), min(w, h)
    spec = dataclasses.replace(DEFAULT_DIE, hbm_edges=hbm_edges, mm_edge_per_hbm_phy=per_phy,
                               mm_edge_per_link=per_link, corner_keepout_mm=keepout)
    kw = dict(hbm_phys=hbm, links=links, d2d=d2d, blocked=tuple(blocked), phy_depth_mm=depth,
              link_depth_mm=depth / 2, d2d_depth_mm=depth / 3)
    _, want = assign_edges(w, h, spec, **kw)
    assert edge_shortfall(w, h, spec, **kw) == want
